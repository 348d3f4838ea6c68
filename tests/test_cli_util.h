/* test_cli_util.h - running longstraw-train as a user does, for the CLI
 * tests: the includer defines `static char tmpdir[256]` (its scratch
 * directory) and TRAIN (the executable) before including this. */
#ifndef LS_TEST_CLI_UTIL_H
#define LS_TEST_CLI_UTIL_H
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "receipts/receipt.h"

/* Run a command line with stdout/stderr into tmpdir/out.txt and err.txt;
 * returns the exit status. */
static inline int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out.txt 2>%s/err.txt", TRAIN, args, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

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
