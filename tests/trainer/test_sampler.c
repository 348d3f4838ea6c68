/* test_sampler.c - the nucleus sampler (trainer/step/sampler.h) against the simple
 * algorithm written out again here: a full stable merge sort of the
 * vocabulary (log-prob descending, ties by ascending id, NaN as -inf, so
 * of probability 0), the
 * running mass until top_p, the draw by cumulative sum.  For many families of
 * distributions (peaked, flat, ties, -inf and NaN entries, underflow,
 * subnormal and overflowing mass, unnormalised, V = 1, large V) and top_p
 * values, the same rng seed must give the same token on every draw and
 * leave the rng in the same state; a reference with a deliberately wrong tie
 * order must disagree (the comparison can fail); and the empirical
 * frequencies on a small V match the renormalised nucleus.  Compiled once per
 * real type (test_sampler: float32, test_sampler_f64). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/step/sampler.h"

#define K(x) LS_K(x)

/* ---- the reference ------------------------------------------------------- */

static double key_of(const ls_real *lp, size_t i) { return isnan(lp[i]) ? -INFINITY : (double)lp[i]; }

/* a before b in the order; wrong_ties: ties by descending id (the canary) */
static int before(const ls_real *lp, size_t a, size_t b, int wrong_ties) {
    double ka = key_of(lp, a), kb = key_of(lp, b);
    if (ka != kb) return ka > kb;
    return wrong_ties ? a > b : a < b;
}

static void merge_sort(size_t *o, size_t *tmp, size_t n, const ls_real *lp, int wrong_ties) {
    if (n < 2) return;
    size_t h = n / 2, i = 0, j = h, k = 0;
    merge_sort(o, tmp, h, lp, wrong_ties);
    merge_sort(o + h, tmp, n - h, lp, wrong_ties);
    while (i < h && j < n) tmp[k++] = before(lp, o[j], o[i], wrong_ties) ? o[j++] : o[i++];
    while (i < h) tmp[k++] = o[i++];
    while (j < n) tmp[k++] = o[j++];
    memcpy(o, tmp, n * sizeof *o);
}

static int32_t ref_sample(const ls_real *lp, size_t V, double top_p, ls_rng *r, size_t *o, size_t *tmp,
                          int wrong_ties) {
    for (size_t i = 0; i < V; i++) o[i] = i;
    merge_sort(o, tmp, V, lp, wrong_ties);
    double mass = 0;
    size_t n = 0;
    while (n < V && (n == 0 || mass < top_p)) mass += exp(key_of(lp, o[n++]));
    double u = ls_rng_uniform(r) * mass, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += exp(key_of(lp, o[i]));
        if (u < acc) return (int32_t)o[i];
    }
    return (int32_t)o[n - 1];
}

/* ---- distributions -------------------------------------------------------- */

typedef enum {
    F_PEAKED, F_GAUSS, F_FLAT, F_TIES, F_NEGINF, F_NAN, F_UNDERFLOW, F_SUBNORMAL, F_HALF_UNDER,
    F_UNNORM_LOW, F_UNNORM_HIGH, F_OVERFLOW, F_ZEROS, F_ONEHOT, F_COUNT
} family;

static const char *family_name[F_COUNT] = {
    "peaked", "gauss", "flat", "ties", "neginf", "nan", "underflow", "subnormal", "half_underflow",
    "unnorm_low", "unnorm_high", "overflow", "signed_zeros", "onehot"};

/* log-softmax of logits z [V] in double, into lp */
static void log_softmax(ls_real *lp, const double *z, size_t V) {
    double m = -INFINITY, s = 0;
    for (size_t i = 0; i < V; i++)
        if (z[i] > m) m = z[i];
    for (size_t i = 0; i < V; i++) s += exp(z[i] - m);
    for (size_t i = 0; i < V; i++) lp[i] = (ls_real)(z[i] - m - log(s));
}

