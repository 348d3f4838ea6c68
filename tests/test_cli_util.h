/* test_cli_util.h - running longstraw-train as a user does, for the CLI
 * tests: the scratch directory `tmpdir` (LS_TEST_CLI_TMPDIR makes and
 * removes it), TRAIN (the executable) and CFG (the model config; the
 * includer may define another before including this). */
#ifndef LS_TEST_CLI_UTIL_H
#define LS_TEST_CLI_UTIL_H
/* paths here are short temporary names: truncation cannot happen */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "receipts/manifest.h"
#include "receipts/receipt.h"
#include "receipts/trace_reader.h"
#include "test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#ifndef CFG
#define CFG LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#endif

static char tmpdir[256];

/* setup() and teardown(): a fresh scratch directory named after prefix per test. */
#define LS_TEST_CLI_TMPDIR(prefix)                                          \
    static void setup(void) { ls_test_tmpdir_make(tmpdir, prefix); }      \
    static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

/* Run a command line with stdout/stderr into tmpdir/out.txt and err.txt;
 * returns the exit status. */
static inline int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out.txt 2>%s/err.txt", TRAIN, args, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

#ifdef LS_MPIEXEC
/* cmd under sh; its exit status (asserts it exited). */
static inline int sh(const char *cmd) {
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

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

static inline char *slurp(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strdup(buf);
}

static inline void expect_usage_error(const char *args, const char *names) {
    int rc = run(args);
    char *e = slurp("err.txt");
    cr_expect_eq(rc, 2, "'%s': exit %d, want 2", args, rc);
    cr_expect(strstr(e, names) != NULL, "'%s': stderr does not name %s: %s", args, names, e);
    free(e);
}

/* The rank-0 receipt of a run directory (asserts it reads and validates). */
static inline ls_receipt *read_receipt(const char *run_dir) {
    char rp[512], err[512];
    snprintf(rp, sizeof rp, "%s/rank-0000/receipt.json", run_dir);
    ls_receipt *r = NULL;
    cr_assert_eq(ls_receipt_read(rp, &r, err, sizeof err), LS_OK, "%s", err);
    return r;
}

#endif
