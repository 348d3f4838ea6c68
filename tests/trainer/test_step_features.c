/* test_step_features.c - the step's reference-policy order, beta 0,
 * supplied reference log-probs, the SFT objective, prefix-frozen reuse, the
 * step metrics and the step guard's non-finite figure (float64).
 *
 * Independent references: the GRPO objective and its clip branches written
 * out again in tests/trainer/test_hybrid_util.h (not the loss kernel), full-sequence
 * log-probs from position 0 (no capture, no carried state) for the SFT
 * cross-entropy, and the memory tracker's category peaks for the one-state
 * claim. */
#include "tests/trainer/test_hybrid_util.h"

#include "receipts/format/trace_step_metrics.h"
#include "trainer/step/grpo_stats.h"
#include "trainer/base/mem_tracker.h"

static ls_step_options opts(void) {
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.page_size = 16;
    o.capture_chunk = 13;
    o.G = 4;
    o.R = 6;
    return o;
}

static ls_status step(ls_params *p, ls_batch *b, const ls_task *t, const ls_step_options *o, ls_step_prefix *pf,
                      ls_step_result *res) {
    char err[256] = "";
    ls_status st = K(ls_step_grads_prefix)(p, b, t, o, NULL, pf, res, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s", err);
    return st;
}

/* Old log-probs off the policy by +-0.3 (so that ratios leave the clip
 * range both ways), supplied. */
static void perturb_old(ls_params *p, ls_batch *b) {
    ls_step_options o = opts();
    ls_step_result r;
    b->old_supplied = 0;
    step(p, b, NULL, &o, NULL, &r); /* scores old = policy */
    ls_rng g;
    ls_rng_seed(&g, 99);
    for (size_t i = 0; i < b->G; i++)
        for (size_t t = 0; t < b->R[i]; t++) b->old_lp[i][t] = fmin(b->old_lp[i][t] + 0.6 * (ls_rng_uniform(&g) - 0.5), 0);
    b->old_supplied = 1;
}

Test(step_features, metrics_match_the_objective_written_out) {
    size_t R[4] = {5, 7, 6, 4};
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 5);
    jitter_trainable(p, 0.05, 6); /* the policy leaves the reference: KL != 0 */
    ls_batch *b = make_batch(40, 4, R, 7);
    perturb_old(p, b);
    ls_step_options o = opts();
    ls_step_result r;
    step(p, b, NULL, &o, NULL, &r);
    /* independently: full-sequence log-probs and the objective of docs/model.md §4 */
    double loss = 0, kl = 0, lo = INFINITY, hi = 0, rsum = 0;
    size_t n = 0, clipped = 0;
    for (size_t i = 0; i < b->G; i++) {
        double lp[16];
        full_sequence_logprobs(p, b, i, lp);
        clip_counts cc = {0};
        loss += grpo_member(lp, b->old_lp[i], b->ref_lp[i], b->adv[i], p->obj.epsilon, p->obj.beta, b->G, b->R[i],
                            NULL, &cc);
        clipped += cc.clipped_pos + cc.clipped_neg;
        for (size_t t = 0; t < b->R[i]; t++, n++) {
            double rho = exp(lp[t] - b->old_lp[i][t]), dr = b->ref_lp[i][t] - lp[t];
            kl += exp(dr) - dr - 1;
            lo = fmin(lo, rho);
            hi = fmax(hi, rho);
            rsum += rho;
        }
    }
    cr_log_info("loss %.6f = policy %.6f + kl %.6f; clip %.3f, kl mean %.3g, ratio %.3f..%.3f", r.loss, r.loss_policy,
                r.loss_kl, r.clip_fraction, r.kl_mean, r.ratio_min, r.ratio_max);
    cr_expect(fabs(r.loss - loss) < 1e-10, "loss %.15g, written out %.15g", r.loss, loss);
    cr_expect(fabs(r.loss_policy + r.loss_kl - loss) < 1e-10, "parts %.15g + %.15g vs %.15g", r.loss_policy,
              r.loss_kl, loss);
    cr_expect_gt(r.loss_kl, 0);
    cr_expect(fabs(r.kl_mean - kl / (double)n) < 1e-10, "kl mean %.15g vs %.15g", r.kl_mean, kl / (double)n);
    cr_expect(fabs(r.clip_fraction - (double)clipped / (double)n) < 1e-12, "clip %g vs %zu/%zu", r.clip_fraction,
              clipped, n);
    cr_expect_gt(clipped, 0, "the perturbation clips some tokens");
    cr_expect(fabs(r.ratio_min - lo) < 1e-10 && fabs(r.ratio_max - hi) < 1e-10, "ratio %g..%g vs %g..%g", r.ratio_min,
              r.ratio_max, lo, hi);
    cr_expect(fabs(r.ratio_mean - rsum / (double)n) < 1e-10);
    cr_expect_eq(r.tokens, 22);
    cr_expect(fabs(r.response_len_mean - 5.5) < 1e-15);
    double m, sd, mn, mx;
    ls_stats_moments(b->rewards, b->G, &m, &sd, &mn, &mx);
    cr_expect(r.reward_mean == m && r.reward_std == sd && r.reward_min == mn && r.reward_max == mx);
    cr_expect(fabs(r.adv_mean) < 1e-12, "advantages are centred: %g", r.adv_mean);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

/* One prompt state at a time: the tracker's prompt_state peak is one
 * state's bytes, scoring holds no state, and the reference was scored. */
static void expect_one_state(const ls_step_result *r, const char *what) {
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.peak_bytes[LS_MEM_PROMPT_STATE], r->prompt_state_analytical,
                 "%s: prompt_state peak %zu B, one state %zu B", what, s.peak_bytes[LS_MEM_PROMPT_STATE],
                 r->prompt_state_analytical);
    cr_expect_lt(s.peak_bytes[LS_MEM_SCORE], r->prompt_state_analytical / 4, "%s: scoring peak %zu B", what,
                 s.peak_bytes[LS_MEM_SCORE]);
}

