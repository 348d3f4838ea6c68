/* step.c - the GRPO step: capture, rollout, score, replay, prompt backward,
 * finalize and AdamW (LongStraw), or one full sequence per member (naive). */
#include "trainer/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/grpo.h"
#include "kernels/logprob.h"
#include "receipts/trace_event.h"
#include "trainer/rng.h"
#include "trainer/sampler.h"

#define R_(n) ((n) * sizeof(ls_real))
/* phase indices are the trace vocabulary's (receipts/trace_event.h) */
enum {
    PH_CAPTURE = LS_PHASE_CAPTURE, PH_ROLLOUT = LS_PHASE_ROLLOUT, PH_SCORE = LS_PHASE_SCORE,
    PH_REPLAY = LS_PHASE_REPLAY, PH_PROMPT_BWD = LS_PHASE_PROMPT_BWD, PH_FINALIZE = LS_PHASE_FINALIZE
};
#define PHASE_NAME(ph) ls_trace_phase_name((ls_trace_phase)(ph))


static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    const ls_step_observer *obs;
    const char *phase;
    int member;
} hook_ctx;

static void hook_fn(void *user, int layer, int dir, size_t tokens, int64_t wall_ns, double norm) {
    hook_ctx *h = user;
    if (h->obs && h->obs->layer_end)
        h->obs->layer_end(h->obs->user, h->phase, h->member, layer, dir, tokens, wall_ns, norm);
}

static void begin(const ls_step_observer *obs, int ph, int64_t *t0) {
    *t0 = now_ns();
    if (obs && obs->phase_begin) obs->phase_begin(obs->user, PHASE_NAME(ph));
}

static void end(const ls_step_observer *obs, int ph, int64_t t0, int ok, ls_step_result *res) {
    int64_t dt = now_ns() - t0;
    if (res) res->phase_ns[ph] += dt;
    if (obs && obs->phase_end) obs->phase_end(obs->user, PHASE_NAME(ph), dt, ok);
}

static void progress(const ls_step_observer *obs, int ph, size_t done, size_t total) {
    if (obs && obs->progress) obs->progress(obs->user, PHASE_NAME(ph), done, total);
}

ls_status LS_K(ls_capture)(const ls_params *p, const ls_batch *b, size_t page_size, size_t chunk, ls_hstate *ps,
                           ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook, void *hook_user) {
    if (b->P < 2) return LS_ERR_ARG;
    size_t T = b->P - 1, L = (size_t)p->cfg.n_layers, d = (size_t)p->cfg.d_model;
    if (chunk == 0 || chunk > T) chunk = T;
    ls_status st = LS_K(ls_hstate_init)(ps, p, page_size, cat);
    if (st != LS_OK) return st;
    ls_real **ck = checkpoints ? ls_mem_alloc(LS_MEM_SCRATCH, L * sizeof *ck) : NULL;
    if (checkpoints && !ck) st = LS_ERR_NOMEM;
    /* each chunk is a segment that reads the state so far and appends to it */
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += chunk) {
        size_t n = T - t0 < chunk ? T - t0 : chunk;
        for (size_t l = 0; ck && l < L; l++) ck[l] = checkpoints[l] + t0 * d;
        ls_seg_io io = {.tokens = b->prompt + t0, .T = n, .pos0 = (int64_t)t0, .ctx = t0 ? ps : NULL,
                        .state_out = ps, .checkpoints = ck, .hook = hook, .hook_user = hook_user};
        st = LS_K(ls_segment_forward)(p, &io);
    }
    ls_mem_free(ck);
    if (st != LS_OK) LS_K(ls_hstate_free)(ps);
    return st;
}

/* Branch i: inputs [x_{P-1}, y_0 .. y_{R-2}] at positions P-1 .. P+R-2. */
static int32_t *branch_inputs(const ls_batch *b, size_t i, ls_mem_cat cat) {
    size_t R = b->R[i];
    int32_t *in = ls_mem_alloc(cat, R * sizeof *in);
    if (!in) return NULL;
    in[0] = b->prompt[b->P - 1];
    memcpy(in + 1, b->resp[i], (R - 1) * sizeof *in);
    return in;
}

