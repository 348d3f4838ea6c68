/* gdn.c - CPU Gated DeltaNet: the gates (beta, g) and the delta-rule
 * recurrence token by token, forward and backward (kernels/gdn.h,
 * docs/model.md §1.1 steps 5-6): ls_gdn_forward_recurrent and
 * ls_gdn_backward_recurrent, the reference of the chunked form
 * (gdn_chunk.c, gdn_chunk_bwd.c, which also hold the entry points that
 * choose between the two).
 *
 * Value heads are independent and run in parallel (OpenMP).  The backward
 * keeps no T states: a forward pass saves the state at the start of every
 * chunk (checkpoints), then the chunks are walked in reverse, each one's
 * states recomputed from its checkpoint.  The chunk is GDN_CHUNK tokens,
 * doubled while chunk^2 < T, so memory grows like sqrt(T).  Value heads that
 * share a key head write their dq/dk into per-head chunk buffers (two, used
 * alternately) that are summed in a fixed order while the next chunk is
 * computed: race-free, deterministic, one barrier per chunk.
 *
 * The dv-length vectors of one token (u, delta, ...) are handled in column
 * blocks of GDN_CB so that they live on the stack for any dv: the recurrence
 * is independent across the columns of S. */
#include "kernels/gdn.h"
#include "kernels/cpu/gdn_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#if LS_REAL_IS_F64
#define R_EXP exp
#define R_LOG1P log1p
#else
#define R_EXP expf
#define R_LOG1P log1pf
#endif

#define GDN_CHUNK 64          /* least tokens per checkpointed chunk in backward */
#define GDN_CB 64             /* column block of the per-token dv vectors */
#define GDN_STACK_STATE 4096  /* reals of state kept on the stack when S_out is NULL */

static ls_real sigmoid(ls_real x)
{
    if (x >= 0) {
        return (ls_real)1 / ((ls_real)1 + R_EXP(-x));
    }
    ls_real e = R_EXP(x);
    return e / ((ls_real)1 + e);
}

/* log(1 + e^x) without overflow for large x or loss for very negative x. */
static ls_real softplus(ls_real x)
{
    if (x > 0) {
        return x + R_LOG1P(R_EXP(-x));
    }
    return R_LOG1P(R_EXP(x));
}

void LS_K(ls_gdn_gates_forward)(ls_real *g, ls_real *beta, const ls_real *a,
                                const ls_real *b, const ls_real *A_log,
                                const ls_real *dt_bias, size_t T, size_t Hv)
{
    for (size_t t = 0; t < T; t++) {
        for (size_t j = 0; j < Hv; j++) {
            size_t i = t * Hv + j;
            g[i] = -R_EXP(A_log[j]) * softplus(a[i] + dt_bias[j]);
            beta[i] = sigmoid(b[i]);
        }
    }
}

void LS_K(ls_gdn_gates_backward)(ls_real *da, ls_real *db, ls_real *dA_log,
                                 ls_real *ddt_bias, const ls_real *dg,
                                 const ls_real *dbeta, const ls_real *a,
                                 const ls_real *b, const ls_real *A_log,
                                 const ls_real *dt_bias, size_t T, size_t Hv)
{
    for (size_t t = 0; t < T; t++) {
        for (size_t j = 0; j < Hv; j++) {
            size_t i = t * Hv + j;
            ls_real x = a[i] + dt_bias[j];
            ls_real eA = R_EXP(A_log[j]);
            ls_real gv = -eA * softplus(x);
            ls_real bt = sigmoid(b[i]);
            da[i] = dg[i] * -eA * sigmoid(x);
            db[i] = dbeta[i] * bt * ((ls_real)1 - bt);
            if (dA_log != NULL) {
                dA_log[j] += dg[i] * gv;
            }
            if (ddt_bias != NULL) {
                ddt_bias[j] += da[i];
            }
        }
    }
}

