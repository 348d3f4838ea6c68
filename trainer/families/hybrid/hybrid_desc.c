/* hybrid_desc.c - the hybrid family's descriptor (family_desc.h): its config
 * keys and their consistency, parameter counts, layer kinds, the plan's FLOP
 * terms and the Hugging Face mapping (Qwen3.5 / Qwen3-Next).  dtype-independent. */
#include "trainer/families/hybrid/hybrid_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "trainer/model/hf_json.h"

#define N_OF LS_HF_N_OF
#define FAIL LS_HF_FAIL

/* ---- keys ------------------------------------------------------------------------ */
#define IK(f, lo, hi, hn, hfk, doc) \
    { #f, LS_FKEY_INT, offsetof(ls_hybrid_keys, f), lo, hi, hn, 0, 0, hfk, doc }
const ls_family_key ls_hybrid_key_table[LS_HYBRID_ATTN_KEY0 + LS_HYBRID_ATTN_KEYS] = {
    IK(gdn_hk, 1, 4096, "4096", "linear_num_key_heads", "GDN key heads"),
    IK(gdn_hv, 1, 4096, "4096", "linear_num_value_heads", "GDN value heads (a multiple of gdn_hk)"),
    IK(gdn_dk, 1, 1 << 16, "2^16", "linear_key_head_dim", "GDN key head dim"),
    IK(gdn_dv, 1, 1 << 16, "2^16", "linear_value_head_dim", "GDN value head dim"),
    IK(conv_kernel, 1, 256, "256", "linear_conv_kernel_dim", "GDN depthwise conv width"),
    IK(attn_heads, 1, 4096, "4096", "num_attention_heads", "attention query heads"),
    IK(attn_kv_heads, 1, 4096, "4096", "num_key_value_heads", "attention KV heads (divides attn_heads)"),
    IK(head_dim, 2, 1 << 16, "2^16", "head_dim", "attention head dim"),
    IK(rope_dim, 0, 1 << 16, "2^16", "partial_rotary_factor", "rotary dims of a head (even, <= head_dim)")};
#undef IK
_Static_assert(offsetof(ls_hybrid_keys, attn_heads) == LS_HYBRID_ATTN_KEY0 * sizeof(int),
               "the attention keys follow the GDN keys in ls_hybrid_keys as in the table");

#define REQUIRE LS_HF_REQUIRE

ls_status ls_hybrid_check_attn(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    const ls_hybrid_keys *k = ls_hybrid_keys_of(c);
    REQUIRE(k->attn_heads % k->attn_kv_heads == 0, "key 'attn_heads': must be a positive multiple of 'attn_kv_heads'");
    REQUIRE(k->rope_dim % 2 == 0 && k->rope_dim <= k->head_dim, "key 'rope_dim': must be even and <= 'head_dim'");
    return LS_OK;
}

static ls_status check(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    const ls_hybrid_keys *k = ls_hybrid_keys_of(c);
    REQUIRE(k->gdn_hv % k->gdn_hk == 0, "key 'gdn_hv': must be a positive multiple of 'gdn_hk'");
    return ls_hybrid_check_attn(c, where, err, err_len);
}

/* ---- parameter counts -------------------------------------------------------------- */
/* The attention layers among c's n_layers, as c's layer_kind says.  Only the first LS_HYBRID_KIND_SCAN
 * layers' kinds are read: a config within n_layers' limit (4096) is counted exactly; one above it is only
 * ever described in its refusal (the parameters it implies), and there the count is extrapolated from those
 * layers, so that a hostile n_layers (up to 2^31) costs no more than a valid one. */
#define LS_HYBRID_KIND_SCAN 4096
static size_t hybrid_attn_layers(const ls_model_config *c) {
    size_t L = c->n_layers > 0 ? (size_t)c->n_layers : 0, scan = L < LS_HYBRID_KIND_SCAN ? L : LS_HYBRID_KIND_SCAN;
    size_t n = 0;
    for (size_t l = 0; l < scan; l++) n += (size_t)ls_hybrid_cfg_is_attn(c, (int)l);
    return scan == L ? n : (size_t)((double)n / (double)scan * (double)L);
}

/* Base and adapter scalars of the hybrid table, in params.c's build order
 * (docs/model.md §5); r = 0 when there are no adapters.  Layer i is attention
 * as c's layer_kind says (the hybrid: iff (i+1) % 4 == 0, so L/4 of them are;
 * dense: every one). */
void ls_hybrid_counts(const ls_model_config *c, size_t r, int lora_experts, ls_count *base, ls_count *adapt,
                      size_t *frozen) {
    (void)lora_experts;
    (void)frozen;
    const ls_hybrid_keys *k = ls_hybrid_keys_of(c);
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, I = (size_t)c->ffn_dim, L = (size_t)c->n_layers;
    size_t n_attn = hybrid_attn_layers(c);
    size_t n_gdn = L - n_attn;
    size_t H = (size_t)k->attn_heads, Hkv = (size_t)k->attn_kv_heads, hd = (size_t)k->head_dim;
    size_t Hk = (size_t)k->gdn_hk, Hv = (size_t)k->gdn_hv, dk = (size_t)k->gdn_dk, dv = (size_t)k->gdn_dv;
    size_t K = (size_t)k->conv_kernel;
    size_t C = ls_sat_add(ls_sat_mul3(2, Hk, dk), ls_sat_mul(Hv, dv));
    ls_count_term(base, V, d, 2, "'vocab' x 'd_model' (embed, lm_head)");
    ls_count_term(base, d, 1, 1, "'d_model' (final norm)");
    ls_count_term(base, d, 2, L, "'d_model' x 'n_layers' (norms)");
    ls_count_lin(base, adapt, I, d, 2 * L, r, "'ffn_dim' x 'd_model' x 'n_layers' (MLP)"); /* gate, up */
    ls_count_lin(base, adapt, d, I, L, r, "'ffn_dim' x 'd_model' x 'n_layers' (MLP)");     /* down */
    ls_count_lin(base, adapt, ls_sat_mul3(2, H, hd), d, n_attn, r,
        "'attn_heads' x 'head_dim' x 'd_model' x 'n_layers' (attention q)");
    ls_count_lin(base, adapt, ls_sat_mul(Hkv, hd), d, 2 * n_attn, r,
        "'attn_kv_heads' x 'head_dim' x 'd_model' x 'n_layers' (attention k, v)");
    ls_count_lin(base, adapt, d, ls_sat_mul(H, hd), n_attn, r, "'attn_heads' x 'head_dim' x 'd_model' x 'n_layers' (attention o)");
    ls_count_term(base, hd, 2, n_attn, "'head_dim' x 'n_layers' (q/k norms)");
    ls_count_lin(base, adapt, C, d, n_gdn, r, "'gdn_hk'/'gdn_hv' x 'gdn_dk'/'gdn_dv' x 'd_model' x 'n_layers' (GDN in_qkv)");
    ls_count_lin(base, adapt, ls_sat_mul(Hv, dv), d, n_gdn, r, "'gdn_hv' x 'gdn_dv' x 'd_model' x 'n_layers' (GDN in_z)");
    ls_count_lin(base, adapt, Hv, d, 2 * n_gdn, 0, "'gdn_hv' x 'd_model' x 'n_layers' (GDN in_b, in_a)");
    ls_count_term(base, C, K, n_gdn, "'conv_kernel' x the GDN channels x 'n_layers' (conv)");
    ls_count_term(base, ls_sat_add(ls_sat_mul(2, Hv), dv), 1, n_gdn, "'gdn_hv' x 'n_layers' (A_log, dt_bias, norm)");
    ls_count_lin(base, adapt, d, ls_sat_mul(Hv, dv), n_gdn, r, "'gdn_hv' x 'gdn_dv' x 'd_model' x 'n_layers' (GDN out)");
}


/* ---- layer kinds ------------------------------------------------------------------- */
static const char *const LAYER_KINDS[] = {"gdn", "attn", NULL};

static const char *layer_kind(const ls_model_config *c, int layer) {
    (void)c;
    return ls_hybrid_layer_is_attn(layer) ? "attn" : "gdn";
}

/* ---- FLOPs ------------------------------------------------------------------------- */
void ls_hybrid_flop_terms(const ls_model_config *c, int r, ls_flop_terms *t) {
    const ls_hybrid_keys *k = ls_hybrid_keys_of(c);
    double d = c->d_model, C = 2.0 * k->gdn_hk * k->gdn_dk + (double)k->gdn_hv * k->gdn_dv;
    double Hvdv = (double)k->gdn_hv * k->gdn_dv, H = k->attn_heads, hd = k->head_dim;
    for (int l = 0; l < c->n_layers; ++l) {
        if (ls_hybrid_cfg_is_attn(c, l)) {
            ls_flop_lin(t, H * 2.0 * hd, d, 1, 1, r);                     /* q (query and gate) */
            ls_flop_lin(t, (double)k->attn_kv_heads * hd, d, 1, 1, r);    /* k */
            ls_flop_lin(t, (double)k->attn_kv_heads * hd, d, 1, 1, r);    /* v */
            ls_flop_lin(t, d, H * hd, 1, 1, r);                           /* o */
            t->attn_hd += H * hd;
        } else {
            ls_flop_lin(t, C, d, 1, 1, r);                                /* in_qkv */
            ls_flop_lin(t, Hvdv, d, 1, 1, r);                             /* in_z */
            ls_flop_lin(t, k->gdn_hv, d, 0, 1, r);                        /* in_b */
            ls_flop_lin(t, k->gdn_hv, d, 0, 1, r);                        /* in_a */
            ls_flop_lin(t, d, Hvdv, 1, 1, r);                             /* out */
            t->conv += 2.0 * C * k->conv_kernel;
            t->rec += (double)k->gdn_hv * k->gdn_dk * k->gdn_dv;
        }
        ls_flop_lin(t, c->ffn_dim, d, 1, 1, r);                           /* mlp gate */
        ls_flop_lin(t, c->ffn_dim, d, 1, 1, r);                           /* mlp up */
        ls_flop_lin(t, d, c->ffn_dim, 1, 1, r);                           /* mlp down */
    }
}


/* ---- Hugging Face: Qwen3.5 / Qwen3-Next -------------------------------------------- */
static const char *const HF_TYPES[] = {"qwen3_next", "qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe",
                                       NULL};
static const char *const HF_OUTER[][2] = {{"qwen3_5", "qwen3_5_text"}, {"qwen3_5_moe", "qwen3_5_moe_text"}, {NULL, NULL}};
static const char *const HF_KEYS[] = {
    "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "rms_norm_eps",
    "rope_theta", "rope_parameters", "rope_scaling", "partial_rotary_factor", "num_attention_heads",
    "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "layer_types", "full_attention_interval",
    "attn_output_gate", "hidden_act", "attention_bias", "tie_word_embeddings", "num_experts",
    "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step",
    "mlp_only_layers", "norm_topk_prob", "mtp_num_hidden_layers", NULL};


static ls_status hf_map(ls_model_config *c, ls_family_hf_facts *m, const cJSON *o, int moe_as_dense,
                        const char *where, char *err, size_t err_len) {
    ls_status st;
    long v[16];
    struct { const char *k; long lo, hi, dflt; } K[] = {
        {"vocab_size", 2, 1L << 30, -1}, {"hidden_size", 1, 1L << 30, -1}, {"num_hidden_layers", 1, 1L << 20, -1},
        {"intermediate_size", 1, 1L << 30, -1}, {"num_attention_heads", 1, 1L << 20, -1},
        {"num_key_value_heads", 1, 1L << 20, -1}, {"head_dim", 1, 1L << 20, -1},
        {"linear_num_key_heads", 1, 1L << 20, -1}, {"linear_num_value_heads", 1, 1L << 20, -1},
        {"linear_key_head_dim", 1, 1L << 20, -1}, {"linear_value_head_dim", 1, 1L << 20, -1},
        {"linear_conv_kernel_dim", 1, 1L << 20, -1}, {"full_attention_interval", 1, 1L << 20, 4},
        {"num_experts", 0, 1L << 20, 0}, {"mtp_num_hidden_layers", 0, 1L << 20, 0},
        {"decoder_sparse_step", 1, 1L << 20, 1}};
    for (size_t i = 0; i < N_OF(K); ++i)
        if ((st = ls_hf_get_int(o, K[i].k, K[i].lo, K[i].hi, K[i].dflt, &v[i], where, err, err_len)) != LS_OK) return st;
    ls_config_init(c, &ls_family_desc_hybrid);
    ls_hybrid_keys *k = ls_hybrid_keys_mut(c);
    c->vocab = (int)v[0];
    c->d_model = (int)v[1];
    c->n_layers = (int)v[2];
    c->ffn_dim = (int)v[3];
    k->attn_heads = (int)v[4];
    k->attn_kv_heads = (int)v[5];
    k->head_dim = (int)v[6];
    k->gdn_hk = (int)v[7];
    k->gdn_hv = (int)v[8];
    k->gdn_dk = (int)v[9];
    k->gdn_dv = (int)v[10];
    k->conv_kernel = (int)v[11];
    m->mtp_layers = (int)v[14];
    if ((st = ls_hf_get_real(o, "rms_norm_eps", 0, 1, -1, &c->rms_eps, where, err, err_len)) != LS_OK) return st;
    double partial = 1.0;
    if ((st = ls_hf_get_rope(o, "hybrid", 1, &c->rope_theta, &partial, where, err, err_len)) != LS_OK) return st;
    double rd = partial * k->head_dim;
    if (rd != floor(rd)) FAIL(LS_ERR_FORMAT, "key 'partial_rotary_factor': %g x head_dim %d is not an integer", partial, k->head_dim);
    k->rope_dim = (int)rd;
    /* the layer pattern: full attention iff (i + 1) % 4 == 0 */
    if (v[12] != 4) FAIL(LS_ERR_UNSUPPORTED, "key 'full_attention_interval': %ld (the hybrid family has attention on every 4th layer)", v[12]);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(o, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            FAIL(LS_ERR_FORMAT, "key 'layer_types': must be an array of num_hidden_layers (%d) strings", c->n_layers);
        int i = 0;
        for (const cJSON *e = lt->child; e; e = e->next, ++i) {
            if (!cJSON_IsString(e) || !e->valuestring)
                FAIL(LS_ERR_FORMAT, "key 'layer_types': entry %d is not a string", i);
            const char *want = (i + 1) % 4 == 0 ? "full_attention" : "linear_attention";
            if (strcmp(e->valuestring, want) != 0)
                FAIL(LS_ERR_UNSUPPORTED, "key 'layer_types': entry %d is \"%.40s\", the hybrid family has \"%s\" "
                     "there (attention on every 4th layer only)", i, e->valuestring, want);
        }
    }
    if ((st = ls_hf_want_bool(o, "attn_output_gate", 1, "the family's attention is gated", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_bool(o, "attention_bias", 0, "the family's linears have no bias", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_bool(o, "tie_word_embeddings", 0, "the family's lm_head is untied", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_str(o, "hidden_act", "silu", "the MLP is SwiGLU", where, err, err_len)) != LS_OK)
        return st;
    const cJSON *mlp_only = cJSON_GetObjectItemCaseSensitive(o, "mlp_only_layers");
    if (mlp_only && !cJSON_IsNull(mlp_only) && (!cJSON_IsArray(mlp_only) || cJSON_GetArraySize(mlp_only) != 0))
        FAIL(LS_ERR_UNSUPPORTED, "key 'mlp_only_layers': must be empty (every layer has its mixer)");
    if (v[13] > 0) {
        if (!moe_as_dense)
            FAIL(LS_ERR_UNSUPPORTED, "key 'num_experts': %ld routed experts: the hybrid family's FFN is dense "
                 "(plan it as a dense FFN of the active width with --moe-as-dense)", v[13]);
        long k, ie, is;
        if (v[15] != 1) FAIL(LS_ERR_UNSUPPORTED, "key 'decoder_sparse_step': must be 1");
        if ((st = ls_hf_get_int(o, "num_experts_per_tok", 1, v[13], -1, &k, where, err, err_len)) != LS_OK ||
            (st = ls_hf_get_int(o, "moe_intermediate_size", 1, 1L << 24, -1, &ie, where, err, err_len)) != LS_OK ||
            (st = ls_hf_get_int(o, "shared_expert_intermediate_size", 0, 1L << 24, 0, &is, where, err, err_len)) != LS_OK)
            return st;
        long w = k * ie + is;
        if (w > 1L << 30) FAIL(LS_ERR_FORMAT, "key 'moe_intermediate_size': active width %ld too large", w);
        c->ffn_dim = (int)w;
        m->moe_as_dense = 1;
    }
    return LS_OK;
}


static const char *const CP_FAULTS[] = {"cp-local-attention", "cp-stale-start", NULL};

const ls_family_desc ls_family_desc_hybrid = {
    .name = "hybrid",
    .summary = "Gated DeltaNet and gated attention (every fourth layer), SwiGLU MLP (docs/model.md §1)",
    .keys = ls_hybrid_key_table,
    .n_keys = N_OF(ls_hybrid_key_table),
    .keys_bytes = sizeof(ls_hybrid_keys),
    .check = check,
    .counts = ls_hybrid_counts,
    .routed_experts = NULL,
    .ep_others = NULL,
    .layer_kinds = LAYER_KINDS,
    .layer_kind = layer_kind,
    .flop_terms = ls_hybrid_flop_terms,
    .hf_model_types = HF_TYPES,
    .hf_keys = HF_KEYS,
    .hf_outer = HF_OUTER,
    .hf_map = hf_map,
    .cp_faults = CP_FAULTS,
    .tiny_config = "configs/hybrid-tiny.json",
    .reference = "tests/reference/hybrid_ref.py",
    .profile = "profiles/hybrid.json",
    .parity = "trainer/families/hybrid/parity.json",
};
