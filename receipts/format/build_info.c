/* build_info.c - build object and build digest (contract in build_info.h). */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include "receipts/format/build_info.h"

#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <zstd.h>

#include "ls_source_state.h" /* generated on every build by cmake/source_state.cmake */
#include "receipts/format/jcs.h"
#include "receipts/format/json_util.h"

#ifndef LS_C_COMPILER
#define LS_C_COMPILER "unknown"
#endif
#ifndef LS_C_FLAGS
#define LS_C_FLAGS ""
#endif

#define SELF_EXE "/proc/self/exe"

/* file-name prefixes of the project's shared libraries (build_info.h) */
static const char *const project_prefixes[] = {"libls_", "liblongstraw"};

/* the members of the build object that are recorded but not digested */
static void strip_undigested(cJSON *b) {
    cJSON_DeleteItemFromObjectCaseSensitive(b, "build_digest");
    cJSON *exe = cJSON_GetObjectItemCaseSensitive(b, "executable");
    if (cJSON_IsObject(exe)) cJSON_DeleteItemFromObjectCaseSensitive(exe, "path");
    cJSON *libs = cJSON_GetObjectItemCaseSensitive(b, "libraries");
    cJSON *lib = NULL;
    if (cJSON_IsArray(libs)) {
        cJSON_ArrayForEach(lib, libs) {
            if (cJSON_IsObject(lib)) cJSON_DeleteItemFromObjectCaseSensitive(lib, "path");
        }
    }
}

ls_status ls_build_info_digest(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err,
                               size_t errlen) {
    if (!cJSON_IsObject(build)) {
        ls_json_errf(err, errlen, "build: not an object");
        return LS_ERR_ARG;
    }
    cJSON *copy = cJSON_Duplicate(build, 1);
    if (copy == NULL) return LS_ERR_NOMEM;
    strip_undigested(copy);
    char *text = NULL;
    size_t len = 0;
    ls_status st = ls_json_print_canonical(copy, &text, &len, err, errlen);
    if (st == LS_OK) st = ls_digest_sha256_hex(text, len, hex);
    free(text);
    cJSON_Delete(copy);
    return st;
}

/* ---- loaded libraries -------------------------------------------------- */

typedef struct {
    char **paths;
    size_t n, cap;
    int failed; /* allocation failed in the callback */
} lib_list;

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s != NULL ? s + 1 : path;
}

static int is_project_library(const char *path) {
    const char *name = base_name(path);
    for (size_t i = 0; i < sizeof project_prefixes / sizeof project_prefixes[0]; i++)
        if (strncmp(name, project_prefixes[i], strlen(project_prefixes[i])) == 0) return 1;
    return 0;
}

static int collect_library(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    lib_list *l = data;
    const char *path = info->dlpi_name;
    if (path == NULL || path[0] == '\0' || !is_project_library(path)) return 0;
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->paths[i], path) == 0) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->paths, cap * sizeof *p);
        if (p == NULL) {
            l->failed = 1;
            return 1;
        }
        l->paths = p;
        l->cap = cap;
    }
    l->paths[l->n] = strdup(path);
    if (l->paths[l->n] == NULL) {
        l->failed = 1;
        return 1;
    }
    l->n++;
    return 0;
}

static int by_name(const void *a, const void *b) {
    const char *pa = *(const char *const *)a, *pb = *(const char *const *)b;
    int c = strcmp(base_name(pa), base_name(pb));
    return c != 0 ? c : strcmp(pa, pb);
}

/* {"path", "sha256"} of the file at path (hashed from hash_path), plus
 * "name" when with_name. */
static ls_status file_object(const char *path, const char *hash_path, int with_name, cJSON **out) {
    *out = NULL;
    char hex[LS_DIGEST_HEX_SIZE];
    ls_status st = ls_digest_sha256_file_hex(hash_path, hex, NULL, 0);
    if (st != LS_OK) return st;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || (with_name && !cJSON_AddStringToObject(o, "name", base_name(path))) ||
        !cJSON_AddStringToObject(o, "path", path) || !cJSON_AddStringToObject(o, "sha256", hex)) {
        cJSON_Delete(o);
        return LS_ERR_NOMEM;
    }
    *out = o;
    return LS_OK;
}

