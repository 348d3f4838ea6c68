/* test_receipts_v2.c - v2 receipts and manifests (docs/contract.md §2): the
 * hand-written CP-2 run reads and verifies; a tampered build identity, a
 * value outside the JCS subset, a missing documented config key, a profile
 * or version that disagrees between receipt and manifest are each refused
 * with a message naming the file and field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "receipts/format/build_info.h"
#include "receipts/format/coverage.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "tests/support/test_receipts_support.h"
#include "tests/support/test_v2_fixture.h"

static char *tmp;
static char run[4096];
static void setup(void) {
    tmp = ls_test_mkdtemp();
    snprintf(run, sizeof run, "%s/run", tmp);
}
static void teardown(void) { ls_test_scratch_free(&tmp); }

static void path_of(char *buf, size_t cap, const char *rel) { snprintf(buf, cap, "%s/%s", run, rel); }

Test(receipts_v2, fixture_run_reads_and_verifies, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(run, &o);
    char p[4200], err[600] = "";
    for (int r = 0; r < 2; r++) {
        char rel[64];
        snprintf(rel, sizeof rel, "rank-%04d/receipt.json", r);
        path_of(p, sizeof p, rel);
        ls_receipt *rc = NULL;
        cr_assert_eq(ls_receipt_read(p, &rc, err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(rc->version, 2);
        cr_assert_eq(rc->rank, (uint32_t)r);
        cr_assert_str_eq(rc->profile_name, "torch-cp");
        cr_assert_eq(strlen(rc->profile_sha256), 64);
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(rc->build, "build_digest")->valuestring,
                         LS_V2_FIXTURE_BUILD_DIGEST);
        cr_assert_eq(rc->n_phases, 1);
        cr_assert_eq(rc->n_memory, 0);
        cr_assert_eq(rc->events_count, 12);
        cr_assert_eq(rc->steps_exact, 1);
        ls_receipt_free(rc);
    }
    path_of(p, sizeof p, "manifest.json");
    ls_manifest *m = NULL;
    cr_assert_eq(ls_manifest_read(p, &m, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(m->version, 2);
    cr_assert_str_eq(m->profile_name, "torch-cp");
    ls_manifest_free(m);
    ls_verify_report rep = {0};
    ls_status st = ls_manifest_verify(run, &rep, err, sizeof err);
    for (size_t i = 0; i < rep.count; i++) fprintf(stderr, "%s: %s\n", rep.items[i].name, rep.items[i].detail);
    cr_assert_eq(st, LS_OK, "%s", err);
    ls_verify_report_free(&rep);
}

Test(receipts_v2, tampered_build_identity_is_corrupt, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {.tamper_build = true};
    ls_v2_fixture_write(run, &o);
    char p[4200], err[600] = "";
    path_of(p, sizeof p, "rank-0001/receipt.json");
    ls_receipt *rc = NULL;
    cr_assert_eq(ls_receipt_read(p, &rc, err, sizeof err), LS_ERR_CORRUPT, "%s", err);
    cr_assert(strstr(err, "rank-0001/receipt.json") && strstr(err, "/predicate/build") &&
                  strstr(err, LS_V2_FIXTURE_BUILD_DIGEST),
              "%s", err);
    path_of(p, sizeof p, "manifest.json");
    ls_manifest *m = NULL;
    cr_assert_eq(ls_manifest_read(p, &m, err, sizeof err), LS_ERR_CORRUPT, "%s", err);
    cr_assert(strstr(err, "build_digest") != NULL, "%s", err);
}

/* Rewrites one receipt through a JSON edit (on the parsed document). */
static void edit_receipt(const char *rel, void (*fn)(cJSON *pred)) {
    char p[4200], err[300];
    path_of(p, sizeof p, rel);
    cJSON *doc = NULL;
    cr_assert_eq(ls_json_read_file(p, &doc, err, sizeof err), LS_OK);
    fn(cJSON_GetObjectItemCaseSensitive(doc, "predicate"));
    cr_assert_eq(ls_json_write_file(p, doc, err, sizeof err), LS_OK);
    cJSON_Delete(doc);
}

