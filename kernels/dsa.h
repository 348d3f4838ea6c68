/* dsa.h - DeepSeek sparse attention: the lightning indexer's scores, the
 * per-query top-k selection, and the merge of several top-k lists into the
 * global top-k (how context parallelism selects globally, docs/design.md §4).
 * docs/model.md §2.2 and the tie rule of §0.
 *
 * The model code composes the indexer projections, the LayerNorm and the NeoX
 * RoPE and hands over
 *   q_I [Tq, H_I, d_I]   indexer queries (rotated)
 *   w   [Tq, H_I]        head weights, ALREADY scaled by H_I^(-1/2) d_I^(-1/2)
 *   k_I [Tk, d_I]        indexer keys of one block (normalised, rotated)
 * Score of query t against key s: I[t,s] = sum_h w[t,h] ReLU(q_I[t,h,:].k_I[s,:]).
 * Query t sits at absolute position q_pos0 + t, key s at k_pos0 + s; key s is
 * visible to query t iff k_pos0 + s <= q_pos0 + t.
 *
 * Selection lists: sel_pos [Tq, k_top] global positions (int64), best first
 * (score descending, then position ascending); sel_score [Tq, k_top] the
 * matching scores.  A query that sees n keys gets min(k_top, n) entries; the
 * remaining slots hold position -1 and score -INFINITY.  Scores must not be NaN.
 * Everything is deterministic: the result does not depend on how the keys are
 * split into blocks (ls_dsa_merge of per-block lists equals one selection).
 * Nothing here allocates; no gradient flows through the indexer. */
#ifndef LS_KERNELS_DSA_H
#define LS_KERNELS_DSA_H
#include "kernels/real.h"

/* Indexer scores of a block: I [Tq, Tk] assigned, -INFINITY where key s is
 * not visible to query t. */
void LS_K(ls_dsa_scores)(ls_real *I, const ls_real *q_I, const ls_real *w,
                         const ls_real *k_I, size_t Tq, size_t Tk, size_t H_I,
                         size_t d_I, int64_t q_pos0, int64_t k_pos0);

/* Top-k of each row of a score matrix I [Tq, Tk] (entries equal to -INFINITY
 * are treated as invisible and never selected).  Key s has global position
 * k_pos0 + s.  sel_pos, sel_score [Tq, k_top] assigned (both required). */
void LS_K(ls_dsa_select)(int64_t *sel_pos, ls_real *sel_score, const ls_real *I,
                         size_t Tq, size_t Tk, size_t k_top, int64_t k_pos0);

/* Reals of workspace ls_dsa_topk needs for a block of Tk keys. */
size_t LS_K(ls_dsa_topk_workspace)(size_t Tk);

/* Scores and top-k in one pass, one query row at a time (no [Tq, Tk] matrix):
 * equal to ls_dsa_scores followed by ls_dsa_select.  sel_pos, sel_score
 * [Tq, k_top] assigned (both required). */
void LS_K(ls_dsa_topk)(int64_t *sel_pos, ls_real *sel_score, const ls_real *q_I,
                       const ls_real *w, const ls_real *k_I, size_t Tq, size_t Tk,
                       size_t H_I, size_t d_I, int64_t q_pos0, int64_t k_pos0,
                       size_t k_top, ls_real *workspace);

/* Merge n_lists candidate lists for the same Tq queries into the top k_top:
 * list r is cand_pos[r], cand_score[r], each [Tq, k_in] (e.g. rank r's local
 * top-k over its own keys; -1 slots are skipped).  The lists must cover
 * disjoint key sets.  sel_pos, sel_score [Tq, k_top] assigned; they must not
 * alias any input.  If each list is the top-k_top of its key set, the result
 * is the top-k_top over the union. */
void LS_K(ls_dsa_merge)(int64_t *sel_pos, ls_real *sel_score,
                        const int64_t *const *cand_pos,
                        const ls_real *const *cand_score, size_t n_lists,
                        size_t Tq, size_t k_in, size_t k_top);

/* The candidate list of one key block for ls_mla_forward/backward (mla.h):
 * sel_local[t,j] = sel_pos[t,j] - k_pos0 if that lies in [0, Tk), else -1.
 * Both [Tq, k].  May not alias. */
void LS_K(ls_dsa_localize)(int64_t *sel_local, const int64_t *sel_pos, size_t Tq,
                           size_t k, int64_t k_pos0, size_t Tk);
#endif
