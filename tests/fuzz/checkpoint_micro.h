/* checkpoint_micro.h - the micro hybrid model of the checkpoint fuzz target
 * and its seed corpus (tests/trainer/test_checkpoint.c writes and checks the seeds):
 * one GDN layer, d_model 4, vocab 4, so a checkpoint is a few KiB.
 * Header-only; numeric (LS_K names of the including file's dtype). */
#ifndef LS_TESTS_FUZZ_CHECKPOINT_MICRO_H
#define LS_TESTS_FUZZ_CHECKPOINT_MICRO_H
#include <string.h>

#include "trainer/families/hybrid/hybrid_config.h"
#include "trainer/model/params.h"
#include "trainer/families/families.h"

static inline ls_model_config ls_micro_config(void) {
    ls_model_config c;
    memset(&c, 0, sizeof c);
    c.family = &ls_family_desc_hybrid;
    c.vocab = 4;
    c.d_model = 4;
    c.n_layers = 1;
    c.ffn_dim = 4;
    c.rms_eps = 1e-6;
    c.rope_theta = 10000;
    ls_hybrid_keys_mut(&c)->gdn_hk = 1;
    ls_hybrid_keys_mut(&c)->gdn_hv = 1;
    ls_hybrid_keys_mut(&c)->gdn_dk = 2;
    ls_hybrid_keys_mut(&c)->gdn_dv = 2;
    ls_hybrid_keys_mut(&c)->conv_kernel = 2;
    ls_hybrid_keys_mut(&c)->attn_heads = 1;
    ls_hybrid_keys_mut(&c)->attn_kv_heads = 1;
    ls_hybrid_keys_mut(&c)->head_dim = 2;
    ls_hybrid_keys_mut(&c)->rope_dim = 2;
    return c;
}

/* The micro model in `mode` (lora: r 1, alpha 2), initialised from seed. */
static inline ls_status ls_micro_params(ls_params **out, ls_train_mode mode, uint64_t seed) {
    ls_model_config c = ls_micro_config();
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_r = 1;
    o.lora_alpha = 2;
    char err[256];
    return LS_K(ls_params_init)(out, &c, &o, seed, err, sizeof err);
}
#endif
