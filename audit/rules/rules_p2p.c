/* rules_p2p.c - collectives.p2p (level 1, v2 runs only; docs/contract.md
 * §1): every send has its receive, in order, and the receiver got the bytes
 * the sender handed off.
 *
 * A v2 collective event of op send or recv is a point-to-point message of
 * its channel (group, sender, receiver, tag): the sender's k-th send to peer
 * P with tag T and P's k-th recv from the sender with tag T both carry gseq
 * k.  load_trace.c keeps each rank's sends and recvs in file order
 * (ls_audit_p2p, capped: beyond the cap the rule fails, it does not guess).
 * Per record: the peer is a rank below world, not the rank itself, and both
 * are members of the group (the trace headers' groups); a send whose event
 * carries in_digest_done changed its buffer before the send completed.  Per
 * channel: each side's gseq values run 0, 1, 2, ... in file order; the k-th
 * send and the k-th recv pair (an extra send is a send without its receive,
 * an extra recv a receive without its send); a pair agrees on count, dtype,
 * purpose, and on layer and step where both record them; and the sender's
 * in_digest equals the receiver's out_digest (or out_sha256): both present
 * (deny by default), of one algorithm, the same first 8 bytes.  Records the
 * trainer declared (declared: true, note()) are judged alike and counted in
 * the message.  Not applicable to one rank or a run without sends and
 * recvs, and says why. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHOWN 8 /* failures kept with their evidence; the rest counted */

/* One pairable record: a send or recv whose peer is valid. */
typedef struct {
    uint32_t rank;             /* whose trace holds it */
    uint32_t sender, receiver; /* the channel's ends */
    int64_t tag;
    uint16_t group;
    uint8_t side;              /* 0 send, 1 recv */
    size_t k;                  /* its index in the rank's list: file order */
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->sender != y->sender) return x->sender < y->sender ? -1 : 1;
    if (x->receiver != y->receiver) return x->receiver < y->receiver ? -1 : 1;
    if (x->tag != y->tag) return x->tag < y->tag ? -1 : 1;
    if (x->side != y->side) return x->side < y->side ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

typedef struct {
    ls_audit_run *run;
    ls_audit_rule *rule;
    uint64_t failures;
    char first[320]; /* the first failure's detail */
    int8_t *member;  /* [group * world + rank]: -1 not looked up yet, else ls_audit_group_member's answer */
} ctx;

/* Whether rank r is a member of group g (the trace headers'), looked up once per (group, rank). */
static bool member_of(ctx *c, uint16_t g, uint32_t r) {
    int8_t *m = &c->member[(size_t)g * c->run->world + r];
    if (*m < 0) *m = ls_audit_group_member(c->run, c->run->groups[g], r) ? 1 : 0;
    return *m == 1;
}

static void failf(ctx *c, uint32_t rank, int64_t seq, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void failf(ctx *c, uint32_t rank, int64_t seq, const char *fmt, ...) {
    char buf[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->failures++ == 0) snprintf(c->first, sizeof c->first, "%s", buf);
    if (c->failures <= SHOWN) ls_audit_rule_fail(c->rule, rank, c->run->ranks[rank].trace_file, seq, "%s", buf);
}

static const char *name_of(char *const *tab, size_t n, uint16_t i) { return i < n ? tab[i] : "?"; }

static const ls_audit_p2p *rec_of(const ls_audit_run *run, const entry *e) { return &run->ranks[e->rank].p2p[e->k]; }

static const char *op_word(const ls_audit_p2p *p) { return p->op == LS_TRACE_OP_SEND ? "send" : "recv"; }

/* "purpose P, layer L, step S" of a record (layer and step where recorded). */
static void what(const ls_audit_run *run, const ls_audit_p2p *p, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "purpose %s", name_of(run->purposes, run->n_purposes, p->purpose));
    if (n > 0 && (size_t)n < cap && (p->flags & LS_AUDIT_P2P_LAYER))
        n += snprintf(buf + n, cap - (size_t)n, ", layer %lld", (long long)p->layer);
    if (n > 0 && (size_t)n < cap && (p->flags & LS_AUDIT_P2P_STEP))
        snprintf(buf + n, cap - (size_t)n, ", step %lld", (long long)p->step);
}

