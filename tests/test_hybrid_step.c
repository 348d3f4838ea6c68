/* test_hybrid_step.c - the hybrid family on one rank, float64:
 *  - LongStraw `full` gradient == naive full-sequence gradient (both trainable
 *    sets, several prompt lengths / group sizes / unequal response lengths);
 *  - `detached` == the stop-gradient naive variant, and != `full`;
 *  - whole-model gradient against central finite differences;
 *  - scored log-probs == full-sequence log-probs; decode == one forward;
 *  - branch-graph peak independent of G; prompt-state bytes == analytical. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer/params_io.h"
#include "trainer/rng.h"
#include <unistd.h>
#include "trainer/step.h"

#define K(x) LS_K(x)

static ls_model_config tiny_cfg(void) {
    ls_model_config c;
    char err[256];
    cr_assert_eq(ls_config_load(&c, LS_SOURCE_DIR "/configs/hybrid-tiny.json", err, sizeof err), LS_OK, "%s", err);
    return c;
}

/* A batch with random prompt/responses (lengths given), rewards and, when
 * old_from != NULL, old log-probs copied from it. */
static ls_batch *make_batch(size_t P, size_t G, const size_t *R, uint64_t seed) {
    ls_batch *b = NULL;
    cr_assert_eq(ls_batch_alloc(&b, G), LS_OK);
    ls_rng r;
    ls_rng_seed(&r, seed);
    int32_t ids[4096];
    for (size_t i = 0; i < P; i++) ids[i] = (int32_t)ls_rng_below(&r, 256);
    cr_assert_eq(ls_batch_set_prompt(b, ids, P), LS_OK);
    for (size_t g = 0; g < G; g++) {
        for (size_t t = 0; t < R[g]; t++) ids[t] = (int32_t)ls_rng_below(&r, 256);
        cr_assert_eq(ls_batch_set_response(b, g, ids, R[g]), LS_OK);
        b->rewards[g] = ls_rng_uniform(&r);
    }
    return b;
}

static ls_params *make_params(ls_train_mode mode, ls_grad_mode gm, uint64_t seed) {
    ls_model_config c = tiny_cfg();
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.grad_mode = gm;
    o.lora_init_random = 1;
    ls_params *p = NULL;
    char err[256];
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, seed, err, sizeof err), LS_OK, "%s", err);
    return p;
}

/* Gradient of every trainable tensor, flattened. */
static double *grads_of(const ls_params *p) {
    double *g = malloc(p->n_trainable * sizeof *g);
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) g[k++] = p->t[i].g[j];
    return g;
}

/* max_i |a-b| / max_i |b|, and per-tensor worst relative error. */
static double rel_err(const ls_params *p, const double *a, const double *b, double *worst_tensor,
                      char *worst_name) {
    double num = 0, den = 0;
    size_t k = 0;
    *worst_tensor = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!p->t[i].trainable) continue;
        double tn = 0, td = 0;
        for (size_t j = 0; j < p->t[i].numel; j++, k++) {
            tn = fmax(tn, fabs(a[k] - b[k]));
            td = fmax(td, fabs(b[k]));
        }
        num = fmax(num, tn);
        den = fmax(den, td);
        if (td > 0 && tn / td > *worst_tensor) {
            *worst_tensor = tn / td;
            snprintf(worst_name, 96, "%s", p->t[i].name);
        }
    }
    return num / den;
}

static double *run_grads(ls_params *p, ls_batch *b, ls_strategy s, ls_step_result *res) {
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.strategy = s;
    o.page_size = 16;
    o.capture_chunk = 13; /* several capture segments, not aligned with the pages */
    char err[256] = "";
    cr_assert_eq(K(ls_step_grads)(p, b, NULL, &o, NULL, res, err, sizeof err), LS_OK, "%s", err);
    return grads_of(p);
}

