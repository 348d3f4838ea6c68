/* test_schema.c - the C JSON Schema validator (receipts/schema.h):
 * each keyword of the subset on hand-derived cases (also checked against
 * python3-jsonschema), error locations, refusal of anything outside the
 * subset, and the agreement test: every schema in schemas/ against its
 * fixtures in tests/fixtures/schema/<name>/{valid,invalid}, with both
 * validators, which must agree on every document. */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "receipts/json_util.h"
#include "receipts/schema.h"
#include "test_receipts_support.h"

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
