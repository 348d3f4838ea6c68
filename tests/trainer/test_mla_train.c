/* test_mla_train.c - the mla family's training transaction on one rank
 * (issue 12), at mla-tiny sizes with the DSA top-k active (23 prompt
 * positions, index_topk 8) and the routed MoE in several chunks.  float64
 * (test_mla_train) and float32 (test_mla_train_f32, looser bars; no finite
 * differences).  Independent references:
 *  - the naive gradient: one taped segment per member over prompt +
 *    response (no carried state, no prompt backward), against LongStraw's
 *    `full` gradient (capture in chunks, branches, prompt backward);
 *  - `detached` against the naive segment with the stop-gradient at the
 *    prompt/response cut, and not equal to `full`;
 *  - directional central differences of the loss for every trainable
 *    tensor, the loss from ls_mla_logprobs (mla_forward.c: a second forward
 *    that shares no segment, tape or backward code), with a negative
 *    control (the detached gradient fails the same check);
 *  - absorbed and naive MLA forms: log-probs and gradients;
 *  - the DSA selection over the carried pages is global: the same log-probs
 *    for one page, pages of 1 and of 3, also when every key ties (the tie
 *    rule across blocks), against the single-block second forward;
 *  - the carried state's bytes against (kv_rank + d_rope + index_dim) reals
 *    per token and layer; the moe_dispatch peak is one chunk's buffers
 *    (ls_mla_dispatch_bytes), independent of the sequence length;
 *  - longstraw-train on mla-tiny, both modes and strategies, 2 steps: the
 *    runs score audit level 1 and the naive strategy's losses equal
 *    LongStraw's; under mpirun the CLI refuses the family by name. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "tests/support/test_tmpdir.h"
#include "trainer/families/mla/mla_family.h"
#include "trainer/families/mla/mla_layer.h"
#include "trainer/families/families.h"
#include "trainer/families/hybrid/hybrid_family.h"

#define K(x) LS_K(x)
#define GTOL (LS_REAL_IS_F64 ? 1e-10 : 2e-4)

enum { P = 24, G = 3, RMAX = 9, CHUNK = 7, PAGE = 4 };
static const size_t RL[G] = {7, 4, 9};

typedef struct {
    int32_t prompt[P], resp[G][RMAX];
    ls_real c[G][RMAX]; /* loss = sum c . logp */
} fixture;

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}
static double unif(uint64_t *s) { return (double)lcg(s) / 9007199254740992.0 * 2 - 1; }

static void make_fixture(fixture *f) {
    uint64_t s = 99;
    for (int t = 0; t < P; t++) f->prompt[t] = (int32_t)(lcg(&s) % 256);
    for (int i = 0; i < G; i++)
        for (size_t t = 0; t < RL[i]; t++) {
            f->resp[i][t] = (int32_t)(lcg(&s) % 256);
            f->c[i][t] = (ls_real)unif(&s);
        }
}

static ls_params *make_params(ls_train_mode mode, int lora_experts) {
    ls_model_config c;
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/configs/mla-tiny.json", LS_SOURCE_DIR);
    cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_experts = lora_experts;
    o.lora_r = 4;
    o.temperature = 0.8;
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 3, err, sizeof err), LS_OK, "%s", err);
    uint64_t s = 7;
    for (size_t i = 0; i < p->n; i++) { /* adapters non-zero, so that every one of them matters */
        ls_tensor *t = &p->t[i];
        if (t->is_adapter)
            for (size_t j = 0; j < t->numel; j++) t->w[j] = (ls_real)(0.2 * unif(&s));
        if (strstr(t->name, "router_bias")) /* a non-trivial routing buffer */
            for (size_t j = 0; j < t->numel; j++) t->w[j] = (ls_real)(0.05 * unif(&s));
    }
    cr_assert_lt(ls_mla_keys_of(&p->cfg)->index_topk, P - 1, "the top-k must be active");
    return p;
}

static size_t n_grad(const ls_params *p) {
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += p->t[i].trainable ? p->t[i].numel : 0;
    return n;
}
static double *grab(const ls_params *p) {
    double *g = malloc(n_grad(p) * sizeof *g);
    cr_assert_not_null(g);
    size_t o = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) g[o++] = (double)p->t[i].g[j];
    return g;
}
/* max |a - b| / max |b| */
static double rel(const double *a, const double *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i])), s = fmax(s, fabs(b[i]));
    return s > 0 ? m / s : m;
}

