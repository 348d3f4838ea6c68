/* hybrid_table.c - the hybrid family's table of the trainer's family
 * interface (family.h): its tensor list and layer views, the reference
 * view, its carried state, segments, prompt backward, context parallelism
 * (hybrid_cp.c) and its memory-plan terms.  The math is in hybrid*.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/attention.h"
#include "kernels/gdn.h"
#include "kernels/logprob.h"
#include "trainer/families/hybrid/hybrid_family.h"
#include "trainer/families/hybrid/hybrid_cp.h"
#include "trainer/model/seg_frame.h"

void LS_K(ls_hybrid_build)(ls_param_builder *b, ls_params *p) {
    const ls_model_config *c = b->cfg;
    ls_hybrid_layer scratch_layer, *layers = p ? ls_hybrid_layers(p) : NULL;
    ls_tensor *sink[3];
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, I = (size_t)c->ffn_dim;
    size_t L = (size_t)c->n_layers;
    double sd = 1.0 / sqrt((double)d), so = 0.5 / sqrt((double)d);
    char nm[96];
    *(p ? &p->embed : &sink[0]) = LS_K(ls_params_add)(b, "embed.weight", V, d, LS_INIT_NORMAL, 1.0, 0);
    for (size_t i = 0; i < L; i++) {
        ls_hybrid_layer *ly = layers ? &layers[i] : &scratch_layer;
        ly->is_attn = ls_hybrid_cfg_is_attn(c, (int)i);
        snprintf(nm, sizeof nm, "layers.%zu.norm1.weight", i);
        ly->norm1 = LS_K(ls_params_add)(b, nm, d, 0, LS_INIT_ZERO, 0, 0);
        if (ly->is_attn) {
            size_t H = (size_t)ls_hybrid_keys_of(c)->attn_heads, Hkv = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads, hd = (size_t)ls_hybrid_keys_of(c)->head_dim;
            char pre[80];
            snprintf(pre, sizeof pre, "layers.%zu.attn.q", i);
            ly->q = LS_K(ls_params_add_lin)(b, pre, H * 2 * hd, d, sd, 1);
            snprintf(pre, sizeof pre, "layers.%zu.attn.k", i);
            ly->k = LS_K(ls_params_add_lin)(b, pre, Hkv * hd, d, sd, 1);
            snprintf(pre, sizeof pre, "layers.%zu.attn.v", i);
            ly->v = LS_K(ls_params_add_lin)(b, pre, Hkv * hd, d, sd, 1);
            snprintf(pre, sizeof pre, "layers.%zu.attn.o", i);
            ly->o = LS_K(ls_params_add_lin)(b, pre, d, H * hd, 0.5 / sqrt((double)(H * hd)), 1);
            snprintf(nm, sizeof nm, "layers.%zu.attn.q_norm.weight", i);
            ly->q_norm = LS_K(ls_params_add)(b, nm, hd, 0, LS_INIT_ZERO, 0, 0);
            snprintf(nm, sizeof nm, "layers.%zu.attn.k_norm.weight", i);
            ly->k_norm = LS_K(ls_params_add)(b, nm, hd, 0, LS_INIT_ZERO, 0, 0);
        } else {
            size_t Hk = (size_t)ls_hybrid_keys_of(c)->gdn_hk, Hv = (size_t)ls_hybrid_keys_of(c)->gdn_hv, dk = (size_t)ls_hybrid_keys_of(c)->gdn_dk,
                   dv = (size_t)ls_hybrid_keys_of(c)->gdn_dv, K = (size_t)ls_hybrid_keys_of(c)->conv_kernel;
            size_t C = 2 * Hk * dk + Hv * dv;
            char pre[80];
            snprintf(pre, sizeof pre, "layers.%zu.gdn.in_qkv", i);
            ly->in_qkv = LS_K(ls_params_add_lin)(b, pre, C, d, sd, 1);
            snprintf(pre, sizeof pre, "layers.%zu.gdn.in_z", i);
            ly->in_z = LS_K(ls_params_add_lin)(b, pre, Hv * dv, d, sd, 1);
            snprintf(pre, sizeof pre, "layers.%zu.gdn.in_b", i);
            ly->in_b = LS_K(ls_params_add_lin)(b, pre, Hv, d, sd, 0);
            snprintf(pre, sizeof pre, "layers.%zu.gdn.in_a", i);
            ly->in_a = LS_K(ls_params_add_lin)(b, pre, Hv, d, sd, 0);
            snprintf(nm, sizeof nm, "layers.%zu.gdn.conv.weight", i);
            ly->conv = LS_K(ls_params_add)(b, nm, C, K, LS_INIT_NORMAL, 1.0 / sqrt((double)K), 0);
            snprintf(nm, sizeof nm, "layers.%zu.gdn.A_log", i);
            ly->A_log = LS_K(ls_params_add)(b, nm, Hv, 0, LS_INIT_ALOG, 0, 0);
            snprintf(nm, sizeof nm, "layers.%zu.gdn.dt_bias", i);
            ly->dt_bias = LS_K(ls_params_add)(b, nm, Hv, 0, LS_INIT_DTBIAS, 0, 0);
            snprintf(nm, sizeof nm, "layers.%zu.gdn.norm.weight", i);
            ly->gnorm = LS_K(ls_params_add)(b, nm, dv, 0, LS_INIT_ONE, 0, 0);
            snprintf(pre, sizeof pre, "layers.%zu.gdn.out", i);
            ly->out = LS_K(ls_params_add_lin)(b, pre, d, Hv * dv, 0.5 / sqrt((double)(Hv * dv)), 1);
        }
        snprintf(nm, sizeof nm, "layers.%zu.norm2.weight", i);
        ly->norm2 = LS_K(ls_params_add)(b, nm, d, 0, LS_INIT_ZERO, 0, 0);
        char pre[80];
        snprintf(pre, sizeof pre, "layers.%zu.mlp.gate", i);
        ly->gate = LS_K(ls_params_add_lin)(b, pre, I, d, sd, 1);
        snprintf(pre, sizeof pre, "layers.%zu.mlp.up", i);
        ly->up = LS_K(ls_params_add_lin)(b, pre, I, d, sd, 1);
        snprintf(pre, sizeof pre, "layers.%zu.mlp.down", i);
        ly->down = LS_K(ls_params_add_lin)(b, pre, d, I, 0.5 / sqrt((double)I), 1);
    }
    *(p ? &p->norm : &sink[1]) = LS_K(ls_params_add)(b, "norm.weight", d, 0, LS_INIT_ZERO, 0, 0);
    *(p ? &p->lm_head : &sink[2]) = LS_K(ls_params_add)(b, "lm_head.weight", V, d, LS_INIT_NORMAL, so, 0);
}

void LS_K(ls_hybrid_ref_view)(ls_params *v, const ls_params *p) {
    for (int i = 0; i < p->cfg.n_layers; i++) {
        const ls_hybrid_layer *s = &ls_hybrid_layers(p)[i];
        ls_hybrid_layer *d = &ls_hybrid_layers(v)[i];
        d->is_attn = s->is_attn;
        d->norm1 = LS_K(ls_params_remap)(p, v, s->norm1);
        d->norm2 = LS_K(ls_params_remap)(p, v, s->norm2);
        d->in_qkv = LS_K(ls_params_remap_lin)(p, v, s->in_qkv);
        d->in_z = LS_K(ls_params_remap_lin)(p, v, s->in_z);
        d->in_b = LS_K(ls_params_remap_lin)(p, v, s->in_b);
        d->in_a = LS_K(ls_params_remap_lin)(p, v, s->in_a);
        d->out = LS_K(ls_params_remap_lin)(p, v, s->out);
        d->conv = LS_K(ls_params_remap)(p, v, s->conv);
        d->A_log = LS_K(ls_params_remap)(p, v, s->A_log);
        d->dt_bias = LS_K(ls_params_remap)(p, v, s->dt_bias);
        d->gnorm = LS_K(ls_params_remap)(p, v, s->gnorm);
        d->q = LS_K(ls_params_remap_lin)(p, v, s->q);
        d->k = LS_K(ls_params_remap_lin)(p, v, s->k);
        d->v = LS_K(ls_params_remap_lin)(p, v, s->v);
        d->o = LS_K(ls_params_remap_lin)(p, v, s->o);
        d->q_norm = LS_K(ls_params_remap)(p, v, s->q_norm);
        d->k_norm = LS_K(ls_params_remap)(p, v, s->k_norm);
        d->gate = LS_K(ls_params_remap_lin)(p, v, s->gate);
        d->up = LS_K(ls_params_remap_lin)(p, v, s->up);
        d->down = LS_K(ls_params_remap_lin)(p, v, s->down);
    }
}

/* ---- the memory plan's terms (family.h) -------------------------------------
 * What hybrid_layer.c and hybrid_segment.c request, call by call, in reals
 * (each arena request rounded to 64 bytes by RQ).  A layer's forward puts
 * its saved values on the tape when taping, else in its scratch arena; one
 * layer's arena lives at a time. */
