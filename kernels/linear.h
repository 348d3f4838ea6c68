/* linear.h - dense linear layers y = x W^T (through BLAS) and LoRA adapters.
 *
 * Layout: row-major; x [T, in], W [out, in], y [T, out].
 * LoRA (docs/model.md §3): W_eff = W + s * B A with A [r, in], B [out, r], s = alpha/r.
 * Conventions (docs/style.md rule 12): outputs first, then saved values, then
 * inputs, then dims.  Parameter gradients accumulate (+=); activation
 * gradients assign (=).  Any parameter-gradient pointer may be NULL (frozen).
 *
 * Threads: one pool.  The first call pins OpenBLAS to the calling thread
 * (openblas_set_num_threads(1), for the whole process); each GEMM is split
 * into row blocks of C fixed by its shape, shared by OpenMP threads (none
 * when called inside a parallel region).  Every element of C is one
 * thread's whole dot product: the results are the same bits for any
 * OMP_NUM_THREADS (tests/trainer/determinism.sh checks a whole run). */
#ifndef LS_KERNELS_LINEAR_H
#define LS_KERNELS_LINEAR_H
#include "kernels/real.h"

/* y[T,out] = x[T,in] W[out,in]^T.  If accumulate, y += instead of =. */
void LS_K(ls_linear_forward)(ls_real *y, const ls_real *x, const ls_real *W,
                             size_t T, size_t in, size_t out, int accumulate);

/* dx[T,in] = dy W (or += if accumulate_dx; dx may be NULL);
 * dW[out,in] += dy^T x (dW may be NULL). */
void LS_K(ls_linear_backward)(ls_real *dx, ls_real *dW, const ls_real *dy,
                              const ls_real *x, const ls_real *W,
                              size_t T, size_t in, size_t out, int accumulate_dx);

/* y = x W^T + s (x A^T) B^T.  xa [T, r] receives x A^T (saved for backward). */
void LS_K(ls_lora_forward)(ls_real *y, ls_real *xa, const ls_real *x,
                           const ls_real *W, const ls_real *A, const ls_real *B,
                           ls_real s, size_t T, size_t in, size_t out, size_t r);

/* Backward of ls_lora_forward.  dx = dy W + s (dy B) A (or += if accumulate_dx;
 * dx may be NULL); dW += dy^T x; dA += s (dy B)^T x; dB += s dy^T xa.
 * scratch holds T*r reals.  dW, dA, dB may each be NULL. */
void LS_K(ls_lora_backward)(ls_real *dx, ls_real *dW, ls_real *dA, ls_real *dB,
                            const ls_real *dy, const ls_real *x, const ls_real *xa,
                            const ls_real *W, const ls_real *A, const ls_real *B,
                            ls_real s, size_t T, size_t in, size_t out, size_t r,
                            ls_real *scratch, int accumulate_dx);

#endif
