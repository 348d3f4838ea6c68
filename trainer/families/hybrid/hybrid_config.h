/* hybrid_config.h - the hybrid family's own config keys (docs/model.md §6)
 * and its descriptor (family_desc.h).  Its keys live in the config's family
 * block (ls_model_config.fam_keys), reached through ls_hybrid_keys_of.
 * dtype-independent. */
#ifndef LS_TRAINER_HYBRID_CONFIG_H
#define LS_TRAINER_HYBRID_CONFIG_H
#include <assert.h>
#include "trainer/model/config.h"

typedef struct {
    int gdn_hk, gdn_hv, gdn_dk, gdn_dv, conv_kernel;
    int attn_heads, attn_kv_heads, head_dim, rope_dim;
} ls_hybrid_keys;
_Static_assert(sizeof(ls_hybrid_keys) <= LS_FAMILY_KEYS_BYTES, "the hybrid keys fit the config's family block");

extern const ls_family_desc ls_family_desc_hybrid;

/* c's hybrid keys (c must be a hybrid config): a view into c, as long as c lives. */
static inline const ls_hybrid_keys *ls_hybrid_keys_of(const ls_model_config *c) {
    assert(c->family == &ls_family_desc_hybrid);
    return (const ls_hybrid_keys *)(const void *)c->fam_keys.bytes;
}
static inline ls_hybrid_keys *ls_hybrid_keys_mut(ls_model_config *c) {
    assert(c->family == &ls_family_desc_hybrid);
    return (ls_hybrid_keys *)(void *)c->fam_keys.bytes;
}

/* 1 when layer `layer` is a gated full-attention layer (every fourth:
 * docs/model.md §1), 0 for GDN. */
static inline int ls_hybrid_layer_is_attn(int layer) { return (layer + 1) % 4 == 0; }
#endif
