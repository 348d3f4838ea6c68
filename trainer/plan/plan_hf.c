/* plan_hf.c - a Hugging Face config.json to a model config and the plan's
 * facts (plan_hf.h; the mapping table is docs/plan.md's). */
#include "trainer/plan/plan_hf.h"

#include "receipts/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof *(a))
#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        int n_ = snprintf(err, err_len, "%s: ", where);                                           \
        if (n_ >= 0 && (size_t)n_ < err_len) snprintf(err + n_, err_len - (size_t)n_, __VA_ARGS__); \
        return code;                                                                               \
    } while (0)

/* ---- keys ------------------------------------------------------------------------ */

/* Keys that do not change the planned math: identity, token ids, dtypes,
 * serving and cache hints, initialisation, training-only losses. */
static const char *const IGNORED[] = {
    "architectures", "transformers_version", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "max_position_embeddings", "use_cache", "attention_dropout",
    "auto_map", "quantization_config", "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha",
    "seq_aux", "mamba_ssm_dtype", "use_sliding_window", "sliding_window", "max_window_layers",
    "mtp_use_dedicated_embeddings", "index_share_for_mtp_iteration", "moe_router_dtype", "ep_size",
    "pretraining_tp", "rope_interleave", "indexer_rope_interleave"};
/* Top-level keys of a multimodal file whose model is in text_config. */
static const char *const IGNORED_OUTER[] = {
    "architectures", "transformers_version", "image_token_id", "video_token_id", "vision_start_token_id",
    "vision_end_token_id", "vision_config", "tie_word_embeddings", "language_model_only", "torch_dtype",
    "dtype", "model_type", "text_config"};

static const char *const HYBRID_KEYS[] = {
    "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "rms_norm_eps",
    "rope_theta", "rope_parameters", "rope_scaling", "partial_rotary_factor", "num_attention_heads",
    "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "layer_types", "full_attention_interval",
    "attn_output_gate", "hidden_act", "attention_bias", "tie_word_embeddings", "num_experts",
    "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step",
    "mlp_only_layers", "norm_topk_prob", "mtp_num_hidden_layers"};

static const char *const MLA_KEYS[] = {
    "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "rms_norm_eps",
    "rope_theta", "rope_parameters", "rope_scaling", "num_attention_heads", "num_key_value_heads", "head_dim",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim", "v_head_dim",
    "index_n_heads", "index_head_dim", "index_topk", "index_topk_freq", "index_skip_topk_offset",
    "index_topk_pattern", "indexer_types", "n_routed_experts", "num_experts_per_tok", "n_group", "topk_group",
    "first_k_dense_replace", "moe_intermediate_size", "routed_scaling_factor", "n_shared_experts",
    "moe_layer_freq", "mlp_layer_types", "layer_types", "num_nextn_predict_layers", "scoring_func",
    "topk_method", "norm_topk_prob", "hidden_act", "attention_bias", "tie_word_embeddings"};

static int in_list(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (strcmp(key, list[i]) == 0) return 1;
    return 0;
}

/* Every key of obj known (mapped, required or ignored); the first that is not, by name. */
static ls_status check_keys(const cJSON *obj, const char *const *known, size_t n_known, const char *const *ign,
                            size_t n_ign, const char *where, char *err, size_t err_len) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (!it->string) FAIL(LS_ERR_FORMAT, "an object member without a name");
        if (!in_list(it->string, known, n_known) && !in_list(it->string, ign, n_ign))
            FAIL(LS_ERR_FORMAT, "key '%s': unknown to the planner's mapping (docs/plan.md); refused so that "
                                "an architecture change is not silently ignored", it->string);
    }
    return LS_OK;
}

/* An integer key in [lo, hi]; absent: *out = dflt when dflt >= lo, else an error. */
static ls_status get_int(const cJSON *obj, const char *key, long lo, long hi, long dflt, long *out,
                         const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) {
        if (dflt >= lo) {
            *out = dflt;
            return LS_OK;
        }
        FAIL(LS_ERR_FORMAT, "key '%s': missing", key);
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < (double)lo || it->valuedouble > (double)hi)
        FAIL(LS_ERR_FORMAT, "key '%s': must be an integer in [%ld, %ld]", key, lo, hi);
    *out = (long)it->valuedouble;
    return LS_OK;
}

