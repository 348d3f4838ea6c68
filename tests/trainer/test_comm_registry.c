/* test_comm_registry.c - the communicator's registered names and its
 * memory spaces (trainer/dist/comm.h, comm_backend.h):
 *  - the backend registry: single and mpi listed whether built or not, with
 *    their dependency, library and spaces; opening by name, and the
 *    refusal of a name not registered (or not built);
 *  - the build record's dependencies come from the registered entries and
 *    equal what ls_build_info_create records; an unregistered dependency, one
 *    given twice, or one of the receipts library's own is refused (the
 *    fault the registry exists to catch);
 *  - the group kinds: one table, the communicator's groups name registered
 *    kinds, the trace writer refuses an unregistered one;
 *  - collectives on device buffers (the guarded device space: any host
 *    access faults) through a run-time registered three-rank loopback
 *    backend ("loop3", rank 0 of 3, its peers' contributions derived from
 *    rank 0's): the fixed-order sum over several LS_COMM_SUM_CHUNK pieces
 *    equals the host's rank-order sum bit for bit, over inputs that tell the
 *    orders apart; the single backend's copies (allgather, sendrecv to
 *    itself, alltoallv) on device buffers; the front end never dereferences
 *    them (it would fault);
 *  - refusals before anything is recorded: a device buffer on a backend that
 *    moves host memory only, send and recv in two spaces, a device buffer
 *    while the replay's collective memo is current;
 *  - fault injection: a backend that claims the device space but copies
 *    with memcpy faults (the guard catches a host dereference in a comm
 *    path). */
#include <criterion/criterion.h>

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/format/build_info.h"
#include "receipts/format/trace_event.h"
#include "receipts/writing/trace_writer.h"
#include "trainer/base/coll_memo.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/dist/comm.h"
#include "trainer/dist/comm_backend.h"

/* ---- the loopback backend: rank 0 of 3, its peers derived from its own data ---------------------------- */

/* Peer r's contribution from rank 0's element x: f64/f32 1 (rank 1) and -x (rank 2); i64 3x and 7. */
static void peer_of(void *dst, const void *x, size_t n, ls_trace_dtype dt, int r) {
    for (size_t i = 0; i < n; i++) switch (dt) {
        case LS_TRACE_DTYPE_F64: ((double *)dst)[i] = r == 1 ? 1.0 : -((const double *)x)[i]; break;
        case LS_TRACE_DTYPE_F32: ((float *)dst)[i] = r == 1 ? 1.0f : -((const float *)x)[i]; break;
        case LS_TRACE_DTYPE_I64:
            ((int64_t *)dst)[i] = r == 1 ? (int64_t)((uint64_t)((const int64_t *)x)[i] * 3u) : 7;
            break;
        default: ((unsigned char *)dst)[i] = ((const unsigned char *)x)[i]; break;
        }
}

