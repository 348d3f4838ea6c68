/* safetensors_read.c - see safetensors.h: the dtype table, BF16 rounding,
 * and the reader (header validation, lookup, conversion to float/double).
 * The writer is in safetensors_write.c; helpers both use are in
 * safetensors_internal.h. */
#include "trainer/base/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors_internal.h"

/* ---- dtypes ---------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[LS_SAFETENSORS_DTYPE_COUNT] = {
    [LS_SAFETENSORS_F32] = {"F32", 4},         [LS_SAFETENSORS_F64] = {"F64", 8},
    [LS_SAFETENSORS_BF16] = {"BF16", 2},       [LS_SAFETENSORS_F16] = {"F16", 2},
    [LS_SAFETENSORS_BOOL] = {"BOOL", 1},       [LS_SAFETENSORS_U8] = {"U8", 1},
    [LS_SAFETENSORS_I8] = {"I8", 1},           [LS_SAFETENSORS_F8_E4M3] = {"F8_E4M3", 1},
    [LS_SAFETENSORS_F8_E5M2] = {"F8_E5M2", 1}, [LS_SAFETENSORS_I16] = {"I16", 2},
    [LS_SAFETENSORS_U16] = {"U16", 2},         [LS_SAFETENSORS_I32] = {"I32", 4},
    [LS_SAFETENSORS_U32] = {"U32", 4},         [LS_SAFETENSORS_I64] = {"I64", 8},
    [LS_SAFETENSORS_U64] = {"U64", 8},
};

static int dtype_valid(ls_safetensors_dtype d)
{
    return (int)d >= 0 && d < LS_SAFETENSORS_DTYPE_COUNT;
}

const char *ls_safetensors_dtype_name(ls_safetensors_dtype dtype)
{
    return dtype_valid(dtype) ? dtypes[dtype].name : "unknown";
}

size_t ls_safetensors_dtype_size(ls_safetensors_dtype dtype)
{
    return dtype_valid(dtype) ? dtypes[dtype].size : 0;
}

/* ---- byte order ---------------------------------------------------------- */

static uint64_t load_le(const unsigned char *p, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = bytes; i-- > 0;)
        v = (v << 8) | p[i];
    return v;
}

/* ---- BF16 ---------------------------------------------------------------- */

/* RNE on the float's bit pattern; NaN handled separately (quieted). */
static uint16_t bf16_round_bits(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t ls_safetensors_bf16_from_f32(float x)
{
    return bf16_round_bits(bits_from_f32(x));
}

uint16_t ls_safetensors_bf16_from_f64(double x)
{
    if (x != x)
        return (uint16_t)(((bits_from_f64(x) >> 48) & 0x8000u) | 0x7fc0u);
    /* Round to float with round-to-odd, then RNE to BF16: float keeps 16
     * more significand bits than BF16 (at every exponent, subnormals
     * included), and round-to-odd with >= 2 extra bits makes the second
     * rounding exact-as-if-once.  Overflow follows IEEE (Annex F): a double
     * beyond float range converts to +-Inf, stepped back to +-FLT_MAX with
     * its last bit set, which then rounds to +-Inf as it should. */
    float f = (float)x;
    uint32_t u = bits_from_f32(f);
    if ((double)f != x) {
        int too_big = x > 0 ? (double)f > x : (double)f < x;
        if (too_big)
            u -= 1; /* one step toward zero (sign-magnitude) */
        u |= 1;     /* sticky: inexact */
    }
    return bf16_round_bits(u);
}

float ls_safetensors_bf16_to_f32(uint16_t b)
{
    return f32_from_bits((uint32_t)b << 16);
}

/* ---- reader -------------------------------------------------------------- */

struct ls_safetensors {
    unsigned char *owned;        /* file bytes when opened from a path */
    ls_safetensors_tensor *t;    /* [n] sorted by name */
    size_t n;
    char **meta_key, **meta_val; /* [n_meta] sorted by key */
    size_t n_meta;
};

void ls_safetensors_free(ls_safetensors *st)
{
    if (st == NULL)
        return;
    for (size_t i = 0; i < st->n; i++) {
        ls_mem_free((void *)st->t[i].name);
        ls_mem_free((void *)st->t[i].shape);
    }
    ls_mem_free(st->t);
    for (size_t i = 0; i < st->n_meta; i++) {
        ls_mem_free(st->meta_key[i]);
        ls_mem_free(st->meta_val[i]);
    }
    ls_mem_free(st->meta_key);
    ls_mem_free(st->meta_val);
    ls_mem_free(st->owned);
    ls_mem_free(st);
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF)
 * and no "\u0000" escape inside a string (cJSON would cut the string there,
 * silently changing a name).  Returns NULL or a description. */
static const char *check_header_text(const unsigned char *s, size_t n)
{
    int in_string = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (in_string && c == '\\') {
                if (i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0)
                    return "a string contains the escape \\u0000";
                i += 2; /* the escaped character is ASCII in valid JSON */
                continue;
            }
            if (c == '"')
                in_string = !in_string;
            i++;
            continue;
        }
        size_t len;
        unsigned cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return "invalid UTF-8";
        }
        if (n - i < len)
            return "invalid UTF-8";
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return "invalid UTF-8";
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return "invalid UTF-8";
        i += len;
    }
    return NULL;
}

