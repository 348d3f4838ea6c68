/* test_parity_adapter.c - longstraw-parity --adapter FILE (parity_adapter.h).
 *
 *  - the loader: the fixture adapter loads; each required field missing, an
 *    unknown placeholder (named with its field), a file over the size cap,
 *    not JSON, no f64, no CP 1, a control named detached, a control at a CP
 *    size the adapter lacks, rewards of another count: each refused, the
 *    field named;
 *  - templates: every placeholder expanded, {{ }} literal, an expansion past
 *    the cap refused, launch n for CP > 1;
 *  - the matrix on a stand-in trainer (tests/parity/parity_adapter_fake_train.py,
 *    a model differentiated by hand): every level holds, every control
 *    detected (at its own CP size where the adapter says), the report
 *    schema-valid with the adapter's name, profile and sha256; the flat forms
 *    (one "logprobs" tensor, losses as {weights, loss}) read alike;
 *  - hostile trainers: a control that changes nothing (the report's
 *    controls fail, exit 1), a run that writes no gradient, a log-prob row
 *    of the wrong length, a loss mode one loss short or naming the wrong
 *    weights file, a crash, a hang past
 *    --timeout, an objective other than the pinned one (exit 2, the file or
 *    run named, no report), a NaN gradient (its check fails, exit 1);
 *  - --key signs the adapter's report (its envelope beside it).
 * Data parallelism (--dp, {dp}, dp_grad): test_parity_adapter_dp.c. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/format/coverage.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "tests/support/test_tmpdir.h"
#include "tests/parity/test_parity_adapter_support.h"

#define PARITY LS_BINARY_DIR "/parity/longstraw-parity"
#define FIXTURE LS_SOURCE_DIR "/tests/data/parity_adapter_fake.json"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "parity-adapter"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static cJSON *fixture(void) { return ls_pa_fixture(FIXTURE); }

Test(parity_adapter, the_fixture_and_longstraw_train_load) {
    ls_parity_adapter a;
    char err[1024] = "";
    cr_assert_eq(ls_parity_adapter_load(FIXTURE, &a, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(a.name, "fake");
    cr_expect_eq(a.n_controls, 4);
    cr_expect_eq(a.group, 3);
    cr_expect(a.dtype[LS_PARITY_F64] && a.dtype[LS_PARITY_F32]);
    cr_expect(strstr(a.dir, "/tests/data") != NULL, "{dir} is %s", a.dir);
    ls_parity_adapter_free(&a);
    cr_assert_eq(ls_parity_adapter_load(LS_SOURCE_DIR "/adapters/longstraw-train.json", &a, err, sizeof err), LS_OK,
                 "%s", err);
    cr_expect_str_eq(a.profile, "hybrid");
    cr_expect(a.adamw && a.opt.lr == 1e-3);
    cr_expect(!a.prompt_only); /* longstraw-train's wrapper takes given responses only */
    ls_parity_adapter_free(&a);
    /* the PyTorch example samples on a prompt-only batch (batch.prompt_only) */
    cr_assert_eq(ls_parity_adapter_load(LS_SOURCE_DIR "/examples/torch_cp/adapter.json", &a, err, sizeof err), LS_OK,
                 "%s", err);
    cr_expect(a.prompt_only);
    cr_expect_eq(a.prompt_len, 13);
    ls_parity_adapter_free(&a);
}

Test(parity_adapter, each_required_field_missing_is_named, .init = setup, .fini = teardown) {
    const char *req[] = {"schema", "name", "profile", "launch", "args", "objective", "dtypes", "cp", "faults",
                         "modes", "batch"};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        cJSON *d = fixture();
        cJSON_DeleteItemFromObjectCaseSensitive(d, req[i]);
        char want[64];
        snprintf(want, sizeof want, "\"%s\"", req[i]);
        char path[512], err[1024] = "";
        ls_pa_write_adapter(tmpdir, d, "bad.json", path);
        ls_parity_adapter a;
        cr_expect_neq(ls_parity_adapter_load(path, &a, err, sizeof err), LS_OK, "%s missing: loaded", req[i]);
        cr_expect(strstr(err, req[i]) != NULL && strstr(err, "required") != NULL, "%s missing: %s", req[i], err);
    }
    /* nested: a mode, the launch for N processes, the batch's vocab */
    cJSON *d = fixture();
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "modes"), "loss");
    ls_pa_refused(tmpdir, d, "loss");
    d = fixture();
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "launch"), "n");
    ls_pa_refused(tmpdir, d, "/launch");
    d = fixture();
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "batch"), "vocab");
    ls_pa_refused(tmpdir, d, "vocab");
}

