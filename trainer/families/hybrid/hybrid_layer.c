/* hybrid_layer.c - forward/backward of one hybrid block: zero-centred
 * RMSNorm, the mixer (Gated DeltaNet or gated full attention), zero-centred
 * RMSNorm, SwiGLU MLP, with residuals (docs/model.md §1). */
#include "trainer/families/hybrid/hybrid_layer.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/gdn.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

#include "trainer/model/real_bytes.h"

/* Allocate n reals from the tape arena when taping, else from scratch. */
static ls_real *buf(ls_arena *tape_arena, ls_arena *scratch, size_t n) {
    return ls_arena_alloc(tape_arena ? tape_arena : scratch, R(n));
}

static size_t lora_r(const ls_lin *l) { return l->A ? l->A->shape[0] : 0; }

static void lin_f(const ls_params *p, const ls_lin *l, ls_real *y, ls_real *xa, const ls_real *x,
                  size_t T) {
    if (l->A)
        LS_K(ls_lora_forward)(y, xa, x, l->W->w, l->A->w, l->B->w, p->lora_scale, T, l->in, l->out,
                              lora_r(l));
    else
        LS_K(ls_linear_forward)(y, x, l->W->w, T, l->in, l->out, 0);
}

static ls_status lin_b(const ls_params *p, const ls_lin *l, ls_real *dx, int acc, const ls_real *dy,
                       const ls_real *x, const ls_real *xa, size_t T, ls_arena *scr) {
    if (l->A) {
        ls_real *tmp = ls_arena_alloc(scr, R(T * lora_r(l)));
        if (!tmp) return LS_ERR_NOMEM;
        LS_K(ls_lora_backward)(dx, l->W->g, l->A->g, l->B->g, dy, x, xa, l->W->w, l->A->w, l->B->w,
                               p->lora_scale, T, l->in, l->out, lora_r(l), tmp, acc);
    } else {
        LS_K(ls_linear_backward)(dx, l->W->g, dy, x, l->W->w, T, l->in, l->out, acc);
    }
    return LS_OK;
}

static ls_real *lora_save(ls_arena *ta, ls_arena *scr, const ls_lin *l, size_t T) {
    return l->A ? buf(ta, scr, T * lora_r(l)) : NULL;
}

/* ---- attention mixer ---------------------------------------------------- */

/* Queries (and gate), keys and values of xn [T, d]: projections with their
 * adapters, q/k RMSNorm, RoPE at positions pos0.. (docs/model.md §1.2). */
static void attn_project(const ls_params *p, const ls_hybrid_layer *ly, const ls_real *xn, size_t T, int64_t pos0,
                         ls_real *qg, ls_real *xa_q, ls_real *xa_k, ls_real *xa_v, ls_real *q_pre, ls_real *gate,
                         ls_real *q_r, ls_real *rstd_q, ls_real *k_pre, ls_real *k_r, ls_real *rstd_k, ls_real *v) {
    const ls_model_config *c = &p->cfg;
    size_t H = (size_t)ls_hybrid_keys_of(c)->attn_heads, Hkv = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads, hd = (size_t)ls_hybrid_keys_of(c)->head_dim;
    ls_real eps = (ls_real)c->rms_eps;
    lin_f(p, &ly->q, qg, xa_q, xn, T);
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++) {
            memcpy(q_pre + (t * H + h) * hd, qg + (t * H + h) * 2 * hd, R(hd));
            memcpy(gate + (t * H + h) * hd, qg + (t * H + h) * 2 * hd + hd, R(hd));
        }
    lin_f(p, &ly->k, k_pre, xa_k, xn, T);
    lin_f(p, &ly->v, v, xa_v, xn, T);
    LS_K(ls_rmsnorm_forward)(q_r, rstd_q, q_pre, ly->q_norm->w, 1, eps, T * H, hd);
    LS_K(ls_rmsnorm_forward)(k_r, rstd_k, k_pre, ly->k_norm->w, 1, eps, T * Hkv, hd);
    LS_K(ls_rope_apply)(q_r, LS_ROPE_NEOX, T, H, hd, (size_t)ls_hybrid_keys_of(c)->rope_dim, pos0, c->rope_theta, 0);
    LS_K(ls_rope_apply)(k_r, LS_ROPE_NEOX, T, Hkv, hd, (size_t)ls_hybrid_keys_of(c)->rope_dim, pos0, c->rope_theta, 0);
}

