/* schema_validate.c - validation against a loaded JSON Schema (schema.h):
 * at load, each schema node is compiled once (its keywords found by one pass
 * over its members, the type keyword as bits, the names of properties and
 * required in a hash, $ref targets resolved); validation then reads the
 * compiled nodes and looks nothing up by keyword. */
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "receipts/schema/schema_internal.h"

typedef ls_schema_node snode;

static const char *const TYPE_NAMES[] = {"null",   "boolean", "object", "array",
                                         "number", "string",  "integer"};

static const regex_t *find_pattern(const ls_schema *s, const cJSON *node) {
    for (size_t i = 0; i < s->n_patterns; i++)
        if (s->patterns[i].node == node) return &s->patterns[i].re;
    return NULL;
}

/* ---- compiling: every schema node's keywords found once, at load ------- */

/* Bits of a type keyword, in TYPE_NAMES order. */
enum { TY_NULL = 1, TY_BOOLEAN = 2, TY_OBJECT = 4, TY_ARRAY = 8, TY_NUMBER = 16, TY_STRING = 32,
       TY_INTEGER = 64 };

/* The keywords validation reads (the rest are annotations or hold
 * subschemas reached only through $ref). */
typedef enum {
    KW_REF, KW_TYPE, KW_ENUM, KW_CONST, KW_MINIMUM, KW_MAXIMUM, KW_EXCL_MINIMUM, KW_MIN_LENGTH,
    KW_MAX_LENGTH, KW_PATTERN, KW_MIN_ITEMS, KW_MAX_ITEMS, KW_UNIQUE_ITEMS, KW_ITEMS, KW_REQUIRED,
    KW_PROPERTIES, KW_ADDITIONAL, KW_ALL_OF, KW_ANY_OF, KW_ONE_OF, KW_NOT, KW_COUNT
} keyword;

static const char *const KEYWORDS[KW_COUNT] = {
    "$ref",      "type",     "enum",        "const",    "minimum",    "maximum",
    "exclusiveMinimum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "uniqueItems", "items",  "required",    "properties", "additionalProperties", "allOf",
    "anyOf",     "oneOf",    "not",
};

#define NO_NAME UINT32_MAX

/* A name of "properties" or "required": the property's schema (NULL when
 * only "required" names it). */
typedef struct {
    const char *name;
    const snode *schema;
} prop_name;

/* A schema node as validation reads it: each keyword's value as the first
 * member of that name (cJSON_GetObjectItemCaseSensitive's answer), NULL when
 * absent, and the subschemas compiled. */
struct ls_schema_node {
    signed char boolean; /* 1 the schema true, 0 false, -1 a keyword schema */
    const snode *ref;    /* $ref's target, NULL without $ref */
    const cJSON *kw[KW_COUNT];
    unsigned type_mask;  /* TY_* the type keyword allows */
    const regex_t *re;   /* pattern's, NULL when it has none */
    const snode *items, *addl, *not_schema;
    const snode **all_of, **any_of, **one_of;
    size_t n_all_of, n_any_of, n_one_of;
    prop_name *names;    /* properties' members, then required's other names */
    size_t n_names;
    uint32_t *slots;     /* hash of names: index + 1, 0 empty; slot_mask + 1 slots */
    size_t slot_mask;
    uint32_t *req;       /* index in names of each entry of required (NO_NAME: not a string) */
    size_t n_req;
};

static const snode SN_TRUE = {.boolean = 1}, SN_FALSE = {.boolean = 0};
static const snode SN_EMPTY = {.boolean = -1}; /* a $ref that resolves to no schema */

typedef struct {
    ls_schema *s;
    const cJSON **memo_key; /* open addressing: compiled nodes by their cJSON node */
    snode **memo_val;
    size_t memo_mask, memo_used;
    snode **pending; /* nodes whose $ref is still to be resolved */
    size_t n_pending, cap_pending;
} compiler;

static uint32_t hash_str(const char *k) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)k; *p != '\0'; p++) h = (h ^ *p) * 16777619u;
    return h;
}

static size_t hash_ptr(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 29;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    return (size_t)(x ^ (x >> 32));
}

static void free_snode(snode *sn) {
    free(sn->all_of);
    free(sn->any_of);
    free(sn->one_of);
    free(sn->names);
    free(sn->slots);
    free(sn->req);
    free(sn);
}

