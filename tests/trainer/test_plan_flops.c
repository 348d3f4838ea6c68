/* test_plan_flops.c - ls_plan_forward_flops / ls_plan_backward_flops
 * (trainer/plan/plan_flops.c) against
 *  1. hand counts for two tiny configs, written out term by term below;
 *  2. an independent count: twice the matmul weights of the parameter table
 *     (ls_config_param_counts, trainer/model/config.c, less the scalars that
 *     are no matmul: embedding, norms, conv, A_log, dt_bias, router_bias,
 *     the unused routed experts), plus the attention and recurrence terms,
 *     for the shipped configs and the original work's two models. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "trainer/families/mla/mla_config.h"
#include "trainer/families/hybrid/hybrid_config.h"
#include "trainer/model/config.h"
#include "trainer/plan/plan.h"

#define FWD LS_K(ls_plan_forward_flops)
#define BWD LS_K(ls_plan_backward_flops)

static void close_to(double got, double want, const char *what) {
    double rel = fabs(got - want) / fmax(1.0, fabs(want));
    cr_log_info("%s: got %.17g want %.17g rel %.3g", what, got, want, rel);
    cr_assert(rel <= 1e-12, "%s: got %.17g, want %.17g (rel err %.3g)", what, got, want, rel);
}

/* V=10 d=4, 4 layers (0-2 GDN, 3 attention), GDN Hk 1 Hv 2 dk 2 dv 3 K 4,
 * attention H 2 Hkv 1 hd 4, I 6. */
static ls_model_config tiny_hybrid(void) {
    ls_model_config c = {0};
    c.family = &ls_family_desc_hybrid;
    c.vocab = 10, c.d_model = 4, c.n_layers = 4, c.ffn_dim = 6, c.rms_eps = 1e-6, c.rope_theta = 10000;
    ls_hybrid_keys *k = ls_hybrid_keys_mut(&c);
    k->gdn_hk = 1, k->gdn_hv = 2, k->gdn_dk = 2, k->gdn_dv = 3, k->conv_kernel = 4;
    k->attn_heads = 2, k->attn_kv_heads = 1, k->head_dim = 4, k->rope_dim = 2;
    return c;
}

Test(plan_flops, hybrid_hand_count) {
    ls_model_config c = tiny_hybrid();
    char err[256];
    cr_assert_eq(ls_config_check(&c, err, sizeof err), LS_OK, "%s", err);
    /* GDN layer, one token: C = 2*1*2 + 2*3 = 10
     *   in_qkv 2*10*4 = 80, in_z 2*6*4 = 48, in_b 2*2*4 = 16, in_a 16, out 2*4*6 = 48  -> 208
     *   conv 2*C*K = 80, recurrence 7*dk*dv*Hv = 7*2*3*2 = 84                       -> 164
     *   MLP gate 2*6*4 = 48, up 48, down 48                                         -> 144
     *   = 516, three of them 1548
     * attention layer: q 2*(2*2*4)*4 = 128, k 2*4*4 = 32, v 32, o 2*4*8 = 64       -> 256
     *   attention 4*H*hd per visible key = 32 (one key), MLP 144                    -> 432
     * LM head 2*10*4 = 80, log-softmax 3*10 = 30
     * total 1548 + 432 + 80 + 30 = 2090 */
    close_to(FWD(&c, 0, 1, 0), 2090.0, "hybrid fwd n=1 pos0=0");
    /* three tokens at 5, 6, 7 see 6 + 7 + 8 = 21 keys: 3 * (2090 - 32) + 32 * 21 */
    close_to(FWD(&c, 0, 3, 5), 3.0 * 2058.0 + 32.0 * 21.0, "hybrid fwd n=3 pos0=5");
    /* LoRA r=1, 2*r*(in + out) per target: GDN in_qkv 2*(4+10) = 28, in_z 20, out 20 -> 68;
     * MLP 3 * 2*(4+6) = 60; attention q 2*(4+16) = 40, k 16, v 16, o 2*(8+4) = 24 -> 96;
     * 3*(68 + 60) + 96 + 60 = 540 */
    close_to(FWD(&c, 1, 1, 0), 2090.0 + 540.0, "hybrid fwd lora r=1");
    /* backward, one token, LoRA r=1 with weight gradients:
     * linears 624 + 576 + 256 + 80 = 1536, adapters 540, conv 240, recurrence 15*36 = 540,
     * log-softmax 2*10 = 20, attention 2 x 32 = 64, adapter weight grads 540 = 3480 */
    close_to(BWD(&c, 1, 1, 0, 1), 3480.0, "hybrid bwd lora r=1");
    close_to(BWD(&c, 1, 1, 0, 0), 3480.0 - 540.0, "hybrid bwd lora r=1 no weight grads");
    /* full mode: every linear's weight gradient (1536) and the conv's (240) */
    close_to(BWD(&c, 0, 1, 0, 1), 1536.0 + 240.0 + 540.0 + 20.0 + 64.0 + 1536.0 + 240.0, "hybrid bwd full");
    cr_assert_eq(FWD(&c, 0, 0, 7), 0.0);
}

