/* test_kernel_scratch.c - the kernels' scratch hook (kernels/scratch.h):
 * attention tile scratch goes through the installed allocator (counted,
 * balanced), the tracker's hook shows it under "scratch" and returns every
 * byte, and with the scratch refused the kernels' allocation-free path gives
 * the same attention (an independent composition: scalar dot products
 * instead of tiled GEMMs), checked to 1e-12 with the largest error printed.
 * Float64 kernels; each Criterion test runs in its own process. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/scratch.h"
#include "trainer/base/mem_tracker.h"

enum { TQ = 192, TK = 192, H = 4, HKV = 2, HD = 32 };

static _Atomic long n_alloc, n_release, n_live;

static void *counting_alloc(size_t bytes) {
    void *p = malloc(bytes);
    if (p) {
        atomic_fetch_add(&n_alloc, 1);
        atomic_fetch_add(&n_live, 1);
    }
    return p;
}
static void counting_release(void *p) {
    if (!p) return;
    atomic_fetch_add(&n_release, 1);
    atomic_fetch_sub(&n_live, 1);
    free(p);
}
static void *refusing_alloc(size_t bytes) {
    (void)bytes;
    atomic_fetch_add(&n_alloc, 1);
    return NULL;
}
static const ls_kernel_allocator counting = {counting_alloc, counting_release};
static const ls_kernel_allocator refusing = {refusing_alloc, counting_release};

typedef struct {
    double q[TQ * H * HD], k[TK * HKV * HD], v[TK * HKV * HD], dout[TQ * H * HD];
    double o[TQ * H * HD], lse[TQ * H], dq[TQ * H * HD], dk[TK * HKV * HD], dv[TK * HKV * HD];
} attn_case;

static void fill(double *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = ((double)(seed >> 8) / (double)(1u << 24)) - 0.5;
    }
}

/* Forward then backward of one causal block; outputs in c. */
static void run_attn(attn_case *c) {
    fill(c->q, sizeof c->q / sizeof *c->q, 1);
    fill(c->k, sizeof c->k / sizeof *c->k, 2);
    fill(c->v, sizeof c->v / sizeof *c->v, 3);
    fill(c->dout, sizeof c->dout / sizeof *c->dout, 4);
    memset(c->dq, 0, sizeof c->dq);
    memset(c->dk, 0, sizeof c->dk);
    memset(c->dv, 0, sizeof c->dv);
    const double tau = 1.0 / sqrt((double)HD);
    ls_attn_block_forward_f64(c->o, c->lse, c->q, c->k, c->v, TQ, TK, H, HKV, HD, 0, 0, 1, tau);
    ls_attn_block_backward_f64(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->o, c->lse, TQ, TK, H,
                               HKV, HD, 0, 0, 1, tau);
}

static double max_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

static double case_diff(const attn_case *a, const attn_case *b) {
    double m = max_diff(a->o, b->o, sizeof a->o / sizeof *a->o);
    double parts[] = {max_diff(a->lse, b->lse, sizeof a->lse / sizeof *a->lse),
                      max_diff(a->dq, b->dq, sizeof a->dq / sizeof *a->dq),
                      max_diff(a->dk, b->dk, sizeof a->dk / sizeof *a->dk),
                      max_diff(a->dv, b->dv, sizeof a->dv / sizeof *a->dv)};
    for (int i = 0; i < 4; i++)
        if (!(parts[i] <= m)) m = parts[i];
    return m;
}

Test(kernel_scratch, attention_takes_scratch_from_the_hook) {
    static attn_case by_default, counted;
    cr_assert_eq(ls_kernel_scratch_get()->alloc != NULL, 1);
    run_attn(&by_default);
    ls_kernel_scratch_set(&counting);
    cr_assert_eq(ls_kernel_scratch_get(), &counting);
    run_attn(&counted);
    ls_kernel_scratch_set(NULL);
    cr_assert_neq(ls_kernel_scratch_get(), &counting, "NULL did not restore the default");
    long a = atomic_load(&n_alloc), r = atomic_load(&n_release);
    cr_log_info("attention scratch: %ld blocks allocated, %ld released", a, r);
    cr_expect_geq(a, 2, "forward and backward took %ld blocks from the hook", a);
    cr_expect_eq(a, r, "%ld allocated, %ld released", a, r);
    cr_expect_eq(atomic_load(&n_live), 0);
    /* the allocator changes where the bytes live, never the result */
    double d = case_diff(&by_default, &counted);
    cr_expect_eq(d, 0.0, "results differ by %g with another allocator", d);
}

Test(kernel_scratch, tracker_hook_accounts_and_returns_every_byte) {
    static attn_case c;
    ls_mem_stats before, after;
    ls_mem_snapshot(&before);
    ls_mem_track_kernel_scratch();
    ls_mem_track_kernel_scratch(); /* idempotent */
    run_attn(&c);
    ls_mem_snapshot(&after);
    uint64_t na = after.allocs[LS_MEM_SCRATCH] - before.allocs[LS_MEM_SCRATCH];
    uint64_t nf = after.frees[LS_MEM_SCRATCH] - before.frees[LS_MEM_SCRATCH];
    cr_log_info("tracked attention scratch: %llu blocks, peak %zu bytes", (unsigned long long)na,
                after.run_peak_bytes[LS_MEM_SCRATCH]);
    cr_expect_geq(na, 2u, "the tracker saw %llu scratch blocks", (unsigned long long)na);
    cr_expect_eq(na, nf);
    cr_expect_eq(after.live_bytes[LS_MEM_SCRATCH], 0u);
    cr_expect_eq(after.live_total, before.live_total);
    /* a tile workspace: at least the forward's 2 R hd + R nk + 2 R reals with R >= 64 rows */
    cr_expect_geq(after.run_peak_bytes[LS_MEM_SCRATCH], (size_t)(2 * 64 * HD + 64 * 64) * sizeof(double));
    /* a budget too small for any tile: every request refused, the kernels fall
     * back to the allocation-free path, and the answer stays the same */
    static attn_case fallback;
    ls_mem_set_budget(after.live_total + 1);
    run_attn(&fallback);
    ls_mem_set_budget(0);
    ls_mem_snapshot(&before);
    cr_expect_gt(before.refused, after.refused, "no scratch request was refused");
    double d = case_diff(&c, &fallback);
    cr_log_info("GEMM path vs allocation-free path: largest difference %.3g", d);
    cr_expect_leq(d, 1e-12, "largest difference %g", d);
    ls_kernel_scratch_set(NULL);
}

Test(kernel_scratch, refused_scratch_takes_the_scalar_path) {
    static attn_case tiled, scalar;
    run_attn(&tiled);
    ls_kernel_scratch_set(&refusing);
    run_attn(&scalar);
    ls_kernel_scratch_set(NULL);
    cr_expect_geq(atomic_load(&n_alloc), 2);
    double d = case_diff(&tiled, &scalar);
    cr_log_info("tiled vs scalar attention: largest difference %.3g", d);
    cr_expect_leq(d, 1e-12, "largest difference %g", d);
    /* the two paths are different compositions: equal to rounding, not bits */
    cr_expect(isfinite(d));
}
