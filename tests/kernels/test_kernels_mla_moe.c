/* test_kernels_mla_moe.c - MoE kernels in float64 (moe.h): group-limited
 * routing on hand-made examples and against a sort-based reference written
 * here, the routing and combine backwards against central finite
 * differences (also chained: y -> router logits), and the dispatch layout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moe.h"
#include "tests/kernels/test_kernels_mla.h"

static double logit(double s) { return log(s / (1 - s)); }

/* Route one token with E = 8 experts in 4 groups of 2, 2 groups kept. */
static void route8(int32_t *idx, double *w, const double *logits, const double *bias, size_t k)
{
    double s[8], ws[8 + 4];
    ls_moe_route_forward_f64(idx, w, s, logits, bias, 1, 8, 4, 2, k, 2.5, ws);
}

Test(kernels_mla_moe, routing_by_hand)
{
    int32_t idx[3];
    double w[3];
    /* s by group: (0.95 0.10) (0.60 0.58) (0.55 0.56) (0.90 0.05).
     * Group scores 1.05, 1.18, 1.11, 0.95: groups 1 and 2 survive, so the
     * top-2 is {2, 3} although experts 0 and 6 have the largest s. */
    const double s[8] = {0.95, 0.10, 0.60, 0.58, 0.55, 0.56, 0.90, 0.05};
    double lg[8];
    for (int e = 0; e < 8; e++) lg[e] = logit(s[e]);
    route8(idx, w, lg, NULL, 2);
    cr_expect(idx[0] == 2 && idx[1] == 3, "group-limited idx (2,3), got (%d,%d)", idx[0], idx[1]);
    cr_expect(fabs(w[0] - 2.5 * 0.60 / 1.18) < 1e-12 && fabs(w[1] - 2.5 * 0.58 / 1.18) < 1e-12,
              "weights %g %g", w[0], w[1]);

    /* bias +0.2 on expert 6: group 3 scores 1.15 and replaces group 2;
     * s' picks 6 then 2, but the weights use s: 2.5*0.9/1.5, 2.5*0.6/1.5 */
    const double bias[8] = {0, 0, 0, 0, 0, 0, 0.2, 0};
    route8(idx, w, lg, bias, 2);
    cr_expect(idx[0] == 6 && idx[1] == 2, "biased idx (6,2), got (%d,%d)", idx[0], idx[1]);
    cr_expect(fabs(w[0] - 1.5) < 1e-12 && fabs(w[1] - 1.0) < 1e-12, "biased weights %g %g", w[0],
              w[1]);

    /* ties (all s = 0.5 exactly): bias 0.25 on experts 0, 4, 7 makes groups
     * 0, 2, 3 tie at 1.25 -> groups 0, 2 (lower index); experts 0 and 4 tie
     * at 0.75 -> 0 first; third pick ties 1 and 5 at 0.5 -> 1. */
    const double zero[8] = {0}, tb[8] = {0.25, 0, 0, 0, 0.25, 0, 0, 0.25};
    route8(idx, w, zero, tb, 3);
    cr_expect(idx[0] == 0 && idx[1] == 4 && idx[2] == 1, "tie idx (0,4,1), got (%d,%d,%d)",
              idx[0], idx[1], idx[2]);
    cr_expect(w[0] == 2.5 / 3 && w[1] == 2.5 / 3 && w[2] == 2.5 / 3, "equal weights rho/3");
}

/* Reference routing: sort groups and experts with a full comparison sort. */
static int better(double a, size_t ia, double b, size_t ib) { return a > b || (a == b && ia < ib); }

static void sort_desc(size_t *order, const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = 1; i < n; i++) /* insertion sort by the tie rule */
        for (size_t j = i; j > 0 && better(v[order[j]], order[j], v[order[j - 1]], order[j - 1]); j--) {
            size_t tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
}

static void reference_route(int32_t *idx, double *w, const double *logits, const double *bias,
                            size_t E, size_t G, size_t TG, size_t k, double rho)
{
    double s[64], sp[64], gsc[16], tmp[64];
    size_t order[64], gorder[16], gs = E / G;
    for (size_t e = 0; e < E; e++) {
        s[e] = 1 / (1 + exp(-logits[e]));
        sp[e] = s[e] + bias[e];
    }
    for (size_t g = 0; g < G; g++) {
        sort_desc(order, sp + g * gs, gs);
        gsc[g] = sp[g * gs + order[0]] + sp[g * gs + order[1]];
    }
    sort_desc(gorder, gsc, G);
    for (size_t e = 0; e < E; e++) tmp[e] = -INFINITY;
    for (size_t j = 0; j < TG; j++)
        for (size_t i = 0; i < gs; i++) tmp[gorder[j] * gs + i] = sp[gorder[j] * gs + i];
    sort_desc(order, tmp, E);
    double sum = 0;
    for (size_t j = 0; j < k; j++) sum += s[order[j]];
    for (size_t j = 0; j < k; j++) {
        idx[j] = (int32_t)order[j];
        w[j] = rho * s[order[j]] / (sum + 1e-20);
    }
}

