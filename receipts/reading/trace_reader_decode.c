/* trace_reader_decode.c - the source and decode layers of the trace reader
 * (trace_reader_internal.h): input read from the file or memory into `in`,
 * then copied (plain) or decompressed (zstd, frame by frame, checksums
 * verified) into the text window that trace_reader.c cuts into lines. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/format/digest.h"
#include "receipts/reading/trace_reader_internal.h"

#define WINDOW_LOG_MAX 23 /* zstd frames needing more than 8 MiB of history are refused */

/* ---- source --------------------------------------------------------------- */

/* Moves unread input to the front of `in` and reads more (sets src_eof). */
static void src_read(ls_trace_reader *r) {
    if (r->src_eof || r->stop) return;
    if (r->in_pos > 0) {
        memmove(r->in, r->in + r->in_pos, r->in_len - r->in_pos);
        r->in_base += r->in_pos;
        r->in_len -= r->in_pos;
        r->in_pos = 0;
    }
    size_t room = r->in_cap - r->in_len;
    if (room == 0) return;
    size_t got;
    if (r->fd < 0) {
        got = r->mem_len - r->mem_pos < room ? r->mem_len - r->mem_pos : room;
        if (got) memcpy(r->in + r->in_len, r->mem + r->mem_pos, got);
        r->mem_pos += got;
    } else {
        ssize_t k;
        do k = read(r->fd, r->in + r->in_len, room);
        while (k < 0 && errno == EINTR);
        if (k < 0) {
            diag(r, LS_TRACE_DIAG_IO, NULL, r->rep.last_seq, -1, -1, "%s: read failed at byte %llu: %s",
                 r->rep.path, (unsigned long long)(r->in_base + r->in_len), strerror(errno));
            fatal(r, LS_TRACE_END_FAILED);
            return;
        }
        got = (size_t)k;
    }
    if (got == 0) r->src_eof = true;
    if (got && r->sha && ls_digest_stream_update(r->sha, r->in + r->in_len, got) != LS_OK) r->sha_failed = true;
    r->in_len += got;
    r->rep.file_bytes += got;
}

static bool is_zstd_magic(const unsigned char *p) {
    uint32_t m = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return m == ZSTD_MAGICNUMBER || (m & ZSTD_MAGIC_SKIPPABLE_MASK) == ZSTD_MAGIC_SKIPPABLE_START;
}

void ls_trace_reader_detect(ls_trace_reader *r) {
    while (r->in_len - r->in_pos < 4 && !r->src_eof && !r->stop) src_read(r);
    r->detected = true;
    if (r->in_len - r->in_pos >= 4 && is_zstd_magic(r->in + r->in_pos)) {
        r->rep.compressed = true;
        r->dctx = ZSTD_createDCtx();
        if (r->dctx == NULL ||
            ZSTD_isError(ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_windowLogMax, WINDOW_LOG_MAX))) {
            diag(r, LS_TRACE_DIAG_IO, NULL, -1, -1, -1, "%s: cannot create a zstd context", r->rep.path);
            fatal(r, LS_TRACE_END_FAILED);
        }
    }
    note_memory(r);
}

/* ---- decode: one step of progress into the window ------------------------- */

static void fill_plain(ls_trace_reader *r) {
    if (r->in_pos == r->in_len) src_read(r);
    if (r->in_pos == r->in_len) {
        if (r->src_eof) r->decode_done = true;
        return;
    }
    size_t n = r->in_len - r->in_pos;
    if (n > r->win_cap - r->end) n = r->win_cap - r->end;
    memcpy(r->win + r->end, r->in + r->in_pos, n);
    r->in_pos += n;
    r->end += n;
    r->ver = r->end;
    r->rep.text_bytes += n;
}

/* Moves the window's undelivered text to its front. */
static void win_compact(ls_trace_reader *r) {
    memmove(r->win, r->win + r->start, r->end - r->start);
    r->win_base += r->start;
    r->end -= r->start;
    /* in unverified mode delivered lines may lie past ver */
    r->ver = r->ver > r->start ? r->ver - r->start : 0;
    r->scan -= r->start;
    r->start = 0;
}

/* At a frame boundary: zstd decodes a frame in one pass, straight into the
 * window, when the whole frame is in `in` and its header declares a content
 * size that fits the room left; else it goes through its own buffer (a copy
 * more, and more calls).  Traces of earlier writers are many small frames
 * of known size (one per flush), for which that is most of the decoding
 * time: read on and compact the window first.  Today's frames span flushes
 * and declare no size: this does nothing for them. */
static void prepare_frame(ls_trace_reader *r) {
    size_t avail = r->in_len - r->in_pos;
    size_t fsz = ZSTD_findFrameCompressedSize(r->in + r->in_pos, avail);
    if (ZSTD_isError(fsz) && !r->src_eof && r->in_pos > 0) { /* incomplete here (or corrupt: decoding says) */
        src_read(r);
        if (r->stop) return;
        avail = r->in_len - r->in_pos;
    }
    unsigned long long cs = ZSTD_getFrameContentSize(r->in + r->in_pos, avail);
    if (cs != ZSTD_CONTENTSIZE_UNKNOWN && cs != ZSTD_CONTENTSIZE_ERROR && cs > r->win_cap - r->end && r->start > 0 &&
        cs <= r->win_cap - (r->end - r->start))
        win_compact(r);
}

