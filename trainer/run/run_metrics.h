/* run_metrics.h - one step's figures, three ways: the step_metrics trace
 * event, a line of the --metrics JSONL file (the same object), and one
 * line on stderr.  dtype-independent. */
#ifndef LS_TRAINER_RUN_METRICS_H
#define LS_TRAINER_RUN_METRICS_H
#include <stdint.h>
#include "trainer/run/run_obs.h"
#include "trainer/step/step.h"
#include "trainer/run/train_args.h"

typedef struct {
    int open;         /* 0: no --metrics file (a zeroed sink), or none after a failed line */
    int fd;           /* the file, when open */
    const char *path;
    int64_t end;      /* bytes of whole lines written: where the next line begins */
} ls_run_metrics_sink;

/* Create path for writing (an existing file is refused: metrics of another
 * run are never appended to or overwritten).  LS_ERR_IO with err. */
ls_status ls_run_metrics_open(ls_run_metrics_sink *m, const char *path, char *err, size_t err_len);
/* Append text[len] and a newline to the file as one whole line or not at
 * all: one write(2) loop on the descriptor (no stdio buffer), so that a
 * killed run leaves whole lines; after a failed or short write the file is
 * truncated back to the line's start (ftruncate) and closed (m->open = 0).
 * LS_OK (also when no file is open); LS_ERR_IO with err naming the file and
 * the cause (and a failed truncation); LS_ERR_NOMEM before any byte is
 * written (the file stays open).  text must not hold a newline. */
ls_status ls_run_metrics_append(ls_run_metrics_sink *m, const char *text, size_t len, char *err, size_t err_len);
/* Emit step s's figures: the step_metrics trace event (its write status
 * noted in ob), the stderr line, and the line of the metrics file
 * (ls_run_metrics_append).  res: the step's (its B groups' aggregate).
 * B > 1: the file's line also holds "prompts_per_step": B and "groups", each
 * group's own figures from group_res [B] (the trace event holds the
 * aggregate only).  LS_OK, or the metrics file's failure with err naming the
 * file and the step (the file then ends at the step before). */
ls_status ls_run_metrics_emit(ls_run_metrics_sink *m, ls_run_obs *ob, const ls_train_args *a, int64_t s,
                              ls_objective_kind objective, const ls_step_result *res, const ls_step_result *group_res,
                              size_t B, int64_t step_wall_ns, char *err, size_t err_len);
/* Close the file (a no-op when none is open).  LS_ERR_IO with err naming it
 * when close(2) reports a failed write (err may be NULL). */
ls_status ls_run_metrics_close(ls_run_metrics_sink *m, char *err, size_t err_len);
/* --plot: the metrics file drawn as an SVG chart at svg_path (atomic:
 * whole or not at all): reward_mean and, when the task's parts are there,
 * reward_retrieval and reward_format, against the step; kl_mean on the
 * right-hand axis; from 500 steps on smoothed (ls_plot_auto_smooth).  LS_OK,
 * or the failure with err naming the file. */
ls_status ls_run_metrics_plot(const char *metrics_path, const char *svg_path, int has_parts, const char *title,
                              char *err, size_t err_len);
#endif
