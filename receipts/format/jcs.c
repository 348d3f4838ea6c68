/* jcs.c - RFC 8785 canonical JSON of the build-identity subset (see jcs.h). */
#include "receipts/format/jcs.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h" /* ls_trace_utf8_len */

typedef struct {
    char *b;
    size_t n, cap;
    bool nomem;
} buf;

static void put(buf *o, const char *s, size_t n) {
    if (o->nomem) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (o->n + n + 1 > cap) cap *= 2;
        char *nb = realloc(o->b, cap);
        if (nb == NULL) {
            o->nomem = true;
            return;
        }
        o->b = nb;
        o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    o->b[o->n] = '\0';
}

/* Next UTF-16 code unit of a valid UTF-8 string: *p advances past a whole
 * character, *pending holds the low surrogate of an astral one. */
static unsigned next_unit(const unsigned char **p, unsigned *pending) {
    if (*pending) {
        unsigned u = *pending;
        *pending = 0;
        return u;
    }
    const unsigned char *s = *p;
    unsigned cp;
    size_t len = ls_trace_utf8_len(s, 4); /* validated before sorting */
    if (len <= 1) cp = s[0];
    else if (len == 2) cp = ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    else if (len == 3) cp = ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    else cp = ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    *p = s + (len ? len : 1);
    if (cp < 0x10000) return cp;
    cp -= 0x10000;
    *pending = 0xDC00u | (cp & 0x3FFu);
    return 0xD800u | (cp >> 10);
}

/* Order of two keys by UTF-16 code units (RFC 8785 §3.2.3). */
static int cmp_utf16(const void *a, const void *b) {
    const unsigned char *x = (const unsigned char *)(*(const cJSON *const *)a)->string;
    const unsigned char *y = (const unsigned char *)(*(const cJSON *const *)b)->string;
    unsigned px = 0, py = 0;
    for (;;) {
        bool ex = *x == 0 && px == 0, ey = *y == 0 && py == 0;
        if (ex || ey) return ex && ey ? 0 : ex ? -1 : 1;
        unsigned ux = next_unit(&x, &px), uy = next_unit(&y, &py);
        if (ux != uy) return ux < uy ? -1 : 1;
    }
}

/* true when s is valid UTF-8 (the whole NUL-terminated string). */
static bool valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    while (n > 0) {
        size_t l = ls_trace_utf8_len(p, n);
        if (l == 0) return false;
        p += l;
        n -= l;
    }
    return true;
}

static void put_string(buf *o, const char *s) {
    static const char HEX[] = "0123456789abcdef";
    put(o, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\t': esc = "\\t"; break;
        case '\n': esc = "\\n"; break;
        case '\f': esc = "\\f"; break;
        case '\r': esc = "\\r"; break;
        default:
            if (c < 0x20) {
                memcpy(u, "\\u00", 4);
                u[4] = HEX[c >> 4];
                u[5] = HEX[c & 15];
                u[6] = '\0';
                esc = u;
            }
        }
        if (esc == NULL) continue;
        put(o, run, (size_t)(p - run));
        put(o, esc, strlen(esc));
        run = p + 1;
    }
    put(o, run, strlen(run));
    put(o, "\"", 1);
}

typedef struct {
    char ptr[256]; /* JSON pointer of the value being written */
    char *err;
    size_t errlen;
    bool numbers;  /* any finite number (ES6 form), not only integers */
} ctx;

/* ECMAScript Number.prototype.toString of a finite d (RFC 8785 §3.2.2.3):
 * the shortest round-tripping digits, placed by the decimal exponent. */
