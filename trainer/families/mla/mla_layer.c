/* mla_layer.c - forward/backward of one mla block (docs/model.md §2): RMSNorm,
 * MLA over the DSA top-k of a list of key blocks, RMSNorm, dense SwiGLU or
 * the routed MoE in chunks (recomputed chunk by chunk in the backward: the
 * tape keeps no routed buffer), with residuals.  The indexer and the router
 * bias get no gradient; the selection is a constant of the backward.  Every
 * selection and routing is noted in the caller's decision ledger
 * (kernels/decisions.h); the MoE backward's recomputed routing must equal the
 * forward's (LS_ERR_INTERNAL otherwise). */
#include "trainer/families/mla/mla_layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/activation.h"
#include "kernels/logprob.h"
#include "kernels/attention.h"
#include "kernels/dsa.h"
#include "kernels/linear.h"
#include "kernels/moe.h"
#include "trainer/model/seg_frame.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "trainer/dist/ep.h"

#include "trainer/model/real_bytes.h"
#define INDEXER_LN_EPS 1e-6 /* docs/model.md §2.2 */

static ls_mla_seg_opts g_opts = {0, LS_MLA_NAIVE, 0};
void LS_K(ls_mla_set_seg_opts)(const ls_mla_seg_opts *o) {
    ls_mla_seg_opts z = {0, LS_MLA_NAIVE, 0};
    g_opts = o ? *o : z;
}

/* The form of one attention call over T queries and Tk visible keys (ls_mla_seg_opts). */
static ls_mla_form form_for(size_t T, size_t Tk) {
    if (g_opts.fixed_form) return g_opts.form;
    return 4 * T < Tk ? LS_MLA_ABSORBED : LS_MLA_NAIVE;
}
ls_mla_seg_opts LS_K(ls_mla_get_seg_opts)(void) { return g_opts; }

static ls_mla_dims dims_of(const ls_model_config *c) {
    ls_mla_dims d = {.H = (size_t)ls_mla_keys_of(c)->heads, .d_n = (size_t)ls_mla_keys_of(c)->d_nope, .d_r = (size_t)ls_mla_keys_of(c)->d_rope,
                     .d_v = (size_t)ls_mla_keys_of(c)->d_v, .r_kv = (size_t)ls_mla_keys_of(c)->kv_rank};
    return d;
}
static ls_real tau_of(const ls_model_config *c) { return (ls_real)(1.0 / sqrt((double)(ls_mla_keys_of(c)->d_nope + ls_mla_keys_of(c)->d_rope))); }

/* ---- linears and SwiGLU with their saves ------------------------------------ */
static ls_real *buf(ls_arena *ta, ls_arena *scr, size_t n) { return ls_arena_alloc(ta ? ta : scr, R(n ? n : 1)); }
static size_t lora_r(const ls_lin *l) { return l->A && l->B ? l->A->shape[0] : 0; }
static ls_real *lora_save(ls_arena *ta, ls_arena *scr, const ls_lin *l, size_t T) {
    return lora_r(l) ? buf(ta, scr, T * lora_r(l)) : NULL;
}

static void lin_f(const ls_params *p, const ls_lin *l, ls_real *y, ls_real *xa, const ls_real *x, size_t T) {
    if (lora_r(l))
        LS_K(ls_lora_forward)(y, xa, x, l->W->w, l->A->w, l->B->w, p->lora_scale, T, l->in, l->out, lora_r(l));
    else
        LS_K(ls_linear_forward)(y, x, l->W->w, T, l->in, l->out, 0);
}

static ls_status lin_b(const ls_params *p, const ls_lin *l, ls_real *dx, int acc, const ls_real *dy,
                       const ls_real *x, const ls_real *xa, size_t T, ls_arena *scr) {
    if (lora_r(l)) {
        ls_real *tmp = ls_arena_alloc(scr, R(T * lora_r(l) + 1));
        if (!tmp) return LS_ERR_NOMEM;
        LS_K(ls_lora_backward)(dx, l->W->g, l->A->g, l->B->g, dy, x, xa, l->W->w, l->A->w, l->B->w,
                               p->lora_scale, T, l->in, l->out, lora_r(l), tmp, acc);
    } else {
        LS_K(ls_linear_backward)(dx, l->W->g, dy, x, l->W->w, T, l->in, l->out, acc);
    }
    return LS_OK;
}

/* A SwiGLU MLP's saves over T rows (pointers into caller buffers). */
typedef struct {
    ls_real *xa_g, *xa_u, *xa_d, *g, *u, *act;
} mlp_saves;

static void mlp_f(const ls_params *p, const ls_mla_mlp *m, ls_real *y, const ls_real *x, size_t T,
                  const mlp_saves *s) {
    lin_f(p, &m->gate, s->g, s->xa_g, x, T);
    lin_f(p, &m->up, s->u, s->xa_u, x, T);
    LS_K(ls_swiglu_forward)(s->act, s->g, s->u, T * m->gate.out);
    lin_f(p, &m->down, y, s->xa_d, s->act, T);
}

/* dx (= or += with acc) from dy; weight gradients +=.  dact/dg/du: [T, I] work. */
static ls_status mlp_b(const ls_params *p, const ls_mla_mlp *m, ls_real *dx, int acc, const ls_real *dy,
                       const ls_real *x, size_t T, const mlp_saves *s, ls_real *dact, ls_real *dg, ls_real *du,
                       ls_arena *scr) {
    ls_status st = lin_b(p, &m->down, dact, 0, dy, s->act, s->xa_d, T, scr);
    if (st != LS_OK) return st;
    LS_K(ls_swiglu_backward)(dg, du, dact, s->g, s->u, T * m->gate.out);
    if ((st = lin_b(p, &m->gate, dx, acc, dg, x, s->xa_g, T, scr)) != LS_OK) return st;
    return lin_b(p, &m->up, dx, 1, du, x, s->xa_u, T, scr);
}

/* The effective kv_b W + (alpha/r) B A (W itself without an adapter). */
static const ls_real *kv_b_effective(const ls_params *p, const ls_lin *l, ls_real *out) {
    if (!lora_r(l)) return l->W->w;
    size_t r = lora_r(l);
    memcpy(out, l->W->w, R(l->out * l->in));
    for (size_t o = 0; o < l->out; o++)
        for (size_t k = 0; k < r; k++) {
            ls_real b = p->lora_scale * l->B->w[o * r + k];
            const ls_real *a = l->A->w + k * l->in;
            for (size_t j = 0; j < l->in; j++) out[o * l->in + j] += b * a[j];
        }
    return out;
}

/* d(W_eff) -> dW (+= when trained), dA += s B^T dWe, dB += s dWe A^T. */
void LS_K(ls_mla_kv_b_grad)(const ls_params *p, const ls_lin *l, const ls_real *dwe) {
    size_t in = l->in, out = l->out, r = lora_r(l);
    if (l->W->g)
        for (size_t i = 0; i < out * in; i++) l->W->g[i] += dwe[i];
    if (!r) return;
    ls_real s = p->lora_scale;
    for (size_t o = 0; o < out; o++)
        for (size_t k = 0; k < r; k++) {
            ls_real b = l->B->w[o * r + k], acc = 0;
            const ls_real *a = l->A->w + k * in, *g = dwe + o * in;
            for (size_t j = 0; j < in; j++) acc += g[j] * a[j];
            if (l->B->g) l->B->g[o * r + k] += s * acc;
            if (l->A->g)
                for (size_t j = 0; j < in; j++) l->A->g[k * in + j] += s * b * g[j];
        }
}

/* ---- attention over a list of key blocks ------------------------------------ */

ls_status LS_K(ls_mla_attn_forward)(const ls_params *p, const ls_mla_attn_q *q, const ls_mla_kblock *blk, size_t nb,
                                    int64_t *sel, ls_real *o, ls_real *lse) {
    const ls_model_config *c = &p->cfg;
    ls_mla_dims dm = dims_of(c);
    ls_mla_form form = form_for(q->T, (size_t)q->pos0 + q->T);
    size_t T = q->T, k = q->k_sel, H = dm.H, dv = dm.d_v, HI = (size_t)ls_mla_keys_of(c)->index_heads, dI = (size_t)ls_mla_keys_of(c)->index_dim;
    size_t maxn = 1;
    for (size_t b = 0; b < nb; b++)
        if (blk[b].n > maxn) maxn = blk[b].n;
    ls_arena a;
    ls_arena_init(&a, LS_MEM_SCRATCH, 0);
    int64_t *bsel = ls_arena_alloc(&a, T * k * sizeof *bsel), *tsel = ls_arena_alloc(&a, T * k * sizeof *tsel);
    int64_t *lsel = ls_arena_alloc(&a, T * k * sizeof *lsel);
    ls_real *rsc = buf(NULL, &a, T * k), *bsc = buf(NULL, &a, T * k), *tsc = buf(NULL, &a, T * k);
    ls_real *dws = buf(NULL, &a, LS_K(ls_dsa_topk_workspace)(maxn));
    ls_real *mws = buf(NULL, &a, LS_K(ls_mla_forward_workspace)(form, maxn, k, &dm));
    ls_real *ob = buf(NULL, &a, T * H * dv), *lb = buf(NULL, &a, T * H);
    if (a.failed) {
        ls_arena_free(&a);
        return LS_ERR_NOMEM;
    }
    /* the selection: each block's top-k, merged into the running global top-k */
    int first = 1;
    for (size_t b = 0; b < nb; b++) {
        if (!blk[b].n) continue;
        LS_K(ls_dsa_topk)(first ? sel : bsel, first ? rsc : bsc, q->qI, q->wI, blk[b].kI, T, blk[b].n, HI, dI,
                          q->pos0, blk[b].pos0, k, dws);
        if (!first) {
            const int64_t *cp[2] = {sel, bsel};
            const ls_real *cs[2] = {rsc, bsc};
            LS_K(ls_dsa_merge)(tsel, tsc, cp, cs, 2, T, k, k);
            memcpy(sel, tsel, T * k * sizeof *sel);
            memcpy(rsc, tsc, R(T * k));
        }
        first = 0;
    }
    if (first)
        for (size_t i = 0; i < T * k; i++) sel[i] = -1;
    /* attention per block over its part of the selection, partials merged */
    memset(o, 0, R(T * H * dv));
    for (size_t i = 0; i < T * H; i++) lse[i] = (ls_real)-INFINITY;
    for (size_t b = 0; b < nb; b++) {
        if (!blk[b].n) continue;
        LS_K(ls_dsa_localize)(lsel, sel, T, k, blk[b].pos0, blk[b].n);
        size_t any = 0;
        for (size_t i = 0; i < T * k && !any; i++) any = lsel[i] >= 0;
        if (!any) continue;
        LS_K(ls_mla_forward)(ob, lb, q->qn, q->qpe, blk[b].ckv, blk[b].kpe, q->kvb, lsel, k, T, blk[b].n, &dm,
                             q->pos0, blk[b].pos0, tau_of(c), form, mws);
        LS_K(ls_attn_merge_into)(o, lse, ob, lb, T * H, dv);
    }
    ls_arena_free(&a);
    return LS_OK;
}

