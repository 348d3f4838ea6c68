/* gdn_chunk_bwd.c - the backward of the chunked Gated DeltaNet
 * (gdn_chunk.c): kernels/gdn.h ls_gdn_backward, docs/model.md §1.1.
 *
 * Memory as in the token recurrence's backward (gdn.c): a forward pass (in
 * chunked form) saves the state at the start of every checkpoint segment of
 * ch tokens (ch a multiple of GDN_C, doubled while ch^2 < T); the segments
 * are walked in reverse, each one's chunk-start states recomputed from its
 * checkpoint (ch / GDN_C states, not ch), then its chunks walked in reverse.
 * Per chunk of n tokens, with the forward's quantities recomputed (gdn_chunk.c
 * names them: Gam, ea, A, U, W, Delta = U - W S0, P = Gam o Q K^T) and G the
 * gradient of the state after the chunk, the reverse of
 *   S_n = ea_L S0 + (diag(Gam_L) K)^T Delta     (L = n - 1)
 *   O   = diag(ea) Q S0 + P Delta
 *   Delta = U - W S0
 *   U = (I + A)^{-1} diag(beta) V,  W = (I + A)^{-1} diag(beta ea) K
 *   A[t][s] = beta_t Gam[t][s] k_t.k_s  (s < t)
 * is GEMMs (dB = (I + A)^{-T} [dU dW] with the explicit inverse).  The gates
 * enter only through Gam and ea; their gradient is gathered per log-decay
 * gamma_t = g_0 + ... + g_t of the chunk (Gam[t][s] = e^{gamma_t - gamma_s},
 * ea_t = e^{gamma_t}: d gamma_t += Gam dGam, d gamma_s -= Gam dGam), then
 * dg_r = sum over t >= r of d gamma_t.  Nothing is divided by a gate.
 *
 * Value heads run in parallel (OpenMP); heads that share a key head write
 * dq/dk into per-head segment buffers (two, used alternately) summed in head
 * order while the next segment is computed, as in gdn.c: deterministic for
 * any number of threads. */
#include "kernels/gdn.h"

#include <assert.h>
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/gdn_internal.h"

#define gemm LS_K(gdn_gemm)

/* Tokens per checkpoint segment: a multiple of GDN_C. */
static size_t seg_len(size_t T)
{
    return gdn_ws_segment(T, GDN_C);
}

/* The backward's extra chunk scratch of one head (beyond gdn_chunk_view). */
typedef struct {
    ls_real *KK, *P, *M; /* [C,C] K K^T; P; dP, then dA, then dKK */
    ls_real *D, *dD, *T1; /* [C,dv] Delta; dDelta; K G, then dB1 */
    ls_real *dW, *T2;     /* [C,dk] dW; dO S0^T, then dB2 */
} bwd_scratch;

static size_t bwd_scratch_size(size_t dk, size_t dv)
{
    return 3 * (size_t)GDN_C * GDN_C + 3 * (size_t)GDN_C * dv + 2 * (size_t)GDN_C * dk;
}

static void bwd_scratch_bind(bwd_scratch *b, ls_real *ws, size_t dk, size_t dv)
{
    b->KK = ws;
    b->P = b->KK + GDN_C * GDN_C;
    b->M = b->P + GDN_C * GDN_C;
    b->D = b->M + GDN_C * GDN_C;
    b->dD = b->D + GDN_C * dv;
    b->T1 = b->dD + GDN_C * dv;
    b->dW = b->T1 + GDN_C * dv;
    b->T2 = b->dW + GDN_C * dk;
}

/* Per-head layout (gdn_internal.h's): the chunk starts of one segment in the
 * middle, the chunk scratch of gdn_chunk.c and of the backward as the tail. */
static size_t head_ws(size_t T, size_t dk, size_t dv)
{
    const size_t ch = seg_len(T), nc = (T + ch - 1) / ch;
    return gdn_ws_head(nc, ch / GDN_C, ch, dk, dv) + LS_K(gdn_chunk_head_ws)(dk, dv) + bwd_scratch_size(dk, dv);
}

