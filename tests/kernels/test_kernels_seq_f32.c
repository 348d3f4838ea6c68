/* test_kernels_seq_f32.c - the float32 sequence kernels against the float64
 * reference on the same (float-representable) inputs, at model-like sizes:
 * conv1d, GDN gates, GDN recurrence, attention block, merge; forward and
 * backward.  Errors are max |f32 - f64| relative to the tensor's max |f64|. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/gdn.h"
#include "tests/kernels/kernels_seq_f32_wrap.h"
#include "tests/support/test_util.h"

#define FWD_TOL 5e-6
#define BWD_TOL 2e-5

static void cmp(const char *what, const double *f32, const double *f64, size_t n, double tol)
{
    double e = tu_rel_err(f32, f64, n);
    cr_log_info("%-36s f32 vs f64 rel err %.3e", what, e);
    cr_expect(e < tol, "%s: float32 vs float64 relative error %.3e >= %.1e", what, e, tol);
}

Test(kernels_seq_f32, conv1d)
{
    const size_t T = 1000, C = 128, K = 4, nt = (K - 1) * C;
    uint64_t s = 201;
    double *m = tu_rand_f32(&s, T * C, -2, 2), *ti = tu_rand_f32(&s, nt, -2, 2);
    double *w = tu_rand_f32(&s, C * K, -0.7, 0.7), *dc = tu_rand_f32(&s, T * C, -1, 1);
    double *dto = tu_rand_f32(&s, nt, -1, 1);
    double *c64 = tu_alloc(T * C), *c32 = tu_alloc(T * C), *p64 = tu_alloc(T * C);
    double *t64 = tu_alloc(nt), *t32 = tu_alloc(nt);
    ls_conv1d_forward_f64(c64, p64, t64, m, ti, w, T, C, K);
    ks32_conv1d_forward(c32, NULL, t32, m, ti, w, T, C, K);
    cmp("conv1d c", c32, c64, T * C, FWD_TOL);
    cmp("conv1d tail_out", t32, t64, nt, FWD_TOL);
    double *dm64 = tu_alloc(T * C), *dm32 = tu_alloc(T * C), *dw64 = tu_alloc(C * K);
    double *dw32 = tu_alloc(C * K), *dt64 = tu_alloc(nt), *dt32 = tu_alloc(nt);
    ls_conv1d_backward_f64(dm64, dw64, dt64, dc, dto, p64, m, ti, w, T, C, K);
    ks32_conv1d_backward(dm32, dw32, dt32, dc, dto, NULL, m, ti, w, T, C, K);
    cmp("conv1d dm", dm32, dm64, T * C, BWD_TOL);
    cmp("conv1d dw", dw32, dw64, C * K, BWD_TOL);
    cmp("conv1d dtail_in", dt32, dt64, nt, BWD_TOL);
    free(m); free(ti); free(w); free(dc); free(dto); free(c64); free(c32); free(p64);
    free(t64); free(t32); free(dm64); free(dm32); free(dw64); free(dw32); free(dt64); free(dt32);
}

Test(kernels_seq_f32, gates)
{
    const size_t T = 1000, Hv = 8, n = T * Hv;
    uint64_t s = 202;
    double *a = tu_rand_f32(&s, n, -6, 6), *b = tu_rand_f32(&s, n, -6, 6);
    double *A = tu_rand_f32(&s, Hv, -2, 1), *dt = tu_rand_f32(&s, Hv, -1, 1);
    double *dg = tu_rand_f32(&s, n, -1, 1), *dbe = tu_rand_f32(&s, n, -1, 1);
    double *g64 = tu_alloc(n), *g32 = tu_alloc(n), *b64 = tu_alloc(n), *b32 = tu_alloc(n);
    ls_gdn_gates_forward_f64(g64, b64, a, b, A, dt, T, Hv);
    ks32_gdn_gates_forward(g32, b32, a, b, A, dt, T, Hv);
    cmp("gates g", g32, g64, n, FWD_TOL);
    cmp("gates beta", b32, b64, n, FWD_TOL);
    double *da64 = tu_alloc(n), *da32 = tu_alloc(n), *db64 = tu_alloc(n), *db32 = tu_alloc(n);
    double *dA64 = tu_alloc(Hv), *dA32 = tu_alloc(Hv), *dd64 = tu_alloc(Hv), *dd32 = tu_alloc(Hv);
    ls_gdn_gates_backward_f64(da64, db64, dA64, dd64, dg, dbe, a, b, A, dt, T, Hv);
    ks32_gdn_gates_backward(da32, db32, dA32, dd32, dg, dbe, a, b, A, dt, T, Hv);
    cmp("gates da", da32, da64, n, BWD_TOL);
    cmp("gates db", db32, db64, n, BWD_TOL);
    cmp("gates dA_log", dA32, dA64, Hv, BWD_TOL);
    cmp("gates ddt_bias", dd32, dd64, Hv, BWD_TOL);
    free(a); free(b); free(A); free(dt); free(dg); free(dbe); free(g64); free(g32); free(b64);
    free(b32); free(da64); free(da32); free(db64); free(db32); free(dA64); free(dA32);
    free(dd64); free(dd32);
}

/* hybrid-tiny GDN dims over 1000 tokens, unit-norm k, q scaled by dk^-1/2 */
Test(kernels_seq_f32, gdn)
{
    const size_t T = 1000, Hk = 2, Hv = 4, dk = 16, dv = 16;
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    uint64_t s = 203;
    double *q = tu_rand(&s, nq, -1, 1), *k = tu_rand(&s, nq, -1, 1);
    for (size_t r = 0; r < T * Hk; r++) {
        double a = 0, b = 0;
        for (size_t i = 0; i < dk; i++) {
            a += q[r * dk + i] * q[r * dk + i];
            b += k[r * dk + i] * k[r * dk + i];
        }
        for (size_t i = 0; i < dk; i++) {
            q[r * dk + i] = (float)(q[r * dk + i] / sqrt(a * dk));
            k[r * dk + i] = (float)(k[r * dk + i] / sqrt(b));
        }
    }
    double *v = tu_rand_f32(&s, nv, -1, 1), *g = tu_rand_f32(&s, ng, -0.3, 0);
    double *be = tu_rand_f32(&s, ng, 0, 1), *S0 = tu_rand_f32(&s, nS, -1, 1);
    double *dO = tu_rand_f32(&s, nv, -1, 1), *dSo = tu_rand_f32(&s, nS, -1, 1);
    double *o64 = tu_alloc(nv), *o32 = tu_alloc(nv), *S64 = tu_alloc(nS), *S32 = tu_alloc(nS);
    ls_gdn_forward_f64(o64, S64, q, k, v, g, be, S0, T, Hk, Hv, dk, dv);
    ks32_gdn_forward(o32, S32, q, k, v, g, be, S0, T, Hk, Hv, dk, dv);
    cmp("gdn o", o32, o64, nv, FWD_TOL);
    cmp("gdn S_out", S32, S64, nS, FWD_TOL);
    double *g64[6], *g32[6];
    const size_t sz[6] = {nq, nq, nv, ng, ng, nS};
    for (int i = 0; i < 6; i++) {
        g64[i] = tu_alloc(sz[i]);
        g32[i] = tu_alloc(sz[i]);
    }
    double *ws = tu_alloc(ls_gdn_backward_workspace_f64(T, Hk, Hv, dk, dv));
    ls_gdn_backward_f64(g64[0], g64[1], g64[2], g64[3], g64[4], g64[5], dO, dSo, q, k, v, g, be,
                        S0, T, Hk, Hv, dk, dv, ws);
    ks32_gdn_backward(g32[0], g32[1], g32[2], g32[3], g32[4], g32[5], dO, dSo, q, k, v, g, be, S0,
                      T, Hk, Hv, dk, dv);
    const char *names[6] = {"gdn dq", "gdn dk", "gdn dv", "gdn dg", "gdn dbeta", "gdn dS_in"};
    for (int i = 0; i < 6; i++) {
        cmp(names[i], g32[i], g64[i], sz[i], BWD_TOL);
        free(g64[i]);
        free(g32[i]);
    }
    free(q); free(k); free(v); free(g); free(be); free(S0); free(dO); free(dSo); free(o64);
    free(o32); free(S64); free(S32); free(ws);
}

