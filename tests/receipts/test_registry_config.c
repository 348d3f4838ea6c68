/* test_registry_config.c - a run's config checked against the registry of model
 * families (ls_registry_check_config), the check that replaced the schemas'
 * per-family branches.  Every case is built from the registry itself (the
 * build's generated/families.json), so it covers whatever families are
 * registered: for each family a config of its keys at their bounds passes;
 * a missing key, a fractional int, a value past either bound, a key only
 * another family declares, an unregistered family name and a missing family
 * are each refused, naming the key (or the family).  The receipt and manifest
 * readers call it: a real receipt with its family renamed is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "receipts/format/build_info.h"
#include "receipts/format/registry_file.h"
#include "receipts/writing/receipt.h"
#include "tests/support/test_receipts_support.h"

static const cJSON *families(void) {
    const char *why = NULL;
    const cJSON *reg = ls_registry_file_get(&why);
    cr_assert_not_null(reg, "registry: %s", why);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(reg, "families");
    cr_assert(cJSON_GetArraySize(f) >= 2, "the registry lists fewer than two families");
    return f;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsString(v), "registry: no string \"%s\"", k);
    return v->valuestring;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "registry: no number \"%s\"", k);
    return v->valuedouble;
}

/* A config of family f: the shared keys, and each family key at its upper bound
 * (hi = 1) or its lowest admissible value (hi = 0: min, or min + 1 for an open
 * lower bound of a real, a real's min being exclusive). */
static cJSON *config_of(const cJSON *f, int hi) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "family", str(f, "name"));
    cJSON_AddNumberToObject(c, "vocab", 256);
    cJSON_AddNumberToObject(c, "d_model", 64);
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(f, "keys")) {
        double lo = num(k, "min"), v = hi ? num(k, "max") : lo;
        if (!hi && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "min_exclusive"))) v = lo + 0.5;
        cJSON_AddNumberToObject(c, str(k, "key"), v);
    }
    return c;
}

static ls_status check(const cJSON *c, char *err) {
    return ls_registry_check_config(c, "run.json", err, 512);
}

Test(registry_config, every_family_at_its_bounds_passes) {
    const cJSON *f;
    char err[512];
    cJSON_ArrayForEach(f, families()) {
        for (int hi = 0; hi < 2; hi++) {
            cJSON *c = config_of(f, hi);
            cr_assert_eq(check(c, err), LS_OK, "%s (%s bounds): %s", str(f, "name"), hi ? "upper" : "lower", err);
            cJSON_Delete(c);
        }
    }
}

/* Every key of every family: missing, fractional (ints), past each bound. */
Test(registry_config, each_key_missing_fractional_or_out_of_range_is_refused) {
    const cJSON *f, *k;
    char err[512], want[96];
    size_t cases = 0;
    cJSON_ArrayForEach(f, families()) {
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(f, "keys")) {
            const char *key = str(k, "key");
            snprintf(want, sizeof want, "/predicate/config/%s: ", key);
            cJSON *c = config_of(f, 0);
            cJSON_DeleteItemFromObjectCaseSensitive(c, key);
            cr_assert_eq(check(c, err), LS_ERR_SCHEMA, "%s without %s passed", str(f, "name"), key);
            cr_assert(strstr(err, want) && strstr(err, "missing"), "%s", err);
            cJSON_Delete(c);
            const int is_int = strcmp(str(k, "type"), "int") == 0;
            double bad[3] = {num(k, "max") * 2 + 1, num(k, "min") - 1, is_int ? num(k, "min") + 0.5 : NAN};
            for (int b = 0; b < 3; b++) {
                if (isnan(bad[b])) continue;
                c = config_of(f, 0);
                cJSON_ReplaceItemInObjectCaseSensitive(c, key, cJSON_CreateNumber(bad[b]));
                cr_assert_eq(check(c, err), LS_ERR_SCHEMA, "%s %s = %g passed", str(f, "name"), key, bad[b]);
                cr_assert(strstr(err, want), "%s", err);
                cJSON_Delete(c);
                cases++;
            }
            c = config_of(f, 0);
            cJSON_ReplaceItemInObjectCaseSensitive(c, key, cJSON_CreateString("8"));
            cr_assert_eq(check(c, err), LS_ERR_SCHEMA, "%s %s as a string passed", str(f, "name"), key);
            cJSON_Delete(c);
        }
    }
    cr_assert(cases > 20, "only %zu cases", cases);
}

