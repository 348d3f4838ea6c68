/* plan_hf.c - a Hugging Face config.json to a model config and the plan's
 * facts (plan_hf.h; the mapping table is docs/plan.md's). */
#include "trainer/plan/plan_hf.h"

#include "receipts/format/json_util.h"
#include "trainer/model/hf_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF LS_HF_N_OF
#define FAIL LS_HF_FAIL

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

/* ---- entry points ------------------------------------------------------------------------ */

/* The Hugging Face key a LongStraw key named in ls_config_check's message
 * ("key 'vocab'") comes from (the shared keys', else the family's key table:
 * docs/plan.md's table); "?" when none is named. */
static const char *hf_key_of(const ls_family_desc *f, const char *msg) {
    static const char *const SHARED[][2] = {
        {"vocab", "vocab_size"}, {"d_model", "hidden_size"}, {"n_layers", "num_hidden_layers"},
        {"ffn_dim", "intermediate_size"}};
    const char *k = strstr(msg, "key '");
    if (!k) return "?";
    k += 5;
    const char *e = strchr(k, '\'');
    if (!e) return "?";
    size_t n = (size_t)(e - k);
    for (size_t i = 0; i < N_OF(SHARED); ++i)
        if (strlen(SHARED[i][0]) == n && strncmp(k, SHARED[i][0], n) == 0) return SHARED[i][1];
    for (size_t i = 0; f && i < f->n_keys; ++i)
        if (f->keys[i].hf && strlen(f->keys[i].key) == n && strncmp(k, f->keys[i].key, n) == 0) return f->keys[i].hf;
    return "?";
}

static size_t n_names(const char *const *names) {
    size_t n = 0;
    while (names && names[n]) ++n;
    return n;
}

/* The family whose hf_model_types holds t, or NULL. */
static const ls_family_desc *family_of_type(const char *t) {
    for (size_t i = 0; i < ls_family_count(); ++i) {
        const ls_family_desc *f = ls_family_at(i);
        for (const char *const *p = f->hf_model_types; p && *p; ++p)
            if (strcmp(*p, t) == 0) return f;
    }
    return NULL;
}

/* A multimodal file's outer model_type, when given, must be one that holds its text_config's (the
 * families' hf_outer pairs).  Another pair is a file that contradicts itself: refused naming both keys and
 * values.  text_config's own model_type is checked by the caller. */
static ls_status check_outer_type(const cJSON *root, const cJSON *tc, const char *where, char *err, size_t err_len) {
    const cJSON *om = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
    if (!om || cJSON_IsNull(om)) return LS_OK;
    if (!cJSON_IsString(om) || !om->valuestring) FAIL(LS_ERR_FORMAT, "key 'model_type': must be a string");
    if (!cJSON_IsString(im) || !im->valuestring) return LS_OK;
    char pairs[512] = "";
    size_t at = 0;
    for (size_t i = 0; i < ls_family_count(); ++i) {
        const ls_family_desc *f = ls_family_at(i);
        for (size_t j = 0; f->hf_outer && f->hf_outer[j][0]; ++j) {
            if (strcmp(om->valuestring, f->hf_outer[j][0]) == 0 && strcmp(im->valuestring, f->hf_outer[j][1]) == 0)
                return LS_OK;
            if (at < sizeof pairs) {
                int n = snprintf(pairs + at, sizeof pairs - at, "%s%s around %s", at ? ", or " : "",
                                 f->hf_outer[j][0], f->hf_outer[j][1]);
                if (n > 0) at += (size_t)n;
            }
        }
    }
    FAIL(LS_ERR_FORMAT, "key 'model_type': \"%.40s\" contradicts key 'text_config.model_type': \"%.40s\" (a file "
         "holding its model in text_config is %s)", om->valuestring, im->valuestring, at ? pairs : "none");
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
        if ((st = ls_hf_check_keys(root, IGNORED_OUTER, N_OF(IGNORED_OUTER), NULL, 0, where, err, err_len)) != LS_OK)
            return st;
        /* the outer tie_word_embeddings speaks for the text model too */
        if ((st = ls_hf_want_bool(root, "tie_word_embeddings", 0, "the family's lm_head is untied", where, err,
                                  err_len)) != LS_OK)
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
    const ls_family_desc *f = family_of_type(t);
    if (!f) {
        char known[512] = "";
        size_t at = 0;
        for (size_t i = 0; i < ls_family_count() && at < sizeof known; ++i) {
            const ls_family_desc *g = ls_family_at(i);
            int n = snprintf(known + at, sizeof known - at, "%s%s (", i ? ", " : "", g->name);
            if (n > 0) at += (size_t)n;
            for (const char *const *p = g->hf_model_types; p && *p && at < sizeof known; ++p)
                if ((n = snprintf(known + at, sizeof known - at, "%s%s", p == g->hf_model_types ? "" : ", ", *p)) > 0)
                    at += (size_t)n;
            if (at < sizeof known && (n = snprintf(known + at, sizeof known - at, ")")) > 0) at += (size_t)n;
        }
        FAIL(LS_ERR_UNSUPPORTED, "key 'model_type': \"%.40s\" is neither of this build's families' architectures: %s",
             t, known);
    }
    if (!f->hf_map) FAIL(LS_ERR_UNSUPPORTED, "key 'model_type': the %s family has no Hugging Face mapping", f->name);
    if ((st = ls_hf_check_keys(o, f->hf_keys, n_names(f->hf_keys), IGNORED, N_OF(IGNORED), where, err, err_len)) !=
        LS_OK)
        return st;
    ls_family_hf_facts facts = {0};
    if ((st = f->hf_map(&out->cfg, &facts, o, moe_as_dense, where, err, err_len)) != LS_OK) return st;
    out->index_sets = facts.index_sets;
    out->moe_as_dense = facts.moe_as_dense;
    out->mtp_layers = facts.mtp_layers;
    char cerr[512];
    if ((st = ls_config_check(&out->cfg, cerr, sizeof cerr)) != LS_OK)
        FAIL(st, "key '%s': mapped to a LongStraw config the trainer refuses: %s", hf_key_of(f, cerr), cerr);
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