/* hybrid-tiny attention dims, prompt style (Tq = Tk, causal) */
Test(kernels_seq_f32, attention)
{
    const size_t T = 300, H = 4, Hkv = 2, hd = 32, nq = T * H * hd, nk = T * Hkv * hd;
    const double tau = 1 / sqrt((double)hd);
    uint64_t s = 204;
    double *q = tu_rand_f32(&s, nq, -1.7, 1.7), *k = tu_rand_f32(&s, nk, -1.7, 1.7);
    double *v = tu_rand_f32(&s, nk, -1, 1), *dO = tu_rand_f32(&s, nq, -1, 1);
    double *o64 = tu_alloc(nq), *o32 = tu_alloc(nq), *l64 = tu_alloc(T * H), *l32 = tu_alloc(T * H);
    ls_attn_block_forward_f64(o64, l64, q, k, v, T, T, H, Hkv, hd, 0, 0, 1, tau);
    ks32_attn_block_forward(o32, l32, q, k, v, T, T, H, Hkv, hd, 0, 0, 1, tau);
    cmp("attn o", o32, o64, nq, FWD_TOL);
    cmp("attn lse", l32, l64, T * H, FWD_TOL);
    double *dq64 = tu_alloc(nq), *dq32 = tu_alloc(nq), *dk64 = tu_alloc(nk), *dk32 = tu_alloc(nk);
    double *dv64 = tu_alloc(nk), *dv32 = tu_alloc(nk);
    ls_attn_block_backward_f64(dq64, dk64, dv64, dO, q, k, v, o64, l64, T, T, H, Hkv, hd, 0, 0, 1,
                               tau);
    ks32_attn_block_backward(dq32, dk32, dv32, dO, q, k, v, o32, l32, T, T, H, Hkv, hd, 0, 0, 1,
                             tau);
    cmp("attn dq", dq32, dq64, nq, BWD_TOL);
    cmp("attn dk", dk32, dk64, nk, BWD_TOL);
    cmp("attn dv", dv32, dv64, nk, BWD_TOL);
    free(q); free(k); free(v); free(dO); free(o64); free(o32); free(l64); free(l32);
    free(dq64); free(dq32); free(dk64); free(dk32); free(dv64); free(dv32);
}

