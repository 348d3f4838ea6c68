/* attention.c - CPU softmax attention over one block of keys (forward with
 * log-normaliser, backward given the global output and log-normaliser) and
 * the partial-attention merge (kernels/attention.h, MODEL.md §0).
 *
 * Work is tiled: QT queries of one query head against KT keys at a time, so
 * a key tile stays in cache while the queries use it.  Causality by absolute
 * position makes the visible keys of every query a prefix of the block.
 * Forward: online softmax per (query, head), OpenMP over (query tile, head).
 * Backward: two race-free passes that recompute the probabilities, one over
 * (query tile, head) for dq and one over (key tile, kv head) for dk and dv;
 * each pass owns the rows it writes. */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>

#if LS_REAL_IS_F64
#define R_EXP exp
#define R_LOG log
#else
#define R_EXP expf
#define R_LOG logf
#endif

#define QT 16 /* queries per tile */
#define KT 64 /* keys per tile */
#define PAR_MIN 131072 /* Tq Tk H hd below which one thread does the work */

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

void LS_K(ls_attn_block_forward)(ls_real *o, ls_real *lse, const ls_real *q,
                                 const ls_real *k, const ls_real *v,
                                 size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                 int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau)
{
    assert(Hkv > 0 && H % Hkv == 0);
    const size_t grp = H / Hkv;
    const size_t nqt = (Tq + QT - 1) / QT;
#pragma omp parallel for schedule(dynamic, 1) if (Tq * Tk * H * hd >= PAR_MIN)
    for (size_t u = 0; u < nqt * H; u++) {
        /* head-major, heaviest (latest) query tile first: concurrent units
         * write rows far apart (no false sharing) and balance well */
        const size_t h = u / nqt, qt = nqt - 1 - u % nqt, kh = h / grp;
        const size_t t0 = qt * QT, t1 = t0 + QT < Tq ? t0 + QT : Tq;
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

/* dq over (query tile, head) units: dq_t += tau sum_s dz_ts k_s. */
static void attn_backward_dq(ls_real *dq, const ls_real *do_, const ls_real *q,
                             const ls_real *k, const ls_real *v, const ls_real *o,
                             const ls_real *lse, size_t Tq, size_t Tk, size_t H,
                             size_t Hkv, size_t hd, int64_t q_pos0, int64_t k_pos0,
                             int causal, ls_real tau)
{
    const size_t grp = H / Hkv;
    const size_t nqt = (Tq + QT - 1) / QT;
#pragma omp parallel for schedule(dynamic, 1) if (Tq * Tk * H * hd >= PAR_MIN)
    for (size_t u = 0; u < nqt * H; u++) {
        /* head-major, heaviest (latest) query tile first: concurrent units
         * write rows far apart (no false sharing) and balance well */
        const size_t h = u / nqt, qt = nqt - 1 - u % nqt, kh = h / grp;
        const size_t t0 = qt * QT, t1 = t0 + QT < Tq ? t0 + QT : Tq;
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

/* dk, dv over (key tile, kv head) units: dk_s += tau sum_t dz_ts q_t,
 * dv_s += sum_t p_ts do_t, over the query heads of the kv head. */
static void attn_backward_dkv(ls_real *dk, ls_real *dv, const ls_real *do_,
                              const ls_real *q, const ls_real *k, const ls_real *v,
                              const ls_real *o, const ls_real *lse, size_t Tq, size_t Tk,
                              size_t H, size_t Hkv, size_t hd, int64_t q_pos0,
                              int64_t k_pos0, int causal, ls_real tau)
{
    const size_t grp = H / Hkv;
    const size_t nkt = (Tk + KT - 1) / KT;
#pragma omp parallel for schedule(dynamic, 1) if (Tq * Tk * H * hd >= PAR_MIN)
    for (size_t u = 0; u < nkt * Hkv; u++) {
        /* kv-head-major, heaviest (earliest) key tile first */
        const size_t kh = u / nkt, kt = u % nkt;
        const size_t s0 = kt * KT, nk = Tk - s0 < KT ? Tk - s0 : KT;
        /* first query that sees key s0: q_pos0 + t >= k_pos0 + s0 */
        size_t tstart = 0;
        if (causal) {
            int64_t first = k_pos0 + (int64_t)s0 - q_pos0;
            if (first > (int64_t)Tq) {
                continue;
            }
            tstart = first > 0 ? (size_t)first : 0;
        }
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

void LS_K(ls_attn_block_backward)(ls_real *dq, ls_real *dk, ls_real *dv,
                                  const ls_real *do_, const ls_real *q,
                                  const ls_real *k, const ls_real *v,
                                  const ls_real *o, const ls_real *lse,
                                  size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                  int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau)
{
    assert(Hkv > 0 && H % Hkv == 0);
    if (dq != NULL) {
        attn_backward_dq(dq, do_, q, k, v, o, lse, Tq, Tk, H, Hkv, hd, q_pos0, k_pos0,
                         causal, tau);
    }
    if (dk != NULL || dv != NULL) {
        attn_backward_dkv(dk, dv, do_, q, k, v, o, lse, Tq, Tk, H, Hkv, hd, q_pos0, k_pos0,
                          causal, tau);
    }
}

void LS_K(ls_attn_merge_into)(ls_real *o, ls_real *lse, const ls_real *o_p,
                              const ls_real *lse_p, size_t n, size_t hd)
{
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
