/* test_parity_adapter_dp.c - data parallelism in longstraw-parity --adapter
 * (docs/parity.md "Data parallelism"), on the stand-in trainer's --dp
 * (tests/parity/parity_adapter_fake_train.py: members split over the replicas,
 * DDP's average emulated; tests/data/parity_adapter_fake_dp.json):
 *  - the loader's {dp} and "dp": 1 required, {dp} required beside a size
 *    > 1 (a literal {{dp}} is none), a dp_grad control only beside one,
 *    schema bounds; launch "1" only for one process (cp x dp);
 *  - --dp 1,2 runs every CP size at DP 2 too (the matrix in both dtypes,
 *    the prompt-only path), every DP check tagged "dp" with world cp x dp,
 *    dp_grad against DP 1, the dp-no-scale control detected;
 *    coverage.dps [1, 2], a DP-2 run inside it and outside a DP-1-only
 *    report (naming dp), the CP size compared world / dp; without --dp no
 *    DP run and no DP control needed;
 *  - an undetected DP control, and the DP bug in every fault-free DP run,
 *    fail the report (exit 1); a trainer that ignores {dp} is named
 *    (exit 2); bad --dp values exit 2 naming --dp;
 *  - --like a DP run (world 4 = DP 2 x CP 2, a v2 run written with
 *    longstraw_emit) runs DP 1 and 2 at CP 2 only, its prompt the first
 *    replica's, and refuses a dp_ranks that does not divide the world or
 *    that the adapter lacks. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "tests/support/test_tmpdir.h"
#include "tests/parity/test_parity_adapter_support.h"

#define PARITY LS_BINARY_DIR "/parity/longstraw-parity"
#define FIXTURE LS_SOURCE_DIR "/tests/data/parity_adapter_fake.json"
#define FIXTURE_DP LS_SOURCE_DIR "/tests/data/parity_adapter_fake_dp.json"
#define FAKE LS_SOURCE_DIR "/tests/parity/parity_adapter_fake_train.py"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "parity-adapter-dp"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static cJSON *fixture_of(const char *path) { return ls_pa_fixture(path); }
static cJSON *fixture(void) { return ls_pa_fixture(FIXTURE); }

static cJSON *controls_of(cJSON *d) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "faults"), "controls");
}

Test(parity_adapter, the_dp_fields_load_and_are_refused_by_name, .init = setup, .fini = teardown) {
    ls_parity_adapter a;
    char err[1024] = "";
    cr_assert_eq(ls_parity_adapter_load(FIXTURE_DP, &a, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(a.n_dps, 2);
    cr_expect(a.dps[0] == 1 && a.dps[1] == 2 && a.uses_dp);
    cr_expect_eq(a.n_controls, 5);
    ls_parity_adapter_free(&a);
    /* absent: DP 1 only, and {dp} need not be used */
    cr_assert_eq(ls_parity_adapter_load(FIXTURE, &a, err, sizeof err), LS_OK, "%s", err);
    cr_expect(a.n_dps == 1 && a.dps[0] == 1 && !a.uses_dp);
    ls_parity_adapter_free(&a);
    cJSON *d = fixture_of(FIXTURE_DP);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "dp", cJSON_CreateIntArray((const int[]){2}, 1));
    ls_pa_refused(tmpdir, d, "field 'dp': 1 must be one");
    d = fixture_of(FIXTURE_DP); /* a DP size > 1 the trainer is never told of */
    cJSON *args = cJSON_GetObjectItemCaseSensitive(d, "args");
    for (int i = 0; i < cJSON_GetArraySize(args); i++)
        if (strcmp(cJSON_GetArrayItem(args, i)->valuestring, "{dp}") == 0)
            cJSON_ReplaceItemInArray(args, i, cJSON_CreateString("1"));
    ls_pa_refused(tmpdir, d, "field 'dp': a DP size > 1 needs the placeholder {dp}");
    d = fixture_of(FIXTURE_DP); /* {dp} in a literal {{dp}} is no placeholder */
    args = cJSON_GetObjectItemCaseSensitive(d, "args");
    for (int i = 0; i < cJSON_GetArraySize(args); i++)
        if (strcmp(cJSON_GetArrayItem(args, i)->valuestring, "{dp}") == 0)
            cJSON_ReplaceItemInArray(args, i, cJSON_CreateString("{{dp}}"));
    ls_pa_refused(tmpdir, d, "field 'dp': a DP size > 1 needs the placeholder {dp}");
    d = fixture(); /* a dp_grad control with no DP size to run at */
    cJSON_AddStringToObject(controls_of(d), "dp-no-scale", "dp_grad");
    ls_pa_refused(tmpdir, d,
                  "field 'faults.controls.dp-no-scale': it breaks dp_grad, but field 'dp' lists no DP size > 1");
    d = fixture_of(FIXTURE_DP);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "dp", cJSON_CreateIntArray((const int[]){1, 9}, 2));
    ls_pa_refused(tmpdir, d, "/dp");
    d = fixture_of(FIXTURE_DP);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "dp", cJSON_CreateIntArray((const int[]){1, 2, 2}, 3));
    ls_pa_refused(tmpdir, d, "/dp");
    /* {dp} is known: no "unknown placeholder" */
    d = fixture();
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(d, "args"), cJSON_CreateString("--dp={dp}"));
    char path[512];
    ls_pa_write_adapter(tmpdir, d, "dp-arg.json", path);
    cr_expect_eq(ls_parity_adapter_load(path, &a, err, sizeof err), LS_OK, "%s", err);
    ls_parity_adapter_free(&a);
}

