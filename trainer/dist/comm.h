/* comm.h - the communicator: ranks, process groups and the collectives that
 * context parallelism needs (docs/design.md §4), behind one interface with
 * registered backends (comm_backend.h, internal; ls_comm_backend_info lists
 * them): single-rank (comm_single.c: world 1, no library) and Open MPI
 * (comm_mpi.c: a run started by mpirun; in builds with MPI only).  comm.c, the front end, checks the arguments and writes the
 * trace events below for every backend alike.  dtype-independent.
 *
 * Every collective is recorded, when a trace writer is attached, as one
 * `collective` trace event on every rank of the group (group, per-group
 * sequence number gseq, op, reduction, element count, dtype, bytes the rank
 * sent, purpose, layer): one event per logical operation, whatever number of
 * library calls it took, so that the events of all ranks of a group match one
 * to one in gseq order (the audit's flight-recorder check).  The event is
 * written when the rank enters the operation (after its arguments passed),
 * so the last event of a rank stuck in a collective names that collective;
 * a refused call (LS_ERR_ARG) writes none and consumes no gseq.  "bytes" is
 * the payload this rank hands to other ranks in the logical operation, not
 * the library's wire traffic: n elements for an allreduce or an allgather,
 * n on the root of a broadcast (0 elsewhere), n for a sendrecv whose dst is
 * another rank, 0 for a barrier, and 0 for everything in a group of one.
 * Point-to-point chains (a state handed from rank r to r+1) are sendrecv
 * operations that every rank of the group calls, with -1 for "no peer", so
 * they match too.
 *
 * Memory spaces (trainer/base/mem_space.h): a buffer may be in any space
 * the communicator's backend moves (ls_comm_backend_info.spaces; single:
 * every space, mpi: host memory); the buffers of one call share one space.
 * A call with a buffer elsewhere is refused (LS_ERR_ARG naming the buffer,
 * its space and the backend; nothing sent, no event).  The front end never
 * dereferences a buffer the host may not read: its copies and the
 * fixed-order sum go through the space's provider (ls_mem_copy,
 * ls_mem_sum_ordered), with a scratch block of that space (LS_MEM_COMM).
 *
 * Determinism: allreduce_sum adds the ranks' contributions in rank order
 * 0, 1, ..., N-1 on every rank (the contributions are gathered, then summed
 * locally), so its result is bitwise identical on every rank and bitwise
 * reproducible across reruns, unlike a library allreduce whose association
 * depends on the algorithm and the message size.  MAX is exact.  i64 sums
 * wrap modulo 2^64; u8 buffers can be moved but not reduced (LS_ERR_ARG).
 *
 * Threads: one thread at a time per communicator (MPI_Init, not
 * MPI_Init_thread).
 *
 * Failure: a collective that fails returns LS_ERR_IO with the reason in
 * ls_comm_last_error.  A rank that cannot go on calls ls_comm_abort after
 * recording its error: under MPI that ends every rank of the job (never a
 * hang); single-rank it exits. */
#ifndef LS_TRAINER_COMM_H
#define LS_TRAINER_COMM_H
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "receipts/format/build_info.h"
#include "receipts/format/trace_event.h"
#include "receipts/writing/trace_writer.h"
#include "trainer/base/mem_space.h"

typedef struct ls_comm ls_comm;
typedef struct ls_comm_group ls_comm_group;

/* Opens the communicator: the Open MPI backend (MPI_Init, unless the process
 * already called it) when the process was started by mpirun
 * (OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment) and the build has
 * MPI; the single-rank backend otherwise.  LS_ERR_ARG (with err) when mpirun
 * started the process but the build has no MPI.  The caller owns *out (one
 * per process: longstraw-train's main opens it and hands it down in
 * ls_train_args.comm) and releases it with ls_comm_close. */
ls_status ls_comm_open(ls_comm **out, int *argc, char ***argv, char *err, size_t err_len);
/* Frees the communicator's groups (the cp group), then the backend
 * (MPI_Finalize when ls_comm_open called MPI_Init).  Call it after the last
 * collective on any of its groups; every ls_comm_group pointer taken from c
 * is invalid afterwards.  The trace writer stays the caller's (close neither
 * writes to it nor frees it).  NULL: nothing. */
