/* step_txn.c - the GRPO step as a transaction (docs/design.md §3): capture,
 * rollout, score (old and reference policies, one prompt state live at a
 * time), replay, prompt backward, finalize (LongStraw), or one full sequence
 * per member (naive); the SFT objective on the same path; the step metrics. */
#include "trainer/step/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/grpo.h"
#include "receipts/format/trace_event.h"
#include "trainer/step/grpo_stats.h"
#include "trainer/base/rng.h"
#include "trainer/dist/ep.h"
#include "trainer/step/grad_cosine.h"
#include "trainer/step/replay_chunk.h"

#define R_(n) ((n) * sizeof(ls_real))
/* phase indices are the trace vocabulary's (receipts/format/trace_event.h) */
enum {
    PH_CAPTURE = LS_PHASE_CAPTURE, PH_ROLLOUT = LS_PHASE_ROLLOUT, PH_SCORE = LS_PHASE_SCORE,
    PH_REPLAY = LS_PHASE_REPLAY, PH_PROMPT_BWD = LS_PHASE_PROMPT_BWD, PH_FINALIZE = LS_PHASE_FINALIZE
};
#define PHASE_NAME(ph) ls_trace_phase_name((ls_trace_phase)(ph))

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
    *t0 = ls_hook_now_ns();
    if (obs && obs->phase_begin) obs->phase_begin(obs->user, PHASE_NAME(ph));
}

static void end(const ls_step_observer *obs, int ph, int64_t t0, int ok, ls_step_result *res) {
    int64_t dt = ls_hook_now_ns() - t0;
    if (res) res->phase_ns[ph] += dt;
    if (obs && obs->phase_end) obs->phase_end(obs->user, PHASE_NAME(ph), dt, ok);
}

static void progress(const ls_step_observer *obs, int ph, size_t done, size_t total) {
    if (obs && obs->progress) obs->progress(obs->user, PHASE_NAME(ph), done, total);
}

/* What one step carries between its phases. */
typedef struct {
    ls_params *p;
    ls_batch *b;
    const ls_task *task;
    const ls_step_options *o;
    const ls_step_observer *obs;
    ls_step_result *res;
    int full, naive, sft, need_rollout, use_ref;
    int pb;                 /* the prompt backward runs: full mode, or a --grad-cosine-every step (grad_cosine.h) */
    ls_grad_cosine *gc;     /* that measurement (NULL: none) */
    void **untracked;       /* the untracked-alloc fault's buffer (the step's: one, freed after finalize) */
    ls_state own_ps, dps;  /* the policy prompt state (unless a prefix holds it) and its gradient */
    ls_state *ps;          /* &own_ps or &prefix->ps; NULL while none is captured */
    ls_real **ckpt;         /* full mode: each layer's input over the prompt */
    ls_grpo_stats gs;
    double rr_sum, rf_sum;  /* the task reward's parts, summed over the group */
    int use_cp;             /* context parallel over o->cp_group */
    ls_cp *cp;              /* the step's (every group's) */
    ls_real **stash;        /* CP: the replicated gradients summed over the groups so far (the step's) */
    ls_real **gsave;        /* CP, group b > 0: the tensors' own .g while its replay writes into *stash */
    int m0;                 /* the group's first member in the step's numbering (trace events) */
    size_t B;               /* the step's groups: each group's dlp is scaled by 1/B (B > 1 only) */
} txn;

static void free_ckpt(txn *x) {
    if (!x->ckpt) return;
    for (size_t l = 0; l < (size_t)x->p->cfg.n_layers; l++) ls_mem_free(x->ckpt[l]);
    ls_mem_free(x->ckpt);
    x->ckpt = NULL;
}

/* Capture params q's prompt state into *dst (category prompt_state: a
 * reference state is a prompt state too, never beside the policy's), with
 * checkpoints when asked. */
static ls_status capture_into(txn *x, const ls_params *q, ls_state *dst, int with_ckpt) {
    const ls_batch *b = x->b;
    size_t L = (size_t)x->p->cfg.n_layers, d = (size_t)x->p->cfg.d_model;
    ls_status st = LS_OK;
    int64_t t0;
    begin(x->obs, PH_CAPTURE, &t0);
    hook_ctx hk = {x->obs, "capture", -1};
    size_t T = x->use_cp ? (size_t)(x->cp->s1 - x->cp->s0) : b->P - 1; /* this rank's positions */
    if (with_ckpt) {
        x->ckpt = ls_mem_alloc(LS_MEM_CHECKPOINT, L * sizeof *x->ckpt);
        if (!x->ckpt) st = LS_ERR_NOMEM;
        else memset(x->ckpt, 0, L * sizeof *x->ckpt);
        for (size_t l = 0; st == LS_OK && l < L; l++)
            if (!(x->ckpt[l] = ls_mem_alloc(LS_MEM_CHECKPOINT, R_(T * d)))) st = LS_ERR_NOMEM;
    }
    /* --state-tier host: the state's rows in the host tier, read through the staging tier (stage.h) */
    ls_mem_cat cat = x->o->state_tier ? LS_MEM_PROMPT_STATE_HOST : LS_MEM_PROMPT_STATE;
    if (st == LS_OK && x->use_cp)
        st = LS_K(ls_cp_capture)(x->cp, q, b->prompt, x->o->page_size, x->o->capture_chunk, dst,
                                 with_ckpt ? x->ckpt : NULL, cat, hook_fn, &hk);
    else if (st == LS_OK)
        st = LS_K(ls_capture)(q, b, x->o->page_size, x->o->capture_chunk, dst, with_ckpt ? x->ckpt : NULL, cat,
                              hook_fn, &hk);
    end(x->obs, PH_CAPTURE, t0, st == LS_OK, x->res);
    if (st == LS_OK) {
        x->res->captures++;
        x->res->phase_tokens[PH_CAPTURE] += (int64_t)T;
    } else {
        free_ckpt(x);
    }
    return st;
}

