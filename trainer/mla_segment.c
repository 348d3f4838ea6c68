/* mla_segment.c - the mla family's carried state (ls_state pages of c_kv
 * after its norm, k_pe after RoPE and the indexer keys; nothing per head),
 * its segments (embedding, the layer stack, final norm and the fused
 * log-prob head) with their taped backward, and the `full`-mode backward
 * through the prompt computation, recomputed chunk by chunk from the
 * capture's checkpoints.  Under CP a state's layers carry the context of
 * mla_cpfam.c (ls_mla_cp_layer), which the layers use. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "common/checked.h"
#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/norm.h"
#include "trainer/mla_layer.h"

#define R(n) ((n) * sizeof(ls_real))
#define VOCAB_CHUNK 128

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

/* dst from src: pages borrowed (fork) or owned copies (zeroed: a gradient, c_kv and k_pe rows only). */
static ls_status derive(ls_state *d, const ls_state *s, ls_mem_cat cat, int borrow) {
    memset(d, 0, sizeof *d);
    d->fam = s->fam;
    d->n_layers = s->n_layers;
    d->n_pos = s->n_pos;
    d->page_size = s->page_size;
    d->cat = cat;
    d->ly = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)d->n_layers * sizeof *d->ly);
    if (!d->ly) return LS_ERR_NOMEM;
    ls_status st = LS_OK;
    for (int l = 0; l < d->n_layers && st == LS_OK; l++) {
        const ls_layer_state *sl = &s->ly[l];
        ls_layer_state *dl = &d->ly[l];
        dl->cp = sl->cp; /* a fork reads the same remote context */
        if (!sl->n_pages) continue;
        dl->pages = ls_mem_alloc(LS_MEM_SCRATCH, sl->n_pages * sizeof *dl->pages);
        if (!dl->pages) {
            st = LS_ERR_NOMEM;
            break;
        }
        dl->cap_pages = dl->n_pages = sl->n_pages;
        for (size_t i = 0; i < sl->n_pages; i++) {
            dl->pages[i] = sl->pages[i];
            if (borrow) continue;
            ls_kv_page *pg = &dl->pages[i];
            pg->k = ls_mem_alloc(cat, ls_mem_size(sl->pages[i].k));
            pg->v = ls_mem_alloc(cat, ls_mem_size(sl->pages[i].v));
            pg->x = NULL; /* no gradient flows into the indexer */
            if (!pg->k || !pg->v) st = LS_ERR_NOMEM;
        }
        if (borrow && sl->n_pages > d->n_borrowed) d->n_borrowed = sl->n_pages;
    }
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

/* MODEL.md §2: (kv_rank + d_rope + index_dim) reals per token and layer (saturating). */
size_t LS_K(ls_mla_state_plan_bytes)(const ls_model_config *c, int64_t n_pos) {
    size_t row = ls_sat_add(ls_sat_add((size_t)c->kv_rank, (size_t)c->d_rope), (size_t)c->index_dim);
    size_t n = n_pos > 0 ? (size_t)n_pos : 0;
    return ls_sat_mul(ls_sat_mul3(row, sizeof(ls_real), (size_t)c->n_layers), n);
}

ls_status LS_K(ls_mla_state_append)(ls_state *s, int l, const ls_real *ckv, const ls_real *kpe, const ls_real *kI,
                                    size_t T, int64_t pos0, const ls_model_config *c) {
    ls_layer_state *ly = &s->ly[l];
    size_t rows[3] = {(size_t)c->kv_rank, (size_t)c->d_rope, (size_t)c->index_dim};
    const ls_real *src[3] = {ckv, kpe, kI};
    for (size_t t0 = 0; t0 < T; t0 += s->page_size) {
        size_t n = T - t0 < s->page_size ? T - t0 : s->page_size;
        if (ly->n_pages == ly->cap_pages) {
            size_t cap = ly->cap_pages ? 2 * ly->cap_pages : 16;
            ls_kv_page *np = ls_mem_realloc(LS_MEM_SCRATCH, ly->pages, cap * sizeof *np);
            if (!np) return LS_ERR_NOMEM;
            ly->pages = np;
            ly->cap_pages = cap;
        }
        ls_kv_page *pg = &ly->pages[ly->n_pages];
        ls_real **dst[3] = {&pg->k, &pg->v, &pg->x};
        int ok = 1;
        for (int j = 0; j < 3; j++) {
            *dst[j] = ls_mem_alloc(s->cat, R(n * rows[j]));
            if (!*dst[j]) ok = 0;
            else memcpy(*dst[j], src[j] + t0 * rows[j], R(n * rows[j]));
        }
        if (!ok) {
            for (int j = 0; j < 3; j++) ls_mem_free(*dst[j]);
            return LS_ERR_NOMEM;
        }
        pg->n = n;
        pg->pos0 = pos0 + (int64_t)t0;
        ly->n_pages++;
    }
    return LS_OK;
}

