/* hybrid_segment.c - segments of the hybrid family: the layer stack with carried
 * state in and out between the embedding and the log-prob head (their
 * frame and tape are seg_frame.c's), its taped backward, and the
 * `full`-mode backward through the prompt computation. */
#include "trainer/families/hybrid/hybrid_family.h"

#include <string.h>

#include "kernels/embedding.h"
#include "trainer/families/hybrid/hybrid_layer.h"
#include "trainer/model/seg_frame.h"
#include "trainer/model/stage.h"

#include "trainer/model/real_bytes.h"


/* Attention layer l's K and V rows as new pages of s. */
static ls_status append_pages(ls_state *s, int l, const ls_real *k, const ls_real *v, size_t T,
                              int64_t pos0, size_t row) {
    const ls_real *src[3] = {k, v, NULL};
    const size_t rows[3] = {row, row, 0};
    return LS_K(ls_state_append_pages)(s, l, src, rows, T, pos0);
}


/* Layer l over h (seg_frame.h's ls_seg_layer_fwd_fn): its own K/V rows or GDN state into io->state_out. */
static ls_status layer_forward(const ls_params *p, const ls_seg_io *io, int l, ls_real *h, void *tape, ls_arena *ta) {
    ls_layer_tape *ly = tape;
    const ls_model_config *c = &p->cfg;
    size_t T = io->T;
    size_t row = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads * (size_t)ls_hybrid_keys_of(c)->head_dim;
    size_t C = 2 * (size_t)ls_hybrid_keys_of(c)->gdn_hk * (size_t)ls_hybrid_keys_of(c)->gdn_dk + (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t tail_n = (size_t)(ls_hybrid_keys_of(c)->conv_kernel - 1) * C;
    size_t S_n = (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dk * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    ls_status st = LS_OK;
    ls_arena scr;
    ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
    const ls_layer_state *ctx = io->ctx ? &io->ctx->ly[l] : NULL;
    const ls_cp_attn *cpa = ctx ? ctx->cp : NULL;
    int keep_kv = !(cpa && !cpa->own_keys); /* another rank owns the keys */
    ls_real *own_k = NULL, *own_v = NULL, *tail = NULL, *S = NULL;
    if (io->state_out && (keep_kv || !ls_hybrid_layers(p)[l].is_attn)) {
        if (ls_hybrid_layers(p)[l].is_attn) {
            own_k = ls_arena_alloc(&scr, R(T * row));
            own_v = ls_arena_alloc(&scr, R(T * row));
        } else {
            tail = ls_arena_alloc(&scr, R(tail_n));
            S = ls_arena_alloc(&scr, R(S_n));
        }
        if (scr.failed) st = LS_ERR_NOMEM;
    }
    if (st == LS_OK)
        st = LS_K(ls_layer_forward)(p, l, h, T, io->pos0, ctx, own_k, own_v, tail, S, ly, ly ? ta : NULL, &scr);
    if (st == LS_OK && ly) ly->cut = io->grad_cut;
    if (st == LS_OK && io->state_out) {
        if (ls_hybrid_layers(p)[l].is_attn) {
            if (keep_kv) st = append_pages(io->state_out, l, own_k, own_v, T, io->pos0, row);
        } else {
            memcpy(io->state_out->ly[l].fixed0, tail, R(tail_n));
            memcpy(io->state_out->ly[l].fixed1, S, R(S_n));
        }
    }
    ls_arena_free(&scr);
    return st;
}

ls_status LS_K(ls_segment_forward)(const ls_params *p, ls_seg_io *io) {
    return LS_K(ls_seg_forward)(p, io, sizeof(ls_layer_tape), 1, layer_forward);
}

/* Layer l's backward; dout's rows for the segment (its own keys' dK/dV) and state after it (dtail, dS) arrive
 * as the gradient of what the layer handed on. */
static ls_status layer_backward(const ls_params *p, int l, ls_seg_frame *fr, ls_real *dh, ls_state *dctx,
                                const ls_state *dout, ls_arena *scr) {
    ls_layer_tape *ly = fr->ly;
    const ls_layer_state *go = dout ? &dout->ly[l] : NULL;
    size_t row = (size_t)ls_hybrid_keys_of(&p->cfg)->attn_kv_heads * (size_t)ls_hybrid_keys_of(&p->cfg)->head_dim;
    ls_status st = LS_OK;
    ls_real *dk = NULL, *dv = NULL;
    if (go && ls_hybrid_layers(p)[l].is_attn) {
        dk = LS_K(ls_seg_dout_rows)(go, fr->pos0, fr->T, row, 0, scr, &st);
        dv = LS_K(ls_seg_dout_rows)(go, fr->pos0, fr->T, row, 1, scr, &st);
        if (st != LS_OK) return st;
    }
    return LS_K(ls_layer_backward)(p, l, &ly[l], dh, fr->ctx ? &fr->ctx->ly[l] : NULL, dctx ? &dctx->ly[l] : NULL,
                                   dk, dv, go ? go->fixed0 : NULL, go ? go->fixed1 : NULL, scr);
}

ls_status LS_K(ls_segment_backward)(const ls_params *p, ls_seg_tape *tp, const ls_real *dlogp,
                                    ls_state *dctx, const ls_state *dout, ls_layer_hook hook, void *hook_user) {
    return LS_K(ls_seg_backward)(p, tp, dlogp, dctx, dout, 1, layer_backward, hook, hook_user);
}

/* Gather the per-page gradients of pages [i0, i1) into one contiguous
 * [tokens, row] buffer. */
static void gather_pages(ls_real *dst, const ls_layer_state *s, size_t i0, size_t i1, size_t row, int want_v) {
    size_t off = 0;
    for (size_t i = i0; i < i1; i++) {
        const ls_kv_page *pg = &s->pages[i];
        memcpy(dst + off * row, want_v ? pg->v : pg->k, R(pg->n * row));
        off += pg->n;
    }
}

/* Index of the first page at or after position t (pages are in order). */
static size_t page_at(const ls_layer_state *s, int64_t t) {
    size_t i = 0;
    while (i < s->n_pages && s->pages[i].pos0 < t) i++;
    return i;
}

/* One attention layer's backward over the prompt, chunk by chunk from the
 * last: chunk c attends to the pages before it (a prefix view of ps) and
 * adds its key/value gradients into those pages of dstate. */
static ls_status attn_prompt_backward_cp(const ls_params *p, int l, size_t T, size_t chunk, int64_t pos0,
                                         const ls_cp_remote *rem, const ls_real *ckpt, const ls_state *ps,
                                         ls_state *dstate, ls_real *dh, ls_mem_cat cat);

static ls_status attn_prompt_backward(const ls_params *p, int l, size_t T, size_t chunk, int64_t pos0,
                                      const ls_cp_remote *rem, const ls_real *ckpt, const ls_state *ps,
                                      ls_state *dstate, ls_real *dh, ls_mem_cat cat) {
    if (rem) return attn_prompt_backward_cp(p, l, T, chunk, pos0, rem, ckpt, ps, dstate, dh, cat);
    size_t d = (size_t)p->cfg.d_model, row = (size_t)ls_hybrid_keys_of(&p->cfg)->attn_kv_heads * (size_t)ls_hybrid_keys_of(&p->cfg)->head_dim;
    const ls_layer_state *sl = &ps->ly[l];
    ls_layer_state *dl = &dstate->ly[l];
    ls_status st = LS_OK;
    size_t n_chunks = (T + chunk - 1) / chunk;
    for (size_t c = n_chunks; st == LS_OK && c-- > 0;) {
        size_t t0 = c * chunk, n = T - t0 < chunk ? T - t0 : chunk;
        int64_t a0 = pos0 + (int64_t)t0; /* the chunk's absolute first position */
        size_t i0 = page_at(sl, a0), i1 = page_at(sl, a0 + (int64_t)n);
        if ((i0 < sl->n_pages && sl->pages[i0].pos0 != a0) || dl->n_pages != sl->n_pages)
            return LS_ERR_INTERNAL; /* pages must start at chunk boundaries */
        ls_layer_state view = {.pages = sl->pages, .n_pages = i0};
        ls_layer_state dview = {.pages = dl->pages, .n_pages = i0};
        ls_arena win, scr;
        ls_arena_init(&win, cat, 0);
        ls_arena_init(&scr, cat, 0);
        ls_layer_tape tape;
        ls_real *h = ls_arena_alloc(&win, R(n * d)), *dk = ls_arena_alloc(&win, R(n * row));
        ls_real *dv = ls_arena_alloc(&win, R(n * row));
        if (!h || !dk || !dv) st = LS_ERR_NOMEM;
        if (st == LS_OK) {
            memcpy(h, ckpt + t0 * d, R(n * d));
            gather_pages(dk, dl, i0, i1, row, 0);
            gather_pages(dv, dl, i0, i1, row, 1);
            st = LS_K(ls_layer_forward)(p, l, h, n, a0, &view, NULL, NULL, NULL, NULL, &tape, &win, &scr);
        }
        ls_arena_free(&scr);
        if (st == LS_OK) {
            ls_arena_init(&scr, cat, 0);
            st = LS_K(ls_layer_backward)(p, l, &tape, dh + t0 * d, &view, &dview, dk, dv, NULL, NULL, &scr);
            ls_arena_free(&scr);
        }
        ls_arena_free(&win);
    }
    return st;
}

/* Pages [i0, i1)'s gradients back from one contiguous buffer (the inverse
 * of gather_pages). */
static void scatter_pages(ls_layer_state *s, size_t i0, size_t i1, size_t row, const ls_real *src, int want_v) {
    size_t off = 0;
    for (size_t i = i0; i < i1; i++) {
        ls_kv_page *pg = &s->pages[i];
        memcpy(want_v ? pg->v : pg->k, src + off * row, R(pg->n * row));
        off += pg->n;
    }
}

/* The same for a context-parallel shard whose keys are also attended by
 * other ranks' queries (and whose queries attend to theirs): the remote
 * forward part once; pass 1 recomputes each chunk and runs the layer's
 * backward up to dout; the remote backward (the reverse ring) then adds the
 * remote dq and the other ranks' dK/dV into this shard's pages; pass 2
 * recomputes each chunk from the last and finishes its backward. */
static ls_status attn_prompt_backward_cp(const ls_params *p, int l, size_t T, size_t chunk, int64_t pos0,
                                         const ls_cp_remote *rem, const ls_real *ckpt, const ls_state *ps,
                                         ls_state *dstate, ls_real *dh, ls_mem_cat cat) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, row = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads * (size_t)ls_hybrid_keys_of(c)->head_dim;
    size_t H = (size_t)ls_hybrid_keys_of(c)->attn_heads, qrow = H * (size_t)ls_hybrid_keys_of(c)->head_dim;
    const ls_layer_state *sl = &ps->ly[l];
    ls_layer_state *dl = &dstate->ly[l];
    if (dl->n_pages != sl->n_pages) return LS_ERR_INTERNAL;
    ls_arena keep;
    ls_arena_init(&keep, cat, 0);
    ls_real *q = ls_arena_alloc(&keep, R(T * qrow)), *o = ls_arena_alloc(&keep, R(T * qrow));
    ls_real *lse = ls_arena_alloc(&keep, R(T * H)), *dout = ls_arena_alloc(&keep, R(T * qrow));
    ls_real *dgate = ls_arena_alloc(&keep, R(T * qrow)), *dq = ls_arena_alloc(&keep, R(T * qrow));
    ls_real *dk = ls_arena_alloc(&keep, R(T * row)), *dv = ls_arena_alloc(&keep, R(T * row));
    ls_status st = keep.failed ? LS_ERR_NOMEM : LS_OK;
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += chunk) { /* the shard's queries */
        size_t n = T - t0 < chunk ? T - t0 : chunk;
        ls_arena scr;
        ls_arena_init(&scr, cat, 0);
        st = LS_K(ls_layer_attn_qkv)(p, l, ckpt + t0 * d, n, pos0 + (int64_t)t0, q + t0 * qrow, NULL, NULL, &scr);
        ls_arena_free(&scr);
    }
    if (st == LS_OK) st = rem->fwd(rem->user, l, q, T, pos0, chunk, ps);
    size_t n_chunks = (T + chunk - 1) / chunk;
    for (int pass = 1; pass <= 2 && st == LS_OK; pass++) {
        if (pass == 2) { /* the other ranks' part, with every chunk's dout known */
            gather_pages(dk, dl, 0, dl->n_pages, row, 0);
            gather_pages(dv, dl, 0, dl->n_pages, row, 1);
            st = rem->bwd(rem->user, l, q, o, lse, dout, T, pos0, chunk, ps, dq, dk, dv);
            if (st != LS_OK) break;
            scatter_pages(dl, 0, dl->n_pages, row, dk, 0);
            scatter_pages(dl, 0, dl->n_pages, row, dv, 1);
        }
        for (size_t k = n_chunks; st == LS_OK && k-- > 0;) {
            size_t t0 = k * chunk, n = T - t0 < chunk ? T - t0 : chunk;
            int64_t a0 = pos0 + (int64_t)t0;
            size_t i0 = page_at(sl, a0), i1 = page_at(sl, a0 + (int64_t)n);
            if (i0 < sl->n_pages && sl->pages[i0].pos0 != a0) {
                st = LS_ERR_INTERNAL; /* pages must start at chunk boundaries */
                break;
            }
            ls_layer_state view = {.pages = sl->pages, .n_pages = i0, .cp = rem->merge};
            ls_layer_state dview = {.pages = dl->pages, .n_pages = i0};
            ls_arena win, scr;
            ls_arena_init(&win, cat, 0);
            ls_arena_init(&scr, cat, 0);
            ls_layer_tape tape;
            ls_real *hc = ls_arena_alloc(&win, R(n * d)), *dkc = ls_arena_alloc(&win, R(n * row));
            ls_real *dvc = ls_arena_alloc(&win, R(n * row));
            if (!hc || !dkc || !dvc) st = LS_ERR_NOMEM;
            if (st == LS_OK) {
                memcpy(hc, ckpt + t0 * d, R(n * d));
                st = LS_K(ls_layer_forward)(p, l, hc, n, a0, &view, NULL, NULL, NULL, NULL, &tape, &win, &scr);
            }
            ls_arena_free(&scr);
            ls_arena_init(&scr, cat, 0);
            if (st == LS_OK && pass == 1) {
                st = LS_K(ls_layer_backward_out)(p, l, &tape, dh + t0 * d, dout + t0 * qrow, dgate + t0 * qrow, &scr);
                memcpy(o + t0 * qrow, tape.o, R(n * qrow));
                memcpy(lse + t0 * H, tape.lse, R(n * H));
            } else if (st == LS_OK) {
                gather_pages(dkc, dl, i0, i1, row, 0);
                gather_pages(dvc, dl, i0, i1, row, 1);
                st = LS_K(ls_layer_backward_in)(p, l, &tape, dh + t0 * d, dout + t0 * qrow, dgate + t0 * qrow,
                                                dq + t0 * qrow, &view, &dview, dkc, dvc, &scr);
            }
            ls_arena_free(&scr);
            ls_arena_free(&win);
        }
    }
    ls_arena_free(&keep);
    return st;
}

