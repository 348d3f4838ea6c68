/* test_kernels_seq_pieces.c - compositions of the sequence kernels that must
 * equal one pass (float64): GDN and conv1d over a sequence split into pieces
 * with the carried state handed on (forward, and backward with the state
 * gradients chained back), attention over keys split into blocks merged by
 * log-sum-exp (forward) and summed block backwards; and the kernels against
 * naive per-token / O(T^2) references written plainly here from docs/model.md. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <omp.h>

#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/gdn.h"
#include "tests/support/test_util.h"

#define EQ_TOL 1e-12  /* compositions of the same float64 math */
#define REF_TOL 1e-12 /* against the naive references */

static void check(const char *what, double err, double tol)
{
    cr_log_info("%-48s rel err %.3e", what, err);
    cr_expect(err < tol, "%s: relative error %.3e >= %.1e", what, err, tol);
}

/* ----------------------------------------------------------- GDN pieces */

static void gdn_pieces_case(size_t T, const size_t pieces[3], const char *label)
{
    const size_t Hk = 2, Hv = 4, dk = 6, dv = 5;
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    uint64_t s = 41 + T;
    const double sc = 1.0 / sqrt((double)dk);
    double *q = tu_rand(&s, nq, -sc, sc), *k = tu_rand(&s, nq, -sc, sc);
    double *v = tu_rand(&s, nv, -1, 1), *g = tu_rand(&s, ng, -0.5, 0);
    double *beta = tu_rand(&s, ng, 0, 1), *S0 = tu_rand(&s, nS, -1, 1);
    double *dO = tu_rand(&s, nv, -1, 1), *dSf = tu_rand(&s, nS, -1, 1);
    char name[96];

    /* one pass */
    double *o1 = tu_alloc(nv), *S1 = tu_alloc(nS);
    double *dq1 = tu_alloc(nq), *dk1 = tu_alloc(nq), *dv1 = tu_alloc(nv);
    double *dg1 = tu_alloc(ng), *db1 = tu_alloc(ng), *dS1 = tu_alloc(nS);
    double *ws = tu_alloc(ls_gdn_backward_workspace_f64(T, Hk, Hv, dk, dv));
    ls_gdn_forward_f64(o1, S1, q, k, v, g, beta, S0, T, Hk, Hv, dk, dv);
    ls_gdn_backward_f64(dq1, dk1, dv1, dg1, db1, dS1, dO, dSf, q, k, v, g, beta, S0, T, Hk, Hv,
                        dk, dv, ws);

    /* three pieces: Sp[p] is the state entering piece p */
    double *o3 = tu_alloc(nv), *Sp[4];
    double *dq3 = tu_alloc(nq), *dk3 = tu_alloc(nq), *dv3 = tu_alloc(nv);
    double *dg3 = tu_alloc(ng), *db3 = tu_alloc(ng), *dS3 = tu_alloc(nS);
    double *dSc = tu_copy(dSf, nS);
    size_t off[4] = {0};
    for (int p = 0; p < 3; p++) {
        off[p + 1] = off[p] + pieces[p];
    }
    Sp[0] = tu_copy(S0, nS);
    for (int p = 0; p < 3; p++) {
        size_t t0 = off[p], n = pieces[p];
        Sp[p + 1] = tu_alloc(nS);
        ls_gdn_forward_f64(o3 + t0 * Hv * dv, Sp[p + 1], q + t0 * Hk * dk, k + t0 * Hk * dk,
                           v + t0 * Hv * dv, g + t0 * Hv, beta + t0 * Hv, Sp[p], n, Hk, Hv, dk,
                           dv);
    }
    snprintf(name, sizeof name, "%s forward o", label);
    check(name, tu_rel_err(o3, o1, nv), EQ_TOL);
    snprintf(name, sizeof name, "%s forward S_out", label);
    check(name, tu_rel_err(Sp[3], S1, nS), EQ_TOL);
    for (int p = 2; p >= 0; p--) {
        size_t t0 = off[p], n = pieces[p];
        double *wsp = tu_alloc(ls_gdn_backward_workspace_f64(n, Hk, Hv, dk, dv));
        ls_gdn_backward_f64(dq3 + t0 * Hk * dk, dk3 + t0 * Hk * dk, dv3 + t0 * Hv * dv,
                            dg3 + t0 * Hv, db3 + t0 * Hv, dS3, dO + t0 * Hv * dv, dSc,
                            q + t0 * Hk * dk, k + t0 * Hk * dk, v + t0 * Hv * dv, g + t0 * Hv,
                            beta + t0 * Hv, Sp[p], n, Hk, Hv, dk, dv, wsp);
        memcpy(dSc, dS3, nS * sizeof *dSc); /* the gradient handed to the piece before */
        free(wsp);
    }
    snprintf(name, sizeof name, "%s backward dq", label);
    check(name, tu_rel_err(dq3, dq1, nq), EQ_TOL);
    snprintf(name, sizeof name, "%s backward dk", label);
    check(name, tu_rel_err(dk3, dk1, nq), EQ_TOL);
    snprintf(name, sizeof name, "%s backward dv", label);
    check(name, tu_rel_err(dv3, dv1, nv), EQ_TOL);
    snprintf(name, sizeof name, "%s backward dg", label);
    check(name, tu_rel_err(dg3, dg1, ng), EQ_TOL);
    snprintf(name, sizeof name, "%s backward dbeta", label);
    check(name, tu_rel_err(db3, db1, ng), EQ_TOL);
    snprintf(name, sizeof name, "%s backward dS_in", label);
    check(name, tu_rel_err(dS3, dS1, nS), EQ_TOL);

    /* in place: S_in == S_out carries the state through one buffer */
    double *Sc = tu_copy(S0, nS), *o4 = tu_alloc(nv);
    for (int p = 0; p < 3; p++) {
        size_t t0 = off[p];
        ls_gdn_forward_f64(o4 + t0 * Hv * dv, Sc, q + t0 * Hk * dk, k + t0 * Hk * dk,
                           v + t0 * Hv * dv, g + t0 * Hv, beta + t0 * Hv, Sc, pieces[p], Hk, Hv,
                           dk, dv);
    }
    snprintf(name, sizeof name, "%s in-place state o", label);
    check(name, tu_rel_err(o4, o1, nv), EQ_TOL);
    snprintf(name, sizeof name, "%s in-place state S_out", label);
    check(name, tu_rel_err(Sc, S1, nS), EQ_TOL);

    free(q); free(k); free(v); free(g); free(beta); free(S0); free(dO); free(dSf);
    free(o1); free(S1); free(dq1); free(dk1); free(dv1); free(dg1); free(db1); free(dS1);
    free(ws); free(o3); free(dq3); free(dk3); free(dv3); free(dg3); free(db3); free(dS3);
    free(dSc); free(Sc); free(o4);
    for (int p = 0; p < 4; p++) {
        free(Sp[p]);
    }
}

