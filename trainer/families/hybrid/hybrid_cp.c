/* hybrid_cp.c - context parallelism of the hybrid family (cp.h says what
 * crosses ranks when): the attention ring and the global composition, the
 * GDN state chains, the sharded capture and prompt backward.  The shared
 * driver (cp.c) owns the shards and finalize; this file is the family's
 * part of the context (ls_cp.fam_ctx). */
#include "trainer/families/hybrid/hybrid_cp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/attention.h"
#include "trainer/base/mem_tracker.h"

#include "trainer/model/real_bytes.h"
#ifdef LS_REAL_F64
#define DT LS_TRACE_DTYPE_F64
#else
#define DT LS_TRACE_DTYPE_F32
#endif

/* The hybrid part of a CP context: the shard geometry (copied from the
 * driver's ls_cp at init) and the family's buffers and callbacks. */
typedef struct {
    ls_comm_group *g;
    int rank, world;
    int64_t T, s0, s1, max_shard;
    ls_cp_faults faults;
    size_t H, Hkv, hd, row, gdn_n, tail_n;
    ls_real tau;
    ls_cp_attn merge, compose;
    ls_cp_remote remote;    /* the prompt's ring: fwd partials, bwd reverse ring */
    ls_real *rem_o, *rem_lse; /* the current attention layer's remote partial (the shard's rows) */
    ls_cp_hooks cap_hooks, bwd_hooks;
    unsigned char *gdn;    /* [n_layers]: 1 for a GDN layer (a chain), 0 for attention */
    ls_state dstart;       /* prompt backward: the gradient of the start state's GDN states */
    ls_state stale;        /* fault stale_start only: a copy of the last capture's start state */
    ls_state *cap_out;     /* the capture being run: its state_out (its cp_start receives rank r-1's states) */
    ls_state *bwd_dstate;  /* the prompt backward being run: its state gradient */
    int64_t pages_moved;    /* diagnostics */
} hcp;

static int64_t shard_len(const hcp *c, int r, int64_t *s0) {
    int64_t a, b;
    ls_cp_shard(c->T, c->world, r, &a, &b);
    if (s0) *s0 = a;
    return b - a;
}

/* ---- attention: the ring (prompt) -------------------------------------- */

/* A ring message: nk blocks of max_shard rows; the first two this rank's
 * K and V (its layer-l pages, in position order; padding zero), the others
 * zero (dK/dV accumulators). */
static ls_real *ring_msg(const hcp *c, const ls_layer_state *own, size_t nk) {
    size_t blk = (size_t)c->max_shard * c->row, off = 0;
    ls_real *m = ls_mem_alloc(LS_MEM_COMM, R(nk * blk));
    if (!m) return NULL;
    for (size_t i = 0; i < own->n_pages; i++) {
        memcpy(m + off * c->row, own->pages[i].k, R(own->pages[i].n * c->row));
        memcpy(m + blk + off * c->row, own->pages[i].v, R(own->pages[i].n * c->row));
        off += own->pages[i].n;
    }
    return m;
}

/* The remote partial: the shard's queries against every earlier rank's K/V,
 * passed around the ring (N-1 hops), merged chunk by chunk of queries. */