/* One GDN layer's backward over the prompt: a forward pass records the
 * carried state at every chunk start (the first: start0, or zeros), then
 * the chunks run backward from the last with the state gradient handed
 * from chunk to chunk; dstart0 (NULL: dropped) receives the gradient of
 * the state before the first chunk. */
static ls_status gdn_prompt_backward(const ls_params *p, int l, size_t T, size_t chunk, const ls_real *ckpt,
                                     const ls_layer_state *start0, ls_layer_state *dstart0, ls_state *dstate,
                                     ls_real *dh, ls_mem_cat cat) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model;
    size_t C = 2 * (size_t)ls_hybrid_keys_of(c)->gdn_hk * (size_t)ls_hybrid_keys_of(c)->gdn_dk + (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t tail_n = (size_t)(ls_hybrid_keys_of(c)->conv_kernel - 1) * C, S_n = (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dk * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t n_chunks = (T + chunk - 1) / chunk;
    ls_arena keep;
    ls_arena_init(&keep, cat, 0);
    /* states[k] = (tail, S) before chunk k; states[0] = zeros */
    ls_real *states = ls_arena_alloc(&keep, R(n_chunks * (tail_n + S_n)));
    ls_real *g_tail = ls_arena_alloc(&keep, R(tail_n)), *g_S = ls_arena_alloc(&keep, R(S_n));
    ls_real *h = ls_arena_alloc(&keep, R(chunk * d));
    ls_status st = (states && g_tail && g_S && h) ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK && start0 && start0->fixed0) {
        memcpy(states, start0->fixed0, R(tail_n));
        memcpy(states + tail_n, start0->fixed1, R(S_n));
    }
    for (size_t k = 0; st == LS_OK && k + 1 < n_chunks; k++) {
        size_t t0 = k * chunk;
        ls_real *cur = states + k * (tail_n + S_n), *next = cur + tail_n + S_n;
        ls_layer_state ctx = {.fixed0 = cur, .fixed1 = cur + tail_n};
        ls_arena scr;
        ls_arena_init(&scr, cat, 0);
        memcpy(h, ckpt + t0 * d, R(chunk * d));
        st = LS_K(ls_layer_forward)(p, l, h, chunk, (int64_t)t0, &ctx, NULL, NULL, next, next + tail_n, NULL, NULL, &scr);
        ls_arena_free(&scr);
    }
    if (st == LS_OK) {
        memcpy(g_tail, dstate->ly[l].fixed0, R(tail_n));
        memcpy(g_S, dstate->ly[l].fixed1, R(S_n));
    }
    for (size_t k = n_chunks; st == LS_OK && k-- > 0;) {
        size_t t0 = k * chunk, n = T - t0 < chunk ? T - t0 : chunk;
        ls_real *cur = states + k * (tail_n + S_n);
        ls_layer_state ctx = {.fixed0 = cur, .fixed1 = cur + tail_n};
        ls_arena win, scr;
        ls_arena_init(&win, cat, 0);
        ls_arena_init(&scr, cat, 0);
        ls_layer_tape tape;
        ls_real *dprev = ls_arena_alloc(&win, R(tail_n + S_n)); /* gradient of the state before chunk k */
        if (!dprev) st = LS_ERR_NOMEM;
        if (st == LS_OK) {
            memcpy(h, ckpt + t0 * d, R(n * d));
            st = LS_K(ls_layer_forward)(p, l, h, n, (int64_t)t0, &ctx, NULL, NULL, NULL, NULL, &tape, &win, &scr);
        }
        ls_arena_free(&scr);
        if (st == LS_OK) {
            ls_layer_state dctx = {.fixed0 = dprev, .fixed1 = dprev + tail_n};
            ls_arena_init(&scr, cat, 0);
            st = LS_K(ls_layer_backward)(p, l, &tape, dh + t0 * d, &ctx, &dctx, NULL, NULL, g_tail, g_S, &scr);
            ls_arena_free(&scr);
            memcpy(g_tail, dprev, R(tail_n));
            memcpy(g_S, dprev + tail_n, R(S_n));
        }
        ls_arena_free(&win);
    }
    if (st == LS_OK && dstart0 && dstart0->fixed0) {
        memcpy(dstart0->fixed0, g_tail, R(tail_n));
        memcpy(dstart0->fixed1, g_S, R(S_n));
    }
    ls_arena_free(&keep);
    return st;
}

