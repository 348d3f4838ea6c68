/* test_parity_adapter_support.c - see test_parity_adapter_support.h. */
#include "tests/parity/test_parity_adapter_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

#define PARITY LS_BINARY_DIR "/parity/longstraw-parity"
#define FAKE LS_SOURCE_DIR "/tests/parity/parity_adapter_fake_train.py"

cJSON *ls_pa_fixture(const char *path) {
    cJSON *d = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(path, &d, err, sizeof err), LS_OK, "%s", err);
    const char *which[] = {"1", "n"};
    for (int k = 0; k < 2; k++) {
        cJSON *argv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "launch"), which[k]);
        cJSON_ReplaceItemInArray(argv, 1, cJSON_CreateString(FAKE));
    }
    return d;
}

void ls_pa_write_adapter(const char *dir, cJSON *doc, const char *name, char path[512]) {
    snprintf(path, 512, "%s/%s", dir, name);
    char err[512];
    cr_assert_eq(ls_json_write_file(path, doc, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(doc);
}

void ls_pa_refused(const char *dir, cJSON *doc, const char *want) {
    char path[512], err[1024] = "";
    ls_pa_write_adapter(dir, doc, "bad.json", path);
    ls_parity_adapter a;
    ls_status s = ls_parity_adapter_load(path, &a, err, sizeof err);
    cr_expect_neq(s, LS_OK, "an adapter that should be refused (%s) loaded", want);
    cr_expect(strstr(err, want) != NULL, "the error does not name %s: %s", want, err);
}

int ls_pa_parity(const char *dir, const char *adapter, const char *env, const char *extra, const char *out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && %s " PARITY " --adapter %s --out %s/%s --jobs 2 %s > %s/%s.txt 2>&1", dir,
             env ? env : "", adapter, dir, out, extra ? extra : "", dir, out);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s", cmd);
    return WEXITSTATUS(st);
}

char *ls_pa_text(const char *dir, const char *out) {
    char p[512], *bytes = NULL, err[256];
    size_t len = 0;
    snprintf(p, sizeof p, "%s/%s.txt", dir, out);
    cr_assert_eq(ls_json_read_bytes_capped(p, 1u << 22, &bytes, &len, err, sizeof err), LS_OK, "%s", err);
    return bytes;
}

cJSON *ls_pa_report(const char *dir, const char *out) {
    char p[512], err[512];
    cJSON *d = NULL;
    snprintf(p, sizeof p, "%s/%s/parity.json", dir, out);
    cr_assert_eq(ls_json_read_file(p, &d, err, sizeof err), LS_OK, "%s", err);
    const ls_schema *s = NULL;
    cr_assert_eq(ls_schema_get("parity", &s, err, sizeof err), LS_OK, "%s", err);
    ls_schema_errors e = {0};
    char first[512] = "";
    ls_status st = ls_schema_validate(s, d, &e);
    ls_schema_errors_first(&e, first, sizeof first);
    ls_schema_errors_free(&e);
    cr_expect_eq(st, LS_OK, "%s fails the parity schema: %s", p, first);
    return d;
}

bool ls_pa_level_holds(const cJSON *rep, int level) {
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(rep, "levels"))
        if (cJSON_GetObjectItemCaseSensitive(l, "level")->valuedouble == level)
            return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "holds"));
    return false;
}