/* T = 150: checkpoint chunks of 64 (three, recomputed); T = 5000: chunks of
 * 128 in one pass, of 64 (and 1) in the pieces. */
Test(kernels_seq_pieces, gdn_three_pieces)
{
    const size_t p150[3] = {70, 1, 79}, p5000[3] = {2000, 1, 2999};
    gdn_pieces_case(150, p150, "gdn T=150 pieces 70+1+79");
    gdn_pieces_case(5000, p5000, "gdn T=5000 pieces 2000+1+2999");
}

/* T = 0 hands the state and its gradient through unchanged */
Test(kernels_seq_pieces, gdn_empty)
{
    const size_t Hk = 2, Hv = 4, dk = 6, dv = 5, nS = Hv * dk * dv;
    uint64_t s = 49;
    double *S0 = tu_rand(&s, nS, -1, 1), *dSf = tu_rand(&s, nS, -1, 1), x = 0;
    const double *q = &x, *k = &x, *v = &x, *g = &x, *beta = &x;
    double *Sz = tu_alloc(nS), *dSz = tu_alloc(nS);
    ls_gdn_forward_f64(NULL, Sz, q, k, v, g, beta, S0, 0, Hk, Hv, dk, dv);
    ls_gdn_backward_f64(NULL, NULL, NULL, NULL, NULL, dSz, NULL, dSf, q, k, v, g, beta, S0, 0,
                        Hk, Hv, dk, dv, NULL);
    check("gdn T=0 S_out == S_in", tu_max_diff(Sz, S0, nS), 1e-300);
    check("gdn T=0 dS_in == dS_out", tu_max_diff(dSz, dSf, nS), 1e-300);
    free(S0); free(dSf); free(Sz); free(dSz);
}