static ls_status attn_forward(const ls_params *p, int l, const ls_hybrid_layer *ly, ls_real *mix_out,
                              const ls_real *xn, size_t T, int64_t pos0, const ls_layer_state *ctx,
                              ls_real *own_k, ls_real *own_v, ls_layer_tape *tp, ls_arena *ta,
                              ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t H = (size_t)ls_hybrid_keys_of(c)->attn_heads, Hkv = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads, hd = (size_t)ls_hybrid_keys_of(c)->head_dim;
    ls_real tau = (ls_real)(1.0 / sqrt((double)hd));
    ls_real *xa_q = lora_save(ta, scr, &ly->q, T), *xa_k = lora_save(ta, scr, &ly->k, T);
    ls_real *xa_v = lora_save(ta, scr, &ly->v, T), *xa_o = lora_save(ta, scr, &ly->o, T);
    ls_real *qg = ls_arena_alloc(scr, R(T * H * 2 * hd));
    ls_real *q_pre = buf(ta, scr, T * H * hd), *gate = buf(ta, scr, T * H * hd);
    ls_real *q_r = buf(ta, scr, T * H * hd), *rstd_q = buf(ta, scr, T * H);
    ls_real *k_pre = buf(ta, scr, T * Hkv * hd), *k_r = buf(ta, scr, T * Hkv * hd);
    ls_real *rstd_k = buf(ta, scr, T * Hkv), *v = buf(ta, scr, T * Hkv * hd);
    ls_real *o = buf(ta, scr, T * H * hd), *lse = buf(ta, scr, T * H);
    ls_real *y = buf(ta, scr, T * H * hd);
    /* the context pages, then the segment's own keys */
    size_t np = ctx ? ctx->n_pages : 0;
    const ls_cp_attn *cp = ctx ? ctx->cp : NULL;
    ls_attn_kv_block *kv = ls_arena_alloc(scr, (np + 1) * sizeof *kv);
    if ((ta && ta->failed) || scr->failed) return LS_ERR_NOMEM;

    attn_project(p, ly, xn, T, pos0, qg, xa_q, xa_k, xa_v, q_pre, gate, q_r, rstd_q, k_pre, k_r, rstd_k, v);

    /* global softmax over the context pages and the segment's own keys in
     * one pass (and, under context parallelism, the context on other ranks;
     * when another rank owns the segment's keys they are not in the list) */
    size_t nb = 0;
    for (size_t i = 0; i < np; i++) {
        const ls_kv_page *pg = &ctx->pages[i];
        kv[nb++] = (ls_attn_kv_block){pg->k, pg->v, pg->n, pg->pos0};
    }
    if (!cp || cp->own_keys) kv[nb++] = (ls_attn_kv_block){k_r, v, T, pos0};
    LS_K(ls_attn_paged_forward)(o, lse, q_r, kv, nb, T, H, Hkv, hd, pos0, 1, tau);
    if (cp && cp->fwd) {
        ls_status st = cp->fwd(cp->user, l, q_r, k_r, v, T, pos0, o, lse);
        if (st != LS_OK) return st;
    }
    LS_K(ls_sigmoid_gate_forward)(y, o, gate, T * H, hd, hd);
    lin_f(p, &ly->o, mix_out, xa_o, y, T);
    if (own_k) memcpy(own_k, k_r, R(T * Hkv * hd));
    if (own_v) memcpy(own_v, v, R(T * Hkv * hd));
    if (tp) {
        tp->xa_q = xa_q; tp->xa_k = xa_k; tp->xa_v = xa_v; tp->xa_o = xa_o;
        tp->q_pre = q_pre; tp->rstd_q = rstd_q; tp->q_r = q_r; tp->gate = gate;
        tp->k_pre = k_pre; tp->rstd_k = rstd_k; tp->k_r = k_r; tp->v = v;
        tp->o = o; tp->lse = lse; tp->y = y;
    }
    return LS_OK;
}

/* The output projection and the gate: dmix -> dout (gradient of the
 * attention output o) and dgate. */
static ls_status attn_backward_out(const ls_params *p, const ls_hybrid_layer *ly, const ls_layer_tape *tp,
                                   const ls_real *dmix, ls_real *dout, ls_real *dgate, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t T = tp->T, H = (size_t)ls_hybrid_keys_of(c)->attn_heads, hd = (size_t)ls_hybrid_keys_of(c)->head_dim;
    ls_real *dy = ls_arena_alloc(scr, R(T * H * hd));
    if (!dy) return LS_ERR_NOMEM;
    ls_status st = lin_b(p, &ly->o, dy, 0, dmix, tp->y, tp->xa_o, T, scr);
    if (st == LS_OK) LS_K(ls_sigmoid_gate_backward)(dout, dgate, dy, tp->o, tp->gate, T * H, hd, hd);
    return st;
}

/* The rest of the attention backward, from dout and dgate: the softmax over
 * the segment's keys, the context pages and (extra_dq, NULL: none; and the
 * context's cp->bwd) the context elsewhere, RoPE, the norms, the input
 * projections -> dxn. */
