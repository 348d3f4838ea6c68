/* test_mem_tracker.c - exact accounting, peaks, budget, threads, RSS.
 *
 * Criterion runs every test in its own process, so each starts from a fresh
 * (all-zero) global tracker. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"

static void expect_cat(const ls_mem_stats *s, ls_mem_cat c, size_t live, size_t peak)
{
    cr_expect_eq(s->live_bytes[c], live, "%s live: got %zu, want %zu",
                 ls_mem_cat_name(c), s->live_bytes[c], live);
    cr_expect_eq(s->peak_bytes[c], peak, "%s peak: got %zu, want %zu",
                 ls_mem_cat_name(c), s->peak_bytes[c], peak);
}

Test(mem_tracker, names_fixed_order)
{
    static const char *want[LS_MEM_COUNT] = {
        "fixed_weights", "adapters", "optimizer_state", "gradients",
        "prompt_state", "prompt_state_grad", "branch_graph", "scoring",
        "scratch", "recompute_checkpoints", "communication", "moe_dispatch",
        "prompt_state_host", "staging"};
    for (int c = 0; c < LS_MEM_COUNT; c++)
        cr_expect_str_eq(ls_mem_cat_name((ls_mem_cat)c), want[c]);
    cr_expect_str_eq(ls_mem_cat_name(LS_MEM_COUNT), "unknown");
    cr_expect_str_eq(ls_mem_cat_name((ls_mem_cat)-1), "unknown");
    cr_expect_eq((int)LS_MEM_COMM, 10);
}

/* The host tier (--state-tier host): prompt_state_host is outside the device totals and their budget, with
 * its own total, peak and budget; every other category is in the device tier. */
Test(mem_tracker, host_tier_apart)
{
    for (int c = 0; c < LS_MEM_COUNT; c++)
        cr_expect_eq(ls_mem_cat_tier((ls_mem_cat)c), c == LS_MEM_PROMPT_STATE_HOST ? LS_TIER_HOST : LS_TIER_DEVICE);
    ls_mem_stats a, b;
    ls_mem_snapshot(&a);
    ls_mem_reset_peaks();
    ls_mem_set_budget(a.live_total + 1000);
    void *h = ls_mem_alloc(LS_MEM_PROMPT_STATE_HOST, 5000); /* above the device budget: another tier */
    cr_assert_not_null(h);
    ls_mem_snapshot(&b);
    cr_expect_eq(b.live_total, a.live_total, "the host tier counted in the device total");
    cr_expect_eq(b.host_live_total, a.host_live_total + 5000);
    cr_expect_geq(b.host_peak_total, a.host_live_total + 5000);
    cr_expect_eq(b.live_bytes[LS_MEM_PROMPT_STATE_HOST], a.live_bytes[LS_MEM_PROMPT_STATE_HOST] + 5000);
    ls_mem_set_host_budget(b.host_live_total + 100);
    cr_expect_null(ls_mem_alloc(LS_MEM_PROMPT_STATE_HOST, 200), "the host budget was not enforced");
    void *d = ls_mem_alloc(LS_MEM_STAGING, 500); /* the device tier, within its budget */
    cr_expect_not_null(d);
    cr_expect_null(ls_mem_alloc(LS_MEM_STAGING, 1000), "the device budget was not enforced");
    ls_mem_free(d);
    ls_mem_free(h);
    ls_mem_set_budget(0);
    ls_mem_set_host_budget(0);
    ls_mem_snapshot(&b);
    cr_expect_eq(b.host_live_total, a.host_live_total);
    cr_expect_eq(b.live_total, a.live_total);
}

