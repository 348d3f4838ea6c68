/* test_audit.c - longstraw-audit against runs the trainer makes (single rank
 * and, with MPI, CP-2 under mpirun) and against damaged copies of them: each
 * damage is detected by the rule that owns it, with the rank, file and event
 * seq as evidence; exit codes; the JSON report valid against its schema; the
 * JUnit report one testcase per rule.
 *
 * Fixtures are made once per test binary run in /tmp/ls-audit-fix-PID (PID:
 * the Criterion runner's) and removed by a POST_ALL hook; every test copies
 * the fixture it damages into its own scratch directory. */
#include "receipts/format/coverage.h"

#define SIGN LS_BINARY_DIR "/receipts/longstraw-sign"
#define TRAIN_ARGS "--config " CFG " --prompt-len 64 --quiet"

#include "tests/support/test_cli_util.h"
#include "tests/support/test_parity_report.h"

LS_TEST_CLI_TMPDIR("audit")

LS_TEST_FIXTURE_ROOT("/tmp/ls-audit-fix-%d")

/* The fixture `name`, made with `train` (a trainer command line ending in
 * --out) the first time it is asked for (under ls_test_fixture_lock); its
 * path into out.  want_rc < 0: any non-zero exit. */
static void fixture(const char *name, const char *train, int want_rc, char *out, size_t cap) {
    int lfd = fixture_claim(name, out, cap);
    if (lfd < 0) return;
    char cmd[4096], tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && %s '%s' >'%s.log' 2>&1", tmp, train, tmp, out);
    int rc = sh(cmd);
    if (want_rc < 0)
        cr_assert_neq(rc, 0, "%s: exit 0, expected a failure", cmd);
    else
        cr_assert_eq(rc, want_rc, "%s: exit %d, expected %d", cmd, rc, want_rc);
    cr_assert_eq(rename(tmp, out), 0, "rename %s", tmp);
    close(lfd); /* releases the lock */
}

static void single_run(char *out, size_t cap) {
    fixture("single", TRAIN " " TRAIN_ARGS " --steps 2 --out", 0, out, cap);
}

#if defined(LS_MPIEXEC)
#define MPI_PREFIX "OMP_NUM_THREADS=1 timeout 120 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 " TRAIN " " TRAIN_ARGS
static void cp2_run(char *out, size_t cap) {
    fixture("cp2", MPI_PREFIX " --steps 2 --grad-mode full --out", 0, out, cap);
}
#endif

/* A copy of src in the test's scratch directory. */
static void copy_run(const char *src, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", src, out);
    cr_assert_eq(sh(cmd), 0);
}

/* Runs the audit with --json into the scratch dir; returns the exit status
 * and the parsed report (schema-checked) in *doc (NULL when none). */
static int audit(const char *run, const char *extra, cJSON **doc) {
    char cmd[4096], json[512];
    snprintf(json, sizeof json, "%s/report.json", tmpdir);
    unlink(json);
    snprintf(cmd, sizeof cmd, "%s '%s' --json '%s' %s >'%s/audit.out' 2>'%s/audit.err'", AUDIT, run, json,
             extra ? extra : "", tmpdir, tmpdir);
    int rc = sh(cmd);
    if (doc == NULL) return rc;
    *doc = NULL;
    if (rc == 2) return rc;
    *doc = read_valid_json(json, "audit-report");
    return rc;
}


static bool passes(const cJSON *doc, const char *id) {
    return cJSON_IsTrue(cJSON_GetObjectItem(report_rule(doc, id), "pass"));
}

static int level(const cJSON *doc) { return cJSON_GetObjectItem(doc, "level")->valueint; }

/* The rule fails with an evidence item naming rank (-1: any), a file ending
 * in file (NULL: any), seq (-2: any; -1: must have one) and containing text
 * (NULL: any). */
static void expect_fail(const cJSON *doc, const char *id, int rank, const char *file, long long seq,
                        const char *text) {
    const cJSON *r = report_rule(doc, id);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "pass")), "rule %s passes; expected it to fail", id);
    const cJSON *e;
    char seen[2048] = "";
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "evidence")) {
        const cJSON *er = cJSON_GetObjectItem(e, "rank"), *es = cJSON_GetObjectItem(e, "seq");
        const char *ef = cJSON_GetObjectItem(e, "file")->valuestring;
        const cJSON *ed = cJSON_GetObjectItem(e, "detail");
        const char *d = ed ? ed->valuestring : "";
        size_t l = strlen(seen);
        snprintf(seen + l, sizeof seen - l, "[%d %s %lld %s] ", er ? er->valueint : -1, ef,
                 es ? (long long)es->valuedouble : -1LL, d);
        if (rank >= 0 && (!er || er->valueint != rank)) continue;
        if (file && (strlen(ef) < strlen(file) || strcmp(ef + strlen(ef) - strlen(file), file) != 0)) continue;
        if (seq == -1 && !es) continue;
        if (seq >= 0 && (!es || (long long)es->valuedouble != seq)) continue;
        if (text && !strstr(d, text)) continue;
        return;
    }
    cr_assert_fail("rule %s: no evidence with rank %d, file %s, seq %lld, text '%s'; evidence: %s", id, rank,
                   file ? file : "*", seq, text ? text : "*", seen);
}

/* Rewrites a trace: every line through fn (which may drop it: return 0, or
 * write its own lines), seq renumbered when renumber. */
