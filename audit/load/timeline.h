/* timeline.h - longstraw-audit --timeline: a run directory as a Chrome
 * trace-event JSON file ({"traceEvents": [...]}, the format Perfetto and
 * chrome://tracing open).
 *
 * What it shows, per rank (one process per rank, pid = rank, named
 * "rank N" by process_name metadata):
 *  - thread 0 "phases": every phase as a complete ("X") slice: from its
 *    phase_begin to its phase_end when both were read, else ending at the
 *    phase_end and lasting its wall_ns; a phase_begin never closed (a
 *    crashed or truncated rank) ends at the rank's last event, named
 *    "PHASE (unfinished)" with args.unfinished = true.  The other kinds
 *    (optimizer_step, param_digest, step_metrics, error, rank_complete,
 *    unknown kinds) are instant ("i") events there; error is process-wide.
 *  - threads 1 "layers fwd" and 2 "layers bwd": every layer_end as an "X"
 *    slice ending at the event's time and lasting its wall_ns.
 *  - thread 3 "collectives": every collective as a 1 ns "X" slice (an
 *    instant with a slice to bind flows to) named by its purpose, and,
 *    when its group (from the trace header) has more than one member, a
 *    flow event at the same time: "s" on the group's lowest rank, "f" on
 *    its highest, "t" in between, all with the id of (group, gseq), so
 *    that the same collective is linked across ranks; a v2 send or recv
 *    (its gseq counts its channel's messages) instead a "p2p" flow from
 *    the send ("s") to its receive ("f"), the id of (group, sender,
 *    receiver, tag, gseq), when the event names its peer.
 *  - counter ("C") tracks "memory total" and "memory CATEGORY" (live bytes)
 *    from every memory event.
 * Every event's own fields (and its seq) are in its args.  Times are in
 * microseconds since the earliest rank's header start_unix_ns: ranks are
 * aligned by their headers.
 *
 * The run directory is untrusted (audit/model/run_files.h): every trace path is
 * checked with ls_audit_stat (no links, nothing outside the run) before the
 * trace reader opens it.  The writer streams: it writes each event as the
 * reader delivers it, so its memory is the reader's (bounded) plus a few
 * KiB per rank, whatever the traces' length.  A truncated or corrupt trace
 * gives the timeline of its readable prefix; a missing or refused rank is
 * skipped; each such fact is a note (a global instant event named
 * "note: ..." and the "notes" string of otherData).  The file is written
 * to OUT.tmp.<pid> and renamed over out_path (atomic). */
#ifndef LS_AUDIT_TIMELINE_H
#define LS_AUDIT_TIMELINE_H
#include <stddef.h>
#include <stdint.h>

#include "audit/model/run_files.h"
#include "common/status.h"
#include "receipts/reading/trace_reader.h"

/* The ranks of a run directory: the larger of the manifest's
 * predicate.world and 1 + the highest rank-NNNN directory present (a
 * rank-NNNN entry of another type counts too: it is refused later, by
 * name).  LS_OK with *world >= 1; when manifest and directories disagree
 * or the manifest is unreadable, a line in note[note_len] (else note is
 * ""; note may be NULL).  LS_ERR_IO (run_dir not a directory) or
 * LS_ERR_FORMAT (no world at all) with err naming the reason. */
ls_status ls_audit_timeline_world(const char *run_dir, int64_t *world, char *note, size_t note_len, char *err,
                                  size_t err_len);

/* A reader over rank's trace opened with ls_audit_open (no links, a
 * regular file; nothing reopened by path).  LS_OK with *out (the caller's,
 * ls_trace_reader_close), else the ls_audit_open status with err naming the
 * file and *out NULL. */
ls_status ls_audit_timeline_trace_open(const char *run_dir, int64_t rank, ls_trace_reader **out, char *err,
                                       size_t err_len);

/* The trace of `rank` relative to run_dir into rel[cap]:
 * "rank-NNNN/events.jsonl.zst", or "rank-NNNN/events.jsonl" when only that
 * exists (a v2 run may write either, docs/contract.md); the .zst name when
 * neither does (errors name it). */
void ls_audit_trace_rel(const char *run_dir, int64_t rank, char *rel, size_t cap);

/* The path of rank's trace (run_dir/rank-NNNN/events.jsonl.zst) into
 * path[cap], after ls_audit_stat accepted it (no cap on the size: traces
 * are streamed).  LS_OK, or ls_audit_stat's status with err naming the
 * file. */
ls_status ls_audit_timeline_trace_path(const char *run_dir, int64_t rank, char *path, size_t cap, char *err,
                                       size_t err_len);

/* Writes the timeline of run_dir to out_path.  Returns 0 when written
 * (notes or not), 2 when run_dir is unusable (not a directory, no rank,
 * no rank trace readable at all) or out_path cannot be written, with the
 * reason in err[err_len] (err may be NULL).  Never reads outside run_dir. */
int ls_audit_timeline_write(const char *run_dir, const char *out_path, char *err, size_t err_len);
/* The same with otherData.verdict: verdict_json, one JSON object's text
 * (borrowed: the audit's level, assurance and key ids, faults, exact
 * steps), written as given; NULL: none. */
int ls_audit_timeline_write_verdict(const char *run_dir, const char *out_path, const char *verdict_json,
                                    const ls_audit_reads *reads, char *err, size_t err_len);
/* reads (may be NULL: no check): what the audit judged (run_files.h, "one
 * read").  Every file the timeline reads again (the manifest, each trace,
 * to its last byte) must be those very bytes, else it is not written: 2,
 * err naming the file and both digests. */

/* ls_audit_timeline_world, the manifest checked against reads (NULL: not). */
ls_status ls_audit_timeline_world_read(const char *run_dir, const ls_audit_reads *reads, int64_t *world, char *note,
                                       size_t note_len, char *err, size_t err_len);

/* LS_OK when reads is NULL or the reader's whole file (ls_trace_reader_sha256,
 * the report's path relative to the run) is what the audit read. */
ls_status ls_audit_trace_same(const ls_audit_reads *reads, ls_trace_reader *r, char *err, size_t err_len);

/* The arguments every drawing of a run (the timeline, the HTML report)
 * checks first: *err, when NULL or of no length, pointed at scratch
 * (scratch_len bytes, the caller's) and emptied either way.  Returns 0, or
 * 2 with the reason in *err, naming `what`, when run_dir or out_path is
 * NULL. */
int ls_audit_drawing_args(const char *what, const char *run_dir, const char *out_path, char **err, size_t *err_len,
                          char *scratch, size_t scratch_len);
#endif