static ls_status ring_fwd(void *user, int layer, const ls_real *q, size_t T, int64_t pos0, size_t chunk,
                          const ls_state *own) {
    hcp *c = user;
    size_t blk = (size_t)c->max_shard * c->row, n = 2 * blk, H = c->H, hd = c->hd;
    ls_mem_free(c->rem_o);
    ls_mem_free(c->rem_lse);
    c->rem_o = ls_mem_alloc(LS_MEM_COMM, R(T * H * hd));
    c->rem_lse = ls_mem_alloc(LS_MEM_COMM, R(T * H));
    ls_real *snd = ring_msg(c, &own->ly[layer], 2), *rcv = ls_mem_alloc(LS_MEM_COMM, R(n));
    ls_real *o_p = ls_mem_alloc(LS_MEM_COMM, R(chunk * H * hd)), *l_p = ls_mem_alloc(LS_MEM_COMM, R(chunk * H));
    ls_status st = snd && rcv && o_p && l_p && c->rem_o && c->rem_lse ? LS_OK : LS_ERR_NOMEM;
    for (size_t i = 0; st == LS_OK && i < T * H; i++) c->rem_lse[i] = (ls_real)-INFINITY; /* no keys yet */
    int N = c->world, r = c->rank;
    for (int step = 1; st == LS_OK && step < N; step++) {
        st = ls_group_sendrecv(c->g, snd, (r + 1) % N, rcv, (r - 1 + N) % N, n, DT, "kv_ring", layer);
        int src = (r - step + N) % N;
        for (size_t t0 = 0; st == LS_OK && src < r && t0 < T; t0 += chunk) { /* causal: earlier ranks only */
            size_t m = T - t0 < chunk ? T - t0 : chunk;
            int64_t ks0, kn = shard_len(c, src, &ks0);
            LS_K(ls_attn_block_forward)(o_p, l_p, q + t0 * H * hd, rcv, rcv + blk, m, (size_t)kn, H, c->Hkv, hd,
                                        pos0 + (int64_t)t0, ks0, 1, c->tau);
            LS_K(ls_attn_merge_into)(c->rem_o + t0 * H * hd, c->rem_lse + t0 * H, o_p, l_p, m * H, hd);
        }
        ls_real *t = snd;
        snd = rcv;
        rcv = t;
    }
    ls_mem_free(snd);
    ls_mem_free(rcv);
    ls_mem_free(o_p);
    ls_mem_free(l_p);
    return st;
}

/* A chunk's attention takes in its rows of the remote partial. */
static ls_status merge_fwd(void *user, int layer, const ls_real *q, const ls_real *k_own, const ls_real *v_own,
                           size_t T, int64_t pos0, ls_real *o, ls_real *lse) {
    (void)layer, (void)q, (void)k_own, (void)v_own;
    hcp *c = user;
    size_t r0 = (size_t)(pos0 - c->s0);
    if (!c->rem_o || pos0 < c->s0 || pos0 + (int64_t)T > c->s1) return LS_ERR_INTERNAL;
    LS_K(ls_attn_merge_into)(o, lse, c->rem_o + r0 * c->H * c->hd, c->rem_lse + r0 * c->H, T * c->H, c->hd);
    return LS_OK;
}

/* The reverse ring: K, V, dK, dV travel together (N hops); each rank adds
 * its queries' part (chunk by chunk) into the blocks of earlier ranks and
 * the remote part of its dq; after N hops every block is home and its
 * accumulated dK/dV join the owner's. */
static ls_status ring_bwd(void *user, int layer, const ls_real *q, const ls_real *o, const ls_real *lse,
                          const ls_real *dout, size_t T, int64_t pos0, size_t chunk, const ls_state *own,
                          ls_real *dq, ls_real *dk_own, ls_real *dv_own) {
    hcp *c = user;
    size_t blk = (size_t)c->max_shard * c->row, n = 4 * blk, H = c->H, hd = c->hd;
    ls_real *snd = ring_msg(c, &own->ly[layer], 4), *rcv = ls_mem_alloc(LS_MEM_COMM, R(n));
    ls_status st = snd && rcv ? LS_OK : LS_ERR_NOMEM;
    int N = c->world, r = c->rank;
    if (st == LS_OK) memset(dq, 0, R(T * H * hd));
    for (int step = 1; st == LS_OK && step <= N; step++) {
        st = ls_group_sendrecv(c->g, snd, (r + 1) % N, rcv, (r - 1 + N) % N, n, DT, "dkv_ring", layer);
        int src = (r - step + N) % N;
        for (size_t t0 = 0; st == LS_OK && step < N && src < r && t0 < T; t0 += chunk) {
            size_t m = T - t0 < chunk ? T - t0 : chunk, qo = t0 * H * hd;
            int64_t ks0, kn = shard_len(c, src, &ks0);
            LS_K(ls_attn_block_backward)(dq + qo, rcv + 2 * blk, rcv + 3 * blk, dout + qo, q + qo, rcv, rcv + blk,
                                         o + qo, lse + t0 * H, m, (size_t)kn, H, c->Hkv, hd, pos0 + (int64_t)t0, ks0,
                                         1, c->tau);
        }
        ls_real *t = snd;
        snd = rcv;
        rcv = t;
    }
    if (st == LS_OK) /* home: the later ranks' part of this rank's dK/dV */
        for (size_t i = 0; i < T * c->row; i++) {
            dk_own[i] += snd[2 * blk + i];
            dv_own[i] += snd[3 * blk + i];
        }
    ls_mem_free(snd);
    ls_mem_free(rcv);
    return st;
}

