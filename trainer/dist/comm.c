/* comm.c - the communicator's front end (comm.h): argument checks, the
 * collective trace record, the statistics and the fixed-order sum, once for
 * every backend; the backends (comm_backend.h) only move bytes.
 *
 * Every public collective goes through the same three steps: check the
 * arguments (LS_ERR_ARG, nothing sent, no event, no gseq consumed), record
 * the operation (one trace event and the per-purpose statistics, when the
 * rank enters it, so that a rank stuck in a collective shows which one),
 * then call the backend, in pieces of at most its max_count elements.
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
 * constant, not by n).  For buffers in a space the host may not read
 * (trainer/base/mem_space.h) the scratch is a block of that space
 * (ls_mem_alloc_in, LS_MEM_COMM, as bounded), and the front end moves and
 * adds their bytes only through ls_mem_copy and ls_mem_sum_ordered.
 *
 * Backends are registered names (the table below and ls_comm_backend_register);
 * group kinds are the receipts' registered ones (ls_trace_group_kind). */
#include "trainer/dist/comm.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/base/coll_memo.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/dist/comm_backend.h"

#define MAX_PURPOSES 64
#define PURPOSE_MAX 32 /* bytes, with the terminator */

/* The registered backends: every backend the project knows, built in this
 * build or not (ops NULL: listed, contributing its dependency as "none",
 * never opened), in the order ls_comm_open asks them whether they claim the
 * process after the run-time ones; the single-rank backend claims every
 * process and comes last.  An NCCL backend is one more entry (comm_backend.h). */
typedef struct {
    const char *name;
    const char *dependency; /* the build record's dependency it contributes (receipts/format/build_info.h); NULL none */
    const ls_comm_ops *ops;
} backend_entry;
static const backend_entry builtin[] = {
#ifdef LS_HAVE_MPI
    {"mpi", "mpi", &ls_comm_ops_mpi},
#else
    {"mpi", "mpi", NULL},
#endif
    {"single", NULL, &ls_comm_ops_single},
};
#define N_BUILTIN (sizeof builtin / sizeof builtin[0])
#define MAX_RUNTIME 8
static backend_entry runtime[MAX_RUNTIME]; /* ls_comm_backend_register (one thread: before any open) */
static size_t n_runtime;

/* The i-th registered backend: the run-time ones first, then the built ones. */
static const backend_entry *entry_at(size_t i) {
    if (i < n_runtime) return &runtime[i];
    return i - n_runtime < N_BUILTIN ? &builtin[i - n_runtime] : NULL;
}

static const backend_entry *entry_named(const char *name) {
    const backend_entry *e;
    for (size_t i = 0; name && (e = entry_at(i)) != NULL; i++)
        if (strcmp(e->name, name) == 0) return e;
    return NULL;
}

struct ls_comm {
    const ls_comm_ops *be;
    void *state; /* the backend's */
    ls_comm_group world; /* every rank (the backend's group); named "world" in a grid with ep > 1 */
    ls_comm_group cp;    /* the world itself (ep 1), else this rank's CP group (ls_comm_grid) */
    ls_comm_group ep;    /* this rank's EP group (ep > 1 only) */
    int ep_size;         /* the grid's ep (1: no grid) */
    ls_trace_writer *w;
    ls_status trace_st;
    char err[512];
    ls_comm_stat stats[MAX_PURPOSES];
    size_t n_stats;
    uint64_t bytes_total;
    unsigned char *scratch;
    size_t scratch_cap;
    unsigned char *dscratch; /* the scratch of buffers the host may not read: a block of dscratch_space */
    size_t dscratch_cap;
    ls_mem_space dscratch_space;
};

/* ---- helpers ---------------------------------------------------------------- */

void ls_comm_fail(ls_comm_group *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->c->err, sizeof g->c->err, fmt, ap);
    va_end(ap);
}

size_t ls_comm_dtype_size(ls_trace_dtype dt) {
    switch (dt) {
    case LS_TRACE_DTYPE_F32: return 4;
    case LS_TRACE_DTYPE_F64: return 8;
    case LS_TRACE_DTYPE_I64: return 8;
    case LS_TRACE_DTYPE_U8: return 1;
    default: return 0;
    }
}

