/* attention_avx512.c - the fused AVX-512 forward of one (query tile, key
 * tile) pair of attention.c's GEMM path (attention_internal.h): the scores,
 * the online softmax and P V in registers, four query rows at a time, so that
 * neither the score tile nor a packed GEMM operand goes through memory.
 *
 * Per pair: the key tile is transposed once into KT[hd][64] (zero beyond its
 * nc keys).  Then for each group of four rows: S = tau Q K^T as 4 x (nc / 16)
 * vector accumulators over d (one FMA chain per score, d in order), the
 * masked running max, P = exp(S - m) with the same polynomial as the rows'
 * AVX2 build (attention_rows.c), the rescale of the running sum and output,
 * and O += P V over hd in chunks of up to 64 floats (4 x 4 accumulators,
 * keys in order).  Each pair is one thread's whole computation, as on the
 * GEMM path, so the result does not depend on the thread count; it differs
 * from the GEMM path by rounding (the order of the dot products' terms, FMA
 * contraction), which the kernel tests bound.
 *
 * Only in the f32 build on x86-64 with GCC or clang (function-level target
 * attributes: the rest of the binary keeps its baseline ISA), and for hd a
 * multiple of 16 up to LS_ATTN_AVX512_MAX_HD with key tiles of at most 64;
 * ls_attn_avx512_fits says so, and the caller runs the GEMM path otherwise. */
#include <string.h>

#include "kernels/cpu/attention_internal.h"
#include "kernels/isa.h"

#if !LS_REAL_IS_F64 && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define T512_INLINE static inline __attribute__((always_inline, target("avx512f,avx512dq,avx2,fma")))
#define KW 64 /* keys per packed tile (4 vectors) */

int LS_K(ls_attn_avx512_fits)(const plan *pl)
{
    return pl->isa == LS_ISA_AVX512 && pl->hd % 16 == 0 && pl->hd <= LS_ATTN_AVX512_MAX_HD &&
           pl->nk <= KW;
}

size_t LS_K(ls_attn_avx512_scratch)(const plan *pl)
{
    return pl->hd * KW + 4 * KW + pl->hd + 16;
}

/* exp(x) as attention_rows.c's exp_approx with FMA: clamped to [-87, 88],
 * x = n ln2 + r, a degree-7 polynomial, 2^n in the exponent bits. */
T512_INLINE __m512 exp512(__m512 x)
{
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 shift = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504f), shift);
    const __m512 nn = _mm512_sub_ps(n, shift);
    const __m512 r = _mm512_sub_ps(_mm512_fnmadd_ps(nn, _mm512_set1_ps(0.693145751953125f), xc),
                                   _mm512_mul_ps(nn, _mm512_set1_ps(1.428606765330187e-06f)));
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_sub_epi32(_mm512_castps_si512(n), _mm512_set1_epi32(0x4B400000 - 127));
    e = _mm512_slli_epi32(e, 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* Lanes of vector v (keys 16 v ...) among the first nv keys. */
static inline __mmask16 key_mask(size_t nv, size_t v)
{
    if (nv >= 16 * (v + 1)) {
        return (__mmask16)0xFFFF;
    }
    return nv > 16 * v ? (__mmask16)((1u << (nv - 16 * v)) - 1) : (__mmask16)0;
}

/* acc[i][v] = sum_d Q[i][d] KT[d][16 v ...], NV vectors of keys, 4 rows. */
T512_INLINE void scores(__m512 acc[4][4], const float *const qr[4], const float *KT, size_t hd,
                        const int NV)
{
    /* local accumulators: acc's stores could alias the inputs (__m512 may
     * alias float), which would keep them in memory through the loop */
    __m512 a[4][4];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) {
            a[i][v] = _mm512_setzero_ps();
        }
    }
    const float *q0 = qr[0], *q1 = qr[1], *q2 = qr[2], *q3 = qr[3];
    for (size_t d = 0; d < hd; d++) {
        __m512 kv[4];
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) {
            kv[v] = _mm512_loadu_ps(KT + d * KW + 16 * v);
        }
        const __m512 b0 = _mm512_set1_ps(q0[d]), b1 = _mm512_set1_ps(q1[d]);
        const __m512 b2 = _mm512_set1_ps(q2[d]), b3 = _mm512_set1_ps(q3[d]);
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) {
            a[0][v] = _mm512_fmadd_ps(b0, kv[v], a[0][v]);
            a[1][v] = _mm512_fmadd_ps(b1, kv[v], a[1][v]);
            a[2][v] = _mm512_fmadd_ps(b2, kv[v], a[2][v]);
            a[3][v] = _mm512_fmadd_ps(b3, kv[v], a[3][v]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) {
            acc[i][v] = a[i][v];
        }
    }
}

