/* arena.c - bump allocation over tracked chunks. */
#include "trainer/base/arena.h"

#include <stdint.h>
#include <string.h>

struct ls_arena_chunk {
    ls_arena_chunk *next;
    size_t cap, off;
    unsigned char *data;
};

void ls_arena_init(ls_arena *a, ls_mem_cat cat, size_t chunk_bytes) {
    ls_arena_init_in(a, cat, LS_MEM_SPACE_HOST, chunk_bytes);
}

void ls_arena_init_in(ls_arena *a, ls_mem_cat cat, ls_mem_space space, size_t chunk_bytes) {
    memset(a, 0, sizeof *a);
    a->cat = cat;
    a->space = space;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : LS_ARENA_CHUNK;
}

/* A chunk's bytes follow its header (host-readable spaces) unless they are a block of their own. */
static unsigned char *inline_data(ls_arena_chunk *c) {
    return (unsigned char *)(((uintptr_t)(c + 1) + 63) & ~(uintptr_t)63);
}

/* A chunk of cap bytes: one block (header and bytes) in a host-readable space, else a host header and a
 * block of the space. */
static ls_arena_chunk *chunk_new(ls_arena *a, size_t cap) {
    if (ls_mem_space_host_readable(a->space)) {
        ls_arena_chunk *c = ls_mem_alloc_in(a->cat, a->space, sizeof *c + 64 + cap);
        if (c) c->data = inline_data(c);
        return c;
    }
    ls_arena_chunk *c = ls_mem_alloc(a->cat, sizeof *c);
    void *data = c ? ls_mem_alloc_in(a->cat, a->space, cap) : NULL;
    if (!data) {
        ls_mem_free(c);
        return NULL;
    }
    c->data = data;
    return c;
}

void *ls_arena_alloc(ls_arena *a, size_t bytes) {
    size_t need = (bytes + 63) & ~(size_t)63;
    if (need == 0) need = 64;
    ls_arena_chunk *c = a->head;
    /* A request of a quarter chunk or more gets a chunk of its own size, linked behind the head so that the
       head's tail still takes the small requests after it; the small ones share chunks that start at 4 KiB
       and double up to chunk_bytes.  So an arena's bytes are its requests plus a bounded tail (under twice
       its small requests, and under chunk_bytes) and 96 bytes a chunk: what the memory plan counts
       (trainer/plan).  Before, a 64 KiB first chunk and every large request between small ones stranded up
       to a chunk's tail: 13-34% of a tiny model's replay tape. */
    int own = need >= a->chunk_bytes / 4;
    if (own || !c || c->cap - c->off < need) {
        size_t cap = need;
        if (!own) {
            size_t grow = a->small ? 2 * a->small : (size_t)4 << 10;
            a->small = grow < a->chunk_bytes ? grow : a->chunk_bytes;
            cap = need > a->small ? need : a->small;
        }
        c = chunk_new(a, cap);
        if (!c) {
            a->failed = 1;
            return NULL;
        }
        c->cap = cap;
        c->off = 0;
        if (own && a->head) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->off;
    c->off += need;
    a->used_bytes += need;
    if (ls_mem_space_host_readable(a->space)) memset(p, 0, need);
    else if (ls_mem_zero(p, a->space, need) != LS_OK) {
        a->failed = 1;
        return NULL;
    }
    return p;
}

void ls_arena_free(ls_arena *a) {
    ls_arena_chunk *c = a->head;
    while (c) {
        ls_arena_chunk *n = c->next;
        if (c->data != inline_data(c)) ls_mem_free(c->data);
        ls_mem_free(c);
        c = n;
    }
    a->head = NULL;
    a->used_bytes = 0;
    a->small = 0;
}