typedef int (*line_fn)(const char *line, FILE *out, long idx, void *user);
static void rewrite_trace(const char *path, line_fn fn, void *user, bool renumber) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "zstd -q -dc '%s'", path);
    FILE *in = popen(cmd, "r");
    cr_assert_not_null(in);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.plain", path);
    FILE *out = fopen(tmp, "w");
    cr_assert_not_null(out);
    static char line[1 << 20];
    long idx = 0, seq = 0;
    while (fgets(line, sizeof line, in)) {
        char buf[1 << 16];
        FILE *mem = fmemopen(buf, sizeof buf, "w");
        int keep = fn(line, mem, idx++, user);
        if (keep) fputs(line, mem);
        fclose(mem);
        for (char *p = buf, *nl; *p; p = nl + 1) { /* renumber each line written */
            nl = strchr(p, '\n');
            if (!nl) break;
            *nl = 0;
            char *s = strstr(p, "\"seq\":");
            if (renumber && s && strncmp(p, "{\"v\":1,\"rank\"", 13) == 0) {
                char *e = s + 6;
                while (*e >= '0' && *e <= '9') e++;
                fprintf(out, "%.*s\"seq\":%ld%s\n", (int)(s - p), p, seq++, e);
            } else {
                fprintf(out, "%s\n", p);
            }
        }
    }
    cr_assert_eq(pclose(in), 0);
    fclose(out);
    snprintf(cmd, sizeof cmd, "zstd -q -f --rm '%s' -o '%s'", tmp, path);
    cr_assert_eq(sh(cmd), 0);
}

/* ---- positive fixtures ---------------------------------------------------- */

Test(audit, single_rank_run_proves_level_1, .init = setup, .fini = teardown, .timeout = 120) {
    char run[512];
    single_run(run, sizeof run);
    cJSON *doc = NULL;
    cr_assert_eq(audit(run, "--require-level 1", &doc), 0);
    cr_expect_eq(level(doc), 1);
    const cJSON *lv = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "levels"), 0);
    const cJSON *c;
    int n1 = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(lv, "checks")) {
        n1++;
        bool applies = cJSON_IsTrue(cJSON_GetObjectItem(c, "applicable"));
        const char *verdict = cJSON_GetObjectItem(c, "verdict")->valuestring;
        /* a rule that does not apply never reads as a pass */
        cr_expect_str_eq(verdict, applies ? "pass" : "not_applicable", "level-1 rule %s: %s",
                         cJSON_GetObjectItem(c, "id")->valuestring, cJSON_GetObjectItem(c, "message")->valuestring);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(c, "pass")) == applies, "level-1 rule %s: pass %d, applicable %d",
                  cJSON_GetObjectItem(c, "id")->valuestring, cJSON_IsTrue(cJSON_GetObjectItem(c, "pass")), applies);
    }
    cr_expect_geq(n1, 14);
    /* cross-rank rules do not apply to one rank */
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(report_rule(doc, "collectives.match"), "applicable")));
    expect_fail(doc, "parity.build", -1, "parity.json", -2, "no parity report");
    cJSON_Delete(doc);
    cr_expect_eq(audit(run, "--require-level 2", NULL), 1);
    cr_expect_eq(audit(run, "--require-level 0 --quiet", NULL), 0);
    /* JUnit: one testcase per rule, a failure per failed applicable rule */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s '%s' --quiet --junit '%s/j.xml' --require-level 0", AUDIT, run, tmpdir);
    cr_assert_eq(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "test $(grep -c '<testcase ' '%s/j.xml') -eq 41 && test $(grep -c '<failure ' '%s/j.xml') -eq 11",
             tmpdir, tmpdir);
    cr_expect_eq(sh(cmd), 0, "JUnit: 41 testcases (profile.match, passing: the run pins its profile; run.invariants; "
                 "run.probe, not applicable: no step probed; steps.sequence; parity.dp_grad, not applicable: no "
                 "data-parallel replicas), 11 failures (10 parity rules, full mode; parity.decisions not applicable to "
                 "hybrid) expected");
    snprintf(cmd, sizeof cmd, "python3 -c \"import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])\" '%s/j.xml'",
             tmpdir);
    cr_expect_eq(sh(cmd), 0, "the JUnit file is not well-formed XML");
}

Test(audit, unusable_input_and_bad_usage_exit_2, .init = setup, .fini = teardown) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s/no-such-run 2>%s/e.txt", AUDIT, tmpdir, tmpdir);
    cr_expect_eq(sh(cmd), 2);
    snprintf(cmd, sizeof cmd, "grep -q 'no-such-run' %s/e.txt", tmpdir);
    cr_expect_eq(sh(cmd), 0, "the reason names the directory");
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", AUDIT, tmpdir); /* an empty directory */
    cr_expect_eq(sh(cmd), 2);
    cr_expect_eq(sh(AUDIT " 2>/dev/null"), 2);
    cr_expect_eq(sh(AUDIT " /tmp --require-level 5 2>/dev/null"), 2);
    cr_expect_eq(sh(AUDIT " /tmp --bogus 2>/dev/null"), 2);
    cr_expect_eq(sh(AUDIT " --help >/dev/null"), 0);
}

/* ---- damage to a single-rank run ----------------------------------------- */

static void flip_byte(const char *path, long off_from_end_or_start, bool from_end) {
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    long off = from_end ? n - off_from_end_or_start : off_from_end_or_start;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

Test(audit, flipped_byte_in_a_receipt, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], p[800];
    single_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/receipt.json", run);
    flip_byte(p, 40, false); /* inside the document */
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "manifest.digests", 0, "rank-0000/receipt.json", -2, "sha256");
    cr_expect_eq(level(doc), 0);
    cJSON_Delete(doc);
}

Test(audit, tampered_receipt_value, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], cmd[1600];
    single_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    /* a schema-valid lie: one step fewer prefix-frozen... here: the events count */
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['predicate']['events']['count']-=1; "
             "json.dump(d,open(p,'w'))\" '%s/rank-0000/receipt.json'",
             run);
    cr_assert_eq(sh(cmd), 0);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "manifest.digests", 0, "rank-0000/receipt.json", -2, "sha256");
    expect_fail(doc, "trace.valid", 0, "rank-0000/events.jsonl.zst", -1, "the receipt says");
    cJSON_Delete(doc);
}

Test(audit, flipped_byte_in_the_manifest, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], cmd[1600];
    single_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    /* a digest character changed: the manifest parses, the file no longer matches */
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); i=b.index(b'sha256')+10; "
             "b[i]=ord('0') if b[i]!=ord('0') else ord('1'); open(p,'wb').write(b)\" '%s/manifest.json'",
             run);
    cr_assert_eq(sh(cmd), 0);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "manifest.digests", 0, "rank-0000/events.jsonl.zst", -2, "the manifest says");
    cJSON_Delete(doc);
    /* a structural byte: the manifest is invalid */
    char p[800];
    snprintf(p, sizeof p, "%s/manifest.json", run);
    flip_byte(p, 0, false); /* '{' -> 'z' */
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "manifest.valid", -1, "manifest.json", -2, NULL);
    cJSON_Delete(doc);
}