static void make_dist(ls_real *lp, double *z, size_t V, family f, ls_rng *g) {
    switch (f) {
    case F_PEAKED:
    case F_GAUSS:
    case F_HALF_UNDER:
    case F_UNNORM_LOW:
    case F_UNNORM_HIGH: {
        double scale = f == F_PEAKED ? 6 : f == F_HALF_UNDER ? 400 : 1.5;
        for (size_t i = 0; i < V; i++) z[i] = scale * ls_rng_normal(g);
        log_softmax(lp, z, V);
        double shift = f == F_UNNORM_LOW ? log(0.4) : f == F_UNNORM_HIGH ? log(3.0) : 0;
        for (size_t i = 0; i < V; i++) lp[i] = (ls_real)((double)lp[i] + shift);
        break;
    }
    case F_FLAT:
        for (size_t i = 0; i < V; i++) lp[i] = (ls_real)-log((double)V);
        break;
    case F_TIES: /* four levels, many tokens on each */
        for (size_t i = 0; i < V; i++) z[i] = (double)ls_rng_below(g, 4);
        log_softmax(lp, z, V);
        break;
    case F_NEGINF:
    case F_NAN:
        for (size_t i = 0; i < V; i++) z[i] = 2 * ls_rng_normal(g);
        log_softmax(lp, z, V);
        for (size_t i = 0; i < V; i++)
            if (ls_rng_uniform(g) < 0.3) lp[i] = f == F_NAN && ls_rng_uniform(g) < 0.5 ? (ls_real)NAN : (ls_real)-INFINITY;
        if (V > 1 && ls_rng_uniform(g) < 0.2) /* sometimes every entry but none */
            for (size_t i = 0; i < V; i++) lp[i] = f == F_NAN && (i & 1) ? (ls_real)NAN : (ls_real)-INFINITY;
        break;
    case F_UNDERFLOW: /* every exp() is 0 (float32 reaches -1e38, far enough) */
        for (size_t i = 0; i < V; i++) lp[i] = (ls_real)(-800 - (double)ls_rng_below(g, 50));
        if (V > 2) lp[ls_rng_below(g, V)] = (ls_real)-INFINITY;
        break;
    case F_SUBNORMAL: /* positive masses below DBL_MIN: u * mass may round up to mass */
        for (size_t i = 0; i < V; i++) lp[i] = (ls_real)(-744.0 + 20 * ls_rng_uniform(g) - 20);
        if (ls_rng_uniform(g) < 0.5) lp[ls_rng_below(g, V)] = (ls_real)-744.4;
        break;
    case F_OVERFLOW: /* exp() or the running mass overflows */
        for (size_t i = 0; i < V; i++) lp[i] = (ls_real)(700 + 12 * ls_rng_uniform(g));
        break;
    case F_ZEROS: /* -0 and +0 tie, with a few smaller entries */
        for (size_t i = 0; i < V; i++) {
            double x = ls_rng_uniform(g);
            lp[i] = x < 0.4 ? (ls_real)-0.0 : x < 0.8 ? (ls_real)0.0 : (ls_real)(-5 * ls_rng_uniform(g));
        }
        break;
    case F_ONEHOT:
        for (size_t i = 0; i < V; i++) lp[i] = (ls_real)-INFINITY;
        lp[ls_rng_below(g, V)] = 0;
        break;
    default:
        break;
    }
}

/* ---- the comparison ------------------------------------------------------- */

static const double top_ps[] = {1e-6, 0.5, 0.95, 1.0, 0.0, -1.0, 1.5, 1e300, INFINITY, NAN};
#define N_TOPP (sizeof top_ps / sizeof top_ps[0])

typedef struct {
    size_t draws, mismatches;
    char first[256];
} tally;

/* n_dist distributions of family f at size V, `draws` draws each per top_p */
static void compare(size_t V, family f, size_t n_dist, size_t draws, int wrong_ties, tally *t) {
    ls_real *lp = malloc(V * sizeof *lp);
    double *z = malloc(V * sizeof *z);
    size_t *o = malloc(V * sizeof *o), *tmp = malloc(V * sizeof *tmp);
    cr_assert(lp && z && o && tmp);
    ls_sampler_ws ws;
    cr_assert_eq(K(ls_sampler_ws_init)(&ws, V, LS_MEM_SCORE), LS_OK);
    ls_rng g;
    ls_rng_seed(&g, 1000 + 17 * (uint64_t)f + V);
    for (size_t k = 0; k < n_dist; k++) {
        make_dist(lp, z, V, f, &g);
        for (size_t q = 0; q < N_TOPP; q++) {
            ls_rng ra, rb;
            ls_rng_seed(&ra, ls_rng_next(&g));
            rb = ra;
            for (size_t d = 0; d < draws; d++) {
                int32_t want = ref_sample(lp, V, top_ps[q], &ra, o, tmp, wrong_ties);
                int32_t got = K(ls_sampler_top_p)(lp, V, top_ps[q], &rb, &ws);
                t->draws++;
                if (want != got || memcmp(&ra, &rb, sizeof ra) != 0) {
                    if (t->mismatches++ == 0)
                        snprintf(t->first, sizeof t->first,
                                 "%s V=%zu dist %zu top_p=%g draw %zu: reference %d, sampler %d%s", family_name[f],
                                 V, k, top_ps[q], d, (int)want, (int)got,
                                 memcmp(&ra, &rb, sizeof ra) ? " (rng states differ)" : "");
                    rb = ra;
                }
            }
        }
    }
    K(ls_sampler_ws_free)(&ws);
    free(lp);
    free(z);
    free(o);
    free(tmp);
}

static void expect_same(size_t V, size_t n_dist, size_t draws) {
    for (int f = 0; f < F_COUNT; f++) {
        tally t = {0};
        compare(V, (family)f, n_dist, draws, 0, &t);
        cr_expect_eq(t.mismatches, 0, "%zu of %zu draws differ; first: %s", t.mismatches, t.draws, t.first);
    }
}