Test(kernels_mla_moe, routing_matches_sort_reference)
{
    enum { T = 30, E = 16, G = 4, TG = 2, K = 4 };
    double lg[T * E], bias[E], s[T * E], w[T * K], rw[K], ws[E + G];
    int32_t idx[T * K], ridx[K];
    mla_test_seed(17);
    mla_test_fill(lg, T * E, 3);
    mla_test_fill(bias, E, 0.3);
    for (size_t i = 0; i < T * E; i += 5) lg[i] = lg[i + 1]; /* some exact ties */
    ls_moe_route_forward_f64(idx, w, s, lg, bias, T, E, G, TG, K, 2.5, ws);
    double worst = 0;
    for (size_t t = 0; t < T; t++) {
        reference_route(ridx, rw, lg + t * E, bias, E, G, TG, K, 2.5);
        for (size_t j = 0; j < K; j++)
            cr_expect(idx[t * K + j] == ridx[j], "token %zu slot %zu: %d vs %d", t, j,
                      idx[t * K + j], ridx[j]);
        worst = fmax(worst, tu_rel_err(w + t * K, rw, K));
        for (size_t e = 0; e < E; e++)
            cr_expect(fabs(s[t * E + e] - 1 / (1 + exp(-lg[t * E + e]))) < 1e-15, "saved s");
    }
    cr_expect(worst < 1e-14, "weights %.3e", worst);
    mla_test_report("routing weights vs sort reference", worst);
}

/* Combine problem: routing on T tokens, expert outputs eo in grouped rows,
 * loss L = sum Gy * y. */
enum { T = 6, E = 8, NG = 4, TG = 2, K = 3, D = 5 };
typedef struct {
    double logits[T * E], bias[E], s[T * E], w[T * K], eo[T * K * D], Gy[T * D];
    double shared[T * D];
    int32_t idx[T * K], idx0[T * K];
    size_t offsets[E + 1], slot_of_row[T * K], row_of_slot[T * K];
    int route_changed;
} moe_prob;

static void moe_make(moe_prob *p, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    mla_test_seed(seed);
    mla_test_fill(p->logits, T * E, 2);
    mla_test_fill(p->bias, E, 0.2);
    mla_test_fill(p->eo, T * K * D, 1);
    mla_test_fill(p->Gy, T * D, 1);
    mla_test_fill(p->shared, T * D, 1);
    double ws[E + NG];
    ls_moe_route_forward_f64(p->idx0, p->w, p->s, p->logits, p->bias, T, E, NG, TG, K, 2.5, ws);
    memcpy(p->idx, p->idx0, sizeof p->idx);
    ls_moe_dispatch_f64(p->offsets, p->slot_of_row, p->row_of_slot, p->idx, T, E, K);
}

/* L(logits) with eo fixed: route (idx must not move), combine. */
static double chain_loss(void *ctx)
{
    moe_prob *p = ctx;
    double ws[E + NG], y[T * D];
    ls_moe_route_forward_f64(p->idx, p->w, p->s, p->logits, p->bias, T, E, NG, TG, K, 2.5, ws);
    if (memcmp(p->idx, p->idx0, sizeof p->idx) != 0) p->route_changed = 1;
    ls_moe_combine_forward_f64(y, p->eo, p->w, p->shared, p->row_of_slot, T, K, D);
    double l = 0;
    for (size_t i = 0; i < T * D; i++) l += p->Gy[i] * y[i];
    return l;
}

/* L(w) = sum Gw * w(logits): the routing weights alone. */
static double weights_loss(void *ctx)
{
    moe_prob *p = ctx;
    double ws[E + NG];
    ls_moe_route_forward_f64(p->idx, p->w, p->s, p->logits, p->bias, T, E, NG, TG, K, 2.5, ws);
    if (memcmp(p->idx, p->idx0, sizeof p->idx) != 0) p->route_changed = 1;
    double l = 0;
    for (size_t i = 0; i < T * K; i++) l += p->Gy[i] * p->w[i]; /* Gy reused as [T*K] weights */
    return l;
}

/* L(eo, w) with w as a free input. */
static double combine_loss(void *ctx)
{
    moe_prob *p = ctx;
    double y[T * D];
    ls_moe_combine_forward_f64(y, p->eo, p->w, p->shared, p->row_of_slot, T, K, D);
    double l = 0;
    for (size_t i = 0; i < T * D; i++) l += p->Gy[i] * y[i];
    return l;
}

