/* rules_probe.c - rule run.probe (level 4; docs/audit.md, docs/evidence.md
 * "The run's own gradient: the probe"): the run's own gradient, at its full
 * size, held against finite differences of its loss by the trainer's
 * gradient probe (longstraw-train --probe-every K, gradient_probe events).
 *
 * Facts (ls_audit_probe_note, while a trace streams): per rank, every
 * gradient_probe event's step, seq, verdict, a digest of every field but
 * its time (seconds), the deciding group's figures, and the text of the
 * first non-pass ones.
 *
 * The rule: every step the configuration says was probed (options.probe_every
 * K: the run-local steps i with i % K == 0) has exactly one gradient_probe
 * event on every rank, with verdict pass, and every rank's is the same (the
 * digests equal the lowest rank's).  A failing probe, a missing one, or
 * ranks that disagree fail level 4, naming the step, rank, group and
 * numbers.  Not applicable: no step probed (K 0; absent, a run written
 * before the probe, and no gradient_probe event: the run promised none; an
 * event without a recorded K fails), unless --require-probe; detached mode (the applied gradient is not the
 * loss's by design: its probes report the difference, they prove nothing;
 * config.full_mode keeps level 4 from holding). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One gradient_probe event of a rank. */
typedef struct {
    int64_t step, seq;
    uint64_t digest;   /* every field but seconds (ls_audit_probe_note) */
    double derivative, applied, rel_error, tolerance; /* the deciding group's (the first failing, else the worst) */
    int verdict;       /* 0 pass, 1 fail, 2 reported, 3 not_applicable, 4 other */
    int note;          /* index into notes (-1: none kept) */
} probe_fact;

#define PROBE_NOTES 16 /* non-pass probes whose text a rank keeps */

struct ls_audit_probes {
    probe_fact *f;
    size_t n, cap;
    bool overflow;     /* more than LS_AUDIT_MAX_STEPS events: the rest not kept (the rule fails) */
    char notes[PROBE_NOTES][300];
    size_t n_notes;
};

static const char *const VERDICTS[] = {"pass", "fail", "reported", "not_applicable"};

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(it) && isfinite(it->valuedouble) ? it->valuedouble : 0.0;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

ls_status ls_audit_probe_note(ls_audit_rank *r, const ls_trace_event *ev) {
    const cJSON *j = ev->json;
    int64_t step = -1;
    if (j == NULL || !ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(j, "step"), &step) || step < 0)
        return LS_OK; /* the reader named it */
    if (r->probes == NULL && (r->probes = calloc(1, sizeof *r->probes)) == NULL) return LS_ERR_NOMEM;
    struct ls_audit_probes *p = r->probes;
    if (p->n >= LS_AUDIT_MAX_STEPS) {
        p->overflow = true;
        return LS_OK;
    }
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        probe_fact *n = realloc(p->f, ncap * sizeof *n);
        if (n == NULL) return LS_ERR_NOMEM;
        p->f = n;
        p->cap = ncap;
    }
    probe_fact *f = &p->f[p->n++];
    memset(f, 0, sizeof *f);
    f->step = step;
    f->seq = ev->seq;
    f->note = -1;
    const char *v = str(j, "verdict");
    f->verdict = 4;
    for (int k = 0; v && k < 4; k++)
        if (strcmp(v, VERDICTS[k]) == 0) f->verdict = k;
    /* the digest: every member but the envelope and the time, as the writer wrote it (cJSON prints a double
     * that reads back the same: equal numbers, equal text) */
    uint64_t h = 1469598103934665603ull;
    const cJSON *c;
    cJSON_ArrayForEach(c, j) {
        const char *k = c->string ? c->string : "";
        if (!strcmp(k, "v") || !strcmp(k, "rank") || !strcmp(k, "seq") || !strcmp(k, "ts_ns") || !strcmp(k, "seconds"))
            continue;
        char *t = cJSON_PrintUnformatted(c);
        if (t == NULL) return LS_ERR_NOMEM;
        h = fnv_bytes(fnv_bytes(h, k, strlen(k) + 1), t, strlen(t) + 1);
        free(t);
    }
    f->digest = h;
    /* the deciding group: the first that did not pass, else the worst */
    const cJSON *g, *pick = NULL;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(j, "groups")) {
        const char *gv = str(g, "verdict");
        if (gv && strcmp(gv, "pass") != 0) {
            pick = g;
            break;
        }
        if (pick == NULL || num(g, "rel_error") > num(pick, "rel_error")) pick = g;
    }
    f->derivative = num(pick, "derivative");
    f->applied = num(pick, "applied");
    f->rel_error = num(pick, "rel_error");
    f->tolerance = num(pick, "tolerance");
    if (f->verdict != 0 && p->n_notes < PROBE_NOTES) {
        const char *reason = str(j, "reason");
        char *d = p->notes[p->n_notes];
        if (pick)
            snprintf(d, sizeof p->notes[0], "group %s: derivative %.10g, applied %.10g, rel_error %.3g, tolerance %.3g%s%.150s",
                     str(pick, "name") ? str(pick, "name") : "?", f->derivative, f->applied, f->rel_error, f->tolerance,
                     reason ? "; " : "", reason ? reason : "");
        else
            snprintf(d, sizeof p->notes[0], "no group%s%.200s", reason ? ": " : "", reason ? reason : "");
        f->note = (int)p->n_notes++;
    }
    return LS_OK;
}

