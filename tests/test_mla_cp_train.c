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

#include "receipts/digest.h"
#include "trainer/comm.h"
#include "trainer/rng.h"
#include "trainer/mla.h"
#include "trainer/step.h"

#define K(x) LS_K(x)

static int failures;
static int rank_, world_;
static ls_comm_group *grp;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank_, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static ls_params *make_params(ls_train_mode mode, ls_grad_mode gm) {
    ls_model_config c;
    char err[256];
    if (ls_config_load(&c, LS_SOURCE_DIR "/configs/mla-tiny.json", err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.grad_mode = gm;
    o.lora_init_random = 1;
    o.lora_experts = mode == LS_TRAIN_LORA;
    o.beta = 0.05;
    ls_params *p = NULL;
    if (K(ls_params_init)(&p, &c, &o, 11, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    ls_rng r; /* the policy off the reference: KL != 0 in full mode */
    ls_rng_seed(&r, 5);
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) p->t[i].w[j] += 0.02 * (2 * ls_rng_uniform(&r) - 1);
    return p;
}

static ls_batch *make_batch(size_t P, size_t G, const size_t *R) {
    ls_batch *b = NULL;
    if (ls_batch_alloc(&b, G) != LS_OK) exit(2);
    ls_rng r;
    ls_rng_seed(&r, 1234 + P);
    int32_t ids[512];
    for (size_t i = 0; i < P; i++) ids[i] = (int32_t)ls_rng_below(&r, 256);
    ls_batch_set_prompt(b, ids, P);
    for (size_t g = 0; g < G; g++) {
        for (size_t t = 0; t < R[g]; t++) ids[t] = (int32_t)ls_rng_below(&r, 256);
        ls_batch_set_response(b, g, ids, R[g]);
        b->rewards[g] = ls_rng_uniform(&r);
    }
    return b;
}

typedef struct {
    double *g;    /* flattened trainable gradients */
    double *lp;   /* old-policy log-probs, members concatenated */
    size_t ng, nlp;
    int agree;
    double loss;
} outcome;

static outcome run(ls_train_mode tm, ls_grad_mode gm, size_t P, size_t G, const size_t *R, ls_strategy s,
                   ls_comm_group *g, const ls_cp_faults *f) {
    ls_params *p = make_params(tm, gm);
    ls_batch *b = make_batch(P, G, R);
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.strategy = s;
    o.page_size = 4;
    o.capture_chunk = 5;
    o.cp_group = g;
    if (f) o.cp_faults = *f;
    ls_step_result res;
    char err[256] = "";
    ls_status st = K(ls_step_grads)(p, b, NULL, &o, NULL, &res, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "rank %d: step failed: %s\n", rank_, err);
        exit(1);
    }
    outcome out = {.agree = res.grads_agree, .loss = res.loss};
    out.g = malloc(p->n_trainable * sizeof *out.g);
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) out.g[out.ng++] = p->t[i].g[j];
    size_t tot = 0;
    for (size_t i = 0; i < G; i++) tot += R[i];
    out.lp = malloc(tot * sizeof *out.lp);
    for (size_t i = 0; i < G; i++)
        for (size_t t = 0; t < R[i]; t++) out.lp[out.nlp++] = b->old_lp[i][t];
    if (g && ls_group_size(g) > 1) { /* the prompt state this rank holds is its shard's, exactly */
        int64_t s0, s1;
        ls_cp_shard((int64_t)P - 1, ls_group_size(g), ls_group_rank(g), &s0, &s1);
        CHECK(res.shard_begin == s0 && res.shard_end == s1, "shard [%lld, %lld)", (long long)res.shard_begin,
              (long long)res.shard_end);
        size_t an = K(ls_mla_state_plan_bytes)(&p->cfg, s1 - s0); /* (kv_rank + d_rope + index_dim) per row */
        CHECK(res.prompt_state_bytes == an, "prompt state %zu bytes, analytical for the shard %zu",
              res.prompt_state_bytes, an);
    }
    ls_batch_free(b);
    K(ls_params_free)(p);
    return out;
}

static void outcome_free(outcome *o) {
    free(o->g);
    free(o->lp);
}

static double rel(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return den > 0 ? num / den : num;
}

/* 1 when x's bytes are the same on every rank. */
static int same_on_all_ranks(const void *x, size_t bytes) {
    uint8_t mine[LS_DIGEST_SIZE], *all = malloc((size_t)world_ * LS_DIGEST_SIZE);
    ls_digest_sha256(x, bytes, mine);
    if (ls_group_allgather(grp, mine, all, LS_DIGEST_SIZE, LS_TRACE_DTYPE_U8, "test_digest", -1) != LS_OK) exit(1);
    int ok = 1;
    for (int r = 0; r < world_; r++) ok &= !memcmp(all + (size_t)r * LS_DIGEST_SIZE, mine, LS_DIGEST_SIZE);
    free(all);
    return ok;
}

#define TOL 1e-10

/* The clean comparisons for one configuration. */
static void check_clean(ls_train_mode tm, ls_grad_mode gm, size_t P, size_t G, const size_t *R) {
    const char *what = gm == LS_GRAD_FULL ? "full" : "detached";
    outcome one = run(tm, gm, P, G, R, LS_STRATEGY_LONGSTRAW, NULL, NULL);
    outcome cpn = run(tm, gm, P, G, R, LS_STRATEGY_LONGSTRAW, grp, NULL);
    double eg = rel(cpn.g, one.g, one.ng), el = rel(cpn.lp, one.lp, one.nlp);
    CHECK(eg <= TOL, "%s P=%zu G=%zu train=%d: CP-%d gradient vs CP-1 rel %.3e", what, P, G, tm, world_, eg);
    CHECK(el <= TOL, "%s P=%zu: CP-%d log-probs vs CP-1 rel %.3e", what, P, world_, el);
    CHECK(fabs(cpn.loss - one.loss) <= TOL * fmax(1, fabs(one.loss)), "loss %.17g vs %.17g", cpn.loss, one.loss);
    CHECK(same_on_all_ranks(cpn.g, cpn.ng * sizeof(double)), "%s P=%zu: gradients differ across ranks", what, P);
    if (world_ > 1) CHECK(cpn.agree, "%s P=%zu: the step's digest check says the ranks disagree", what, P);
    if (world_ == 1) /* N = 1 is the single-rank path, bit for bit */
        CHECK(!memcmp(cpn.g, one.g, one.ng * sizeof(double)), "N=1 gradient not bitwise the single-rank one");
    if (gm == LS_GRAD_FULL) {
        outcome nv = run(tm, gm, P, G, R, LS_STRATEGY_NAIVE, NULL, NULL);
        double en = rel(cpn.g, nv.g, nv.ng);
        CHECK(en <= TOL, "full P=%zu G=%zu train=%d: CP-%d gradient vs naive full sequence rel %.3e", P, G, tm,
              world_, en);
        if (rank_ == 0)
            printf("  full  P=%3zu G=%zu train=%s: CP-%d vs CP-1 %.2e, vs naive %.2e, log-probs %.2e\n", P, G,
                   tm == LS_TRAIN_LORA ? "lora" : "full", world_, eg, en, el);
        outcome_free(&nv);
    } else if (rank_ == 0) {
        printf("  det.  P=%3zu G=%zu train=%s: CP-%d vs CP-1 %.2e, log-probs %.2e\n", P, G,
               tm == LS_TRAIN_LORA ? "lora" : "full", world_, eg, el);
    }
    outcome_free(&one);
    outcome_free(&cpn);
}

/* Two steps with the optimizer: the parameters bitwise equal on every rank. */
static void check_two_steps(size_t P) {
    size_t R[] = {4, 6};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_FULL);
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.page_size = 4;
    o.cp_group = grp;
    for (int s = 0; s < 2; s++) {
        ls_batch *b = make_batch(P + (size_t)s, 2, R);
        char err[256];
        if (K(ls_step_grads)(p, b, NULL, &o, NULL, NULL, err, sizeof err) != LS_OK) {
            fprintf(stderr, "rank %d: %s\n", rank_, err);
            exit(1);
        }
        K(ls_step_optimizer)(p, &o, s + 1);
        ls_batch_free(b);
    }
    int ok = 1;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable) ok &= same_on_all_ranks(p->t[i].w, p->t[i].numel * sizeof(ls_real));
    CHECK(ok, "parameters differ across ranks after two steps");
    K(ls_params_free)(p);
}

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
    /* skip-dkv-reduce: the gradients break, the log-probs hold */
    f = (ls_cp_faults){.skip_dkv_reduce = 1};
    outcome a = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    double ea = rel(a.g, oned.g, oned.ng), la = rel(a.lp, oned.lp, oned.nlp);
    CHECK(ea > 1e-6, "skip-dkv-reduce: gradient vs CP-1 rel %.3e on rank %d should fail", ea, rank_);
    CHECK(la <= TOL, "skip-dkv-reduce: log-probs should still match (rel %.3e)", la);
    CHECK(!a.agree, "skip-dkv-reduce: the digest check should see the ranks disagree");
    /* skip-grad-finalize, full mode and detached mode: the shard-local sums are missing */
    f = (ls_cp_faults){.skip_grad_finalize = 1};
    outcome b = run(LS_TRAIN_LORA, LS_GRAD_FULL, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    double eb = rel(b.g, one.g, one.ng), lb = rel(b.lp, one.lp, one.nlp);
    CHECK(eb > 1e-6, "skip-grad-finalize: gradient vs CP-1 rel %.3e should fail", eb);
    CHECK(lb <= TOL, "skip-grad-finalize: log-probs should still match (rel %.3e)", lb);
    CHECK(!b.agree, "skip-grad-finalize: the digest check should see the ranks disagree");
    outcome b2 = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    double eb2 = rel(b2.g, oned.g, oned.ng);
    CHECK(eb2 > 1e-6 && !b2.agree, "skip-grad-finalize, detached: rel %.3e agree %d (kv_b is shard-local: should fail)",
          eb2, b2.agree);
    if (rank_ == 0)
        printf("  faults (CP-%d): cp-local-dsa log-probs %.2e; skip-dkv-reduce grad %.2e (rank 0) log-probs %.2e; "
               "skip-grad-finalize grad %.2e (full) %.2e (detached) log-probs %.2e\n",
               world_, lc, ea, la, eb, eb2, lb);
    outcome_free(&one), outcome_free(&oned), outcome_free(&a), outcome_free(&b), outcome_free(&b2),
        outcome_free(&c);
}

