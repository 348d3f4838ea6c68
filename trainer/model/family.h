/* family.h - the seam between the shared trainer and a model family.
 * Numeric (compiled per real type).
 *
 * The transaction (step.c, step_txn.c), the context-parallel driver (cp.c),
 * the memory plan (run_plan.c), the parameter table (params.c) and the
 * tools on top of it (checkpoints, dumps, digests, parity) are shared by
 * every family.  What differs per family is behind one const table of
 * function pointers, ls_family_ops, chosen from the config's "family" key
 * (ls_family_ops_of, trainer/families/families.h).  A family implements:
 *  - its tensor list (docs/model.md §5 names, shapes, initialisation, which are
 *    adapters, the LoRA targets) through the parameter builder of params.h,
 *    and the structured per-layer views over the table (p->layers), for
 *    the policy and for the reference-policy view;
 *  - its carried state (init, fork, gradient-like copy, free, bytes, the
 *    analytical / planned bytes) in the shared container ls_state (state.h,
 *    which lists each family's slots);
 *  - segments: forward (prompt capture chunks, response scoring, decode
 *    steps, the naive sequence), their taped backward, and the `full`-mode
 *    backward through the prompt computation;
 *  - its context parallelism (cp.h: init/free of its part of ls_cp, the
 *    sharded capture, the sharded prompt backward; finalize is shared);
 *  - its terms of the memory plan.
 * Hybrid: hybrid_table.c (the table), hybrid*.c (the math).  Mla:
 * mla_table.c (the tensor list, layer views, the table), mla_segment.c
 * (carried state, segments, prompt backward), mla_layer.c (one block),
 * mla_cp.c (its context parallelism, over mla_cp_attn.c);
 * mla_forward.c (a second, tape-free forward: ls_mla_logprobs).  Dense:
 * trainer/families/dense/dense_table.c (the table; the math is the hybrid's). */
#ifndef LS_TRAINER_FAMILY_H
#define LS_TRAINER_FAMILY_H
#include <math.h>
#include <stddef.h>
#include <time.h>

#include "trainer/base/arena.h"
#include "trainer/model/params.h"
#include "trainer/model/state.h"

/* ---- segments -------------------------------------------------------------- */
typedef struct ls_seg_tape ls_seg_tape;
/* Both families' tapes (seg_frame.c): release one (NULL: nothing); the bytes it holds. */
void LS_K(ls_seg_tape_free)(ls_seg_tape *t);
size_t LS_K(ls_seg_tape_bytes)(const ls_seg_tape *t);

/* Per-layer observation hook (trace layer_end events): called after each
 * layer's forward or backward with the layer index (-1 embedding, n_layers
 * head), direction (0 fwd, 1 bwd), token count, wall ns and output norm. */
typedef void (*ls_layer_hook)(void *user, int layer, int dir, size_t tokens, int64_t wall_ns,
                              double out_norm);

/* What the families' segments hand their hooks: a monotonic clock in ns and
 * the L2 norm of a layer's output (accumulated in double). */
