/* test_mla.c - the mla family in the trainer (issue 12), float64 (and
 * test_mla_f32: the same checks, the forward to float32 rounding):
 *  - its parameter table equals a count written out here from docs/model.md §3,
 *    §5 (tensors and scalars; lora with and without lora_experts, full),
 *    the indexer and router_bias are frozen in both modes;
 *  - its names and shapes are exactly those the independent reference
 *    (tests/reference/mla_ref.py --random-weights) writes: the trainer's
 *    loader accepts the file only when every tensor matches both ways;
 *  - the single-rank forward (ls_mla_logprobs, naive and absorbed) gives
 *    the reference's per-member log-probs (mla_ref.py --json, policy and
 *    reference policy) to 1e-10 with the DSA top-k active, and two
 *    negative controls (the top-k forced dense, a perturbed router bias)
 *    break the agreement;
 *  - so do the training transaction's segments (a chunked prompt capture
 *    into the carried state, one branch per member), both MLA forms. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/trainer/test_model_config.h"
#include "tests/support/test_tmpdir.h"
#include "trainer/families/mla/mla_family.h"
#include "trainer/families/mla/mla_layer.h"
#include "trainer/io/params_io.h"
#include "trainer/families/families.h"
#include "trainer/families/hybrid/hybrid_family.h"

#define K(x) LS_K(x)
#define REF LS_SOURCE_DIR "/tests/reference/mla_ref.py"
/* agreement with the reference: float64 to rounding; float32 (test_mla_f32) its own rounding */
#define TOL (LS_REAL_IS_F64 ? 1e-10 : 1e-4)
#define CONTROL_MIN (LS_REAL_IS_F64 ? 1e-6 : 1e-2)

/* ---- the table ---------------------------------------------------------------- */

/* docs/model.md §5 by hand: embed, final norm, lm_head; per layer 6 vectors
 * (norm1, norm2, q_a_norm, kv_a_norm, indexer k_norm weight and bias), 5
 * adapted attention linears (q_a, q_b, kv_a, kv_b, o), 3 plain indexer
 * linears (q, k, w); a dense layer 3 adapted MLP linears; an MoE layer
 * router, router_bias, 3 adapted shared-expert linears and 3 per routed
 * expert (adapted only with lora_experts).  Adapted: 3 tensors in lora mode. */
static size_t hand_tensors(const ls_model_config *c, int lora, int lora_experts) {
    size_t a = lora ? 3 : 1, ae = lora && lora_experts ? 3 : 1, n = 3;
    for (int l = 0; l < c->n_layers; l++) {
        n += 6 + 5 * a + 3;
        n += l < ls_mla_keys_of(c)->first_dense ? 3 * a : 2 + 3 * a + 3 * ae * (size_t)ls_mla_keys_of(c)->n_experts;
    }
    return n;
}

/* Scalars by hand: base weights, the adapters (r (in + out) per adapted
 * linear) and the frozen ones (indexer, router_bias). */
static void hand_scalars(const ls_model_config *c, size_t r, int lora_experts, size_t *base, size_t *adapt,
                         size_t *frozen) {
    size_t d = c->d_model, V = c->vocab, H = ls_mla_keys_of(c)->heads, rq = ls_mla_keys_of(c)->q_rank, rkv = ls_mla_keys_of(c)->kv_rank, dn = ls_mla_keys_of(c)->d_nope;
    size_t dr = ls_mla_keys_of(c)->d_rope, dv = ls_mla_keys_of(c)->d_v, HI = ls_mla_keys_of(c)->index_heads, dI = ls_mla_keys_of(c)->index_dim, E = ls_mla_keys_of(c)->n_experts;
    size_t Ie = ls_mla_keys_of(c)->expert_dim, I = c->ffn_dim;
    *base = 2 * V * d + d;
    *adapt = *frozen = 0;
    size_t lins[][2] = {{rq, d}, {H * (dn + dr), rq}, {rkv + dr, d}, {H * (dn + dv), rkv}, {d, H * dv}};
    for (int l = 0; l < c->n_layers; l++) {
        *base += 2 * d + rq + rkv;
        for (int j = 0; j < 5; j++) *base += lins[j][0] * lins[j][1], *adapt += r * (lins[j][0] + lins[j][1]);
        size_t idx = HI * dI * rq + dI * d + HI * d + 2 * dI;
        *base += idx;
        *frozen += idx;
        if (l < ls_mla_keys_of(c)->first_dense) {
            *base += 3 * I * d;
            *adapt += r * 3 * (I + d);
        } else {
            *base += E * d + E + 3 * Ie * d * (E + 1);
            *frozen += E;
            *adapt += r * 3 * (Ie + d) * (1 + (lora_experts ? E : 0));
        }
    }
}

