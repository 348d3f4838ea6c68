/* conv1d.c - CPU causal depthwise conv1d with a carried tail, then SiLU,
 * forward and backward (kernels/conv1d.h, docs/model.md §1.1 step 2).
 *
 * The conv input is the sequence x = tail_in ++ m: x(s) for s in [-(K-1), T),
 * with x(s) = tail_in[s + K-1] for s < 0.  Output t reads x(t-K+1 .. t).
 * tail_out is written after the outputs, oldest first, reading only x(s) with
 * s >= T-K+1; it may therefore be the same buffer as tail_in (in-place carry,
 * also when T < K-1 and the new tail still holds old tail vectors). */
#include "kernels/conv1d.h"

#include <math.h>

#if LS_REAL_IS_F64
#define R_EXP exp
#else
#define R_EXP expf
#endif

static ls_real sigmoid(ls_real x)
{
    if (x >= 0) {
        return (ls_real)1 / ((ls_real)1 + R_EXP(-x));
    }
    ls_real e = R_EXP(x);
    return e / ((ls_real)1 + e);
}

/* x(s)[ch] of the conv input sequence tail_in ++ m. */
static ls_real conv_x(const ls_real *m, const ls_real *tail_in, ptrdiff_t s,
                      size_t ch, size_t C, size_t K)
{
    if (s >= 0) {
        return m[(size_t)s * C + ch];
    }
    if (tail_in == NULL) {
        return 0;
    }
    return tail_in[(size_t)(s + (ptrdiff_t)K - 1) * C + ch];
}

/* Pre-SiLU sum of output t, channel ch. */
static ls_real conv_pre(const ls_real *m, const ls_real *tail_in, const ls_real *w,
                        size_t t, size_t ch, size_t C, size_t K)
{
    ls_real acc = 0;
    for (size_t j = 0; j < K; j++) {
        ptrdiff_t s = (ptrdiff_t)t - (ptrdiff_t)K + 1 + (ptrdiff_t)j;
        acc += w[ch * K + j] * conv_x(m, tail_in, s, ch, C, K);
    }
    return acc;
}

void LS_K(ls_conv1d_forward)(ls_real *c, ls_real *pre, ls_real *tail_out,
                             const ls_real *m, const ls_real *tail_in, const ls_real *w,
                             size_t T, size_t C, size_t K)
{
#pragma omp parallel for schedule(static) if (T * C * K > 65536)
    for (size_t t = 0; t < T; t++) {
        for (size_t ch = 0; ch < C; ch++) {
            ls_real p = conv_pre(m, tail_in, w, t, ch, C, K);
            if (pre != NULL) {
                pre[t * C + ch] = p;
            }
            c[t * C + ch] = p * sigmoid(p);
        }
    }
    if (tail_out != NULL && K > 1) {
        /* ascending p reads x(T-K+1+p) = tail_in[T+p] (index >= p) when it
         * is an old tail vector, so tail_out == tail_in is safe */
        for (size_t p = 0; p < K - 1; p++) {
            ptrdiff_t s = (ptrdiff_t)T - (ptrdiff_t)K + 1 + (ptrdiff_t)p;
            for (size_t ch = 0; ch < C; ch++) {
                tail_out[p * C + ch] = conv_x(m, tail_in, s, ch, C, K);
            }
        }
    }
}

/* d(output)/d(pre-SiLU) times dc at (t, ch): silu'(x) = s (1 + x (1 - s)). */
static ls_real conv_dpre(const ls_real *dc, const ls_real *pre, const ls_real *m,
                         const ls_real *tail_in, const ls_real *w,
                         size_t t, size_t ch, size_t C, size_t K)
{
    ls_real x = pre != NULL ? pre[t * C + ch] : conv_pre(m, tail_in, w, t, ch, C, K);
    ls_real s = sigmoid(x);
    return dc[t * C + ch] * s * ((ls_real)1 + x * ((ls_real)1 - s));
}

/* Gradient of the conv input x(s) (s in [-(K-1), T)) from the outputs:
 * sum over j of dpre(s + K-1-j) w[j], for output indices inside [0, T). */
static ls_real conv_dx(const ls_real *dc, const ls_real *pre, const ls_real *m,
                       const ls_real *tail_in, const ls_real *w, ptrdiff_t s,
                       size_t ch, size_t T, size_t C, size_t K)
{
    ls_real acc = 0;
    for (size_t j = 0; j < K; j++) {
        ptrdiff_t t = s + (ptrdiff_t)K - 1 - (ptrdiff_t)j;
        if (t < 0 || t >= (ptrdiff_t)T) {
            continue;
        }
        acc += conv_dpre(dc, pre, m, tail_in, w, (size_t)t, ch, C, K) * w[ch * K + j];
    }
    return acc;
}

void LS_K(ls_conv1d_backward)(ls_real *dm, ls_real *dw, ls_real *dtail_in,
                              const ls_real *dc, const ls_real *dtail_out,
                              const ls_real *pre, const ls_real *m,
                              const ls_real *tail_in, const ls_real *w,
                              size_t T, size_t C, size_t K)
{
    const ptrdiff_t Km1 = (ptrdiff_t)K - 1;
    /* dm: gradient through the outputs (dpre recomputed, K evaluations each) */
#pragma omp parallel for schedule(static) if (T * C * K > 65536)
    for (size_t t = 0; t < T; t++) {
        for (size_t ch = 0; ch < C; ch++) {
            dm[t * C + ch] = conv_dx(dc, pre, m, tail_in, w, (ptrdiff_t)t, ch, T, C, K);
        }
    }
    if (dtail_in != NULL) {
        for (ptrdiff_t p = 0; p < Km1; p++) {
            for (size_t ch = 0; ch < C; ch++) {
                dtail_in[(size_t)p * C + ch] =
                    conv_dx(dc, pre, m, tail_in, w, p - Km1, ch, T, C, K);
            }
        }
    }
    /* the handed-on tail is x(T-K+1+p): its gradient goes to m or tail_in */
    if (dtail_out != NULL) {
        for (ptrdiff_t p = 0; p < Km1; p++) {
            ptrdiff_t s = (ptrdiff_t)T - Km1 + p;
            for (size_t ch = 0; ch < C; ch++) {
                ls_real d = dtail_out[(size_t)p * C + ch];
                if (s >= 0) {
                    dm[(size_t)s * C + ch] += d;
                } else if (dtail_in != NULL) {
                    dtail_in[(size_t)(s + Km1) * C + ch] += d;
                }
            }
        }
    }
    if (dw != NULL) {
        /* parallel over channels: each thread owns its rows of dw */
#pragma omp parallel for schedule(static) if (T * C * K > 65536)
        for (size_t ch = 0; ch < C; ch++) {
            for (size_t t = 0; t < T; t++) {
                ls_real d = conv_dpre(dc, pre, m, tail_in, w, t, ch, C, K);
                for (size_t j = 0; j < K; j++) {
                    ptrdiff_t s = (ptrdiff_t)t - Km1 + (ptrdiff_t)j;
                    dw[ch * K + j] += d * conv_x(m, tail_in, s, ch, C, K);
                }
            }
        }
    }
}
