/* levels.c - the parity rules and the evidence levels of DESIGN.md §5.
 *
 * Levels 2-4 need a parity report (schemas/parity.schema.json) naming the
 * run's build digest: level 2 a passing "logprob" check, level 3 a passing
 * "cp_grad" check, level 4 `full` gradient mode and a passing "grad" check,
 * each for the run's world size.  A level holds when every applicable rule
 * of it passes and the level below holds. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/audit.h"

#include <string.h>

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* A passing check of this kind for the run's world in the parity report. */
static void parity_kind(ls_audit_run *run, ls_audit_rule *r, const char *kind, bool usable) {
    if (!usable) {
        ls_audit_rule_fail(r, -1, run->parity_file[0] ? run->parity_file : "parity.json", -1,
                           "not proven: %s", run->parity == NULL ? "no parity report" : "the parity report is not this build's");
        return;
    }
    bool found = false;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(run->parity, "checks")) {
        const char *k = str_of(c, "kind");
        if (k == NULL || strcmp(k, kind) != 0) continue;
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "world");
        const char *name = str_of(c, "name");
        r->matched++;
        if (!cJSON_IsNumber(w) || (run->world > 1 && w->valuedouble != (double)run->world)) continue;
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"))) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(c, "max_rel_err");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "tolerance");
            ls_audit_rule_fail(r, -1, run->parity_file, -1, "check %s (%s, world %d) fails: max_rel_err %g, tolerance %g",
                               name ? name : "?", kind, (int)w->valuedouble, cJSON_IsNumber(e) ? e->valuedouble : -1.0,
                               cJSON_IsNumber(t) ? t->valuedouble : -1.0);
            continue;
        }
        found = true;
    }
    if (!found && r->n_ev == 0)
        ls_audit_rule_fail(r, -1, run->parity_file, -1, "not proven: the parity report has no passing %s check for world %u",
                           kind, (unsigned)run->world);
}

ls_status ls_audit_levels_run(ls_audit_run *run) {
    ADD(pb, "parity.build", 2, "a parity report from the same build (build digest)", true);
    bool usable = false;
    const char *pf = run->parity_file[0] ? run->parity_file : "parity.json";
    pb->matched = 1;
    if (run->parity == NULL) {
        ls_audit_rule_fail(pb, -1, pf, -1, "not proven: %s",
                           run->parity_present ? run->parity_err : "no parity report");
    } else {
        const char *bd = str_of(run->parity, "build_digest");
        if (run->build_digest == NULL)
            ls_audit_rule_fail(pb, -1, pf, -1, "the run has no readable build digest to compare");
        else if (bd == NULL || strcmp(bd, run->build_digest) != 0)
            ls_audit_rule_fail(pb, -1, pf, -1, "the parity report is from build %.64s, the run is %.64s", bd ? bd : "?",
                               run->build_digest);
        else
            usable = true;
        const char *fam = run->config ? str_of(run->config, "family") : NULL, *pfam = str_of(run->parity, "family");
        if (usable && fam && pfam && strcmp(fam, pfam) != 0) {
            ls_audit_rule_fail(pb, -1, pf, -1, "the parity report is for family %s, the run is %s", pfam, fam);
            usable = false;
        }
    }
    ls_audit_rule_close(pb);

    ADD(pl, "parity.logprob", 2, "parity: CP-N response log-probs equal the single-rank reference", true);
    parity_kind(run, pl, "logprob", usable);
    ls_audit_rule_close(pl);
    ADD(pc, "parity.cp_grad", 3, "parity: CP-N gradients equal CP-1 gradients", true);
    parity_kind(run, pc, "cp_grad", usable);
    ls_audit_rule_close(pc);
    ADD(fm, "config.full_mode", 4, "the run used full gradient mode", true);
    fm->matched = 1;
    if (!run->full_mode)
        ls_audit_rule_fail(fm, -1, LS_MANIFEST_FILE, -1, "grad_mode is %s",
                           run->config && str_of(run->config, "grad_mode") ? str_of(run->config, "grad_mode")
                                                                           : "unknown");
    ls_audit_rule_close(fm);
    ADD(pg, "parity.grad", 4, "parity: the gradient equals the full-sequence reference for every trainable tensor",
        true);
    parity_kind(run, pg, "grad", usable);
    ls_audit_rule_close(pg);

    run->level = 0;
    bool below = true;
    for (int l = 1; l <= 4; l++) {
        bool ok = below;
        for (size_t i = 0; i < run->n_rules; i++)
            if (run->rules[i].level == l && run->rules[i].applicable && !run->rules[i].pass) ok = false;
        run->level_holds[l] = ok;
        if (ok) run->level = l;
        below = ok;
    }
    return LS_OK;
}
