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
 * The table (params.h ls_params_init_ep_of): every rank lists every
 * tensor but holds only its own routed experts (another rank's are
 * ls_tensor.ep_remote: no weights, gradient, moments or reference copy
 * here), so the experts' fixed memory is divided by the EP size.  What needs
 * the whole table gathers from the owners: the gradient norm (each expert
 * tensor's sum of squares, ls_ep_grad_sumsq: "ep_grad_gather"), the
 * parameter digests after the update (ls_ep_param_digests:
 * "ep_param_gather"), and the writers (dumps, checkpoints, the initial
 * weights' digest: ls_ep_assemble's transient copies, "ep_assemble"), so
 * that every digest and file is an EP-1 run's, bit for bit. */
#ifndef LS_TRAINER_EP_H
#define LS_TRAINER_EP_H
#include <stdint.h>
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
static inline int ls_ep_expert_of(const char *name, int *layer) { return ls_param_expert_of(name, layer); }

/* The process-wide EP context the MoE reads (copied; NULL or size < 2: none). */
void LS_K(ls_ep_set)(const ls_ep *ep);
/* The context set, or NULL when there is no EP. */
const ls_ep *LS_K(ls_ep_get)(void);
/* The whole table's sum of squares of the gradients (params.h
 * ls_params_grad_sumsq, the same sum bit for bit): each routed expert
 * tensor's sum from its owner (one allreduce over the EP group,
 * "ep_grad_gather"); a collective of the group.  Without EP (ep NULL) the
 * local sum. */
ls_status LS_K(ls_ep_grad_sumsq)(const ls_ep *ep, const ls_params *p, double *out);
/* The SHA-256 of every trainable tensor's weights, dg [p->n * 32] (a
 * frozen tensor's left as is): the held ones here, the remote ones from
 * their owners (one allgather over the EP group, "ep_param_gather"); a
 * collective of the group.  Without EP the held ones only. */
ls_status LS_K(ls_ep_param_digests)(const ls_ep *ep, const ls_params *p, uint8_t *dg);

#define LS_EP_SLOT(k) (1 << (k)) /* a slot of ls_ep_assemble's mask (params.h ls_param_slot) */
/* The slots of mask (LS_EP_SLOT(LS_SLOT_W) ...) of the other EP ranks'
 * experts gathered from their owners into transient buffers (communication
 * memory; one allgather over the EP group per slot, "ep_assemble"), so that
 * p->ep_view gives the writers (ls_params_slot) every tensor an EP-1 run
 * has; released by ls_ep_release.  A collective of the group; LS_OK and
 * nothing gathered without EP.  LS_ERR_INTERNAL when the EP ranks' shares
 * differ in size (cannot happen for a table the family built). */
ls_status LS_K(ls_ep_assemble)(const ls_ep *ep, ls_params *p, unsigned mask);
/* Frees what ls_ep_assemble gathered (p->ep_view NULL again). */
void LS_K(ls_ep_release)(ls_params *p);
#endif
