/* test_audit_p2p.c - point-to-point messages and output digests in the
 * audit (docs/contract.md §1): two-rank v2 runs (tests/support/test_v2_fixture.h)
 * with sends and recvs, each fault injected on its own: a matched,
 * digest-equal hand-off passes collectives.p2p; a send without its receive,
 * a receive without its send, receives in another order than the sends, a
 * gseq gap or repeat, differing digests, differing algorithms, a missing
 * in_digest or output digest, an in_digest_done, a peer outside the group,
 * the rank itself, beyond the world or none each fail it naming the rank and
 * seq; sends and recvs stay out of collectives.match; collectives.performed
 * reads out_digest (xxh3_128 and sha256) beside out_sha256 and says when the
 * algorithms differ; an event whose out_sha256 and out_digest disagree is
 * refused by the reader (trace.valid names the field); the timeline links a
 * send to its receive. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/load/timeline.h"
#include "receipts/format/json_util.h"
#include "tests/support/test_receipts_support.h"
#include "tests/support/test_v2_fixture.h"
#include "tests/audit/test_audit_support.h"

/* the shared rule look-ups (test_audit_support.c) under the names this file uses */
#define dump ls_test_audit_dump
#define rule ls_test_audit_rule
#define expect_pass ls_test_audit_expect_pass

#define D1 "xxh3_128:0123456789abcdef0123456789abcdef"
#define D2 "xxh3_128:00112233445566778899aabbccddeeff"
#define DX "xxh3_128:ffeeddccbbaa99887766554433221100"
#define H1 "abababababababababababababababababababababababababababababababab"
#define S1 "sha256:" H1
#define FIRST 5 /* the seq of the first extra event (the fixture's: phase_begin, layer_end, 3 collectives) */

LS_TEST_AUDIT_SCRATCH

/* The extra collective events of both ranks. */
typedef struct {
    char line[2][16][600];
    const char *ptr[2][17];
    int n[2];
} frags;

static void add(frags *f, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(frags *f, int rank, const char *fmt, ...) {
    cr_assert_lt(f->n[rank], 16);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->line[rank][f->n[rank]], sizeof f->line[0][0], fmt, ap);
    va_end(ap);
    f->ptr[rank][f->n[rank]] = f->line[rank][f->n[rank]];
    f->n[rank]++;
    f->ptr[rank][f->n[rank]] = NULL;
}

/* A send on group cp from rank `from` to peer `to`: the k-th of its channel
 * carries gseq k; in: its in_digest (NULL none); more: further fields. */
static void send_(frags *f, int from, int to, int gseq, const char *purpose, int layer, const char *in,
                  const char *more) {
    char d[120] = "";
    if (in) snprintf(d, sizeof d, ",\"in_digest\":\"%s\"", in);
    add(f, from,
        "\"group\":\"cp\",\"gseq\":%d,\"op\":\"send\",\"red\":\"none\",\"count\":4,\"dtype\":\"f32\",\"bytes\":16,"
        "\"purpose\":\"%s\",\"layer\":%d,\"step\":0%s,\"peer\":%d%s",
        gseq, purpose, layer, d, to, more ? more : "");
}

/* A recv on group cp at rank `at` from `from`; out: its out_digest (NULL none). */
static void recv_(frags *f, int at, int from, int gseq, const char *purpose, int layer, const char *out,
                  const char *more) {
    char d[120] = "";
    if (out) snprintf(d, sizeof d, ",\"out_digest\":\"%s\"", out);
    add(f, at,
        "\"group\":\"cp\",\"gseq\":%d,\"op\":\"recv\",\"red\":\"none\",\"count\":4,\"dtype\":\"f32\",\"bytes\":0,"
        "\"purpose\":\"%s\",\"layer\":%d,\"step\":0%s,\"peer\":%d%s",
        gseq, purpose, layer, d, from, more ? more : "");
}


/* The fixture with the extra events of f (NULL: none) audited. */
static ls_audit_run *audit_with(ls_v2_fixture *o, const frags *f) {
    if (f != NULL)
        for (int r = 0; r < 2; r++) o->extra[r] = f->n[r] ? f->ptr[r] : NULL;
    return ls_test_audit_fixture(run_dir, o, NULL);
}

