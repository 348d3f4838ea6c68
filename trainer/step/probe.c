/* probe.c - the in-run gradient probe (probe.h): directional finite
 * differences of a step's loss, its batch held fixed, against the gradient
 * the optimizer is about to apply. */
#include "trainer/step/probe.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/decisions.h"
#include "kernels/grpo.h"
#include "trainer/base/rng.h"
#include "trainer/dist/ep.h"

#define R_(n) ((n) * sizeof(ls_real))
/* units in the last place each log-prob (and so each term of the loss) is taken to carry: parity's */
#define PROBE_LOSS_ULPS 4.0
/* a group whose moved evaluations decided differently is differenced again at a step this many times
 * smaller (parity's FD_SHRINK), at most PROBE_RETRIES times and while the rounding floor at the smaller
 * step would still resolve the derivative */
#define PROBE_SHRINK 8.0
#define PROBE_RETRIES 6
/* the largest error budget, relative to the derivative, a judged group may have: a probe that cannot see an
 * error of a tenth of the derivative proves nothing (the bugs it is for are 0.2 to 1.1 off) */
#define PROBE_MAX_BUDGET 0.1
/* the four moves of one difference, in parity's order: +h, -h, +h/2, -h/2 */
static const double STEP[4] = {1.0, -1.0, 0.5, -0.5};

/* One group of trainable tensors: its members (indices into p->t) and scale 1/sqrt(k). */
typedef struct {
    size_t *t, n;
    double scale;
} grp;

typedef struct {
    ls_params *p;
    ls_batch *const *bs;
    const ls_task *const *tasks;
    size_t B;
    const ls_step_options *o;
    int use_cp, sft;
    ls_cp cp;
    ls_real *save;   /* [n_trainable] theta, tensor after tensor in p->t order */
    ls_real *u;      /* [n_trainable] each tensor's unit direction */
    size_t *off;     /* [p->n] offset of tensor i in save / u (trainable only) */
    size_t *idx;     /* [trainable tensors] the groups' members, group after group */
    int64_t evals;
} px;

static void restore(px *x) {
    const ls_params *p = x->p;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable && !p->t[i].ep_remote) memcpy(p->t[i].w, x->save + x->off[i], R_(p->t[i].numel));
}

/* theta + s v over group g's tensors (the others stay theta); returns
 * <g, theta' - theta> over the moved weights as rounded.  Under expert
 * parallelism (trainer/dist/ep.h) each EP rank moves the tensors it holds
 * (a routed expert by its owner, so that the group moves as one rank's
 * would) and the experts' part of the dot is summed over the EP group
 * ("probe_dot"; NaN when that fails, which the probe reports). */
static double move(px *x, const grp *g, double s) {
    const ls_params *p = x->p;
    const ls_ep *ep = LS_K(ls_ep_get)();
    double dot = 0, dot_e = 0;
    for (size_t k = 0; k < g->n; k++) {
        const ls_tensor *t = &p->t[g->t[k]];
        if (t->ep_remote) continue;
        double *acc = ep && ls_param_expert_of(t->name, NULL) >= 0 ? &dot_e : &dot;
        const ls_real *w0 = x->save + x->off[g->t[k]], *u = x->u + x->off[g->t[k]];
        for (size_t j = 0; j < t->numel; j++) {
            t->w[j] = (ls_real)((double)w0[j] + s * g->scale * (double)u[j]);
            *acc += (double)t->g[j] * ((double)t->w[j] - (double)w0[j]);
        }
    }
    if (ep && ls_group_allreduce_sum(ep->g, &dot_e, 1, LS_TRACE_DTYPE_F64, "probe_dot", -1) != LS_OK) return NAN;
    return dot + dot_e;
}

/* The loss of group b's members from the captured state ps (GRPO: docs/model.md
 * §4 with the batch's old and reference log-probs and advantages, as the
 * replay computes it), *scale += its rounding scale sum |dL/dlogp| |logp|. */
