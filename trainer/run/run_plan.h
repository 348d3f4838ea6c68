/* run_plan.h - the memory plan of a longstraw-train run (trainer/plan/plan.h
 * with the run's options), checked against the budget before anything
 * model- or prompt-sized is allocated (the parameters) and again before each
 * step whose prompt or responses differ (external rollouts, one group per
 * line).  Numeric (LS_K names). */
#ifndef LS_TRAINER_RUN_PLAN_H
#define LS_TRAINER_RUN_PLAN_H
#include <stddef.h>
#include "kernels/real.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/plan/plan.h"
#include "trainer/run/train_args.h"

typedef struct {
    size_t P, Rmax, G;     /* the step's prompt length, longest response, group size */
    const char *where;     /* what sets P in the message ("--prompt-len", "rollouts line 7") */
} ls_run_shape;

/* The budget in bytes: --memory-budget, else 90% of MemAvailable. */
size_t LS_K(ls_run_budget)(const ls_train_args *a);

/* The plan input of a step of this shape under the run's options (this
 * build's element size, the rank count of a->comm, budget as given). */
void LS_K(ls_run_plan_in)(const ls_train_args *a, const ls_run_shape *sh, size_t budget, ls_plan_in *in);

/* The plan of a step of this shape (*out); LS_OK when its peak fits the
 * budget; LS_ERR_NOMEM (the plan above the budget) or the plan's error
 * otherwise, with the whole table written to stderr naming the sizes that
 * set it. */
ls_status LS_K(ls_run_plan_check)(const ls_train_args *a, const ls_run_shape *sh, size_t budget, ls_plan *out);
#endif