/* A JSON number holding an integer in [0, 2^53]. */
static int json_uint(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return 0;
    double v = item->valuedouble;
    if (!(v >= 0.0 && v <= MAX_JSON_INT))
        return 0;
    uint64_t u = (uint64_t)v;
    if ((double)u != v)
        return 0;
    *out = u;
    return 1;
}

static int name_cmp(const void *a, const void *b)
{
    const ls_safetensors_tensor *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Order by (offset, nbytes); name breaks ties so the order is total. */
static int offset_cmp(const void *a, const void *b)
{
    const ls_safetensors_tensor *x = *(const ls_safetensors_tensor *const *)a;
    const ls_safetensors_tensor *y = *(const ls_safetensors_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Validate one tensor entry and fill *t (name and shape allocated).
 * data_len bounds the offsets. */
static ls_status parse_tensor(const cJSON *e, const unsigned char *data, size_t data_len,
                              ls_safetensors_tensor *t, char *err, size_t err_len)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e)) {
        set_err(err, err_len, "tensor '%s': entry is not an object", name);
        return LS_ERR_FORMAT;
    }
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *k = e->child; k != NULL; k = k->next) {
        const cJSON **slot = strcmp(k->string, "dtype") == 0          ? &dtype
                             : strcmp(k->string, "shape") == 0        ? &shape
                             : strcmp(k->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (slot == NULL) {
            set_err(err, err_len, "tensor '%s': unknown key '%s'", name, k->string);
            return LS_ERR_FORMAT;
        }
        if (*slot != NULL) {
            set_err(err, err_len, "tensor '%s': duplicate key '%s'", name, k->string);
            return LS_ERR_FORMAT;
        }
        *slot = k;
    }
    if (dtype == NULL || shape == NULL || offs == NULL) {
        set_err(err, err_len, "tensor '%s': missing %s", name,
                dtype == NULL ? "dtype" : shape == NULL ? "shape" : "data_offsets");
        return LS_ERR_FORMAT;
    }
    if (!cJSON_IsString(dtype)) {
        set_err(err, err_len, "tensor '%s': dtype is not a string", name);
        return LS_ERR_FORMAT;
    }
    int d = 0;
    while (d < LS_SAFETENSORS_DTYPE_COUNT && strcmp(dtypes[d].name, dtype->valuestring) != 0)
        d++;
    if (d == LS_SAFETENSORS_DTYPE_COUNT) {
        set_err(err, err_len, "tensor '%s': unknown dtype '%s'", name, dtype->valuestring);
        return LS_ERR_FORMAT;
    }
    t->dtype = (ls_safetensors_dtype)d;

    if (!cJSON_IsArray(shape)) {
        set_err(err, err_len, "tensor '%s': shape is not an array", name);
        return LS_ERR_FORMAT;
    }
    size_t ndim = (size_t)cJSON_GetArraySize(shape);
    uint64_t *dims = NULL;
    if (ndim > 0) {
        dims = ls_mem_alloc(LS_MEM_SCRATCH, ndim * sizeof *dims);
        if (dims == NULL) {
            set_err(err, err_len, "tensor '%s': out of memory for its shape", name);
            return LS_ERR_NOMEM;
        }
    }
    t->shape = dims;
    t->ndim = ndim;
    size_t i = 0;
    for (const cJSON *v = shape->child; v != NULL; v = v->next, i++) {
        if (!json_uint(v, &dims[i])) {
            set_err(err, err_len,
                    "tensor '%s': shape[%zu] is not a non-negative integer <= 2^53", name, i);
            return LS_ERR_FORMAT;
        }
    }
    uint64_t numel;
    if (!shape_numel(dims, ndim, &numel)) {
        set_err(err, err_len, "tensor '%s': element count overflows", name);
        return LS_ERR_FORMAT;
    }
    size_t esize = dtypes[d].size;
    if (numel > SIZE_MAX / esize) {
        set_err(err, err_len, "tensor '%s': byte count overflows", name);
        return LS_ERR_FORMAT;
    }
    t->numel = numel;
    t->nbytes = (size_t)numel * esize;

    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &begin)
        || !json_uint(offs->child->next, &end)) {
        set_err(err, err_len,
                "tensor '%s': data_offsets is not two non-negative integers <= 2^53", name);
        return LS_ERR_FORMAT;
    }
    if (begin > end) {
        set_err(err, err_len, "tensor '%s': data_offsets begin %" PRIu64 " > end %" PRIu64,
                name, begin, end);
        return LS_ERR_FORMAT;
    }
    if (end > data_len) {
        set_err(err, err_len,
                "tensor '%s': data_offsets end %" PRIu64
                " is past the end of the data section (%zu bytes)",
                name, end, data_len);
        return LS_ERR_TRUNCATED;
    }
    if (end - begin != t->nbytes) {
        set_err(err, err_len,
                "tensor '%s': data_offsets span %" PRIu64 " bytes but %s x %" PRIu64
                " elements need %zu",
                name, end - begin, dtypes[d].name, numel, t->nbytes);
        return LS_ERR_FORMAT;
    }
    t->offset = begin;
    t->data = data + begin;
    return LS_OK;
}

