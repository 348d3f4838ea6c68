/* run_plan.c - memory plan of a run, per category, against the budget. */
#include "trainer/run/run_plan.h"

#include <stdio.h>

#include "common/checked.h"
#include "trainer/model/family.h"
#include "trainer/model/params.h"
#include "trainer/families/families.h"

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

ls_status LS_K(ls_run_plan)(const ls_train_args *a, const ls_run_shape *sh, size_t plan_b[LS_MEM_COUNT], char *err,
                            size_t err_len) {
    const ls_model_config *c = &a->cfg;
    for (int k = 0; k < LS_MEM_COUNT; k++) plan_b[k] = 0;
    if (sh->with_params) {
        ls_status st = LS_K(ls_params_plan)(c, &a->obj, plan_b, err, err_len);
        if (st != LS_OK) return st;
    }
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    for (int k = 0; k < LS_MEM_COUNT; k++) plan_b[k] = ls_sat_add(plan_b[k], s.live_bytes[k]);
    size_t P = sh->P, L = (size_t)c->n_layers, d = (size_t)c->d_model, sz = sizeof(ls_real);
    const ls_family_ops *fam = LS_K(ls_family_ops_of)(c->family, err, err_len);
    if (!fam) return LS_ERR_UNSUPPORTED;
    /* context parallelism: this rank holds a shard (at most ceil((P-1)/N) positions, cp.h); what its
       capture and prompt backward keep besides are the family's terms */
    int world = a->comm ? ls_comm_world(a->comm) : 1;
    size_t cpP = world > 1 ? (P - 1 + (size_t)world - 1) / (size_t)world + 1 : P;
    size_t lpt = fam->plan_layer_bytes_per_token(c, a->obj.lora_r);
    size_t state = fam->state_plan_bytes(c, (int64_t)cpP - 1);
    size_t dsz = ls_sat_mul(d, sz);
    int full = a->obj.grad_mode == LS_GRAD_FULL;
    /* one prompt state at a time, the reference's included; a prefix-frozen
     * run with a reference keeps both across its steps */
    int states = a->prefix_frozen > 0 && a->obj.beta > 0 ? 2 : 1;
#define ADD(cat, x) (plan_b[cat] = ls_sat_add(plan_b[cat], (x)))
    ADD(LS_MEM_PROMPT_STATE, ls_sat_mul(states, state));
    ls_family_plan_in fin = {.cpP = cpP, .world = world, .full = full,
                             .expert_lora_r = a->obj.train_mode == LS_TRAIN_LORA && a->obj.lora_experts ? a->obj.lora_r : 0};
    fam->plan_terms(c, &fin, plan_b);
    if (world > 1) P = cpP; /* the rest of the plan is the shard's */
    if (a->step.strategy == LS_STRATEGY_LONGSTRAW) {
        ADD(LS_MEM_BRANCH, ls_sat_mul3(L, sh->Rmax, lpt));
        size_t cc = a->step.capture_chunk && a->step.capture_chunk < P ? a->step.capture_chunk : P;
        ADD(LS_MEM_SCRATCH, ls_sat_add(ls_sat_mul3(2, cc, dsz), ls_sat_mul(cc, lpt))); /* one layer of one segment */
        if (full) {
            ADD(LS_MEM_PROMPT_GRAD, state);
            ADD(LS_MEM_CHECKPOINT, ls_sat_mul3(L, P - 1, dsz));
            ADD(LS_MEM_SCRATCH, ls_sat_add(ls_sat_mul3(2, cc, lpt), ls_sat_mul(P, dsz))); /* recompute window, dh */
        }
    } else {
        size_t T = ls_sat_add(P, sh->Rmax);
        ADD(LS_MEM_BRANCH, ls_sat_mul3(L, T, lpt));
        ADD(LS_MEM_SCRATCH, ls_sat_mul(T, lpt));
    }
    /* scoring: the response ids, log-prob rows and the rollout's decode rows */
    ADD(LS_MEM_SCORE, ls_sat_mul(ls_sat_mul(sh->G, sh->Rmax), 2 * sizeof(double) + sizeof(int32_t)));
#undef ADD
    return LS_OK;
}

ls_status LS_K(ls_run_plan_check)(const ls_train_args *a, const ls_run_shape *sh, size_t budget) {
    size_t pl[LS_MEM_COUNT], total = 0;
    char err[1024];
    ls_status st = LS_K(ls_run_plan)(a, sh, pl, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: --config %s: %s\n", a->config_path, err);
        return st;
    }
    for (int k = 0; k < LS_MEM_COUNT; k++) total = ls_sat_add(total, pl[k]);
    if (!budget || total <= budget) return LS_OK;
    char need[64];
    if (total == SIZE_MAX) snprintf(need, sizeof need, "more than 2^64 bytes");
    else snprintf(need, sizeof need, "%.3f GiB", total / 1073741824.0);
    fprintf(stderr,
            "longstraw-train: the memory plan needs %s, above the budget %.3f GiB (%s); %s.\n"
            "  --config %s, %s %zu, --response-len %zu, --group %zu, --grad-mode %s, --train-mode %s.\n"
            "  Planned bytes per category (%s):\n",
            need, budget / 1073741824.0, a->memory_budget ? "--memory-budget" : "90% of MemAvailable",
            sh->with_params ? "nothing was allocated" : "the step was not started", a->config_path, sh->where,
            sh->P, sh->Rmax, sh->G, a->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached",
            a->obj.train_mode == LS_TRAIN_FULL ? "full" : "lora",
            sh->with_params ? "weights, adapters, gradients and optimizer state included"
                            : "what is live now included");
    for (int k = 0; k < LS_MEM_COUNT; k++) {
        if (pl[k] == SIZE_MAX) fprintf(stderr, "  %-22s  more than 2^64\n", ls_mem_cat_name((ls_mem_cat)k));
        else if (pl[k]) fprintf(stderr, "  %-22s %15zu\n", ls_mem_cat_name((ls_mem_cat)k), pl[k]);
    }
    return LS_ERR_NOMEM;
}