static void add_fraction(cJSON *pred) {
    cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pred, "build"),
                                                                   "artifacts"),
                                  0);
    cJSON_AddNumberToObject(a, "size", 1.5);
}
static void drop_model(cJSON *pred) {
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(pred, "config"), "model");
}
static void other_profile(cJSON *pred) {
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(pred, "profile"), "name",
                                           cJSON_CreateString("hybrid"));
}
static void big_int(cJSON *pred) {
    cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pred, "build"),
                                                                   "artifacts"),
                                  1);
    cJSON_AddNumberToObject(a, "size", 9007199254740992.0);
}

Test(receipts_v2, values_outside_the_contract_are_refused, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(run, &o);
    char p[4200], err[600] = "";
    ls_receipt *rc = NULL;
    path_of(p, sizeof p, "rank-0000/receipt.json");
    edit_receipt("rank-0000/receipt.json", add_fraction);
    cr_assert_eq(ls_receipt_read(p, &rc, err, sizeof err), LS_ERR_SCHEMA, "%s", err);
    cr_assert(strstr(err, "/predicate/build/artifacts/0/size") != NULL, "%s", err);
    teardown();
    setup();
    ls_v2_fixture_write(run, &o);
    edit_receipt("rank-0000/receipt.json", big_int);
    path_of(p, sizeof p, "rank-0000/receipt.json");
    ls_status st = ls_receipt_read(p, &rc, err, sizeof err);
    cr_assert(st == LS_ERR_SCHEMA || st == LS_ERR_CORRUPT, "%s", err);
    cr_assert(strstr(err, "artifacts/1/size") != NULL, "%s", err);
    teardown();
    setup();
    ls_v2_fixture_write(run, &o);
    edit_receipt("rank-0000/receipt.json", drop_model);
    path_of(p, sizeof p, "rank-0000/receipt.json");
    cr_assert_eq(ls_receipt_read(p, &rc, err, sizeof err), LS_ERR_SCHEMA, "%s", err);
    cr_assert(strstr(err, "model") != NULL, "%s", err);
}

Test(receipts_v2, profile_disagreeing_with_the_manifest_is_a_problem, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(run, &o);
    edit_receipt("rank-0001/receipt.json", other_profile);
    ls_verify_report rep = {0};
    char err[600] = "";
    cr_assert_eq(ls_manifest_verify(run, &rep, err, sizeof err), LS_ERR_CORRUPT);
    bool found = false;
    for (size_t i = 0; i < rep.count; i++)
        found |= rep.items[i].kind == LS_VERIFY_RECEIPT && strstr(rep.items[i].detail, "profile hybrid") != NULL;
    cr_assert(found, "the profile mismatch is not reported");
    ls_verify_report_free(&rep);
}

/* The digest function agrees with the shared vector and refuses a wrong
 * shape. */
