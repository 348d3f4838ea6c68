/* comm.c - the communicator (comm.h): single-rank backend, and the Open MPI
 * backend when built with LS_HAVE_MPI.
 *
 * Every public collective goes through the same three steps: check the
 * arguments (LS_ERR_ARG, nothing sent, no event, no gseq consumed), record
 * the operation (one trace event and the per-purpose statistics, when the
 * rank enters it, so that a rank stuck in a collective shows which one),
 * then run the backend.  The MPI backend works on a duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN, so that a failing call comes back as
 * LS_ERR_IO with the MPI error string rather than ending the process.
 *
 * Bytes (the events' "bytes" and ls_comm_stats): the payload this rank hands
 * to other ranks in the logical operation, not the library's wire traffic
 * (which depends on its algorithm): n elements for an allreduce or an
 * allgather, n on the root of a broadcast (0 elsewhere), n for a sendrecv
 * whose dst is another rank, 0 for a barrier, and 0 for everything in a
 * group of one (nothing leaves the rank).
 *
 * Memory: the fixed-order sum and large allgathers use one scratch buffer of
 * group size x LS_COMM_SUM_CHUNK elements at most, kept until close (plain
 * malloc: the communicator has no memory tracker; its size is bounded by the
 * constant, not by n). */
#include "trainer/dist/comm.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LS_HAVE_MPI
#include <mpi.h>
#endif

#define MAX_PURPOSES 64
#define PURPOSE_MAX 32 /* bytes, with the terminator */
/* Largest element count handed to one MPI call (MPI counts are int). */
#define MPI_PIECE ((size_t)1 << 30)

struct ls_comm_group {
    ls_comm *c;
    int rank, size;
    int64_t gseq;
#ifdef LS_HAVE_MPI
    MPI_Comm mc;
#endif
};

struct ls_comm {
    int rank, world;
    int mpi;           /* the MPI backend is open */
    int mpi_init_here; /* MPI_Init was called by ls_comm_open (finalize at close) */
    ls_comm_group cp;
    ls_trace_writer *w;
    ls_status trace_st;
    char err[512];
    ls_comm_stat stats[MAX_PURPOSES];
    size_t n_stats;
    uint64_t bytes_total;
    unsigned char *scratch;
    size_t scratch_cap;
};

/* ---- helpers ---------------------------------------------------------------- */

static void set_err(ls_comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
}

static size_t dtype_size(ls_trace_dtype dt) {
    switch (dt) {
    case LS_TRACE_DTYPE_F32: return 4;
    case LS_TRACE_DTYPE_F64: return 8;
    case LS_TRACE_DTYPE_I64: return 8;
    case LS_TRACE_DTYPE_U8: return 1;
    default: return 0;
    }
}

static int purpose_ok(const char *p) { return p && strlen(p) < PURPOSE_MAX && ls_trace_is_ident(p); }

/* Checks what every collective shares; *bytes = n * element size. */
static ls_status check_common(ls_comm_group *g, const char *op, size_t n, ls_trace_dtype dt,
                              const char *purpose, int layer, size_t *bytes) {
    ls_comm *c = g->c;
    size_t es = dtype_size(dt);
    if (!purpose_ok(purpose)) {
        set_err(c, "comm: %s: purpose \"%s\" is not an identifier ([a-z][a-z0-9_]*, under %d characters)",
                op, purpose ? purpose : "(null)", PURPOSE_MAX);
        return LS_ERR_ARG;
    }
    if (es == 0) {
        set_err(c, "comm: %s '%s': dtype %d is not one of f32, f64, i64, u8", op, purpose, (int)dt);
        return LS_ERR_ARG;
    }
    if (layer < -1) {
        set_err(c, "comm: %s '%s': layer %d (want -1 for none or >= 0)", op, purpose, layer);
        return LS_ERR_ARG;
    }
    if (n > SIZE_MAX / es / (size_t)g->size || n > (size_t)LS_TRACE_MAX_INT / es / (size_t)g->size) {
        set_err(c, "comm: %s '%s': count %zu of %s overflows the byte count", op, purpose, n,
                ls_trace_dtype_name(dt));
        return LS_ERR_ARG;
    }
    *bytes = n * es;
    return LS_OK;
}

