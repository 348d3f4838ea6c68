/* bench_step.h - what the step benchmarks (bench_memory, bench_mla) time:
 * one GRPO step's gradients (float32) of a fresh model on the synthetic
 * task, the memory tracker's peaks reset just before it.  Header-only. */
#ifndef LS_BENCH_STEP_H
#define LS_BENCH_STEP_H
#include <stdio.h>

#include "bench/bench_util.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/families/families.h"
#include "trainer/step/step.h"

/* The step of a model of config c (objective defaults, gradient mode gm)
 * under strategy s on the task of P prompt tokens, G members of R tokens:
 * its result in *res, its time in *seconds and (params not NULL) the model
 * in *params.  0, or -1 after saying why on stderr.  The model and batch
 * stay allocated: a benchmark runs each step in a child process of its own
 * (bench_in_child). */
static inline int bench_step(const ls_model_config *c, ls_grad_mode gm, ls_strategy s, size_t P, size_t G, size_t R,
                             ls_step_result *res, double *seconds, ls_params **params)
{
    char err[512];
    ls_objective o;
    ls_objective_defaults(&o);
    o.grad_mode = gm;
    ls_params *p = NULL;
    if (ls_params_init_f32(&p, c, &o, 1, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (params != NULL) *params = p;
    ls_task t;
    ls_batch *b = NULL;
    if (ls_task_make(&t, P, 8, 1) != LS_OK || ls_batch_alloc(&b, G) != LS_OK ||
        ls_batch_set_prompt(b, t.prompt, P) != LS_OK) {
        fprintf(stderr, "P=%zu: cannot make the task or its batch\n", P);
        return -1;
    }
    ls_step_options so;
    ls_step_options_defaults(&so);
    so.strategy = s;
    so.G = G;
    so.R = R;
    ls_mem_reset_peaks();
    double t0 = now_s();
    ls_status st = ls_step_grads_f32(p, b, &t, &so, NULL, res, err, sizeof err);
    *seconds = now_s() - t0;
    if (st != LS_OK) {
        fprintf(stderr, "P=%zu: %s\n", P, err);
        return -1;
    }
    return 0;
}
#endif
