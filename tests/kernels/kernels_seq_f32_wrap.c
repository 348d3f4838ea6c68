/* kernels_seq_f32_wrap.c - the float32 sequence kernels behind double
 * interfaces (see kernels_seq_f32_wrap.h).  Compiled WITHOUT LS_REAL_F64, so
 * the kernel headers here declare the _f32 functions. */
#include "tests/kernels/kernels_seq_f32_wrap.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/gdn.h"

/* A float copy of a (NULL for NULL). */
static float *in_f(const double *a, size_t n)
{
    if (a == NULL) {
        return NULL;
    }
    float *f = calloc(n ? n : 1, sizeof *f); /* zeroed: n == 0 still gives an initialised element */
    if (f == NULL) {
        fprintf(stderr, "kernels_seq_f32_wrap: out of memory\n");
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)a[i];
    }
    return f;
}

/* A zeroed float output when the caller wants one (NULL otherwise). */
static float *out_f(const double *want, size_t n)
{
    if (want == NULL) {
        return NULL;
    }
    float *f = calloc(n ? n : 1, sizeof *f);
    if (f == NULL) {
        fprintf(stderr, "kernels_seq_f32_wrap: out of memory\n");
        abort();
    }
    return f;
}

/* Widen f into d (when both exist) and free f. */
static void back(double *d, float *f, size_t n)
{
    if (d != NULL && f != NULL) {
        for (size_t i = 0; i < n; i++) {
            d[i] = f[i];
        }
    }
    free(f);
}

void ks32_conv1d_forward(double *c, double *pre, double *tail_out, const double *m,
                         const double *tail_in, const double *w, size_t T, size_t C, size_t K)
{
    const size_t nt = (K - 1) * C;
    float *c_ = out_f(c, T * C), *pre_ = out_f(pre, T * C), *to_ = out_f(tail_out, nt);
    float *m_ = in_f(m, T * C), *ti_ = in_f(tail_in, nt), *w_ = in_f(w, C * K);
    ls_conv1d_forward_f32(c_, pre_, to_, m_, ti_, w_, T, C, K);
    back(c, c_, T * C);
    back(pre, pre_, T * C);
    back(tail_out, to_, nt);
    free(m_); free(ti_); free(w_);
}

void ks32_conv1d_backward(double *dm, double *dw, double *dtail_in, const double *dc,
                          const double *dtail_out, const double *pre, const double *m,
                          const double *tail_in, const double *w, size_t T, size_t C, size_t K)
{
    const size_t nt = (K - 1) * C;
    float *dm_ = out_f(dm, T * C), *dw_ = in_f(dw, C * K), *dti_ = out_f(dtail_in, nt);
    float *dc_ = in_f(dc, T * C), *dto_ = in_f(dtail_out, nt), *pre_ = in_f(pre, T * C);
    float *m_ = in_f(m, T * C), *ti_ = in_f(tail_in, nt), *w_ = in_f(w, C * K);
    ls_conv1d_backward_f32(dm_, dw_, dti_, dc_, dto_, pre_, m_, ti_, w_, T, C, K);
    back(dm, dm_, T * C);
    back(dw, dw_, C * K);
    back(dtail_in, dti_, nt);
    free(dc_); free(dto_); free(pre_); free(m_); free(ti_); free(w_);
}

void ks32_gdn_gates_forward(double *g, double *beta, const double *a, const double *b,
                            const double *A_log, const double *dt_bias, size_t T, size_t Hv)
{
    const size_t n = T * Hv;
    float *g_ = out_f(g, n), *be_ = out_f(beta, n), *a_ = in_f(a, n), *b_ = in_f(b, n);
    float *A_ = in_f(A_log, Hv), *dt_ = in_f(dt_bias, Hv);
    ls_gdn_gates_forward_f32(g_, be_, a_, b_, A_, dt_, T, Hv);
    back(g, g_, n);
    back(beta, be_, n);
    free(a_); free(b_); free(A_); free(dt_);
}

