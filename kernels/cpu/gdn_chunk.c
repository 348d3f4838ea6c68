/* gdn_chunk.c - the Gated DeltaNet recurrence evaluated chunk by chunk
 * (the WY representation / UT transform of the chunkwise-parallel DeltaNet
 * and Gated DeltaNet papers): kernels/gdn.h, docs/model.md §1.1 step 6.
 *
 * Within a chunk of n <= GDN_C tokens of one value head, with S0 the state
 * before it and Gam[t][s] = e^{g_{s+1} + ... + g_t} (s <= t; ea_t the same
 * product from the chunk start, e^{g_0 + ... + g_t}), the recurrence unrolls to
 *   Delta = U - W S0,   (I + A) U = diag(beta) V,  (I + A) W = diag(beta ea) K,
 *   A[t][s] = beta_t Gam[t][s] k_t.k_s  (s < t: strictly lower),
 *   O   = diag(ea) Q S0 + (Gam o Q K^T)_{s<=t} Delta,
 *   S_n = ea_{n-1} S0 + (diag(Gam[n-1][.]) K)^T Delta,
 * where Delta's rows are the delta_t of the recurrence.  (I + A)^{-1} is
 * formed explicitly by forward substitution (the UT transform, n^3/6
 * multiply-adds), the rest is CBLAS GEMMs (no trsm: OpenBLAS threads trsm
 * at any size, which inside our thread team costs more than it saves).
 * Gam is built as running products of e^{g} (double precision), never as an
 * exponential of a difference of large cumulative sums, and nothing is ever
 * divided by a gate: exact to rounding against the recurrence for any g <= 0,
 * underflow included.
 *
 * Every GEMM is split into row blocks of M N K <= GEMM_MNK, where OpenBLAS
 * runs it on the calling thread; the parallelism is OpenMP's, over value
 * heads, and each head is computed the same way by whichever thread: the
 * result is the same bits for any number of threads.  Scratch (one block for
 * all heads, freed before return) comes from the kernels' scratch allocator;
 * where it fails, the token recurrence (gdn.c) runs instead.
 *
 * Also here: ls_gdn_forward, which takes this form or the token recurrence
 * by shape (gdn_use_chunked, thresholds in gdn_internal.h). */
#include "kernels/gdn.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/gdn_internal.h"
#include "kernels/scratch.h"

#if LS_REAL_IS_F64
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

#define gemm LS_K(gdn_gemm)

void LS_K(gdn_gemm)(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, size_t M, size_t N, size_t K,
                    ls_real alpha, const ls_real *A, size_t lda, const ls_real *B, size_t ldb,
                 ls_real beta, ls_real *C, size_t ldc)
{
    size_t m = GEMM_MNK / (N * K);
    if (m == 0) {
        m = 1;
    }
    for (size_t i = 0; i < M; i += m) {
        const size_t mm = M - i < m ? M - i : m;
        const ls_real *Ai = ta == CblasNoTrans ? A + i * lda : A + i;
        GEMM(CblasRowMajor, ta, tb, (int)mm, (int)N, (int)K, alpha, Ai, (int)lda, B, (int)ldb,
             beta, C + i * ldc, (int)ldc);
    }
}

size_t LS_K(gdn_chunk_head_ws)(size_t dk, size_t dv)
{
    return 4 * (size_t)GDN_C * GDN_C + (size_t)GDN_C * (1 + dv + 2 * dk);
}

void LS_K(gdn_chunk_decays)(ls_real *Gam, ls_real *ea, const ls_real *g, size_t Hv, size_t n)
{
    double row[GDN_C], e0 = 1;
    for (size_t t = 0; t < n; t++) {
        const double eg = exp((double)g[t * Hv]);
        for (size_t s = 0; s < t; s++) {
            row[s] *= eg;
            Gam[t * GDN_C + s] = (ls_real)row[s];
        }
        row[t] = 1;
        Gam[t * GDN_C + t] = 1;
        e0 *= eg;
        ea[t] = (ls_real)e0;
    }
}

/* Ti = (I + A)^{-1} for the unit lower triangular I + A (A strictly lower,
 * row stride GDN_C): row t of Ti is e_t - sum_{s<t} A[t][s] Ti[s], forward
 * substitution on rows (the UT transform); zero above the diagonal. */
