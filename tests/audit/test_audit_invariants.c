/* test_audit_invariants.c - rule run.invariants (audit/rules/rules_invariants.c)
 * on runs the trainer makes, and what each level of a verdict rests on
 * (audit/report/basis.c).
 *
 * Fault-free runs of both families, one rank and CP-2 (under mpirun when MPI
 * is found), pass the rule with the ratio exactly 1 on every on-policy step
 * of every rank (the trainer's own check: its old log-probs and the replay's
 * are the same values); each check of the rule has a fault injected into a
 * copy of a real run (one figure of one step_metrics event changed, every
 * digest recomputed: tests/audit/audit_invariants_edit.py) and the rule refuses
 * level 2 naming the rank, the trace, the event's seq and the step.  An
 * older run without the figures, or without the configuration's record of
 * where its old log-probs came from, says what it could not check.
 *
 * Each level that holds names what it rests on (parity, the run, both, or
 * the run's records) and what it does not bind, in the JSON, text and JUnit
 * reports.
 *
 * Fixtures are made once per test binary run in /tmp/ls-audit-inv-PID (PID:
 * the Criterion runner's) and removed by a POST_ALL hook. */
#define EDIT "python3 " LS_SOURCE_DIR "/tests/audit/audit_invariants_edit.py"
#define REPORT "python3 " LS_SOURCE_DIR "/tests/evidence/make_report.py"
#define HYB "--config " LS_SOURCE_DIR "/configs/hybrid-tiny.json --prompt-len 64 --quiet"
#define MLA "--config " LS_SOURCE_DIR "/configs/mla-tiny.json --prompt-len 64 --quiet"

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("audit-inv")

LS_TEST_FIXTURE_ROOT("/tmp/ls-audit-inv-%d")

/* The fixture `name`: a run made by `train` (a command line ending in --out)
 * and beside it NAME.parity.json, a hand-written parity report covering it
 * (tests/evidence/make_report.py, with the run's recorded paths and both
 * strategies), made the
 * first time it is asked for; the run's path into out. */
static void fixture(const char *name, const char *train, char *out, size_t cap) {
    int lfd = fixture_claim(name, out, cap);
    if (lfd < 0) return;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s.tmp' && OMP_NUM_THREADS=1 %s '%s.tmp' >'%s.log' 2>&1 && "
             "P=$(python3 -c \"import json,sys; c=json.load(open(sys.argv[1]))['predicate']['config']; "
             "print(json.dumps(c.get('paths', {}), separators=(',', ':')))\" '%s.tmp/manifest.json') && "
             "%s '%s.tmp' '%s.parity.json' \"paths=$P\" 'strategies=[\"longstraw\",\"naive\"]' && mv '%s.tmp' '%s'",
             out, train, out, out, out, REPORT, out, out, out, out);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    close(lfd);
}

static void hybrid_run(char *out, size_t cap) { fixture("hybrid", TRAIN " " HYB " --steps 2 --out", out, cap); }

/* A copy of src in the scratch directory, with EDITs of audit_invariants_edit.py
 * applied (NULL: none); the seq of the first edited event into *seq (may be NULL). */
static void copy_edit(const char *src, const char *name, const char *edits, char *out, size_t cap, long *seq) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", out, src, out);
    cr_assert_eq(sh(cmd), 0);
    if (edits == NULL) return;
    snprintf(cmd, sizeof cmd, "%s '%s' %s >'%s/edit.out'", EDIT, out, edits, tmpdir);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    if (seq != NULL) {
        char p[600];
        snprintf(p, sizeof p, "%s/edit.out", tmpdir);
        FILE *f = fopen(p, "r");
        cr_assert_not_null(f);
        cr_assert_eq(fscanf(f, "%ld", seq), 1, "no seq from %s", cmd);
        fclose(f);
    }
}

/* The audit's exit status with --json (schema-checked report in *doc); the
 * parity report beside the fixture src (NULL: none). */
