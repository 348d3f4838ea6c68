/* trace_reader.h - reads one rank's trace and reports everything wrong with it.
 *
 * The audit's only way into a trace (docs/design.md §6).  The reader streams:
 * its memory is bounded independently of the file's size (a decode window
 * of at most 4 MiB, one line of at most LS_TRACE_MAX_LINE, zstd's context
 * for windows up to 8 MiB, at most LS_TRACE_MAX_DIAGS stored diagnostics).
 * zstd input is recognised by its magic bytes, whatever the file is called.
 *
 * Honesty rules.  The reader never crashes and never hides: every problem
 * becomes a diagnostic in the report, and
 *  - zstd content is delivered only after its frame's checksum verified,
 *    with two exceptions, each event of them flagged LS_TRACE_EVF_UNVERIFIED
 *    and reported: a frame too large to hold (never one trace_writer
 *    writes) is delivered early, and a frame the input ends inside (a killed
 *    writer's open frame: its flushed blocks decode, its checksum never
 *    came) has its complete lines delivered before the TRUNCATED end;
 *  - a line is delivered only when it ends with '\n', parses as one strict
 *    JSON object (RFC 8259 tokens, UTF-8, no repeated keys) and has a valid
 *    envelope: v == the header's version (1, or 2: docs/contract.md §1),
 *    rank/seq/ts_ns integers >= 0, ev an identifier.
 *    Anything else is reported (with its line number) and skipped;
 *  - a delivered event may still carry problems (seq gap/repeat/order, ts_ns
 *    going back, rank differing from the header, fields failing the kind's
 *    table, unknown kind, event after rank_complete): each is reported AND
 *    marked in the event's flags, so a consumer can count or skip it;
 *  - recoverable problems skip to the next line; a corrupt zstd frame or a
 *    read error stops the reader (lines verified before it are delivered);
 *  - the end is CLEAN only when the input ends at a line (and frame)
 *    boundary right after a rank_complete event.
 *
 * Thread-safety: a reader is used by one thread at a time; separate readers
 * are independent. */
#ifndef LS_RECEIPTS_TRACE_READER_H
#define LS_RECEIPTS_TRACE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/trace_event.h"
#include "receipts/format/trace_step_metrics.h" /* ls_trace_decode_step_metrics */

/* Diagnostics kept in a report; later ones are only counted. */
#define LS_TRACE_MAX_DIAGS 1000

typedef enum {
    LS_TRACE_DIAG_IO = 0,        /* the file could not be opened or read (or out of memory) */
    LS_TRACE_DIAG_HEADER,        /* line 1 is not a valid header (missing, malformed, bad field) */
    LS_TRACE_DIAG_CORRUPT_FRAME, /* zstd reports an error (bad data, checksum); reading stops */
    LS_TRACE_DIAG_TRUNCATED,     /* the input ends inside a zstd frame or inside a line */
    LS_TRACE_DIAG_INCOMPLETE,    /* the input ends at a boundary but not after rank_complete */
    LS_TRACE_DIAG_OVERLONG_LINE, /* a line longer than LS_TRACE_MAX_LINE (skipped) */
    LS_TRACE_DIAG_MALFORMED_LINE,/* not one strict JSON object */
    LS_TRACE_DIAG_ENVELOPE,      /* envelope field missing, of wrong type, or v != 1 */
    LS_TRACE_DIAG_KEY_ORDER,     /* envelope keys not first and in the order v,rank,seq,ts_ns,ev */
    LS_TRACE_DIAG_RANK_MISMATCH, /* event rank differs from the header's */
    LS_TRACE_DIAG_SEQ_GAP,       /* seq greater than expected (events missing) */
    LS_TRACE_DIAG_SEQ_DUPLICATE, /* seq equal to the previous event's */
    LS_TRACE_DIAG_SEQ_ORDER,     /* seq smaller than expected (out of order / repeated) */
    LS_TRACE_DIAG_TS_BACKWARDS,  /* ts_ns smaller than the previous event's */
    LS_TRACE_DIAG_FIELD,         /* a kind's fields fail ls_trace_event_check, or a collective
                                    names a group the header lacks, or (v2) a phase or layer
                                    kind is not in the header's vocabulary */
    LS_TRACE_DIAG_UNKNOWN_KIND,  /* warning: ev is not a kind of trace_event.h */
    LS_TRACE_DIAG_AFTER_COMPLETE,/* event after rank_complete */
    LS_TRACE_DIAG_COUNT_MISMATCH,/* rank_complete.events differs from the events read */
    LS_TRACE_DIAG_NO_CHECKSUM,   /* warning: a zstd frame without content checksum */
    LS_TRACE_DIAG_UNVERIFIED,    /* warning: a frame's events delivered before its checksum */
    LS_TRACE_DIAG_CODE_COUNT
} ls_trace_diag_code;

