/* ep.c - expert parallelism's table (ep.h): the process-wide context, and
 * the gathers from the owners of what needs the whole table. */
#include "trainer/dist/ep.h"

#include <string.h>

#include "receipts/format/digest.h"
#include "trainer/base/mem_tracker.h"

#ifdef LS_REAL_F64
#define DT LS_TRACE_DTYPE_F64
#else
#define DT LS_TRACE_DTYPE_F32
#endif

static ls_ep g_ep;
static int g_on;

void LS_K(ls_ep_set)(const ls_ep *ep) {
    g_on = ep && ep->g && ep->size > 1;
    if (g_on) g_ep = *ep;
    else memset(&g_ep, 0, sizeof g_ep);
}

const ls_ep *LS_K(ls_ep_get)(void) { return g_on ? &g_ep : NULL; }

static int ep_on(const ls_ep *ep, const ls_params *p) { return ep && ep->g && ep->size > 1 && p->ep_size > 1; }

/* The owner of tensor t (an EP rank), -1 for a tensor that is not a routed expert's. */
static int owner_of(const ls_params *p, const ls_tensor *t) {
    int e = ls_param_expert_of(t->name, NULL);
    return e < 0 || !p->cfg.family->routed_experts ? -1 : ls_ep_owner(e, p->cfg.family->routed_experts(&p->cfg), p->ep_size);
}

ls_status LS_K(ls_ep_grad_sumsq)(const ls_ep *ep, const ls_params *p, double *out) {
    double *parts = ls_mem_alloc(LS_MEM_COMM, (p->n ? p->n : 1) * sizeof *parts);
    double *ex = ls_mem_alloc(LS_MEM_COMM, (p->n ? p->n : 1) * sizeof *ex);
    ls_status st = parts && ex ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK) {
        LS_K(ls_params_grad_sumsq_parts)(p, parts);
        if (ep_on(ep, p)) { /* the experts' sums: the owner's, zero elsewhere (x + 0 is x) */
            size_t k = 0;
            for (size_t i = 0; i < p->n; i++)
                if (p->t[i].trainable && owner_of(p, &p->t[i]) >= 0) ex[k++] = parts[i];
            st = ls_group_allreduce_sum(ep->g, ex, k, LS_TRACE_DTYPE_F64, "ep_grad_gather", -1);
            k = 0;
            for (size_t i = 0; st == LS_OK && i < p->n; i++)
                if (p->t[i].trainable && owner_of(p, &p->t[i]) >= 0) parts[i] = ex[k++];
        }
    }
    double s = 0;
    for (size_t i = 0; st == LS_OK && i < p->n; i++) s += parts[i]; /* table order, as ls_params_grad_sumsq */
    *out = s;
    ls_mem_free(parts);
    ls_mem_free(ex);
    return st;
}

ls_status LS_K(ls_ep_param_digests)(const ls_ep *ep, const ls_params *p, uint8_t *dg) {
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (t->trainable && !t->ep_remote) ls_digest_sha256(t->w, t->numel * sizeof(ls_real), dg + LS_DIGEST_SIZE * i);
    }
    if (!ep_on(ep, p)) return LS_OK;
    size_t k = 0; /* the trainable experts' digests, each rank's own filled (zero for the others') */
    for (size_t i = 0; i < p->n; i++) k += p->t[i].trainable && owner_of(p, &p->t[i]) >= 0;
    size_t nb = (k ? k : 1) * LS_DIGEST_SIZE;
    uint8_t *mine = ls_mem_alloc(LS_MEM_COMM, nb), *all = ls_mem_alloc(LS_MEM_COMM, nb * (size_t)ep->size);
    ls_status st = mine && all ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK) {
        memset(mine, 0, nb);
        k = 0;
        for (size_t i = 0; i < p->n; i++) {
            if (!p->t[i].trainable || owner_of(p, &p->t[i]) < 0) continue;
            if (!p->t[i].ep_remote) memcpy(mine + LS_DIGEST_SIZE * k, dg + LS_DIGEST_SIZE * i, LS_DIGEST_SIZE);
            k++;
        }
        st = ls_group_allgather(ep->g, mine, all, nb, LS_TRACE_DTYPE_U8, "ep_param_gather", -1);
    }
    k = 0;
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        int o = p->t[i].trainable ? owner_of(p, &p->t[i]) : -1;
        if (o < 0) continue;
        memcpy(dg + LS_DIGEST_SIZE * i, all + nb * (size_t)o + LS_DIGEST_SIZE * k, LS_DIGEST_SIZE);
        k++;
    }
    ls_mem_free(mine);
    ls_mem_free(all);
    return st;
}