/* S_out = NULL runs the state in column blocks on the stack: same o. */
Test(kernels_seq_pieces, gdn_no_state_out)
{
    const size_t cases[2][5] = {{150, 2, 4, 4, 3}, {20, 1, 2, 100, 70}};
    for (int c = 0; c < 2; c++) {
        const size_t T = cases[c][0], Hk = cases[c][1], Hv = cases[c][2], dk = cases[c][3],
                     dv = cases[c][4];
        const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
        uint64_t s = 51 + (uint64_t)c;
        const double sc = 1.0 / sqrt((double)dk);
        double *q = tu_rand(&s, nq, -sc, sc), *k = tu_rand(&s, nq, -sc, sc);
        double *v = tu_rand(&s, nv, -1, 1), *g = tu_rand(&s, ng, -0.5, 0);
        double *beta = tu_rand(&s, ng, 0, 1), *S0 = tu_rand(&s, nS, -1, 1);
        double *o1 = tu_alloc(nv), *o2 = tu_alloc(nv), *S1 = tu_alloc(nS);
        ls_gdn_forward_f64(o1, S1, q, k, v, g, beta, S0, T, Hk, Hv, dk, dv);
        ls_gdn_forward_f64(o2, NULL, q, k, v, g, beta, S0, T, Hk, Hv, dk, dv);
        char name[64];
        snprintf(name, sizeof name, "gdn S_out=NULL dk=%zu dv=%zu o", dk, dv);
        check(name, tu_rel_err(o2, o1, nv), EQ_TOL);
        free(q); free(k); free(v); free(g); free(beta); free(S0); free(o1); free(o2); free(S1);
    }
}

/* ---------------------------------------------------------- conv pieces */