/* ---- attention: the global composition (responses) ---------------------- */

static ls_status compose_fwd(void *user, int layer, const ls_real *q, const ls_real *k_own, const ls_real *v_own,
                             size_t T, int64_t pos0, ls_real *o, ls_real *lse) {
    (void)q, (void)k_own, (void)v_own, (void)pos0;
    hcp *c = user;
    size_t n = T * c->H, hd = c->hd;
    ls_real *m = ls_mem_alloc(LS_MEM_COMM, R(n)), *a = ls_mem_alloc(LS_MEM_COMM, R(n));
    ls_status st = m && a ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK) {
        memcpy(m, lse, R(n));
        st = ls_group_allreduce_max(c->g, m, n, DT, "lse_max", layer);
    }
    if (st == LS_OK) {
        for (size_t i = 0; i < n; i++) { /* this rank's share e^{l_r - m} (0 without keys) */
            ls_real w = isinf(lse[i]) ? 0 : (ls_real)exp((double)(lse[i] - m[i]));
            a[i] = w;
            for (size_t j = 0; j < hd; j++) o[i * hd + j] *= w;
        }
        st = ls_group_allreduce_sum(c->g, a, n, DT, "lse_sum", layer);
    }
    if (st == LS_OK) st = ls_group_allreduce_sum(c->g, o, n * hd, DT, "out_sum", layer);
    if (st == LS_OK)
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < hd; j++) o[i * hd + j] /= a[i];
            lse[i] = m[i] + (ls_real)log((double)a[i]);
        }
    ls_mem_free(m);
    ls_mem_free(a);
    return st;
}

static ls_status compose_bwd(void *user, int layer, const ls_real *q, const ls_real *k_own, const ls_real *v_own,
                             const ls_real *o, const ls_real *lse, const ls_real *dout, size_t T, int64_t pos0,
                             ls_real *dq, ls_real *dk_own, ls_real *dv_own) {
    (void)q, (void)k_own, (void)v_own, (void)o, (void)lse, (void)dout, (void)pos0;
    hcp *c = user;
    ls_status st = ls_group_allreduce_sum(c->g, dq, T * c->H * c->hd, DT, "dq_sum", layer);
    if (st == LS_OK && !c->faults.skip_dkv_reduce) {
        st = ls_group_allreduce_sum(c->g, dk_own, T * c->row, DT, "dkv_sum", layer);
        if (st == LS_OK) st = ls_group_allreduce_sum(c->g, dv_own, T * c->row, DT, "dkv_sum", layer);
    }
    return st;
}

/* ---- GDN state chains ----------------------------------------------------- */

static void pack_state(const hcp *c, ls_real *buf, const ls_layer_state *s) {
    memcpy(buf, s->fixed0, R(c->tail_n));
    memcpy(buf + c->tail_n, s->fixed1, R(c->gdn_n - c->tail_n));
}

static void unpack_state(const hcp *c, ls_layer_state *s, const ls_real *buf) {
    memcpy(s->fixed0, buf, R(c->tail_n));
    memcpy(s->fixed1, buf + c->tail_n, R(c->gdn_n - c->tail_n));
}

/* One hop of a chain: send s_from to rank `to`, receive into s_into from
 * rank `from` (-1: none); s_into is written only when something arrived. */
static ls_status chain(hcp *c, int layer, const ls_layer_state *s_from, int to, ls_layer_state *s_into, int from,
                       const char *purpose) {
    ls_real *snd = ls_mem_alloc(LS_MEM_COMM, R(c->gdn_n)), *rcv = ls_mem_alloc(LS_MEM_COMM, R(c->gdn_n));
    ls_status st = snd && rcv ? LS_OK : LS_ERR_NOMEM;
    if (st == LS_OK && to >= 0) pack_state(c, snd, s_from);
    if (st == LS_OK) st = ls_group_sendrecv(c->g, snd, to, rcv, from, c->gdn_n, DT, purpose, layer);
    if (st == LS_OK && from >= 0) unpack_state(c, s_into, rcv);
    ls_mem_free(snd);
    ls_mem_free(rcv);
    return st;
}

