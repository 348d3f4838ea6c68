/* test_comm.c - the communicator (trainer/dist/comm.h) on every rank of a run:
 * started by mpirun (MPI backend, N ranks) or alone (single backend).
 *
 *   test_comm BACKEND WORLD      (BACKEND "single" or "mpi")
 *   test_comm abort N            (under mpirun: the last rank aborts while the
 *                                 others wait in a barrier; the job must end)
 *   test_comm refused 1          (a build without MPI under OMPI_COMM_WORLD_SIZE:
 *                                 ls_comm_open must refuse with LS_ERR_ARG)
 *
 * A plain main (Criterion forks, which does not mix with MPI).  Every rank
 * makes the same calls; each check compares with a value the test computes
 * itself from the known per-rank inputs (the inputs are functions of rank
 * and index, so every rank can compute every other rank's contribution):
 *  - allreduce_sum f64 over values whose sum depends on the association
 *    (1e16, 1, -1e16, ...) equals the left-to-right rank-order sum bitwise,
 *    on every rank (the results' bytes are allgathered and compared), over a
 *    length that spans several LS_COMM_SUM_CHUNK pieces; with N >= 3 the
 *    reverse-order and pairwise sums of the same inputs are shown to differ
 *    (the inputs can tell the orders apart); f32 and i64 too;
 *  - allreduce_max, broadcast from the last rank, allgather, a ring and a
 *    chain of sendrecv with -1 ends;
 *  - refused arguments (bad purposes, u8 sums, overflowing counts, peers and
 *    roots out of range, a half self-send) give LS_ERR_ARG and no event;
 *  - the trace has one collective event per call, gseq 0, 1, 2, ... with the
 *    expected fields, read back with the trace reader; a writer whose header
 *    lacks the group makes ls_comm_trace_status fail;
 *  - alltoallv with blocks of every size (its own block too) delivers every
 *    value, and a receive count that disagrees with its sender's is refused
 *    on every rank;
 *  - `test_comm gridEP W`: the CP x EP grid's groups, members and sums, and
 *    the refusal of an ep that does not divide the world;
 *  - the per-purpose statistics equal the test's own tally.
 * Exits 1 when any check failed on this rank (mpirun then fails). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/reading/trace_reader.h"
#include "receipts/writing/trace_writer.h"
#include "trainer/dist/comm.h"

static int g_rank;
static int g_fails;

static void fail(int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_comm rank %d line %d: ", g_rank, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_fails++;
}
#define CHECK(cond, ...)                                                                                      \
    do {                                                                                                      \
        if (!(cond)) fail(__LINE__, __VA_ARGS__);                                                             \
    } while (0)

/* ---- the expected events ----------------------------------------------------- */

typedef struct {
    ls_trace_op op;
    ls_trace_red red;
    int64_t count;
    ls_trace_dtype dtype;
    int64_t bytes;
    char purpose[32];
    int layer;
} want_ev;

#define MAX_WANT 256
static want_ev g_want[MAX_WANT];
static size_t g_n_want;
static int g_world;

/* An operation the test made: what its event must say.  bytes: the payload
 * the rank hands to others (0 in a world of one). */
static void want(ls_trace_op op, ls_trace_red red, int64_t count, ls_trace_dtype dt, int64_t bytes,
                 const char *purpose, int layer) {
    if (g_n_want == MAX_WANT) {
        fail(__LINE__, "too many expected events");
        return;
    }
    want_ev *e = &g_want[g_n_want++];
    *e = (want_ev){op, red, count, dt, g_world == 1 ? 0 : bytes, "", layer};
    snprintf(e->purpose, sizeof e->purpose, "%s", purpose);
}

/* A failed collective leaves the ranks out of step: end the job (as the
 * trainer does) rather than hang in the next one. */
static void check_status(int line, ls_comm *c, ls_status st, const char *what) {
    if (st == LS_OK) return;
    fail(line, "%s: %s (%s)", what, ls_status_str(st), ls_comm_last_error(c));
    if (st == LS_ERR_IO) ls_comm_abort(c, 1);
}
#define OK(c, call) check_status(__LINE__, c, (call), #call)

/* ---- per-rank inputs --------------------------------------------------------- */

/* f64 contribution of rank r at index i: the large terms cancel only in
 * some orders; the small ones vary with i so that a misplaced piece shows. */
