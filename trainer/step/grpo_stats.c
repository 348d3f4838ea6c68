/* grpo_stats.c - GRPO loss parts, KL, clip and ratio statistics. */
#include "trainer/step/grpo_stats.h"

#include <math.h>

void ls_grpo_stats_init(ls_grpo_stats *s) {
    *s = (ls_grpo_stats){.ratio_min = INFINITY};
}

void ls_grpo_stats_add(ls_grpo_stats *s, const double *logp, const double *old, const double *ref, double A,
                       double eps, double beta, size_t G, size_t R) {
    if (R == 0 || G == 0) return;
    double w = 1.0 / ((double)G * (double)R), pol = 0, kl = 0;
    for (size_t t = 0; t < R; t++) {
        double rho = exp(logp[t] - old[t]);
        double clipped = rho < 1 - eps ? 1 - eps : rho > 1 + eps ? 1 + eps : rho;
        double un = rho * A, cl = clipped * A;
        pol -= un < cl ? un : cl;
        /* the clipped branch is active (no gradient) exactly where docs/model.md §4 says */
        if ((A > 0 && rho > 1 + eps) || (A < 0 && rho < 1 - eps)) s->clipped++;
        double dr = ref[t] - logp[t];
        double k = exp(dr) - dr - 1;
        kl += k;
        s->ratio_sum += rho;
        if (rho < s->ratio_min) s->ratio_min = rho;
        if (rho > s->ratio_max) s->ratio_max = rho;
    }
    s->loss_policy += w * pol;
    s->loss_kl += w * beta * kl;
    s->kl_sum += kl;
    s->tokens += R;
}

void ls_stats_moments(const double *x, size_t n, double *mean, double *std, double *min, double *max) {
    *mean = *std = *min = *max = 0;
    if (n == 0) return;
    double m = 0, lo = x[0], hi = x[0];
    for (size_t i = 0; i < n; i++) {
        m += x[i];
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    m /= (double)n;
    double v = 0;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *std = sqrt(v / (double)n);
    *min = lo;
    *max = hi;
}
