/* schema.c - loading, subset checking and validation of JSON Schemas
 * (contract and the supported keyword subset in schema.h). */
#include "receipts/schema.h"

#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/json_util.h"

#ifndef LS_SCHEMA_DIR
#define LS_SCHEMA_DIR "schemas"
#endif

/* Deepest chain of nested schema applications (through $ref and the
 * applicators) before validation gives up; guards against $ref cycles. */
#define MAX_SCHEMA_DEPTH 2048

typedef struct {
    const cJSON *node; /* the "pattern" keyword's string node in doc */
    regex_t re;
} pattern_entry;

struct ls_schema {
    cJSON *doc;
    pattern_entry *patterns;
    size_t n_patterns;
};

const char *ls_schema_dir(void) {
    const char *env = getenv("LONGSTRAW_SCHEMA_DIR");
    return env != NULL && env[0] != '\0' ? env : LS_SCHEMA_DIR;
}

void ls_schema_free(ls_schema *s) {
    if (s == NULL) return;
    for (size_t i = 0; i < s->n_patterns; i++) regfree(&s->patterns[i].re);
    free(s->patterns);
    cJSON_Delete(s->doc);
    free(s);
}

const char *ls_schema_id(const ls_schema *s) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(s->doc, "$id");
    return cJSON_IsString(id) ? id->valuestring : "";
}

/* ---- $ref resolution: "#" or "#" followed by a JSON pointer ---------- */

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

/* ---- loading: the keyword subset and the shape of keyword values ------ */

typedef struct {
    ls_schema *s;
    const char *what;
    char *err;
    size_t errlen;
    size_t pat_cap;
} loadctx;

static const char *const ANNOTATIONS[] = {"title", "description", "$comment"};
static const char *const TYPE_NAMES[] = {"null",   "boolean", "object", "array",
                                         "number", "string",  "integer"};

static int is_type_name(const char *s) {
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof *TYPE_NAMES; i++)
        if (strcmp(s, TYPE_NAMES[i]) == 0) return 1;
    return 0;
}

static int is_nonneg_int(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && floor(v->valuedouble) == v->valuedouble &&
           v->valuedouble <= LS_JSON_MAX_EXACT_INT;
}

static int strings_unique(const cJSON *arr) {
    for (const cJSON *a = arr->child; a != NULL; a = a->next) {
        if (!cJSON_IsString(a)) return 0;
        for (const cJSON *b = a->next; b != NULL; b = b->next)
            if (cJSON_IsString(b) && strcmp(a->valuestring, b->valuestring) == 0) return 0;
    }
    return 1;
}

static ls_status load_fail(loadctx *c, const char *sptr, const char *kw, const char *why) {
    ls_json_errf(c->err, c->errlen, "%s: schema location #%s: keyword \"%s\" %s", c->what, sptr,
                 kw, why);
    return LS_ERR_SCHEMA;
}

static ls_status check_schema_node(loadctx *c, const cJSON *node, char *sptr, size_t cap,
                                   int is_root, int depth);

/* Checks a child schema at sptr + "/kw[/key]". */
static ls_status check_child(loadctx *c, const cJSON *child, char *sptr, size_t cap,
                             const char *kw, const char *key, int depth) {
    size_t keep = strlen(sptr);
    ls_json_pointer_push_key(sptr, cap, kw);
    if (key != NULL) ls_json_pointer_push_key(sptr, cap, key);
    ls_status st = check_schema_node(c, child, sptr, cap, 0, depth + 1);
    sptr[keep] = '\0';
    return st;
}

static ls_status add_pattern(loadctx *c, const cJSON *node, const char *sptr) {
    if (c->s->n_patterns == c->pat_cap) {
        size_t ncap = c->pat_cap == 0 ? 8 : c->pat_cap * 2;
        pattern_entry *np = realloc(c->s->patterns, ncap * sizeof *np);
        if (np == NULL) return LS_ERR_NOMEM;
        c->s->patterns = np;
        c->pat_cap = ncap;
    }
    pattern_entry *e = &c->s->patterns[c->s->n_patterns];
    int rc = regcomp(&e->re, node->valuestring, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[200], msg[300];
        regerror(rc, &e->re, why, sizeof why);
        snprintf(msg, sizeof msg, "does not compile as a POSIX extended regex: %s", why);
        return load_fail(c, sptr, "pattern", msg);
    }
    e->node = node;
    c->s->n_patterns++;
    return LS_OK;
}