/* A number key in (lo, hi]; absent: *out = dflt when dflt > lo, else an error. */
static ls_status get_real(const cJSON *obj, const char *key, double lo, double hi, double dflt, double *out,
                          const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) {
        if (dflt > lo) {
            *out = dflt;
            return LS_OK;
        }
        FAIL(LS_ERR_FORMAT, "key '%s': missing", key);
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !(it->valuedouble > lo) || it->valuedouble > hi)
        FAIL(LS_ERR_FORMAT, "key '%s': must be a number in (%g, %g]", key, lo, hi);
    *out = it->valuedouble;
    return LS_OK;
}

/* A boolean key that must be absent or hold `want` (the family implements only that). */
static ls_status want_bool(const cJSON *obj, const char *key, int want, const char *why, const char *where,
                           char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return LS_OK;
    if (!cJSON_IsBool(it)) FAIL(LS_ERR_FORMAT, "key '%s': must be true or false", key);
    if (cJSON_IsTrue(it) != want) FAIL(LS_ERR_UNSUPPORTED, "key '%s': must be %s (%s)", key, want ? "true" : "false", why);
    return LS_OK;
}

/* A string key that must be absent or equal `want`. */
static ls_status want_str(const cJSON *obj, const char *key, const char *want, const char *why,
                          const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return LS_OK;
    if (!cJSON_IsString(it) || !it->valuestring) FAIL(LS_ERR_FORMAT, "key '%s': must be a string", key);
    if (strcmp(it->valuestring, want) != 0)
        FAIL(LS_ERR_UNSUPPORTED, "key '%s': \"%.40s\" is not supported (must be \"%s\": %s)", key, it->valuestring,
             want, why);
    return LS_OK;
}

/* rope_theta and partial_rotary_factor: at the top level, in rope_parameters
 * (newer files) or both (then they must agree); rope_scaling / rope_type
 * other than default are refused for the hybrid family, ignored with a
 * note for mla (YaRN does not change the planned shapes). */
static ls_status get_rope(const cJSON *obj, int hybrid, double *theta, double *partial, const char *where,
                          char *err, size_t err_len) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(obj, "rope_parameters");
    ls_status st;
    double t_top = 0, t_rp = 0, p_top = 0, p_rp = 0;
    if ((st = get_real(obj, "rope_theta", 0, 1e12, -1, &t_top, where, err, err_len)) != LS_OK &&
        cJSON_GetObjectItemCaseSensitive(obj, "rope_theta"))
        return st;
    if (partial && (st = get_real(obj, "partial_rotary_factor", 0, 1, -1, &p_top, where, err, err_len)) != LS_OK &&
        cJSON_GetObjectItemCaseSensitive(obj, "partial_rotary_factor"))
        return st;
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) FAIL(LS_ERR_FORMAT, "key 'rope_parameters': must be an object");
        static const char *const RP[] = {"rope_theta", "partial_rotary_factor", "rope_type", "mrope_interleaved",
                                         "mrope_section", "factor", "beta_fast", "beta_slow", "mscale",
                                         "mscale_all_dim", "original_max_position_embeddings"};
        char w2[256];
        snprintf(w2, sizeof w2, "%s: rope_parameters", where);
        if ((st = check_keys(rp, RP, N_OF(RP), NULL, 0, w2, err, err_len)) != LS_OK) return st;
        if (cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") &&
            (st = get_real(rp, "rope_theta", 0, 1e12, -1, &t_rp, w2, err, err_len)) != LS_OK)
            return st;
        if (partial && cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") &&
            (st = get_real(rp, "partial_rotary_factor", 0, 1, -1, &p_rp, w2, err, err_len)) != LS_OK)
            return st;
        if (hybrid && (st = want_str(rp, "rope_type", "default", "the hybrid family's RoPE is plain", w2, err,
                                     err_len)) != LS_OK)
            return st;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(obj, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsObject(rs)) FAIL(LS_ERR_FORMAT, "key 'rope_scaling': must be an object or null");
        if (hybrid) FAIL(LS_ERR_UNSUPPORTED, "key 'rope_scaling': the hybrid family's RoPE is unscaled");
    }
    if (t_top > 0 && t_rp > 0 && t_top != t_rp)
        FAIL(LS_ERR_FORMAT, "key 'rope_theta': %g disagrees with rope_parameters.rope_theta %g", t_top, t_rp);
    *theta = t_rp > 0 ? t_rp : t_top;
    if (!(*theta > 0)) FAIL(LS_ERR_FORMAT, "key 'rope_theta': missing (top level or in rope_parameters)");
    if (partial) {
        if (p_top > 0 && p_rp > 0 && p_top != p_rp)
            FAIL(LS_ERR_FORMAT, "key 'partial_rotary_factor': %g disagrees with rope_parameters' %g", p_top, p_rp);
        *partial = p_rp > 0 ? p_rp : (p_top > 0 ? p_top : 1.0);
    }
    return LS_OK;
}