static size_t rollout_scoring_peak(ls_params *p, size_t P) {
    ls_step_options o = opts();
    ls_step_result r;
    ls_task t;
    cr_assert_eq(ls_task_make(&t, P, 6, 3), LS_OK);
    ls_batch *bt = NULL;
    cr_assert_eq(ls_batch_alloc(&bt, 3), LS_OK);
    cr_assert_eq(ls_batch_set_prompt(bt, t.prompt, t.P), LS_OK);
    o.G = 3;
    ls_mem_reset_peaks();
    step(p, bt, &t, &o, NULL, &r);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.peak_bytes[LS_MEM_PROMPT_STATE], r.prompt_state_analytical,
                 "rolled out, P=%zu: prompt_state peak %zu B, one state %zu B", P, s.peak_bytes[LS_MEM_PROMPT_STATE],
                 r.prompt_state_analytical);
    cr_expect_eq(r.captures, 3);
    cr_expect(r.has_reward_parts);
    cr_expect(fabs(r.reward_retrieval + r.reward_format - r.reward_mean) < 1e-12);
    ls_batch_free(bt);
    ls_task_free(&t);
    return s.peak_bytes[LS_MEM_SCORE];
}

Test(step_features, reference_policy_never_beside_the_policy_state) {
    size_t R[3] = {6, 6, 6};
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_FULL, 8);
    jitter_trainable(p, 0.05, 9);
    ls_step_options o = opts();
    ls_step_result r;
    /* known responses: reference first, then the policy (two captures) */
    ls_batch *b = make_batch(120, 3, R, 10);
    ls_mem_reset_peaks();
    step(p, b, NULL, &o, NULL, &r);
    expect_one_state(&r, "known responses");
    cr_expect_eq(r.captures, 2);
    cr_expect(r.used_reference);
    double with_ref = r.loss;
    /* the reference's log-probs differ from the policy's (KL > 0), so they were really scored */
    cr_expect_gt(r.kl_mean, 0);
    /* rolled out: policy, reference, policy again (three captures), still one
     * state; scoring holds the decode forks (recurrent state and a page per
     * member), not a prompt state: the same at 4x the prompt */
    size_t sc1 = rollout_scoring_peak(p, 120), sc4 = rollout_scoring_peak(p, 480);
    cr_log_info("rolled out: scoring peak %zu B at P=120, %zu B at P=480", sc1, sc4);
    cr_expect_eq(sc1, sc4);
    /* the same batch with beta = 0: no reference at all, one capture */
    b->old_supplied = 0;
    p->obj.beta = 0;
    step(p, b, NULL, &o, NULL, &r);
    cr_expect_eq(r.captures, 1);
    cr_expect(!r.used_reference);
    cr_expect_eq(r.loss_kl, 0);
    cr_expect_eq(r.kl_mean, 0);
    for (size_t i = 0; i < b->G; i++)
        cr_expect_arr_eq(b->ref_lp[i], b->old_lp[i], b->R[i] * sizeof(double), "beta 0: ref rows are the old rows");
    cr_expect_neq(r.loss, with_ref);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(step_features, supplied_reference_logprobs_are_used_not_recomputed) {
    size_t R[3] = {5, 5, 5};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 11);
    ls_batch *b = make_batch(50, 3, R, 12);
    ls_step_options o = opts();
    ls_step_result r1, r2;
    step(p, b, NULL, &o, NULL, &r1);
    cr_expect(r1.used_reference);
    /* supply reference rows 0.5 below the policy's: KL known, no reference capture */
    for (size_t i = 0; i < b->G; i++) {
        double lp[8];
        full_sequence_logprobs(p, b, i, lp);
        for (size_t t = 0; t < b->R[i]; t++) b->ref_lp[i][t] = lp[t] - 0.5;
    }
    b->ref_supplied = 1;
    b->old_supplied = 1;
    step(p, b, NULL, &o, NULL, &r2);
    cr_expect_eq(r2.captures, 1);
    cr_expect(!r2.used_reference);
    double want = exp(-0.5) + 0.5 - 1; /* k3 at ref - logp = -0.5 */
    cr_expect(fabs(r2.kl_mean - want) < 1e-9, "kl mean %.12g, want %.12g", r2.kl_mean, want);
    cr_expect(fabs(r2.loss_kl - p->obj.beta * want) < 1e-9);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(step_features, sft_loss_is_the_weighted_cross_entropy_of_the_answers) {
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_FULL, 13);
    ls_task t;
    cr_assert_eq(ls_task_make(&t, 400, 6, 4), LS_OK);
    cr_assert_gt(t.n_pairs, 2);
    int32_t *seq;
    double *w;
    size_t n;
    cr_assert_eq(ls_task_sft_target(&t, 0, &seq, &w, &n), LS_OK);
    cr_expect_eq(n, ls_task_sft_len(LS_TASK_RETRIEVAL, 400, 6, 0));
    cr_expect_arr_eq(seq, t.answer, 6 * sizeof *seq, "the target starts with the queried answer");
    /* another order holds the same queries and answers, each once, the queried one first */
    int32_t *seq2;
    double *w2;
    size_t n2;
    cr_assert_eq(ls_task_sft_target(&t, 12345, &seq2, &w2, &n2), LS_OK);
    cr_assert_eq(n2, n);
    cr_expect_arr_eq(seq2, t.answer, 6 * sizeof *seq2);
    long sum1 = 0, sum2 = 0;
    int same_order = 1;
    for (size_t i = 0; i < n; i++) {
        sum1 += (long)seq[i] * (long)seq[i];
        sum2 += (long)seq2[i] * (long)seq2[i];
        same_order &= seq[i] == seq2[i];
    }
    cr_expect_eq(sum1, sum2, "the same bytes");
    cr_expect(!same_order, "another order");
    ls_mem_free(seq2);
    ls_mem_free(w2);
    /* independently: the full sequence prompt + target from position 0 */
    ls_batch *fb = NULL;
    cr_assert_eq(ls_batch_alloc(&fb, 1), LS_OK);
    cr_assert_eq(ls_batch_set_prompt(fb, t.prompt, t.P), LS_OK);
    cr_assert_eq(ls_batch_set_response(fb, 0, seq, n), LS_OK);
    double *lp = malloc(n * sizeof *lp), ce = 0, wsum = 0;
    full_sequence_logprobs(p, fb, 0, lp);
    for (size_t i = 0; i < n; i++) {
        ce -= w[i] * lp[i];
        wsum += w[i];
        /* the weights mark exactly the digits */
        cr_expect_eq(w[i] == 1, seq[i] >= '0' && seq[i] <= '9', "weight %g on byte %d at %zu", w[i], seq[i], i);
    }
    cr_expect_eq(wsum, (double)(6 * t.n_pairs));
    ls_batch *b = NULL; /* G = 1: one branch, in prompt order */
    cr_assert_eq(ls_batch_alloc(&b, 1), LS_OK);
    cr_assert_eq(ls_batch_set_prompt(b, t.prompt, t.P), LS_OK);
    ls_step_options o = opts();
    o.objective = LS_OBJECTIVE_SFT;
    o.G = 1;
    ls_step_result r;
    step(p, b, &t, &o, NULL, &r);
    cr_expect(fabs(r.loss - ce / wsum) < 1e-10, "sft loss %.15g, full sequence %.15g", r.loss, ce / wsum);
    cr_expect_eq(r.captures, 1, "sft has no reference policy");
    cr_expect_eq(r.tokens, (int64_t)n);
    cr_expect_gt(r.grad_norm, 0);
    free(lp);
    ls_mem_free(seq);
    ls_mem_free(w);
    ls_batch_free(fb);
    ls_batch_free(b);
    ls_task_free(&t);
    K(ls_params_free)(p);
}

