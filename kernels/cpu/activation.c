/* activation.c - elementwise SwiGLU and sigmoid gating, forward and backward (CPU). */
#include "kernels/activation.h"

#include <math.h>

#define PAR_MIN ((size_t)1 << 15)

/* Logistic sigmoid without overflow for large |x|. */
static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void LS_K(ls_swiglu_forward)(ls_real *h /* [n] */, const ls_real *g /* [n] */,
                             const ls_real *u /* [n] */, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        double gi = g[i];
        h[i] = (ls_real)(gi * sigmoid(gi) * u[i]);
    }
}

/* dg = dh u silu'(g), silu'(g) = sig(g) (1 + g (1 - sig(g))); du = dh silu(g). */
void LS_K(ls_swiglu_backward)(ls_real *dg /* [n] */, ls_real *du /* [n] */,
                              const ls_real *dh /* [n] */, const ls_real *g /* [n] */,
                              const ls_real *u /* [n] */, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        double gi = g[i], s = sigmoid(gi), d = dh[i];
        dg[i] = (ls_real)(d * u[i] * s * (1.0 + gi * (1.0 - s)));
        du[i] = (ls_real)(d * gi * s);
    }
}

void LS_K(ls_sigmoid_gate_forward)(ls_real *y /* [rows,n] */, const ls_real *x /* [rows,n] */,
                                   const ls_real *gate /* [rows, stride] */, size_t rows, size_t n,
                                   size_t gate_stride)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        const ls_real *gr = gate + t * gate_stride;
        for (size_t j = 0; j < n; j++)
            y[t * n + j] = (ls_real)((double)x[t * n + j] * sigmoid(gr[j]));
    }
}

/* dx = dy sig(gate); dgate = dy x sig (1 - sig).  Only the n gate columns of each
 * dgate row are written. */
void LS_K(ls_sigmoid_gate_backward)(ls_real *dx /* [rows,n] */, ls_real *dgate /* [rows,stride] */,
                                    const ls_real *dy /* [rows,n] */, const ls_real *x /* [rows,n] */,
                                    const ls_real *gate /* [rows,stride] */, size_t rows, size_t n,
                                    size_t gate_stride)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        for (size_t j = 0; j < n; j++) {
            size_t i = t * n + j, k = t * gate_stride + j;
            double s = sigmoid(gate[k]), d = dy[i];
            dx[i] = (ls_real)(d * s);
            dgate[k] = (ls_real)(d * x[i] * s * (1.0 - s));
        }
    }
}