ls_status LS_K(ls_prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                   ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                   ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user,
                                   const ls_prompt_cp *cp) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model;
    if (chunk == 0 || chunk > T) chunk = T;
    int64_t pos0 = cp ? cp->pos0 : 0;
    const ls_cp_hooks *hk = cp ? cp->hooks : NULL;
    ls_arena keep;
    ls_arena_init(&keep, win_cat, 0);
    ls_status st = LS_ERR_NOMEM;
    ls_real *dh = ls_arena_alloc(&keep, R(T * d)); /* the prompt's output gets no gradient */
    if (!dh) goto cleanup;
    /* a host-tier state: the attention layers' pages staged layer by layer, the next attention layer's
       copied while one computes (stage.h; the GDN layers' backward reads no state: their gradient, dstate,
       stays in the device tier) */
    ls_stager sg;
    st = LS_K(ls_stager_init)(&sg, ps);
    const ls_state *rps = LS_K(ls_stager_state)(&sg);
    for (int l = c->n_layers - 1; st == LS_OK && l >= 0; l--) {
        int64_t t0 = ls_hook_now_ns();
        if (hk && hk->pre && (st = hk->pre(hk->user, l)) != LS_OK) break;
        const ls_layer_state *s0 = cp && cp->start ? &cp->start->ly[l] : NULL;
        ls_layer_state *ds0 = cp && cp->dstart ? &cp->dstart->ly[l] : NULL;
        if (ls_hybrid_layers(p)[l].is_attn) {
            int next = l - 1;
            while (next >= 0 && !ls_hybrid_layers(p)[next].is_attn) next--;
            st = LS_K(ls_stager_acquire)(&sg, l, next);
            if (st == LS_OK)
                st = attn_prompt_backward(p, l, T, chunk, pos0, cp ? cp->remote : NULL, checkpoints[l], rps, dstate,
                                          dh, win_cat);
            LS_K(ls_stager_release)(&sg, l);
        } else {
            st = gdn_prompt_backward(p, l, T, chunk, checkpoints[l], s0, ds0, dstate, dh, win_cat);
        }
        if (st == LS_OK && hk && hk->post) st = hk->post(hk->user, l);
        if (st == LS_OK && hook) hook(hook_user, l, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
    LS_K(ls_stager_free)(&sg);
    if (st != LS_OK) goto cleanup;
    {
        int64_t t0 = ls_hook_now_ns(); /* the embedding's own backward, measured like every layer's */
        if (p->embed->g) LS_K(ls_embedding_backward)(p->embed->g, dh, tokens, T, d);
        if (hook) hook(hook_user, -1, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
cleanup:
    ls_arena_free(&keep);
    return st;
}

/* ---- context parallelism: a rank's shard, layer by layer ------------------ */

/* One attention layer over the shard: its pages and queries chunk by chunk,
 * the remote part once, then each chunk's forward. */
static ls_status attn_shard_forward(const ls_params *p, int l, ls_real *h, ls_real *q_all, size_t T, int64_t pos0,
                                    size_t chunk, ls_state *ps, const ls_cp_remote *rem) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, row = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads * (size_t)ls_hybrid_keys_of(c)->head_dim;
    size_t qrow = (size_t)ls_hybrid_keys_of(c)->attn_heads * (size_t)ls_hybrid_keys_of(c)->head_dim;
    ls_status st = LS_OK;
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += chunk) {
        size_t n = T - t0 < chunk ? T - t0 : chunk;
        ls_arena scr;
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        ls_real *k = ls_arena_alloc(&scr, R(n * row)), *v = ls_arena_alloc(&scr, R(n * row));
        st = k && v ? LS_K(ls_layer_attn_qkv)(p, l, h + t0 * d, n, pos0 + (int64_t)t0, q_all + t0 * qrow, k, v, &scr)
                    : LS_ERR_NOMEM;
        if (st == LS_OK) st = append_pages(ps, l, k, v, n, pos0 + (int64_t)t0, row);
        ls_arena_free(&scr);
    }
    /* a host-tier state: the pages just appended are read back through the staging tier (stage.h; nothing to
       prefetch: the next layer's pages are this layer's output) */
    ls_stager sg;
    if (st == LS_OK) st = LS_K(ls_stager_init)(&sg, ps);
    else LS_K(ls_stager_init)(&sg, NULL);
    if (st == LS_OK) st = LS_K(ls_stager_acquire)(&sg, l, -1);
    const ls_state *rps = LS_K(ls_stager_state)(&sg);
    if (st == LS_OK && rem) st = rem->fwd(rem->user, l, q_all, T, pos0, chunk, rps);
    const ls_layer_state *sl = &rps->ly[l];
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += chunk) {
        size_t n = T - t0 < chunk ? T - t0 : chunk;
        ls_layer_state view = {.pages = sl->pages, .n_pages = page_at(sl, pos0 + (int64_t)t0),
                               .cp = rem ? rem->merge : NULL};
        ls_arena scr;
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        st = LS_K(ls_layer_forward)(p, l, h + t0 * d, n, pos0 + (int64_t)t0, &view, NULL, NULL, NULL, NULL, NULL,
                                    NULL, &scr);
        ls_arena_free(&scr);
    }
    LS_K(ls_stager_free)(&sg);
    return st;
}

