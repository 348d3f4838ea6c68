/* ep.h - expert parallelism (EP) of the routed experts over the EP group of
 * the CP x EP grid (comm.h ls_comm_grid; docs/design.md §4a).  Numeric
 * (compiled per real type).
 *
 * The ranks of one EP group hold the same tokens (the same CP shard and the
 * replicated responses), so the dense parts (attention, router, shared
 * expert) are computed alike on every one of them, and expert e is computed
 * only by its owner, EP rank e / (E / ep): in the MoE (trainer/mla's
 * moe_run) each rank runs its own experts over the rows routed to them and
 * the rows are exchanged by alltoallv over the EP group (forward: the
 * experts' outputs; backward: their input gradients), so every rank combines
 * every token in the order a one-rank run does and the results are bitwise
 * the same.  The expert weight gradients are the owner's alone; finalize sums
 * them over the owner's CP group like any shard-local gradient.
 *
 * The table: every rank keeps every tensor (weights replicated; the
 * gradients and AdamW updates of another rank's experts are not computed
 * here: ls_tensor.ep_remote).  After a step's gradients, ls_ep_gather hands
 * each expert's gradient from its owner to the EP group (the dumps, the
 * gradient norm and the digest check then see the whole table); after the
 * optimizer, which skips remote tensors, each expert's weights and moments
 * (the owner's update) go to the group, so every rank holds the table an
 * EP-1 run holds, bit for bit (param digests, checkpoints). */
#ifndef LS_TRAINER_EP_H
#define LS_TRAINER_EP_H
#include <stdio.h>

#include "trainer/dist/comm.h"
#include "trainer/model/params.h"

typedef struct {
    ls_comm_group *g; /* the EP group (borrowed from the communicator) */
    int rank, size;   /* this rank's place in it, its size (>= 2) */
    int drop_dx;      /* fault ep-drop-dx: the last EP rank returns zero input gradients for its experts' rows */
} ls_ep;

/* The EP rank that owns expert e of E (size divides E). */
static inline int ls_ep_owner(int e, int E, int size) { return e / (E / size); }
/* The expert of a routed expert's tensor ("layers.L.moe.experts.E.*"), *layer its layer; -1 for any other. */
static inline int ls_ep_expert_of(const char *name, int *layer) {
    int l = -1, e = -1, n = 0;
    if (sscanf(name, "layers.%d.moe.experts.%d.%n", &l, &e, &n) != 2 || n == 0) return -1;
    if (layer) *layer = l;
    return e;
}

/* The process-wide EP context the MoE reads (copied; NULL or size < 2: none). */
void LS_K(ls_ep_set)(const ls_ep *ep);
/* The context set, or NULL when there is no EP. */
const ls_ep *LS_K(ls_ep_get)(void);
/* Marks p's routed experts held by other EP ranks (ls_tensor.ep_remote). */
void LS_K(ls_ep_mark)(ls_params *p, const ls_ep *ep);

#define LS_EP_GRADS 1 /* the trainable experts' gradients */
#define LS_EP_STATE 2 /* the trainable experts' weights and AdamW moments */
/* Broadcasts what (LS_EP_GRADS and/or LS_EP_STATE) of every trainable
 * routed expert from its owner over the EP group (purposes ep_grad_gather,
 * ep_param_gather); a collective of the group.  LS_OK without EP. */
ls_status LS_K(ls_ep_gather)(const ls_ep *ep, ls_params *p, int what);
#endif
