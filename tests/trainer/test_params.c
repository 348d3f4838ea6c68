/* test_params.c - the parameter table is counted, not guessed (issue 12):
 * the family's counted tensor list equals the table ls_params_init builds
 * and the capacity it allocates, for hybrid-tiny and hybrid-small in both
 * train modes and several LoRA settings, against a count written out here
 * from docs/model.md §1/§5 (not from the builder); adding beyond the counted
 * capacity fails with LS_ERR_INTERNAL naming the tensor; an unknown family
 * is refused naming the key 'family' (mla: test_mla).  Built per real type. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/families/mla/mla_config.h"
#include "trainer/model/family.h"
#include "trainer/families/hybrid/hybrid_family.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/families/families.h"
#include "tests/trainer/test_model_config.h"

#define K(x) LS_K(x)

/* docs/model.md §5 by hand: embed, final norm, lm_head; an attention layer has
 * norm1, norm2, q_norm, k_norm and 7 linears (q, k, v, o, gate, up, down),
 * all LoRA targets; a GDN layer norm1, norm2, conv, A_log, dt_bias, norm,
 * 6 adapted linears (in_qkv, in_z, out, gate, up, down) and 2 plain ones
 * (in_b, in_a).  An adapted linear is 3 tensors in lora mode, else 1. */
static size_t hand_count(const ls_model_config *c, int lora) {
    size_t per_lin = lora ? 3 : 1, n = 3;
    for (int l = 0; l < c->n_layers; l++)
        n += (l + 1) % 4 == 0 ? 4 + 7 * per_lin : 6 + 2 + 6 * per_lin;
    return n;
}

static void check_counted(const char *cfg_name, ls_train_mode mode, int r, int init_random) {
    ls_model_config c = ls_test_model_config(cfg_name);
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_r = r;
    o.lora_init_random = init_random;
    const char *m = mode == LS_TRAIN_LORA ? "lora" : "full";
    char err[512];
    size_t counted = 0;
    cr_assert_eq(K(ls_params_tensor_count)(&c, &o, &counted, err, sizeof err), LS_OK, "%s", err);
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 3, err, sizeof err), LS_OK, "%s", err);
    size_t cap = ls_mem_size(p->t) / sizeof(ls_tensor), hand = hand_count(&c, mode == LS_TRAIN_LORA);
    cr_log_info("%s %s r=%d: counted %zu, built %zu, capacity %zu, by hand %zu\n", cfg_name, m, r, counted, p->n,
                cap, hand);
    cr_expect_eq(p->n, counted, "%s %s r=%d: built %zu tensors, counted %zu", cfg_name, m, r, p->n, counted);
    cr_expect_eq(cap, counted, "%s %s r=%d: table capacity %zu, counted %zu", cfg_name, m, r, cap, counted);
    cr_expect_eq(ls_mem_size(p->t), counted * sizeof(ls_tensor), "%s %s: the table is exactly the count", cfg_name, m);
    cr_expect_eq(counted, hand, "%s %s r=%d: counted %zu, docs/model.md by hand %zu", cfg_name, m, r, counted, hand);
    /* every tensor named, shaped and distinct; the views point into the table */
    for (size_t i = 0; i < p->n; i++) {
        cr_expect(p->t[i].name[0] && p->t[i].numel > 0, "tensor %zu", i);
        cr_expect_eq(K(ls_params_find)(p, p->t[i].name), &p->t[i], "'%s' twice", p->t[i].name);
    }
    const ls_hybrid_layer *ly = ls_hybrid_layers(p);
    for (int l = 0; l < c.n_layers; l++) {
        const ls_tensor *w = ly[l].gate.W;
        cr_expect(w >= p->t && w < p->t + p->n, "layer %d's gate view", l);
        cr_expect_eq(ly[l].gate.A != NULL, mode == LS_TRAIN_LORA, "layer %d's gate adapter", l);
    }
    cr_expect_eq(p->fam, &K(ls_family_hybrid));
    K(ls_params_free)(p);
}

