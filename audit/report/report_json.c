/* report_json.c - the audit report document (schemas/audit-report.schema.json). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "audit/report/basis.h"

#include <math.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h"

static const char *LEVEL_NAMES[5] = {"none", "execution capacity", "response-operator fidelity",
                                     "distributed-update consistency", "full-gradient parity"};

static int add_i64(cJSON *o, const char *k, int64_t v) {
    return cJSON_AddNumberToObject(o, k, (double)v) ? 0 : -1;
}

static cJSON *rule_json(const ls_audit_rule *r) {
    cJSON *c = cJSON_CreateObject();
    if (c == NULL) return NULL;
    cJSON_AddStringToObject(c, "id", r->id);
    cJSON_AddStringToObject(c, "title", r->title);
    cJSON_AddBoolToObject(c, "applicable", r->applicable);
    /* a rule that does not apply proved nothing: it never reads as a pass */
    cJSON_AddBoolToObject(c, "pass", r->applicable && r->pass);
    cJSON_AddStringToObject(c, "verdict", !r->applicable ? "not_applicable" : r->pass ? "pass" : "fail");
    ls_json_add_u64(c, "matched", r->matched);
    cJSON *ev = cJSON_AddArrayToObject(c, "evidence");
    for (size_t k = 0; ev && k < r->n_ev; k++) {
        const ls_audit_evidence *e = &r->ev[k];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL) break;
        if (e->rank >= 0 && e->rank <= 65535) add_i64(o, "rank", e->rank);
        cJSON_AddStringToObject(o, "file", e->file[0] ? e->file : ".");
        if (e->seq >= 0) add_i64(o, "seq", e->seq);
        cJSON_AddStringToObject(o, "detail", e->detail);
        cJSON_AddItemToArray(ev, o);
    }
    ls_json_add_u64(c, "evidence_dropped", r->n_ev_dropped);
    cJSON_AddStringToObject(c, "message", r->message);
    return c;
}

static double fin(double d) { return isfinite(d) ? d : 0.0; }

