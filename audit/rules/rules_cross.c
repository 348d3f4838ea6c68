/* rules_cross.c - the cross-rank rules (world > 1): collectives matched like
 * a flight recorder (per group, aligned by gseq: the same op, reduction,
 * count, dtype and purpose on every member; missing ranks named; the first
 * gseq where ranks diverge; a v2 send or recv is no group collective: its
 * gseq counts its channel's messages, and collectives.p2p, rules_p2p.c,
 * pairs them), the collectives the run's profile requires
 * (collectives.composition, .dkv, .finalize: per layer entry and per step,
 * each in a group of the profile's kind; v1: the global composition of every
 * response attention layer, level 2, the dQ/dK/dV and finalize reductions,
 * level 3) and the identical replicated parameter digests (level 3). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/trace_event.h"

ls_status ls_audit_rules_cross(ls_audit_run *run);

#define ADD(var, id, lvl, title, appl)                                  \
    ls_audit_rule *var = ls_audit_rule_add(run, id, lvl, title, appl); \
    if (var == NULL) return LS_ERR_NOMEM

/* ---- flight-recorder matching -------------------------------------------- */

bool ls_audit_group_member(const ls_audit_run *run, const char *name, uint32_t r) {
    for (uint32_t i = 0; i < run->world; i++) {
        const cJSON *h = run->ranks[i].report.header;
        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(h, "groups")) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(g, "name");
            if (!cJSON_IsString(n) || strcmp(n->valuestring, name) != 0) continue;
            const cJSON *m;
            cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(g, "members")) {
                if (cJSON_IsNumber(m) && m->valuedouble == (double)r) return true;
            }
            return false;
        }
    }
    return true;
}

static void coll_desc(const ls_audit_run *run, const ls_audit_coll *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s %s count %lld %s purpose %s%s", ls_trace_op_name((ls_trace_op)c->op),
             ls_trace_red_name((ls_trace_red)c->red), (long long)c->count, ls_trace_dtype_name((ls_trace_dtype)c->dtype),
             run->purposes[c->purpose], "");
}

static void list_add(ls_audit_rank_list *l, uint32_t r) {
    if (l->n < LS_AUDIT_FORENSIC_RANKS) l->r[l->n++] = r;
    l->total++;
}

/* Whether split a came before b: on the same entering rank by its event seq,
 * else by step, then phase, then seq. */
static bool split_before(const ls_audit_coll_split *a, const ls_audit_coll_split *b) {
    if (!b->found) return true;
    if (a->ref_rank == b->ref_rank) return a->ref_seq < b->ref_seq;
    if (a->step != b->step) return a->step < b->step;
    if (a->phase != b->phase) return a->phase < b->phase;
    return a->ref_seq < b->ref_seq;
}

