/* trace_reader_internal.h - internal to receipts/reading/trace_reader.c and
 * trace_reader_decode.c: the reader's state and the few functions the two
 * share.  Not part of the contract; trace_reader.h is.
 *
 * The reader works in three layers (trace_reader.c says more): source and
 * decode (trace_reader_decode.c) fill the text window; lines and events
 * (trace_reader.c) cut it into lines and check them.  Problems of every layer
 * become diagnostics through diag(). */
#ifndef LS_RECEIPTS_TRACE_READER_INTERNAL_H
#define LS_RECEIPTS_TRACE_READER_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#include "receipts/reading/trace_lex.h"
#include "receipts/reading/trace_reader.h"

#define WIN_INIT ((size_t)64 << 10)
#define WIN_MAX ((size_t)4 << 20)

struct ls_trace_reader {
    ls_trace_report rep;
    size_t diag_cap;                 /* allocated entries of rep.diags */
    /* source */
    int fd;                          /* -1 for memory */
    const unsigned char *mem;
    size_t mem_len, mem_pos;
    bool src_eof;
    bool detected;                   /* magic bytes looked at */
    unsigned char *in;
    size_t in_cap, in_pos, in_len;   /* unread input is in[in_pos, in_len) */
    uint64_t in_base;                /* file offset of in[0] */
    struct ls_digest_stream *sha;    /* SHA-256 of every source byte read (ls_trace_reader_sha256) */
    bool sha_failed;                 /* the digest could not be kept (out of memory) */
    /* zstd */
    ZSTD_DCtx *dctx;
    bool in_frame;                   /* input of the current frame consumed */
    uint64_t frame_start;            /* file offset of the current frame */
    uint64_t ver_frame_start;        /* file offset of the last verified frame */
    bool unverified;                 /* current frame delivered before verification */
    uint64_t trunc_text;             /* text offset of the verified end when the input
                                        ended inside a frame (its rest delivered unverified) */
    bool warned_checksum;
    /* text window */
    char *win;
    size_t win_cap, start, scan, end, ver;
    uint64_t win_base;               /* text offset of win[0] */
    bool discarding;                 /* skipping the rest of an overlong line */
    int64_t line_no;                 /* number of the line starting at `start` */
    bool decode_done;                /* no more text will come */
    ls_trace_end stop;               /* CORRUPT or FAILED once a fatal problem is found */
    /* event state */
    bool header_done;
    int version;                     /* the envelope version events must carry (1 or 2) */
    int64_t expect_seq, prev_seq, prev_ts;
    bool have_prev;
    const cJSON *groups;             /* the header's groups array */
    cJSON *cur;                      /* the delivered event's tree */
    ls_trace_pool pool;              /* nodes of the lines after the header */
    cJSON *pool_tree;                /* the tree built of them, NULL none */
    ls_trace_event evt;
};

typedef struct {
    int64_t line;
    uint64_t byte_offset, text_offset;
} loc;

/* Appends a diagnostic of `code` at `at` (NULL: the end of the input read
 * so far) to the report; counted even when the list is full and the
 * diagnostic itself is dropped.  diag is the printf-style form. */
void ls_trace_reader_vdiag(ls_trace_reader *r, ls_trace_diag_code code, const loc *at, int64_t seq,
                           int64_t expected, int64_t got, const char *fmt, va_list ap)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 0)))
#endif
    ;

static inline void diag(ls_trace_reader *r, ls_trace_diag_code code, const loc *at, int64_t seq,
                        int64_t expected, int64_t got, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;
static inline void diag(ls_trace_reader *r, ls_trace_diag_code code, const loc *at, int64_t seq,
                        int64_t expected, int64_t got, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ls_trace_reader_vdiag(r, code, at, seq, expected, got, fmt, ap);
    va_end(ap);
}

/* Records the buffers' current size in the report's high-water mark. */
static inline void note_memory(ls_trace_reader *r) {
    size_t m = r->win_cap + r->in_cap + r->pool.bytes + (r->dctx ? ZSTD_sizeof_DCtx(r->dctx) : 0) +
               r->diag_cap * sizeof(ls_trace_diag);
    if (m > r->rep.max_buffer_bytes) r->rep.max_buffer_bytes = m;
}

/* Stops reading: the first fatal problem decides how the input ended. */
static inline void fatal(ls_trace_reader *r, ls_trace_end how) {
    if (r->stop == LS_TRACE_END_NONE) r->stop = how;
}

/* trace_reader_decode.c.  detect: looks at the first bytes and sets up zstd
 * for a compressed input.  make_space: room at the window's end (compacts,
 * grows, or delivers one frame's text unverified).  fill: one step of
 * progress of the decode layer into the window (sets decode_done at the
 * end, stop on a fatal problem). */
void ls_trace_reader_detect(ls_trace_reader *r);
void ls_trace_reader_make_space(ls_trace_reader *r);
void ls_trace_reader_fill(ls_trace_reader *r);

#endif