Test(mem_tracker, alloc_zeroed_aligned_sized)
{
    size_t sizes[] = {0, 1, 7, 63, 64, 65, 1000, 4096, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = ls_mem_alloc(LS_MEM_SCRATCH, sizes[i]);
        cr_assert_not_null(p, "size %zu", sizes[i]);
        cr_expect_eq((uintptr_t)p % LS_MEM_ALIGN, 0, "size %zu misaligned", sizes[i]);
        cr_expect_eq(ls_mem_size(p), sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++)
            cr_assert_eq(p[j], 0, "size %zu byte %zu not zero", sizes[i], j);
        memset(p, 0xAB, sizes[i]); /* whole block writable (ASan checks) */
        ls_mem_free(p);
    }
    ls_mem_free(NULL);
    cr_expect_eq(ls_mem_size(NULL), 0);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.live_total, 0);
    cr_expect_eq(s.allocs_total, 9);
    cr_expect_eq(s.frees_total, 9);
    cr_expect_eq(s.peak_total, (size_t)1 << 20);
}

Test(mem_tracker, zero_byte_blocks_are_distinct)
{
    void *a = ls_mem_alloc(LS_MEM_GRADS, 0);
    void *b = ls_mem_alloc(LS_MEM_GRADS, 0);
    cr_assert(a != NULL && b != NULL && a != b);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.allocs[LS_MEM_GRADS], 2);
    cr_expect_eq(s.live_bytes[LS_MEM_GRADS], 0);
    ls_mem_free(a);
    ls_mem_free(b);
}

Test(mem_tracker, exact_live_and_peak_per_category)
{
    /* weights: 1000 + 24 ; adapters: 300 ; grads: 4096 ; scratch: 10, 20, 30 */
    void *w1 = ls_mem_alloc(LS_MEM_WEIGHTS, 1000);
    void *w2 = ls_mem_alloc(LS_MEM_WEIGHTS, 24);
    void *a1 = ls_mem_alloc(LS_MEM_ADAPTERS, 300);
    void *g1 = ls_mem_alloc(LS_MEM_GRADS, 4096);
    void *s1 = ls_mem_alloc(LS_MEM_SCRATCH, 10);
    void *s2 = ls_mem_alloc(LS_MEM_SCRATCH, 20);
    cr_assert(w1 && w2 && a1 && g1 && s1 && s2);

    ls_mem_stats s;
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_WEIGHTS, 1024, 1024);
    expect_cat(&s, LS_MEM_ADAPTERS, 300, 300);
    expect_cat(&s, LS_MEM_GRADS, 4096, 4096);
    expect_cat(&s, LS_MEM_SCRATCH, 30, 30);
    expect_cat(&s, LS_MEM_BRANCH, 0, 0);
    cr_expect_eq(s.live_total, 1024 + 300 + 4096 + 30);
    cr_expect_eq(s.peak_total, 1024 + 300 + 4096 + 30);
    cr_expect_eq(s.allocs[LS_MEM_WEIGHTS], 2);
    cr_expect_eq(s.allocs[LS_MEM_SCRATCH], 2);
    cr_expect_eq(s.allocs_total, 6);
    cr_expect_eq(s.frees_total, 0);

    /* Free some: live falls, peaks stay. */
    ls_mem_free(g1);
    ls_mem_free(s1);
    ls_mem_free(w2);
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_WEIGHTS, 1000, 1024);
    expect_cat(&s, LS_MEM_GRADS, 0, 4096);
    expect_cat(&s, LS_MEM_SCRATCH, 20, 30);
    cr_expect_eq(s.live_total, 1000 + 300 + 20);
    cr_expect_eq(s.peak_total, 5450);
    cr_expect_eq(s.frees[LS_MEM_GRADS], 1);
    cr_expect_eq(s.frees_total, 3);

    /* A new allocation below the old peak does not move the peak ... */
    void *s3 = ls_mem_alloc(LS_MEM_SCRATCH, 5);
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_SCRATCH, 25, 30);
    cr_expect_eq(s.peak_total, 5450);
    /* ... one above it does. */
    void *b1 = ls_mem_alloc(LS_MEM_BRANCH, 10000);
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_BRANCH, 10000, 10000);
    cr_expect_eq(s.live_total, 1000 + 300 + 25 + 10000);
    cr_expect_eq(s.peak_total, 11325);

    /* reset_peaks: peak := live */
    ls_mem_free(b1);
    ls_mem_reset_peaks();
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_BRANCH, 0, 0);
    expect_cat(&s, LS_MEM_WEIGHTS, 1000, 1000);
    expect_cat(&s, LS_MEM_GRADS, 0, 0);
    expect_cat(&s, LS_MEM_SCRATCH, 25, 25);
    cr_expect_eq(s.peak_total, 1325);
    cr_expect_eq(s.live_total, 1325);
    /* ... while the run peaks keep the high-water marks of the whole run */
    cr_expect_eq(s.run_peak_total, 11325);
    cr_expect_eq(s.run_peak_bytes[LS_MEM_BRANCH], 10000);
    cr_expect_eq(s.run_peak_bytes[LS_MEM_WEIGHTS], 1024);
    void *b2 = ls_mem_alloc(LS_MEM_BRANCH, 4000); /* a smaller second window */
    ls_mem_free(b2);
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_BRANCH, 0, 4000);
    cr_expect_eq(s.peak_total, 5325);
    cr_expect_eq(s.run_peak_total, 11325);
    cr_expect_eq(s.run_peak_bytes[LS_MEM_BRANCH], 10000);
    b2 = ls_mem_alloc(LS_MEM_BRANCH, 20000); /* a larger one raises both */
    ls_mem_free(b2);
    ls_mem_reset_peaks();
    ls_mem_snapshot(&s);
    cr_expect_eq(s.run_peak_total, 21325);
    cr_expect_eq(s.run_peak_bytes[LS_MEM_BRANCH], 20000);
    cr_expect_eq(s.peak_total, 1325);

    ls_mem_free(w1);
    ls_mem_free(a1);
    ls_mem_free(s2);
    ls_mem_free(s3);
    ls_mem_snapshot(&s);
    cr_expect_eq(s.live_total, 0);
    for (int c = 0; c < LS_MEM_COUNT; c++)
        cr_expect_eq(s.live_bytes[c], 0, "%s", ls_mem_cat_name((ls_mem_cat)c));
    cr_expect_eq(s.allocs_total, s.frees_total);
}