static double *prefix_run(ls_params *p, const ls_task *t, ls_step_prefix *pf, ls_step_result *r) {
    ls_batch *b = NULL;
    cr_assert_eq(ls_batch_alloc(&b, 3), LS_OK);
    cr_assert_eq(ls_batch_set_prompt(b, t->prompt, t->P), LS_OK);
    ls_step_options o = opts();
    o.G = 3;
    step(p, b, t, &o, pf, r);
    ls_batch_free(b);
    return grads_of(p);
}

Test(step_features, prefix_frozen_reuses_the_capture_and_goes_stale) {
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 14);
    ls_task t;
    cr_assert_eq(ls_task_make(&t, 100, 6, 5), LS_OK);
    ls_step_prefix pf = {0};
    ls_step_result r0, r1, rf;
    double *g0 = prefix_run(p, &t, &pf, &r0);
    cr_expect(!r0.prefix_frozen);
    cr_expect(pf.have_ps && pf.have_rps, "the prefix keeps both states");
    /* no update in between: the kept state is exact, the step equals a fresh one bit for bit */
    double *g1 = prefix_run(p, &t, &pf, &r1);
    cr_expect(r1.prefix_frozen);
    cr_expect_eq(r1.captures, 0, "a prefix-frozen step captures nothing");
    double *gf = prefix_run(p, &t, NULL, &rf);
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += p->t[i].trainable ? p->t[i].numel : 0;
    cr_expect_arr_eq(g1, gf, n * sizeof *g1, "unchanged parameters: reused state = fresh capture");
    /* after an update the kept state is stale: the step differs from a fresh one */
    ls_step_options o = opts();
    o.lr = 1e-2;
    K(ls_step_optimizer)(p, &o, 1);
    free(g1);
    free(gf);
    g1 = prefix_run(p, &t, &pf, &r1);
    gf = prefix_run(p, &t, NULL, &rf);
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(g1[i] - gf[i]));
    cr_log_info("stale vs fresh: largest gradient difference %.3g", d);
    cr_expect_gt(d, 1e-9, "a stale state gives another gradient");
    /* the naive strategy and full gradients refuse a prefix */
    ls_batch *b = NULL;
    cr_assert_eq(ls_batch_alloc(&b, 3), LS_OK);
    cr_assert_eq(ls_batch_set_prompt(b, t.prompt, t.P), LS_OK);
    char err[256] = "";
    o = opts();
    o.strategy = LS_STRATEGY_NAIVE;
    cr_expect_eq(K(ls_step_grads_prefix)(p, b, &t, &o, NULL, &pf, &rf, err, sizeof err), LS_ERR_ARG);
    cr_expect(strstr(err, "prefix-frozen") != NULL, "%s", err);
    free(g0);
    free(g1);
    free(gf);
    ls_batch_free(b);
    K(ls_step_prefix_free)(&pf);
    ls_task_free(&t);
    K(ls_params_free)(p);
}

