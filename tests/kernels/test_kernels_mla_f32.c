/* test_kernels_mla_f32.c - the float32 MLA-family kernels against the
 * float64 reference on the same inputs (through kernels_mla_f32_wrap.c):
 * MLA forward (and gradients) in both forms, indexer scores, routing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/dsa.h"
#include "kernels/mla.h"
#include "kernels/moe.h"
#include "tests/kernels/test_kernels_mla.h"

/* kernels_mla_f32_wrap.c */
void kmla_f32_mla_forward(double *o, double *lse, const double *const in[5],
                          const int64_t *sel, size_t k_sel, size_t Tq, size_t Tk,
                          const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0, double tau,
                          ls_mla_form form);
void kmla_f32_mla_grads(double *const grads[5], const double *G, const double *const in[5],
                        const int64_t *sel, size_t k_sel, size_t Tq, size_t Tk,
                        const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0, double tau,
                        ls_mla_form form);
void kmla_f32_dsa_scores(double *I, const double *q_I, const double *w, const double *k_I,
                         size_t Tq, size_t Tk, size_t H_I, size_t d_I, int64_t q_pos0,
                         int64_t k_pos0);
void kmla_f32_moe_route(int32_t *idx, double *w, const double *logits, const double *bias,
                        size_t T, size_t E, size_t n_group, size_t topk_group, size_t k,
                        double rho);

/* mla-tiny head dims (docs/model.md §2.4) over 24 queries and 40 keys. */
enum { TQ = 24, TK = 40, KSEL = 8 };
static const ls_mla_dims DIMS = {.H = 4, .d_n = 16, .d_r = 8, .d_v = 12, .r_kv = 32};

Test(kernels_mla_f32, mla_matches_f64)
{
    const ls_mla_dims *d = &DIMS;
    const size_t n[5] = {TQ * d->H * d->d_n, TQ * d->H * d->d_r, TK * d->r_kv, TK * d->d_r,
                         d->H * (d->d_n + d->d_v) * d->r_kv};
    const size_t no = TQ * d->H * d->d_v, nl = TQ * d->H;
    const int64_t q_pos0 = 16, k_pos0 = 0;
    const double tau = 1 / sqrt(24.0);
    double *in[5], *g32[5], *g64[5];
    mla_test_seed(31);
    for (int i = 0; i < 5; i++) {
        in[i] = malloc(n[i] * sizeof(double));
        g32[i] = malloc(n[i] * sizeof(double));
        g64[i] = malloc(n[i] * sizeof(double));
        mla_test_fill(in[i], n[i], i == 4 ? 0.3 : 1.0);
    }
    double *G = malloc(no * sizeof *G), *o32 = malloc(no * sizeof *o32);
    double *o64 = malloc(no * sizeof *o64), *l32 = malloc(nl * sizeof *l32);
    double *l64 = malloc(nl * sizeof *l64);
    mla_test_fill(G, no, 1);
    /* candidates: every third visible key, most recent first, up to KSEL */
    int64_t sel[TQ * KSEL];
    for (size_t t = 0; t < TQ; t++)
        for (size_t j = 0; j < KSEL; j++) {
            int64_t s = q_pos0 + (int64_t)t - k_pos0 - 3 * (int64_t)j;
            sel[t * KSEL + j] = s >= 0 && s < TK ? s : -1;
        }
    size_t wmax = ls_mla_backward_workspace_f64(LS_MLA_NAIVE, TK, KSEL, d) +
                  ls_mla_forward_workspace_f64(LS_MLA_NAIVE, TK, KSEL, d);
    double *ws = malloc(wmax * sizeof *ws);
    double worst_f = 0, worst_g = 0;
    for (int with_sel = 0; with_sel < 2; with_sel++)
        for (int f = 0; f < 2; f++) {
            const int64_t *sl = with_sel ? sel : NULL;
            size_t ks = with_sel ? KSEL : 0;
            ls_mla_form form = (ls_mla_form)f;
            ls_mla_forward_f64(o64, l64, in[0], in[1], in[2], in[3], in[4], sl, ks, TQ, TK, d,
                               q_pos0, k_pos0, tau, form, ws);
            kmla_f32_mla_forward(o32, l32, (const double *const *)in, sl, ks, TQ, TK, d, q_pos0,
                                 k_pos0, tau, form);
            double eo = tu_rel_err(o32, o64, no), el = tu_rel_err(l32, l64, nl);
            cr_expect(eo < 1e-5 && el < 1e-5, "form %d sel=%d: o %.3e lse %.3e", f, with_sel, eo,
                      el);
            worst_f = fmax(worst_f, fmax(eo, el));

            for (int i = 0; i < 5; i++)
                for (size_t j = 0; j < n[i]; j++) g64[i][j] = 0;
            ls_mla_backward_f64(g64[0], g64[1], g64[2], g64[3], g64[4], o64, l64, G, in[0], in[1],
                                in[2], in[3], in[4], sl, ks, TQ, TK, d, q_pos0, k_pos0, tau, form,
                                ws);
            kmla_f32_mla_grads(g32, G, (const double *const *)in, sl, ks, TQ, TK, d, q_pos0,
                               k_pos0, tau, form);
            for (int i = 0; i < 5; i++) {
                double e = tu_rel_err(g32[i], g64[i], n[i]);
                cr_expect(e < 1e-4, "form %d sel=%d grad %d: %.3e", f, with_sel, i, e);
                worst_g = fmax(worst_g, e);
            }
        }
    mla_test_report("f32 vs f64: MLA forward (o, lse)", worst_f);
    mla_test_report("f32 vs f64: MLA grads", worst_g);
    for (int i = 0; i < 5; i++) {
        free(in[i]);
        free(g32[i]);
        free(g64[i]);
    }
    free(G);
    free(o32);
    free(o64);
    free(l32);
    free(l64);
    free(ws);
}

