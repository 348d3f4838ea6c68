/* bench_util.h - what the benchmarks share: a monotonic clock, a seeded
 * uniform float buffer (the caller frees it; out of memory ends the program
 * with a message naming it), the machine's load when they start, and a
 * measurement run in a child process of its own. */
#ifndef LS_BENCH_UTIL_H
#define LS_BENCH_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n floats uniform in [lo, hi) from the LCG state *s; who names the program. */
static inline float *bench_rand_buf(const char *who, size_t n, uint64_t *s, float lo, float hi)
{
    float *a = malloc((n ? n : 1) * sizeof *a);
    if (a == NULL) {
        fprintf(stderr, "%s: out of memory (%zu floats)\n", who, n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = lo + (hi - lo) * (float)((*s >> 40) * 0x1.0p-24);
    }
    return a;
}

/* The 1-minute load average on stdout (other load makes the numbers noisy);
 * nothing when /proc/loadavg cannot be read. */
static inline void bench_print_loadavg(void)
{
    FILE *la = fopen("/proc/loadavg", "r");
    double l1;
    if (la != NULL && fscanf(la, "%lf", &l1) == 1) printf("1-minute load average at start: %.2f\n", l1);
    if (la != NULL) fclose(la);
}

/* fn(arg, out) run in a forked child, so that its peak RSS is its own, and
 * the child's out (size bytes) read back into out; 0, or -1 when the child
 * could not run or report (out then partly written).  stdout is flushed
 * first (the child would print what is buffered again). */
static inline int bench_in_child(void (*fn)(const void *arg, void *out), const void *arg, void *out, size_t size)
{
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        fn(arg, out);
        ssize_t w = write(fd[1], out, size);
        _exit(w == (ssize_t)size ? 0 : 1);
    }
    close(fd[1]);
    ssize_t r = read(fd[0], out, size);
    close(fd[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    return r == (ssize_t)size ? 0 : -1;
}
#endif
