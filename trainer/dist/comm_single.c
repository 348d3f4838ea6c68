/* comm_single.c - the communicator's single-rank backend (comm_backend.h):
 * one process, world 1, no library.  Nothing leaves the rank, so every
 * collective is a no-op or a copy; it claims every process the backends
 * before it in comm.c's table did not, and refuses one that mpirun started
 * (a build without MPI would otherwise run N copies of rank 0).  It moves
 * every memory space: its entries never touch a buffer (the front end's
 * copies within the rank go through the space's provider). */
#include <stdio.h>
#include <string.h>

#include "trainer/dist/comm_backend.h"

static int single_claims(void) { return 1; }

static ls_status single_open(void **state, ls_comm_group *world, int *argc, char ***argv, char *err,
                             size_t err_len) {
    (void)argc;
    (void)argv;
    *state = NULL;
    if (ls_comm_started_by_mpirun()) {
        snprintf(err, err_len,
                 "ls_comm_open: started by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set) but this build "
                 "has no MPI backend (configure with Open MPI installed and LS_WITH_MPI=ON)");
        return LS_ERR_ARG;
    }
    world->rank = 0;
    world->size = 1;
    world->impl = NULL;
    return LS_OK;
}

static void single_close(void *state, ls_comm_group *world) {
    (void)state;
    (void)world;
}

static ls_status single_allreduce_max(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt,
                                      const ls_comm_call *call) {
    (void)g, (void)buf, (void)n, (void)dt, (void)call;
    return LS_OK; /* the maximum of one contribution */
}

static ls_status single_broadcast(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, int root,
                                  const ls_comm_call *call) {
    (void)g, (void)buf, (void)n, (void)dt, (void)root, (void)call;
    return LS_OK; /* the root is this rank */
}

static ls_status single_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                                  const ls_comm_call *call) {
    (void)g, (void)call;
    if (n) memcpy(recv, send, n * ls_comm_dtype_size(dt));
    return LS_OK;
}

static ls_status single_sendrecv(ls_comm_group *g, const void *send, int dst, void *recv, int src, size_t n,
                                 ls_trace_dtype dt, const ls_comm_call *call) {
    (void)g, (void)send, (void)dst, (void)recv, (void)src, (void)n, (void)dt, (void)call;
    return LS_OK; /* both peers are -1: the only other rank would be itself */
}

static ls_status single_barrier(ls_comm_group *g, const ls_comm_call *call) {
    (void)g, (void)call;
    return LS_OK;
}

static ls_status single_alltoallv(ls_comm_group *g, const void *send, const size_t *scounts, const size_t *sdispls,
                                  void *recv, const size_t *rcounts, const size_t *rdispls, ls_trace_dtype dt,
                                  const ls_comm_call *call) {
    (void)g, (void)call, (void)rcounts;
    size_t es = ls_comm_dtype_size(dt); /* one rank: its block to itself */
    if (scounts[0]) memcpy((unsigned char *)recv + rdispls[0] * es, (const unsigned char *)send + sdispls[0] * es,
                           scounts[0] * es);
    return LS_OK;
}

const ls_comm_ops ls_comm_ops_single = {
    .name = "single",
    .claims = single_claims,
    .open = single_open,
    .close = single_close,
    .abort = NULL,
    .library = NULL,
    /* every space: nothing leaves the rank; the front end copies within it through the space's provider */
    .spaces = LS_MEM_SPACES_ALL,
    .max_count = SIZE_MAX,
    .allreduce_max = single_allreduce_max,
    .broadcast = single_broadcast,
    .allgather = single_allgather,
    .sendrecv = single_sendrecv,
    .barrier = single_barrier,
    .alltoallv = single_alltoallv,
    .split = NULL, /* one rank: the grid is 1 x 1 */
    .group_free = NULL,
};
