/* attention.h - softmax attention over one block of keys or over a list of
 * blocks (the pages of a paged KV cache and the queries' own keys) in one
 * pass, their backward given the global output and log-normaliser, and the
 * partial-attention merge.
 * docs/model.md §0.  This is what paged KV and context parallelism are built on.
 *
 * Layouts: q [Tq, H, hd]; k, v [Tk, Hkv, hd]; o [Tq, H, hd]; lse [Tq, H].
 * Query head h uses kv head h / (H/Hkv).  Query t sits at absolute position
 * q_pos0 + t, key s at k_pos0 + s; with causal != 0 key s is visible to query
 * t iff k_pos0 + s <= q_pos0 + t.  A row that sees no key gets o = 0 and
 * lse = -INFINITY.
 *
 * The forwards and backwards run OpenMP threads (one parallel region per
 * call) and CBLAS GEMMs (each small enough that OpenBLAS keeps it on the
 * calling thread).  Each thread
 * takes its scratch (tiles: under 200 KB for the shipped float32 configs,
 * about 1 MB at most for head dims of 16 or more; independent of Tq and Tk)
 * from the kernels' scratch allocator (kernels/scratch.h) and releases it
 * before the call returns; where that fails it falls back to a path that
 * allocates nothing.  The results are the same bits for any number of
 * threads. */
#ifndef LS_KERNELS_ATTENTION_H
#define LS_KERNELS_ATTENTION_H
#include "kernels/real.h"

/* One block of keys and values: k, v [n, Hkv, hd]; key s sits at absolute
 * position pos0 + s.  The caller owns the arrays (read only). */
typedef struct {
    const ls_real *k, *v;
    size_t n;
    int64_t pos0;
} ls_attn_kv_block;

/* Where the backward adds one block's key and value gradients, [n, Hkv, hd]
 * each like the block's k, v; either may be NULL (not wanted). */
typedef struct {
    ls_real *dk, *dv;
} ls_attn_kv_grad;

void LS_K(ls_attn_block_forward)(ls_real *o, ls_real *lse, const ls_real *q,
                                 const ls_real *k, const ls_real *v,
                                 size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                 int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau);

/* Backward over one block, given the GLOBAL output o and log-normaliser lse
 * (over all blocks) and the output gradient do_.  Accumulates (+=) into dq,
 * dk, dv (each may be NULL), so the caller zeroes them and sums over blocks. */
void LS_K(ls_attn_block_backward)(ls_real *dq, ls_real *dk, ls_real *dv,
                                  const ls_real *do_, const ls_real *q,
                                  const ls_real *k, const ls_real *v,
                                  const ls_real *o, const ls_real *lse,
                                  size_t Tq, size_t Tk, size_t H, size_t Hkv, size_t hd,
                                  int64_t q_pos0, int64_t k_pos0, int causal, ls_real tau);

/* Attention over the keys of all nb blocks of kv together (as if their keys
 * were one block; kv may be NULL when nb = 0), in one online-softmax pass per
 * query tile and one OpenMP parallel region: o [Tq, H, hd] and lse [Tq, H]
 * as ls_attn_block_forward over the concatenated keys, up to rounding.  The
 * blocks may have any lengths (0 too) and positions; with causal != 0 key s
 * of block b is visible to query t iff kv[b].pos0 + s <= q_pos0 + t.
 * ls_attn_block_forward is this with one block. */
void LS_K(ls_attn_paged_forward)(ls_real *o, ls_real *lse, const ls_real *q,
                                 const ls_attn_kv_block *kv, size_t nb,
                                 size_t Tq, size_t H, size_t Hkv, size_t hd,
                                 int64_t q_pos0, int causal, ls_real tau);

/* Backward of ls_attn_paged_forward given the global o and lse: accumulates
 * (+=) the query gradient over all blocks into dq (NULL: skip) and each
 * block's key and value gradients into dkv[b].dk, dkv[b].dv (dkv NULL: none
 * wanted; the buffers of different blocks must not overlap), in one pass and
 * one parallel region.  Deterministic: the same bits
 * for any number of threads (every output row has one owner and adds its
 * terms in a fixed order). */
void LS_K(ls_attn_paged_backward)(ls_real *dq, const ls_attn_kv_grad *dkv,
                                  const ls_real *do_, const ls_real *q,
                                  const ls_attn_kv_block *kv, size_t nb,
                                  const ls_real *o, const ls_real *lse,
                                  size_t Tq, size_t H, size_t Hkv, size_t hd,
                                  int64_t q_pos0, int causal, ls_real tau);

/* Merge a part (o_p, lse_p) into an accumulator (o, lse) in place; rows [n],
 * each of width hd.  An accumulator row with lse = -INF takes the part. */
void LS_K(ls_attn_merge_into)(ls_real *o, ls_real *lse, const ls_real *o_p,
                              const ls_real *lse_p, size_t n, size_t hd);

/* Backward of the merge for one part: given the merged (o, lse) and its
 * gradients (do_, dlse; dlse may be NULL = zero), the part's gradients:
 * do_p = w do_, dlse_p = w (do_ . (o_p - o) + dlse) with w = exp(lse_p - lse). */
void LS_K(ls_attn_merge_backward)(ls_real *do_p, ls_real *dlse_p, const ls_real *do_,
                                  const ls_real *dlse, const ls_real *o_p,
                                  const ls_real *lse_p, const ls_real *o,
                                  const ls_real *lse, size_t n, size_t hd);
#endif
