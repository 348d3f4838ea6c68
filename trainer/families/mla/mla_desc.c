/* mla_desc.c - the mla family's descriptor (family_desc.h): its config keys
 * and their consistency, parameter counts (EP included), layer kinds, the
 * plan's FLOP terms and the Hugging Face mapping (DeepSeek-V3.2 / GLM-5).
 * dtype-independent. */
#include "trainer/families/mla/mla_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "trainer/model/hf_json.h"

#define N_OF LS_HF_N_OF
#define FAIL LS_HF_FAIL

/* ---- keys ------------------------------------------------------------------------ */
#define IK(f, lo, hi, hn, hfk, doc) \
    { #f, LS_FKEY_INT, offsetof(ls_mla_keys, f), lo, hi, hn, 0, 0, hfk, doc }
static const ls_family_key KEYS[] = {
    IK(first_dense, 0, 4096, "4096", "first_k_dense_replace", "leading layers with a dense MLP (the rest MoE)"),
    IK(heads, 1, 4096, "4096", "num_attention_heads", "MLA heads"),
    IK(q_rank, 1, 1 << 20, "2^20", "q_lora_rank", "query latent rank"),
    IK(kv_rank, 1, 1 << 20, "2^20", "kv_lora_rank", "KV latent rank (c_kv)"),
    IK(d_nope, 0, 1 << 16, "2^16", "qk_nope_head_dim", "non-rotary query/key head dim"),
    IK(d_rope, 0, 1 << 16, "2^16", "qk_rope_head_dim", "rotary query/key head dim (even, <= index_dim)"),
    IK(d_v, 1, 1 << 16, "2^16", "v_head_dim", "value head dim"),
    IK(index_heads, 1, 4096, "4096", "index_n_heads", "DSA indexer heads"),
    IK(index_dim, 1, 1 << 16, "2^16", "index_head_dim", "DSA indexer head dim"),
    IK(index_topk, 1, 1 << 30, "2^30", "index_topk", "keys a query attends (DSA top-k)"),
    IK(n_experts, 1, 1 << 16, "2^16", "n_routed_experts", "routed experts per MoE layer"),
    IK(n_group, 1, 1 << 16, "2^16", "n_group", "expert groups (divides n_experts)"),
    IK(topk_group, 1, 1 << 16, "2^16", "topk_group", "groups a token keeps (<= n_group)"),
    IK(experts_per_token, 1, 1 << 16, "2^16", "num_experts_per_tok", "routed experts per token"),
    IK(expert_dim, 1, 1 << 20, "2^20", "moe_intermediate_size", "expert (and shared expert) width"),
    {"routed_scale", LS_FKEY_REAL, offsetof(ls_mla_keys, routed_scale), 0, 1e6, "1e6", 0, 0, "routed_scaling_factor",
     "scale of the routed experts' sum"}};
#undef IK

#define REQUIRE LS_HF_REQUIRE

static ls_status check(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    const ls_mla_keys *k = ls_mla_keys_of(c);
    REQUIRE(k->first_dense <= c->n_layers, "key 'first_dense': exceeds 'n_layers'");
    REQUIRE(k->d_rope % 2 == 0 && k->d_rope <= k->index_dim, "key 'd_rope': must be even and <= 'index_dim'");
    REQUIRE(k->n_experts % k->n_group == 0 && k->topk_group <= k->n_group,
            "keys 'n_experts', 'n_group', 'topk_group' inconsistent");
    REQUIRE(k->experts_per_token <= k->n_experts, "key 'experts_per_token': must be in [1, n_experts]");
    REQUIRE(k->experts_per_token <= k->topk_group * (k->n_experts / k->n_group),
            "key 'experts_per_token': must be <= 'topk_group' x 'n_experts' / 'n_group' (the kept groups' experts)");
    return LS_OK;
}

/* ---- parameter counts -------------------------------------------------------------- */
/* Base and adapter scalars of the mla table (mla_table.c's build order,
 * docs/model.md §3, §5); r = 0 when there are no adapters; the routed experts
 * are adapted only with lora_experts. */
static void counts(const ls_model_config *c, size_t r, int lora_experts, ls_count *base, ls_count *adapt,
                   size_t *frozen) {
    const ls_mla_keys *k = ls_mla_keys_of(c);
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, I = (size_t)c->ffn_dim, L = (size_t)c->n_layers;
    size_t nd = (size_t)k->first_dense <= L ? (size_t)k->first_dense : L, nm = L - nd;
    size_t H = (size_t)k->heads, rq = (size_t)k->q_rank, rkv = (size_t)k->kv_rank, dn = (size_t)k->d_nope;
    size_t dr = (size_t)k->d_rope, dv = (size_t)k->d_v, HI = (size_t)k->index_heads, dI = (size_t)k->index_dim;
    size_t E = (size_t)k->n_experts, Ie = (size_t)k->expert_dim;
    ls_count_term(base, V, d, 2, "'vocab' x 'd_model' (embed, lm_head)");
    ls_count_term(base, d, 1, 1, "'d_model' (final norm)");
    ls_count_term(base, d, 2, L, "'d_model' x 'n_layers' (norms)");
    ls_count_lin(base, adapt, rq, d, L, r, "'q_rank' x 'd_model' x 'n_layers' (attention q_a)");
    ls_count_term(base, ls_sat_add(rq, rkv), 1, L, "'q_rank' + 'kv_rank' x 'n_layers' (q_a_norm, kv_a_norm)");
    ls_count_lin(base, adapt, ls_sat_mul(H, ls_sat_add(dn, dr)), rq, L, r,
        "'heads' x ('d_nope' + 'd_rope') x 'q_rank' x 'n_layers' (attention q_b)");
    ls_count_lin(base, adapt, ls_sat_add(rkv, dr), d, L, r, "('kv_rank' + 'd_rope') x 'd_model' x 'n_layers' (attention kv_a)");
    ls_count_lin(base, adapt, ls_sat_mul(H, ls_sat_add(dn, dv)), rkv, L, r,
        "'heads' x ('d_nope' + 'd_v') x 'kv_rank' x 'n_layers' (attention kv_b)");
    ls_count_lin(base, adapt, d, ls_sat_mul(H, dv), L, r, "'heads' x 'd_v' x 'd_model' x 'n_layers' (attention o)");
    ls_count_term(base, ls_sat_mul(HI, dI), rq, L, "'index_heads' x 'index_dim' x 'q_rank' x 'n_layers' (indexer q)");
    ls_count_term(base, ls_sat_add(ls_sat_mul(dI, d), ls_sat_mul(HI, d)), 1, L,
         "'index_dim' + 'index_heads' x 'd_model' x 'n_layers' (indexer k, w)");
    ls_count_term(base, dI, 2, L, "'index_dim' x 'n_layers' (indexer k_norm)");
    ls_count_lin(base, adapt, I, d, 2 * nd, r, "'ffn_dim' x 'd_model' x 'first_dense' (dense MLP)"); /* gate, up */
    ls_count_lin(base, adapt, d, I, nd, r, "'ffn_dim' x 'd_model' x 'first_dense' (dense MLP)");     /* down */
    ls_count_term(base, ls_sat_add(ls_sat_mul(E, d), E), 1, nm, "'n_experts' x 'd_model' x 'n_layers' (router)");
    ls_count_lin(base, adapt, Ie, d, 2 * nm, r, "'expert_dim' x 'd_model' x 'n_layers' (shared expert)");
    ls_count_lin(base, adapt, d, Ie, nm, r, "'expert_dim' x 'd_model' x 'n_layers' (shared expert)");
    size_t re = lora_experts ? r : 0, mE = ls_sat_mul(E, nm);
    ls_count_lin(base, adapt, Ie, d, ls_sat_mul(2, mE), re, "'n_experts' x 'expert_dim' x 'd_model' x 'n_layers' (experts)");
    ls_count_lin(base, adapt, d, Ie, mE, re, "'n_experts' x 'expert_dim' x 'd_model' x 'n_layers' (experts)");
    /* never trained (docs/model.md §3): the indexer and router_bias */
    size_t idx = ls_sat_add(ls_sat_add(ls_sat_mul3(HI, dI, rq), ls_sat_mul(dI, d)),
                            ls_sat_add(ls_sat_mul(HI, d), ls_sat_mul(2, dI)));
    *frozen = ls_sat_add(ls_sat_mul(idx, L), ls_sat_mul(E, nm));
}


static int routed_experts(const ls_model_config *c) { return ls_mla_keys_of(c)->n_experts; }

/* The routed experts another EP rank holds: E - E/ep of them in each MoE layer. */
static void ep_others(const ls_model_config *c, int ep, size_t r, int lora_experts, size_t *base, size_t *adapt) {
    const ls_mla_keys *k = ls_mla_keys_of(c);
    size_t L = (size_t)c->n_layers, nd = (size_t)k->first_dense <= L ? (size_t)k->first_dense : L;
    size_t d = (size_t)c->d_model, Ie = (size_t)k->expert_dim, E = (size_t)k->n_experts;
    size_t others = ls_sat_mul(E - E / (size_t)ep, L - nd);
    *base = ls_sat_mul3(others, 3, ls_sat_mul(Ie, d));
    *adapt = r && lora_experts ? ls_sat_mul3(others, 3, ls_sat_mul(r, d + Ie)) : 0;
}

/* ---- layer kinds ------------------------------------------------------------------- */
static const char *const LAYER_KINDS[] = {"mla", NULL};

static const char *layer_kind(const ls_model_config *c, int layer) {
    (void)c;
    (void)layer;
    return "mla";
}

/* ---- FLOPs ------------------------------------------------------------------------- */
static void flop_terms(const ls_model_config *c, int r, ls_flop_terms *t) {
    const ls_mla_keys *k = ls_mla_keys_of(c);
    double d = c->d_model, H = k->heads, dqk = (double)k->d_nope + k->d_rope;
    for (int l = 0; l < c->n_layers; ++l) {
        ls_flop_lin(t, k->q_rank, d, 1, 1, r);                                     /* q_a */
        ls_flop_lin(t, H * dqk, k->q_rank, 1, 1, r);                               /* q_b */
        ls_flop_lin(t, (double)k->kv_rank + k->d_rope, d, 1, 1, r);                /* kv_a */
        ls_flop_lin(t, H * ((double)k->d_nope + k->d_v), k->kv_rank, 1, 1, r);     /* kv_b */
        ls_flop_lin(t, d, H * k->d_v, 1, 1, r);                                    /* o */
        t->sparse_hd += H * (dqk + k->d_v);
        ls_flop_lin(t, (double)k->index_heads * k->index_dim, k->q_rank, 0, 0, r); /* indexer q (frozen) */
        ls_flop_lin(t, k->index_dim, d, 0, 0, r);                                  /* indexer k */
        ls_flop_lin(t, k->index_heads, d, 0, 0, r);                                /* indexer w */
        t->fwd_per_key += (2.0 * k->index_dim + 2.0) * k->index_heads;
        if (l < k->first_dense) {
            ls_flop_lin(t, c->ffn_dim, d, 1, 1, r);
            ls_flop_lin(t, c->ffn_dim, d, 1, 1, r);
            ls_flop_lin(t, d, c->ffn_dim, 1, 1, r);
        } else {
            ls_flop_lin(t, k->n_experts, d, 0, 1, r);                              /* router */
            for (int e = 0; e < k->experts_per_token; ++e) {               /* routed, no adapters */
                ls_flop_lin(t, k->expert_dim, d, 0, 1, r);
                ls_flop_lin(t, k->expert_dim, d, 0, 1, r);
                ls_flop_lin(t, d, k->expert_dim, 0, 1, r);
            }
            ls_flop_lin(t, k->expert_dim, d, 1, 1, r);                             /* shared expert */
            ls_flop_lin(t, k->expert_dim, d, 1, 1, r);
            ls_flop_lin(t, d, k->expert_dim, 1, 1, r);
        }
    }
    t->key_cap = (size_t)k->index_topk;
    /* the frozen indexer's linears: no gradient reaches them */
    t->no_grad_lin = (double)c->n_layers * 2.0 *
                     ((double)k->index_heads * k->index_dim * k->q_rank + (double)k->index_dim * c->d_model +
                      (double)k->index_heads * c->d_model);
}


/* ---- Hugging Face: DeepSeek-V3.2 / GLM-5 ------------------------------------------- */
static const char *const HF_TYPES[] = {"deepseek_v32", "glm_moe_dsa", NULL};
static const char *const HF_KEYS[] = {
    "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "rms_norm_eps",
    "rope_theta", "rope_parameters", "rope_scaling", "num_attention_heads", "num_key_value_heads", "head_dim",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim", "v_head_dim",
    "index_n_heads", "index_head_dim", "index_topk", "index_topk_freq", "index_skip_topk_offset",
    "index_topk_pattern", "indexer_types", "n_routed_experts", "num_experts_per_tok", "n_group", "topk_group",
    "first_k_dense_replace", "moe_intermediate_size", "routed_scaling_factor", "n_shared_experts",
    "moe_layer_freq", "mlp_layer_types", "layer_types", "num_nextn_predict_layers", "scoring_func",
    "topk_method", "norm_topk_prob", "hidden_act", "attention_bias", "tie_word_embeddings", NULL};


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

static ls_status hf_map(ls_model_config *c, ls_family_hf_facts *m, const cJSON *o, int moe_as_dense,
                        const char *where, char *err, size_t err_len) {
    (void)moe_as_dense;
    ls_status st;
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
        if ((st = ls_hf_get_int(o, K[i].k, K[i].lo, K[i].hi, K[i].dflt, &v[i], where, err, err_len)) != LS_OK) return st;
    ls_config_init(c, &ls_family_desc_mla);
    ls_mla_keys *k = ls_mla_keys_mut(c);
    int *dst[] = {&c->vocab, &c->d_model, &c->n_layers, &c->ffn_dim, &k->heads, &k->q_rank, &k->kv_rank,
                  &k->d_nope, &k->d_rope, &k->d_v, &k->index_heads, &k->index_dim, &k->index_topk,
                  &k->n_experts, &k->experts_per_token, &k->n_group, &k->topk_group, &k->first_dense,
                  &k->expert_dim, &m->mtp_layers};
    for (size_t i = 0; i < N_OF(dst); ++i) {
        if (v[i] > 2147483647L) FAIL(LS_ERR_FORMAT, "key '%s': too large", K[i].k);
        *dst[i] = (int)v[i];
    }
    if ((st = ls_hf_get_real(o, "rms_norm_eps", 0, 1, -1, &c->rms_eps, where, err, err_len)) != LS_OK ||
        (st = ls_hf_get_real(o, "routed_scaling_factor", 0, 1e6, -1, &k->routed_scale, where, err, err_len)) != LS_OK ||
        (st = ls_hf_get_rope(o, "mla", 0, &c->rope_theta, NULL, where, err, err_len)) != LS_OK)
        return st;
    long shared, qkhd, freq, offset, mlf;
    if ((st = ls_hf_get_int(o, "n_shared_experts", 0, 1L << 20, -1, &shared, where, err, err_len)) != LS_OK) return st;
    if (shared != 1)
        FAIL(LS_ERR_UNSUPPORTED, "key 'n_shared_experts': %ld (the mla family has exactly one shared expert "
             "of width moe_intermediate_size)", shared);
    if ((st = ls_hf_get_int(o, "qk_head_dim", 0, 1L << 21, v[7] + v[8], &qkhd, where, err, err_len)) != LS_OK) return st;
    if (qkhd != v[7] + v[8]) FAIL(LS_ERR_FORMAT, "key 'qk_head_dim': %ld is not qk_nope_head_dim + qk_rope_head_dim", qkhd);
    if ((st = ls_hf_get_int(o, "moe_layer_freq", 1, 1, 1, &mlf, where, err, err_len)) != LS_OK) return st;
    if ((st = ls_hf_want_str(o, "scoring_func", "sigmoid", "the router scores with a sigmoid", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_str(o, "topk_method", "noaux_tc", "group-limited top-k with a bias", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_str(o, "hidden_act", "silu", "the FFN is SwiGLU", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_bool(o, "norm_topk_prob", 1, "the routed weights are normalised", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_bool(o, "attention_bias", 0, "the family's linears have no bias", where, err, err_len)) != LS_OK ||
        (st = ls_hf_want_bool(o, "tie_word_embeddings", 0, "the family's lm_head is untied", where, err, err_len)) != LS_OK)
        return st;
    /* mlp_layer_types: first_k_dense_replace "dense", then "sparse" */
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "mlp_layer_types");
    if (mt && !cJSON_IsNull(mt)) {
        if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != c->n_layers)
            FAIL(LS_ERR_FORMAT, "key 'mlp_layer_types': must be an array of num_hidden_layers (%d) strings", c->n_layers);
        int i = 0;
        for (const cJSON *e = mt->child; e; e = e->next, ++i) {
            const char *want = i < k->first_dense ? "dense" : "sparse";
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
    if ((st = ls_hf_get_int(o, "index_topk_freq", 1, 1L << 20, 1, &freq, where, err, err_len)) != LS_OK ||
        (st = ls_hf_get_int(o, "index_skip_topk_offset", 0, 1L << 20, 0, &offset, where, err, err_len)) != LS_OK)
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


static const char *const CP_FAULTS[] = {"cp-local-dsa", NULL};

const ls_family_desc ls_family_desc_mla = {
    .name = "mla",
    .summary = "MLA with DeepSeek sparse attention and MoE (docs/model.md §2)",
    .keys = KEYS,
    .n_keys = N_OF(KEYS),
    .keys_bytes = sizeof(ls_mla_keys),
    .check = check,
    .counts = counts,
    .routed_experts = routed_experts,
    .ep_others = ep_others,
    .index_sets = 1,
    .layer_kinds = LAYER_KINDS,
    .layer_kind = layer_kind,
    .flop_terms = flop_terms,
    .hf_model_types = HF_TYPES,
    .hf_keys = HF_KEYS,
    .hf_outer = NULL,
    .hf_map = hf_map,
    .cp_faults = CP_FAULTS,
    .tiny_config = "configs/mla-tiny.json",
    .reference = "tests/reference/mla_ref.py",
    .profile = "profiles/mla.json",
    .parity = "trainer/families/mla/parity.json",
};
