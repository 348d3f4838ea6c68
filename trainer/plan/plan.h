/* plan.h - the memory and compute plan of one GRPO step, per rank: the one
 * plan that longstraw-plan prints and that longstraw-train checks against
 * its budget before it allocates (docs/plan.md).
 *
 * A step is planned phase by phase (capture, rollout, scoring, reference,
 * replay, prompt backward): what is live in each phase, per memory category
 * (mem_tracker.h), besides what lives all step (parameters, adapters,
 * gradients, optimizer state).  The step's planned peak is the largest
 * phase total; the trainer's tracker reports the same peak per step
 * (receipts' memory.per_step), and tests hold the two within 10%.
 *
 * Element sizes are inputs, not the build's real type: the trainer plans
 * with sizeof(ls_real), longstraw-plan with any compute and state dtype
 * (bf16 for devices this machine does not have).  Everything saturates: a
 * plan that does not fit size_t is SIZE_MAX bytes, which no budget admits.
 * Numeric (LS_K names); the results do not depend on the build's real type. */
#ifndef LS_TRAINER_PLAN_H
#define LS_TRAINER_PLAN_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/real.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/model/config.h"

/* Phases of the plan, in step order. */
typedef enum {
    LS_PLAN_CAPTURE = 0, /* the policy's prompt capture (checkpoints in full mode) */
    LS_PLAN_ROLLOUT,     /* decoding G responses from the prompt state */
    LS_PLAN_SCORE,       /* old-policy log-probs, member by member */
    LS_PLAN_REFERENCE,   /* the reference policy's capture and scoring */
    LS_PLAN_REPLAY,      /* one member's branch under autograd at a time */
    LS_PLAN_PROMPT_BWD,  /* full mode: the prompt backward from the state's gradient */
    LS_PLAN_PHASES
} ls_plan_phase;

typedef struct {
    const ls_model_config *cfg;
    ls_objective obj;            /* train mode, lora_r, lora_experts, grad mode, beta */
    ls_strategy strategy;        /* LongStraw or naive (whole sequence under autograd) */
    size_t P;                    /* prompt tokens */
    size_t R;                    /* longest response (scored tokens) */
    size_t G;                    /* group size */
    int world;                   /* context-parallel ranks (1: none) */
    int cp_rank;                 /* this rank's CP index, for what only some ranks hold (a chunked replay's
                                    response rows: the last rank's); -1 (default): the rank that holds the most */
    size_t moe_chunk;            /* mla: tokens per MoE dispatch chunk (0: the trainer's, 256; SIZE_MAX: not chunked) */
    int ep;                      /* mla: expert-parallel ranks (0 or 1: none); each holds E/ep routed experts'
                                    weights, adapters, gradients and moments (trainer/dist/ep.h) */
    size_t page_size;            /* KV page tokens (0: the trainer's default) */
    size_t capture_chunk;        /* capture chunk tokens (0: the trainer's default) */
    size_t compute_bytes;        /* bytes of one compute element (weights, activations): 2, 4 or 8 */
    size_t state_bytes;          /* bytes of one prompt-state element (KV, latents, GDN state) */
    int rollout;                 /* the step generates its responses (else they are supplied) */
    int keep_reference;          /* beta > 0 with a rollout: -1 decide by budget, 0 recapture, 1 keep */
    int replay_checkpoint;       /* the response replay: -1 decide by budget, 0 every layer's tape, 1 each layer's
                                    input and one layer's tape rebuilt at a time, 2 in chunks of replay_chunk tokens
                                    each taped again from the carried state (--replay-checkpoint) */
    size_t replay_chunk;         /* replay_checkpoint 2 (or -1 choosing it): tokens per chunk (0: 256) */
    int prefix_frozen;           /* prompt state kept across steps (both states when beta > 0) */
    size_t budget;               /* bytes per rank; 0: none (keep_reference -1 then keeps) */
    int state_tier;              /* --state-tier: 0 device, 1 host (the prompt state in prompt_state_host, two layers'
                                    shares staged in the device tier: staging) */
    size_t host_budget;          /* host tier bytes per rank (--host-memory); 0: none */
    size_t index_sets;           /* mla: layers holding index keys (0: every MLA layer) */
} ls_plan_in;

/* The prompt state of one rank, by part (bytes). */
typedef struct {
    size_t attn_kv;      /* hybrid: K and V of the attention layers */
    size_t recurrent;    /* hybrid: GDN state and conv tails (fixed size) */
    size_t latent;       /* mla: compressed KV latent + RoPE key */
    size_t index_keys;   /* mla: the DSA indexer's keys */
    size_t total;
    int attn_layers, recurrent_layers, latent_layers, index_sets;
    size_t pages;        /* KV pages per layer on this rank */
} ls_plan_state;