/* ---- hybrid: Qwen3.5 / Qwen3-Next ------------------------------------------------------ */

static ls_status map_hybrid(ls_hf_model *m, const cJSON *o, int moe_as_dense, const char *where, char *err,
                            size_t err_len) {
    ls_model_config *c = &m->cfg;
    ls_status st;
    if ((st = check_keys(o, HYBRID_KEYS, N_OF(HYBRID_KEYS), IGNORED, N_OF(IGNORED), where, err, err_len)) != LS_OK)
        return st;
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
        if ((st = get_int(o, K[i].k, K[i].lo, K[i].hi, K[i].dflt, &v[i], where, err, err_len)) != LS_OK) return st;
    c->family = LS_FAMILY_HYBRID;
    c->vocab = (int)v[0];
    c->d_model = (int)v[1];
    c->n_layers = (int)v[2];
    c->ffn_dim = (int)v[3];
    c->attn_heads = (int)v[4];
    c->attn_kv_heads = (int)v[5];
    c->head_dim = (int)v[6];
    c->gdn_hk = (int)v[7];
    c->gdn_hv = (int)v[8];
    c->gdn_dk = (int)v[9];
    c->gdn_dv = (int)v[10];
    c->conv_kernel = (int)v[11];
    m->mtp_layers = (int)v[14];
    if ((st = get_real(o, "rms_norm_eps", 0, 1, -1, &c->rms_eps, where, err, err_len)) != LS_OK) return st;
    double partial = 1.0;
    if ((st = get_rope(o, 1, &c->rope_theta, &partial, where, err, err_len)) != LS_OK) return st;
    double rd = partial * c->head_dim;
    if (rd != floor(rd)) FAIL(LS_ERR_FORMAT, "key 'partial_rotary_factor': %g x head_dim %d is not an integer", partial, c->head_dim);
    c->rope_dim = (int)rd;
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
    if ((st = want_bool(o, "attn_output_gate", 1, "the family's attention is gated", where, err, err_len)) != LS_OK ||
        (st = want_bool(o, "attention_bias", 0, "the family's linears have no bias", where, err, err_len)) != LS_OK ||
        (st = want_bool(o, "tie_word_embeddings", 0, "the family's lm_head is untied", where, err, err_len)) != LS_OK ||
        (st = want_str(o, "hidden_act", "silu", "the MLP is SwiGLU", where, err, err_len)) != LS_OK)
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
        if ((st = get_int(o, "num_experts_per_tok", 1, v[13], -1, &k, where, err, err_len)) != LS_OK ||
            (st = get_int(o, "moe_intermediate_size", 1, 1L << 24, -1, &ie, where, err, err_len)) != LS_OK ||
            (st = get_int(o, "shared_expert_intermediate_size", 0, 1L << 24, 0, &is, where, err, err_len)) != LS_OK)
            return st;
        long w = k * ie + is;
        if (w > 1L << 30) FAIL(LS_ERR_FORMAT, "key 'moe_intermediate_size': active width %ld too large", w);
        c->ffn_dim = (int)w;
        m->moe_as_dense = 1;
    }
    return LS_OK;
}

/* ---- mla: DeepSeek-V3.2 / GLM-5 --------------------------------------------------------- */

/* A per-layer index schedule (indexer_types or index_topk_pattern), read entry by entry: indexer_types
 * is an array of "full" / "shared"; index_topk_pattern a string of "F" / "S" (transformers maps F to
 * full, S to shared) or an array like indexer_types. */
typedef struct {
    const char *key;
    const cJSON *it, *e; /* the value; the next array entry */
    int present;         /* 0: absent or null */
} index_sched;