/* "executable" and "libraries" of the running process */
static ls_status add_binaries(cJSON *b) {
    ls_status st = LS_ERR_IO;
    lib_list l = {0};
    cJSON *exe = NULL, *libs = NULL;
    char path[PATH_MAX];
    ssize_t n = readlink(SELF_EXE, path, sizeof path - 1);
    if (n < 0) goto cleanup;
    path[n] = '\0';
    /* hash the file the process runs (still right if the path was replaced since) */
    st = file_object(path, SELF_EXE, 0, &exe);
    if (st != LS_OK) goto cleanup;
    st = LS_ERR_NOMEM;
    dl_iterate_phdr(collect_library, &l);
    if (l.failed) goto cleanup;
    if (l.n > 1) qsort(l.paths, l.n, sizeof *l.paths, by_name); /* paths is NULL when n is 0 */
    libs = cJSON_CreateArray();
    if (libs == NULL) goto cleanup;
    for (size_t i = 0; i < l.n; i++) {
        cJSON *lib = NULL;
        st = file_object(l.paths[i], l.paths[i], 1, &lib);
        if (st != LS_OK) goto cleanup;
        cJSON_AddItemToArray(libs, lib);
    }
    st = LS_ERR_NOMEM;
    if (!cJSON_AddItemToObject(b, "executable", exe)) goto cleanup;
    exe = NULL;
    if (!cJSON_AddItemToObject(b, "libraries", libs)) goto cleanup;
    libs = NULL;
    st = LS_OK;
cleanup:
    for (size_t i = 0; i < l.n; i++) free(l.paths[i]);
    free(l.paths);
    cJSON_Delete(exe);
    cJSON_Delete(libs);
    return st;
}