static int audit(const char *run, const char *src, const char *extra, cJSON **doc) {
    char cmd[4096], json[512], par[700] = "";
    snprintf(json, sizeof json, "%s/report.json", tmpdir);
    unlink(json);
    if (src) snprintf(par, sizeof par, "--parity '%s.parity.json'", src);
    snprintf(cmd, sizeof cmd, "%s '%s' %s --json '%s' %s >'%s/audit.out' 2>'%s/audit.err'", AUDIT, run, par, json,
             extra ? extra : "", tmpdir, tmpdir);
    int rc = sh(cmd);
    *doc = read_valid_json(json, "audit-report");
    return rc;
}

static const char *verdict(const cJSON *doc, const char *id) {
    return cJSON_GetObjectItem(report_rule(doc, id), "verdict")->valuestring;
}
static const char *message(const cJSON *doc, const char *id) {
    return cJSON_GetObjectItem(report_rule(doc, id), "message")->valuestring;
}
static int level(const cJSON *doc) { return cJSON_GetObjectItem(doc, "level")->valueint; }

/* Every applicable rule but `except` (NULL: none) and config.full_mode passes. */
static void only_failure(const cJSON *doc, const char *except) {
    const cJSON *lv, *c;
    cJSON_ArrayForEach(lv, cJSON_GetObjectItem(doc, "levels")) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(lv, "checks")) {
            const char *id = cJSON_GetObjectItem(c, "id")->valuestring;
            if ((except && strcmp(id, except) == 0) || strcmp(id, "config.full_mode") == 0) continue;
            cr_expect_str_neq(cJSON_GetObjectItem(c, "verdict")->valuestring, "fail", "rule %s fails: %s", id,
                              cJSON_GetObjectItem(c, "message")->valuestring);
        }
    }
}

/* run.invariants fails with evidence of rank, file ending `file`, seq and text. */
static void expect_evidence(const cJSON *doc, int rank, const char *file, long seq, const char *text) {
    const cJSON *r = report_rule(doc, "run.invariants"), *e;
    cr_assert_str_eq(cJSON_GetObjectItem(r, "verdict")->valuestring, "fail", "run.invariants: %s",
                     cJSON_GetObjectItem(r, "message")->valuestring);
    char seen[4096] = "";
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "evidence")) {
        const cJSON *er = cJSON_GetObjectItem(e, "rank"), *es = cJSON_GetObjectItem(e, "seq");
        const char *ef = cJSON_GetObjectItem(e, "file")->valuestring, *d = cJSON_GetObjectItem(e, "detail")->valuestring;
        size_t l = strlen(seen);
        snprintf(seen + l, sizeof seen - l, "[%d %s %ld %s] ", er ? er->valueint : -1, ef,
                 es ? (long)es->valuedouble : -1L, d);
        if (!er || er->valueint != rank || !es || (long)es->valuedouble != seq) continue;
        if (strlen(ef) < strlen(file) || strcmp(ef + strlen(ef) - strlen(file), file) != 0) continue;
        if (!strstr(d, text)) continue;
        return;
    }
    cr_assert_fail("run.invariants: no evidence of rank %d, %s, seq %ld with '%s'; evidence: %s", rank, file, seq, text,
                   seen);
}

/* ---- fault-free runs: the trainer's on-policy ratio is exactly 1 ---------- */

/* The rule passes on a fault-free run, its message counting `on_policy`
 * steps with the ratio exactly 1 (every step of every rank); with the
 * fixture's parity report the run proves `want_level`. */
static void expect_clean(const char *run, long on_policy, int want_level) {
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, run, NULL, &doc), 0);
    cr_expect_eq(level(doc), want_level, "level %d, want %d", level(doc), want_level);
    cr_expect_str_eq(verdict(doc, "run.invariants"), "pass", "%s: run.invariants: %s", run, message(doc, "run.invariants"));
    char want[96];
    snprintf(want, sizeof want, "; ratio exactly 1 on %ld on-policy step(s)", on_policy);
    cr_expect(strstr(message(doc, "run.invariants"), want) != NULL, "%s: message '%s', want '%s'", run,
              message(doc, "run.invariants"), want);
    only_failure(doc, NULL);
    cJSON_Delete(doc);
}