void ks32_gdn_gates_backward(double *da, double *db, double *dA_log, double *ddt_bias,
                             const double *dg, const double *dbeta, const double *a,
                             const double *b, const double *A_log, const double *dt_bias,
                             size_t T, size_t Hv)
{
    const size_t n = T * Hv;
    float *da_ = out_f(da, n), *db_ = out_f(db, n), *dA_ = in_f(dA_log, Hv);
    float *ddt_ = in_f(ddt_bias, Hv), *dg_ = in_f(dg, n), *dbe_ = in_f(dbeta, n);
    float *a_ = in_f(a, n), *b_ = in_f(b, n), *A_ = in_f(A_log, Hv), *dt_ = in_f(dt_bias, Hv);
    ls_gdn_gates_backward_f32(da_, db_, dA_, ddt_, dg_, dbe_, a_, b_, A_, dt_, T, Hv);
    back(da, da_, n);
    back(db, db_, n);
    back(dA_log, dA_, Hv);
    back(ddt_bias, ddt_, Hv);
    free(dg_); free(dbe_); free(a_); free(b_); free(A_); free(dt_);
}

static int gdn_form; /* ks32_gdn_use */

void ks32_gdn_use(int form)
{
    gdn_form = form;
}

void ks32_gdn_forward(double *o, double *S_out, const double *q, const double *k,
                      const double *v, const double *g, const double *beta, const double *S_in,
                      size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv)
{
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    float *o_ = out_f(o, nv), *So_ = out_f(S_out, nS), *q_ = in_f(q, nq), *k_ = in_f(k, nq);
    float *v_ = in_f(v, nv), *g_ = in_f(g, ng), *be_ = in_f(beta, ng), *Si_ = in_f(S_in, nS);
    if (gdn_form == 1) {
        ls_gdn_forward_recurrent_f32(o_, So_, q_, k_, v_, g_, be_, Si_, T, Hk, Hv, dk, dv);
    } else if (gdn_form == 2) {
        ls_gdn_forward_chunked_f32(o_, So_, q_, k_, v_, g_, be_, Si_, T, Hk, Hv, dk, dv);
    } else {
        ls_gdn_forward_f32(o_, So_, q_, k_, v_, g_, be_, Si_, T, Hk, Hv, dk, dv);
    }
    back(o, o_, nv);
    back(S_out, So_, nS);
    free(q_); free(k_); free(v_); free(g_); free(be_); free(Si_);
}

void ks32_gdn_backward(double *dq, double *dk, double *dv, double *dg, double *dbeta,
                       double *dS_in, const double *do_, const double *dS_out, const double *q,
                       const double *k, const double *v, const double *g, const double *beta,
                       const double *S_in, size_t T, size_t Hk, size_t Hv, size_t dk_,
                       size_t dv_)
{
    const size_t nq = T * Hk * dk_, nv = T * Hv * dv_, ng = T * Hv, nS = Hv * dk_ * dv_;
    float *dq_ = out_f(dq, nq), *dkk = out_f(dk, nq), *dvv = out_f(dv, nv);
    float *dg_ = out_f(dg, ng), *db_ = out_f(dbeta, ng), *dSi = out_f(dS_in, nS);
    float *do__ = in_f(do_, nv), *dSo = in_f(dS_out, nS), *q_ = in_f(q, nq), *k_ = in_f(k, nq);
    float *v_ = in_f(v, nv), *g_ = in_f(g, ng), *be_ = in_f(beta, ng), *Si_ = in_f(S_in, nS);
    size_t nws = gdn_form == 1   ? ls_gdn_backward_recurrent_workspace_f32(T, Hk, Hv, dk_, dv_)
                 : gdn_form == 2 ? ls_gdn_backward_chunked_workspace_f32(T, Hk, Hv, dk_, dv_)
                                 : ls_gdn_backward_workspace_f32(T, Hk, Hv, dk_, dv_);
    float *ws = malloc((nws ? nws : 1) * sizeof *ws);
    if (ws == NULL) {
        fprintf(stderr, "kernels_seq_f32_wrap: out of memory\n");
        abort();
    }
    if (gdn_form == 1) {
        ls_gdn_backward_recurrent_f32(dq_, dkk, dvv, dg_, db_, dSi, do__, dSo, q_, k_, v_, g_,
                                      be_, Si_, T, Hk, Hv, dk_, dv_, ws);
    } else if (gdn_form == 2) {
        ls_gdn_backward_chunked_f32(dq_, dkk, dvv, dg_, db_, dSi, do__, dSo, q_, k_, v_, g_, be_,
                                    Si_, T, Hk, Hv, dk_, dv_, ws);
    } else {
        ls_gdn_backward_f32(dq_, dkk, dvv, dg_, db_, dSi, do__, dSo, q_, k_, v_, g_, be_, Si_, T,
                            Hk, Hv, dk_, dv_, ws);
    }
    back(dq, dq_, nq);
    back(dk, dkk, nq);
    back(dv, dvv, nv);
    back(dg, dg_, ng);
    back(dbeta, db_, ng);
    back(dS_in, dSi, nS);
    free(do__); free(dSo); free(q_); free(k_); free(v_); free(g_); free(be_); free(Si_);
    free(ws);
}