/* orow[i][c0 + ...] += sum_{j < nj} P[i][j] V[j][c0 + ...], NC vectors. */
T512_INLINE void pv_chunk(float *const orow[4], const float *P, const float *Vt, size_t ldk,
                          size_t nj, size_t c0, const int NC)
{
    __m512 o[4][4];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            o[i][c] = _mm512_loadu_ps(orow[i] + c0 + 16 * c);
        }
    }
    for (size_t j = 0; j < nj; j++) {
        __m512 vv[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            vv[c] = _mm512_loadu_ps(Vt + j * ldk + c0 + 16 * c);
        }
        const __m512 b0 = _mm512_set1_ps(P[j]), b1 = _mm512_set1_ps(P[KW + j]);
        const __m512 b2 = _mm512_set1_ps(P[2 * KW + j]), b3 = _mm512_set1_ps(P[3 * KW + j]);
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            o[0][c] = _mm512_fmadd_ps(b0, vv[c], o[0][c]);
            o[1][c] = _mm512_fmadd_ps(b1, vv[c], o[1][c]);
            o[2][c] = _mm512_fmadd_ps(b2, vv[c], o[2][c]);
            o[3][c] = _mm512_fmadd_ps(b3, vv[c], o[3][c]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            _mm512_storeu_ps(orow[i] + c0 + 16 * c, o[i][c]);
        }
    }
}

T512 static void scores_any(__m512 acc[4][4], const float *const qr[4], const float *KT, size_t hd,
                            size_t nkv)
{
    switch (nkv) {
    case 1:
        scores(acc, qr, KT, hd, 1);
        break;
    case 2:
        scores(acc, qr, KT, hd, 2);
        break;
    case 3:
        scores(acc, qr, KT, hd, 3);
        break;
    default:
        scores(acc, qr, KT, hd, 4);
        break;
    }
}

T512 static void pv_any(float *const orow[4], const float *P, const float *Vt, size_t ldk,
                        size_t nj, size_t hd)
{
    size_t c0 = 0;
    for (; c0 + 64 <= hd; c0 += 64) {
        pv_chunk(orow, P, Vt, ldk, nj, c0, 4);
    }
    switch ((hd - c0) / 16) {
    case 1:
        pv_chunk(orow, P, Vt, ldk, nj, c0, 1);
        break;
    case 2:
        pv_chunk(orow, P, Vt, ldk, nj, c0, 2);
        break;
    case 3:
        pv_chunk(orow, P, Vt, ldk, nj, c0, 3);
        break;
    default:
        break;
    }
}

/* KT[d][j] = X[j][d] for j < nc (rows ldk apart), zero up to 16 nkv. */
static void pack_t(float *KT, const float *X, size_t ldk, size_t hd, size_t nc, size_t nkv)
{
    for (size_t d = 0; d < hd; d++) {
        float *row = KT + d * KW;
        for (size_t j = 0; j < nc; j++) {
            row[j] = X[j * ldk + d];
        }
        for (size_t j = nc; j < 16 * nkv; j++) {
            row[j] = 0;
        }
    }
}