typedef struct {
    size_t esz, tape, scr; /* bytes */
} acc;
static void RQ(acc *a, int to_tape, size_t n) {
    size_t b = ls_sat_mul(n, a->esz);
    b = b > SIZE_MAX - 63 ? SIZE_MAX : (b + 63) & ~(size_t)63;
    if (to_tape) a->tape = ls_sat_add(a->tape, b);
    else a->scr = ls_sat_add(a->scr, b);
}

typedef struct {
    size_t d, I, H, Hkv, hd, Hk, Hv, dk, dv, K, C, QK, VD, r;
} dims;
static dims dims_of(const ls_model_config *c, int lora_r) {
    dims m = {.d = (size_t)c->d_model, .I = (size_t)c->ffn_dim, .H = (size_t)ls_hybrid_keys_of(c)->attn_heads,
              .Hkv = (size_t)ls_hybrid_keys_of(c)->attn_kv_heads, .hd = (size_t)ls_hybrid_keys_of(c)->head_dim, .Hk = (size_t)ls_hybrid_keys_of(c)->gdn_hk,
              .Hv = (size_t)ls_hybrid_keys_of(c)->gdn_hv, .dk = (size_t)ls_hybrid_keys_of(c)->gdn_dk, .dv = (size_t)ls_hybrid_keys_of(c)->gdn_dv,
              .K = (size_t)ls_hybrid_keys_of(c)->conv_kernel, .r = lora_r > 0 ? (size_t)lora_r : 0};
    m.QK = m.Hk * m.dk;
    m.VD = m.Hv * m.dv;
    m.C = 2 * m.QK + m.VD;
    return m;
}