Test(parity_adapter, what_a_schema_cannot_say_is_refused_by_name, .init = setup, .fini = teardown) {
    cJSON *d = fixture();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(d, "args"), 3, cJSON_CreateString("--x={cpu}"));
    ls_pa_refused(tmpdir, d, "field 'args[3]': unknown placeholder '{cpu}'");
    d = fixture();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "launch"), "n"), 0,
                             cJSON_CreateString("{dir"));
    ls_pa_refused(tmpdir, d, "field 'launch.n[0]': unknown placeholder '{'");
    d = fixture();
    cJSON_ReplaceItemInObjectCaseSensitive(d, "dtypes", cJSON_CreateStringArray((const char *[]){"f32"}, 1));
    ls_pa_refused(tmpdir, d, "field 'dtypes': f64 must be one");
    d = fixture();
    cJSON_ReplaceItemInObjectCaseSensitive(d, "cp", cJSON_CreateIntArray((const int[]){2, 4}, 2));
    ls_pa_refused(tmpdir, d, "field 'cp': 1 must be one");
    d = fixture();
    cJSON *ctl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "faults"), "controls");
    cJSON_AddStringToObject(ctl, "detached", "grad");
    ls_pa_refused(tmpdir, d, "control 'detached'");
    d = fixture();
    ctl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "faults"), "controls");
    cJSON *o = cJSON_AddObjectToObject(ctl, "eight");
    cJSON_AddStringToObject(o, "breaks", "cp_grad");
    cJSON_AddNumberToObject(o, "cp", 8);
    ls_pa_refused(tmpdir, d, "field 'faults.controls.eight.cp'");
    d = fixture();
    ctl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "faults"), "controls");
    cJSON_AddStringToObject(ctl, "bad-kind", "fd_grad");
    ls_pa_refused(tmpdir, d, "/faults/controls/bad-kind");
    d = fixture();
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "batch"), "rewards",
                                           cJSON_CreateIntArray((const int[]){1, 0}, 2));
    ls_pa_refused(tmpdir, d, "field 'batch.rewards': 2 rewards for 3 responses");
    d = fixture();
    cJSON_AddStringToObject(d, "shell", "rm -rf /");
    ls_pa_refused(tmpdir, d, "shell");
    /* not JSON; over the size cap */
    char path[512], err[1024] = "";
    snprintf(path, sizeof path, "%s/notjson.json", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("{\"schema\": ", f);
    fclose(f);
    ls_parity_adapter a;
    cr_expect_neq(ls_parity_adapter_load(path, &a, err, sizeof err), LS_OK);
    cr_expect(strstr(err, "notjson.json") != NULL, "%s", err);
    snprintf(path, sizeof path, "%s/huge.json", tmpdir);
    f = fopen(path, "w");
    fputs("{\"description\": \"", f);
    for (int i = 0; i < 70000; i++) fputc('x', f);
    fputs("\"}", f);
    fclose(f);
    cr_expect_neq(ls_parity_adapter_load(path, &a, err, sizeof err), LS_OK);
    cr_expect(strstr(err, "65536") != NULL, "the size cap is not named: %s", err);
}

