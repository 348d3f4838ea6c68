/* grpo_stats.h - the per-step statistics of the GRPO objective that a
 * trainer's user plots (docs/model.md §4): the loss split into its policy and KL
 * parts, mean KL, clip fraction, ratio min/mean/max, and the reward and
 * advantage moments of a group.  Computed in double from the log-probs the
 * step used, independently of the loss kernel (kernels/grpo.h), so that
 * loss_policy + loss_kl = loss is a check, not an identity.
 * dtype-independent. */
#ifndef LS_TRAINER_GRPO_STATS_H
#define LS_TRAINER_GRPO_STATS_H
#include <stddef.h>

typedef struct {
    double loss_policy, loss_kl; /* (1/G) sum_i (1/R_i) sum_t of each term */
    double kl_sum;               /* sum over tokens of KL_{i,t} */
    double ratio_sum, ratio_min, ratio_max;
    size_t tokens, clipped;      /* clipped: tokens whose clipped branch is active */
} ls_grpo_stats;

/* Zero the sums (ratio_min = +inf, ratio_max = 0 until a token is added). */
void ls_grpo_stats_init(ls_grpo_stats *s);
/* Add member i's R tokens: logp, old, ref [R]; A its advantage; eps, beta
 * of the objective; G the group size. */
void ls_grpo_stats_add(ls_grpo_stats *s, const double *logp, const double *old, const double *ref, double A,
                       double eps, double beta, size_t G, size_t R);

/* Mean, standard deviation (population, as TRL and verl log it), min and
 * max of x[n]; all zero when n = 0. */
void ls_stats_moments(const double *x, size_t n, double *mean, double *std, double *min, double *max);
#endif
