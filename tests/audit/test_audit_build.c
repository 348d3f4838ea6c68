/* test_audit_build.c - parity.build and longstraw-audit diff name what differs
 * between two builds (receipts/format/build_diff.h), on the hand-written v2 run of
 * test_v2_fixture.h whose build identity is rewritten here (receipts and
 * manifest, their digests recomputed: the run stays valid) to hold the
 * emitter's source artifact with its files map:
 *  - a parity report recording a build that differs from the run's in one
 *    file of that artifact: parity.build fails, its evidence names the
 *    digests, the artifact and the file, its message the difference too;
 *  - the same report whose build object no longer matches its build_digest:
 *    that is said, and nothing of the object is trusted;
 *  - a report without a build object (made before it was recorded): the
 *    digests alone, as before; a report of the run's own build passes;
 *  - two runs of those two builds under longstraw-audit diff: the build
 *    divergence names the artifact and the file, its key the file's path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "audit/report/diff.h"
#include "receipts/format/build_info.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "tests/support/test_receipts_support.h"
#include "tests/support/test_v2_fixture.h"
#include "tests/audit/test_audit_support.h"

/* the shared rule look-ups (test_audit_support.c) under the names this file uses */
#define rule ls_test_audit_rule

#define HA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HE "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"

/* The run's artifacts and the report's: the emitter's source tree differs in run.py. */
static const char RUN_ARTIFACTS[] =
    "[{\"role\":\"interpreter\",\"name\":\"python3\",\"version\":\"3.11.2\",\"sha256\":\"ab\"},"
    "{\"role\":\"source\",\"name\":\"longstraw_emit\",\"sha256\":\"" HE "\",\"files\":{\"build.py\":\"" HE
    "\",\"run.py\":\"" HB "\"}}]";
static const char REPORT_ARTIFACTS[] =
    "[{\"role\":\"interpreter\",\"name\":\"python3\",\"version\":\"3.11.2\",\"sha256\":\"ab\"},"
    "{\"role\":\"source\",\"name\":\"longstraw_emit\",\"sha256\":\"" HA "\",\"files\":{\"build.py\":\"" HE
    "\",\"run.py\":\"" HA "\"}}]";

LS_TEST_SCRATCH

/* {"artifacts": artifacts, "build_digest": its digest} */
static cJSON *build_of(const char *artifacts, char hex[LS_DIGEST_HEX_SIZE]) {
    cJSON *b = cJSON_CreateObject();
    cJSON *a = cJSON_Parse(artifacts);
    cr_assert_not_null(a);
    cJSON_AddItemToObject(b, "artifacts", a);
    char err[300];
    cr_assert_eq(ls_build_info_digest_v2(b, hex, err, sizeof err), LS_OK, "%s", err);
    cJSON_AddStringToObject(b, "build_digest", hex);
    return b;
}

