/* test_audit_dp.c - the audit's parity rules for a run of data-parallel
 * replicas (config dp_ranks D > 1: D replicas of a CP group, world cp x D;
 * docs/audit.md parity.dp_grad, docs/parity.md "Data parallelism").
 *
 * The run is the hand-written v2 fixture (test_v2_fixture.h, world 2) whose
 * configuration is set, once loaded, to DP 2 x CP 1 (or left DP 1), audited
 * with a parity report written by hand (a TEST FIXTURE for the level logic:
 * longstraw-parity's own DP reports are test_parity_adapter's) of the
 * fixture's build:
 *  - a report whose checks of DP 2 at world 2 pass and whose coverage lists
 *    dps [1, 2]: parity.dp_grad, parity.cp_grad, parity.coverage pass;
 *  - a failing dp_grad check fails parity.dp_grad naming it; dp_grad checks
 *    of another DP size, of CP 2 (no "dp") or of the other gradient mode do
 *    not speak for the run (deny by default), nor do CP-2 checks for its
 *    cp_grad; a report of DP 1 only leaves it outside the coverage, naming dp;
 *  - a DP-1 run: parity.dp_grad not applicable, saying why, and the DP checks
 *    of the same world do not speak for it;
 *  - a profile control that breaks dp_grad is required of DP runs only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "tests/support/test_receipts_support.h"
#include "tests/support/test_v2_fixture.h"
#include "tests/audit/test_audit_support.h"
#include "tests/support/test_parity_report.h"

/* the shared rule look-ups (test_audit_support.c) under the names this file uses */
#define dump ls_test_audit_dump
#define rule ls_test_audit_rule
#define expect_pass ls_test_audit_expect_pass
#define expect_fail ls_test_audit_expect_fail_saying

static char *tmp;
static char run_dir[4096], par[4200];
static void setup(void) {
    tmp = ls_test_mkdtemp();
    snprintf(run_dir, sizeof run_dir, "%s/run", tmp);
    snprintf(par, sizeof par, "%s/parity.json", tmp);
    ls_v2_fixture o = {0};
    ls_v2_fixture_write(run_dir, &o);
}
static void teardown(void) { ls_test_scratch_free(&tmp); }

/* The run's configuration as the tests set it: the fixture's, DP dp (0: no dp_ranks) x CP world / dp, the
 * gradient mode gm, and a recorded path. */
static void set_config(cJSON *cfg, int dp, const char *gm) {
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "cp_ranks", cJSON_CreateNumber(dp > 1 ? 2 / dp : 2));
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "dp_ranks");
    if (dp > 0) cJSON_AddNumberToObject(cfg, "dp_ranks", dp);
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "grad_mode", cJSON_CreateString(gm));
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "paths");
    cJSON_AddItemToObject(cfg, "paths",
                          cJSON_Parse("{\"responses\":[\"given\"],\"old_logprobs\":[\"given\"],\"reference\":[\"none\"],"
                                      "\"prompt_groups\":[\"one\"],\"prefix\":[\"fresh\"],\"start\":[\"fresh\"],"
                                      "\"shards\":[\"one\"],\"pages\":[\"aligned\"],\"chunks\":[\"aligned\"],"
                                      "\"task\":[\"none\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}"));
}

/* One check: kind at world w, DP dp (1: no "dp"), gradient mode gm (NULL: none), f64, passing or not. */
static cJSON *check(const char *kind, int w, int dp, const char *gm, bool pass) {
    cJSON *c = cJSON_CreateObject();
    char name[96];
    snprintf(name, sizeof name, "%s fixture f64 w%d dp%d %s", kind, w, dp, gm ? gm : "");
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "kind", kind);
    cJSON_AddStringToObject(c, "dtype", "f64");
    cJSON_AddNumberToObject(c, "world", w);
    if (dp > 1) cJSON_AddNumberToObject(c, "dp", dp);
    cJSON_AddStringToObject(c, "configuration", "fixture");
    if (gm) cJSON_AddStringToObject(c, "grad_mode", gm);
    cJSON_AddStringToObject(c, "reference", "fixture");
    cJSON_AddStringToObject(c, "candidate", "fixture");
    cJSON_AddNumberToObject(c, "max_abs_err", pass ? 0 : 0.5);
    cJSON_AddNumberToObject(c, "max_rel_err", pass ? 0 : 0.5);
    cJSON_AddNumberToObject(c, "tolerance", 1e-10);
    cJSON_AddStringToObject(c, "worst", "t");
    cJSON_AddBoolToObject(c, "pass", pass);
    return c;
}

