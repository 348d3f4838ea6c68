/* test_kernels_core_f32.c - the float32 core kernels against the float64
 * reference on the same random inputs (already rounded to float32, so the
 * difference is the float32 arithmetic only).  Reported: max|f32 - f64| / max|f64|. */
#include <criterion/criterion.h>

#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/grpo.h"
#include "kernels/linear.h"
#include "kernels/logprob.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "tests/kernels/kernels_core_f32_wrap.h"
#include "tests/support/test_util.h"

#define F32_BOUND 1e-5

static void check(const char *what, const double *f32, const double *f64, size_t n)
{
    double err = tu_rel_err(f32, f64, n);
    tu_report(what, err, F32_BOUND);
    cr_expect(tu_max_abs(f64, n) > 0, "%s: reference is all zero", what);
    cr_expect(err <= F32_BOUND, "%s: rel err %.3e", what, err);
}

Test(kernels_core_f32, linear_lora)
{
    uint64_t s = 201;
    size_t T = 64, in = 256, out = 192, r = 8;
    double sc = 2.0;
    double *x = tu_rand_f32(&s, T * in, -1, 1), *W = tu_rand_f32(&s, out * in, -0.1, 0.1);
    double *A = tu_rand_f32(&s, r * in, -0.1, 0.1), *B = tu_rand_f32(&s, out * r, -0.1, 0.1);
    double *dy = tu_rand_f32(&s, T * out, -1, 1);
    double *y64 = tu_fill(T * out, 0), *y32 = tu_fill(T * out, 0);
    ls_linear_forward_f64(y64, x, W, T, in, out, 0);
    kc32_linear_forward(y32, x, W, T, in, out, 0);
    check("linear forward", y32, y64, T * out);

    double *dx64 = tu_fill(T * in, 0), *dx32 = tu_fill(T * in, 0);
    double *dW64 = tu_fill(out * in, 0), *dW32 = tu_fill(out * in, 0);
    ls_linear_backward_f64(dx64, dW64, dy, x, W, T, in, out, 0);
    kc32_linear_backward(dx32, dW32, dy, x, W, T, in, out);
    check("linear backward dx", dx32, dx64, T * in);
    check("linear backward dW", dW32, dW64, out * in);

    double *xa64 = tu_fill(T * r, 0), *xa32 = tu_fill(T * r, 0);
    ls_lora_forward_f64(y64, xa64, x, W, A, B, sc, T, in, out, r);
    kc32_lora_forward(y32, xa32, x, W, A, B, sc, T, in, out, r);
    check("lora forward", y32, y64, T * out);
    check("lora forward xa", xa32, xa64, T * r);

    double *dA64 = tu_fill(r * in, 0), *dA32 = tu_fill(r * in, 0);
    double *dB64 = tu_fill(out * r, 0), *dB32 = tu_fill(out * r, 0);
    double *scratch = tu_fill(T * r, 0);
    tu_round_f32(xa64, T * r);
    ls_lora_backward_f64(dx64, NULL, dA64, dB64, dy, x, xa64, W, A, B, sc, T, in, out, r, scratch,
                         0);
    kc32_lora_backward(dx32, NULL, dA32, dB32, dy, x, xa64, W, A, B, sc, T, in, out, r);
    check("lora backward dx", dx32, dx64, T * in);
    check("lora backward dA", dA32, dA64, r * in);
    check("lora backward dB", dB32, dB64, out * r);
    free(x); free(W); free(A); free(B); free(dy); free(y64); free(y32); free(dx64); free(dx32);
    free(dW64); free(dW32); free(xa64); free(xa32); free(dA64); free(dA32); free(dB64); free(dB32);
    free(scratch);
}

Test(kernels_core_f32, embedding)
{
    uint64_t s = 202;
    size_t V = 50, T = 20, d = 32;
    int32_t ids[20];
    for (size_t t = 0; t < T; t++)
        ids[t] = (int32_t)(tu_next(&s) % V);
    double *E = tu_rand_f32(&s, V * d, -1, 1), *h64 = tu_fill(T * d, 0), *h32 = tu_fill(T * d, 0);
    ls_embedding_forward_f64(h64, ids, E, T, d);
    kc32_embedding_forward(h32, ids, E, V, T, d);
    check("embedding forward", h32, h64, T * d);
    free(E); free(h64); free(h32);
}

