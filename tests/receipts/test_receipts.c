/* test_receipts.c - atomic writes, digests, build info, receipts and
 * manifests: round trips, non-finite refusal, and every tampering the
 * manifest verification claims to detect (missing, extra, changed files,
 * disagreeing receipts). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "receipts/format/atomic_file.h"
#include "receipts/format/build_info.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "tests/support/test_receipts_support.h"

LS_TEST_SCRATCH

static void path_in(char *buf, size_t cap, const char *rel) {
    snprintf(buf, cap, "%s/%s", tmp, rel);
}

/* No PATH.tmp.* left next to path. */
static void assert_no_temp(const char *rel) {
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/%s.tmp.%ld", tmp, rel, (long)getpid());
    cr_assert(!ls_test_exists(probe), "temporary file %s left behind", probe);
}

/* ---- atomic_file ----------------------------------------------------- */

Test(receipts_atomic, writes_and_replaces, .init = setup, .fini = teardown) {
    char p[4096], err[512];
    path_in(p, sizeof p, "f.txt");
    cr_assert_eq(ls_atomic_write(p, "first", 5, err, sizeof err), LS_OK, "%s", err);
    size_t n;
    char *got = ls_test_read_file(p, &n);
    cr_assert_eq(n, 5);
    cr_assert_str_eq(got, "first");
    free(got);
    cr_assert_eq(ls_atomic_write(p, "second!", 7, err, sizeof err), LS_OK, "%s", err);
    got = ls_test_read_file(p, &n);
    cr_assert_str_eq(got, "second!");
    free(got);
    cr_assert_eq(ls_atomic_write(p, NULL, 0, err, sizeof err), LS_OK, "%s", err);
    got = ls_test_read_file(p, &n);
    cr_assert_eq(n, 0);
    free(got);
    assert_no_temp("f.txt");
}

/* A write that fails half-way (file size limit: EFBIG) must leave the old
 * content and no temporary file. */
