/* hybrid_family.h - the hybrid family (docs/model.md §1): carried state, one layer's
 * forward/backward with an explicit tape, and whole segments.  Numeric
 * (compiled per real type).
 *
 * A *segment* is a run of consecutive positions [pos0, pos0+T) processed
 * through every layer.  It starts from a carried *context* state (the KV
 * pages of the attention layers and the conv tail + recurrent state S of the
 * GDN layers of all positions before pos0; NULL = sequence start) and can
 * hand on its own carried state.  The prompt capture, each response branch,
 * the token-by-token decode and the naive full sequence are all segments;
 * only what they keep differs.
 *
 * Gradients: a segment backward consumes the gradient of its scored
 * log-probs and, optionally, the gradient arriving for the state it handed
 * on, and produces parameter gradients plus, optionally, the gradient of
 * the context state it read (docs/design.md §3 `full` mode). */
#ifndef LS_TRAINER_HYBRID_H
#define LS_TRAINER_HYBRID_H
#include "trainer/base/arena.h"
#include "trainer/families/hybrid/hybrid_config.h"
#include "trainer/model/family.h"
#include "trainer/model/params.h"

/* The structured view of one hybrid layer over the parameter table
 * (p->layers is an array of n_layers of them: ls_hybrid_layers). */
typedef struct {
    int is_attn;
    ls_tensor *norm1, *norm2;
    /* GDN */
    ls_lin in_qkv, in_z, in_b, in_a, out;
    ls_tensor *conv, *A_log, *dt_bias, *gnorm;
    /* attention */
    ls_lin q, k, v, o;
    ls_tensor *q_norm, *k_norm;
    /* MLP */
    ls_lin gate, up, down;
} ls_hybrid_layer;

static inline ls_hybrid_layer *ls_hybrid_layers(const ls_params *p) { return (ls_hybrid_layer *)p->layers; }

/* Context parallelism (docs/design.md §4): the part of an attention layer's
 * context that lives on other ranks, reached through collectives (cp.c).
 * A layer whose context has one calls fwd after attending its queries to
 * the local keys, with (o, lse) [T,H,hd]/[T,H] holding that local partial,
 * and fwd merges the remote part in place (a response: the global MAX/SUM
 * composition; a prompt chunk: the rows of the partial its ls_cp_remote
 * computed).  The backward calls bwd (NULL: none) with the global (o, lse)
 * and the output gradient dout after the local blocks' backward: bwd adds
 * the remote part of dq and of the segment's own dK/dV (the reductions).
 * own_keys 0: this rank does not attend the segment's own keys (a
 * response's keys are owned by one rank) and keeps no pages of them. */
typedef struct ls_cp_attn {
    void *user;
    int own_keys;
    ls_status (*fwd)(void *user, int layer, const ls_real *q, const ls_real *k_own, const ls_real *v_own,
                     size_t T, int64_t pos0, ls_real *o, ls_real *lse);
    ls_status (*bwd)(void *user, int layer, const ls_real *q, const ls_real *k_own, const ls_real *v_own,
                     const ls_real *o, const ls_real *lse, const ls_real *dout, size_t T, int64_t pos0,
                     ls_real *dq, ls_real *dk_own, ls_real *dv_own);
} ls_cp_attn;

/* Per-layer hooks of a context-parallel shard (ls_shard_forward): pre runs
 * before layer l (it may fill the start state's GDN tail/S: the state handed
 * from the previous rank), post after it (it may hand the shard's end state
 * on).  In the prompt backward: pre before layer l's backward (the state
 * gradient from the next rank), post after it. */
typedef struct {
    void *user;
    ls_status (*pre)(void *user, int layer);
    ls_status (*post)(void *user, int layer);
} ls_cp_hooks;

/* The part of a context-parallel shard's attention that lies on the other
 * ranks (cp.c), driven once per attention layer by ls_shard_forward and
 * the prompt backward while the layer runs its shard chunk by chunk:
 * fwd attends the shard's queries q [T,H,hd] (positions pos0..) to the other
 * ranks' keys (own: this rank's state, whose layer pages are the shard's
 * K/V that the others need) and keeps the partial (o, lse) that merge->fwd
 * then folds into each chunk's attention; bwd, given the shard's global
 * o, lse and dout, adds the remote part of dq and adds the other ranks'
 * queries' dK/dV into dk_own/dv_own [T,Hkv,hd] (this shard's keys). */
typedef struct ls_cp_remote {
    void *user;
    const struct ls_cp_attn *merge;
    ls_status (*fwd)(void *user, int layer, const ls_real *q, size_t T, int64_t pos0, size_t chunk,
                     const ls_state *own);
    ls_status (*bwd)(void *user, int layer, const ls_real *q, const ls_real *o, const ls_real *lse,
                     const ls_real *dout, size_t T, int64_t pos0, size_t chunk, const ls_state *own,
                     ls_real *dq, ls_real *dk_own, ls_real *dv_own);
} ls_cp_remote;

/* The hybrid family's carried state (state.h's ls_state: attention layers
 * K/V pages, GDN layers the conv tail and recurrent state as fixed buffers
 * 0 and 1).  init, fork and grad_like fill a state the caller owns,
 * released with ls_hybrid_state_free (ls_state_free); on failure they free
 * what they made.  A fork borrows src's pages: src must outlive it.
 * Empty state (position 0): zero GDN tails and states, no pages. */
