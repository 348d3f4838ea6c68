/* test_mla_cp_train.c - context parallelism of the mla family's training
 * step (float64; the shape of test_cp.c, the hybrid family's), run under
 * `mpirun -np N` (N = 1, 2, 4) and once without mpirun.  A plain program
 * (not Criterion: its forks do not mix with MPI); every rank checks, exit 0
 * only when every rank passed.
 *
 * References, computed on every rank by the single-rank trainer with no
 * communicator at all: the CP-1 LongStraw step (update consistency) and the
 * naive full-sequence step, one autograd graph over prompt + response with
 * no carried state and one DSA selection over the whole sequence (`full`-
 * mode gradient parity).  Compared: the old-policy log-probs, every
 * trainable gradient (relative error), the bitwise agreement of every
 * rank's gradients, and the parameters after two optimizer steps.
 * mla-tiny's index_topk is 8; the prompts have 22 and 29 captured
 * positions, so the top-k is active, and (cp-local-dsa moves the log-probs)
 * the global candidates come from several ranks.  Both trainable sets (LoRA
 * with the routed experts' adapters, full), both gradient modes.
 *
 * Negative controls: cp-local-dsa breaks the log-probs; skip-grad-finalize
 * breaks the gradients and the digest check in BOTH modes (kv_b's response
 * gradient is shard-local in detached mode too); skip-dkv-reduce breaks the
 * gradients, not the log-probs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "trainer/dist/comm.h"
#include "trainer/base/rng.h"
#include "trainer/families/mla/mla_family.h"
#include "trainer/step/step.h"

#include "tests/trainer/test_mpi_harness.h"

#define K(x) LS_K(x)


/* the family's part of test_cp_checks.h */
#define CP_TEST_CONFIG "/configs/mla-tiny.json"
#define CP_TEST_LORA_EXPERTS 1
#define CP_TEST_DETACHED_SHARD_LOCAL 1 /* kv_b */
/* (kv_rank + d_rope + index_dim) reals per row */
static size_t cp_test_shard_bytes(const ls_params *p, int64_t n) { return K(ls_mla_state_plan_bytes)(&p->cfg, n); }

#include "tests/trainer/test_cp_checks.h"

/* Each fault breaks its comparison (asserted to fail) and not the others. */
static void check_faults(void) {
    size_t R[] = {5, 3, 7}, P = 30, G = 3;
    outcome one = run(LS_TRAIN_LORA, LS_GRAD_FULL, P, G, R, LS_STRATEGY_LONGSTRAW, NULL, NULL);
    outcome oned = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, NULL, NULL);
    ls_cp_faults f = {0};
    /* cp-local-dsa: each rank's own top-k: the log-probs move */
    f.local_dsa = 1;
    outcome c = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    double lc = rel(c.lp, oned.lp, oned.nlp);
    CHECK(lc > 1e-6, "cp-local-dsa: log-probs vs CP-1 rel %.3e should fail", lc);
    grad_faults gf = check_grad_faults(&one, &oned, P, G, R);
    if (rank_ == 0)
        printf("  faults (CP-%d): cp-local-dsa log-probs %.2e; skip-dkv-reduce grad %.2e (rank 0) log-probs %.2e; "
               "skip-grad-finalize grad %.2e (full) %.2e (detached) log-probs %.2e\n",
               world_, lc, gf.dkv_grad, gf.dkv_lp, gf.fin_grad, gf.fin_det, gf.fin_lp);
    outcome_free(&one), outcome_free(&oned), outcome_free(&c);
}

int main(int argc, char **argv) {
    if (harness_open("test_mla_cp_train", &argc, &argv) != 0) return 2;
    size_t R1[] = {5, 3, 7}, R2[] = {6}, R3[] = {2, 9};
    check_clean(LS_TRAIN_LORA, LS_GRAD_FULL, 30, 3, R1);     /* 29 positions: uneven for 2 and 4 */
    check_clean(LS_TRAIN_LORA, LS_GRAD_FULL, 23, 1, R2);     /* G = 1; 22 positions */
    check_clean(LS_TRAIN_FULL, LS_GRAD_FULL, 23, 2, R3);     /* every tensor trainable */
    check_clean(LS_TRAIN_LORA, LS_GRAD_DETACHED, 30, 3, R1);
    check_clean(LS_TRAIN_FULL, LS_GRAD_DETACHED, 23, 2, R3);
    check_two_steps(26);
    if (world_ > 1) check_faults();
    return harness_close("test_mla_cp_train");
}
