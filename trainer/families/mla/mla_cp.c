/* mla_cp.c - the mla family's part of context parallelism (family.h
 * cp_*; the protocol of mla_cp_attn.h over the shared driver of cp.h).
 *
 *  - capture: the shard's positions [s0, s1) layer by layer, each layer as
 *    one chunk of the whole shard, its attention through the prompt rings of
 *    mla_cp_attn.c (global DSA selection [dsa_ring], remote partials [kv_ring]);
 *    the shard's rows (c_kv, k_pe, k_I) are the rank's pages of ps, and
 *    every layer of ps carries the response context: responses select the
 *    global top-k [dsa_topk_gather] and compose [lse_max, lse_sum, out_sum];
 *    their backward sums [dq_sum, dkv_sum];
 *  - the response backward's gradient of kv_b is shard-local (each rank's
 *    part over the rows it attended to): it is kept aside per layer here and
 *    added to the zeroed .g after the step's stash (cp_shard_grads), so that
 *    finalize sums it over ranks [grad_finalize] in both gradient modes;
 *  - prompt backward (`full`): per layer from the top, the shard recomputed
 *    from its checkpoint, its backward with the reverse ring [dkv_ring],
 *    driven by the gradient of the shard's rows (dps) and of the layer
 *    output; all its gradients are shard-local.
 * Faults: local_dsa (cp-local-dsa: mla_cp_attn.h), skip_dkv_reduce (no
 * [dkv_sum]); skip_grad_finalize is the driver's.  local_attention
 * (cp-local-attention) is the hybrid family's and is refused here. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "kernels/embedding.h"
#include "trainer/dist/cp.h"
#include "trainer/families/mla/mla_layer.h"

#include "trainer/model/real_bytes.h"

typedef struct {
    ls_mla_cp cp;
    ls_mla_cp_layer prompt_l;
    ls_mla_cp_layer *resp_l; /* [L]: each with its layer's kv_b accumulator */
    ls_real *acc;            /* [L, kvb_n] */
    size_t kvb_n;
    int L;
} mcp;

ls_status LS_K(ls_mla_cp_init)(struct ls_cp_s *base, const ls_params *p) {
    const ls_model_config *m = &p->cfg;
    if (base->faults.local_attention) return LS_ERR_UNSUPPORTED; /* the CLI names it; see cp_usage */
    if (ls_mla_keys_of(m)->index_topk < 1) return LS_ERR_ARG;
    mcp *c = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *c); /* metadata */
    if (!c) return LS_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    base->fam_ctx = c;
    c->L = m->n_layers;
    c->kvb_n = (size_t)ls_mla_keys_of(m)->heads * (size_t)(ls_mla_keys_of(m)->d_nope + ls_mla_keys_of(m)->d_v) * (size_t)ls_mla_keys_of(m)->kv_rank;
    c->cp = (ls_mla_cp){.g = base->g,
                        .dims = {.H = (size_t)ls_mla_keys_of(m)->heads, .d_n = (size_t)ls_mla_keys_of(m)->d_nope, .d_r = (size_t)ls_mla_keys_of(m)->d_rope,
                                 .d_v = (size_t)ls_mla_keys_of(m)->d_v, .r_kv = (size_t)ls_mla_keys_of(m)->kv_rank},
                        .H_I = (size_t)ls_mla_keys_of(m)->index_heads, .d_I = (size_t)ls_mla_keys_of(m)->index_dim,
                        .k_top = (size_t)ls_mla_keys_of(m)->index_topk < (size_t)base->T ? (size_t)ls_mla_keys_of(m)->index_topk : (size_t)base->T,
                        .tau = (ls_real)(1.0 / sqrt((double)(ls_mla_keys_of(m)->d_nope + ls_mla_keys_of(m)->d_rope))), .form = LS_MLA_NAIVE,
                        .T = base->T, .local_dsa = base->faults.local_dsa,
                        .skip_dkv_reduce = base->faults.skip_dkv_reduce};
    c->prompt_l = (ls_mla_cp_layer){.cp = &c->cp, .prompt = 1};
    c->resp_l = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)c->L * sizeof *c->resp_l);
    if (!c->resp_l) return LS_ERR_NOMEM; /* the driver frees the context */
    for (int l = 0; l < c->L; l++) c->resp_l[l] = (ls_mla_cp_layer){.cp = &c->cp, .prompt = 0, .layer = l, .acc = c};
    return LS_OK;
}

