/* kernels_mla_f32_wrap.c - double-in/double-out wrappers around the float32
 * MLA-family kernels, compiled WITHOUT LS_REAL_F64 so that the float64 test
 * (test_kernels_mla_f32.c) can run both precisions on the same inputs.
 * Test code: it allocates freely and aborts on allocation failure. */
#include <stdlib.h>

#include "kernels/dsa.h"
#include "kernels/mla.h"
#include "kernels/moe.h"

static float *alloc_f32(size_t n)
{
    float *y = malloc((n > 0 ? n : 1) * sizeof *y);
    if (!y) abort();
    return y;
}

static float *to_f32(const double *x, size_t n)
{
    float *y = alloc_f32(n);
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

static void to_f64(double *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = x[i];
}

/* Inputs of an MLA call in float32: q_nope, q_pe, c_kv, k_pe, kv_b. */
typedef struct {
    float *in[5];
    size_t n[5];
} mla_inputs;

static mla_inputs mla_inputs_make(const double *const in[5], size_t Tq, size_t Tk,
                                  const ls_mla_dims *d)
{
    mla_inputs m;
    m.n[0] = Tq * d->H * d->d_n;
    m.n[1] = Tq * d->H * d->d_r;
    m.n[2] = Tk * d->r_kv;
    m.n[3] = Tk * d->d_r;
    m.n[4] = d->H * (d->d_n + d->d_v) * d->r_kv;
    for (int i = 0; i < 5; i++) m.in[i] = to_f32(in[i], m.n[i]);
    return m;
}

static void mla_inputs_free(mla_inputs *m)
{
    for (int i = 0; i < 5; i++) free(m->in[i]);
}

/* in = {q_nope, q_pe, c_kv, k_pe, kv_b}; o [Tq,H,d_v], lse [Tq,H] assigned. */
void kmla_f32_mla_forward(double *o, double *lse, const double *const in[5],
                          const int64_t *sel, size_t k_sel, size_t Tq, size_t Tk,
                          const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0, double tau,
                          ls_mla_form form)
{
    mla_inputs m = mla_inputs_make(in, Tq, Tk, d);
    size_t no = Tq * d->H * d->d_v, nl = Tq * d->H;
    float *of = malloc(no * sizeof *of), *lf = malloc(nl * sizeof *lf);
    float *ws = malloc(ls_mla_forward_workspace_f32(form, Tk, k_sel, d) * sizeof *ws);
    if (!of || !lf || !ws) abort();
    ls_mla_forward_f32(of, lf, m.in[0], m.in[1], m.in[2], m.in[3], m.in[4], sel, k_sel, Tq, Tk,
                       d, q_pos0, k_pos0, (float)tau, form, ws);
    to_f64(o, of, no);
    to_f64(lse, lf, nl);
    free(of);
    free(lf);
    free(ws);
    mla_inputs_free(&m);
}

/* Forward then backward of L = sum G * o in float32; grads[5] assigned
 * (same order as in). */
void kmla_f32_mla_grads(double *const grads[5], const double *G, const double *const in[5],
                        const int64_t *sel, size_t k_sel, size_t Tq, size_t Tk,
                        const ls_mla_dims *d, int64_t q_pos0, int64_t k_pos0, double tau,
                        ls_mla_form form)
{
    mla_inputs m = mla_inputs_make(in, Tq, Tk, d);
    size_t no = Tq * d->H * d->d_v, nl = Tq * d->H;
    float *of = malloc(no * sizeof *of), *lf = malloc(nl * sizeof *lf), *g[5];
    float *Gf = to_f32(G, no);
    size_t nws = ls_mla_forward_workspace_f32(form, Tk, k_sel, d);
    size_t nwb = ls_mla_backward_workspace_f32(form, Tk, k_sel, d);
    float *ws = malloc((nws > nwb ? nws : nwb) * sizeof *ws);
    if (!of || !lf || !ws) abort();
    for (int i = 0; i < 5; i++) {
        g[i] = calloc(m.n[i] ? m.n[i] : 1, sizeof *g[i]);
        if (!g[i]) abort();
    }
    ls_mla_forward_f32(of, lf, m.in[0], m.in[1], m.in[2], m.in[3], m.in[4], sel, k_sel, Tq, Tk,
                       d, q_pos0, k_pos0, (float)tau, form, ws);
    ls_mla_backward_f32(g[0], g[1], g[2], g[3], g[4], of, lf, Gf, m.in[0], m.in[1], m.in[2],
                        m.in[3], m.in[4], sel, k_sel, Tq, Tk, d, q_pos0, k_pos0, (float)tau, form,
                        ws);
    for (int i = 0; i < 5; i++) {
        to_f64(grads[i], g[i], m.n[i]);
        free(g[i]);
    }
    free(of);
    free(lf);
    free(Gf);
    free(ws);
    mla_inputs_free(&m);
}

/* Indexer scores I [Tq, Tk] in float32. */
void kmla_f32_dsa_scores(double *I, const double *q_I, const double *w, const double *k_I,
                         size_t Tq, size_t Tk, size_t H_I, size_t d_I, int64_t q_pos0,
                         int64_t k_pos0)
{
    float *qf = to_f32(q_I, Tq * H_I * d_I), *wf = to_f32(w, Tq * H_I), *kf = to_f32(k_I, Tk * d_I);
    float *If = alloc_f32(Tq * Tk);
    ls_dsa_scores_f32(If, qf, wf, kf, Tq, Tk, H_I, d_I, q_pos0, k_pos0);
    to_f64(I, If, Tq * Tk);
    free(qf);
    free(wf);
    free(kf);
    free(If);
}

/* Routing in float32: idx, w [T,k] assigned. */
void kmla_f32_moe_route(int32_t *idx, double *w, const double *logits, const double *bias,
                        size_t T, size_t E, size_t n_group, size_t topk_group, size_t k,
                        double rho)
{
    float *lf = to_f32(logits, T * E), *bf = to_f32(bias, E);
    float *wf = malloc(T * k * sizeof *wf), *sf = malloc(T * E * sizeof *sf);
    float *ws = malloc(ls_moe_route_workspace_f32(E, n_group) * sizeof *ws);
    if (!wf || !sf || !ws) abort();
    ls_moe_route_forward_f32(idx, wf, sf, lf, bf, T, E, n_group, topk_group, k, (float)rho, ws);
    to_f64(w, wf, T * k);
    free(lf);
    free(bf);
    free(wf);
    free(sf);
    free(ws);
}
