/* tier.h - copies between the memory tiers (--state-tier host,
 * docs/design.md §3): the host tier's rows staged into device-tier buffers
 * before a layer reads them.
 *
 * The interface a GPU backend implements with asynchronous copies
 * (cudaMemcpyAsync on a copy stream from pinned host memory, an event per
 * handle): ls_tier_stage_begin starts one copy and returns at once;
 * ls_tier_stage_wait(h) returns once that copy and every copy begun before
 * it are complete (copies complete in the order begun).  On this CPU build
 * both tiers are RAM and one helper thread, started on the first copy, does
 * the memcpys in order, so a layer's compute overlaps the next layer's
 * staging.  Copies bytes, computes nothing: what a reader sees after the
 * wait is bit for bit what the source held.
 *
 * Spaces (mem_space.h): each side's space is the space of its block
 * (ls_mem_space_of, taken at begin): the tiers' spaces
 * (ls_mem_tier_space: a host tier in host_pinned memory, staging buffers in
 * the device tier's space) are what stage.c allocates them in.  A copy whose
 * side is in a space the host may not touch goes through that space's
 * provider (ls_mem_copy); host-readable to host-readable is a memcpy.
 *
 * Accounting (ls_tier_stats): bytes and copies begun, the helper's copy
 * time, and the time callers spent blocked in ls_tier_stage_wait (the part
 * of the staging the compute did not hide).  Thread-safe: any thread may
 * begin and wait. */
#ifndef LS_TRAINER_TIER_H
#define LS_TRAINER_TIER_H
#include <stddef.h>
#include <stdint.h>

typedef uint64_t ls_tier_handle; /* 0: nothing to wait for */

/* Begin copying `bytes` from src_host to dst_device (neither may change
 * or be freed until a wait on the returned handle).  bytes 0: handle of
 * the copies begun so far.  Never fails: when the helper thread cannot be
 * started the copy is done before returning. */
ls_tier_handle ls_tier_stage_begin(void *dst_device, const void *src_host, size_t bytes);

/* Block until the copy h (and every copy begun before it) is complete. */
void ls_tier_stage_wait(ls_tier_handle h);

typedef struct {
    uint64_t bytes;   /* bytes staged, cumulative */
    uint64_t copies;  /* copies begun, cumulative */
    int64_t copy_ns;  /* the helper's time copying, cumulative */
    int64_t wait_ns;  /* callers' time blocked in ls_tier_stage_wait, cumulative */
} ls_tier_stats;

void ls_tier_stats_get(ls_tier_stats *out);

/* Finish every copy begun and stop the helper thread (a later begin starts
 * it again).  Registered with atexit on the first start. */
void ls_tier_shutdown(void);
#endif