ls_status LS_K(ls_score_member)(const ls_params *p, const ls_hstate *ps, const ls_batch *b, size_t i,
                                double *logp, ls_layer_hook hook, void *hook_user) {
    size_t R = b->R[i];
    int32_t *in = branch_inputs(b, i, LS_MEM_SCORE);
    ls_real *lp = ls_mem_alloc(LS_MEM_SCORE, R_(R));
    ls_status st = LS_ERR_NOMEM;
    if (in && lp) {
        ls_seg_io io = {.tokens = in, .T = R, .pos0 = (int64_t)b->P - 1, .ctx = ps,
                        .targets = b->resp[i], .score_from = 0, .logp = lp, .hook = hook,
                        .hook_user = hook_user};
        st = LS_K(ls_segment_forward)(p, &io);
        for (size_t t = 0; st == LS_OK && t < R; t++) logp[t] = (double)lp[t];
    }
    ls_mem_free(in);
    ls_mem_free(lp);
    return st;
}

ls_status LS_K(ls_rollout_member)(const ls_params *p, const ls_hstate *ps, int32_t first_token,
                                  size_t R, double temperature, double top_p, uint64_t seed,
                                  int32_t *out, double *logp_out) {
    size_t d = (size_t)p->cfg.d_model, V = (size_t)p->cfg.vocab;
    ls_hstate st_m;
    ls_status st = LS_K(ls_hstate_fork)(&st_m, ps, LS_MEM_SCORE);
    if (st != LS_OK) return st;
    ls_real *hrow = ls_mem_alloc(LS_MEM_SCORE, R_(d)), *row = ls_mem_alloc(LS_MEM_SCORE, R_(V));
    ls_sampler_ws ws;
    ls_status wst = LS_K(ls_sampler_ws_init)(&ws, V, LS_MEM_SCORE);
    ls_rng rng;
    ls_rng_seed(&rng, seed);
    int32_t tok = first_token;
    st = (hrow && row) ? wst : LS_ERR_NOMEM;
    for (size_t t = 0; st == LS_OK && t < R; t++) {
        ls_seg_io io = {.tokens = &tok, .T = 1, .pos0 = st_m.n_pos, .ctx = &st_m, .state_out = &st_m,
                        .last_hidden = hrow};
        st = LS_K(ls_segment_forward)(p, &io);
        if (st != LS_OK) break;
        LS_K(ls_logprob_row)(row, hrow, p->lm_head->w, (ls_real)temperature, d, V);
        tok = LS_K(ls_sampler_top_p)(row, V, top_p, &rng, &ws);
        out[t] = tok;
        if (logp_out) logp_out[t] = (double)row[tok];
    }
    LS_K(ls_sampler_ws_free)(&ws);
    ls_mem_free(hrow);
    ls_mem_free(row);
    LS_K(ls_hstate_free)(&st_m);
    return st;
}

/* Loss and dL/dlogp of member i from its log-probs. */
static double member_loss(const ls_params *p, const ls_batch *b, size_t i, const ls_real *logp,
                          ls_real *dlogp, ls_real *tmp_old, ls_real *tmp_ref) {
    for (size_t t = 0; t < b->R[i]; t++) {
        tmp_old[t] = (ls_real)b->old_lp[i][t];
        tmp_ref[t] = (ls_real)b->ref_lp[i][t];
    }
    return LS_K(ls_grpo_member_loss)(dlogp, logp, tmp_old, tmp_ref, (ls_real)b->adv[i],
                                     (ls_real)p->obj.epsilon, (ls_real)p->obj.beta, b->G, b->R[i]);
}

/* Taped forward of one member (branch from ps, or the naive full sequence),
 * its loss and backward.  dps: prompt-state gradient (NULL: detached).  The
 * naive sequence in `detached` mode cuts its gradient at the carried state
 * (positions < P-1): the stop-gradient reference, one sequence under autograd. */
