/* replay_chunk.c - a response branch replayed in chunks (replay_chunk.h). */
#include "trainer/step/replay_chunk.h"

#include <stdio.h>
#include <string.h>

#include "kernels/decisions.h"
#include "trainer/base/coll_memo.h"

#include "trainer/model/real_bytes.h"

/* The chunks' layer observations, summed per (layer, direction) and reported
 * once per branch (index 0 the embedding, n_layers + 1 the head). */
typedef struct {
    size_t tokens;
    int64_t wall_ns;
    double sumsq;
    int seen;
} obs_sum;

typedef struct {
    int n_layers;
    obs_sum *o; /* [n_layers + 2][2] */
    ls_layer_hook hook;
    void *hook_user;
} obs_acc;

static void obs_add(void *user, int layer, int dir, size_t tokens, int64_t wall_ns, double out_norm) {
    obs_acc *a = user;
    if (layer < -1 || layer > a->n_layers || dir < 0 || dir > 1) return;
    obs_sum *o = &a->o[(size_t)(layer + 1) * 2 + (size_t)dir];
    o->tokens += tokens;
    o->wall_ns += wall_ns;
    o->sumsq += out_norm * out_norm;
    o->seen = 1;
}

/* The summed observations of one direction, in the order one segment reports them. */
static void obs_flush(obs_acc *a, int dir) {
    int n = a->n_layers;
    for (int i = 0; i < n + 2; i++) {
        int layer = dir == 0 ? i - 1 : n - i;
        obs_sum *o = &a->o[(size_t)(layer + 1) * 2 + (size_t)dir];
        if (o->seen && a->hook) a->hook(a->hook_user, layer, dir, o->tokens, o->wall_ns, sqrt(o->sumsq));
        memset(o, 0, sizeof *o);
    }
}

struct ls_replay_chunks {
    const ls_params *p;
    const int32_t *in, *targets;
    size_t T, chunk, K;
    int64_t pos0;
    const ls_real *logp; /* the forward's, for the recompute's check */
    ls_state run;        /* a fork of ps with the response's rows appended chunk by chunk */
    ls_state *snap;      /* [K] a fork of run at chunk k's start: its context */
    size_t *first;       /* [K + 1][n_layers] run's page count per layer at chunk k's start (K: the end; 0: the
                            prompt's pages) */
    ls_decisions *dec;   /* [K] each chunk's decisions in the forward */
    ls_coll_memo *memo;  /* [K] each chunk's collectives (CP) */
    ls_arena memo_arena;
    obs_acc obs;         /* the chunks' layer observations */
    size_t tape_peak;    /* the largest chunk tape */
};

static size_t chunk_len(const ls_replay_chunks *r, size_t k) {
    size_t t0 = k * r->chunk;
    return r->T - t0 < r->chunk ? r->T - t0 : r->chunk;
}

void LS_K(ls_replay_chunks_free)(ls_replay_chunks *r) {
    if (!r) return;
    for (size_t k = 0; r->snap && k < r->K; k++) LS_K(ls_state_free)(&r->snap[k]);
    LS_K(ls_state_free)(&r->run);
    ls_arena_free(&r->memo_arena);
    ls_mem_free(r->snap);
    ls_mem_free(r->first);
    ls_mem_free(r->dec);
    ls_mem_free(r->memo);
    ls_mem_free(r->obs.o);
    ls_mem_free(r);
}