static void es6_number(double d, char out[40]) {
    if (d == 0) {
        strcpy(out, "0");
        return;
    }
    char sci[40];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, d);
        if (strtod(sci, NULL) == d) break;
    }
    /* sci: [-]D[.DDD]e(+|-)XX */
    const char *s = sci;
    char *o = out;
    if (*s == '-') *o++ = *s++;
    char digits[24];
    int k = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[k++] = *s;
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = '\0';
    int n = atoi(s + 1) + 1; /* the decimal point's position */
    if (k <= n && n <= 21) {
        o += sprintf(o, "%s", digits);
        for (int i = 0; i < n - k; i++) *o++ = '0';
        *o = '\0';
    } else if (0 < n && n <= 21) {
        sprintf(o, "%.*s.%s", n, digits, digits + n);
    } else if (-6 < n && n <= 0) {
        o += sprintf(o, "0.");
        for (int i = 0; i < -n; i++) *o++ = '0';
        sprintf(o, "%s", digits);
    } else {
        if (k == 1) sprintf(o, "%ce%c%d", digits[0], n - 1 > 0 ? '+' : '-', abs(n - 1));
        else sprintf(o, "%c.%se%c%d", digits[0], digits + 1, n - 1 > 0 ? '+' : '-', abs(n - 1));
    }
}

static ls_status refuse(ctx *c, const char *why) {
    ls_json_errf(c->err, c->errlen, "JCS: %s: %s", c->ptr[0] ? c->ptr : "(root)", why);
    return LS_ERR_FORMAT;
}

static ls_status emit(ctx *c, buf *o, const cJSON *v, int depth) {
    if (depth > LS_JCS_MAX_DEPTH) return refuse(c, "nested deeper than 64 levels");
    switch (v->type & 0xFF) {
    case cJSON_NULL: put(o, "null", 4); return LS_OK;
    case cJSON_True: put(o, "true", 4); return LS_OK;
    case cJSON_False: put(o, "false", 5); return LS_OK;
    case cJSON_Number: {
        double d = v->valuedouble;
        if (!isfinite(d)) return refuse(c, "a non-finite number");
        if (c->numbers) {
            char num[40];
            es6_number(d, num);
            put(o, num, strlen(num));
            return LS_OK;
        }
        if (d != floor(d)) return refuse(c, "a fractional number (the build identity holds integers only)");
        if (fabs(d) > LS_JSON_MAX_EXACT_INT) return refuse(c, "an integer of magnitude 2^53 or more");
        char num[32];
        int n = snprintf(num, sizeof num, "%lld", (long long)d); /* -0.0 gives "0" */
        put(o, num, (size_t)n);
        return LS_OK;
    }
    case cJSON_String:
        if (v->valuestring == NULL || !valid_utf8(v->valuestring)) return refuse(c, "a string that is not valid UTF-8");
        put_string(o, v->valuestring);
        return LS_OK;
    case cJSON_Array: {
        put(o, "[", 1);
        size_t i = 0, keep = strlen(c->ptr);
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            if (i) put(o, ",", 1);
            ls_json_pointer_push_index(c->ptr, sizeof c->ptr, i);
            ls_status st = emit(c, o, e, depth + 1);
            if (st != LS_OK) return st;
            c->ptr[keep] = '\0';
        }
        put(o, "]", 1);
        return LS_OK;
    }
    case cJSON_Object: {
        size_t n = 0, keep = strlen(c->ptr);
        for (const cJSON *e = v->child; e; e = e->next) {
            if (e->string == NULL || !valid_utf8(e->string)) return refuse(c, "a key that is not valid UTF-8");
            n++;
        }
        const cJSON **m = n ? malloc(n * sizeof *m) : NULL;
        if (n && m == NULL) return LS_ERR_NOMEM;
        size_t i = 0;
        for (const cJSON *e = v->child; e; e = e->next) m[i++] = e;
        if (n > 1) qsort(m, n, sizeof *m, cmp_utf16);
        ls_status st = LS_OK;
        for (i = 1; i < n; i++)
            if (strcmp(m[i - 1]->string, m[i]->string) == 0) {
                ls_json_pointer_push_key(c->ptr, sizeof c->ptr, m[i]->string);
                st = refuse(c, "a repeated key");
                goto cleanup;
            }
        put(o, "{", 1);
        for (i = 0; i < n; i++) {
            if (i) put(o, ",", 1);
            put_string(o, m[i]->string);
            put(o, ":", 1);
            ls_json_pointer_push_key(c->ptr, sizeof c->ptr, m[i]->string);
            st = emit(c, o, m[i], depth + 1);
            if (st != LS_OK) goto cleanup;
            c->ptr[keep] = '\0';
        }
        put(o, "}", 1);
    cleanup:
        free(m);
        return st;
    }
    default:
        return refuse(c, "not a JSON value of the subset (raw or invalid item)");
    }
}

