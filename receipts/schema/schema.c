/* schema.c - loading and subset checking of JSON Schemas, and the cache
 * (contract and the supported keyword subset in schema.h; the compiled form
 * and validation are in schema_validate.c). */
#include "receipts/schema/schema.h"

#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "receipts/schema/schema_internal.h"

#ifndef LS_SCHEMA_DIR
#define LS_SCHEMA_DIR "schemas"
#endif


const char *ls_schema_dir(void) {
    const char *env = getenv("LONGSTRAW_SCHEMA_DIR");
    return env != NULL && env[0] != '\0' ? env : LS_SCHEMA_DIR;
}

void ls_schema_free(ls_schema *s) {
    if (s == NULL) return;
    for (size_t i = 0; i < s->n_patterns; i++) regfree(&s->patterns[i].re);
    free(s->patterns);
    ls_schema_free_compiled(s);
    cJSON_Delete(s->doc);
    free(s);
}

const char *ls_schema_id(const ls_schema *s) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(s->doc, "$id");
    return cJSON_IsString(id) ? id->valuestring : "";
}

/* ---- $ref resolution: "#" or "#" followed by a JSON pointer ---------- */

const cJSON *ls_schema_resolve_ref(const cJSON *root, const char *ref) {
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
        ls_schema_pattern *np = realloc(c->s->patterns, ncap * sizeof *np);
        if (np == NULL) return LS_ERR_NOMEM;
        c->s->patterns = np;
        c->pat_cap = ncap;
    }
    ls_schema_pattern *e = &c->s->patterns[c->s->n_patterns];
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
        const cJSON *target = ls_schema_resolve_ref(c->s->doc, kv->valuestring);
        if (target == NULL || (!cJSON_IsObject(target) && !cJSON_IsBool(target)))
            return load_fail(c, sptr, kw, "must be a local reference (#...) to a schema");
        return LS_OK;
    }
    return load_fail(c, sptr, kw, "is not in the supported subset (see receipts/schema/schema.h)");
}

static ls_status check_schema_node(loadctx *c, const cJSON *node, char *sptr, size_t cap,
                                   int is_root, int depth) {
    if (depth > LS_SCHEMA_MAX_DEPTH) return load_fail(c, sptr, "", "nests too deeply");
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
    if (st == LS_OK) st = ls_schema_compile(s);
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

