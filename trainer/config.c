/* config.c - model config loading/validation and serialisation (MODEL.md §6). */
#include "trainer/config.h"

#include "receipts/json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ls_family_name(ls_family f) { return f == LS_FAMILY_MLA ? "mla" : "hybrid"; }

void ls_objective_defaults(ls_objective *o) {
    memset(o, 0, sizeof *o);
    o->train_mode = LS_TRAIN_LORA;
    o->lora_r = 4;
    o->lora_alpha = 8.0;
    o->grad_mode = LS_GRAD_DETACHED;
    o->epsilon = 0.2;
    o->beta = 0.04;
    o->temperature = 1.0;
}

typedef struct { const char *key; size_t off; } int_key;
#define IK(f) { #f, offsetof(ls_model_config, f) }
static const int_key COMMON_INT[] = { IK(vocab), IK(d_model), IK(n_layers), IK(ffn_dim) };
static const int_key HYBRID_INT[] = {
    {"gdn_hk", offsetof(ls_model_config, gdn_hk)}, {"gdn_hv", offsetof(ls_model_config, gdn_hv)},
    {"gdn_dk", offsetof(ls_model_config, gdn_dk)}, {"gdn_dv", offsetof(ls_model_config, gdn_dv)},
    IK(conv_kernel), {"attn_heads", offsetof(ls_model_config, attn_heads)},
    {"attn_kv_heads", offsetof(ls_model_config, attn_kv_heads)}, IK(head_dim), IK(rope_dim) };
static const int_key MLA_INT[] = {
    IK(first_dense), IK(heads), IK(q_rank), IK(kv_rank), IK(d_nope), IK(d_rope), IK(d_v),
    IK(index_heads), IK(index_dim), IK(index_topk), IK(n_experts), IK(n_group), IK(topk_group),
    IK(experts_per_token), IK(expert_dim) };
#undef IK

static ls_status get_int(const cJSON *obj, const char *key, int *out, const char *where,
                         char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        snprintf(err, err_len, "%s: key '%s': missing", where, key);
        return LS_ERR_FORMAT;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < 0 || it->valuedouble > 1e9) {
        snprintf(err, err_len, "%s: key '%s': must be a non-negative integer", where, key);
        return LS_ERR_FORMAT;
    }
    *out = (int)it->valuedouble;
    return LS_OK;
}

static ls_status get_real(const cJSON *obj, const char *key, double *out, const char *where,
                          char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        snprintf(err, err_len, "%s: key '%s': missing", where, key);
        return LS_ERR_FORMAT;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble <= 0) {
        snprintf(err, err_len, "%s: key '%s': must be a positive number", where, key);
        return LS_ERR_FORMAT;
    }
    *out = it->valuedouble;
    return LS_OK;
}

static ls_status get_ints(const cJSON *obj, const int_key *keys, size_t n, ls_model_config *c,
                          const char *where, char *err, size_t err_len) {
    for (size_t i = 0; i < n; i++) {
        ls_status st = get_int(obj, keys[i].key, (int *)((char *)c + keys[i].off), where, err, err_len);
        if (st != LS_OK) return st;
    }
    return LS_OK;
}

ls_status ls_config_from_json(ls_model_config *c, const cJSON *obj, const char *where,
                              char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(obj)) {
        snprintf(err, err_len, "%s: not a JSON object", where);
        return LS_ERR_FORMAT;
    }
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(obj, "family");
    if (!cJSON_IsString(fam)) {
        snprintf(err, err_len, "%s: key 'family': missing or not a string", where);
        return LS_ERR_FORMAT;
    }
    if (strcmp(fam->valuestring, "hybrid") == 0) c->family = LS_FAMILY_HYBRID;
    else if (strcmp(fam->valuestring, "mla") == 0) c->family = LS_FAMILY_MLA;
    else {
        snprintf(err, err_len, "%s: key 'family': '%s' is not \"hybrid\" or \"mla\"", where,
                 fam->valuestring);
        return LS_ERR_FORMAT;
    }
    ls_status st = get_ints(obj, COMMON_INT, sizeof COMMON_INT / sizeof *COMMON_INT, c, where, err, err_len);
    if (st == LS_OK) st = get_real(obj, "rms_eps", &c->rms_eps, where, err, err_len);
    if (st == LS_OK) st = get_real(obj, "rope_theta", &c->rope_theta, where, err, err_len);
    if (st != LS_OK) return st;
    if (c->family == LS_FAMILY_HYBRID)
        st = get_ints(obj, HYBRID_INT, sizeof HYBRID_INT / sizeof *HYBRID_INT, c, where, err, err_len);
    else {
        st = get_ints(obj, MLA_INT, sizeof MLA_INT / sizeof *MLA_INT, c, where, err, err_len);
        if (st == LS_OK) st = get_real(obj, "routed_scale", &c->routed_scale, where, err, err_len);
    }
    if (st != LS_OK) return st;
    return ls_config_check(c, err, err_len);
}