Test(receipts_v2, build_digest_v2_of_the_vector) {
    cJSON *b = cJSON_Parse("{\"artifacts\":[{\"role\":\"interpreter\",\"name\":\"python3\",\"version\":\"3.11.2\","
                           "\"sha256\":\"ab\"},{\"role\":\"environment\",\"name\":\"OMP_NUM_THREADS\",\"value\":\"1\"},"
                           "{\"role\":\"source\",\"name\":\"examples/torch_cp\",\"dirty\":false,\"commit\":\"unknown\"}],"
                           "\"build_digest\":\"" LS_V2_FIXTURE_BUILD_DIGEST "\"}");
    char hex[LS_DIGEST_HEX_SIZE], err[300];
    cr_assert_eq(ls_build_info_digest_v2(b, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(hex, LS_V2_FIXTURE_BUILD_DIGEST);
    cr_assert_eq(ls_build_info_check_v2(b, err, sizeof err), LS_OK, "%s", err);
    cJSON_ReplaceItemInObjectCaseSensitive(b, "build_digest", cJSON_CreateString("00"));
    cr_assert_eq(ls_build_info_check_v2(b, err, sizeof err), LS_ERR_CORRUPT);
    cJSON_DeleteItemFromObjectCaseSensitive(b, "artifacts");
    cr_assert_eq(ls_build_info_digest_v2(b, hex, err, sizeof err), LS_ERR_FORMAT);
    cJSON_Delete(b);
}

#define VALIDATE LS_BINARY_DIR "/receipts/longstraw-validate"

/* Exit status of `longstraw-validate --v2 ARGS` (output kept in tmp/out). */
static int validate_v2(const char *args) {
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "%s --v2 %s > %s/out 2>&1", VALIDATE, args, tmp);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static bool out_has(const char *needle) {
    char p[4200], err[300];
    snprintf(p, sizeof p, "%s/out", tmp);
    char *b = NULL;
    size_t n = 0;
    cr_assert_eq(ls_json_read_bytes(p, &b, &n, err, sizeof err), LS_OK);
    bool found = strstr(b, needle) != NULL;
    if (!found) fprintf(stderr, "%s", b);
    free(b);
    return found;
}

Test(receipts_v2, validate_tool_checks_v2_files_and_runs, .init = setup, .fini = teardown) {
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(run, &o);
    char args[4 * 4200];
    snprintf(args, sizeof args, "%s %s/rank-0000/events.jsonl %s/rank-0001/receipt.json %s/manifest.json", run, run,
             run, run);
    cr_assert_eq(validate_v2(args), 0);
    cr_assert(out_has("valid (v2 run)"));
    teardown();
    setup();
    o.tamper_build = true;
    ls_v2_fixture_write(run, &o);
    snprintf(args, sizeof args, "%s/rank-0000/receipt.json", run);
    cr_assert_eq(validate_v2(args), 1);
    cr_assert(out_has("/predicate/build: build: build_digest"));
    teardown();
    setup();
    ls_v2_fixture o2 = {.bad_phase = "warmup"};
    ls_v2_fixture_write(run, &o2);
    snprintf(args, sizeof args, "%s", run); /* the run: its manifest verifies, rank 0's trace does not */
    cr_assert_eq(validate_v2(args), 1);
    cr_assert(out_has("\"warmup\" is not one of the header's phases"));
    cr_assert_eq(validate_v2("/nonexistent/x"), 2);
    cr_assert_eq(validate_v2(""), 2);
}

static void note_outside(void *user, const char *field, const char *detail) {
    char *buf = user;
    snprintf(buf + strlen(buf), 2000 - strlen(buf), "%s: %s\n", field, detail);
}

/* The dimensions of a coverage both tests state alike (a full-mode GRPO f64 run at CP 1 or 2), added to cov. */
static void add_common_coverage(cJSON *cov) {
    cJSON_AddItemToObject(cov, "train_modes", cJSON_Parse("[{\"train_mode\":\"full\"}]"));
    cJSON_AddItemToObject(cov, "objectives",
                          cJSON_Parse("[{\"objective\":\"grpo\",\"epsilon\":0.2,\"beta\":0.0,\"temperature\":1.0}]"));
    cJSON_AddItemToObject(cov, "grad_modes", cJSON_Parse("[\"full\"]"));
    cJSON_AddItemToObject(cov, "strategies", cJSON_Parse("[\"longstraw\"]"));
    cJSON_AddItemToObject(cov, "dtypes", cJSON_Parse("[\"f64\"]"));
    cJSON_AddItemToObject(cov, "worlds", cJSON_Parse("[1,2]"));
}

/* Coverage of a v2 configuration: the free model, digested by JCS. */
Test(receipts_v2, coverage_of_a_v2_config) {
    cJSON *cfg = cJSON_Parse("{\"objective\":\"grpo\",\"grad_mode\":\"full\",\"dtype\":\"f64\",\"cp_ranks\":2,"
                             "\"group\":2,\"steps_requested\":1,\"strategy\":\"longstraw\",\"faults\":[],\"n_layers\":1,"
                             "\"model\":{\"rms_eps\":1e-6,\"family\":\"torch-cp\",\"layers\":[\"attn\"],\"d_model\":8},"
                             "\"paths\":{\"responses\":[\"sampled\"],\"old_logprobs\":[\"computed\"],\"reference\":[\"none\"],\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[\"uneven\"],\"pages\":[\"cut\"],\"chunks\":[\"cut\"],\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]},\"train_mode\":\"full\",\"epsilon\":0.2,\"beta\":0.0,\"temperature\":1.0}");
    cr_assert(ls_coverage_config_is_v2(cfg));
    cJSON *model = ls_coverage_model(cfg);
    cr_assert(cJSON_Compare(model, cJSON_GetObjectItemCaseSensitive(cfg, "model"), true));
    /* the digest of the JCS text, written by hand */
    static const char JCS[] = "{\"d_model\":8,\"family\":\"torch-cp\",\"layers\":[\"attn\"],\"rms_eps\":0.000001}";
    char want[LS_DIGEST_HEX_SIZE], got[LS_DIGEST_HEX_SIZE], err[300];
    cr_assert_eq(ls_digest_sha256_hex(JCS, strlen(JCS), want), LS_OK);
    cr_assert_eq(ls_coverage_model_sha256_v2(model, got, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(got, want);
    cJSON *cov = cJSON_CreateObject();
    cJSON_AddItemToObject(cov, "model", model);
    cJSON_AddStringToObject(cov, "model_sha256", got);
    add_common_coverage(cov);
    cJSON *cp = cJSON_AddObjectToObject(cov, "paths");
    char perr[200];
    cr_assert_eq(ls_coverage_paths_add(cp, cfg, perr, sizeof perr), LS_OK, "%s", perr);
    char notes[2000] = "";
    cr_assert_eq(ls_coverage_check(cov, cfg, 2, note_outside, notes), 0, "%s", notes);
    /* a different model key, a key the run lacks, another world */
    cJSON *rm = cJSON_GetObjectItemCaseSensitive(cfg, "model");
    cJSON_ReplaceItemInObjectCaseSensitive(rm, "d_model", cJSON_CreateNumber(16));
    cJSON_DeleteItemFromObjectCaseSensitive(rm, "layers");
    notes[0] = '\0';
    cr_assert_eq(ls_coverage_check(cov, cfg, 4, note_outside, notes), 3, "%s", notes);
    cr_assert(strstr(notes, "d_model: the run's model has d_model 16, the report proved d_model 8") != NULL, "%s", notes);
    cr_assert(strstr(notes, "layers: the run's model has no layers") != NULL, "%s", notes);
    cr_assert(strstr(notes, "world: the run's 4 rank(s)") != NULL, "%s", notes);
    /* a model_sha256 that is not the JCS digest of the report's model is refused */
    cJSON_ReplaceItemInObjectCaseSensitive(cov, "model_sha256", cJSON_CreateString(want + 1));
    notes[0] = '\0';
    cr_assert_geq(ls_coverage_check(cov, cfg, 2, note_outside, notes), 1);
    cr_assert(strstr(notes, "model_sha256: the report's model_sha256 is not the digest of its model") != NULL, "%s",
              notes);
    cJSON_Delete(cov);
    cJSON_Delete(cfg);
}

/* The run's path is bound positively: every recorded decision must be one
 * the audit knows, every value one it knows and one the report's runs took;
 * a decision not recorded, or no path at all, is outside too. */
Test(receipts_v2, coverage_binds_the_runs_path) {
    const char *base = "{\"objective\":\"grpo\",\"grad_mode\":\"full\",\"dtype\":\"f64\",\"cp_ranks\":2,\"strategy\":"
                       "\"longstraw\",\"faults\":[],\"family\":\"hybrid\",\"d_model\":8,\"train_mode\":\"full\","
                       "\"epsilon\":0.2,\"beta\":0.0,\"temperature\":1.0,";
    const char *given = "\"paths\":{\"responses\":[\"given\"],\"old_logprobs\":[\"given\"],\"reference\":[\"given\"],"
                        "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[\"one\","
                        "\"uneven\"],\"pages\":[\"aligned\",\"cut\"],\"chunks\":[\"aligned\",\"cut\"],\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}}";
    char text[2000], err[300];
    snprintf(text, sizeof text, "%s%s", base, given);
    cJSON *report_run = cJSON_Parse(text);
    cr_assert_not_null(report_run);
    /* the report: the union of its runs' paths, sorted, each value once */
    cJSON *cov = cJSON_CreateObject(), *cp = cJSON_AddObjectToObject(cov, "paths");
    cr_assert_eq(ls_coverage_paths_add(cp, report_run, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_coverage_paths_add(cp, report_run, err, sizeof err), LS_OK, "%s", err);
    char *printed = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cp, "shards"));
    cr_assert_str_eq(printed, "[\"one\",\"uneven\"]");
    free(printed);
    cJSON_AddItemToObject(cov, "model", cJSON_Parse("{\"family\":\"hybrid\",\"d_model\":8}"));
    char msha[LS_DIGEST_HEX_SIZE];
    cr_assert_eq(ls_coverage_model_sha256(cJSON_GetObjectItemCaseSensitive(cov, "model"), msha, err, sizeof err), LS_OK);
    cJSON_AddStringToObject(cov, "model_sha256", msha);
    add_common_coverage(cov);
    char notes[2000] = "";
    cr_assert_eq(ls_coverage_check(cov, report_run, 2, note_outside, notes), 0, "%s", notes);
    /* the run sampled its responses and kept the reference: paths the report never ran */
    static const struct { const char *paths; size_t n; const char *want; } cases[] = {
        {"\"paths\":{\"responses\":[\"sampled\"],\"old_logprobs\":[\"computed\"],\"reference\":[\"kept\"],"
         "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[\"uneven\"],"
         "\"pages\":[\"cut\"],\"chunks\":[\"cut\"],\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}}",
         3, "reference: the run's reference \"kept\""},
        /* a decision the audit does not know (an option added later): deny by default */
        {"\"paths\":{\"responses\":[\"given\"],\"old_logprobs\":[\"given\"],\"reference\":[\"given\"],"
         "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[\"one\"],"
         "\"pages\":[\"aligned\"],\"chunks\":[\"aligned\"],\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"],\"sampler\":[\"nucleus\"]}}",
         1, "sampler: the run records a decision \"sampler\" the audit does not know"},
        /* a value the audit does not know, even where the report states it */
        {"\"paths\":{\"responses\":[\"given\"],\"old_logprobs\":[\"given\"],\"reference\":[\"given\"],"
         "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[\"one\"],"
         "\"pages\":[\"aligned\"],\"chunks\":[\"aligned\"],\"task\":[\"chess\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}}",
         1, "task: the run's task \"chess\" is a value the audit does not know"},
        /* a decision not recorded */
        {"\"paths\":{\"responses\":[\"given\"],\"old_logprobs\":[\"given\"],\"reference\":[\"given\"],"
         "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[\"one\"],"
         "\"pages\":[\"aligned\"],\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}}",
         1, "chunks: the run does not record its \"chunks\""},
        /* no path at all (a run written before paths were recorded) */
        {"\"nothing\":0}", 1, "paths: the run does not record its path"},
        /* a value of another type */
        {"\"paths\":{\"responses\":[\"given\"],\"old_logprobs\":[\"given\"],\"reference\":[\"given\"],"
         "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],\"shards\":[1],"
         "\"pages\":[\"aligned\"],\"chunks\":[\"aligned\"],\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}}",
         1, "shards: the run's paths.shards holds a value that is not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s%s", base, cases[i].paths);
        cJSON *run = cJSON_Parse(text);
        cr_assert_not_null(run, "case %zu", i);
        notes[0] = '\0';
        cr_expect_eq(ls_coverage_check(cov, run, 2, note_outside, notes), cases[i].n, "case %zu: %s", i, notes);
        cr_expect(strstr(notes, cases[i].want) != NULL, "case %zu: %s", i, notes);
        cJSON_Delete(run);
    }
    /* a report made before paths were recorded covers no path */
    cJSON_DeleteItemFromObjectCaseSensitive(cov, "paths");
    notes[0] = '\0';
    cr_expect_eq(ls_coverage_check(cov, report_run, 2, note_outside, notes), 1, "%s", notes);
    cr_expect(strstr(notes, "the report's coverage states no \"paths\"") != NULL, "%s", notes);
    /* ls_coverage_paths_add refuses a configuration without a path */
    cJSON *none = cJSON_Parse("{\"paths\":[1]}");
    cr_expect_eq(ls_coverage_paths_add(cp = cJSON_CreateObject(), none, err, sizeof err), LS_ERR_ARG);
    cr_expect(strstr(err, "no \"paths\" object") != NULL, "%s", err);
    cJSON_Delete(cp);
    cJSON_Delete(none);
    cJSON_Delete(cov);
    cJSON_Delete(report_run);
}