static double in_f64(int r, size_t i) {
    switch ((r + i) % 4) {
    case 0: return 1e16;
    case 1: return 1.0 + (double)(i % 1024);
    case 2: return -1e16;
    default: return 0.5 * (double)(i % 7 + 1);
    }
}
static float in_f32(int r, size_t i) {
    switch ((r * 3 + i) % 3) {
    case 0: return 1e8f;
    case 1: return 1.0f + (float)(i % 13);
    default: return -1e8f;
    }
}
static int64_t in_i64(int r, size_t i) { return ((int64_t)(r + 1) << 40) + (int64_t)i * 7 - (int64_t)r * 1000003; }

static double sum_order(size_t i, int n, int reverse) {
    double acc = in_f64(reverse ? n - 1 : 0, i);
    for (int k = 1; k < n; k++) acc += in_f64(reverse ? n - 1 - k : k, i);
    return acc;
}
/* Pairwise (tree) sum over ranks lo..hi-1. */
static double sum_tree(size_t i, int lo, int hi) {
    if (hi - lo == 1) return in_f64(lo, i);
    int mid = lo + (hi - lo) / 2;
    return sum_tree(i, lo, mid) + sum_tree(i, mid, hi);
}

/* ---- the checks -------------------------------------------------------------- */

static void test_sum(ls_comm *c, ls_comm_group *g) {
    int r = ls_group_rank(g), n = ls_group_size(g);
    size_t len = 2 * LS_COMM_SUM_CHUNK + 1001; /* three pieces */
    double *x = malloc(len * sizeof *x);
    unsigned char *all = malloc(len * sizeof *x * (size_t)n);
    if (!x || !all) {
        fail(__LINE__, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < len; i++) x[i] = in_f64(r, i);
    OK(c, ls_group_allreduce_sum(g, x, len, LS_TRACE_DTYPE_F64, "out_sum", 3));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_SUM, (int64_t)len, LS_TRACE_DTYPE_F64, (int64_t)(len * 8), "out_sum", 3);
    size_t bad = 0, first_bad = 0, differs_rev = 0, differs_tree = 0;
    double worst = 0;
    for (size_t i = 0; i < len; i++) {
        double e = sum_order(i, n, 0);
        if (memcmp(&e, &x[i], sizeof e) != 0) {
            if (!bad++) first_bad = i;
            if (fabs(e - x[i]) > worst) worst = fabs(e - x[i]);
        }
        double rv = sum_order(i, n, 1), tr = sum_tree(i, 0, n);
        differs_rev += memcmp(&rv, &e, sizeof e) != 0;
        differs_tree += memcmp(&tr, &e, sizeof e) != 0;
    }
    CHECK(bad == 0, "allreduce_sum f64: %zu of %zu elements differ from the rank-order sum (first %zu: %.17g, want "
                    "%.17g; largest error %g)", bad, len, first_bad, x[first_bad], sum_order(first_bad, n, 0), worst);
    if (n >= 3) {
        /* the inputs must be able to tell the orders apart, or the check above proves nothing */
        CHECK(differs_rev > len / 4, "reverse-order sum differs at only %zu of %zu elements", differs_rev, len);
        CHECK(differs_tree > len / 4, "pairwise sum differs at only %zu of %zu elements", differs_tree, len);
    }
    if (r == 0)
        printf("allreduce_sum f64 (N=%d, %zu elements): rank-order exact; reverse order differs at %zu, pairwise at %zu\n",
               n, len, differs_rev, differs_tree);
    /* the same bytes on every rank */
    OK(c, ls_group_allgather(g, x, all, len * sizeof *x, LS_TRACE_DTYPE_U8, "digest_check", -1));
    want(LS_TRACE_OP_ALLGATHER, LS_TRACE_RED_NONE, (int64_t)(len * 8), LS_TRACE_DTYPE_U8, (int64_t)(len * 8),
         "digest_check", -1);
    for (int k = 0; k < n; k++)
        CHECK(memcmp(all + (size_t)k * len * sizeof *x, x, len * sizeof *x) == 0,
              "rank %d's sum differs from this rank's", k);

    /* f32 and i64 */
    float f[5];
    int64_t q[5];
    for (size_t i = 0; i < 5; i++) {
        f[i] = in_f32(r, i);
        q[i] = in_i64(r, i);
    }
    OK(c, ls_group_allreduce_sum(g, f, 5, LS_TRACE_DTYPE_F32, "lse_sum", 0));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_SUM, 5, LS_TRACE_DTYPE_F32, 20, "lse_sum", 0);
    OK(c, ls_group_allreduce_sum(g, q, 5, LS_TRACE_DTYPE_I64, "grad_finalize", -1));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_SUM, 5, LS_TRACE_DTYPE_I64, 40, "grad_finalize", -1);
    for (size_t i = 0; i < 5; i++) {
        float ef = in_f32(0, i);
        int64_t eq = in_i64(0, i);
        for (int k = 1; k < n; k++) {
            ef += in_f32(k, i);
            eq += in_i64(k, i);
        }
        CHECK(memcmp(&ef, &f[i], sizeof ef) == 0, "allreduce_sum f32 [%zu] = %.9g, want %.9g", i, f[i], ef);
        CHECK(q[i] == eq, "allreduce_sum i64 [%zu] = %lld, want %lld", i, (long long)q[i], (long long)eq);
    }