Test(mem_tracker, budget_refuses_cleanly)
{
    ls_mem_set_budget(1000);
    void *a = ls_mem_alloc(LS_MEM_OPTIMIZER, 600);
    cr_assert_not_null(a);
    void *b = ls_mem_alloc(LS_MEM_GRADS, 401); /* 1001 > 1000 */
    cr_expect_null(b);
    void *c = ls_mem_alloc(LS_MEM_GRADS, 400); /* exactly 1000 */
    cr_expect_not_null(c);
    void *d = ls_mem_alloc(LS_MEM_GRADS, 1);
    cr_expect_null(d);

    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.refused, 2);
    cr_expect_eq(s.live_total, 1000);
    cr_expect_eq(s.peak_total, 1000);
    cr_expect_eq(s.budget_bytes, 1000);
    expect_cat(&s, LS_MEM_GRADS, 400, 400); /* refusals charge nothing */
    cr_expect_eq(s.allocs[LS_MEM_GRADS], 1);

    /* freeing makes room again */
    ls_mem_free(a);
    void *e = ls_mem_alloc(LS_MEM_GRADS, 600);
    cr_expect_not_null(e);
    /* realloc under a budget: both blocks live while copying -> refused,
     * and the old block stays valid */
    void *f = ls_mem_realloc(LS_MEM_GRADS, e, 700);
    cr_expect_null(f);
    cr_expect_eq(ls_mem_size(e), 600);

    /* removing the budget */
    ls_mem_set_budget(0);
    void *big = ls_mem_alloc(LS_MEM_SCRATCH, 1 << 20);
    cr_expect_not_null(big);
    ls_mem_free(big);
    ls_mem_free(c);
    ls_mem_free(e);

    /* absurd sizes and bad categories are refused, not crashed on */
    cr_expect_null(ls_mem_alloc(LS_MEM_SCRATCH, SIZE_MAX));
    cr_expect_null(ls_mem_alloc(LS_MEM_SCRATCH, SIZE_MAX - 10));
    cr_expect_null(ls_mem_alloc(LS_MEM_COUNT, 8));
    ls_mem_snapshot(&s);
    cr_expect_eq(s.live_total, 0);
    cr_expect_eq(s.refused, 6);
}

