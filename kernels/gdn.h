/* gdn.h - the Gated DeltaNet recurrence and its gates.  docs/model.md §1.1.
 *
 * Layouts (token-major): q, k [T, Hk, dk]; v [T, Hv, dv]; g, beta [T, Hv];
 * state S [Hv, dk, dv]; o [T, Hv, dv].  Value head j uses key head
 * j / (Hv/Hk).  q here is already normalised and scaled (q~ of step 4).
 * S_in may be NULL (zero state).  Nothing in this module allocates: callers
 * pass workspace sized by the *_workspace functions. */
#ifndef LS_KERNELS_GDN_H
#define LS_KERNELS_GDN_H
#include "kernels/real.h"

/* beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias).  b, a [T, Hv]. */
void LS_K(ls_gdn_gates_forward)(ls_real *g, ls_real *beta, const ls_real *a,
                                const ls_real *b, const ls_real *A_log,
                                const ls_real *dt_bias, size_t T, size_t Hv);
/* da, db [T,Hv] assigned; dA_log, ddt_bias [Hv] += (NULL allowed). */
void LS_K(ls_gdn_gates_backward)(ls_real *da, ls_real *db, ls_real *dA_log,
                                 ls_real *ddt_bias, const ls_real *dg,
                                 const ls_real *dbeta, const ls_real *a,
                                 const ls_real *b, const ls_real *A_log,
                                 const ls_real *dt_bias, size_t T, size_t Hv);

/* Forward: o [T,Hv,dv]; S_out [Hv,dk,dv] final state (may be NULL; may be
 * S_in itself, updated in place).  Takes the chunked form for T >= 64 when
 * dk dv >= 6144 (where it is the faster), the token recurrence otherwise;
 * the two are the same function to rounding. */
void LS_K(ls_gdn_forward)(ls_real *o, ls_real *S_out, const ls_real *q,
                          const ls_real *k, const ls_real *v, const ls_real *g,
                          const ls_real *beta, const ls_real *S_in,
                          size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv);

/* The token recurrence (rank-1 updates, no scratch): the reference. */
void LS_K(ls_gdn_forward_recurrent)(ls_real *o, ls_real *S_out, const ls_real *q,
                                    const ls_real *k, const ls_real *v, const ls_real *g,
                                    const ls_real *beta, const ls_real *S_in, size_t T,
                                    size_t Hk, size_t Hv, size_t dk, size_t dv);

/* The chunked form, any T: chunks of 64 tokens (WY representation / UT
 * transform, CBLAS GEMMs; exact to rounding against the recurrence).
 * Scratch comes from the kernels' allocator (kernels/scratch.h), O(Hv
 * (state + chunk)); if it fails, the token recurrence runs. */
void LS_K(ls_gdn_forward_chunked)(ls_real *o, ls_real *S_out, const ls_real *q,
                                  const ls_real *k, const ls_real *v, const ls_real *g,
                                  const ls_real *beta, const ls_real *S_in, size_t T,
                                  size_t Hk, size_t Hv, size_t dk, size_t dv);

/* Reals of workspace ls_gdn_backward needs (the backwards recompute states
 * per segment from checkpoints, so this grows like T/segment + segment
 * states, the segment about sqrt(T) tokens, not T); the other two are what
 * ls_gdn_backward_recurrent and ls_gdn_backward_chunked need. */
size_t LS_K(ls_gdn_backward_workspace)(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv);
size_t LS_K(ls_gdn_backward_recurrent_workspace)(size_t T, size_t Hk, size_t Hv, size_t dk,
                                                 size_t dv);
size_t LS_K(ls_gdn_backward_chunked_workspace)(size_t T, size_t Hk, size_t Hv, size_t dk,
                                               size_t dv);

/* Backward.  dS_out [Hv,dk,dv] gradient arriving for the final state (NULL: zero).
 * dq, dk [T,Hk,dk], dv [T,Hv,dv], dg, dbeta [T,Hv] assigned;
 * dS_in [Hv,dk,dv] assigned (NULL: not wanted).  The chunked form for
 * T >= 64 when dk dv >= 2304, token by token otherwise. */
void LS_K(ls_gdn_backward)(ls_real *dq, ls_real *dk, ls_real *dv, ls_real *dg,
                           ls_real *dbeta, ls_real *dS_in, const ls_real *do_,
                           const ls_real *dS_out, const ls_real *q, const ls_real *k,
                           const ls_real *v, const ls_real *g, const ls_real *beta,
                           const ls_real *S_in, size_t T, size_t Hk, size_t Hv,
                           size_t dk_, size_t dv_, ls_real *workspace);

/* The backward token by token (the reference). */
void LS_K(ls_gdn_backward_recurrent)(ls_real *dq, ls_real *dk, ls_real *dv, ls_real *dg,
                                     ls_real *dbeta, ls_real *dS_in, const ls_real *do_,
                                     const ls_real *dS_out, const ls_real *q,
                                     const ls_real *k, const ls_real *v, const ls_real *g,
                                     const ls_real *beta, const ls_real *S_in, size_t T,
                                     size_t Hk, size_t Hv, size_t dk_, size_t dv_,
                                     ls_real *workspace);

/* The backward of the chunked form, any T (GEMMs per chunk of 64 tokens;
 * exact to rounding against the recurrence's backward). */
void LS_K(ls_gdn_backward_chunked)(ls_real *dq, ls_real *dk, ls_real *dv, ls_real *dg,
                                   ls_real *dbeta, ls_real *dS_in, const ls_real *do_,
                                   const ls_real *dS_out, const ls_real *q, const ls_real *k,
                                   const ls_real *v, const ls_real *g, const ls_real *beta,
                                   const ls_real *S_in, size_t T, size_t Hk, size_t Hv,
                                   size_t dk_, size_t dv_, ls_real *workspace);
#endif
