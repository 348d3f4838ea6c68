/* trace_lex.c - the strict part of reading one trace line (trace_lex.h):
 * a lexer that accepts only RFC 8259 tokens, and the search for a key
 * repeated within an object, which cJSON's parser does not refuse. */
#include "receipts/trace_lex.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/trace_event.h"

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

const char *ls_trace_lex_repeated_key(const cJSON *v) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        const char *k = ls_trace_lex_repeated_key(c);
        if (k) return k;
        n++;
    }
    if (!cJSON_IsObject(v) || n < 2) return NULL;
    if (n <= 16) {
        for (const cJSON *c = v->child; c; c = c->next)
            for (const cJSON *d = c->next; d; d = d->next)
                if (c->string[0] == d->string[0] && strcmp(c->string, d->string) == 0) return c->string;
        return NULL;
    }
    const char **keys = malloc(n * sizeof *keys);
    if (keys == NULL) return NULL;
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next) keys[i++] = c->string;
    qsort(keys, n, sizeof *keys, cmp_str);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
    free(keys);
    return dup;
}
