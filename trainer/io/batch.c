/* batch.c - one GRPO step's inputs in memory (batch.h); the formats that
 * read and write them are rollouts.c (the rollouts JSONL: one line, the
 * streaming reader) and batch_dump.c (the batch dump), over the JSON fields
 * of batch_json.c. */
#include "trainer/io/batch.h"

#include <string.h>

#include "trainer/base/mem_tracker.h"

ls_status ls_batch_alloc(ls_batch **out, size_t G) {
    ls_batch *b = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *b);
    if (!b) return LS_ERR_NOMEM;
    b->G = G;
    b->resp = ls_mem_alloc(LS_MEM_SCRATCH, G * sizeof *b->resp);
    b->R = ls_mem_alloc(LS_MEM_SCRATCH, G * sizeof *b->R);
    b->rewards = ls_mem_alloc(LS_MEM_SCRATCH, G * sizeof *b->rewards);
    b->adv = ls_mem_alloc(LS_MEM_SCRATCH, G * sizeof *b->adv);
    b->old_lp = ls_mem_alloc(LS_MEM_SCRATCH, G * sizeof *b->old_lp);
    b->ref_lp = ls_mem_alloc(LS_MEM_SCRATCH, G * sizeof *b->ref_lp);
    if (!b->resp || !b->R || !b->rewards || !b->adv || !b->old_lp || !b->ref_lp) {
        ls_batch_free(b);
        return LS_ERR_NOMEM;
    }
    *out = b;
    return LS_OK;
}

ls_status ls_batch_set_prompt(ls_batch *b, const int32_t *ids, size_t P) {
    int32_t *np = ls_mem_alloc(LS_MEM_SCRATCH, P * sizeof *np);
    if (!np) return LS_ERR_NOMEM;
    memcpy(np, ids, P * sizeof *np);
    ls_mem_free(b->prompt);
    b->prompt = np;
    b->P = P;
    return LS_OK;
}

ls_status ls_batch_set_response(ls_batch *b, size_t i, const int32_t *ids, size_t R) {
    int32_t *nr = ls_mem_alloc(LS_MEM_SCRATCH, R * sizeof *nr);
    double *o = ls_mem_alloc(LS_MEM_SCRATCH, R * sizeof *o), *r = ls_mem_alloc(LS_MEM_SCRATCH, R * sizeof *r);
    if (!nr || !o || !r) {
        ls_mem_free(nr);
        ls_mem_free(o);
        ls_mem_free(r);
        return LS_ERR_NOMEM;
    }
    memcpy(nr, ids, R * sizeof *nr);
    ls_mem_free(b->resp[i]);
    ls_mem_free(b->old_lp[i]);
    ls_mem_free(b->ref_lp[i]);
    b->resp[i] = nr;
    b->old_lp[i] = o;
    b->ref_lp[i] = r;
    b->R[i] = R;
    return LS_OK;
}

void ls_batch_free(ls_batch *b) {
    if (!b) return;
    for (size_t i = 0; i < b->G; i++) {
        if (b->resp) ls_mem_free(b->resp[i]);
        if (b->old_lp) ls_mem_free(b->old_lp[i]);
        if (b->ref_lp) ls_mem_free(b->ref_lp[i]);
    }
    ls_mem_free(b->resp);
    ls_mem_free(b->R);
    ls_mem_free(b->rewards);
    ls_mem_free(b->adv);
    ls_mem_free(b->old_lp);
    ls_mem_free(b->ref_lp);
    ls_mem_free(b->prompt);
    ls_mem_free(b);
}