cleanup:
    free(x);
    free(all);
}

static void test_max_bcast_gather(ls_comm *c, ls_comm_group *g) {
    int r = ls_group_rank(g), n = ls_group_size(g);
    double d[7];
    int64_t q[7];
    float f[7];
    for (size_t i = 0; i < 7; i++) {
        d[i] = (double)((r * 7 + (int)i * 3) % 11) - 5.25;
        q[i] = -(int64_t)((r * 5 + (int)i) % 9) * 1000000007LL;
        f[i] = (float)((r + (int)i) % 3) * -0.5f;
    }
    OK(c, ls_group_allreduce_max(g, d, 7, LS_TRACE_DTYPE_F64, "lse_max", 1));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_MAX, 7, LS_TRACE_DTYPE_F64, 56, "lse_max", 1);
    OK(c, ls_group_allreduce_max(g, q, 7, LS_TRACE_DTYPE_I64, "lse_max", 1));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_MAX, 7, LS_TRACE_DTYPE_I64, 56, "lse_max", 1);
    OK(c, ls_group_allreduce_max(g, f, 7, LS_TRACE_DTYPE_F32, "lse_max", 2));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_MAX, 7, LS_TRACE_DTYPE_F32, 28, "lse_max", 2);
    for (size_t i = 0; i < 7; i++) {
        double ed = -1e300;
        int64_t eq = INT64_MIN;
        float ef = -1e30f;
        for (int k = 0; k < n; k++) {
            double v = (double)((k * 7 + (int)i * 3) % 11) - 5.25;
            int64_t w = -(int64_t)((k * 5 + (int)i) % 9) * 1000000007LL;
            float u = (float)((k + (int)i) % 3) * -0.5f;
            if (v > ed) ed = v;
            if (w > eq) eq = w;
            if (u > ef) ef = u;
        }
        CHECK(d[i] == ed, "allreduce_max f64 [%zu] = %g, want %g", i, d[i], ed);
        CHECK(q[i] == eq, "allreduce_max i64 [%zu] = %lld, want %lld", i, (long long)q[i], (long long)eq);
        CHECK(f[i] == ef, "allreduce_max f32 [%zu] = %g, want %g", i, (double)f[i], (double)ef);
    }

    /* broadcast from the last rank (non-zero when n > 1) */
    int root = n - 1;
    int64_t b[9];
    for (size_t i = 0; i < 9; i++) b[i] = r == root ? 1000 + (int64_t)i * 3 : -1;
    OK(c, ls_group_broadcast(g, b, 9, LS_TRACE_DTYPE_I64, root, "state_final", 4));
    want(LS_TRACE_OP_BROADCAST, LS_TRACE_RED_NONE, 9, LS_TRACE_DTYPE_I64, r == root ? 72 : 0, "state_final", 4);
    for (size_t i = 0; i < 9; i++)
        CHECK(b[i] == 1000 + (int64_t)i * 3, "broadcast from %d [%zu] = %lld", root, i, (long long)b[i]);

    /* allgather: rank k's block at k*5 */
    double s[5], *all = malloc(sizeof s * (size_t)n);
    if (!all) {
        fail(__LINE__, "out of memory");
        return;
    }
    for (size_t i = 0; i < 5; i++) s[i] = r * 100.0 + (double)i + 0.25;
    OK(c, ls_group_allgather(g, s, all, 5, LS_TRACE_DTYPE_F64, "kv_gather", 0));
    want(LS_TRACE_OP_ALLGATHER, LS_TRACE_RED_NONE, 5, LS_TRACE_DTYPE_F64, 40, "kv_gather", 0);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < 5; i++)
            CHECK(all[(size_t)k * 5 + i] == k * 100.0 + (double)i + 0.25, "allgather [%d][%zu] = %g", k, i,
                  all[(size_t)k * 5 + i]);
    free(all);
}

