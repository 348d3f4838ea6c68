/* test_dense_family.c - the dense family's table (trainer/families/dense, issue 41) against counts written
 * out here from docs/model.md §1.2/§5 (not from the builder): every layer an attention layer (norm1, norm2,
 * q_norm, k_norm and the 7 adapted linears q, k, v, o, gate, up, down), no gdn.* tensor; the closed-form
 * parameter count of config.c equals the scalars the built table holds; the carried state is attention KV
 * pages only (2 x positions x attn_kv_heads x head_dim per layer), labelled with the dense table, and a
 * segment's state holds exactly what the plan says; the config's keys are the hybrid attention keys, the same
 * entries as the hybrid's (a GDN key refused naming the hybrid family; the JSON round trip; the GDN keys of
 * the block 0).  The fault: a table one tensor short of the
 * count fails naming the tensor.  Built per real type. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/families/dense/dense_config.h"
#include "trainer/families/dense/dense_family.h"
#include "trainer/families/hybrid/hybrid_family.h"

#define K(x) LS_K(x)
#define CFG LS_SOURCE_DIR "/trainer/families/dense/dense-tiny.json"

/* The dense table's parameters (the registry's ls_params_init does the same through cfg->family; tests/
 * test_family.c holds every family's table to its descriptor). */
static ls_params *init(const ls_model_config *c, const ls_objective *o) {
    char err[512] = "";
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init_of)(&K(ls_family_dense).layout, &p, c, o, 5, err, sizeof err), LS_OK, "%s", err);
    p->fam = &K(ls_family_dense);
    return p;
}

static ls_model_config load(void) {
    ls_model_config c;
    char err[512];
    cr_assert_eq(ls_config_load(&c, CFG, err, sizeof err), LS_OK, "%s", err);
    return c;
}

TestSuite(dense, .timeout = 120);

Test(dense, the_table_is_attention_layers_only_as_counted_by_hand) {
    ls_model_config c = load();
    cr_assert_eq(c.family, &ls_family_desc_dense);
    cr_expect_str_eq(ls_family_name(c.family), "dense");
    for (int mode = 0; mode < 2; mode++) {
        ls_objective o;
        ls_objective_defaults(&o);
        o.train_mode = mode ? LS_TRAIN_FULL : LS_TRAIN_LORA;
        o.lora_r = 3;
        char err[512];
        size_t counted = 0;
        K(ls_params_tensor_count_of)(&K(ls_family_dense).layout, &c, &o, &counted);
        size_t hand = 3 + (size_t)c.n_layers * (4 + 7 * (mode ? 1 : 3));
        cr_expect_eq(counted, hand, "mode %d: counted %zu, docs/model.md by hand %zu", mode, counted, hand);
        ls_params *p = init(&c, &o);
        cr_expect_eq(p->n, counted);
        cr_expect_eq(p->fam, &K(ls_family_dense));
        cr_expect_eq(p->fam->desc, &ls_family_desc_dense);
        size_t base = 0, adapters = 0;
        for (size_t i = 0; i < p->n; i++) {
            cr_expect(strstr(p->t[i].name, ".gdn.") == NULL, "a GDN tensor in a dense model: %s", p->t[i].name);
            *(p->t[i].is_adapter ? &adapters : &base) += p->t[i].numel;
        }
        for (int l = 0; l < c.n_layers; l++) {
            const ls_hybrid_layer *ly = &ls_hybrid_layers(p)[l];
            cr_expect(ly->is_attn, "layer %d is not attention", l);
            cr_expect(ly->q.W && ly->k.W && ly->v.W && ly->o.W && ly->q_norm && ly->k_norm, "layer %d's views", l);
            cr_expect(!ly->in_qkv.W && !ly->conv, "layer %d has GDN views", l);
            cr_expect_str_eq(ls_config_layer_kind(&c, l), "attn");
        }
        ls_param_counts pc;
        cr_assert_eq(ls_config_param_counts(&c, &o, &pc, err, sizeof err), LS_OK, "%s", err);
        cr_expect_eq(pc.base, base, "closed form %zu base scalars, table %zu", pc.base, base);
        cr_expect_eq(pc.adapters, adapters, "closed form %zu adapter scalars, table %zu", pc.adapters, adapters);
        /* by hand: embed + lm_head, final norm, per layer two norms, q (2 H hd x d), k, v, o, q/k norms, MLP */
        const ls_hybrid_keys *k = ls_hybrid_keys_of(&c);
        size_t d = (size_t)c.d_model, H = (size_t)k->attn_heads, Hkv = (size_t)k->attn_kv_heads, hd = (size_t)k->head_dim;
        size_t I = (size_t)c.ffn_dim, L = (size_t)c.n_layers;
        size_t by_hand = 2 * (size_t)c.vocab * d + d +
                         L * (2 * d + 2 * H * hd * d + 2 * Hkv * hd * d + d * H * hd + 2 * hd + 3 * I * d);
        cr_expect_eq(base, by_hand, "table %zu base scalars, by hand %zu", base, by_hand);
        K(ls_params_free)(p);
    }
}

