/* grpo.c - the GRPO objective of docs/model.md §4 (group advantages, per-member
 * clipped surrogate + k3 KL loss and its gradient) and the AdamW step (CPU).
 * Scalars are computed in double whatever the real type. */
#include "kernels/grpo.h"

#include <math.h>

#define PAR_MIN ((size_t)1 << 15)

void LS_K(ls_grpo_advantages)(ls_real *A /* [G] */, const ls_real *rewards /* [G] */, size_t G)
{
    if (G == 0)
        return;
    if (G == 1) {
        A[0] = 0;
        return;
    }
    double mean = 0;
    for (size_t i = 0; i < G; i++)
        mean += rewards[i];
    mean /= (double)G;
    double ss = 0;
    for (size_t i = 0; i < G; i++) {
        double c = rewards[i] - mean;
        ss += c * c;
    }
    double sd = sqrt(ss / (double)(G - 1));
    for (size_t i = 0; i < G; i++)
        A[i] = (ls_real)(((double)rewards[i] - mean) / (sd + 1e-4));
}

double LS_K(ls_grpo_member_loss)(ls_real *dlogp /* [R] or NULL */, const ls_real *logp /* [R] */,
                                 const ls_real *old /* [R] */, const ls_real *ref /* [R] */,
                                 ls_real A, ls_real eps, ls_real beta, size_t G, size_t R)
{
    if (R == 0)
        return 0.0;
    double a = A, e = eps, b = beta;
    double k = 1.0 / ((double)G * (double)R);
    double sum = 0;
    for (size_t t = 0; t < R; t++) {
        double rho = exp((double)logp[t] - (double)old[t]);
        double clip = rho < 1.0 - e ? 1.0 - e : (rho > 1.0 + e ? 1.0 + e : rho);
        double un = rho * a, cl = clip * a;
        double dr = (double)ref[t] - (double)logp[t];
        double er = exp(dr);
        double kl = er - dr - 1.0;
        sum += -(un < cl ? un : cl) + b * kl;
        if (dlogp) {
            /* the unclipped branch is inactive when A > 0, rho > 1+eps or A < 0, rho < 1-eps */
            int clipped = (a > 0 && rho > 1.0 + e) || (a < 0 && rho < 1.0 - e);
            double g = (clipped ? 0.0 : -un) + b * (1.0 - er);
            dlogp[t] = (ls_real)(k * g);
        }
    }
    return k * sum;
}

void LS_K(ls_adamw_step)(ls_real *p /* [n] */, ls_real *m /* [n] */, ls_real *v /* [n] */,
                         const ls_real *g /* [n] */, size_t n, double lr, double b1, double b2,
                         double eps, double wd, int64_t step)
{
    double c1 = 1.0 - pow(b1, (double)step), c2 = 1.0 - pow(b2, (double)step);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        double gi = g[i];
        double mi = b1 * m[i] + (1.0 - b1) * gi;
        double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = (ls_real)mi;
        v[i] = (ls_real)vi;
        double upd = (mi / c1) / (sqrt(vi / c2) + eps) + wd * p[i];
        p[i] = (ls_real)((double)p[i] - lr * upd);
    }
}