static void test_p2p(ls_comm *c, ls_comm_group *g) {
    int r = ls_group_rank(g), n = ls_group_size(g);
    /* ring: my rank id to r+1, from r-1 */
    int64_t mine[3] = {r, r * 10, r * 100}, got[3] = {-7, -7, -7};
    int dst = (r + 1) % n, src = (r - 1 + n) % n;
    OK(c, ls_group_sendrecv(g, mine, dst, got, src, 3, LS_TRACE_DTYPE_I64, "kv_ring", 2));
    want(LS_TRACE_OP_SENDRECV, LS_TRACE_RED_NONE, 3, LS_TRACE_DTYPE_I64, dst == r ? 0 : 24, "kv_ring", 2);
    CHECK(got[0] == src && got[1] == src * 10 && got[2] == src * 100, "ring: got %lld %lld %lld from %d",
          (long long)got[0], (long long)got[1], (long long)got[2], src);

    /* chain 0 -> 1 -> ... -> n-1 with -1 at both ends */
    double st[4] = {r + 0.5, -r - 0.5, 1e-300 * r, 7}, in[4] = {-9, -9, -9, -9};
    dst = r + 1 < n ? r + 1 : -1;
    src = r > 0 ? r - 1 : -1;
    OK(c, ls_group_sendrecv(g, st, dst, in, src, 4, LS_TRACE_DTYPE_F64, "state_handoff", 5));
    want(LS_TRACE_OP_SENDRECV, LS_TRACE_RED_NONE, 4, LS_TRACE_DTYPE_F64, dst >= 0 ? 32 : 0, "state_handoff", 5);
    if (src < 0)
        CHECK(in[0] == -9 && in[3] == -9, "chain: rank 0 received something (%g)", in[0]);
    else
        CHECK(in[0] == src + 0.5 && in[1] == -src - 0.5 && in[2] == 1e-300 * src && in[3] == 7,
              "chain: got %g %g %g %g from %d", in[0], in[1], in[2], in[3], src);
    /* reverse chain, NULL buffers where there is no peer */
    double back = r * 2.0, from = -1;
    dst = r > 0 ? r - 1 : -1;
    src = r + 1 < n ? r + 1 : -1;
    OK(c, ls_group_sendrecv(g, dst >= 0 ? &back : NULL, dst, src >= 0 ? &from : NULL, src, 1, LS_TRACE_DTYPE_F64,
                            "state_grad_handoff", 5));
    want(LS_TRACE_OP_SENDRECV, LS_TRACE_RED_NONE, 1, LS_TRACE_DTYPE_F64, dst >= 0 ? 8 : 0, "state_grad_handoff", 5);
    CHECK(src < 0 ? from == -1 : from == src * 2.0, "reverse chain: got %g from %d", from, src);

    OK(c, ls_group_barrier(g, "step_end"));
    want(LS_TRACE_OP_BARRIER, LS_TRACE_RED_NONE, 0, LS_TRACE_DTYPE_U8, 0, "step_end", -1);
}