static ls_status replay_member(const ls_params *p, const ls_batch *b, size_t i, const ls_hstate *ps,
                               ls_hstate *dps, const ls_step_options *o, hook_ctx *hk, double *loss,
                               size_t *tape_bytes) {
    size_t R = b->R[i], P = b->P;
    int naive = o->strategy == LS_STRATEGY_NAIVE && ps == NULL;
    size_t T = naive ? P + R - 1 : R;
    int32_t *in = ls_mem_alloc(LS_MEM_BRANCH, T * sizeof *in);
    ls_real *lp = ls_mem_alloc(LS_MEM_BRANCH, R_(R) * 4);
    ls_seg_tape *tape = NULL;
    ls_status st = LS_ERR_NOMEM;
    if (!in || !lp) goto cleanup;
    ls_real *dlp = lp + R, *t_old = lp + 2 * R, *t_ref = lp + 3 * R;
    if (naive) {
        memcpy(in, b->prompt, P * sizeof *in);
        memcpy(in + P, b->resp[i], (R - 1) * sizeof *in);
    } else {
        in[0] = b->prompt[P - 1];
        memcpy(in + 1, b->resp[i], (R - 1) * sizeof *in);
    }
    ls_seg_io io = {.tokens = in, .T = T, .pos0 = naive ? 0 : (int64_t)P - 1, .ctx = ps,
                    .targets = b->resp[i], .score_from = naive ? P - 1 : 0, .logp = lp, .tape = &tape,
                    .tape_cat = LS_MEM_BRANCH, .hook = hook_fn, .hook_user = hk,
                    .grad_cut = naive && p->obj.grad_mode != LS_GRAD_FULL ? P - 1 : 0};
    st = LS_K(ls_segment_forward)(p, &io);
    if (st != LS_OK) goto cleanup;
    *loss += member_loss(p, b, i, lp, dlp, t_old, t_ref);
    st = LS_K(ls_segment_backward)(p, tape, dlp, dps, hook_fn, hk);
    if (tape_bytes) *tape_bytes = LS_K(ls_seg_tape_bytes)(tape);
cleanup:
    LS_K(ls_seg_tape_free)(tape);
    ls_mem_free(lp);
    ls_mem_free(in);
    return st;
}

static ls_status do_rollout(const ls_params *p, ls_batch *b, const ls_task *task, const ls_hstate *ps,
                            const ls_step_options *o, const ls_step_observer *obs) {
    int32_t *buf = ls_mem_alloc(LS_MEM_SCORE, o->R * sizeof *buf);
    ls_status st = buf ? LS_OK : LS_ERR_NOMEM;
    for (size_t i = 0; st == LS_OK && i < b->G; i++) {
        st = LS_K(ls_rollout_member)(p, ps, b->prompt[b->P - 1], o->R, p->obj.temperature, o->top_p,
                                     ls_rng_derive(o->seed, "rollout") + i, buf, NULL);
        if (st == LS_OK) st = ls_batch_set_response(b, i, buf, o->R);
        if (st == LS_OK) b->rewards[i] = ls_task_reward(task, buf, o->R);
        progress(obs, PH_ROLLOUT, i + 1, b->G);
    }
    ls_mem_free(buf);
    return st;
}

