/* test_kernels_seq_fd.c - every backward of the sequence kernels (conv1d,
 * GDN gates, GDN recurrence, attention block, merge) against central finite
 * differences of a random linear functional of the outputs, in float64. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/gdn.h"
#include "tests/support/test_util.h"

#define FD_H 1e-5
#define FD_TOL 1e-7

static void report(const char *what, double err)
{
    cr_log_info("%-40s worst FD rel err %.3e", what, err);
    cr_expect(err < FD_TOL, "%s: FD relative error %.3e >= %.1e", what, err, FD_TOL);
}

/* ---------------------------------------------------------------- conv1d */

typedef struct {
    double *m, *tail_in, *w, *Rc, *Rt, *c, *tail_out;
    size_t T, C, K;
} conv_ctx;

static double conv_loss(void *p)
{
    conv_ctx *x = p;
    ls_conv1d_forward_f64(x->c, NULL, x->tail_out, x->m, x->tail_in, x->w, x->T, x->C, x->K);
    return tu_dot(x->Rc, x->c, x->T * x->C) + tu_dot(x->Rt, x->tail_out, (x->K - 1) * x->C);
}

static void conv_fd_case(size_t T, uint64_t seed)
{
    const size_t C = 3, K = 4;
    uint64_t s = seed;
    conv_ctx x = {.T = T, .C = C, .K = K};
    x.m = tu_rand(&s, T * C, -2, 2);
    x.tail_in = tu_rand(&s, (K - 1) * C, -2, 2);
    x.w = tu_rand(&s, C * K, -1, 1);
    x.Rc = tu_rand(&s, T * C, -1, 1);
    x.Rt = tu_rand(&s, (K - 1) * C, -1, 1);
    x.c = tu_alloc(T * C);
    x.tail_out = tu_alloc((K - 1) * C);
    double *pre = tu_alloc(T * C);
    double *dm = tu_alloc(T * C), *dti = tu_alloc((K - 1) * C);
    double *dw0 = tu_rand(&s, C * K, -1, 1), *dw = tu_copy(dw0, C * K);

    ls_conv1d_forward_f64(x.c, pre, x.tail_out, x.m, x.tail_in, x.w, T, C, K);
    ls_conv1d_backward_f64(dm, dw, dti, x.Rc, x.Rt, pre, x.m, x.tail_in, x.w, T, C, K);
    for (size_t i = 0; i < C * K; i++) {
        dw[i] -= dw0[i]; /* dw accumulates onto what was there */
    }
    char name[64];
    snprintf(name, sizeof name, "conv1d T=%zu dm", T);
    report(name, tu_fd_check(conv_loss, &x, x.m, dm, T * C, 1, FD_H, NULL));
    snprintf(name, sizeof name, "conv1d T=%zu dw", T);
    report(name, tu_fd_check(conv_loss, &x, x.w, dw, C * K, 1, FD_H, NULL));
    snprintf(name, sizeof name, "conv1d T=%zu dtail_in", T);
    report(name, tu_fd_check(conv_loss, &x, x.tail_in, dti, (K - 1) * C, 1, FD_H, NULL));

    /* pre = NULL in backward recomputes it: same result */
    double *dm2 = tu_alloc(T * C), *dti2 = tu_alloc((K - 1) * C);
    ls_conv1d_backward_f64(dm2, NULL, dti2, x.Rc, x.Rt, NULL, x.m, x.tail_in, x.w, T, C, K);
    cr_expect(tu_max_diff(dm2, dm, T * C) < 1e-14 && tu_max_diff(dti2, dti, (K - 1) * C) < 1e-14,
              "conv1d backward without pre differs");

    free(x.m); free(x.tail_in); free(x.w); free(x.Rc); free(x.Rt); free(x.c);
    free(x.tail_out); free(pre); free(dm); free(dti); free(dw0); free(dw);
    free(dm2); free(dti2);
}

Test(kernels_seq_fd, conv1d)
{
    size_t Ts[] = {1, 2, 3, 4, 9};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        conv_fd_case(Ts[i], 100 + i);
    }
}

/* ----------------------------------------------------------------- gates */

typedef struct {
    double *a, *b, *A_log, *dt_bias, *Rg, *Rb, *g, *beta;
    size_t T, Hv;
} gates_ctx;

static double gates_loss(void *p)
{
    gates_ctx *x = p;
    ls_gdn_gates_forward_f64(x->g, x->beta, x->a, x->b, x->A_log, x->dt_bias, x->T, x->Hv);
    return tu_dot(x->Rg, x->g, x->T * x->Hv) + tu_dot(x->Rb, x->beta, x->T * x->Hv);
}

