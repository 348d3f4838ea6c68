/* trace_lex.c - the strict part of reading one trace line (trace_lex.h):
 * a lexer that accepts only RFC 8259 tokens, the search for a key repeated
 * within an object, which cJSON's parser does not refuse, and the reader's
 * own strict parser (tokens, grammar and keys in one pass, nodes from a
 * pool, strings decoded in place: no allocation per line). */
#include "receipts/reading/trace_lex.h"

#include <float.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/trace_event.h"

const char *ls_trace_lex_json(const unsigned char *p, size_t n, size_t *at) {
    static const char *const LITS[] = {"true", "false", "null"};
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        *at = i;
        if (c == ' ' || c == '\t' || c == '\r' || c == '{' || c == '}' || c == '[' || c == ']' ||
            c == ',' || c == ':') {
            i++;
        } else if (c == '"') {
            for (i++;; ) {
                if (i >= n) return "unterminated string";
                c = p[i];
                *at = i;
                if (c == '"') break;
                if (c < 0x20) return "control character inside a string";
                if (c == '\\') {
                    unsigned e = i + 1 < n ? p[i + 1] : 0;
                    if (e && strchr("\"\\/bfnrt", (int)e)) {
                        i += 2;
                    } else if (e == 'u' && i + 5 < n) {
                        for (size_t k = i + 2; k < i + 6; k++)
                            if (!strchr("0123456789abcdefABCDEF", p[k]) || p[k] == 0)
                                return "bad \\u escape";
                        i += 6;
                    } else {
                        return "bad escape";
                    }
                } else if (c >= 0x80) {
                    size_t l = ls_trace_utf8_len(p + i, n - i);
                    if (l == 0) return "invalid UTF-8";
                    i += l;
                } else {
                    i++;
                }
            }
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
#define DIGIT(j) ((j) < n && p[j] >= '0' && p[j] <= '9')
            size_t j = i + (c == '-');
            if (!DIGIT(j)) return "bad number";
            if (p[j] == '0') j++;
            else while (DIGIT(j)) j++;
            if (j < n && p[j] == '.') {
                j++;
                if (!DIGIT(j)) return "bad number";
                while (DIGIT(j)) j++;
            }
            if (j < n && (p[j] == 'e' || p[j] == 'E')) {
                j++;
                if (j < n && (p[j] == '+' || p[j] == '-')) j++;
                if (!DIGIT(j)) return "bad number";
                while (DIGIT(j)) j++;
            }
            if (j < n && (DIGIT(j) || p[j] == '.' || p[j] == '+' || p[j] == '-' || p[j] == 'e' ||
                          p[j] == 'E' || (p[j] >= 'a' && p[j] <= 'z') || (p[j] >= 'A' && p[j] <= 'Z')))
                return "bad number";
#undef DIGIT
            i = j;
        } else {
            size_t k = 0;
            while (k < 3 && LITS[k][0] != (char)c) k++;
            if (k == 3) return "unexpected character";
            size_t l = strlen(LITS[k]);
            if (n - i < l || memcmp(p + i, LITS[k], l) != 0) return "bad literal";
            i += l;
            if (i < n && ((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
                          (p[i] >= '0' && p[i] <= '9')))
                return "bad literal";
        }
    }
    return NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first repeated key among the n members of the object v, or NULL;
 * *nomem set when the scratch allocation fails. */
static const char *object_repeated_key(const cJSON *v, size_t n, bool *nomem) {
    if (n < 2) return NULL;
    if (n <= 8) {
        for (const cJSON *c = v->child; c; c = c->next)
            for (const cJSON *d = c->next; d; d = d->next)
                if (c->string[0] == d->string[0] && strcmp(c->string, d->string) == 0) return c->string;
        return NULL;
    }
    if (n <= 64) { /* open addressing on the stack, at most half full: one pass */
        const char *slot[128];
        size_t mask = 15;
        while (mask + 1 < 2 * n) mask = 2 * mask + 1;
        memset(slot, 0, (mask + 1) * sizeof slot[0]);
        for (const cJSON *c = v->child; c; c = c->next) {
            uint32_t h = 2166136261u;
            for (const unsigned char *k = (const unsigned char *)c->string; *k; k++) h = (h ^ *k) * 16777619u;
            size_t j = h & mask;
            while (slot[j] != NULL) {
                if (strcmp(slot[j], c->string) == 0) return slot[j];
                j = (j + 1) & mask;
            }
            slot[j] = c->string;
        }
        return NULL;
    }
    const char **keys = malloc(n * sizeof *keys);
    if (keys == NULL) {
        *nomem = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next) keys[i++] = c->string;
    qsort(keys, n, sizeof *keys, cmp_str);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
    free(keys);
    return dup;
}

const char *ls_trace_lex_repeated_key(const cJSON *v) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        const char *k = ls_trace_lex_repeated_key(c);
        if (k) return k;
        n++;
    }
    bool nomem = false;
    return cJSON_IsObject(v) ? object_repeated_key(v, n, &nomem) : NULL;
}