static ls_status parse_metadata(ls_safetensors *st, const cJSON *m, char *err, size_t err_len)
{
    if (!cJSON_IsObject(m)) {
        set_err(err, err_len, "header: " META_KEY " is not an object");
        return LS_ERR_FORMAT;
    }
    size_t n = (size_t)cJSON_GetArraySize(m);
    if (n == 0)
        return LS_OK;
    st->meta_key = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof(char *));
    st->meta_val = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof(char *));
    if (st->meta_key == NULL || st->meta_val == NULL)
        goto nomem;
    for (const cJSON *kv = m->child; kv != NULL; kv = kv->next) {
        if (!cJSON_IsString(kv)) {
            set_err(err, err_len, "header: " META_KEY " value '%s' is not a string", kv->string);
            return LS_ERR_FORMAT;
        }
        /* insertion sort by key, rejecting duplicates */
        size_t j = st->n_meta;
        while (j > 0 && strcmp(st->meta_key[j - 1], kv->string) > 0)
            j--;
        if (j > 0 && strcmp(st->meta_key[j - 1], kv->string) == 0) {
            set_err(err, err_len, "header: " META_KEY " key '%s' appears twice", kv->string);
            return LS_ERR_FORMAT;
        }
        char *k = dup_str(kv->string), *v = dup_str(kv->valuestring);
        if (k == NULL || v == NULL) {
            ls_mem_free(k);
            ls_mem_free(v);
            goto nomem;
        }
        memmove(st->meta_key + j + 1, st->meta_key + j, (st->n_meta - j) * sizeof(char *));
        memmove(st->meta_val + j + 1, st->meta_val + j, (st->n_meta - j) * sizeof(char *));
        st->meta_key[j] = k;
        st->meta_val[j] = v;
        st->n_meta++;
    }
    return LS_OK;
nomem:
    set_err(err, err_len, "header: out of memory for " META_KEY);
    return LS_ERR_NOMEM;
}

