/* mla_segment.c - the mla family's carried state (ls_state pages of c_kv
 * after its norm, k_pe after RoPE and the indexer keys; nothing per head),
 * its segments (the layer stack between the embedding and the log-prob
 * head, whose frame and tape are seg_frame.c's) with their taped backward,
 * and the `full`-mode backward through the prompt computation,
 * recomputed chunk by chunk from the capture's checkpoints.  Under CP a state's layers carry the context of
 * mla_cp.c (ls_mla_cp_layer), which the layers use. */
#include <string.h>

#include "common/checked.h"
#include "kernels/embedding.h"
#include "trainer/families/mla/mla_layer.h"
#include "trainer/model/seg_frame.h"
#include "trainer/model/stage.h"

#include "trainer/model/real_bytes.h"

/* ---- carried state ------------------------------------------------------------ */

ls_status LS_K(ls_mla_state_init)(ls_state *s, const ls_params *p, size_t page_size, ls_mem_cat cat) {
    memset(s, 0, sizeof *s);
    s->fam = &LS_K(ls_family_mla);
    s->n_layers = p->cfg.n_layers;
    s->page_size = page_size ? page_size : 64;
    s->cat = cat;
    s->ly = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)s->n_layers * sizeof *s->ly); /* metadata: not state bytes */
    return s->ly ? LS_OK : LS_ERR_NOMEM;
}

/* dst from src: pages borrowed (fork) or owned and zeroed (a gradient: c_kv and k_pe rows only). */
static ls_status derive(ls_state *d, const ls_state *s, ls_mem_cat cat, int borrow) {
    ls_status st = LS_K(ls_state_derive)(d, s, cat, borrow, !borrow);
    if (st != LS_OK) LS_K(ls_mla_state_free)(d);
    return st;
}

ls_status LS_K(ls_mla_state_fork)(ls_state *dst, const ls_state *src, ls_mem_cat cat) {
    return derive(dst, src, cat, 1);
}
ls_status LS_K(ls_mla_state_grad_like)(ls_state *dst, const ls_state *src, ls_mem_cat cat) {
    return derive(dst, src, cat, 0);
}

void LS_K(ls_mla_state_free)(ls_state *s) {
    if (!s || !s->ly) return;
    for (int l = 0; l < s->n_layers; l++) {
        ls_layer_state *ly = &s->ly[l];
        for (size_t i = s->n_borrowed < ly->n_pages ? s->n_borrowed : ly->n_pages; i < ly->n_pages; i++) {
            ls_mem_free(ly->pages[i].k);
            ls_mem_free(ly->pages[i].v);
            ls_mem_free(ly->pages[i].x);
        }
        ls_mem_free(ly->pages);
    }
    ls_mem_free(s->ly);
    memset(s, 0, sizeof *s);
}

size_t LS_K(ls_mla_state_bytes)(const ls_state *s) {
    size_t b = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const ls_layer_state *ly = &s->ly[l];
        for (size_t i = s->n_borrowed < ly->n_pages ? s->n_borrowed : ly->n_pages; i < ly->n_pages; i++)
            b += ls_mem_size(ly->pages[i].k) + ls_mem_size(ly->pages[i].v) + ls_mem_size(ly->pages[i].x);
    }
    return b;
}

/* docs/model.md §2: (kv_rank + d_rope + index_dim) reals per token and layer (saturating). */
size_t LS_K(ls_mla_state_plan_bytes)(const ls_model_config *c, int64_t n_pos) {
    size_t row = ls_sat_add(ls_sat_add((size_t)ls_mla_keys_of(c)->kv_rank, (size_t)ls_mla_keys_of(c)->d_rope), (size_t)ls_mla_keys_of(c)->index_dim);
    size_t n = n_pos > 0 ? (size_t)n_pos : 0;
    return ls_sat_mul(ls_sat_mul3(row, sizeof(ls_real), (size_t)c->n_layers), n);
}

ls_status LS_K(ls_mla_state_append)(ls_state *s, int l, const ls_real *ckv, const ls_real *kpe, const ls_real *kI,
                                    size_t T, int64_t pos0, const ls_model_config *c) {
    const size_t rows[3] = {(size_t)ls_mla_keys_of(c)->kv_rank, (size_t)ls_mla_keys_of(c)->d_rope, (size_t)ls_mla_keys_of(c)->index_dim};
    const ls_real *src[3] = {ckv, kpe, kI};
    return LS_K(ls_state_append_pages)(s, l, src, rows, T, pos0);
}

/* ---- segments -------------------------------------------------------------------- */


/* Layer l over h (seg_frame.h's ls_seg_layer_fwd_fn): its rows into io->state_out with the decisions a
 * `full` backward recomputing this chunk must make again. */