/* ---- the step guard's question (ls_step_result_nonfinite) ---------------- */

/* Every figure the guard looks at, by hand (not the module's table). */
typedef struct {
    const char *name;
    double *v;
} figure_ref;

static size_t result_figures(ls_step_result *r, figure_ref *f) {
    figure_ref all[] = {
        {"reward_mean", &r->reward_mean}, {"reward_std", &r->reward_std}, {"reward_min", &r->reward_min},
        {"reward_max", &r->reward_max}, {"reward_retrieval", &r->reward_retrieval},
        {"reward_format", &r->reward_format}, {"adv_mean", &r->adv_mean}, {"adv_std", &r->adv_std},
        {"loss", &r->loss}, {"loss_policy", &r->loss_policy}, {"loss_kl", &r->loss_kl}, {"kl_mean", &r->kl_mean},
        {"clip_fraction", &r->clip_fraction}, {"ratio_min", &r->ratio_min}, {"ratio_mean", &r->ratio_mean},
        {"ratio_max", &r->ratio_max}, {"response_len_mean", &r->response_len_mean}, {"grad_norm", &r->grad_norm},
    };
    memcpy(f, all, sizeof all);
    return sizeof all / sizeof all[0];
}

static ls_step_result finite_result(void) {
    ls_step_result r;
    memset(&r, 0, sizeof r);
    figure_ref f[32];
    size_t n = result_figures(&r, f);
    for (size_t i = 0; i < n; i++) *f[i].v = 0.5 + (double)i;
    r.has_reward_parts = 1;
    return r;
}

