/* conv1d.h - causal depthwise conv1d with a carried tail, followed by SiLU.
 * docs/model.md §1.1 step 2: c_t[ch] = silu(sum_j w[ch,j] * m_{t-K+1+j}[ch]).
 *
 * m [T, C] pre-conv inputs, w [C, K], tail_in [K-1, C]: the K-1 pre-conv
 * vectors before the first token, oldest first (zeros at sequence start; NULL
 * means zeros).  tail_out [K-1, C] receives the last K-1 pre-conv vectors of
 * (tail_in ++ m) (NULL: not wanted).  pre [T, C] receives the pre-SiLU sums
 * (saved for backward; may be NULL in forward-only use).  c [T, C] output. */
#ifndef LS_KERNELS_CONV1D_H
#define LS_KERNELS_CONV1D_H
#include "kernels/real.h"

void LS_K(ls_conv1d_forward)(ls_real *c, ls_real *pre, ls_real *tail_out,
                             const ls_real *m, const ls_real *tail_in, const ls_real *w,
                             size_t T, size_t C, size_t K);

/* Backward.  dc [T, C] gradient of the output; dtail_out [K-1, C] gradient
 * arriving for the tail this call handed on (NULL: zero).
 * dm [T, C] = (assigned); dw [C, K] += (NULL allowed);
 * dtail_in [K-1, C] = gradient for tail_in (NULL: not wanted). */
void LS_K(ls_conv1d_backward)(ls_real *dm, ls_real *dw, ls_real *dtail_in,
                              const ls_real *dc, const ls_real *dtail_out,
                              const ls_real *pre, const ls_real *m,
                              const ls_real *tail_in, const ls_real *w,
                              size_t T, size_t C, size_t K);
#endif
