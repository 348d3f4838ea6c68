/* test_schema.c - the C JSON Schema validator (receipts/schema/schema.h):
 * each keyword of the subset on hand-derived cases (also checked against
 * python3-jsonschema), error locations, refusal of anything outside the
 * subset, and the agreement test: every schema in schemas/ against its
 * fixtures in tests/fixtures/schema/<name>/{valid,invalid}, with both
 * validators, which must agree on every document; and the differential
 * test of the compiled validator against the reference (schema_ref.c). */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "receipts/reading/trace_reader.h"
#include "tests/receipts/schema_ref.h"
#include "tests/support/test_receipts_support.h"

static ls_schema *load(const char *text) {
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "test schema is not JSON: %s", text);
    ls_schema *s = NULL;
    char err[512];
    ls_status st = ls_schema_load_json(doc, "inline", &s, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s: %s", text, err);
    return s;
}

static ls_status validate_text(const ls_schema *s, const char *doc_text, ls_schema_errors *errs) {
    cJSON *doc = cJSON_Parse(doc_text);
    cr_assert_not_null(doc, "test document is not JSON: %s", doc_text);
    ls_status st = ls_schema_validate(s, doc, errs);
    cJSON_Delete(doc);
    return st;
}

/* ---- keyword semantics, hand-derived ---------------------------------- */

typedef struct {
    const char *schema;
    const char *docs[8];
    int valid[8];
} kw_case;

static const kw_case CASES[] = {
    {"{\"type\":\"integer\"}", {"1", "1.0", "1.5", "\"1\"", "true", "1e2"}, {1, 1, 0, 0, 0, 1}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"a\"", "null", "0", "[]"}, {1, 1, 0, 0}},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":10,\"exclusiveMinimum\":0}",
     {"0", "0.5", "10", "10.5", "\"x\""}, {0, 1, 1, 0, 0}},
    {"{\"minimum\":0,\"maximum\":10}", {"-1", "\"x\"", "null"}, {0, 1, 1}},
    {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],"
     "\"additionalProperties\":false}",
     {"{\"a\":\"x\"}", "{}", "{\"a\":1}", "{\"a\":\"x\",\"b\":1}", "[]"}, {1, 0, 0, 0, 1}},
    {"{\"additionalProperties\":{\"type\":\"integer\"}}", {"{\"x\":1,\"y\":2}", "{\"x\":1,\"y\":\"2\"}"},
     {1, 0}},
    {"{\"enum\":[1,\"a\",[1,2],{\"k\":null}]}",
     {"1.0", "true", "[1.0,2]", "{\"k\":null}", "\"b\"", "[2,1]"}, {1, 0, 1, 1, 0, 0}},
    {"{\"const\":false}", {"false", "0", "null"}, {1, 0, 0}},
    {"{\"minLength\":2,\"maxLength\":3}",
     {"\"\\u00e9\"", "\"\\u00e9\\u00e9\"", "\"\\u00e9\\u00e9\\u00e9\\u00e9\"", "\"abcd\"", "5"},
     {0, 1, 0, 0, 1}},
    {"{\"pattern\":\"b+c\"}", {"\"abbcd\"", "\"ac\""}, {1, 0}},
    {"{\"pattern\":\"^[0-9a-f]{4}$\"}", {"\"00ff\"", "\"00FF\"", "\"00ff0\"", "12"}, {1, 0, 0, 1}},
    {"{\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2,\"uniqueItems\":true}",
     {"[1]", "[]", "[1,2,3]", "[1,1.0]", "[1,true]", "[\"a\"]"}, {1, 0, 0, 0, 0, 0}},
    {"{\"uniqueItems\":true}",
     {"[{\"a\":1,\"b\":2},{\"b\":2,\"a\":1}]", "[[1],[1,2]]", "[1,true,\"1\",null]"}, {0, 1, 1}},
    {"{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1}},"
     "\"properties\":{\"n\":{\"$ref\":\"#/$defs/pos\"}}}",
     {"{\"n\":1}", "{\"n\":0}", "{\"m\":0}"}, {1, 0, 1}},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", {"1", "3", "2.5", "\"x\""}, {1, 0, 1, 1}},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", {"\"a\"", "null", "1"}, {1, 1, 0}},
    {"{\"allOf\":[{\"minimum\":1},{\"maximum\":2}]}", {"1.5", "3", "0"}, {1, 0, 0}},
    {"{\"not\":{\"required\":[\"error\"]}}", {"{}", "{\"error\":1}", "7"}, {1, 0, 0}},
    {"{\"properties\":{\"a\":false,\"b\":true}}", {"{\"b\":1}", "{\"a\":1}"}, {1, 0}},
    {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":2}",
     {"\"ab\"", "\"abc\"", "1"}, {1, 0, 0}},
    {"{\"properties\":{\"status\":{\"enum\":[\"complete\",\"error\"]}},"
     "\"oneOf\":[{\"properties\":{\"status\":{\"const\":\"complete\"}},\"not\":{\"required\":[\"error\"]}},"
     "{\"properties\":{\"status\":{\"const\":\"error\"}},\"required\":[\"error\"]}]}",
     {"{\"status\":\"complete\"}", "{\"status\":\"error\"}", "{\"status\":\"error\",\"error\":{}}",
      "{\"status\":\"complete\",\"error\":{}}"},
     {1, 0, 1, 0}},
    {"{\"$defs\":{\"tree\":{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/tree\"}}},\"additionalProperties\":false}},\"$ref\":\"#/$defs/tree\"}",
     {"{\"kids\":[{\"kids\":[]},{}]}", "{\"kids\":[{\"kids\":[{\"x\":1}]}]}"}, {1, 0}},
};