/* One token of one value head on columns [0, ncols) of a state block S (dk
 * rows, row stride ldS): S_hat = e^g S; u = S_hat^T k; delta = beta (v - u);
 * S = S_hat + k delta^T; o = S^T q.  v, o, vmu point at the block's first
 * column; o (output) and vmu (receives v - u, for backward) may be NULL. */
static void gdn_step(ls_real *S, size_t ldS, size_t ncols, ls_real *o, ls_real *vmu,
                     const ls_real *q, const ls_real *k, const ls_real *v,
                     ls_real g, ls_real beta, size_t dk)
{
    const ls_real eg = R_EXP(g);
    for (size_t c0 = 0; c0 < ncols; c0 += GDN_CB) {
        const size_t nb = ncols - c0 < GDN_CB ? ncols - c0 : GDN_CB;
        ls_real u[GDN_CB], d[GDN_CB], y[GDN_CB];
        for (size_t c = 0; c < nb; c++) {
            u[c] = 0;
            y[c] = 0;
        }
        for (size_t i = 0; i < dk; i++) {
            const ls_real *Si = S + i * ldS + c0;
            const ls_real ki = k[i];
#pragma omp simd
            for (size_t c = 0; c < nb; c++) {
                u[c] += Si[c] * ki;
            }
        }
        for (size_t c = 0; c < nb; c++) {
            ls_real vm = v[c0 + c] - eg * u[c];
            d[c] = beta * vm;
            if (vmu != NULL) {
                vmu[c0 + c] = vm;
            }
        }
        for (size_t i = 0; i < dk; i++) {
            ls_real *Si = S + i * ldS + c0;
            const ls_real ki = k[i], qi = q[i];
#pragma omp simd
            for (size_t c = 0; c < nb; c++) {
                Si[c] = eg * Si[c] + ki * d[c];
                y[c] += Si[c] * qi;
            }
        }
        if (o != NULL) {
            for (size_t c = 0; c < nb; c++) {
                o[c0 + c] = y[c];
            }
        }
    }
}

/* Tokens [t0, t1) of value head j (key head kh) on the state block S whose
 * first column is col0.  o [T,Hv,dv] may be NULL; vmu [t1-t0, dv] may be NULL. */
static void gdn_head_run(ls_real *S, size_t ldS, size_t ncols, size_t col0,
                         ls_real *o, ls_real *vmu, const ls_real *q, const ls_real *k,
                         const ls_real *v, const ls_real *g, const ls_real *beta,
                         size_t t0, size_t t1, size_t j, size_t kh,
                         size_t Hk, size_t Hv, size_t dk, size_t dv)
{
    for (size_t t = t0; t < t1; t++) {
        size_t qk = (t * Hk + kh) * dk;
        size_t vo = (t * Hv + j) * dv + col0;
        gdn_step(S, ldS, ncols, o != NULL ? o + vo : NULL,
                 vmu != NULL ? vmu + (t - t0) * dv + col0 : NULL,
                 q + qk, k + qk, v + vo, g[t * Hv + j], beta[t * Hv + j], dk);
    }
}

