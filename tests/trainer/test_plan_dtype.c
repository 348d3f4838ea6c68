/* test_plan_dtype.c - the plan's element sizes are inputs, not the build's
 * real type (plan.h): the float64 library's plan at 4-byte elements is the
 * float32 library's plan (what longstraw-plan --dtype f32 prints is what
 * longstraw-train at f32 checks), term by term, for every shipped config and
 * several step shapes; and the mla MoE dispatch buffers (the routed tokens'
 * rows, mla_layer.c) follow --dtype: their real part is reals x element size
 * against a hand count, so bf16 halves what f32 plans, f32 halves f64. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "trainer/families/mla/mla_config.h"
#include "trainer/model/config.h"
#include "trainer/plan/plan.h"
#include "tests/trainer/test_model_config.h"

#ifndef LS_REAL_F64
#error "test_plan_dtype is compiled as float64 and calls the float32 library by name"
#endif
/* The float32 library's names (plan.h declares this build's only). */
void ls_plan_in_defaults_f32(ls_plan_in *in, const ls_model_config *cfg);
ls_status ls_plan_compute_f32(const ls_plan_in *in, ls_plan *out, char *err, size_t err_len);

/* Every byte figure of two plans, with the name of the first that differs. */
static void same_plan(const ls_plan *a, const ls_plan *b, const char *what) {
    cr_assert_eq(a->shard, b->shard, "%s: shard", what);
    cr_assert_eq(memcmp(&a->state, &b->state, sizeof a->state), 0, "%s: prompt state", what);
    for (int k = 0; k < LS_MEM_COUNT; ++k) {
        cr_assert_eq(a->fixed[k], b->fixed[k], "%s: fixed %s: %zu (f64 build) vs %zu (f32 build)", what,
                     ls_mem_cat_name((ls_mem_cat)k), a->fixed[k], b->fixed[k]);
        for (int p = 0; p < LS_PLAN_PHASES; ++p)
            cr_assert_eq(a->phase[p][k], b->phase[p][k], "%s: %s %s: %zu (f64 build) vs %zu (f32 build)", what,
                         ls_plan_phase_name((ls_plan_phase)p), ls_mem_cat_name((ls_mem_cat)k), a->phase[p][k],
                         b->phase[p][k]);
    }
    cr_assert_eq(a->peak_total, b->peak_total, "%s: peak", what);
    cr_assert_eq(a->peak_phase, b->peak_phase, "%s: peak phase", what);
    cr_assert_eq(a->keep_reference, b->keep_reference, "%s: keep_reference", what);
}

Test(plan_dtype, f64_build_at_4_bytes_is_the_f32_build) {
    static const char *const cfgs[] = {"hybrid-tiny.json", "hybrid-small.json", "mla-tiny.json", "mla-small.json",
                                       "original/qwen3.6-27b.json", "original/glm-5.2.json"};
    static const struct { size_t P, R, G; int world, full, lora, experts; } shapes[] = {
        {1024, 8, 1, 1, 0, 1, 0}, {2048, 8, 1, 2, 1, 1, 0}, {4096, 32, 8, 4, 1, 1, 1},
        {1024, 300, 4, 1, 1, 0, 0}, {2048, 64, 16, 2, 0, 1, 1}};
    char err[512];
    int n = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; ++i) {
        ls_model_config c = ls_test_model_config(cfgs[i]);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; ++s) {
            ls_plan_in a, b;
            ls_plan_in_defaults_f64(&a, &c);
            ls_plan_in_defaults_f32(&b, &c);
            cr_assert_eq(b.compute_bytes, 4, "the float32 build's default element");
            a.compute_bytes = a.state_bytes = 4; /* longstraw-plan --dtype f32 */
            a.P = b.P = shapes[s].P;
            a.R = b.R = shapes[s].R;
            a.G = b.G = shapes[s].G;
            a.world = b.world = shapes[s].world;
            a.obj.grad_mode = b.obj.grad_mode = shapes[s].full ? LS_GRAD_FULL : LS_GRAD_DETACHED;
            a.obj.train_mode = b.obj.train_mode = shapes[s].lora ? LS_TRAIN_LORA : LS_TRAIN_FULL;
            a.obj.lora_experts = b.obj.lora_experts = shapes[s].experts;
            ls_plan pa, pb;
            cr_assert_eq(ls_plan_compute_f64(&a, &pa, err, sizeof err), LS_OK, "%s", err);
            cr_assert_eq(ls_plan_compute_f32(&b, &pb, err, sizeof err), LS_OK, "%s", err);
            char what[256];
            snprintf(what, sizeof what, "%s, P %zu R %zu G %zu CP %d %s %s%s", cfgs[i], shapes[s].P, shapes[s].R,
                     shapes[s].G, shapes[s].world, shapes[s].full ? "full" : "detached",
                     shapes[s].lora ? "lora" : "full-train", shapes[s].experts ? " +experts" : "");
            same_plan(&pa, &pb, what);
            ++n;
        }
    }
    cr_log_info("%d plans equal across the builds", n);
}

