/* norm.h - RMSNorm (zero-centred and standard), gated RMSNorm, LayerNorm,
 * per-head L2 normalisation.  docs/model.md §0, §1.1 steps 4 and 7, §2.2.
 *
 * Rows: x [rows, n]; the norm is over the last dimension n.  Weights w [n].
 * zero_centred != 0: gamma = 1 + w; else gamma = w.
 * Parameter gradients accumulate (+=, NULL allowed); activation gradients assign. */
#ifndef LS_KERNELS_NORM_H
#define LS_KERNELS_NORM_H
#include "kernels/real.h"

/* y = gamma * x * r, r = (mean x^2 + eps)^(-1/2); rstd [rows] saved. */
void LS_K(ls_rmsnorm_forward)(ls_real *y, ls_real *rstd, const ls_real *x,
                              const ls_real *w, int zero_centred, ls_real eps,
                              size_t rows, size_t n);
/* dx [rows,n] = ...; dw [n] += sum_rows dy * x * r (gamma derivative is 1 in both forms). */
void LS_K(ls_rmsnorm_backward)(ls_real *dx, ls_real *dw, const ls_real *dy,
                               const ls_real *x, const ls_real *rstd, const ls_real *w,
                               int zero_centred, size_t rows, size_t n);

/* Gated RMSNorm (GDN output): y = gamma * RMSNorm(x) * silu(z), standard gamma = w.
 * x, z, y [rows, n]; rstd [rows] saved. */
void LS_K(ls_gated_rmsnorm_forward)(ls_real *y, ls_real *rstd, const ls_real *x,
                                    const ls_real *z, const ls_real *w, ls_real eps,
                                    size_t rows, size_t n);
void LS_K(ls_gated_rmsnorm_backward)(ls_real *dx, ls_real *dz, ls_real *dw,
                                     const ls_real *dy, const ls_real *x, const ls_real *z,
                                     const ls_real *rstd, const ls_real *w,
                                     size_t rows, size_t n);

/* LayerNorm forward only (the indexer is frozen): y = w*(x-mu)/sqrt(var+eps) + b. */
void LS_K(ls_layernorm_forward)(ls_real *y, const ls_real *x, const ls_real *w,
                                const ls_real *b, ls_real eps, size_t rows, size_t n);

/* Per-row L2 normalisation: y = x * (|x|^2 + eps)^(-1/2) * scale; rinv [rows] saved
 * (rinv = (|x|^2+eps)^(-1/2), without scale). */
void LS_K(ls_l2norm_forward)(ls_real *y, ls_real *rinv, const ls_real *x, ls_real eps,
                             ls_real scale, size_t rows, size_t n);
void LS_K(ls_l2norm_backward)(ls_real *dx, const ls_real *dy, const ls_real *x,
                              const ls_real *rinv, ls_real scale, size_t rows, size_t n);
#endif