/* GDN layers carry a tail and a state; attention layers pass no chain. */
static int is_gdn(const hcp *c, int l) { return c->gdn[l]; }

static ls_status cap_pre(void *user, int l) { /* the state from rank r-1 */
    hcp *c = user;
    if (!is_gdn(c, l)) return LS_OK;
    return chain(c, l, NULL, -1, &c->cap_out->cp_start->ly[l], c->rank > 0 ? c->rank - 1 : -1, "state_handoff");
}

static ls_status cap_post(void *user, int l) { /* this shard's end state to rank r+1 */
    hcp *c = user;
    if (!is_gdn(c, l)) return LS_OK;
    return chain(c, l, &c->cap_out->ly[l], c->rank + 1 < c->world ? c->rank + 1 : -1, NULL, -1, "state_handoff");
}

static ls_status bwd_pre(void *user, int l) { /* the gradient of this shard's end state from rank r+1 */
    hcp *c = user;
    if (!is_gdn(c, l)) return LS_OK;
    return chain(c, l, NULL, -1, &c->bwd_dstate->ly[l], c->rank + 1 < c->world ? c->rank + 1 : -1,
                 "state_grad_handoff");
}

static ls_status bwd_post(void *user, int l) { /* the gradient of its start state to rank r-1 */
    hcp *c = user;
    if (!is_gdn(c, l)) return LS_OK;
    return chain(c, l, &c->dstart.ly[l], c->rank > 0 ? c->rank - 1 : -1, NULL, -1, "state_grad_handoff");
}

ls_status LS_K(ls_hybrid_cp_init)(ls_cp *base, const ls_params *p) {
    hcp *c = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *c); /* metadata */
    if (!c) return LS_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    base->fam_ctx = c;
    const ls_hybrid_keys *m = ls_hybrid_keys_of(&p->cfg);
    if (!(c->gdn = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)(p->cfg.n_layers > 0 ? p->cfg.n_layers : 1)))) return LS_ERR_NOMEM;
    for (int l = 0; l < p->cfg.n_layers; l++) c->gdn[l] = !ls_hybrid_layers(p)[l].is_attn;
    c->g = base->g;
    c->rank = base->rank;
    c->world = base->world;
    c->T = base->T;
    c->s0 = base->s0;
    c->s1 = base->s1;
    c->max_shard = base->max_shard;
    c->faults = base->faults;
    c->H = (size_t)m->attn_heads;
    c->Hkv = (size_t)m->attn_kv_heads;
    c->hd = (size_t)m->head_dim;
    c->row = c->Hkv * c->hd;
    c->tau = (ls_real)(1.0 / sqrt((double)c->hd));
    size_t C = 2 * (size_t)m->gdn_hk * (size_t)m->gdn_dk + (size_t)m->gdn_hv * (size_t)m->gdn_dv;
    c->tail_n = (size_t)(m->conv_kernel - 1) * C;
    c->gdn_n = c->tail_n + (size_t)m->gdn_hv * (size_t)m->gdn_dk * (size_t)m->gdn_dv;
    c->merge = (ls_cp_attn){.user = c, .own_keys = 1, .fwd = merge_fwd};
    c->remote = (ls_cp_remote){.user = c, .merge = &c->merge, .fwd = ring_fwd, .bwd = ring_bwd};
    c->compose = (ls_cp_attn){.user = c, .own_keys = c->rank == c->world - 1, .fwd = compose_fwd, .bwd = compose_bwd};
    c->cap_hooks = (ls_cp_hooks){.user = c, .pre = cap_pre, .post = cap_post};
    c->bwd_hooks = (ls_cp_hooks){.user = c, .pre = bwd_pre, .post = bwd_post};
    return LS_OK;
}

void LS_K(ls_hybrid_cp_free)(ls_cp *base) {
    hcp *c = base ? base->fam_ctx : NULL;
    if (!c) return;
    ls_mem_free(c->rem_o);
    ls_mem_free(c->rem_lse);
    c->rem_o = c->rem_lse = NULL;
    LS_K(ls_hybrid_state_free)(&c->dstart);
    LS_K(ls_hybrid_state_free)(&c->stale);
    ls_mem_free(c->gdn);
    ls_mem_free(c);
    base->fam_ctx = NULL;
}

