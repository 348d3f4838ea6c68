/* test_kernels_mla_dsa.c - the DSA indexer kernels in float64 (dsa.h):
 * scores against a hand-computed value and a plain formula, the top-k tie
 * rule on crafted equal scores, selection against a full sort written here,
 * and the merge of per-block (per-rank) top-k lists against one selection
 * over all keys. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dsa.h"
#include "tests/kernels/test_kernels_mla.h"

Test(kernels_mla_dsa, score_by_hand)
{
    /* H_I = 2, d_I = 2, one query at position 5, keys at positions 4, 5, 6:
     * I = 0.5 ReLU(q0.k) + 2 ReLU(q1.k) with q0 = (1, 0), q1 = (0, 1). */
    const double q[4] = {1, 0, 0, 1}, w[2] = {0.5, 2};
    const double k[6] = {3, -1, -2, 0.25, 1, 1};
    double I[3];
    ls_dsa_scores_f64(I, q, w, k, 1, 3, 2, 2, 5, 4);
    cr_expect(I[0] == 1.5, "key (3,-1): 0.5*3 + 2*0 = 1.5, got %g", I[0]);
    cr_expect(I[1] == 0.5, "key (-2,0.25): 0.5*0 + 2*0.25 = 0.5, got %g", I[1]);
    cr_expect(I[2] == -INFINITY, "key at position 6 is in the future, got %g", I[2]);
}

enum { TQ = 9, TK = 13, HI = 3, DI = 4 };

static double plain_score(const double *q, const double *w, const double *k, size_t t, size_t s)
{
    double acc = 0;
    for (size_t h = 0; h < HI; h++) {
        double qk = 0;
        for (size_t i = 0; i < DI; i++) qk += q[(t * HI + h) * DI + i] * k[s * DI + i];
        acc += w[t * HI + h] * (qk > 0 ? qk : 0);
    }
    return acc;
}

Test(kernels_mla_dsa, scores_match_formula)
{
    double q[TQ * HI * DI], w[TQ * HI], k[TK * DI], I[TQ * TK];
    mla_test_seed(3);
    mla_test_fill(q, TQ * HI * DI, 1);
    mla_test_fill(w, TQ * HI, 1);
    mla_test_fill(k, TK * DI, 1);
    const int64_t q_pos0 = 7, k_pos0 = 3;
    ls_dsa_scores_f64(I, q, w, k, TQ, TK, HI, DI, q_pos0, k_pos0);
    double worst = 0;
    for (size_t t = 0; t < TQ; t++)
        for (size_t s = 0; s < TK; s++) {
            double got = I[t * TK + s];
            if (k_pos0 + (int64_t)s > q_pos0 + (int64_t)t) {
                cr_expect(got == -INFINITY, "(%zu,%zu) invisible but %g", t, s, got);
                continue;
            }
            double e = fabs(got - plain_score(q, w, k, t, s));
            cr_expect(e < 1e-14, "(%zu,%zu): %g vs %g", t, s, got, plain_score(q, w, k, t, s));
            worst = fmax(worst, e);
        }
    mla_test_report("indexer scores vs formula (abs)", worst);
}

Test(kernels_mla_dsa, tie_rule_on_equal_scores)
{
    /* one query row; keys at positions 10..15 */
    const double row[6] = {2, 5, 5, 1, 5, 2};
    int64_t pos[8];
    double sc[8];
    ls_dsa_select_f64(pos, sc, row, 1, 6, 4, 10);
    const int64_t want4[4] = {11, 12, 14, 10};
    const double want_s[4] = {5, 5, 5, 2};
    for (int j = 0; j < 4; j++)
        cr_expect(pos[j] == want4[j] && sc[j] == want_s[j], "k=4 slot %d: pos %lld score %g", j,
                  (long long)pos[j], sc[j]);
    ls_dsa_select_f64(pos, sc, row, 1, 6, 2, 10);
    cr_expect(pos[0] == 11 && pos[1] == 12, "k=2 keeps the lowest positions among the 5s");
    /* k_top larger than the row: all 6, then -1 / -inf */
    ls_dsa_select_f64(pos, sc, row, 1, 6, 8, 10);
    const int64_t want8[8] = {11, 12, 14, 10, 15, 13, -1, -1};
    for (int j = 0; j < 8; j++) cr_expect(pos[j] == want8[j], "k=8 slot %d: %lld", j, (long long)pos[j]);
    cr_expect(sc[6] == -INFINITY && sc[7] == -INFINITY, "empty slots score -inf");

    /* the same through the indexer: identical keys give identical scores */
    const double q[2] = {1, 0.5}, w[1] = {1};
    const double k[12] = {1, 1, 2, 2, 2, 2, 0, 1, 2, 2, -1, 0};
    /* scores: 1.5, 3, 3, 0.5, 3, 0 */
    ls_dsa_topk_f64(pos, sc, q, w, k, 1, 6, 1, 2, 100, 0, 4, (double[6]){0});
    const int64_t wantk[4] = {1, 2, 4, 0};
    for (int j = 0; j < 4; j++)
        cr_expect(pos[j] == wantk[j], "indexer k=4 slot %d: %lld", j, (long long)pos[j]);
}