static int loop_claims(void) { return 0; }
static ls_status loop_open(void **state, ls_comm_group *world, int *argc, char ***argv, char *err, size_t len) {
    (void)argc, (void)argv, (void)err, (void)len;
    *state = NULL;
    world->rank = 0;
    world->size = 3;
    world->impl = NULL;
    return LS_OK;
}
static void loop_close(void *state, ls_comm_group *world) { (void)state, (void)world; }
static ls_status loop_max(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, const ls_comm_call *call) {
    (void)g, (void)buf, (void)n, (void)dt, (void)call;
    return LS_OK;
}
static ls_status loop_bcast(ls_comm_group *g, void *buf, size_t n, ls_trace_dtype dt, int root,
                            const ls_comm_call *call) {
    (void)g, (void)buf, (void)n, (void)dt, (void)root, (void)call;
    return LS_OK;
}
/* A transport that moves any space: through the space's provider (as a device transport would by DMA). */
static ls_status loop_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                                const ls_comm_call *call) {
    (void)g, (void)call;
    size_t b = n * ls_comm_dtype_size(dt);
    ls_mem_space ss = ls_mem_space_of(send), rs = ls_mem_space_of(recv);
    unsigned char *x = malloc(b ? b : 1), *y = malloc(b ? b : 1);
    ls_status st = x && y ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK) st = ls_mem_copy(x, LS_MEM_SPACE_HOST, send, ss, b);
    if (st == LS_OK) st = ls_mem_copy(recv, rs, x, LS_MEM_SPACE_HOST, b);
    for (int r = 1; st == LS_OK && r < 3; r++) {
        peer_of(y, x, n, dt, r);
        st = ls_mem_copy((unsigned char *)recv + (size_t)r * b, rs, y, LS_MEM_SPACE_HOST, b);
    }
    free(x), free(y);
    return st == LS_OK ? LS_OK : LS_ERR_IO;
}
/* The injected fault: a backend that claims device memory but copies with memcpy. */
static ls_status bad_allgather(ls_comm_group *g, const void *send, void *recv, size_t n, ls_trace_dtype dt,
                               const ls_comm_call *call) {
    (void)g, (void)call;
    size_t b = n * ls_comm_dtype_size(dt);
    for (int r = 0; r < 3; r++) memcpy((unsigned char *)recv + (size_t)r * b, send, b);
    return LS_OK;
}
static ls_status loop_sendrecv(ls_comm_group *g, const void *send, int dst, void *recv, int src, size_t n,
                               ls_trace_dtype dt, const ls_comm_call *call) {
    (void)g, (void)send, (void)dst, (void)call;
    return src >= 0 ? ls_mem_zero(recv, ls_mem_space_of(recv), n * ls_comm_dtype_size(dt)) : LS_OK;
}
static ls_status loop_barrier(ls_comm_group *g, const ls_comm_call *call) {
    (void)g, (void)call;
    return LS_OK;
}
static ls_status loop_alltoallv(ls_comm_group *g, const void *send, const size_t *sc, const size_t *sd, void *recv,
                                const size_t *rc, const size_t *rd, ls_trace_dtype dt, const ls_comm_call *call) {
    (void)g, (void)send, (void)sc, (void)sd, (void)recv, (void)rc, (void)rd, (void)dt, (void)call;
    return LS_ERR_IO; /* not used */
}

static const ls_comm_ops loop3 = {
    .name = "loop3", .claims = loop_claims, .open = loop_open, .close = loop_close, .abort = NULL, .library = NULL,
    .spaces = LS_MEM_SPACES_ALL, .max_count = (size_t)1 << 20, .allreduce_max = loop_max, .broadcast = loop_bcast,
    .allgather = loop_allgather, .sendrecv = loop_sendrecv, .barrier = loop_barrier, .alltoallv = loop_alltoallv,
    .split = NULL, .group_free = NULL,
};

static void setup_guarded(void) {
    cr_assert_eq(ls_mem_space_register(&ls_mem_space_guarded), LS_OK);
}

