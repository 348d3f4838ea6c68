/* mla_cp_attn.c - the mla family's cross-rank attention (mla_cp_attn.h says what
 * crosses ranks when): the global DSA selection (gathered for the
 * responses, a ring for the prompt), the MAX/SUM composition of the
 * response attention and its backward, the prompt's latent ring and its
 * reverse ring. */
#include "trainer/families/mla/mla_cp_attn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/dsa.h"
#include "trainer/dist/cp.h"
#include "trainer/base/mem_tracker.h"

#include "trainer/model/real_bytes.h"
#define I64(n) ((n) * sizeof(int64_t))
#ifdef LS_REAL_F64
#define DT LS_TRACE_DTYPE_F64
#else
#define DT LS_TRACE_DTYPE_F32
#endif

static ls_status fail(ls_mla_cp *c, ls_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

/* A collective's status, its failure recorded. */
static ls_status coll(ls_mla_cp *c, ls_status st, const char *purpose, int layer) {
    if (st == LS_OK) return LS_OK;
    return fail(c, st, "mla_cp: collective %s (layer %d) failed: %s", purpose, layer, ls_status_str(st));
}

/* ---- argument checks ------------------------------------------------------ */

static ls_status check_ctx(ls_mla_cp *c) {
    if (!c) return LS_ERR_ARG;
    c->err[0] = '\0';
    const ls_mla_dims *d = &c->dims;
    if (!c->g) return fail(c, LS_ERR_ARG, "mla_cp: argument c->g is NULL");
    if (!d->H || !d->d_n || !d->d_r || !d->d_v || !d->r_kv)
        return fail(c, LS_ERR_ARG, "mla_cp: argument c->dims has a zero dimension");
    if (!c->k_top) return fail(c, LS_ERR_ARG, "mla_cp: argument c->k_top is 0");
    if (c->form != LS_MLA_NAIVE && c->form != LS_MLA_ABSORBED)
        return fail(c, LS_ERR_ARG, "mla_cp: argument c->form is %d", (int)c->form);
    if (c->T < ls_group_size(c->g))
        return fail(c, LS_ERR_ARG, "mla_cp: argument c->T = %lld is shorter than the group (%d)", (long long)c->T,
                    ls_group_size(c->g));
    return LS_OK;
}

static ls_status check_q(ls_mla_cp *c, const ls_mla_cp_queries *q, int indexer) {
    if (!q) return fail(c, LS_ERR_ARG, "mla_cp: argument q is NULL");
    if (!q->T) return fail(c, LS_ERR_ARG, "mla_cp: argument q->T is 0");
    if (q->pos0 < 0) return fail(c, LS_ERR_ARG, "mla_cp: argument q->pos0 is negative");
    if (indexer) {
        if (!q->q_I || !q->w) return fail(c, LS_ERR_ARG, "mla_cp: argument q->q_I or q->w is NULL");
        if (!c->H_I || !c->d_I) return fail(c, LS_ERR_ARG, "mla_cp: argument c->H_I or c->d_I is 0");
    } else if (!q->q_nope || !q->q_pe) {
        return fail(c, LS_ERR_ARG, "mla_cp: argument q->q_nope or q->q_pe is NULL");
    }
    return LS_OK;
}

static ls_status check_rows(ls_mla_cp *c, const ls_mla_cp_rows *b, const char *name, int indexer) {
    if (!b || !b->n) return LS_OK;
    if (b->pos0 < 0) return fail(c, LS_ERR_ARG, "mla_cp: argument %s.pos0 is negative", name);
    if (indexer ? !b->k_I : (!b->c_kv || !b->k_pe))
        return fail(c, LS_ERR_ARG, "mla_cp: argument %s has a NULL %s", name, indexer ? "k_I" : "c_kv or k_pe");
    return LS_OK;
}

static ls_status check_blocks(ls_mla_cp *c, const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp,
                              int indexer) {
    if (n_blk && !blk) return fail(c, LS_ERR_ARG, "mla_cp: argument blk is NULL with n_blk = %zu", n_blk);
    char name[32];
    for (size_t i = 0; i < n_blk; i++) {
        snprintf(name, sizeof name, "blk[%zu]", i);
        ls_status st = check_rows(c, &blk[i], name, indexer);
        if (st != LS_OK) return st;
    }
    return check_rows(c, resp, "resp", indexer);
}

/* The shard geometry of group rank r. */
static int64_t shard_len(const ls_mla_cp *c, int r, int64_t *s0) {
    int64_t a, b;
    ls_cp_shard(c->T, ls_group_size(c->g), r, &a, &b);
    if (s0) *s0 = a;
    return b - a;
}

static int64_t max_shard(const ls_mla_cp *c) {
    int64_t m = 0;
    for (int r = 0; r < ls_group_size(c->g); r++) {
        int64_t n = shard_len(c, r, NULL);
        if (n > m) m = n;
    }
    return m;
}

static ls_status check_own(ls_mla_cp *c, const ls_mla_cp_rows *own, const ls_mla_cp_queries *q, int indexer) {
    if (!own) return fail(c, LS_ERR_ARG, "mla_cp: argument own is NULL");
    int64_t s0, n = shard_len(c, ls_group_rank(c->g), &s0);
    if (own->pos0 != s0 || own->n != (size_t)n)
        return fail(c, LS_ERR_ARG, "mla_cp: argument own covers [%lld, %lld), the shard is [%lld, %lld)",
                    (long long)own->pos0, (long long)(own->pos0 + (int64_t)own->n), (long long)s0,
                    (long long)(s0 + n));
    if (q->pos0 < s0 || q->pos0 + (int64_t)q->T > s0 + n)
        return fail(c, LS_ERR_ARG, "mla_cp: argument q covers [%lld, %lld), outside the shard [%lld, %lld)",
                    (long long)q->pos0, (long long)(q->pos0 + (int64_t)q->T), (long long)s0, (long long)(s0 + n));
    return check_rows(c, own, "own", indexer);
}

/* ---- selection ------------------------------------------------------------ */

static size_t topk_ws(const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp) {
    size_t m = 0;
    for (size_t i = 0; i < n_blk; i++)
        if (LS_K(ls_dsa_topk_workspace)(blk[i].n) > m) m = LS_K(ls_dsa_topk_workspace)(blk[i].n);
    if (resp && LS_K(ls_dsa_topk_workspace)(resp->n) > m) m = LS_K(ls_dsa_topk_workspace)(resp->n);
    return m;
}

/* acc (pos, score) [T, k] := the top-k of acc and block b's top-k (pa, sa,
 * pb, sb are [T, k] scratch; acc's lists are swapped with them). */
typedef struct {
    int64_t *pos, *pa, *pb;
    ls_real *score, *sa, *sb, *ws;
} topk_acc;

static void acc_block(const ls_mla_cp *c, topk_acc *a, const ls_mla_cp_queries *q, const ls_real *k_I, size_t n,
                      int64_t pos0) {
    size_t T = q->T, k = c->k_top;
    if (!n) return;
    LS_K(ls_dsa_topk)(a->pb, a->sb, q->q_I, q->w, k_I, T, n, c->H_I, c->d_I, q->pos0, pos0, k, a->ws);
    const int64_t *lp[2] = {a->pos, a->pb};
    const ls_real *ls[2] = {a->score, a->sb};
    LS_K(ls_dsa_merge)(a->pa, a->sa, lp, ls, 2, T, k, k);
    int64_t *tp = a->pos;
    a->pos = a->pa;
    a->pa = tp;
    ls_real *ts = a->score;
    a->score = a->sa;
    a->sa = ts;
}

static ls_status acc_init(topk_acc *a, size_t T, size_t k, size_t ws) {
    memset(a, 0, sizeof *a);
    a->pos = ls_mem_alloc(LS_MEM_COMM, I64(T * k));
    a->pa = ls_mem_alloc(LS_MEM_COMM, I64(T * k));
    a->pb = ls_mem_alloc(LS_MEM_COMM, I64(T * k));
    a->score = ls_mem_alloc(LS_MEM_COMM, R(T * k));
    a->sa = ls_mem_alloc(LS_MEM_COMM, R(T * k));
    a->sb = ls_mem_alloc(LS_MEM_COMM, R(T * k));
    a->ws = ls_mem_alloc(LS_MEM_SCRATCH, R(ws ? ws : 1));
    if (!a->pos || !a->pa || !a->pb || !a->score || !a->sa || !a->sb || !a->ws) return LS_ERR_NOMEM;
    for (size_t i = 0; i < T * k; i++) { /* the empty list */
        a->pos[i] = -1;
        a->score[i] = (ls_real)-INFINITY;
    }
    return LS_OK;
}

static void acc_free(topk_acc *a) {
    ls_mem_free(a->pos), ls_mem_free(a->pa), ls_mem_free(a->pb);
    ls_mem_free(a->score), ls_mem_free(a->sa), ls_mem_free(a->sb), ls_mem_free(a->ws);
    memset(a, 0, sizeof *a);
}

static int is_owner(const ls_mla_cp *c) { return ls_group_rank(c->g) == ls_group_size(c->g) - 1; }

ls_status LS_K(ls_mla_cp_response_select)(ls_mla_cp *c, int64_t *sel, const ls_mla_cp_queries *q,
                                          const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp,
                                          int layer) {
    ls_status st = check_ctx(c);
    if (st == LS_OK) st = check_q(c, q, 1);
    if (st == LS_OK) st = check_blocks(c, blk, n_blk, resp, 1);
    if (st == LS_OK && !sel) st = fail(c, LS_ERR_ARG, "mla_cp: argument sel is NULL");
    if (st != LS_OK) return st;
    size_t T = q->T, k = c->k_top, N = (size_t)ls_group_size(c->g), tk = T * k;
    topk_acc a;
    int64_t *all_pos = NULL;
    ls_real *all_score = NULL, *score = NULL;
    const int64_t **lp = NULL;
    const ls_real **ls = NULL;
    st = acc_init(&a, T, k, topk_ws(blk, n_blk, resp));
    if (st != LS_OK) goto cleanup;
    for (size_t i = 0; i < n_blk; i++) acc_block(c, &a, q, blk[i].k_I, blk[i].n, blk[i].pos0);
    if (resp && is_owner(c)) acc_block(c, &a, q, resp->k_I, resp->n, resp->pos0);
    if (c->local_dsa) { /* the fault: this rank's own top-k, never gathered */
        memcpy(sel, a.pos, I64(tk));
        goto cleanup;
    }
    all_pos = ls_mem_alloc(LS_MEM_COMM, I64(N * tk));
    all_score = ls_mem_alloc(LS_MEM_COMM, R(N * tk));
    score = ls_mem_alloc(LS_MEM_COMM, R(tk));
    lp = ls_mem_alloc(LS_MEM_SCRATCH, N * sizeof *lp);
    ls = ls_mem_alloc(LS_MEM_SCRATCH, N * sizeof *ls);
    if (!all_pos || !all_score || !score || !lp || !ls) {
        st = fail(c, LS_ERR_NOMEM, "mla_cp: cannot allocate the gathered top-k lists (%zu entries)", N * tk);
        goto cleanup;
    }
    st = coll(c, ls_group_allgather(c->g, a.pos, all_pos, tk, LS_TRACE_DTYPE_I64, "dsa_topk_gather", layer),
              "dsa_topk_gather", layer);
    if (st == LS_OK)
        st = coll(c, ls_group_allgather(c->g, a.score, all_score, tk, DT, "dsa_topk_gather", layer),
                  "dsa_topk_gather", layer);
    if (st != LS_OK) goto cleanup;
    for (size_t r = 0; r < N; r++) { /* rank order; the tie rule makes the result independent of it */
        lp[r] = all_pos + r * tk;
        ls[r] = all_score + r * tk;
    }
    LS_K(ls_dsa_merge)(sel, score, lp, ls, N, T, k, k);
cleanup:
    if (st == LS_ERR_NOMEM && !c->err[0]) fail(c, st, "mla_cp: cannot allocate the top-k lists [%zu, %zu]", T, k);
    acc_free(&a);
    ls_mem_free(all_pos), ls_mem_free(all_score), ls_mem_free(score);
    ls_mem_free((void *)lp), ls_mem_free((void *)ls);
    return st;
}

/* ---- attention over blocks ------------------------------------------------ */

/* Workspaces for the blocks' forward / backward. */
typedef struct {
    int64_t *loc;         /* [T, k] the selection localized to one block */
    ls_real *ws;          /* the kernel's workspace */
    ls_real *o_p, *lse_p; /* [T, H, d_v], [T, H] one block's partial */
} blk_ws;

static ls_status ws_init(const ls_mla_cp *c, blk_ws *w, size_t T, size_t max_n, int bwd) {
    size_t H = c->dims.H, k = c->k_top;
    size_t n = bwd ? LS_K(ls_mla_backward_workspace)(c->form, max_n, k, &c->dims)
                   : LS_K(ls_mla_forward_workspace)(c->form, max_n, k, &c->dims);
    memset(w, 0, sizeof *w);
    w->loc = ls_mem_alloc(LS_MEM_SCRATCH, I64(T * k));
    w->ws = ls_mem_alloc(LS_MEM_SCRATCH, R(n ? n : 1));
    if (!bwd) {
        w->o_p = ls_mem_alloc(LS_MEM_COMM, R(T * H * c->dims.d_v));
        w->lse_p = ls_mem_alloc(LS_MEM_COMM, R(T * H));
    }
    return w->loc && w->ws && (bwd || (w->o_p && w->lse_p)) ? LS_OK : LS_ERR_NOMEM;
}

static void ws_free(blk_ws *w) {
    ls_mem_free(w->loc), ls_mem_free(w->ws), ls_mem_free(w->o_p), ls_mem_free(w->lse_p);
    memset(w, 0, sizeof *w);
}

static void part_init(ls_real *o, ls_real *lse, size_t n, size_t d_v) {
    memset(o, 0, R(n * d_v));
    for (size_t i = 0; i < n; i++) lse[i] = (ls_real)-INFINITY;
}

/* (o, lse) += q's attention over the selected rows of one block. */
static void fwd_block(const ls_mla_cp *c, blk_ws *w, ls_real *o, ls_real *lse, const ls_mla_cp_queries *q,
                      const int64_t *sel, const ls_real *c_kv, const ls_real *k_pe, size_t n, int64_t pos0,
                      const ls_real *kv_b) {
    size_t T = q->T, k = c->k_top, H = c->dims.H;
    if (!n) return;
    LS_K(ls_dsa_localize)(w->loc, sel, T, k, pos0, n);
    LS_K(ls_mla_forward)(w->o_p, w->lse_p, q->q_nope, q->q_pe, c_kv, k_pe, kv_b, w->loc, k, T, n, &c->dims, q->pos0,
                         pos0, c->tau, c->form, w->ws);
    LS_K(ls_attn_merge_into)(o, lse, w->o_p, w->lse_p, T * H, c->dims.d_v);
}

static void bwd_block(const ls_mla_cp *c, blk_ws *w, ls_real *dq_nope, ls_real *dq_pe, ls_real *dc_kv,
                      ls_real *dk_pe, ls_real *dkv_b, const ls_real *o, const ls_real *lse, const ls_real *dout,
                      const ls_mla_cp_queries *q, const int64_t *sel, const ls_real *c_kv, const ls_real *k_pe,
                      size_t n, int64_t pos0, const ls_real *kv_b) {
    size_t T = q->T, k = c->k_top;
    if (!n) return;
    LS_K(ls_dsa_localize)(w->loc, sel, T, k, pos0, n);
    LS_K(ls_mla_backward)(dq_nope, dq_pe, dc_kv, dk_pe, dkv_b, o, lse, dout, q->q_nope, q->q_pe, c_kv, k_pe, kv_b,
                          w->loc, k, T, n, &c->dims, q->pos0, pos0, c->tau, c->form, w->ws);
}

static size_t max_rows(const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp) {
    size_t m = resp ? resp->n : 0;
    for (size_t i = 0; i < n_blk; i++)
        if (blk[i].n > m) m = blk[i].n;
    return m;
}

/* The global (o, lse) from every rank's partial: one MAX, two SUMs. */
static ls_status compose(ls_mla_cp *c, ls_real *o, ls_real *lse, size_t n, int layer) {
    size_t d_v = c->dims.d_v;
    ls_real *m = ls_mem_alloc(LS_MEM_COMM, R(n)), *a = ls_mem_alloc(LS_MEM_COMM, R(n));
    ls_status st = m && a ? LS_OK : fail(c, LS_ERR_NOMEM, "mla_cp: cannot allocate the composition (%zu rows)", n);
    if (st == LS_OK) {
        memcpy(m, lse, R(n));
        st = coll(c, ls_group_allreduce_max(c->g, m, n, DT, "lse_max", layer), "lse_max", layer);
    }
    if (st == LS_OK) {
        for (size_t i = 0; i < n; i++) { /* this rank's share e^{l_r - m} (0 without a candidate) */
            ls_real wt = lse[i] == (ls_real)-INFINITY ? 0 : (ls_real)exp((double)(lse[i] - m[i]));
            a[i] = wt;
            for (size_t j = 0; j < d_v; j++) o[i * d_v + j] *= wt;
        }
        st = coll(c, ls_group_allreduce_sum(c->g, a, n, DT, "lse_sum", layer), "lse_sum", layer);
    }
    if (st == LS_OK) st = coll(c, ls_group_allreduce_sum(c->g, o, n * d_v, DT, "out_sum", layer), "out_sum", layer);
    if (st == LS_OK)
        for (size_t i = 0; i < n; i++) {
            if (!(a[i] > 0)) { /* no candidate on any rank (no rows at all): the empty part */
                for (size_t j = 0; j < d_v; j++) o[i * d_v + j] = 0;
                lse[i] = (ls_real)-INFINITY;
                continue;
            }
            for (size_t j = 0; j < d_v; j++) o[i * d_v + j] /= a[i];
            lse[i] = m[i] + (ls_real)log((double)a[i]);
        }
    ls_mem_free(m);
    ls_mem_free(a);
    return st;
}

ls_status LS_K(ls_mla_cp_response_forward)(ls_mla_cp *c, ls_real *o, ls_real *lse, const ls_mla_cp_queries *q,
                                           const int64_t *sel, const ls_mla_cp_rows *blk, size_t n_blk,
                                           const ls_mla_cp_rows *resp, const ls_real *kv_b, int layer) {
    ls_status st = check_ctx(c);
    if (st == LS_OK) st = check_q(c, q, 0);
    if (st == LS_OK) st = check_blocks(c, blk, n_blk, resp, 0);
    if (st == LS_OK && (!o || !lse || !sel || !kv_b))
        st = fail(c, LS_ERR_ARG, "mla_cp: argument o, lse, sel or kv_b is NULL");
    if (st != LS_OK) return st;
    size_t T = q->T, n = T * c->dims.H;
    blk_ws w;
    st = ws_init(c, &w, T, max_rows(blk, n_blk, resp), 0);
    if (st != LS_OK) {
        ws_free(&w);
        return fail(c, st, "mla_cp: cannot allocate the attention workspace (%zu queries)", T);
    }
    part_init(o, lse, n, c->dims.d_v);
    for (size_t i = 0; i < n_blk; i++)
        fwd_block(c, &w, o, lse, q, sel, blk[i].c_kv, blk[i].k_pe, blk[i].n, blk[i].pos0, kv_b);
    if (resp && is_owner(c)) fwd_block(c, &w, o, lse, q, sel, resp->c_kv, resp->k_pe, resp->n, resp->pos0, kv_b);
    ws_free(&w);
    return compose(c, o, lse, n, layer);
}

ls_status LS_K(ls_mla_cp_response_backward)(ls_mla_cp *c, ls_real *dq_nope, ls_real *dq_pe,
                                            const ls_mla_cp_drows *dblk, const ls_mla_cp_drows *dresp,
                                            ls_real *dkv_b, const ls_real *o, const ls_real *lse,
                                            const ls_real *dout, const ls_mla_cp_queries *q, const int64_t *sel,
                                            const ls_mla_cp_rows *blk, size_t n_blk, const ls_mla_cp_rows *resp,
                                            const ls_real *kv_b, int layer) {
    ls_status st = check_ctx(c);
    if (st == LS_OK) st = check_q(c, q, 0);
    if (st == LS_OK) st = check_blocks(c, blk, n_blk, resp, 0);
    if (st == LS_OK && (!dq_nope || !dq_pe || !o || !lse || !dout || !sel || !kv_b))
        st = fail(c, LS_ERR_ARG, "mla_cp: argument dq_nope, dq_pe, o, lse, dout, sel or kv_b is NULL");
    if (st == LS_OK && resp && resp->n && !dresp) st = fail(c, LS_ERR_ARG, "mla_cp: argument dresp is NULL");
    if (st != LS_OK) return st;
    const ls_mla_dims *d = &c->dims;
    size_t T = q->T, nq = T * d->H * d->d_n, nr = T * d->H * d->d_r, nresp = resp ? resp->n : 0;
    size_t rrow = d->r_kv + d->d_r;
    blk_ws w;
    ls_real *dq = ls_mem_alloc(LS_MEM_COMM, R(nq + nr)), *dr = ls_mem_alloc(LS_MEM_COMM, R(nresp * rrow + 1));
    st = ws_init(c, &w, T, max_rows(blk, n_blk, resp), 1);
    if (st != LS_OK || !dq || !dr) {
        st = fail(c, LS_ERR_NOMEM, "mla_cp: cannot allocate the backward's buffers (%zu queries)", T);
        goto cleanup;
    }
    memset(dq, 0, R(nq + nr));
    memset(dr, 0, R(nresp * rrow));
    for (size_t i = 0; i < n_blk; i++)
        bwd_block(c, &w, dq, dq + nq, dblk ? dblk[i].dc_kv : NULL, dblk ? dblk[i].dk_pe : NULL, dkv_b, o, lse, dout,
                  q, sel, blk[i].c_kv, blk[i].k_pe, blk[i].n, blk[i].pos0, kv_b);
    if (nresp && is_owner(c))
        bwd_block(c, &w, dq, dq + nq, dr, dr + nresp * d->r_kv, dkv_b, o, lse, dout, q, sel, resp->c_kv, resp->k_pe,
                  nresp, resp->pos0, kv_b);
    st = coll(c, ls_group_allreduce_sum(c->g, dq, nq + nr, DT, "dq_sum", layer), "dq_sum", layer);
    if (st == LS_OK && !c->skip_dkv_reduce) /* the owner's part, every other rank's zeros */
        st = coll(c, ls_group_allreduce_sum(c->g, dr, nresp * rrow, DT, "dkv_sum", layer), "dkv_sum", layer);
    if (st != LS_OK) goto cleanup;
    memcpy(dq_nope, dq, R(nq));
    memcpy(dq_pe, dq + nq, R(nr));
    for (size_t i = 0; nresp && i < nresp * d->r_kv; i++)
        if (dresp->dc_kv) dresp->dc_kv[i] += dr[i];
    for (size_t i = 0; nresp && i < nresp * d->d_r; i++)
        if (dresp->dk_pe) dresp->dk_pe[i] += dr[nresp * d->r_kv + i];
cleanup:
    ws_free(&w);
    ls_mem_free(dq);
    ls_mem_free(dr);
    return st;
}

/* ---- prompt: the rings ------------------------------------------------------ */

/* One hop of a ring: send snd to r+1, receive rcv from r-1 (n elements); the
 * buffers are swapped so that snd holds what arrived. */
static ls_status hop(ls_mla_cp *c, ls_real **snd, ls_real **rcv, size_t n, const char *purpose, int layer) {
    int N = ls_group_size(c->g), r = ls_group_rank(c->g);
    ls_status st = coll(c, ls_group_sendrecv(c->g, *snd, (r + 1) % N, *rcv, (r - 1 + N) % N, n, DT, purpose, layer),
                        purpose, layer);
    ls_real *t = *snd;
    *snd = *rcv;
    *rcv = t;
    return st;
}

ls_status LS_K(ls_mla_cp_prompt_select)(ls_mla_cp *c, int64_t *sel, const ls_mla_cp_queries *q,
                                        const ls_mla_cp_rows *own, int layer) {
    ls_status st = check_ctx(c);
    if (st == LS_OK) st = check_q(c, q, 1);
    if (st == LS_OK) st = check_own(c, own, q, 1);
    if (st == LS_OK && !sel) st = fail(c, LS_ERR_ARG, "mla_cp: argument sel is NULL");
    if (st != LS_OK) return st;
    int N = ls_group_size(c->g), r = ls_group_rank(c->g);
    size_t ms = (size_t)max_shard(c), n = ms * c->d_I;
    topk_acc a;
    ls_real *snd = NULL, *rcv = NULL;
    st = acc_init(&a, q->T, c->k_top, LS_K(ls_dsa_topk_workspace)(ms));
    if (st != LS_OK) goto cleanup;
    acc_block(c, &a, q, own->k_I, own->n, own->pos0);
    if (!c->local_dsa && N > 1) { /* (the fault: the own shard's keys only, no ring) */
        snd = ls_mem_alloc(LS_MEM_COMM, R(n));
        rcv = ls_mem_alloc(LS_MEM_COMM, R(n));
        if (!snd || !rcv) {
            st = LS_ERR_NOMEM;
            goto cleanup;
        }
        memset(snd, 0, R(n)); /* the padding */
        memcpy(snd, own->k_I, R(own->n * c->d_I));
        for (int step = 1; st == LS_OK && step < N; step++) {
            st = hop(c, &snd, &rcv, n, "dsa_ring", layer);
            int src = (r - step + N) % N;
            int64_t ks0, kn = shard_len(c, src, &ks0);
            if (st == LS_OK && src < r) acc_block(c, &a, q, snd, (size_t)kn, ks0); /* causal: earlier ranks */
        }
        if (st != LS_OK) goto cleanup;
    }
    memcpy(sel, a.pos, I64(q->T * c->k_top));
cleanup:
    if (st == LS_ERR_NOMEM) fail(c, st, "mla_cp: cannot allocate the indexer ring (%zu queries)", q->T);
    acc_free(&a);
    ls_mem_free(snd);
    ls_mem_free(rcv);
    return st;
}

/* A ring message: blocks of ms rows, c_kv then k_pe (then, with grads, the
 * dc_kv and dk_pe accumulators, zero); padding zero. */
static ls_real *ring_msg(const ls_mla_cp *c, const ls_mla_cp_rows *own, size_t ms, int grads) {
    size_t rk = c->dims.r_kv, dr = c->dims.d_r, blk = ms * (rk + dr), n = (grads ? 2 : 1) * blk;
    ls_real *m = ls_mem_alloc(LS_MEM_COMM, R(n));
    if (!m) return NULL;
    memset(m, 0, R(n));
    memcpy(m, own->c_kv, R(own->n * rk));
    memcpy(m + ms * rk, own->k_pe, R(own->n * dr));
    return m;
}

ls_status LS_K(ls_mla_cp_prompt_forward)(ls_mla_cp *c, ls_real *o, ls_real *lse, const ls_mla_cp_queries *q,
                                         const int64_t *sel, const ls_mla_cp_rows *own, const ls_real *kv_b,
                                         int with_own, int layer) {
    ls_status st = check_ctx(c);
    if (st == LS_OK) st = check_q(c, q, 0);
    if (st == LS_OK) st = check_own(c, own, q, 0);
    if (st == LS_OK && (!o || !lse || !sel || !kv_b))
        st = fail(c, LS_ERR_ARG, "mla_cp: argument o, lse, sel or kv_b is NULL");
    if (st != LS_OK) return st;
    int N = ls_group_size(c->g), r = ls_group_rank(c->g);
    size_t ms = (size_t)max_shard(c), n = ms * (c->dims.r_kv + c->dims.d_r);
    blk_ws w;
    ls_real *snd = ring_msg(c, own, ms, 0), *rcv = ls_mem_alloc(LS_MEM_COMM, R(n));
    st = ws_init(c, &w, q->T, ms, 0);
    if (st != LS_OK || !snd || !rcv) {
        st = fail(c, LS_ERR_NOMEM, "mla_cp: cannot allocate the latent ring (%zu queries)", q->T);
        goto cleanup;
    }
    part_init(o, lse, q->T * c->dims.H, c->dims.d_v);
    for (int step = 1; st == LS_OK && step < N; step++) {
        st = hop(c, &snd, &rcv, n, "kv_ring", layer);
        int src = (r - step + N) % N;
        int64_t ks0, kn = shard_len(c, src, &ks0);
        if (st == LS_OK && src < r) fwd_block(c, &w, o, lse, q, sel, snd, snd + ms * c->dims.r_kv, (size_t)kn, ks0, kv_b);
    }
    if (st == LS_OK && with_own) fwd_block(c, &w, o, lse, q, sel, own->c_kv, own->k_pe, own->n, own->pos0, kv_b);
cleanup:
    ws_free(&w);
    ls_mem_free(snd);
    ls_mem_free(rcv);
    return st;
}

ls_status LS_K(ls_mla_cp_prompt_backward)(ls_mla_cp *c, ls_real *dq_nope, ls_real *dq_pe,
                                          const ls_mla_cp_drows *down, ls_real *dkv_b, const ls_real *o,
                                          const ls_real *lse, const ls_real *dout, const ls_mla_cp_queries *q,
                                          const int64_t *sel, const ls_mla_cp_rows *own, const ls_real *kv_b,
                                          int with_own, int layer) {
    ls_status st = check_ctx(c);
    if (st == LS_OK) st = check_q(c, q, 0);
    if (st == LS_OK) st = check_own(c, own, q, 0);
    if (st == LS_OK && (!dq_nope || !dq_pe || !o || !lse || !dout || !sel || !kv_b))
        st = fail(c, LS_ERR_ARG, "mla_cp: argument dq_nope, dq_pe, o, lse, dout, sel or kv_b is NULL");
    if (st != LS_OK) return st;
    int N = ls_group_size(c->g), r = ls_group_rank(c->g);
    size_t rk = c->dims.r_kv, dr = c->dims.d_r, ms = (size_t)max_shard(c), blk = ms * (rk + dr), n = 2 * blk;
    blk_ws w;
    ls_real *snd = ring_msg(c, own, ms, 1), *rcv = ls_mem_alloc(LS_MEM_COMM, R(n));
    st = ws_init(c, &w, q->T, ms, 1);
    if (st != LS_OK || !snd || !rcv) {
        st = fail(c, LS_ERR_NOMEM, "mla_cp: cannot allocate the reverse latent ring (%zu queries)", q->T);
        goto cleanup;
    }
    for (int step = 1; st == LS_OK && step <= N && N > 1; step++) {
        st = hop(c, &snd, &rcv, n, "dkv_ring", layer);
        int src = (r - step + N) % N;
        int64_t ks0, kn = shard_len(c, src, &ks0);
        if (st == LS_OK && step < N && src < r) /* this rank's queries' part into the travelling accumulators */
            bwd_block(c, &w, dq_nope, dq_pe, snd + blk, snd + blk + ms * rk, dkv_b, o, lse, dout, q, sel, snd,
                      snd + ms * rk, (size_t)kn, ks0, kv_b);
    }
    if (st != LS_OK) goto cleanup;
    if (down && N > 1) /* home: the later ranks' part of the gradient of this rank's rows */
        for (size_t i = 0; i < own->n; i++) {
            for (size_t j = 0; down->dc_kv && j < rk; j++) down->dc_kv[i * rk + j] += snd[blk + i * rk + j];
            for (size_t j = 0; down->dk_pe && j < dr; j++) down->dk_pe[i * dr + j] += snd[blk + ms * rk + i * dr + j];
        }
    if (with_own)
        bwd_block(c, &w, dq_nope, dq_pe, down ? down->dc_kv : NULL, down ? down->dk_pe : NULL, dkv_b, o, lse, dout, q,
                  sel, own->c_kv, own->k_pe, own->n, own->pos0, kv_b);
cleanup:
    ws_free(&w);
    ls_mem_free(snd);
    ls_mem_free(rcv);
    return st;
}
