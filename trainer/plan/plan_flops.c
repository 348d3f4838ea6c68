/* plan_flops.c - floating-point operations of the model's math (docs/model.md),
 * counted from the config alone (plan.h: ls_plan_forward_flops,
 * ls_plan_backward_flops).  Each family states its layers' terms
 * (ls_family_desc.flop_terms, ls_flop_terms: family_desc.h); this file adds
 * the LM head and applies the factors.  The counting rules, which
 * docs/plan.md states too (the families' terms follow them):
 *
 *  - a linear [out, in] costs 2·out·in per token; its LoRA adapter (lora_r > 0,
 *    the family's targets, docs/model.md §3; routed experts excluded, their
 *    adapters are an option) 2·r·(in + out);
 *  - attention: 4·hd per (query head, visible key) forward (scores, then P·V);
 *    dense attention sees every earlier position, top-k attention min(k, p + 1)
 *    (attn_hd, sparse_hd with key_cap);
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
 * with lora_r > 0, else every trained weight: a family's frozen ones, such
 * as the DSA indexer and router_bias, excluded); attention and the top-k attention 2x their forward (dP, dQ, dK,
 * dV); the GDN recurrence 15·dk·dv per value head and token (docs/model.md
 * §1.1's reverse sweep); the conv 2·C·K (+ 2·C·K for its weight); the log-softmax
 * 2·V; linears no gradient reaches (no_grad_lin: the indexer) nothing. */
#include "trainer/plan/plan.h"

#include "trainer/model/family_desc.h"

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

/* The model's per-token terms: the family's layers (its flop_terms hook),
 * then the LM head (not an adapter target) and the log-softmax. */
static void counts(const ls_model_config *c, int lora_r, ls_flop_terms *t) {
    *t = (ls_flop_terms){0};
    c->family->flop_terms(c, lora_r, t);
    ls_flop_lin(t, c->vocab, c->d_model, 0, 1, lora_r); /* lm_head */
}

double LS_K(ls_plan_forward_flops)(const ls_model_config *c, int lora_r, size_t n, size_t pos0) {
    if (!c || n == 0) return 0.0;
    ls_flop_terms t;
    counts(c, lora_r, &t);
    double nn = (double)n, V = c->vocab;
    double f = nn * (t.base + t.lora + t.conv + 7.0 * t.rec + 3.0 * V);
    if (t.sparse_hd > 0) f += 2.0 * t.sparse_hd * visible_keys(n, pos0, t.key_cap);
    if (t.fwd_per_key > 0) f += t.fwd_per_key * visible_keys(n, pos0, 0);
    if (t.attn_hd > 0) f += 4.0 * t.attn_hd * visible_keys(n, pos0, 0);
    return f;
}

double LS_K(ls_plan_backward_flops)(const ls_model_config *c, int lora_r, size_t n, size_t pos0,
                                    int with_weight_grads) {
    if (!c || n == 0) return 0.0;
    ls_flop_terms t;
    counts(c, lora_r, &t);
    double nn = (double)n, V = c->vocab;
    /* activation gradients: the linears (those no gradient reaches excluded), adapters, conv, recurrence,
     * log-softmax */
    double f = nn * (t.base - t.no_grad_lin + t.lora + t.conv + 15.0 * t.rec + 2.0 * V);
    if (with_weight_grads) f += nn * (lora_r > 0 ? t.lora : t.base_tr + t.conv);
    if (t.sparse_hd > 0) f += 4.0 * t.sparse_hd * visible_keys(n, pos0, t.key_cap);
    if (t.attn_hd > 0) f += 8.0 * t.attn_hd * visible_keys(n, pos0, 0);
    return f;
}