static ls_status match_group(ls_audit_run *run, ls_audit_rule *rule, uint16_t g, ls_audit_coll_split *first) {
    uint32_t W = run->world;
    size_t **idx = calloc(W, sizeof *idx);
    size_t *n = calloc(W, sizeof *n), *pos = calloc(W, sizeof *pos);
    bool *member = calloc(W, sizeof *member);
    ls_status st = LS_ERR_NOMEM;
    if (!idx || !n || !pos || !member) goto cleanup;
    for (uint32_t r = 0; r < W; r++) {
        const ls_audit_rank *rk = &run->ranks[r];
        member[r] = ls_audit_group_member(run, run->groups[g], r);
        if (!member[r]) continue;
        idx[r] = malloc((rk->n_coll ? rk->n_coll : 1) * sizeof **idx);
        if (idx[r] == NULL) goto cleanup;
        for (size_t k = 0; k < rk->n_coll; k++) {
            if (rk->coll[k].group != g) continue;
            if (n[r] > 0 && rk->coll[idx[r][n[r] - 1]].gseq >= rk->coll[k].gseq)
                ls_audit_rule_fail(rule, r, rk->trace_file, rk->coll[k].seq,
                                   "group %s: gseq %lld after gseq %lld (not increasing)", run->groups[g],
                                   (long long)rk->coll[k].gseq, (long long)rk->coll[idx[r][n[r] - 1]].gseq);
            idx[r][n[r]++] = k;
        }
    }
    uint64_t diverged = 0;
    ls_audit_coll_split split = {0}; /* this group's first */
    for (;;) {
        int64_t gmin = INT64_MAX;
        for (uint32_t r = 0; r < W; r++)
            if (member[r] && pos[r] < n[r] && run->ranks[r].coll[idx[r][pos[r]]].gseq < gmin)
                gmin = run->ranks[r].coll[idx[r][pos[r]]].gseq;
        if (gmin == INT64_MAX) break;
        const ls_audit_coll *ref = NULL;
        uint32_t ref_rank = 0;
        char in[200] = "", out[200] = "";
        size_t lin = 0, lout = 0;
        bool missing = false, mismatch = false;
        for (uint32_t r = 0; r < W; r++) {
            if (!member[r]) continue;
            const ls_audit_coll *c = pos[r] < n[r] ? &run->ranks[r].coll[idx[r][pos[r]]] : NULL;
            if (c != NULL && c->gseq == gmin) {
                rule->matched++;
                if (lin < sizeof in) lin += (size_t)snprintf(in + lin, sizeof in - lin, "%s%u", lin ? "," : "", r);
                if (ref == NULL) {
                    ref = c;
                    ref_rank = r;
                } else if (c->op != ref->op || c->red != ref->red || c->count != ref->count ||
                           c->dtype != ref->dtype || c->purpose != ref->purpose) {
                    mismatch = true;
                    if (c->count != ref->count) {
                        if (run->n_mism < LS_AUDIT_MAX_MISMATCH)
                            run->mism[run->n_mism++] = (ls_audit_size_mismatch){
                                .group = g, .purpose = ref->purpose, .gseq = gmin, .step = ref->step, .rank = r,
                                .ref_rank = ref_rank, .count = c->count, .ref_count = ref->count, .seq = c->seq,
                                .ref_seq = ref->seq};
                        run->n_mism_total++;
                    }
                    if (diverged < 4) {
                        char a[160], b[160];
                        coll_desc(run, c, a, sizeof a);
                        coll_desc(run, ref, b, sizeof b);
                        ls_audit_rule_fail(rule, r, run->ranks[r].trace_file, c->seq,
                                           "group %s gseq %lld: %s; rank %u has %s", run->groups[g], (long long)gmin,
                                           a, (unsigned)ref_rank, b);
                    }
                }
            } else {
                missing = true;
                if (lout < sizeof out) lout += (size_t)snprintf(out + lout, sizeof out - lout, "%s%u", lout ? "," : "", r);
            }
        }
        if (missing) {
            char a[160];
            coll_desc(run, ref, a, sizeof a);
            if (diverged < 4) {
                for (uint32_t r = 0; r < W; r++) {
                    if (!member[r]) continue;
                    const ls_audit_coll *c = pos[r] < n[r] ? &run->ranks[r].coll[idx[r][pos[r]]] : NULL;
                    if (c != NULL && c->gseq == gmin) continue;
                    const ls_audit_coll *prev = pos[r] > 0 ? &run->ranks[r].coll[idx[r][pos[r] - 1]] : NULL;
                    ls_audit_rule_fail(rule, r, run->ranks[r].trace_file, prev ? prev->seq : -1,
                                       "group %s gseq %lld (%s, entered by ranks %s): missing on rank %u (its previous "
                                       "collective in the group: gseq %lld, seq %lld)",
                                       run->groups[g], (long long)gmin, a, in, (unsigned)r,
                                       prev ? (long long)prev->gseq : -1LL, prev ? (long long)prev->seq : -1LL);
                }
            }
            if (!split.found) {
                split.found = true;
                split.group = g;
                split.purpose = ref->purpose;
                split.gseq = gmin;
                split.step = ref->step;
                split.layer = ref->layer;
                split.count = ref->count;
                split.op = ref->op;
                split.phase = ref->phase;
                split.ref_rank = ref_rank;
                split.ref_seq = ref->seq;
                for (uint32_t r = 0; r < W; r++) {
                    if (!member[r]) continue;
                    const ls_audit_coll *c = pos[r] < n[r] ? &run->ranks[r].coll[idx[r][pos[r]]] : NULL;
                    list_add(c != NULL && c->gseq == gmin ? &split.entered : &split.missing, r);
                }
                if (split_before(&split, first)) {
                    *first = split;
                    snprintf(run->coll_divergence, sizeof run->coll_divergence,
                             "group %s gseq %lld (%s, step %lld, phase %s, layer %lld): entered by ranks %s, not by "
                             "ranks %s",
                             run->groups[g], (long long)gmin, a, (long long)ref->step, ls_audit_phase_name(run, ref->phase),
                             (long long)ref->layer, in, out);
                }
            }
        }
        if (missing || mismatch) diverged++;
        for (uint32_t r = 0; r < W; r++)
            if (member[r] && pos[r] < n[r] && run->ranks[r].coll[idx[r][pos[r]]].gseq == gmin) pos[r]++;
    }
    if (diverged > 4)
        ls_audit_rule_fail(rule, -1, ".", -1, "group %s: %llu gseq values diverge in all", run->groups[g],
                           (unsigned long long)diverged);
    st = LS_OK;
cleanup:
    for (uint32_t r = 0; idx && r < W; r++) free(idx[r]);
    free(idx);
    free(n);
    free(pos);
    free(member);
    return st;
}

