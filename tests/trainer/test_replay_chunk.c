/* test_replay_chunk.c - the chunked response replay (trainer/step/replay_chunk.h,
 * --replay-checkpoint chunk), float64, both families (hybrid-tiny: attention and
 * GDN layers; mla-tiny: latents, the DSA top-k active, routed experts):
 *  - in one chunk it is the taped replay bit for bit (log-probs, every weight
 *    gradient, the prompt state's gradient);
 *  - in chunks of 5 of a 12-token response (an uneven last chunk) it equals the
 *    taped replay to rounding (1e-10 relative), in both gradient modes: the
 *    gradient the later chunks hand back through the carried state (the
 *    response's own K/V or latent rows, the GDN conv tail and recurrent state)
 *    reaches the earlier chunks and the prompt state;
 *  - a weight changed between the forward and the backward (the injected
 *    fault) fails the backward with LS_ERR_INTERNAL: a chunk taped again must
 *    give the forward's log-probs, so no other forward is differentiated.
 * The independent composition is the taped replay: one segment over the whole
 * response, its tape kept from its own forward, no carried-state gradient. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/families/families.h"
#include "trainer/model/family.h"
#include "trainer/step/replay_chunk.h"

#define K(x) LS_K(x)

static ls_params *params_of(const char *fam) {
    ls_model_config c;
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/configs/%s-tiny.json", LS_SOURCE_DIR, fam);
    cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
    ls_objective o;
    ls_objective_defaults(&o);
    o.lora_init_random = 1;
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 5, err, sizeof err), LS_OK, "%s", err);
    return p;
}

static size_t n_grad(const ls_params *p) {
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += p->t[i].trainable ? p->t[i].numel : 0;
    return n;
}

/* Every trainable gradient, then every row of the prompt state's gradient (when given), flattened. */
static double *grads(const ls_params *p, const ls_state *dps, size_t *n) {
    size_t k = n_grad(p), m = k;
    for (int l = 0; dps && l < dps->n_layers; l++) {
        const ls_layer_state *s = &dps->ly[l];
        for (size_t i = 0; i < s->n_pages; i++) m += (ls_mem_size(s->pages[i].k) + ls_mem_size(s->pages[i].v)) / sizeof(ls_real);
        m += (ls_mem_size(s->fixed0) + ls_mem_size(s->fixed1)) / sizeof(ls_real);
    }
    double *g = malloc(m * sizeof *g);
    cr_assert_not_null(g);
    size_t o = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable)
            for (size_t j = 0; j < p->t[i].numel; j++) g[o++] = p->t[i].g[j];
    for (int l = 0; dps && l < dps->n_layers; l++) {
        const ls_layer_state *s = &dps->ly[l];
        const ls_real *b[2] = {s->fixed0, s->fixed1};
        for (size_t i = 0; i < s->n_pages; i++) {
            const ls_real *kv[2] = {s->pages[i].k, s->pages[i].v};
            for (int h = 0; h < 2; h++)
                for (size_t j = 0; kv[h] && j < ls_mem_size(kv[h]) / sizeof(ls_real); j++) g[o++] = kv[h][j];
        }
        for (int h = 0; h < 2; h++)
            for (size_t j = 0; b[h] && j < ls_mem_size(b[h]) / sizeof(ls_real); j++) g[o++] = b[h][j];
    }
    cr_assert_eq(o, m);
    *n = m;
    return g;
}

typedef struct {
    ls_params *p;
    ls_state ps;
    int32_t tok[16], tg[16];
    size_t P, T;
} fixture;

static void setup(fixture *f, const char *fam) {
    f->p = params_of(fam);
    f->P = 40;
    f->T = 12;
    int32_t prompt[64];
    for (size_t i = 0; i < f->P; i++) prompt[i] = (int32_t)((i * 37 + 11) % 256);
    for (size_t i = 0; i < f->T; i++) f->tg[i] = (int32_t)((i * 53 + 7) % 256);
    f->tok[0] = prompt[f->P - 1];
    memcpy(f->tok + 1, f->tg, (f->T - 1) * sizeof *f->tok);
    cr_assert_eq(f->p->fam->state_init(&f->ps, f->p, 8, LS_MEM_PROMPT_STATE), LS_OK);
    ls_seg_io cap = {.tokens = prompt, .T = f->P - 1, .state_out = &f->ps};
    cr_assert_eq(f->p->fam->segment_forward(f->p, &cap), LS_OK);
}

static void teardown(fixture *f) {
    K(ls_state_free)(&f->ps);
    K(ls_params_free)(f->p);
}

static void dlogp_of(ls_real *dlp, size_t T) {
    for (size_t t = 0; t < T; t++) dlp[t] = (ls_real)(0.1 * (double)(t + 1) * (t % 2 ? -1 : 1));
}