Test(parity_adapter, templates_expand_every_placeholder_and_no_more) {
    ls_parity_adapter a;
    char err[1024] = "", out[LS_PARITY_ADAPTER_ARG_MAX + 1];
    cr_assert_eq(ls_parity_adapter_load(FIXTURE, &a, err, sizeof err), LS_OK, "%s", err);
    ls_parity_adapter_vars v = {.mode = "run", .cp = 4, .dtype = "f32", .grad_mode = "detached", .fault = "x",
                                .weights = "W", .batch = "B", .out = "O", .seed = 17};
    cr_assert_eq(ls_parity_adapter_expand(&a, "{mode}{cp}{dtype}{grad_mode}{fault}{weights}{batch}{out}{seed}{{}}", &v,
                                          out, sizeof out), LS_OK);
    cr_expect_str_eq(out, "run4f32detachedxWBO17{}");
    cr_assert_eq(ls_parity_adapter_expand(&a, "{dir}", &v, out, sizeof out), LS_OK);
    cr_expect_str_eq(out, a.dir);
    char big[LS_PARITY_ADAPTER_ARG_MAX + 2];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    v.out = big;
    cr_expect_eq(ls_parity_adapter_expand(&a, "--out={out}", &v, out, sizeof out), LS_ERR_ARG);
    ls_parity_job j;
    cr_expect_neq(ls_parity_adapter_job(&a, &v, "/dev/null", &j, err, sizeof err), LS_OK);
    cr_expect(strstr(err, "expands past") != NULL, "%s", err);
    v.out = "O";
    cr_assert_eq(ls_parity_adapter_job(&a, &v, "/dev/null", &j, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(j.argv[0], "/usr/bin/python3");
    cr_expect_eq(j.argc, 2 + 26);
    ls_parity_job_free(&j);
    ls_parity_adapter_free(&a);
}

/* ---- the matrix on the stand-in ------------------------------------------------- */

Test(parity_adapter, the_stand_in_passes_every_level_and_its_controls_fail, .init = setup, .fini = teardown,
     .timeout = 300) {
    char env[600];
    snprintf(env, sizeof env, "FAKE_LAUNCHES=%s/launches.txt", tmpdir);
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE, env, NULL, "ok"), 0, "exit (%s/ok.txt)", tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "ok");
    /* the timings' total counts every launch of the trainer (the stand-in counted its own), and is the rows' sum */
    char lp[600];
    snprintf(lp, sizeof lp, "%s/launches.txt", tmpdir);
    FILE *lf = fopen(lp, "r");
    cr_assert_not_null(lf, "the stand-in counted no launch");
    int launches = 0;
    for (int ch; (ch = fgetc(lf)) != EOF;) launches += ch == '\n';
    fclose(lf);
    double rows = 0, total = -1;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r, "timings")) {
        double n = cJSON_GetObjectItemCaseSensitive(t, "runs")->valuedouble;
        if (strcmp(cJSON_GetObjectItemCaseSensitive(t, "part")->valuestring, "total") == 0) total = n;
        else rows += n;
    }
    cr_expect_gt(launches, 20);
    cr_expect_eq(total, launches, "total runs %g, the trainer was launched %d times", total, launches);
    cr_expect_eq(total, rows, "total runs %g, the rows sum to %g", total, rows);
    /* the report records the build it ran: the runs' build object as their manifests have it */
    char want_digest[65];
    cr_assert_eq(ls_digest_sha256_hex("fake-trainer-build-1", 20, want_digest), LS_OK);
    const cJSON *build = cJSON_GetObjectItemCaseSensitive(r, "build");
    cr_assert(cJSON_IsObject(build), "no build object");
    cr_expect_eq(cJSON_GetArraySize(build), 1, "the stand-in's build object is its digest alone");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(build, "build_digest")->valuestring, want_digest);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(r, "build_digest")->valuestring, want_digest);
    cr_expect(ls_pa_level_holds(r, 2) && ls_pa_level_holds(r, 3) && ls_pa_level_holds(r, 4));
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(r, "family")->valuestring, "fake");
    const cJSON *ad = cJSON_GetObjectItemCaseSensitive(r, "adapter");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(ad, "name")->valuestring, "fake");
    char sha[65], err[256];
    cr_assert_eq(ls_digest_sha256_file_hex(FIXTURE, sha, err, sizeof err), LS_OK);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(ad, "sha256")->valuestring, sha);
    /* every kind the levels need, in both dtypes where per-dtype */
    const char *kinds[] = {"logprob", "ref_logprob", "cp_grad", "cp_params", "grad", "fd_grad", "ref_loss"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int n = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "checks")) {
            if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "kind")->valuestring, kinds[k]) != 0) continue;
            n++;
            cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass")), "%s fails",
                      cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
        }
        cr_expect_gt(n, 0, "no %s check", kinds[k]);
    }
    /* controls: each detected; scale-grad at CP 1 only (its cp), the others at 2 and 4, detached at 2 and 4 */
    int scale = 0, drop = 0, det = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "controls")) {
        const char *f = cJSON_GetObjectItemCaseSensitive(c, "fault")->valuestring;
        int w = (int)cJSON_GetObjectItemCaseSensitive(c, "world")->valuedouble;
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected")), "control %s at %d not detected", f, w);
        if (!strcmp(f, "scale-grad")) {
            scale++;
            cr_expect_eq(w, 1);
        }
        if (!strcmp(f, "drop-shard")) {
            drop++;
            cr_expect_gt(w, 1);
        }
        if (!strcmp(f, "detached")) {
            det++;
            cr_expect_gt(w, 1);
        }
    }
    cr_expect_eq(scale, 2, "scale-grad: one per dtype at CP 1");
    cr_expect_eq(drop, 4, "drop-shard: per dtype at CP 2 and 4");
    cr_expect_eq(det, 4);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "pass")));
    cJSON_Delete(r);
}

