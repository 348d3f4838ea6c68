/* step.h - one GRPO training step on one rank or context-parallel: the
 * LongStraw transaction (docs/design.md §3) and the naive reference strategy,
 * for any family (the model is reached through p->fam, family.h).
 * Numeric (compiled per real type), apart from ls_step_options_defaults
 * (step_options.c) and ls_step_result_nonfinite (step_result.c).
 *
 * ls_step_grads runs capture, rollout (when the batch has no responses),
 * score, replay and, in `full` mode, the prompt backward, leaving the
 * finalised gradients in the parameters' .g; ls_step_optimizer then applies
 * AdamW.  The split lets the caller dump gradients in between. */
#ifndef LS_TRAINER_STEP_H
#define LS_TRAINER_STEP_H
#include "trainer/io/batch.h"
#include "trainer/dist/cp.h"
#include "trainer/model/family.h"
#include "trainer/step/task.h"

/* What a step reports as it goes (trace events).  Any callback may be NULL. */
typedef struct {
    void *user;
    void (*phase_begin)(void *user, const char *phase);
    void (*phase_end)(void *user, const char *phase, int64_t wall_ns, int ok);
    /* member = -1 when the phase has none */
    void (*layer_end)(void *user, const char *phase, int member, int layer, int dir, size_t tokens,
                      int64_t wall_ns, double out_norm);
    void (*progress)(void *user, const char *phase, size_t done, size_t total);
} ls_step_observer;

/* What the replay trains: the GRPO objective (docs/model.md §4), or supervised
 * cross-entropy on the built-in task's reference answer (the warm start a
 * GRPO run from random weights needs; same capture-and-replay path). */
typedef enum { LS_OBJECTIVE_GRPO = 0, LS_OBJECTIVE_SFT = 1 } ls_objective_kind;

typedef struct {
    ls_strategy strategy;
    ls_objective_kind objective;
    size_t page_size;          /* KV page length in tokens */
    size_t capture_chunk;      /* prompt tokens per capture segment (0: the whole prompt at once) */
    size_t G;                  /* group size (rollout) */
    size_t R;                  /* response length (rollout) */
    double top_p;              /* rollout nucleus */
    uint64_t seed;
    double lr, beta1, beta2, adam_eps, weight_decay;
    int fault_nan_grad;        /* fault injection: poison one gradient after replay */
    int fault_untracked_alloc; /* fault injection: a prompt-sized buffer outside the tracker */
    int fault_stage_skip_page; /* fault injection (--state-tier host): the staging leaves each layer's last page
                                  unstaged (trainer/model/stage.h) */
    ls_comm_group *cp_group;   /* context parallelism over this group (NULL or size 1: one rank) */
    ls_cp_faults cp_faults;    /* CP fault injection (cp.h) */
    int keep_reference;        /* beta > 0 with a rollout: 1 the reference's state is captured beside the policy's
                                  (two captures); else the policy's is freed and captured again after it (three:
                                  half the prompt-state peak).  -1 (default): the run decides by its plan */
    int replay_checkpoint;     /* the response replay: 0 every layer's tape kept through the backward; 1 each layer's
                                  input kept and its tape rebuilt during the backward (ls_seg_io.checkpointed: the
                                  same gradients bit for bit, about L*R*d stored values plus one layer's tape);
                                  2 the branch in chunks of replay_chunk tokens, each taped again from the carried
                                  state during the backward (trainer/step/replay_chunk.h: the same gradients to
                                  rounding; no layer input kept).  -1 (default): the run decides by its plan */
    int replay_chunk;          /* replay_checkpoint 2: tokens per chunk (--replay-chunk) */
    int state_tier;            /* --state-tier: 0 device (the prompt state in prompt_state), 1 host (in
                                  prompt_state_host, each layer's share staged into the device tier before the
                                  layer reads it: trainer/model/stage.h); the same results bit for bit */
    int grad_cosine;           /* --grad-cosine-every: measure this step's detached and full gradients side by side
                                  (trainer/step/grad_cosine.h; res->grad_cosine ...); the update, the loss and every
                                  other figure are those of the step without it, bit for bit.  One rank, the
                                  longstraw strategy, no prefix (LS_ERR_ARG otherwise) */
} ls_step_options;

