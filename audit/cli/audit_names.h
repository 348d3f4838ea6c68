/* audit_names.h - the audit's vocabulary as one JSON document
 * (longstraw-audit --list-names): its rule ids with their levels
 * (rule_ids.c), the trainer faults it reads a run's config for, the trace
 * vocabulary it reads (receipts/format/trace_event.h: event kinds, phases, layer
 * kinds, directions, collective ops, reductions and dtypes of v1 and v2
 * traces, objectives) and the sizes of the records it keeps per
 * collective, message, layer key and step (the numbers docs/audit.md
 * states).  tests/tools/check_vocab.py holds it against the schemas and the docs. */
#ifndef LS_AUDIT_NAMES_H
#define LS_AUDIT_NAMES_H

#include <cjson/cJSON.h>

/* The document (schema-free, keys as above); the caller's (cJSON_Delete).
 * NULL when out of memory. */
cJSON *ls_audit_names_json(void);

#endif
