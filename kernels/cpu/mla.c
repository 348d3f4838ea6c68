/* mla.c - multi-head latent attention over one key block (docs/model.md §2.1):
 * the naive form (per-head keys/values materialised from c_kv) and the
 * absorbed form (queries taken into the latent space), forward and backward,
 * over a causal prefix or an explicit DSA candidate list.  See mla.h. */
#include "kernels/mla.h"

#include "kernels/linear.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/scratch.h"

/* A SIMD reduction (the order of its lanes is the compiler's, fixed per build: the same bits for any
 * thread count, other bits than a serial sum) */
static ls_real dot(const ls_real *a, const ls_real *b, size_t n)
{
    ls_real s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a * x */
static void axpy(ls_real *y, ls_real a, const ls_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* Keys of the block visible to a query at absolute position q_pos. */
static size_t n_visible(int64_t q_pos, int64_t k_pos0, size_t Tk)
{
    if (q_pos < k_pos0) return 0;
    uint64_t n = (uint64_t)(q_pos - k_pos0) + 1;
    return n < (uint64_t)Tk ? (size_t)n : Tk;
}

/* The candidate slots of query t: the sel row, or the causal prefix. */
typedef struct {
    const int64_t *row; /* NULL: causal prefix 0..n-1 */
    size_t n;
} cands;

static cands cands_of(const int64_t *sel, size_t k_sel, size_t t, size_t Tk,
                      int64_t q_pos0, int64_t k_pos0)
{
    cands c;
    if (sel) {
        c.row = sel + t * k_sel;
        c.n = k_sel;
    } else {
        c.row = NULL;
        c.n = n_visible(q_pos0 + (int64_t)t, k_pos0, Tk);
    }
    return c;
}

/* Key index of slot j, or -1 for an empty slot. */
static int64_t cand_key(const cands *c, size_t j, size_t Tk, int64_t q_pos, int64_t k_pos0)
{
    if (!c->row) return (int64_t)j;
    int64_t s = c->row[j];
    assert(s >= -1 && s < (int64_t)Tk);
    assert(s < 0 || k_pos0 + s <= q_pos);
    (void)Tk;
    (void)q_pos;
    (void)k_pos0;
    return s;
}

/* z [n] scores (-INF on empty slots) -> probabilities in place; returns the
 * log-normaliser (-INF when no slot is filled). */
static ls_real softmax_inplace(ls_real *z, size_t n)
{
    ls_real m = -INFINITY;
    for (size_t j = 0; j < n; j++)
        if (z[j] > m) m = z[j];
    if (m == -INFINITY) {
        for (size_t j = 0; j < n; j++) z[j] = 0;
        return -INFINITY;
    }
    ls_real a = 0;
    for (size_t j = 0; j < n; j++) {
        z[j] = (z[j] == -INFINITY) ? 0 : exp(z[j] - m);
        a += z[j];
    }
    for (size_t j = 0; j < n; j++) z[j] /= a;
    return m + log(a);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Row of kv_b holding W_UK_h row i (i < d_n) or W_UV_h row i - d_n. */
static const ls_real *kvb_row(const ls_real *kv_b, const ls_mla_dims *d, size_t h, size_t i)
{
    return kv_b + (h * (d->d_n + d->d_v) + i) * d->r_kv;
}

/* Naive form: kv [Tk, H, d_n + d_v], each key's heads' W_UK c_kv then W_UV c_kv (kv_b's rows in their
 * order): one GEMM, c_kv kv_b^T (kernels/linear.h: the same bits for any thread count). */
static void materialise(ls_real *kv, const ls_real *c_kv, const ls_real *kv_b, size_t Tk, const ls_mla_dims *d)
{
    LS_K(ls_linear_forward)(kv, c_kv, kv_b, Tk, d->r_kv, d->H * (d->d_n + d->d_v), 0);
}

/* qhat [r_kv] = W_UK_h^T q_nope,h */
static void absorb_query(ls_real *qhat, const ls_real *qn, const ls_real *kv_b,
                         const ls_mla_dims *d, size_t h)
{
    memset(qhat, 0, d->r_kv * sizeof *qhat);
    for (size_t i = 0; i < d->d_n; i++) axpy(qhat, qn[i], kvb_row(kv_b, d, h, i), d->r_kv);
}

size_t LS_K(ls_mla_forward_workspace)(ls_mla_form form, size_t Tk, size_t k_sel,
                                      const ls_mla_dims *d)
{
    size_t z = max_sz(Tk, k_sel);
    if (form == LS_MLA_NAIVE) return Tk * d->H * (d->d_n + d->d_v) + z;
    return 2 * d->r_kv + z;
}

size_t LS_K(ls_mla_backward_workspace)(ls_mla_form form, size_t Tk, size_t k_sel,
                                       const ls_mla_dims *d)
{
    (void)k_sel;
    if (form == LS_MLA_NAIVE) return 2 * Tk * d->H * (d->d_n + d->d_v);
    return 4 * d->r_kv;
}

/* Query t of ls_mla_forward: its heads' scores over its candidates (z), softmax, output (naive: from
 * the materialised rows kv; absorbed: qhat and obar, the latent query and output). */
static void forward_query(ls_real *o, ls_real *lse, const ls_real *q_nope, const ls_real *q_pe, const ls_real *c_kv,
                          const ls_real *k_pe, const ls_real *kv_b, const int64_t *sel, size_t k_sel, size_t Tk,
                          const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0, ls_real tau, ls_mla_form form,
                          const ls_real *kv, ls_real *z, ls_real *qhat, ls_real *obar, size_t t)
{
    const size_t H = d->H, dn = d->d_n, dr = d->d_r, dv = d->d_v, r = d->r_kv, kw = dn + dv;
    const int64_t q_pos = q_pos0 + (int64_t)t;
    cands c = cands_of(sel, k_sel, t, Tk, q_pos0, k_pos0);
    for (size_t h = 0; h < H; h++) {
        const size_t th = t * H + h;
        const ls_real *qn = q_nope + th * dn, *qp = q_pe + th * dr;
        ls_real *ot = o + th * dv;
        if (form == LS_MLA_ABSORBED) absorb_query(qhat, qn, kv_b, d, h);
        for (size_t j = 0; j < c.n; j++) {
            int64_t s = cand_key(&c, j, Tk, q_pos, k_pos0);
            if (s < 0) {
                z[j] = -INFINITY;
                continue;
            }
            const size_t su = (size_t)s;
            ls_real qk = (form == LS_MLA_NAIVE) ? dot(qn, kv + (su * H + h) * kw, dn)
                                                : dot(qhat, c_kv + su * r, r);
            z[j] = tau * (qk + dot(qp, k_pe + su * dr, dr));
        }
        lse[th] = softmax_inplace(z, c.n);
        if (form == LS_MLA_NAIVE) {
            memset(ot, 0, dv * sizeof *ot);
            for (size_t j = 0; j < c.n; j++) {
                int64_t s = cand_key(&c, j, Tk, q_pos, k_pos0);
                if (s >= 0) axpy(ot, z[j], kv + ((size_t)s * H + h) * kw + dn, dv);
            }
        } else {
            memset(obar, 0, r * sizeof *obar);
            for (size_t j = 0; j < c.n; j++) {
                int64_t s = cand_key(&c, j, Tk, q_pos, k_pos0);
                if (s >= 0) axpy(obar, z[j], c_kv + (size_t)s * r, r);
            }
            for (size_t i = 0; i < dv; i++) ot[i] = dot(kvb_row(kv_b, d, h, dn + i), obar, r);
        }
    }
}

void LS_K(ls_mla_forward)(ls_real *o, ls_real *lse,
                          const ls_real *q_nope, const ls_real *q_pe,
                          const ls_real *c_kv, const ls_real *k_pe,
                          const ls_real *kv_b, const int64_t *sel, size_t k_sel,
                          size_t Tq, size_t Tk, const ls_mla_dims *d,
                          int64_t q_pos0, int64_t k_pos0, ls_real tau,
                          ls_mla_form form, ls_real *workspace)
{
    const size_t H = d->H, dn = d->d_n, dv = d->d_v, r = d->r_kv;
    const size_t kw = dn + dv; /* a materialised (key, head) row: its key, then its value */
    ls_real *kv = NULL, *qhat = NULL, *obar = NULL, *z;
    if (form == LS_MLA_NAIVE) {
        kv = workspace;
        z = kv + Tk * H * kw;
        materialise(kv, c_kv, kv_b, Tk, d);
    } else {
        qhat = workspace;
        obar = qhat + r;
        z = obar + r;
    }
    /* The queries are independent: OpenMP threads take them in static blocks, each with its own scores
       (and absorbed: latent query and output) row from the kernel scratch; every query is one thread's
       whole computation, so the bits do not depend on the thread count.  Without scratch: one thread,
       the caller's workspace. */
    size_t per = max_sz(Tk, k_sel) + 2 * r, nt = (size_t)omp_get_max_threads();
    if (Tq < 2 || nt < 2 || omp_in_parallel()) nt = 1;
    const ls_kernel_allocator *al = ls_kernel_scratch_get();
    ls_real *own = nt > 1 ? al->alloc(nt * per * sizeof *own) : NULL;
    if (!own) nt = 1;
#pragma omp parallel num_threads((int)nt)
    {
        size_t tid = (size_t)omp_get_thread_num();
        ls_real *zt = own ? own + tid * per : z;
        ls_real *qh = own ? zt + max_sz(Tk, k_sel) : qhat, *ob = own ? qh + r : obar;
#pragma omp for schedule(static)
        for (size_t t = 0; t < Tq; t++)
            forward_query(o, lse, q_nope, q_pe, c_kv, k_pe, kv_b, sel, k_sel, Tk, d, q_pos0, k_pos0, tau, form, kv, zt,
                          qh, ob, t);
    }
    if (own) al->release(own);
}

/* Naive backward: gradients of the materialised keys/values, then through
 * the up-projection. */
static void backward_naive(ls_real *dq_nope, ls_real *dq_pe, ls_real *dc_kv, ls_real *dk_pe,
                           ls_real *dkv_b, const ls_real *o, const ls_real *lse,
                           const ls_real *do_, const ls_real *q_nope, const ls_real *q_pe,
                           const ls_real *c_kv, const ls_real *k_pe, const ls_real *kv_b,
                           const int64_t *sel, size_t k_sel, size_t Tq, size_t Tk,
                           const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0, ls_real tau,
                           ls_real *workspace)
{
    const size_t H = d->H, dn = d->d_n, dr = d->d_r, dv = d->d_v, r = d->r_kv;
    const size_t kw = dn + dv; /* a materialised (key, head) row and its gradient: key, then value */
    ls_real *kv = workspace, *dkv = kv + Tk * H * kw;
    materialise(kv, c_kv, kv_b, Tk, d);
    memset(dkv, 0, Tk * H * kw * sizeof *dkv);
    for (size_t t = 0; t < Tq; t++) {
        const int64_t q_pos = q_pos0 + (int64_t)t;
        cands c = cands_of(sel, k_sel, t, Tk, q_pos0, k_pos0);
        for (size_t h = 0; h < H; h++) {
            const size_t th = t * H + h;
            const ls_real L = lse[th];
            if (L == -INFINITY) continue;
            const ls_real *qn = q_nope + th * dn, *qp = q_pe + th * dr, *g = do_ + th * dv;
            const ls_real D = dot(g, o + th * dv, dv);
            for (size_t j = 0; j < c.n; j++) {
                int64_t s = cand_key(&c, j, Tk, q_pos, k_pos0);
                if (s < 0) continue;
                const size_t sh = (size_t)s * H + h;
                const ls_real *ks = kv + sh * kw, *kp = k_pe + (size_t)s * dr;
                const ls_real P = exp(tau * (dot(qn, ks, dn) + dot(qp, kp, dr)) - L);
                const ls_real dZ = P * (dot(g, ks + dn, dv) - D), tdZ = tau * dZ;
                if (dq_nope) axpy(dq_nope + th * dn, tdZ, ks, dn);
                if (dq_pe) axpy(dq_pe + th * dr, tdZ, kp, dr);
                if (dk_pe) axpy(dk_pe + (size_t)s * dr, tdZ, qp, dr);
                axpy(dkv + sh * kw, tdZ, qn, dn);
                axpy(dkv + sh * kw + dn, P, g, dv);
            }
        }
    }
    if (!dc_kv && !dkv_b) return;
    /* through the up-projection: dc_kv += dkv kv_b, dkv_b += dkv^T c_kv (two GEMMs) */
    LS_K(ls_linear_backward)(dc_kv, dkv_b, dkv, c_kv, kv_b, Tk, r, H * kw, 1);
}

/* Absorbed backward: everything stays in the latent space per (query, head). */
static void backward_absorbed(ls_real *dq_nope, ls_real *dq_pe, ls_real *dc_kv, ls_real *dk_pe,
                              ls_real *dkv_b, const ls_real *o, const ls_real *lse,
                              const ls_real *do_, const ls_real *q_nope, const ls_real *q_pe,
                              const ls_real *c_kv, const ls_real *k_pe, const ls_real *kv_b,
                              const int64_t *sel, size_t k_sel, size_t Tq, size_t Tk,
                              const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0,
                              ls_real tau, ls_real *workspace)
{
    const size_t H = d->H, dn = d->d_n, dr = d->d_r, dv = d->d_v, r = d->r_kv;
    ls_real *qhat = workspace, *dobar = qhat + r, *dqhat = dobar + r, *obar = dqhat + r;
    for (size_t t = 0; t < Tq; t++) {
        const int64_t q_pos = q_pos0 + (int64_t)t;
        cands c = cands_of(sel, k_sel, t, Tk, q_pos0, k_pos0);
        for (size_t h = 0; h < H; h++) {
            const size_t th = t * H + h;
            const ls_real L = lse[th];
            if (L == -INFINITY) continue;
            const ls_real *qn = q_nope + th * dn, *qp = q_pe + th * dr, *g = do_ + th * dv;
            const ls_real D = dot(g, o + th * dv, dv);
            absorb_query(qhat, qn, kv_b, d, h);
            memset(dobar, 0, 3 * r * sizeof *dobar); /* dobar, dqhat, obar */
            for (size_t i = 0; i < dv; i++) axpy(dobar, g[i], kvb_row(kv_b, d, h, dn + i), r);
            for (size_t j = 0; j < c.n; j++) {
                int64_t s = cand_key(&c, j, Tk, q_pos, k_pos0);
                if (s < 0) continue;
                const ls_real *cs = c_kv + (size_t)s * r, *kp = k_pe + (size_t)s * dr;
                const ls_real P = exp(tau * (dot(qhat, cs, r) + dot(qp, kp, dr)) - L);
                const ls_real dZ = P * (dot(dobar, cs, r) - D), tdZ = tau * dZ;
                axpy(dqhat, tdZ, cs, r);
                axpy(obar, P, cs, r);
                if (dq_pe) axpy(dq_pe + th * dr, tdZ, kp, dr);
                if (dk_pe) axpy(dk_pe + (size_t)s * dr, tdZ, qp, dr);
                if (dc_kv) {
                    axpy(dc_kv + (size_t)s * r, tdZ, qhat, r);
                    axpy(dc_kv + (size_t)s * r, P, dobar, r);
                }
            }
            for (size_t i = 0; i < dn; i++) {
                if (dq_nope) dq_nope[th * dn + i] += dot(kvb_row(kv_b, d, h, i), dqhat, r);
                if (dkv_b) axpy(dkv_b + (h * (dn + dv) + i) * r, qn[i], dqhat, r);
            }
            if (dkv_b)
                for (size_t i = 0; i < dv; i++)
                    axpy(dkv_b + (h * (dn + dv) + dn + i) * r, g[i], obar, r);
        }
    }
}

void LS_K(ls_mla_backward)(ls_real *dq_nope, ls_real *dq_pe, ls_real *dc_kv,
                           ls_real *dk_pe, ls_real *dkv_b,
                           const ls_real *o, const ls_real *lse, const ls_real *do_,
                           const ls_real *q_nope, const ls_real *q_pe,
                           const ls_real *c_kv, const ls_real *k_pe,
                           const ls_real *kv_b, const int64_t *sel, size_t k_sel,
                           size_t Tq, size_t Tk, const ls_mla_dims *dims,
                           int64_t q_pos0, int64_t k_pos0, ls_real tau,
                           ls_mla_form form, ls_real *workspace)
{
    if (form == LS_MLA_NAIVE)
        backward_naive(dq_nope, dq_pe, dc_kv, dk_pe, dkv_b, o, lse, do_, q_nope, q_pe, c_kv,
                       k_pe, kv_b, sel, k_sel, Tq, Tk, dims, q_pos0, k_pos0, tau, workspace);
    else
        backward_absorbed(dq_nope, dq_pe, dc_kv, dk_pe, dkv_b, o, lse, do_, q_nope, q_pe, c_kv,
                          k_pe, kv_b, sel, k_sel, Tq, Tk, dims, q_pos0, k_pos0, tau,
                          workspace);
}
