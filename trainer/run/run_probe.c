/* run_probe.c - the gradient probe's events, tally and summary line
 * (run_probe.h). */
#include "trainer/run/run_probe.h"

#include <math.h>
#include <string.h>

int ls_run_probe_due(int K, int64_t i) { return K >= 1 && i >= 0 && i % K == 0; }

/* finite, else 0 (the probe records no non-finite figure: probe.h nonfinite) */
static double fin(double v) { return isfinite(v) ? v : 0.0; }

ls_status ls_run_probe_emit(ls_trace_writer *w, int64_t step, const ls_probe_result *r) {
    cJSON *e = cJSON_CreateObject(), *gs = NULL;
    if (!e) return LS_ERR_NOMEM;
    int ok = cJSON_AddNumberToObject(e, "step", (double)step) &&
             cJSON_AddStringToObject(e, "objective", r->sft ? "sft" : "grpo") &&
             cJSON_AddStringToObject(e, "grad_mode", r->full ? "full" : "detached") &&
             cJSON_AddStringToObject(e, "grouping", ls_probe_grouping_name(r->grouping)) &&
             cJSON_AddNumberToObject(e, "h", fin(r->h)) && cJSON_AddNumberToObject(e, "seed", (double)r->seed) &&
             cJSON_AddNumberToObject(e, "evaluations", (double)r->evaluations) &&
             cJSON_AddNumberToObject(e, "seconds", fin(r->seconds)) && cJSON_AddNumberToObject(e, "tol", fin(r->tol)) &&
             cJSON_AddStringToObject(e, "verdict", ls_probe_verdict_name(r->verdict)) &&
             (!r->reason[0] || cJSON_AddStringToObject(e, "reason", r->reason)) &&
             cJSON_AddBoolToObject(e, "ranks_agree", r->ranks_agree != 0) &&
             (gs = cJSON_AddArrayToObject(e, "groups")) != NULL;
    for (size_t k = 0; ok && k < r->n_groups; k++) {
        const ls_probe_group *g = &r->groups[k];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(gs, o) && cJSON_AddStringToObject(o, "name", g->name) &&
             cJSON_AddNumberToObject(o, "tensors", (double)g->tensors) &&
             cJSON_AddNumberToObject(o, "derivative", fin(g->derivative)) &&
             cJSON_AddNumberToObject(o, "applied", fin(g->applied)) &&
             cJSON_AddNumberToObject(o, "error_estimate", fin(g->error_estimate)) &&
             cJSON_AddNumberToObject(o, "rounding_floor", fin(g->rounding_floor)) &&
             cJSON_AddNumberToObject(o, "rel_error", fin(g->rel_error)) &&
             cJSON_AddNumberToObject(o, "tolerance", fin(g->tolerance)) && cJSON_AddNumberToObject(o, "h", g->h) &&
             cJSON_AddBoolToObject(o, "decided_alike", g->decided_alike != 0) &&
             cJSON_AddStringToObject(o, "verdict", ls_probe_verdict_name(g->verdict));
    }
    ls_status st = ok ? ls_trace_emit_json(w, "gradient_probe", e) : LS_ERR_NOMEM;
    cJSON_Delete(e);
    return st;
}

/* The group that decided a failure: the first failing one, else the worst. */
static const ls_probe_group *worst(const ls_probe_result *r) {
    const ls_probe_group *w = NULL;
    for (size_t k = 0; k < r->n_groups; k++) {
        const ls_probe_group *g = &r->groups[k];
        if (g->verdict == LS_PROBE_FAIL || g->nonfinite) return g;
        if (!w || g->rel_error > w->rel_error) w = g;
    }
    return w;
}

void ls_run_probe_describe(const ls_probe_result *r, int64_t step, char *buf, size_t cap) {
    const ls_probe_group *g = worst(r);
    if (!g) {
        snprintf(buf, cap, "step %lld: %s", (long long)step + 1, r->reason[0] ? r->reason : "no group");
        return;
    }
    snprintf(buf, cap, "step %lld group %s: derivative %.10g, applied %.10g, rel error %.3g, tolerance %.3g%s%s",
             (long long)step + 1, g->name, g->derivative, g->applied, g->rel_error, g->tolerance,
             r->reason[0] ? "; " : "", r->reason);
}

void ls_run_probe_note(ls_run_probe_tally *t, int64_t step, const ls_probe_result *r) {
    t->probed++;
    if ((int)r->verdict >= 0 && (int)r->verdict < 4) t->n[r->verdict]++;
    t->seconds += r->seconds;
    for (size_t k = 0; k < r->n_groups; k++) {
        double e = r->groups[k].rel_error;
        double *m = r->verdict == LS_PROBE_REPORTED ? &t->max_rel_reported : &t->max_rel_error;
        if (r->verdict != LS_PROBE_NOT_APPLICABLE && e > *m) *m = e;
    }
    if (r->verdict == LS_PROBE_NOT_APPLICABLE && !t->first_na[0])
        snprintf(t->first_na, sizeof t->first_na, "step %lld: %s", (long long)step + 1, r->reason);
    if (r->verdict == LS_PROBE_FAIL && t->first_fail_step < 0) {
        t->first_fail_step = step;
        ls_run_probe_describe(r, step, t->first_fail, sizeof t->first_fail);
    }
}

void ls_run_probe_print(const ls_run_probe_tally *t, FILE *f) {
    if (t->probed == 0) return;
    if (t->n[LS_PROBE_FAIL]) {
        fprintf(f, "  GRADIENT PROBE FAILED on %llu of %llu probed step(s): the applied gradient is not the loss's "
                   "derivative; first: %s\n",
                (unsigned long long)t->n[LS_PROBE_FAIL], (unsigned long long)t->probed, t->first_fail);
        return;
    }
    fprintf(f, "  gradient probe: %llu step(s) probed, %llu pass", (unsigned long long)t->probed,
            (unsigned long long)t->n[LS_PROBE_PASS]);
    if (t->n[LS_PROBE_REPORTED]) fprintf(f, ", %llu reported", (unsigned long long)t->n[LS_PROBE_REPORTED]);
    if (t->n[LS_PROBE_NOT_APPLICABLE])
        fprintf(f, ", %llu not applicable", (unsigned long long)t->n[LS_PROBE_NOT_APPLICABLE]);
    if (t->n[LS_PROBE_PASS]) fprintf(f, "; largest rel error %.3g", t->max_rel_error);
    if (t->n[LS_PROBE_REPORTED])
        fprintf(f, "; detached: the applied gradient is %.3g off the loss's (relative)", t->max_rel_reported);
    fprintf(f, " (%.3f s)\n", t->seconds);
    if (t->n[LS_PROBE_NOT_APPLICABLE]) fprintf(f, "  gradient probe not applicable, first: %s\n", t->first_na);
}
