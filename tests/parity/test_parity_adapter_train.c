/* test_parity_adapter_train.c - longstraw-train as one parity adapter
 * (adapters/longstraw-train.json and .py) on configs/hybrid-tiny.json:
 * longstraw-parity --adapter at CP 1, 2 in float64 (finite differences per
 * tensor: 100 LoRA tensors, about a minute on 2 cores) holds every level
 * and detects every control (cp-local-attention, skip-dkv-reduce,
 * skip-grad-finalize, detached); longstraw-audit refuses that report for a
 * CP-2 full-mode run of the same build that sampled its own responses
 * (parity.coverage names the path the adapter's batch never took), and a
 * detached-mode run does not reach level 4. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "receipts/format/json_util.h"
#include "tests/support/test_tmpdir.h"

#define PARITY LS_BINARY_DIR "/parity/longstraw-parity"
#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define AUDIT LS_BINARY_DIR "/audit/longstraw-audit"
#define ENV "OMP_NUM_THREADS=1 LONGSTRAW_TRAIN=" TRAIN " LONGSTRAW_MPIRUN=" LS_MPIEXEC " "

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "parity-adapter-train"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static int sh(const char *cmd) {
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

static void train(const char *name, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 timeout 300 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 " TRAIN " --config " LS_SOURCE_DIR
             "/configs/hybrid-tiny.json --out %s/%s --prompt-len 96 --steps 1 --group 2 --response-len 4 "
             "--page-size 16 --capture-chunk 32 --dtype f64 --temperature 0.9 --quiet %s > %s/%s.log 2>&1",
             tmpdir, name, args, tmpdir, name);
    cr_assert_eq(sh(cmd), 0, "the run %s failed (%s/%s.log)", name, tmpdir, name);
}

static int audit(const char *name) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, AUDIT " %s/%s --parity %s/rep/parity.json --require-level 4 > %s/%s-audit.txt 2>&1",
             tmpdir, name, tmpdir, tmpdir, name);
    return sh(cmd);
}

Test(parity_adapter_train, longstraw_train_through_the_protocol_reaches_level_4, .init = setup, .fini = teardown,
     .timeout = 900) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             ENV PARITY " --adapter " LS_SOURCE_DIR "/adapters/longstraw-train.json --cp 1,2 --dtype f64 "
                        "--jobs 2 --out %s/rep > %s/rep.txt 2>&1",
             tmpdir, tmpdir);
    cr_assert_eq(sh(cmd), 0, "longstraw-parity --adapter failed (%s/rep.txt)", tmpdir);
    char p[512], err[512];
    cJSON *r = NULL;
    snprintf(p, sizeof p, "%s/rep/parity.json", tmpdir);
    cr_assert_eq(ls_json_read_file(p, &r, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(r, "family")->valuestring, "hybrid");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "levels"))
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "holds")), "level %.0f does not hold",
                  cJSON_GetObjectItemCaseSensitive(c, "level")->valuedouble);
    const char *want[] = {"cp-local-attention", "skip-dkv-reduce", "skip-grad-finalize", "detached"};
    for (size_t i = 0; i < 4; i++) {
        int n = 0;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r, "controls")) {
            if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "fault")->valuestring, want[i]) != 0) continue;
            n++;
            cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected")), "%s not detected", want[i]);
        }
        cr_expect_eq(n, 1, "control %s: %d runs, expected 1 (CP 2, f64)", want[i], n);
    }
    cJSON_Delete(r);
    /* the adapter's report ran its batch (responses, old and reference log-probs given): it covers no run
       that samples and scores itself, and the audit names that path (deny by default); LongStraw's own
       runs are certified through their path by longstraw-parity --like (test_parity_path) */
    train("fixed", "--grad-mode full");
    cr_expect_eq(audit("fixed"), 1, "a sampled run was certified by a report whose runs were given their responses "
                 "(%s/fixed-audit.txt)", tmpdir);
    char ap[600];
    snprintf(ap, sizeof ap, "%s/fixed-audit.txt", tmpdir);
    FILE *f = fopen(ap, "r");
    static char text[1 << 16];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    cr_expect(strstr(text, "the run's responses \"sampled\"") != NULL &&
                  strstr(text, "was never exercised by the report's runs (responses [\"given\"])") != NULL,
              "parity.coverage does not name the sampled path (%s)", ap);
    train("detached", "--grad-mode detached");
    cr_expect_eq(audit("detached"), 1, "a detached-mode run reached level 4 (%s/detached-audit.txt)", tmpdir);
}
