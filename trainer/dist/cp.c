/* cp.c - the shared context-parallel driver: the shards, the family's
 * part of the context (family.h: cp_init, cp_capture, cp_prompt_backward)
 * and finalize (cp.h says what crosses ranks when). */
#include "trainer/dist/cp.h"

#include <stdio.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "trainer/base/mem_tracker.h"

#include "trainer/model/real_bytes.h"
#ifdef LS_REAL_F64
#define DT LS_TRACE_DTYPE_F64
#else
#define DT LS_TRACE_DTYPE_F32
#endif

static int64_t shard_len(const ls_cp *c, int r, int64_t *s0) {
    int64_t a, b;
    ls_cp_shard(c->T, c->world, r, &a, &b);
    if (s0) *s0 = a;
    return b - a;
}

ls_status LS_K(ls_cp_init)(ls_cp *c, ls_comm_group *g, const ls_params *p, int64_t T, const ls_cp_faults *f,
                           char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->rank = ls_group_rank(g);
    c->world = ls_group_size(g);
    c->T = T;
    c->fam = p->fam;
    if (f) c->faults = *f;
    if (T < c->world) {
        snprintf(err, err_len, "the prompt's %lld captured position(s) cannot be split over %d ranks (at least one each)",
                 (long long)T, c->world);
        return LS_ERR_ARG;
    }
    ls_cp_shard(T, c->world, c->rank, &c->s0, &c->s1);
    for (int r = 0; r < c->world; r++) {
        int64_t n = shard_len(c, r, NULL);
        if (n > c->max_shard) c->max_shard = n;
    }
    ls_status st = c->fam->cp_init(c, p);
    if (st != LS_OK) snprintf(err, err_len, "context parallelism: %s", ls_status_str(st));
    return st;
}

void LS_K(ls_cp_free)(ls_cp *c) {
    if (c && c->fam) c->fam->cp_free(c);
}

ls_status LS_K(ls_cp_capture)(ls_cp *c, const ls_params *q, const int32_t *prompt, size_t page_size, size_t chunk,
                              ls_state *ps, ls_real **checkpoints, ls_mem_cat cat, ls_layer_hook hook,
                              void *hook_user) {
    return c->fam->cp_capture(c, q, prompt, page_size, chunk, ps, checkpoints, cat, hook, hook_user);
}

ls_status LS_K(ls_cp_prompt_backward)(ls_cp *c, const ls_params *p, const int32_t *prompt, size_t chunk,
                                      ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                      ls_layer_hook hook, void *hook_user) {
    return c->fam->cp_prompt_backward(c, p, prompt, chunk, checkpoints, ps, dps, hook, hook_user);
}

ls_status LS_K(ls_cp_finalize)(ls_cp *c, ls_params *p, const ls_real *stash, int *agree) {
    ls_status st = LS_OK;
    if (stash) { /* replicated part once, shard-local parts summed in rank order */
        size_t off = 0;
        for (size_t i = 0; st == LS_OK && i < p->n; i++) {
            ls_tensor *t = &p->t[i];
            if (!t->trainable || t->ep_remote) continue; /* EP: another rank's expert is its CP group's */
            if (!c->faults.skip_grad_finalize)
                st = ls_group_allreduce_sum(c->g, t->g, t->numel, DT, "grad_finalize", -1);
            for (size_t j = 0; st == LS_OK && j < t->numel; j++) t->g[j] = stash[off + j] + t->g[j];
            off += t->numel;
        }
    }
    /* the check: one digest over every trainable gradient, gathered */
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += p->t[i].trainable && !p->t[i].ep_remote;
    uint8_t *dg = ls_mem_alloc(LS_MEM_COMM, (n ? n : 1) * LS_DIGEST_SIZE);
    uint8_t *all = ls_mem_alloc(LS_MEM_COMM, (size_t)c->world * LS_DIGEST_SIZE), mine[LS_DIGEST_SIZE];
    if (st == LS_OK && (!dg || !all)) st = LS_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; st == LS_OK && i < p->n; i++)
        if (p->t[i].trainable && !p->t[i].ep_remote) st = ls_digest_sha256(p->t[i].g, R(p->t[i].numel), dg + LS_DIGEST_SIZE * k++);
    if (st == LS_OK) st = ls_digest_sha256(dg, k * LS_DIGEST_SIZE, mine);
    if (st == LS_OK) st = ls_group_allgather(c->g, mine, all, LS_DIGEST_SIZE, LS_TRACE_DTYPE_U8, "digest_check", -1);
    if (st == LS_OK) {
        *agree = 1;
        for (int r = 1; r < c->world; r++)
            if (memcmp(all, all + (size_t)r * LS_DIGEST_SIZE, LS_DIGEST_SIZE)) *agree = 0;
    }
    ls_mem_free(dg);
    ls_mem_free(all);
    return st;
}
