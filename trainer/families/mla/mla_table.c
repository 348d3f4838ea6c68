/* mla_table.c - the mla family's table of the trainer's family interface
 * (family.h): its tensor list (docs/model.md §5, the LoRA targets of §3) and
 * layer views, the reference view, its memory-plan terms; the transaction's
 * parts are mla_segment.c (state, segments, prompt backward) over
 * mla_layer.c (one block), and mla_cp.c (context parallelism, over
 * mla_cp_attn.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "trainer/families/mla/mla_layer.h"

static ls_mla_mlp add_mlp(ls_param_builder *b, const char *pre, size_t I, size_t d, int lora) {
    char nm[88];
    ls_mla_mlp m;
    double sd = 1.0 / sqrt((double)d);
    snprintf(nm, sizeof nm, "%s.gate", pre);
    m.gate = LS_K(ls_params_add_lin)(b, nm, I, d, sd, lora);
    snprintf(nm, sizeof nm, "%s.up", pre);
    m.up = LS_K(ls_params_add_lin)(b, nm, I, d, sd, lora);
    snprintf(nm, sizeof nm, "%s.down", pre);
    m.down = LS_K(ls_params_add_lin)(b, nm, d, I, 0.5 / sqrt((double)I), lora);
    return m;
}

/* The tensor list in table order; p NULL: count only.  The indexer and
 * router_bias are never LoRA targets and are frozen (no gradient, no
 * moments, in either mode: docs/model.md §3). */
