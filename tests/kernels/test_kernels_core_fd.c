/* test_kernels_core_fd.c - every backward of the core kernels (linear, LoRA,
 * embedding, norms, RoPE, activations, logprob, GRPO loss) against central
 * finite differences in float64.  Each check differentiates a random linear
 * functional L = sum(w * out) of the op's output; the analytic gradient comes
 * from the backward with dy = w.  Reported: max|analytic - fd| / max|fd|. */
#include <criterion/criterion.h>

#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/grpo.h"
#include "kernels/linear.h"
#include "kernels/logprob.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "tests/support/test_util.h"

#define FD_H 1e-5
#define FD_BOUND 1e-8

/* Central differences of loss() with respect to p[0..n), compared with analytic[0..n).
 * Returns the normwise relative error and fails the test when it exceeds FD_BOUND
 * or when the finite-difference gradient is identically zero. */
static double fd_check(const char *what, double *p, size_t n, const double *analytic,
                       tu_loss_fn loss, void *ctx)
{
    double fd_max = 0;
    double err = tu_fd_check(loss, ctx, p, analytic, n, 1, FD_H, &fd_max);
    tu_report(what, err, FD_BOUND);
    cr_expect(fd_max > 1e-8, "%s: finite-difference gradient is zero", what);
    cr_expect(err <= FD_BOUND, "%s: rel err %.3e", what, err);
    return err;
}

/* analytic gradient of an accumulating output: got - initial */
static void sub_inplace(double *got, const double *initial, size_t n)
{
    for (size_t i = 0; i < n; i++)
        got[i] -= initial[i];
}

/* ---------------------------------------------------------------- linear */

typedef struct {
    double *x, *W, *y, *w;
    size_t T, in, out;
} lin_ctx;

static double lin_loss(void *c_)
{
    lin_ctx *c = c_;
    ls_linear_forward_f64(c->y, c->x, c->W, c->T, c->in, c->out, 0);
    return tu_dot(c->w, c->y, c->T * c->out);
}

Test(kernels_core_fd, linear)
{
    uint64_t s = 11;
    lin_ctx c = {.T = 5, .in = 7, .out = 6};
    size_t nx = c.T * c.in, nW = c.out * c.in, ny = c.T * c.out;
    c.x = tu_rand(&s, nx, -1, 1);
    c.W = tu_rand(&s, nW, -1, 1);
    c.y = tu_fill(ny, 0);
    c.w = tu_rand(&s, ny, -1, 1);

    /* dx assigned (pre-filled with garbage), dW accumulated onto random values */
    double *dx = tu_fill(nx, 1e30);
    double *dW0 = tu_rand(&s, nW, -1, 1), *dW = tu_copy(dW0, nW);
    ls_linear_backward_f64(dx, dW, c.w, c.x, c.W, c.T, c.in, c.out, 0);
    sub_inplace(dW, dW0, nW);
    fd_check("linear dx", c.x, nx, dx, lin_loss, &c);
    fd_check("linear dW (+=)", c.W, nW, dW, lin_loss, &c);

    /* accumulate_dx = 1 adds onto dx */
    double *dx0 = tu_rand(&s, nx, -1, 1), *dxa = tu_copy(dx0, nx);
    ls_linear_backward_f64(dxa, NULL, c.w, c.x, c.W, c.T, c.in, c.out, 1);
    sub_inplace(dxa, dx0, nx);
    fd_check("linear dx (accumulate_dx)", c.x, nx, dxa, lin_loss, &c);

    /* NULL gradients: the other output is unchanged by the omission */
    double *dW2 = tu_fill(nW, 0);
    ls_linear_backward_f64(NULL, dW2, c.w, c.x, c.W, c.T, c.in, c.out, 0);
    cr_expect(tu_rel_err(dW2, dW, nW) < 1e-14, "dW with dx = NULL differs");

    free(c.x); free(c.W); free(c.y); free(c.w);
    free(dx); free(dW0); free(dW); free(dx0); free(dxa); free(dW2);
}

