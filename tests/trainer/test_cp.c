/* test_cp.c - context parallelism of the hybrid family (float64), run under
 * `mpirun -np N` (N = 1, 2, 4) and once without mpirun.  A plain program (not
 * Criterion: its forks do not mix with MPI); every rank checks, exit 0 only
 * when every rank passed.
 *
 * References, computed on every rank by the single-rank trainer with no
 * communicator at all: the CP-1 LongStraw step (update consistency) and the
 * naive full-sequence step, one autograd graph over prompt + response with no
 * carried state (`full`-mode gradient parity).  Compared: the old-policy
 * log-probs (fidelity), every trainable gradient (relative error), and the
 * bitwise agreement of every rank's gradients (the digest check, verified
 * here again by gathering each rank's own digest) and parameters after two
 * optimizer steps.  Prompts whose positions do not divide by N, shards
 * shorter than the conv tail, several pages per shard, unequal responses, G
 * = 1, both trainable sets, both gradient modes.
 *
 * Negative controls: each fault flag breaks exactly the comparison it should
 * (asserted to fail) while the comparisons it should not touch still pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "trainer/dist/comm.h"
#include "trainer/base/rng.h"
#include "trainer/step/step.h"
#include "trainer/families/hybrid/hybrid_family.h"

#include "tests/trainer/test_mpi_harness.h"

#define K(x) LS_K(x)


/* the family's part of test_cp_checks.h */
#define CP_TEST_CONFIG "/configs/hybrid-tiny.json"
#define CP_TEST_LORA_EXPERTS 0
#define CP_TEST_DETACHED_SHARD_LOCAL 0
static size_t cp_test_shard_bytes(const ls_params *p, int64_t n) { return K(ls_hybrid_state_analytical_bytes)(p, n); }

#include "tests/trainer/test_cp_checks.h"

/* Each fault breaks its comparison (asserted to fail) and not the others. */
static void check_faults(void) {
    size_t R[] = {5, 3, 7}, P = 30, G = 3;
    outcome one = run(LS_TRAIN_LORA, LS_GRAD_FULL, P, G, R, LS_STRATEGY_LONGSTRAW, NULL, NULL);
    outcome oned = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, NULL, NULL);
    grad_faults gf = check_grad_faults(&one, &oned, P, G, R);
    /* cp-local-attention: fidelity breaks */
    ls_cp_faults f = {.local_attention = 1};
    outcome c = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    double lc = rel(c.lp, oned.lp, oned.nlp);
    CHECK(lc > 1e-6, "cp-local-attention: log-probs vs CP-1 rel %.3e should fail", lc);
    if (rank_ == 0)
        printf("  faults (CP-%d): skip-dkv-reduce grad %.2e (rank 0) log-probs %.2e; skip-grad-finalize grad %.2e "
               "log-probs %.2e; local-attention log-probs %.2e\n",
               world_, gf.dkv_grad, gf.dkv_lp, gf.fin_grad, gf.fin_lp, lc);
    outcome_free(&one), outcome_free(&oned), outcome_free(&c);
}

int main(int argc, char **argv) {
    if (harness_open("test_cp", &argc, &argv) != 0) return 2;
    size_t R1[] = {5, 3, 7}, R2[] = {6}, R3[] = {2, 9};
    check_clean(LS_TRAIN_LORA, LS_GRAD_FULL, 30, 3, R1);     /* 29 positions: uneven for 2 and 4 */
    check_clean(LS_TRAIN_LORA, LS_GRAD_FULL, 12, 1, R2);     /* G = 1; shards of 2-3 < the conv tail */
    check_clean(LS_TRAIN_FULL, LS_GRAD_FULL, 23, 2, R3);     /* every tensor trainable */
    check_clean(LS_TRAIN_LORA, LS_GRAD_DETACHED, 30, 3, R1);
    check_clean(LS_TRAIN_FULL, LS_GRAD_DETACHED, 23, 2, R3);
    check_two_steps(26);
    if (world_ > 1) check_faults();
    return harness_close("test_cp");
}