static ls_status check_keyword(loadctx *c, const cJSON *kv, char *sptr, size_t cap,
                               int is_root, int depth) {
    const char *kw = kv->string;
    for (size_t i = 0; i < sizeof ANNOTATIONS / sizeof *ANNOTATIONS; i++)
        if (strcmp(kw, ANNOTATIONS[i]) == 0)
            return cJSON_IsString(kv) ? LS_OK : load_fail(c, sptr, kw, "must be a string");
    if (strcmp(kw, "$schema") == 0) {
        if (!is_root) return load_fail(c, sptr, kw, "is allowed only at the root");
        if (!cJSON_IsString(kv) ||
            strcmp(kv->valuestring, "https://json-schema.org/draft/2020-12/schema") != 0)
            return load_fail(c, sptr, kw, "must name draft 2020-12");
        return LS_OK;
    }
    if (strcmp(kw, "$id") == 0) {
        if (!is_root) return load_fail(c, sptr, kw, "is allowed only at the root");
        return cJSON_IsString(kv) ? LS_OK : load_fail(c, sptr, kw, "must be a string");
    }
    if (strcmp(kw, "type") == 0) {
        if (cJSON_IsString(kv))
            return is_type_name(kv->valuestring) ? LS_OK
                                                 : load_fail(c, sptr, kw, "names an unknown type");
        if (!cJSON_IsArray(kv) || kv->child == NULL || !strings_unique(kv))
            return load_fail(c, sptr, kw, "must be a type name or a non-empty array of them");
        for (const cJSON *t = kv->child; t != NULL; t = t->next)
            if (!is_type_name(t->valuestring))
                return load_fail(c, sptr, kw, "names an unknown type");
        return LS_OK;
    }
    if (strcmp(kw, "properties") == 0 || strcmp(kw, "$defs") == 0) {
        if (!cJSON_IsObject(kv)) return load_fail(c, sptr, kw, "must be an object of schemas");
        for (const cJSON *p = kv->child; p != NULL; p = p->next) {
            ls_status st = check_child(c, p, sptr, cap, kw, p->string, depth);
            if (st != LS_OK) return st;
        }
        return LS_OK;
    }
    if (strcmp(kw, "required") == 0)
        return cJSON_IsArray(kv) && strings_unique(kv)
                   ? LS_OK
                   : load_fail(c, sptr, kw, "must be an array of distinct strings");
    if (strcmp(kw, "additionalProperties") == 0 || strcmp(kw, "items") == 0 ||
        strcmp(kw, "not") == 0)
        return check_child(c, kv, sptr, cap, kw, NULL, depth);
    if (strcmp(kw, "allOf") == 0 || strcmp(kw, "anyOf") == 0 || strcmp(kw, "oneOf") == 0) {
        if (!cJSON_IsArray(kv) || kv->child == NULL)
            return load_fail(c, sptr, kw, "must be a non-empty array of schemas");
        int i = 0;
        for (const cJSON *p = kv->child; p != NULL; p = p->next, i++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            ls_status st = check_child(c, p, sptr, cap, kw, idx, depth);
            if (st != LS_OK) return st;
        }
        return LS_OK;
    }
    if (strcmp(kw, "enum") == 0)
        return cJSON_IsArray(kv) && kv->child != NULL
                   ? LS_OK
                   : load_fail(c, sptr, kw, "must be a non-empty array");
    if (strcmp(kw, "const") == 0) return LS_OK;
    if (strcmp(kw, "minimum") == 0 || strcmp(kw, "maximum") == 0 ||
        strcmp(kw, "exclusiveMinimum") == 0)
        return cJSON_IsNumber(kv) ? LS_OK : load_fail(c, sptr, kw, "must be a number");
    if (strcmp(kw, "minLength") == 0 || strcmp(kw, "maxLength") == 0 ||
        strcmp(kw, "minItems") == 0 || strcmp(kw, "maxItems") == 0)
        return is_nonneg_int(kv) ? LS_OK
                                 : load_fail(c, sptr, kw, "must be a non-negative integer");
    if (strcmp(kw, "uniqueItems") == 0)
        return cJSON_IsBool(kv) ? LS_OK : load_fail(c, sptr, kw, "must be a boolean");
    if (strcmp(kw, "pattern") == 0) {
        if (!cJSON_IsString(kv)) return load_fail(c, sptr, kw, "must be a string");
        return add_pattern(c, kv, sptr);
    }
    if (strcmp(kw, "$ref") == 0) {
        if (!cJSON_IsString(kv)) return load_fail(c, sptr, kw, "must be a string");
        const cJSON *target = resolve_ref(c->s->doc, kv->valuestring);
        if (target == NULL || (!cJSON_IsObject(target) && !cJSON_IsBool(target)))
            return load_fail(c, sptr, kw, "must be a local reference (#...) to a schema");
        return LS_OK;
    }
    return load_fail(c, sptr, kw, "is not in the supported subset (see receipts/schema.h)");
}