T512 void LS_K(ls_attn_avx512_forward_pair)(const plan *pb, const pair_span *g, const float *Q,
                                            const float *Kt, const float *Vt, float *O, float *mx,
                                            float *l, float *scratch)
{
    const size_t hd = pb->hd, ldk = pb->Hkv * hd, nc = g->nc, nkv = (nc + 15) / 16;
    float *KT = scratch, *P = KT + hd * KW, *dummy = P + 4 * KW;
    pack_t(KT, Kt, ldk, hd, nc, nkv);
    memset(dummy, 0, hd * sizeof *dummy);
    const __m512 tau = _mm512_set1_ps(pb->tau);
    for (size_t r = g->r0; r < g->R; r += 4) {
        const float *qr[4];
        float *orow[4];
        size_t nv[4], nj = 0;
        _Pragma("GCC unroll 4")
        for (int i = 0; i < 4; i++) {
            const int real = r + (size_t)i < g->R;
            const size_t ri = real ? r + (size_t)i : r;
            qr[i] = Q + ri * hd;
            orow[i] = real ? O + ri * hd : dummy;
            nv[i] = real ? visible(g->t0 + ri / pb->grp, g->s0, g->nkt, pb->q_pos0, pb->k_pos0,
                                   pb->causal)
                         : 0;
            nj = nv[i] > nj ? nv[i] : nj;
        }
        __m512 acc[4][4];
        scores_any(acc, qr, KT, hd, nkv);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < 4; i++) {
            float *p = P + (size_t)i * KW;
            if (nv[i] == 0) {
                memset(p, 0, KW * sizeof *p);
                continue;
            }
            const size_t row = r + (size_t)i;
            __m512 mv = _mm512_set1_ps(mx[row]);
            for (size_t v = 0; v < nkv; v++) {
                acc[i][v] = _mm512_mul_ps(acc[i][v], tau);
                mv = _mm512_mask_max_ps(mv, key_mask(nv[i], v), mv, acc[i][v]);
            }
            const float m = _mm512_reduce_max_ps(mv);
            const __m512 mb = _mm512_set1_ps(m);
            __m512 sv = _mm512_setzero_ps();
            for (size_t v = 0; v < KW / 16; v++) {
                __m512 pv = _mm512_setzero_ps();
                if (v < nkv) {
                    pv = _mm512_maskz_mov_ps(key_mask(nv[i], v),
                                             exp512(_mm512_sub_ps(acc[i][v], mb)));
                    sv = _mm512_add_ps(sv, pv);
                }
                _mm512_storeu_ps(p + 16 * v, pv);
            }
            const float sum = _mm512_reduce_add_ps(sv);
            /* as the rows' forward: rescale unless no new max or nothing yet */
            if (m == mx[row] || mx[row] == -INFINITY) {
                l[row] += sum;
            } else {
                const float scale = expf(mx[row] - m);
                const __m512 sc = _mm512_set1_ps(scale);
                for (size_t e = 0; e < hd; e += 16) {
                    _mm512_storeu_ps(orow[i] + e,
                                     _mm512_mul_ps(_mm512_loadu_ps(orow[i] + e), sc));
                }
                l[row] = l[row] * scale + sum;
            }
            mx[row] = m;
        }
        pv_any(orow, P, Vt, ldk, nj, hd);
    }
}

size_t LS_K(ls_attn_avx512_bwd_scratch)(const plan *pl)
{
    return 2 * pl->hd * KW + 2 * pl->nq * pl->grp * KW + 4 * KW + pl->hd + 16;
}

/* dst[jj][c0 + ...] (key rows ldk apart) += scale sum_{r < nr} A[r][j0 + jj] B[r][c0 + ...] for
 * the keys jj < nkeys, NC vectors: the "A^T B" of dK and dV, four keys at a time. */
