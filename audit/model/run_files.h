/* run_files.h - reading the files of an untrusted run directory (docs/design.md
 * §2: the audit links receipts/ and schemas/ only).  A run directory is
 * hostile input: a name with "..", an absolute path, a symbolic link
 * anywhere on the way (leaving the run or not), anything that is not a
 * regular file, or a file above the caller's cap is refused with a message
 * naming the file; nothing outside the run directory is ever opened. */
#ifndef LS_AUDIT_RUN_FILES_H
#define LS_AUDIT_RUN_FILES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

/* The largest world any part of the audit accepts: the trainer's limit
 * (trace header groups of at most 4096 ranks); a manifest or receipt that
 * claims more is refused, never allocated for. */
#define LS_AUDIT_MAX_WORLD 4096

/* Caps on what the audit reads whole into memory (traces are streamed). */
#define LS_AUDIT_MAX_JSON_FILE ((uint64_t)64 << 20) /* receipts, manifest, parity, signature */

/* 1 when rel is a safe relative path (ls_receipt_relpath_ok's rule). */
int ls_audit_rel_ok(const char *rel);

/* Checks run_dir/rel without following links: every component of rel is
 * lstat'ed; each but the last must be a directory, the last a regular file
 * of at most max_bytes (0: no cap).  LS_OK with *size (may be NULL);
 * LS_ERR_IO (missing or unreadable), LS_ERR_FORMAT (an unsafe name, a link,
 * not a regular file, above the cap).  err names rel. */
ls_status ls_audit_stat(const char *run_dir, const char *rel, uint64_t max_bytes, uint64_t *size, char *err,
                        size_t err_len);

/* ls_audit_open, then the whole file into a NUL-terminated heap buffer
 * *out (the caller's, free(); NULL on failure), its length in *len (may be
 * NULL); reads at most the checked size + 1 byte and fails if the file
 * grew. */
ls_status ls_audit_read(const char *run_dir, const char *rel, uint64_t max_bytes, char **out, size_t *len,
                        char *err, size_t err_len);

/* Opens run_dir/rel for reading without a window between check and open:
 * run_dir is opened with O_NOFOLLOW | O_DIRECTORY, then every component of
 * rel with openat(O_NOFOLLOW) (directories O_DIRECTORY, the last O_NONBLOCK
 * so that a FIFO swapped in never blocks), and the opened file must be a
 * regular file of at most max_bytes (0: no cap) by fstat.  The fd (>= 0,
 * the caller closes it) with *size (may be NULL); -1 with *status
 * (may be NULL: LS_ERR_IO missing, LS_ERR_FORMAT unsafe) and err naming rel. */
int ls_audit_open(const char *run_dir, const char *rel, uint64_t max_bytes, uint64_t *size, ls_status *status,
                  char *err, size_t err_len);

/* SHA-256 (lowercase hex) of run_dir/rel opened with ls_audit_open. */
ls_status ls_audit_digest(const char *run_dir, const char *rel, char hex[65], char *err, size_t err_len);

/* ---- one read (docs/evidence.md, "One read") --------------------------------
 * Every file the audit parses is read once, and its SHA-256 is taken from the
 * bytes parsed (a trace's from the bytes the reader decoded, then the rest of
 * the file: ls_trace_reader_sha256).  The table keeps one record a file;
 * the manifest's digests are compared with it (load_manifest.c), never with
 * a second read, and whatever reads a file again (--timeline, --html, diff)
 * checks that it got the same bytes (ls_audit_reads_same) or fails. */
typedef struct {
    char rel[160];       /* relative to the run directory */
    char sha256[65];     /* lowercase hex of the bytes read */
    uint64_t bytes;
} ls_audit_read_record;

typedef struct {
    ls_audit_read_record *v;
    size_t n, cap;
    bool failed;         /* a record could not be kept (out of memory, a name too long): nothing verifies */
} ls_audit_reads;

/* Records rel's digest (a second record of rel replaces nothing: the first
 * read is the one judged, and a second with other bytes marks the table
 * failed). */
ls_status ls_audit_reads_note(ls_audit_reads *t, const char *rel, const uint8_t sha[32], uint64_t bytes);
/* The record of rel, NULL when the audit did not read it. */
const ls_audit_read_record *ls_audit_reads_find(const ls_audit_reads *t, const char *rel);
/* LS_OK when rel was read before with these very bytes (sha); else
 * LS_ERR_FORMAT with err naming rel and both digests ("changed while the
 * audit ran"), or saying that the audit never read it. */
ls_status ls_audit_reads_same(const ls_audit_reads *t, const char *rel, const uint8_t sha[32], char *err,
                              size_t err_len);
void ls_audit_reads_free(ls_audit_reads *t);

/* ls_audit_read, and the bytes' digest noted in t (when t is not NULL). */
ls_status ls_audit_read_noted(ls_audit_reads *t, const char *run_dir, const char *rel, uint64_t max_bytes,
                              char **out, size_t *len, char *err, size_t err_len);

/* 1 when run_dir itself is a directory and not a symbolic link. */
int ls_audit_dir_ok(const char *run_dir);

/* run_dir/rel into buf (LS_ERR_ARG when it does not fit). */
ls_status ls_audit_path(const char *run_dir, const char *rel, char *buf, size_t cap);
#endif
