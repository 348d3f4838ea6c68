/* test_audit_v2.c - the audit on hand-written v2 runs (docs/contract.md
 * §1-2): a correct CP-2 run loads with its profile and build identity and
 * passes the reader-level rules and collectives.performed; a logged but not
 * performed allreduce (differing out_sha256) fails it naming ranks, file
 * and seq; deny by default: without digests it fails, because torch-cp's
 * profile says its runs record them (records), and reads not applicable
 * only under a profile that leaves them out; memory events and the
 * receipts' digest-disagreement counts likewise; a tampered build identity
 * and an unknown phase fail their rules naming them; a v1 run does not
 * list collectives.performed (a v1 trace has no out_sha256). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "receipts/format/build_info.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "tests/support/test_receipts_support.h"
#include "tests/support/test_v2_fixture.h"
#include "tests/audit/test_audit_support.h"

/* the shared rule look-ups (test_audit_support.c) under the names this file uses */
#define dump ls_test_audit_dump
#define rule ls_test_audit_rule
#define expect_pass ls_test_audit_expect_pass

LS_TEST_AUDIT_SCRATCH

/* The fixture audited against the profiles of dir (NULL: the shipped ones). */
static ls_audit_run *audit_in(const ls_v2_fixture *o, const char *dir) { return ls_test_audit_fixture(run_dir, o, dir); }

/* tmp/profiles/ holding the shipped profiles, torch-cp.json's "records" replaced by the n kinds given (n 0:
 * none, the field left out); returns its path. */
static const char *profiles_recording(const char *const *kinds, int n) {
    static char dir[4200];
    char cmd[8600], err[300], p[4300];
    snprintf(dir, sizeof dir, "%s/profiles", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp " LS_SOURCE_DIR "/profiles/*.json '%s'/", dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/torch-cp.json", dir);
    cJSON *doc = NULL;
    cr_assert_eq(ls_json_read_file(p, &doc, err, sizeof err), LS_OK, "%s", err);
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "records");
    if (n > 0) cJSON_AddItemToObject(doc, "records", cJSON_CreateStringArray(kinds, n));
    cr_assert_eq(ls_json_write_file(p, doc, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(doc);
    return dir;
}

static ls_audit_run *audit(const ls_v2_fixture *o) { return audit_in(o, NULL); }

Test(audit_v2, correct_run_loads_and_passes_reader_rules, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit(&o);
    cr_assert_eq(run->evidence_version, 2);
    cr_assert_str_eq(run->profile_name, "torch-cp");
    cr_assert_eq(strlen(run->profile_sha256), 64);
    cr_assert_str_eq(run->build_digest, LS_V2_FIXTURE_BUILD_DIGEST);
    cr_assert_eq(run->world, 2);
    cr_assert_str_eq(run->ranks[1].trace_file, "rank-0001/events.jsonl");
    cr_assert_eq(run->ranks[0].report.version, 2);
    cr_assert_str_eq(ls_trace_report_group_kind(&run->ranks[0].report, "cp"), "cp");
    const ls_audit_rule *p = rule(run, "collectives.performed");
    cr_assert(p->applicable && p->pass, "%s", p->message);
    cr_assert_eq(p->matched, 2); /* the allreduce and the broadcast; the all_to_all carries none */
    cr_assert_eq(p->level, 1);
    static const char *const READER_RULES[] = {"manifest.valid",  "manifest.digests", "receipts.valid",
                                               "receipts.agree",  "build.digest_equal", "trace.valid",
                                               "rank.complete",   "rank.no_error",    "collectives.match",
                                               "sources.agree",   NULL};
    for (size_t i = 0; READER_RULES[i]; i++) expect_pass(run, READER_RULES[i]);
    ls_audit_free(run);
}

/* A v2 receipt has no memory figures: the trace's memory events are held to
 * their own categories; a run without any reported nothing about memory. */
Test(audit_v2, memory_accounting_holds_consistent_events, .init = setup, .fini = teardown) {
    ls_v2_fixture ok = {0};
    ls_audit_run *run = audit(&ok);
    expect_pass(run, "memory.accounting");
    ls_audit_free(run);
}

Test(audit_v2, memory_accounting_fails_an_inconsistent_event, .init = setup, .fini = teardown) {
    ls_v2_fixture bad = {.bad_memory = true};
    ls_audit_run *run = audit(&bad);
    const ls_audit_rule *m = rule(run, "memory.accounting");
    cr_assert(m->applicable && !m->pass, "%s", m->message);
    cr_assert_eq(m->ev[0].rank, 1);
    ls_audit_free(run);
}

/* torch-cp's profile does not say its runs record memory events: a run without any reads not applicable;
 * under a profile whose records name memory, the same run fails, naming each rank. */
Test(audit_v2, memory_accounting_without_memory_events_is_not_applicable, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.no_memory = true};
    ls_audit_run *run = audit_in(&o, NULL);
    const ls_audit_rule *m = rule(run, "memory.accounting");
    cr_assert(!m->applicable, "%s", m->message);
    cr_assert(strstr(m->message, "no memory event") && strstr(m->message, "profile torch-cp"), "%s", m->message);
    ls_audit_free(run);
    static const char *const MEM[] = {"memory", "out_sha256", "grad_digest_disagreements"};
    run = audit_in(&o, profiles_recording(MEM, 3));
    m = rule(run, "memory.accounting");
    cr_assert(m->applicable && !m->pass, "%s", m->message);
    cr_assert_eq(m->n_ev, 2);
    cr_assert(m->ev[0].rank == 0 && strstr(m->ev[0].detail, "rank 0's trace holds no memory event"), "%s",
              m->ev[0].detail);
    cr_assert_eq(m->ev[1].rank, 1);
    ls_audit_free(run);
    /* and a run with its memory events passes under it */
    ls_v2_fixture ok = {0};
    run = audit_in(&ok, profiles_recording(MEM, 3));
    expect_pass(run, "memory.accounting");
    ls_audit_free(run);
}

