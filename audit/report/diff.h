/* diff.h - `longstraw-audit diff RUN_A RUN_B [--json FILE]`: what changed
 * between two runs, and the first point where they part.
 *
 * Both run directories are untrusted input (audit/model/run_files.h: every file is
 * checked with ls_audit_stat, nothing outside a run is opened, no link is
 * followed).  Each run is first verified as the audit verifies it
 * (ls_audit_load: its manifest present and valid, every subject re-digested,
 * no file missing or unlisted; with trusted keys, or --require-signed, its
 * envelope verified): runs are called equivalent only when both verify, and
 * a run that does not is named with its first problem (verdict
 * "unverified"; the comparison is still made and listed).  The bytes
 * compared are the bytes verified: each trace's digest as the comparison
 * read it (ls_trace_reader_sha256) must be its manifest subject's, or the
 * run does not verify.  The comparison, in this order:
 *   1. configuration: the first differing key of the runs' config objects
 *      (manifest.json, else rank 0's receipt), as a dotted path;
 *   2. build: the build digests and what differs (receipts/format/build_diff.h:
 *      the artifact by role and name and its field or file, or the key path
 *      of a longstraw-train build object), the first difference as the
 *      divergence's key;
 *   3. world size;
 *   4. every rank's two traces, streamed side by side (memory bounded by the
 *      trace reader's window plus LS_AUDIT_DIFF_MAX_PENDING records, never
 *      the trace size):
 *      - param digests, matched by (step, target): the first pair whose
 *        sha256 differs (lowest step, then lowest rank);
 *      - the event sequence: seq and kind of every event with its structural
 *        fields (phase, step, member, layer, kind, dir, group, gseq, op, red,
 *        count, dtype, purpose, target, n_params, prefix_frozen); the first
 *        event that differs, or where one trace ends (clean, incomplete,
 *        truncated, corrupt: the last seq, line and byte offset delivered)
 *        while the other goes on;
 *      - the values the same events record (every field but the
 *        measurements: ts_ns, wall_ns, seconds, rss_peak, step_wall_s,
 *        tokens_per_s): the first that differs, with its key (a loss, a
 *        reward, a norm, a memory figure);
 *      - a rank present in one run only (its trace missing or refused);
 *   5. every rank's two receipts: their counts (status, error code, steps,
 *      exact and prefix-frozen steps, events, phase counts), or a receipt in
 *      one run only.
 * Alongside (not divergences): per rank, each phase's wall_ns_total from the
 * receipts (A, B, B - A, B / A) and each memory category's per-step peak
 * (A, B, B - A); per step, every step_metrics figure of the lowest rank
 * traced in both runs (A, B, B - A), at most LS_AUDIT_DIFF_MAX_STEPS steps
 * listed (the largest |B - A| of each figure is kept over all steps).
 *
 * The result is one JSON document (schemas/audit-diff.schema.json); the
 * human summary on stdout is printed from it, and --json FILE writes it
 * atomically (receipts/format/atomic_file.h). */
#ifndef LS_AUDIT_DIFF_H
#define LS_AUDIT_DIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "audit/model/run_files.h"
#include "common/cli_opts.h"
#include "common/status.h"

#define LS_AUDIT_DIFF_SCHEMA "urn:longstraw:schema:audit-diff:v2"
/* Ranks compared at most (a larger claimed world is unusable input). */
#define LS_AUDIT_DIFF_MAX_WORLD ((unsigned)LS_AUDIT_MAX_WORLD)
/* Unmatched param digests / step metrics held per side of a rank. */
#define LS_AUDIT_DIFF_MAX_PENDING 4096u
/* Steps listed with their metric deltas. */
#define LS_AUDIT_DIFF_MAX_STEPS 1000u

/* What the caller trusts, as for the audit (docs/evidence.md): the public
 * keys (PEM files) a run's manifest envelope must verify with (none: the
 * signature is not checked, unless require_signed), and whether an unsigned
 * or unverified run counts as unverified.  Borrowed for the call. */
typedef struct {
    const char *const *keys;
    size_t n_keys;
    bool require_signed;
} ls_audit_diff_options;

/* The verdict, which is also the subcommand's exit status (2: unusable
 * input or bad usage). */
typedef enum {
    LS_AUDIT_DIFF_EQUIVALENT = 0, /* both runs verify, no divergence */
    LS_AUDIT_DIFF_DIFFERENT = 1,  /* both verify, a divergence was found */
    LS_AUDIT_DIFF_UNVERIFIED = 3  /* a run does not verify: nothing is claimed about equivalence */
} ls_audit_diff_verdict;

/* Compares run_a with run_b, each verified first under opt (NULL: no keys).
 * LS_OK with *doc (the caller's, cJSON_Delete) and *verdict
 * (ls_audit_diff_verdict); LS_ERR_IO or LS_ERR_FORMAT when a run is
 * unusable (not a directory, nothing readable to compare, a world above
 * LS_AUDIT_DIFF_MAX_WORLD, a rank traced in neither run), with err naming
 * the run and file; LS_ERR_NOMEM; LS_ERR_ARG for NULL arguments.  *doc is
 * NULL on failure. */
ls_status ls_audit_diff_runs(const char *run_a, const char *run_b, const ls_audit_diff_options *opt, cJSON **doc,
                             int *verdict, char *err, size_t err_len);

/* Writes the human summary of a document from ls_audit_diff_runs to out. */
void ls_audit_diff_print(FILE *out, const cJSON *doc);

/* The subcommand: argv[0] is "diff", then RUN_A RUN_B [--json FILE]
 * [--key PUB]... [--require-signed].  Prints the summary on stdout, reasons
 * on stderr.  Returns the exit status: 0 equivalent, 1 the runs differ, 2
 * bad usage or unusable input, 3 a run does not verify (named with the
 * file). */
int ls_audit_diff_main(int argc, char **argv);
/* The subcommand's option table (static; common/cli_opts.h): longstraw-audit's
 * --require-signed is its row. */
ls_cli_table ls_audit_diff_cli_options(void);

#endif