/* The rule fails, and some evidence is about rank (its trace file) and seq
 * (-2: any) with every needle (NULL-terminated) in its detail. */
static void expect_fail(const ls_audit_run *run, const char *id, int64_t rank, int64_t seq, ...) {
    const ls_audit_rule *r = rule(run, id);
    bool found = false;
    for (size_t i = 0; i < r->n_ev && !found; i++) {
        const ls_audit_evidence *e = &r->ev[i];
        if (e->rank != rank || (seq != -2 && e->seq != seq)) continue;
        char want[64];
        snprintf(want, sizeof want, "rank-%04lld/events.jsonl", (long long)rank);
        if (strcmp(e->file, want) != 0) continue;
        bool all = true;
        va_list ap;
        va_start(ap, seq);
        for (const char *n = va_arg(ap, const char *); n != NULL; n = va_arg(ap, const char *))
            all = all && strstr(e->detail, n) != NULL;
        va_end(ap);
        found = all;
    }
    if (!found || r->pass || !r->applicable) dump(run);
    cr_assert(r->applicable && !r->pass, "%s: %s", id, r->message);
    cr_assert(found, "%s: no evidence on rank %lld seq %lld with the expected words", id, (long long)rank,
              (long long)seq);
}

/* Two channels, three messages, every receive holding what its send handed off. */
static void honest(frags *f) {
    send_(f, 0, 1, 0, "kv_a", 0, D1, NULL);      /* rank 0 seq 5 */
    send_(f, 0, 1, 1, "kv_b", 1, D2, NULL);      /* rank 0 seq 6 */
    recv_(f, 0, 1, 0, "grad_a", 0, S1, NULL);    /* rank 0 seq 7 */
    recv_(f, 1, 0, 0, "kv_a", 0, D1, NULL);      /* rank 1 seq 5 */
    send_(f, 1, 0, 0, "grad_a", 0, S1, NULL);    /* rank 1 seq 6 */
    recv_(f, 1, 0, 1, "kv_b", 1, D2, NULL);      /* rank 1 seq 7 */
}

Test(audit_p2p, matched_digest_equal_hand_off_passes, .init = setup, .fini = teardown) {
    frags f = {0};
    honest(&f);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    const ls_audit_rule *p = rule(run, "collectives.p2p");
    if (!p->pass) dump(run);
    cr_assert(p->applicable && p->pass, "%s", p->message);
    cr_assert_eq(p->level, 1);
    cr_assert_eq(p->matched, 6, "the six records examined");
    cr_assert(strstr(p->message, "3 message(s) paired over 2 channel(s)") != NULL, "%s", p->message);
    cr_assert_null(strstr(p->message, "declared"), "%s", p->message);
    static const char *const OK[] = {"trace.valid", "collectives.match", "collectives.performed", "sources.agree",
                                     NULL};
    for (size_t i = 0; OK[i]; i++) expect_pass(run, OK[i]);
    cr_assert_eq(run->ranks[0].n_p2p, 3);
    cr_assert_eq(run->ranks[0].n_coll, 3, "the flight recorder holds the group collectives only");
    cr_assert_eq(run->ranks[0].n_coll_total, 6);
    ls_audit_free(run);
}

/* A recv may state its output as out_sha256 (the audit reads either). */
Test(audit_p2p, recv_with_out_sha256_pairs_with_a_sha256_in_digest, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, S1, NULL);
    recv_(&f, 1, 0, 0, "kv_a", 0, NULL, ",\"out_sha256\":\"" H1 "\"");
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_pass(run, "collectives.p2p");
    ls_audit_free(run);
}

Test(audit_p2p, send_without_its_receive_fails, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, NULL);
    send_(&f, 0, 1, 1, "kv_b", 1, D2, NULL); /* rank 0 seq 6: never received */
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 0, FIRST + 1, "channel (group cp, rank 0 -> rank 1, tag 0)",
                "rank 0's send seq 6", "gseq 1", "purpose kv_b, layer 1", "a send without its receive",
                "holds 1 receive(s)", NULL);
    cr_assert(!run->level_holds[1], "a level-1 failure");
    expect_pass(run, "collectives.match"); /* not the flight recorder's to judge */
    ls_audit_free(run);
}