/* "io", "header", "corrupt_frame", ... ; "unknown" out of range. */
const char *ls_trace_diag_name(ls_trace_diag_code code);
/* false for the warnings (UNKNOWN_KIND, NO_CHECKSUM, UNVERIFIED). */
bool ls_trace_diag_is_error(ls_trace_diag_code code);

typedef struct {
    ls_trace_diag_code code;
    int64_t line;          /* 1-based line number; -1 when not about one line */
    uint64_t byte_offset;  /* offset in the file: the line's start (plain), the
                              start of the zstd frame holding it / where zstd failed */
    uint64_t text_offset;  /* offset in the decoded text */
    int64_t seq;           /* the event's seq, else the last delivered seq; -1 none */
    int64_t expected, got; /* seq and ts_ns problems; -1 otherwise */
    char message[256];
} ls_trace_diag;

typedef enum {
    LS_TRACE_END_NONE = 0,   /* still reading */
    LS_TRACE_END_CLEAN,      /* ended at a boundary right after rank_complete */
    LS_TRACE_END_INCOMPLETE, /* ended at a boundary without rank_complete last */
    LS_TRACE_END_TRUNCATED,  /* ended inside a frame or a line */
    LS_TRACE_END_CORRUPT,    /* stopped at a corrupt zstd frame */
    LS_TRACE_END_FAILED,     /* stopped: read error or out of memory */
    LS_TRACE_END_STOPPED     /* the consumer stopped early */
} ls_trace_end;

/* "clean", "incomplete", ... */
const char *ls_trace_end_name(ls_trace_end end);

/* What the reader found.  Owned by the reader until moved out by
 * ls_trace_read_file; then by the caller (ls_trace_report_free). */
typedef struct {
    char *path;                  /* the name given at open */
    bool compressed;             /* zstd magic found */
    ls_trace_end end;
    bool truncated_in_frame;     /* TRUNCATED inside a zstd frame */
    bool header_ok;              /* line 1 is a valid header */
    cJSON *header;               /* line 1 when it is a JSON object, else NULL */
    int64_t rank, world;         /* from the header; -1 when unknown */
    int64_t n_lines;             /* lines seen (complete or not) */
    int64_t n_events;            /* events delivered */
    int64_t last_seq;            /* seq of the last delivered event; -1 none */
    uint64_t good_text_offset;   /* decoded bytes up to the end of the last delivered line */
    uint64_t file_bytes;         /* input bytes consumed */
    uint64_t text_bytes;         /* decoded bytes produced (verified or not) */
    uint64_t frames;             /* complete zstd frames */
    bool saw_rank_complete;
    size_t max_buffer_bytes;     /* high-water mark of the reader's buffers and zstd context */
    ls_trace_diag *diags;        /* first LS_TRACE_MAX_DIAGS diagnostics, in order */
    size_t n_diags;
    uint64_t n_diags_dropped;    /* diagnostics counted but not stored */
    uint64_t counts[LS_TRACE_DIAG_CODE_COUNT]; /* every diagnostic, by code */
    /* The trace's format and vocabularies (docs/contract.md §1).  version:
     * the header's "v" when it is 1 or 2 (events must carry the same), 1
     * when there is no usable header.  phases / layer_kinds: names by
     * index, the indices ls_trace_event.phase / .layer_kind give.  v1: the
     * fixed tables of trace_event.h (index = LS_PHASE_*, ls_trace_layer_kind);
     * v2: the header's lists (the valid names of them). */
    int version;
    char phases[LS_TRACE_MAX_VOCAB][LS_TRACE_VOCAB_NAME_MAX + 1];
    size_t n_phases;
    char layer_kinds[LS_TRACE_MAX_VOCAB][LS_TRACE_VOCAB_NAME_MAX + 1];
    size_t n_layer_kinds;
} ls_trace_report;

