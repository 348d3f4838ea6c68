/* receipt.h - the per-rank receipt, RUN/rank-NNNN/receipt.json.
 *
 * A receipt says what one rank executed: phase counts and times, memory
 * peaks per category, its trace file and how the rank ended.
 *
 * Memory peaks come in two scopes, each named in the document:
 *   memory.run       high-water marks over the whole run (the process
 *                    lifetime: start-up, every step, the end), per category
 *                    and of the tracked total, plus the peak RSS;
 *   memory.per_step  for each category and the total, the largest of its
 *                    per-step peaks (the tracker's peaks reset at the start
 *                    of every step), the step that had the largest total and
 *                    the number of steps measured.  The peaks of each single
 *                    step are in the trace (memory events, one per phase end).  It is an
 * in-toto Statement v1 (schemas/receipt.schema.json):
 *   {"_type": "https://in-toto.io/Statement/v1",
 *    "subject": [{"name": "rank-0000/events.jsonl.zst", "digest": {"sha256": hex}}],
 *    "predicateType": "urn:longstraw:predicate:rank-receipt:v1",
 *    "predicate": {run_id, rank, world, host, build, config, profile?, steps,
 *                  steps_exact, steps_prefix_frozen, prefix_frozen_steps,
 *                  steps_by_objective?, phases, memory, events, status,
 *                  error?, timing}}
 *
 * Exact and prefix-frozen steps.  Of the `steps` completed, steps_exact ran
 * against a prompt state captured for them and steps_prefix_frozen reused a
 * state captured before an earlier update (--prefix-frozen K: stale, marked
 * "prefix_frozen" in their trace events); prefix_frozen_steps lists the
 * latter's step indices.  steps_by_objective (optional) counts the steps of
 * each objective ("grpo", "sft").
 * The one subject is the rank's events file, digested when the receipt is
 * written (so the trace must be closed first).
 *
 * Writing: the trainer fills an ls_receipt on the stack (every pointer
 * borrowed, nothing freed by this module) and calls ls_receipt_write.  The
 * writer refuses NaN/Inf anywhere (LS_ERR_NONFINITE), integers above 2^53-1
 * (except timestamps) and anything else the schema rejects (LS_ERR_SCHEMA),
 * checking the exact text it is about to write; a refused receipt leaves
 * no file and an existing receipt untouched.
 *
 * Reading: ls_receipt_read/ls_receipt_parse return a heap ls_receipt whose
 * pointers all point into memory it owns; release it with ls_receipt_free.
 * A read receipt has passed the schema and the structural checks (rank <
 * world, build digest matches the build object, the subject is the events
 * file, phase names unique, memory category names are identifiers and the
 * same in both scopes, no per-step peak above its run peak, no category peak
 * above its scope's total, steps <= steps_measured <= steps + 1,
 * steps_exact + steps_prefix_frozen = steps, prefix_frozen_steps holding
 * steps_prefix_frozen strictly increasing indices, the objective counts
 * adding up to steps, end >= start). */
#ifndef LS_RECEIPTS_RECEIPT_H
#define LS_RECEIPTS_RECEIPT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/digest.h"

#define LS_RECEIPT_STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define LS_RECEIPT_PREDICATE_TYPE "urn:longstraw:predicate:rank-receipt:v1"
/* v2 (docs/contract.md §2, schemas/receipt-v2.schema.json): written by any
 * trainer.  Its predicate has run_id, rank, world, host, profile {name,
 * sha256}, build {artifacts, build_digest} (build_info.h, the v2 identity),
 * config (the documented keys and a free "model"), steps, steps_exact,
 * events, status, error?, phases; no memory, timing or prefix-frozen lists
 * (the reader leaves those fields 0/NULL, steps_prefix_frozen = steps -
 * steps_exact).  This module reads v2 receipts; LongStraw writes v1. */
#define LS_RECEIPT_PREDICATE_TYPE_V2 "urn:longstraw:predicate:rank-receipt:v2"

typedef enum { LS_RECEIPT_COMPLETE = 0, LS_RECEIPT_ERROR = 1 } ls_receipt_status;

typedef struct {
    const char *phase;      /* identifier, e.g. "replay" (unique in a receipt) */
    uint64_t count;         /* times the phase ran on this rank */
    uint64_t wall_ns_total; /* summed wall time of those runs */
} ls_receipt_phase;

typedef struct {
    const char *name;         /* memory category, e.g. "prompt_state" (unique) */
    uint64_t run_peak_bytes;  /* peak live bytes over the run */
    uint64_t step_peak_bytes; /* the largest of the category's per-step peaks (<= run) */
} ls_receipt_memory;

typedef struct {
    const char *objective;   /* "grpo" or "sft" (unique in a receipt) */
    uint64_t steps;          /* completed steps of that objective */
} ls_receipt_objective;

