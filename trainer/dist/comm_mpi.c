/* comm_mpi.c - the communicator's Open MPI backend (comm_backend.h),
 * compiled only in builds with MPI.  It claims a process started by mpirun,
 * calls MPI_Init unless the process already did (and then MPI_Finalize at
 * close), and works on a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN,
 * so that a failing call comes back as LS_ERR_IO with the MPI error string
 * rather than ending the process.  One thread at a time (MPI_Init, not
 * MPI_Init_thread). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#include "trainer/dist/comm_backend.h"

typedef struct {
    MPI_Comm mc;
} mpi_group;

typedef struct {
    int init_here; /* MPI_Init was called by open (MPI_Finalize at close) */
    mpi_group world;
} mpi_state;

static MPI_Comm comm_of(const ls_comm_group *g) { return ((const mpi_group *)g->impl)->mc; }

static MPI_Datatype mpi_type(ls_trace_dtype dt) {
    switch (dt) {
    case LS_TRACE_DTYPE_F32: return MPI_FLOAT;
    case LS_TRACE_DTYPE_F64: return MPI_DOUBLE;
    case LS_TRACE_DTYPE_I64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
    }
}

/* LS_OK, or LS_ERR_IO with the call, the operation and MPI's reason. */
static ls_status check(ls_comm_group *g, int rc, const char *fn, const ls_comm_call *call) {
    if (rc == MPI_SUCCESS) return LS_OK;
    char why[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS) snprintf(why, sizeof why, "MPI error %d", rc);
    ls_comm_fail(g, "comm: %s '%s' (layer %d, group %s gseq %lld, rank %d of %d): %s failed: %s", call->op,
                 call->purpose, call->layer, g->name, (long long)call->gseq, g->rank, g->size, fn, why);
    return LS_ERR_IO;
}

static int mpi_claims(void) { return ls_comm_started_by_mpirun(); }

static void mpi_close(void *state, ls_comm_group *world) {
    mpi_state *s = state;
    if (!s) return;
    if (s->world.mc != MPI_COMM_NULL) MPI_Comm_free(&s->world.mc);
    if (s->init_here) MPI_Finalize();
    world->impl = NULL;
    free(s);
}

static ls_status mpi_open(void **state, ls_comm_group *world, int *argc, char ***argv, char *err, size_t err_len) {
    *state = NULL;
    int inited = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
        snprintf(err, err_len, "ls_comm_open: MPI was already finalized in this process");
        return LS_ERR_ARG;
    }
    mpi_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "ls_comm_open: out of memory");
        return LS_ERR_NOMEM;
    }
    s->world.mc = MPI_COMM_NULL;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init(argc, argv);
        if (rc != MPI_SUCCESS) {
            snprintf(err, err_len, "ls_comm_open: MPI_Init failed (error %d)", rc);
            free(s);
            return LS_ERR_IO;
        }
        s->init_here = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &s->world.mc);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(s->world.mc, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(s->world.mc, &rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(s->world.mc, &size);
    if (rc != MPI_SUCCESS) {
        char why[MPI_MAX_ERROR_STRING];
        int len = 0;
        if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS) snprintf(why, sizeof why, "error %d", rc);
        snprintf(err, err_len, "ls_comm_open: setting up the cp group failed: %s", why);
        mpi_close(s, world);
        return LS_ERR_IO;
    }
    world->rank = rank;
    world->size = size;
    world->impl = &s->world;
    *state = s;
    return LS_OK;
}

static void mpi_abort(void *state, int code) {
    (void)state;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const char *mpi_library(void) {
    static char v[256]; /* MPI_Get_library_version may be called before MPI_Init */
    if (!v[0]) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int n = 0;
        if (MPI_Get_library_version(lib, &n) != MPI_SUCCESS) return "unknown";
        size_t k = 0; /* its first line, without the build details */
        while (lib[k] && lib[k] != ',' && lib[k] != '\n' && k + 1 < sizeof v) {
            v[k] = lib[k];
            k++;
        }
        v[k] = 0;
    }
    return v;
}

static ls_status mpi_allreduce_max(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt,
                                   const ls_comm_call *call) {
    return check(g, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), MPI_MAX, comm_of(g)), "MPI_Allreduce",
                 call);
}

static ls_status mpi_broadcast(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, int root,
                               const ls_comm_call *call) {
    return check(g, MPI_Bcast(buf, (int)n, mpi_type(dt), root, comm_of(g)), "MPI_Bcast", call);
}

static ls_status mpi_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                               const ls_comm_call *call) {
    return check(g, MPI_Allgather(send, (int)n, mpi_type(dt), recv, (int)n, mpi_type(dt), comm_of(g)),
                 "MPI_Allgather", call);
}