Test(step_features, guard_names_each_nonfinite_figure_in_event_order) {
    ls_step_result r = finite_result();
    double v = 7;
    cr_expect_null(ls_step_result_nonfinite(&r, &v), "every figure finite");
    cr_expect_eq(v, 7, "*value untouched when nothing is named");
    const double bad[3] = {INFINITY, -INFINITY, NAN};
    figure_ref f[32];
    size_t n = result_figures(&r, f);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            r = finite_result();
            result_figures(&r, f);
            *f[i].v = bad[k];
            const char *got = ls_step_result_nonfinite(&r, &v);
            cr_expect(got && !strcmp(got, f[i].name), "%s = %g: named %s", f[i].name, bad[k], got ? got : "nothing");
            cr_expect(isnan(bad[k]) ? isnan(v) : v == bad[k], "%s: value %g", f[i].name, v);
            cr_expect_not_null(ls_step_result_nonfinite(&r, NULL), "value may be NULL");
            /* the parts are no figure of a step without them */
            r.has_reward_parts = 0;
            got = ls_step_result_nonfinite(&r, NULL);
            if (!strcmp(f[i].name, "reward_retrieval") || !strcmp(f[i].name, "reward_format"))
                cr_expect_null(got, "%s looked at without has_reward_parts", f[i].name);
            else cr_expect(got && !strcmp(got, f[i].name));
        }
    /* two bad figures: the first in the event's order is named */
    r = finite_result();
    r.kl_mean = INFINITY;
    r.reward_std = NAN;
    r.grad_norm = INFINITY;
    cr_expect_str_eq(ls_step_result_nonfinite(&r, NULL), "reward_std");
}

/* The guard covers every number of the step_metrics event the step computes:
 * each numeric key of the event object (receipts' builder, not this list) is
 * a figure above, or the trainer's own (step, tokens, lr, the timings). */
Test(step_features, guard_covers_every_figure_of_the_step_metrics_event) {
    ls_trace_step_metrics t;
    memset(&t, 0, sizeof t);
    t.has_reward_parts = true;
    t.ratio_min = t.ratio_mean = t.ratio_max = 1;
    cJSON *o = NULL;
    cr_assert_eq(ls_trace_step_metrics_to_json(&t, &o), LS_OK);
    ls_step_result r = finite_result();
    figure_ref f[32];
    size_t n = result_figures(&r, f), seen = 0;
    static const char *const trainer_own[] = {"step", "tokens", "lr", "step_wall_s"};
    for (const cJSON *c = o->child; c; c = c->next) {
        if (!cJSON_IsNumber(c)) continue;
        int own = 0, found = 0;
        for (size_t k = 0; k < 4; k++) own |= !strcmp(c->string, trainer_own[k]);
        for (size_t i = 0; i < n; i++) found |= !strcmp(c->string, f[i].name);
        cr_expect(own || found, "step_metrics.%s is no figure the guard looks at", c->string);
        seen += found;
    }
    cr_expect_eq(seen, n, "%zu of the guard's %zu figures are numbers of the event", seen, n);
    cJSON_Delete(o);
}

/* A real step on overflowing rewards: every reward finite, their spread
 * not; the step itself succeeds (its advantages and loss are finite), and
 * the guard names reward_std. */
Test(step_features, overflowing_rewards_are_named_by_the_guard) {
    size_t R[4] = {3, 2, 4, 2};
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 5);
    ls_batch *b = make_batch(24, 4, R, 7);
    const double rw[4] = {1e308, -1e308, 1e308, -1e308};
    memcpy(b->rewards, rw, sizeof rw);
    ls_step_options o = opts();
    ls_step_result r;
    step(p, b, NULL, &o, NULL, &r);
    cr_expect(isfinite(r.loss) && isfinite(r.grad_norm), "loss %g, grad norm %g", r.loss, r.grad_norm);
    double v = 0;
    const char *got = ls_step_result_nonfinite(&r, &v);
    cr_expect(got && !strcmp(got, "reward_std"), "named %s", got ? got : "nothing");
    cr_expect(isinf(v), "reward_std %g", v);
    ls_batch_free(b);
    K(ls_params_free)(p);
}