Test(audit_p2p, receive_without_its_send_fails, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, NULL);
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    recv_(&f, 1, 0, 1, "kv_b", 1, D2, NULL); /* rank 1 seq 6: nothing sent */
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 1, FIRST + 1, "rank 1's recv seq 6", "a receive without its send",
                "rank 0's trace holds 1 send(s)", NULL);
    ls_audit_free(run);
}

/* The receiver takes the messages in the other order: the pairs disagree in purpose and layer. */
Test(audit_p2p, receives_in_another_order_fail, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, NULL);
    send_(&f, 0, 1, 1, "kv_b", 1, D2, NULL);
    recv_(&f, 1, 0, 0, "kv_b", 1, D2, NULL);
    recv_(&f, 1, 0, 1, "kv_a", 0, D1, NULL);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 1, FIRST, "message 0", "rank 0's send seq 5", "rank 1's recv seq 5",
                "differ in purpose kv_a vs kv_b, layer 0 vs 1", NULL);
    expect_fail(run, "collectives.p2p", 1, FIRST + 1, "message 1", "purpose kv_b vs kv_a", NULL);
    ls_audit_free(run);
}

Test(audit_p2p, gseq_gap_or_repeat_fails, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, NULL);
    send_(&f, 0, 1, 2, "kv_b", 1, D2, NULL); /* gseq 1 skipped */
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    recv_(&f, 1, 0, 1, "kv_b", 1, D2, NULL);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 0, FIRST + 1, "rank 0's send seq 6", "has gseq 2 where 1 was expected",
                "a gap", "rank-0000/events.jsonl", NULL);
    ls_audit_free(run);
    frags g = {0};
    send_(&g, 0, 1, 0, "kv_a", 0, D1, NULL);
    send_(&g, 0, 1, 1, "kv_b", 1, D2, NULL);
    recv_(&g, 1, 0, 0, "kv_a", 0, D1, NULL);
    recv_(&g, 1, 0, 0, "kv_b", 1, D2, NULL); /* gseq 0 twice */
    ls_v2_fixture o2 = {0};
    run = audit_with(&o2, &g);
    expect_fail(run, "collectives.p2p", 1, FIRST + 1, "rank 1's recv seq 6", "has gseq 0 where 1 was expected",
                "a repeat", NULL);
    ls_audit_free(run);
}

Test(audit_p2p, differing_digests_fail, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 3, D1, NULL);
    recv_(&f, 1, 0, 0, "kv_a", 3, DX, NULL);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 1, FIRST, "channel (group cp, rank 0 -> rank 1, tag 0) message 0",
                "purpose kv_a, layer 3", "rank 0's in_digest xxh3_128:0123456789abcdef... (send seq 5)",
                "rank 1's output digest xxh3_128:ffeeddccbbaa9988... (recv seq 5)",
                "the receiver did not get what the sender handed off", NULL);
    ls_audit_free(run);
}

Test(audit_p2p, differing_algorithms_fail, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, NULL);
    recv_(&f, 1, 0, 0, "kv_a", 0, S1, NULL);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 1, FIRST, "the algorithms differ", "rank 0's in_digest is xxh3_128",
                "rank 1's output digest sha256", NULL);
    ls_audit_free(run);
}

/* Deny by default: a hand-off without both digests cannot be compared. */
Test(audit_p2p, missing_digests_fail, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, NULL, NULL);
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 0, FIRST, "rank 0's send seq 5 carries no in_digest",
                "cannot be compared (deny by default)", NULL);
    ls_audit_free(run);
    frags g = {0};
    send_(&g, 0, 1, 0, "kv_a", 0, D1, NULL);
    recv_(&g, 1, 0, 0, "kv_a", 0, NULL, NULL);
    ls_v2_fixture o2 = {0};
    run = audit_with(&o2, &g);
    expect_fail(run, "collectives.p2p", 1, FIRST, "rank 1's recv seq 5 carries no out_digest or out_sha256", NULL);
    ls_audit_free(run);
}