Test(parity_adapter, dp_expands_and_picks_the_launch_by_process_count, .init = setup, .fini = teardown) {
    cJSON *d = fixture_of(FIXTURE_DP);
    /* launch "n" another program than "1": /usr/bin/env python3 FAKE */
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "launch"), "n",
                                           cJSON_CreateStringArray((const char *[]){"/usr/bin/env", "python3", FAKE}, 3));
    char path[512], err[1024] = "", out[LS_PARITY_ADAPTER_ARG_MAX + 1];
    ls_pa_write_adapter(tmpdir, d, "launch.json", path);
    ls_parity_adapter a;
    cr_assert_eq(ls_parity_adapter_load(path, &a, err, sizeof err), LS_OK, "%s", err);
    ls_parity_adapter_vars v = {.mode = "run", .cp = 1, .dp = 2, .dtype = "f64", .grad_mode = "full", .fault = "",
                                .weights = "W", .batch = "B", .out = "O", .seed = 1};
    cr_assert_eq(ls_parity_adapter_expand(&a, "{cp}x{dp}", &v, out, sizeof out), LS_OK);
    cr_expect_str_eq(out, "1x2");
    v.dp = 0; /* not set: 1 */
    cr_assert_eq(ls_parity_adapter_expand(&a, "{dp}", &v, out, sizeof out), LS_OK);
    cr_expect_str_eq(out, "1");
    const struct {
        int cp, dp;
        const char *argv0;
    } cases[] = {{1, 1, "/usr/bin/python3"}, {1, 2, "/usr/bin/env"}, {2, 1, "/usr/bin/env"}, {2, 2, "/usr/bin/env"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        v.cp = cases[i].cp, v.dp = cases[i].dp;
        ls_parity_job j;
        cr_assert_eq(ls_parity_adapter_job(&a, &v, "/dev/null", &j, err, sizeof err), LS_OK, "%s", err);
        cr_expect_str_eq(j.argv[0], cases[i].argv0, "cp %d dp %d: launch %s", v.cp, v.dp, j.argv[0]);
        bool dp_arg = false;
        for (int k = 0; k + 1 < j.argc; k++)
            if (strcmp(j.argv[k], "--dp") == 0) {
                dp_arg = true;
                cr_expect_eq(atoi(j.argv[k + 1]), cases[i].dp);
            }
        cr_expect(dp_arg);
        ls_parity_job_free(&j);
    }
    ls_parity_adapter_free(&a);
}