static void check_table(const char *cfg, ls_train_mode mode, int lora_experts) {
    ls_model_config c = ls_test_model_config(cfg);
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_experts = lora_experts;
    char err[512] = "";
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 5, err, sizeof err), LS_OK, "%s: %s", cfg, err);
    int lora = mode == LS_TRAIN_LORA;
    size_t want = hand_tensors(&c, lora, lora_experts), n = 0;
    cr_expect_eq(p->n, want, "%s %s lora_experts %d: %zu tensors, docs/model.md names %zu", cfg, lora ? "lora" : "full",
                 lora_experts, p->n, want);
    cr_expect_eq(K(ls_params_tensor_count)(&c, &o, &n, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(n, want);
    size_t base, adapt, frozen, got_base = 0, got_adapt = 0;
    hand_scalars(&c, (size_t)o.lora_r, lora_experts, &base, &adapt, &frozen);
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        *(t->is_adapter ? &got_adapt : &got_base) += t->numel;
        int fz = strstr(t->name, ".indexer.") || strstr(t->name, ".router_bias");
        cr_expect_eq(t->trainable, lora ? t->is_adapter : !fz, "%s: trainable %d", t->name, t->trainable);
        if (fz) cr_expect(!t->trainable && !t->g && !t->m, "%s: frozen, yet trainable", t->name);
        if (t->is_adapter)
            cr_expect(!strstr(t->name, ".indexer.") && !strstr(t->name, ".router.") &&
                          (lora_experts || !strstr(t->name, ".experts.")),
                      "%s: not a docs/model.md §3 target", t->name);
    }
    cr_expect_eq(got_base, base, "%s: %zu base scalars, by hand %zu", cfg, got_base, base);
    cr_expect_eq(got_adapt, lora ? adapt : 0, "%s: %zu adapter scalars, by hand %zu", cfg, got_adapt, adapt);
    cr_expect_eq(p->n_trainable, lora ? adapt : base - frozen, "%s: %zu trainable", cfg, p->n_trainable);
    /* the views reach the table */
    const ls_mla_layer *ly = &K(ls_mla_layers)(p)[c.n_layers - 1];
    ls_mla_mlp m = K(ls_mla_expert)(p, ly, (size_t)ls_mla_keys_of(&c)->n_experts - 1);
    char nm[96];
    snprintf(nm, sizeof nm, "layers.%d.moe.experts.%d.down.weight", c.n_layers - 1, ls_mla_keys_of(&c)->n_experts - 1);
    cr_expect_str_eq(m.down.W->name, nm);
    cr_expect_eq(m.down.A != NULL, lora && lora_experts);
    cr_expect_str_eq(K(ls_mla_layers)(p)[0].mlp.up.W->name, "layers.0.mlp.up.weight");
    cr_expect(K(ls_mla_layers)(p)[0].is_moe == 0 && ly->is_moe == 1);
    K(ls_params_free)(p);
}

Test(mla, table_equals_the_hand_count) {
    const char *cfgs[] = {"mla-tiny.json", "mla-small.json"};
    for (int i = 0; i < 2; i++) {
        check_table(cfgs[i], LS_TRAIN_LORA, 0);
        check_table(cfgs[i], LS_TRAIN_LORA, 1);
        check_table(cfgs[i], LS_TRAIN_FULL, 0);
    }
}

/* ---- the reference's files ------------------------------------------------------ */

static char tmp[256];
static void mk(void) { ls_test_tmpdir_make(tmp, "mla"); }
static void rm_tmp(void) { ls_test_tmpdir_remove(tmp); }

static void ref_weights(const char *path, const char *extra) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 %s --random-weights %s/configs/mla-tiny.json %s --seed 7 %s >/dev/null", REF,
             LS_SOURCE_DIR, path, extra);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static ls_params *params_for(ls_train_mode mode, int lora_experts) {
    ls_model_config c = ls_test_model_config("mla-tiny.json");
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_experts = lora_experts;
    o.lora_r = 4;
    char err[512] = "";
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 1, err, sizeof err), LS_OK, "%s", err);
    return p;
}