void ls_comm_close(ls_comm *c);
int ls_comm_rank(const ls_comm *c);
int ls_comm_world(const ls_comm *c);
/* Opens the registered backend named name (ls_comm_backend_info), whether
 * or not it claims the process: LS_ERR_ARG (err naming it) for a name not
 * registered or not built in this build; else as ls_comm_open. */
ls_status ls_comm_open_backend(ls_comm **out, const char *name, int *argc, char ***argv, char *err,
                               size_t err_len);
const char *ls_comm_backend(const ls_comm *c); /* the backend's registered name: "single", "mpi", ... */

/* The registered backends: every backend the project knows (built in this
 * build or not: "single", "mpi"; a run-time one, comm_backend.h), in the
 * order ls_comm_open asks them whether they claim the process.  The strings
 * are static (or the registrant's). */
typedef struct {
    const char *name;       /* ls_comm_backend() of a communicator it opened */
    int built;              /* 1: in this build (can be opened) */
    const char *dependency; /* the build record's dependency it contributes ("mpi"); NULL: none */
    const char *library;    /* that dependency's version ("Open MPI v4.1.4"; "none" when not built); NULL
                               without a dependency */
    unsigned spaces;        /* the memory spaces it moves (LS_MEM_SPACE_BIT, trainer/base/mem_space.h);
                               0 when not built */
} ls_comm_backend_info;
size_t ls_comm_backend_count(void);
/* The i-th registered backend into *out: 1, or 0 when i >= the count. */
int ls_comm_backend_info_at(size_t i, ls_comm_backend_info *out);
/* The backend named name into *out: 1, or 0 when none is. */
int ls_comm_backend_find(const char *name, ls_comm_backend_info *out);
/* The version of the library the backend named name links ("none" when it
 * is not built, has no dependency or is not registered). */
const char *ls_comm_backend_library(const char *name);
/* The build record's dependencies the registered backends contribute (each
 * dependency once, with its version: "none" when not built), for
 * ls_build_info_create_deps: up to cap into out (may be NULL); returns how
 * many there are.  The strings live as long as the registry. */
size_t ls_comm_build_dependencies(ls_build_dep *out, size_t cap);
/* Ends the job with exit status code: MPI_Abort on MPI (every rank), exit()
 * single-rank.  Does not return. */
_Noreturn void ls_comm_abort(ls_comm *c, int code);

/* Collectives are recorded into w from here (NULL: not recorded).  The
 * writer's header must declare the groups by name (ls_comm_group_name). */
void ls_comm_set_trace(ls_comm *c, ls_trace_writer *w);
/* The first trace write failure of a collective event (LS_OK if none). */
ls_status ls_comm_trace_status(const ls_comm *c);
const char *ls_comm_last_error(const ls_comm *c);

/* The CP x EP grid (docs/design.md §4a): splits the world of W ranks into
 * W/ep CP groups of cp = W/ep ranks and cp EP groups of ep ranks, world rank
 * r = cp_idx * ep + ep_idx: the CP group of ep_idx holds the ranks
 * {c * ep + ep_idx : c < cp} (in that order: group rank c), the EP group of
 * cp_idx the ranks {cp_idx * ep + e : e < ep} (group rank e).  A collective
 * over the world group (MPI_Comm_split); call it on every rank before any
 * other collective and before a trace is attached.  ep 1: nothing changes
 * (the cp group stays the world, named "cp").  ep > 1: the world group is
 * named "world" (kind world), the CP group "cp-eE" (kind cp), the EP group
 * "ep-cC" (kind ep).  LS_ERR_ARG (with err naming --ep) when ep does not
 * divide the world or a grid exists; the groups are owned by c (freed by
 * ls_comm_close). */
ls_status ls_comm_grid(ls_comm *c, int ep, char *err, size_t err_len);
int ls_comm_ep_size(const ls_comm *c); /* the grid's ep (1: no grid; NULL: 1) */
/* This rank's EP group (borrowed, as ls_comm_cp); NULL when ep is 1. */
ls_comm_group *ls_comm_ep(ls_comm *c);
/* The group of every rank, for run-wide agreement (run id, status, barriers):
 * the cp group when ep is 1, the "world" group otherwise (borrowed). */
ls_comm_group *ls_comm_all(ls_comm *c);
/* The world ranks of g's members in group-rank order into out (up to cap);
 * returns their number (the trace header's members). */
