/* rules_performed.c - collectives.performed (level 1, v2 runs only;
 * docs/contract.md §1): an allreduce, broadcast or allgather leaves every
 * member of its group holding the same output, so the ranks' output digests
 * (out_sha256, or out_digest: sha256 or xxh3_128) of one (group, gseq) must
 * agree.  A reduction that was logged but never performed leaves the
 * buffers different; two digests of different algorithms cannot be
 * compared, and fail saying so.  The flight recorder keeps 63 bits of each
 * digest and its algorithm (ls_audit_coll.out8, ls_audit_digest8).  Records
 * the trainer declared (declared: true, note()) are judged alike and
 * counted in the message.  Deny by default: a
 * record without a digest fails where the run's profile says its runs record
 * them (records: out_sha256), where another rank's record of the same
 * collective has one, or where no usable profile speaks; only a run whose
 * profile leaves them out and that carries none reads not_applicable (as
 * does one rank: no group output).  The rule never passes on absence. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One digest-carrying record of a replicating collective. */
typedef struct {
    int64_t gseq, seq;
    uint64_t out8;
    uint32_t rank;
    uint16_t group, purpose;
    uint8_t op;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->gseq != y->gseq) return x->gseq < y->gseq ? -1 : 1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool replicating(uint8_t op) {
    return op == LS_TRACE_OP_ALLREDUCE || op == LS_TRACE_OP_BROADCAST || op == LS_TRACE_OP_ALLGATHER;
}

/* Whether the sorted digest records e[0..m) hold one of (group, gseq). */
static bool digested(const entry *e, size_t m, uint16_t group, int64_t gseq) {
    size_t lo = 0, hi = m;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e[mid].group < group || (e[mid].group == group && e[mid].gseq < gseq)) lo = mid + 1;
        else hi = mid;
    }
    return lo < m && e[lo].group == group && e[lo].gseq == gseq;
}

static const char *name_of(char *const *tab, size_t n, uint16_t i) { return i < n ? tab[i] : "?"; }