Test(receipts_atomic, failed_write_keeps_old_file, .init = setup, .fini = teardown) {
    char p[4096], err[512] = "";
    path_in(p, sizeof p, "keep.json");
    cr_assert_eq(ls_atomic_write(p, "old content\n", 12, err, sizeof err), LS_OK, "%s", err);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    size_t big = 1 << 20;
    char *bytes = malloc(big);
    cr_assert_not_null(bytes);
    memset(bytes, 'x', big);
    ls_status st = ls_atomic_write(p, bytes, big, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    free(bytes);
    cr_assert_eq(st, LS_ERR_IO, "got %s", ls_status_str(st));
    cr_assert_not_null(strstr(err, p), "message does not name the file: %s", err);
    size_t n;
    char *got = ls_test_read_file(p, &n);
    cr_assert_str_eq(got, "old content\n");
    free(got);
    assert_no_temp("keep.json");
}

Test(receipts_atomic, missing_directory_and_rename_failure, .init = setup, .fini = teardown) {
    char p[4096], err[512] = "";
    path_in(p, sizeof p, "no-such-dir/f.json");
    cr_assert_eq(ls_atomic_write(p, "x", 1, err, sizeof err), LS_ERR_IO);
    cr_assert_not_null(strstr(err, p), "%s", err);
    /* renaming a file over a non-empty directory fails after the temp exists */
    path_in(p, sizeof p, "adir");
    cr_assert_eq(mkdir(p, 0777), 0);
    char inner[4096];
    path_in(inner, sizeof inner, "adir/child");
    ls_test_write_file(inner, "c", 1);
    cr_assert_eq(ls_atomic_write(p, "x", 1, err, sizeof err), LS_ERR_IO);
    cr_assert_not_null(strstr(err, "rename"), "%s", err);
    assert_no_temp("adir");
    cr_assert(ls_test_exists(inner));
}

/* ---- digest ------------------------------------------------------------ */

Test(receipts_digest, known_vectors) {
    char hex[LS_DIGEST_HEX_SIZE];
    cr_assert_eq(ls_digest_sha256_hex("abc", 3, hex), LS_OK);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    cr_assert_eq(ls_digest_sha256_hex(NULL, 0, hex), LS_OK);
    cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* FIPS 180-2 vector: one million 'a' (spans many 64 KiB reads). */
Test(receipts_digest, file_of_a_million_a, .init = setup, .fini = teardown) {
    char p[4096], err[512], hex[LS_DIGEST_HEX_SIZE];
    path_in(p, sizeof p, "a.bin");
    char *a = malloc(1000000);
    cr_assert_not_null(a);
    memset(a, 'a', 1000000);
    ls_test_write_file(p, a, 1000000);
    free(a);
    cr_assert_eq(ls_digest_sha256_file_hex(p, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    path_in(p, sizeof p, "absent.bin");
    cr_assert_eq(ls_digest_sha256_file_hex(p, hex, err, sizeof err), LS_ERR_IO);
    cr_assert_not_null(strstr(err, p), "%s", err);
}

/* ---- json_util ---------------------------------------------------------- */

Test(receipts_json, canonical_form_and_strict_parse) {
    cJSON *doc = cJSON_Parse("{\"b\":1,\"a\":{\"d\":[2,\"x y\"],\"c\":null},\"B\":true}");
    cr_assert_not_null(doc);
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(ls_json_print_canonical(doc, &text, &len, NULL, 0), LS_OK);
    cr_assert_str_eq(text, "{\"B\":true,\"a\":{\"c\":null,\"d\":[2,\"x y\"]},\"b\":1}");
    cr_assert_eq(len, strlen(text));
    free(text);
    cJSON_Delete(doc);

    char err[256];
    cJSON *out = NULL;
    const char *bad[] = {"{\"a\":1,\"a\":2}", "{\"a\":1} x", "[1e999]", "", "{\"a\":"};
    ls_status want[] = {LS_ERR_FORMAT, LS_ERR_FORMAT, LS_ERR_NONFINITE, LS_ERR_FORMAT,
                        LS_ERR_FORMAT};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ls_status st = ls_json_parse(bad[i], strlen(bad[i]), "t.json", &out, err, sizeof err);
        cr_expect_eq(st, want[i], "\"%s\": got %s", bad[i], ls_status_str(st));
        cr_expect_null(out);
        cr_expect_not_null(strstr(err, "t.json"), "%s", err);
    }
    /* not NUL-terminated: only len bytes are read */
    char buf[8] = {'[', '1', ']', ' ', 'x', 'x', 'x', 'x'};
    cr_assert_eq(ls_json_parse(buf, 4, NULL, &out, NULL, 0), LS_OK);
    cJSON_Delete(out);
}

Test(receipts_json, nonfinite_is_named, .init = setup, .fini = teardown) {
    cJSON *doc = cJSON_Parse("{\"predicate\":{\"memory\":{\"total_peak_bytes\":1}}}");
    cJSON *mem = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "predicate"), "memory");
    cJSON_ReplaceItemInObject(mem, "total_peak_bytes", cJSON_CreateNumber(NAN));
    char p[4096], err[512] = "";
    path_in(p, sizeof p, "memory.json");
    ls_test_write_file(p, "previous\n", 9);
    cr_assert_eq(ls_json_write_file(p, doc, err, sizeof err), LS_ERR_NONFINITE);
    cr_assert_not_null(strstr(err, "/predicate/memory/total_peak_bytes"), "%s", err);
    char *got = ls_test_read_file(p, NULL);
    cr_assert_str_eq(got, "previous\n");
    free(got);
    assert_no_temp("memory.json");
    cJSON_Delete(doc);
}

/* ---- build info --------------------------------------------------------- */

/* The digest recomputed by Python's json.dumps(sort_keys, compact) and
 * hashlib, independently of the C canonical printer. */
Test(receipts_build, digest_matches_independent_computation, .init = setup, .fini = teardown) {
    cJSON *b1 = NULL, *b2 = NULL;
    cr_assert_eq(ls_build_info_create("0.3.21", NULL, &b1), LS_OK);
    cr_assert_eq(ls_build_info_create("0.3.21", NULL, &b2), LS_OK);
    cr_assert(cJSON_Compare(b1, b2, 1), "build info is not deterministic");
    const char *mpi = cJSON_GetObjectItem(cJSON_GetObjectItem(b1, "dependencies"), "mpi")->valuestring;
    cr_assert_str_eq(mpi, "unknown");
    cr_assert_eq(ls_build_info_check(b1, NULL, 0), LS_OK);

    char p[4096], err[512];
    path_in(p, sizeof p, "build.json");
    cr_assert_eq(ls_json_write_file(p, b1, err, sizeof err), LS_OK, "%s", err);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s -c 'import json,hashlib,sys; b=json.load(open(sys.argv[1])); "
             "d=b.pop(\"build_digest\"); b[\"executable\"].pop(\"path\"); "
             "[l.pop(\"path\") for l in b[\"libraries\"]]; "
             "c=json.dumps(b,sort_keys=True,separators=(\",\",\":\"),ensure_ascii=False); "
             "print(hashlib.sha256(c.encode()).hexdigest()==d)' '%s'",
             LS_TEST_PYTHON, p);
    FILE *py = popen(cmd, "r");
    cr_assert_not_null(py);
    char line[64] = "";
    cr_assert_not_null(fgets(line, sizeof line, py));
    cr_assert_eq(pclose(py), 0);
    cr_assert_str_eq(line, "True\n", "python computes a different build digest");

    cJSON_ReplaceItemInObject(b1, "flags", cJSON_CreateString("-O0"));
    cr_assert_eq(ls_build_info_check(b1, err, sizeof err), LS_ERR_CORRUPT);
    cJSON_Delete(b1);
    cJSON_Delete(b2);
}

