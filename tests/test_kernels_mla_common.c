/* test_kernels_mla_common.c - helpers shared by the MLA-family kernel tests
 * (test_kernels_mla_*.c): a seeded generator, an error measure, and a central
 * finite-difference check.  Each test file declares the few it uses. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

void mla_test_seed(uint64_t seed) { rng_state = seed * 0x9E3779B97F4A7C15ull + 1; }

/* Uniform in [-1, 1) (splitmix64). */
double mla_test_uniform(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

void mla_test_fill(double *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * mla_test_uniform();
}

/* max_i |a_i - b_i| / max(max_i |b_i|, 1e-300): error relative to the
 * reference's scale. */
double mla_test_rel_err(const double *a, const double *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > e || isnan(d)) e = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / (m > 1e-300 ? m : 1e-300);
}

/* Central differences of loss() in each element of param [n] (step h),
 * compared with grad [n].  Returns the worst error per element, relative to
 * |fd_i| + 1e-3 max_j |fd_j| (so entries far below the tensor's scale are
 * judged against that scale).  *fd_scale receives max_j |fd_j|, so the
 * caller can check the gradient is not trivially zero. */
double mla_test_fd(double (*loss)(void *), void *ctx, double *param, const double *grad,
                   size_t n, double h, double *fd_scale)
{
    double worst = 0, scale = 0;
    double *fd = malloc((n > 0 ? n : 1) * sizeof *fd);
    if (!fd) return INFINITY;
    for (size_t i = 0; i < n; i++) {
        double x = param[i];
        param[i] = x + h;
        double lp = loss(ctx);
        param[i] = x - h;
        double lm = loss(ctx);
        param[i] = x;
        fd[i] = (lp - lm) / (2 * h);
        if (fabs(fd[i]) > scale) scale = fabs(fd[i]);
    }
    for (size_t i = 0; i < n; i++) {
        double e = fabs(fd[i] - grad[i]) / (fabs(fd[i]) + 1e-3 * scale + 1e-300);
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    free(fd);
    if (fd_scale) *fd_scale = scale;
    return worst;
}

/* Print one figure of merit on stderr (collected in the report). */
void mla_test_report(const char *what, double err)
{
    fprintf(stderr, "[kernels_mla] %-48s worst %.3e\n", what, err);
}
