/* test_memory_rss.c - the memory figures are true: what the process holds
 * beyond the tracker does not grow with the prompt.
 *
 * longstraw-train (hybrid-tiny, detached, f32, G = 2, R = 8) runs in a fresh
 * process at a short and a long prompt; each receipt gives the peak RSS and
 * the tracker's run peak of its total.  Their difference (what the tracker
 * does not see: the executable and libraries, thread stacks, OpenBLAS's own
 * buffers, the allocator's slack and retained free memory, untracked
 * allocations) is the measure.  The tracker is checked against an independent
 * witness, the kernel's count of resident pages (getrusage ru_maxrss): if any
 * allocation that grows with P bypassed the tracker, the difference at the
 * long prompt would exceed the short one's by about that allocation.
 *
 * Bound: d(32768) - d(8192) <= SLACK (4 MiB), and d(8192) <= 32 MiB.  The
 * fault `--fault untracked-alloc` holds (P-1) d_model n_layers reals outside
 * the tracker (12.6 MiB more at P = 8192 than at 2048) and must break the
 * bound.  Slow (minutes: attention is quadratic in P): labelled "slow", so the
 * sanitizer run skips it; RSS is only meaningful in an uninstrumented build. */
/* paths here are short temporary names: truncation cannot happen */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "receipts/writing/receipt.h"
#include "tests/support/test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define CFG LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#define MIB (1024.0 * 1024.0)

static const long long SLACK = 4ll << 20;     /* growth allowed from the short to the long prompt */
static const long long ABS_BOUND = 32ll << 20; /* untracked bytes allowed at all */

static char tmpdir[256];

static void setup(void) { ls_test_tmpdir_make(tmpdir, "rss"); }

static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

typedef struct {
    long long rss, tracked, untracked; /* peak RSS, tracker run peak, their difference */
    long long prompt_state;            /* the prompt_state category's run peak */
} rss_figures;

/* One run in a fresh process; its receipt's run-scope figures. */
static rss_figures run_at(size_t P, const char *extra) {
    char rd[512], cmd[2048], rp[600], err[512];
    snprintf(rd, sizeof rd, "%s/run-%zu%s", tmpdir, P, extra[0] ? "-fault" : "");
    snprintf(cmd, sizeof cmd,
             "OMP_WAIT_POLICY=passive %s --config %s --prompt-len %zu --response-len 8 --group 2 "
             "--dtype f32 --grad-mode detached --quiet %s --out %s >%s.out 2>%s.err",
             TRAIN, CFG, P, extra, rd, rd, rd);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: exit %d", cmd, WEXITSTATUS(st));
    snprintf(rp, sizeof rp, "%s/rank-0000/receipt.json", rd);
    ls_receipt *r = NULL;
    cr_assert_eq(ls_receipt_read(rp, &r, err, sizeof err), LS_OK, "%s", err);
    rss_figures f = {.rss = (long long)r->rss_peak_bytes, .tracked = (long long)r->run_total_peak_bytes};
    f.untracked = f.rss - f.tracked;
    for (size_t i = 0; i < r->n_memory; i++)
        if (!strcmp(r->memory[i].name, "prompt_state")) f.prompt_state = (long long)r->memory[i].run_peak_bytes;
    ls_receipt_free(r);
    cr_assert_gt(f.rss, 0, "P=%zu: no peak RSS in the receipt", P);
    return f;
}

static void print_row(size_t P, const rss_figures *f, const char *what) {
    fprintf(stderr, "memory_rss: P=%6zu%s  tracker total peak %10lld B (%7.2f MiB)  peak RSS %10lld B "
            "(%7.2f MiB)  RSS - tracked %9lld B (%6.2f MiB)\n",
            P, what, f->tracked, f->tracked / MIB, f->rss, f->rss / MIB, f->untracked, f->untracked / MIB);
}

TestSuite(memory_rss, .init = setup, .fini = teardown, .timeout = 1800);

Test(memory_rss, untracked_bytes_do_not_grow_with_the_prompt) {
    rss_figures s = run_at(8192, ""), l = run_at(32768, "");
    print_row(8192, &s, "");
    print_row(32768, &l, "");
    long long growth = l.untracked - s.untracked;
    fprintf(stderr, "memory_rss: growth of RSS - tracked from 8K to 32K: %lld B (%.2f MiB), bound %.0f MiB\n",
            growth, growth / MIB, SLACK / MIB);
    /* the long run did hold more: the tracker saw the prompt state grow */
    cr_expect_geq(l.tracked - s.tracked, l.prompt_state - s.prompt_state);
    cr_expect_gt(l.prompt_state, 3 * s.prompt_state, "prompt state %lld vs %lld", l.prompt_state, s.prompt_state);
    cr_expect_leq(growth, SLACK, "RSS - tracked grew by %.2f MiB from P=8192 to P=32768 (bound %.0f MiB): "
                  "an allocation that grows with P is outside the tracker", growth / MIB, SLACK / MIB);
    cr_expect_leq(s.untracked, ABS_BOUND, "RSS - tracked = %.2f MiB at P=8192 (bound %.0f MiB)",
                  s.untracked / MIB, ABS_BOUND / MIB);
}

/* The check detects what it claims to: a prompt-sized buffer outside the
 * tracker (the injected fault) breaks the bound. */
Test(memory_rss, an_untracked_prompt_sized_buffer_is_detected) {
    rss_figures s = run_at(2048, "--fault untracked-alloc"), l = run_at(8192, "--fault untracked-alloc");
    print_row(2048, &s, " fault");
    print_row(8192, &l, " fault");
    long long growth = l.untracked - s.untracked;
    long long injected = (long long)(8192 - 2048) * 64 * 8 * 4; /* (P-1) d L float32, the difference */
    fprintf(stderr, "memory_rss: with the fault, growth %lld B (%.2f MiB; injected difference %.2f MiB)\n",
            growth, growth / MIB, injected / MIB);
    cr_expect_gt(growth, SLACK, "the injected untracked buffer (%.2f MiB more at P=8192) went unseen: "
                 "growth %.2f MiB", injected / MIB, growth / MIB);
    cr_expect_geq(growth, injected / 2, "growth %.2f MiB, injected %.2f MiB", growth / MIB, injected / MIB);
}
