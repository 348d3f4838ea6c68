/* json_util.h - the JSON conventions every receipts file shares.
 *
 * One place decides how LongStraw reads and writes JSON documents:
 *  - strict parsing: the whole buffer is one JSON value (only whitespace
 *    after it), no duplicate object keys, no number that overflows to
 *    Inf; errors give the byte offset and the file name;
 *  - finite-number check: cJSON prints NaN/Inf as `null`, so every writer
 *    walks the document first and refuses it with LS_ERR_NONFINITE,
 *    naming the JSON pointer of the first bad number (docs/style.md rule 11);
 *  - canonical form: keys sorted bytewise, no whitespace (the input of
 *    build digests); cJSON formats numbers independently of the locale;
 *  - error messages: library functions take an optional `char *err,
 *    size_t errlen` pair and write one line there (NULL/0 accepted).
 *
 * Ownership: functions returning `char **` or `cJSON **` hand the caller
 * a heap object (free() / cJSON_Delete()); inputs are borrowed. */
#ifndef LS_RECEIPTS_JSON_UTIL_H
#define LS_RECEIPTS_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"

/* Largest integer every JSON reader (a double) holds exactly: 2^53 - 1. */
#define LS_JSON_MAX_EXACT_INT 9007199254740991.0

#if defined(__GNUC__)
#define LS_JSON_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LS_JSON_PRINTF(f, a)
#endif

/* cJSON's type tests, inline (the trace reader and the audit test every
 * field of every event: a call into the library each time shows in their
 * profiles).  Equal to cJSON_IsNumber, cJSON_IsString, ... (NULL: false). */
static inline int ls_json_type_is(const cJSON *it, int type) { return it != NULL && (it->type & 0xFF) == type; }
#define ls_json_is_number(it) ls_json_type_is((it), cJSON_Number)
#define ls_json_is_string(it) ls_json_type_is((it), cJSON_String)
#define ls_json_is_object(it) ls_json_type_is((it), cJSON_Object)
#define ls_json_is_array(it) ls_json_type_is((it), cJSON_Array)
#define ls_json_is_true(it) ls_json_type_is((it), cJSON_True)

/* Formats one line into err (when err != NULL and errlen > 0). */
void ls_json_errf(char *err, size_t errlen, const char *fmt, ...) LS_JSON_PRINTF(3, 4);

/* Parses exactly one JSON value from bytes[0..len) (need not be
 * NUL-terminated).  `what` names the input in errors (a path; NULL gives
 * "input").  LS_ERR_FORMAT on syntax errors, trailing bytes, duplicate
 * keys or a \u0000 escape (cJSON would cut the string there); LS_ERR_NONFINITE on a number outside the double range.  *out is
 * the caller's (cJSON_Delete), NULL on failure. */
ls_status ls_json_parse(const char *bytes, size_t len, const char *what, cJSON **out,
                        char *err, size_t errlen);

/* Default cap of the whole-file readers below: no JSON document LongStraw
 * writes or reads (receipts, manifests, envelopes, batch dumps) comes near
 * it, and a hostile file or an endless stream (/dev/zero) is refused after
 * reading at most this many bytes instead of being read forever. */
#define LS_JSON_MAX_FILE_BYTES ((size_t)64 << 20)

/* Reads a whole file of at most max_bytes bytes into *out (NUL-terminated,
 * the caller's: free(); NULL on failure), its length in *len.  LS_ERR_IO (naming the file) when it
 * cannot be opened or read or is a directory; LS_ERR_FORMAT (naming the file
 * and the cap) when it holds more than max_bytes bytes: a regular file is
 * refused from its size before reading, anything else (a pipe, a device)
 * after max_bytes + 1 bytes.  Never allocates more than max_bytes + 1. */
ls_status ls_json_read_bytes_capped(const char *path, size_t max_bytes, char **out, size_t *len,
                                    char *err, size_t errlen);

/* ls_json_read_bytes_capped with LS_JSON_MAX_FILE_BYTES. */
ls_status ls_json_read_bytes(const char *path, char **out, size_t *len, char *err,
                             size_t errlen);