int main(int argc, char **argv) {
    ls_comm *comm = NULL;
    char err[256];
    if (ls_comm_open(&comm, &argc, &argv, err, sizeof err) != LS_OK) {
        fprintf(stderr, "test_mla_cp_train: %s\n", err);
        return 2;
    }
    grp = ls_comm_cp(comm);
    rank_ = ls_comm_rank(comm);
    world_ = ls_comm_world(comm);
    if (rank_ == 0) printf("test_mla_cp_train: %d rank(s), backend %s\n", world_, ls_comm_backend(comm));
    size_t R1[] = {5, 3, 7}, R2[] = {6}, R3[] = {2, 9};
    check_clean(LS_TRAIN_LORA, LS_GRAD_FULL, 30, 3, R1);     /* 29 positions: uneven for 2 and 4 */
    check_clean(LS_TRAIN_LORA, LS_GRAD_FULL, 23, 1, R2);     /* G = 1; 22 positions */
    check_clean(LS_TRAIN_FULL, LS_GRAD_FULL, 23, 2, R3);     /* every tensor trainable */
    check_clean(LS_TRAIN_LORA, LS_GRAD_DETACHED, 30, 3, R1);
    check_clean(LS_TRAIN_FULL, LS_GRAD_DETACHED, 23, 2, R3);
    check_two_steps(26);
    if (world_ > 1) check_faults();
    int64_t tot = failures;
    ls_group_allreduce_sum(grp, &tot, 1, LS_TRACE_DTYPE_I64, "test_result", -1);
    if (rank_ == 0) printf("test_mla_cp_train: %s (%lld failure(s) over %d rank(s))\n", tot ? "FAILED" : "ok", (long long)tot, world_);
    ls_comm_close(comm);
    return tot ? 1 : 0;
}
