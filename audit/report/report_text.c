/* report_text.c - the human summary: the level, a table per rank, per-step
 * metrics, forensics, then every failed rule with its evidence. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "audit/report/basis.h"

#include <string.h>

static const char *LEVEL_NAMES[5] = {"none", "execution capacity", "response-operator fidelity",
                                     "distributed-update consistency", "full-gradient parity"};

/* "verified by key 1a2b3c4d5e6f7a8b...", "not checked (no --key)", ... */
static void sig_line(char *buf, size_t cap, int status, bool checked, bool present, const char *keyid,
                     const char *opt, const char *detail) {
    if (!checked) snprintf(buf, cap, "unauthenticated (no %s: anyone who can write it could have)", opt);
    else if (status == LS_OK) snprintf(buf, cap, "verified by key %.16s...", keyid);
    else if (!present) snprintf(buf, cap, "UNSIGNED (no envelope)");
    else snprintf(buf, cap, "INVALID (%.160s)", detail);
}

static void mib(char *buf, size_t cap, uint64_t b) { snprintf(buf, cap, "%.2f MiB", (double)b / 1048576.0); }

void ls_audit_report_text(const ls_audit_run *run, FILE *f) {
    fprintf(f, "longstraw-audit %s: level %d (%s)\n", run->run_dir, run->level, LEVEL_NAMES[run->level]);
    /* an EP run's grid (docs/design.md §4a): CP-c x EP-e as its configuration states it (a v1 or EP-1 run: unchanged) */
    char grid[64] = "";
    if (run->ep_size > 1)
        snprintf(grid, sizeof grid, ", grid CP-%u x EP-%u (config cp_ranks x ep_ranks)",
                 (unsigned)(run->cp_size ? run->cp_size : run->world / run->ep_size), (unsigned)run->ep_size);
    fprintf(f, "  world %u (from the %s)%s, %lld step(s), build %.16s%s, grad_mode %s\n", (unsigned)run->world,
            run->world_source, grid, (long long)(run->n_run_steps - run->first_step),
            run->build_digest ? run->build_digest : "(unknown)", run->build_digest ? "..." : "",
            run->full_mode ? "full" : "detached");
    if (run->evidence_version == 2) /* v2 only: a v1 report is unchanged */
        fprintf(f, "  evidence v2 (docs/contract.md), profile %s%s%.16s%s\n",
                run->profile_name ? run->profile_name : "(none named)", run->profile_name ? " sha256 " : "",
                run->profile_name && run->profile_sha256 ? run->profile_sha256 : "", run->profile_name ? "..." : "");
    /* the profile the verdict was judged by: its file and digest, and whether the run pins that revision */
    cJSON *pu = ls_audit_profile_used_json(run);
    if (pu != NULL) {
        const char *nm = ls_audit_get_str(pu, "name"), *file = ls_audit_get_str(pu, "file");
        const char *sha = ls_audit_get_str(pu, "sha256");
        if (sha != NULL)
            fprintf(f, "  profile %s (%s, sha256 %s)", nm, file, sha);
        else
            fprintf(f, "  profile %s: none loaded (%.200s)", nm ? nm : "(none named)", run->profile_err);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pu, "pinned")))
            fprintf(f, ": the run names this revision\n");
        else if (run->profile_name != NULL)
            fprintf(f, ": the run names %s sha256 %.16s... (profile.match)\n", run->profile_name,
                    run->profile_sha256 ? run->profile_sha256 : "");
        else
            fprintf(f, ": the run names no profile, the revision it was written for is not pinned (profile.match)\n");
        cJSON_Delete(pu);
    }
    /* the second axis: how far the evidence can be trusted */
    char rs[256], ps[256];
    sig_line(rs, sizeof rs, run->dsse_status, run->opt.n_keys > 0, run->dsse_present, run->dsse_keyid, "--key",
             run->dsse_err);
    sig_line(ps, sizeof ps, run->parity_dsse_status, run->opt.n_parity_keys > 0, run->parity_dsse_present,
             run->parity_keyid, "--parity-key", run->parity_dsse_err);
    ls_audit_assurance as = ls_audit_assurance_of(run);
    fprintf(f, "  assurance: %s%s; run manifest %s; parity report %s\n", ls_audit_assurance_name(as),
            as == LS_AUDIT_UNSIGNED ? " (internal consistency only: anyone who can write the directory can write "
                                      "such a run)"
                                    : "",
            rs, run->parity == NULL ? "absent or unusable" : ps);
    /* what the levels speak of: the steps, exact or not, and the faults */
    int64_t n_steps = run->n_run_steps - run->first_step;
    fprintf(f, "  steps %lld..%lld: %lld of %lld exact", (long long)run->first_step, (long long)run->n_run_steps - 1,
            (long long)(n_steps - run->steps_frozen), (long long)n_steps);
    if (run->steps_frozen > 0) {
        fprintf(f, "; prefix-frozen (stale prompt state, never exact):");
        for (size_t i = 0; i < run->n_frozen_listed; i++) fprintf(f, " %lld", (long long)run->frozen_listed[i]);
        if ((uint64_t)run->steps_frozen > run->n_frozen_listed) fprintf(f, " ...");
    }
    fprintf(f, "\n  faults recorded: ");
    if (run->n_faults == 0) fprintf(f, "none");
    for (size_t i = 0; i < run->n_faults; i++)
        fprintf(f, "%s%s (no level >= %d certified)", i ? ", " : "", run->faults[i],
                ls_audit_fault_level_of(run, run->faults[i], NULL));
    fprintf(f, "\n");
    for (int l = 1; l <= 4; l++) {
        bool own = true;
        for (size_t i = 0; i < run->n_rules; i++)
            if (run->rules[i].level == l && run->rules[i].applicable && !run->rules[i].pass) own = false;
        fprintf(f, "  L%d %-32s %s%s\n", l, LEVEL_NAMES[l], run->level_holds[l] ? "yes" : "no",
                !run->level_holds[l] && own ? " (its own rules pass; a lower level does not hold)" : "");
        cJSON *bs = ls_audit_basis_json(run, l); /* what it rests on, what it does not bind (basis.c) */
        if (bs != NULL) {
            char rests[1600], nb[1600];
            ls_audit_basis_text(bs, rests, sizeof rests, nb, sizeof nb);
            fprintf(f, "       rests on: %s\n", rests);
            if (nb[0]) fprintf(f, "       not bound: %s\n", nb);
        }
        cJSON_Delete(bs);
    }
    /* per-rank table */
    fprintf(f, "\n  rank  events  phases(b/e)  fwd   bwd   coll   opt  end         wall s\n");
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        uint64_t pb = 0, pe = 0, opt = 0;
        for (int p = 0; p < LS_AUDIT_NPHASE; p++) {
            pb += r->phase_begin[p];
            pe += r->phase_end[p];
        }
        for (size_t s = 0; s < r->steps_cap; s++) opt += r->steps[s].opt_count;
        fprintf(f, "  %4u  %6llu  %5llu/%-5llu %5llu %5llu %6llu %4llu  %-10s %7.3f\n", (unsigned)i,
                (unsigned long long)r->n_events, (unsigned long long)pb, (unsigned long long)pe,
                (unsigned long long)r->layer_fwd, (unsigned long long)r->layer_bwd,
                (unsigned long long)r->n_coll_total, (unsigned long long)opt,
                r->trace_present ? ls_trace_end_name(r->report.end) : "no trace",
                r->n_events > 1 ? (double)(r->last_ts - r->first_ts) * 1e-9 : 0.0);
    }
    fprintf(f, "\n  phase wall time per rank (s):\n  rank");
    const int np = ls_audit_phase_count(run);
    for (int p = 0; p < np; p++) fprintf(f, " %10s", ls_audit_phase_name(run, p));
    fprintf(f, "\n");
    for (uint32_t i = 0; i < run->world; i++) {
        fprintf(f, "  %4u", (unsigned)i);
        for (int p = 0; p < np; p++)
            fprintf(f, " %10.3f", (double)run->ranks[i].phase_wall_ns[p] * 1e-9);
        fprintf(f, "\n");
    }
    if (run->n_mem_cats > 0) {
        fprintf(f, "\n  peak memory per category (trace memory events):\n");
        for (size_t c = 0; c < run->n_mem_cats; c++) {
            fprintf(f, "  %-22s", run->mem_cats[c]);
            for (uint32_t i = 0; i < run->world && i < 8; i++) {
                char b[32];
                mib(b, sizeof b, run->ranks[i].mem_peak[c]);
                fprintf(f, " %12s", b);
            }
            fprintf(f, "%s\n", run->world > 8 ? " ..." : "");
        }
        fprintf(f, "  %-22s", "total / rss");
        for (uint32_t i = 0; i < run->world && i < 8; i++) {
            char b[32], c2[32];
            mib(b, sizeof b, run->ranks[i].mem_total_peak);
            mib(c2, sizeof c2, run->ranks[i].mem_rss_peak);
            fprintf(f, " %s/%s", b, c2);
        }
        fprintf(f, "\n  (sampled at phase boundaries; the receipts' byte-exact run peaks, total / rss:");
        for (uint32_t i = 0; i < run->world && i < 8; i++) {
            const ls_receipt *rc = run->ranks[i].receipt;
            char b[32], c2[32];
            if (rc == NULL) {
                fprintf(f, " (no receipt)");
                continue;
            }
            mib(b, sizeof b, rc->run_total_peak_bytes);
            mib(c2, sizeof c2, rc->rss_peak_bytes);
            fprintf(f, " %s (%llu B)/%s", b, (unsigned long long)rc->run_total_peak_bytes, c2);
        }
        fprintf(f, ")\n");
    }
    /* per-step metrics of the first rank that has them */
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (r->n_metrics == 0) continue;
        fprintf(f, "\n  step metrics (rank %u):\n  step        loss  reward_mean     kl_mean   grad_norm   wall s\n",
                (unsigned)i);
        for (size_t k = 0; k < r->n_metrics; k++) {
            const ls_audit_step_metric *m = &r->metrics[k];
            fprintf(f, "  %4lld %11.4g %12.4g %11.4g %11.4g %8.3f%s\n", (long long)m->step, m->loss, m->reward_mean,
                    m->kl_mean, m->grad_norm, m->step_wall_s, m->prefix_frozen ? " prefix_frozen" : "");
        }
        break;
    }
    /* forensics */
    bool crashed = false;
    for (uint32_t i = 0; i < run->world; i++)
        if (!run->ranks[i].rank_complete) crashed = true;
    if (crashed || run->split.found || run->digest_first_step >= 0 || run->n_mism_total) {
        fprintf(f, "\n  forensics:%s\n", crashed ? " (the run did not complete on every rank)" : "");
        for (uint32_t i = 0; i < run->world && i < 64; i++) {
            const ls_audit_rank *r = &run->ranks[i];
            if (!r->trace_present) {
                fprintf(f, "  rank %u: no trace (%s)\n", (unsigned)i, r->trace_err);
                continue;
            }
            fprintf(f, "  rank %u %s: last phase %s%s, step %lld, member %lld, layer %lld (%s %s); last event seq %lld "
                       "(%s); trace %s\n",
                    (unsigned)i, r->rank_complete ? "completed" : "stopped",
                    r->last_phase[0] ? r->last_phase : "(none)", r->in_phase ? " (begun, not ended)" : "",
                    (long long)r->last_step, (long long)r->last_member, (long long)r->last_layer,
                    r->last_layer_phase[0] ? r->last_layer_phase : "-", r->last_layer_dir[0] ? r->last_layer_dir : "-",
                    (long long)r->last_seq, r->last_ev, ls_trace_end_name(r->report.end));
        }
        if (run->world > 64) fprintf(f, "  ... and %u more ranks (see --json)\n", (unsigned)(run->world - 64));
        const ls_audit_coll_split *sp = &run->split;
        if (sp->found) {
            fprintf(f, "  first collective some ranks entered and others did not: group %s gseq %lld purpose %s (%s "
                       "count %lld, step %lld, phase %s, layer %lld)\n    entered by ranks",
                    run->groups[sp->group], (long long)sp->gseq, run->purposes[sp->purpose],
                    ls_trace_op_name((ls_trace_op)sp->op), (long long)sp->count, (long long)sp->step,
                    ls_audit_phase_name(run, sp->phase), (long long)sp->layer);
            for (uint32_t k = 0; k < sp->entered.n; k++) fprintf(f, " %u", (unsigned)sp->entered.r[k]);
            if (sp->entered.total > sp->entered.n) fprintf(f, " ... (%u in all)", (unsigned)sp->entered.total);
            fprintf(f, "; not by ranks");
            for (uint32_t k = 0; k < sp->missing.n; k++) fprintf(f, " %u", (unsigned)sp->missing.r[k]);
            if (sp->missing.total > sp->missing.n) fprintf(f, " ... (%u in all)", (unsigned)sp->missing.total);
            fprintf(f, "\n");
        }
        if (run->digest_first_step >= 0) {
            fprintf(f, "  replicated digests disagree first at step %lld (reference rank %u):",
                    (long long)run->digest_first_step, (unsigned)run->digest_ref_rank);
            for (size_t k = 0; k < run->n_digest_splits && k < 64; k++)
                fprintf(f, " rank %u from step %lld%s", (unsigned)run->digest_splits[k].rank,
                        (long long)run->digest_splits[k].first_step, k + 1 < run->n_digest_splits ? "," : "");
            fprintf(f, "\n");
        }
        for (size_t k = 0; k < run->n_mism; k++) {
            const ls_audit_size_mismatch *m = &run->mism[k];
            fprintf(f, "  mismatched sizes: group %s gseq %lld purpose %s step %lld: rank %u count %lld (seq %lld), rank "
                       "%u count %lld (seq %lld)\n",
                    run->groups[m->group], (long long)m->gseq, run->purposes[m->purpose], (long long)m->step,
                    (unsigned)m->rank, (long long)m->count, (long long)m->seq, (unsigned)m->ref_rank,
                    (long long)m->ref_count, (long long)m->ref_seq);
        }
        if (run->n_mism_total > run->n_mism)
            fprintf(f, "  ... and %llu more mismatched sizes\n", (unsigned long long)(run->n_mism_total - run->n_mism));
    }
    /* rules */
    size_t failed = 0, na = 0;
    for (size_t i = 0; i < run->n_rules; i++) {
        if (run->rules[i].applicable && !run->rules[i].pass) failed++;
        na += !run->rules[i].applicable;
    }
    fprintf(f, "\n  rules: %zu, failed %zu, not applicable %zu\n", run->n_rules, failed, na);
    for (size_t i = 0; i < run->n_rules; i++)
        if (!run->rules[i].applicable)
            fprintf(f, "  N/A  L%d %s: %s\n", run->rules[i].level, run->rules[i].id, run->rules[i].message);
    for (size_t i = 0; i < run->n_rules; i++) {
        const ls_audit_rule *r = &run->rules[i];
        if (!r->applicable || r->pass) continue;
        fprintf(f, "  FAIL L%d %s: %s\n", r->level, r->id, r->message);
        for (size_t k = 0; k < r->n_ev; k++) {
            const ls_audit_evidence *e = &r->ev[k];
            fprintf(f, "       ");
            if (e->rank >= 0) fprintf(f, "rank %lld ", (long long)e->rank);
            fprintf(f, "%s", e->file);
            if (e->seq >= 0) fprintf(f, " seq %lld", (long long)e->seq);
            fprintf(f, ": %s\n", e->detail);
        }
        if (r->n_ev_dropped) fprintf(f, "       ... and %llu more\n", (unsigned long long)r->n_ev_dropped);
    }
}
