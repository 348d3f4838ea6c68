/* schema_ref.c - test-only reference for receipts/schema/schema.c's validator: the
 * keyword-by-keyword validator receipts/schema/schema.c had before it compiled
 * schemas at load time (every keyword found by cJSON lookup on every node,
 * type names compared as strings), kept verbatim but for the pattern cache.
 * test_schema.c's differential test checks that the compiled validator
 * reports exactly the same errors (pointer, keyword, message, order). */
#include "tests/receipts/schema_ref.h"

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"

#define MAX_SCHEMA_DEPTH 2048

typedef struct {
    const cJSON *node;
    regex_t re;
    int ok;
} ref_pattern;

typedef struct {
    const cJSON *doc;
} ref_schema_t;

/* Patterns compiled on first use and kept for the process (reachable, so
 * not a leak); a pattern node is known by its address, so a schema document
 * must not be freed and another parsed in its place while this cache is in
 * use: ls_schema_ref_forget clears it. */
static ref_pattern *patterns;
static size_t n_patterns;

void ls_schema_ref_forget(void) {
    for (size_t i = 0; i < n_patterns; i++)
        if (patterns[i].ok) regfree(&patterns[i].re);
    free(patterns);
    patterns = NULL;
    n_patterns = 0;
}

static const cJSON *resolve_ref(const cJSON *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const char *p = ref + 1;
    const cJSON *cur = root;
    if (*p != '\0' && *p != '/') return NULL;
    while (*p == '/') {
        char tok[256];
        size_t n = 0;
        for (p++; *p != '\0' && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~') {
                if (p[1] == '0') ch = '~';
                else if (p[1] == '1') ch = '/';
                else return NULL;
                p++;
            }
            if (n + 1 >= sizeof tok) return NULL;
            tok[n++] = ch;
        }
        tok[n] = '\0';
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else if (cJSON_IsArray(cur)) {
            char *end = NULL;
            long idx = strtol(tok, &end, 10);
            if (n == 0 || *end != '\0' || idx < 0) return NULL;
            cur = cJSON_GetArrayItem(cur, (int)idx);
        } else {
            return NULL;
        }
        if (cur == NULL) return NULL;
    }
    return cur;
}

typedef struct {
    ref_schema_t *s;
    ls_schema_errors *errs; /* NULL while probing inside anyOf/oneOf/not */
    int nomem;
    char ptr[1024]; /* JSON pointer of the current instance location */
} vctx;

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

/* Records one error (when recording) and returns 0, the "invalid" verdict. */
static int fail(vctx *c, const char *kw, const char *fmt, ...) LS_JSON_PRINTF(3, 4);
static int fail(vctx *c, const char *kw, const char *fmt, ...) {
    ls_schema_errors *e = c->errs;
    if (e == NULL) return 0;
    if (e->count >= LS_SCHEMA_MAX_ERRORS) {
        e->dropped++;
        return 0;
    }
    if (e->items == NULL) {
        e->items = calloc(LS_SCHEMA_MAX_ERRORS, sizeof *e->items);
        if (e->items == NULL) {
            c->nomem = 1;
            return 0;
        }
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_schema_error *it = &e->items[e->count];
    it->pointer = dup_str(c->ptr);
    it->keyword = dup_str(kw);
    it->message = dup_str(msg);
    if (it->pointer == NULL || it->keyword == NULL || it->message == NULL) {
        free(it->pointer);
        free(it->keyword);
        free(it->message);
        memset(it, 0, sizeof *it);
        c->nomem = 1;
        return 0;
    }
    e->count++;
    return 0;
}

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsObject(v)) return "object";
    return "invalid";
}

static int has_type(const cJSON *v, const char *t) {
    if (strcmp(t, "integer") == 0)
        return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
               floor(v->valuedouble) == v->valuedouble;
    return strcmp(t, json_type_name(v)) == 0;
}

static int type_matches(const cJSON *kw, const cJSON *v) {
    if (cJSON_IsString(kw)) return has_type(v, kw->valuestring);
    for (const cJSON *t = kw->child; t != NULL; t = t->next)
        if (has_type(v, t->valuestring)) return 1;
    return 0;
}

/* Deep equality as JSON Schema defines it: numbers by value (1 == 1.0),
 * objects regardless of key order, booleans distinct from numbers. */
static int json_equal(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
    if (cJSON_IsString(a)) return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsArray(a)) {
        const cJSON *x = a->child, *y = b->child;
        for (; x != NULL && y != NULL; x = x->next, y = y->next)
            if (!json_equal(x, y)) return 0;
        return x == NULL && y == NULL;
    }
    if (cJSON_IsObject(a)) {
        int na = cJSON_GetArraySize(a), nb = cJSON_GetArraySize(b);
        if (na != nb) return 0;
        for (const cJSON *x = a->child; x != NULL; x = x->next) {
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (y == NULL || !json_equal(x, y)) return 0;
        }
        return 1;
    }
    return 1; /* null, true, false: equal types are equal values */
}

