/* safetensors_digest.c - see safetensors.h, "digests": checking a file's
 * tensor_sha256 and content_sha256 entries against its bytes.  (The writer's
 * side is in safetensors_write.c; the content document both digest is in
 * safetensors_internal.h.) */
#include "trainer/base/safetensors.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "trainer/base/safetensors_internal.h"

/* 64 lowercase hex digits. */
static int is_hex64(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == 64;
}

/* The recorded tensor map, checked for shape: an object of 64-hex strings
 * naming exactly the file's tensors.  *out is the caller's. */
static ls_status parse_map(const ls_safetensors *st, const char *text, cJSON **out, char *err, size_t err_len)
{
    char e2[256];
    *out = NULL;
    cJSON *map = NULL;
    if (ls_json_parse(text, strlen(text), LS_SAFETENSORS_TENSOR_DIGESTS, &map, e2, sizeof e2) != LS_OK) {
        set_err(err, err_len, "metadata '%s': %s", LS_SAFETENSORS_TENSOR_DIGESTS, e2);
        return LS_ERR_FORMAT;
    }
    if (!cJSON_IsObject(map)) {
        set_err(err, err_len, "metadata '%s': not a JSON object", LS_SAFETENSORS_TENSOR_DIGESTS);
        cJSON_Delete(map);
        return LS_ERR_FORMAT;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, map) {
        if (!cJSON_IsString(it) || !is_hex64(it->valuestring)) {
            set_err(err, err_len, "metadata '%s': the digest of tensor '%.120s' is not 64 lowercase hex digits",
                    LS_SAFETENSORS_TENSOR_DIGESTS, it->string);
            cJSON_Delete(map);
            return LS_ERR_FORMAT;
        }
        if (ls_safetensors_find(st, it->string) == NULL) {
            set_err(err, err_len, "metadata '%s' names tensor '%.120s', which the file does not hold",
                    LS_SAFETENSORS_TENSOR_DIGESTS, it->string);
            cJSON_Delete(map);
            return LS_ERR_FORMAT;
        }
    }
    for (size_t i = 0; i < ls_safetensors_count(st); i++) {
        const char *name = ls_safetensors_at(st, i)->name;
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(map, name))) {
            set_err(err, err_len, "tensor '%.120s' has no digest in metadata '%s'", name,
                    LS_SAFETENSORS_TENSOR_DIGESTS);
            cJSON_Delete(map);
            return LS_ERR_FORMAT;
        }
    }
    *out = map;
    return LS_OK;
}

ls_status ls_safetensors_verify_digests(const ls_safetensors *st, int *digested, char *err, size_t err_len)
{
    set_err(err, err_len, "%s", "");
    if (digested)
        *digested = 0;
    if (st == NULL || digested == NULL) {
        set_err(err, err_len, "ls_safetensors_verify_digests: NULL argument");
        return LS_ERR_ARG;
    }
    const char *tmap = ls_safetensors_metadata_get(st, LS_SAFETENSORS_TENSOR_DIGESTS);
    const char *content = ls_safetensors_metadata_get(st, LS_SAFETENSORS_CONTENT_DIGEST);
    if (tmap == NULL && content == NULL)
        return LS_OK;
    if (tmap == NULL || content == NULL) {
        set_err(err, err_len, "metadata '%s' without '%s'", tmap ? LS_SAFETENSORS_TENSOR_DIGESTS : LS_SAFETENSORS_CONTENT_DIGEST,
                tmap ? LS_SAFETENSORS_CONTENT_DIGEST : LS_SAFETENSORS_TENSOR_DIGESTS);
        return LS_ERR_FORMAT;
    }
    if (!is_hex64(content)) {
        set_err(err, err_len, "metadata '%s' is not 64 lowercase hex digits", LS_SAFETENSORS_CONTENT_DIGEST);
        return LS_ERR_FORMAT;
    }
    cJSON *map = NULL, *meta = NULL, *tensors = NULL, *doc = NULL;
    ls_status rc = parse_map(st, tmap, &map, err, err_len);
    if (rc != LS_OK)
        return rc;
    rc = LS_ERR_NOMEM;
    if ((doc = content_doc_new(&meta, &tensors)) == NULL)
        goto nomem;
    for (size_t i = 0; i < ls_safetensors_metadata_count(st); i++) {
        const char *k = NULL, *v = NULL;
        ls_safetensors_metadata_at(st, i, &k, &v);
        if (!is_digest_key(k) && cJSON_AddStringToObject(meta, k, v) == NULL)
            goto nomem;
    }
    char hex[LS_DIGEST_HEX_SIZE];
    for (size_t i = 0; i < ls_safetensors_count(st); i++) {
        const ls_safetensors_tensor *t = ls_safetensors_at(st, i);
        if ((rc = ls_digest_sha256_hex(t->data, t->nbytes, hex)) != LS_OK) {
            set_err(err, err_len, "tensor '%.120s': cannot digest its data: %s", t->name, ls_status_str(rc));
            goto cleanup;
        }
        const char *want = cJSON_GetObjectItemCaseSensitive(map, t->name)->valuestring;
        if (strcmp(hex, want) != 0) {
            set_err(err, err_len,
                    "tensor '%.120s': its data (%zu bytes) does not match its sha256 in metadata '%s' "
                    "(recorded %.12s..., computed %.12s...): the file is corrupt or was changed",
                    t->name, t->nbytes, LS_SAFETENSORS_TENSOR_DIGESTS, want, hex);
            rc = LS_ERR_CORRUPT;
            goto cleanup;
        }
        rc = LS_ERR_NOMEM;
        if (!content_doc_add_tensor(tensors, t->name, t->dtype, t->shape, t->ndim, hex))
            goto nomem;
    }
    if ((rc = content_doc_sha256(doc, hex)) != LS_OK) {
        set_err(err, err_len, "cannot digest the content: %s", ls_status_str(rc));
        goto cleanup;
    }
    if (strcmp(hex, content) != 0) {
        set_err(err, err_len,
                "metadata '%s' does not match the file's content (recorded %.12s..., computed %.12s...): every "
                "tensor matches its digest, so a metadata value, a dtype or a shape was changed",
                LS_SAFETENSORS_CONTENT_DIGEST, content, hex);
        rc = LS_ERR_CORRUPT;
        goto cleanup;
    }
    *digested = 1;
    rc = LS_OK;
    goto cleanup;
nomem:
    set_err(err, err_len, "out of memory checking the digests");
    rc = LS_ERR_NOMEM;
cleanup:
    cJSON_Delete(doc);
    cJSON_Delete(map);
    return rc;
}