/* ---- the pool ------------------------------------------------------------- */

#define POOL_BLOCK_NODES 1024
#define POOL_KEEP_BLOCKS 4 /* blocks kept across a reset (the rest freed) */

struct ls_trace_pool_block {
    ls_trace_pool_block *next;
    cJSON nodes[POOL_BLOCK_NODES];
};

void ls_trace_pool_reset(ls_trace_pool *pool) {
    ls_trace_pool_block *b = pool->head;
    for (int k = 1; b && k < POOL_KEEP_BLOCKS; k++) b = b->next;
    if (b != NULL) {
        ls_trace_pool_block *x = b->next;
        b->next = NULL;
        while (x) {
            ls_trace_pool_block *nx = x->next;
            free(x);
            pool->bytes -= sizeof *x;
            x = nx;
        }
    }
    pool->cur = pool->head;
    pool->used = 0;
}

void ls_trace_pool_free(ls_trace_pool *pool) {
    while (pool->head) {
        ls_trace_pool_block *nx = pool->head->next;
        free(pool->head);
        pool->head = nx;
    }
    memset(pool, 0, sizeof *pool);
}

static cJSON *pool_node(ls_trace_pool *pool) {
    if (pool->cur == NULL || pool->used == POOL_BLOCK_NODES) {
        ls_trace_pool_block *nb = pool->cur ? pool->cur->next : pool->head;
        if (nb == NULL) {
            nb = malloc(sizeof *nb);
            if (nb == NULL) return NULL;
            nb->next = NULL;
            pool->bytes += sizeof *nb;
            if (pool->cur) pool->cur->next = nb;
            else pool->head = nb;
        }
        pool->cur = nb;
        pool->used = 0;
    }
    cJSON *c = &pool->cur->nodes[pool->used++];
    memset(c, 0, sizeof *c);
    return c;
}

/* ---- the parser ----------------------------------------------------------- */

#define NEST_MAX 1000 /* cJSON's CJSON_NESTING_LIMIT */
#define NUMBER_SMALL 63 /* numbers up to this long are converted from the stack */

typedef struct {
    ls_trace_pool *pool;
    unsigned char *p;
    size_t n, i;
    int depth;
    const char *why;
    size_t at;
    const char *dup; /* the repeated key ("a key repeats") */
} parser;

static bool bad(parser *s, size_t at, const char *why) {
    s->why = why;
    s->at = at;
    return false;
}

/* The line is NUL-terminated at p[n] (ls_trace_lex_parse makes sure), so
 * the scans below stop there without a bound check: NUL is not whitespace,
 * a digit or a plain string byte. */
static inline void skip_ws(parser *s) {
    unsigned c = s->p[s->i];
    if (c > ' ') return; /* compact JSON: the usual case */
    while (c == ' ' || c == '\t' || c == '\r') c = s->p[++s->i];
}