Test(kernels_seq_f32, merge)
{
    const size_t P = 4, n = 200, hd = 32;
    uint64_t s = 205;
    double *op = tu_rand_f32(&s, P * n * hd, -1, 1), *lp = tu_rand_f32(&s, P * n, -20, 20);
    lp[7] = -INFINITY;
    double *o64 = tu_alloc(n * hd), *o32 = tu_alloc(n * hd), *l64 = tu_alloc(n), *l32 = tu_alloc(n);
    for (size_t i = 0; i < n; i++) {
        l64[i] = l32[i] = -INFINITY;
    }
    for (size_t p = 0; p < P; p++) {
        ls_attn_merge_into_f64(o64, l64, op + p * n * hd, lp + p * n, n, hd);
        ks32_attn_merge_into(o32, l32, op + p * n * hd, lp + p * n, n, hd);
    }
    cmp("merge o", o32, o64, n * hd, FWD_TOL);
    cmp("merge lse", l32, l64, n, FWD_TOL);
    double *dO = tu_rand_f32(&s, n * hd, -1, 1), *dl = tu_rand_f32(&s, n, -1, 1);
    double *d64 = tu_alloc(n * hd), *d32 = tu_alloc(n * hd), *e64 = tu_alloc(n), *e32 = tu_alloc(n);
    ls_attn_merge_backward_f64(d64, e64, dO, dl, op, lp, o64, l64, n, hd);
    ks32_attn_merge_backward(d32, e32, dO, dl, op, lp, o64, l64, n, hd);
    cmp("merge do_p", d32, d64, n * hd, BWD_TOL);
    cmp("merge dlse_p", e32, e64, n, BWD_TOL);
    free(op); free(lp); free(o64); free(o32); free(l64); free(l32); free(dO); free(dl);
    free(d64); free(d32); free(e64); free(e32);
}