static ls_status rule_match(ls_audit_run *run) {
    ADD(m, "collectives.match", 1, "every collective matched across the ranks of its group (flight recorder)",
        run->world > 1);
    if (!m->applicable) {
        ls_audit_rule_close(m);
        return LS_OK;
    }
    memset(&run->split, 0, sizeof run->split);
    run->coll_divergence[0] = 0;
    run->n_mism = 0;
    run->n_mism_total = 0;
    for (size_t g = 0; g < run->n_groups; g++) {
        ls_status st = match_group(run, m, (uint16_t)g, &run->split);
        if (st != LS_OK) return st;
        /* beyond the kept records: per-group fingerprints */
        for (uint32_t r = 1; r < run->world; r++) {
            const ls_audit_rank *a = &run->ranks[0], *b = &run->ranks[r];
            if (a->n_coll_group == a->n_coll && b->n_coll_group == b->n_coll) continue;
            if (a->group_count[g] != b->group_count[g] || a->group_hash[g] != b->group_hash[g])
                ls_audit_rule_fail(m, r, b->trace_file, -1,
                                   "group %s: beyond the %zu collectives kept, %llu calls fingerprint differently from "
                                   "rank 0's %llu",
                                   run->groups[g], b->n_coll, (unsigned long long)b->group_count[g],
                                   (unsigned long long)a->group_count[g]);
        }
    }
    if (run->names_overflow) ls_audit_rule_fail(m, -1, ".", -1, "more distinct groups or purposes than the audit holds");
    ls_audit_rule_close(m);
    return LS_OK;
}

/* ---- required collectives ------------------------------------------------ */

/* The first failures a rank's closed steps recorded (rank_steps.c), as
 * evidence. */
static void emit_req(const ls_audit_run *run, ls_audit_rule *rule, const ls_audit_rank *r, const ls_audit_req *q,
                     uint64_t *shown) {
    rule->matched += q->matched;
    for (size_t k = 0; k < q->n_first; k++) {
        const ls_audit_req_fail *e = &q->first[k];
        if ((*shown)++ < 4)
            ls_audit_rule_fail(rule, r->rank, r->trace_file, e->first_seq,
                               "step %lld %s layer %lld (%s %s): %llu %s collective(s), %llu required",
                               (long long)e->step, ls_audit_phase_name(run, e->phase), (long long)e->layer, e->label,
                               e->dir ? "bwd" : "fwd", (unsigned long long)e->got, e->purpose,
                               (unsigned long long)e->want);
    }
}

