/* activation.h - elementwise activations: SwiGLU, sigmoid gating, SiLU.
 * All arrays [n] flat.  Activation gradients assign. */
#ifndef LS_KERNELS_ACTIVATION_H
#define LS_KERNELS_ACTIVATION_H
#include "kernels/real.h"

/* h = silu(g) * u */
void LS_K(ls_swiglu_forward)(ls_real *h, const ls_real *g, const ls_real *u, size_t n);
void LS_K(ls_swiglu_backward)(ls_real *dg, ls_real *du, const ls_real *dh,
                              const ls_real *g, const ls_real *u, size_t n);

/* y = x * sigmoid(gate) with x, gate [rows, n] but gate rows may be strided:
 * element (t, j) of gate is gate[t*gate_stride + j]; same stride for dgate. */
void LS_K(ls_sigmoid_gate_forward)(ls_real *y, const ls_real *x, const ls_real *gate,
                                   size_t rows, size_t n, size_t gate_stride);
void LS_K(ls_sigmoid_gate_backward)(ls_real *dx, ls_real *dgate, const ls_real *dy,
                                    const ls_real *x, const ls_real *gate,
                                    size_t rows, size_t n, size_t gate_stride);
#endif
