/* fuzz_trace_reader.c - libFuzzer target for the trace reader.
 *
 * Each input is read as given (the reader picks plain or zstd by the magic
 * bytes) and then one more way, chosen by the parity of its size (so that
 * one execution costs two reads, not three): even sizes compressed into one
 * checksummed zstd frame (so the line parser is reached through the
 * decompressor), odd sizes behind a zstd magic number (so arbitrary bytes
 * reach the frame decoder).  Besides
 * "no crash, no leak, no undefined behaviour" (ASan/UBSan), the report must
 * be self-consistent; any violation aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "receipts/trace_reader.h"

#define CHECK(c)                     \
    do {                             \
        if (!(c)) __builtin_trap();  \
    } while (0)

static void read_all(const uint8_t *data, size_t size) {
    ls_trace_reader *r = NULL;
    CHECK(ls_trace_reader_open_mem(&r, data, size, "fuzz") == LS_OK);
    const ls_trace_event *ev;
    int64_t delivered = 0, last = -1;
    for (;;) {
        CHECK(ls_trace_reader_next(r, &ev) == LS_OK);
        if (ev == NULL) break;
        CHECK(ev->json != NULL && ev->ev != NULL && ev->seq >= 0 && ev->ts_ns >= 0 && ev->line >= 1);
        if (ev->kind == LS_TRACE_LAYER_END && !(ev->flags & LS_TRACE_EVF_FIELDS)) {
            ls_trace_layer_end l;
            CHECK(ls_trace_decode_layer_end(ev->json, &l) == LS_OK);
        }
        if (ev->kind == LS_TRACE_COLLECTIVE && !(ev->flags & LS_TRACE_EVF_FIELDS)) {
            ls_trace_collective c;
            CHECK(ls_trace_decode_collective(ev->json, &c) == LS_OK);
        }
        if (ev->kind == LS_TRACE_STEP_METRICS && !(ev->flags & LS_TRACE_EVF_FIELDS)) {
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
    if (ls_trace_report_status(rep) == LS_OK) {
        CHECK(rep->end == LS_TRACE_END_CLEAN);
        for (int c = 0; c < LS_TRACE_DIAG_CODE_COUNT; c++)
            CHECK(rep->counts[c] == 0 || !ls_trace_diag_is_error((ls_trace_diag_code)c));
    }
    CHECK(rep->max_buffer_bytes <= ((size_t)16 << 20));
    for (size_t i = 0; i < rep->n_diags; i++) CHECK(memchr(rep->diags[i].message, 0, 256) != NULL);
    ls_trace_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ZSTD_CCtx *cctx;
    read_all(data, size);

    if (cctx == NULL) {
        cctx = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    }
    size_t cap = ZSTD_compressBound(size);
    uint8_t *z = malloc(cap > 4 + size ? cap : 4 + size);
    if (z == NULL) return 0;
    if (size % 2 == 0) {
        size_t zn = ZSTD_compress2(cctx, z, cap, data, size);
        if (!ZSTD_isError(zn)) read_all(z, zn);
        free(z);
        return 0;
    }

    static const uint8_t MAGIC[4] = {0x28, 0xB5, 0x2F, 0xFD};
    memcpy(z, MAGIC, 4);
    if (size) memcpy(z + 4, data, size);
    read_all(z, 4 + size);
    free(z);
    return 0;
}
