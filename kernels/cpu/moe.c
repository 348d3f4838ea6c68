/* moe.c - MoE routing (sigmoid scores, group-limited top-k, normalised
 * weights) and its backward, the grouped token dispatch and the weighted
 * combine (docs/model.md §2.3).  See moe.h. */
#include "kernels/moe.h"
#include "kernels/decisions.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define MOE_WEIGHT_EPS 1e-20

static ls_real sigmoid(ls_real x)
{
    if (x >= 0) return 1 / (1 + exp(-x));
    ls_real e = exp(x);
    return e / (1 + e);
}

/* Index of the best entry of v [n] by the tie rule (largest value, lowest
 * index first), ignoring -INFINITY; n if there is none. */
static size_t argbest(const ls_real *v, size_t n)
{
    size_t b = n;
    for (size_t i = 0; i < n; i++)
        if (v[i] != -INFINITY && (b == n || v[i] > v[b])) b = i;
    return b;
}

size_t LS_K(ls_moe_route_workspace)(size_t E, size_t n_group) { return E + n_group; }

void LS_K(ls_moe_route_forward)(int32_t *idx, ls_real *w, ls_real *s,
                                const ls_real *logits, const ls_real *router_bias,
                                size_t T, size_t E, size_t n_group, size_t topk_group,
                                size_t k, ls_real rho, ls_real *workspace)
{
    assert(n_group >= 1 && E % n_group == 0);
    assert(topk_group >= 1 && topk_group <= n_group);
    const size_t gs = E / n_group;
    assert(k <= topk_group * gs);
    ls_real *sp = workspace, *gscore = workspace + E;
    for (size_t t = 0; t < T; t++) {
        ls_real *st = s + t * E;
        for (size_t e = 0; e < E; e++) {
            st[e] = sigmoid(logits[t * E + e]);
            sp[e] = st[e] + (router_bias ? router_bias[e] : 0);
        }
        /* group score: sum of the top-2 s' of the group */
        for (size_t g = 0; g < n_group; g++) {
            const ls_real *v = sp + g * gs;
            size_t a = argbest(v, gs);
            assert(a < gs);
            ls_real sum = v[a];
            if (gs > 1) {
                size_t b = (a == 0) ? 1 : 0;
                for (size_t i = 0; i < gs; i++)
                    if (i != a && v[i] > v[b]) b = i;
                sum += v[b];
            }
            gscore[g] = sum;
        }
        /* keep the best topk_group groups: move them to -INF as they are
         * picked, then mask the experts of every group still finite */
        for (size_t j = 0; j < topk_group; j++) {
            size_t g = argbest(gscore, n_group);
            assert(g < n_group);
            gscore[g] = -INFINITY;
        }
        for (size_t g = 0; g < n_group; g++)
            if (gscore[g] != -INFINITY)
                for (size_t i = 0; i < gs; i++) sp[g * gs + i] = -INFINITY;
        /* top-k of the masked s' */
        ls_real sum = 0;
        for (size_t j = 0; j < k; j++) {
            size_t e = argbest(sp, E);
            assert(e < E);
            idx[t * k + j] = (int32_t)e;
            sp[e] = -INFINITY;
            sum += st[e];
        }
        const ls_real den = sum + (ls_real)MOE_WEIGHT_EPS;
        for (size_t j = 0; j < k; j++) w[t * k + j] = rho * st[idx[t * k + j]] / den;
    }
    ls_decisions_note(idx, T * k * sizeof *idx, T); /* the experts of each token (its kept groups' choice) */
}