static void mla_build(ls_param_builder *b, ls_params *p) {
    const ls_model_config *c = b->cfg;
    ls_mla_layer scratch_layer, *layers = p ? LS_K(ls_mla_layers)(p) : NULL;
    ls_tensor *sink[3];
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, I = (size_t)c->ffn_dim, L = (size_t)c->n_layers;
    size_t H = (size_t)ls_mla_keys_of(c)->heads, rq = (size_t)ls_mla_keys_of(c)->q_rank, rkv = (size_t)ls_mla_keys_of(c)->kv_rank, dn = (size_t)ls_mla_keys_of(c)->d_nope;
    size_t dr = (size_t)ls_mla_keys_of(c)->d_rope, dv = (size_t)ls_mla_keys_of(c)->d_v, HI = (size_t)ls_mla_keys_of(c)->index_heads, dI = (size_t)ls_mla_keys_of(c)->index_dim;
    size_t E = (size_t)ls_mla_keys_of(c)->n_experts, Ie = (size_t)ls_mla_keys_of(c)->expert_dim;
    int lora_experts = b->obj->lora_experts;
    double sd = 1.0 / sqrt((double)d);
    char nm[96], pre[80];
    *(p ? &p->embed : &sink[0]) = LS_K(ls_params_add)(b, "embed.weight", V, d, LS_INIT_NORMAL, 1.0, 0);
    for (size_t i = 0; i < L; i++) {
        ls_mla_layer *ly = layers ? &layers[i] : &scratch_layer;
        memset(ly, 0, sizeof *ly);
        ly->is_moe = i >= (size_t)ls_mla_keys_of(c)->first_dense;
        snprintf(nm, sizeof nm, "layers.%zu.norm1.weight", i);
        ly->norm1 = LS_K(ls_params_add)(b, nm, d, 0, LS_INIT_ONE, 0, 0);
        snprintf(pre, sizeof pre, "layers.%zu.attn.q_a", i);
        ly->q_a = LS_K(ls_params_add_lin)(b, pre, rq, d, sd, 1);
        snprintf(nm, sizeof nm, "layers.%zu.attn.q_a_norm.weight", i);
        ly->q_a_norm = LS_K(ls_params_add)(b, nm, rq, 0, LS_INIT_ONE, 0, 0);
        snprintf(pre, sizeof pre, "layers.%zu.attn.q_b", i);
        ly->q_b = LS_K(ls_params_add_lin)(b, pre, H * (dn + dr), rq, 1.0 / sqrt((double)rq), 1);
        snprintf(pre, sizeof pre, "layers.%zu.attn.kv_a", i);
        ly->kv_a = LS_K(ls_params_add_lin)(b, pre, rkv + dr, d, sd, 1);
        snprintf(nm, sizeof nm, "layers.%zu.attn.kv_a_norm.weight", i);
        ly->kv_a_norm = LS_K(ls_params_add)(b, nm, rkv, 0, LS_INIT_ONE, 0, 0);
        snprintf(pre, sizeof pre, "layers.%zu.attn.kv_b", i);
        ly->kv_b = LS_K(ls_params_add_lin)(b, pre, H * (dn + dv), rkv, 1.0 / sqrt((double)rkv), 1);
        snprintf(pre, sizeof pre, "layers.%zu.attn.o", i);
        ly->o = LS_K(ls_params_add_lin)(b, pre, d, H * dv, 0.5 / sqrt((double)(H * dv)), 1);
        snprintf(pre, sizeof pre, "layers.%zu.indexer.q", i);
        ly->iq = LS_K(ls_params_add_lin)(b, pre, HI * dI, rq, 1.0 / sqrt((double)rq), 0);
        snprintf(pre, sizeof pre, "layers.%zu.indexer.k", i);
        ly->ik = LS_K(ls_params_add_lin)(b, pre, dI, d, sd, 0);
        snprintf(nm, sizeof nm, "layers.%zu.indexer.k_norm.weight", i);
        ly->ik_norm_w = LS_K(ls_params_add)(b, nm, dI, 0, LS_INIT_ONE, 0, 0);
        snprintf(nm, sizeof nm, "layers.%zu.indexer.k_norm.bias", i);
        ly->ik_norm_b = LS_K(ls_params_add)(b, nm, dI, 0, LS_INIT_ZERO, 0, 0);
        snprintf(pre, sizeof pre, "layers.%zu.indexer.w", i);
        ly->iw = LS_K(ls_params_add_lin)(b, pre, HI, d, sd, 0);
        ls_tensor *fz[] = {ly->iq.W, ly->ik.W, ly->iw.W, ly->ik_norm_w, ly->ik_norm_b};
        for (size_t k = 0; k < sizeof fz / sizeof *fz; k++)
            if (fz[k]) fz[k]->frozen = 1;
        snprintf(nm, sizeof nm, "layers.%zu.norm2.weight", i);
        ly->norm2 = LS_K(ls_params_add)(b, nm, d, 0, LS_INIT_ONE, 0, 0);
        if (!ly->is_moe) {
            snprintf(pre, sizeof pre, "layers.%zu.mlp", i);
            ly->mlp = add_mlp(b, pre, I, d, 1);
            continue;
        }
        snprintf(pre, sizeof pre, "layers.%zu.moe.router", i);
        ly->router = LS_K(ls_params_add_lin)(b, pre, E, d, sd, 0);
        snprintf(nm, sizeof nm, "layers.%zu.moe.router_bias", i);
        ly->router_bias = LS_K(ls_params_add)(b, nm, E, 0, LS_INIT_ZERO, 0, 0);
        if (ly->router_bias) ly->router_bias->frozen = 1;
        for (size_t e = 0; e < E; e++) {
            snprintf(pre, sizeof pre, "layers.%zu.moe.experts.%zu", i, e);
            ls_mla_mlp m = add_mlp(b, pre, Ie, d, lora_experts);
            if (e == 0) {
                ly->experts_t = m.gate.W;
                ly->experts_tpl = m.gate.A ? 3 : 1;
                ly->experts_lora = m.gate.A != NULL;
            }
        }
        snprintf(pre, sizeof pre, "layers.%zu.moe.shared", i);
        ly->shared = add_mlp(b, pre, Ie, d, 1);
    }
    *(p ? &p->norm : &sink[1]) = LS_K(ls_params_add)(b, "norm.weight", d, 0, LS_INIT_ONE, 0, 0);
    *(p ? &p->lm_head : &sink[2]) = LS_K(ls_params_add)(b, "lm_head.weight", V, d, LS_INIT_NORMAL, 0.5 * sd, 0);
}

