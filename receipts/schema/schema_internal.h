/* schema_internal.h - internal to receipts/schema/schema.c (loading, the subset
 * check, the cache) and receipts/schema/schema_validate.c (the compiled form and
 * validation).  Not part of the contract; schema.h is. */
#ifndef LS_RECEIPTS_SCHEMA_INTERNAL_H
#define LS_RECEIPTS_SCHEMA_INTERNAL_H

#include <regex.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "receipts/schema/schema.h"

/* Deepest chain of nested schema applications (through $ref and the
 * applicators) before validation gives up; guards against $ref cycles.
 * Loading refuses schemas nested deeper than this too. */
#define LS_SCHEMA_MAX_DEPTH 2048

typedef struct {
    const cJSON *node; /* the "pattern" keyword's string node in doc */
    regex_t re;
} ls_schema_pattern;

/* A schema node compiled for validation (schema_validate.c). */
typedef struct ls_schema_node ls_schema_node;

struct ls_schema {
    cJSON *doc;
    ls_schema_pattern *patterns; /* every pattern the subset check met, compiled */
    size_t n_patterns;
    const ls_schema_node *root;
    ls_schema_node **nodes; /* every compiled node, for ls_schema_free_compiled */
    size_t n_nodes, cap_nodes;
};

/* The node a local reference ("#" or "#" and a JSON pointer) names in root,
 * NULL when it names none. */
const cJSON *ls_schema_resolve_ref(const cJSON *root, const char *ref);

/* Compiles s->doc, already through the subset check, for validation: each
 * node's keywords found once, type names as bits, property names hashed,
 * $ref targets resolved.  LS_OK or LS_ERR_NOMEM (what was compiled is freed
 * by ls_schema_free_compiled all the same). */
ls_status ls_schema_compile(ls_schema *s);
void ls_schema_free_compiled(ls_schema *s);

#endif