ls_status ls_audit_rules_performed(ls_audit_run *run) {
    if (run->evidence_version != 2) return LS_OK; /* a v1 trace has no out_sha256 field: the rule is v2's */
    size_t n = 0, replicas = 0;
    bool overflow = false;
    for (uint32_t r = 0; r < run->world; r++) {
        const ls_audit_rank *rk = &run->ranks[r];
        overflow |= rk->n_coll_group > rk->n_coll && run->world > 1;
        for (size_t k = 0; k < rk->n_coll; k++) {
            replicas += replicating(rk->coll[k].op);
            n += rk->coll[k].out8 != 0 && replicating(rk->coll[k].op);
        }
    }
    /* deny by default: the digests must be there when the run's profile says its runs record them
       (records: out_sha256), or when no usable profile says otherwise; one rank has no group output */
    const ls_audit_profile *prof = ls_audit_profile_of(run);
    bool promised = prof == NULL || (prof->records & LS_AUDIT_RECORDS_OUT_SHA256);
    bool applicable = run->world > 1 && (n > 0 || promised);
    ls_audit_rule *rule = ls_audit_rule_add(run, "collectives.performed", 1,
                                            "every member of a group holds the same output of each allreduce, "
                                            "broadcast and allgather (out_sha256 or out_digest)",
                                            applicable);
    if (rule == NULL) return LS_ERR_NOMEM;
    if (!applicable) {
        if (run->world > 1)
            snprintf(rule->message, sizeof rule->message,
                     "not applicable: no allreduce, broadcast or allgather carries out_sha256 or out_digest, and "
                     "profile %s does not say its runs record them (records: out_sha256): nothing to compare",
                     prof->name);
        else
            snprintf(rule->message, sizeof rule->message, "not applicable: one rank, no group output to compare");
        ls_audit_rule_close(rule);
        return LS_OK;
    }
    if (n == 0) {
        rule->matched = 1;
        ls_audit_rule_fail(rule, -1, ".", -1, "none of the run's %llu allreduce, broadcast and allgather record(s) "
                           "carries an output digest (out_sha256 or out_digest), which %s: whether they were "
                           "performed is unknown",
                           (unsigned long long)replicas,
                           prof == NULL ? "no usable profile says the run may lack" : "its profile says its runs record");
        ls_audit_rule_close(rule);
        return LS_OK;
    }
    entry *e = malloc(n * sizeof *e);
    if (e == NULL) return LS_ERR_NOMEM;
    size_t m = 0;
    for (uint32_t r = 0; r < run->world; r++) {
        const ls_audit_rank *rk = &run->ranks[r];
        for (size_t k = 0; k < rk->n_coll; k++) {
            const ls_audit_coll *c = &rk->coll[k];
            if (c->out8 == 0 || !replicating(c->op)) continue;
            e[m++] = (entry){.gseq = c->gseq, .seq = c->seq, .out8 = c->out8, .rank = r, .group = c->group,
                             .purpose = c->purpose, .op = c->op};
        }
    }
    qsort(e, m, sizeof *e, cmp_entry);
    /* a digest missing from a record where the profile promises them, or where another rank of the same
       (group, gseq) has one, is a comparison that cannot be made */
    uint64_t undigested = 0;
    for (uint32_t r = 0; r < run->world; r++) {
        const ls_audit_rank *rk = &run->ranks[r];
        for (size_t k = 0; k < rk->n_coll; k++) {
            const ls_audit_coll *c = &rk->coll[k];
            if (c->out8 != 0 || !replicating(c->op)) continue;
            if (!promised && !digested(e, m, c->group, c->gseq)) continue;
            if (undigested++ >= 4) continue;
            ls_audit_rule_fail(rule, r, rk->trace_file, c->seq,
                               "group %s gseq %lld (%s, purpose %s): rank %u's record carries no out_sha256 or "
                               "out_digest%s: its output cannot be compared",
                               name_of(run->groups, run->n_groups, c->group), (long long)c->gseq,
                               ls_trace_op_name((ls_trace_op)c->op), name_of(run->purposes, run->n_purposes, c->purpose),
                               (unsigned)r, promised ? " (the run's profile says its runs record it)"
                                                     : ", another rank's does");
        }
    }
    if (undigested > 4)
        ls_audit_rule_fail(rule, -1, ".", -1, "%llu records without out_sha256 or out_digest in all",
                           (unsigned long long)undigested);
    for (size_t i = 0; i < m;) {
        size_t j = i + 1;
        while (j < m && e[j].group == e[i].group && e[j].gseq == e[i].gseq) j++;
        /* e[i] is the lowest rank's record: the reference */
        if (j - i >= 2) rule->matched++;
        ls_trace_digest_alg ai = ls_audit_digest8_alg(e[i].out8);
        for (size_t k = i + 1; k < j; k++) {
            if (e[k].out8 == e[i].out8) continue;
            const ls_audit_rank *rk = &run->ranks[e[k].rank];
            ls_trace_digest_alg ak = ls_audit_digest8_alg(e[k].out8);
            if (ak != ai) {
                ls_audit_rule_fail(rule, e[k].rank, rk->trace_file, e[k].seq,
                                   "group %s gseq %lld (%s, purpose %s): rank %u's output digest is %s, rank %u's "
                                   "%s (%s seq %lld): the algorithms differ, the outputs cannot be compared",
                                   name_of(run->groups, run->n_groups, e[k].group), (long long)e[k].gseq,
                                   ls_trace_op_name((ls_trace_op)e[k].op),
                                   name_of(run->purposes, run->n_purposes, e[k].purpose), (unsigned)e[k].rank,
                                   ls_trace_digest_alg_name(ak), (unsigned)e[i].rank, ls_trace_digest_alg_name(ai),
                                   run->ranks[e[i].rank].trace_file, (long long)e[i].seq);
                continue;
            }
            ls_audit_rule_fail(rule, e[k].rank, rk->trace_file, e[k].seq,
                               "group %s gseq %lld (%s, purpose %s): rank %u's output digest %s:%015llx... differs "
                               "from rank %u's %s:%015llx... (%s seq %lld): the collective was logged but its output "
                               "is not the same on every member",
                               name_of(run->groups, run->n_groups, e[k].group), (long long)e[k].gseq,
                               ls_trace_op_name((ls_trace_op)e[k].op),
                               name_of(run->purposes, run->n_purposes, e[k].purpose), (unsigned)e[k].rank,
                               ls_trace_digest_alg_name(ak), (unsigned long long)ls_audit_digest8_hex15(e[k].out8),
                               (unsigned)e[i].rank, ls_trace_digest_alg_name(ai),
                               (unsigned long long)ls_audit_digest8_hex15(e[i].out8),
                               run->ranks[e[i].rank].trace_file, (long long)e[i].seq);
        }
        i = j;
    }
    free(e);
    if (overflow)
        ls_audit_rule_fail(rule, -1, NULL, -1,
                           "collectives beyond the flight recorder's cap were not compared (the rule does not guess)");
    uint64_t declared = 0;
    for (uint32_t r = 0; r < run->world; r++) declared += run->ranks[r].n_coll_declared;
    ls_audit_rule_close(rule);
    if (declared > 0 && rule->matched > 0) { /* the trainer's word beside what the emitter observed */
        if (rule->pass)
            snprintf(rule->message, sizeof rule->message,
                     "%llu checked (%llu of the %zu digest records declared by the trainer, note(): its word)",
                     (unsigned long long)rule->matched, (unsigned long long)declared, m);
        else
            snprintf(rule->message, sizeof rule->message,
                     "%llu failure(s) of %llu checked (%llu of the %zu digest records declared by the trainer, "
                     "note()): %s",
                     (unsigned long long)(rule->n_ev + rule->n_ev_dropped), (unsigned long long)rule->matched,
                     (unsigned long long)declared, m, rule->ev[0].detail);
    }
    return LS_OK;
}
