/* test_trace_reader.c - the reader's report on damaged input: truncation at
 * every byte (plain and zstd), a flipped byte anywhere in a zstd stream,
 * sequence and timestamp faults, malformed lines with their numbers,
 * envelope, field and header faults, overlong lines, frames too large to
 * verify first, frames without checksums, trailing junk, unreadable files,
 * and the bound on stored diagnostics. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>

#include <zstd.h>

#include "receipts/format/digest.h"
#include "tests/support/test_text.h"
#include "tests/receipts/test_trace_util.h"

/* ---- helpers ---------------------------------------------------------------- */

static const char HDR[] =
    "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
    "\"run_id\":\"r\",\"rank\":0,\"world\":2,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,"
    "\"groups\":[{\"name\":\"world\",\"members\":[0,1]}],\"tool\":\"t\"}\n";

/* the text buffer of test_text.h under the names this file uses */
typedef ls_test_text buf;
#define add ls_test_text_add

/* A phase_begin event line for rank 0. */
static void ev(buf *b, long seq, long ts) {
    add(b, "{\"v\":1,\"rank\":0,\"seq\":%ld,\"ts_ns\":%ld,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n",
        seq, ts);
}

static void complete(buf *b, long seq, long events) {
    add(b, "{\"v\":1,\"rank\":0,\"seq\":%ld,\"ts_ns\":999999,\"ev\":\"rank_complete\",\"steps\":1,\"events\":%ld}\n",
        seq, events);
}

/* b as one zstd frame with a content checksum (malloc'd); *zn its length. */
static unsigned char *zframe_checksummed(const buf *b, size_t *zn) {
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    size_t cap = ZSTD_compressBound(b->n);
    unsigned char *z = malloc(cap);
    *zn = ZSTD_compress2(c, z, cap, b->p, b->n);
    cr_assert(!ZSTD_isError(*zn));
    ZSTD_freeCCtx(c);
    return z;
}

/* Diagnostic number i must have this code and line. */
static void expect_diag(const tt_run *run, size_t i, ls_trace_diag_code code, int64_t line) {
    if (i >= run->rep.n_diags || run->rep.diags[i].code != code || run->rep.diags[i].line != line)
        tt_dump(&run->rep);
    cr_assert_lt(i, run->rep.n_diags, "diag %zu missing", i);
    cr_assert_eq(run->rep.diags[i].code, code, "diag %zu: %s, want %s", i,
                 ls_trace_diag_name(run->rep.diags[i].code), ls_trace_diag_name(code));
    cr_assert_eq(run->rep.diags[i].line, line, "diag %zu line %lld, want %lld", i,
                 (long long)run->rep.diags[i].line, (long long)line);
}

static unsigned char *sample(const char *name, size_t *len) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tt_write_sample(path, NULL);
    unsigned char *b = tt_slurp(path, len);
    tt_rmdir(dir);
    return b;
}

/* ---- truncation ------------------------------------------------------------- */

Test(trace_reader, plain_truncated_at_every_byte) {
    size_t len;
    unsigned char *full = sample("events.jsonl", &len);
    tt_run ref;
    tt_read_mem(full, len, &ref);
    cr_assert_eq(ref.n, (size_t)TT_SAMPLE_EVENTS);
    cr_assert_eq(ref.rep.end, LS_TRACE_END_CLEAN);
    size_t header_end = (size_t)((unsigned char *)memchr(full, '\n', len) - full) + 1;
    for (size_t k = 0; k <= len; k++) {
        tt_run run;
        tt_read_mem(full, k, &run);
        /* events whose line (with '\n') lies wholly inside the prefix */
        size_t lines = 0;
        for (size_t i = 0; i < k; i++) lines += full[i] == '\n';
        size_t want = lines > 0 ? lines - 1 : 0;
        bool boundary = k == 0 || full[k - 1] == '\n';
        cr_assert_eq(run.n, want, "cut %zu: %zu events, want %zu", k, run.n, want);
        for (size_t i = 0; i < run.n; i++) cr_assert_str_eq(run.text[i], ref.text[i], "cut %zu", k);
        cr_assert_eq(run.rep.last_seq, (int64_t)want - 1, "cut %zu", k);
        if (k == len) {
            cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
            cr_assert_eq(tt_errors(&run.rep), 0u);
        } else if (boundary) {
            cr_assert_eq(run.rep.end, LS_TRACE_END_INCOMPLETE, "cut %zu: %s", k, ls_trace_end_name(run.rep.end));
            cr_assert_not_null(tt_find(&run.rep, LS_TRACE_DIAG_INCOMPLETE));
        } else {
            cr_assert_eq(run.rep.end, LS_TRACE_END_TRUNCATED, "cut %zu: %s", k, ls_trace_end_name(run.rep.end));
            const ls_trace_diag *d = tt_find(&run.rep, LS_TRACE_DIAG_TRUNCATED);
            cr_assert_not_null(d, "cut %zu", k);
            cr_assert_eq(d->seq, (int64_t)want - 1, "truncation names the last good seq");
            cr_assert_eq(d->line, (int64_t)lines + 1, "truncation names the cut line");
            cr_assert(!run.rep.truncated_in_frame);
        }
        cr_assert_eq(run.rep.header_ok, k >= header_end, "cut %zu", k);
        if (k < header_end) cr_assert_not_null(tt_find(&run.rep, LS_TRACE_DIAG_HEADER), "cut %zu", k);
        cr_assert_eq(ls_trace_report_status(&run.rep) == LS_OK, k == len, "cut %zu", k);
        tt_run_free(&run);
    }
    tt_run_free(&ref);
    free(full);
}