Test(dense, the_state_is_kv_pages_labelled_dense_and_as_planned) {
    ls_model_config c = load();
    ls_objective o;
    ls_objective_defaults(&o);
    ls_params *p = init(&c, &o);
    const ls_family_ops *f = p->fam;
    size_t T = 21, row = (size_t)ls_hybrid_keys_of(&c)->attn_kv_heads * (size_t)ls_hybrid_keys_of(&c)->head_dim;
    size_t want = 2 * T * row * (size_t)c.n_layers * sizeof(ls_real);
    cr_expect_eq(f->state_plan_bytes(&c, (int64_t)T), want, "planned %zu, by hand %zu", f->state_plan_bytes(&c, (int64_t)T),
                 want);
    ls_state s, fork;
    cr_assert_eq(f->state_init(&s, p, 8, LS_MEM_PROMPT_STATE), LS_OK);
    cr_expect_eq(s.fam, f, "the state is labelled with the dense table");
    for (int l = 0; l < c.n_layers; l++) cr_expect(!s.ly[l].fixed0 && !s.ly[l].fixed1, "layer %d: fixed buffers", l);
    int32_t tok[21];
    for (size_t t = 0; t < T; t++) tok[t] = (int32_t)((t * 7 + 3) % (size_t)c.vocab);
    ls_seg_io io = {.tokens = tok, .T = T, .state_out = &s, .tape_cat = LS_MEM_SCRATCH};
    cr_assert_eq(f->segment_forward(p, &io), LS_OK);
    cr_expect_eq(K(ls_state_bytes)(&s), want, "state %zu bytes, planned %zu", K(ls_state_bytes)(&s), want);
    cr_expect_eq(s.ly[0].n_pages, (T + 7) / 8, "pages of 8: %zu", s.ly[0].n_pages);
    cr_assert_eq(f->state_fork(&fork, &s, LS_MEM_SCRATCH), LS_OK);
    cr_expect_eq(fork.fam, f, "a fork keeps the label");
    K(ls_state_free)(&fork);
    K(ls_state_free)(&s);
    cr_expect_null(s.fam);
    K(ls_params_free)(p);
}

Test(dense, config_keys_are_the_hybrid_attention_keys) {
    ls_model_config c = load();
    const ls_hybrid_keys *k = ls_hybrid_keys_of(&c);
    cr_expect(k->gdn_hk == 0 && k->gdn_hv == 0 && k->conv_kernel == 0, "GDN keys set in a dense config");
    cr_expect_eq(ls_family_desc_dense.n_keys, 4);
    for (size_t i = 0; i < ls_family_desc_dense.n_keys; i++) { /* one definition: the hybrid's entry */
        const ls_family_key *d = &ls_family_desc_dense.keys[i], *h = NULL;
        for (size_t j = 0; j < ls_family_desc_hybrid.n_keys; j++)
            if (!strcmp(ls_family_desc_hybrid.keys[j].key, d->key)) h = &ls_family_desc_hybrid.keys[j];
        cr_expect_eq(d, h, "dense key '%s' is not the hybrid's entry", d->key);
    }
    cJSON *j = ls_config_to_json(&c, NULL);
    cr_assert_not_null(j);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(j, "gdn_hk"), "a GDN key written for a dense config");
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(j, "attn_kv_heads"));
    ls_model_config back;
    char err[512] = "";
    cr_expect_eq(ls_config_from_json(&back, j, "round trip", err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(memcmp(&back, &c, sizeof c), 0, "the round trip changed the config");
    cJSON_AddNumberToObject(j, "conv_kernel", 4);
    cr_expect_neq(ls_config_from_json(&back, j, "cfg.json", err, sizeof err), LS_OK, "a GDN key accepted");
    cr_expect(strstr(err, "cfg.json: key 'conv_kernel'") && strstr(err, "hybrid family"), "%s", err);
    cJSON_DeleteItemFromObject(j, "conv_kernel");
    cJSON_DeleteItemFromObject(j, "rope_dim");
    cr_expect_neq(ls_config_from_json(&back, j, "cfg.json", err, sizeof err), LS_OK, "rope_dim missing accepted");
    cr_expect(strstr(err, "key 'rope_dim': missing"), "%s", err);
    cJSON_Delete(j);
}

/* The fault: the dense table one tensor short of its count fails naming the tensor it could not add. */
Test(dense, a_table_one_short_fails_naming_the_tensor) {
    ls_model_config c = load();
    ls_objective o;
    ls_objective_defaults(&o);
    size_t n = 0;
    K(ls_params_tensor_count_of)(&K(ls_family_dense).layout, &c, &o, &n);
    ls_tensor *t = calloc(n, sizeof *t);
    ls_init_kind *kinds = calloc(n, sizeof *kinds);
    double *stds = calloc(n, sizeof *stds);
    cr_assert(t && kinds && stds);
    ls_param_builder b = {.cfg = &c, .obj = &o, .t = t, .kinds = kinds, .stds = stds, .cap = n - 1};
    K(ls_family_dense).layout.build(&b, NULL);
    cr_expect_eq(b.st, LS_ERR_INTERNAL, "one short: %s", ls_status_str(b.st));
    cr_expect(strstr(b.err, "'lm_head.weight'") != NULL, "%s", b.err);
    free(t);
    free(kinds);
    free(stds);
}