Test(audit_v2, logged_but_not_performed_allreduce_fails, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.differ_out = true};
    ls_audit_run *run = audit(&o);
    const ls_audit_rule *p = rule(run, "collectives.performed");
    cr_assert(p->applicable && !p->pass, "%s", p->message);
    cr_assert_eq(p->n_ev, 1);
    cr_assert_eq(p->ev[0].rank, 1);
    cr_assert_eq(p->ev[0].seq, 2);
    cr_assert_str_eq(p->ev[0].file, "rank-0001/events.jsonl");
    cr_assert(strstr(p->ev[0].detail, "group cp gseq 0") && strstr(p->ev[0].detail, "allreduce") &&
                  strstr(p->ev[0].detail, "rank 1's output digest sha256:bbbbbbbbbbbbbbb...") &&
                  strstr(p->ev[0].detail, "rank 0's sha256:aaaaaaaaaaaaaaa..."),
              "%s", p->ev[0].detail);
    cr_assert_lt(run->level, 1, "a level-1 failure leaves level 0");
    cr_assert(!run->level_holds[1]);
    ls_audit_free(run);
}

/* Deny by default: torch-cp's profile says its runs record out_sha256, so a run whose collectives carry none
 * fails collectives.performed at level 1; only a profile that leaves the digests out makes it not
 * applicable.  A record without a digest beside another rank's with one fails whatever the profile. */