static ls_status serialize(const cJSON *v, bool numbers, char **out, size_t *out_len, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (v == NULL || out == NULL) return LS_ERR_ARG;
    ctx c = {.err = err, .errlen = errlen, .numbers = numbers};
    buf o = {0};
    put(&o, "", 0); /* an empty document never happens, but keep *out a string */
    ls_status st = emit(&c, &o, v, 0);
    if (st == LS_OK && o.nomem) st = LS_ERR_NOMEM;
    if (st != LS_OK) {
        if (st == LS_ERR_NOMEM) ls_json_errf(err, errlen, "JCS: out of memory");
        free(o.b);
        return st;
    }
    *out = o.b;
    if (out_len) *out_len = o.n;
    return LS_OK;
}

ls_status ls_jcs_serialize(const cJSON *v, char **out, size_t *out_len, char *err, size_t errlen) {
    return serialize(v, false, out, out_len, err, errlen);
}

ls_status ls_jcs_serialize_numbers(const cJSON *v, char **out, size_t *out_len, char *err, size_t errlen) {
    return serialize(v, true, out, out_len, err, errlen);
}

ls_status ls_jcs_sha256_numbers(const cJSON *v, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen) {
    if (hex == NULL) return LS_ERR_ARG;
    hex[0] = '\0';
    char *text = NULL;
    size_t n = 0;
    ls_status st = ls_jcs_serialize_numbers(v, &text, &n, err, errlen);
    if (st == LS_OK) st = ls_digest_sha256_hex(text, n, hex);
    free(text);
    return st;
}

/* Offset of the first number token written with '.', 'e' or 'E' (outside
 * strings), SIZE_MAX when none. */
static size_t first_non_integer_token(const char *b, size_t len) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = b[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t s = i;
            while (i < len && (b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' ||
                               (b[i] >= '0' && b[i] <= '9'))) {
                if (b[i] == '.' || b[i] == 'e' || b[i] == 'E') return s;
                i++;
            }
            i--;
        }
    }
    return SIZE_MAX;
}

ls_status ls_jcs_canonical_text(const char *bytes, size_t len, char **out, size_t *out_len,
                                char *err, size_t errlen) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if ((bytes == NULL && len > 0) || out == NULL) return LS_ERR_ARG;
    size_t at = first_non_integer_token(bytes, len);
    if (at != SIZE_MAX) {
        ls_json_errf(err, errlen,
                     "JCS: byte %zu: a number with a fraction or an exponent (the build identity holds "
                     "integers only)",
                     at);
        return LS_ERR_FORMAT;
    }
    cJSON *doc = NULL;
    ls_status st = ls_json_parse(bytes, len, "JCS input", &doc, err, errlen);
    if (st != LS_OK) return st == LS_ERR_NOMEM ? st : LS_ERR_FORMAT;
    st = ls_jcs_serialize(doc, out, out_len, err, errlen);
    cJSON_Delete(doc);
    return st;
}

ls_status ls_jcs_sha256(const cJSON *v, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen) {
    if (hex == NULL) return LS_ERR_ARG;
    hex[0] = '\0';
    char *text = NULL;
    size_t n = 0;
    ls_status st = ls_jcs_serialize(v, &text, &n, err, errlen);
    if (st == LS_OK) st = ls_digest_sha256_hex(text, n, hex);
    free(text);
    return st;
}
