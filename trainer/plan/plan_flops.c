/* plan_flops.c - floating-point operations of the model's math (docs/model.md),
 * counted from the config alone (plan.h: ls_plan_forward_flops,
 * ls_plan_backward_flops).  The counting rules, which docs/plan.md states too:
 *
 *  - a linear [out, in] costs 2·out·in per token; its LoRA adapter (lora_r > 0,
 *    the family's targets, docs/model.md §3; routed experts excluded, their
 *    adapters are an option) 2·r·(in + out);
 *  - attention: 4·hd per (query head, visible key) forward (scores, then P·V);
 *    hybrid keys are every earlier position, mla keys min(index_topk, p + 1);
 *  - GDN: the depthwise conv 2·C·K per token, the recurrence 7·dk·dv per value
 *    head and token (decay, Sᵀk, the rank-one update, Sᵀq);
 *  - the DSA indexer: its three projections and (2·d_I + 2)·H_I per visible key
 *    (the ReLU'd dots and their weighted sum); top-k selection is comparisons;
 *  - MoE: the router E·d, experts_per_token routed SwiGLU experts and the shared one;
 *  - the LM head V·d and its log-softmax 3·V per token;
 *  - norms, activations, RoPE, gates and the embedding lookup are not counted.
 *
 * Backward: the activation gradient of every linear costs what its forward
 * costs; a weight gradient another 2·out·in (with_weight_grads: the adapters
 * with lora_r > 0, else every trained weight: the mla indexer and router_bias
 * are frozen); attention and the top-k attention 2x their forward (dP, dQ, dK,
 * dV); the GDN recurrence 15·dk·dv per value head and token (docs/model.md
 * §1.1's reverse sweep); the conv 2·C·K (+ 2·C·K for its weight); the log-softmax
 * 2·V; the indexer nothing (it gets no gradient). */
#include "trainer/plan/plan.h"

/* Sum over the n tokens at positions pos0 .. pos0 + n - 1 of the keys each
 * sees: every earlier position and itself (p + 1), capped at cap (0: none). */
static double visible_keys(size_t n, size_t pos0, size_t cap) {
    double nn = (double)n, p0 = (double)pos0;
    if (cap == 0 || pos0 + n <= cap) return nn * p0 + nn * (nn + 1.0) / 2.0;
    if (pos0 >= cap) return nn * (double)cap;
    /* positions below cap - 1 see p + 1 keys, the rest cap */
    double m = (double)(cap - pos0); /* tokens with p + 1 <= cap */
    return m * p0 + m * (m + 1.0) / 2.0 + (nn - m) * (double)cap;
}

/* What one family's layers and head cost per token, split by kind of work. */
typedef struct {
    double base;      /* 2·out·in of every linear (forward) */
    double base_tr;   /* of those, the trained ones (full mode's weight gradients) */
    double lora;      /* 2·r·(in + out) of the adapters */
    double conv;      /* GDN conv, forward */
    double rec;       /* GDN recurrence dk·dv per value head, summed over layers (x7 fwd, x15 bwd) */
    double attn_hd;   /* sum over attention layers of H·hd (x4 per visible key fwd) */
    double mla_hd;    /* sum over MLA layers of H·(d_qk + d_v) (x2 per attended key fwd) */
    double idx_per_key; /* sum over MLA layers of (2·d_I + 2)·H_I */
    double vocab;     /* V (log-softmax) */
} per_token;

static void lin(per_token *t, double out, double in, int lora_target, int trained, int r) {
    t->base += 2.0 * out * in;
    if (trained) t->base_tr += 2.0 * out * in;
    if (lora_target && r > 0) t->lora += 2.0 * (double)r * (in + out);
}

static void hybrid_counts(const ls_model_config *c, int r, per_token *t) {
    double d = c->d_model, C = 2.0 * c->gdn_hk * c->gdn_dk + (double)c->gdn_hv * c->gdn_dv;
    double Hvdv = (double)c->gdn_hv * c->gdn_dv, H = c->attn_heads, hd = c->head_dim;
    for (int l = 0; l < c->n_layers; ++l) {
        if (ls_config_layer_is_attn(c, l)) {
            lin(t, H * 2.0 * hd, d, 1, 1, r);                     /* q (query and gate) */
            lin(t, (double)c->attn_kv_heads * hd, d, 1, 1, r);    /* k */
            lin(t, (double)c->attn_kv_heads * hd, d, 1, 1, r);    /* v */
            lin(t, d, H * hd, 1, 1, r);                           /* o */
            t->attn_hd += H * hd;
        } else {
            lin(t, C, d, 1, 1, r);                                /* in_qkv */
            lin(t, Hvdv, d, 1, 1, r);                             /* in_z */
            lin(t, c->gdn_hv, d, 0, 1, r);                        /* in_b */
            lin(t, c->gdn_hv, d, 0, 1, r);                        /* in_a */
            lin(t, d, Hvdv, 1, 1, r);                             /* out */
            t->conv += 2.0 * C * c->conv_kernel;
            t->rec += (double)c->gdn_hv * c->gdn_dk * c->gdn_dv;
        }
        lin(t, c->ffn_dim, d, 1, 1, r);                           /* mlp gate */
        lin(t, c->ffn_dim, d, 1, 1, r);                           /* mlp up */
        lin(t, d, c->ffn_dim, 1, 1, r);                           /* mlp down */
    }
}