/* Whether tensor t has slot k (params.h ls_params_slot, decided from the table alone, so that every EP
   rank decides alike for every expert). */
static int has_slot(const ls_params *p, const ls_tensor *t, int k) {
    switch (k) {
    case LS_SLOT_W: return 1;
    case LS_SLOT_REF: return p->obj.train_mode == LS_TRAIN_FULL && !t->is_adapter;
    default: return t->trainable;
    }
}

void LS_K(ls_ep_release)(ls_params *p) {
    if (!p || !p->ep_view) return;
    for (int k = 0; k < LS_SLOT_COUNT; k++) ls_mem_free(p->ep_view[p->n * LS_SLOT_COUNT + (size_t)k]);
    ls_mem_free(p->ep_view);
    p->ep_view = NULL;
}

ls_status LS_K(ls_ep_assemble)(const ls_ep *ep, ls_params *p, unsigned mask) {
    LS_K(ls_ep_release)(p);
    if (!ep_on(ep, p)) return LS_OK;
    size_t N = (size_t)ep->size;
    /* [n * slots] the remote tensors' slots, then the slots' receive buffers */
    ls_real **view = ls_mem_alloc(LS_MEM_COMM, (p->n + 1) * LS_SLOT_COUNT * sizeof *view);
    size_t *share = ls_mem_alloc(LS_MEM_COMM, N * sizeof *share);
    ls_real *send = NULL;
    ls_status st = view && share ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK) memset(view, 0, (p->n + 1) * LS_SLOT_COUNT * sizeof *view);
    for (int k = 0; st == LS_OK && k < LS_SLOT_COUNT; k++) {
        if (!(mask & LS_EP_SLOT(k))) continue;
        memset(share, 0, N * sizeof *share);
        for (size_t i = 0; i < p->n; i++) {
            int o = owner_of(p, &p->t[i]);
            if (o >= 0 && has_slot(p, &p->t[i], k)) share[o] += p->t[i].numel;
        }
        size_t per = share[0];
        for (size_t j = 1; j < N; j++)
            if (share[j] != per) st = LS_ERR_INTERNAL;
        if (st != LS_OK || per == 0) continue;
        ls_real *all = ls_mem_alloc(LS_MEM_COMM, per * N * sizeof(ls_real));
        send = ls_mem_alloc(LS_MEM_COMM, per * sizeof(ls_real));
        view[p->n * LS_SLOT_COUNT + (size_t)k] = all;
        if (!all || !send) st = LS_ERR_NOMEM;
        size_t off = 0; /* this rank's own experts' slot k, in table order */
        for (size_t i = 0; st == LS_OK && i < p->n; i++) {
            const ls_tensor *t = &p->t[i];
            if (owner_of(p, t) != ep->rank || !has_slot(p, t, k)) continue;
            const ls_real *src = LS_K(ls_params_slot)(p, i, (ls_param_slot)k);
            if (!src) {
                st = LS_ERR_INTERNAL;
                break;
            }
            memcpy(send + off, src, t->numel * sizeof(ls_real));
            off += t->numel;
        }
        if (st == LS_OK) st = ls_group_allgather(ep->g, send, all, per, DT, "ep_assemble", -1);
        ls_mem_free(send);
        send = NULL;
        size_t *at = share; /* each owner's offset in its block, in table order */
        memset(at, 0, N * sizeof *at);
        for (size_t i = 0; st == LS_OK && i < p->n; i++) {
            const ls_tensor *t = &p->t[i];
            int o = owner_of(p, t);
            if (o < 0 || !has_slot(p, t, k)) continue;
            if (t->ep_remote) view[i * LS_SLOT_COUNT + (size_t)k] = all + per * (size_t)o + at[o];
            at[o] += t->numel;
        }
    }
    ls_mem_free(share);
    p->ep_view = view;
    if (st != LS_OK) LS_K(ls_ep_release)(p);
    return st;
}
