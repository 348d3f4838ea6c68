/* norm.c - RMSNorm (zero-centred and standard), gated RMSNorm, LayerNorm and
 * per-row L2 normalisation on the CPU.  docs/model.md §0, §1.1 steps 4 and 7, §2.2.
 *
 * Row reductions accumulate in double.  Rows run in parallel (OpenMP); the
 * weight gradient is reduced over rows in a fixed order per column block, so
 * results do not depend on the thread count. */
#include "kernels/norm.h"

#include <math.h>

/* Parallelise a loop only when it touches at least this many elements. */
#define PAR_MIN ((size_t)1 << 15)
/* Columns per task of the weight-gradient reduction. */
#define COL_BLOCK ((size_t)64)

static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* dw[j] += sum_t dy[t,j] * x[t,j] * rstd[t] * (gate ? silu(gate[t,j]) : 1). */
static void weight_grad(ls_real *dw, const ls_real *dy, const ls_real *x, const ls_real *rstd,
                        const ls_real *gate, size_t rows, size_t n)
{
    size_t nblk = (n + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t b = 0; b < nblk; b++) {
        size_t j0 = b * COL_BLOCK, j1 = j0 + COL_BLOCK < n ? j0 + COL_BLOCK : n;
        double acc[COL_BLOCK] = {0};
        for (size_t t = 0; t < rows; t++) {
            size_t off = t * n;
            double r = rstd[t];
            for (size_t j = j0; j < j1; j++) {
                double v = (double)dy[off + j] * x[off + j] * r;
                if (gate) {
                    double z = gate[off + j];
                    v *= z * sigmoid(z);
                }
                acc[j - j0] += v;
            }
        }
        for (size_t j = j0; j < j1; j++)
            dw[j] += (ls_real)acc[j - j0];
    }
}

void LS_K(ls_rmsnorm_forward)(ls_real *y /* [rows,n] */, ls_real *rstd /* [rows] */,
                              const ls_real *x /* [rows,n] */, const ls_real *w /* [n] */,
                              int zero_centred, ls_real eps, size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        const ls_real *xr = x + t * n;
        ls_real *yr = y + t * n;
        double ss = 0;
        for (size_t j = 0; j < n; j++)
            ss += (double)xr[j] * xr[j];
        double r = 1.0 / sqrt(ss / (double)n + (double)eps);
        rstd[t] = (ls_real)r;
        for (size_t j = 0; j < n; j++) {
            double g = zero_centred ? 1.0 + (double)w[j] : (double)w[j];
            yr[j] = (ls_real)(g * xr[j] * r);
        }
    }
}

/* dx = r g - (r^3/n) x (x.g) with g = gamma * dy * gatev (gatev = 1 when gate is NULL). */
static void rms_dx_row(ls_real *dx, const ls_real *dy, const ls_real *x, const ls_real *gate,
                       const ls_real *w, int zero_centred, double r, size_t n)
{
    double xg = 0;
    for (size_t j = 0; j < n; j++) {
        double g = (zero_centred ? 1.0 + (double)w[j] : (double)w[j]) * dy[j];
        if (gate)
            g *= gate[j] * sigmoid(gate[j]);
        xg += (double)x[j] * g;
    }
    double c = r * r * r * xg / (double)n;
    for (size_t j = 0; j < n; j++) {
        double g = (zero_centred ? 1.0 + (double)w[j] : (double)w[j]) * dy[j];
        if (gate)
            g *= gate[j] * sigmoid(gate[j]);
        dx[j] = (ls_real)(r * g - c * x[j]);
    }
}

void LS_K(ls_rmsnorm_backward)(ls_real *dx /* [rows,n] */, ls_real *dw /* [n] or NULL */,
                               const ls_real *dy /* [rows,n] */, const ls_real *x /* [rows,n] */,
                               const ls_real *rstd /* [rows] */, const ls_real *w /* [n] */,
                               int zero_centred, size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        size_t off = t * n;
        rms_dx_row(dx + off, dy + off, x + off, NULL, w, zero_centred, rstd[t], n);
    }
    if (dw)
        weight_grad(dw, dy, x, rstd, NULL, rows, n);
}

