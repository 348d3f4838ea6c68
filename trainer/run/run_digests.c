/* run_digests.c - param_digest events of the trainable tensors. */
#include "trainer/run/run_digests.h"

#include <stdio.h>

#include "receipts/format/digest.h"
#include "trainer/base/mem_tracker.h"

ls_status LS_K(ls_run_emit_digests)(ls_run_obs *o, const ls_params *p, const ls_ep *ep) {
    size_t cap = 0, n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable) cap += LS_DIGEST_HEX_SIZE + sizeof p->t[i].name;
    /* every tensor's digest, under EP the other ranks' experts' from their owners (ep.h) */
    uint8_t *all = ls_mem_alloc(LS_MEM_SCRATCH, (p->n ? p->n : 1) * LS_DIGEST_SIZE);
    if (!all) return LS_ERR_NOMEM; /* every EP rank fails alike only if all do: the caller agrees the step */
    ls_status st = LS_K(ls_ep_param_digests)(ep, p, all);
    if (st != LS_OK) {
        ls_mem_free(all);
        return st;
    }
    char *cat = ls_mem_alloc(LS_MEM_SCRATCH, cap + 1); /* model-sized */
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        const uint8_t *dg = all + LS_DIGEST_SIZE * i;
        ls_run_obs_note(o, ls_trace_emit_param_digest(o->w, o->step, t->name, dg));
        if (cat) {
            char hex[LS_DIGEST_HEX_SIZE];
            ls_digest_hex(dg, LS_DIGEST_SIZE, hex);
            n += (size_t)sprintf(cat + n, "%s %s\n", t->name, hex);
        }
    }
    if (cat) {
        uint8_t dg[LS_DIGEST_SIZE];
        ls_digest_sha256(cat, n, dg);
        ls_run_obs_note(o, ls_trace_emit_param_digest(o->w, o->step, "trainable", dg));
    }
    ls_mem_free(cat);
    ls_mem_free(all);
    return LS_OK;
}
