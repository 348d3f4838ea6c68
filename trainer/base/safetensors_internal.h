/* safetensors_internal.h - private helpers shared by safetensors_read.c,
 * safetensors_write.c and safetensors_digest.c.  Not part of the contract:
 * include only from those files (the public interface is safetensors.h).  Everything here is static
 * inline, so each file keeps its own private copy.
 *
 * Allocations made here (dup_str) are charged to LS_MEM_SCRATCH, like every
 * other buffer of the module. */
#ifndef LS_TRAINER_SAFETENSORS_INTERNAL_H
#define LS_TRAINER_SAFETENSORS_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors.h"

#define META_KEY "__metadata__"
#define MAX_JSON_INT 9007199254740992.0 /* 2^53: largest exactly held by cJSON */

/* The dtypes the module converts and writes. */
static inline int dtype_convertible(ls_safetensors_dtype d)
{
    return d == LS_SAFETENSORS_F32 || d == LS_SAFETENSORS_F64 || d == LS_SAFETENSORS_BF16;
}

/* printf into the caller's error buffer; a NULL/0 buffer is ignored. */
static inline void set_err(char *err, size_t err_len, const char *fmt, ...)
{
    if (err == NULL || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* A tracked copy of s (NULL on out of memory); release with ls_mem_free. */
static inline char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = ls_mem_alloc(LS_MEM_SCRATCH, n + 1);
    if (d != NULL)
        memcpy(d, s, n + 1);
    return d;
}

/* Product of shape[ndim] into *numel (1 for a scalar, 0 when any dimension
 * is 0).  Returns 0 when the product overflows uint64_t. */
static inline int shape_numel(const uint64_t *shape, size_t ndim, uint64_t *numel)
{
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            *numel = 0;
            return 1;
        }
    }
    uint64_t n = 1;
    for (size_t i = 0; i < ndim; i++) {
        if (n > UINT64_MAX / shape[i])
            return 0;
        n *= shape[i];
    }
    *numel = n;
    return 1;
}

/* Bit casts between IEEE values and their representations. */
static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t bits_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline double f64_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline uint64_t bits_from_f64(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* ---- the content digest (safetensors.h, "digests") ----------------------- */

/* 1 when metadata key k is one of the two digest entries. */
static inline int is_digest_key(const char *k)
{
    return strcmp(k, LS_SAFETENSORS_TENSOR_DIGESTS) == 0 || strcmp(k, LS_SAFETENSORS_CONTENT_DIGEST) == 0;
}

/* An empty content document; *meta and *tensors are its two objects.  NULL
 * on out of memory.  cJSON's trees use the system allocator (safetensors.h,
 * "Memory"). */
static inline cJSON *content_doc_new(cJSON **meta, cJSON **tensors)
{
    cJSON *doc = cJSON_CreateObject();
    *meta = doc ? cJSON_AddObjectToObject(doc, "metadata") : NULL;
    *tensors = doc ? cJSON_AddObjectToObject(doc, "tensors") : NULL;
    if (*meta == NULL || *tensors == NULL) {
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

/* Add one tensor's entry; 0 on out of memory. */
static inline int content_doc_add_tensor(cJSON *tensors, const char *name, ls_safetensors_dtype dtype,
                                         const uint64_t *shape, size_t ndim, const char *hex)
{
    cJSON *t = cJSON_AddObjectToObject(tensors, name);
    cJSON *sh = t ? cJSON_AddArrayToObject(t, "shape") : NULL;
    if (sh == NULL || cJSON_AddStringToObject(t, "dtype", ls_safetensors_dtype_name(dtype)) == NULL
        || cJSON_AddStringToObject(t, "sha256", hex) == NULL)
        return 0;
    for (size_t d = 0; d < ndim; d++) {
        cJSON *v = cJSON_CreateNumber((double)shape[d]); /* <= 2^53: exact */
        if (v == NULL || !cJSON_AddItemToArray(sh, v)) {
            cJSON_Delete(v);
            return 0;
        }
    }
    return 1;
}

/* SHA-256 hex of the document's canonical text.  LS_ERR_NOMEM, or the
 * printer's status (duplicate keys: LS_ERR_ARG). */
static inline ls_status content_doc_sha256(const cJSON *doc, char hex[LS_DIGEST_HEX_SIZE])
{
    char *text = NULL;
    size_t len = 0;
    ls_status st = ls_json_print_canonical(doc, &text, &len, NULL, 0);
    if (st == LS_OK)
        st = ls_digest_sha256_hex(text, len, hex);
    free(text);
    return st;
}

#endif