/* One GDN layer over the shard: chunk by chunk from start's state, the
 * end state into ps. */
static ls_status gdn_shard_forward(const ls_params *p, int l, ls_real *h, size_t T, int64_t pos0, size_t chunk,
                                   const ls_state *start, ls_state *ps) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model;
    size_t C = 2 * (size_t)ls_hybrid_keys_of(c)->gdn_hk * (size_t)ls_hybrid_keys_of(c)->gdn_dk + (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t tail_n = (size_t)(ls_hybrid_keys_of(c)->conv_kernel - 1) * C, S_n = (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dk * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    ls_real *base = ls_mem_alloc(LS_MEM_SCRATCH, R(2 * (tail_n + S_n)));
    if (!base) return LS_ERR_NOMEM;
    ls_real *cur = base, *next = base + tail_n + S_n;
    memcpy(cur, start->ly[l].fixed0, R(tail_n));
    memcpy(cur + tail_n, start->ly[l].fixed1, R(S_n));
    ls_status st = LS_OK;
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += chunk) {
        size_t n = T - t0 < chunk ? T - t0 : chunk;
        ls_layer_state ctx = {.fixed0 = cur, .fixed1 = cur + tail_n};
        ls_arena scr;
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        st = LS_K(ls_layer_forward)(p, l, h + t0 * d, n, pos0 + (int64_t)t0, &ctx, NULL, NULL, next, next + tail_n,
                                    NULL, NULL, &scr);
        ls_arena_free(&scr);
        ls_real *t = cur;
        cur = next;
        next = t;
    }
    if (st == LS_OK) {
        memcpy(ps->ly[l].fixed0, cur, R(tail_n));
        memcpy(ps->ly[l].fixed1, cur + tail_n, R(S_n));
    }
    ls_mem_free(base);
    return st;
}