/* The group kinds (bits) rule rl accepts for a collective of purpose in
 * phase, with a layer or without; 0 when rl requires no such collective. */
static unsigned kinds_for(const ls_audit_profile_rule *rl, const char *purpose, int phase, bool has_layer) {
    unsigned kinds = 0;
    for (size_t k = 0; has_layer && k < rl->n_layers; k++) {
        const ls_audit_profile_layer_req *q = &rl->layers[k];
        bool ph = false, pu = false;
        for (size_t j = 0; j < q->n_phases; j++) ph = ph || q->phase_ix[j] == phase;
        for (size_t j = 0; j < q->n_purposes; j++) pu = pu || strcmp(q->purposes[j], purpose) == 0;
        if (ph && pu) kinds |= 1u << q->group_kind;
    }
    for (size_t k = 0; !has_layer && k < rl->n_steps; k++) {
        const ls_audit_profile_step_req *q = &rl->steps[k];
        bool pu = false;
        for (size_t j = 0; j < q->n_purposes; j++) pu = pu || strcmp(q->purposes[j], purpose) == 0;
        if (q->phase_ix == phase && pu) kinds |= 1u << q->group_kind;
    }
    return kinds;
}

/* The group kinds (bits) rule rl accepts, per purpose, phase and with a
 * layer or not (0: the rule requires no such collective). */
typedef struct {
    uint8_t k[LS_AUDIT_MAX_NAMES][LS_AUDIT_NPHASE][2];
} kinds_table;

static void kinds_fill(const ls_audit_run *run, const ls_audit_profile_rule *rl, kinds_table *t) {
    memset(t, 0, sizeof *t);
    for (size_t p = 0; p < run->n_purposes; p++)
        for (int ph = 0; ph < LS_AUDIT_NPHASE; ph++)
            for (int l = 0; l < 2; l++) t->k[p][ph][l] = (uint8_t)kinds_for(rl, run->purposes[p], ph, l);
}

/* One record of a collective the rule may require, in a group of another
 * kind than the profile says: evidence (the first 4 of a rank, *shown). */
static void check_group_kind(const ls_audit_run *run, ls_audit_rule *rule, const kinds_table *t,
                             const ls_audit_rank *r, uint64_t *shown, int64_t seq, int64_t step, uint16_t purpose,
                             uint8_t phase, uint16_t group, bool has_layer) {
    unsigned want = purpose < LS_AUDIT_MAX_NAMES && phase < LS_AUDIT_NPHASE ? t->k[purpose][phase][has_layer] : 0;
    if (want == 0) return;
    int kind = ls_audit_group_kind_of(run, group);
    if (kind >= 0 && (want & (1u << kind))) return;
    if ((*shown)++ >= 4) return;
    const char *wk = "?";
    for (int g = 0; g < LS_AUDIT_GROUP_KIND_COUNT; g++)
        if (want & (1u << g)) wk = ls_audit_group_kind_name(g);
    ls_audit_rule_fail(rule, r->rank, r->trace_file, seq,
                       "step %lld %s: %s collective in group %s (kind %s), the profile requires a %s group",
                       (long long)step, ls_audit_phase_name(run, phase), run->purposes[purpose], run->groups[group],
                       kind >= 0 ? ls_audit_group_kind_name(kind) : "unknown", wk);
}

/* The collectives the rule requires, in a group of another kind than the
 * profile says (the flight recorder's records and the point-to-point ones:
 * world > 1). */
static void check_group_kinds(const ls_audit_run *run, ls_audit_rule *rule, const kinds_table *t,
                              const ls_audit_rank *r) {
    uint64_t shown = 0;
    for (size_t k = 0; k < r->n_coll; k++) {
        const ls_audit_coll *c = &r->coll[k];
        check_group_kind(run, rule, t, r, &shown, c->seq, c->step, c->purpose, c->phase, c->group, c->layer != -2);
    }
    for (size_t k = 0; k < r->n_p2p; k++) {
        const ls_audit_p2p *c = &r->p2p[k];
        check_group_kind(run, rule, t, r, &shown, c->seq, c->step, c->purpose, c->phase, c->group,
                         (c->flags & LS_AUDIT_P2P_LAYER) != 0);
    }
}