static ls_status layer_forward(const ls_params *p, const ls_seg_io *io, int l, ls_real *h, void *tape, ls_arena *ta) {
    ls_mla_layer_tape *ly = tape;
    const ls_model_config *c = &p->cfg;
    size_t T = io->T;
    ls_status st = LS_OK;
    ls_arena scr;
    ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
    const ls_layer_state *ctx = io->ctx ? &io->ctx->ly[l] : NULL;
    ls_real *ckv = NULL, *kpe = NULL, *kI = NULL;
    if (io->state_out) {
        ckv = ls_arena_alloc(&scr, R(T * (size_t)ls_mla_keys_of(c)->kv_rank + 1));
        kpe = ls_arena_alloc(&scr, R(T * (size_t)ls_mla_keys_of(c)->d_rope + 1));
        kI = ls_arena_alloc(&scr, R(T * (size_t)ls_mla_keys_of(c)->index_dim + 1));
        if (scr.failed) st = LS_ERR_NOMEM;
    }
    ls_decisions dec, *outer = ls_decisions_begin(&dec);
    if (st == LS_OK)
        st = LS_K(ls_mla_layer_forward)(p, l, h, T, io->pos0, ctx, ckv, kpe, kI, ly, ly ? ta : NULL, &scr);
    ls_decisions_end(outer, &dec);
    if (st == LS_OK && ly) ly->cut = io->grad_cut;
    if (st == LS_OK && io->state_out) st = LS_K(ls_mla_state_append)(io->state_out, l, ckv, kpe, kI, T, io->pos0, c);
    if (st == LS_OK && io->state_out) LS_K(ls_state_note_decisions)(&io->state_out->ly[l], io->pos0, &dec);
    ls_arena_free(&scr);
    return st;
}

ls_status LS_K(ls_mla_segment_forward)(const ls_params *p, ls_seg_io *io) {
    if (ls_mla_keys_of(&p->cfg)->index_topk < 1) return LS_ERR_ARG;
    if (io->ctx && io->ctx->n_pos != io->pos0) return LS_ERR_ARG; /* the context must end where the segment starts */
    return LS_K(ls_seg_forward)(p, io, sizeof(ls_mla_layer_tape), 0, layer_forward);
}

/* Layer l's backward; dout's rows for the segment (its own c_kv and k_pe rows' gradients) arrive as the
 * gradient of what the layer handed on. */
static ls_status layer_backward(const ls_params *p, int l, ls_seg_frame *fr, ls_real *dh, ls_state *dctx,
                                const ls_state *dout, ls_arena *scr) {
    ls_mla_layer_tape *ly = fr->ly;
    const ls_layer_state *go = dout ? &dout->ly[l] : NULL;
    ls_status st = LS_OK;
    ls_real *dckv = LS_K(ls_seg_dout_rows)(go, fr->pos0, fr->T, (size_t)ls_mla_keys_of(&p->cfg)->kv_rank, 0, scr, &st);
    ls_real *dkpe = LS_K(ls_seg_dout_rows)(go, fr->pos0, fr->T, (size_t)ls_mla_keys_of(&p->cfg)->d_rope, 1, scr, &st);
    if (st != LS_OK) return st;
    return LS_K(ls_mla_layer_backward)(p, l, &ly[l], dh, fr->ctx ? &fr->ctx->ly[l] : NULL,
                                       dctx ? &dctx->ly[l] : NULL, dckv, dkpe, scr);
}

ls_status LS_K(ls_mla_segment_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp, ls_state *dctx,
                                        const ls_state *dout, ls_layer_hook hook, void *hook_user) {
    return LS_K(ls_seg_backward)(p, tape, dlogp, dctx, dout, 0, layer_backward, hook, hook_user);
}

/* ---- `full` mode: the prompt backward ------------------------------------------ */

static size_t page_at(const ls_layer_state *s, int64_t t) {
    size_t i = 0;
    while (i < s->n_pages && s->pages[i].pos0 < t) i++;
    return i;
}

/* Pages [i0, i1)'s k (want_v 0) or v rows into one contiguous [tokens, row] buffer. */
static void gather_pages(ls_real *dst, const ls_layer_state *s, size_t i0, size_t i1, size_t row, int want_v) {
    size_t off = 0;
    for (size_t i = i0; i < i1; i++) {
        const ls_kv_page *pg = &s->pages[i];
        memcpy(dst + off * row, want_v ? pg->v : pg->k, R(pg->n * row));
        off += pg->n;
    }
}

