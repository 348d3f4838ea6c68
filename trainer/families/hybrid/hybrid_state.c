/* hybrid_state.c - carried state of the hybrid family: KV pages of the
 * attention layers, conv tail (fixed0) and recurrent state S (fixed1) of
 * the GDN layers (state.h's table). */
#include <string.h>

#include "common/checked.h"
#include "trainer/families/hybrid/hybrid_family.h"

/* Sizes saturate at SIZE_MAX (common/checked.h): a config whose state does
 * not fit size_t plans SIZE_MAX bytes, which no budget admits, and the
 * allocation of SIZE_MAX bytes is refused by the tracker. */
static size_t gdn_C(const ls_model_config *c) {
    return ls_sat_add(ls_sat_mul3(2, (size_t)ls_hybrid_keys_of(c)->gdn_hk, (size_t)ls_hybrid_keys_of(c)->gdn_dk),
                      ls_sat_mul((size_t)ls_hybrid_keys_of(c)->gdn_hv, (size_t)ls_hybrid_keys_of(c)->gdn_dv));
}
static size_t tail_len(const ls_model_config *c) {
    return ls_sat_mul((size_t)(ls_hybrid_keys_of(c)->conv_kernel > 0 ? ls_hybrid_keys_of(c)->conv_kernel - 1 : 0), gdn_C(c));
}
static size_t S_len(const ls_model_config *c) {
    return ls_sat_mul3((size_t)ls_hybrid_keys_of(c)->gdn_hv, (size_t)ls_hybrid_keys_of(c)->gdn_dk, (size_t)ls_hybrid_keys_of(c)->gdn_dv);
}

ls_status LS_K(ls_hybrid_state_init)(ls_state *s, const ls_params *p, size_t page_size, ls_mem_cat cat) {
    memset(s, 0, sizeof *s);
    s->fam = &LS_K(ls_family_hybrid);
    s->n_layers = p->cfg.n_layers;
    s->page_size = page_size ? page_size : 64;
    s->cat = cat;
    s->ly = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)s->n_layers * sizeof *s->ly); /* metadata: not state bytes */
    if (!s->ly) return LS_ERR_NOMEM;
    for (int l = 0; l < s->n_layers; l++) {
        if (ls_hybrid_layers(p)[l].is_attn) continue;
        s->ly[l].fixed0 = ls_mem_alloc(cat, ls_sat_mul(tail_len(&p->cfg), sizeof(ls_real)));
        s->ly[l].fixed1 = ls_mem_alloc(cat, ls_sat_mul(S_len(&p->cfg), sizeof(ls_real)));
        if (!s->ly[l].fixed0 || !s->ly[l].fixed1) {
            LS_K(ls_hybrid_state_free)(s);
            return LS_ERR_NOMEM;
        }
    }
    return LS_OK;
}

/* ls_state_derive, and the GDN layers' conv tail and recurrent state:
 * copied, or zeroed (a gradient). */
static ls_status derive(ls_state *d, const ls_state *s, ls_mem_cat cat, int borrow, int zero) {
    ls_status st = LS_K(ls_state_derive)(d, s, cat, borrow, zero);
    for (int l = 0; l < d->n_layers && st == LS_OK; l++) {
        const ls_layer_state *sl = &s->ly[l];
        ls_layer_state *dl = &d->ly[l];
        if (sl->fixed0) {
            size_t tb = ls_mem_size(sl->fixed0), sb = ls_mem_size(sl->fixed1);
            dl->fixed0 = ls_mem_alloc(cat, tb);
            dl->fixed1 = ls_mem_alloc(cat, sb);
            if (!dl->fixed0 || !dl->fixed1) st = LS_ERR_NOMEM;
            else if (!zero) {
                memcpy(dl->fixed0, sl->fixed0, tb);
                memcpy(dl->fixed1, sl->fixed1, sb);
            }
        }
    }
    if (st != LS_OK) LS_K(ls_hybrid_state_free)(d);
    return st;
}

ls_status LS_K(ls_hybrid_state_fork)(ls_state *dst, const ls_state *src, ls_mem_cat cat) {
    return derive(dst, src, cat, 1, 0);
}

ls_status LS_K(ls_hybrid_state_grad_like)(ls_state *dst, const ls_state *src, ls_mem_cat cat) {
    return derive(dst, src, cat, 0, 1);
}

void LS_K(ls_hybrid_state_free)(ls_state *s) {
    if (!s) return;
    if (s->cp_start) {
        LS_K(ls_hybrid_state_free)(s->cp_start);
        ls_mem_free(s->cp_start);
        s->cp_start = NULL;
    }
    if (!s->ly) return;
    for (int l = 0; l < s->n_layers; l++) {
        ls_layer_state *ly = &s->ly[l];
        for (size_t i = s->n_borrowed < ly->n_pages ? s->n_borrowed : ly->n_pages; i < ly->n_pages; i++) {
            ls_mem_free(ly->pages[i].k);
            ls_mem_free(ly->pages[i].v);
        }
        ls_mem_free(ly->pages);
        ls_mem_free(ly->fixed0);
        ls_mem_free(ly->fixed1);
    }
    ls_mem_free(s->ly);
    memset(s, 0, sizeof *s);
}

size_t LS_K(ls_hybrid_state_bytes)(const ls_state *s) {
    size_t b = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const ls_layer_state *ly = &s->ly[l];
        for (size_t i = s->n_borrowed < ly->n_pages ? s->n_borrowed : ly->n_pages; i < ly->n_pages; i++)
            b += ls_mem_size(ly->pages[i].k) + ls_mem_size(ly->pages[i].v);
        b += ls_mem_size(ly->fixed0) + ls_mem_size(ly->fixed1);
    }
    return b;
}

size_t LS_K(ls_hybrid_state_plan_bytes)(const ls_model_config *c, int64_t n_pos) {
    size_t b = 0, pos = n_pos > 0 ? (size_t)n_pos : 0;
    size_t kv = ls_sat_mul3(2, pos, ls_sat_mul((size_t)ls_hybrid_keys_of(c)->attn_kv_heads, (size_t)ls_hybrid_keys_of(c)->head_dim));
    size_t gdn = ls_sat_add(tail_len(c), S_len(c));
    for (int l = 0; l < c->n_layers; l++)
        b = ls_sat_add(b, ls_hybrid_cfg_is_attn(c, l) ? kv : gdn);
    return ls_sat_mul(b, sizeof(ls_real));
}

size_t LS_K(ls_hybrid_state_analytical_bytes)(const ls_params *p, int64_t n_pos) {
    return LS_K(ls_hybrid_state_plan_bytes)(&p->cfg, n_pos);
}
