/* test_trace_bigread.c - the reader's memory does not grow with the file:
 * reading a million events needs no more buffer than reading fifty
 * thousand, and stays under a fixed cap. */
#include "tests/receipts/test_trace_util.h"

#define CAP_BYTES ((size_t)16 << 20)

/* A million events in a normal build; fewer under AddressSanitizer, which
 * is ~5x slower, to keep the file under 30 s (the bound is still compared
 * against a file 6x smaller). */
#if defined(__SANITIZE_ADDRESS__)
#define BIG_EVENTS 300000
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIG_EVENTS 300000
#endif
#endif
#ifndef BIG_EVENTS
#define BIG_EVENTS 1000000
#endif

/* Writes n layer_end events plus rank_complete, reads them back, returns
 * the reader's buffer high-water mark. */
static size_t write_and_read(const char *dir, const char *name, long n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ls_trace_header h = tt_header();
    ls_trace_writer *w;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_OK);
    ls_trace_layer_end e = TT_L1;
    for (long i = 0; i < n; i++) {
        e.layer = i % 64;
        e.step = i / 4096;
        e.out_norm = 1.0 + (double)i * 1e-7;
        cr_assert_eq(ls_trace_emit_layer_end(w, &e), LS_OK);
    }
    cr_assert_eq(ls_trace_emit_rank_complete(w, 1), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    ls_trace_report rep;
    ls_status st = ls_trace_read_file(path, NULL, NULL, &rep);
    if (st != LS_OK) tt_dump(&rep);
    cr_assert_eq(st, LS_OK);
    cr_assert_eq(rep.n_events, n + 1);
    size_t m = rep.max_buffer_bytes;
    cr_assert_gt(m, 0u);
    cr_assert_lt(m, CAP_BYTES, "%s: %zu bytes of buffers", name, m);
    if (n >= BIG_EVENTS)
        cr_assert_gt(rep.text_bytes, 10 * (uint64_t)m, "the file (%llu bytes) dwarfs the buffers",
                     (unsigned long long)rep.text_bytes);
    ls_trace_report_free(&rep);
    unlink(path);
    return m;
}

Test(trace_bigread, million_events_bounded_memory, .timeout = 120) {
    char dir[64];
    tt_mkdtemp(dir);
    size_t small = write_and_read(dir, "small.jsonl.zst", 50000);
    size_t big = write_and_read(dir, "big.jsonl.zst", BIG_EVENTS);
    cr_assert_leq(big, small + 65536, "%d events: %zu bytes of buffers, 50k: %zu", BIG_EVENTS, big, small);
    size_t psmall = write_and_read(dir, "small.jsonl", 20000);
    size_t pbig = write_and_read(dir, "big.jsonl", 200000);
    cr_assert_leq(pbig, psmall + 65536, "plain 200k: %zu, 20k: %zu", pbig, psmall);
    tt_rmdir(dir);
}
