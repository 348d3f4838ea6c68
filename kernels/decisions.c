/* decisions.c - the ledger of discrete decisions (decisions.h). */
#include "kernels/decisions.h"

#include <string.h>

#define PRIME 0x100000001b3ull
#define BASIS 0xcbf29ce484222325ull

static _Thread_local ls_decisions *current;

ls_decisions *ls_decisions_use(ls_decisions *l) {
    ls_decisions *prev = current;
    current = l;
    return prev;
}

ls_decisions *ls_decisions_current(void) { return current; }

static uint64_t mix(uint64_t h, uint64_t w) {
    h ^= w;
    h *= PRIME;
    return h ^ (h >> 29);
}

static uint64_t fold_bytes(uint64_t h, const unsigned char *p, size_t bytes) {
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix(h, w);
    }
    if (i < bytes) {
        uint64_t w = 0;
        memcpy(&w, p + i, bytes - i);
        h = mix(h, w ^ ((uint64_t)(bytes - i) << 56));
    }
    return mix(h, (uint64_t)bytes);
}

void ls_decisions_note(const void *p, size_t bytes, size_t n) {
    ls_decisions *l = current;
    if (l == NULL || n == 0) return;
    uint64_t h = l->count ? l->digest : BASIS;
    l->digest = fold_bytes(h, p, bytes);
    l->count += n;
}

void ls_decisions_fold(ls_decisions *outer, const ls_decisions *inner) {
    if (outer == NULL || inner == NULL || inner->count == 0) return;
    uint64_t h = outer->count ? outer->digest : BASIS;
    outer->digest = mix(mix(h, inner->digest), inner->count);
    outer->count += inner->count;
}

ls_decisions *ls_decisions_begin(ls_decisions *own) {
    *own = (ls_decisions){0, 0};
    return ls_decisions_use(own);
}

void ls_decisions_end(ls_decisions *outer, const ls_decisions *own) {
    ls_decisions_use(outer);
    ls_decisions_fold(outer, own);
}

int ls_decisions_equal(const ls_decisions *a, const ls_decisions *b) {
    return a->count == b->count && a->digest == b->digest;
}