Test(invariants, hybrid_one_rank_passes, .init = setup, .fini = teardown, .timeout = 240) {
    char run[512];
    hybrid_run(run, sizeof run);
    expect_clean(run, 2, 3); /* detached: level 4 needs full mode */
    /* two groups a step, the reference recaptured, full mode (the trainer's other scoring paths) */
    fixture("hybrid-b2", TRAIN " " HYB " --steps 2 --group 3 --prompts-per-step 2 --keep-reference off "
            "--grad-mode full --out", run, sizeof run);
    expect_clean(run, 2, 4);
}

Test(invariants, mla_one_rank_passes, .init = setup, .fini = teardown, .timeout = 240) {
    char run[512];
    fixture("mla", TRAIN " " MLA " --steps 2 --grad-mode full --out", run, sizeof run);
    expect_clean(run, 2, 4);
}

#if defined(LS_MPIEXEC)
#define MPI2 "OMP_NUM_THREADS=1 timeout 240 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 " TRAIN " "
Test(invariants, cp2_runs_pass_on_every_rank, .init = setup, .fini = teardown, .timeout = 300) {
    char run[512];
    fixture("hybrid-cp2", MPI2 HYB " --steps 2 --grad-mode full --out", run, sizeof run);
    expect_clean(run, 4, 4); /* two steps on each of two ranks */
    fixture("mla-cp2", MPI2 MLA " --steps 2 --grad-mode full --out", run, sizeof run);
    expect_clean(run, 4, 4);
    /* a figure changed on rank 1 only: the evidence names rank 1 */
    char bad[600];
    long seq = -1;
    copy_edit(run, "cp2-ratio", "metrics 1 0 ratio_min=0.999", bad, sizeof bad, &seq);
    cJSON *doc = NULL;
    cr_expect_eq(audit(bad, run, "--require-level 2", &doc), 1);
    cr_expect_eq(level(doc), 1);
    expect_evidence(doc, 1, "rank-0001/events.jsonl.zst", seq, "step 0: on-policy step");
    only_failure(doc, "run.invariants");
    cJSON_Delete(doc);
}
#endif

/* The naive strategy scores its old log-probs from a captured prompt state
 * and replays the full sequence: another composition of the same math, so
 * its ratio is 1 only to rounding and the rule does not check it (it says
 * so).  If this run's ratio ever comes out exactly 1, the naive strategy
 * scores on its replay's path: let run.invariants check it. */
Test(invariants, naive_ratio_is_not_exact_and_not_checked, .init = setup, .fini = teardown, .timeout = 240) {
    char run[512], p[700], cmd[1400];
    fixture("naive", TRAIN " " HYB " --steps 1 --strategy naive --out", run, sizeof run);
    cJSON *doc = NULL;
    audit(run, NULL, NULL, &doc);
    cr_expect_str_eq(verdict(doc, "run.invariants"), "pass", "%s", message(doc, "run.invariants"));
    cr_expect(strstr(message(doc, "run.invariants"), "ratio 1 not checked on 1 naive step(s)") != NULL, "%s",
              message(doc, "run.invariants"));
    cJSON_Delete(doc);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run);
    snprintf(cmd, sizeof cmd, "zstd -q -dc '%s' | grep '\"ev\":\"step_metrics\"' | grep -q '\"ratio_max\":1,'", p);
    cr_expect_neq(sh(cmd), 0, "the naive strategy's ratio is exactly 1 now: run.invariants can check it");
}

/* ---- each check, a fault injected into a real run ------------------------ */

typedef struct {
    const char *edit; /* metrics 0 1 KEY=VALUE... */
    const char *text; /* in the evidence */
} fault_case;

