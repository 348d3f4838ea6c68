/* test_mla_cp.c - the mla family's cross-rank attention (trainer/families/mla/mla_cp_attn.h),
 * float64, run under `mpirun -np N` (N = 2, 3, 4) and once without mpirun
 * (N = 1).  A plain program (not Criterion: its forks do not mix with MPI);
 * every rank checks, exit 0 only when every rank passed.
 *
 * Every rank draws the same random carried rows (c_kv, k_pe, k_I) for all
 * positions, the same queries and kv_b, and keeps its shard.  References,
 * computed on every rank without any communicator:
 *  - the selection by brute force: every visible key's indexer score
 *    computed here by the formula of docs/model.md §2.2, sorted by the tie rule
 *    (score descending, then position ascending), the first k;
 *  - the single-process composition over ALL rows concatenated as one
 *    block: ls_dsa_topk over all keys, ls_mla_forward/backward with that
 *    selection (no merge, no gather, no ring).
 * Compared: sel exactly, o, lse, dq, the gradients of the shard rows (each
 * rank its own), of the response rows (every rank) and of kv_b (the ranks'
 * local parts summed here) to 1e-12 relative; the replicated outputs
 * bitwise equal on every rank (digests gathered).  The prompt is long
 * enough that the top-k is active and the selections draw on several ranks
 * (asserted); a second set of rows has indexer keys repeated across ranks so
 * that exact ties straddle the k-th slot (asserted) and the tie rule decides.
 * The fault cp-local-dsa must change sel and o beyond tolerance.  Every
 * collective is traced: the events read back are one per call, gseq in
 * order, and the same sequence on every rank; the bytes per purpose of one
 * layer match the shapes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/dsa.h"
#include "kernels/mla.h"
#include "receipts/format/digest.h"
#include "receipts/reading/trace_reader.h"
#include "receipts/writing/trace_writer.h"
#include "trainer/dist/comm.h"
#include "trainer/dist/cp.h"
#include "trainer/families/mla/mla_cp_attn.h"
#include "trainer/base/rng.h"

#include "tests/trainer/test_mpi_harness.h"

#define K(x) LS_K(x)
#define TOL 1e-12

#define MUST(x)                                                                   \
    do {                                                                          \
        ls_status st_ = (x);                                                      \
        if (st_ != LS_OK) {                                                       \
            fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, __FILE__, __LINE__, #x); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

/* shapes: H heads, the indexer's H_I x d_I, k candidates */
static const ls_mla_dims DIMS = {.H = 2, .d_n = 4, .d_r = 2, .d_v = 3, .r_kv = 5};
enum { HI = 2, DI = 4 };

static double *vec(size_t n) {
    double *v = calloc(n ? n : 1, sizeof *v);
    if (!v) exit(2);
    return v;
}

static double *rnd(ls_rng *r, size_t n) {
    double *v = vec(n);
    for (size_t i = 0; i < n; i++) v[i] = 2 * ls_rng_uniform(r) - 1;
    return v;
}

/* The whole problem, the same on every rank: Tp prompt positions, Tr
 * response positions after them; rows for all Tp + Tr positions. */
typedef struct {
    size_t Tp, Tr, k;
    double *c_kv, *k_pe, *k_I, *kv_b;
    double *qn, *qp, *qI, *w, *dout;     /* response queries at Tp .. Tp+Tr-1 */
    double *pqn, *pqp, *pqI, *pw, *pdout; /* prompt queries at 0 .. Tp-1 */
} problem;

static problem make(size_t Tp, size_t Tr, size_t k, uint64_t seed, int tied_keys) {
    problem p = {.Tp = Tp, .Tr = Tr, .k = k};
    ls_rng r;
    ls_rng_seed(&r, seed);
    size_t n = Tp + Tr, H = DIMS.H;
    p.c_kv = rnd(&r, n * DIMS.r_kv);
    p.k_pe = rnd(&r, n * DIMS.d_r);
    p.k_I = rnd(&r, n * DI);
    if (tied_keys) /* three distinct keys, repeated: exact ties across every rank */
        for (size_t s = 3; s < n; s++) memcpy(p.k_I + s * DI, p.k_I + (s % 3) * DI, DI * sizeof(double));
    p.kv_b = rnd(&r, H * (DIMS.d_n + DIMS.d_v) * DIMS.r_kv);
    p.qn = rnd(&r, Tr * H * DIMS.d_n);
    p.qp = rnd(&r, Tr * H * DIMS.d_r);
    p.qI = rnd(&r, Tr * HI * DI);
    p.w = rnd(&r, Tr * HI);
    p.dout = rnd(&r, Tr * H * DIMS.d_v);
    p.pqn = rnd(&r, Tp * H * DIMS.d_n);
    p.pqp = rnd(&r, Tp * H * DIMS.d_r);
    p.pqI = rnd(&r, Tp * HI * DI);
    p.pw = rnd(&r, Tp * HI);
    p.pdout = rnd(&r, Tp * H * DIMS.d_v);
    return p;
}