typedef struct {
    int dps;               /* coverage.dps [1, dps] (0: absent, DP 1 only) */
    int dp;                /* the DP checks' size */
    bool dp_grad_fails;    /* the dp_grad check fails */
    bool dp_grad_cp;       /* the dp_grad check is of CP 2 (no "dp") */
    const char *dp_grad_gm;/* the dp_grad check's gradient mode */
    bool cp_only;          /* the per-world checks of world 2 are CP-2's only (no "dp") */
    bool no_dp_control;    /* leave out the DP control (dp-no-scale, dp_grad) a DP report holds */
} report_opt;

/* The report: the fixture's build and model, every per-world kind at world 2 (of DP o->dp, or CP 2's), the
 * float64 links at world 1, the torch-cp profile's controls detected. */
static void write_report(const cJSON *cfg, const report_opt *o) {
    char err[300], hex[65];
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "schema", "urn:longstraw:schema:parity:v3");
    cJSON_AddStringToObject(d, "build_digest", LS_V2_FIXTURE_BUILD_DIGEST);
    cJSON_AddStringToObject(d, "family", "torch-cp");
    cJSON_AddItemToObject(d, "dtypes", cJSON_CreateStringArray((const char *[]){"f64"}, 1));
    cJSON_AddItemToObject(d, "worlds", cJSON_CreateIntArray((const int[]){1, 2}, 2));
    if (o->dps > 1) cJSON_AddItemToObject(d, "dps", cJSON_CreateIntArray((const int[]){1, o->dps}, 2));
    cJSON_AddStringToObject(d, "trainer", "fixture");
    cJSON_AddStringToObject(d, "model_config", "fixture");
    cJSON_AddNumberToObject(d, "fd_step", 1e-4);
    cJSON_AddNumberToObject(d, "created_unix_ns", 0);
    cJSON_AddItemToObject(d, "configurations",
                          cJSON_Parse("[{\"name\":\"fixture\",\"what\":\"\",\"prompt_len\":9,\"group\":2,"
                                      "\"response_lens\":[3,5]}]"));
    /* coverage: the run's own settings, CP sizes 1 and 2, DP sizes as asked */
    cJSON *cov = cJSON_AddObjectToObject(d, "coverage"), *model = ls_coverage_model(cfg);
    cr_assert_eq(ls_coverage_model_sha256_v2(model, hex, err, sizeof err), LS_OK, "%s", err);
    cJSON_AddStringToObject(cov, "family", "torch-cp");
    cJSON_AddItemToObject(cov, "model", model);
    cJSON_AddStringToObject(cov, "model_sha256", hex);
    cJSON *tm = cJSON_AddArrayToObject(cov, "train_modes");
    cJSON_AddItemToArray(tm, ls_coverage_train_mode(cfg, err, sizeof err));
    cJSON_AddItemToObject(cov, "objectives", ls_coverage_objectives(cfg, err, sizeof err));
    cJSON_AddItemToObject(cov, "grad_modes", cJSON_CreateStringArray((const char *[]){"detached", "full"}, 2));
    cJSON_AddItemToObject(cov, "strategies", cJSON_CreateStringArray((const char *[]){"longstraw"}, 1));
    cJSON_AddItemToObject(cov, "dtypes", cJSON_CreateStringArray((const char *[]){"f64"}, 1));
    cJSON_AddItemToObject(cov, "worlds", cJSON_CreateIntArray((const int[]){1, 2}, 2));
    if (o->dps > 1) cJSON_AddItemToObject(cov, "dps", cJSON_CreateIntArray((const int[]){1, o->dps}, 2));
    cJSON *paths = cJSON_AddObjectToObject(cov, "paths");
    cr_assert_eq(ls_coverage_paths_add(paths, cfg, err, sizeof err), LS_OK, "%s", err);
    cJSON_AddStringToObject(cov, "build_digest", LS_V2_FIXTURE_BUILD_DIGEST);
    cJSON_AddStringToObject(cov, "reducible", "lengths");
    cJSON *checks = cJSON_AddArrayToObject(d, "checks");
    int dp = o->cp_only ? 1 : o->dp;
    cJSON_AddItemToArray(checks, check("logprob", 2, dp, NULL, true));
    cJSON_AddItemToArray(checks, check("grad", 2, dp, "full", true));
    cJSON_AddItemToArray(checks, check("cp_grad", 2, dp, "full", true));
    cJSON_AddItemToArray(checks, check("cp_params", 2, dp, "full", true));
    cJSON_AddItemToArray(checks, check("dp_grad", 2, o->dp_grad_cp ? 1 : o->dp, o->dp_grad_gm, !o->dp_grad_fails));
    cJSON_AddItemToArray(checks, check("ref_logprob", 1, 1, NULL, true));
    cJSON_AddItemToArray(checks, check("fd_grad", 1, 1, "full", true));
    cJSON_AddItemToArray(checks, check("ref_loss", 1, 1, NULL, true));
    cJSON *controls = cJSON_AddArrayToObject(d, "controls");
    static const char *const ctl[][2] = {{"zero-state", "logprob"},  {"skip-dkv-reduce", "cp_grad"},
                                         {"loss-cp-scale", "cp_grad"}, {"fake-reduce", "cp_grad"},
                                         {"decay-grad", "grad"},       {"detached", "grad"}};
    for (size_t k = 0; k < sizeof ctl / sizeof ctl[0]; k++)
        cJSON_AddItemToArray(controls,
                             ls_test_parity_control(ctl[k][0], ctl[k][1], "f64", 2, 0, 0.5,
                                                    check(ctl[k][1], 2, 1, NULL, false)));
    if (o->dps > 1 && !o->no_dp_control) /* the profile's DP control, run at DP dps */
        cJSON_AddItemToArray(controls, ls_test_parity_control("dp-no-scale", "dp_grad", "f64", 2, o->dps, 0.5,
                                                              check("dp_grad", 2, o->dps, "full", false)));
    cJSON_AddArrayToObject(d, "links");
    cJSON_AddArrayToObject(d, "levels");
    cJSON_AddArrayToObject(d, "timings");
    cJSON_AddArrayToObject(d, "notes");
    cJSON_AddBoolToObject(d, "pass", 1);
    cr_assert_eq(ls_json_write_file(par, d, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(d);
}

/* The fixture audited with the report, its configuration DP dp x CP 2 / dp in mode gm (profiles: NULL, the
 * shipped ones).  The report is written from the configuration the run will have. */
static ls_audit_run *audit(int dp, const char *gm, const report_opt *o, const char *profiles) {
    /* the configuration as it will be: the report's coverage is taken from it */
    char p[4300], err[400] = "";
    snprintf(p, sizeof p, "%s/manifest.json", run_dir);
    cJSON *m = NULL;
    cr_assert_eq(ls_json_read_file(p, &m, err, sizeof err), LS_OK, "%s", err);
    cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "predicate"), "config");
    set_config(cfg, dp, gm);
    write_report(cfg, o);
    cJSON_Delete(m);
    ls_audit_options opt = {.run_dir = run_dir, .parity_path = par, .profiles_dir = profiles};
    ls_audit_run *run = NULL;
    cr_assert_eq(ls_audit_load(&opt, &run, err, sizeof err), LS_OK, "%s", err);
    cr_assert_not_null(run->config);
    set_config((cJSON *)run->config, dp, gm); /* the run as a DP x CP grid (its traces stay the fixture's) */
    cr_assert_eq(ls_audit_evaluate(run), LS_OK);
    return run;
}




