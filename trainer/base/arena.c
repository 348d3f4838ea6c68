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
    memset(a, 0, sizeof *a);
    a->cat = cat;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : LS_ARENA_CHUNK;
}

void *ls_arena_alloc(ls_arena *a, size_t bytes) {
    size_t need = (bytes + 63) & ~(size_t)63;
    if (need == 0) need = 64;
    ls_arena_chunk *c = a->head;
    if (!c || c->cap - c->off < need) {
        size_t cap = need > a->chunk_bytes ? need : a->chunk_bytes;
        c = ls_mem_alloc(a->cat, sizeof *c + 64 + cap);
        if (!c) {
            a->failed = 1;
            return NULL;
        }
        c->cap = cap;
        c->off = 0;
        c->data = (unsigned char *)(((uintptr_t)(c + 1) + 63) & ~(uintptr_t)63);
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->off;
    c->off += need;
    a->used_bytes += need;
    memset(p, 0, need);
    return p;
}

void ls_arena_free(ls_arena *a) {
    ls_arena_chunk *c = a->head;
    while (c) {
        ls_arena_chunk *n = c->next;
        ls_mem_free(c);
        c = n;
    }
    a->head = NULL;
    a->used_bytes = 0;
}
