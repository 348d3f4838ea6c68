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
#include "audit/model/audit.h"
#include "audit/rules/rules.h"
#include "audit/model/describe.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"

ls_status ls_audit_rules_scope(ls_audit_run *run);

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

static void receipt_file(uint32_t rank, char *buf, size_t cap) {
    char d[32];
    ls_receipt_rank_dir(rank, d, sizeof d);
    snprintf(buf, cap, "%s/receipt.json", d);
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

/* A disagreement of the canonical description (describe.h) as evidence:
 * the fact's path and both sources. */
typedef struct {
    ls_audit_run *run;
    ls_audit_rule *rule;
} disagree_ctx;

static int64_t rank_of_source(const char *name) {
    if (strncmp(name, "rank-", 5) != 0) return -1;
    return strtoll(name + 5, NULL, 10);
}

static void on_disagree(void *user, const char *path, const char *first, const cJSON *va, const char *other,
                        const cJSON *vb) {
    disagree_ctx *c = user;
    char a[100], b[100];
    ls_json_brief(va, 80, a, sizeof a);
    ls_json_brief(vb, 80, b, sizeof b);
    char shown[200];
    if (strncmp(path, "config.", 7) == 0) snprintf(shown, sizeof shown, "config \"%s\"", path + 7);
    else snprintf(shown, sizeof shown, "%s", path);
    char file[160];
    snprintf(file, sizeof file, "%s", other);
    char *paren = strstr(file, " (");
    if (paren) *paren = 0;
    ls_audit_rule_fail(c->rule, rank_of_source(other), file, -1, "%s: %s says %s, %s says %s", shown,
                       first ? first : "?", a, other, b);
}

/* Every source's description (describe.h), in the order a fact is first
 * taken from: the manifest, the run directory, each rank's receipt, trace
 * header, trace, then what the configuration implies. */
static ls_status describe_sources(const ls_audit_run *run, ls_audit_desc_list *l) {
    ls_status st = LS_OK;
    if (run->manifest != NULL) st = ls_audit_describe_manifest(l, run->manifest->priv_doc, LS_MANIFEST_FILE);
    /* the run directory: rank R is rank-R's, its receipt rank-R/receipt.json, its world the audit's */
    if (st == LS_OK) st = ls_audit_describe_rundir(l, run->world, run->world_source, run->manifest != NULL);
    for (uint32_t i = 0; st == LS_OK && i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        char rf[64];
        receipt_file(i, rf, sizeof rf);
        if (r->receipt != NULL) st = ls_audit_describe_receipt(l, r->receipt->priv_doc, rf, i);
        char hn[96];
        snprintf(hn, sizeof hn, "%s (header)", r->trace_file);
        if (st == LS_OK && r->trace_present && r->report.header_ok)
            st = ls_audit_describe_header(l, r->report.header, hn, i);
        if (st == LS_OK) st = ls_audit_describe_trace(l, run, r);
    }
    if (st == LS_OK && run->config != NULL) {
        int64_t until = 0; /* the steps any trace shows */
        for (uint32_t i = 0; i < run->world; i++)
            if (run->ranks[i].n_steps_seen > until) until = run->ranks[i].n_steps_seen;
        st = ls_audit_describe_config(l, run->config,
                                      run->ep_size > 1
                                          ? "the configuration (cp_ranks x ep_ranks, objective, sft_steps, first_step)"
                                          : "the configuration (cp_ranks, objective, sft_steps, first_step)",
                                      until);
    }
    if (st == LS_OK && run->metrics_lines != NULL) {
        char n[96];
        snprintf(n, sizeof n, "--metrics %.80s", run->opt.metrics_path);
        st = ls_audit_describe_metrics(l, run->metrics_lines, n);
    }
    return st;
}

/* Rank i's index in its CP group and that group's size: from its trace
 * header, the group of kind cp (v1: named "cp") that lists it; no header,
 * or one without such a group: the configuration's grid (rank = cp_idx *
 * ep_ranks + ep_idx, docs/design.md §4a; EP 1: the rank). */
static void cp_index(const ls_audit_run *run, uint32_t i, uint32_t *idx, uint32_t *size) {
    const ls_audit_rank *r = &run->ranks[i];
    const cJSON *h = r->trace_present && r->report.header_ok ? r->report.header : NULL, *g;
    uint32_t ep = run->ep_size >= 1 ? run->ep_size : 1;
    *idx = i / ep;
    *size = run->cp_size ? run->cp_size : run->world / ep;
    if (h == NULL) return;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(h, "groups")) {
        const char *name = ls_audit_get_str(g, "name"), *kind = ls_audit_get_str(g, "kind");
        if (!(kind ? strcmp(kind, "cp") == 0 : name && strcmp(name, "cp") == 0)) continue;
        uint32_t k = 0, at = UINT32_MAX;
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(g, "members")) {
            if (ls_json_is_number(m) && m->valuedouble == (double)i) at = k;
            k++;
        }
        if (at == UINT32_MAX) continue; /* not its own: check_groups names it */
        *idx = at;
        *size = k;
        return;
    }
}