/* "channel (group G, rank S -> rank R, tag T)" */
static void channel(const ls_audit_run *run, const entry *e, char *buf, size_t cap) {
    snprintf(buf, cap, "channel (group %s, rank %u -> rank %u, tag %lld)",
             name_of(run->groups, run->n_groups, e->group), (unsigned)e->sender, (unsigned)e->receiver,
             (long long)e->tag);
}

/* Whether record p of rank r can be paired: its peer a rank below world, not
 * r, both members of the group; each fault is a failure.  Also a send whose
 * buffer changed before it completed. */
static bool check_record(ctx *c, uint32_t r, const ls_audit_p2p *p) {
    const ls_audit_run *run = c->run;
    const char *g = name_of(run->groups, run->n_groups, p->group);
    char w[160];
    what(run, p, w, sizeof w);
    if ((p->flags & LS_AUDIT_P2P_CHANGED) && p->op == LS_TRACE_OP_SEND)
        failf(c, r, p->seq,
              "rank %u changed its send buffer between issuing the send and its completion: the receiver got bytes "
              "the sender did not hand off at issue, or a stale state (send seq %lld to rank %lld, group %s, tag "
              "%lld, gseq %lld, %s: in_digest_done differs from in_digest)",
              (unsigned)r, (long long)p->seq, (long long)p->peer, g, (long long)p->tag, (long long)p->gseq, w);
    if (p->peer < 0) {
        failf(c, r, p->seq, "rank %u's %s seq %lld (group %s, gseq %lld, %s) names no peer: it cannot be paired",
              (unsigned)r, op_word(p), (long long)p->seq, g, (long long)p->gseq, w);
        return false;
    }
    if (p->peer >= (int64_t)run->world) {
        failf(c, r, p->seq, "rank %u's %s seq %lld (group %s, %s) names peer %lld, not a rank below world %u",
              (unsigned)r, op_word(p), (long long)p->seq, g, w, (long long)p->peer, (unsigned)run->world);
        return false;
    }
    if (p->peer == (int64_t)r) {
        failf(c, r, p->seq, "rank %u's %s seq %lld (group %s, %s) names itself as its peer", (unsigned)r, op_word(p),
              (long long)p->seq, g, w);
        return false;
    }
    bool self = member_of(c, p->group, r), peer = member_of(c, p->group, (uint32_t)p->peer);
    if (!self || !peer) {
        failf(c, r, p->seq, "rank %u's %s seq %lld (%s): rank %lld is not a member of group %s (the trace headers' "
              "groups)", (unsigned)r, op_word(p), (long long)p->seq, w, !self ? (long long)r : (long long)p->peer, g);
        return false;
    }
    return true;
}

/* One side of a channel, e[0..n) in file order: gseq 0, 1, 2, ...; each
 * gap or repeat is a failure. */
static void check_gseq(ctx *c, const entry *e, size_t n) {
    int64_t expect = 0;
    for (size_t i = 0; i < n; i++) {
        const ls_audit_p2p *p = rec_of(c->run, &e[i]);
        if (p->gseq != expect) {
            char ch[160];
            channel(c->run, &e[i], ch, sizeof ch);
            if (p->gseq > expect)
                failf(c, e[i].rank, p->seq,
                      "%s: rank %u's %s seq %lld (%s) has gseq %lld where %lld was expected: a gap (message(s) "
                      "%lld..%lld of the channel missing from %s)",
                      ch, (unsigned)e[i].rank, op_word(p), (long long)p->seq,
                      name_of(c->run->purposes, c->run->n_purposes, p->purpose), (long long)p->gseq,
                      (long long)expect, (long long)expect, (long long)p->gseq - 1, c->run->ranks[e[i].rank].trace_file);
            else
                failf(c, e[i].rank, p->seq,
                      "%s: rank %u's %s seq %lld (%s) has gseq %lld where %lld was expected: a repeat or out of "
                      "order (%s)",
                      ch, (unsigned)e[i].rank, op_word(p), (long long)p->seq,
                      name_of(c->run->purposes, c->run->n_purposes, p->purpose), (long long)p->gseq,
                      (long long)expect, c->run->ranks[e[i].rank].trace_file);
        }
        expect = p->gseq + 1;
    }
}

