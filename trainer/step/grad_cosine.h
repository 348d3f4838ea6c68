/* grad_cosine.h - the measurement of --grad-cosine-every (docs/train.md,
 * "The gradient cosine"): on a measured step, the detached and the full
 * gradient of the same batch side by side, the step's update untouched.
 * Internal to trainer/step (step_txn.c drives it); numeric (compiled per
 * real type).
 *
 * A measured step runs the prompt backward whatever the run's mode (its
 * capture keeps checkpoints, its replay hands the prompt state's gradient
 * on).  The replay's parameter gradients do not depend on whether the
 * prompt state's gradient is asked for (docs/model.md §4: the branch under
 * autograd is the same; only its dK/dV, dS and conv-tail gradients into the
 * carried state are added), so what the replays leave in .g is the detached
 * gradient, and what the prompt backward adds makes it the full one.
 *  - run mode `full`: the prompt backward adds into .g as without the
 *    measurement; before each group's prompt backward the replays' part
 *    since the last one (.g less its value then) is summed in double into
 *    acc: the detached gradient (B = 1: exactly .g before the prompt
 *    backward, which is a detached run's .g bit for bit);
 *  - run mode `detached`: each group's prompt backward writes into a zeroed
 *    buffer of its own (the tensors' .g pointed into it), summed in double
 *    into acc: .g stays the detached run's, the full gradient is .g + acc
 *    (to rounding: a full run adds the prompt part straight into .g).
 * One rank only (the caller refuses context parallelism and expert
 * parallelism: their finalize reduces .g across ranks). */
#ifndef LS_TRAINER_GRAD_COSINE_H
#define LS_TRAINER_GRAD_COSINE_H
#include "trainer/step/step.h"

typedef struct {
    int full;          /* the run's mode is full */
    size_t n;          /* trainable reals */
    double *acc;       /* [n] full: the replays' part (detached gradient); detached: the prompt backward's part */
    ls_real *work;     /* [n] full: .g after the last prompt backward; detached: the prompt backward's target */
    ls_real **gsave;   /* [p->n] detached, during a prompt backward: the tensors' own .g */
} ls_grad_cosine;

/* Allocate (category grads) and zero the buffers for p's trainable tensors.
 * LS_OK or LS_ERR_NOMEM (gc then holds nothing to free).  Free with
 * ls_grad_cosine_free (NULL and a zeroed gc are no-ops). */
ls_status LS_K(ls_grad_cosine_init)(ls_grad_cosine *gc, const ls_params *p, int full);
void LS_K(ls_grad_cosine_free)(ls_grad_cosine *gc);
/* Around each group's prompt backward (after its replay). */
void LS_K(ls_grad_cosine_before_prompt)(ls_grad_cosine *gc, ls_params *p);
void LS_K(ls_grad_cosine_after_prompt)(ls_grad_cosine *gc, ls_params *p);
/* After finalize: res->grad_norm_detached, grad_norm_full (norms of the
 * flattened gradients over the trainable tensors, in double), grad_cosine
 * (their cosine, clamped to [-1, 1]; has_grad_cosine 0 when a norm is 0),
 * has_grad_compare = 1.  .g is not changed. */
void LS_K(ls_grad_cosine_finish)(const ls_grad_cosine *gc, const ls_params *p, ls_step_result *res);
#endif