Test(audit, flipped_byte_in_a_trace, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], p[800];
    single_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    flip_byte(p, 2000, true);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "manifest.digests", 0, "rank-0000/events.jsonl.zst", -2, "sha256");
    /* a one-step run's trace is one zstd frame: none of it is delivered */
    expect_fail(doc, "trace.valid", 0, "rank-0000/events.jsonl.zst", -2, "is corrupt");
    cJSON_Delete(doc);
}

Test(audit, truncated_trace, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], p[800];
    single_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    cr_assert_eq(truncate(p, sb.st_size / 2), 0);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "trace.valid", 0, "rank-0000/events.jsonl.zst", -1, "truncated");
    expect_fail(doc, "rank.complete", 0, "rank-0000/events.jsonl.zst", -1, "never completed");
    cJSON_Delete(doc);
}

static int dup_line(const char *line, FILE *out, long idx, void *user) {
    (void)user;
    if (idx == 20) fputs(line, out); /* written twice */
    return 1;
}
static int swap_lines(const char *line, FILE *out, long idx, void *user) {
    static char held[1 << 16];
    (void)user;
    if (idx == 20) {
        snprintf(held, sizeof held, "%s", line);
        return 0;
    }
    fputs(line, out);
    if (idx == 21) fputs(held, out);
    return 0;
}

Test(audit, duplicated_and_reordered_events, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], p[800];
    single_run(src, sizeof src);
    copy_run(src, "d", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    rewrite_trace(p, dup_line, NULL, false);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "trace.valid", 0, "rank-0000/events.jsonl.zst", 19, "seq_duplicate");
    cJSON_Delete(doc);
    copy_run(src, "o", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    rewrite_trace(p, swap_lines, NULL, false);
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "trace.valid", 0, "rank-0000/events.jsonl.zst", -1, "seq_");
    cJSON_Delete(doc);
}

Test(audit, signature_checked_with_key, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], cmd[2400];
    single_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    snprintf(cmd, sizeof cmd,
             "%s keygen --private %s/a.pem --public %s/a.pub >/dev/null && %s keygen --private %s/b.pem --public "
             "%s/b.pub >/dev/null && %s sign %s --key %s/a.pem >/dev/null",
             SIGN, tmpdir, tmpdir, SIGN, tmpdir, tmpdir, SIGN, run, tmpdir);
    cr_assert_eq(sh(cmd), 0);
    cJSON *doc = NULL;
    snprintf(cmd, sizeof cmd, "--key %s/a.pub", tmpdir);
    cr_expect_eq(audit(run, cmd, &doc), 0);
    cr_expect(passes(doc, "manifest.signature"));
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(report_rule(doc, "manifest.signature"), "applicable")));
    cJSON_Delete(doc);
    snprintf(cmd, sizeof cmd, "--key %s/b.pub", tmpdir); /* the wrong key */
    cr_expect_eq(audit(run, cmd, &doc), 1);
    expect_fail(doc, "manifest.signature", -1, "manifest.dsse.json", -2, NULL);
    cr_expect_eq(level(doc), 0);
    cJSON_Delete(doc);
}

/* The coverage longstraw-parity would state for runs like the one in
 * run_dir (its manifest's configuration), at CP sizes 1 and world. */
static cJSON *coverage_like(const char *run_dir, const char *build, int world) {
    char path[700], err[512];
    snprintf(path, sizeof path, "%s/manifest.json", run_dir);
    cJSON *m = NULL;
    cr_assert_eq(ls_json_read_file_capped(path, 1 << 24, &m, err, sizeof err), LS_OK, "%s", err);
    const cJSON *cfg = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "predicate"), "config");
    cJSON *cov = cJSON_CreateObject(), *model = ls_coverage_model(cfg);
    char hex[65];
    cr_assert_eq(ls_coverage_model_sha256(model, hex, err, sizeof err), LS_OK, "%s", err);
    cJSON_AddStringToObject(cov, "family", cJSON_GetObjectItem(cfg, "family")->valuestring);
    cJSON_AddItemToObject(cov, "model", model);
    cJSON_AddStringToObject(cov, "model_sha256", hex);
    cJSON *tm = cJSON_AddArrayToObject(cov, "train_modes");
    cJSON_AddItemToArray(tm, ls_coverage_train_mode(cfg, err, sizeof err));
    cJSON_AddItemToObject(cov, "objectives", ls_coverage_objectives(cfg, err, sizeof err));
    cJSON *gm = cJSON_AddArrayToObject(cov, "grad_modes");
    cJSON_AddItemToArray(gm, cJSON_CreateString("detached"));
    cJSON_AddItemToArray(gm, cJSON_CreateString("full"));
    cJSON_AddItemToObject(cov, "strategies", cJSON_CreateStringArray((const char *[]){"longstraw"}, 1));
    cJSON_AddItemToObject(cov, "dtypes", cJSON_CreateStringArray((const char *[]){"f64", "f32"}, 2));
    cJSON_AddItemToObject(cov, "worlds", cJSON_CreateIntArray((const int[]){1, world}, world > 1 ? 2 : 1));
    cJSON *paths = cJSON_AddObjectToObject(cov, "paths"); /* the run's own path, exercised */
    cr_assert_eq(ls_coverage_paths_add(paths, cfg, err, sizeof err), LS_OK, "%s", err);
    cJSON_AddStringToObject(cov, "build_digest", build);
    cJSON_AddStringToObject(cov, "reducible", "lengths");
    cJSON_Delete(m);
    return cov;
}

/* A parity report written by hand: a TEST FIXTURE for the level logic only
 * (longstraw-parity's own reports are test_parity's and test_parity_table's),
 * naming the given build digest and covering runs like run_dir's: every
 * kind of check passing for world and the run's dtype (f32), the float64
 * links at world 1, every control detected. */
