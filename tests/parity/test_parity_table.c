/* test_parity_table.c - the original work's table (docs/design.md §5, issue 11),
 * and the audit's use of a parity report.
 *
 * With the parity reports test_parity wrote for this build
 * (LS_BINARY_DIR/tests/parity-like-fixture and -mla: --like a run made as
 * these tests make theirs, ctest fixtures):
 *  - a hybrid CP-2 run with the original work's faults (the response dK/dV
 *    reduction dropped, the prompt state detached) scores L1 yes, L2 yes,
 *    L3 no, L4 no;
 *  - the same run without faults in `full` mode scores L4;
 *  - the audit refuses the report as evidence when one of its controls was
 *    not detected, when a control is missing, when it is another build's,
 *    and when it holds no check of the run's dtype. */
#define SIGN LS_BINARY_DIR "/receipts/longstraw-sign"
#define PARITY LS_BINARY_DIR "/parity/longstraw-parity"
/* test_parity's --like reports of runs made as these tests make theirs (their path: responses sampled,
   the reference kept, uneven shards cutting pages and chunks): a plain matrix report covers no such run */
#define REPORT LS_BINARY_DIR "/tests/parity-like-fixture/parity.json"
#define REPORT_MLA LS_BINARY_DIR "/tests/parity-like-fixture-mla/parity.json"
#define MLA_CFG LS_SOURCE_DIR "/configs/mla-tiny.json"

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("paritytable")

/* A CP-2 run of config cfg (f32, the trainer's default dtype) with extra args. */
static void train_cp2_cfg(const char *cfg, const char *name, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
             ":print_suppressions=0 timeout 300 " LS_MPIEXEC " " LS_MPIRUN_FLAGS
             " -np 2 " TRAIN " --config %s --out %s/%s --prompt-len 96 --steps 2 --group 2 --response-len 4 "
             "--page-size 16 --capture-chunk 32 --quiet %s >%s/%s.log 2>&1",
             cfg, tmpdir, name, args, tmpdir, name);
    cr_assert_eq(sh(cmd), 0, "the CP-2 run %s failed (%s/%s.log)", name, tmpdir, name);
}
/* A one-rank run of hybrid-tiny, or of the config cfg_path (NULL: hybrid-tiny). */
static void train1(const char *cfg_path, const char *name, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 timeout 300 " TRAIN " --config %s --out %s/%s --prompt-len 96 --steps 1 --group 2 "
             "--response-len 4 --page-size 16 --capture-chunk 32 --quiet %s >%s/%s.log 2>&1",
             cfg_path ? cfg_path : CFG, tmpdir, name, args, tmpdir, name);
    cr_assert_eq(sh(cmd), 0, "the run %s failed (%s/%s.log)", name, tmpdir, name);
}
/* A hybrid CP-2 run at the fixture report's temperature (0.9: its coverage). */
static void train_cp2(const char *name, const char *args) {
    char a[1024];
    snprintf(a, sizeof a, "--temperature 0.9 %s", args);
    train_cp2_cfg(CFG, name, a);
}

/* The audit's verdict per level (1..4) on run with the given report. */
static void audit_levels(const char *run, const char *report, bool holds[5], int *rc) {
    char cmd[2048], json[512];
    snprintf(json, sizeof json, "%s/%s-audit.json", tmpdir, run);
    snprintf(cmd, sizeof cmd, AUDIT " %s/%s --parity %s --json %s --require-level 4 > %s/%s-audit.txt 2>&1", tmpdir,
             run, report, json, tmpdir, run);
    *rc = sh(cmd);
    cJSON *doc = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(json, &doc, err, sizeof err), LS_OK, "%s", err);
    for (int l = 0; l <= 4; l++) holds[l] = false;
    const cJSON *lv;
    cJSON_ArrayForEach(lv, cJSON_GetObjectItemCaseSensitive(doc, "levels")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(lv, "level");
        if (cJSON_IsNumber(n) && n->valueint >= 1 && n->valueint <= 4)
            holds[n->valueint] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(lv, "holds"));
    }
    cJSON_Delete(doc);
}

static bool rule_fails(const char *run, const char *rule, const char *says) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s-audit.txt", tmpdir, run);
    FILE *f = fopen(p, "r");
    if (!f) return false;
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *at = strstr(buf, rule);
    return at != NULL && strstr(at, says) != NULL;
}

/* A copy of the report src with one change made by python3 (the
 * expression runs with `d` the parsed report). */
