/* hybrid_config.h - the hybrid family's own config keys (docs/model.md §6)
 * and its descriptor (family_desc.h).  Its keys live in the config's family
 * block (ls_model_config.fam_keys), reached through ls_hybrid_keys_of.
 * dtype-independent. */
#ifndef LS_TRAINER_HYBRID_CONFIG_H
#define LS_TRAINER_HYBRID_CONFIG_H
#include <assert.h>
#include <string.h>
#include "trainer/model/config.h"

typedef struct {
    int gdn_hk, gdn_hv, gdn_dk, gdn_dv, conv_kernel;
    int attn_heads, attn_kv_heads, head_dim, rope_dim;
} ls_hybrid_keys;
_Static_assert(sizeof(ls_hybrid_keys) <= LS_FAMILY_KEYS_BYTES, "the hybrid keys fit the config's family block");

extern const ls_family_desc ls_family_desc_hybrid;

/* The hybrid code (this folder's tables, layers, segments, state, CP, plan terms, counts and FLOP terms) serves
 * every family whose config keys are an ls_hybrid_keys block (keys_bytes == sizeof(ls_hybrid_keys): keys it
 * does not declare stay 0) and whose descriptor names each layer "attn" or "gdn" (layer_kind): the hybrid family,
 * and a family of its attention layers only (trainer/families/dense).  Such a family's keys may be entries of
 * ls_hybrid_key_table (one definition of a key two families share). */
static inline int ls_hybrid_code_serves(const ls_family_desc *f) {
    return f == &ls_family_desc_hybrid || (f && f->keys_bytes == sizeof(ls_hybrid_keys));
}

/* c's hybrid keys (c's family served by the hybrid code): a view into c, as long as c lives. */
static inline const ls_hybrid_keys *ls_hybrid_keys_of(const ls_model_config *c) {
    assert(ls_hybrid_code_serves(c->family));
    return (const ls_hybrid_keys *)(const void *)c->fam_keys.bytes;
}
static inline ls_hybrid_keys *ls_hybrid_keys_mut(ls_model_config *c) {
    assert(ls_hybrid_code_serves(c->family));
    return (ls_hybrid_keys *)(void *)c->fam_keys.bytes;
}

/* 1 when layer `layer` of the hybrid family is a gated full-attention layer (every fourth:
 * docs/model.md §1), 0 for GDN. */
static inline int ls_hybrid_layer_is_attn(int layer) { return (layer + 1) % 4 == 0; }
/* 1 when layer `layer` of c (a family the hybrid code serves) is an attention layer, as its descriptor says. */
static inline int ls_hybrid_cfg_is_attn(const ls_model_config *c, int layer) {
    return strcmp(c->family->layer_kind(c, layer), "attn") == 0;
}

/* The hybrid keys' table (docs/model.md §6), in ls_hybrid_keys order: the GDN keys, then from
 * LS_HYBRID_ATTN_KEY0 the LS_HYBRID_ATTN_KEYS attention keys (attn_heads, attn_kv_heads, head_dim, rope_dim). */
#define LS_HYBRID_ATTN_KEY0 5
#define LS_HYBRID_ATTN_KEYS 4
extern const ls_family_key ls_hybrid_key_table[LS_HYBRID_ATTN_KEY0 + LS_HYBRID_ATTN_KEYS];
/* The descriptor's counts and flop_terms (family_desc.h), per layer as c's layer_kind says. */
void ls_hybrid_counts(const ls_model_config *c, size_t r, int lora_experts, ls_count *base, ls_count *adapt,
                      size_t *frozen);
/* The attention keys' consistency (attn_heads a multiple of attn_kv_heads, rope_dim even and <= head_dim):
 * ls_family_desc.check's contract; the dense family's whole check. */
ls_status ls_hybrid_check_attn(const ls_model_config *c, const char *where, char *err, size_t err_len);
void ls_hybrid_flop_terms(const ls_model_config *c, int r, ls_flop_terms *t);
#endif
