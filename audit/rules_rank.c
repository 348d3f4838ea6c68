/* rules_rank.c - per-rank completeness (DESIGN.md §5 level 1): every
 * required phase of every step, a forward and a backward layer_end for every
 * layer and member where the phase requires it, one optimizer call per step,
 * rank_complete, no error event.
 *
 * What is required comes from the configuration in the receipts (n_layers,
 * grad_mode) and from the run as a whole: the steps are the most any rank's
 * receipt or trace shows; the group size G of a step is one more than the
 * largest member any rank traced in that step's response phases (the
 * receipts do not record G); rollout is required when any rank ran it. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/audit.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/trace_event.h"

ls_status ls_audit_rules_rank(ls_audit_run *run);

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

static bool step_is_sft(const ls_audit_rank *r, int64_t s) {
    for (size_t k = 0; k < r->n_metrics; k++)
        if (r->metrics[k].step == s) return r->metrics[k].sft;
    return false;
}

/* One missing (phase, member, layer, dir) of a rank: evidence for the first
 * few, all counted. */
typedef struct {
    ls_audit_rule *rule;
    uint64_t missing;
} miss_ctx;

static void need(miss_ctx *mc, const ls_audit_rank *r, int64_t step, int phase, int64_t member, int64_t layer,
                 int dir) {
    mc->rule->matched++;
    if (ls_audit_layer_find(r, step, phase, member, layer, dir) != NULL) return;
    if (mc->missing++ < 3)
        ls_audit_rule_fail(mc->rule, r->rank, r->trace_file, -1,
                           "step %lld %s: no %s layer_end for member %lld, layer %lld (last event seq %lld: %s)",
                           (long long)step, ls_audit_phase_name(phase), dir == LS_TRACE_DIR_FWD ? "fwd" : "bwd",
                           (long long)member, (long long)layer, (long long)r->last_seq, r->last_ev);
}

