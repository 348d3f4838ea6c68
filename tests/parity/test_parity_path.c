/* test_parity_path.c - longstraw-parity --like runs the run's own path
 * (parity/plan/parity_path.c, docs/parity.md "The run's path").
 *
 * A real trainer bug was certified level 4: with the reference policy's
 * prompt state kept beside the policy's (--keep-reference auto, on when two
 * states fit), a hybrid CP run in full mode back-propagated the policy's
 * prompt from the reference's shard start; parity's runs were given their
 * responses and log-probs, so that path never ran under it.  Here:
 *  - a --like of a hybrid CP-2, keep-reference, full, LoRA-random run makes
 *    path runs that sample their own responses and keep the reference
 *    (their manifests say so), every path check passes, the cp-stale-start
 *    control is detected, the report's coverage holds the run's path, and
 *    the audit certifies the run at level 4 with it;
 *  - the same with --fault cp-stale-start put back into every path run at
 *    CP > 1 (LONGSTRAW_PARITY_TEST_PATH_FAULT: the trainer before the fix)
 *    fails: the path's cp_grad at CP-2 by far more than its tolerance, level
 *    3 does not hold, the audit does not certify the run: "a --like parity
 *    that would have failed before the fix";
 *  - mla: the same path passes (with its decisions check on the sampled
 *    batch; no cp-stale-start, which that family refuses);
 *  - the run's path derived from the options of a run that recorded none,
 *    and the shard, page and chunk classes parity asks for. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "parity/plan/parity.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "tests/support/test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define AUDIT LS_BINARY_DIR "/audit/longstraw-audit"
#define PARITY LS_BINARY_DIR "/parity/longstraw-parity"
#define HYBRID LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#define MLA LS_SOURCE_DIR "/configs/mla-tiny.json"
#define ROOT_OK "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "

static char tmpdir[256];

static void setup(void) { ls_test_tmpdir_make(tmpdir, "paritypath"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static int sh(const char *cmd) {
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

static cJSON *read_json(const char *path) {
    cJSON *doc = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(path, &doc, err, sizeof err), LS_OK, "%s", err);
    return doc;
}

static const cJSON *at(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool has_value(const cJSON *arr, const char *v) {
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (cJSON_IsString(x) && strcmp(x->valuestring, v) == 0) return true;
    return false;
}

/* The bug's run: CP-2, float64, full mode, LoRA B random, the reference kept beside the policy
 * (--keep-reference auto: two prompt states fit), the built-in task's sampled responses. */
static void train_run(const char *cfg, const char *name) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 timeout 300 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 " TRAIN " --config %s --out %s/%s "
             "--prompt-len 67 --response-len 5 --group 3 --steps 1 --seed 5 --dtype f64 --grad-mode full "
             "--train-mode lora --lora-init random --quiet >%s/%s.log 2>&1",
             cfg, tmpdir, name, tmpdir, name);
    cr_assert_eq(sh(cmd), 0, "the run %s failed (%s/%s.log)", name, tmpdir, name);
    char p[600];
    snprintf(p, sizeof p, "%s/%s/manifest.json", tmpdir, name);
    cJSON *m = read_json(p);
    const cJSON *paths = at(at(at(m, "predicate"), "config"), "paths");
    cr_assert(has_value(at(paths, "reference"), "kept") && has_value(at(paths, "responses"), "sampled"),
              "the run did not sample and keep the reference (%s)", p);
    cJSON_Delete(m);
}

/* longstraw-parity --like RUN into OUT (env: extra environment); its exit status. */
static int like(const char *run, const char *out, const char *env) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, ROOT_OK "%s " PARITY " --like %s/%s --out %s/%s --jobs 2 --quiet >%s/%s.log 2>&1",
             env, tmpdir, run, tmpdir, out, tmpdir, out);
    int rc = sh(cmd);
    if (rc == 2) { /* what parity said, into the test's output */
        snprintf(cmd, sizeof cmd, "tail -n 20 %s/%s.log >&2", tmpdir, out);
        sh(cmd);
    }
    return rc;
}

/* The path configuration of the report (the one named path-sampled-kept). */
static const cJSON *path_config(const cJSON *rep, const char *name) {
    const cJSON *c;
    cJSON_ArrayForEach(c, at(rep, "configurations"))
        if (at(c, "path") && strcmp(at(c, "name")->valuestring, name) == 0) return c;
    return NULL;
}

