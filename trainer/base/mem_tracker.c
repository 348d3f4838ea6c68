/* mem_tracker.c - see mem_tracker.h.
 *
 * Block layout (one calloc per block):
 *
 *   raw ... [slack] [block_header] user (LS_MEM_ALIGN-aligned) ... user+size
 *
 * The header sits immediately before the user pointer and records the raw
 * pointer to free, the requested size and the category.  calloc (rather than
 * aligned allocation + memset) keeps large blocks lazily zeroed by the OS, so
 * an allocation does not touch its pages until the caller does.
 *
 * A block of a space with a provider (mem_space.h) has no header: the host
 * may not touch it.  Its base, size, category and space are kept in a table
 * (provider_blocks, under a mutex), which ls_mem_free, ls_mem_size and
 * ls_mem_space_of consult first while it is not empty.  The table is
 * searched linearly: right for the tests' and a GPU run's few large blocks;
 * a port that keeps many (every state page on the device) makes it a hash
 * (or asks its runtime, cudaPointerGetAttributes). */
#include "trainer/base/mem_tracker.h"

#include "kernels/scratch.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define BLOCK_MAGIC UINT64_C(0x4c536d656d426c6b) /* "LSmemBlk" */
#define FREED_MAGIC UINT64_C(0x4c53667265656421) /* "LSfreed!" */

typedef struct {
    uint64_t magic;
    void *raw;
    size_t size;
    uint32_t cat;
    uint32_t space; /* host, or host_pinned without a provider */
} block_header;

/* Worst-case bytes a block needs beyond the caller's request. */
#define BLOCK_OVERHEAD (sizeof(block_header) + LS_MEM_ALIGN - 1)

static const char *const cat_names[LS_MEM_COUNT] = {
    [LS_MEM_WEIGHTS] = "fixed_weights",
    [LS_MEM_ADAPTERS] = "adapters",
    [LS_MEM_OPTIMIZER] = "optimizer_state",
    [LS_MEM_GRADS] = "gradients",
    [LS_MEM_PROMPT_STATE] = "prompt_state",
    [LS_MEM_PROMPT_GRAD] = "prompt_state_grad",
    [LS_MEM_BRANCH] = "branch_graph",
    [LS_MEM_SCORE] = "scoring",
    [LS_MEM_SCRATCH] = "scratch",
    [LS_MEM_CHECKPOINT] = "recompute_checkpoints",
    [LS_MEM_COMM] = "communication",
    [LS_MEM_DISPATCH] = "moe_dispatch",
    [LS_MEM_PROMPT_STATE_HOST] = "prompt_state_host",
    [LS_MEM_STAGING] = "staging",
};

/* The process-global tracker.  Static storage: zero-initialised. */
static struct {
    _Atomic size_t live[LS_MEM_COUNT];
    _Atomic size_t peak[LS_MEM_COUNT];     /* since the last reset_peaks */
    _Atomic size_t run_peak[LS_MEM_COUNT]; /* never reset */
    _Atomic uint64_t allocs[LS_MEM_COUNT];
    _Atomic uint64_t frees[LS_MEM_COUNT];
    _Atomic size_t live_total;
    _Atomic size_t peak_total;
    _Atomic size_t run_peak_total;
    _Atomic uint64_t refused;
    _Atomic size_t budget;
    /* the host tier: its own total, peaks and budget */
    _Atomic size_t host_live, host_peak, host_run_peak, host_budget;
} g;

/* The blocks of spaces with a provider (header comment). */
typedef struct {
    void *p;
    size_t size;
    ls_mem_cat cat;
    const ls_mem_space_ops *ops;
} provider_block;
static struct {
    pthread_mutex_t mu;
    provider_block *v;
    size_t n, cap;
    _Atomic size_t live; /* n, read without the lock */
} pb = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The tiers' spaces (mem_tracker.h). */
static _Atomic int tier_space[2] = {LS_MEM_SPACE_HOST, LS_MEM_SPACE_HOST_PINNED};

ls_mem_tier ls_mem_cat_tier(ls_mem_cat cat)
{
    return cat == LS_MEM_PROMPT_STATE_HOST ? LS_TIER_HOST : LS_TIER_DEVICE;
}

ls_mem_space ls_mem_tier_space(ls_mem_tier tier)
{
    return tier == LS_TIER_HOST ? (ls_mem_space)atomic_load(&tier_space[1]) : (ls_mem_space)atomic_load(&tier_space[0]);
}

