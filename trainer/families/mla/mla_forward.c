/* mla_forward.c - the mla family's single-rank forward (docs/model.md §2, §4
 * branch split), composed from the kernels: MLA (kernels/mla.h, naive or
 * absorbed), the DSA indexer's top-k (kernels/dsa.h) and the routed MoE
 * (kernels/moe.h).  Tape-free: the training transaction's taped segments
 * are mla_segment.c's.
 *
 * Each layer keeps its carried rows per position: c_kv after its RMSNorm
 * [r_kv], k_pe after the interleaved RoPE [d_r] and the indexer key after
 * LayerNorm and NeoX RoPE [d_I]; nothing is expanded per head.  A segment
 * of T tokens at positions pos0 .. pos0+T-1 writes its rows at [pos0,
 * pos0+T) and reads [0, pos0+T), so the prompt's rows [0, P-1) are written
 * once and every member writes its own rows after them in turn. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/decisions.h"
#include "kernels/dsa.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/logprob.h"
#include "kernels/moe.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "trainer/families/mla/mla_family.h"

enum { VOCAB_CHUNK = 4096 };
#define INDEXER_LN_EPS 1e-6 /* docs/model.md §2.2 */

/* Carried rows of one layer, [cap] positions. */
typedef struct {
    ls_real *ckv, *kpe, *kI;
} mla_cache;

/* Buffers of a segment of up to Tm tokens (and MoE chunks of up to C tokens). */
typedef struct {
    ls_real *h, *x, *rstd, *cq, *q, *qn, *qpe, *kv, *ctil, *ikt, *qI, *wI, *o, *lse, *y, *g, *u, *xa;
    ls_real *sel_score, *mla_ws, *dsa_ws, *lp_ws, *kvb_eff;
    int64_t *sel;
    /* MoE */
    ls_real *logits, *s, *rw, *route_ws, *xg, *eg, *eu, *eo, *sh;
    int32_t *idx;
    size_t *offsets, *slot_of_row, *row_of_slot;
} mla_bufs;

/* y [T, out] = lin(x [T, in]) with its adapter when present (A, B). */
static void apply_lin(ls_real *y, const ls_real *x, ls_lin l, size_t T, ls_real s, ls_real *xa) {
    if (l.A && l.B)
        LS_K(ls_lora_forward)(y, xa, x, l.W->w, l.A->w, l.B->w, s, T, l.in, l.out, l.A->shape[0]);
    else
        LS_K(ls_linear_forward)(y, x, l.W->w, T, l.in, l.out, 0);
}

/* y [T, d] = SwiGLU(x) with intermediate buffers g, u [T, I]. */
static void apply_mlp(ls_real *y, const ls_real *x, const ls_mla_mlp *m, size_t T, ls_real s, ls_real *g,
                      ls_real *u, ls_real *xa) {
    size_t I = m->gate.out;
    apply_lin(g, x, m->gate, T, s, xa);
    apply_lin(u, x, m->up, T, s, xa);
    LS_K(ls_swiglu_forward)(g, g, u, T * I);
    apply_lin(y, g, m->down, T, s, xa);
}

/* The effective kv_b [H (d_n + d_v), r_kv]: its weight, plus (alpha/r) B A with an adapter. */
static const ls_real *kv_b_effective(ls_lin l, ls_real s, ls_real *buf) {
    if (!(l.A && l.B)) return l.W->w;
    size_t r = l.A->shape[0];
    memcpy(buf, l.W->w, l.out * l.in * sizeof *buf);
    for (size_t o = 0; o < l.out; o++)
        for (size_t k = 0; k < r; k++) {
            ls_real b = s * l.B->w[o * r + k];
            const ls_real *a = l.A->w + k * l.in;
            for (size_t j = 0; j < l.in; j++) buf[o * l.in + j] += b * a[j];
        }
    return buf;
}

