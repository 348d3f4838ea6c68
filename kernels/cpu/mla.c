/* mla.c - multi-head latent attention over one key block (docs/model.md §2.1):
 * the naive form (per-head keys/values materialised from c_kv) and the
 * absorbed form (queries taken into the latent space), forward and backward,
 * over a causal prefix or an explicit DSA candidate list.  See mla.h. */
#include "kernels/mla.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static ls_real dot(const ls_real *a, const ls_real *b, size_t n)
{
    ls_real s = 0;
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

/* Naive form: kn [Tk,H,d_n] = W_UK c_kv, v [Tk,H,d_v] = W_UV c_kv. */
static void materialise(ls_real *kn, ls_real *v, const ls_real *c_kv, const ls_real *kv_b,
                        size_t Tk, const ls_mla_dims *d)
{
    for (size_t s = 0; s < Tk; s++) {
        const ls_real *c = c_kv + s * d->r_kv;
        for (size_t h = 0; h < d->H; h++) {
            ls_real *kr = kn + (s * d->H + h) * d->d_n;
            ls_real *vr = v + (s * d->H + h) * d->d_v;
            for (size_t i = 0; i < d->d_n; i++) kr[i] = dot(kvb_row(kv_b, d, h, i), c, d->r_kv);
            for (size_t j = 0; j < d->d_v; j++)
                vr[j] = dot(kvb_row(kv_b, d, h, d->d_n + j), c, d->r_kv);
        }
    }
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

void LS_K(ls_mla_forward)(ls_real *o, ls_real *lse,
                          const ls_real *q_nope, const ls_real *q_pe,
                          const ls_real *c_kv, const ls_real *k_pe,
                          const ls_real *kv_b, const int64_t *sel, size_t k_sel,
                          size_t Tq, size_t Tk, const ls_mla_dims *d,
                          int64_t q_pos0, int64_t k_pos0, ls_real tau,
                          ls_mla_form form, ls_real *workspace)
{
    const size_t H = d->H, dn = d->d_n, dr = d->d_r, dv = d->d_v, r = d->r_kv;
    ls_real *kn = NULL, *v = NULL, *qhat = NULL, *obar = NULL, *z;
    if (form == LS_MLA_NAIVE) {
        kn = workspace;
        v = kn + Tk * H * dn;
        z = v + Tk * H * dv;
        materialise(kn, v, c_kv, kv_b, Tk, d);
    } else {
        qhat = workspace;
        obar = qhat + r;
        z = obar + r;
    }
    for (size_t t = 0; t < Tq; t++) {
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
                ls_real qk = (form == LS_MLA_NAIVE) ? dot(qn, kn + (su * H + h) * dn, dn)
                                                    : dot(qhat, c_kv + su * r, r);
                z[j] = tau * (qk + dot(qp, k_pe + su * dr, dr));
            }
            lse[th] = softmax_inplace(z, c.n);
            if (form == LS_MLA_NAIVE) {
                memset(ot, 0, dv * sizeof *ot);
                for (size_t j = 0; j < c.n; j++) {
                    int64_t s = cand_key(&c, j, Tk, q_pos, k_pos0);
                    if (s >= 0) axpy(ot, z[j], v + ((size_t)s * H + h) * dv, dv);
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
    ls_real *kn = workspace, *v = kn + Tk * H * dn;
    ls_real *dkn = v + Tk * H * dv, *dvv = dkn + Tk * H * dn;
    materialise(kn, v, c_kv, kv_b, Tk, d);
    memset(dkn, 0, Tk * H * (dn + dv) * sizeof *dkn);
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
                const ls_real *ks = kn + sh * dn, *kp = k_pe + (size_t)s * dr;
                const ls_real P = exp(tau * (dot(qn, ks, dn) + dot(qp, kp, dr)) - L);
                const ls_real dZ = P * (dot(g, v + sh * dv, dv) - D), tdZ = tau * dZ;
                if (dq_nope) axpy(dq_nope + th * dn, tdZ, ks, dn);
                if (dq_pe) axpy(dq_pe + th * dr, tdZ, kp, dr);
                if (dk_pe) axpy(dk_pe + (size_t)s * dr, tdZ, qp, dr);
                axpy(dkn + sh * dn, tdZ, qn, dn);
                axpy(dvv + sh * dv, P, g, dv);
            }
        }
    }
    if (!dc_kv && !dkv_b) return;
    for (size_t s = 0; s < Tk; s++) {
        const ls_real *cs = c_kv + s * r;
        for (size_t h = 0; h < H; h++) {
            const ls_real *gk = dkn + (s * H + h) * dn, *gv = dvv + (s * H + h) * dv;
            for (size_t i = 0; i < dn + dv; i++) {
                const ls_real gi = i < dn ? gk[i] : gv[i - dn];
                if (dc_kv) axpy(dc_kv + s * r, gi, kvb_row(kv_b, d, h, i), r);
                if (dkv_b) axpy(dkv_b + (h * (dn + dv) + i) * r, gi, cs, r);
            }
        }
    }
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
