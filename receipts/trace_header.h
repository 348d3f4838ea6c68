/* trace_header.h - internal to receipts/: the header line (line 1) the
 * trace writer writes, checked and built (trace_writer.c).  Not part of the
 * contract; trace_writer.h is, and says what the header holds. */
#ifndef LS_RECEIPTS_TRACE_HEADER_H
#define LS_RECEIPTS_TRACE_HEADER_H

#include <stdint.h>

#include "common/status.h"
#include "receipts/trace_json.h"
#include "receipts/trace_writer.h"

/* Checks h (not NULL) with host standing for h->host (not NULL after the
 * caller's default; checked too): run_id and host tokens, 0 <= rank < world,
 * pid and start_unix_ns in range, groups named by distinct tokens with
 * members distinct ranks of world.  LS_OK, or LS_ERR_ARG after printing the
 * first problem to stderr, prefixed with path. */
ls_status ls_trace_header_check(const char *path, const ls_trace_header *h, const char *host);

/* Appends the header line, newline included, as a new line of b (sets
 * b->mark); host, pid and start_ns stand in for the header's own fields.
 * A line too long or out of memory shows in b->overflow / b->nomem, as for
 * every line (trace_json.h). */
void ls_trace_header_put(ls_trace_json_buf *b, const ls_trace_header *h, const char *host,
                         int64_t pid, int64_t start_ns);

#endif