/* The routed MoE of one layer over tokens x [T, d] into y [T, d], in chunks of C tokens. */
static void moe_forward(ls_real *y, const ls_real *x, const ls_params *p, const ls_mla_layer *ly, size_t T,
                        size_t C, mla_bufs *b) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, E = (size_t)ls_mla_keys_of(c)->n_experts, k = (size_t)ls_mla_keys_of(c)->experts_per_token;
    ls_real s = p->lora_scale;
    for (size_t t0 = 0; t0 < T; t0 += C) {
        size_t n = T - t0 < C ? T - t0 : C;
        const ls_real *xc = x + t0 * d;
        ls_real *yc = y + t0 * d;
        apply_lin(b->logits, xc, ly->router, n, s, b->xa);
        LS_K(ls_moe_route_forward)(b->idx, b->rw, b->s, b->logits, ly->router_bias->w, n, E, (size_t)ls_mla_keys_of(c)->n_group,
                                   (size_t)ls_mla_keys_of(c)->topk_group, k, (ls_real)ls_mla_keys_of(c)->routed_scale, b->route_ws);
        LS_K(ls_moe_dispatch)(b->offsets, b->slot_of_row, b->row_of_slot, b->idx, n, E, k);
        LS_K(ls_moe_gather)(b->xg, xc, b->slot_of_row, n, k, d);
        for (size_t e = 0; e < E; e++) {
            size_t r0 = b->offsets[e], nr = b->offsets[e + 1] - r0;
            if (!nr) continue;
            ls_mla_mlp m = LS_K(ls_mla_expert)(p, ly, e);
            apply_mlp(b->eo + r0 * d, b->xg + r0 * d, &m, nr, s, b->eg, b->eu, b->xa);
        }
        apply_mlp(b->sh, xc, &ly->shared, n, s, b->eg, b->eu, b->xa);
        LS_K(ls_moe_combine_forward)(yc, b->eo, b->rw, b->sh, b->row_of_slot, n, k, d);
    }
}

/* One segment: tokens [T] at positions pos0.. through every layer (rows
 * written into the caches), then, with targets, logp [T] of targets. */
static void run_segment(const ls_params *p, mla_cache *cache, const int32_t *tokens, size_t T, int64_t pos0,
                        const int32_t *targets, ls_real temp, ls_real *logp, size_t k_sel, size_t C,
                        ls_mla_form form, mla_bufs *b) {
    const ls_model_config *c = &p->cfg;
    size_t d = (size_t)c->d_model, H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank, rkv = (size_t)ls_mla_keys_of(c)->kv_rank;
    size_t dn = (size_t)ls_mla_keys_of(c)->d_nope, dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v, dqk = dn + dr;
    size_t HI = (size_t)ls_mla_keys_of(c)->index_heads, dI = (size_t)ls_mla_keys_of(c)->index_dim;
    size_t Tk = (size_t)pos0 + T, P0 = (size_t)pos0;
    ls_real eps = (ls_real)c->rms_eps, s = p->lora_scale;
    double theta = c->rope_theta;
    ls_real tau = (ls_real)(1.0 / sqrt((double)dqk));
    ls_real wscale = (ls_real)(1.0 / sqrt((double)HI) / sqrt((double)dI));
    ls_mla_dims dims = {.H = H, .d_n = dn, .d_r = dr, .d_v = dv, .r_kv = rkv};
    LS_K(ls_embedding_forward)(b->h, tokens, p->embed->w, T, d);
    for (int li = 0; li < c->n_layers; li++) {
        const ls_mla_layer *ly = &LS_K(ls_mla_layers)(p)[li];
        mla_cache *ca = &cache[li];
        /* ---- MLA with the DSA selection (§2.1, §2.2) ---- */
        LS_K(ls_rmsnorm_forward)(b->x, b->rstd, b->h, ly->norm1->w, 0, eps, T, d);
        apply_lin(b->cq, b->x, ly->q_a, T, s, b->xa);
        LS_K(ls_rmsnorm_forward)(b->cq, b->rstd, b->cq, ly->q_a_norm->w, 0, eps, T, rq);
        apply_lin(b->q, b->cq, ly->q_b, T, s, b->xa);
        for (size_t t = 0; t < T; t++)
            for (size_t hh = 0; hh < H; hh++) {
                memcpy(b->qn + (t * H + hh) * dn, b->q + (t * H + hh) * dqk, dn * sizeof *b->q);
                memcpy(b->qpe + (t * H + hh) * dr, b->q + (t * H + hh) * dqk + dn, dr * sizeof *b->q);
            }
        LS_K(ls_rope_apply)(b->qpe, LS_ROPE_INTERLEAVED, T, H, dr, dr, pos0, theta, 0);
        apply_lin(b->kv, b->x, ly->kv_a, T, s, b->xa);
        for (size_t t = 0; t < T; t++) {
            memcpy(b->ctil + t * rkv, b->kv + t * (rkv + dr), rkv * sizeof *b->kv);
            memcpy(ca->kpe + (P0 + t) * dr, b->kv + t * (rkv + dr) + rkv, dr * sizeof *b->kv);
        }
        LS_K(ls_rmsnorm_forward)(ca->ckv + P0 * rkv, b->rstd, b->ctil, ly->kv_a_norm->w, 0, eps, T, rkv);
        LS_K(ls_rope_apply)(ca->kpe + P0 * dr, LS_ROPE_INTERLEAVED, T, 1, dr, dr, pos0, theta, 0);
        /* the indexer: its x is the normalised block input, its q from c_q */
        apply_lin(b->ikt, b->x, ly->ik, T, s, b->xa);
        LS_K(ls_layernorm_forward)(ca->kI + P0 * dI, b->ikt, ly->ik_norm_w->w, ly->ik_norm_b->w,
                                   (ls_real)INDEXER_LN_EPS, T, dI);
        LS_K(ls_rope_apply)(ca->kI + P0 * dI, LS_ROPE_NEOX, T, 1, dI, dr, pos0, theta, 0);
        apply_lin(b->qI, b->cq, ly->iq, T, s, b->xa);
        LS_K(ls_rope_apply)(b->qI, LS_ROPE_NEOX, T, HI, dI, dr, pos0, theta, 0);
        apply_lin(b->wI, b->x, ly->iw, T, s, b->xa);
        for (size_t i = 0; i < T * HI; i++) b->wI[i] *= wscale;
        LS_K(ls_dsa_topk)(b->sel, b->sel_score, b->qI, b->wI, ca->kI, T, Tk, HI, dI, pos0, 0, k_sel, b->dsa_ws);
        ls_decisions_note(b->sel, T * k_sel * sizeof *b->sel, T); /* kernels/decisions.h */
        /* keys start at position 0: the global positions are the block's local indices */
        const ls_real *kvb = kv_b_effective(ly->kv_b, s, b->kvb_eff);
        LS_K(ls_mla_forward)(b->o, b->lse, b->qn, b->qpe, ca->ckv, ca->kpe, kvb, b->sel, k_sel, T, Tk, &dims, pos0,
                             0, tau, form, b->mla_ws);
        apply_lin(b->y, b->o, ly->o, T, s, b->xa);
        for (size_t i = 0; i < T * d; i++) b->h[i] += b->y[i];
        /* ---- FFN: dense SwiGLU or the routed MoE (§2.3) ---- */
        LS_K(ls_rmsnorm_forward)(b->x, b->rstd, b->h, ly->norm2->w, 0, eps, T, d);
        if (ly->is_moe)
            moe_forward(b->y, b->x, p, ly, T, C, b);
        else
            apply_mlp(b->y, b->x, &ly->mlp, T, s, b->g, b->u, b->xa);
        for (size_t i = 0; i < T * d; i++) b->h[i] += b->y[i];
    }
    if (!targets) return;
    LS_K(ls_rmsnorm_forward)(b->x, b->rstd, b->h, p->norm->w, 0, eps, T, d);
    LS_K(ls_logprob_forward)(logp, b->lse, b->x, p->lm_head->w, targets, temp, T, d, (size_t)c->vocab,
                             VOCAB_CHUNK, b->lp_ws);
}