static void write_parity_fixture(const char *path, const char *build, int world, const char *family,
                                 const char *run_dir) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "schema", "urn:longstraw:schema:parity:v3");
    cJSON_AddItemToObject(d, "coverage", coverage_like(run_dir, build, world));
    cJSON_AddStringToObject(d, "build_digest", build);
    cJSON_AddStringToObject(d, "family", family);
    cJSON_AddItemToObject(d, "dtypes", cJSON_CreateStringArray((const char *[]){"f64", "f32"}, 2));
    cJSON_AddItemToObject(d, "worlds", cJSON_CreateIntArray((const int[]){1, world}, world > 1 ? 2 : 1));
    cJSON_AddStringToObject(d, "trainer", "fixture");
    cJSON_AddStringToObject(d, "model_config", "fixture");
    cJSON_AddNumberToObject(d, "fd_step", 1e-4);
    cJSON_AddNumberToObject(d, "created_unix_ns", 0);
    cJSON *cfg = cJSON_Parse("[{\"name\":\"fixture\",\"what\":\"\",\"prompt_len\":30,\"group\":2,"
                             "\"response_lens\":[3,5],\"train_mode\":\"lora\",\"page_size\":8,\"capture_chunk\":12}]");
    cJSON_AddItemToObject(d, "configurations", cfg);
    cJSON *checks = cJSON_AddArrayToObject(d, "checks"), *controls = cJSON_AddArrayToObject(d, "controls");
    /* decisions (the mla forward's near-tie check) only for mla */
    static const char *const kinds[] = {"logprob", "cp_grad", "cp_params", "grad", "ref_logprob", "fd_grad", "ref_loss",
                                        "decisions"};
    bool decides = strcmp(family, "mla") == 0;
    for (int k = 0; k < (decides ? 8 : 7); k++) {
        bool link = k >= 4;
        cJSON *c = cJSON_CreateObject();
        char name[64];
        snprintf(name, sizeof name, "fixture-%s", kinds[k]);
        cJSON_AddStringToObject(c, "name", name);
        cJSON_AddStringToObject(c, "kind", kinds[k]);
        cJSON_AddStringToObject(c, "dtype", link ? "f64" : "f32");
        cJSON_AddNumberToObject(c, "world", link ? 1 : world);
        cJSON_AddStringToObject(c, "configuration", "fixture");
        cJSON_AddStringToObject(c, "reference", "fixture");
        cJSON_AddStringToObject(c, "candidate", "fixture");
        cJSON_AddNumberToObject(c, "max_abs_err", 0);
        cJSON_AddNumberToObject(c, "max_rel_err", 0);
        cJSON_AddNumberToObject(c, "tolerance", 1e-10);
        cJSON_AddStringToObject(c, "worst", "t");
        cJSON_AddBoolToObject(c, "pass", 1);
        cJSON_AddItemToArray(checks, c);
    }
    static const char *const faults_hybrid[][2] = {{"cp-local-attention", "logprob"}, {"skip-dkv-reduce", "cp_grad"},
                                                   {"skip-grad-finalize", "cp_grad"}, {"detached", "grad"}};
    static const char *const faults_mla[][2] = {{"cp-local-dsa", "logprob"}, {"skip-grad-finalize", "cp_grad"},
                                                {"detached", "grad"}};
    bool mla = decides;
    const char *const(*faults)[2] = mla ? faults_mla : faults_hybrid;
    for (int k = 0; k < (mla ? 3 : 4); k++) {
        cJSON *cmp = cJSON_Duplicate(cJSON_GetArrayItem(checks, 0), 1);
        cJSON_ReplaceItemInObject(cmp, "pass", cJSON_CreateFalse());
        cJSON_AddItemToArray(controls, ls_test_parity_control(faults[k][0], faults[k][1], "f32", 2, 0, 0.1, cmp));
    }
    cJSON_AddArrayToObject(d, "links");
    cJSON_AddArrayToObject(d, "levels");
    cJSON_AddArrayToObject(d, "timings");
    cJSON_AddArrayToObject(d, "notes");
    cJSON_AddBoolToObject(d, "pass", 1);
    char *txt = cJSON_Print(d);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(d);
}

static const char *build_of(const cJSON *doc) { return cJSON_GetObjectItem(doc, "build_digest")->valuestring; }

Test(audit, levels_with_a_parity_fixture, .init = setup, .fini = teardown, .timeout = 120) {
    char run[512], par[600], args[800];
    single_run(run, sizeof run);
    cJSON *doc = NULL;
    cr_assert_eq(audit(run, NULL, &doc), 0);
    char build[65];
    snprintf(build, sizeof build, "%s", build_of(doc));
    cJSON_Delete(doc);
    snprintf(par, sizeof par, "%s/parity.json", tmpdir);
    snprintf(args, sizeof args, "--parity %s", par);
    /* same build, all checks pass: levels 2 and 3 hold; 4 needs full mode (this run is detached) */
    write_parity_fixture(par, build, 1, "hybrid", run);
    cr_expect_eq(audit(run, args, &doc), 0);
    cr_expect_eq(level(doc), 3);
    expect_fail(doc, "config.full_mode", -1, NULL, -2, "detached");
    cJSON_Delete(doc);
    snprintf(args, sizeof args, "--parity %s --require-level 3", par);
    cr_expect_eq(audit(run, args, NULL), 0);
    snprintf(args, sizeof args, "--parity %s --require-level 4", par);
    cr_expect_eq(audit(run, args, NULL), 1);
    /* a parity report of another build proves nothing */
    write_parity_fixture(par, "0000000000000000000000000000000000000000000000000000000000000000", 1, "hybrid", run);
    snprintf(args, sizeof args, "--parity %s", par);
    cr_expect_eq(audit(run, args, &doc), 0);
    cr_expect_eq(level(doc), 1);
    expect_fail(doc, "parity.build", -1, "parity.json", -2, "from build 0000");
    cJSON_Delete(doc);
}

/* ---- what the configuration records: group, steps_requested --------------- */

