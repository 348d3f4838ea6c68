/* test_kernels_core_ref.c - the core kernels' forwards against naive float64
 * implementations written from docs/model.md in this file (triple-loop GEMM,
 * W_eff = W + s B A, per-pair RoPE, full-vocabulary log-softmax, ...), and the
 * GRPO advantages/loss and AdamW against values worked by hand. */
#include <criterion/criterion.h>

#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/grpo.h"
#include "kernels/linear.h"
#include "kernels/logprob.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "tests/support/test_util.h"

#define REF_BOUND 1e-13

static void check(const char *what, const double *got, const double *want, size_t n, double bound)
{
    double err = tu_rel_err(got, want, n);
    tu_report(what, err, bound);
    cr_expect(err <= bound, "%s: rel err %.3e", what, err);
}

static void sigmoid_ref(double *s, double x) { *s = 1.0 / (1.0 + exp(-x)); }

/* ---------------------------------------------------------------- linear, LoRA */

/* y[T,out] (+)= x[T,in] W[out,in]^T, one dot product at a time */
static void naive_linear(double *y, const double *x, const double *W, size_t T, size_t in,
                         size_t out, int acc)
{
    for (size_t t = 0; t < T; t++)
        for (size_t o = 0; o < out; o++) {
            double s = 0;
            for (size_t i = 0; i < in; i++)
                s += x[t * in + i] * W[o * in + i];
            y[t * out + o] = (acc ? y[t * out + o] : 0) + s;
        }
}

Test(kernels_core_ref, linear_forward)
{
    uint64_t s = 101;
    size_t T = 9, in = 13, out = 11;
    double *x = tu_rand(&s, T * in, -1, 1), *W = tu_rand(&s, out * in, -1, 1);
    double *y = tu_fill(T * out, 1e30), *want = tu_fill(T * out, 0);
    ls_linear_forward_f64(y, x, W, T, in, out, 0);
    naive_linear(want, x, W, T, in, out, 0);
    check("linear forward", y, want, T * out, REF_BOUND);
    double *y0 = tu_rand(&s, T * out, -1, 1);
    memcpy(y, y0, T * out * sizeof *y);
    memcpy(want, y0, T * out * sizeof *y);
    ls_linear_forward_f64(y, x, W, T, in, out, 1);
    naive_linear(want, x, W, T, in, out, 1);
    check("linear forward (accumulate)", y, want, T * out, REF_BOUND);
    free(x); free(W); free(y); free(want); free(y0);
}

Test(kernels_core_ref, lora_forward)
{
    uint64_t s = 102;
    size_t T = 7, in = 10, out = 6, r = 4;
    double sc = 8.0 / 4.0;
    double *x = tu_rand(&s, T * in, -1, 1), *W = tu_rand(&s, out * in, -1, 1);
    double *A = tu_rand(&s, r * in, -1, 1), *B = tu_rand(&s, out * r, -1, 1);
    /* W_eff = W + s B A (docs/model.md §3) */
    double *Weff = tu_copy(W, out * in);
    for (size_t o = 0; o < out; o++)
        for (size_t i = 0; i < in; i++)
            for (size_t k = 0; k < r; k++)
                Weff[o * in + i] += sc * B[o * r + k] * A[k * in + i];
    double *y = tu_fill(T * out, 1e30), *xa = tu_fill(T * r, 1e30);
    double *want = tu_fill(T * out, 0), *want_xa = tu_fill(T * r, 0);
    ls_lora_forward_f64(y, xa, x, W, A, B, sc, T, in, out, r);
    naive_linear(want, x, Weff, T, in, out, 0);
    naive_linear(want_xa, x, A, T, in, r, 0);
    check("lora forward (vs x W_eff^T)", y, want, T * out, REF_BOUND);
    check("lora forward xa = x A^T", xa, want_xa, T * r, REF_BOUND);
    free(x); free(W); free(A); free(B); free(Weff); free(y); free(xa); free(want); free(want_xa);
}