#define REQUIRE(cond, ...)                         \
    do {                                           \
        if (!(cond)) {                             \
            snprintf(err, err_len, __VA_ARGS__);   \
            return LS_ERR_FORMAT;                  \
        }                                          \
    } while (0)

ls_status ls_config_check(const ls_model_config *c, char *err, size_t err_len) {
    REQUIRE(c->vocab >= 2, "config: key 'vocab': must be >= 2");
    REQUIRE(c->d_model >= 1 && c->n_layers >= 1 && c->ffn_dim >= 1,
            "config: keys 'd_model', 'n_layers', 'ffn_dim' must be >= 1");
    if (c->family == LS_FAMILY_HYBRID) {
        REQUIRE(c->gdn_hk >= 1 && c->gdn_hv >= 1 && c->gdn_hv % c->gdn_hk == 0,
                "config: key 'gdn_hv': must be a positive multiple of 'gdn_hk'");
        REQUIRE(c->gdn_dk >= 1 && c->gdn_dv >= 1, "config: keys 'gdn_dk', 'gdn_dv' must be >= 1");
        REQUIRE(c->conv_kernel >= 1, "config: key 'conv_kernel': must be >= 1");
        REQUIRE(c->attn_kv_heads >= 1 && c->attn_heads % c->attn_kv_heads == 0 && c->attn_heads >= 1,
                "config: key 'attn_heads': must be a positive multiple of 'attn_kv_heads'");
        REQUIRE(c->head_dim >= 2 && c->rope_dim % 2 == 0 && c->rope_dim <= c->head_dim,
                "config: key 'rope_dim': must be even and <= 'head_dim'");
    } else {
        REQUIRE(c->first_dense <= c->n_layers, "config: key 'first_dense': exceeds 'n_layers'");
        REQUIRE(c->heads >= 1 && c->q_rank >= 1 && c->kv_rank >= 1 && c->d_v >= 1,
                "config: keys 'heads', 'q_rank', 'kv_rank', 'd_v' must be >= 1");
        REQUIRE(c->d_rope % 2 == 0 && c->d_rope <= c->index_dim,
                "config: key 'd_rope': must be even and <= 'index_dim'");
        REQUIRE(c->n_group >= 1 && c->n_experts % c->n_group == 0 && c->topk_group <= c->n_group,
                "config: keys 'n_experts', 'n_group', 'topk_group' inconsistent");
        REQUIRE(c->experts_per_token >= 1 && c->experts_per_token <= c->n_experts,
                "config: key 'experts_per_token': must be in [1, n_experts]");
    }
    return LS_OK;
}
#undef REQUIRE

ls_status ls_config_load(ls_model_config *out, const char *path, char *err, size_t err_len) {
    cJSON *obj = NULL;
    ls_status st = ls_json_read_file(path, &obj, err, err_len); /* errors name the file */
    if (st != LS_OK) return st;
    st = ls_config_from_json(out, obj, path, err, err_len);
    cJSON_Delete(obj);
    return st;
}

static void add_ints(cJSON *o, const ls_model_config *c, const int_key *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, keys[i].key, *(const int *)((const char *)c + keys[i].off));
}

cJSON *ls_config_to_json(const ls_model_config *c, const ls_objective *ob) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "family", ls_family_name(c->family));
    add_ints(o, c, COMMON_INT, sizeof COMMON_INT / sizeof *COMMON_INT);
    cJSON_AddNumberToObject(o, "rms_eps", c->rms_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    if (c->family == LS_FAMILY_HYBRID) {
        add_ints(o, c, HYBRID_INT, sizeof HYBRID_INT / sizeof *HYBRID_INT);
    } else {
        add_ints(o, c, MLA_INT, sizeof MLA_INT / sizeof *MLA_INT);
        cJSON_AddNumberToObject(o, "routed_scale", c->routed_scale);
    }
    if (ob) {
        cJSON_AddStringToObject(o, "train_mode", ob->train_mode == LS_TRAIN_FULL ? "full" : "lora");
        cJSON_AddNumberToObject(o, "lora_r", ob->lora_r);
        cJSON_AddNumberToObject(o, "lora_alpha", ob->lora_alpha);
        cJSON_AddBoolToObject(o, "lora_experts", ob->lora_experts);
        cJSON_AddStringToObject(o, "grad_mode", ob->grad_mode == LS_GRAD_FULL ? "full" : "detached");
        cJSON_AddNumberToObject(o, "epsilon", ob->epsilon);
        cJSON_AddNumberToObject(o, "beta", ob->beta);
        cJSON_AddNumberToObject(o, "temperature", ob->temperature);
    }
    return o;
}
