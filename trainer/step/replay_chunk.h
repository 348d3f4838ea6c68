/* replay_chunk.h - a response branch replayed in chunks (--replay-checkpoint
 * chunk): for responses whose every layer's input (L x R x d values, the
 * checkpointed replay's) does not fit either.
 *
 * The forward runs the branch chunk by chunk without a tape, each chunk from
 * the carried state the chunks before it left (the prompt state with the
 * response's own rows appended: attention K/V pages, mla latents and index
 * keys; the GDN conv tail and recurrent state after it), and keeps only that
 * state: the response's own rows, one copy of the fixed state at every chunk
 * start and, under CP, the chunk's collectives' results (coll_memo.h).  The
 * backward runs the chunks from the last: each is taped again from the state
 * at its start (its collectives taken from the memo, nothing sent twice; its
 * discrete decisions and log-probs held to the forward's, LS_ERR_INTERNAL
 * otherwise), and its backward takes, beside its log-probs' gradient, the
 * gradient the later chunks left for the rows it appended and the fixed
 * state after it (family.h's segment_backward dout), and hands the
 * gradient of its own context on: the earlier chunks' rows, the fixed state
 * before it, and in `full` mode the prompt state's (dps).
 *
 * Peak beside the branch's inputs: the response's rows and their gradient,
 * K fixed-state copies, the memo, and one chunk's tape.  The same
 * mathematics as the taped replay; the chunks' attention sums its keys in
 * other blocks (the earlier chunks' rows as pages), so the gradients equal
 * the taped replay's to rounding, not bit for bit.
 *
 * The trace shows each layer's forward and backward once per branch, as the
 * taped replay's: the chunks' layer observations are summed (tokens, wall
 * time, the output's squared norm) and reported when the forward, then the
 * backward, is done.  Numeric (LS_K names); internal to the trainer. */
#ifndef LS_TRAINER_REPLAY_CHUNK_H
#define LS_TRAINER_REPLAY_CHUNK_H
#include "trainer/model/family.h"

typedef struct ls_replay_chunks ls_replay_chunks;

/* The branch's forward: tokens in [T] from position pos0 after the context
 * ps (the prompt state, borrowed: it must outlive the replay), scored
 * against targets [T] into logp [T], in chunks of `chunk` tokens (0 or T or
 * more: one).  *out: the replay's kept state, for ls_replay_chunks_backward
 * and ls_replay_chunks_free (NULL on failure, nothing kept). */
ls_status LS_K(ls_replay_chunks_forward)(const ls_params *p, const ls_state *ps, const int32_t *in, size_t T,
                                         int64_t pos0, const int32_t *targets, size_t chunk, ls_real *logp,
                                         ls_layer_hook hook, void *hook_user, ls_replay_chunks **out);

/* Its backward from dlogp [T]: dps (NULL: detached) += the gradient of the
 * prompt state; the weights' .g +=. */
ls_status LS_K(ls_replay_chunks_backward)(ls_replay_chunks *r, const ls_real *dlogp, ls_state *dps);

/* The most bytes the replay held at once beyond its inputs (its state, the
 * gradients it carried and the largest chunk's tape with its backward), for
 * the step's max_branch_bytes. */
size_t LS_K(ls_replay_chunks_bytes)(const ls_replay_chunks *r);

void LS_K(ls_replay_chunks_free)(ls_replay_chunks *r);

/* A response scored in the same chunks, without autograd (the score phase of a run whose replay is chunked):
 * logp [T] bit for bit the chunked replay's, so that the on-policy ratio is exactly 1; the response's own
 * rows live in category cat while it runs; the layers reported once each, as ls_replay_chunks_forward's. */
ls_status LS_K(ls_chunks_score)(const ls_params *p, const ls_state *ps, const int32_t *in, size_t T, int64_t pos0,
                                const int32_t *targets, size_t chunk, ls_real *logp, ls_mem_cat cat, ls_layer_hook hook,
                                void *hook_user);
#endif
