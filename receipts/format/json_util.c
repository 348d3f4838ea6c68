/* json_util.c - strict parsing, finite checks, canonical printing and
 * atomic writing of JSON documents (contract in json_util.h). */
#include "receipts/format/json_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "receipts/format/atomic_file.h"

void ls_json_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void ls_json_pointer_push_key(char *buf, size_t cap, const char *key) {
    size_t n = strlen(buf);
    if (n + 1 >= cap) return;
    buf[n++] = '/';
    for (const char *k = key; *k != '\0'; k++) {
        const char *rep = NULL;
        if (*k == '~') rep = "~0";
        else if (*k == '/') rep = "~1";
        if (rep != NULL) {
            if (n + 2 >= cap) break;
            buf[n++] = rep[0];
            buf[n++] = rep[1];
        } else {
            if (n + 1 >= cap) break;
            buf[n++] = *k;
        }
    }
    buf[n] = '\0';
}

void ls_json_pointer_push_index(char *buf, size_t cap, size_t index) {
    size_t n = strlen(buf);
    if (n < cap) snprintf(buf + n, cap - n, "/%zu", index);
}

/* Depth-first search for a non-finite number; fills the pointer on a hit. */
static int find_nonfinite(const cJSON *item, char *ptr, size_t ptrlen) {
    if (cJSON_IsNumber(item)) return !isfinite(item->valuedouble);
    if (!cJSON_IsArray(item) && !cJSON_IsObject(item)) return 0;
    size_t index = 0;
    for (const cJSON *c = item->child; c != NULL; c = c->next, index++) {
        size_t keep = ptr != NULL ? strlen(ptr) : 0;
        if (ptr != NULL) {
            if (cJSON_IsObject(item)) ls_json_pointer_push_key(ptr, ptrlen, c->string);
            else ls_json_pointer_push_index(ptr, ptrlen, index);
        }
        if (find_nonfinite(c, ptr, ptrlen)) return 1;
        if (ptr != NULL) ptr[keep] = '\0';
    }
    return 0;
}

ls_status ls_json_check_finite(const cJSON *doc, char *ptr, size_t ptrlen) {
    if (ptr != NULL && ptrlen > 0) ptr[0] = '\0';
    if (ptrlen == 0) ptr = NULL;
    return find_nonfinite(doc, ptr, ptrlen) ? LS_ERR_NONFINITE : LS_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted copy of an object's keys (NULL with *n = 0 for an empty object;
 * *n = SIZE_MAX on allocation failure). */
static const char **sorted_keys(const cJSON *obj, size_t *n) {
    size_t count = 0;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) count++;
    *n = count;
    if (count == 0) return NULL;
    const char **keys = malloc(count * sizeof *keys);
    if (keys == NULL) {
        *n = SIZE_MAX;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) keys[i++] = c->string;
    qsort(keys, count, sizeof *keys, cmp_str_ptr);
    return keys;
}

/* First duplicated key anywhere in the tree (NULL when none); *nomem set
 * on allocation failure. */
static const char *find_duplicate_key(const cJSON *item, int *nomem) {
    if (!cJSON_IsArray(item) && !cJSON_IsObject(item)) return NULL;
    if (cJSON_IsObject(item)) {
        size_t n;
        const char **keys = sorted_keys(item, &n);
        if (n == SIZE_MAX) {
            *nomem = 1;
            return NULL;
        }
        const char *dup = NULL;
        for (size_t i = 1; i < n && dup == NULL; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
        free(keys);
        if (dup != NULL) return dup;
    }
    for (const cJSON *c = item->child; c != NULL; c = c->next) {
        const char *dup = find_duplicate_key(c, nomem);
        if (dup != NULL || *nomem) return dup;
    }
    return NULL;
}

/* Offset of the first \u0000 escape (a backslash preceded by an even run of
 * backslashes), SIZE_MAX when none: cJSON would cut the string there, so a
 * name "a\u0000b" would silently read as "a". */
static size_t escaped_nul(const char *b, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++) {
        if (b[i] != '\\') continue;
        if (memcmp(b + i, "\\u0000", 6) == 0) return i;
        i++; /* skip the escaped character (a second backslash included) */
    }
    return SIZE_MAX;
}