static inline int64_t ls_hook_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static inline double ls_hook_l2(const ls_real *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

typedef struct {
    const int32_t *tokens;   /* [T] input ids */
    size_t T;
    int64_t pos0;
    const ls_state *ctx;     /* context state (NULL: sequence start) */
    ls_state *state_out;     /* appends this segment's pages and sets the fixed buffers (may equal
                                ctx for in-place decode) (NULL: not kept) */
    ls_real **checkpoints;   /* [n_layers] arrays [T, d]: each layer's input (NULL: not kept) */
    const int32_t *targets;  /* [T - score_from] scored tokens (NULL: no scoring) */
    size_t score_from;
    ls_real *logp;           /* [T - score_from] log-probs out */
    ls_real *last_hidden;    /* [d] normed final hidden state of the last position (NULL: no) */
    ls_seg_tape **tape;      /* autograd tape out (NULL: no autograd): the caller's, freed with the
                                family's tape_free */
    ls_mem_cat tape_cat;     /* category of the tape (branch_graph, scratch ...) */
    size_t grad_cut;         /* with a tape: in the backward no gradient flows from tokens [grad_cut, T)
                                into tokens [0, grad_cut) through the mixers (attention keys' dK/dV, the
                                GDN state and conv inputs); weight gradients at [grad_cut, T) are kept.
                                The state at the cut is then a constant: the stop-gradient reference of
                                `detached` mode.  0: no cut; else < T */
    int checkpointed;        /* with a tape: keep each layer's input, not its tape, and rebuild the layer's tape
                                from it during the backward (--replay-checkpoint layer; seg_frame.h): the same
                                operations in the same order, so the same gradients bit for bit, for about
                                L*T*d stored values plus one layer's tape */
    ls_layer_hook hook;
    void *hook_user;
} ls_seg_io;

/* ---- the memory plan's family terms (trainer/plan/plan.h assembles them) ----
 * A family states, in closed form from its config, what its code allocates:
 * its prompt state by part, and the transients of one capture chunk, one
 * member's scoring, decode and replay, and the full-mode prompt backward's
 * window, per memory category, as its allocation sites request them (arena
 * requests rounded to 64 bytes).  Element sizes are inputs (a device plan in
 * bf16 uses the same formulas).  Saturating: SIZE_MAX when a term overflows. */
typedef struct {
    size_t shard;      /* prompt positions this rank captures (P - 1 on one rank) */
    size_t chunk;      /* capture and recompute chunk (<= shard) */
    size_t R;          /* the longest response */
    size_t G;          /* group size */
    int world;         /* context-parallel ranks */
    int cp_rank;       /* this rank's CP index (-1: the rank that holds the most) */
    int ep;            /* mla: expert-parallel ranks (0 or 1: none): the routed experts' exchange buffers */
    size_t moe_chunk;  /* mla: tokens per MoE dispatch chunk (0: the trainer's; SIZE_MAX: none, a segment at once) */
    int full;          /* `full` gradient mode */
    int lora_r;        /* adapter rank of the LoRA targets (0: full fine-tuning, no adapters) */
    int expert_lora_r; /* mla: the routed experts' adapter rank (0: none) */
    size_t esz;        /* bytes of one compute element */
    size_t ssz;        /* bytes of one prompt-state element */
    size_t page_size;  /* KV page tokens */
    size_t index_sets; /* mla: layers holding index keys (0: every layer) */
    int replay_ckpt;   /* 1: the replay keeps each layer's input and rebuilds one layer's tape at a time
                          (ls_seg_io.checkpointed), with its collectives' results under CP; 2: the replay in chunks
                          of replay_chunk tokens (trainer/step/replay_chunk.h): the response's own rows and their
                          gradient, the fixed state at each chunk start, the chunks' collectives under CP, one
                          chunk's tape */
    size_t replay_chunk; /* replay_ckpt 2: tokens per chunk */
} ls_family_plan_in;

typedef enum {
    LS_FPLAN_CAPTURE = 0, /* one capture: its chunk's layer transients (not the state, not checkpoints) */
    LS_FPLAN_SCORE,       /* one member's scoring forward over its R tokens */
    LS_FPLAN_ROLLOUT,     /* one member's decode of R tokens from a fork of the state */
    LS_FPLAN_REPLAY,      /* one member's tape and backward */
    LS_FPLAN_PROMPT_BWD,  /* full mode: the prompt backward's window and buffers (not dstate, not checkpoints) */
    LS_FPLAN_COUNT
} ls_family_plan_phase;

typedef struct {
    size_t attn_kv, recurrent, latent, index_keys; /* one prompt state of `shard` positions, by part (ssz) */
    size_t state_meta;                             /* its page tables (scratch) */
    int attn_layers, recurrent_layers, latent_layers, index_sets;
    size_t pages;                                  /* pages per paged layer */
    size_t state_grad;                             /* bytes of the state's gradient (esz; full mode) */
    size_t capture_pending;                        /* state bytes not yet appended at the capture's peak */
    size_t routed_buffer;                          /* mla: one routed hidden buffer [chunk x experts_per_token, d]
                                                      of the capture (esz): the original work's "6 GiB at a 65K
                                                      shard" when dispatch is not chunked; 0 without experts */
    size_t phase[LS_FPLAN_COUNT][LS_MEM_COUNT];    /* transients per phase and category */
    /* --state-tier host: the staging tier's peak per phase (LS_MEM_STAGING, trainer/model/stage.h): the two
       layers' shares staged at once as the phase's loops stage them (capture: the last chunk's context; rollout:
       the fork with its R-1 one-position decode pages; prompt backward: the layers it reads) */
    size_t stage[LS_FPLAN_COUNT];
} ls_family_plan;

/* Bytes one row kind of `row` bytes a position takes staged (stage.c rounds each page's rows up to 64 bytes)
 * over n positions in pages of pg, plus `single` one-position pages (a decode's own).  Saturating. */
static inline size_t ls_stage_field_bytes(size_t n, size_t pg, size_t row, size_t single) {
    size_t full = pg ? n / pg : 0, rest = pg ? n % pg : n;
    size_t fb = pg > SIZE_MAX / (row ? row : 1) ? SIZE_MAX : (pg * row + 63) / 64 * 64;
    size_t rb = (rest * row + 63) / 64 * 64, sb = (row + 63) / 64 * 64;
    size_t t = full && fb > SIZE_MAX / full ? SIZE_MAX : full * fb;
    t = t > SIZE_MAX - rb ? SIZE_MAX : t + rb;
    size_t s1 = single && sb > SIZE_MAX / single ? SIZE_MAX : single * sb;
    return t > SIZE_MAX - s1 ? SIZE_MAX : t + s1;
}

struct ls_cp_s; /* cp.h */

typedef struct ls_family_ops {
    /* tensors and layer views (params.h): the first member, so that the parameter table reaches it
       through p->fam without knowing this table (asserted below) */
    ls_param_layout layout;
    const ls_family_desc *desc; /* its dtype-independent descriptor (family_desc.h): its name and keys */
    /* carried state (state.h): init, fork and grad_like fill a state the caller owns, released with
       state_free (on their failure nothing is left to free); a fork borrows src's pages, so src must
       outlive it */
    ls_status (*state_init)(ls_state *s, const ls_params *p, size_t page_size, ls_mem_cat cat);
    ls_status (*state_fork)(ls_state *dst, const ls_state *src, ls_mem_cat cat);
    ls_status (*state_grad_like)(ls_state *dst, const ls_state *src, ls_mem_cat cat);
    void (*state_free)(ls_state *s);
    size_t (*state_bytes)(const ls_state *s);
    size_t (*state_plan_bytes)(const ls_model_config *c, int64_t n_pos); /* saturating */
    /* segments */
    ls_status (*segment_forward)(const ls_params *p, ls_seg_io *io);
    /* dctx (NULL: detached) += the gradient of the segment's context; dout (NULL: none) the gradient
       arriving for what the segment handed on (a chunked replay's later chunks): per layer, pages covering
       exactly the segment's positions [pos0, pos0 + T) holding its own rows' gradients (hybrid: dK, dV; mla:
       dc_kv, dk_pe; none where another rank owns the keys), and fixed0/fixed1 the gradient of the fixed state
       after it (hybrid GDN: the conv tail, S; NULL: zero) */
    ls_status (*segment_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp, ls_state *dctx,
                                  const ls_state *dout, ls_layer_hook hook, void *hook_user);
    void (*tape_free)(ls_seg_tape *t);
    size_t (*tape_bytes)(const ls_seg_tape *t);
    /* `full` mode on one rank: the prompt backward from the captured state's gradient */
    ls_status (*prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                 ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                 ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user);
    /* context parallelism (cp.h): the family's part of the context (c->fam_ctx), owned by c: made by
       cp_init, released by cp_free */
    ls_status (*cp_init)(struct ls_cp_s *c, const ls_params *p);
    void (*cp_free)(struct ls_cp_s *c);
    ls_status (*cp_capture)(struct ls_cp_s *c, const ls_params *q, const int32_t *prompt, size_t page_size,
                            size_t chunk, ls_state *ps, ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook,
                            void *hook_user);
    ls_status (*cp_prompt_backward)(struct ls_cp_s *c, const ls_params *p, const int32_t *prompt, size_t chunk,
                                    ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                    ls_layer_hook hook, void *hook_user);
    /* NULL: the response backward's gradients are replicated (the same on every rank).  Else the family
       keeps a shard-local part of them aside (mla: kv_b's, over the rows each rank holds): the step then
       stashes the replicated gradients after the replay in BOTH gradient modes, calls this to add the
       shard-local part into the zeroed .g, and finalize sums it over ranks [grad_finalize]. */
    ls_status (*cp_shard_grads)(struct ls_cp_s *c, ls_params *p);
    /* memory plan: the family's terms (above) */
    void (*plan)(const ls_model_config *c, const ls_family_plan_in *in, ls_family_plan *out);
} ls_family_ops;
_Static_assert(offsetof(ls_family_ops, layout) == 0, "params.c reads a family's layout at the start of its table");

/* Through the state's own family (an empty state: nothing to free, 0
 * bytes): free releases what s owns (state.h) and leaves it empty; bytes
 * counts what it owns. */
static inline void LS_K(ls_state_free)(ls_state *s) {
    if (s && s->fam) s->fam->state_free(s);
}
static inline size_t LS_K(ls_state_bytes)(const ls_state *s) { return s && s->fam ? s->fam->state_bytes(s) : 0; }
#endif
