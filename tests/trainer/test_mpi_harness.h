/* test_mpi_harness.h - the harness of the plain multi-rank test programs
 * (test_cp, test_mla_cp, test_mla_cp_train: not Criterion, whose forks do
 * not mix with MPI): the communicator opened from the command line (every
 * rank checks), CHECK counting failures per rank, the relative error, the
 * bitwise check across ranks, and the exit status summed over the ranks.
 * Included by one translation unit of each program. */
#ifndef LS_TEST_MPI_HARNESS_H
#define LS_TEST_MPI_HARNESS_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "trainer/dist/comm.h"

static int failures;
static int rank_, world_;
static ls_comm_group *grp;
static ls_comm *comm_;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            failures++;                                                           \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank_, __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)

/* Opens the communicator (rank_, world_, grp, comm_); 0, or 2 with the reason. */
static inline int harness_open(const char *prog, int *argc, char ***argv) {
    char err[256];
    if (ls_comm_open(&comm_, argc, argv, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    grp = ls_comm_cp(comm_);
    rank_ = ls_comm_rank(comm_);
    world_ = ls_comm_world(comm_);
    if (rank_ == 0) printf("%s: %d rank(s), backend %s\n", prog, world_, ls_comm_backend(comm_));
    return 0;
}

/* Sums the failures over the ranks, prints the verdict, closes; the exit status. */
static inline int harness_close(const char *prog) {
    int64_t tot = failures;
    ls_group_allreduce_sum(grp, &tot, 1, LS_TRACE_DTYPE_I64, "test_result", -1);
    if (rank_ == 0)
        printf("%s: %s (%lld failure(s) over %d rank(s))\n", prog, tot ? "FAILED" : "ok", (long long)tot, world_);
    ls_comm_close(comm_);
    return tot ? 1 : 0;
}

/* max |a - b| / max |b| over n values (max |a - b| when b is all zero). */
static inline double rel(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return den > 0 ? num / den : num;
}

/* 1 when x's bytes are the same on every rank (each rank's digest gathered). */
static inline int same_on_all_ranks(const void *x, size_t bytes) {
    uint8_t mine[LS_DIGEST_SIZE], *all = malloc((size_t)world_ * LS_DIGEST_SIZE);
    if (all == NULL) exit(1);
    ls_digest_sha256(x, bytes, mine);
    if (ls_group_allgather(grp, mine, all, LS_DIGEST_SIZE, LS_TRACE_DTYPE_U8, "test_digest", -1) != LS_OK) exit(1);
    int ok = 1;
    for (int r = 0; r < world_; r++) ok &= !memcmp(all + (size_t)r * LS_DIGEST_SIZE, mine, LS_DIGEST_SIZE);
    free(all);
    return ok;
}
#endif