/* Naive: one taped segment per member over prompt + response; cut: the stop-gradient at P-1. */
static double *grad_naive(ls_params *p, const fixture *f, int cut, double *loss) {
    K(ls_params_zero_grads)(p);
    *loss = 0;
    for (int i = 0; i < G; i++) {
        size_t R = RL[i], T = P + R - 1;
        int32_t in[P + RMAX];
        ls_real lp[RMAX];
        memcpy(in, f->prompt, sizeof f->prompt);
        memcpy(in + P, f->resp[i], (R - 1) * sizeof *in);
        ls_seg_tape *tape = NULL;
        ls_seg_io io = {.tokens = in, .T = T, .targets = f->resp[i], .score_from = P - 1, .logp = lp, .tape = &tape,
                        .tape_cat = LS_MEM_BRANCH, .grad_cut = cut ? P - 1 : 0};
        cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
        for (size_t t = 0; t < R; t++) *loss += (double)(f->c[i][t] * lp[t]);
        cr_assert_eq(p->fam->segment_backward(p, tape, f->c[i], NULL, NULL, NULL, NULL), LS_OK);
        p->fam->tape_free(tape);
    }
    return grab(p);
}

/* LongStraw: the prompt captured in chunks (pages of PAGE), G branches from it, and in full mode the
 * prompt backward from the accumulated state gradient.  ps_bytes (NULL: no) the state's bytes. */
/* corrupt (with full): checkpoint rows of one chunk of layer 2 changed before the prompt backward, whose
 * status goes to *pb instead of being asserted. */
static double *grad_longstraw_c(ls_params *p, const fixture *f, int full, double *loss, size_t *ps_bytes, int corrupt,
                                ls_status *pb) {
    const ls_family_ops *F = p->fam;
    size_t L = (size_t)p->cfg.n_layers, d = (size_t)p->cfg.d_model, T = P - 1;
    K(ls_params_zero_grads)(p);
    *loss = 0;
    ls_state ps, dps;
    memset(&dps, 0, sizeof dps);
    cr_assert_eq(F->state_init(&ps, p, PAGE, LS_MEM_PROMPT_STATE), LS_OK);
    ls_real *ck[8], *ckc[8];
    cr_assert_leq(L, 8);
    for (size_t l = 0; l < L; l++) ck[l] = calloc(T * d, sizeof(ls_real));
    for (size_t t0 = 0; t0 < T; t0 += CHUNK) {
        size_t n = T - t0 < CHUNK ? T - t0 : CHUNK;
        for (size_t l = 0; l < L; l++) ckc[l] = ck[l] + t0 * d;
        ls_seg_io io = {.tokens = f->prompt + t0, .T = n, .pos0 = (int64_t)t0, .ctx = t0 ? &ps : NULL,
                        .state_out = &ps, .checkpoints = ckc};
        cr_assert_eq(F->segment_forward(p, &io), LS_OK);
    }
    if (ps_bytes) *ps_bytes = F->state_bytes(&ps);
    if (full) cr_assert_eq(F->state_grad_like(&dps, &ps, LS_MEM_PROMPT_GRAD), LS_OK);
    for (int i = 0; i < G; i++) {
        size_t R = RL[i];
        int32_t in[RMAX];
        ls_real lp[RMAX];
        in[0] = f->prompt[P - 1];
        memcpy(in + 1, f->resp[i], (R - 1) * sizeof *in);
        ls_seg_tape *tape = NULL;
        ls_seg_io io = {.tokens = in, .T = R, .pos0 = P - 1, .ctx = &ps, .targets = f->resp[i], .logp = lp,
                        .tape = &tape, .tape_cat = LS_MEM_BRANCH};
        cr_assert_eq(F->segment_forward(p, &io), LS_OK);
        for (size_t t = 0; t < R; t++) *loss += (double)(f->c[i][t] * lp[t]);
        cr_assert_eq(F->segment_backward(p, tape, f->c[i], full ? &dps : NULL, NULL, NULL, NULL), LS_OK);
        F->tape_free(tape);
    }
    if (full && corrupt) {
        for (size_t j = CHUNK * d; j < 2 * CHUNK * d; j++) ck[2][j] = -ck[2][j];
        *pb = F->prompt_backward(p, f->prompt, T, CHUNK, ck, &ps, &dps, LS_MEM_SCRATCH, NULL, NULL);
    } else if (full) {
        cr_assert_eq(F->prompt_backward(p, f->prompt, T, CHUNK, ck, &ps, &dps, LS_MEM_SCRATCH, NULL, NULL), LS_OK);
    }
    F->state_free(&dps);
    F->state_free(&ps);
    for (size_t l = 0; l < L; l++) free(ck[l]);
    return grab(p);
}

static double *grad_longstraw(ls_params *p, const fixture *f, int full, double *loss, size_t *ps_bytes) {
    return grad_longstraw_c(p, f, full, loss, ps_bytes, 0, NULL);
}