ls_status ls_audit_rules_rank(ls_audit_run *run) {
    /* steps and group sizes */
    int64_t S = 0;
    bool rollout_ran = false;
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (r->receipt && (int64_t)r->receipt->steps > S && r->receipt->steps <= LS_AUDIT_MAX_STEPS)
            S = (int64_t)r->receipt->steps;
        if (r->n_steps_seen > S) S = r->n_steps_seen;
        if (r->phase_begin[LS_PHASE_ROLLOUT] > 0) rollout_ran = true;
    }
    run->n_run_steps = S;
    int64_t *G = calloc((size_t)(S > 0 ? S : 1), sizeof *G);
    if (G == NULL) return LS_ERR_NOMEM;
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        for (size_t k = 0; k < r->lk_cap; k++) {
            const ls_audit_layer_key *lk = &r->lk[k];
            if (!lk->used || lk->step < 0 || lk->step >= S) continue;
            if ((lk->phase == LS_PHASE_SCORE || lk->phase == LS_PHASE_REPLAY) && lk->member + 1 > G[lk->step])
                G[lk->step] = lk->member + 1;
        }
    }
    int64_t L = run->n_layers;
    bool have_cfg = run->config != NULL && L > 0 && L < 100000;

    ADD(ph, "rank.phases", 1, "every rank completed every requested phase of every step", true);
    ADD(ly, "rank.layers", 1, "forward and backward layer_end for every layer and member each phase requires", true);
    ADD(op, "rank.optimizer", 1, "one optimizer call per rank per step", true);
    ADD(rc, "rank.complete", 1, "every rank ended with rank_complete and a complete receipt", true);
    ADD(ne, "rank.no_error", 1, "no error event on any rank", true);
    if (!have_cfg) {
        ls_audit_rule_fail(ph, -1, LS_MANIFEST_FILE, -1, "no configuration (n_layers) in any receipt or the manifest");
        ls_audit_rule_fail(ly, -1, LS_MANIFEST_FILE, -1, "no configuration (n_layers) in any receipt or the manifest");
    }
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        char rf[64], d[32];
        ls_receipt_rank_dir(i, d, sizeof d);
        snprintf(rf, sizeof rf, "%s/receipt.json", d);
        /* completion and errors */
        rc->matched++;
        if (!r->trace_present)
            ls_audit_rule_fail(rc, i, r->trace_file, -1, "rank %u: no trace (%s)", (unsigned)i, r->trace_err);
        else if (!r->rank_complete)
            ls_audit_rule_fail(rc, i, r->trace_file, r->last_seq,
                               "rank %u never completed: last phase %s%s, step %lld, member %lld, layer %lld (%s %s); "
                               "last event seq %lld: %s",
                               (unsigned)i, r->last_phase[0] ? r->last_phase : "(none)",
                               r->in_phase ? " (begun, not ended)" : "", (long long)r->last_step,
                               (long long)r->last_member, (long long)r->last_layer, r->last_layer_phase,
                               r->last_layer_dir, (long long)r->last_seq, r->last_ev);
        if (r->receipt != NULL && r->receipt->status != LS_RECEIPT_COMPLETE)
            ls_audit_rule_fail(rc, i, rf, -1, "receipt status error: %s",
                               r->receipt->error_message ? r->receipt->error_message : "");
        ne->matched += r->n_events;
        if (r->n_errors)
            ls_audit_rule_fail(ne, i, r->trace_file, r->first_error_seq, "%llu error event(s); first: %s",
                               (unsigned long long)r->n_errors, r->first_error);
        if (!r->trace_present) {
            ls_audit_rule_fail(ph, i, r->trace_file, -1, "rank %u: no trace, no phase proven", (unsigned)i);
            ls_audit_rule_fail(ly, i, r->trace_file, -1, "rank %u: no trace, no layer proven", (unsigned)i);
            ls_audit_rule_fail(op, i, r->trace_file, -1, "rank %u: no trace, no optimizer call proven", (unsigned)i);
            continue;
        }
        if (r->steps_overflow)
            ls_audit_rule_fail(ph, i, r->trace_file, -1, "a step index beyond %d (not audited)", LS_AUDIT_MAX_STEPS);
        if (r->lk_overflow)
            ls_audit_rule_fail(ly, i, r->trace_file, -1, "more distinct layer events than the audit holds (%zu)",
                               (size_t)LS_AUDIT_MAX_LAYER_KEYS);
        miss_ctx mc = {.rule = ly, .missing = 0};
        uint64_t ph_missing = 0, op_bad = 0;
        for (int64_t s = 0; s < S; s++) {
            const ls_audit_step *sf = (size_t)s < r->steps_cap ? &r->steps[s] : NULL;
            bool sft = step_is_sft(r, s);
            int req[LS_PHASE_COUNT], nreq = 0;
            req[nreq++] = LS_PHASE_CAPTURE;
            if (rollout_ran && !sft) req[nreq++] = LS_PHASE_ROLLOUT;
            if (!sft) req[nreq++] = LS_PHASE_SCORE;
            req[nreq++] = LS_PHASE_REPLAY;
            if (run->full_mode) req[nreq++] = LS_PHASE_PROMPT_BWD;
            req[nreq++] = LS_PHASE_FINALIZE;
            req[nreq++] = LS_PHASE_OPTIMIZER;
            for (int k = 0; k < nreq; k++) {
                ph->matched++;
                if (sf && (sf->phase_mask & (1u << req[k]))) continue;
                if (ph_missing++ < 3)
                    ls_audit_rule_fail(ph, i, r->trace_file, r->last_seq,
                                       "step %lld: phase %s never ended ok (last phase begun: %s; last event seq %lld: %s)",
                                       (long long)s, ls_audit_phase_name(req[k]),
                                       r->last_phase[0] ? r->last_phase : "(none)", (long long)r->last_seq,
                                       r->last_ev);
            }
            op->matched++;
            uint32_t oc = sf ? sf->opt_count : 0;
            if (oc != 1 && op_bad++ < 3)
                ls_audit_rule_fail(op, i, r->trace_file, oc ? sf->opt_seq : r->last_seq,
                                   "step %lld: %u optimizer_step events (one required)", (long long)s, (unsigned)oc);
            if (!have_cfg) continue;
            for (int64_t l = -1; l < L; l++) need(&mc, r, s, LS_PHASE_CAPTURE, -1, l, LS_TRACE_DIR_FWD);
            if (run->full_mode)
                for (int64_t l = -1; l < L; l++) need(&mc, r, s, LS_PHASE_PROMPT_BWD, -1, l, LS_TRACE_DIR_BWD);
            if (G[s] == 0 && !sft) {
                if (mc.missing++ < 3)
                    ls_audit_rule_fail(ly, i, r->trace_file, -1, "step %lld: no rank traced any response member",
                                       (long long)s);
                continue;
            }
            for (int64_t m = 0; m < G[s]; m++)
                for (int64_t l = -1; l <= L; l++) {
                    if (!sft) need(&mc, r, s, LS_PHASE_SCORE, m, l, LS_TRACE_DIR_FWD);
                    need(&mc, r, s, LS_PHASE_REPLAY, m, l, LS_TRACE_DIR_FWD);
                    need(&mc, r, s, LS_PHASE_REPLAY, m, l, LS_TRACE_DIR_BWD);
                }
        }
        if (mc.missing > 3)
            ls_audit_rule_fail(ly, i, r->trace_file, -1, "%llu layer events missing in all on rank %u",
                               (unsigned long long)mc.missing, (unsigned)i);
        if (ph_missing > 3)
            ls_audit_rule_fail(ph, i, r->trace_file, -1, "%llu phases missing in all on rank %u",
                               (unsigned long long)ph_missing, (unsigned)i);
        /* optimizer calls for steps beyond S cannot exist: S covers every step traced */
    }
    free(G);
    ls_audit_rule_close(ph);
    ls_audit_rule_close(ly);
    ls_audit_rule_close(op);
    ls_audit_rule_close(rc);
    ls_audit_rule_close(ne);
    return LS_OK;
}
