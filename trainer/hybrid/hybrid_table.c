/* hybrid_table.c - the hybrid family's table of the trainer's family
 * interface (family.h): its tensor list and layer views, the reference
 * view, its carried state, segments, prompt backward, context parallelism
 * (hybrid_cp.c) and its memory-plan terms.  The math is in hybrid*.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "trainer/hybrid/hybrid_family.h"
#include "trainer/hybrid/hybrid_cp.h"

/* The tensor list of docs/model.md §5 in table order; p NULL: count only. */
static void hybrid_build(ls_param_builder *b, ls_params *p) {
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
        ly->is_attn = ls_config_layer_is_attn(c, (int)i);
        snprintf(nm, sizeof nm, "layers.%zu.norm1.weight", i);
        ly->norm1 = LS_K(ls_params_add)(b, nm, d, 0, LS_INIT_ZERO, 0, 0);
        if (ly->is_attn) {
            size_t H = (size_t)c->attn_heads, Hkv = (size_t)c->attn_kv_heads, hd = (size_t)c->head_dim;
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
            size_t Hk = (size_t)c->gdn_hk, Hv = (size_t)c->gdn_hv, dk = (size_t)c->gdn_dk,
                   dv = (size_t)c->gdn_dv, K = (size_t)c->conv_kernel;
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

static void hybrid_ref_view(ls_params *v, const ls_params *p) {
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

/* Reals one layer saves per token (the larger of the two mixers), an
 * over-estimate of the tape plus its backward transients.  Saturating. */
static size_t layer_reals_per_token(const ls_model_config *c, int r) {
    size_t d = (size_t)c->d_model, ffn = (size_t)c->ffn_dim, H = (size_t)c->attn_heads;
    size_t Hkv = (size_t)c->attn_kv_heads, hd = (size_t)c->head_dim;
    size_t Hk = (size_t)c->gdn_hk, dk = (size_t)c->gdn_dk, Hv = (size_t)c->gdn_hv, dv = (size_t)c->gdn_dv;
    size_t C = ls_sat_add(ls_sat_mul3(2, Hk, dk), ls_sat_mul(Hv, dv));
    size_t attn = ls_sat_add(ls_sat_add(ls_sat_mul3(12, H, hd), ls_sat_mul3(8, Hkv, hd)), ls_sat_mul(2, H));
    size_t gdn = ls_sat_add(ls_sat_add(ls_sat_mul(4, C), ls_sat_mul3(6, Hv, dv)),
                            ls_sat_add(ls_sat_mul3(6, Hk, dk), ls_sat_mul(8, Hv)));
    size_t n = ls_sat_add(ls_sat_mul(6, d), ls_sat_mul(6, ffn));
    n = ls_sat_add(n, attn > gdn ? attn : gdn);
    return ls_sat_add(n, ls_sat_add(ls_sat_mul(16, (size_t)r), 8));
}

static size_t hybrid_plan_layer_bytes(const ls_model_config *c, int lora_r) {
    return ls_sat_mul(layer_reals_per_token(c, lora_r), sizeof(ls_real));
}

/* Context parallelism (cp.h): this rank's shard of cpP - 1 positions, run
 * layer by layer in chunks; its ring messages and the remote partial are
 * communication buffers. */
static void hybrid_plan_terms(const ls_model_config *c, const ls_family_plan_in *in, size_t plan_b[LS_MEM_COUNT]) {
    if (in->world <= 1) return;
    size_t cpP = in->cpP, sz = sizeof(ls_real), dsz = ls_sat_mul((size_t)c->d_model, sz);
#define ADD(cat, x) (plan_b[cat] = ls_sat_add(plan_b[cat], (x)))
    size_t row = ls_sat_mul3((size_t)c->attn_kv_heads, (size_t)c->head_dim, sz);
    size_t qrow = ls_sat_mul3((size_t)c->attn_heads, (size_t)c->head_dim + 1, sz);
    ADD(LS_MEM_COMM, ls_sat_add(ls_sat_mul3(8, cpP, row), ls_sat_mul(cpP, qrow))); /* ring messages, partial */
    ADD(LS_MEM_CHECKPOINT, LS_K(ls_hybrid_state_plan_bytes)(c, 0));                       /* the shard's start state */
    /* the shard's hidden state and queries between chunks; full mode: the attention layer's shard
       rows (q, o, dout, dgate, dq, lse; dK, dV) */
    ADD(LS_MEM_SCRATCH, ls_sat_add(ls_sat_mul(cpP, dsz), ls_sat_mul(cpP, qrow)));
    if (in->full) ADD(LS_MEM_SCRATCH, ls_sat_add(ls_sat_mul3(5, cpP, qrow), ls_sat_mul3(2, cpP, row)));
#undef ADD
}

static ls_status hybrid_prompt_backward(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                        ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                        ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user) {
    return LS_K(ls_prompt_backward)(p, tokens, T, chunk, checkpoints, ps, dstate, win_cat, hook, hook_user, NULL);
}

const ls_family_ops LS_K(ls_family_hybrid) = {
    .layout = {.layer_view_size = sizeof(ls_hybrid_layer), .build = hybrid_build, .ref_view = hybrid_ref_view},
    .id = LS_FAMILY_HYBRID,
    .name = "hybrid",
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
    .prompt_backward = hybrid_prompt_backward,
    .cp_init = LS_K(ls_hybrid_cp_init),
    .cp_free = LS_K(ls_hybrid_cp_free),
    .cp_capture = LS_K(ls_hybrid_cp_capture),
    .cp_prompt_backward = LS_K(ls_hybrid_cp_prompt_backward),
    .plan_layer_bytes_per_token = hybrid_plan_layer_bytes,
    .plan_terms = hybrid_plan_terms,
};