/* Complete lines in what zstd's own streaming decoder makes of the first k
 * bytes (every block that is whole): the reader's expectation, worked out
 * without the reader. */
static size_t zstd_prefix_lines(const unsigned char *z, size_t k) {
    ZSTD_DStream *d = ZSTD_createDStream();
    cr_assert_not_null(d);
    char *out = malloc(1 << 20);
    ZSTD_inBuffer in = {z, k, 0};
    size_t lines = 0;
    for (;;) {
        ZSTD_outBuffer o = {out, 1 << 20, 0};
        size_t r = ZSTD_decompressStream(d, &o, &in);
        cr_assert(!ZSTD_isError(r), "prefix %zu: %s", k, ZSTD_getErrorName(r));
        for (size_t i = 0; i < o.pos; i++) lines += out[i] == '\n';
        if (o.pos == 0 && (in.pos == in.size || r == 0)) break;
    }
    free(out);
    ZSTD_freeDStream(d);
    return lines;
}

/* Cut at every byte: events of complete frames are delivered verified; the
 * complete lines of the frame the input ends inside (a killed writer's open
 * frame: its flushed blocks decode) are delivered too, flagged unverified,
 * and the end is TRUNCATED, naming that frame. */
Test(trace_reader, zstd_truncated_at_every_byte) {
    size_t len;
    unsigned char *full = sample("events.jsonl.zst", &len);
    tt_run ref;
    tt_read_mem(full, len, &ref);
    cr_assert_eq(ref.n, (size_t)TT_SAMPLE_EVENTS);
    cr_assert_eq(ref.rep.end, LS_TRACE_END_CLEAN);
    /* frame boundaries and the number of events complete at each */
    size_t bound[64], events_at[64], nb = 0, off = 0, lines = 0;
    char *text = malloc(1 << 20);
    while (off < len) {
        size_t fs = ZSTD_findFrameCompressedSize(full + off, len - off);
        cr_assert(!ZSTD_isError(fs));
        size_t tn = ZSTD_decompress(text, 1 << 20, full + off, fs);
        cr_assert(!ZSTD_isError(tn));
        for (size_t i = 0; i < tn; i++) lines += text[i] == '\n';
        off += fs;
        bound[nb] = off;
        events_at[nb++] = lines - 1;
    }
    free(text);
    cr_assert_eq(nb, 2u, "the error and rank_complete end frames");
    size_t partial_cuts = 0; /* cuts that deliver events of an open frame */
    for (size_t k = 0; k <= len; k++) {
        tt_run run;
        tt_read_mem(full, k, &run);
        size_t verified = 0, f = 0;
        bool boundary = k == 0;
        for (f = 0; f < nb && bound[f] <= k; f++) {
            verified = events_at[f];
            boundary = bound[f] == k;
        }
        size_t pl = k >= 4 ? zstd_prefix_lines(full, k) : 0;
        size_t want = pl > 0 ? pl - 1 : 0;
        cr_assert_geq(want, verified);
        cr_assert_eq(run.n, want, "cut %zu: %zu events, want %zu", k, run.n, want);
        for (size_t i = 0; i < run.n; i++) {
            cr_assert_str_eq(run.text[i], ref.text[i]);
            cr_assert_eq((run.flags[i] & LS_TRACE_EVF_UNVERIFIED) != 0, i >= verified,
                         "cut %zu: event %zu %s", k, i, i >= verified ? "unverified" : "verified");
        }
        partial_cuts += want > verified;
        cr_assert_eq(run.rep.last_seq, (int64_t)want - 1);
        if (k == len) {
            cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
        } else if (boundary) {
            cr_assert_eq(run.rep.end, LS_TRACE_END_INCOMPLETE, "cut %zu: %s", k, ls_trace_end_name(run.rep.end));
        } else {
            cr_assert_eq(run.rep.end, LS_TRACE_END_TRUNCATED, "cut %zu: %s", k, ls_trace_end_name(run.rep.end));
            const ls_trace_diag *d = tt_find(&run.rep, LS_TRACE_DIAG_TRUNCATED);
            cr_assert_not_null(d);
            cr_assert_eq(d->seq, (int64_t)want - 1);
            if (k >= 4) { /* shorter prefixes lack the magic and read as plain */
                cr_assert(run.rep.compressed);
                cr_assert(run.rep.truncated_in_frame, "cut %zu", k);
                cr_assert_eq(d->byte_offset, f ? bound[f - 1] : 0, "names the cut frame's start");
                cr_assert_not_null(strstr(d->message, "delivered unverified"), "%s", d->message);
            }
        }
        cr_assert_eq(ls_trace_report_status(&run.rep) == LS_OK, k == len);
        tt_run_free(&run);
    }
    cr_assert_gt(partial_cuts, len / 4, "most cuts fall inside a frame after some flush: %zu of %zu",
                 partial_cuts, len);
    tt_run_free(&ref);
    free(full);
}