ls_status LS_K(ls_mla_attn_backward)(const ls_params *p, const ls_mla_attn_q *q, const ls_mla_kblock *blk,
                                     size_t nb, const int64_t *sel, const ls_real *o, const ls_real *lse,
                                     const ls_real *dout, ls_real *dq_nope, ls_real *dq_pe, ls_real *dkv_b) {
    const ls_model_config *c = &p->cfg;
    ls_mla_dims dm = dims_of(c);
    ls_mla_form form = form_for(q->T, (size_t)q->pos0 + q->T);
    size_t T = q->T, k = q->k_sel, H = dm.H, dn = dm.d_n, dr = dm.d_r, dv = dm.d_v, maxn = 1;
    for (size_t b = 0; b < nb; b++)
        if (blk[b].n > maxn) maxn = blk[b].n;
    ls_arena a;
    ls_arena_init(&a, LS_MEM_SCRATCH, 0);
    int64_t *lsel = ls_arena_alloc(&a, T * k * sizeof *lsel);
    ls_real *ws = buf(NULL, &a, LS_K(ls_mla_backward_workspace)(form, maxn, k, &dm));
    if (a.failed) {
        ls_arena_free(&a);
        return LS_ERR_NOMEM;
    }
    ls_real tau = tau_of(c);
    for (size_t b = 0; b < nb; b++) {
        const ls_mla_kblock *B = &blk[b];
        if (!B->n) continue;
        LS_K(ls_dsa_localize)(lsel, sel, T, k, B->pos0, B->n);
        size_t any = 0;
        for (size_t i = 0; i < T * k && !any; i++) any = lsel[i] >= 0;
        if (!any) continue;
        size_t e = (B->dckv || B->dkpe) ? (B->kgrad_q_end < T ? B->kgrad_q_end : T) : 0;
        /* queries [0, e) with the block's key gradients, [e, T) without */
        size_t part[2][2] = {{0, e}, {e, T}};
        for (int j = 0; j < 2; j++) {
            size_t t0 = part[j][0], n = part[j][1] - part[j][0];
            if (!n) continue;
            LS_K(ls_mla_backward)(dq_nope + t0 * H * dn, dq_pe + t0 * H * dr, j ? NULL : B->dckv, j ? NULL : B->dkpe,
                                  dkv_b, o + t0 * H * dv, lse + t0 * H, dout + t0 * H * dv, q->qn + t0 * H * dn,
                                  q->qpe + t0 * H * dr, B->ckv, B->kpe, q->kvb, lsel + t0 * k, k, n, B->n, &dm,
                                  q->pos0 + (int64_t)t0, B->pos0, tau, form, ws);
        }
    }
    ls_arena_free(&a);
    return LS_OK;
}

/* ---- attention under context parallelism (ls_mla_cp_layer; mla_cp_attn.h) ------------ */

/* The replicated response rows of a response segment: the context's pages
 * from cp->T on, then the segment's own rows, as one block (copied when the
 * context has response pages: a decode state). */
typedef struct {
    ls_mla_cp_rows rows;
    size_t n_ctx;          /* rows from the context's pages */
    ls_real *ckv, *kpe, *kI; /* the joined copy (NULL: rows are the own rows) */
} cp_resp;

static size_t cp_shard_pages(const ls_layer_state *ctx, const ls_mla_cp *cp) {
    size_t i = 0;
    while (ctx && i < ctx->n_pages && ctx->pages[i].pos0 < cp->T) i++;
    return i;
}

static ls_status cp_resp_rows(cp_resp *r, const ls_model_config *c, const ls_layer_state *ctx, size_t ns,
                              const ls_real *ckv, const ls_real *kpe, const ls_real *kI, size_t T, int64_t pos0,
                              ls_arena *scr) {
    size_t rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dr = (size_t)ls_mla_keys_of(c)->d_rope, dI = (size_t)ls_mla_keys_of(c)->index_dim, np = ctx ? ctx->n_pages : 0;
    memset(r, 0, sizeof *r);
    for (size_t i = ns; i < np; i++) r->n_ctx += ctx->pages[i].n;
    r->rows = (ls_mla_cp_rows){.c_kv = ckv, .k_pe = kpe, .k_I = kI, .pos0 = pos0, .n = T};
    if (!r->n_ctx) return LS_OK;
    size_t n = r->n_ctx + T, off = 0;
    r->ckv = buf(NULL, scr, n * rkv);
    r->kpe = buf(NULL, scr, n * dr);
    r->kI = kI ? buf(NULL, scr, n * dI) : NULL;
    if (scr->failed) return LS_ERR_NOMEM;
    for (size_t i = ns; i < np; i++) {
        const ls_kv_page *pg = &ctx->pages[i];
        memcpy(r->ckv + off * rkv, pg->k, R(pg->n * rkv));
        memcpy(r->kpe + off * dr, pg->v, R(pg->n * dr));
        if (kI) memcpy(r->kI + off * dI, pg->x, R(pg->n * dI));
        off += pg->n;
    }
    memcpy(r->ckv + off * rkv, ckv, R(T * rkv));
    memcpy(r->kpe + off * dr, kpe, R(T * dr));
    if (kI) memcpy(r->kI + off * dI, kI, R(T * dI));
    r->rows = (ls_mla_cp_rows){.c_kv = r->ckv, .k_pe = r->kpe, .k_I = r->kI, .pos0 = ctx->pages[ns].pos0, .n = n};
    return LS_OK;
}

static ls_mla_cp_rows *cp_shard_rows(const ls_layer_state *ctx, size_t ns, ls_arena *scr) {
    ls_mla_cp_rows *b = ls_arena_alloc(scr, (ns + 1) * sizeof *b);
    for (size_t i = 0; b && i < ns; i++) {
        const ls_kv_page *pg = &ctx->pages[i];
        b[i] = (ls_mla_cp_rows){.c_kv = pg->k, .k_pe = pg->v, .k_I = pg->x, .pos0 = pg->pos0, .n = pg->n};
    }
    return b;
}

/* The layer's attention across the ranks: sel, o, lse assigned (the same on every rank for a response). */
static ls_status cp_attn_forward(const ls_mla_cp_layer *L, int l, const ls_model_config *c, const ls_mla_attn_q *q,
                                 const ls_layer_state *ctx, const ls_real *ckv, const ls_real *kpe,
                                 const ls_real *kI, int64_t *sel, ls_real *o, ls_real *lse, ls_arena *scr) {
    ls_mla_cp cp = *L->cp;
    cp.k_top = q->k_sel;
    cp.form = form_for(q->T, (size_t)q->pos0 + q->T);
    ls_mla_cp_queries cq = {.q_nope = q->qn, .q_pe = q->qpe, .q_I = q->qI, .w = q->wI, .pos0 = q->pos0, .T = q->T};
    ls_mla_cp_rows own = {.c_kv = ckv, .k_pe = kpe, .k_I = kI, .pos0 = q->pos0, .n = q->T};
    if (L->prompt) {
        ls_status st = LS_K(ls_mla_cp_prompt_select)(&cp, sel, &cq, &own, l);
        if (st == LS_OK) st = LS_K(ls_mla_cp_prompt_forward)(&cp, o, lse, &cq, sel, &own, q->kvb, 1, l);
        return st;
    }
    size_t ns = cp_shard_pages(ctx, &cp);
    cp_resp r;
    ls_status st = cp_resp_rows(&r, c, ctx, ns, ckv, kpe, kI, q->T, q->pos0, scr);
    ls_mla_cp_rows *blk = st == LS_OK ? cp_shard_rows(ctx, ns, scr) : NULL;
    if (st == LS_OK && !blk) st = LS_ERR_NOMEM;
    if (st == LS_OK) st = LS_K(ls_mla_cp_response_select)(&cp, sel, &cq, blk, ns, &r.rows, l);
    if (st == LS_OK) st = LS_K(ls_mla_cp_response_forward)(&cp, o, lse, &cq, sel, blk, ns, &r.rows, q->kvb, l);
    return st;
}

/* Its backward: dq_nope, dq_pe assigned; dckv/dkpe [T, ..] (the own rows') +=; the context's shard pages'
 * gradient into dctx (NULL: detached), its response pages' too; dkvb (may be NULL) +=. */
