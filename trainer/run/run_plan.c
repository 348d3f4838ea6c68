/* run_plan.c - the run's step plan (trainer/plan) against the budget. */
#include "trainer/run/run_plan.h"

#include <stdio.h>

#include "common/checked.h"

static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return ls_sat_mul(kb, 1024);
}

size_t LS_K(ls_run_budget)(const ls_train_args *a) {
    return a->memory_budget ? a->memory_budget : mem_available() / 10 * 9;
}

void LS_K(ls_run_plan_in)(const ls_train_args *a, const ls_run_shape *sh, size_t budget, ls_plan_in *in) {
    LS_K(ls_plan_in_defaults)(in, &a->cfg);
    in->obj = a->obj;
    in->strategy = a->step.strategy;
    in->P = sh->P;
    in->R = sh->Rmax;
    in->G = sh->G;
    in->world = a->comm ? ls_group_size(ls_comm_cp(a->comm)) : 1; /* the CP size (world / ep) */
    in->ep = a->ep > 1 ? a->ep : 1;                                  /* each EP rank holds E/ep experts */
    in->cp_rank = a->comm ? ls_group_rank(ls_comm_cp(a->comm)) : -1;
    in->page_size = a->step.page_size;
    in->capture_chunk = a->step.capture_chunk;
    in->rollout = a->rollouts == NULL;
    in->prefix_frozen = a->prefix_frozen > 1;
    in->budget = budget;
    in->keep_reference = a->keep_reference == 1 ? 1 : a->keep_reference == 2 ? 0 : -1;
    in->replay_checkpoint = a->replay_checkpoint >= 1 && a->replay_checkpoint <= 3 ? a->replay_checkpoint - 1 : -1;
    in->replay_chunk = (size_t)a->step.replay_chunk;
    in->state_tier = a->step.state_tier;
    in->host_budget = a->host_memory;
}

ls_status LS_K(ls_run_plan_check)(const ls_train_args *a, const ls_run_shape *sh, size_t budget, ls_plan *out) {
    ls_plan_in in;
    char err[1024];
    LS_K(ls_run_plan_in)(a, sh, budget, &in);
    ls_status st = LS_K(ls_plan_compute)(&in, out, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: --config %s: %s\n", a->config_path, err);
        return st;
    }
    if (a->host_memory && !ls_plan_fits(out->host_peak, a->host_memory)) {
        fprintf(stderr,
                "longstraw-train: --host-memory %zu: the memory plan's host tier (the prompt state, --state-tier "
                "host) needs %zu bytes, with the plan's 10%% margin above it; nothing was allocated for the step.\n",
                a->host_memory, out->host_peak);
        return LS_ERR_NOMEM;
    }
    if (!budget || ls_plan_fits(out->peak_total, budget)) return LS_OK;
    char need[64];
    if (out->peak_total == SIZE_MAX) snprintf(need, sizeof need, "more than 2^64 bytes");
    else snprintf(need, sizeof need, "%.3f GiB", out->peak_total / 1073741824.0);
    fprintf(stderr,
            "longstraw-train: the memory plan needs %s, with the plan's 10%% margin above the budget %.3f GiB "
            "(%s); nothing was allocated for the step.\n"
            "  --config %s, %s %zu, --response-len %zu, --group %zu, --grad-mode %s, --train-mode %s, %d rank(s).\n"
            "  Planned bytes per category at the peak (phase %s; weights, adapters, gradients and optimizer "
            "state included):\n",
            need, budget / 1073741824.0, a->memory_budget ? "--memory-budget" : "90% of MemAvailable",
            a->config_path, sh->where, sh->P, sh->Rmax, sh->G, a->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached",
            a->obj.train_mode == LS_TRAIN_FULL ? "full" : "lora", in.world, ls_plan_phase_name(out->peak_phase));
    for (int k = 0; k < LS_MEM_COUNT; k++) {
        if (out->peak[k] == SIZE_MAX) fprintf(stderr, "  %-22s  more than 2^64\n", ls_mem_cat_name((ls_mem_cat)k));
        else if (out->peak[k]) fprintf(stderr, "  %-22s %15zu\n", ls_mem_cat_name((ls_mem_cat)k), out->peak[k]);
    }
    return LS_ERR_NOMEM;
}