static ls_status capture_policy(txn *x, int with_ckpt) {
    ls_status st = capture_into(x, x->p, &x->own_ps, with_ckpt);
    if (st != LS_OK) return st;
    x->ps = &x->own_ps;
    x->res->prompt_state_bytes = x->p->fam->state_bytes(x->ps);
    x->res->prompt_state_analytical = x->p->fam->state_plan_bytes(
        &x->p->cfg, x->use_cp ? x->cp->s1 - x->cp->s0 : (int64_t)x->b->P - 1); /* the shard's, exactly */
    return LS_OK;
}

static void release_policy(txn *x) {
    if (x->ps == &x->own_ps) x->p->fam->state_free(&x->own_ps);
    x->ps = NULL;
    free_ckpt(x);
}


/* Every member's log-probs under params q from the prompt state s. */
static ls_status score_all(txn *x, const ls_params *q, const ls_state *s, double **out) {
    ls_status st = LS_OK;
    for (size_t i = 0; st == LS_OK && i < x->b->G; i++) {
        hook_ctx hm = {x->obs, "score", x->m0 + (int)i};
        st = LS_K(ls_score_member_chunked)(q, s, x->b, i, ls_step_replay_chunk(x->o), out[i], hook_fn, &hm);
        x->res->phase_tokens[PH_SCORE] += (int64_t)x->b->R[i];
    }
    return st;
}

/* The reference policy's log-probs.  keep: a prefix's state to reuse (and
 * fill on first use), else NULL: capture, score and free. */
static ls_status score_reference(txn *x, ls_state *keep, int *have_keep) {
    ls_params *ref = NULL;
    ls_state own;
    ls_state *s = keep ? keep : &own;
    ls_status st = LS_K(ls_params_ref_view)(&ref, x->p);
    if (st == LS_OK && !(keep && *have_keep)) {
        st = capture_into(x, ref, s, 0);
        if (st == LS_OK && keep) *have_keep = 1;
    }
    if (st == LS_OK) {
        int64_t t0;
        begin(x->obs, PH_SCORE, &t0);
        st = score_all(x, ref, s, x->b->ref_lp);
        end(x->obs, PH_SCORE, t0, st == LS_OK, x->res);
        if (!keep) x->p->fam->state_free(&own);
    }
    LS_K(ls_params_free)(ref);
    if (st == LS_OK) x->res->used_reference = 1;
    return st;
}

static ls_status do_rollout(txn *x) {
    const ls_step_options *o = x->o;
    ls_batch *b = x->b;
    int32_t *buf = ls_mem_alloc(LS_MEM_SCORE, o->R * sizeof *buf);
    ls_status st = buf ? LS_OK : LS_ERR_NOMEM;
    for (size_t i = 0; st == LS_OK && i < b->G; i++) {
        st = LS_K(ls_rollout_member)(x->p, x->ps, b->prompt[b->P - 1], o->R, x->p->obj.temperature, o->top_p,
                                     ls_rng_derive(o->seed, "rollout") + i, buf, NULL);
        if (st == LS_OK) st = ls_batch_set_response(b, i, buf, o->R);
        if (st == LS_OK) {
            double rr, rf;
            ls_task_reward_parts(x->task, buf, o->R, &rr, &rf);
            b->rewards[i] = rr + rf;
            x->rr_sum += rr;
            x->rf_sum += rf;
        }
        x->res->phase_tokens[PH_ROLLOUT] += (int64_t)o->R;
        progress(x->obs, PH_ROLLOUT, i + 1, b->G);
    }
    ls_mem_free(buf);
    if (st == LS_OK) x->res->has_reward_parts = 1;
    return st;
}

/* Naive strategy: old-policy log-probs from an untaped prompt of its own
 * (freed before the reference's), then the reference. */
static ls_status score_naive(txn *x, int use_ref) {
    ls_status st = LS_OK;
    ls_state own;
    if (!x->b->old_supplied) {
        st = capture_into(x, x->p, &own, 0);
        if (st == LS_OK) {
            int64_t t0;
            begin(x->obs, PH_SCORE, &t0);
            st = score_all(x, x->p, &own, x->b->old_lp);
            end(x->obs, PH_SCORE, t0, st == LS_OK, x->res);
            x->p->fam->state_free(&own);
        }
    }
    if (st == LS_OK && use_ref) st = score_reference(x, NULL, NULL);
    return st;
}

static ls_status advantages(txn *x) {
    ls_batch *b = x->b;
    ls_real *A = ls_mem_alloc(LS_MEM_SCORE, R_(b->G)), *rw = ls_mem_alloc(LS_MEM_SCORE, R_(b->G));
    ls_status st = A && rw ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK) {
        for (size_t i = 0; i < b->G; i++) rw[i] = (ls_real)b->rewards[i];
        LS_K(ls_grpo_advantages)(A, rw, b->G);
        for (size_t i = 0; i < b->G; i++) b->adv[i] = (double)A[i];
    }
    ls_mem_free(A);
    ls_mem_free(rw);
    return st;
}

