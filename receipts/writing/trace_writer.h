/* trace_writer.h - writes one rank's trace: events.jsonl(.zst) (docs/design.md §6).
 *
 * Line 1 is the header object, then one event per line:
 *   {"v":1,"rank":R,"seq":S,"ts_ns":T,"ev":"<kind>", <the kind's fields>}
 * seq counts 0,1,2,... with no gap (a refused event consumes no number);
 * ts_ns is CLOCK_MONOTONIC nanoseconds since the writer was opened and never
 * decreases.  Numbers are formatted in the "C" locale, integers exactly
 * (magnitude at most LS_TRACE_MAX_INT), doubles with 15 significant digits
 * when those read back to the same double, else 17 (always exact).
 *
 * Buffering and durability.  Events collect in memory and go to the file at
 * a flush: on every phase_begin, phase_end, error and rank_complete, when the
 * buffer passes the flush threshold (1 MiB by default), at
 * ls_trace_writer_flush and at close.  A path ending in ".zst" is written as
 * zstd frames with content checksums.  A flush writes complete zstd blocks
 * of the open frame (ZSTD_e_flush), so whatever a killed process leaves
 * behind is a decodable prefix ending at its last flush; the frame ends
 * (ZSTD_e_end, its checksum written) at the first flush after it holds
 * frame_bytes of text (256 KiB by default), after an error or rank_complete
 * event, and at close.  A complete trace therefore ends at a frame boundary;
 * a killed one usually inside a frame, whose flushed events a reader
 * delivers flagged unverified (trace_reader.h).  One frame per flush would
 * be as valid, but a frame is ~37,000 instructions to start decoding and
 * compresses without the history of the frames before: traces of many
 * small frames are 2.5x larger and 30% slower to read.
 * zstd's history window is 1 MiB.  A flush hands the bytes to the operating
 * system (it survives the process being killed); close also fsyncs.
 *
 * Refusals.  An event with a NaN/Inf number is refused with LS_ERR_NONFINITE
 * and nothing is written (the caller should emit an `error` event instead).
 * Bad arguments (NULL or ill-formed strings, enum values out of range,
 * integers below their minimum or above LS_TRACE_MAX_INT, a collective whose
 * group the header does not declare, a line longer than LS_TRACE_MAX_LINE,
 * any event after rank_complete) give LS_ERR_ARG.  A
 * refusal leaves the writer usable; ls_trace_writer_last_error names the
 * field.  An I/O or compression failure is sticky: that call and every later
 * one return the same error, and close reports it.
 *
 * Prefix-frozen mode (ls_trace_writer_set_prefix_frozen).  While it is on,
 * every event that carries a "step" (phase_begin, phase_end, layer_end,
 * optimizer_step, param_digest, memory, step_metrics, and generic events
 * whose fields have a "step") is written with "prefix_frozen":true; the
 * field is absent otherwise, and absent means the step is exact.  The
 * trainer turns it on before the first event of a step that reuses a
 * prompt state captured before an earlier update, and off before the
 * first event of the next exact step.
 *
 * Threads: every function may be called from any thread; emits are
 * serialised by a mutex inside the writer.
 *
 * Memory: the writer's buffers are its own (~2 MiB plus zstd's context); they
 * are not charged to the trainer's memory tracker. */
#ifndef LS_RECEIPTS_TRACE_WRITER_H
#define LS_RECEIPTS_TRACE_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/trace_event.h"
#include "receipts/format/trace_step_metrics.h"

typedef struct ls_trace_writer ls_trace_writer;

/* A communicator group named in the header: name is a token (printable
 * ASCII, no space), members are ranks in [0, world), at least one. */
typedef struct {
    const char *name;
    const int32_t *members;
    size_t n_members;
    const char *kind; /* NULL: not written (v1); else a registered group kind (ls_trace_group_kind_name) */
} ls_trace_group;

/* The header line.  All pointers are borrowed for the duration of
 * ls_trace_writer_open only.  run_id and host are tokens; tool is any
 * string.  host NULL: gethostname(); pid 0: getpid(); start_unix_ns 0:
 * CLOCK_REALTIME now; tool NULL: "longstraw".  groups may be NULL when
 * n_groups is 0; group names must be distinct. */
typedef struct {
    const char *run_id;
    int32_t rank;  /* 0 <= rank < world */
    int32_t world; /* >= 1 */
    const char *host;
    int64_t pid;
    int64_t start_unix_ns;
    const ls_trace_group *groups;
    size_t n_groups;
    const char *tool;
} ls_trace_header;

