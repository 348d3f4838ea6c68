/* batch_dump.c - the docs/model.md §6 batch dump (batch.h): one line of
 * JSON written atomically, and its strict reader. */
#include "trainer/io/batch.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/atomic_file.h"
#include "receipts/format/json_util.h"
#include "trainer/io/batch_json.h"

/* Numbers read back bit-exact (receipts/format/json_util.h): cJSON's own printer
 * can lose an ulp. */
static cJSON *num_array(const double *x, size_t n, int *nonfinite) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *v = ls_json_create_exact_number(x[i]);
        if (!v) *nonfinite = 1;
        else cJSON_AddItemToArray(a, v);
    }
    return a;
}

static cJSON *id_array(const int32_t *x, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

/* ls_config_to_json's object with every number made exact (see above). */
static cJSON *exact_config(const ls_model_config *cfg, const ls_objective *obj, int *nonfinite) {
    cJSON *c = ls_config_to_json(cfg, obj), *it = c ? c->child : NULL;
    while (it) {
        cJSON *next = it->next;
        if (cJSON_IsNumber(it)) {
            cJSON *v = ls_json_create_exact_number(it->valuedouble);
            if (!v) *nonfinite = 1;
            else cJSON_ReplaceItemInObjectCaseSensitive(c, it->string, v);
        }
        it = next;
    }
    return c;
}

ls_status ls_batch_format_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                               char **text, size_t *len, char *err, size_t err_len) {
    int nonfinite = 0;
    *text = NULL;
    *len = 0;
    if (!b || !cfg || !obj) {
        FIELD_ERR("batch dump: batch, config and objective are required");
        return LS_ERR_ARG;
    }
    cJSON *doc = cJSON_CreateObject();
    if (!doc) return LS_ERR_NOMEM;
    cJSON_AddItemToObject(doc, "config", exact_config(cfg, obj, &nonfinite));
    cJSON_AddItemToObject(doc, "prompt", id_array(b->prompt, b->P));
    cJSON *resp = cJSON_AddArrayToObject(doc, "responses");
    cJSON *old = cJSON_CreateArray(), *ref = cJSON_CreateArray();
    for (size_t i = 0; i < b->G; i++) {
        cJSON_AddItemToArray(resp, id_array(b->resp[i], b->R[i]));
        cJSON_AddItemToArray(old, num_array(b->old_lp[i], b->R[i], &nonfinite));
        cJSON_AddItemToArray(ref, num_array(b->ref_lp[i], b->R[i], &nonfinite));
    }
    cJSON_AddItemToObject(doc, "rewards", num_array(b->rewards, b->G, &nonfinite));
    cJSON_AddItemToObject(doc, "advantages", num_array(b->adv, b->G, &nonfinite));
    cJSON_AddItemToObject(doc, "old_logprobs", old);
    cJSON_AddItemToObject(doc, "ref_logprobs", ref);
    ls_status st = LS_OK;
    if (nonfinite) {
        FIELD_ERR("batch dump: the batch holds a non-finite number; not written");
        st = LS_ERR_NONFINITE;
    } else if (!(*text = cJSON_PrintUnformatted(doc))) {
        st = LS_ERR_NOMEM;
    } else {
        *len = strlen(*text);
    }
    cJSON_Delete(doc);
    return st;
}

ls_status ls_batch_write_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                              const char *path, char *err, size_t err_len) {
    char *text = NULL;
    size_t len = 0;
    ls_status st = ls_batch_format_dump(b, cfg, obj, &text, &len, err, err_len);
    if (st == LS_ERR_NONFINITE) FIELD_ERR("%.400s: batch holds a non-finite number; not written", path);
    if (st == LS_OK) st = ls_atomic_write(path, text, len, err, err_len);
    free(text);
    return st;
}

static const char *const DUMP_KEYS[] = {"config",     "prompt",       "responses",   "rewards",
                                        "advantages", "old_logprobs", "ref_logprobs"};
/* The embedded config: the model keys and every objective key, nothing
 * else (ls_config_from_json_with_objective: the same strictness and ranges
 * as longstraw-train's config file and command line). */
static ls_status parse_dump_config(const cJSON *c, ls_model_config *cfg, ls_objective *obj, const char *where,
                                   char *err, size_t err_len) {
    char inner[512];
    if (!cJSON_IsObject(c)) {
        FIELD_ERR("%.400s: field 'config': must be an object", where);
        return LS_ERR_FORMAT;
    }
    ls_status st = ls_config_from_json_with_objective(cfg, obj, c, "config", inner, sizeof inner);
    if (st != LS_OK) FIELD_ERR("%.400s: %s", where, inner);
    return st;
}

ls_status ls_batch_parse_dump(ls_batch **out, ls_model_config *cfg, ls_objective *obj, const char *buf,
                              size_t len, const char *where, char *err, size_t err_len) {
    cJSON *doc = NULL;
    ls_batch *b = NULL;
    ls_model_config c;
    ls_objective o;
    *out = NULL;
    if (!where) where = "batch dump";
    ls_status st = ls_json_parse(buf, len, where, &doc, err, err_len);
    if (st != LS_OK) return st;
    if (!cJSON_IsObject(doc)) {
        FIELD_ERR("%.400s: not a JSON object", where);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    st = ls_batch_json_only_keys(doc, DUMP_KEYS, sizeof DUMP_KEYS / sizeof *DUMP_KEYS, where, "field", err, err_len);
    if (st == LS_OK) st = parse_dump_config(cJSON_GetObjectItemCaseSensitive(doc, "config"), &c, &o, where, err,
                                            err_len);
    if (st == LS_OK) st = ls_batch_json_tokens(doc, c.vocab, where, &b, err, err_len);
    if (st != LS_OK) goto cleanup;
    st = ls_batch_json_reals(cJSON_GetObjectItemCaseSensitive(doc, "rewards"), b->G, 0, where, "rewards",
                             b->rewards, err, err_len);
    if (st == LS_OK)
        st = ls_batch_json_reals(cJSON_GetObjectItemCaseSensitive(doc, "advantages"), b->G, 0, where,
                                 "advantages", b->adv, err, err_len);
    if (st == LS_OK)
        st = ls_batch_json_lp_rows(cJSON_GetObjectItemCaseSensitive(doc, "old_logprobs"), b, where,
                                   "old_logprobs", b->old_lp, err, err_len);
    if (st == LS_OK)
        st = ls_batch_json_lp_rows(cJSON_GetObjectItemCaseSensitive(doc, "ref_logprobs"), b, where,
                                   "ref_logprobs", b->ref_lp, err, err_len);
    if (st != LS_OK) goto cleanup;
    b->old_supplied = 1;
    b->ref_supplied = 1;
    *out = b;
    b = NULL;
    *cfg = c;
    *obj = o;
cleanup:
    ls_batch_free(b);
    cJSON_Delete(doc);
    return st;
}

ls_status ls_batch_read_dump(ls_batch **out, ls_model_config *cfg, ls_objective *obj, const char *path,
                             char *err, size_t err_len) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    ls_status st = ls_json_read_bytes(path, &buf, &len, err, err_len);
    if (st != LS_OK) return st;
    st = ls_batch_parse_dump(out, cfg, obj, buf, len, path, err, err_len);
    free(buf);
    return st;
}