Test(mem_tracker, realloc_keeps_contents_and_moves_category)
{
    unsigned char *p = ls_mem_realloc(LS_MEM_SCRATCH, NULL, 16);
    cr_assert_not_null(p);
    for (int i = 0; i < 16; i++)
        p[i] = (unsigned char)(i + 1);
    unsigned char *q = ls_mem_realloc(LS_MEM_COMM, p, 40);
    cr_assert_not_null(q);
    for (int i = 0; i < 16; i++)
        cr_expect_eq(q[i], i + 1);
    for (int i = 16; i < 40; i++)
        cr_expect_eq(q[i], 0, "growth not zeroed at %d", i);
    unsigned char *r = ls_mem_realloc(LS_MEM_COMM, q, 4);
    cr_assert_not_null(r);
    cr_expect_eq(r[3], 4);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    expect_cat(&s, LS_MEM_SCRATCH, 0, 16);
    expect_cat(&s, LS_MEM_COMM, 4, 44); /* 40 + 4 while copying */
    cr_expect_eq(s.peak_total, 56);      /* 16 + 40 while copying */
    ls_mem_free(r);
}

/* ---- threads ---------------------------------------------------------- */

#define N_THREADS 4
#define N_ROUNDS 20000
#define N_SLOTS 8

typedef struct {
    int id;
    size_t max_outstanding; /* largest sum of this thread's live blocks */
    size_t refusals;        /* allocations that returned NULL */
} worker_arg;

static void *worker(void *vp)
{
    worker_arg *arg = vp;
    void *slot[N_SLOTS] = {0};
    size_t live = 0;
    uint32_t rng = 2463534242u + (uint32_t)arg->id * 7919u;
    for (int r = 0; r < N_ROUNDS; r++) {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        int k = (int)(rng % N_SLOTS);
        if (slot[k] != NULL) {
            live -= ls_mem_size(slot[k]);
            ls_mem_free(slot[k]);
            slot[k] = NULL;
        } else {
            /* thread i allocates in categories i and i+4 */
            ls_mem_cat cat = (ls_mem_cat)(arg->id + (k % 2) * N_THREADS);
            size_t bytes = 1 + (rng >> 8) % 3000;
            slot[k] = ls_mem_alloc(cat, bytes);
            if (slot[k] == NULL) {
                arg->refusals++;
                continue;
            }
            ((unsigned char *)slot[k])[bytes - 1] = 1;
            live += bytes;
            if (live > arg->max_outstanding)
                arg->max_outstanding = live;
        }
    }
    for (int k = 0; k < N_SLOTS; k++)
        ls_mem_free(slot[k]);
    return NULL;
}