static size_t utf8_length(const char *s) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        if ((*p & 0xC0) != 0x80) n++;
    return n;
}

/* Compiled on first use (the validator proper compiles them at load). */
static const regex_t *find_pattern(ref_schema_t *s, const cJSON *node) {
    (void)s;
    for (size_t i = 0; i < n_patterns; i++)
        if (patterns[i].node == node) return patterns[i].ok ? &patterns[i].re : NULL;
    ref_pattern *np = realloc(patterns, (n_patterns + 1) * sizeof *np);
    if (np == NULL) return NULL;
    patterns = np;
    ref_pattern *e = &np[n_patterns++];
    e->node = node;
    e->ok = cJSON_IsString(node) && regcomp(&e->re, node->valuestring, REG_EXTENDED | REG_NOSUB) == 0;
    return e->ok ? &e->re : NULL;
}

static int validate(vctx *c, const cJSON *sch, const cJSON *inst, int depth);

static int validate_at_key(vctx *c, const cJSON *sch, const cJSON *inst, const char *key,
                           int depth) {
    size_t keep = strlen(c->ptr);
    ls_json_pointer_push_key(c->ptr, sizeof c->ptr, key);
    int ok = validate(c, sch, inst, depth + 1);
    c->ptr[keep] = '\0';
    return ok;
}

/* Runs sch on inst without recording errors: the verdict only. */
static int probe(vctx *c, const cJSON *sch, const cJSON *inst, int depth) {
    ls_schema_errors *saved = c->errs;
    c->errs = NULL;
    int ok = validate(c, sch, inst, depth + 1);
    c->errs = saved;
    return ok;
}

static int validate_number(vctx *c, const cJSON *sch, const cJSON *inst) {
    int ok = 1;
    double v = inst->valuedouble;
    const cJSON *kw;
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "minimum")) && v < kw->valuedouble)
        ok = fail(c, "minimum", "%.17g is less than the minimum %.17g", v, kw->valuedouble);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "maximum")) && v > kw->valuedouble)
        ok = fail(c, "maximum", "%.17g is more than the maximum %.17g", v, kw->valuedouble);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMinimum")) &&
        !(v > kw->valuedouble))
        ok = fail(c, "exclusiveMinimum", "%.17g is not more than %.17g", v, kw->valuedouble);
    return ok;
}

static int validate_string(vctx *c, const cJSON *sch, const cJSON *inst) {
    int ok = 1;
    const cJSON *kw;
    size_t n = utf8_length(inst->valuestring);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "minLength")) && n < kw->valuedouble)
        ok = fail(c, "minLength", "string of %zu characters is shorter than %.0f", n,
                  kw->valuedouble);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "maxLength")) && n > kw->valuedouble)
        ok = fail(c, "maxLength", "string of %zu characters is longer than %.0f", n,
                  kw->valuedouble);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "pattern"))) {
        const regex_t *re = find_pattern(c->s, kw);
        if (re == NULL || regexec(re, inst->valuestring, 0, NULL, 0) != 0)
            ok = fail(c, "pattern", "string does not match %s", kw->valuestring);
    }
    return ok;
}

static int validate_array(vctx *c, const cJSON *sch, const cJSON *inst, int depth) {
    int ok = 1;
    const cJSON *kw;
    size_t n = (size_t)cJSON_GetArraySize(inst);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "minItems")) && n < kw->valuedouble)
        ok = fail(c, "minItems", "%zu items, fewer than %.0f", n, kw->valuedouble);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "maxItems")) && n > kw->valuedouble)
        ok = fail(c, "maxItems", "%zu items, more than %.0f", n, kw->valuedouble);
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "uniqueItems")) && cJSON_IsTrue(kw)) {
        size_t i = 0;
        for (const cJSON *a = inst->child; a != NULL; a = a->next, i++) {
            size_t j = i + 1;
            for (const cJSON *b = a->next; b != NULL; b = b->next, j++) {
                if (json_equal(a, b)) {
                    ok = fail(c, "uniqueItems", "items %zu and %zu are equal", i, j);
                    goto items;
                }
            }
        }
    }
items:
    if (!ok && c->errs == NULL) return 0;
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "items"))) {
        size_t i = 0;
        for (const cJSON *it = inst->child; it != NULL; it = it->next, i++) {
            size_t keep = strlen(c->ptr);
            ls_json_pointer_push_index(c->ptr, sizeof c->ptr, i);
            if (!validate(c, kw, it, depth + 1)) ok = 0;
            c->ptr[keep] = '\0';
            if (!ok && c->errs == NULL) return 0;
        }
    }
    return ok;
}