/* ls_json_read_bytes_capped + ls_json_parse, errors naming the file.  *out
 * is the caller's (cJSON_Delete), NULL on failure. */
ls_status ls_json_read_file_capped(const char *path, size_t max_bytes, cJSON **out, char *err,
                                   size_t errlen);

/* ls_json_read_file_capped with LS_JSON_MAX_FILE_BYTES. */
ls_status ls_json_read_file(const char *path, cJSON **out, char *err, size_t errlen);

/* LS_OK when every number in doc is finite; otherwise LS_ERR_NONFINITE and,
 * when ptr != NULL, the JSON pointer of the first offender in ptr[ptrlen]. */
ls_status ls_json_check_finite(const cJSON *doc, char *ptr, size_t ptrlen);

/* Longest text ls_json_format_number writes, NUL included. */
#define LS_JSON_NUMBER_MAX 32

/* Writes a finite d as the JSON number text that reads back (strtod) as
 * exactly d, sign of zero included: integral values below 2^53 as plain
 * digits, others as the shortest of %.15g, %.16g, %.17g that round-trips.
 * cJSON's own printer stops at 15 digits whenever its tolerant comparison
 * calls them close enough, losing up to an ulp; every printer here uses
 * this one instead.  Returns the length (0 when d is not finite). */
size_t ls_json_format_number(double d, char buf[LS_JSON_NUMBER_MAX]);

/* A raw cJSON item holding ls_json_format_number(d): it prints exactly and
 * parses back as the same double.  NULL when d is not finite or on
 * allocation failure.  The caller owns it (or adds it to a document). */
cJSON *ls_json_create_exact_number(double d);

/* Formatted (tab-indented, trailing newline) serialisation after the
 * finite check, every number printed exactly (ls_json_format_number).
 * *out is the caller's (free()), *out_len its length. */
ls_status ls_json_print(const cJSON *doc, char **out, size_t *out_len, char *err,
                        size_t errlen);

/* Canonical serialisation: object keys sorted bytewise, no whitespace,
 * strings as cJSON prints them, numbers exactly (ls_json_format_number).
 * Refuses non-finite numbers (LS_ERR_NONFINITE) and duplicate keys
 * (LS_ERR_ARG).  *out is the caller's (free()), *out_len its length. */
ls_status ls_json_print_canonical(const cJSON *doc, char **out, size_t *out_len,
                                  char *err, size_t errlen);

/* ls_json_print + ls_atomic_write: the file appears complete or not at all;
 * on any failure an existing file at path is left as it was. */
ls_status ls_json_write_file(const char *path, const cJSON *doc, char *err, size_t errlen);

/* Appends "/token" (RFC 6901 escaped: ~ -> ~0, / -> ~1) or "/index" to the
 * JSON pointer in buf[cap] (truncating if it does not fit). */
void ls_json_pointer_push_key(char *buf, size_t cap, const char *key);
void ls_json_pointer_push_index(char *buf, size_t cap, size_t index);

/* Adds a non-negative integer member.  Values below 10^15 become cJSON
 * numbers (cJSON prints them exactly); larger ones (wall-clock nanoseconds)
 * are written as their exact decimal digits (a cJSON raw item), which every JSON reader parses as a
 * number (double-based readers to ~0.25 us at 2^61).  0 on success, -1 on
 * allocation failure. */
int ls_json_add_u64(cJSON *obj, const char *key, uint64_t v);

/* v as one short line for a message: its unformatted JSON cut to max_chars
 * (then "..."), "(absent)" for NULL, "?" when it cannot be printed. */
void ls_json_brief(const cJSON *v, size_t max_chars, char *buf, size_t cap);

/* Reads a member written by ls_json_add_u64: a number that is integral and
 * within [0, 2^64).  0 on success, -1 otherwise (absent, wrong type,
 * fractional, negative, out of range). */
int ls_json_get_u64(const cJSON *obj, const char *key, uint64_t *out);

#endif