typedef struct {
    /* --- filled by the writer's caller (borrowed) or by the reader --- */
    const char *run_id;  /* printable ASCII without spaces */
    uint32_t rank;       /* < world */
    uint32_t world;      /* >= 1 */
    const char *host;    /* printable ASCII without spaces */
    const cJSON *build;  /* from ls_build_info_create (with build_digest) */
    const cJSON *config; /* object with the docs/model.md section 6 keys */
    uint64_t steps;      /* optimizer steps completed */
    /* Of those steps, the prefix-frozen ones (0, the default: all exact) and
     * their step indices, strictly increasing (may be NULL when
     * steps_prefix_frozen is 0).  The writer writes steps_exact = steps -
     * steps_prefix_frozen. */
    uint64_t steps_prefix_frozen;
    const uint64_t *prefix_frozen_steps;
    /* Optional steps per objective, adding up to steps; n_objectives 0 (the
     * default) writes no steps_by_objective. */
    const ls_receipt_objective *objectives;
    size_t n_objectives;
    const ls_receipt_phase *phases;
    size_t n_phases;
    const ls_receipt_memory *memory;
    size_t n_memory;
    uint64_t run_total_peak_bytes;  /* run scope: peak of the tracked total */
    uint64_t rss_peak_bytes;        /* run scope: peak resident set size of the process */
    uint64_t step_total_peak_bytes; /* step scope: the largest per-step peak of the total */
    uint64_t steps_measured;        /* steps whose peaks were taken (begun): steps or steps + 1 */
    int64_t step_total_peak_at;     /* 0-based step with that total; -1 iff steps_measured == 0 */
    const char *events_file;   /* relative to the run dir: "rank-0000/events.jsonl.zst" */
    uint64_t events_count;     /* events in the trace (header line excluded) */
    int64_t events_last_seq;   /* seq of the last event; -1 when there is none */
    ls_receipt_status status;
    int error_code;            /* ls_status of the failure; used when error_message != NULL */
    const char *error_message; /* required when status is ERROR, NULL when COMPLETE */
    /* Optional (NULL: absent): what the rank held and moved, written as
     * predicate.rank_state (schemas/receipt.schema.json): its prompt shard and
     * prompt-state bytes (measured and analytical), and its communication per
     * purpose. */
    const cJSON *rank_state;
    uint64_t start_unix_ns;    /* see LS_JSON_MAX_EXACT_INT: read back to ~0.25 us */
    uint64_t end_unix_ns;
    /* predicate.profile: the profile the run was written for and the SHA-256
     * of its file (v2: always; v1: written when the caller sets both, NULL
     * when a receipt names none: an older v1 run, the profile not pinned) */
    const char *profile_name;
    const char *profile_sha256;
    /* --- filled by the reader only --- */
    int version;          /* 1 or 2: the predicate's version */
    uint64_t steps_exact;                    /* steps - steps_prefix_frozen */
    char events_sha256[LS_DIGEST_HEX_SIZE]; /* the subject digest */
    cJSON *priv_doc;  /* the parsed document the pointers above point into */
    void *priv_arrays; /* phases and memory arrays */
} ls_receipt;

/* "rank-NNNN" (at least 4 digits) into buf; LS_ERR_ARG if it does not fit. */
ls_status ls_receipt_rank_dir(uint32_t rank, char *buf, size_t cap);

/* RUN/rank-NNNN/receipt.json into buf; LS_ERR_ARG if it does not fit. */
ls_status ls_receipt_path(const char *run_dir, uint32_t rank, char *buf, size_t cap);

/* 1 when rel is a safe path relative to a run directory: '/'-separated,
 * non-empty components of [A-Za-z0-9._+@=-], none "." or "..", at most
 * 1024 bytes (the schemas' "relpath").  0 otherwise (and for NULL). */
int ls_receipt_relpath_ok(const char *rel);

/* The receipt document for r, with events_sha256 as the subject digest.
 * *out is the caller's (cJSON_Delete).  LS_ERR_ARG for NULL members the
 * receipt needs (named in err). */
ls_status ls_receipt_to_json(const ls_receipt *r, const char *events_sha256, cJSON **out,
                             char *err, size_t errlen);

/* Digests run_dir/r->events_file and writes run_dir/rank-NNNN/receipt.json
 * atomically (creating rank-NNNN/ when needed).  Errors name the file or
 * the field: LS_ERR_IO (events file unreadable, write failed),
 * LS_ERR_NONFINITE, LS_ERR_SCHEMA, LS_ERR_ARG. */
ls_status ls_receipt_write(const char *run_dir, const ls_receipt *r, char *err, size_t errlen);

/* Parses and checks a receipt from bytes, v1 or v2 by its predicateType
 * (schemas/receipt.schema.json or receipt-v2.schema.json; v2: the build
 * digest recomputed with ls_build_info_check_v2, the phases unique,
 * steps_exact <= steps, the subject the events file); `what` names it in
 * errors.  LS_ERR_FORMAT (not JSON / structure / an unknown predicateType),
 * LS_ERR_SCHEMA, LS_ERR_CORRUPT (build digest mismatch).  *out is the caller's (ls_receipt_free). */
ls_status ls_receipt_parse(const char *bytes, size_t len, const char *what, ls_receipt **out,
                           char *err, size_t errlen);

/* ls_receipt_parse of a file (LS_ERR_IO when unreadable); *out as there. */
ls_status ls_receipt_read(const char *path, ls_receipt **out, char *err, size_t errlen);

/* Frees a receipt from ls_receipt_read/parse; NULL is a no-op.  Never call
 * it on a caller-filled struct. */
void ls_receipt_free(ls_receipt *r);

#endif