static int validate_object(vctx *c, const cJSON *sch, const cJSON *inst, int depth) {
    int ok = 1;
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required");
    for (const cJSON *r = req != NULL ? req->child : NULL; r != NULL; r = r->next)
        if (cJSON_GetObjectItemCaseSensitive(inst, r->valuestring) == NULL)
            ok = fail(c, "required", "missing required property \"%s\"", r->valuestring);
    if (!ok && c->errs == NULL) return 0;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
    for (const cJSON *m = inst->child; m != NULL; m = m->next) {
        const cJSON *ps = props != NULL ? cJSON_GetObjectItemCaseSensitive(props, m->string) : NULL;
        if (ps != NULL) {
            if (!validate_at_key(c, ps, m, m->string, depth)) ok = 0;
        } else if (addl != NULL) {
            if (cJSON_IsFalse(addl)) {
                size_t keep = strlen(c->ptr);
                ls_json_pointer_push_key(c->ptr, sizeof c->ptr, m->string);
                ok = fail(c, "additionalProperties", "property \"%s\" is not allowed", m->string);
                c->ptr[keep] = '\0';
            } else if (!validate_at_key(c, addl, m, m->string, depth)) {
                ok = 0;
            }
        }
        if (!ok && c->errs == NULL) return 0;
    }
    return ok;
}

static int validate(vctx *c, const cJSON *sch, const cJSON *inst, int depth) {
    if (cJSON_IsBool(sch))
        return cJSON_IsTrue(sch) ? 1 : fail(c, "false", "no value is allowed here");
    if (depth > MAX_SCHEMA_DEPTH)
        return fail(c, "$ref", "schema applications nest deeper than %d", MAX_SCHEMA_DEPTH);
    int ok = 1;
    const cJSON *kw;
#define STOP_WHEN_PROBING()                   \
    do {                                      \
        if (!ok && c->errs == NULL) return 0; \
    } while (0)
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "$ref"))) {
        if (!validate(c, resolve_ref(c->s->doc, kw->valuestring), inst, depth + 1)) ok = 0;
        STOP_WHEN_PROBING();
    }
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "type")) && !type_matches(kw, inst)) {
        char want[128] = "";
        if (cJSON_IsString(kw)) {
            snprintf(want, sizeof want, "%s", kw->valuestring);
        } else {
            for (const cJSON *t = kw->child; t != NULL; t = t->next) {
                size_t n = strlen(want);
                snprintf(want + n, sizeof want - n, "%s%s", n > 0 ? "|" : "", t->valuestring);
            }
        }
        ok = fail(c, "type", "expected %s, found %s", want, json_type_name(inst));
        STOP_WHEN_PROBING();
    }
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "enum"))) {
        int found = 0;
        for (const cJSON *e = kw->child; e != NULL && !found; e = e->next)
            found = json_equal(e, inst);
        if (!found) ok = fail(c, "enum", "value is not one of the %d allowed values",
                              cJSON_GetArraySize(kw));
        STOP_WHEN_PROBING();
    }
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "const")) && !json_equal(kw, inst)) {
        if (cJSON_IsString(kw)) ok = fail(c, "const", "value must be \"%s\"", kw->valuestring);
        else ok = fail(c, "const", "value differs from the required constant");
        STOP_WHEN_PROBING();
    }
    if (cJSON_IsNumber(inst) && !validate_number(c, sch, inst)) ok = 0;
    if (cJSON_IsString(inst) && !validate_string(c, sch, inst)) ok = 0;
    STOP_WHEN_PROBING();
    if (cJSON_IsArray(inst) && !validate_array(c, sch, inst, depth)) ok = 0;
    if (cJSON_IsObject(inst) && !validate_object(c, sch, inst, depth)) ok = 0;
    STOP_WHEN_PROBING();
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "allOf"))) {
        for (const cJSON *s = kw->child; s != NULL; s = s->next) {
            if (!validate(c, s, inst, depth + 1)) ok = 0;
            STOP_WHEN_PROBING();
        }
    }
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "anyOf"))) {
        int any = 0;
        for (const cJSON *s = kw->child; s != NULL && !any; s = s->next)
            any = probe(c, s, inst, depth);
        if (!any) ok = fail(c, "anyOf", "value matches none of the %d alternatives",
                            cJSON_GetArraySize(kw));
        STOP_WHEN_PROBING();
    }
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "oneOf"))) {
        int matched = 0;
        for (const cJSON *s = kw->child; s != NULL; s = s->next) matched += probe(c, s, inst, depth);
        if (matched != 1)
            ok = fail(c, "oneOf", "value matches %d of the %d alternatives, expected exactly 1",
                      matched, cJSON_GetArraySize(kw));
        STOP_WHEN_PROBING();
    }
    if ((kw = cJSON_GetObjectItemCaseSensitive(sch, "not")) && probe(c, kw, inst, depth))
        ok = fail(c, "not", "value matches a schema it must not match");
#undef STOP_WHEN_PROBING
    return ok;
}

ls_status ls_schema_ref_validate(const cJSON *schema_doc, const cJSON *doc, ls_schema_errors *errs) {
    ref_schema_t s = {schema_doc};
    vctx *c = calloc(1, sizeof *c);
    if (c == NULL) return LS_ERR_NOMEM;
    c->s = &s;
    c->errs = errs;
    int ok = validate(c, schema_doc, doc, 0);
    ls_status st = c->nomem ? LS_ERR_NOMEM : ok ? LS_OK : LS_ERR_SCHEMA;
    free(c);
    return st;
}