/* Refusals: LS_ERR_ARG, an error naming the problem, no event. */
static void test_refusals(ls_comm *c, ls_comm_group *g) {
    int n = ls_group_size(g);
    double x[2] = {1, 2}, y[2];
    uint8_t u[2] = {1, 2};
    char long_name[40];
    memset(long_name, 'a', 32);
    long_name[32] = '\0';
    const char *bad[] = {"Bad", "", "1abc", "a-b", "a b", long_name};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ls_status st = ls_group_allreduce_sum(g, x, 2, LS_TRACE_DTYPE_F64, bad[i], -1);
        CHECK(st == LS_ERR_ARG, "purpose \"%s\": %s, want LS_ERR_ARG", bad[i], ls_status_str(st));
        CHECK(strstr(ls_comm_last_error(c), "purpose") != NULL, "purpose \"%s\": error \"%s\" does not say purpose",
              bad[i], ls_comm_last_error(c));
    }
    CHECK(ls_group_barrier(g, NULL) == LS_ERR_ARG, "NULL purpose accepted");
    CHECK(ls_group_allreduce_sum(g, u, 2, LS_TRACE_DTYPE_U8, "u_sum", -1) == LS_ERR_ARG, "u8 sum accepted");
    CHECK(ls_group_allreduce_max(g, u, 2, LS_TRACE_DTYPE_U8, "u_max", -1) == LS_ERR_ARG, "u8 max accepted");
    CHECK(ls_group_allreduce_sum(g, x, 2, (ls_trace_dtype)99, "d_sum", -1) == LS_ERR_ARG, "dtype 99 accepted");
    CHECK(ls_group_allreduce_sum(g, x, SIZE_MAX / 4, LS_TRACE_DTYPE_F64, "big_sum", -1) == LS_ERR_ARG,
          "overflowing count accepted");
    CHECK(strstr(ls_comm_last_error(c), "overflow") != NULL, "overflow error: \"%s\"", ls_comm_last_error(c));
    CHECK(ls_group_allreduce_sum(g, NULL, 2, LS_TRACE_DTYPE_F64, "null_sum", -1) == LS_ERR_ARG, "NULL buf accepted");
    CHECK(ls_group_allreduce_sum(g, x, 2, LS_TRACE_DTYPE_F64, "layer_sum", -2) == LS_ERR_ARG, "layer -2 accepted");
    CHECK(ls_group_broadcast(g, x, 2, LS_TRACE_DTYPE_F64, n, "b", -1) == LS_ERR_ARG, "root %d accepted", n);
    CHECK(ls_group_broadcast(g, x, 2, LS_TRACE_DTYPE_F64, -1, "b", -1) == LS_ERR_ARG, "root -1 accepted");
    CHECK(ls_group_sendrecv(g, x, n, y, -1, 2, LS_TRACE_DTYPE_F64, "p", -1) == LS_ERR_ARG, "dst %d accepted", n);
    CHECK(ls_group_sendrecv(g, x, -1, y, -2, 2, LS_TRACE_DTYPE_F64, "p", -1) == LS_ERR_ARG, "src -2 accepted");
    int me = ls_group_rank(g);
    CHECK(ls_group_sendrecv(g, x, me, y, -1, 2, LS_TRACE_DTYPE_F64, "p", -1) == LS_ERR_ARG,
          "a send to self without a receive from self accepted");
    CHECK(ls_group_sendrecv(g, x, -1, y, me, 2, LS_TRACE_DTYPE_F64, "p", -1) == LS_ERR_ARG,
          "a receive from self without a send to self accepted");
    CHECK(ls_group_allgather(g, x, x, 1, LS_TRACE_DTYPE_F64, "g", -1) == LS_ERR_ARG, "overlapping allgather accepted");
}

/* ---- the trace read back ----------------------------------------------------- */

typedef struct {
    size_t n, n_other;
    int bad;
} read_state;

static int on_event(const ls_trace_event *ev, void *user) {
    read_state *s = user;
    if (ev->kind != LS_TRACE_COLLECTIVE) {
        s->n_other++;
        return 0;
    }
    ls_trace_collective col;
    if (ls_trace_decode_collective(ev->json, &col) != LS_OK) {
        fail(__LINE__, "event seq %lld: not a valid collective", (long long)ev->seq);
        return 0;
    }
    size_t i = s->n++;
    if (i >= g_n_want) {
        fail(__LINE__, "trace: collective %zu (%s) beyond the %zu calls made", i, col.purpose, g_n_want);
        return 0;
    }
    const want_ev *e = &g_want[i];
    int ok = strcmp(col.group, "cp") == 0 && col.gseq == (int64_t)i && col.op == e->op && col.red == e->red &&
             col.count == e->count && col.dtype == e->dtype && col.bytes == e->bytes &&
             strcmp(col.purpose, e->purpose) == 0 && col.has_layer == (e->layer >= 0) &&
             (!col.has_layer || col.layer == e->layer);
    if (!ok)
        fail(__LINE__,
             "trace event %zu: group %s gseq %lld op %s red %s count %lld dtype %s bytes %lld purpose %s layer %lld; "
             "want gseq %zu op %s red %s count %lld dtype %s bytes %lld purpose %s layer %d",
             i, col.group, (long long)col.gseq, ls_trace_op_name(col.op), ls_trace_red_name(col.red),
             (long long)col.count, ls_trace_dtype_name(col.dtype), (long long)col.bytes, col.purpose,
             col.has_layer ? (long long)col.layer : -1LL, i, ls_trace_op_name(e->op), ls_trace_red_name(e->red),
             (long long)e->count, ls_trace_dtype_name(e->dtype), (long long)e->bytes, e->purpose, e->layer);
    return 0;
}

