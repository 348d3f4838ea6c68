/* mla_config.h - the mla family's own config keys (docs/model.md §6) and
 * its descriptor (family_desc.h).  Its keys live in the config's family
 * block (ls_model_config.fam_keys), reached through ls_mla_keys_of.
 * dtype-independent. */
#ifndef LS_TRAINER_MLA_CONFIG_H
#define LS_TRAINER_MLA_CONFIG_H
#include <assert.h>
#include "trainer/model/config.h"

typedef struct {
    int first_dense, heads, q_rank, kv_rank, d_nope, d_rope, d_v;
    int index_heads, index_dim, index_topk;
    int n_experts, n_group, topk_group, experts_per_token, expert_dim;
    double routed_scale;
} ls_mla_keys;
_Static_assert(sizeof(ls_mla_keys) <= LS_FAMILY_KEYS_BYTES, "the mla keys fit the config's family block");

extern const ls_family_desc ls_family_desc_mla;

/* c's mla keys (c must be an mla config): a view into c, as long as c lives. */
static inline const ls_mla_keys *ls_mla_keys_of(const ls_model_config *c) {
    assert(c->family == &ls_family_desc_mla);
    return (const ls_mla_keys *)(const void *)c->fam_keys.bytes;
}
static inline ls_mla_keys *ls_mla_keys_mut(ls_model_config *c) {
    assert(c->family == &ls_family_desc_mla);
    return (ls_mla_keys *)(void *)c->fam_keys.bytes;
}
#endif