Test(kernels_core_ref, embedding_forward)
{
    uint64_t s = 103;
    static const int32_t ids[] = {4, 0, 4, 2};
    size_t V = 5, d = 3, T = 4;
    double *E = tu_rand(&s, V * d, -1, 1), *h = tu_fill(T * d, 1e30);
    ls_embedding_forward_f64(h, ids, E, T, d);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < d; j++)
            cr_expect(h[t * d + j] == E[(size_t)ids[t] * d + j], "embedding row %zu", t);
    free(E); free(h);
}

/* ---------------------------------------------------------------- norms */

Test(kernels_core_ref, norms_forward)
{
    uint64_t s = 104;
    size_t rows = 5, n = 12;
    size_t N = rows * n;
    double eps = 1e-6;
    double *x = tu_rand(&s, N, -2, 2), *z = tu_rand(&s, N, -3, 3), *w = tu_rand(&s, n, -1, 1);
    double *b = tu_rand(&s, n, -1, 1);
    double *y = tu_fill(N, 1e30), *st = tu_fill(rows, 1e30), *want = tu_fill(N, 0);
    double *want_st = tu_fill(rows, 0);
    for (int zc = 0; zc <= 1; zc++) {
        ls_rmsnorm_forward_f64(y, st, x, w, zc, eps, rows, n);
        for (size_t t = 0; t < rows; t++) {
            double ms = 0;
            for (size_t j = 0; j < n; j++)
                ms += x[t * n + j] * x[t * n + j] / (double)n;
            want_st[t] = 1.0 / sqrt(ms + eps);
            for (size_t j = 0; j < n; j++)
                want[t * n + j] = (zc ? 1.0 + w[j] : w[j]) * x[t * n + j] * want_st[t];
        }
        check(zc ? "rmsnorm zero-centred forward" : "rmsnorm standard forward", y, want, N,
              REF_BOUND);
        check("rmsnorm rstd", st, want_st, rows, REF_BOUND);
    }
    /* gated: w * RMSNorm(x) * silu(z), standard gamma; want_st still holds this x's r */
    ls_gated_rmsnorm_forward_f64(y, st, x, z, w, eps, rows, n);
    for (size_t i = 0; i < N; i++) {
        double sg;
        sigmoid_ref(&sg, z[i]);
        want[i] = w[i % n] * x[i] * want_st[i / n] * z[i] * sg;
    }
    check("gated rmsnorm forward", y, want, N, REF_BOUND);
    check("gated rmsnorm rstd", st, want_st, rows, REF_BOUND);
    /* LayerNorm with biased variance */
    ls_layernorm_forward_f64(y, x, w, b, eps, rows, n);
    for (size_t t = 0; t < rows; t++) {
        double mu = 0, var = 0;
        for (size_t j = 0; j < n; j++)
            mu += x[t * n + j] / (double)n;
        for (size_t j = 0; j < n; j++)
            var += (x[t * n + j] - mu) * (x[t * n + j] - mu) / (double)n;
        for (size_t j = 0; j < n; j++)
            want[t * n + j] = w[j] * (x[t * n + j] - mu) / sqrt(var + eps) + b[j];
    }
    check("layernorm forward", y, want, N, REF_BOUND);
    /* L2 norm with scale */
    double scale = 0.3;
    ls_l2norm_forward_f64(y, st, x, eps, scale, rows, n);
    for (size_t t = 0; t < rows; t++) {
        double ss = 0;
        for (size_t j = 0; j < n; j++)
            ss += x[t * n + j] * x[t * n + j];
        want_st[t] = 1.0 / sqrt(ss + eps);
        for (size_t j = 0; j < n; j++)
            want[t * n + j] = x[t * n + j] * want_st[t] * scale;
    }
    check("l2norm forward", y, want, N, REF_BOUND);
    check("l2norm rinv", st, want_st, rows, REF_BOUND);
    free(x); free(z); free(w); free(b); free(y); free(st); free(want); free(want_st);
}

/* ---------------------------------------------------------------- RoPE */