static void check_stats(ls_comm *c) {
    ls_comm_stat got[64], exp[64];
    size_t n_exp = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < g_n_want; i++) {
        size_t k = 0;
        while (k < n_exp && strcmp(exp[k].purpose, g_want[i].purpose) != 0) k++;
        if (k == n_exp) {
            memset(&exp[k], 0, sizeof exp[k]);
            snprintf(exp[k].purpose, sizeof exp[k].purpose, "%s", g_want[i].purpose);
            n_exp++;
        }
        exp[k].calls++;
        exp[k].bytes += (uint64_t)g_want[i].bytes;
        total += (uint64_t)g_want[i].bytes;
    }
    size_t n = ls_comm_stats(c, got, 64);
    CHECK(n == n_exp, "stats: %zu purposes, want %zu", n, n_exp);
    for (size_t k = 0; k < n && k < n_exp; k++)
        CHECK(strcmp(got[k].purpose, exp[k].purpose) == 0 && got[k].calls == exp[k].calls &&
                  got[k].bytes == exp[k].bytes,
              "stats[%zu]: %s %llu calls %llu bytes, want %s %llu %llu", k, got[k].purpose,
              (unsigned long long)got[k].calls, (unsigned long long)got[k].bytes, exp[k].purpose,
              (unsigned long long)exp[k].calls, (unsigned long long)exp[k].bytes);
    CHECK(ls_comm_stats(c, NULL, 0) == n_exp, "stats count without a buffer");
    CHECK(ls_comm_bytes_sent(c) == total, "bytes sent %llu, want %llu", (unsigned long long)ls_comm_bytes_sent(c),
          (unsigned long long)total);
}


/* alltoallv: rank r sends r + q + 1 values to rank q (its block to itself
 * too), value 1000 r + 100 q + i, placed in reverse rank order in recv; every
 * received value is checked.  Then a receive count that disagrees with its
 * sender's is refused on every rank with no event. */
static void test_alltoallv(ls_comm *c, ls_comm_group *g, int record) {
    int n = ls_group_size(g), me = ls_group_rank(g);
    size_t sc[64], sd[64], rc[64], rd[64], stot = 0, rtot = 0;
    for (int q = 0; q < n; q++) sc[q] = (size_t)(me + q + 1), sd[q] = stot, stot += sc[q];
    for (int q = n - 1; q >= 0; q--) rc[q] = (size_t)(q + me + 1), rd[q] = rtot, rtot += rc[q];
    double *sb = malloc(stot * sizeof *sb), *rb = malloc(rtot * sizeof *rb);
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < sc[q]; i++) sb[sd[q] + i] = 1000.0 * me + 100.0 * q + (double)i;
    OK(c, ls_group_alltoallv(g, sb, sc, sd, rb, rc, rd, LS_TRACE_DTYPE_F64, "a2a_test", 2));
    int64_t total = 0, out = 0;
    for (int r = 0; r < n; r++)
        for (int q = 0; q < n; q++) total += r + q + 1;
    for (int q = 0; q < n; q++) out += q == me ? 0 : (int64_t)sc[q];
    if (record) want(LS_TRACE_OP_ALL_TO_ALL, LS_TRACE_RED_NONE, total, LS_TRACE_DTYPE_F64, out * 8, "a2a_test", 2);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < rc[r]; i++)
            CHECK(rb[rd[r] + i] == 1000.0 * r + 100.0 * me + (double)i, "alltoallv: from rank %d value %zu is %g", r,
                  i, rb[rd[r] + i]);
    /* the last rank expects one value more from rank 0 than rank 0 sends: every rank refuses */
    if (me == n - 1) rc[0]++;
    ls_status st = ls_group_alltoallv(g, sb, sc, sd, rb, rc, rd, LS_TRACE_DTYPE_F64, "a2a_bad", -1);
    CHECK(st == LS_ERR_ARG, "alltoallv with a disagreeing count: %s, want LS_ERR_ARG", ls_status_str(st));
    CHECK(st != LS_ERR_ARG || strstr(ls_comm_last_error(c), "expects") != NULL, "alltoallv refusal: '%s'",
          ls_comm_last_error(c));
    free(sb), free(rb);
}