void LS_K(ls_moe_route_backward)(ls_real *dlogits, ls_real *ds, const ls_real *dw,
                                 const ls_real *s, const int32_t *idx, size_t T,
                                 size_t E, size_t k, ls_real rho)
{
    memset(dlogits, 0, T * E * sizeof *dlogits);
    if (ds) memset(ds, 0, T * E * sizeof *ds);
    for (size_t t = 0; t < T; t++) {
        const ls_real *st = s + t * E;
        const int32_t *it = idx + t * k;
        const ls_real *g = dw + t * k;
        ls_real S = 0;
        for (size_t j = 0; j < k; j++) S += st[it[j]];
        S += (ls_real)MOE_WEIGHT_EPS;
        ls_real c = 0; /* sum_i dw_i s_i / S */
        for (size_t j = 0; j < k; j++) c += g[j] * st[it[j]] / S;
        for (size_t j = 0; j < k; j++) {
            const size_t e = (size_t)it[j];
            const ls_real dse = rho / S * (g[j] - c);
            if (ds) ds[t * E + e] = dse;
            dlogits[t * E + e] = dse * st[e] * (1 - st[e]);
        }
    }
}

void LS_K(ls_moe_dispatch)(size_t *offsets, size_t *slot_of_row, size_t *row_of_slot,
                           const int32_t *idx, size_t T, size_t E, size_t k)
{
    const size_t n = T * k;
    memset(offsets, 0, (E + 1) * sizeof *offsets);
    for (size_t i = 0; i < n; i++) {
        assert(idx[i] >= 0 && (size_t)idx[i] < E);
        offsets[(size_t)idx[i] + 1]++;
    }
    for (size_t e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    /* counting sort, stable in slot order (so tokens ascend within an expert);
     * offsets[e] runs as expert e's cursor and ends at its end */
    for (size_t i = 0; i < n; i++) {
        size_t row = offsets[idx[i]]++;
        slot_of_row[row] = i;
        row_of_slot[i] = row;
    }
    for (size_t e = E; e > 0; e--) offsets[e] = offsets[e - 1];
    offsets[0] = 0;
}

void LS_K(ls_moe_gather)(ls_real *xg, const ls_real *x, const size_t *slot_of_row,
                         size_t T, size_t k, size_t d)
{
    for (size_t i = 0; i < T * k; i++)
        memcpy(xg + i * d, x + (slot_of_row[i] / k) * d, d * sizeof *xg);
}

void LS_K(ls_moe_scatter_add)(ls_real *dx, const ls_real *dxg, const size_t *slot_of_row,
                              size_t T, size_t k, size_t d)
{
    for (size_t i = 0; i < T * k; i++) {
        ls_real *dst = dx + (slot_of_row[i] / k) * d;
        const ls_real *src = dxg + i * d;
        for (size_t c = 0; c < d; c++) dst[c] += src[c];
    }
}

void LS_K(ls_moe_combine_forward)(ls_real *y, const ls_real *eo, const ls_real *w,
                                  const ls_real *shared, const size_t *row_of_slot,
                                  size_t T, size_t k, size_t d)
{
    for (size_t t = 0; t < T; t++) {
        for (size_t c = 0; c < d; c++) {
            ls_real acc = 0;
            for (size_t j = 0; j < k; j++)
                acc += w[t * k + j] * eo[row_of_slot[t * k + j] * d + c];
            y[t * d + c] = shared ? acc + shared[t * d + c] : acc;
        }
    }
}

void LS_K(ls_moe_combine_backward)(ls_real *deo, ls_real *dw, const ls_real *dy,
                                   const ls_real *eo, const ls_real *w,
                                   const size_t *row_of_slot, size_t T, size_t k,
                                   size_t d)
{
    for (size_t t = 0; t < T; t++) {
        const ls_real *g = dy + t * d;
        for (size_t j = 0; j < k; j++) {
            const size_t row = row_of_slot[t * k + j];
            if (deo)
                for (size_t c = 0; c < d; c++) deo[row * d + c] = w[t * k + j] * g[c];
            if (dw) {
                ls_real acc = 0;
                for (size_t c = 0; c < d; c++) acc += g[c] * eo[row * d + c];
                dw[t * k + j] = acc;
            }
        }
    }
}
