/* test_hybrid_step.c - the hybrid family on one rank, float64:
 *  - LongStraw `full` gradient == naive full-sequence gradient (both trainable
 *    sets, several prompt lengths / group sizes / unequal response lengths);
 *  - `detached` == one full sequence under autograd with the gradient cut at
 *    the carried state (and the naive detached strategy), != `full`, != a
 *    wrong cut; the uncut sequence == `full`;
 *  - at step start every replayed log-prob equals the scored one (token by
 *    token) and the loss equals beta x KL recomputed independently;
 *  - scored log-probs == full-sequence log-probs; decode == one forward;
 *  - branch-graph peak independent of G; prompt-state bytes == analytical. */
#include <unistd.h>

#include "tests/trainer/test_hybrid_util.h"
#include "trainer/families/mla/mla_config.h"
#include "trainer/io/params_io.h"
#include "trainer/families/families.h"
#include "trainer/families/hybrid/hybrid_family.h"

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

/* The stop-gradient reference of `detached` mode, composed differently from
 * the LongStraw path (capture, then a branch from the carried state): ONE
 * full sequence per member (prompt + response, positions 0 .. P+R-2) under
 * autograd with the gradient cut at `cut` (ls_seg_io.grad_cut; 0 = no cut),
 * the loss derivative from this file's own GRPO formula.  Returns the
 * flattened gradient; *loss the loss. */
static double *cut_sequence_grads(ls_params *p, const ls_batch *b, size_t cut, double *loss) {
    K(ls_params_zero_grads)(p);
    *loss = 0;
    for (size_t i = 0; i < b->G; i++) {
        size_t P = b->P, R = b->R[i], T = P + R - 1;
        int32_t seq[512];
        ls_real lp[64], dlp[64];
        double lpd[64], dd[64];
        cr_assert(T <= 512 && R <= 64);
        memcpy(seq, b->prompt, P * sizeof *seq);
        memcpy(seq + P, b->resp[i], (R - 1) * sizeof *seq);
        ls_seg_tape *tape = NULL;
        ls_seg_io io = {.tokens = seq, .T = T, .targets = b->resp[i], .score_from = P - 1, .logp = lp,
                        .tape = &tape, .tape_cat = LS_MEM_BRANCH, .grad_cut = cut};
        cr_assert_eq(K(ls_segment_forward)(p, &io), LS_OK);
        for (size_t t = 0; t < R; t++) lpd[t] = (double)lp[t];
        *loss += grpo_member(lpd, b->old_lp[i], b->ref_lp[i], b->adv[i], p->obj.epsilon, p->obj.beta, b->G, R, dd,
                             NULL);
        for (size_t t = 0; t < R; t++) dlp[t] = (ls_real)dd[t];
        cr_assert_eq(K(ls_segment_backward)(p, tape, dlp, NULL, NULL, NULL, NULL), LS_OK);
        K(ls_seg_tape_free)(tape);
    }
    return grads_of(p);
}