/* ---------------------------------------------------------------- LoRA */

typedef struct {
    double *x, *W, *A, *B, *y, *xa, *w, s;
    size_t T, in, out, r;
} lora_ctx;

static double lora_loss(void *c_)
{
    lora_ctx *c = c_;
    ls_lora_forward_f64(c->y, c->xa, c->x, c->W, c->A, c->B, c->s, c->T, c->in, c->out, c->r);
    return tu_dot(c->w, c->y, c->T * c->out);
}

Test(kernels_core_fd, lora)
{
    uint64_t s = 12;
    lora_ctx c = {.T = 6, .in = 8, .out = 5, .r = 3, .s = 8.0 / 3.0};
    size_t nx = c.T * c.in, nW = c.out * c.in, nA = c.r * c.in, nB = c.out * c.r;
    size_t ny = c.T * c.out;
    c.x = tu_rand(&s, nx, -1, 1);
    c.W = tu_rand(&s, nW, -1, 1);
    c.A = tu_rand(&s, nA, -1, 1);
    c.B = tu_rand(&s, nB, -1, 1);
    c.y = tu_fill(ny, 0);
    c.xa = tu_fill(c.T * c.r, 0);
    c.w = tu_rand(&s, ny, -1, 1);
    lora_loss(&c); /* fills xa */

    double *dx = tu_fill(nx, 1e30), *scratch = tu_fill(c.T * c.r, 1e30);
    double *dW0 = tu_rand(&s, nW, -1, 1), *dW = tu_copy(dW0, nW);
    double *dA0 = tu_rand(&s, nA, -1, 1), *dA = tu_copy(dA0, nA);
    double *dB0 = tu_rand(&s, nB, -1, 1), *dB = tu_copy(dB0, nB);
    ls_lora_backward_f64(dx, dW, dA, dB, c.w, c.x, c.xa, c.W, c.A, c.B, c.s, c.T, c.in, c.out,
                         c.r, scratch, 0);
    sub_inplace(dW, dW0, nW);
    sub_inplace(dA, dA0, nA);
    sub_inplace(dB, dB0, nB);
    fd_check("lora dx", c.x, nx, dx, lora_loss, &c);
    fd_check("lora dW (+=)", c.W, nW, dW, lora_loss, &c);
    fd_check("lora dA (+=)", c.A, nA, dA, lora_loss, &c);
    fd_check("lora dB (+=)", c.B, nB, dB, lora_loss, &c);

    /* accumulate_dx and frozen (NULL) parameter gradients */
    lora_loss(&c);
    double *dx0 = tu_rand(&s, nx, -1, 1), *dxa = tu_copy(dx0, nx);
    ls_lora_backward_f64(dxa, NULL, NULL, NULL, c.w, c.x, c.xa, c.W, c.A, c.B, c.s, c.T, c.in,
                         c.out, c.r, scratch, 1);
    sub_inplace(dxa, dx0, nx);
    fd_check("lora dx (accumulate_dx, params NULL)", c.x, nx, dxa, lora_loss, &c);
    double *dA2 = tu_fill(nA, 0);
    ls_lora_backward_f64(NULL, NULL, dA2, NULL, c.w, c.x, c.xa, c.W, c.A, c.B, c.s, c.T, c.in,
                         c.out, c.r, scratch, 0);
    cr_expect(tu_rel_err(dA2, dA, nA) < 1e-14, "dA alone differs");

    free(c.x); free(c.W); free(c.A); free(c.B); free(c.y); free(c.xa); free(c.w);
    free(dx); free(scratch); free(dW0); free(dW); free(dA0); free(dA); free(dB0); free(dB);
    free(dx0); free(dxa); free(dA2);
}

/* ---------------------------------------------------------------- embedding */

typedef struct {
    double *E, *h, *w;
    const int32_t *ids;
    size_t T, d;
} emb_ctx;

static double emb_loss(void *c_)
{
    emb_ctx *c = c_;
    ls_embedding_forward_f64(c->h, c->ids, c->E, c->T, c->d);
    return tu_dot(c->w, c->h, c->T * c->d);
}