/* id fails, and its message or one of its evidence lines holds want. */

Test(audit_dp, a_dp_run_is_held_to_the_dp_checks_of_its_size, .init = setup, .fini = teardown) {
    report_opt o = {.dps = 2, .dp = 2, .dp_grad_gm = "full"};
    ls_audit_run *run = audit(2, "full", &o, NULL);
    const ls_audit_rule *r = rule(run, "parity.dp_grad");
    cr_expect_eq(r->level, 3);
    expect_pass(run, "parity.dp_grad");
    cr_expect_eq(r->matched, 1);
    const char *per_world[] = {"parity.build", "parity.coverage", "parity.controls", "parity.logprob", "parity.forward",
                               "parity.cp_grad", "parity.cp_params", "parity.grad", "parity.fd_grad", "parity.loss"};
    for (size_t i = 0; i < sizeof per_world / sizeof per_world[0]; i++) expect_pass(run, per_world[i]);
    ls_audit_free(run);

    /* the replicas' gradient differs from the one group's: named */
    o.dp_grad_fails = true;
    run = audit(2, "full", &o, NULL);
    expect_fail(run, "parity.dp_grad", "check dp_grad fixture f64 w2 dp2 full (dp_grad, world 2) fails: max_rel_err 0.5");
    ls_audit_free(run);

    /* deny by default: dp_grad checks of another DP size, of CP 2 (no dp), of the other gradient mode */
    o = (report_opt){.dps = 2, .dp = 2, .dp_grad_gm = "full", .dp_grad_cp = true};
    run = audit(2, "full", &o, NULL);
    expect_fail(run, "parity.dp_grad", "no passing dp_grad check for world 2 at DP-2 in f64 (full mode)");
    ls_audit_free(run);
    o = (report_opt){.dps = 2, .dp = 2, .dp_grad_gm = "detached"};
    run = audit(2, "full", &o, NULL);
    expect_fail(run, "parity.dp_grad", "no passing dp_grad check for world 2 at DP-2 in f64 (full mode)");
    ls_audit_free(run);
    /* CP-2 checks of the same world do not speak for DP 2 x CP 1 */
    o = (report_opt){.dps = 2, .dp = 2, .dp_grad_gm = "full", .cp_only = true};
    run = audit(2, "full", &o, NULL);
    expect_fail(run, "parity.cp_grad", "no passing cp_grad check for world 2 at DP-2 in f64");
    expect_fail(run, "parity.logprob", "no passing logprob check for world 2 at DP-2");
    expect_fail(run, "parity.grad", "no passing grad check for world 2 at DP-2");
    ls_audit_free(run);

    /* a report of DP 1 only: the run lies outside its coverage, dp named */
    o = (report_opt){.dps = 0, .dp = 2, .dp_grad_gm = "full"};
    run = audit(2, "full", &o, NULL);
    expect_fail(run, "parity.coverage", "the run's data parallelism DP-2 is outside the report's coverage (dps none: DP 1 "
                                        "only) (dp)");
    ls_audit_free(run);
}

