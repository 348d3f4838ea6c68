/* kernels_core_f32_wrap.c - double-in/double-out wrappers of the float32 core
 * kernels (compiled without LS_REAL_F64, so ls_real is float here).  Used by
 * test_kernels_core_f32.c to compare float32 against float64. */
#include "tests/kernels/kernels_core_f32_wrap.h"

#include <stdlib.h>

#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/grpo.h"
#include "kernels/linear.h"
#include "kernels/logprob.h"
#include "kernels/norm.h"

/* A float copy of a[0..n) (zeros when a is NULL); aborts on OOM. */
static float *F(const double *a, size_t n)
{
    float *f = calloc(n ? n : 1, sizeof *f);
    if (!f)
        abort();
    if (a)
        for (size_t i = 0; i < n; i++)
            f[i] = (float)a[i];
    return f;
}

/* Copy f back into d (when d is not NULL) and free f. */
static void D(double *d, float *f, size_t n)
{
    if (d)
        for (size_t i = 0; i < n; i++)
            d[i] = f[i];
    free(f);
}

void kc32_linear_forward(double *y, const double *x, const double *W, size_t T, size_t in,
                         size_t out, int accumulate)
{
    float *fy = F(y, T * out), *fx = F(x, T * in), *fW = F(W, out * in);
    ls_linear_forward_f32(fy, fx, fW, T, in, out, accumulate);
    D(y, fy, T * out);
    free(fx);
    free(fW);
}

void kc32_linear_backward(double *dx, double *dW, const double *dy, const double *x,
                          const double *W, size_t T, size_t in, size_t out)
{
    float *fdx = F(NULL, T * in), *fdW = F(dW, out * in);
    float *fdy = F(dy, T * out), *fx = F(x, T * in), *fW = F(W, out * in);
    ls_linear_backward_f32(fdx, fdW, fdy, fx, fW, T, in, out, 0);
    D(dx, fdx, T * in);
    D(dW, fdW, out * in);
    free(fdy);
    free(fx);
    free(fW);
}

void kc32_lora_forward(double *y, double *xa, const double *x, const double *W, const double *A,
                       const double *B, double s, size_t T, size_t in, size_t out, size_t r)
{
    float *fy = F(NULL, T * out), *fxa = F(NULL, T * r), *fx = F(x, T * in);
    float *fW = F(W, out * in), *fA = F(A, r * in), *fB = F(B, out * r);
    ls_lora_forward_f32(fy, fxa, fx, fW, fA, fB, (float)s, T, in, out, r);
    D(y, fy, T * out);
    D(xa, fxa, T * r);
    free(fx);
    free(fW);
    free(fA);
    free(fB);
}

void kc32_lora_backward(double *dx, double *dW, double *dA, double *dB, const double *dy,
                        const double *x, const double *xa, const double *W, const double *A,
                        const double *B, double s, size_t T, size_t in, size_t out, size_t r)
{
    float *fdx = F(NULL, T * in), *fdW = F(dW, out * in), *fdA = F(dA, r * in);
    float *fdB = F(dB, out * r), *fdy = F(dy, T * out), *fx = F(x, T * in), *fxa = F(xa, T * r);
    float *fW = F(W, out * in), *fA = F(A, r * in), *fB = F(B, out * r), *sc = F(NULL, T * r);
    ls_lora_backward_f32(fdx, fdW, fdA, fdB, fdy, fx, fxa, fW, fA, fB, (float)s, T, in, out, r, sc,
                         0);
    D(dx, fdx, T * in);
    D(dW, fdW, out * in);
    D(dA, fdA, r * in);
    D(dB, fdB, out * r);
    free(fdy);
    free(fx);
    free(fxa);
    free(fW);
    free(fA);
    free(fB);
    free(sc);
}

void kc32_embedding_forward(double *h, const int32_t *ids, const double *E, size_t V, size_t T,
                            size_t d)
{
    float *fh = F(NULL, T * d), *fE = F(E, V * d);
    ls_embedding_forward_f32(fh, ids, fE, T, d);
    D(h, fh, T * d);
    free(fE);
}

void kc32_rmsnorm_forward(double *y, double *rstd, const double *x, const double *w,
                          int zero_centred, double eps, size_t rows, size_t n)
{
    float *fy = F(NULL, rows * n), *fr = F(NULL, rows), *fx = F(x, rows * n), *fw = F(w, n);
    ls_rmsnorm_forward_f32(fy, fr, fx, fw, zero_centred, (float)eps, rows, n);
    D(y, fy, rows * n);
    D(rstd, fr, rows);
    free(fx);
    free(fw);
}

void kc32_rmsnorm_backward(double *dx, double *dw, const double *dy, const double *x,
                           const double *rstd, const double *w, int zero_centred, size_t rows,
                           size_t n)
{
    float *fdx = F(NULL, rows * n), *fdw = F(dw, n), *fdy = F(dy, rows * n), *fx = F(x, rows * n);
    float *fr = F(rstd, rows), *fw = F(w, n);
    ls_rmsnorm_backward_f32(fdx, fdw, fdy, fx, fr, fw, zero_centred, rows, n);
    D(dx, fdx, rows * n);
    D(dw, fdw, n);
    free(fdy);
    free(fx);
    free(fr);
    free(fw);
}