Test(mla, names_are_the_references, .init = mk, .fini = rm_tmp) {
    struct {
        const char *flags;
        ls_train_mode mode;
        int lora_experts;
    } cases[] = {{"--lora-r 4", LS_TRAIN_LORA, 0}, {"--lora-r 4 --lora-experts", LS_TRAIN_LORA, 1},
                 {"", LS_TRAIN_FULL, 0}};
    char path[3][320], err[512];
    for (int i = 0; i < 3; i++) {
        snprintf(path[i], sizeof path[i], "%s/w%d.safetensors", tmp, i);
        ref_weights(path[i], cases[i].flags);
        ls_params *p = params_for(cases[i].mode, cases[i].lora_experts);
        cr_expect_eq(K(ls_params_load)(p, path[i], err, sizeof err), LS_OK, "'%s': %s", cases[i].flags, err);
        K(ls_params_free)(p);
    }
    /* control: the loader does compare names; another target set is refused, naming a tensor */
    ls_params *p = params_for(LS_TRAIN_LORA, 0);
    cr_expect_neq(K(ls_params_load)(p, path[1], err, sizeof err), LS_OK);
    cr_expect(strstr(err, "experts"), "%s", err);
    cr_expect_neq(K(ls_params_load)(p, path[2], err, sizeof err), LS_OK);
    cr_expect(strstr(err, "lora_"), "%s", err);
    K(ls_params_free)(p);
}

/* ---- the forward against the reference ---------------------------------------- */

enum { P_LEN = 32, G_N = 2 };
static const size_t R_LEN[G_N] = {6, 3};
static const double TEMP = 0.9;

typedef struct {
    int32_t prompt[P_LEN], resp[G_N][8];
    double policy[G_N][8], refpol[G_N][8];
} fixture;

static void build_fixture(fixture *f, const ls_params *p) {
    uint64_t s = 12345;
    for (int t = 0; t < P_LEN; t++) s = s * 6364136223846793005ULL + 1442695040888963407ULL, f->prompt[t] = (int32_t)((s >> 33) % 256);
    for (int i = 0; i < G_N; i++)
        for (size_t t = 0; t < R_LEN[i]; t++)
            s = s * 6364136223846793005ULL + 1442695040888963407ULL, f->resp[i][t] = (int32_t)((s >> 33) % 256);
    /* the batch (docs/model.md §6) the reference reads */
    ls_objective o = p->obj;
    o.temperature = TEMP;
    cJSON *b = cJSON_CreateObject(), *resp = cJSON_CreateArray(), *rw = cJSON_CreateArray();
    cJSON *adv = cJSON_CreateArray(), *old = cJSON_CreateArray(), *ref = cJSON_CreateArray();
    cJSON_AddItemToObject(b, "config", ls_config_to_json(&p->cfg, &o));
    cJSON_AddItemToObject(b, "prompt", cJSON_CreateIntArray(f->prompt, P_LEN));
    for (int i = 0; i < G_N; i++) {
        cJSON_AddItemToArray(resp, cJSON_CreateIntArray(f->resp[i], (int)R_LEN[i]));
        cJSON_AddItemToArray(rw, cJSON_CreateNumber(i));
        cJSON_AddItemToArray(adv, cJSON_CreateNumber(0));
        double z[8] = {0};
        cJSON_AddItemToArray(old, cJSON_CreateDoubleArray(z, (int)R_LEN[i]));
        cJSON_AddItemToArray(ref, cJSON_CreateDoubleArray(z, (int)R_LEN[i]));
    }
    cJSON_AddItemToObject(b, "responses", resp);
    cJSON_AddItemToObject(b, "rewards", rw);
    cJSON_AddItemToObject(b, "advantages", adv);
    cJSON_AddItemToObject(b, "old_logprobs", old);
    cJSON_AddItemToObject(b, "ref_logprobs", ref);
    char path[320], cmd[1200];
    snprintf(path, sizeof path, "%s/batch.json", tmp);
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    char *txt = cJSON_PrintUnformatted(b);
    fputs(txt, fp);
    fclose(fp);
    free(txt);
    cJSON_Delete(b);
    snprintf(cmd, sizeof cmd, "python3 %s %s/w.safetensors %s --json %s/ref.json", REF, tmp, path, tmp);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/ref.json", tmp);
    fp = fopen(path, "r");
    cr_assert_not_null(fp);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "ref.json does not parse");
    const char *keys[2] = {"policy", "ref_policy"};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        cr_assert(cJSON_IsArray(a) && cJSON_GetArraySize(a) == G_N, "ref.json: %s", keys[k]);
        for (int i = 0; i < G_N; i++) {
            const cJSON *m = cJSON_GetArrayItem(a, i);
            cr_assert(cJSON_GetArraySize(m) == (int)R_LEN[i]);
            for (size_t t = 0; t < R_LEN[i]; t++)
                (k ? f->refpol : f->policy)[i][t] = cJSON_GetArrayItem(m, (int)t)->valuedouble;
        }
    }
    cJSON_Delete(j);
}