/* Check that the tensors tile [0, data_len) exactly. */
static ls_status check_tiling(const ls_safetensors *st, size_t data_len, char *err,
                              size_t err_len)
{
    if (st->n == 0) {
        if (data_len != 0) {
            set_err(err, err_len, "header: no tensors but %zu bytes of data", data_len);
            return LS_ERR_FORMAT;
        }
        return LS_OK;
    }
    const ls_safetensors_tensor **by_off = ls_mem_alloc(LS_MEM_SCRATCH, st->n * sizeof *by_off);
    if (by_off == NULL) {
        set_err(err, err_len, "header: out of memory");
        return LS_ERR_NOMEM;
    }
    for (size_t i = 0; i < st->n; i++)
        by_off[i] = &st->t[i];
    qsort(by_off, st->n, sizeof *by_off, offset_cmp);
    ls_status rc = LS_OK;
    uint64_t expect = 0;
    const ls_safetensors_tensor *prev = NULL;
    for (size_t i = 0; i < st->n; i++) {
        const ls_safetensors_tensor *t = by_off[i];
        if (t->offset < expect) {
            set_err(err, err_len, "tensor '%s': data [%" PRIu64 ", %" PRIu64
                    ") overlaps tensor '%s'", t->name, t->offset, t->offset + t->nbytes,
                    prev->name);
            rc = LS_ERR_FORMAT;
            goto cleanup;
        }
        if (t->offset > expect) {
            set_err(err, err_len, "tensor '%s': data starts at %" PRIu64
                    " leaving a hole after byte %" PRIu64, t->name, t->offset, expect);
            rc = LS_ERR_FORMAT;
            goto cleanup;
        }
        expect = t->offset + t->nbytes;
        prev = t;
    }
    if (expect != data_len) {
        set_err(err, err_len, "header: tensors cover %" PRIu64
                " bytes but the data section has %zu (trailing bytes)", expect, data_len);
        rc = LS_ERR_FORMAT;
    }
cleanup:
    ls_mem_free(by_off);
    return rc;
}

/* Parse and validate; `owned` (may be NULL) becomes the file's on success. */
static ls_status parse(ls_safetensors **out, const unsigned char *buf, size_t len,
                       unsigned char *owned, char *err, size_t err_len)
{
    ls_status rc = LS_OK;
    char *text = NULL;
    cJSON *root = NULL;
    ls_safetensors *st = NULL;
    set_err(err, err_len, "%s", "");

    if (len < 8) {
        set_err(err, err_len, "header: %zu bytes, shorter than the 8-byte length prefix", len);
        rc = LS_ERR_TRUNCATED;
        goto cleanup;
    }
    uint64_t hlen = load_le(buf, 8);
    if (hlen > len - 8) {
        set_err(err, err_len, "header: length %" PRIu64 " exceeds the %zu bytes after the prefix",
                hlen, len - 8);
        rc = LS_ERR_TRUNCATED;
        goto cleanup;
    }
    const unsigned char *htext = buf + 8;
    const unsigned char *data = htext + hlen;
    size_t data_len = len - 8 - (size_t)hlen;
    const char *why = check_header_text(htext, (size_t)hlen);
    if (why != NULL) {
        set_err(err, err_len, "header: %s", why);
        rc = LS_ERR_FORMAT;
        goto cleanup;
    }
    /* cJSON gets a NUL-terminated private copy: it never sees past hlen. */
    text = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)hlen + 1);
    if (text == NULL) {
        set_err(err, err_len, "header: out of memory for %" PRIu64 " bytes", hlen);
        rc = LS_ERR_NOMEM;
        goto cleanup;
    }
    memcpy(text, htext, (size_t)hlen);
    const char *end = NULL;
    root = cJSON_ParseWithOpts(text, &end, 0);
    if (root == NULL) {
        size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
        set_err(err, err_len, "header: not valid JSON (near byte %zu)", at);
        rc = LS_ERR_FORMAT;
        goto cleanup;
    }
    for (; (size_t)(end - text) < hlen; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            set_err(err, err_len, "header: unexpected byte 0x%02x after the JSON at %zu",
                    (unsigned char)*end, (size_t)(end - text));
            rc = LS_ERR_FORMAT;
            goto cleanup;
        }
    }
    if (!cJSON_IsObject(root)) {
        set_err(err, err_len, "header: not a JSON object");
        rc = LS_ERR_FORMAT;
        goto cleanup;
    }

    st = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *st);
    if (st == NULL) {
        rc = LS_ERR_NOMEM;
        set_err(err, err_len, "header: out of memory");
        goto cleanup;
    }
    size_t entries = (size_t)cJSON_GetArraySize(root);
    if (entries > 0) {
        st->t = ls_mem_alloc(LS_MEM_SCRATCH, entries * sizeof *st->t);
        if (st->t == NULL) {
            rc = LS_ERR_NOMEM;
            set_err(err, err_len, "header: out of memory for %zu entries", entries);
            goto cleanup;
        }
    }
    int seen_meta = 0;
    for (const cJSON *e = root->child; e != NULL; e = e->next) {
        if (strcmp(e->string, META_KEY) == 0) {
            if (seen_meta) {
                set_err(err, err_len, "header: " META_KEY " appears twice");
                rc = LS_ERR_FORMAT;
                goto cleanup;
            }
            seen_meta = 1;
            rc = parse_metadata(st, e, err, err_len);
            if (rc != LS_OK)
                goto cleanup;
            continue;
        }
        ls_safetensors_tensor *t = &st->t[st->n];
        memset(t, 0, sizeof *t);
        t->name = dup_str(e->string);
        if (t->name == NULL) {
            rc = LS_ERR_NOMEM;
            set_err(err, err_len, "tensor '%s': out of memory", e->string);
            goto cleanup;
        }
        st->n++; /* owned from here on, freed with st */
        rc = parse_tensor(e, data, data_len, t, err, err_len);
        if (rc != LS_OK)
            goto cleanup;
    }
    if (st->n > 1)
        qsort(st->t, st->n, sizeof *st->t, name_cmp);
    for (size_t i = 1; i < st->n; i++) {
        if (strcmp(st->t[i - 1].name, st->t[i].name) == 0) {
            set_err(err, err_len, "tensor '%s': name appears twice", st->t[i].name);
            rc = LS_ERR_FORMAT;
            goto cleanup;
        }
    }
    rc = check_tiling(st, data_len, err, err_len);
    if (rc != LS_OK)
        goto cleanup;
    st->owned = owned;
    *out = st;
    st = NULL;
