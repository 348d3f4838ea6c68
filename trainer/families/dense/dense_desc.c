/* dense_desc.c - the dense family's descriptor (family_desc.h): its config keys (the hybrid's attention keys)
 * and their consistency, parameter counts and FLOP terms (the hybrid family's, per layer kind: every layer
 * "attn"), its one layer kind, its CP faults and data files.  No Hugging Face mapping.  dtype-independent. */
#include "trainer/families/dense/dense_config.h"

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
    .check = ls_hybrid_check_attn,
    .counts = ls_hybrid_counts,
    .layer_kinds = LAYER_KINDS,
    .layer_kind = layer_kind,
    .flop_terms = ls_hybrid_flop_terms,
    .cp_faults = CP_FAULTS, /* no routed experts, no Hugging Face mapping: those members are NULL */
    .tiny_config = "trainer/families/dense/dense-tiny.json",
    .reference = "trainer/families/dense/dense_ref.py",
    .profile = "trainer/families/dense/dense.json",
    .parity = "trainer/families/dense/parity.json",
};
