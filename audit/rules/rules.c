/* rules.c - the rules about files (manifest, digests, signature, receipts,
 * build digest, traces, memory accounting, prefix-frozen steps) and the
 * evaluation that runs every rule.  The per-rank completeness rules are in
 * rules_rank.c, the cross-rank ones in rules_cross.c, the parity rules and
 * levels in levels.c; a rule's own machinery in rule.c. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/trace_event.h"

ls_status ls_audit_rules_rank(ls_audit_run *run);
ls_status ls_audit_rules_cross(ls_audit_run *run);
ls_status ls_audit_rules_scope(ls_audit_run *run);
ls_status ls_audit_rules_invariants(ls_audit_run *run); /* run.invariants (rules_invariants.c) */

static void receipt_file(uint32_t rank, char *buf, size_t cap) {
    char d[32];
    ls_receipt_rank_dir(rank, d, sizeof d);
    snprintf(buf, cap, "%s/receipt.json", d);
}

static int64_t rank_of_name(const char *name) {
    if (strncmp(name, "rank-", 5) != 0) return -1;
    char *end = NULL;
    long v = strtol(name + 5, &end, 10);
    return end != name + 5 && *end == '/' && v >= 0 ? v : -1;
}

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

static ls_status rules_files(ls_audit_run *run) {
    ADD(m, "manifest.valid", 1, "the manifest is present and schema-valid", true);
    if (run->manifest == NULL)
        ls_audit_rule_fail(m, -1, LS_MANIFEST_FILE, -1, "%s",
                           run->manifest_present ? run->manifest_err : "manifest.json is missing");
    m->matched = run->manifest != NULL;
    ls_audit_rule_close(m);

    ADD(d, "manifest.digests", 1, "every file's digest matches the manifest, no file unlisted", true);
    if (run->manifest == NULL) {
        ls_audit_rule_fail(d, -1, LS_MANIFEST_FILE, -1, "no valid manifest: no digest can be checked");
    } else {
        for (size_t i = 0; i < run->verify.count; i++) {
            const ls_verify_problem *p = &run->verify.items[i];
            ls_audit_rule_fail(d, rank_of_name(p->name), p->name, -1, "%s: %s", ls_verify_kind_name(p->kind),
                               p->detail);
        }
        d->matched = run->verify_checked;
    }
    ls_audit_rule_close(d);

    ADD(s, "manifest.signature", 1, "the DSSE envelope verifies with a trusted --key and signs the manifest",
        run->opt.n_keys > 0 || run->opt.require_signed);
    if (s->applicable) {
        s->matched = 1;
        if (run->opt.n_keys == 0)
            ls_audit_rule_fail(s, -1, LS_MANIFEST_DSSE_FILE, -1,
                               "--require-signed: no --key given, so no signature of the run can be trusted");
        else if (run->dsse_status != LS_OK)
            ls_audit_rule_fail(s, -1, LS_MANIFEST_DSSE_FILE, -1, "%s (%s)", run->dsse_err,
                               ls_status_str((ls_status)run->dsse_status));
        else
            snprintf(s->message, sizeof s->message, "verified with key %.16s...", run->dsse_keyid);
    } else {
        snprintf(s->message, sizeof s->message, "not applicable: no --key given (the run is unsigned evidence: "
                 "internal consistency only)");
    }
    ls_audit_rule_close(s);

    ADD(rv, "receipts.valid", 1, "every rank's receipt is present and schema-valid", true);
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        char f[64];
        receipt_file(i, f, sizeof f);
        rv->matched++;
        if (r->receipt != NULL) continue;
        if (!r->dir_present)
            ls_audit_rule_fail(rv, i, f, -1, "rank %u: its directory is missing", (unsigned)i);
        else if (!r->receipt_present)
            ls_audit_rule_fail(rv, i, f, -1, "rank %u: no receipt (the rank never finished)", (unsigned)i);
        else
            ls_audit_rule_fail(rv, i, f, -1, "%s", r->receipt_err);
    }
    ls_audit_rule_close(rv);

    /* receipts against the manifest and the run */
    ADD(ra, "receipts.agree", 1, "every receipt agrees with the manifest (rank, world, run id, status, trace digest)",
        true);
    ADD(bd, "build.digest_equal", 1, "the build digest of every receipt equals the manifest's", true);
    const char *m_bd = NULL;
    if (run->manifest != NULL) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(run->manifest->build, "build_digest");
        m_bd = cJSON_IsString(b) ? b->valuestring : NULL;
    }
    const char *ref = m_bd;
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        if (rc == NULL) continue;
        char f[64];
        receipt_file(i, f, sizeof f);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(rc->build, "build_digest");
        const char *r_bd = cJSON_IsString(b) ? b->valuestring : "";
        if (ref == NULL) ref = r_bd;
        bd->matched++;
        if (strcmp(ref, r_bd) != 0)
            ls_audit_rule_fail(bd, i, f, -1, "build_digest %.64s, %s says %.64s", r_bd,
                               m_bd ? "the manifest" : "rank 0's receipt", ref);
        ra->matched++;
        if (rc->rank != i) ls_audit_rule_fail(ra, i, f, -1, "the receipt says rank %u", (unsigned)rc->rank);
        if (rc->world != run->world)
            ls_audit_rule_fail(ra, i, f, -1, "world %u, the run has %u ranks (%s)", (unsigned)rc->world,
                               (unsigned)run->world, run->world_source);
        if (run->manifest == NULL) continue;
        const ls_manifest *m2 = run->manifest;
        if (strcmp(rc->run_id, m2->run_id) != 0)
            ls_audit_rule_fail(ra, i, f, -1, "run_id %s, the manifest says %s", rc->run_id, m2->run_id);
        if (i < m2->n_ranks) {
            ls_manifest_rank_status want =
                rc->status == LS_RECEIPT_COMPLETE ? LS_MANIFEST_RANK_COMPLETE : LS_MANIFEST_RANK_ERROR;
            if (m2->ranks[i].status != want)
                ls_audit_rule_fail(ra, i, f, -1, "status %s, the manifest says otherwise",
                                   rc->status == LS_RECEIPT_COMPLETE ? "complete" : "error");
        }
        const ls_manifest_subject *sub = NULL;
        for (size_t k = 0; k < m2->n_subjects; k++)
            if (strcmp(m2->subjects[k].name, rc->events_file) == 0) sub = &m2->subjects[k];
        if (sub == NULL)
            ls_audit_rule_fail(ra, i, f, -1, "its events file %s is not a subject of the manifest", rc->events_file);
        else if (strcmp(sub->sha256, rc->events_sha256) != 0)
            ls_audit_rule_fail(ra, i, f, -1, "its events digest %.64s, the manifest says %.64s", rc->events_sha256,
                               sub->sha256);
    }
    if (m_bd != NULL) bd->matched++;
    if (bd->matched < 2 && bd->n_ev == 0) {
        snprintf(bd->message, sizeof bd->message, "fewer than two build digests to compare");
        ls_audit_rule_fail(bd, -1, LS_MANIFEST_FILE, -1, "no manifest and receipt to compare");
    }
    ls_audit_rule_close(ra);
    ls_audit_rule_close(bd);
    return LS_OK;
}