/* The shards partition the prompt: the ranks of CP index 0 start at 0, each
 * next CP index where the one before ends, none empty backwards; the ranks of
 * one CP index (one EP group: docs/design.md §4a) hold the same shard; each
 * rank's CP index is its trace header's (cp_index).  A rank that states no
 * shard while others do is named.  EP 1: CP index = rank, the ranks in order. */
static void check_shards(ls_audit_rule *sa, const ls_audit_run *run, const cJSON *shards) {
    if (!cJSON_IsObject(shards)) return;
    const uint32_t world = run->world;
    uint32_t *ix = calloc(world ? world : 1, sizeof *ix);
    int64_t *lo = calloc(world ? 2 * (size_t)world : 1, sizeof *lo);
    if (ix == NULL || lo == NULL) {
        free(ix);
        free(lo);
        ls_audit_rule_fail(sa, -1, ".", -1, "shards: out of memory");
        return;
    }
    for (uint32_t i = 0; i < world; i++) {
        char k[24], rf[64];
        snprintf(k, sizeof k, "%u", (unsigned)i);
        receipt_file(i, rf, sizeof rf);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(shards, k);
        uint32_t size = 0;
        cp_index(run, i, &ix[i], &size);
        sa->matched++;
        if (cJSON_GetArraySize(s) != 2 || !ls_json_is_number(cJSON_GetArrayItem(s, 0)) ||
            !ls_json_is_number(cJSON_GetArrayItem(s, 1))) {
            ls_audit_rule_fail(sa, i, rf, -1, "shards: rank %u states no prompt shard (rank_state.prompt_positions) "
                               "while other ranks do: the shards cannot be shown to partition the prompt", (unsigned)i);
            free(ix);
            free(lo);
            return;
        }
        lo[2 * i] = (int64_t)cJSON_GetArrayItem(s, 0)->valuedouble;
        lo[2 * i + 1] = (int64_t)cJSON_GetArrayItem(s, 1)->valuedouble;
    }
    /* by CP index, then rank: the first rank of an index holds its shard, the others the same */
    int64_t end = 0;
    for (uint32_t c = 0; c < world; c++) {
        int64_t first = -1;
        for (uint32_t i = 0; i < world; i++) {
            if (ix[i] != c) continue;
            char rf[64];
            receipt_file(i, rf, sizeof rf);
            int64_t a = lo[2 * i], b = lo[2 * i + 1];
            if (first >= 0) {
                if (a != lo[2 * first] || b != lo[2 * first + 1])
                    ls_audit_rule_fail(sa, i, rf, -1, "shards: rank %u holds prompt positions [%lld, %lld), rank %lld "
                                       "of its EP group (CP index %u) [%lld, %lld): an EP group holds one shard",
                                       (unsigned)i, (long long)a, (long long)b, (long long)first, (unsigned)c,
                                       (long long)lo[2 * first], (long long)lo[2 * first + 1]);
                continue;
            }
            first = i;
            if (a != end || b < a)
                ls_audit_rule_fail(sa, i, rf, -1, "shards: rank %u holds prompt positions [%lld, %lld), but the shards "
                                   "before it end at %lld: %s", (unsigned)i, (long long)a, (long long)b, (long long)end,
                                   a < end ? "positions owned twice" : a > end ? "positions owned by no rank"
                                                                           : "a shard that ends before it starts");
            if (b > end) end = b;
        }
    }
    for (uint32_t i = 0; i < world; i++) /* an index no rank of a lower one leads to: never a partition */
        if (ix[i] >= world) {
            char rf[64];
            receipt_file(i, rf, sizeof rf);
            ls_audit_rule_fail(sa, i, rf, -1, "shards: rank %u's CP index %u lies outside the world of %u",
                               (unsigned)i, (unsigned)ix[i], (unsigned)world);
        }
    free(ix);
    free(lo);
}

/* Every group a header lists: members distinct ranks of the world, the
 * rank itself among them, and a group of kind world (v1: named "world")
 * every rank. */