/* ls_layer_forward of T tokens (taped or not), mixer included. */
static void layer_fwd(acc *a, const dims *m, int attn, size_t T, int taped, int ctx) {
    size_t T_ = T, r = m->r;
    if (taped) RQ(a, 1, T_ * m->d);                     /* x */
    RQ(a, taped, T_), RQ(a, taped, T_ * m->d), RQ(a, 0, T_ * m->d); /* rstd1, xn1, mix */
    if (attn) {
        size_t qr = m->H * m->hd, kr = m->Hkv * m->hd;
        for (int i = 0; r && i < 4; i++) RQ(a, taped, T_ * r); /* xa_q, xa_k, xa_v, xa_o */
        RQ(a, 0, T_ * 2 * qr);                                  /* qg */
        RQ(a, taped, T_ * qr), RQ(a, taped, T_ * qr), RQ(a, taped, T_ * qr), RQ(a, taped, T_ * m->H);
        RQ(a, taped, T_ * kr), RQ(a, taped, T_ * kr), RQ(a, taped, T_ * m->Hkv), RQ(a, taped, T_ * kr);
        RQ(a, taped, T_ * qr), RQ(a, taped, T_ * m->H), RQ(a, taped, T_ * qr); /* o, lse, y */
        /* (the block list of the context pages: hybrid_plan adds it, it grows with the pages) */
    } else {
        for (int i = 0; r && i < 3; i++) RQ(a, taped, T_ * r); /* xa_qkv, xa_z, xa_out */
        RQ(a, taped, T_ * m->C), RQ(a, taped, T_ * m->VD), RQ(a, taped, T_ * m->Hv), RQ(a, taped, T_ * m->Hv);
        RQ(a, taped, T_ * m->C), RQ(a, 0, T_ * m->C);                            /* pre, cc */
        RQ(a, taped, T_ * m->QK), RQ(a, taped, T_ * m->QK), RQ(a, taped, T_ * m->VD);
        RQ(a, taped, T_ * m->QK), RQ(a, taped, T_ * m->QK), RQ(a, taped, T_ * m->Hk), RQ(a, taped, T_ * m->Hk);
        RQ(a, taped, T_ * m->Hv), RQ(a, taped, T_ * m->Hv), RQ(a, taped, T_ * m->VD), RQ(a, taped, T_ * m->Hv);
        RQ(a, taped, T_ * m->VD);
        if (taped && ctx) RQ(a, 1, (m->K - 1) * m->C), RQ(a, 1, m->Hv * m->dk * m->dv);
    }
    if (taped) RQ(a, 1, T_ * m->d);                     /* h_mid */
    RQ(a, taped, T_), RQ(a, taped, T_ * m->d);          /* rstd2, xn2 */
    for (int i = 0; r && i < 3; i++) RQ(a, taped, T_ * r);
    RQ(a, taped, T_ * m->I), RQ(a, taped, T_ * m->I), RQ(a, taped, T_ * m->I);
}

