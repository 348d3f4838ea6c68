/* mla.h - multi-head latent attention (MLA) over one block of keys, with an
 * optional per-query candidate list from the DSA indexer.  docs/model.md §2.1-2.2.
 *
 * The kernels start after the projections: the model code composes q_a/q_b,
 * kv_a, the RMSNorms and the interleaved RoPE, and hands over
 *   q_nope [Tq, H, d_n]   query, no-RoPE part
 *   q_pe   [Tq, H, d_r]   query, RoPE part (already rotated)
 *   c_kv   [Tk, r_kv]     latent keys/values (already normalised)
 *   k_pe   [Tk, d_r]      RoPE key (already rotated), shared by all heads
 *   kv_b   [H*(d_n+d_v), r_kv]  the up-projection; head h's block starts at
 *                         row h*(d_n+d_v): W_UK_h = rows [0, d_n) of the
 *                         block, W_UV_h = rows [d_n, d_n+d_v).
 * and gets back
 *   o      [Tq, H, d_v]   attention output per head (before the o projection)
 *   lse    [Tq, H]        log-normaliser log sum_s exp(z_s) over this block.
 *
 * Score of query t, head h, key s:
 *   z = tau * ( (W_UK_h c_kv,s) . q_nope,t,h + k_pe,s . q_pe,t,h ),
 * tau = d_qk^(-1/2) is passed in.  o = sum_s softmax(z)_s (W_UV_h c_kv,s).
 *
 * Candidates.  With sel == NULL, query t (absolute position q_pos0 + t) sees
 * every key s of the block (absolute position k_pos0 + s) with
 * k_pos0 + s <= q_pos0 + t.  With sel != NULL, sel [Tq, k_sel] lists for each
 * query the key indices LOCAL to this block (0 <= s < Tk) it attends to, -1
 * for an empty slot; an entry must be causal (k_pos0 + s <= q_pos0 + t,
 * asserted) and appear at most once in its row.  ls_dsa_localize (dsa.h) turns
 * the indexer's global positions into such a list for any block.  A row with
 * no candidate in this block gets o = 0 and lse = -INFINITY, so the block
 * merges like any other part (attention.h: ls_attn_merge_into, docs/model.md §0).
 *
 * Two forms compute the same function (they differ in rounding only):
 *   LS_MLA_NAIVE     materialises k_h,s = W_UK_h c_kv,s and v_h,s = W_UV_h c_kv,s
 *                    for every key of the block and head (the reference form);
 *   LS_MLA_ABSORBED  q^_h = W_UK_h^T q_nope,h; z = tau (q^_h . c_kv,s +
 *                    q_pe,h . k_pe,s); o^_h = sum_s P_s c_kv,s; o_h = W_UV_h o^_h.
 *
 * Nothing here allocates: callers pass workspace of the size the *_workspace
 * functions return (in reals).  Inputs are never modified. */
#ifndef LS_KERNELS_MLA_H
#define LS_KERNELS_MLA_H
#include "kernels/real.h"

/* Per-layer MLA head dimensions (docs/model.md §2.1). */
typedef struct {
    size_t H;    /* query heads */
    size_t d_n;  /* no-RoPE query/key dims per head */
    size_t d_r;  /* RoPE dims (q_pe per head, k_pe shared) */
    size_t d_v;  /* value dims per head */
    size_t r_kv; /* latent rank of c_kv */
} ls_mla_dims;

typedef enum { LS_MLA_NAIVE = 0, LS_MLA_ABSORBED = 1 } ls_mla_form;

/* Reals of workspace ls_mla_forward needs for a block of Tk keys and rows of
 * k_sel candidates (pass k_sel = 0 when sel is NULL).  Independent of Tq. */
size_t LS_K(ls_mla_forward_workspace)(ls_mla_form form, size_t Tk, size_t k_sel,
                                      const ls_mla_dims *dims);

/* Forward over one block: o [Tq,H,d_v] and lse [Tq,H] assigned.
 * sel [Tq,k_sel] may be NULL (causal over all keys of the block). */
void LS_K(ls_mla_forward)(ls_real *o, ls_real *lse,
                          const ls_real *q_nope, const ls_real *q_pe,
                          const ls_real *c_kv, const ls_real *k_pe,
                          const ls_real *kv_b, const int64_t *sel, size_t k_sel,
                          size_t Tq, size_t Tk, const ls_mla_dims *dims,
                          int64_t q_pos0, int64_t k_pos0, ls_real tau,
                          ls_mla_form form, ls_real *workspace);

/* Reals of workspace ls_mla_backward needs (same arguments as above). */
size_t LS_K(ls_mla_backward_workspace)(ls_mla_form form, size_t Tk, size_t k_sel,
                                       const ls_mla_dims *dims);

/* Backward over one block, given the GLOBAL output o [Tq,H,d_v] and
 * log-normaliser lse [Tq,H] (over every block / rank the queries attend to,
 * e.g. after ls_attn_merge_into) and the output gradient do_ [Tq,H,d_v]:
 * P = exp(z - lse), D = rowsum(do_ * o), dZ = P (dP - D).
 * Accumulates (+=) into dq_nope [Tq,H,d_n], dq_pe [Tq,H,d_r], dc_kv [Tk,r_kv],
 * dk_pe [Tk,d_r] and dkv_b [H*(d_n+d_v), r_kv]; each may be NULL (not wanted).
 * The caller zeroes them once and sums over blocks.  Rows with
 * lse = -INFINITY are skipped.  The gradient of lse itself is not propagated
 * (the loss depends on o only). */
void LS_K(ls_mla_backward)(ls_real *dq_nope, ls_real *dq_pe, ls_real *dc_kv,
                           ls_real *dk_pe, ls_real *dkv_b,
                           const ls_real *o, const ls_real *lse, const ls_real *do_,
                           const ls_real *q_nope, const ls_real *q_pe,
                           const ls_real *c_kv, const ls_real *k_pe,
                           const ls_real *kv_b, const int64_t *sel, size_t k_sel,
                           size_t Tq, size_t Tk, const ls_mla_dims *dims,
                           int64_t q_pos0, int64_t k_pos0, ls_real tau,
                           ls_mla_form form, ls_real *workspace);
#endif