Test(kernels_mla_f32, indexer_and_routing_match_f64)
{
    enum { T = 20, N = 30, HI = 4, DI = 16, E = 8, NG = 4, TG = 2, K = 2 };
    double q[T * HI * DI], w[T * HI], k[N * DI], I64[T * N], I32[T * N];
    mla_test_seed(37);
    mla_test_fill(q, T * HI * DI, 1);
    mla_test_fill(w, T * HI, 0.125);
    mla_test_fill(k, N * DI, 1);
    ls_dsa_scores_f64(I64, q, w, k, T, N, HI, DI, 10, 0);
    kmla_f32_dsa_scores(I32, q, w, k, T, N, HI, DI, 10, 0);
    /* invisible entries are -inf in both; compare the finite ones */
    double num = 0, den = 0;
    for (size_t i = 0; i < T * N; i++) {
        if (isinf(I64[i])) {
            cr_expect(I32[i] == I64[i], "visibility differs at %zu", i);
            continue;
        }
        num = fmax(num, fabs(I32[i] - I64[i]));
        den = fmax(den, fabs(I64[i]));
    }
    double ei = num / den;
    cr_expect(ei < 1e-5, "indexer scores %.3e", ei);
    mla_test_report("f32 vs f64: indexer scores", ei);

    double lg[T * E], bias[E], s[T * E], w64[T * K], w32[T * K], ws[E + NG];
    int32_t i64[T * K], i32[T * K];
    mla_test_fill(lg, T * E, 2);
    mla_test_fill(bias, E, 0.1);
    ls_moe_route_forward_f64(i64, w64, s, lg, bias, T, E, NG, TG, K, 2.5, ws);
    kmla_f32_moe_route(i32, w32, lg, bias, T, E, NG, TG, K, 2.5);
    for (size_t i = 0; i < T * K; i++) cr_expect(i32[i] == i64[i], "routing idx %zu differs", i);
    double ew = tu_rel_err(w32, w64, T * K);
    cr_expect(ew < 1e-6, "routing weights %.3e", ew);
    mla_test_report("f32 vs f64: routing weights", ew);
}