Test(schema_keywords, hand_derived_cases) {
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        ls_schema *s = load(CASES[c].schema);
        for (size_t d = 0; d < 8 && CASES[c].docs[d] != NULL; d++) {
            ls_status st = validate_text(s, CASES[c].docs[d], NULL);
            cr_expect_eq(st == LS_OK, CASES[c].valid[d], "schema %s, document %s: C says %s",
                         CASES[c].schema, CASES[c].docs[d], st == LS_OK ? "valid" : "invalid");
        }
        ls_schema_free(s);
    }
}

/* The same cases through python3-jsonschema: the expected verdicts above
 * are the specification's, not just this validator's. */
Test(schema_keywords, python_agrees_with_hand_derived_cases) {
    char *dir = ls_test_mkdtemp();
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        char schema[4096], docs[8][4096], why[1024] = "";
        const char *paths[8];
        snprintf(schema, sizeof schema, "%s/s%zu.json", dir, c);
        ls_test_write_file(schema, CASES[c].schema, strlen(CASES[c].schema));
        size_t n = 0;
        for (; n < 8 && CASES[c].docs[n] != NULL; n++) {
            snprintf(docs[n], sizeof docs[n], "%s/s%zu-d%zu.json", dir, c, n);
            ls_test_write_file(docs[n], CASES[c].docs[n], strlen(CASES[c].docs[n]));
            paths[n] = docs[n];
        }
        int verdicts[8];
        int got = ls_test_python_validate(schema, paths, n, verdicts, 8, why, sizeof why);
        cr_assert_eq(got, (int)n, "python3-jsonschema: %s", why);
        for (size_t d = 0; d < n; d++)
            cr_expect_eq(verdicts[d], CASES[c].valid[d], "schema %s, document %s: python says %s",
                         CASES[c].schema, CASES[c].docs[d], verdicts[d] ? "valid" : "invalid");
    }
    ls_test_rmtree(dir);
    free(dir);
}

/* ---- error reports --------------------------------------------------- */

