/* test_mem_space.c - the memory spaces (trainer/base/mem_space.h) and the
 * tracker, arena and tier on them, with the guarded device space (device
 * memory the host cannot touch):
 *  - names, access rules, provider registration and its refusals;
 *  - ls_mem_alloc_in: device refused without a provider; with the guarded
 *    one a block whose space ls_mem_space_of names (interior pointers
 *    too), accounted exactly, copied, zeroed, resized and freed through the
 *    provider; host_pinned without a provider is host memory;
 *  - the fixed-order sum in device memory equals the host's bitwise, over
 *    inputs whose sum depends on the association (so another order fails);
 *  - an arena in device space hands out device pointers, zeroed, and its
 *    bookkeeping stays host memory;
 *  - tier staging copies host rows into a device block and back, bit for bit;
 *    the tiers' spaces default to host / host_pinned and can be set;
 *  - fault injection: a host read and a host write of a device buffer are
 *    caught (SIGSEGV, turned into a flag here), and the same read of the
 *    bytes copied to the host is not. */
#include <criterion/criterion.h>

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "trainer/base/arena.h"
#include "trainer/base/mem_space.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/tier.h"

/* ---- catching a host access of device memory ------------------------------------------------------- */

static sigjmp_buf jb;
static void on_segv(int sig) {
    (void)sig;
    siglongjmp(jb, 1);
}

/* 1 when fn(arg) faults (SIGSEGV or SIGBUS), 0 when it returns. */
static int faults(void (*fn)(void *), void *arg) {
    struct sigaction sa = {0}, old_segv, old_bus;
    sa.sa_handler = on_segv;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    int caught = 0;
    if (sigsetjmp(jb, 1) == 0) fn(arg);
    else caught = 1;
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    return caught;
}

static volatile double sink;
static void host_read(void *p) { sink = *(volatile const double *)p; }
static void host_write(void *p) { *(volatile double *)p = 1.0; }

static void guarded(void) { cr_assert_eq(ls_mem_space_register(&ls_mem_space_guarded), LS_OK); }

/* ---- names and registration ---------------------------------------------------------------------- */

Test(mem_space, names_and_access) {
    for (int s = 0; s < LS_MEM_SPACE_COUNT; s++)
        cr_assert_eq(ls_mem_space_from_name(ls_mem_space_name((ls_mem_space)s)), s);
    cr_assert_eq(ls_mem_space_from_name("gpu"), -1);
    cr_assert_eq(ls_mem_space_from_name(NULL), -1);
    cr_assert_str_eq(ls_mem_space_name((ls_mem_space)7), "unknown");
    cr_assert(ls_mem_space_host_readable(LS_MEM_SPACE_HOST));
    cr_assert(ls_mem_space_host_readable(LS_MEM_SPACE_HOST_PINNED));
    cr_assert(!ls_mem_space_host_readable(LS_MEM_SPACE_DEVICE));
    cr_assert_eq(ls_mem_space_access(LS_MEM_SPACE_DEVICE), LS_MEM_ACCESS_DEVICE);
    cr_assert_eq(ls_mem_space_access(LS_MEM_SPACE_HOST_PINNED), LS_MEM_ACCESS_HOST | LS_MEM_ACCESS_DEVICE);
}

Test(mem_space, register_refusals) {
    ls_mem_space_ops bad = ls_mem_space_guarded;
    cr_assert_eq(ls_mem_space_register(NULL), LS_ERR_ARG);
    bad.space = LS_MEM_SPACE_HOST; /* host is the process's own */
    cr_assert_eq(ls_mem_space_register(&bad), LS_ERR_ARG);
    bad = ls_mem_space_guarded;
    bad.sum_ordered = NULL;
    cr_assert_eq(ls_mem_space_register(&bad), LS_ERR_ARG);
    cr_assert_null(ls_mem_space_provider(LS_MEM_SPACE_DEVICE));
    guarded();
    cr_assert_eq(ls_mem_space_provider(LS_MEM_SPACE_DEVICE), &ls_mem_space_guarded);
    ls_mem_space_unregister(LS_MEM_SPACE_DEVICE);
    cr_assert_null(ls_mem_space_provider(LS_MEM_SPACE_DEVICE));
}

/* ---- tracked blocks ------------------------------------------------------------------------------- */