static void derive_from(const char *src, const char *name, const char *expr) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 -c \"import json; d=json.load(open('%s')); %s; json.dump(d, open('%s/%s','w'))\"",
             src, expr, tmpdir, name);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
}
static void derive(const char *name, const char *expr) { derive_from(REPORT, name, expr); }

Test(parity_table, the_original_work_and_the_fixed_run, .init = setup, .fini = teardown, .timeout = 900) {
    train_cp2("original", "--fault skip-dkv-reduce --grad-mode detached");
    train_cp2("fixed", "--grad-mode full");
    bool h[5];
    int rc;
    audit_levels("original", REPORT, h, &rc);
    cr_expect(h[1] && h[2] && !h[3] && !h[4], "the original work's faults: L1 %d L2 %d L3 %d L4 %d, want 1 1 0 0",
              h[1], h[2], h[3], h[4]);
    cr_expect_eq(rc, 1, "--require-level 4 on the original: exit %d", rc);
    audit_levels("fixed", REPORT, h, &rc);
    cr_expect(h[1] && h[2] && h[3] && h[4], "full mode without faults: L1 %d L2 %d L3 %d L4 %d, want level 4", h[1],
              h[2], h[3], h[4]);
    cr_expect_eq(rc, 0, "--require-level 4 on the fixed run: exit %d (%s/fixed-audit.txt)", rc, tmpdir);
    cr_expect(rule_fails("fixed", "parity.decisions", "not applicable: the hybrid family makes no discrete decision"),
              "parity.decisions does not read as not applicable for hybrid (%s/fixed-audit.txt)", tmpdir);
}

/* The mla family (its report: test_parity's mla fixture): the original work's GLM faults (each rank's
 * own DSA top-k, no gradient finalization, detached) score L1 only; full mode without faults, L4. */
