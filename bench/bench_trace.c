/* bench_trace.c - trace writer and reader throughput.
 *
 * Writes N layer_end events (default ten million; first argument overrides)
 * to a temporary directory under /tmp, compressed and plain, reads each back
 * with the streaming reader, and prints events/s and MB/s (of JSON text)
 * for both directions plus the compression ratio.  The files are deleted.
 * Usage: bench_trace [events] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "receipts/reading/trace_reader.h"
#include "receipts/writing/trace_writer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    double write_s, read_s;
    unsigned long long text_bytes, file_bytes, events;
    size_t reader_buffers;
} result;

static int count_cb(const ls_trace_event *ev, void *user) {
    (void)ev;
    (*(unsigned long long *)user)++;
    return 0;
}

static int run(const char *path, long n, result *res) {
    static const int32_t members[] = {0, 1};
    ls_trace_group g = {"world", members, 2, NULL};
    ls_trace_header h = {0};
    h.run_id = "bench";
    h.rank = 0;
    h.world = 2;
    h.groups = &g;
    h.n_groups = 1;
    h.tool = "bench_trace";
    ls_trace_writer *w;
    if (ls_trace_writer_open(&w, path, &h) != LS_OK) return 1;
    ls_trace_layer_end e = {"replay", 0, 0, 0, LS_TRACE_LAYER_GDN, LS_TRACE_DIR_FWD,
                            8192, 0, 0, 0, 0.0, false};
    unsigned long long x = 88172645463325252ULL; /* xorshift: varied, reproducible numbers */
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        e.step = i / 100000;
        e.member = (i / 1000) % 8;
        e.layer = i % 48;
        e.kind = i % 4 == 3 ? LS_TRACE_LAYER_ATTN : LS_TRACE_LAYER_GDN;
        e.dir = (i / 48) % 2 ? LS_TRACE_DIR_BWD : LS_TRACE_DIR_FWD;
        e.live_bytes = (int64_t)(1000000000 + (x & 0xFFFFFF));
        e.peak_bytes = e.live_bytes + (int64_t)(x >> 40);
        e.wall_ns = (int64_t)(50000 + (x & 0xFFFF));
        e.out_norm = (double)(x >> 11) * 0x1.0p-53 * 100.0;
        if (ls_trace_emit_layer_end(w, &e) != LS_OK) return 1;
    }
    if (ls_trace_emit_rank_complete(w, 1) != LS_OK || ls_trace_writer_close(w) != LS_OK) return 1;
    res->write_s = now_s() - t0;
    struct stat st;
    if (stat(path, &st) != 0) return 1;
    res->file_bytes = (unsigned long long)st.st_size;
    res->events = 0;
    ls_trace_report rep;
    t0 = now_s();
    ls_status s = ls_trace_read_file(path, count_cb, &res->events, &rep);
    res->read_s = now_s() - t0;
    res->text_bytes = rep.text_bytes;
    res->reader_buffers = rep.max_buffer_bytes;
    ls_trace_report_free(&rep);
    unlink(path);
    if (s != LS_OK || res->events != (unsigned long long)n + 1) {
        fprintf(stderr, "%s: read back %llu events (%s)\n", path, res->events, ls_status_str(s));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    long n = 10000000;
    if (argc > 2 || (argc == 2 && (strcmp(argv[1], "--help") == 0 || (n = strtol(argv[1], NULL, 10)) <= 0))) {
        fprintf(stderr, "usage: %s [events]   (default 10000000)\n", argv[0]);
        return 2;
    }
    char dir[] = "/tmp/ls_bench_trace_XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    static const char *const NAMES[2] = {"events.jsonl.zst", "events.jsonl"};
    result r[2];
    int rc = 0;
    for (int m = 0; m < 2 && rc == 0; m++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, NAMES[m]);
        rc = run(path, n, &r[m]);
        if (rc) unlink(path);
    }
    rmdir(dir);
    if (rc) return 1;
    printf("trace throughput, %ld layer_end events (MB = 1e6 bytes of JSON text)\n", n);
    printf("| format | text MB | file MB | ratio | write ev/s | write MB/s | read ev/s | read MB/s | reader buffers |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int m = 0; m < 2; m++) {
        double ev = (double)n + 1, mb = (double)r[m].text_bytes / 1e6;
        printf("| %s | %.0f | %.0f | %.2f | %.3g | %.0f | %.3g | %.0f | %.1f MiB |\n",
               m == 0 ? "zstd" : "plain", mb, (double)r[m].file_bytes / 1e6,
               (double)r[m].text_bytes / (double)r[m].file_bytes, ev / r[m].write_s, mb / r[m].write_s,
               ev / r[m].read_s, mb / r[m].read_s, (double)r[m].reader_buffers / 1048576.0);
    }
    return 0;
}