static ls_status group_loss_grpo(px *x, const ls_batch *b, const ls_state *ps, double *loss, double *scale) {
    const ls_params *p = x->p;
    size_t Rmax = 0;
    for (size_t i = 0; i < b->G; i++)
        if (b->R[i] > Rmax) Rmax = b->R[i];
    double *lpd = ls_mem_alloc(LS_MEM_SCORE, Rmax * sizeof *lpd);
    ls_real *lp = ls_mem_alloc(LS_MEM_SCORE, R_(Rmax) * 4);
    ls_status st = lpd && lp ? LS_OK : LS_ERR_NOMEM;
    int have_ref = p->obj.beta > 0 || b->ref_supplied; /* the replay's: without a reference the KL is 0 */
    for (size_t i = 0; st == LS_OK && i < b->G; i++) {
        size_t R = b->R[i];
        ls_real *dlp = lp + Rmax, *t_old = lp + 2 * Rmax, *t_ref = lp + 3 * Rmax;
        st = LS_K(ls_score_member_chunked)(p, ps, b, i, ls_step_replay_chunk(x->o), lpd, NULL, NULL);
        if (st != LS_OK) break;
        for (size_t t = 0; t < R; t++) {
            lp[t] = (ls_real)lpd[t];
            t_old[t] = (ls_real)b->old_lp[i][t];
            t_ref[t] = have_ref ? (ls_real)b->ref_lp[i][t] : lp[t];
        }
        *loss += LS_K(ls_grpo_member_loss)(dlp, lp, t_old, t_ref, (ls_real)b->adv[i], (ls_real)p->obj.epsilon,
                                          (ls_real)p->obj.beta, b->G, R);
        for (size_t t = 0; t < R; t++) *scale += fabs((double)dlp[t]) * fabs(lpd[t]);
    }
    ls_mem_free(lp);
    ls_mem_free(lpd);
    return st;
}

/* The SFT loss of group b (the replay's: G teacher-forced branches of the
 * task's answers, each its weighted cross-entropy over its valued tokens). */
static ls_status group_loss_sft(px *x, const ls_batch *b, const ls_task *task, uint64_t seed, const ls_state *ps,
                                double *loss, double *scale) {
    ls_batch *sb = NULL;
    ls_status st = ls_batch_alloc(&sb, 1);
    if (st == LS_OK) st = ls_batch_set_prompt(sb, b->prompt, b->P);
    for (size_t i = 0; st == LS_OK && i < b->G; i++) {
        int32_t *seq = NULL;
        double *w = NULL, *lpd = NULL;
        size_t n = 0;
        st = ls_task_sft_target(task, i ? ls_rng_derive(seed, "sft") + i : 0, &seq, &w, &n);
        if (st == LS_OK) st = ls_batch_set_response(sb, 0, seq, n);
        if (st == LS_OK && !(lpd = ls_mem_alloc(LS_MEM_SCORE, n * sizeof *lpd))) st = LS_ERR_NOMEM;
        if (st == LS_OK)
            st = LS_K(ls_score_member_chunked)(x->p, ps, sb, 0, ls_step_replay_chunk(x->o), lpd, NULL, NULL);
        if (st == LS_OK) {
            size_t nv = 0;
            double s = 0, a = 0;
            for (size_t t = 0; t < n; t++) {
                w[t] /= (double)b->G;
                nv += w[t] > 0;
            }
            double nn = nv ? (double)nv : 1;
            for (size_t t = 0; t < n; t++) {
                s -= w[t] * lpd[t];
                a += fabs(w[t] * lpd[t]);
            }
            *loss += s / nn;
            *scale += a / nn;
        }
        ls_mem_free(lpd);
        ls_mem_free(seq);
        ls_mem_free(w);
    }
    ls_batch_free(sb);
    return st;
}

/* The step's loss at the current weights: every group captured (no
 * checkpoints, no hooks), scored, its loss; the mean over the groups as
 * the step takes it.  *ledger: the decisions this evaluation made. */