/* Old-policy (unless supplied) and reference-policy log-probs. */
static ls_status do_score(ls_params *p, ls_batch *b, const ls_hstate *ps, const ls_step_options *o,
                          const ls_step_observer *obs) {
    ls_status st = LS_OK;
    ls_hstate own;
    int have_own = 0;
    hook_ctx hk = {obs, "score", -1};
    if (!ps) { /* naive: score each member as a full sequence from an untaped prompt */
        st = LS_K(ls_capture)(p, b, o->page_size, o->capture_chunk, &own, NULL, LS_MEM_SCORE, hook_fn, &hk);
        if (st != LS_OK) return st;
        ps = &own;
        have_own = 1;
    }
    for (size_t i = 0; st == LS_OK && !b->old_supplied && i < b->G; i++) {
        hook_ctx hm = {obs, "score", (int)i};
        st = LS_K(ls_score_member)(p, ps, b, i, b->old_lp[i], hook_fn, &hm);
    }
    if (have_own) LS_K(ls_hstate_free)(&own);
    if (st != LS_OK) return st;
    ls_params *ref = NULL;
    ls_hstate rps;
    st = LS_K(ls_params_ref_view)(&ref, p);
    if (st == LS_OK) st = LS_K(ls_capture)(ref, b, o->page_size, o->capture_chunk, &rps, NULL, LS_MEM_SCORE, hook_fn, &hk);
    if (st == LS_OK) {
        for (size_t i = 0; st == LS_OK && i < b->G; i++) {
            hook_ctx hm = {obs, "score", (int)i};
            st = LS_K(ls_score_member)(ref, &rps, b, i, b->ref_lp[i], hook_fn, &hm);
        }
        LS_K(ls_hstate_free)(&rps);
    }
    LS_K(ls_params_free)(ref);
    return st;
}