/* The "kind" of the header's group `name` (v2: a registered group kind, trace_event.h),
 * NULL when the report has no header, no such group or (v1) no kind.  The
 * string lives as long as the report. */
const char *ls_trace_report_group_kind(const ls_trace_report *report, const char *name);

/* Index of name in the report's phase / layer-kind vocabulary, -1 when it
 * is not there (or name is NULL). */
int ls_trace_report_phase_index(const ls_trace_report *report, const char *name);
int ls_trace_report_layer_kind_index(const ls_trace_report *report, const char *name);

/* Frees what the report owns and zeroes it.  NULL is a no-op. */
void ls_trace_report_free(ls_trace_report *report);

/* Summary: LS_OK when the end is CLEAN and no error diagnostic was
 * reported; else the worst of LS_ERR_IO (FAILED), LS_ERR_CORRUPT (CORRUPT),
 * LS_ERR_TRUNCATED (TRUNCATED or INCOMPLETE), LS_ERR_FORMAT (any other
 * error diagnostic).  STOPPED alone counts as clean.  LS_ERR_ARG for NULL. */
ls_status ls_trace_report_status(const ls_trace_report *report);

/* Event problem flags (ls_trace_event.flags). */
#define LS_TRACE_EVF_RANK 0x01u           /* rank differs from the header */
#define LS_TRACE_EVF_SEQ 0x02u            /* seq gap, duplicate or out of order */
#define LS_TRACE_EVF_TS 0x04u             /* ts_ns went backwards */
#define LS_TRACE_EVF_FIELDS 0x08u         /* fields fail the kind's table */
#define LS_TRACE_EVF_UNKNOWN_KIND 0x10u   /* kind not known to this build */
#define LS_TRACE_EVF_AFTER_COMPLETE 0x20u /* after rank_complete */
#define LS_TRACE_EVF_UNVERIFIED 0x40u     /* delivered before its zstd checksum */
#define LS_TRACE_EVF_KEY_ORDER 0x80u      /* envelope keys out of order */

/* One delivered event.  Everything it points to is owned by the reader and
 * valid until the next ls_trace_reader_next / callback return. */
typedef struct {
    const cJSON *json;     /* the whole event object */
    const char *ev;        /* its kind name */
    ls_trace_kind kind;    /* LS_TRACE_KIND_UNKNOWN for other names */
    int64_t rank, seq, ts_ns;
    int64_t line;          /* 1-based line number */
    uint64_t byte_offset;  /* as in ls_trace_diag */
    uint64_t text_offset;
    unsigned flags;        /* LS_TRACE_EVF_* */
    bool prefix_frozen;    /* the event has "prefix_frozen": true: its step ran
                              against a stale prompt state (trace_event.h) */
    int phase;             /* its "phase" as an index into the report's phases
                              (v1: LS_PHASE_*), -1 when it has none or (v1) a
                              name outside the fixed table */
    int layer_kind;        /* layer_end "kind" as an index into the report's
                              layer_kinds (v1: ls_trace_layer_kind), else -1 */
    /* The kind's fields by their position in its table (field[i] holds
     * ls_trace_field_index(kind, name) == i), NULL when absent: found by the
     * reader's field check, so a consumer reads them without a search.
     * All NULL when flags has LS_TRACE_EVF_FIELDS or LS_TRACE_EVF_UNKNOWN_KIND. */
    const cJSON *field[LS_TRACE_MAX_FIELDS];
} ls_trace_event;