static void check_detached(ls_train_mode mode) {
    size_t R[] = {4, 6, 3}, P = 45;
    const char *mn = mode == LS_TRAIN_LORA ? "lora" : "full";
    ls_params *p = make_params(mode, LS_GRAD_DETACHED, 3);
    if (mode == LS_TRAIN_FULL) jitter_trainable(p, 0.02, 5); /* policy != frozen reference */
    ls_batch *b = make_batch(P, 3, R, 9);
    ls_step_result rd, rn, rf;
    double *gd = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &rd);
    b->old_supplied = 1; /* the same old log-probs for every run */
    double *gn = run_grads(p, b, LS_STRATEGY_NAIVE, &rn);
    double lc, lw, l0;
    double *gc = cut_sequence_grads(p, b, P - 1, &lc); /* the cut at the carried state */
    double *gw = cut_sequence_grads(p, b, P - 2, &lw); /* a wrong cut: one prompt position too early */
    double *g0 = cut_sequence_grads(p, b, 0, &l0);     /* no cut */
    p->obj.grad_mode = LS_GRAD_FULL;
    double *gf = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &rf);
    double w_cut, w_naive, w_full0, w_wrong, w_f, w_0;
    char n_cut[96] = "", n_naive[96] = "", n_full0[96] = "", scratch[96];
    double e_cut = rel_err(p, gd, gc, &w_cut, n_cut);
    double e_naive = rel_err(p, gd, gn, &w_naive, n_naive);
    double e_full0 = rel_err(p, gf, g0, &w_full0, n_full0);
    double d_wrong = rel_err(p, gd, gw, &w_wrong, scratch), d_full = rel_err(p, gd, gf, &w_f, scratch);
    double d_nocut = rel_err(p, gd, g0, &w_0, scratch);
    cr_log_info("detached (%s): vs cut sequence %.3e (worst tensor %s %.3e), vs naive strategy %.3e (worst %s "
                "%.3e); uncut sequence vs full %.3e (worst %s %.3e); detached vs full %.3e, vs cut at P-2 %.3e, "
                "vs no cut %.3e; loss %.15f / %.15f / %.15f",
                mn, e_cut, n_cut, w_cut, e_naive, n_naive, w_naive, e_full0, n_full0, w_full0, d_full, d_wrong,
                d_nocut, rd.loss, lc, rn.loss);
    cr_expect_lt(w_cut, 1e-11, "%s: detached differs from the cut full sequence: %s %.3e", mn, n_cut, w_cut);
    cr_expect_lt(w_naive, 1e-11, "%s: detached differs from the naive detached strategy: %s %.3e", mn, n_naive,
                 w_naive);
    cr_expect_lt(w_full0, 1e-11, "%s: the uncut sequence differs from the full gradient: %s %.3e", mn, n_full0,
                 w_full0);
    cr_expect_lt(fabs(rd.loss - lc), 1e-13, "%s: loss %.15f vs %.15f", mn, rd.loss, lc);
    cr_expect_lt(fabs(rn.loss - lc), 1e-13, "%s: loss %.15f vs %.15f", mn, rn.loss, lc);
    /* the cut is active, and only the right cut matches */
    cr_expect_gt(d_full, 1e-3, "%s: detached equals full (%.3e): the prompt-state gradient is not flowing", mn,
                 d_full);
    cr_expect_gt(d_nocut, 1e-3, "%s: the cut changes nothing (%.3e)", mn, d_nocut);
    cr_expect_gt(d_wrong, 1e-6, "%s: a cut at P-2 matches detached (%.3e): the comparison cannot fail", mn, d_wrong);
    free(gd);
    free(gn);
    free(gc);
    free(gw);
    free(g0);
    free(gf);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(hybrid_step, detached_equals_cut_full_sequence_and_differs_from_full) {
    check_detached(LS_TRAIN_LORA);
    check_detached(LS_TRAIN_FULL);
}

/* At step start the policy is the old policy: every replayed log-prob equals
 * the scored old one (ratio 1), checked token by token through the trainer's
 * own loss: shifting old_{i,t} by delta (inside the clip range) changes L by
 * exactly -(A_i/(G R_i)) rho_{i,t} (e^{-delta} - 1).  And the loss has the
 * closed form sum_i (1/(G R_i)) sum_t [-A_i + beta KL(ref, old)], where old
 * and ref are recomputed here as one full sequence each from position 0 with
 * the policy and with an independently built reference (lora: adapters
 * zeroed; full: the weights before the jitter), and KL with this file's
 * formula.  beta = 0.5 so that the KL term is far from zero. */
static void check_old_equals_replay(ls_train_mode mode, ls_strategy s, ls_grad_mode gm, int per_token) {
    size_t R[] = {3, 5, 4}, P = 30, G = 3;
    const char *what = s == LS_STRATEGY_NAIVE ? "naive" : "longstraw";
    const char *gmn = gm == LS_GRAD_FULL ? "full" : "detached", *mn = mode == LS_TRAIN_LORA ? "lora" : "full";
    ls_params *p = make_params(mode, gm, 1), *ref = make_params(mode, gm, 1);
    p->obj.beta = 0.5;
    if (mode == LS_TRAIN_FULL) jitter_trainable(p, 0.02, 2);
    for (size_t i = 0; mode == LS_TRAIN_LORA && i < ref->n; i++) {
        size_t nl = strlen(ref->t[i].name);
        if (nl > 7 && strcmp(ref->t[i].name + nl - 7, ".lora_B") == 0)
            memset(ref->t[i].w, 0, ref->t[i].numel * sizeof(ls_real));
    }
    ls_batch *b = make_batch(P, G, R, 4);
    b->rewards[0] = 1.0;
    b->rewards[1] = 0.0;
    b->rewards[2] = 0.4;
    ls_step_result res;
    free(run_grads(p, b, s, &res));
    double expect = 0, kl = 0, w_old = 0, w_ref = 0;
    for (size_t i = 0; i < G; i++) {
        double lp[8], lr[8];
        full_sequence_logprobs(p, b, i, lp);
        full_sequence_logprobs(ref, b, i, lr);
        for (size_t t = 0; t < R[i]; t++) {
            w_old = fmax(w_old, fabs(b->old_lp[i][t] - lp[t]));
            w_ref = fmax(w_ref, fabs(b->ref_lp[i][t] - lr[t]));
        }
        expect += grpo_member(lp, lp, lr, b->adv[i], p->obj.epsilon, p->obj.beta, G, R[i], NULL, NULL);
        kl += grpo_member(lp, lp, lr, 0, p->obj.epsilon, p->obj.beta, G, R[i], NULL, NULL);
    }
    /* per-token ratio from the trainer's loss */
    b->old_supplied = 1;
    double worst_rho = 0, delta = 0.1;
    for (size_t i = 0; per_token && i < G; i++)
        for (size_t t = 0; t < R[i]; t++) {
            double keep = b->old_lp[i][t];
            ls_step_result r2;
            b->old_lp[i][t] = keep + delta;
            free(run_grads(p, b, s, &r2));
            b->old_lp[i][t] = keep;
            double rho = (r2.loss - res.loss) / (-(b->adv[i] / (double)(G * R[i])) * (exp(-delta) - 1));
            worst_rho = fmax(worst_rho, fabs(rho - 1));
        }
    cr_log_info("old == replay (%s, %s, train %s): |rho - 1| <= %.3e over %zu tokens; old vs full sequence "
                "%.3e, ref %.3e; loss %.15f vs closed form %.15f (beta KL part %.3e)",
                what, gmn, mn, worst_rho, per_token ? R[0] + R[1] + R[2] : 0, w_old, w_ref, res.loss, expect, kl);
    cr_expect_lt(worst_rho, 1e-9, "%s/%s/%s: a replayed log-prob differs from the scored one: |rho-1| %.3e",
                 what, gmn, mn, worst_rho);
    cr_expect_lt(w_old, 1e-12, "%s/%s/%s: scored old log-probs vs full sequence %.3e", what, gmn, mn, w_old);
    cr_expect_lt(w_ref, 1e-12, "%s/%s/%s: reference log-probs vs full sequence %.3e", what, gmn, mn, w_ref);
    cr_expect_lt(fabs(res.loss - expect), 1e-13, "%s/%s/%s: loss %.15f vs closed form %.15f", what, gmn, mn,
                 res.loss, expect);
    cr_expect_gt(kl, 1e-3, "%s/%s/%s: the KL term is %.3e: the closed form would not test it", what, gmn, mn, kl);
    ls_batch_free(b);
    K(ls_params_free)(p);
    K(ls_params_free)(ref);
}