static ls_status attn_backward_in(const ls_params *p, int l, const ls_hybrid_layer *ly, const ls_layer_tape *tp,
                                  ls_real *dxn, const ls_real *dout, const ls_real *dgate, const ls_real *extra_dq,
                                  const ls_layer_state *ctx, ls_layer_state *dctx, const ls_real *d_own_k,
                                  const ls_real *d_own_v, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t T = tp->T, H = (size_t)ls_hybrid_keys_of(c)->attn_heads, Hkv = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads, hd = (size_t)ls_hybrid_keys_of(c)->head_dim;
    ls_real tau = (ls_real)(1.0 / sqrt((double)hd));
    ls_real *dq = ls_arena_alloc(scr, R(T * H * hd));
    ls_real *dk = ls_arena_alloc(scr, R(T * Hkv * hd)), *dv = ls_arena_alloc(scr, R(T * Hkv * hd));
    ls_real *dq_pre = ls_arena_alloc(scr, R(T * H * hd)), *dk_pre = ls_arena_alloc(scr, R(T * Hkv * hd));
    ls_real *dqg = ls_arena_alloc(scr, R(T * H * 2 * hd));
    if (scr->failed) return LS_ERR_NOMEM;
    ls_status st = LS_OK;
    if (extra_dq) memcpy(dq, extra_dq, R(T * H * hd));
    if (d_own_k) memcpy(dk, d_own_k, R(T * Hkv * hd));
    if (d_own_v) memcpy(dv, d_own_v, R(T * Hkv * hd));
    size_t cut = tp->cut;
    const ls_cp_attn *cp = ctx ? ctx->cp : NULL;
    if (cp && cut) return LS_ERR_ARG; /* a gradient cut is the single-rank naive reference's */
    /* the context pages (their dK/dV into dctx's pages, if any), then the
     * segment's own keys unless a gradient cut splits them (below) or
     * another rank owns them (no local part of their dK/dV) */
    size_t np = ctx ? ctx->n_pages : 0, nb = 0;
    ls_attn_kv_block *kv = ls_arena_alloc(scr, (np + 1) * sizeof *kv);
    ls_attn_kv_grad *g = ls_arena_alloc(scr, (np + 1) * sizeof *g);
    if (scr->failed) return LS_ERR_NOMEM;
    for (size_t i = 0; i < np; i++) {
        const ls_kv_page *pg = &ctx->pages[i];
        g[nb] = (ls_attn_kv_grad){dctx ? dctx->pages[i].k : NULL, dctx ? dctx->pages[i].v : NULL};
        kv[nb++] = (ls_attn_kv_block){pg->k, pg->v, pg->n, pg->pos0};
    }
    if ((!cp || cp->own_keys) && cut == 0) {
        g[nb] = (ls_attn_kv_grad){dk, dv};
        kv[nb++] = (ls_attn_kv_block){tp->k_r, tp->v, T, tp->pos0};
    }
    LS_K(ls_attn_paged_backward)(dq, g, dout, tp->q_r, kv, nb, tp->o, tp->lse, T, H, Hkv, hd, tp->pos0, 1, tau);
    if (cut != 0) { /* gradient cut: queries [cut, T) give no dK/dV to the keys before the cut */
        size_t qr = H * hd, kr = Hkv * hd, n = T - cut;
        int64_t pc = tp->pos0 + (int64_t)cut;
        LS_K(ls_attn_block_backward)(dq, dk, dv, dout, tp->q_r, tp->k_r, tp->v, tp->o, tp->lse, cut, cut, H,
                                     Hkv, hd, tp->pos0, tp->pos0, 1, tau);
        LS_K(ls_attn_block_backward)(dq + cut * qr, NULL, NULL, dout + cut * qr, tp->q_r + cut * qr, tp->k_r,
                                     tp->v, tp->o + cut * qr, tp->lse + cut * H, n, cut, H, Hkv, hd, pc,
                                     tp->pos0, 1, tau);
        LS_K(ls_attn_block_backward)(dq + cut * qr, dk + cut * kr, dv + cut * kr, dout + cut * qr,
                                     tp->q_r + cut * qr, tp->k_r + cut * kr, tp->v + cut * kr, tp->o + cut * qr,
                                     tp->lse + cut * H, n, n, H, Hkv, hd, pc, pc, 1, tau);
    }
    if (cp && cp->bwd &&
        (st = cp->bwd(cp->user, l, tp->q_r, tp->k_r, tp->v, tp->o, tp->lse, dout, T, tp->pos0, dq, dk, dv)) != LS_OK)
        return st;
    LS_K(ls_rope_apply)(dq, LS_ROPE_NEOX, T, H, hd, (size_t)ls_hybrid_keys_of(c)->rope_dim, tp->pos0, c->rope_theta, 1);
    LS_K(ls_rope_apply)(dk, LS_ROPE_NEOX, T, Hkv, hd, (size_t)ls_hybrid_keys_of(c)->rope_dim, tp->pos0, c->rope_theta, 1);
    LS_K(ls_rmsnorm_backward)(dq_pre, ly->q_norm->g, dq, tp->q_pre, tp->rstd_q, ly->q_norm->w, 1, T * H, hd);
    LS_K(ls_rmsnorm_backward)(dk_pre, ly->k_norm->g, dk, tp->k_pre, tp->rstd_k, ly->k_norm->w, 1, T * Hkv, hd);
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++) {
            memcpy(dqg + (t * H + h) * 2 * hd, dq_pre + (t * H + h) * hd, R(hd));
            memcpy(dqg + (t * H + h) * 2 * hd + hd, dgate + (t * H + h) * hd, R(hd));
        }
    if ((st = lin_b(p, &ly->q, dxn, 0, dqg, tp->xn1, tp->xa_q, T, scr)) != LS_OK) return st;
    st = lin_b(p, &ly->k, dxn, 1, dk_pre, tp->xn1, tp->xa_k, T, scr);
    if (st == LS_OK) st = lin_b(p, &ly->v, dxn, 1, dv, tp->xn1, tp->xa_v, T, scr);
    return st;
}

/* ---- Gated DeltaNet mixer ----------------------------------------------- */

