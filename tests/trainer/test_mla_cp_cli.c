/* test_mla_cp_cli.c - longstraw-train trains the mla family under
 * `mpirun -np N` as a user runs it, and the audit reads what it did: the
 * CP-2 and CP-4 runs of both gradient modes score level 1 (every rank's
 * trace complete and matched, the composition collectives of every mla
 * response layer present: dsa_topk_gather, lse_max, lse_sum, out_sum; the
 * backward's dq_sum, dkv_sum; full mode's dkv_ring), the replicated digests
 * agree; the fault cp-local-dsa is recorded in the receipts' config and the
 * audit sees it (collectives.composition fails, naming dsa_topk_gather);
 * cp-local-attention (the hybrid family's) is refused for mla by name, and
 * cp-local-dsa for hybrid.  A CP-2 run (rollout included) gives the
 * single-rank run's loss.
 * The numerical checks (CP-N = CP-1 = naive) are test_mla_cp_train.c's. */
#include <math.h>

#define CFG LS_SOURCE_DIR "/configs/mla-tiny.json"

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("mlacpcli")

/* longstraw-train under mpirun -np np into tmpdir/run; returns the exit status. */
static int run_np(int np, const char *run, const char *args) {
    char a[3072], out[64], err[64];
    snprintf(a, sizeof a, "--config %s --out %s/%s %s", CFG, tmpdir, run, args);
    snprintf(out, sizeof out, "%s.out", run);
    snprintf(err, sizeof err, "%s.err", run);
    return run_np_to(np, out, err, 200, a);
}

/* The audit of tmpdir/run at --require-level 1: its exit status, its report in *out (freed by the caller). */
static int audit(const char *run, char **out) {
    char cmd[2048], name[300];
    snprintf(cmd, sizeof cmd, "%s %s/%s --require-level 1 >%s/%s.audit 2>&1", AUDIT, tmpdir, run, tmpdir, run);
    int rc = sh(cmd);
    snprintf(name, sizeof name, "%s.audit", run);
    *out = slurp(name);
    return rc;
}

/* The first line of an audit report saying FAIL about a rule whose name starts with prefix (NULL: none). */
static const char *failing_rule(const char *rep, const char *prefix) {
    for (const char *l = rep; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *eol = strchr(l, '\n'), *f = strstr(l, "FAIL L"), *p = strstr(l, prefix);
        if (f && p && (!eol || (f < eol && p < eol))) return l;
    }
    return NULL;
}

static const char *BASE = "--prompt-len 64 --response-len 5 --group 2 --steps 2 --page-size 8 --seed 3 --dtype f64 "
                          "--lora-init random --quiet";

Test(mla_cp_cli, cp_runs_score_level_1, .init = setup, .fini = teardown, .timeout = 600) {
    const char *modes[] = {"full", "detached"};
    for (int np = 2; np <= 4; np += 2)
        for (int m = 0; m < 2; m++) {
            char run[64], args[1024], *rep = NULL;
            snprintf(run, sizeof run, "%s%d", modes[m], np);
            snprintf(args, sizeof args, "%s --grad-mode %s", BASE, modes[m]);
            int rc = run_np(np, run, args);
            char errn[80];
            snprintf(errn, sizeof errn, "%s.err", run);
            char *e = slurp(errn);
            cr_assert_eq(rc, 0, "np %d %s: exit %d: %s", np, modes[m], rc, e);
            free(e);
            cr_expect_eq(audit(run, &rep), 0, "np %d %s: audit: %s", np, modes[m], rep);
            cr_expect(strstr(rep, "level 1 proven") != NULL, "np %d %s: %s", np, modes[m], rep);
            /* nothing the ranks did is missing or apart: no failing collectives or digests rule */
            const char *bad = failing_rule(rep, "collectives.");
            if (!bad) bad = failing_rule(rep, "digests.");
            cr_expect(bad == NULL, "np %d %s: a rule fails: %.200s", np, modes[m], bad ? bad : "");
            free(rep);
        }
}

/* The loss of line `step` (0-based) of a --metrics file. */
static double metrics_loss(const char *name, int step) {
    char *m = slurp(name);
    double v = -1;
    const char *l = m;
    for (int i = 0; l && i < step; i++) l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL;
    const char *k = l ? strstr(l, "\"loss\":") : NULL;
    if (k) v = strtod(k + 7, NULL);
    free(m);
    return v;
}

/* Rollout (sampling from the composed logits), score and the update over 2 ranks give the single-rank
 * run's step-2 loss (the same sampled responses; float64). */
Test(mla_cp_cli, cp2_run_is_the_single_rank_run, .init = setup, .fini = teardown, .timeout = 300) {
    char args[1024], cmd[4096];
    snprintf(args, sizeof args, "%s --grad-mode full --metrics %s/cp2.metrics", BASE, tmpdir);
    cr_assert_eq(run_np(2, "cp2", args), 0);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 %s --config %s --out %s/one %s --grad-mode full --metrics %s/one.metrics >%s/one.out 2>&1",
             TRAIN, CFG, tmpdir, BASE, tmpdir, tmpdir);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    double a = metrics_loss("one.metrics", 1), b = metrics_loss("cp2.metrics", 1);
    cr_expect(a > 0 && fabs(a - b) <= 1e-10 * a, "step-2 loss: one rank %.17g, CP-2 %.17g", a, b);
}

Test(mla_cp_cli, cp_local_dsa_is_recorded_and_seen, .init = setup, .fini = teardown, .timeout = 300) {
    char args[1024], *rep = NULL;
    snprintf(args, sizeof args, "%s --grad-mode detached --fault cp-local-dsa", BASE);
    cr_assert_eq(run_np(2, "ldsa", args), 0);
    char *rc0 = slurp("ldsa/rank-0000/receipt.json");
    cr_expect(strstr(rc0, "\"cp-local-dsa\"") != NULL, "the receipt's config does not record the fault");
    free(rc0);
    audit("ldsa", &rep);
    const char *c = strstr(rep, "FAIL L2 collectives.composition");
    cr_expect(c != NULL, "the audit does not fail collectives.composition: %s", rep);
    if (c) {
        const char *eol = strchr(c, '\n');
        cr_expect(strstr(c, "dsa_topk_gather") && (!eol || strstr(c, "dsa_topk_gather") < eol),
                  "collectives.composition does not name dsa_topk_gather: %s", rep);
    }
    free(rep);
}

Test(mla_cp_cli, each_family_refuses_the_others_operator_fault, .init = setup, .fini = teardown, .timeout = 120) {
    char args[1024];
    snprintf(args, sizeof args, "%s --fault cp-local-attention", BASE);
    cr_expect_eq(run_np(2, "lattn", args), 2);
    char *e = slurp("lattn.err");
    cr_expect(strstr(e, "cp-local-attention") && strstr(e, "cp-local-dsa"), "%s", e);
    free(e);
    char cmd[4096]; /* the hybrid family has no DSA: cp-local-dsa is refused for it */
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
             ":print_suppressions=0 timeout 120 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 %s --config %s --out %s/hdsa "
             "--prompt-len 64 --response-len 4 --group 2 --steps 1 --fault cp-local-dsa --quiet >%s/hdsa.out "
             "2>%s/hdsa.err",
             TRAIN, LS_SOURCE_DIR "/configs/hybrid-tiny.json", tmpdir, tmpdir, tmpdir);
    cr_expect_eq(sh(cmd), 2, "%s", cmd);
    e = slurp("hdsa.err");
    cr_expect(strstr(e, "cp-local-dsa") && strstr(e, "'mla'"), "%s", e);
    free(e);
}