/* ---- receipts ------------------------------------------------------------ */

static void make_events(uint32_t rank, const char *content) {
    char p[4096];
    snprintf(p, sizeof p, "%s/rank-%04u", tmp, (unsigned)rank);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/rank-%04u/events.jsonl.zst", tmp, (unsigned)rank);
    ls_test_write_file(p, content, strlen(content));
}

/* The inputs most receipt and manifest tests share: the scratch directory,
 * a build identity (version 0.3.21, MPI "x") and the sample config, made per
 * test (a test may change them) and freed after it. */
static cJSON *build, *config;
static void setup_inputs(void) {
    setup();
    config = ls_test_config();
    cr_assert_eq(ls_build_info_create("0.3.21", "x", &build), LS_OK);
}
static void teardown_inputs(void) {
    cJSON_Delete(build);
    cJSON_Delete(config);
    teardown();
}

Test(receipts_receipt, round_trip, .init = setup, .fini = teardown) {
    cJSON *build = NULL, *config = ls_test_config();
    cr_assert_eq(ls_build_info_create("0.3.21", "Open MPI 4.1.4", &build), LS_OK);
    make_events(1, "trace bytes of rank 1\n");
    ls_receipt w = ls_test_receipt(1, 2, build, config);
    w.status = LS_RECEIPT_ERROR;
    w.error_code = LS_ERR_MPI;
    w.error_message = "allreduce timed out in replay";
    w.events_last_seq = -1;
    w.events_count = 0;
    char err[1024], p[4096];
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_OK, "%s", err);

    ls_receipt_path(tmp, 1, p, sizeof p);
    ls_receipt *r = NULL;
    cr_assert_eq(ls_receipt_read(p, &r, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(r->run_id, w.run_id);
    cr_assert_eq(r->rank, 1u);
    cr_assert_eq(r->world, 2u);
    cr_assert_str_eq(r->host, w.host);
    cr_assert(cJSON_Compare(r->build, build, 1));
    cr_assert(cJSON_Compare(r->config, config, 1));
    cr_assert_eq(r->steps, w.steps);
    cr_assert_eq(r->n_phases, w.n_phases);
    for (size_t i = 0; i < w.n_phases; i++) {
        cr_assert_str_eq(r->phases[i].phase, w.phases[i].phase);
        cr_assert_eq(r->phases[i].count, w.phases[i].count);
        cr_assert_eq(r->phases[i].wall_ns_total, w.phases[i].wall_ns_total);
    }
    cr_assert_eq(r->n_memory, w.n_memory);
    for (size_t i = 0; i < w.n_memory; i++) {
        cr_assert_str_eq(r->memory[i].name, w.memory[i].name);
        cr_assert_eq(r->memory[i].run_peak_bytes, w.memory[i].run_peak_bytes);
        cr_assert_eq(r->memory[i].step_peak_bytes, w.memory[i].step_peak_bytes);
    }
    cr_assert_eq(r->run_total_peak_bytes, w.run_total_peak_bytes);
    cr_assert_eq(r->rss_peak_bytes, w.rss_peak_bytes);
    cr_assert_eq(r->step_total_peak_bytes, w.step_total_peak_bytes);
    cr_assert_eq(r->steps_measured, w.steps_measured);
    cr_assert_eq(r->step_total_peak_at, w.step_total_peak_at);
    cr_assert_str_eq(r->events_file, w.events_file);
    cr_assert_eq(r->events_count, 0u);
    cr_assert_eq(r->events_last_seq, -1);
    cr_assert_eq(r->status, LS_RECEIPT_ERROR);
    cr_assert_eq(r->error_code, LS_ERR_MPI);
    cr_assert_str_eq(r->error_message, w.error_message);
    /* timestamps above 2^53 come back as the nearest double */
    cr_assert_eq(r->start_unix_ns, (uint64_t)(double)w.start_unix_ns);
    cr_assert_eq(r->end_unix_ns, (uint64_t)(double)w.end_unix_ns);
    char hex[LS_DIGEST_HEX_SIZE];
    ls_digest_sha256_hex("trace bytes of rank 1\n", 22, hex);
    cr_assert_str_eq(r->events_sha256, hex);
    ls_receipt_free(r);

    /* the file holds the exact digits of the timestamps */
    char *text = ls_test_read_file(p, NULL);
    cr_assert_not_null(strstr(text, "1700000000123456789"), "%s", text);
    cr_assert_not_null(strstr(text, "\"predicateType\":\t\"urn:longstraw:predicate:rank-receipt:v1\""));
    free(text);
    cJSON_Delete(build);
    cJSON_Delete(config);
}

/* Writing a receipt with a non-finite value anywhere fails and leaves an
 * existing receipt as it was. */
Test(receipts_receipt, nonfinite_refused_without_writing, .init = setup_inputs, .fini = teardown_inputs) {
    make_events(0, "events\n");
    ls_receipt w = ls_test_receipt(0, 1, build, config);
    char err[1024], p[4096];
    ls_receipt_path(tmp, 0, p, sizeof p);

    /* no file yet: a NaN config must not create one */
    cJSON_ReplaceItemInObject(config, "epsilon", cJSON_CreateNumber(NAN));
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_NONFINITE);
    cr_assert_not_null(strstr(err, "/predicate/config/epsilon"), "%s", err);
    cr_assert_not_null(strstr(err, p), "message does not name the file: %s", err);
    cr_assert(!ls_test_exists(p), "a refused receipt was written");

    /* a good receipt, then Inf: the good one stays */
    cJSON_ReplaceItemInObject(config, "epsilon", cJSON_CreateNumber(0.2));
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_OK, "%s", err);
    char *before = ls_test_read_file(p, NULL);
    cJSON_AddItemToObject(config, "lr_schedule", cJSON_CreateNumber(INFINITY));
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_NONFINITE);
    char *after = ls_test_read_file(p, NULL);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    assert_no_temp("rank-0000/receipt.json");
}