Test(kernels_seq_pieces, conv1d_pieces)
{
    const size_t T = 10, C = 5, K = 4, Kt = (K - 1) * C;
    const size_t pieces[4] = {1, 2, 3, 4};
    uint64_t s = 61;
    double *m = tu_rand(&s, T * C, -2, 2), *w = tu_rand(&s, C * K, -1, 1);
    double *tail0 = tu_rand(&s, Kt, -2, 2), *dc = tu_rand(&s, T * C, -1, 1);
    double *dtf = tu_rand(&s, Kt, -1, 1);

    double *c1 = tu_alloc(T * C), *pre1 = tu_alloc(T * C), *tail1 = tu_alloc(Kt);
    double *dm1 = tu_alloc(T * C), *dw1 = tu_alloc(C * K), *dti1 = tu_alloc(Kt);
    ls_conv1d_forward_f64(c1, pre1, tail1, m, tail0, w, T, C, K);
    ls_conv1d_backward_f64(dm1, dw1, dti1, dc, dtf, pre1, m, tail0, w, T, C, K);

    /* pieces, tails kept separately for backward */
    double *c4 = tu_alloc(T * C), *pre4 = tu_alloc(T * C), *tails[5];
    double *dm4 = tu_alloc(T * C), *dw4 = tu_alloc(C * K), *dti4 = tu_alloc(Kt);
    double *dtc = tu_copy(dtf, Kt);
    size_t off[5] = {0};
    tails[0] = tu_copy(tail0, Kt);
    for (int p = 0; p < 4; p++) {
        off[p + 1] = off[p] + pieces[p];
        tails[p + 1] = tu_alloc(Kt);
        ls_conv1d_forward_f64(c4 + off[p] * C, pre4 + off[p] * C, tails[p + 1], m + off[p] * C,
                              tails[p], w, pieces[p], C, K);
    }
    check("conv 4 pieces (T=1,2,3,4) forward c", tu_rel_err(c4, c1, T * C), EQ_TOL);
    check("conv 4 pieces forward tail_out", tu_rel_err(tails[4], tail1, Kt), EQ_TOL);
    for (int p = 3; p >= 0; p--) {
        ls_conv1d_backward_f64(dm4 + off[p] * C, dw4, dti4, dc + off[p] * C, dtc,
                               pre4 + off[p] * C, m + off[p] * C, tails[p], w, pieces[p], C, K);
        memcpy(dtc, dti4, Kt * sizeof *dtc);
    }
    check("conv 4 pieces backward dm", tu_rel_err(dm4, dm1, T * C), EQ_TOL);
    check("conv 4 pieces backward dw (accumulated)", tu_rel_err(dw4, dw1, C * K), EQ_TOL);
    check("conv 4 pieces backward dtail_in", tu_rel_err(dti4, dti1, Kt), EQ_TOL);

    /* in place: tail_out == tail_in, one buffer carried through the pieces */
    double *tc = tu_copy(tail0, Kt), *c5 = tu_alloc(T * C);
    for (int p = 0; p < 4; p++) {
        ls_conv1d_forward_f64(c5 + off[p] * C, NULL, tc, m + off[p] * C, tc, w, pieces[p], C, K);
    }
    check("conv in-place tail forward c", tu_rel_err(c5, c1, T * C), EQ_TOL);
    check("conv in-place tail forward tail_out", tu_rel_err(tc, tail1, Kt), EQ_TOL);

    /* tail_in NULL means zeros */
    double *z = tu_alloc(Kt), *c6 = tu_alloc(T * C), *c7 = tu_alloc(T * C);
    ls_conv1d_forward_f64(c6, NULL, NULL, m, NULL, w, T, C, K);
    ls_conv1d_forward_f64(c7, NULL, NULL, m, z, w, T, C, K);
    check("conv tail_in NULL == zeros", tu_max_diff(c6, c7, T * C), 1e-300);

    free(m); free(w); free(tail0); free(dc); free(dtf); free(c1); free(pre1); free(tail1);
    free(dm1); free(dw1); free(dti1); free(c4); free(pre4); free(dm4); free(dw4); free(dti4);
    free(dtc); free(tc); free(c5); free(z); free(c6); free(c7);
    for (int p = 0; p < 5; p++) {
        free(tails[p]);
    }
}

/* ------------------------------------------------- GDN naive reference */

/* docs/model.md §1.1 steps 4-6 token by token with explicit matrices, from raw
 * (un-normalised) q, k and raw gate inputs.  o [T,Hv,dv], S [Hv,dk,dv] in/out. */
static void gdn_naive(double *o, double *S, const double *qr, const double *kr,
                      const double *v, const double *a, const double *b, const double *A_log,
                      const double *dt_bias, size_t T, size_t Hk, size_t Hv, size_t dk,
                      size_t dv)
{
    double *Sh = tu_alloc(dk * dv), *q = tu_alloc(dk), *kk = tu_alloc(dk);
    double *u = tu_alloc(dv), *del = tu_alloc(dv);
    for (size_t t = 0; t < T; t++) {
        for (size_t j = 0; j < Hv; j++) {
            size_t h = j / (Hv / Hk);
            double nq = 0, nk = 0;
            for (size_t i = 0; i < dk; i++) {
                nq += qr[(t * Hk + h) * dk + i] * qr[(t * Hk + h) * dk + i];
                nk += kr[(t * Hk + h) * dk + i] * kr[(t * Hk + h) * dk + i];
            }
            for (size_t i = 0; i < dk; i++) {
                q[i] = qr[(t * Hk + h) * dk + i] / sqrt(nq + 1e-6) / sqrt((double)dk);
                kk[i] = kr[(t * Hk + h) * dk + i] / sqrt(nk + 1e-6);
            }
            double bt = 1 / (1 + exp(-b[t * Hv + j]));
            double gt = -exp(A_log[j]) * log(1 + exp(a[t * Hv + j] + dt_bias[j]));
            double *Sj = S + j * dk * dv;
            for (size_t i = 0; i < dk * dv; i++) {
                Sh[i] = exp(gt) * Sj[i];
            }
            for (size_t c = 0; c < dv; c++) {
                u[c] = 0;
                for (size_t i = 0; i < dk; i++) {
                    u[c] += Sh[i * dv + c] * kk[i];
                }
                del[c] = bt * (v[(t * Hv + j) * dv + c] - u[c]);
            }
            for (size_t i = 0; i < dk; i++) {
                for (size_t c = 0; c < dv; c++) {
                    Sj[i * dv + c] = Sh[i * dv + c] + kk[i] * del[c];
                }
            }
            for (size_t c = 0; c < dv; c++) {
                double acc = 0;
                for (size_t i = 0; i < dk; i++) {
                    acc += Sj[i * dv + c] * q[i];
                }
                o[(t * Hv + j) * dv + c] = acc;
            }
        }
    }
    free(Sh); free(q); free(kk); free(u); free(del);
}