/* The loss by the second forward (mla_forward.c). */
static double loss_fwd(const ls_params *p, const fixture *f) {
    ls_real lp[G][RMAX];
    ls_real *out[G];
    const int32_t *resp[G];
    for (int i = 0; i < G; i++) out[i] = lp[i], resp[i] = f->resp[i];
    ls_mla_fwd_opts o = {.form = LS_MLA_NAIVE, .moe_chunk = 5};
    char err[512] = "";
    cr_assert_eq(K(ls_mla_logprobs)(p, f->prompt, P, resp, RL, G, p->obj.temperature, &o, out, err, sizeof err),
                 LS_OK, "%s", err);
    double s = 0;
    for (int i = 0; i < G; i++)
        for (size_t t = 0; t < RL[i]; t++) s += (double)(f->c[i][t] * lp[i][t]);
    return s;
}

/* The worst over the trainable tensors of max |a - b| / max |b| within the tensor (tensors with a
 * zero reference gradient: max |a|); name: that tensor. */
static double rel_per_tensor(const ls_params *p, const double *a, const double *b, const char **name) {
    double worst = 0;
    size_t o = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        double e = rel(a + o, b + o, t->numel);
        if (e > worst) worst = e, *name = t->name;
        o += t->numel;
    }
    return worst;
}

static void set_opts(ls_mla_form form, size_t chunk) {
    ls_mla_seg_opts o = {.fixed_form = 1, .form = form, .moe_chunk = chunk};
    K(ls_mla_set_seg_opts)(&o);
}

static void modes_case(ls_train_mode mode, int lora_experts) {
    ls_params *p = make_params(mode, lora_experts);
    fixture f;
    make_fixture(&f);
    set_opts(LS_MLA_NAIVE, 5);
    size_t n = n_grad(p);
    double ln, lf, ld, lc;
    double *gn = grad_naive(p, &f, 0, &ln), *gf = grad_longstraw(p, &f, 1, &lf, NULL);
    double *gd = grad_longstraw(p, &f, 0, &ld, NULL), *gc = grad_naive(p, &f, 1, &lc);
    double e_full = rel(gf, gn, n), e_det = rel(gd, gc, n), d_fd = rel(gd, gf, n);
    double lref = loss_fwd(p, &f);
    const char *wn = "", *wd = "";
    double t_full = rel_per_tensor(p, gf, gn, &wn), t_det = rel_per_tensor(p, gd, gc, &wd);
    fprintf(stderr, "  per tensor: full vs naive worst %.3g (%s), detached vs naive-cut worst %.3g (%s)\n", t_full, wn,
            t_det, wd);
    cr_expect_leq(t_full, 100 * GTOL, "%s: %.3g", wn, t_full);
    cr_expect_leq(t_det, 100 * GTOL, "%s: %.3g", wd, t_det);
    fprintf(stderr,
            "mla train (" LS_REAL_NAME ", %s%s): %zu trainable scalars; full vs naive %.3g, detached vs naive-cut "
            "%.3g, detached vs full %.3g; loss %.12g (second forward %.12g)\n",
            mode == LS_TRAIN_LORA ? "lora" : "full", lora_experts ? " +experts" : "", n, e_full, e_det, d_fd, ln,
            lref);
    cr_expect_leq(e_full, GTOL, "full vs naive: %.3g", e_full);
    cr_expect_leq(e_det, GTOL, "detached vs naive with the cut: %.3g", e_det);
    cr_expect_gt(d_fd, 1e-3, "the prompt-state path must matter (detached vs full %.3g)", d_fd);
    cr_expect_leq(fabs(lf - ln), GTOL * (1 + fabs(ln)));
    cr_expect_leq(fabs(ld - ln), GTOL * (1 + fabs(ln)));
    cr_expect_leq(fabs(lref - ln), GTOL * (1 + fabs(ln)), "the second forward's loss %.12g vs %.12g", lref, ln);
    /* several experts took part: with adapters on the experts, count those with a gradient */
    if (lora_experts) {
        int used = 0;
        char nm[96];
        for (int l = ls_mla_keys_of(&p->cfg)->first_dense; l < p->cfg.n_layers; l++)
            for (int e = 0; e < ls_mla_keys_of(&p->cfg)->n_experts; e++) {
                snprintf(nm, sizeof nm, "layers.%d.moe.experts.%d.down.lora_A", l, e);
                ls_tensor *t = K(ls_params_find)(p, nm);
                cr_assert_not_null(t, "%s", nm);
                double s = 0;
                for (size_t j = 0; j < t->numel; j++) s += fabs((double)t->g[j]);
                used += s > 0;
            }
        fprintf(stderr, "  routed experts with a gradient: %d of %d\n", used,
                ls_mla_keys_of(&p->cfg)->n_experts * (p->cfg.n_layers - ls_mla_keys_of(&p->cfg)->first_dense));
        cr_expect_geq(used, 6, "several experts must be used (%d)", used);
    }
    free(gn), free(gf), free(gd), free(gc);
    K(ls_params_free)(p);
}