static int n_checks(const cJSON *rep, const char *kind, int dp, bool *all_pass) {
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(rep, "checks")) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c, "dp");
        if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "kind")->valuestring, kind) != 0 ||
            (d ? (int)d->valuedouble : 1) != dp)
            continue;
        n++;
        if (all_pass && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"))) *all_pass = false;
    }
    return n;
}

/* The configuration a run of the report recorded (dir under OUT/runs/adapter/), the caller's (cJSON_Delete). */
static cJSON *run_config(const char *out, const char *dir) {
    char p[768], err[512];
    cJSON *m = NULL;
    snprintf(p, sizeof p, "%s/%s/runs/adapter/%s/run/manifest.json", tmpdir, out, dir);
    cr_assert_eq(ls_json_read_file(p, &m, err, sizeof err), LS_OK, "%s", err);
    cJSON *cfg = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "predicate"), "config");
    cJSON_Delete(m);
    return cfg;
}

static void note_outside(void *user, const char *field, const char *detail) {
    char *buf = user;
    size_t n = strlen(buf);
    snprintf(buf + n, 4096 - n, "%s: %s\n", field, detail);
}

Test(parity_adapter, dp_runs_every_cp_size_at_dp_2_and_its_control_fails, .init = setup, .fini = teardown,
     .timeout = 300) {
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE_DP, NULL, "--dp 1,2 --cp 1,2,4", "dp"), 0, "exit (%s/dp.txt)", tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "dp");
    cr_expect(ls_pa_level_holds(r, 2) && ls_pa_level_holds(r, 3) && ls_pa_level_holds(r, 4));
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "pass")));
    char *dps = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r, "dps"));
    const cJSON *cov_r = cJSON_GetObjectItemCaseSensitive(r, "coverage");
    char *cdps = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cov_r, "dps"));
    cr_expect_str_eq(dps, "[1,2]");
    cr_expect_str_eq(cdps, "[1,2]");
    free(dps);
    free(cdps);
    /* DP 2 at CP 1, 2, 4 (2, 4, 8 processes) in both dtypes, and on the prompt-only path (float64): every check a
       CP run has, and dp_grad */
    const char *kinds[] = {"logprob", "grad", "cp_grad", "cp_params", "dp_grad"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        bool pass = true;
        cr_expect_eq(n_checks(r, kinds[k], 2, &pass), 6 + 3, "%s at DP 2: %d checks", kinds[k],
                     n_checks(r, kinds[k], 2, NULL));
        cr_expect(pass, "a %s check at DP 2 fails", kinds[k]);
    }
    cr_expect_eq(n_checks(r, "ref_logprob", 2, NULL), 3 + 3, "ref_logprob at DP 2: float64 only");
    cr_expect_eq(n_checks(r, "ref_loss", 2, NULL), 3 + 3);
    int sampled = 0;
    const cJSON *sc;
    cJSON_ArrayForEach(sc, cJSON_GetObjectItemCaseSensitive(r, "checks"))
        sampled += strcmp(cJSON_GetObjectItemCaseSensitive(sc, "kind")->valuestring, "dp_grad") == 0 &&
                   strcmp(cJSON_GetObjectItemCaseSensitive(sc, "configuration")->valuestring, "p9-g4-sampled") == 0;
    cr_expect_eq(sampled, 3, "dp_grad on the prompt-only path at CP 1, 2, 4");
    cr_expect_eq(n_checks(r, "dp_grad", 1, NULL), 0, "a dp_grad check without its dp");
    /* each DP check's world is cp x dp and its name says both */
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "checks")) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c, "dp");
        if (d == NULL) continue;
        const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        int w = (int)cJSON_GetObjectItemCaseSensitive(c, "world")->valuedouble, cp = 0;
        const char *at = strstr(name, " cp");
        cr_assert(at != NULL && sscanf(at, " cp%d dp2", &cp) == 1 && strstr(name, " dp2") != NULL, "%s", name);
        cr_expect_eq(w, cp * 2, "%s: world %d", name, w);
    }
    /* the control: dp-no-scale at DP 2, every CP size and dtype, detected (its dp_grad fails) */
    int ctl = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "controls")) {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "fault")->valuestring, "dp-no-scale") != 0) continue;
        ctl++;
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(c, "breaks")->valuestring, "dp_grad");
        cr_expect_eq(cJSON_GetObjectItemCaseSensitive(c, "dp")->valuedouble, 2);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected")));
        if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "dtype")->valuestring, "f64") == 0)
            cr_expect_gt(cJSON_GetObjectItemCaseSensitive(c, "max_rel_err")->valuedouble, 0.4, "half the gradient");
    }
    cr_expect_eq(ctl, 6);
    /* the DP-2 CP-2 run's own configuration lies inside the coverage (world 4) */
    cJSON *cfg = run_config("dp", "f64/cp2-dp2-full");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(cfg, "dp_ranks")->valuedouble, 2);
    char notes[4096] = "";
    const cJSON *cov = cJSON_GetObjectItemCaseSensitive(r, "coverage");
    cr_expect_eq(ls_coverage_check(cov, cfg, 4, note_outside, notes), 0, "%s", notes);
    /* a report of DP 1 only does not cover it: the coverage names dp */
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE_DP, NULL, "--cp 1,2 --dtype f64", "dp1"), 0, "exit (%s/dp1.txt)", tmpdir);
    cJSON *r1 = ls_pa_report(tmpdir, "dp1");
    const cJSON *cov1 = cJSON_GetObjectItemCaseSensitive(r1, "coverage");
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(cov1, "dps"), "a DP-1 report states no dps");
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(r1, "dps"));
    notes[0] = 0;
    cr_expect_eq(ls_coverage_check(cov1, cfg, 4, note_outside, notes), 1, "%s", notes);
    cr_expect(strstr(notes, "dp: the run's data parallelism DP-2 is outside the report's coverage (dps none: DP 1 only)")
                  != NULL, "%s", notes);
    /* without --dp: no DP run, and the DP control is not needed (every level holds, the report passes) */
    cr_expect_eq(n_checks(r1, "dp_grad", 2, NULL), 0);
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r1, "controls"))
        cr_expect_str_neq(cJSON_GetObjectItemCaseSensitive(c, "fault")->valuestring, "dp-no-scale");
    cr_expect(ls_pa_level_holds(r1, 3) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r1, "pass")));
    /* a run whose dp_ranks does not divide its world, or is not a number, lies outside every coverage */
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "dp_ranks", cJSON_CreateNumber(3));
    notes[0] = 0;
    cr_expect_geq(ls_coverage_check(cov, cfg, 4, note_outside, notes), 1);
    cr_expect(strstr(notes, "dp: the run's dp_ranks 3 is not an integer >= 1 that divides its 4 rank(s)") != NULL, "%s",
              notes);
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "dp_ranks", cJSON_CreateString("2"));
    notes[0] = 0;
    cr_expect_geq(ls_coverage_check(cov, cfg, 4, note_outside, notes), 1);
    cr_expect(strstr(notes, "dp: the run's dp_ranks \"2\" is not an integer") != NULL, "%s", notes);
    /* the CP size compared is world / dp: a DP-2 run of 16 ranks is CP 8, which the report did not run */
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "dp_ranks", cJSON_CreateNumber(2));
    notes[0] = 0;
    cr_expect_eq(ls_coverage_check(cov, cfg, 16, note_outside, notes), 1, "%s", notes);
    cr_expect(strstr(notes, "world: the run's 8 rank(s)") != NULL, "%s", notes);
    cJSON_Delete(cfg);
    cJSON_Delete(r1);
    cJSON_Delete(r);
}

