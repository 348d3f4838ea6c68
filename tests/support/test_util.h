/* test_util.h - helpers shared by the kernel tests (core, sequence and MLA
 * families): a seeded generator, array allocation, the error measures the
 * tests report, and a central finite-difference check.  Everything is
 * double: the tests run against the float64 kernels (the float32 ones
 * through the *_f32_wrap.c wrappers).  Header-only (static inline).
 *
 * Arrays returned by tu_alloc/tu_fill/tu_rand/tu_copy are malloc'd, never
 * NULL (the process aborts when memory runs out), and released with free().
 *
 * Error measures: a NaN anywhere counts as an infinite error, and elements
 * that are exactly equal (infinities of the same sign included) count as no
 * error, so that a test can only pass on numbers it has really compared. */
#ifndef LS_TEST_UTIL_H
#define LS_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ------------------------------------------------------ */

/* splitmix64: small, seedable, the same sequence everywhere.  Advances *s. */
static inline uint64_t tu_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi) from the top 53 bits of one tu_next. */
static inline double tu_unif(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(tu_next(s) >> 11) * 0x1.0p-53);
}

/* ---- arrays -------------------------------------------------------------- */

/* A new array of n zeros. */
static inline double *tu_alloc(size_t n)
{
    double *a = calloc(n ? n : 1, sizeof *a);
    if (a == NULL) {
        fprintf(stderr, "test: out of memory (%zu doubles)\n", n);
        abort();
    }
    return a;
}

/* A new array of n copies of v. */
static inline double *tu_fill(size_t n, double v)
{
    double *a = tu_alloc(n);
    for (size_t i = 0; i < n; i++)
        a[i] = v;
    return a;
}

/* A new array of n uniform values in [lo, hi), drawn in order from *s. */
static inline double *tu_rand(uint64_t *s, size_t n, double lo, double hi)
{
    double *a = tu_alloc(n);
    for (size_t i = 0; i < n; i++)
        a[i] = tu_unif(s, lo, hi);
    return a;
}

/* A new copy of src[n] (src may be NULL when n == 0). */
static inline double *tu_copy(const double *src, size_t n)
{
    double *a = tu_alloc(n);
    if (n)
        memcpy(a, src, n * sizeof *a);
    return a;
}

/* Round every element to float32 (so that float32 and float64 kernels see
 * the same inputs). */
static inline void tu_round_f32(double *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (double)(float)a[i];
}

/* tu_rand, then tu_round_f32: inputs both precisions see exactly. */
static inline double *tu_rand_f32(uint64_t *s, size_t n, double lo, double hi)
{
    double *a = tu_rand(s, n, lo, hi);
    tu_round_f32(a, n);
    return a;
}

/* sum a.b */
static inline double tu_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* ---- error measures ------------------------------------------------------ */

/* max |a_i| (infinite when any a_i is NaN). */
static inline double tu_max_abs(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double v = isnan(a[i]) ? INFINITY : fabs(a[i]);
        if (v > m)
            m = v;
    }
    return m;
}

/* max |a_i - b_i|: exactly equal elements (equal infinities included) give
 * 0; a NaN on either side gives infinity. */
static inline double tu_max_diff(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] == b[i] ? 0.0 : fabs(a[i] - b[i]);
        if (isnan(d))
            d = INFINITY;
        if (d > m)
            m = d;
    }
    return m;
}

/* Normwise relative error tu_max_diff(got, want) / max_i |want_i| over the
 * finite want_i (so an infinity in the reference does not hide the error of
 * the other elements); the absolute error when that scale is 0. */
static inline double tu_rel_err(const double *got, const double *want, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want[i]) > m)
            m = fabs(want[i]);
    double e = tu_max_diff(got, want, n);
    return m > 0 ? e / m : e;
}

/* One line per measured error on stdout: what, the error, the bound, and
 * FAIL when the error is over it (the caller still asserts). */
static inline void tu_report(const char *what, double err, double bound)
{
    printf("  %-48s worst rel err %.3e (bound %.0e)%s\n", what, err, bound,
           err <= bound ? "" : "  FAIL");
    fflush(stdout);
}

/* ---- finite differences -------------------------------------------------- */

typedef double (*tu_loss_fn)(void *ctx);

/* (loss(x + h e_i) - loss(x - h e_i)) / 2h; x[i] is restored afterwards. */
static inline double tu_central_diff(tu_loss_fn loss, void *ctx, double *x, size_t i, double h)
{
    double keep = x[i];
    x[i] = keep + h;
    double lp = loss(ctx);
    x[i] = keep - h;
    double lm = loss(ctx);
    x[i] = keep;
    return (lp - lm) / (2 * h);
}

/* Central differences of loss() with respect to x[i] for every stride-th
 * element (all when stride = 1), compared with the analytic gradient grad.
 * Returns max |grad_i - fd_i| / max |fd_i| over the checked set (the
 * absolute error when every fd_i is 0; infinite on a NaN).  *fd_max (may be
 * NULL) receives max |fd_i|, so a caller can check the gradient is not
 * trivially zero. */
static inline double tu_fd_check(tu_loss_fn loss, void *ctx, double *x, const double *grad,
                                 size_t n, size_t stride, double h, double *fd_max)
{
    double maxd = 0, maxf = 0;
    for (size_t i = 0; i < n; i += stride) {
        double fd = tu_central_diff(loss, ctx, x, i, h);
        double d = fabs(fd - grad[i]);
        if (isnan(d))
            d = INFINITY;
        if (d > maxd)
            maxd = d;
        if (fabs(fd) > maxf)
            maxf = fabs(fd);
    }
    if (fd_max != NULL)
        *fd_max = maxf;
    return maxf > 0 ? maxd / maxf : maxd;
}

#endif
