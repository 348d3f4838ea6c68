/* seg_frame.c - the segments' frame (seg_frame.h): argument checks, tape
 * set-up, embedding and head, forward and backward. */
#include "trainer/model/seg_frame.h"

#include <stdio.h>
#include <string.h>

#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/norm.h"

#include "common/checked.h"

#include "trainer/model/real_bytes.h"
#include "trainer/model/stage.h"
#define VOCAB_CHUNK 128

ls_status LS_K(ls_seg_check_io)(const ls_params *p, const ls_seg_io *io) {
    size_t T = io->T, V = (size_t)p->cfg.vocab;
    if (T == 0 || (io->targets && io->score_from >= T)) return LS_ERR_ARG;
    if (io->grad_cut && (!io->tape || io->grad_cut >= T)) return LS_ERR_ARG;
    for (size_t t = 0; t < T; t++)
        if (io->tokens[t] < 0 || (size_t)io->tokens[t] >= V) return LS_ERR_ARG;
    if (io->targets)
        for (size_t t = 0; t < T - io->score_from; t++)
            if (io->targets[t] < 0 || (size_t)io->targets[t] >= V) return LS_ERR_ARG;
    return LS_OK;
}

/* A zeroed tape in a new arena of io->tape_cat, the frame filled from io,
 * n_layers zeroed layer tapes of ly_size bytes; NULL when out of memory. */
static ls_seg_tape *tape_new(const ls_params *p, const ls_seg_io *io, size_t ly_size) {
    ls_arena a;
    ls_arena_init(&a, io->tape_cat, 0);
    ls_seg_tape *tp = ls_arena_alloc(&a, sizeof *tp);
    if (!tp) {
        ls_arena_free(&a);
        return NULL;
    }
    ls_seg_frame *fr = &tp->fr;
    fr->arena = a;
    fr->ly = ls_arena_alloc(&fr->arena, (size_t)p->cfg.n_layers * ly_size);
    fr->tokens = ls_arena_alloc(&fr->arena, io->T * sizeof(int32_t));
    if (!fr->ly || !fr->tokens) {
        LS_K(ls_seg_tape_free)(tp);
        return NULL;
    }
    memcpy(fr->tokens, io->tokens, io->T * sizeof(int32_t));
    fr->T = io->T;
    fr->pos0 = io->pos0;
    fr->ctx = io->ctx;
    fr->grad_cut = io->grad_cut;
    return tp;
}

void LS_K(ls_seg_tape_free)(ls_seg_tape *tape) {
    if (!tape) return;
    ls_arena a = tape->fr.arena;
    ls_arena_free(&a); /* the tape struct lives in its own arena */
}

/* Checkpointed, after the backward: with the largest rebuilt layer (its tape and backward scratch). */
size_t LS_K(ls_seg_tape_bytes)(const ls_seg_tape *tape) {
    return tape ? tape->fr.arena.used_bytes + (tape->fr.checkpointed ? tape->fr.recompute_peak : 0) : 0;
}

/* Checkpointed: per layer its input rows, its decisions and its collectives' memo, in the tape's arena. */
static ls_status ckpt_new(ls_seg_frame *fr, int L, size_t T, size_t d) {
    fr->ckpt = ls_arena_alloc(&fr->arena, (size_t)L * sizeof *fr->ckpt);
    fr->dec = ls_arena_alloc(&fr->arena, (size_t)L * sizeof *fr->dec);
    fr->memo = ls_arena_alloc(&fr->arena, (size_t)L * sizeof *fr->memo);
    fr->ckpt_digest = ls_arena_alloc(&fr->arena, (size_t)L * sizeof *fr->ckpt_digest);
    if (!fr->ckpt || !fr->dec || !fr->memo || !fr->ckpt_digest) return LS_ERR_NOMEM;
    for (int l = 0; l < L; l++) {
        if (!(fr->ckpt[l] = ls_arena_alloc(&fr->arena, R(T * d)))) return LS_ERR_NOMEM;
        ls_coll_memo_init(&fr->memo[l], &fr->arena);
    }
    return LS_OK;
}

