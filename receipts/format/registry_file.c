/* registry_file.c - the registry of model families as data (registry_file.h). */
#include "receipts/format/registry_file.h"

#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"

#ifndef LS_FAMILIES_JSON
#define LS_FAMILIES_JSON "families.json"
#endif

static struct {
    pthread_once_t once;
    cJSON *doc;
    char err[512];
} g = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
    const char *path = getenv("LS_FAMILIES_JSON");
    if (!path || !*path) path = LS_FAMILIES_JSON;
    if (ls_json_read_file_capped(path, 1u << 22, &g.doc, g.err, sizeof g.err) != LS_OK) return;
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(g.doc, "families"))) {
        snprintf(g.err, sizeof g.err, "%s: no \"families\" array (not a registry of model families)", path);
        cJSON_Delete(g.doc);
        g.doc = NULL;
    }
}

const cJSON *ls_registry_file_get(const char **err) {
    pthread_once(&g.once, load);
    if (err) *err = g.err;
    return g.doc;
}

const char *ls_registry_file_family(size_t i) {
    const cJSON *d = ls_registry_file_get(NULL);
    const cJSON *f = d ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "families"), (int)i) : NULL;
    const cJSON *n = f ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

/* The family entry named name, or NULL. */
static const cJSON *family_entry(const cJSON *reg, const char *name) {
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(reg, "families")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return f;
    }
    return NULL;
}

/* 1 when the family entry f declares key. */
static int declares(const cJSON *f, const char *key) {
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(f, "keys")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(k, "key");
        if (cJSON_IsString(n) && strcmp(n->valuestring, key) == 0) return 1;
    }
    return 0;
}

/* The registry's family names, comma-separated, into buf. */
static void family_names(const cJSON *reg, char *buf, size_t len) {
    size_t at = 0;
    const cJSON *f;
    buf[0] = 0;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(reg, "families")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(n) || at >= len) continue;
        int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", n->valuestring);
        if (w > 0) at += (size_t)w;
    }
}

/* One declared key k of the family against the config's value. */
static ls_status check_key(const cJSON *config, const cJSON *k, const char *fam, const char *what, char *err,
                           size_t errlen) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(k, "key"), *type = cJSON_GetObjectItemCaseSensitive(k, "type");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(k, "min"), *mx = cJSON_GetObjectItemCaseSensitive(k, "max");
    if (!cJSON_IsString(name) || !cJSON_IsString(type) || !cJSON_IsNumber(mn) || !cJSON_IsNumber(mx)) {
        ls_json_errf(err, errlen, "%s: the registry's family '%s' has a key without key, type, min and max", what, fam);
        return LS_ERR_IO;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, name->valuestring);
    const int is_int = strcmp(type->valuestring, "int") == 0;
    const double lo = mn->valuedouble, hi = mx->valuedouble;
    const int lo_open = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "min_exclusive"));
    if (v == NULL) {
        ls_json_errf(err, errlen, "%s: /predicate/config/%s: missing (a key of family '%s')", what, name->valuestring,
                     fam);
        return LS_ERR_SCHEMA;
    }
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!cJSON_IsNumber(v) || !isfinite(x) || (is_int && x != floor(x))) {
        ls_json_errf(err, errlen, "%s: /predicate/config/%s: expected %s (family '%s')", what, name->valuestring,
                     is_int ? "an integer" : "a number", fam);
        return LS_ERR_SCHEMA;
    }
    if ((lo_open ? x <= lo : x < lo) || x > hi) {
        ls_json_errf(err, errlen, "%s: /predicate/config/%s: %.17g outside %s%.17g, %.17g] (family '%s')", what,
                     name->valuestring, x, lo_open ? "(" : "[", lo, hi, fam);
        return LS_ERR_SCHEMA;
    }
    return LS_OK;
}

ls_status ls_registry_check_config(const cJSON *config, const char *what, char *err, size_t errlen) {
    const char *rerr = NULL;
    const cJSON *reg = ls_registry_file_get(&rerr);
    if (reg == NULL) {
        ls_json_errf(err, errlen, "%s: its config cannot be checked: %s", what, rerr);
        return LS_ERR_IO;
    }
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(config, "family");
    if (!cJSON_IsString(fam)) {
        ls_json_errf(err, errlen, "%s: /predicate/config/family: missing or not a string", what);
        return LS_ERR_SCHEMA;
    }
    const cJSON *f = family_entry(reg, fam->valuestring);
    if (f == NULL) {
        char names[256];
        family_names(reg, names, sizeof names);
        ls_json_errf(err, errlen, "%s: /predicate/config/family: '%s' is not a registered model family (%s)", what,
                     fam->valuestring, names);
        return LS_ERR_SCHEMA;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(f, "keys")) {
        ls_status st = check_key(config, k, fam->valuestring, what, err, errlen);
        if (st != LS_OK) return st;
    }
    /* a key only other families declare: a config of one family with another's keys */
    const cJSON *item, *g;
    cJSON_ArrayForEach(item, config) {
        if (item->string == NULL || declares(f, item->string)) continue;
        cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(reg, "families")) {
            if (g == f || !declares(g, item->string)) continue;
            const cJSON *gn = cJSON_GetObjectItemCaseSensitive(g, "name");
            ls_json_errf(err, errlen, "%s: /predicate/config/%s: a key of family '%s', not of '%s'", what,
                         item->string, cJSON_IsString(gn) ? gn->valuestring : "?", fam->valuestring);
            return LS_ERR_SCHEMA;
        }
    }
    return LS_OK;
}
