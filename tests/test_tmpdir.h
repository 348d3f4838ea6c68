/* test_tmpdir.h - a scratch directory per test (Criterion .init/.fini):
 * created under /tmp with mkdtemp, removed with everything in it. */
#ifndef LS_TEST_TMPDIR_H
#define LS_TEST_TMPDIR_H
#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

/* Creates /tmp/ls-TAG-XXXXXX into dir[256]; fails the test when it cannot. */
static inline void ls_test_tmpdir_make(char dir[256], const char *tag) {
    snprintf(dir, 256, "/tmp/ls-%s-XXXXXX", tag);
    cr_assert_not_null(mkdtemp(dir), "cannot create a scratch directory for %s", tag);
}

/* Removes dir and everything under it. */
static inline void ls_test_tmpdir_remove(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0, "cannot remove %s", dir);
}
#endif