/* Sets (value != NULL) or deletes key in predicate.config of rank 0's
 * receipt and of the manifest. */
static void edit_config(const char *run, const char *key, const char *value) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import json,sys\nfor p in sys.argv[1:3]:\n d=json.load(open(p)); c=d['predicate']['config']\n"
             " if sys.argv[4]=='-': c.pop(sys.argv[3])\n else: c[sys.argv[3]]=json.loads(sys.argv[4])\n"
             " json.dump(d,open(p,'w'))\" '%s/rank-0000/receipt.json' '%s/manifest.json' '%s' '%s'",
             run, run, key, value ? value : "-");
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
}

/* The configuration's integer key from rank 0's receipt (read here, not by the audit). */
static long config_int(const char *run, const char *key) {
    char p[800], err[256];
    snprintf(p, sizeof p, "%s/rank-0000/receipt.json", run);
    cJSON *d = NULL;
    cr_assert_eq(ls_json_read_file(p, &d, err, sizeof err), LS_OK, "%s", err);
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "predicate"), "config"), key);
    cr_assert(cJSON_IsNumber(v), "%s: no integer config.%s", p, key);
    long n = (long)v->valuedouble;
    cJSON_Delete(d);
    return n;
}

/* Drops every score and replay layer_end of one member (*user): the trace
 * then shows one member fewer, which inference from the events cannot see. */
static int drop_member(const char *line, FILE *out, long idx, void *user) {
    char m[32];
    (void)out;
    (void)idx;
    snprintf(m, sizeof m, "\"member\":%ld,", *(const long *)user);
    return !(strstr(line, "\"ev\":\"layer_end\"") && strstr(line, m) &&
             (strstr(line, "\"phase\":\"replay\"") || strstr(line, "\"phase\":\"score\"")));
}

/* A --rollouts run: each line sets its own group size (here 2, the
 * trainer's --group default being 4), so the config records group -1 and
 * the audit infers G, saying so: the run proves level 1. */
Test(audit, rollouts_groups_are_their_lines, .init = setup, .fini = teardown, .timeout = 120) {
    char roll[512], cmd[2048], run[600];
    snprintf(roll, sizeof roll, "%s/r.jsonl", tmpdir);
    FILE *f = fopen(roll, "w");
    cr_assert_not_null(f);
    fputs("{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12],\"responses\":[[5,6,7],[8,9]],\"rewards\":[1,0]}\n", f);
    fclose(f);
    snprintf(run, sizeof run, "%s/rr", tmpdir);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s --config %s --rollouts %s --out %s --quiet >/dev/null 2>&1", TRAIN,
             LS_SOURCE_DIR "/configs/hybrid-tiny.json", roll, run);
    cr_assert_eq(sh(cmd), 0);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, "--require-level 1", &doc), 0, "a rollouts run with G = 2 must prove level 1");
    cr_expect_eq(level(doc), 1);
    const cJSON *r = report_rule(doc, "rank.layers");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "pass")), "rank.layers: %s", cJSON_GetObjectItem(r, "message")->valuestring);
    cJSON_Delete(doc);
}

Test(audit, recorded_group_names_a_missing_member, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], p[800], text[128];
    single_run(src, sizeof src);
    long G = config_int(src, "group");
    cr_assert_geq(G, 2, "the fixture needs a group of two or more");
    long last = G - 1;
    copy_run(src, "g", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    rewrite_trace(p, drop_member, &last, true);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    snprintf(text, sizeof text, "step 0 replay: no bwd layer_end for member %ld, layer -1", last);
    expect_fail(doc, "rank.layers", 0, "rank-0000/events.jsonl.zst", -2, text);
    snprintf(text, sizeof text, "step 0 score: no fwd layer_end for member %ld, layer -1", last);
    expect_fail(doc, "rank.layers", 0, "rank-0000/events.jsonl.zst", -2, text);
    cJSON_Delete(doc);
    /* the same trace with no "group" recorded (an older run): the audit infers G - 1
       members from the events, the rule passes and its message says it inferred */
    edit_config(run, "group", NULL);
    cr_expect_eq(audit(run, NULL, &doc), 1); /* the edited receipt fails its digest */
    expect_fail(doc, "manifest.digests", 0, "rank-0000/receipt.json", -2, "sha256");
    cr_expect(passes(doc, "rank.layers"));
    const char *msg = cJSON_GetObjectItem(report_rule(doc, "rank.layers"), "message")->valuestring;
    cr_expect(strstr(msg, "inferred from the traces") && strstr(msg, "no \"group\""), "message: %s", msg);
    cJSON_Delete(doc);
}

/* --prompts-per-step 2: a step's members are its two groups', numbered
 * through the step (group b's member i is b G + i); the run proves the
 * level a B = 1 run proves (1 without parity), and the last member of the
 * second group, dropped from a copy of its trace, is named missing (the
 * audit requires G x B members from the recorded group and B). */