void ks32_attn_block_forward(double *o, double *lse, const double *q, const double *k,
                             const double *v, size_t Tq, size_t Tk, size_t H, size_t Hkv,
                             size_t hd, int64_t q_pos0, int64_t k_pos0, int causal, double tau)
{
    const size_t nq = Tq * H * hd, nk = Tk * Hkv * hd;
    float *o_ = out_f(o, nq), *l_ = out_f(lse, Tq * H), *q_ = in_f(q, nq), *k_ = in_f(k, nk);
    float *v_ = in_f(v, nk);
    ls_attn_block_forward_f32(o_, l_, q_, k_, v_, Tq, Tk, H, Hkv, hd, q_pos0, k_pos0, causal,
                              (float)tau);
    back(o, o_, nq);
    back(lse, l_, Tq * H);
    free(q_); free(k_); free(v_);
}

void ks32_attn_block_backward(double *dq, double *dk, double *dv, const double *do_,
                              const double *q, const double *k, const double *v,
                              const double *o, const double *lse, size_t Tq, size_t Tk,
                              size_t H, size_t Hkv, size_t hd, int64_t q_pos0, int64_t k_pos0,
                              int causal, double tau)
{
    const size_t nq = Tq * H * hd, nk = Tk * Hkv * hd;
    float *dq_ = in_f(dq, nq), *dk_ = in_f(dk, nk), *dv_ = in_f(dv, nk), *do__ = in_f(do_, nq);
    float *q_ = in_f(q, nq), *k_ = in_f(k, nk), *v_ = in_f(v, nk), *o_ = in_f(o, nq);
    float *l_ = in_f(lse, Tq * H);
    ls_attn_block_backward_f32(dq_, dk_, dv_, do__, q_, k_, v_, o_, l_, Tq, Tk, H, Hkv, hd,
                               q_pos0, k_pos0, causal, (float)tau);
    back(dq, dq_, nq);
    back(dk, dk_, nk);
    back(dv, dv_, nk);
    free(do__); free(q_); free(k_); free(v_); free(o_); free(l_);
}

void ks32_attn_merge_into(double *o, double *lse, const double *o_p, const double *lse_p,
                          size_t n, size_t hd)
{
    float *o_ = in_f(o, n * hd), *l_ = in_f(lse, n), *op_ = in_f(o_p, n * hd);
    float *lp_ = in_f(lse_p, n);
    ls_attn_merge_into_f32(o_, l_, op_, lp_, n, hd);
    back(o, o_, n * hd);
    back(lse, l_, n);
    free(op_); free(lp_);
}

void ks32_attn_merge_backward(double *do_p, double *dlse_p, const double *do_,
                              const double *dlse, const double *o_p, const double *lse_p,
                              const double *o, const double *lse, size_t n, size_t hd)
{
    float *dop_ = out_f(do_p, n * hd), *dlp_ = out_f(dlse_p, n), *do__ = in_f(do_, n * hd);
    float *dl_ = in_f(dlse, n), *op_ = in_f(o_p, n * hd), *lp_ = in_f(lse_p, n);
    float *o_ = in_f(o, n * hd), *l_ = in_f(lse, n);
    ls_attn_merge_backward_f32(dop_, dlp_, do__, dl_, op_, lp_, o_, l_, n, hd);
    back(do_p, dop_, n * hd);
    back(dlse_p, dlp_, n);
    free(do__); free(dl_); free(op_); free(lp_); free(o_); free(l_);
}