Test(kernels_core_fd, embedding)
{
    uint64_t s = 13;
    static const int32_t ids[] = {3, 0, 3, 5, 1, 3, 0}; /* 3 and 0 repeat; 2, 4 unused */
    size_t V = 6;
    emb_ctx c = {.ids = ids, .T = 7, .d = 4};
    c.E = tu_rand(&s, V * c.d, -1, 1);
    c.h = tu_fill(c.T * c.d, 0);
    c.w = tu_rand(&s, c.T * c.d, -1, 1);
    double *dE0 = tu_rand(&s, V * c.d, -1, 1), *dE = tu_copy(dE0, V * c.d);
    ls_embedding_backward_f64(dE, c.w, ids, c.T, c.d);
    sub_inplace(dE, dE0, V * c.d);
    fd_check("embedding dE (+=, repeated ids)", c.E, V * c.d, dE, emb_loss, &c);
    free(c.E); free(c.h); free(c.w); free(dE0); free(dE);
}

/* ---------------------------------------------------------------- RMSNorm */

typedef struct {
    double *x, *z, *wt, *y, *rstd, *w, eps;
    int zc;
    size_t rows, n;
} rms_ctx;

static double rms_loss(void *c_)
{
    rms_ctx *c = c_;
    ls_rmsnorm_forward_f64(c->y, c->rstd, c->x, c->wt, c->zc, c->eps, c->rows, c->n);
    return tu_dot(c->w, c->y, c->rows * c->n);
}

static void rms_case(int zc, uint64_t seed)
{
    uint64_t s = seed;
    rms_ctx c = {.rows = 4, .n = 9, .eps = 1e-6, .zc = zc};
    size_t N = c.rows * c.n;
    c.x = tu_rand(&s, N, -1, 1);
    c.wt = zc ? tu_rand(&s, c.n, -0.5, 0.5) : tu_rand(&s, c.n, 0.5, 1.5);
    c.y = tu_fill(N, 0);
    c.rstd = tu_fill(c.rows, 0);
    c.w = tu_rand(&s, N, -1, 1);
    rms_loss(&c);
    double *dx = tu_fill(N, 1e30), *dw0 = tu_rand(&s, c.n, -1, 1), *dw = tu_copy(dw0, c.n);
    ls_rmsnorm_backward_f64(dx, dw, c.w, c.x, c.rstd, c.wt, zc, c.rows, c.n);
    sub_inplace(dw, dw0, c.n);
    fd_check(zc ? "rmsnorm zero-centred dx" : "rmsnorm standard dx", c.x, N, dx, rms_loss, &c);
    fd_check(zc ? "rmsnorm zero-centred dw (+=)" : "rmsnorm standard dw (+=)", c.wt, c.n, dw,
             rms_loss, &c);
    free(c.x); free(c.wt); free(c.y); free(c.rstd); free(c.w); free(dx); free(dw0); free(dw);
}

Test(kernels_core_fd, rmsnorm_standard) { rms_case(0, 14); }
Test(kernels_core_fd, rmsnorm_zero_centred) { rms_case(1, 15); }

static double grms_loss(void *c_)
{
    rms_ctx *c = c_;
    ls_gated_rmsnorm_forward_f64(c->y, c->rstd, c->x, c->z, c->wt, c->eps, c->rows, c->n);
    return tu_dot(c->w, c->y, c->rows * c->n);
}

