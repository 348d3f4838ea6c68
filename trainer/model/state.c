/* state.c - the carried state's shared container (state.h: ls_state). */
#include "trainer/model/state.h"

#include <stdio.h>
#include <string.h>

#include "trainer/model/real_bytes.h"

ls_status LS_K(ls_state_append_pages)(ls_state *s, int l, const ls_real *const src[3], const size_t rows[3],
                                      size_t T, int64_t pos0) {
    ls_layer_state *ly = &s->ly[l];
    /* a host-tier state's rows in the host tier's space (mem_tracker.h: host_pinned, plain host memory
       until a provider pins it), only ever read through the stager (stage.h); the device tier's here are
       read in place by the CPU kernels: host memory */
    ls_mem_space sp = ls_mem_cat_tier(s->cat) == LS_TIER_HOST ? ls_mem_tier_space(LS_TIER_HOST) : LS_MEM_SPACE_HOST;
    for (size_t t0 = 0; t0 < T; t0 += s->page_size) {
        size_t n = T - t0 < s->page_size ? T - t0 : s->page_size;
        if (ly->n_pages == ly->cap_pages) {
            size_t cap = ly->cap_pages ? 2 * ly->cap_pages : 16;
            ls_kv_page *np = ls_mem_realloc(LS_MEM_SCRATCH, ly->pages, cap * sizeof *np);
            if (!np) return LS_ERR_NOMEM;
            ly->pages = np;
            ly->cap_pages = cap;
        }
        ls_kv_page *pg = &ly->pages[ly->n_pages];
        ls_real **dst[3] = {&pg->k, &pg->v, &pg->x};
        int ok = 1;
        for (int j = 0; j < 3; j++) {
            *dst[j] = NULL;
            if (!src[j]) continue;
            *dst[j] = ls_mem_alloc_in(s->cat, sp, R(n * rows[j])); /* right-sized, never a view into a parent */
            if (!*dst[j] || ls_mem_copy(*dst[j], sp, src[j] + t0 * rows[j], LS_MEM_SPACE_HOST, R(n * rows[j])) != LS_OK)
                ok = 0;
        }
        if (!ok) {
            for (int j = 0; j < 3; j++) ls_mem_free(*dst[j]);
            return LS_ERR_NOMEM;
        }
        pg->n = n;
        pg->pos0 = pos0 + (int64_t)t0;
        pg->dec = (ls_decisions){0, 0};
        pg->dec_set = 0;
        ly->n_pages++;
    }
    return LS_OK;
}

void LS_K(ls_state_note_decisions)(ls_layer_state *s, int64_t pos0, const ls_decisions *d) {
    for (size_t i = 0; i < s->n_pages; i++)
        if (s->pages[i].pos0 == pos0) {
            s->pages[i].dec = *d;
            s->pages[i].dec_set = 1;
            return;
        }
}

ls_status LS_K(ls_state_check_decisions)(const ls_layer_state *s, int l, int64_t pos0, const ls_decisions *d) {
    for (size_t i = 0; i < s->n_pages; i++) {
        const ls_kv_page *pg = &s->pages[i];
        if (pg->pos0 != pos0 || !pg->dec_set) continue;
        if (ls_decisions_equal(&pg->dec, d)) return LS_OK;
        fprintf(stderr, "longstraw: layer %d, positions from %lld: the recompute decided differently from the "
                "forward it differentiates (%llu decisions, digest %016llx; the forward's: %llu, %016llx)\n", l,
                (long long)pos0, (unsigned long long)d->count, (unsigned long long)d->digest,
                (unsigned long long)pg->dec.count, (unsigned long long)pg->dec.digest);
        return LS_ERR_INTERNAL;
    }
    return LS_OK;
}

/* An owned copy of the n bytes at src (zeroed instead when zero); *dst NULL for NULL src. */
static int own_copy(ls_real **dst, const ls_real *src, ls_mem_cat cat, int zero) {
    *dst = NULL;
    if (!src) return 1;
    size_t bytes = ls_mem_size(src);
    *dst = ls_mem_alloc(cat, bytes);
    if (!*dst) return 0;
    if (!zero) memcpy(*dst, src, bytes);
    return 1;
}

ls_status LS_K(ls_state_derive)(ls_state *d, const ls_state *s, ls_mem_cat cat, int borrow, int zero) {
    memset(d, 0, sizeof *d);
    d->fam = s->fam;
    d->n_layers = s->n_layers;
    d->n_pos = s->n_pos;
    d->page_size = s->page_size;
    d->cat = cat;
    d->host_rows = borrow && (ls_mem_cat_tier(s->cat) == LS_TIER_HOST || s->host_rows); /* stage.h */
    d->ly = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)d->n_layers * sizeof *d->ly);
    if (!d->ly) return LS_ERR_NOMEM;
    for (int l = 0; l < d->n_layers; l++) {
        const ls_layer_state *sl = &s->ly[l];
        ls_layer_state *dl = &d->ly[l];
        dl->cp = sl->cp; /* a fork reads the same remote context */
        if (!sl->n_pages) continue;
        dl->pages = ls_mem_alloc(LS_MEM_SCRATCH, sl->n_pages * sizeof *dl->pages);
        if (!dl->pages) return LS_ERR_NOMEM;
        dl->cap_pages = sl->n_pages;
        if (borrow && sl->n_pages > d->n_borrowed) d->n_borrowed = sl->n_pages;
        for (size_t i = 0; i < sl->n_pages; i++, dl->n_pages++) {
            const ls_kv_page *sp = &sl->pages[i];
            ls_kv_page *pg = &dl->pages[i];
            *pg = *sp;
            if (borrow) continue;
            int ok = own_copy(&pg->k, sp->k, cat, zero);
            ok &= own_copy(&pg->v, sp->v, cat, zero);
            if (zero) pg->x = NULL;
            else ok &= own_copy(&pg->x, sp->x, cat, 0);
            if (!ok) {
                dl->n_pages++; /* the state's free releases this page's parts */
                return LS_ERR_NOMEM;
            }
        }
    }
    return LS_OK;
}