/* The largest |ours - reference| over every member and token. */
static double max_diff(const ls_params *p, const fixture *f, double (*want)[8], ls_mla_form form) {
    ls_real lp[G_N][8];
    ls_real *out[G_N];
    const int32_t *resp[G_N];
    for (int i = 0; i < G_N; i++) out[i] = lp[i], resp[i] = f->resp[i];
    ls_mla_fwd_opts o = {.form = form, .moe_chunk = 5}; /* several dispatch chunks */
    char err[512] = "";
    cr_assert_eq(K(ls_mla_logprobs)(p, f->prompt, P_LEN, resp, R_LEN, G_N, TEMP, &o, out, err, sizeof err), LS_OK,
                 "%s", err);
    double m = 0;
    for (int i = 0; i < G_N; i++)
        for (size_t t = 0; t < R_LEN[i]; t++) {
            cr_assert(isfinite(lp[i][t]) && lp[i][t] < 0);
            double e = fabs((double)lp[i][t] - want[i][t]);
            if (e > m) m = e;
        }
    return m;
}

/* The same through the training transaction's segments (mla_segment.c): the prompt captured in
 * chunks of 10 (pages of 4), each member a branch from it; MoE chunks of 5. */
static double seg_max_diff(ls_params *p, const fixture *f, double (*want)[8], ls_mla_form form) {
    ls_mla_seg_opts so = {.fixed_form = 1, .form = form, .moe_chunk = 5};
    K(ls_mla_set_seg_opts)(&so);
    double temp0 = p->obj.temperature;
    p->obj.temperature = TEMP;
    ls_state ps;
    cr_assert_eq(p->fam->state_init(&ps, p, 4, LS_MEM_PROMPT_STATE), LS_OK);
    for (size_t t0 = 0; t0 < P_LEN - 1; t0 += 10) {
        size_t n = P_LEN - 1 - t0 < 10 ? P_LEN - 1 - t0 : 10;
        ls_seg_io io = {.tokens = f->prompt + t0, .T = n, .pos0 = (int64_t)t0, .ctx = t0 ? &ps : NULL,
                        .state_out = &ps};
        cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
    }
    double m = 0;
    for (int i = 0; i < G_N; i++) {
        int32_t in[8];
        ls_real lp[8];
        in[0] = f->prompt[P_LEN - 1];
        memcpy(in + 1, f->resp[i], (R_LEN[i] - 1) * sizeof *in);
        ls_seg_io io = {.tokens = in, .T = R_LEN[i], .pos0 = P_LEN - 1, .ctx = &ps, .targets = f->resp[i],
                        .logp = lp};
        cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
        for (size_t t = 0; t < R_LEN[i]; t++) m = fmax(m, fabs((double)lp[t] - want[i][t]));
    }
    p->fam->state_free(&ps);
    p->obj.temperature = temp0;
    K(ls_mla_set_seg_opts)(NULL);
    return m;
}

