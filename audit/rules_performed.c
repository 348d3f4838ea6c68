/* rules_performed.c - collectives.performed (level 1, v2 runs only;
 * docs/contract.md §1): an allreduce, broadcast or allgather leaves every
 * member of its group holding the same output, so the ranks' out_sha256 of
 * one (group, gseq) must agree.  A reduction that was logged but never
 * performed leaves the buffers different.  The flight recorder keeps the
 * first 8 bytes of each digest (ls_audit_coll.out8); a collective without a
 * digest is not compared, and a run without any is not_applicable, saying
 * so (the rule never passes on absence). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/audit.h"

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

static const char *name_of(char *const *tab, size_t n, uint16_t i) { return i < n ? tab[i] : "?"; }

ls_status ls_audit_rules_performed(ls_audit_run *run) {
    if (run->evidence_version != 2) return LS_OK; /* v1 reports stay as they were */
    size_t n = 0;
    bool overflow = false;
    for (uint32_t r = 0; r < run->world; r++) {
        const ls_audit_rank *rk = &run->ranks[r];
        overflow |= rk->n_coll_total > rk->n_coll && run->world > 1;
        for (size_t k = 0; k < rk->n_coll; k++) n += rk->coll[k].out8 != 0 && replicating(rk->coll[k].op);
    }
    ls_audit_rule *rule = ls_audit_rule_add(run, "collectives.performed", 1,
                                            "every member of a group holds the same output of each allreduce, "
                                            "broadcast and allgather (out_sha256)",
                                            n > 0);
    if (rule == NULL) return LS_ERR_NOMEM;
    if (n == 0) {
        snprintf(rule->message, sizeof rule->message,
                 run->world > 1 ? "no allreduce, broadcast or allgather carries out_sha256: nothing to compare "
                                  "(not applicable; it never passes on their absence)"
                                : "one rank: no group output to compare (not applicable)");
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
    for (size_t i = 0; i < m;) {
        size_t j = i + 1;
        while (j < m && e[j].group == e[i].group && e[j].gseq == e[i].gseq) j++;
        /* e[i] is the lowest rank's record: the reference */
        if (j - i >= 2) rule->matched++;
        for (size_t k = i + 1; k < j; k++) {
            if (e[k].out8 == e[i].out8) continue;
            const ls_audit_rank *rk = &run->ranks[e[k].rank];
            ls_audit_rule_fail(rule, e[k].rank, rk->trace_file, e[k].seq,
                               "group %s gseq %lld (%s, purpose %s): rank %u's out_sha256 %016llx... differs from "
                               "rank %u's %016llx... (%s seq %lld): the collective was logged but its output is "
                               "not the same on every member",
                               name_of(run->groups, run->n_groups, e[k].group), (long long)e[k].gseq,
                               ls_trace_op_name((ls_trace_op)e[k].op),
                               name_of(run->purposes, run->n_purposes, e[k].purpose), (unsigned)e[k].rank,
                               (unsigned long long)e[k].out8, (unsigned)e[i].rank, (unsigned long long)e[i].out8,
                               run->ranks[e[i].rank].trace_file, (long long)e[i].seq);
        }
        i = j;
    }
    free(e);
    if (overflow)
        ls_audit_rule_fail(rule, -1, NULL, -1,
                           "collectives beyond the flight recorder's cap were not compared (the rule does not guess)");
    ls_audit_rule_close(rule);
    return LS_OK;
}