int ls_comm_started_by_mpirun(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

static int purpose_ok(const char *p) { return p && strlen(p) < PURPOSE_MAX && ls_trace_is_ident(p); }

/* Checks what every collective shares; *bytes = n * element size. */
static ls_status check_common(ls_comm_group *g, const char *op, size_t n, ls_trace_dtype dt,
                              const char *purpose, int layer, size_t *bytes) {
    size_t es = ls_comm_dtype_size(dt);
    if (!purpose_ok(purpose)) {
        ls_comm_fail(g, "comm: %s: purpose \"%s\" is not an identifier ([a-z][a-z0-9_]*, under %d characters)",
                     op, purpose ? purpose : "(null)", PURPOSE_MAX);
        return LS_ERR_ARG;
    }
    if (es == 0) {
        ls_comm_fail(g, "comm: %s '%s': dtype %d is not one of f32, f64, i64, u8", op, purpose, (int)dt);
        return LS_ERR_ARG;
    }
    if (layer < -1) {
        ls_comm_fail(g, "comm: %s '%s': layer %d (want -1 for none or >= 0)", op, purpose, layer);
        return LS_ERR_ARG;
    }
    if (n > SIZE_MAX / es / (size_t)g->size || n > (size_t)LS_TRACE_MAX_INT / es / (size_t)g->size) {
        ls_comm_fail(g, "comm: %s '%s': count %zu of %s overflows the byte count", op, purpose, n,
                     ls_trace_dtype_name(dt));
        return LS_ERR_ARG;
    }
    *bytes = n * es;
    return LS_OK;
}

static ls_status null_buf(ls_comm_group *g, const char *op, const char *purpose, const char *arg) {
    ls_comm_fail(g, "comm: %s '%s': %s is NULL with a non-zero count", op, purpose, arg);
    return LS_ERR_ARG;
}

/* One trace event, the statistics, the group's sequence number; *call
 * describes the operation to the backend. */
static void record(ls_comm_group *g, ls_trace_op op, ls_trace_red red, size_t n, ls_trace_dtype dt,
                   uint64_t bytes, const char *opname, const char *purpose, int layer, ls_comm_call *call) {
    ls_comm *c = g->c;
    *call = (ls_comm_call){.op = opname, .purpose = purpose, .layer = layer, .gseq = g->gseq};
    if (g->size == 1) bytes = 0;
    if (c->w) {
        ls_trace_collective ev = {.group = g->name,
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

static ls_status scratch_get(ls_comm_group *g, size_t bytes, const char *op, const char *purpose) {
    ls_comm *c = g->c;
    if (bytes <= c->scratch_cap) return LS_OK;
    unsigned char *p = realloc(c->scratch, bytes);
    if (!p) {
        ls_comm_fail(g, "comm: %s '%s': cannot allocate %zu bytes of scratch", op, purpose, bytes);
        return LS_ERR_NOMEM;
    }
    c->scratch = p;
    c->scratch_cap = bytes;
    return LS_OK;
}

static int ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
    const unsigned char *pa = a, *pb = b;
    if (an == 0 || bn == 0) return 0;
    return pa < pb + bn && pb < pa + an;
}

static size_t piece(size_t n, size_t off, size_t max) { return n - off < max ? n - off : max; }

/* The checkpointed replay's recompute (trainer/base/coll_memo.h): with a replaying memo current a call
 * takes the forward's result (1: *st says whether it matched) and communicates nothing; with a recording
 * one, *dg is its input digest for memo_keep after the call. */
static int memo_take(const char *op, const char *purpose, int layer, const void *in, size_t in_bytes, void *out,
                     size_t out_bytes, ls_status *st, uint64_t *dg) {
    *dg = 0;
    if (!ls_coll_memo_current()) return 0;
    *dg = ls_coll_memo_digest(in, in_bytes);
    return ls_coll_memo_take(op, purpose, layer, *dg, out, out_bytes, st);
}
static void memo_keep(const char *op, const char *purpose, int layer, uint64_t dg, const void *out, size_t bytes) {
    if (ls_coll_memo_active(LS_COLL_MEMO_RECORD)) ls_coll_memo_put(op, purpose, layer, dg, out, bytes);
}

/* The scratch of a call whose buffers are in space sp: the host scratch for a host-readable space, else a
 * block of sp (LS_MEM_COMM) of at least bytes, kept until close. */
static ls_status scratch_in(ls_comm_group *g, ls_mem_space sp, size_t bytes, const char *op, const char *purpose,
                            unsigned char **out) {
    ls_comm *c = g->c;
    if (ls_mem_space_host_readable(sp)) {
        ls_status st = scratch_get(g, bytes, op, purpose);
        *out = c->scratch;
        return st;
    }
    if (!c->dscratch || c->dscratch_space != sp || c->dscratch_cap < bytes) {
        ls_mem_free(c->dscratch);
        c->dscratch_cap = 0;
        c->dscratch = ls_mem_alloc_in(LS_MEM_COMM, sp, bytes);
        if (!c->dscratch) {
            ls_comm_fail(g, "comm: %s '%s': cannot allocate %zu bytes of %s scratch", op, purpose, bytes,
                         ls_mem_space_name(sp));
            return LS_ERR_NOMEM;
        }
        c->dscratch_cap = bytes;
        c->dscratch_space = sp;
    }
    *out = c->dscratch;
    return LS_OK;
}

/* Gathers k elements (k <= LS_COMM_SUM_CHUNK) from every rank into the scratch of space sp (rank r at
 * r*k, *out); g->size > 1. */
static ls_status gather_piece(ls_comm_group *g, ls_mem_space sp, const void *src, size_t k, ls_trace_dtype dt,
                              const ls_comm_call *call, unsigned char **out) {
    ls_status st = scratch_in(g, sp, k * ls_comm_dtype_size(dt) * (size_t)g->size, call->op, call->purpose, out);
    if (st != LS_OK) return st;
    return g->c->be->allgather(g, src, *out, k, dt, call);
}

static ls_mem_elem elem_of(ls_trace_dtype dt) {
    return dt == LS_TRACE_DTYPE_F32 ? LS_MEM_ELEM_F32 : dt == LS_TRACE_DTYPE_F64 ? LS_MEM_ELEM_F64 : LS_MEM_ELEM_I64;
}

/* The memory space of a call's buffers a and b (either NULL: not given): LS_ERR_ARG (the reason set, nothing
 * recorded) when they are in different spaces, in one the backend does not move, or in one the host may not
 * read while the checkpointed replay's memo (which digests host bytes) is current. */
static ls_status buf_space(ls_comm_group *g, const char *op, const char *purpose, const void *a, const char *an,
                           const void *b, const char *bn, ls_mem_space *out) {
    ls_mem_space sa = a ? ls_mem_space_of(a) : LS_MEM_SPACE_HOST, sb = b ? ls_mem_space_of(b) : sa;
    if (!a) sa = sb;
    *out = sa;
    if (sa != sb) {
        ls_comm_fail(g, "comm: %s '%s': %s is in %s memory and %s in %s memory (one call moves one space)", op,
                     purpose, an, ls_mem_space_name(sa), bn, ls_mem_space_name(sb));
        return LS_ERR_ARG;
    }
    if (!(g->c->be->spaces & LS_MEM_SPACE_BIT(sa))) {
        char moves[64] = "";
        for (int s = 0; s < LS_MEM_SPACE_COUNT; s++)
            if (g->c->be->spaces & LS_MEM_SPACE_BIT(s))
                snprintf(moves + strlen(moves), sizeof moves - strlen(moves), "%s%s", moves[0] ? ", " : "",
                         ls_mem_space_name((ls_mem_space)s));
        ls_comm_fail(g, "comm: %s '%s': %s is in %s memory, which the %s backend does not move (it moves: %s)", op,
                     purpose, a ? an : bn, ls_mem_space_name(sa), g->c->be->name, moves);
        return LS_ERR_ARG;
    }
    if (!ls_mem_space_host_readable(sa) && ls_coll_memo_current()) {
        ls_comm_fail(g,
                     "comm: %s '%s': %s is in %s memory, which the checkpointed replay's collective memo "
                     "(trainer/base/coll_memo.h) cannot digest (it reads host bytes)",
                     op, purpose, a ? an : bn, ls_mem_space_name(sa));
        return LS_ERR_ARG;
    }
    return LS_OK;
}

/* ---- open / close ----------------------------------------------------------- */

static ls_status open_backend(ls_comm **out, const char *name, int *argc, char ***argv, char *err,
                              size_t err_len);

ls_status ls_comm_open(ls_comm **out, int *argc, char ***argv, char *err, size_t err_len) {
    return open_backend(out, NULL, argc, argv, err, err_len);
}

ls_status ls_comm_open_backend(ls_comm **out, const char *name, int *argc, char ***argv, char *err,
                               size_t err_len) {
    if (!name) {
        if (err && err_len) snprintf(err, err_len, "ls_comm_open_backend: name is NULL");
        return LS_ERR_ARG;
    }
    return open_backend(out, name, argc, argv, err, err_len);
}

/* name NULL: the first registered backend that claims the process. */
static ls_status open_backend(ls_comm **out, const char *name, int *argc, char ***argv, char *err,
                              size_t err_len) {
    char discard[8];
    if (!err || !err_len) {
        err = discard;
        err_len = sizeof discard;
    }
    err[0] = '\0';
    if (!out) {
        snprintf(err, err_len, "ls_comm_open: out is NULL");
        return LS_ERR_ARG;
    }
    *out = NULL;
    ls_comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "ls_comm_open: out of memory");
        return LS_ERR_NOMEM;
    }
    const char *cp_kind = ls_trace_group_kind_name(LS_TRACE_GROUP_CP);
    c->world = (ls_comm_group){.c = c, .name = "cp", .kind = cp_kind, .rank = 0, .size = 1};
    c->ep_size = 1;
    const ls_comm_ops *be = NULL;
    if (name) {
        const backend_entry *e = entry_named(name);
        if (!e || !e->ops) {
            snprintf(err, err_len, "ls_comm_open: backend \"%s\" is %s", name,
                     e ? "not built in this build" : "not a registered backend (ls_comm_backend_info)");
            free(c);
            return LS_ERR_ARG;
        }
        be = e->ops;
    } else {
        const backend_entry *e;
        for (size_t i = 0; !be && (e = entry_at(i)) != NULL; i++)
            if (e->ops && e->ops->claims()) be = e->ops;
        if (!be) be = &ls_comm_ops_single;
    }
    ls_status st = be->open(&c->state, &c->world, argc, argv, err, err_len);
    if (st != LS_OK) {
        free(c);
        return st;
    }
    c->cp = c->world; /* one group until ls_comm_grid splits it */
    c->be = be;
    *out = c;
    return LS_OK;
}

void ls_comm_close(ls_comm *c) {
    if (!c) return;
    if (c->ep_size > 1 && c->be->group_free) {
        c->be->group_free(&c->cp);
        c->be->group_free(&c->ep);
    }
    c->be->close(c->state, &c->world);
    free(c->scratch);
    ls_mem_free(c->dscratch);
    free(c);
}

int ls_comm_rank(const ls_comm *c) { return c ? c->world.rank : 0; }
int ls_comm_world(const ls_comm *c) { return c ? c->world.size : 1; }

ls_status ls_comm_grid(ls_comm *c, int ep, char *err, size_t err_len) {
    if (!c) return LS_ERR_ARG;
    int W = c->world.size;
    if (c->ep_size != 1) {
        snprintf(err, err_len, "--ep: the grid is already %d x %d", W / c->ep_size, c->ep_size);
        return LS_ERR_ARG;
    }
    if (ep < 1 || W % ep != 0) {
        snprintf(err, err_len, "--ep %d: does not divide the world of %d rank(s) (world = cp x ep)", ep, W);
        return LS_ERR_ARG;
    }
    if (ep == 1) return LS_OK;
    if (!c->be->split) {
        snprintf(err, err_len, "--ep %d: the %s backend cannot split its group", ep, c->be->name);
        return LS_ERR_ARG;
    }
    int r = c->world.rank, cp_idx = r / ep, ep_idx = r % ep;
    c->world.name = c->world.kind = ls_trace_group_kind_name(LS_TRACE_GROUP_WORLD);
    c->world.gseq = 0; /* nothing recorded before the grid: the trace opens after it */
    ls_comm_group cp = {.c = c, .kind = ls_trace_group_kind_name(LS_TRACE_GROUP_CP)},
                  epg = {.c = c, .kind = ls_trace_group_kind_name(LS_TRACE_GROUP_EP)};
    snprintf(cp.name_buf, sizeof cp.name_buf, "cp-e%d", ep_idx);
    snprintf(epg.name_buf, sizeof epg.name_buf, "ep-c%d", cp_idx);
    ls_status st = c->be->split(&c->world, ep_idx, cp_idx, &cp);
    if (st == LS_OK) {
        st = c->be->split(&c->world, cp_idx, ep_idx, &epg);
        if (st != LS_OK) c->be->group_free(&cp);
    }
    if (st != LS_OK) {
        snprintf(err, err_len, "--ep %d: %s", ep, c->err);
        return st;
    }
    c->cp = cp;
    c->ep = epg;
    c->cp.name = c->cp.name_buf;
    c->ep.name = c->ep.name_buf;
    c->ep_size = ep;
    return LS_OK;
}

int ls_comm_ep_size(const ls_comm *c) { return c ? c->ep_size : 1; }
ls_comm_group *ls_comm_ep(ls_comm *c) { return c && c->ep_size > 1 ? &c->ep : NULL; }
ls_comm_group *ls_comm_all(ls_comm *c) { return c ? (c->ep_size > 1 ? &c->world : &c->cp) : NULL; }

size_t ls_group_members(const ls_comm_group *g, int32_t *out, size_t cap) {
    if (!g) return 0;
    const ls_comm *c = g->c;
    int ep = c->ep_size, r = c->world.rank;
    size_t n = (size_t)g->size;
    for (size_t i = 0; out && i < n && i < cap; i++) {
        if (g == &c->ep) out[i] = (int32_t)((r / ep) * ep + (int)i);
        else if (g == &c->cp && ep > 1) out[i] = (int32_t)((int)i * ep + r % ep);
        else out[i] = (int32_t)i;
    }
    return n;
}
const char *ls_group_kind(const ls_comm_group *g) { return g ? g->kind : ""; }
const char *ls_comm_backend(const ls_comm *c) { return c ? c->be->name : "single"; }

/* ---- the registry ----------------------------------------------------------- */

ls_status ls_comm_backend_register(const ls_comm_ops *ops, const char *dependency) {
    if (!ops || !ops->name || !ops->claims || !ops->open || !ops->close || !ops->max_count ||
        !ops->allreduce_max || !ops->broadcast || !ops->allgather || !ops->sendrecv || !ops->barrier ||
        !ops->alltoallv || !(ops->spaces & LS_MEM_SPACE_BIT(LS_MEM_SPACE_HOST)) || (!ops->split != !ops->group_free) ||
        entry_named(ops->name) || n_runtime == MAX_RUNTIME)
        return LS_ERR_ARG;
    runtime[n_runtime++] = (backend_entry){ops->name, dependency, ops};
    return LS_OK;
}

static void info_of(const backend_entry *e, ls_comm_backend_info *out) {
    const char *lib = e->ops ? (e->ops->library ? e->ops->library() : "unknown") : "none";
    *out = (ls_comm_backend_info){.name = e->name,
                                  .built = e->ops != NULL,
                                  .dependency = e->dependency,
                                  .library = e->dependency ? lib : NULL,
                                  .spaces = e->ops ? e->ops->spaces : 0u};
}

size_t ls_comm_backend_count(void) { return n_runtime + N_BUILTIN; }

int ls_comm_backend_info_at(size_t i, ls_comm_backend_info *out) {
    const backend_entry *e = entry_at(i);
    if (!e || !out) return 0;
    info_of(e, out);
    return 1;
}

int ls_comm_backend_find(const char *name, ls_comm_backend_info *out) {
    const backend_entry *e = entry_named(name);
    if (!e || !out) return 0;
    info_of(e, out);
    return 1;
}

const char *ls_comm_backend_library(const char *name) {
    ls_comm_backend_info in;
    return ls_comm_backend_find(name, &in) && in.library ? in.library : "none";
}

size_t ls_comm_build_dependencies(ls_build_dep *out, size_t cap) {
    size_t n = 0;
    ls_comm_backend_info in;
    for (size_t i = 0; ls_comm_backend_info_at(i, &in); i++) {
        if (!in.dependency) continue;
        int seen = 0; /* two backends of one library give it once */
        for (size_t j = 0; j < i; j++)
            seen |= entry_at(j)->dependency && strcmp(entry_at(j)->dependency, in.dependency) == 0;
        if (seen) continue;
        if (out && n < cap) out[n] = (ls_build_dep){in.dependency, in.library};
        n++;
    }
    return n;
}

_Noreturn void ls_comm_abort(ls_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    if (c && c->be->abort) c->be->abort(c->state, code);
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
const char *ls_group_name(const ls_comm_group *g) { return g ? g->name : ""; }

/* The arguments of a reduction: check_common's, a reducible dtype, a buffer. */
static ls_status check_reduce(ls_comm_group *g, const char *op, const void *buf, size_t n, ls_trace_dtype dt,
                              const char *purpose, int layer, size_t *bytes) {
    if (!g) return LS_ERR_ARG;
    ls_status st = check_common(g, op, n, dt, purpose, layer, bytes);
    if (st != LS_OK) return st;
    if (dt == LS_TRACE_DTYPE_U8) {
        ls_comm_fail(g, "comm: %s '%s': dtype u8 cannot be reduced (f32, f64 or i64)", op, purpose);
        return LS_ERR_ARG;
    }
    if (n && !buf) return null_buf(g, op, purpose, "buf");
    return LS_OK;
}

/* ---- collectives ------------------------------------------------------------ */

ls_status ls_group_allreduce_max(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, const char *purpose,
                                 int layer) {
    static const char OP[] = "allreduce_max";
    size_t bytes = 0;
    ls_status st = check_reduce(g, OP, buf, n, dt, purpose, layer, &bytes);
    ls_mem_space sp;
    if (st == LS_OK) st = buf_space(g, OP, purpose, buf, "buf", NULL, NULL, &sp);
    if (st != LS_OK) return st;
    uint64_t dg;
    if (memo_take(OP, purpose, layer, buf, bytes, buf, bytes, &st, &dg)) return st;
    ls_comm_call call;
    record(g, LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_MAX, n, dt, bytes, OP, purpose, layer, &call);
    const ls_comm_ops *be = g->c->be;
    size_t es = ls_comm_dtype_size(dt);
    for (size_t off = 0; off < n && st == LS_OK; off += be->max_count)
        st = be->allreduce_max(g, (unsigned char *)buf + off * es, piece(n, off, be->max_count), dt, &call);
    if (st == LS_OK) memo_keep(OP, purpose, layer, dg, buf, bytes);
    return st;
}

ls_status ls_group_allreduce_sum(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, const char *purpose,
                                 int layer) {
    static const char OP[] = "allreduce_sum";
    size_t bytes = 0;
    ls_status st = check_reduce(g, OP, buf, n, dt, purpose, layer, &bytes);
    ls_mem_space sp;
    if (st == LS_OK) st = buf_space(g, OP, purpose, buf, "buf", NULL, NULL, &sp);
    if (st != LS_OK) return st;
    uint64_t dg;
    if (memo_take(OP, purpose, layer, buf, bytes, buf, bytes, &st, &dg)) return st;
    ls_comm_call call;
    record(g, LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_SUM, n, dt, bytes, OP, purpose, layer, &call);
    size_t es = ls_comm_dtype_size(dt);
    for (size_t off = 0; g->size > 1 && off < n; off += LS_COMM_SUM_CHUNK) { /* one rank: its own contribution */
        size_t k = piece(n, off, LS_COMM_SUM_CHUNK);
        unsigned char *p = (unsigned char *)buf + off * es, *gathered = NULL;
        st = gather_piece(g, sp, p, k, dt, &call, &gathered);
        if (st != LS_OK) return st;
        /* rank order, in the buffer's space: on the host, or by its provider (mem_space.h) */
        st = ls_mem_sum_ordered(p, gathered, k, g->size, elem_of(dt), sp);
        if (st != LS_OK) {
            ls_comm_fail(g, "comm: %s '%s': no fixed-order sum for %s memory", OP, purpose, ls_mem_space_name(sp));
            return st;
        }
    }
    memo_keep(OP, purpose, layer, dg, buf, bytes);
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
        ls_comm_fail(g, "comm: %s '%s': root %d is not a rank of the group (size %d)", OP, purpose, root, g->size);
        return LS_ERR_ARG;
    }
    if (n && !buf) return null_buf(g, OP, purpose, "buf");
    ls_mem_space sp;
    st = buf_space(g, OP, purpose, buf, "buf", NULL, NULL, &sp);
    if (st != LS_OK) return st;
    uint64_t dg;
    if (memo_take(OP, purpose, layer, buf, root == g->rank ? bytes : 0, buf, bytes, &st, &dg)) return st;
    ls_comm_call call;
    record(g, LS_TRACE_OP_BROADCAST, LS_TRACE_RED_NONE, n, dt, root == g->rank ? bytes : 0, OP, purpose, layer,
           &call);
    const ls_comm_ops *be = g->c->be;
    size_t es = ls_comm_dtype_size(dt);
    for (size_t off = 0; off < n && st == LS_OK; off += be->max_count)
        st = be->broadcast(g, (unsigned char *)buf + off * es, piece(n, off, be->max_count), dt, root, &call);
    if (st == LS_OK) memo_keep(OP, purpose, layer, dg, buf, bytes);
    return st;
}

ls_status ls_group_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                             const char *purpose, int layer) {
    static const char OP[] = "allgather";
    if (!g) return LS_ERR_ARG;
    size_t bytes = 0;
    ls_status st = check_common(g, OP, n, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    if (n && !send) return null_buf(g, OP, purpose, "send");
    if (n && !recv) return null_buf(g, OP, purpose, "recv");
    if (ranges_overlap(send, bytes, recv, bytes * (size_t)g->size)) {
        ls_comm_fail(g, "comm: %s '%s': send and recv overlap", OP, purpose);
        return LS_ERR_ARG;
    }
    ls_mem_space sp;
    st = buf_space(g, OP, purpose, send, "send", recv, "recv", &sp);
    if (st != LS_OK) return st;
    uint64_t dg;
    if (memo_take(OP, purpose, layer, send, bytes, recv, bytes * (size_t)g->size, &st, &dg)) return st;
    ls_comm_call call;
    record(g, LS_TRACE_OP_ALLGATHER, LS_TRACE_RED_NONE, n, dt, bytes, OP, purpose, layer, &call);
    size_t es = ls_comm_dtype_size(dt);
    if (g->size == 1) {
        if (n) (void)ls_mem_copy(recv, sp, send, sp, bytes); /* sp is one the backend moves: copyable */
        memo_keep(OP, purpose, layer, dg, recv, bytes);
        return LS_OK;
    }
    if (n <= g->c->be->max_count) {
        st = g->c->be->allgather(g, send, recv, n, dt, &call);
        if (st == LS_OK) memo_keep(OP, purpose, layer, dg, recv, bytes * (size_t)g->size);
        return st;
    }
    /* very large n: in pieces through the scratch buffer */
    for (size_t off = 0; off < n; off += LS_COMM_SUM_CHUNK) {
        size_t k = piece(n, off, LS_COMM_SUM_CHUNK);
        unsigned char *gathered = NULL;
        st = gather_piece(g, sp, (const unsigned char *)send + off * es, k, dt, &call, &gathered);
        if (st != LS_OK) return st;
        for (int r = 0; r < g->size; r++)
            (void)ls_mem_copy((unsigned char *)recv + ((size_t)r * n + off) * es, sp, gathered + (size_t)r * k * es,
                              sp, k * es);
    }
    memo_keep(OP, purpose, layer, dg, recv, bytes * (size_t)g->size);
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
        ls_comm_fail(g, "comm: %s '%s': peers dst %d, src %d (want -1 or a rank below %d)", OP, purpose, dst, src,
                     g->size);
        return LS_ERR_ARG;
    }
    if ((dst == g->rank) != (src == g->rank)) {
        ls_comm_fail(g,
                     "comm: %s '%s': rank %d sends to itself or receives from itself but not both "
                     "(dst %d, src %d): the message would never be matched",
                     OP, purpose, g->rank, dst, src);
        return LS_ERR_ARG;
    }
    if (n && dst >= 0 && !send) return null_buf(g, OP, purpose, "send");
    if (n && src >= 0 && !recv) return null_buf(g, OP, purpose, "recv");
    if (dst >= 0 && src >= 0 && ranges_overlap(send, bytes, recv, bytes)) {
        ls_comm_fail(g, "comm: %s '%s': send and recv overlap", OP, purpose);
        return LS_ERR_ARG;
    }
    ls_mem_space sp;
    st = buf_space(g, OP, purpose, dst >= 0 && n ? send : NULL, "send", src >= 0 && n ? recv : NULL, "recv", &sp);
    if (st != LS_OK) return st;
    uint64_t dg;
    size_t in_b = dst >= 0 ? bytes : 0, out_b = src >= 0 ? bytes : 0;
    if (memo_take(OP, purpose, layer, send, in_b, recv, out_b, &st, &dg)) return st;
    ls_comm_call call;
    record(g, LS_TRACE_OP_SENDRECV, LS_TRACE_RED_NONE, n, dt, dst >= 0 && dst != g->rank ? bytes : 0, OP, purpose,
           layer, &call);
    if (dst == g->rank) { /* to and from itself */
        if (n) (void)ls_mem_copy(recv, sp, send, sp, bytes);
        memo_keep(OP, purpose, layer, dg, recv, out_b);
        return LS_OK;
    }
    const ls_comm_ops *be = g->c->be;
    size_t es = ls_comm_dtype_size(dt);
    /* one backend call even for n == 0: the peers still meet */
    for (size_t off = 0; off < n || off == 0; off += be->max_count) {
        size_t k = n ? piece(n, off, be->max_count) : 0;
        const void *sp = dst >= 0 && n ? (const unsigned char *)send + off * es : NULL;
        void *rp = src >= 0 && n ? (unsigned char *)recv + off * es : NULL;
        st = be->sendrecv(g, sp, dst, rp, src, k, dt, &call);
        if (st != LS_OK) return st;
        if (n == 0) break;
    }
    memo_keep(OP, purpose, layer, dg, recv, out_b);
    return LS_OK;
}