/* ---- corruption ------------------------------------------------------------- */

/* Every byte of a zstd trace flipped in turn (three bit patterns): the
 * reader delivers only events identical to the original ones, in order,
 * and whenever it delivers fewer it says something is wrong. */
Test(trace_reader, zstd_flipped_byte_never_accepted) {
    size_t len;
    unsigned char *full = sample("events.jsonl.zst", &len);
    tt_run ref;
    tt_read_mem(full, len, &ref);
    unsigned char *bad = malloc(len);
    static const unsigned char MASKS[] = {0x01, 0x80, 0xFF};
    size_t corrupt = 0, other = 0;
    for (size_t p = 0; p < len; p++)
        for (size_t m = 0; m < 3; m++) {
            memcpy(bad, full, len);
            bad[p] ^= MASKS[m];
            tt_run run;
            tt_read_mem(bad, len, &run);
            for (size_t i = 0; i < run.n; i++)
                cr_assert(i < ref.n && strcmp(run.text[i], ref.text[i]) == 0,
                          "byte %zu ^ %#x: altered event %zu accepted: %s", p, MASKS[m], i, run.text[i]);
            if (run.n < ref.n)
                cr_assert_neq(ls_trace_report_status(&run.rep), LS_OK, "byte %zu ^ %#x: silent loss", p,
                              MASKS[m]);
            if (run.rep.end == LS_TRACE_END_CORRUPT) corrupt++;
            else if (ls_trace_report_status(&run.rep) != LS_OK) other++;
            tt_run_free(&run);
        }
    cr_assert_gt(corrupt, len, "most flips are corrupt frames (%zu of %zu)", corrupt, 3 * len);
    free(bad);
    tt_run_free(&ref);
    free(full);
}

/* Plain text has no checksum, but damage must never crash the reader or make
 * it deliver more events than lines. */
Test(trace_reader, plain_flipped_byte_no_crash) {
    size_t len;
    unsigned char *full = sample("events.jsonl", &len);
    unsigned char *bad = malloc(len);
    for (size_t p = 0; p < len; p++) {
        memcpy(bad, full, len);
        bad[p] ^= 0xFF;
        tt_run run;
        tt_read_mem(bad, len, &run);
        cr_assert_leq(run.n, (size_t)TT_SAMPLE_EVENTS + 1);
        tt_run_free(&run);
    }
    free(bad);
    free(full);
}

Test(trace_reader, junk_after_frames_is_corrupt) {
    size_t len;
    unsigned char *full = sample("events.jsonl.zst", &len);
    unsigned char *b = malloc(len + 16);
    memcpy(b, full, len);
    memcpy(b + len, "garbage\n\0\0\0\0\0\0\0\0", 16);
    tt_run run;
    tt_read_mem(b, len + 16, &run);
    cr_assert_eq(run.n, (size_t)TT_SAMPLE_EVENTS);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CORRUPT);
    const ls_trace_diag *d = tt_find(&run.rep, LS_TRACE_DIAG_CORRUPT_FRAME);
    cr_assert_not_null(d);
    cr_assert_eq(d->byte_offset, len, "names where the bad frame starts");
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_ERR_CORRUPT);
    tt_run_free(&run);
    /* a skippable frame between frames is fine */
    unsigned char skip[12] = {0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 'a', 'b', 'c', 'd'};
    memcpy(b, skip, 12);
    memcpy(b + 12, full, len);
    tt_read_mem(b, len + 12, &run);
    cr_assert_eq(run.n, (size_t)TT_SAMPLE_EVENTS);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
    tt_run_free(&run);
    free(b);
    free(full);
}

Test(trace_reader, frame_without_checksum_warned) {
    size_t len;
    unsigned char *text = sample("events.jsonl", &len);
    size_t cap = ZSTD_compressBound(len);
    unsigned char *z = malloc(cap);
    size_t zn = ZSTD_compress(z, cap, text, len, 3); /* no checksum by default */
    cr_assert(!ZSTD_isError(zn));
    tt_run run;
    tt_read_mem(z, zn, &run);
    cr_assert_eq(run.n, (size_t)TT_SAMPLE_EVENTS);
    cr_assert_eq(run.rep.counts[LS_TRACE_DIAG_NO_CHECKSUM], 1u);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_OK, "a warning only");
    tt_run_free(&run);
    free(z);
    free(text);
}

/* One frame bigger than the reader can hold until its checksum: events are
 * delivered early but flagged, and a corruption found later is reported. */
