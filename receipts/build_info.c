/* build_info.c - build object and build digest (contract in build_info.h). */
#include "receipts/build_info.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <zstd.h>

#include "receipts/json_util.h"

#ifndef LS_GIT_COMMIT
#define LS_GIT_COMMIT "unknown"
#endif
#ifndef LS_C_COMPILER
#define LS_C_COMPILER "unknown"
#endif
#ifndef LS_C_FLAGS
#define LS_C_FLAGS ""
#endif

ls_status ls_build_info_digest(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err,
                               size_t errlen) {
    if (!cJSON_IsObject(build)) {
        ls_json_errf(err, errlen, "build: not an object");
        return LS_ERR_ARG;
    }
    cJSON *copy = cJSON_Duplicate(build, 1);
    if (copy == NULL) return LS_ERR_NOMEM;
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "build_digest");
    char *text = NULL;
    size_t len = 0;
    ls_status st = ls_json_print_canonical(copy, &text, &len, err, errlen);
    if (st == LS_OK) st = ls_digest_sha256_hex(text, len, hex);
    free(text);
    cJSON_Delete(copy);
    return st;
}

ls_status ls_build_info_create(const char *openblas, const char *mpi, cJSON **out) {
    *out = NULL;
    ls_status st = LS_ERR_NOMEM;
    cJSON *b = cJSON_CreateObject();
    cJSON *deps = cJSON_CreateObject();
    static const char *dtypes[] = {"f32", "f64"};
    cJSON *dt = cJSON_CreateStringArray(dtypes, 2);
    if (b == NULL || deps == NULL || dt == NULL) goto cleanup;
    if (!cJSON_AddStringToObject(deps, "cjson", cJSON_Version()) ||
        !cJSON_AddStringToObject(deps, "zstd", ZSTD_versionString()) ||
        !cJSON_AddStringToObject(deps, "openssl", OpenSSL_version(OPENSSL_VERSION)) ||
        !cJSON_AddStringToObject(deps, "openblas", openblas != NULL ? openblas : "unknown") ||
        !cJSON_AddStringToObject(deps, "mpi", mpi != NULL ? mpi : "unknown"))
        goto cleanup;
    if (!cJSON_AddStringToObject(b, "git_commit", LS_GIT_COMMIT) ||
        !cJSON_AddStringToObject(b, "compiler", LS_C_COMPILER) ||
        !cJSON_AddStringToObject(b, "flags", LS_C_FLAGS))
        goto cleanup;
    cJSON_AddItemToObject(b, "dependencies", deps);
    deps = NULL;
    cJSON_AddItemToObject(b, "dtype_builds", dt);
    dt = NULL;
    char hex[LS_DIGEST_HEX_SIZE];
    st = ls_build_info_digest(b, hex, NULL, 0);
    if (st != LS_OK) goto cleanup;
    st = LS_ERR_NOMEM;
    if (!cJSON_AddStringToObject(b, "build_digest", hex)) goto cleanup;
    *out = b;
    b = NULL;
    st = LS_OK;
cleanup:
    cJSON_Delete(b);
    cJSON_Delete(deps);
    cJSON_Delete(dt);
    return st;
}

ls_status ls_build_info_check(const cJSON *build, char *err, size_t errlen) {
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(build, "build_digest");
    if (!cJSON_IsString(rec)) {
        ls_json_errf(err, errlen, "build: no build_digest string");
        return LS_ERR_CORRUPT;
    }
    char hex[LS_DIGEST_HEX_SIZE];
    ls_status st = ls_build_info_digest(build, hex, err, errlen);
    if (st != LS_OK) return st;
    if (strcmp(hex, rec->valuestring) != 0) {
        ls_json_errf(err, errlen, "build: build_digest %.64s does not match its content (%s)",
                     rec->valuestring, hex);
        return LS_ERR_CORRUPT;
    }
    return LS_OK;
}