Test(kernels_seq_fd, gates)
{
    const size_t T = 6, Hv = 3, n = T * Hv;
    uint64_t s = 7;
    gates_ctx x = {.T = T, .Hv = Hv};
    x.a = tu_rand(&s, n, -4, 4);
    x.b = tu_rand(&s, n, -4, 4);
    /* extremes: softplus and sigmoid far out on both sides */
    x.a[0] = 40;
    x.a[1] = -40;
    x.b[2] = 30;
    x.b[3] = -30;
    x.A_log = tu_rand(&s, Hv, -1, 1);
    x.dt_bias = tu_rand(&s, Hv, -1, 1);
    x.Rg = tu_rand(&s, n, -1, 1);
    x.Rb = tu_rand(&s, n, -1, 1);
    x.g = tu_alloc(n);
    x.beta = tu_alloc(n);
    double *da = tu_alloc(n), *db = tu_alloc(n);
    double *dA = tu_rand(&s, Hv, -1, 1), *ddt = tu_rand(&s, Hv, -1, 1);
    double *dA0 = tu_copy(dA, Hv), *ddt0 = tu_copy(ddt, Hv);

    gates_loss(&x);
    for (size_t i = 0; i < n; i++) {
        cr_expect(isfinite(x.g[i]) && x.g[i] <= 0 && x.beta[i] >= 0 && x.beta[i] <= 1,
                  "gate %zu out of range: g %g beta %g", i, x.g[i], x.beta[i]);
    }
    ls_gdn_gates_backward_f64(da, db, dA, ddt, x.Rg, x.Rb, x.a, x.b, x.A_log, x.dt_bias, T, Hv);
    for (size_t j = 0; j < Hv; j++) {
        dA[j] -= dA0[j];
        ddt[j] -= ddt0[j];
    }
    report("gates da", tu_fd_check(gates_loss, &x, x.a, da, n, 1, FD_H, NULL));
    report("gates db", tu_fd_check(gates_loss, &x, x.b, db, n, 1, FD_H, NULL));
    report("gates dA_log", tu_fd_check(gates_loss, &x, x.A_log, dA, Hv, 1, FD_H, NULL));
    report("gates ddt_bias", tu_fd_check(gates_loss, &x, x.dt_bias, ddt, Hv, 1, FD_H, NULL));
    free(x.a); free(x.b); free(x.A_log); free(x.dt_bias); free(x.Rg); free(x.Rb);
    free(x.g); free(x.beta); free(da); free(db); free(dA); free(ddt); free(dA0); free(ddt0);
}

/* ------------------------------------------------------------------- GDN */

typedef struct {
    double *q, *k, *v, *g, *beta, *S_in, *Ro, *RS, *o, *S_out;
    size_t T, Hk, Hv, dk, dv;
    int chunked; /* the chunked form (ls_gdn_*_chunked), else the entry points */
} gdn_ctx;

static double gdn_loss(void *p)
{
    gdn_ctx *x = p;
    (x->chunked ? ls_gdn_forward_chunked_f64 : ls_gdn_forward_f64)(
        x->o, x->S_out, x->q, x->k, x->v, x->g, x->beta, x->S_in, x->T, x->Hk, x->Hv, x->dk,
        x->dv);
    return tu_dot(x->Ro, x->o, x->T * x->Hv * x->dv) +
           tu_dot(x->RS, x->S_out, x->Hv * x->dk * x->dv);
}