Test(trace_reader, huge_frame_unverified_then_corrupt) {
    buf b = {0};
    add(&b, "%s", HDR);
    long n = 0;
    while (b.n < ((size_t)5 << 20)) ev(&b, n, n), n++;
    complete(&b, n, n);
    size_t zn;
    unsigned char *z = zframe_checksummed(&b, &zn);
    tt_run run;
    tt_read_mem(z, zn, &run);
    cr_assert_eq((long)run.n, n + 1);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
    cr_assert_eq(run.rep.counts[LS_TRACE_DIAG_UNVERIFIED], 1u);
    cr_assert(run.flags[0] & LS_TRACE_EVF_UNVERIFIED);
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_OK);
    cr_assert_leq(run.rep.max_buffer_bytes, (size_t)16 << 20);
    tt_run_free(&run);
    /* damage the checksum: everything delivered was flagged, then CORRUPT */
    z[zn - 1] ^= 0x55;
    tt_read_mem(z, zn, &run);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CORRUPT);
    cr_assert_not_null(tt_find(&run.rep, LS_TRACE_DIAG_CORRUPT_FRAME));
    if (tt_errors(&run.rep) != 1) tt_dump(&run.rep);
    cr_assert_eq(tt_errors(&run.rep), 1u, "only the corrupt frame");
    for (size_t i = 0; i < run.n; i++) cr_assert(run.flags[i] & LS_TRACE_EVF_UNVERIFIED, "event %zu", i);
    cr_assert_lt((long)run.n, n + 1, "the frame's verified tail is withheld");
    tt_run_free(&run);
    free(z);
    free(b.p);
}

/* The writer's largest frames (flush and frame thresholds at their 2 MiB
 * maximum together, events near the line cap) are still verified before
 * any event is delivered. */
Test(trace_reader, writer_frames_always_verified_first) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/events.jsonl.zst", dir);
    ls_trace_header h = tt_header();
    ls_trace_writer_opts o = {1, (size_t)1 << 20, (size_t)1 << 20};
    ls_trace_writer *w;
    cr_assert_eq(ls_trace_writer_open_opts(&w, path, &h, &o), LS_OK);
    size_t big = LS_TRACE_MAX_LINE - 200;
    char *blob = malloc(big + 1);
    memset(blob, 'b', big);
    blob[big] = 0;
    for (int i = 0; i < 12; i++) {
        cJSON *f = cJSON_CreateObject();
        blob[i] = 'a'; /* vary the lines a little */
        cJSON_AddStringToObject(f, "blob", i % 3 == 2 ? "small" : blob);
        cr_assert_eq(ls_trace_emit_json(w, "bulk", f), LS_OK, "%s", ls_trace_writer_last_error(w));
        cJSON_Delete(f);
    }
    free(blob);
    cr_assert_eq(ls_trace_emit_rank_complete(w, 0), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    ls_trace_report rep;
    cr_assert_eq(ls_trace_read_file(path, NULL, NULL, &rep), LS_OK);
    cr_assert_eq(rep.n_events, 13);
    cr_assert_eq(rep.counts[LS_TRACE_DIAG_UNVERIFIED], 0u);
    cr_assert_geq(rep.frames, 4u, "frames of up to 3 MiB: %llu", (unsigned long long)rep.frames);
    ls_trace_report_free(&rep);
    tt_rmdir(dir);
}

/* Flips inside a frame too big to verify first: whatever was delivered
 * before zstd noticed is flagged unverified, and the end is CORRUPT. */
Test(trace_reader, huge_frame_flipped_inside) {
    buf b = {0};
    add(&b, "%s", HDR);
    long n = 0;
    while (b.n < ((size_t)6 << 20)) ev(&b, n, n), n++;
    size_t zn;
    unsigned char *z = zframe_checksummed(&b, &zn);
    tt_run ref;
    tt_read_mem(z, zn, &ref);
    cr_assert_eq((long)ref.n, n);
    for (int k = 1; k < 16; k++) {
        size_t pos = zn * (size_t)k / 16;
        z[pos] ^= 0x20;
        tt_run run;
        tt_read_mem(z, zn, &run);
        z[pos] ^= 0x20;
        cr_assert_eq(run.rep.end, LS_TRACE_END_CORRUPT, "flip at %zu: %s", pos, ls_trace_end_name(run.rep.end));
        for (size_t i = 0; i < run.n; i++)
            if (i >= ref.n || strcmp(run.text[i], ref.text[i]) != 0)
                cr_assert(run.flags[i] & LS_TRACE_EVF_UNVERIFIED, "flip at %zu: altered event %zu not flagged", pos, i);
        cr_assert_eq(run.rep.counts[LS_TRACE_DIAG_OVERLONG_LINE], 0u, "flip at %zu", pos);
        tt_run_free(&run);
    }
    tt_run_free(&ref);
    free(z);
    free(b.p);
}

/* ---- sequence, time, envelope ------------------------------------------------ */