static void mla_counts(const ls_model_config *c, int r, per_token *t) {
    double d = c->d_model, H = c->heads, dqk = (double)c->d_nope + c->d_rope;
    for (int l = 0; l < c->n_layers; ++l) {
        lin(t, c->q_rank, d, 1, 1, r);                                     /* q_a */
        lin(t, H * dqk, c->q_rank, 1, 1, r);                               /* q_b */
        lin(t, (double)c->kv_rank + c->d_rope, d, 1, 1, r);                /* kv_a */
        lin(t, H * ((double)c->d_nope + c->d_v), c->kv_rank, 1, 1, r);     /* kv_b */
        lin(t, d, H * c->d_v, 1, 1, r);                                    /* o */
        t->mla_hd += H * (dqk + c->d_v);
        lin(t, (double)c->index_heads * c->index_dim, c->q_rank, 0, 0, r); /* indexer q (frozen) */
        lin(t, c->index_dim, d, 0, 0, r);                                  /* indexer k */
        lin(t, c->index_heads, d, 0, 0, r);                                /* indexer w */
        t->idx_per_key += (2.0 * c->index_dim + 2.0) * c->index_heads;
        if (l < c->first_dense) {
            lin(t, c->ffn_dim, d, 1, 1, r);
            lin(t, c->ffn_dim, d, 1, 1, r);
            lin(t, d, c->ffn_dim, 1, 1, r);
        } else {
            lin(t, c->n_experts, d, 0, 1, r);                              /* router */
            for (int e = 0; e < c->experts_per_token; ++e) {               /* routed, no adapters */
                lin(t, c->expert_dim, d, 0, 1, r);
                lin(t, c->expert_dim, d, 0, 1, r);
                lin(t, d, c->expert_dim, 0, 1, r);
            }
            lin(t, c->expert_dim, d, 1, 1, r);                             /* shared expert */
            lin(t, c->expert_dim, d, 1, 1, r);
            lin(t, d, c->expert_dim, 1, 1, r);
        }
    }
}

static void counts(const ls_model_config *c, int lora_r, per_token *t) {
    *t = (per_token){0};
    if (c->family == LS_FAMILY_MLA) mla_counts(c, lora_r, t);
    else hybrid_counts(c, lora_r, t);
    lin(t, c->vocab, c->d_model, 0, 1, lora_r); /* lm_head: not an adapter target */
    t->vocab = c->vocab;
}

double LS_K(ls_plan_forward_flops)(const ls_model_config *c, int lora_r, size_t n, size_t pos0) {
    if (!c || n == 0) return 0.0;
    per_token t;
    counts(c, lora_r, &t);
    double nn = (double)n;
    double f = nn * (t.base + t.lora + t.conv + 7.0 * t.rec + 3.0 * t.vocab);
    if (c->family == LS_FAMILY_MLA) {
        f += 2.0 * t.mla_hd * visible_keys(n, pos0, (size_t)c->index_topk);
        f += t.idx_per_key * visible_keys(n, pos0, 0);
    } else {
        f += 4.0 * t.attn_hd * visible_keys(n, pos0, 0);
    }
    return f;
}

double LS_K(ls_plan_backward_flops)(const ls_model_config *c, int lora_r, size_t n, size_t pos0,
                                    int with_weight_grads) {
    if (!c || n == 0) return 0.0;
    per_token t;
    counts(c, lora_r, &t);
    double nn = (double)n;
    /* activation gradients: the linears (the frozen indexer's excluded: no
     * gradient reaches it), adapters, conv, recurrence, log-softmax */
    double idx_lin = 0.0;
    if (c->family == LS_FAMILY_MLA)
        idx_lin = (double)c->n_layers * 2.0 *
                  ((double)c->index_heads * c->index_dim * c->q_rank + (double)c->index_dim * c->d_model +
                   (double)c->index_heads * c->d_model);
    double f = nn * (t.base - idx_lin + t.lora + t.conv + 15.0 * t.rec + 2.0 * t.vocab);
    if (with_weight_grads) f += nn * (lora_r > 0 ? t.lora : t.base_tr + (c->family == LS_FAMILY_HYBRID ? t.conv : 0.0));
    if (c->family == LS_FAMILY_MLA) f += 4.0 * t.mla_hd * visible_keys(n, pos0, (size_t)c->index_topk);
    else f += 8.0 * t.attn_hd * visible_keys(n, pos0, 0);
    return f;
}