Test(params, counted_table_equals_the_built_table) {
    const char *cfgs[] = {"hybrid-tiny.json", "hybrid-small.json"};
    const ls_train_mode modes[] = {LS_TRAIN_LORA, LS_TRAIN_FULL};
    const int rs[] = {1, 16};
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 2; m++)
            for (int r = 0; r < 2; r++)
                for (int ir = 0; ir < 2; ir++) check_counted(cfgs[k], modes[m], rs[r], ir);
}

/* The fault: a table one tensor short of the family's list, and a small
 * table filled past its end.  add() must fail loudly, never hand back a
 * silent NULL that later code dereferences. */
Test(params, adding_beyond_the_counted_capacity_fails_loudly) {
    ls_model_config c = ls_test_model_config("hybrid-tiny.json");
    ls_objective o;
    ls_objective_defaults(&o);
    size_t n = 0;
    char err[512];
    cr_assert_eq(K(ls_params_tensor_count)(&c, &o, &n, err, sizeof err), LS_OK, "%s", err);
    cr_assert_gt(n, 3);
    ls_tensor *t = calloc(n, sizeof *t);
    ls_init_kind *kinds = calloc(n, sizeof *kinds);
    double *stds = calloc(n, sizeof *stds);
    cr_assert(t && kinds && stds);
    ls_param_builder b = {.cfg = &c, .obj = &o, .t = t, .kinds = kinds, .stds = stds, .cap = n - 1};
    K(ls_family_hybrid).layout.build(&b, NULL);
    cr_expect_eq(b.st, LS_ERR_INTERNAL, "one short: %s", ls_status_str(b.st));
    cr_expect_eq(b.n, n - 1);
    cr_expect(strstr(b.err, "'lm_head.weight'") != NULL, "the message names the tensor: %s", b.err);
    cr_log_info("one short: %s\n", b.err);
    /* exactly the count: no error */
    ls_param_builder ok = {.cfg = &c, .obj = &o, .t = t, .kinds = kinds, .stds = stds, .cap = n};
    K(ls_family_hybrid).layout.build(&ok, NULL);
    cr_expect_eq(ok.st, LS_OK, "%s", ok.err);
    cr_expect_eq(ok.n, n);
    /* by hand: two fit, the third is refused and so is every later one */
    ls_param_builder s = {.cfg = &c, .obj = &o, .t = t, .kinds = kinds, .stds = stds, .cap = 2};
    cr_expect_not_null(K(ls_params_add)(&s, "a", 2, 0, LS_INIT_ZERO, 0, 0));
    cr_expect_not_null(K(ls_params_add)(&s, "b", 2, 3, LS_INIT_NORMAL, 1, 0));
    cr_expect_null(K(ls_params_add)(&s, "c", 4, 0, LS_INIT_ONE, 0, 0));
    cr_expect_eq(s.st, LS_ERR_INTERNAL);
    cr_expect(strstr(s.err, "'c'") != NULL, "%s", s.err);
    cr_expect_null(K(ls_params_add)(&s, "d", 1, 0, LS_INIT_ONE, 0, 0));
    cr_expect_eq(s.n, 2);
    free(t);
    free(kinds);
    free(stds);
}

Test(params, a_family_without_a_transaction_has_a_table_but_no_cli) {
    /* both families have a tensor list (test_mla checks mla's) and the
     * one-rank transaction (test_mla_train): the CLI accepts both */
    ls_model_config c = ls_test_model_config("mla-tiny.json");
    ls_objective o;
    ls_objective_defaults(&o);
    char err[512] = "";
    size_t n = 0;
    cr_expect_eq(K(ls_params_tensor_count)(&c, &o, &n, err, sizeof err), LS_OK, "%s", err);
    cr_expect_gt(n, 0);
    cr_expect_not_null(K(ls_family_ops_of)(&ls_family_desc_hybrid, err, sizeof err));
    cr_expect_not_null(K(ls_family_ops_of)(&ls_family_desc_mla, err, sizeof err));
    /* a family this trainer has no table for is refused naming the key */
    static const ls_family_desc unregistered = {.name = "unregistered"};
    cr_expect_null(K(ls_family_ops_of)(&unregistered, err, sizeof err));
    cr_expect(strstr(err, "'family'"), "%s", err);
}