static void check_full_vs_naive(ls_train_mode mode, size_t P, size_t G, const size_t *R) {
    ls_params *p = make_params(mode, LS_GRAD_FULL, 7 + P);
    ls_batch *b = make_batch(P, G, R, 100 + P + G);
    ls_step_result rl, rn;
    double *gl = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &rl);
    b->old_supplied = 1; /* the same old log-probs for both */
    double *gn = run_grads(p, b, LS_STRATEGY_NAIVE, &rn);
    double wt;
    char wn[96] = "";
    double e = rel_err(p, gl, gn, &wt, wn);
    cr_log_info("full vs naive (%s, P=%zu, G=%zu): rel err %.3e, worst tensor %s %.3e, loss %.12f vs %.12f",
                mode == LS_TRAIN_LORA ? "lora" : "full", P, G, e, wn, wt, rl.loss, rn.loss);
    cr_expect_lt(e, 1e-10, "full gradient differs from naive: %.3e (worst %s %.3e)", e, wn, wt);
    cr_expect_lt(fabs(rl.loss - rn.loss), 1e-12 * fmax(1, fabs(rn.loss)));
    double gmax = 0;
    for (size_t i = 0; i < p->n_trainable; i++) gmax = fmax(gmax, fabs(gn[i]));
    cr_expect_gt(gmax, 0, "naive gradient is zero: the comparison would be vacuous");
    free(gl);
    free(gn);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(hybrid_step, full_equals_naive_lora) {
    size_t R1[] = {5, 3, 7};
    check_full_vs_naive(LS_TRAIN_LORA, 37, 3, R1);
    size_t R2[] = {2, 9};
    check_full_vs_naive(LS_TRAIN_LORA, 70, 2, R2);
    size_t R3[] = {1, 4, 4, 6};
    check_full_vs_naive(LS_TRAIN_LORA, 18, 4, R3);
}

Test(hybrid_step, full_equals_naive_fullmode) {
    size_t R1[] = {4, 6, 3};
    check_full_vs_naive(LS_TRAIN_FULL, 41, 3, R1);
    size_t R2[] = {5, 2};
    check_full_vs_naive(LS_TRAIN_FULL, 19, 2, R2);
}