ls_status ls_mem_set_tier_space(ls_mem_tier tier, ls_mem_space space)
{
    if ((tier != LS_TIER_DEVICE && tier != LS_TIER_HOST) || (int)space < 0 || space >= LS_MEM_SPACE_COUNT)
        return LS_ERR_ARG;
    atomic_store(&tier_space[tier == LS_TIER_HOST], (int)space);
    return LS_OK;
}

ls_mem_space ls_mem_cat_space(ls_mem_cat cat)
{
    return ls_mem_tier_space(ls_mem_cat_tier(cat));
}

const char *ls_mem_cat_name(ls_mem_cat cat)
{
    if ((int)cat < 0 || cat >= LS_MEM_COUNT)
        return "unknown";
    return cat_names[cat];
}

/* Raise *peak to v unless it is already >= v (CAS loop). */
static void raise_peak(_Atomic size_t *peak, size_t v)
{
    size_t cur = atomic_load(peak);
    while (v > cur && !atomic_compare_exchange_weak(peak, &cur, v)) {
        /* cur reloaded by the failed CAS */
    }
}

/* Reserve `bytes` of a tier's total against its budget; false when refused. */
static int reserve_in(_Atomic size_t *live, _Atomic size_t *budget_p, _Atomic size_t *peak, _Atomic size_t *run_peak,
                      size_t bytes)
{
    size_t cur = atomic_load(live);
    size_t next;
    do {
        size_t budget = atomic_load(budget_p);
        if (cur > SIZE_MAX - bytes)
            return 0;
        next = cur + bytes;
        if (budget != 0 && next > budget)
            return 0;
    } while (!atomic_compare_exchange_weak(live, &cur, next));
    raise_peak(peak, next);
    raise_peak(run_peak, next);
    return 1;
}

static int reserve_total(ls_mem_cat cat, size_t bytes)
{
    if (ls_mem_cat_tier(cat) == LS_TIER_HOST)
        return reserve_in(&g.host_live, &g.host_budget, &g.host_peak, &g.host_run_peak, bytes);
    return reserve_in(&g.live_total, &g.budget, &g.peak_total, &g.run_peak_total, bytes);
}

static _Atomic size_t *tier_live(ls_mem_cat cat)
{
    return ls_mem_cat_tier(cat) == LS_TIER_HOST ? &g.host_live : &g.live_total;
}

static void charge(ls_mem_cat cat, size_t bytes)
{
    size_t now = atomic_fetch_add(&g.live[cat], bytes) + bytes;
    raise_peak(&g.peak[cat], now);
    raise_peak(&g.run_peak[cat], now);
    atomic_fetch_add(&g.allocs[cat], 1);
}

static block_header *header_of(const void *p)
{
    return (block_header *)((uintptr_t)p - sizeof(block_header));
}

/* Index of the provider block based at p (under pb.mu), or pb.n. */
static size_t pb_find(const void *p)
{
    size_t i = 0;
    while (i < pb.n && pb.v[i].p != p)
        i++;
    return i;
}

static void *alloc_provider(ls_mem_cat cat, const ls_mem_space_ops *ops, size_t bytes)
{
    if (!reserve_total(cat, bytes)) {
        atomic_fetch_add(&g.refused, 1);
        return NULL;
    }
    void *p = ops->alloc(bytes ? bytes : 1); /* 0 bytes: a unique pointer, accounted 0 */
    int ok = p != NULL;
    if (ok) {
        pthread_mutex_lock(&pb.mu);
        if (pb.n == pb.cap) {
            size_t cap = pb.cap ? 2 * pb.cap : 16;
            provider_block *v = realloc(pb.v, cap * sizeof *v);
            if (v) {
                pb.v = v;
                pb.cap = cap;
            }
        }
        ok = pb.n < pb.cap;
        if (ok) {
            pb.v[pb.n++] = (provider_block){p, bytes, cat, ops};
            atomic_store(&pb.live, pb.n);
        }
        pthread_mutex_unlock(&pb.mu);
        if (!ok)
            ops->free(p, bytes ? bytes : 1);
    }
    if (!ok) {
        atomic_fetch_sub(tier_live(cat), bytes);
        atomic_fetch_add(&g.refused, 1);
        return NULL;
    }
    charge(cat, bytes);
    return p;
}

static void *alloc_host(ls_mem_cat cat, ls_mem_space space, size_t bytes);