Test(audit_v2, without_digests_the_rule_fails_unless_the_profile_leaves_them_out, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.no_digests = true};
    ls_audit_run *run = audit_in(&o, NULL);
    const ls_audit_rule *p = rule(run, "collectives.performed");
    cr_assert(p->applicable && !p->pass, "%s", p->message);
    cr_assert(strstr(p->ev[0].detail, "carries an output digest (out_sha256 or out_digest), which its profile says "
                                      "its runs record") != NULL, "%s",
              p->ev[0].detail);
    cr_assert(!run->level_holds[1]);
    ls_audit_free(run);
    run = audit_in(&o, profiles_recording(NULL, 0));
    p = rule(run, "collectives.performed");
    cr_assert(!p->applicable, "%s", p->message);
    cr_assert(strstr(p->message, "carries out_sha256") && strstr(p->message, "does not say its runs record them"),
              "%s", p->message);
    ls_audit_free(run);
    /* one rank's digest dropped (rank 1's first allreduce, seq 2): named, under either profile */
    ls_v2_fixture ok = {0};
    for (int k = 0; k < 2; k++) {
        teardown(); /* a fresh directory for the fixture */
        setup();
        ls_v2_fixture_write(run_dir, &ok);
        char path[4200];
        snprintf(path, sizeof path, "%s/rank-0001/events.jsonl", run_dir);
        char cmd[8600];
        snprintf(cmd, sizeof cmd, "python3 -c \"import json,sys; p=sys.argv[1]; L=open(p).read().splitlines(); "
                 "e=[json.loads(l) for l in L]; i=[k for k,x in enumerate(e) if x.get('ev')=='collective' and "
                 "x.get('op')=='allreduce'][0]; e[i].pop('out_sha256'); "
                 "open(p,'w').write(''.join(json.dumps(x,separators=(',',':'))+chr(10) for x in e))\" '%s'", path);
        cr_assert_eq(system(cmd), 0);
        run = ls_test_audit_load(run_dir, k ? profiles_recording(NULL, 0) : NULL);
        p = rule(run, "collectives.performed");
        bool named = false;
        for (size_t i = 0; i < p->n_ev; i++)
            named |= p->ev[i].rank == 1 && strstr(p->ev[i].detail, "rank 1's record carries no out_sha256") != NULL;
        if (!named) dump(run);
        cr_assert(p->applicable && !p->pass && named, "%s", p->message);
        ls_audit_free(run);
    }
}

/* digests.receipts: torch-cp's profile says its runs' receipts count digest disagreements; the fixture's
 * receipts carry no rank_state: each fails, naming the receipt; under a profile that leaves the count out
 * the rule reads not applicable. */
Test(audit_v2, receipts_without_the_count_fail_unless_the_profile_leaves_it_out, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_audit_run *run = audit_in(&o, NULL);
    const ls_audit_rule *d = rule(run, "digests.receipts");
    cr_assert(d->applicable && !d->pass, "%s", d->message);
    cr_assert_eq(d->n_ev, 2);
    cr_assert_str_eq(d->ev[1].file, "rank-0001/receipt.json");
    cr_assert(strstr(d->ev[1].detail, "no rank_state") != NULL, "%s", d->ev[1].detail);
    ls_audit_free(run);
    run = audit_in(&o, profiles_recording(NULL, 0));
    d = rule(run, "digests.receipts");
    cr_assert(!d->applicable, "%s", d->message);
    cr_assert(strstr(d->message, "does not say its runs count them") != NULL, "%s", d->message);
    ls_audit_free(run);
}

Test(audit_v2, tampered_build_identity_fails, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.tamper_build = true};
    ls_audit_run *run = audit(&o);
    const ls_audit_rule *r = rule(run, "receipts.valid");
    cr_assert(!r->pass);
    cr_assert(strstr(r->ev[0].detail, "build_digest") != NULL, "%s", r->ev[0].detail);
    r = rule(run, "manifest.valid");
    cr_assert(!r->pass);
    cr_assert(!run->level_holds[1]);
    ls_audit_free(run);
}

Test(audit_v2, unknown_phase_fails_naming_it, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.bad_phase = "warmup"};
    ls_audit_run *run = audit(&o);
    const ls_audit_rule *r = rule(run, "trace.valid");
    cr_assert(!r->pass);
    bool named = false;
    for (size_t i = 0; i < r->n_ev; i++)
        named |= r->ev[i].rank == 0 && strstr(r->ev[i].detail, "\"warmup\" is not one of the header's phases") != NULL;
    if (!named) dump(run);
    cr_assert(named);
    ls_audit_free(run);
}