static ls_status rules_traces(ls_audit_run *run) {
    ADD(t, "trace.valid", 1, "every rank's trace reads clean to rank_complete (no truncation, corruption, seq gap)",
        true);
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (!r->trace_present) {
            ls_audit_rule_fail(t, i, r->trace_file, -1, "%s", r->trace_err[0] ? r->trace_err : "no trace");
            continue;
        }
        const ls_trace_report *rep = &r->report;
        t->matched += (uint64_t)(rep->n_events > 0 ? rep->n_events : 0);
        size_t shown = 0;
        for (size_t k = 0; k < rep->n_diags && shown < 4; k++) {
            const ls_trace_diag *dg = &rep->diags[k];
            if (!ls_trace_diag_is_error(dg->code)) continue;
            shown++;
            ls_audit_rule_fail(t, i, r->trace_file, dg->seq, "%s at line %lld: %s", ls_trace_diag_name(dg->code),
                               (long long)dg->line, dg->message);
        }
        if (rep->end != LS_TRACE_END_CLEAN && shown == 0)
            ls_audit_rule_fail(t, i, r->trace_file, rep->last_seq, "the trace ends %s after seq %lld",
                               ls_trace_end_name(rep->end), (long long)rep->last_seq);
        if (r->receipt != NULL && rep->end == LS_TRACE_END_CLEAN &&
            (r->receipt->events_count != (uint64_t)rep->n_events || r->receipt->events_last_seq != rep->last_seq))
            ls_audit_rule_fail(t, i, r->trace_file, rep->last_seq,
                               "%lld events up to seq %lld, the receipt says %llu up to %lld", (long long)rep->n_events,
                               (long long)rep->last_seq, (unsigned long long)r->receipt->events_count,
                               (long long)r->receipt->events_last_seq);
    }
    ls_audit_rule_close(t);
    return LS_OK;
}