Test(mla_train, full_equals_naive_detached_equals_the_cut) {
    modes_case(LS_TRAIN_LORA, 1);
    modes_case(LS_TRAIN_LORA, 0);
    modes_case(LS_TRAIN_FULL, 0);
}

/* Directional central differences of the second forward's loss, one random direction per trainable tensor. */
static void fd_case(ls_train_mode mode, int lora_experts) {
    ls_params *p = make_params(mode, lora_experts);
    fixture f;
    make_fixture(&f);
    set_opts(LS_MLA_NAIVE, 5);
    double l0, ld;
    double *g = grad_longstraw(p, &f, 1, &l0, NULL), *gd = grad_longstraw(p, &f, 0, &ld, NULL);
    uint64_t s = 1234;
    double worst = 0, worst_det = 0;
    const char *wn = "";
    size_t off = 0, nt = 0;
    double eps = 1e-5;
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        double *u = malloc(t->numel * sizeof *u), an = 0, ad = 0;
        ls_real *w0 = malloc(t->numel * sizeof *w0);
        memcpy(w0, t->w, t->numel * sizeof *w0);
        for (size_t j = 0; j < t->numel; j++) {
            u[j] = unif(&s);
            an += u[j] * g[off + j];
            ad += u[j] * gd[off + j];
        }
        for (size_t j = 0; j < t->numel; j++) t->w[j] = w0[j] + (ls_real)(eps * u[j]);
        double lp = loss_fwd(p, &f);
        for (size_t j = 0; j < t->numel; j++) t->w[j] = w0[j] - (ls_real)(eps * u[j]);
        double lm = loss_fwd(p, &f);
        memcpy(t->w, w0, t->numel * sizeof *w0);
        double fd = (lp - lm) / (2 * eps);
        double e = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-6);
        double edet = fabs(fd - ad) / (fabs(fd) + fabs(ad) + 1e-6);
        if (e > worst) worst = e, wn = t->name;
        if (edet > worst_det) worst_det = edet;
        off += t->numel;
        nt++;
        free(u);
        free(w0);
    }
    fprintf(stderr,
            "mla FD (%s%s): %zu trainable tensors, worst relative error of the full gradient %.3g (%s); "
            "control: the detached gradient's worst %.3g\n",
            mode == LS_TRAIN_LORA ? "lora" : "full", lora_experts ? " +experts" : "", nt, worst, wn, worst_det);
    cr_expect_leq(worst, 1e-5, "%s: %.3g", wn, worst);
    cr_expect_gt(worst_det, 1e-2, "the check must see a wrong gradient (detached: %.3g)", worst_det);
    free(g), free(gd);
    K(ls_params_free)(p);
}

Test(mla_train, finite_differences_for_every_trainable_tensor, .timeout = 600) {
    if (!LS_REAL_IS_F64) cr_skip_test("finite differences: float64 only");
    fd_case(LS_TRAIN_LORA, 1);
    fd_case(LS_TRAIN_FULL, 0);
}

Test(mla_train, absorbed_equals_naive) {
    ls_params *p = make_params(LS_TRAIN_LORA, 1);
    fixture f;
    make_fixture(&f);
    double ln, la;
    set_opts(LS_MLA_NAIVE, 5);
    double *gn = grad_longstraw(p, &f, 1, &ln, NULL);
    set_opts(LS_MLA_ABSORBED, 5);
    double *ga = grad_longstraw(p, &f, 1, &la, NULL);
    ls_mla_seg_opts dflt = {.moe_chunk = 5}; /* the default: the form by shape (branches absorbed) */
    K(ls_mla_set_seg_opts)(&dflt);
    double lx, *gx = grad_longstraw(p, &f, 1, &lx, NULL);
    set_opts(LS_MLA_NAIVE, 0);
    double e = rel(ga, gn, n_grad(p)), ex = rel(gx, gn, n_grad(p));
    fprintf(stderr, "mla absorbed vs naive (" LS_REAL_NAME "): gradient %.3g, loss %.3g; the default (by shape): %.3g\n",
            e, fabs(la - ln), ex);
    cr_expect_leq(e, GTOL);
    cr_expect_leq(ex, GTOL);
    cr_expect_leq(fabs(la - ln), GTOL * (1 + fabs(ln)));
    cr_expect_leq(fabs(lx - ln), GTOL * (1 + fabs(ln)));
    free(gn), free(ga), free(gx);
    K(ls_params_free)(p);
}