/* Tuning; pass NULL to ls_trace_writer_open_opts for the defaults. */
typedef struct {
    int zstd_level;     /* 1..19; 0 = default (6: decodes ~30% faster than 3, for ~1 us an event) */
    size_t flush_bytes; /* flush when this much text is buffered; 0 = 1 MiB */
    size_t frame_bytes; /* end the zstd frame at the first flush after it holds this much
                           text; 0 = 256 KiB.  flush_bytes + frame_bytes <= 2 MiB, so that
                           the reader can verify every frame before delivering it */
} ls_trace_writer_opts;

/* Creates the file at path (which must not exist: O_EXCL, so an earlier
 * trace is never overwritten), compressed when path ends in ".zst", and
 * writes the header line (flushed at once).  On success *out is the
 * caller's, released with ls_trace_writer_close.  LS_ERR_ARG for NULL
 * arguments or an invalid header (message on stderr naming the field),
 * LS_ERR_IO when the file cannot be created (path and errno on stderr),
 * LS_ERR_NOMEM.  *out is NULL on failure. */
ls_status ls_trace_writer_open(ls_trace_writer **out, const char *path, const ls_trace_header *header);
ls_status ls_trace_writer_open_opts(ls_trace_writer **out, const char *path,
                                    const ls_trace_header *header, const ls_trace_writer_opts *opts);

/* Typed emitters, one per kind.  Each returns LS_OK or the refusal or
 * sticky error described above.  w == NULL gives LS_ERR_ARG. */
ls_status ls_trace_emit_phase_begin(ls_trace_writer *w, const char *phase, int64_t step);
ls_status ls_trace_emit_phase_end(ls_trace_writer *w, const char *phase, int64_t step,
                                  int64_t wall_ns, bool ok);
ls_status ls_trace_emit_layer_end(ls_trace_writer *w, const ls_trace_layer_end *e);
ls_status ls_trace_emit_collective(ls_trace_writer *w, const ls_trace_collective *c);
ls_status ls_trace_emit_optimizer_step(ls_trace_writer *w, int64_t step, int64_t n_params,
                                       double lr, double grad_norm);
/* sha256: the 32 digest bytes (written as 64 lowercase hex digits). */
ls_status ls_trace_emit_param_digest(ls_trace_writer *w, int64_t step, const char *target,
                                     const uint8_t sha256[32]);
ls_status ls_trace_emit_memory(ls_trace_writer *w, const ls_trace_memory *m);
/* error: "code" is the numeric status, "status" its ls_status_str, message
 * any string (NULL gives ""). */
ls_status ls_trace_emit_error(ls_trace_writer *w, ls_status code, const char *message);
/* step_metrics: one per optimizer step (trace_step_metrics.h).  Refusals
 * as ls_trace_step_metrics_check (LS_ERR_NONFINITE naming the field for a
 * NaN/Inf); "prefix_frozen" is written when m->prefix_frozen or the
 * writer's prefix-frozen mode is on. */
ls_status ls_trace_emit_step_metrics(ls_trace_writer *w, const ls_trace_step_metrics *m);
/* rank_complete: the last event; "events" is the number of events before it.
 * Every later emit is refused. */
ls_status ls_trace_emit_rank_complete(ls_trace_writer *w, int64_t steps);

/* Generic emitter: writes the envelope with "ev":kind followed by the
 * members of `fields` (an object, borrowed, not modified) in their order.
 * kind must be an ident; when it names a known kind the fields must pass
 * ls_trace_event_check (so the reader accepts them).  Keys may not repeat
 * or be envelope keys.  Numbers that are integral with magnitude at most
 * LS_TRACE_MAX_INT are written as integers, others as doubles; a non-finite
 * number anywhere gives LS_ERR_NONFINITE.  Flushes when kind is one of the
 * flushing kinds. */
ls_status ls_trace_emit_json(ls_trace_writer *w, const char *kind, const cJSON *fields);

/* Turns prefix-frozen mode on or off (see above) for the events emitted
 * after the call.  LS_ERR_ARG for NULL.  ls_trace_writer_prefix_frozen
 * tells whether it is on (false for NULL). */
ls_status ls_trace_writer_set_prefix_frozen(ls_trace_writer *w, bool on);
bool ls_trace_writer_prefix_frozen(ls_trace_writer *w);

/* Writes buffered events to the file (one zstd frame when compressed). */
ls_status ls_trace_writer_flush(ls_trace_writer *w);

/* Flushes, ends the zstd stream, fsyncs and closes the file, and frees w
 * (always, even on error).  Returns the first sticky error or the error of
 * this final flush/fsync/close.  NULL is a no-op returning LS_OK. */
ls_status ls_trace_writer_close(ls_trace_writer *w);

/* The seq the next event will get (= number of events written so far);
 * -1 for NULL. */
int64_t ls_trace_writer_seq(ls_trace_writer *w);

/* The last refusal or error as one line naming the field or the file ("" if
 * none).  Valid until the next call on w; "" for NULL. */
const char *ls_trace_writer_last_error(ls_trace_writer *w);

#endif