/* Memory: each memory event's totals agree with its categories; the
 * receipt's per-step peaks are the trace's; the tracked peak is within the
 * peak RSS. */
static ls_status rules_memory(ls_audit_run *run) {
    /* a v2 receipt carries no memory figures (docs/contract.md §2): a v2 run
     * is held to its memory events' own consistency, and without any the
     * rule does not apply */
    uint64_t events = 0;
    for (uint32_t i = 0; i < run->world; i++) events += run->ranks[i].trace_present ? run->ranks[i].n_memory : 0;
    /* deny by default: every rank of a v1 run writes memory events and receipt figures; a v2 run's receipts
       carry none, and its traces hold memory events where its profile says its runs record them (records:
       memory; a run without a usable profile has no such word) */
    bool v2 = run->evidence_version == 2;
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    bool promised = !v2 || prof == NULL || (prof->records & LS_AUDIT_RECORDS_MEMORY);
    bool v2_none = v2 && events == 0 && !promised;
    ADD(m, "memory.accounting", 1,
        "reported peaks consistent with their categories, the trace and the peak RSS", !v2_none);
    if (v2_none)
        snprintf(m->message, sizeof m->message, "not applicable: a v2 run whose traces hold no memory event, and "
                 "its profile %s does not say its runs record them (records: memory); its receipts carry no memory "
                 "figures", prof->name);
    for (uint32_t i = 0; !v2_none && i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        char f[64];
        receipt_file(i, f, sizeof f);
        if (r->trace_present) {
            m->matched += r->n_memory;
            if (r->mem_bad)
                ls_audit_rule_fail(m, i, r->trace_file, r->mem_bad_seq, "%llu memory event(s) inconsistent; first: %s",
                                   (unsigned long long)r->mem_bad, r->mem_bad_detail);
            if (r->n_memory == 0 && promised)
                ls_audit_rule_fail(m, i, r->trace_file, r->last_seq, "rank %u's trace holds no memory event%s: its "
                                   "memory was not reported", (unsigned)i,
                                   !v2 ? "" : prof == NULL ? " (no profile says the run may lack them)"
                                                           : " (its profile's records name memory)");
        } else {
            ls_audit_rule_fail(m, i, r->trace_file, -1, "rank %u: no trace, no memory event", (unsigned)i);
        }
        const ls_receipt *rc = r->receipt;
        if (v2) continue; /* v2: no receipt figures to hold the trace to */
        if (rc == NULL) {
            ls_audit_rule_fail(m, i, f, -1, "rank %u: no readable receipt: its memory figures are not reported",
                               (unsigned)i);
            continue;
        }
        m->matched++;
        if (rc->run_total_peak_bytes > rc->rss_peak_bytes)
            ls_audit_rule_fail(m, i, f, -1, "tracked peak %llu bytes above the peak RSS %llu",
                               (unsigned long long)rc->run_total_peak_bytes, (unsigned long long)rc->rss_peak_bytes);
        uint64_t cat_max = 0;
        for (size_t k = 0; k < rc->n_memory; k++) {
            const ls_receipt_memory *c = &rc->memory[k];
            if (c->run_peak_bytes > cat_max) cat_max = c->run_peak_bytes;
            if (!r->trace_present || r->n_memory == 0) continue;
            uint64_t tp = 0;
            for (size_t n = 0; n < run->n_mem_cats; n++)
                if (strcmp(run->mem_cats[n], c->name) == 0) tp = r->mem_peak[n];
            if (tp > c->run_peak_bytes)
                ls_audit_rule_fail(m, i, f, -1, "%s: the trace shows a peak of %llu bytes, above the receipt's run peak %llu",
                                   c->name, (unsigned long long)tp, (unsigned long long)c->run_peak_bytes);
        }
        if (rc->run_total_peak_bytes < cat_max)
            ls_audit_rule_fail(m, i, f, -1, "tracked total peak %llu below a category's peak %llu",
                               (unsigned long long)rc->run_total_peak_bytes, (unsigned long long)cat_max);
        if (r->trace_present && r->n_memory > 0 && r->mem_total_peak > rc->run_total_peak_bytes)
            ls_audit_rule_fail(m, i, f, -1, "the trace's total peak %llu above the receipt's %llu",
                               (unsigned long long)r->mem_total_peak, (unsigned long long)rc->run_total_peak_bytes);
        if (r->trace_present && r->n_memory > 0 && r->mem_rss_peak > rc->rss_peak_bytes)
            ls_audit_rule_fail(m, i, f, -1, "the trace's peak RSS %llu above the receipt's %llu",
                               (unsigned long long)r->mem_rss_peak, (unsigned long long)rc->rss_peak_bytes);
    }
    ls_audit_rule_close(m);

    ADD(p, "steps.prefix_frozen", 1, "steps marked prefix_frozen in the trace are exactly the receipt's, never exact",
        true);
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        const ls_receipt *rc = r->receipt;
        char f[64];
        receipt_file(i, f, sizeof f);
        if (rc == NULL || !r->trace_present) { /* the two sources of the fact: neither may be missing */
            ls_audit_rule_fail(p, i, rc == NULL ? f : r->trace_file, -1, "rank %u: no %s: its prefix-frozen steps "
                               "cannot be compared", (unsigned)i, rc == NULL ? "readable receipt" : "trace");
            continue;
        }
        for (uint64_t s = (uint64_t)run->first_step; s < (uint64_t)run->first_step + rc->steps; s++) {
            bool frozen_trace = s < r->steps_cap && r->steps[s].prefix_frozen;
            bool frozen_receipt = false;
            for (uint64_t k = 0; rc->prefix_frozen_steps != NULL && k < rc->steps_prefix_frozen; k++)
                if (rc->prefix_frozen_steps[k] == s) frozen_receipt = true;
            p->matched++;
            if (frozen_trace && !frozen_receipt)
                ls_audit_rule_fail(p, i, f, -1, "step %llu ran prefix_frozen (trace) but the receipt counts it exact",
                                   (unsigned long long)s);
            else if (!frozen_trace && frozen_receipt)
                ls_audit_rule_fail(p, i, f, -1, "step %llu listed prefix_frozen but its trace events are not marked",
                                   (unsigned long long)s);
        }
    }
    ls_audit_rule_close(p);
    return LS_OK;
}