/* The shard-local kv_b gradients live from the replay's first response backward to cp_shard_grads: not
 * through the capture, the scoring or the prompt backward (GLM-5.2 at a 65,536-token shard: 2.13 GiB). */
ls_real *LS_K(ls_mla_cp_acc)(const ls_mla_cp_layer *l, ls_status *st) {
    mcp *c = l ? l->acc : NULL;
    if (!c || l->layer < 0 || l->layer >= c->L) return NULL;
    if (!c->acc) {
        c->acc = ls_mem_alloc(LS_MEM_GRADS, R((size_t)c->L * c->kvb_n + 1));
        if (!c->acc) {
            *st = LS_ERR_NOMEM;
            return NULL;
        }
        memset(c->acc, 0, R((size_t)c->L * c->kvb_n));
    }
    return c->acc + (size_t)l->layer * c->kvb_n;
}

void LS_K(ls_mla_cp_free)(struct ls_cp_s *base) {
    mcp *c = base ? base->fam_ctx : NULL;
    if (!c) return;
    ls_mem_free(c->resp_l);
    ls_mem_free(c->acc);
    ls_mem_free(c);
    base->fam_ctx = NULL;
}

ls_status LS_K(ls_mla_cp_capture)(struct ls_cp_s *base, const ls_params *q, const int32_t *prompt, size_t page_size,
                                  size_t chunk, ls_state *ps, ls_real **checkpoints, ls_mem_cat cat,
                                  ls_layer_hook hook, void *hook_user) {
    (void)chunk; /* one chunk: the shard */
    mcp *c = base->fam_ctx;
    const ls_model_config *m = &q->cfg;
    size_t n = (size_t)(base->s1 - base->s0), d = (size_t)m->d_model;
    ls_status st = LS_K(ls_mla_state_init)(ps, q, page_size, cat);
    if (st != LS_OK) return st;
    ls_arena work;
    ls_arena_init(&work, LS_MEM_SCRATCH, 0);
    ls_real *h = ls_arena_alloc(&work, R(n * d));
    ls_real *ckv = ls_arena_alloc(&work, R(n * (size_t)ls_mla_keys_of(m)->kv_rank)), *kpe = ls_arena_alloc(&work, R(n * (size_t)ls_mla_keys_of(m)->d_rope));
    ls_real *kI = ls_arena_alloc(&work, R(n * (size_t)ls_mla_keys_of(m)->index_dim));
    if (work.failed) st = LS_ERR_NOMEM;
    if (st == LS_OK) {
        int64_t t0 = ls_hook_now_ns();
        LS_K(ls_embedding_forward)(h, prompt + base->s0, q->embed->w, n, d);
        if (hook) hook(hook_user, -1, 0, n, ls_hook_now_ns() - t0, ls_hook_l2(h, n * d));
    }
    ls_layer_state pctx = {.cp = &c->prompt_l};
    for (int l = 0; st == LS_OK && l < m->n_layers; l++) {
        int64_t t0 = ls_hook_now_ns();
        if (checkpoints) memcpy(checkpoints[l], h, R(n * d));
        ls_arena scr;
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        ls_decisions dec, *outer = ls_decisions_begin(&dec);
        st = LS_K(ls_mla_layer_forward)(q, l, h, n, base->s0, &pctx, ckv, kpe, kI, NULL, NULL, &scr);
        ls_decisions_end(outer, &dec);
        ls_arena_free(&scr);
        if (st == LS_OK) st = LS_K(ls_mla_state_append)(ps, l, ckv, kpe, kI, n, base->s0, m);
        if (st == LS_OK) LS_K(ls_state_note_decisions)(&ps->ly[l], base->s0, &dec); /* for the `full` recompute */
        ps->ly[l].cp = &c->resp_l[l];
        if (st == LS_OK && hook) hook(hook_user, l, 0, n, ls_hook_now_ns() - t0, ls_hook_l2(h, n * d));
    }
    ls_arena_free(&work);
    ps->n_pos = base->T; /* responses start after the whole prompt */
    if (st != LS_OK) LS_K(ls_mla_state_free)(ps);
    return st;
}