Test(kernels_seq_pieces, gdn_naive_reference)
{
    const size_t T = 100, Hk = 2, Hv = 4, dk = 8, dv = 6;
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    uint64_t s = 71;
    double *qr = tu_rand(&s, nq, -2, 2), *kr = tu_rand(&s, nq, -2, 2);
    double *v = tu_rand(&s, nv, -1, 1), *a = tu_rand(&s, ng, -3, 3), *b = tu_rand(&s, ng, -3, 3);
    double *A_log = tu_rand(&s, Hv, -1.5, 0.5), *dt = tu_rand(&s, Hv, -1, 1);
    double *S0 = tu_rand(&s, nS, -1, 1);

    double *oref = tu_alloc(nv), *Sref = tu_copy(S0, nS);
    gdn_naive(oref, Sref, qr, kr, v, a, b, A_log, dt, T, Hk, Hv, dk, dv);

    /* the kernel path: gates kernel, q/k normalisation here, recurrence kernel */
    double *q = tu_alloc(nq), *k = tu_alloc(nq), *g = tu_alloc(ng), *beta = tu_alloc(ng);
    for (size_t r = 0; r < T * Hk; r++) {
        double nq2 = 0, nk2 = 0;
        for (size_t i = 0; i < dk; i++) {
            nq2 += qr[r * dk + i] * qr[r * dk + i];
            nk2 += kr[r * dk + i] * kr[r * dk + i];
        }
        for (size_t i = 0; i < dk; i++) {
            q[r * dk + i] = qr[r * dk + i] * (1 / sqrt(nq2 + 1e-6)) * (1 / sqrt((double)dk));
            k[r * dk + i] = kr[r * dk + i] * (1 / sqrt(nk2 + 1e-6));
        }
    }
    ls_gdn_gates_forward_f64(g, beta, a, b, A_log, dt, T, Hv);
    double *o = tu_alloc(nv), *S = tu_alloc(nS);
    ls_gdn_forward_f64(o, S, q, k, v, g, beta, S0, T, Hk, Hv, dk, dv);
    check("gdn vs naive per-token o", tu_rel_err(o, oref, nv), REF_TOL);
    check("gdn vs naive per-token S_out", tu_rel_err(S, Sref, nS), REF_TOL);
    free(qr); free(kr); free(v); free(a); free(b); free(A_log); free(dt); free(S0);
    free(oref); free(Sref); free(q); free(k); free(g); free(beta); free(o); free(S);
}

/* --------------------------------------------- attention naive reference */

typedef struct {
    size_t Tq, Tk, H, Hkv, hd;
    int64_t qp, kp;
    int causal;
    double tau;
} attn_dims;

static int naive_visible(const attn_dims *d, size_t t, size_t s)
{
    return !d->causal || d->kp + (int64_t)s <= d->qp + (int64_t)t;
}

/* Plain O(Tq Tk) softmax attention and its backward (docs/model.md §0), with
 * D = sum_s P_s (do . v_s) computed from P rather than from o. */
