/* run_input.c - the built-in task or the rollouts stream, step by step. */
#include "trainer/run/run_input.h"

#include <stdio.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"

/* The step's sizes: the largest over its groups; changed when they differ from the previous step's. */
static void set_shape(ls_run_input *in, ls_batch *const *bs, size_t n) {
    size_t P = 0, Rmax = 0, G = 0;
    for (size_t k = 0; k < n; k++) {
        const ls_batch *b = bs[k];
        for (size_t i = 0; i < b->G; i++) Rmax = b->R[i] > Rmax ? b->R[i] : Rmax;
        P = b->P > P ? b->P : P;
        G = b->G > G ? b->G : G;
    }
    in->shape_changed = in->P != P || in->Rmax != Rmax || in->G != G;
    in->P = P;
    in->Rmax = Rmax;
    in->G = G;
}

static void free_groups(ls_run_input *in) {
    for (size_t k = 0; in->bs && k < in->B; k++) {
        ls_batch_free(in->bs[k]);
        in->bs[k] = NULL;
        if (in->have_task) ls_task_free(&in->tasks[k]);
        if (in->task_ptrs) in->task_ptrs[k] = NULL;
    }
    in->b = NULL;
    in->have_task = 0;
}

ls_status ls_run_input_open(ls_run_input *in, const ls_train_args *a, char *err, size_t err_len) {
    memset(in, 0, sizeof *in);
    in->B = a->prompts_per_step ? a->prompts_per_step : 1;
    in->bs = ls_mem_alloc(LS_MEM_SCRATCH, in->B * sizeof *in->bs);
    in->tasks = ls_mem_alloc(LS_MEM_SCRATCH, in->B * sizeof *in->tasks);
    in->task_ptrs = ls_mem_alloc(LS_MEM_SCRATCH, in->B * sizeof *in->task_ptrs);
    if (!in->bs || !in->tasks || !in->task_ptrs) {
        snprintf(err, err_len, "--prompts-per-step %zu: no memory for the step's groups", in->B);
        return LS_ERR_NOMEM;
    }
    memset(in->bs, 0, in->B * sizeof *in->bs);
    memset(in->tasks, 0, in->B * sizeof *in->tasks);
    memset(in->task_ptrs, 0, in->B * sizeof *in->task_ptrs);
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
    if (st == LS_OK && in->lines_known && in->lines % in->B != 0) {
        snprintf(err, err_len, "%s: %zu group line(s) are not a multiple of --prompts-per-step %zu (a step reads %zu "
                 "lines)", a->rollouts, in->lines, in->B, in->B);
        return LS_ERR_FORMAT;
    }
    if (st == LS_OK) st = ls_rollouts_open(&in->rr, a->rollouts, a->cfg.vocab, 0, err, err_len);
    if (st == LS_OK) st = ls_rollouts_next(in->rr, &in->pending, err, err_len);
    if (st == LS_OK && !in->pending) {
        snprintf(err, err_len, "%s: no group (the input is empty)", a->rollouts);
        st = LS_ERR_FORMAT;
    }
    if (st != LS_OK) return st;
    in->line = ls_rollouts_line(in->rr);
    snprintf(in->where, sizeof in->where, "%s: line %zu", a->rollouts, in->line);
    set_shape(in, &in->pending, 1);
    in->shape_changed = 0; /* the opening plan covers it */
    return LS_OK;
}

int64_t ls_run_input_steps(const ls_run_input *in, const ls_train_args *a) {
    if (a->have_steps || !in->rr) return a->steps;
    return in->lines_known ? (int64_t)(in->lines / in->B) : -1;
}

ls_status ls_run_input_next(ls_run_input *in, const ls_train_args *a, uint64_t seed, int64_t task_step, int *end,
                            char *err, size_t err_len) {
    *end = 0;
    free_groups(in);
    ls_status st;
    if (in->rr) {
        size_t first_line = in->line;
        for (size_t k = 0; k < in->B; k++) {
            if (in->pending) {
                in->bs[k] = in->pending;
                in->pending = NULL;
            } else {
                if ((st = ls_rollouts_next(in->rr, &in->bs[k], err, err_len)) != LS_OK) return st;
                if (!in->bs[k]) {
                    if (k == 0) {
                        *end = 1;
                        return LS_OK;
                    }
                    snprintf(err, err_len, "%s: line %zu: the input ended inside a step (%zu of --prompts-per-step "
                             "%zu group lines)", a->rollouts, in->line, k, in->B);
                    return LS_ERR_TRUNCATED;
                }
                in->line = ls_rollouts_line(in->rr);
            }
            if (k == 0) first_line = in->line;
        }
        in->b = in->bs[0];
        if (in->B > 1)
            snprintf(in->where, sizeof in->where, "%s: lines %zu-%zu", a->rollouts, first_line, in->line);
        else
            snprintf(in->where, sizeof in->where, "%s: line %zu", a->rollouts, in->line);
        set_shape(in, in->bs, in->B);
        return LS_OK;
    }
    size_t vl = a->step.R < 8 ? a->step.R : 8;
    in->have_task = 1;
    for (size_t k = 0; k < in->B; k++) {
        uint64_t ix = (uint64_t)task_step * in->B + k; /* B = 1: the step's own index */
        if ((st = ls_task_make_kind(&in->tasks[k], (ls_task_kind)a->task, a->P, vl, a->recall_records, seed + ix)) !=
                LS_OK ||
            (st = ls_batch_alloc(&in->bs[k], a->step.G)) != LS_OK ||
            (st = ls_batch_set_prompt(in->bs[k], in->tasks[k].prompt, in->tasks[k].P)) != LS_OK) {
            snprintf(err, err_len, "cannot build the task batch: %s", ls_status_str(st));
            return st;
        }
        in->task_ptrs[k] = &in->tasks[k];
    }
    in->b = in->bs[0];
    in->shape_changed = 0;
    return LS_OK;
}

ls_status ls_run_input_digest(const ls_run_input *in, int *used, char hex[65], uint64_t *bytes) {
    *used = in->rr != NULL;
    return in->rr ? ls_rollouts_digest(in->rr, hex, bytes) : LS_OK;
}

void ls_run_input_close(ls_run_input *in) {
    free_groups(in);
    ls_batch_free(in->pending);
    ls_mem_free(in->bs);
    ls_mem_free(in->tasks);
    ls_mem_free(in->task_ptrs);
    ls_rollouts_close(in->rr);
    memset(in, 0, sizeof *in);
}