static ls_status cp_attn_backward(const ls_mla_cp_layer *L, int l, const ls_model_config *c, const ls_mla_attn_q *q,
                                  const ls_layer_state *ctx, ls_layer_state *dctx, const ls_real *ckv,
                                  const ls_real *kpe, const int64_t *sel, const ls_real *o, const ls_real *lse,
                                  const ls_real *dout, ls_real *dqn, ls_real *dqpe, ls_real *dckv, ls_real *dkpe,
                                  ls_real *dkvb, ls_arena *scr) {
    size_t T = q->T, rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dr = (size_t)ls_mla_keys_of(c)->d_rope;
    ls_mla_cp cp = *L->cp;
    cp.k_top = q->k_sel;
    cp.form = form_for(T, (size_t)q->pos0 + T);
    ls_mla_cp_queries cq = {.q_nope = q->qn, .q_pe = q->qpe, .pos0 = q->pos0, .T = T};
    ls_mla_cp_rows own = {.c_kv = ckv, .k_pe = kpe, .pos0 = q->pos0, .n = T};
    if (L->prompt) {
        ls_mla_cp_drows down = {dckv, dkpe};
        memset(dqn, 0, R(T * (size_t)ls_mla_keys_of(c)->heads * (size_t)ls_mla_keys_of(c)->d_nope));
        memset(dqpe, 0, R(T * (size_t)ls_mla_keys_of(c)->heads * dr));
        return LS_K(ls_mla_cp_prompt_backward)(&cp, dqn, dqpe, &down, dkvb, o, lse, dout, &cq, sel, &own, q->kvb, 1,
                                               l);
    }
    size_t ns = cp_shard_pages(ctx, &cp);
    cp_resp r;
    ls_status st = cp_resp_rows(&r, c, ctx, ns, ckv, kpe, NULL, T, q->pos0, scr);
    ls_mla_cp_rows *blk = st == LS_OK ? cp_shard_rows(ctx, ns, scr) : NULL;
    ls_mla_cp_drows *dblk = ls_arena_alloc(scr, (ns + 1) * sizeof *dblk);
    size_t nr = r.rows.n;
    ls_real *drc = r.n_ctx ? buf(NULL, scr, nr * rkv) : dckv, *drp = r.n_ctx ? buf(NULL, scr, nr * dr) : dkpe;
    if (st == LS_OK && (!blk || !dblk || scr->failed)) st = LS_ERR_NOMEM;
    if (st != LS_OK) return st;
    for (size_t i = 0; i < ns; i++)
        dblk[i] = (ls_mla_cp_drows){dctx ? dctx->pages[i].k : NULL, dctx ? dctx->pages[i].v : NULL};
    if (r.n_ctx) { /* the joined rows' gradient: zero, then split */
        memset(drc, 0, R(nr * rkv));
        memset(drp, 0, R(nr * dr));
    }
    ls_mla_cp_drows dresp = {drc, drp};
    st = LS_K(ls_mla_cp_response_backward)(&cp, dqn, dqpe, dblk, &dresp, dkvb, o, lse, dout, &cq, sel, blk, ns,
                                           &r.rows, q->kvb, l);
    if (st != LS_OK || !r.n_ctx) return st;
    size_t off = 0;
    for (size_t i = ns; i < ctx->n_pages; i++) {
        size_t n = ctx->pages[i].n;
        for (size_t j = 0; dctx && j < n * rkv; j++) dctx->pages[i].k[j] += drc[off * rkv + j];
        for (size_t j = 0; dctx && j < n * dr; j++) dctx->pages[i].v[j] += drp[off * dr + j];
        off += n;
    }
    for (size_t j = 0; j < T * rkv; j++) dckv[j] += drc[off * rkv + j];
    for (size_t j = 0; j < T * dr; j++) dkpe[j] += drp[off * dr + j];
    return LS_OK;
}

/* ---- the routed MoE, chunk by chunk ------------------------------------------ */

/* The routed-token buffers of one chunk of C tokens (LS_MEM_DISPATCH). */
typedef struct {
    ls_real *blk;
    void *iblk;
    ls_real *xg, *eo, *eg, *eu, *ea, *xa_g, *xa_u, *xa_d, *deo, *dxg, *dea, *deg, *deu;
    int32_t *idx;
    size_t *slot_of_row, *row_of_slot;
} dispatch_bufs;

static size_t expert_r(const ls_params *p) {
    return p->obj.train_mode == LS_TRAIN_LORA && p->obj.lora_experts ? (size_t)p->obj.lora_r : 0;
}

/* Reals and index bytes of one chunk's routed buffers (forward; with bwd the backward's too). */
static void dispatch_sizes(const ls_model_config *c, size_t C, size_t r, int bwd, size_t *reals, size_t *ibytes) {
    size_t Ck = C * (size_t)ls_mla_keys_of(c)->experts_per_token, d = (size_t)c->d_model, Ie = (size_t)ls_mla_keys_of(c)->expert_dim;
    *reals = Ck * (2 * d + 3 * Ie + 3 * r) + (bwd ? Ck * (2 * d + 3 * Ie) : 0);
    *ibytes = Ck * (sizeof(int32_t) + 2 * sizeof(size_t));
}

/* Expert parallelism's exchange (ep_exchange) beside one chunk's buffers:
 * the send block (at most every slot's row when all are this rank's, esz
 * each) and the four count arrays; 0 without EP. */
static size_t ep_exchange_bytes(const ls_model_config *c, size_t C, int ep, size_t esz) {
    if (ep <= 1) return 0;
    size_t rows = ls_sat_mul(C, (size_t)ls_mla_keys_of(c)->experts_per_token);
    return ls_sat_add(ls_sat_mul3(rows, (size_t)c->d_model, esz), ls_sat_mul3(4, (size_t)ep, sizeof(size_t)));
}

/* The same with elements of esz bytes (the plan's compute dtype, not the build's). */
static size_t dispatch_bytes_esz(const ls_model_config *c, size_t C, int lora_r, int bwd, size_t esz) {
    size_t reals, ib;
    dispatch_sizes(c, C, lora_r > 0 ? (size_t)lora_r : 0, bwd, &reals, &ib);
    return ls_sat_add(ls_sat_mul(reals, esz), ib);
}

size_t LS_K(ls_mla_dispatch_bytes)(const ls_model_config *c, size_t C, int lora_r, int bwd) {
    return dispatch_bytes_esz(c, C, lora_r, bwd, sizeof(ls_real));
}

static ls_status dispatch_alloc(dispatch_bufs *b, const ls_params *p, size_t C, int bwd) {
    const ls_model_config *c = &p->cfg;
    size_t Ck = C * (size_t)ls_mla_keys_of(c)->experts_per_token, d = (size_t)c->d_model, Ie = (size_t)ls_mla_keys_of(c)->expert_dim;
    size_t r = expert_r(p), reals, ib;
    memset(b, 0, sizeof *b);
    dispatch_sizes(c, C, r, bwd, &reals, &ib);
    b->blk = ls_mem_alloc(LS_MEM_DISPATCH, R(reals));
    b->iblk = ls_mem_alloc(LS_MEM_DISPATCH, ib);
    if (!b->blk || !b->iblk) return LS_ERR_NOMEM;
    ls_real *q = b->blk;
    ls_real **fw[] = {&b->xg, &b->eo}, **fi[] = {&b->eg, &b->eu, &b->ea}, **fr[] = {&b->xa_g, &b->xa_u, &b->xa_d};
    for (int i = 0; i < 2; i++) *fw[i] = q, q += Ck * d;
    for (int i = 0; i < 3; i++) *fi[i] = q, q += Ck * Ie;
    for (int i = 0; i < 3; i++) *fr[i] = q, q += Ck * r;
    if (bwd) {
        ls_real **bw[] = {&b->deo, &b->dxg}, **bi[] = {&b->dea, &b->deg, &b->deu};
        for (int i = 0; i < 2; i++) *bw[i] = q, q += Ck * d;
        for (int i = 0; i < 3; i++) *bi[i] = q, q += Ck * Ie;
    }
    b->slot_of_row = b->iblk;
    b->row_of_slot = b->slot_of_row + Ck;
    b->idx = (int32_t *)(b->row_of_slot + Ck);
    return LS_OK;
}
static void dispatch_free(dispatch_bufs *b) {
    ls_mem_free(b->blk);
    ls_mem_free(b->iblk);
}

static size_t moe_chunk(void) { return g_opts.moe_chunk ? g_opts.moe_chunk : 256; }

#ifdef LS_REAL_F64
#define EP_DT LS_TRACE_DTYPE_F64
#else
#define EP_DT LS_TRACE_DTYPE_F32
#endif
/* Expert parallelism (trainer/dist/ep.h): buf [slots, d] holds, on every EP
 * rank, the rows of its own experts' slots (offsets [E+1], slots sorted by
 * expert, so a rank's slots are one range); the alltoallv over the EP group
 * hands each rank's range to every other rank, so that every rank holds
 * every slot's row as a one-rank run computes it.  The fault ep-drop-dx
 * (drop) sends zeros from the last EP rank instead of its rows. */
static ls_status ep_exchange(const ls_ep *ep, ls_real *buf, const size_t *offsets, size_t E, size_t d, int drop,
                             const char *purpose, int layer) {
    size_t n = (size_t)ep->size, per = E / n, me = (size_t)ep->rank;
    size_t lo = offsets[me * per], rows = offsets[(me + 1) * per] - lo;
    size_t *cnt = ls_mem_alloc(LS_MEM_DISPATCH, 4 * n * sizeof *cnt);
    size_t nsend = rows * d > 0 ? rows * d : 1;
    ls_real *send = ls_mem_alloc(LS_MEM_DISPATCH, R(nsend));
    ls_status st = LS_ERR_NOMEM;
    if (cnt && send) {
        size_t *sc = cnt, *sd = cnt + n, *rc = cnt + 2 * n, *rd = cnt + 3 * n;
        if (drop && me == n - 1) memset(send, 0, R(rows * d));
        else if (rows) memcpy(send, buf + lo * d, R(rows * d));
        for (size_t q = 0; q < n; q++) {
            size_t qlo = offsets[q * per], qrows = offsets[(q + 1) * per] - qlo;
            sc[q] = q == me ? 0 : rows * d, sd[q] = 0;
            rc[q] = q == me ? 0 : qrows * d, rd[q] = qlo * d;
        }
        st = ls_group_alltoallv(ep->g, send, sc, sd, buf, rc, rd, EP_DT, purpose, layer);
        if (st == LS_OK && drop && me == n - 1 && rows) memset(buf + lo * d, 0, R(rows * d));
    }
    ls_mem_free(cnt);
    ls_mem_free(send);
    return st;
}