typedef struct ls_trace_reader ls_trace_reader;

/* Opens a trace file.  LS_ERR_ARG for NULL arguments, LS_ERR_NOMEM;
 * a file that cannot be opened is NOT an error here: the reader opens,
 * reports LS_TRACE_DIAG_IO and ends FAILED, so the audit handles every
 * problem through the report.  *out is the caller's (ls_trace_reader_close). */
ls_status ls_trace_reader_open(ls_trace_reader **out, const char *path);

/* Reads from an open file descriptor, which the reader then owns (closed by
 * ls_trace_reader_close, also on LS_ERR_NOMEM); name labels the report;
 * *out as ls_trace_reader_open.  The
 * audit opens its files itself (no links followed, audit/model/run_files.h) and
 * hands the descriptor over, so nothing is reopened by path.  fd < 0 is
 * reported as LS_TRACE_DIAG_IO like an unopenable path. */
ls_status ls_trace_reader_open_fd(ls_trace_reader **out, int fd, const char *name);

/* Reads from memory (borrowed: data must outlive the reader); name labels
 * the report (NULL gives "<memory>"); *out as ls_trace_reader_open. */
ls_status ls_trace_reader_open_mem(ls_trace_reader **out, const void *data, size_t len,
                                   const char *name);

/* Next event: LS_OK with *ev set, or LS_OK with *ev == NULL at the end
 * (then the report is final).  LS_ERR_ARG for NULL arguments.  After the
 * end every call returns LS_OK with NULL. */
ls_status ls_trace_reader_next(ls_trace_reader *r, const ls_trace_event **ev);

/* Marks the end as STOPPED (when not already ended); later calls to
 * ls_trace_reader_next return no event.  NULL is a no-op. */
void ls_trace_reader_stop(ls_trace_reader *r);

/* The reader's report (valid until close). */
const ls_trace_report *ls_trace_reader_report(const ls_trace_reader *r);

/* SHA-256 of every byte of the source: what the reader read so far (the
 * bytes it decoded, so the bytes it judged) and then the rest, read to the
 * end without decoding; *bytes (may be NULL) their count.  After it the
 * reader delivers no event (a reader not yet at its end is STOPPED).  The
 * audit compares it with the manifest's subject digest: the verdict rests on
 * the bytes whose digest was checked (docs/evidence.md, "One read").
 * LS_ERR_IO when the rest cannot be read, LS_ERR_NOMEM. */
ls_status ls_trace_reader_sha256(ls_trace_reader *r, uint8_t out[32], uint64_t *bytes);

/* Releases the reader and its report.  NULL is a no-op. */
void ls_trace_reader_close(ls_trace_reader *r);

/* Callback for ls_trace_read_file: return 0 to continue, non-zero to stop. */
typedef int (*ls_trace_event_fn)(const ls_trace_event *ev, void *user);

/* Reads a whole trace, calling fn (may be NULL) for every delivered event,
 * and moves the final report into *report (the caller frees it with
 * ls_trace_report_free).  Returns ls_trace_report_status(report), or
 * LS_ERR_ARG (path or report NULL; *report untouched) / LS_ERR_NOMEM. */
ls_status ls_trace_read_file(const char *path, ls_trace_event_fn fn, void *user,
                             ls_trace_report *report);

/* ls_trace_read_file over an open descriptor (owned, closed; see
 * ls_trace_reader_open_fd). */
ls_status ls_trace_read_fd(int fd, const char *name, ls_trace_event_fn fn, void *user,
                           ls_trace_report *report);

/* ls_trace_read_fd, and the SHA-256 of every byte of the file (the bytes
 * read, then the rest: ls_trace_reader_sha256) into sha, their count into
 * *bytes (may be NULL), the digest's status into *sha_st. */
ls_status ls_trace_read_fd_sha256(int fd, const char *name, ls_trace_event_fn fn, void *user,
                                  ls_trace_report *report, uint8_t sha[32], uint64_t *bytes, ls_status *sha_st);

#endif
