/* test_hybrid_fd.c - the whole-model gradient of the hybrid family against
 * central finite differences of the loss, float64.
 *
 * Every trainable tensor of both trainable sets (lora: every lora_A/lora_B;
 * full: every parameter — embed, norms, in_qkv/in_z/in_a/in_b, conv, A_log,
 * dt_bias, the gated norm, q/k/v/o, q_norm/k_norm, the MLP, lm_head) is
 * checked along one random unit direction, and (in `full` grad mode, for
 * every tensor of the first GDN and first attention layer and those outside
 * the layers) at two single scalars: the largest-gradient element and a
 * random one.  The
 * derivative is a Richardson-extrapolated central difference (h and h/2) of
 * a loss computed here, independently of the trainer's replay and loss
 * kernel: one full sequence per member from position 0 (`full` mode), or the
 * branches from a prompt state captured once from the unperturbed
 * parameters (`detached` mode: the state is held fixed), and this suite's
 * own GRPO formula with the batch's old/reference log-probs held fixed.
 *
 * The batch's old log-probs are supplied so that the clip engages for both
 * signs of the advantage (A > 0 with rho > 1 + eps, A < 0 with rho < 1 - eps,
 * counted and asserted), and every log-ratio stays further from the kinks
 * than any perturbation moves a log-prob (also asserted). */
#include "tests/trainer/test_hybrid_util.h"

#define FD_H_DIR 1e-3    /* step along a unit direction (and h/2 for the Richardson extrapolation) */
#define FD_H_SCALAR 1e-4 /* step of a single element */
#define FD_TOL 1e-7    /* asserted; the measured worst is reported per tensor class */
#define MARGIN 0.05    /* least distance of a log-ratio from log(1 +- eps) */
#define MAX_CLASSES 48

typedef struct {
    ls_params *p;
    ls_batch *b;
    int detached;
    ls_state ps;    /* detached: captured from the unperturbed parameters */
    double lp0[64];  /* log-probs at the unperturbed point, members concatenated */
    int have_lp0;
    double max_dlp;  /* largest |lp - lp0| over every evaluation */
    size_t n_eval;
} fd_ctx;

static double fd_loss(fd_ctx *c, clip_counts *cc) {
    const ls_batch *b = c->b;
    double L = 0;
    size_t off = 0;
    for (size_t i = 0; i < b->G; i++) {
        double lp[64];
        cr_assert(off + b->R[i] <= 64);
        if (c->detached) cr_assert_eq(K(ls_score_member)(c->p, &c->ps, b, i, lp, NULL, NULL), LS_OK);
        else full_sequence_logprobs(c->p, b, i, lp);
        for (size_t t = 0; t < b->R[i]; t++) {
            if (c->have_lp0) c->max_dlp = fmax(c->max_dlp, fabs(lp[t] - c->lp0[off + t]));
            else c->lp0[off + t] = lp[t];
        }
        L += grpo_member(lp, b->old_lp[i], b->ref_lp[i], b->adv[i], c->p->obj.epsilon, c->p->obj.beta, b->G,
                         b->R[i], NULL, cc);
        off += b->R[i];
    }
    c->have_lp0 = 1;
    c->n_eval++;
    return L;
}

/* Derivative of the loss along u [numel] (NULL: along element j) of t:
 * (4 D(h/2) - D(h)) / 3 with D(h) = (L(w + h u) - L(w - h u)) / 2h. */
static double fd_derivative(fd_ctx *c, ls_tensor *t, const double *u, size_t j) {
    double D[2];
    for (int k = 0; k < 2; k++) {
        double h = (u ? FD_H_DIR : FD_H_SCALAR) / (double)(1 << k), L[2];
        for (int s = 0; s < 2; s++) {
            double sh = s ? -h : h;
            if (u)
                for (size_t e = 0; e < t->numel; e++) t->w[e] += sh * u[e];
            else
                t->w[j] += sh;
            L[s] = fd_loss(c, NULL);
            if (u)
                for (size_t e = 0; e < t->numel; e++) t->w[e] -= sh * u[e];
            else
                t->w[j] -= sh;
        }
        D[k] = (L[0] - L[1]) / (2 * h);
    }
    return (4 * D[1] - D[0]) / 3;
}

typedef struct {
    char name[96];
    double dir, scalar; /* worst relative errors */
    size_t n;
} fd_class;