static cJSON *rank_json(const ls_audit_run *run, const ls_audit_rank *r) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    add_i64(o, "rank", r->rank);
    cJSON_AddBoolToObject(o, "receipt", r->receipt != NULL);
    cJSON_AddStringToObject(o, "trace", r->trace_present ? ls_trace_end_name(r->report.end) : "missing");
    ls_json_add_u64(o, "events", r->n_events);
    cJSON *ph = cJSON_AddObjectToObject(o, "phases");
    const int np = ls_audit_phase_count(run);
    for (int q = 0; ph && q <= np; q++) { /* the named phases, then "other" */
        int p = q < np ? q : LS_AUDIT_NPHASE - 1;
        if (r->phase_begin[p] == 0 && r->phase_end[p] == 0) continue;
        cJSON *x = cJSON_AddObjectToObject(ph, ls_audit_phase_name(run, p));
        if (x == NULL) continue;
        ls_json_add_u64(x, "begun", r->phase_begin[p]);
        ls_json_add_u64(x, "ended", r->phase_end[p]);
        ls_json_add_u64(x, "wall_ns", r->phase_wall_ns[p]);
    }
    ls_json_add_u64(o, "layer_fwd", r->layer_fwd);
    ls_json_add_u64(o, "layer_bwd", r->layer_bwd);
    ls_json_add_u64(o, "collectives", r->n_coll_total);
    uint64_t opt = 0;
    for (size_t s = 0; s < r->steps_cap; s++) opt += r->steps[s].opt_count;
    ls_json_add_u64(o, "optimizer_steps", opt);
    ls_json_add_u64(o, "errors", r->n_errors);
    cJSON_AddBoolToObject(o, "rank_complete", r->rank_complete);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_peak_bytes");
    for (size_t c = 0; mem && c < run->n_mem_cats; c++) ls_json_add_u64(mem, run->mem_cats[c], r->mem_peak[c]);
    ls_json_add_u64(o, "total_peak_bytes", r->mem_total_peak);
    ls_json_add_u64(o, "rss_peak_bytes", r->mem_rss_peak);
    /* the byte-exact figures: the receipt's (the trace's memory events are sampled at phase boundaries) */
    if (r->receipt != NULL) {
        ls_json_add_u64(o, "receipt_total_peak_bytes", r->receipt->run_total_peak_bytes);
        ls_json_add_u64(o, "receipt_rss_peak_bytes", r->receipt->rss_peak_bytes);
    }
    add_i64(o, "wall_ns", r->n_events > 1 ? r->last_ts - r->first_ts : 0);
    if (run->evidence_version == 2 && r->report.header_ok && r->report.version == 2) {
        /* v2 only: the trace's vocabularies, names by index (docs/contract.md §1) */
        cJSON *vo = cJSON_AddObjectToObject(o, "vocabulary");
        cJSON *vp = vo ? cJSON_AddArrayToObject(vo, "phases") : NULL;
        cJSON *vk = vo ? cJSON_AddArrayToObject(vo, "layer_kinds") : NULL;
        for (size_t i = 0; vp && i < r->report.n_phases; i++)
            cJSON_AddItemToArray(vp, cJSON_CreateString(r->report.phases[i]));
        for (size_t i = 0; vk && i < r->report.n_layer_kinds; i++)
            cJSON_AddItemToArray(vk, cJSON_CreateString(r->report.layer_kinds[i]));
    }
    cJSON *last = cJSON_AddObjectToObject(o, "last");
    if (last) {
        add_i64(last, "seq", r->last_seq);
        cJSON_AddStringToObject(last, "event", r->last_ev);
        cJSON_AddStringToObject(last, "phase", r->last_phase);
        cJSON_AddBoolToObject(last, "in_phase", r->in_phase);
        add_i64(last, "step", r->last_step);
        add_i64(last, "member", r->last_member);
        add_i64(last, "layer", r->last_layer);
        cJSON_AddStringToObject(last, "layer_phase", r->last_layer_phase);
        cJSON_AddStringToObject(last, "layer_dir", r->last_layer_dir);
    }
    cJSON *sm = cJSON_AddArrayToObject(o, "step_metrics");
    for (size_t k = 0; sm && k < r->n_metrics; k++) {
        const ls_audit_step_metric *m = &r->metrics[k];
        cJSON *x = cJSON_CreateObject();
        if (x == NULL) break;
        add_i64(x, "step", m->step);
        cJSON_AddNumberToObject(x, "loss", fin(m->loss));
        cJSON_AddNumberToObject(x, "reward_mean", fin(m->reward_mean));
        cJSON_AddNumberToObject(x, "kl_mean", fin(m->kl_mean));
        cJSON_AddNumberToObject(x, "grad_norm", fin(m->grad_norm));
        cJSON_AddNumberToObject(x, "step_wall_s", fin(m->step_wall_s));
        cJSON_AddBoolToObject(x, "prefix_frozen", m->prefix_frozen);
        cJSON_AddItemToArray(sm, x);
    }
    return o;
}

static cJSON *rank_list(const ls_audit_rank_list *l) {
    cJSON *a = cJSON_CreateArray();
    for (uint32_t k = 0; a && k < l->n; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber(l->r[k]));
    return a;
}

