/* levels.c - the parity rules and the evidence levels of docs/design.md §5.
 *
 * Levels 2-4 need a parity report (schemas/parity.schema.json, written by
 * longstraw-parity) naming the run's build digest and family, whose negative
 * controls (the run's profile lists them) all failed their comparisons
 * (parity.controls): level 2 passing
 * "logprob" checks for the run's world and dtype and passing "ref_logprob"
 * checks (the independent forward), level 3 "cp_grad" and "cp_params" (and,
 * for a run of data-parallel replicas, config dp_ranks D > 1, "dp_grad" of
 * DP D),
 * level 4 `full` gradient mode and "grad" for the run's world and dtype,
 * and, for a profile whose forward decides (mla: DSA top-k, MoE routing),
 * passing "decisions" checks (level 2: no comparison spans a near-tie),
 * "fd_grad" (finite differences) and "ref_loss".  A level holds when every applicable rule
 * of it passes and the level below holds. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <string.h>

#include "receipts/format/build_diff.h"
#include "receipts/format/build_info.h"
#include "receipts/format/coverage.h"

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* The EP size of a run's configuration or of a check ("ep_ranks" / "ep"; absent: 1); the DP size alike
 * ("dp_ranks" / "dp"). */
static int ep_of(const cJSON *o, const char *k) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 ? (int)v->valuedouble : 1;
}

/* The checks of one kind that speak for this run: for the kinds that
 * compare the run's computation (per_world: CP-N against references), its
 * dtype, world, EP size (an EP-N run of world cp x N: the checks of EP-N
 * runs of that world, "ep" N; an EP-1 run: those without "ep") and DP size
 * alike ("dp" D; a DP-1 run: those without "dp"; a one-rank run takes any
 * world's); with mode, also the run's gradient mode (a check without one
 * does not speak for it); the links of the
 * proof itself (independent reference, finite differences) are float64 and
 * speak for every run.  The rule fails on any such check that fails, and when none
 * passes. */
static void parity_kind_mode(ls_audit_run *run, ls_audit_rule *r, const char *kind, bool per_world, bool usable,
                             const char *mode) {
    const char *pf = run->parity_file[0] ? run->parity_file : "parity.json";
    if (!usable) {
        ls_audit_rule_fail(r, -1, pf, -1, "not proven: %s",
                           run->parity == NULL ? "no usable parity report" : "the parity report is not valid evidence for this run");
        return;
    }
    const char *dtype = run->config ? str_of(run->config, "dtype") : NULL;
    int run_ep = ep_of(run->config, "ep_ranks"), run_dp = ep_of(run->config, "dp_ranks");
    int passing = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(run->parity, "checks")) {
        const char *k = str_of(c, "kind"), *dt = str_of(c, "dtype");
        if (k == NULL || strcmp(k, kind) != 0) continue;
        if (per_world && dtype && dt && strcmp(dt, dtype) != 0) continue; /* the proof's own links are float64 */
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "world");
        if (!cJSON_IsNumber(w) || (per_world && run->world > 1 && w->valuedouble != (double)run->world)) continue;
        if (per_world && run->world > 1 && ep_of(c, "ep") != run_ep) continue; /* another grid of the same world */
        if (per_world && run->world > 1 && ep_of(c, "dp") != run_dp) continue; /* other replicas of the same world */
        const char *gm = str_of(c, "grad_mode");
        if (mode && (gm == NULL || strcmp(gm, mode) != 0)) continue;       /* another gradient mode */
        r->matched++;
        const char *name = str_of(c, "name");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"))) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(c, "max_rel_err");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "tolerance");
            ls_audit_rule_fail(r, -1, pf, -1, "check %s (%s, world %d) fails: max_rel_err %g, tolerance %g (worst: %.100s)",
                               name ? name : "?", kind, (int)w->valuedouble, cJSON_IsNumber(e) ? e->valuedouble : -1.0,
                               cJSON_IsNumber(t) ? t->valuedouble : -1.0, str_of(c, "worst") ? str_of(c, "worst") : "?");
            continue;
        }
        passing++;
    }
    if (passing == 0 && r->n_ev == 0) {
        char where[64] = "";
        if (per_world && run->world > 1)
            snprintf(where, sizeof where, " for world %u%s", (unsigned)run->world, run_ep > 1 ? " at EP" : "");
        if (per_world && run->world > 1 && run_ep > 1)
            snprintf(where + strlen(where), sizeof where - strlen(where), "-%d", run_ep);
        if (per_world && run->world > 1 && run_dp > 1)
            snprintf(where + strlen(where), sizeof where - strlen(where), " at DP-%d", run_dp);
        ls_audit_rule_fail(r, -1, pf, -1, "not proven: the parity report has no passing %s check%s%s%s%s%s%s", kind,
                           where, per_world && dtype ? " in " : "", per_world && dtype ? dtype : "",
                           mode ? " (" : "", mode ? mode : "", mode ? " mode)" : "");
    }
}