static void check_groups(ls_audit_rule *sa, const ls_audit_run *run) {
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        const cJSON *h = r->trace_present && r->report.header_ok ? r->report.header : NULL;
        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(h, "groups")) {
            const char *name = ls_audit_get_str(g, "name"), *kind = ls_audit_get_str(g, "kind");
            const cJSON *mem = cJSON_GetObjectItemCaseSensitive(g, "members"), *m;
            bool world_kind = kind ? strcmp(kind, "world") == 0 : name && strcmp(name, "world") == 0;
            sa->matched++;
            uint64_t n = 0, self = 0, bad = 0, dup = 0;
            int64_t prev = -1;
            cJSON_ArrayForEach(m, mem) {
                int64_t v = ls_json_is_number(m) ? (int64_t)m->valuedouble : -1;
                if (v < 0 || v >= (int64_t)run->world || (double)v != m->valuedouble) bad++;
                else if (v <= prev) dup++;
                if (v == (int64_t)i) self++;
                prev = v;
                n++;
            }
            if (bad || dup)
                ls_audit_rule_fail(sa, i, r->trace_file, 0, "groups.%.40s: the header's members are not distinct "
                                   "ranks of the run's %u in order (%llu outside, %llu repeated or out of order)",
                                   name ? name : "?", (unsigned)run->world, (unsigned long long)bad,
                                   (unsigned long long)dup);
            else if (!self)
                ls_audit_rule_fail(sa, i, r->trace_file, 0, "groups.%.40s: rank %u's header lists a group it is "
                                   "not a member of", name ? name : "?", (unsigned)i);
            else if (world_kind && n != run->world)
                ls_audit_rule_fail(sa, i, r->trace_file, 0, "groups.%.40s: a world group of %llu rank(s), the run "
                                   "has %u (%s)", name ? name : "?", (unsigned long long)n, (unsigned)run->world,
                                   run->world_source);
            /* every member's own header lists the group (its members are then compared with the description) */
            cJSON_ArrayForEach(m, mem) {
                int64_t v = ls_json_is_number(m) ? (int64_t)m->valuedouble : -1;
                if (bad || dup || v < 0 || v >= (int64_t)run->world || v == (int64_t)i || name == NULL) continue;
                const ls_audit_rank *o = &run->ranks[v];
                const cJSON *oh = o->trace_present && o->report.header_ok ? o->report.header : NULL, *og;
                if (oh == NULL) continue; /* no header to speak: the trace rules name it */
                bool listed = false;
                cJSON_ArrayForEach(og, cJSON_GetObjectItemCaseSensitive(oh, "groups")) {
                    const char *on = ls_audit_get_str(og, "name");
                    if (on && strcmp(on, name) == 0) listed = true;
                }
                if (!listed)
                    ls_audit_rule_fail(sa, i, r->trace_file, 0, "groups.%.40s: rank %u's header makes rank %lld a "
                                       "member, whose own header (%s) lists no such group", name, (unsigned)i,
                                       (long long)v, o->trace_file);
            }
        }
    }
}

static ls_status rule_sources(ls_audit_run *run) {
    ADD(sa, "sources.agree", 1,
        "every fact agrees across every source that states it (the canonical description: manifest, receipts, "
        "trace headers and events, configuration); the shards partition the prompt; the groups fit the world",
        true);
    ls_audit_desc_list l = {0};
    cJSON *canon = NULL, *where = NULL;
    uint64_t compared = 0;
    disagree_ctx dc = {run, sa};
    ls_status st = describe_sources(run, &l);
    if (st == LS_OK) st = ls_audit_desc_merge(&l, &canon, &where, on_disagree, &dc, &compared);
    cJSON_Delete(where); /* its names are l's */
    ls_audit_desc_list_free(&l);
    if (st != LS_OK) return st;
    sa->matched += compared;
    check_shards(sa, run, cJSON_GetObjectItemCaseSensitive(canon, "shards"));
    check_groups(sa, run);
    cJSON_Delete(canon);
    /* every configuration's faults (a source that left one out is a disagreement above) */
    run->n_faults = 0;
    if (run->manifest) collect_faults(run, run->manifest->config);
    for (uint32_t i = 0; i < run->world; i++)
        if (run->ranks[i].receipt) collect_faults(run, run->ranks[i].receipt->config);
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

/* A v2 receipt's rank_state is optional (docs/contract.md §2).  Deny by
 * default: every receipt must carry the count when the run is v1 (the trainer
 * always counts), when its profile says its runs record it (records:
 * grad_digest_disagreements), when no usable profile speaks, or when another
 * of its receipts carries it; only a v2 run whose profile leaves it out and
 * none of whose receipts carries it reads not_applicable. */
static bool counts_required(const ls_audit_run *run) {
    if (run->evidence_version != 2) return true;
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    if (prof == NULL || (prof->records & LS_AUDIT_RECORDS_GRAD_DIGESTS)) return true;
    for (uint32_t i = 0; i < run->world; i++)
        if (run->ranks[i].receipt != NULL && run->ranks[i].receipt->rank_state != NULL) return true;
    return false;
}

static ls_status rule_receipt_digests(ls_audit_run *run) {
    bool required = counts_required(run);
    ADD(rd, "digests.receipts", 3, "no receipt counted a disagreement of the ranks' finalized-gradient digests",
        run->world > 1 && required);
    if (run->world > 1 && !required)
        snprintf(rd->message, sizeof rd->message, "not applicable: no v2 receipt carries "
                 "rank_state.grad_digest_disagreements, and profile %s does not say its runs count them (records: "
                 "grad_digest_disagreements)", run->profile_used);
    for (uint32_t i = 0; rd->applicable && i < run->world; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        char rf[64];
        receipt_file(i, rf, sizeof rf);
        uint64_t n = 0;
        rd->matched++;
        if (rc == NULL)
            ls_audit_rule_fail(rd, i, rf, -1, "rank %u: no readable receipt: its digest disagreements are not counted",
                               (unsigned)i);
        else if (rc->rank_state == NULL)
            ls_audit_rule_fail(rd, i, rf, -1, "the receipt has no rank_state: its digest disagreements are not "
                               "counted");
        else if (ls_json_get_u64(rc->rank_state, "grad_digest_disagreements", &n) != 0)
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