/* Taped forward of one sequence (member i of b: a branch from ps, or the
 * naive full sequence), its loss and backward.  dps: prompt-state gradient
 * (NULL: detached).  The naive sequence in `detached` mode cuts its gradient
 * at the carried state (positions < P-1): the stop-gradient reference, one
 * sequence under autograd.  sft_w [R] (NULL: GRPO): the weighted
 * cross-entropy -sum_t w_t logp_t / n instead, n the tokens with w_t > 0
 * (the weights carry the branch's share of the loss).  have_ref: the batch
 * holds reference log-probs (else KL is zero). */
static ls_status replay_member(txn *x, const ls_batch *b, size_t i, const double *sft_w, int have_ref,
                               double *loss, size_t *tape_bytes) {
    const ls_params *p = x->p;
    size_t R = b->R[i], P = b->P;
    int naive = x->naive;
    size_t T = naive ? P + R - 1 : R;
    int32_t *in = ls_mem_alloc(LS_MEM_BRANCH, T * sizeof *in);
    ls_real *lp = ls_mem_alloc(LS_MEM_BRANCH, R_(R) * 4);
    double *lpd = ls_mem_alloc(LS_MEM_BRANCH, R * sizeof *lpd);
    ls_seg_tape *tape = NULL;
    ls_replay_chunks *chunks = NULL;
    int chunked = ls_step_replay_chunk(x->o) > 0; /* --replay-checkpoint chunk (replay_chunk.h) */
    hook_ctx hk = {x->obs, "replay", x->m0 + (int)i};
    ls_status st = LS_ERR_NOMEM;
    if (!in || !lp || !lpd) goto cleanup;
    ls_real *dlp = lp + R, *t_old = lp + 2 * R, *t_ref = lp + 3 * R;
    if (naive) {
        memcpy(in, b->prompt, P * sizeof *in);
        memcpy(in + P, b->resp[i], (R - 1) * sizeof *in);
    } else {
        in[0] = b->prompt[P - 1];
        memcpy(in + 1, b->resp[i], (R - 1) * sizeof *in);
    }
    ls_seg_io io = {.tokens = in, .T = T, .pos0 = naive ? 0 : (int64_t)P - 1, .ctx = naive ? NULL : x->ps,
                    .targets = b->resp[i], .score_from = naive ? P - 1 : 0, .logp = lp, .tape = &tape,
                    .tape_cat = LS_MEM_BRANCH, .hook = hook_fn, .hook_user = &hk,
                    .grad_cut = naive && !x->full ? P - 1 : 0, .checkpointed = x->o->replay_checkpoint == 1};
    st = chunked ? LS_K(ls_replay_chunks_forward)(p, x->ps, in, T, io.pos0, b->resp[i], x->o->replay_chunk, lp,
                                                  hook_fn, &hk, &chunks)
                 : p->fam->segment_forward(p, &io);
    if (st != LS_OK) goto cleanup;
    for (size_t t = 0; t < R; t++) lpd[t] = (double)lp[t];
    if (sft_w) {
        size_t nv = 0;
        for (size_t t = 0; t < R; t++) nv += sft_w[t] > 0;
        double n = nv ? (double)nv : 1, s = 0;
        for (size_t t = 0; t < R; t++) {
            s -= sft_w[t] * lpd[t];
            dlp[t] = (ls_real)(-sft_w[t] / n);
        }
        *loss += s / n;
    } else {
        for (size_t t = 0; t < R; t++) {
            t_old[t] = (ls_real)b->old_lp[i][t];
            t_ref[t] = have_ref ? (ls_real)b->ref_lp[i][t] : lp[t];
        }
        *loss += LS_K(ls_grpo_member_loss)(dlp, lp, t_old, t_ref, (ls_real)b->adv[i], (ls_real)p->obj.epsilon,
                                          (ls_real)p->obj.beta, b->G, R);
        ls_grpo_stats_add(&x->gs, lpd, b->old_lp[i], have_ref ? b->ref_lp[i] : lpd, b->adv[i], p->obj.epsilon,
                          p->obj.beta, b->G, R);
    }
    if (x->B > 1) /* the step's loss is the mean over its groups (docs/model.md §4) */
        for (size_t t = 0; t < R; t++) dlp[t] *= (ls_real)(1.0 / (double)x->B);
    if (chunked) {
        st = LS_K(ls_replay_chunks_backward)(chunks, dlp, x->pb ? &x->dps : NULL);
        if (tape_bytes) *tape_bytes = LS_K(ls_replay_chunks_bytes)(chunks);
    } else {
        st = p->fam->segment_backward(p, tape, dlp, x->pb && !naive ? &x->dps : NULL, NULL, hook_fn, &hk);
        if (tape_bytes) *tape_bytes = p->fam->tape_bytes(tape);
    }
    x->res->phase_tokens[PH_REPLAY] += (int64_t)R;
    x->res->tokens += (int64_t)R;
cleanup:
    if (tape) p->fam->tape_free(tape);
    LS_K(ls_replay_chunks_free)(chunks);
    ls_mem_free(lpd);
    ls_mem_free(lp);
    ls_mem_free(in);
    return st;
}

/* The SFT replay: G teacher-forced branches from the one captured state,
 * each the task's answers (ls_task_sft_target) in its own order, the
 * cross-entropy on the value bytes averaged over the branches. */