Test(trace_reader, seq_duplicate_gap_and_order) {
    buf b = {0};
    add(&b, "%s", HDR);
    ev(&b, 0, 10);
    ev(&b, 1, 20);
    ev(&b, 1, 30); /* line 4: duplicate */
    ev(&b, 3, 40); /* line 5: gap (2 missing) */
    ev(&b, 2, 50); /* line 6: out of order */
    ev(&b, 4, 60);
    complete(&b, 5, 6);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.n, 7u, "problem events are delivered, flagged");
    expect_diag(&run, 0, LS_TRACE_DIAG_SEQ_DUPLICATE, 4);
    cr_assert_eq(run.rep.diags[0].expected, 2);
    cr_assert_eq(run.rep.diags[0].got, 1);
    expect_diag(&run, 1, LS_TRACE_DIAG_SEQ_GAP, 5);
    cr_assert_eq(run.rep.diags[1].expected, 2);
    cr_assert_eq(run.rep.diags[1].got, 3);
    expect_diag(&run, 2, LS_TRACE_DIAG_SEQ_ORDER, 6);
    cr_assert_eq(run.rep.diags[2].expected, 4);
    cr_assert_eq(run.rep.diags[2].got, 2);
    cr_assert_eq(run.rep.n_diags, 3u);
    unsigned want[7] = {0, 0, LS_TRACE_EVF_SEQ, LS_TRACE_EVF_SEQ, LS_TRACE_EVF_SEQ, 0, 0};
    for (int i = 0; i < 7; i++) cr_assert_eq(run.flags[i], want[i], "event %d", i);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_ERR_FORMAT);
    tt_run_free(&run);
    free(b.p);
}

Test(trace_reader, ts_backwards_and_rank_mismatch) {
    buf b = {0};
    add(&b, "%s", HDR);
    ev(&b, 0, 100);
    ev(&b, 1, 50); /* line 3 */
    add(&b, "{\"v\":1,\"rank\":1,\"seq\":2,\"ts_ns\":60,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n");
    complete(&b, 3, 3);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.n, 4u);
    expect_diag(&run, 0, LS_TRACE_DIAG_TS_BACKWARDS, 3);
    cr_assert_eq(run.rep.diags[0].expected, 100);
    cr_assert_eq(run.rep.diags[0].got, 50);
    expect_diag(&run, 1, LS_TRACE_DIAG_RANK_MISMATCH, 4);
    cr_assert_eq(run.flags[1], LS_TRACE_EVF_TS);
    cr_assert_eq(run.flags[2], LS_TRACE_EVF_RANK);
    tt_run_free(&run);
    free(b.p);
}

Test(trace_reader, malformed_lines_numbered_and_skipped) {
    static const char *const BAD[] = {
        "garbage",
        "{\"v\":1",
        "[1,2]",
        "",
        "{\"a\":1} x",
        "{\"a\":+1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":NaN}",
        "{\"a\":Infinity}",
        "{\"a\":tru}",
        "{\"a\":\"\x01\"}",
        "{\"a\":\"\xff\"}",
        "{\"a\":\"\\u12G4\"}",
        "{\"a\":\"\\q\"}",
        "{\"a\":1,\"a\":2}",
        "{\"a\":{\"b\":1,\"b\":1}}",
        "{\"a\":1}\x00",
        "{'a':1}",
    };
    const size_t nbad = sizeof BAD / sizeof BAD[0];
    buf b = {0};
    add(&b, "%s", HDR);
    ev(&b, 0, 1);
    for (size_t i = 0; i < nbad; i++) {
        if (i == 18) { /* embedded NUL: add by hand */
            add(&b, "{\"a\":1}");
            b.p[b.n++] = '\0';
            add(&b, "\n");
        } else {
            add(&b, "%s\n", BAD[i]);
        }
    }
    ev(&b, 1, 2);
    complete(&b, 2, 2);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.n, 3u);
    for (size_t i = 0; i < nbad; i++) expect_diag(&run, i, LS_TRACE_DIAG_MALFORMED_LINE, (int64_t)(3 + i));
    cr_assert_eq(run.rep.n_diags, nbad, "no seq gap: malformed lines consume no seq");
    cr_assert_eq(run.seq[1], 1);
    cr_assert_eq(run.rep.n_lines, (int64_t)(4 + nbad));
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_ERR_FORMAT);
    tt_run_free(&run);
    free(b.p);
}

Test(trace_reader, envelope_faults) {
    buf b = {0};
    add(&b, "%s", HDR);
    ev(&b, 0, 1);
    add(&b, "{\"v\":1,\"rank\":0,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n"); /* 3 */
    add(&b, "{\"v\":1,\"rank\":0,\"seq\":\"1\",\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n");
    add(&b, "{\"v\":2,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n");
    add(&b, "{\"v\":1,\"rank\":-1,\"seq\":1,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n");
    add(&b, "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2.5,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n");
    add(&b, "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":5}\n");
    add(&b, "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":\"Bad Kind\"}\n");
    add(&b, "{\"v\":1,\"rank\":0,\"seq\":1e400,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n");
    add(&b, "{\"v\":1,\"rank\":0,\"seq\":9007199254740993,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n"); /* 11 */
    add(&b, "{\"rank\":0,\"v\":1,\"seq\":1,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n"); /* 12: key order */
    complete(&b, 2, 2);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.n, 3u);
    for (int i = 0; i < 9; i++) expect_diag(&run, (size_t)i, LS_TRACE_DIAG_ENVELOPE, 3 + i);
    expect_diag(&run, 9, LS_TRACE_DIAG_KEY_ORDER, 12);
    cr_assert_eq(run.flags[1], LS_TRACE_EVF_KEY_ORDER);
    cr_assert_eq(run.rep.n_diags, 10u);
    tt_run_free(&run);
    free(b.p);
}

