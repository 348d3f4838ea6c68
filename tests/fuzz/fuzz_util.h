/* fuzz_util.h - checks shared by the trainer-input fuzz targets (config,
 * rollouts, batch dump): field-by-field equality of configs, objectives and
 * batches, and the invariants every accepted batch satisfies.  Header-only
 * so that each target stays one source file. */
#ifndef LS_TESTS_FUZZ_UTIL_H
#define LS_TESTS_FUZZ_UTIL_H
#include <math.h>
#include <string.h>

#include "trainer/io/batch.h"
#include "trainer/model/config.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static inline int fuzz_cfg_equal(const ls_model_config *a, const ls_model_config *b) {
#define EQ(f) (a->f == b->f)
    if (!(EQ(family) && EQ(vocab) && EQ(d_model) && EQ(n_layers) && EQ(ffn_dim) && EQ(rms_eps) && EQ(rope_theta)))
        return 0;
    for (size_t i = 0; a->family && i < a->family->n_keys; i++) { /* the family's own keys, by its table */
        double x = 0, y = 0;
        if (ls_config_key_get(a, a->family->keys[i].key, &x) != LS_OK ||
            ls_config_key_get(b, a->family->keys[i].key, &y) != LS_OK || x != y)
            return 0;
    }
    return 1;
}

static inline int fuzz_obj_equal(const ls_objective *a, const ls_objective *b) {
    return EQ(train_mode) && EQ(lora_r) && EQ(lora_alpha) && EQ(lora_experts) && EQ(lora_init_random) &&
           EQ(grad_mode) && EQ(epsilon) && EQ(beta) && EQ(temperature);
#undef EQ
}

static inline int fuzz_reals_equal(const double *a, const double *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0; /* == : cJSON prints -0 as 0 */
    return 1;
}

static inline int fuzz_batch_equal(const ls_batch *a, const ls_batch *b) {
    if (a->P != b->P || a->G != b->G || memcmp(a->prompt, b->prompt, a->P * sizeof *a->prompt) != 0) return 0;
    if (!fuzz_reals_equal(a->rewards, b->rewards, a->G) || !fuzz_reals_equal(a->adv, b->adv, a->G)) return 0;
    for (size_t i = 0; i < a->G; i++) {
        if (a->R[i] != b->R[i] || memcmp(a->resp[i], b->resp[i], a->R[i] * sizeof *a->resp[i]) != 0) return 0;
        if (!fuzz_reals_equal(a->old_lp[i], b->old_lp[i], a->R[i])) return 0;
        if (!fuzz_reals_equal(a->ref_lp[i], b->ref_lp[i], a->R[i])) return 0;
    }
    return 1;
}

/* What every accepted batch holds (batch.h): ids in [0, vocab), P >= 2,
 * G >= 1, R >= 1, finite numbers, log-probs <= 0. */
static inline void fuzz_check_batch(const ls_batch *b, int vocab) {
    CHECK(b != NULL && b->G >= 1 && b->P >= 2);
    for (size_t t = 0; t < b->P; t++) CHECK(b->prompt[t] >= 0 && b->prompt[t] < vocab);
    for (size_t i = 0; i < b->G; i++) {
        CHECK(b->R[i] >= 1 && isfinite(b->rewards[i]) && isfinite(b->adv[i]));
        for (size_t t = 0; t < b->R[i]; t++) {
            CHECK(b->resp[i][t] >= 0 && b->resp[i][t] < vocab);
            CHECK(isfinite(b->old_lp[i][t]) && b->old_lp[i][t] <= 0);
            CHECK(isfinite(b->ref_lp[i][t]) && b->ref_lp[i][t] <= 0);
        }
    }
}

/* A refusal leaves nothing behind and says why. */
static inline void fuzz_check_refusal(ls_status st, const char *err) {
    CHECK(st == LS_ERR_FORMAT || st == LS_ERR_NONFINITE || st == LS_ERR_NOMEM);
    CHECK(st == LS_ERR_NOMEM || (memchr(err, '\0', 512) != NULL && err[0] != '\0'));
}
#endif
