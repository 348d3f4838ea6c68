/* test_kernels_core_util.h - helpers shared by the core-kernel tests: a seeded
 * random generator, array allocation and the error measures the tests report.
 * Everything here is double: the tests run against the float64 kernels. */
#ifndef LS_TEST_KERNELS_CORE_UTIL_H
#define LS_TEST_KERNELS_CORE_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: small, seedable, the same sequence everywhere. */
static inline uint64_t kc_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static inline double kc_unif(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(kc_next(s) >> 11) * 0x1.0p-53);
}

/* A new array of n uniform values in [lo, hi) (never NULL; aborts on OOM). */
static inline double *kc_rand(uint64_t *s, size_t n, double lo, double hi)
{
    double *a = malloc((n ? n : 1) * sizeof *a);
    if (!a)
        abort();
    for (size_t i = 0; i < n; i++)
        a[i] = kc_unif(s, lo, hi);
    return a;
}

/* A new array of n copies of v. */
static inline double *kc_fill(size_t n, double v)
{
    double *a = malloc((n ? n : 1) * sizeof *a);
    if (!a)
        abort();
    for (size_t i = 0; i < n; i++)
        a[i] = v;
    return a;
}

static inline double *kc_copy(const double *src, size_t n)
{
    double *a = malloc((n ? n : 1) * sizeof *a);
    if (!a)
        abort();
    memcpy(a, src, n * sizeof *a);
    return a;
}

/* Round every element to float32 (so that float32 and float64 kernels see the same inputs). */
static inline void kc_round_f32(double *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (double)(float)a[i];
}

static inline double kc_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline double kc_max_abs(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i]) > m || isnan(a[i]))
            m = isnan(a[i]) ? INFINITY : fabs(a[i]);
    return m;
}

/* Normwise relative error max_i |got_i - want_i| / max_i |want_i| (NaN counts as infinite).
 * If want is all zero, the absolute error. */
static inline double kc_rel_err(const double *got, const double *want, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (isnan(d))
            d = INFINITY;
        if (d > e)
            e = d;
        if (fabs(want[i]) > m)
            m = fabs(want[i]);
    }
    return m > 0 ? e / m : e;
}

/* Worst errors seen by a test binary, printed at the end of each test. */
static inline void kc_report(const char *what, double err, double bound)
{
    printf("  %-48s worst rel err %.3e (bound %.0e)%s\n", what, err, bound,
           err <= bound ? "" : "  FAIL");
    fflush(stdout);
}

#endif