static ls_comm *open_named(const char *name) {
    ls_comm *c = NULL;
    char err[256];
    ls_status st = ls_comm_open_backend(&c, name, NULL, NULL, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s: %s", name, err);
    return c;
}

/* ---- catching a host access ----------------------------------------------------------------------- */

static sigjmp_buf jb;
static void on_segv(int sig) {
    (void)sig;
    siglongjmp(jb, 1);
}

/* ---- the registry ------------------------------------------------------------------------------------ */

Test(comm_registry, backends_listed) {
    cr_assert_geq(ls_comm_backend_count(), 2);
    ls_comm_backend_info in;
    cr_assert(ls_comm_backend_find("single", &in));
    cr_assert(in.built);
    cr_assert_null(in.dependency);
    cr_assert_eq(in.spaces, LS_MEM_SPACES_ALL, "single-rank moves every space");
    cr_assert(ls_comm_backend_find("mpi", &in), "mpi is registered in every build");
    cr_assert_str_eq(in.dependency, "mpi");
    if (in.built) {
        cr_assert_eq(in.spaces, LS_MEM_SPACES_HOST_READABLE);
        cr_assert_str_neq(in.library, "none");
    } else {
        cr_assert_eq(in.spaces, 0u);
        cr_assert_str_eq(in.library, "none");
    }
    cr_assert_str_eq(ls_comm_backend_library("mpi"), in.library);
    cr_assert_str_eq(ls_comm_backend_library("single"), "none");
    cr_assert_str_eq(ls_comm_backend_library("bogus"), "none");
    cr_assert(!ls_comm_backend_find("bogus", &in));
    cr_assert(!ls_comm_backend_info_at(ls_comm_backend_count(), &in));
    /* every name once; the single backend last (it claims every process) */
    size_t n = ls_comm_backend_count();
    for (size_t i = 0; i < n; i++) {
        ls_comm_backend_info a, b;
        cr_assert(ls_comm_backend_info_at(i, &a));
        for (size_t j = i + 1; j < n; j++) {
            cr_assert(ls_comm_backend_info_at(j, &b));
            cr_assert_str_neq(a.name, b.name);
        }
        if (i + 1 == n) cr_assert_str_eq(a.name, "single");
    }
}

Test(comm_registry, open_by_name) {
    ls_comm *c = NULL;
    char err[256] = "";
    cr_assert_eq(ls_comm_open_backend(&c, "nccl", NULL, NULL, err, sizeof err), LS_ERR_ARG);
    cr_assert_null(c);
    cr_assert(strstr(err, "\"nccl\"") && strstr(err, "not a registered backend"), "%s", err);
    ls_comm_backend_info in;
    cr_assert(ls_comm_backend_find("mpi", &in));
    if (!in.built) {
        cr_assert_eq(ls_comm_open_backend(&c, "mpi", NULL, NULL, err, sizeof err), LS_ERR_ARG);
        cr_assert(strstr(err, "not built"), "%s", err);
    }
    cr_assert_eq(ls_comm_open_backend(&c, NULL, NULL, NULL, err, sizeof err), LS_ERR_ARG);
    c = open_named("single");
    cr_assert_str_eq(ls_comm_backend(c), "single");
    ls_comm_close(c);
    /* a run-time backend: registered once, listed before the built ones, opened by name */
    cr_assert_eq(ls_comm_backend_register(&loop3, NULL), LS_OK);
    cr_assert_eq(ls_comm_backend_register(&loop3, NULL), LS_ERR_ARG, "a name registered twice");
    ls_comm_ops hostless = loop3;
    hostless.name = "hostless";
    hostless.spaces = LS_MEM_SPACE_BIT(LS_MEM_SPACE_DEVICE);
    cr_assert_eq(ls_comm_backend_register(&hostless, NULL), LS_ERR_ARG, "a backend must move host memory");
    cr_assert(ls_comm_backend_info_at(0, &in));
    cr_assert_str_eq(in.name, "loop3");
    c = open_named("loop3");
    cr_assert_eq(ls_comm_world(c), 3);
    cr_assert_str_eq(ls_comm_backend(c), "loop3");
    ls_comm_close(c);
}

/* ---- dependencies ------------------------------------------------------------------------------------ */

Test(comm_registry, build_dependencies_from_the_registry) {
    size_t nd = 0;
    const int *own = NULL;
    const char *const *names = ls_build_info_dependency_names(&nd, &own);
    cr_assert_eq(nd, 5);
    /* every backend's dependency is a registered name the receipts library does not record itself */
    ls_comm_backend_info in;
    for (size_t i = 0; ls_comm_backend_info_at(i, &in); i++) {
        if (!in.dependency) continue;
        size_t k = 0;
        while (k < nd && strcmp(names[k], in.dependency) != 0) k++;
        cr_assert_lt(k, nd, "backend %s: dependency %s is not registered", in.name, in.dependency);
        cr_assert(!own[k]);
    }
    ls_build_dep deps[8] = {{"openblas", "0.3.21"}};
    size_t n = 1 + ls_comm_build_dependencies(deps + 1, 7);
    cr_assert_eq(n, 2, "mpi, once");
    cr_assert_str_eq(deps[1].name, "mpi");
    cJSON *a = NULL, *b = NULL;
    char err[256] = "";
    cr_assert_eq(ls_build_info_create_deps(deps, n, &a, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_build_info_create("0.3.21", ls_comm_backend_library("mpi"), &b), LS_OK);
    cr_assert(cJSON_Compare(cJSON_GetObjectItem(a, "dependencies"), cJSON_GetObjectItem(b, "dependencies"), 1));
    cr_assert_str_eq(cJSON_GetObjectItem(a, "build_digest")->valuestring,
                     cJSON_GetObjectItem(b, "build_digest")->valuestring, "the record (and digest) as before");
    const cJSON *d = cJSON_GetObjectItem(a, "dependencies");
    for (size_t i = 0; i < nd; i++) cr_assert(cJSON_IsString(cJSON_GetObjectItem(d, names[i])), "%s", names[i]);
    cr_assert_eq(cJSON_GetArraySize(d), (int)nd);
    cJSON_Delete(a), cJSON_Delete(b);
    /* the faults: an unregistered name, a name twice, one of receipts' own */
    const ls_build_dep bad1[] = {{"nccl", "2.19"}}, bad2[] = {{"mpi", "x"}, {"mpi", "y"}}, bad3[] = {{"zstd", "1"}};
    cr_assert_eq(ls_build_info_create_deps(bad1, 1, &a, err, sizeof err), LS_ERR_ARG);
    cr_assert(strstr(err, "\"nccl\" is not a registered dependency"), "%s", err);
    cr_assert_null(a);
    cr_assert_eq(ls_build_info_create_deps(bad2, 2, &a, err, sizeof err), LS_ERR_ARG);
    cr_assert(strstr(err, "twice"), "%s", err);
    cr_assert_eq(ls_build_info_create_deps(bad3, 1, &a, err, sizeof err), LS_ERR_ARG);
    cr_assert(strstr(err, "receipts library itself"), "%s", err);
    /* a caller's name left out is recorded "unknown" */
    cr_assert_eq(ls_build_info_create_deps(NULL, 0, &a, err, sizeof err), LS_OK);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "dependencies"), "mpi")->valuestring, "unknown");
    cJSON_Delete(a);
}

