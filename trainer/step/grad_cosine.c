/* grad_cosine.c - the detached and the full gradient of a measured step
 * side by side (grad_cosine.h). */
#include "trainer/step/grad_cosine.h"

#include <math.h>
#include <string.h>

static int held(const ls_tensor *t) { return t->trainable && !t->ep_remote; }

ls_status LS_K(ls_grad_cosine_init)(ls_grad_cosine *gc, const ls_params *p, int full) {
    memset(gc, 0, sizeof *gc);
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += held(&p->t[i]) ? p->t[i].numel : 0;
    gc->full = full;
    gc->n = n;
    gc->acc = ls_mem_alloc(LS_MEM_GRADS, (n ? n : 1) * sizeof *gc->acc);
    gc->work = ls_mem_alloc(LS_MEM_GRADS, (n ? n : 1) * sizeof *gc->work);
    gc->gsave = ls_mem_alloc(LS_MEM_SCRATCH, (p->n ? p->n : 1) * sizeof *gc->gsave);
    if (!gc->acc || !gc->work || !gc->gsave) {
        LS_K(ls_grad_cosine_free)(gc);
        return LS_ERR_NOMEM;
    }
    memset(gc->acc, 0, (n ? n : 1) * sizeof *gc->acc);
    memset(gc->work, 0, (n ? n : 1) * sizeof *gc->work);
    return LS_OK;
}

void LS_K(ls_grad_cosine_free)(ls_grad_cosine *gc) {
    if (!gc) return;
    ls_mem_free(gc->acc);
    ls_mem_free(gc->work);
    ls_mem_free(gc->gsave);
    memset(gc, 0, sizeof *gc);
}

void LS_K(ls_grad_cosine_before_prompt)(ls_grad_cosine *gc, ls_params *p) {
    size_t off = 0;
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        gc->gsave[i] = t->g;
        if (!held(t)) continue;
        if (gc->full) { /* the replays' part since the last prompt backward */
            for (size_t k = 0; k < t->numel; k++) gc->acc[off + k] += (double)t->g[k] - (double)gc->work[off + k];
        } else { /* the prompt backward into a zeroed buffer of its own */
            memset(gc->work + off, 0, t->numel * sizeof *gc->work);
            t->g = gc->work + off;
        }
        off += t->numel;
    }
}

void LS_K(ls_grad_cosine_after_prompt)(ls_grad_cosine *gc, ls_params *p) {
    size_t off = 0;
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        if (!held(t)) continue;
        if (gc->full) {
            memcpy(gc->work + off, t->g, t->numel * sizeof *gc->work);
        } else {
            t->g = gc->gsave[i];
            for (size_t k = 0; k < t->numel; k++) gc->acc[off + k] += (double)gc->work[off + k];
        }
        off += t->numel;
    }
}

void LS_K(ls_grad_cosine_finish)(const ls_grad_cosine *gc, const ls_params *p, ls_step_result *res) {
    double dot = 0, ff = 0, dd = 0;
    size_t off = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (!held(t)) continue;
        for (size_t k = 0; k < t->numel; k++) {
            double g = (double)t->g[k], a = gc->acc[off + k];
            double f = gc->full ? g : g + a, d = gc->full ? a : g;
            dot += f * d;
            ff += f * f;
            dd += d * d;
        }
        off += t->numel;
    }
    res->has_grad_compare = 1;
    res->grad_norm_full = sqrt(ff);
    res->grad_norm_detached = sqrt(dd);
    res->has_grad_cosine = ff > 0 && dd > 0;
    double c = res->has_grad_cosine ? dot / (sqrt(ff) * sqrt(dd)) : 0;
    res->grad_cosine = c > 1 ? 1 : c < -1 ? -1 : c;
}
