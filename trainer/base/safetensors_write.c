/* safetensors_write.c - see safetensors.h: the writer (collect tensors,
 * then write one deterministic file atomically).  The dtype table and BF16
 * rounding are in safetensors_read.c, reached through the public API;
 * helpers both files use are in safetensors_internal.h. */
#include "trainer/base/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors_internal.h"

/* ---- writer -------------------------------------------------------------- */

typedef struct {
    char *name;
    ls_safetensors_dtype dtype;
    uint64_t *shape; /* [ndim] */
    size_t ndim;
    uint64_t numel;
    const void *data; /* borrowed */
    int src_f64;      /* data is double (else float) */
} writer_entry;

struct ls_safetensors_writer {
    writer_entry *e;
    size_t n, cap;
    char **meta_key, **meta_val;
    size_t n_meta, cap_meta;
};

ls_status ls_safetensors_writer_init(ls_safetensors_writer **out)
{
    if (out == NULL)
        return LS_ERR_ARG;
    *out = ls_mem_alloc(LS_MEM_SCRATCH, sizeof **out);
    return *out == NULL ? LS_ERR_NOMEM : LS_OK;
}

void ls_safetensors_writer_free(ls_safetensors_writer *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->n; i++) {
        ls_mem_free(w->e[i].name);
        ls_mem_free(w->e[i].shape);
    }
    ls_mem_free(w->e);
    for (size_t i = 0; i < w->n_meta; i++) {
        ls_mem_free(w->meta_key[i]);
        ls_mem_free(w->meta_val[i]);
    }
    ls_mem_free(w->meta_key);
    ls_mem_free(w->meta_val);
    ls_mem_free(w);
}

static void store_le(unsigned char *p, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Grow *arr (elements of `size` bytes) so that it holds at least need. */
static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 1;
    size_t ncap = *cap ? *cap * 2 : 16;
    if (ncap < need)
        ncap = need;
    if (ncap > SIZE_MAX / size)
        return 0;
    void *p = ls_mem_realloc(LS_MEM_SCRATCH, *arr, ncap * size);
    if (p == NULL)
        return 0;
    *arr = p;
    *cap = ncap;
    return 1;
}

static ls_status writer_add(ls_safetensors_writer *w, const char *name,
                            ls_safetensors_dtype dtype, const uint64_t *shape, size_t ndim,
                            const void *data, int src_f64)
{
    if (w == NULL || name == NULL || name[0] == '\0' || strcmp(name, META_KEY) == 0
        || (shape == NULL && ndim != 0))
        return LS_ERR_ARG;
    if (!dtype_convertible(dtype))
        return LS_ERR_UNSUPPORTED;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return LS_ERR_ARG;
    /* the same limits the reader enforces: dims and byte offsets <= 2^53 */
    for (size_t i = 0; i < ndim; i++)
        if (shape[i] > (uint64_t)MAX_JSON_INT)
            return LS_ERR_ARG;
    uint64_t numel;
    if (!shape_numel(shape, ndim, &numel))
        return LS_ERR_ARG;
    if (numel > (uint64_t)MAX_JSON_INT / 8 || (data == NULL && numel != 0))
        return LS_ERR_ARG;
    if (!grow((void **)&w->e, &w->cap, w->n + 1, sizeof *w->e))
        return LS_ERR_NOMEM;
    writer_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = dup_str(name);
    if (ndim > 0)
        e->shape = ls_mem_alloc(LS_MEM_SCRATCH, ndim * sizeof *shape);
    if (e->name == NULL || (ndim > 0 && e->shape == NULL)) {
        ls_mem_free(e->name);
        ls_mem_free(e->shape);
        return LS_ERR_NOMEM;
    }
    if (ndim > 0)
        memcpy(e->shape, shape, ndim * sizeof *shape);
    e->ndim = ndim;
    e->dtype = dtype;
    e->numel = numel;
    e->data = data;
    e->src_f64 = src_f64;
    w->n++;
    return LS_OK;
}

ls_status ls_safetensors_writer_add_f64(ls_safetensors_writer *w, const char *name,
                                        ls_safetensors_dtype dtype, const uint64_t *shape,
                                        size_t ndim, const double *data)
{
    return writer_add(w, name, dtype, shape, ndim, data, 1);
}

ls_status ls_safetensors_writer_add_f32(ls_safetensors_writer *w, const char *name,
                                        ls_safetensors_dtype dtype, const uint64_t *shape,
                                        size_t ndim, const float *data)
{
    return writer_add(w, name, dtype, shape, ndim, data, 0);
}