Test(mem_space, device_needs_a_provider) {
    ls_mem_stats a, b;
    ls_mem_snapshot(&a);
    cr_assert_null(ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 64));
    cr_assert_null(ls_mem_alloc_in(LS_MEM_COMM, (ls_mem_space)9, 64));
    ls_mem_snapshot(&b);
    cr_assert_eq(b.refused, a.refused + 2);
    cr_assert_eq(b.live_bytes[LS_MEM_COMM], a.live_bytes[LS_MEM_COMM]);
    double x = 1, y = 0;
    cr_assert_eq(ls_mem_copy(&y, LS_MEM_SPACE_HOST, &x, LS_MEM_SPACE_DEVICE, sizeof x), LS_ERR_ARG);
    cr_assert_eq(ls_mem_zero(&y, LS_MEM_SPACE_DEVICE, sizeof y), LS_ERR_ARG);
    cr_assert_eq(y, 0.0);
}

Test(mem_space, pinned_without_provider_is_host) {
    double *p = ls_mem_alloc_in(LS_MEM_PROMPT_STATE_HOST, LS_MEM_SPACE_HOST_PINNED, 8 * sizeof *p);
    cr_assert_not_null(p);
    p[7] = 3.5; /* host memory: readable and writable */
    cr_assert_eq(ls_mem_space_of(p), LS_MEM_SPACE_HOST);
    cr_assert_eq(ls_mem_size(p), 8 * sizeof *p);
    double *q = ls_mem_realloc(LS_MEM_PROMPT_STATE_HOST, p, 16 * sizeof *q);
    cr_assert_not_null(q);
    cr_assert_eq(q[7], 3.5);
    cr_assert_eq(q[15], 0.0);
    ls_mem_free(q);
}

Test(mem_space, device_block_lifecycle) {
    guarded();
    ls_mem_stats a, b;
    ls_mem_snapshot(&a);
    size_t n = 1000;
    double *d = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, n * sizeof *d);
    cr_assert_not_null(d);
    ls_mem_snapshot(&b);
    cr_assert_eq(b.live_bytes[LS_MEM_COMM] - a.live_bytes[LS_MEM_COMM], n * sizeof *d, "accounted exactly");
    cr_assert_eq(b.live_total - a.live_total, n * sizeof *d);
    cr_assert_eq(ls_mem_size(d), n * sizeof *d);
    cr_assert_eq(ls_mem_space_of(d), LS_MEM_SPACE_DEVICE);
    cr_assert_eq(ls_mem_space_of(d + n - 1), LS_MEM_SPACE_DEVICE, "an interior pointer");
    double host[1000], back[1000];
    cr_assert_eq(ls_mem_space_of(host), LS_MEM_SPACE_HOST);
    /* zeroed by the provider */
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, d, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    for (size_t i = 0; i < n; i++) cr_assert_eq(back[i], 0.0);
    for (size_t i = 0; i < n; i++) host[i] = (double)i * 0.25 - 7;
    cr_assert_eq(ls_mem_copy(d, LS_MEM_SPACE_DEVICE, host, LS_MEM_SPACE_HOST, sizeof host), LS_OK);
    /* resized in its space, the contents kept, the growth zeroed */
    double *e = ls_mem_realloc(LS_MEM_COMM, d, 2 * n * sizeof *e);
    cr_assert_not_null(e);
    cr_assert_eq(ls_mem_space_of(e), LS_MEM_SPACE_DEVICE);
    double back2[2000];
    cr_assert_eq(ls_mem_copy(back2, LS_MEM_SPACE_HOST, e, LS_MEM_SPACE_DEVICE, sizeof back2), LS_OK);
    cr_assert_eq(memcmp(back2, host, sizeof host), 0);
    for (size_t i = n; i < 2 * n; i++) cr_assert_eq(back2[i], 0.0);
    cr_assert_eq(ls_mem_zero(e + 10, LS_MEM_SPACE_DEVICE, 5 * sizeof *e), LS_OK);
    cr_assert_eq(ls_mem_copy(back2, LS_MEM_SPACE_HOST, e, LS_MEM_SPACE_DEVICE, sizeof back2), LS_OK);
    for (size_t i = 0; i < 20; i++) cr_assert_eq(back2[i], i >= 10 && i < 15 ? 0.0 : host[i]);
    /* a device-to-device copy stays in the provider */
    double *f = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, n * sizeof *f);
    cr_assert_eq(ls_mem_copy(f, LS_MEM_SPACE_DEVICE, e, LS_MEM_SPACE_DEVICE, n * sizeof *f), LS_OK);
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, f, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    cr_assert_eq(back[12], 0.0);
    cr_assert_eq(back[20], host[20]);
    ls_mem_free(e);
    ls_mem_free(f);
    ls_mem_snapshot(&b);
    cr_assert_eq(b.live_bytes[LS_MEM_COMM], a.live_bytes[LS_MEM_COMM]);
    cr_assert_eq(ls_mem_space_of(e), LS_MEM_SPACE_HOST, "freed: no longer a device block");
    /* a zero-byte device block: a unique pointer accounting 0 */
    void *z = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 0);
    cr_assert_not_null(z);
    cr_assert_eq(ls_mem_size(z), 0);
    ls_mem_free(z);
}