Test(kernels_mla_moe, routing_backward_matches_finite_differences)
{
    static moe_prob p;
    moe_make(&p, 19);
    double dlogits[T * E], ds[T * E], scale;
    ls_moe_route_backward_f64(dlogits, ds, p.Gy, p.s, p.idx0, T, E, K, 2.5);
    double e = mla_test_fd(weights_loss, &p, p.logits, dlogits, T * E, 1e-6, &scale);
    cr_expect(!p.route_changed, "a finite-difference step changed the routing");
    cr_expect(e < 1e-6 && scale > 1e-3, "dlogits worst rel err %.3e (scale %.3e)", e, scale);
    /* ds is zero off the selected experts and dlogits = ds s (1-s) */
    for (size_t t = 0; t < T; t++)
        for (size_t e2 = 0; e2 < E; e2++) {
            int sel = 0;
            for (size_t j = 0; j < K; j++) sel |= p.idx0[t * K + j] == (int32_t)e2;
            double si = p.s[t * E + e2];
            cr_expect(sel || (ds[t * E + e2] == 0 && dlogits[t * E + e2] == 0), "unselected");
            cr_expect(fabs(dlogits[t * E + e2] - ds[t * E + e2] * si * (1 - si)) < 1e-15, "ds");
        }
    mla_test_report("route backward: dlogits vs central differences", e);
}

Test(kernels_mla_moe, combine_backward_matches_finite_differences)
{
    static moe_prob p;
    moe_make(&p, 23);
    double deo[T * K * D], dw[T * K], s1, s2;
    ls_moe_combine_backward_f64(deo, dw, p.Gy, p.eo, p.w, p.row_of_slot, T, K, D);
    double e1 = mla_test_fd(combine_loss, &p, p.eo, deo, T * K * D, 1e-6, &s1);
    double e2 = mla_test_fd(combine_loss, &p, p.w, dw, T * K, 1e-6, &s2);
    cr_expect(e1 < 1e-6 && s1 > 1e-3, "d eo worst rel err %.3e", e1);
    cr_expect(e2 < 1e-6 && s2 > 1e-3, "dw worst rel err %.3e", e2);
    mla_test_report("combine backward: d eo, dw vs central differences", fmax(e1, e2));

    /* chained: y -> dw -> router logits */
    double dlogits[T * E], s3;
    ls_moe_route_backward_f64(dlogits, NULL, dw, p.s, p.idx0, T, E, K, 2.5);
    double e3 = mla_test_fd(chain_loss, &p, p.logits, dlogits, T * E, 1e-6, &s3);
    cr_expect(!p.route_changed, "a finite-difference step changed the routing");
    cr_expect(e3 < 1e-6 && s3 > 1e-3, "chained dlogits worst rel err %.3e", e3);
    mla_test_report("combine+route backward: dlogits vs central diff", e3);
}

Test(kernels_mla_moe, dispatch_layout)
{
    static moe_prob p;
    moe_make(&p, 29);
    cr_expect(p.offsets[0] == 0 && p.offsets[E] == T * K, "offsets cover T*k rows");
    size_t seen[T * K] = {0};
    for (size_t e = 0; e < E; e++) {
        size_t prev_tok = 0;
        for (size_t i = p.offsets[e]; i < p.offsets[e + 1]; i++) {
            size_t slot = p.slot_of_row[i], tok = slot / K;
            cr_expect(p.idx[slot] == (int32_t)e, "row %zu in expert %zu's range holds expert %d",
                      i, e, p.idx[slot]);
            cr_expect(i == p.offsets[e] || tok > prev_tok, "tokens ascend within an expert");
            cr_expect(p.row_of_slot[slot] == i, "row_of_slot inverts slot_of_row");
            prev_tok = tok;
            seen[slot]++;
        }
    }
    for (size_t i = 0; i < T * K; i++) cr_expect(seen[i] == 1, "slot %zu placed %zu times", i, seen[i]);

    /* gather and scatter_add are adjoint: <gather(x), g> = <x, scatter(g)> */
    double x[T * D], xg[T * K * D], g[T * K * D], dx[T * D] = {0};
    mla_test_fill(x, T * D, 1);
    mla_test_fill(g, T * K * D, 1);
    ls_moe_gather_f64(xg, x, p.slot_of_row, T, K, D);
    ls_moe_scatter_add_f64(dx, g, p.slot_of_row, T, K, D);
    double a = 0, b = 0;
    for (size_t i = 0; i < T * K * D; i++) a += xg[i] * g[i];
    for (size_t i = 0; i < T * D; i++) b += x[i] * dx[i];
    cr_expect(fabs(a - b) < 1e-12, "adjoint: %g vs %g", a, b);
    for (size_t i = 0; i < T * K; i++)
        cr_expect(memcmp(xg + i * D, x + (p.slot_of_row[i] / K) * D, D * sizeof *x) == 0, "gather");

    /* combine with shared aliasing y adds the experts to it */
    double y1[T * D], y2[T * D];
    ls_moe_combine_forward_f64(y1, p.eo, p.w, p.shared, p.row_of_slot, T, K, D);
    memcpy(y2, p.shared, sizeof y2);
    ls_moe_combine_forward_f64(y2, p.eo, p.w, y2, p.row_of_slot, T, K, D);
    cr_expect(memcmp(y1, y2, sizeof y1) == 0, "shared == y aliasing");
}
