/* mla_cp_attn.h - the mla family's attention across the ranks of a context-
 * parallel group (docs/design.md §4 "MLA/DSA", docs/model.md §0 merge and tie rule,
 * §2.1-2.2): the GLOBAL DSA selection and the MAX/SUM composition of MLA
 * over the ranks' carried rows.  Numeric (LS_K names, compiled per real
 * type).  The mla segments call it under CP; it knows nothing of layers'
 * parameters beyond kv_b.
 *
 * Carried rows.  Each rank holds, per layer, its shard's rows as blocks of
 * consecutive positions (ls_mla_cp_rows): c_kv [n, r_kv] (after its norm),
 * k_pe [n, d_r] (after RoPE), the indexer key k_I [n, d_I], at positions
 * pos0 .. pos0+n-1.  Rank r's shard is ls_cp_shard (cp.h) of the captured
 * positions.
 *
 * Response attention (replicated: every rank calls with the same queries,
 * the same response rows and the same kv_b):
 *  - selection: each rank's top-k over its blocks (ls_dsa_topk per block,
 *    ls_dsa_merge), all-gathered [dsa_topk_gather: positions, then scores],
 *    merged by the tie rule (ls_dsa_merge over the lists in rank order):
 *    the global top-k, the same bits on every rank;
 *  - attention: each rank attends to the selected positions it holds
 *    (ls_dsa_localize + ls_mla_forward per block, merged locally); the
 *    response's own rows are held by the owner, the last rank, only; the
 *    global (o, lse) is one MAX [lse_max] and two SUM [lse_sum, out_sum]
 *    all-reduces (the communicator's fixed-order sums: bitwise identical on
 *    every rank);
 *  - backward, given the global o, lse and dout: ls_mla_backward per block
 *    with the same selection; dq summed [dq_sum]; the gradient of the
 *    rank's shard rows stays on the rank (its prompt-state gradient); the
 *    owner's gradient of the response rows summed [dkv_sum] so every rank
 *    continues identically.
 *
 * Prompt capture (the shard's queries at positions s0..s1-1, causal):
 *  - selection: a ring of the indexer keys [dsa_ring] (N-1 hops, blocks
 *    padded to the longest shard): each rank merges the top-k of its queries
 *    over every earlier rank's keys into its own-shard top-k: the global
 *    top-k over all visible positions;
 *  - forward: a ring of the latent rows [kv_ring] computing the partial
 *    (o, lse) over the selected positions of earlier ranks; with own != 0
 *    the own-shard part is merged in too (else the caller merges it);
 *  - backward (`full` mode): the reverse ring [dkv_ring] (N hops): rows
 *    travel with dc_kv/dk_pe accumulators, each later rank adds its queries'
 *    part, and after N hops the accumulators are home and join the owner's
 *    gradient of its rows.
 *
 * kv_b's gradient.  dkv_b here is this rank's LOCAL part (over the positions
 * it attended to: its shard rows and, on the owner, the response rows).  It
 * is a shard-local gradient: the caller keeps it in the trainable's .g (not
 * in the replicated stash) so that finalize (cp.h ls_cp_finalize) sums it
 * over ranks in rank order [grad_finalize], in `detached` mode too (unlike
 * the hybrid family, whose detached step has no shard-local part).
 *
 * The fault cp-local-dsa (ls_mla_cp.local_dsa, the original work's level-2
 * gap): no selection crosses ranks.  Response: each rank's selection is its
 * local top-k (no gather; sel differs by rank) and the composition is
 * unchanged (so the queries attend to the union of the ranks' local
 * top-k).  Prompt: the selection is the own shard's top-k (no [dsa_ring]),
 * so the ring's remote partial is empty.
 *
 * Every collective is a traced collective of ls_mla_cp.g with the layer
 * given; every rank of the group makes the same calls (the same counts), so
 * the events match one to one.  Temporary memory (category communication):
 * the gathered lists O(N·T·k) and O(T·H·(d_v + d_n + d_r)) for the
 * response, two padded row blocks (with the reverse ring's accumulators)
 * plus O(T·(k + H·d_v)) for the rings; the kernels' workspaces (scratch).
 *
 * Errors: LS_ERR_ARG (ls_mla_cp.err names the argument) for a NULL or
 * inconsistent argument (refused before any collective, so every rank
 * refuses alike), LS_ERR_NOMEM, or the communicator's status (err names the
 * collective; the library's reason is in ls_comm_last_error).  After an
 * error the outputs are unspecified; a rank that cannot go on aborts the
 * job (comm.h). */
#ifndef LS_TRAINER_MLA_CP_H
#define LS_TRAINER_MLA_CP_H
#include "common/status.h"
#include "kernels/mla.h"
#include "trainer/dist/comm.h"

/* The context of one layer's attention (the caller fills it; nothing
 * allocated). */
typedef struct {
    ls_comm_group *g;    /* the CP group; its size N >= 1, this rank its rank */
    ls_mla_dims dims;    /* H, d_n, d_r, d_v, r_kv */
    size_t H_I, d_I;     /* indexer heads and dims */
    size_t k_top;        /* DSA candidates per query (>= 1) */
    ls_real tau;         /* d_qk^(-1/2) */
    ls_mla_form form;    /* LS_MLA_NAIVE or LS_MLA_ABSORBED */
    int64_t T;           /* captured prompt positions (the shards: ls_cp_shard(T, N, r)) */
    int local_dsa;       /* the fault cp-local-dsa */
    int skip_dkv_reduce; /* the fault skip-dkv-reduce: no [dkv_sum] (only the owner keeps the response rows'
                            gradient) */
    char err[192];       /* the reason of the last error */
} ls_mla_cp;

