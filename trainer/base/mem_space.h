/* mem_space.h - where a buffer lives and who may touch its bytes: the
 * memory spaces (docs/design.md §3, "Memory spaces").
 *
 * A space is a kind of memory with an access rule:
 *   host         ordinary process memory: the host reads and writes it
 *   host_pinned  page-locked host memory (a GPU machine's host tier: the
 *                device reaches it by DMA); the host reads and writes it
 *   device       an accelerator's memory: only device code and the copy,
 *                fill and reduction operations of its provider touch it;
 *                the host never dereferences it
 * A pointer's space comes with its tracked allocation
 * (mem_tracker.h: ls_mem_alloc_in, ls_mem_space_of); the memory tiers map
 * onto spaces (mem_tracker.h: ls_mem_tier_space); a communicator backend
 * declares the spaces it moves (trainer/dist/comm.h), and the
 * communicator's front end touches a buffer's bytes only through the
 * operations below when its space is not host-readable.
 *
 * A space other than host is served by a provider (ls_mem_space_ops),
 * registered at start-up by the code that owns that memory: a GPU
 * backend registers its device space (cudaMalloc, cudaMemcpy, a kernel
 * for the fixed-order sum) and its pinned host space (cudaHostAlloc).
 * Without a provider, host_pinned is plain host memory (pinning is an
 * optimisation of the copies, not a different access rule) and device
 * memory cannot be allocated.  This CPU build ships one provider, the
 * guarded device space (ls_mem_space_guarded, mem_space_guard.c): device
 * memory made of host pages that are mapped inaccessible (PROT_NONE)
 * except inside the provider's own operations, so a host read or write
 * of a device buffer faults at once.  It lets the CPU build and its tests
 * prove that a code path never dereferences a device buffer on the host.
 *
 * Thread-safety: registration is an atomic pointer store per space (do it
 * before allocating in the space and unregister only when none of its
 * blocks is live); the operations are as thread-safe as the provider's. */
#ifndef LS_TRAINER_MEM_SPACE_H
#define LS_TRAINER_MEM_SPACE_H
#include <stddef.h>

#include "common/status.h"

/* The numbering is internal (names are what files and messages carry). */
typedef enum {
    LS_MEM_SPACE_HOST = 0,
    LS_MEM_SPACE_HOST_PINNED,
    LS_MEM_SPACE_DEVICE,
    LS_MEM_SPACE_COUNT
} ls_mem_space;

/* A set of spaces (a backend's: the spaces it moves). */
#define LS_MEM_SPACE_BIT(s) (1u << (unsigned)(s))
#define LS_MEM_SPACES_HOST_READABLE (LS_MEM_SPACE_BIT(LS_MEM_SPACE_HOST) | LS_MEM_SPACE_BIT(LS_MEM_SPACE_HOST_PINNED))
#define LS_MEM_SPACES_ALL ((1u << LS_MEM_SPACE_COUNT) - 1u)

/* Who may read and write a space's bytes directly. */
enum { LS_MEM_ACCESS_HOST = 1u, LS_MEM_ACCESS_DEVICE = 2u };
/* host: HOST; host_pinned: HOST | DEVICE; device: DEVICE; 0 out of range. */
unsigned ls_mem_space_access(ls_mem_space s);
/* 1 when host code may dereference the space's pointers (host, host_pinned). */
int ls_mem_space_host_readable(ls_mem_space s);
/* "host", "host_pinned", "device"; "unknown" out of range (static, never NULL). */
const char *ls_mem_space_name(ls_mem_space s);
/* The space named name; -1 for NULL or another name. */
int ls_mem_space_from_name(const char *name);

/* The element types of the fixed-order sum. */
typedef enum { LS_MEM_ELEM_F32 = 0, LS_MEM_ELEM_F64, LS_MEM_ELEM_I64 } ls_mem_elem;

/* A provider of one space.  Every entry is required. */
typedef struct {
    const char *name;   /* "guarded", "cuda", ... (messages) */
    ls_mem_space space; /* host_pinned or device (host is the process's own) */
    /* bytes (> 0) zeroed bytes, aligned to at least 64; NULL on failure.
     * Released with free(p, bytes) (the same bytes). */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p, size_t bytes);
    /* bytes from src to dst; dst_here and src_here say which of them is in
     * this space (at least one; the other host-readable); they may be
     * interior pointers of blocks; the ranges do not overlap. */
    void (*copy)(void *dst, int dst_here, const void *src, int src_here, size_t bytes);
    void (*zero)(void *p, size_t bytes); /* p (in this space) */
    /* dst[i] = s[0][i] + s[1][i] + ... + s[parts-1][i], added left to right
     * (i64 wrapping), s[r] = src + r*k elements; dst and src in this space,
     * not overlapping.  The same association as the host's, so the result is
     * bitwise what ls_mem_sum_ordered gives in host memory. */
    void (*sum_ordered)(void *dst, const void *src, size_t k, int parts, ls_mem_elem e);
} ls_mem_space_ops;

/* Registers ops as the provider of ops->space (replacing one before).
 * LS_ERR_ARG for NULL, a missing entry, or space host. */
ls_status ls_mem_space_register(const ls_mem_space_ops *ops);
/* Removes the provider of s (nothing when none). */
void ls_mem_space_unregister(ls_mem_space s);
/* The provider of s; NULL for host and for a space without one. */
const ls_mem_space_ops *ls_mem_space_provider(ls_mem_space s);

/* Copies bytes from src (in space ss) to dst (in space ds) through the
 * provider of whichever is not host-readable (memcpy when both are).
 * LS_ERR_ARG for a space out of range, a non-host-readable space without a
 * provider, or two different non-host-readable spaces' providers. */
ls_status ls_mem_copy(void *dst, ls_mem_space ds, const void *src, ls_mem_space ss, size_t bytes);
/* Zeroes bytes at p (in space s); errors as ls_mem_copy. */
ls_status ls_mem_zero(void *p, ls_mem_space s, size_t bytes);
/* The fixed-order sum above (ls_mem_space_ops.sum_ordered) of k elements of
 * parts contributions in space s: on the host for a host-readable space,
 * else by s's provider.  LS_ERR_ARG as ls_mem_copy, or parts < 1. */
ls_status ls_mem_sum_ordered(void *dst, const void *src, size_t k, int parts, ls_mem_elem e, ls_mem_space s);

/* The host's fixed-order sum on host-addressable memory, for a provider
 * whose memory the host can address once opened (the guarded space). */
void ls_mem_space_host_sum(void *dst, const void *src, size_t k, int parts, ls_mem_elem e);

/* The guarded device space (mem_space_guard.c): register it with
 * ls_mem_space_register(&ls_mem_space_guarded).  Each block is its own
 * anonymous mapping of whole pages, PROT_NONE but inside the provider's
 * operations (one process-wide lock around each), so any host access to a
 * device buffer outside them is a SIGSEGV at the faulting instruction. */
extern const ls_mem_space_ops ls_mem_space_guarded;
#endif