/* Appends ", " (after the first) and the formatted item to buf[cap] at *n. */
static void add_diff(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add_diff(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n + 2 >= cap) return;
    if (*n > 0) *n += (size_t)snprintf(buf + *n, cap - *n, ", ");
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0) *n += (size_t)k;
    if (*n >= cap) *n = cap - 1;
}

static const char *alg_of(uint8_t flags, uint8_t xxh3_bit) {
    return ls_trace_digest_alg_name((flags & xxh3_bit) ? LS_TRACE_DIGEST_XXH3_128 : LS_TRACE_DIGEST_SHA256);
}

/* The k-th send s and the k-th recv v of a channel. */
static void check_pair(ctx *c, const entry *es, const entry *ev) {
    const ls_audit_run *run = c->run;
    const ls_audit_p2p *s = rec_of(run, es), *v = rec_of(run, ev);
    char ch[160], ws[160], wv[160], diff[200] = "";
    channel(run, es, ch, sizeof ch);
    what(run, s, ws, sizeof ws);
    what(run, v, wv, sizeof wv);
    size_t n = 0;
    if (s->purpose != v->purpose)
        add_diff(diff, sizeof diff, &n, "purpose %s vs %s", name_of(run->purposes, run->n_purposes, s->purpose),
                 name_of(run->purposes, run->n_purposes, v->purpose));
    if (s->count != v->count) add_diff(diff, sizeof diff, &n, "count %lld vs %lld", (long long)s->count, (long long)v->count);
    if (s->dtype != v->dtype)
        add_diff(diff, sizeof diff, &n, "dtype %s vs %s", ls_trace_dtype_name((ls_trace_dtype)s->dtype),
                 ls_trace_dtype_name((ls_trace_dtype)v->dtype));
    if ((s->flags & v->flags & LS_AUDIT_P2P_LAYER) && s->layer != v->layer)
        add_diff(diff, sizeof diff, &n, "layer %lld vs %lld", (long long)s->layer, (long long)v->layer);
    if ((s->flags & v->flags & LS_AUDIT_P2P_STEP) && s->step != v->step)
        add_diff(diff, sizeof diff, &n, "step %lld vs %lld", (long long)s->step, (long long)v->step);
    if (n > 0) {
        failf(c, ev->rank, v->seq,
              "%s message %lld: rank %u's send seq %lld (%s) and rank %u's recv seq %lld (%s) differ in %s: the "
              "receives do not follow the sends",
              ch, (long long)s->gseq, (unsigned)es->rank, (long long)s->seq, ws, (unsigned)ev->rank,
              (long long)v->seq, wv, diff);
        return;
    }
    bool in = (s->flags & LS_AUDIT_P2P_IN) != 0, out = (v->flags & LS_AUDIT_P2P_OUT) != 0;
    if (!in || !out) { /* deny by default: a hand-off without both digests proves nothing */
        char msg[320];
        int m = snprintf(msg, sizeof msg, "%s message %lld (%s): ", ch, (long long)s->gseq, ws);
        if (m > 0 && (size_t)m < sizeof msg && !in)
            m += snprintf(msg + m, sizeof msg - (size_t)m, "rank %u's send seq %lld carries no in_digest%s",
                          (unsigned)es->rank, (long long)s->seq, out ? "" : "; ");
        if (m > 0 && (size_t)m < sizeof msg && !out)
            m += snprintf(msg + m, sizeof msg - (size_t)m, "rank %u's recv seq %lld carries no out_digest or out_sha256",
                          (unsigned)ev->rank, (long long)v->seq);
        if (m > 0 && (size_t)m < sizeof msg)
            snprintf(msg + m, sizeof msg - (size_t)m, ": the hand-off cannot be compared (deny by default)");
        failf(c, in ? ev->rank : es->rank, in ? v->seq : s->seq, "%s", msg);
        return;
    }
    bool sx = (s->flags & LS_AUDIT_P2P_IN_XXH3) != 0, vx = (v->flags & LS_AUDIT_P2P_OUT_XXH3) != 0;
    if (sx != vx) {
        failf(c, ev->rank, v->seq,
              "%s message %lld (%s): the algorithms differ: rank %u's in_digest is %s (send seq %lld), rank %u's "
              "output digest %s (recv seq %lld): the hand-off cannot be compared",
              ch, (long long)s->gseq, ws, (unsigned)es->rank, alg_of(s->flags, LS_AUDIT_P2P_IN_XXH3),
              (long long)s->seq, (unsigned)ev->rank, alg_of(v->flags, LS_AUDIT_P2P_OUT_XXH3), (long long)v->seq);
        return;
    }
    if (s->in8 != v->out8)
        failf(c, ev->rank, v->seq,
              "%s message %lld (%s): rank %u's in_digest %s:%016llx... (send seq %lld) differs from rank %u's output "
              "digest %s:%016llx... (recv seq %lld): the receiver did not get what the sender handed off",
              ch, (long long)s->gseq, ws, (unsigned)es->rank, alg_of(s->flags, LS_AUDIT_P2P_IN_XXH3),
              (unsigned long long)s->in8, (long long)s->seq, (unsigned)ev->rank,
              alg_of(v->flags, LS_AUDIT_P2P_OUT_XXH3), (unsigned long long)v->out8, (long long)v->seq);
}

