/* vocab.c - the run model's vocabularies (audit.h): the slots of phase and
 * layer-kind names in a run's traces (v1's enums first, a v2 trace's new names
 * after them), and the names of the step_metrics figures. */
#include "audit/model/audit.h"

#include <stdio.h>
#include <string.h>

static const char *const SM_NAMES[LS_AUDIT_SM_COUNT] = {
    "reward_mean", "reward_std", "reward_min", "reward_max", "adv_mean", "adv_std", "loss", "loss_policy",
    "loss_kl", "kl_mean", "clip_fraction", "ratio_min", "ratio_mean", "ratio_max", "response_len_mean", "tokens"};

const char *ls_audit_sm_name(ls_audit_sm_field f) {
    return (int)f >= 0 && f < LS_AUDIT_SM_COUNT ? SM_NAMES[f] : NULL;
}

static void vocab_init(ls_audit_run *run) {
    if (run->n_phase_names == 0)
        for (int p = 0; p < LS_PHASE_COUNT; p++)
            snprintf(run->phase_names[run->n_phase_names++], sizeof run->phase_names[0], "%s",
                     ls_trace_phase_name((ls_trace_phase)p));
    if (run->n_kind_names == 0)
        for (int k = 0; k < LS_TRACE_LAYER_KIND_COUNT; k++)
            snprintf(run->kind_names[run->n_kind_names++], sizeof run->kind_names[0], "%s",
                     ls_trace_layer_kind_name((ls_trace_layer_kind)k));
}

/* name's slot in names[0..*n), appended when absent and one is free; -1 when not. */
static int vocab_slot(char (*names)[LS_AUDIT_VOCAB_NAME + 1], int *n, int cap, bool *overflow, const char *name) {
    for (int i = 0; i < *n; i++)
        if (strcmp(names[i], name) == 0) return i;
    if (*n >= cap || strlen(name) > LS_AUDIT_VOCAB_NAME) {
        *overflow = true;
        return -1;
    }
    snprintf(names[*n], LS_AUDIT_VOCAB_NAME + 1, "%s", name);
    return (*n)++;
}

int ls_audit_phase_index(ls_audit_run *run, const char *phase) {
    vocab_init(run);
    if (phase == NULL) return LS_AUDIT_NPHASE - 1;
    int p = vocab_slot(run->phase_names, &run->n_phase_names, LS_AUDIT_NPHASE - 1, &run->vocab_overflow, phase);
    return p >= 0 ? p : LS_AUDIT_NPHASE - 1;
}

int ls_audit_phase_count(const ls_audit_run *run) {
    return run->n_phase_names > 0 ? run->n_phase_names : LS_PHASE_COUNT; /* not yet filled: v1's */
}

const char *ls_audit_phase_name(const ls_audit_run *run, int index) {
    if (index >= 0 && index < run->n_phase_names) return run->phase_names[index];
    return index >= 0 && index < LS_PHASE_COUNT ? ls_trace_phase_name((ls_trace_phase)index) : "other";
}

int ls_audit_kind_index(ls_audit_run *run, const char *kind) {
    vocab_init(run);
    if (kind == NULL) return -1;
    return vocab_slot(run->kind_names, &run->n_kind_names, LS_AUDIT_NKIND, &run->vocab_overflow, kind);
}
