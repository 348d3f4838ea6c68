/* attention.c - CPU softmax attention over one block of keys (forward with
 * log-normaliser, backward given the global output and log-normaliser) and
 * the partial-attention merge (kernels/attention.h, MODEL.md §0).
 *
 * Two paths compute the same function.
 *
 * The GEMM path (enough queries and keys): for one kv head, a tile of nq
 * query tokens stacks the rows of all the kv head's query heads (GQA), token
 * by token, into R = nq * grp rows; against a tile of nk keys the scores
 * S = tau Q K^T, then O += P V (forward) or dP = dO V^T, dQ += tau dS K,
 * dK += tau dS^T Q, dV += P^T dO (backward) are CBLAS GEMMs, and only the
 * softmax between them (online: running max and sum per row) is elementwise.
 * Causality by absolute position makes the visible keys of every query a
 * prefix of the block and the rows that see a key tile a suffix of the query
 * tile, so each GEMM runs on the visible rectangle only and fully masked tile
 * pairs are skipped.  Every GEMM has M N K <= GEMM_MNK, where OpenBLAS runs it
 * on the calling thread: the parallelism is OpenMP's, over tiles.
 * Forward: units (kv head, query tile).  Backward: either one fused pass over
 * kv heads (each owns its dq rows and dk/dv rows) or, where that would leave
 * threads idle, two passes, (kv head, query tile) for dq and (kv head, key
 * tile) for dk and dv.  Both compute every tile pair the same way and add the
 * pairs in the same order, so the result is the same bits for any number of
 * threads and either choice.  Scratch: one malloc per thread (the tiles,
 * freed before return); where it fails, the thread computes its units on the
 * scalar path instead.
 *
 * The scalar path (blocks of fewer than GEMM_MIN_KEYS keys, and the
 * fallback) runs QT queries of one head against KT keys at a time with
 * vector dot products.  Decode calls (one query, a 64-key page) take the
 * GEMM path: with its grp rows it still costs half the scalar path's time.
 */
#include "kernels/attention.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if LS_REAL_IS_F64
#define R_EXP exp
#define R_LOG log
#define GEMM cblas_dgemm
#else
#define R_EXP expf
#define R_LOG logf
#define GEMM cblas_sgemm
#endif

#define QT 16 /* scalar path: queries per tile */
#define KT 64 /* scalar path: keys per tile */
#define PAR_MIN 131072 /* Tq Tk H hd below which one thread does the work */

#define GK 64 /* GEMM path: keys per tile (at most) */
#define GQ 64 /* GEMM path: query tokens per tile (at most) */
/* OpenBLAS (interface/gemm.c) runs a GEMM with M N K <= 65536 x
 * GEMM_MULTITHREAD_THRESHOLD (4 by default) on the calling thread; larger
 * ones would start its own threads inside ours. */
#define GEMM_MNK 262144
#define GEMM_MIN_KEYS 8 /* keys for the GEMM path (below: about even) */

/* ------------------------------------------------------------- helpers */

static ls_real dot(const ls_real *a, const ls_real *b, size_t n)
{
    ls_real acc = 0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = 0; i < n; i++) {
        acc += a[i] * b[i];
    }
    return acc;
}

static void axpy(ls_real *y, ls_real a, const ls_real *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        y[i] += a * x[i];
    }
}

/* Number of keys among [s0, s0 + nk) visible to query t (a prefix). */
static size_t visible(size_t t, size_t s0, size_t nk, int64_t q_pos0, int64_t k_pos0,
                      int causal)
{
    if (!causal) {
        return nk;
    }
    /* key s visible iff s <= q_pos0 + t - k_pos0 */
    int64_t last = q_pos0 + (int64_t)t - k_pos0 - (int64_t)s0;
    if (last < 0) {
        return 0;
    }
    return (uint64_t)last + 1 < nk ? (size_t)last + 1 : nk;
}

/* Keys [0, end) of the block are the only ones any query in [0, t1) sees. */
static size_t key_end(size_t t1, size_t Tk, int64_t q_pos0, int64_t k_pos0, int causal)
{
    return t1 == 0 ? 0 : visible(t1 - 1, 0, Tk, q_pos0, k_pos0, causal);
}

/* The first query (clamped to [0, Tq]) that sees key s. */
static size_t first_query(size_t s, size_t Tq, int64_t q_pos0, int64_t k_pos0, int causal)
{
    if (!causal) {
        return 0;
    }
    int64_t first = k_pos0 + (int64_t)s - q_pos0;
    if (first <= 0) {
        return 0;
    }
    return (uint64_t)first < Tq ? (size_t)first : Tq;
}

/* C[M,N] = alpha op(A) op(B) + beta C, row-major with leading dimensions;
 * M, N, K > 0 and within int (checked by plan_tiles). */