void LS_K(ls_gdn_forward_recurrent)(ls_real *o, ls_real *S_out, const ls_real *q,
                          const ls_real *k, const ls_real *v, const ls_real *g,
                          const ls_real *beta, const ls_real *S_in,
                          size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv)
{
    const size_t dkdv = dk * dv;
    const size_t grp = Hv / Hk;
    assert(Hk > 0 && Hv % Hk == 0);
    if (S_out == NULL && dk > GDN_STACK_STATE) {
        fprintf(stderr, "ls_gdn_forward_recurrent: dk=%zu too large without S_out (max %d); "
                        "output set to NaN\n", dk, GDN_STACK_STATE);
        for (size_t i = 0; i < T * Hv * dv; i++) {
            o[i] = (ls_real)NAN;
        }
        return;
    }
#pragma omp parallel for schedule(static) if (T * Hv * dkdv >= GDN_PAR_MIN)
    for (size_t j = 0; j < Hv; j++) {
        const size_t kh = j / grp;
        if (S_out != NULL) {
            /* the state lives in S_out; S_in == S_out (in place) is fine */
            ls_real *S = S_out + j * dkdv;
            if (S_in == NULL) {
                memset(S, 0, dkdv * sizeof *S);
            } else if (S_in != S_out) {
                memcpy(S, S_in + j * dkdv, dkdv * sizeof *S);
            }
            gdn_head_run(S, dv, dv, 0, o, NULL, q, k, v, g, beta, 0, T, j, kh, Hk, Hv, dk, dv);
        } else {
            /* no room for the state: run column blocks of it on the stack */
            ls_real buf[GDN_STACK_STATE];
            size_t B = GDN_STACK_STATE / dk;
            if (B > dv) {
                B = dv;
            }
            for (size_t col0 = 0; col0 < dv; col0 += B) {
                const size_t nb = dv - col0 < B ? dv - col0 : B;
                for (size_t i = 0; i < dk; i++) {
                    for (size_t c = 0; c < nb; c++) {
                        buf[i * nb + c] =
                            S_in != NULL ? S_in[j * dkdv + i * dv + col0 + c] : 0;
                    }
                }
                gdn_head_run(buf, nb, nb, col0, o, NULL, q, k, v, g, beta, 0, T, j, kh,
                             Hk, Hv, dk, dv);
            }
        }
    }
}

/* Tokens per backward chunk for a sequence of T > 0 tokens. */
static size_t gdn_chunk(size_t T)
{
    size_t ch = gdn_ws_segment(T, GDN_CHUNK);
    return ch < T ? ch : T;
}

/* Workspace of one value head (gdn_internal.h's layout): the states of one
 * chunk's tokens in the middle, v - u of the chunk [ch, dv] as the tail. */
static size_t gdn_head_workspace(size_t T, size_t dk, size_t dv)
{
    const size_t ch = gdn_chunk(T);
    const size_t nc = (T + ch - 1) / ch;
    return gdn_ws_head(nc, ch, ch, dk, dv) + ch * dv;
}

size_t LS_K(ls_gdn_backward_recurrent_workspace)(size_t T, size_t Hk, size_t Hv, size_t dk,
                                                 size_t dv)
{
    (void)Hk;
    if (T == 0) {
        return 0;
    }
    return Hv * gdn_head_workspace(T, dk, dv);
}

/* Backward of one token of one value head.  G [dk,dv] holds dS_t on entry
 * and dS_{t-1} on exit.  Sc = S_t, Sp = S_{t-1}; vmu = v - u of the token.
 * dq, dk_ [dk] and dv_ [dv] assigned; dg, dbeta assigned. */