/* y [T,d] = MoE(x [T,d]); with dy: the backward instead (dx [T,d] assigned,
 * weight gradients +=), each chunk's routing and experts recomputed. */
static ls_status moe_run(const ls_params *p, const ls_mla_layer *ly, int layer, const ls_real *x, size_t T,
                         ls_real *y, const ls_real *dy, ls_real *dx) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, E = (size_t)ls_mla_keys_of(c)->n_experts, k = (size_t)ls_mla_keys_of(c)->experts_per_token;
    /* EP: this rank runs its own experts [e0, e1) only; ep_exchange brings the others' rows */
    const ls_ep *ep = LS_K(ls_ep_get)();
    size_t e0 = ep ? (size_t)ep->rank * (E / (size_t)ep->size) : 0, e1 = ep ? e0 + E / (size_t)ep->size : E;
    size_t Ie = (size_t)ls_mla_keys_of(c)->expert_dim, C = moe_chunk() < T ? moe_chunk() : T, rs = lora_r(&ly->shared.gate);
    size_t r = expert_r(p);
    int bwd = dy != NULL;
    dispatch_bufs D;
    ls_arena a;
    ls_arena_init(&a, LS_MEM_SCRATCH, 0);
    ls_status st = dispatch_alloc(&D, p, C, bwd);
    ls_real *logits = buf(NULL, &a, C * E), *s = buf(NULL, &a, C * E), *w = buf(NULL, &a, C * k);
    ls_real *rws = buf(NULL, &a, LS_K(ls_moe_route_workspace)(E, (size_t)ls_mla_keys_of(c)->n_group));
    ls_real *sg = buf(NULL, &a, C * Ie), *su = buf(NULL, &a, C * Ie), *sa = buf(NULL, &a, C * Ie);
    ls_real *sxa = buf(NULL, &a, 3 * C * (rs ? rs : 1)), *sh = buf(NULL, &a, C * d);
    ls_real *dw = buf(NULL, &a, C * k), *dlog = buf(NULL, &a, C * E);
    ls_real *dsa = buf(NULL, &a, C * Ie), *dsg = buf(NULL, &a, C * Ie), *dsu = buf(NULL, &a, C * Ie);
    size_t *offsets = ls_arena_alloc(&a, (E + 1) * sizeof *offsets);
    if (st == LS_OK && a.failed) st = LS_ERR_NOMEM;
    mlp_saves ss = {sxa, sxa + C * rs, sxa + 2 * C * rs, sg, su, sa};
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += C) {
        size_t n = T - t0 < C ? T - t0 : C;
        const ls_real *xc = x + t0 * d;
        lin_f(p, &ly->router, logits, NULL, xc, n);
        LS_K(ls_moe_route_forward)(D.idx, w, s, logits, ly->router_bias->w, n, E, (size_t)ls_mla_keys_of(c)->n_group,
                                   (size_t)ls_mla_keys_of(c)->topk_group, k, (ls_real)ls_mla_keys_of(c)->routed_scale, rws);
        LS_K(ls_moe_dispatch)(offsets, D.slot_of_row, D.row_of_slot, D.idx, n, E, k);
        LS_K(ls_moe_gather)(D.xg, xc, D.slot_of_row, n, k, d);
        for (size_t e = e0; e < e1; e++) {
            size_t r0 = offsets[e], nr = offsets[e + 1] - r0;
            if (!nr) continue;
            ls_mla_mlp m = LS_K(ls_mla_expert)(p, ly, e);
            mlp_saves es = {D.xa_g + r0 * r, D.xa_u + r0 * r, D.xa_d + r0 * r, D.eg + r0 * Ie, D.eu + r0 * Ie,
                            D.ea + r0 * Ie};
            mlp_f(p, &m, D.eo + r0 * d, D.xg + r0 * d, nr, &es);
        }
        if (ep && (st = ep_exchange(ep, D.eo, offsets, E, d, 0, "moe_combine", layer)) != LS_OK) break;
        mlp_f(p, &ly->shared, sh, xc, n, &ss);
        if (!bwd) {
            LS_K(ls_moe_combine_forward)(y + t0 * d, D.eo, w, sh, D.row_of_slot, n, k, d);
            continue;
        }
        const ls_real *dyc = dy + t0 * d;
        ls_real *dxc = dx + t0 * d;
        ls_arena ca; /* the adapters' backward scratch, per chunk */
        ls_arena_init(&ca, LS_MEM_SCRATCH, 0);
        LS_K(ls_moe_combine_backward)(D.deo, dw, dyc, D.eo, w, D.row_of_slot, n, k, d);
        st = mlp_b(p, &ly->shared, dxc, 0, dyc, xc, n, &ss, dsa, dsg, dsu, &ca); /* the shared expert: dy itself */
        for (size_t e = e0; st == LS_OK && e < e1; e++) {
            size_t r0 = offsets[e], nr = offsets[e + 1] - r0;
            if (!nr) continue;
            ls_mla_mlp m = LS_K(ls_mla_expert)(p, ly, e);
            mlp_saves es = {D.xa_g + r0 * r, D.xa_u + r0 * r, D.xa_d + r0 * r, D.eg + r0 * Ie, D.eu + r0 * Ie,
                            D.ea + r0 * Ie};
            st = mlp_b(p, &m, D.dxg + r0 * d, 0, D.deo + r0 * d, D.xg + r0 * d, nr, &es, D.dea + r0 * Ie,
                       D.deg + r0 * Ie, D.deu + r0 * Ie, &ca);
        }
        /* EP: the owners' input gradients of their rows to every rank (dy and deo are every rank's already) */
        if (st == LS_OK && ep) st = ep_exchange(ep, D.dxg, offsets, E, d, ep->drop_dx, "moe_dx", layer);
        if (st == LS_OK) {
            LS_K(ls_moe_scatter_add)(dxc, D.dxg, D.slot_of_row, n, k, d);
            LS_K(ls_moe_route_backward)(dlog, NULL, dw, s, D.idx, n, E, k, (ls_real)ls_mla_keys_of(c)->routed_scale);
            st = lin_b(p, &ly->router, dxc, 1, dlog, xc, NULL, n, &ca);
        }
        ls_arena_free(&ca);
    }
    dispatch_free(&D);
    ls_arena_free(&a);
    return st;
}

/* moe_run under a ledger of its own (kernels/decisions.h), folded into the
 * caller's: *dec the routing it decided. */
static ls_status moe_noted(const ls_params *p, const ls_mla_layer *ly, int layer, const ls_real *x, size_t T,
                           ls_real *y, const ls_real *dy, ls_real *dx, ls_decisions *dec) {
    ls_decisions own, *outer = ls_decisions_begin(&own);
    ls_status st = moe_run(p, ly, layer, x, T, y, dy, dx);
    ls_decisions_end(outer, &own);
    *dec = own;
    return st;
}

/* ---- the layer -------------------------------------------------------------- */