Test(mla_train, carried_state_bytes_are_the_analytical_rows) {
    ls_params *p = make_params(LS_TRAIN_LORA, 0);
    fixture f;
    make_fixture(&f);
    set_opts(LS_MLA_NAIVE, 5);
    size_t bytes = 0;
    double l;
    free(grad_longstraw(p, &f, 0, &l, &bytes));
    const ls_model_config *c = &p->cfg;
    size_t row = ((size_t)ls_mla_keys_of(c)->kv_rank + (size_t)ls_mla_keys_of(c)->d_rope + (size_t)ls_mla_keys_of(c)->index_dim) * sizeof(ls_real);
    double per = (double)bytes / (double)(P - 1) / (double)c->n_layers;
    fprintf(stderr, "mla carried state (" LS_REAL_NAME "): %zu bytes for %d positions x %d layers = %.1f bytes per "
                    "token per layer; analytical (kv_rank + d_rope + index_dim) * %zu = %zu\n",
            bytes, P - 1, c->n_layers, per, sizeof(ls_real), row);
    cr_expect_eq(bytes, row * (size_t)(P - 1) * (size_t)c->n_layers);
    cr_expect_eq(bytes, p->fam->state_plan_bytes(c, P - 1));
    /* a fork borrows (owns nothing), a gradient holds c_kv and k_pe rows only */
    ls_state ps, fk, gl;
    cr_assert_eq(p->fam->state_init(&ps, p, PAGE, LS_MEM_PROMPT_STATE), LS_OK);
    ls_seg_io io = {.tokens = f.prompt, .T = P - 1, .state_out = &ps};
    cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
    cr_assert_eq(p->fam->state_fork(&fk, &ps, LS_MEM_SCORE), LS_OK);
    cr_assert_eq(p->fam->state_grad_like(&gl, &ps, LS_MEM_PROMPT_GRAD), LS_OK);
    cr_expect_eq(p->fam->state_bytes(&ps), bytes);
    cr_expect_eq(p->fam->state_bytes(&fk), 0);
    cr_expect_eq(p->fam->state_bytes(&gl),
                 ((size_t)ls_mla_keys_of(c)->kv_rank + (size_t)ls_mla_keys_of(c)->d_rope) * sizeof(ls_real) * (size_t)(P - 1) * (size_t)c->n_layers);
    p->fam->state_free(&gl);
    p->fam->state_free(&fk);
    p->fam->state_free(&ps);
    K(ls_params_free)(p);
}

/* The moe_dispatch peak of a taped segment's forward and backward over T tokens with chunk C. */
static size_t dispatch_peak(ls_params *p, size_t T, size_t C) {
    int32_t tok[256];
    ls_real lp[1];
    cr_assert_leq(T, 256);
    for (size_t t = 0; t < T; t++) tok[t] = (int32_t)((t * 37 + 11) % 256);
    set_opts(LS_MLA_NAIVE, C);
    ls_mem_reset_peaks();
    ls_seg_tape *tape = NULL;
    ls_seg_io io = {.tokens = tok, .T = T, .targets = tok + T - 1, .score_from = T - 1, .logp = lp, .tape = &tape,
                    .tape_cat = LS_MEM_BRANCH};
    ls_real one = 1;
    cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
    cr_assert_eq(p->fam->segment_backward(p, tape, &one, NULL, NULL, NULL, NULL), LS_OK);
    p->fam->tape_free(tape);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.live_bytes[LS_MEM_DISPATCH], 0, "the routed buffers are freed");
    return s.peak_bytes[LS_MEM_DISPATCH];
}

