/* schema_ref.h - test-only reference validator (schema_ref.c): the
 * keyword-lookup implementation receipts/schema/schema.c replaced, for the
 * differential test in test_schema.c. */
#ifndef LS_TESTS_SCHEMA_REF_H
#define LS_TESTS_SCHEMA_REF_H

#include <cjson/cJSON.h>

#include "receipts/schema/schema.h"

/* Validates doc against the schema document schema_doc (already accepted by
 * ls_schema_load_json), appending errors to errs as ls_schema_validate does. */
ls_status ls_schema_ref_validate(const cJSON *schema_doc, const cJSON *doc, ls_schema_errors *errs);

/* Drops the reference's pattern cache (patterns are known by the address of
 * their node): call before freeing a schema document it has read. */
void ls_schema_ref_forget(void);

#endif