T512_INLINE void tn_chunk(float *dst, size_t ldk, const float *A, const float *B, size_t ldb,
                          size_t nr, size_t j0, size_t nkeys, size_t c0, float scale, const int NC)
{
    __m512 a[4][4];
    _Pragma("GCC unroll 4")
    for (int jj = 0; jj < 4; jj++) {
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            a[jj][c] = _mm512_setzero_ps();
        }
    }
    for (size_t r = 0; r < nr; r++) {
        __m512 bv[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            bv[c] = _mm512_loadu_ps(B + r * ldb + c0 + 16 * c);
        }
        const float *ar = A + r * KW + j0;
        const __m512 x0 = _mm512_set1_ps(ar[0]), x1 = _mm512_set1_ps(ar[1]);
        const __m512 x2 = _mm512_set1_ps(ar[2]), x3 = _mm512_set1_ps(ar[3]);
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            a[0][c] = _mm512_fmadd_ps(x0, bv[c], a[0][c]);
            a[1][c] = _mm512_fmadd_ps(x1, bv[c], a[1][c]);
            a[2][c] = _mm512_fmadd_ps(x2, bv[c], a[2][c]);
            a[3][c] = _mm512_fmadd_ps(x3, bv[c], a[3][c]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
    for (size_t jj = 0; jj < nkeys; jj++) {
        float *row = dst + jj * ldk + c0;
        _Pragma("GCC unroll 4")
        for (int c = 0; c < NC; c++) {
            _mm512_storeu_ps(row + 16 * c,
                             _mm512_fmadd_ps(sc, a[jj][c], _mm512_loadu_ps(row + 16 * c)));
        }
    }
}

/* dst (the key tile's rows of dK or dV) += scale A^T B over nr rows, every key below nc. */
T512 static void tn_any(float *dst, size_t ldk, const float *A, const float *B, size_t hd,
                        size_t nr, size_t nc, float scale)
{
    for (size_t j0 = 0; j0 < nc; j0 += 4) {
        const size_t nkeys = nc - j0 < 4 ? nc - j0 : 4;
        size_t c0 = 0;
        for (; c0 + 64 <= hd; c0 += 64) {
            tn_chunk(dst + j0 * ldk, ldk, A, B, hd, nr, j0, nkeys, c0, scale, 4);
        }
        switch ((hd - c0) / 16) {
        case 1:
            tn_chunk(dst + j0 * ldk, ldk, A, B, hd, nr, j0, nkeys, c0, scale, 1);
            break;
        case 2:
            tn_chunk(dst + j0 * ldk, ldk, A, B, hd, nr, j0, nkeys, c0, scale, 2);
            break;
        case 3:
            tn_chunk(dst + j0 * ldk, ldk, A, B, hd, nr, j0, nkeys, c0, scale, 3);
            break;
        default:
            break;
        }
    }
}

T512 void LS_K(ls_attn_avx512_backward_pair)(const plan *pb, const pair_span *g, const float *Q,
                                             const float *dO, const float *Kt, const float *Vt,
                                             const float *L, const float *D, float *dQ,
                                             float *dk, float *dv, float *scratch)
{
    const size_t hd = pb->hd, ldk = pb->Hkv * hd, nc = g->nc, nkv = (nc + 15) / 16;
    const size_t R = pb->nq * pb->grp;
    float *KT = scratch, *VT = KT + hd * KW, *P = VT + hd * KW, *dS = P + R * KW;
    float *tmp = dS + R * KW, *dummy = tmp + 4 * KW;
    const int need_ds = dQ != NULL || dk != NULL;
    pack_t(KT, Kt, ldk, hd, nc, nkv);
    if (need_ds) {
        pack_t(VT, Vt, ldk, hd, nc, nkv);
    }
    memset(dummy, 0, hd * sizeof *dummy);
    const __m512 tau = _mm512_set1_ps(pb->tau);
    const size_t nr = g->R - g->r0;
    for (size_t r = g->r0; r < g->R; r += 4) {
        const float *qr[4], *dor[4];
        float *dqr[4];
        size_t nv[4], nj = 0;
        for (int i = 0; i < 4; i++) {
            const int real = r + (size_t)i < g->R;
            const size_t ri = real ? r + (size_t)i : r;
            qr[i] = Q + ri * hd;
            dor[i] = dO + ri * hd;
            dqr[i] = real && dQ != NULL ? dQ + ri * hd : dummy;
            nv[i] = !real || L[ri] == -INFINITY
                        ? 0
                        : visible(g->t0 + ri / pb->grp, g->s0, g->nkt, pb->q_pos0, pb->k_pos0,
                                  pb->causal);
            nj = nv[i] > nj ? nv[i] : nj;
        }
        __m512 acc[4][4], dacc[4][4];
        scores_any(acc, qr, KT, hd, nkv);
        if (need_ds) {
            scores_any(dacc, dor, VT, hd, nkv);
        }
        for (int i = 0; i < 4; i++) {
            if (r + (size_t)i >= g->R) {
                continue;
            }
            const size_t row = r + (size_t)i;
            float *p = P + (row - g->r0) * KW, *ds = dS + (row - g->r0) * KW;
            float *t = tmp + (size_t)i * KW;
            const __m512 Lb = _mm512_set1_ps(L[row]), Db = _mm512_set1_ps(D[row]);
            for (size_t v = 0; v < KW / 16; v++) {
                __m512 pv = _mm512_setzero_ps(), dsv = _mm512_setzero_ps();
                if (v < nkv && nv[i] > 0) {
                    const __mmask16 mk = key_mask(nv[i], v);
                    pv = _mm512_maskz_mov_ps(
                        mk, exp512(_mm512_sub_ps(_mm512_mul_ps(acc[i][v], tau), Lb)));
                    if (need_ds) {
                        dsv = _mm512_mul_ps(pv, _mm512_sub_ps(dacc[i][v], Db));
                    }
                }
                _mm512_storeu_ps(p + 16 * v, pv);
                _mm512_storeu_ps(ds + 16 * v, dsv);
                _mm512_storeu_ps(t + 16 * v, _mm512_mul_ps(dsv, tau));
            }
        }
        for (int i = 0; i < 4; i++) {
            if (r + (size_t)i >= g->R) {
                memset(tmp + (size_t)i * KW, 0, KW * sizeof *tmp);
            }
        }
        if (dQ != NULL) {
            pv_any(dqr, tmp, Kt, ldk, nj, hd);
        }
    }
    if (dk != NULL) {
        tn_any(dk, ldk, dS, Q + g->r0 * hd, hd, nr, nc, pb->tau);
    }
    if (dv != NULL) {
        tn_any(dv, ldk, P, dO + g->r0 * hd, hd, nr, nc, 1.0f);
    }
}

#else /* no AVX-512 path in this build */

int LS_K(ls_attn_avx512_fits)(const plan *pl)
{
    (void)pl;
    return 0;
}

size_t LS_K(ls_attn_avx512_scratch)(const plan *pl)
{
    (void)pl;
    return 0;
}

void LS_K(ls_attn_avx512_forward_pair)(const plan *pb, const pair_span *g, const ls_real *Q,
                                       const ls_real *Kt, const ls_real *Vt, ls_real *O,
                                       ls_real *mx, ls_real *l, ls_real *scratch)
{
    (void)pb, (void)g, (void)Q, (void)Kt, (void)Vt, (void)O, (void)mx, (void)l, (void)scratch;
}

size_t LS_K(ls_attn_avx512_bwd_scratch)(const plan *pl)
{
    (void)pl;
    return 0;
}

void LS_K(ls_attn_avx512_backward_pair)(const plan *pb, const pair_span *g, const ls_real *Q,
                                        const ls_real *dO, const ls_real *Kt, const ls_real *Vt,
                                        const ls_real *L, const ls_real *D, ls_real *dQ,
                                        ls_real *dk, ls_real *dv, ls_real *scratch)
{
    (void)pb, (void)g, (void)Q, (void)dO, (void)Kt, (void)Vt, (void)L, (void)D, (void)dQ;
    (void)dk, (void)dv, (void)scratch;
}

#endif