static ls_status replay_sft(txn *x, size_t *tape_bytes) {
    ls_batch *sb = NULL;
    ls_status st = ls_batch_alloc(&sb, 1);
    if (st == LS_OK) st = ls_batch_set_prompt(sb, x->b->prompt, x->b->P);
    size_t G = x->b->G;
    for (size_t i = 0; st == LS_OK && i < G; i++) {
        int32_t *seq = NULL;
        double *w = NULL;
        size_t n = 0, tb = 0;
        st = ls_task_sft_target(x->task, i ? ls_rng_derive(x->o->seed, "sft") + i : 0, &seq, &w, &n);
        for (size_t t = 0; st == LS_OK && t < n; t++) w[t] /= (double)G;
        double loss = 0;
        if (st == LS_OK) st = ls_batch_set_response(sb, 0, seq, n);
        if (st == LS_OK) st = replay_member(x, sb, 0, w, 0, &loss, &tb);
        x->res->loss += loss;
        if (tb > *tape_bytes) *tape_bytes = tb;
        ls_mem_free(seq);
        ls_mem_free(w);
        progress(x->obs, PH_REPLAY, i + 1, G);
    }
    ls_batch_free(sb);
    return st;
}

static ls_status fail(ls_status st, char *err, size_t err_len, const char *what) {
    snprintf(err, err_len, "%s failed: %s", what, ls_status_str(st));
    return st;
}

/* The figures of the step_metrics event that the phases did not set. */
static void finish_metrics(txn *x) {
    ls_step_result *r = x->res;
    ls_batch *b = x->b;
    double *v = ls_mem_alloc(LS_MEM_SCORE, b->G * sizeof *v);
    if (v) {
        double u1, u2, u3;
        ls_stats_moments(b->rewards, b->G, &r->reward_mean, &r->reward_std, &r->reward_min, &r->reward_max);
        ls_stats_moments(b->adv, b->G, &r->adv_mean, &r->adv_std, &u1, &u2);
        for (size_t i = 0; i < b->G; i++) v[i] = (double)b->R[i];
        ls_stats_moments(v, b->G, &r->response_len_mean, &u1, &u2, &u3);
        ls_mem_free(v);
    }
    if (r->has_reward_parts) {
        r->reward_retrieval = x->rr_sum / (double)b->G;
        r->reward_format = x->rf_sum / (double)b->G;
    }
    const ls_grpo_stats *g = &x->gs;
    if (x->sft || g->tokens == 0) {
        r->loss_policy = r->loss;
        r->ratio_min = r->ratio_mean = r->ratio_max = 1;
    } else {
        r->loss_policy = g->loss_policy;
        r->loss_kl = g->loss_kl;
        r->kl_mean = g->kl_sum / (double)g->tokens;
        r->clip_fraction = (double)g->clipped / (double)g->tokens;
        r->ratio_min = g->ratio_min;
        r->ratio_mean = g->ratio_sum / (double)g->tokens;
        r->ratio_max = g->ratio_max;
    }
}

ls_status LS_K(ls_step_grads)(ls_params *p, ls_batch *b, const ls_task *task, const ls_step_options *o,
                              const ls_step_observer *obs, ls_step_result *res, char *err, size_t err_len) {
    return LS_K(ls_step_grads_prefix)(p, b, task, o, obs, NULL, res, err, err_len);
}

/* Capture (LongStraw always; naive only to roll out) and rollout.  The
 * reference goes first when the responses are known, so that its state is
 * gone before the policy's; a rollout that the reference must follow
 * captures without checkpoints (the policy is captured again after it). */
static ls_status phase_capture_rollout(txn *x, ls_step_prefix *pf, const char **what) {
    ls_batch *b = x->b;
    ls_status st = LS_OK;
    int64_t t0;
    *what = "reference scoring";
    if (x->use_ref && !x->need_rollout && !x->naive && !pf && (st = score_reference(x, NULL, NULL)) != LS_OK)
        return st;
    *what = "capture";
    int recapture = x->use_ref && x->need_rollout && !x->naive && !pf && x->o->keep_reference != 1;
    if (pf && pf->have_ps) { /* stale: captured before an update */
        x->ps = &pf->ps;
        x->res->prefix_frozen = 1;
        x->res->prompt_state_bytes = x->p->fam->state_bytes(x->ps);
        x->res->prompt_state_analytical = x->p->fam->state_plan_bytes(&x->p->cfg, (int64_t)b->P - 1);
    } else if (!x->naive || x->need_rollout) {
        if ((st = capture_policy(x, x->pb && !x->naive && !recapture)) != LS_OK) return st;
        if (pf) { /* the prefix owns it from here */
            pf->ps = x->own_ps;
            pf->have_ps = 1;
            memset(&x->own_ps, 0, sizeof x->own_ps);
            x->ps = &pf->ps;
        }
        if (x->o->fault_untracked_alloc) { /* deliberately outside the tracker, every page touched */
            size_t n = (b->P - 1) * (size_t)x->p->cfg.d_model * (size_t)x->p->cfg.n_layers * sizeof(ls_real);
            if (!*x->untracked && (*x->untracked = malloc(n)) != NULL) memset(*x->untracked, 0x5a, n);
        }
    }
    if (x->need_rollout) {
        *what = "rollout";
        begin(x->obs, PH_ROLLOUT, &t0);
        st = do_rollout(x);
        end(x->obs, PH_ROLLOUT, t0, st == LS_OK, x->res);
    }
    if (x->naive) release_policy(x); /* the naive strategy keeps no prompt state */
    for (size_t i = 0; i < b->G; i++) x->res->mean_reward += b->rewards[i] / (double)b->G;
    return st;
}

/* Old-policy scores (unless supplied), the reference's when it follows a
 * rollout, advantages. */
