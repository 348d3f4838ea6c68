/* decisions.h - a ledger of the discrete decisions a forward makes (docs/model.md
 * §0's top-k: each MoE token's experts, kept groups included, and each DSA
 * query's selected keys), so that a decision made once can be shown to be
 * the one every later use of it makes:
 *  - a backward that recomputes a decision (the MoE chunk's routing, a `full`
 *    prompt chunk recomputed from its checkpoint) compares its ledger with
 *    the forward's and fails with LS_ERR_INTERNAL when they differ, never
 *    differentiating a forward that did not happen;
 *  - a run's ledger (its count and digest, printed in the trainer's summary)
 *    shows two runs of one composition decided alike: longstraw-parity's
 *    finite differences at weights moved by +-h must make the decisions of
 *    the unmoved run, or their difference quotient spans a jump.
 * The digest is of the outcomes in the order they were noted (FNV-style
 * multiply-xor over 64-bit words, finalised): equal outcomes in equal order
 * give equal digests; it detects accidental differences, it is not a
 * cryptographic commitment.
 *
 * Each thread has its own current ledger (none at start: nothing is noted).
 * Not for use from inside a parallel region: the kernels note after theirs. */
#ifndef LS_KERNELS_DECISIONS_H
#define LS_KERNELS_DECISIONS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t count;  /* decisions noted (tokens routed, queries selected) */
    uint64_t digest; /* of their outcomes, in order; 0 while count is 0 */
} ls_decisions;

/* Makes l the calling thread's current ledger (NULL: none); returns the
 * previous one, for the caller to restore. */
ls_decisions *ls_decisions_use(ls_decisions *l);
/* The current ledger (NULL: none). */
ls_decisions *ls_decisions_current(void);
/* Notes n decisions whose outcomes are the bytes [p, p + bytes) into the
 * current ledger (nothing without one). */
void ls_decisions_note(const void *p, size_t bytes, size_t n);
/* A ledger of its own for what follows (a layer, a chunk): *own zeroed and
 * made current; the previous one returned, for ls_decisions_end. */
ls_decisions *ls_decisions_begin(ls_decisions *own);
/* Ends own's scope: outer current again, own's decisions folded into it. */
void ls_decisions_end(ls_decisions *outer, const ls_decisions *own);
/* outer followed by inner: outer's digest extended by inner's (NULL outer: no-op). */
void ls_decisions_fold(ls_decisions *outer, const ls_decisions *inner);
/* Whether two ledgers record the same decisions. */
int ls_decisions_equal(const ls_decisions *a, const ls_decisions *b);

#endif