static int hex4(const unsigned char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = p[k];
        int d = c >= '0' && c <= '9' ? (int)c - '0'
                : c >= 'a' && c <= 'f' ? (int)c - 'a' + 10
                : c >= 'A' && c <= 'F' ? (int)c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A byte that stands for itself inside a string: printable ASCII (and
 * DEL) but '"' and '\\'. */
static inline bool plain_byte(unsigned c) { return c - 0x20u < 0x60u && c != '"' && c != '\\'; }

/* Bit 7 of each byte of x that is not a plain_byte (x holds 8 bytes of the
 * line).  Bytes below the first such byte are computed exactly (no borrow
 * reaches them), so the lowest bit set marks the first byte that is not
 * plain; the bits above it may be false alarms. */
static inline uint64_t nonplain_bits(uint64_t x) {
    const uint64_t ones = UINT64_C(0x0101010101010101), high = UINT64_C(0x8080808080808080);
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    uint64_t low = (x - ones * 0x20) & ~x;                      /* bytes below 0x20 */
    uint64_t quote = (q - ones) & ~q, bslash = (b - ones) & ~b; /* '"' and '\\' */
    return (x | low | quote | bslash) & high;                   /* and bytes >= 0x80 */
}

/* Index of the first byte at or after r that is not a plain_byte (p[n] == 0
 * is not, so at most n). */
static inline size_t skip_plain(const unsigned char *p, size_t n, size_t r) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; r + 8 <= n; r += 8) { /* 8 bytes at a time; the first one found by its bit */
        uint64_t x;
        memcpy(&x, p + r, 8);
        uint64_t m = nonplain_bits(x);
        if (m != 0) return r + (size_t)(__builtin_ctzll(m) >> 3);
    }
#else
    (void)n;
#endif
    while (plain_byte(p[r])) r++;
    return r;
}

/* The string at p[i] == '"', decoded in place from p[i + 1] on (never
 * longer than its source, so the write never passes the read; a string
 * without escapes is not moved at all); *out its start, *len (when not
 * NULL) its length as strlen sees it (a \u0000 ends it, as in cJSON). */
static bool parse_string_rest(parser *s, size_t r, char **out, size_t *len);

static inline bool parse_string(parser *s, char **out, size_t *len) {
    unsigned char *p = s->p;
    size_t n = s->n, r = s->i + 1;
    *out = (char *)p + r;
    r = skip_plain(p, n, r);
    if (r < n && p[r] == '"') { /* no escapes: the common case */
        p[r] = 0;
        if (len) *len = (size_t)(p + r - (unsigned char *)*out);
        s->i = r + 1;
        return true;
    }
    return parse_string_rest(s, r, out, len);
}