/* docs/model.md §0 formulas, pair by pair, angle p * theta^(-2i/d_r) */
static void naive_rope(double *y, const double *x, ls_rope_kind kind, size_t T, size_t H,
                       size_t hd, size_t d_r, int64_t pos0, double theta)
{
    memcpy(y, x, T * H * hd * sizeof *y);
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++) {
            const double *xh = x + (t * H + h) * hd;
            double *yh = y + (t * H + h) * hd;
            for (size_t i = 0; i < d_r / 2; i++) {
                double phi = (double)(pos0 + (int64_t)t) / pow(theta, (double)(2 * i) / (double)d_r);
                if (kind == LS_ROPE_NEOX) {
                    size_t j = i + d_r / 2;
                    yh[i] = xh[i] * cos(phi) - xh[j] * sin(phi);
                    yh[j] = xh[j] * cos(phi) + xh[i] * sin(phi);
                } else {
                    yh[2 * i] = xh[2 * i] * cos(phi) - xh[2 * i + 1] * sin(phi);
                    yh[2 * i + 1] = xh[2 * i] * sin(phi) + xh[2 * i + 1] * cos(phi);
                }
            }
        }
}

Test(kernels_core_ref, rope)
{
    uint64_t s = 105;
    size_t T = 6, H = 3, hd = 12, d_r = 8;
    size_t N = T * H * hd;
    int64_t pos0 = 4093;
    double *x = tu_rand(&s, N, -1, 1), *y = tu_fill(N, 0), *want = tu_fill(N, 0);
    for (int k = 0; k <= 1; k++) {
        ls_rope_kind kind = k ? LS_ROPE_INTERLEAVED : LS_ROPE_NEOX;
        memcpy(y, x, N * sizeof *y);
        ls_rope_apply_f64(y, kind, T, H, hd, d_r, pos0, 10000.0, 0);
        naive_rope(want, x, kind, T, H, hd, d_r, pos0, 10000.0);
        /* phi reaches ~4e3 rad: the naive pow/division rounds the angle differently */
        check(k ? "rope interleaved forward" : "rope neox forward", y, want, N, 1e-11);
        for (size_t t = 0; t < T * H; t++)
            for (size_t j = d_r; j < hd; j++)
                cr_expect(y[t * hd + j] == x[t * hd + j], "pass-through dim changed");
        ls_rope_apply_f64(y, kind, T, H, hd, d_r, pos0, 10000.0, 1);
        check(k ? "rope interleaved inverse(forward(x)) = x" : "rope neox inverse(forward(x)) = x",
              y, x, N, 1e-14);
    }
    /* position 0 is the identity */
    memcpy(y, x, N * sizeof *y);
    ls_rope_apply_f64(y, LS_ROPE_NEOX, 1, H, hd, d_r, 0, 10000.0, 0);
    check("rope at position 0 is the identity", y, x, H * hd, 0);
    free(x); free(y); free(want);
}

/* ---------------------------------------------------------------- activations */