void *ls_mem_alloc(ls_mem_cat cat, size_t bytes)
{
    return alloc_host(cat, LS_MEM_SPACE_HOST, bytes);
}

void *ls_mem_alloc_in(ls_mem_cat cat, ls_mem_space space, size_t bytes)
{
    const ls_mem_space_ops *ops = ls_mem_space_provider(space);
    int ok_cat = (int)cat >= 0 && cat < LS_MEM_COUNT;
    if (ok_cat && ops && bytes <= SIZE_MAX - BLOCK_OVERHEAD)
        return alloc_provider(cat, ops, bytes);
    if (space == LS_MEM_SPACE_HOST || space == LS_MEM_SPACE_HOST_PINNED)
        return alloc_host(cat, space, bytes);
    atomic_fetch_add(&g.refused, 1); /* device without a provider, or out of range */
    return NULL;
}

ls_mem_space ls_mem_space_of(const void *p)
{
    if (p == NULL || atomic_load(&pb.live) == 0)
        return LS_MEM_SPACE_HOST;
    ls_mem_space s = LS_MEM_SPACE_HOST;
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&pb.mu);
    for (size_t i = 0; i < pb.n; i++) {
        uintptr_t b = (uintptr_t)pb.v[i].p;
        if (a >= b && a - b < (pb.v[i].size ? pb.v[i].size : 1)) {
            s = pb.v[i].ops->space;
            break;
        }
    }
    pthread_mutex_unlock(&pb.mu);
    return s;
}

/* 1 when p was a provider block (now released). */
static int free_provider(void *p)
{
    if (atomic_load(&pb.live) == 0)
        return 0;
    pthread_mutex_lock(&pb.mu);
    size_t i = pb_find(p);
    if (i == pb.n) {
        pthread_mutex_unlock(&pb.mu);
        return 0;
    }
    provider_block b = pb.v[i];
    pb.v[i] = pb.v[--pb.n];
    atomic_store(&pb.live, pb.n);
    pthread_mutex_unlock(&pb.mu);
    atomic_fetch_sub(&g.live[b.cat], b.size);
    atomic_fetch_add(&g.frees[b.cat], 1);
    atomic_fetch_sub(tier_live(b.cat), b.size);
    b.ops->free(p, b.size ? b.size : 1);
    return 1;
}

/* ls_mem_size of a provider block: 1 with *size when p is one. */
static int size_provider(const void *p, size_t *size)
{
    if (atomic_load(&pb.live) == 0)
        return 0;
    pthread_mutex_lock(&pb.mu);
    size_t i = pb_find(p);
    int found = i < pb.n;
    if (found)
        *size = pb.v[i].size;
    pthread_mutex_unlock(&pb.mu);
    return found;
}

static void *alloc_host(ls_mem_cat cat, ls_mem_space space, size_t bytes)
{
    if ((int)cat < 0 || cat >= LS_MEM_COUNT || bytes > SIZE_MAX - BLOCK_OVERHEAD) {
        atomic_fetch_add(&g.refused, 1);
        return NULL;
    }
    if (!reserve_total(cat, bytes)) {
        atomic_fetch_add(&g.refused, 1);
        return NULL;
    }
    void *raw = calloc(1, bytes + BLOCK_OVERHEAD);
    if (raw == NULL) {
        atomic_fetch_sub(tier_live(cat), bytes);
        atomic_fetch_add(&g.refused, 1);
        return NULL;
    }
    uintptr_t user = ((uintptr_t)raw + sizeof(block_header) + LS_MEM_ALIGN - 1)
                     & ~(uintptr_t)(LS_MEM_ALIGN - 1);
    block_header *h = header_of((void *)user);
    h->magic = BLOCK_MAGIC;
    h->raw = raw;
    h->size = bytes;
    h->cat = (uint32_t)cat;
    h->space = (uint32_t)space;
    charge(cat, bytes);
    return (void *)user;
}

void ls_mem_free(void *p)
{
    if (p == NULL || free_provider(p))
        return;
    block_header *h = header_of(p);
    assert(h->magic == BLOCK_MAGIC && "ls_mem_free: not a tracker block (or freed twice)");
    if (h->magic != BLOCK_MAGIC || h->cat >= LS_MEM_COUNT)
        return; /* leaking is safer than corrupting the heap */
    ls_mem_cat cat = (ls_mem_cat)h->cat;
    size_t bytes = h->size;
    void *raw = h->raw;
    h->magic = FREED_MAGIC;
    /* category first, total last: keeps total >= sum of categories */
    atomic_fetch_sub(&g.live[cat], bytes);
    atomic_fetch_add(&g.frees[cat], 1);
    atomic_fetch_sub(tier_live(cat), bytes);
    free(raw);
}

