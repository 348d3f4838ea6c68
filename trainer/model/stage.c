/* stage.c - see stage.h. */
#include "trainer/model/stage.h"

#include <stdlib.h>
#include <string.h>

int LS_K(ls_state_in_host)(const ls_state *s) {
    return s && (ls_mem_cat_tier(s->cat) == LS_TIER_HOST || s->host_rows);
}

ls_status LS_K(ls_stager_init)(ls_stager *sg, const ls_state *s) {
    memset(sg, 0, sizeof *sg);
    sg->src = s;
    sg->slot[0].l = sg->slot[1].l = -1;
    if (!LS_K(ls_state_in_host)(s)) return LS_OK;
    sg->view = *s;
    sg->view.ly = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)s->n_layers * sizeof *sg->view.ly);
    if (!sg->view.ly) return LS_ERR_NOMEM;
    for (int l = 0; l < s->n_layers; l++) sg->view.ly[l] = (ls_layer_state){.cp = s->ly[l].cp};
    sg->staging = 1;
    return LS_OK;
}

/* The fault stage-skip-page (--fault, recorded in the run's config; tests/trainer/state_tier.sh): a staging that
 * leaves each layer's last page unstaged (zeros), which the bitwise comparison of the tiers must detect. */
static int skip_page;
void LS_K(ls_stage_set_fault_skip_page)(int on) { skip_page = on; }
static int fault_skip_page(void) { return skip_page; }

static ls_tier_handle copy(char **at, ls_real **dst, const ls_real *src, ls_tier_handle h, int skip) {
    if (!src) return h;
    size_t n = ls_mem_size(src);
    *dst = (ls_real *)*at;
    *at += (n + 63) / 64 * 64;
    return skip ? h : ls_tier_stage_begin(*dst, src, n);
}

/* Begin staging layer l into slot s. */
static ls_status slot_begin(ls_stager *sg, ls_stage_slot *s, int l) {
    const ls_layer_state *sl = &sg->src->ly[l];
    size_t bytes = 0;
    for (size_t i = 0; i < sl->n_pages; i++) {
        const ls_kv_page *pg = &sl->pages[i];
        const ls_real *r[3] = {pg->k, pg->v, pg->x};
        for (int j = 0; j < 3; j++)
            if (r[j]) bytes += (ls_mem_size(r[j]) + 63) / 64 * 64;
    }
    if (sl->fixed0) bytes += (ls_mem_size(sl->fixed0) + 63) / 64 * 64;
    if (sl->fixed1) bytes += (ls_mem_size(sl->fixed1) + 63) / 64 * 64;
    s->buf = ls_mem_alloc_in(LS_MEM_STAGING, ls_mem_tier_space(LS_TIER_DEVICE), bytes); /* where the layer reads */
    s->pages = sl->n_pages ? ls_mem_alloc(LS_MEM_SCRATCH, sl->n_pages * sizeof *s->pages) : NULL;
    if (!s->buf || (sl->n_pages && !s->pages)) {
        ls_mem_free(s->buf);
        ls_mem_free(s->pages);
        s->buf = NULL;
        s->pages = NULL;
        return LS_ERR_NOMEM;
    }
    char *at = s->buf;
    ls_tier_handle h = 0;
    int skip = fault_skip_page();
    s->ly = (ls_layer_state){.pages = s->pages, .cp = sl->cp, .n_pages = sl->n_pages, .cap_pages = sl->n_pages};
    for (size_t i = 0; i < sl->n_pages; i++) {
        const ls_kv_page *pg = &sl->pages[i];
        ls_kv_page *dp = &s->pages[i];
        *dp = *pg;
        int sk = skip && i + 1 == sl->n_pages;
        h = copy(&at, &dp->k, pg->k, h, sk);
        h = copy(&at, &dp->v, pg->v, h, sk);
        h = copy(&at, &dp->x, pg->x, h, sk);
    }
    h = copy(&at, &s->ly.fixed0, sl->fixed0, h, 0);
    h = copy(&at, &s->ly.fixed1, sl->fixed1, h, 0);
    s->h = h;
    s->l = l;
    return LS_OK;
}

static void slot_free(ls_stager *sg, ls_stage_slot *s) {
    if (s->l < 0) return;
    ls_tier_stage_wait(s->h); /* never free a buffer a copy still writes */
    ls_mem_free(s->buf);
    ls_mem_free(s->pages);
    if (sg->view.ly[s->l].pages == s->pages || sg->view.ly[s->l].fixed0 == s->ly.fixed0)
        sg->view.ly[s->l] = (ls_layer_state){.cp = sg->src->ly[s->l].cp};
    *s = (ls_stage_slot){.l = -1};
}

static ls_stage_slot *slot_of(ls_stager *sg, int l) {
    for (int i = 0; i < 2; i++)
        if (sg->slot[i].l == l) return &sg->slot[i];
    return NULL;
}

ls_status LS_K(ls_stager_acquire)(ls_stager *sg, int l, int next) {
    if (!sg->staging) return LS_OK;
    ls_stage_slot *s = slot_of(sg, l);
    if (!s) {
        s = sg->slot[0].l != next || next < 0 ? &sg->slot[0] : &sg->slot[1];
        slot_free(sg, s);
        ls_status st = slot_begin(sg, s, l);
        if (st != LS_OK) return st;
    }
    ls_tier_stage_wait(s->h);
    sg->view.ly[l] = s->ly;
    if (next >= 0 && next < sg->src->n_layers && next != l && !slot_of(sg, next)) {
        ls_stage_slot *o = s == &sg->slot[0] ? &sg->slot[1] : &sg->slot[0];
        slot_free(sg, o);
        ls_status st = slot_begin(sg, o, next);
        if (st != LS_OK) return st;
    }
    return LS_OK;
}

void LS_K(ls_stager_release)(ls_stager *sg, int l) {
    if (!sg->staging) return;
    ls_stage_slot *s = slot_of(sg, l);
    if (s) slot_free(sg, s);
}

void LS_K(ls_stager_free)(ls_stager *sg) {
    if (!sg->staging) return;
    slot_free(sg, &sg->slot[0]);
    slot_free(sg, &sg->slot[1]);
    ls_mem_free(sg->view.ly);
    memset(sg, 0, sizeof *sg);
}