/* "source": the state of the sources at build time */
static ls_status add_source(cJSON *b) {
    cJSON *s = cJSON_CreateObject();
    const char *changes = LS_SOURCE_CHANGES_SHA256;
    if (s == NULL || !cJSON_AddStringToObject(s, "commit", LS_SOURCE_COMMIT) ||
        !cJSON_AddBoolToObject(s, "dirty", LS_SOURCE_DIRTY) ||
        !(changes[0] != '\0' ? cJSON_AddStringToObject(s, "changes_sha256", changes)
                             : cJSON_AddNullToObject(s, "changes_sha256")) ||
        !cJSON_AddItemToObject(b, "source", s)) {
        cJSON_Delete(s);
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}

/* The registered dependencies (build_info.h), in the record's order: own ones
 * with their version function, the caller's with NULL. */
static const char *cjson_version(void) { return cJSON_Version(); }
static const char *zstd_version(void) { return ZSTD_versionString(); }
static const char *openssl_version(void) { return OpenSSL_version(OPENSSL_VERSION); }
static const struct {
    const char *name;
    const char *(*own)(void);
} DEPS[] = {
    {"cjson", cjson_version}, {"zstd", zstd_version}, {"openssl", openssl_version}, {"openblas", NULL}, {"mpi", NULL},
};
#define N_DEPS (sizeof DEPS / sizeof DEPS[0])

const char *const *ls_build_info_dependency_names(size_t *n, const int **own) {
    static const char *names[N_DEPS];
    static int owns[N_DEPS];
    for (size_t i = 0; i < N_DEPS; i++) names[i] = DEPS[i].name, owns[i] = DEPS[i].own != NULL;
    if (n) *n = N_DEPS;
    if (own) *own = owns;
    return names;
}

/* "dependencies": every registered name, own versions read here, the caller's from deps */
static ls_status dependencies(const ls_build_dep *deps, size_t n_deps, cJSON *out, char *err, size_t errlen) {
    const char *ver[N_DEPS] = {0};
    for (size_t j = 0; j < n_deps; j++) {
        size_t i = 0;
        while (i < N_DEPS && (!deps[j].name || strcmp(deps[j].name, DEPS[i].name) != 0)) i++;
        if (i == N_DEPS || DEPS[i].own || ver[i]) {
            ls_json_errf(err, errlen, "build: dependency \"%s\" %s", deps[j].name ? deps[j].name : "(null)",
                         i == N_DEPS ? "is not a registered dependency name (receipts/format/build_info.c)"
                         : DEPS[i].own ? "is recorded by the receipts library itself"
                                       : "is given twice");
            return LS_ERR_ARG;
        }
        ver[i] = deps[j].version ? deps[j].version : "unknown";
    }
    for (size_t i = 0; i < N_DEPS; i++) {
        const char *v = DEPS[i].own ? DEPS[i].own() : ver[i] ? ver[i] : "unknown";
        if (!cJSON_AddStringToObject(out, DEPS[i].name, v)) return LS_ERR_NOMEM;
    }
    return LS_OK;
}

ls_status ls_build_info_create(const char *openblas, const char *mpi, cJSON **out) {
    const ls_build_dep deps[] = {{"openblas", openblas}, {"mpi", mpi}};
    return ls_build_info_create_deps(deps, 2, out, NULL, 0);
}

ls_status ls_build_info_create_deps(const ls_build_dep *deps, size_t n_deps, cJSON **out, char *err,
                                    size_t errlen) {
    *out = NULL;
    ls_status st = LS_ERR_NOMEM;
    cJSON *b = cJSON_CreateObject();
    cJSON *deps_o = cJSON_CreateObject();
    static const char *dtypes[] = {"f32", "f64"};
    cJSON *dt = cJSON_CreateStringArray(dtypes, 2);
    if (b == NULL || deps_o == NULL || dt == NULL) goto cleanup;
    if (n_deps && !deps) {
        ls_json_errf(err, errlen, "build: deps is NULL with %zu dependencies", n_deps);
        st = LS_ERR_ARG;
        goto cleanup;
    }
    st = dependencies(deps, n_deps, deps_o, err, errlen);
    if (st != LS_OK) goto cleanup;
    st = LS_ERR_NOMEM;
    if (!cJSON_AddStringToObject(b, "git_commit", LS_SOURCE_COMMIT) ||
        !cJSON_AddStringToObject(b, "compiler", LS_C_COMPILER) ||
        !cJSON_AddStringToObject(b, "flags", LS_C_FLAGS))
        goto cleanup;
    cJSON_AddItemToObject(b, "dependencies", deps_o);
    deps_o = NULL;
    cJSON_AddItemToObject(b, "dtype_builds", dt);
    dt = NULL;
    st = add_binaries(b);
    if (st == LS_OK) st = add_source(b);
    if (st != LS_OK) goto cleanup;
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
    cJSON_Delete(deps_o);
    cJSON_Delete(dt);
    return st;
}

ls_status ls_build_info_add_kernel_isa(cJSON *build, const char *isa) {
    if (build == NULL || isa == NULL ||
        (strcmp(isa, "portable") != 0 && strcmp(isa, "avx2") != 0 && strcmp(isa, "avx512") != 0))
        return LS_ERR_ARG;
    cJSON_DeleteItemFromObjectCaseSensitive(build, "kernel_isa");
    if (!cJSON_AddStringToObject(build, "kernel_isa", isa)) return LS_ERR_NOMEM;
    char hex[LS_DIGEST_HEX_SIZE];
    ls_status st = ls_build_info_digest(build, hex, NULL, 0);
    if (st != LS_OK) return st;
    cJSON_DeleteItemFromObjectCaseSensitive(build, "build_digest");
    return cJSON_AddStringToObject(build, "build_digest", hex) ? LS_OK : LS_ERR_NOMEM;
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

ls_status ls_build_info_digest_v2(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err,
                                  size_t errlen) {
    hex[0] = '\0';
    const cJSON *arts = cJSON_GetObjectItemCaseSensitive(build, "artifacts");
    if (!cJSON_IsArray(arts)) {
        ls_json_errf(err, errlen, "build: no artifacts array");
        return LS_ERR_FORMAT;
    }
    cJSON *wrap = cJSON_CreateObject();
    if (wrap == NULL || !cJSON_AddItemReferenceToObject(wrap, "artifacts", (cJSON *)arts)) {
        cJSON_Delete(wrap);
        return LS_ERR_NOMEM;
    }
    char why[300];
    ls_status st = ls_jcs_sha256(wrap, hex, why, sizeof why);
    cJSON_Delete(wrap); /* deletes the reference, not artifacts */
    if (st != LS_OK) ls_json_errf(err, errlen, "build: %s", why);
    return st;
}

ls_status ls_build_info_check_v2(const cJSON *build, char *err, size_t errlen) {
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(build, "build_digest");
    if (!cJSON_IsString(rec)) {
        ls_json_errf(err, errlen, "build: no build_digest string");
        return LS_ERR_CORRUPT;
    }
    char hex[LS_DIGEST_HEX_SIZE];
    ls_status st = ls_build_info_digest_v2(build, hex, err, errlen);
    if (st != LS_OK) return st;
    if (strcmp(hex, rec->valuestring) != 0) {
        ls_json_errf(err, errlen,
                     "build: build_digest %.64s is not the SHA-256 of the JCS of {\"artifacts\": ...} (%s)",
                     rec->valuestring, hex);
        return LS_ERR_CORRUPT;
    }
    return LS_OK;
}

ls_status ls_build_info_digest_any(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen) {
    hex[0] = '\0';
    if (!cJSON_IsObject(build)) {
        ls_json_errf(err, errlen, "build: not an object");
        return LS_ERR_ARG;
    }
    return cJSON_GetObjectItemCaseSensitive(build, "artifacts") != NULL ? ls_build_info_digest_v2(build, hex, err, errlen)
                                                                       : ls_build_info_digest(build, hex, err, errlen);
}