Test(kernels_core_f32, norms)
{
    uint64_t s = 203;
    size_t rows = 64, n = 256, N = rows * n;
    double *x = tu_rand_f32(&s, N, -2, 2), *z = tu_rand_f32(&s, N, -4, 4), *w = tu_rand_f32(&s, n, -0.5, 0.5);
    double *b = tu_rand_f32(&s, n, -0.5, 0.5), *dy = tu_rand_f32(&s, N, -1, 1);
    double *y64 = tu_fill(N, 0), *y32 = tu_fill(N, 0), *r64 = tu_fill(rows, 0);
    double *r32 = tu_fill(rows, 0);
    for (int zc = 0; zc <= 1; zc++) {
        ls_rmsnorm_forward_f64(y64, r64, x, w, zc, 1e-6, rows, n);
        kc32_rmsnorm_forward(y32, r32, x, w, zc, 1e-6, rows, n);
        check(zc ? "rmsnorm zero-centred forward" : "rmsnorm standard forward", y32, y64, N);
        double *dx64 = tu_fill(N, 0), *dx32 = tu_fill(N, 0), *dw64 = tu_fill(n, 0);
        double *dw32 = tu_fill(n, 0);
        tu_round_f32(r64, rows);
        ls_rmsnorm_backward_f64(dx64, dw64, dy, x, r64, w, zc, rows, n);
        kc32_rmsnorm_backward(dx32, dw32, dy, x, r64, w, zc, rows, n);
        check(zc ? "rmsnorm zero-centred backward dx" : "rmsnorm standard backward dx", dx32, dx64,
              N);
        check(zc ? "rmsnorm zero-centred backward dw" : "rmsnorm standard backward dw", dw32, dw64,
              n);
        free(dx64); free(dx32); free(dw64); free(dw32);
    }
    ls_gated_rmsnorm_forward_f64(y64, r64, x, z, w, 1e-6, rows, n);
    kc32_gated_rmsnorm_forward(y32, r32, x, z, w, 1e-6, rows, n);
    check("gated rmsnorm forward", y32, y64, N);
    ls_layernorm_forward_f64(y64, x, w, b, 1e-6, rows, n);
    kc32_layernorm_forward(y32, x, w, b, 1e-6, rows, n);
    check("layernorm forward", y32, y64, N);
    ls_l2norm_forward_f64(y64, r64, x, 1e-6, 0.125, rows, n);
    kc32_l2norm_forward(y32, r32, x, 1e-6, 0.125, rows, n);
    check("l2norm forward", y32, y64, N);
    free(x); free(z); free(w); free(b); free(dy); free(y64); free(y32); free(r64); free(r32);
}

Test(kernels_core_f32, rope)
{
    uint64_t s = 204;
    size_t T = 64, H = 4, hd = 64, d_r = 16, N = T * H * hd;
    int64_t pos0 = 131000; /* long-context positions: angles up to ~1.3e5 rad */
    double *x = tu_rand_f32(&s, N, -1, 1), *y64 = tu_fill(N, 0), *y32 = tu_fill(N, 0);
    for (int k = 0; k <= 1; k++) {
        ls_rope_kind kind = k ? LS_ROPE_INTERLEAVED : LS_ROPE_NEOX;
        memcpy(y64, x, N * sizeof *x);
        memcpy(y32, x, N * sizeof *x);
        ls_rope_apply_f64(y64, kind, T, H, hd, d_r, pos0, 10000.0, 0);
        kc32_rope_apply(y32, kind, T, H, hd, d_r, pos0, 10000.0, 0);
        check(k ? "rope interleaved forward (pos 131000)" : "rope neox forward (pos 131000)", y32,
              y64, N);
    }
    free(x); free(y64); free(y32);
}

Test(kernels_core_f32, activations)
{
    uint64_t s = 205;
    size_t rows = 32, n = 96, stride = 200, N = rows * n;
    double *g = tu_rand_f32(&s, N, -8, 8), *u = tu_rand_f32(&s, N, -1, 1), *gate = tu_rand_f32(&s, rows * stride, -8, 8);
    double *y64 = tu_fill(N, 0), *y32 = tu_fill(N, 0);
    ls_swiglu_forward_f64(y64, g, u, N);
    kc32_swiglu_forward(y32, g, u, N);
    check("swiglu forward", y32, y64, N);
    ls_sigmoid_gate_forward_f64(y64, u, gate, rows, n, stride);
    kc32_sigmoid_gate_forward(y32, u, gate, rows, n, stride);
    check("sigmoid gate forward", y32, y64, N);
    free(g); free(u); free(gate); free(y64); free(y32);
}