Test(parity_adapter, the_flat_forms_are_read_alike, .init = setup, .fini = teardown, .timeout = 300) {
    /* one tensor "logprobs" in member order; losses as {"weights", "loss"} */
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE, "FAKE_FORMAT=flat", "--dtype f64 --cp 1,2", "flat"), 0,
                 "exit (%s/flat.txt)", tmpdir);
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, "--dtype f64 --cp 1,2", "members"), 0, "exit (%s/members.txt)",
                 tmpdir);
    cJSON *a = ls_pa_report(tmpdir, "flat"), *b = ls_pa_report(tmpdir, "members");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, "checks"), *y = cJSON_GetObjectItemCaseSensitive(b, "checks");
    cr_assert_eq(cJSON_GetArraySize(x), cJSON_GetArraySize(y));
    for (int i = 0; i < cJSON_GetArraySize(x); i++) {
        const cJSON *cx = cJSON_GetArrayItem(x, i), *cy = cJSON_GetArrayItem(y, i);
        cr_expect_eq(cJSON_GetObjectItemCaseSensitive(cx, "max_rel_err")->valuedouble,
                     cJSON_GetObjectItemCaseSensitive(cy, "max_rel_err")->valuedouble, "%s differs",
                     cJSON_GetObjectItemCaseSensitive(cx, "name")->valuestring);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static void on_outside(void *user, const char *field, const char *detail) {
    (void)user;
    cr_expect_fail("outside the coverage: %s (%s)", detail, field);
}

Test(parity_adapter, v2_runs_give_a_v2_coverage_their_runs_lie_inside, .init = setup, .fini = teardown, .timeout = 300) {
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE, "FAKE_MANIFEST=v2", "--dtype f64 --cp 1,2", "v2"), 0,
                 "exit (%s/v2.txt)", tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "v2");
    const cJSON *cov = cJSON_GetObjectItemCaseSensitive(r, "coverage");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(cov, "model");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(model, "init")->valuestring, "gauss(0, 1)", "the free model key");
    char hex[LS_DIGEST_HEX_SIZE], err[256];
    cr_assert_eq(ls_coverage_model_sha256_v2(model, hex, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(cov, "model_sha256")->valuestring, hex, "not the v2 digest");
    /* a CP-2 full f64 run's own configuration lies inside */
    char p[512];
    cJSON *m = NULL;
    snprintf(p, sizeof p, "%s/v2/runs/adapter/f64/cp2-full/run/manifest.json", tmpdir);
    cr_assert_eq(ls_json_read_file(p, &m, err, sizeof err), LS_OK, "%s", err);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "predicate"), "config");
    cr_expect(ls_coverage_config_is_v2(cfg));
    cr_expect_eq(ls_coverage_check(cov, cfg, 2, on_outside, NULL), 0);
    cJSON_Delete(m);
    cJSON_Delete(r);
}