/* The check named name, or NULL. */
static const cJSON *check(const cJSON *rep, const char *name) {
    const cJSON *c;
    cJSON_ArrayForEach(c, at(rep, "checks")) if (strcmp(at(c, "name")->valuestring, name) == 0) return c;
    return NULL;
}

/* Every kind of check the path has, passing; returns how many path checks. */
static int path_checks_pass(const cJSON *rep, const char *path, const char *const *kinds) {
    int n = 0;
    for (size_t k = 0; kinds[k]; k++) {
        int seen = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, at(rep, "checks")) {
            if (strcmp(at(c, "configuration")->valuestring, path) || strcmp(at(c, "kind")->valuestring, kinds[k]))
                continue;
            seen++;
            cr_expect(cJSON_IsTrue(at(c, "pass")), "%s fails: %g > %g (%s)", at(c, "name")->valuestring,
                      at(c, "max_rel_err")->valuedouble, at(c, "tolerance")->valuedouble, at(c, "worst")->valuestring);
        }
        cr_expect(seen > 0, "the path %s has no %s check", path, kinds[k]);
        n += seen;
    }
    return n;
}

/* What a path run's manifest recorded: its config's paths[key] holds value; options[opt] is oval. */
static void path_run_took(const char *out, const char *path, const char *label, const char *key, const char *value,
                          const char *opt, const char *oval) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s/runs/%s/%s/run/manifest.json", tmpdir, out, path, label);
    cJSON *m = read_json(p);
    const cJSON *cfg = at(at(m, "predicate"), "config");
    cr_expect(has_value(at(at(cfg, "paths"), key), value), "%s: paths.%s lacks %s", p, key, value);
    if (opt) {
        const cJSON *v = at(at(cfg, "options"), opt);
        cr_expect(cJSON_IsString(v) && strcmp(v->valuestring, oval) == 0, "%s: options.%s is not %s", p, opt, oval);
    }
    cJSON_Delete(m);
}

static int audit_level(const char *run, const char *report_dir, int *rc) {
    char cmd[2048], json[600];
    snprintf(json, sizeof json, "%s/%s-audit.json", tmpdir, report_dir);
    snprintf(cmd, sizeof cmd, AUDIT " %s/%s --parity %s/%s/parity.json --json %s --require-level 4 >%s/%s-audit.txt 2>&1",
             tmpdir, run, tmpdir, report_dir, json, tmpdir, report_dir);
    *rc = sh(cmd);
    cJSON *doc = read_json(json);
    const cJSON *l = at(doc, "level");
    int level = cJSON_IsNumber(l) ? l->valueint : -1;
    cJSON_Delete(doc);
    return level;
}

static const char *const KINDS_FULL[] = {"logprob", "ref_logprob", "cp_grad", "cp_params", "grad", "fd_grad",
                                         "ref_loss", NULL};

