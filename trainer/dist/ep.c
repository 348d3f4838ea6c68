/* ep.c - expert parallelism's table (ep.h): the process-wide context, which
 * experts are remote, and the gathers that keep every rank's table whole. */
#include "trainer/dist/ep.h"

#include <string.h>

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

void LS_K(ls_ep_mark)(ls_params *p, const ls_ep *ep) {
    int E = p->cfg.n_experts;
    for (size_t i = 0; i < p->n; i++) {
        int e = ls_ep_expert_of(p->t[i].name, NULL);
        p->t[i].ep_remote = ep && ep->size > 1 && e >= 0 && ls_ep_owner(e, E, ep->size) != ep->rank;
    }
}

ls_status LS_K(ls_ep_gather)(const ls_ep *ep, ls_params *p, int what) {
    if (!ep || !ep->g || ep->size < 2) return LS_OK;
    int E = p->cfg.n_experts;
    ls_status st = LS_OK;
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        int layer = -1, e = ls_ep_expert_of(t->name, &layer);
        if (e < 0 || !t->trainable) continue;
        int root = ls_ep_owner(e, E, ep->size);
        if (what & LS_EP_GRADS) st = ls_group_broadcast(ep->g, t->g, t->numel, DT, root, "ep_grad_gather", layer);
        if (st == LS_OK && (what & LS_EP_STATE)) {
            ls_real *bufs[3] = {t->w, t->m, t->v};
            for (int k = 0; st == LS_OK && k < 3; k++)
                st = ls_group_broadcast(ep->g, bufs[k], t->numel, DT, root, "ep_param_gather", layer);
        }
    }
    return st;
}
