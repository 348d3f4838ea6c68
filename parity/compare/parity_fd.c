/* parity_fd.c - directional finite differences of the loss (parity.h).
 *
 * One direction per trainable tensor (--fd-groups tensor) or per group of
 * them (--fd-groups layer: the trainable tensors of layers.N, one group per
 * layer, and those outside the layers, an embedding or a final norm, one
 * more group).  Every tensor T has its own random unit direction u_T
 * (Gaussian, seeded by the tensor's index, the same in both modes); a
 * group of k tensors moves along d = (u_T / sqrt(k)) over its members, a
 * unit direction in which every member weighs the same whatever its size.
 * The float64 naive loss at the weights moved by +h d, -h d, +h/2 d,
 * -h/2 d (four trainer runs on the grad rollouts, whose old and reference
 * log-probs are supplied so that the loss is a function of the weights
 * alone), the central differences D(h) and D(h/2), and Richardson's
 * (4 D(h/2) - D(h)) / 3, whose error is O(h^4).  It depends on the forward
 * only; the checks compare it with the gradients' g . d (summed over a
 * group's members, for the naive and the LongStraw gradient alike).
 * |D(h/2) - D(h)| / 3 estimates D(h/2)'s own error and is reported beside
 * each entry.
 *
 * What grouping detects and what it does not.  An error e_T in the gradient
 * of one member T changes g . d by e_T . u_T / sqrt(k); the entry fails when
 * that exceeds the entry's tolerance, 1e-7 of |g . d| or the error budget
 * (rounding floor plus truncation estimate, twice over), whichever is
 * larger.  Per tensor the threshold for |e_T . u_T| is 1e-7 of T's own
 * directional derivative |g_T . u_T| (or the budget); in a group it is 1e-7
 * of the sum of the members' |sum_S g_S . u_S| (or sqrt(k) times the
 * budget).  So a member whose directional derivative is a small share of
 * its group's needs a proportionally larger relative error to be seen: a
 * wrong gradient in a tensor with 1e-4 of its group's derivative passes
 * unless it is wrong by more than about 1e-3 of itself (per tensor: 1e-7).
 * A real backward bug (a term missing, a sign or a factor wrong) is wrong
 * by a relative O(1) in the tensors it touches and is still far above it;
 * a subtle one of relative 1e-5 in a minor member may pass.  Errors in two
 * members could also cancel in the sum (e_S . u_S = -e_T . u_T within the
 * tolerance): with independent random directions that is a coincidence of
 * about the same odds as one error landing orthogonal to its own direction,
 * which per-tensor differences risk too.  An entry that fails names its
 * group, not the tensor: --fd-groups tensor locates it.  Grouping changes
 * fd_grad only: the grad check (LongStraw against the naive gradient, every
 * tensor at 1e-10) and cp_grad stay per tensor, so a fault in LongStraw's
 * own gradient (the CP reductions, the prompt-state backward) is caught per
 * tensor as before; what grouping weakens is the link "the float64 naive
 * gradient is the derivative of the forward" for a bug both share (a
 * backward kernel), which the kernels' own finite-difference tests
 * (tests/kernels/test_kernels_*_fd.c) check per kernel input.
 *
 * The runs go through one job pool: a run's moved weights are written just
 * before it starts (while the other runs go on) and removed, with its run
 * directory, as soon as its loss is read (unless --keep-fd), so that at
 * most --jobs weight files exist at a time. */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/plan/parity.h"
#include "trainer/base/safetensors.h"

#define FD_TOL 1e-7
/* units in the last place of a computed loss (a float64 sum of log-probs): the rounding error
 * assumed of each loss the finite differences subtract */
#define FD_LOSS_ULPS 4.0
/* a direction whose moved runs decided differently from the unmoved run is differenced again at a step
 * this many times smaller, at most FD_RETRIES times (the decision's margin against the move) */
#define FD_SHRINK 8.0
#define FD_RETRIES 4