ls_status LS_K(ls_mla_layer_forward)(const ls_params *p, int l, ls_real *h, size_t T, int64_t pos0,
                                     const ls_layer_state *ctx, ls_real *own_ckv, ls_real *own_kpe,
                                     ls_real *own_kI, ls_mla_layer_tape *tp, ls_arena *ta, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    const ls_mla_layer *ly = &LS_K(ls_mla_layers)(p)[l];
    size_t d = (size_t)c->d_model, H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank, rkv = (size_t)ls_mla_keys_of(c)->kv_rank;
    size_t dn = (size_t)ls_mla_keys_of(c)->d_nope, dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v, dqk = dn + dr;
    size_t HI = (size_t)ls_mla_keys_of(c)->index_heads, dI = (size_t)ls_mla_keys_of(c)->index_dim, I = (size_t)c->ffn_dim;
    ls_real eps = (ls_real)c->rms_eps;
    double theta = c->rope_theta;
    size_t np = ctx ? ctx->n_pages : 0;
    const ls_mla_cp_layer *cpl = ctx ? ctx->cp : NULL;
    size_t Tk = cpl && cpl->prompt ? (size_t)cpl->cp->T : (size_t)pos0 + T; /* the same k on every rank */
    size_t k_sel = (size_t)ls_mla_keys_of(c)->index_topk < Tk ? (size_t)ls_mla_keys_of(c)->index_topk : Tk;
    ls_real *x = tp ? buf(ta, scr, T * d) : h, *rstd1 = buf(ta, scr, T), *xn1 = buf(ta, scr, T * d);
    ls_real *xa_qa = lora_save(ta, scr, &ly->q_a, T), *cq = buf(ta, scr, T * rq), *rstd_q = buf(ta, scr, T);
    ls_real *cqn = buf(ta, scr, T * rq), *xa_qb = lora_save(ta, scr, &ly->q_b, T);
    ls_real *qf = buf(NULL, scr, T * H * dqk), *qn = buf(ta, scr, T * H * dn), *qpe = buf(ta, scr, T * H * dr);
    ls_real *xa_kva = lora_save(ta, scr, &ly->kv_a, T), *kv = buf(NULL, scr, T * (rkv + dr));
    ls_real *ctil = buf(ta, scr, T * rkv), *rstd_kv = buf(ta, scr, T), *ckv = buf(ta, scr, T * rkv);
    ls_real *kpe = buf(ta, scr, T * dr), *ikt = buf(NULL, scr, T * dI), *kI = buf(NULL, scr, T * dI);
    ls_real *qI = buf(NULL, scr, T * HI * dI), *wI = buf(NULL, scr, T * HI);
    ls_real *kvb_buf = lora_r(&ly->kv_b) ? buf(NULL, scr, ly->kv_b.out * ly->kv_b.in) : NULL;
    int64_t *sel = ls_arena_alloc(ta ? ta : scr, (T * k_sel > 0 ? T * k_sel : 1) * sizeof *sel);
    ls_real *o = buf(ta, scr, T * H * dv), *lse = buf(ta, scr, T * H), *xa_o = lora_save(ta, scr, &ly->o, T);
    ls_real *y = buf(NULL, scr, T * d), *h_mid = tp ? buf(ta, scr, T * d) : NULL, *rstd2 = buf(ta, scr, T);
    ls_real *xn2 = buf(ta, scr, T * d);
    ls_mla_kblock *blk = ls_arena_alloc(scr, (np + 1) * sizeof *blk);
    mlp_saves ms = {0};
    if (!ly->is_moe) {
        ms.xa_g = lora_save(ta, scr, &ly->mlp.gate, T);
        ms.xa_u = lora_save(ta, scr, &ly->mlp.up, T);
        ms.xa_d = lora_save(ta, scr, &ly->mlp.down, T);
        ms.g = buf(ta, scr, T * I);
        ms.u = buf(ta, scr, T * I);
        ms.act = buf(ta, scr, T * I);
    }
    if ((ta && ta->failed) || scr->failed) return LS_ERR_NOMEM;
    if (tp) memcpy(x, h, R(T * d));
    /* ---- MLA with the DSA selection (§2.1, §2.2) ---- */
    LS_K(ls_rmsnorm_forward)(xn1, rstd1, x, ly->norm1->w, 0, eps, T, d);
    lin_f(p, &ly->q_a, cq, xa_qa, xn1, T);
    LS_K(ls_rmsnorm_forward)(cqn, rstd_q, cq, ly->q_a_norm->w, 0, eps, T, rq);
    lin_f(p, &ly->q_b, qf, xa_qb, cqn, T);
    for (size_t i = 0; i < T * H; i++) {
        memcpy(qn + i * dn, qf + i * dqk, R(dn));
        memcpy(qpe + i * dr, qf + i * dqk + dn, R(dr));
    }
    LS_K(ls_rope_apply)(qpe, LS_ROPE_INTERLEAVED, T, H, dr, dr, pos0, theta, 0);
    lin_f(p, &ly->kv_a, kv, xa_kva, xn1, T);
    for (size_t t = 0; t < T; t++) {
        memcpy(ctil + t * rkv, kv + t * (rkv + dr), R(rkv));
        memcpy(kpe + t * dr, kv + t * (rkv + dr) + rkv, R(dr));
    }
    LS_K(ls_rmsnorm_forward)(ckv, rstd_kv, ctil, ly->kv_a_norm->w, 0, eps, T, rkv);
    LS_K(ls_rope_apply)(kpe, LS_ROPE_INTERLEAVED, T, 1, dr, dr, pos0, theta, 0);
    /* the indexer (frozen): keys from the normalised input, queries from c_q */
    lin_f(p, &ly->ik, ikt, NULL, xn1, T);
    LS_K(ls_layernorm_forward)(kI, ikt, ly->ik_norm_w->w, ly->ik_norm_b->w, (ls_real)INDEXER_LN_EPS, T, dI);
    LS_K(ls_rope_apply)(kI, LS_ROPE_NEOX, T, 1, dI, dr, pos0, theta, 0);
    lin_f(p, &ly->iq, qI, NULL, cqn, T);
    LS_K(ls_rope_apply)(qI, LS_ROPE_NEOX, T, HI, dI, dr, pos0, theta, 0);
    lin_f(p, &ly->iw, wI, NULL, xn1, T);
    ls_real wscale = (ls_real)(1.0 / sqrt((double)HI) / sqrt((double)dI));
    for (size_t i = 0; i < T * HI; i++) wI[i] *= wscale;
    for (size_t i = 0; i < np; i++) {
        const ls_kv_page *pg = &ctx->pages[i];
        blk[i] = (ls_mla_kblock){.ckv = pg->k, .kpe = pg->v, .kI = pg->x, .n = pg->n, .pos0 = pg->pos0};
    }
    blk[np] = (ls_mla_kblock){.ckv = ckv, .kpe = kpe, .kI = kI, .n = T, .pos0 = pos0};
    ls_mla_attn_q aq = {.qn = qn, .qpe = qpe, .qI = qI, .wI = wI, .kvb = kv_b_effective(p, &ly->kv_b, kvb_buf),
                        .T = T, .k_sel = k_sel, .pos0 = pos0};
    ls_status st = cpl ? cp_attn_forward(cpl, l, c, &aq, ctx, ckv, kpe, kI, sel, o, lse, scr)
                       : LS_K(ls_mla_attn_forward)(p, &aq, blk, np + 1, sel, o, lse);
    if (st != LS_OK) return st;
    ls_decisions_note(sel, T * k_sel * sizeof *sel, T); /* each query's selected keys (kernels/decisions.h) */
    lin_f(p, &ly->o, y, xa_o, o, T);
    for (size_t i = 0; i < T * d; i++) h[i] = x[i] + y[i];
    if (h_mid) memcpy(h_mid, h, R(T * d));
    /* ---- FFN: dense SwiGLU or the routed MoE (§2.3) ---- */
    LS_K(ls_rmsnorm_forward)(xn2, rstd2, h, ly->norm2->w, 0, eps, T, d);
    ls_decisions moe_dec = {0, 0};
    if (ly->is_moe)
        st = moe_noted(p, ly, l, xn2, T, y, NULL, NULL, &moe_dec);
    else
        mlp_f(p, &ly->mlp, y, xn2, T, &ms);
    if (st != LS_OK) return st;
    for (size_t i = 0; i < T * d; i++) h[i] += y[i];
    if (own_ckv) memcpy(own_ckv, ckv, R(T * rkv));
    if (own_kpe) memcpy(own_kpe, kpe, R(T * dr));
    if (own_kI) memcpy(own_kI, kI, R(T * dI));
    if (tp) {
        *tp = (ls_mla_layer_tape){.T = T, .k_sel = k_sel, .pos0 = pos0, .x = x, .rstd1 = rstd1, .xn1 = xn1,
                                  .xa_qa = xa_qa, .cq = cq, .rstd_q = rstd_q, .cqn = cqn, .xa_qb = xa_qb,
                                  .qn = qn, .qpe = qpe, .xa_kva = xa_kva, .ctil = ctil, .rstd_kv = rstd_kv,
                                  .ckv = ckv, .kpe = kpe, .sel = sel, .o = o, .lse = lse, .xa_o = xa_o,
                                  .h_mid = h_mid, .rstd2 = rstd2, .xn2 = xn2, .xa_g = ms.xa_g, .xa_u = ms.xa_u,
                                  .xa_d = ms.xa_d, .mg = ms.g, .mu = ms.u, .act = ms.act, .moe_dec = moe_dec};
    }
    return LS_OK;
}