/* V=10 d=4, 2 layers (0 dense, 1 MoE), H 2 r_q 3 r_kv 2 d_n 2 d_r 2 d_v 3,
 * indexer H_I 1 d_I 2 top-k 2, E 4 groups 1/1 k 2 I_e 3, dense I 5. */
static ls_model_config tiny_mla(void) {
    ls_model_config c = {0};
    c.family = &ls_family_desc_mla;
    c.vocab = 10, c.d_model = 4, c.n_layers = 2, c.ffn_dim = 5, c.rms_eps = 1e-6, c.rope_theta = 10000;
    ls_mla_keys *km = ls_mla_keys_mut(&c);
    km->first_dense = 1, km->heads = 2, km->q_rank = 3, km->kv_rank = 2, km->d_nope = 2, km->d_rope = 2, km->d_v = 3;
    km->index_heads = 1, km->index_dim = 2, km->index_topk = 2;
    km->n_experts = 4, km->n_group = 1, km->topk_group = 1, km->experts_per_token = 2, km->expert_dim = 3;
    km->routed_scale = 2.5;
    return c;
}

Test(plan_flops, mla_hand_count) {
    ls_model_config c = tiny_mla();
    char err[256];
    cr_assert_eq(ls_config_check(&c, err, sizeof err), LS_OK, "%s", err);
    /* per layer: q_a 2*3*4 = 24, q_b 2*(2*4)*3 = 48, kv_a 2*(2+2)*4 = 32,
     *   kv_b 2*(2*(2+3))*2 = 40, o 2*4*6 = 48                                 -> 192
     *   indexer q 2*2*3 = 12, k 2*2*4 = 16, w 2*1*4 = 8                       -> 36
     * layer 0 dense FFN 3 * 2*5*4 = 120; layer 1 router 2*4*4 = 32,
     *   2 routed experts 2 * 3 * 2*3*4 = 144, shared 72                       -> 248
     * LM head 80, log-softmax 30: linears 2*(192+36) + 120 + 248 + 80 = 904, + 30 = 934
     * per attended key: 2*H*(d_qk + d_v) = 2*2*7 = 28 per layer -> 56;
     * per visible key, the indexer (2*d_I + 2)*H_I = 6 per layer -> 12 */
    close_to(FWD(&c, 0, 1, 0), 934.0 + 56.0 + 12.0, "mla fwd n=1");
    /* four tokens at 0..3: attended keys min(2, p+1) = 1+2+2+2 = 7, visible 1+2+3+4 = 10 */
    close_to(FWD(&c, 0, 4, 0), 4.0 * 934.0 + 56.0 * 7.0 + 12.0 * 10.0, "mla fwd n=4 top-k cap");
    /* tokens at 10, 11: attended 2 + 2, visible 11 + 12 */
    close_to(FWD(&c, 0, 2, 10), 2.0 * 934.0 + 56.0 * 4.0 + 12.0 * 23.0, "mla fwd n=2 pos0=10");
    /* LoRA r=1: q_a 2*(4+3) = 14, q_b 2*(3+8) = 22, kv_a 2*(4+4) = 16, kv_b 2*(2+10) = 24,
     * o 2*(6+4) = 20 -> 96 per layer; dense FFN 3 * 2*(4+5) = 54; shared 3 * 2*(4+3) = 42:
     * 192 + 54 + 42 = 288 (routed experts carry no adapters) */
    close_to(FWD(&c, 1, 1, 0), 1002.0 + 288.0, "mla fwd lora r=1");
    /* backward full mode, one token: linears less the frozen indexer 904 - 72 = 832,
     * log-softmax 20, attention 2 x 28 x 2 = 112, weight grads 832 = 1796 */
    close_to(BWD(&c, 0, 1, 0, 1), 1796.0, "mla bwd full");
    close_to(BWD(&c, 1, 1, 0, 1), 832.0 + 288.0 + 20.0 + 112.0 + 288.0, "mla bwd lora r=1");
}

/* The independent count: 2 x the matmul weights of the parameter table. */
static double matmul_weights(const ls_model_config *c) {
    ls_param_counts pc;
    char err[256];
    cr_assert_eq(ls_config_param_counts(c, NULL, &pc, err, sizeof err), LS_OK, "%s", err);
    double w = (double)pc.base;
    double d = c->d_model, L = c->n_layers;
    w -= (double)c->vocab * d;   /* embedding: a lookup */
    w -= (2.0 * L + 1.0) * d;    /* norm1, norm2, final norm */
    if (c->family == &ls_family_desc_hybrid) {
        double C = 2.0 * ls_hybrid_keys_of(c)->gdn_hk * ls_hybrid_keys_of(c)->gdn_dk + (double)ls_hybrid_keys_of(c)->gdn_hv * ls_hybrid_keys_of(c)->gdn_dv;
        for (int l = 0; l < c->n_layers; ++l) {
            if (ls_hybrid_layer_is_attn(l)) w -= 2.0 * ls_hybrid_keys_of(c)->head_dim; /* q_norm, k_norm */
            else w -= C * ls_hybrid_keys_of(c)->conv_kernel + 2.0 * ls_hybrid_keys_of(c)->gdn_hv + ls_hybrid_keys_of(c)->gdn_dv; /* conv, A_log, dt_bias, norm */
        }
    } else {
        w -= L * ((double)ls_mla_keys_of(c)->q_rank + ls_mla_keys_of(c)->kv_rank + 2.0 * ls_mla_keys_of(c)->index_dim); /* q_a_norm, kv_a_norm, k_norm w+b */
        double moe = L - ls_mla_keys_of(c)->first_dense;
        w -= moe * ls_mla_keys_of(c)->n_experts;                                           /* router_bias */
        w -= moe * (double)(ls_mla_keys_of(c)->n_experts - ls_mla_keys_of(c)->experts_per_token) * 3.0 * ls_mla_keys_of(c)->expert_dim * d; /* unused experts */
    }
    return 2.0 * w;
}

