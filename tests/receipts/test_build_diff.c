/* test_build_diff.c - what two build objects differ in, in words
 * (receipts/format/build_diff.h): v2 artifacts matched by (role, name), one on one
 * side only, a field that differs, a files map with one file differing and
 * one added (named before the tree digest they explain), artifacts in
 * another order; a longstraw-train build object (build_info.h) whose
 * kernel_isa differs, its undigested paths not compared; identical objects
 * (keys in any order) give nothing; hostile input (nesting far past the
 * cap, a map too large for the step cap, names with control characters,
 * invalid UTF-8 and 10 KB) stays bounded, one clean line per difference;
 * the joined text is bounded and says how many more. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "receipts/format/build_diff.h"
#include "receipts/format/build_info.h"

#define H64(c) c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c

static cJSON *parse(const char *text) {
    cJSON *v = cJSON_Parse(text);
    cr_assert_not_null(v, "bad test JSON: %s", text);
    return v;
}

/* compares two JSON texts, the report's against the run's */
static size_t diff_of(const char *a, const char *b, ls_build_diff *d) {
    cJSON *x = parse(a), *y = parse(b);
    size_t n = ls_build_diff_compare(x, y, "the report", "the run", d);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return n;
}

static void expect_line(const ls_build_diff *d, size_t i, const char *want) {
    cr_assert_lt(i, d->n, "no line %zu (total %zu) for '%s'", i, d->total, want);
    cr_expect_str_eq(d->item[i].line, want);
}

#define INTERP "{\"role\":\"interpreter\",\"name\":\"python3\",\"version\":\"3.11.2\",\"sha256\":\"" H64("a") "\"}"
#define TORCH(v) "{\"role\":\"package\",\"name\":\"torch\",\"version\":\"" v "\"}"

Test(build_diff, an_artifact_on_one_side_only_is_named_by_role_and_name) {
    ls_build_diff d;
    cr_assert_eq(diff_of("{\"artifacts\":[" INTERP "," TORCH("1.13.0") "],\"build_digest\":\"" H64("1") "\"}",
                         "{\"artifacts\":[" INTERP "],\"build_digest\":\"" H64("2") "\"}", &d),
                 1);
    expect_line(&d, 0, "artifact package torch: only in the report");
    cr_expect_str_eq(d.item[0].key, "artifacts[package torch]");
    cr_expect_str_eq(d.item[0].b, "absent");
    /* the other way round */
    cr_assert_eq(diff_of("{\"artifacts\":[" INTERP "]}", "{\"artifacts\":[" INTERP "," TORCH("1.13.0") "]}", &d), 1);
    expect_line(&d, 0, "artifact package torch: only in the run");
    /* the same name in another role is another artifact */
    cr_assert_eq(diff_of("{\"artifacts\":[{\"role\":\"source\",\"name\":\"longstraw_emit\",\"sha256\":\"" H64("c") "\"}]}",
                         "{\"artifacts\":[{\"role\":\"package\",\"name\":\"longstraw_emit\",\"version\":\"0.1\"}]}", &d),
                 2);
    expect_line(&d, 0, "artifact source longstraw_emit: only in the report");
    expect_line(&d, 1, "artifact package longstraw_emit: only in the run");
}

Test(build_diff, a_field_that_differs_is_named_with_both_values) {
    ls_build_diff d;
    cr_assert_eq(diff_of("{\"artifacts\":[" INTERP "," TORCH("1.13.0") "]}",
                         "{\"artifacts\":[" INTERP "," TORCH("2.0.1") "]}", &d), 1);
    expect_line(&d, 0, "artifact package torch: version 1.13.0 vs 2.0.1");
    cr_expect_str_eq(d.item[0].key, "artifacts[package torch].version");
    cr_expect_str_eq(d.item[0].a, "1.13.0");
    cr_expect_str_eq(d.item[0].b, "2.0.1");
    /* a digest shows its first 12 digits; a field on one side only; a boolean */
    cr_assert_eq(diff_of("{\"artifacts\":[{\"role\":\"native_library\",\"name\":\"libtorch_cpu.so\",\"sha256\":\"" H64("a")
                         "\"},{\"role\":\"source\",\"name\":\"x\",\"dirty\":false}]}",
                         "{\"artifacts\":[{\"role\":\"native_library\",\"name\":\"libtorch_cpu.so\",\"sha256\":\"" H64("b")
                         "\"},{\"role\":\"source\",\"name\":\"x\",\"dirty\":true,\"commit\":\"abc\"}]}", &d),
                 3);
    expect_line(&d, 0, "artifact native_library libtorch_cpu.so: sha256 aaaaaaaaaaaa.. vs bbbbbbbbbbbb..");
    expect_line(&d, 1, "artifact source x: dirty false vs true");
    expect_line(&d, 2, "artifact source x: commit only in the run (abc)");
}

