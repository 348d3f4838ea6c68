/* schema.h - a JSON Schema (2020-12) validator for the subset LongStraw uses.
 *
 * The schemas in schemas/ use only these keywords, and this validator
 * implements exactly them:
 *   type (a name or an array of names; "integer" = a number with no
 *   fractional part), properties, required, additionalProperties (boolean
 *   or schema), enum, const, minimum, maximum, exclusiveMinimum, minLength,
 *   maxLength (in Unicode code points), pattern (POSIX extended regex,
 *   unanchored search as in ECMA-262: write patterns that mean the same in
 *   both, e.g. ^[0-9a-f]{64}$), items, minItems, maxItems, uniqueItems,
 *   $ref (local: "#" or "#/..." JSON pointers), $defs, oneOf, anyOf, allOf,
 *   not; boolean schemas; and the annotations $schema and $id (root only),
 *   title, description, $comment.
 * Loading a schema that uses any other keyword fails, so the subset cannot
 * grow silently; every schema is also checked against Debian's
 * python3-jsonschema by the schema-agreement test.
 *
 * Errors carry the JSON pointer of the failing instance location and the
 * failing keyword.  A loaded schema is immutable and may be shared between
 * threads. */
#ifndef LS_RECEIPTS_SCHEMA_H
#define LS_RECEIPTS_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/status.h"

typedef struct ls_schema ls_schema;

typedef struct {
    char *pointer; /* JSON pointer of the instance location ("" = the root) */
    char *keyword; /* the schema keyword that failed, e.g. "required" */
    char *message; /* one line for humans */
} ls_schema_error;

/* Validation errors, in the order found.  At most LS_SCHEMA_MAX_ERRORS are
 * kept; `dropped` counts the rest. */
#define LS_SCHEMA_MAX_ERRORS 64
typedef struct {
    ls_schema_error *items;
    size_t count;
    size_t dropped;
} ls_schema_errors;

/* The directory schemas are loaded from by name: $LONGSTRAW_SCHEMA_DIR when
 * set, else the source tree's schemas/ compiled in.  Static string. */
const char *ls_schema_dir(void);

/* Loads and checks a schema file (subset, types of keyword values, $ref
 * targets, patterns compile).  LS_ERR_IO unreadable, LS_ERR_FORMAT bad
 * JSON, LS_ERR_SCHEMA outside the subset; err names the file and the schema
 * location.  *out is the caller's (ls_schema_free). */
ls_status ls_schema_load_file(const char *path, ls_schema **out, char *err, size_t errlen);

/* Same from a parsed document; takes ownership of doc in every case (the
 * caller never frees it).  *out as ls_schema_load_file. */
ls_status ls_schema_load_json(cJSON *doc, const char *what, ls_schema **out, char *err,
                              size_t errlen);

/* Loads ls_schema_dir()/<name>.schema.json; name is [a-z0-9_-]+.  *out is
 * the caller's (ls_schema_free). */
ls_status ls_schema_load(const char *name, ls_schema **out, char *err, size_t errlen);

/* Process-lifetime cache over ls_schema_load: the same pointer for the same
 * name, loaded once, thread-safe.  The schema is owned by the cache: never
 * free it. */
ls_status ls_schema_get(const char *name, const ls_schema **out, char *err, size_t errlen);

/* Freeing NULL is a no-op. */
void ls_schema_free(ls_schema *s);

/* The schema's "$id" (or "" when it has none); owned by s. */
const char *ls_schema_id(const ls_schema *s);

/* Validates doc.  LS_OK when valid, LS_ERR_SCHEMA when not; errors are
 * appended to errs when errs != NULL (initialise it to {0}; free with
 * ls_schema_errors_free).  LS_ERR_NOMEM possible. */
ls_status ls_schema_validate(const ls_schema *s, const cJSON *doc, ls_schema_errors *errs);

/* "POINTER: KEYWORD: MESSAGE" of the first error into buf (for one-line
 * reports); "" when there is none. */
void ls_schema_errors_first(const ls_schema_errors *errs, char *buf, size_t cap);

/* Frees the errors' items and zeroes errs; the struct itself is the
 * caller's. */
void ls_schema_errors_free(ls_schema_errors *errs);

#endif
