/* test_jcs.c - RFC 8785 canonical JSON of the build-identity subset:
 * every vector of tests/data/jcs_vectors.json (shared with the Python
 * implementation) gives its canonical text and digest, every refused input
 * is refused, and the refusals the vectors do not cover (invalid UTF-8,
 * repeated keys, fractions given as parsed values, nesting) name where. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "receipts/format/jcs.h"
#include "receipts/format/json_util.h"

static cJSON *vectors(void) {
    cJSON *doc = NULL;
    char err[256];
    ls_status st = ls_json_read_file(LS_SOURCE_DIR "/tests/data/jcs_vectors.json", &doc, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s", err);
    return doc;
}

Test(jcs, every_vector_canonical_and_digest) {
    cJSON *doc = vectors();
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(doc, "vectors");
    cr_assert(cJSON_GetArraySize(vs) >= 7, "the shared vectors are missing");
    int n = 0;
    for (const cJSON *v = vs->child; v; v = v->next, n++) {
        const char *name = cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring;
        const char *in = cJSON_GetObjectItemCaseSensitive(v, "input")->valuestring;
        const char *want = cJSON_GetObjectItemCaseSensitive(v, "canonical")->valuestring;
        const char *sha = cJSON_GetObjectItemCaseSensitive(v, "sha256")->valuestring;
        char *out = NULL, err[256] = "";
        size_t len = 0;
        cr_assert_eq(ls_jcs_canonical_text(in, strlen(in), &out, &len, err, sizeof err), LS_OK, "%s: %s", name, err);
        cr_assert_eq(len, strlen(want), "%s: length %zu, want %zu", name, len, strlen(want));
        cr_assert_str_eq(out, want, "%s", name);
        free(out);
        cJSON *parsed = NULL;
        cr_assert_eq(ls_json_parse(in, strlen(in), name, &parsed, err, sizeof err), LS_OK);
        char hex[LS_DIGEST_HEX_SIZE];
        cr_assert_eq(ls_jcs_sha256(parsed, hex, err, sizeof err), LS_OK, "%s: %s", name, err);
        cr_assert_str_eq(hex, sha, "%s: digest", name);
        cJSON_Delete(parsed);
    }
    cJSON_Delete(doc);
}

Test(jcs, every_refused_input_refused) {
    cJSON *doc = vectors();
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(doc, "refused");
    cr_assert(cJSON_GetArraySize(rs) >= 3);
    for (const cJSON *v = rs->child; v; v = v->next) {
        const char *name = cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring;
        const char *in = cJSON_GetObjectItemCaseSensitive(v, "input")->valuestring;
        char *out = NULL, err[256] = "";
        cr_assert_eq(ls_jcs_canonical_text(in, strlen(in), &out, NULL, err, sizeof err), LS_ERR_FORMAT,
                     "%s accepted: %s", name, out ? out : "");
        cr_assert_null(out);
        cr_assert(strstr(err, "JCS") != NULL, "%s: %s", name, err);
    }
    cJSON_Delete(doc);
}

/* Parsed values outside the subset, refused with their JSON pointer. */
Test(jcs, refuses_values_naming_the_pointer) {
    struct {
        const char *json, *where;
    } cases[] = {
        {"{\"a\":[1,2.5]}", "/a/1"},
        {"{\"a\":{\"b\":9007199254740992}}", "/a/b"},
        {"{\"a\":{\"b\":-9007199254740992}}", "/a/b"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *v = cJSON_Parse(cases[i].json);
        char *out = NULL, err[256] = "";
        cr_assert_eq(ls_jcs_serialize(v, &out, NULL, err, sizeof err), LS_ERR_FORMAT, "%s", cases[i].json);
        cr_assert(strstr(err, cases[i].where) != NULL, "%s: %s", cases[i].json, err);
        cJSON_Delete(v);
    }
    /* a repeated key (only a hand-built tree can hold one) */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "k", "1");
    cJSON_AddStringToObject(o, "k", "2");
    char *out = NULL, err[256] = "";
    cr_assert_eq(ls_jcs_serialize(o, &out, NULL, err, sizeof err), LS_ERR_FORMAT);
    cr_assert(strstr(err, "repeated key") != NULL, "%s", err);
    cJSON_Delete(o);
    /* invalid UTF-8 in a string and in a key */
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "s", "bad \xC3\x28 byte");
    cr_assert_eq(ls_jcs_serialize(o, &out, NULL, err, sizeof err), LS_ERR_FORMAT);
    cr_assert(strstr(err, "/s") != NULL && strstr(err, "UTF-8") != NULL, "%s", err);
    cJSON_Delete(o);
    o = cJSON_CreateObject();
    cJSON_AddNullToObject(o, "\xED\xA0\x80"); /* a UTF-8-encoded surrogate */
    cr_assert_eq(ls_jcs_serialize(o, &out, NULL, err, sizeof err), LS_ERR_FORMAT);
    cJSON_Delete(o);
}

