/* batch.c - GRPO step inputs, the rollouts reader and the batch dump. */
#include "trainer/batch.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/atomic_file.h"

ls_status ls_batch_alloc(ls_batch **out, size_t G) {
    ls_batch *b = calloc(1, sizeof *b);
    if (!b) return LS_ERR_NOMEM;
    b->G = G;
    b->resp = calloc(G, sizeof *b->resp);
    b->R = calloc(G, sizeof *b->R);
    b->rewards = calloc(G, sizeof *b->rewards);
    b->adv = calloc(G, sizeof *b->adv);
    b->old_lp = calloc(G, sizeof *b->old_lp);
    b->ref_lp = calloc(G, sizeof *b->ref_lp);
    if (!b->resp || !b->R || !b->rewards || !b->adv || !b->old_lp || !b->ref_lp) {
        ls_batch_free(b);
        return LS_ERR_NOMEM;
    }
    *out = b;
    return LS_OK;
}

ls_status ls_batch_set_prompt(ls_batch *b, const int32_t *ids, size_t P) {
    int32_t *np = malloc(P * sizeof *np);
    if (!np) return LS_ERR_NOMEM;
    memcpy(np, ids, P * sizeof *np);
    free(b->prompt);
    b->prompt = np;
    b->P = P;
    return LS_OK;
}

ls_status ls_batch_set_response(ls_batch *b, size_t i, const int32_t *ids, size_t R) {
    int32_t *nr = malloc(R * sizeof *nr);
    double *o = calloc(R, sizeof *o), *r = calloc(R, sizeof *r);
    if (!nr || !o || !r) {
        free(nr);
        free(o);
        free(r);
        return LS_ERR_NOMEM;
    }
    memcpy(nr, ids, R * sizeof *nr);
    free(b->resp[i]);
    free(b->old_lp[i]);
    free(b->ref_lp[i]);
    b->resp[i] = nr;
    b->old_lp[i] = o;
    b->ref_lp[i] = r;
    b->R[i] = R;
    return LS_OK;
}

void ls_batch_free(ls_batch *b) {
    if (!b) return;
    for (size_t i = 0; i < b->G; i++) {
        if (b->resp) free(b->resp[i]);
        if (b->old_lp) free(b->old_lp[i]);
        if (b->ref_lp) free(b->ref_lp[i]);
    }
    free(b->resp);
    free(b->R);
    free(b->rewards);
    free(b->adv);
    free(b->old_lp);
    free(b->ref_lp);
    free(b->prompt);
    free(b);
}

static ls_status read_ids(const cJSON *arr, int vocab, int32_t **out, size_t *n, const char *where,
                          char *err, size_t err_len) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1) {
        snprintf(err, err_len, "%s: must be a non-empty array of token ids", where);
        return LS_ERR_FORMAT;
    }
    size_t len = (size_t)cJSON_GetArraySize(arr), i = 0;
    int32_t *ids = malloc(len * sizeof *ids);
    if (!ids) return LS_ERR_NOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble >= vocab) {
            snprintf(err, err_len, "%s[%zu]: not a token id in [0, %d)", where, i, vocab);
            free(ids);
            return LS_ERR_FORMAT;
        }
        ids[i++] = (int32_t)it->valuedouble;
    }
    *out = ids;
    *n = len;
    return LS_OK;
}