Test(mla, forward_equals_the_reference, .init = mk, .fini = rm_tmp) {
    char path[320], err[512];
    snprintf(path, sizeof path, "%s/w.safetensors", tmp);
    ref_weights(path, "--lora-r 4"); /* lora_B random: the adapters change the policy */
    ls_params *p = params_for(LS_TRAIN_LORA, 0);
    cr_assert_eq(K(ls_params_load)(p, path, err, sizeof err), LS_OK, "%s", err);
    cr_assert_lt(ls_mla_keys_of(&p->cfg)->index_topk, P_LEN - 1, "the top-k must be active");
    fixture f;
    build_fixture(&f, p);
    double dn = max_diff(p, &f, f.policy, LS_MLA_NAIVE), da = max_diff(p, &f, f.policy, LS_MLA_ABSORBED);
    ls_params *v = NULL;
    cr_assert_eq(K(ls_params_ref_view)(&v, p), LS_OK);
    double dr = max_diff(v, &f, f.refpol, LS_MLA_NAIVE);
    double pol_ref = 0;
    for (int i = 0; i < G_N; i++)
        for (size_t t = 0; t < R_LEN[i]; t++) pol_ref = fmax(pol_ref, fabs(f.policy[i][t] - f.refpol[i][t]));
    fprintf(stderr,
            "mla forward (" LS_REAL_NAME ") vs mla_ref.py: max |dlogp| naive %.3g, absorbed %.3g, reference policy %.3g "
            "(policy - reference policy %.3g)\n",
            dn, da, dr, pol_ref);
    cr_expect_leq(dn, TOL, "naive: %.3g", dn);
    cr_expect_leq(da, TOL, "absorbed: %.3g", da);
    cr_expect_leq(dr, TOL, "reference policy: %.3g", dr);
    double sn = seg_max_diff(p, &f, f.policy, LS_MLA_NAIVE), sa = seg_max_diff(p, &f, f.policy, LS_MLA_ABSORBED);
    double sr = seg_max_diff(v, &f, f.refpol, LS_MLA_NAIVE);
    fprintf(stderr, "mla segments (" LS_REAL_NAME ") vs mla_ref.py: naive %.3g, absorbed %.3g, reference policy %.3g\n",
            sn, sa, sr);
    cr_expect_leq(sn, TOL, "segments, naive: %.3g", sn);
    cr_expect_leq(sa, TOL, "segments, absorbed: %.3g", sa);
    cr_expect_leq(sr, TOL, "segments, reference policy: %.3g", sr);
    cr_expect_gt(pol_ref, CONTROL_MIN, "the adapters must matter (%.3g)", pol_ref);
    /* negative control 1: the top-k forced dense */
    int k0 = ls_mla_keys_of(&p->cfg)->index_topk;
    ls_mla_keys_mut(&p->cfg)->index_topk = 1 << 20;
    double dd = max_diff(p, &f, f.policy, LS_MLA_NAIVE);
    ls_mla_keys_mut(&p->cfg)->index_topk = k0;
    /* negative control 2: one expert's router bias raised (routing changes, weights do not) */
    ls_tensor *rb = K(ls_params_find)(p, "layers.2.moe.router_bias");
    cr_assert_not_null(rb);
    rb->w[3] += 1.0;
    double db = max_diff(p, &f, f.policy, LS_MLA_NAIVE);
    rb->w[3] -= 1.0;
    fprintf(stderr, "controls: dense top-k %.3g, perturbed router_bias %.3g\n", dd, db);
    cr_expect_gt(dd, CONTROL_MIN, "a dense top-k must differ (%.3g)", dd);
    cr_expect_gt(db, CONTROL_MIN, "a perturbed router_bias must differ (%.3g)", db);
    cr_expect_leq(max_diff(p, &f, f.policy, LS_MLA_NAIVE), TOL, "restored");
    K(ls_params_free)(v);
    K(ls_params_free)(p);
}

Test(mla, forward_refuses_bad_arguments) {
    ls_params *p = params_for(LS_TRAIN_LORA, 0);
    int32_t prompt[3] = {1, 2, 3}, y[2] = {4, 256};
    const int32_t *resp[1] = {y};
    size_t len[1] = {2};
    ls_real lp[2];
    ls_real *out[1] = {lp};
    char err[512] = "";
    cr_expect_eq(K(ls_mla_logprobs)(p, prompt, 3, resp, len, 1, 1.0, NULL, out, err, sizeof err), LS_ERR_ARG);
    cr_expect(strstr(err, "member 0 token 1"), "%s", err);
    y[1] = 5;
    cr_expect_eq(K(ls_mla_logprobs)(p, prompt, 0, resp, len, 1, 1.0, NULL, out, err, sizeof err), LS_ERR_ARG);
    cr_expect(strstr(err, "prompt"), "%s", err);
    cr_expect_eq(K(ls_mla_logprobs)(p, prompt, 3, resp, len, 1, 0.0, NULL, out, err, sizeof err), LS_ERR_ARG);
    cr_expect(strstr(err, "temperature"), "%s", err);
    /* a one-token prompt: no prompt segment, the branch starts at position 0 */
    cr_expect_eq(K(ls_mla_logprobs)(p, prompt, 1, resp, len, 1, 1.0, NULL, out, err, sizeof err), LS_OK, "%s", err);
    K(ls_params_free)(p);
}