static ls_status eval_loss(px *x, double *loss, double *scale, ls_decisions *ledger) {
    const ls_params *p = x->p;
    const ls_step_options *o = x->o;
    ls_decisions *outer = ls_decisions_use(ledger);
    memset(ledger, 0, sizeof *ledger);
    ls_status st = LS_OK;
    double sum = 0, sc = 0, inv = 1.0 / (double)x->B;
    for (size_t b = 0; st == LS_OK && b < x->B; b++) {
        const ls_batch *bt = x->bs[b];
        ls_state ps;
        memset(&ps, 0, sizeof ps);
        if (x->use_cp)
            st = LS_K(ls_cp_capture)(&x->cp, p, bt->prompt, o->page_size, o->capture_chunk, &ps, NULL,
                                     LS_MEM_PROMPT_STATE, NULL, NULL);
        else
            st = LS_K(ls_capture)(p, bt, o->page_size, o->capture_chunk, &ps, NULL, LS_MEM_PROMPT_STATE, NULL, NULL);
        double lb = 0, sb = 0;
        if (st == LS_OK && x->sft) {
            uint64_t seed = b ? ls_rng_derive(o->seed, "group") + (uint64_t)b : o->seed; /* the group's (step.h) */
            st = group_loss_sft(x, bt, x->tasks[b], seed, &ps, &lb, &sb);
        } else if (st == LS_OK) {
            st = group_loss_grpo(x, bt, &ps, &lb, &sb);
        }
        p->fam->state_free(&ps);
        /* as the step takes it: one group's loss as it is, several groups' mean (step_txn.c aggregate) */
        sum += x->B > 1 ? lb * inv : lb;
        sc += x->B > 1 ? sb * inv : sb;
    }
    ls_decisions_use(outer);
    x->evals++;
    *loss = sum;
    *scale = sc;
    return st;
}

/* 1 when some rank's flag is set (every rank the same answer); one rank: the flag. */
static ls_status any_rank(px *x, int flag, const char *purpose, int *out) {
    *out = flag;
    if (!x->use_cp) return LS_OK;
    int64_t v = flag;
    ls_status st = ls_group_allreduce_max(x->o->cp_group, &v, 1, LS_TRACE_DTYPE_I64, purpose, -1);
    *out = v != 0;
    return st;
}

/* Evaluations k0 .. k1-1 of group g at step h (L, the moved dots A, the
 * ledgers, the rounding scale M); then whether the decisions of evaluations
 * 0 .. k1-1 differ on some rank. */
static ls_status evaluate(px *x, const grp *g, double h, int k0, int k1, double *L, double *A, ls_decisions *led,
                          double *M, int *flipped) {
    ls_status st = LS_OK;
    for (int k = k0; st == LS_OK && k < k1; k++) {
        double sc = 0;
        A[k] = move(x, g, STEP[k] * h);
        st = eval_loss(x, &L[k], &sc, &led[k]);
        restore(x);
        if (fabs(L[k]) > *M) *M = fabs(L[k]);
        if (sc > *M) *M = sc;
    }
    if (st != LS_OK) return st;
    int same = 1;
    for (int k = 1; k < k1; k++) same = same && ls_decisions_equal(&led[0], &led[k]);
    return any_rank(x, !same, "probe_decisions", flipped);
}

/* The evaluations of group g at step h and what they make of it: +-h
 * first; when a decision flipped between them the +-h/2 ones are not made
 * (the caller tries a smaller h; D is then the one central difference). */