Test(parity_table, mla_original_work_and_fixed_run, .init = setup, .fini = teardown, .timeout = 600) {
    train_cp2_cfg(MLA_CFG, "mla-original", "--fault cp-local-dsa --fault skip-grad-finalize --grad-mode detached");
    train_cp2_cfg(MLA_CFG, "mla-fixed", "--grad-mode full --temperature 0.9");
    bool h[5];
    int rc;
    audit_levels("mla-original", REPORT_MLA, h, &rc);
    cr_expect(h[1] && !h[2] && !h[3] && !h[4], "mla, the original work's faults: L1 %d L2 %d L3 %d L4 %d, want 1 0 0 0",
              h[1], h[2], h[3], h[4]);
    cr_expect_eq(rc, 1, "--require-level 4 on the mla original: exit %d", rc);
    cr_expect(rule_fails("mla-original", "collectives.composition", "dsa_topk_gather"),
              "the composition rule does not name the missing dsa_topk_gather");
    cr_expect(rule_fails("mla-original", "digests.replicated", "differs"), "the replicated digests agree");
    audit_levels("mla-fixed", REPORT_MLA, h, &rc);
    cr_expect(h[1] && h[2] && h[3] && h[4], "mla full mode without faults: L1 %d L2 %d L3 %d L4 %d, want level 4",
              h[1], h[2], h[3], h[4]);
    cr_expect_eq(rc, 0, "--require-level 4 on the mla fixed run: exit %d (%s/mla-fixed-audit.txt)", rc, tmpdir);

    /* the same report with a decision near a tie (its check failed), or with no decisions check at all: the
     * comparisons prove nothing about the code and level 2 does not hold */
    char rep[512];
    derive_from(REPORT_MLA, "mla-tie.json",
                "c=[c for c in d['checks'] if c['kind']=='decisions'][0]; c['pass']=False; "
                "c['decisions'][0]['pass']=False; c['max_rel_err']=3.0");
    snprintf(rep, sizeof rep, "%s/mla-tie.json", tmpdir);
    audit_levels("mla-fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2] && !h[4], "a near-tie in the report: L1 %d L2 %d L4 %d, want 1 0 0", h[1], h[2], h[4]);
    cr_expect_eq(rc, 1);
    cr_expect(rule_fails("mla-fixed", "parity.decisions", "check decisions m30-g2-lora"),
              "parity.decisions does not name the failing check (%s/mla-fixed-audit.txt)", tmpdir);
    derive_from(REPORT_MLA, "mla-nodecisions.json", "d['checks']=[c for c in d['checks'] if c['kind']!='decisions']");
    snprintf(rep, sizeof rep, "%s/mla-nodecisions.json", tmpdir);
    audit_levels("mla-fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2], "no decisions check: L1 %d L2 %d, want 1 0", h[1], h[2]);
    cr_expect(rule_fails("mla-fixed", "parity.decisions", "no passing decisions check"),
              "parity.decisions does not say the check is missing (%s/mla-fixed-audit.txt)", tmpdir);
}


Test(parity_table, reports_that_are_not_evidence, .init = setup, .fini = teardown, .timeout = 600) {
    train_cp2("fixed", "--grad-mode full");
    char rep[512];
    bool h[5];
    int rc;
    /* a control that passed its comparison: the report cannot tell a faulty run from a correct one */
    derive("undetected.json", "[c.update(detected=False) for c in d['controls'] if c['fault']=='skip-dkv-reduce']");
    snprintf(rep, sizeof rep, "%s/undetected.json", tmpdir);
    audit_levels("fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2] && !h[3] && !h[4], "undetected control: L1 %d L2 %d L3 %d L4 %d", h[1], h[2], h[3], h[4]);
    cr_expect(rule_fails("fixed", "parity.controls", "skip-dkv-reduce"), "parity.controls does not name the control");
    /* a control missing */
    derive("nocontrol.json", "d['controls']=[c for c in d['controls'] if c['fault']!='detached']");
    snprintf(rep, sizeof rep, "%s/nocontrol.json", tmpdir);
    audit_levels("fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2], "missing control: L2 %d", h[2]);
    cr_expect(rule_fails("fixed", "parity.controls", "no detached control"), "the missing control is not named");
    /* another build */
    derive("otherbuild.json", "d['build_digest']='0'*64");
    snprintf(rep, sizeof rep, "%s/otherbuild.json", tmpdir);
    audit_levels("fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2], "another build's report: L2 %d", h[2]);
    cr_expect(rule_fails("fixed", "parity.build", "from build 0000"), "parity.build does not say so");
    /* the report records its build object: one whose build_digest is not the report's is not trusted */
    cr_expect(rule_fails("fixed", "parity.build", "the report's build object does not match its build_digest"),
              "parity.build trusts a build object that is not the report's (%s/fixed-audit.txt)", tmpdir);
    /* a report of a build with other flags (its object and digests made consistent, as longstraw-train
     * digests it: receipts/format/build_info.h): parity.build names the key, the report's value first */
    derive("otherflags.json",
           "import hashlib; b=d['build']; b['flags']='-O0'; c=json.loads(json.dumps(b)); c.pop('build_digest'); "
           "c['executable'].pop('path'); [l.pop('path') for l in c['libraries']]; "
           "h=hashlib.sha256(json.dumps(c,sort_keys=True,separators=(',',':'),ensure_ascii=False).encode()).hexdigest(); "
           "b['build_digest']=h; d['build_digest']=h; d['coverage']['build_digest']=h");
    snprintf(rep, sizeof rep, "%s/otherflags.json", tmpdir);
    audit_levels("fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2], "another build's report: L2 %d", h[2]);
    cr_expect(rule_fails("fixed", "parity.build", "(1 difference from the run's): flags: -O0 vs "),
              "parity.build does not name the flags (%s/fixed-audit.txt)", tmpdir);
    /* no check of the run's dtype (the run is f32) */
    derive("f64only.json", "d['checks']=[c for c in d['checks'] if c['dtype']=='f64']");
    snprintf(rep, sizeof rep, "%s/f64only.json", tmpdir);
    audit_levels("fixed", rep, h, &rc);
    cr_expect(h[1] && !h[2], "a float64-only report for a float32 run: L2 %d", h[2]);
    cr_expect(rule_fails("fixed", "parity.logprob", "in f32"), "parity.logprob does not name the dtype");
    /* one failing gradient check of the run's world and dtype */
    derive("badgrad.json", "[c.update(**{'pass':False}) for c in d['checks'] if c['kind']=='grad' and c['world']==2 and c['dtype']=='f32']");
    snprintf(rep, sizeof rep, "%s/badgrad.json", tmpdir);
    audit_levels("fixed", rep, h, &rc);
    cr_expect(h[3] && !h[4], "a failing grad check: L3 %d L4 %d", h[3], h[4]);
    cr_expect(rule_fails("fixed", "parity.grad", "fails"), "parity.grad does not name the check");
}

/* A real report (test_parity's fixture: hybrid-tiny, LoRA, GRPO at temperature 0.9, CP 1 and 2) beside runs
 * outside what it proved: the audit names the field outside and proves level 1 only; the run inside it
 * (temperature 0.9, LoRA, one rank) proves level 4. */
Test(parity_table, runs_outside_the_reports_coverage, .init = setup, .fini = teardown, .timeout = 900) {
    static const struct {
        const char *name, *cfg, *args, *field;
    } cases[] = {
        {"inside", NULL, "--grad-mode full --temperature 0.9", NULL},
        {"small", LS_SOURCE_DIR "/configs/hybrid-small.json", "--grad-mode full --temperature 0.9", "(d_model)"},
        {"fullset", NULL, "--grad-mode full --temperature 0.9 --train-mode full", "(train_mode)"},
        {"sft", NULL, "--grad-mode full --temperature 0.9 --objective sft", "(objective)"},
        {"temp1", NULL, "--grad-mode full", "\"temperature\":1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train1(cases[i].cfg, cases[i].name, cases[i].args);
        bool h[5];
        int rc;
        audit_levels(cases[i].name, REPORT, h, &rc);
        if (cases[i].field == NULL) {
            cr_expect(h[4] && rc == 0, "%s: inside the coverage, L4 %d (exit %d; %s/%s-audit.txt)", cases[i].name, h[4],
                      rc, tmpdir, cases[i].name);
            continue;
        }
        cr_expect(h[1] && !h[2] && rc == 1, "%s: outside the coverage: L1 %d L2 %d, exit %d", cases[i].name, h[1],
                  h[2], rc);
        cr_expect(rule_fails(cases[i].name, "parity.coverage", cases[i].field),
                  "%s: parity.coverage does not name %s (%s/%s-audit.txt)", cases[i].name, cases[i].field, tmpdir,
                  cases[i].name);
    }
}

/* The honest path for a model the fixture report does not cover (no grouped-query attention, 4 layers,
 * conv kernel 3): the CI recipe train, longstraw-parity --like the run, audit.  Against the fixture
 * report the run is outside (attn_kv_heads named); against its own --like report, signed with a key
 * made here and trusted under --require-signed, it proves level 4, run-and-parity-signed. */
Test(parity_table, another_model_certified_after_parity_like, .init = setup, .fini = teardown, .timeout = 1200) {
    train1(LS_SOURCE_DIR "/tests/fixtures/configs/hybrid-mha4.json", "mha", "--grad-mode full");
    bool h[5];
    int rc;
    audit_levels("mha", REPORT, h, &rc);
    cr_expect(h[1] && !h[2] && rc == 1, "outside the fixture's coverage: L1 %d L2 %d exit %d", h[1], h[2], rc);
    cr_expect(rule_fails("mha", "parity.coverage", "(attn_kv_heads)"), "parity.coverage does not name attn_kv_heads");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             SIGN " keygen --private %s/ci.pem --public %s/ci.pub >/dev/null && " SIGN " sign %s/mha --key %s/ci.pem "
             ">/dev/null && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " PARITY
             " --like %s/mha --out %s/like --key %s/ci.pem --jobs 2 --quiet >%s/like.log 2>&1",
             tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir);
    int prc = sh(cmd);
    if (prc != 0) { /* what parity said, into the test's output */
        snprintf(cmd, sizeof cmd, "tail -n 20 %s/like.log >&2; for f in %s/like/runs/*/*/*/log; do echo \"== $f\" >&2; "
                 "tail -n 5 \"$f\" >&2; done", tmpdir, tmpdir);
        sh(cmd);
    }
    cr_assert_eq(prc, 0, "parity --like failed (%s/like.log, above)", tmpdir);
    { /* --like differences per layer group, and says so */
        cJSON *like = NULL;
        char lp[600], lerr[512];
        snprintf(lp, sizeof lp, "%s/like/parity.json", tmpdir);
        cr_assert_eq(ls_json_read_file(lp, &like, lerr, sizeof lerr), LS_OK, "%s", lerr);
        const cJSON *fg = cJSON_GetObjectItemCaseSensitive(like, "fd_groups");
        cr_expect(cJSON_IsString(fg) && !strcmp(fg->valuestring, "layer"), "--like: fd_groups is not layer");
        cJSON_Delete(like);
    }
    snprintf(cmd, sizeof cmd,
             AUDIT " %s/mha --parity %s/like/parity.json --key %s/ci.pub --parity-key %s/ci.pub --require-signed "
             "--require-level 4 --json %s/mha-like.json >%s/mha-like.txt 2>&1",
             tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir);
    cr_expect_eq(sh(cmd), 0, "after parity --like: not level 4, signed (%s/mha-like.txt)", tmpdir);
    cJSON *doc = NULL;
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/mha-like.json", tmpdir);
    cr_assert_eq(ls_json_read_file(path, &doc, err, sizeof err), LS_OK, "%s", err);
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(doc, "assurance");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(as, "level")->valuestring, "run-and-parity-signed");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(doc, "level")->valueint, 4);
    cJSON_Delete(doc);
}
