/* describe.h - the canonical description of a run, built from every source
 * apart (docs/evidence.md, "Every source of a fact agrees").
 *
 * Each source of a run states some facts about it: the manifest, each
 * receipt (and its rank_state), each trace header, each trace's events and
 * its rank_complete, the configuration (what it implies: the world, the
 * objective of each step), the world the audit settled on.  A builder
 * turns one source into a description, a JSON object of one fixed shape
 * holding only what that source states:
 *
 *   run_id, world, files                    strings / integers
 *   config, build                           objects, compared whole
 *   profile.{name, sha256}
 *   groups.NAME.{members, kind}             the communicator groups
 *   shards.R                                [first, end) prompt positions of rank R
 *   ranks.R.{rank, host, status, steps, steps_by_objective, prefix_frozen_steps,
 *            phases, events, last_seq, calls, capture_tokens}
 *   steps.S.objective                       "grpo" | "sft"
 *   steps.S.figures                         rank 0's GRPO figures of the step (step_metrics)
 *
 * ls_audit_desc_merge folds the sources into one canonical description,
 * path by path: the first source of a fact sets it, every later one must
 * agree, or the callback hears the path and both sources.  Objects are
 * descended only at "", ranks, ranks.R, steps, steps.S, groups, groups.NAME,
 * shards and profile; every other value is compared whole (a phase table,
 * a configuration), except ranks.R.calls and ranks.R.bytes_sent: a trace
 * records the collectives issued after it opened, so its purposes (stated
 * after the receipt's, the sources' order) must be the receipt's with the
 * same figures, and the receipt may name setup purposes the trace never saw.
 *
 * The builders read parsed documents only (no file, no run model but the
 * trace's facts), so that they can be fuzzed (tests/fuzz/fuzz_describe.c).
 * The schema fields they map, and those that have no second source, are
 * listed in ls_audit_desc_fields: a test walks every field of the schemas
 * and fails on one the table does not name. */
#ifndef LS_AUDIT_DESCRIBE_H
#define LS_AUDIT_DESCRIBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "audit/model/audit.h"
#include "common/status.h"

/* One source's description. */
typedef struct {
    char name[96];  /* the file, and which part of it: "rank-0001/receipt.json (rank_state)" */
    int64_t rank;   /* the rank it speaks for, -1: the run */
    cJSON *d;       /* owned */
} ls_audit_desc;

typedef struct {
    ls_audit_desc *v;
    size_t n, cap;
} ls_audit_desc_list;

void ls_audit_desc_list_free(ls_audit_desc_list *l);

/* Builders: each appends the descriptions of one document (borrowed) to l.
 * name: the file, rank: the rank directory it came from.  LS_OK or
 * LS_ERR_NOMEM; a document that states nothing usable appends nothing. */
ls_status ls_audit_describe_manifest(ls_audit_desc_list *l, const cJSON *doc, const char *name);
ls_status ls_audit_describe_receipt(ls_audit_desc_list *l, const cJSON *doc, const char *name, int64_t rank);
ls_status ls_audit_describe_header(ls_audit_desc_list *l, const cJSON *header, const char *name, int64_t rank);
/* The run directory's own word: rank R is the directory rank-R's, its
 * receipt rank-R/receipt.json (stated when the manifest lists receipts),
 * the world the audit settled on (world_source names where from). */
ls_status ls_audit_describe_rundir(ls_audit_desc_list *l, uint32_t world, const char *world_source,
                                   bool receipts_listed);
/* What a configuration implies: the world (cp_ranks), the cp group, each
 * requested step's objective (objective, sft_steps, first_step,
 * steps_requested) for the steps before `until` (the steps the run's
 * sources show: a configuration's word on a step no other source states
 * is compared with nothing). */
ls_status ls_audit_describe_config(ls_audit_desc_list *l, const cJSON *config, const char *name, int64_t until);
/* The trainer's metrics lines (--metrics; an array of objects): each step's
 * objective and figures (steps.S.figures: the step_metrics fields of
 * run.invariants), stated by rank 0's trace too. */
ls_status ls_audit_describe_metrics(ls_audit_desc_list *l, const cJSON *lines, const char *name);
/* A trace's events and its rank_complete, from the facts load_trace.c kept. */
ls_status ls_audit_describe_trace(ls_audit_desc_list *l, const ls_audit_run *run, const ls_audit_rank *r);

/* A disagreement: path ("ranks.1.phases"), the first source's name and
 * value, the other's. */
typedef void (*ls_audit_desc_fn)(void *user, const char *path, const char *first, const cJSON *va,
                                 const char *other, const cJSON *vb);

/* Folds every description of l into *canon (an object, the caller's,
 * cJSON_Delete) and, in parallel, *where (the name of the source that first
 * stated each fact, a reference to l's names: free l after where); fn hears
 * each disagreement.  The number of facts
 * compared (stated by a second source) into *compared (may be NULL).
 * LS_OK or LS_ERR_NOMEM. */
ls_status ls_audit_desc_merge(const ls_audit_desc_list *l, cJSON **canon, cJSON **where, ls_audit_desc_fn fn,
                              void *user, uint64_t *compared);

/* The schema fields and what the description makes of them. */
typedef struct {
    const char *schema;  /* "receipt", "manifest", "event-header", ... (schemas/NAME.schema.json) */
    const char *field;   /* a JSON pointer with * for array items and ~ for any key: "/predicate/phases/x/count" */
    const char *fact;    /* the description's path, or NULL */
    const char *why;     /* when fact is NULL: why the field has no second source (never compared) */
} ls_audit_desc_field;

extern const ls_audit_desc_field ls_audit_desc_fields[];
extern const size_t ls_audit_desc_n_fields;

#endif