ls_status LS_K(ls_step_grads)(ls_params *p, ls_batch *b, const ls_task *task, const ls_step_options *o,
                              const ls_step_observer *obs, ls_step_result *res, char *err, size_t err_len) {
    const ls_model_config *c = &p->cfg;
    ls_step_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    int full = p->obj.grad_mode == LS_GRAD_FULL, naive = o->strategy == LS_STRATEGY_NAIVE;
    ls_hstate ps = {0}, dps = {0};
    ls_real **ckpt = NULL;
    void *untracked = NULL; /* the untracked-alloc fault's buffer */
    ls_status st = LS_OK;
    int64_t t0;
    size_t L = (size_t)c->n_layers, d = (size_t)c->d_model;
    ls_mem_track_kernel_scratch(); /* kernel tile scratch shows under "scratch" */
    LS_K(ls_params_zero_grads)(p);

    /* capture (LongStraw always; naive only needs it to roll out) */
    int need_rollout = b->resp[0] == NULL;
    if (!naive || need_rollout) {
        begin(obs, PH_CAPTURE, &t0);
        hook_ctx hk = {obs, "capture", -1};
        if (full && !naive) {
            ckpt = ls_mem_alloc(LS_MEM_CHECKPOINT, L * sizeof *ckpt);
            if (!ckpt) st = LS_ERR_NOMEM;
            for (size_t l = 0; st == LS_OK && l < L; l++)
                if (!(ckpt[l] = ls_mem_alloc(LS_MEM_CHECKPOINT, R_((b->P - 1) * d)))) st = LS_ERR_NOMEM;
        }
        if (st == LS_OK) st = LS_K(ls_capture)(p, b, o->page_size, o->capture_chunk, &ps, ckpt, LS_MEM_PROMPT_STATE, hook_fn, &hk);
        end(obs, PH_CAPTURE, t0, st == LS_OK, res);
        if (st != LS_OK) {
            snprintf(err, err_len, "capture failed: %s", ls_status_str(st));
            goto cleanup;
        }
        if (o->fault_untracked_alloc) { /* deliberately outside the tracker, every page touched */
            size_t n = (b->P - 1) * d * L * sizeof(ls_real);
            if ((untracked = malloc(n)) != NULL) memset(untracked, 0x5a, n);
        }
        res->prompt_state_bytes = LS_K(ls_hstate_bytes)(&ps);
        res->prompt_state_analytical = LS_K(ls_hstate_analytical_bytes)(p, (int64_t)b->P - 1);
    }
    if (need_rollout) {
        begin(obs, PH_ROLLOUT, &t0);
        st = task ? do_rollout(p, b, task, &ps, o, obs) : LS_ERR_ARG;
        end(obs, PH_ROLLOUT, t0, st == LS_OK, res);
        if (st != LS_OK) {
            snprintf(err, err_len, "rollout failed: %s", task ? ls_status_str(st) : "no task and no responses");
            goto cleanup;
        }
    }
    if (naive) LS_K(ls_hstate_free)(&ps); /* the naive strategy keeps no prompt state */
    for (size_t i = 0; i < b->G; i++) res->mean_reward += b->rewards[i] / (double)b->G;

    begin(obs, PH_SCORE, &t0);
    st = do_score(p, b, naive ? NULL : &ps, o, obs);
    if (st == LS_OK) {
        ls_real *A = ls_mem_alloc(LS_MEM_SCORE, R_(b->G)), *rw = ls_mem_alloc(LS_MEM_SCORE, R_(b->G));
        if (!A || !rw) st = LS_ERR_NOMEM;
        else {
            for (size_t i = 0; i < b->G; i++) rw[i] = (ls_real)b->rewards[i];
            LS_K(ls_grpo_advantages)(A, rw, b->G);
            for (size_t i = 0; i < b->G; i++) b->adv[i] = (double)A[i];
        }
        ls_mem_free(A);
        ls_mem_free(rw);
    }
    end(obs, PH_SCORE, t0, st == LS_OK, res);
    if (st != LS_OK) {
        snprintf(err, err_len, "score failed: %s", ls_status_str(st));
        goto cleanup;
    }

    begin(obs, PH_REPLAY, &t0);
    if (full && !naive) st = LS_K(ls_hstate_grad_like)(&dps, &ps, LS_MEM_PROMPT_GRAD);
    for (size_t i = 0; st == LS_OK && i < b->G; i++) {
        hook_ctx hk = {obs, "replay", (int)i};
        size_t tb = 0;
        st = replay_member(p, b, i, naive ? NULL : &ps, full && !naive ? &dps : NULL, o, &hk, &res->loss, &tb);
        if (tb > res->max_branch_bytes) res->max_branch_bytes = tb;
        progress(obs, PH_REPLAY, i + 1, b->G);
    }
    end(obs, PH_REPLAY, t0, st == LS_OK, res);
    if (st != LS_OK) {
        snprintf(err, err_len, "replay failed: %s", ls_status_str(st));
        goto cleanup;
    }

    if (full && !naive) {
        begin(obs, PH_PROMPT_BWD, &t0);
        hook_ctx hk = {obs, "prompt_bwd", -1};
        st = LS_K(ls_prompt_backward)(p, b->prompt, b->P - 1, o->capture_chunk, ckpt, &ps, &dps, LS_MEM_SCRATCH,
                                      hook_fn, &hk);
        end(obs, PH_PROMPT_BWD, t0, st == LS_OK, res);
        if (st != LS_OK) {
            snprintf(err, err_len, "prompt backward failed: %s", ls_status_str(st));
            goto cleanup;
        }
    }
    LS_K(ls_hstate_free)(&dps);
    LS_K(ls_hstate_free)(&ps);

    if (o->fault_nan_grad)
        for (size_t i = 0; i < p->n; i++)
            if (p->t[i].trainable) {
                p->t[i].g[0] = (ls_real)NAN;
                break;
            }
    /* finalize: one rank holds every gradient; what remains is the check */
    begin(obs, PH_FINALIZE, &t0);
    res->grad_norm = sqrt(LS_K(ls_params_grad_sumsq)(p));
    int finite = isfinite(res->loss) && LS_K(ls_params_grads_finite)(p);
    end(obs, PH_FINALIZE, t0, finite, res);
    if (!finite) {
        snprintf(err, err_len, "non-finite %s (loss %g): no optimizer step", isfinite(res->loss) ? "gradient" : "loss",
                 res->loss);
        st = LS_ERR_NONFINITE;
    }
cleanup:
    free(untracked);
    LS_K(ls_hstate_free)(&dps);
    LS_K(ls_hstate_free)(&ps);
    if (ckpt) {
        for (size_t l = 0; l < L; l++) ls_mem_free(ckpt[l]);
        ls_mem_free(ckpt);
    }
    return st;
}

void LS_K(ls_step_optimizer)(ls_params *p, const ls_step_options *o, int64_t step) {
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        LS_K(ls_adamw_step)(t->w, t->m, t->v, t->g, t->numel, o->lr, o->beta1, o->beta2, o->adam_eps,
                            o->weight_decay, step);
    }
}