Test(mla_train, dispatch_peak_is_one_chunk) {
    ls_params *p = make_params(LS_TRAIN_LORA, 1);
    size_t Cs[] = {4, 8, 16, 32, 64};
    for (size_t i = 0; i < sizeof Cs / sizeof *Cs; i++) {
        size_t want = K(ls_mla_dispatch_bytes)(&p->cfg, Cs[i], p->obj.lora_r, 1);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        size_t p64 = dispatch_peak(p, 64, Cs[i]), p200 = dispatch_peak(p, 200, Cs[i]);
        clock_gettime(CLOCK_MONOTONIC, &b);
        fprintf(stderr, "moe_dispatch peak (" LS_REAL_NAME "): chunk %3zu: %7zu bytes at T=64, %7zu at T=200 "
                        "(one chunk's buffers: %zu; %.3f s)\n",
                Cs[i], p64, p200, want, (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
        cr_expect_eq(p64, want, "chunk %zu", Cs[i]);
        cr_expect_eq(p200, want, "chunk %zu: independent of the sequence length", Cs[i]);
    }
    set_opts(LS_MLA_NAIVE, 0);
    K(ls_params_free)(p);
}

/* ---- longstraw-train end to end ------------------------------------------------- */

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define AUDIT LS_BINARY_DIR "/audit/longstraw-audit"
#define MLA_CFG LS_SOURCE_DIR "/configs/mla-tiny.json"

static char tmpd[256];
static void mk(void) { ls_test_tmpdir_make(tmpd, "mlatrain"); }
static void rm_tmp(void) { ls_test_tmpdir_remove(tmpd); }

static int sh(const char *cmd) {
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

/* The loss of metrics line `step` (0-based) of a run's --metrics file. */
static double metrics_loss(const char *path, int step) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[8192];
    double v = NAN;
    for (int i = 0; fgets(line, sizeof line, f); i++) {
        if (i != step) continue;
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s line %d", path, i);
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "loss");
        cr_assert(cJSON_IsNumber(l));
        v = l->valuedouble;
        cJSON_Delete(j);
    }
    fclose(f);
    return v;
}

/* Two steps (an sft warm start, then grpo) in each gradient mode and strategy; the LongStraw runs
 * score audit level 1, and the naive strategy's second-step loss equals LongStraw's. */
Test(mla_train, cli_trains_both_modes_and_audits_level_1, .init = mk, .fini = rm_tmp, .timeout = 600) {
    if (!LS_REAL_IS_F64) cr_skip_test("the CLI test runs once (float64 build)");
    const char *modes[2] = {"full", "detached"}, *strat[2] = {"longstraw", "naive"};
    double loss[2][2];
    for (int m = 0; m < 2; m++)
        for (int s = 0; s < 2; s++) {
            char cmd[4096], run[300], met[340];
            snprintf(run, sizeof run, "%s/%s-%s", tmpd, modes[m], strat[s]);
            snprintf(met, sizeof met, "%s.metrics.jsonl", run);
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            snprintf(cmd, sizeof cmd,
                     "%s --config %s --out %s --prompt-len 64 --response-len 6 --group 2 --steps 2 --sft-steps 1 "
                     "--seed 3 --dtype f64 --grad-mode %s --strategy %s --metrics %s --dump-grads %s.grads.safetensors "
                     "--dump-batch %s.batch.json --save %s.ckpt.safetensors --quiet >%s.out 2>&1",
                     TRAIN, MLA_CFG, run, modes[m], strat[s], met, run, run, run, run);
            cr_assert_eq(sh(cmd), 0, "%s (see %s.out)", cmd, run);
            clock_gettime(CLOCK_MONOTONIC, &b);
            /* the audit's level 1 expects a prompt_bwd phase in `full` mode, which the naive strategy
               has not (the hybrid family's naive full runs score level 0 the same way) */
            snprintf(cmd, sizeof cmd, "%s %s --require-level 1 --quiet >%s.audit 2>&1", AUDIT, run, run);
            if (s == 0) cr_expect_eq(sh(cmd), 0, "%s", cmd);
            const char *files[] = {".grads.safetensors", ".batch.json", ".ckpt.safetensors"};
            for (int k = 0; k < 3; k++) {
                char pth[600];
                snprintf(pth, sizeof pth, "%s%s", run, files[k]);
                FILE *f = fopen(pth, "rb");
                cr_expect_not_null(f, "%s was not written", pth);
                if (f) fclose(f);
            }
            loss[m][s] = metrics_loss(met, 1);
            fprintf(stderr, "longstraw-train mla-tiny %s %s: 2 steps in %.2f s, step-2 loss %.17g\n", modes[m],
                    strat[s], (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec), loss[m][s]);
            cr_expect(isfinite(loss[m][s]));
        }
    for (int m = 0; m < 2; m++)
        cr_expect_leq(fabs(loss[m][0] - loss[m][1]), 1e-9 * (1 + fabs(loss[m][1])), "%s: longstraw %.17g naive %.17g",
                      modes[m], loss[m][0], loss[m][1]);
}

#ifdef LS_MPIEXEC
/* Under mpirun the CLI trains this family (test_mla_cp_cli.c); the hybrid family's fault
 * cp-local-attention is refused for it, naming the fault and the family's own, cp-local-dsa. */
Test(mla_train, cli_refuses_cp_local_attention_under_mpirun, .init = mk, .fini = rm_tmp, .timeout = 300) {
    if (!LS_REAL_IS_F64) cr_skip_test("the CLI test runs once (float64 build)");
    char cmd[4096], path[600];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
             ":print_suppressions=0 timeout 120 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 %s --config %s --out %s/cp "
             "--prompt-len 64 --response-len 4 --group 2 --steps 1 --fault cp-local-attention >%s/cp.out 2>%s/cp.err",
             TRAIN, MLA_CFG, tmpd, tmpd, tmpd);
    cr_expect_eq(sh(cmd), 2, "%s", cmd);
    snprintf(path, sizeof path, "%s/cp.err", tmpd);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char buf[4096] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_expect(strstr(buf, "cp-local-attention") && strstr(buf, "cp-local-dsa"), "%s", buf);
}
#endif

