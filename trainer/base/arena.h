/* arena.h - a bump allocator over memory-tracked chunks: the storage of one
 * autograd tape, one recompute window or one phase's scratch.  Everything is
 * released at once by ls_arena_free (or rewound with ls_arena_reset).
 * Allocations are zeroed and 64-byte aligned; the bytes show in the memory
 * tracker under the arena's category.  An arena lives in one memory space
 * (mem_space.h; host unless ls_arena_init_in names another): in a space the
 * host may not touch, each chunk's bookkeeping is a host block of its own
 * (same category) and the chunk's bytes are zeroed by the space's provider,
 * so the arena never dereferences what it hands out. */
#ifndef LS_TRAINER_ARENA_H
#define LS_TRAINER_ARENA_H
#include <stddef.h>
#include "trainer/base/mem_tracker.h"

/* The default largest shared chunk: a request of a quarter of it or more
 * gets a chunk of its own size; smaller ones share chunks of 4 KiB doubling
 * up to it.  So an arena's bytes are its requests plus a bounded tail (under
 * twice its small requests and under 64 KiB) and 96 bytes a chunk, which is
 * what lets the memory plan (trainer/plan) count an arena by its requests. */
#define LS_ARENA_CHUNK ((size_t)64 << 10)

typedef struct ls_arena_chunk ls_arena_chunk;
typedef struct {
    ls_mem_cat cat;
    ls_mem_space space; /* where the chunks' bytes live (0: host) */
    size_t chunk_bytes; /* minimum chunk size */
    ls_arena_chunk *head;
    size_t used_bytes;  /* bytes handed out (sum of rounded requests) */
    size_t small;       /* the last shared chunk's size (0: none yet) */
    int failed;         /* set when an allocation failed (sticky) */
} ls_arena;

/* chunk_bytes 0: LS_ARENA_CHUNK (the largest shared chunk). */
void ls_arena_init(ls_arena *a, ls_mem_cat cat, size_t chunk_bytes);
/* ls_arena_init in a memory space: host as ls_arena_init; another space's
 * chunks come from ls_mem_alloc_in (NULL from ls_arena_alloc when the space
 * cannot be allocated: device without a provider). */
void ls_arena_init_in(ls_arena *a, ls_mem_cat cat, ls_mem_space space, size_t chunk_bytes);
/* Zeroed block of `bytes` (NULL on failure, and a->failed is set), owned
 * by the arena: released with all the others by ls_arena_free, never alone. */
void *ls_arena_alloc(ls_arena *a, size_t bytes);
/* Release every chunk. */
void ls_arena_free(ls_arena *a);
#endif
