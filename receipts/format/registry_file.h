/* registry_file.h - the registry of model families as data, for the tools
 * that link no trainer code (receipts' coverage, the audit): the JSON that
 * longstraw-train --families prints (trainer/model/family_desc.h), written at
 * build time to generated/families.json (or the file the environment
 * variable LS_FAMILIES_JSON names).  Read once per process. */
#ifndef LS_RECEIPTS_REGISTRY_FILE_H
#define LS_RECEIPTS_REGISTRY_FILE_H
#include <stddef.h>
#include <cjson/cJSON.h>

/* The registry document (static storage, read-only, for the life of the
 * process), or NULL when it cannot be read (*err, when err is not NULL,
 * names the file and the problem). */
const cJSON *ls_registry_file_get(const char **err);
/* The name of family i (0-based, the registry's order), or NULL past the
 * last (or without a registry).  Static storage. */
const char *ls_registry_file_family(size_t i);
#endif
