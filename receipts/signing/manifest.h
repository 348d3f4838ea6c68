/* manifest.h - the run manifest, RUN/manifest.json, and its verification.
 *
 * The manifest is the run-level receipt, an in-toto Statement v1
 * (schemas/manifest.schema.json):
 *   {"_type": "https://in-toto.io/Statement/v1",
 *    "subject": [{"name": relative path, "digest": {"sha256": hex}}, ...],
 *    "predicateType": "urn:longstraw:predicate:run-manifest:v1",
 *    "predicate": {run_id, world, build, config, profile?,
 *                  ranks: [{rank, receipt, status}], files}}
 * Its subjects are every regular file under the run directory, recursively,
 * by '/'-separated relative path, sorted bytewise, except the top-level
 * manifest.json and manifest.dsse.json; `files` is their number.  Anything
 * else in the tree (a symlink, a device) makes the writer fail.
 *
 * Writing: rank 0 fills an ls_manifest (pointers borrowed) after every rank
 * wrote its receipt and calls ls_manifest_write.  With ranks == NULL the
 * writer takes the ranks from the receipts on disk (rank-NNNN/receipt.json
 * for 0 <= r < world; status "missing" where there is none).
 *
 * Reading returns a heap ls_manifest owning everything it points to
 * (ls_manifest_free).  Verification (ls_manifest_verify) recomputes every
 * subject digest and reports each missing, extra or changed file by name,
 * and checks every listed receipt against the manifest. */
#ifndef LS_RECEIPTS_MANIFEST_H
#define LS_RECEIPTS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/digest.h"

#define LS_MANIFEST_FILE "manifest.json"
#define LS_MANIFEST_DSSE_FILE "manifest.dsse.json"
#define LS_MANIFEST_PREDICATE_TYPE "urn:longstraw:predicate:run-manifest:v1"
/* v2 (docs/contract.md §2, schemas/manifest-v2.schema.json), written by any
 * trainer: the v1 predicate with the v2 build identity (build_info.h), the
 * v2 config (a free "model") and profile {name, sha256}.  Read only. */
#define LS_MANIFEST_PREDICATE_TYPE_V2 "urn:longstraw:predicate:run-manifest:v2"

typedef enum {
    LS_MANIFEST_RANK_COMPLETE = 0,
    LS_MANIFEST_RANK_ERROR = 1,
    LS_MANIFEST_RANK_MISSING = 2 /* no receipt: the rank never finished */
} ls_manifest_rank_status;

typedef struct {
    uint32_t rank;
    const char *receipt; /* "rank-0000/receipt.json"; NULL when MISSING */
    ls_manifest_rank_status status;
} ls_manifest_rank;

typedef struct {
    const char *name; /* relative path */
    char sha256[LS_DIGEST_HEX_SIZE];
} ls_manifest_subject;

typedef struct {
    /* --- filled by the writer's caller (borrowed) or by the reader --- */
    const char *run_id;
    uint32_t world;
    const cJSON *build;  /* from ls_build_info_create */
    const cJSON *config; /* docs/model.md section 6 keys */
    const ls_manifest_rank *ranks; /* world entries, rank r at index r; NULL: scan */
    size_t n_ranks;
    /* predicate.profile: the profile the run was written for and the SHA-256
     * of its file (v2: always; v1: written when the caller sets both, NULL
     * when a run names none: an older v1 run, the profile not pinned) */
    const char *profile_name;
    const char *profile_sha256;
    /* --- filled by the reader only --- */
    int version;                /* 1 or 2 */
    const ls_manifest_subject *subjects; /* sorted by name */
    size_t n_subjects;
    cJSON *priv_doc;
    void *priv_arrays;
} ls_manifest;

/* Lists and digests the run directory and writes run_dir/manifest.json
 * atomically.  Errors name the file or field: LS_ERR_IO (unreadable file,
 * write failure), LS_ERR_FORMAT (a name or file type the manifest cannot
 * hold), LS_ERR_NONFINITE (NaN/Inf in config or build), LS_ERR_SCHEMA,
 * LS_ERR_ARG.  Nothing is written on failure. */
ls_status ls_manifest_write(const char *run_dir, const ls_manifest *m, char *err,
                            size_t errlen);

/* Parses and checks a manifest, v1 or v2 by its predicateType (schema; ranks 0..world-1 in order, each
 * once; subjects sorted, unique, safe paths; files == number of subjects;
 * build digest).  *out is the caller's (ls_manifest_free). */
ls_status ls_manifest_parse(const char *bytes, size_t len, const char *what,
                            ls_manifest **out, char *err, size_t errlen);

/* ls_manifest_parse of a file (LS_ERR_IO when unreadable); *out as there. */
ls_status ls_manifest_read(const char *path, ls_manifest **out, char *err, size_t errlen);

/* Frees a manifest from ls_manifest_parse/read; NULL is a no-op.  Never
 * call it on a caller-filled struct. */
void ls_manifest_free(ls_manifest *m);

/* ---- verification ------------------------------------------------------ */

typedef enum {
    LS_VERIFY_MISSING = 0,  /* a subject is not in the run directory */
    LS_VERIFY_EXTRA = 1,    /* a file in the run directory is not a subject */
    LS_VERIFY_MISMATCH = 2, /* a subject's content differs from its digest */
    LS_VERIFY_RECEIPT = 3   /* a listed receipt is unreadable or disagrees */
} ls_verify_kind;

typedef struct {
    ls_verify_kind kind;
    char *name;   /* relative path of the file concerned */
    char *detail; /* one line: what differs */
} ls_verify_problem;

typedef struct {
    ls_verify_problem *items;
    size_t count;
    size_t cap;
} ls_verify_report;

/* "missing", "extra", "mismatch", "receipt". */
const char *ls_verify_kind_name(ls_verify_kind kind);

/* Reads run_dir/manifest.json and checks the run directory against it:
 * every subject present with its digest, no other file, every listed
 * receipt readable and agreeing with the manifest (version, rank, world, run id,
 * build digest, status, profile: both name the same or neither names one) and with
 * the manifest's digest of its events file.
 * Problems are appended to *report (initialise to {0}; free with
 * ls_verify_report_free).  LS_OK: no problem; LS_ERR_CORRUPT: problems
 * listed; other codes: the manifest itself is unreadable or invalid (err
 * says why, report untouched). */
ls_status ls_manifest_verify(const char *run_dir, ls_verify_report *report, char *err,
                             size_t errlen);

/* Same against an already parsed manifest. */
ls_status ls_manifest_verify_parsed(const char *run_dir, const ls_manifest *m,
                                    ls_verify_report *report, char *err, size_t errlen);

/* Appends a problem of kind `kind` about the run's file `name` (copied),
 * its detail formatted printf-style (at most 767 bytes kept).  LS_OK, or
 * LS_ERR_NOMEM with the report as it was. */
ls_status ls_verify_report_add(ls_verify_report *report, ls_verify_kind kind, const char *name, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Frees what the report holds (its items, their name and detail) and
 * zeroes it; the struct itself is the caller's. */
void ls_verify_report_free(ls_verify_report *report);

#endif