static void gemm(int ta, int tb, size_t M, size_t N, size_t K, ls_real alpha, const ls_real *A,
                 size_t lda, const ls_real *B, size_t ldb, ls_real beta, ls_real *C, size_t ldc)
{
    assert(M > 0 && N > 0 && K > 0 && M * N * K <= GEMM_MNK);
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,
         (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* The elementwise loops of the GEMM path (softmax and its gradient between
 * the GEMMs) are written once as always-inline bodies and compiled twice on
 * x86-64: for the baseline ISA and for AVX2 with FMA, picked at run time.
 * The bodies take fma as a constant: 1 only in the AVX2 clone. */
#if defined(__x86_64__) && defined(__GNUC__)
#define AVX2_CLONES 1
#define INLINE_BODY static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
static int cpu_has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define INLINE_BODY static inline
#endif

#if LS_REAL_IS_F64
typedef int64_t real_bits;
typedef uint64_t real_ubits;
#else
typedef int32_t real_bits;
typedef uint32_t real_ubits;
#endif

/* A real's bits as a signed integer with the same order (negative values
 * have their magnitude bits flipped); its own inverse.  Integer selects
 * vectorise where GCC keeps float ones as branches (-ftrapping-math). */
INLINE_BODY real_bits order_key(real_bits b)
{
    return b ^ (real_bits)((real_ubits) - (real_ubits)(b < 0) >> 1);
}

#define LANES 8 /* independent accumulators of the row reductions (as written below) */

/* max(m, p[0..n)).  NaNs order beyond the infinities by their sign bit, so
 * the result may be a NaN or ignore one; exp_shift passes NaN on either way. */
INLINE_BODY ls_real row_max(const ls_real *p, size_t n, ls_real m)
{
    real_bits km, acc[LANES];
    memcpy(&km, &m, sizeof km);
    km = order_key(km);
    for (size_t i = 0; i < LANES; i++) {
        acc[i] = km;
    }
    size_t j = 0;
    for (; j + LANES <= n; j += LANES) {
#pragma omp simd
        for (size_t i = 0; i < LANES; i++) {
            real_bits b;
            memcpy(&b, p + j + i, sizeof b);
            b = order_key(b);
            acc[i] = b > acc[i] ? b : acc[i];
        }
    }
    for (; j < n; j++) {
        real_bits b;
        memcpy(&b, p + j, sizeof b);
        b = order_key(b);
        acc[0] = b > acc[0] ? b : acc[0];
    }
#define MAX2(a, b) ((b) > (a) ? (b) : (a))
    km = MAX2(MAX2(MAX2(acc[0], acc[4]), MAX2(acc[2], acc[6])),
              MAX2(MAX2(acc[1], acc[5]), MAX2(acc[3], acc[7])));
#undef MAX2
    km = order_key(km);
    memcpy(&m, &km, sizeof m);
    return m;
}

#if LS_REAL_IS_F64
/* p[j] = exp(p[j] - m) for j < n; returns their sum. */
INLINE_BODY ls_real exp_shift(ls_real *p, size_t n, ls_real m, int fma)
{
    (void)fma;
    ls_real sum = 0;
    for (size_t j = 0; j < n; j++) {
        p[j] = R_EXP(p[j] - m);
        sum += p[j];
    }
    return sum;
}
#else
/* exp(x) within 1e-7 relative for x in [-87, 88] (clamped outside; NaN and
 * +-inf give NaN).  Range reduction x = n ln2 + r, |r| <= ln2/2, a degree-7
 * Taylor polynomial, 2^n built in the exponent bits.  libm's expf does not
 * vectorise; this does (integer selects, as in order_key). */
INLINE_BODY float exp_approx(float x, int fma)
{
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    int32_t sx = (int32_t)ux; /* positive floats: the bits grow with the value */
    sx = sx < 0x42B00000 ? sx : 0x42B00000; /* x <= 88 */
    uint32_t uc = (uint32_t)sx; /* negative floats: the bits grow with |x| */
    uc = uc < 0xC2AE0000u ? uc : 0xC2AE0000u; /* x >= -87 */
    float xc;
    memcpy(&xc, &uc, sizeof xc);
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float n = xc * 1.44269504f + shift;
    const float nn = n - shift;
    const float r = (xc - nn * 0.693145751953125f) - nn * 1.428606765330187e-06f;
#define MADD(a, b, c) (fma ? fmaf(a, b, c) : (a) * (b) + (c))
    float p = 1.0f / 5040;
    p = MADD(p, r, 1.0f / 720);
    p = MADD(p, r, 1.0f / 120);
    p = MADD(p, r, 1.0f / 24);
    p = MADD(p, r, 1.0f / 6);
    p = MADD(p, r, 0.5f);
    p = MADD(p, r, 1.0f);
    p = MADD(p, r, 1.0f);
#undef MADD
    int32_t e;
    memcpy(&e, &n, sizeof e); /* low bits: n + 2^22 */
    e = (e - 0x4B400000 + 127) * (1 << 23);
    float s;
    memcpy(&s, &e, sizeof s);
    return p * s + (x - x); /* x - x: 0, or NaN for NaN and inf */
}

/* p[j] = exp(p[j] - m) for j < n; returns their sum. */
INLINE_BODY ls_real exp_shift(ls_real *p, size_t n, ls_real m, int fma)
{
    ls_real acc[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES) {
#pragma omp simd
        for (size_t i = 0; i < LANES; i++) {
            p[j + i] = exp_approx(p[j + i] - m, fma);
            acc[i] += p[j + i];
        }
    }
    for (; j < n; j++) {
        p[j] = exp_approx(p[j] - m, fma);
        acc[0] += p[j];
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
#endif

/* --------------------------------------------------------- scalar path */

/* Forward of head h for queries [ta, tb), QT at a time. */
static void fwd_scalar(ls_real *o, ls_real *lse, const ls_real *q, const ls_real *k,
                       const ls_real *v, size_t Tk, size_t H, size_t Hkv, size_t hd,
                       int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau, size_t h,
                       size_t ta, size_t tb)
{
    const size_t kh = h / (H / Hkv);
    for (size_t t0 = ta; t0 < tb; t0 += QT) {
        const size_t t1 = t0 + QT < tb ? t0 + QT : tb;
        ls_real mx[QT], l[QT], z[KT];
        for (size_t t = t0; t < t1; t++) {
            ls_real *ot = o + (t * H + h) * hd;
            for (size_t e = 0; e < hd; e++) {
                ot[e] = 0;
            }
            mx[t - t0] = -INFINITY;
            l[t - t0] = 0;
        }
        const size_t send = key_end(t1, Tk, q_pos0, k_pos0, causal);
        for (size_t s0 = 0; s0 < send; s0 += KT) {
            const size_t nk = send - s0 < KT ? send - s0 : KT;
            for (size_t t = t0; t < t1; t++) {
                const size_t nv = visible(t, s0, nk, q_pos0, k_pos0, causal);
                if (nv == 0) {
                    continue;
                }
                const ls_real *qt_ = q + (t * H + h) * hd;
                ls_real *ot = o + (t * H + h) * hd;
                ls_real m = mx[t - t0];
                for (size_t jj = 0; jj < nv; jj++) {
                    z[jj] = tau * dot(qt_, k + ((s0 + jj) * Hkv + kh) * hd, hd);
                    if (z[jj] > m) {
                        m = z[jj];
                    }
                }
                /* m is finite here: the tile has a visible key */
                const ls_real scale = R_EXP(mx[t - t0] - m);
                ls_real sum = 0;
                for (size_t jj = 0; jj < nv; jj++) {
                    z[jj] = R_EXP(z[jj] - m);
                    sum += z[jj];
                }
                if (scale != (ls_real)1) {
                    for (size_t e = 0; e < hd; e++) {
                        ot[e] *= scale;
                    }
                }
                for (size_t jj = 0; jj < nv; jj++) {
                    axpy(ot, z[jj], v + ((s0 + jj) * Hkv + kh) * hd, hd);
                }
                l[t - t0] = l[t - t0] * scale + sum;
                mx[t - t0] = m;
            }
        }
        for (size_t t = t0; t < t1; t++) {
            ls_real *ot = o + (t * H + h) * hd;
            if (l[t - t0] > 0) {
                const ls_real inv = (ls_real)1 / l[t - t0];
                for (size_t e = 0; e < hd; e++) {
                    ot[e] *= inv;
                }
                lse[t * H + h] = mx[t - t0] + R_LOG(l[t - t0]);
            } else {
                lse[t * H + h] = -INFINITY;
            }
        }
    }
}

/* dq of head h for queries [ta, tb): dq_t += tau sum_s dz_ts k_s. */
static void dq_scalar(ls_real *dq, const ls_real *do_, const ls_real *q, const ls_real *k,
                      const ls_real *v, const ls_real *o, const ls_real *lse, size_t Tk,
                      size_t H, size_t Hkv, size_t hd, int64_t q_pos0, int64_t k_pos0,
                      int causal, ls_real tau, size_t h, size_t ta, size_t tb)
{
    const size_t kh = h / (H / Hkv);
    for (size_t t0 = ta; t0 < tb; t0 += QT) {
        const size_t t1 = t0 + QT < tb ? t0 + QT : tb;
        ls_real D[QT];
        for (size_t t = t0; t < t1; t++) {
            D[t - t0] = dot(do_ + (t * H + h) * hd, o + (t * H + h) * hd, hd);
        }
        const size_t send = key_end(t1, Tk, q_pos0, k_pos0, causal);
        for (size_t s0 = 0; s0 < send; s0 += KT) {
            const size_t nk = send - s0 < KT ? send - s0 : KT;
            for (size_t t = t0; t < t1; t++) {
                const ls_real L = lse[t * H + h];
                const size_t nv = visible(t, s0, nk, q_pos0, k_pos0, causal);
                if (nv == 0 || L == -INFINITY) {
                    continue;
                }
                const size_t r = (t * H + h) * hd;
                for (size_t jj = 0; jj < nv; jj++) {
                    const size_t kv = ((s0 + jj) * Hkv + kh) * hd;
                    ls_real p = R_EXP(tau * dot(q + r, k + kv, hd) - L);
                    ls_real dz = p * (dot(do_ + r, v + kv, hd) - D[t - t0]);
                    axpy(dq + r, tau * dz, k + kv, hd);
                }
            }
        }
    }
}

/* dk, dv of kv head kh for keys [sa, sb): dk_s += tau sum_t dz_ts q_t,
 * dv_s += sum_t p_ts do_t, over the query heads of the kv head. */
static void dkv_scalar(ls_real *dk, ls_real *dv, const ls_real *do_, const ls_real *q,
                       const ls_real *k, const ls_real *v, const ls_real *o, const ls_real *lse,
                       size_t Tq, size_t H, size_t Hkv, size_t hd, int64_t q_pos0,
                       int64_t k_pos0, int causal, ls_real tau, size_t kh, size_t sa, size_t sb)
{
    const size_t grp = H / Hkv;
    for (size_t s0 = sa; s0 < sb; s0 += KT) {
        const size_t nk = sb - s0 < KT ? sb - s0 : KT;
        const size_t tstart = first_query(s0, Tq, q_pos0, k_pos0, causal);
        for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
            for (size_t t = tstart; t < Tq; t++) {
                const ls_real L = lse[t * H + h];
                const size_t nv = visible(t, s0, nk, q_pos0, k_pos0, causal);
                if (nv == 0 || L == -INFINITY) {
                    continue;
                }
                const size_t r = (t * H + h) * hd;
                const ls_real D = dot(do_ + r, o + r, hd);
                for (size_t jj = 0; jj < nv; jj++) {
                    const size_t kv = ((s0 + jj) * Hkv + kh) * hd;
                    ls_real p = R_EXP(tau * dot(q + r, k + kv, hd) - L);
                    if (dv != NULL) {
                        axpy(dv + kv, p, do_ + r, hd);
                    }
                    if (dk != NULL) {
                        ls_real dz = p * (dot(do_ + r, v + kv, hd) - D);
                        axpy(dk + kv, tau * dz, q + r, hd);
                    }
                }
            }
        }
    }
}

/* ----------------------------------------------------------- GEMM path */

/* One call's shapes and its tiling. */
typedef struct {
    size_t Tq, Tk, H, Hkv, hd, grp;
    int64_t q_pos0, k_pos0;
    int causal;
    ls_real tau;
    size_t nq; /* query tokens per tile: R = nq grp rows */
    size_t nk; /* keys per tile */
    size_t nqt, nkt; /* tile counts */
} plan;

/* Fills the tiling; 0 where the scalar path should run instead (a few
 * queries or keys, or shapes whose smallest tiles break the GEMM bound). */
static int plan_tiles(plan *pl)
{
    const size_t grp = pl->grp, hd = pl->hd;
    if (pl->Tq == 0 || pl->Tk < GEMM_MIN_KEYS || hd == 0 ||
        pl->H * hd > INT_MAX || grp * hd > GEMM_MNK / GEMM_MIN_KEYS) {
        return 0;
    }
    size_t nk = GK;
    if (grp * hd * nk > GEMM_MNK) {
        nk = GEMM_MNK / (grp * hd);
    }
    size_t nq = GEMM_MNK / (grp * hd * nk);
    nq = nq < GQ ? nq : GQ;
    nq = nq < pl->Tq ? nq : pl->Tq;
    pl->nq = nq;
    pl->nk = nk;
    pl->nqt = (pl->Tq + nq - 1) / nq;
    pl->nkt = (pl->Tk + nk - 1) / nk;
    return 1;
}

/* Scratch (elements) of one thread. */
static size_t fwd_ws(const plan *pl)
{
    const size_t R = pl->nq * pl->grp;
    return 2 * R * pl->hd + R * pl->nk + 2 * R;
}

static size_t bwd_ws(const plan *pl)
{
    const size_t R = pl->nq * pl->grp;
    return 3 * R * pl->hd + 2 * R * pl->nk + 2 * R;
}

/* Query tile qt: tokens [t0, t0 + n), rows r = (t - t0) grp + g. */
static void tile_span(const plan *pl, size_t qt, size_t *t0, size_t *n)
{
    *t0 = qt * pl->nq;
    *n = pl->Tq - *t0 < pl->nq ? pl->Tq - *t0 : pl->nq;
}

/* X[r] = x row (t0 + r / grp, kh grp + r % grp): the kv head's query rows. */
static void gather(ls_real *X, const ls_real *x, const plan *pl, size_t kh, size_t t0, size_t n)
{
    const size_t w = pl->grp * pl->hd;
    for (size_t i = 0; i < n; i++) {
        memcpy(X + i * w, x + ((t0 + i) * pl->H + kh * pl->grp) * pl->hd, w * sizeof *X);
    }
}

/* A (query tile, key tile) pair: queries from t0, keys [s0, s0 + nkt); rows
 * [r0, R) of the query tile see some of the keys, all within the first nc. */
typedef struct {
    size_t t0, s0, nkt, r0, R, nc;
} pair_span;

/* Online-softmax step of a forward pair: S (row r at (r - r0) nc) holds
 * tau q.k; becomes P = exp(S - m) with the masked keys 0, where the running
 * max mx[r] becomes m; the running sum l[r] and the output accumulator O
 * (row r at r hd) are rescaled to m and l takes the new terms. */
INLINE_BODY void fwd_rows_body(const plan *pl, const pair_span *g, ls_real *S, ls_real *O,
                               ls_real *mx, ls_real *l, int fma)
{
    const size_t nc = g->nc, hd = pl->hd;
    for (size_t r = g->r0; r < g->R; r++) {
        ls_real *z = S + (r - g->r0) * nc, *orow = O + r * hd;
        const size_t nv =
            visible(g->t0 + r / pl->grp, g->s0, g->nkt, pl->q_pos0, pl->k_pos0, pl->causal);
        const ls_real m = row_max(z, nv, mx[r]);
        const ls_real sum = exp_shift(z, nv, m, fma);
        for (size_t j = nv; j < nc; j++) {
            z[j] = 0;
        }
        /* m is finite here (finite inputs): the row sees a key of the tile.
         * Rescale by exp(mx - m), unless that is 1 (no new max) or the row
         * has nothing yet (mx = -inf: l and the output row are 0). */
        if (m == mx[r] || mx[r] == -INFINITY) {
            l[r] += sum;
        } else {
            const ls_real scale = R_EXP(mx[r] - m);
#pragma omp simd
            for (size_t e = 0; e < hd; e++) {
                orow[e] *= scale;
            }
            l[r] = l[r] * scale + sum;
        }
        mx[r] = m;
    }
}

/* Gradient step of a backward pair: P (rows as in fwd_rows_body) holds
 * tau q.k and becomes P = exp(P - L) with the masked keys 0 (all of a row
 * with L = -inf: it sees no key, and contributes nothing); dS (NULL: skip)
 * holds dO.v and becomes P (dS - D). */
INLINE_BODY void bwd_rows_body(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                               const ls_real *L, const ls_real *D, int fma)
{
    const size_t nc = g->nc;
    for (size_t r = g->r0; r < g->R; r++) {
        ls_real *p = P + (r - g->r0) * nc;
        const size_t nv =
            L[r] == -INFINITY
                ? 0
                : visible(g->t0 + r / pl->grp, g->s0, g->nkt, pl->q_pos0, pl->k_pos0, pl->causal);
        exp_shift(p, nv, L[r], fma);
        for (size_t j = nv; j < nc; j++) {
            p[j] = 0;
        }
        if (dS != NULL) {
            ls_real *ds = dS + (r - g->r0) * nc;
            const ls_real Dr = D[r];
#pragma omp simd
            for (size_t j = 0; j < nc; j++) {
                ds[j] = p[j] * (ds[j] - Dr);
            }
        }
    }
}

static void fwd_rows_base(const plan *pl, const pair_span *g, ls_real *S, ls_real *O,
                          ls_real *mx, ls_real *l)
{
    fwd_rows_body(pl, g, S, O, mx, l, 0);
}

static void bwd_rows_base(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                          const ls_real *L, const ls_real *D)
{
    bwd_rows_body(pl, g, P, dS, L, D, 0);
}

#ifdef AVX2_CLONES
TARGET_AVX2 static void fwd_rows_avx2(const plan *pl, const pair_span *g, ls_real *S,
                                      ls_real *O, ls_real *mx, ls_real *l)
{
    fwd_rows_body(pl, g, S, O, mx, l, 1);
}

TARGET_AVX2 static void bwd_rows_avx2(const plan *pl, const pair_span *g, ls_real *P,
                                      ls_real *dS, const ls_real *L, const ls_real *D)
{
    bwd_rows_body(pl, g, P, dS, L, D, 1);
}
#endif

static void fwd_rows(const plan *pl, const pair_span *g, ls_real *S, ls_real *O, ls_real *mx,
                     ls_real *l)
{
#ifdef AVX2_CLONES
    if (cpu_has_avx2()) {
        fwd_rows_avx2(pl, g, S, O, mx, l);
        return;
    }
#endif
    fwd_rows_base(pl, g, S, O, mx, l);
}

static void bwd_rows(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                     const ls_real *L, const ls_real *D)
{
#ifdef AVX2_CLONES
    if (cpu_has_avx2()) {
        bwd_rows_avx2(pl, g, P, dS, L, D);
        return;
    }
#endif
    bwd_rows_base(pl, g, P, dS, L, D);
}

/* Forward of kv head kh, query tile qt. */
static void fwd_tile(ls_real *o, ls_real *lse, const ls_real *q, const ls_real *k,
                     const ls_real *v, const plan *pl, size_t kh, size_t qt, ls_real *ws)
{
    const size_t grp = pl->grp, hd = pl->hd, ldk = pl->Hkv * hd;
    size_t t0, n;
    tile_span(pl, qt, &t0, &n);
    const size_t R = n * grp;
    ls_real *Q = ws, *O = Q + R * hd, *S = O + R * hd, *mx = S + R * pl->nk, *l = mx + R;
    gather(Q, q, pl, kh, t0, n);
    memset(O, 0, R * hd * sizeof *O);
    for (size_t r = 0; r < R; r++) {
        mx[r] = -INFINITY;
        l[r] = 0;
    }
    const size_t send = key_end(t0 + n, pl->Tk, pl->q_pos0, pl->k_pos0, pl->causal);
    for (size_t s0 = 0; s0 < send; s0 += pl->nk) {
        const size_t nkt = send - s0 < pl->nk ? send - s0 : pl->nk;
        /* rows [r0, R) see keys of this tile, at most the first nc */
        const size_t tf = first_query(s0, pl->Tq, pl->q_pos0, pl->k_pos0, pl->causal);
        const size_t i0 = tf > t0 ? tf - t0 : 0, r0 = i0 * grp;
        const size_t nc = visible(t0 + n - 1, s0, nkt, pl->q_pos0, pl->k_pos0, pl->causal);
        const ls_real *Kt = k + (s0 * pl->Hkv + kh) * hd, *Vt = v + (s0 * pl->Hkv + kh) * hd;
        const pair_span g = {t0, s0, nkt, r0, R, nc};
        gemm(0, 1, R - r0, nc, hd, pl->tau, Q + r0 * hd, hd, Kt, ldk, 0, S, nc);
        fwd_rows(pl, &g, S, O, mx, l);
        gemm(0, 0, R - r0, hd, nc, 1, S, nc, Vt, ldk, 1, O + r0 * hd, hd);
    }
    for (size_t r = 0; r < R; r++) {
        const size_t t = t0 + r / grp, h = kh * grp + r % grp;
        ls_real *ot = o + (t * pl->H + h) * hd;
        const ls_real *orow = O + r * hd;
        if (l[r] != 0) { /* 0: no key (a NaN input passes on as NaN) */
            const ls_real inv = (ls_real)1 / l[r];
            for (size_t e = 0; e < hd; e++) {
                ot[e] = orow[e] * inv;
            }
            lse[t * pl->H + h] = mx[r] + R_LOG(l[r]);
        } else {
            for (size_t e = 0; e < hd; e++) {
                ot[e] = 0;
            }
            lse[t * pl->H + h] = -INFINITY;
        }
    }
}

/* A query tile's gathered inputs to the backward. */
typedef struct {
    size_t t0, n;
    ls_real *Q, *dO; /* [R, hd] */
    ls_real *D, *L;  /* [R]: rowsum(dO o), the global lse */
} qtile;

static void qtile_load(qtile *qt_, const ls_real *do_, const ls_real *q, const ls_real *o,
                       const ls_real *lse, const plan *pl, size_t kh, size_t qt)
{
    tile_span(pl, qt, &qt_->t0, &qt_->n);
    gather(qt_->Q, q, pl, kh, qt_->t0, qt_->n);
    gather(qt_->dO, do_, pl, kh, qt_->t0, qt_->n);
    for (size_t r = 0; r < qt_->n * pl->grp; r++) {
        const size_t row = (qt_->t0 + r / pl->grp) * pl->H + kh * pl->grp + r % pl->grp;
        qt_->D[r] = dot(qt_->dO + r * pl->hd, o + row * pl->hd, pl->hd);
        qt_->L[r] = lse[row];
    }
}

/* Backward of one (query tile, key tile) pair of kv head kh: recomputes
 * P = exp(tau Q K^T - L) on the visible rectangle, dS = P (dO V^T - D), and
 * adds tau dS K into dQ (the tile's rows; NULL: skip), tau dS^T Q into dk and
 * P^T dO into dv (global rows of the key tile; NULL: skip).  P, dS: scratch
 * of R nk each. */
static void bwd_pair(ls_real *dQ, ls_real *dk, ls_real *dv, const qtile *qt_, const ls_real *k,
                     const ls_real *v, const plan *pl, size_t kh, size_t s0, ls_real *P,
                     ls_real *dS)
{
    const size_t grp = pl->grp, hd = pl->hd, ldk = pl->Hkv * hd, t0 = qt_->t0;
    const size_t R = qt_->n * grp;
    const size_t nkt = pl->Tk - s0 < pl->nk ? pl->Tk - s0 : pl->nk;
    const size_t tf = first_query(s0, pl->Tq, pl->q_pos0, pl->k_pos0, pl->causal);
    if (tf >= t0 + qt_->n) {
        return; /* no query of the tile sees these keys */
    }
    const size_t i0 = tf > t0 ? tf - t0 : 0, r0 = i0 * grp, nr = R - r0;
    const size_t nc = visible(t0 + qt_->n - 1, s0, nkt, pl->q_pos0, pl->k_pos0, pl->causal);
    const ls_real *Kt = k + (s0 * pl->Hkv + kh) * hd, *Vt = v + (s0 * pl->Hkv + kh) * hd;
    const ls_real *Q = qt_->Q + r0 * hd, *dO = qt_->dO + r0 * hd;
    const int need_ds = dQ != NULL || dk != NULL;
    gemm(0, 1, nr, nc, hd, pl->tau, Q, hd, Kt, ldk, 0, P, nc);
    if (need_ds) {
        gemm(0, 1, nr, nc, hd, 1, dO, hd, Vt, ldk, 0, dS, nc);
    }
    const pair_span g = {t0, s0, nkt, r0, R, nc};
    bwd_rows(pl, &g, P, need_ds ? dS : NULL, qt_->L, qt_->D);
    if (dQ != NULL) {
        gemm(0, 0, nr, hd, nc, pl->tau, dS, nc, Kt, ldk, 1, dQ + r0 * hd, hd);
    }
    if (dk != NULL) {
        gemm(1, 0, nc, hd, nr, pl->tau, dS, nc, Q, hd, 1, dk + (s0 * pl->Hkv + kh) * hd, ldk);
    }
    if (dv != NULL) {
        gemm(1, 0, nc, hd, nr, 1, P, nc, dO, hd, 1, dv + (s0 * pl->Hkv + kh) * hd, ldk);
    }
}

/* Backward of kv head kh, query tile qt, against key tiles [ka, kb): dq of
 * the tile's rows (NULL: skip), dk and dv of those keys (NULL: skip). */
static void bwd_qtile(ls_real *dq, ls_real *dk, ls_real *dv, const ls_real *do_,
                      const ls_real *q, const ls_real *k, const ls_real *v, const ls_real *o,
                      const ls_real *lse, const plan *pl, size_t kh, size_t qt, size_t ka,
                      size_t kb, ls_real *ws)
{
    const size_t R = pl->nq * pl->grp, hd = pl->hd;
    qtile qt_;
    qt_.Q = ws;
    qt_.dO = qt_.Q + R * hd;
    ls_real *dQ = qt_.dO + R * hd, *P = dQ + R * hd, *dS = P + R * pl->nk;
    qt_.D = dS + R * pl->nk;
    qt_.L = qt_.D + R;
    qtile_load(&qt_, do_, q, o, lse, pl, kh, qt);
    const size_t n = qt_.n, rows = n * pl->grp;
    if (dq != NULL) {
        memset(dQ, 0, rows * hd * sizeof *dQ);
    }
    for (size_t kt = ka; kt < kb; kt++) {
        bwd_pair(dq != NULL ? dQ : NULL, dk, dv, &qt_, k, v, pl, kh, kt * pl->nk, P, dS);
    }
    if (dq != NULL) {
        for (size_t i = 0; i < n; i++) {
            ls_real *dst = dq + ((qt_.t0 + i) * pl->H + kh * pl->grp) * hd;
            const ls_real *src = dQ + i * pl->grp * hd;
#pragma omp simd
            for (size_t e = 0; e < pl->grp * hd; e++) {
                dst[e] += src[e];
            }
        }
    }
}

/* Key tiles [0, end) hold every key some query of tile qt sees. */
static size_t ktile_end(const plan *pl, size_t qt)
{
    size_t t0, n;
    tile_span(pl, qt, &t0, &n);
    const size_t send = key_end(t0 + n, pl->Tk, pl->q_pos0, pl->k_pos0, pl->causal);
    return (send + pl->nk - 1) / pl->nk;
}

/* ----------------------------------------------------------- entry points */

void LS_K(ls_attn_block_forward)(ls_real *o, ls_real *lse, const ls_real *q,
                                 const ls_real *k, const ls_real *v,
                                 size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                 int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau)
{
    assert(Hkv > 0 && H % Hkv == 0);
    const size_t grp = H / Hkv;
    const int par = Tq * Tk * H * hd >= PAR_MIN;
    plan pl = {.Tq = Tq, .Tk = Tk, .H = H, .Hkv = Hkv, .hd = hd, .grp = grp, .q_pos0 = q_pos0,
               .k_pos0 = k_pos0, .causal = causal, .tau = tau};
    if (!plan_tiles(&pl)) {
        const size_t nqt = (Tq + QT - 1) / QT;
#pragma omp parallel for schedule(dynamic, 1) if (par)
        for (size_t u = 0; u < nqt * H; u++) {
            /* head-major, heaviest (latest) query tile first: concurrent units
             * write rows far apart (no false sharing) and balance well */
            const size_t h = u / nqt, qt = nqt - 1 - u % nqt;
            const size_t t0 = qt * QT, t1 = t0 + QT < Tq ? t0 + QT : Tq;
            fwd_scalar(o, lse, q, k, v, Tk, H, Hkv, hd, q_pos0, k_pos0, causal, tau, h, t0, t1);
        }
        return;
    }
    const size_t nu = pl.nqt * Hkv;
#pragma omp parallel if (par)
    {
        ls_real *ws = malloc(fwd_ws(&pl) * sizeof *ws);
#pragma omp for schedule(dynamic, 1)
        for (size_t u = 0; u < nu; u++) {
            /* kv-head-major, heaviest (latest) query tile first */
            const size_t kh = u / pl.nqt, qt = pl.nqt - 1 - u % pl.nqt;
            if (ws != NULL) {
                fwd_tile(o, lse, q, k, v, &pl, kh, qt, ws);
            } else {
                size_t t0, n;
                tile_span(&pl, qt, &t0, &n);
                for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
                    fwd_scalar(o, lse, q, k, v, Tk, H, Hkv, hd, q_pos0, k_pos0, causal, tau, h,
                               t0, t0 + n);
                }
            }
        }
        free(ws);
    }
}

/* The scalar backward: dq over (query tile, head), then dk, dv over (key
 * tile, kv head), each unit owning the rows it writes. */
static void bwd_scalar(ls_real *dq, ls_real *dk, ls_real *dv, const ls_real *do_,
                       const ls_real *q, const ls_real *k, const ls_real *v, const ls_real *o,
                       const ls_real *lse, size_t Tq, size_t Tk, size_t H, size_t Hkv,
                       size_t hd, int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau,
                       int par)
{
    const size_t nqt = (Tq + QT - 1) / QT, nkt = (Tk + KT - 1) / KT;
    if (dq != NULL) {
#pragma omp parallel for schedule(dynamic, 1) if (par)
        for (size_t u = 0; u < nqt * H; u++) {
            const size_t h = u / nqt, qt = nqt - 1 - u % nqt;
            const size_t t0 = qt * QT, t1 = t0 + QT < Tq ? t0 + QT : Tq;
            dq_scalar(dq, do_, q, k, v, o, lse, Tk, H, Hkv, hd, q_pos0, k_pos0, causal, tau, h,
                      t0, t1);
        }
    }
    if (dk != NULL || dv != NULL) {
#pragma omp parallel for schedule(dynamic, 1) if (par)
        for (size_t u = 0; u < nkt * Hkv; u++) {
            /* kv-head-major, heaviest (earliest) key tile first */
            const size_t kh = u / nkt, s0 = (u % nkt) * KT;
            const size_t s1 = s0 + KT < Tk ? s0 + KT : Tk;
            dkv_scalar(dk, dv, do_, q, k, v, o, lse, Tq, H, Hkv, hd, q_pos0, k_pos0, causal, tau,
                       kh, s0, s1);
        }
    }
}

/* Threads a parallel region here would have. */
static size_t team_size(int par)
{
#ifdef _OPENMP
    return par && !omp_in_parallel() ? (size_t)omp_get_max_threads() : 1;
#else
    (void)par;
    return 1;
#endif
}

void LS_K(ls_attn_block_backward)(ls_real *dq, ls_real *dk, ls_real *dv,
                                  const ls_real *do_, const ls_real *q,
                                  const ls_real *k, const ls_real *v,
                                  const ls_real *o, const ls_real *lse,
                                  size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                  int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau)
{
    assert(Hkv > 0 && H % Hkv == 0);
    const size_t grp = H / Hkv;
    const int par = Tq * Tk * H * hd >= PAR_MIN;
    plan pl = {.Tq = Tq, .Tk = Tk, .H = H, .Hkv = Hkv, .hd = hd, .grp = grp, .q_pos0 = q_pos0,
               .k_pos0 = k_pos0, .causal = causal, .tau = tau};
    if ((dq == NULL && dk == NULL && dv == NULL) || !plan_tiles(&pl)) {
        bwd_scalar(dq, dk, dv, do_, q, k, v, o, lse, Tq, Tk, H, Hkv, hd, q_pos0, k_pos0, causal,
                   tau, par);
        return;
    }
    const int want_kv = dk != NULL || dv != NULL;
    /* Fused: one unit per kv head does every tile pair once.  Two passes
     * recompute P (about 1.5x the work) but offer nqt Hkv and nkt Hkv units;
     * fuse unless that leaves too many threads idle. */
    const size_t nth = team_size(par);
    const size_t rounds = (Hkv + nth - 1) / nth;
    const int fused = dq != NULL && want_kv && 2 * rounds * nth <= 3 * Hkv;
    const size_t nws = bwd_ws(&pl);
    if (fused) {
#pragma omp parallel if (par)
        {
            ls_real *ws = malloc(nws * sizeof *ws);
#pragma omp for schedule(dynamic, 1)
            for (size_t kh = 0; kh < Hkv; kh++) {
                if (ws == NULL) {
                    for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
                        dq_scalar(dq, do_, q, k, v, o, lse, Tk, H, Hkv, hd, q_pos0, k_pos0,
                                  causal, tau, h, 0, Tq);
                    }
                    dkv_scalar(dk, dv, do_, q, k, v, o, lse, Tq, H, Hkv, hd, q_pos0, k_pos0,
                               causal, tau, kh, 0, Tk);
                    continue;
                }
                for (size_t qt = 0; qt < pl.nqt; qt++) {
                    bwd_qtile(dq, dk, dv, do_, q, k, v, o, lse, &pl, kh, qt, 0, ktile_end(&pl, qt),
                              ws);
                }
            }
            free(ws);
        }
        return;
    }
    if (dq != NULL) {
        const size_t nu = pl.nqt * Hkv;
#pragma omp parallel if (par)
        {
            ls_real *ws = malloc(nws * sizeof *ws);
#pragma omp for schedule(dynamic, 1)
            for (size_t u = 0; u < nu; u++) {
                /* kv-head-major, heaviest (latest) query tile first */
                const size_t kh = u / pl.nqt, qt = pl.nqt - 1 - u % pl.nqt;
                if (ws != NULL) {
                    bwd_qtile(dq, NULL, NULL, do_, q, k, v, o, lse, &pl, kh, qt, 0,
                              ktile_end(&pl, qt), ws);
                    continue;
                }
                size_t t0, n;
                tile_span(&pl, qt, &t0, &n);
                for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
                    dq_scalar(dq, do_, q, k, v, o, lse, Tk, H, Hkv, hd, q_pos0, k_pos0, causal,
                              tau, h, t0, t0 + n);
                }
            }
            free(ws);
        }
    }
    if (want_kv) {
        const size_t nu = pl.nkt * Hkv;
#pragma omp parallel if (par)
        {
            ls_real *ws = malloc(nws * sizeof *ws);
#pragma omp for schedule(dynamic, 1)
            for (size_t u = 0; u < nu; u++) {
                /* kv-head-major, heaviest (earliest) key tile first */
                const size_t kh = u / pl.nkt, kt = u % pl.nkt, s0 = kt * pl.nk;
                if (ws == NULL) {
                    const size_t s1 = s0 + pl.nk < Tk ? s0 + pl.nk : Tk;
                    dkv_scalar(dk, dv, do_, q, k, v, o, lse, Tq, H, Hkv, hd, q_pos0, k_pos0,
                               causal, tau, kh, s0, s1);
                    continue;
                }
                /* query tiles from the first that sees the key tile, in
                 * order (the fused pass adds them in the same order) */
                const size_t tf = first_query(s0, Tq, q_pos0, k_pos0, causal);
                for (size_t qt = tf / pl.nq; qt < pl.nqt; qt++) {
                    bwd_qtile(NULL, dk, dv, do_, q, k, v, o, lse, &pl, kh, qt, kt, kt + 1, ws);
                }
            }
            free(ws);
        }
    }
}

