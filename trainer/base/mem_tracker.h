/* mem_tracker.h - categorised allocation accounting for the trainer.
 *
 * Every trainer allocation goes through ls_mem_alloc with one category
 * (docs/design.md §3).  The tracker is process-global and thread-safe (C11
 * atomics, no locks): it keeps, per category and in total, the live bytes,
 * two peaks of the live bytes and the allocation/free counts.  Receipts
 * report these figures under the names of ls_mem_cat_name().
 *
 * The two peaks differ in scope.  The window peaks (peak_bytes, peak_total)
 * are high-water marks since the last ls_mem_reset_peaks (the trainer resets
 * them at the start of every step, so they are that step's peaks).  The run
 * peaks (run_peak_bytes, run_peak_total) are high-water marks over the whole
 * process lifetime; nothing resets them.
 *
 * What is accounted: exactly the byte count the caller asked for.  The
 * hidden header and the alignment slack each block carries (under 128 bytes)
 * are not counted, so every figure equals the sum of the caller's requests
 * and a test can check it exactly.  The process RSS functions at the bottom
 * report what the operating system sees, slack and all.
 *
 * Ordering: on allocation the total is reserved before the category is
 * charged, and on free the category is credited before the total; so at any
 * instant a tier's total live >= the sum of its categories' live bytes, and the total
 * peak is >= every category's peak even under concurrency.
 */
#ifndef LS_TRAINER_MEM_TRACKER_H
#define LS_TRAINER_MEM_TRACKER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "trainer/base/mem_space.h"

/* Fixed order: the numbering is part of the receipt format, append only. */
typedef enum {
    LS_MEM_WEIGHTS = 0,      /* "fixed_weights": frozen model parameters */
    LS_MEM_ADAPTERS,         /* "adapters": trainable (LoRA) parameters */
    LS_MEM_OPTIMIZER,        /* "optimizer_state": AdamW moments */
    LS_MEM_GRADS,            /* "gradients": parameter gradients */
    LS_MEM_PROMPT_STATE,     /* "prompt_state": carried prompt state */
    LS_MEM_PROMPT_GRAD,      /* "prompt_state_grad": its gradient (full mode) */
    LS_MEM_BRANCH,           /* "branch_graph": one member's autograd graph */
    LS_MEM_SCORE,            /* "scoring": old/reference log-prob passes */
    LS_MEM_SCRATCH,          /* "scratch": transient buffers, file I/O */
    LS_MEM_CHECKPOINT,       /* "recompute_checkpoints": prompt-bwd window */
    LS_MEM_COMM,             /* "communication": CP send/receive buffers */
    LS_MEM_DISPATCH,         /* "moe_dispatch": MoE routed-token buffers (mla family), per chunk */
    LS_MEM_PROMPT_STATE_HOST, /* "prompt_state_host": the carried prompt state in the host tier
                                 (--state-tier host); the only host-tier category */
    LS_MEM_STAGING,          /* "staging": device-tier buffers a host-tier state's layers are staged
                                into before a layer reads them (trainer/model/stage.h) */
    LS_MEM_COUNT
} ls_mem_cat;

/* Memory tiers.  Every category but prompt_state_host is in the device tier
 * (what a GPU holds); prompt_state_host is in the host tier (pinned host RAM
 * on a GPU machine; on this CPU build both are RAM, accounted apart).  The
 * totals, their peaks and the budget below are the device tier's; the host
 * tier has its own (host_*). */
typedef enum { LS_TIER_DEVICE = 0, LS_TIER_HOST = 1 } ls_mem_tier;
ls_mem_tier ls_mem_cat_tier(ls_mem_cat cat);

/* The space a tier's bulk data is allocated in (mem_space.h): the rows of
 * a host-tier state and the staging buffers a device-tier reader gets them
 * in (trainer/model/stage.h), copied between the two by trainer/base/tier.h.
 * This CPU build's compute device is the host: device tier -> host; host
 * tier -> host_pinned (plain host memory until a provider pins it).  A GPU
 * backend sets the device tier to device once its kernels read there.
 * ls_mem_alloc itself always allocates host memory (the objects host code
 * reads: page tables, tapes of the CPU kernels). */
ls_mem_space ls_mem_tier_space(ls_mem_tier tier);
/* LS_ERR_ARG for a tier or space out of range. */
ls_status ls_mem_set_tier_space(ls_mem_tier tier, ls_mem_space space);
/* ls_mem_tier_space(ls_mem_cat_tier(cat)). */
ls_mem_space ls_mem_cat_space(ls_mem_cat cat);

/* Alignment of every pointer ls_mem_alloc returns. */
#define LS_MEM_ALIGN 64

/* A consistent-enough snapshot: each field is read atomically, but the
 * fields are read one after another while other threads may be allocating,
 * so cross-field sums are exact only when the tracker is quiescent. */