Test(receipts_receipt, schema_violations_refused, .init = setup_inputs, .fini = teardown_inputs) {
    make_events(0, "events\n");
    char err[1024], p[4096];
    ls_receipt_path(tmp, 0, p, sizeof p);

    ls_receipt w = ls_test_receipt(0, 1, build, config);
    w.status = LS_RECEIPT_ERROR; /* error status without an error member */
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_SCHEMA, "%s", err);
    w = ls_test_receipt(0, 1, build, config);
    w.rank = 3; /* rank >= world */
    cr_assert_neq(ls_receipt_write(tmp, &w, err, sizeof err), LS_OK);
    w = ls_test_receipt(0, 1, build, config);
    w.host = "two words"; /* not a token */
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_SCHEMA, "%s", err);
    cr_assert_not_null(strstr(err, "/predicate/host"), "%s", err);
    w = ls_test_receipt(0, 1, build, config);
    w.steps = UINT64_C(1) << 60; /* beyond exact JSON integers */
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_SCHEMA, "%s", err);
    w = ls_test_receipt(0, 1, build, config);
    w.events_file = "../elsewhere/events";
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_ARG);
    w = ls_test_receipt(0, 1, build, config);
    w.events_file = "rank-0000/absent.jsonl.zst";
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_IO);
    cr_assert_not_null(strstr(err, "absent.jsonl.zst"), "%s", err);
    w = ls_test_receipt(0, 1, build, config);
    const ls_receipt_memory bad_cat[] = {{"Prompt State", 1, 1}}; /* not an identifier */
    w.memory = bad_cat;
    w.n_memory = 1;
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_FORMAT, "%s", err);
    cr_assert_not_null(strstr(err, "Prompt State"), "%s", err);
    cJSON_DeleteItemFromObject(config, "gdn_hk"); /* hybrid config without a hybrid key */
    w = ls_test_receipt(0, 1, build, config);
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_SCHEMA, "%s", err);
    cr_assert(!ls_test_exists(p), "a refused receipt was written");
}

/* The two memory scopes are checked against each other: each injected
 * inconsistency is refused by the writer (which runs the reader's checks)
 * with a message naming the figure, and no file is written. */