Test(audit_p2p, send_buffer_changed_before_completion_fails, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, ",\"in_digest_done\":\"" DX "\"");
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL); /* the receiver got what was handed off at issue */
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 0, FIRST,
                "rank 0 changed its send buffer between issuing the send and its completion",
                "the receiver got bytes the sender did not hand off at issue, or a stale state", NULL);
    ls_audit_free(run);
}

Test(audit_p2p, peer_outside_the_group_itself_or_beyond_the_world_fails, .init = setup, .fini = teardown) {
    /* group solo holds rank 0 only: rank 1 is no member of it */
    frags f = {0};
    add(&f, 0, "\"group\":\"solo\",\"gseq\":0,\"op\":\"send\",\"red\":\"none\",\"count\":4,\"dtype\":\"f32\","
               "\"bytes\":16,\"purpose\":\"kv_a\",\"in_digest\":\"" D1 "\",\"peer\":1");
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    ls_v2_fixture o = {.extra_group = "{\"name\":\"solo\",\"kind\":\"dp\",\"members\":[0]}"};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.p2p", 0, FIRST, "rank 0's send seq 5", "rank 1 is not a member of group solo",
                NULL);
    expect_fail(run, "collectives.p2p", 1, FIRST, "a receive without its send", NULL); /* cp's: nothing sent there */
    ls_audit_free(run);
    /* the rank itself, a rank beyond the world, none */
    frags g = {0};
    send_(&g, 0, 0, 0, "kv_a", 0, D1, NULL);
    send_(&g, 0, 5, 0, "kv_b", 0, D1, NULL);
    add(&g, 1, "\"group\":\"cp\",\"gseq\":0,\"op\":\"recv\",\"red\":\"none\",\"count\":4,\"dtype\":\"f32\","
               "\"bytes\":0,\"purpose\":\"kv_c\",\"out_digest\":\"" D1 "\"");
    ls_v2_fixture o2 = {0};
    run = audit_with(&o2, &g);
    expect_fail(run, "collectives.p2p", 0, FIRST, "rank 0's send seq 5", "names itself as its peer", NULL);
    expect_fail(run, "collectives.p2p", 0, FIRST + 1, "names peer 5, not a rank below world 2", NULL);
    expect_fail(run, "collectives.p2p", 1, FIRST, "rank 1's recv seq 5", "names no peer: it cannot be paired", NULL);
    ls_audit_free(run);
}

/* Sends and recvs are no group collectives: their gseq (the channel's) may
 * repeat the group's, and a one-sided message is collectives.p2p's, never
 * collectives.match's.  Before they were kept apart, the send at gseq 0 of
 * group cp beside the allreduce at gseq 0 failed match ("not increasing"). */
Test(audit_p2p, sends_and_recvs_do_not_disturb_collectives_match, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, NULL);
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    recv_(&f, 0, 1, 0, "grad_a", 0, D2, NULL);
    send_(&f, 1, 0, 0, "grad_a", 0, D2, NULL);
    ls_v2_fixture o = {.allreduce_only = true};
    ls_audit_run *run = audit_with(&o, &f);
    expect_pass(run, "collectives.match");
    expect_pass(run, "collectives.performed");
    expect_pass(run, "collectives.p2p");
    cr_assert_eq(rule(run, "collectives.match")->matched, 2, "the allreduce on both ranks, nothing else");
    ls_audit_free(run);
    frags g = {0}; /* a send nobody receives */
    send_(&g, 0, 1, 0, "kv_a", 0, D1, NULL);
    ls_v2_fixture o2 = {.allreduce_only = true};
    run = audit_with(&o2, &g);
    expect_pass(run, "collectives.match");
    expect_fail(run, "collectives.p2p", 0, 3, "a send without its receive", NULL);
    ls_audit_free(run);
}