Test(kernels_core_ref, activations_forward)
{
    uint64_t s = 106;
    size_t rows = 3, n = 7, stride = 16, N = rows * n;
    double *g = tu_rand(&s, N, -30, 30), *u = tu_rand(&s, N, -1, 1);
    double *h = tu_fill(N, 1e30), *want = tu_fill(N, 0);
    ls_swiglu_forward_f64(h, g, u, N);
    for (size_t i = 0; i < N; i++)
        want[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
    check("swiglu forward (|g| up to 30)", h, want, N, REF_BOUND);

    double *gate = tu_rand(&s, rows * stride, -5, 5);
    ls_sigmoid_gate_forward_f64(h, u, gate, rows, n, stride);
    for (size_t t = 0; t < rows; t++)
        for (size_t j = 0; j < n; j++)
            want[t * n + j] = u[t * n + j] / (1.0 + exp(-gate[t * stride + j]));
    check("sigmoid gate forward (stride 16, n 7)", h, want, N, REF_BOUND);

    /* the backward writes only the n gate columns of each row */
    double *dx = tu_fill(N, 0), *dgate = tu_fill(rows * stride, 12345.0);
    ls_sigmoid_gate_backward_f64(dx, dgate, u, u, gate, rows, n, stride);
    for (size_t t = 0; t < rows; t++)
        for (size_t j = n; j < stride; j++)
            cr_expect(dgate[t * stride + j] == 12345.0, "dgate column %zu of row %zu written", j, t);
    free(g); free(u); free(h); free(want); free(gate); free(dx); free(dgate);
}

/* ---------------------------------------------------------------- logprob */

/* full logits h W^T / temp and a max-shifted log-softmax over the whole vocabulary */
static void naive_logsoftmax(double *lp /* [T,V] */, const double *h, const double *W, double temp,
                             size_t T, size_t d, size_t V)
{
    naive_linear(lp, h, W, T, d, V, 0);
    for (size_t t = 0; t < T; t++) {
        double *row = lp + t * V, m = -INFINITY, sum = 0;
        for (size_t v = 0; v < V; v++) {
            row[v] /= temp;
            m = row[v] > m ? row[v] : m;
        }
        for (size_t v = 0; v < V; v++)
            sum += exp(row[v] - m);
        for (size_t v = 0; v < V; v++)
            row[v] -= m + log(sum);
    }
}

Test(kernels_core_ref, logprob_vs_full_log_softmax)
{
    uint64_t s = 107;
    size_t T = 6, d = 16, V = 97;
    double temp = 0.6;
    double *h = tu_rand(&s, T * d, -2, 2), *W = tu_rand(&s, V * d, -1, 1);
    int32_t y[6];
    for (size_t t = 0; t < T; t++)
        y[t] = (int32_t)(tu_next(&s) % V);
    y[1] = 0;
    y[2] = (int32_t)V - 1;
    double *full = tu_fill(T * V, 0), *want = tu_fill(T, 0), *want_lse = tu_fill(T, 0);
    naive_logsoftmax(full, h, W, temp, T, d, V);
    for (size_t t = 0; t < T; t++) {
        want[t] = full[t * V + (size_t)y[t]];
        /* lse = logit - logp for any column */
        double z0 = 0;
        for (size_t j = 0; j < d; j++)
            z0 += h[t * d + j] * W[j];
        want_lse[t] = z0 / temp - full[t * V];
    }
    static const size_t chunks[] = {1, 10, 32, 96, 97, 200};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        size_t c = chunks[k];
        double *ws = tu_fill(ls_logprob_workspace_f64(T, c), 1e30);
        double *lp = tu_fill(T, 1e30), *lse = tu_fill(T, 1e30);
        ls_logprob_forward_f64(lp, lse, h, W, y, temp, T, d, V, c, ws);
        char what[64];
        snprintf(what, sizeof what, "logprob vs full log-softmax, chunk %zu", c);
        check(what, lp, want, T, 1e-13);
        check("  lse", lse, want_lse, T, 1e-13);
        free(ws); free(lp); free(lse);
    }
    /* the workspace holds at most T x chunk logits (+ T running sums) */
    cr_expect(ls_logprob_workspace_f64(T, 10) <= T * 10 + T);

    double *row = tu_fill(V, 1e30);
    ls_logprob_row_f64(row, h + 3 * d, W, temp, d, V);
    check("logprob_row vs full log-softmax", row, full + 3 * V, V, 1e-13);
    free(h); free(W); free(full); free(want); free(want_lse); free(row);
}

/* ---------------------------------------------------------------- GRPO, AdamW */

