/* registry_file.c - the registry of model families as data (registry_file.h). */
#include "receipts/format/registry_file.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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