static ls_status phase_score(txn *x, ls_step_prefix *pf) {
    ls_batch *b = x->b;
    ls_status st = LS_OK;
    int64_t t0;
    if (x->naive) {
        st = score_naive(x, x->use_ref);
    } else if (!b->old_supplied) {
        begin(x->obs, PH_SCORE, &t0);
        st = score_all(x, x->p, x->ps, b->old_lp);
        end(x->obs, PH_SCORE, t0, st == LS_OK, x->res);
    }
    if (st == LS_OK && x->use_ref && x->need_rollout && !x->naive) {
        if (pf) {
            st = score_reference(x, &pf->rps, &pf->have_rps);
        } else if (x->o->keep_reference == 1) { /* the reference's state beside the policy's */
            st = score_reference(x, NULL, NULL);
            x->res->reference_kept = st == LS_OK;
        } else { /* one prompt state at a time: policy off, reference, policy again */
            release_policy(x);
            st = score_reference(x, NULL, NULL);
            if (st == LS_OK) st = capture_policy(x, x->pb);
        }
    }
    if (st == LS_OK) st = advantages(x);
    if (!x->use_ref && !b->ref_supplied) /* no reference: the dump's ref rows are the old policy's */
        for (size_t i = 0; i < b->G; i++) memcpy(b->ref_lp[i], b->old_lp[i], b->R[i] * sizeof(double));
    return st;
}

/* Replay every member (or the SFT branches), then the prompt backward. */
static ls_status phase_replay_group(txn *x, const char **what) {
    ls_batch *b = x->b;
    ls_step_result *res = x->res;
    ls_status st = LS_OK;
    int64_t t0;
    *what = "replay";
    begin(x->obs, PH_REPLAY, &t0);
    if (x->pb && !x->naive) st = x->p->fam->state_grad_like(&x->dps, x->ps, LS_MEM_PROMPT_GRAD);
    if (x->sft && st == LS_OK) {
        st = replay_sft(x, &res->max_branch_bytes);
    } else {
        int have_ref = x->use_ref || b->ref_supplied;
        for (size_t i = 0; st == LS_OK && i < b->G; i++) {
            size_t tb = 0;
            st = replay_member(x, b, i, NULL, have_ref, &res->loss, &tb);
            if (tb > res->max_branch_bytes) res->max_branch_bytes = tb;
            progress(x->obs, PH_REPLAY, i + 1, b->G);
        }
    }
    end(x->obs, PH_REPLAY, t0, st == LS_OK, res);
    /* the replicated gradients aside (summed over the step's groups in *stash): the prompt backward's (and
       a family's shard-local response part, family.h cp_shard_grads, in both modes) are summed by finalize */
    const ls_family_ops *fam = x->p->fam;
    if (st == LS_OK && x->use_cp && !x->naive && (x->full || fam->cp_shard_grads)) {
        ls_params *p = x->p;
        size_t n = 0, off = 0;
        for (size_t i = 0; i < p->n; i++) n += p->t[i].trainable && !p->t[i].ep_remote ? p->t[i].numel : 0;
        int first = x->gsave == NULL;
        if (!first) { /* a later group: its replay added into the stash itself; the own .g back */
            for (size_t i = 0; i < p->n; i++)
                if (p->t[i].trainable && !p->t[i].ep_remote) p->t[i].g = x->gsave[i];
            x->gsave = NULL;
        } else if (!(*x->stash = ls_mem_alloc(LS_MEM_GRADS, R_(n ? n : 1)))) {
            st = LS_ERR_NOMEM;
        }
        for (size_t i = 0; first && st == LS_OK && i < p->n; i++) { /* the first group: .g into the stash */
            if (!p->t[i].trainable || p->t[i].ep_remote) continue; /* EP: held tensors only (ep.h) */
            memcpy(*x->stash + off, p->t[i].g, R_(p->t[i].numel));
            memset(p->t[i].g, 0, R_(p->t[i].numel));
            off += p->t[i].numel;
        }
        if (st == LS_OK && fam->cp_shard_grads) st = fam->cp_shard_grads(x->cp, p);
    }
    if (st != LS_OK || !x->pb || x->naive) return st;
    *what = "prompt backward";
    if (!x->full) { /* a detached step's measurement (grad_cosine.h): no phase, no layer events, no figure */
        LS_K(ls_grad_cosine_before_prompt)(x->gc, x->p);
        st = x->p->fam->prompt_backward(x->p, b->prompt, b->P - 1, x->o->capture_chunk, x->ckpt, x->ps, &x->dps,
                                        LS_MEM_SCRATCH, NULL, NULL);
        LS_K(ls_grad_cosine_after_prompt)(x->gc, x->p);
        return st;
    }
    if (x->gc) LS_K(ls_grad_cosine_before_prompt)(x->gc, x->p);
    begin(x->obs, PH_PROMPT_BWD, &t0);
    hook_ctx hk = {x->obs, "prompt_bwd", -1};
    if (x->use_cp) {
        if (st == LS_OK)
            st = LS_K(ls_cp_prompt_backward)(x->cp, x->p, b->prompt, x->o->capture_chunk, x->ckpt, x->ps, &x->dps,
                                             hook_fn, &hk);
        res->phase_tokens[PH_PROMPT_BWD] += x->cp->s1 - x->cp->s0;
    } else {
        st = x->p->fam->prompt_backward(x->p, b->prompt, b->P - 1, x->o->capture_chunk, x->ckpt, x->ps, &x->dps,
                                        LS_MEM_SCRATCH, hook_fn, &hk);
        res->phase_tokens[PH_PROMPT_BWD] += (int64_t)(b->P - 1);
    }
    end(x->obs, PH_PROMPT_BWD, t0, st == LS_OK, res);
    if (x->gc) LS_K(ls_grad_cosine_after_prompt)(x->gc, x->p);
    return st;
}