/* The forensics object; false when an allocation failed. */
static bool forensics_json(const ls_audit_run *run, cJSON *fo) {
    bool crashed = false;
    for (uint32_t i = 0; i < run->world; i++)
        if (!run->ranks[i].rank_complete) crashed = true;
    bool ok = cJSON_AddBoolToObject(fo, "crashed", crashed) != NULL;
    ok = ok && cJSON_AddStringToObject(fo, "first_divergent_collective", run->coll_divergence);
    ok = ok && cJSON_AddStringToObject(fo, "first_digest_disagreement", run->digest_divergence);
    cJSON *pos = cJSON_AddArrayToObject(fo, "positions");
    for (uint32_t i = 0; pos && i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        cJSON *x = cJSON_CreateObject();
        if (x == NULL || !cJSON_AddItemToArray(pos, x)) {
            cJSON_Delete(x);
            return false;
        }
        add_i64(x, "rank", i);
        cJSON_AddBoolToObject(x, "trace", r->trace_present);
        cJSON_AddBoolToObject(x, "complete", r->rank_complete);
        add_i64(x, "seq", r->last_seq);
        cJSON_AddStringToObject(x, "event", r->last_ev);
        cJSON_AddStringToObject(x, "phase", r->last_phase);
        cJSON_AddBoolToObject(x, "in_phase", r->in_phase);
        add_i64(x, "step", r->last_step);
        add_i64(x, "member", r->last_member);
        add_i64(x, "layer", r->last_layer);
        cJSON_AddStringToObject(x, "layer_phase", r->last_layer_phase);
        cJSON_AddStringToObject(x, "layer_dir", r->last_layer_dir);
    }
    ok = ok && pos && cJSON_GetArraySize(pos) == (int)run->world;
    const ls_audit_coll_split *sp = &run->split;
    if (sp->found) {
        cJSON *d = cJSON_AddObjectToObject(fo, "divergent_collective");
        ok = ok && d;
        if (d) {
            cJSON_AddStringToObject(d, "group", run->groups[sp->group]);
            add_i64(d, "gseq", sp->gseq);
            cJSON_AddStringToObject(d, "purpose", run->purposes[sp->purpose]);
            cJSON_AddStringToObject(d, "op", ls_trace_op_name((ls_trace_op)sp->op));
            add_i64(d, "count", sp->count);
            add_i64(d, "step", sp->step);
            cJSON_AddStringToObject(d, "phase", ls_audit_phase_name(run, sp->phase));
            add_i64(d, "layer", sp->layer);
            cJSON *ea = rank_list(&sp->entered);
            if (ea == NULL || !cJSON_AddItemToObject(d, "ranks_entered", ea)) {
                cJSON_Delete(ea);
                ok = false;
            }
            cJSON *ma = rank_list(&sp->missing);
            if (ma == NULL || !cJSON_AddItemToObject(d, "ranks_missing", ma)) {
                cJSON_Delete(ma);
                ok = false;
            }
            add_i64(d, "n_entered", sp->entered.total);
            add_i64(d, "n_missing", sp->missing.total);
        }
    } else {
        ok = ok && cJSON_AddNullToObject(fo, "divergent_collective");
    }
    if (run->digest_first_step >= 0) {
        cJSON *d = cJSON_AddObjectToObject(fo, "digest_disagreement");
        cJSON *ra = d ? cJSON_AddArrayToObject(d, "ranks") : NULL;
        ok = ok && ra;
        if (d) {
            add_i64(d, "first_step", run->digest_first_step);
            add_i64(d, "reference_rank", run->digest_ref_rank);
        }
        for (size_t k = 0; ra && k < run->n_digest_splits; k++) {
            cJSON *x = cJSON_CreateObject();
            if (x == NULL || !cJSON_AddItemToArray(ra, x)) {
                cJSON_Delete(x);
                return false;
            }
            add_i64(x, "rank", run->digest_splits[k].rank);
            add_i64(x, "first_step", run->digest_splits[k].first_step);
        }
    } else {
        ok = ok && cJSON_AddNullToObject(fo, "digest_disagreement");
    }
    cJSON *ms = cJSON_AddArrayToObject(fo, "mismatched_sizes");
    ok = ok && ms;
    for (size_t k = 0; ms && k < run->n_mism; k++) {
        const ls_audit_size_mismatch *m = &run->mism[k];
        cJSON *x = cJSON_CreateObject();
        if (x == NULL || !cJSON_AddItemToArray(ms, x)) {
            cJSON_Delete(x);
            return false;
        }
        cJSON_AddStringToObject(x, "group", run->groups[m->group]);
        add_i64(x, "gseq", m->gseq);
        cJSON_AddStringToObject(x, "purpose", run->purposes[m->purpose]);
        add_i64(x, "step", m->step);
        add_i64(x, "rank", m->rank);
        add_i64(x, "count", m->count);
        add_i64(x, "seq", m->seq);
        add_i64(x, "reference_rank", m->ref_rank);
        add_i64(x, "reference_count", m->ref_count);
        add_i64(x, "reference_seq", m->ref_seq);
    }
    ok = ok && ls_json_add_u64(fo, "mismatched_sizes_total", run->n_mism_total) == 0;
    return ok;
}