cleanup:
    cJSON_Delete(root);
    ls_mem_free(text);
    ls_safetensors_free(st);
    return rc;
}

ls_status ls_safetensors_parse(ls_safetensors **out, const void *buf, size_t len, char *err,
                               size_t err_len)
{
    if (out == NULL || (buf == NULL && len != 0)) {
        set_err(err, err_len, "ls_safetensors_parse: NULL %s", out == NULL ? "out" : "buf");
        return LS_ERR_ARG;
    }
    *out = NULL;
    return parse(out, buf, len, NULL, err, err_len);
}

ls_status ls_safetensors_open(ls_safetensors **out, const char *path, char *err, size_t err_len)
{
    if (out == NULL || path == NULL) {
        set_err(err, err_len, "ls_safetensors_open: NULL %s", out == NULL ? "out" : "path");
        return LS_ERR_ARG;
    }
    *out = NULL;
    ls_status rc = LS_OK;
    unsigned char *bytes = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        set_err(err, err_len, "%s: open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        set_err(err, err_len, "%s: not a regular file", path);
        rc = LS_ERR_IO;
        goto cleanup;
    }
    size_t size = (size_t)sb.st_size;
    bytes = ls_mem_alloc(LS_MEM_SCRATCH, size);
    if (bytes == NULL) {
        set_err(err, err_len, "%s: out of memory for %zu bytes", path, size);
        rc = LS_ERR_NOMEM;
        goto cleanup;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, bytes + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            set_err(err, err_len, "%s: read: %s", path, r < 0 ? strerror(errno) : "file shrank");
            rc = LS_ERR_IO;
            goto cleanup;
        }
        got += (size_t)r;
    }
    rc = parse(out, bytes, size, bytes, err, err_len);
    if (rc == LS_OK) {
        bytes = NULL; /* owned by *out now */
    } else if (err != NULL && err_len > 0) {
        /* prefix the path: "<path>: tensor 'x': ..." */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err);
        set_err(err, err_len, "%s: %s", path, msg);
    }
cleanup:
    ls_mem_free(bytes);
    close(fd);
    return rc;
}

size_t ls_safetensors_count(const ls_safetensors *st)
{
    return st == NULL ? 0 : st->n;
}

const ls_safetensors_tensor *ls_safetensors_at(const ls_safetensors *st, size_t i)
{
    return st != NULL && i < st->n ? &st->t[i] : NULL;
}

const ls_safetensors_tensor *ls_safetensors_find(const ls_safetensors *st, const char *name)
{
    if (st == NULL || name == NULL)
        return NULL;
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[mid].name, name);
        if (c == 0)
            return &st->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t ls_safetensors_metadata_count(const ls_safetensors *st)
{
    return st == NULL ? 0 : st->n_meta;
}

