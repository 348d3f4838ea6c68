/* rules_rank.c - per-rank completeness (docs/design.md §5 level 1): every
 * required phase of every step, a forward and a backward layer_end for every
 * layer and member where the phase requires it, one optimizer call per step,
 * rank_complete, no error event.
 *
 * What a step requires is the run's profile's plan (audit/model/profile.h: each
 * phase with its unit, layers, directions and conditions), sized by the
 * configuration in the receipts (n_layers, grad_mode, strategy, group,
 * steps_requested) and by the run as a whole: the steps
 * are the configuration's steps_requested (a run that stopped early is
 * incomplete), or the most any rank's receipt or trace shows when larger or
 * not recorded; the members of a step are 0 .. G-1, G the configuration's
 * "group", or one more than the largest member any rank traced in that
 * step's response phases when larger or not recorded (not recorded: the
 * rule's message says so); a phase whose plan step has the condition ran
 * (v1: rollout) is required when any rank ran it.  The
 * layer events are checked step by step while the traces stream
 * (rank_steps.c). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/trace_event.h"

ls_status ls_audit_rules_rank(ls_audit_run *run);

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

ls_status ls_audit_rules_rank(ls_audit_run *run) {
    /* steps and group sizes */
    int64_t S = 0;
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    bool ran[LS_AUDIT_PROFILE_MAX_STEPS] = {false}; /* plan step k's phase began on some rank */
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (r->receipt && (int64_t)r->receipt->steps > S && r->receipt->steps <= LS_AUDIT_MAX_STEPS)
            S = (int64_t)r->receipt->steps;
        if (r->n_steps_seen > S) S = r->n_steps_seen;
        for (size_t k = 0; prof != NULL && k < prof->n_steps; k++) {
            int p = prof->steps[k].phase_ix;
            if (p >= 0 && p < LS_AUDIT_NPHASE && r->phase_begin[p] > 0) ran[k] = true;
        }
    }
    const int64_t F = run->first_step; /* a resumed run's steps are numbered on from its checkpoint */
    if (S < F) S = F;
    if (run->cfg_steps > 0 && F + run->cfg_steps > S) S = F + run->cfg_steps; /* a run that stopped early lacks the rest */
    run->n_run_steps = S;
    /* members required per step: the recorded group, and any member a rank traced */
    int64_t *G = calloc((size_t)(S > 0 ? S : 1), sizeof *G);
    if (G == NULL) return LS_ERR_NOMEM;
    for (int64_t s = F; s < S; s++) {
        bool sft = false; /* an SFT step replays its one answer: the group does not apply */
        for (uint32_t i = 0; i < run->world; i++) {
            const ls_audit_step *sf = ls_audit_step_of(&run->ranks[i], s);
            if (sf != NULL && sf->g_local > G[s]) G[s] = sf->g_local;
            if (sf != NULL && sf->sft) sft = true;
        }
        if (!sft && run->cfg_group > G[s]) G[s] = run->cfg_group;
    }
    bool have_cfg = ls_audit_have_layers(run);

    ADD(ph, "rank.phases", 1, "every rank completed every requested phase of every step", true);
    ADD(ly, "rank.layers", 1, "forward and backward layer_end for every layer and member each phase requires", true);
    ADD(op, "rank.optimizer", 1, "one optimizer call per rank per step", true);
    ADD(rc, "rank.complete", 1, "every rank ended with rank_complete and a complete receipt", true);
    ADD(ne, "rank.no_error", 1, "no error event on any rank", true);
    if (!have_cfg) {
        ls_audit_rule_fail(ph, -1, LS_MANIFEST_FILE, -1, "no configuration (n_layers) in any receipt or the manifest");
        ls_audit_rule_fail(ly, -1, LS_MANIFEST_FILE, -1, "no configuration (n_layers) in any receipt or the manifest");
    }
    if (prof == NULL) { /* a v2 run without a usable profile: profile.match names why */
        ls_audit_rule_fail(ph, -1, ".", -1, "no profile: %s", run->profile_err);
        ls_audit_rule_fail(ly, -1, ".", -1, "no profile: %s", run->profile_err);
    }
    for (uint32_t i = 0; i < run->world; i++) {
        ls_audit_rank *r = &run->ranks[i];
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
        else if (r->receipt == NULL) /* a complete trace is half the rule: the receipt must say so too */
            ls_audit_rule_fail(rc, i, rf, -1, "rank %u: no readable receipt: its completion is not recorded",
                               (unsigned)i);
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
            ls_audit_rule_fail(ly, i, r->trace_file, -1,
                               "more distinct layer events in one step than the audit holds (%zu), or a member "
                               "index beyond %d",
                               (size_t)LS_AUDIT_MAX_LAYER_KEYS, LS_AUDIT_MAX_MEMBER);
        if (r->n_late && r->late_step < F)
            ls_audit_rule_fail(ly, i, r->trace_file, r->late_seq,
                               "%llu layer_end/collective event(s) of a step before the run's first step %lld "
                               "(config first_step; first: step %lld, seq %lld)",
                               (unsigned long long)r->n_late, (long long)F, (long long)r->late_step,
                               (long long)r->late_seq);
        else if (r->n_late)
            ls_audit_rule_fail(ly, i, r->trace_file, r->late_seq,
                               "%llu layer_end/collective event(s) of a step already over (first: step %lld, seq "
                               "%lld): out of order",
                               (unsigned long long)r->n_late, (long long)r->late_step, (long long)r->late_seq);
        uint64_t ph_missing = 0, op_bad = 0, op_done = 0;
        if (run->cfg_steps > 0) {
            for (int64_t s = F; s < S; s++) {
                const ls_audit_step *sf = ls_audit_step_of(r, s);
                op_done += sf != NULL && sf->opt_count > 0;
            }
            op->matched++;
            if (op_done < (uint64_t)run->cfg_steps)
                ls_audit_rule_fail(op, i, r->trace_file, r->last_seq,
                                   "rank %u stopped early: %llu optimizer step(s) of the %lld requested (config "
                                   "steps_requested)",
                                   (unsigned)i, (unsigned long long)op_done, (long long)run->cfg_steps);
        }
        for (int64_t s = F; s < S; s++) {
            const ls_audit_step *sf = ls_audit_step_of(r, s);
            bool sft = sf != NULL && sf->sft;
            bool frozen = sf != NULL && sf->prefix_frozen; /* reuses an earlier step's prompt state */
            for (size_t k = 0; prof != NULL && k < prof->n_steps; k++) { /* the profile's plan, in order */
                const ls_audit_profile_step *st = &prof->steps[k];
                if (!ls_audit_profile_when(st->when, run->full_mode, run->naive, sft, frozen, ran[k])) continue;
                if (ls_audit_seq_rules_out(run, st->phase)) continue; /* the grammar says it never occurs */
                ph->matched++;
                if (sf && st->phase_ix >= 0 && st->phase_ix < 16 && (sf->phase_mask & (1u << st->phase_ix))) continue;
                if (ph_missing++ < 3)
                    ls_audit_rule_fail(ph, i, r->trace_file, r->last_seq,
                                       "step %lld: phase %s never ended ok (last phase begun: %s; last event seq %lld: %s)",
                                       (long long)s, st->phase, r->last_phase[0] ? r->last_phase : "(none)",
                                       (long long)r->last_seq, r->last_ev);
            }
            op->matched++;
            uint32_t oc = sf ? sf->opt_count : 0;
            if (oc != 1 && op_bad++ < 3)
                ls_audit_rule_fail(op, i, r->trace_file, oc ? sf->opt_seq : r->last_seq,
                                   "step %lld: %u optimizer_step events (one required)", (long long)s, (unsigned)oc);
        }
        uint64_t ly_missing = have_cfg && prof != NULL ? ls_audit_steps_layers_rule(run, ly, r, S, G) : 0;
        if (ly_missing > 3)
            ls_audit_rule_fail(ly, i, r->trace_file, -1, "%llu layer events missing in all on rank %u",
                               (unsigned long long)ly_missing, (unsigned)i);
        if (ph_missing > 3)
            ls_audit_rule_fail(ph, i, r->trace_file, -1, "%llu phases missing in all on rank %u",
                               (unsigned long long)ph_missing, (unsigned)i);
        /* optimizer calls for steps beyond S cannot exist: S covers every step traced */
    }
    free(G);
    ls_audit_rule_close(ph);
    ls_audit_rule_close(ly);
    ls_audit_rule_close(op);
    /* what was inferred rather than read from the configuration */
    size_t l = strlen(ly->message);
    if (have_cfg && run->cfg_group < 0)
        snprintf(ly->message + l, sizeof ly->message - l,
                 "; members per step inferred from the traces (%s)",
                 run->group_note[0] ? run->group_note
                 : run->config     ? "no \"group\" in the configuration"
                                   : "no configuration");
    l = strlen(op->message);
    if (run->cfg_steps < 0)
        snprintf(op->message + l, sizeof op->message - l,
                 "; steps from the receipts and traces (%s)",
                 run->steps_note[0] ? run->steps_note
                 : run->config      ? "no \"steps_requested\" in the configuration"
                                    : "no configuration");
    else if (run->steps_note[0])
        snprintf(op->message + l, sizeof op->message - l, "; %s", run->steps_note);
    ls_audit_rule_close(rc);
    ls_audit_rule_close(ne);
    return ls_audit_rules_sequence(run); /* steps.sequence (rank_seq.c) */
}