static ls_status difference(px *x, const grp *g, double h, double tol, int full, ls_probe_group *out, int *alike,
                            int *more) {
    double L[4] = {0}, M = 0, A[4] = {0};
    ls_decisions led[4];
    int flipped = 0, n = 2;
    ls_status st = evaluate(x, g, h, 0, 2, L, A, led, &M, &flipped);
    if (st == LS_OK && !flipped) {
        n = 4;
        st = evaluate(x, g, h, 2, 4, L, A, led, &M, &flipped);
    }
    if (st != LS_OK) return st;
    *alike = !flipped;
    *more = 0;
    double d1 = (L[0] - L[1]) / (2 * h), d2 = n == 4 ? (L[2] - L[3]) / h : d1;
    double a1 = (A[0] - A[1]) / (2 * h), a2 = n == 4 ? (A[2] - A[3]) / h : a1;
    double D = (4 * d2 - d1) / 3, applied = (4 * a2 - a1) / 3;
    double est = fabs(d2 - d1) / 3;
    double eps = sizeof(ls_real) == sizeof(double) ? DBL_EPSILON : FLT_EPSILON;
    double floor_ = 3.0 * PROBE_LOSS_ULPS * eps * M / h;
    double diff = fabs(D - applied), budget = 2 * floor_ + est, rel, tolerance = tol;
    if (D != 0) {
        rel = diff / fabs(D);
        if (budget / fabs(D) > tolerance) tolerance = budget / fabs(D);
    } else { /* no derivative to be relative to: the error over the budget's scale */
        rel = diff == 0 ? 0 : budget > 0 ? diff / (budget / tol) : 1e300;
    }
    if (!isfinite(D) || !isfinite(applied) || !isfinite(floor_) || !isfinite(est)) {
        /* nothing non-finite goes into the record (docs/style.md 11): the group fails, its figures 0 */
        out->derivative = out->applied = out->error_estimate = out->rounding_floor = out->rel_error = 0;
        out->tolerance = 0;
        out->h = h;
        out->decided_alike = !flipped;
        out->verdict = full ? LS_PROBE_FAIL : LS_PROBE_REPORTED;
        out->nonfinite = 1;
        out->unresolved = 0;
        return LS_OK;
    }
    out->derivative = D;
    out->applied = applied;
    out->error_estimate = est;
    out->rounding_floor = floor_;
    out->rel_error = rel < 1e300 ? rel : 1e300;
    out->tolerance = tolerance < 1e300 ? tolerance : 1e300;
    out->h = h;
    out->decided_alike = !flipped;
    /* not judged: a decision flipped (the difference spans a jump: no derivative), or the differences cannot
     * see an error of PROBE_MAX_BUDGET of the derivative; a flip is tried again at a smaller step while the
     * rounding floor there would still resolve it (across a flip only the floor is known) */
    out->unresolved = flipped || (D != 0 && budget / fabs(D) > PROBE_MAX_BUDGET);
    *more = flipped && (D == 0 || 2 * floor_ * PROBE_SHRINK / fabs(D) <= PROBE_MAX_BUDGET);
    out->verdict = !full            ? LS_PROBE_REPORTED
                   : out->unresolved ? LS_PROBE_NOT_APPLICABLE
                   : !flipped && rel <= tolerance ? LS_PROBE_PASS
                                                  : LS_PROBE_FAIL;
    return LS_OK;
}

/* The layer of a tensor named layers.N.<...>, or -1. */
static long layer_of(const char *name) {
    if (strncmp(name, "layers.", 7) != 0 || name[7] < '0' || name[7] > '9') return -1;
    char *end = NULL;
    long v = strtol(name + 7, &end, 10);
    return end && *end == '.' ? v : -1;
}

/* A 62-bit digest of the numbers every rank must share (the verdicts and
 * each group's figures, bit for bit). */
static int64_t digest(const ls_probe_result *r) {
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < r->n_groups; k++) {
        const ls_probe_group *g = &r->groups[k];
        double v[8] = {g->derivative, g->applied, g->error_estimate, g->rounding_floor, g->rel_error, g->tolerance,
                       g->h, (double)g->verdict + 8.0 * g->decided_alike};
        for (int i = 0; i < 8; i++) {
            uint64_t bits;
            memcpy(&bits, &v[i], sizeof bits);
            h = (h ^ bits) * 1099511628211ull;
            h ^= h >> 29;
        }
    }
    return (int64_t)(h >> 2);
}