static double seq_terms(const ls_model_config *c) { /* n = 1, pos0 = 0: one visible key */
    double f = 3.0 * c->vocab;
    if (c->family == &ls_family_desc_hybrid) {
        double C = 2.0 * ls_hybrid_keys_of(c)->gdn_hk * ls_hybrid_keys_of(c)->gdn_dk + (double)ls_hybrid_keys_of(c)->gdn_hv * ls_hybrid_keys_of(c)->gdn_dv;
        for (int l = 0; l < c->n_layers; ++l)
            if (ls_hybrid_layer_is_attn(l)) f += 4.0 * ls_hybrid_keys_of(c)->attn_heads * ls_hybrid_keys_of(c)->head_dim;
            else f += 2.0 * C * ls_hybrid_keys_of(c)->conv_kernel + 7.0 * ls_hybrid_keys_of(c)->gdn_hv * ls_hybrid_keys_of(c)->gdn_dk * ls_hybrid_keys_of(c)->gdn_dv;
    } else {
        f += c->n_layers * (2.0 * ls_mla_keys_of(c)->heads * ((double)ls_mla_keys_of(c)->d_nope + ls_mla_keys_of(c)->d_rope + ls_mla_keys_of(c)->d_v) +
                            (2.0 * ls_mla_keys_of(c)->index_dim + 2.0) * ls_mla_keys_of(c)->index_heads);
    }
    return f;
}

static void check_against_table(const char *path) {
    ls_model_config c;
    char err[512];
    cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
    double want = matmul_weights(&c) + seq_terms(&c);
    close_to(FWD(&c, 0, 1, 0), want, path);
    /* adapters: 2 x the adapter scalars of the table (lora_experts off) */
    ls_objective o;
    ls_objective_defaults(&o);
    o.lora_r = 8;
    ls_param_counts pc;
    cr_assert_eq(ls_config_param_counts(&c, &o, &pc, err, sizeof err), LS_OK, "%s", err);
    close_to(FWD(&c, 8, 1, 0) - FWD(&c, 0, 1, 0), 2.0 * (double)pc.adapters, "adapters");
    /* forward of n tokens at pos0 = n x per token + the key terms: two halves add up */
    double whole = FWD(&c, 0, 64, 100), a = FWD(&c, 0, 20, 100), b = FWD(&c, 0, 44, 120);
    close_to(a + b, whole, "split at 20");
    double bw = BWD(&c, 0, 64, 100, 1), ba = BWD(&c, 0, 20, 100, 1), bb = BWD(&c, 0, 44, 120, 1);
    close_to(ba + bb, bw, "backward split at 20");
}

Test(plan_flops, against_parameter_table) {
    check_against_table(LS_SOURCE_DIR "/configs/hybrid-tiny.json");
    check_against_table(LS_SOURCE_DIR "/configs/hybrid-small.json");
    check_against_table(LS_SOURCE_DIR "/configs/mla-tiny.json");
    check_against_table(LS_SOURCE_DIR "/configs/mla-small.json");
    check_against_table(LS_SOURCE_DIR "/configs/original/qwen3.6-27b.json");
    check_against_table(LS_SOURCE_DIR "/configs/original/glm-5.2.json");
}

/* A long prompt's attention grows quadratically: 2,088,960 positions of the
 * Qwen model, attention 4*H*hd*16 layers * P(P+1)/2 dominates nothing else. */
Test(plan_flops, long_prompt_quadratic) {
    ls_model_config c;
    char err[512];
    cr_assert_eq(ls_config_load(&c, LS_SOURCE_DIR "/configs/original/qwen3.6-27b.json", err, sizeof err), LS_OK, "%s", err);
    double P = 2088960.0;
    double lin = FWD(&c, 0, 1, 0) - 16.0 * 4.0 * ls_hybrid_keys_of(&c)->attn_heads * ls_hybrid_keys_of(&c)->head_dim; /* per token without attention */
    double want = P * lin + 16.0 * 4.0 * ls_hybrid_keys_of(&c)->attn_heads * ls_hybrid_keys_of(&c)->head_dim * P * (P + 1.0) / 2.0;
    close_to(FWD(&c, 0, (size_t)P, 0), want, "qwen P=2088960");
}