/* The CP x EP grid (test_comm grid W EP): groups, members, sums over each. */
static int run_grid(ls_comm *c, int ep) {
    char err[256];
    int W = ls_comm_world(c), r = ls_comm_rank(c);
    g_rank = r, g_world = W;
    ls_status st = ls_comm_grid(c, ep, err, sizeof err);
    if (W % ep != 0) {
        CHECK(st == LS_ERR_ARG && strstr(err, "--ep") != NULL, "grid %d of %d: %s '%s', want a refusal naming --ep",
              W, ep, ls_status_str(st), err);
        return g_fails ? 1 : 0;
    }
    CHECK(st == LS_OK, "grid: %s", err);
    ls_comm_group *cp = ls_comm_cp(c), *epg = ls_comm_ep(c), *all = ls_comm_all(c);
    CHECK(ls_comm_ep_size(c) == ep, "ep size %d", ls_comm_ep_size(c));
    CHECK(ls_group_size(all) == W && ls_group_rank(all) == r, "the all group is not the world");
    CHECK(ls_group_size(cp) == W / ep && ls_group_rank(cp) == r / ep, "cp group: rank %d of %d", ls_group_rank(cp),
          ls_group_size(cp));
    CHECK(ep == 1 ? epg == NULL : (ls_group_size(epg) == ep && ls_group_rank(epg) == r % ep), "ep group");
    int32_t m[64];
    size_t nm = ls_group_members(cp, m, 64);
    for (size_t i = 0; i < nm; i++) CHECK(m[i] == (int32_t)i * ep + r % ep, "cp member %zu is %d", i, m[i]);
    if (epg) {
        nm = ls_group_members(epg, m, 64);
        for (size_t i = 0; i < nm; i++) CHECK(m[i] == (r / ep) * ep + (int32_t)i, "ep member %zu is %d", i, m[i]);
        CHECK(strcmp(ls_group_kind(epg), "ep") == 0 && strcmp(ls_group_kind(cp), "cp") == 0 &&
                  strcmp(ls_group_name(all), "world") == 0, "group kinds/names");
    }
    /* a sum over each group is the sum of its members' world ranks */
    double v = r, want_cp = 0, want_ep = 0;
    OK(c, ls_group_allreduce_sum(cp, &v, 1, LS_TRACE_DTYPE_F64, "grid_cp", -1));
    for (int i = 0; i < W / ep; i++) want_cp += i * ep + r % ep;
    CHECK(v == want_cp, "cp sum %g, want %g", v, want_cp);
    if (epg) {
        v = r;
        OK(c, ls_group_allreduce_sum(epg, &v, 1, LS_TRACE_DTYPE_F64, "grid_ep", -1));
        for (int i = 0; i < ep; i++) want_ep += (r / ep) * ep + i;
        CHECK(v == want_ep, "ep sum %g, want %g", v, want_ep);
        test_alltoallv(c, epg, 0);
    }
    CHECK(ls_comm_grid(c, ep, err, sizeof err) == (ep > 1 ? LS_ERR_ARG : LS_OK), "a second grid");
    return g_fails ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_comm single|mpi|abort|refused WORLD\n");
        return 2;
    }
    const char *want_backend = argv[1];
    int want_world = atoi(argv[2]);
    ls_comm *c = NULL;
    char err[256];
    ls_status st = ls_comm_open(&c, &argc, &argv, err, sizeof err);
    if (strcmp(want_backend, "refused") == 0) {
        /* a build without MPI, started as if by mpirun: open must refuse */
        int ok = st == LS_ERR_ARG && c == NULL && strstr(err, "mpirun") != NULL;
        if (!ok) fprintf(stderr, "test_comm: open gave %s (\"%s\"), want LS_ERR_ARG naming mpirun\n",
                         ls_status_str(st), err);
        ls_comm_close(c);
        return ok ? 0 : 1;
    }
    if (st != LS_OK) {
        fprintf(stderr, "test_comm: ls_comm_open: %s: %s\n", ls_status_str(st), err);
        return 1;
    }
    ls_comm_group *g = ls_comm_cp(c);
    if (strncmp(want_backend, "grid", 4) == 0) { /* "grid<EP>" */
        int rc = run_grid(c, atoi(want_backend + 4));
        if (rc) fprintf(stderr, "test_comm: rank %d: grid FAILED\n", g_rank);
        ls_comm_close(c);
        return rc;
    }
    if (strcmp(want_backend, "abort") == 0) {
        /* the last rank aborts while the others wait in a barrier: every
         * rank must end (mpirun exits non-zero) rather than hang */
        if (ls_comm_rank(c) == ls_comm_world(c) - 1) ls_comm_abort(c, 3);
        ls_status bs = ls_group_barrier(g, "never_completes");
        fprintf(stderr, "test_comm: rank %d left the barrier (%s)\n", ls_comm_rank(c), ls_status_str(bs));
        ls_comm_close(c);
        return 0;
    }
    g_rank = ls_comm_rank(c);
    g_world = ls_comm_world(c);
    CHECK(strcmp(ls_comm_backend(c), want_backend) == 0, "backend %s, want %s", ls_comm_backend(c), want_backend);
    CHECK(g_world == want_world, "world %d, want %d", g_world, want_world);
    CHECK(ls_group_size(g) == g_world && ls_group_rank(g) == g_rank, "cp group is not the world");
    CHECK(strcmp(ls_group_name(g), "cp") == 0, "group name %s", ls_group_name(g));

    char dir[64], path[128], path2[128];
    snprintf(dir, sizeof dir, "/tmp/ls-comm-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "test_comm: cannot create a scratch directory\n");
        ls_comm_abort(c, 1);
    }
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    snprintf(path2, sizeof path2, "%s/nogroup.jsonl", dir);
    int32_t members[64];
    for (int k = 0; k < g_world && k < 64; k++) members[k] = k;
    ls_trace_group grp = {"cp", members, (size_t)(g_world < 64 ? g_world : 64), NULL};
    ls_trace_header hdr = {.run_id = "comm-test", .rank = g_rank, .world = g_world, .groups = &grp, .n_groups = 1};
    ls_trace_writer *w = NULL;
    st = ls_trace_writer_open(&w, path, &hdr);
    CHECK(st == LS_OK, "trace writer: %s", ls_status_str(st));
    ls_comm_set_trace(c, w);

    test_sum(c, g);
    test_max_bcast_gather(c, g);
    test_p2p(c, g);
    test_refusals(c, g);
    test_alltoallv(c, g, 1);
    OK(c, ls_group_allreduce_sum(g, NULL, 0, LS_TRACE_DTYPE_F64, "empty_sum", -1));
    want(LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_SUM, 0, LS_TRACE_DTYPE_F64, 0, "empty_sum", -1);
    CHECK(ls_comm_trace_status(c) == LS_OK, "trace status %s", ls_status_str(ls_comm_trace_status(c)));

    ls_comm_set_trace(c, NULL);
    CHECK(ls_trace_emit_rank_complete(w, 0) == LS_OK, "rank_complete");
    CHECK(ls_trace_writer_close(w) == LS_OK, "trace close");
    ls_trace_report rep;
    read_state rs = {0, 0, 0};
    st = ls_trace_read_file(path, on_event, &rs, &rep);
    CHECK(st == LS_OK, "trace read: %s (%zu diagnostics, first: %s)", ls_status_str(st), rep.n_diags,
          rep.n_diags ? rep.diags[0].message : "");
    CHECK(rs.n == g_n_want, "trace: %zu collective events, want %zu (one per call)", rs.n, g_n_want);
    CHECK(rs.n_other == 1, "trace: %zu other events, want 1 (rank_complete)", rs.n_other);
    ls_trace_report_free(&rep);
    check_stats(c);

    /* a writer whose header does not declare "cp": the emit fails, the
     * collective still runs, the failure is remembered */
    ls_trace_header hdr2 = {.run_id = "comm-test", .rank = g_rank, .world = g_world};
    ls_trace_writer *w2 = NULL;
    CHECK(ls_trace_writer_open(&w2, path2, &hdr2) == LS_OK, "second trace writer");
    ls_comm_set_trace(c, w2);
    double one = 1.0;
    OK(c, ls_group_allreduce_sum(g, &one, 1, LS_TRACE_DTYPE_F64, "after_fail", -1));
    CHECK(one == (double)g_world, "sum of ones %g, want %d", one, g_world);
    CHECK(ls_comm_trace_status(c) == LS_ERR_ARG, "undeclared group: trace status %s, want LS_ERR_ARG",
          ls_status_str(ls_comm_trace_status(c)));
    ls_comm_set_trace(c, NULL);
    ls_trace_writer_close(w2);
    unlink(path);
    unlink(path2);
    rmdir(dir);

    if (g_rank == 0) printf("test_comm: %s backend, world %d, %zu collectives checked\n", ls_comm_backend(c), g_world, g_n_want);
    if (g_fails) fprintf(stderr, "test_comm rank %d: %d checks failed\n", g_rank, g_fails);
    ls_comm_close(c);
    return g_fails ? 1 : 0;
}