/* ---- group kinds --------------------------------------------------------------------------------------- */

Test(comm_registry, group_kinds) {
    for (int k = 0; k < LS_TRACE_GROUP_KIND_COUNT; k++)
        cr_assert_eq(ls_trace_enum_from_name("group_kind", ls_trace_group_kind_name((ls_trace_group_kind)k)), k);
    cr_assert_eq(ls_trace_enum_from_name("group_kind", "xp"), -1);
    cr_assert_str_eq(ls_trace_group_kind_name(LS_TRACE_GROUP_KIND_COUNT), "unknown");
    ls_comm *c = open_named("single");
    cr_assert_geq(ls_trace_enum_from_name("group_kind", ls_group_kind(ls_comm_cp(c))), 0);
    cr_assert_str_eq(ls_group_kind(ls_comm_cp(c)), ls_trace_group_kind_name(LS_TRACE_GROUP_CP));
    ls_comm_close(c);
    /* the trace writer refuses a kind that is not registered (the fault), accepts a registered one */
    char dir[] = "/tmp/ls_kinds_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    int32_t members[1] = {0};
    for (int bad = 0; bad < 2; bad++) {
        snprintf(path, sizeof path, "%s/t%d.jsonl", dir, bad);
        ls_trace_group grp = {.name = "g", .kind = bad ? "xp" : "dp", .members = members, .n_members = 1};
        ls_trace_header h = {.run_id = "r", .rank = 0, .world = 1, .host = "h", .pid = 1, .groups = &grp,
                             .n_groups = 1};
        ls_trace_writer *w = NULL;
        ls_status st = ls_trace_writer_open(&w, path, &h); /* the refusal names the kind on stderr */
        if (bad) {
            cr_assert_eq(st, LS_ERR_ARG);
            cr_assert_null(w);
        } else {
            cr_assert_eq(st, LS_OK);
            cr_assert_eq(ls_trace_writer_close(w), LS_OK);
        }
        unlink(path);
    }
    rmdir(dir);
}

/* ---- collectives on device buffers ------------------------------------------------------------------ */