static void parity_kind(ls_audit_run *run, ls_audit_rule *r, const char *kind, bool per_world, bool usable) {
    parity_kind_mode(run, r, kind, per_world, usable, NULL);
}

/* A report whose controls did not fail is no evidence: every control the
 * run's profile lists present, each failing the kind of check the profile
 * says it breaks, every control in the report detected. */
static bool parity_controls(ls_audit_run *run, ls_audit_rule *r) {
    const char *pf = run->parity_file[0] ? run->parity_file : "parity.json";
    const cJSON *controls = cJSON_GetObjectItemCaseSensitive(run->parity, "controls"), *c;
    bool ok = true;
    cJSON_ArrayForEach(c, controls) {
        r->matched++;
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected"))) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "world");
            ls_audit_rule_fail(r, -1, pf, -1, "control %s (%s, world %d, %s) was not detected: its comparison %s passed, "
                               "so the report cannot tell a faulty run from a correct one",
                               str_of(c, "fault") ? str_of(c, "fault") : "?", str_of(c, "dtype") ? str_of(c, "dtype") : "?",
                               cJSON_IsNumber(w) ? (int)w->valuedouble : -1, str_of(c, "configuration") ? str_of(c, "configuration") : "?",
                               str_of(c, "check") ? str_of(c, "check") : "?");
            ok = false;
        }
    }
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    if (prof == NULL) {
        ls_audit_rule_fail(r, -1, pf, -1, "no profile to name the controls: %s", run->profile_err);
        return false;
    }
    const bool dp_run = ep_of(run->config, "dp_ranks") > 1;
    for (size_t i = 0; i < ls_audit_profile_n_controls(prof); i++) {
        const ls_audit_profile_control *want = ls_audit_profile_control_at(prof, i);
        /* a control that breaks dp_grad speaks for data-parallel runs only (a DP-1 run's report runs no DP) */
        if (strcmp(want->breaks, "dp_grad") == 0 && !dp_run) continue;
        bool seen = false;
        cJSON_ArrayForEach(c, controls) {
            const char *f = str_of(c, "fault"), *b = str_of(c, "breaks");
            if (f == NULL || strcmp(f, want->name) != 0) continue;
            seen = true;
            if (b != NULL && strcmp(b, want->breaks) != 0) {
                ls_audit_rule_fail(r, -1, pf, -1, "control %s breaks %s, profile %s says it must fail %s", f, b,
                                   prof->name, want->breaks);
                ok = false;
            }
        }
        if (!seen) {
            ls_audit_rule_fail(r, -1, pf, -1, "the parity report has no %s control (a negative control that must fail)",
                               want->name);
            ok = false;
        }
    }
    return ok;
}

typedef struct {
    ls_audit_rule *rule;
    const char *file;
} outside_ctx;

static void on_outside(void *user, const char *field, const char *detail) {
    outside_ctx *c = user;
    ls_audit_rule_fail(c->rule, -1, c->file, -1, "outside the evidence: %s (%s)", detail, field);
}

/* The run's configuration lies inside the report's coverage (every field
 * outside named); a one-rank run or a run of another CP size is checked
 * against the worlds the report ran. */
static void parity_coverage(ls_audit_run *run, ls_audit_rule *r) {
    const char *pf = run->parity_file[0] ? run->parity_file : "parity.json";
    r->matched = 1;
    /* every field outside is named, even for a report of another build */
    if (run->parity == NULL) {
        ls_audit_rule_fail(r, -1, pf, -1, "not proven: no usable parity report");
        return;
    }
    outside_ctx c = {.rule = r, .file = pf};
    size_t n = ls_coverage_check(cJSON_GetObjectItemCaseSensitive(run->parity, "coverage"), run->config, run->world,
                                 on_outside, &c);
    if (n == 0)
        snprintf(r->message, sizeof r->message, "the run lies inside the report's coverage (model, trainable set, "
                 "objective, gradient mode, strategy, dtype, %u rank(s))", (unsigned)run->world);
}

/* parity.build when the digests differ: what differs, when the report
 * records the build it ran ("build", longstraw-parity since it does) and
 * that object is its build_digest's (recomputed as readers do); an older
 * report without one keeps the digests alone.  The verdict is the digests'. */