/* Groups of the trainable tensors: "all", or layers.N in layer order then "other". */
static ls_status make_groups(px *x, ls_probe_grouping grouping, grp **out, size_t *n_out, ls_probe_result *res) {
    const ls_params *p = x->p;
    long maxl = -1;
    size_t n_other = 0, n_tr = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!p->t[i].trainable) continue;
        n_tr++;
        long l = layer_of(p->t[i].name);
        if (l > maxl) maxl = l;
        if (l < 0) n_other++;
    }
    size_t ng = grouping == LS_PROBE_GROUPS_ALL ? 1 : (size_t)(maxl + 1) + (n_other > 0);
    grp *g = ls_mem_alloc(LS_MEM_SCRATCH, (ng ? ng : 1) * sizeof *g);
    size_t *idx = x->idx = ls_mem_alloc(LS_MEM_SCRATCH, (n_tr ? n_tr : 1) * sizeof *idx);
    res->groups = ls_mem_alloc(LS_MEM_SCRATCH, (ng ? ng : 1) * sizeof *res->groups);
    *out = g;
    if (!g || !idx || !res->groups) return LS_ERR_NOMEM;
    memset(res->groups, 0, (ng ? ng : 1) * sizeof *res->groups);
    size_t used = 0, kept = 0;
    for (size_t k = 0; k < ng; k++) {
        long want = grouping == LS_PROBE_GROUPS_ALL ? -2 : k < (size_t)(maxl + 1) ? (long)k : -1;
        grp *G = &g[kept];
        G->t = idx + used;
        G->n = 0;
        for (size_t i = 0; i < p->n; i++) {
            if (!p->t[i].trainable) continue;
            if (want != -2 && layer_of(p->t[i].name) != want) continue;
            G->t[G->n++] = i;
        }
        if (G->n == 0) continue; /* a layer without trainable tensors */
        used += G->n;
        G->scale = 1.0 / sqrt((double)G->n);
        ls_probe_group *rg = &res->groups[kept++];
        if (want == -2) snprintf(rg->name, sizeof rg->name, "all");
        else if (want == -1) snprintf(rg->name, sizeof rg->name, "other");
        else snprintf(rg->name, sizeof rg->name, "layers.%ld", want);
        rg->tensors = G->n;
    }
    res->n_groups = kept;
    *n_out = kept;
    return LS_OK;
}

/* Every trainable tensor's unit direction (its own Gaussian stream, seeded
 * by the probe's seed and its name) and a copy of theta. */
static ls_status prepare(px *x, uint64_t seed) {
    const ls_params *p = x->p;
    size_t n = 0;
    x->off = ls_mem_alloc(LS_MEM_SCRATCH, (p->n ? p->n : 1) * sizeof *x->off);
    if (!x->off) return LS_ERR_NOMEM;
    for (size_t i = 0; i < p->n; i++) {
        x->off[i] = n;
        if (p->t[i].trainable && !p->t[i].ep_remote) n += p->t[i].numel;
    }
    x->save = ls_mem_alloc(LS_MEM_SCRATCH, R_(n ? n : 1));
    x->u = ls_mem_alloc(LS_MEM_SCRATCH, R_(n ? n : 1));
    if (!x->save || !x->u) return LS_ERR_NOMEM;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (!t->trainable || t->ep_remote) continue; /* EP: another rank's expert is moved by its owner */
        memcpy(x->save + x->off[i], t->w, R_(t->numel));
        ls_real *u = x->u + x->off[i];
        ls_rng r;
        ls_rng_seed(&r, ls_rng_derive(seed, t->name));
        double norm = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double z = ls_rng_normal(&r);
            u[j] = (ls_real)z;
            norm += (double)u[j] * (double)u[j];
        }
        norm = sqrt(norm);
        for (size_t j = 0; j < t->numel; j++) u[j] = (ls_real)((double)u[j] / (norm > 0 ? norm : 1));
    }
    return LS_OK;
}