static size_t max3(size_t a, size_t b, size_t c) {
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

ls_status LS_K(ls_mla_logprobs)(const ls_params *p, const int32_t *prompt, size_t P,
                                const int32_t *const *responses, const size_t *lens, size_t G,
                                double temperature, const ls_mla_fwd_opts *opts, ls_real *const *out,
                                char *err, size_t err_len) {
    const ls_model_config *c = &p->cfg;
    ls_status st = LS_ERR_ARG;
    mla_cache *cache = NULL;
    mla_bufs b;
    memset(&b, 0, sizeof b);
    int32_t *branch = NULL;
    ls_mla_fwd_opts o = {0};
    if (opts) o = *opts;
    if (c->family != &ls_family_desc_mla || !p->fam || p->fam->desc != &ls_family_desc_mla) {
        snprintf(err, err_len, "params: family '%s', not 'mla'", ls_family_name(c->family));
        return LS_ERR_ARG;
    }
    if (P < 1 || !prompt) {
        snprintf(err, err_len, "prompt: must hold at least one token");
        return LS_ERR_ARG;
    }
    if (G < 1 || !responses || !lens || !out) {
        snprintf(err, err_len, "responses: at least one member needed");
        return LS_ERR_ARG;
    }
    if (!(temperature > 0) || !isfinite(temperature)) {
        snprintf(err, err_len, "temperature: %g must be positive and finite", temperature);
        return LS_ERR_ARG;
    }
    if (ls_mla_keys_of(c)->index_topk < 1) {
        snprintf(err, err_len, "config: key 'index_topk': must be >= 1 for the forward");
        return LS_ERR_ARG;
    }
    if (o.form != LS_MLA_NAIVE && o.form != LS_MLA_ABSORBED) {
        snprintf(err, err_len, "opts: form %d is neither naive nor absorbed", (int)o.form);
        return LS_ERR_ARG;
    }
    for (size_t t = 0; t < P; t++)
        if (prompt[t] < 0 || prompt[t] >= c->vocab) {
            snprintf(err, err_len, "prompt: token %zu is %d, outside [0, %d)", t, (int)prompt[t], c->vocab);
            return LS_ERR_ARG;
        }
    size_t Rmax = 0;
    for (size_t i = 0; i < G; i++) {
        if (lens[i] < 1 || !responses[i] || !out[i]) {
            snprintf(err, err_len, "responses: member %zu is empty", i);
            return LS_ERR_ARG;
        }
        for (size_t t = 0; t < lens[i]; t++)
            if (responses[i][t] < 0 || responses[i][t] >= c->vocab) {
                snprintf(err, err_len, "responses: member %zu token %zu is %d, outside [0, %d)", i, t,
                         (int)responses[i][t], c->vocab);
                return LS_ERR_ARG;
            }
        if (lens[i] > Rmax) Rmax = lens[i];
    }
    if (P - 1 > SIZE_MAX / 2 - Rmax) {
        snprintf(err, err_len, "prompt: %zu tokens and a %zu-token response overflow the position count", P, Rmax);
        return LS_ERR_ARG;
    }
    size_t L = (size_t)c->n_layers, d = (size_t)c->d_model, H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank;
    size_t rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dn = (size_t)ls_mla_keys_of(c)->d_nope, dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v;
    size_t HI = (size_t)ls_mla_keys_of(c)->index_heads, dI = (size_t)ls_mla_keys_of(c)->index_dim, E = (size_t)ls_mla_keys_of(c)->n_experts;
    size_t kx = (size_t)ls_mla_keys_of(c)->experts_per_token, Ie = (size_t)ls_mla_keys_of(c)->expert_dim, I = (size_t)c->ffn_dim;
    size_t cap = P - 1 + Rmax, Tm = P - 1 > Rmax ? P - 1 : Rmax;
    size_t k_sel = (size_t)ls_mla_keys_of(c)->index_topk < cap ? (size_t)ls_mla_keys_of(c)->index_topk : cap;
    size_t C = o.moe_chunk ? o.moe_chunk : 256;
    if (C > Tm) C = Tm;
    size_t r = (size_t)p->obj.lora_r, Ck = C * kx;
    size_t xa_rows = Tm > Ck ? Tm : Ck;

    st = LS_ERR_NOMEM;
    cache = ls_mem_alloc(LS_MEM_PROMPT_STATE, L * sizeof *cache);
    if (!cache) {
        snprintf(err, err_len, "cannot allocate the carried state table (%zu layers)", L);
        goto cleanup;
    }
    for (size_t l = 0; l < L; l++) {
        cache[l].ckv = ls_mem_alloc(LS_MEM_PROMPT_STATE, cap * rkv * sizeof(ls_real));
        cache[l].kpe = ls_mem_alloc(LS_MEM_PROMPT_STATE, cap * (dr ? dr : 1) * sizeof(ls_real));
        cache[l].kI = ls_mem_alloc(LS_MEM_PROMPT_STATE, cap * (dI ? dI : 1) * sizeof(ls_real));
        if (!cache[l].ckv || !cache[l].kpe || !cache[l].kI) {
            snprintf(err, err_len, "cannot allocate layer %zu's carried state (%zu positions)", l, cap);
            goto cleanup;
        }
    }
    /* every buffer and its size in reals (0: at least one, so that a dim of 0 still allocates) */
    struct {
        ls_real **ptr;
        size_t n;
    } rb[] = {
        {&b.h, Tm * d}, {&b.x, Tm * d}, {&b.rstd, Tm}, {&b.cq, Tm * rq}, {&b.q, Tm * H * (dn + dr)},
        {&b.qn, Tm * H * dn}, {&b.qpe, Tm * H * dr}, {&b.kv, Tm * (rkv + dr)}, {&b.ctil, Tm * rkv},
        {&b.ikt, Tm * dI}, {&b.qI, Tm * HI * dI}, {&b.wI, Tm * HI}, {&b.o, Tm * H * dv}, {&b.lse, Tm * H},
        {&b.y, Tm * d}, {&b.g, Tm * I}, {&b.u, Tm * I}, {&b.xa, xa_rows * r}, {&b.sel_score, Tm * k_sel},
        {&b.mla_ws, max3(LS_K(ls_mla_forward_workspace)(LS_MLA_NAIVE, cap, k_sel, &(ls_mla_dims){H, dn, dr, dv, rkv}),
                         LS_K(ls_mla_forward_workspace)(LS_MLA_ABSORBED, cap, k_sel,
                                                        &(ls_mla_dims){H, dn, dr, dv, rkv}), 1)},
        {&b.dsa_ws, LS_K(ls_dsa_topk_workspace)(cap)}, {&b.lp_ws, LS_K(ls_logprob_workspace)(Tm, VOCAB_CHUNK)},
        {&b.kvb_eff, H * (dn + dv) * rkv}, {&b.logits, C * E}, {&b.s, C * E}, {&b.rw, C * kx},
        {&b.route_ws, LS_K(ls_moe_route_workspace)(E, (size_t)ls_mla_keys_of(c)->n_group)}, {&b.xg, Ck * d},
        {&b.eg, (Ck > C ? Ck : C) * Ie}, {&b.eu, (Ck > C ? Ck : C) * Ie}, {&b.eo, Ck * d}, {&b.sh, C * d},
    };
    for (size_t i = 0; i < sizeof rb / sizeof *rb; i++) {
        size_t n = rb[i].n ? rb[i].n : 1;
        *rb[i].ptr = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof(ls_real));
        if (!*rb[i].ptr) {
            snprintf(err, err_len, "cannot allocate %zu bytes of forward buffers (buffer %zu)", n * sizeof(ls_real), i);
            goto cleanup;
        }
    }
    b.sel = ls_mem_alloc(LS_MEM_SCRATCH, (Tm * k_sel > 0 ? Tm * k_sel : 1) * sizeof *b.sel);
    b.idx = ls_mem_alloc(LS_MEM_SCRATCH, (Ck ? Ck : 1) * sizeof *b.idx);
    b.offsets = ls_mem_alloc(LS_MEM_SCRATCH, (E + 1) * sizeof *b.offsets);
    b.slot_of_row = ls_mem_alloc(LS_MEM_SCRATCH, (Ck ? Ck : 1) * sizeof *b.slot_of_row);
    b.row_of_slot = ls_mem_alloc(LS_MEM_SCRATCH, (Ck ? Ck : 1) * sizeof *b.row_of_slot);
    branch = ls_mem_alloc(LS_MEM_SCRATCH, Rmax * sizeof *branch);
    if (!b.sel || !b.idx || !b.offsets || !b.slot_of_row || !b.row_of_slot || !branch) {
        snprintf(err, err_len, "cannot allocate the selection and dispatch buffers (%zu tokens)", Tm);
        goto cleanup;
    }
    ls_real temp = (ls_real)temperature;
    if (P > 1) run_segment(p, cache, prompt, P - 1, 0, NULL, temp, NULL, k_sel, C, o.form, &b);
    for (size_t i = 0; i < G; i++) {
        branch[0] = prompt[P - 1];
        if (lens[i] > 1) memcpy(branch + 1, responses[i], (lens[i] - 1) * sizeof *branch);
        run_segment(p, cache, branch, lens[i], (int64_t)(P - 1), responses[i], temp, out[i], k_sel, C, o.form, &b);
    }
    st = LS_OK;
cleanup:
    if (cache)
        for (size_t l = 0; l < L; l++) {
            ls_mem_free(cache[l].ckv);
            ls_mem_free(cache[l].kpe);
            ls_mem_free(cache[l].kI);
        }
    ls_mem_free(cache);
    ls_real **all[] = {&b.h, &b.x, &b.rstd, &b.cq, &b.q, &b.qn, &b.qpe, &b.kv, &b.ctil, &b.ikt, &b.qI, &b.wI,
                       &b.o, &b.lse, &b.y, &b.g, &b.u, &b.xa, &b.sel_score, &b.mla_ws, &b.dsa_ws, &b.lp_ws,
                       &b.kvb_eff, &b.logits, &b.s, &b.rw, &b.route_ws, &b.xg, &b.eg, &b.eu, &b.eo, &b.sh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ls_mem_free(*all[i]);
    ls_mem_free(b.sel);
    ls_mem_free(b.idx);
    ls_mem_free(b.offsets);
    ls_mem_free(b.slot_of_row);
    ls_mem_free(b.row_of_slot);
    ls_mem_free(branch);
    return st;
}