size_t LS_K(ls_gdn_backward_chunked_workspace)(size_t T, size_t Hk, size_t Hv, size_t dk,
                                               size_t dv)
{
    (void)Hk;
    return T == 0 ? 0 : Hv * head_ws(T, dk, dv);
}

size_t LS_K(ls_gdn_backward_workspace)(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv)
{
    return LS_K(gdn_use_chunked)(T, dk, dv, 1)
               ? LS_K(ls_gdn_backward_chunked_workspace)(T, Hk, Hv, dk, dv)
               : LS_K(ls_gdn_backward_recurrent_workspace)(T, Hk, Hv, dk, dv);
}

static ls_real rowdot(const ls_real *a, const ls_real *b, size_t n)
{
    ls_real s = 0;
    for (size_t i = 0; i < n; i++) {
        s += a[i] * b[i];
    }
    return s;
}

/* Pointers of one chunk of one head. */
typedef struct {
    const ls_real *q, *k, *v, *dO, *g, *beta; /* rows: q, k ldk; v, dO ldv; g, beta stride Hv */
    ls_real *dq, *dk;                         /* [n, dk] contiguous, assigned */
    ls_real *dv, *dg, *dbeta;                 /* dv rows ldv; dg, dbeta stride Hv; assigned */
    size_t ldk, ldv, Hv, n, dkn, dvn;
} chunk_io;

/* Backward of one chunk: S0 [dk,dv] the state before it; G [dk,dv] holds
 * dS after the chunk on entry, dS0 on exit. */