Test(invariants, each_check_refuses_level_2, .init = setup, .fini = teardown, .timeout = 300) {
    char src[512], run[600];
    hybrid_run(src, sizeof src);
    static const fault_case cases[] = {
        {"ratio_max=1.01", "step 1: on-policy step (old log-probs computed by the trainer, strategy longstraw): "
                           "ratio_min 1, ratio_mean 1, ratio_max 1.01; want exactly 1 (0 ulp)"},
        {"ratio_min=1.5", "ratio_min 1.5 <= ratio_mean 1 <= ratio_max 1 does not hold"},
        {"kl_mean=-1e-6", "step 1: kl_mean -9.9999999999999995e-07 < 0"},
        {"reward_mean=+10", "step 1: reward_mean"},
        {"reward_min=+10", "step 1: reward_min"},
        {"reward_std=+0.6", "above (reward_max - reward_min) / 2"},
        {"reward_max=+1 reward_std=0", "below (reward_max - reward_min) / sqrt(2 N)"},
        {"adv_mean=0.25", "step 1: adv_mean 0.25"},
        {"adv_std=+0.01", "step 1: adv_std"},
        {"loss_policy=+1e-3", "step 1: loss_policy"},
        {"loss_kl=*2", "want beta x kl_mean"},
        {"loss=+1e-4", "want loss_policy + loss_kl"},
        {"clip_fraction=0.125", "no token can be clipped"},
        {"clip_fraction=0.1", "is no count of the step's 32 tokens"},
        {"tokens=31", "step 1: tokens 31"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[32], edit[256];
        snprintf(name, sizeof name, "f%zu", k);
        snprintf(edit, sizeof edit, "metrics 0 1 %s", cases[k].edit);
        long seq = -1;
        copy_edit(src, name, edit, run, sizeof run, &seq);
        cJSON *doc = NULL;
        cr_expect_eq(audit(run, src, "--require-level 2", &doc), 1, "%s: level 2 not refused", cases[k].edit);
        cr_expect_eq(level(doc), 1, "%s: level %d", cases[k].edit, level(doc));
        expect_evidence(doc, 0, "rank-0000/events.jsonl.zst", seq, cases[k].text);
        only_failure(doc, "run.invariants");
        cJSON_Delete(doc);
    }
}

/* beta 0: no reference policy, so no KL at all */
Test(invariants, beta_zero_means_no_kl, .init = setup, .fini = teardown, .timeout = 240) {
    char src[512], run[600];
    fixture("beta0", TRAIN " " HYB " --steps 2 --beta 0 --out", src, sizeof src);
    expect_clean(src, 2, 3);
    long seq = -1;
    copy_edit(src, "kl", "metrics 0 1 kl_mean=1e-9", run, sizeof run, &seq);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, src, NULL, &doc), 0);
    expect_evidence(doc, 0, "rank-0000/events.jsonl.zst", seq, "kl_mean 1.0000000000000001e-09 with beta 0");
    cJSON_Delete(doc);
    copy_edit(src, "lkl", "metrics 0 1 loss_kl=1e-9 loss=+1e-9", run, sizeof run, &seq);
    cr_expect_eq(audit(run, src, NULL, &doc), 0);
    expect_evidence(doc, 0, "rank-0000/events.jsonl.zst", seq, "loss_kl 1.0000000000000001e-09 with beta 0");
    cJSON_Delete(doc);
}

/* ---- older runs: what could not be checked is said, never passed ---------- */

/* Some evidence of rule id names text. */
static bool evidence_names(const cJSON *doc, const char *id, const char *text) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(report_rule(doc, id), "evidence")) {
        if (strstr(cJSON_GetObjectItem(e, "detail")->valuestring, text)) return true;
    }
    return false;
}