/* The tensor's class: its name without the "layers.N." prefix. */
static fd_class *class_of(fd_class *cl, size_t *n_cl, const char *name) {
    const char *s = name;
    if (strncmp(s, "layers.", 7) == 0) {
        s = strchr(s + 7, '.');
        s = s ? s + 1 : name;
    }
    for (size_t i = 0; i < *n_cl; i++)
        if (strcmp(cl[i].name, s) == 0) return &cl[i];
    cr_assert_lt(*n_cl, MAX_CLASSES);
    fd_class *c = &cl[(*n_cl)++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", s);
    return c;
}

static void check_fd(ls_train_mode mode, ls_grad_mode gm, int scalars) {
    size_t R[] = {4, 5, 3}, P = 24, G = 3;
    const char *what = mode == LS_TRAIN_LORA ? "lora" : "full", *gmn = gm == LS_GRAD_FULL ? "full" : "detached";
    ls_params *p = make_params(mode, gm, 11);
    if (mode == LS_TRAIN_FULL) jitter_trainable(p, 0.02, 12); /* policy != frozen reference: KL != 0 */
    ls_batch *b = make_batch(P, G, R, 5);
    b->rewards[0] = 1.0; /* A_0 > 0, A_1 < 0, A_2 < 0 */
    b->rewards[1] = 0.0;
    b->rewards[2] = 0.35;
    ls_step_result res;
    free(run_grads(p, b, LS_STRATEGY_LONGSTRAW, &res)); /* scores old and reference log-probs */
    /* rho = e^delta: with A > 0, 0.40 clips; with A < 0, -0.35 and -0.45 clip */
    static const double delta[] = {0.40, -0.45, 0.08, -0.12, 0.30, -0.35};
    for (size_t i = 0; i < G; i++)
        for (size_t t = 0; t < R[i]; t++) b->old_lp[i][t] -= delta[(t + 2 * i) % 6];
    b->old_supplied = 1;
    double *g = run_grads(p, b, LS_STRATEGY_LONGSTRAW, &res);
    cr_assert(b->adv[0] > 0 && b->adv[1] < 0 && b->adv[2] < 0);

    fd_ctx c = {.p = p, .b = b, .detached = gm == LS_GRAD_DETACHED};
    if (c.detached) cr_assert_eq(K(ls_capture)(p, b, 16, 13, &c.ps, NULL, LS_MEM_PROMPT_STATE, NULL, NULL), LS_OK);
    clip_counts cc = {0};
    double L0 = fd_loss(&c, &cc), margin = INFINITY, eps = p->obj.epsilon;
    for (size_t i = 0, off = 0; i < G; off += R[i], i++)
        for (size_t t = 0; t < R[i]; t++) {
            double r = c.lp0[off + t] - b->old_lp[i][t];
            margin = fmin(margin, fmin(fabs(r - log(1 + eps)), fabs(r - log(1 - eps))));
        }
    cr_log_info("FD %s/%s: loss %.15f (trainer %.15f); clipped tokens A>0: %zu, A<0: %zu, active %zu; "
                "log-ratio margin to the kinks %.3f",
                what, gmn, L0, res.loss, cc.clipped_pos, cc.clipped_neg, cc.active, margin);
    cr_expect_lt(fabs(L0 - res.loss), 1e-13, "%s/%s: loss %.15f vs trainer %.15f", what, gmn, L0, res.loss);
    cr_expect_gt(cc.clipped_pos, 0, "%s/%s: the clip never engages for A > 0", what, gmn);
    cr_expect_gt(cc.clipped_neg, 0, "%s/%s: the clip never engages for A < 0", what, gmn);
    cr_expect_gt(cc.active, 0);
    cr_assert_gt(margin, MARGIN, "%s/%s: a log-ratio is %.3e from a kink", what, gmn, margin);

    fd_class cl[MAX_CLASSES];
    size_t n_cl = 0, n_tensors = 0, off = 0;
    ls_rng rng;
    ls_rng_seed(&rng, 99);
    double worst = 0;
    char worst_name[128] = "";
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        const double *gt = g + off;
        off += t->numel;
        n_tensors++;
        double *u = malloc(t->numel * sizeof *u), un = 0, an = 0, gn = 0, gmax = 0;
        size_t jmax = 0;
        cr_assert_not_null(u);
        for (size_t e = 0; e < t->numel; e++) {
            u[e] = 2 * ls_rng_uniform(&rng) - 1;
            un += u[e] * u[e];
            gn += gt[e] * gt[e];
            if (fabs(gt[e]) > gmax) gmax = fabs(gt[e]), jmax = e;
        }
        un = sqrt(un);
        gn = sqrt(gn);
        for (size_t e = 0; e < t->numel; e++) an += gt[e] * (u[e] /= un);
        cr_assert_gt(gn, 0, "%s/%s: %s has a zero gradient: nothing to compare", what, gmn, t->name);
        double fd = fd_derivative(&c, t, u, 0);
        /* relative to the directional derivative, floored at 1e-4 |g| (a random direction's
         * projection is ~|g|/sqrt(n); the floor only guards a chance near-orthogonal draw) */
        double e_dir = fabs(fd - an) / fmax(fmax(fabs(an), fabs(fd)), 1e-4 * gn);
        fd_class *k = class_of(cl, &n_cl, t->name);
        k->dir = fmax(k->dir, e_dir);
        k->n++;
        cr_expect_lt(e_dir, FD_TOL, "%s/%s: %s along a random direction: analytic %.12e vs FD %.12e (rel %.3e)",
                     what, gmn, t->name, an, fd, e_dir);
        if (e_dir > worst) worst = e_dir, snprintf(worst_name, sizeof worst_name, "%s (direction)", t->name);
        /* single scalars where the layer is the first of its kind, and outside the layers */
        int with_scalars = scalars && (strncmp(t->name, "layers.", 7) != 0 || strncmp(t->name, "layers.0.", 9) == 0 ||
                                       strncmp(t->name, "layers.3.", 9) == 0);
        for (int s = 0; with_scalars && s < 2; s++) {
            size_t j = s == 0 ? jmax : (size_t)ls_rng_below(&rng, t->numel);
            double fs = fd_derivative(&c, t, NULL, j);
            double e_s = fabs(fs - gt[j]) / fmax(fmax(fabs(gt[j]), fabs(fs)), 1e-4 * gmax);
            k->scalar = fmax(k->scalar, e_s);
            cr_expect_lt(e_s, FD_TOL, "%s/%s: %s[%zu]: analytic %.12e vs FD %.12e (rel %.3e)", what, gmn, t->name, j,
                         gt[j], fs, e_s);
            if (e_s > worst) worst = e_s, snprintf(worst_name, sizeof worst_name, "%s[%zu]", t->name, j);
        }
        free(u);
    }
    for (size_t i = 0; i < n_cl; i++)
        cr_log_info("FD %s/%s  %-22s x%-2zu worst rel err: direction %.2e, scalar %.2e", what, gmn, cl[i].name,
                    cl[i].n, cl[i].dir, cl[i].scalar);
    cr_log_info("FD %s/%s: %zu tensors (every trainable one), %zu loss evaluations, worst %.3e at %s; "
                "largest log-prob move %.3e (kink margin %.3f)",
                what, gmn, n_tensors, c.n_eval, worst, worst_name, c.max_dlp, margin);
    /* docs/model.md §3: lora targets 6 linears of a GDN block, 7 of an attention block, A and B each;
     * full: every tensor */
    size_t expect = 0;
    for (int l = 0; l < p->cfg.n_layers; l++) expect += 2 * (size_t)(((l + 1) % 4 == 0) ? 7 : 6);
    if (mode == LS_TRAIN_FULL) expect = p->n;
    cr_expect_eq(n_tensors, expect, "%s: %zu tensors checked, %zu trainable by docs/model.md", what, n_tensors, expect);
    cr_expect_lt(c.max_dlp, margin / 2, "%s/%s: a perturbation moved a log-prob by %.3e, close to a kink (%.3e)",
                 what, gmn, c.max_dlp, margin);
    if (c.detached) K(ls_hybrid_state_free)(&c.ps);
    free(g);
    ls_batch_free(b);
    K(ls_params_free)(p);
}

Test(hybrid_fd, lora_set_full_mode) { check_fd(LS_TRAIN_LORA, LS_GRAD_FULL, 1); }
Test(hybrid_fd, full_set_full_mode) { check_fd(LS_TRAIN_FULL, LS_GRAD_FULL, 1); }
Test(hybrid_fd, lora_set_detached_mode) { check_fd(LS_TRAIN_LORA, LS_GRAD_DETACHED, 0); }
Test(hybrid_fd, full_set_detached_mode) { check_fd(LS_TRAIN_FULL, LS_GRAD_DETACHED, 0); }