/* The budget holds for device blocks too. */
Test(mem_space, device_block_under_budget) {
    guarded();
    ls_mem_stats a;
    ls_mem_snapshot(&a);
    ls_mem_set_budget(a.live_total + 4096);
    cr_assert_null(ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 8192));
    void *p = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 4096);
    cr_assert_not_null(p);
    ls_mem_free(p);
    ls_mem_set_budget(0);
}

/* ---- the fixed-order sum in device memory ----------------------------------------------------------- */

Test(mem_space, device_sum_is_the_host_sum) {
    guarded();
    enum { K = 5, P = 3 };
    /* contributions in rank order: (x + 1) + (-x) is 0 for x = 1e16 in doubles, x + (-x) + 1 is 1 */
    double src[P * K], want[K], got[K];
    for (int i = 0; i < K; i++) {
        double x = i == 0 ? 1e16 : 1.5 * i;
        src[i] = x, src[K + i] = 1.0, src[2 * K + i] = -x;
    }
    cr_assert_eq(ls_mem_sum_ordered(want, src, K, P, LS_MEM_ELEM_F64, LS_MEM_SPACE_HOST), LS_OK);
    cr_assert_eq(want[0], 0.0, "the host sum adds in rank order");
    double *ds = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, sizeof src);
    double *dd = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, sizeof got);
    cr_assert_eq(ls_mem_copy(ds, LS_MEM_SPACE_DEVICE, src, LS_MEM_SPACE_HOST, sizeof src), LS_OK);
    cr_assert_eq(ls_mem_sum_ordered(dd, ds, K, P, LS_MEM_ELEM_F64, LS_MEM_SPACE_DEVICE), LS_OK);
    cr_assert_eq(ls_mem_copy(got, LS_MEM_SPACE_HOST, dd, LS_MEM_SPACE_DEVICE, sizeof got), LS_OK);
    cr_assert_eq(memcmp(got, want, sizeof got), 0, "device sum %g vs host %g", got[0], want[0]);
    /* i64 wraps the same way */
    int64_t is[2 * K], iw[K], ig[K];
    for (int i = 0; i < 2 * K; i++) is[i] = i % 2 ? INT64_MAX : (int64_t)i;
    int64_t *di = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, sizeof is);
    cr_assert_eq(ls_mem_copy(di, LS_MEM_SPACE_DEVICE, is, LS_MEM_SPACE_HOST, sizeof is), LS_OK);
    cr_assert_eq(ls_mem_sum_ordered(iw, is, K, 2, LS_MEM_ELEM_I64, LS_MEM_SPACE_HOST), LS_OK);
    cr_assert_eq(ls_mem_sum_ordered(di, di + K, 0, 2, LS_MEM_ELEM_I64, LS_MEM_SPACE_DEVICE), LS_OK); /* k 0 */
    int64_t *dio = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, sizeof ig);
    cr_assert_eq(ls_mem_sum_ordered(dio, di, K, 2, LS_MEM_ELEM_I64, LS_MEM_SPACE_DEVICE), LS_OK);
    cr_assert_eq(ls_mem_copy(ig, LS_MEM_SPACE_HOST, dio, LS_MEM_SPACE_DEVICE, sizeof ig), LS_OK);
    cr_assert_eq(memcmp(ig, iw, sizeof ig), 0);
    cr_assert_eq(ls_mem_sum_ordered(dd, ds, K, 0, LS_MEM_ELEM_F64, LS_MEM_SPACE_DEVICE), LS_ERR_ARG);
    ls_mem_free(ds), ls_mem_free(dd), ls_mem_free(di), ls_mem_free(dio);
}

/* ---- arena and tier --------------------------------------------------------------------------------- */

