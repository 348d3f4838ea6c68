/* kernels_core_f32_wrap.h - double-in/double-out wrappers of the float32 core
 * kernels, so that a test compiled against the float64 kernels can run both on
 * the same inputs.  Each wrapper converts its inputs to float, calls the _f32
 * kernel with the same arguments, and converts the outputs back. */
#ifndef LS_KERNELS_CORE_F32_WRAP_H
#define LS_KERNELS_CORE_F32_WRAP_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/rope.h"

void kc32_linear_forward(double *y, const double *x, const double *W, size_t T, size_t in,
                         size_t out, int accumulate);
void kc32_linear_backward(double *dx, double *dW, const double *dy, const double *x,
                          const double *W, size_t T, size_t in, size_t out);
void kc32_lora_forward(double *y, double *xa, const double *x, const double *W, const double *A,
                       const double *B, double s, size_t T, size_t in, size_t out, size_t r);
void kc32_lora_backward(double *dx, double *dW, double *dA, double *dB, const double *dy,
                        const double *x, const double *xa, const double *W, const double *A,
                        const double *B, double s, size_t T, size_t in, size_t out, size_t r);
void kc32_embedding_forward(double *h, const int32_t *ids, const double *E, size_t V, size_t T,
                            size_t d);
void kc32_rmsnorm_forward(double *y, double *rstd, const double *x, const double *w,
                          int zero_centred, double eps, size_t rows, size_t n);
void kc32_rmsnorm_backward(double *dx, double *dw, const double *dy, const double *x,
                           const double *rstd, const double *w, int zero_centred, size_t rows,
                           size_t n);
void kc32_gated_rmsnorm_forward(double *y, double *rstd, const double *x, const double *z,
                                const double *w, double eps, size_t rows, size_t n);
void kc32_layernorm_forward(double *y, const double *x, const double *w, const double *b,
                            double eps, size_t rows, size_t n);
void kc32_l2norm_forward(double *y, double *rinv, const double *x, double eps, double scale,
                         size_t rows, size_t n);
void kc32_rope_apply(double *x, ls_rope_kind kind, size_t T, size_t H, size_t hd, size_t d_r,
                     int64_t pos0, double theta, int inverse);
void kc32_swiglu_forward(double *h, const double *g, const double *u, size_t n);
void kc32_sigmoid_gate_forward(double *y, const double *x, const double *gate, size_t rows,
                               size_t n, size_t gate_stride);
void kc32_logprob_forward(double *logp, double *lse, const double *h, const double *W,
                          const int32_t *y, double temp, size_t T, size_t d, size_t V,
                          size_t chunk);
void kc32_logprob_backward(double *dh, double *dW, const double *dlogp, const double *h,
                           const double *W, const int32_t *y, const double *lse, double temp,
                           size_t T, size_t d, size_t V, size_t chunk);
void kc32_logprob_row(double *logp_row, const double *h, const double *W, double temp, size_t d,
                      size_t V);
void kc32_grpo_advantages(double *A, const double *rewards, size_t G);
double kc32_grpo_member_loss(double *dlogp, const double *logp, const double *old,
                             const double *ref, double A, double eps, double beta, size_t G,
                             size_t R);
void kc32_adamw_step(double *p, double *m, double *v, const double *g, size_t n, double lr,
                     double b1, double b2, double eps, double wd, int64_t step);
#endif
