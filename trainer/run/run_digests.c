/* run_digests.c - param_digest events of the trainable tensors. */
#include "trainer/run/run_digests.h"

#include <stdio.h>

#include "receipts/digest.h"
#include "trainer/base/mem_tracker.h"

void LS_K(ls_run_emit_digests)(ls_run_obs *o, const ls_params *p) {
    size_t cap = 0, n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable) cap += LS_DIGEST_HEX_SIZE + sizeof p->t[i].name;
    char *cat = ls_mem_alloc(LS_MEM_SCRATCH, cap + 1); /* model-sized */
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        uint8_t dg[LS_DIGEST_SIZE];
        ls_digest_sha256(t->w, t->numel * sizeof(ls_real), dg);
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
}