static void unmake(problem *p) {
    double *all[] = {p->c_kv, p->k_pe, p->k_I, p->kv_b, p->qn, p->qp, p->qI, p->w, p->dout,
                     p->pqn, p->pqp, p->pqI, p->pw, p->pdout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* ---- the references -------------------------------------------------------- */

/* Brute-force selection: queries at q0.., keys 0..q0+t, scores by the
 * formula, sorted by the tie rule. */
typedef struct {
    double s;
    int64_t p;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->p < y->p ? -1 : x->p > y->p;
}

/* sel [T, k]; *n_tie_cut counts the rows where a tie straddles the k-th slot. */
static void brute_select(int64_t *sel, const double *qI, const double *w, const double *k_I, size_t T, int64_t q0,
                         size_t k, size_t *n_tie_cut) {
    cand *c = malloc((size_t)(q0 + (int64_t)T) * sizeof *c);
    *n_tie_cut = 0;
    for (size_t t = 0; t < T; t++) {
        size_t nv = (size_t)q0 + t + 1;
        for (size_t s = 0; s < nv; s++) {
            double sc = 0;
            for (size_t h = 0; h < HI; h++) {
                double d = 0;
                for (size_t j = 0; j < DI; j++) d += qI[(t * HI + h) * DI + j] * k_I[s * DI + j];
                sc += w[t * HI + h] * (d > 0 ? d : 0);
            }
            c[s] = (cand){sc, (int64_t)s};
        }
        qsort(c, nv, sizeof *c, cand_cmp);
        for (size_t j = 0; j < k; j++) sel[t * k + j] = j < nv ? c[j].p : -1;
        if (nv > k && c[k - 1].s == c[k].s) ++*n_tie_cut;
    }
    free(c);
}

/* The single-process composition: one block of all rows 0..nk-1, queries at q0. */
typedef struct {
    int64_t *sel;
    double *o, *lse, *dqn, *dqp, *dc, *dp, *dkvb;
} result;

static void ref_compose(result *r, const problem *p, const double *qn, const double *qp, const double *qI,
                        const double *w, const double *dout, size_t T, int64_t q0, size_t nk) {
    size_t H = DIMS.H, k = p->k;
    r->sel = malloc(T * k * sizeof *r->sel);
    double *sc = vec(T * k), *ws = vec(K(ls_dsa_topk_workspace)(nk));
    K(ls_dsa_topk)(r->sel, sc, qI, w, p->k_I, T, nk, HI, DI, q0, 0, k, ws);
    free(ws);
    free(sc);
    r->o = vec(T * H * DIMS.d_v);
    r->lse = vec(T * H);
    ws = vec(K(ls_mla_forward_workspace)(LS_MLA_NAIVE, nk, k, &DIMS));
    double tau = 1.0 / sqrt((double)(DIMS.d_n + DIMS.d_r));
    K(ls_mla_forward)(r->o, r->lse, qn, qp, p->c_kv, p->k_pe, p->kv_b, r->sel, k, T, nk, &DIMS, q0, 0, tau,
                      LS_MLA_NAIVE, ws);
    free(ws);
    r->dqn = vec(T * H * DIMS.d_n);
    r->dqp = vec(T * H * DIMS.d_r);
    r->dc = vec(nk * DIMS.r_kv);
    r->dp = vec(nk * DIMS.d_r);
    r->dkvb = vec(H * (DIMS.d_n + DIMS.d_v) * DIMS.r_kv);
    ws = vec(K(ls_mla_backward_workspace)(LS_MLA_NAIVE, nk, k, &DIMS));
    K(ls_mla_backward)(r->dqn, r->dqp, r->dc, r->dp, r->dkvb, r->o, r->lse, dout, qn, qp, p->c_kv, p->k_pe, p->kv_b,
                       r->sel, k, T, nk, &DIMS, q0, 0, tau, LS_MLA_NAIVE, ws);
    free(ws);
}

static void result_free(result *r) {
    free(r->sel), free(r->o), free(r->lse), free(r->dqn), free(r->dqp), free(r->dc), free(r->dp), free(r->dkvb);
}

/* ---- comparisons ----------------------------------------------------------- */



static double max_all(double x) {
    MUST(ls_group_allreduce_max(grp, &x, 1, LS_TRACE_DTYPE_F64, "test_result", -1));
    return x;
}

/* Worst errors per quantity over every configuration and rank. */
enum { E_SEL, E_O, E_LSE, E_DQ, E_DROWS, E_DRESP, E_DKVB, E_PO, E_PLSE, E_PDQ, E_PDROWS, E_PDKVB, E_N };
static const char *E_NAME[E_N] = {"sel mismatches", "resp o", "resp lse", "resp dq", "resp d(shard rows)",
                                  "resp d(resp rows)", "resp dkv_b", "prompt o", "prompt lse", "prompt dq",
                                  "prompt d(shard rows)", "prompt dkv_b"};
static double worst[E_N];

static void note(int e, double v, const char *what) {
    if (v > worst[e]) worst[e] = v;
    CHECK(e == E_SEL ? v == 0 : v <= TOL, "%s: %s %.3e", what, E_NAME[e], v);
}

/* How many distinct ranks' shards the selections [T, k] draw on. */
static int ranks_used(const int64_t *sel, size_t n, int64_t Tp) {
    int used[64] = {0}, cnt = 0;
    for (size_t i = 0; i < n; i++) {
        if (sel[i] < 0 || sel[i] >= Tp) continue;
        for (int r = 0; r < world_; r++) {
            int64_t s0, s1;
            ls_cp_shard(Tp, world_, r, &s0, &s1);
            if (sel[i] >= s0 && sel[i] < s1 && !used[r]) used[r] = 1, cnt++;
        }
    }
    return cnt;
}

static ls_mla_cp ctx(const problem *p, ls_mla_form form, int fault) {
    return (ls_mla_cp){.g = grp, .dims = DIMS, .H_I = HI, .d_I = DI, .k_top = p->k,
                       .tau = 1.0 / sqrt((double)(DIMS.d_n + DIMS.d_r)), .form = form, .T = (int64_t)p->Tp,
                       .local_dsa = fault};
}

/* The response's CP selection and forward on this rank: its own shard [s0, s0 + n) of the prompt's
 * rows, the response rows, the response queries into *own, *resp, *q; the selection (Tr x k) and
 * o, lse into *sel, *o, *lse (malloc'd: the caller frees them). */
static void response_forward(ls_mla_cp *c, const problem *p, int64_t s0, size_t n, int layer, ls_mla_cp_rows *own,
                             ls_mla_cp_rows *resp, ls_mla_cp_queries *q, int64_t **sel, double **o, double **lse) {
    size_t H = DIMS.H, Tp = p->Tp, Tr = p->Tr, rk = DIMS.r_kv, dr = DIMS.d_r;
    *own = (ls_mla_cp_rows){p->c_kv + (size_t)s0 * rk, p->k_pe + (size_t)s0 * dr, p->k_I + (size_t)s0 * DI, s0, n};
    *resp = (ls_mla_cp_rows){p->c_kv + Tp * rk, p->k_pe + Tp * dr, p->k_I + Tp * DI, (int64_t)Tp, Tr};
    *q = (ls_mla_cp_queries){p->qn, p->qp, p->qI, p->w, (int64_t)Tp, Tr};
    *sel = malloc(Tr * p->k * sizeof **sel);
    *o = vec(Tr * H * DIMS.d_v), *lse = vec(Tr * H);
    MUST(K(ls_mla_cp_response_select)(c, *sel, q, own, 1, resp, layer));
    MUST(K(ls_mla_cp_response_forward)(c, *o, *lse, q, *sel, own, 1, resp, p->kv_b, layer));
}

/* The prompt's CP selection and forward on this rank: the shard's queries (rows [s0, s0 + n)) into *pq
 * against its own rows own; the selection (n x k) and o, lse into *sel, *o, *lse (malloc'd: the caller
 * frees them). */
static void prompt_forward(ls_mla_cp *c, const problem *p, int64_t s0, size_t n, const ls_mla_cp_rows *own, int layer,
                           ls_mla_cp_queries *pq, int64_t **sel, double **o, double **lse) {
    size_t H = DIMS.H, qo = (size_t)s0 * H;
    *pq = (ls_mla_cp_queries){p->pqn + qo * DIMS.d_n, p->pqp + qo * DIMS.d_r, p->pqI + (size_t)s0 * HI * DI,
                              p->pw + (size_t)s0 * HI, s0, n};
    *sel = malloc(n * p->k * sizeof **sel);
    *o = vec(n * H * DIMS.d_v), *lse = vec(n * H);
    MUST(K(ls_mla_cp_prompt_select)(c, *sel, pq, own, layer));
    MUST(K(ls_mla_cp_prompt_forward)(c, *o, *lse, pq, *sel, own, p->kv_b, 1, layer));
}

/* ---- one configuration: response and prompt, checked ------------------------- */

static void check_config(const char *name, const problem *p, ls_mla_form form, int layer) {
    size_t H = DIMS.H, Tp = p->Tp, Tr = p->Tr, k = p->k, rk = DIMS.r_kv, dr = DIMS.d_r;
    int64_t s0, s1;
    ls_cp_shard((int64_t)Tp, world_, rank_, &s0, &s1);
    size_t n = (size_t)(s1 - s0);
    ls_mla_cp c = ctx(p, form, 0);
    char what[96];
    snprintf(what, sizeof what, "%s %s layer %d", name, form == LS_MLA_NAIVE ? "naive" : "absorbed", layer);

    /* response */
    result ref;
    ref_compose(&ref, p, p->qn, p->qp, p->qI, p->w, p->dout, Tr, (int64_t)Tp, Tp + Tr);
    int64_t *bsel = malloc(Tr * k * sizeof *bsel);
    size_t cut;
    brute_select(bsel, p->qI, p->w, p->k_I, Tr, (int64_t)Tp, k, &cut);
    CHECK(!memcmp(bsel, ref.sel, Tr * k * sizeof *bsel), "%s: ls_dsa_topk over all keys differs from brute force",
          what);
    ls_mla_cp_rows own, resp;
    ls_mla_cp_queries q;
    int64_t *sel;
    double *o, *lse;
    response_forward(&c, p, s0, n, layer, &own, &resp, &q, &sel, &o, &lse);
    size_t mism = 0;
    for (size_t i = 0; i < Tr * k; i++) mism += sel[i] != ref.sel[i];
    note(E_SEL, (double)mism, what);
    note(E_O, rel(o, ref.o, Tr * H * DIMS.d_v), what);
    note(E_LSE, rel(lse, ref.lse, Tr * H), what);
    if (world_ > 1) CHECK(ranks_used(sel, Tr * k, (int64_t)Tp) >= 2, "%s: the response selection draws on one rank", what);
    double *dqn = vec(Tr * H * DIMS.d_n), *dqp = vec(Tr * H * DIMS.d_r), *dc = vec(n * rk), *dp = vec(n * dr);
    double *drc = vec(Tr * rk), *drp = vec(Tr * dr), *dkvb = vec(H * (DIMS.d_n + DIMS.d_v) * rk);
    size_t nkvb = H * (DIMS.d_n + DIMS.d_v) * rk;
    ls_mla_cp_drows dblk = {dc, dp}, dresp = {drc, drp};
    MUST(K(ls_mla_cp_response_backward)(&c, dqn, dqp, &dblk, &dresp, dkvb, o, lse, p->dout, &q, sel, &own, 1, &resp,
                                        p->kv_b, layer));
    note(E_DQ, fmax(rel(dqn, ref.dqn, Tr * H * DIMS.d_n), rel(dqp, ref.dqp, Tr * H * DIMS.d_r)), what);
    note(E_DROWS, fmax(rel(dc, ref.dc + (size_t)s0 * rk, n * rk), rel(dp, ref.dp + (size_t)s0 * dr, n * dr)), what);
    note(E_DRESP, fmax(rel(drc, ref.dc + Tp * rk, Tr * rk), rel(drp, ref.dp + Tp * dr, Tr * dr)), what);
    MUST(ls_group_allreduce_sum(grp, dkvb, nkvb, LS_TRACE_DTYPE_F64, "test_dkvb_sum", layer)); /* finalize's sum */
    note(E_DKVB, rel(dkvb, ref.dkvb, nkvb), what);
    int same = same_on_all_ranks(sel, Tr * k * sizeof *sel) & same_on_all_ranks(o, Tr * H * DIMS.d_v * 8) &
               same_on_all_ranks(lse, Tr * H * 8) & same_on_all_ranks(dqn, Tr * H * DIMS.d_n * 8) &
               same_on_all_ranks(dqp, Tr * H * DIMS.d_r * 8) & same_on_all_ranks(drc, Tr * rk * 8) &
               same_on_all_ranks(drp, Tr * dr * 8);
    CHECK(same, "%s: response sel/o/lse/dq/d(resp rows) not bitwise equal on every rank", what);
    free(bsel), free(sel), free(o), free(lse), free(dqn), free(dqp), free(dc), free(dp), free(drc), free(drp);
    free(dkvb);
    result_free(&ref);

    /* prompt: the shard's queries */
    ref_compose(&ref, p, p->pqn, p->pqp, p->pqI, p->pw, p->pdout, Tp, 0, Tp);
    bsel = malloc(Tp * k * sizeof *bsel);
    size_t pcut;
    brute_select(bsel, p->pqI, p->pw, p->k_I, Tp, 0, k, &pcut);
    CHECK(!memcmp(bsel, ref.sel, Tp * k * sizeof *bsel), "%s: prompt ls_dsa_topk differs from brute force", what);
    if (!strcmp(name, "ties") && rank_ == 0)
        printf("  ties: %zu of %zu response rows and %zu of %zu prompt rows have a tie across the k-th slot\n", cut,
               Tr, pcut, Tp);
    if (!strcmp(name, "ties")) CHECK(cut + pcut > 0, "%s: no tie straddles the k-th slot", what);
    size_t qo = (size_t)s0 * H;
    ls_mla_cp_queries pq;
    prompt_forward(&c, p, s0, n, &own, layer, &pq, &sel, &o, &lse);
    mism = 0;
    for (size_t i = 0; i < n * k; i++) mism += sel[i] != ref.sel[(size_t)s0 * k + i];
    note(E_SEL, (double)mism, what);
    note(E_PO, rel(o, ref.o + qo * DIMS.d_v, n * H * DIMS.d_v), what);
    note(E_PLSE, rel(lse, ref.lse + qo, n * H), what);
    if (world_ > 1) {
        int used = ranks_used(sel, n * k, (int64_t)Tp), most = (int)max_all(used);
        CHECK(most >= 2, "%s: no prompt selection draws on two ranks", what);
    }
    /* the remote part alone, with the own part merged here as a caller would: the same bits */
    double *o2 = vec(n * H * DIMS.d_v), *l2 = vec(n * H), *op = vec(n * H * DIMS.d_v), *lp = vec(n * H);
    MUST(K(ls_mla_cp_prompt_forward)(&c, o2, l2, &pq, sel, &own, p->kv_b, 0, layer));
    int64_t *loc = malloc(n * k * sizeof *loc);
    double *ws = vec(K(ls_mla_forward_workspace)(form, n, k, &DIMS));
    K(ls_dsa_localize)(loc, sel, n, k, s0, n);
    K(ls_mla_forward)(op, lp, pq.q_nope, pq.q_pe, own.c_kv, own.k_pe, p->kv_b, loc, k, n, n, &DIMS, s0, s0, c.tau,
                      form, ws);
    K(ls_attn_merge_into)(o2, l2, op, lp, n * H, DIMS.d_v);
    CHECK(!memcmp(o2, o, n * H * DIMS.d_v * 8) && !memcmp(l2, lse, n * H * 8),
          "%s: remote part + the caller's own part is not the same as with_own", what);
    free(o2), free(l2), free(op), free(lp), free(loc), free(ws);
    /* the shard's queries in two chunks (every rank calls twice): the same selection and attention */
    size_t h1 = n / 2;
    int64_t *sel2 = malloc(n * k * sizeof *sel2);
    o2 = vec(n * H * DIMS.d_v), l2 = vec(n * H);
    for (size_t part = 0; part < 2; part++) {
        size_t t0 = part ? h1 : 0, m = part ? n - h1 : h1, qc = (size_t)s0 * H + t0 * H;
        ls_mla_cp_queries cq = {p->pqn + qc * DIMS.d_n, p->pqp + qc * DIMS.d_r, p->pqI + ((size_t)s0 + t0) * HI * DI,
                                p->pw + ((size_t)s0 + t0) * HI, s0 + (int64_t)t0, m};
        MUST(K(ls_mla_cp_prompt_select)(&c, sel2 + t0 * k, &cq, &own, layer));
        MUST(K(ls_mla_cp_prompt_forward)(&c, o2 + t0 * H * DIMS.d_v, l2 + t0 * H, &cq, sel2 + t0 * k, &own, p->kv_b, 1,
                                         layer));
    }
    CHECK(!memcmp(sel2, sel, n * k * sizeof *sel), "%s: chunked prompt selection differs", what);
    CHECK(rel(o2, o, n * H * DIMS.d_v) <= TOL && rel(l2, lse, n * H) <= TOL, "%s: chunked prompt attention differs",
          what);
    free(sel2), free(o2), free(l2);
    dqn = vec(n * H * DIMS.d_n), dqp = vec(n * H * DIMS.d_r), dc = vec(n * rk), dp = vec(n * dr);
    dkvb = vec(nkvb);
    ls_mla_cp_drows down = {dc, dp};
    MUST(K(ls_mla_cp_prompt_backward)(&c, dqn, dqp, &down, dkvb, o, lse, p->pdout + qo * DIMS.d_v, &pq, sel, &own,
                                      p->kv_b, 1, layer));
    note(E_PDQ, fmax(rel(dqn, ref.dqn + qo * DIMS.d_n, n * H * DIMS.d_n), rel(dqp, ref.dqp + qo * DIMS.d_r, n * H * DIMS.d_r)),
         what);
    note(E_PDROWS, fmax(rel(dc, ref.dc + (size_t)s0 * rk, n * rk), rel(dp, ref.dp + (size_t)s0 * dr, n * dr)), what);
    MUST(ls_group_allreduce_sum(grp, dkvb, nkvb, LS_TRACE_DTYPE_F64, "test_dkvb_sum", layer));
    note(E_PDKVB, rel(dkvb, ref.dkvb, nkvb), what);
    free(bsel), free(sel), free(o), free(lse), free(dqn), free(dqp), free(dc), free(dp), free(dkvb);
    result_free(&ref);
}

/* ---- the fault cp-local-dsa -------------------------------------------------- */

static void check_fault(const problem *p, int layer) {
    size_t H = DIMS.H, Tp = p->Tp, Tr = p->Tr, k = p->k;
    int64_t s0, s1;
    ls_cp_shard((int64_t)Tp, world_, rank_, &s0, &s1);
    size_t n = (size_t)(s1 - s0);
    ls_mla_cp c = ctx(p, LS_MLA_NAIVE, 1);
    result ref;
    ref_compose(&ref, p, p->qn, p->qp, p->qI, p->w, p->dout, Tr, (int64_t)Tp, Tp + Tr);
    ls_mla_cp_rows own, resp;
    ls_mla_cp_queries q;
    int64_t *sel;
    double *o, *lse;
    response_forward(&c, p, s0, n, layer, &own, &resp, &q, &sel, &o, &lse);
    double sel_diff = max_all(memcmp(sel, ref.sel, Tr * k * sizeof *sel) != 0);
    double eo = max_all(rel(o, ref.o, Tr * H * DIMS.d_v));
    CHECK(sel_diff > 0, "cp-local-dsa: the response selection equals the global one on every rank");
    CHECK(eo > 1e-6, "cp-local-dsa: response o vs the reference rel %.3e should fail", eo);
    result_free(&ref);
    free(sel), free(o), free(lse);
    /* prompt: the own shard's keys only */
    ref_compose(&ref, p, p->pqn, p->pqp, p->pqI, p->pw, p->pdout, Tp, 0, Tp);
    size_t qo = (size_t)s0 * H;
    ls_mla_cp_queries pq;
    prompt_forward(&c, p, s0, n, &own, layer, &pq, &sel, &o, &lse);
    double psel = max_all(memcmp(sel, ref.sel + (size_t)s0 * k, n * k * sizeof *sel) != 0);
    double epo = max_all(rel(o, ref.o + qo * DIMS.d_v, n * H * DIMS.d_v));
    CHECK(psel > 0, "cp-local-dsa: the prompt selection equals the global one on every rank");
    CHECK(epo > 1e-6, "cp-local-dsa: prompt o vs the reference rel %.3e should fail", epo);
    if (rank_ == 0)
        printf("  fault cp-local-dsa (CP-%d): response o rel %.3e, prompt o rel %.3e (detected: > 1e-6)\n", world_,
               eo, epo);
    result_free(&ref);
    free(sel), free(o), free(lse);
}

/* ---- refusals ------------------------------------------------------------------- */

static void check_refusals(const problem *p) {
    ls_mla_cp c = ctx(p, LS_MLA_NAIVE, 0);
    int64_t sel[64];
    double o[64], lse[64];
    ls_mla_cp_queries q = {p->qn, p->qp, p->qI, p->w, (int64_t)p->Tp, 1};
    CHECK(K(ls_mla_cp_response_select)(&c, sel, NULL, NULL, 0, NULL, 0) == LS_ERR_ARG && strstr(c.err, "q"),
          "NULL queries: %s", c.err);
    ls_mla_cp_rows bad = {NULL, NULL, NULL, 0, 3};
    CHECK(K(ls_mla_cp_response_select)(&c, sel, &q, &bad, 1, NULL, 0) == LS_ERR_ARG && strstr(c.err, "blk[0]"),
          "a block without k_I: %s", c.err);
    ls_mla_cp_rows own = {p->c_kv, p->k_pe, p->k_I, 1, 2}; /* not this rank's shard */
    q.pos0 = 1;
    CHECK(K(ls_mla_cp_prompt_forward)(&c, o, lse, &q, sel, &own, p->kv_b, 1, 0) == LS_ERR_ARG &&
              strstr(c.err, "own"),
          "a wrong own block: %s", c.err);
    int64_t s0, s1;
    ls_cp_shard((int64_t)p->Tp, world_, rank_, &s0, &s1);
    ls_mla_cp_rows mine = {p->c_kv + (size_t)s0 * DIMS.r_kv, p->k_pe + (size_t)s0 * DIMS.d_r,
                           p->k_I + (size_t)s0 * DI, s0, (size_t)(s1 - s0)};
    q.pos0 = s1; /* past the shard */
    CHECK(K(ls_mla_cp_prompt_select)(&c, sel, &q, &mine, 0) == LS_ERR_ARG && strstr(c.err, "outside the shard"),
          "queries past the shard: %s", c.err);
    c.k_top = 0;
    CHECK(K(ls_mla_cp_prompt_select)(&c, sel, &q, &own, 0) == LS_ERR_ARG && strstr(c.err, "k_top"), "k_top 0: %s",
          c.err);
    c = ctx(p, LS_MLA_NAIVE, 0);
    c.T = world_ - 1;
    CHECK(world_ == 1 || (K(ls_mla_cp_prompt_select)(&c, sel, &q, &own, 0) == LS_ERR_ARG && strstr(c.err, "c->T")),
          "a prompt shorter than the group: %s", c.err);
}

/* ---- the trace ------------------------------------------------------------------ */

typedef struct {
    size_t n, bad;
    int64_t gseq0;
    char *text; /* the rank-independent fields of every event, one line each */
    size_t len, cap;
} trace_state;

static const char *MODULE_PURPOSES[] = {"dsa_topk_gather", "lse_max", "lse_sum", "out_sum", "dq_sum",
                                        "dkv_sum", "dsa_ring", "kv_ring", "dkv_ring"};
enum { N_MODULE_PURPOSES = 9 };
static size_t seen_purpose[N_MODULE_PURPOSES];

static int on_event(const ls_trace_event *ev, void *user) {
    trace_state *s = user;
    if (ev->kind != LS_TRACE_COLLECTIVE) return 0;
    ls_trace_collective col;
    if (ls_trace_decode_collective(ev->json, &col) != LS_OK) {
        s->bad++;
        return 0;
    }
    if (s->n == 0) s->gseq0 = col.gseq;
    if (col.gseq != s->gseq0 + (int64_t)s->n || strcmp(col.group, "cp") != 0) s->bad++;
    int known = strncmp(col.purpose, "test_", 5) == 0;
    for (int i = 0; i < N_MODULE_PURPOSES; i++)
        if (!strcmp(col.purpose, MODULE_PURPOSES[i])) seen_purpose[i]++, known = 1;
    if (!known) s->bad++;
    /* the rank-independent fields: every rank must have the same sequence */
    char line[160];
    int len = snprintf(line, sizeof line, "%lld %s %s %lld %s %s %lld\n", (long long)col.gseq,
                       ls_trace_op_name(col.op), ls_trace_red_name(col.red), (long long)col.count,
                       ls_trace_dtype_name(col.dtype), col.purpose, col.has_layer ? (long long)col.layer : -1LL);
    if (s->len + (size_t)len + 1 > s->cap) {
        s->cap = 2 * (s->cap + (size_t)len + 1);
        s->text = realloc(s->text, s->cap);
        if (!s->text) exit(2);
    }
    memcpy(s->text + s->len, line, (size_t)len);
    s->len += (size_t)len;
    s->n++;
    return 0;
}

/* One layer as the trainer runs it: the response's selection, attention and
 * backward, the prompt's selection, attention and backward (no checks). */
static void one_layer(const problem *p, int layer) {
    size_t H = DIMS.H, Tp = p->Tp, Tr = p->Tr, k = p->k, rk = DIMS.r_kv, dr = DIMS.d_r;
    size_t nkvb = H * (DIMS.d_n + DIMS.d_v) * rk;
    int64_t s0, s1;
    ls_cp_shard((int64_t)Tp, world_, rank_, &s0, &s1);
    size_t n = (size_t)(s1 - s0), qo = (size_t)s0 * H, T = n > Tr ? n : Tr;
    ls_mla_cp c = ctx(p, LS_MLA_NAIVE, 0);
    ls_mla_cp_rows own = {p->c_kv + (size_t)s0 * rk, p->k_pe + (size_t)s0 * dr, p->k_I + (size_t)s0 * DI, s0, n};
    ls_mla_cp_rows resp = {p->c_kv + Tp * rk, p->k_pe + Tp * dr, p->k_I + Tp * DI, (int64_t)Tp, Tr};
    ls_mla_cp_queries q = {p->qn, p->qp, p->qI, p->w, (int64_t)Tp, Tr};
    ls_mla_cp_queries pq = {p->pqn + qo * DIMS.d_n, p->pqp + qo * DIMS.d_r, p->pqI + (size_t)s0 * HI * DI,
                            p->pw + (size_t)s0 * HI, s0, n};
    int64_t *sel = malloc(T * k * sizeof *sel);
    double *o = vec(T * H * DIMS.d_v), *lse = vec(T * H), *dqn = vec(T * H * DIMS.d_n), *dqp = vec(T * H * dr);
    double *dc = vec((n + Tr) * rk), *dp = vec((n + Tr) * dr), *dkvb = vec(nkvb);
    ls_mla_cp_drows dblk = {dc, dp}, dresp = {dc + n * rk, dp + n * dr};
    MUST(K(ls_mla_cp_response_select)(&c, sel, &q, &own, 1, &resp, layer));
    MUST(K(ls_mla_cp_response_forward)(&c, o, lse, &q, sel, &own, 1, &resp, p->kv_b, layer));
    MUST(K(ls_mla_cp_response_backward)(&c, dqn, dqp, &dblk, &dresp, dkvb, o, lse, p->dout, &q, sel, &own, 1, &resp,
                                        p->kv_b, layer));
    MUST(K(ls_mla_cp_prompt_select)(&c, sel, &pq, &own, layer));
    MUST(K(ls_mla_cp_prompt_forward)(&c, o, lse, &pq, sel, &own, p->kv_b, 1, layer));
    MUST(K(ls_mla_cp_prompt_backward)(&c, dqn, dqp, &dblk, dkvb, o, lse, p->pdout + qo * DIMS.d_v, &pq, sel, &own,
                                      p->kv_b, 1, layer));
    free(sel), free(o), free(lse), free(dqn), free(dqp), free(dc), free(dp), free(dkvb);
}

/* Bytes per purpose of one layer (response + prompt, forward + backward)
 * for the sample shape, against the shapes. */
static void measure_bytes(ls_comm *comm, const problem *p) {
    ls_comm_stat before[64], after[64];
    size_t nb = ls_comm_stats(comm, before, 64);
    one_layer(p, 9);
    size_t na = ls_comm_stats(comm, after, 64);
    size_t H = DIMS.H, Tr = p->Tr, k = p->k, ms = 0;
    for (int r = 0; r < world_; r++) {
        int64_t s0, s1;
        ls_cp_shard((int64_t)p->Tp, world_, r, &s0, &s1);
        if ((size_t)(s1 - s0) > ms) ms = (size_t)(s1 - s0);
    }
    size_t N = world_ > 1 ? (size_t)world_ : 0, rows = ms * (DIMS.r_kv + DIMS.d_r);
    struct {
        const char *purpose;
        uint64_t want;
    } exp[] = {
        {"dsa_topk_gather", 2 * Tr * k * 8},
        {"lse_max", Tr * H * 8},
        {"lse_sum", Tr * H * 8},
        {"out_sum", Tr * H * DIMS.d_v * 8},
        {"dq_sum", Tr * H * (DIMS.d_n + DIMS.d_r) * 8},
        {"dkv_sum", Tr * (DIMS.r_kv + DIMS.d_r) * 8},
        {"dsa_ring", N ? (N - 1) * ms * DI * 8 : 0},
        {"kv_ring", N ? (N - 1) * rows * 8 : 0},
        {"dkv_ring", N * 2 * rows * 8},
    };
    if (rank_ == 0) printf("  bytes sent per rank for one layer (Tp=%zu Tr=%zu k=%zu, CP-%d):", p->Tp, Tr, k, world_);
    for (size_t e = 0; e < sizeof exp / sizeof exp[0]; e++) {
        uint64_t b0 = 0, b1 = 0;
        for (size_t i = 0; i < nb && i < 64; i++)
            if (!strcmp(before[i].purpose, exp[e].purpose)) b0 = before[i].bytes;
        for (size_t i = 0; i < na && i < 64; i++)
            if (!strcmp(after[i].purpose, exp[e].purpose)) b1 = after[i].bytes;
        uint64_t got = b1 - b0, want = world_ > 1 ? exp[e].want : 0; /* a group of one sends nothing */
        CHECK(got == want, "bytes of %s: %llu, want %llu", exp[e].purpose, (unsigned long long)got,
              (unsigned long long)want);
        if (rank_ == 0) printf(" %s %llu", exp[e].purpose, (unsigned long long)got);
    }
    if (rank_ == 0) printf("\n");
}

int main(int argc, char **argv) {
    if (harness_open("test_mla_cp", &argc, &argv) != 0) return 2;
    ls_comm *comm = comm_;
    if (world_ > 64) return 2;

    /* a trace per rank in one directory (rank 0 names it) */
    char dir[64] = "", path[128];
    if (rank_ == 0 && !mkdtemp(strcpy(dir, "/tmp/ls-mla-cp-XXXXXX"))) ls_comm_abort(comm, 1);
    MUST(ls_group_broadcast(grp, dir, sizeof dir, LS_TRACE_DTYPE_U8, 0, "test_setup", -1));
    snprintf(path, sizeof path, "%s/rank%d.jsonl", dir, rank_);
    int32_t members[64];
    for (int r = 0; r < world_; r++) members[r] = r;
    ls_trace_group tg = {"cp", members, (size_t)world_, NULL};
    ls_trace_header hdr = {.run_id = "mla-cp-test", .rank = rank_, .world = world_, .groups = &tg, .n_groups = 1};
    ls_trace_writer *w = NULL;
    MUST(ls_trace_writer_open(&w, path, &hdr));
    ls_comm_stat st0[64];
    size_t n0 = ls_comm_stats(comm, st0, 64);
    uint64_t calls0 = 0;
    for (size_t i = 0; i < n0; i++) calls0 += st0[i].calls;
    ls_comm_set_trace(comm, w);

    /* 29 prompt positions (uneven shards for 2, 3, 4), 6 response positions, k = 5 */
    problem pr = make(29, 6, 5, 77, 0);
    check_config("random", &pr, LS_MLA_NAIVE, 0);
    check_config("random", &pr, LS_MLA_ABSORBED, 1);
    problem pt = make(23, 4, 4, 78, 1);
    check_config("ties", &pt, LS_MLA_NAIVE, 2);
    problem pk = make(37, 3, 9, 79, 0); /* a larger k: more than a shard's rows on some ranks */
    check_config("large-k", &pk, LS_MLA_ABSORBED, 3);
    if (world_ > 1) check_fault(&pr, 4);
    check_refusals(&pr);
    measure_bytes(comm, &pr);

    ls_comm_set_trace(comm, NULL);
    ls_comm_stat st1[64];
    size_t n1 = ls_comm_stats(comm, st1, 64);
    uint64_t calls1 = 0;
    for (size_t i = 0; i < n1; i++) calls1 += st1[i].calls;
    CHECK(ls_comm_trace_status(comm) == LS_OK, "trace status %s", ls_status_str(ls_comm_trace_status(comm)));
    MUST(ls_trace_emit_rank_complete(w, 0));
    MUST(ls_trace_writer_close(w));
    trace_state ts = {0};
    ls_trace_report rep;
    ls_status rs = ls_trace_read_file(path, on_event, &ts, &rep);
    CHECK(rs == LS_OK, "trace read: %s", ls_status_str(rs));
    ls_trace_report_free(&rep);
    uint8_t dgst[LS_DIGEST_SIZE];
    ls_digest_sha256(ts.text, ts.len, dgst);
    free(ts.text);
    CHECK(ts.n == calls1 - calls0, "trace: %zu collective events, %llu calls made", ts.n,
          (unsigned long long)(calls1 - calls0));
    CHECK(ts.bad == 0, "trace: %zu events out of order, of another group or of an unknown purpose", ts.bad);
    for (int i = 0; i < N_MODULE_PURPOSES; i++)
        CHECK(seen_purpose[i] > 0 || (world_ == 1 && strstr(MODULE_PURPOSES[i], "ring")),
              "trace: no %s event", MODULE_PURPOSES[i]);
    CHECK(same_on_all_ranks(dgst, sizeof dgst), "trace: the ranks' event sequences differ");
    if (rank_ == 0) {
        printf("  trace: %zu collective events per rank, the same sequence on every rank\n", ts.n);
        printf("  worst over configurations and ranks:\n");
    }
    for (int e = 0; e < E_N; e++) {
        double v = max_all(worst[e]);
        if (rank_ == 0) printf("    %-22s %.3e\n", E_NAME[e], v);
    }
    remove(path);
    MUST(ls_group_barrier(grp, "test_cleanup"));
    if (rank_ == 0) remove(dir);
    unmake(&pr), unmake(&pt), unmake(&pk);
    return harness_close("test_mla_cp");
}