static size_t arena_bytes(size_t b) { return b > SIZE_MAX - 63 ? SIZE_MAX : (b + 63) & ~(size_t)63; }

size_t LS_K(ls_seg_ckpt_plan_bytes)(int n_layers, size_t T, size_t d, size_t esz) {
    size_t L = n_layers > 0 ? (size_t)n_layers : 0;
    size_t b = ls_sat_add(arena_bytes(ls_sat_mul(L, sizeof(ls_real *))), arena_bytes(ls_sat_mul(L, sizeof(ls_decisions))));
    b = ls_sat_add(b, arena_bytes(ls_sat_mul(L, sizeof(ls_coll_memo))));
    b = ls_sat_add(b, arena_bytes(ls_sat_mul(L, sizeof(uint64_t))));
    return ls_sat_add(b, ls_sat_mul(L, arena_bytes(ls_sat_mul3(T, d, esz))));
}

/* The layer stack: layer after layer over h, each taped into fr (whole, or as its checkpoint).  A host-tier
 * context is read through the staging tier (stage.h): layer l's share staged while l-1 computes. */
static ls_status layers_forward(const ls_params *p, ls_seg_io *io, ls_real *h, ls_seg_frame *fr,
                                ls_seg_layer_fwd_fn fwd) {
    size_t T = io->T, d = (size_t)p->cfg.d_model;
    int L = p->cfg.n_layers;
    ls_stager sg;
    ls_status st = LS_K(ls_stager_init)(&sg, io->ctx);
    ls_seg_io lio = *io;
    lio.ctx = LS_K(ls_stager_state)(&sg);
    for (int l = 0; l < L && st == LS_OK; l++) {
        int64_t t0 = ls_hook_now_ns();
        if ((st = LS_K(ls_stager_acquire)(&sg, l, l + 1 < L ? l + 1 : -1)) != LS_OK) break;
        if (io->checkpoints) memcpy(io->checkpoints[l], h, R(T * d));
        if (fr && fr->checkpointed) {
            memcpy(fr->ckpt[l], h, R(T * d));
            fr->ckpt_digest[l] = ls_coll_memo_digest(h, R(T * d));
            ls_decisions *outer = ls_decisions_begin(&fr->dec[l]);
            ls_coll_memo *prev = ls_coll_memo_use(&fr->memo[l], LS_COLL_MEMO_RECORD);
            st = fwd(p, &lio, l, h, NULL, NULL);
            ls_coll_memo_restore(prev);
            ls_decisions_end(outer, &fr->dec[l]);
            if (st == LS_OK) st = ls_coll_memo_finish(&fr->memo[l]);
        } else {
            st = fwd(p, &lio, l, h, fr ? (char *)fr->ly + (size_t)l * fr->ly_size : NULL, fr ? &fr->arena : NULL);
        }
        LS_K(ls_stager_release)(&sg, l);
        if (st == LS_OK && io->hook) io->hook(io->hook_user, l, 0, T, ls_hook_now_ns() - t0, ls_hook_l2(h, T * d));
    }
    LS_K(ls_stager_free)(&sg);
    return st;
}