void ls_schema_free_compiled(ls_schema *s) {
    for (size_t i = 0; i < s->n_nodes; i++) free_snode(s->nodes[i]);
    free(s->nodes);
    s->nodes = NULL;
    s->n_nodes = s->cap_nodes = 0;
    s->root = NULL;
}

static int memo_grow(compiler *cc) {
    size_t ncap = cc->memo_mask ? 2 * (cc->memo_mask + 1) : 256;
    const cJSON **nk = calloc(ncap, sizeof *nk);
    snode **nv = calloc(ncap, sizeof *nv);
    if (nk == NULL || nv == NULL) {
        free(nk);
        free(nv);
        return 0;
    }
    for (size_t i = 0; cc->memo_mask && i <= cc->memo_mask; i++) {
        if (cc->memo_key[i] == NULL) continue;
        size_t j = hash_ptr(cc->memo_key[i]) & (ncap - 1);
        while (nk[j] != NULL) j = (j + 1) & (ncap - 1);
        nk[j] = cc->memo_key[i];
        nv[j] = cc->memo_val[i];
    }
    free(cc->memo_key);
    free(cc->memo_val);
    cc->memo_key = nk;
    cc->memo_val = nv;
    cc->memo_mask = ncap - 1;
    return 1;
}

/* Index of name in sn's names, -1 when absent. */
static long find_name(const snode *sn, const char *name) {
    if (sn->slots == NULL) return -1;
    for (size_t j = hash_str(name) & sn->slot_mask;; j = (j + 1) & sn->slot_mask) {
        uint32_t v = sn->slots[j];
        if (v == 0) return -1;
        if (strcmp(sn->names[v - 1].name, name) == 0) return (long)v - 1;
    }
}

/* find_name trying names[*hint] first: instances mostly list their members
 * in the schema's order, so one strcmp usually finds it.  *hint moves past a
 * hit. */
static long find_name_hinted(const snode *sn, const char *name, size_t *hint) {
    long i = *hint < sn->n_names && strcmp(sn->names[*hint].name, name) == 0 ? (long)*hint
                                                                            : find_name(sn, name);
    if (i >= 0) *hint = (size_t)i + 1;
    return i;
}

/* Adds name (first occurrence wins); its index, or NO_NAME when out of memory. */
static uint32_t add_name(snode *sn, const char *name, const snode *schema, size_t cap) {
    size_t j = hash_str(name) & sn->slot_mask;
    for (; sn->slots[j] != 0; j = (j + 1) & sn->slot_mask)
        if (strcmp(sn->names[sn->slots[j] - 1].name, name) == 0) return sn->slots[j] - 1;
    if (sn->n_names >= cap) return NO_NAME;
    sn->names[sn->n_names] = (prop_name){name, schema};
    sn->slots[j] = (uint32_t)++sn->n_names;
    return sn->slots[j] - 1;
}

static size_t count_children(const cJSON *v) {
    size_t n = 0;
    for (const cJSON *c = v->child; c != NULL; c = c->next) n++;
    return n;
}

static const snode *compile(compiler *cc, const cJSON *node);

/* The subschemas of an applicator's array (its children, as validation
 * walks them). */
static int compile_list(compiler *cc, const cJSON *kv, const snode ***out, size_t *n) {
    *n = count_children(kv);
    if (*n == 0) return 1;
    *out = calloc(*n, sizeof **out);
    if (*out == NULL) return 0;
    size_t i = 0;
    for (const cJSON *c = kv->child; c != NULL; c = c->next, i++)
        if (((*out)[i] = compile(cc, c)) == NULL) return 0;
    return 1;
}

/* properties and required: one hash of every name either holds. */
static int compile_names(compiler *cc, snode *sn) {
    const cJSON *props = sn->kw[KW_PROPERTIES], *req = sn->kw[KW_REQUIRED];
    size_t cap = (props ? count_children(props) : 0) + (req ? count_children(req) : 0);
    if (cap == 0) return 1;
    if (cap > UINT32_MAX / 4) return 0;
    size_t slots = 16;
    while (slots < 2 * cap) slots *= 2;
    sn->names = calloc(cap, sizeof *sn->names);
    sn->slots = calloc(slots, sizeof *sn->slots);
    if (sn->names == NULL || sn->slots == NULL) return 0;
    sn->slot_mask = slots - 1;
    /* as cJSON_GetObjectItemCaseSensitive: members up to the first unnamed one */
    for (const cJSON *p = props ? props->child : NULL; p != NULL && p->string != NULL; p = p->next) {
        const snode *ps = compile(cc, p);
        if (ps == NULL || add_name(sn, p->string, ps, cap) == NO_NAME) return 0;
    }
    if (req == NULL) return 1;
    sn->n_req = count_children(req);
    sn->req = calloc(sn->n_req ? sn->n_req : 1, sizeof *sn->req);
    if (sn->req == NULL) return 0;
    size_t i = 0;
    for (const cJSON *r = req->child; r != NULL; r = r->next, i++) {
        sn->req[i] = NO_NAME;
        if (r->valuestring != NULL && (sn->req[i] = add_name(sn, r->valuestring, NULL, cap)) == NO_NAME)
            return 0;
    }
    return 1;
}