Test(receipts_receipt, memory_scopes_consistent, .init = setup_inputs, .fini = teardown_inputs) {
    make_events(0, "events\n");
    char err[1024], p[4096];
    ls_receipt_path(tmp, 0, p, sizeof p);
    ls_receipt w = ls_test_receipt(0, 1, build, config);
    ls_receipt_memory mem[5];
    memcpy(mem, w.memory, sizeof mem);
    const char *want[] = {"above its run peak", "above its run total peak",
                          "above its per-step total peak", "above the run's",
                          "per_step/steps", "per_step/steps", "total_peak_step",
                          "total_peak_step"};
    for (int k = 0; k < 8; k++) {
        w = ls_test_receipt(0, 1, build, config);
        memcpy(mem, ls_test_receipt(0, 1, build, config).memory, sizeof mem);
        w.memory = mem;
        switch (k) {
        case 0: mem[3].step_peak_bytes = mem[3].run_peak_bytes + 1; break;
        case 1: mem[0].run_peak_bytes = mem[0].step_peak_bytes = w.run_total_peak_bytes + 1; break;
        case 2: mem[0].run_peak_bytes = mem[0].step_peak_bytes = w.step_total_peak_bytes + 1; break;
        case 3: w.step_total_peak_bytes = w.run_total_peak_bytes + 1; break;
        case 4: w.steps_measured = w.steps + 2; break;
        case 5: w.steps = 3; break; /* more steps completed than measured */
        case 6: w.step_total_peak_at = (int64_t)w.steps_measured; break;
        case 7: w.step_total_peak_at = -1; break;
        }
        cr_expect_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_ERR_FORMAT, "case %d", k);
        cr_expect_not_null(strstr(err, want[k]), "case %d: %s", k, err);
        cr_expect(!ls_test_exists(p), "case %d: a refused receipt was written", k);
    }
    /* a step that failed: measured = completed + 1, and zero steps: null index */
    w = ls_test_receipt(0, 1, build, config);
    w.steps = 0;
    cr_expect_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_OK, "%s", err);
    w.steps_measured = 0;
    w.step_total_peak_at = -1;
    cr_expect_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_OK, "%s", err);
    ls_receipt *r = NULL;
    cr_assert_eq(ls_receipt_read(p, &r, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(r->step_total_peak_at, -1);
    cr_expect_eq(r->steps_measured, 0u);
    ls_receipt_free(r);
    /* categories that differ between the scopes (only a hand-made document can) */
    w = ls_test_receipt(0, 1, build, config);
    cJSON *doc = NULL;
    cr_assert_eq(ls_receipt_to_json(&w, "0000000000000000000000000000000000000000000000000000000000000000",
                                    &doc, err, sizeof err), LS_OK, "%s", err);
    cJSON *cats = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
        cJSON_GetObjectItem(doc, "predicate"), "memory"), "per_step"), "categories");
    cJSON_DeleteItemFromObject(cats, "score");
    char *text = cJSON_PrintUnformatted(doc);
    cr_expect_eq(ls_receipt_parse(text, strlen(text), "hand.json", &r, err, sizeof err), LS_ERR_FORMAT);
    cr_expect_not_null(strstr(err, "the run scope has 5"), "%s", err);
    ls_receipt_free(r);
    free(text);
    cJSON_DeleteItemFromObject(cats, "fixed");
    cJSON_AddItemToObject(cats, "fixed", cJSON_CreateObject()); /* now last, not first */
    cJSON_AddNumberToObject(cJSON_GetObjectItem(cats, "fixed"), "peak_bytes", 1);
    text = cJSON_PrintUnformatted(doc);
    r = NULL;
    cr_expect_eq(ls_receipt_parse(text, strlen(text), "hand.json", &r, err, sizeof err), LS_ERR_FORMAT);
    cr_expect_not_null(strstr(err, "is not category 0"), "%s", err);
    ls_receipt_free(r);
    free(text);
    cJSON_Delete(doc);
}

/* Every prefix of a valid receipt, and every single-byte corruption at a
 * stride, is rejected or parsed without crashing (ASan watches). */
Test(receipts_receipt, truncation_and_corruption, .init = setup_inputs, .fini = teardown_inputs) {
    make_events(0, "events\n");
    ls_receipt w = ls_test_receipt(0, 1, build, config);
    char err[1024], p[4096];
    cr_assert_eq(ls_receipt_write(tmp, &w, err, sizeof err), LS_OK, "%s", err);
    ls_receipt_path(tmp, 0, p, sizeof p);
    size_t len = 0;
    char *text = ls_test_read_file(p, &len);
    size_t accepted = 0;
    for (size_t cut = 0; cut + 2 < len; cut += 7) {
        ls_receipt *r = NULL;
        if (ls_receipt_parse(text, cut, "cut", &r, err, sizeof err) == LS_OK) accepted++;
        ls_receipt_free(r);
    }
    cr_assert_eq(accepted, 0u, "a truncated receipt was accepted");
    for (size_t i = 0; i < len; i += 13) {
        char saved = text[i];
        text[i] = (char)(saved ^ 0x5a);
        ls_receipt *r = NULL;
        ls_receipt_parse(text, len, "flip", &r, err, sizeof err);
        ls_receipt_free(r);
        text[i] = saved;
    }
    free(text);
}

/* ---- manifests ------------------------------------------------------------ */

static ls_manifest *read_manifest(void) {
    char p[4096], err[1024];
    path_in(p, sizeof p, "manifest.json");
    ls_manifest *m = NULL;
    cr_assert_eq(ls_manifest_read(p, &m, err, sizeof err), LS_OK, "%s", err);
    return m;
}

Test(receipts_manifest, round_trip, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 2);
    ls_manifest *m = read_manifest();
    static const char *const names[] = {"parity.json", "rank-0000/events.jsonl.zst",
                                        "rank-0000/receipt.json", "rank-0001/events.jsonl.zst",
                                        "rank-0001/receipt.json"};
    cr_assert_eq(m->n_subjects, 5u);
    for (size_t i = 0; i < 5; i++) {
        cr_assert_str_eq(m->subjects[i].name, names[i]);
        char p[4096], hex[LS_DIGEST_HEX_SIZE];
        size_t len;
        path_in(p, sizeof p, names[i]);
        char *bytes = ls_test_read_file(p, &len);
        ls_digest_sha256_hex(bytes, len, hex);
        free(bytes);
        cr_assert_str_eq(m->subjects[i].sha256, hex, "%s", names[i]);
    }
    cr_assert_str_eq(m->run_id, "run-test-0001");
    cr_assert_eq(m->world, 2u);
    cr_assert_eq(m->n_ranks, 2u);
    for (uint32_t r = 0; r < 2; r++) {
        cr_assert_eq(m->ranks[r].rank, r);
        cr_assert_eq(m->ranks[r].status, LS_MANIFEST_RANK_COMPLETE);
        cr_assert_str_eq(m->ranks[r].receipt, names[2 + 2 * r]);
    }
    cJSON *config = ls_test_config();
    cr_assert(cJSON_Compare(m->config, config, 1));
    cJSON_Delete(config);
    cr_assert_eq(ls_build_info_check(m->build, NULL, 0), LS_OK);
    ls_manifest_free(m);
}