static void parity_build_differs(const ls_audit_run *run, ls_audit_rule *r, const char *pf, const char *bd) {
    const char *rd = run->build_digest;
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(run->parity, "build");
    if (rb == NULL || run->build == NULL) {
        ls_audit_rule_fail(r, -1, pf, -1, "the parity report is from build %.64s, the run is %.64s", bd, rd);
        return;
    }
    char why[200] = "", hex[LS_DIGEST_HEX_SIZE];
    const char *own = str_of(rb, "build_digest");
    if (own == NULL)
        snprintf(why, sizeof why, "it has no build_digest");
    else if (strcmp(own, bd) != 0)
        snprintf(why, sizeof why, "its build_digest %.16s... is not the report's", own);
    else if (ls_build_info_digest_any(rb, hex, why, sizeof why) != LS_OK) {
        if (why[0] == 0) snprintf(why, sizeof why, "it cannot be digested"); /* else why names what */
    } else if (strcmp(hex, own) != 0)
        snprintf(why, sizeof why, "recomputed as its readers do: %.16s...", hex);
    if (why[0] != 0) {
        ls_audit_rule_fail(r, -1, pf, -1, "the parity report is from build %.64s, the run is %.64s: the report's build "
                           "object does not match its build_digest (%s)", bd, rd, why);
        return;
    }
    ls_build_diff d;
    if (ls_build_diff_compare(rb, run->build, "the report", "the run", &d) == 0) {
        ls_audit_rule_fail(r, -1, pf, -1, "the parity report is from build %.64s, the run is %.64s", bd, rd);
        return;
    }
    /* the digests and the first difference, then one evidence line per further difference */
    char head[200], line[sizeof r->ev[0].detail];
    int k = snprintf(head, sizeof head, "the parity report is from build %.64s, the run is %.64s: ", bd, rd);
    ls_build_diff_join(&d, 0, 1, false, line, sizeof line - (size_t)k);
    ls_audit_rule_fail(r, -1, pf, -1, "%s%s", head, line);
    size_t shown_lines = d.n < 4 ? d.n : 4;
    for (size_t i = 1; i < shown_lines; i++) ls_audit_rule_fail(r, -1, pf, -1, "and %s", d.item[i].line);
    if (d.total > shown_lines || d.stopped) {
        ls_build_diff_join(&d, shown_lines, 0, true, line, sizeof line);
        ls_audit_rule_fail(r, -1, pf, -1, "%s", line);
    }
    char all[sizeof r->message];
    ls_build_diff_join(&d, 0, 4, true, all, sizeof all - 80);
    snprintf(r->message, sizeof r->message, "the parity report is from another build (%zu difference%s from the run's): %s",
             d.total, d.total == 1 ? "" : "s", all);
}

const char *ls_audit_assurance_name(ls_audit_assurance a) {
    return a == LS_AUDIT_RUN_PARITY_SIGNED ? "run-and-parity-signed" : a == LS_AUDIT_RUN_SIGNED ? "run-signed" : "unsigned";
}