static ls_lin expert_lin(const ls_mla_layer *ly, const ls_tensor *t) {
    ls_lin l = {.W = (ls_tensor *)t, .out = t->shape[0], .in = t->shape[1]};
    if (ly->experts_tpl == 3 && ly->experts_lora) {
        l.A = (ls_tensor *)t + 1;
        l.B = (ls_tensor *)t + 2;
    }
    return l;
}

ls_mla_mlp LS_K(ls_mla_expert)(const ls_params *p, const ls_mla_layer *ly, size_t e) {
    (void)p;
    const ls_tensor *t = ly->experts_t + e * 3 * (size_t)ly->experts_tpl;
    ls_mla_mlp m;
    m.gate = expert_lin(ly, t);
    m.up = expert_lin(ly, t + ly->experts_tpl);
    m.down = expert_lin(ly, t + 2 * ly->experts_tpl);
    return m;
}

static ls_mla_mlp remap_mlp(const ls_params *p, ls_params *v, ls_mla_mlp m) {
    ls_mla_mlp r;
    r.gate = LS_K(ls_params_remap_lin)(p, v, m.gate);
    r.up = LS_K(ls_params_remap_lin)(p, v, m.up);
    r.down = LS_K(ls_params_remap_lin)(p, v, m.down);
    return r;
}

static void mla_ref_view(ls_params *v, const ls_params *p) {
    for (int i = 0; i < p->cfg.n_layers; i++) {
        const ls_mla_layer *s = &LS_K(ls_mla_layers)(p)[i];
        ls_mla_layer *d = &LS_K(ls_mla_layers)(v)[i];
        *d = *s;
        d->norm1 = LS_K(ls_params_remap)(p, v, s->norm1);
        d->norm2 = LS_K(ls_params_remap)(p, v, s->norm2);
        d->q_a = LS_K(ls_params_remap_lin)(p, v, s->q_a);
        d->q_b = LS_K(ls_params_remap_lin)(p, v, s->q_b);
        d->kv_a = LS_K(ls_params_remap_lin)(p, v, s->kv_a);
        d->kv_b = LS_K(ls_params_remap_lin)(p, v, s->kv_b);
        d->o = LS_K(ls_params_remap_lin)(p, v, s->o);
        d->q_a_norm = LS_K(ls_params_remap)(p, v, s->q_a_norm);
        d->kv_a_norm = LS_K(ls_params_remap)(p, v, s->kv_a_norm);
        d->iq = LS_K(ls_params_remap_lin)(p, v, s->iq);
        d->ik = LS_K(ls_params_remap_lin)(p, v, s->ik);
        d->iw = LS_K(ls_params_remap_lin)(p, v, s->iw);
        d->ik_norm_w = LS_K(ls_params_remap)(p, v, s->ik_norm_w);
        d->ik_norm_b = LS_K(ls_params_remap)(p, v, s->ik_norm_b);
        d->mlp = remap_mlp(p, v, s->mlp);
        d->router = LS_K(ls_params_remap_lin)(p, v, s->router);
        d->router_bias = LS_K(ls_params_remap)(p, v, s->router_bias);
        d->experts_t = LS_K(ls_params_remap)(p, v, s->experts_t);
        d->experts_lora = 0; /* the reference policy never uses adapters */
        d->shared = remap_mlp(p, v, s->shared);
    }
}

/* The memory plan's terms (family.h): the state by part here, the layer's
 * transients where they are allocated (mla_layer.c, ls_mla_plan_transients). */