Test(parity_adapter, an_undetected_dp_control_or_the_dp_bug_fails_the_report, .init = setup, .fini = teardown,
     .timeout = 300) {
    /* a DP control that changes nothing: the report cannot tell DP-2 from DP-1 */
    cJSON *d = fixture_of(FIXTURE_DP);
    cJSON_AddStringToObject(controls_of(d), "undetected", "dp_grad");
    char path[512];
    ls_pa_write_adapter(tmpdir, d, "undetected-dp.json", path);
    cr_assert_eq(ls_pa_parity(tmpdir, path, NULL, "--dp 1,2 --cp 1,2 --dtype f64", "und"), 1, "exit (%s/und.txt)",
                 tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "und");
    cr_expect(ls_pa_level_holds(r, 2), "level 2 needs no DP control");
    cr_expect(!ls_pa_level_holds(r, 3) && !ls_pa_level_holds(r, 4));
    cr_expect(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "pass")));
    char *t = ls_pa_text(tmpdir, "und");
    cr_expect(strstr(t, "control undetected (f64, world 2, p9-g4) was not detected") != NULL, "%s", t);
    free(t);
    cJSON_Delete(r);
    /* the bug in the trainer (DDP's average of unscaled losses) at every fault-free DP run: dp_grad fails at
       half the gradient, and with it cp_grad and grad at DP 2; the DP-1 runs stay correct */
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE_DP, "FAKE_BREAK=dp-no-scale", "--dp 1,2 --cp 1,2 --dtype f64", "bug"), 1,
                 "exit (%s/bug.txt)", tmpdir);
    r = ls_pa_report(tmpdir, "bug");
    cr_expect(ls_pa_level_holds(r, 2) && !ls_pa_level_holds(r, 3) && !ls_pa_level_holds(r, 4));
    const cJSON *c;
    int failing = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "checks")) {
        const char *kind = cJSON_GetObjectItemCaseSensitive(c, "kind")->valuestring;
        bool pass = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"));
        bool dp = cJSON_GetObjectItemCaseSensitive(c, "dp") != NULL;
        if (!strcmp(kind, "dp_grad")) {
            cr_expect(!pass, "%s passes", cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
            cr_expect_gt(cJSON_GetObjectItemCaseSensitive(c, "max_rel_err")->valuedouble, 0.4);
            failing++;
        }
        if (!dp) cr_expect(pass, "a DP-1 check fails: %s", cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
    }
    cr_expect_eq(failing, 4, "dp_grad at DP 2, CP 1 and 2, the matrix's and the prompt-only path's");
    cJSON_Delete(r);
}

Test(parity_adapter, a_trainer_that_ignores_dp_is_named, .init = setup, .fini = teardown, .timeout = 300) {
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE_DP, "FAKE_BREAK=nodp", "--dp 1,2 --cp 1,2 --dtype f64", "nodp"), 2,
                 "exit (%s/nodp.txt)",
                 tmpdir);
    char *t = ls_pa_text(tmpdir, "nodp");
    cr_expect(strstr(t, "the run was launched at DP 2 ({dp}) and its configuration records dp_ranks (absent) 1") != NULL &&
                  strstr(t, "no report written") != NULL,
              "%s", t);
    free(t);
}

