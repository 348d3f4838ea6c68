/* scratch.h - where the kernels take their private scratch (tile workspaces).
 *
 * A kernel never calls malloc itself: scratch it cannot get from its caller
 * (an explicit workspace argument, as ls_gdn_backward takes) comes from the
 * allocator installed here.  The default is malloc/free; the trainer installs
 * the memory tracker's "scratch" category once at start-up
 * (ls_mem_track_kernel_scratch in trainer/base/mem_tracker.h), so tile scratch
 * shows in the receipts' figures.  kernels/ links nothing of trainer/: the
 * hook is how the two meet.
 *
 * Every block is released through the allocator that produced it: a kernel
 * reads ls_kernel_scratch_get() once, allocates and frees with that one, so
 * installing another allocator while a kernel runs is safe (the current
 * pointer is atomic).  Both functions of an allocator must be thread-safe:
 * kernels call them from inside OpenMP parallel regions.
 *
 * What is not ours: OpenBLAS keeps its own per-thread GEMM buffers, allocated
 * by the library and reused across calls; they are outside this hook and
 * outside the tracker (they show only in the process RSS). */
#ifndef LS_KERNELS_SCRATCH_H
#define LS_KERNELS_SCRATCH_H

#include <stddef.h>

typedef struct {
    /* bytes > 0: a block of at least `bytes` bytes aligned for any type,
     * or NULL (the kernel then takes its slower path without scratch) */
    void *(*alloc)(size_t bytes);
    /* releases a block of this allocator's alloc; NULL is a no-op */
    void (*release)(void *p);
} ls_kernel_allocator;

/* Install `a` for every later kernel scratch allocation; NULL restores the
 * malloc/free default.  `a` must outlive every block it hands out (a static
 * object). */
void ls_kernel_scratch_set(const ls_kernel_allocator *a);

/* The allocator now installed (never NULL). */
const ls_kernel_allocator *ls_kernel_scratch_get(void);

#endif