typedef struct {
    double loss;
    double grad_norm;
    double mean_reward;
    size_t prompt_state_bytes;     /* measured: bytes the captured state owns */
    size_t prompt_state_analytical;
    size_t max_branch_bytes;       /* largest member tape */
    int64_t phase_ns[8];           /* capture rollout score replay prompt_bwd finalize optimizer */
    int64_t phase_tokens[8];       /* tokens each phase processed (captures: P-1 each) */
    /* step metrics (the step_metrics event) */
    double reward_mean, reward_std, reward_min, reward_max;
    int has_reward_parts;          /* the built-in task rolled out: its two terms below */
    double reward_retrieval, reward_format;
    double adv_mean, adv_std;
    double loss_policy, loss_kl;   /* GRPO: loss = loss_policy + loss_kl; SFT: loss_policy = loss */
    double kl_mean, clip_fraction, ratio_min, ratio_mean, ratio_max;
    double response_len_mean;
    int64_t tokens;                /* response tokens trained */
    int captures;                  /* prompt captures this step ran (policy and reference) */
    int used_reference;            /* the reference policy was captured and scored */
    int reference_kept;            /* its state was captured beside the policy's (keep_reference) */
    int prefix_frozen;             /* the step reused a prompt state captured before an update */
    unsigned paths;                /* the code each group's step took: LS_STEP_PATH_* bits (or-ed over groups) */
    /* context parallelism (cp_world > 1): this rank's shard of the captured prompt and whether every
       rank's finalized gradients were bitwise equal (the digest check) */
    int cp_world;
    int64_t shard_begin, shard_end;
    int grads_agree;
    /* o->grad_cosine: the detached and the full gradient of the step's batch, flattened over the trainable
       tensors (after finalize), in double: their norms (has_grad_compare) and their cosine (has_grad_cosine:
       both norms > 0) */
    int has_grad_compare, has_grad_cosine;
    double grad_norm_detached, grad_norm_full, grad_cosine;
} ls_step_result;

/* The decisions a step's groups took that select code (the run records
 * them as its configuration's "paths", docs/evidence.md "The run's path"):
 * where the responses came from (sampled by the rollout, given by the
 * batch, or the SFT targets), the old-policy log-probs (computed by scoring
 * or given), and the reference policy's log-probs (none; captured and scored
 * before the policy when the responses are known; kept beside the policy's
 * state after a rollout; recaptured after the policy's was freed; from a
 * frozen prefix's state; by the naive strategy's full sequence; given). */
enum {
    LS_STEP_PATH_RESP_SAMPLED = 1u << 0, LS_STEP_PATH_RESP_GIVEN = 1u << 1, LS_STEP_PATH_RESP_TARGET = 1u << 2,
    LS_STEP_PATH_OLD_COMPUTED = 1u << 3, LS_STEP_PATH_OLD_GIVEN = 1u << 4, LS_STEP_PATH_OLD_NONE = 1u << 5,
    LS_STEP_PATH_REF_NONE = 1u << 6, LS_STEP_PATH_REF_BEFORE = 1u << 7, LS_STEP_PATH_REF_KEPT = 1u << 8,
    LS_STEP_PATH_REF_RECAPTURED = 1u << 9, LS_STEP_PATH_REF_PREFIX = 1u << 10, LS_STEP_PATH_REF_NAIVE = 1u << 11,
    LS_STEP_PATH_REF_GIVEN = 1u << 12, LS_STEP_PATH_REPLAY_TAPED = 1u << 13, LS_STEP_PATH_REPLAY_LAYER = 1u << 14,
    LS_STEP_PATH_REPLAY_CHUNK = 1u << 15
};

/* The prompt state kept across prefix-frozen steps (--prefix-frozen K):
 * the first step captures into it, later steps reuse it although the
 * parameters changed (stale: such steps are never exact).  rps is the
 * reference policy's state, kept too when beta > 0.  Zero-initialise;
 * free with ls_step_prefix_free. */
typedef struct {
    ls_state ps, rps;
    int have_ps, have_rps;
} ls_step_prefix;
void LS_K(ls_step_prefix_free)(ls_step_prefix *f);

void ls_step_options_defaults(ls_step_options *o);

/* Run everything up to finalised gradients.  task may be NULL when the
 * batch already has responses (external rollouts or tests).  The batch
 * receives responses, rewards, advantages, old and ref log-probs.
 * Returns LS_ERR_NONFINITE when the loss or a gradient is not finite. */
ls_status LS_K(ls_step_grads)(ls_params *p, ls_batch *b, const ls_task *task, const ls_step_options *o,
                              const ls_step_observer *obs, ls_step_result *res, char *err, size_t err_len);
/* The same, with a prefix kept across steps (NULL: an ordinary step).
 * LongStraw strategy, detached gradients only (a stale state has no exact
 * prompt gradient); LS_ERR_ARG otherwise.
 *
 * The reference policy: skipped when beta = 0, for the SFT objective, and
 * when the batch supplies ref log-probs.  With known responses the reference
 * state is captured, scored and freed before the policy capture.  When the
 * step rolls out: with o->keep_reference == 1 the reference state is captured
 * beside the policy's, scored and freed (two captures); otherwise the policy
 * state serves rollout and old-policy scoring, is freed, the reference is
 * captured, scored and freed, and the policy state is captured again for the
 * replay (one more capture, half the prompt-state peak).  A prefix keeps both
 * states instead. */
