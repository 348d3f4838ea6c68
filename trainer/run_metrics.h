/* run_metrics.h - one step's figures, three ways: the step_metrics trace
 * event, a line of the --metrics JSONL file (the same object), and one
 * line on stderr.  dtype-independent. */
#ifndef LS_TRAINER_RUN_METRICS_H
#define LS_TRAINER_RUN_METRICS_H
#include <stdint.h>
#include <stdio.h>
#include "trainer/run_obs.h"
#include "trainer/step.h"
#include "trainer/train_args.h"

typedef struct {
    FILE *f;          /* NULL: no --metrics file */
    const char *path;
} ls_run_metrics_sink;

/* Create path for writing (an existing file is refused: metrics of another
 * run are never appended to or overwritten).  LS_ERR_IO with err. */
ls_status ls_run_metrics_open(ls_run_metrics_sink *m, const char *path, char *err, size_t err_len);
/* Emit step s's figures (the trace write status is noted in ob; a failed
 * metrics-file write is reported on stderr once and the file dropped). */
void ls_run_metrics_emit(ls_run_metrics_sink *m, ls_run_obs *ob, const ls_train_args *a, int64_t s,
                         ls_objective_kind objective, const ls_step_result *res, int64_t step_wall_ns);
void ls_run_metrics_close(ls_run_metrics_sink *m);
/* --plot: the metrics file drawn as an SVG chart at svg_path (atomic):
 * reward_mean and, when the task's parts are there, reward_retrieval and
 * reward_format, against the step; kl_mean on the right-hand axis.  0, or
 * 1 with the failure on stderr. */
int ls_run_metrics_plot(const char *metrics_path, const char *svg_path, int has_parts, const char *title);
#endif