Test(schema_errors, pointer_and_keyword) {
    ls_schema *s = load("{\"properties\":{\"a\":{\"items\":{\"properties\":"
                        "{\"b/c~d\":{\"type\":\"integer\"}}}}},"
                        "\"required\":[\"a\",\"z\",\"y\"],\"additionalProperties\":false}");
    ls_schema_errors errs = {0};
    cr_assert_eq(validate_text(s, "{\"a\":[{\"b/c~d\":1},{\"b/c~d\":\"x\"}],\"q\":0}", &errs),
                 LS_ERR_SCHEMA);
    /* required z, required y, /a/1/b~1c~0d type, /q additionalProperties */
    cr_assert_eq(errs.count, 4u);
    cr_assert_str_eq(errs.items[0].pointer, "");
    cr_assert_str_eq(errs.items[0].keyword, "required");
    cr_assert_not_null(strstr(errs.items[0].message, "\"z\""), "%s", errs.items[0].message);
    cr_assert_not_null(strstr(errs.items[1].message, "\"y\""), "%s", errs.items[1].message);
    cr_assert_str_eq(errs.items[2].pointer, "/a/1/b~1c~0d");
    cr_assert_str_eq(errs.items[2].keyword, "type");
    cr_assert_str_eq(errs.items[3].pointer, "/q");
    cr_assert_str_eq(errs.items[3].keyword, "additionalProperties");
    char first[512];
    ls_schema_errors_first(&errs, first, sizeof first);
    cr_assert_str_eq(first, "(root): required: missing required property \"z\"");
    ls_schema_errors_free(&errs);
    cr_assert_eq(errs.count, 0u);
    ls_schema_free(s);
}

Test(schema_errors, many_errors_are_capped) {
    ls_schema *s = load("{\"items\":{\"type\":\"string\"}}");
    char doc[4096] = "[";
    for (int i = 0; i < 100; i++) strcat(doc, i ? ",1" : "1");
    strcat(doc, "]");
    ls_schema_errors errs = {0};
    cr_assert_eq(validate_text(s, doc, &errs), LS_ERR_SCHEMA);
    cr_assert_eq(errs.count, (size_t)LS_SCHEMA_MAX_ERRORS);
    cr_assert_eq(errs.dropped, 100u - LS_SCHEMA_MAX_ERRORS);
    cr_assert_str_eq(errs.items[63].pointer, "/63");
    ls_schema_errors_free(&errs);
    ls_schema_free(s);
}

/* A $ref cycle that never consumes the instance ends with an error, not a
 * stack overflow. */
Test(schema_errors, ref_cycle_terminates) {
    ls_schema *s = load("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
                        "\"$ref\":\"#/$defs/a\"}");
    ls_schema_errors errs = {0};
    cr_assert_eq(validate_text(s, "1", &errs), LS_ERR_SCHEMA);
    cr_assert_geq(errs.count, 1u);
    cr_assert_str_eq(errs.items[0].keyword, "$ref");
    ls_schema_errors_free(&errs);
    ls_schema_free(s);
}

/* ---- the subset is closed -------------------------------------------- */