Test(hybrid_step, detached_equals_stopgrad_naive_and_differs_from_full) {
    size_t R[] = {4, 6, 3};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 3);
    ls_batch *b = make_batch(45, 3, R, 9);
    ls_step_result r1, r2, r3;
    double *gd = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &r1);
    b->old_supplied = 1;
    double *gn = run_grads(p, b, LS_STRATEGY_NAIVE, &r2);
    p->obj.grad_mode = LS_GRAD_FULL;
    double *gf = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &r3);
    double wt;
    char wn[96] = "";
    double e = rel_err(p, gd, gn, &wt, wn);
    double diff = rel_err(p, gd, gf, &wt, wn);
    cr_log_info("detached vs stop-grad naive: %.3e; detached vs full: %.3e", e, diff);
    cr_expect_lt(e, 1e-10, "detached differs from the stop-gradient naive gradient: %.3e", e);
    cr_expect_gt(diff, 1e-3, "detached gradient equals the full gradient (%.3e): the prompt state "
                 "gradient is not flowing", diff);
    free(gd);
    free(gn);
    free(gf);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(hybrid_step, gradient_matches_finite_differences) {
    size_t R[] = {3, 4};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_FULL, 11);
    ls_batch *b = make_batch(21, 2, R, 5);
    ls_step_result res;
    double *g = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &res);
    /* hold old log-probs fixed at slightly different values so ratios != 1 */
    for (size_t i = 0; i < b->G; i++)
        for (size_t t = 0; t < b->R[i]; t++) b->old_lp[i][t] += 0.05 * (double)((t + i) % 3) - 0.05;
    b->old_supplied = 1;
    free(g);
    g = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &res);
    const char *names[] = {"layers.3.attn.k.lora_A", "layers.0.gdn.in_qkv.lora_B", "layers.7.mlp.down.lora_A",
                           "layers.1.gdn.out.lora_B", "layers.7.attn.q.lora_B", "layers.4.gdn.in_z.lora_A"};
    double worst = 0;
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        ls_tensor *t = K(ls_params_find)(p, names[n]);
        cr_assert_not_null(t, "%s", names[n]);
        size_t off = 0;
        for (size_t i = 0; i < p->n && &p->t[i] != t; i++)
            if (p->t[i].trainable) off += p->t[i].numel;
        for (size_t j = 0; j < t->numel; j += t->numel / 3 + 1) {
            double h = 1e-5, w0 = t->w[j], lp, lm;
            ls_step_result r2;
            t->w[j] = w0 + h;
            free(run_grads(p, b, LS_STRATEGY_LONGSTRAW, &r2));
            lp = r2.loss;
            t->w[j] = w0 - h;
            free(run_grads(p, b, LS_STRATEGY_LONGSTRAW, &r2));
            lm = r2.loss;
            t->w[j] = w0;
            double fd = (lp - lm) / (2 * h), an = g[off + j];
            double e = fabs(fd - an) / fmax(1e-6, fmax(fabs(fd), fabs(an)));
            worst = fmax(worst, e);
            cr_expect_lt(e, 1e-5, "%s[%zu]: analytic %.10e vs finite difference %.10e", names[n], j, an, fd);
        }
    }
    cr_log_info("whole-model FD worst relative error %.3e", worst);
    free(g);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(hybrid_step, scoring_equals_full_sequence_and_decode_equals_forward) {
    size_t R[] = {6};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 5);
    ls_batch *b = make_batch(50, 1, R, 77);
    ls_hstate ps;
    cr_assert_eq(K(ls_capture)(p, b, 16, 11, &ps, NULL, LS_MEM_PROMPT_STATE, NULL, NULL), LS_OK);
    double lp_branch[6], lp_full[6];
    cr_assert_eq(K(ls_score_member)(p, &ps, b, 0, lp_branch, NULL, NULL), LS_OK);
    /* full sequence forward, scoring the last R positions */
    int32_t seq[64];
    memcpy(seq, b->prompt, 50 * sizeof *seq);
    memcpy(seq + 50, b->resp[0], 5 * sizeof *seq);
    ls_real lp[6];
    ls_seg_io io = {.tokens = seq, .T = 55, .targets = b->resp[0], .score_from = 49, .logp = lp};
    cr_assert_eq(K(ls_segment_forward)(p, &io), LS_OK);
    double worst = 0;
    for (int t = 0; t < 6; t++) {
        lp_full[t] = lp[t];
        worst = fmax(worst, fabs(lp_full[t] - lp_branch[t]));
    }
    cr_expect_lt(worst, 1e-12, "branch scoring vs full sequence: %.3e", worst);
    /* token-by-token decode: the log-prob of each sampled token equals scoring it */
    int32_t out[8];
    double lp_dec[8], lp_sc[8];
    cr_assert_eq(K(ls_rollout_member)(p, &ps, b->prompt[49], 8, 1.0, 1.0, 42, out, lp_dec), LS_OK);
    size_t R8[] = {8};
    ls_batch *b2 = make_batch(50, 1, R8, 77);
    cr_assert_eq(ls_batch_set_response(b2, 0, out, 8), LS_OK);
    cr_assert_eq(K(ls_score_member)(p, &ps, b2, 0, lp_sc, NULL, NULL), LS_OK);
    double wd = 0;
    for (int t = 0; t < 8; t++) wd = fmax(wd, fabs(lp_dec[t] - lp_sc[t]));
    cr_log_info("score vs full sequence %.3e, decode vs forward %.3e", worst, wd);
    cr_expect_lt(wd, 1e-12, "decode vs one forward: %.3e", wd);
    K(ls_hstate_free)(&ps);
    ls_batch_free(b);
    ls_batch_free(b2);
    K(ls_params_free)(p);
}