/* ls_layer_backward of T tokens: its scratch arena.  part (attention layers
 * only): 0 the whole backward, 1 ls_layer_backward_out alone (MLP, output
 * projection and gate), 2 ls_layer_backward_in alone (the softmax onwards):
 * the context-parallel prompt backward runs them in two passes. */
static size_t layer_bwd(const dims *m, size_t esz, int attn, size_t T, int dctx, int part) {
    acc a = {.esz = esz};
    size_t r = m->r;
    if (part != 2) { /* mlp_backward: dact, dmg, dmu, dxn, dx and the adapters' temporaries */
        RQ(&a, 0, T * m->I), RQ(&a, 0, T * m->I), RQ(&a, 0, T * m->I), RQ(&a, 0, T * m->d), RQ(&a, 0, T * m->d);
        for (int i = 0; r && i < 3; i++) RQ(&a, 0, T * r);
    }
    if (attn) {
        size_t qr = m->H * m->hd, kr = m->Hkv * m->hd;
        if (part == 0) RQ(&a, 0, T * qr), RQ(&a, 0, T * qr); /* dout, dgate (the caller's in two passes) */
        if (part != 2) {
            RQ(&a, 0, T * qr); /* dy */
            if (r) RQ(&a, 0, T * r);
        }
        if (part == 1) return a.scr;
        RQ(&a, 0, T * m->d);                                      /* dxn */
        RQ(&a, 0, T * qr), RQ(&a, 0, T * kr), RQ(&a, 0, T * kr), RQ(&a, 0, T * qr), RQ(&a, 0, T * kr);
        RQ(&a, 0, T * 2 * qr);                                    /* dq .. dqg */
        for (int i = 0; r && i < 3; i++) RQ(&a, 0, T * r);
    } else {
        RQ(&a, 0, T * m->d); /* dxn */
        for (int i = 0; i < 3; i++) RQ(&a, 0, T * m->VD);
        RQ(&a, 0, T * m->QK), RQ(&a, 0, T * m->QK), RQ(&a, 0, T * m->VD);
        for (int i = 0; i < 4; i++) RQ(&a, 0, T * m->Hv);
        RQ(&a, 0, T * m->QK), RQ(&a, 0, T * m->QK), RQ(&a, 0, T * m->C), RQ(&a, 0, T * m->C);
        RQ(&a, 0, LS_K(ls_gdn_backward_workspace)(T, m->Hk, m->Hv, m->dk, m->dv));
        if (dctx) RQ(&a, 0, m->Hv * m->dk * m->dv), RQ(&a, 0, (m->K - 1) * m->C);
        for (int i = 0; r && i < 3; i++) RQ(&a, 0, T * r);
    }
    RQ(&a, 0, T * m->d); /* norm1's dx */
    return a.scr;
}

/* One segment's frame (seg_frame.c): the embedding rows, and when it scores
 * n rows the head's rows and log-prob workspace. */
static size_t frame_bytes(const ls_model_config *c, size_t esz, size_t T, size_t n_sc) {
    acc a = {.esz = esz};
    RQ(&a, 0, T * (size_t)c->d_model);
    if (n_sc) {
        RQ(&a, 0, n_sc * (size_t)c->d_model), RQ(&a, 0, n_sc), RQ(&a, 0, n_sc * (size_t)c->d_model), RQ(&a, 0, n_sc);
        RQ(&a, 0, LS_K(ls_logprob_workspace)(n_sc, 1024));
    }
    return a.scr;
}

/* Under CP, the memo of one attention layer's response collectives over T queries (trainer/base/
 * coll_memo.h: a replay that recomputes a forward takes them again): lse_max, lse_sum, out_sum. */