ls_status LS_K(ls_replay_chunks_forward)(const ls_params *p, const ls_state *ps, const int32_t *in, size_t T,
                                         int64_t pos0, const int32_t *targets, size_t chunk, ls_real *logp,
                                         ls_layer_hook hook, void *hook_user, ls_replay_chunks **out) {
    *out = NULL;
    if (!ps || !in || !targets || !logp || T == 0) return LS_ERR_ARG;
    int L = p->cfg.n_layers;
    ls_replay_chunks *r = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *r);
    if (!r) return LS_ERR_NOMEM;
    memset(r, 0, sizeof *r);
    r->p = p;
    r->in = in;
    r->targets = targets;
    r->T = T;
    r->chunk = chunk == 0 || chunk > T ? T : chunk;
    r->K = (T + r->chunk - 1) / r->chunk;
    r->pos0 = pos0;
    r->logp = logp;
    r->obs = (obs_acc){.n_layers = L, .hook = hook, .hook_user = hook_user};
    ls_arena_init(&r->memo_arena, LS_MEM_BRANCH, 0);
    /* metadata (LS_MEM_SCRATCH, as a state's page tables) */
    r->snap = ls_mem_alloc(LS_MEM_SCRATCH, r->K * sizeof *r->snap);
    r->first = ls_mem_alloc(LS_MEM_SCRATCH, (r->K + 1) * (size_t)L * sizeof *r->first);
    r->dec = ls_mem_alloc(LS_MEM_SCRATCH, r->K * sizeof *r->dec);
    r->memo = ls_mem_alloc(LS_MEM_SCRATCH, r->K * sizeof *r->memo);
    r->obs.o = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)(L + 2) * 2 * sizeof *r->obs.o);
    ls_status st = LS_ERR_NOMEM;
    if (!r->snap || !r->first || !r->dec || !r->memo || !r->obs.o) goto fail;
    memset(r->snap, 0, r->K * sizeof *r->snap);
    memset(r->obs.o, 0, (size_t)(L + 2) * 2 * sizeof *r->obs.o);
    if ((st = ps->fam->state_fork(&r->run, ps, LS_MEM_BRANCH)) != LS_OK) goto fail;
    for (size_t k = 0; k < r->K && st == LS_OK; k++) {
        size_t t0 = k * r->chunk, n = chunk_len(r, k);
        for (int l = 0; l < L; l++) r->first[k * (size_t)L + (size_t)l] = r->run.ly[l].n_pages;
        if ((st = ps->fam->state_fork(&r->snap[k], &r->run, LS_MEM_BRANCH)) != LS_OK) break;
        ls_seg_io io = {.tokens = in + t0, .T = n, .pos0 = pos0 + (int64_t)t0, .ctx = &r->run,
                        .state_out = &r->run, .targets = targets + t0, .logp = logp + t0, .hook = obs_add,
                        .hook_user = &r->obs};
        ls_coll_memo_init(&r->memo[k], &r->memo_arena);
        ls_decisions *outer = ls_decisions_begin(&r->dec[k]);
        ls_coll_memo *prev = ls_coll_memo_use(&r->memo[k], LS_COLL_MEMO_RECORD);
        st = p->fam->segment_forward(p, &io);
        ls_coll_memo_restore(prev);
        ls_decisions_end(outer, &r->dec[k]); /* the run's ledger holds the forward's decisions once */
        if (st == LS_OK) st = r->memo[k].st;
    }
    for (int l = 0; l < L; l++) r->first[r->K * (size_t)L + (size_t)l] = r->run.ly[l].n_pages;
    if (st != LS_OK) goto fail;
    obs_flush(&r->obs, 0);
    *out = r;
    return LS_OK;
fail:
    LS_K(ls_replay_chunks_free)(r);
    return st;
}

size_t LS_K(ls_replay_chunks_bytes)(const ls_replay_chunks *r) {
    size_t b = r->tape_peak + r->memo_arena.used_bytes + LS_K(ls_state_bytes)(&r->run);
    for (size_t k = 0; k < r->K; k++) b += LS_K(ls_state_bytes)(&r->snap[k]);
    return b;
}

/* An empty view of src's layers: each layer's page table sized for src's pages (LS_MEM_SCRATCH, the only
 * thing the view owns), its CP context; the caller fills the pages and fixed buffers it shows. */
static ls_status view_init(ls_state *v, const ls_state *src, int L) {
    memset(v, 0, sizeof *v);
    v->fam = src->fam;
    v->n_layers = L;
    v->n_pos = src->n_pos;
    v->page_size = src->page_size;
    v->cat = LS_MEM_BRANCH;
    v->ly = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)L * sizeof *v->ly);
    if (!v->ly) return LS_ERR_NOMEM;
    memset(v->ly, 0, (size_t)L * sizeof *v->ly);
    for (int l = 0; l < L; l++) {
        size_t n = src->ly[l].n_pages;
        v->ly[l].cp = src->ly[l].cp;
        if (!n) continue;
        v->ly[l].pages = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof *v->ly[l].pages);
        if (!v->ly[l].pages) return LS_ERR_NOMEM;
        v->ly[l].cap_pages = n;
    }
    return LS_OK;
}

static void view_free(ls_state *v) {
    for (int l = 0; v->ly && l < v->n_layers; l++) ls_mem_free(v->ly[l].pages);
    ls_mem_free(v->ly);
    memset(v, 0, sizeof *v);
}