Test(kernels_core_ref, grpo_advantages)
{
    double A[4] = {9, 9, 9, 9};
    double r1[1] = {3.7};
    ls_grpo_advantages_f64(A, r1, 1);
    cr_expect(A[0] == 0, "G = 1 must give A = 0, got %g", A[0]);

    /* r = (1, 0, 0): mean 1/3, deviations (2/3, -1/3, -1/3),
     * var = (4/9 + 1/9 + 1/9) / (3 - 1) = 1/3, std = 1/sqrt(3) = 0.5773502691896258,
     * A = dev / (0.5773502691896258 + 1e-4) = dev / 0.5774502691896258
     *   = (1.1545005730142688, -0.5772502865071343, -0.5772502865071343) */
    double r3[3] = {1, 0, 0}, want3[3] = {1.1545005730142688, -0.5772502865071343,
                                          -0.5772502865071343};
    ls_grpo_advantages_f64(A, r3, 3);
    check("grpo advantages, 3 members by hand", A, want3, 3, 1e-14);

    /* r = (0.5, 2, -1, 0.5): mean 0.5, deviations (0, 1.5, -1.5, 0), var = 4.5/3 = 1.5,
     * std = 1.224744871391589, A = (0, 1.5/1.224844871391589, -1.5/1.224844871391589, 0) */
    double r4[4] = {0.5, 2, -1, 0.5}, want4[4] = {0, 1.2246448795558884, -1.2246448795558884, 0};
    ls_grpo_advantages_f64(A, r4, 4);
    check("grpo advantages, 4 members by hand", A, want4, 4, 1e-14);

    double req[3] = {0.25, 0.25, 0.25}, zero[3] = {0, 0, 0};
    ls_grpo_advantages_f64(A, req, 3);
    check("grpo advantages, equal rewards give 0", A, zero, 3, 0);
}

Test(kernels_core_ref, grpo_member_loss)
{
    /* G = 2, R = 2, A = 1, eps = 0.2, beta = 0.04.
     * t=0: logp -1.0, old -1.5: rho = e^0.5 = 1.6487212707 > 1.2, A > 0 -> clipped:
     *      min(1.6487, 1.2) = 1.2; ref -1.2: d = ref - logp = -0.2,
     *      KL = e^-0.2 + 0.2 - 1 = 0.0187307531; term = -1.2 + 0.04 * 0.0187307531 = -1.1992507699
     *      grad = (1/4) (0 + 0.04 (1 - e^-0.2)) = 0.25 * 0.04 * 0.1812692469 = 0.0018126925
     * t=1: logp -2.0, old -1.9: rho = e^-0.1 = 0.9048374180 (inside [0.8, 1.2]);
     *      ref -2.3: d = -0.3, KL = e^-0.3 + 0.3 - 1 = 0.0408182207;
     *      term = -0.9048374180 + 0.04 * 0.0408182207 = -0.9032046892
     *      grad = (1/4) (-0.9048374180 + 0.04 (1 - 0.7408182207)) = -0.2236175367
     * L = (1/4)(-1.1992507699 - 0.9032046892) = -0.5256138648 */
    double logp[2] = {-1.0, -2.0}, old[2] = {-1.5, -1.9}, ref[2] = {-1.2, -2.3};
    double g[2] = {1e30, 1e30};
    double L = ls_grpo_member_loss_f64(g, logp, old, ref, 1.0, 0.2, 0.04, 2, 2);
    double wantL = -0.5256138647713928, wantg[2] = {0.0018126924692201808, -0.22361753671580706};
    check("grpo member loss by hand", &L, &wantL, 1, 1e-14);
    check("grpo member dlogp by hand", g, wantg, 2, 1e-14);

    /* same tokens, A = -1: t=0 rho 1.6487 > 1.2 is now the active (unclipped) branch:
     * -min(-1.6487, -1.2) = 1.6487212707; t=1 inside: 0.9048374180.
     * L = (1/4)(1.6487212707 + 0.04*0.0187307531 + 0.9048374180 + 0.04*0.0408182207) */
    double wantL2 = 0.25 * (1.6487212707001282 + 0.04 * 0.018730753077981888 + 0.9048374180359595 +
                            0.04 * 0.04081822068171781);
    double g2[2] = {1e30, 1e30};
    double L2 = ls_grpo_member_loss_f64(g2, logp, old, ref, -1.0, 0.2, 0.04, 2, 2);
    double wantg2[2] = {0.25 * (1.6487212707001282 + 0.04 * (1 - exp(-0.2))),
                        0.25 * (0.9048374180359595 + 0.04 * (1 - exp(-0.3)))};
    check("grpo member loss by hand, A < 0", &L2, &wantL2, 1, 1e-14);
    check("grpo member dlogp by hand, A < 0", g2, wantg2, 2, 1e-14);

    cr_expect(ls_grpo_member_loss_f64(NULL, logp, old, ref, 1.0, 0.2, 0.04, 2, 0) == 0,
              "R = 0 contributes 0");
}

