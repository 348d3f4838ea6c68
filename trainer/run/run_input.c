/* run_input.c - the built-in task or the rollouts stream, step by step. */
#include "trainer/run/run_input.h"

#include <stdio.h>
#include <string.h>

static void set_shape(ls_run_input *in, const ls_batch *b) {
    size_t Rmax = 0;
    for (size_t i = 0; i < b->G; i++) Rmax = b->R[i] > Rmax ? b->R[i] : Rmax;
    in->shape_changed = in->P != b->P || in->Rmax != Rmax || in->G != b->G;
    in->P = b->P;
    in->Rmax = Rmax;
    in->G = b->G;
}

ls_status ls_run_input_open(ls_run_input *in, const ls_train_args *a, char *err, size_t err_len) {
    memset(in, 0, sizeof *in);
    if (!a->rollouts) {
        in->P = a->P;
        in->Rmax = a->step.R;
        in->G = a->step.G;
        size_t vl = a->step.R < 8 ? a->step.R : 8, sft = ls_task_sft_len((ls_task_kind)a->task, a->P, vl, a->recall_records);
        if ((a->step.objective == LS_OBJECTIVE_SFT || a->sft_steps > 0) && sft > in->Rmax)
            in->Rmax = sft; /* the sft branch: every record's answer */
        snprintf(in->where, sizeof in->where, "--prompt-len");
        return LS_OK;
    }
    ls_status st = ls_rollouts_count_lines(a->rollouts, &in->lines, &in->lines_known, err, err_len);
    if (st == LS_OK) st = ls_rollouts_open(&in->rr, a->rollouts, a->cfg.vocab, 0, err, err_len);
    if (st == LS_OK) st = ls_rollouts_next(in->rr, &in->pending, err, err_len);
    if (st == LS_OK && !in->pending) {
        snprintf(err, err_len, "%s: no group (the input is empty)", a->rollouts);
        st = LS_ERR_FORMAT;
    }
    if (st != LS_OK) return st;
    in->line = ls_rollouts_line(in->rr);
    snprintf(in->where, sizeof in->where, "%s: line %zu", a->rollouts, in->line);
    set_shape(in, in->pending);
    in->shape_changed = 0; /* the opening plan covers it */
    return LS_OK;
}

int64_t ls_run_input_steps(const ls_run_input *in, const ls_train_args *a) {
    if (a->have_steps || !in->rr) return a->steps;
    return in->lines_known ? (int64_t)in->lines : -1;
}

ls_status ls_run_input_next(ls_run_input *in, const ls_train_args *a, uint64_t seed, int64_t task_step, int *end,
                            char *err, size_t err_len) {
    *end = 0;
    ls_batch_free(in->b);
    in->b = NULL;
    ls_status st;
    if (in->rr) {
        if (in->pending) {
            in->b = in->pending;
            in->pending = NULL;
            in->shape_changed = 0;
            return LS_OK;
        }
        if ((st = ls_rollouts_next(in->rr, &in->b, err, err_len)) != LS_OK) return st;
        if (!in->b) {
            *end = 1;
            return LS_OK;
        }
        in->line = ls_rollouts_line(in->rr);
        snprintf(in->where, sizeof in->where, "%s: line %zu", a->rollouts, in->line);
        set_shape(in, in->b);
        return LS_OK;
    }
    ls_task_free(&in->task);
    in->have_task = 0;
    size_t vl = a->step.R < 8 ? a->step.R : 8;
    if ((st = ls_task_make_kind(&in->task, (ls_task_kind)a->task, a->P, vl, a->recall_records,
                                  seed + (uint64_t)task_step)) != LS_OK ||
        (st = ls_batch_alloc(&in->b, a->step.G)) != LS_OK ||
        (st = ls_batch_set_prompt(in->b, in->task.prompt, in->task.P)) != LS_OK) {
        snprintf(err, err_len, "cannot build the task batch: %s", ls_status_str(st));
        return st;
    }
    in->have_task = 1;
    in->shape_changed = 0;
    return LS_OK;
}

ls_status ls_run_input_digest(const ls_run_input *in, int *used, char hex[65], uint64_t *bytes) {
    *used = in->rr != NULL;
    return in->rr ? ls_rollouts_digest(in->rr, hex, bytes) : LS_OK;
}

void ls_run_input_close(ls_run_input *in) {
    ls_batch_free(in->b);
    ls_batch_free(in->pending);
    ls_task_free(&in->task);
    ls_rollouts_close(in->rr);
    memset(in, 0, sizeof *in);
}