ls_status ls_safetensors_writer_set_metadata(ls_safetensors_writer *w, const char *key,
                                             const char *value)
{
    if (w == NULL || key == NULL || value == NULL)
        return LS_ERR_ARG;
    char *v = dup_str(value);
    if (v == NULL)
        return LS_ERR_NOMEM;
    for (size_t i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta_key[i], key) == 0) {
            ls_mem_free(w->meta_val[i]);
            w->meta_val[i] = v;
            return LS_OK;
        }
    }
    size_t cap_key = w->cap_meta;
    char *k = dup_str(key);
    if (k == NULL || !grow((void **)&w->meta_key, &cap_key, w->n_meta + 1, sizeof(char *))
        || !grow((void **)&w->meta_val, &w->cap_meta, w->n_meta + 1, sizeof(char *))) {
        ls_mem_free(k);
        ls_mem_free(v);
        return LS_ERR_NOMEM;
    }
    w->meta_key[w->n_meta] = k;
    w->meta_val[w->n_meta] = v;
    w->n_meta++;
    return LS_OK;
}

static int entry_ptr_cmp(const void *a, const void *b)
{
    const writer_entry *x = *(const writer_entry *const *)a;
    const writer_entry *y = *(const writer_entry *const *)b;
    return strcmp(x->name, y->name);
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

static cJSON *json_uint_raw(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_CreateRaw(buf); /* integers printed exactly, never as 1e+15 */
}

/* Header JSON (unpadded) for the entries in `order`; NULL on out of memory. */
static char *build_header(const ls_safetensors_writer *w, writer_entry *const *order)
{
    char *text = NULL;
    char **keys = NULL;
    cJSON *root = cJSON_CreateObject();
    if (root == NULL)
        goto cleanup;
    if (w->n_meta > 0) {
        /* sort pointers to the keys; a key's index gives its value */
        cJSON *m = cJSON_AddObjectToObject(root, META_KEY);
        keys = ls_mem_alloc(LS_MEM_SCRATCH, w->n_meta * sizeof *keys);
        if (m == NULL || keys == NULL)
            goto cleanup;
        for (size_t i = 0; i < w->n_meta; i++)
            keys[i] = (char *)&w->meta_key[i];
        qsort(keys, w->n_meta, sizeof *keys, str_ptr_cmp);
        for (size_t i = 0; i < w->n_meta; i++) {
            size_t idx = (size_t)((char **)keys[i] - w->meta_key);
            if (cJSON_AddStringToObject(m, w->meta_key[idx], w->meta_val[idx]) == NULL)
                goto cleanup;
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const writer_entry *e = order[i];
        uint64_t nbytes = e->numel * ls_safetensors_dtype_size(e->dtype);
        /* key order as the reference writer: dtype, shape, data_offsets */
        cJSON *t = cJSON_AddObjectToObject(root, e->name);
        if (t == NULL
            || cJSON_AddStringToObject(t, "dtype", ls_safetensors_dtype_name(e->dtype)) == NULL)
            goto cleanup;
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
        if (shape == NULL || offs == NULL)
            goto cleanup;
        for (size_t d = 0; d < e->ndim; d++) {
            cJSON *v = json_uint_raw(e->shape[d]);
            if (v == NULL || !cJSON_AddItemToArray(shape, v))
                goto cleanup;
        }
        cJSON *b = json_uint_raw(off), *x = json_uint_raw(off + nbytes);
        if (b == NULL || !cJSON_AddItemToArray(offs, b) || x == NULL
            || !cJSON_AddItemToArray(offs, x)) {
            cJSON_Delete(x);
            goto cleanup;
        }
        off += nbytes;
    }
    text = cJSON_PrintUnformatted(root);
cleanup:
    ls_mem_free(keys);
    cJSON_Delete(root);
    return text;
}

/* Where the file's bytes go: a FILE (the write) or a digest (the digests).
 * put returns 0 on failure. */
typedef struct {
    int (*put)(void *user, const void *bytes, size_t n);
    void *user;
} byte_sink;

static int put_file(void *user, const void *bytes, size_t n)
{
    return fwrite(bytes, 1, n, (FILE *)user) == n;
}

static int put_digest(void *user, const void *bytes, size_t n)
{
    return ls_digest_stream_update((ls_digest_stream *)user, bytes, n) == LS_OK;
}

/* Convert entry e into its stored little-endian bytes, chunk by chunk. */
static int emit_entry(const byte_sink *out, const writer_entry *e, unsigned char *buf, size_t buf_elems)
{
    size_t es = ls_safetensors_dtype_size(e->dtype);
    for (uint64_t i0 = 0; i0 < e->numel; i0 += buf_elems) {
        size_t m = (size_t)(e->numel - i0 < buf_elems ? e->numel - i0 : buf_elems);
        for (size_t j = 0; j < m; j++) {
            size_t i = (size_t)i0 + j;
            double d = e->src_f64 ? ((const double *)e->data)[i] : 0.0;
            float s = e->src_f64 ? 0.0f : ((const float *)e->data)[i];
            unsigned char *p = buf + j * es;
            switch (e->dtype) {
            case LS_SAFETENSORS_F64:
                store_le(p, bits_from_f64(e->src_f64 ? d : (double)s), 8);
                break;
            case LS_SAFETENSORS_F32:
                store_le(p, bits_from_f32(e->src_f64 ? (float)d : s), 4);
                break;
            default: /* BF16 */
                store_le(p, e->src_f64 ? ls_safetensors_bf16_from_f64(d)
                                       : ls_safetensors_bf16_from_f32(s), 2);
                break;
            }
        }
        if (!out->put(out->user, buf, es * m))
            return 0;
    }
    return 1;
}

/* The entries in name order (*order NULL when there are none). */
static int sorted_entries(const ls_safetensors_writer *w, writer_entry ***order)
{
    *order = NULL;
    if (w->n == 0)
        return 1;
    *order = ls_mem_alloc(LS_MEM_SCRATCH, w->n * sizeof **order);
    if (*order == NULL)
        return 0;
    for (size_t i = 0; i < w->n; i++)
        (*order)[i] = &w->e[i];
    qsort(*order, w->n, sizeof **order, entry_ptr_cmp);
    return 1;
}

/* The whole file into out: length prefix, header padded to 8 bytes, data.
 * LS_OK, LS_ERR_NOMEM, or LS_ERR_IO when out refused bytes. */
static ls_status emit_file(const ls_safetensors_writer *w, const byte_sink *out)
{
    const size_t buf_elems = 8192;
    writer_entry **order = NULL;
    char *json = NULL;
    unsigned char *buf = ls_mem_alloc(LS_MEM_SCRATCH, buf_elems * 8);
    ls_status rc = LS_ERR_NOMEM;
    if (buf == NULL || !sorted_entries(w, &order) || (json = build_header(w, order)) == NULL)
        goto cleanup;
    size_t jlen = strlen(json);
    size_t pad = (8 - jlen % 8) % 8;
    unsigned char prefix[8];
    store_le(prefix, (uint64_t)(jlen + pad), 8);
    rc = LS_ERR_IO;
    if (!out->put(out->user, prefix, 8) || !out->put(out->user, json, jlen)
        || !out->put(out->user, "        ", pad))
        goto cleanup;
    for (size_t i = 0; i < w->n; i++)
        if (!emit_entry(out, order[i], buf, buf_elems))
            goto cleanup;
    rc = LS_OK;
cleanup:
    cJSON_free(json);
    ls_mem_free(buf);
    ls_mem_free(order);
    return rc;
}

/* fsync the directory holding `path` so the rename is durable; best effort. */
static void sync_parent_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

ls_status ls_safetensors_writer_write(const ls_safetensors_writer *w, const char *path,
                                      char *err, size_t err_len)
{
    set_err(err, err_len, "%s", "");
    if (w == NULL || path == NULL) {
        set_err(err, err_len, "ls_safetensors_writer_write: NULL %s", w == NULL ? "w" : "path");
        return LS_ERR_ARG;
    }
    ls_status rc = LS_OK;
    FILE *f = NULL;
    int tmp_exists = 0;
    size_t tmp_len = strlen(path) + 32;
    char *tmp = ls_mem_alloc(LS_MEM_SCRATCH, tmp_len);
    if (tmp == NULL)
        goto nomem;
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());

    const char *step = "open";
    f = fopen(tmp, "wb");
    if (f == NULL)
        goto io;
    tmp_exists = 1;
    step = "write";
    byte_sink out = {put_file, f};
    rc = emit_file(w, &out);
    if (rc == LS_ERR_NOMEM)
        goto nomem;
    if (rc != LS_OK)
        goto io;
    step = "flush";
    if (fflush(f) != 0)
        goto io;
    step = "fsync";
    if (fsync(fileno(f)) != 0)
        goto io;
    step = "close";
    int cr = fclose(f);
    f = NULL;
    if (cr != 0)
        goto io;
    step = "rename";
    if (rename(tmp, path) != 0)
        goto io;
    tmp_exists = 0;
    sync_parent_dir(path);
    goto cleanup;

io:
    set_err(err, err_len, "%s: %s of %s failed: %s", path, step, tmp, strerror(errno));
    rc = LS_ERR_IO;
    goto cleanup;
nomem:
    set_err(err, err_len, "%s: out of memory building the file", path);
    rc = LS_ERR_NOMEM;
cleanup:
    if (f != NULL)
        fclose(f);
    if (tmp_exists)
        unlink(tmp);
    ls_mem_free(tmp);
    return rc;
}

ls_status ls_safetensors_writer_sha256(const ls_safetensors_writer *w, char hex[65], char *err, size_t err_len)
{
    set_err(err, err_len, "%s", "");
    if (w == NULL || hex == NULL) {
        set_err(err, err_len, "ls_safetensors_writer_sha256: NULL %s", w == NULL ? "w" : "hex");
        return LS_ERR_ARG;
    }
    ls_digest_stream *d = NULL;
    ls_status rc = ls_digest_stream_open(&d);
    if (rc == LS_OK) {
        byte_sink out = {put_digest, d};
        rc = emit_file(w, &out);
        if (rc == LS_ERR_IO)
            rc = LS_ERR_INTERNAL; /* the digest refused bytes: libcrypto failed */
    }
    if (rc == LS_OK)
        rc = ls_digest_stream_final_hex(d, hex);
    ls_digest_stream_free(d);
    if (rc != LS_OK)
        set_err(err, err_len, "cannot digest the file's bytes: %s", ls_status_str(rc));
    return rc;
}

/* The digest of one entry's stored bytes. */
static ls_status entry_sha256(const writer_entry *e, unsigned char *buf, size_t buf_elems,
                              char hex[LS_DIGEST_HEX_SIZE])
{
    ls_digest_stream *d = NULL;
    ls_status rc = ls_digest_stream_open(&d);
    if (rc == LS_OK) {
        byte_sink out = {put_digest, d};
        rc = emit_entry(&out, e, buf, buf_elems) ? ls_digest_stream_final_hex(d, hex) : LS_ERR_INTERNAL;
    }
    ls_digest_stream_free(d);
    return rc;
}

ls_status ls_safetensors_writer_set_digests(ls_safetensors_writer *w)
{
    if (w == NULL)
        return LS_ERR_ARG;
    const size_t buf_elems = 8192;
    unsigned char *buf = ls_mem_alloc(LS_MEM_SCRATCH, buf_elems * 8);
    cJSON *meta = NULL, *tensors = NULL, *doc = content_doc_new(&meta, &tensors), *map = cJSON_CreateObject();
    char *map_text = NULL, hex[LS_DIGEST_HEX_SIZE];
    ls_status rc = LS_ERR_NOMEM;
    if (buf == NULL || doc == NULL || map == NULL)
        goto cleanup;
    for (size_t i = 0; i < w->n_meta; i++)
        if (!is_digest_key(w->meta_key[i]) && cJSON_AddStringToObject(meta, w->meta_key[i], w->meta_val[i]) == NULL)
            goto cleanup;
    for (size_t i = 0; i < w->n; i++) {
        const writer_entry *e = &w->e[i];
        if ((rc = entry_sha256(e, buf, buf_elems, hex)) != LS_OK)
            goto cleanup;
        rc = LS_ERR_NOMEM;
        if (cJSON_AddStringToObject(map, e->name, hex) == NULL
            || !content_doc_add_tensor(tensors, e->name, e->dtype, e->shape, e->ndim, hex))
            goto cleanup;
    }
    if ((rc = ls_json_print_canonical(map, &map_text, NULL, NULL, 0)) != LS_OK
        || (rc = content_doc_sha256(doc, hex)) != LS_OK
        || (rc = ls_safetensors_writer_set_metadata(w, LS_SAFETENSORS_TENSOR_DIGESTS, map_text)) != LS_OK)
        goto cleanup;
    rc = ls_safetensors_writer_set_metadata(w, LS_SAFETENSORS_CONTENT_DIGEST, hex);
cleanup:
    free(map_text);
    cJSON_Delete(map);
    cJSON_Delete(doc);
    ls_mem_free(buf);
    return rc;
}