Test(kernels_core_ref, adamw_two_steps)
{
    /* lr 0.1, b1 0.9, b2 0.999, eps 1e-8, wd 0.01, p = (1, -2), m = v = 0.
     * step 1, g = (0.5, -1): m = 0.1 g = (0.05, -0.1), v = 0.001 g^2 = (0.00025, 0.001);
     *   m_hat = m / 0.1 = g, v_hat = v / 0.001 = g^2, m_hat/(sqrt(v_hat)+eps) = g/(|g|+1e-8)
     *   p0 = 1 - 0.1 (0.5/0.50000001 + 0.01*1) = 1 - 0.1 (0.99999998 + 0.01) = 0.899000002
     *   p1 = -2 - 0.1 (-1/1.00000001 + 0.01*(-2)) = -2 - 0.1 (-0.99999999 - 0.02) = -1.898000001
     * step 2, g = (-0.25, 2):
     *   m = 0.9 m + 0.1 g = (0.045 - 0.025, -0.09 + 0.2) = (0.02, 0.11)
     *   v = 0.999 v + 0.001 g^2 = (0.00024975 + 0.0000625, 0.000999 + 0.004) = (0.00031225, 0.004999)
     *   bias corrections 1 - 0.9^2 = 0.19, 1 - 0.999^2 = 0.001999
     *   p0: m_hat 0.1052631579, v_hat 0.1562031016, sqrt 0.3952253807, ratio 0.2663370329,
     *       + wd p 0.0089900000 -> 0.2753270329; p0 = 0.899000002 - 0.02753270329 = 0.8714672987
     *   p1: m_hat 0.5789473684, v_hat 2.5007503752, sqrt 1.5813761018, ratio 0.3661035247,
     *       + wd p -0.0189800000 -> 0.3471235247; p1 = -1.898000001 - 0.03471235247 = -1.9327123535
     * (10 digits shown; the asserted values carry the same arithmetic to double precision). */
    double p[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
    double g1[2] = {0.5, -1.0}, g2[2] = {-0.25, 2.0};
    ls_adamw_step_f64(p, m, v, g1, 2, 0.1, 0.9, 0.999, 1e-8, 0.01, 1);
    double want1[2] = {0.899000002, -1.898000001};
    check("adamw step 1 by hand", p, want1, 2, 1e-14);
    ls_adamw_step_f64(p, m, v, g2, 2, 0.1, 0.9, 0.999, 1e-8, 0.01, 2);
    double wantm[2] = {0.02, 0.11}, wantv[2] = {0.00031225, 0.004999};
    double want2[2] = {0.8714672987058464, -1.9327123534710748};
    check("adamw step 2 m by hand", m, wantm, 2, 1e-14);
    check("adamw step 2 v by hand", v, wantv, 2, 1e-14);
    check("adamw step 2 p by hand", p, want2, 2, 1e-14);
}

/* ---------------------------------------------------------------- parallel paths */

/* The kernels parallelise (OpenMP) only above a size threshold, which the small cases
 * above stay under.  Here each op runs once on a large input (parallel path) and again
 * one row (token, block) at a time (serial path); the two must agree. */
Test(kernels_core_ref, parallel_paths_match_row_by_row)
{
    uint64_t s = 108;
    size_t rows = 128, n = 320, N = rows * n; /* n not a multiple of the 64-column blocks */
    double *x = tu_rand(&s, N, -2, 2), *z = tu_rand(&s, N, -3, 3), *w = tu_rand(&s, n, -1, 1);
    double *b = tu_rand(&s, n, -1, 1), *dy = tu_rand(&s, N, -1, 1);
    double *yA = tu_fill(N, 0), *yB = tu_fill(N, 0), *rA = tu_fill(rows, 0), *rB = tu_fill(rows, 0);
    double *dzA = tu_fill(N, 0), *dzB = tu_fill(N, 0);
    double *dwA = tu_fill(n, 0), *dwB = tu_fill(n, 0);

    ls_rmsnorm_forward_f64(yA, rA, x, w, 1, 1e-6, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_rmsnorm_forward_f64(yB + t * n, rB + t, x + t * n, w, 1, 1e-6, 1, n);
    check("parallel rmsnorm forward", yA, yB, N, 0);
    ls_rmsnorm_backward_f64(yA, dwA, dy, x, rA, w, 1, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_rmsnorm_backward_f64(yB + t * n, dwB, dy + t * n, x + t * n, rA + t, w, 1, 1, n);
    check("parallel rmsnorm backward dx", yA, yB, N, 0);
    check("parallel rmsnorm backward dw", dwA, dwB, n, 1e-13);

    ls_gated_rmsnorm_forward_f64(yA, rA, x, z, w, 1e-6, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_gated_rmsnorm_forward_f64(yB + t * n, rB + t, x + t * n, z + t * n, w, 1e-6, 1, n);
    check("parallel gated rmsnorm forward", yA, yB, N, 0);
    memset(dwA, 0, n * sizeof *dwA);
    memset(dwB, 0, n * sizeof *dwB);
    ls_gated_rmsnorm_backward_f64(yA, dzA, dwA, dy, x, z, rA, w, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_gated_rmsnorm_backward_f64(yB + t * n, dzB + t * n, dwB, dy + t * n, x + t * n,
                                      z + t * n, rA + t, w, 1, n);
    check("parallel gated rmsnorm backward dx", yA, yB, N, 0);
    check("parallel gated rmsnorm backward dz", dzA, dzB, N, 0);
    check("parallel gated rmsnorm backward dw", dwA, dwB, n, 1e-13);

    ls_layernorm_forward_f64(yA, x, w, b, 1e-6, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_layernorm_forward_f64(yB + t * n, x + t * n, w, b, 1e-6, 1, n);
    check("parallel layernorm forward", yA, yB, N, 0);

    ls_l2norm_forward_f64(yA, rA, x, 1e-6, 0.5, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_l2norm_forward_f64(yB + t * n, rB + t, x + t * n, 1e-6, 0.5, 1, n);
    check("parallel l2norm forward", yA, yB, N, 0);
    ls_l2norm_backward_f64(yA, dy, x, rA, 0.5, rows, n);
    for (size_t t = 0; t < rows; t++)
        ls_l2norm_backward_f64(yB + t * n, dy + t * n, x + t * n, rA + t, 0.5, 1, n);
    check("parallel l2norm backward", yA, yB, N, 0);

    ls_swiglu_forward_f64(yA, x, z, N);
    for (size_t t = 0; t < rows; t++)
        ls_swiglu_forward_f64(yB + t * n, x + t * n, z + t * n, n);
    check("parallel swiglu forward", yA, yB, N, 0);
    ls_swiglu_backward_f64(yA, dzA, dy, x, z, N);
    for (size_t t = 0; t < rows; t++)
        ls_swiglu_backward_f64(yB + t * n, dzB + t * n, dy + t * n, x + t * n, z + t * n, n);
    check("parallel swiglu backward dg", yA, yB, N, 0);
    check("parallel swiglu backward du", dzA, dzB, N, 0);

    /* sigmoid gate with the gate as the second half of rows of width 2n */
    double *gate = tu_rand(&s, 2 * N, -4, 4), *dgA = tu_fill(2 * N, 0), *dgB = tu_fill(2 * N, 0);
    ls_sigmoid_gate_forward_f64(yA, x, gate + n, rows, n, 2 * n);
    for (size_t t = 0; t < rows; t++)
        ls_sigmoid_gate_forward_f64(yB + t * n, x + t * n, gate + n + 2 * n * t, 1, n, 2 * n);
    check("parallel sigmoid gate forward", yA, yB, N, 0);
    ls_sigmoid_gate_backward_f64(yA, dgA + n, dy, x, gate + n, rows, n, 2 * n);
    for (size_t t = 0; t < rows; t++)
        ls_sigmoid_gate_backward_f64(yB + t * n, dgB + n + 2 * n * t, dy + t * n, x + t * n,
                                     gate + n + 2 * n * t, 1, n, 2 * n);
    check("parallel sigmoid gate backward dx", yA, yB, N, 0);
    check("parallel sigmoid gate backward dgate", dgA, dgB, 2 * N, 0);

    /* RoPE: [T=128, H=4, hd=80] with d_r = 40 */
    size_t T = 128, H = 4, hd = 80, d_r = 40;
    memcpy(yA, x, N * sizeof *x);
    memcpy(yB, x, N * sizeof *x);
    ls_rope_apply_f64(yA, LS_ROPE_NEOX, T, H, hd, d_r, 777, 10000.0, 0);
    for (size_t t = 0; t < T; t++)
        ls_rope_apply_f64(yB + t * H * hd, LS_ROPE_NEOX, 1, H, hd, d_r, 777 + (int64_t)t, 10000.0,
                          0);
    check("parallel rope forward", yA, yB, N, 0);

    /* AdamW over N parameters vs 128 slices */
    double *pA = tu_copy(x, N), *pB = tu_copy(x, N), *mA = tu_copy(z, N), *mB = tu_copy(z, N);
    double *vA = tu_fill(N, 0.01), *vB = tu_fill(N, 0.01);
    ls_adamw_step_f64(pA, mA, vA, dy, N, 1e-3, 0.9, 0.95, 1e-8, 0.1, 7);
    for (size_t t = 0; t < rows; t++)
        ls_adamw_step_f64(pB + t * n, mB + t * n, vB + t * n, dy + t * n, n, 1e-3, 0.9, 0.95, 1e-8,
                          0.1, 7);
    check("parallel adamw p", pA, pB, N, 0);

    free(x); free(z); free(w); free(b); free(dy); free(yA); free(yB); free(rA); free(rB);
    free(dzA); free(dzB); free(dwA); free(dwB); free(gate); free(dgA); free(dgB);
    free(pA); free(pB); free(mA); free(mB); free(vA); free(vB);
}

Test(kernels_core_ref, parallel_logprob_match_row_by_row)
{
    uint64_t s = 109;
    size_t T = 64, d = 32, V = 1000, chunk = 300; /* T * chunk above the threshold */
    double temp = 1.3;
    double *h = tu_rand(&s, T * d, -1, 1), *W = tu_rand(&s, V * d, -1, 1), *dl = tu_rand(&s, T, -1, 1);
    int32_t y[64];
    for (size_t t = 0; t < T; t++)
        y[t] = (int32_t)(tu_next(&s) % V);
    double *ws = tu_fill(ls_logprob_workspace_f64(T, chunk), 0);
    double *lA = tu_fill(T, 0), *lB = tu_fill(T, 0), *sA = tu_fill(T, 0), *sB = tu_fill(T, 0);
    ls_logprob_forward_f64(lA, sA, h, W, y, temp, T, d, V, chunk, ws);
    for (size_t t = 0; t < T; t++)
        ls_logprob_forward_f64(lB + t, sB + t, h + t * d, W, y + t, temp, 1, d, V, chunk, ws);
    check("parallel logprob forward", lA, lB, T, 1e-14);
    check("parallel logprob lse", sA, sB, T, 1e-14);
    double *dhA = tu_fill(T * d, 0), *dhB = tu_fill(T * d, 0);
    double *dWA = tu_fill(V * d, 0), *dWB = tu_fill(V * d, 0);
    ls_logprob_backward_f64(dhA, dWA, dl, h, W, y, sA, temp, T, d, V, chunk, ws);
    for (size_t t = 0; t < T; t++)
        ls_logprob_backward_f64(dhB + t * d, dWB, dl + t, h + t * d, W, y + t, sA + t, temp, 1, d, V,
                                chunk, ws);
    check("parallel logprob backward dh", dhA, dhB, T * d, 1e-13);
    check("parallel logprob backward dW", dWA, dWB, V * d, 1e-13);
    free(h); free(W); free(dl); free(ws); free(lA); free(lB); free(sA); free(sB);
    free(dhA); free(dhB); free(dWA); free(dWB);
}