/* parse_string from p[r] on, the first byte that is not plain. */
static bool parse_string_rest(parser *s, size_t r, char **out, size_t *len) {
    unsigned char *p = s->p;
    size_t n = s->n, w = r;
    for (;;) {
        if (r >= n) return bad(s, r, "unterminated string");
        unsigned c = p[r];
        if (c == '"') break;
        if (c < 0x20) return bad(s, r, "control character inside a string");
        if (c == '\\') {
            unsigned e = r + 1 < n ? p[r + 1] : 0;
            const char *simple = e ? strchr("\"\\/bfnrt", (int)e) : NULL;
            if (simple) {
                static const char MAP[] = "\"\\/\b\f\n\r\t";
                p[w++] = (unsigned char)MAP[simple - "\"\\/bfnrt"];
                r += 2;
                continue;
            }
            if (e != 'u' || r + 5 >= n) return bad(s, r, "bad escape");
            int cp = hex4(p + r + 2);
            if (cp < 0) return bad(s, r, "bad \\u escape");
            r += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return bad(s, r - 6, "bad \\u escape (lone low surrogate)");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int lo = r + 5 < n && p[r] == '\\' && p[r + 1] == 'u' ? hex4(p + r + 2) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return bad(s, r - 6, "bad \\u escape (unpaired surrogate)");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                r += 6;
            }
            /* \u0000 decodes to a NUL byte, as cJSON does (the string ends there) */
            if (cp < 0x80) {
                p[w++] = (unsigned char)cp;
            } else if (cp < 0x800) {
                p[w++] = (unsigned char)(0xC0 | (cp >> 6));
                p[w++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                p[w++] = (unsigned char)(0xE0 | (cp >> 12));
                p[w++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                p[w++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else {
                p[w++] = (unsigned char)(0xF0 | (cp >> 18));
                p[w++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                p[w++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                p[w++] = (unsigned char)(0x80 | (cp & 0x3F));
            }
        } else if (c >= 0x80) {
            size_t l = ls_trace_utf8_len(p + r, n - r);
            if (l == 0) return bad(s, r, "invalid UTF-8");
            for (size_t k = 0; k < l; k++) p[w++] = p[r++];
        } else {
            p[w++] = (unsigned char)c;
            r++;
        }
    }
    p[w] = 0;
    if (len) *len = strlen(*out);
    s->i = r + 1;
    return true;
}

/* Exact powers of ten as doubles (10^22 is the largest). */
static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline bool is_digit(unsigned c) { return c - '0' < 10u; }

/* The double nearest m / 10^d (ties to even) for 2^53 < m < 2^64 and
 * 1 <= d <= 19, the decimals Clinger's shortcut below cannot take (17
 * significant digits, as %.17g writes them): the quotient to 55 bits and a
 * sticky remainder in 128-bit integers, rounded once.  false when the value
 * is too large for that (>= 2^54: strtod then). */
static bool exact_quotient(uint64_t m, int d, double *out) {
#if defined(__SIZEOF_INT128__)
    uint64_t den = 1;
    for (int i = 0; i < d; i++) den *= 10;
    int k = 54 - ((64 - __builtin_clzll(m)) - (64 - __builtin_clzll(den)));
    if (k < 0) return false;
    unsigned __int128 q = ((unsigned __int128)m << k) / den;
    if (q < ((unsigned __int128)1 << 54)) q = ((unsigned __int128)m << ++k) / den;
    if (q >= ((unsigned __int128)1 << 55)) return false; /* cannot happen: m / den is within a factor 4 of 2^(54-k) */
    bool rem = ((unsigned __int128)m << k) - q * den != 0;
    uint64_t mant = (uint64_t)(q >> 2);
    bool half = (q >> 1) & 1, sticky = (q & 1) || rem;
    if (half && (sticky || (mant & 1))) mant++;
    *out = ldexp((double)mant, 2 - k); /* exact: mant <= 2^53, the result a normal double */
    return true;
#else
    (void)m, (void)d, (void)out;
    return false;
#endif
}

static bool parse_number(parser *s, cJSON *node) {
    const unsigned char *p = s->p;
    size_t i = s->i;
    bool neg = p[i] == '-';
    size_t j = i + neg;
    /* the digits, integer and fraction, as one integer m (exact while at
     * most 19 digits: the count decides below) */
    uint64_t m = 0;
    size_t digits = 0, frac = 0;
    if (!is_digit(p[j])) return bad(s, i, "bad number");
    if (p[j] == '0') j++;
    else {
        size_t d0 = j;
        for (; is_digit(p[j]); j++) m = m * 10 + (p[j] - '0');
        digits = j - d0;
    }
    if (p[j] == '.') {
        j++;
        if (!is_digit(p[j])) return bad(s, i, "bad number");
        size_t f0 = j;
        for (; is_digit(p[j]); j++) m = m * 10 + (p[j] - '0');
        frac = j - f0;
    }
    long e10 = 0;
    size_t exp_digits = 0;
    bool has_exp = p[j] == 'e' || p[j] == 'E';
    if (has_exp) {
        j++;
        bool eneg = p[j] == '-';
        if (p[j] == '+' || p[j] == '-') j++;
        if (!is_digit(p[j])) return bad(s, i, "bad number");
        for (; is_digit(p[j]); j++, exp_digits++)
            if (exp_digits < 6) e10 = e10 * 10 + (p[j] - '0');
        if (eneg) e10 = -e10;
    }
    unsigned c = p[j]; /* p[n] == 0 ends the number at the end of the line */
    if (is_digit(c) || c == '.' || c == '+' || c == '-' || c == 'e' || c == 'E' || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z'))
        return bad(s, i, "bad number");
    double v;
    if (frac == 0 && !has_exp && digits <= 15) { /* an integer exact in a double */
        v = (double)m;
        if (neg) v = -v;
    } else if (digits + frac <= 19 && m <= (UINT64_C(1) << 53) && exp_digits <= 6 &&
               e10 - (long)frac >= -22 && e10 - (long)frac <= 22 && FLT_EVAL_METHOD == 0) {
        /* m and 10^|e| are exact doubles, so one multiplication or division
         * rounds once, to nearest: the correctly rounded value, as strtod's */
        long e = e10 - (long)frac;
        v = e < 0 ? (double)m / POW10[-e] : (double)m * POW10[e];
        if (neg) v = -v;
    } else if (digits + frac <= 19 && exp_digits <= 6 && e10 - (long)frac >= -19 && e10 - (long)frac <= -1 &&
               FLT_EVAL_METHOD == 0 && exact_quotient(m, (int)((long)frac - e10), &v)) {
        if (neg) v = -v;
    } else { /* as cJSON: strtod on a copy, with the locale's decimal point */
        char small[NUMBER_SMALL + 1];
        size_t len = j - i;
        char *buf = len <= NUMBER_SMALL ? small : malloc(len + 1); /* len < the line's length */
        if (buf == NULL) return bad(s, i, "out of memory");
        const struct lconv *lc = localeconv();
        char dp = lc && lc->decimal_point && lc->decimal_point[0] ? lc->decimal_point[0] : '.';
        for (size_t k = 0; k < len; k++) buf[k] = p[i + k] == '.' ? dp : (char)p[i + k];
        buf[len] = 0;
        v = strtod(buf, NULL);
        if (buf != small) free(buf);
    }
    node->type = cJSON_Number;
    node->valuedouble = v;
    node->valueint = v >= INT_MAX ? INT_MAX : v <= (double)INT_MIN ? INT_MIN : (int)v;
    s->i = j;
    return true;
}

static bool parse_value(parser *s, cJSON *node);

/* Objects with at most this many members are searched for a repeated key
 * while they are parsed (below); larger ones by object_repeated_key after. */
#define DUP_SCAN_MAX 64

/* 7 bits of a key (its length, first, middle and last bytes): equal keys
 * have equal signatures, so a key whose signature no earlier key of its
 * object had is not a repeat. */
static inline unsigned key_sig(const char *k, size_t len) {
    const unsigned char *u = (const unsigned char *)k;
    uint64_t w = len == 0 ? 0 : (uint64_t)len << 24 | (uint64_t)u[0] << 16 | (uint64_t)u[len / 2] << 8 | u[len - 1];
    return (unsigned)((w * UINT64_C(0x9E3779B97F4A7C15)) >> 57);
}

/* An object or array at p[i] ('{' or '['); members become node's children. */
static bool parse_container(parser *s, cJSON *node, bool object) {
    if (s->depth >= NEST_MAX) return bad(s, s->i, "nested too deep");
    s->depth++;
    node->type = object ? cJSON_Object : cJSON_Array;
    unsigned char close = object ? '}' : ']';
    s->i++;
    skip_ws(s);
    cJSON *last = NULL;
    size_t count = 0;
    uint64_t sigs[2] = {0, 0}; /* signatures of the keys so far */
    bool repeats = false;      /* a key equals an earlier one */
    if (s->i < s->n && s->p[s->i] == close) {
        s->i++;
        s->depth--;
        return true;
    }
    for (;;) {
        cJSON *c = pool_node(s->pool);
        if (c == NULL) return bad(s, s->i, "out of memory");
        if (object) {
            if (s->i >= s->n || s->p[s->i] != '"') return bad(s, s->i, "expected a string key");
            size_t len;
            if (!parse_string(s, &c->string, &len)) return false;
            if (count < DUP_SCAN_MAX && !repeats) {
                unsigned b = key_sig(c->string, len);
                if (sigs[b >> 6] >> (b & 63) & 1) /* maybe: compare with the earlier keys */
                    for (const cJSON *o = node->child; o != NULL && !repeats; o = o->next)
                        repeats = strcmp(o->string, c->string) == 0;
                sigs[b >> 6] |= UINT64_C(1) << (b & 63);
            }
            skip_ws(s);
            if (s->i >= s->n || s->p[s->i] != ':') return bad(s, s->i, "expected ':'");
            s->i++;
            skip_ws(s);
        }
        unsigned vc = s->p[s->i]; /* numbers and strings straight away: most values */
        if (is_digit(vc) || vc == '-') {
            if (!parse_number(s, c)) return false;
        } else if (vc == '"') {
            c->type = cJSON_String;
            if (!parse_string(s, &c->valuestring, NULL)) return false;
        } else if (!parse_value(s, c)) {
            return false;
        }
        if (last) {
            last->next = c;
            c->prev = last;
        } else {
            node->child = c;
        }
        last = c;
        count++;
        skip_ws(s);
        if (s->i < s->n && s->p[s->i] == ',') {
            s->i++;
            skip_ws(s);
            continue;
        }
        if (s->i < s->n && s->p[s->i] == close) break;
        return bad(s, s->i, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    node->child->prev = last; /* as cJSON: the first child's prev is the last */
    if (object && (repeats || count > DUP_SCAN_MAX)) { /* which key: as the reference names it */
        bool nomem = false;
        s->dup = object_repeated_key(node, count, &nomem);
        if (s->dup != NULL) return bad(s, s->i, "a key repeats");
        if (nomem) return bad(s, s->i, "out of memory");
    }
    s->i++;
    s->depth--;
    return true;
}

static bool parse_value(parser *s, cJSON *node) {
    if (s->i >= s->n) return bad(s, s->i, "expected a value");
    unsigned c = s->p[s->i];
    if (c == '{' || c == '[') return parse_container(s, node, c == '{');
    if (c == '"') {
        node->type = cJSON_String;
        return parse_string(s, &node->valuestring, NULL);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(s, node);
    static const char *const LITS[] = {"true", "false", "null"};
    static const int TYPES[] = {cJSON_True, cJSON_False, cJSON_NULL};
    for (int k = 0; k < 3; k++) {
        if (LITS[k][0] != (char)c) continue;
        size_t l = strlen(LITS[k]), e = s->i + l;
        if (s->n - s->i < l || memcmp(s->p + s->i, LITS[k], l) != 0) return bad(s, s->i, "bad literal");
        if (e < s->n && ((s->p[e] >= 'a' && s->p[e] <= 'z') || (s->p[e] >= 'A' && s->p[e] <= 'Z') ||
                         (s->p[e] >= '0' && s->p[e] <= '9')))
            return bad(s, s->i, "bad literal");
        node->type = TYPES[k];
        node->valueint = TYPES[k] == cJSON_True;
        s->i = e;
        return true;
    }
    return bad(s, s->i, "unexpected character");
}

const char *ls_trace_lex_parse(ls_trace_pool *pool, char *p, size_t n, size_t *at, cJSON **out,
                               const char **dup) {
    *out = NULL;
    *dup = NULL;
    p[n] = '\0'; /* the scans' sentinel */
    parser s = {pool, (unsigned char *)p, n, 0, 0, NULL, 0, NULL};
    skip_ws(&s);
    cJSON *root = pool_node(pool);
    if (root == NULL) {
        *at = 0;
        return "out of memory";
    }
    if (!parse_value(&s, root)) {
        *at = s.at;
        *dup = s.dup;
        return s.why;
    }
    skip_ws(&s);
    if (s.i != n) {
        *at = s.i;
        return "text after the JSON value";
    }
    *out = root;
    return NULL;
}