static void run_workers(worker_arg args[N_THREADS])
{
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (worker_arg){.id = i, .max_outstanding = 0, .refusals = 0};
        cr_assert_eq(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        cr_assert_eq(pthread_join(th[i], NULL), 0);
}

Test(mem_tracker, threads_end_balanced_with_consistent_peaks, .timeout = 60)
{
    worker_arg args[N_THREADS];
    run_workers(args);
    size_t bound = 0;
    for (int i = 0; i < N_THREADS; i++) {
        cr_expect_eq(args[i].refusals, 0, "thread %d saw %zu refusals", i, args[i].refusals);
        bound += args[i].max_outstanding;
    }
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.live_total, 0, "live_total %zu after all frees", s.live_total);
    size_t sum_peaks = 0, max_peak = 0;
    for (int c = 0; c < LS_MEM_COUNT; c++) {
        cr_expect_eq(s.live_bytes[c], 0, "%s live %zu", ls_mem_cat_name((ls_mem_cat)c),
                     s.live_bytes[c]);
        cr_expect_eq(s.allocs[c], s.frees[c], "%s allocs %llu frees %llu",
                     ls_mem_cat_name((ls_mem_cat)c), (unsigned long long)s.allocs[c],
                     (unsigned long long)s.frees[c]);
        sum_peaks += s.peak_bytes[c];
        if (s.peak_bytes[c] > max_peak)
            max_peak = s.peak_bytes[c];
    }
    for (int c = 2 * N_THREADS; c < LS_MEM_COUNT; c++)
        cr_expect_eq(s.peak_bytes[c], 0, "untouched category %d has a peak", c);
    cr_expect_gt(s.allocs_total, (uint64_t)N_THREADS * N_ROUNDS / 4);
    /* the total peak is at least every category's peak, at most their sum,
     * and at most what the threads ever held at once */
    cr_expect_geq(s.peak_total, max_peak, "peak_total %zu < max category peak %zu",
                  s.peak_total, max_peak);
    cr_expect_leq(s.peak_total, sum_peaks, "peak_total %zu > sum of peaks %zu",
                  s.peak_total, sum_peaks);
    cr_expect_leq(s.peak_total, bound, "peak_total %zu > outstanding bound %zu",
                  s.peak_total, bound);
    /* no reset happened: the run peaks are the window peaks, and they keep
     * the same order under concurrency */
    cr_expect_eq(s.run_peak_total, s.peak_total);
    for (int c = 0; c < LS_MEM_COUNT; c++) {
        cr_expect_eq(s.run_peak_bytes[c], s.peak_bytes[c], "%s", ls_mem_cat_name((ls_mem_cat)c));
        cr_expect_geq(s.run_peak_total, s.run_peak_bytes[c]);
    }
}

Test(mem_tracker, threads_respect_budget, .timeout = 60)
{
    /* every thread holds about 4 blocks of ~1500 B on average, so 4 threads
     * want ~24000 B: a 10000 B budget must refuse some allocations, never
     * let live_total pass it, and count each refusal exactly once. */
    const size_t budget = 10000;
    ls_mem_set_budget(budget);
    worker_arg args[N_THREADS];
    run_workers(args);
    size_t refusals = 0;
    for (int i = 0; i < N_THREADS; i++)
        refusals += args[i].refusals;
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_gt(refusals, 0);
    cr_expect_eq(s.refused, refusals);
    cr_expect_leq(s.peak_total, budget, "peak_total %zu over budget", s.peak_total);
    cr_expect_eq(s.live_total, 0);
    cr_expect_eq(s.allocs_total, s.frees_total);
}

/* ---- RSS ---------------------------------------------------------------- */

Test(mem_tracker, peak_rss_grows_when_pages_are_touched)
{
    const size_t bytes = (size_t)128 << 20;
    const size_t slack = (size_t)16 << 20;
    size_t rss0 = ls_mem_current_rss_bytes();
    size_t peak0 = ls_mem_peak_rss_bytes();
    cr_assert_gt(rss0, 0);
    cr_assert_gt(peak0, 0);
    cr_expect_geq(peak0 + (1 << 20), rss0, "peak %zu < current %zu", peak0, rss0);

    unsigned char *p = ls_mem_alloc(LS_MEM_WEIGHTS, bytes);
    cr_assert_not_null(p);
    long page = 4096;
    for (size_t i = 0; i < bytes; i += (size_t)page)
        p[i] = (unsigned char)i | 1;
    size_t rss1 = ls_mem_current_rss_bytes();
    size_t peak1 = ls_mem_peak_rss_bytes();
    cr_expect_geq(rss1, rss0 + bytes - slack, "current RSS %zu -> %zu after touching %zu",
                  rss0, rss1, bytes);
    cr_expect_geq(peak1, rss0 + bytes - slack, "peak RSS %zu -> %zu after touching %zu",
                  peak0, peak1, bytes);
    ls_mem_free(p);
    /* a high-water mark never falls */
    cr_expect_geq(ls_mem_peak_rss_bytes(), peak1);
}