static ls_status mpi_sendrecv(ls_comm_group *g, const void *send, int dst, void *recv, int src, size_t n,
                              ls_trace_dtype dt, const ls_comm_call *call) {
    /* Open MPI checks the buffer even for MPI_PROC_NULL: the side without
     * a peer gets count 0 and a dummy buffer */
    unsigned char dummy[8];
    int to = dst < 0 ? MPI_PROC_NULL : dst, from = src < 0 ? MPI_PROC_NULL : src;
    const void *sp = send ? send : dummy;
    void *rp = recv ? recv : dummy;
    return check(g,
                 MPI_Sendrecv(sp, dst >= 0 ? (int)n : 0, mpi_type(dt), to, 0, rp, src >= 0 ? (int)n : 0,
                              mpi_type(dt), from, 0, comm_of(g), MPI_STATUS_IGNORE),
                 "MPI_Sendrecv", call);
}

static ls_status mpi_barrier(ls_comm_group *g, const ls_comm_call *call) {
    return check(g, MPI_Barrier(comm_of(g)), "MPI_Barrier", call);
}

static ls_status mpi_alltoallv(ls_comm_group *g, const void *send, const size_t *scounts, const size_t *sdispls,
                               void *recv, const size_t *rcounts, const size_t *rdispls, ls_trace_dtype dt,
                               const ls_comm_call *call) {
    int n = g->size;
    int *v = malloc(4 * (size_t)n * sizeof *v);
    if (!v) {
        ls_comm_fail(g, "comm: %s '%s': out of memory for the counts", call->op, call->purpose);
        return LS_ERR_NOMEM;
    }
    for (int r = 0; r < n; r++) {
        if (sdispls[r] > INT_MAX || rdispls[r] > INT_MAX) {
            free(v);
            ls_comm_fail(g, "comm: %s '%s': a displacement exceeds MPI's int", call->op, call->purpose);
            return LS_ERR_ARG;
        }
        v[r] = (int)scounts[r], v[n + r] = (int)sdispls[r], v[2 * n + r] = (int)rcounts[r], v[3 * n + r] = (int)rdispls[r];
    }
    unsigned char dummy[8]; /* Open MPI checks the buffers even for zero counts */
    ls_status st = check(g,
                         MPI_Alltoallv(send ? send : dummy, v, v + n, mpi_type(dt), recv ? recv : dummy, v + 2 * n,
                                       v + 3 * n, mpi_type(dt), comm_of(g)),
                         "MPI_Alltoallv", call);
    free(v);
    return st;
}

static ls_status mpi_split(ls_comm_group *w, int color, int key, ls_comm_group *out) {
    mpi_group *mg = calloc(1, sizeof *mg);
    if (!mg) {
        ls_comm_fail(w, "comm: grid: out of memory");
        return LS_ERR_NOMEM;
    }
    mg->mc = MPI_COMM_NULL;
    ls_comm_call call = {.op = "split", .purpose = out->name, .layer = -1, .gseq = w->gseq};
    ls_status st = check(w, MPI_Comm_split(comm_of(w), color, key, &mg->mc), "MPI_Comm_split", &call);
    int rank = 0, size = 1;
    if (st == LS_OK) st = check(w, MPI_Comm_set_errhandler(mg->mc, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", &call);
    if (st == LS_OK) st = check(w, MPI_Comm_rank(mg->mc, &rank), "MPI_Comm_rank", &call);
    if (st == LS_OK) st = check(w, MPI_Comm_size(mg->mc, &size), "MPI_Comm_size", &call);
    if (st != LS_OK) {
        if (mg->mc != MPI_COMM_NULL) MPI_Comm_free(&mg->mc);
        free(mg);
        return st;
    }
    out->rank = rank;
    out->size = size;
    out->impl = mg;
    return LS_OK;
}

static void mpi_group_free(ls_comm_group *g) {
    mpi_group *mg = g->impl;
    if (!mg) return;
    if (mg->mc != MPI_COMM_NULL) MPI_Comm_free(&mg->mc);
    free(mg);
    g->impl = NULL;
}

const ls_comm_ops ls_comm_ops_mpi = {
    .name = "mpi",
    .claims = mpi_claims,
    .open = mpi_open,
    .close = mpi_close,
    .abort = mpi_abort,
    .library = mpi_library,
    .spaces = LS_MEM_SPACES_HOST_READABLE, /* no CUDA-aware transport assumed */
    .max_count = (size_t)1 << 30, /* MPI counts are int */
    .allreduce_max = mpi_allreduce_max,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .sendrecv = mpi_sendrecv,
    .barrier = mpi_barrier,
    .alltoallv = mpi_alltoallv,
    .split = mpi_split,
    .group_free = mpi_group_free,
};