size_t ls_mem_size(const void *p)
{
    size_t size = 0;
    if (p == NULL)
        return 0;
    if (size_provider(p, &size))
        return size;
    const block_header *h = header_of(p);
    assert(h->magic == BLOCK_MAGIC);
    return h->magic == BLOCK_MAGIC ? h->size : 0;
}

void *ls_mem_realloc(ls_mem_cat cat, void *p, size_t bytes)
{
    ls_mem_space space = LS_MEM_SPACE_HOST;
    size_t psize = 0;
    if (p) /* a provider's block, else the header's: host or unprovided host_pinned */
        space = size_provider(p, &psize) ? ls_mem_space_of(p) : (ls_mem_space)header_of(p)->space;
    void *q = ls_mem_alloc_in(cat, space, bytes);
    if (q == NULL || p == NULL)
        return q;
    size_t old = ls_mem_size(p);
    if (ls_mem_copy(q, space, p, space, old < bytes ? old : bytes) != LS_OK) {
        ls_mem_free(q);
        return NULL;
    }
    ls_mem_free(p);
    return q;
}

void ls_mem_set_host_budget(size_t host_bytes)
{
    atomic_store(&g.host_budget, host_bytes);
}

void ls_mem_set_budget(size_t total_bytes)
{
    atomic_store(&g.budget, total_bytes);
}

void ls_mem_snapshot(ls_mem_stats *out)
{
    assert(out != NULL);
    memset(out, 0, sizeof *out);
    for (int c = 0; c < LS_MEM_COUNT; c++) {
        out->live_bytes[c] = atomic_load(&g.live[c]);
        out->peak_bytes[c] = atomic_load(&g.peak[c]);
        out->run_peak_bytes[c] = atomic_load(&g.run_peak[c]);
        out->allocs[c] = atomic_load(&g.allocs[c]);
        out->frees[c] = atomic_load(&g.frees[c]);
        out->allocs_total += out->allocs[c];
        out->frees_total += out->frees[c];
    }
    out->live_total = atomic_load(&g.live_total);
    out->peak_total = atomic_load(&g.peak_total);
    out->run_peak_total = atomic_load(&g.run_peak_total);
    out->refused = atomic_load(&g.refused);
    out->budget_bytes = atomic_load(&g.budget);
    out->host_live_total = atomic_load(&g.host_live);
    out->host_peak_total = atomic_load(&g.host_peak);
    out->host_run_peak_total = atomic_load(&g.host_run_peak);
    out->host_budget_bytes = atomic_load(&g.host_budget);
}

void ls_mem_reset_peaks(void)
{
    for (int c = 0; c < LS_MEM_COUNT; c++)
        atomic_store(&g.peak[c], atomic_load(&g.live[c]));
    atomic_store(&g.peak_total, atomic_load(&g.live_total));
    atomic_store(&g.host_peak, atomic_load(&g.host_live));
}

static void *kernel_scratch_alloc(size_t bytes)
{
    return ls_mem_alloc(LS_MEM_SCRATCH, bytes);
}

static const ls_kernel_allocator tracked_kernel_scratch = {kernel_scratch_alloc, ls_mem_free};

void ls_mem_track_kernel_scratch(void)
{
    ls_kernel_scratch_set(&tracked_kernel_scratch);
}

/* First unsigned number after `key` on its line in `path`, or 0. */
static size_t proc_field_kib(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[256];
    size_t kib = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, klen) == 0) {
            unsigned long long v = 0;
            if (sscanf(line + klen, " %llu", &v) == 1)
                kib = (size_t)v;
            break;
        }
    }
    fclose(f);
    return kib;
}

size_t ls_mem_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0)
        return (size_t)ru.ru_maxrss * 1024; /* Linux: KiB */
    return proc_field_kib("/proc/self/status", "VmHWM:") * 1024;
}

size_t ls_mem_current_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    unsigned long long size_pages = 0, resident_pages = 0;
    int n = fscanf(f, "%llu %llu", &size_pages, &resident_pages);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (n != 2 || page <= 0)
        return 0;
    return (size_t)resident_pages * (size_t)page;
}