Test(kernels_core_fd, gated_rmsnorm)
{
    uint64_t s = 16;
    rms_ctx c = {.rows = 5, .n = 8, .eps = 1e-6};
    size_t N = c.rows * c.n;
    c.x = tu_rand(&s, N, -1, 1);
    c.z = tu_rand(&s, N, -3, 3);
    c.wt = tu_rand(&s, c.n, 0.5, 1.5);
    c.y = tu_fill(N, 0);
    c.rstd = tu_fill(c.rows, 0);
    c.w = tu_rand(&s, N, -1, 1);
    grms_loss(&c);
    double *dx = tu_fill(N, 1e30), *dz = tu_fill(N, 1e30);
    double *dw0 = tu_rand(&s, c.n, -1, 1), *dw = tu_copy(dw0, c.n);
    ls_gated_rmsnorm_backward_f64(dx, dz, dw, c.w, c.x, c.z, c.rstd, c.wt, c.rows, c.n);
    sub_inplace(dw, dw0, c.n);
    fd_check("gated rmsnorm dx", c.x, N, dx, grms_loss, &c);
    fd_check("gated rmsnorm dz", c.z, N, dz, grms_loss, &c);
    fd_check("gated rmsnorm dw (+=)", c.wt, c.n, dw, grms_loss, &c);
    free(c.x); free(c.z); free(c.wt); free(c.y); free(c.rstd); free(c.w);
    free(dx); free(dz); free(dw0); free(dw);
}

/* ---------------------------------------------------------------- L2 norm */

static double l2_loss(void *c_)
{
    rms_ctx *c = c_; /* eps, rstd (= rinv); wt[0] holds the scale */
    ls_l2norm_forward_f64(c->y, c->rstd, c->x, c->eps, c->wt[0], c->rows, c->n);
    return tu_dot(c->w, c->y, c->rows * c->n);
}

Test(kernels_core_fd, l2norm)
{
    uint64_t s = 17;
    double scale = 0.25; /* dk^(-1/2) for dk = 16 */
    rms_ctx c = {.rows = 6, .n = 16, .eps = 1e-6, .wt = &scale};
    size_t N = c.rows * c.n;
    c.x = tu_rand(&s, N, -1, 1);
    c.y = tu_fill(N, 0);
    c.rstd = tu_fill(c.rows, 0);
    c.w = tu_rand(&s, N, -1, 1);
    l2_loss(&c);
    double *dx = tu_fill(N, 1e30);
    ls_l2norm_backward_f64(dx, c.w, c.x, c.rstd, scale, c.rows, c.n);
    fd_check("l2norm dx", c.x, N, dx, l2_loss, &c);
    free(c.x); free(c.y); free(c.rstd); free(c.w); free(dx);
}

/* ---------------------------------------------------------------- RoPE */

typedef struct {
    double *x, *y, *w;
    ls_rope_kind kind;
    size_t T, H, hd, d_r;
    int64_t pos0;
} rope_ctx;

static double rope_loss(void *c_)
{
    rope_ctx *c = c_;
    size_t N = c->T * c->H * c->hd;
    memcpy(c->y, c->x, N * sizeof *c->y);
    ls_rope_apply_f64(c->y, c->kind, c->T, c->H, c->hd, c->d_r, c->pos0, 10000.0, 0);
    return tu_dot(c->w, c->y, N);
}

static void rope_case(ls_rope_kind kind, uint64_t seed)
{
    uint64_t s = seed;
    rope_ctx c = {.kind = kind, .T = 5, .H = 3, .hd = 10, .d_r = 6, .pos0 = 1021};
    size_t N = c.T * c.H * c.hd;
    c.x = tu_rand(&s, N, -1, 1);
    c.y = tu_fill(N, 0);
    c.w = tu_rand(&s, N, -1, 1);
    double *dx = tu_copy(c.w, N); /* backward = rotation of the gradient by -phi */
    ls_rope_apply_f64(dx, kind, c.T, c.H, c.hd, c.d_r, c.pos0, 10000.0, 1);
    fd_check(kind == LS_ROPE_NEOX ? "rope neox dx (inverse)" : "rope interleaved dx (inverse)",
             c.x, N, dx, rope_loss, &c);
    free(c.x); free(c.y); free(c.w); free(dx);
}

Test(kernels_core_fd, rope_neox) { rope_case(LS_ROPE_NEOX, 18); }
Test(kernels_core_fd, rope_interleaved) { rope_case(LS_ROPE_INTERLEAVED, 19); }

/* ---------------------------------------------------------------- activations */

