/* grpo.h - the GRPO objective of docs/model.md §4 per member, and AdamW. */
#ifndef LS_KERNELS_GRPO_H
#define LS_KERNELS_GRPO_H
#include "kernels/real.h"

/* A_i = (r_i - mean r) / (std r + 1e-4), std with Bessel's correction; G = 1 gives 0. */
void LS_K(ls_grpo_advantages)(ls_real *A, const ls_real *rewards, size_t G);

/* One member of R tokens: returns its contribution
 *   (1/(G R)) sum_t [ -min(rho A, clip(rho, 1-eps, 1+eps) A) + beta KL_t ]
 * and writes dlogp [R] = dL/dlogp (may be NULL).  old, ref [R]. */
double LS_K(ls_grpo_member_loss)(ls_real *dlogp, const ls_real *logp, const ls_real *old,
                                 const ls_real *ref, ls_real A, ls_real eps, ls_real beta,
                                 size_t G, size_t R);

/* One AdamW step on n parameters (decoupled weight decay, bias-corrected;
 * step counts from 1): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p). */
void LS_K(ls_adamw_step)(ls_real *p, ls_real *m, ls_real *v, const ls_real *g, size_t n,
                         double lr, double b1, double b2, double eps, double wd, int64_t step);
#endif