Test(audit, prompts_per_step_groups_are_audited, .init = setup, .fini = teardown, .timeout = 180) {
    char src[512], one[512], run[600], p[800], text[128];
    fixture("groups2", TRAIN " " TRAIN_ARGS " --steps 2 --group 2 --prompts-per-step 2 --grad-mode full --out", 0, src,
            sizeof src);
    fixture("groups1", TRAIN " " TRAIN_ARGS " --steps 2 --group 2 --grad-mode full --out", 0, one, sizeof one);
    cJSON *doc = NULL;
    cr_assert_eq(audit(one, NULL, &doc), 0);
    int level1 = level(doc);
    cJSON_Delete(doc);
    cr_expect_eq(audit(src, NULL, &doc), 0, "a --prompts-per-step 2 run must prove its level");
    cr_expect_eq(level(doc), level1, "B = 2 proves level %d, B = 1 level %d", level(doc), level1);
    cr_expect(passes(doc, "rank.layers"));
    cJSON_Delete(doc);
    for (long drop = 2; drop <= 3; drop++) { /* the second group's first and last member */
        char name[16];
        snprintf(name, sizeof name, "g2m%ld", drop);
        copy_run(src, name, run, sizeof run);
        snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
        rewrite_trace(p, drop_member, &drop, true);
        cr_expect_eq(audit(run, NULL, &doc), 1);
        snprintf(text, sizeof text, "replay: no bwd layer_end for member %ld, layer -1", drop);
        expect_fail(doc, "rank.layers", 0, "rank-0000/events.jsonl.zst", -2, text);
        cJSON_Delete(doc);
    }
    /* a recorded B that is no count of groups is never read as the configuration's requirement: 0 is not
       used (rank.layers says the members per step were inferred from the traces, and why), text makes the
       configuration unusable (rank.layers cannot pass), and a B whose G B members exceed what is audited is
       not used either, the note naming the product (not a missing "group"); the run fails either way */
    const char *bad_b[] = {"0", "'two'", "1048576"};
    for (int k = 0; k < 3; k++) {
        char name[16], cmd[2048];
        snprintf(name, sizeof name, "badB%d", k);
        copy_run(src, name, run, sizeof run);
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import json,sys\nfor p in sys.argv[1:3]:\n d=json.load(open(p));"
                 " d['predicate']['config']['options']['prompts_per_step']=%s\n json.dump(d,open(p,'w'))\""
                 " '%s/rank-0000/receipt.json' '%s/manifest.json'", bad_b[k], run, run);
        cr_assert_eq(sh(cmd), 0, "%s", cmd);
        cr_expect_eq(audit(run, NULL, &doc), 1, "prompts_per_step %s", bad_b[k]);
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(report_rule(doc, "rank.layers"), "message"));
        if (k == 0)
            cr_expect(msg && strstr(msg, "inferred from the traces") && strstr(msg, "options.prompts_per_step"),
                      "prompts_per_step 0: rank.layers: %s", msg ? msg : "(none)");
        else if (k == 2) /* B in range, but G B members exceed what is audited: said, not "no group" */
            cr_expect(msg && strstr(msg, "inferred from the traces") && strstr(msg, "exceeds") &&
                          !strstr(msg, "no \"group\""),
                      "prompts_per_step 2^20: rank.layers: %s", msg ? msg : "(none)");
        else
            cr_expect(!passes(doc, "rank.layers"), "prompts_per_step %s: rank.layers passed", bad_b[k]);
        cJSON_Delete(doc);
    }
    /* a recorded first_step that is not used is named where the steps are judged, though steps_requested is */
    {
        copy_run(src, "badfirst", run, sizeof run);
        edit_config(run, "first_step", "100000");
        audit(run, NULL, &doc);
        cr_assert_not_null(doc);
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(report_rule(doc, "rank.optimizer"), "message"));
        cr_expect(msg && strstr(msg, "config \"first_step\" is not an integer"), "first_step 100000: rank.optimizer: %s",
                  msg ? msg : "(none)");
        cJSON_Delete(doc);
    }
}

/* The phases a step must have follow the recorded configuration: the
 * naive strategy has no prompt backward (its members run the whole
 * sequence), a prefix_frozen step no capture (it reuses an earlier one);
 * both runs prove level 1.  The same naive trace recorded as a LongStraw
 * run misses its prompt backward. */
Test(audit, naive_and_prefix_frozen_runs_prove_level_1, .init = setup, .fini = teardown, .timeout = 180) {
    char nv[512], pf[512], run[600];
    fixture("naive-full", TRAIN " " TRAIN_ARGS " --steps 2 --strategy naive --grad-mode full --out", 0, nv, sizeof nv);
    cJSON *doc = NULL;
    cr_expect_eq(audit(nv, "--require-level 1", &doc), 0);
    cr_expect(passes(doc, "rank.phases") && passes(doc, "rank.layers"));
    cJSON_Delete(doc);
    fixture("frozen", TRAIN " " TRAIN_ARGS " --steps 3 --prefix-frozen 2 --out", 0, pf, sizeof pf);
    cr_expect_eq(audit(pf, "--require-level 1", &doc), 0);
    cr_expect(passes(doc, "rank.phases") && passes(doc, "rank.layers") && passes(doc, "steps.prefix_frozen"));
    cJSON_Delete(doc);
    copy_run(nv, "as-longstraw", run, sizeof run);
    edit_config(run, "strategy", "\"longstraw\"");
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "rank.phases", 0, "rank-0000/events.jsonl.zst", -2, "phase prompt_bwd never ended ok");
    expect_fail(doc, "rank.layers", 0, "rank-0000/events.jsonl.zst", -2, "prompt_bwd: no bwd layer_end");
    cJSON_Delete(doc);
}

Test(audit, fewer_steps_than_requested, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], text[160];
    single_run(src, sizeof src);
    long steps = config_int(src, "steps_requested");
    copy_run(src, "s", run, sizeof run);
    /* the receipts say one step more was asked for than the (intact) trace ran */
    snprintf(text, sizeof text, "%ld", steps + 1);
    edit_config(run, "steps_requested", text);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    snprintf(text, sizeof text, "rank 0 stopped early: %ld optimizer step(s) of the %ld requested", steps, steps + 1);
    expect_fail(doc, "rank.optimizer", 0, "rank-0000/events.jsonl.zst", -1, text);
    snprintf(text, sizeof text, "step %ld: phase capture never ended ok", steps);
    expect_fail(doc, "rank.phases", 0, "rank-0000/events.jsonl.zst", -1, text);
    cr_expect(passes(doc, "trace.valid"));
    cJSON_Delete(doc);
    /* not recorded (an older run): the steps the run shows, and the message says so */
    edit_config(run, "steps_requested", NULL);
    cr_expect_eq(audit(run, NULL, &doc), 1);
    cr_expect(passes(doc, "rank.optimizer"));
    const char *msg = cJSON_GetObjectItem(report_rule(doc, "rank.optimizer"), "message")->valuestring;
    cr_expect(strstr(msg, "no \"steps_requested\""), "message: %s", msg);
    cJSON_Delete(doc);
    /* a run the trainer stopped itself (a refused step: --fault nan-grad) */
    char nan[512];
    fixture("nan", TRAIN " " TRAIN_ARGS " --steps 3 --fault nan-grad --out", -1, nan, sizeof nan);
    cr_expect_eq(audit(nan, NULL, &doc), 1);
    expect_fail(doc, "rank.optimizer", 0, "rank-0000/events.jsonl.zst", -1,
                "rank 0 stopped early: 0 optimizer step(s) of the 3 requested");
    expect_fail(doc, "rank.no_error", 0, "rank-0000/events.jsonl.zst", -1, "non-finite");
    cJSON_Delete(doc);
}

