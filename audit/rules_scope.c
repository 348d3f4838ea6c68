/* rules_scope.c - what the run's evidence speaks for (docs/evidence.md):
 *  - sources.agree (level 1): every place that states a fact of the run
 *    states the same: the configuration of the manifest and of every
 *    receipt, key by key; each trace header's run id, rank and world; the
 *    configuration's cp_ranks, each receipt's rank_state.world and the
 *    run's world; a one-rank run shows no collective; replay segments of
 *    the strategy's shape;
 *  - run.faults: a recorded fault caps every level it can touch, as the
 *    run's profile gives them (the rule sits at the lowest such level, so
 *    that no level from there up holds);
 *  - steps.exact (level 2): levels 2-4 speak of exact steps only; a step
 *    that reused a stale prompt state (prefix-frozen, by the trace, the
 *    receipt or the configuration's K) is named and keeps levels 2+ from
 *    holding;
 *  - digests.receipts (level 3): no receipt counted a finalized-gradient
 *    digest disagreement between the ranks.
 * The facts are also kept on the run (run->faults, run->steps_frozen) for
 * every report to name. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/audit.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/json_util.h"

ls_status ls_audit_rules_scope(ls_audit_run *run);

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

static void receipt_file(uint32_t rank, char *buf, size_t cap) {
    char d[32];
    ls_receipt_rank_dir(rank, d, sizeof d);
    snprintf(buf, cap, "%s/receipt.json", d);
}

/* The first key (in a's order, then b's) whose values differ; NULL when a
 * and b are equal objects. */
static const char *first_difference(const cJSON *a, const cJSON *b, const cJSON **va, const cJSON **vb) {
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        const cJSON *y = x->string ? cJSON_GetObjectItemCaseSensitive(b, x->string) : NULL;
        if (y == NULL || !cJSON_Compare(x, y, true)) {
            *va = x;
            *vb = y;
            return x->string ? x->string : "?";
        }
    }
    cJSON_ArrayForEach(x, b) {
        if (x->string && cJSON_GetObjectItemCaseSensitive(a, x->string) == NULL) {
            *va = NULL;
            *vb = x;
            return x->string;
        }
    }
    return NULL;
}

/* Adds the faults of one configuration to run->faults (distinct names). */
static void collect_faults(ls_audit_run *run, const cJSON *config) {
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(config, "faults")) {
        const char *name = cJSON_IsString(f) ? f->valuestring : "(not a string)";
        bool seen = false;
        for (size_t i = 0; i < run->n_faults; i++)
            if (strcmp(run->faults[i], name) == 0) seen = true;
        if (seen) continue;
        if (run->n_faults == LS_AUDIT_MAX_FAULTS) {
            run->faults_overflow = true;
            continue;
        }
        snprintf(run->faults[run->n_faults++], sizeof run->faults[0], "%.47s", name);
    }
}

/* The trace fits the strategy it claims: a LongStraw replay runs the
 * response (R tokens a layer segment, or an SFT answer), never the prompt;
 * the naive strategy's replay runs the whole sequence, longer than the
 * captured prompt (P - 1 tokens), on one rank only.  Under CP a rank
 * captures its shard only, so the LongStraw side is checked on one rank. */
static void strategy_shape(ls_audit_run *run, ls_audit_rule *sa) {
    if (run->config == NULL) return;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(run->config, "strategy");
    uint64_t R = 0;
    ls_json_get_u64(cJSON_GetObjectItemCaseSensitive(run->config, "options"), "response_len", &R);
    bool naive = cJSON_IsString(st) && strcmp(st->valuestring, "naive") == 0;
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (!r->trace_present || r->replay_tokens_max == 0 || r->capture_tokens_max == 0) continue;
        sa->matched++;
        int64_t rep = r->replay_tokens_max, cap = r->capture_tokens_max;
        bool whole = rep > cap && (R == 0 || rep > (int64_t)R); /* the prompt is in the replay */
        if (!naive && whole && run->world == 1)
            ls_audit_rule_fail(sa, i, r->trace_file, -1,
                               "the configuration says strategy longstraw, but replay layer segments run %lld tokens, "
                               "more than the %lld captured: naive-shaped, the prompt replayed under autograd",
                               (long long)rep, (long long)cap);
        if (naive && run->world > 1)
            ls_audit_rule_fail(sa, i, r->trace_file, -1, "the configuration says strategy naive, a one-rank "
                               "reference, but the run has %u ranks", (unsigned)run->world);
        else if (naive && !whole)
            ls_audit_rule_fail(sa, i, r->trace_file, -1,
                               "the configuration says strategy naive, but replay layer segments run %lld tokens, no "
                               "more than the %lld captured (a naive member replays the whole sequence)",
                               (long long)rep, (long long)cap);
    }
}