static unsigned type_bit(const char *name) {
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof *TYPE_NAMES; i++)
        if (strcmp(name, TYPE_NAMES[i]) == 0) return 1u << i;
    return 0;
}

static int fill_snode(compiler *cc, snode *sn, const cJSON *node) {
    for (const cJSON *kv = node->child; kv != NULL && kv->string != NULL; kv = kv->next)
        for (int k = 0; k < KW_COUNT; k++)
            if (strcmp(kv->string, KEYWORDS[k]) == 0) {
                if (sn->kw[k] == NULL) sn->kw[k] = kv;
                break;
            }
    const cJSON *t = sn->kw[KW_TYPE];
    if (cJSON_IsString(t)) sn->type_mask = type_bit(t->valuestring);
    for (const cJSON *e = t && !cJSON_IsString(t) ? t->child : NULL; e != NULL; e = e->next)
        if (cJSON_IsString(e)) sn->type_mask |= type_bit(e->valuestring);
    if (sn->kw[KW_PATTERN]) sn->re = find_pattern(cc->s, sn->kw[KW_PATTERN]);
    if (sn->kw[KW_REF]) {
        if (cc->n_pending == cc->cap_pending) {
            size_t ncap = cc->cap_pending ? 2 * cc->cap_pending : 16;
            snode **np = realloc(cc->pending, ncap * sizeof *np);
            if (np == NULL) return 0;
            cc->pending = np;
            cc->cap_pending = ncap;
        }
        cc->pending[cc->n_pending++] = sn;
    }
    if (sn->kw[KW_ITEMS] && (sn->items = compile(cc, sn->kw[KW_ITEMS])) == NULL) return 0;
    if (sn->kw[KW_ADDITIONAL] && (sn->addl = compile(cc, sn->kw[KW_ADDITIONAL])) == NULL) return 0;
    if (sn->kw[KW_NOT] && (sn->not_schema = compile(cc, sn->kw[KW_NOT])) == NULL) return 0;
    if (sn->kw[KW_ALL_OF] && !compile_list(cc, sn->kw[KW_ALL_OF], &sn->all_of, &sn->n_all_of)) return 0;
    if (sn->kw[KW_ANY_OF] && !compile_list(cc, sn->kw[KW_ANY_OF], &sn->any_of, &sn->n_any_of)) return 0;
    if (sn->kw[KW_ONE_OF] && !compile_list(cc, sn->kw[KW_ONE_OF], &sn->one_of, &sn->n_one_of)) return 0;
    return compile_names(cc, sn);
}

/* The compiled form of the schema at node (any JSON value: validation treats
 * a value that is neither a boolean nor an object as a schema without
 * keywords); NULL when out of memory.  Each node is compiled once, $ref
 * targets after the tree (cc->pending), so recursion follows the document's
 * nesting only. */
static const snode *compile(compiler *cc, const cJSON *node) {
    if (node == NULL) return &SN_EMPTY;
    if (cJSON_IsBool(node)) return cJSON_IsTrue(node) ? &SN_TRUE : &SN_FALSE;
    if (2 * (cc->memo_used + 1) > cc->memo_mask + 1 && !memo_grow(cc)) return NULL;
    size_t j = hash_ptr(node) & cc->memo_mask;
    for (; cc->memo_key[j] != NULL; j = (j + 1) & cc->memo_mask)
        if (cc->memo_key[j] == node) return cc->memo_val[j];
    ls_schema *s = cc->s;
    if (s->n_nodes == s->cap_nodes) {
        size_t ncap = s->cap_nodes ? 2 * s->cap_nodes : 64;
        snode **nn = realloc(s->nodes, ncap * sizeof *nn);
        if (nn == NULL) return NULL;
        s->nodes = nn;
        s->cap_nodes = ncap;
    }
    snode *sn = calloc(1, sizeof *sn);
    if (sn == NULL) return NULL;
    sn->boolean = -1;
    s->nodes[s->n_nodes++] = sn;
    cc->memo_key[j] = node;
    cc->memo_val[j] = sn;
    cc->memo_used++;
    return fill_snode(cc, sn, node) ? sn : NULL;
}