Test(trace_reader, field_faults_unknown_kind_after_complete_count) {
    buf b = {0};
    add(&b, "%s", HDR);
    long s = 0;
#define EV(fields) add(&b, "{\"v\":1,\"rank\":0,\"seq\":%ld,\"ts_ns\":%ld,\"ev\":" fields "}\n", s, s), s++
    EV("\"layer_end\",\"phase\":\"replay\",\"step\":0,\"member\":0,\"layer\":0,\"kind\":\"gdn\",\"dir\":\"fwd\","
       "\"tokens\":1,\"live_bytes\":1,\"peak_bytes\":1,\"wall_ns\":1");                       /* 2: no out_norm */
    EV("\"layer_end\",\"phase\":\"replay\",\"step\":0,\"member\":0,\"layer\":0,\"kind\":\"xyz\",\"dir\":\"fwd\","
       "\"tokens\":1,\"live_bytes\":1,\"peak_bytes\":1,\"wall_ns\":1,\"out_norm\":1");          /* 3: bad enum */
    EV("\"phase_begin\",\"phase\":\"replay\",\"step\":0,\"extra\":1");                         /* 4: extra */
    EV("\"collective\",\"group\":\"nope\",\"gseq\":0,\"op\":\"allreduce\",\"red\":\"sum\",\"count\":1,"
       "\"dtype\":\"f32\",\"bytes\":4,\"purpose\":\"dkv_reduce\"");                             /* 5: group */
    EV("\"memory\",\"step\":0,\"phase\":\"replay\",\"categories\":{\"a\":{\"live\":1}},\"total_live\":1,"
       "\"total_peak\":1,\"rss_peak\":1");                                                     /* 6: category */
    EV("\"phase_begin\",\"phase\":\"replay\",\"step\":1e400");                                  /* 7: inf */
    EV("\"param_digest\",\"step\":0,\"target\":\"w\",\"sha256\":\"ABC\"");                     /* 8: hex */
    EV("\"my_extension\",\"anything\":[1,2]");                                                 /* 9: unknown */
    EV("\"rank_complete\",\"steps\":1,\"events\":5");                                          /* 10: count */
    EV("\"phase_begin\",\"phase\":\"replay\",\"step\":0");                                     /* 11: after */
#undef EV
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.n, 10u, "field faults are delivered, flagged");
    for (int i = 0; i < 7; i++) {
        expect_diag(&run, (size_t)i, LS_TRACE_DIAG_FIELD, 2 + i);
        cr_assert_eq(run.flags[i], LS_TRACE_EVF_FIELDS);
    }
    cr_assert_not_null(strstr(run.rep.diags[0].message, "out_norm"), "%s", run.rep.diags[0].message);
    cr_assert_not_null(strstr(run.rep.diags[3].message, "nope"));
    expect_diag(&run, 7, LS_TRACE_DIAG_UNKNOWN_KIND, 9);
    cr_assert_eq(run.flags[7], LS_TRACE_EVF_UNKNOWN_KIND);
    expect_diag(&run, 8, LS_TRACE_DIAG_COUNT_MISMATCH, 10);
    cr_assert_eq(run.rep.diags[8].expected, 8);
    cr_assert_eq(run.rep.diags[8].got, 5);
    expect_diag(&run, 9, LS_TRACE_DIAG_AFTER_COMPLETE, 11);
    cr_assert_eq(run.flags[9], LS_TRACE_EVF_AFTER_COMPLETE);
    cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
    tt_run_free(&run);
    free(b.p);
}

/* ---- header ----------------------------------------------------------------- */

