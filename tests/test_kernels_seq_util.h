/* test_kernels_seq_util.h - helpers of the sequence-kernel tests (conv1d,
 * GDN, attention): a seeded generator, arrays, error measures and a central
 * finite-difference checker.  Everything is double: the tests run against
 * the float64 kernels (the float32 ones through kernels_seq_f32_wrap.c). */
#ifndef LS_TEST_KERNELS_SEQ_UTIL_H
#define LS_TEST_KERNELS_SEQ_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 */
static inline uint64_t ks_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double ks_unif(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(ks_next(s) >> 11) * 0x1.0p-53);
}

static inline double *ks_alloc(size_t n)
{
    double *a = calloc(n ? n : 1, sizeof *a);
    if (a == NULL) {
        fprintf(stderr, "test: out of memory (%zu doubles)\n", n);
        abort();
    }
    return a;
}

static inline double *ks_rand(uint64_t *s, size_t n, double lo, double hi)
{
    double *a = ks_alloc(n);
    for (size_t i = 0; i < n; i++) {
        a[i] = ks_unif(s, lo, hi);
    }
    return a;
}

static inline double *ks_copy(const double *src, size_t n)
{
    double *a = ks_alloc(n);
    if (n) {
        memcpy(a, src, n * sizeof *a);
    }
    return a;
}

static inline double ks_maxabs(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double v = fabs(a[i]);
        if (!(v <= m)) {
            m = v; /* NaN propagates */
        }
    }
    return m;
}

/* max |a - b|, NaN-propagating; infinities of equal sign count as equal. */
static inline double ks_maxdiff(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) && a[i] == b[i]) {
            continue;
        }
        double v = fabs(a[i] - b[i]);
        if (!(v <= m)) {
            m = v;
        }
    }
    return m;
}

/* max |a - b| / max(max |b|, floor): error relative to the tensor's scale. */
static inline double ks_relerr(const double *a, const double *b, size_t n)
{
    double s = ks_maxabs(b, n);
    return ks_maxdiff(a, b, n) / (s > 1e-30 ? s : 1e-30);
}

/* sum a.b */
static inline double ks_dot(const double *a, const double *b, size_t n)
{
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += a[i] * b[i];
    }
    return acc;
}

/* Central finite differences of loss() with respect to x[i] for every
 * stride-th element (all when stride = 1), compared with the analytic
 * gradient grad.  Returns max |grad - fd| / max |fd| over the checked set. */
typedef double (*ks_loss_fn)(void *ctx);
static inline double ks_fd_check(ks_loss_fn loss, void *ctx, double *x, const double *grad,
                                 size_t n, size_t stride, double h)
{
    double maxd = 0, maxf = 0;
    for (size_t i = 0; i < n; i += stride) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        double fd = (lp - lm) / (2 * h);
        double d = fabs(fd - grad[i]);
        if (!(d <= maxd)) {
            maxd = d;
        }
        if (fabs(fd) > maxf) {
            maxf = fabs(fd);
        }
    }
    return maxd / (maxf > 1e-30 ? maxf : 1e-30);
}

#endif
