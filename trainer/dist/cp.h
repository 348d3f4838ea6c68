/* cp.h - context parallelism over the ranks of a communicator group
 * (docs/design.md §4, docs/model.md §0's merge).  Numeric (compiled per real type).
 * The driver here (cp.c) is shared: the shards, finalize and the digest
 * check; the capture and the prompt backward are the family's (family.h
 * cp_*; hybrid: hybrid_cp.c, described below).
 *
 * Shards: the T = P-1 captured prompt positions are split into N contiguous
 * shards, rank r owning [floor(r·T/N), floor((r+1)·T/N)): lengths differ by
 * at most one.  Each rank keeps only its shard's KV
 * pages (right-sized copies) and, for every GDN layer, the global final
 * state (broadcast from rank N-1).
 *
 * What each phase does across ranks (every transfer is a traced collective
 * of the group, purposes in brackets):
 *  - capture, layer by layer (every rank at the same layer), each layer in
 *    chunks of the capture chunk: a GDN layer receives the conv tail and
 *    recurrent state from rank r-1 [state_handoff], runs its shard chunk by
 *    chunk, hands its end state to r+1 [state_handoff]; an attention layer
 *    computes its shard's K/V pages and queries chunk by chunk, passes its
 *    K/V around the ring (N-1 hops, blocks padded to the longest shard)
 *    attending its queries to the earlier ranks' blocks [kv_ring], then runs
 *    each chunk with that remote partial merged in.  Then each GDN layer's
 *    final state is broadcast from rank N-1 [state_broadcast].
 *  - response (rollout, score, replay), replicated: an attention layer
 *    attends the response queries to this rank's pages (and, on rank N-1,
 *    the owner, to the response's own keys), and the global output is one
 *    MAX [lse_max] and two SUM [lse_sum, out_sum] all-reduces.  Backward:
 *    dQ summed [dq_sum]; the owner's dK/dV of the response keys summed
 *    [dkv_sum] so that every rank continues identically.
 *  - prompt backward (`full`), per layer from the top: a GDN layer receives
 *    the gradient of its end state from rank r+1 [state_grad_handoff] (rank
 *    N-1 keeps the replicated responses'), runs its shard backward from its
 *    start state, and hands the gradient of that start state to r-1
 *    [state_grad_handoff]; an attention layer recomputes its remote partial
 *    [kv_ring], runs each chunk's backward up to the attention output's
 *    gradient, then the reverse ring: K/V travel with dK/dV accumulators,
 *    each later rank adds its queries' part and the remote part of its dQ,
 *    and after N hops the accumulators are back with their owner
 *    [dkv_ring]; then each chunk's backward is finished from the last.
 *  - finalize: replicated-path gradients are counted once; the shard-local
 *    gradients of the prompt backward are summed in rank order
 *    [grad_finalize]; then every rank's gradient digest is gathered and
 *    compared [digest_check].
 * Every sum is the communicator's fixed-order sum, so replicated values are
 * bitwise identical on every rank and reruns are bitwise identical.
 *
 * Faults (reproducing known CP bugs; recorded in the receipts' config):
 * skip_dkv_reduce drops [dkv_sum] (the original work's bug: every rank but
 * the owner continues with zero response dK/dV); skip_grad_finalize drops
 * [grad_finalize]; local_attention removes every cross-rank attention term
 * (no ring, no composition: each rank attends only to its own keys);
 * local_dsa (mla only) keeps the composition but selects each rank's DSA
 * top-k from its own keys (mla_cp_attn.h); stale_start (hybrid only, a
 * test-only fault) re-introduces a bug this trainer had: the prompt
 * backward starts its shard from the GDN states the context's last capture
 * received, the reference's when it was kept beside the policy's, instead
 * of its own state's (ls_state.cp_start). */
#ifndef LS_TRAINER_CP_H
#define LS_TRAINER_CP_H
#include "trainer/dist/comm.h"
#include "trainer/model/family.h"

/* The shard rule above. */
static inline void ls_cp_shard(int64_t T, int N, int r, int64_t *s0, int64_t *s1) {
    /* floor(T·r/N) without forming T·r */
    *s0 = (T / N) * r + ((T % N) * r) / N;
    *s1 = (T / N) * (r + 1) + ((T % N) * (r + 1)) / N;
}

typedef struct {
    int skip_dkv_reduce, skip_grad_finalize, local_attention;
    int local_dsa; /* mla: each rank selects its DSA top-k from its own keys (no gather, no dsa_ring) */
    int stale_start; /* hybrid (test only): the prompt backward starts from the last capture's shard start */
    int ep_drop_dx;  /* mla under --ep (test only): the last EP rank returns zero input gradients for its
                        experts' rows (trainer/dist/ep.h) */
} ls_cp_faults;

typedef struct ls_cp_s {
    ls_comm_group *g;
    int rank, world;
    int64_t T, s0, s1, max_shard;
    ls_cp_faults faults;
    const ls_family_ops *fam;
    void *fam_ctx;          /* the family's part of the context (its cp_init allocates it) */
} ls_cp;

/* c for T captured positions on group g (size >= 2; T >= size); the
 * family's part from p (p->fam->cp_init).  LS_ERR_ARG (with err) when the prompt is shorter than
 * the group. */
ls_status LS_K(ls_cp_init)(ls_cp *c, ls_comm_group *g, const ls_params *p, int64_t T, const ls_cp_faults *f,
                           char *err, size_t err_len);
void LS_K(ls_cp_free)(ls_cp *c);

/* Capture this rank's shard of b's prompt with params q into *ps (pages of
 * the shard, global final GDN states; attention layers composed globally
 * from here), checkpoints [n_layers][shard, d] when not NULL. */
ls_status LS_K(ls_cp_capture)(ls_cp *c, const ls_params *q, const int32_t *prompt, size_t page_size, size_t chunk,
                              ls_state *ps, ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook,
                              void *hook_user);
/* `full` mode: the shard's prompt backward driven by dps (consumed). */
ls_status LS_K(ls_cp_prompt_backward)(ls_cp *c, const ls_params *p, const int32_t *prompt, size_t chunk,
                                      ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                      ls_layer_hook hook, void *hook_user);
/* Finalize: p's trainable .g holds the shard-local part, stash (the
 * trainable tensors' replicated gradients, concatenated in tensor order; NULL
 * when there is no shard-local part) the rest: .g = stash + sum over ranks.
 * Then the digest check: *agree = every rank's gradients are bitwise equal. */
ls_status LS_K(ls_cp_finalize)(ls_cp *c, ls_params *p, const ls_real *stash, int *agree);
#endif