static void gdn_bstep(ls_real *G, ls_real *dq, ls_real *dk_, ls_real *dv_,
                      ls_real *dg, ls_real *dbeta, const ls_real *Sc, const ls_real *Sp,
                      const ls_real *q, const ls_real *k, const ls_real *dout,
                      const ls_real *vmu, ls_real g, ls_real beta, size_t dk, size_t dv)
{
    const ls_real eg = R_EXP(g);
    ls_real dgs = 0, db = 0;
    for (size_t i = 0; i < dk; i++) {
        dq[i] = 0;
        dk_[i] = 0;
    }
    for (size_t c0 = 0; c0 < dv; c0 += GDN_CB) {
        const size_t nb = dv - c0 < GDN_CB ? dv - c0 : GDN_CB;
        const ls_real *dob = dout + c0, *vmb = vmu + c0;
        ls_real dd[GDN_CB], du[GDN_CB], del[GDN_CB];
        for (size_t c = 0; c < nb; c++) {
            dd[c] = 0;
            del[c] = beta * vmb[c];
        }
        /* G += q do^T; dq = S_t do; dk = G delta; d(delta) = G^T k */
        for (size_t i = 0; i < dk; i++) {
            ls_real *Gi = G + i * dv + c0;
            const ls_real *Si = Sc + i * dv + c0;
            const ls_real qi = q[i], ki = k[i];
            ls_real aq = 0, ak = 0;
#pragma omp simd reduction(+ : aq, ak)
            for (size_t c = 0; c < nb; c++) {
                Gi[c] += qi * dob[c];
                aq += Si[c] * dob[c];
                ak += Gi[c] * del[c];
                dd[c] += Gi[c] * ki;
            }
            dq[i] += aq;
            dk_[i] += ak;
        }
        for (size_t c = 0; c < nb; c++) {
            dv_[c0 + c] = beta * dd[c];
            db += dd[c] * vmb[c];
            du[c] = -beta * dd[c];
        }
        /* dk += S_hat du; G' = G + k du^T; dg = e^g <G', S_{t-1}>; G = e^g G' */
        for (size_t i = 0; i < dk; i++) {
            ls_real *Gi = G + i * dv + c0;
            const ls_real *Si = Sp + i * dv + c0;
            const ls_real ki = k[i];
            ls_real ak = 0, ag = 0;
#pragma omp simd reduction(+ : ak, ag)
            for (size_t c = 0; c < nb; c++) {
                ak += Si[c] * du[c];
                ls_real Gp = Gi[c] + ki * du[c];
                ag += Gp * Si[c];
                Gi[c] = eg * Gp;
            }
            dk_[i] += eg * ak;
            dgs += ag;
        }
    }
    *dg = eg * dgs;
    *dbeta = db;
}

void LS_K(gdn_ws_reduce)(ls_real *dq, ls_real *dk, const gdn_bwd_ws *w, size_t c, size_t T, size_t Hk, size_t grp)
{
    const size_t dk_ = w->dk, t0 = c * w->ch, b = c & 1;
    const size_t n = (t0 + w->ch < T ? t0 + w->ch : T) - t0;
#pragma omp for schedule(static) nowait
    for (size_t idx = 0; idx < n * Hk; idx++) {
        const size_t i = idx / Hk, kh = idx % Hk;
        ls_real *dqr = dq + ((t0 + i) * Hk + kh) * dk_;
        ls_real *dkr = dk + ((t0 + i) * Hk + kh) * dk_;
        for (size_t e = 0; e < dk_; e++) {
            dqr[e] = 0;
            dkr[e] = 0;
        }
        for (size_t j = kh * grp; j < (kh + 1) * grp; j++) {
            const ls_real *x = gdn_ws_dq(w, j, b) + i * dk_, *y = gdn_ws_dk(w, j, b) + i * dk_;
            for (size_t e = 0; e < dk_; e++) {
                dqr[e] += x[e];
                dkr[e] += y[e];
            }
        }
    }
}

