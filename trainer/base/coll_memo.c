/* coll_memo.c - the memo of a forward's collective results (coll_memo.h). */
#include "trainer/base/coll_memo.h"

#include <stdio.h>
#include <string.h>

#include "common/checked.h"

struct ls_coll_memo_entry {
    ls_coll_memo_entry *next;
    char op[24], purpose[32];
    int layer;
    uint64_t in_digest;
    size_t out_bytes;
    unsigned char *out;
};

static _Thread_local ls_coll_memo *cur;

/* bytes as an arena hands them out (ls_arena_alloc: 64-byte aligned requests) */
static size_t arena_bytes(size_t b) { return b > SIZE_MAX - 63 ? SIZE_MAX : (b + 63) & ~(size_t)63; }

size_t ls_coll_memo_plan_bytes(size_t out_bytes) {
    return ls_sat_add(arena_bytes(sizeof(ls_coll_memo_entry)), out_bytes ? arena_bytes(out_bytes) : 0);
}

void ls_coll_memo_init(ls_coll_memo *m, ls_arena *arena) {
    memset(m, 0, sizeof *m);
    m->arena = arena;
}

ls_coll_memo *ls_coll_memo_use(ls_coll_memo *m, ls_coll_memo_mode mode) {
    ls_coll_memo *prev = cur;
    cur = m;
    if (m) {
        m->mode = mode;
        m->next = m->head;
    }
    return prev;
}

void ls_coll_memo_restore(ls_coll_memo *prev) { cur = prev; }

ls_coll_memo *ls_coll_memo_current(void) { return cur; }

int ls_coll_memo_active(ls_coll_memo_mode mode) { return cur && cur->mode == mode; }

ls_status ls_coll_memo_finish(ls_coll_memo *m) {
    if (m->st != LS_OK) return m->st;
    if (m->mode == LS_COLL_MEMO_REPLAY && m->next) {
        snprintf(m->err, sizeof m->err, "the recompute ended before the recorded %s '%s' (layer %d)", m->next->op,
                 m->next->purpose, m->next->layer);
        m->st = LS_ERR_INTERNAL;
    }
    return m->st;
}

/* FNV-1a over 64-bit words (the tail bytewise): the recompute's inputs are the forward's bit for bit, so
 * any difference is a different forward; not a cryptographic commitment. */
uint64_t ls_coll_memo_digest(const void *in, size_t in_bytes) {
    const unsigned char *p = in;
    uint64_t h = 1469598103934665603ull ^ (uint64_t)in_bytes;
    size_t i = 0;
    for (; i + 8 <= in_bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < in_bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int mismatch(ls_coll_memo *m, ls_status *st, const char *op, const char *purpose, int layer, const char *why) {
    if (m->st == LS_OK) {
        snprintf(m->err, sizeof m->err, "the recompute's %s '%s' (layer %d) is not the forward's: %s", op, purpose,
                 layer, why);
        m->st = LS_ERR_INTERNAL;
    }
    *st = m->st;
    return 1;
}

int ls_coll_memo_take(const char *op, const char *purpose, int layer, uint64_t in_digest, void *out, size_t out_bytes,
                      ls_status *st) {
    ls_coll_memo *m = cur;
    if (!m || m->mode != LS_COLL_MEMO_REPLAY) return 0;
    if (m->st != LS_OK) {
        *st = m->st;
        return 1;
    }
    ls_coll_memo_entry *e = m->next;
    if (!e) return mismatch(m, st, op, purpose, layer, "the forward made no further call");
    if (strcmp(e->op, op) || strcmp(e->purpose, purpose) || e->layer != layer)
        return mismatch(m, st, op, purpose, layer, "the forward's next call was another");
    if (e->out_bytes != out_bytes) return mismatch(m, st, op, purpose, layer, "another size");
    if (e->in_digest != in_digest) return mismatch(m, st, op, purpose, layer, "other input bytes");
    if (out_bytes) memcpy(out, e->out, out_bytes);
    m->next = e->next;
    *st = LS_OK;
    return 1;
}

void ls_coll_memo_put(const char *op, const char *purpose, int layer, uint64_t in_digest, const void *out,
                      size_t out_bytes) {
    ls_coll_memo *m = cur;
    if (!m || m->mode != LS_COLL_MEMO_RECORD || m->st != LS_OK) return;
    ls_coll_memo_entry *e = ls_arena_alloc(m->arena, sizeof *e);
    unsigned char *o = e && out_bytes ? ls_arena_alloc(m->arena, out_bytes) : NULL;
    if (!e || (out_bytes && !o)) {
        snprintf(m->err, sizeof m->err, "no memory to keep the result of %s '%s' (layer %d)", op, purpose, layer);
        m->st = LS_ERR_NOMEM;
        return;
    }
    snprintf(e->op, sizeof e->op, "%s", op);
    snprintf(e->purpose, sizeof e->purpose, "%s", purpose);
    e->layer = layer;
    e->in_digest = in_digest;
    e->out_bytes = out_bytes;
    e->out = o;
    if (out_bytes) memcpy(o, out, out_bytes);
    if (m->tail) m->tail->next = e;
    else m->head = e;
    m->tail = e;
    m->n++;
}
