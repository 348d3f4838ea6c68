/* fuzz_trace_reader.c - libFuzzer target for the trace reader.
 *
 * Each input is read as given (the reader picks plain or zstd by the magic
 * bytes) and then one more way, chosen by its size modulo 4 (so that one
 * execution costs two reads, not four): sizes 0 mod 4 compressed into one
 * checksummed zstd frame of known size (so the line parser is reached
 * through the decompressor), 2 mod 4 as trace_writer writes (a block
 * flushed at every line, no content size; the frame ended for 2 mod 8 and
 * left open, as a killed writer leaves it, for 6 mod 8), odd sizes behind a
 * zstd magic number (so arbitrary bytes reach the frame decoder).  Besides
 * "no crash, no leak, no undefined behaviour" (ASan/UBSan), the report must
 * be self-consistent; any violation aborts. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "receipts/reading/trace_reader.h"

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

/* never_clean: the input is known not to end cleanly (an open frame). */
static void read_all(const uint8_t *data, size_t size, bool never_clean) {
    ls_trace_reader *r = NULL;
    CHECK(ls_trace_reader_open_mem(&r, data, size, "fuzz") == LS_OK);
    const ls_trace_event *ev;
    int64_t delivered = 0, last = -1;
    for (;;) {
        CHECK(ls_trace_reader_next(r, &ev) == LS_OK);
        if (ev == NULL) break;
        CHECK(ev->json != NULL && ev->ev != NULL && ev->seq >= 0 && ev->ts_ns >= 0 && ev->line >= 1);
        { /* phase and layer kind indices lie inside the report's vocabularies */
            const ls_trace_report *vr = ls_trace_reader_report(r);
            CHECK(ev->phase >= -1 && ev->phase < (int)vr->n_phases);
            CHECK(ev->layer_kind >= -1 && ev->layer_kind < (int)vr->n_layer_kinds);
            CHECK(vr->n_phases <= LS_TRACE_MAX_VOCAB && vr->n_layer_kinds <= LS_TRACE_MAX_VOCAB);
        }
        if (ev->kind == LS_TRACE_LAYER_END && !(ev->flags & LS_TRACE_EVF_FIELDS)) {
            ls_trace_layer_end l;
            CHECK(ls_trace_decode_layer_end(ev->json, &l) == LS_OK);
        }
        if (ev->kind == LS_TRACE_COLLECTIVE && !(ev->flags & LS_TRACE_EVF_FIELDS)) {
            ls_trace_collective c;
            CHECK(ls_trace_decode_collective(ev->json, &c) == LS_OK);
        }
        /* the typed step_metrics is v1's (a v2 event holds free metrics) */
        if (ev->kind == LS_TRACE_STEP_METRICS && !(ev->flags & LS_TRACE_EVF_FIELDS) &&
            ls_trace_reader_report(r)->version == LS_TRACE_VERSION) {
            ls_trace_step_metrics m;
            CHECK(ls_trace_decode_step_metrics(ev->json, &m) == LS_OK);
            CHECK(ls_trace_step_metrics_check(&m, NULL, 0) == LS_OK);
            CHECK(m.prefix_frozen == ev->prefix_frozen);
        }
        delivered++;
        last = ev->seq;
    }
    const ls_trace_report *rep = ls_trace_reader_report(r);
    CHECK(rep->end != LS_TRACE_END_NONE);
    CHECK(rep->n_events == delivered && rep->last_seq == last);
    CHECK(rep->n_diags <= LS_TRACE_MAX_DIAGS);
    CHECK(rep->end != LS_TRACE_END_CLEAN || rep->saw_rank_complete);
    CHECK(!never_clean || rep->end != LS_TRACE_END_CLEAN);
    if (ls_trace_report_status(rep) == LS_OK) {
        CHECK(rep->end == LS_TRACE_END_CLEAN);
        for (int c = 0; c < LS_TRACE_DIAG_CODE_COUNT; c++)
            CHECK(rep->counts[c] == 0 || !ls_trace_diag_is_error((ls_trace_diag_code)c));
    }
    CHECK(rep->max_buffer_bytes <= ((size_t)16 << 20));
    for (size_t i = 0; i < rep->n_diags; i++) CHECK(memchr(rep->diags[i].message, 0, 256) != NULL);
    ls_trace_reader_close(r);
}

/* data as one frame with a block flushed after every line (at most 4096,
 * the rest in one), checksummed, ended only when `end`; its size, 0 when
 * zstd fails.  cap >= 8 * size + 1024. */
static size_t compress_flushed(ZSTD_CCtx *cctx, uint8_t *z, size_t cap, const uint8_t *data, size_t size,
                               bool end) {
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
    size_t off = 0, zn = 0;
    int flushes = 0;
    for (;;) {
        const uint8_t *nl = flushes < 4096 && off < size ? memchr(data + off, '\n', size - off) : NULL;
        size_t piece = nl ? (size_t)(nl - (data + off)) + 1 : size - off;
        bool last = nl == NULL || off + piece == size;
        ZSTD_EndDirective how = last && end ? ZSTD_e_end : ZSTD_e_flush;
        ZSTD_inBuffer in = {data + off, piece, 0};
        for (;;) {
            ZSTD_outBuffer out = {z + zn, cap - zn, 0};
            size_t r = ZSTD_compressStream2(cctx, &out, &in, how);
            if (ZSTD_isError(r)) return 0;
            zn += out.pos;
            if (r == 0) break;
        }
        off += piece;
        flushes++;
        if (last) return zn;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ZSTD_CCtx *cctx;
    read_all(data, size, false);

    if (cctx == NULL) {
        cctx = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    }
    size_t cap = 8 * size + 1024;
    uint8_t *z = malloc(cap);
    if (z == NULL) return 0;
    if (size % 4 == 0) {
        size_t zn = ZSTD_compress2(cctx, z, cap, data, size);
        if (!ZSTD_isError(zn)) read_all(z, zn, false);
        free(z);
        return 0;
    }
    if (size % 4 == 2) {
        bool end = size % 8 == 2;
        size_t zn = compress_flushed(cctx, z, cap, data, size, end);
        if (zn) read_all(z, zn, !end); /* an open frame never ends clean */
        free(z);
        return 0;
    }

    static const uint8_t MAGIC[4] = {0x28, 0xB5, 0x2F, 0xFD};
    memcpy(z, MAGIC, 4);
    if (size) memcpy(z + 4, data, size);
    read_all(z, 4 + size, false);
    free(z);
    return 0;
}