static ls_status null_buf(ls_comm *c, const char *op, const char *purpose, const char *arg) {
    set_err(c, "comm: %s '%s': %s is NULL with a non-zero count", op, purpose, arg);
    return LS_ERR_ARG;
}

/* One trace event, the statistics, the group's sequence number. */
static void record(ls_comm_group *g, ls_trace_op op, ls_trace_red red, size_t n, ls_trace_dtype dt,
                   uint64_t bytes, const char *purpose, int layer) {
    ls_comm *c = g->c;
    if (g->size == 1) bytes = 0;
    if (c->w) {
        ls_trace_collective ev = {.group = "cp",
                                  .gseq = g->gseq,
                                  .op = op,
                                  .red = red,
                                  .count = (int64_t)n,
                                  .dtype = dt,
                                  .bytes = (int64_t)bytes,
                                  .purpose = purpose,
                                  .has_layer = layer >= 0,
                                  .layer = layer};
        ls_status st = ls_trace_emit_collective(c->w, &ev);
        /* flight recorder: a rank that blocks here (a peer died) and is then
         * killed still shows the collective it entered */
        if (st == LS_OK && g->size > 1) st = ls_trace_writer_flush(c->w);
        if (st != LS_OK && c->trace_st == LS_OK) c->trace_st = st;
    }
    g->gseq++;
    c->bytes_total += bytes;
    size_t i = 0;
    while (i < c->n_stats && strcmp(c->stats[i].purpose, purpose) != 0) i++;
    if (i == c->n_stats) {
        if (c->n_stats == MAX_PURPOSES) return; /* only the total counts it */
        snprintf(c->stats[i].purpose, sizeof c->stats[i].purpose, "%s", purpose);
        c->n_stats++;
    }
    c->stats[i].calls++;
    c->stats[i].bytes += bytes;
}

static ls_status scratch_get(ls_comm *c, size_t bytes, const char *op, const char *purpose) {
    if (bytes <= c->scratch_cap) return LS_OK;
    unsigned char *p = realloc(c->scratch, bytes);
    if (!p) {
        set_err(c, "comm: %s '%s': cannot allocate %zu bytes of scratch", op, purpose, bytes);
        return LS_ERR_NOMEM;
    }
    c->scratch = p;
    c->scratch_cap = bytes;
    return LS_OK;
}

/* dst[i] = s[0][i] + s[1][i] + ... + s[size-1][i], left to right, where
 * s[r] = src + r*k elements. */
static void ordered_sum(void *dst, const unsigned char *src, size_t k, int size, ls_trace_dtype dt) {
    switch (dt) {
    case LS_TRACE_DTYPE_F32: {
        float *d = dst;
        const float *s = (const float *)(const void *)src;
        memcpy(d, s, k * sizeof *d);
        for (int r = 1; r < size; r++)
            for (size_t i = 0; i < k; i++) d[i] += s[(size_t)r * k + i];
        break;
    }
    case LS_TRACE_DTYPE_F64: {
        double *d = dst;
        const double *s = (const double *)(const void *)src;
        memcpy(d, s, k * sizeof *d);
        for (int r = 1; r < size; r++)
            for (size_t i = 0; i < k; i++) d[i] += s[(size_t)r * k + i];
        break;
    }
    default: { /* i64: wraps modulo 2^64 (unsigned arithmetic: defined) */
        unsigned char *d = dst;
        for (size_t i = 0; i < k; i++) {
            uint64_t acc = 0, v;
            for (int r = 0; r < size; r++) {
                memcpy(&v, src + ((size_t)r * k + i) * 8, 8);
                acc += v;
            }
            memcpy(d + i * 8, &acc, 8);
        }
        break;
    }
    }
}

static int ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
    const unsigned char *pa = a, *pb = b;
    if (an == 0 || bn == 0) return 0;
    return pa < pb + bn && pb < pa + an;
}