Test(kernels_core_f32, logprob)
{
    uint64_t s = 206;
    size_t T = 32, d = 64, V = 2000, chunk = 256;
    double temp = 0.8;
    double *h = tu_rand_f32(&s, T * d, -1, 1), *W = tu_rand_f32(&s, V * d, -0.3, 0.3), *dl = tu_rand_f32(&s, T, -1, 1);
    int32_t y[32];
    for (size_t t = 0; t < T; t++)
        y[t] = (int32_t)(tu_next(&s) % V);
    double *ws = tu_fill(ls_logprob_workspace_f64(T, chunk), 0);
    double *l64 = tu_fill(T, 0), *l32 = tu_fill(T, 0), *s64 = tu_fill(T, 0), *s32 = tu_fill(T, 0);
    ls_logprob_forward_f64(l64, s64, h, W, y, temp, T, d, V, chunk, ws);
    kc32_logprob_forward(l32, s32, h, W, y, temp, T, d, V, chunk);
    check("logprob forward logp (V 2000, chunk 256)", l32, l64, T);
    check("logprob forward lse", s32, s64, T);

    double *dh64 = tu_fill(T * d, 0), *dh32 = tu_fill(T * d, 0);
    double *dW64 = tu_fill(V * d, 0), *dW32 = tu_fill(V * d, 0);
    tu_round_f32(s64, T);
    ls_logprob_backward_f64(dh64, dW64, dl, h, W, y, s64, temp, T, d, V, chunk, ws);
    kc32_logprob_backward(dh32, dW32, dl, h, W, y, s64, temp, T, d, V, chunk);
    check("logprob backward dh", dh32, dh64, T * d);
    check("logprob backward dW", dW32, dW64, V * d);

    double *row64 = tu_fill(V, 0), *row32 = tu_fill(V, 0);
    ls_logprob_row_f64(row64, h, W, temp, d, V);
    kc32_logprob_row(row32, h, W, temp, d, V);
    check("logprob_row", row32, row64, V);
    free(h); free(W); free(dl); free(ws); free(l64); free(l32); free(s64); free(s32);
    free(dh64); free(dh32); free(dW64); free(dW32); free(row64); free(row32);
}

Test(kernels_core_f32, grpo_adamw)
{
    uint64_t s = 207;
    size_t G = 8, R = 50, n = 1000;
    double *rw = tu_rand_f32(&s, G, 0, 1), *A64 = tu_fill(G, 0), *A32 = tu_fill(G, 0);
    ls_grpo_advantages_f64(A64, rw, G);
    kc32_grpo_advantages(A32, rw, G);
    check("grpo advantages", A32, A64, G);

    double *lp = tu_rand_f32(&s, R, -4, -0.1), *old = tu_fill(R, 0), *ref = tu_fill(R, 0);
    for (size_t t = 0; t < R; t++) {
        old[t] = (double)(float)(lp[t] + tu_unif(&s, -0.4, 0.4));
        ref[t] = (double)(float)(lp[t] + tu_unif(&s, -0.4, 0.4));
    }
    double a = (double)(float)A64[0];
    double *g64 = tu_fill(R, 0), *g32 = tu_fill(R, 0);
    double L64 = ls_grpo_member_loss_f64(g64, lp, old, ref, a, 0.2, 0.04, G, R);
    double L32 = kc32_grpo_member_loss(g32, lp, old, ref, a, 0.2, 0.04, G, R);
    check("grpo member loss", &L32, &L64, 1);
    check("grpo member dlogp", g32, g64, R);

    double *p64 = tu_rand_f32(&s, n, -1, 1), *gr = tu_rand_f32(&s, n, -1, 1), *p32 = tu_copy(p64, n);
    double *m64 = tu_fill(n, 0), *v64 = tu_fill(n, 0), *m32 = tu_fill(n, 0), *v32 = tu_fill(n, 0);
    for (int64_t step = 1; step <= 3; step++) {
        ls_adamw_step_f64(p64, m64, v64, gr, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, step);
        kc32_adamw_step(p32, m32, v32, gr, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, step);
    }
    check("adamw 3 steps p", p32, p64, n);
    check("adamw 3 steps v", v32, v64, n);
    free(rw); free(A64); free(A32); free(lp); free(old); free(ref); free(g64); free(g32);
    free(p64); free(gr); free(p32); free(m64); free(v64); free(m32); free(v32);
}