ls_status LS_K(ls_mla_layer_backward)(const ls_params *p, int l, const ls_mla_layer_tape *tp, ls_real *dh,
                                      const ls_layer_state *ctx, ls_layer_state *dctx, const ls_real *d_own_ckv,
                                      const ls_real *d_own_kpe, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    const ls_mla_layer *ly = &LS_K(ls_mla_layers)(p)[l];
    size_t T = tp->T, d = (size_t)c->d_model, H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank;
    size_t rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dn = (size_t)ls_mla_keys_of(c)->d_nope, dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v;
    size_t dqk = dn + dr, I = (size_t)c->ffn_dim, cut = tp->cut;
    size_t np = ctx ? ctx->n_pages : 0;
    const ls_mla_cp_layer *cpl = ctx ? ctx->cp : NULL;
    if (cut && (dctx || cpl)) return LS_ERR_ARG; /* the context lies before the cut; CP has no cut */
    if (dctx && dctx->n_pages != np) return LS_ERR_INTERNAL;
    ls_real *dxn = buf(NULL, scr, T * d), *dtmp = buf(NULL, scr, T * d), *dout = buf(NULL, scr, T * H * dv);
    ls_real *dqn = buf(NULL, scr, T * H * dn), *dqpe = buf(NULL, scr, T * H * dr);
    ls_real *dckv = buf(NULL, scr, T * rkv), *dkpe = buf(NULL, scr, T * dr), *dq = buf(NULL, scr, T * H * dqk);
    ls_real *dcqn = buf(NULL, scr, T * rq), *dcq = buf(NULL, scr, T * rq), *dctil = buf(NULL, scr, T * rkv);
    ls_real *dkv = buf(NULL, scr, T * (rkv + dr));
    int want_kvb = ly->kv_b.W->g || (lora_r(&ly->kv_b) && (ly->kv_b.A->g || ly->kv_b.B->g));
    ls_real *dkvb = want_kvb ? buf(NULL, scr, ly->kv_b.out * ly->kv_b.in) : NULL;
    ls_real *kvb_buf = lora_r(&ly->kv_b) ? buf(NULL, scr, ly->kv_b.out * ly->kv_b.in) : NULL;
    ls_mla_kblock *blk = ls_arena_alloc(scr, (np + 2) * sizeof *blk);
    ls_real *dact = NULL, *dg = NULL, *du = NULL;
    if (!ly->is_moe) {
        dact = buf(NULL, scr, T * I);
        dg = buf(NULL, scr, T * I);
        du = buf(NULL, scr, T * I);
    }
    if (scr->failed) return LS_ERR_NOMEM;
    /* ---- FFN ---- */
    ls_status st;
    if (ly->is_moe) {
        ls_decisions again = {0, 0};
        st = moe_noted(p, ly, l, tp->xn2, T, NULL, dh, dxn, &again);
        if (st == LS_OK && !ls_decisions_equal(&again, &tp->moe_dec)) {
            fprintf(stderr, "longstraw: layer %d: the MoE backward's recomputed routing differs from its forward's "
                    "(%llu tokens, digest %016llx; the forward's: %llu, %016llx)\n", l,
                    (unsigned long long)again.count, (unsigned long long)again.digest,
                    (unsigned long long)tp->moe_dec.count, (unsigned long long)tp->moe_dec.digest);
            st = LS_ERR_INTERNAL;
        }
    } else {
        mlp_saves ms = {tp->xa_g, tp->xa_u, tp->xa_d, tp->mg, tp->mu, tp->act};
        st = mlp_b(p, &ly->mlp, dxn, 0, dh, tp->xn2, T, &ms, dact, dg, du, scr);
    }
    if (st != LS_OK) return st;
    LS_K(ls_rmsnorm_backward)(dtmp, ly->norm2->g, dxn, tp->h_mid, tp->rstd2, ly->norm2->w, 0, T, d);
    for (size_t i = 0; i < T * d; i++) dh[i] += dtmp[i];
    /* ---- attention ---- */
    if ((st = lin_b(p, &ly->o, dout, 0, dh, tp->o, tp->xa_o, T, scr)) != LS_OK) return st;
    if (d_own_ckv) memcpy(dckv, d_own_ckv, R(T * rkv));
    if (d_own_kpe) memcpy(dkpe, d_own_kpe, R(T * dr));
    for (size_t i = 0; i < np; i++) {
        const ls_kv_page *pg = &ctx->pages[i];
        blk[i] = (ls_mla_kblock){.ckv = pg->k, .kpe = pg->v, .n = pg->n, .pos0 = pg->pos0,
                                 .dckv = dctx ? dctx->pages[i].k : NULL, .dkpe = dctx ? dctx->pages[i].v : NULL,
                                 .kgrad_q_end = T};
    }
    size_t nb = np;
    if (cut) /* queries [cut, T) give the own rows before the cut no gradient */
        blk[nb++] = (ls_mla_kblock){.ckv = tp->ckv, .kpe = tp->kpe, .n = cut, .pos0 = tp->pos0, .dckv = dckv,
                                    .dkpe = dkpe, .kgrad_q_end = cut};
    blk[nb++] = (ls_mla_kblock){.ckv = tp->ckv + cut * rkv, .kpe = tp->kpe + cut * dr, .n = T - cut,
                                .pos0 = tp->pos0 + (int64_t)cut, .dckv = dckv + cut * rkv, .dkpe = dkpe + cut * dr,
                                .kgrad_q_end = T};
    ls_mla_attn_q aq = {.qn = tp->qn, .qpe = tp->qpe, .kvb = kv_b_effective(p, &ly->kv_b, kvb_buf), .T = T,
                        .k_sel = tp->k_sel, .pos0 = tp->pos0};
    if (cpl)
        st = cp_attn_backward(cpl, l, c, &aq, ctx, dctx, tp->ckv, tp->kpe, tp->sel, tp->o, tp->lse, dout, dqn, dqpe,
                              dckv, dkpe, dkvb, scr);
    else
        st = LS_K(ls_mla_attn_backward)(p, &aq, blk, nb, tp->sel, tp->o, tp->lse, dout, dqn, dqpe, dkvb);
    if (st != LS_OK) return st;
    ls_real *acc = dkvb && cpl && !cpl->prompt ? LS_K(ls_mla_cp_acc)(cpl, &st) : NULL;
    if (st != LS_OK) return st;
    if (acc) /* shard-local: kept aside (mla_cp.c) */
        for (size_t i = 0; i < ly->kv_b.out * ly->kv_b.in; i++) acc[i] += dkvb[i];
    else if (dkvb)
        LS_K(ls_mla_kv_b_grad)(p, &ly->kv_b, dkvb);
    /* q path: RoPE, q_b, q_a_norm, q_a */
    LS_K(ls_rope_apply)(dqpe, LS_ROPE_INTERLEAVED, T, H, dr, dr, tp->pos0, c->rope_theta, 1);
    for (size_t i = 0; i < T * H; i++) {
        memcpy(dq + i * dqk, dqn + i * dn, R(dn));
        memcpy(dq + i * dqk + dn, dqpe + i * dr, R(dr));
    }
    if ((st = lin_b(p, &ly->q_b, dcqn, 0, dq, tp->cqn, tp->xa_qb, T, scr)) != LS_OK) return st;
    LS_K(ls_rmsnorm_backward)(dcq, ly->q_a_norm->g, dcqn, tp->cq, tp->rstd_q, ly->q_a_norm->w, 0, T, rq);
    if ((st = lin_b(p, &ly->q_a, dxn, 0, dcq, tp->xn1, tp->xa_qa, T, scr)) != LS_OK) return st;
    /* kv path: RoPE of k_pe, kv_a_norm, kv_a */
    LS_K(ls_rope_apply)(dkpe, LS_ROPE_INTERLEAVED, T, 1, dr, dr, tp->pos0, c->rope_theta, 1);
    LS_K(ls_rmsnorm_backward)(dctil, ly->kv_a_norm->g, dckv, tp->ctil, tp->rstd_kv, ly->kv_a_norm->w, 0, T, rkv);
    for (size_t t = 0; t < T; t++) {
        memcpy(dkv + t * (rkv + dr), dctil + t * rkv, R(rkv));
        memcpy(dkv + t * (rkv + dr) + rkv, dkpe + t * dr, R(dr));
    }
    if ((st = lin_b(p, &ly->kv_a, dxn, 1, dkv, tp->xn1, tp->xa_kva, T, scr)) != LS_OK) return st;
    LS_K(ls_rmsnorm_backward)(dtmp, ly->norm1->g, dxn, tp->x, tp->rstd1, ly->norm1->w, 0, T, d);
    for (size_t i = 0; i < T * d; i++) dh[i] += dtmp[i];
    return LS_OK;
}

/* ---- the memory plan's transients (family.h), call by call as above ------------------------------ */
typedef struct {
    size_t esz, tape, scr;
} plan_acc;
static void RQ(plan_acc *a, int to_tape, size_t bytes) {
    bytes = bytes ? bytes : 1;
    bytes = bytes > SIZE_MAX - 63 ? SIZE_MAX : (bytes + 63) & ~(size_t)63;
    if (to_tape) a->tape = ls_sat_add(a->tape, bytes);
    else a->scr = ls_sat_add(a->scr, bytes);
}
#define RQR(a, t, n) RQ(a, t, ls_sat_mul((n), (a)->esz))

typedef struct {
    size_t tape, scr, attn, moe, dispatch; /* bytes: tape, the layer's arena, the attention kernel's and MoE's arenas */
} plan_layer;

/* One layer over T queries seeing Tk keys, in blocks of at most maxn (taped or not). */
static plan_layer plan_layer_fwd(const ls_model_config *c, const ls_family_plan_in *in, int moe, size_t T, size_t Tk,
                                 size_t maxn, int taped) {
    plan_acc a = {.esz = in->esz};
    size_t d = (size_t)c->d_model, H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank, rkv = (size_t)ls_mla_keys_of(c)->kv_rank;
    size_t dn = (size_t)ls_mla_keys_of(c)->d_nope, dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v, dqk = dn + dr;
    size_t HI = (size_t)ls_mla_keys_of(c)->index_heads, dI = (size_t)ls_mla_keys_of(c)->index_dim, I = (size_t)c->ffn_dim;
    size_t r = in->lora_r > 0 ? (size_t)in->lora_r : 0, k = (size_t)ls_mla_keys_of(c)->index_topk < Tk ? (size_t)ls_mla_keys_of(c)->index_topk : Tk;
    int t = taped;
    if (t) RQR(&a, 1, T * d);
    RQR(&a, t, T), RQR(&a, t, T * d);
    if (r) RQR(&a, t, T * r);
    RQR(&a, t, T * rq), RQR(&a, t, T), RQR(&a, t, T * rq);
    if (r) RQR(&a, t, T * r);
    RQR(&a, 0, T * H * dqk), RQR(&a, t, T * H * dn), RQR(&a, t, T * H * dr);
    if (r) RQR(&a, t, T * r);
    RQR(&a, 0, T * (rkv + dr)), RQR(&a, t, T * rkv), RQR(&a, t, T), RQR(&a, t, T * rkv), RQR(&a, t, T * dr);
    RQR(&a, 0, T * dI), RQR(&a, 0, T * dI), RQR(&a, 0, T * HI * dI), RQR(&a, 0, T * HI);
    if (r) RQR(&a, 0, H * (dn + dv) * rkv); /* kv_b's effective weight */
    RQ(&a, t, ls_sat_mul3(T, k, sizeof(int64_t)));
    RQR(&a, t, T * H * dv), RQR(&a, t, T * H);
    if (r) RQR(&a, t, T * r);
    RQR(&a, 0, T * d);
    if (t) RQR(&a, 1, T * d);
    RQR(&a, t, T), RQR(&a, t, T * d);
    if (!moe) {
        for (int i = 0; r && i < 3; i++) RQR(&a, t, T * r);
        RQR(&a, t, T * I), RQR(&a, t, T * I), RQR(&a, t, T * I);
    }
    plan_layer out = {.tape = a.tape, .scr = a.scr};
    /* the attention kernel's arena (ls_mla_attn_forward) */
    ls_mla_dims dm = dims_of(c);
    plan_acc k_ = {.esz = in->esz};
    for (int i = 0; i < 3; i++) RQ(&k_, 0, ls_sat_mul3(T, k, sizeof(int64_t)));
    for (int i = 0; i < 3; i++) RQR(&k_, 0, T * k);
    RQR(&k_, 0, LS_K(ls_dsa_topk_workspace)(maxn));
    RQR(&k_, 0, LS_K(ls_mla_forward_workspace)(form_for(T, Tk), maxn, k, &dm));
    RQR(&k_, 0, T * H * dv), RQR(&k_, 0, T * H);
    out.attn = k_.scr;
    if (moe) { /* moe_run's arena and the dispatch buffers of one chunk */
        size_t E = (size_t)ls_mla_keys_of(c)->n_experts, kk = (size_t)ls_mla_keys_of(c)->experts_per_token, Ie = (size_t)ls_mla_keys_of(c)->expert_dim;
        size_t mc = in->moe_chunk ? in->moe_chunk : moe_chunk(), C = mc < T ? mc : T, rs = r;
        plan_acc m = {.esz = in->esz};
        RQR(&m, 0, C * E), RQR(&m, 0, C * E), RQR(&m, 0, C * kk);
        RQR(&m, 0, LS_K(ls_moe_route_workspace)(E, (size_t)ls_mla_keys_of(c)->n_group));
        RQR(&m, 0, C * Ie), RQR(&m, 0, C * Ie), RQR(&m, 0, C * Ie), RQR(&m, 0, 3 * C * (rs ? rs : 1)), RQR(&m, 0, C * d);
        RQR(&m, 0, C * kk), RQR(&m, 0, C * E), RQR(&m, 0, C * Ie), RQR(&m, 0, C * Ie), RQR(&m, 0, C * Ie);
        RQ(&m, 0, (E + 1) * sizeof(size_t));
        out.moe = m.scr;
        out.dispatch = ls_sat_add(dispatch_bytes_esz(c, C, in->expert_lora_r, 0, in->esz),
                                  ep_exchange_bytes(c, C, in->ep, in->esz));
    }
    return out;
}

