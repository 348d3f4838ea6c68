/* test_cp_checks.h - the family-independent checks of the multi-rank
 * training tests (test_cp: hybrid, test_mla_cp_train: mla), included after
 * test_mpi_harness.h by a program that defines, for its family:
 *   CP_TEST_CONFIG        the model config under LS_SOURCE_DIR ("/configs/hybrid-tiny.json")
 *   CP_TEST_LORA_EXPERTS  1: LoRA trains the routed experts' adapters too (mla)
 *   CP_TEST_DETACHED_SHARD_LOCAL 1: part of the response gradient is shard-local
 *                         in detached mode too (mla: kv_b), so skip-grad-finalize
 *                         breaks it; 0: detached mode has nothing to finalize
 *   size_t cp_test_shard_bytes(const ls_params *, int64_t n): the analytical
 *                         carried-state bytes of a shard of n positions
 * and K(x) = LS_K(x).  Here: make_params, make_batch, run (one step's
 * gradients, log-probs, loss and digest verdict on one rank or over a CP
 * group, with faults) and the checks.  check_clean: CP-N against CP-1 (and, in full mode,
 * the naive full sequence) at TOL, gradients bitwise equal across ranks,
 * N = 1 bitwise the single-rank path; check_two_steps: the parameters
 * bitwise equal on every rank after two optimizer steps; check_grad_faults:
 * the faults of the gradient reductions, each detected. */
#ifndef LS_TEST_CP_CHECKS_H
#define LS_TEST_CP_CHECKS_H
#include "trainer/base/rng.h"
#include "trainer/step/step.h"
#include "trainer/families/families.h"

static ls_params *make_params(ls_train_mode mode, ls_grad_mode gm) {
    ls_model_config c;
    char err[256];
    if (ls_config_load(&c, LS_SOURCE_DIR CP_TEST_CONFIG, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.grad_mode = gm;
    o.lora_experts = CP_TEST_LORA_EXPERTS && mode == LS_TRAIN_LORA;
    o.lora_init_random = 1;
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
        size_t an = cp_test_shard_bytes(p, s1 - s0);
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

/* What check_grad_faults measured (relative to CP-1), for the family's report line. */
typedef struct {
    double dkv_grad, dkv_lp;          /* skip-dkv-reduce: gradient, log-probs */
    double fin_grad, fin_lp, fin_det; /* skip-grad-finalize: full-mode gradient, log-probs; detached gradient */
} grad_faults;

/* skip-dkv-reduce and skip-grad-finalize (R over G members, P positions)
 * against CP-1 in full (one) and detached (oned) mode: each breaks the
 * gradients (asserted to fail) and the digest agreement, not the log-probs;
 * skip-grad-finalize in detached mode as CP_TEST_DETACHED_SHARD_LOCAL says. */
static grad_faults check_grad_faults(const outcome *one, const outcome *oned, size_t P, size_t G, const size_t *R) {
    grad_faults r;
    /* skip-dkv-reduce: every rank but the owner of the response keys continues with zero response
       dK/dV; through the dq sum of the earlier layers the owner's gradient is wrong too */
    ls_cp_faults f = {.skip_dkv_reduce = 1};
    outcome a = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    r.dkv_grad = rel(a.g, oned->g, oned->ng), r.dkv_lp = rel(a.lp, oned->lp, oned->nlp);
    CHECK(r.dkv_grad > 1e-6, "skip-dkv-reduce: gradient vs CP-1 rel %.3e on rank %d should fail", r.dkv_grad, rank_);
    CHECK(r.dkv_lp <= TOL, "skip-dkv-reduce: log-probs should still match (rel %.3e)", r.dkv_lp);
    CHECK(!a.agree, "skip-dkv-reduce: the digest check should see the ranks disagree");
    /* skip-grad-finalize (full mode): the shard-local sums are missing */
    f = (ls_cp_faults){.skip_grad_finalize = 1};
    outcome b = run(LS_TRAIN_LORA, LS_GRAD_FULL, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    r.fin_grad = rel(b.g, one->g, one->ng), r.fin_lp = rel(b.lp, one->lp, one->nlp);
    CHECK(r.fin_grad > 1e-6, "skip-grad-finalize: gradient vs CP-1 rel %.3e should fail", r.fin_grad);
    CHECK(r.fin_lp <= TOL, "skip-grad-finalize: log-probs should still match (rel %.3e)", r.fin_lp);
    CHECK(!b.agree, "skip-grad-finalize: the digest check should see the ranks disagree");
    outcome b2 = run(LS_TRAIN_LORA, LS_GRAD_DETACHED, P, G, R, LS_STRATEGY_LONGSTRAW, grp, &f);
    r.fin_det = rel(b2.g, oned->g, oned->ng);
    if (CP_TEST_DETACHED_SHARD_LOCAL)
        CHECK(r.fin_det > 1e-6 && !b2.agree,
              "skip-grad-finalize, detached: rel %.3e agree %d (shard-local gradients: should fail)", r.fin_det,
              b2.agree);
    else
        CHECK(r.fin_det <= TOL && b2.agree,
              "skip-grad-finalize, detached: rel %.3e agree %d (nothing shard-local: should be clean)", r.fin_det,
              b2.agree);
    outcome_free(&a), outcome_free(&b), outcome_free(&b2);
    return r;
}

#endif