static ls_status rule_sources(ls_audit_run *run) {
    ADD(sa, "sources.agree", 1,
        "every source of a fact agrees: manifest and receipt configurations, trace headers, world", true);
    const cJSON *ref = run->manifest ? run->manifest->config : NULL;
    const char *ref_name = LS_MANIFEST_FILE;
    char rf[64], ref_rf[64];
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        receipt_file(i, rf, sizeof rf);
        const cJSON *c = r->receipt ? r->receipt->config : NULL;
        if (c != NULL) {
            if (ref == NULL) {
                ref = c;
                snprintf(ref_rf, sizeof ref_rf, "%s", rf);
                ref_name = ref_rf;
            } else {
                sa->matched++;
                const cJSON *va = NULL, *vb = NULL;
                const char *key = first_difference(ref, c, &va, &vb);
                if (key != NULL) {
                    char a[100], b[100];
                    ls_json_brief(va, 80, a, sizeof a);
                    ls_json_brief(vb, 80, b, sizeof b);
                    ls_audit_rule_fail(sa, i, rf, -1, "config \"%s\": %s says %s, %s says %s", key, ref_name, a, rf, b);
                }
            }
        }
        /* the rank's own state: the world it ran in */
        uint64_t rsw = 0;
        if (r->receipt && r->receipt->rank_state && ls_json_get_u64(r->receipt->rank_state, "world", &rsw) == 0) {
            sa->matched++;
            if (rsw != run->world)
                ls_audit_rule_fail(sa, i, rf, -1, "rank_state.world is %llu, the run has %u ranks (%s)",
                                   (unsigned long long)rsw, (unsigned)run->world, run->world_source);
        }
        /* the trace header: line 1 of the rank's trace */
        const cJSON *h = r->trace_present ? r->report.header : NULL;
        if (h == NULL) continue;
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(h, "run_id");
        const char *want = run->manifest ? run->manifest->run_id : r->receipt ? r->receipt->run_id : NULL;
        sa->matched++;
        if (want && (!cJSON_IsString(rid) || strcmp(rid->valuestring, want) != 0))
            ls_audit_rule_fail(sa, i, r->trace_file, 0, "the trace header's run_id %.64s, %s says %.64s",
                               cJSON_IsString(rid) ? rid->valuestring : "(absent)",
                               run->manifest ? LS_MANIFEST_FILE : rf, want);
        if (r->report.rank != (int64_t)i)
            ls_audit_rule_fail(sa, i, r->trace_file, 0, "the trace header says rank %lld, its directory is rank %u",
                               (long long)r->report.rank, (unsigned)i);
        if (r->report.world != (int64_t)run->world)
            ls_audit_rule_fail(sa, i, r->trace_file, 0, "the trace header says world %lld, the run has %u ranks (%s)",
                               (long long)r->report.world, (unsigned)run->world, run->world_source);
    }
    /* every configuration's faults (a source that left one out is a disagreement above) */
    run->n_faults = 0;
    if (run->manifest) collect_faults(run, run->manifest->config);
    for (uint32_t i = 0; i < run->world; i++)
        if (run->ranks[i].receipt) collect_faults(run, run->ranks[i].receipt->config);
    if (run->config != NULL) {
        int64_t cp = 0;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(run->config, "cp_ranks");
        sa->matched++;
        if (cJSON_IsNumber(v)) cp = (int64_t)v->valuedouble;
        if (v != NULL && cp != (int64_t)run->world)
            ls_audit_rule_fail(sa, -1, ref_name, -1, "config \"cp_ranks\" is %lld, the run has %u ranks (%s)",
                               (long long)cp, (unsigned)run->world, run->world_source);
    }
    strategy_shape(run, sa);
    if (run->world == 1 && run->ranks[0].trace_present) {
        sa->matched++;
        if (run->ranks[0].n_coll_total > 0)
            ls_audit_rule_fail(sa, 0, run->ranks[0].trace_file, -1,
                               "a one-rank run shows %llu collective(s): the trace does not fit the configuration",
                               (unsigned long long)run->ranks[0].n_coll_total);
    }
    ls_audit_rule_close(sa);
    return LS_OK;
}

static ls_status rule_faults(ls_audit_run *run) {
    int lowest = 5;
    for (size_t i = 0; i < run->n_faults; i++) {
        int l = ls_audit_fault_level_of(run, run->faults[i], NULL);
        if (l < lowest) lowest = l;
    }
    if (run->faults_overflow) lowest = 1;
    run->fault_cap = lowest - 1; /* the highest level the faults leave (4: none) */
    ADD(rf, "run.faults", lowest <= 4 ? lowest : 1,
        "no recorded fault touches this level (a fault caps every level it can affect)", true);
    rf->matched = 1;
    for (size_t i = 0; i < run->n_faults; i++) {
        const char *what = NULL;
        int l = ls_audit_fault_level_of(run, run->faults[i], &what);
        ls_audit_rule_fail(rf, -1, LS_MANIFEST_FILE, -1, "fault %s recorded (config \"faults\"): %s; not certified at "
                           "level %d or above", run->faults[i], what, l);
    }
    if (run->faults_overflow)
        ls_audit_rule_fail(rf, -1, LS_MANIFEST_FILE, -1, "more than %d distinct faults recorded", LS_AUDIT_MAX_FAULTS);
    ls_audit_rule_close(rf);
    if (run->n_faults == 0) snprintf(rf->message, sizeof rf->message, "no fault recorded in any configuration");
    return LS_OK;
}