ls_audit_assurance ls_audit_assurance_of(const ls_audit_run *run) {
    if (run->dsse_status != LS_OK) return LS_AUDIT_UNSIGNED;
    return run->parity != NULL && run->parity_dsse_status == LS_OK ? LS_AUDIT_RUN_PARITY_SIGNED : LS_AUDIT_RUN_SIGNED;
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
        else if (bd == NULL)
            ls_audit_rule_fail(pb, -1, pf, -1, "the parity report is from build ?, the run is %.64s", run->build_digest);
        else if (strcmp(bd, run->build_digest) != 0)
            parity_build_differs(run, pb, pf, bd);
        else
            usable = true;
        const char *fam = run->config ? str_of(run->config, "family") : NULL, *pfam = str_of(run->parity, "family");
        if (usable && fam && pfam && strcmp(fam, pfam) != 0) {
            ls_audit_rule_fail(pb, -1, pf, -1, "the parity report is for family %s, the run is %s", pfam, fam);
            usable = false;
        }
    }
    ls_audit_rule_close(pb);

    ADD(ps, "parity.signature", 2, "the parity report is signed by a trusted --parity-key (its envelope beside it)",
        run->opt.n_parity_keys > 0 || run->opt.require_signed);
    if (ps->applicable) {
        const char *ef = run->parity_envelope[0] ? run->parity_envelope : "parity.dsse.json";
        ps->matched = 1;
        if (run->opt.n_parity_keys == 0)
            ls_audit_rule_fail(ps, -1, ef, -1, "--require-signed: no --parity-key given: the parity report is "
                               "unauthenticated");
        else if (run->parity_dsse_status != LS_OK)
            ls_audit_rule_fail(ps, -1, ef, -1, "the parity report is unauthenticated: %s (%s)", run->parity_dsse_err,
                               ls_status_str((ls_status)run->parity_dsse_status));
        else
            snprintf(ps->message, sizeof ps->message, "verified with parity key %.16s...", run->parity_keyid);
    } else {
        snprintf(ps->message, sizeof ps->message, "not applicable: no --parity-key given (the parity report, if any, "
                 "is unauthenticated)");
    }
    ls_audit_rule_close(ps);

    ADD(pv, "parity.coverage", 2,
        "the run lies inside what the parity report proves (model, trainable set, objective, modes, dtype, CP size)",
        true);
    parity_coverage(run, pv);
    ls_audit_rule_close(pv);

    ADD(pk, "parity.controls", 2, "parity: every negative control failed its comparison (the report can fail)", true);
    if (usable) usable = parity_controls(run, pk);
    else ls_audit_rule_fail(pk, -1, pf, -1, "not proven: no usable parity report");
    pk->matched = pk->matched ? pk->matched : 1;
    ls_audit_rule_close(pk);

    /* a comparison across a near-tie proves nothing: the report must show every discrete decision of its
     * fixtures clear of the composition noise (longstraw-parity's "decisions" checks, any dtype) */
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    /* the profile says whether the forward decides; a run that names no family (its profile inferred) may */
    bool decides = prof == NULL || run->profile_inferred || ls_audit_profile_decisions(prof);
    ADD(pd, "parity.decisions", 2,
        "parity: every discrete decision of the fixtures (DSA top-k, MoE routing) clears the composition noise",
        decides);
    if (decides) parity_kind(run, pd, "decisions", false, usable);
    else snprintf(pd->message, sizeof pd->message, "not applicable: the %s family makes no discrete decision "
                  "(no top-k, no routing)", prof->name);
    ls_audit_rule_close(pd);
    ADD(pl, "parity.logprob", 2, "parity: CP-N response log-probs equal the single-rank reference", true);
    parity_kind(run, pl, "logprob", true, usable);
    ls_audit_rule_close(pl);
    ADD(pr, "parity.forward", 2, "parity: the float64 log-probs equal the independent reference's (tests/reference)", true);
    parity_kind(run, pr, "ref_logprob", false, usable);
    ls_audit_rule_close(pr);
    ADD(pc, "parity.cp_grad", 3, "parity: CP-N gradients equal CP-1 gradients", true);
    parity_kind(run, pc, "cp_grad", true, usable);
    ls_audit_rule_close(pc);
    ADD(pp, "parity.cp_params", 3, "parity: CP-N parameters after the step equal CP-1 parameters", true);
    parity_kind(run, pp, "cp_params", true, usable);
    ls_audit_rule_close(pp);
    /* data-parallel replicas (an adapter's trainer, config dp_ranks D > 1): the replicas' averaged gradient
     * equals the one group's (parity's dp_grad checks of DP D, the run's world, dtype and gradient mode) */
    const int run_dp = ep_of(run->config, "dp_ranks");
    ADD(pdp, "parity.dp_grad", 3,
        "parity: DP-D gradients (the data-parallel replicas' average) equal the DP-1 gradients of the same CP size",
        run_dp > 1);
    if (run_dp > 1) {
        const char *gm = run->config ? str_of(run->config, "grad_mode") : NULL;
        parity_kind_mode(run, pdp, "dp_grad", true, usable, gm ? gm : "(none)");
    } else {
        const cJSON *d = run->config ? cJSON_GetObjectItemCaseSensitive(run->config, "dp_ranks") : NULL;
        snprintf(pdp->message, sizeof pdp->message, "not applicable: the run has no data-parallel replicas (config "
                 "dp_ranks %s)", d == NULL ? "absent" : cJSON_IsNumber(d) && d->valuedouble == 1 ? "1"
                                                                    : "not a DP size: parity.coverage names it");
    }
    ls_audit_rule_close(pdp);
    ADD(fm, "config.full_mode", 4, "the run used full gradient mode", true);
    fm->matched = 1;
    if (!run->full_mode)
        ls_audit_rule_fail(fm, -1, LS_MANIFEST_FILE, -1, "grad_mode is %s",
                           run->config && str_of(run->config, "grad_mode") ? str_of(run->config, "grad_mode")
                                                                           : "unknown");
    ls_audit_rule_close(fm);
    ls_status pst = ls_audit_rules_probe(run); /* run.probe: the run's own gradient (rules_probe.c) */
    if (pst != LS_OK) return pst;
    ADD(pg, "parity.grad", 4, "parity: the gradient equals the full-sequence reference for every trainable tensor",
        true);
    parity_kind(run, pg, "grad", true, usable);
    ls_audit_rule_close(pg);
    ADD(pf2, "parity.fd_grad", 4, "parity: the float64 gradient equals directional finite differences of the loss",
        true);
    parity_kind(run, pf2, "fd_grad", false, usable);
    ls_audit_rule_close(pf2);
    ADD(pl2, "parity.loss", 4, "parity: the float64 loss equals the independent reference's", true);
    parity_kind(run, pl2, "ref_loss", false, usable);
    ls_audit_rule_close(pl2);

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