Test(hybrid_step, old_logprobs_equal_replay_logprobs) {
    /* token by token where the replay differs (LongStraw branch, naive cut
     * sequence, full mode); the loss closed form in every combination */
    check_old_equals_replay(LS_TRAIN_LORA, LS_STRATEGY_LONGSTRAW, LS_GRAD_DETACHED, 1);
    check_old_equals_replay(LS_TRAIN_LORA, LS_STRATEGY_LONGSTRAW, LS_GRAD_FULL, 0);
    check_old_equals_replay(LS_TRAIN_LORA, LS_STRATEGY_NAIVE, LS_GRAD_DETACHED, 1);
    check_old_equals_replay(LS_TRAIN_LORA, LS_STRATEGY_NAIVE, LS_GRAD_FULL, 0);
    check_old_equals_replay(LS_TRAIN_FULL, LS_STRATEGY_LONGSTRAW, LS_GRAD_FULL, 1);
    check_old_equals_replay(LS_TRAIN_FULL, LS_STRATEGY_NAIVE, LS_GRAD_DETACHED, 0);
}

Test(hybrid_step, scoring_equals_full_sequence_and_decode_equals_forward) {
    size_t R[] = {6};
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 5);
    ls_batch *b = make_batch(50, 1, R, 77);
    ls_state ps;
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
    K(ls_hybrid_state_free)(&ps);
    ls_batch_free(b);
    ls_batch_free(b2);
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
        if (c.family == &ls_family_desc_mla) { /* its table: test_mla */
            cr_expect_eq(st, LS_OK, "mla family: %s", err);
            K(ls_params_free)(p);
            continue;
        }
        cr_assert_eq(st, LS_OK, "%s", err);
        /* docs/model.md §5: per GDN layer 12 tensors + 3 norms/MLP..., count by layer kind */
        size_t per_gdn = 2 + 9 + 3, per_attn = 2 + 6 + 3, expect = 3;
        for (int l = 0; l < c.n_layers; l++) expect += ((l + 1) % 4 == 0) ? per_attn : per_gdn;
        cr_expect_eq(p->n, expect, "%s: %zu tensors, docs/model.md names %zu", files[i], p->n, expect);
        cr_expect_not_null(K(ls_params_find)(p, "layers.3.attn.q_norm.weight"));
        cr_expect_not_null(K(ls_params_find)(p, "layers.0.gdn.dt_bias"));
        cr_expect_null(K(ls_params_find)(p, "layers.3.gdn.dt_bias"), "layer 3 is attention");
        ls_tensor *q = K(ls_params_find)(p, "layers.3.attn.q.weight");
        cr_expect_eq(q->shape[0], (size_t)(ls_hybrid_keys_of(&c)->attn_heads * 2 * ls_hybrid_keys_of(&c)->head_dim));
        cr_expect_eq(q->shape[1], (size_t)c.d_model);
        K(ls_params_free)(p);
    }
}
