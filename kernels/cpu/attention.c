/* attention.c - CPU softmax attention over a list of key blocks (forward
 * with log-normaliser, backward given the global output and log-normaliser;
 * kernels/attention.h, docs/model.md §0); one block is a list of one.  The
 * softmax rows of the GEMM path are in attention_rows.c, the
 * partial-attention merge in attention_merge.c; what they share is in
 * attention_internal.h.
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
 * A list of blocks (the pages of a paged KV cache, then the queries' own
 * keys) is one sequence of key tiles, block by block (a tile never spans two
 * blocks): the forward runs the online softmax of a query tile through the
 * tiles of every block before it normalises, and the backward's units own
 * query tiles (dq) or key tiles of one block (that block's dk, dv).
 * Forward: units (kv head, query tile).  Backward: either one fused pass over
 * kv heads (each owns its dq rows and dk/dv rows) or, where that would leave
 * threads idle, two passes in one parallel region, (kv head, query tile) for
 * dq and (kv head, key tile) for dk and dv.  Both compute every tile pair the
 * same way and add the pairs in the same order, so the result is the same
 * bits for any number of threads and either choice.  Scratch: one block per thread (the tiles,
 * freed before return) from the kernels' scratch allocator (kernels/scratch.h,
 * the tracker's "scratch" category in the trainer); where it fails, the
 * thread computes its units on the scalar path instead.
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

#include "kernels/cpu/attention_internal.h"
#include "kernels/isa.h"
#include "kernels/scratch.h"

#if LS_REAL_IS_F64
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

#define QT 16 /* scalar path: queries per tile */
#define KT 64 /* scalar path: keys per tile */

#define GK 64 /* GEMM path: keys per tile (at most) */
#define GQ 64 /* GEMM path: query tokens per tile (at most) */
/* OpenBLAS (interface/gemm.c) runs a GEMM with M N K <= 65536 x
 * GEMM_MULTITHREAD_THRESHOLD (4 by default) on the calling thread; larger
 * ones would start its own threads inside ours. */
#define GEMM_MNK 262144
#define FUSED_ROWS 1024  /* the fused AVX-512 forward: stacked query rows per tile, at most */
#define FUSED_ACC 32768  /* ... and their output accumulator's elements, at most */
#define FUSED_BWD_ROWS 256 /* the fused AVX-512 backward: stacked query rows per tile, at most */
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

/* The plan with block b as the block at hand. */
static plan on_block(const plan *pl, size_t b)
{
    plan pb = *pl;
    pb.k = pl->kv[b].k;
    pb.v = pl->kv[b].v;
    pb.Tk = pl->kv[b].n;
    pb.k_pos0 = pl->kv[b].pos0;
    return pb;
}

/* Key tiles of nk keys, block by block: the block holding tile u, *kt its
 * tile within the block.  The cursor c (zeroed before first use) remembers
 * the last answer, so increasing u cost O(blocks) in all. */
typedef struct {
    size_t b, first; /* block b's first tile */
} tile_cursor;

static size_t tile_at(const plan *pl, size_t nk, tile_cursor *c, size_t u, size_t *kt)
{
    if (u < c->first) {
        c->b = 0;
        c->first = 0;
    }
    for (;;) {
        assert(c->b < pl->nb);
        const size_t n = (pl->kv[c->b].n + nk - 1) / nk;
        if (u < c->first + n) {
            break;
        }
        c->first += n;
        c->b++;
    }
    *kt = u - c->first;
    return c->b;
}

