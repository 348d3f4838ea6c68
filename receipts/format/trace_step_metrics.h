/* trace_step_metrics.h - the figures of one optimizer step: the
 * `step_metrics` trace event (schemas/event-step_metrics.schema.json) and,
 * as the very same JSON object, one line of the trainer's --metrics JSONL.
 *
 * Fields, in the order they are written (all numbers finite; the JSON
 * object carries no envelope - the trace writer adds v/rank/seq/ts_ns/ev):
 *   step               integer >= 0, the optimizer step
 *   prefix_frozen      true, present only for a step that ran against a
 *                      prompt state captured before an earlier update
 *   objective          "grpo" or "sft"
 *   reward_mean, reward_std (>= 0), reward_min, reward_max   over the group
 *   reward_retrieval, reward_format   group means of the built-in task's two
 *                      reward terms; both present or both absent
 *   adv_mean, adv_std (>= 0)         advantages over the group
 *   loss, loss_policy, loss_kl       the loss and its policy and KL parts
 *   kl_mean            mean per-token KL to the reference policy
 *   clip_fraction      in [0, 1]
 *   ratio_min, ratio_mean, ratio_max  importance ratios, > 0
 *   response_len_mean  >= 0, tokens per response
 *   tokens             integer >= 0, response tokens trained
 *   grad_norm          >= 0
 *   grad_cosine        in [-1, 1], present only with has_grad_cosine: the
 *                      cosine of the step's detached and full gradients
 *                      (longstraw-train --grad-cosine-every)
 *   grad_norm_detached, grad_norm_full   >= 0, both present (with
 *                      has_grad_compare) or both absent: their norms
 *   lr                 >= 0
 *   tokens_per_s       {phase: rate >= 0} for the phases of capture,
 *                      rollout, score, replay, prompt_bwd that ran
 *   step_wall_s        >= 0
 *
 * Functions here are pure apart from the cJSON allocation of
 * ls_trace_step_metrics_to_json; thread-safe. */
#ifndef LS_RECEIPTS_TRACE_STEP_METRICS_H
#define LS_RECEIPTS_TRACE_STEP_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/trace_event.h"

/* The phases tokens_per_s may name: LS_PHASE_CAPTURE .. LS_PHASE_PROMPT_BWD. */
#define LS_TRACE_RATE_PHASE_MASK ((1u << (LS_PHASE_PROMPT_BWD + 1)) - 1u)

typedef struct {
    int64_t step;              /* >= 0 */
    bool prefix_frozen;        /* written as "prefix_frozen":true only when true */
    ls_trace_objective objective;
    double reward_mean, reward_std, reward_min, reward_max; /* std >= 0 */
    bool has_reward_parts;     /* write reward_retrieval and reward_format */
    double reward_retrieval, reward_format;
    double adv_mean, adv_std;  /* std >= 0 */
    double loss, loss_policy, loss_kl, kl_mean;
    double clip_fraction;      /* [0, 1] */
    double ratio_min, ratio_mean, ratio_max; /* > 0 */
    double response_len_mean;  /* >= 0 */
    int64_t tokens;            /* >= 0 */
    double grad_norm, lr;      /* >= 0 */
    bool has_grad_compare;     /* write grad_norm_detached and grad_norm_full */
    bool has_grad_cosine;      /* write grad_cosine (only with has_grad_compare) */
    double grad_cosine;        /* [-1, 1] */
    double grad_norm_detached, grad_norm_full; /* >= 0 */
    double tokens_per_s[LS_PHASE_COUNT]; /* indexed by ls_trace_phase, >= 0 */
    unsigned tokens_per_s_mask; /* bit (1u << phase): that rate is present; only
                                   bits of LS_TRACE_RATE_PHASE_MASK */
    double step_wall_s;        /* >= 0 */
} ls_trace_step_metrics;

/* Checks m against the ranges above: LS_OK; LS_ERR_NONFINITE for a NaN or
 * Inf (checked before any range; the first such field is named);
 * LS_ERR_ARG for NULL, a value out of its range, an objective out of range
 * or a rate bit outside LS_TRACE_RATE_PHASE_MASK.  One line naming the
 * field ("step_metrics.clip_fraction: ...") in why[why_len] (why may be
 * NULL).  Fields that are not written (the reward parts without
 * has_reward_parts, rates without their bit) are not looked at. */
ls_status ls_trace_step_metrics_check(const ls_trace_step_metrics *m, char *why, size_t why_len);

/* The event's fields as a new cJSON object, in the order above (*out is
 * the caller's, cJSON_Delete).  Refuses what ls_trace_step_metrics_check
 * refuses, with the same status (call it for the message); LS_ERR_NOMEM.
 * *out is NULL on failure.  The object passes
 * ls_trace_event_check(LS_TRACE_STEP_METRICS, ...). */
ls_status ls_trace_step_metrics_to_json(const ls_trace_step_metrics *m, cJSON **out);

/* Typed view of a step_metrics event object (as delivered by the reader)
 * or of a --metrics JSONL line (the same object without the envelope).
 * The object must pass ls_trace_event_check for step_metrics (checked
 * here); LS_ERR_SCHEMA otherwise, LS_ERR_ARG for NULL.  Absent members
 * read as false / 0 with their mask bit clear.  v1 only: a v2 step_metrics
 * holds free metrics (docs/contract.md §1); read its members from
 * ls_trace_event.field (v1-named metrics) or the event object. */
ls_status ls_trace_decode_step_metrics(const cJSON *event, ls_trace_step_metrics *out);

#endif