Test(comm_registry, fixed_order_sum_on_device_buffers, .init = setup_guarded) {
    cr_assert_eq(ls_comm_backend_register(&loop3, NULL), LS_OK);
    ls_comm *c = open_named("loop3");
    ls_comm_group *g = ls_comm_cp(c);
    size_t n = LS_COMM_SUM_CHUNK * 2 + 17; /* three pieces */
    double *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    cr_assert(x && want && got);
    for (size_t i = 0; i < n; i++) x[i] = i % 3 == 0 ? 1e16 : (double)i * 0.125 - 3;
    /* rank order: (x + 1) + (-x); the reverse order (-x + 1) + x and the pair (x + -x) + 1 differ at 1e16 */
    for (size_t i = 0; i < n; i++) {
        volatile double s = x[i];
        s += 1.0;
        s += -x[i];
        want[i] = s;
    }
    cr_assert_eq(want[0], 0.0);
    cr_assert_neq((x[0] + -x[0]) + 1.0, want[0], "the inputs tell the orders apart");
    double *d = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, n * sizeof *d);
    cr_assert_not_null(d);
    cr_assert_eq(ls_mem_copy(d, LS_MEM_SPACE_DEVICE, x, LS_MEM_SPACE_HOST, n * sizeof *x), LS_OK);
    /* any host dereference of d by the front end would fault and end this test */
    cr_assert_eq(ls_group_allreduce_sum(g, d, n, LS_TRACE_DTYPE_F64, "dq_sum", 3), LS_OK, "%s",
                 ls_comm_last_error(c));
    cr_assert_eq(ls_mem_copy(got, LS_MEM_SPACE_HOST, d, LS_MEM_SPACE_DEVICE, n * sizeof *got), LS_OK);
    cr_assert_eq(memcmp(got, want, n * sizeof *got), 0, "device sum equals the rank-order sum bitwise");
    /* the same call on host memory: the same bits */
    memcpy(got, x, n * sizeof *x);
    cr_assert_eq(ls_group_allreduce_sum(g, got, n, LS_TRACE_DTYPE_F64, "dq_sum", 3), LS_OK);
    cr_assert_eq(memcmp(got, want, n * sizeof *got), 0);
    /* allgather, large (through the device scratch) and small, on device buffers */
    double *dr = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 3 * n * sizeof *dr);
    cr_assert_eq(ls_mem_copy(d, LS_MEM_SPACE_DEVICE, x, LS_MEM_SPACE_HOST, n * sizeof *x), LS_OK);
    cr_assert_eq(ls_group_allgather(g, d, dr, n, LS_TRACE_DTYPE_F64, "kv_gather", -1), LS_OK, "%s",
                 ls_comm_last_error(c));
    double probe[3];
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(ls_mem_copy(probe + r, LS_MEM_SPACE_HOST, dr + (size_t)r * n, LS_MEM_SPACE_DEVICE, 8), LS_OK);
    }
    cr_assert_eq(probe[0], x[0]);
    cr_assert_eq(probe[1], 1.0);
    cr_assert_eq(probe[2], -x[0]);
    cr_assert_eq(ls_group_broadcast(g, d, n, LS_TRACE_DTYPE_F64, 0, "state_bcast", -1), LS_OK);
    cr_assert_eq(ls_group_allreduce_max(g, d, n, LS_TRACE_DTYPE_F64, "lse_max", 0), LS_OK);
    cr_assert_eq(ls_group_sendrecv(g, d, 1, dr, 2, n, LS_TRACE_DTYPE_F64, "kv_ring", 0), LS_OK);
    /* one statistic per logical call */
    ls_comm_stat st[8];
    size_t ns = ls_comm_stats(c, st, 8);
    cr_assert_eq(ns, 5);
    cr_assert_eq(st[0].calls, 2, "%s", st[0].purpose);
    ls_mem_free(d), ls_mem_free(dr);
    free(x), free(want), free(got);
    ls_comm_close(c); /* frees the device scratch */
}

Test(comm_registry, single_backend_copies_device_buffers, .init = setup_guarded) {
    ls_comm *c = open_named("single");
    ls_comm_group *g = ls_comm_cp(c);
    enum { N = 64 };
    double x[N], back[N];
    for (int i = 0; i < N; i++) x[i] = i * 1.5;
    double *s = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, sizeof x);
    double *r = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, sizeof x);
    cr_assert_eq(ls_mem_copy(s, LS_MEM_SPACE_DEVICE, x, LS_MEM_SPACE_HOST, sizeof x), LS_OK);
    cr_assert_eq(ls_group_allreduce_sum(g, s, N, LS_TRACE_DTYPE_F64, "grad_sum", -1), LS_OK);
    cr_assert_eq(ls_group_allgather(g, s, r, N, LS_TRACE_DTYPE_F64, "gather", -1), LS_OK);
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, r, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    cr_assert_eq(memcmp(back, x, sizeof x), 0);
    cr_assert_eq(ls_mem_zero(r, LS_MEM_SPACE_DEVICE, sizeof x), LS_OK);
    cr_assert_eq(ls_group_sendrecv(g, s, 0, r, 0, N, LS_TRACE_DTYPE_F64, "self", -1), LS_OK);
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, r, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    cr_assert_eq(memcmp(back, x, sizeof x), 0);
    size_t sc[1] = {10}, sd[1] = {5}, rc[1] = {10}, rd[1] = {20};
    cr_assert_eq(ls_mem_zero(r, LS_MEM_SPACE_DEVICE, sizeof x), LS_OK);
    cr_assert_eq(ls_group_alltoallv(g, s, sc, sd, r, rc, rd, LS_TRACE_DTYPE_F64, "moe_combine", 1), LS_OK, "%s",
                 ls_comm_last_error(c));
    cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, r, LS_MEM_SPACE_DEVICE, sizeof back), LS_OK);
    for (int i = 0; i < N; i++) cr_assert_eq(back[i], i >= 20 && i < 30 ? x[i - 15] : 0.0, "element %d", i);
    ls_mem_free(s), ls_mem_free(r);
    ls_comm_close(c);
}