Test(build_diff, a_files_map_names_the_files_before_the_tree_digest) {
    ls_build_diff d;
    const char *a = "{\"artifacts\":[" INTERP ",{\"role\":\"source\",\"name\":\"longstraw_emit\",\"sha256\":\"" H64("1")
                    "\",\"files\":{\"build.py\":\"" H64("e") "\",\"run.py\":\"" H64("a") "\"}}]}";
    const char *b = "{\"artifacts\":[" INTERP ",{\"role\":\"source\",\"name\":\"longstraw_emit\",\"sha256\":\"" H64("2")
                    "\",\"files\":{\"build.py\":\"" H64("e") "\",\"run.py\":\"" H64("b") "\",\"extra.py\":\"" H64("c")
                    "\"}}]}";
    cr_assert_eq(diff_of(a, b, &d), 3);
    expect_line(&d, 0, "artifact source longstraw_emit: file run.py differs (aaaaaaaaaaaa.. vs bbbbbbbbbbbb..)");
    cr_expect_str_eq(d.item[0].key, "artifacts[source longstraw_emit].files[run.py]");
    expect_line(&d, 1, "artifact source longstraw_emit: file extra.py only in the run (cccccccccccc..)");
    expect_line(&d, 2, "artifact source longstraw_emit: sha256 111111111111.. vs 222222222222..");
    /* a file only in the report */
    cr_assert_eq(diff_of(b, a, &d), 3);
    expect_line(&d, 1, "artifact source longstraw_emit: file extra.py only in the report (cccccccccccc..)");
    /* a files map on one side only is a field on one side only */
    const char *c = "{\"artifacts\":[" INTERP ",{\"role\":\"source\",\"name\":\"longstraw_emit\",\"sha256\":\"" H64("1")
                    "\"}]}";
    cr_assert_eq(diff_of(a, c, &d), 1);
    expect_line(&d, 0, "artifact source longstraw_emit: files only in the report (an object of 2 keys)");
}

Test(build_diff, artifacts_in_another_order_differ) {
    ls_build_diff d;
    cr_assert_eq(diff_of("{\"artifacts\":[" INTERP "," TORCH("1") "]}", "{\"artifacts\":[" TORCH("1") "," INTERP "]}", &d),
                 1);
    expect_line(&d, 0, "artifacts: the items both have are in another order");
    /* the k-th of a repeated (role, name) with the k-th */
    cr_assert_eq(diff_of("{\"artifacts\":[" TORCH("1") "," TORCH("2") "]}", "{\"artifacts\":[" TORCH("1") "," TORCH("3") "]}",
                         &d), 1);
    expect_line(&d, 0, "artifact package torch: version 2 vs 3");
}