ls_status LS_K(ls_probe_step)(ls_params *p, ls_batch *const *bs, const ls_task *const *tasks, size_t B,
                              const ls_step_options *o, const ls_probe_options *po, ls_probe_result *res,
                              char *err, size_t err_len) {
    memset(res, 0, sizeof *res);
    if (err_len) err[0] = 0;
    int f64 = sizeof(ls_real) == sizeof(double);
    res->sft = o->objective == LS_OBJECTIVE_SFT;
    res->full = p->obj.grad_mode == LS_GRAD_FULL;
    res->grouping = po->grouping;
    res->tol = po->tol > 0 ? po->tol : ls_probe_default_tol(f64);
    res->seed = ls_probe_seed(o->seed);
    res->ranks_agree = 1;
    if (po->prefix_frozen) {
        res->verdict = LS_PROBE_NOT_APPLICABLE;
        snprintf(res->reason, sizeof res->reason, "a prefix-frozen step: its gradient is of a stale prompt state "
                 "(by design), not of the loss at the current weights");
        return LS_OK;
    }
    if (B < 1 || !bs || (res->sft && !tasks)) {
        snprintf(err, err_len, "probe: %s", B < 1 || !bs ? "no groups" : "the sft objective needs the task");
        return LS_ERR_ARG;
    }
    int64_t t0 = ls_hook_now_ns();
    double h = po->h > 0 ? po->h : ls_probe_default_h(f64);
    res->h = h;
    px x = {.p = p, .bs = bs, .tasks = tasks, .B = B, .o = o, .sft = res->sft,
            .use_cp = o->cp_group && ls_group_size(o->cp_group) > 1};
    grp *groups = NULL;
    size_t ng = 0;
    ls_status st = LS_OK;
    int cp_open = 0;
    if (x.use_cp) {
        st = LS_K(ls_cp_init)(&x.cp, o->cp_group, p, (int64_t)bs[0]->P - 1, &o->cp_faults, err, err_len);
        cp_open = st == LS_OK;
    }
    if (st == LS_OK) st = prepare(&x, res->seed);
    if (st == LS_OK) st = make_groups(&x, po->grouping, &groups, &ng, res);
    if (st == LS_OK && ng == 0) {
        res->verdict = LS_PROBE_NOT_APPLICABLE;
        snprintf(res->reason, sizeof res->reason, "no trainable tensor to move");
    }
    int failed = 0, unresolved = 0;
    for (size_t k = 0; st == LS_OK && k < ng; k++) {
        int alike = 0, more = 0;
        double hk = h;
        for (int round = 0; st == LS_OK && round <= PROBE_RETRIES; round++, hk /= PROBE_SHRINK) {
            st = difference(&x, &groups[k], hk, res->tol, res->full, &res->groups[k], &alike, &more);
            if (!more) break;
        }
        const ls_probe_group *gk = &res->groups[k];
        if (st == LS_OK && (gk->verdict == LS_PROBE_FAIL || gk->nonfinite) && !failed++)
            snprintf(res->reason, sizeof res->reason, "%s: %s", gk->name,
                     gk->nonfinite ? "a loss at the moved weights, or the applied gradient, is not finite"
                                   : "the applied gradient differs from the loss's derivative");
        if (st == LS_OK && gk->unresolved && !gk->nonfinite && !failed && !unresolved++) {
            if (alike)
                snprintf(res->reason, sizeof res->reason, "%s: the differences cannot resolve the derivative (error "
                         "budget %.3g of it at h = %.3g): not judged", gk->name,
                         (2 * gk->rounding_floor + gk->error_estimate) / fabs(gk->derivative), gk->h);
            else
                snprintf(res->reason, sizeof res->reason, "%s: a discrete decision flipped between the moved weights "
                         "at every step tried, down to h = %.3g (where the rounding floor is %.3g of the derivative): "
                         "no derivative to compare, not judged", gk->name, gk->h,
                         gk->derivative != 0 ? 2 * gk->rounding_floor / fabs(gk->derivative) : 0.0);
        }
    }
    if (x.save) restore(&x); /* every evaluation restored it; once more on a failure between */
    if (st == LS_OK && ng > 0) { /* every rank the same numbers (one rank: trivially) */
        int64_t v[3] = {failed > 0, digest(res), -digest(res)};
        if (x.use_cp) st = ls_group_allreduce_max(o->cp_group, v, 3, LS_TRACE_DTYPE_I64, "probe_agree", -1);
        if (st == LS_OK) {
            res->ranks_agree = v[1] == -v[2];
            size_t n = strlen(res->reason);
            if (!res->ranks_agree)
                snprintf(res->reason + n, sizeof res->reason - n, "%sthe ranks computed different numbers (their "
                         "digests differ)", n ? "; " : "");
            else if (v[0] && !failed && res->full)
                snprintf(res->reason + n, sizeof res->reason - n, "another rank's probe failed");
            res->verdict = !res->full                                  ? LS_PROBE_REPORTED
                           : v[0] != 0 || !res->ranks_agree            ? LS_PROBE_FAIL
                           : unresolved                                ? LS_PROBE_NOT_APPLICABLE
                                                                       : LS_PROBE_PASS;
        }
    }
    res->evaluations = x.evals;
    res->seconds = (double)(ls_hook_now_ns() - t0) * 1e-9;
    if (st != LS_OK && err[0] == 0) snprintf(err, err_len, "probe: %s", ls_status_str(st));
    ls_mem_free(x.idx);
    ls_mem_free(groups);
    ls_mem_free(x.u);
    ls_mem_free(x.save);
    ls_mem_free(x.off);
    if (cp_open) LS_K(ls_cp_free)(&x.cp);
    return st;
}