Test(receipts_manifest, verify_good_run, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 3);
    ls_verify_report rep = {0};
    char err[1024] = "";
    ls_status st = ls_manifest_verify(tmp, &rep, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s", err);
    cr_assert_eq(rep.count, 0u);
    ls_verify_report_free(&rep);
}

static const ls_verify_problem *find_problem(const ls_verify_report *rep, ls_verify_kind kind,
                                             const char *name) {
    for (size_t i = 0; i < rep->count; i++)
        if (rep->items[i].kind == kind && strcmp(rep->items[i].name, name) == 0)
            return &rep->items[i];
    return NULL;
}

Test(receipts_manifest, changed_file_is_named, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 2);
    char p[4096], err[1024];
    path_in(p, sizeof p, "rank-0001/events.jsonl.zst");
    ls_test_write_file(p, "tampered\n", 9);
    ls_verify_report rep = {0};
    cr_assert_eq(ls_manifest_verify(tmp, &rep, err, sizeof err), LS_ERR_CORRUPT);
    cr_assert_eq(rep.count, 1u, "expected exactly one problem");
    cr_assert_not_null(find_problem(&rep, LS_VERIFY_MISMATCH, "rank-0001/events.jsonl.zst"));
    cr_assert_not_null(strstr(err, "rank-0001/events.jsonl.zst"), "%s", err);
    ls_verify_report_free(&rep);
}

Test(receipts_manifest, missing_and_extra_files, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 2);
    char p[4096], err[1024];
    path_in(p, sizeof p, "parity.json");
    cr_assert_eq(unlink(p), 0);
    path_in(p, sizeof p, "rank-0000/stray.log");
    ls_test_write_file(p, "x", 1);
    path_in(p, sizeof p, "zz-new");
    cr_assert_eq(mkdir(p, 0777), 0);
    path_in(p, sizeof p, "zz-new/notes.txt");
    ls_test_write_file(p, "y", 1);
    ls_verify_report rep = {0};
    cr_assert_eq(ls_manifest_verify(tmp, &rep, err, sizeof err), LS_ERR_CORRUPT);
    cr_assert_eq(rep.count, 3u);
    cr_assert_not_null(find_problem(&rep, LS_VERIFY_MISSING, "parity.json"));
    cr_assert_not_null(find_problem(&rep, LS_VERIFY_EXTRA, "rank-0000/stray.log"));
    cr_assert_not_null(find_problem(&rep, LS_VERIFY_EXTRA, "zz-new/notes.txt"));
    ls_verify_report_free(&rep);
}

/* A manifest whose rank entry disagrees with the receipt on disk. */
Test(receipts_manifest, receipt_disagreement, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 2);
    cJSON *build = NULL, *config = ls_test_config();
    cr_assert_eq(ls_build_info_create("0.3.21", "Open MPI 4.1.4", &build), LS_OK);
    ls_manifest_rank ranks[2] = {{0, "rank-0000/receipt.json", LS_MANIFEST_RANK_COMPLETE},
                                 {1, "rank-0001/receipt.json", LS_MANIFEST_RANK_ERROR}};
    ls_manifest m = {.run_id = "run-test-0001", .world = 2, .build = build, .config = config,
                     .ranks = ranks, .n_ranks = 2};
    char err[1024];
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_OK, "%s", err);
    ls_verify_report rep = {0};
    cr_assert_eq(ls_manifest_verify(tmp, &rep, err, sizeof err), LS_ERR_CORRUPT);
    cr_assert_eq(rep.count, 1u);
    const ls_verify_problem *pr = find_problem(&rep, LS_VERIFY_RECEIPT, "rank-0001/receipt.json");
    cr_assert_not_null(pr);
    cr_assert_not_null(strstr(pr->detail, "status"), "%s", pr->detail);
    ls_verify_report_free(&rep);

    /* a rank without a receipt is "missing" when the writer scans */
    char p[4096];
    path_in(p, sizeof p, "rank-0001/receipt.json");
    cr_assert_eq(unlink(p), 0);
    m.ranks = NULL;
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_OK, "%s", err);
    ls_manifest *back = read_manifest();
    cr_assert_eq(back->ranks[1].status, LS_MANIFEST_RANK_MISSING);
    cr_assert_null(back->ranks[1].receipt);
    ls_manifest_free(back);
    cr_assert_eq(ls_manifest_verify(tmp, &rep, err, sizeof err), LS_OK, "%s", err);
    ls_verify_report_free(&rep);
    cJSON_Delete(build);
    cJSON_Delete(config);
}