Test(schema_subset, outside_keywords_refused) {
    struct {
        const char *schema, *mention;
    } bad[] = {
        {"{\"format\":\"date-time\"}", "format"},
        {"{\"properties\":{\"a\":{\"exclusiveMaximum\":3}}}", "/properties/a"},
        {"{\"patternProperties\":{}}", "patternProperties"},
        {"{\"prefixItems\":[]}", "prefixItems"},
        {"{\"propertyNames\":{}}", "propertyNames"},
        {"{\"$defs\":{\"x\":{\"$id\":\"urn:x\"}}}", "$id"},
        {"{\"items\":{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}}", "$schema"},
        {"{\"$schema\":\"http://json-schema.org/draft-07/schema#\"}", "2020-12"},
        {"{\"pattern\":\"(\"}", "pattern"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref"},
        {"{\"$ref\":\"other.schema.json\"}", "$ref"},
        {"{\"type\":\"int\"}", "type"},
        {"{\"type\":[]}", "type"},
        {"{\"required\":\"a\"}", "required"},
        {"{\"required\":[\"a\",\"a\"]}", "required"},
        {"{\"minItems\":-1}", "minItems"},
        {"{\"maxLength\":1.5}", "maxLength"},
        {"{\"enum\":[]}", "enum"},
        {"{\"anyOf\":[]}", "anyOf"},
        {"{\"oneOf\":{}}", "oneOf"},
        {"{\"not\":1}", "not"},
        {"{\"uniqueItems\":1}", "uniqueItems"},
        {"{\"minimum\":\"0\"}", "minimum"},
        {"[]", "object or a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *doc = cJSON_Parse(bad[i].schema);
        cr_assert_not_null(doc);
        ls_schema *s = NULL;
        char err[512] = "";
        ls_status st = ls_schema_load_json(doc, "bad.json", &s, err, sizeof err);
        cr_expect_eq(st, LS_ERR_SCHEMA, "%s loaded (%s)", bad[i].schema, ls_status_str(st));
        cr_expect_null(s);
        cr_expect_not_null(strstr(err, bad[i].mention), "%s: message \"%s\" lacks \"%s\"",
                           bad[i].schema, err, bad[i].mention);
        cr_expect_not_null(strstr(err, "bad.json"), "%s", err);
        ls_schema_free(s);
    }
    /* property names are not keywords */
    ls_schema *s = load("{\"properties\":{\"format\":{\"type\":\"string\"},\"$ref\":true}}");
    cr_assert_eq(validate_text(s, "{\"format\":\"x\",\"$ref\":1}", NULL), LS_OK);
    ls_schema_free(s);
}

Test(schema_subset, load_by_name_and_cache) {
    ls_schema *s = NULL;
    char err[512];
    cr_assert_eq(ls_schema_load("receipt", &s, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(ls_schema_id(s), "urn:longstraw:schema:receipt:v1");
    ls_schema_free(s);
    cr_assert_eq(ls_schema_load("../secret", &s, err, sizeof err), LS_ERR_ARG);
    cr_assert_eq(ls_schema_load("absent", &s, err, sizeof err), LS_ERR_IO);
    cr_assert_not_null(strstr(err, "absent.schema.json"), "%s", err);
    /* every schema in the directory loads by its name */
    glob_t g;
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/*.schema.json", ls_schema_dir());
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *base = strrchr(g.gl_pathv[i], '/') + 1;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - strlen(".schema.json")), base);
        cr_expect_eq(ls_schema_load(name, &s, err, sizeof err), LS_OK, "%s: %s", name, err);
        ls_schema_free(s);
    }
    globfree(&g);
    const ls_schema *a = NULL, *b = NULL;
    cr_assert_eq(ls_schema_get("manifest", &a, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_schema_get("manifest", &b, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(a, b);
}

/* ---- agreement over schemas/ and tests/fixtures/schema/ --------------- */

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted *.json / *.jsonl files of dir; returns their number. */
static size_t list_fixtures(const char *dir, char ***out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    size_t n = 0, cap = 0;
    char **files = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!has_suffix(de->d_name, ".json") && !has_suffix(de->d_name, ".jsonl")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            files = realloc(files, cap * sizeof *files);
            cr_assert_not_null(files);
        }
        files[n] = malloc(strlen(dir) + strlen(de->d_name) + 2);
        sprintf(files[n], "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(d);
    if (n > 0) qsort(files, n, sizeof *files, cmp_str);
    *out = files;
    return n;
}

static void free_list(char **files, size_t n) {
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
}

/* Schemas this test file's author owns: at least 3 invalid fixtures each. */
static int is_receipts_schema(const char *name) {
    static const char *const own[] = {"receipt", "manifest", "dsse", "parity", "audit-report"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (strcmp(name, own[i]) == 0) return 1;
    return 0;
}

enum { MAX_DOCS = 4096 };

Test(schema_agreement, every_schema_every_fixture, .timeout = 120) {
    glob_t g;
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/schemas/*.schema.json", LS_SOURCE_DIR);
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no schemas match %s", pattern);
    cr_assert_geq(g.gl_pathc, 5u, "expected at least the 5 receipts schemas");
    static int c_v[MAX_DOCS], py_v[MAX_DOCS];
    static size_t file_of[MAX_DOCS];
    size_t total_docs = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *schema = g.gl_pathv[i];
        const char *base = strrchr(schema, '/') + 1;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - strlen(".schema.json")), base);
        char err[1024];
        ls_schema *s = NULL;
        ls_status st = ls_schema_load_file(schema, &s, err, sizeof err);
        cr_expect_eq(st, LS_OK, "%s: %s", schema, err);
        ls_schema_free(s);
        if (st != LS_OK) continue;

        for (int valid = 1; valid >= 0; valid--) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/tests/fixtures/schema/%s/%s", LS_SOURCE_DIR, name,
                     valid ? "valid" : "invalid");
            char **files = NULL;
            size_t n = list_fixtures(dir, &files);
            size_t need = valid ? 1 : is_receipts_schema(name) ? 3 : 1;
            cr_expect_geq(n, need, "schema %s: %zu fixtures in %s, need at least %zu", name, n,
                          dir, need);
            if (n == 0) continue;
            char why[1024] = "";
            int nc = ls_test_c_validate(schema, (const char *const *)files, n, c_v, file_of,
                                        MAX_DOCS, why, sizeof why);
            int np = ls_test_python_validate(schema, (const char *const *)files, n, py_v, MAX_DOCS,
                                             why, sizeof why);
            cr_assert_geq(np, 0, "schema %s: %s", name, why);
            cr_assert_eq(nc, np, "schema %s: C saw %d documents, python %d", name, nc, np);
            for (int k = 0; k < nc; k++) {
                const char *file = files[file_of[k]];
                cr_expect_eq(c_v[k], valid, "%s (document %d): the C validator says %s", file, k,
                             c_v[k] ? "valid" : "invalid");
                cr_expect_eq(py_v[k], valid, "%s (document %d): python3-jsonschema says %s", file,
                             k, py_v[k] ? "valid" : "invalid");
                cr_expect_eq(c_v[k], py_v[k], "%s (document %d): the validators disagree", file, k);
            }
            cr_expect_gt(nc, 0, "schema %s: no documents in %s", name, dir);
            total_docs += (size_t)(nc > 0 ? nc : 0);
            free_list(files, n);
        }
    }
    globfree(&g);
    cr_log_info("schema agreement: %zu documents", total_docs);
}

/* ---- differential: the compiled validator against the reference ------ */

/* tests/receipts/schema_ref.c is the validator as it was before schemas were
 * compiled at load (every keyword looked up on every node).  Both must give
 * the same status and the same errors (pointer, keyword, message, in order,
 * and the dropped count), recording and verdict-only, on every document
 * here: the fixtures against every schema, every fixture with each of its
 * nodes replaced or deleted, the hand-derived cases, and a real trainer
 * run's receipt, manifest and events. */

static size_t diff_validations, diff_errors_seen;

/* NULL when both validators agree on inst, else what differs (static). */
static const char *diff_one(const ls_schema *s, const cJSON *sdoc, const cJSON *inst) {
    static char why[1024];
    ls_schema_errors a = {0}, b = {0};
    ls_status sa = ls_schema_validate(s, inst, &a), sb = ls_schema_ref_validate(sdoc, inst, &b);
    ls_status qa = ls_schema_validate(s, inst, NULL), qb = ls_schema_ref_validate(sdoc, inst, NULL);
    const char *bad = NULL;
    if (sa != sb || qa != qb || qa != sa) {
        snprintf(why, sizeof why, "status %s / %s (verdict only %s / %s)", ls_status_str(sa),
                 ls_status_str(sb), ls_status_str(qa), ls_status_str(qb));
        bad = why;
    } else if (a.count != b.count || a.dropped != b.dropped) {
        snprintf(why, sizeof why, "%zu+%zu errors / %zu+%zu", a.count, a.dropped, b.count, b.dropped);
        bad = why;
    }
    for (size_t i = 0; bad == NULL && i < a.count; i++) {
        const ls_schema_error *x = &a.items[i], *y = &b.items[i];
        if (strcmp(x->pointer, y->pointer) != 0 || strcmp(x->keyword, y->keyword) != 0 ||
            strcmp(x->message, y->message) != 0) {
            snprintf(why, sizeof why, "error %zu: \"%s: %s: %s\" / \"%s: %s: %s\"", i, x->pointer,
                     x->keyword, x->message, y->pointer, y->keyword, y->message);
            bad = why;
        }
    }
    diff_validations++;
    diff_errors_seen += a.count;
    ls_schema_errors_free(&a);
    ls_schema_errors_free(&b);
    return bad;
}

static void expect_same(const ls_schema *s, const cJSON *sdoc, const cJSON *inst, const char *what) {
    const char *bad = diff_one(s, sdoc, inst);
    if (bad == NULL) return;
    char text[301] = "?";
    char *full = cJSON_PrintUnformatted(inst);
    if (full != NULL) snprintf(text, sizeof text, "%s", full);
    free(full);
    cr_assert(0, "%s: compiled / reference validators differ: %s; document %s", what, bad, text);
}

static size_t count_nodes(const cJSON *v) {
    size_t n = 1;
    for (const cJSON *c = v->child; c != NULL; c = c->next) n += count_nodes(c);
    return n;
}

/* The k-th node of v in preorder (k < count_nodes(v)); *parent its parent. */
static cJSON *nth_node(cJSON *v, size_t *k, cJSON **parent) {
    if (*k == 0) return v;
    for (cJSON *c = v->child; c != NULL; c = c->next) {
        --*k;
        *parent = v;
        cJSON *hit = nth_node(c, k, parent);
        if (hit != NULL) return hit;
    }
    return NULL;
}

/* Values put in place of a node: each kind of JSON value, at and around the
 * bounds the schemas use. */
static const char *const REPLACEMENTS[] = {
    "null", "true", "false", "0", "-1", "2.5", "1e300", "9007199254740993", "\"\"", "\"x\"",
    "\"ABC def/~\"", "\"0000000000000000000000000000000000000000000000000000000000000000\"",
    "[]", "[1,1]", "[\"a\",{}]", "{}", "{\"zz\":1,\"live\":0}",
};
#define N_REPLACEMENTS (sizeof REPLACEMENTS / sizeof *REPLACEMENTS)

/* Nodes of one document mutated (evenly spaced when it has more). */
#define MAX_MUTATED_NODES 64

/* inst as it is, then with each node (up to MAX_MUTATED_NODES of them)
 * replaced by three of REPLACEMENTS in turn, and deleted. */
static void expect_same_mutated(const ls_schema *s, const cJSON *sdoc, const cJSON *inst,
                                const char *what) {
    expect_same(s, sdoc, inst, what);
    size_t n = count_nodes(inst), m = n < MAX_MUTATED_NODES ? n : MAX_MUTATED_NODES;
    for (size_t j = 0; j < m; j++) {
        size_t k = j * n / m;
        for (size_t r = 0; r < 4; r++) {
            cJSON *copy = cJSON_Duplicate(inst, 1), *parent = NULL;
            cr_assert_not_null(copy);
            size_t left = k;
            cJSON *node = nth_node(copy, &left, &parent);
            cr_assert_not_null(node);
            if (r < 3) {
                cJSON *with = cJSON_Parse(REPLACEMENTS[(3 * k + r) % N_REPLACEMENTS]);
                cr_assert_not_null(with);
                if (parent == NULL) {
                    cJSON_Delete(copy);
                    copy = with;
                } else {
                    if (node->string != NULL) with->string = strdup(node->string); /* a member keeps its name */
                    cJSON_ReplaceItemViaPointer(parent, node, with);
                }
            } else if (parent != NULL) {
                cJSON_Delete(cJSON_DetachItemViaPointer(parent, node));
            }
            char where[600];
            snprintf(where, sizeof where, "%.500s, node %zu %s", what, k, r < 3 ? "replaced" : "deleted");
            expect_same(s, sdoc, copy, where);
            cJSON_Delete(copy);
        }
    }
}

typedef struct {
    char name[128];
    ls_schema *s;
    cJSON *doc; /* the schema document, for the reference */
} diff_schema;

static size_t load_all_schemas(diff_schema *out, size_t cap) {
    glob_t g;
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/schemas/*.schema.json", LS_SOURCE_DIR);
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0);
    size_t n = 0;
    for (size_t i = 0; i < g.gl_pathc && n < cap; i++, n++) {
        const char *base = strrchr(g.gl_pathv[i], '/') + 1;
        snprintf(out[n].name, sizeof out[n].name, "%.*s",
                 (int)(strlen(base) - strlen(".schema.json")), base);
        char err[1024];
        cr_assert_eq(ls_schema_load_file(g.gl_pathv[i], &out[n].s, err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(ls_json_read_file(g.gl_pathv[i], &out[n].doc, err, sizeof err), LS_OK, "%s", err);
    }
    globfree(&g);
    return n;
}

static void free_schemas(diff_schema *sc, size_t n) {
    ls_schema_ref_forget();
    for (size_t i = 0; i < n; i++) {
        ls_schema_free(sc[i].s);
        cJSON_Delete(sc[i].doc);
    }
}

/* The documents of a fixture file (one, or one per line of a .jsonl);
 * documents that do not parse are left out.  Returns their number. */
static size_t fixture_docs(const char *path, cJSON **docs, size_t cap) {
    size_t len = 0, n = 0;
    char *bytes = ls_test_read_file(path, &len);
    int lines = has_suffix(path, ".jsonl");
    for (char *q = bytes; q < bytes + len && n < cap;) {
        char *nl = lines ? memchr(q, '\n', (size_t)(bytes + len - q)) : NULL;
        size_t l = nl != NULL ? (size_t)(nl - q) : (size_t)(bytes + len - q);
        cJSON *d = NULL;
        if (ls_json_parse(q, l, NULL, &d, NULL, 0) == LS_OK) docs[n++] = d;
        q += l + 1;
    }
    free(bytes);
    return n;
}

Test(schema_diff, detects_a_difference) {
    /* the test can fail: a schema compiled from one document and the
     * reference reading another are told apart */
    ls_schema *s = load("{\"properties\":{\"a\":{\"minimum\":1}}}");
    cJSON *other = cJSON_Parse("{\"properties\":{\"a\":{\"minimum\":2}}}");
    cJSON *inst = cJSON_Parse("{\"a\":1.5}");
    cr_assert_not_null(diff_one(s, other, inst));
    cJSON *same = cJSON_Parse("{\"properties\":{\"a\":{\"minimum\":1}}}");
    cr_assert_null(diff_one(s, same, inst));
    ls_schema_ref_forget();
    cJSON_Delete(same);
    cJSON_Delete(other);
    cJSON_Delete(inst);
    ls_schema_free(s);
}

Test(schema_diff, hand_derived_cases) {
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        ls_schema *s = load(CASES[c].schema);
        cJSON *sdoc = cJSON_Parse(CASES[c].schema);
        for (size_t d = 0; d < 8 && CASES[c].docs[d] != NULL; d++) {
            cJSON *inst = cJSON_Parse(CASES[c].docs[d]);
            expect_same_mutated(s, sdoc, inst, CASES[c].schema);
            cJSON_Delete(inst);
        }
        ls_schema_ref_forget();
        cJSON_Delete(sdoc);
        ls_schema_free(s);
    }
}

enum { MAX_FIXTURE_DOCS = 64 };

Test(schema_diff, fixtures, .timeout = 300) {
    static diff_schema sc[64];
    size_t ns = load_all_schemas(sc, 64);
    diff_validations = diff_errors_seen = 0;
    for (size_t own = 0; own < ns; own++) {
        for (int valid = 1; valid >= 0; valid--) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/tests/fixtures/schema/%s/%s", LS_SOURCE_DIR, sc[own].name,
                     valid ? "valid" : "invalid");
            char **files = NULL;
            size_t nf = list_fixtures(dir, &files);
            for (size_t f = 0; f < nf; f++) {
                cJSON *docs[MAX_FIXTURE_DOCS];
                size_t nd = fixture_docs(files[f], docs, MAX_FIXTURE_DOCS);
                for (size_t d = 0; d < nd; d++) {
                    for (size_t i = 0; i < ns; i++) { /* against every schema, as it is */
                        char what[4400];
                        snprintf(what, sizeof what, "%.3000s (document %zu) against %.100s", files[f], d, sc[i].name);
                        if (i == own) expect_same_mutated(sc[i].s, sc[i].doc, docs[d], what);
                        else expect_same(sc[i].s, sc[i].doc, docs[d], what);
                    }
                    cJSON_Delete(docs[d]);
                }
            }
            free_list(files, nf);
        }
    }
    cr_log_info("schema diff: %zu validations, %zu errors compared", diff_validations, diff_errors_seen);
    cr_expect_gt(diff_validations, 10000u);
    cr_expect_gt(diff_errors_seen, 10000u);
    free_schemas(sc, ns);
}

typedef struct {
    diff_schema *sc;
    size_t ns;
    size_t events;
} diff_trace;

static const diff_schema *schema_named(const diff_schema *sc, size_t ns, const char *name) {
    for (size_t i = 0; i < ns; i++)
        if (strcmp(sc[i].name, name) == 0) return &sc[i];
    return NULL;
}

static int diff_event(const ls_trace_event *ev, void *user) {
    diff_trace *t = user;
    char name[128];
    snprintf(name, sizeof name, "event-%s", ev->ev);
    const diff_schema *d = schema_named(t->sc, t->ns, name);
    cr_assert_not_null(d, "no schema %s", name);
    char what[256];
    snprintf(what, sizeof what, "trainer event seq %lld (%s)", (long long)ev->seq, ev->ev);
    /* every event as it is; the first of each kind mutated as well */
    if (t->events++ < 40) expect_same_mutated(d->s, d->doc, ev->json, what);
    else expect_same(d->s, d->doc, ev->json, what);
    cr_assert_eq(ls_schema_validate(d->s, ev->json, NULL), LS_OK, "%s", what);
    return 0;
}

Test(schema_diff, trainer_run, .timeout = 300) {
    char *dir = ls_test_mkdtemp();
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s/trainer/longstraw-train --config %s/configs/hybrid-tiny.json --out %s/run "
             "--prompt-len 64 --steps 1 --group 2 --response-len 4 --quiet > %s/train.log 2>&1",
             LS_BINARY_DIR, LS_SOURCE_DIR, dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    static diff_schema sc[64];
    size_t ns = load_all_schemas(sc, 64);
    static const char *const FILES[][2] = {{"rank-0000/receipt.json", "receipt"},
                                           {"manifest.json", "manifest"}};
    for (size_t i = 0; i < 2; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/run/%s", dir, FILES[i][0]);
        cJSON *doc = NULL;
        cr_assert_eq(ls_json_read_file(path, &doc, err, sizeof err), LS_OK, "%s", err);
        const diff_schema *d = schema_named(sc, ns, FILES[i][1]);
        cr_assert_not_null(d);
        cr_assert_eq(ls_schema_validate(d->s, doc, NULL), LS_OK, "%s", path);
        expect_same_mutated(d->s, d->doc, doc, path);
        cJSON_Delete(doc);
    }
    char trace[4096];
    snprintf(trace, sizeof trace, "%s/run/rank-0000/events.jsonl.zst", dir);
    diff_trace t = {sc, ns, 0};
    ls_trace_report rep;
    cr_assert_eq(ls_trace_read_file(trace, diff_event, &t, &rep), LS_OK);
    const diff_schema *h = schema_named(sc, ns, "event-header");
    cr_assert_not_null(h);
    expect_same_mutated(h->s, h->doc, rep.header, "trainer trace header");
    ls_trace_report_free(&rep);
    cr_expect_gt(t.events, 100u);
    free_schemas(sc, ns);
    ls_test_rmtree(dir);
    free(dir);
}