static size_t memo_layer_bytes(const dims *m, size_t es, size_t T) {
    size_t lse = ls_coll_memo_plan_bytes(ls_sat_mul3(T, m->H, es));
    return ls_sat_add(ls_sat_mul(2, lse), ls_coll_memo_plan_bytes(ls_sat_mul3(T, m->H * m->hd, es)));
}

void LS_K(ls_hybrid_plan)(const ls_model_config *c, const ls_family_plan_in *in, ls_family_plan *out) {
    memset(out, 0, sizeof *out);
    dims m = dims_of(c, in->lora_r);
    size_t es = in->esz, n = in->shard, ch = in->chunk ? in->chunk : n, R = in->R, L = (size_t)c->n_layers;
    size_t row = m.Hkv * m.hd, tail_n = (m.K - 1) * m.C, S_n = m.Hv * m.dk * m.dv;
    size_t pg = in->page_size ? in->page_size : 64;
    out->pages = (n + pg - 1) / pg;
    for (size_t l = 0; l < L; l++) {
        if (ls_hybrid_cfg_is_attn(c, (int)l)) {
            out->attn_layers++;
            out->attn_kv = ls_sat_add(out->attn_kv, ls_sat_mul3(2, n, ls_sat_mul(row, in->ssz)));
        } else {
            out->recurrent_layers++;
            out->recurrent = ls_sat_add(out->recurrent, ls_sat_mul(tail_n + S_n, in->ssz));
        }
    }
    out->state_meta = ls_sat_add(ls_sat_mul(L, 64), ls_sat_mul3((size_t)out->attn_layers, out->pages, sizeof(ls_kv_page)));
    out->state_grad = ls_sat_mul(ls_sat_add(ls_sat_mul3(2 * (size_t)out->attn_layers, n, row),
                                            ls_sat_mul((size_t)out->recurrent_layers, tail_n + S_n)), es);
    size_t (*ph)[LS_MEM_COUNT] = out->phase;
#define ADD(p, cat, x) (ph[p][cat] = ls_sat_add(ph[p][cat], (x)))
    /* capture: the largest layer's arena over one chunk, its own K/V rows, the frame */
    size_t cap = 0;
    for (int attn = 0; attn < 2; attn++) {
        acc a = {.esz = es};
        layer_fwd(&a, &m, attn, ch, 0, 1);
        if (attn) RQ(&a, 0, ch * row), RQ(&a, 0, ch * row);
        else RQ(&a, 0, tail_n), RQ(&a, 0, S_n);
        if (a.scr > cap) cap = a.scr;
    }
    /* the attention kernels' block lists (keys, and key gradients in a backward): one entry per page */
    size_t lists = ls_sat_mul(out->pages + 2, sizeof(ls_attn_kv_block) + sizeof(ls_attn_kv_grad));
    for (int p = 0; p < LS_FPLAN_COUNT; p++) ADD(p, p == LS_FPLAN_REPLAY ? LS_MEM_BRANCH : LS_MEM_SCRATCH, lists);
    ADD(LS_FPLAN_CAPTURE, LS_MEM_SCRATCH, ls_sat_add(cap, frame_bytes(c, es, ch, 0)));
    ADD(LS_FPLAN_CAPTURE, LS_MEM_SCRATCH, out->state_meta);
    /* scoring one member: the same untaped forward over R tokens, its head; where the replay is chunked
       (replay_chunk.c), over one chunk at a time, the response's own K/V rows and the GDN state in a fork */
    size_t sR = in->replay_ckpt == 2 && in->replay_chunk && in->replay_chunk < R ? in->replay_chunk : R, sc = 0;
    for (int attn = 0; attn < 2; attn++) {
        acc a = {.esz = es};
        layer_fwd(&a, &m, attn, sR, 0, 1);
        if (a.scr > sc) sc = a.scr;
    }
    ADD(LS_FPLAN_SCORE, LS_MEM_SCRATCH, ls_sat_add(sc, frame_bytes(c, es, sR, sR)));
    ADD(LS_FPLAN_SCORE, LS_MEM_SCORE, ls_sat_mul(R, es + sizeof(int32_t)));
    if (in->replay_ckpt == 2) {
        if (in->world <= 1 || in->cp_rank < 0 || in->cp_rank == in->world - 1) /* the owner of the keys' */
            ADD(LS_FPLAN_SCORE, LS_MEM_SCORE, ls_sat_mul3(2 * (size_t)out->attn_layers, R, ls_sat_mul(row, es)));
        ADD(LS_FPLAN_SCORE, LS_MEM_SCORE, ls_sat_mul((size_t)out->recurrent_layers, (tail_n + S_n) * es));
    }
    /* decode: a fork of the state (its page tables), R one-token pages per attention layer, one token's
       layer arena, the logits row and the sampler's workspace */
    size_t dec = 0;
    for (int attn = 0; attn < 2; attn++) {
        acc a = {.esz = es};
        layer_fwd(&a, &m, attn, 1, 0, 1);
        if (a.scr > dec) dec = a.scr;
    }
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCRATCH, ls_sat_add(dec, out->state_meta));
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCORE, ls_sat_mul3(2 * (size_t)out->attn_layers, R, ls_sat_add(row * es, 64)));
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCORE, ls_sat_mul((size_t)out->recurrent_layers, (tail_n + S_n) * es));
    ADD(LS_FPLAN_ROLLOUT, LS_MEM_SCORE, ls_sat_add(ls_sat_mul((size_t)c->vocab, es + 2 * 16 + 8), 4096));
    /* replay one member: every layer's tape over R tokens plus its frame, then the largest layer's backward */
    acc t = {.esz = es};
    for (size_t l = 0; l < L; l++) layer_fwd(&t, &m, ls_hybrid_cfg_is_attn(c, (int)l), R, 1, 1);
    size_t fwd_scr = 0, bwd = 0;
    for (int attn = 0; attn < 2; attn++) {
        acc a = {.esz = es};
        layer_fwd(&a, &m, attn, R, 1, 1);
        if (a.scr > fwd_scr) fwd_scr = a.scr;
        size_t b = layer_bwd(&m, es, attn, R, in->full, 0);
        if (b > bwd) bwd = b;
    }
    size_t head = frame_bytes(c, es, R, R);
    if (in->replay_ckpt == 2) {
        /* in chunks (trainer/step/replay_chunk.c): the response's own K/V rows and their gradient, the GDN state
           at every chunk start (with the run's own and two gradients), the chunks' collectives under CP; then one
           chunk's tape, its frame and its backward (a context gradient on every chunk but the first, the rows
           the later chunks' gradient arrives in gathered) */
        size_t C = in->replay_chunk && in->replay_chunk < R ? in->replay_chunk : R, K = (R + C - 1) / C;
        /* under CP the last rank holds the response's own keys (hybrid_cp.c's own_keys) */
        int owner = in->world <= 1 || in->cp_rank < 0 || in->cp_rank == in->world - 1;
        size_t rows = owner ? ls_sat_mul3(4 * (size_t)out->attn_layers, R, ls_sat_mul(row, es)) : 0;
        size_t fixed = ls_sat_mul3(K + 3, (size_t)out->recurrent_layers, ls_sat_mul(tail_n + S_n, es));
        size_t kept = ls_sat_add(rows, fixed);
        if (in->world > 1) /* each chunk's, every attention layer's */
            kept = ls_sat_add(kept, ls_sat_mul3(K, (size_t)out->attn_layers, memo_layer_bytes(&m, es, C)));
        acc tc = {.esz = es};
        for (size_t l = 0; l < L; l++) layer_fwd(&tc, &m, ls_hybrid_cfg_is_attn(c, (int)l), C, 1, 1);
        fwd_scr = bwd = 0;
        for (int attn = 0; attn < 2; attn++) {
            acc a = {.esz = es};
            layer_fwd(&a, &m, attn, C, 1, 1);
            if (a.scr > fwd_scr) fwd_scr = a.scr;
            size_t b = layer_bwd(&m, es, attn, C, 1, 0);
            if (attn) { /* dout's rows gathered for the layer's own keys */
                acc g = {.esz = es};
                RQ(&g, 0, C * row + 1), RQ(&g, 0, C * row + 1);
                b = ls_sat_add(b, g.scr);
            }
            if (b > bwd) bwd = b;
        }
        t.tape = ls_sat_add(kept, tc.tape);
        head = frame_bytes(c, es, C, C);
    } else if (in->replay_ckpt) { /* checkpointed (seg_frame.c): each layer's input, and one layer's tape rebuilt at a time */
        size_t one = 0;
        for (int attn = 0; attn < 2; attn++) {
            acc a = {.esz = es};
            layer_fwd(&a, &m, attn, R, 1, 1);
            if (a.tape > one) one = a.tape;
        }
        size_t kept = LS_K(ls_seg_ckpt_plan_bytes)(c->n_layers, R, m.d, es);
        if (in->world > 1) kept = ls_sat_add(kept, ls_sat_mul((size_t)out->attn_layers, memo_layer_bytes(&m, es, R)));
        t.tape = ls_sat_add(kept, one);
    }
    ADD(LS_FPLAN_REPLAY, LS_MEM_BRANCH, ls_sat_add(ls_sat_add(t.tape, head), bwd > fwd_scr ? bwd : fwd_scr));
    /* the full-mode prompt backward: dh over the shard; per layer, one chunk's window (its tape, the
       chunk's rows) beside its backward arena; GDN layers also the states at every chunk start */
    size_t win_kind[2] = {0, 0}; /* GDN, attention */
    if (in->full) {
        size_t nch = (n + ch - 1) / ch, win = 0;
        for (int attn = 0; attn < 2; attn++) {
            acc a = {.esz = es};
            layer_fwd(&a, &m, attn, ch, 1, !attn);
            size_t b = layer_bwd(&m, es, attn, ch, !attn, 0);
            if (attn && in->world > 1) { /* two passes, each with half of the backward */
                size_t b1 = layer_bwd(&m, es, 1, ch, 0, 1), b2 = layer_bwd(&m, es, 1, ch, 0, 2);
                b = b1 > b2 ? b1 : b2;
            }
            size_t w = ls_sat_add(a.tape, b > a.scr ? b : a.scr);
            acc k = {.esz = es};
            if (attn) RQ(&k, 0, ch * m.d), RQ(&k, 0, ch * row), RQ(&k, 0, ch * row);
            else RQ(&k, 0, nch * (tail_n + S_n)), RQ(&k, 0, tail_n), RQ(&k, 0, S_n), RQ(&k, 0, ch * m.d),
                RQ(&k, 0, tail_n + S_n);
            w = ls_sat_add(w, k.scr);
            win_kind[attn] = w;
            if (w > win) win = w;
        }
        acc k = {.esz = es};
        RQ(&k, 0, n * m.d);
        ADD(LS_FPLAN_PROMPT_BWD, LS_MEM_SCRATCH, ls_sat_add(win, k.scr));
    }
    if (in->world > 1) {
        /* context parallelism (hybrid_cp.c, ls_shard_forward): the shard's hidden rows and queries (scratch) and
           the remote partial (o, lse: communication) live through an attention layer; the ring's messages (K, V:
           two blocks each way; four with dK, dV in the reverse ring) live only while the ring turns, not beside a
           chunk's layer arena: the larger of the two instants.  The start state (checkpoints) and its gradient
           (full mode) live all step. */
        size_t qr = ls_sat_mul(m.H * m.hd + m.H, es), blk = ls_sat_mul3(n, row, es);
        size_t rem = ls_sat_mul(n, qr), start = ls_sat_mul((size_t)out->recurrent_layers, (tail_n + S_n) * in->ssz);
        for (int p = 0; p < LS_FPLAN_COUNT; p++) ADD(p, LS_MEM_CHECKPOINT, start);
        size_t keep = ls_sat_add(ls_sat_mul3(n, m.d, es), ls_sat_mul(n, qr));
        size_t ring = ls_sat_add(ls_sat_mul(4, blk), ls_sat_mul(ch, qr)), layer = ph[LS_FPLAN_CAPTURE][LS_MEM_SCRATCH];
        ADD(LS_FPLAN_CAPTURE, LS_MEM_COMM, ls_sat_add(rem, ring > layer ? ring : 0));
        ph[LS_FPLAN_CAPTURE][LS_MEM_SCRATCH] = ls_sat_add(keep, ring > layer ? out->state_meta : layer);
        if (in->full) {
            size_t kb = ls_sat_add(ls_sat_add(ls_sat_mul3(5, n, ls_sat_mul(m.H * m.hd, es)), ls_sat_mul3(n, m.H, es)),
                                   ls_sat_mul(2, blk));
            /* an attention layer: its shard rows beside the reverse ring or beside its chunk window; a GDN
               layer: its window alone; dh over the shard throughout */
            size_t rb = ls_sat_mul(8, blk), dh = ls_sat_mul3(n, m.d, es);
            size_t at = ls_sat_add(kb, rb > win_kind[1] ? rb : win_kind[1]);
            int ring = at >= win_kind[0] && rb > win_kind[1];
            ADD(LS_FPLAN_PROMPT_BWD, LS_MEM_COMM, ls_sat_add(rem, ring ? rb : 0));
            ph[LS_FPLAN_PROMPT_BWD][LS_MEM_SCRATCH] =
                ls_sat_add(dh, at >= win_kind[0] ? (ring ? kb : ls_sat_add(kb, win_kind[1])) : win_kind[0]);
            ADD(LS_FPLAN_PROMPT_BWD, LS_MEM_PROMPT_GRAD, ls_sat_mul((size_t)out->recurrent_layers, (tail_n + S_n) * es));
        }
    }