Test(parity_adapter, bad_dp_values_exit_2_naming_the_option, .init = setup, .fini = teardown) {
    const struct {
        const char *adapter, *extra, *want;
    } cases[] = {
        {FIXTURE_DP, "--dp 1,3", "--dp: 3 is not one of the DP sizes the adapter"},
        {FIXTURE_DP, "--dp 2", "--dp: '2' is not a list of distinct sizes in 1..8 that includes 1"},
        {FIXTURE_DP, "--dp 1,9", "--dp: '1,9' is not a list"},
        {FIXTURE_DP, "--dp 1,x", "--dp: '1,x' is not a list"},
        {FIXTURE_DP, "--dp 1,1", "--dp: '1,1' is not a list"},
        {FIXTURE, "--dp 1,2", "--dp: 2 is not one of the DP sizes the adapter"},
        {FIXTURE_DP, "--dp 1,2 --like /nonexistent", "drop --cp, --dp, --dtype"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[32];
        snprintf(out, sizeof out, "bad-dp-%zu", i);
        cr_expect_eq(ls_pa_parity(tmpdir, cases[i].adapter, NULL, cases[i].extra, out), 2, "%s: exit", cases[i].extra);
        char *t = ls_pa_text(tmpdir, out);
        cr_expect(strstr(t, cases[i].want) != NULL, "%s: %s", cases[i].extra, t);
        free(t);
    }
    char *t = ls_pa_text(tmpdir, "bad-dp-5");
    cr_expect(strstr(t, "field 'dp' absent: DP 1 only") != NULL, "%s", t);
    free(t);
    /* a DP size that does not divide the batch's group: a replica takes G / D members */
    cJSON *d = fixture_of(FIXTURE_DP);
    cJSON *b = cJSON_GetObjectItemCaseSensitive(d, "batch");
    cJSON_ReplaceItemInObjectCaseSensitive(b, "response_lens", cJSON_CreateIntArray((const int[]){3, 5, 4}, 3));
    cJSON_ReplaceItemInObjectCaseSensitive(b, "rewards", cJSON_CreateIntArray((const int[]){1, 0, 0}, 3));
    char path[512];
    ls_pa_write_adapter(tmpdir, d, "g3.json", path);
    cr_expect_eq(ls_pa_parity(tmpdir, path, NULL, "--dp 1,2", "g3"), 2);
    t = ls_pa_text(tmpdir, "g3");
    cr_expect(strstr(t, "--dp: 2 does not divide the 3 responses") != NULL && strstr(t, "batch.response_lens") != NULL,
              "%s", t);
    free(t);
    /* --dp is an adapter's trainer's */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, PARITY " --family hybrid --dp 1,2 --out %s/fam > %s/fam.txt 2>&1", tmpdir, tmpdir);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    t = ls_pa_text(tmpdir, "fam");
    cr_expect(strstr(t, "--dp: data parallelism is an adapter's trainer's") != NULL, "%s", t);
    free(t);
}

