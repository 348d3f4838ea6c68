/* run_plan.h - the memory plan of a longstraw-train run, checked against
 * the budget before anything model- or prompt-sized is allocated (the
 * parameters) and again before each step whose prompt or responses differ
 * (external rollouts, one group per line).  Numeric (LS_K names). */
#ifndef LS_TRAINER_RUN_PLAN_H
#define LS_TRAINER_RUN_PLAN_H
#include <stddef.h>
#include "kernels/real.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/run/train_args.h"

typedef struct {
    size_t P, Rmax, G;     /* the step's prompt length, longest response, group size */
    int with_params;       /* add the parameter blocks (before ls_params_init) */
    const char *where;     /* what sets P in the message ("--prompt-len", "rollouts line 7") */
} ls_run_shape;

/* The budget in bytes: --memory-budget, else 90% of MemAvailable. */
size_t LS_K(ls_run_budget)(const ls_train_args *a);

/* Bytes per category of a step of this shape: what is live now, plus (with
 * with_params) the parameter blocks exactly as ls_params_init allocates
 * them, plus the step's prompt state, tapes, checkpoints and scratch.
 * Saturating: a plan that does not fit size_t exceeds any budget. */
ls_status LS_K(ls_run_plan)(const ls_train_args *a, const ls_run_shape *sh, size_t plan_b[LS_MEM_COUNT], char *err,
                            size_t err_len);

/* LS_OK when the plan fits the budget; LS_ERR_NOMEM (the plan above the
 * budget) or the plan's error otherwise, with the whole table written to
 * stderr naming the sizes that set it. */
ls_status LS_K(ls_run_plan_check)(const ls_train_args *a, const ls_run_shape *sh, size_t budget);
#endif