Test(jcs, depth_is_bounded) {
    char deep[2 * (LS_JCS_MAX_DEPTH + 2) + 1];
    size_t n = LS_JCS_MAX_DEPTH + 2;
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = '\0';
    char *out = NULL, err[256] = "";
    cr_assert_eq(ls_jcs_canonical_text(deep, 2 * n, &out, NULL, err, sizeof err), LS_ERR_FORMAT);
    cr_assert(strstr(err, "deeper") != NULL, "%s", err);
    /* one level less is fine */
    n = LS_JCS_MAX_DEPTH + 1;
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    cr_assert_eq(ls_jcs_canonical_text(deep, 2 * n, &out, NULL, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(strlen(out), 2 * n);
    free(out);
}

/* Escapes and numbers written by hand (independent of the vectors). */
Test(jcs, escapes_and_integers_by_hand) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "z", "\x01\x1f\x7f/\xE2\x82\xAC");
    cJSON_AddNumberToObject(o, "a", -0.0);
    cJSON_AddNumberToObject(o, "m", -12345678901234.0);
    cJSON_AddBoolToObject(o, "B", 0);
    char *out = NULL, err[256] = "";
    cr_assert_eq(ls_jcs_serialize(o, &out, NULL, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(out, "{\"B\":false,\"a\":0,\"m\":-12345678901234,\"z\":\"\\u0001\\u001f\x7f/\xE2\x82\xAC\"}");
    free(out);
    cJSON_Delete(o);
}

/* Full JCS numbers (ECMAScript's Number.prototype.toString; RFC 8785
 * appendix B examples and the boundaries of the plain notation). */
Test(jcs, numbers_as_ecmascript_writes_them) {
    struct {
        double d;
        const char *want;
    } cases[] = {
        {0.0, "0"},
        {-0.0, "0"},
        {1e-7, "1e-7"},
        {1e-6, "0.000001"},
        {1e21, "1e+21"},
        {1e20, "100000000000000000000"},
        {123456789012345680000.0, "123456789012345680000"},
        {4.5, "4.5"},
        {0.002, "0.002"},
        {1e23, "1e+23"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {333333333.3333333, "333333333.3333333"},
        {-1.5, "-1.5"},
        {9007199254740994.0, "9007199254740994"},
        {0.1, "0.1"},
        {1.25e-10, "1.25e-10"},
        {295147905179352830000.0, "295147905179352830000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, cJSON_CreateNumber(cases[i].d));
        char *out = NULL, err[256] = "", want[64];
        cr_assert_eq(ls_jcs_serialize_numbers(a, &out, NULL, err, sizeof err), LS_OK, "%s", err);
        snprintf(want, sizeof want, "[%s]", cases[i].want);
        cr_assert_str_eq(out, want, "%.17g", cases[i].d);
        free(out);
        cJSON_Delete(a);
    }
    /* the strict form still refuses a fraction */
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(0.5));
    char *out = NULL, err[256];
    cr_assert_eq(ls_jcs_serialize(a, &out, NULL, err, sizeof err), LS_ERR_FORMAT);
    cJSON_Delete(a);
}