static void fill_zstd(ls_trace_reader *r) {
    if (!r->in_frame) {
        /* at a frame boundary: want the whole frame header in view */
        if (r->in_len - r->in_pos < 5 && !r->src_eof) src_read(r);
        if (r->stop) return;
        if (r->in_pos == r->in_len && r->src_eof) {
            r->decode_done = true; /* ended at a frame boundary */
            return;
        }
        prepare_frame(r);
        if (r->stop) return;
        r->frame_start = r->in_base + r->in_pos;
        /* RFC 8878 §3.1.1: magic, then the frame header descriptor, whose
         * bit 2 is the content checksum flag */
        const unsigned char *f = r->in + r->in_pos;
        if (!r->warned_checksum && r->in_len - r->in_pos >= 5 && is_zstd_magic(f) &&
            (f[0] & 0xF0) != 0x50 && !(f[4] & 0x04)) {
            loc at = {-1, r->frame_start, r->rep.text_bytes};
            diag(r, LS_TRACE_DIAG_NO_CHECKSUM, &at, r->rep.last_seq, -1, -1,
                 "zstd frame at byte %llu has no content checksum: its content is not verified "
                 "(reported once)",
                 (unsigned long long)r->frame_start);
            r->warned_checksum = true;
        }
    } else if (r->in_pos == r->in_len) {
        src_read(r);
        if (r->stop) return;
    }
    ZSTD_inBuffer zin = {r->in + r->in_pos, r->in_len - r->in_pos, 0};
    ZSTD_outBuffer zout = {r->win + r->end, r->win_cap - r->end, 0};
    size_t ret = ZSTD_decompressStream(r->dctx, &zout, &zin);
    r->in_pos += zin.pos;
    r->end += zout.pos;
    r->rep.text_bytes += zout.pos;
    if (zin.pos > 0) r->in_frame = true;
    note_memory(r);
    if (ZSTD_isError(ret)) {
        uint64_t at_byte = r->in_base + r->in_pos;
        /* text after `keep` is the rejected frame's, not yet delivered */
        size_t keep = r->ver > r->start ? r->ver : r->start;
        loc at = {-1, r->frame_start, r->win_base + r->ver};
        diag(r, LS_TRACE_DIAG_CORRUPT_FRAME, &at, r->rep.last_seq, -1, -1,
             "zstd frame starting at byte %llu is corrupt (%s, detected by byte %llu); "
             "%zu decoded bytes of it are discarded and reading stops",
             (unsigned long long)r->frame_start, ZSTD_getErrorName(ret),
             (unsigned long long)at_byte, r->end - keep);
        r->end = r->ver = keep; /* never deliver the rejected frame's text */
        if (r->scan > keep) r->scan = keep;
        r->unverified = false;
        fatal(r, LS_TRACE_END_CORRUPT);
        return;
    }
    if (ret == 0) { /* frame complete, checksum verified */
        r->in_frame = false;
        r->ver = r->end;
        r->ver_frame_start = r->frame_start;
        r->unverified = false;
        r->rep.frames++;
        return;
    }
    if (zin.pos == 0 && zout.pos == 0 && r->in_pos == r->in_len && r->src_eof) {
        /* input ends inside the frame: a killed writer's open frame, whose
         * flushed blocks decoded but whose checksum never came.  Its complete
         * lines are delivered, flagged unverified (finish() reports it). */
        r->decode_done = true;
        r->rep.truncated_in_frame = true;
        r->trunc_text = r->win_base + r->ver;
        r->unverified = true;
    }
}

void ls_trace_reader_fill(ls_trace_reader *r) {
    if (r->rep.compressed) fill_zstd(r);
    else fill_plain(r);
}

/* Makes room at the window's end: compact, grow, or (window full of one
 * frame's unverified text) deliver that frame unverified. */
void ls_trace_reader_make_space(ls_trace_reader *r) {
    if (r->end < r->win_cap) return;
    if (r->start > 0) {
        win_compact(r);
        return;
    }
    if (r->win_cap < WIN_MAX) {
        char *nw = realloc(r->win, 2 * r->win_cap);
        if (nw == NULL) {
            diag(r, LS_TRACE_DIAG_IO, NULL, r->rep.last_seq, -1, -1, "%s: out of memory", r->rep.path);
            fatal(r, LS_TRACE_END_FAILED);
            return;
        }
        r->win = nw;
        r->win_cap *= 2;
        note_memory(r);
        return;
    }
    if (!r->unverified) {
        r->unverified = true;
        loc at = {-1, r->frame_start, r->win_base + r->ver};
        diag(r, LS_TRACE_DIAG_UNVERIFIED, &at, r->rep.last_seq, -1, -1,
             "zstd frame at byte %llu holds more than %zu bytes: its events are delivered before "
             "its checksum is checked (flagged unverified)",
             (unsigned long long)r->frame_start, (size_t)WIN_MAX - LS_TRACE_MAX_LINE);
    }
}