void LS_K(ls_gdn_backward_recurrent)(ls_real *dq, ls_real *dk, ls_real *dv, ls_real *dg,
                           ls_real *dbeta, ls_real *dS_in, const ls_real *do_,
                           const ls_real *dS_out, const ls_real *q, const ls_real *k,
                           const ls_real *v, const ls_real *g, const ls_real *beta,
                           const ls_real *S_in, size_t T, size_t Hk, size_t Hv,
                           size_t dk_, size_t dv_, ls_real *workspace)
{
    const size_t dkdv = dk_ * dv_;
    const size_t grp = Hv / Hk;
    assert(Hk > 0 && Hv % Hk == 0);
    if (T == 0) {
        if (dS_in != NULL) {
            if (dS_out != NULL) {
                memcpy(dS_in, dS_out, Hv * dkdv * sizeof *dS_in);
            } else {
                memset(dS_in, 0, Hv * dkdv * sizeof *dS_in);
            }
        }
        return;
    }
    assert(workspace != NULL);
    const size_t ch = gdn_chunk(T);
    const size_t nc = (T + ch - 1) / ch;
    const gdn_bwd_ws w = {.base = workspace, .hw = gdn_head_workspace(T, dk_, dv_), .dkdv = dkdv,
                          .ch = ch, .nc = nc, .nmid = ch, .dk = dk_};

#pragma omp parallel if (T * Hv * dkdv >= GDN_PAR_MIN)
    {
        /* checkpoints: the state before each chunk */
#pragma omp for schedule(static)
        for (size_t j = 0; j < Hv; j++) {
            ls_real *ck = gdn_ws_ckpt(&w, j);
            if (S_in != NULL) {
                memcpy(ck, S_in + j * dkdv, dkdv * sizeof *ck);
            } else {
                memset(ck, 0, dkdv * sizeof *ck);
            }
            for (size_t c = 0; c + 1 < nc; c++) {
                memcpy(ck + (c + 1) * dkdv, ck + c * dkdv, dkdv * sizeof *ck);
                gdn_head_run(ck + (c + 1) * dkdv, dv_, dv_, 0, NULL, NULL, q, k, v, g, beta,
                             c * ch, (c + 1) * ch, j, j / grp, Hk, Hv, dk_, dv_);
            }
            if (dS_out != NULL) {
                memcpy(gdn_ws_G(&w, j), dS_out + j * dkdv, dkdv * sizeof(ls_real));
            } else {
                memset(gdn_ws_G(&w, j), 0, dkdv * sizeof(ls_real));
            }
        }
        for (size_t c = nc; c-- > 0;) {
            const size_t t0 = c * ch;
            const size_t t1 = t0 + ch < T ? t0 + ch : T;
            const size_t n = t1 - t0;
            const size_t buf = c & 1;
            if (c + 1 < nc) {
                /* chunk c+1 finished at the last barrier; its buffers are
                 * not the ones chunk c writes */
                LS_K(gdn_ws_reduce)(dq, dk, &w, c + 1, T, Hk, grp);
            }
#pragma omp for schedule(static)
            for (size_t j = 0; j < Hv; j++) {
                const size_t kh = j / grp;
                const ls_real *ck = gdn_ws_ckpt(&w, j) + c * dkdv;
                ls_real *st = gdn_ws_mid(&w, j), *G = gdn_ws_G(&w, j), *vmu = gdn_ws_tail(&w, j);
                /* recompute S_t for the chunk and v - u of each token */
                for (size_t i = 0; i < n; i++) {
                    const ls_real *prev = i == 0 ? ck : st + (i - 1) * dkdv;
                    memcpy(st + i * dkdv, prev, dkdv * sizeof *st);
                    gdn_head_run(st + i * dkdv, dv_, dv_, 0, NULL, vmu + i * dv_, q, k, v, g,
                                 beta, t0 + i, t0 + i + 1, j, kh, Hk, Hv, dk_, dv_);
                }
                for (size_t i = n; i-- > 0;) {
                    const size_t t = t0 + i;
                    const size_t qk = (t * Hk + kh) * dk_;
                    const size_t vo = (t * Hv + j) * dv_;
                    const ls_real *Sp = i == 0 ? ck : st + (i - 1) * dkdv;
                    gdn_bstep(G, gdn_ws_dq(&w, j, buf) + i * dk_, gdn_ws_dk(&w, j, buf) + i * dk_, dv + vo,
                              dg + t * Hv + j, dbeta + t * Hv + j, st + i * dkdv, Sp,
                              q + qk, k + qk, do_ + vo, vmu + i * dv_, g[t * Hv + j],
                              beta[t * Hv + j], dk_, dv_);
                }
            }
        }
        LS_K(gdn_ws_reduce)(dq, dk, &w, 0, T, Hk, grp);
        if (dS_in != NULL) {
#pragma omp for schedule(static)
            for (size_t j = 0; j < Hv; j++) {
                memcpy(dS_in + j * dkdv, gdn_ws_G(&w, j), dkdv * sizeof *dS_in);
            }
        }
    }
}