/* A group's replay and prompt backward.  Under CP with a shard-local part
 * the groups' two kinds of gradients are summed apart without another
 * params-sized buffer: a later group's replay writes its replicated part
 * straight into the step's stash (each tensor's .g pointed into it), while
 * .g itself keeps the shard-local sum of the groups before; the pointers
 * return before that group's shard-local part is added (phase_replay_group),
 * so that one finalize reduces the shard-local sum over the ranks and adds
 * the replicated sum once. */
static ls_status phase_replay(txn *x, const char **what) {
    ls_params *p = x->p;
    int split = x->use_cp && !x->naive && (x->full || p->fam->cp_shard_grads);
    ls_real **save = NULL;
    if (split && *x->stash) {
        if (!(save = ls_mem_alloc(LS_MEM_SCRATCH, (p->n ? p->n : 1) * sizeof *save))) {
            *what = "replay";
            return LS_ERR_NOMEM;
        }
        size_t off = 0;
        for (size_t i = 0; i < p->n; i++) {
            save[i] = p->t[i].g;
            if (!p->t[i].trainable || p->t[i].ep_remote) continue;
            p->t[i].g = *x->stash + off;
            off += p->t[i].numel;
        }
        x->gsave = save;
    }
    ls_status st = phase_replay_group(x, what);
    if (x->gsave) { /* the replay failed before the pointers returned */
        for (size_t i = 0; i < p->n; i++) p->t[i].g = x->gsave[i];
        x->gsave = NULL;
    }
    ls_mem_free(save);
    return st;
}

/* Finalize: under CP the cross-rank reductions (cp.h), then the check
 * that every gradient is finite (and the step's loss, res->loss). */
static ls_status phase_finalize(ls_params *p, const ls_step_options *o, const ls_step_observer *obs, ls_cp *cp,
                                ls_real *stash, ls_step_result *res, char *err, size_t err_len) {
    int64_t t0;
    if (o->fault_nan_grad)
        for (size_t i = 0; i < p->n; i++)
            if (p->t[i].trainable && !p->t[i].ep_remote) {
                p->t[i].g[0] = (ls_real)NAN;
                break;
            }
    begin(obs, PH_FINALIZE, &t0);
    if (cp) {
        ls_status st = LS_K(ls_cp_finalize)(cp, p, stash, &res->grads_agree);
        if (st != LS_OK) {
            end(obs, PH_FINALIZE, t0, 0, res);
            snprintf(err, err_len, "finalize failed: %s", ls_status_str(st));
            return st;
        }
    }
    /* EP: the whole table's norm, the experts' sums from their owners (ep_grad_gather over the EP group, in
     * this phase: the audit's collectives.finalize requires it of every step) */
    const ls_ep *ep = LS_K(ls_ep_get)();
    if (ep != NULL) {
        double sumsq = 0;
        ls_status st = LS_K(ls_ep_grad_sumsq)(ep, p, &sumsq);
        if (st != LS_OK) {
            end(obs, PH_FINALIZE, t0, 0, res);
            snprintf(err, err_len, "expert parallelism: the gradient norm's gather failed: %s", ls_status_str(st));
            return st;
        }
        res->grad_norm = sqrt(sumsq);
    } else {
        res->grad_norm = sqrt(LS_K(ls_params_grad_sumsq)(p));
    }
    int finite = isfinite(res->loss) && LS_K(ls_params_grads_finite)(p);
    end(obs, PH_FINALIZE, t0, finite, res);
    if (finite) return LS_OK;
    snprintf(err, err_len, "non-finite %s (loss %g): no optimizer step", isfinite(res->loss) ? "gradient" : "loss",
             res->loss);
    return LS_ERR_NONFINITE;
}

/* What the step's groups add up to (B > 1): sums, maxima, the loss and its
 * parts as the mean over the groups, the reward, advantage and length
 * moments over every member of every group, KL, clip and ratios over every
 * token.  gs: the groups' statistics merged; rr, rf: the reward parts summed
 * over every member. */
typedef struct {
    double *rew, *adv, *len; /* [members] */
    size_t n;
    ls_grpo_stats gs;
    double rr, rf;
} step_sums;

static void sums_add(step_sums *a, const txn *x) {
    const ls_batch *b = x->b;
    for (size_t i = 0; i < b->G; i++, a->n++) {
        a->rew[a->n] = b->rewards[i];
        a->adv[a->n] = b->adv[i];
        a->len[a->n] = (double)b->R[i];
    }
    const ls_grpo_stats *g = &x->gs;
    a->gs.loss_policy += g->loss_policy;
    a->gs.loss_kl += g->loss_kl;
    a->gs.kl_sum += g->kl_sum;
    a->gs.ratio_sum += g->ratio_sum;
    if (g->ratio_min < a->gs.ratio_min) a->gs.ratio_min = g->ratio_min;
    if (g->ratio_max > a->gs.ratio_max) a->gs.ratio_max = g->ratio_max;
    a->gs.tokens += g->tokens;
    a->gs.clipped += g->clipped;
    a->rr += x->rr_sum;
    a->rf += x->rf_sum;
}