Test(trace_reader, header_faults) {
    tt_run run;
    tt_read_mem("", 0, &run);
    cr_assert_not_null(tt_find(&run.rep, LS_TRACE_DIAG_HEADER));
    cr_assert_eq(run.rep.end, LS_TRACE_END_INCOMPLETE);
    cr_assert(!run.rep.header_ok);
    tt_run_free(&run);

    /* line 1 is an event: header missing, the event still read */
    buf b = {0};
    ev(&b, 0, 1);
    complete(&b, 1, 1);
    tt_read_mem(b.p, b.n, &run);
    expect_diag(&run, 0, LS_TRACE_DIAG_HEADER, 1);
    cr_assert_eq(run.n, 2u);
    cr_assert_eq(run.rep.rank, -1);
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_ERR_FORMAT);
    tt_run_free(&run);
    free(b.p);

    static const char *const BAD_HDR[] = {
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:x\",\"run_id\":\"r\",\"rank\":0,\"world\":2,"
        "\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,\"groups\":[],\"tool\":\"t\"}",
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"run_id\":\"r\",\"rank\":2,\"world\":2,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,\"groups\":[],\"tool\":\"t\"}",
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"run_id\":\"r\",\"rank\":0,\"world\":2,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,"
        "\"groups\":[{\"name\":\"g\",\"members\":[0,5]}],\"tool\":\"t\"}",
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"run_id\":\"r\",\"rank\":0,\"world\":2,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,\"groups\":[],"
        "\"tool\":\"t\",\"extra\":1}",
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"rank\":0,\"world\":2,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,\"groups\":[],\"tool\":\"t\"}",
        "not json at all",
    };
    for (size_t i = 0; i < sizeof BAD_HDR / sizeof BAD_HDR[0]; i++) {
        buf h = {0};
        add(&h, "%s\n", BAD_HDR[i]);
        ev(&h, 0, 1);
        complete(&h, 1, 1);
        tt_read_mem(h.p, h.n, &run);
        cr_assert(!run.rep.header_ok, "header %zu", i);
        expect_diag(&run, 0, LS_TRACE_DIAG_HEADER, 1);
        cr_assert_eq(run.n, 2u, "events after a bad header are still read");
        cr_assert_eq(ls_trace_report_status(&run.rep), LS_ERR_FORMAT);
        tt_run_free(&run);
        free(h.p);
    }
}

/* ---- line length ------------------------------------------------------------- */

/* A line of exactly LS_TRACE_MAX_LINE bytes (with '\n') is read; one byte
 * more is reported overlong and skipped, and reading goes on. */
Test(trace_reader, overlong_line_boundary) {
    for (int extra = 0; extra <= 1; extra++) {
        buf b = {0};
        add(&b, "%s", HDR);
        ev(&b, 0, 1);
        size_t start = b.n;
        add(&b, "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":\"pad\",\"x\":\"");
        size_t body = LS_TRACE_MAX_LINE - (b.n - start) - 3 + (size_t)extra;
        char *pad = malloc(body + 1);
        memset(pad, 'y', body);
        pad[body] = 0;
        add(&b, "%s\"}\n", pad);
        free(pad);
        cr_assert_eq(b.n - start, LS_TRACE_MAX_LINE + (size_t)extra);
        ev(&b, extra ? 1 : 2, 3);
        complete(&b, extra ? 2 : 3, extra ? 2 : 3);
        tt_run run;
        tt_read_mem(b.p, b.n, &run);
        if (extra == 0) {
            cr_assert_eq(run.n, 4u);
            cr_assert_eq(tt_errors(&run.rep), 0u);
        } else {
            cr_assert_eq(run.n, 3u);
            expect_diag(&run, 0, LS_TRACE_DIAG_OVERLONG_LINE, 3);
            cr_assert_eq(run.rep.n_diags, 1u);
            cr_assert_eq(run.rep.diags[0].text_offset, start);
        }
        cr_assert_eq(run.rep.end, LS_TRACE_END_CLEAN);
        tt_run_free(&run);
        free(b.p);
    }
}

Test(trace_reader, overlong_header_line) {
    buf b = {0};
    char *pad = malloc((size_t)2 << 20);
    memset(pad, 'h', ((size_t)2 << 20) - 1);
    pad[((size_t)2 << 20) - 1] = 0;
    add(&b, "%s\n", pad);
    free(pad);
    ev(&b, 0, 1);
    complete(&b, 1, 1);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    expect_diag(&run, 0, LS_TRACE_DIAG_OVERLONG_LINE, 1);
    expect_diag(&run, 1, LS_TRACE_DIAG_HEADER, 1);
    cr_assert_eq(run.rep.n_diags, 2u, "line 2 is read as an event, not as a header");
    cr_assert_eq(run.n, 2u);
    cr_assert(!run.rep.header_ok);
    tt_run_free(&run);
    free(b.p);
}

Test(trace_reader, overlong_unterminated_tail_is_truncation) {
    buf b = {0};
    add(&b, "%s", HDR);
    ev(&b, 0, 1);
    char *pad = malloc(3 << 20);
    memset(pad, 'z', (3 << 20) - 1);
    pad[(3 << 20) - 1] = 0;
    add(&b, "%s", pad);
    free(pad);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.n, 1u);
    expect_diag(&run, 0, LS_TRACE_DIAG_OVERLONG_LINE, 3);
    expect_diag(&run, 1, LS_TRACE_DIAG_TRUNCATED, 3);
    cr_assert_eq(run.rep.end, LS_TRACE_END_TRUNCATED);
    tt_run_free(&run);
    free(b.p);
}

/* ---- files, callbacks, limits -------------------------------------------------- */