static void attn_naive(double *o, double *lse, double *dq, double *dk, double *dv,
                       const double *dO, const double *q, const double *k, const double *v,
                       const attn_dims *d)
{
    const size_t H = d->H, Hkv = d->Hkv, hd = d->hd;
    double *z = tu_alloc(d->Tk), *P = tu_alloc(d->Tk), *dP = tu_alloc(d->Tk);
    for (size_t t = 0; t < d->Tq; t++) {
        for (size_t h = 0; h < H; h++) {
            size_t kh = h / (H / Hkv);
            const double *qt = q + (t * H + h) * hd;
            double *ot = o + (t * H + h) * hd;
            double mx = -INFINITY;
            for (size_t s = 0; s < d->Tk; s++) {
                if (!naive_visible(d, t, s)) {
                    continue;
                }
                z[s] = d->tau * tu_dot(qt, k + (s * Hkv + kh) * hd, hd);
                if (z[s] > mx) {
                    mx = z[s];
                }
            }
            for (size_t e = 0; e < hd; e++) {
                ot[e] = 0;
            }
            if (mx == -INFINITY) {
                lse[t * H + h] = -INFINITY;
                continue;
            }
            double sum = 0;
            for (size_t s = 0; s < d->Tk; s++) {
                if (naive_visible(d, t, s)) {
                    sum += exp(z[s] - mx);
                }
            }
            lse[t * H + h] = mx + log(sum);
            double D = 0;
            for (size_t s = 0; s < d->Tk; s++) {
                if (!naive_visible(d, t, s)) {
                    continue;
                }
                P[s] = exp(z[s] - mx) / sum;
                dP[s] = tu_dot(dO + (t * H + h) * hd, v + (s * Hkv + kh) * hd, hd);
                D += P[s] * dP[s];
                for (size_t e = 0; e < hd; e++) {
                    ot[e] += P[s] * v[(s * Hkv + kh) * hd + e];
                }
            }
            for (size_t s = 0; s < d->Tk; s++) {
                if (!naive_visible(d, t, s)) {
                    continue;
                }
                double dz = P[s] * (dP[s] - D);
                for (size_t e = 0; e < hd; e++) {
                    dq[(t * H + h) * hd + e] += d->tau * dz * k[(s * Hkv + kh) * hd + e];
                    dk[(s * Hkv + kh) * hd + e] += d->tau * dz * qt[e];
                    dv[(s * Hkv + kh) * hd + e] += P[s] * dO[(t * H + h) * hd + e];
                }
            }
        }
    }
    free(z); free(P); free(dP);
}

/* Keys split at the given block boundaries: per-block forward merged, per
 * block backward with the global o, lse summed; against one block and the
 * naive reference. */