static ls_status sched_open(index_sched *s, const cJSON *o, const char *key, int n, const char *where, char *err,
                            size_t err_len) {
    memset(s, 0, sizeof *s);
    s->key = key;
    s->it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!s->it || cJSON_IsNull(s->it)) return LS_OK;
    int pattern = strcmp(key, "index_topk_pattern") == 0;
    int str = pattern && cJSON_IsString(s->it) && s->it->valuestring;
    if (str ? strlen(s->it->valuestring) != (size_t)n : !cJSON_IsArray(s->it) || cJSON_GetArraySize(s->it) != n)
        FAIL(LS_ERR_FORMAT, "key '%s': must be %s of num_hidden_layers (%d) %s", key,
             pattern ? "null, a string or an array" : "an array", n,
             pattern ? "entries (\"F\" full, \"S\" shared)" : "strings (\"full\" or \"shared\")");
    s->e = str ? NULL : s->it->child;
    s->present = 1;
    return LS_OK;
}

/* Entry i (called for i = 0, 1, ... in order): *t 1 full, 2 shared. */
static ls_status sched_next(index_sched *s, int i, int *t, const char *where, char *err, size_t err_len) {
    *t = 0;
    if (!s->e) {
        char ch = s->it->valuestring[i];
        *t = ch == 'F' ? 1 : ch == 'S' ? 2 : 0;
        if (!*t) FAIL(LS_ERR_FORMAT, "key '%s': entry %d is '%c', not \"F\" (full) or \"S\" (shared)", s->key, i,
                      ch >= 32 && ch < 127 ? ch : '?');
    } else {
        const cJSON *e = s->e;
        s->e = e->next;
        if (cJSON_IsString(e) && e->valuestring)
            *t = strcmp(e->valuestring, "full") == 0 ? 1 : strcmp(e->valuestring, "shared") == 0 ? 2 : 0;
        if (!*t) FAIL(LS_ERR_FORMAT, "key '%s': entry %d must be \"full\" or \"shared\"", s->key, i);
    }
    if (i == 0 && *t == 2) FAIL(LS_ERR_FORMAT, "key '%s': entry 0 is \"shared\" with no earlier index to share", s->key);
    return LS_OK;
}