static void unit_lower_inverse(ls_real *Ti, const ls_real *A, size_t n)
{
    for (size_t t = 0; t < n; t++) {
        ls_real *Xt = Ti + t * GDN_C;
        const ls_real *At = A + t * GDN_C;
        for (size_t r = 0; r < n; r++) {
            Xt[r] = 0;
        }
        Xt[t] = 1;
        for (size_t s = 0; s < t; s++) {
            const ls_real a = At[s];
            const ls_real *Xs = Ti + s * GDN_C;
#pragma omp simd
            for (size_t r = 0; r <= s; r++) {
                Xt[r] -= a * Xs[r];
            }
        }
    }
}

void LS_K(gdn_chunk_wy)(gdn_chunk_view *c, ls_real *KK, const ls_real *k, size_t ldk,
                        const ls_real *v, size_t ldv, const ls_real *beta, size_t Hv, size_t n,
                        size_t dk, size_t dv)
{
    /* A = strictly lower (beta_t Gam[t][s] k_t.k_s) */
    ls_real *kk = KK != NULL ? KK : c->A;
    gemm(CblasNoTrans, CblasTrans, n, n, dk, 1, k, ldk, k, ldk, 0, kk, GDN_C);
    for (size_t t = 0; t < n; t++) {
        const ls_real bt = beta[t * Hv];
        ls_real *At = c->A + t * GDN_C;
        const ls_real *Gt = c->Gam + t * GDN_C, *Kt = kk + t * GDN_C;
        for (size_t s = 0; s < t; s++) {
            At[s] = Kt[s] * bt * Gt[s];
        }
    }
    unit_lower_inverse(c->Ti, c->A, n);
    /* U = (Ti diag(beta)) V; W = (Ti diag(beta)) (diag(ea) K); Ti diag(beta) in Tb
     * (zero above the diagonal, so the GEMMs see the full square) */
    for (size_t t = 0; t < n; t++) {
        const ls_real *Xt = c->Ti + t * GDN_C;
        ls_real *Bt = c->Tb + t * GDN_C;
        for (size_t s = 0; s <= t; s++) {
            Bt[s] = Xt[s] * beta[s * Hv];
        }
        for (size_t s = t + 1; s < n; s++) {
            Bt[s] = 0;
        }
        for (size_t i = 0; i < dk; i++) {
            c->X[t * dk + i] = c->ea[t] * k[t * ldk + i];
        }
    }
    gemm(CblasNoTrans, CblasNoTrans, n, dv, n, 1, c->Tb, GDN_C, v, ldv, 0, c->U, dv);
    gemm(CblasNoTrans, CblasNoTrans, n, dk, n, 1, c->Tb, GDN_C, c->X, dk, 0, c->W, dk);
}

void LS_K(gdn_chunk_forward)(gdn_chunk_view *c, ls_real *S, ls_real *o, size_t ldo,
                             const ls_real *q, const ls_real *k, size_t ldk, const ls_real *v,
                             size_t ldv, const ls_real *g, const ls_real *beta, size_t Hv,
                             size_t n, size_t dk, size_t dv)
{
    LS_K(gdn_chunk_decays)(c->Gam, c->ea, g, Hv, n);
    LS_K(gdn_chunk_wy)(c, NULL, k, ldk, v, ldv, beta, Hv, n, dk, dv);
    /* Delta = U - W S0, in U */
    gemm(CblasNoTrans, CblasNoTrans, n, dv, dk, -1, c->W, dk, S, dv, 1, c->U, dv);
    if (o != NULL) {
        /* P = (Gam o Q K^T) on s <= t, zero above (in A, no longer needed) */
        ls_real *P = c->A;
        gemm(CblasNoTrans, CblasTrans, n, n, dk, 1, q, ldk, k, ldk, 0, P, GDN_C);
        for (size_t t = 0; t < n; t++) {
            ls_real *Pt = P + t * GDN_C;
            const ls_real *Gt = c->Gam + t * GDN_C;
            for (size_t s = 0; s <= t; s++) {
                Pt[s] *= Gt[s];
            }
            for (size_t s = t + 1; s < n; s++) {
                Pt[s] = 0;
            }
        }
        /* O = (diag(ea) Q) S0 + P Delta; diag(ea) Q in X */
        for (size_t t = 0; t < n; t++) {
            for (size_t i = 0; i < dk; i++) {
                c->X[t * dk + i] = c->ea[t] * q[t * ldk + i];
            }
        }
        gemm(CblasNoTrans, CblasNoTrans, n, dv, dk, 1, c->X, dk, S, dv, 0, o, ldo);
        gemm(CblasNoTrans, CblasNoTrans, n, dv, n, 1, P, GDN_C, c->U, dv, 1, o, ldo);
    }
    /* S = ea_{n-1} S0 + (diag(Gam[n-1][.]) K)^T Delta */
    const ls_real *GL = c->Gam + (n - 1) * GDN_C;
    for (size_t t = 0; t < n; t++) {
        for (size_t i = 0; i < dk; i++) {
            c->X[t * dk + i] = GL[t] * k[t * ldk + i];
        }
    }
    const ls_real eL = c->ea[n - 1];
    for (size_t i = 0; i < dk * dv; i++) {
        S[i] *= eL;
    }
    gemm(CblasTrans, CblasNoTrans, dk, dv, n, 1, c->X, dk, c->U, dv, 1, S, dv);
}