static void attn_blocks_case(const attn_dims *d, const size_t *bounds, size_t nb,
                             uint64_t seed, const char *label)
{
    const size_t H = d->H, Hkv = d->Hkv, hd = d->hd, Tq = d->Tq, Tk = d->Tk;
    const size_t nq = Tq * H * hd, nk = Tk * Hkv * hd, nl = Tq * H;
    uint64_t s = seed;
    double *q = tu_rand(&s, nq, -2, 2), *k = tu_rand(&s, nk, -2, 2), *v = tu_rand(&s, nk, -1, 1);
    double *dO = tu_rand(&s, nq, -1, 1);

    double *oref = tu_alloc(nq), *lr = tu_alloc(nl);
    double *dqr = tu_alloc(nq), *dkr = tu_alloc(nk), *dvr = tu_alloc(nk);
    attn_naive(oref, lr, dqr, dkr, dvr, dO, q, k, v, d);

    double *o1 = tu_alloc(nq), *l1 = tu_alloc(nl);
    double *dq1 = tu_alloc(nq), *dk1 = tu_alloc(nk), *dv1 = tu_alloc(nk);
    ls_attn_block_forward_f64(o1, l1, q, k, v, Tq, Tk, H, Hkv, hd, d->qp, d->kp, d->causal,
                              d->tau);
    ls_attn_block_backward_f64(dq1, dk1, dv1, dO, q, k, v, o1, l1, Tq, Tk, H, Hkv, hd, d->qp,
                               d->kp, d->causal, d->tau);

    double *om = tu_alloc(nq), *lm = tu_alloc(nl), *ob = tu_alloc(nq), *lb = tu_alloc(nl);
    double *dqb = tu_alloc(nq), *dkb = tu_alloc(nk), *dvb = tu_alloc(nk);
    for (size_t i = 0; i < nl; i++) {
        lm[i] = -INFINITY;
    }
    for (size_t b = 0; b + 1 < nb; b++) {
        size_t s0 = bounds[b], n = bounds[b + 1] - bounds[b];
        ls_attn_block_forward_f64(ob, lb, q, k + s0 * Hkv * hd, v + s0 * Hkv * hd, Tq, n, H, Hkv,
                                  hd, d->qp, d->kp + (int64_t)s0, d->causal, d->tau);
        ls_attn_merge_into_f64(om, lm, ob, lb, nl, hd);
    }
    for (size_t b = 0; b + 1 < nb; b++) {
        size_t s0 = bounds[b], n = bounds[b + 1] - bounds[b];
        ls_attn_block_backward_f64(dqb, dkb + s0 * Hkv * hd, dvb + s0 * Hkv * hd, dO, q,
                                   k + s0 * Hkv * hd, v + s0 * Hkv * hd, om, lm, Tq, n, H, Hkv,
                                   hd, d->qp, d->kp + (int64_t)s0, d->causal, d->tau);
    }
    char name[96];
#define ACHECK(what, a, b, n, tol)                                                           \
    snprintf(name, sizeof name, "attn %s %s", label, what);                                 \
    check(name, tu_rel_err(a, b, n), tol)
    ACHECK("one block vs naive: o", o1, oref, nq, REF_TOL);
    ACHECK("one block vs naive: lse", l1, lr, nl, REF_TOL);
    ACHECK("one block vs naive: dq", dq1, dqr, nq, REF_TOL);
    ACHECK("one block vs naive: dk", dk1, dkr, nk, REF_TOL);
    ACHECK("one block vs naive: dv", dv1, dvr, nk, REF_TOL);
    ACHECK("blocks merged vs one block: o", om, o1, nq, EQ_TOL);
    ACHECK("blocks merged vs one block: lse", lm, l1, nl, EQ_TOL);
    ACHECK("blocks summed vs one block: dq", dqb, dq1, nq, EQ_TOL);
    ACHECK("blocks summed vs one block: dk", dkb, dk1, nk, EQ_TOL);
    ACHECK("blocks summed vs one block: dv", dvb, dv1, nk, EQ_TOL);
#undef ACHECK
    /* rows that see no key: o = 0 exactly, lse = -inf, in both */
    for (size_t i = 0; i < nl; i++) {
        if (lr[i] == -INFINITY) {
            cr_expect(l1[i] == -INFINITY && lm[i] == -INFINITY && tu_max_abs(o1 + i * hd, hd) == 0 &&
                          tu_max_abs(om + i * hd, hd) == 0,
                      "empty row %zu: lse %g / %g, not -inf with o = 0", i, l1[i], lm[i]);
        }
    }
    free(q); free(k); free(v); free(dO); free(oref); free(lr); free(dqr); free(dkr); free(dvr);
    free(o1); free(l1); free(dq1); free(dk1); free(dv1); free(om); free(lm); free(ob); free(lb);
    free(dqb); free(dkb); free(dvb);
}

/* Queries at 100..124 against keys 0..149 in blocks [0,50) [50,50) (empty)
 * [50,130) [130,150) (after every query: fully masked when causal). */
Test(kernels_seq_pieces, attn_blocks_causal)
{
    attn_dims d = {.Tq = 25, .Tk = 150, .H = 4, .Hkv = 2, .hd = 8, .qp = 100, .kp = 0,
                   .causal = 1, .tau = 1 / sqrt(8.0)};
    const size_t bounds[] = {0, 50, 50, 130, 150};
    attn_blocks_case(&d, bounds, 5, 81, "causal GQA");
}

Test(kernels_seq_pieces, attn_blocks_full)
{
    attn_dims d = {.Tq = 25, .Tk = 150, .H = 4, .Hkv = 2, .hd = 8, .qp = 100, .kp = 0,
                   .causal = 0, .tau = 1 / sqrt(8.0)};
    const size_t bounds[] = {0, 50, 50, 130, 150};
    attn_blocks_case(&d, bounds, 5, 82, "non-causal GQA");
}

/* prompt style: Tq = Tk, the same positions, several query and key tiles;
 * queries start before the keys so that some rows are empty */