void kc32_gated_rmsnorm_forward(double *y, double *rstd, const double *x, const double *z,
                                const double *w, double eps, size_t rows, size_t n)
{
    float *fy = F(NULL, rows * n), *fr = F(NULL, rows), *fx = F(x, rows * n);
    float *fz = F(z, rows * n), *fw = F(w, n);
    ls_gated_rmsnorm_forward_f32(fy, fr, fx, fz, fw, (float)eps, rows, n);
    D(y, fy, rows * n);
    D(rstd, fr, rows);
    free(fx);
    free(fz);
    free(fw);
}

void kc32_layernorm_forward(double *y, const double *x, const double *w, const double *b,
                            double eps, size_t rows, size_t n)
{
    float *fy = F(NULL, rows * n), *fx = F(x, rows * n), *fw = F(w, n), *fb = F(b, n);
    ls_layernorm_forward_f32(fy, fx, fw, fb, (float)eps, rows, n);
    D(y, fy, rows * n);
    free(fx);
    free(fw);
    free(fb);
}

void kc32_l2norm_forward(double *y, double *rinv, const double *x, double eps, double scale,
                         size_t rows, size_t n)
{
    float *fy = F(NULL, rows * n), *fr = F(NULL, rows), *fx = F(x, rows * n);
    ls_l2norm_forward_f32(fy, fr, fx, (float)eps, (float)scale, rows, n);
    D(y, fy, rows * n);
    D(rinv, fr, rows);
    free(fx);
}

void kc32_rope_apply(double *x, ls_rope_kind kind, size_t T, size_t H, size_t hd, size_t d_r,
                     int64_t pos0, double theta, int inverse)
{
    float *fx = F(x, T * H * hd);
    ls_rope_apply_f32(fx, kind, T, H, hd, d_r, pos0, theta, inverse);
    D(x, fx, T * H * hd);
}

void kc32_swiglu_forward(double *h, const double *g, const double *u, size_t n)
{
    float *fh = F(NULL, n), *fg = F(g, n), *fu = F(u, n);
    ls_swiglu_forward_f32(fh, fg, fu, n);
    D(h, fh, n);
    free(fg);
    free(fu);
}

void kc32_sigmoid_gate_forward(double *y, const double *x, const double *gate, size_t rows,
                               size_t n, size_t gate_stride)
{
    float *fy = F(NULL, rows * n), *fx = F(x, rows * n), *fg = F(gate, rows * gate_stride);
    ls_sigmoid_gate_forward_f32(fy, fx, fg, rows, n, gate_stride);
    D(y, fy, rows * n);
    free(fx);
    free(fg);
}

void kc32_logprob_forward(double *logp, double *lse, const double *h, const double *W,
                          const int32_t *y, double temp, size_t T, size_t d, size_t V,
                          size_t chunk)
{
    float *fl = F(NULL, T), *fs = F(NULL, T), *fh = F(h, T * d), *fW = F(W, V * d);
    float *ws = F(NULL, ls_logprob_workspace_f32(T, chunk));
    ls_logprob_forward_f32(fl, fs, fh, fW, y, (float)temp, T, d, V, chunk, ws);
    D(logp, fl, T);
    D(lse, fs, T);
    free(fh);
    free(fW);
    free(ws);
}

void kc32_logprob_backward(double *dh, double *dW, const double *dlogp, const double *h,
                           const double *W, const int32_t *y, const double *lse, double temp,
                           size_t T, size_t d, size_t V, size_t chunk)
{
    float *fdh = F(NULL, T * d), *fdW = F(dW, V * d), *fdl = F(dlogp, T), *fh = F(h, T * d);
    float *fW = F(W, V * d), *fs = F(lse, T), *ws = F(NULL, ls_logprob_workspace_f32(T, chunk));
    ls_logprob_backward_f32(fdh, fdW, fdl, fh, fW, y, fs, (float)temp, T, d, V, chunk, ws);
    D(dh, fdh, T * d);
    D(dW, fdW, V * d);
    free(fdl);
    free(fh);
    free(fW);
    free(fs);
    free(ws);
}

void kc32_logprob_row(double *logp_row, const double *h, const double *W, double temp, size_t d,
                      size_t V)
{
    float *fr = F(NULL, V), *fh = F(h, d), *fW = F(W, V * d);
    ls_logprob_row_f32(fr, fh, fW, (float)temp, d, V);
    D(logp_row, fr, V);
    free(fh);
    free(fW);
}

void kc32_grpo_advantages(double *A, const double *rewards, size_t G)
{
    float *fA = F(NULL, G), *fr = F(rewards, G);
    ls_grpo_advantages_f32(fA, fr, G);
    D(A, fA, G);
    free(fr);
}

double kc32_grpo_member_loss(double *dlogp, const double *logp, const double *old,
                             const double *ref, double A, double eps, double beta, size_t G,
                             size_t R)
{
    float *fd = F(NULL, R), *fl = F(logp, R), *fo = F(old, R), *fr = F(ref, R);
    double L = ls_grpo_member_loss_f32(fd, fl, fo, fr, (float)A, (float)eps, (float)beta, G, R);
    D(dlogp, fd, R);
    free(fl);
    free(fo);
    free(fr);
    return L;
}

void kc32_adamw_step(double *p, double *m, double *v, const double *g, size_t n, double lr,
                     double b1, double b2, double eps, double wd, int64_t step)
{
    float *fp = F(p, n), *fm = F(m, n), *fv = F(v, n), *fg = F(g, n);
    ls_adamw_step_f32(fp, fm, fv, fg, n, lr, b1, b2, eps, wd, step);
    D(p, fp, n);
    D(m, fm, n);
    D(v, fv, n);
    free(fg);
}