ls_status ls_audit_rules_run(ls_audit_run *run) {
    run->n_rules = 0;
    ls_status st = ls_audit_profile_attach(run); /* a v1 run whose family has no usable profile cannot be scored */
    if (st != LS_OK) return st;
    st = rules_files(run);
    if (st == LS_OK) st = ls_audit_rules_profile(run); /* profile.match */
    if (st == LS_OK) st = rules_traces(run);
    if (st == LS_OK) st = ls_audit_rules_rank(run);
    if (st == LS_OK) st = rules_memory(run);
    if (st == LS_OK) st = ls_audit_rules_cross(run);
    if (st == LS_OK) st = ls_audit_rules_performed(run); /* v2 runs only (rules_performed.c) */
    if (st == LS_OK) st = ls_audit_rules_p2p(run);       /* v2 runs only (rules_p2p.c) */
    if (st == LS_OK) st = ls_audit_rules_scope(run);
    if (st == LS_OK) st = ls_audit_rules_invariants(run);
    return st;
}

ls_status ls_audit_evaluate(ls_audit_run *run) {
    ls_status st = ls_audit_rules_run(run);
    if (st == LS_OK) st = ls_audit_levels_run(run);
    /* reports list the rules by level (stable: the order within a level kept) */
    for (size_t i = 1; st == LS_OK && i < run->n_rules; i++) {
        ls_audit_rule tmp = run->rules[i];
        size_t j = i;
        while (j > 0 && run->rules[j - 1].level > tmp.level) {
            run->rules[j] = run->rules[j - 1];
            j--;
        }
        run->rules[j] = tmp;
    }
    return st;
}
