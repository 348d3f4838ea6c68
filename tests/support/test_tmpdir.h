/* test_tmpdir.h - a scratch directory per test (Criterion .init/.fini):
 * created under /tmp with mkdtemp, removed with everything in it; and the
 * lock that lets parallel test processes share a fixture made once. */
#ifndef LS_TEST_TMPDIR_H
#define LS_TEST_TMPDIR_H
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Criterion runs tests in parallel processes: a fixture directory `path`
 * shared by them is made by the first one under this exclusive lock
 * (path.lock) while the others wait; check for the fixture again once the
 * lock is held.  Returns the lock's descriptor: close it to release. */
static inline int ls_test_fixture_lock(const char *path) {
    char lock[1024];
    snprintf(lock, sizeof lock, "%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "open %s", lock);
    cr_assert_eq(flock(fd, LOCK_EX), 0, "lock %s", lock);
    return fd;
}

/* A fixture directory `path` shared by the tests of one binary run: -1 when
 * it is there already (made by another test), otherwise the descriptor of
 * the lock held on it (ls_test_fixture_lock): the caller makes it, then
 * closes the descriptor. */
static inline int ls_test_fixture_claim(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0) return -1;
    int lfd = ls_test_fixture_lock(path);
    if (stat(path, &sb) == 0) { /* made while this process waited */
        close(lfd);
        return -1;
    }
    return lfd;
}
#endif