void LS_K(ls_attn_merge_into)(ls_real *o, ls_real *lse, const ls_real *o_p,
                              const ls_real *lse_p, size_t n, size_t hd)
{
#pragma omp parallel for schedule(static) if (n * hd >= PAR_MIN)
    for (size_t r = 0; r < n; r++) {
        const ls_real lp = lse_p[r], la = lse[r];
        ls_real *orow = o + r * hd;
        const ls_real *prow = o_p + r * hd;
        if (lp == -INFINITY) {
            continue; /* an empty part contributes nothing */
        }
        if (la == -INFINITY) {
            for (size_t e = 0; e < hd; e++) {
                orow[e] = prow[e];
            }
            lse[r] = lp;
            continue;
        }
        const ls_real m = la > lp ? la : lp;
        const ls_real wa = R_EXP(la - m), wp = R_EXP(lp - m);
        const ls_real a = wa + wp;
#pragma omp simd
        for (size_t e = 0; e < hd; e++) {
            orow[e] = (wa * orow[e] + wp * prow[e]) / a;
        }
        lse[r] = m + R_LOG(a);
    }
}

void LS_K(ls_attn_merge_backward)(ls_real *do_p, ls_real *dlse_p, const ls_real *do_,
                                  const ls_real *dlse, const ls_real *o_p,
                                  const ls_real *lse_p, const ls_real *o,
                                  const ls_real *lse, size_t n, size_t hd)
{
    for (size_t r = 0; r < n; r++) {
        /* a part with no keys (or a merged row with none) has weight 0 */
        const ls_real w = lse_p[r] == -INFINITY ? 0 : R_EXP(lse_p[r] - lse[r]);
        const ls_real *dor = do_ + r * hd, *opr = o_p + r * hd, *orow = o + r * hd;
        ls_real acc = 0;
        for (size_t e = 0; e < hd; e++) {
            do_p[r * hd + e] = w * dor[e];
            acc += dor[e] * (opr[e] - orow[e]);
        }
        if (dlse_p != NULL) {
            dlse_p[r] = w == 0 ? 0 : w * (acc + (dlse != NULL ? dlse[r] : 0));
        }
    }
}