/* ---- segments -------------------------------------------------------------------- */

typedef struct {
    ls_arena arena;
    size_t T, score_from, n_sc, grad_cut;
    int64_t pos0;
    const ls_state *ctx;
    int32_t *tokens, *targets;
    ls_mla_layer_tape *ly;
    ls_real *xf, *rstd_f, *xn_f, *lse;
} mla_tape;

void LS_K(ls_mla_tape_free)(ls_seg_tape *t) {
    if (!t) return;
    ls_arena a = ((mla_tape *)t)->arena;
    ls_arena_free(&a); /* the tape struct lives in its own arena */
}
size_t LS_K(ls_mla_tape_bytes)(const ls_seg_tape *t) { return t ? ((const mla_tape *)t)->arena.used_bytes : 0; }

static ls_status layers_forward(const ls_params *p, ls_seg_io *io, ls_real *h, mla_tape *tp) {
    const ls_model_config *c = &p->cfg;
    size_t T = io->T, d = (size_t)c->d_model;
    ls_status st = LS_OK;
    for (int l = 0; l < c->n_layers && st == LS_OK; l++) {
        int64_t t0 = ls_hook_now_ns();
        ls_arena scr;
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        if (io->checkpoints) memcpy(io->checkpoints[l], h, R(T * d));
        const ls_layer_state *ctx = io->ctx ? &io->ctx->ly[l] : NULL;
        ls_real *ckv = NULL, *kpe = NULL, *kI = NULL;
        if (io->state_out) {
            ckv = ls_arena_alloc(&scr, R(T * (size_t)c->kv_rank + 1));
            kpe = ls_arena_alloc(&scr, R(T * (size_t)c->d_rope + 1));
            kI = ls_arena_alloc(&scr, R(T * (size_t)c->index_dim + 1));
            if (scr.failed) st = LS_ERR_NOMEM;
        }
        if (st == LS_OK)
            st = LS_K(ls_mla_layer_forward)(p, l, h, T, io->pos0, ctx, ckv, kpe, kI, tp ? &tp->ly[l] : NULL,
                                            tp ? &tp->arena : NULL, &scr);
        if (st == LS_OK && tp) tp->ly[l].cut = io->grad_cut;
        if (st == LS_OK && io->state_out) st = LS_K(ls_mla_state_append)(io->state_out, l, ckv, kpe, kI, T, io->pos0, c);
        ls_arena_free(&scr);
        if (st == LS_OK && io->hook) io->hook(io->hook_user, l, 0, T, ls_hook_now_ns() - t0, ls_hook_l2(h, T * d));
    }
    return st;
}