Test(trace_reader, unreadable_files_reported) {
    ls_trace_report rep;
    cr_assert_eq(ls_trace_read_file("/nonexistent/dir/events.jsonl", NULL, NULL, &rep), LS_ERR_IO);
    cr_assert_eq(rep.end, LS_TRACE_END_FAILED);
    const ls_trace_diag *d = tt_find(&rep, LS_TRACE_DIAG_IO);
    cr_assert_not_null(d);
    cr_assert_not_null(strstr(d->message, "/nonexistent/dir/events.jsonl"));
    ls_trace_report_free(&rep);
    cr_assert_eq(ls_trace_read_file("/tmp", NULL, NULL, &rep), LS_ERR_IO, "a directory");
    cr_assert_eq(rep.end, LS_TRACE_END_FAILED);
    ls_trace_report_free(&rep);
    cr_assert_eq(ls_trace_read_file(NULL, NULL, NULL, &rep), LS_ERR_ARG);
    cr_assert_eq(ls_trace_read_file("/tmp", NULL, NULL, NULL), LS_ERR_ARG);
    const ls_trace_event *ev;
    cr_assert_eq(ls_trace_reader_next(NULL, &ev), LS_ERR_ARG);
    ls_trace_reader_close(NULL);
    ls_trace_report_free(NULL);
}

static int stop_at_3(const ls_trace_event *ev, void *user) {
    (*(int *)user)++;
    return ev->seq == 3;
}

Test(trace_reader, callback_stops_early) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/events.jsonl.zst", dir);
    tt_write_sample(path, NULL);
    int calls = 0;
    ls_trace_report rep;
    cr_assert_eq(ls_trace_read_file(path, stop_at_3, &calls, &rep), LS_OK);
    cr_assert_eq(calls, 4);
    cr_assert_eq(rep.end, LS_TRACE_END_STOPPED);
    cr_assert_eq(rep.last_seq, 3);
    ls_trace_report_free(&rep);
    tt_rmdir(dir);
}

Test(trace_reader, stored_diagnostics_bounded) {
    buf b = {0};
    add(&b, "%s", HDR);
    for (int i = 0; i < 3000; i++) add(&b, "bad line %d\n", i);
    tt_run run;
    tt_read_mem(b.p, b.n, &run);
    cr_assert_eq(run.rep.n_diags, (size_t)LS_TRACE_MAX_DIAGS);
    cr_assert_eq(run.rep.counts[LS_TRACE_DIAG_MALFORMED_LINE], 3000u);
    cr_assert_eq(run.rep.n_diags_dropped, 3000u + 1 - LS_TRACE_MAX_DIAGS, "INCOMPLETE counted too");
    cr_assert_eq(run.rep.counts[LS_TRACE_DIAG_INCOMPLETE], 1u);
    expect_diag(&run, 999, LS_TRACE_DIAG_MALFORMED_LINE, 1001);
    tt_run_free(&run);
    free(b.p);
}

/* ---- one read: the digest of the bytes read ------------------------------------ */

static int stop_after_one(const ls_trace_event *ev, void *user) {
    (void)ev;
    return ++*(int *)user >= 1;
}

/* ls_trace_reader_sha256 / ls_trace_read_fd_sha256: the SHA-256 of every byte
 * of the file, whether the reader read to the end or stopped after one event
 * (the rest read without decoding), from a descriptor and from memory. */
Test(trace_reader, sha256_of_every_byte) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/events.jsonl.zst", dir);
    tt_write_sample(path, NULL);
    size_t len;
    unsigned char *bytes = tt_slurp(path, &len);
    uint8_t want[32], got[32];
    cr_assert_eq(ls_digest_sha256(bytes, len, want), LS_OK);
    for (int stop = 0; stop < 2; stop++) {
        int fd = open(path, O_RDONLY);
        cr_assert_geq(fd, 0);
        ls_trace_report rep = {0};
        ls_status st = LS_ERR_IO;
        uint64_t n = 0;
        int seen = 0;
        ls_trace_read_fd_sha256(fd, "t", stop ? stop_after_one : NULL, &seen, &rep, got, &n, &st);
        cr_assert_eq(st, LS_OK);
        cr_assert_eq(n, len, "stop %d: %llu bytes digested of %zu", stop, (unsigned long long)n, len);
        cr_assert_eq(memcmp(got, want, 32), 0, "stop %d: the digest is not the file's", stop);
        ls_trace_report_free(&rep);
    }
    ls_trace_reader *r = NULL;
    cr_assert_eq(ls_trace_reader_open_mem(&r, bytes, len, "m"), LS_OK);
    const ls_trace_event *e = NULL;
    ls_trace_reader_next(r, &e);
    cr_assert_eq(ls_trace_reader_sha256(r, got, NULL), LS_OK);
    cr_assert_eq(memcmp(got, want, 32), 0, "memory: the digest is not the bytes'");
    ls_trace_reader_next(r, &e);
    cr_assert_null(e, "an event after the digest was taken");
    ls_trace_reader_close(r);
    bytes[len / 2] ^= 1; /* one bit: another digest */
    cr_assert_eq(ls_trace_reader_open_mem(&r, bytes, len, "m"), LS_OK);
    cr_assert_eq(ls_trace_reader_sha256(r, got, NULL), LS_OK);
    cr_assert_neq(memcmp(got, want, 32), 0);
    ls_trace_reader_close(r);
    free(bytes);
    tt_rmdir(dir);
}