static void mla_plan(const ls_model_config *c, const ls_family_plan_in *in, ls_family_plan *out) {
    memset(out, 0, sizeof *out);
    size_t n = in->shard, L = (size_t)c->n_layers, pg = in->page_size ? in->page_size : 64;
    size_t sets = in->index_sets && in->index_sets < L ? in->index_sets : L;
    size_t lat = ls_sat_add((size_t)ls_mla_keys_of(c)->kv_rank, (size_t)ls_mla_keys_of(c)->d_rope), dI = (size_t)ls_mla_keys_of(c)->index_dim;
    out->latent_layers = (int)L;
    out->index_sets = (int)sets;
    out->pages = (n + pg - 1) / pg;
    out->latent = ls_sat_mul(ls_sat_mul3(L, n, lat), in->ssz);
    out->index_keys = ls_sat_mul(ls_sat_mul3(sets, n, dI), in->ssz);
    out->state_meta = ls_sat_add(ls_sat_mul(L, 64), ls_sat_mul3(L, out->pages, sizeof(ls_kv_page)));
    out->state_grad = ls_sat_mul(ls_sat_mul3(L, n, lat), in->esz);
    /* a chunk's transients peak in its last layer's attention, before that layer appends its rows */
    size_t ch = in->chunk && in->chunk < n ? in->chunk : n;
    out->capture_pending = ls_sat_mul(ls_sat_mul(ch, lat), in->ssz);
    if (sets == L) out->capture_pending = ls_sat_add(out->capture_pending, ls_sat_mul3(ch, dI, in->ssz));
    LS_K(ls_mla_plan_transients)(c, in, out);
    /* --state-tier host: two layers' staged shares (a layer: c_kv, k_pe and, on an index layer, the index keys);
       the capture under CP reads no state (its rows go out by the ring) */
    size_t R = in->R, last = n ? (n - 1) / ch * ch : 0;
    size_t pos[3] = {n, n, last}, single[3] = {0, R ? R - 1 : 0, 0}, share[3];
    for (int k = 0; k < 3; k++) {
        size_t s = ls_sat_add(ls_stage_field_bytes(pos[k], pg, ls_sat_mul((size_t)ls_mla_keys_of(c)->kv_rank, in->ssz), single[k]),
                              ls_stage_field_bytes(pos[k], pg, ls_sat_mul((size_t)ls_mla_keys_of(c)->d_rope, in->ssz), single[k]));
        if (sets) s = ls_sat_add(s, ls_stage_field_bytes(pos[k], pg, ls_sat_mul(dI, in->ssz), single[k]));
        share[k] = L > 1 ? ls_sat_mul(2, s) : s;
    }
    out->stage[LS_FPLAN_SCORE] = out->stage[LS_FPLAN_REPLAY] = share[0];
    out->stage[LS_FPLAN_PROMPT_BWD] = in->full ? share[0] : 0;
    out->stage[LS_FPLAN_ROLLOUT] = share[1];
    out->stage[LS_FPLAN_CAPTURE] = in->world == 1 && ch < n ? share[2] : 0;
}

const ls_family_ops LS_K(ls_family_mla) = {
    .layout = {.layer_view_size = sizeof(ls_mla_layer), .build = mla_build, .ref_view = mla_ref_view},
    .desc = &ls_family_desc_mla,
    .state_init = LS_K(ls_mla_state_init),
    .state_fork = LS_K(ls_mla_state_fork),
    .state_grad_like = LS_K(ls_mla_state_grad_like),
    .state_free = LS_K(ls_mla_state_free),
    .state_bytes = LS_K(ls_mla_state_bytes),
    .state_plan_bytes = LS_K(ls_mla_state_plan_bytes),
    .segment_forward = LS_K(ls_mla_segment_forward),
    .segment_backward = LS_K(ls_mla_segment_backward),
    .tape_free = LS_K(ls_seg_tape_free),
    .tape_bytes = LS_K(ls_seg_tape_bytes),
    .prompt_backward = LS_K(ls_mla_prompt_backward),
    .cp_init = LS_K(ls_mla_cp_init),
    .cp_free = LS_K(ls_mla_cp_free),
    .cp_capture = LS_K(ls_mla_cp_capture),
    .cp_prompt_backward = LS_K(ls_mla_cp_prompt_bwd),
    .cp_shard_grads = LS_K(ls_mla_cp_shard_grads),
    .plan = mla_plan,
};