ls_status LS_K(ls_hybrid_state_init)(ls_state *s, const ls_params *p, size_t page_size, ls_mem_cat cat);
/* A state that borrows src's pages and owns copies of its GDN tails/states. */
ls_status LS_K(ls_hybrid_state_fork)(ls_state *dst, const ls_state *src, ls_mem_cat cat);
/* Zeroed gradient of src: same pages (owned, sizes equal) and GDN shapes. */
ls_status LS_K(ls_hybrid_state_grad_like)(ls_state *dst, const ls_state *src, ls_mem_cat cat);
void LS_K(ls_hybrid_state_free)(ls_state *s);
/* Bytes the state owns (pages + tails + states), counted from its buffers. */
size_t LS_K(ls_hybrid_state_bytes)(const ls_state *s);
/* Analytical carried-state bytes for n_pos prompt positions (docs/model.md §1). */
size_t LS_K(ls_hybrid_state_analytical_bytes)(const ls_params *p, int64_t n_pos);
/* The same from the config alone (the memory plan, before any parameter
 * is allocated); saturates at SIZE_MAX instead of overflowing. */
size_t LS_K(ls_hybrid_state_plan_bytes)(const ls_model_config *c, int64_t n_pos);

/* Segments (ls_seg_io, ls_seg_tape, ls_layer_hook: family.h); a tape made
 * into *io->tape is the caller's, released with ls_seg_tape_free. */
ls_status LS_K(ls_segment_forward)(const ls_params *p, ls_seg_io *io);

/* Backward of a taped segment.  dlogp [T - score_from] (NULL: zero).
 * The state the segment handed on gets no gradient (branches and the naive
 * sequence are last; the prompt's own backward is ls_prompt_backward).
 * dctx: receives (+=) the gradient of the context state (NULL: detached);
 * its pages must mirror the context's pages; LS_ERR_ARG with a grad_cut.
 * Parameter gradients accumulate into p's trainable tensors. */
ls_status LS_K(ls_segment_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp,
                                    ls_state *dctx, const ls_state *dout, ls_layer_hook hook, void *hook_user);

/* full mode: back-propagate the accumulated prompt-state gradient dstate
 * through the prompt computation, one layer at a time from the top, and
 * within a layer one chunk of `chunk` tokens at a time from the last, each
 * recomputed from the checkpoints the capture kept (window arena in category
 * win_cat).  ps is the captured state (its pages are the keys earlier
 * chunks offer; they must start at chunk boundaries, as a capture with the
 * same chunk leaves them); dstate mirrors it and is consumed (later chunks'
 * contributions are added into earlier pages).  tokens [T] are positions
 * [0, T) (cp NULL) or cp->pos0 + [0, T); chunk 0 means one chunk. */
/* A prompt that is one rank's shard of a context-parallel prompt: its first
 * position, the context state it started from (GDN tails/S handed from the
 * previous rank; attention layers with their ls_cp_attn ring), where the
 * gradient of that start state goes (GDN tails/S, handed back), and the
 * per-layer hooks, and the attention layers' remote keys. */
typedef struct {
    int64_t pos0;
    const ls_state *start;
    ls_state *dstart;
    const ls_cp_hooks *hooks;
    const ls_cp_remote *remote; /* the attention layers' keys elsewhere (NULL: none) */
} ls_prompt_cp;

/* A context-parallel rank's capture of its shard: tokens [T] at positions
 * pos0.., layer by layer (so that the ring of each attention layer meets
 * every rank at the same layer), each layer chunk by chunk (transient
 * buffers stay chunk-sized; chunk 0: one chunk).  start holds the GDN
 * states the shard starts from (hooks->pre fills them from the previous
 * rank); ps (initialised) receives the shard's pages and its GDN end states
 * (hooks->post hands them on); remote (NULL: none) the other ranks' keys;
 * checkpoints [n_layers][T, d] (NULL: none) each layer's input. */
ls_status LS_K(ls_shard_forward)(const ls_params *p, const int32_t *tokens, size_t T, int64_t pos0, size_t chunk,
                                 ls_state *start, ls_state *ps, ls_real **checkpoints, const ls_cp_remote *remote,
                                 const ls_cp_hooks *hooks, ls_layer_hook hook, void *hook_user);

ls_status LS_K(ls_prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                   ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                   ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user,
                                   const ls_prompt_cp *cp);

/* The family table's layout (params.h's ls_param_layout): build lists the tensors of docs/model.md §5 in
 * table order (p NULL: count only), each layer's as the config's descriptor says (ls_hybrid_cfg_is_attn: a family of attention
 * layers only, dense, lists its tensors with it too); ref_view remaps the layer views onto the reference. */
void LS_K(ls_hybrid_build)(ls_param_builder *b, ls_params *p);
void LS_K(ls_hybrid_ref_view)(ls_params *v, const ls_params *p);
/* The family table's prompt_backward (one rank: ls_prompt_backward without a CP shard). */
ls_status LS_K(ls_hybrid_prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                          ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                          ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user);
/* The family table's memory-plan terms (family.h), from the config alone: per layer as
 * ls_hybrid_cfg_is_attn says, so that a family of attention layers only (dense) plans with it too. */
void LS_K(ls_hybrid_plan)(const ls_model_config *c, const ls_family_plan_in *in, ls_family_plan *out);

/* The hybrid family's table (hybrid_table.c; static storage). */
extern const ls_family_ops LS_K(ls_family_hybrid);
#endif
