/* test_cli_util.h - running the executables (longstraw-train, -audit,
 * -parity) as a user does, for the tests that drive them through a shell:
 * the scratch directory `tmpdir` (LS_TEST_CLI_TMPDIR makes and removes it),
 * `sh`, fixtures made once per test binary run (LS_TEST_FIXTURE_ROOT), the
 * reports read back against their schema, TRAIN and AUDIT (the executables)
 * and CFG (the model config; the includer may define another before
 * including this).  Header-only (static inline): a test includes it once. */
#ifndef LS_TEST_CLI_UTIL_H
#define LS_TEST_CLI_UTIL_H
/* paths here are short temporary names: truncation cannot happen */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "receipts/schema/schema.h"
#include "receipts/reading/trace_reader.h"
#include "tests/support/test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define AUDIT LS_BINARY_DIR "/audit/longstraw-audit"
#ifndef CFG
#define CFG LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#endif

static char tmpdir[256];

/* setup() and teardown(): a fresh scratch directory named after prefix per test. */
#define LS_TEST_CLI_TMPDIR(prefix)                                          \
    static void setup(void) { ls_test_tmpdir_make(tmpdir, prefix); }      \
    static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

/* cmd under sh; its exit status (asserts it exited). */
static inline int sh(const char *cmd) {
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

/* longstraw-train with args, stdout/stderr into tmpdir/out.txt and err.txt;
 * returns the exit status. */
static inline int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out.txt 2>%s/err.txt", TRAIN, args, tmpdir, tmpdir);
    return sh(cmd);
}

/* Removes a fixture root when the test binary's run ends (a report hook: no
 * Criterion assertion there, a failure is said on stderr). */
static inline void ls_test_fixture_root_remove(const char *root) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
}

/* Fixtures made once per test binary run, in the directory `pattern` (one
 * %d) with the pid of the Criterion runner, removed by a POST_ALL hook at
 * the end of the run.  fixture_claim(name, out, cap): the path of the
 * fixture `name` into out, and ls_test_fixture_claim's answer for it. */
#define LS_TEST_FIXTURE_ROOT(pattern)                                                                               \
    static void fixture_root(char *buf, size_t cap, pid_t pid) { snprintf(buf, cap, pattern, (int)pid); }           \
    ReportHook(POST_ALL)(struct criterion_global_stats *stats) {                                                   \
        (void)stats;                                                                                                \
        char root[128];                                                                                             \
        fixture_root(root, sizeof root, getpid());                                                                  \
        ls_test_fixture_root_remove(root);                                                                          \
    }                                                                                                               \
    static int fixture_claim(const char *name, char *out, size_t cap) {                                            \
        char root[128];                                                                                             \
        fixture_root(root, sizeof root, getppid()); /* a test runs in a child of the runner */                      \
        mkdir(root, 0755);                                                                                          \
        snprintf(out, cap, "%s/%s", root, name);                                                                    \
        return ls_test_fixture_claim(out);                                                                          \
    }

#if defined(LS_MPIEXEC) && defined(LS_LSAN_SUPP)
/* longstraw-train under mpirun -np np, args as given, stdout and stderr to tmpdir/out and tmpdir/err;
 * returns the exit status (timeout seconds at most). */
static inline int run_np_to(int np, const char *out, const char *err, int timeout, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
             ":print_suppressions=0 timeout %d " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np %d %s %s >%s/%s 2>%s/%s",
             timeout, np, TRAIN, args, tmpdir, out, tmpdir, err);
    return sh(cmd);
}
#endif

/* The file at path (at most 64 KiB of it; "" when it cannot be read), malloc'd. */
static inline char *slurp_path(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strdup(buf);
}

/* tmpdir/name, as slurp_path. */
static inline char *slurp(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return slurp_path(path);
}

/* A command run with args (its stderr in tmpdir/err.txt) exited rc: expects
 * 2 and a stderr that names `names`. */
static inline void expect_exit_2(int rc, const char *args, const char *names) {
    char *e = slurp("err.txt");
    cr_expect_eq(rc, 2, "'%s': exit %d, want 2", args, rc);
    cr_expect(strstr(e, names) != NULL, "'%s': stderr does not name %s: %s", args, names, e);
    free(e);
}

/* longstraw-train with args exits 2 naming `names`. */
static inline void expect_usage_error(const char *args, const char *names) { expect_exit_2(run(args), args, names); }

/* The rank-0 receipt of a run directory (asserts it reads and validates). */
static inline ls_receipt *read_receipt(const char *run_dir) {
    char rp[512], err[512];
    snprintf(rp, sizeof rp, "%s/rank-0000/receipt.json", run_dir);
    ls_receipt *r = NULL;
    cr_assert_eq(ls_receipt_read(rp, &r, err, sizeof err), LS_OK, "%s", err);
    return r;
}

/* The JSON file at path, valid against the schema `schema` (asserts both);
 * the caller frees it with cJSON_Delete. */
static inline cJSON *read_valid_json(const char *path, const char *schema) {
    cJSON *doc = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(path, &doc, err, sizeof err), LS_OK, "%s", err);
    const ls_schema *s = NULL;
    cr_assert_eq(ls_schema_get(schema, &s, err, sizeof err), LS_OK, "%s", err);
    ls_schema_errors errs = {0};
    ls_status st = ls_schema_validate(s, doc, &errs);
    char first[512];
    ls_schema_errors_first(&errs, first, sizeof first);
    ls_schema_errors_free(&errs);
    cr_assert_eq(st, LS_OK, "%s fails the %s schema: %s", path, schema, first);
    return doc;
}

/* The check `id` of an audit report (a pointer into doc), or NULL. */
static inline const cJSON *report_find_rule(const cJSON *doc, const char *id) {
    const cJSON *lv, *c;
    cJSON_ArrayForEach(lv, cJSON_GetObjectItem(doc, "levels")) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(lv, "checks")) {
            const cJSON *i = cJSON_GetObjectItem(c, "id");
            if (cJSON_IsString(i) && strcmp(i->valuestring, id) == 0) return c;
        }
    }
    return NULL;
}

/* The check `id` of an audit report (asserts it is there). */
static inline const cJSON *report_rule(const cJSON *doc, const char *id) {
    const cJSON *c = report_find_rule(doc, id);
    cr_assert_not_null(c, "no rule %s in the report", id);
    return c;
}
#endif