/* Moves the first step-0 replay layer_end to just before rank_complete. */
static int move_late(const char *line, FILE *out, long idx, void *user) {
    static char held[1 << 16];
    int *state = user;
    (void)idx;
    if (*state == 0 && strstr(line, "\"ev\":\"layer_end\"") && strstr(line, "\"phase\":\"replay\"") &&
        strstr(line, "\"step\":0,")) {
        snprintf(held, sizeof held, "%s", line);
        *state = 1;
        return 0;
    }
    if (*state == 1 && strstr(line, "\"ev\":\"rank_complete\"")) {
        fputs(held, out);
        *state = 2;
    }
    return 1;
}

/* The layer checks run step by step while the trace streams (two steps
 * open): an event within the window is still counted, one of a step
 * already checked is named, never silently dropped. */
Test(audit, layer_end_after_its_step_was_checked, .init = setup, .fini = teardown, .timeout = 120) {
    char src[512], run[600], p[800];
    fixture("steps3", TRAIN " " TRAIN_ARGS " --steps 3 --out", 0, src, sizeof src);
    copy_run(src, "late", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    int state = 0;
    rewrite_trace(p, move_late, &state, true);
    cr_assert_eq(state, 2);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "trace.valid", 0, "rank-0000/events.jsonl.zst", -1, "ts_backwards"); /* its time is old */
    expect_fail(doc, "rank.layers", 0, "rank-0000/events.jsonl.zst", -1, "step already over (first: step 0");
    cJSON_Delete(doc);
    /* within the window (a 2-step run: step 0 is still open at the end): counted, the run passes */
    single_run(src, sizeof src);
    copy_run(src, "near", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    state = 0;
    rewrite_trace(p, move_late, &state, true);
    cr_assert_eq(state, 2);
    cr_expect_eq(audit(run, NULL, &doc), 1); /* the trace's digest changed */
    cr_expect(passes(doc, "rank.layers"), "%s", cJSON_GetObjectItem(report_rule(doc, "rank.layers"), "message")->valuestring);
    cJSON_Delete(doc);
}

/* ---- CP-2 ------------------------------------------------------------------ */
#if defined(LS_MPIEXEC)

Test(audit, cp2_full_run_proves_level_1_with_every_cross_rank_rule, .init = setup, .fini = teardown, .timeout = 180) {
    char run[512];
    cp2_run(run, sizeof run);
    cJSON *doc = NULL;
    cr_assert_eq(audit(run, "--require-level 1", &doc), 0);
    cr_expect_eq(level(doc), 1);
    static const char *cross[] = {"collectives.match", "collectives.composition", "collectives.dkv",
                                  "collectives.finalize", "digests.replicated"};
    for (size_t i = 0; i < sizeof cross / sizeof *cross; i++) {
        const cJSON *r = report_rule(doc, cross[i]);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "applicable")), "%s does not apply", cross[i]);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "pass")), "%s fails: %s", cross[i],
                  cJSON_GetObjectItem(r, "message")->valuestring);
        cr_expect_gt(cJSON_GetObjectItem(r, "matched")->valuedouble, 0);
    }
    cJSON_Delete(doc);
    /* full mode with a same-build parity fixture for world 2: level 4 */
    char par[600], args[800], build[65];
    cr_assert_eq(audit(run, NULL, &doc), 0);
    snprintf(build, sizeof build, "%s", build_of(doc));
    cJSON_Delete(doc);
    snprintf(par, sizeof par, "%s/parity.json", tmpdir);
    write_parity_fixture(par, build, 2, "hybrid", run);
    snprintf(args, sizeof args, "--parity %s --require-level 4", par);
    cr_expect_eq(audit(run, args, &doc), 0);
    cr_expect_eq(level(doc), 4);
    cJSON_Delete(doc);
    write_parity_fixture(par, build, 1, "hybrid", run); /* parity of another world size: not CP-2's */
    snprintf(args, sizeof args, "--parity %s", par);
    cr_expect_eq(audit(run, args, &doc), 0);
    cr_expect_eq(level(doc), 1);
    expect_fail(doc, "parity.logprob", -1, "parity.json", -2, "world 2");
    cJSON_Delete(doc);
}

Test(audit, cp2_deleted_rank_directory, .init = setup, .fini = teardown, .timeout = 180) {
    char src[512], run[600], cmd[1400];
    cp2_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    snprintf(cmd, sizeof cmd, "rm -rf '%s/rank-0001'", run);
    cr_assert_eq(sh(cmd), 0);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "receipts.valid", 1, "rank-0001/receipt.json", -2, "directory is missing");
    expect_fail(doc, "manifest.digests", 1, "rank-0001/events.jsonl.zst", -2, "missing");
    expect_fail(doc, "rank.complete", 1, "rank-0001/events.jsonl.zst", -2, "no trace");
    expect_fail(doc, "collectives.match", 1, "rank-0001/events.jsonl.zst", -2, "missing on rank 1");
    cJSON_Delete(doc);
}

typedef struct {
    long dropped_idx;
    char gseq[32];
} drop_ctx;

static int drop_first_lse(const char *line, FILE *out, long idx, void *user) {
    drop_ctx *d = user;
    (void)out;
    if (d->dropped_idx < 0 && strstr(line, "\"purpose\":\"lse_max\"")) {
        d->dropped_idx = idx;
        const char *g = strstr(line, "\"gseq\":");
        snprintf(d->gseq, sizeof d->gseq, "gseq %ld", strtol(g + 7, NULL, 10));
        return 0;
    }
    return 1;
}