Test(kernels_mla_dsa, k_is_min_of_k_top_and_visible)
{
    enum { T = 6, K = 4 };
    double q[T * 2], w[T], k[T * 2], ws[T];
    mla_test_seed(5);
    mla_test_fill(q, T * 2, 1);
    mla_test_fill(w, T, 1);
    mla_test_fill(k, T * 2, 1);
    for (size_t t = 0; t < T; t++) w[t] = fabs(w[t]) + 0.1;
    int64_t pos[T * K];
    double sc[T * K];
    ls_dsa_topk_f64(pos, sc, q, w, k, T, T, 1, 2, 0, 0, K, ws);
    for (size_t t = 0; t < T; t++) {
        size_t want = t + 1 < K ? t + 1 : K;
        for (size_t j = 0; j < K; j++) {
            if (j < want)
                cr_expect(pos[t * K + j] >= 0 && pos[t * K + j] <= (int64_t)t,
                          "query %zu slot %zu: position %lld not visible", t, j,
                          (long long)pos[t * K + j]);
            else
                cr_expect(pos[t * K + j] == -1, "query %zu slot %zu should be empty", t, j);
        }
    }
}

/* Reference top-k: sort the (score, position) pairs of a row with qsort. */
typedef struct {
    double s;
    int64_t p;
} pair;

static int cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->p > y->p) - (x->p < y->p);
}

static void reference_select(int64_t *pos, double *sc, const double *I, size_t Tq, size_t Tk,
                             size_t k, int64_t k_pos0)
{
    pair *v = malloc(Tk * sizeof *v);
    for (size_t t = 0; t < Tq; t++) {
        size_t n = 0;
        for (size_t s = 0; s < Tk; s++)
            if (I[t * Tk + s] != -INFINITY) v[n++] = (pair){I[t * Tk + s], k_pos0 + (int64_t)s};
        qsort(v, n, sizeof *v, cmp_pair);
        for (size_t j = 0; j < k; j++) {
            pos[t * k + j] = j < n ? v[j].p : -1;
            sc[t * k + j] = j < n ? v[j].s : -INFINITY;
        }
    }
    free(v);
}

/* Scores with many ties: small integers, invisible entries causal. */
static void tied_scores(double *I, size_t Tq, size_t Tk, int64_t q_pos0, int64_t k_pos0)
{
    for (size_t t = 0; t < Tq; t++)
        for (size_t s = 0; s < Tk; s++)
            I[t * Tk + s] = k_pos0 + (int64_t)s <= q_pos0 + (int64_t)t
                                ? floor(3 * (mla_test_uniform() + 1))
                                : -INFINITY;
}

static int same_lists(const int64_t *p1, const double *s1, const int64_t *p2, const double *s2,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p1[i] != p2[i] || s1[i] != s2[i]) return 0;
    return 1;
}

Test(kernels_mla_dsa, select_matches_full_sort)
{
    enum { T = 40, N = 57 };
    double *I = malloc(T * N * sizeof *I);
    int64_t pos[T * 8], rpos[T * 8];
    double sc[T * 8], rsc[T * 8];
    mla_test_seed(7);
    for (int trial = 0; trial < 2; trial++) {
        if (trial == 0)
            tied_scores(I, T, N, 20, 0);
        else
            for (size_t i = 0; i < T * N; i++) I[i] = mla_test_uniform();
        for (size_t k = 1; k <= 8; k += 3) {
            ls_dsa_select_f64(pos, sc, I, T, N, k, 100);
            reference_select(rpos, rsc, I, T, N, k, 100);
            cr_expect(same_lists(pos, sc, rpos, rsc, T * k), "trial %d k=%zu differs from sort",
                      trial, k);
        }
    }
    free(I);
}

Test(kernels_mla_dsa, topk_equals_scores_then_select)
{
    double q[TQ * HI * DI], w[TQ * HI], k[TK * DI], I[TQ * TK], ws[TK];
    int64_t p1[TQ * 5], p2[TQ * 5];
    double s1[TQ * 5], s2[TQ * 5];
    mla_test_seed(9);
    mla_test_fill(q, TQ * HI * DI, 1);
    mla_test_fill(w, TQ * HI, 1);
    mla_test_fill(k, TK * DI, 1);
    ls_dsa_scores_f64(I, q, w, k, TQ, TK, HI, DI, 2, 0);
    ls_dsa_select_f64(p1, s1, I, TQ, TK, 5, 0);
    ls_dsa_topk_f64(p2, s2, q, w, k, TQ, TK, HI, DI, 2, 0, 5, ws);
    cr_expect(same_lists(p1, s1, p2, s2, TQ * 5), "fused top-k differs from scores+select");
}