static void chunk_backward(gdn_chunk_view *c, const bwd_scratch *b, const chunk_io *x,
                           const ls_real *S0, ls_real *G)
{
    const size_t n = x->n, dk = x->dkn, dv = x->dvn, ldk = x->ldk, ldv = x->ldv, Hv = x->Hv;
    const size_t L = n - 1;
    double dgam[GDN_C];
    ls_real dea[GDN_C], db[GDN_C];
    for (size_t t = 0; t < n; t++) {
        dgam[t] = 0;
        dea[t] = 0;
        db[t] = 0;
    }
    /* recompute the forward's chunk quantities; Delta = U - W S0 in D */
    LS_K(gdn_chunk_decays)(c->Gam, c->ea, x->g, Hv, n);
    LS_K(gdn_chunk_wy)(c, b->KK, x->k, ldk, x->v, ldv, x->beta, Hv, n, dk, dv);
    memcpy(b->D, c->U, n * dv * sizeof *b->D);
    gemm(CblasNoTrans, CblasNoTrans, n, dv, dk, -1, c->W, dk, S0, dv, 1, b->D, dv);
    const ls_real *GL = c->Gam + L * GDN_C;

    /* S_n = ea_L S0 + (diag(Gam_L) K)^T Delta */
    gemm(CblasNoTrans, CblasNoTrans, n, dv, dk, 1, x->k, ldk, G, dv, 0, b->T1, dv); /* K G */
    for (size_t s = 0; s < n; s++) {
        const ls_real *kg = b->T1 + s * dv;
        ls_real *dd = b->dD + s * dv;
        for (size_t i = 0; i < dv; i++) {
            dd[i] = GL[s] * kg[i];
        }
        const double h = (double)GL[s] * (double)rowdot(kg, b->D + s * dv, dv);
        dgam[L] += h;
        dgam[s] -= h;
    }
    gemm(CblasNoTrans, CblasTrans, n, dk, dv, 1, b->D, dv, G, dv, 0, x->dk, dk); /* Delta G^T */
    for (size_t s = 0; s < n; s++) {
        for (size_t i = 0; i < dk; i++) {
            x->dk[s * dk + i] *= GL[s];
        }
    }
    dea[L] += rowdot(G, S0, dk * dv);
    const ls_real eL = c->ea[L];
    for (size_t i = 0; i < dk * dv; i++) {
        G[i] *= eL;
    }

    /* O = (diag(ea) Q) S0 + P Delta */
    gemm(CblasNoTrans, CblasTrans, n, dk, dv, 1, x->dO, ldv, S0, dv, 0, b->T2, dk); /* dO S0^T */
    for (size_t t = 0; t < n; t++) {
        const ls_real *y = b->T2 + t * dk, *qt = x->q + t * ldk;
        dea[t] += rowdot(y, qt, dk);
        for (size_t i = 0; i < dk; i++) {
            x->dq[t * dk + i] = c->ea[t] * y[i];
            c->X[t * dk + i] = c->ea[t] * qt[i];
        }
    }
    gemm(CblasTrans, CblasNoTrans, dk, dv, n, 1, c->X, dk, x->dO, ldv, 1, G, dv);
    gemm(CblasNoTrans, CblasTrans, n, n, dk, 1, x->q, ldk, x->k, ldk, 0, b->P, GDN_C);
    gemm(CblasNoTrans, CblasTrans, n, n, dv, 1, x->dO, ldv, b->D, dv, 0, b->M, GDN_C);
    for (size_t t = 0; t < n; t++) {
        ls_real *Pt = b->P + t * GDN_C, *Mt = b->M + t * GDN_C;
        const ls_real *Gt = c->Gam + t * GDN_C;
        for (size_t s = 0; s <= t; s++) {
            Pt[s] *= Gt[s];
            const double h = (double)Pt[s] * (double)Mt[s];
            dgam[t] += h;
            dgam[s] -= h;
            Mt[s] *= Gt[s];
        }
        for (size_t s = t + 1; s < n; s++) {
            Pt[s] = 0;
            Mt[s] = 0;
        }
    }
    gemm(CblasTrans, CblasNoTrans, n, dv, n, 1, b->P, GDN_C, x->dO, ldv, 1, b->dD, dv);
    gemm(CblasNoTrans, CblasNoTrans, n, dk, n, 1, b->M, GDN_C, x->k, ldk, 1, x->dq, dk);
    gemm(CblasTrans, CblasNoTrans, n, dk, n, 1, b->M, GDN_C, x->q, ldk, 1, x->dk, dk);

    /* Delta = U - W S0 */
    gemm(CblasNoTrans, CblasTrans, n, dk, dv, -1, b->dD, dv, S0, dv, 0, b->dW, dk);
    gemm(CblasTrans, CblasNoTrans, dk, dv, n, -1, c->W, dk, b->dD, dv, 1, G, dv);

    /* U, W = (I + A)^{-1} B1, B2: dB = (I + A)^{-T} [dU dW]; dA = -dB1 U^T - dB2 W^T */
    ls_real *dB1 = b->T1, *dB2 = b->T2;
    gemm(CblasTrans, CblasNoTrans, n, dv, n, 1, c->Ti, GDN_C, b->dD, dv, 0, dB1, dv);
    gemm(CblasTrans, CblasNoTrans, n, dk, n, 1, c->Ti, GDN_C, b->dW, dk, 0, dB2, dk);
    gemm(CblasNoTrans, CblasTrans, n, n, dv, -1, dB1, dv, c->U, dv, 0, b->M, GDN_C);
    gemm(CblasNoTrans, CblasTrans, n, n, dk, -1, dB2, dk, c->W, dk, 1, b->M, GDN_C);
    for (size_t t = 0; t < n; t++) {
        const ls_real bt = x->beta[t * Hv], et = c->ea[t];
        const ls_real *d1 = dB1 + t * dv, *d2 = dB2 + t * dk;
        const ls_real *vt = x->v + t * ldv, *kt = x->k + t * ldk;
        ls_real *dvt = x->dv + t * ldv, *dkt = x->dk + t * dk;
        db[t] += rowdot(d1, vt, dv);
        for (size_t i = 0; i < dv; i++) {
            dvt[i] = bt * d1[i];
        }
        const ls_real d2k = rowdot(d2, kt, dk);
        db[t] += et * d2k;
        dea[t] += bt * d2k;
        for (size_t i = 0; i < dk; i++) {
            dkt[i] += bt * et * d2[i];
        }
        /* A[t][s] = beta_t Gam[t][s] KK[t][s], s < t: M becomes dKK */
        ls_real *Mt = b->M + t * GDN_C;
        const ls_real *Gt = c->Gam + t * GDN_C, *Kt = b->KK + t * GDN_C, *At = c->A + t * GDN_C;
        for (size_t s = 0; s < t; s++) {
            db[t] += Mt[s] * Gt[s] * Kt[s];
            const double h = (double)Mt[s] * (double)At[s];
            dgam[t] += h;
            dgam[s] -= h;
            Mt[s] *= bt * Gt[s];
        }
        for (size_t s = t; s < n; s++) {
            Mt[s] = 0;
        }
    }
    gemm(CblasNoTrans, CblasNoTrans, n, dk, n, 1, b->M, GDN_C, x->k, ldk, 1, x->dk, dk);
    gemm(CblasTrans, CblasNoTrans, n, dk, n, 1, b->M, GDN_C, x->k, ldk, 1, x->dk, dk);

    /* gates: d gamma_t += ea_t dea_t; dg_r = sum_{t >= r} d gamma_t */
    double acc = 0;
    for (size_t t = n; t-- > 0;) {
        acc += dgam[t] + (double)c->ea[t] * (double)dea[t];
        x->dg[t * Hv] = (ls_real)acc;
        x->dbeta[t * Hv] = db[t];
    }
}