/* ---- MPI backend ------------------------------------------------------------ */

#ifdef LS_HAVE_MPI
static MPI_Datatype mpi_type(ls_trace_dtype dt) {
    switch (dt) {
    case LS_TRACE_DTYPE_F32: return MPI_FLOAT;
    case LS_TRACE_DTYPE_F64: return MPI_DOUBLE;
    case LS_TRACE_DTYPE_I64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
    }
}

/* LS_OK, or LS_ERR_IO with the call, the operation and MPI's reason. */
static ls_status mpi_check(ls_comm_group *g, int rc, const char *call, const char *op, const char *purpose,
                           int layer) {
    if (rc == MPI_SUCCESS) return LS_OK;
    char why[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS) snprintf(why, sizeof why, "MPI error %d", rc);
    set_err(g->c, "comm: %s '%s' (layer %d, group cp gseq %lld, rank %d of %d): %s failed: %s", op, purpose,
            layer, (long long)(g->gseq - 1), g->rank, g->size, call, why);
    return LS_ERR_IO;
}
#endif

/* Gathers k elements from every rank into scratch (rank r at r*k). */
static ls_status gather_piece(ls_comm_group *g, const void *src, size_t k, ls_trace_dtype dt, const char *op,
                              const char *purpose, int layer) {
    size_t es = dtype_size(dt);
    ls_status st = scratch_get(g->c, k * es * (size_t)g->size, op, purpose);
    if (st != LS_OK) return st;
#ifdef LS_HAVE_MPI
    if (g->c->mpi)
        return mpi_check(g, MPI_Allgather(src, (int)k, mpi_type(dt), g->c->scratch, (int)k, mpi_type(dt), g->mc),
                         "MPI_Allgather", op, purpose, layer);
#endif
    (void)layer;
    memcpy(g->c->scratch, src, k * es);
    return LS_OK;
}

/* ---- open / close ----------------------------------------------------------- */

static int started_by_mpirun(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

ls_status ls_comm_open(ls_comm **out, int *argc, char ***argv, char *err, size_t err_len) {
    ls_status st = LS_OK;
    if (err && err_len) err[0] = '\0';
    if (!out) {
        if (err && err_len) snprintf(err, err_len, "ls_comm_open: out is NULL");
        return LS_ERR_ARG;
    }
    *out = NULL;
    ls_comm *c = calloc(1, sizeof *c);
    if (!c) {
        if (err && err_len) snprintf(err, err_len, "ls_comm_open: out of memory");
        return LS_ERR_NOMEM;
    }
    c->world = 1;
    c->cp.c = c;
    c->cp.size = 1;
#ifdef LS_HAVE_MPI
    c->cp.mc = MPI_COMM_NULL;
#endif
    if (started_by_mpirun()) {
#ifdef LS_HAVE_MPI
        int inited = 0, finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) {
            if (err && err_len) snprintf(err, err_len, "ls_comm_open: MPI was already finalized in this process");
            st = LS_ERR_ARG;
            goto cleanup;
        }
        MPI_Initialized(&inited);
        if (!inited) {
            int rc = MPI_Init(argc, argv);
            if (rc != MPI_SUCCESS) {
                if (err && err_len) snprintf(err, err_len, "ls_comm_open: MPI_Init failed (error %d)", rc);
                st = LS_ERR_IO;
                goto cleanup;
            }
            c->mpi_init_here = 1;
        }
        c->mpi = 1;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->cp.mc);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(c->cp.mc, MPI_ERRORS_RETURN);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->cp.mc, &c->cp.rank);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->cp.mc, &c->cp.size);
        if (rc != MPI_SUCCESS) {
            char why[MPI_MAX_ERROR_STRING];
            int len = 0;
            if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS) snprintf(why, sizeof why, "error %d", rc);
            if (err && err_len) snprintf(err, err_len, "ls_comm_open: setting up the cp group failed: %s", why);
            st = LS_ERR_IO;
            goto cleanup;
        }
        c->rank = c->cp.rank;
        c->world = c->cp.size;