/* The layer's backward arena over T queries (mla_layer_backward), and its kernel's. */
/* One layer's backward over T queries: its arena (scr), the attention kernel's workspace (attn) and, a MoE
 * layer, the MoE backward's arena (moe) with its dispatch buffers (dispatch): the MoE runs before the
 * attention, so the layer peaks at scr + attn or at scr + moe + dispatch. */
static plan_layer plan_layer_bwd(const ls_model_config *c, const ls_family_plan_in *in, int moe, size_t T, size_t Tk,
                                 size_t maxn) {
    plan_acc a = {.esz = in->esz};
    size_t d = (size_t)c->d_model, H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank, rkv = (size_t)ls_mla_keys_of(c)->kv_rank;
    size_t dn = (size_t)ls_mla_keys_of(c)->d_nope, dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v, dqk = dn + dr, I = (size_t)c->ffn_dim;
    size_t r = in->lora_r > 0 ? (size_t)in->lora_r : 0, k = (size_t)ls_mla_keys_of(c)->index_topk < Tk ? (size_t)ls_mla_keys_of(c)->index_topk : Tk;
    RQR(&a, 0, T * d), RQR(&a, 0, T * d), RQR(&a, 0, T * H * dv), RQR(&a, 0, T * H * dn), RQR(&a, 0, T * H * dr);
    RQR(&a, 0, T * rkv), RQR(&a, 0, T * dr), RQR(&a, 0, T * H * dqk), RQR(&a, 0, T * rq), RQR(&a, 0, T * rq);
    RQR(&a, 0, T * rkv), RQR(&a, 0, T * (rkv + dr));
    RQR(&a, 0, H * (dn + dv) * rkv);
    if (r) RQR(&a, 0, H * (dn + dv) * rkv);
    if (!moe) RQR(&a, 0, T * I), RQR(&a, 0, T * I), RQR(&a, 0, T * I);
    for (int i = 0; r && i < 7; i++) RQR(&a, 0, T * r + 1); /* the adapters' temporaries */
    ls_mla_dims dm = dims_of(c);
    plan_acc k_ = {.esz = in->esz};
    RQ(&k_, 0, ls_sat_mul3(T, k, sizeof(int64_t)));
    RQR(&k_, 0, LS_K(ls_mla_backward_workspace)(form_for(T, Tk), maxn, k, &dm));
    plan_layer b = {.scr = a.scr, .attn = k_.scr};
    if (moe) {
        plan_layer f = plan_layer_fwd(c, in, 1, T, Tk, maxn, 0);
        b.moe = f.moe;
        size_t mc = in->moe_chunk ? in->moe_chunk : moe_chunk(), C = mc < T ? mc : T;
        b.dispatch = ls_sat_add(dispatch_bytes_esz(c, C, in->expert_lora_r, 1, in->esz),
                                ep_exchange_bytes(c, C, in->ep, in->esz));
    }
    return b;
}

/* A layer's forward peaks either in its attention kernel (the kernel's arena beside the layer's) or in
 * its MoE (moe_run's arena and the dispatch buffers): the larger instant, kept in cat[] when above it. */
static void instant(size_t cat[LS_MEM_COUNT], size_t layer, plan_layer f) {
    size_t a = ls_sat_add(layer, f.attn), m = ls_sat_add(ls_sat_add(layer, f.moe), f.dispatch);
    size_t now = ls_sat_add(cat[LS_MEM_SCRATCH], cat[LS_MEM_DISPATCH]);
    if ((a > m ? a : m) <= now) return;
    cat[LS_MEM_SCRATCH] = a >= m ? a : ls_sat_add(layer, f.moe);
    cat[LS_MEM_DISPATCH] = a >= m ? 0 : f.dispatch;
}

/* Under CP, the memo of one layer's response collectives over T queries seeing Tk keys (trainer/base/
 * coll_memo.h: a replay that recomputes a forward takes them again): dsa_topk_gather's positions and scores
 * from every rank, lse_max, lse_sum, out_sum. */
static size_t memo_layer_bytes(const ls_model_config *c, const ls_family_plan_in *in, size_t T, size_t Tk) {
    size_t es = in->esz, kk = (size_t)ls_mla_keys_of(c)->index_topk < Tk ? (size_t)ls_mla_keys_of(c)->index_topk : Tk, H = (size_t)ls_mla_keys_of(c)->heads;
    size_t W = (size_t)in->world, lse = ls_coll_memo_plan_bytes(ls_sat_mul3(T, H, es));
    size_t b = ls_sat_add(ls_coll_memo_plan_bytes(ls_sat_mul3(W, ls_sat_mul(T, kk), sizeof(int64_t))),
                          ls_coll_memo_plan_bytes(ls_sat_mul3(W, ls_sat_mul(T, kk), es)));
    return ls_sat_add(b, ls_sat_add(ls_sat_mul(2, lse), ls_coll_memo_plan_bytes(ls_sat_mul3(T, H * (size_t)ls_mla_keys_of(c)->d_v, es))));
}