Test(invariants, a_run_without_figures_or_their_source, .init = setup, .fini = teardown, .timeout = 240) {
    char src[512], run[600];
    hybrid_run(src, sizeof src);
    /* no step_metrics at all (every digest recomputed): deny by default, the rule fails naming each step
       without figures, and level 2 does not hold (it used to read not applicable and rest on parity alone) */
    copy_edit(src, "none", "drop-metrics", run, sizeof run, NULL);
    cJSON *doc = NULL;
    cr_expect_eq(audit(run, src, "--require-level 2", &doc), 1);
    cr_expect_str_eq(verdict(doc, "run.invariants"), "fail");
    cr_expect(evidence_names(doc, "run.invariants", "step 0: no step_metrics event on rank 0"));
    cr_expect(evidence_names(doc, "run.invariants", "step 1: no step_metrics event on rank 0"));
    cr_expect(strstr(message(doc, "run.invariants"), "the traces hold no step_metrics event") != NULL, "%s",
              message(doc, "run.invariants"));
    cr_expect_eq(level(doc), 1);
    only_failure(doc, "run.invariants");
    cJSON_Delete(doc);
    /* one step's event without a figure (kl_mean null): the reader refuses the event (trace.valid), and the
       step's figures are missing, never passed unseen */
    copy_edit(src, "lacks", "metrics 0 1 kl_mean=null", run, sizeof run, NULL);
    cr_expect_eq(audit(run, src, "--require-level 2", &doc), 1);
    cr_expect_str_eq(verdict(doc, "trace.valid"), "fail");
    cr_expect(evidence_names(doc, "run.invariants", "step 1: no step_metrics event on rank 0"));
    cr_expect(!evidence_names(doc, "run.invariants", "step 0:"), "step 0's figures are there and pass");
    cJSON_Delete(doc);
    /* a configuration that records neither paths nor options.input: the ratio is not checked, the
       message says why, and a ratio off 1 passes unseen (the rest is still checked) */
    copy_edit(src, "old", "config paths=- config options.input=- metrics 0 1 ratio_max=1.01", run, sizeof run, NULL);
    cr_expect_eq(audit(run, NULL, NULL, &doc), 0);
    cr_expect_str_eq(verdict(doc, "run.invariants"), "pass", "%s", message(doc, "run.invariants"));
    cr_expect(strstr(message(doc, "run.invariants"), "ratio 1 not checked on 2 step(s): no paths.old_logprobs") != NULL,
              "%s", message(doc, "run.invariants"));
    cJSON_Delete(doc);
    /* old log-probs given by the input: which step had them is not recorded */
    copy_edit(src, "given", "config 'paths.old_logprobs=[\"computed\",\"given\"]'", run, sizeof run, NULL);
    cr_expect_eq(audit(run, NULL, NULL, &doc), 0);
    cr_expect(strstr(message(doc, "run.invariants"), "the input gave old log-probs") != NULL, "%s",
              message(doc, "run.invariants"));
    cJSON_Delete(doc);
}

/* ---- what each level rests on (audit/report/basis.c) ------------------------------ */

static const cJSON *basis(const cJSON *doc, int l) {
    const cJSON *lv = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "levels"), l - 1);
    cr_assert_not_null(lv);
    return cJSON_GetObjectItem(lv, "basis");
}

static const char *summary(const cJSON *doc, int l) {
    const cJSON *b = basis(doc, l);
    cr_assert_not_null(b, "level %d holds but states no basis", l);
    return cJSON_GetObjectItem(b, "summary")->valuestring;
}

/* Some not_bound sentence of level l contains text. */
static bool names_unbound(const cJSON *doc, int l, const char *text) {
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(basis(doc, l), "not_bound")) {
        if (strstr(s->valuestring, text)) return true;
    }
    return false;
}

