/* plan.c - the step plan: the family's terms (family.h) assembled phase by
 * phase as the transaction (trainer/step/step_txn.c) runs them. */
#include "trainer/plan/plan.h"

#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "trainer/families/families.h"

void LS_K(ls_plan_in_defaults)(ls_plan_in *in, const ls_model_config *cfg) {
    memset(in, 0, sizeof *in);
    in->cfg = cfg;
    ls_objective_defaults(&in->obj);
    in->strategy = LS_STRATEGY_LONGSTRAW;
    in->P = in->R = in->G = 1;
    in->world = 1;
    in->ep = 1;
    in->page_size = 64;
    in->capture_chunk = 2048;
    in->compute_bytes = in->state_bytes = sizeof(ls_real);
    in->rollout = 1;
    in->keep_reference = -1;
    in->replay_checkpoint = -1;
    in->cp_rank = -1;
}

static void add_cats(size_t *dst, const size_t *src) {
    for (int k = 0; k < LS_MEM_COUNT; k++) dst[k] = ls_sat_add(dst[k], src[k]);
}

/* The device tier's total (the host tier's category apart: ls_plan.host_peak). */
static size_t total_of(const size_t *b) {
    size_t t = 0;
    for (int k = 0; k < LS_MEM_COUNT; k++)
        if (ls_mem_cat_tier((ls_mem_cat)k) == LS_TIER_DEVICE) t = ls_sat_add(t, b[k]);
    return t;
}

/* --state-tier host: phase p's prompt state in the host tier, its staged shares in the device tier. */
static void to_host(size_t *ph, size_t stage) {
    ph[LS_MEM_PROMPT_STATE_HOST] = ls_sat_add(ph[LS_MEM_PROMPT_STATE_HOST], ph[LS_MEM_PROMPT_STATE]);
    ph[LS_MEM_PROMPT_STATE] = 0;
    ph[LS_MEM_STAGING] = ls_sat_add(ph[LS_MEM_STAGING], stage);
}

/* The parameter blocks (params.c) with element size esz: weights (and the
 * frozen reference copy), adapters, gradients and two AdamW moments of the
 * trainable scalars, and the parameter tables; under expert parallelism one
 * EP rank's: the routed experts' terms divided by ep (params.h
 * ls_params_init_ep_of). */
static ls_status fixed_bytes(const ls_plan_in *in, size_t fixed[LS_MEM_COUNT], char *err, size_t err_len) {
    ls_param_counts pc;
    int ep = in->ep > 1 ? in->ep : 1;
    ls_status st = ls_config_param_counts_ep(in->cfg, &in->obj, ep, &pc, err, err_len);
    if (st != LS_OK) return st;
    size_t tbl[LS_MEM_COUNT];
    if ((st = LS_K(ls_params_plan_ep)(in->cfg, &in->obj, ep, tbl, err, err_len)) != LS_OK) return st;
    size_t es = in->compute_bytes;
    size_t tables = tbl[LS_MEM_WEIGHTS] - (pc.base + pc.reference) * sizeof(ls_real);
    fixed[LS_MEM_WEIGHTS] = ls_sat_add(ls_sat_mul(ls_sat_add(pc.base, pc.reference), es), tables);
    fixed[LS_MEM_ADAPTERS] = ls_sat_mul(pc.adapters, es);
    fixed[LS_MEM_GRADS] = ls_sat_mul(pc.trainable, es);
    fixed[LS_MEM_OPTIMIZER] = ls_sat_mul3(2, pc.trainable, es);
    return LS_OK;
}