typedef struct {
    double *a, *b, *y, *w;
    size_t rows, n, stride;
} act_ctx;

static double swiglu_loss(void *c_)
{
    act_ctx *c = c_;
    ls_swiglu_forward_f64(c->y, c->a, c->b, c->n);
    return tu_dot(c->w, c->y, c->n);
}

Test(kernels_core_fd, swiglu)
{
    uint64_t s = 20;
    act_ctx c = {.n = 40};
    c.a = tu_rand(&s, c.n, -4, 4);
    c.b = tu_rand(&s, c.n, -1, 1);
    c.y = tu_fill(c.n, 0);
    c.w = tu_rand(&s, c.n, -1, 1);
    double *dg = tu_fill(c.n, 1e30), *du = tu_fill(c.n, 1e30);
    ls_swiglu_backward_f64(dg, du, c.w, c.a, c.b, c.n);
    fd_check("swiglu dg", c.a, c.n, dg, swiglu_loss, &c);
    fd_check("swiglu du", c.b, c.n, du, swiglu_loss, &c);
    free(c.a); free(c.b); free(c.y); free(c.w); free(dg); free(du);
}

static double sgate_loss(void *c_)
{
    act_ctx *c = c_;
    ls_sigmoid_gate_forward_f64(c->y, c->a, c->b, c->rows, c->n, c->stride);
    return tu_dot(c->w, c->y, c->rows * c->n);
}

Test(kernels_core_fd, sigmoid_gate_strided)
{
    uint64_t s = 21;
    act_ctx c = {.rows = 4, .n = 5, .stride = 11};
    size_t N = c.rows * c.n, NG = c.rows * c.stride;
    c.a = tu_rand(&s, N, -1, 1);
    c.b = tu_rand(&s, NG, -4, 4);
    c.y = tu_fill(N, 0);
    c.w = tu_rand(&s, N, -1, 1);
    double *dx = tu_fill(N, 1e30), *dgate = tu_fill(NG, 0.0);
    ls_sigmoid_gate_backward_f64(dx, dgate, c.w, c.a, c.b, c.rows, c.n, c.stride);
    fd_check("sigmoid gate dx", c.a, N, dx, sgate_loss, &c);
    /* over the whole strided gate array: the unused columns must get exactly 0 from FD,
     * and the kernel must have left them untouched (0) */
    fd_check("sigmoid gate dgate (stride 11, n 5)", c.b, NG, dgate, sgate_loss, &c);
    free(c.a); free(c.b); free(c.y); free(c.w); free(dx); free(dgate);
}

/* ---------------------------------------------------------------- logprob */

typedef struct {
    double *h, *W, *logp, *lse, *w, *ws, temp;
    const int32_t *y;
    size_t T, d, V, chunk;
} lp_ctx;

static double lp_loss(void *c_)
{
    lp_ctx *c = c_;
    ls_logprob_forward_f64(c->logp, c->lse, c->h, c->W, c->y, c->temp, c->T, c->d, c->V, c->chunk,
                           c->ws);
    return tu_dot(c->w, c->logp, c->T);
}

