/* run_input.h - each step's batches, one per group (--prompts-per-step B):
 * the built-in key/value task (a new prompt per group, task index
 * step x B + group; or one per prefix-frozen block), or one group per line
 * of an external rollouts file or stream (--rollouts FILE|-), B lines a
 * step.  The first line is
 * read when the input opens, so that its sizes enter the memory plan before
 * the parameters are allocated.  dtype-independent. */
#ifndef LS_TRAINER_RUN_INPUT_H
#define LS_TRAINER_RUN_INPUT_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/io/batch.h"
#include "trainer/step/task.h"
#include "trainer/run/train_args.h"

typedef struct {
    ls_rollouts_reader *rr; /* NULL: the built-in task */
    ls_batch *b;            /* the current step's first group's batch (bs[0]) */
    ls_batch **bs;          /* [B] the current step's groups */
    ls_task *tasks;         /* [B] their tasks (have_task) */
    const ls_task **task_ptrs; /* [B] &tasks[k] (have_task) or NULL */
    size_t B;               /* groups per step */
    ls_batch *pending;      /* the rollouts line read ahead at open */
    int have_task;
    size_t P, Rmax, G;      /* the current step's sizes (the largest over its groups) */
    int shape_changed;      /* the sizes differ from the previous step's */
    size_t line;            /* rollouts: the current line number */
    size_t lines;           /* rollouts: lines counted in the file (when lines_known) */
    int lines_known;
    char where[512];        /* "--prompt-len" or "FILE: line N" */
} ls_run_input;

/* Open the input of a->rollouts (or the task: nothing to open).  LS_OK, or
 * an error with err naming the file and line.  *in holds the file and its
 * buffers until ls_run_input_close. */
ls_status ls_run_input_open(ls_run_input *in, const ls_train_args *a, char *err, size_t err_len);
/* Steps to run: --steps when given, else the rollouts file's line count
 * over B (open refuses a count that is not a multiple of B), -1 for a
 * stream of unknown length (until it ends), else --steps' default. */
int64_t ls_run_input_steps(const ls_run_input *in, const ls_train_args *a);
/* The batches of the step whose task index is task_step (group k's task
 * prompt is drawn from seed + task_step x B + k).  *end is set (LS_OK) when
 * the rollouts ended before the step's first line; an error names the line
 * and field (a stream that ends inside a step: its last line). */
ls_status ls_run_input_next(ls_run_input *in, const ls_train_args *a, uint64_t seed, int64_t task_step, int *end,
                            char *err, size_t err_len);
/* The rollouts bytes consumed so far (ls_rollouts_digest): LS_OK with
 * *used = 1, the digest in hex and the count in *bytes when the run reads
 * --rollouts; LS_OK with *used = 0 for the built-in task (nothing else
 * written); LS_ERR_INTERNAL when the digest cannot be had. */
ls_status ls_run_input_digest(const ls_run_input *in, int *used, char hex[65], uint64_t *bytes);
void ls_run_input_close(ls_run_input *in);
#endif