typedef struct {
    size_t shard;                              /* prompt positions this rank holds */
    ls_plan_state state;                       /* one prompt state on this rank */
    size_t fixed[LS_MEM_COUNT];                /* live all step: parameters, adapters, grads, optimizer */
    size_t phase[LS_PLAN_PHASES][LS_MEM_COUNT]; /* each phase's peak, besides fixed (0: phase not run) */
    int phase_runs[LS_PLAN_PHASES];            /* 1 when the step runs this phase */
    size_t phase_total[LS_PLAN_PHASES];        /* fixed + phase, summed over categories */
    ls_plan_phase peak_phase;                  /* the phase with the largest total */
    size_t peak[LS_MEM_COUNT];                 /* fixed + the peak phase's, per category */
    size_t peak_total;                         /* the step's planned peak of the device tier (what the budget
                                                  must admit): every category but prompt_state_host */
    size_t host_peak;                          /* the host tier's planned peak (prompt_state_host; 0 on device) */
    int keep_reference;                        /* the decision: 1 reference state kept beside the policy's */
    int replay_checkpoint;                     /* the decision: 0 taped, 1 the replay keeps layer inputs, not tapes,
                                                  2 in chunks */
    int captures;                              /* prompt captures the step runs */
    size_t moe_routed_buffer;                  /* mla: one routed hidden buffer of the capture's dispatch chunk */
    double flops[LS_PLAN_PHASES];              /* this rank's floating-point operations per phase */
} ls_plan;

/* Whether a plan of peak bytes fits a budget: peak plus 10% (the margin the
 * plan is tested to, ctest plan_vs_measured: within 10% of the tracker's
 * measured peak) at most the budget, so that "fits" holds for a plan that
 * is short by up to that much.  Every fit decision here and in the tools
 * is this one. */
#define LS_PLAN_MARGIN_PERCENT 10
static inline int ls_plan_fits(size_t peak, size_t budget) {
    size_t m = peak / 100 * LS_PLAN_MARGIN_PERCENT + peak % 100 * LS_PLAN_MARGIN_PERCENT / 100;
    return peak <= budget && m <= budget - peak;
}

/* Fill *in with the trainer's defaults for cfg (page size, chunk, element
 * sizes of this build's real type, LongStraw, P = R = G = 1, world 1,
 * keep_reference and replay_checkpoint -1).  cfg is borrowed for as long as *in is used. */
void LS_K(ls_plan_in_defaults)(ls_plan_in *in, const ls_model_config *cfg);

/* The plan of one step of *in.  LS_ERR_ARG naming the field (P < 2, G or R
 * zero, world < 1 or above P - 1, element size not 2/4/8),
 * LS_ERR_UNSUPPORTED for a family without a table; err gets the message. */
ls_status LS_K(ls_plan_compute)(const ls_plan_in *in, ls_plan *out, char *err, size_t err_len);

/* The longest prompt whose planned peak fits in->budget (all other fields as
 * in *in), by bisection over P in [world + 1, P_max] (every rank holds a
 * position); 0 when not even the shortest fits.
 * in->budget must be non-zero. */
size_t LS_K(ls_plan_max_prompt)(const ls_plan_in *in, size_t P_max);

/* "capture", "rollout", "score", "reference", "replay", "prompt_bwd"; "unknown" outside the range. */
static inline const char *ls_plan_phase_name(ls_plan_phase ph) {
    static const char *const names[LS_PLAN_PHASES] = {"capture", "rollout", "score", "reference", "replay",
                                                      "prompt_bwd"};
    return (unsigned)ph < LS_PLAN_PHASES ? names[ph] : "unknown";
}

/* ---- FLOPs (plan_flops.c) ------------------------------------------------------------
 * Floating-point operations (a multiply-add is 2) that the model's math
 * (docs/model.md) needs, counted from the config alone: matmuls of every
 * projection (LoRA adapters included when lora_r > 0), attention over the
 * visible (causal) key positions only, the GDN recurrence, the mla family's
 * indexer scores and top-k attention, the routed experts actually used
 * (experts_per_token) and the LM head with its log-softmax. */

/* The forward of n tokens at absolute positions [pos0, pos0 + n), each
 * attending to every earlier position (keys [0, pos0 + t]). */
double LS_K(ls_plan_forward_flops)(const ls_model_config *c, int lora_r, size_t n, size_t pos0);
/* The backward of the same tokens: activation gradients and, for the
 * trainable weights (with_weight_grads), weight gradients; without the
 * recompute of the forward (callers add it where the step recomputes). */
double LS_K(ls_plan_backward_flops)(const ls_model_config *c, int lora_r, size_t n, size_t pos0,
                                    int with_weight_grads);
#endif