void LS_K(ls_gdn_backward)(ls_real *dq, ls_real *dk, ls_real *dv, ls_real *dg,
                           ls_real *dbeta, ls_real *dS_in, const ls_real *do_,
                           const ls_real *dS_out, const ls_real *q, const ls_real *k,
                           const ls_real *v, const ls_real *g, const ls_real *beta,
                           const ls_real *S_in, size_t T, size_t Hk, size_t Hv,
                           size_t dk_, size_t dv_, ls_real *workspace)
{
    if (LS_K(gdn_use_chunked)(T, dk_, dv_, 1)) {
        LS_K(ls_gdn_backward_chunked)(dq, dk, dv, dg, dbeta, dS_in, do_, dS_out, q, k, v, g,
                                      beta, S_in, T, Hk, Hv, dk_, dv_, workspace);
    } else {
        LS_K(ls_gdn_backward_recurrent)(dq, dk, dv, dg, dbeta, dS_in, do_, dS_out, q, k, v, g,
                                        beta, S_in, T, Hk, Hv, dk_, dv_, workspace);
    }
}

void LS_K(ls_gdn_backward_chunked)(ls_real *dq, ls_real *dk, ls_real *dv, ls_real *dg,
                                   ls_real *dbeta, ls_real *dS_in, const ls_real *do_,
                                   const ls_real *dS_out, const ls_real *q, const ls_real *k,
                                   const ls_real *v, const ls_real *g, const ls_real *beta,
                                   const ls_real *S_in, size_t T, size_t Hk, size_t Hv,
                                   size_t dk_, size_t dv_, ls_real *workspace)
{
    assert(Hk > 0 && Hv % Hk == 0);
    if (T == 0) {
        LS_K(ls_gdn_backward_recurrent)(dq, dk, dv, dg, dbeta, dS_in, do_, dS_out, q, k, v, g,
                                        beta, S_in, T, Hk, Hv, dk_, dv_, workspace);
        return;
    }
    assert(workspace != NULL);
    const size_t dkdv = dk_ * dv_, grp = Hv / Hk;
    const size_t ch = seg_len(T), nc = (T + ch - 1) / ch;
    const gdn_bwd_ws w = {.base = workspace, .hw = head_ws(T, dk_, dv_), .dkdv = dkdv, .ch = ch, .nmid = ch / GDN_C,
                          .nc = nc, .dk = dk_};
    const size_t ldk = Hk * dk_, ldv = Hv * dv_;

#pragma omp parallel if (T * Hv * dkdv >= GDN_PAR_MIN)
    {
        /* checkpoints: the state before each segment */
#pragma omp for schedule(static)
        for (size_t j = 0; j < Hv; j++) {
            const size_t kh = j / grp;
            gdn_chunk_view cv;
            LS_K(gdn_chunk_bind)(&cv, gdn_ws_tail(&w, j), dk_, dv_);
            ls_real *ck = gdn_ws_ckpt(&w, j);
            if (S_in != NULL) {
                memcpy(ck, S_in + j * dkdv, dkdv * sizeof *ck);
            } else {
                memset(ck, 0, dkdv * sizeof *ck);
            }
            for (size_t c = 0; c + 1 < nc; c++) {
                ls_real *S = ck + (c + 1) * dkdv;
                memcpy(S, ck + c * dkdv, dkdv * sizeof *S);
                for (size_t t0 = c * ch; t0 < (c + 1) * ch; t0 += GDN_C) {
                    LS_K(gdn_chunk_forward)(&cv, S, NULL, 0, q + (t0 * Hk + kh) * dk_,
                                            k + (t0 * Hk + kh) * dk_, ldk,
                                            v + (t0 * Hv + j) * dv_, ldv, g + t0 * Hv + j,
                                            beta + t0 * Hv + j, Hv, GDN_C, dk_, dv_);
                }
            }
            if (dS_out != NULL) {
                memcpy(gdn_ws_G(&w, j), dS_out + j * dkdv, dkdv * sizeof(ls_real));
            } else {
                memset(gdn_ws_G(&w, j), 0, dkdv * sizeof(ls_real));
            }
        }
        for (size_t c = nc; c-- > 0;) {
            const size_t s0 = c * ch, s1 = s0 + ch < T ? s0 + ch : T;
            const size_t nsub = (s1 - s0 + GDN_C - 1) / GDN_C;
            const size_t buf = c & 1;
            if (c + 1 < nc) {
                LS_K(gdn_ws_reduce)(dq, dk, &w, c + 1, T, Hk, grp);
            }
#pragma omp for schedule(static)
            for (size_t j = 0; j < Hv; j++) {
                const size_t kh = j / grp;
                gdn_chunk_view cv;
                bwd_scratch bs;
                LS_K(gdn_chunk_bind)(&cv, gdn_ws_tail(&w, j), dk_, dv_);
                bwd_scratch_bind(&bs, gdn_ws_tail(&w, j) + LS_K(gdn_chunk_head_ws)(dk_, dv_), dk_,
                                 dv_);
                ls_real *st = gdn_ws_mid(&w, j), *G = gdn_ws_G(&w, j);
                /* the state before each chunk of the segment */
                memcpy(st, gdn_ws_ckpt(&w, j) + c * dkdv, dkdv * sizeof *st);
                for (size_t i = 0; i + 1 < nsub; i++) {
                    const size_t t0 = s0 + i * GDN_C;
                    memcpy(st + (i + 1) * dkdv, st + i * dkdv, dkdv * sizeof *st);
                    LS_K(gdn_chunk_forward)(&cv, st + (i + 1) * dkdv, NULL, 0,
                                            q + (t0 * Hk + kh) * dk_, k + (t0 * Hk + kh) * dk_,
                                            ldk, v + (t0 * Hv + j) * dv_, ldv, g + t0 * Hv + j,
                                            beta + t0 * Hv + j, Hv, GDN_C, dk_, dv_);
                }
                for (size_t i = nsub; i-- > 0;) {
                    const size_t t0 = s0 + i * GDN_C;
                    const size_t n = s1 - t0 < GDN_C ? s1 - t0 : GDN_C;
                    const size_t qk = (t0 * Hk + kh) * dk_, vo = (t0 * Hv + j) * dv_;
                    const chunk_io x = {
                        .q = q + qk, .k = k + qk, .v = v + vo, .dO = do_ + vo,
                        .g = g + t0 * Hv + j, .beta = beta + t0 * Hv + j,
                        .dq = gdn_ws_dq(&w, j, buf) + (t0 - s0) * dk_,
                        .dk = gdn_ws_dk(&w, j, buf) + (t0 - s0) * dk_, .dv = dv + vo,
                        .dg = dg + t0 * Hv + j, .dbeta = dbeta + t0 * Hv + j, .ldk = ldk,
                        .ldv = ldv, .Hv = Hv, .n = n, .dkn = dk_, .dvn = dv_};
                    chunk_backward(&cv, &bs, &x, st + i * dkdv, G);
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
