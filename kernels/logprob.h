/* logprob.h - the fused lm_head + log-softmax gathered at target tokens,
 * chunked over the vocabulary so that at most T x chunk logits exist at once.
 *
 * h [T, d] final hidden states, W [V, d] lm_head, y [T] targets (< V).
 * logits = h W^T / temp; logp[t] = logits[t, y_t] - lse[t]. */
#ifndef LS_KERNELS_LOGPROB_H
#define LS_KERNELS_LOGPROB_H
#include "kernels/real.h"

/* Reals of scratch for a vocabulary chunk of `chunk` columns over T rows. */
size_t LS_K(ls_logprob_workspace)(size_t T, size_t chunk);

/* logp [T], lse [T] (saved for backward). */
void LS_K(ls_logprob_forward)(ls_real *logp, ls_real *lse, const ls_real *h,
                              const ls_real *W, const int32_t *y, ls_real temp,
                              size_t T, size_t d, size_t V, size_t chunk,
                              ls_real *workspace);

/* Given dlogp [T]: dh [T, d] assigned; dW [V, d] += (NULL allowed).
 * d logits[t,v] = dlogp[t] * (1[v = y_t] - softmax_v) / temp. */
void LS_K(ls_logprob_backward)(ls_real *dh, ls_real *dW, const ls_real *dlogp,
                               const ls_real *h, const ls_real *W, const int32_t *y,
                               const ls_real *lse, ls_real temp, size_t T, size_t d,
                               size_t V, size_t chunk, ls_real *workspace);

/* Full row of log-probabilities for sampling: logp_row [V] for one hidden row. */
void LS_K(ls_logprob_row)(ls_real *logp_row, const ls_real *h, const ls_real *W,
                          ls_real temp, size_t d, size_t V);
#endif