static void set_predicate_build(const char *path, const cJSON *build) {
    cJSON *doc = NULL;
    char err[300];
    cr_assert_eq(ls_json_read_file(path, &doc, err, sizeof err), LS_OK, "%s", err);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "predicate"), "build",
                                           cJSON_Duplicate(build, 1));
    cr_assert_eq(ls_json_write_file(path, doc, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(doc);
}

/* The fixture run at tmp/name, its build identity replaced by artifacts (every receipt and the manifest,
 * the manifest's subjects re-digested). */
static void run_with(const char *name, const char *artifacts, char dir[600], char hex[LS_DIGEST_HEX_SIZE]) {
    snprintf(dir, 600, "%s/%s", tmp, name);
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(dir, &o);
    cJSON *b = build_of(artifacts, hex);
    char p[700], err[300];
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/rank-%04d/receipt.json", dir, r);
        set_predicate_build(p, b);
    }
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    set_predicate_build(p, b);
    cJSON *m = NULL;
    cr_assert_eq(ls_json_read_file(p, &m, err, sizeof err), LS_OK, "%s", err);
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(m, "subject")) {
        char f[700], d[LS_DIGEST_HEX_SIZE];
        snprintf(f, sizeof f, "%s/%s", dir, cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring);
        cr_assert_eq(ls_digest_sha256_file_hex(f, d, err, sizeof err), LS_OK, "%s", err);
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "digest"), "sha256",
                                               cJSON_CreateString(d));
    }
    cr_assert_eq(ls_json_write_file(p, m, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(m);
    cJSON_Delete(b);
}

/* A schema-valid parity report (only parity.build is read here) naming digest, with build (NULL: none,
 * as reports before it was recorded); its path into path. */
static void report_with(const char *digest, const cJSON *build, char path[700]) {
    snprintf(path, 700, "%s/parity.json", tmp);
    char text[4096];
    snprintf(text, sizeof text,
             "{\"schema\":\"urn:longstraw:schema:parity:v2\",\"build_digest\":\"%s\",\"family\":\"torch-cp\","
             "\"dtypes\":[\"f64\"],\"worlds\":[1,2],\"trainer\":\"fixture\",\"model_config\":\"fixture\",\"fd_step\":1e-4,"
             "\"created_unix_ns\":0,\"configurations\":[{\"name\":\"c\",\"what\":\"\",\"prompt_len\":9,\"group\":2,"
             "\"response_lens\":[3,5]}],\"checks\":[{\"name\":\"c\",\"kind\":\"logprob\",\"dtype\":\"f64\",\"world\":2,"
             "\"configuration\":\"c\",\"reference\":\"r\",\"candidate\":\"c\",\"max_abs_err\":0,\"max_rel_err\":0,"
             "\"tolerance\":1e-10,\"worst\":\"t\",\"pass\":true}],\"controls\":[],\"links\":[],\"levels\":[],"
             "\"timings\":[],\"notes\":[],\"pass\":true}",
             digest);
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc);
    if (build != NULL) cJSON_AddItemToObject(doc, "build", cJSON_Duplicate(build, 1));
    char err[300];
    cr_assert_eq(ls_json_write_file(path, doc, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(doc);
}

static ls_audit_run *audit(const char *run_dir, const char *parity) {
    ls_audit_options opt = {.run_dir = run_dir, .parity_path = parity};
    ls_audit_run *run = NULL;
    char err[400] = "";
    cr_assert_eq(ls_audit_load(&opt, &run, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_audit_evaluate(run), LS_OK);
    cr_assert_not_null(run->parity, "the report was not read: %s", run->parity_err);
    return run;
}


/* every evidence detail of r, one per line, into buf */
static const char *details(const ls_audit_rule *r, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < r->n_ev && o + 1 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s\n", r->ev[i].detail);
    return buf;
}

Test(audit_build, parity_build_names_the_artifact_and_the_file, .init = setup, .fini = teardown) {
    char run_dir[600], rep[700], hr[LS_DIGEST_HEX_SIZE], hp[LS_DIGEST_HEX_SIZE], all[4096];
    run_with("run", RUN_ARTIFACTS, run_dir, hr);
    cJSON *b = build_of(REPORT_ARTIFACTS, hp);
    cr_assert_str_neq(hr, hp);
    report_with(hp, b, rep);
    ls_audit_run *run = audit(run_dir, rep);
    cr_assert_str_eq(run->build_digest, hr);
    const ls_audit_rule *r = rule(run, "parity.build");
    cr_assert(r->applicable && !r->pass, "%s", r->message);
    details(r, all, sizeof all);
    char want[400];
    snprintf(want, sizeof want, "the parity report is from build %s, the run is %s: ", hp, hr);
    cr_expect(strncmp(r->ev[0].detail, want, strlen(want)) == 0, "%s", all);
    cr_expect(strstr(r->ev[0].detail, "artifact source longstraw_emit: file run.py differs (aaaaaaaaaaaa.. vs "
                                      "bbbbbbbbbbbb..)") != NULL, "%s", all);
    /* the tree digest follows as its own line; build.py (the same) is not named */
    cr_expect(strstr(all, "artifact source longstraw_emit: sha256 aaaaaaaaaaaa.. vs eeeeeeeeeeee..") != NULL, "%s", all);
    cr_expect(strstr(all, "build.py") == NULL, "%s", all);
    cr_expect(strstr(r->message, "2 differences") != NULL && strstr(r->message, "file run.py differs") != NULL, "%s",
              r->message);
    /* the verdict is the digests': not usable, level 1 */
    cr_expect(!rule(run, "parity.controls")->pass);
    ls_audit_free(run);
    cJSON_Delete(b);
}

Test(audit_build, a_report_build_object_not_its_digest_is_not_trusted, .init = setup, .fini = teardown) {
    char run_dir[600], rep[700], hr[LS_DIGEST_HEX_SIZE], hp[LS_DIGEST_HEX_SIZE], all[4096];
    run_with("run", RUN_ARTIFACTS, run_dir, hr);
    cJSON *b = build_of(REPORT_ARTIFACTS, hp);
    /* the object edited after its digest: one file made the run's */
    cJSON *files = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(b, "artifacts"), 1), "files");
    cJSON_ReplaceItemInObjectCaseSensitive(files, "run.py", cJSON_CreateString(HB));
    report_with(hp, b, rep);
    ls_audit_run *run = audit(run_dir, rep);
    const ls_audit_rule *r = rule(run, "parity.build");
    cr_assert(!r->pass);
    details(r, all, sizeof all);
    cr_expect(strstr(all, "the report's build object does not match its build_digest (recomputed as its readers do: ") !=
                  NULL, "%s", all);
    cr_expect(strstr(all, "run.py") == NULL, "nothing of an untrusted object is named: %s", all);
    ls_audit_free(run);
    /* a build object whose build_digest is not the report's */
    cJSON_Delete(b);
    char other[LS_DIGEST_HEX_SIZE];
    b = build_of(RUN_ARTIFACTS, other);
    report_with(hp, b, rep);
    run = audit(run_dir, rep);
    r = rule(run, "parity.build");
    cr_assert(!r->pass);
    details(r, all, sizeof all);
    cr_expect(strstr(all, "the report's build object does not match its build_digest (its build_digest") != NULL, "%s",
              all);
    ls_audit_free(run);
    cJSON_Delete(b);
}

Test(audit_build, an_older_report_keeps_the_digests_and_the_same_build_passes, .init = setup, .fini = teardown) {
    char run_dir[600], rep[700], hr[LS_DIGEST_HEX_SIZE], hp[LS_DIGEST_HEX_SIZE];
    run_with("run", RUN_ARTIFACTS, run_dir, hr);
    cJSON *b = build_of(REPORT_ARTIFACTS, hp);
    report_with(hp, NULL, rep);
    ls_audit_run *run = audit(run_dir, rep);
    const ls_audit_rule *r = rule(run, "parity.build");
    cr_assert(!r->pass);
    char want[400];
    snprintf(want, sizeof want, "the parity report is from build %s, the run is %s", hp, hr);
    cr_expect_str_eq(r->ev[0].detail, want);
    cr_expect_eq(r->n_ev, 1);
    ls_audit_free(run);
    cJSON_Delete(b);
    /* the run's own build, recorded: passes (the build object is not needed) */
    b = build_of(RUN_ARTIFACTS, hp);
    report_with(hp, b, rep);
    run = audit(run_dir, rep);
    r = rule(run, "parity.build");
    cr_expect(r->pass, "%s", r->message);
    ls_audit_free(run);
    cJSON_Delete(b);
}

Test(audit_build, diff_names_the_artifact_and_the_file, .init = setup, .fini = teardown) {
    char a[600], b[600], ha[LS_DIGEST_HEX_SIZE], hb[LS_DIGEST_HEX_SIZE], err[1024] = "";
    run_with("a", REPORT_ARTIFACTS, a, ha);
    run_with("b", RUN_ARTIFACTS, b, hb);
    cJSON *doc = NULL;
    int verdict = -1;
    cr_assert_eq(ls_audit_diff_runs(a, b, NULL, &doc, &verdict, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(verdict, LS_AUDIT_DIFF_DIFFERENT);
    const cJSON *d, *build = NULL;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(doc, "divergences"))
        if (strcmp(cJSON_GetObjectItemCaseSensitive(d, "what")->valuestring, "build") == 0) build = d;
    char *txt = cJSON_Print(doc);
    cr_assert_not_null(build, "no build divergence: %s", txt);
    const char *detail = cJSON_GetObjectItemCaseSensitive(build, "detail")->valuestring;
    cr_expect(strstr(detail, ha) != NULL && strstr(detail, hb) != NULL, "%s", detail);
    cr_expect(strstr(detail, "artifact source longstraw_emit: file run.py differs (aaaaaaaaaaaa.. vs bbbbbbbbbbbb..)") !=
                  NULL, "%s", detail);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(build, "key")->valuestring,
                     "artifacts[source longstraw_emit].files[run.py]");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(build, "a"), "value")->valuestring,
                     "aaaaaaaaaaaa..");
    free(txt);
    cJSON_Delete(doc);
}