/* Key tiles of nk keys in all blocks. */
static size_t tile_count(const plan *pl, size_t nk)
{
    size_t n = 0;
    for (size_t b = 0; b < pl->nb; b++) {
        n += (pl->kv[b].n + nk - 1) / nk;
    }
    return n;
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

/* --------------------------------------------------------- scalar path */

/* Forward of head h for queries [ta, tb), QT at a time, through every block. */
static void fwd_scalar(ls_real *o, ls_real *lse, const ls_real *q, const plan *pl, size_t h,
                       size_t ta, size_t tb)
{
    const size_t H = pl->H, Hkv = pl->Hkv, hd = pl->hd, kh = h / pl->grp;
    const ls_real tau = pl->tau;
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
        for (size_t b = 0; b < pl->nb; b++) {
            const plan pb = on_block(pl, b);
            const ls_real *k = pb.k, *v = pb.v;
            const size_t send = key_end(t1, pb.Tk, pb.q_pos0, pb.k_pos0, pb.causal);
            for (size_t s0 = 0; s0 < send; s0 += KT) {
                const size_t nk = send - s0 < KT ? send - s0 : KT;
                for (size_t t = t0; t < t1; t++) {
                    const size_t nv = visible(t, s0, nk, pb.q_pos0, pb.k_pos0, pb.causal);
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

/* dq of head h for queries [ta, tb): dq_t += tau sum_s dz_ts k_s over the
 * keys of every block. */
static void dq_scalar(ls_real *dq, const ls_real *do_, const ls_real *q, const ls_real *o,
                      const ls_real *lse, const plan *pl, size_t h, size_t ta, size_t tb)
{
    const size_t H = pl->H, Hkv = pl->Hkv, hd = pl->hd, kh = h / pl->grp;
    const ls_real tau = pl->tau;
    for (size_t t0 = ta; t0 < tb; t0 += QT) {
        const size_t t1 = t0 + QT < tb ? t0 + QT : tb;
        ls_real D[QT];
        for (size_t t = t0; t < t1; t++) {
            D[t - t0] = dot(do_ + (t * H + h) * hd, o + (t * H + h) * hd, hd);
        }
        for (size_t b = 0; b < pl->nb; b++) {
            const plan pb = on_block(pl, b);
            const ls_real *k = pb.k, *v = pb.v;
            const size_t send = key_end(t1, pb.Tk, pb.q_pos0, pb.k_pos0, pb.causal);
            for (size_t s0 = 0; s0 < send; s0 += KT) {
                const size_t nk = send - s0 < KT ? send - s0 : KT;
                for (size_t t = t0; t < t1; t++) {
                    const ls_real L = lse[t * H + h];
                    const size_t nv = visible(t, s0, nk, pb.q_pos0, pb.k_pos0, pb.causal);
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
}

/* dk, dv of kv head kh for keys [sa, sb) of the block at hand pb:
 * dk_s += tau sum_t dz_ts q_t, dv_s += sum_t p_ts do_t, over the query
 * heads of the kv head. */
static void dkv_scalar(ls_real *dk, ls_real *dv, const ls_real *do_, const ls_real *q,
                       const ls_real *o, const ls_real *lse, const plan *pb, size_t kh, size_t sa,
                       size_t sb)
{
    const size_t grp = pb->grp, H = pb->H, Hkv = pb->Hkv, hd = pb->hd, Tq = pb->Tq;
    const ls_real *k = pb->k, *v = pb->v;
    const ls_real tau = pb->tau;
    for (size_t s0 = sa; s0 < sb; s0 += KT) {
        const size_t nk = sb - s0 < KT ? sb - s0 : KT;
        const size_t tstart = first_query(s0, Tq, pb->q_pos0, pb->k_pos0, pb->causal);
        for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
            for (size_t t = tstart; t < Tq; t++) {
                const ls_real L = lse[t * H + h];
                const size_t nv = visible(t, s0, nk, pb->q_pos0, pb->k_pos0, pb->causal);
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
    pl->nkt = tile_count(pl, nk);
    return 1;
}

/* Scratch (elements) of one thread. */
static size_t fwd_ws(const plan *pl)
{
    const size_t R = pl->nq * pl->grp, fused = LS_K(ls_attn_avx512_scratch)(pl);
    return 2 * R * pl->hd + (R * pl->nk > fused ? R * pl->nk : fused) + 2 * R;
}

static size_t bwd_ws(const plan *pl)
{
    const size_t R = pl->nq * pl->grp;
    return 3 * R * pl->hd + 2 * R * pl->nk + 2 * R + LS_K(ls_attn_avx512_bwd_scratch)(pl);
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

/* Forward of kv head kh, query tile qt, through the key tiles of every
 * block (one online softmax), then normalised. */
static void fwd_tile(ls_real *o, ls_real *lse, const ls_real *q, const plan *pl, size_t kh,
                     size_t qt, ls_real *ws)
{
    const size_t grp = pl->grp, hd = pl->hd, ldk = pl->Hkv * hd;
    size_t t0, n;
    tile_span(pl, qt, &t0, &n);
    const size_t R = n * grp;
    const size_t fused = LS_K(ls_attn_avx512_scratch)(pl);
    const int avx512 = LS_K(ls_attn_avx512_fits)(pl);
    ls_real *Q = ws, *O = Q + R * hd, *S = O + R * hd;
    ls_real *mx = S + (R * pl->nk > fused ? R * pl->nk : fused), *l = mx + R;
    gather(Q, q, pl, kh, t0, n);
    memset(O, 0, R * hd * sizeof *O);
    for (size_t r = 0; r < R; r++) {
        mx[r] = -INFINITY;
        l[r] = 0;
    }
    for (size_t b = 0; b < pl->nb; b++) {
        const plan pb = on_block(pl, b);
        const size_t send = key_end(t0 + n, pb.Tk, pb.q_pos0, pb.k_pos0, pb.causal);
        for (size_t s0 = 0; s0 < send; s0 += pb.nk) {
            const size_t nkt = send - s0 < pb.nk ? send - s0 : pb.nk;
            /* rows [r0, R) see keys of this tile, at most the first nc */
            const size_t tf = first_query(s0, pb.Tq, pb.q_pos0, pb.k_pos0, pb.causal);
            const size_t i0 = tf > t0 ? tf - t0 : 0, r0 = i0 * grp;
            const size_t nc = visible(t0 + n - 1, s0, nkt, pb.q_pos0, pb.k_pos0, pb.causal);
            const ls_real *Kt = pb.k + (s0 * pb.Hkv + kh) * hd;
            const ls_real *Vt = pb.v + (s0 * pb.Hkv + kh) * hd;
            const pair_span g = {t0, s0, nkt, r0, R, nc};
            if (avx512) {
                LS_K(ls_attn_avx512_forward_pair)(&pb, &g, Q, Kt, Vt, O, mx, l, S);
                continue;
            }
            gemm(0, 1, R - r0, nc, hd, pb.tau, Q + r0 * hd, hd, Kt, ldk, 0, S, nc);
            LS_K(ls_attn_rows_forward)(&pb, &g, S, O, mx, l);
            gemm(0, 0, R - r0, hd, nc, 1, S, nc, Vt, ldk, 1, O + r0 * hd, hd);
        }
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
    ls_real *fused;  /* the fused AVX-512 backward's scratch */
} qtile;

/* Lays out a query tile's inputs and the pair scratch in ws (bwd_ws). */
static void qtile_load(qtile *qt_, ls_real **dQ, ls_real **P, ls_real **dS, ls_real *ws,
                       const ls_real *do_, const ls_real *q, const ls_real *o, const ls_real *lse,
                       const plan *pl, size_t kh, size_t qt)
{
    const size_t R = pl->nq * pl->grp, hd = pl->hd;
    qt_->Q = ws;
    qt_->dO = qt_->Q + R * hd;
    *dQ = qt_->dO + R * hd;
    *P = *dQ + R * hd;
    *dS = *P + R * pl->nk;
    qt_->D = *dS + R * pl->nk;
    qt_->L = qt_->D + R;
    qt_->fused = qt_->L + R;
    tile_span(pl, qt, &qt_->t0, &qt_->n);
    gather(qt_->Q, q, pl, kh, qt_->t0, qt_->n);
    gather(qt_->dO, do_, pl, kh, qt_->t0, qt_->n);
    for (size_t r = 0; r < qt_->n * pl->grp; r++) {
        const size_t row = (qt_->t0 + r / pl->grp) * pl->H + kh * pl->grp + r % pl->grp;
        qt_->D[r] = dot(qt_->dO + r * pl->hd, o + row * pl->hd, pl->hd);
        qt_->L[r] = lse[row];
    }
}

/* Backward of one (query tile, key tile) pair of kv head kh, the key tile
 * from s0 in the block at hand pb: recomputes P = exp(tau Q K^T - L) on the
 * visible rectangle, dS = P (dO V^T - D), and adds tau dS K into dQ (the
 * tile's rows; NULL: skip), tau dS^T Q into dk and P^T dO into dv (the
 * block's rows of the key tile; NULL: skip).  P, dS: scratch of R nk each. */
static void bwd_pair(ls_real *dQ, ls_real *dk, ls_real *dv, const qtile *qt_, const plan *pb,
                     size_t kh, size_t s0, ls_real *P, ls_real *dS)
{
    const size_t grp = pb->grp, hd = pb->hd, ldk = pb->Hkv * hd, t0 = qt_->t0;
    const size_t R = qt_->n * grp;
    const size_t nkt = pb->Tk - s0 < pb->nk ? pb->Tk - s0 : pb->nk;
    const size_t tf = first_query(s0, pb->Tq, pb->q_pos0, pb->k_pos0, pb->causal);
    if (tf >= t0 + qt_->n) {
        return; /* no query of the tile sees these keys */
    }
    const size_t i0 = tf > t0 ? tf - t0 : 0, r0 = i0 * grp, nr = R - r0;
    const size_t nc = visible(t0 + qt_->n - 1, s0, nkt, pb->q_pos0, pb->k_pos0, pb->causal);
    const ls_real *Kt = pb->k + (s0 * pb->Hkv + kh) * hd, *Vt = pb->v + (s0 * pb->Hkv + kh) * hd;
    if (LS_K(ls_attn_avx512_fits)(pb)) {
        const pair_span g = {t0, s0, nkt, r0, R, nc};
        LS_K(ls_attn_avx512_backward_pair)(pb, &g, qt_->Q, qt_->dO, Kt, Vt, qt_->L, qt_->D, dQ,
                                           dk != NULL ? dk + (s0 * pb->Hkv + kh) * hd : NULL,
                                           dv != NULL ? dv + (s0 * pb->Hkv + kh) * hd : NULL,
                                           qt_->fused);
        return;
    }
    const ls_real *Q = qt_->Q + r0 * hd, *dO = qt_->dO + r0 * hd;
    const int need_ds = dQ != NULL || dk != NULL;
    gemm(0, 1, nr, nc, hd, pb->tau, Q, hd, Kt, ldk, 0, P, nc);
    if (need_ds) {
        gemm(0, 1, nr, nc, hd, 1, dO, hd, Vt, ldk, 0, dS, nc);
    }
    const pair_span g = {t0, s0, nkt, r0, R, nc};
    LS_K(ls_attn_rows_backward)(pb, &g, P, need_ds ? dS : NULL, qt_->L, qt_->D);
    if (dQ != NULL) {
        gemm(0, 0, nr, hd, nc, pb->tau, dS, nc, Kt, ldk, 1, dQ + r0 * hd, hd);
    }
    if (dk != NULL) {
        gemm(1, 0, nc, hd, nr, pb->tau, dS, nc, Q, hd, 1, dk + (s0 * pb->Hkv + kh) * hd, ldk);
    }
    if (dv != NULL) {
        gemm(1, 0, nc, hd, nr, 1, P, nc, dO, hd, 1, dv + (s0 * pb->Hkv + kh) * hd, ldk);
    }
}

/* Key tiles [0, end) of the block at hand hold every key some query of tile
 * qt sees. */
static size_t ktile_end(const plan *pb, size_t qt)
{
    size_t t0, n;
    tile_span(pb, qt, &t0, &n);
    const size_t send = key_end(t0 + n, pb->Tk, pb->q_pos0, pb->k_pos0, pb->causal);
    return (send + pb->nk - 1) / pb->nk;
}

/* The gradients wanted of block b (NULL: none). */
static ls_real *grad_k(const ls_attn_kv_grad *g, size_t b) { return g != NULL ? g[b].dk : NULL; }
static ls_real *grad_v(const ls_attn_kv_grad *g, size_t b) { return g != NULL ? g[b].dv : NULL; }

/* Backward of kv head kh, query tile qt, against the key tiles of every
 * block in order: dq of the tile's rows (NULL: skip) and, where g is not
 * NULL, each block's dk and dv of those keys. */
static void bwd_qtile(ls_real *dq, const ls_attn_kv_grad *g, const ls_real *do_,
                      const ls_real *q, const ls_real *o, const ls_real *lse, const plan *pl,
                      size_t kh, size_t qt, ls_real *ws)
{
    const size_t hd = pl->hd;
    qtile qt_;
    ls_real *dQ, *P, *dS;
    qtile_load(&qt_, &dQ, &P, &dS, ws, do_, q, o, lse, pl, kh, qt);
    const size_t n = qt_.n, rows = n * pl->grp;
    if (dq != NULL) {
        memset(dQ, 0, rows * hd * sizeof *dQ);
    }
    for (size_t b = 0; b < pl->nb; b++) {
        ls_real *dk = grad_k(g, b), *dv = grad_v(g, b);
        if (dq == NULL && dk == NULL && dv == NULL) {
            continue;
        }
        const plan pb = on_block(pl, b);
        const size_t kend = ktile_end(&pb, qt);
        for (size_t kt = 0; kt < kend; kt++) {
            bwd_pair(dq != NULL ? dQ : NULL, dk, dv, &qt_, &pb, kh, kt * pb.nk, P, dS);
        }
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

/* dk, dv (either may be NULL) of key tile kt of the block at hand pb, kv
 * head kh, from query tile qt. */
static void bwd_ktile(ls_real *dk, ls_real *dv, const ls_real *do_, const ls_real *q,
                      const ls_real *o, const ls_real *lse, const plan *pb, size_t kh, size_t qt,
                      size_t kt, ls_real *ws)
{
    qtile qt_;
    ls_real *dQ, *P, *dS;
    qtile_load(&qt_, &dQ, &P, &dS, ws, do_, q, o, lse, pb, kh, qt);
    bwd_pair(NULL, dk, dv, &qt_, pb, kh, kt * pb->nk, P, dS);
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

/* The fused AVX-512 forward's query tiles (its key tiles are the GEMM
 * path's): it has no GEMM bound, and taller tiles amortise each key tile's
 * transposition over more rows.  Up to FUSED_ROWS rows with the output
 * accumulator within FUSED_ACC elements (L2); with nth > 0 (the forward)
 * at least 4 units per thread.  A forward row's result does not depend on
 * the tile it is in (its keys, in the same tiles and order), so neither does
 * the output; the backward passes nth 0, since dk and dv add the tiles'
 * partial sums in turn and its tiles must be fixed by the shape alone. */
static void fused_tiles(plan *pl, size_t max_rows, size_t nth)
{
    size_t rows = FUSED_ACC / pl->hd < max_rows ? FUSED_ACC / pl->hd : max_rows;
    size_t nq = rows / pl->grp > 0 ? rows / pl->grp : 1;
    if (nth > 0) {
        const size_t units = 4 * nth, fair = (pl->Tq * pl->Hkv + units - 1) / units;
        nq = nq < fair ? nq : fair;
        nq = nq > 16 ? nq : 16;
    }
    pl->nq = nq < pl->Tq ? nq : pl->Tq;
    pl->nqt = (pl->Tq + pl->nq - 1) / pl->nq;
}

/* ----------------------------------------------------------- drivers */

/* The plan of a call (the tiling not yet made). */
static plan make_plan(const ls_attn_kv_block *kv, size_t nb, size_t Tq, size_t H, size_t Hkv,
                      size_t hd, int64_t q_pos0, int causal, ls_real tau)
{
    assert(Hkv > 0 && H % Hkv == 0);
    size_t Tk = 0;
    for (size_t b = 0; b < nb; b++) {
        Tk += kv[b].n;
    }
    plan pl = {.kv = kv, .nb = nb, .Tq = Tq, .Tk = Tk, .H = H, .Hkv = Hkv, .hd = hd,
               .grp = H / Hkv, .q_pos0 = q_pos0, .causal = causal, .tau = tau,
               .isa = (int)ls_kernel_isa()};
    return pl;
}

void LS_K(ls_attn_paged_forward)(ls_real *o, ls_real *lse, const ls_real *q,
                                 const ls_attn_kv_block *kv, size_t nb,
                                 size_t Tq, size_t H, size_t Hkv, size_t hd,
                                 int64_t q_pos0, int causal, ls_real tau)
{
    plan pl = make_plan(kv, nb, Tq, H, Hkv, hd, q_pos0, causal, tau);
    const size_t grp = pl.grp;
    const int par = Tq * pl.Tk * H * hd >= PAR_MIN;
    if (!plan_tiles(&pl)) {
        const size_t nqt = (Tq + QT - 1) / QT;
#pragma omp parallel for schedule(dynamic, 1) if (par)
        for (size_t u = 0; u < nqt * H; u++) {
            /* head-major, heaviest (latest) query tile first: concurrent units
             * write rows far apart (no false sharing) and balance well */
            const size_t h = u / nqt, qt = nqt - 1 - u % nqt;
            const size_t t0 = qt * QT, t1 = t0 + QT < Tq ? t0 + QT : Tq;
            fwd_scalar(o, lse, q, &pl, h, t0, t1);
        }
        return;
    }
    if (LS_K(ls_attn_avx512_fits)(&pl)) {
        fused_tiles(&pl, FUSED_ROWS, team_size(par));
    }
    const size_t nu = pl.nqt * Hkv;
    const ls_kernel_allocator *al = ls_kernel_scratch_get();
#pragma omp parallel if (par)
    {
        ls_real *ws = al->alloc(fwd_ws(&pl) * sizeof *ws);
#pragma omp for schedule(dynamic, 1)
        for (size_t u = 0; u < nu; u++) {
            /* kv-head-major, heaviest (latest) query tile first */
            const size_t kh = u / pl.nqt, qt = pl.nqt - 1 - u % pl.nqt;
            if (ws != NULL) {
                fwd_tile(o, lse, q, &pl, kh, qt, ws);
            } else {
                size_t t0, n;
                tile_span(&pl, qt, &t0, &n);
                for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
                    fwd_scalar(o, lse, q, &pl, h, t0, t0 + n);
                }
            }
        }
        al->release(ws);
    }
}

/* The scalar backward: dq over (query tile, head), then dk, dv over (key
 * tile, kv head), each unit owning the rows it writes; one region. */
static void bwd_scalar(ls_real *dq, const ls_attn_kv_grad *g, int want_kv, const ls_real *do_,
                       const ls_real *q, const ls_real *o, const ls_real *lse, const plan *pl,
                       int par)
{
    const size_t Tq = pl->Tq, H = pl->H, Hkv = pl->Hkv;
    const size_t nqt = (Tq + QT - 1) / QT, nkt = tile_count(pl, KT);
    const size_t nuq = dq != NULL ? nqt * H : 0, nuk = want_kv ? nkt * Hkv : 0;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t u = 0; u < nuq; u++) {
            const size_t h = u / nqt, qt = nqt - 1 - u % nqt;
            const size_t t0 = qt * QT, t1 = t0 + QT < Tq ? t0 + QT : Tq;
            dq_scalar(dq, do_, q, o, lse, pl, h, t0, t1);
        }
        tile_cursor cur = {0, 0};
#pragma omp for schedule(dynamic, 1)
        for (size_t u = 0; u < nuk; u++) {
            /* kv-head-major, heaviest (earliest) key tile first */
            size_t kt;
            const size_t kh = u / nkt, b = tile_at(pl, KT, &cur, u % nkt, &kt);
            if (grad_k(g, b) == NULL && grad_v(g, b) == NULL) {
                continue;
            }
            const plan pb = on_block(pl, b);
            const size_t s0 = kt * KT, s1 = s0 + KT < pb.Tk ? s0 + KT : pb.Tk;
            dkv_scalar(g[b].dk, g[b].dv, do_, q, o, lse, &pb, kh, s0, s1);
        }
    }
}

void LS_K(ls_attn_paged_backward)(ls_real *dq, const ls_attn_kv_grad *dkv,
                                  const ls_real *do_, const ls_real *q,
                                  const ls_attn_kv_block *kv, size_t nb,
                                  const ls_real *o, const ls_real *lse,
                                  size_t Tq, size_t H, size_t Hkv, size_t hd,
                                  int64_t q_pos0, int causal, ls_real tau)
{
    plan pl = make_plan(kv, nb, Tq, H, Hkv, hd, q_pos0, causal, tau);
    const size_t grp = pl.grp;
    const int par = Tq * pl.Tk * H * hd >= PAR_MIN;
    int want_kv = 0;
    for (size_t b = 0; b < nb && !want_kv; b++) {
        want_kv = grad_k(dkv, b) != NULL || grad_v(dkv, b) != NULL;
    }
    if (dq == NULL && !want_kv) {
        return;
    }
    if (!plan_tiles(&pl)) {
        bwd_scalar(dq, dkv, want_kv, do_, q, o, lse, &pl, par);
        return;
    }
    if (LS_K(ls_attn_avx512_fits)(&pl)) {
        fused_tiles(&pl, FUSED_BWD_ROWS, 0);
    }
    /* Fused: one unit per kv head does every tile pair once.  Two passes
     * recompute P (about 1.5x the work) but offer nqt Hkv and nkt Hkv units;
     * fuse unless that leaves too many threads idle. */
    const size_t nth = team_size(par);
    const size_t rounds = (Hkv + nth - 1) / nth;
    const int fused = dq != NULL && want_kv && 2 * rounds * nth <= 3 * Hkv;
    const size_t nws = bwd_ws(&pl);
    const ls_kernel_allocator *al = ls_kernel_scratch_get();
    if (fused) {
#pragma omp parallel if (par)
        {
            ls_real *ws = al->alloc(nws * sizeof *ws);
#pragma omp for schedule(dynamic, 1)
            for (size_t kh = 0; kh < Hkv; kh++) {
                if (ws == NULL) {
                    for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
                        dq_scalar(dq, do_, q, o, lse, &pl, h, 0, Tq);
                    }
                    for (size_t b = 0; b < nb; b++) {
                        const plan pb = on_block(&pl, b);
                        dkv_scalar(grad_k(dkv, b), grad_v(dkv, b), do_, q, o, lse, &pb, kh, 0,
                                   pb.Tk);
                    }
                    continue;
                }
                for (size_t qt = 0; qt < pl.nqt; qt++) {
                    bwd_qtile(dq, dkv, do_, q, o, lse, &pl, kh, qt, ws);
                }
            }
            al->release(ws);
        }
        return;
    }
    /* two passes in one region: dq over (kv head, query tile), then, as
     * threads come free (nowait: the outputs are disjoint), dk and dv over
     * (kv head, key tile) */
    const size_t nuq = dq != NULL ? pl.nqt * Hkv : 0, nuk = want_kv ? pl.nkt * Hkv : 0;
#pragma omp parallel if (par)
    {
        ls_real *ws = al->alloc(nws * sizeof *ws);
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t u = 0; u < nuq; u++) {
            /* kv-head-major, heaviest (latest) query tile first */
            const size_t kh = u / pl.nqt, qt = pl.nqt - 1 - u % pl.nqt;
            if (ws != NULL) {
                bwd_qtile(dq, NULL, do_, q, o, lse, &pl, kh, qt, ws);
                continue;
            }
            size_t t0, n;
            tile_span(&pl, qt, &t0, &n);
            for (size_t h = kh * grp; h < (kh + 1) * grp; h++) {
                dq_scalar(dq, do_, q, o, lse, &pl, h, t0, t0 + n);
            }
        }
        tile_cursor cur = {0, 0};
#pragma omp for schedule(dynamic, 1)
        for (size_t u = 0; u < nuk; u++) {
            /* kv-head-major, heaviest (earliest) key tile first */
            size_t kt;
            const size_t kh = u / pl.nkt, b = tile_at(&pl, pl.nk, &cur, u % pl.nkt, &kt);
            ls_real *dk = grad_k(dkv, b), *dv = grad_v(dkv, b);
            if (dk == NULL && dv == NULL) {
                continue;
            }
            const plan pb = on_block(&pl, b);
            const size_t s0 = kt * pl.nk;
            if (ws == NULL) {
                const size_t s1 = s0 + pl.nk < pb.Tk ? s0 + pl.nk : pb.Tk;
                dkv_scalar(dk, dv, do_, q, o, lse, &pb, kh, s0, s1);
                continue;
            }
            /* query tiles from the first that sees the key tile, in order
             * (the fused pass adds them in the same order) */
            const size_t tf = first_query(s0, Tq, q_pos0, pb.k_pos0, causal);
            for (size_t qt = tf / pl.nq; qt < pl.nqt; qt++) {
                bwd_ktile(dk, dv, do_, q, o, lse, &pb, kh, qt, kt, ws);
            }
        }
        al->release(ws);
    }
}

/* ----------------------------------------------------------- one block */

void LS_K(ls_attn_block_forward)(ls_real *o, ls_real *lse, const ls_real *q,
                                 const ls_real *k, const ls_real *v,
                                 size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                 int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau)
{
    const ls_attn_kv_block kv = {k, v, Tk, k_pos0};
    LS_K(ls_attn_paged_forward)(o, lse, q, &kv, 1, Tq, H, Hkv, hd, q_pos0, causal, tau);
}

void LS_K(ls_attn_block_backward)(ls_real *dq, ls_real *dk, ls_real *dv,
                                  const ls_real *do_, const ls_real *q,
                                  const ls_real *k, const ls_real *v,
                                  const ls_real *o, const ls_real *lse,
                                  size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                  int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau)
{
    const ls_attn_kv_block kv = {k, v, Tk, k_pos0};
    const ls_attn_kv_grad g = {dk, dv};
    LS_K(ls_attn_paged_backward)(dq, &g, do_, q, &kv, 1, o, lse, Tq, H, Hkv, hd, q_pos0, causal,
                                 tau);
}