/* A v1 trace: collectives.performed is not listed (a v1 trace has no out_sha256); a crashed v1 run that left
 * no manifest or receipt names no profile: profile.match fails (not pinned), and the reports say which
 * profile it was judged by, inferred from its traces. */
Test(audit_v2, v1_run_does_not_list_collectives_performed, .init = setup, .fini = teardown) {
    char p[4200];
    cr_assert_eq(mkdir(run_dir, 0777), 0);
    snprintf(p, sizeof p, "%s/rank-0000", run_dir);
    cr_assert_eq(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run_dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
          "\"run_id\":\"r\",\"rank\":0,\"world\":1,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,"
          "\"groups\":[{\"name\":\"world\",\"members\":[0]}],\"tool\":\"t\"}\n"
          "{\"v\":1,\"rank\":0,\"seq\":0,\"ts_ns\":3,\"ev\":\"rank_complete\",\"steps\":0,\"events\":0}\n",
          f);
    fclose(f);
    ls_audit_run *run = ls_test_audit_load(run_dir, NULL);
    cr_assert_eq(run->evidence_version, 1);
    cr_assert_null(run->profile_name);
    cr_assert_not_null(ls_audit_find_rule(run, "trace.valid"));
    cr_assert_null(ls_audit_find_rule(run, "collectives.performed"));
    cr_assert_null(ls_audit_find_rule(run, "collectives.p2p"));
    const ls_audit_rule *pm = rule(run, "profile.match");
    cr_assert(pm->applicable && !pm->pass, "%s", pm->message);
    cr_assert(strstr(pm->ev[0].detail, "not pinned (profile hybrid inferred from the traces' layer kinds)") != NULL,
              "%s", pm->ev[0].detail);
    cJSON *doc = NULL;
    cr_assert_eq(ls_audit_report_json(run, &doc), LS_OK);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(doc, "profile")), "the run names no profile");
    const cJSON *pu = cJSON_GetObjectItemCaseSensitive(doc, "profile_used");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(pu, "chosen_by")->valuestring, "inferred");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(pu, "file")->valuestring, "profiles/hybrid.json");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pu, "pinned")));
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(doc, "evidence_version"));
    cJSON_Delete(doc);
    ls_audit_free(run);
}

/* The reports of a v2 run: the JSON names the profile and validates
 * against schemas/audit-report.schema.json; the text says v2. */
Test(audit_v2, reports_name_the_profile, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.differ_out = true};
    ls_audit_run *run = audit(&o);
    cJSON *doc = NULL;
    cr_assert_eq(ls_audit_report_json(run, &doc), LS_OK);
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(doc, "profile");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(pr, "name")->valuestring, "torch-cp");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(doc, "evidence_version")->valuedouble, 2);
    const ls_schema *schema = NULL;
    char err[300];
    cr_assert_eq(ls_schema_get("audit-report", &schema, err, sizeof err), LS_OK, "%s", err);
    ls_schema_errors errs = {0};
    ls_status st = ls_schema_validate(schema, doc, &errs);
    char first[600] = "";
    if (st != LS_OK) ls_schema_errors_first(&errs, first, sizeof first);
    cr_assert_eq(st, LS_OK, "%s", first);
    ls_schema_errors_free(&errs);
    const cJSON *voc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "ranks"), 1), "vocabulary");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(voc, "phases")), 7);
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(voc, "layer_kinds"), 2)->valuestring, "attn");
    char *text = cJSON_PrintUnformatted(doc);
    cr_assert(strstr(text, "collectives.performed") != NULL);
    free(text);
    cJSON_Delete(doc);
    char path[4200];
    snprintf(path, sizeof path, "%s/report.txt", tmp);
    FILE *f = fopen(path, "w+");
    cr_assert_not_null(f);
    ls_audit_report_text(run, f);
    rewind(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_assert(strstr(buf, "evidence v2 (docs/contract.md), profile torch-cp sha256 0123456789abcdef...") != NULL, "%s",
              buf);
    cr_assert(strstr(buf, "collectives.performed") != NULL, "%s", buf);
    ls_audit_free(run);
}

