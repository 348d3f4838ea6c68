/* test_hybrid_util.h - helpers shared by the float64 trainer tests
 * (test_hybrid_step.c, test_hybrid_fd.c): the tiny config, random batches and
 * parameters, gradient flattening and comparison, a full-sequence log-prob
 * forward, and the GRPO objective of docs/model.md §4 written out again here so
 * that the tests do not check the trainer's loss kernel against itself. */
#ifndef LS_TEST_HYBRID_UTIL_H
#define LS_TEST_HYBRID_UTIL_H
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/base/rng.h"
#include "trainer/step/step.h"
#include "trainer/families/families.h"
#include "trainer/families/hybrid/hybrid_family.h"
#include "tests/trainer/test_model_config.h"

#define K(x) LS_K(x)

static inline ls_model_config tiny_cfg(void) { return ls_test_model_config("hybrid-tiny.json"); }

/* A batch with random prompt/responses (lengths given) and rewards. */
static inline ls_batch *make_batch(size_t P, size_t G, const size_t *R, uint64_t seed) {
    ls_batch *b = NULL;
    cr_assert_eq(ls_batch_alloc(&b, G), LS_OK);
    ls_rng r;
    ls_rng_seed(&r, seed);
    int32_t ids[4096];
    cr_assert_leq(P, 4096);
    for (size_t i = 0; i < P; i++) ids[i] = (int32_t)ls_rng_below(&r, 256);
    cr_assert_eq(ls_batch_set_prompt(b, ids, P), LS_OK);
    for (size_t g = 0; g < G; g++) {
        for (size_t t = 0; t < R[g]; t++) ids[t] = (int32_t)ls_rng_below(&r, 256);
        cr_assert_eq(ls_batch_set_response(b, g, ids, R[g]), LS_OK);
        b->rewards[g] = ls_rng_uniform(&r);
    }
    return b;
}

static inline ls_params *make_params(ls_train_mode mode, ls_grad_mode gm, uint64_t seed) {
    ls_model_config c = tiny_cfg();
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.grad_mode = gm;
    o.lora_init_random = 1;
    ls_params *p = NULL;
    char err[256];
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, seed, err, sizeof err), LS_OK, "%s", err);
    return p;
}

/* Move every trainable tensor by amp * U(-1, 1) per element: in full mode
 * the policy then differs from the frozen reference copy (KL != 0). */
static inline void jitter_trainable(ls_params *p, double amp, uint64_t seed) {
    ls_rng r;
    ls_rng_seed(&r, seed);
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) p->t[i].w[j] += amp * (2 * ls_rng_uniform(&r) - 1);
}

/* Gradient of every trainable tensor, flattened. */
static inline double *grads_of(const ls_params *p) {
    double *g = malloc(p->n_trainable * sizeof *g);
    cr_assert_not_null(g);
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) g[k++] = p->t[i].g[j];
    return g;
}

/* Returns max_i |a-b| / max_i |b| over everything; *worst_tensor receives
 * the worst per-tensor relative error (same measure within one tensor). */
static inline double rel_err(const ls_params *p, const double *a, const double *b, double *worst_tensor,
                             char *worst_name) {
    double num = 0, den = 0;
    size_t k = 0;
    *worst_tensor = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!p->t[i].trainable) continue;
        double tn = 0, td = 0;
        for (size_t j = 0; j < p->t[i].numel; j++, k++) {
            tn = fmax(tn, fabs(a[k] - b[k]));
            td = fmax(td, fabs(b[k]));
        }
        num = fmax(num, tn);
        den = fmax(den, td);
        if (td > 0 && tn / td > *worst_tensor) {
            *worst_tensor = tn / td;
            snprintf(worst_name, 96, "%s", p->t[i].name);
        }
    }
    return num / den;
}

static inline double *run_grads(ls_params *p, ls_batch *b, ls_strategy s, ls_step_result *res) {
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.strategy = s;
    o.page_size = 16;
    o.capture_chunk = 13; /* several capture segments, not aligned with the pages */
    char err[256] = "";
    cr_assert_eq(K(ls_step_grads)(p, b, NULL, &o, NULL, res, err, sizeof err), LS_OK, "%s", err);
    return grads_of(p);
}

/* Log-probs of member i's response as one full sequence from position 0
 * (prompt + response, no carried state, no capture).  lp [R_i]. */
static inline void full_sequence_logprobs(const ls_params *p, const ls_batch *b, size_t i, double *lp) {
    size_t P = b->P, R = b->R[i], T = P + R - 1;
    int32_t *seq = malloc(T * sizeof *seq);
    ls_real *out = malloc(R * sizeof *out);
    cr_assert(seq && out);
    memcpy(seq, b->prompt, P * sizeof *seq);
    memcpy(seq + P, b->resp[i], (R - 1) * sizeof *seq);
    ls_seg_io io = {.tokens = seq, .T = T, .targets = b->resp[i], .score_from = P - 1, .logp = out};
    cr_assert_eq(K(ls_segment_forward)(p, &io), LS_OK);
    for (size_t t = 0; t < R; t++) lp[t] = (double)out[t];
    free(seq);
    free(out);
}

/* Token counts of the clip's branches over a batch (docs/model.md §4). */
typedef struct {
    size_t clipped_pos; /* A > 0, rho > 1 + eps: zero policy gradient */
    size_t clipped_neg; /* A < 0, rho < 1 - eps: zero policy gradient */
    size_t active;      /* unclipped branch active */
} clip_counts;

/* docs/model.md §4, member i: returns
 *   (1/(G R)) sum_t [ -min(rho A, clip(rho, 1-eps, 1+eps) A) + beta KL_t ],
 * KL_t = e^{ref - lp} - (ref - lp) - 1; dlp [R] (may be NULL) = dL/dlp;
 * cc (may be NULL) counts the tokens per branch. */
static inline double grpo_member(const double *lp, const double *old, const double *ref, double A, double eps,
                                 double beta, size_t G, size_t R, double *dlp, clip_counts *cc) {
    double sum = 0, w = 1.0 / ((double)G * (double)R);
    for (size_t t = 0; t < R; t++) {
        double rho = exp(lp[t] - old[t]), cl = fmin(fmax(rho, 1 - eps), 1 + eps);
        double un = rho * A, clipped = cl * A, dr = ref[t] - lp[t];
        int active = un <= clipped; /* min picks the unclipped term */
        sum += -fmin(un, clipped) + beta * (exp(dr) - dr - 1);
        if (dlp) dlp[t] = w * ((active ? -rho * A : 0) + beta * (1 - exp(dr)));
        if (cc) {
            if (active) cc->active++;
            else if (A > 0) cc->clipped_pos++;
            else cc->clipped_neg++;
        }
    }
    return w * sum;
}
#endif