Test(comm_registry, refusals_before_anything_is_recorded, .init = setup_guarded) {
    ls_comm_ops hostonly = loop3;
    hostonly.name = "hostonly";
    hostonly.spaces = LS_MEM_SPACES_HOST_READABLE;
    cr_assert_eq(ls_comm_backend_register(&hostonly, NULL), LS_OK);
    ls_comm *c = open_named("hostonly");
    ls_comm_group *g = ls_comm_cp(c);
    double *d = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 64 * sizeof *d);
    double h[64] = {0}, h3[192];
    cr_assert_eq(ls_group_allreduce_sum(g, d, 64, LS_TRACE_DTYPE_F64, "dq_sum", -1), LS_ERR_ARG);
    const char *e = ls_comm_last_error(c);
    cr_assert(strstr(e, "device memory") && strstr(e, "hostonly backend does not move") && strstr(e, "buf"), "%s", e);
    cr_assert_eq(ls_group_allgather(g, d, h3, 64, LS_TRACE_DTYPE_F64, "gather", -1), LS_ERR_ARG);
    e = ls_comm_last_error(c);
    cr_assert(strstr(e, "send is in device memory and recv in host memory"), "%s", e);
    cr_assert_eq(ls_group_broadcast(g, d, 64, LS_TRACE_DTYPE_F64, 0, "bcast", -1), LS_ERR_ARG);
    cr_assert_eq(ls_group_sendrecv(g, h, 1, d, 2, 64, LS_TRACE_DTYPE_F64, "ring", -1), LS_ERR_ARG);
    cr_assert_eq(ls_comm_stats(c, NULL, 0), 0, "nothing recorded");
    cr_assert_eq(ls_comm_bytes_sent(c), 0);
    /* host buffers still move */
    cr_assert_eq(ls_group_allreduce_sum(g, h, 64, LS_TRACE_DTYPE_F64, "dq_sum", -1), LS_OK);
    cr_assert_eq(ls_comm_stats(c, NULL, 0), 1);
    ls_comm_close(c);
    /* the replay's memo digests host bytes: a device buffer is refused while one is current */
    c = open_named("single");
    ls_arena ar;
    ls_arena_init(&ar, LS_MEM_BRANCH, 0);
    ls_coll_memo m;
    ls_coll_memo_init(&m, &ar);
    ls_coll_memo *prev = ls_coll_memo_use(&m, LS_COLL_MEMO_RECORD);
    cr_assert_eq(ls_group_allreduce_sum(ls_comm_cp(c), d, 64, LS_TRACE_DTYPE_F64, "dq_sum", -1), LS_ERR_ARG);
    e = ls_comm_last_error(c);
    cr_assert(strstr(e, "collective memo"), "%s", e);
    cr_assert_eq(ls_group_allreduce_sum(ls_comm_cp(c), h, 64, LS_TRACE_DTYPE_F64, "dq_sum", -1), LS_OK);
    ls_coll_memo_restore(prev);
    ls_arena_free(&ar);
    ls_mem_free(d);
    ls_comm_close(c);
}

/* The injected fault: a backend that says it moves device memory but dereferences it on the host. */
Test(comm_registry, host_dereference_in_a_comm_path_faults, .init = setup_guarded) {
    static ls_comm_ops bad;
    bad = loop3;
    bad.name = "badcopy";
    bad.allgather = bad_allgather;
    cr_assert_eq(ls_comm_backend_register(&bad, NULL), LS_OK);
    static ls_comm *c;
    static double *d;
    c = open_named("badcopy");
    d = ls_mem_alloc_in(LS_MEM_COMM, LS_MEM_SPACE_DEVICE, 64 * sizeof *d);
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_segv;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old);
    volatile int caught = 0;
    if (sigsetjmp(jb, 1) == 0) (void)ls_group_allreduce_sum(ls_comm_cp(c), d, 64, LS_TRACE_DTYPE_F64, "dq_sum", -1);
    else caught = 1;
    sigaction(SIGSEGV, &old, NULL);
    cr_assert(caught, "the backend's host memcpy of a device buffer is caught");
    /* the control: the correct loopback backend on the same buffer passes */
    cr_assert_eq(ls_comm_backend_register(&loop3, NULL), LS_OK);
    ls_comm *ok = open_named("loop3");
    cr_assert_eq(ls_group_allreduce_sum(ls_comm_cp(ok), d, 64, LS_TRACE_DTYPE_F64, "dq_sum", -1), LS_OK);
    ls_comm_close(ok);
}