/* An allreduce on group world, both ranks, with the given output fields. */
static void world_allreduce(frags *f, const char *out0, const char *out1) {
    add(f, 0, "\"group\":\"world\",\"gseq\":0,\"op\":\"allreduce\",\"red\":\"sum\",\"count\":2,\"dtype\":\"f32\","
              "\"bytes\":8,\"purpose\":\"grad_sum\",\"step\":0%s", out0);
    add(f, 1, "\"group\":\"world\",\"gseq\":0,\"op\":\"allreduce\",\"red\":\"sum\",\"count\":2,\"dtype\":\"f32\","
              "\"bytes\":8,\"purpose\":\"grad_sum\",\"step\":0%s", out1);
}

Test(audit_p2p, performed_reads_xxh3_out_digests, .init = setup, .fini = teardown) {
    frags f = {0};
    world_allreduce(&f, ",\"out_digest\":\"" D1 "\"", ",\"out_digest\":\"" D1 "\"");
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    const ls_audit_rule *p = rule(run, "collectives.performed");
    expect_pass(run, "collectives.performed");
    cr_assert_eq(p->matched, 3, "cp's allreduce and broadcast (out_sha256), world's allreduce (out_digest)");
    cr_assert_eq(run->ranks[1].coll[3].out8 >> 63, 1, "the algorithm bit: xxh3_128");
    ls_audit_free(run);
    frags g = {0};
    world_allreduce(&g, ",\"out_digest\":\"" D1 "\"", ",\"out_digest\":\"" DX "\"");
    ls_v2_fixture o2 = {0};
    run = audit_with(&o2, &g);
    expect_fail(run, "collectives.performed", 1, FIRST, "group world gseq 0 (allreduce, purpose grad_sum)",
                "rank 1's output digest xxh3_128:ffeeddccbbaa998...", "rank 0's xxh3_128:0123456789abcde...",
                "logged but its output is not the same on every member", NULL);
    ls_audit_free(run);
}

Test(audit_p2p, performed_says_when_the_algorithms_differ, .init = setup, .fini = teardown) {
    frags f = {0};
    world_allreduce(&f, ",\"out_digest\":\"" D1 "\"", ",\"out_sha256\":\"" H1 "\"");
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "collectives.performed", 1, FIRST, "rank 1's output digest is sha256, rank 0's xxh3_128",
                "the algorithms differ", NULL);
    const ls_audit_rule *p = rule(run, "collectives.performed");
    for (size_t i = 0; i < p->n_ev; i++) cr_assert_null(strstr(p->ev[i].detail, "logged but"), "%s", p->ev[i].detail);
    ls_audit_free(run);
    /* out_sha256 and out_digest stating one fact, and the same digest as out_digest alone on the other rank */
    frags g = {0};
    world_allreduce(&g, ",\"out_sha256\":\"" H1 "\",\"out_digest\":\"" S1 "\"", ",\"out_digest\":\"" S1 "\"");
    ls_v2_fixture o2 = {0};
    run = audit_with(&o2, &g);
    expect_pass(run, "trace.valid");
    expect_pass(run, "collectives.performed");
    ls_audit_free(run);
}

/* The reader refuses an event whose out_sha256 and out_digest disagree: trace.valid names the field. */
Test(audit_p2p, disagreeing_out_sha256_and_out_digest_are_refused, .init = setup, .fini = teardown) {
    frags f = {0};
    world_allreduce(&f, ",\"out_sha256\":\"" H1 "\"",
                    ",\"out_sha256\":\"" H1 "\",\"out_digest\":\"sha256:" "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
                    "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd\"");
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    expect_fail(run, "trace.valid", 1, -2, "collective.out_digest: differs from out_sha256", NULL);
    ls_audit_free(run);
}