Test(audit_dp, a_dp_1_run_has_no_dp_rule_and_no_dp_checks, .init = setup, .fini = teardown) {
    /* the DP-2 checks of world 2 do not speak for a CP-2 run of world 2 */
    report_opt o = {.dps = 2, .dp = 2, .dp_grad_gm = "full"};
    ls_audit_run *run = audit(0, "full", &o, NULL);
    const ls_audit_rule *r = rule(run, "parity.dp_grad");
    cr_expect(!r->applicable, "%s", r->message);
    cr_expect(strstr(r->message, "not applicable: the run has no data-parallel replicas (config dp_ranks absent)") != NULL,
              "%s", r->message);
    expect_fail(run, "parity.cp_grad", "no passing cp_grad check for world 2 in f64");
    expect_pass(run, "parity.coverage");
    ls_audit_free(run);
    run = audit(1, "full", &o, NULL);
    r = rule(run, "parity.dp_grad");
    cr_expect(!r->applicable && strstr(r->message, "(config dp_ranks 1)") != NULL, "%s", r->message);
    ls_audit_free(run);
    /* with CP-2 checks it passes as before */
    o.cp_only = true;
    run = audit(0, "full", &o, NULL);
    expect_pass(run, "parity.cp_grad");
    expect_pass(run, "parity.logprob");
    ls_audit_free(run);
}

/* The shipped torch-cp profile declares the DP control dp-no-scale (dp_grad); NULL: the audit's
 * default profiles, the source tree's. */
static const char *profiles_with_dp_control(void) {
    char err[300];
    cJSON *doc = NULL;
    cr_assert_eq(ls_json_read_file(LS_SOURCE_DIR "/profiles/torch-cp.json", &doc, err, sizeof err), LS_OK, "%s", err);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "controls"), "dp-no-scale");
    cr_assert(cJSON_IsString(c) && strcmp(c->valuestring, "dp_grad") == 0,
              "profiles/torch-cp.json: controls.dp-no-scale is not dp_grad");
    cJSON_Delete(doc);
    return NULL;
}

Test(audit_dp, a_dp_control_is_required_of_dp_runs_only, .init = setup, .fini = teardown) {
    const char *profiles = profiles_with_dp_control();
    report_opt o = {.dps = 2, .dp = 2, .dp_grad_gm = "full", .no_dp_control = true};
    ls_audit_run *run = audit(2, "full", &o, profiles);
    expect_fail(run, "parity.controls", "the parity report has no dp-no-scale control");
    ls_audit_free(run);
    o.no_dp_control = false;
    run = audit(2, "full", &o, profiles);
    expect_pass(run, "parity.controls");
    ls_audit_free(run);
    o = (report_opt){.dps = 0, .dp = 1, .cp_only = true};
    run = audit(0, "full", &o, profiles);
    expect_pass(run, "parity.controls");
    ls_audit_free(run);
}