typedef struct {
    size_t live_bytes[LS_MEM_COUNT];   /* bytes currently allocated */
    size_t peak_bytes[LS_MEM_COUNT];   /* high-water mark of live_bytes since the last reset_peaks */
    size_t run_peak_bytes[LS_MEM_COUNT]; /* high-water mark of live_bytes over the process lifetime */
    uint64_t allocs[LS_MEM_COUNT];     /* successful allocations, cumulative */
    uint64_t frees[LS_MEM_COUNT];      /* frees of non-NULL blocks, cumulative */
    size_t live_total;                 /* all device-tier categories (every one but prompt_state_host) */
    size_t peak_total;                 /* high-water mark of live_total since the last reset_peaks */
    size_t run_peak_total;             /* high-water mark of live_total over the process lifetime */
    uint64_t allocs_total;
    uint64_t frees_total;
    uint64_t refused;                  /* allocations refused: budget, OS, bad args */
    size_t budget_bytes;               /* 0 = no budget */
    /* the host tier (prompt_state_host): live, window peak, run peak, budget (0 = none); not in the
       totals above, which are the device tier's */
    size_t host_live_total, host_peak_total, host_run_peak_total, host_budget_bytes;
} ls_mem_stats;

/* Static name of a category ("fixed_weights", ...); "unknown" for a value
 * outside [0, LS_MEM_COUNT).  Never NULL. */
const char *ls_mem_cat_name(ls_mem_cat cat);

/* Allocate `bytes` zeroed bytes aligned to LS_MEM_ALIGN, charged to `cat`.
 * Returns NULL (and counts a refusal) when the category is invalid, the
 * size overflows, the budget would be exceeded, or the system allocator
 * fails.  bytes == 0 returns a unique non-NULL pointer that accounts 0 bytes.
 * The caller owns the block and releases it with ls_mem_free (never free()). */
void *ls_mem_alloc(ls_mem_cat cat, size_t bytes);

/* ls_mem_alloc in a memory space (mem_space.h): host as ls_mem_alloc;
 * host_pinned without a provider as ls_mem_alloc (host memory); a space with
 * a provider through it (zeroed by it; the block's size and category kept
 * in a table on the host side, never in the block, which the host may not
 * touch); NULL (a refusal) for a space out of range or device without a
 * provider.  Accounted like any block (its category, its tier's budget).
 * Released with ls_mem_free. */
void *ls_mem_alloc_in(ls_mem_cat cat, ls_mem_space space, size_t bytes);

/* The space of the block p points into: the space of a provider's block
 * (interior pointers too), host for every other pointer (a host_pinned
 * block without a provider is host memory).  O(provider blocks live) under
 * a lock; one atomic load while there are none. */
ls_mem_space ls_mem_space_of(const void *p);

/* Release a block from ls_mem_alloc/ls_mem_alloc_in/ls_mem_realloc; its
 * size and category come from the block's hidden header (or the table of
 * provider blocks).  NULL is a no-op.  Passing any other pointer is a
 * programmer error (asserted; ignored in release builds). */
void ls_mem_free(void *p);

/* Resize a block, charging the new block to `cat` (which may differ from
 * p's category: the bytes move between categories), in p's space (the
 * bytes copied by ls_mem_copy).  p == NULL behaves as
 * ls_mem_alloc(cat, bytes).  Contents up to min(old, new) size are kept and
 * any growth is zeroed.  While copying, old and new blocks are both live and
 * both count against the budget.  On failure returns NULL and p is untouched
 * and still owned by the caller.  bytes == 0 returns a 0-byte block. */
void *ls_mem_realloc(ls_mem_cat cat, void *p, size_t bytes);

/* The requested size of a live block (0 for NULL). */
size_t ls_mem_size(const void *p);

/* Limit the host tier's live bytes (--host-memory); 0 removes the limit.
 * A host-tier allocation above it fails cleanly (NULL). */
void ls_mem_set_host_budget(size_t host_bytes);

/* Limit the device tier's total live bytes; 0 removes the limit.  Allocations that would
 * take live_total above it fail cleanly (NULL).  Blocks already live are not
 * affected even if they exceed a newly lowered budget. */
void ls_mem_set_budget(size_t total_bytes);

/* Copy the counters into *out (out must not be NULL). */
void ls_mem_snapshot(ls_mem_stats *out);

/* Set every window peak (per category, device and host totals) to its current live
 * value, e.g. at the start of a training step so the next snapshot reports
 * that step.  The run peaks are not touched. */
void ls_mem_reset_peaks(void);

/* Route the kernels' private scratch (kernels/scratch.h: attention tile
 * workspaces) through this tracker under LS_MEM_SCRATCH.  Idempotent and
 * safe to call while kernels run (each block is freed by the allocator that
 * made it); the trainer calls it at start-up. */
void ls_mem_track_kernel_scratch(void);

/* Peak resident set size of the process in bytes (getrusage ru_maxrss,
 * falling back to VmHWM in /proc/self/status); 0 when unavailable. */
size_t ls_mem_peak_rss_bytes(void);

/* Current resident set size in bytes (/proc/self/statm); 0 when unavailable. */
size_t ls_mem_current_rss_bytes(void);

#endif