void ls_audit_probes_free(ls_audit_rank *r) {
    if (r->probes) free(r->probes->f);
    free(r->probes);
    r->probes = NULL;
}

/* Rank r's events of step s: the first in *out (NULL none); the count. */
static size_t probes_of(const ls_audit_rank *r, int64_t s, const probe_fact **out) {
    *out = NULL;
    size_t n = 0;
    for (size_t k = 0; r->probes && k < r->probes->n; k++)
        if (r->probes->f[k].step == s && n++ == 0) *out = &r->probes->f[k];
    return n;
}

ls_status ls_audit_rules_probe(ls_audit_run *run) {
    const cJSON *opts = run->config ? cJSON_GetObjectItemCaseSensitive(run->config, "options") : NULL;
    const cJSON *pe = opts ? cJSON_GetObjectItemCaseSensitive(opts, "probe_every") : NULL;
    /* required by the caller (--require-probe) or by the run's profile ("probe": "required") */
    bool require = run->opt.require_probe || (run->profile_state == 1 && run->profile.probe_required);
    if (pe == NULL && !require) {
        /* a run written before probes records no probe_every: it promised no probe, and the rule does not apply;
           gradient_probe events it does hold are evidence of steps the configuration never named (deny by default) */
        uint64_t events = 0;
        for (uint32_t i = 0; i < run->world; i++) events += run->ranks[i].probes ? run->ranks[i].probes->n : 0;
        ls_audit_rule *na = ls_audit_rule_add(run, "run.probe", 4,
                                              "the run's own gradient passed the in-run gradient probe (finite "
                                              "differences of its loss) on every probed step, alike on every rank",
                                              events > 0);
        if (na == NULL) return LS_ERR_NOMEM;
        if (events > 0) {
            na->matched = events;
            ls_audit_rule_fail(na, -1, LS_MANIFEST_FILE, -1, "%llu gradient_probe event(s), but the configuration "
                               "records no options.probe_every: which steps were to be probed is unknown",
                               (unsigned long long)events);
        } else {
            snprintf(na->message, sizeof na->message, "not applicable: the configuration records no "
                     "options.probe_every (a run written before the probe) and the traces hold no gradient_probe "
                     "event: the run promised no probe");
        }
        ls_audit_rule_close(na);
        return LS_OK;
    }
    int64_t K = 0;
    bool k_ok = pe == NULL || (ls_trace_json_int(pe, &K) && K >= 0 && K <= 1000000);
    bool probed = k_ok && K > 0;
    bool applicable = k_ok && (probed || require) && run->full_mode;
    ls_audit_rule *rl = ls_audit_rule_add(run, "run.probe", 4,
                                          "the run's own gradient passed the in-run gradient probe (finite differences "
                                          "of its loss) on every probed step, alike on every rank",
                                          applicable || !k_ok);
    if (rl == NULL) return LS_ERR_NOMEM;
    if (!k_ok) {
        rl->matched = 1;
        ls_audit_rule_fail(rl, -1, LS_MANIFEST_FILE, -1, "options.probe_every is not an integer in [0, 1000000]: "
                           "which steps were probed is unknown");
        ls_audit_rule_close(rl);
        return LS_OK;
    }
    if (!run->full_mode) {
        double worst = 0;
        uint64_t n = 0;
        for (uint32_t i = 0; i < run->world; i++)
            for (size_t k = 0; run->ranks[i].probes && k < run->ranks[i].probes->n; k++, n++)
                if (run->ranks[i].probes->f[k].rel_error > worst) worst = run->ranks[i].probes->f[k].rel_error;
        if (n)
            snprintf(rl->message, sizeof rl->message, "not applicable: detached gradients are not the loss's by "
                     "design; %llu probe(s) reported the applied gradient up to %.3g off the loss's derivative",
                     (unsigned long long)n, worst);
        else
            snprintf(rl->message, sizeof rl->message, "not applicable: detached gradients are not the loss's by design");
        ls_audit_rule_close(rl);
        return LS_OK;
    }
    if (!applicable) {
        snprintf(rl->message, sizeof rl->message, "not applicable: no step was probed (options.probe_every %s)",
                 pe ? "0" : "absent");
        ls_audit_rule_close(rl);
        return LS_OK;
    }
    if (!probed) {
        rl->matched = 1;
        ls_audit_rule_fail(rl, -1, LS_MANIFEST_FILE, -1, "%s: the run probed no step (options.probe_every "
                           "%s; longstraw-train --probe-every K)",
                           run->opt.require_probe ? "--require-probe" : "its profile requires the probe",
                           pe ? "0" : "absent");
        ls_audit_rule_close(rl);
        return LS_OK;
    }
    uint64_t required = 0;
    for (int64_t s = run->first_step; s < run->n_run_steps; s++) {
        if ((s - run->first_step) % K != 0) continue;
        required++;
        const probe_fact *ref = NULL;
        uint32_t ref_rank = 0;
        for (uint32_t i = 0; i < run->world; i++) {
            const ls_audit_rank *r = &run->ranks[i];
            const probe_fact *f;
            size_t n = probes_of(r, s, &f);
            rl->matched += n;
            if (n == 0) {
                ls_audit_rule_fail(rl, i, r->trace_file, -1, "step %lld: no gradient_probe event on rank %u "
                                   "(options.probe_every %lld probes it)", (long long)s, (unsigned)i, (long long)K);
                continue;
            }
            if (n > 1)
                ls_audit_rule_fail(rl, i, r->trace_file, f->seq, "step %lld: %zu gradient_probe events on rank %u, "
                                   "one expected", (long long)s, n, (unsigned)i);
            if (f->verdict != 0)
                ls_audit_rule_fail(rl, i, r->trace_file, f->seq, "step %lld rank %u: verdict %s: %s", (long long)s,
                                   (unsigned)i, f->verdict < 4 ? VERDICTS[f->verdict] : "(unknown)",
                                   f->note >= 0 ? r->probes->notes[f->note] : "(its text not kept: more than 16)");
            if (ref == NULL) {
                ref = f;
                ref_rank = i;
            } else if (f->digest != ref->digest) {
                ls_audit_rule_fail(rl, i, r->trace_file, f->seq, "step %lld: rank %u's gradient_probe differs from "
                                   "rank %u's (derivative %.17g against %.17g, applied %.17g against %.17g)",
                                   (long long)s, (unsigned)i, (unsigned)ref_rank, f->derivative, ref->derivative,
                                   f->applied, ref->applied);
            }
        }
    }
    for (uint32_t i = 0; i < run->world; i++)
        if (run->ranks[i].probes && run->ranks[i].probes->overflow)
            ls_audit_rule_fail(rl, i, run->ranks[i].trace_file, -1, "more gradient_probe events than the audit keeps "
                               "(%d): the rest unchecked", LS_AUDIT_MAX_STEPS);
    if (required == 0) {
        rl->matched = rl->matched ? rl->matched : 1;
        ls_audit_rule_fail(rl, -1, LS_MANIFEST_FILE, -1, "options.probe_every %lld, but the run has no step", (long long)K);
    }
    if (rl->n_ev == 0)
        snprintf(rl->message, sizeof rl->message, "%llu probed step(s) (every %lld), %llu event(s): every one passed, "
                 "alike on every rank", (unsigned long long)required, (long long)K, (unsigned long long)rl->matched);
    ls_audit_rule_close(rl);
    return LS_OK;
}
