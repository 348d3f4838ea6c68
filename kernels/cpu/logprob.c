/* logprob.c - fused lm_head + log-softmax gathered at the target tokens (CPU),
 * chunked over the vocabulary with an online log-sum-exp; the backward
 * recomputes each chunk's logits from the saved lse.  See logprob.h.
 *
 * Workspace: T*chunk logits of the current chunk, then T running sums.  The
 * logit GEMMs go through ls_linear_*; rows of a chunk run in parallel. */
#include "kernels/logprob.h"

#include <assert.h>
#include <math.h>

#include "kernels/linear.h"

#define PAR_MIN ((size_t)1 << 14)

size_t LS_K(ls_logprob_workspace)(size_t T, size_t chunk)
{
    return T * chunk + T;
}

void LS_K(ls_logprob_forward)(ls_real *logp /* [T] */, ls_real *lse /* [T] */,
                              const ls_real *h /* [T,d] */, const ls_real *W /* [V,d] */,
                              const int32_t *y /* [T] */, ls_real temp, size_t T, size_t d,
                              size_t V, size_t chunk, ls_real *workspace)
{
    assert(chunk > 0 && V > 0);
    ls_real *Z = workspace;                 /* [T, c] logits of the chunk */
    ls_real *run_s = workspace + T * chunk; /* [T] running sum of exp(z - lse[t]) */
    /* During the loop lse[t] holds the running maximum and logp[t] the target logit. */
    for (size_t v0 = 0; v0 < V; v0 += chunk) {
        size_t c = V - v0 < chunk ? V - v0 : chunk;
        LS_K(ls_linear_forward)(Z, h, W + v0 * d, T, d, c, 0);
#pragma omp parallel for schedule(static) if (T * c >= PAR_MIN)
        for (size_t t = 0; t < T; t++) {
            ls_real *z = Z + t * c;
            double cm = -INFINITY;
            for (size_t v = 0; v < c; v++) {
                z[v] = (ls_real)((double)z[v] / (double)temp);
                if (z[v] > cm)
                    cm = z[v];
            }
            double cs = 0;
            for (size_t v = 0; v < c; v++)
                cs += exp((double)z[v] - cm);
            size_t yt = (size_t)y[t];
            if (yt >= v0 && yt < v0 + c)
                logp[t] = z[yt - v0];
            if (v0 == 0) {
                lse[t] = (ls_real)cm;
                run_s[t] = (ls_real)cs;
            } else {
                double m = lse[t], s = run_s[t];
                double mn = m > cm ? m : cm;
                lse[t] = (ls_real)mn;
                run_s[t] = (ls_real)(s * exp(m - mn) + cs * exp(cm - mn));
            }
        }
    }
    for (size_t t = 0; t < T; t++) {
        double l = (double)lse[t] + log((double)run_s[t]);
        lse[t] = (ls_real)l;
        logp[t] = (ls_real)((double)logp[t] - l);
    }
}

void LS_K(ls_logprob_backward)(ls_real *dh /* [T,d] */, ls_real *dW /* [V,d] or NULL */,
                               const ls_real *dlogp /* [T] */, const ls_real *h /* [T,d] */,
                               const ls_real *W /* [V,d] */, const int32_t *y /* [T] */,
                               const ls_real *lse /* [T] */, ls_real temp, size_t T, size_t d,
                               size_t V, size_t chunk, ls_real *workspace)
{
    assert(chunk > 0 && V > 0);
    ls_real *G = workspace; /* [T, c]: logits, then their gradient */
    for (size_t v0 = 0; v0 < V; v0 += chunk) {
        size_t c = V - v0 < chunk ? V - v0 : chunk;
        LS_K(ls_linear_forward)(G, h, W + v0 * d, T, d, c, 0);
#pragma omp parallel for schedule(static) if (T * c >= PAR_MIN)
        for (size_t t = 0; t < T; t++) {
            ls_real *g = G + t * c;
            double l = lse[t], k = (double)dlogp[t] / (double)temp;
            size_t yt = (size_t)y[t];
            for (size_t v = 0; v < c; v++) {
                double z = (double)(ls_real)((double)g[v] / (double)temp);
                double p = exp(z - l);
                g[v] = (ls_real)(k * ((v0 + v == yt ? 1.0 : 0.0) - p));
            }
        }
        LS_K(ls_linear_backward)(dh, dW ? dW + v0 * d : NULL, G, h, W + v0 * d, T, d, c, v0 != 0);
    }
}

void LS_K(ls_logprob_row)(ls_real *logp_row /* [V] */, const ls_real *h /* [d] */,
                          const ls_real *W /* [V,d] */, ls_real temp, size_t d, size_t V)
{
    LS_K(ls_linear_forward)(logp_row, h, W, 1, d, V, 0);
    double m = -INFINITY;
    for (size_t v = 0; v < V; v++) {
        logp_row[v] = (ls_real)((double)logp_row[v] / (double)temp);
        if (logp_row[v] > m)
            m = logp_row[v];
    }
    double s = 0;
    for (size_t v = 0; v < V; v++)
        s += exp((double)logp_row[v] - m);
    double l = m + log(s);
    for (size_t v = 0; v < V; v++)
        logp_row[v] = (ls_real)((double)logp_row[v] - l);
}