/* q, k rows scaled to unit-ish norm like the model's normalised inputs. */
static void gdn_fd_case(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, size_t stride,
                        int chunked, uint64_t seed)
{
    uint64_t s = seed;
    gdn_ctx x = {.T = T, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv, .chunked = chunked};
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    const double sc = 1.0 / sqrt((double)dk);
    x.q = tu_rand(&s, nq, -sc, sc);
    x.k = tu_rand(&s, nq, -1.7 * sc, 1.7 * sc);
    x.v = tu_rand(&s, nv, -1, 1);
    x.g = tu_rand(&s, ng, -0.6, -0.01);
    x.beta = tu_rand(&s, ng, 0.05, 0.95);
    x.S_in = tu_rand(&s, nS, -0.5, 0.5);
    x.Ro = tu_rand(&s, nv, -1, 1);
    x.RS = tu_rand(&s, nS, -1, 1);
    x.o = tu_alloc(nv);
    x.S_out = tu_alloc(nS);
    double *dq = tu_alloc(nq), *dk_ = tu_alloc(nq), *dv_ = tu_alloc(nv);
    double *dg = tu_alloc(ng), *db = tu_alloc(ng), *dS = tu_alloc(nS);
    double *ws = tu_alloc((chunked ? ls_gdn_backward_chunked_workspace_f64
                                   : ls_gdn_backward_workspace_f64)(T, Hk, Hv, dk, dv));

    (chunked ? ls_gdn_backward_chunked_f64 : ls_gdn_backward_f64)(
        dq, dk_, dv_, dg, db, dS, x.Ro, x.RS, x.q, x.k, x.v, x.g, x.beta, x.S_in, T, Hk, Hv, dk,
        dv, ws);
    char name[112];
#define GDN_REPORT(label, arr, grad, n)                                                      \
    snprintf(name, sizeof name, "gdn%s T=%zu Hk=%zu Hv=%zu dk=%zu dv=%zu " label,           \
             chunked ? " chunked" : "", T, Hk, Hv, dk, dv);                                  \
    report(name, tu_fd_check(gdn_loss, &x, arr, grad, n, stride, FD_H, NULL))
    GDN_REPORT("dq", x.q, dq, nq);
    GDN_REPORT("dk", x.k, dk_, nq);
    GDN_REPORT("dv", x.v, dv_, nv);
    GDN_REPORT("dg", x.g, dg, ng);
    GDN_REPORT("dbeta", x.beta, db, ng);
    GDN_REPORT("dS_in", x.S_in, dS, nS);
#undef GDN_REPORT
    free(x.q); free(x.k); free(x.v); free(x.g); free(x.beta); free(x.S_in); free(x.Ro);
    free(x.RS); free(x.o); free(x.S_out); free(dq); free(dk_); free(dv_); free(dg);
    free(db); free(dS); free(ws);
}

/* T = 150 spans three checkpoint chunks of 64: the recompute is exercised. */
Test(kernels_seq_fd, gdn_chunked)
{
    gdn_fd_case(150, 2, 4, 4, 3, 1, 0, 11);
}

/* The chunked form (chunks of 64, the last one ragged) against finite
 * differences of itself. */
Test(kernels_seq_fd, gdn_chunked_form)
{
    gdn_fd_case(150, 2, 4, 4, 3, 1, 1, 13);
    gdn_fd_case(70, 1, 2, 5, 9, 3, 1, 14);
}

/* dv = 70 spans two column blocks of the per-token vectors. */
Test(kernels_seq_fd, gdn_wide_dv)
{
    gdn_fd_case(70, 1, 2, 5, 70, 5, 0, 12);
}

/* -------------------------------------------------------------- attention */

typedef struct {
    double *q, *k, *v, *R, *o, *lse;
    size_t Tq, Tk, H, Hkv, hd;
    int64_t qp, kp;
    int causal;
    double tau;
} attn_ctx;

static double attn_loss(void *p)
{
    attn_ctx *x = p;
    ls_attn_block_forward_f64(x->o, x->lse, x->q, x->k, x->v, x->Tq, x->Tk, x->H, x->Hkv,
                              x->hd, x->qp, x->kp, x->causal, x->tau);
    return tu_dot(x->R, x->o, x->Tq * x->H * x->hd);
}

static void attn_fd_case(size_t Tq, size_t Tk, int64_t qp, int64_t kp, int causal,
                         size_t stride, uint64_t seed)
{
    const size_t H = 4, Hkv = 2, hd = 5;
    uint64_t s = seed;
    attn_ctx x = {.Tq = Tq, .Tk = Tk, .H = H, .Hkv = Hkv, .hd = hd, .qp = qp, .kp = kp,
                  .causal = causal, .tau = 1.0 / sqrt((double)hd)};
    const size_t nq = Tq * H * hd, nk = Tk * Hkv * hd;
    x.q = tu_rand(&s, nq, -1.5, 1.5);
    x.k = tu_rand(&s, nk, -1.5, 1.5);
    x.v = tu_rand(&s, nk, -1, 1);
    x.R = tu_rand(&s, nq, -1, 1);
    x.o = tu_alloc(nq);
    x.lse = tu_alloc(Tq * H);
    double *dq = tu_alloc(nq), *dk = tu_alloc(nk), *dv = tu_alloc(nk);
    attn_loss(&x);
    ls_attn_block_backward_f64(dq, dk, dv, x.R, x.q, x.k, x.v, x.o, x.lse, Tq, Tk, H, Hkv, hd,
                               qp, kp, causal, x.tau);
    char name[96];
    snprintf(name, sizeof name, "attn %s qp=%lld kp=%lld dq", causal ? "causal" : "full",
             (long long)qp, (long long)kp);
    report(name, tu_fd_check(attn_loss, &x, x.q, dq, nq, stride, FD_H, NULL));
    snprintf(name, sizeof name, "attn %s qp=%lld kp=%lld dk", causal ? "causal" : "full",
             (long long)qp, (long long)kp);
    report(name, tu_fd_check(attn_loss, &x, x.k, dk, nk, stride, FD_H, NULL));
    snprintf(name, sizeof name, "attn %s qp=%lld kp=%lld dv", causal ? "causal" : "full",
             (long long)qp, (long long)kp);
    report(name, tu_fd_check(attn_loss, &x, x.v, dv, nk, stride, FD_H, NULL));
    free(x.q); free(x.k); free(x.v); free(x.R); free(x.o); free(x.lse);
    free(dq); free(dk); free(dv);
}