size_t ls_group_members(const ls_comm_group *g, int32_t *out, size_t cap);
/* g's kind: a registered group kind (receipts/format/trace_event.h:
 * ls_trace_group_kind_name): "cp", "ep" or "world". */
const char *ls_group_kind(const ls_comm_group *g);

/* The context-parallel group ("cp"): every rank of the world, in order
 * (with a grid of ep > 1: this rank's CP group, above).
 * Lifetime: created by ls_comm_open, owned by c and freed by ls_comm_close;
 * callers borrow the pointer (ls_cp_init keeps it for a step) and never free
 * it.  It is the only group: there is no split, so nothing else must be
 * freed before close.  NULL when c is NULL. */
ls_comm_group *ls_comm_cp(ls_comm *c);
int ls_group_rank(const ls_comm_group *g);
int ls_group_size(const ls_comm_group *g);
const char *ls_group_name(const ls_comm_group *g);

/* Collectives over g.  n elements of dtype dt (LS_TRACE_DTYPE_F32/F64/I64/
 * U8); purpose an identifier ("lse_max", "dq_sum", "kv_ring", ...:
 * [a-z][a-z0-9_]*, under 32 characters); layer -1 when none.  Every rank of
 * g must make the same calls in the same order with the same n, dt and
 * purpose.  LS_ERR_ARG (nothing sent, no event) for a bad purpose, dtype,
 * layer, root or peer, a NULL buffer with n > 0, overlapping send and recv,
 * or n whose byte count overflows; LS_ERR_IO when the library call fails;
 * LS_ERR_NOMEM when the sum's scratch cannot be allocated.  The reason is
 * in ls_comm_last_error. */
ls_status ls_group_allreduce_max(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt,
                                 const char *purpose, int layer);
/* In place, fixed rank order (above).  Temporary memory: at most
 * LS_COMM_SUM_CHUNK elements per rank at a time. */
ls_status ls_group_allreduce_sum(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt,
                                 const char *purpose, int layer);
#define LS_COMM_SUM_CHUNK ((size_t)1 << 18)
ls_status ls_group_broadcast(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, int root,
                             const char *purpose, int layer);
/* recv [size * n]: rank r's send lands at recv + r*n elements. */
ls_status ls_group_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                             const char *purpose, int layer);
/* Sends n elements to group rank dst and receives n elements from src at
 * the same time (either peer -1: none; a buffer without a peer may be NULL;
 * a send to itself needs a receive from itself and copies), so that every rank of a ring or a
 * chain moves messages of one size and the events match (a ring whose
 * blocks differ in size pads them to the largest).  The event's count is n,
 * its bytes those this rank sent. */
ls_status ls_group_sendrecv(ls_comm_group *g, const void *send, int dst, void *recv, int src, size_t n,
                            ls_trace_dtype dt, const char *purpose, int layer);
ls_status ls_group_barrier(ls_comm_group *g, const char *purpose);
/* All-to-all with blocks of any size: this rank sends scounts[r] elements
 * from send + sdispls[r] to group rank r and receives rcounts[r] elements
 * from rank r at recv + rdispls[r] (counts and displacements in elements;
 * send blocks may overlap one another, recv blocks must not; a rank's block
 * to itself is copied).  Every rank's send counts are gathered first (one
 * library call more, in the same logical operation), so that a receive
 * count that disagrees with its sender's send count is refused (LS_ERR_ARG
 * on the rank that expected it; nothing moved) and the event's count is the
 * same on every rank: the elements the whole group moves (the sum of every
 * rank's send counts); its bytes those this rank sends to other ranks. */
ls_status ls_group_alltoallv(ls_comm_group *g, const void *send, const size_t *scounts, const size_t *sdispls,
                             void *recv, const size_t *rcounts, const size_t *rdispls, ls_trace_dtype dt,
                             const char *purpose, int layer);

/* Traffic per purpose on this rank since open: calls and bytes sent. */
typedef struct {
    char purpose[32];
    uint64_t calls, bytes;
} ls_comm_stat;
/* Copies up to cap entries (in first-use order) into out (may be NULL);
 * returns how many purposes there are.  At most 64 purposes are kept; the
 * traffic of later ones counts only in ls_comm_bytes_sent. */
size_t ls_comm_stats(const ls_comm *c, ls_comm_stat *out, size_t cap);
/* Total bytes sent since open. */
uint64_t ls_comm_bytes_sent(const ls_comm *c);
#endif