ls_status LS_K(ls_hybrid_cp_capture)(ls_cp *base, const ls_params *q, const int32_t *prompt, size_t page_size,
                                     size_t chunk,
                                     ls_state *ps, ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook,
                                     void *hook_user) {
    hcp *c = base->fam_ctx;
    int L = q->cfg.n_layers;
    int local = c->faults.local_attention;
    /* the shard's start state belongs to the state captured (ps->cp_start), not to the context: a second
       capture (the reference's, kept beside the policy's) must not replace the one the prompt backward of
       the first differentiates */
    ls_status st = LS_K(ls_hybrid_state_init)(ps, q, page_size, cat);
    if (st != LS_OK) return st;
    if (!(ps->cp_start = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *ps->cp_start))) { /* metadata */
        LS_K(ls_hybrid_state_free)(ps);
        return LS_ERR_NOMEM;
    }
    if ((st = LS_K(ls_hybrid_state_init)(ps->cp_start, q, page_size, LS_MEM_CHECKPOINT)) != LS_OK) {
        LS_K(ls_hybrid_state_free)(ps);
        return st;
    }
    c->cap_out = ps;
    st = LS_K(ls_shard_forward)(q, prompt + c->s0, (size_t)(c->s1 - c->s0), c->s0, chunk, ps->cp_start, ps,
                                checkpoints,
                                local ? NULL : &c->remote, &c->cap_hooks, hook, hook_user);
    /* every rank reads the global final GDN state: rank N-1's */
    ls_real *buf = ls_mem_alloc(LS_MEM_COMM, R(c->gdn_n));
    if (st == LS_OK && !buf) st = LS_ERR_NOMEM;
    for (int l = 0; st == LS_OK && l < L; l++) {
        if (!ps->ly[l].fixed0) {
            ps->ly[l].cp = local ? NULL : &c->compose;
            continue;
        }
        pack_state(c, buf, &ps->ly[l]);
        st = ls_group_broadcast(c->g, buf, c->gdn_n, DT, c->world - 1, "state_broadcast", l);
        if (st == LS_OK) unpack_state(c, &ps->ly[l], buf);
    }
    ls_mem_free(buf);
    c->cap_out = NULL;
    ps->n_pos = c->T; /* responses start after the whole prompt */
    if (st == LS_OK && c->faults.stale_start) { /* the bug as it was: the context keeps the last capture's */
        LS_K(ls_hybrid_state_free)(&c->stale);
        st = LS_K(ls_hybrid_state_fork)(&c->stale, ps->cp_start, LS_MEM_CHECKPOINT);
    }
    if (st != LS_OK) LS_K(ls_hybrid_state_free)(ps);
    return st;
}

ls_status LS_K(ls_hybrid_cp_prompt_backward)(ls_cp *base, const ls_params *p, const int32_t *prompt, size_t chunk,
                                             ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                             ls_layer_hook hook, void *hook_user) {
    hcp *c = base->fam_ctx;
    const ls_state *start = c->faults.stale_start && c->stale.ly ? &c->stale : ps->cp_start;
    if (!start) return LS_ERR_INTERNAL; /* not a state this context's capture wrote */
    LS_K(ls_hybrid_state_free)(&c->dstart);
    ls_status st = LS_K(ls_hybrid_state_grad_like)(&c->dstart, start, LS_MEM_PROMPT_GRAD);
    if (st != LS_OK) return st;
    c->bwd_dstate = dps;
    int remote = !c->faults.local_attention; /* rank 0 still sends its keys around the reverse ring */
    ls_prompt_cp pc = {.pos0 = c->s0, .start = start, .dstart = &c->dstart, .hooks = &c->bwd_hooks,
                       .remote = remote ? &c->remote : NULL};
    st = LS_K(ls_prompt_backward)(p, prompt + c->s0, (size_t)(c->s1 - c->s0), chunk, checkpoints, ps, dps,
                                  LS_MEM_SCRATCH, hook, hook_user, &pc);
    c->bwd_dstate = NULL;
    LS_K(ls_hybrid_state_free)(&c->dstart);
    return st;
}