/* A v2 run of the stand-in's profile ("fake") written with longstraw_emit: world ranks, dp_ranks dp (0: not
 * recorded), each rank's first prompt forward capturing its shard of T positions (rank d cp + c: shard c). */
static bool write_dp_run(const char *run, int world, int dp, int cp, int T) {
    char py[512], cmd[2048];
    snprintf(py, sizeof py, "%s/mkdprun.py", tmpdir);
    FILE *f = fopen(py, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "import sys\nsys.path.insert(0, '" LS_SOURCE_DIR "/python')\nimport longstraw_emit as le\n"
            "world, dp, cp, T = %d, %d, %d, %d\n"
            "cfg = {'objective': 'grpo', 'grad_mode': 'full', 'dtype': 'f64', 'cp_ranks': cp, 'group': 4,\n"
            "       'steps_requested': 1, 'strategy': 'longstraw', 'faults': [], 'n_layers': 1,\n"
            "       'model': {'family': 'fake', 'vocab': 16, 'd_model': 3, 'init': 'gauss(0, 1)', 'scale': 1e-6},\n"
            "       'train_mode': 'full', 'epsilon': 0.2, 'beta': 0.04, 'temperature': 0.9}\n"
            "if dp: cfg['dp_ranks'] = dp\n"
            "paths = {'responses': 'given', 'old_logprobs': 'given', 'reference': 'given', 'prompt_groups': 'one',\n"
            "         'prefix': 'fresh', 'start': 'fresh', 'shards': 'uneven', 'pages': 'aligned', 'chunks': 'aligned',\n"
            "         'task': 'none', 'replay': 'taped', 'state_tier': 'device'}\n"
            "for r in range(world):\n"
            "    w = le.RunWriter(sys.argv[1], r, world, 'run-dp', 'fake', '" LS_SOURCE_DIR "/profiles/torch-cp.json',\n"
            "                     groups=[le.Group('world', 'world', list(range(world)))], phases=['capture'],\n"
            "                     layer_kinds=['embed'], config=dict(cfg), artifacts=[{'role': 'other', 'name': 'x'}],\n"
            "                     compress=False)\n"
            "    c = r %% cp\n"
            "    w.phase_begin('capture', 0)\n"
            "    w.layer_end('capture', 0, -1, -1, 'embed', 'fwd', (c + 1) * T // cp - c * T // cp, 1.0)\n"
            "    w.phase_end('capture', 0)\n"
            "    for k, v in paths.items():\n        w.path(k, v)\n"
            "    w.close()\n"
            "le.write_manifest(sys.argv[1])\n",
            world, dp, cp, T);
    fclose(f);
    snprintf(cmd, sizeof cmd, "rm -rf %s && /usr/bin/python3 %s %s > %s.mk.txt 2>&1", run, py, run, run);
    return system(cmd) == 0;
}