/* The member's gradients (and the prompt state's, full) by the taped replay (chunk 0) or in chunks;
 * fault: a weight moved between the forward and the backward.  NULL when the backward failed (*st). */
static double *member(fixture *f, size_t chunk, int full, int fault, ls_real *lp, size_t *n, ls_status *st) {
    ls_params *p = f->p;
    K(ls_params_zero_grads)(p);
    ls_state dps = {0};
    if (full) cr_assert_eq(p->fam->state_grad_like(&dps, &f->ps, LS_MEM_PROMPT_GRAD), LS_OK);
    ls_real dlp[16];
    dlogp_of(dlp, f->T);
    int64_t pos0 = (int64_t)f->P - 1;
    if (chunk == 0) {
        ls_seg_tape *tape = NULL;
        ls_seg_io io = {.tokens = f->tok, .T = f->T, .pos0 = pos0, .ctx = &f->ps, .targets = f->tg, .logp = lp,
                        .tape = &tape, .tape_cat = LS_MEM_BRANCH};
        cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
        *st = p->fam->segment_backward(p, tape, dlp, full ? &dps : NULL, NULL, NULL, NULL);
        p->fam->tape_free(tape);
    } else {
        ls_replay_chunks *r = NULL;
        cr_assert_eq(K(ls_replay_chunks_forward)(p, &f->ps, f->tok, f->T, pos0, f->tg, chunk, lp, NULL, NULL, &r),
                     LS_OK);
        cr_assert_gt(K(ls_replay_chunks_bytes)(r), 0);
        ls_tensor *w = NULL;
        for (size_t i = 0; fault && i < p->n && !w; i++)
            if (strstr(p->t[i].name, "layers.0.") && p->t[i].numel) w = &p->t[i];
        if (w) w->w[0] += (ls_real)1e-6;
        *st = K(ls_replay_chunks_backward)(r, dlp, full ? &dps : NULL);
        if (w) w->w[0] -= (ls_real)1e-6;
        K(ls_replay_chunks_free)(r);
    }
    double *g = *st == LS_OK ? grads(p, full ? &dps : NULL, n) : NULL;
    K(ls_state_free)(&dps);
    return g;
}

static double rel(const double *a, const double *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > m) m = fabs(a[i] - b[i]);
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return s > 0 ? m / s : m;
}

static void check_family(const char *fam) {
    fixture f;
    setup(&f, fam);
    for (int full = 0; full < 2; full++) {
        ls_real lp_t[16], lp_1[16], lp_c[16];
        size_t n_t = 0, n_1 = 0, n_c = 0;
        ls_status st;
        double *g_t = member(&f, 0, full, 0, lp_t, &n_t, &st);
        cr_assert_eq(st, LS_OK);
        double *g_1 = member(&f, f.T, full, 0, lp_1, &n_1, &st);
        cr_assert_eq(st, LS_OK);
        double *g_c = member(&f, 5, full, 0, lp_c, &n_c, &st);
        cr_assert_eq(st, LS_OK);
        cr_assert_eq(n_t, n_1);
        cr_assert_eq(n_t, n_c);
        cr_expect(memcmp(lp_t, lp_1, f.T * sizeof *lp_t) == 0, "%s: one chunk's log-probs differ from the taped", fam);
        cr_expect(memcmp(g_t, g_1, n_t * sizeof *g_t) == 0, "%s %s: one chunk's gradients differ from the taped", fam,
                  full ? "full" : "detached");
        double e_lp = 0;
        for (size_t t = 0; t < f.T; t++) e_lp = fmax(e_lp, fabs((double)lp_t[t] - (double)lp_c[t]));
        double e = rel(g_c, g_t, n_t);
        fprintf(stderr, "replay in chunks of 5 (%s, %s): log-probs within %.3g, gradients %.3g relative over %zu values\n",
                fam, full ? "full" : "detached", e_lp, e, n_t);
        cr_expect_lt(e_lp, 1e-12, "%s: chunked log-probs differ by %g", fam, e_lp);
        cr_expect_lt(e, 1e-10, "%s %s: chunked gradients differ by %g relative", fam, full ? "full" : "detached", e);
        free(g_t);
        free(g_1);
        free(g_c);
        size_t n_x = 0;
        ls_real lp_x[16];
        double *g_x = member(&f, 5, full, 1, lp_x, &n_x, &st);
        cr_expect_eq(st, LS_ERR_INTERNAL, "%s: a weight changed between the forward and the backward was differentiated",
                     fam);
        free(g_x);
    }
    teardown(&f);
}

Test(replay_chunk, hybrid_equals_the_taped_replay) { check_family("hybrid"); }
Test(replay_chunk, mla_equals_the_taped_replay) { check_family("mla"); }