Test(audit, cp2_removed_collective_on_one_rank, .init = setup, .fini = teardown, .timeout = 180) {
    char src[512], run[600], p[800];
    cp2_run(src, sizeof src);
    copy_run(src, "r", run, sizeof run);
    snprintf(p, sizeof p, "%s/rank-0001/events.jsonl.zst", run);
    drop_ctx d = {.dropped_idx = -1};
    rewrite_trace(p, drop_first_lse, &d, true); /* seq renumbered: the gap is hidden from the reader */
    cr_assert_geq(d.dropped_idx, 0);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 1);
    /* the flight recorder names rank 1, its file, the seq of its previous collective, and the gseq */
    expect_fail(doc, "collectives.match", 1, "rank-0001/events.jsonl.zst", -1, d.gseq);
    expect_fail(doc, "manifest.digests", 1, "rank-0001/events.jsonl.zst", -2, "sha256");
    const char *fo = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "forensics"), "first_divergent_collective")->valuestring;
    cr_expect(strstr(fo, d.gseq) && strstr(fo, "not by ranks 1"), "forensics: %s", fo);
    cJSON_Delete(doc);
}

/* Relabels every attention layer_end as an mla layer's (the line is
 * rewritten; its digest in the manifest no longer matches, a rule of its own). */
static int attn_as_mla(const char *line, FILE *out, long idx, void *user) {
    (void)idx, (void)user;
    const char *k = strstr(line, "\"kind\":\"attn\"");
    if (k == NULL || strstr(line, "\"ev\":\"layer_end\"") == NULL) return 1;
    fprintf(out, "%.*s\"kind\":\"mla\"%s", (int)(k - line), line, k + strlen("\"kind\":\"attn\""));
    return 0;
}

/* What a layer must show is its run's profile's (profiles/): a hybrid
 * run's attention layers relabelled mla are layers profiles/hybrid.json
 * requires nothing of, so the run shows no response attention whose
 * composition could be proven (the mla profile's own requirement, the
 * global DSA top-k before the composition, is test_audit_profile's, on a
 * real mla run: cp-local-dsa's signature, no dsa_topk_gather). */
Test(audit, mla_layers_need_the_global_dsa_selection, .init = setup, .fini = teardown, .timeout = 180) {
    char src[512], run[600], p[800];
    cp2_run(src, sizeof src);
    copy_run(src, "mla", run, sizeof run);
    cJSON *doc = NULL;
    cr_assert_eq(audit(run, NULL, &doc), 0);
    cr_expect(passes(doc, "collectives.composition"), "the hybrid run's composition holds");
    cJSON_Delete(doc);
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/rank-%04d/events.jsonl.zst", run, r);
        rewrite_trace(p, attn_as_mla, NULL, false);
    }
    cr_expect_eq(audit(run, NULL, &doc), 1);
    expect_fail(doc, "collectives.composition", 0, "events.jsonl.zst", -2, "traced no response attention forward");
    expect_fail(doc, "collectives.composition", 1, "events.jsonl.zst", -2, "traced no response attention forward");
    cJSON_Delete(doc);
}

static void fault_run(const char *fault, char *out, size_t cap) {
    char name[64], cmd[2048];
    snprintf(name, sizeof name, "fault-%s", fault);
    snprintf(cmd, sizeof cmd, MPI_PREFIX " --steps 1 --grad-mode full --fault %s --out", fault);
    fixture(name, cmd, 0, out, cap);
}

Test(audit, fault_skip_dkv_reduce, .init = setup, .fini = teardown, .timeout = 180) {
    char run[512];
    fault_run("skip-dkv-reduce", run, sizeof run);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 0);
    cr_expect_eq(level(doc), 1, "the faults leave level 1 (execution) intact");
    expect_fail(doc, "collectives.dkv", -1, "events.jsonl.zst", -1, "dkv_sum");
    expect_fail(doc, "digests.replicated", 1, "rank-0001/events.jsonl.zst", -1, "step 0");
    cr_expect(passes(doc, "collectives.composition"));
    cJSON_Delete(doc);
}

Test(audit, fault_skip_grad_finalize, .init = setup, .fini = teardown, .timeout = 180) {
    char run[512];
    fault_run("skip-grad-finalize", run, sizeof run);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 0);
    expect_fail(doc, "collectives.finalize", -1, "events.jsonl.zst", -2, "grad_finalize");
    expect_fail(doc, "digests.replicated", 1, "rank-0001/events.jsonl.zst", -1, "step 0");
    cr_expect(passes(doc, "collectives.dkv"));
    cJSON_Delete(doc);
}

Test(audit, fault_cp_local_attention, .init = setup, .fini = teardown, .timeout = 180) {
    char run[512];
    fault_run("cp-local-attention", run, sizeof run);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, NULL, &doc), 0);
    expect_fail(doc, "collectives.composition", -1, "events.jsonl.zst", -1, "lse_max");
    cJSON_Delete(doc);
}

Test(audit, killed_rank_named_with_its_phase_and_layer, .init = setup, .fini = teardown, .timeout = 180) {
    char run[512];
    fixture("kill1", MPI_PREFIX " --steps 1 --grad-mode full --fault kill-rank=1 --out", -1, run, sizeof run);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, "--require-level 1", &doc), 1);
    expect_fail(doc, "rank.complete", 1, "rank-0001/events.jsonl.zst", -1, "last phase replay");
    /* the last layer it finished: the head (layer 8) of the reference's scoring, which runs right
       before the replay (its state kept beside the policy's: no recapture in between) */
    expect_fail(doc, "rank.complete", 1, "rank-0001/events.jsonl.zst", -1, "layer 8 (score fwd)");
    expect_fail(doc, "receipts.valid", 1, "rank-0001/receipt.json", -2, "never finished");
    const cJSON *r1 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "ranks"), 1);
    const cJSON *last = cJSON_GetObjectItem(r1, "last");
    cr_expect_str_eq(cJSON_GetObjectItem(last, "phase")->valuestring, "replay");
    cr_expect_eq(cJSON_GetObjectItem(last, "layer")->valueint, 8);
    cJSON_Delete(doc);
}
#endif