Test(hybrid_step, old_logprobs_equal_replay_logprobs) {
    /* at step start the policy is the old policy: every ratio is exactly 1, so
     * with A and beta known the loss has a closed form: sum_i -A_i/G (+0 KL
     * when ref == policy, i.e. lora_B = 0). */
    size_t R[] = {3, 5, 4};
    ls_model_config c = tiny_cfg();
    ls_objective o;
    ls_objective_defaults(&o);
    ls_params *p = NULL;
    char err[256];
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 1, err, sizeof err), LS_OK);
    ls_batch *b = make_batch(30, 3, R, 4);
    ls_step_result res;
    free(run_grads(p, b, LS_STRATEGY_LONGSTRAW, &res));
    double expect = 0;
    for (size_t i = 0; i < 3; i++) expect += -b->adv[i] / 3.0;
    cr_expect_lt(fabs(res.loss - expect), 1e-12, "loss %.15f vs closed form %.15f", res.loss, expect);
    for (size_t i = 0; i < 3; i++)
        for (size_t t = 0; t < R[i]; t++)
            cr_expect_lt(fabs(b->old_lp[i][t] - b->ref_lp[i][t]), 1e-13);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

static size_t branch_peak(size_t G) {
    size_t R[8] = {6, 6, 6, 6, 6, 6, 6, 6};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_FULL, 2);
    ls_batch *b = make_batch(60, G, R, 3);
    ls_mem_reset_peaks();
    ls_step_result res;
    free(run_grads(p, b, LS_STRATEGY_LONGSTRAW, &res));
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(res.prompt_state_bytes, res.prompt_state_analytical, "prompt state %zu B, analytical %zu B",
                 res.prompt_state_bytes, res.prompt_state_analytical);
    cr_expect_eq(s.peak_bytes[LS_MEM_PROMPT_STATE], res.prompt_state_analytical,
                 "tracker prompt_state peak %zu B, analytical %zu B", s.peak_bytes[LS_MEM_PROMPT_STATE],
                 res.prompt_state_analytical);
    ls_batch_free(b);
    K(ls_params_free)(p);
    return s.peak_bytes[LS_MEM_BRANCH];
}

Test(hybrid_step, branch_peak_independent_of_group_and_state_bytes_analytical) {
    size_t p2 = branch_peak(2), p8 = branch_peak(8);
    cr_log_info("branch_graph peak: G=2 %zu B, G=8 %zu B", p2, p8);
    cr_expect_gt(p2, 0);
    cr_expect_eq(p2, p8, "branch graph peak grows with G: %zu -> %zu", p2, p8);
}