Test(build_diff, identical_objects_give_no_difference) {
    ls_build_diff d;
    const char *a = "{\"artifacts\":[" INTERP "," TORCH("1.13.0") ",{\"role\":\"source\",\"name\":\"s\",\"files\":{\"a\":\""
                    H64("a") "\",\"b\":\"" H64("b") "\"}}],\"build_digest\":\"" H64("1") "\"}";
    const char *b = "{\"build_digest\":\"" H64("2") "\",\"artifacts\":[{\"version\":\"3.11.2\",\"sha256\":\"" H64("a")
                    "\",\"name\":\"python3\",\"role\":\"interpreter\"}," TORCH("1.13.0") ",{\"files\":{\"b\":\"" H64("b")
                    "\",\"a\":\"" H64("a") "\"},\"name\":\"s\",\"role\":\"source\"}]}";
    cr_expect_eq(diff_of(a, b, &d), 0, "keys in another order are the same object");
    cr_expect_eq(d.n, 0);
    cr_expect(!d.stopped);
    cr_expect_eq(diff_of(a, a, &d), 0);
    char buf[64];
    cr_expect_eq(ls_build_diff_join(&d, 0, 4, true, buf, sizeof buf), 0);
    cr_expect_str_eq(buf, "");
    /* both absent: nothing; one absent: one difference */
    cr_expect_eq(ls_build_diff_compare(NULL, NULL, NULL, NULL, &d), 0);
    cJSON *x = parse(a);
    cr_expect_eq(ls_build_diff_compare(x, NULL, "the report", "the run", &d), 1);
    expect_line(&d, 0, "a build object only in the report");
    cJSON_Delete(x);
}

