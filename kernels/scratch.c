/* scratch.c - the kernels' scratch allocator hook (kernels/scratch.h).
 * Dtype-independent: one copy shared by the float32 and float64 kernels. */
#include "kernels/scratch.h"

#include <stdatomic.h>
#include <stdlib.h>

static void *default_alloc(size_t bytes)
{
    return bytes ? malloc(bytes) : NULL;
}

static void default_release(void *p)
{
    free(p);
}

static const ls_kernel_allocator default_allocator = {default_alloc, default_release};

static _Atomic(const ls_kernel_allocator *) current = &default_allocator;

void ls_kernel_scratch_set(const ls_kernel_allocator *a)
{
    atomic_store(&current, a != NULL ? a : &default_allocator);
}

const ls_kernel_allocator *ls_kernel_scratch_get(void)
{
    return atomic_load(&current);
}