/* The gradient of the fixed state (zeroed, owned: a family's grad_like of a page-less view of run). */
static ls_status fixed_grad(ls_state *g, const ls_state *run, int L) {
    ls_state v;
    ls_status st = view_init(&v, run, L);
    if (st == LS_OK) {
        for (int l = 0; l < L; l++) {
            v.ly[l].fixed0 = run->ly[l].fixed0;
            v.ly[l].fixed1 = run->ly[l].fixed1;
        }
        st = run->fam->state_grad_like(g, &v, LS_MEM_BRANCH);
    }
    view_free(&v);
    return st;
}

static void fixed_zero(ls_state *g) {
    for (int l = 0; l < g->n_layers; l++) {
        if (g->ly[l].fixed0) memset(g->ly[l].fixed0, 0, ls_mem_size(g->ly[l].fixed0));
        if (g->ly[l].fixed1) memset(g->ly[l].fixed1, 0, ls_mem_size(g->ly[l].fixed1));
    }
}

/* Chunk k taped again from its context, held to the forward: its collectives from the memo, its decisions
 * and log-probs the forward's. */
static ls_status retape(ls_replay_chunks *r, size_t k, ls_seg_tape **tape) {
    const ls_params *p = r->p;
    size_t t0 = k * r->chunk, n = chunk_len(r, k);
    ls_real *lp = ls_mem_alloc(LS_MEM_BRANCH, R(n));
    if (!lp) return LS_ERR_NOMEM;
    ls_seg_io io = {.tokens = r->in + t0, .T = n, .pos0 = r->pos0 + (int64_t)t0, .ctx = &r->snap[k],
                    .targets = r->targets + t0, .logp = lp, .tape = tape, .tape_cat = LS_MEM_BRANCH};
    ls_decisions again, *outer = ls_decisions_begin(&again);
    ls_coll_memo *prev = ls_coll_memo_use(&r->memo[k], LS_COLL_MEMO_REPLAY);
    ls_status st = p->fam->segment_forward(p, &io);
    ls_coll_memo_restore(prev);
    ls_decisions_use(outer);
    if (st == LS_OK && (st = ls_coll_memo_finish(&r->memo[k])) != LS_OK)
        fprintf(stderr, "chunked replay: chunk %zu: %s\n", k, r->memo[k].err);
    if (st == LS_OK && !ls_decisions_equal(&again, &r->dec[k])) {
        fprintf(stderr, "chunked replay: chunk %zu decided otherwise when taped again (%llu decisions, digest %016llx; "
                        "the forward's: %llu, %016llx)\n",
                k, (unsigned long long)again.count, (unsigned long long)again.digest,
                (unsigned long long)r->dec[k].count, (unsigned long long)r->dec[k].digest);
        st = LS_ERR_INTERNAL;
    }
    if (st == LS_OK && memcmp(lp, r->logp + t0, R(n)) != 0) {
        fprintf(stderr, "chunked replay: chunk %zu's log-probs differ when taped again\n", k);
        st = LS_ERR_INTERNAL;
    }
    ls_mem_free(lp);
    return st;
}

