/* step.c - the building blocks of a step: prompt capture, scoring one
 * member, token-by-token rollout, AdamW.  The transaction that composes them
 * is step_txn.c. */
#include "trainer/step/step.h"
#include "trainer/step/replay_chunk.h"

#include <string.h>

#include "kernels/grpo.h"
#include "kernels/logprob.h"
#include "trainer/base/rng.h"
#include "trainer/step/sampler.h"

#define R_(n) ((n) * sizeof(ls_real))

ls_status LS_K(ls_capture)(const ls_params *p, const ls_batch *b, size_t page_size, size_t chunk, ls_state *ps,
                           ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook, void *hook_user) {
    if (b->P < 2) return LS_ERR_ARG;
    size_t T = b->P - 1, L = (size_t)p->cfg.n_layers, d = (size_t)p->cfg.d_model;
    if (chunk == 0 || chunk > T) chunk = T;
    ls_status st = p->fam->state_init(ps, p, page_size, cat);
    if (st != LS_OK) return st;
    ls_real **ck = checkpoints ? ls_mem_alloc(LS_MEM_SCRATCH, L * sizeof *ck) : NULL;
    if (checkpoints && !ck) st = LS_ERR_NOMEM;
    /* each chunk is a segment that reads the state so far and appends to it */
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += chunk) {
        size_t n = T - t0 < chunk ? T - t0 : chunk;
        for (size_t l = 0; ck && l < L; l++) ck[l] = checkpoints[l] + t0 * d;
        ls_seg_io io = {.tokens = b->prompt + t0, .T = n, .pos0 = (int64_t)t0, .ctx = t0 ? ps : NULL,
                        .state_out = ps, .checkpoints = ck, .hook = hook, .hook_user = hook_user};
        st = p->fam->segment_forward(p, &io);
    }
    ls_mem_free(ck);
    if (st != LS_OK) p->fam->state_free(ps);
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

ls_status LS_K(ls_score_member)(const ls_params *p, const ls_state *ps, const ls_batch *b, size_t i,
                                double *logp, ls_layer_hook hook, void *hook_user) {
    return LS_K(ls_score_member_chunked)(p, ps, b, i, 0, logp, hook, hook_user);
}

ls_status LS_K(ls_score_member_chunked)(const ls_params *p, const ls_state *ps, const ls_batch *b, size_t i,
                                        size_t chunk, double *logp, ls_layer_hook hook, void *hook_user) {
    size_t R = b->R[i];
    int32_t *in = branch_inputs(b, i, LS_MEM_SCORE);
    ls_real *lp = ls_mem_alloc(LS_MEM_SCORE, R_(R));
    ls_status st = LS_ERR_NOMEM;
    if (in && lp && chunk) {
        st = LS_K(ls_chunks_score)(p, ps, in, R, (int64_t)b->P - 1, b->resp[i], chunk, lp, LS_MEM_SCORE, hook,
                                   hook_user);
        for (size_t t = 0; st == LS_OK && t < R; t++) logp[t] = (double)lp[t];
    } else if (in && lp) {
        ls_seg_io io = {.tokens = in, .T = R, .pos0 = (int64_t)b->P - 1, .ctx = ps,
                        .targets = b->resp[i], .score_from = 0, .logp = lp, .hook = hook,
                        .hook_user = hook_user};
        st = p->fam->segment_forward(p, &io);
        for (size_t t = 0; st == LS_OK && t < R; t++) logp[t] = (double)lp[t];
    }
    ls_mem_free(in);
    ls_mem_free(lp);
    return st;
}

ls_status LS_K(ls_rollout_member)(const ls_params *p, const ls_state *ps, int32_t first_token,
                                  size_t R, double temperature, double top_p, uint64_t seed,
                                  int32_t *out, double *logp_out) {
    size_t d = (size_t)p->cfg.d_model, V = (size_t)p->cfg.vocab;
    ls_state st_m;
    ls_status st = p->fam->state_fork(&st_m, ps, LS_MEM_SCORE);
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
        st = p->fam->segment_forward(p, &io);
        if (st != LS_OK) break;
        LS_K(ls_logprob_row)(row, hrow, p->lm_head->w, (ls_real)temperature, d, V);
        tok = LS_K(ls_sampler_top_p)(row, V, top_p, &rng, &ws);
        out[t] = tok;
        if (logp_out) logp_out[t] = (double)row[tok];
    }
    LS_K(ls_sampler_ws_free)(&ws);
    ls_mem_free(hrow);
    ls_mem_free(row);
    p->fam->state_free(&st_m);
    return st;
}

void LS_K(ls_step_optimizer)(ls_params *p, const ls_step_options *o, int64_t step) {
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        if (!t->trainable || t->ep_remote) continue; /* EP: another rank's expert is its owner's to update */
        LS_K(ls_adamw_step)(t->w, t->m, t->v, t->g, t->numel, o->lr, o->beta1, o->beta2, o->adam_eps,
                            o->weight_decay, step);
    }
}