/* The replay's moe_dispatch of mla-tiny at element size esz, by hand: one
 * MoE chunk of C = min(256, R) tokens, each routed to k experts, holds per
 * routed row the forward's x and expert output (2d), the expert's three
 * intermediates (3 Ie) and, with expert adapters, their three rank-r rows;
 * the backward's dx, dy (2d) and three intermediate gradients (3 Ie); and
 * the slot tables (int32 + two size_t per routed row). */
static size_t hand_dispatch(const ls_model_config *c, size_t R, size_t r, size_t esz) {
    size_t C = R < 256 ? R : 256, Ck = C * (size_t)ls_mla_keys_of(c)->experts_per_token;
    size_t d = (size_t)c->d_model, Ie = (size_t)ls_mla_keys_of(c)->expert_dim;
    size_t reals = Ck * (2 * d + 3 * Ie + 3 * r) + Ck * (2 * d + 3 * Ie);
    return reals * esz + Ck * (sizeof(int32_t) + 2 * sizeof(size_t));
}

Test(plan_dtype, mla_dispatch_follows_dtype) {
    ls_model_config c = ls_test_model_config("mla-tiny.json");
    char err[512];
    for (int experts = 0; experts < 2; ++experts) {
        size_t got[9] = {0};
        for (size_t esz = 2; esz <= 8; esz *= 2) {
            ls_plan_in in;
            ls_plan_in_defaults_f64(&in, &c);
            in.compute_bytes = in.state_bytes = esz;
            in.P = 2048;
            in.R = 8;
            in.world = 2;
            in.obj.grad_mode = LS_GRAD_FULL;
            in.obj.lora_experts = experts;
            ls_plan p;
            cr_assert_eq(ls_plan_compute_f64(&in, &p, err, sizeof err), LS_OK, "%s", err);
            size_t r = experts ? (size_t)in.obj.lora_r : 0;
            size_t want = hand_dispatch(&c, in.R, r, esz);
            got[esz] = p.phase[LS_PLAN_REPLAY][LS_MEM_DISPATCH];
            cr_log_info("mla-tiny replay moe_dispatch at %zu-byte elements%s: %zu (hand %zu)", esz,
                        experts ? ", expert adapters" : "", got[esz], want);
            cr_assert_eq(got[esz], want, "%zu-byte elements%s: plan %zu, hand count %zu", esz,
                         experts ? " with expert adapters" : "", got[esz], want);
        }
        /* the real part halves from f64 to f32 and from f32 to bf16 (the slot tables do not) */
        size_t ib = hand_dispatch(&c, 8, 0, 0);
        cr_assert_eq(got[8] - ib, 2 * (got[4] - ib));
        cr_assert_eq(got[4] - ib, 2 * (got[2] - ib));
    }
}
