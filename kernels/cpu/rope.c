/* rope.c - rotary position embedding (NeoX and interleaved pairings) on the CPU,
 * in place; inverse rotates by -phi and is the backward.  Angles in double. */
#include "kernels/rope.h"

#include <assert.h>
#include <math.h>

#define PAR_MIN ((size_t)1 << 14)

void LS_K(ls_rope_apply)(ls_real *x /* [T,H,hd] */, ls_rope_kind kind, size_t T, size_t H,
                         size_t hd, size_t d_r, int64_t pos0, double theta, int inverse)
{
    assert(d_r % 2 == 0 && d_r <= hd);
    size_t half = d_r / 2;
    /* pair (lo, hi) of index i: NeoX (i, i + d_r/2), interleaved (2i, 2i+1) */
    size_t lo_mul = kind == LS_ROPE_NEOX ? 1 : 2;
    size_t hi_add = kind == LS_ROPE_NEOX ? half : 1;
    double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static) if (T * H * d_r >= PAR_MIN)
    for (size_t t = 0; t < T; t++) {
        double p = (double)(pos0 + (int64_t)t);
        for (size_t i = 0; i < half; i++) {
            double phi = p * pow(theta, -2.0 * (double)i / (double)d_r);
            double c = cos(phi), s = sign * sin(phi);
            size_t lo = i * lo_mul, hi = lo + hi_add;
            for (size_t h = 0; h < H; h++) {
                ls_real *xh = x + (t * H + h) * hd;
                double a = xh[lo], b = xh[hi];
                xh[lo] = (ls_real)(a * c - b * s);
                xh[hi] = (ls_real)(a * s + b * c);
            }
        }
    }
}