#else
        (void)argc;
        (void)argv;
        if (err && err_len)
            snprintf(err, err_len,
                     "ls_comm_open: started by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set) but this build "
                     "has no MPI backend (configure with Open MPI installed and LS_WITH_MPI=ON)");
        st = LS_ERR_ARG;
        goto cleanup;
#endif
    }
    (void)argc;
    (void)argv;
    *out = c;
    c = NULL;
cleanup:
    ls_comm_close(c);
    return st;
}

void ls_comm_close(ls_comm *c) {
    if (!c) return;
#ifdef LS_HAVE_MPI
    if (c->mpi) {
        if (c->cp.mc != MPI_COMM_NULL) MPI_Comm_free(&c->cp.mc);
        if (c->mpi_init_here) MPI_Finalize();
    }
#endif
    free(c->scratch);
    free(c);
}

int ls_comm_rank(const ls_comm *c) { return c ? c->rank : 0; }
int ls_comm_world(const ls_comm *c) { return c ? c->world : 1; }
const char *ls_comm_backend(const ls_comm *c) { return c && c->mpi ? "mpi" : "single"; }

const char *ls_comm_mpi_library(void) {
#ifdef LS_HAVE_MPI
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
#else
    return "none";
#endif
}

_Noreturn void ls_comm_abort(ls_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
#ifdef LS_HAVE_MPI
    if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)c;
#endif
    exit(code);
}

void ls_comm_set_trace(ls_comm *c, ls_trace_writer *w) {
    if (c) c->w = w;
}
ls_status ls_comm_trace_status(const ls_comm *c) { return c ? c->trace_st : LS_ERR_ARG; }
const char *ls_comm_last_error(const ls_comm *c) { return c ? c->err : "ls_comm: NULL communicator"; }

ls_comm_group *ls_comm_cp(ls_comm *c) { return c ? &c->cp : NULL; }
int ls_group_rank(const ls_comm_group *g) { return g ? g->rank : 0; }
int ls_group_size(const ls_comm_group *g) { return g ? g->size : 1; }
const char *ls_group_name(const ls_comm_group *g) { return g ? "cp" : ""; }

/* The arguments of a reduction: check_common's, a reducible dtype, a buffer. */
static ls_status check_reduce(ls_comm_group *g, const char *op, const void *buf, size_t n, ls_trace_dtype dt,
                              const char *purpose, int layer, size_t *bytes) {
    if (!g) return LS_ERR_ARG;
    ls_status st = check_common(g, op, n, dt, purpose, layer, bytes);
    if (st != LS_OK) return st;
    if (dt == LS_TRACE_DTYPE_U8) {
        set_err(g->c, "comm: %s '%s': dtype u8 cannot be reduced (f32, f64 or i64)", op, purpose);
        return LS_ERR_ARG;
    }
    if (n && !buf) return null_buf(g->c, op, purpose, "buf");
    return LS_OK;
}

/* ---- collectives ------------------------------------------------------------ */