/* One signature's status object (schema $defs: assurance.run / .parity). */
static cJSON *sig_json(int status, bool checked, bool present, const char *keyid, const char *envelope,
                       const char *detail) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    const char *s = !checked ? "not-checked" : status == LS_OK ? "verified" : !present ? "unsigned" : "invalid";
    cJSON_AddStringToObject(o, "status", s);
    if (checked && status == LS_OK && strlen(keyid) == 64) cJSON_AddStringToObject(o, "keyid", keyid);
    else cJSON_AddNullToObject(o, "keyid");
    cJSON_AddStringToObject(o, "envelope", envelope);
    if (checked && status != LS_OK) cJSON_AddStringToObject(o, "detail", detail);
    return o;
}

cJSON *ls_audit_profile_used_json(const ls_audit_run *run) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    bool loaded = run->profile_state == 1;
    const char *name = loaded ? run->profile.name : run->profile_used[0] ? run->profile_used : NULL;
    char file[300];
    if (name != NULL) ls_audit_profile_file_label(run->opt.profiles_dir, name, file, sizeof file);
    bool ok = (name ? cJSON_AddStringToObject(o, "name", name) : cJSON_AddNullToObject(o, "name")) != NULL;
    ok = ok && (name ? cJSON_AddStringToObject(o, "file", file) : cJSON_AddNullToObject(o, "file")) != NULL;
    ok = ok && (loaded ? cJSON_AddStringToObject(o, "sha256", run->profile.sha256)
                       : cJSON_AddNullToObject(o, "sha256")) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "chosen_by", run->profile_v2        ? "named"
                                                       : run->profile_inferred ? "inferred"
                                                                               : "family") != NULL;
    /* pinned: the run names this profile at this digest (profile.match holds it to that) */
    bool pinned = loaded && run->profile_name != NULL && run->profile_sha256 != NULL &&
                  strcmp(run->profile_name, run->profile.name) == 0 &&
                  strcmp(run->profile_sha256, run->profile.sha256) == 0;
    ok = ok && cJSON_AddBoolToObject(o, "pinned", pinned) != NULL;
    if (ok && !loaded) ok = cJSON_AddStringToObject(o, "error", run->profile_err) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The run's assurance (docs/evidence.md): the axis apart from the level. */
cJSON *ls_audit_assurance_json(const ls_audit_run *run) {
    cJSON *a = cJSON_CreateObject();
    if (a == NULL) return NULL;
    cJSON_AddStringToObject(a, "level", ls_audit_assurance_name(ls_audit_assurance_of(run)));
    cJSON *r = sig_json(run->dsse_status, run->opt.n_keys > 0, run->dsse_present, run->dsse_keyid,
                        LS_MANIFEST_DSSE_FILE, run->dsse_err);
    cJSON *p = sig_json(run->parity_dsse_status, run->opt.n_parity_keys > 0, run->parity_dsse_present,
                        run->parity_keyid, run->parity_envelope[0] ? run->parity_envelope : "parity.dsse.json",
                        run->parity_dsse_err);
    if (r == NULL || p == NULL || !cJSON_AddItemToObject(a, "run", r) || !cJSON_AddItemToObject(a, "parity", p)) {
        cJSON_Delete(r);
        cJSON_Delete(p);
        cJSON_Delete(a);
        return NULL;
    }
    cJSON_AddBoolToObject(a, "require_signed", run->opt.require_signed);
    return a;
}