/* A v2 run killed before its receipts: the plain traces are found and the
 * trace header says v2. */
Test(audit_v2, traces_only_run_is_read_as_v2, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.differ_out = true};
    ls_v2_fixture_write(run_dir, &o);
    char p[4200];
    static const char *const GONE[] = {"manifest.json", "rank-0000/receipt.json", "rank-0001/receipt.json"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", run_dir, GONE[i]);
        cr_assert_eq(unlink(p), 0);
    }
    ls_audit_run *run = ls_test_audit_load(run_dir, NULL);
    cr_assert_eq(run->evidence_version, 2);
    cr_assert_str_eq(run->ranks[0].trace_file, "rank-0000/events.jsonl");
    expect_pass(run, "trace.valid");
    const ls_audit_rule *r = rule(run, "collectives.performed");
    cr_assert(r->applicable && !r->pass);
    ls_audit_free(run);
}

/* Rewrites rank 1's receipt through fn (its predicate). */
static void edit_rank1(void (*fn)(cJSON *pred)) {
    char p[4200], err[300];
    snprintf(p, sizeof p, "%s/rank-0001/receipt.json", run_dir);
    cJSON *doc = NULL;
    cr_assert_eq(ls_json_read_file(p, &doc, err, sizeof err), LS_OK);
    fn(cJSON_GetObjectItemCaseSensitive(doc, "predicate"));
    cr_assert_eq(ls_json_write_file(p, doc, err, sizeof err), LS_OK);
    cJSON_Delete(doc);
}

static void other_model(cJSON *pred) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pred, "config"), "model");
    cJSON_ReplaceItemInObjectCaseSensitive(m, "d_model", cJSON_CreateNumber(16));
}

static void other_build(cJSON *pred) { /* another build, its digest recomputed: valid, but not the manifest's */
    cJSON *b = cJSON_GetObjectItemCaseSensitive(pred, "build");
    cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(b, "artifacts"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(a, "version", cJSON_CreateString("3.12.0"));
    char hex[LS_DIGEST_HEX_SIZE], err[300];
    cr_assert_eq(ls_build_info_digest_v2(b, hex, err, sizeof err), LS_OK, "%s", err);
    cJSON_ReplaceItemInObjectCaseSensitive(b, "build_digest", cJSON_CreateString(hex));
}

static ls_audit_run *audit_edited(void (*fn)(cJSON *pred)) {
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(run_dir, &o);
    edit_rank1(fn);
    ls_audit_run *run = ls_test_audit_load(run_dir, NULL);
    return run;
}

/* The cross-source agreement rules on v2 runs: the receipts' config and
 * build must be the manifest's. */
Test(audit_v2, config_and_build_must_agree_across_sources, .init = setup, .fini = teardown) {
    ls_audit_run *run = audit_edited(other_model);
    expect_pass(run, "receipts.valid");
    const ls_audit_rule *r = rule(run, "sources.agree");
    if (r->pass) dump(run);
    cr_assert(!r->pass);
    bool named = false;
    for (size_t i = 0; i < r->n_ev; i++) named |= strstr(r->ev[i].detail, "model") != NULL;
    cr_assert(named, "%s", r->message);
    ls_audit_free(run);
    teardown();
    setup();
    run = audit_edited(other_build);
    expect_pass(run, "receipts.valid");
    r = rule(run, "build.digest_equal");
    if (r->pass) dump(run);
    cr_assert(!r->pass);
    cr_assert(strstr(r->ev[0].detail, LS_V2_FIXTURE_BUILD_DIGEST) != NULL, "%s", r->ev[0].detail);
    ls_audit_free(run);
}