/* --lora-experts: the routed experts' adapters are trained (they appear in the dumped gradients); a
 * family without routed experts, or full training, refuses the flag by name (exit 2). */
Test(mla_train, cli_lora_experts, .init = mk, .fini = rm_tmp, .timeout = 300) {
    if (!LS_REAL_IS_F64) cr_skip_test("the CLI test runs once (float64 build)");
    char cmd[4096], path[600];
    const char *with[2] = {"", "--lora-experts"};
    for (int w = 0; w < 2; w++) {
        snprintf(cmd, sizeof cmd,
                 "%s --config %s --out %s/le%d --prompt-len 64 --response-len 4 --group 2 --steps 1 --sft-steps 1 "
                 "%s --dump-grads %s/le%d.safetensors --quiet >%s/le%d.out 2>&1",
                 TRAIN, MLA_CFG, tmpd, w, with[w], tmpd, w, tmpd, w);
        cr_assert_eq(sh(cmd), 0, "%s", cmd);
        snprintf(path, sizeof path, "%s/le%d.safetensors", tmpd, w);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f);
        static char hdr[1 << 16];
        size_t n = fread(hdr, 1, sizeof hdr - 1, f);
        fclose(f);
        hdr[n] = 0;
        int found = 0;
        for (size_t i = 8; i + 32 < n && !found; i++) found = !strncmp(hdr + i, "moe.experts.7.down.lora_B", 25);
        cr_expect_eq(found, w, "%s: the experts' adapters %s in the gradients", with[w], w ? "missing" : "present");
    }
    snprintf(cmd, sizeof cmd, "%s --config %s/configs/hybrid-tiny.json --out %s/h --lora-experts >%s/h.out 2>&1", TRAIN,
             LS_SOURCE_DIR, tmpd, tmpd);
    cr_expect_eq(sh(cmd), 2);
    snprintf(cmd, sizeof cmd, "grep -q -- \"--lora-experts: .*family 'hybrid'\" %s/h.out", tmpd);
    cr_expect_eq(sh(cmd), 0, "the refusal names the flag and the family");
    snprintf(cmd, sizeof cmd, "%s --config %s --out %s/h --lora-experts --train-mode full >%s/h.out 2>&1", TRAIN,
             MLA_CFG, tmpd, tmpd);
    cr_expect_eq(sh(cmd), 2);
}

/* Segment log-probs through the carried state: the prompt in chunks of `chunk` over pages of `page`. */
static void seg_logp(ls_params *p, const fixture *f, size_t chunk, size_t page, ls_real out[G][RMAX]) {
    ls_state ps;
    cr_assert_eq(p->fam->state_init(&ps, p, page, LS_MEM_PROMPT_STATE), LS_OK);
    for (size_t t0 = 0; t0 < P - 1; t0 += chunk) {
        size_t n = P - 1 - t0 < chunk ? P - 1 - t0 : chunk;
        ls_seg_io io = {.tokens = f->prompt + t0, .T = n, .pos0 = (int64_t)t0, .ctx = t0 ? &ps : NULL,
                        .state_out = &ps};
        cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
    }
    for (int i = 0; i < G; i++) {
        int32_t in[RMAX];
        in[0] = f->prompt[P - 1];
        memcpy(in + 1, f->resp[i], (RL[i] - 1) * sizeof *in);
        ls_seg_io io = {.tokens = in, .T = RL[i], .pos0 = P - 1, .ctx = &ps, .targets = f->resp[i], .logp = out[i]};
        cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
    }
    p->fam->state_free(&ps);
}

static double logp_diff(ls_real a[G][RMAX], ls_real b[G][RMAX]) {
    double m = 0;
    for (int i = 0; i < G; i++)
        for (size_t t = 0; t < RL[i]; t++) m = fmax(m, fabs((double)a[i][t] - (double)b[i][t]));
    return m;
}

/* The global selection does not depend on how the keys are split into blocks, ties included: with
 * the indexer keys all zero every visible key ties, and the rule of docs/model.md §0 (position
 * ascending) must pick the same positions whether the prompt is one page or pages of 1 or 3; the
 * single-block second forward (ls_mla_logprobs) is the reference.  Control: a dense top-k differs. */
