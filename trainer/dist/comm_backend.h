/* comm_backend.h - the interface between the communicator's front end
 * (comm.c, behind comm.h) and its backends; internal to trainer/dist.
 *
 * The front end checks every argument, writes the collective trace event and
 * the statistics, counts the group's gseq, splits large counts into pieces of
 * at most max_count elements, and implements the fixed-order sum (an
 * allgather, then a local sum in rank order) and the cases that move nothing
 * between ranks (a group of one, a sendrecv to and from itself).  A backend
 * only moves bytes: each entry below is called with valid arguments, after
 * the event is written, and never for a group of one when the front end can
 * answer alone (see each entry).
 *
 * Memory spaces (trainer/base/mem_space.h): a backend declares the spaces
 * it moves (spaces below; host always: the front end's own metadata, such
 * as alltoallv's counts, is host memory).  The front end refuses a call
 * whose buffers are in a space the backend does not move, before anything
 * is recorded, and touches a buffer whose space the host may not read only
 * through ls_mem_copy and ls_mem_sum_ordered (the space's provider): the
 * fixed-order sum gathers into a scratch block of the buffer's space
 * (LS_MEM_COMM) and lets the provider add the ranks in order.  So every
 * buffer a backend entry below is handed is in one space it declared.
 *
 * The backends are registered by name (comm.c's table; comm.h lists them:
 * ls_comm_backend_info): ls_comm_ops_single (comm_single.c: one process, no
 * library, every space) and ls_comm_ops_mpi (comm_mpi.c: Open MPI, compiled
 * only in builds with MPI, host memory).  A backend of this build is one
 * entry there; one supplied at run time (a test's, a plug-in) is registered
 * with ls_comm_backend_register.
 *
 * Where an NCCL backend plugs in (not written: a sketch, docs/design.md §4b):
 *  - trainer/dist/comm_nccl.c defines ls_comm_ops_nccl: spaces = host |
 *    device (host buffers staged through a device bounce buffer, since NCCL
 *    moves device memory only); open bootstraps an ncclUniqueId over the
 *    process's launcher (MPI when built with it) and ncclCommInitRank;
 *    allreduce_max, broadcast, allgather map to ncclAllReduce(ncclMax),
 *    ncclBroadcast, ncclAllGather on the communicator's stream, each call
 *    synchronised before it returns (the front end's contract: done on
 *    return); sendrecv and alltoallv to ncclSend/ncclRecv inside
 *    ncclGroupStart/End; split to ncclCommSplit; library returns
 *    "NCCL x.y.z" (ncclGetVersion); claims: an environment variable chosen
 *    for it, or opened by name (ls_comm_open_backend).
 *  - trainer/base: a CUDA provider of the device space (cudaMalloc,
 *    cudaMemcpy, a kernel for the fixed-order sum adding the ranks in order:
 *    the same association, so the sums stay bitwise equal across ranks) and
 *    of host_pinned (cudaHostAlloc), registered at start-up, and
 *    ls_mem_set_tier_space(LS_TIER_DEVICE, LS_MEM_SPACE_DEVICE).
 *  - comm.c: its entry {"nccl", "nccl", &ls_comm_ops_nccl} in the table
 *    under LS_HAVE_NCCL (CMake: found with the CUDA toolkit, LS_HAVE_CUDA);
 *    receipts/format/build_info.c: "nccl" among the registered dependencies, and
 *    the property in the manifest and receipt schemas, with "nccl" in the
 *    receipt's communication.backend enum.
 *  - the trainer's checkpointed replay memo (trainer/base/coll_memo.h)
 *    digests host bytes: with device buffers the front end refuses it until
 *    the memo digests on the device. */
#ifndef LS_TRAINER_COMM_BACKEND_H
#define LS_TRAINER_COMM_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "receipts/format/trace_event.h"
#include "trainer/base/mem_space.h"

typedef struct ls_comm ls_comm;
typedef struct ls_comm_group ls_comm_group;

/* A group as the backends see it.  The front end owns the struct; the
 * backend sets rank, size and impl when it creates the group (open: the
 * world group "cp") and releases impl when it frees it (close). */
struct ls_comm_group {
    ls_comm *c;
    const char *name;  /* the trace's group name: "cp" (ep 1); with the grid "world", "cp-eE", "ep-cC" */
    const char *kind;  /* a registered group kind (ls_trace_group_kind_name: cp, ep, world) */
    char name_buf[24]; /* name's storage for the grid's groups */
    int rank, size;
    int64_t gseq;      /* the next operation's sequence number (the front end counts) */
    void *impl;        /* the backend's handle of the group (MPI: its MPI_Comm); NULL single-rank */
};

