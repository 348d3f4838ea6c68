/* run_probe.h - the gradient probe in a longstraw-train run (--probe-every K,
 * --probe-groups; trainer/step/probe.h): which steps it probes, their
 * gradient_probe trace events, the run's tally and its summary line.
 * dtype-independent. */
#ifndef LS_TRAINER_RUN_PROBE_H
#define LS_TRAINER_RUN_PROBE_H
#include <stdint.h>
#include <stdio.h>

#include "receipts/writing/trace_writer.h"
#include "trainer/step/probe.h"

/* What the run's probes found (ls_run_probe_note). */
typedef struct {
    uint64_t probed;          /* gradient_probe events written */
    uint64_t n[4];            /* by verdict (ls_probe_verdict) */
    double max_rel_error;     /* the largest group rel_error of the pass / fail probes */
    double max_rel_reported;  /* ... of the reported ones (detached) */
    double seconds;           /* the probes' time on this rank */
    int64_t first_fail_step;  /* -1: none failed */
    char first_fail[400];     /* the first failure: step, group, numbers */
    char first_na[300];       /* the first not_applicable probe: step and reason ("" none) */
} ls_run_probe_tally;

/* 1 when the run's step of run-local index i (0 for its first step) is
 * probed: K >= 1 and i % K == 0. */
int ls_run_probe_due(int K, int64_t i);
/* The gradient_probe event of step (global, 0-based) from r: every field
 * of schemas/event-gradient_probe.schema.json.  The writer's status. */
ls_status ls_run_probe_emit(ls_trace_writer *w, int64_t step, const ls_probe_result *r);
/* Adds r (step's) to t; t zero-initialised first with first_fail_step -1. */
void ls_run_probe_note(ls_run_probe_tally *t, int64_t step, const ls_probe_result *r);
/* One line naming a failed probe (step, group, numbers) into buf. */
void ls_run_probe_describe(const ls_probe_result *r, int64_t step, char *buf, size_t cap);
/* The summary's probe line(s) on f (nothing when no step was probed); a
 * failure says so loudly. */
void ls_run_probe_print(const ls_run_probe_tally *t, FILE *f);
#endif