/* The profile a v1 run was written for (predicate.profile): written when set, read back, required alike in
 * the manifest and every receipt (a receipt that names another profile, or none, is a problem), absent in
 * an older run; a name without its digest is refused. */
Test(receipts_manifest, profile_pinned_in_manifest_and_receipts, .init = setup, .fini = teardown) {
    static const char SHA[] = "e6008ee1a2de8f469c0593026d50942a1f74ad2114047e385d6de4f04c935473";
    ls_test_make_run(tmp, 2); /* an older run: no profile anywhere */
    ls_manifest *m0 = read_manifest();
    cr_assert_null(m0->profile_name);
    cr_assert_null(m0->profile_sha256);
    ls_manifest_free(m0);
    cJSON *build = NULL, *config = ls_test_config();
    cr_assert_eq(ls_build_info_create("0.3.21", "Open MPI 4.1.4", &build), LS_OK);
    char err[1024], p[4096];
    for (uint32_t r = 0; r < 2; r++) {
        ls_receipt rc = ls_test_receipt(r, 2, build, config);
        rc.profile_name = "hybrid";
        rc.profile_sha256 = SHA;
        cr_assert_eq(ls_receipt_write(tmp, &rc, err, sizeof err), LS_OK, "%s", err);
    }
    ls_manifest m = {.run_id = "run-test-0001", .world = 2, .build = build, .config = config,
                     .profile_name = "hybrid", .profile_sha256 = SHA};
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_OK, "%s", err);
    ls_manifest *back = read_manifest();
    cr_assert_str_eq(back->profile_name, "hybrid");
    cr_assert_str_eq(back->profile_sha256, SHA);
    cr_assert_eq(back->version, 1);
    ls_manifest_free(back);
    path_in(p, sizeof p, "rank-0001/receipt.json");
    ls_receipt *rr = NULL;
    cr_assert_eq(ls_receipt_read(p, &rr, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(rr->profile_sha256, SHA);
    ls_receipt_free(rr);
    ls_verify_report rep = {0};
    cr_assert_eq(ls_manifest_verify(tmp, &rep, err, sizeof err), LS_OK, "%s", err);
    ls_verify_report_free(&rep);
    /* rank 1's receipt names none: the manifest's verification names it */
    ls_receipt rc = ls_test_receipt(1, 2, build, config);
    cr_assert_eq(ls_receipt_write(tmp, &rc, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_manifest_verify(tmp, &rep, err, sizeof err), LS_ERR_CORRUPT);
    const ls_verify_problem *pr = find_problem(&rep, LS_VERIFY_RECEIPT, "rank-0001/receipt.json");
    cr_assert_not_null(pr);
    cr_assert_not_null(strstr(pr->detail, "profile (none)"), "%s", pr->detail);
    ls_verify_report_free(&rep);
    /* a name without its digest is refused, nothing written */
    m.profile_sha256 = NULL;
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_ERR_ARG);
    cr_assert_not_null(strstr(err, "profile"), "%s", err);
    rc.profile_name = "hybrid";
    cr_assert_eq(ls_receipt_write(tmp, &rc, err, sizeof err), LS_ERR_ARG);
    cr_assert_not_null(strstr(err, "profile"), "%s", err);
    cJSON_Delete(build);
    cJSON_Delete(config);
}

Test(receipts_manifest, writer_refusals, .init = setup_inputs, .fini = teardown_inputs) {
    ls_test_make_run(tmp, 1);
    char p[4096], err[1024];
    path_in(p, sizeof p, "manifest.json");
    char *before = ls_test_read_file(p, NULL);
    ls_manifest m = {.run_id = "run-test-0001", .world = 1, .build = build, .config = config};

    cJSON_ReplaceItemInObject(config, "beta", cJSON_CreateNumber(NAN));
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_ERR_NONFINITE);
    cr_assert_not_null(strstr(err, "/predicate/config/beta"), "%s", err);
    cJSON_ReplaceItemInObject(config, "beta", cJSON_CreateNumber(0.04));

    char link[4096];
    path_in(link, sizeof link, "rank-0000/link");
    cr_assert_eq(symlink("/etc/passwd", link), 0);
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_ERR_FORMAT);
    cr_assert_not_null(strstr(err, "rank-0000/link"), "%s", err);
    unlink(link);

    path_in(p, sizeof p, "bad name.txt");
    ls_test_write_file(p, "x", 1);
    cr_assert_eq(ls_manifest_write(tmp, &m, err, sizeof err), LS_ERR_FORMAT);
    cr_assert_not_null(strstr(err, "bad name.txt"), "%s", err);

    path_in(p, sizeof p, "manifest.json");
    char *after = ls_test_read_file(p, NULL);
    cr_assert_str_eq(before, after, "a refused manifest replaced the old one");
    free(before);
    free(after);
}