ls_status LS_K(ls_seg_forward)(const ls_params *p, ls_seg_io *io, size_t ly_size, int zero_centred,
                               ls_seg_layer_fwd_fn layer) {
    size_t T = io->T, d = (size_t)p->cfg.d_model;
    ls_status st = LS_K(ls_seg_check_io)(p, io);
    if (st != LS_OK) return st;
    ls_seg_tape *tp = NULL;
    ls_arena work; /* h, and the head when not taping */
    ls_arena_init(&work, LS_MEM_SCRATCH, 0);
    st = LS_ERR_NOMEM;
    if (io->tape) {
        if (!(tp = tape_new(p, io, ly_size))) goto cleanup;
        tp->fr.ly_size = ly_size;
        tp->fr.fwd = layer;
        tp->fr.checkpointed = io->checkpointed;
        if (io->checkpointed && ckpt_new(&tp->fr, p->cfg.n_layers, T, d) != LS_OK) goto cleanup;
    }
    ls_real *h = ls_arena_alloc(&work, R(T * d));
    if (!h) goto cleanup;
    LS_K(ls_seg_embed_forward)(p, io, h);
    st = layers_forward(p, io, h, tp ? &tp->fr : NULL, layer);
    if (st != LS_OK) goto cleanup;
    if (io->state_out) io->state_out->n_pos = io->pos0 + (int64_t)T;
    st = LS_K(ls_seg_head_forward)(p, io, h, zero_centred, tp ? &tp->fr : NULL, &work);
    if (st == LS_OK && io->tape) {
        *io->tape = tp;
        tp = NULL;
    }
cleanup:
    ls_arena_free(&work);
    LS_K(ls_seg_tape_free)(tp);
    return st;
}

/* Checkpointed: layer l's tape rebuilt from its input (in place: ckpt[l] is not needed again) into the
 * arena lt, as the forward made it: its collectives' results from the memo (nothing sent), its decisions
 * made again and held to the forward's (a rebuilt tape of another forward is never differentiated). */
static ls_status rebuild_layer(const ls_params *p, ls_seg_frame *fr, int l, ls_arena *lt) {
    ls_seg_io io = {.tokens = fr->tokens, .T = fr->T, .pos0 = fr->pos0, .ctx = fr->ctx, .grad_cut = fr->grad_cut};
    void *ly = (char *)fr->ly + (size_t)l * fr->ly_size;
    memset(ly, 0, fr->ly_size);
    if (ls_coll_memo_digest(fr->ckpt[l], R(fr->T * (size_t)p->cfg.d_model)) != fr->ckpt_digest[l]) {
        fprintf(stderr, "checkpointed replay: layer %d's input changed between the forward and the backward\n", l);
        return LS_ERR_INTERNAL;
    }
    ls_decisions again, *outer = ls_decisions_begin(&again);
    ls_coll_memo *prev = ls_coll_memo_use(&fr->memo[l], LS_COLL_MEMO_REPLAY);
    ls_status st = fr->fwd(p, &io, l, fr->ckpt[l], ly, lt);
    ls_coll_memo_restore(prev);
    ls_decisions_use(outer); /* the run's ledger holds the forward's decisions once */
    if (st == LS_OK && (st = ls_coll_memo_finish(&fr->memo[l])) != LS_OK)
        fprintf(stderr, "checkpointed replay: layer %d: %s\n", l, fr->memo[l].err);
    if (st == LS_OK && !ls_decisions_equal(&again, &fr->dec[l])) {
        fprintf(stderr,
                "checkpointed replay: layer %d decided otherwise when rebuilt (%llu decisions, digest %016llx; the "
                "forward's: %llu, %016llx)\n",
                l, (unsigned long long)again.count, (unsigned long long)again.digest,
                (unsigned long long)fr->dec[l].count, (unsigned long long)fr->dec[l].digest);
        st = LS_ERR_INTERNAL;
    }
    return st;
}

ls_real *LS_K(ls_seg_dout_rows)(const ls_layer_state *ly, int64_t pos0, size_t T, size_t row, int want_v,
                                ls_arena *scr, ls_status *st) {
    if (!ly || !ly->n_pages) return NULL;
    ls_real *dst = ls_arena_alloc(scr, R(T * row + 1));
    if (!dst) {
        *st = LS_ERR_NOMEM;
        return NULL;
    }
    size_t off = 0;
    for (size_t i = 0; i < ly->n_pages; i++) {
        const ls_kv_page *pg = &ly->pages[i];
        const ls_real *src = want_v ? pg->v : pg->k;
        if (pg->pos0 != pos0 + (int64_t)off || pg->n > T - off || !src) {
            *st = LS_ERR_INTERNAL;
            return NULL;
        }
        memcpy(dst + off * row, src, R(pg->n * row));
        off += pg->n;
    }
    if (off != T) {
        *st = LS_ERR_INTERNAL;
        return NULL;
    }
    return dst;
}