#undef ADD
    /* --state-tier host: layer l's staged share at n prompt positions (+ single decode pages); the segments stage
       consecutive layers two at a time, the prompt backward the attention layers only */
    size_t rb = ls_sat_mul(row, in->ssz), gdn = ls_sat_add((tail_n * in->ssz + 63) / 64 * 64, (S_n * in->ssz + 63) / 64 * 64);
    size_t last = n ? (n - 1) / ch * ch : 0; /* one rank: the last chunk's context */
    size_t at[4] = {ls_sat_mul(2, ls_stage_field_bytes(n, pg, rb, 0)), ls_sat_mul(2, ls_stage_field_bytes(n, pg, rb, R ? R - 1 : 0)),
                    ls_sat_mul(2, ls_stage_field_bytes(last, pg, rb, 0)), 0};
    for (int k = 0; k < 3; k++) {
        size_t best = 0, best_attn = 0, prev_attn = 0;
        for (size_t l = 0; l < L; l++) {
            int a = ls_hybrid_cfg_is_attn(c, (int)l);
            size_t cur = a ? at[k] : gdn;
            if (l + 1 < L) {
                size_t nx = ls_hybrid_cfg_is_attn(c, (int)l + 1) ? at[k] : gdn;
                if (ls_sat_add(cur, nx) > best) best = ls_sat_add(cur, nx);
            } else if (cur > best) {
                best = cur;
            }
            if (a) {
                if (ls_sat_add(prev_attn, at[k]) > best_attn) best_attn = ls_sat_add(prev_attn, at[k]);
                prev_attn = at[k];
            }
        }
        if (k == 0) {
            out->stage[LS_FPLAN_SCORE] = out->stage[LS_FPLAN_REPLAY] = best;
            out->stage[LS_FPLAN_PROMPT_BWD] = in->full ? best_attn : 0;
            if (in->world > 1) out->stage[LS_FPLAN_CAPTURE] = out->attn_layers ? at[0] : 0; /* read back, one layer */
        } else if (k == 1) {
            out->stage[LS_FPLAN_ROLLOUT] = best;
        } else if (in->world == 1 && ch < n) {
            out->stage[LS_FPLAN_CAPTURE] = best;
        }
    }
}