ls_status ls_json_parse(const char *bytes, size_t len, const char *what, cJSON **out,
                        char *err, size_t errlen) {
    if (what == NULL) what = "input";
    *out = NULL;
    if (bytes == NULL && len > 0) return LS_ERR_ARG;
    if (len == 0) {
        ls_json_errf(err, errlen, "%s: empty, expected a JSON document", what);
        return LS_ERR_FORMAT;
    }
    size_t nul = escaped_nul(bytes, len);
    if (nul != SIZE_MAX) {
        ls_json_errf(err, errlen, "%s: a \\u0000 escape (NUL inside a string) at byte %zu", what, nul);
        return LS_ERR_FORMAT;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(bytes, len, &end, 0);
    if (doc == NULL) {
        size_t off = end != NULL && end >= bytes ? (size_t)(end - bytes) : 0;
        ls_json_errf(err, errlen, "%s: invalid JSON near byte %zu", what, off);
        return LS_ERR_FORMAT;
    }
    for (size_t off = (size_t)(end - bytes); off < len; off++) {
        char c = bytes[off];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            /* cJSON stops at a NUL inside the buffer; report it as trailing data */
            ls_json_errf(err, errlen, "%s: trailing data after the JSON value at byte %zu",
                         what, off);
            cJSON_Delete(doc);
            return LS_ERR_FORMAT;
        }
    }
    int nomem = 0;
    const char *dup = find_duplicate_key(doc, &nomem);
    if (nomem) {
        cJSON_Delete(doc);
        return LS_ERR_NOMEM;
    }
    if (dup != NULL) {
        ls_json_errf(err, errlen, "%s: duplicate object key \"%s\"", what, dup);
        cJSON_Delete(doc);
        return LS_ERR_FORMAT;
    }
    char ptr[256];
    if (ls_json_check_finite(doc, ptr, sizeof ptr) != LS_OK) {
        ls_json_errf(err, errlen, "%s: number out of range at %s", what, ptr);
        cJSON_Delete(doc);
        return LS_ERR_NONFINITE;
    }
    *out = doc;
    return LS_OK;
}

ls_status ls_json_read_bytes_capped(const char *path, size_t max_bytes, char **out, size_t *len,
                                    char *err, size_t errlen) {
    *out = NULL;
    *len = 0;
    ls_status st = LS_OK;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (max_bytes >= SIZE_MAX - 1) max_bytes = SIZE_MAX - 2;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        ls_json_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            ls_json_errf(err, errlen, "%s: is a directory, not a file", path);
            st = LS_ERR_IO;
            goto cleanup;
        }
        if (S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size > (uintmax_t)max_bytes) {
            ls_json_errf(err, errlen, "%s: %jd bytes, larger than the %zu-byte limit for this file", path,
                         (intmax_t)sb.st_size, max_bytes);
            st = LS_ERR_FORMAT;
            goto cleanup;
        }
    }
    for (;;) {
        if (n + 1 >= cap) { /* room for one byte past the cap, to see that it is exceeded */
            size_t limit = max_bytes + 2;
            if (cap >= limit) break;
            size_t ncap = cap == 0 ? 8192 : cap > limit / 2 ? limit : cap * 2;
            if (ncap > limit) ncap = limit;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                ls_json_errf(err, errlen, "%s: cannot allocate %zu bytes to read it", path, ncap);
                st = LS_ERR_NOMEM;
                goto cleanup;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0 || n > max_bytes) break;
    }
    if (ferror(f)) {
        ls_json_errf(err, errlen, "%s: read error: %s", path, strerror(errno));
        st = LS_ERR_IO;
        goto cleanup;
    }
    if (n > max_bytes) {
        ls_json_errf(err, errlen, "%s: more than the %zu-byte limit for this file (not a regular file, or it grew)",
                     path, max_bytes);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
cleanup:
    fclose(f);
    free(buf);
    return st;
}