Test(parity_adapter, like_takes_the_runs_dp_size, .init = setup, .fini = teardown, .timeout = 300) {
    char run[512], opt[1024];
    snprintf(run, sizeof run, "%s/dprun", tmpdir);
    if (!write_dp_run(run, 4, 2, 2, 21)) cr_skip_test("no python3 with zstandard to write a v2 run (%s.mk.txt)", run);
    snprintf(opt, sizeof opt, "--like %s", run);
    /* the stand-in's runs record a v2 configuration (its model under config.model), as the run's */
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE_DP, "FAKE_MANIFEST=v2", opt, "like"), 0, "exit (%s/like.txt)", tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "like");
    char *dps = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r, "dps"));
    const cJSON *cov_r = cJSON_GetObjectItemCaseSensitive(r, "coverage");
    char *cdps = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cov_r, "dps"));
    char *worlds = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r, "worlds"));
    cr_expect_str_eq(dps, "[1,2]");
    cr_expect_str_eq(cdps, "[1,2]");
    cr_expect_str_eq(worlds, "[1,2]", "the run's CP size is world / dp = 2");
    free(dps);
    free(cdps);
    free(worlds);
    /* DP 2 at the run's CP size only (world 4), float64 (the run's dtype), full (its gradient mode) */
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "checks")) {
        if (cJSON_GetObjectItemCaseSensitive(c, "dp") == NULL) continue;
        n++;
        cr_expect_eq(cJSON_GetObjectItemCaseSensitive(c, "world")->valuedouble, 4, "%s",
                     cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(c, "dtype")->valuestring, "f64");
        const cJSON *gm = cJSON_GetObjectItemCaseSensitive(c, "grad_mode");
        if (gm) cr_expect_str_eq(gm->valuestring, "full");
    }
    cr_expect_eq(n, 2 * 7, "logprob, ref_logprob, ref_loss, grad, cp_grad, cp_params, dp_grad at DP 2 x CP 2, the "
                 "matrix's and the prompt-only path's: %d", n);
    bool pass = true;
    cr_expect_eq(n_checks(r, "dp_grad", 2, &pass), 2);
    cr_expect(pass);
    /* the prompt: the first replica's shards (10|11 of T = 21), not every rank's sum */
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "configurations"),
                                                                     0), "prompt_len")->valuedouble, 22);
    /* the run lies inside the report */
    char p[600], err[512], notes[4096] = "";
    cJSON *m = NULL;
    snprintf(p, sizeof p, "%s/manifest.json", run);
    cr_assert_eq(ls_json_read_file(p, &m, err, sizeof err), LS_OK, "%s", err);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "predicate"), "config");
    cr_expect_eq(ls_coverage_check(cJSON_GetObjectItemCaseSensitive(r, "coverage"), cfg, 4, note_outside, notes), 0,
                 "%s", notes);
    cJSON_Delete(m);
    cJSON_Delete(r);
    /* refused: a dp_ranks that does not divide the world; one the adapter does not support */
    if (!write_dp_run(run, 4, 3, 2, 21)) cr_skip_test("mkdprun");
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE_DP, NULL, opt, "like-3"), 2);
    char *t = ls_pa_text(tmpdir, "like-3");
    cr_expect(strstr(t, "config \"dp_ranks\" is not an integer >= 1 that divides the run's 4 ranks") != NULL, "%s", t);
    free(t);
    if (!write_dp_run(run, 4, 2, 2, 21)) cr_skip_test("mkdprun");
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, opt, "like-nodp"), 2);
    t = ls_pa_text(tmpdir, "like-nodp");
    cr_expect(strstr(t, "config \"dp_ranks\" 2 is not one of the DP sizes the adapter") != NULL &&
                  strstr(t, "field 'dp' absent: DP 1 only") != NULL,
              "%s", t);
    free(t);
}