Test(invariants, each_level_names_what_it_rests_on, .init = setup, .fini = teardown, .timeout = 300) {
    char src[512], run[600], cmd[1200];
    hybrid_run(src, sizeof src);
    cJSON *doc = NULL;
    /* with parity: level 1 the run's records, level 2 both (parity and run.invariants), level 3 parity */
    cr_assert_eq(audit(src, src, NULL, &doc), 0);
    cr_expect_str_eq(summary(doc, 1), "records");
    cr_expect_str_eq(summary(doc, 2), "both");
    const cJSON *b2 = basis(doc, 2), *ro = cJSON_GetObjectItem(b2, "rests_on");
    cr_expect(cJSON_GetArraySize(ro) == 2 && strcmp(cJSON_GetArrayItem(ro, 0)->valuestring, "parity") == 0 &&
              strcmp(cJSON_GetArrayItem(ro, 1)->valuestring, "run") == 0);
    const cJSON *cf = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(b2, "parity"), "configurations"), 0);
    cr_expect(cf && strcmp(cJSON_GetObjectItem(cf, "name")->valuestring, "fixture") == 0, "the report's configuration");
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetObjectItem(b2, "parity"), "paths")), "the report's paths");
    cr_expect(names_unbound(doc, 2, "shapes: parity at reduced size (P 30, G 2, R 3,5) against the run's P 64, G 4, R 8"));
    cr_expect(names_unbound(doc, 2, "the run's own log-probs against a reference: not re-computed"));
    cr_expect_str_eq(summary(doc, 3), "parity");
    cr_expect(names_unbound(doc, 3, "CP: the run ran on one rank"));
    cr_expect_null(basis(doc, 4), "level 4 does not hold: no basis");
    cJSON_Delete(doc);
    /* the text and JUnit reports say the same */
    snprintf(cmd, sizeof cmd, "grep -q 'rests on: both: parity (' '%s/audit.out' && grep -q 'not bound: shapes: parity' "
             "'%s/audit.out'", tmpdir, tmpdir);
    cr_expect_eq(sh(cmd), 0, "the text report names the basis");
    snprintf(cmd, sizeof cmd, "%s '%s' --parity '%s.parity.json' --quiet --junit '%s/j.xml' && "
             "grep -q '<property name=\"rests_on\" value=\"both\"/>' '%s/j.xml'", AUDIT, src, src, tmpdir, tmpdir);
    cr_expect_eq(sh(cmd), 0, "the JUnit report names the basis");
    /* without parity: level 1 only, resting on the records */
    cr_assert_eq(audit(src, NULL, NULL, &doc), 0);
    cr_expect_eq(level(doc), 1);
    cr_expect_str_eq(summary(doc, 1), "records");
    cr_expect_null(basis(doc, 2));
    cJSON_Delete(doc);
    /* a v1 run without its figures no longer rests level 2 on parity alone: run.invariants fails (deny by
       default), level 2 does not hold and states no basis */
    copy_edit(src, "none", "drop-metrics", run, sizeof run, NULL);
    cr_assert_eq(audit(run, src, NULL, &doc), 0);
    cr_expect_str_eq(verdict(doc, "run.invariants"), "fail");
    cr_expect_eq(level(doc), 1);
    cr_expect_null(basis(doc, 2));
    cJSON_Delete(doc);
    /* what run.invariants left unchecked is named too (a naive run: its own parity report) */
    fixture("naive", TRAIN " " HYB " --steps 1 --strategy naive --out", src, sizeof src);
    cr_assert_eq(audit(src, src, NULL, &doc), 0);
    cr_expect_geq(level(doc), 2);
    cr_expect(names_unbound(doc, 2, "run.invariants: ratio 1 not checked on 1 naive step(s)"));
    cJSON_Delete(doc);
}

#if defined(LS_MPIEXEC)
/* level 4 from parity alone: the run's own gradient is named not probed */
Test(invariants, level_4_from_parity_names_the_unprobed_gradient, .init = setup, .fini = teardown, .timeout = 300) {
    char run[512];
    fixture("hybrid-cp2", MPI2 HYB " --steps 2 --grad-mode full --out", run, sizeof run);
    cJSON *doc = NULL;
    cr_assert_eq(audit(run, run, "--require-level 4", &doc), 0);
    cr_expect_str_eq(summary(doc, 4), "parity");
    cr_expect(names_unbound(doc, 4, "the run's own gradient: not probed"));
    cr_expect(names_unbound(doc, 3, "the run's own CP-2 gradients against one rank: not re-computed"));
    cr_expect_str_eq(summary(doc, 2), "both");
    cJSON_Delete(doc);
}
#endif