static ls_status gdn_forward(const ls_params *p, const ls_hybrid_layer *ly, ls_real *mix_out,
                             const ls_real *xn, size_t T, const ls_layer_state *ctx, ls_real *tail_out,
                             ls_real *S_out, ls_layer_tape *tp, ls_arena *ta, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t Hk = (size_t)ls_hybrid_keys_of(c)->gdn_hk, Hv = (size_t)ls_hybrid_keys_of(c)->gdn_hv, dk = (size_t)ls_hybrid_keys_of(c)->gdn_dk, dv = (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t K = (size_t)ls_hybrid_keys_of(c)->conv_kernel, C = 2 * Hk * dk + Hv * dv, QK = Hk * dk;
    ls_real eps = (ls_real)c->rms_eps;
    ls_real *xa_qkv = lora_save(ta, scr, &ly->in_qkv, T), *xa_z = lora_save(ta, scr, &ly->in_z, T);
    ls_real *xa_out = lora_save(ta, scr, &ly->out, T);
    ls_real *m = buf(ta, scr, T * C), *z = buf(ta, scr, T * Hv * dv);
    ls_real *a = buf(ta, scr, T * Hv), *b = buf(ta, scr, T * Hv);
    ls_real *pre = buf(ta, scr, T * C), *cc = ls_arena_alloc(scr, R(T * C));
    ls_real *qraw = buf(ta, scr, T * QK), *kraw = buf(ta, scr, T * QK), *vv = buf(ta, scr, T * Hv * dv);
    ls_real *qn = buf(ta, scr, T * QK), *kn = buf(ta, scr, T * QK);
    ls_real *rq = buf(ta, scr, T * Hk), *rk = buf(ta, scr, T * Hk);
    ls_real *g = buf(ta, scr, T * Hv), *beta = buf(ta, scr, T * Hv);
    ls_real *go = buf(ta, scr, T * Hv * dv), *rstd_g = buf(ta, scr, T * Hv);
    ls_real *ygn = buf(ta, scr, T * Hv * dv);
    ls_real *tail_in = NULL, *S_in = NULL;
    if (tp && ctx && ctx->fixed0) {
        tail_in = buf(ta, scr, (K - 1) * C);
        S_in = buf(ta, scr, Hv * dk * dv);
        if (tail_in && S_in) {
            memcpy(tail_in, ctx->fixed0, R((K - 1) * C));
            memcpy(S_in, ctx->fixed1, R(Hv * dk * dv));
        }
    } else if (ctx) {
        tail_in = ctx->fixed0;
        S_in = ctx->fixed1;
    }
    if ((ta && ta->failed) || scr->failed) return LS_ERR_NOMEM;

    lin_f(p, &ly->in_qkv, m, xa_qkv, xn, T);
    lin_f(p, &ly->in_z, z, xa_z, xn, T);
    lin_f(p, &ly->in_b, b, NULL, xn, T);
    lin_f(p, &ly->in_a, a, NULL, xn, T);
    LS_K(ls_conv1d_forward)(cc, pre, tail_out, m, tail_in, ly->conv->w, T, C, K);
    for (size_t t = 0; t < T; t++) {
        memcpy(qraw + t * QK, cc + t * C, R(QK));
        memcpy(kraw + t * QK, cc + t * C + QK, R(QK));
        memcpy(vv + t * Hv * dv, cc + t * C + 2 * QK, R(Hv * dv));
    }
    LS_K(ls_l2norm_forward)(qn, rq, qraw, (ls_real)1e-6, (ls_real)(1.0 / sqrt((double)dk)), T * Hk, dk);
    LS_K(ls_l2norm_forward)(kn, rk, kraw, (ls_real)1e-6, 1, T * Hk, dk);
    LS_K(ls_gdn_gates_forward)(g, beta, a, b, ly->A_log->w, ly->dt_bias->w, T, Hv);
    LS_K(ls_gdn_forward)(go, S_out, qn, kn, vv, g, beta, S_in, T, Hk, Hv, dk, dv);
    LS_K(ls_gated_rmsnorm_forward)(ygn, rstd_g, go, z, ly->gnorm->w, eps, T * Hv, dv);
    lin_f(p, &ly->out, mix_out, xa_out, ygn, T);
    if (tp) {
        tp->xa_qkv = xa_qkv; tp->xa_z = xa_z; tp->xa_out = xa_out;
        tp->m = m; tp->z = z; tp->a = a; tp->b = b; tp->pre = pre;
        tp->qraw = qraw; tp->kraw = kraw; tp->vv = vv; tp->qn = qn; tp->kn = kn; tp->rq = rq; tp->rk = rk;
        tp->g = g; tp->beta = beta; tp->go = go; tp->rstd_g = rstd_g; tp->ygn = ygn;
        tp->tail_in = tail_in; tp->S_in = S_in;
    }
    return LS_OK;
}

static void add_into(ls_real *dst, const ls_real *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* GDN recurrence backward with a gradient cut at c = tp->cut: tokens [0, c)
 * run backward with no gradient arriving for the state they hand on; tokens
 * [c, T) run backward from the state at the cut (recomputed from the taped
 * q, k, v, g, beta) and the state gradient they would hand back is dropped.
 * ws: a workspace for the longer of the two pieces. */
static ls_status gdn_cut_backward(const ls_params *p, const ls_layer_tape *tp, ls_real *dqn, ls_real *dkn,
                                  ls_real *dvv, ls_real *dg, ls_real *dbeta, const ls_real *dgo,
                                  const ls_real *dS_out, ls_real *ws, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t Hk = (size_t)ls_hybrid_keys_of(c)->gdn_hk, Hv = (size_t)ls_hybrid_keys_of(c)->gdn_hv, dk = (size_t)ls_hybrid_keys_of(c)->gdn_dk, dv = (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t QK = Hk * dk, VD = Hv * dv, cut = tp->cut, n = tp->T - cut;
    ls_real *S_cut = ls_arena_alloc(scr, R(Hv * dk * dv)), *o_tmp = ls_arena_alloc(scr, R(cut * VD));
    if (scr->failed) return LS_ERR_NOMEM;
    LS_K(ls_gdn_forward)(o_tmp, S_cut, tp->qn, tp->kn, tp->vv, tp->g, tp->beta, tp->S_in, cut, Hk, Hv, dk, dv);
    LS_K(ls_gdn_backward)(dqn, dkn, dvv, dg, dbeta, NULL, dgo, NULL, tp->qn, tp->kn, tp->vv, tp->g, tp->beta,
                          tp->S_in, cut, Hk, Hv, dk, dv, ws);
    LS_K(ls_gdn_backward)(dqn + cut * QK, dkn + cut * QK, dvv + cut * VD, dg + cut * Hv, dbeta + cut * Hv, NULL,
                          dgo + cut * VD, dS_out, tp->qn + cut * QK, tp->kn + cut * QK, tp->vv + cut * VD,
                          tp->g + cut * Hv, tp->beta + cut * Hv, S_cut, n, Hk, Hv, dk, dv, ws);
    return LS_OK;
}

/* Conv backward with a gradient cut at c = tp->cut: tokens [0, c) get no
 * gradient for the tail they hand on; tokens [c, T) read the K-1 pre-conv
 * vectors before the cut as a constant tail (their conv-weight gradient is
 * kept, their gradient into those inputs dropped). */
static ls_status conv_cut_backward(const ls_params *p, const ls_hybrid_layer *ly, const ls_layer_tape *tp,
                                   ls_real *dm, const ls_real *dc, const ls_real *dtail_out, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t K = (size_t)ls_hybrid_keys_of(c)->conv_kernel, C = 2 * (size_t)ls_hybrid_keys_of(c)->gdn_hk * (size_t)ls_hybrid_keys_of(c)->gdn_dk + (size_t)ls_hybrid_keys_of(c)->gdn_hv * (size_t)ls_hybrid_keys_of(c)->gdn_dv;
    size_t cut = tp->cut, n = tp->T - cut;
    const ls_real *tail_c = cut >= K - 1 ? tp->m + (cut - (K - 1)) * C : NULL;
    if (!tail_c) { /* the tail before the cut reaches into the context's tail */
        ls_real *t = ls_arena_alloc(scr, R((K - 1) * C));
        if (!t) return LS_ERR_NOMEM;
        for (size_t i = 0; i < K - 1; i++) {
            ptrdiff_t pos = (ptrdiff_t)cut - (ptrdiff_t)(K - 1) + (ptrdiff_t)i;
            if (pos >= 0) memcpy(t + i * C, tp->m + (size_t)pos * C, R(C));
            else if (tp->tail_in) memcpy(t + i * C, tp->tail_in + (size_t)(pos + (ptrdiff_t)(K - 1)) * C, R(C));
        }
        tail_c = t;
    }
    LS_K(ls_conv1d_backward)(dm, ly->conv->g, NULL, dc, NULL, tp->pre, tp->m, tp->tail_in, ly->conv->w, cut, C, K);
    LS_K(ls_conv1d_backward)(dm + cut * C, ly->conv->g, NULL, dc + cut * C, dtail_out, tp->pre + cut * C,
                             tp->m + cut * C, tail_c, ly->conv->w, n, C, K);
    return LS_OK;
}

static ls_status gdn_backward(const ls_params *p, const ls_hybrid_layer *ly, const ls_layer_tape *tp,
                              ls_real *dxn, const ls_real *dmix, ls_layer_state *dctx,
                              const ls_real *dtail_out, const ls_real *dS_out, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    size_t T = tp->T, Hk = (size_t)ls_hybrid_keys_of(c)->gdn_hk, Hv = (size_t)ls_hybrid_keys_of(c)->gdn_hv, dk = (size_t)ls_hybrid_keys_of(c)->gdn_dk;
    size_t dv = (size_t)ls_hybrid_keys_of(c)->gdn_dv, K = (size_t)ls_hybrid_keys_of(c)->conv_kernel, C = 2 * Hk * dk + Hv * dv, QK = Hk * dk;
    ls_real *dygn = ls_arena_alloc(scr, R(T * Hv * dv)), *dgo = ls_arena_alloc(scr, R(T * Hv * dv));
    ls_real *dz = ls_arena_alloc(scr, R(T * Hv * dv));
    ls_real *dqn = ls_arena_alloc(scr, R(T * QK)), *dkn = ls_arena_alloc(scr, R(T * QK));
    ls_real *dvv = ls_arena_alloc(scr, R(T * Hv * dv)), *dg = ls_arena_alloc(scr, R(T * Hv));
    ls_real *dbeta = ls_arena_alloc(scr, R(T * Hv)), *da = ls_arena_alloc(scr, R(T * Hv));
    ls_real *db = ls_arena_alloc(scr, R(T * Hv));
    ls_real *dqraw = ls_arena_alloc(scr, R(T * QK)), *dkraw = ls_arena_alloc(scr, R(T * QK));
    ls_real *dc = ls_arena_alloc(scr, R(T * C)), *dm = ls_arena_alloc(scr, R(T * C));
    /* the recurrence runs over [0, T), or over [0, cut) and [cut, T) apart */
    size_t wsz = LS_K(ls_gdn_backward_workspace)(tp->cut ? tp->cut : T, Hk, Hv, dk, dv);
    if (tp->cut) {
        size_t w1 = LS_K(ls_gdn_backward_workspace)(T - tp->cut, Hk, Hv, dk, dv);
        wsz = w1 > wsz ? w1 : wsz;
    }
    ls_real *ws = ls_arena_alloc(scr, R(wsz));
    ls_real *dS_in = dctx ? ls_arena_alloc(scr, R(Hv * dk * dv)) : NULL;
    ls_real *dtail_in = dctx ? ls_arena_alloc(scr, R((K - 1) * C)) : NULL;
    if (scr->failed) return LS_ERR_NOMEM;
    ls_status st = lin_b(p, &ly->out, dygn, 0, dmix, tp->ygn, tp->xa_out, T, scr);
    if (st != LS_OK) return st;
    LS_K(ls_gated_rmsnorm_backward)(dgo, dz, ly->gnorm->g, dygn, tp->go, tp->z, tp->rstd_g, ly->gnorm->w,
                                    T * Hv, dv);
    if (tp->cut == 0)
        LS_K(ls_gdn_backward)(dqn, dkn, dvv, dg, dbeta, dS_in, dgo, dS_out, tp->qn, tp->kn, tp->vv, tp->g,
                              tp->beta, tp->S_in, T, Hk, Hv, dk, dv, ws);
    else if ((st = gdn_cut_backward(p, tp, dqn, dkn, dvv, dg, dbeta, dgo, dS_out, ws, scr)) != LS_OK)
        return st;
    LS_K(ls_gdn_gates_backward)(da, db, ly->A_log->g, ly->dt_bias->g, dg, dbeta, tp->a, tp->b,
                                ly->A_log->w, ly->dt_bias->w, T, Hv);
    LS_K(ls_l2norm_backward)(dqraw, dqn, tp->qraw, tp->rq, (ls_real)(1.0 / sqrt((double)dk)), T * Hk, dk);
    LS_K(ls_l2norm_backward)(dkraw, dkn, tp->kraw, tp->rk, 1, T * Hk, dk);
    for (size_t t = 0; t < T; t++) {
        memcpy(dc + t * C, dqraw + t * QK, R(QK));
        memcpy(dc + t * C + QK, dkraw + t * QK, R(QK));
        memcpy(dc + t * C + 2 * QK, dvv + t * Hv * dv, R(Hv * dv));
    }
    if (tp->cut == 0)
        LS_K(ls_conv1d_backward)(dm, ly->conv->g, dtail_in, dc, dtail_out, tp->pre, tp->m, tp->tail_in,
                                 ly->conv->w, T, C, K);
    else if ((st = conv_cut_backward(p, ly, tp, dm, dc, dtail_out, scr)) != LS_OK)
        return st;
    if (dctx) {
        add_into(dctx->fixed1, dS_in, Hv * dk * dv);
        add_into(dctx->fixed0, dtail_in, (K - 1) * C);
    }
    st = lin_b(p, &ly->in_qkv, dxn, 0, dm, tp->xn1, tp->xa_qkv, T, scr);
    if (st == LS_OK) st = lin_b(p, &ly->in_z, dxn, 1, dz, tp->xn1, tp->xa_z, T, scr);
    if (st == LS_OK) st = lin_b(p, &ly->in_b, dxn, 1, db, tp->xn1, NULL, T, scr);
    if (st == LS_OK) st = lin_b(p, &ly->in_a, dxn, 1, da, tp->xn1, NULL, T, scr);
    return st;
}

/* ---- the block ------------------------------------------------------------ */

ls_status LS_K(ls_layer_forward)(const ls_params *p, int l, ls_real *h, size_t T, int64_t pos0,
                                 const ls_layer_state *ctx, ls_real *own_k, ls_real *own_v,
                                 ls_real *tail_out, ls_real *S_out, ls_layer_tape *tape,
                                 ls_arena *tape_arena, ls_arena *scratch) {
    const ls_model_config *c = &p->cfg;
    const ls_hybrid_layer *ly = &ls_hybrid_layers(p)[l];
    size_t d = (size_t)c->d_model, I = (size_t)c->ffn_dim;
    ls_real eps = (ls_real)c->rms_eps;
    ls_arena *ta = tape ? tape_arena : NULL;
    ls_real *x = tape ? buf(ta, scratch, T * d) : NULL;
    ls_real *rstd1 = buf(ta, scratch, T), *xn1 = buf(ta, scratch, T * d);
    ls_real *mix = ls_arena_alloc(scratch, R(T * d));
    if ((ta && ta->failed) || scratch->failed) return LS_ERR_NOMEM;
    if (x) memcpy(x, h, R(T * d));
    LS_K(ls_rmsnorm_forward)(xn1, rstd1, h, ly->norm1->w, 1, eps, T, d);
    if (tape) {
        memset(tape, 0, sizeof *tape);
        tape->is_attn = ly->is_attn;
        tape->T = T;
        tape->pos0 = pos0;
        tape->x = x;
        tape->rstd1 = rstd1;
        tape->xn1 = xn1;
    }
    ls_status st = ly->is_attn
                       ? attn_forward(p, l, ly, mix, xn1, T, pos0, ctx, own_k, own_v, tape, ta, scratch)
                       : gdn_forward(p, ly, mix, xn1, T, ctx, tail_out, S_out, tape, ta, scratch);
    if (st != LS_OK) return st;
    for (size_t i = 0; i < T * d; i++) h[i] += mix[i];

    ls_real *h_mid = tape ? buf(ta, scratch, T * d) : NULL;
    ls_real *rstd2 = buf(ta, scratch, T), *xn2 = buf(ta, scratch, T * d);
    ls_real *xa_gate = lora_save(ta, scratch, &ly->gate, T), *xa_up = lora_save(ta, scratch, &ly->up, T);
    ls_real *xa_down = lora_save(ta, scratch, &ly->down, T);
    ls_real *mg = buf(ta, scratch, T * I), *mu = buf(ta, scratch, T * I), *act = buf(ta, scratch, T * I);
    if ((ta && ta->failed) || scratch->failed) return LS_ERR_NOMEM;
    if (h_mid) memcpy(h_mid, h, R(T * d));
    LS_K(ls_rmsnorm_forward)(xn2, rstd2, h, ly->norm2->w, 1, eps, T, d);
    lin_f(p, &ly->gate, mg, xa_gate, xn2, T);
    lin_f(p, &ly->up, mu, xa_up, xn2, T);
    LS_K(ls_swiglu_forward)(act, mg, mu, T * I);
    lin_f(p, &ly->down, mix, xa_down, act, T);
    for (size_t i = 0; i < T * d; i++) h[i] += mix[i];
    if (tape) {
        tape->h_mid = h_mid; tape->rstd2 = rstd2; tape->xn2 = xn2;
        tape->xa_gate = xa_gate; tape->xa_up = xa_up; tape->xa_down = xa_down;
        tape->mg = mg; tape->mu = mu; tape->act = act;
    }
    return LS_OK;
}

/* MLP: h2 = h1 + down(swiglu(gate(n2 h1), up(n2 h1))): dh from the layer
 * output's gradient to h1's (the mixer output's). */
static ls_status mlp_backward(const ls_params *p, const ls_hybrid_layer *ly, const ls_layer_tape *tp, ls_real *dh,
                              ls_arena *scr) {
    size_t T = tp->T, d = (size_t)p->cfg.d_model, I = (size_t)p->cfg.ffn_dim;
    ls_real *dact = ls_arena_alloc(scr, R(T * I)), *dmg = ls_arena_alloc(scr, R(T * I));
    ls_real *dmu = ls_arena_alloc(scr, R(T * I)), *dxn = ls_arena_alloc(scr, R(T * d));
    ls_real *dx = ls_arena_alloc(scr, R(T * d));
    if (scr->failed) return LS_ERR_NOMEM;
    ls_status st = lin_b(p, &ly->down, dact, 0, dh, tp->act, tp->xa_down, T, scr);
    if (st != LS_OK) return st;
    LS_K(ls_swiglu_backward)(dmg, dmu, dact, tp->mg, tp->mu, T * I);
    st = lin_b(p, &ly->gate, dxn, 0, dmg, tp->xn2, tp->xa_gate, T, scr);
    if (st == LS_OK) st = lin_b(p, &ly->up, dxn, 1, dmu, tp->xn2, tp->xa_up, T, scr);
    if (st != LS_OK) return st;
    LS_K(ls_rmsnorm_backward)(dx, ly->norm2->g, dxn, tp->h_mid, tp->rstd2, ly->norm2->w, 1, T, d);
    for (size_t i = 0; i < T * d; i++) dh[i] += dx[i];
    return LS_OK;
}

/* h1 = h + mixer(n1 h): dh += the norm's backward of the mixer input's gradient dxn. */
static ls_status norm1_backward(const ls_params *p, const ls_hybrid_layer *ly, const ls_layer_tape *tp, ls_real *dh,
                                const ls_real *dxn, ls_arena *scr) {
    size_t T = tp->T, d = (size_t)p->cfg.d_model;
    ls_real *dx = ls_arena_alloc(scr, R(T * d));
    if (!dx) return LS_ERR_NOMEM;
    LS_K(ls_rmsnorm_backward)(dx, ly->norm1->g, dxn, tp->x, tp->rstd1, ly->norm1->w, 1, T, d);
    for (size_t i = 0; i < T * d; i++) dh[i] += dx[i];
    return LS_OK;
}

ls_status LS_K(ls_layer_backward)(const ls_params *p, int l, const ls_layer_tape *tp, ls_real *dh,
                                  const ls_layer_state *ctx, ls_layer_state *dctx,
                                  const ls_real *d_own_k, const ls_real *d_own_v,
                                  const ls_real *dtail_out, const ls_real *dS_out, ls_arena *scr) {
    const ls_hybrid_layer *ly = &ls_hybrid_layers(p)[l];
    if (tp->is_attn) {
        size_t n = tp->T * (size_t)ls_hybrid_keys_of(&p->cfg)->attn_heads * (size_t)ls_hybrid_keys_of(&p->cfg)->head_dim;
        ls_real *dout = ls_arena_alloc(scr, R(n)), *dgate = ls_arena_alloc(scr, R(n));
        if (!dout || !dgate) return LS_ERR_NOMEM;
        ls_status st = LS_K(ls_layer_backward_out)(p, l, tp, dh, dout, dgate, scr);
        if (st != LS_OK) return st;
        return LS_K(ls_layer_backward_in)(p, l, tp, dh, dout, dgate, NULL, ctx, dctx, d_own_k, d_own_v, scr);
    }
    ls_status st = mlp_backward(p, ly, tp, dh, scr);
    if (st != LS_OK) return st;
    ls_real *dxn = ls_arena_alloc(scr, R(tp->T * (size_t)p->cfg.d_model));
    if (!dxn) return LS_ERR_NOMEM;
    st = gdn_backward(p, ly, tp, dxn, dh, dctx, dtail_out, dS_out, scr);
    return st == LS_OK ? norm1_backward(p, ly, tp, dh, dxn, scr) : st;
}

ls_status LS_K(ls_layer_backward_out)(const ls_params *p, int l, const ls_layer_tape *tp, ls_real *dh,
                                      ls_real *dout, ls_real *dgate, ls_arena *scr) {
    const ls_hybrid_layer *ly = &ls_hybrid_layers(p)[l];
    if (!tp->is_attn) return LS_ERR_ARG;
    ls_status st = mlp_backward(p, ly, tp, dh, scr);
    return st == LS_OK ? attn_backward_out(p, ly, tp, dh, dout, dgate, scr) : st;
}

ls_status LS_K(ls_layer_backward_in)(const ls_params *p, int l, const ls_layer_tape *tp, ls_real *dh,
                                     const ls_real *dout, const ls_real *dgate, const ls_real *extra_dq,
                                     const ls_layer_state *ctx, ls_layer_state *dctx, const ls_real *d_own_k,
                                     const ls_real *d_own_v, ls_arena *scr) {
    const ls_hybrid_layer *ly = &ls_hybrid_layers(p)[l];
    if (!tp->is_attn) return LS_ERR_ARG;
    ls_real *dxn = ls_arena_alloc(scr, R(tp->T * (size_t)p->cfg.d_model));
    if (!dxn) return LS_ERR_NOMEM;
    ls_status st = attn_backward_in(p, l, ly, tp, dxn, dout, dgate, extra_dq, ctx, dctx, d_own_k, d_own_v, scr);
    return st == LS_OK ? norm1_backward(p, ly, tp, dh, dxn, scr) : st;
}

ls_status LS_K(ls_layer_attn_qkv)(const ls_params *p, int l, const ls_real *h, size_t T, int64_t pos0, ls_real *q,
                                  ls_real *k, ls_real *v, ls_arena *scr) {
    const ls_model_config *c = &p->cfg;
    const ls_hybrid_layer *ly = &ls_hybrid_layers(p)[l];
    if (!ly->is_attn) return LS_ERR_ARG;
    size_t d = (size_t)c->d_model, H = (size_t)ls_hybrid_keys_of(c)->attn_heads, Hkv = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads;
    size_t hd = (size_t)ls_hybrid_keys_of(c)->head_dim;
    ls_real *xn = ls_arena_alloc(scr, R(T * d)), *rstd = ls_arena_alloc(scr, R(T));
    ls_real *qg = ls_arena_alloc(scr, R(T * H * 2 * hd)), *q_pre = ls_arena_alloc(scr, R(T * H * hd));
    ls_real *gate = ls_arena_alloc(scr, R(T * H * hd)), *rstd_q = ls_arena_alloc(scr, R(T * H));
    ls_real *k_pre = ls_arena_alloc(scr, R(T * Hkv * hd)), *rstd_k = ls_arena_alloc(scr, R(T * Hkv));
    ls_real *qq = q ? q : ls_arena_alloc(scr, R(T * H * hd));
    ls_real *kk = k ? k : ls_arena_alloc(scr, R(T * Hkv * hd)), *vv = v ? v : ls_arena_alloc(scr, R(T * Hkv * hd));
    ls_real *xa_q = lora_save(NULL, scr, &ly->q, T), *xa_k = lora_save(NULL, scr, &ly->k, T);
    ls_real *xa_v = lora_save(NULL, scr, &ly->v, T);
    if (scr->failed) return LS_ERR_NOMEM;
    LS_K(ls_rmsnorm_forward)(xn, rstd, h, ly->norm1->w, 1, (ls_real)c->rms_eps, T, d);
    attn_project(p, ly, xn, T, pos0, qg, xa_q, xa_k, xa_v, q_pre, gate, qq, rstd_q, k_pre, kk, rstd_k, vv);
    return LS_OK;
}