/* Layer l's shard pages' k (want_v 0) or v rows into one [n, row] buffer. */
static void gather_rows(ls_real *dst, const ls_layer_state *s, size_t row, int want_v) {
    size_t off = 0;
    for (size_t i = 0; i < s->n_pages; i++) {
        memcpy(dst + off * row, want_v ? s->pages[i].v : s->pages[i].k, R(s->pages[i].n * row));
        off += s->pages[i].n;
    }
}

ls_status LS_K(ls_mla_cp_prompt_bwd)(struct ls_cp_s *base, const ls_params *p, const int32_t *prompt, size_t chunk,
                                     ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                     ls_layer_hook hook, void *hook_user) {
    (void)chunk;
    mcp *c = base->fam_ctx;
    const ls_model_config *m = &p->cfg;
    size_t n = (size_t)(base->s1 - base->s0), d = (size_t)m->d_model;
    size_t rkv = (size_t)ls_mla_keys_of(m)->kv_rank, dr = (size_t)ls_mla_keys_of(m)->d_rope;
    if (!checkpoints || !dps || dps->n_layers != m->n_layers) return LS_ERR_ARG;
    ls_arena keep;
    ls_arena_init(&keep, LS_MEM_SCRATCH, 0);
    ls_real *dh = ls_arena_alloc(&keep, R(n * d)); /* the prompt's output gets no gradient */
    ls_real *dckv = ls_arena_alloc(&keep, R(n * rkv)), *dkpe = ls_arena_alloc(&keep, R(n * dr));
    ls_status st = keep.failed ? LS_ERR_NOMEM : LS_OK;
    ls_layer_state pctx = {.cp = &c->prompt_l};
    for (int l = m->n_layers - 1; st == LS_OK && l >= 0; l--) {
        int64_t t0 = ls_hook_now_ns();
        ls_arena win, scr;
        ls_arena_init(&win, LS_MEM_SCRATCH, 0);
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        ls_mla_layer_tape tape;
        ls_real *h = ls_arena_alloc(&win, R(n * d));
        if (!h) st = LS_ERR_NOMEM;
        if (st == LS_OK) {
            memcpy(h, checkpoints[l], R(n * d));
            gather_rows(dckv, &dps->ly[l], rkv, 0);
            gather_rows(dkpe, &dps->ly[l], dr, 1);
            ls_decisions dec, *outer = ls_decisions_begin(&dec);
            st = LS_K(ls_mla_layer_forward)(p, l, h, n, base->s0, &pctx, NULL, NULL, NULL, &tape, &win, &scr);
            ls_decisions_end(outer, &dec);
            /* the capture's selections and routing, decided again */
            if (st == LS_OK && ps && l < ps->n_layers) st = LS_K(ls_state_check_decisions)(&ps->ly[l], l, base->s0, &dec);
        }
        ls_arena_free(&scr);
        if (st == LS_OK) {
            tape.cut = 0;
            ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
            st = LS_K(ls_mla_layer_backward)(p, l, &tape, dh, &pctx, NULL, dckv, dkpe, &scr);
            ls_arena_free(&scr);
        }
        ls_arena_free(&win);
        if (st == LS_OK && hook) hook(hook_user, l, 1, n, ls_hook_now_ns() - t0, ls_hook_l2(dh, n * d));
    }
    if (st == LS_OK) {
        int64_t t0 = ls_hook_now_ns();
        if (p->embed->g) LS_K(ls_embedding_backward)(p->embed->g, dh, prompt + base->s0, n, d);
        if (hook) hook(hook_user, -1, 1, n, ls_hook_now_ns() - t0, ls_hook_l2(dh, n * d));
    }
    ls_arena_free(&keep);
    return st;
}

ls_status LS_K(ls_mla_cp_shard_grads)(struct ls_cp_s *base, ls_params *p) {
    mcp *c = base->fam_ctx;
    if (!c) return LS_ERR_INTERNAL;
    for (int l = 0; c->acc && l < c->L; l++) { /* none: no response backward ran (nothing to add) */
        ls_real *a = c->acc + (size_t)l * c->kvb_n;
        const ls_mla_layer *ly = &LS_K(ls_mla_layers)(p)[l];
        if (ly->kv_b.out * ly->kv_b.in != c->kvb_n) return LS_ERR_INTERNAL;
        LS_K(ls_mla_kv_b_grad)(p, &ly->kv_b, a);
    }
    ls_mem_free(c->acc);
    c->acc = NULL;
    return LS_OK;
}