ls_status LS_K(ls_shard_forward)(const ls_params *p, const int32_t *tokens, size_t T, int64_t pos0, size_t chunk,
                                 ls_state *start, ls_state *ps, ls_real **checkpoints, const ls_cp_remote *remote,
                                 const ls_cp_hooks *hooks, ls_layer_hook hook, void *hook_user) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, qrow = (size_t)ls_hybrid_keys_of(c)->attn_heads * (size_t)ls_hybrid_keys_of(c)->head_dim;
    if (T == 0) return LS_ERR_ARG;
    for (size_t t = 0; t < T; t++)
        if (tokens[t] < 0 || (size_t)tokens[t] >= V) return LS_ERR_ARG;
    if (chunk == 0 || chunk > T) chunk = T;
    ls_arena keep; /* the shard's hidden state between layers, its queries in an attention layer */
    ls_arena_init(&keep, LS_MEM_SCRATCH, 0);
    ls_real *h = ls_arena_alloc(&keep, R(T * d)), *q_all = ls_arena_alloc(&keep, R(T * qrow));
    ls_status st = h && q_all ? LS_OK : LS_ERR_NOMEM;
    int64_t t0 = ls_hook_now_ns();
    if (st == LS_OK) {
        LS_K(ls_embedding_forward)(h, tokens, p->embed->w, T, d);
        if (hook) hook(hook_user, -1, 0, T, ls_hook_now_ns() - t0, ls_hook_l2(h, T * d));
    }
    for (int l = 0; st == LS_OK && l < c->n_layers; l++) {
        t0 = ls_hook_now_ns();
        if (hooks && hooks->pre && (st = hooks->pre(hooks->user, l)) != LS_OK) break;
        if (checkpoints) memcpy(checkpoints[l], h, R(T * d));
        st = ls_hybrid_layers(p)[l].is_attn ? attn_shard_forward(p, l, h, q_all, T, pos0, chunk, ps, remote)
                                  : gdn_shard_forward(p, l, h, T, pos0, chunk, start, ps);
        if (st == LS_OK && hooks && hooks->post) st = hooks->post(hooks->user, l);
        if (st == LS_OK && hook) hook(hook_user, l, 0, T, ls_hook_now_ns() - t0, ls_hook_l2(h, T * d));
    }
    if (st == LS_OK) ps->n_pos = pos0 + (int64_t)T;
    ls_arena_free(&keep);
    return st;
}