ls_status ls_group_allreduce_max(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, const char *purpose,
                                 int layer) {
    static const char OP[] = "allreduce_max";
    size_t bytes = 0;
    ls_status st = check_reduce(g, OP, buf, n, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    record(g, LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_MAX, n, dt, bytes, purpose, layer);
#ifdef LS_HAVE_MPI
    if (g->c->mpi) {
        size_t es = dtype_size(dt);
        for (size_t off = 0; off < n; off += MPI_PIECE) {
            size_t k = n - off < MPI_PIECE ? n - off : MPI_PIECE;
            st = mpi_check(g, MPI_Allreduce(MPI_IN_PLACE, (unsigned char *)buf + off * es, (int)k, mpi_type(dt),
                                            MPI_MAX, g->mc),
                           "MPI_Allreduce", OP, purpose, layer);
            if (st != LS_OK) return st;
        }
    }
#endif
    return LS_OK;
}

ls_status ls_group_allreduce_sum(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, const char *purpose,
                                 int layer) {
    static const char OP[] = "allreduce_sum";
    size_t bytes = 0;
    ls_status st = check_reduce(g, OP, buf, n, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    record(g, LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_SUM, n, dt, bytes, purpose, layer);
    if (g->size == 1) return LS_OK; /* the sum of one contribution */
    size_t es = dtype_size(dt);
    for (size_t off = 0; off < n; off += LS_COMM_SUM_CHUNK) {
        size_t k = n - off < LS_COMM_SUM_CHUNK ? n - off : LS_COMM_SUM_CHUNK;
        unsigned char *p = (unsigned char *)buf + off * es;
        st = gather_piece(g, p, k, dt, OP, purpose, layer);
        if (st != LS_OK) return st;
        ordered_sum(p, g->c->scratch, k, g->size, dt);
    }
    return LS_OK;
}

ls_status ls_group_broadcast(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, int root,
                             const char *purpose, int layer) {
    static const char OP[] = "broadcast";
    if (!g) return LS_ERR_ARG;
    size_t bytes = 0;
    ls_status st = check_common(g, OP, n, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    if (root < 0 || root >= g->size) {
        set_err(g->c, "comm: %s '%s': root %d is not a rank of the group (size %d)", OP, purpose, root, g->size);
        return LS_ERR_ARG;
    }
    if (n && !buf) return null_buf(g->c, OP, purpose, "buf");
    record(g, LS_TRACE_OP_BROADCAST, LS_TRACE_RED_NONE, n, dt, root == g->rank ? bytes : 0, purpose, layer);
#ifdef LS_HAVE_MPI
    if (g->c->mpi) {
        size_t es = dtype_size(dt);
        for (size_t off = 0; off < n; off += MPI_PIECE) {
            size_t k = n - off < MPI_PIECE ? n - off : MPI_PIECE;
            st = mpi_check(g, MPI_Bcast((unsigned char *)buf + off * es, (int)k, mpi_type(dt), root, g->mc),
                           "MPI_Bcast", OP, purpose, layer);
            if (st != LS_OK) return st;
        }
    }
#endif
    return LS_OK;
}

ls_status ls_group_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                             const char *purpose, int layer) {
    static const char OP[] = "allgather";
    if (!g) return LS_ERR_ARG;
    size_t bytes = 0;
    ls_status st = check_common(g, OP, n, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    if (n && !send) return null_buf(g->c, OP, purpose, "send");
    if (n && !recv) return null_buf(g->c, OP, purpose, "recv");
    if (ranges_overlap(send, bytes, recv, bytes * (size_t)g->size)) {
        set_err(g->c, "comm: %s '%s': send and recv overlap", OP, purpose);
        return LS_ERR_ARG;
    }
    record(g, LS_TRACE_OP_ALLGATHER, LS_TRACE_RED_NONE, n, dt, bytes, purpose, layer);
    size_t es = dtype_size(dt);
    if (g->size == 1) {
        if (n) memcpy(recv, send, bytes);
        return LS_OK;
    }
#ifdef LS_HAVE_MPI
    if (n <= MPI_PIECE)
        return mpi_check(g, MPI_Allgather(send, (int)n, mpi_type(dt), recv, (int)n, mpi_type(dt), g->mc),
                         "MPI_Allgather", OP, purpose, layer);
#endif
    /* very large n: in pieces through the scratch buffer */
    for (size_t off = 0; off < n; off += LS_COMM_SUM_CHUNK) {
        size_t k = n - off < LS_COMM_SUM_CHUNK ? n - off : LS_COMM_SUM_CHUNK;
        st = gather_piece(g, (const unsigned char *)send + off * es, k, dt, OP, purpose, layer);
        if (st != LS_OK) return st;
        for (int r = 0; r < g->size; r++)
            memcpy((unsigned char *)recv + ((size_t)r * n + off) * es, g->c->scratch + (size_t)r * k * es, k * es);
    }
    return LS_OK;
}

ls_status ls_group_sendrecv(ls_comm_group *g, const void *send, int dst, void *recv, int src, size_t n,
                            ls_trace_dtype dt, const char *purpose, int layer) {
    static const char OP[] = "sendrecv";
    if (!g) return LS_ERR_ARG;
    size_t bytes = 0;
    ls_status st = check_common(g, OP, n, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    if (dst < -1 || dst >= g->size || src < -1 || src >= g->size) {
        set_err(g->c, "comm: %s '%s': peers dst %d, src %d (want -1 or a rank below %d)", OP, purpose, dst, src,
                g->size);
        return LS_ERR_ARG;
    }
    if ((dst == g->rank) != (src == g->rank)) {
        set_err(g->c, "comm: %s '%s': rank %d sends to itself or receives from itself but not both "
                      "(dst %d, src %d): the message would never be matched", OP, purpose, g->rank, dst, src);
        return LS_ERR_ARG;
    }
    if (n && dst >= 0 && !send) return null_buf(g->c, OP, purpose, "send");
    if (n && src >= 0 && !recv) return null_buf(g->c, OP, purpose, "recv");
    if (dst >= 0 && src >= 0 && ranges_overlap(send, bytes, recv, bytes)) {
        set_err(g->c, "comm: %s '%s': send and recv overlap", OP, purpose);
        return LS_ERR_ARG;
    }
    record(g, LS_TRACE_OP_SENDRECV, LS_TRACE_RED_NONE, n, dt, dst >= 0 && dst != g->rank ? bytes : 0, purpose,
           layer);
    if (dst == g->rank) { /* to and from itself */
        if (n) memcpy(recv, send, bytes);
        return LS_OK;
    }
#ifdef LS_HAVE_MPI
    if (g->c->mpi) {
        size_t es = dtype_size(dt);
        /* Open MPI checks the buffer even for MPI_PROC_NULL: the side without
         * a peer gets count 0 and a dummy buffer */
        int to = dst < 0 ? MPI_PROC_NULL : dst, from = src < 0 ? MPI_PROC_NULL : src;
        unsigned char dummy[8];
        for (size_t off = 0; off < n || off == 0; off += MPI_PIECE) {
            size_t k = n - off < MPI_PIECE ? n - off : MPI_PIECE;
            const void *sp = dst >= 0 && n ? (const unsigned char *)send + off * es : dummy;
            void *rp = src >= 0 && n ? (unsigned char *)recv + off * es : dummy;
            st = mpi_check(g, MPI_Sendrecv(sp, dst >= 0 ? (int)k : 0, mpi_type(dt), to, 0, rp,
                                           src >= 0 ? (int)k : 0, mpi_type(dt), from, 0, g->mc, MPI_STATUS_IGNORE),
                           "MPI_Sendrecv", OP, purpose, layer);
            if (st != LS_OK || n == 0) return st;
        }
    }
#endif
    return LS_OK;
}

ls_status ls_group_barrier(ls_comm_group *g, const char *purpose) {
    static const char OP[] = "barrier";
    if (!g) return LS_ERR_ARG;
    size_t bytes = 0;
    ls_status st = check_common(g, OP, 0, LS_TRACE_DTYPE_U8, purpose, -1, &bytes);
    if (st != LS_OK) return st;
    record(g, LS_TRACE_OP_BARRIER, LS_TRACE_RED_NONE, 0, LS_TRACE_DTYPE_U8, 0, purpose, -1);
#ifdef LS_HAVE_MPI
    if (g->c->mpi) return mpi_check(g, MPI_Barrier(g->mc), "MPI_Barrier", OP, purpose, -1);
#endif
    return LS_OK;
}

/* ---- statistics ------------------------------------------------------------- */

size_t ls_comm_stats(const ls_comm *c, ls_comm_stat *out, size_t cap) {
    if (!c) return 0;
    for (size_t i = 0; out && i < cap && i < c->n_stats; i++) out[i] = c->stats[i];
    return c->n_stats;
}

uint64_t ls_comm_bytes_sent(const ls_comm *c) { return c ? c->bytes_total : 0; }