/* Layer l over the prompt, chunk by chunk from the last: chunk k is
 * recomputed from its checkpoint against the pages before it (a prefix view
 * of ps), and its backward takes the gradient arriving for its own rows
 * (dstate, which later chunks and the branches filled) and adds its
 * queries' key gradients into the earlier pages of dstate. */
static ls_status layer_prompt_backward(const ls_params *p, int l, size_t T, size_t chunk, const ls_real *ckpt,
                                       const ls_state *ps, ls_state *dstate, ls_real *dh, ls_mem_cat cat) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dr = (size_t)ls_mla_keys_of(c)->d_rope;
    const ls_layer_state *sl = &ps->ly[l];
    ls_layer_state *dl = &dstate->ly[l];
    if (dl->n_pages != sl->n_pages) return LS_ERR_INTERNAL;
    ls_status st = LS_OK;
    size_t n_chunks = (T + chunk - 1) / chunk;
    for (size_t k = n_chunks; st == LS_OK && k-- > 0;) {
        size_t t0 = k * chunk, n = T - t0 < chunk ? T - t0 : chunk;
        int64_t a0 = (int64_t)t0;
        size_t i0 = page_at(sl, a0), i1 = page_at(sl, a0 + (int64_t)n);
        if (i0 < sl->n_pages && sl->pages[i0].pos0 != a0) return LS_ERR_INTERNAL; /* pages start at chunk bounds */
        ls_layer_state view = {.pages = sl->pages, .n_pages = i0};
        ls_layer_state dview = {.pages = dl->pages, .n_pages = i0};
        ls_arena win, scr;
        ls_arena_init(&win, cat, 0);
        ls_arena_init(&scr, cat, 0);
        ls_mla_layer_tape tape;
        ls_real *h = ls_arena_alloc(&win, R(n * d)), *dckv = ls_arena_alloc(&win, R(n * rkv + 1));
        ls_real *dkpe = ls_arena_alloc(&win, R(n * dr + 1));
        if (!h || !dckv || !dkpe) st = LS_ERR_NOMEM;
        if (st == LS_OK) {
            memcpy(h, ckpt + t0 * d, R(n * d));
            gather_pages(dckv, dl, i0, i1, rkv, 0);
            gather_pages(dkpe, dl, i0, i1, dr, 1);
            ls_decisions dec, *outer = ls_decisions_begin(&dec);
            st = LS_K(ls_mla_layer_forward)(p, l, h, n, a0, &view, NULL, NULL, NULL, &tape, &win, &scr);
            ls_decisions_end(outer, &dec);
            if (st == LS_OK) st = LS_K(ls_state_check_decisions)(sl, l, a0, &dec); /* the capture's, decided again */
        }
        ls_arena_free(&scr);
        if (st == LS_OK) {
            tape.cut = 0;
            ls_arena_init(&scr, cat, 0);
            st = LS_K(ls_mla_layer_backward)(p, l, &tape, dh + t0 * d, &view, &dview, dckv, dkpe, &scr);
            ls_arena_free(&scr);
        }
        ls_arena_free(&win);
    }
    return st;
}

ls_status LS_K(ls_mla_prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                       ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                       ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model;
    if (T == 0 || !checkpoints || !ps || !dstate) return LS_ERR_ARG;
    if (chunk == 0 || chunk > T) chunk = T;
    ls_arena keep;
    ls_arena_init(&keep, win_cat, 0);
    ls_status st = LS_ERR_NOMEM;
    ls_real *dh = ls_arena_alloc(&keep, R(T * d)); /* the prompt's output gets no gradient */
    if (!dh) goto cleanup;
    /* a host-tier state: each layer's latents and index keys staged, the next layer's copied while one
       computes (stage.h); dstate stays in the device tier */
    ls_stager sg;
    st = LS_K(ls_stager_init)(&sg, ps);
    for (int l = c->n_layers - 1; st == LS_OK && l >= 0; l--) {
        int64_t t0 = ls_hook_now_ns();
        st = LS_K(ls_stager_acquire)(&sg, l, l - 1);
        if (st == LS_OK)
            st = layer_prompt_backward(p, l, T, chunk, checkpoints[l], LS_K(ls_stager_state)(&sg), dstate, dh, win_cat);
        LS_K(ls_stager_release)(&sg, l);
        if (st == LS_OK && hook) hook(hook_user, l, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
    LS_K(ls_stager_free)(&sg);
    if (st != LS_OK) goto cleanup;
    {
        int64_t t0 = ls_hook_now_ns();
        if (p->embed->g) LS_K(ls_embedding_backward)(p->embed->g, dh, tokens, T, d);
        if (hook) hook(hook_user, -1, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
cleanup:
    ls_arena_free(&keep);
    return st;
}