Test(parity_adapter, a_control_that_changes_nothing_fails_the_report, .init = setup, .fini = teardown, .timeout = 300) {
    cJSON *d = fixture();
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "faults"), "controls"),
                            "undetected", "cp_params");
    char path[512];
    ls_pa_write_adapter(tmpdir, d, "undetected.json", path);
    cr_assert_eq(ls_pa_parity(tmpdir, path, NULL, "--dtype f64 --cp 1,2", "und"), 1, "exit (%s/und.txt)", tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "und");
    cr_expect(ls_pa_level_holds(r, 2), "level 2 needs no cp_params control");
    cr_expect(!ls_pa_level_holds(r, 3) && !ls_pa_level_holds(r, 4));
    cr_expect(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "pass")));
    char *t = ls_pa_text(tmpdir, "und");
    cr_expect(strstr(t, "control undetected (f64, world 2, p9-g3) was not detected") != NULL, "%s", t);
    free(t);
    cJSON_Delete(r);
}

Test(parity_adapter, hostile_trainers_are_named_and_write_no_report, .init = setup, .fini = teardown, .timeout = 300) {
    const struct {
        const char *brk, *extra, *want;
        int rc;
    } cases[] = {
        {"nofile", NULL, "/grads.safetensors: open", 2},
        {"shape", NULL, "tensor member.0 of another size", 2},
        {"badlosses", NULL, "field 'losses' is not an array of", 2},
        {"crash", NULL, "exited 3", 2},
        {"sleep", "--timeout 2", "killed: --timeout?", 2},
        {"objective", NULL, "the adapter", 2},
        {"swapped", NULL, "field 'losses[0].weights' is not", 2},
        /* runs of two builds: both runs named, and what differs */
        {"build", NULL, "one report is one build (kernel_isa: only in ", 2},
        /* a build object the report could not record as the audit reads it */
        {"artifacts", NULL, "field 'predicate.build.artifacts[0]' is not an object with a string role", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char env[64], out[32], extra[128];
        snprintf(env, sizeof env, "FAKE_BREAK=%s", cases[i].brk);
        snprintf(out, sizeof out, "hostile-%s", cases[i].brk);
        snprintf(extra, sizeof extra, "--dtype f64 --cp 1,2 %s", cases[i].extra ? cases[i].extra : "");
        cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, env, extra, out), cases[i].rc, "%s: exit (%s/%s.txt)",
                     cases[i].brk, tmpdir, out);
        char *t = ls_pa_text(tmpdir, out);
        cr_expect(strstr(t, cases[i].want) != NULL && strstr(t, "no report written") != NULL, "%s: %s", cases[i].brk, t);
        free(t);
        char p[512];
        snprintf(p, sizeof p, "%s/%s/parity.json", tmpdir, out);
        cr_expect_neq(access(p, F_OK), 0, "%s: a report was written", cases[i].brk);
    }
    /* a NaN gradient is a failing check, not a crash */
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, "FAKE_BREAK=nan", "--dtype f64 --cp 1,2", "nan"), 1,
                 "nan: exit (%s/nan.txt)", tmpdir);
    cJSON *r = ls_pa_report(tmpdir, "nan");
    cr_expect(!ls_pa_level_holds(r, 2) || !ls_pa_level_holds(r, 3) || !ls_pa_level_holds(r, 4));
    cJSON_Delete(r);
}

Test(parity_adapter, key_signs_the_report, .init = setup, .fini = teardown, .timeout = 300) {
    char cmd[1024], key[512], env[512];
    snprintf(key, sizeof key, "%s/k.pem", tmpdir);
    snprintf(cmd, sizeof cmd, LS_BINARY_DIR "/receipts/longstraw-sign keygen --private %s --public %s/k.pub >/dev/null",
             key, tmpdir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(env, sizeof env, "--dtype f64 --cp 1,2 --key %s", key);
    cr_assert_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, env, "signed"), 0, "exit (%s/signed.txt)", tmpdir);
    char p[512];
    snprintf(p, sizeof p, "%s/signed/parity.dsse.json", tmpdir);
    cr_expect_eq(access(p, F_OK), 0, "no envelope %s", p);
}