static void aggregate(ls_step_result *r, const ls_step_result *gr, size_t B, const step_sums *a, int sft) {
    double u1, u2, u3, inv = 1.0 / (double)B;
    for (size_t b = 0; b < B; b++) {
        const ls_step_result *g = &gr[b];
        for (int k = 0; k < 8; k++) {
            r->phase_ns[k] += g->phase_ns[k];
            r->phase_tokens[k] += g->phase_tokens[k];
        }
        r->tokens += g->tokens;
        r->captures += g->captures;
        r->loss += g->loss * inv;
        r->mean_reward += g->mean_reward * inv;
        if (g->prompt_state_bytes > r->prompt_state_bytes) r->prompt_state_bytes = g->prompt_state_bytes;
        if (g->prompt_state_analytical > r->prompt_state_analytical)
            r->prompt_state_analytical = g->prompt_state_analytical;
        if (g->max_branch_bytes > r->max_branch_bytes) r->max_branch_bytes = g->max_branch_bytes;
        r->has_reward_parts |= g->has_reward_parts;
        r->used_reference |= g->used_reference;
        r->reference_kept |= g->reference_kept;
        r->prefix_frozen |= g->prefix_frozen;
    }
    ls_stats_moments(a->rew, a->n, &r->reward_mean, &r->reward_std, &r->reward_min, &r->reward_max);
    ls_stats_moments(a->adv, a->n, &r->adv_mean, &r->adv_std, &u1, &u2);
    ls_stats_moments(a->len, a->n, &r->response_len_mean, &u1, &u2, &u3);
    if (r->has_reward_parts && a->n) {
        r->reward_retrieval = a->rr / (double)a->n;
        r->reward_format = a->rf / (double)a->n;
    }
    if (sft || a->gs.tokens == 0) {
        r->loss_policy = r->loss;
        r->ratio_min = r->ratio_mean = r->ratio_max = 1;
    } else {
        r->loss_policy = a->gs.loss_policy * inv;
        r->loss_kl = a->gs.loss_kl * inv;
        r->kl_mean = a->gs.kl_sum / (double)a->gs.tokens;
        r->clip_fraction = (double)a->gs.clipped / (double)a->gs.tokens;
        r->ratio_min = a->gs.ratio_min;
        r->ratio_mean = a->gs.ratio_sum / (double)a->gs.tokens;
        r->ratio_max = a->gs.ratio_max;
    }
}

/* One group of the step: its capture, rollout, scoring, replay and prompt
 * backward, its states freed before it returns; its metrics in x->res.
 * The gradients add into .g (and, under CP, *x->stash). */
/* The decisions this group's step took (LS_STEP_PATH_*), as phase_capture_rollout and phase_score made them. */
static unsigned group_paths(const txn *x, const ls_step_prefix *pf) {
    const ls_batch *b = x->b;
    unsigned replay = x->o->replay_checkpoint == 1                ? LS_STEP_PATH_REPLAY_LAYER
                      : x->o->replay_checkpoint == 2 && !x->naive ? LS_STEP_PATH_REPLAY_CHUNK
                                                                  : LS_STEP_PATH_REPLAY_TAPED;
    if (x->sft) return replay | LS_STEP_PATH_RESP_TARGET | LS_STEP_PATH_OLD_NONE | LS_STEP_PATH_REF_NONE;
    unsigned m = replay | (x->need_rollout ? LS_STEP_PATH_RESP_SAMPLED : LS_STEP_PATH_RESP_GIVEN);
    m |= b->old_supplied ? LS_STEP_PATH_OLD_GIVEN : LS_STEP_PATH_OLD_COMPUTED;
    if (!x->use_ref) m |= b->ref_supplied ? LS_STEP_PATH_REF_GIVEN : LS_STEP_PATH_REF_NONE;
    else if (x->naive) m |= LS_STEP_PATH_REF_NAIVE;
    else if (!x->need_rollout) m |= LS_STEP_PATH_REF_BEFORE;
    else if (pf) m |= LS_STEP_PATH_REF_PREFIX;
    else if (x->o->keep_reference == 1) m |= LS_STEP_PATH_REF_KEPT;
    else m |= LS_STEP_PATH_REF_RECAPTURED;
    return m;
}

static ls_status run_group(txn *x, ls_step_prefix *pf, char *err, size_t err_len) {
    ls_grpo_stats_init(&x->gs);
    const char *what = "capture";
    ls_status st = phase_capture_rollout(x, pf, &what);
    if (st == LS_OK && !x->sft && (st = phase_score(x, pf)) != LS_OK) what = "score";
    if (st == LS_OK) st = phase_replay(x, &what);
    if (st != LS_OK) fail(st, err, err_len, what);
    x->p->fam->state_free(&x->dps);
    release_policy(x);
    if (st == LS_OK) finish_metrics(x);
    if (st == LS_OK) x->res->paths = group_paths(x, pf);
    return st;
}