ls_status LS_K(ls_hybrid_prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                          ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                          ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user) {
    return LS_K(ls_prompt_backward)(p, tokens, T, chunk, checkpoints, ps, dstate, win_cat, hook, hook_user, NULL);
}

const ls_family_ops LS_K(ls_family_hybrid) = {
    .layout = {.layer_view_size = sizeof(ls_hybrid_layer), .build = LS_K(ls_hybrid_build),
               .ref_view = LS_K(ls_hybrid_ref_view)},
    .desc = &ls_family_desc_hybrid,
    .state_init = LS_K(ls_hybrid_state_init),
    .state_fork = LS_K(ls_hybrid_state_fork),
    .state_grad_like = LS_K(ls_hybrid_state_grad_like),
    .state_free = LS_K(ls_hybrid_state_free),
    .state_bytes = LS_K(ls_hybrid_state_bytes),
    .state_plan_bytes = LS_K(ls_hybrid_state_plan_bytes),
    .segment_forward = LS_K(ls_segment_forward),
    .segment_backward = LS_K(ls_segment_backward),
    .tape_free = LS_K(ls_seg_tape_free),
    .tape_bytes = LS_K(ls_seg_tape_bytes),
    .prompt_backward = LS_K(ls_hybrid_prompt_backward),
    .cp_init = LS_K(ls_hybrid_cp_init),
    .cp_free = LS_K(ls_hybrid_cp_free),
    .cp_capture = LS_K(ls_hybrid_cp_capture),
    .cp_prompt_backward = LS_K(ls_hybrid_cp_prompt_backward),
    .plan = LS_K(ls_hybrid_plan),
};