ls_status LS_K(ls_plan_compute)(const ls_plan_in *in, ls_plan *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    const ls_model_config *c = in->cfg;
#define BAD(...) (snprintf(err, err_len, __VA_ARGS__), LS_ERR_ARG)
    if (!c) return BAD("no model config");
    if (in->P < 2) return BAD("prompt length %zu: at least 2 tokens (one position to capture, the last to start the response)", in->P);
    if (in->R < 1) return BAD("response length 0: at least 1");
    if (in->G < 1) return BAD("group size 0: at least 1");
    if (in->world < 1 || (size_t)in->world > in->P - 1)
        return BAD("context-parallel size %d: between 1 and the prompt's %zu positions", in->world, in->P - 1);
    for (int i = 0; i < 2; i++) {
        size_t b = i ? in->state_bytes : in->compute_bytes;
        if (b != 2 && b != 4 && b != 8) return BAD("%s element size %zu: 2, 4 or 8 bytes", i ? "state" : "compute", b);
    }
#undef BAD
    const ls_family_ops *fam = LS_K(ls_family_ops_of)(c->family, err, err_len);
    if (!fam) return LS_ERR_UNSUPPORTED;
    ls_status st = fixed_bytes(in, out->fixed, err, err_len);
    if (st != LS_OK) return st;
    int world = in->world, full = in->obj.grad_mode == LS_GRAD_FULL;
    int naive = in->strategy == LS_STRATEGY_NAIVE;
    size_t n = world > 1 ? (in->P - 1 + (size_t)world - 1) / (size_t)world : in->P - 1; /* cp.h: ceil((P-1)/N) */
    size_t chunk = in->capture_chunk && in->capture_chunk < n ? in->capture_chunk : n;
    out->shard = n;
    ls_family_plan_in fin = {.shard = n, .chunk = chunk, .R = in->R, .G = in->G, .world = world, .ep = in->ep,
                             .moe_chunk = in->moe_chunk,
                             .full = full && !naive,
                             .lora_r = in->obj.train_mode == LS_TRAIN_LORA ? in->obj.lora_r : 0,
                             .expert_lora_r = in->obj.train_mode == LS_TRAIN_LORA && in->obj.lora_experts ? in->obj.lora_r : 0,
                             .esz = in->compute_bytes, .ssz = in->state_bytes, .page_size = in->page_size,
                             .index_sets = in->index_sets, .cp_rank = in->cp_rank};
    ls_family_plan fp, fpc, fpk; /* with the replay taped whole, checkpointed, in chunks */
    fam->plan(c, &fin, &fp);
    ls_family_plan_in cin = fin, kin = fin;
    cin.replay_ckpt = 1;
    fam->plan(c, &cin, &fpc);
    kin.replay_ckpt = 2;
    kin.replay_chunk = in->replay_chunk ? in->replay_chunk : 256;
    fam->plan(c, &kin, &fpk);
    out->state = (ls_plan_state){.attn_kv = fp.attn_kv, .recurrent = fp.recurrent, .latent = fp.latent,
                                 .index_keys = fp.index_keys, .attn_layers = fp.attn_layers,
                                 .recurrent_layers = fp.recurrent_layers, .latent_layers = fp.latent_layers,
                                 .index_sets = fp.index_sets, .pages = fp.pages};
    size_t S = ls_sat_add(ls_sat_add(fp.attn_kv, fp.recurrent), ls_sat_add(fp.latent, fp.index_keys));
    out->state.total = S;
    out->moe_routed_buffer = fp.routed_buffer;
    size_t ckpt = full && !naive ? ls_sat_mul3((size_t)c->n_layers, n, ls_sat_mul((size_t)c->d_model, in->compute_bytes)) : 0;
    /* the score buffers the batch holds for the step: responses, old and reference log-probs */
    size_t batch = ls_sat_mul3(in->G, in->R, 2 * sizeof(double) + sizeof(int32_t));
    int use_ref = in->obj.beta > 0;
    int two_states = in->prefix_frozen && use_ref;
    /* the decisions against the budget, cheapest first: the reference kept (a recapture costs a capture of
       the whole prompt) before the replay taped whole (a checkpointed replay costs one more forward of each
       response); the first candidate that fits, else the last (the smallest) */
    int keeps[2] = {0}, cks[3] = {0, 1, 2}, n_keep = 1, n_ck = 1;
    if (use_ref && in->rollout && !in->prefix_frozen && !naive) {
        if (in->keep_reference >= 0) keeps[0] = in->keep_reference;
        else keeps[0] = 1, n_keep = 2; /* keeps[1] 0 */
    }
    if (in->replay_checkpoint >= 0) cks[0] = naive && in->replay_checkpoint == 2 ? 0 : in->replay_checkpoint;
    else n_ck = naive ? 2 : 3; /* none, layer, chunk (the naive sequence is never chunked) */
    int keep = keeps[0], ck = cks[0];
    size_t pend = fp.capture_pending < S ? fp.capture_pending : S; /* not appended at a capture's peak */
    size_t (*ph)[LS_MEM_COUNT] = out->phase;
    for (int pass = 0; pass < n_keep * n_ck; pass++) {
        keep = keeps[pass / n_ck];
        ck = cks[pass % n_ck];
        /* the replay's terms (and the scoring's: a chunked replay's members are scored in its chunks) */
        const ls_family_plan *rf = ck == 2 ? &fpk : ck ? &fpc : &fp;
        memset(out->phase, 0, sizeof out->phase);
        memset(out->phase_runs, 0, sizeof out->phase_runs);
        out->captures = 0;
        size_t live_state = two_states ? ls_sat_mul(2, S) : S;
        /* capture: the policy's (checkpoints when it is the one replayed: not when the reference is
           captured after it and the policy again after that) */
        int recap = use_ref && in->rollout && !in->prefix_frozen && !naive && !keep;
        size_t ck_first = recap ? 0 : ckpt;
        if (!naive || in->rollout) {
            out->phase_runs[LS_PLAN_CAPTURE] = 1;
            out->captures++;
            ph[LS_PLAN_CAPTURE][LS_MEM_PROMPT_STATE] = live_state - pend;
            ph[LS_PLAN_CAPTURE][LS_MEM_CHECKPOINT] = ck_first;
            add_cats(ph[LS_PLAN_CAPTURE], fp.phase[LS_FPLAN_CAPTURE]);
            ph[LS_PLAN_CAPTURE][LS_MEM_SCORE] = ls_sat_add(ph[LS_PLAN_CAPTURE][LS_MEM_SCORE], batch);
        }
        if (in->rollout) {
            out->phase_runs[LS_PLAN_ROLLOUT] = 1;
            ph[LS_PLAN_ROLLOUT][LS_MEM_PROMPT_STATE] = live_state;
            ph[LS_PLAN_ROLLOUT][LS_MEM_CHECKPOINT] = ck_first;
            add_cats(ph[LS_PLAN_ROLLOUT], fp.phase[LS_FPLAN_ROLLOUT]);
            ph[LS_PLAN_ROLLOUT][LS_MEM_SCORE] = ls_sat_add(ph[LS_PLAN_ROLLOUT][LS_MEM_SCORE], batch);
        }
        if (!naive) {
            out->phase_runs[LS_PLAN_SCORE] = 1;
            ph[LS_PLAN_SCORE][LS_MEM_PROMPT_STATE] = live_state;
            ph[LS_PLAN_SCORE][LS_MEM_CHECKPOINT] = ck_first;
            add_cats(ph[LS_PLAN_SCORE], rf->phase[LS_FPLAN_SCORE]);
            ph[LS_PLAN_SCORE][LS_MEM_SCORE] = ls_sat_add(ph[LS_PLAN_SCORE][LS_MEM_SCORE], batch);
        }
        if (use_ref && !naive) {
            /* kept: the reference is captured beside the policy's state; else (before the policy when the
               responses are known, or between the policy's two captures) alone */
            out->phase_runs[LS_PLAN_REFERENCE] = 1;
            if (!(in->prefix_frozen)) out->captures++;
            size_t *r = ph[LS_PLAN_REFERENCE];
            size_t a[LS_MEM_COUNT] = {0}, b[LS_MEM_COUNT] = {0}; /* its capture's instant, its scoring's */
            add_cats(a, fp.phase[LS_FPLAN_CAPTURE]);
            add_cats(b, rf->phase[LS_FPLAN_SCORE]);
            size_t beside = keep ? S : 0;
            a[LS_MEM_PROMPT_STATE] = ls_sat_add(live_state - pend, beside);
            b[LS_MEM_PROMPT_STATE] = ls_sat_add(live_state, beside);
            for (int i = 0; i < 2; i++) {
                size_t *x = i ? b : a;
                x[LS_MEM_CHECKPOINT] = ls_sat_add(x[LS_MEM_CHECKPOINT], keep ? ck_first : 0);
                x[LS_MEM_SCORE] = ls_sat_add(x[LS_MEM_SCORE], batch);
            }
            memcpy(r, total_of(a) >= total_of(b) ? a : b, sizeof a);
            if (recap) out->captures++; /* the policy again, with its checkpoints */
        }
        /* replay: the state, its gradient (full), checkpoints, one member's branch */
        out->phase_runs[LS_PLAN_REPLAY] = 1;
        size_t *rp = ph[LS_PLAN_REPLAY];
        if (naive) {
            size_t T = ls_sat_add(in->P, in->R);
            ls_family_plan_in nin = ck ? cin : fin;
            nin.R = T;
            nin.full = 0;
            ls_family_plan np;
            fam->plan(c, &nin, &np);
            add_cats(rp, np.phase[LS_FPLAN_REPLAY]);
        } else {
            rp[LS_MEM_PROMPT_STATE] = live_state;
            rp[LS_MEM_CHECKPOINT] = ckpt;
            if (full) rp[LS_MEM_PROMPT_GRAD] = fp.state_grad;
            add_cats(rp, rf->phase[LS_FPLAN_REPLAY]);
        }
        rp[LS_MEM_SCORE] = ls_sat_add(rp[LS_MEM_SCORE], batch);
        if (full && !naive) {
            out->phase_runs[LS_PLAN_PROMPT_BWD] = 1;
            size_t *pb = ph[LS_PLAN_PROMPT_BWD];
            pb[LS_MEM_PROMPT_STATE] = live_state;
            pb[LS_MEM_CHECKPOINT] = ckpt;
            pb[LS_MEM_PROMPT_GRAD] = fp.state_grad;
            add_cats(pb, fp.phase[LS_FPLAN_PROMPT_BWD]);
            pb[LS_MEM_SCORE] = ls_sat_add(pb[LS_MEM_SCORE], batch);
            if (world > 1) pb[LS_MEM_GRADS] = ls_sat_add(pb[LS_MEM_GRADS], out->fixed[LS_MEM_GRADS]); /* the stash */
        }
        if (in->state_tier && !naive) {
            const ls_family_plan *sf = rf;
            size_t ref = fp.stage[LS_FPLAN_CAPTURE] > fp.stage[LS_FPLAN_SCORE] ? fp.stage[LS_FPLAN_CAPTURE]
                                                                               : fp.stage[LS_FPLAN_SCORE];
            to_host(ph[LS_PLAN_CAPTURE], fp.stage[LS_FPLAN_CAPTURE]);
            to_host(ph[LS_PLAN_ROLLOUT], out->phase_runs[LS_PLAN_ROLLOUT] ? fp.stage[LS_FPLAN_ROLLOUT] : 0);
            to_host(ph[LS_PLAN_SCORE], fp.stage[LS_FPLAN_SCORE]);
            to_host(ph[LS_PLAN_REFERENCE], out->phase_runs[LS_PLAN_REFERENCE] ? ref : 0);
            if (out->phase_runs[LS_PLAN_REFERENCE]) /* the host tier's peak in it: both states whole, whichever
                                                       instant the device tier peaks at */
                ph[LS_PLAN_REFERENCE][LS_MEM_PROMPT_STATE_HOST] = ls_sat_add(live_state, keep ? S : 0);
            to_host(ph[LS_PLAN_REPLAY], sf->stage[LS_FPLAN_REPLAY]);
            to_host(ph[LS_PLAN_PROMPT_BWD], out->phase_runs[LS_PLAN_PROMPT_BWD] ? fp.stage[LS_FPLAN_PROMPT_BWD] : 0);
        }
        out->peak_total = 0;
        out->host_peak = 0;
        for (int p = 0; p < LS_PLAN_PHASES; p++) {
            if (out->phase_runs[p] && ph[p][LS_MEM_PROMPT_STATE_HOST] > out->host_peak)
                out->host_peak = ph[p][LS_MEM_PROMPT_STATE_HOST];
        }
        for (int p = 0; p < LS_PLAN_PHASES; p++) {
            if (!out->phase_runs[p]) continue;
            out->phase_total[p] = ls_sat_add(total_of(out->fixed), total_of(ph[p]));
            if (out->phase_total[p] > out->peak_total) {
                out->peak_total = out->phase_total[p];
                out->peak_phase = (ls_plan_phase)p;
            }
        }
        if (pass + 1 < n_keep * n_ck && ((in->budget && !ls_plan_fits(out->peak_total, in->budget)) ||
                                         (in->host_budget && !ls_plan_fits(out->host_peak, in->host_budget))))
            continue;
        break;
    }
    out->keep_reference = keep;
    out->replay_checkpoint = ck;
    for (int k = 0; k < LS_MEM_COUNT; k++) out->peak[k] = ls_sat_add(out->fixed[k], ph[out->peak_phase][k]);
    /* FLOPs per phase (plan_flops.c) */
    int r = fin.lora_r;
    double cap = LS_K(ls_plan_forward_flops)(c, r, in->P - 1, 0) / world; /* a rank's share of one capture */
    double member = LS_K(ls_plan_forward_flops)(c, r, in->R, in->P - 1);
    double G = (double)in->G;
    /* the policy's capture, twice when it is recaptured after the reference's */
    int policy_captures = out->captures - out->phase_runs[LS_PLAN_REFERENCE] * !in->prefix_frozen;
    if (out->phase_runs[LS_PLAN_CAPTURE]) out->flops[LS_PLAN_CAPTURE] = cap * policy_captures;
    if (out->phase_runs[LS_PLAN_ROLLOUT]) out->flops[LS_PLAN_ROLLOUT] = G * member;
    if (out->phase_runs[LS_PLAN_SCORE]) out->flops[LS_PLAN_SCORE] = G * member;
    if (out->phase_runs[LS_PLAN_REFERENCE]) out->flops[LS_PLAN_REFERENCE] = (in->prefix_frozen ? 0 : cap) + G * member;
    out->flops[LS_PLAN_REPLAY] =
        G * (member + LS_K(ls_plan_backward_flops)(c, r, in->R, in->P - 1, 1));
    if (ck == 2) /* in chunks: each chunk's forward again, its head included (its log-probs held to the forward's) */
        out->flops[LS_PLAN_REPLAY] += G * member;
    else if (ck) /* checkpointed: the layers' forward again (not the head: lm_head 2 V d and the log-softmax 3 V a token) */
        out->flops[LS_PLAN_REPLAY] +=
            G * (member - (double)in->R * (2.0 * (double)c->d_model + 3.0) * (double)c->vocab);
    if (out->phase_runs[LS_PLAN_PROMPT_BWD]) {
        double pb = LS_K(ls_plan_backward_flops)(c, r, in->P - 1, 0, 1) + LS_K(ls_plan_forward_flops)(c, r, in->P - 1, 0);
        out->flops[LS_PLAN_PROMPT_BWD] = world > 1 ? pb / world : pb;
    }
    return LS_OK;
}

size_t LS_K(ls_plan_max_prompt)(const ls_plan_in *in, size_t P_max) {
    ls_plan_in t = *in;
    ls_plan pl;
    char err[256];
    size_t lo = (size_t)(in->world > 1 ? in->world : 1) + 1, hi = P_max; /* the shortest prompt every rank holds */
    if (hi < lo) return 0;
    t.P = lo;
    if (!in->budget || LS_K(ls_plan_compute)(&t, &pl, err, sizeof err) != LS_OK || !ls_plan_fits(pl.peak_total, in->budget)) return 0;
    t.P = hi;
    if (LS_K(ls_plan_compute)(&t, &pl, err, sizeof err) == LS_OK && ls_plan_fits(pl.peak_total, in->budget)) return hi;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        t.P = mid;
        if (LS_K(ls_plan_compute)(&t, &pl, err, sizeof err) == LS_OK && ls_plan_fits(pl.peak_total, in->budget)) lo = mid;
        else hi = mid;
    }
    return lo;
}
