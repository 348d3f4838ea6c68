/* registry_file.h - the registry of model families as data, for the tools
 * that link no trainer code (receipts' coverage, the audit): the JSON that
 * longstraw-train --families prints (trainer/model/family_desc.h), written at
 * build time to generated/families.json (or the file the environment
 * variable LS_FAMILIES_JSON names).  Read once per process. */
#ifndef LS_RECEIPTS_REGISTRY_FILE_H
#define LS_RECEIPTS_REGISTRY_FILE_H
#include <stddef.h>
#include <cjson/cJSON.h>

#include "common/status.h"

/* The registry document (static storage, read-only, for the life of the
 * process), or NULL when it cannot be read (*err, when err is not NULL,
 * names the file and the problem). */
const cJSON *ls_registry_file_get(const char **err);
/* The name of family i (0-based, the registry's order), or NULL past the
 * last (or without a registry).  Static storage. */
const char *ls_registry_file_family(size_t i);
/* A run's config object (a v1 receipt's or manifest's predicate.config)
 * against the registry: "family" a registered family; every key of that
 * family present, a number of its type (int: integral) in its range; no key
 * that only other families declare.  The schemas name no family: this is
 * where a family's keys are checked, so a family added by its folder and its
 * line in families.list needs no schema change.  LS_ERR_SCHEMA with err
 * "WHAT: /predicate/config/KEY: problem"; LS_ERR_IO when the registry cannot
 * be read (err names its file). */
ls_status ls_registry_check_config(const cJSON *config, const char *what, char *err, size_t errlen);
#endif