/* The logical operation a backend call belongs to, for its error message. */
typedef struct {
    const char *op;      /* "allreduce_max", "broadcast", "allgather", "sendrecv", "barrier", "alltoallv" */
    const char *purpose;
    int layer;           /* -1: none */
    int64_t gseq;        /* the operation's sequence number in its group */
} ls_comm_call;

typedef struct {
    const char *name; /* ls_comm_backend(): "single", "mpi" */
    /* 1 when this process was started to run under this backend (the MPI
     * backend: by mpirun).  ls_comm_open opens the first backend of its table
     * that claims the process. */
    int (*claims)(void);
    /* Starts the backend and sets up the world group (rank, size, impl).
     * *state: the backend's per-communicator state, handed to close and
     * abort.  On failure: the reason in err ("ls_comm_open: ..."), nothing
     * left set up, close not called. */
    ls_status (*open)(void **state, ls_comm_group *world, int *argc, char ***argv, char *err, size_t err_len);
    /* Releases the world group's impl, then the backend (MPI_Finalize). */
    void (*close)(void *state, ls_comm_group *world);
    /* Ends every process of the job with exit status code (may be NULL:
     * the front end exits this process). */
    void (*abort)(void *state, int code);
    /* The library this build links, for the receipts (NULL: none). */
    const char *(*library)(void);
    /* The memory spaces it moves (LS_MEM_SPACE_BIT of each; host among them). */
    unsigned spaces;
    /* The most elements one call below is given (the front end splits). */
    size_t max_count;

    /* The collectives, each on n <= max_count elements, with the errors as
     * LS_ERR_IO and the reason set with ls_comm_fail.  n may be 0. */
    ls_status (*allreduce_max)(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, const ls_comm_call *call);
    ls_status (*broadcast)(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, int root,
                           const ls_comm_call *call);
    /* recv [size * n], rank r's block at r*n; g->size > 1. */
    ls_status (*allgather)(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                           const ls_comm_call *call);
    /* dst and src are other ranks of g or -1 (none; its buffer may be
     * NULL); never the rank itself (the front end copies). */
    ls_status (*sendrecv)(ls_comm_group *g, const void *send, int dst, void *recv, int src, size_t n,
                          ls_trace_dtype dt, const ls_comm_call *call);
    ls_status (*barrier)(ls_comm_group *g, const ls_comm_call *call);
    /* Rank r of g sends scounts[r] elements from send + sdispls[r] and
     * receives rcounts[r] elements at recv + rdispls[r] (counts and
     * displacements in elements, each <= max_count; the front end checked
     * that they match the peers'); g->size > 1. */
    ls_status (*alltoallv)(ls_comm_group *g, const void *send, const size_t *scounts, const size_t *sdispls,
                           void *recv, const size_t *rcounts, const size_t *rdispls, ls_trace_dtype dt,
                           const ls_comm_call *call);
    /* The sub-group of the world group w of the ranks with the same color,
     * ordered by key: sets out->rank, size and impl (ls_comm_grid; a
     * collective over w).  NULL where the backend has one rank only. */
    ls_status (*split)(ls_comm_group *w, int color, int key, ls_comm_group *out);
    /* Releases a split group's impl (NULL with split). */
    void (*group_free)(ls_comm_group *g);
} ls_comm_ops;

extern const ls_comm_ops ls_comm_ops_single;
extern const ls_comm_ops ls_comm_ops_mpi; /* builds with MPI only */

/* Registers a backend at run time (a test's, a plug-in): asked whether it
 * claims the process before the built ones, listed by ls_comm_backend_info,
 * opened by name.  dependency: the build record's dependency it contributes
 * (a registered name of receipts/format/build_info.h; NULL: none).  LS_ERR_ARG for
 * a missing entry, spaces without host, a name already registered, or a
 * full table (8 run-time entries).  ops and dependency must outlive every
 * communicator opened on them. */
ls_status ls_comm_backend_register(const ls_comm_ops *ops, const char *dependency);

/* Shared by the front end and the backends (comm.c). */
size_t ls_comm_dtype_size(ls_trace_dtype dt);
/* The process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set). */
int ls_comm_started_by_mpirun(void);
/* Sets ls_comm_last_error of g's communicator. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void ls_comm_fail(ls_comm_group *g, const char *fmt, ...);
#endif