/* Whether step s of a run that captures once per K steps from F reuses a
 * stale state. */
static bool frozen_by_config(int64_t K, int64_t F, int64_t s) { return K > 1 && (s - F) % K != 0; }

static ls_status rule_exact(ls_audit_run *run) {
    ADD(ex, "steps.exact", 2, "levels 2-4 speak of exact steps only: no step reused a stale prompt state", true);
    int64_t K = 1;
    const cJSON *k = run->config ? cJSON_GetObjectItemCaseSensitive(run->config, "prefix_frozen") : NULL;
    if (cJSON_IsNumber(k) && k->valuedouble >= 1 && k->valuedouble <= 1e9) K = (int64_t)k->valuedouble;
    const int64_t F = run->first_step, S = run->n_run_steps;
    run->steps_frozen = 0;
    run->n_frozen_listed = 0;
    for (int64_t s = F; s < S; s++) {
        bool frozen = frozen_by_config(K, F, s);
        for (uint32_t i = 0; i < run->world && !frozen; i++) {
            const ls_audit_rank *r = &run->ranks[i];
            const ls_audit_step *sf = ls_audit_step_of(r, s);
            if (sf != NULL && sf->prefix_frozen) frozen = true;
            const ls_receipt *rc = r->receipt;
            for (uint64_t q = 0; rc && q < rc->steps_prefix_frozen && !frozen; q++)
                if (rc->prefix_frozen_steps[q] == (uint64_t)s) frozen = true;
        }
        ex->matched++;
        if (!frozen) continue;
        run->steps_frozen++;
        if (run->n_frozen_listed < LS_AUDIT_MAX_FROZEN_LISTED) run->frozen_listed[run->n_frozen_listed++] = s;
    }
    if (run->steps_frozen > 0) {
        char list[200] = "";
        size_t n = 0;
        for (size_t i = 0; i < run->n_frozen_listed && n + 24 < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%lld", i ? ", " : "", (long long)run->frozen_listed[i]);
        ls_audit_rule_fail(ex, -1, LS_MANIFEST_FILE, -1,
                           "%lld of %lld steps exact; %lld prefix-frozen (a stale prompt state, never exact): steps "
                           "%s%s",
                           (long long)(S - F - run->steps_frozen), (long long)(S - F), (long long)run->steps_frozen,
                           list, (uint64_t)run->steps_frozen > run->n_frozen_listed ? ", ..." : "");
    }
    ls_audit_rule_close(ex);
    if (run->steps_frozen == 0 && ex->pass)
        snprintf(ex->message, sizeof ex->message, "%lld of %lld steps exact", (long long)(S - F), (long long)(S - F));
    return LS_OK;
}

/* A v2 receipt's rank_state is optional (docs/contract.md §2): a v2 run
 * none of whose receipts carries the count was not counted, and the rule
 * says so rather than pass or fail on its absence.  A v1 receipt must. */
static bool v2_uncounted(const ls_audit_run *run) {
    if (run->evidence_version != 2) return false;
    for (uint32_t i = 0; i < run->world; i++)
        if (run->ranks[i].receipt != NULL && run->ranks[i].receipt->rank_state != NULL) return false;
    return true;
}

static ls_status rule_receipt_digests(ls_audit_run *run) {
    bool uncounted = run->world > 1 && v2_uncounted(run);
    ADD(rd, "digests.receipts", 3, "no receipt counted a disagreement of the ranks' finalized-gradient digests",
        run->world > 1 && !uncounted);
    if (uncounted)
        snprintf(rd->message, sizeof rd->message, "not applicable: no v2 receipt carries "
                 "rank_state.grad_digest_disagreements (the trainer counted no digest disagreement)");
    for (uint32_t i = 0; rd->applicable && i < run->world; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        if (rc == NULL || rc->rank_state == NULL) continue;
        char rf[64];
        receipt_file(i, rf, sizeof rf);
        uint64_t n = 0;
        rd->matched++;
        if (ls_json_get_u64(rc->rank_state, "grad_digest_disagreements", &n) != 0)
            ls_audit_rule_fail(rd, i, rf, -1, "rank_state has no grad_digest_disagreements count");
        else if (n > 0)
            ls_audit_rule_fail(rd, i, rf, -1, "the rank counted %llu step(s) whose finalized gradients differed "
                               "between the ranks (rank_state.grad_digest_disagreements)", (unsigned long long)n);
    }
    ls_audit_rule_close(rd);
    return LS_OK;
}

ls_status ls_audit_rules_scope(ls_audit_run *run) {
    ls_status st = rule_sources(run);
    if (st == LS_OK) st = rule_faults(run);
    if (st == LS_OK) st = rule_exact(run);
    if (st == LS_OK) st = rule_receipt_digests(run);
    return st;
}