Test(mla_train, selection_is_global_ties_included) {
    ls_params *p = make_params(LS_TRAIN_LORA, 0);
    fixture f;
    make_fixture(&f);
    set_opts(LS_MLA_NAIVE, 5);
    ls_real ref[G][RMAX], a[G][RMAX], b[G][RMAX], c1[G][RMAX];
    ls_real *out[G];
    const int32_t *resp[G];
    for (int i = 0; i < G; i++) out[i] = ref[i], resp[i] = f.resp[i];
    ls_mla_fwd_opts o = {.form = LS_MLA_NAIVE, .moe_chunk = 5};
    char err[512] = "";
    for (int tie = 0; tie < 2; tie++) {
        if (tie)
            for (int l = 0; l < p->cfg.n_layers; l++) { /* every indexer key zero: all scores tie */
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.indexer.k.weight", l);
                ls_tensor *t = K(ls_params_find)(p, nm);
                cr_assert_not_null(t);
                memset(t->w, 0, t->numel * sizeof *t->w);
            }
        cr_assert_eq(K(ls_mla_logprobs)(p, f.prompt, P, resp, RL, G, p->obj.temperature, &o, out, err, sizeof err),
                     LS_OK, "%s", err);
        seg_logp(p, &f, 23, 64, a);
        seg_logp(p, &f, 5, 1, b);
        seg_logp(p, &f, 9, 3, c1);
        double da = logp_diff(a, ref), db = logp_diff(b, ref), dc = logp_diff(c1, ref);
        fprintf(stderr, "mla selection (" LS_REAL_NAME ", %s): one page %.3g, pages of 1 %.3g, pages of 3 %.3g\n",
                tie ? "every key tied" : "random keys", da, db, dc);
        cr_expect_leq(fmax(da, fmax(db, dc)), GTOL, "%s", tie ? "ties" : "random");
    }
    int k0 = ls_mla_keys_of(&p->cfg)->index_topk; /* control: the tied selection is not the dense one */
    ls_mla_keys_mut(&p->cfg)->index_topk = 1 << 20;
    seg_logp(p, &f, 5, 1, b);
    ls_mla_keys_mut(&p->cfg)->index_topk = k0;
    double dd = logp_diff(b, ref);
    fprintf(stderr, "  control: dense top-k differs by %.3g\n", dd);
    cr_expect_gt(dd, 1e-3);
    K(ls_params_free)(p);
}

/* A discrete decision is made once (kernels/decisions.h): a backward that recomputes one must decide as the
 * forward it differentiates did, or fail (LS_ERR_INTERNAL) rather than differentiate a forward that never
 * happened.  Injected: the MoE layer's saved input changed between its forward and its backward (the
 * backward's recomputed routing differs), and a `full` prompt chunk's checkpoint changed between the
 * capture and the prompt backward (its recomputed selections and routing differ).  Controls: unchanged,
 * both pass. */
Test(mla_train, a_recompute_that_decides_differently_fails) {
    ls_params *p = make_params(LS_TRAIN_LORA, 1);
    set_opts(LS_MLA_NAIVE, 5);
    size_t d = (size_t)p->cfg.d_model, T = 12;
    int l = ls_mla_keys_of(&p->cfg)->first_dense; /* an MoE layer */
    uint64_t s = 5;
    for (int corrupt = 0; corrupt < 2; corrupt++) {
        ls_real *h = malloc(T * d * sizeof *h), *dh = malloc(T * d * sizeof *dh);
        for (size_t i = 0; i < T * d; i++) h[i] = (ls_real)unif(&s), dh[i] = (ls_real)unif(&s);
        ls_arena ta, scr;
        ls_arena_init(&ta, LS_MEM_BRANCH, 0);
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        ls_mla_layer_tape tape;
        cr_assert_eq(K(ls_mla_layer_forward)(p, l, h, T, 0, NULL, NULL, NULL, NULL, &tape, &ta, &scr), LS_OK);
        cr_expect_eq(tape.moe_dec.count, T, "the forward noted %llu routings, want %zu",
                     (unsigned long long)tape.moe_dec.count, T);
        if (corrupt)
            for (size_t j = 0; j < d; j++) tape.xn2[j] = -tape.xn2[j]; /* token 0's FFN input */
        ls_arena_free(&scr);
        ls_arena_init(&scr, LS_MEM_SCRATCH, 0);
        ls_status st = K(ls_mla_layer_backward)(p, l, &tape, dh, NULL, NULL, NULL, NULL, &scr);
        if (corrupt) cr_expect_eq(st, LS_ERR_INTERNAL, "an MoE backward that routed differently: status %d", st);
        else cr_expect_eq(st, LS_OK, "the MoE backward of its own forward: status %d", st);
        ls_arena_free(&scr);
        ls_arena_free(&ta);
        free(h), free(dh);
    }
    fixture f;
    make_fixture(&f);
    double loss;
    ls_status pb = LS_OK;
    free(grad_longstraw_c(p, &f, 1, &loss, NULL, 1, &pb));
    cr_expect_eq(pb, LS_ERR_INTERNAL, "a prompt chunk recomputed from a changed checkpoint: status %d", pb);
    K(ls_params_free)(p);
}