static ls_status map_mla(ls_hf_model *m, const cJSON *o, const char *where, char *err, size_t err_len) {
    ls_model_config *c = &m->cfg;
    ls_status st;
    if ((st = check_keys(o, MLA_KEYS, N_OF(MLA_KEYS), IGNORED, N_OF(IGNORED), where, err, err_len)) != LS_OK)
        return st;
    long v[20];
    struct { const char *k; long lo, hi, dflt; } K[] = {
        {"vocab_size", 2, 1L << 30, -1}, {"hidden_size", 1, 1L << 30, -1}, {"num_hidden_layers", 1, 1L << 20, -1},
        {"intermediate_size", 1, 1L << 30, -1}, {"num_attention_heads", 1, 1L << 20, -1},
        {"q_lora_rank", 1, 1L << 30, -1}, {"kv_lora_rank", 1, 1L << 30, -1}, {"qk_nope_head_dim", 0, 1L << 20, -1},
        {"qk_rope_head_dim", 0, 1L << 20, -1}, {"v_head_dim", 1, 1L << 20, -1}, {"index_n_heads", 1, 1L << 20, -1},
        {"index_head_dim", 1, 1L << 20, -1}, {"index_topk", 1, 1L << 30, -1}, {"n_routed_experts", 1, 1L << 20, -1},
        {"num_experts_per_tok", 1, 1L << 20, -1}, {"n_group", 1, 1L << 20, 1}, {"topk_group", 1, 1L << 20, 1},
        {"first_k_dense_replace", 0, 1L << 20, 0}, {"moe_intermediate_size", 1, 1L << 30, -1},
        {"num_nextn_predict_layers", 0, 1L << 20, 0}};
    for (size_t i = 0; i < N_OF(K); ++i)
        if ((st = get_int(o, K[i].k, K[i].lo, K[i].hi, K[i].dflt, &v[i], where, err, err_len)) != LS_OK) return st;
    c->family = LS_FAMILY_MLA;
    int *dst[] = {&c->vocab, &c->d_model, &c->n_layers, &c->ffn_dim, &c->heads, &c->q_rank, &c->kv_rank,
                  &c->d_nope, &c->d_rope, &c->d_v, &c->index_heads, &c->index_dim, &c->index_topk,
                  &c->n_experts, &c->experts_per_token, &c->n_group, &c->topk_group, &c->first_dense,
                  &c->expert_dim, &m->mtp_layers};
    for (size_t i = 0; i < N_OF(dst); ++i) {
        if (v[i] > 2147483647L) FAIL(LS_ERR_FORMAT, "key '%s': too large", K[i].k);
        *dst[i] = (int)v[i];
    }
    if ((st = get_real(o, "rms_norm_eps", 0, 1, -1, &c->rms_eps, where, err, err_len)) != LS_OK ||
        (st = get_real(o, "routed_scaling_factor", 0, 1e6, -1, &c->routed_scale, where, err, err_len)) != LS_OK ||
        (st = get_rope(o, 0, &c->rope_theta, NULL, where, err, err_len)) != LS_OK)
        return st;
    long shared, qkhd, freq, offset, mlf;
    if ((st = get_int(o, "n_shared_experts", 0, 1L << 20, -1, &shared, where, err, err_len)) != LS_OK) return st;
    if (shared != 1)
        FAIL(LS_ERR_UNSUPPORTED, "key 'n_shared_experts': %ld (the mla family has exactly one shared expert "
             "of width moe_intermediate_size)", shared);
    if ((st = get_int(o, "qk_head_dim", 0, 1L << 21, v[7] + v[8], &qkhd, where, err, err_len)) != LS_OK) return st;
    if (qkhd != v[7] + v[8]) FAIL(LS_ERR_FORMAT, "key 'qk_head_dim': %ld is not qk_nope_head_dim + qk_rope_head_dim", qkhd);
    if ((st = get_int(o, "moe_layer_freq", 1, 1, 1, &mlf, where, err, err_len)) != LS_OK) return st;
    if ((st = want_str(o, "scoring_func", "sigmoid", "the router scores with a sigmoid", where, err, err_len)) != LS_OK ||
        (st = want_str(o, "topk_method", "noaux_tc", "group-limited top-k with a bias", where, err, err_len)) != LS_OK ||
        (st = want_str(o, "hidden_act", "silu", "the FFN is SwiGLU", where, err, err_len)) != LS_OK ||
        (st = want_bool(o, "norm_topk_prob", 1, "the routed weights are normalised", where, err, err_len)) != LS_OK ||
        (st = want_bool(o, "attention_bias", 0, "the family's linears have no bias", where, err, err_len)) != LS_OK ||
        (st = want_bool(o, "tie_word_embeddings", 0, "the family's lm_head is untied", where, err, err_len)) != LS_OK)
        return st;
    /* mlp_layer_types: first_k_dense_replace "dense", then "sparse" */
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "mlp_layer_types");
    if (mt && !cJSON_IsNull(mt)) {
        if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != c->n_layers)
            FAIL(LS_ERR_FORMAT, "key 'mlp_layer_types': must be an array of num_hidden_layers (%d) strings", c->n_layers);
        int i = 0;
        for (const cJSON *e = mt->child; e; e = e->next, ++i) {
            const char *want = i < c->first_dense ? "dense" : "sparse";
            if (!cJSON_IsString(e) || !e->valuestring) FAIL(LS_ERR_FORMAT, "key 'mlp_layer_types': entry %d is not a string", i);
            if (strcmp(e->valuestring, want) != 0)
                FAIL(LS_ERR_UNSUPPORTED, "key 'mlp_layer_types': entry %d is \"%.40s\", the mla family has \"%s\" there "
                     "(first_k_dense_replace dense layers, then MoE)", i, e->valuestring, want);
        }
    }
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(o, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            FAIL(LS_ERR_FORMAT, "key 'layer_types': must be an array of num_hidden_layers (%d) strings", c->n_layers);
        int i = 0;
        for (const cJSON *e = lt->child; e; e = e->next, ++i)
            if (!cJSON_IsString(e) || !e->valuestring || strcmp(e->valuestring, "deepseek_sparse_attention") != 0)
                FAIL(LS_ERR_UNSUPPORTED, "key 'layer_types': entry %d must be \"deepseek_sparse_attention\"", i);
    }
    /* index-key sets, per layer (transformers' GlmMoeDsaConfig, in its order of precedence): indexer_types
     * ("full" holds its own keys, "shared" reuses the last full layer's selection), else index_topk_pattern
     * (one "F" or "S" per layer, or a list like indexer_types), else index_topk_freq and
     * index_skip_topk_offset (full iff i < offset or (i + 1 - offset) % freq == 0), else every layer
     * (DeepSeek-V3.2).  A lower source given beside a higher one must agree with it. */
    if ((st = get_int(o, "index_topk_freq", 1, 1L << 20, 1, &freq, where, err, err_len)) != LS_OK ||
        (st = get_int(o, "index_skip_topk_offset", 0, 1L << 20, 0, &offset, where, err, err_len)) != LS_OK)
        return st;
    size_t from_freq = 0;
    for (long i = 0; i < c->n_layers; ++i)
        if (freq == 1 || i < offset || (i + 1 - offset) % freq == 0) ++from_freq;
    index_sched ty, pa;
    if ((st = sched_open(&ty, o, "indexer_types", c->n_layers, where, err, err_len)) != LS_OK ||
        (st = sched_open(&pa, o, "index_topk_pattern", c->n_layers, where, err, err_len)) != LS_OK)
        return st;
    size_t full = 0;
    for (int i = 0; (ty.present || pa.present) && i < c->n_layers; ++i) {
        int a = 0, b = 0;
        if ((ty.present && (st = sched_next(&ty, i, &a, where, err, err_len)) != LS_OK) ||
            (pa.present && (st = sched_next(&pa, i, &b, where, err, err_len)) != LS_OK))
            return st;
        if (a && b && a != b)
            FAIL(LS_ERR_FORMAT, "key 'index_topk_pattern': entry %d is %s, but indexer_types has \"%s\" there", i,
                 b == 1 ? "full" : "shared", a == 1 ? "full" : "shared");
        full += (a ? a : b) == 1;
    }
    if (ty.present || pa.present) {
        const char *src = ty.present ? "indexer_types" : "index_topk_pattern";
        if (cJSON_GetObjectItemCaseSensitive(o, "index_topk_freq") && full != from_freq)
            FAIL(LS_ERR_FORMAT, "key '%s': %zu \"full\" layers, but index_topk_freq %ld with "
                 "index_skip_topk_offset %ld gives %zu", src, full, freq, offset, from_freq);
        m->index_sets = full;
    } else {
        m->index_sets = from_freq;
    }
    return LS_OK;
}