Test(build_diff, a_v1_object_names_the_key_path_and_skips_undigested_paths) {
    cJSON *a = NULL, *b = NULL;
    cr_assert_eq(ls_build_info_create("0.3", "ompi", &a), LS_OK);
    cr_assert_eq(ls_build_info_add_kernel_isa(a, "portable"), LS_OK);
    b = cJSON_Duplicate(a, 1);
    cr_assert_eq(ls_build_info_add_kernel_isa(b, "avx512"), LS_OK);
    /* the paths the v1 digest leaves out differ too: not a difference of what ran */
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "executable"), "path",
                                           cJSON_CreateString("/elsewhere/longstraw-train"));
    char err[256], hex[LS_DIGEST_HEX_SIZE];
    /* the digest readers recompute: build_info.h's for this kind */
    cr_assert_eq(ls_build_info_digest_any(b, hex, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(hex, cJSON_GetObjectItemCaseSensitive(b, "build_digest")->valuestring);
    ls_build_diff d;
    cr_assert_eq(ls_build_diff_compare(a, b, "the report", "the run", &d), 1, "%s", d.n > 1 ? d.item[1].line : "");
    expect_line(&d, 0, "kernel_isa: portable vs avx512");
    cr_expect_str_eq(d.item[0].key, "kernel_isa");
    /* a nested key and an array by index */
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "dependencies"), "openblas",
                                           cJSON_CreateString("0.3.21"));
    cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(b, "dtype_builds"), 1, cJSON_CreateString("bf16"));
    cr_assert_eq(ls_build_diff_compare(a, b, "the report", "the run", &d), 3);
    expect_line(&d, 0, "dependencies.openblas: 0.3 vs 0.3.21");
    expect_line(&d, 1, "dtype_builds[1]: f64 vs bf16");
    expect_line(&d, 2, "kernel_isa: portable vs avx512");
    /* the v1 digest no longer matches an edited object; an object with artifacts is digested by JCS */
    cr_assert_eq(ls_build_info_digest_any(b, hex, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_neq(hex, cJSON_GetObjectItemCaseSensitive(b, "build_digest")->valuestring);
    cr_expect_eq(ls_build_info_digest_any(cJSON_GetObjectItemCaseSensitive(b, "kernel_isa"), hex, err, sizeof err),
                 LS_ERR_ARG);
    cJSON *v2 = parse("{\"artifacts\":[{\"role\":\"package\",\"name\":\"torch\",\"version\":\"1\"}]}");
    char hex2[LS_DIGEST_HEX_SIZE];
    cr_assert_eq(ls_build_info_digest_any(v2, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_build_info_digest_v2(v2, hex2, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(hex, hex2);
    cJSON_Delete(v2);
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* a library's path is not digested either: matched by name, its sha256 compared */
    ls_build_diff e;
    cr_assert_eq(diff_of("{\"libraries\":[{\"name\":\"libls_x.so\",\"path\":\"/a/libls_x.so\",\"sha256\":\"" H64("a") "\"}]}",
                         "{\"libraries\":[{\"name\":\"libls_x.so\",\"path\":\"/b/libls_x.so\",\"sha256\":\"" H64("b") "\"}]}",
                         &e), 1);
    expect_line(&e, 0, "libraries[libls_x.so].sha256: aaaaaaaaaaaa.. vs bbbbbbbbbbbb..");
}

/* every line bounded, printable and valid UTF-8 */
static void expect_clean(const ls_build_diff *d) {
    for (size_t i = 0; i < d->n; i++) {
        const unsigned char *s = (const unsigned char *)d->item[i].line;
        size_t n = strlen((const char *)s);
        cr_expect_lt(n, LS_BUILD_DIFF_LINE);
        for (size_t k = 0; k < n; k++) cr_expect(s[k] >= 0x20 && s[k] != 0x7F, "line %zu: byte %02x at %zu", i, s[k], k);
        /* UTF-8: no lead byte without its continuation bytes */
        for (size_t k = 0; k < n;) {
            size_t len = s[k] < 0x80 ? 1 : s[k] >= 0xF0 ? 4 : s[k] >= 0xE0 ? 3 : 2;
            cr_expect(s[k] < 0x80 || s[k] >= 0xC2, "line %zu: stray byte %02x", i, s[k]);
            for (size_t j = 1; j < len; j++) cr_expect(k + j < n && (s[k + j] & 0xC0) == 0x80, "line %zu: cut character", i);
            k += len;
        }
    }
}

Test(build_diff, hostile_input_is_capped) {
    /* nesting far past the cap (built directly: the parser stops at its own limit) */
    cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
    cJSON *pa = a, *pb = b;
    for (int i = 0; i < 5000; i++) {
        pa = cJSON_AddObjectToObject(pa, "x");
        pb = cJSON_AddObjectToObject(pb, "x");
    }
    cJSON_AddStringToObject(pa, "v", "1");
    cJSON_AddStringToObject(pb, "v", "2");
    ls_build_diff d;
    cr_assert_eq(ls_build_diff_compare(a, b, "the report", "the run", &d), 1);
    cr_expect(strstr(d.item[0].line, "nested deeper than 16 levels: not compared") != NULL, "%s", d.item[0].line);
    cr_expect(strncmp(d.item[0].key, "x.x.x.x", 7) == 0, "%s", d.item[0].key);
    cJSON_Delete(a);
    cJSON_Delete(b);

    /* a map too large for the step cap, in opposite orders (every lookup a scan): stops, bounded in time */
    a = cJSON_CreateObject();
    b = cJSON_CreateObject();
    cJSON *fa = cJSON_AddObjectToObject(a, "files"), *fb = cJSON_AddObjectToObject(b, "files");
    enum { N = 20000 };
    for (int i = 0; i < N; i++) {
        char k[32];
        snprintf(k, sizeof k, "f%05d.py", i);
        cJSON_AddStringToObject(fa, k, H64("a"));
        snprintf(k, sizeof k, "f%05d.py", N - 1 - i);
        cJSON_AddStringToObject(fb, k, i == 0 ? H64("b") : H64("a"));
    }
    clock_t t0 = clock();
    ls_build_diff_compare(a, b, "the report", "the run", &d);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    cr_expect(d.stopped, "%zu steps would be needed: the cap must stop it", (size_t)N * N / 2);
    cr_expect_lt(secs, 5.0, "the step cap bounds the time: %.2f s", secs);
    char buf[LS_BUILD_DIFF_LINE];
    ls_build_diff_join(&d, 0, 2, true, buf, sizeof buf);
    cr_expect(strstr(buf, "the comparison stopped at its step cap") != NULL, "%s", buf);
    /* the same map in one order costs a step per file: compared in full */
    cJSON_Delete(b);
    b = cJSON_Duplicate(a, 1);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "files"), "f12345.py",
                                           cJSON_CreateString(H64("b")));
    cr_expect_eq(ls_build_diff_compare(a, b, "the report", "the run", &d), 1);
    cr_expect(!d.stopped);
    expect_line(&d, 0, "files: file f12345.py differs (aaaaaaaaaaaa.. vs bbbbbbbbbbbb..)");
    cJSON_Delete(a);
    cJSON_Delete(b);

    /* names with control characters, invalid UTF-8, a multi-byte character at the cut, 10 KB */
    char *big = malloc(10001);
    cr_assert_not_null(big);
    for (int i = 0; i < 10000; i += 2) memcpy(big + i, "\xc3\xa9", 2); /* é */
    big[10000] = 0;
    a = cJSON_CreateObject();
    b = cJSON_CreateObject();
    cJSON *aa = cJSON_AddArrayToObject(a, "artifacts"), *ab = cJSON_AddArrayToObject(b, "artifacts");
    cJSON *x = cJSON_CreateObject(), *y = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "role", "other\n\x1b[31m");
    cJSON_AddStringToObject(x, "name", big);
    cJSON_AddStringToObject(x, "value", "bad \xff\xfe bytes\t");
    cJSON_AddItemToArray(aa, x);
    cJSON_AddStringToObject(y, "role", "other\n\x1b[31m");
    cJSON_AddStringToObject(y, "name", big);
    cJSON_AddStringToObject(y, "value", big);
    cJSON_AddItemToArray(ab, y);
    cJSON *z = cJSON_CreateObject();
    cJSON_AddStringToObject(z, "role", "environment");
    cJSON_AddStringToObject(z, "name", "\x01\x02");
    cJSON_AddItemToArray(ab, z);
    cr_assert_eq(ls_build_diff_compare(a, b, "the report", "the run", &d), 2);
    expect_clean(&d);
    cr_expect(strstr(d.item[0].line, "artifact other??[31m ") == d.item[0].line, "%s", d.item[0].line);
    cr_expect(strstr(d.item[0].line, "value bad ?? bytes? vs ") != NULL, "%s", d.item[0].line);
    expect_line(&d, 1, "artifact environment ??: only in the run");
    for (size_t i = 0; i < d.n; i++) cr_expect_lt(strlen(d.item[i].key), LS_BUILD_DIFF_KEY);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(big);

    /* a type that differs; a number */
    cr_assert_eq(diff_of("{\"a\":{\"b\":1},\"n\":3,\"s\":\"\"}", "{\"a\":[1,2],\"n\":4.5,\"s\":\"x\"}", &d), 3);
    expect_line(&d, 0, "a: an object of 1 key vs an array of 2 items");
    expect_line(&d, 1, "n: 3 vs 4.5");
    expect_line(&d, 2, "s: \"\" vs x");
}

Test(build_diff, the_joined_text_is_bounded_and_counts_the_rest) {
    /* 20 differing keys: 8 kept, all counted */
    cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
    for (int i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%02d", i);
        cJSON_AddNumberToObject(a, k, i);
        cJSON_AddNumberToObject(b, k, i + 100);
    }
    ls_build_diff d;
    cr_assert_eq(ls_build_diff_compare(a, b, NULL, NULL, &d), 20);
    cr_expect_eq(d.n, LS_BUILD_DIFF_MAX_ITEMS);
    char buf[512];
    cr_expect_eq(ls_build_diff_join(&d, 0, 2, true, buf, sizeof buf), 2);
    cr_expect_str_eq(buf, "k00: 0 vs 100; k01: 1 vs 101; and 18 more");
    cr_expect_eq(ls_build_diff_join(&d, 2, 1, true, buf, sizeof buf), 1);
    cr_expect_str_eq(buf, "k02: 2 vs 102; and 17 more");
    cr_expect_eq(ls_build_diff_join(&d, 2, 1, false, buf, sizeof buf), 1);
    cr_expect_str_eq(buf, "k02: 2 vs 102");
    cr_expect_eq(ls_build_diff_join(&d, 8, 3, true, buf, sizeof buf), 0);
    cr_expect_str_eq(buf, "and 12 more");
    char small[10];
    ls_build_diff_join(&d, 0, 4, true, small, sizeof small);
    cr_expect_str_eq(small, "k00: 0 vs");
    cJSON_Delete(a);
    cJSON_Delete(b);
}