ls_status ls_group_barrier(ls_comm_group *g, const char *purpose) {
    static const char OP[] = "barrier";
    if (!g) return LS_ERR_ARG;
    size_t bytes = 0;
    ls_status st = check_common(g, OP, 0, LS_TRACE_DTYPE_U8, purpose, -1, &bytes);
    if (st != LS_OK) return st;
    uint64_t dg;
    if (memo_take(OP, purpose, -1, NULL, 0, NULL, 0, &st, &dg)) return st;
    ls_comm_call call;
    record(g, LS_TRACE_OP_BARRIER, LS_TRACE_RED_NONE, 0, LS_TRACE_DTYPE_U8, 0, OP, purpose, -1, &call);
    st = g->c->be->barrier(g, &call);
    if (st == LS_OK) memo_keep(OP, purpose, -1, dg, NULL, 0);
    return st;
}

ls_status ls_group_alltoallv(ls_comm_group *g, const void *send, const size_t *scounts, const size_t *sdispls,
                             void *recv, const size_t *rcounts, const size_t *rdispls, ls_trace_dtype dt,
                             const char *purpose, int layer) {
    static const char OP[] = "alltoallv";
    if (!g) return LS_ERR_ARG;
    int n = g->size;
    size_t bytes = 0, es = ls_comm_dtype_size(dt), ssum = 0, rsum = 0, sout = 0, mx = 0;
    ls_status st = check_common(g, OP, 0, dt, purpose, layer, &bytes);
    if (st != LS_OK) return st;
    if (!scounts || !sdispls || !rcounts || !rdispls) {
        ls_comm_fail(g, "comm: %s '%s': a count or displacement array is NULL", OP, purpose);
        return LS_ERR_ARG;
    }
    for (int r = 0; r < n; r++) {
        size_t se = sdispls[r] + scounts[r], re = rdispls[r] + rcounts[r];
        if (se < sdispls[r] || re < rdispls[r] || se > SIZE_MAX / es || re > SIZE_MAX / es ||
            scounts[r] > g->c->be->max_count || rcounts[r] > g->c->be->max_count) {
            ls_comm_fail(g, "comm: %s '%s': the block of rank %d overflows", OP, purpose, r);
            return LS_ERR_ARG;
        }
        ssum += scounts[r], rsum += rcounts[r];
        if (r != g->rank) sout += scounts[r];
        if (se > mx) mx = se;
    }
    if ((ssum && !send) || (rsum && !recv)) return null_buf(g, OP, purpose, ssum && !send ? "send" : "recv");
    size_t rmx = 0;
    for (int r = 0; r < n; r++)
        if (rdispls[r] + rcounts[r] > rmx) rmx = rdispls[r] + rcounts[r];
    if (ranges_overlap(send, mx * es, recv, rmx * es)) {
        ls_comm_fail(g, "comm: %s '%s': send and recv overlap", OP, purpose);
        return LS_ERR_ARG;
    }
    ls_mem_space sp;
    st = buf_space(g, OP, purpose, ssum ? send : NULL, "send", rsum ? recv : NULL, "recv", &sp);
    if (st != LS_OK) return st;
    /* every rank's send and receive counts, so that the event's count (the group's total) is the same on
       every rank and a receive count that disagrees with its sender's is refused by every rank alike before
       anything moves */
    size_t n2 = 2 * (size_t)n;
    int64_t *mine = malloc(n2 * sizeof *mine), *all = malloc(n2 * (size_t)n * sizeof *all);
    if (!mine || !all) {
        free(mine), free(all);
        ls_comm_fail(g, "comm: %s '%s': out of memory for the counts", OP, purpose);
        return LS_ERR_NOMEM;
    }
    for (int r = 0; r < n; r++) mine[r] = (int64_t)scounts[r], mine[n + r] = (int64_t)rcounts[r];
    ls_comm_call call0 = {.op = OP, .purpose = purpose, .layer = layer, .gseq = g->gseq};
    if (n > 1) st = g->c->be->allgather(g, mine, all, n2, LS_TRACE_DTYPE_I64, &call0);
    else memcpy(all, mine, n2 * sizeof *all);
    uint64_t total = 0;
    for (int r = 0; st == LS_OK && r < n; r++)
        for (int q = 0; st == LS_OK && q < n; q++) {
            int64_t sent = all[(size_t)r * n2 + (size_t)q], expect = all[(size_t)q * n2 + (size_t)n + (size_t)r];
            total += (uint64_t)sent;
            if (sent != expect) {
                ls_comm_fail(g, "comm: %s '%s': rank %d expects %lld element(s) from rank %d, which sends %lld", OP,
                             purpose, q, (long long)expect, r, (long long)sent);
                st = LS_ERR_ARG;
            }
        }
    free(mine), free(all);
    if (st != LS_OK) return st;
    if (total > (uint64_t)LS_TRACE_MAX_INT / es) {
        ls_comm_fail(g, "comm: %s '%s': the group's %llu elements overflow the byte count", OP, purpose,
                     (unsigned long long)total);
        return LS_ERR_ARG;
    }
    ls_comm_call call;
    record(g, LS_TRACE_OP_ALL_TO_ALL, LS_TRACE_RED_NONE, (size_t)total, dt, (uint64_t)(sout * es), OP, purpose,
           layer, &call);
    if (n == 1) {
        if (scounts[0])
            (void)ls_mem_copy((unsigned char *)recv + rdispls[0] * es, sp,
                              (const unsigned char *)send + sdispls[0] * es, sp, scounts[0] * es);
        return LS_OK;
    }
    return g->c->be->alltoallv(g, send, scounts, sdispls, recv, rcounts, rdispls, dt, &call);
}

/* ---- statistics ------------------------------------------------------------- */

size_t ls_comm_stats(const ls_comm *c, ls_comm_stat *out, size_t cap) {
    if (!c) return 0;
    for (size_t i = 0; out && i < cap && i < c->n_stats; i++) out[i] = c->stats[i];
    return c->n_stats;
}

uint64_t ls_comm_bytes_sent(const ls_comm *c) { return c ? c->bytes_total : 0; }
