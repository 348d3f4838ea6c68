/* step.h - one GRPO training step of the hybrid family on one rank: the
 * LongStraw transaction (DESIGN.md §3) and the naive reference strategy.
 * Numeric (compiled per real type).
 *
 * ls_step_grads runs capture, rollout (when the batch has no responses),
 * score, replay and, in `full` mode, the prompt backward, leaving the
 * finalised gradients in the parameters' .g; ls_step_optimizer then applies
 * AdamW.  The split lets the caller dump gradients in between. */
#ifndef LS_TRAINER_STEP_H
#define LS_TRAINER_STEP_H
#include "trainer/batch.h"
#include "trainer/hybrid.h"
#include "trainer/task.h"

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

typedef struct {
    ls_strategy strategy;
    size_t page_size;          /* KV page length in tokens */
    size_t capture_chunk;      /* prompt tokens per capture segment (0: the whole prompt at once) */
    size_t G;                  /* group size (rollout) */
    size_t R;                  /* response length (rollout) */
    double top_p;              /* rollout nucleus */
    uint64_t seed;
    double lr, beta1, beta2, adam_eps, weight_decay;
    int fault_nan_grad;        /* fault injection: poison one gradient after replay */
    int fault_untracked_alloc; /* fault injection: a prompt-sized buffer outside the tracker */
} ls_step_options;

typedef struct {
    double loss;
    double grad_norm;
    double mean_reward;
    size_t prompt_state_bytes;     /* measured: bytes the captured state owns */
    size_t prompt_state_analytical;
    size_t max_branch_bytes;       /* largest member tape */
    int64_t phase_ns[8];           /* capture rollout score replay prompt_bwd finalize optimizer */
} ls_step_result;

void ls_step_options_defaults(ls_step_options *o);

/* Run everything up to finalised gradients.  task may be NULL when the
 * batch already has responses (external rollouts or tests).  The batch
 * receives responses, rewards, advantages, old and ref log-probs.
 * Returns LS_ERR_NONFINITE when the loss or a gradient is not finite. */
ls_status LS_K(ls_step_grads)(ls_params *p, ls_batch *b, const ls_task *task, const ls_step_options *o,
                              const ls_step_observer *obs, ls_step_result *res, char *err, size_t err_len);
/* One AdamW step over every trainable tensor (step counts from 1). */
void LS_K(ls_step_optimizer)(ls_params *p, const ls_step_options *o, int64_t step);

/* Building blocks exposed for tests and tools. */
/* Log-probs of response i from a captured prompt state (no autograd). */
ls_status LS_K(ls_score_member)(const ls_params *p, const ls_hstate *ps, const ls_batch *b, size_t i,
                                double *logp, ls_layer_hook hook, void *hook_user);
/* Capture: prompt positions [0, P-1) into *ps (prompt_state category), in
 * segments of `chunk` tokens (0: one segment) so that transient buffers stay
 * chunk-sized; checkpoints (NULL: none) receive each layer's input. */
ls_status LS_K(ls_capture)(const ls_params *p, const ls_batch *b, size_t page_size, size_t chunk, ls_hstate *ps,
                           ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook, void *hook_user);
/* Sample R tokens by token-by-token decode from ps; logp_out[R] (may be
 * NULL) receives each sampled token's log-prob under the policy. */
ls_status LS_K(ls_rollout_member)(const ls_params *p, const ls_hstate *ps, int32_t first_token,
                                  size_t R, double temperature, double top_p, uint64_t seed,
                                  int32_t *out, double *logp_out);
#endif