ls_status LS_K(ls_seg_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp, ls_state *dctx,
                                const ls_state *dout, int zero_centred, ls_seg_layer_bwd_fn layer, ls_layer_hook hook,
                                void *hook_user) {
    ls_seg_frame *fr = &tape->fr;
    size_t T = fr->T, d = (size_t)p->cfg.d_model;
    if (fr->grad_cut && (dctx || dout)) return LS_ERR_ARG; /* the context is before the cut */
    ls_arena work;
    ls_arena_init(&work, fr->arena.cat, 0);
    ls_status st = LS_ERR_NOMEM;
    ls_real *dh = ls_arena_alloc(&work, R(T * d));
    if (dh) st = LS_K(ls_seg_head_backward)(p, fr, dlogp, zero_centred, dh, &work, hook, hook_user);
    /* a host-tier context: each layer's share staged for its rebuild and backward, the next one's copied
       meanwhile (stage.h); the layers read the staged view through fr->ctx */
    const ls_state *ctx = fr->ctx;
    ls_stager sg;
    if (st == LS_OK) st = LS_K(ls_stager_init)(&sg, ctx);
    else LS_K(ls_stager_init)(&sg, NULL);
    fr->ctx = LS_K(ls_stager_state)(&sg);
    for (int l = p->cfg.n_layers - 1; st == LS_OK && l >= 0; l--) {
        int64_t t0 = ls_hook_now_ns();
        if ((st = LS_K(ls_stager_acquire)(&sg, l, l - 1)) != LS_OK) break;
        ls_arena scr, lt;
        ls_arena_init(&scr, fr->arena.cat, 0);
        ls_arena_init(&lt, fr->arena.cat, 0);
        if (fr->checkpointed) st = rebuild_layer(p, fr, l, &lt);
        if (st == LS_OK) st = layer(p, l, fr, dh, dctx, dout, &scr);
        if (lt.used_bytes + scr.used_bytes > fr->recompute_peak) fr->recompute_peak = lt.used_bytes + scr.used_bytes;
        ls_arena_free(&scr);
        ls_arena_free(&lt);
        LS_K(ls_stager_release)(&sg, l);
        if (st == LS_OK && hook) hook(hook_user, l, 1, T, ls_hook_now_ns() - t0, ls_hook_l2(dh, T * d));
    }
    LS_K(ls_stager_free)(&sg);
    fr->ctx = ctx;
    if (st == LS_OK) LS_K(ls_seg_embed_backward)(p, fr, dh, hook, hook_user);
    ls_arena_free(&work);
    return st;
}

void LS_K(ls_seg_embed_forward)(const ls_params *p, const ls_seg_io *io, ls_real *h) {
    size_t d = (size_t)p->cfg.d_model;
    int64_t t0 = ls_hook_now_ns();
    LS_K(ls_embedding_forward)(h, io->tokens, p->embed->w, io->T, d);
    if (io->hook) io->hook(io->hook_user, -1, 0, io->T, ls_hook_now_ns() - t0, ls_hook_l2(h, io->T * d));
}