ls_status ls_audit_report_json(const ls_audit_run *run, cJSON **out) {
    *out = NULL;
    cJSON *doc = cJSON_CreateObject();
    if (doc == NULL) return LS_ERR_NOMEM;
    cJSON_AddStringToObject(doc, "schema", "urn:longstraw:schema:audit-report:v3");
    cJSON_AddStringToObject(doc, "run", run->run_dir);
    add_i64(doc, "level", run->level);
    if (run->build_digest && strlen(run->build_digest) == 64)
        cJSON_AddStringToObject(doc, "build_digest", run->build_digest);
    else
        cJSON_AddNullToObject(doc, "build_digest");
    if (run->evidence_version == 2) add_i64(doc, "evidence_version", 2);
    /* the profile the run names (null: it names none, not pinned), and the one the verdict was judged by */
    if (run->profile_name != NULL) {
        cJSON *pr = cJSON_AddObjectToObject(doc, "profile");
        if (pr) {
            cJSON_AddStringToObject(pr, "name", run->profile_name);
            cJSON_AddStringToObject(pr, "sha256", run->profile_sha256 ? run->profile_sha256 : "");
        }
    } else {
        cJSON_AddNullToObject(doc, "profile");
    }
    cJSON *pu = ls_audit_profile_used_json(run);
    if (pu == NULL || !cJSON_AddItemToObject(doc, "profile_used", pu)) {
        cJSON_Delete(pu);
        cJSON_Delete(doc);
        return LS_ERR_NOMEM;
    }
    add_i64(doc, "world", run->world);
    add_i64(doc, "steps", run->n_run_steps - run->first_step);
    add_i64(doc, "first_step", run->first_step);
    add_i64(doc, "steps_exact", run->n_run_steps - run->first_step - run->steps_frozen);
    cJSON *pf = cJSON_AddArrayToObject(doc, "prefix_frozen_steps");
    for (size_t i = 0; pf && i < run->n_frozen_listed; i++) cJSON_AddItemToArray(pf, cJSON_CreateNumber((double)run->frozen_listed[i]));
    cJSON *fa = cJSON_AddArrayToObject(doc, "faults");
    for (size_t i = 0; fa && i < run->n_faults; i++) {
        const char *what = NULL;
        int l = ls_audit_fault_level_of(run, run->faults[i], &what);
        cJSON *f = cJSON_CreateObject();
        if (f == NULL || !cJSON_AddItemToArray(fa, f)) {
            cJSON_Delete(f);
            fa = NULL;
            break;
        }
        cJSON_AddStringToObject(f, "name", run->faults[i]);
        add_i64(f, "level", l);
        cJSON_AddStringToObject(f, "touches", what);
    }
    cJSON *as = ls_audit_assurance_json(run);
    if (as == NULL || !cJSON_AddItemToObject(doc, "assurance", as)) {
        cJSON_Delete(as);
        as = NULL;
    }
    cJSON *levels = cJSON_AddArrayToObject(doc, "levels");
    for (int l = 1; levels && l <= 4; l++) {
        cJSON *lv = cJSON_CreateObject();
        if (lv == NULL) break;
        add_i64(lv, "level", l);
        cJSON_AddStringToObject(lv, "name", LEVEL_NAMES[l]);
        cJSON_AddBoolToObject(lv, "holds", run->level_holds[l]);
        bool own = true;
        cJSON *checks = cJSON_AddArrayToObject(lv, "checks");
        for (size_t i = 0; checks && i < run->n_rules; i++) {
            if (run->rules[i].level != l) continue;
            if (run->rules[i].applicable && !run->rules[i].pass) own = false;
            cJSON *c = rule_json(&run->rules[i]);
            if (c) cJSON_AddItemToArray(checks, c);
        }
        cJSON_AddBoolToObject(lv, "rules_pass", own);
        if (run->level_holds[l]) { /* what the level rests on, and what it does not bind (basis.c) */
            cJSON *bs = ls_audit_basis_json(run, l);
            if (bs == NULL || !cJSON_AddItemToObject(lv, "basis", bs)) {
                cJSON_Delete(bs);
                cJSON_Delete(lv);
                break; /* a level short: refused below */
            }
        }
        cJSON_AddItemToArray(levels, lv);
    }
    cJSON *ranks = cJSON_AddArrayToObject(doc, "ranks");
    for (uint32_t i = 0; ranks && i < run->world; i++) {
        cJSON *r = rank_json(run, &run->ranks[i]);
        if (r) cJSON_AddItemToArray(ranks, r);
    }
    cJSON *fo = cJSON_AddObjectToObject(doc, "forensics");
    if (fo && !forensics_json(run, fo)) fo = NULL;
    /* a failed allocation anywhere above leaves a member out: refuse rather than write a partial report */
    if (cJSON_GetArraySize(levels) != 4 || cJSON_GetArraySize(ranks) != (int)run->world || fo == NULL || fa == NULL ||
        pf == NULL || as == NULL || cJSON_GetArraySize(fa) != (int)run->n_faults) {
        cJSON_Delete(doc);
        return LS_ERR_NOMEM;
    }
    *out = doc;
    return LS_OK;
}
