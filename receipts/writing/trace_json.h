/* trace_json.h - internal to receipts/: the JSON text of trace lines, built
 * at the end of a growing buffer (used by trace_writer.c).  Not part of the
 * contract; trace_writer.h is.
 *
 * A line is built from b->mark (the caller sets it to b->len).  A put that
 * would take the line past LS_TRACE_MAX_LINE bytes, or that cannot grow the
 * buffer, writes nothing and sets b->overflow or b->nomem; every later put
 * then writes nothing, and the caller rolls the buffer back to mark and
 * clears the flags.  No put is refused for its content: strings are
 * escaped, invalid UTF-8 becomes U+FFFD, and numbers are formatted in the
 * "C" locale, integers exactly and finite doubles with 15 significant
 * digits when those read back to the same double, else 17.  Callers check
 * that doubles are finite (ls_trace_json_check_value for cJSON values).
 *
 * Memory: the buffer's text and locale are its own, released by
 * ls_trace_json_buf_free; like the writer's other buffers they are not
 * charged to the trainer's memory tracker. */
#ifndef LS_RECEIPTS_TRACE_JSON_H
#define LS_RECEIPTS_TRACE_JSON_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/status.h"

typedef struct {
    char *buf;         /* pending text (not NUL-terminated) */
    size_t len, cap;
    size_t mark;       /* where the line being built starts */
    bool overflow;     /* the line being built passed LS_TRACE_MAX_LINE */
    bool nomem;        /* growing the buffer failed while building */
    locale_t c_locale; /* the "C" locale doubles are formatted in */
} ls_trace_json_buf;

/* Empties *b and creates its "C" locale; false when that fails (*b may
 * still be passed to ls_trace_json_buf_free). */
bool ls_trace_json_buf_init(ls_trace_json_buf *b);

/* Frees the text and the locale; a zeroed buffer is fine. */
void ls_trace_json_buf_free(ls_trace_json_buf *b);

/* n bytes of s, or the NUL-terminated s, verbatim (JSON syntax). */
void ls_trace_json_put_raw(ls_trace_json_buf *b, const char *s, size_t n);
static inline void ls_trace_json_put_lit(ls_trace_json_buf *b, const char *s) {
    ls_trace_json_put_raw(b, s, strlen(s));
}

/* An integer, exactly; a finite double (see above). */
void ls_trace_json_put_i64(ls_trace_json_buf *b, int64_t v);
void ls_trace_json_put_f64(ls_trace_json_buf *b, double v);

/* s (not NULL) as a JSON string: quotes, backslashes and control characters
 * escaped, invalid UTF-8 bytes as U+FFFD. */
void ls_trace_json_put_str(ls_trace_json_buf *b, const char *s);

/* ,"k": with k verbatim (a field name the caller knows needs no escape),
 * then for the typed forms the value as above.  Inline, like put_lit, so
 * that the lengths of literal keys are known at compile time. */
static inline void ls_trace_json_put_key(ls_trace_json_buf *b, const char *k) {
    ls_trace_json_put_raw(b, ",\"", 2);
    ls_trace_json_put_lit(b, k);
    ls_trace_json_put_raw(b, "\":", 2);
}

static inline void ls_trace_json_put_key_i64(ls_trace_json_buf *b, const char *k, int64_t v) {
    ls_trace_json_put_key(b, k);
    ls_trace_json_put_i64(b, v);
}

static inline void ls_trace_json_put_key_f64(ls_trace_json_buf *b, const char *k, double v) {
    ls_trace_json_put_key(b, k);
    ls_trace_json_put_f64(b, v);
}

static inline void ls_trace_json_put_key_str(ls_trace_json_buf *b, const char *k, const char *v) {
    ls_trace_json_put_key(b, k);
    ls_trace_json_put_str(b, v);
}

static inline void ls_trace_json_put_key_bool(ls_trace_json_buf *b, const char *k, bool v) {
    ls_trace_json_put_key(b, k);
    ls_trace_json_put_lit(b, v ? "true" : "false");
}

/* Checks a borrowed cJSON value before it is written: finite numbers, no
 * raw or invalid items, strings with values, object members with keys and
 * no key twice, nesting at most 512 deep.  LS_OK, else the status
 * (LS_ERR_NONFINITE for a non-finite number, LS_ERR_ARG for the rest) with
 * one line in err[err_len] naming kind.where, where being the innermost
 * member's key. */
ls_status ls_trace_json_check_value(const cJSON *v, const char *kind, const char *where, char *err,
                                    size_t err_len);

/* Writes a value that passed ls_trace_json_check_value: integral numbers
 * within LS_TRACE_MAX_INT as integers, other numbers as doubles. */
void ls_trace_json_put_value(ls_trace_json_buf *b, const cJSON *v);

#endif