ls_status ls_schema_compile(ls_schema *s) {
    compiler cc = {.s = s};
    ls_status st = LS_ERR_NOMEM;
    if ((s->root = compile(&cc, s->doc)) == NULL) goto cleanup;
    while (cc.n_pending > 0) {
        snode *sn = cc.pending[--cc.n_pending];
        const cJSON *ref = sn->kw[KW_REF];
        sn->ref = cJSON_IsString(ref) ? compile(&cc, ls_schema_resolve_ref(s->doc, ref->valuestring)) : &SN_EMPTY;
        if (sn->ref == NULL) goto cleanup;
    }
    st = LS_OK;
cleanup:
    free(cc.memo_key);
    free(cc.memo_val);
    free(cc.pending);
    return st;
}

/* ---- validation -------------------------------------------------------- */

typedef struct {
    ls_schema_errors *errs; /* NULL while probing inside anyOf/oneOf/not */
    int nomem;
    size_t len;     /* strlen(ptr) */
    char ptr[1024]; /* JSON pointer of the current instance location */
} vctx;

/* ls_json_pointer_push_key / _index on c->ptr, keeping c->len; each returns
 * the length to give ptr_pop to undo it.  A key without '~' or '/' that
 * fits is copied whole. */
static size_t ptr_push_key(vctx *c, const char *key) {
    size_t keep = c->len, kl = strlen(key);
    if (keep + 1 + kl < sizeof c->ptr && key[strcspn(key, "~/")] == '\0') {
        c->ptr[keep] = '/';
        memcpy(c->ptr + keep + 1, key, kl + 1);
        c->len = keep + 1 + kl;
    } else {
        ls_json_pointer_push_key(c->ptr, sizeof c->ptr, key);
        c->len = keep + strlen(c->ptr + keep);
    }
    return keep;
}

static size_t ptr_push_index(vctx *c, size_t index) {
    size_t keep = c->len;
    ls_json_pointer_push_index(c->ptr, sizeof c->ptr, index);
    c->len = keep + strlen(c->ptr + keep);
    return keep;
}

static void ptr_pop(vctx *c, size_t keep) {
    c->ptr[keep] = '\0';
    c->len = keep;
}

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

