/* step_result.c - the step guard's question about a step's result: which
 * figure of the step_metrics event is not finite (dtype-independent). */
#include "trainer/step/step.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    const char *name;
    size_t off;  /* offset of the double in ls_step_result */
    int part;    /* 1 a reward part: looked at only with has_reward_parts; 2 with has_grad_compare; 3 with
                    has_grad_cosine */
} figure;

#define F(f) {#f, offsetof(ls_step_result, f), 0}
#define P(f) {#f, offsetof(ls_step_result, f), 1}
#define C(f, k) {#f, offsetof(ls_step_result, f), k}
/* The step_metrics event's doubles that the step computes, in the event's
 * order (receipts/format/trace_step_metrics.h); lr and the timings are not the
 * step's. */
static const figure FIGURES[] = {
    F(reward_mean), F(reward_std), F(reward_min), F(reward_max), P(reward_retrieval), P(reward_format),
    F(adv_mean), F(adv_std), F(loss), F(loss_policy), F(loss_kl), F(kl_mean), F(clip_fraction),
    F(ratio_min), F(ratio_mean), F(ratio_max), F(response_len_mean), F(grad_norm),
    C(grad_cosine, 3), C(grad_norm_detached, 2), C(grad_norm_full, 2),
};
#undef F
#undef P
#undef C

const char *ls_step_result_nonfinite(const ls_step_result *r, double *value) {
    for (size_t i = 0; i < sizeof FIGURES / sizeof FIGURES[0]; i++) {
        int part = FIGURES[i].part;
        if ((part == 1 && !r->has_reward_parts) || (part == 2 && !r->has_grad_compare) ||
            (part == 3 && !r->has_grad_cosine))
            continue;
        double v;
        memcpy(&v, (const char *)r + FIGURES[i].off, sizeof v);
        if (isfinite(v)) continue;
        if (value) *value = v;
        return FIGURES[i].name;
    }
    return NULL;
}