/* Manifests that the schema accepts but that are inconsistent, and paths
 * that would escape the run directory. */
Test(receipts_manifest, parse_rejects_inconsistent, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 2);
    char p[4096], err[1024];
    path_in(p, sizeof p, "manifest.json");
    size_t len;
    char *text = ls_test_read_file(p, &len);
    struct {
        const char *from, *to;
        ls_status want;
    } edits[] = {
        {"\"files\":\t5", "\"files\":\t4", LS_ERR_FORMAT},
        {"\"name\":\t\"parity.json\"", "\"name\":\t\"../parity.json\"", LS_ERR_SCHEMA},
        {"\"name\":\t\"parity.json\"", "\"name\":\t\"zzz.json\"", LS_ERR_FORMAT},
        {"\"rank\":\t1,", "\"rank\":\t0,", LS_ERR_FORMAT},
        {"\"world\":\t2,\n\t\t\"build\"", "\"world\":\t3,\n\t\t\"build\"", LS_ERR_FORMAT},
        {"\"dtype_builds\":\t[\"f32\", \"f64\"]", "\"dtype_builds\":\t[\"f64\"]", LS_ERR_CORRUPT},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        char *at = strstr(text, edits[i].from);
        cr_assert_not_null(at, "edit %zu: \"%s\" not in the manifest:\n%s", i, edits[i].from, text);
        size_t fl = strlen(edits[i].from), tl = strlen(edits[i].to);
        char *edited = malloc(len - fl + tl + 1);
        size_t pre = (size_t)(at - text);
        memcpy(edited, text, pre);
        memcpy(edited + pre, edits[i].to, tl);
        memcpy(edited + pre + tl, at + fl, len - pre - fl + 1);
        ls_manifest *m = NULL;
        ls_status st = ls_manifest_parse(edited, len - fl + tl, "edited", &m, err, sizeof err);
        cr_expect_eq(st, edits[i].want, "edit %zu: got %s (%s)", i, ls_status_str(st), err);
        ls_manifest_free(m);
        free(edited);
    }
    free(text);
}

/* The files the writers produce pass both validators. */
Test(receipts_manifest, samples_valid_for_python_and_c, .init = setup, .fini = teardown) {
    ls_test_make_run(tmp, 2);
    struct {
        const char *schema, *doc;
    } pairs[] = {{"manifest", "manifest.json"},
                 {"receipt", "rank-0000/receipt.json"},
                 {"receipt", "rank-0001/receipt.json"}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char schema[4096], doc[4096], why[1024] = "";
        snprintf(schema, sizeof schema, "%s/schemas/%s.schema.json", LS_SOURCE_DIR, pairs[i].schema);
        path_in(doc, sizeof doc, pairs[i].doc);
        const char *paths[] = {doc};
        int py = -1, c = -1;
        cr_assert_eq(ls_test_python_validate(schema, paths, 1, &py, 1, why, sizeof why), 1, "%s", why);
        cr_assert_eq(ls_test_c_validate(schema, paths, 1, &c, NULL, 1, why, sizeof why), 1, "%s", why);
        cr_expect_eq(py, 1, "python3-jsonschema rejects %s", pairs[i].doc);
        cr_expect_eq(c, 1, "the C validator rejects %s", pairs[i].doc);
    }
}

/* The valid receipt and manifest fixtures also pass the readers' structural
 * checks (build digest, rank order, subject order), so the schema fixtures
 * describe files the readers accept. */
Test(receipts_manifest, valid_fixtures_pass_the_readers) {
    const char *const receipts[] = {"complete-hybrid", "error-no-events", "mla-config-extra-key",
                                    "prefix-frozen-steps", "profile-pinned"};
    const char *const manifests[] = {"two-ranks", "rank-missing", "profile-pinned"};
    char p[4096], err[1024];
    for (size_t i = 0; i < sizeof receipts / sizeof *receipts; i++) {
        snprintf(p, sizeof p, "%s/tests/fixtures/schema/receipt/valid/%s.json", LS_SOURCE_DIR,
                 receipts[i]);
        ls_receipt *r = NULL;
        cr_expect_eq(ls_receipt_read(p, &r, err, sizeof err), LS_OK, "%s", err);
        ls_receipt_free(r);
    }
    for (size_t i = 0; i < sizeof manifests / sizeof *manifests; i++) {
        snprintf(p, sizeof p, "%s/tests/fixtures/schema/manifest/valid/%s.json", LS_SOURCE_DIR,
                 manifests[i]);
        ls_manifest *m = NULL;
        cr_expect_eq(ls_manifest_read(p, &m, err, sizeof err), LS_OK, "%s", err);
        ls_manifest_free(m);
    }
}