void LS_K(ls_gated_rmsnorm_forward)(ls_real *y /* [rows,n] */, ls_real *rstd /* [rows] */,
                                    const ls_real *x /* [rows,n] */, const ls_real *z /* [rows,n] */,
                                    const ls_real *w /* [n] */, ls_real eps, size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        size_t off = t * n;
        double ss = 0;
        for (size_t j = 0; j < n; j++)
            ss += (double)x[off + j] * x[off + j];
        double r = 1.0 / sqrt(ss / (double)n + (double)eps);
        rstd[t] = (ls_real)r;
        for (size_t j = 0; j < n; j++) {
            double zz = z[off + j];
            y[off + j] = (ls_real)((double)w[j] * x[off + j] * r * (zz * sigmoid(zz)));
        }
    }
}

void LS_K(ls_gated_rmsnorm_backward)(ls_real *dx /* [rows,n] */, ls_real *dz /* [rows,n] */,
                                     ls_real *dw /* [n] or NULL */, const ls_real *dy /* [rows,n] */,
                                     const ls_real *x /* [rows,n] */, const ls_real *z /* [rows,n] */,
                                     const ls_real *rstd /* [rows] */, const ls_real *w /* [n] */,
                                     size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        size_t off = t * n;
        double r = rstd[t];
        for (size_t j = 0; j < n; j++) {
            /* y = w * nrm * silu(z): dz = dy * w * nrm * silu'(z),
             * silu'(z) = sig(z) (1 + z (1 - sig(z))). */
            double zz = z[off + j], sg = sigmoid(zz);
            double nrm = (double)x[off + j] * r;
            dz[off + j] = (ls_real)((double)dy[off + j] * w[j] * nrm * sg * (1.0 + zz * (1.0 - sg)));
        }
        rms_dx_row(dx + off, dy + off, x + off, z + off, w, 0, r, n);
    }
    if (dw)
        weight_grad(dw, dy, x, rstd, z, rows, n);
}

void LS_K(ls_layernorm_forward)(ls_real *y /* [rows,n] */, const ls_real *x /* [rows,n] */,
                                const ls_real *w /* [n] */, const ls_real *b /* [n] */, ls_real eps,
                                size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        const ls_real *xr = x + t * n;
        ls_real *yr = y + t * n;
        double mu = 0, var = 0;
        for (size_t j = 0; j < n; j++)
            mu += xr[j];
        mu /= (double)n;
        for (size_t j = 0; j < n; j++) {
            double c = xr[j] - mu;
            var += c * c;
        }
        var /= (double)n;
        double inv = 1.0 / sqrt(var + (double)eps);
        for (size_t j = 0; j < n; j++)
            yr[j] = (ls_real)((double)w[j] * ((xr[j] - mu) * inv) + b[j]);
    }
}

void LS_K(ls_l2norm_forward)(ls_real *y /* [rows,n] */, ls_real *rinv /* [rows] */,
                             const ls_real *x /* [rows,n] */, ls_real eps, ls_real scale,
                             size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        const ls_real *xr = x + t * n;
        ls_real *yr = y + t * n;
        double ss = 0;
        for (size_t j = 0; j < n; j++)
            ss += (double)xr[j] * xr[j];
        double ri = 1.0 / sqrt(ss + (double)eps);
        rinv[t] = (ls_real)ri;
        double f = ri * (double)scale;
        for (size_t j = 0; j < n; j++)
            yr[j] = (ls_real)(xr[j] * f);
    }
}

/* y = s x ri, ri = (|x|^2 + eps)^(-1/2): dx = s (ri dy - ri^3 x (x.dy)). */
void LS_K(ls_l2norm_backward)(ls_real *dx /* [rows,n] */, const ls_real *dy /* [rows,n] */,
                              const ls_real *x /* [rows,n] */, const ls_real *rinv /* [rows] */,
                              ls_real scale, size_t rows, size_t n)
{
#pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN)
    for (size_t t = 0; t < rows; t++) {
        size_t off = t * n;
        double ri = rinv[t], s = scale, xd = 0;
        for (size_t j = 0; j < n; j++)
            xd += (double)x[off + j] * dy[off + j];
        double c = ri * ri * ri * xd;
        for (size_t j = 0; j < n; j++)
            dx[off + j] = (ls_real)(s * (ri * dy[off + j] - c * x[off + j]));
    }
}