void LS_K(gdn_chunk_bind)(gdn_chunk_view *c, ls_real *ws, size_t dk, size_t dv)
{
    c->Gam = ws;
    c->A = c->Gam + GDN_C * GDN_C;
    c->Ti = c->A + GDN_C * GDN_C;
    c->Tb = c->Ti + GDN_C * GDN_C;
    c->ea = c->Tb + GDN_C * GDN_C;
    c->U = c->ea + GDN_C;
    c->W = c->U + GDN_C * dv;
    c->X = c->W + GDN_C * dk;
}

void LS_K(ls_gdn_forward)(ls_real *o, ls_real *S_out, const ls_real *q, const ls_real *k,
                          const ls_real *v, const ls_real *g, const ls_real *beta,
                          const ls_real *S_in, size_t T, size_t Hk, size_t Hv, size_t dk,
                          size_t dv)
{
    if (LS_K(gdn_use_chunked)(T, dk, dv, 0)) {
        LS_K(ls_gdn_forward_chunked)(o, S_out, q, k, v, g, beta, S_in, T, Hk, Hv, dk, dv);
    } else {
        LS_K(ls_gdn_forward_recurrent)(o, S_out, q, k, v, g, beta, S_in, T, Hk, Hv, dk, dv);
    }
}

int LS_K(gdn_use_chunked)(size_t T, size_t dk, size_t dv, int backward)
{
    return T >= GDN_C &&
           dk * dv >= (backward ? GDN_CHUNK_MIN_DKDV_BWD : GDN_CHUNK_MIN_DKDV_FWD);
}

void LS_K(ls_gdn_forward_chunked)(ls_real *o, ls_real *S_out, const ls_real *q,
                                  const ls_real *k, const ls_real *v, const ls_real *g,
                                  const ls_real *beta, const ls_real *S_in, size_t T,
                                  size_t Hk, size_t Hv, size_t dk, size_t dv)
{
    assert(Hk > 0 && Hv % Hk == 0);
    const size_t dkdv = dk * dv, grp = Hv / Hk;
    const size_t hw = LS_K(gdn_chunk_head_ws)(dk, dv) + (S_out == NULL ? dkdv : 0);
    const ls_kernel_allocator *al = ls_kernel_scratch_get();
    ls_real *ws = al->alloc(Hv * hw * sizeof *ws);
    if (ws == NULL) {
        LS_K(ls_gdn_forward_recurrent)(o, S_out, q, k, v, g, beta, S_in, T, Hk, Hv, dk, dv);
        return;
    }
#pragma omp parallel for schedule(static) if (T * Hv * dkdv >= GDN_PAR_MIN)
    for (size_t j = 0; j < Hv; j++) {
        const size_t kh = j / grp;
        ls_real *wj = ws + j * hw;
        gdn_chunk_view c;
        LS_K(gdn_chunk_bind)(&c, wj, dk, dv);
        /* the state lives in S_out (S_in == S_out in place is fine) or in scratch */
        ls_real *S = S_out != NULL ? S_out + j * dkdv : wj + LS_K(gdn_chunk_head_ws)(dk, dv);
        if (S_in == NULL) {
            memset(S, 0, dkdv * sizeof *S);
        } else if (S_in + j * dkdv != S) {
            memcpy(S, S_in + j * dkdv, dkdv * sizeof *S);
        }
        for (size_t t0 = 0; t0 < T; t0 += GDN_C) {
            const size_t n = T - t0 < GDN_C ? T - t0 : GDN_C;
            const size_t qk = (t0 * Hk + kh) * dk, vo = (t0 * Hv + j) * dv;
            LS_K(gdn_chunk_forward)(&c, S, o + vo, Hv * dv, q + qk, k + qk, Hk * dk, v + vo,
                                    Hv * dv, g + t0 * Hv + j, beta + t0 * Hv + j, Hv, n, dk,
                                    dv);
        }
    }
    al->release(ws);
}