Test(parity_path, like_runs_the_runs_path_and_passes, .init = setup, .fini = teardown, .timeout = 900) {
    train_run(HYBRID, "run");
    cr_assert_eq(like("run", "par", ""), 0, "--like failed (%s/par.log)", tmpdir);
    char p[600];
    snprintf(p, sizeof p, "%s/par/parity.json", tmpdir);
    cJSON *rep = read_json(p);
    const char *path = "path-sampled-kept";
    const cJSON *pc = path_config(rep, path);
    cr_assert_not_null(pc, "no path configuration %s in %s", path, p);
    cr_expect_str_eq(at(at(pc, "path"), "responses")->valuestring, "sampled");
    cr_expect_str_eq(at(at(pc, "path"), "reference")->valuestring, "kept");
    cr_expect_str_eq(at(at(pc, "path"), "shards")->valuestring, "even"); /* 66 positions over 2, as the run's */
    cr_expect_gt(at(pc, "prompt_len")->valueint, 17, "the path's prompt is not longer than 16 tokens");
    /* the path runs sampled and kept the reference themselves: their manifests say so */
    path_run_took("par", path, "cp1", "responses", "sampled", "keep_reference", "on");
    path_run_took("par", path, "cp2", "reference", "kept", "input", "task");
    path_run_took("par", path, "cp2", "old_logprobs", "computed", "lora_init", "random");
    int n = path_checks_pass(rep, path, KINDS_FULL);
    cr_expect_geq(n, 12, "only %d path checks", n);
    const cJSON *lp = check(rep, "logprob path-sampled-kept f64 cp2");
    cr_assert_not_null(lp);
    cr_expect_str_eq(at(cJSON_GetArrayItem(at(lp, "members"), 0), "name")->valuestring, "prompt and sampled responses");
    /* the control: the prompt backward from the other capture's start fails the path's cp_grad */
    bool seen = false;
    const cJSON *c;
    cJSON_ArrayForEach(c, at(rep, "controls")) {
        if (strcmp(at(c, "fault")->valuestring, "cp-stale-start")) continue;
        seen = true;
        cr_expect(cJSON_IsTrue(at(c, "detected")), "cp-stale-start not detected");
        cr_expect_gt(at(c, "max_rel_err")->valuedouble, 1e-3, "cp-stale-start detected by only %g",
                     at(c, "max_rel_err")->valuedouble);
    }
    cr_expect(seen, "no cp-stale-start control");
    /* the coverage holds the run's path; nothing of it uncovered */
    const cJSON *cov = at(at(rep, "coverage"), "paths");
    cr_expect(has_value(at(cov, "reference"), "kept") && has_value(at(cov, "responses"), "sampled"),
              "coverage.paths lacks the run's path");
    cr_expect_eq(cJSON_GetArraySize(at(at(rep, "like"), "uncovered")), 0, "like.uncovered is not empty");
    cr_expect(cJSON_IsTrue(at(rep, "pass")));
    cJSON_Delete(rep);
    int rc, level = audit_level("run", "par", &rc);
    cr_expect(level == 4 && rc == 0, "the run with its --like report: level %d, exit %d (%s/par-audit.txt)", level,
              rc, tmpdir);
}

Test(parity_path, like_fails_with_the_bug_put_back, .init = setup, .fini = teardown, .timeout = 900) {
    train_run(HYBRID, "run");
    cr_assert_eq(like("run", "bug", LS_PARITY_TEST_PATH_FAULT_ENV "=cp-stale-start"), 1,
                 "--like with cp-stale-start in the path runs did not fail (%s/bug.log)", tmpdir);
    char p[600];
    snprintf(p, sizeof p, "%s/bug/parity.json", tmpdir);
    cJSON *rep = read_json(p);
    const cJSON *g = check(rep, "cp_grad path-sampled-kept f64 cp2 full");
    cr_assert_not_null(g, "no path cp_grad at CP-2");
    cr_expect(!cJSON_IsTrue(at(g, "pass")) && at(g, "max_rel_err")->valuedouble > 1e-3,
              "the path's cp_grad with the bug: %g", at(g, "max_rel_err")->valuedouble);
    const cJSON *l3 = cJSON_GetArrayItem(at(rep, "levels"), 1);
    cr_expect_eq(at(l3, "level")->valueint, 3);
    cr_expect(!cJSON_IsTrue(at(l3, "holds")), "level 3 holds with the bug");
    cr_expect(!cJSON_IsTrue(at(rep, "pass")));
    bool noted = false;
    const cJSON *nt;
    cJSON_ArrayForEach(nt, at(rep, "notes")) noted = noted || strstr(nt->valuestring, "TEST ONLY") != NULL;
    cr_expect(noted, "the report does not say the fault was put into its runs");
    cJSON_Delete(rep);
    int rc, level = audit_level("run", "bug", &rc);
    cr_expect(level < 3 && rc != 0, "the run with the failing report: level %d, exit %d", level, rc);
}

Test(parity_path, mla_like_runs_the_runs_path, .init = setup, .fini = teardown, .timeout = 900) {
    train_run(MLA, "mla");
    cr_assert_eq(like("mla", "par", ""), 0, "--like failed (%s/par.log)", tmpdir);
    char p[600];
    snprintf(p, sizeof p, "%s/par/parity.json", tmpdir);
    cJSON *rep = read_json(p);
    cr_assert_not_null(path_config(rep, "path-sampled-kept"));
    path_checks_pass(rep, "path-sampled-kept", KINDS_FULL);
    path_checks_pass(rep, "path-sampled-kept", (const char *const[]){"decisions", NULL});
    const cJSON *c;
    cJSON_ArrayForEach(c, at(rep, "controls"))
        cr_expect(strcmp(at(c, "fault")->valuestring, "cp-stale-start") != 0, "mla ran cp-stale-start");
    cr_expect(cJSON_IsTrue(at(rep, "pass")));
    cJSON_Delete(rep);
}