Test(hybrid_step, checkpoint_save_and_load_round_trip) {
    ls_params *a = make_params(LS_TRAIN_LORA, LS_GRAD_FULL, 1), *b = make_params(LS_TRAIN_LORA, LS_GRAD_FULL, 2);
    char path[] = "/tmp/ls-ckpt-XXXXXX", err[512];
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(K(ls_params_save)(a, LS_PARAMS_WEIGHTS, path, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(K(ls_params_load)(b, path, err, sizeof err), LS_OK, "%s", err);
    for (size_t i = 0; i < a->n; i++)
        cr_expect_eq(memcmp(a->t[i].w, b->t[i].w, a->t[i].numel * sizeof(ls_real)), 0, "%s differs", a->t[i].name);
    /* a checkpoint of another config is refused, naming a tensor */
    ls_model_config c = tiny_cfg();
    c.ffn_dim = 96;
    ls_objective o;
    ls_objective_defaults(&o);
    ls_params *other = NULL;
    cr_assert_eq(K(ls_params_init)(&other, &c, &o, 1, err, sizeof err), LS_OK);
    ls_status st = K(ls_params_load)(other, path, err, sizeof err);
    cr_expect_eq(st, LS_ERR_FORMAT);
    cr_expect(strstr(err, "mlp") != NULL, "error does not name the tensor: %s", err);
    unlink(path);
    K(ls_params_free)(a);
    K(ls_params_free)(b);
    K(ls_params_free)(other);
}

/* full mode adds the state gradient, the checkpoints and one chunk's window —
 * not the prompt's graph: doubling P must grow the transient (scratch) peak
 * by about the P x d gradient buffer only, and the checkpoints exactly by
 * n_layers x P x d. */
static void full_mode_peaks(size_t P, size_t *scratch, size_t *ckpt) {
    size_t R[] = {4, 4};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_FULL, 2);
    ls_batch *b = make_batch(P, 2, R, 3);
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.page_size = 16;
    o.capture_chunk = 64;
    ls_step_result res;
    char err[256];
    ls_mem_reset_peaks();
    cr_assert_eq(K(ls_step_grads)(p, b, NULL, &o, NULL, &res, err, sizeof err), LS_OK, "%s", err);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    *scratch = s.peak_bytes[LS_MEM_SCRATCH];
    *ckpt = s.peak_bytes[LS_MEM_CHECKPOINT];
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(hybrid_step, full_mode_window_is_chunk_sized) {
    size_t s1, c1, s2, c2;
    full_mode_peaks(257, &s1, &c1);
    full_mode_peaks(513, &s2, &c2);
    ls_model_config c = tiny_cfg();
    size_t row = (size_t)c.d_model * sizeof(ls_real);
    cr_log_info("scratch peak %zu -> %zu B, checkpoints %zu -> %zu B (P 257 -> 513)", s1, s2, c1, c2);
    cr_expect_eq(c2 - c1, (size_t)c.n_layers * 256 * row, "checkpoints are not n_layers x P x d");
    /* the dh buffer grows by 256 rows; allow as much again for bookkeeping */
    cr_expect_lt(s2 - s1, 2 * 256 * row + 65536, "transient memory grows with the prompt: %zu -> %zu", s1, s2);
}

Test(hybrid_step, shipped_configs_load_and_name_their_tensors) {
    const char *files[] = {"hybrid-tiny", "hybrid-small", "mla-tiny"};
    for (int i = 0; i < 3; i++) {
        char path[512], err[512];
        snprintf(path, sizeof path, "%s/configs/%s.json", LS_SOURCE_DIR, files[i]);
        ls_model_config c;
        cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
        /* the JSON round trip keeps every key */
        cJSON *j = ls_config_to_json(&c, NULL);
        ls_model_config c2;
        cr_assert_eq(ls_config_from_json(&c2, j, path, err, sizeof err), LS_OK, "%s", err);
        cr_expect_eq(memcmp(&c, &c2, sizeof c), 0, "%s: config JSON round trip differs", files[i]);
        cJSON_Delete(j);
        ls_objective o;
        ls_objective_defaults(&o);
        o.train_mode = LS_TRAIN_FULL;
        ls_params *p = NULL;
        ls_status st = K(ls_params_init)(&p, &c, &o, 1, err, sizeof err);
        if (c.family == LS_FAMILY_MLA) {
            cr_expect_eq(st, LS_ERR_UNSUPPORTED, "mla family: %s", ls_status_str(st));
            continue;
        }
        cr_assert_eq(st, LS_OK, "%s", err);
        /* MODEL.md §5: per GDN layer 12 tensors + 3 norms/MLP..., count by layer kind */
        size_t per_gdn = 2 + 9 + 3, per_attn = 2 + 6 + 3, expect = 3;
        for (int l = 0; l < c.n_layers; l++) expect += ((l + 1) % 4 == 0) ? per_attn : per_gdn;
        cr_expect_eq(p->n, expect, "%s: %zu tensors, MODEL.md names %zu", files[i], p->n, expect);
        cr_expect_not_null(K(ls_params_find)(p, "layers.3.attn.q_norm.weight"));
        cr_expect_not_null(K(ls_params_find)(p, "layers.0.gdn.dt_bias"));
        cr_expect_null(K(ls_params_find)(p, "layers.3.gdn.dt_bias"), "layer 3 is attention");
        ls_tensor *q = K(ls_params_find)(p, "layers.3.attn.q.weight");
        cr_expect_eq(q->shape[0], (size_t)(c.attn_heads * 2 * c.head_dim));
        cr_expect_eq(q->shape[1], (size_t)c.d_model);
        K(ls_params_free)(p);
    }
}