ls_status ls_json_read_bytes(const char *path, char **out, size_t *len, char *err,
                             size_t errlen) {
    return ls_json_read_bytes_capped(path, LS_JSON_MAX_FILE_BYTES, out, len, err, errlen);
}

ls_status ls_json_read_file_capped(const char *path, size_t max_bytes, cJSON **out, char *err,
                                   size_t errlen) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    ls_status st = ls_json_read_bytes_capped(path, max_bytes, &buf, &len, err, errlen);
    if (st == LS_OK) st = ls_json_parse(buf, len, path, out, err, errlen);
    free(buf);
    return st;
}

ls_status ls_json_read_file(const char *path, cJSON **out, char *err, size_t errlen) {
    return ls_json_read_file_capped(path, LS_JSON_MAX_FILE_BYTES, out, err, errlen);
}

size_t ls_json_format_number(double d, char buf[LS_JSON_NUMBER_MAX]) {
    buf[0] = '\0';
    if (!isfinite(d)) return 0;
    int n = 0;
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        n = snprintf(buf, LS_JSON_NUMBER_MAX, "%.0f", d); /* "-0" keeps the sign of zero */
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            n = snprintf(buf, LS_JSON_NUMBER_MAX, "%.*g", prec, d);
            if (strtod(buf, NULL) == d) break; /* nonzero here: no sign-of-zero question */
        }
    }
    return n > 0 ? (size_t)n : 0;
}

cJSON *ls_json_create_exact_number(double d) {
    char buf[LS_JSON_NUMBER_MAX];
    if (ls_json_format_number(d, buf) == 0) return NULL;
    return cJSON_CreateRaw(buf);
}

/* Replaces every number item under it with its exact raw form (a copy
 * being prepared for cJSON's printer).  -1 on allocation failure. */
static int exact_numbers(cJSON *it) {
    for (cJSON *c = it->child; c != NULL; c = c->next) {
        if (cJSON_IsNumber(c)) {
            char buf[LS_JSON_NUMBER_MAX];
            if (ls_json_format_number(c->valuedouble, buf) == 0) return -1;
            char *raw = cJSON_malloc(strlen(buf) + 1);
            if (raw == NULL) return -1;
            memcpy(raw, buf, strlen(buf) + 1);
            c->type = cJSON_Raw | (c->type & cJSON_StringIsConst);
            c->valuestring = raw;
        } else if (c->child != NULL && exact_numbers(c) != 0) {
            return -1;
        }
    }
    return 0;
}

