/* trace_json.c - the JSON text of trace lines (trace_json.h): a growing
 * buffer capped per line, exact number formatting, string escaping, and
 * borrowed cJSON values checked and written.  trace_writer.c builds every
 * line it writes with these. */
#include "receipts/writing/trace_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/trace_event.h"

#define MAX_JSON_DEPTH 512

bool ls_trace_json_buf_init(ls_trace_json_buf *b) {
    memset(b, 0, sizeof *b);
    b->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    return b->c_locale != (locale_t)0;
}

void ls_trace_json_buf_free(ls_trace_json_buf *b) {
    if (b->c_locale != (locale_t)0) freelocale(b->c_locale);
    free(b->buf);
    memset(b, 0, sizeof *b);
}

/* Grows buf so that `extra` more bytes fit; false (and b->nomem or
 * b->overflow set) when the event would pass the line cap or memory ran out. */
static bool reserve(ls_trace_json_buf *b, size_t extra) {
    if (b->overflow || b->nomem) return false;
    if (b->len - b->mark + extra > LS_TRACE_MAX_LINE) {
        b->overflow = true;
        return false;
    }
    if (b->len + extra <= b->cap) return true;
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->len + extra) ncap *= 2;
    char *nb = realloc(b->buf, ncap);
    if (nb == NULL) {
        b->nomem = true;
        return false;
    }
    b->buf = nb;
    b->cap = ncap;
    return true;
}

static void put_raw(ls_trace_json_buf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

void ls_trace_json_put_raw(ls_trace_json_buf *b, const char *s, size_t n) { put_raw(b, s, n); }

void ls_trace_json_put_i64(ls_trace_json_buf *b, int64_t v) {
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[sizeof tmp - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[sizeof tmp - 1 - n++] = '-';
    put_raw(b, tmp + sizeof tmp - n, n);
}

/* Finite doubles only (callers check): %.15g when strtod reads that back
 * exactly (short text for "round" values such as 0.1 or 3e-4), else %.17g
 * (always exact); formatted and parsed in the "C" locale. */
void ls_trace_json_put_f64(ls_trace_json_buf *b, double v) {
    char tmp[40];
    locale_t old = uselocale(b->c_locale);
    snprintf(tmp, sizeof tmp, "%.15g", v);
    if (strtod(tmp, NULL) != v) snprintf(tmp, sizeof tmp, "%.17g", v);
    uselocale(old);
    ls_trace_json_put_lit(b, tmp);
}

/* A JSON string: escapes quotes, backslashes and control characters;
 * invalid UTF-8 bytes become U+FFFD. */
void ls_trace_json_put_str(ls_trace_json_buf *b, const char *s) {
    static const char HEX[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    put_raw(b, "\"", 1);
    size_t run = 0; /* bytes copied verbatim since the last escape */
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            run++;
            i++;
            continue;
        }
        size_t ul = c >= 0x80 ? ls_trace_utf8_len(p + i, n - i) : 0;
        if (ul > 0) {
            run += ul;
            i += ul;
            continue;
        }
        put_raw(b, (const char *)p + i - run, run);
        run = 0;
        char esc[7];
        switch (c) {
        case '"': put_raw(b, "\\\"", 2); break;
        case '\\': put_raw(b, "\\\\", 2); break;
        case '\n': put_raw(b, "\\n", 2); break;
        case '\t': put_raw(b, "\\t", 2); break;
        case '\r': put_raw(b, "\\r", 2); break;
        default:
            if (c >= 0x80) {
                put_raw(b, "\\ufffd", 6);
            } else {
                memcpy(esc, "\\u00", 4);
                esc[4] = HEX[c >> 4];
                esc[5] = HEX[c & 15];
                put_raw(b, esc, 6);
            }
        }
        i++;
    }
    put_raw(b, (const char *)p + n - run, run);
    put_raw(b, "\"", 1);
}

/* ---- cJSON values -------------------------------------------------------- */

/* ls_trace_json_check_value at nesting depth `depth` (the value passed in
 * is depth 1). */
static ls_status check_value(const cJSON *v, const char *kind, const char *where, int depth,
                             char *err, size_t err_len) {
    if (depth > MAX_JSON_DEPTH) {
        snprintf(err, err_len, "%s.%s: nested deeper than %d", kind, where, MAX_JSON_DEPTH);
        return LS_ERR_ARG;
    }
    if (cJSON_IsNumber(v)) {
        if (isfinite(v->valuedouble)) return LS_OK;
        snprintf(err, err_len, "%s.%s: non-finite value refused", kind, where);
        return LS_ERR_NONFINITE;
    }
    if (cJSON_IsRaw(v) || cJSON_IsInvalid(v)) {
        snprintf(err, err_len, "%s.%s: raw or invalid cJSON item refused", kind, where);
        return LS_ERR_ARG;
    }
    if (cJSON_IsString(v) && v->valuestring == NULL) {
        snprintf(err, err_len, "%s.%s: string without value", kind, where);
        return LS_ERR_ARG;
    }
    bool obj = cJSON_IsObject(v);
    for (const cJSON *c = (obj || cJSON_IsArray(v)) ? v->child : NULL; c; c = c->next) {
        if (obj) {
            if (c->string == NULL) {
                snprintf(err, err_len, "%s.%s: object member without a key", kind, where);
                return LS_ERR_ARG;
            }
            for (const cJSON *d = v->child; d != c; d = d->next)
                if (strcmp(d->string, c->string) == 0) {
                    snprintf(err, err_len, "%s.%s: key \"%s\" repeats", kind, where, c->string);
                    return LS_ERR_ARG;
                }
        }
        ls_status st = check_value(c, kind, obj ? c->string : where, depth + 1, err, err_len);
        if (st != LS_OK) return st;
    }
    return LS_OK;
}

ls_status ls_trace_json_check_value(const cJSON *v, const char *kind, const char *where, char *err,
                                    size_t err_len) {
    return check_value(v, kind, where, 1, err, err_len);
}

void ls_trace_json_put_value(ls_trace_json_buf *b, const cJSON *v) {
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) <= (double)LS_TRACE_MAX_INT)
            ls_trace_json_put_i64(b, (int64_t)d);
        else
            ls_trace_json_put_f64(b, d);
    } else if (cJSON_IsString(v)) {
        ls_trace_json_put_str(b, v->valuestring);
    } else if (cJSON_IsTrue(v)) {
        ls_trace_json_put_lit(b, "true");
    } else if (cJSON_IsFalse(v)) {
        ls_trace_json_put_lit(b, "false");
    } else if (cJSON_IsNull(v)) {
        ls_trace_json_put_lit(b, "null");
    } else {
        bool obj = cJSON_IsObject(v);
        put_raw(b, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) put_raw(b, ",", 1);
            if (obj) {
                ls_trace_json_put_str(b, c->string);
                put_raw(b, ":", 1);
            }
            ls_trace_json_put_value(b, c);
        }
        put_raw(b, obj ? "}" : "]", 1);
    }
}