/* queries at 3..9, keys at 5..13: the first two queries see no key */
Test(kernels_seq_fd, attn_causal)
{
    attn_fd_case(7, 9, 3, 5, 1, 1, 21);
}

Test(kernels_seq_fd, attn_full)
{
    attn_fd_case(7, 9, 10, 0, 0, 1, 22);
}

/* more than one query tile (16) and key tile (64) */
Test(kernels_seq_fd, attn_causal_tiles)
{
    attn_fd_case(40, 90, 60, 0, 1, 7, 23);
}

/* ------------------------------------------------------------------ merge */

typedef struct {
    double *op, *lp, *R, *r, *o, *lse;
    size_t P, n, hd;
} merge_ctx;

static double merge_loss(void *p)
{
    merge_ctx *x = p;
    for (size_t i = 0; i < x->n; i++) {
        x->lse[i] = -INFINITY;
    }
    memset(x->o, 0, x->n * x->hd * sizeof *x->o);
    for (size_t pp = 0; pp < x->P; pp++) {
        ls_attn_merge_into_f64(x->o, x->lse, x->op + pp * x->n * x->hd, x->lp + pp * x->n,
                               x->n, x->hd);
    }
    double L = tu_dot(x->R, x->o, x->n * x->hd);
    for (size_t i = 0; i < x->n; i++) {
        if (isfinite(x->lse[i])) {
            L += x->r[i] * x->lse[i];
        }
    }
    return L;
}

Test(kernels_seq_fd, merge_backward)
{
    const size_t P = 3, n = 5, hd = 4;
    uint64_t s = 31;
    merge_ctx x = {.P = P, .n = n, .hd = hd};
    x.op = tu_rand(&s, P * n * hd, -1, 1);
    x.lp = tu_rand(&s, P * n, -3, 3);
    x.lp[0 * n + 1] = -INFINITY; /* part 0 saw no key in row 1 */
    x.lp[2 * n + 3] = -INFINITY;
    x.lp[1 * n + 3] = -INFINITY; /* row 3: only part 0 */
    x.R = tu_rand(&s, n * hd, -1, 1);
    x.r = tu_rand(&s, n, -1, 1);
    x.o = tu_alloc(n * hd);
    x.lse = tu_alloc(n);
    merge_loss(&x);
    double *dop = tu_alloc(P * n * hd), *dlp = tu_alloc(P * n);
    for (size_t pp = 0; pp < P; pp++) {
        ls_attn_merge_backward_f64(dop + pp * n * hd, dlp + pp * n, x.R, x.r,
                                   x.op + pp * n * hd, x.lp + pp * n, x.o, x.lse, n, hd);
    }
    report("merge do_p", tu_fd_check(merge_loss, &x, x.op, dop, P * n * hd, 1, FD_H, NULL));
    /* finite lse_p only: -inf entries have no derivative (their gradient must be 0) */
    double maxd = 0, maxf = 0;
    for (size_t i = 0; i < P * n; i++) {
        if (x.lp[i] == -INFINITY) {
            cr_expect(dlp[i] == 0, "dlse_p of an empty part is %g, not 0", dlp[i]);
            continue;
        }
        double keep = x.lp[i];
        x.lp[i] = keep + FD_H;
        double a = merge_loss(&x);
        x.lp[i] = keep - FD_H;
        double b = merge_loss(&x);
        x.lp[i] = keep;
        double fd = (a - b) / (2 * FD_H);
        double d = fabs(fd - dlp[i]);
        if (!(d <= maxd)) {
            maxd = d; /* NaN propagates */
        }
        if (fabs(fd) > maxf) {
            maxf = fabs(fd);
        }
    }
    report("merge dlse_p", maxd / maxf);
    free(x.op); free(x.lp); free(x.R); free(x.r); free(x.o); free(x.lse); free(dop); free(dlp);
}