ls_status ls_audit_rules_p2p(ls_audit_run *run) {
    if (run->evidence_version != 2) return LS_OK; /* a v1 trace has no send or recv: the rule is v2's */
    uint64_t total = 0, kept = 0, declared = 0;
    for (uint32_t r = 0; r < run->world; r++) {
        total += run->ranks[r].n_p2p_total;
        kept += run->ranks[r].n_p2p;
        for (size_t k = 0; k < run->ranks[r].n_p2p; k++)
            declared += (run->ranks[r].p2p[k].flags & LS_AUDIT_P2P_DECLARED) != 0;
    }
    bool applicable = run->world > 1 && total > 0;
    ls_audit_rule *rule = ls_audit_rule_add(run, "collectives.p2p", 1,
                                            "every send has its receive, in order, and the receiver got the bytes the "
                                            "sender handed off (in_digest = out_digest)",
                                            applicable);
    if (rule == NULL) return LS_ERR_NOMEM;
    if (!applicable) {
        if (run->world <= 1 && total > 0)
            snprintf(rule->message, sizeof rule->message,
                     "not applicable: one rank, no peer to pair its %llu send/recv record(s) with (sources.agree: no "
                     "collective in a one-rank run)", (unsigned long long)total);
        else if (run->world <= 1)
            snprintf(rule->message, sizeof rule->message, "not applicable: one rank, no point-to-point message to pair");
        else
            snprintf(rule->message, sizeof rule->message,
                     "not applicable: no rank's trace holds a send or recv: no point-to-point message to pair");
        ls_audit_rule_close(rule);
        return LS_OK;
    }
    ctx c = {.run = run, .rule = rule};
    entry *e = malloc((kept ? kept : 1) * sizeof *e);
    c.member = malloc((run->n_groups ? run->n_groups : 1) * (size_t)run->world);
    if (e == NULL || c.member == NULL) {
        free(e);
        free(c.member);
        return LS_ERR_NOMEM;
    }
    memset(c.member, -1, (run->n_groups ? run->n_groups : 1) * (size_t)run->world);
    size_t m = 0;
    for (uint32_t r = 0; r < run->world; r++) {
        const ls_audit_rank *rk = &run->ranks[r];
        if (rk->n_p2p_total > rk->n_p2p)
            failf(&c, r, -1, "rank %u: %llu send/recv record(s) beyond the %zu kept were not paired (the rule does "
                  "not guess)", (unsigned)r, (unsigned long long)(rk->n_p2p_total - rk->n_p2p), rk->n_p2p);
        for (size_t k = 0; k < rk->n_p2p; k++) {
            const ls_audit_p2p *p = &rk->p2p[k];
            if (!check_record(&c, r, p)) continue;
            bool send = p->op == LS_TRACE_OP_SEND;
            e[m++] = (entry){.rank = r, .sender = send ? r : (uint32_t)p->peer, .receiver = send ? (uint32_t)p->peer : r,
                             .tag = p->tag, .group = p->group, .side = send ? 0 : 1, .k = k};
        }
    }
    qsort(e, m, sizeof *e, cmp_entry);
    uint64_t channels = 0, pairs = 0;
    for (size_t i = 0; i < m;) {
        size_t j = i;
        while (j < m && e[j].group == e[i].group && e[j].sender == e[i].sender && e[j].receiver == e[i].receiver &&
               e[j].tag == e[i].tag)
            j++;
        channels++;
        size_t ns = i; /* sends e[i..ns), recvs e[ns..j) */
        while (ns < j && e[ns].side == 0) ns++;
        size_t n = ns - i, nr = j - ns;
        check_gseq(&c, e + i, n);
        check_gseq(&c, e + ns, nr);
        char ch[160], w[160];
        channel(run, &e[i], ch, sizeof ch);
        for (size_t k = 0; k < n || k < nr; k++) {
            if (k < n && k < nr) {
                pairs++;
                check_pair(&c, &e[i + k], &e[ns + k]);
            } else if (k < n) {
                const ls_audit_p2p *s = rec_of(run, &e[i + k]);
                what(run, s, w, sizeof w);
                failf(&c, e[i + k].rank, s->seq,
                      "%s: rank %u's send seq %lld (gseq %lld, %s) is a send without its receive (rank %u's trace "
                      "holds %zu receive(s) on this channel, %zu send(s) were issued)",
                      ch, (unsigned)e[i + k].rank, (long long)s->seq, (long long)s->gseq, w, (unsigned)e[i].receiver,
                      nr, n);
            } else {
                const ls_audit_p2p *v = rec_of(run, &e[ns + k]);
                what(run, v, w, sizeof w);
                failf(&c, e[ns + k].rank, v->seq,
                      "%s: rank %u's recv seq %lld (gseq %lld, %s) is a receive without its send (rank %u's trace "
                      "holds %zu send(s) on this channel, %zu receive(s) were completed)",
                      ch, (unsigned)e[ns + k].rank, (long long)v->seq, (long long)v->gseq, w, (unsigned)e[i].sender,
                      n, nr);
            }
        }
        i = j;
    }
    free(e);
    free(c.member);
    if (c.failures > SHOWN)
        ls_audit_rule_fail(rule, -1, ".", -1, "%llu point-to-point failures in all", (unsigned long long)c.failures);
    rule->matched = kept; /* the records examined (a refused one among them: its failure says why) */
    ls_audit_rule_close(rule);
    char dec[96] = "";
    if (declared > 0)
        snprintf(dec, sizeof dec, "; %llu of the %llu records declared by the trainer (note(): its word)",
                 (unsigned long long)declared, (unsigned long long)kept);
    if (c.failures == 0 && rule->pass)
        snprintf(rule->message, sizeof rule->message,
                 "%llu message(s) paired over %llu channel(s), every receive holding what its send handed off%s",
                 (unsigned long long)pairs, (unsigned long long)channels, dec);
    else if (c.failures > 0)
        snprintf(rule->message, sizeof rule->message, "%llu failure(s) of %llu checked%s: %s",
                 (unsigned long long)c.failures, (unsigned long long)rule->matched, dec, c.first);
    return LS_OK;
}