Test(parity_adapter, usage, .init = setup, .fini = teardown) {
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, "--cp 1,8", "u1"), 2);
    char *t = ls_pa_text(tmpdir, "u1");
    cr_expect(strstr(t, "--cp: 8 is not one of the CP sizes") != NULL, "%s", t);
    free(t);
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, "--family hybrid", "u2"), 2);
    t = ls_pa_text(tmpdir, "u2");
    cr_expect(strstr(t, "drop --family") != NULL, "%s", t);
    free(t);
    cr_expect_eq(ls_pa_parity(tmpdir, LS_SOURCE_DIR "/tests/data/no-such-adapter.json", NULL, NULL, "u3"), 2);
    t = ls_pa_text(tmpdir, "u3");
    cr_expect(strstr(t, "no-such-adapter.json") != NULL, "%s", t);
    free(t);
}

/* --like RUN with an adapter: the run's CP sizes and dtypes (--cp refused), a run of another profile, with
 * faults, or without a manifest refused, each named, exit 2, no report. */
Test(parity_adapter, like_refuses_what_it_cannot_cover, .init = setup, .fini = teardown) {
    char run[512], opt[1024];
    snprintf(run, sizeof run, "%s/run", tmpdir);
    snprintf(opt, sizeof opt, "--like %s --cp 1,2", run);
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, opt, "l1"), 2);
    char *t = ls_pa_text(tmpdir, "l1");
    cr_expect(strstr(t, "--like sets the CP sizes") != NULL, "%s", t);
    free(t);
    snprintf(opt, sizeof opt, "--like %s", run);
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, opt, "l2"), 2); /* no manifest */
    t = ls_pa_text(tmpdir, "l2");
    cr_expect(strstr(t, "--like") != NULL && strstr(t, "manifest.json") != NULL, "%s", t);
    free(t);
    /* a v2 run (longstraw_emit) of the torch-cp profile: not a run of the adapter's ("fake") */
    char py[512], cmd[2048];
    snprintf(py, sizeof py, "%s/mkrun.py", tmpdir);
    FILE *f = fopen(py, "w");
    cr_assert(f != NULL);
    fprintf(f, "import sys\nsys.path.insert(0, '" LS_SOURCE_DIR "/python')\nimport longstraw_emit as le\n"
               "cfg = {'objective': 'grpo', 'grad_mode': 'full', 'dtype': 'f64', 'cp_ranks': 1, 'group': 2,\n"
               "       'steps_requested': 1, 'strategy': 'longstraw', 'faults': [], 'n_layers': 1, 'model': {'d': 1},\n"
               "       'epsilon': 0.2, 'beta': 0.0, 'temperature': 1.0}\n"
               "w = le.RunWriter(sys.argv[1], 0, 1, 'run-x', 'torch-cp', '" LS_SOURCE_DIR "/profiles/torch-cp.json',\n"
               "                 groups=[le.Group('world', 'world', [0])], phases=['capture'], layer_kinds=['embed'],\n"
               "                 config=cfg, artifacts=[{'role': 'other', 'name': 'x'}], compress=False)\n"
               "for k, v in le.PATHS.items():\n    w.path(k, v[0])\n"
               "w.close()\nle.write_manifest(sys.argv[1])\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s > %s/mkrun.txt 2>&1", py, run, tmpdir);
    if (system(cmd) != 0) cr_skip_test("no python3 with zstandard to write a v2 run (%s/mkrun.txt)", tmpdir);
    cr_expect_eq(ls_pa_parity(tmpdir, FIXTURE, NULL, opt, "l3"), 2);
    t = ls_pa_text(tmpdir, "l3");
    cr_expect(strstr(t, "names the profile torch-cp") != NULL, "%s", t);
    free(t);
    snprintf(cmd, sizeof cmd, "%s/l3/parity.json", tmpdir);
    cr_expect_neq(access(cmd, F_OK), 0, "a report was written");
}