ls_status ls_safetensors_metadata_at(const ls_safetensors *st, size_t i, const char **key,
                                     const char **value)
{
    if (st == NULL || i >= st->n_meta)
        return LS_ERR_ARG;
    if (key != NULL)
        *key = st->meta_key[i];
    if (value != NULL)
        *value = st->meta_val[i];
    return LS_OK;
}

const char *ls_safetensors_metadata_get(const ls_safetensors *st, const char *key)
{
    if (st == NULL || key == NULL)
        return NULL;
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0)
            return st->meta_val[i];
    return NULL;
}

/* Element i of t as a double (exact for all three dtypes). */
static double elem_f64(const ls_safetensors_tensor *t, size_t i)
{
    switch (t->dtype) {
    case LS_SAFETENSORS_F64:
        return f64_from_bits(load_le(t->data + 8 * i, 8));
    case LS_SAFETENSORS_F32:
        return (double)f32_from_bits((uint32_t)load_le(t->data + 4 * i, 4));
    default: /* BF16 */
        return (double)ls_safetensors_bf16_to_f32((uint16_t)load_le(t->data + 2 * i, 2));
    }
}

static ls_status check_read(const ls_safetensors_tensor *t, const void *out, size_t n)
{
    if (t == NULL || n != t->numel || (out == NULL && n != 0))
        return LS_ERR_ARG;
    return dtype_convertible(t->dtype) ? LS_OK : LS_ERR_UNSUPPORTED;
}

ls_status ls_safetensors_read_f64(const ls_safetensors_tensor *t, double *out, size_t n)
{
    ls_status rc = check_read(t, out, n);
    if (rc != LS_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        out[i] = elem_f64(t, i);
    return LS_OK;
}

ls_status ls_safetensors_read_f32(const ls_safetensors_tensor *t, float *out, size_t n)
{
    ls_status rc = check_read(t, out, n);
    if (rc != LS_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        out[i] = (float)elem_f64(t, i); /* exact except F64, which rounds RNE */
    return LS_OK;
}

static void format_shape(char *buf, size_t len, const uint64_t *shape, size_t ndim)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (size_t i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64, i ? ", " : "", shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

static ls_status load_check(const ls_safetensors *st, const char *name, const uint64_t *shape,
                            size_t ndim, const ls_safetensors_tensor **tp, char *err,
                            size_t err_len)
{
    set_err(err, err_len, "%s", "");
    if (st == NULL || name == NULL || (shape == NULL && ndim != 0)) {
        set_err(err, err_len, "ls_safetensors_load: NULL argument");
        return LS_ERR_ARG;
    }
    const ls_safetensors_tensor *t = ls_safetensors_find(st, name);
    if (t == NULL) {
        set_err(err, err_len, "tensor '%s': not in the file", name);
        return LS_ERR_FORMAT;
    }
    int same = t->ndim == ndim;
    for (size_t i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char have[128], want[128];
        format_shape(have, sizeof have, t->shape, t->ndim);
        format_shape(want, sizeof want, shape, ndim);
        set_err(err, err_len, "tensor '%s': shape %s, expected %s", name, have, want);
        return LS_ERR_FORMAT;
    }
    if (!dtype_convertible(t->dtype)) {
        set_err(err, err_len, "tensor '%s': dtype %s cannot be converted", name,
                dtypes[t->dtype].name);
        return LS_ERR_UNSUPPORTED;
    }
    *tp = t;
    return LS_OK;
}

ls_status ls_safetensors_load_f64(const ls_safetensors *st, const char *name,
                                  const uint64_t *shape, size_t ndim, double *out, char *err,
                                  size_t err_len)
{
    const ls_safetensors_tensor *t = NULL;
    ls_status rc = load_check(st, name, shape, ndim, &t, err, err_len);
    return rc != LS_OK ? rc : ls_safetensors_read_f64(t, out, (size_t)t->numel);
}

ls_status ls_safetensors_load_f32(const ls_safetensors *st, const char *name,
                                  const uint64_t *shape, size_t ndim, float *out, char *err,
                                  size_t err_len)
{
    const ls_safetensors_tensor *t = NULL;
    ls_status rc = load_check(st, name, shape, ndim, &t, err, err_len);
    return rc != LS_OK ? rc : ls_safetensors_read_f32(t, out, (size_t)t->numel);
}