void ls_parity_fd_richardson(const double L[4], double h, double *fd, double *est, double *floor_) {
    double d1 = (L[0] - L[1]) / (2 * h), d2 = (L[2] - L[3]) / h;
    *fd = (4 * d2 - d1) / 3;
    *est = fabs(d2 - d1) / 3;
    /* the rounding floor of that combination: each loss carries a rounding error of
     * about FD_LOSS_ULPS units of its last place, d1 gets it / h, d2 twice that,
     * (4 d2 - d1) / 3 three times it */
    double lmax = 0;
    for (int k = 0; k < 4; k++)
        if (fabs(L[k]) > lmax) lmax = fabs(L[k]);
    *floor_ = 3.0 * FD_LOSS_ULPS * DBL_EPSILON * lmax / h;
}

static const double STEP[4] = {1.0, -1.0, 0.5, -0.5};

const char *ls_parity_fd_groups_name(int fd_groups) {
    return fd_groups == LS_PARITY_FD_TENSOR ? "tensor" : fd_groups == LS_PARITY_FD_LAYER ? "layer" : NULL;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) * 0x1.0p-53; }

/* A unit direction of n elements. */
void ls_parity_fd_direction(uint64_t seed, size_t n, double *d) {
    uint64_t s = seed;
    double norm = 0;
    for (size_t i = 0; i < n; i += 2) {
        double u = uniform01(&s), v = uniform01(&s), rad = sqrt(-2.0 * log(u));
        d[i] = rad * cos(2 * 3.14159265358979323846 * v);
        if (i + 1 < n) d[i + 1] = rad * sin(2 * 3.14159265358979323846 * v);
    }
    for (size_t i = 0; i < n; i++) norm += d[i] * d[i];
    norm = sqrt(norm);
    for (size_t i = 0; i < n; i++) d[i] /= norm;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The layer of a tensor named layers.N.<...>, or -1. */
static long layer_of(const char *name) {
    if (strncmp(name, "layers.", 7) != 0 || name[7] < '0' || name[7] > '9') return -1;
    long v = 0;
    const char *p = name + 7;
    for (; *p >= '0' && *p <= '9' && v < (1L << 24); p++) v = 10 * v + (*p - '0');
    return *p == '.' ? v : -1;
}

ls_status ls_parity_fd_units(int fd_groups, const ls_parity_tensors *g, ls_parity_fd_unit **units, size_t *nu,
                            size_t **idx) {
    size_t n = g->n;
    *units = calloc(n ? n : 1, sizeof **units);
    *idx = calloc(n ? n : 1, sizeof **idx);
    long *layer = calloc(n ? n : 1, sizeof *layer);
    if (*units == NULL || *idx == NULL || layer == NULL) {
        free(layer);
        return LS_ERR_NOMEM;
    }
    *nu = 0;
    if (fd_groups == LS_PARITY_FD_TENSOR) {
        for (size_t i = 0; i < n; i++) {
            (*idx)[i] = i;
            ls_parity_fd_unit *u = &(*units)[(*nu)++];
            snprintf(u->name, sizeof u->name, "%s", g->name[i]);
            u->first = i;
            u->n = 1;
        }
        free(layer);
        return LS_OK;
    }
    long max_layer = -1;
    for (size_t i = 0; i < n; i++) {
        layer[i] = layer_of(g->name[i]);
        if (layer[i] > max_layer) max_layer = layer[i];
    }
    /* the layers in order (a name's order puts layers.10 before layers.2), then the rest */
    size_t k = 0;
    for (long l = 0; l <= max_layer + 1; l++) {
        long want = l <= max_layer ? l : -1;
        size_t first = k;
        for (size_t i = 0; i < n; i++)
            if (layer[i] == want) (*idx)[k++] = i;
        if (k == first) continue;
        ls_parity_fd_unit *u = &(*units)[(*nu)++];
        u->first = first;
        u->n = k - first;
        if (want >= 0)
            snprintf(u->name, sizeof u->name, "layers.%ld (%zu tensor%s)", want, u->n, u->n == 1 ? "" : "s");
        else
            snprintf(u->name, sizeof u->name, "outside the layers (%zu tensor%s)", u->n, u->n == 1 ? "" : "s");
    }
    free(layer);
    return LS_OK;
}

/* The state the pool's hooks share. */
typedef struct {
    const ls_parity_opts *o;
    const ls_parity_config *c;
    const char *rollouts, *weights;
    char fdir[LS_PARITY_PATH];
    const ls_parity_tensors *w, *gn, *gl;
    const ls_parity_fd_unit *units; /* the nt directions that run */
    size_t nt;
    const size_t *idx;    /* members: gradient indices */
    const long *wi, *li;  /* per member: its index in w, in gl */
    ls_parity_job *jobs;  /* [4 nt + 1]: run 4 u + k is unit u at STEP[k]; run 4 nt the unmoved weights */
    double *loss;         /* [4 nt + 1] */
    uint64_t *dec;        /* [2 (4 nt + 1)]: each run's decisions (count, digest; kernels/decisions.h) */
    double *an, *al;      /* [nt]: g . d, naive and LongStraw */
    const double **vals;  /* [w->n]: the values a moved weights file holds */
    double *d, *moved;    /* the current unit's direction and moved values, its members' blocks in order */
    size_t cap, cur;      /* capacity of d and moved; the unit they hold (SIZE_MAX: none) */
    size_t runs_done;
    double t0;
    double h; /* the larger step of these runs */
} fd_ctx;

static void paths_of(const fd_ctx *x, size_t i, char *weights, char *run, char *log) {
    if (i == 4 * x->nt) { /* the unmoved run */
        snprintf(weights, LS_PARITY_PATH, "%s", x->weights);
        snprintf(run, LS_PARITY_PATH, "%s/unmoved", x->fdir);
        snprintf(log, LS_PARITY_PATH, "%s/unmoved.log", x->fdir);
        return;
    }
    snprintf(weights, LS_PARITY_PATH, "%s/%zu-%zu.safetensors", x->fdir, i / 4, i % 4);
    snprintf(run, LS_PARITY_PATH, "%s/%zu-%zu", x->fdir, i / 4, i % 4);
    snprintf(log, LS_PARITY_PATH, "%s/%zu-%zu.log", x->fdir, i / 4, i % 4);
}

/* The direction of unit u into x->d (and g . d into an[u], al[u]). */
static ls_status unit_direction(fd_ctx *x, size_t u) {
    const ls_parity_fd_unit *un = &x->units[u];
    size_t total = 0;
    for (size_t m = 0; m < un->n; m++) total += x->w->numel[x->wi[un->first + m]];
    if (total > x->cap) {
        free(x->d);
        free(x->moved);
        x->d = malloc(total * sizeof *x->d);
        x->moved = malloc(total * sizeof *x->moved);
        x->cap = x->d && x->moved ? total : 0;
        if (x->cap == 0) return LS_ERR_NOMEM;
    }
    const double scale = 1.0 / sqrt((double)un->n);
    double an = 0, al = 0;
    size_t off = 0;
    for (size_t m = 0; m < un->n; m++) {
        size_t gi = x->idx[un->first + m], n = x->w->numel[x->wi[un->first + m]];
        double *d = x->d + off;
        ls_parity_fd_direction(x->o->seed * 1000003u + gi, n, d);
        if (un->n > 1)
            for (size_t i = 0; i < n; i++) d[i] *= scale;
        an += dot(x->gn->v[gi], d, n);
        al += dot(x->gl->v[x->li[un->first + m]], d, n);
        off += n;
    }
    x->an[u] = an;
    x->al[u] = al;
    x->cur = u;
    return LS_OK;
}

/* Before run i: its moved weights, its command line. */
static ls_status fd_before(void *ctx, size_t i, char *err, size_t errlen) {
    fd_ctx *x = ctx;
    if (i == 4 * x->nt) { /* the unmoved weights: the decisions every moved run must make again */
        char weights[LS_PARITY_PATH], run[LS_PARITY_PATH], log[LS_PARITY_PATH];
        paths_of(x, i, weights, run, log);
        ls_parity_train tr = {.dt = LS_PARITY_F64, .world = 1, .out = run, .log = log, .rollouts = x->rollouts,
                              .load = x->weights, .strategy = "naive"};
        ls_parity_train_job(x->o, x->c, &tr, &x->jobs[i]);
        return LS_OK;
    }
    size_t u = i / 4;
    const ls_parity_fd_unit *un = &x->units[u];
    ls_status s = LS_OK;
    if (x->cur != u && (s = unit_direction(x, u)) != LS_OK) {
        snprintf(err, errlen, "%s finite differences: no memory for the direction of %s", x->c->name, un->name);
        return s;
    }
    const double step = STEP[i % 4] * x->h;
    for (size_t t = 0; t < x->w->n; t++) x->vals[t] = x->w->v[t];
    size_t off = 0;
    for (size_t m = 0; m < un->n; m++) {
        long t = x->wi[un->first + m];
        size_t n = x->w->numel[t];
        for (size_t j = 0; j < n; j++) x->moved[off + j] = x->w->v[t][j] + step * x->d[off + j];
        x->vals[t] = x->moved + off;
        off += n;
    }
    char weights[LS_PARITY_PATH], run[LS_PARITY_PATH], log[LS_PARITY_PATH];
    paths_of(x, i, weights, run, log);
    ls_safetensors_writer *wr = NULL;
    s = ls_safetensors_writer_init(&wr);
    for (size_t t = 0; s == LS_OK && t < x->w->n; t++)
        s = ls_safetensors_writer_add_f64(wr, x->w->name[t], LS_SAFETENSORS_F64, x->w->shape[t], x->w->ndim[t],
                                          x->vals[t]);
    if (s == LS_OK) s = ls_safetensors_writer_write(wr, weights, err, errlen);
    else snprintf(err, errlen, "%s: cannot build the moved weights: %s", weights, ls_status_str(s));
    ls_safetensors_writer_free(wr);
    if (s != LS_OK) return s;
    ls_parity_train tr = {.dt = LS_PARITY_F64, .world = 1, .out = run, .log = log, .rollouts = x->rollouts,
                          .load = weights, .strategy = "naive"};
    ls_parity_train_job(x->o, x->c, &tr, &x->jobs[i]);
    return LS_OK;
}

/* After run i: its loss; its files removed (unless --keep-fd). */
static ls_status fd_after(void *ctx, size_t i, char *err, size_t errlen) {
    fd_ctx *x = ctx;
    char weights[LS_PARITY_PATH], run[LS_PARITY_PATH], log[LS_PARITY_PATH];
    paths_of(x, i, weights, run, log);
    ls_parity_job *j = &x->jobs[i];
    ls_status s = LS_OK;
    if (j->rc != 0) {
        snprintf(err, errlen, "%s: finite-difference run %s exited %d%s (its output: %s)", x->c->name, run, j->rc,
                 j->rc == 137 ? " (killed: timeout?)" : "", log);
        s = LS_ERR_FORMAT;
    }
    if (s == LS_OK) s = ls_parity_log_loss(log, &x->loss[i], err, errlen);
    if (s == LS_OK) s = ls_parity_log_decisions(log, &x->dec[2 * i], &x->dec[2 * i + 1], err, errlen);
    if (s == LS_OK && !x->o->keep_fd) {
        remove(log);
        if (i != 4 * x->nt) remove(weights);
        ls_parity_remove_tree(run);
    }
    ls_parity_job_free(j);
    x->runs_done++;
    if (s == LS_OK && !x->o->quiet && (x->runs_done % 4 == 0 || x->runs_done == 4 * x->nt))
        fprintf(stderr, "longstraw-parity: %s finite differences: %zu/%zu %s, %.1f s\r", x->c->name,
                x->runs_done / 4, x->nt, x->o->fd_groups == LS_PARITY_FD_LAYER ? "groups" : "tensors",
                ls_parity_now() - x->t0);
    return s;
}

/* Whether unit u's four moved runs made the unmoved run's decisions. */
static bool decided_alike(const fd_ctx *x, size_t u) {
    const uint64_t *base = &x->dec[2 * 4 * x->nt];
    for (int k = 0; k < 4; k++)
        if (x->dec[2 * (4 * u + k)] != base[0] || x->dec[2 * (4 * u + k) + 1] != base[1]) return false;
    return true;
}

/* Round `round` of the units whose moved runs decided differently: their four runs again at a step
 * FD_SHRINK times smaller than their last (in DIR/fd-retryN), losses and decisions copied back, hs[u]
 * their step; *extra counts the runs. */
static ls_status fd_retry(fd_ctx *x, int round, double *hs, int *extra, char *err, size_t errlen) {
    size_t nf = 0;
    for (size_t u = 0; u < x->nt; u++) nf += !decided_alike(x, u);
    if (nf == 0) return LS_OK;
    fd_ctx y = *x;
    size_t *which = calloc(nf, sizeof *which);
    ls_parity_fd_unit *sub = calloc(nf, sizeof *sub);
    y.jobs = calloc(4 * nf, sizeof *y.jobs);
    y.loss = calloc(4 * nf, sizeof *y.loss);
    y.dec = calloc(2 * 4 * nf, sizeof *y.dec);
    y.an = calloc(nf, sizeof *y.an);
    y.al = calloc(nf, sizeof *y.al);
    y.d = y.moved = NULL;
    y.cap = 0;
    y.cur = SIZE_MAX;
    y.runs_done = 0;
    ls_status s = which && sub && y.jobs && y.loss && y.dec && y.an && y.al ? LS_OK : LS_ERR_NOMEM;
    for (size_t u = 0, j = 0; s == LS_OK && u < x->nt; u++)
        if (!decided_alike(x, u)) which[j] = u, sub[j++] = x->units[u];
    y.units = sub;
    y.nt = nf;
    y.h = s == LS_OK ? hs[which[0]] / FD_SHRINK : 0;
    snprintf(y.fdir, sizeof y.fdir, "%s-retry%d", x->fdir, round);
    if (s == LS_OK) s = ls_parity_fresh_dir(y.fdir, err, errlen);
    if (s == LS_OK && !x->o->quiet)
        fprintf(stderr, "longstraw-parity: %s finite differences: %zu direction(s) decided differently at +-h: "
                "again at h = %g\n", x->c->name, nf, y.h);
    if (s == LS_OK)
        s = ls_parity_jobs_run_hooked(y.jobs, 4 * nf, x->o->jobs, x->o->timeout_s, fd_before, fd_after, &y, err,
                                      errlen);
    for (size_t j = 0; s == LS_OK && j < nf; j++) {
        size_t u = which[j];
        hs[u] = y.h;
        for (int k = 0; k < 4; k++) {
            x->loss[4 * u + k] = y.loss[4 * j + k];
            x->dec[2 * (4 * u + k)] = y.dec[2 * (4 * j + k)];
            x->dec[2 * (4 * u + k) + 1] = y.dec[2 * (4 * j + k) + 1];
        }
    }
    if (s == LS_OK) *extra += (int)(4 * nf);
    if (s == LS_OK && !x->o->keep_fd) ls_parity_remove_tree(y.fdir);
    for (size_t i = 0; y.jobs && i < 4 * nf; i++) ls_parity_job_free(&y.jobs[i]);
    free(y.jobs), free(y.loss), free(y.dec), free(y.an), free(y.al), free(y.d), free(y.moved);
    free(which), free(sub);
    return s;
}

ls_status ls_parity_fd_checks(const ls_parity_opts *o, const ls_parity_config *c, const char *dir,
                              const char *weights, const char *rollouts, const ls_parity_tensors *g_naive,
                              const ls_parity_tensors *g_ls, cJSON *checks[2], double *secs, int *runs,
                              char *err, size_t errlen) {
    checks[0] = checks[1] = NULL;
    *secs = 0;
    *runs = 0;
    if (ls_parity_fd_groups_name(o->fd_groups) == NULL) {
        snprintf(err, errlen, "finite differences: fd_groups %d is not a grouping", o->fd_groups);
        return LS_ERR_ARG;
    }
    const bool grouped = o->fd_groups != LS_PARITY_FD_TENSOR;
    ls_parity_tensors w = {0};
    ls_parity_fd_unit *all = NULL;
    size_t *idx = NULL, nall = 0;
    fd_ctx x = {.o = o, .c = c, .rollouts = rollouts, .weights = weights, .w = &w, .gn = g_naive, .gl = g_ls, .cur = SIZE_MAX};
    double *fd = NULL, *est = NULL, *floor_ = NULL, *hs = NULL;
    ls_parity_fd_unit *units = NULL;
    long *wi = NULL, *li = NULL;
    ls_status s = ls_parity_tensors_read(weights, &w, err, errlen);
    if (s != LS_OK) return s;
    if ((s = ls_parity_fd_units(o->fd_groups, g_naive, &all, &nall, &idx)) != LS_OK) goto done;
    size_t nt = o->fd_max && o->fd_max < nall ? o->fd_max : nall;
    units = calloc(nt ? nt : 1, sizeof *units); /* evenly spaced when fd_max cuts */
    wi = calloc(g_naive->n ? g_naive->n : 1, sizeof *wi);
    li = calloc(g_naive->n ? g_naive->n : 1, sizeof *li);
    fd = calloc(nt ? nt : 1, sizeof *fd);
    est = calloc(nt ? nt : 1, sizeof *est);
    floor_ = calloc(nt ? nt : 1, sizeof *floor_);
    x.an = calloc(nt ? nt : 1, sizeof *x.an);
    x.al = calloc(nt ? nt : 1, sizeof *x.al);
    x.loss = calloc(4 * nt + 1, sizeof *x.loss);
    x.jobs = calloc(4 * nt + 1, sizeof *x.jobs);
    x.dec = calloc(2 * (4 * nt + 1), sizeof *x.dec);
    x.vals = calloc(w.n ? w.n : 1, sizeof *x.vals);
    if (!units || !wi || !li || !fd || !est || !floor_ || !x.an || !x.al || !x.loss || !x.jobs || !x.dec || !x.vals) {
        s = LS_ERR_NOMEM;
        goto done;
    }
    for (size_t k = 0; k < nt; k++) units[k] = all[k * nall / nt];
    /* every member has its weights and its LongStraw gradient, of its size */
    for (size_t m = 0; m < g_naive->n; m++) {
        size_t gi = idx[m];
        wi[m] = ls_parity_tensors_find(&w, g_naive->name[gi]);
        li[m] = ls_parity_tensors_find(g_ls, g_naive->name[gi]);
        if (wi[m] < 0 || w.numel[wi[m]] != g_naive->numel[gi] || li[m] < 0 ||
            g_ls->numel[li[m]] != g_naive->numel[gi]) {
            snprintf(err, errlen, "%s: trainable tensor %s has no matching weights or LongStraw gradient", weights,
                     g_naive->name[gi]);
            s = LS_ERR_FORMAT;
            goto done;
        }
    }
    x.units = units;
    x.nt = nt;
    x.idx = idx;
    x.wi = wi;
    x.li = li;
    const double h = o->fd_step;
    x.t0 = ls_parity_now();
    snprintf(x.fdir, sizeof x.fdir, "%s/fd", dir);
    s = ls_parity_fresh_dir(x.fdir, err, errlen);
    if (s != LS_OK) goto done;
    x.h = h;
    s = ls_parity_jobs_run_hooked(x.jobs, 4 * nt + 1, o->jobs, o->timeout_s, fd_before, fd_after, &x, err, errlen);
    if (!o->quiet) fprintf(stderr, "\n");
    if (s != LS_OK) goto done;
    hs = malloc((nt ? nt : 1) * sizeof *hs);
    if (hs == NULL) {
        s = LS_ERR_NOMEM;
        goto done;
    }
    for (size_t u = 0; u < nt; u++) hs[u] = h;
    int extra = 0;
    for (int round = 1; round <= FD_RETRIES && s == LS_OK; round++)
        s = fd_retry(&x, round, hs, &extra, err, errlen);
    if (s != LS_OK) goto done;
    for (size_t u = 0; u < nt; u++) {
        ls_parity_fd_richardson(&x.loss[4 * u], hs[u], &fd[u], &est[u], &floor_[u]);
    }
    *secs = ls_parity_now() - x.t0;
    *runs = (int)(4 * nt + 1) + extra;
    for (int which = 0; which < 2; which++) {
        cJSON *arr = cJSON_CreateArray();
        const double *a = which == 0 ? x.an : x.al;
        for (size_t u = 0; u < nt; u++) {
            ls_parity_err e = {fabs(a[u] - fd[u]), 0};
            e.max_rel = fd[u] != 0 ? e.max_abs / fabs(fd[u]) : e.max_abs == 0 ? 0 : INFINITY;
            /* relative FD_TOL, or the error budget where the derivative is so small that FD_TOL of it
             * lies below what the differences of the losses can resolve */
            /* the finite difference's own error budget: its rounding floor plus its truncation estimate,
             * twice over (both are estimates: a longer loss computation, hybrid-small's, carries more
             * rounding than FD_LOSS_ULPS; measured 4.36e-12 against 3.33e-12 + 1.02e-12 on one tensor) */
            double budget = 2.0 * (floor_[u] + est[u]);
            double tol = FD_TOL;
            if (fd[u] != 0 && budget / fabs(fd[u]) > tol) tol = budget / fabs(fd[u]);
            /* a derivative of exactly 0 (a tensor no token reached: the loss differences are all equal) is
             * judged against the same rounding floor as an absolute error: the relative error over the
             * floor's scale (floor / tolerance), so that "pass" still reads max_rel_err <= tolerance */
            if (fd[u] == 0 && isfinite(e.max_abs))
                e.max_rel = e.max_abs == 0 ? 0 : budget > 0 ? e.max_abs / (budget / tol) : INFINITY;
            /* a difference quotient across a decision that flipped between the moved weights (a DSA key
             * or an MoE expert chosen at +h and not at -h) spans a jump: no derivative, no verdict */
            bool alike = decided_alike(&x, u);
            if (!alike) e.max_rel = INFINITY;
            cJSON *en = ls_parity_entry(units[u].name, e, tol, -1);
            cJSON_AddBoolToObject(en, "fd_decided_alike", alike);
            if (hs[u] != h) cJSON_AddNumberToObject(en, "fd_step", hs[u]);
            cJSON_AddNumberToObject(en, "fd_derivative", fd[u]);
            cJSON_AddNumberToObject(en, "fd_error_estimate", est[u]);
            cJSON_AddNumberToObject(en, "fd_rounding_floor", floor_[u]);
            if (grouped) { /* the members, by name */
                cJSON *names = cJSON_AddArrayToObject(en, "tensors");
                for (size_t m = 0; names && m < units[u].n; m++)
                    cJSON_AddItemToArray(names, cJSON_CreateString(g_naive->name[idx[units[u].first + m]]));
            }
            cJSON_AddItemToArray(arr, en);
        }
        if (nt < nall) { /* not every trainable tensor: the check cannot pass */
            char what[96];
            snprintf(what, sizeof what, "coverage: %zu of %zu %s (--fd-max)", nt, nall,
                     grouped ? "groups of trainable tensors" : "trainable tensors");
            cJSON_AddItemToArray(arr, ls_parity_entry(what, (ls_parity_err){1, 1}, FD_TOL, -1));
        }
        char name[256];
        snprintf(name, sizeof name, "fd_grad %s f64 cp1 %s", c->name, which == 0 ? "naive" : "full");
        checks[which] = ls_parity_check_new("fd_grad", name, 0, 1, c->name, which == 0 ? NULL : "full",
                                                      grouped ? "directional finite differences of the loss "
                                                                "(Richardson), one direction per layer's "
                                                                "trainable tensors"
                                                              : "directional finite differences of the loss "
                                                                "(Richardson)",
                                                      which == 0 ? "naive full sequence" : "longstraw cp1 full", arr,
                                                      grouped ? "groups" : "tensors");
    }
done:
    for (size_t i = 0; x.jobs && i < 4 * x.nt + 1; i++) ls_parity_job_free(&x.jobs[i]);
    free(x.dec);
    free(x.d);
    free(x.moved);
    free(x.vals);
    free(x.jobs);
    free(x.loss);
    free(x.an);
    free(x.al);
    free(hs);
    free(fd);
    free(est);
    free(floor_);
    free(units);
    free(wi);
    free(li);
    free(all);
    free(idx);
    ls_parity_tensors_free(&w);
    return s;
}

ls_status ls_parity_fd(const ls_parity_opts *o, const ls_parity_config *c, ls_parity_report *rep, const char *dir,
                       const char *weights, const char *rollouts, const ls_parity_tensors *g_naive,
                       const ls_parity_tensors *g_ls, char *err, size_t errlen) {
    cJSON *checks[2];
    double secs;
    int runs;
    ls_status s = ls_parity_fd_checks(o, c, dir, weights, rollouts, g_naive, g_ls, checks, &secs, &runs, err, errlen);
    if (s != LS_OK) return s;
    char part[128];
    snprintf(part, sizeof part, "%s finite differences", c->name);
    ls_parity_report_timing(rep, part, secs, runs);
    ls_parity_report_add(rep, checks[0]);
    ls_parity_report_add(rep, checks[1]);
    return LS_OK;
}