ls_status LS_K(ls_replay_chunks_backward)(ls_replay_chunks *r, const ls_real *dlogp, ls_state *dps) {
    const ls_params *p = r->p;
    int L = p->cfg.n_layers;
    ls_state resp, ga, gb, dctx, dout, *g_after = &ga, *g_before = &gb;
    memset(&resp, 0, sizeof resp);
    memset(&ga, 0, sizeof ga);
    memset(&gb, 0, sizeof gb);
    memset(&dctx, 0, sizeof dctx);
    memset(&dout, 0, sizeof dout);
    const size_t *np0 = r->first; /* the prompt's pages per layer: chunk 0's start */
    if (dps)
        for (int l = 0; l < L; l++)
            if (dps->ly[l].n_pages != np0[l]) return LS_ERR_INTERNAL; /* dps has the prompt state's pages */
    /* resp: the gradient of the response's own rows (a grad_like of the view of run's pages after the prompt's) */
    ls_state rv;
    ls_status st = view_init(&rv, &r->run, L);
    for (int l = 0; st == LS_OK && l < L; l++) {
        ls_layer_state *v = &rv.ly[l];
        v->n_pages = r->run.ly[l].n_pages - np0[l];
        if (v->n_pages) memcpy(v->pages, r->run.ly[l].pages + np0[l], v->n_pages * sizeof *v->pages);
    }
    if (st == LS_OK) st = r->run.fam->state_grad_like(&resp, &rv, LS_MEM_BRANCH);
    view_free(&rv);
    if (st == LS_OK) st = fixed_grad(&ga, &r->run, L);
    if (st == LS_OK) st = fixed_grad(&gb, &r->run, L);
    if (st == LS_OK) st = view_init(&dctx, &r->run, L);
    if (st == LS_OK) st = view_init(&dout, &r->run, L);
    int have_after = 0; /* g_after holds the gradient of the fixed state after chunk k (none after the last) */
    for (size_t k = r->K; st == LS_OK && k-- > 0;) {
        size_t t0 = k * r->chunk;
        const size_t *lo = r->first + k * (size_t)L, *hi = r->first + (k + 1) * (size_t)L;
        for (int l = 0; l < L; l++) { /* dout: the rows chunk k appended and the fixed state after it */
            ls_layer_state *o = &dout.ly[l];
            o->n_pages = hi[l] - lo[l];
            if (o->n_pages) memcpy(o->pages, resp.ly[l].pages + (lo[l] - np0[l]), o->n_pages * sizeof *o->pages);
            o->fixed0 = have_after ? g_after->ly[l].fixed0 : NULL;
            o->fixed1 = have_after ? g_after->ly[l].fixed1 : NULL;
        }
        /* dctx: the context's gradient; chunk 0's context is the prompt's own (dps, or nothing when detached) */
        ls_state *dc = dps;
        if (k > 0) {
            fixed_zero(g_before);
            for (int l = 0; l < L; l++) {
                ls_layer_state *c = &dctx.ly[l];
                c->n_pages = lo[l];
                for (size_t i = 0; i < np0[l]; i++)
                    c->pages[i] = dps ? dps->ly[l].pages[i]
                                      : (ls_kv_page){.n = r->run.ly[l].pages[i].n, .pos0 = r->run.ly[l].pages[i].pos0};
                if (lo[l] > np0[l])
                    memcpy(c->pages + np0[l], resp.ly[l].pages, (lo[l] - np0[l]) * sizeof *c->pages);
                c->fixed0 = g_before->ly[l].fixed0;
                c->fixed1 = g_before->ly[l].fixed1;
            }
            dc = &dctx;
        }
        ls_seg_tape *tape = NULL;
        st = retape(r, k, &tape);
        if (st == LS_OK) {
            size_t tb = p->fam->tape_bytes(tape);
            if (tb > r->tape_peak) r->tape_peak = tb;
            st = p->fam->segment_backward(p, tape, dlogp + t0, dc, &dout, obs_add, &r->obs);
        }
        if (tape) p->fam->tape_free(tape);
        if (k > 0) { /* what chunk k handed its context's fixed state is what the chunk before it left */
            ls_state *t = g_after;
            g_after = g_before;
            g_before = t;
            have_after = 1;
        }
    }
    if (st == LS_OK) obs_flush(&r->obs, 1);
    view_free(&dout);
    view_free(&dctx);
    LS_K(ls_state_free)(&gb);
    LS_K(ls_state_free)(&ga);
    LS_K(ls_state_free)(&resp);
    return st;
}

ls_status LS_K(ls_chunks_score)(const ls_params *p, const ls_state *ps, const int32_t *in, size_t T, int64_t pos0,
                                const int32_t *targets, size_t chunk, ls_real *logp, ls_mem_cat cat, ls_layer_hook hook,
                                void *hook_user) {
    if (!ps || !in || !targets || !logp || T == 0) return LS_ERR_ARG;
    int L = p->cfg.n_layers;
    size_t C = chunk == 0 || chunk > T ? T : chunk;
    obs_acc obs = {.n_layers = L, .hook = hook, .hook_user = hook_user};
    obs.o = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)(L + 2) * 2 * sizeof *obs.o);
    if (!obs.o) return LS_ERR_NOMEM;
    memset(obs.o, 0, (size_t)(L + 2) * 2 * sizeof *obs.o);
    ls_state run;
    ls_status st = ps->fam->state_fork(&run, ps, cat);
    for (size_t t0 = 0; st == LS_OK && t0 < T; t0 += C) { /* as ls_replay_chunks_forward's pass */
        size_t n = T - t0 < C ? T - t0 : C;
        ls_seg_io io = {.tokens = in + t0, .T = n, .pos0 = pos0 + (int64_t)t0, .ctx = &run, .state_out = &run,
                        .targets = targets + t0, .logp = logp + t0, .hook = obs_add, .hook_user = &obs};
        st = p->fam->segment_forward(p, &io);
    }
    if (st == LS_OK) obs_flush(&obs, 0);
    LS_K(ls_state_free)(&run);
    ls_mem_free(obs.o);
    return st;
}
