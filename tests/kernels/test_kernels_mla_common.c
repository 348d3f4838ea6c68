/* test_kernels_mla_common.c - see test_kernels_mla.h. */
#include "tests/kernels/test_kernels_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

void mla_test_seed(uint64_t seed) { rng_state = seed * 0x9E3779B97F4A7C15ull + 1; }

double mla_test_uniform(void) { return tu_unif(&rng_state, -1.0, 1.0); }

void mla_test_fill(double *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * mla_test_uniform();
}

double mla_test_fd(tu_loss_fn loss, void *ctx, double *param, const double *grad, size_t n,
                   double h, double *fd_scale)
{
    double worst = 0, scale = 0;
    double *fd = malloc((n > 0 ? n : 1) * sizeof *fd);
    if (!fd) return INFINITY;
    for (size_t i = 0; i < n; i++) {
        fd[i] = tu_central_diff(loss, ctx, param, i, h);
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

void mla_test_report(const char *what, double err)
{
    fprintf(stderr, "[kernels_mla] %-48s worst %.3e\n", what, err);
}