void LS_K(ls_mla_plan_transients)(const ls_model_config *c, const ls_family_plan_in *in, ls_family_plan *out) {
    size_t n = in->shard, ch = in->chunk ? in->chunk : n, R = in->R, L = (size_t)c->n_layers;
    size_t pg = in->page_size ? in->page_size : 64, es = in->esz, d = (size_t)c->d_model;
    size_t rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dr = (size_t)ls_mla_keys_of(c)->d_rope, dI = (size_t)ls_mla_keys_of(c)->index_dim;
    size_t Ptot = in->world > 1 ? ls_sat_mul(n, (size_t)in->world) : n; /* keys the last chunk sees */
    /* the replay's segment: the response, or one chunk of it (--replay-checkpoint chunk: replay_chunk.c) */
    int chunked = in->replay_ckpt == 2;
    size_t RC = chunked && in->replay_chunk && in->replay_chunk < R ? in->replay_chunk : R, K = (R + RC - 1) / RC;
    size_t (*ph)[LS_MEM_COUNT] = out->phase;
#define ADD(p, cat, x) (ph[p][cat] = ls_sat_add(ph[p][cat], (x)))
    int kinds = (size_t)ls_mla_keys_of(c)->first_dense < L ? 2 : 1;
    size_t cap_pend = 0;
    size_t win_attn = 0, win_moe = 0, win_disp = 0, win_ring = 0; /* the prompt backward's instants (below) */
    for (int mi = 0; mi < kinds; mi++) {
        int moe = (size_t)ls_mla_keys_of(c)->first_dense < L ? mi : 0;
        if (!moe && ls_mla_keys_of(c)->first_dense == 0) continue;
        /* capture: the last chunk (the most keys) */
        size_t maxc = ch > pg ? ch : pg;
        plan_layer f = plan_layer_fwd(c, in, moe, ch, Ptot, maxc, 0);
        if (in->world > 1) { /* the ring kernels' workspaces instead of the local kernel's arena (mla_cp_attn.c) */
            ls_mla_dims dm = dims_of(c);
            size_t k = (size_t)ls_mla_keys_of(c)->index_topk < Ptot ? (size_t)ls_mla_keys_of(c)->index_topk : Ptot;
            plan_acc w = {.esz = in->esz};
            RQR(&w, 0, LS_K(ls_dsa_topk_workspace)(n));
            RQR(&w, 0, LS_K(ls_mla_forward_workspace)(form_for(ch, Ptot), n, k, &dm));
            RQ(&w, 0, ls_sat_mul3(ch, k, sizeof(int64_t)));
            f.attn = w.scr;
        }
        plan_acc own = {.esz = es};
        RQR(&own, 0, ch * rkv + 1), RQR(&own, 0, ch * dr + 1), RQR(&own, 0, ch * dI + 1);
        /* the dense layers come first: at their peak none of the chunk's rows are appended yet; at the last
           (MoE) layer's, all but its own are (the state's total counted by plan.c less capture_pending) */
        size_t row1 = out->capture_pending, pend = moe ? row1 : ls_sat_mul(L, row1);
        size_t cand[LS_MEM_COUNT] = {0};
        instant(cand, ls_sat_add(f.scr, own.scr), f);
        size_t have = ls_sat_add(ph[LS_FPLAN_CAPTURE][LS_MEM_SCRATCH], ph[LS_FPLAN_CAPTURE][LS_MEM_DISPATCH]);
        size_t want = ls_sat_add(cand[LS_MEM_SCRATCH], cand[LS_MEM_DISPATCH]);
        if (mi == 0 || want - (pend < want ? pend : want) > have - (cap_pend < have ? cap_pend : have)) {
            ph[LS_FPLAN_CAPTURE][LS_MEM_SCRATCH] = cand[LS_MEM_SCRATCH];
            ph[LS_FPLAN_CAPTURE][LS_MEM_DISPATCH] = cand[LS_MEM_DISPATCH];
            cap_pend = pend;
        }
        /* scoring and decoding: R queries (or one) seeing the whole prompt */
        plan_layer s = plan_layer_fwd(c, in, moe, RC, Ptot + R, pg > RC ? pg : RC, 0); /* a chunked replay's
                                                                                         scoring: by chunk */
        instant(ph[LS_FPLAN_SCORE], s.scr, s);
        plan_layer dd = plan_layer_fwd(c, in, moe, 1, Ptot + R, pg, 0);
        instant(ph[LS_FPLAN_ROLLOUT], dd.scr, dd);
        /* replay: the largest layer's backward (the tape is summed over layers below) */
        plan_layer bl = plan_layer_bwd(c, in, moe, RC, Ptot + R, pg > RC ? pg : RC);
        size_t disp = bl.dispatch, b = ls_sat_add(bl.scr, ls_sat_add(bl.attn, bl.moe));
        plan_layer rf = plan_layer_fwd(c, in, moe, RC, Ptot + R, pg > RC ? pg : RC, 1);
        size_t rw = ls_sat_add(b, rf.attn);
        if (chunked) { /* the later chunks' gradient of this chunk's rows, gathered */
            plan_acc g = {.esz = es};
            RQR(&g, 0, RC * rkv + 1), RQR(&g, 0, RC * dr + 1);
            rw = ls_sat_add(rw, g.scr);
        }
        if (rw > ph[LS_FPLAN_REPLAY][LS_MEM_BRANCH]) ph[LS_FPLAN_REPLAY][LS_MEM_BRANCH] = rw;
        if (disp > ph[LS_FPLAN_REPLAY][LS_MEM_DISPATCH]) ph[LS_FPLAN_REPLAY][LS_MEM_DISPATCH] = disp;
        if (in->full) { /* one chunk's window: its tape and rows, the recompute's arenas (freed first), then the
                           backward's; an attention instant, and a MoE layer's instant with its dispatch buffers */
            plan_layer w = plan_layer_fwd(c, in, moe, ch, Ptot, maxc, 1);
            plan_layer bw = plan_layer_bwd(c, in, moe, ch, Ptot, maxc);
            plan_acc rows = {.esz = es};
            RQR(&rows, 0, ch * d), RQR(&rows, 0, ch * rkv + 1), RQR(&rows, 0, ch * dr + 1);
            size_t base = ls_sat_add(w.tape, rows.scr);
            size_t fa = ls_sat_add(w.scr, w.attn), ba = ls_sat_add(bw.scr, bw.attn);
            size_t a_i = ls_sat_add(base, fa > ba ? fa : ba);
            if (a_i > win_attn) win_attn = a_i;
            if (moe) {
                size_t fm = ls_sat_add(ls_sat_add(w.scr, w.moe), w.dispatch);
                size_t bm = ls_sat_add(ls_sat_add(bw.scr, bw.moe), bw.dispatch);
                size_t m_i = ls_sat_add(base, fm > bm ? fm : bm);
                if (m_i > ls_sat_add(win_moe, win_disp)) {
                    win_disp = fm > bm ? w.dispatch : bw.dispatch;
                    win_moe = m_i - win_disp;
                }
            }
        }
    }
    out->capture_pending = cap_pend;
    if ((size_t)ls_mla_keys_of(c)->first_dense < L) { /* one routed hidden buffer [C k, d] of a capture chunk */
        size_t mc = in->moe_chunk ? in->moe_chunk : moe_chunk(), C = mc < ch ? mc : ch;
        out->routed_buffer = ls_sat_mul3(ls_sat_mul(C, (size_t)ls_mla_keys_of(c)->experts_per_token), d, es);
    }
    /* the replay's tape: every layer's, and the frame's head rows; checkpointed (seg_frame.c): each layer's
       input, its collectives' results under CP, and one layer's tape rebuilt at a time */
    size_t tape = 0, one = 0;
    for (size_t l = 0; l < L; l++) {
        plan_layer t = plan_layer_fwd(c, in, l >= (size_t)ls_mla_keys_of(c)->first_dense, RC, Ptot + R, pg > RC ? pg : RC, 1);
        tape = ls_sat_add(tape, t.tape);
        if (t.tape > one) one = t.tape;
    }
    if (chunked) {
        /* in chunks (trainer/step/replay_chunk.c): the response's own rows (c_kv, k_pe, index keys) and their
           gradient (c_kv, k_pe), the chunks' collectives under CP, one chunk's tape */
        size_t kept = ls_sat_mul3(L, R, ls_sat_mul(2 * (rkv + dr) + dI, es));
        if (in->world > 1) /* each chunk's, every layer's */
            kept = ls_sat_add(kept, ls_sat_mul3(K, L, memo_layer_bytes(c, in, RC, Ptot + R)));
        tape = ls_sat_add(kept, tape);
    } else if (in->replay_ckpt) {
        size_t kept = LS_K(ls_seg_ckpt_plan_bytes)(c->n_layers, R, d, es);
        if (in->world > 1) kept = ls_sat_add(kept, ls_sat_mul(L, memo_layer_bytes(c, in, R, Ptot + R)));
        tape = ls_sat_add(kept, one);
    }
    ADD(LS_FPLAN_REPLAY, LS_MEM_BRANCH, tape);
    plan_acc fr = {.esz = es}, frc = {.esz = es}; /* the frame over the response, over the replay's segment */
    RQR(&fr, 0, R * d), RQR(&fr, 0, R * d), RQR(&fr, 0, R), RQR(&fr, 0, R * d), RQR(&fr, 0, R);
    RQR(&fr, 0, LS_K(ls_logprob_workspace)(R, 128));
    RQR(&frc, 0, RC * d), RQR(&frc, 0, RC * d), RQR(&frc, 0, RC), RQR(&frc, 0, RC * d), RQR(&frc, 0, RC);
    RQR(&frc, 0, LS_K(ls_logprob_workspace)(RC, 128));
    ADD(LS_FPLAN_REPLAY, LS_MEM_BRANCH, frc.scr);
    ADD(LS_FPLAN_SCORE, LS_MEM_SCRATCH, chunked ? frc.scr : fr.scr);
    ADD(LS_FPLAN_SCORE, LS_MEM_SCORE, ls_sat_mul(R, es + sizeof(int32_t)));
    if (chunked) /* the response's own rows in a fork of the state */
        ADD(LS_FPLAN_SCORE, LS_MEM_SCORE, ls_sat_mul3(L, R, ls_sat_mul(rkv + dr + dI, es)));
    plan_acc h = {.esz = es};
    RQR(&h, 0, ch * d);
    ADD(LS_FPLAN_CAPTURE, LS_MEM_SCRATCH, ls_sat_add(h.scr, out->state_meta));
    /* decode: a fork's page tables, R one-token pages per layer, the logits row and sampler */
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCRATCH, out->state_meta);
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCORE, ls_sat_mul3(L, R, ls_sat_add(ls_sat_mul(rkv + dr + dI, es), 3 * 64)));
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCORE, ls_sat_add(ls_sat_mul((size_t)c->vocab, es + 2 * 16 + 8), 4096));
    if (in->world > 1) {
        /* context parallelism (mla_cp_attn.c): a capture chunk's selection (the top-k accumulators beside the
           index-key ring) and its attention (the partial beside the latent ring) are separate instants */
        size_t k = (size_t)ls_mla_keys_of(c)->index_topk, ms = n;
        size_t sel = ls_sat_add(ls_sat_mul3(ch, k, 3 * sizeof(int64_t) + 3 * es), ls_sat_mul3(2, ms, dI * es));
        size_t att = ls_sat_add(ls_sat_mul3(ch, (size_t)ls_mla_keys_of(c)->heads, ((size_t)ls_mla_keys_of(c)->d_v + 1) * es),
                                ls_sat_mul3(2, ms, (rkv + dr) * es));
        ADD(LS_FPLAN_CAPTURE, LS_MEM_COMM, sel > att ? sel : att);
        /* the shard capture's work rows (mla_cp.c: h, c_kv, k_pe, k_I over the shard; the ring kernels'
           workspaces are the capture instant's, above) and the shard-local kv_b gradient accumulators
           (gradients, the replay's) */
        plan_acc w = {.esz = es};
        RQR(&w, 0, n * (d + rkv + dr + dI));
        ADD(LS_FPLAN_CAPTURE, LS_MEM_SCRATCH, w.scr);
        size_t acc = ls_sat_mul(ls_sat_mul3(L, (size_t)ls_mla_keys_of(c)->heads, ((size_t)ls_mla_keys_of(c)->d_nope + (size_t)ls_mla_keys_of(c)->d_v) * rkv), es);
        ADD(LS_FPLAN_REPLAY, LS_MEM_GRADS, acc); /* through the replay only (mla_cp.c ls_mla_cp_acc) */
        /* the prompt backward's window, one instant at a time: a chunk's selection and attention again (as the
           capture's), then its backward (the reverse ring: the rows and their gradient, sent and received) */
        win_ring = ls_sat_mul3(4, ms, (rkv + dr) * es);
        if (sel > win_ring) win_ring = sel;
        if (att > win_ring) win_ring = att;
    }
    if (in->full) { /* the prompt backward: dh over the shard beside the larger of the window's instants */
        plan_acc k = {.esz = es};
        RQR(&k, 0, n * d);
        int moe_i = ls_sat_add(win_moe, win_disp) > ls_sat_add(win_attn, win_ring);
        ADD(LS_FPLAN_PROMPT_BWD, LS_MEM_SCRATCH, ls_sat_add(k.scr, moe_i ? win_moe : win_attn));
        ADD(LS_FPLAN_PROMPT_BWD, moe_i ? LS_MEM_DISPATCH : LS_MEM_COMM, moe_i ? win_disp : win_ring);
    }
#undef ADD
}
#undef RQR