Test(sampler, same_token_as_reference_small_vocab) {
    static const size_t Vs[] = {1, 2, 3, 7, 33, 64};
    for (size_t i = 0; i < sizeof Vs / sizeof Vs[0]; i++) expect_same(Vs[i], 6, 60);
}

Test(sampler, same_token_as_reference_mid_vocab) { expect_same(256, 4, 40); }

/* large enough for the radix sort, every digit pass and the full path */
Test(sampler, same_token_as_reference_large_vocab, .timeout = 300) { expect_same(20000, 1, 4); }

/* The canary: a reference with ties by descending id disagrees on ties, so
 * a sampler with the wrong tie order would fail the tests above. */
Test(sampler, wrong_tie_order_is_detected) {
    tally t = {0};
    compare(64, F_TIES, 4, 50, 1, &t);
    cr_expect_gt(t.mismatches, 0, "a wrong tie order went unnoticed over %zu draws", t.draws);
    tally flat = {0};
    compare(64, F_FLAT, 1, 50, 1, &flat);
    cr_expect_gt(flat.mismatches, 0, "a wrong tie order went unnoticed on a flat row");
}

/* Hand-computed nucleus: p = {.05, .4, .1, .3, .15, 0}, top_p = 0.8: the
 * order is 1 (.4), 3 (.3), 4 (.15) with mass .85, so 1, 3, 4 are drawn with
 * .4/.85, .3/.85, .15/.85 and 0, 2, 5 never; top_p = 1: every p itself. */
Test(sampler, empirical_frequencies) {
    const double p[6] = {0.05, 0.4, 0.1, 0.3, 0.15, 0};
    const double want08[6] = {0, 0.4 / 0.85, 0, 0.3 / 0.85, 0.15 / 0.85, 0};
    ls_real lp[6];
    for (int i = 0; i < 6; i++) lp[i] = (ls_real)log(p[i]);
    ls_sampler_ws ws;
    cr_assert_eq(K(ls_sampler_ws_init)(&ws, 6, LS_MEM_SCORE), LS_OK);
    const double tps[2] = {0.8, 1.0};
    for (int c = 0; c < 2; c++) {
        const size_t N = 200000;
        size_t cnt[6] = {0};
        ls_rng r;
        ls_rng_seed(&r, 42 + (uint64_t)c);
        for (size_t n = 0; n < N; n++) {
            int32_t tok = K(ls_sampler_top_p)(lp, 6, tps[c], &r, &ws);
            cr_assert(tok >= 0 && tok < 6, "token %d out of range", (int)tok);
            cnt[tok]++;
        }
        double worst = 0;
        for (int i = 0; i < 6; i++) {
            double w = c == 0 ? want08[i] : p[i], f = (double)cnt[i] / (double)N;
            double sigma = sqrt(fmax(w * (1 - w), 1e-12) / (double)N);
            if (w == 0) cr_expect_eq(cnt[i], 0, "top_p %g: token %d (outside the nucleus) drawn %zu times", tps[c], i, cnt[i]);
            else worst = fmax(worst, fabs(f - w) / sigma);
        }
        cr_expect_lt(worst, 5.0, "top_p %g: largest deviation %.2f sigma", tps[c], worst);
    }
    K(ls_sampler_ws_free)(&ws);
}

/* The workspace: refused sizes, exact tracked bytes, no allocation per draw. */
Test(sampler, workspace_is_tracked_and_reused) {
    ls_sampler_ws ws;
    cr_expect_eq(K(ls_sampler_ws_init)(&ws, 0, LS_MEM_SCORE), LS_ERR_ARG);
    K(ls_sampler_ws_free)(&ws); /* a failed init leaves nothing to free */
    ls_mem_stats a, b, c;
    ls_mem_snapshot(&a);
    const size_t V = 5000;
    cr_assert_eq(K(ls_sampler_ws_init)(&ws, V, LS_MEM_SCORE), LS_OK);
    ls_mem_snapshot(&b);
    cr_expect_eq(b.live_bytes[LS_MEM_SCORE] - a.live_bytes[LS_MEM_SCORE], K(ls_sampler_ws_bytes)(V));
    ls_real *lp = malloc(V * sizeof *lp);
    double *z = malloc(V * sizeof *z);
    cr_assert(lp && z);
    ls_rng g;
    ls_rng_seed(&g, 7);
    make_dist(lp, z, V, F_GAUSS, &g);
    for (int i = 0; i < 50; i++) (void)K(ls_sampler_top_p)(lp, V, i % 2 ? 1.0 : 0.9, &g, &ws);
    ls_mem_snapshot(&c);
    cr_expect_eq(c.allocs_total, b.allocs_total, "the sampler allocated during draws");
    K(ls_sampler_ws_free)(&ws);
    K(ls_sampler_ws_free)(&ws); /* twice is a no-op */
    ls_mem_snapshot(&c);
    cr_expect_eq(c.live_bytes[LS_MEM_SCORE], a.live_bytes[LS_MEM_SCORE]);
    free(lp);
    free(z);
}