ls_status LS_K(ls_seg_head_forward)(const ls_params *p, const ls_seg_io *io, const ls_real *h, int zero_centred,
                                    ls_seg_frame *fr, ls_arena *work) {
    if (!io->targets && !io->last_hidden) return LS_OK;
    const ls_model_config *c = &p->cfg;
    size_t T = io->T, d = (size_t)c->d_model, V = (size_t)c->vocab;
    int64_t t0 = ls_hook_now_ns();
    size_t r0 = io->targets ? io->score_from : T - 1, n = T - r0;
    ls_arena *ha = fr ? &fr->arena : work;
    ls_real *xf = ls_arena_alloc(ha, R(n * d)), *rstd = ls_arena_alloc(ha, R(n));
    ls_real *xn = ls_arena_alloc(ha, R(n * d)), *lse = ls_arena_alloc(ha, R(n));
    int32_t *tg = io->targets ? ls_arena_alloc(ha, n * sizeof(int32_t)) : NULL;
    if (!xf || !rstd || !xn || !lse || (io->targets && !tg)) return LS_ERR_NOMEM;
    memcpy(xf, h + r0 * d, R(n * d));
    LS_K(ls_rmsnorm_forward)(xn, rstd, xf, p->norm->w, zero_centred, (ls_real)c->rms_eps, n, d);
    if (io->targets) {
        memcpy(tg, io->targets, n * sizeof(int32_t));
        ls_real *ws = ls_arena_alloc(work, R(LS_K(ls_logprob_workspace)(n, VOCAB_CHUNK)));
        if (!ws) return LS_ERR_NOMEM;
        LS_K(ls_logprob_forward)(io->logp, lse, xn, p->lm_head->w, tg, (ls_real)p->obj.temperature, n, d, V,
                                 VOCAB_CHUNK, ws);
    }
    if (io->last_hidden) memcpy(io->last_hidden, xn + (n - 1) * d, R(d));
    if (fr) {
        fr->score_from = r0;
        fr->n_sc = io->targets ? n : 0;
        fr->targets = tg;
        fr->xf = xf;
        fr->rstd_f = rstd;
        fr->xn_f = xn;
        fr->lse = lse;
    }
    if (io->hook) io->hook(io->hook_user, c->n_layers, 0, n, ls_hook_now_ns() - t0, ls_hook_l2(xn, n * d));
    return LS_OK;
}

ls_status LS_K(ls_seg_head_backward)(const ls_params *p, const ls_seg_frame *fr, const ls_real *dlogp,
                                     int zero_centred, ls_real *dh, ls_arena *work, ls_layer_hook hook,
                                     void *hook_user) {
    if (!dlogp || !fr->n_sc) return LS_OK;
    const ls_model_config *c = &p->cfg;
    size_t n = fr->n_sc, d = (size_t)c->d_model, V = (size_t)c->vocab;
    int64_t t0 = ls_hook_now_ns();
    ls_real *dxn = ls_arena_alloc(work, R(n * d));
    ls_real *ws = ls_arena_alloc(work, R(LS_K(ls_logprob_workspace)(n, VOCAB_CHUNK)));
    if (!dxn || !ws) return LS_ERR_NOMEM;
    LS_K(ls_logprob_backward)(dxn, p->lm_head->g, dlogp, fr->xn_f, p->lm_head->w, fr->targets, fr->lse,
                              (ls_real)p->obj.temperature, n, d, V, VOCAB_CHUNK, ws);
    LS_K(ls_rmsnorm_backward)(dh + fr->score_from * d, p->norm->g, dxn, fr->xf, fr->rstd_f, p->norm->w,
                              zero_centred, n, d);
    if (hook) hook(hook_user, c->n_layers, 1, n, ls_hook_now_ns() - t0, ls_hook_l2(dh, fr->T * d));
    return LS_OK;
}

void LS_K(ls_seg_embed_backward)(const ls_params *p, const ls_seg_frame *fr, const ls_real *dh, ls_layer_hook hook,
                                 void *hook_user) {
    size_t d = (size_t)p->cfg.d_model;
    int64_t t0 = ls_hook_now_ns();
    if (p->embed->g) LS_K(ls_embedding_backward)(p->embed->g, dh, fr->tokens, fr->T, d);
    if (hook) hook(hook_user, -1, 1, fr->T, ls_hook_now_ns() - t0, ls_hook_l2(dh, fr->T * d));
}