/* ---- entry points ------------------------------------------------------------------------ */

/* The Hugging Face key a LongStraw key named in ls_config_check's message
 * ("key 'vocab'") comes from (docs/plan.md's table); "?" when none is named. */
static const char *hf_key_of(const char *msg) {
    static const char *const MAP[][2] = {
        {"vocab", "vocab_size"}, {"d_model", "hidden_size"}, {"n_layers", "num_hidden_layers"},
        {"ffn_dim", "intermediate_size"}, {"gdn_hk", "linear_num_key_heads"}, {"gdn_hv", "linear_num_value_heads"},
        {"gdn_dk", "linear_key_head_dim"}, {"gdn_dv", "linear_value_head_dim"}, {"conv_kernel", "linear_conv_kernel_dim"},
        {"attn_heads", "num_attention_heads"}, {"attn_kv_heads", "num_key_value_heads"}, {"head_dim", "head_dim"},
        {"rope_dim", "partial_rotary_factor"}, {"first_dense", "first_k_dense_replace"},
        {"heads", "num_attention_heads"}, {"q_rank", "q_lora_rank"}, {"kv_rank", "kv_lora_rank"},
        {"d_nope", "qk_nope_head_dim"}, {"d_rope", "qk_rope_head_dim"}, {"d_v", "v_head_dim"},
        {"index_heads", "index_n_heads"}, {"index_dim", "index_head_dim"}, {"index_topk", "index_topk"},
        {"n_experts", "n_routed_experts"}, {"n_group", "n_group"}, {"topk_group", "topk_group"},
        {"experts_per_token", "num_experts_per_tok"}, {"expert_dim", "moe_intermediate_size"}};
    const char *k = strstr(msg, "key '");
    if (!k) return "?";
    k += 5;
    const char *e = strchr(k, '\'');
    if (!e) return "?";
    for (size_t i = 0; i < N_OF(MAP); ++i)
        if (strlen(MAP[i][0]) == (size_t)(e - k) && strncmp(k, MAP[i][0], (size_t)(e - k)) == 0) return MAP[i][1];
    return "?";
}

/* A multimodal file's outer model_type, when given, must be the one that holds its text_config's:
 * Qwen3.5's (qwen3_5 / qwen3_5_text) or its MoE sibling's (qwen3_5_moe / qwen3_5_moe_text).  Another pair
 * (glm_moe_dsa around a Qwen text model, qwen3_5 around deepseek_v32) is a file that contradicts itself:
 * refused naming both keys and values.  text_config's own model_type is checked by the caller. */