/* A key only another family declares: refused, naming that family; a key the two share is not one. */
Test(registry_config, another_familys_key_is_refused) {
    const cJSON *f, *g, *k;
    char err[512];
    size_t cases = 0;
    cJSON_ArrayForEach(f, families()) {
        cJSON_ArrayForEach(g, families()) {
            if (f == g) continue;
            cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(g, "keys")) {
                const char *key = str(k, "key");
                cJSON *c = config_of(f, 0);
                int shared = cJSON_GetObjectItemCaseSensitive(c, key) != NULL;
                if (!shared) cJSON_AddNumberToObject(c, key, num(k, "max"));
                ls_status st = check(c, err);
                if (shared) {
                    cr_assert_eq(st, LS_OK, "%s: %s", str(f, "name"), err);
                } else {
                    cr_assert_eq(st, LS_ERR_SCHEMA, "%s with %s's key %s passed", str(f, "name"), str(g, "name"),
                                 key);
                    cr_assert(strstr(err, key) && strstr(err, "a key of family"), "%s", err);
                    cases++;
                }
                cJSON_Delete(c);
            }
        }
    }
    cr_assert(cases > 0);
}

Test(registry_config, unregistered_or_missing_family_is_refused) {
    char err[512];
    cJSON *c = config_of(cJSON_GetArrayItem(families(), 0), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "family", cJSON_CreateString("foo"));
    cr_assert_eq(check(c, err), LS_ERR_SCHEMA);
    cr_assert(strstr(err, "'foo' is not a registered model family") && strstr(err, "hybrid"), "%s", err);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "family");
    cr_assert_eq(check(c, err), LS_ERR_SCHEMA);
    cr_assert(strstr(err, "/predicate/config/family"), "%s", err);
    cJSON_Delete(c);
}

/* The reader calls the check: the sample receipt parses; renamed to an unregistered family, or to the
 * dense family while it keeps the hybrid's GDN keys, it is refused, and the message names why. */
Test(registry_config, the_receipt_reader_checks_the_config) {
    cJSON *build = NULL, *config = ls_test_config(), *doc = NULL;
    char err[1024];
    cr_assert_eq(ls_build_info_create("0.3.21", "x", &build), LS_OK);
    ls_receipt w = ls_test_receipt(0, 1, build, config);
    const char *zeros = "0000000000000000000000000000000000000000000000000000000000000000";
    static const struct {
        const char *family, *want;
    } cases[] = {{"hybrid", NULL},
                 {"foo", "'foo' is not a registered model family"},
                 {"dense", "/predicate/config/gdn_hk: a key of family 'hybrid', not of 'dense'"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON_ReplaceItemInObjectCaseSensitive(config, "family", cJSON_CreateString(cases[i].family));
        cr_assert_eq(ls_receipt_to_json(&w, zeros, &doc, err, sizeof err), LS_OK, "%s", err);
        char *text = cJSON_PrintUnformatted(doc);
        ls_receipt *r = NULL;
        ls_status st = ls_receipt_parse(text, strlen(text), "hand.json", &r, err, sizeof err);
        if (cases[i].want == NULL) {
            cr_expect_eq(st, LS_OK, "%s", err);
        } else {
            cr_expect_eq(st, LS_ERR_SCHEMA, "family %s passed", cases[i].family);
            cr_expect(strstr(err, "hand.json") && strstr(err, cases[i].want), "%s", err);
        }
        ls_receipt_free(r);
        free(text);
        cJSON_Delete(doc);
        doc = NULL;
    }
    cJSON_Delete(build);
    cJSON_Delete(config);
}
