/* bench_util.h - what the kernel benchmarks share: a monotonic clock and a
 * seeded uniform float buffer (the caller frees it; out of memory ends the
 * program with a message naming it). */
#ifndef LS_BENCH_UTIL_H
#define LS_BENCH_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
#endif