static ls_status check_outer_type(const cJSON *root, const cJSON *tc, const char *where, char *err, size_t err_len) {
    static const char *const PAIRS[][2] = {{"qwen3_5", "qwen3_5_text"}, {"qwen3_5_moe", "qwen3_5_moe_text"}};
    const cJSON *om = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
    if (!om || cJSON_IsNull(om)) return LS_OK;
    if (!cJSON_IsString(om) || !om->valuestring) FAIL(LS_ERR_FORMAT, "key 'model_type': must be a string");
    if (!cJSON_IsString(im) || !im->valuestring) return LS_OK;
    for (size_t i = 0; i < N_OF(PAIRS); ++i)
        if (strcmp(om->valuestring, PAIRS[i][0]) == 0 && strcmp(im->valuestring, PAIRS[i][1]) == 0) return LS_OK;
    FAIL(LS_ERR_FORMAT, "key 'model_type': \"%.40s\" contradicts key 'text_config.model_type': \"%.40s\" (a file "
         "holding its model in text_config is qwen3_5 around qwen3_5_text, or qwen3_5_moe around qwen3_5_moe_text)",
         om->valuestring, im->valuestring);
}

ls_status ls_plan_hf_from_json(ls_hf_model *out, const cJSON *root, const char *where, int moe_as_dense,
                               char *err, size_t err_len) {
    if (!out || !root || !where) return LS_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(root)) FAIL(LS_ERR_FORMAT, "not a JSON object");
    const cJSON *o = root;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    char w2[512];
    ls_status st;
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsObject(tc)) FAIL(LS_ERR_FORMAT, "key 'text_config': must be an object");
        if ((st = check_keys(root, IGNORED_OUTER, N_OF(IGNORED_OUTER), NULL, 0, where, err, err_len)) != LS_OK) return st;
        /* the outer tie_word_embeddings speaks for the text model too */
        if ((st = want_bool(root, "tie_word_embeddings", 0, "the family's lm_head is untied", where, err, err_len)) != LS_OK)
            return st;
        if ((st = check_outer_type(root, tc, where, err, err_len)) != LS_OK) return st;
        snprintf(w2, sizeof w2, "%s: text_config", where);
        where = w2;
        o = tc;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    if (!mt) FAIL(LS_ERR_FORMAT, "key 'model_type': missing");
    if (!cJSON_IsString(mt) || !mt->valuestring) FAIL(LS_ERR_FORMAT, "key 'model_type': must be a string");
    const char *t = mt->valuestring;
    snprintf(out->model_type, sizeof out->model_type, "%s", t);
    if (strcmp(t, "qwen3_next") == 0 || strcmp(t, "qwen3_5_text") == 0 || strcmp(t, "qwen3_5") == 0 ||
        strcmp(t, "qwen3_5_moe_text") == 0 || strcmp(t, "qwen3_5_moe") == 0)
        st = map_hybrid(out, o, moe_as_dense, where, err, err_len);
    else if (strcmp(t, "deepseek_v32") == 0 || strcmp(t, "glm_moe_dsa") == 0)
        st = map_mla(out, o, where, err, err_len);
    else
        FAIL(LS_ERR_UNSUPPORTED, "key 'model_type': \"%.40s\" is neither a hybrid (qwen3_next, qwen3_5_text) nor "
             "an mla (deepseek_v32, glm_moe_dsa) architecture", t);
    if (st != LS_OK) return st;
    char cerr[512];
    if ((st = ls_config_check(&out->cfg, cerr, sizeof cerr)) != LS_OK)
        FAIL(st, "key '%s': mapped to a LongStraw config the trainer refuses: %s", hf_key_of(cerr), cerr);
    return LS_OK;
}

ls_status ls_plan_hf_load(ls_hf_model *out, const char *path, int moe_as_dense, char *err, size_t err_len) {
    if (!out || !path) return LS_ERR_ARG;
    cJSON *root = NULL;
    ls_status st = ls_json_read_file_capped(path, LS_HF_CONFIG_MAX_BYTES, &root, err, err_len);
    if (st == LS_OK) st = ls_plan_hf_from_json(out, root, path, moe_as_dense, err, err_len);
    cJSON_Delete(root);
    return st;
}