/* The trainer's word (declared: true) is judged alike and counted. */
Test(audit_p2p, declared_records_are_counted, .init = setup, .fini = teardown) {
    frags f = {0};
    send_(&f, 0, 1, 0, "kv_a", 0, D1, ",\"declared\":true");
    recv_(&f, 1, 0, 0, "kv_a", 0, D1, NULL);
    world_allreduce(&f, ",\"out_digest\":\"" D1 "\",\"declared\":true", ",\"out_digest\":\"" D1 "\"");
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, &f);
    const ls_audit_rule *p = rule(run, "collectives.p2p");
    expect_pass(run, "collectives.p2p");
    cr_assert(strstr(p->message, "1 of the 2 records declared by the trainer") != NULL, "%s", p->message);
    p = rule(run, "collectives.performed");
    expect_pass(run, "collectives.performed");
    cr_assert(strstr(p->message, "1 of the 6 digest records declared by the trainer") != NULL, "%s", p->message);
    ls_audit_free(run);
    /* declared and wrong: judged like any other */
    frags g = {0};
    send_(&g, 0, 1, 0, "kv_a", 0, D1, ",\"declared\":true");
    recv_(&g, 1, 0, 0, "kv_a", 0, DX, ",\"declared\":true");
    ls_v2_fixture o2 = {0};
    run = audit_with(&o2, &g);
    expect_fail(run, "collectives.p2p", 1, FIRST, "the receiver did not get what the sender handed off", NULL);
    p = rule(run, "collectives.p2p");
    cr_assert(strstr(p->message, "2 of the 2 records declared by the trainer") != NULL, "%s", p->message);
    ls_audit_free(run);
}

Test(audit_p2p, without_sends_and_recvs_the_rule_is_not_applicable, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_with(&o, NULL);
    const ls_audit_rule *p = rule(run, "collectives.p2p");
    cr_assert(!p->applicable, "%s", p->message);
    cr_assert(strstr(p->message, "no rank's trace holds a send or recv") != NULL, "%s", p->message);
    ls_audit_free(run);
}

/* --timeline: a send's flow starts on the sender and ends on its receive (one id per channel and gseq);
 * a flow never joins two messages of different channels. */
Test(audit_p2p, timeline_links_each_send_to_its_receive, .init = setup, .fini = teardown) {
    frags f = {0};
    honest(&f);
    ls_v2_fixture o = {.extra = {f.ptr[0], f.ptr[1]}};
    ls_v2_fixture_write(run_dir, &o);
    char path[4200], err[400] = "";
    snprintf(path, sizeof path, "%s/timeline.json", tmp);
    cr_assert_eq(ls_audit_timeline_write(run_dir, path, err, sizeof err), 0, "%s", err);
    cJSON *doc = NULL;
    cr_assert_eq(ls_json_read_file(path, &doc, err, sizeof err), LS_OK, "%s", err);
    double start[2][8], end[2][8]; /* ids of the "s" and "f" flow events per rank */
    int ns[2] = {0, 0}, nf[2] = {0, 0};
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(x, "cat");
        if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "p2p") != 0) continue;
        int pid = cJSON_GetObjectItemCaseSensitive(x, "pid")->valueint;
        const char *ph = cJSON_GetObjectItemCaseSensitive(x, "ph")->valuestring;
        double id = cJSON_GetObjectItemCaseSensitive(x, "id")->valuedouble;
        cr_assert(pid == 0 || pid == 1, "pid %d", pid);
        if (strcmp(ph, "s") == 0 && ns[pid] < 8) start[pid][ns[pid]++] = id;
        else if (strcmp(ph, "f") == 0 && nf[pid] < 8) end[pid][nf[pid]++] = id;
        else cr_assert(0, "p2p flow event of phase %s", ph);
    }
    cJSON_Delete(doc);
    /* rank 0: sends kv_a, kv_b; receives grad_a.  rank 1: receives kv_a; sends grad_a; receives kv_b. */
    cr_assert(ns[0] == 2 && nf[0] == 1 && ns[1] == 1 && nf[1] == 2, "%d %d %d %d", ns[0], nf[0], ns[1], nf[1]);
    cr_assert_eq(start[0][0], end[1][0], "kv_a: 0 -> 1, gseq 0");
    cr_assert_eq(start[0][1], end[1][1], "kv_b: 0 -> 1, gseq 1");
    cr_assert_eq(start[1][0], end[0][0], "grad_a: 1 -> 0, gseq 0");
    cr_assert_neq(start[0][0], start[1][0], "the two channels' gseq 0 are different flows");
}
