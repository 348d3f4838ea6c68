/* sampler.h - nucleus (top-p) sampling of one token from a row of log-probs,
 * fast at real vocabulary sizes.  Numeric (compiled per real type).
 *
 * The token drawn is defined by the simple algorithm, and this module draws
 * exactly that token for the same random draw:
 *   1. order the V tokens by log-prob descending, ties by ascending id
 *      (NaN counts as -inf);
 *   2. the nucleus is the shortest prefix, at least one token, whose mass
 *      (the running sum of exp(logp), in double, in that order) reaches
 *      top_p; when the whole order never reaches it, the nucleus is all V;
 *   3. u = ls_rng_uniform() * mass; the token is the first in the nucleus
 *      whose running sum exceeds u (the last one of the nucleus if none).
 * Instead of sorting the vocabulary: a histogram of the log-probs in
 * quarter-nat buckets below the maximum (a bucket order is a coarse prefix
 * of the order above) bounds the mass from below; only the tokens of the
 * buckets up to the one where that bound reaches top_p are scattered, by
 * bucket, and the buckets are then sorted one at a time (insertion sort
 * when small, an LSD radix sort otherwise), from the top, while the running
 * sum goes on, until it reaches top_p: the tokens past the nucleus's last
 * bucket are never sorted, and only the nucleus's exp() are taken.  The
 * running sums are the same additions in the same order as the simple
 * algorithm's, so the nucleus, the mass and the draw are bit for bit its
 * own.  Cost: three O(V) passes plus the sort of the nucleus's buckets,
 * O(V) in the worst case (a flat row, top_p = 1); exactly one uniform is
 * consumed per call, whatever the path. */
#ifndef LS_TRAINER_SAMPLER_H
#define LS_TRAINER_SAMPLER_H
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/real.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/rng.h"

/* Buffers of one sampler, sized for a vocabulary: allocate once, reuse for
 * every token (no allocation per call).  Fields are private (the records'
 * layout depends on the real type; this struct's does not). */
typedef struct {
    size_t V;        /* capacity in tokens */
    void *rec, *tmp; /* [V] records each: gathered tokens, radix scratch */
    double *p;       /* [V] the nucleus's probabilities, in order */
    uint32_t *count; /* bucket and radix digit counts */
} ls_sampler_ws;

/* Allocates ws for vocabularies up to V tokens (1 <= V <= 2^31 - 1) through
 * the memory tracker under `cat`.  LS_ERR_ARG on a bad V, LS_ERR_NOMEM.  On
 * failure *ws holds nothing to free (freeing it anyway is a no-op). */
ls_status LS_K(ls_sampler_ws_init)(ls_sampler_ws *ws, size_t V, ls_mem_cat cat);
/* Frees what ws holds; ws may be NULL or zeroed; safe to call twice. */
void LS_K(ls_sampler_ws_free)(ls_sampler_ws *ws);
/* Bytes ls_sampler_ws_init(V) allocates. */
size_t LS_K(ls_sampler_ws_bytes)(size_t V);

/* Draws one token id in [0, V) from logp [V] (log-probabilities; need not
 * sum to one; -inf and NaN entries have probability 0) with nucleus top_p
 * (any value: top_p <= 0 or NaN gives the most probable token, top_p >= the
 * total mass the whole vocabulary).  Consumes exactly one ls_rng_uniform(r).
 * Requires 1 <= V <= ws->V (asserted). */
int32_t LS_K(ls_sampler_top_p)(const ls_real *logp, size_t V, double top_p, ls_rng *r, ls_sampler_ws *ws);
#endif