/* Split keys [0, Tk) into blocks at `cuts`, select per block, merge; compare
 * with one selection over all keys. */
static int merged_equals_global(const double *I, size_t Tq, size_t Tk, const size_t *cuts,
                                size_t n_blocks, size_t k, int64_t k_pos0)
{
    int64_t *lp[8], *gp = malloc(Tq * k * sizeof *gp), *mp = malloc(Tq * k * sizeof *mp);
    double *ls[8], *gs = malloc(Tq * k * sizeof *gs), *ms = malloc(Tq * k * sizeof *ms);
    double *blk = malloc(Tq * Tk * sizeof *blk);
    for (size_t b = 0; b < n_blocks; b++) {
        size_t s0 = cuts[b], n = cuts[b + 1] - cuts[b];
        for (size_t t = 0; t < Tq; t++) memcpy(blk + t * n, I + t * Tk + s0, n * sizeof *blk);
        lp[b] = malloc(Tq * k * sizeof *lp[b]);
        ls[b] = malloc(Tq * k * sizeof *ls[b]);
        ls_dsa_select_f64(lp[b], ls[b], blk, Tq, n, k, k_pos0 + (int64_t)s0);
    }
    ls_dsa_merge_f64(mp, ms, (const int64_t *const *)lp, (const double *const *)ls, n_blocks,
                     Tq, k, k);
    ls_dsa_select_f64(gp, gs, I, Tq, Tk, k, k_pos0);
    int ok = same_lists(mp, ms, gp, gs, Tq * k);
    for (size_t b = 0; b < n_blocks; b++) {
        free(lp[b]);
        free(ls[b]);
    }
    free(gp);
    free(mp);
    free(gs);
    free(ms);
    free(blk);
    return ok;
}

Test(kernels_mla_dsa, merge_of_local_topk_equals_global)
{
    enum { T = 24, N = 50 };
    double *I = malloc(T * N * sizeof *I);
    /* uneven ranks; queries at positions 30.. so the last rank's keys are
     * invisible to the first queries */
    const size_t cuts[5] = {0, 7, 19, 20, 50};
    int all_ok = 1;
    mla_test_seed(13);
    for (int trial = 0; trial < 6; trial++) {
        if (trial % 2 == 0)
            tied_scores(I, T, N, 30, 5);
        else
            for (size_t t = 0; t < T; t++)
                for (size_t s = 0; s < N; s++)
                    I[t * N + s] = 5 + (int64_t)s <= 30 + (int64_t)t ? mla_test_uniform() : -INFINITY;
        for (size_t k = 1; k <= 9; k += 4) {
            int ok = merged_equals_global(I, T, N, cuts, 4, k, 5);
            cr_expect(ok, "trial %d k=%zu: merged local top-k differs from global", trial, k);
            all_ok &= ok;
        }
    }
    free(I);

    /* through the indexer: each rank scores its own keys */
    double q[TQ * HI * DI], w[TQ * HI], k[TK * DI], ws[TK];
    const size_t kc[3] = {0, 5, TK}, K = 6;
    int64_t gp[TQ * 6], mp[TQ * 6], lp0[TQ * 6], lp1[TQ * 6];
    double gs[TQ * 6], ms[TQ * 6], ls0[TQ * 6], ls1[TQ * 6];
    mla_test_fill(q, TQ * HI * DI, 1);
    mla_test_fill(w, TQ * HI, 1);
    mla_test_fill(k, TK * DI, 1);
    ls_dsa_topk_f64(gp, gs, q, w, k, TQ, TK, HI, DI, 3, 0, K, ws);
    ls_dsa_topk_f64(lp0, ls0, q, w, k, TQ, kc[1], HI, DI, 3, 0, K, ws);
    ls_dsa_topk_f64(lp1, ls1, q, w, k + kc[1] * DI, TQ, kc[2] - kc[1], HI, DI, 3,
                    (int64_t)kc[1], K, ws);
    const int64_t *lps[2] = {lp0, lp1};
    const double *lss[2] = {ls0, ls1};
    ls_dsa_merge_f64(mp, ms, lps, lss, 2, TQ, K, K);
    int ok = same_lists(mp, ms, gp, gs, TQ * K);
    cr_expect(ok, "indexer: merged per-rank top-k differs from global");
    all_ok &= ok;
    mla_test_report("merge of per-rank top-k vs global (mismatch 0/1)", all_ok ? 0 : 1);
}

Test(kernels_mla_dsa, localize)
{
    const int64_t glob[6] = {12, 3, -1, 7, 8, 9};
    int64_t loc[6];
    ls_dsa_localize_f64(loc, glob, 2, 3, 7, 2); /* block holds positions 7, 8 */
    const int64_t want[6] = {-1, -1, -1, 0, 1, -1};
    for (int i = 0; i < 6; i++) cr_expect(loc[i] == want[i], "slot %d: %lld", i, (long long)loc[i]);
}