/* The rules' titles and levels when a v2 run has no usable profile. */
static const struct {
    const char *id;
    int level;
    const char *title;
} REQUIRED[LS_AUDIT_PROFILE_NRULES] = {
    {"collectives.composition", 2, "the collectives the profile requires of every layer entry it names (forward)"},
    {"collectives.dkv", 3, "the collectives the profile requires of every layer entry it names (backward)"},
    {"collectives.finalize", 3, "the collectives the profile requires every step"},
};

static ls_status rules_required(ls_audit_run *run) {
    bool multi = run->world > 1;
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    ls_audit_rule *rule[LS_AUDIT_PROFILE_NRULES];
    const ls_audit_profile_rule *rl[LS_AUDIT_PROFILE_NRULES];
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) {
        rl[id] = prof ? ls_audit_profile_rule_of(prof, (ls_audit_profile_rule_id)id) : NULL;
        bool applicable = multi && (prof == NULL || rl[id] != NULL);
        rule[id] = ls_audit_rule_add(run, REQUIRED[id].id, rl[id] ? rl[id]->level : REQUIRED[id].level,
                                     rl[id] ? rl[id]->title : REQUIRED[id].title, applicable);
        if (rule[id] == NULL) return LS_ERR_NOMEM;
        if (multi && prof != NULL && rl[id] == NULL)
            snprintf(rule[id]->message, sizeof rule[id]->message, "not applicable: profile %s requires none",
                     prof->name);
        else if (multi && prof == NULL)
            ls_audit_rule_fail(rule[id], -1, ".", -1, "no profile: %s", run->profile_err);
    }
    kinds_table *kt = multi && prof != NULL ? malloc(LS_AUDIT_PROFILE_NRULES * sizeof *kt) : NULL;
    if (multi && prof != NULL && kt == NULL) return LS_ERR_NOMEM;
    for (int id = 0; kt != NULL && id < LS_AUDIT_PROFILE_NRULES; id++)
        if (rl[id] != NULL) kinds_fill(run, rl[id], &kt[id]);
    for (uint32_t i = 0; multi && prof != NULL && i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) {
            if (rl[id] == NULL) continue;
            ls_audit_rule *ru = rule[id];
            if (!r->trace_present) {
                ls_audit_rule_fail(ru, i, r->trace_file, -1, "rank %u: no trace", (unsigned)i);
                continue;
            }
            uint64_t shown = 0;
            emit_req(run, ru, r, &r->req[id], &shown);
            bool must = false; /* a must_appear requirement the run's grid asks for */
            for (size_t k = 0; k < rl[id]->n_layers; k++)
                must = must || (rl[id]->layers[k].must_appear && ls_audit_grid_holds(run, rl[id]->layers[k].when));
            if (must && rl[id]->none[0] && r->req[id].entries == 0)
                ls_audit_rule_fail(ru, i, r->trace_file, r->last_seq, "rank %u %s", (unsigned)i, rl[id]->none);
            /* the per-step requirements, every step of the run */
            shown = 0;
            for (int64_t s = run->first_step; rl[id]->n_steps > 0 && s < run->n_run_steps; s++) {
                const ls_audit_step *sf = ls_audit_step_of(r, s);
                bool sft = sf != NULL && sf->sft, frozen = sf != NULL && sf->prefix_frozen;
                for (size_t k = 0; k < rl[id]->n_steps; k++) {
                    const ls_audit_profile_step_req *q = &rl[id]->steps[k];
                    if (!ls_audit_grid_holds(run, q->when) ||
                        !ls_audit_profile_when(q->when & ~(unsigned)LS_AUDIT_WHEN_GRID, run->full_mode, run->naive,
                                               sft, frozen, false))
                        continue;
                    for (size_t p = 0; p < q->n_purposes; p++) {
                        ru->matched++;
                        if (sf != NULL && (sf->step_req & (1u << (q->bit0 + p)))) continue;
                        if (shown++ < 4)
                            ls_audit_rule_fail(ru, i, r->trace_file, -1, "step %lld %s: no %s collective",
                                               (long long)s, q->phase, q->purposes[p]);
                    }
                }
            }
            check_group_kinds(run, ru, &kt[id], r);
        }
    }
    free(kt);
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) ls_audit_rule_close(rule[id]);
    return LS_OK;
}