Test(kernels_core_fd, logprob)
{
    uint64_t s = 22;
    static const int32_t y[] = {0, 22, 7, 12, 7}; /* first, last, repeated, chunk boundary */
    lp_ctx c = {.T = 5, .d = 7, .V = 23, .chunk = 6, .temp = 0.7, .y = y};
    size_t nh = c.T * c.d, nW = c.V * c.d;
    c.h = tu_rand(&s, nh, -1, 1);
    c.W = tu_rand(&s, nW, -1, 1);
    c.logp = tu_fill(c.T, 0);
    c.lse = tu_fill(c.T, 0);
    c.w = tu_rand(&s, c.T, -1, 1);
    c.ws = tu_fill(ls_logprob_workspace_f64(c.T, c.chunk), 0);
    lp_loss(&c);
    double *dh = tu_fill(nh, 1e30), *dW0 = tu_rand(&s, nW, -1, 1), *dW = tu_copy(dW0, nW);
    ls_logprob_backward_f64(dh, dW, c.w, c.h, c.W, c.y, c.lse, c.temp, c.T, c.d, c.V, c.chunk,
                            c.ws);
    sub_inplace(dW, dW0, nW);
    fd_check("logprob dh (V 23, chunk 6, temp 0.7)", c.h, nh, dh, lp_loss, &c);
    fd_check("logprob dW (+=)", c.W, nW, dW, lp_loss, &c);

    lp_loss(&c); /* the finite differences left lse from a perturbed W */
    double *dh2 = tu_fill(nh, 1e30);
    ls_logprob_backward_f64(dh2, NULL, c.w, c.h, c.W, c.y, c.lse, c.temp, c.T, c.d, c.V, c.chunk,
                            c.ws);
    cr_expect(tu_rel_err(dh2, dh, nh) < 1e-14, "dh with dW = NULL differs");
    free(c.h); free(c.W); free(c.logp); free(c.lse); free(c.w); free(c.ws);
    free(dh); free(dW0); free(dW); free(dh2);
}

/* ---------------------------------------------------------------- GRPO member loss */

typedef struct {
    double *logp, *old, *ref, A, eps, beta;
    size_t G, R;
} grpo_ctx;

static double grpo_loss(void *c_)
{
    grpo_ctx *c = c_;
    return ls_grpo_member_loss_f64(NULL, c->logp, c->old, c->ref, c->A, c->eps, c->beta, c->G,
                                   c->R);
}

/* log-ratios logp - old chosen so that rho = e^delta lies clearly inside [0.8, 1.2] or
 * clearly outside it on both sides (rho = 1.65, 1.35, 0.74, 0.61), away from the kinks. */
static void grpo_case(const char *what, double A, double beta, uint64_t seed)
{
    static const double delta[] = {0.5, 0.3, 0.05, -0.1, -0.3, -0.5, 0.0, 0.12};
    uint64_t s = seed;
    grpo_ctx c = {.A = A, .eps = 0.2, .beta = beta, .G = 3, .R = 8};
    c.logp = tu_rand(&s, c.R, -3, -0.1);
    c.old = tu_fill(c.R, 0);
    c.ref = tu_fill(c.R, 0);
    for (size_t t = 0; t < c.R; t++) {
        c.old[t] = c.logp[t] - delta[t];
        c.ref[t] = c.logp[t] + tu_unif(&s, -0.5, 0.5);
    }
    double *g = tu_fill(c.R, 1e30);
    double L = ls_grpo_member_loss_f64(g, c.logp, c.old, c.ref, c.A, c.eps, c.beta, c.G, c.R);
    cr_expect(fabs(L - grpo_loss(&c)) == 0, "loss differs with dlogp = NULL");
    fd_check(what, c.logp, c.R, g, grpo_loss, &c);
    if (beta == 0) {
        /* the clipped tokens carry no gradient at all */
        for (size_t t = 0; t < c.R; t++) {
            double rho = exp(delta[t]);
            int clipped = (A > 0 && rho > 1.2) || (A < 0 && rho < 0.8);
            if (clipped)
                cr_expect(g[t] == 0, "%s: token %zu clipped but gradient %g", what, t, g[t]);
            else
                cr_expect(g[t] != 0, "%s: token %zu active but gradient 0", what, t);
        }
    }
    free(c.logp); free(c.old); free(c.ref); free(g);
}

Test(kernels_core_fd, grpo_member_loss)
{
    grpo_case("grpo dlogp, A > 0, clipped + KL", 1.3, 0.04, 23);
    grpo_case("grpo dlogp, A < 0, clipped + KL", -0.8, 0.04, 24);
    grpo_case("grpo dlogp, A > 0, clipped only (beta 0)", 0.9, 0.0, 25);
    grpo_case("grpo dlogp, A < 0, clipped only (beta 0)", -1.1, 0.0, 26);
    grpo_case("grpo dlogp, A = 0, KL only", 0.0, 0.04, 27);
}