Test(mem_space, arena_in_device_space) {
    guarded();
    ls_mem_stats a, b;
    ls_mem_snapshot(&a);
    ls_arena ar;
    ls_arena_init_in(&ar, LS_MEM_BRANCH, LS_MEM_SPACE_DEVICE, 0);
    double *p = ls_arena_alloc(&ar, 100 * sizeof *p), *q = ls_arena_alloc(&ar, 40000 * sizeof *q);
    cr_assert(p && q && !ar.failed);
    cr_assert_eq(ls_mem_space_of(p), LS_MEM_SPACE_DEVICE);
    cr_assert_eq(ls_mem_space_of(q + 39999), LS_MEM_SPACE_DEVICE);
    cr_assert_eq((uintptr_t)p % 64, 0);
    double back[100];
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, p, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    for (int i = 0; i < 100; i++) cr_assert_eq(back[i], 0.0);
    ls_mem_snapshot(&b);
    cr_assert_geq(b.live_bytes[LS_MEM_BRANCH] - a.live_bytes[LS_MEM_BRANCH], ar.used_bytes);
    ls_arena_free(&ar);
    ls_mem_snapshot(&b);
    cr_assert_eq(b.live_bytes[LS_MEM_BRANCH], a.live_bytes[LS_MEM_BRANCH]);
    /* without a provider the device arena refuses, it does not fall back to host memory */
    ls_mem_space_unregister(LS_MEM_SPACE_DEVICE);
    ls_arena_init_in(&ar, LS_MEM_BRANCH, LS_MEM_SPACE_DEVICE, 0);
    cr_assert_null(ls_arena_alloc(&ar, 64));
    cr_assert(ar.failed);
    ls_arena_free(&ar);
}

Test(mem_space, tier_spaces_and_staging) {
    cr_assert_eq(ls_mem_tier_space(LS_TIER_DEVICE), LS_MEM_SPACE_HOST, "this CPU build computes on the host");
    cr_assert_eq(ls_mem_tier_space(LS_TIER_HOST), LS_MEM_SPACE_HOST_PINNED);
    cr_assert_eq(ls_mem_cat_space(LS_MEM_PROMPT_STATE_HOST), LS_MEM_SPACE_HOST_PINNED);
    cr_assert_eq(ls_mem_set_tier_space((ls_mem_tier)5, LS_MEM_SPACE_HOST), LS_ERR_ARG);
    cr_assert_eq(ls_mem_set_tier_space(LS_TIER_DEVICE, (ls_mem_space)5), LS_ERR_ARG);
    guarded();
    cr_assert_eq(ls_mem_set_tier_space(LS_TIER_DEVICE, LS_MEM_SPACE_DEVICE), LS_OK);
    cr_assert_eq(ls_mem_cat_space(LS_MEM_STAGING), LS_MEM_SPACE_DEVICE);
    enum { N = 3000 };
    double *rows = ls_mem_alloc_in(LS_MEM_PROMPT_STATE_HOST, ls_mem_cat_space(LS_MEM_PROMPT_STATE_HOST), N * 8);
    double *stage = ls_mem_alloc_in(LS_MEM_STAGING, ls_mem_cat_space(LS_MEM_STAGING), N * 8);
    cr_assert(rows && stage);
    for (int i = 0; i < N; i++) rows[i] = 1.0 / (i + 1);
    ls_tier_handle h = ls_tier_stage_begin(stage, rows, N / 2 * 8);
    h = ls_tier_stage_begin(stage + N / 2, rows + N / 2, (N - N / 2) * 8);
    ls_tier_stage_wait(h);
    double back[N];
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, stage, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    cr_assert_eq(memcmp(back, rows, sizeof back), 0, "staged bit for bit");
    cr_assert(faults(host_read, stage), "the staged rows are device memory");
    ls_mem_free(rows);
    ls_mem_free(stage);
    ls_tier_shutdown();
}

/* ---- fault injection: the host touching device memory is caught ------------------------------------ */

Test(mem_space, host_access_of_device_memory_faults) {
    guarded();
    double *d = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 4096 * sizeof *d);
    cr_assert_not_null(d);
    cr_assert(faults(host_read, d), "a host read of a device buffer is caught");
    cr_assert(faults(host_read, d + 4095), "at its end too");
    cr_assert(faults(host_write, d + 100), "a host write too");
    double h = 2.5;
    cr_assert_eq(ls_mem_copy(d + 100, LS_MEM_SPACE_DEVICE, &h, LS_MEM_SPACE_HOST, sizeof h), LS_OK);
    double back = 0;
    cr_assert_eq(ls_mem_copy(&back, LS_MEM_SPACE_HOST, d + 100, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    cr_assert(!faults(host_read, &back), "the control: the same read of host memory passes");
    cr_assert_eq(back, 2.5);
    cr_assert(faults(host_read, d + 100), "closed again after the provider's copy");
    ls_mem_free(d);
}