ls_status LS_K(ls_mla_segment_forward)(const ls_params *p, ls_seg_io *io) {
    const ls_model_config *c = &p->cfg;
    size_t T = io->T, d = (size_t)c->d_model, V = (size_t)c->vocab;
    ls_real eps = (ls_real)c->rms_eps, temp = (ls_real)p->obj.temperature;
    if (T == 0 || (io->targets && io->score_from >= T)) return LS_ERR_ARG;
    if (io->grad_cut && (!io->tape || io->grad_cut >= T)) return LS_ERR_ARG;
    if (c->index_topk < 1) return LS_ERR_ARG;
    if (io->ctx && io->ctx->n_pos != io->pos0) return LS_ERR_ARG; /* the context must end where the segment starts */
    for (size_t t = 0; t < T; t++)
        if (io->tokens[t] < 0 || (size_t)io->tokens[t] >= V) return LS_ERR_ARG;
    if (io->targets)
        for (size_t t = 0; t < T - io->score_from; t++)
            if (io->targets[t] < 0 || (size_t)io->targets[t] >= V) return LS_ERR_ARG;
    mla_tape *tp = NULL;
    ls_arena work;
    ls_arena_init(&work, LS_MEM_SCRATCH, 0);
    ls_status st = LS_ERR_NOMEM;
    if (io->tape) {
        ls_arena a;
        ls_arena_init(&a, io->tape_cat, 1u << 20);
        tp = ls_arena_alloc(&a, sizeof *tp);
        if (!tp) {
            ls_arena_free(&a);
            return LS_ERR_NOMEM;
        }
        tp->arena = a;
        tp->ly = ls_arena_alloc(&tp->arena, (size_t)c->n_layers * sizeof *tp->ly);
        tp->tokens = ls_arena_alloc(&tp->arena, T * sizeof(int32_t));
        if (!tp->ly || !tp->tokens) goto cleanup;
        memcpy(tp->tokens, io->tokens, T * sizeof(int32_t));
        tp->T = T;
        tp->pos0 = io->pos0;
        tp->ctx = io->ctx;
        tp->grad_cut = io->grad_cut;
    }
    ls_real *h = ls_arena_alloc(&work, R(T * d));
    if (!h) goto cleanup;
    int64_t t0 = ls_hook_now_ns();
    LS_K(ls_embedding_forward)(h, io->tokens, p->embed->w, T, d);
    if (io->hook) io->hook(io->hook_user, -1, 0, T, ls_hook_now_ns() - t0, ls_hook_l2(h, T * d));
    st = layers_forward(p, io, h, tp);
    if (st != LS_OK) goto cleanup;
    if (io->state_out) io->state_out->n_pos = io->pos0 + (int64_t)T;
    if (io->targets || io->last_hidden) {
        t0 = ls_hook_now_ns();
        size_t r0 = io->targets ? io->score_from : T - 1, n = T - r0;
        ls_arena *ha = tp ? &tp->arena : &work;
        ls_real *xf = ls_arena_alloc(ha, R(n * d)), *rstd = ls_arena_alloc(ha, R(n));
        ls_real *xn = ls_arena_alloc(ha, R(n * d)), *lse = ls_arena_alloc(ha, R(n));
        int32_t *tg = io->targets ? ls_arena_alloc(ha, n * sizeof(int32_t)) : NULL;
        st = LS_ERR_NOMEM;
        if (!xf || !rstd || !xn || !lse || (io->targets && !tg)) goto cleanup;
        memcpy(xf, h + r0 * d, R(n * d));
        LS_K(ls_rmsnorm_forward)(xn, rstd, xf, p->norm->w, 0, eps, n, d);
        if (io->targets) {
            memcpy(tg, io->targets, n * sizeof(int32_t));
            ls_real *ws = ls_arena_alloc(&work, R(LS_K(ls_logprob_workspace)(n, VOCAB_CHUNK)));
            if (!ws) goto cleanup;
            LS_K(ls_logprob_forward)(io->logp, lse, xn, p->lm_head->w, tg, temp, n, d, V, VOCAB_CHUNK, ws);
        }
        if (io->last_hidden) memcpy(io->last_hidden, xn + (n - 1) * d, R(d));
        if (tp) {
            tp->score_from = r0;
            tp->n_sc = io->targets ? n : 0;
            tp->targets = tg;
            tp->xf = xf;
            tp->rstd_f = rstd;
            tp->xn_f = xn;
            tp->lse = lse;
        }
        if (io->hook) io->hook(io->hook_user, c->n_layers, 0, n, ls_hook_now_ns() - t0, ls_hook_l2(xn, n * d));
    }
    st = LS_OK;
    if (io->tape) {
        *io->tape = (ls_seg_tape *)tp;
        tp = NULL;
    }
cleanup:
    ls_arena_free(&work);
    if (tp) LS_K(ls_mla_tape_free)((ls_seg_tape *)tp);
    return st;
}