static ls_status parse_rollout(ls_batch **out, const cJSON *doc, int vocab, const char *where /* < 480 chars */,
                               char *err, size_t err_len) {
    char at[1024];
    ls_batch *b = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    ls_status st;
    if (!cJSON_IsObject(doc)) {
        snprintf(err, err_len, "%s: not a JSON object", where);
        return LS_ERR_FORMAT;
    }
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(doc, "responses");
    const cJSON *rew = cJSON_GetObjectItemCaseSensitive(doc, "rewards");
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(doc, "old_logprobs");
    if (!cJSON_IsArray(resp) || cJSON_GetArraySize(resp) < 1) {
        snprintf(err, err_len, "%s: field 'responses': must be a non-empty array", where);
        return LS_ERR_FORMAT;
    }
    size_t G = (size_t)cJSON_GetArraySize(resp);
    if (!cJSON_IsArray(rew) || (size_t)cJSON_GetArraySize(rew) != G) {
        snprintf(err, err_len, "%s: field 'rewards': must be an array of %zu numbers", where, G);
        return LS_ERR_FORMAT;
    }
    if (old && (!cJSON_IsArray(old) || (size_t)cJSON_GetArraySize(old) != G)) {
        snprintf(err, err_len, "%s: field 'old_logprobs': must be an array of %zu arrays", where, G);
        return LS_ERR_FORMAT;
    }
    if ((st = ls_batch_alloc(&b, G)) != LS_OK) return st;
    snprintf(at, sizeof at, "%.480s: field 'prompt'", where);
    if ((st = read_ids(cJSON_GetObjectItemCaseSensitive(doc, "prompt"), vocab, &ids, &n, at, err, err_len)))
        goto fail;
    if (n < 2) {
        snprintf(err, err_len, "%s: field 'prompt': needs at least 2 tokens", where);
        st = LS_ERR_FORMAT;
        goto fail;
    }
    st = ls_batch_set_prompt(b, ids, n);
    free(ids);
    ids = NULL;
    if (st) goto fail;
    for (size_t i = 0; i < G; i++) {
        snprintf(at, sizeof at, "%.480s: field 'responses[%zu]'", where, i);
        if ((st = read_ids(cJSON_GetArrayItem(resp, (int)i), vocab, &ids, &n, at, err, err_len))) goto fail;
        st = ls_batch_set_response(b, i, ids, n);
        free(ids);
        ids = NULL;
        if (st) goto fail;
        const cJSON *r = cJSON_GetArrayItem(rew, (int)i);
        if (!cJSON_IsNumber(r) || !isfinite(r->valuedouble)) {
            snprintf(err, err_len, "%s: field 'rewards[%zu]': not a finite number", where, i);
            st = LS_ERR_FORMAT;
            goto fail;
        }
        b->rewards[i] = r->valuedouble;
        if (old) {
            const cJSON *row = cJSON_GetArrayItem(old, (int)i), *x;
            if (!cJSON_IsArray(row) || (size_t)cJSON_GetArraySize(row) != n) {
                snprintf(err, err_len, "%s: field 'old_logprobs[%zu]': must have %zu numbers", where, i, n);
                st = LS_ERR_FORMAT;
                goto fail;
            }
            size_t t = 0;
            cJSON_ArrayForEach(x, row) {
                if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble > 0) {
                    snprintf(err, err_len, "%s: field 'old_logprobs[%zu][%zu]': not a finite log-prob <= 0",
                             where, i, t);
                    st = LS_ERR_FORMAT;
                    goto fail;
                }
                b->old_lp[i][t++] = x->valuedouble;
            }
        }
    }
    b->old_supplied = old != NULL;
    *out = b;
    return LS_OK;
fail:
    free(ids);
    ls_batch_free(b);
    return st;
}

ls_status ls_batch_read_rollouts(ls_batch **out, const char *path, int vocab, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, f);
    fclose(f);
    if (len <= 0) {
        free(line);
        snprintf(err, err_len, "%s: line 1: empty file", path);
        return LS_ERR_FORMAT;
    }
    cJSON *doc = cJSON_ParseWithLength(line, (size_t)len);
    free(line);
    char where[480];
    snprintf(where, sizeof where, "%.400s: line 1", path);
    if (!doc) {
        snprintf(err, err_len, "%s: not valid JSON", where);
        return LS_ERR_FORMAT;
    }
    ls_status st = parse_rollout(out, doc, vocab, where, err, err_len);
    cJSON_Delete(doc);
    return st;
}

static cJSON *num_array(const double *x, size_t n, int *nonfinite) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        if (!isfinite(x[i])) *nonfinite = 1;
        cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    }
    return a;
}

static cJSON *id_array(const int32_t *x, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

ls_status ls_batch_write_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                              const char *path, char *err, size_t err_len) {
    int nonfinite = 0;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddItemToObject(doc, "config", ls_config_to_json(cfg, obj));
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
    char *text = NULL;
    if (nonfinite) {
        snprintf(err, err_len, "%s: batch holds a non-finite number; not written", path);
        st = LS_ERR_NONFINITE;
    } else if (!(text = cJSON_PrintUnformatted(doc))) {
        st = LS_ERR_NOMEM;
    } else {
        st = ls_atomic_write(path, text, strlen(text), err, err_len);
    }
    free(text);
    cJSON_Delete(doc);
    return st;
}