/* The TY_* bits inst has ("integer" for a finite integral number too). */
static unsigned inst_types(const cJSON *v) {
    if (cJSON_IsNull(v)) return TY_NULL;
    if (cJSON_IsBool(v)) return TY_BOOLEAN;
    if (cJSON_IsNumber(v))
        return TY_NUMBER |
               (isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble ? TY_INTEGER : 0);
    if (cJSON_IsString(v)) return TY_STRING;
    if (cJSON_IsArray(v)) return TY_ARRAY;
    if (cJSON_IsObject(v)) return TY_OBJECT;
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

static int validate(vctx *c, const snode *sn, const cJSON *inst, int depth);

static int validate_at_key(vctx *c, const snode *sn, const cJSON *inst, const char *key,
                           int depth) {
    size_t keep = ptr_push_key(c, key);
    int ok = validate(c, sn, inst, depth + 1);
    ptr_pop(c, keep);
    return ok;
}

/* Runs sn on inst without recording errors: the verdict only. */
static int probe(vctx *c, const snode *sn, const cJSON *inst, int depth) {
    ls_schema_errors *saved = c->errs;
    c->errs = NULL;
    int ok = validate(c, sn, inst, depth + 1);
    c->errs = saved;
    return ok;
}

static int validate_number(vctx *c, const snode *sn, const cJSON *inst) {
    int ok = 1;
    double v = inst->valuedouble;
    const cJSON *kw;
    if ((kw = sn->kw[KW_MINIMUM]) && v < kw->valuedouble)
        ok = fail(c, "minimum", "%.17g is less than the minimum %.17g", v, kw->valuedouble);
    if ((kw = sn->kw[KW_MAXIMUM]) && v > kw->valuedouble)
        ok = fail(c, "maximum", "%.17g is more than the maximum %.17g", v, kw->valuedouble);
    if ((kw = sn->kw[KW_EXCL_MINIMUM]) && !(v > kw->valuedouble))
        ok = fail(c, "exclusiveMinimum", "%.17g is not more than %.17g", v, kw->valuedouble);
    return ok;
}

static int validate_string(vctx *c, const snode *sn, const cJSON *inst) {
    int ok = 1;
    const cJSON *kw;
    if (sn->kw[KW_MIN_LENGTH] || sn->kw[KW_MAX_LENGTH]) {
        size_t n = utf8_length(inst->valuestring);
        if ((kw = sn->kw[KW_MIN_LENGTH]) && n < kw->valuedouble)
            ok = fail(c, "minLength", "string of %zu characters is shorter than %.0f", n,
                      kw->valuedouble);
        if ((kw = sn->kw[KW_MAX_LENGTH]) && n > kw->valuedouble)
            ok = fail(c, "maxLength", "string of %zu characters is longer than %.0f", n,
                      kw->valuedouble);
    }
    if ((kw = sn->kw[KW_PATTERN])) {
        if (sn->re == NULL || regexec(sn->re, inst->valuestring, 0, NULL, 0) != 0)
            ok = fail(c, "pattern", "string does not match %s", kw->valuestring);
    }
    return ok;
}

static int validate_array(vctx *c, const snode *sn, const cJSON *inst, int depth) {
    int ok = 1;
    const cJSON *kw;
    size_t n = (size_t)cJSON_GetArraySize(inst);
    if ((kw = sn->kw[KW_MIN_ITEMS]) && n < kw->valuedouble)
        ok = fail(c, "minItems", "%zu items, fewer than %.0f", n, kw->valuedouble);
    if ((kw = sn->kw[KW_MAX_ITEMS]) && n > kw->valuedouble)
        ok = fail(c, "maxItems", "%zu items, more than %.0f", n, kw->valuedouble);
    if ((kw = sn->kw[KW_UNIQUE_ITEMS]) && cJSON_IsTrue(kw)) {
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
    if (sn->items != NULL) {
        size_t i = 0;
        for (const cJSON *it = inst->child; it != NULL; it = it->next, i++) {
            size_t keep = ptr_push_index(c, i);
            if (!validate(c, sn->items, it, depth + 1)) ok = 0;
            ptr_pop(c, keep);
            if (!ok && c->errs == NULL) return 0;
        }
    }
    return ok;
}

/* Names a bitmap on the stack covers in the required check; a node with more
 * looks each required name up in the instance instead. */
#define REQ_BITMAP_WORDS 8
/* Members whose lookup the required check keeps for the properties pass. */
#define CACHED_MEMBERS 64

static int validate_object(vctx *c, const snode *sn, const cJSON *inst, int depth) {
    int ok = 1;
    long found[CACHED_MEMBERS]; /* find_name of the first n_found members */
    size_t n_found = 0;
    if (sn->kw[KW_REQUIRED] != NULL) {
        uint64_t seen[REQ_BITMAP_WORDS] = {0};
        int bitmap = sn->n_names <= 64 * REQ_BITMAP_WORDS;
        /* as cJSON_GetObjectItemCaseSensitive: members up to the first unnamed one */
        size_t hint = 0;
        for (const cJSON *m = bitmap ? inst->child : NULL; m != NULL && m->string != NULL; m = m->next) {
            long i = find_name_hinted(sn, m->string, &hint);
            if (i >= 0) seen[i / 64] |= UINT64_C(1) << (i % 64);
            if (n_found < CACHED_MEMBERS) found[n_found++] = i;
        }
        size_t k = 0;
        for (const cJSON *r = sn->kw[KW_REQUIRED]->child; r != NULL; r = r->next, k++) {
            uint32_t i = sn->req[k];
            int present = !bitmap ? cJSON_GetObjectItemCaseSensitive(inst, r->valuestring) != NULL
                          : i != NO_NAME && (seen[i / 64] >> (i % 64) & 1);
            if (!present) ok = fail(c, "required", "missing required property \"%s\"", r->valuestring);
        }
    }
    if (!ok && c->errs == NULL) return 0;
    int props = sn->kw[KW_PROPERTIES] != NULL;
    if (!props && sn->addl == NULL) return ok;
    size_t hint = 0, mi = 0;
    for (const cJSON *m = inst->child; m != NULL; m = m->next, mi++) {
        long i = mi < n_found                   ? found[mi]
                 : props && m->string != NULL ? find_name_hinted(sn, m->string, &hint)
                                              : -1;
        const snode *ps = i >= 0 ? sn->names[i].schema : NULL;
        if (ps != NULL) {
            if (!validate_at_key(c, ps, m, m->string, depth)) ok = 0;
        } else if (sn->addl != NULL) {
            if (cJSON_IsFalse(sn->kw[KW_ADDITIONAL])) {
                size_t keep = ptr_push_key(c, m->string);
                ok = fail(c, "additionalProperties", "property \"%s\" is not allowed", m->string);
                ptr_pop(c, keep);
            } else if (!validate_at_key(c, sn->addl, m, m->string, depth)) {
                ok = 0;
            }
        }
        if (!ok && c->errs == NULL) return 0;
    }
    return ok;
}

static int validate(vctx *c, const snode *sn, const cJSON *inst, int depth) {
    if (sn->boolean >= 0) return sn->boolean ? 1 : fail(c, "false", "no value is allowed here");
    if (depth > LS_SCHEMA_MAX_DEPTH)
        return fail(c, "$ref", "schema applications nest deeper than %d", LS_SCHEMA_MAX_DEPTH);
    int ok = 1;
    const cJSON *kw;
#define STOP_WHEN_PROBING()                   \
    do {                                      \
        if (!ok && c->errs == NULL) return 0; \
    } while (0)
    if (sn->ref != NULL) {
        if (!validate(c, sn->ref, inst, depth + 1)) ok = 0;
        STOP_WHEN_PROBING();
    }
    if ((kw = sn->kw[KW_TYPE]) && !(sn->type_mask & inst_types(inst))) {
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
    if ((kw = sn->kw[KW_ENUM])) {
        int found = 0;
        for (const cJSON *e = kw->child; e != NULL && !found; e = e->next)
            found = json_equal(e, inst);
        if (!found) ok = fail(c, "enum", "value is not one of the %d allowed values",
                              cJSON_GetArraySize(kw));
        STOP_WHEN_PROBING();
    }
    if ((kw = sn->kw[KW_CONST]) && !json_equal(kw, inst)) {
        if (cJSON_IsString(kw)) ok = fail(c, "const", "value must be \"%s\"", kw->valuestring);
        else ok = fail(c, "const", "value differs from the required constant");
        STOP_WHEN_PROBING();
    }
    if (cJSON_IsNumber(inst) && !validate_number(c, sn, inst)) ok = 0;
    if (cJSON_IsString(inst) && !validate_string(c, sn, inst)) ok = 0;
    STOP_WHEN_PROBING();
    if (cJSON_IsArray(inst) && !validate_array(c, sn, inst, depth)) ok = 0;
    if (cJSON_IsObject(inst) && !validate_object(c, sn, inst, depth)) ok = 0;
    STOP_WHEN_PROBING();
    for (size_t i = 0; i < sn->n_all_of; i++) {
        if (!validate(c, sn->all_of[i], inst, depth + 1)) ok = 0;
        STOP_WHEN_PROBING();
    }
    if (sn->kw[KW_ANY_OF]) {
        int any = 0;
        for (size_t i = 0; i < sn->n_any_of && !any; i++) any = probe(c, sn->any_of[i], inst, depth);
        if (!any) ok = fail(c, "anyOf", "value matches none of the %d alternatives",
                            cJSON_GetArraySize(sn->kw[KW_ANY_OF]));
        STOP_WHEN_PROBING();
    }
    if (sn->kw[KW_ONE_OF]) {
        int matched = 0;
        for (size_t i = 0; i < sn->n_one_of; i++) matched += probe(c, sn->one_of[i], inst, depth);
        if (matched != 1)
            ok = fail(c, "oneOf", "value matches %d of the %d alternatives, expected exactly 1",
                      matched, cJSON_GetArraySize(sn->kw[KW_ONE_OF]));
        STOP_WHEN_PROBING();
    }
    if (sn->not_schema != NULL && probe(c, sn->not_schema, inst, depth))
        ok = fail(c, "not", "value matches a schema it must not match");
#undef STOP_WHEN_PROBING
    return ok;
}

ls_status ls_schema_validate(const ls_schema *s, const cJSON *doc, ls_schema_errors *errs) {
    vctx *c = calloc(1, sizeof *c);
    if (c == NULL) return LS_ERR_NOMEM;
    c->errs = errs;
    int ok = validate(c, s->root, doc, 0);
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