static ls_status check_schema_node(loadctx *c, const cJSON *node, char *sptr, size_t cap,
                                   int is_root, int depth) {
    if (depth > MAX_SCHEMA_DEPTH) return load_fail(c, sptr, "", "nests too deeply");
    if (cJSON_IsBool(node)) return LS_OK;
    if (!cJSON_IsObject(node)) {
        ls_json_errf(c->err, c->errlen, "%s: schema location #%s: a schema must be an object or"
                     " a boolean", c->what, sptr);
        return LS_ERR_SCHEMA;
    }
    for (const cJSON *kv = node->child; kv != NULL; kv = kv->next) {
        ls_status st = check_keyword(c, kv, sptr, cap, is_root, depth);
        if (st != LS_OK) return st;
    }
    return LS_OK;
}

ls_status ls_schema_load_json(cJSON *doc, const char *what, ls_schema **out, char *err,
                              size_t errlen) {
    *out = NULL;
    if (what == NULL) what = "schema";
    ls_schema *s = calloc(1, sizeof *s);
    if (s == NULL) {
        cJSON_Delete(doc);
        return LS_ERR_NOMEM;
    }
    s->doc = doc;
    loadctx c = {s, what, err, errlen, 0};
    char sptr[512] = "";
    ls_status st = check_schema_node(&c, doc, sptr, sizeof sptr, 1, 0);
    if (st != LS_OK) {
        ls_schema_free(s);
        return st;
    }
    *out = s;
    return LS_OK;
}

ls_status ls_schema_load_file(const char *path, ls_schema **out, char *err, size_t errlen) {
    cJSON *doc = NULL;
    *out = NULL;
    ls_status st = ls_json_read_file(path, &doc, err, errlen);
    if (st != LS_OK) return st;
    return ls_schema_load_json(doc, path, out, err, errlen);
}

ls_status ls_schema_load(const char *name, ls_schema **out, char *err, size_t errlen) {
    *out = NULL;
    size_t n = strlen(name);
    if (n == 0 || n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n) {
        ls_json_errf(err, errlen, "schema name \"%s\": expected [a-z0-9_-]+", name);
        return LS_ERR_ARG;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.schema.json", ls_schema_dir(), name);
    return ls_schema_load_file(path, out, err, errlen);
}

/* ---- the cache -------------------------------------------------------- */

typedef struct cache_entry {
    struct cache_entry *next;
    ls_schema *schema;
    char name[];
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *cache_head;

ls_status ls_schema_get(const char *name, const ls_schema **out, char *err, size_t errlen) {
    *out = NULL;
    ls_status st = LS_OK;
    pthread_mutex_lock(&cache_lock);
    for (cache_entry *e = cache_head; e != NULL; e = e->next) {
        if (strcmp(e->name, name) == 0) {
            *out = e->schema;
            goto cleanup;
        }
    }
    ls_schema *s = NULL;
    st = ls_schema_load(name, &s, err, errlen);
    if (st != LS_OK) goto cleanup;
    cache_entry *e = malloc(sizeof *e + strlen(name) + 1);
    if (e == NULL) {
        ls_schema_free(s);
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    strcpy(e->name, name);
    e->schema = s;
    e->next = cache_head;
    cache_head = e;
    *out = s;
cleanup:
    pthread_mutex_unlock(&cache_lock);
    return st;
}

/* ---- validation -------------------------------------------------------- */

typedef struct {
    const ls_schema *s;
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

static const regex_t *find_pattern(const ls_schema *s, const cJSON *node) {
    for (size_t i = 0; i < s->n_patterns; i++)
        if (s->patterns[i].node == node) return &s->patterns[i].re;
    return NULL;
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

ls_status ls_schema_validate(const ls_schema *s, const cJSON *doc, ls_schema_errors *errs) {
    vctx *c = calloc(1, sizeof *c);
    if (c == NULL) return LS_ERR_NOMEM;
    c->s = s;
    c->errs = errs;
    int ok = validate(c, s->doc, doc, 0);
    ls_status st = c->nomem ? LS_ERR_NOMEM : ok ? LS_OK : LS_ERR_SCHEMA;
    free(c);
    return st;
}

void ls_schema_errors_first(const ls_schema_errors *errs, char *buf, size_t cap) {
    if (cap == 0) return;
    buf[0] = '\0';
    if (errs == NULL || errs->count == 0) return;
    const ls_schema_error *e = &errs->items[0];
    snprintf(buf, cap, "%s: %s: %s", e->pointer[0] != '\0' ? e->pointer : "(root)", e->keyword,
             e->message);
}

void ls_schema_errors_free(ls_schema_errors *errs) {
    if (errs == NULL) return;
    for (size_t i = 0; i < errs->count; i++) {
        free(errs->items[i].pointer);
        free(errs->items[i].keyword);
        free(errs->items[i].message);
    }
    free(errs->items);
    memset(errs, 0, sizeof *errs);
}