/* The shard classes the trainer records and parity asks for (receipts/format/coverage.h), by hand. */
Test(parity_path, shard_page_and_chunk_classes) {
    const char *sh_, *pg, *ch;
    ls_coverage_shard_classes(66, 1, 8, 12, &sh_, &pg, &ch);
    cr_expect(!strcmp(sh_, "one") && !strcmp(pg, "aligned") && !strcmp(ch, "aligned"));
    ls_coverage_shard_classes(66, 2, 64, 2048, &sh_, &pg, &ch); /* the bug's run: 33|33 */
    cr_expect(!strcmp(sh_, "even") && !strcmp(pg, "cut") && !strcmp(ch, "cut"));
    ls_coverage_shard_classes(64, 4, 8, 16, &sh_, &pg, &ch); /* boundaries 16, 32, 48 */
    cr_expect(!strcmp(sh_, "even") && !strcmp(pg, "aligned") && !strcmp(ch, "aligned"));
    ls_coverage_shard_classes(65, 4, 16, 0, &sh_, &pg, &ch); /* 16, 32, 48 again; chunk 0: all at once */
    cr_expect(!strcmp(sh_, "uneven") && !strcmp(pg, "aligned") && !strcmp(ch, "aligned"));
    ls_coverage_shard_classes(29, 2, 8, 12, &sh_, &pg, &ch); /* p30-g2-lora: 14|15 */
    cr_expect(!strcmp(sh_, "uneven") && !strcmp(pg, "cut") && !strcmp(ch, "cut"));
}

/* A run that recorded no path: derived from its options (and --keep-reference, its receipt absent). */
Test(parity_path, path_derived_from_options) {
    char err[256];
    cJSON *cfg = cJSON_Parse("{\"objective\":\"grpo\",\"beta\":0.04,\"prefix_frozen\":1,\"options\":{\"input\":\"task\","
                             "\"task\":\"recall\",\"prompt_len\":67,\"page_size\":64,\"capture_chunk\":2048,"
                             "\"prompts_per_step\":3,\"keep_reference\":\"auto\",\"resumed\":false}}");
    cJSON *p = ls_parity_path_derive("/nonexistent", cfg, 2, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    cr_expect(has_value(at(p, "responses"), "sampled") && has_value(at(p, "old_logprobs"), "computed"));
    cr_expect(has_value(at(p, "reference"), "kept") && has_value(at(p, "reference"), "recaptured"),
              "auto without a receipt: both");
    cr_expect(has_value(at(p, "prompt_groups"), "several") && has_value(at(p, "task"), "recall"));
    cr_expect(has_value(at(p, "shards"), "even") && has_value(at(p, "pages"), "cut") && has_value(at(p, "chunks"), "cut"));
    cJSON_Delete(p);
    cJSON_Delete(cfg);
    cfg = cJSON_Parse("{\"objective\":\"grpo\",\"beta\":0,\"prefix_frozen\":2,\"options\":{\"input\":\"rollouts\","
                      "\"prompts_per_step\":1,\"resumed\":true}}");
    p = ls_parity_path_derive("/nonexistent", cfg, 1, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    cr_expect(has_value(at(p, "responses"), "given") && has_value(at(p, "reference"), "none"));
    cr_expect(has_value(at(p, "prefix"), "frozen") && has_value(at(p, "start"), "resumed"));
    cr_expect(has_value(at(p, "shards"), "one") && has_value(at(p, "task"), "none"));
    cJSON_Delete(p);
    cJSON_Delete(cfg);
    cfg = cJSON_Parse("{\"objective\":\"grpo\"}");
    cr_expect_null(ls_parity_path_derive("/nonexistent", cfg, 1, err, sizeof err), "no options: no path");
    cJSON_Delete(cfg);
}
