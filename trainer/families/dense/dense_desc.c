/* dense_desc.c - the dense family's descriptor (family_desc.h): its config keys (the hybrid's attention keys)
 * and their consistency, parameter counts and FLOP terms (the hybrid family's, per layer kind: every layer
 * "attn"), its one layer kind, its CP faults and data files.  No Hugging Face mapping.  dtype-independent. */
#include "trainer/families/dense/dense_config.h"

#include <stdio.h>

#define REQUIRE(cond, ...)                                                                               \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            int n_ = snprintf(err, err_len, "%s: ", where);                                             \
            if (n_ >= 0 && (size_t)n_ < err_len) snprintf(err + n_, err_len - (size_t)n_, __VA_ARGS__); \
            return LS_ERR_FORMAT;                                                                        \
        }                                                                                                \
    } while (0)

static ls_status check(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    const ls_hybrid_keys *k = ls_hybrid_keys_of(c);
    REQUIRE(k->attn_heads % k->attn_kv_heads == 0, "key 'attn_heads': must be a positive multiple of 'attn_kv_heads'");
    REQUIRE(k->rope_dim % 2 == 0 && k->rope_dim <= k->head_dim, "key 'rope_dim': must be even and <= 'head_dim'");
    return LS_OK;
}

static const char *const LAYER_KINDS[] = {"attn", NULL};

static const char *layer_kind(const ls_model_config *c, int layer) {
    (void)c, (void)layer;
    return "attn";
}

/* cp-stale-start has no subject here: no state is handed between shards */
static const char *const CP_FAULTS[] = {"cp-local-attention", NULL};

const ls_family_desc ls_family_desc_dense = {
    .name = "dense",
    .summary = "gated full attention on every layer (the hybrid family's, no Gated DeltaNet), SwiGLU MLP: a test "
               "family and baseline (docs/model.md §1.5)",
    .keys = ls_hybrid_key_table + LS_HYBRID_ATTN_KEY0,
    .n_keys = LS_HYBRID_ATTN_KEYS,
    .keys_bytes = sizeof(ls_hybrid_keys),
    .check = check,
    .counts = ls_hybrid_counts,
    .routed_experts = NULL,
    .ep_others = NULL,
    .layer_kinds = LAYER_KINDS,
    .layer_kind = layer_kind,
    .flop_terms = ls_hybrid_flop_terms,
    .hf_model_types = NULL,
    .hf_keys = NULL,
    .hf_outer = NULL,
    .hf_map = NULL,
    .cp_faults = CP_FAULTS,
    .tiny_config = "trainer/families/dense/dense-tiny.json",
    .reference = "trainer/families/dense/dense_ref.py",
    .profile = "trainer/families/dense/dense.json",
    .parity = "trainer/families/dense/parity.json",
};
