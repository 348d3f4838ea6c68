/* bench_audit_reader.c - the trace side of bench/bench_audit.sh.
 *
 *   bench_audit_reader gen SRC OUT N
 *     reads the real single-rank trace SRC (one step), and writes OUT (a new
 *     file; ".zst" for zstd) through receipts' trace writer: SRC's header,
 *     then SRC's events (rank_complete excepted) repeated with "step"
 *     renumbered 0, 1, 2, ... until N events are written, then
 *     rank_complete.  seq and ts_ns are the writer's own, so the trace is
 *     valid by construction.  Prints the events written.
 *   bench_audit_reader read TRACE [REPEAT]
 *     ls_trace_read_file(TRACE) with a NULL callback REPEAT times (default
 *     1); prints one line: events, median seconds, events/s, the reader's
 *     buffer high-water mark, this process's peak RSS, the report's status.
 *
 * Exit 0 on success, 1 when reading or writing fails, 2 for usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "receipts/reading/trace_reader.h"
#include "receipts/writing/trace_writer.h"

#define MAX_PATTERN 100000
#define MAX_GROUPS 16

typedef struct {
    char kind[64];
    cJSON *fields; /* the event minus its envelope (and prefix_frozen) */
    cJSON *step;   /* fields' "step", NULL when none */
} pattern_event;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int do_read(const char *path, int repeat) {
    double *t = calloc((size_t)repeat, sizeof *t);
    if (t == NULL) return 1;
    ls_trace_report rep;
    memset(&rep, 0, sizeof rep);
    ls_status st = LS_OK;
    for (int i = 0; i < repeat; i++) {
        ls_trace_report_free(&rep);
        double t0 = now_s();
        st = ls_trace_read_file(path, NULL, NULL, &rep);
        t[i] = now_s() - t0;
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    double med = t[repeat / 2];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("events %lld seconds %.4f events_per_s %.0f buffers_bytes %zu peak_rss_kib %ld status %s end %s\n",
           (long long)rep.n_events, med, med > 0 ? (double)rep.n_events / med : 0.0, rep.max_buffer_bytes,
           ru.ru_maxrss, ls_status_str(st), ls_trace_end_name(rep.end));
    ls_trace_report_free(&rep);
    free(t);
    return st == LS_OK ? 0 : 1;
}

static int do_gen(const char *src, const char *out, long long target) {
    int rc = 1;
    pattern_event *pat = calloc(MAX_PATTERN, sizeof *pat);
    size_t n_pat = 0;
    ls_trace_reader *r = NULL;
    ls_trace_writer *w = NULL;
    int32_t members[MAX_GROUPS][64];
    ls_trace_group groups[MAX_GROUPS];
    if (pat == NULL || ls_trace_reader_open(&r, src) != LS_OK) goto cleanup;
    const ls_trace_event *ev;
    while (ls_trace_reader_next(r, &ev) == LS_OK && ev != NULL) {
        if (ev->kind == LS_TRACE_RANK_COMPLETE) continue;
        if (n_pat == MAX_PATTERN) {
            fprintf(stderr, "gen: %s: more than %d events\n", src, MAX_PATTERN);
            goto cleanup;
        }
        pattern_event *p = &pat[n_pat++];
        snprintf(p->kind, sizeof p->kind, "%s", ev->ev);
        p->fields = cJSON_Duplicate(ev->json, 1);
        if (p->fields == NULL) goto cleanup;
        static const char *const DROP[] = {"v", "rank", "seq", "ts_ns", "ev", "prefix_frozen"};
        for (size_t k = 0; k < sizeof DROP / sizeof DROP[0]; k++)
            cJSON_DeleteItemFromObjectCaseSensitive(p->fields, DROP[k]);
        p->step = cJSON_GetObjectItemCaseSensitive(p->fields, "step");
    }
    const ls_trace_report *rep = ls_trace_reader_report(r);
    if (ls_trace_report_status(rep) != LS_OK || n_pat == 0 || !rep->header_ok) {
        fprintf(stderr, "gen: %s is not a clean trace (status %s)\n", src,
                ls_status_str(ls_trace_report_status(rep)));
        goto cleanup;
    }
    const cJSON *h = rep->header, *gs = cJSON_GetObjectItemCaseSensitive(h, "groups");
    size_t ng = 0;
    for (const cJSON *g = gs ? gs->child : NULL; g && ng < MAX_GROUPS; g = g->next, ng++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(g, "members");
        size_t nm = 0;
        for (const cJSON *x = m ? m->child : NULL; x && nm < 64; x = x->next) members[ng][nm++] = (int32_t)x->valuedouble;
        groups[ng].name = cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring;
        groups[ng].members = members[ng];
        groups[ng].n_members = nm;
    }
    ls_trace_header hdr = {
        .run_id = cJSON_GetObjectItemCaseSensitive(h, "run_id")->valuestring,
        .rank = (int32_t)rep->rank,
        .world = (int32_t)rep->world,
        .groups = groups,
        .n_groups = ng,
        .tool = "bench_audit_reader",
    };
    if (ls_trace_writer_open(&w, out, &hdr) != LS_OK) goto cleanup;
    long long written = 0, step = 0;
    while (written < target - 1) {
        for (size_t i = 0; i < n_pat && written < target - 1; i++, written++) {
            if (pat[i].step) cJSON_SetNumberValue(pat[i].step, (double)step);
            if (ls_trace_emit_json(w, pat[i].kind, pat[i].fields) != LS_OK) {
                fprintf(stderr, "gen: %s: %s\n", out, ls_trace_writer_last_error(w));
                goto cleanup;
            }
        }
        step++;
    }
    if (ls_trace_emit_rank_complete(w, step) != LS_OK) goto cleanup;
    ls_status cst = ls_trace_writer_close(w);
    w = NULL;
    if (cst != LS_OK) {
        fprintf(stderr, "gen: %s: close: %s\n", out, ls_status_str(cst));
        goto cleanup;
    }
    printf("events %lld steps %lld pattern %zu\n", written + 1, step, n_pat);
    rc = 0;
cleanup:
    if (w) ls_trace_writer_close(w);
    ls_trace_reader_close(r);
    for (size_t i = 0; i < n_pat; i++) cJSON_Delete(pat[i].fields);
    free(pat);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "gen") == 0) {
        char *end;
        long long n = strtoll(argv[4], &end, 10);
        if (*end != 0 || n < 2) {
            fprintf(stderr, "bench_audit_reader: gen N: '%s' is not an integer >= 2\n", argv[4]);
            return 2;
        }
        return do_gen(argv[2], argv[3], n);
    }
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "read") == 0) {
        int repeat = argc == 4 ? atoi(argv[3]) : 1;
        if (repeat < 1 || repeat > 1000) {
            fprintf(stderr, "bench_audit_reader: read REPEAT: '%s' is not in 1..1000\n", argv[3]);
            return 2;
        }
        return do_read(argv[2], repeat);
    }
    fprintf(stderr, "usage: bench_audit_reader gen SRC OUT N | read TRACE [REPEAT]\n");
    return 2;
}
