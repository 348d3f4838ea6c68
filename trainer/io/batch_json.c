/* batch_json.c - the JSON fields shared by rollouts lines and batch dumps
 * (batch_json.h). */
#include "trainer/io/batch_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ls_status ls_batch_json_ids(const cJSON *arr, int vocab, size_t min_len, const char *where, const char *field,
                            int32_t **out, size_t *n, char *err, size_t err_len) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) < min_len) {
        FIELD_ERR("%.400s: field '%s': must be an array of at least %zu token ids", where, field, min_len);
        return LS_ERR_FORMAT;
    }
    size_t len = (size_t)cJSON_GetArraySize(arr), i = 0;
    int32_t *ids = malloc(len * sizeof *ids);
    if (!ids) return LS_ERR_NOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble >= vocab) {
            FIELD_ERR("%.400s: field '%s[%zu]': not a token id in [0, %d)", where, field, i, vocab);
            free(ids);
            return LS_ERR_FORMAT;
        }
        ids[i++] = (int32_t)it->valuedouble;
    }
    *out = ids;
    *n = len;
    return LS_OK;
}

ls_status ls_batch_json_reals(const cJSON *arr, size_t n, int logprob, const char *where, const char *field,
                              double *dst, char *err, size_t err_len) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != n) {
        FIELD_ERR("%.400s: field '%s': must be an array of %zu numbers", where, field, n);
        return LS_ERR_FORMAT;
    }
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || (logprob && x->valuedouble > 0)) {
            FIELD_ERR("%.400s: field '%s[%zu]': not a finite %s", where, field, i,
                      logprob ? "log-prob <= 0" : "number");
            return LS_ERR_FORMAT;
        }
        dst[i++] = x->valuedouble;
    }
    return LS_OK;
}

ls_status ls_batch_json_only_keys(const cJSON *obj, const char *const *keys, size_t n, const char *where,
                                  const char *what, char *err, size_t err_len) {
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        size_t k = 0;
        while (k < n && strcmp(it->string, keys[k]) != 0) k++;
        if (k == n) {
            FIELD_ERR("%.400s: %s '%.100s': unknown (a misspelt key is refused, not ignored)", where, what,
                      it->string);
            return LS_ERR_FORMAT;
        }
    }
    return LS_OK;
}

ls_status ls_batch_json_tokens(const cJSON *doc, int vocab, const char *where, ls_batch **out, char *err,
                               size_t err_len) {
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(doc, "responses");
    char field[64];
    int32_t *ids = NULL;
    size_t n = 0;
    ls_batch *b = NULL;
    if (!cJSON_IsArray(resp) || cJSON_GetArraySize(resp) < 1) {
        FIELD_ERR("%.400s: field 'responses': must be a non-empty array of token id arrays", where);
        return LS_ERR_FORMAT;
    }
    ls_status st = ls_batch_alloc(&b, (size_t)cJSON_GetArraySize(resp));
    if (st != LS_OK) return st;
    st = ls_batch_json_ids(cJSON_GetObjectItemCaseSensitive(doc, "prompt"), vocab, 2, where, "prompt", &ids, &n, err,
                  err_len);
    if (st == LS_OK) st = ls_batch_set_prompt(b, ids, n);
    free(ids);
    ids = NULL;
    size_t i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, resp) {
        if (st != LS_OK) break;
        snprintf(field, sizeof field, "responses[%zu]", i);
        st = ls_batch_json_ids(row, vocab, 1, where, field, &ids, &n, err, err_len);
        if (st == LS_OK) st = ls_batch_set_response(b, i, ids, n);
        free(ids);
        ids = NULL;
        i++;
    }
    if (st != LS_OK) {
        ls_batch_free(b);
        return st;
    }
    *out = b;
    return LS_OK;
}

ls_status ls_batch_json_lp_rows(const cJSON *arr, const ls_batch *b, const char *where, const char *name,
                                double **rows, char *err, size_t err_len) {
    char field[64];
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != b->G) {
        FIELD_ERR("%.400s: field '%s': must be an array of %zu arrays (one per response)", where, name, b->G);
        return LS_ERR_FORMAT;
    }
    size_t i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, arr) {
        snprintf(field, sizeof field, "%s[%zu]", name, i);
        ls_status st = ls_batch_json_reals(row, b->R[i], 1, where, field, rows[i], err, err_len);
        if (st != LS_OK) return st;
        i++;
    }
    return LS_OK;
}