/* One block of carried rows at positions pos0 .. pos0+n-1.  k_I is needed by
 * the selection only (may be NULL in the attention and backward calls). */
typedef struct {
    const ls_real *c_kv; /* [n, r_kv] */
    const ls_real *k_pe; /* [n, d_r] */
    const ls_real *k_I;  /* [n, d_I] */
    int64_t pos0;
    size_t n;
} ls_mla_cp_rows;

/* The gradient of a block's rows, accumulated (+=); either may be NULL. */
typedef struct {
    ls_real *dc_kv; /* [n, r_kv] */
    ls_real *dk_pe; /* [n, d_r] */
} ls_mla_cp_drows;

/* T queries at positions pos0 .. pos0+T-1.  q_I and w feed the selection
 * only (may be NULL in the attention and backward calls). */
typedef struct {
    const ls_real *q_nope; /* [T, H, d_n] */
    const ls_real *q_pe;   /* [T, H, d_r] (rotated) */
    const ls_real *q_I;    /* [T, H_I, d_I] (rotated) */
    const ls_real *w;      /* [T, H_I], already scaled */
    int64_t pos0;
    size_t T;
} ls_mla_cp_queries;

/* ---- response (replicated) ------------------------------------------------ */

/* The global top-k of the response queries q over every rank's rows:
 * blk[0..n_blk) this rank's shard blocks, resp the response's own rows
 * (every rank passes them; only the last rank selects from them; NULL or
 * n = 0: none).  sel [T, k_top] global positions, best first, -1 padded:
 * the same on every rank (with the fault: this rank's local top-k). */
ls_status LS_K(ls_mla_cp_response_select)(ls_mla_cp *c, int64_t *sel, const ls_mla_cp_queries *q,
                                          const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp,
                                          int layer);

/* The global attention of q over the positions sel selects (from
 * ls_mla_cp_response_select): o [T, H, d_v], lse [T, H] assigned, the same
 * bits on every rank.  kv_b [H(d_n+d_v), r_kv]. */
ls_status LS_K(ls_mla_cp_response_forward)(ls_mla_cp *c, ls_real *o, ls_real *lse, const ls_mla_cp_queries *q,
                                           const int64_t *sel, const ls_mla_cp_rows *blk, size_t n_blk,
                                           const ls_mla_cp_rows *resp, const ls_real *kv_b, int layer);

/* Backward given the global o, lse (response_forward's) and dout
 * [T, H, d_v].  dq_nope [T,H,d_n], dq_pe [T,H,d_r] ASSIGNED (the global
 * gradient, the same on every rank); dblk[i] (n_blk entries, may be NULL)
 * accumulates this rank's shard-row gradients; dresp (may be NULL only when
 * resp has no rows) accumulates the response rows' gradient, the same on
 * every rank; dkv_b (may be NULL) accumulates this rank's local part. */
ls_status LS_K(ls_mla_cp_response_backward)(ls_mla_cp *c, ls_real *dq_nope, ls_real *dq_pe,
                                            const ls_mla_cp_drows *dblk, const ls_mla_cp_drows *dresp,
                                            ls_real *dkv_b, const ls_real *o, const ls_real *lse,
                                            const ls_real *dout, const ls_mla_cp_queries *q, const int64_t *sel,
                                            const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp,
                                            const ls_real *kv_b, int layer);

/* ---- prompt capture ------------------------------------------------------- */

/* The global top-k of this rank's shard queries q (positions inside the
 * shard [s0, s1): all of them, or a chunk, every rank calling as often) over
 * every visible position: own is the shard's rows (own->pos0 = s0, own->n =
 * s1 - s0, k_I required).  sel [T, k_top] global positions. */
ls_status LS_K(ls_mla_cp_prompt_select)(ls_mla_cp *c, int64_t *sel, const ls_mla_cp_queries *q,
                                        const ls_mla_cp_rows *own, int layer);

/* The shard queries' attention over the positions of sel held by earlier
 * ranks (the ring [kv_ring]): o [T,H,d_v], lse [T,H] assigned (rows without
 * a remote candidate: o = 0, lse = -INFINITY); with with_own != 0 the own
 * shard's part is merged in, giving the global (o, lse). */
ls_status LS_K(ls_mla_cp_prompt_forward)(ls_mla_cp *c, ls_real *o, ls_real *lse, const ls_mla_cp_queries *q,
                                         const int64_t *sel, const ls_mla_cp_rows *own, const ls_real *kv_b,
                                         int with_own, int layer);

/* `full`-mode backward of the shard queries' attention, given the GLOBAL o,
 * lse and dout [T,H,d_v] (the reverse ring [dkv_ring]): dq_nope, dq_pe
 * accumulate the remote part (with with_own also the own part); down (may be
 * NULL) accumulates the gradient of the shard's rows from every later rank's
 * queries (with with_own also from its own); dkv_b (may be NULL) this rank's
 * local part (its queries against the rows they select). */
ls_status LS_K(ls_mla_cp_prompt_backward)(ls_mla_cp *c, ls_real *dq_nope, ls_real *dq_pe,
                                          const ls_mla_cp_drows *down, ls_real *dkv_b, const ls_real *o,
                                          const ls_real *lse, const ls_real *dout, const ls_mla_cp_queries *q,
                                          const int64_t *sel, const ls_mla_cp_rows *own, const ls_real *kv_b,
                                          int with_own, int layer);
#endif