ls_status ls_json_print(const cJSON *doc, char **out, size_t *out_len, char *err,
                        size_t errlen) {
    *out = NULL;
    char ptr[256];
    if (ls_json_check_finite(doc, ptr, sizeof ptr) != LS_OK) {
        ls_json_errf(err, errlen, "non-finite number at %s", ptr);
        return LS_ERR_NONFINITE;
    }
    cJSON *copy = cJSON_Duplicate(doc, 1);
    char *text = NULL;
    if (copy != NULL && cJSON_IsNumber(copy)) { /* a bare number document */
        char buf[LS_JSON_NUMBER_MAX];
        ls_json_format_number(copy->valuedouble, buf);
        text = cJSON_malloc(strlen(buf) + 1);
        if (text != NULL) memcpy(text, buf, strlen(buf) + 1);
    } else if (copy != NULL && exact_numbers(copy) == 0) {
        text = cJSON_Print(copy);
    }
    cJSON_Delete(copy);
    if (text == NULL) return LS_ERR_NOMEM;
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (withnl == NULL) {
        free(text);
        return LS_ERR_NOMEM;
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    *out = withnl;
    if (out_len != NULL) *out_len = n + 1;
    return LS_OK;
}

/* Growable output buffer for the canonical printer. */
typedef struct {
    char *p;
    size_t len, cap;
    int nomem;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->nomem) return;
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap == 0 ? 256 : b->cap;
        while (b->len + n + 1 > ncap) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (np == NULL) {
            b->nomem = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Prints a leaf (string, bool, null) as cJSON does, a number exactly. */
static void put_leaf(strbuf *b, const cJSON *leaf) {
    if (cJSON_IsNumber(leaf)) {
        char num[LS_JSON_NUMBER_MAX];
        sb_put(b, num, ls_json_format_number(leaf->valuedouble, num)); /* finite: checked first */
        return;
    }
    char *s = cJSON_PrintUnformatted(leaf);
    if (s == NULL) {
        b->nomem = 1;
        return;
    }
    sb_put(b, s, strlen(s));
    free(s);
}

static void put_key(strbuf *b, const char *key) {
    cJSON *tmp = cJSON_CreateString(key);
    if (tmp == NULL) {
        b->nomem = 1;
        return;
    }
    put_leaf(b, tmp);
    cJSON_Delete(tmp);
}

static void put_canonical(strbuf *b, const cJSON *item) {
    if (cJSON_IsArray(item)) {
        sb_put(b, "[", 1);
        for (const cJSON *c = item->child; c != NULL; c = c->next) {
            if (c != item->child) sb_put(b, ",", 1);
            put_canonical(b, c);
        }
        sb_put(b, "]", 1);
    } else if (cJSON_IsObject(item)) {
        size_t n;
        const char **keys = sorted_keys(item, &n);
        if (n == SIZE_MAX) {
            b->nomem = 1;
            return;
        }
        sb_put(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i > 0) sb_put(b, ",", 1);
            put_key(b, keys[i]);
            sb_put(b, ":", 1);
            put_canonical(b, cJSON_GetObjectItemCaseSensitive(item, keys[i]));
        }
        sb_put(b, "}", 1);
        free(keys);
    } else {
        put_leaf(b, item);
    }
}

ls_status ls_json_print_canonical(const cJSON *doc, char **out, size_t *out_len,
                                  char *err, size_t errlen) {
    *out = NULL;
    char ptr[256];
    if (ls_json_check_finite(doc, ptr, sizeof ptr) != LS_OK) {
        ls_json_errf(err, errlen, "non-finite number at %s", ptr);
        return LS_ERR_NONFINITE;
    }
    int nomem = 0;
    const char *dup = find_duplicate_key(doc, &nomem);
    if (nomem) return LS_ERR_NOMEM;
    if (dup != NULL) {
        ls_json_errf(err, errlen, "duplicate object key \"%s\" has no canonical form", dup);
        return LS_ERR_ARG;
    }
    strbuf b = {0};
    put_canonical(&b, doc);
    if (b.nomem) {
        free(b.p);
        return LS_ERR_NOMEM;
    }
    *out = b.p;
    if (out_len != NULL) *out_len = b.len;
    return LS_OK;
}

ls_status ls_json_write_file(const char *path, const cJSON *doc, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    char inner[300];
    ls_status st = ls_json_print(doc, &text, &len, inner, sizeof inner);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: not written: %s", path,
                     st == LS_ERR_NOMEM ? "out of memory" : inner);
        return st;
    }
    st = ls_atomic_write(path, text, len, err, errlen);
    free(text);
    return st;
}

int ls_json_add_u64(cJSON *obj, const char *key, uint64_t v) {
    if (v < UINT64_C(1000000000000000)) /* cJSON prints these exactly */
        return cJSON_AddNumberToObject(obj, key, (double)v) != NULL ? 0 : -1;
    char digits[24];
    snprintf(digits, sizeof digits, "%" PRIu64, v);
    return cJSON_AddRawToObject(obj, key, digits) != NULL ? 0 : -1;
}

int ls_json_get_u64(const cJSON *obj, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d >= 18446744073709551616.0 || floor(d) != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

void ls_json_brief(const cJSON *v, size_t max_chars, char *buf, size_t cap) {
    if (v == NULL) {
        snprintf(buf, cap, "(absent)");
        return;
    }
    char *t = cJSON_PrintUnformatted(v);
    size_t n = t ? strlen(t) : 0;
    snprintf(buf, cap, "%.*s%s", (int)(n > max_chars ? max_chars : n), t ? t : "?", n > max_chars ? "..." : "");
    free(t);
}
