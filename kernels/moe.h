/* moe.h - mixture-of-experts routing, token dispatch and the weighted
 * combine, with the backward of the routing weights.  docs/model.md §2.3.
 *
 * The model code runs the router linear (logits = router x), the experts'
 * SwiGLU MLPs and the shared expert; this module does the rest:
 *   1. ls_moe_route_forward: s = sigmoid(logits); s' = s + router_bias;
 *      E experts in n_group contiguous groups of E/n_group (group g holds
 *      experts [g*E/n_group, (g+1)*E/n_group)); group score = sum of the top-2
 *      s' in the group; keep the best topk_group groups (ties: lower group
 *      index first), mask the others to -inf; idx = top-k of s' (score
 *      descending, then expert index ascending), best first;
 *      w_j = rho * s[idx_j] / (sum_j s[idx_j] + 1e-20).
 *   2. ls_moe_dispatch: a grouped layout of the T*k (token, slot) pairs sorted
 *      by expert (tokens ascending within an expert) so each expert runs one
 *      GEMM over a contiguous block of rows; ls_moe_gather / ls_moe_scatter_add
 *      move token rows into and out of that layout.
 *   3. ls_moe_combine_forward: y = sum_j w_j eo_j (+ shared, if given).
 * Backward: ls_moe_combine_backward gives d eo and dw; ls_moe_route_backward
 * turns dw into d logits (idx constant).
 *
 * Layouts: logits, s [T, E]; idx (int32) and w [T, k]; slot (t, j) = t*k + j.
 * Grouped rows: row i in [offsets[e], offsets[e+1]) belongs to expert e and
 * holds slot slot_of_row[i] (token slot_of_row[i] / k); row_of_slot is the
 * inverse permutation.  Grouped arrays xg, eo, deo are [T*k, d].
 * Activation gradients assign unless stated; nothing allocates.
 * ls_moe_route_forward notes its idx in the calling thread's decision ledger
 * (kernels/decisions.h), if one is set. */
#ifndef LS_KERNELS_MOE_H
#define LS_KERNELS_MOE_H
#include "kernels/real.h"

/* Reals of workspace ls_moe_route_forward needs. */
size_t LS_K(ls_moe_route_workspace)(size_t E, size_t n_group);

/* Routing.  idx [T,k], w [T,k], s [T,E] (sigmoid, saved for backward)
 * assigned; router_bias [E] may be NULL (zero).  Requires n_group | E,
 * 1 <= topk_group <= n_group, k <= topk_group * E/n_group (asserted). */
void LS_K(ls_moe_route_forward)(int32_t *idx, ls_real *w, ls_real *s,
                                const ls_real *logits, const ls_real *router_bias,
                                size_t T, size_t E, size_t n_group, size_t topk_group,
                                size_t k, ls_real rho, ls_real *workspace);

/* Backward of the routing weights, idx held constant.  Given dw [T,k]
 * (dw_j = <dy, Expert_{idx_j}(x)>, from ls_moe_combine_backward):
 * ds[idx_j] = (rho/S)(dw_j - sum_i dw_i s[idx_i]/S) with S = sum_i s[idx_i]
 * + 1e-20 (the forward's denominator, so this is the exact derivative; it is
 * docs/model.md's formula whenever the sum is not below ~1e-20), other ds = 0;
 * dlogits = ds * s (1 - s).  dlogits [T,E] assigned; ds [T,E] assigned, may
 * be NULL. */
void LS_K(ls_moe_route_backward)(ls_real *dlogits, ls_real *ds, const ls_real *dw,
                                 const ls_real *s, const int32_t *idx, size_t T,
                                 size_t E, size_t k, ls_real rho);

/* Grouped layout of the routing idx [T,k] (every idx < E).
 * offsets [E+1] (offsets[e+1] - offsets[e] = tokens routed to e),
 * slot_of_row [T*k], row_of_slot [T*k] assigned. */
void LS_K(ls_moe_dispatch)(size_t *offsets, size_t *slot_of_row, size_t *row_of_slot,
                           const int32_t *idx, size_t T, size_t E, size_t k);

/* xg [T*k, d] row i = x [T, d] row slot_of_row[i] / k. */
void LS_K(ls_moe_gather)(ls_real *xg, const ls_real *x, const size_t *slot_of_row,
                         size_t T, size_t k, size_t d);

/* Backward of the gather: dx [T, d] += dxg row i at token slot_of_row[i] / k
 * (accumulates: dx also collects the shared expert's and the router's part). */
void LS_K(ls_moe_scatter_add)(ls_real *dx, const ls_real *dxg, const size_t *slot_of_row,
                              size_t T, size_t k, size_t d);

/* y [T,d] = sum_j w[t,j] eo[row_of_slot[t*k+j]] (+ shared [T,d] when not NULL;
 * shared may be y itself, then the experts' part is added to it). */
void LS_K(ls_moe_combine_forward)(ls_real *y, const ls_real *eo, const ls_real *w,
                                  const ls_real *shared, const size_t *row_of_slot,
                                  size_t T, size_t k, size_t d);

/* Backward of the combine: deo [T*k,d] (grouped rows) = w dy;
 * dw [T,k] = <dy[t], eo[row of (t,j)]>.  Both assigned; either may be NULL.
 * The shared expert's output gradient is dy itself. */
void LS_K(ls_moe_combine_backward)(ls_real *deo, ls_real *dw, const ls_real *dy,
                                   const ls_real *eo, const ls_real *w,
                                   const size_t *row_of_slot, size_t T, size_t k,
                                   size_t d);
#endif
