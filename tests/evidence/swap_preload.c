/* swap_preload.c - an LD_PRELOAD shim for the audit's adversarial suite
 * (tests/evidence/generate.py, class "swap"): a file of the run changed while
 * the audit runs and put back after, exactly and repeatably.
 *
 * The n-th open of LS_SWAP_PATH (an absolute path) in this process opens
 * LS_SWAP_WITH instead, for every n listed in LS_SWAP_OPENS ("1", "2,3",
 * "all"); every other open is untouched.  Opens through a directory
 * descriptor (openat, as the audit opens every component without following
 * links) are resolved through /proc/self/fd.  LS_SWAP_LOG (optional) gets
 * one line per open of the target: its ordinal and whether it was swapped,
 * so that a generator can say which read the swap hit.
 *
 * Test code only: never linked into a tool. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int opens; /* opens of the target so far */

static int swap_this(int n) {
    const char *list = getenv("LS_SWAP_OPENS");
    if (list == NULL) return 0;
    if (strcmp(list, "all") == 0) return 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (atoi(t) == n) return 1;
    return 0;
}

/* The path of dirfd/name, "" when it cannot be told. */
static void resolve(int dirfd, const char *name, char *out, size_t cap) {
    out[0] = 0;
    if (name == NULL) return;
    if (name[0] == '/' || dirfd == AT_FDCWD) {
        if (name[0] == '/') {
            snprintf(out, cap, "%s", name);
        } else {
            char cwd[PATH_MAX];
            if (getcwd(cwd, sizeof cwd)) snprintf(out, cap, "%s/%s", cwd, name);
        }
        return;
    }
    char link[64], dir[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, dir, sizeof dir - 1);
    if (n <= 0) return;
    dir[n] = 0;
    snprintf(out, cap, "%s/%s", dir, name);
}

/* -1: not the target (open as asked); else the descriptor of the swap or of
 * the real file, decided here. */
static int maybe_swap(int dirfd, const char *name, int flags, mode_t mode,
                      int (*real)(int, const char *, int, ...)) {
    const char *target = getenv("LS_SWAP_PATH"), *with = getenv("LS_SWAP_WITH");
    if (target == NULL || with == NULL) return -2;
    char path[PATH_MAX + 64];
    resolve(dirfd, name, path, sizeof path);
    if (strcmp(path, target) != 0) return -2;
    int n = ++opens, swapped = swap_this(n);
    const char *log = getenv("LS_SWAP_LOG");
    if (log != NULL) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "open %d %s\n", n, swapped ? "swapped" : "real");
            fclose(f);
        }
    }
    if (!swapped) return -2;
    return real(AT_FDCWD, with, flags, mode);
}

typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*open_fn)(const char *, int, ...);

static int do_openat(const char *sym, int dirfd, const char *name, int flags, mode_t mode) {
    openat_fn real = (openat_fn)dlsym(RTLD_NEXT, sym);
    int fd = maybe_swap(dirfd, name, flags, mode, real);
    return fd != -2 ? fd : real(dirfd, name, flags, mode);
}

static int do_open(const char *sym, const char *name, int flags, mode_t mode) {
    openat_fn real_at = (openat_fn)dlsym(RTLD_NEXT, "openat");
    int fd = maybe_swap(AT_FDCWD, name, flags, mode, real_at);
    if (fd != -2) return fd;
    open_fn real = (open_fn)dlsym(RTLD_NEXT, sym);
    return real(name, flags, mode);
}

static mode_t mode_of(int flags, va_list ap) { return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0; }

int openat(int dirfd, const char *name, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_openat("openat", dirfd, name, flags, m);
}

int openat64(int dirfd, const char *name, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_openat("openat64", dirfd, name, flags, m);
}

int open(const char *name, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_open("open", name, flags, m);
}

int open64(const char *name, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_open("open64", name, flags, m);
}