ls_status LS_K(ls_step_grads_groups)(ls_params *p, ls_batch *const *bs, const ls_task *const *tasks, size_t B,
                                     const ls_step_options *o, const ls_step_observer *obs, ls_step_prefix *pf,
                                     ls_step_result *res, ls_step_result *group_res, char *err, size_t err_len) {
    ls_step_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    int naive = o->strategy == LS_STRATEGY_NAIVE, full = p->obj.grad_mode == LS_GRAD_FULL;
    int sft = o->objective == LS_OBJECTIVE_SFT;
    int use_cp = o->cp_group && ls_group_size(o->cp_group) > 1;
    if (B < 1 || !bs) {
        snprintf(err, err_len, "a step needs at least one group");
        return LS_ERR_ARG;
    }
    if (use_cp && (naive || pf)) {
        snprintf(err, err_len, "%s runs on one rank (start it without mpirun)",
                 naive ? "the naive strategy" : "a prefix-frozen step");
        return LS_ERR_ARG;
    }
    if (pf && B > 1) {
        snprintf(err, err_len, "a prefix-frozen step holds one group (prompts per step 1)");
        return LS_ERR_ARG;
    }
    if (o->grad_cosine && (use_cp || naive || pf || LS_K(ls_ep_get)() != NULL)) {
        snprintf(err, err_len, "the gradient cosine (--grad-cosine-every) needs one rank, the longstraw strategy and "
                 "no frozen prefix");
        return LS_ERR_ARG;
    }
    size_t members = 0;
    for (size_t b = 0; b < B; b++) {
        const ls_task *t = tasks ? tasks[b] : NULL;
        if ((sft || bs[b]->resp[0] == NULL) && !t) {
            snprintf(err, err_len, "%s needs the built-in task", sft ? "the sft objective" : "a rollout");
            return LS_ERR_ARG;
        }
        if (use_cp && bs[b]->P != bs[0]->P) {
            snprintf(err, err_len, "group %zu's prompt has %zu tokens, group 0's %zu: under context parallelism "
                     "a step's groups share one prompt length", b + 1, bs[b]->P, bs[0]->P);
            return LS_ERR_ARG;
        }
        members += bs[b]->G;
    }
    ls_cp cp;
    if (use_cp) {
        ls_status cst = LS_K(ls_cp_init)(&cp, o->cp_group, p, (int64_t)bs[0]->P - 1, &o->cp_faults, err, err_len);
        if (cst != LS_OK) return cst;
    }
    if (pf && (naive || full)) {
        snprintf(err, err_len, "a prefix-frozen step needs the longstraw strategy and detached gradients");
        if (use_cp) LS_K(ls_cp_free)(&cp);
        return LS_ERR_ARG;
    }
    ls_step_result *gr = group_res;
    step_sums sums = {0};
    ls_grpo_stats_init(&sums.gs);
    ls_status st = LS_OK;
    if (B > 1) { /* the aggregate's scratch: per-group results (unless the caller's) and every member's figures */
        if (!gr) gr = ls_mem_alloc(LS_MEM_SCORE, B * sizeof *gr);
        sums.rew = ls_mem_alloc(LS_MEM_SCORE, 3 * members * sizeof(double));
        if (!gr || !sums.rew) st = LS_ERR_NOMEM;
        else {
            sums.adv = sums.rew + members;
            sums.len = sums.adv + members;
        }
    } else if (!gr) {
        gr = res;
    }
    ls_mem_track_kernel_scratch(); /* kernel tile scratch shows under "scratch" */
    LS_K(ls_params_zero_grads)(p);
    ls_grad_cosine gc = {0};
    if (st == LS_OK && o->grad_cosine && (st = LS_K(ls_grad_cosine_init)(&gc, p, full)) != LS_OK)
        snprintf(err, err_len, "the gradient cosine's buffers: %s", ls_status_str(st));
    ls_real *stash = NULL;
    void *untracked = NULL;
    int m0 = 0;
    for (size_t b = 0; st == LS_OK && b < B; b++) {
        ls_step_options og = *o;
        if (b > 0) og.seed = ls_rng_derive(o->seed, "group") + (uint64_t)b; /* group 0: the step's seed */
        ls_step_result *g = &gr[b];
        memset(g, 0, sizeof *g);
        txn x = {.p = p, .b = bs[b], .task = tasks ? tasks[b] : NULL, .o = &og, .obs = obs, .res = g, .full = full,
                 .naive = naive, .sft = sft, .need_rollout = bs[b]->resp[0] == NULL, .use_cp = use_cp,
                 .pb = full || o->grad_cosine, .gc = o->grad_cosine ? &gc : NULL,
                 .cp = use_cp ? &cp : NULL, .stash = &stash, .untracked = &untracked, .B = B,
                 .m0 = sft ? (int)b : m0}; /* SFT: one traced member per group (its answer branches share it) */
        x.use_ref = !sft && p->obj.beta > 0 && !bs[b]->ref_supplied;
        if (use_cp) {
            g->cp_world = cp.world;
            g->shard_begin = cp.s0;
            g->shard_end = cp.s1;
        }
        st = run_group(&x, pf, err, err_len);
        if (st == LS_OK && B > 1) sums_add(&sums, &x);
        m0 += (int)bs[b]->G;
    }
    if (st == LS_OK) {
        if (B > 1) aggregate(res, gr, B, &sums, sft);
        else if (gr != res) *res = *gr;
        unsigned paths = 0; /* gr may be res itself (B = 1) */
        for (size_t b = 0; b < B; b++) paths |= gr[b].paths;
        res->paths = paths;
        if (use_cp) {
            res->cp_world = cp.world;
            res->shard_begin = cp.s0;
            res->shard_end = cp.s1;
        }
        st = phase_finalize(p, o, obs, use_cp ? &cp : NULL, stash, res, err, err_len);
        if (st == LS_OK && o->grad_cosine) LS_K(ls_grad_cosine_finish)(&gc, p, res);
    }
    LS_K(ls_grad_cosine_free)(&gc);
    free(untracked);
    ls_mem_free(stash);
    ls_mem_free(sums.rew);
    if (gr != group_res && gr != res) ls_mem_free(gr);
    if (use_cp) LS_K(ls_cp_free)(&cp);
    return st;
}

ls_status LS_K(ls_step_grads_prefix)(ls_params *p, ls_batch *b, const ls_task *task, const ls_step_options *o,
                                     const ls_step_observer *obs, ls_step_prefix *pf, ls_step_result *res,
                                     char *err, size_t err_len) {
    ls_batch *const bs[1] = {b};
    const ls_task *const ts[1] = {task};
    return LS_K(ls_step_grads_groups)(p, bs, ts, 1, o, obs, pf, res, NULL, err, err_len);
}

void LS_K(ls_step_prefix_free)(ls_step_prefix *f) {
    if (!f) return;
    if (f->have_ps) LS_K(ls_state_free)(&f->ps);
    if (f->have_rps) LS_K(ls_state_free)(&f->rps);
    memset(f, 0, sizeof *f);
}