ls_status LS_K(ls_mla_segment_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp, ls_state *dctx,
                                        ls_layer_hook hook, void *hook_user) {
    const ls_model_config *c = &p->cfg;
    mla_tape *tp = (mla_tape *)tape;
    size_t T = tp->T, d = (size_t)c->d_model, V = (size_t)c->vocab;
    if (tp->grad_cut && dctx) return LS_ERR_ARG; /* the context is before the cut */
    ls_arena work;
    ls_arena_init(&work, tp->arena.cat, 0);
    ls_status st = LS_ERR_NOMEM;
    ls_real *dh = ls_arena_alloc(&work, R(T * d));
    if (!dh) goto cleanup;
    int64_t t0 = ls_hook_now_ns();
    if (dlogp && tp->n_sc) {
        size_t n = tp->n_sc;
        ls_real *dxn = ls_arena_alloc(&work, R(n * d));
        ls_real *ws = ls_arena_alloc(&work, R(LS_K(ls_logprob_workspace)(n, VOCAB_CHUNK)));
        if (!dxn || !ws) goto cleanup;
        LS_K(ls_logprob_backward)(dxn, p->lm_head->g, dlogp, tp->xn_f, p->lm_head->w, tp->targets, tp->lse,
                                  (ls_real)p->obj.temperature, n, d, V, VOCAB_CHUNK, ws);
        LS_K(ls_rmsnorm_backward)(dh + tp->score_from * d, p->norm->g, dxn, tp->xf, tp->rstd_f, p->norm->w, 0, n,
                                  d);
        if (hook) hook(hook_user, c->n_layers, 1, n, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
    for (int l = c->n_layers - 1; l >= 0; l--) {
        t0 = ls_hook_now_ns();
        ls_arena scr;
        ls_arena_init(&scr, tp->arena.cat, 0);
        st = LS_K(ls_mla_layer_backward)(p, l, &tp->ly[l], dh, tp->ctx ? &tp->ctx->ly[l] : NULL,
                                         dctx ? &dctx->ly[l] : NULL, NULL, NULL, &scr);
        ls_arena_free(&scr);
        if (st != LS_OK) goto cleanup;
        if (hook) hook(hook_user, l, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
    t0 = ls_hook_now_ns();
    if (p->embed->g) LS_K(ls_embedding_backward)(p->embed->g, dh, tp->tokens, T, d);
    if (hook) hook(hook_user, -1, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    st = LS_OK;
cleanup:
    ls_arena_free(&work);
    return st;
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
    size_t d = (size_t)c->d_model, rkv = (size_t)c->kv_rank, dr = (size_t)c->d_rope;
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
        ls_arena_init(&win, cat, 1u << 20);
        ls_arena_init(&scr, cat, 0);
        ls_mla_layer_tape tape;
        ls_real *h = ls_arena_alloc(&win, R(n * d)), *dckv = ls_arena_alloc(&win, R(n * rkv + 1));
        ls_real *dkpe = ls_arena_alloc(&win, R(n * dr + 1));
        if (!h || !dckv || !dkpe) st = LS_ERR_NOMEM;
        if (st == LS_OK) {
            memcpy(h, ckpt + t0 * d, R(n * d));
            gather_pages(dckv, dl, i0, i1, rkv, 0);
            gather_pages(dkpe, dl, i0, i1, dr, 1);
            st = LS_K(ls_mla_layer_forward)(p, l, h, n, a0, &view, NULL, NULL, NULL, &tape, &win, &scr);
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
    st = LS_OK;
    for (int l = c->n_layers - 1; st == LS_OK && l >= 0; l--) {
        int64_t t0 = ls_hook_now_ns();
        st = layer_prompt_backward(p, l, T, chunk, checkpoints[l], ps, dstate, dh, win_cat);
        if (st == LS_OK && hook) hook(hook_user, l, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
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
