/* status.h - the one error-code enum every LongStraw library returns.
 *
 * Library functions return ls_status and pass outputs through pointers
 * (docs/style.md rule 7).  The numeric values are fixed: they appear in trace
 * `error` events and receipts, so never renumber, only append. */
#ifndef LS_COMMON_STATUS_H
#define LS_COMMON_STATUS_H

typedef enum {
    LS_OK = 0,
    LS_ERR_ARG = 1,          /* bad argument from the caller */
    LS_ERR_NOMEM = 2,        /* allocation failed or refused by a budget */
    LS_ERR_IO = 3,           /* open/read/write/rename failed (errno kept) */
    LS_ERR_FORMAT = 4,       /* malformed input file */
    LS_ERR_TRUNCATED = 5,    /* input ends early */
    LS_ERR_CORRUPT = 6,      /* checksum / digest / frame mismatch */
    LS_ERR_SCHEMA = 7,       /* document does not satisfy its schema */
    LS_ERR_NONFINITE = 8,    /* NaN or Inf where a finite number is required */
    LS_ERR_SIGNATURE = 9,    /* signature missing, wrong key or payload changed */
    LS_ERR_UNSUPPORTED = 10, /* valid but not supported by this build */
    LS_ERR_MPI = 11,         /* a collective failed */
    LS_ERR_INTERNAL = 12     /* invariant violated: a bug */
} ls_status;

/* Static, never NULL, for any value (unknown codes give "unknown status"). */
const char *ls_status_str(ls_status s);

#endif
