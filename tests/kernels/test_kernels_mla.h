/* test_kernels_mla.h - helpers of the MLA-family kernel tests
 * (test_kernels_mla_*.c), defined in test_kernels_mla_common.c: one seeded
 * generator shared by a test binary (so a test reseeds it before drawing),
 * an element-wise finite-difference check, and the report line.  The
 * generic helpers (error measures, arrays) come from test_util.h. */
#ifndef LS_TEST_KERNELS_MLA_H
#define LS_TEST_KERNELS_MLA_H

#include <stddef.h>
#include <stdint.h>

#include "tests/support/test_util.h"

/* Restart the generator: the same seed gives the same draws. */
void mla_test_seed(uint64_t seed);

/* Uniform in [-1, 1) (tu_unif on the shared state). */
double mla_test_uniform(void);

/* x[i] = scale * mla_test_uniform() for i = 0..n-1, in order. */
void mla_test_fill(double *x, size_t n, double scale);

/* Central differences of loss() in each element of param [n] (step h),
 * compared with grad [n].  Returns the worst error per element, relative to
 * |fd_i| + 1e-3 max_j |fd_j| (so entries far below the tensor's scale are
 * judged against that scale); infinite on a NaN or out of memory.
 * *fd_scale (may be NULL) receives max_j |fd_j|, so the caller can check the
 * gradient is not trivially zero. */
double mla_test_fd(tu_loss_fn loss, void *ctx, double *param, const double *grad, size_t n,
                   double h, double *fd_scale);

/* Print one figure of merit on stderr (collected in the report). */
void mla_test_report(const char *what, double err);

#endif