Test(kernels_seq_pieces, attn_blocks_prompt)
{
    attn_dims d = {.Tq = 150, .Tk = 150, .H = 4, .Hkv = 1, .hd = 16, .qp = 0, .kp = 0,
                   .causal = 1, .tau = 1 / sqrt(16.0)};
    const size_t bounds[] = {0, 64, 65, 150};
    attn_blocks_case(&d, bounds, 4, 83, "prompt Tq=Tk");
    attn_dims e = d;
    e.qp = -3;
    attn_blocks_case(&e, bounds, 4, 84, "prompt, queries 3 before keys");
}

/* ------------------------------------------------- threads: same bits */

/* The threaded paths (value heads, query/key tiles) against one thread: the
 * kernels are written to be race-free and deterministic, so the results
 * must be identical bit for bit. */
Test(kernels_seq_pieces, threads_bitwise)
{
    const size_t T = 3000, Hk = 2, Hv = 4, dk = 16, dv = 16;
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    uint64_t s = 91;
    const double sc = 1.0 / sqrt((double)dk);
    double *q = tu_rand(&s, nq, -sc, sc), *k = tu_rand(&s, nq, -sc, sc);
    double *v = tu_rand(&s, nv, -1, 1), *g = tu_rand(&s, ng, -0.5, 0);
    double *beta = tu_rand(&s, ng, 0, 1), *S0 = tu_rand(&s, nS, -1, 1);
    double *dO = tu_rand(&s, nv, -1, 1), *dSf = tu_rand(&s, nS, -1, 1);
    double *ws = tu_alloc(ls_gdn_backward_workspace_f64(T, Hk, Hv, dk, dv));
    double *out[2][8];
    const size_t sz[8] = {nv, nS, nq, nq, nv, ng, ng, nS};
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(r == 0 ? 1 : 3);
        for (int i = 0; i < 8; i++) {
            out[r][i] = tu_alloc(sz[i]);
        }
        ls_gdn_forward_f64(out[r][0], out[r][1], q, k, v, g, beta, S0, T, Hk, Hv, dk, dv);
        ls_gdn_backward_f64(out[r][2], out[r][3], out[r][4], out[r][5], out[r][6], out[r][7], dO,
                            dSf, q, k, v, g, beta, S0, T, Hk, Hv, dk, dv, ws);
    }
    const char *names[8] = {"o", "S_out", "dq", "dk", "dv", "dg", "dbeta", "dS_in"};
    char name[64];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "gdn 3 threads vs 1: %s", names[i]);
        check(name, tu_max_diff(out[1][i], out[0][i], sz[i]), 1e-300);
        free(out[0][i]);
        free(out[1][i]);
    }
    free(q); free(k); free(v); free(g); free(beta); free(S0); free(dO); free(dSf); free(ws);

    const size_t Ta = 300, H = 4, Hkv = 2, hd = 32, aq = Ta * H * hd, ak = Ta * Hkv * hd;
    double *qa = tu_rand(&s, aq, -2, 2), *ka = tu_rand(&s, ak, -2, 2), *va = tu_rand(&s, ak, -1, 1);
    double *da = tu_rand(&s, aq, -1, 1), *res[2][5];
    const size_t asz[5] = {aq, Ta * H, aq, ak, ak};
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(r == 0 ? 1 : 3);
        for (int i = 0; i < 5; i++) {
            res[r][i] = tu_alloc(asz[i]);
        }
        ls_attn_block_forward_f64(res[r][0], res[r][1], qa, ka, va, Ta, Ta, H, Hkv, hd, 0, 0, 1,
                                  1 / sqrt((double)hd));
        ls_attn_block_backward_f64(res[r][2], res[r][3], res[r][4], da, qa, ka, va, res[r][0],
                                   res[r][1], Ta, Ta, H, Hkv, hd, 0, 0, 1, 1 / sqrt((double)hd));
    }
    const char *anames[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "attn 3 threads vs 1: %s", anames[i]);
        check(name, tu_max_diff(res[1][i], res[0][i], asz[i]), 1e-300);
        free(res[0][i]);
        free(res[1][i]);
    }
    free(qa); free(ka); free(va); free(da);
}