ls_status LS_K(ls_step_grads_prefix)(ls_params *p, ls_batch *b, const ls_task *task, const ls_step_options *o,
                                     const ls_step_observer *obs, ls_step_prefix *pf, ls_step_result *res,
                                     char *err, size_t err_len);
/* B groups in one optimizer step (--prompts-per-step B, docs/model.md §4):
 * each group bs[b] (with its task tasks[b]; tasks may be NULL when every
 * batch has responses) is captured, rolled out, scored, replayed and, in
 * `full` mode, back-propagated through its prompt in turn, one prompt state
 * live at a time (group b's freed before group b+1's capture); the step's
 * loss is the mean of the groups' losses (each group's dlp scaled by 1/B),
 * advantages normalised within each group; the gradients accumulate in .g
 * (under CP the replicated and shard-local parts apart) and one finalize
 * ends the step.  Group 0 uses o->seed, group b > 0 ls_rng_derive(o->seed,
 * "group") + b.  Trace layer events number the members through the step:
 * group b's member i is (G_0 + .. + G_{b-1}) + i.  res (may be NULL) gets
 * the aggregate: sums (phase times and tokens, tokens, captures), maxima
 * (state and tape bytes), the loss and its parts as the mean over the
 * groups, reward, advantage and length moments over all members, KL, clip
 * and ratios over all tokens; group_res [B] (may be NULL) each group's own
 * figures (no grad_norm: the gradients are the step's).  B = 1 is exactly
 * ls_step_grads_prefix.  pf needs B = 1.  Under CP the groups share one
 * prompt length. */
ls_status LS_K(ls_step_grads_groups)(ls_params *p, ls_batch *const *bs, const ls_task *const *tasks, size_t B,
                                     const ls_step_options *o, const ls_step_observer *obs, ls_step_prefix *pf,
                                     ls_step_result *res, ls_step_result *group_res, char *err, size_t err_len);
/* The step guard (dtype-independent): the first figure of r that goes into
 * the step_metrics event and is not finite, in the event's order (reward
 * mean/std/min/max, the reward parts only with has_reward_parts, advantage
 * mean/std, loss, loss_policy, loss_kl, kl_mean, clip_fraction, ratio
 * min/mean/max, response_len_mean, grad_norm; grad_norm_detached, grad_norm_full
 * with has_grad_compare, grad_cosine with has_grad_cosine).  Returns its name (a static
 * string, "reward_std") with its value in *value (value may be NULL), or
 * NULL when all are finite.  A step with such a figure takes no optimizer
 * step: its record could not be written. */
const char *ls_step_result_nonfinite(const ls_step_result *r, double *value);
/* One AdamW step over every trainable tensor (step counts from 1). */
void LS_K(ls_step_optimizer)(ls_params *p, const ls_step_options *o, int64_t step);

/* Building blocks exposed for tests and tools. */
/* Log-probs of response i from a captured prompt state (no autograd). */
ls_status LS_K(ls_score_member)(const ls_params *p, const ls_state *ps, const ls_batch *b, size_t i,
                                double *logp, ls_layer_hook hook, void *hook_user);
/* The chunk a step's replay runs in (--replay-checkpoint chunk), which its scoring and gradient probe take
 * too so that their log-probs are the replay's bit for bit; 0: one segment (the naive strategy never chunks). */
static inline size_t ls_step_replay_chunk(const ls_step_options *o) {
    return o->replay_checkpoint == 2 && o->strategy != LS_STRATEGY_NAIVE ? (size_t)o->replay_chunk : 0;
}
/* The same in chunks of `chunk` tokens (0: one segment) as a chunked replay scores them
 * (trainer/step/replay_chunk.h): its log-probs bit for bit. */
ls_status LS_K(ls_score_member_chunked)(const ls_params *p, const ls_state *ps, const ls_batch *b, size_t i,
                                        size_t chunk, double *logp, ls_layer_hook hook, void *hook_user);
/* Capture: prompt positions [0, P-1) into *ps (prompt_state category), in
 * segments of `chunk` tokens (0: one segment) so that transient buffers stay
 * chunk-sized; checkpoints (NULL: none) receive each layer's input. */
ls_status LS_K(ls_capture)(const ls_params *p, const ls_batch *b, size_t page_size, size_t chunk, ls_state *ps,
                           ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook, void *hook_user);
/* Sample R tokens by token-by-token decode from ps; logp_out[R] (may be
 * NULL) receives each sampled token's log-prob under the policy. */
ls_status LS_K(ls_rollout_member)(const ls_params *p, const ls_state *ps, int32_t first_token,
                                  size_t R, double temperature, double top_p, uint64_t seed,
                                  int32_t *out, double *logp_out);
#endif