/* ---- replicated parameter digests ---------------------------------------- */

/* The first 8 bytes of a digest as 16 hex digits. */
static void hex16(const uint8_t *d, char out[17]) {
    static const char x[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++) {
        out[2 * i] = x[d[i] >> 4];
        out[2 * i + 1] = x[d[i] & 15];
    }
    out[16] = 0;
}

static ls_status rule_digests(ls_audit_run *run) {
    ADD(d, "digests.replicated", 3, "replicated parameter digests identical across ranks after every step",
        run->world > 1);
    free(run->digest_splits);
    run->digest_splits = NULL;
    run->n_digest_splits = 0;
    run->digest_first_step = -1;
    run->digest_divergence[0] = 0;
    if (d->applicable) {
        run->digest_splits = calloc(run->world, sizeof *run->digest_splits);
        if (run->digest_splits == NULL) return LS_ERR_NOMEM;
        uint64_t shown = 0;
        for (int64_t s = run->first_step; s < run->n_run_steps; s++) {
            const uint8_t *ref = NULL;
            char ref_hex[17] = "", hex[17];
            uint32_t ref_rank = 0;
            for (uint32_t i = 0; i < run->world; i++) {
                const ls_audit_rank *r = &run->ranks[i];
                const ls_audit_step *sf = ls_audit_step_of(r, s);
                if (sf == NULL || !sf->has_digest) {
                    if (shown++ < 4)
                        ls_audit_rule_fail(d, i, r->trace_file, r->last_seq,
                                           "step %lld: no \"trainable\" param_digest on rank %u", (long long)s,
                                           (unsigned)i);
                    continue;
                }
                d->matched++;
                if (ref == NULL) {
                    ref = sf->digest;
                    ref_rank = i;
                    hex16(ref, ref_hex);
                } else if (memcmp(ref, sf->digest, sizeof sf->digest) != 0) {
                    hex16(sf->digest, hex);
                    if (run->digest_first_step < 0) {
                        run->digest_first_step = s;
                        run->digest_ref_rank = ref_rank;
                    }
                    bool known = false;
                    for (size_t k = 0; k < run->n_digest_splits; k++)
                        if (run->digest_splits[k].rank == i) known = true;
                    if (!known && run->n_digest_splits < run->world)
                        run->digest_splits[run->n_digest_splits++] = (ls_audit_digest_split){.rank = i, .first_step = s};
                    if (!run->digest_divergence[0])
                        snprintf(run->digest_divergence, sizeof run->digest_divergence,
                                 "step %lld: rank %u has %s..., rank %u has %s...", (long long)s, (unsigned)i, hex,
                                 (unsigned)ref_rank, ref_hex);
                    if (shown++ < 4)
                        ls_audit_rule_fail(d, i, r->trace_file, sf->digest_seq,
                                           "step %lld: trainable digest %s... differs from rank %u's %s...",
                                           (long long)s, hex, (unsigned)ref_rank, ref_hex);
                }
            }
        }
    }
    ls_audit_rule_close(d);
    return LS_OK;
}

ls_status ls_audit_rules_cross(ls_audit_run *run) {
    ls_status st = rule_match(run);
    if (st == LS_OK) st = rules_required(run);
    if (st == LS_OK) st = rule_digests(run);
    return st;
}
