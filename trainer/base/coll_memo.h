/* coll_memo.h - a memo of what a forward's collectives returned, so that a
 * recompute of that forward (the checkpointed response replay: a layer's
 * tape rebuilt from its input during the backward) takes the same results
 * again without communicating.  The recompute runs the same code on the same
 * inputs, so it reaches the same collectives in the same order: each call
 * is matched with the recorded one by its operation, purpose, layer, sizes
 * and a digest of its input bytes, and a mismatch fails the recompute
 * (LS_ERR_INTERNAL: a forward that did not happen is never differentiated),
 * the same rule as the decision ledger of kernels/decisions.h.  Replayed
 * calls send nothing and emit no trace event: the trace shows each
 * collective once, as it happened.
 *
 * Each thread has its own current memo (none at start: collectives
 * communicate).  A memo records into the caller's arena (its bytes are the
 * arena's category: the branch's, for the replay). */
#ifndef LS_TRAINER_COLL_MEMO_H
#define LS_TRAINER_COLL_MEMO_H
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "trainer/base/arena.h"

typedef struct ls_coll_memo_entry ls_coll_memo_entry;
typedef enum { LS_COLL_MEMO_RECORD = 0, LS_COLL_MEMO_REPLAY = 1 } ls_coll_memo_mode;

typedef struct {
    ls_arena *arena;                 /* where entries and results live (the caller's) */
    ls_coll_memo_mode mode;
    ls_coll_memo_entry *head, *tail; /* recorded calls, in order */
    ls_coll_memo_entry *next;        /* replay: the call to match next */
    size_t n;                        /* entries recorded */
    ls_status st;                    /* the first failure (sticky): LS_ERR_NOMEM recording, LS_ERR_INTERNAL replaying */
    char err[200];                   /* its reason */
} ls_coll_memo;

/* m empty, recording into arena. */
void ls_coll_memo_init(ls_coll_memo *m, ls_arena *arena);
/* Makes m the calling thread's current memo (NULL: none) in mode; returns
 * the previous one, for the caller to restore.  REPLAY starts at the first
 * recorded call. */
ls_coll_memo *ls_coll_memo_use(ls_coll_memo *m, ls_coll_memo_mode mode);
/* Makes prev (ls_coll_memo_use's return) current again, its mode and position as they were. */
void ls_coll_memo_restore(ls_coll_memo *prev);
/* The current memo (NULL: none). */
ls_coll_memo *ls_coll_memo_current(void);
/* LS_OK when a replay consumed every recorded call (else LS_ERR_INTERNAL,
 * the reason in m->err); m->st when it failed earlier. */
ls_status ls_coll_memo_finish(ls_coll_memo *m);

/* For the collectives (trainer/dist/comm.c).  A call's key: op, purpose,
 * layer, its input bytes in[0, in_bytes) and result size out_bytes.
 * ls_coll_memo_take, with a replaying memo current, copies the recorded
 * result into out and returns 1 (*st LS_OK), or on a mismatch returns 1
 * with *st LS_ERR_INTERNAL (the memo's err says which call and why);
 * returns 0 when no memo is replaying (the caller communicates).
 * ls_coll_memo_put, with a recording memo current, appends the call and a
 * copy of its result (nothing otherwise; a failed allocation marks the memo
 * LS_ERR_NOMEM).  ls_coll_memo_digest: the input digest both use. */
uint64_t ls_coll_memo_digest(const void *in, size_t in_bytes);
int ls_coll_memo_take(const char *op, const char *purpose, int layer, uint64_t in_digest, void *out, size_t out_bytes,
                      ls_status *st);
void ls_coll_memo_put(const char *op, const char *purpose, int layer, uint64_t in_digest, const void *out,
                      size_t out_bytes);
/* The arena bytes one recorded call of out_bytes takes (its entry and its result; the memory plan's term,
 * saturating). */
size_t ls_coll_memo_plan_bytes(size_t out_bytes);
/* Whether a memo is current in mode (the collectives digest their inputs only then). */
int ls_coll_memo_active(ls_coll_memo_mode mode);
#endif
