/* run_obs.h - what a longstraw-train run observes while its steps run: the
 * step observer that turns phases and layers into trace events, memory
 * snapshots, per-phase totals for the receipt, and the progress display on
 * stderr (one updating line per phase on a terminal, plain lines
 * otherwise).  dtype-independent. */
#ifndef LS_TRAINER_RUN_OBS_H
#define LS_TRAINER_RUN_OBS_H
#include <stdint.h>
#include "receipts/writing/trace_writer.h"
#include "trainer/model/config.h"
#include "trainer/step/step.h"

#define LS_RUN_OBS_PROBE LS_PHASE_COUNT /* the slot of the probe's phase in count/ns */

typedef struct {
    ls_trace_writer *w;       /* borrowed */
    const ls_model_config *cfg;
    int64_t step;             /* the step being run (0-based, global across resumes) */
    int64_t steps_total;      /* the last step's index + 1 (-1: until the input ends) */
    int quiet;                /* no progress at all */
    int tty;                  /* stderr is a terminal: progress overwrites one line */
    /* receipt phase totals: v1's phases, then the gradient probe's ("probe", LS_RUN_OBS_PROBE) */
    uint64_t count[LS_PHASE_COUNT + 1], ns[LS_PHASE_COUNT + 1];
    int64_t phase_t0, last_print;
    int line_open;            /* a progress line without its newline is on the terminal */
    ls_status emit_err;       /* the first trace write failure */
    char emit_msg[512];       /* ... the writer's message about it (names the file) */
    int kill_phase;           /* fault injection: LS_PHASE_* where this rank SIGKILLs itself (-1: never) */
    int kill_layer;           /* ... after its first layer_end of this layer in that phase (INT_MIN: as it begins) */
} ls_run_obs;

/* Set up o for writer w (stderr's terminal-ness is read here). */
void ls_run_obs_init(ls_run_obs *o, ls_trace_writer *w, const ls_model_config *cfg, int quiet);
/* Fault injection (--fault kill-rank=R@PHASE[:L]): this rank raises SIGKILL
 * as `phase` (LS_PHASE_*) begins, or, when at_layer, right after the first
 * layer_end of `layer` in that phase; the trace is flushed first so that it
 * ends with that event. */
void ls_run_obs_arm_kill(ls_run_obs *o, int phase, int at_layer, int layer);
/* The step observer whose user is o. */
ls_step_observer ls_run_obs_observer(ls_run_obs *o);
/* Phase bracket for phases the trainer runs itself (the optimizer). */
void ls_run_obs_begin(ls_run_obs *o, const char *phase);
void ls_run_obs_end(ls_run_obs *o, const char *phase, int64_t wall_ns, int ok);
/* Record a trace write status (the first failure is kept, with the
 * writer's message in emit_msg). */
void ls_run_obs_note(ls_run_obs *o, ls_status st);
/* Print one line of text on stderr, ending any open progress line first. */
void ls_run_obs_print(ls_run_obs *o, const char *line);
/* Monotonic nanoseconds. */
int64_t ls_run_now_ns(void);
/* Bytes in human units ("3.21 MiB") into buf. */
const char *ls_run_human_bytes(char *buf, size_t cap, double bytes);
#endif
