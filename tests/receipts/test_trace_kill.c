/* test_trace_kill.c - a writer whose process dies without closing leaves a
 * readable prefix: the reader delivers exactly what was flushed and reports
 * the trace as incomplete (or truncated), never as clean. */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "tests/receipts/test_trace_util.h"

#define STEPS 5
#define LAYERS 10

static void emit_step(ls_trace_writer *w, int step) {
    if (ls_trace_emit_phase_begin(w, "replay", step) != LS_OK) _exit(3);
    for (int l = 0; l < LAYERS; l++) {
        ls_trace_layer_end e = TT_L1;
        e.step = step;
        e.layer = l;
        if (ls_trace_emit_layer_end(w, &e) != LS_OK) _exit(3);
    }
    if (ls_trace_emit_phase_end(w, "replay", step, 1000, true) != LS_OK) _exit(3);
}

/* The child flushes STEPS steps, buffers 5 more events and _exit()s.  All
 * of it is one open zstd frame: delivered, flagged unverified. */
static void exit_without_close(const char *name) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        ls_trace_header h = tt_header();
        ls_trace_writer *w;
        if (ls_trace_writer_open(&w, path, &h) != LS_OK) _exit(2);
        for (int s = 0; s < STEPS; s++) emit_step(w, s);
        for (int i = 0; i < 5; i++)
            if (ls_trace_emit_layer_end(w, &TT_L0) != LS_OK) _exit(3);
        _exit(0); /* no close, no flush: the 5 buffered events are lost */
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    ls_trace_report rep;
    ls_status st = ls_trace_read_file(path, NULL, NULL, &rep);
    const int64_t flushed = STEPS * (LAYERS + 2);
    if (rep.n_events != flushed) tt_dump(&rep);
    cr_assert_eq(rep.n_events, flushed);
    cr_assert_eq(rep.last_seq, flushed - 1);
    cr_assert_eq(st, LS_ERR_TRUNCATED);
    /* zstd: the open frame's flushed blocks decode, its checksum never came */
    bool zst = rep.compressed;
    cr_assert_eq(rep.end, zst ? LS_TRACE_END_TRUNCATED : LS_TRACE_END_INCOMPLETE);
    cr_assert_eq(rep.truncated_in_frame, zst);
    cr_assert_eq(tt_errors(&rep), 1u, "only the cut");
    const ls_trace_diag *d = tt_find(&rep, zst ? LS_TRACE_DIAG_TRUNCATED : LS_TRACE_DIAG_INCOMPLETE);
    cr_assert_not_null(d);
    cr_assert_eq(d->seq, flushed - 1, "names the last good seq");
    ls_trace_report_free(&rep);
    tt_rmdir(dir);
}

Test(trace_kill, exit_without_close_plain) { exit_without_close("events.jsonl"); }
Test(trace_kill, exit_without_close_zstd) { exit_without_close("events.jsonl.zst"); }

/* SIGKILL at an arbitrary moment while the child writes as fast as it can
 * (small flush and frame thresholds: many blocks and frames). */
static void killed_mid_run(const char *name) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        ls_trace_header h = tt_header();
        ls_trace_writer_opts o = {1, 4096, 16384};
        ls_trace_writer *w;
        if (ls_trace_writer_open_opts(&w, path, &h, &o) != LS_OK) _exit(2);
        emit_step(w, 0);
        if (write(fds[1], "r", 1) != 1) _exit(4);
        for (int s = 1;; s++) emit_step(w, s);
    }
    close(fds[1]);
    char c;
    cr_assert_eq(read(fds[0], &c, 1), 1, "child ready");
    close(fds[0]);
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));
    ls_trace_report rep;
    ls_trace_read_file(path, NULL, NULL, &rep);
    cr_assert_geq(rep.n_events, LAYERS + 2);
    cr_assert_eq(rep.last_seq, rep.n_events - 1, "contiguous from 0");
    cr_assert(rep.end == LS_TRACE_END_INCOMPLETE || rep.end == LS_TRACE_END_TRUNCATED, "end %s",
              ls_trace_end_name(rep.end));
    uint64_t errs = tt_errors(&rep);
    uint64_t expected = rep.counts[LS_TRACE_DIAG_INCOMPLETE] + rep.counts[LS_TRACE_DIAG_TRUNCATED];
    if (errs != expected) tt_dump(&rep);
    cr_assert_eq(errs, expected, "nothing but the cut is reported");
    cr_assert_eq(expected, 1u);
    ls_trace_report_free(&rep);
    tt_rmdir(dir);
}

Test(trace_kill, sigkill_mid_run_plain) { killed_mid_run("events.jsonl"); }
Test(trace_kill, sigkill_mid_run_zstd) { killed_mid_run("events.jsonl.zst"); }
