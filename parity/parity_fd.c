/* parity_fd.c - directional finite differences of the loss (parity.h).
 *
 * For every trainable tensor T: a random unit direction d (Gaussian,
 * seeded by the tensor's index), the float64 naive loss at the weights
 * with T moved by +h d, -h d, +h/2 d, -h/2 d (four trainer runs on the grad
 * rollouts, whose old and reference log-probs are supplied so that the
 * loss is a function of the weights alone), the central differences
 * D(h) and D(h/2), and Richardson's (4 D(h/2) - D(h)) / 3, whose error is
 * O(h^4).  It depends on the forward only; the checks compare it with the
 * gradients' g . d.  |D(h/2) - D(h)| / 3 estimates D(h/2)'s own error and
 * is reported beside each tensor. */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/parity.h"
#include "trainer/safetensors.h"

#define FD_TOL 1e-7
/* units in the last place of a computed loss (a float64 sum of log-probs): the rounding error
 * assumed of each loss the finite differences subtract */
#define FD_LOSS_ULPS 4.0
#define FD_BATCH 24 /* tensors whose perturbed weights exist at once (4 files each) */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) * 0x1.0p-53; }

/* A unit direction of n elements. */
static void direction(uint64_t seed, size_t n, double *d) {
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

static ls_status write_moved(const ls_parity_tensors *w, long t, const double *moved, const char *path, char *err,
                             size_t errlen) {
    ls_safetensors_writer *wr = NULL;
    ls_status s = ls_safetensors_writer_init(&wr);
    for (size_t i = 0; s == LS_OK && i < w->n; i++)
        s = ls_safetensors_writer_add_f64(wr, w->name[i], LS_SAFETENSORS_F64, w->shape[i], w->ndim[i],
                                          (long)i == t ? moved : w->v[i]);
    if (s == LS_OK) s = ls_safetensors_writer_write(wr, path, err, errlen);
    else snprintf(err, errlen, "%s: cannot build the moved weights: %s", path, ls_status_str(s));
    ls_safetensors_writer_free(wr);
    return s;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

ls_status ls_parity_fd(const ls_parity_opts *o, const ls_parity_config *c, ls_parity_report *rep, const char *dir,
                       const char *weights, const char *rollouts, const ls_parity_tensors *g_naive,
                       const ls_parity_tensors *g_ls, char *err, size_t errlen) {
    ls_parity_tensors w = {0};
    ls_status s = ls_parity_tensors_read(weights, &w, err, errlen);
    if (s != LS_OK) return s;
    size_t nall = g_naive->n, nt = o->fd_max && o->fd_max < nall ? o->fd_max : nall;
    size_t *pick = calloc(nt ? nt : 1, sizeof *pick); /* evenly spaced when fd_max cuts */
    for (size_t k = 0; pick && k < nt; k++) pick[k] = k * nall / nt;
    double *fd = calloc(nt ? nt : 1, sizeof *fd), *est = calloc(nt ? nt : 1, sizeof *est);
    double *floor_ = calloc(nt ? nt : 1, sizeof *floor_);
    double *an = calloc(nt ? nt : 1, sizeof *an), *al = calloc(nt ? nt : 1, sizeof *al);
    ls_parity_job *jobs = calloc(4 * FD_BATCH, sizeof *jobs);
    double *moved = NULL, *d = NULL;
    if (!fd || !est || !floor_ || !an || !al || !jobs || !pick) {
        s = LS_ERR_NOMEM;
        goto done;
    }
    static const double STEP[4] = {1.0, -1.0, 0.5, -0.5};
    const double h = o->fd_step;
    double t0 = ls_parity_now();
    char fdir[LS_PARITY_PATH];
    snprintf(fdir, sizeof fdir, "%s/fd", dir);
    ls_parity_remove_tree(fdir);
    if (mkdir(fdir, 0777) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", fdir, strerror(errno));
        s = LS_ERR_IO;
        goto done;
    }
    for (size_t b0 = 0; b0 < nt && s == LS_OK; b0 += FD_BATCH) {
        size_t b1 = b0 + FD_BATCH < nt ? b0 + FD_BATCH : nt, nj = 0;
        char paths[4 * FD_BATCH][LS_PARITY_PATH], runs[4 * FD_BATCH][LS_PARITY_PATH];
        for (size_t ti = b0; ti < b1 && s == LS_OK; ti++) {
            size_t gi = pick[ti];
            long t = ls_parity_tensors_find(&w, g_naive->name[gi]);
            long tl = ls_parity_tensors_find(g_ls, g_naive->name[gi]);
            if (t < 0 || w.numel[t] != g_naive->numel[gi] || tl < 0 || g_ls->numel[tl] != g_naive->numel[gi]) {
                snprintf(err, errlen, "%s: trainable tensor %s has no matching weights or LongStraw gradient", weights,
                         g_naive->name[gi]);
                s = LS_ERR_FORMAT;
                break;
            }
            size_t n = w.numel[t];
            free(moved);
            free(d);
            moved = malloc(n * sizeof *moved);
            d = malloc(n * sizeof *d);
            if (!moved || !d) {
                s = LS_ERR_NOMEM;
                break;
            }
            direction(o->seed * 1000003u + gi, n, d);
            an[ti] = dot(g_naive->v[gi], d, n);
            al[ti] = dot(g_ls->v[tl], d, n);
            for (int k = 0; k < 4 && s == LS_OK; k++) {
                for (size_t i = 0; i < n; i++) moved[i] = w.v[t][i] + STEP[k] * h * d[i];
                snprintf(paths[nj], LS_PARITY_PATH, "%s/%zu-%d.safetensors", fdir, ti, k);
                snprintf(runs[nj], LS_PARITY_PATH, "%s/%zu-%d", fdir, ti, k);
                s = write_moved(&w, t, moved, paths[nj], err, errlen);
                char log[LS_PARITY_PATH];
                snprintf(log, sizeof log, "%s.log", runs[nj]);
                ls_parity_train tr = {.dt = 0, .world = 1, .out = runs[nj], .log = log, .rollouts = rollouts,
                                      .load = paths[nj], .strategy = "naive"};
                ls_parity_train_job(o, c, &tr, &jobs[nj]);
                nj++;
            }
        }
        if (s == LS_OK) s = ls_parity_jobs_run(jobs, nj, o->jobs, o->timeout_s, err, errlen);
        double loss[4 * FD_BATCH];
        for (size_t k = 0; k < nj && s == LS_OK; k++) {
            if (jobs[k].rc != 0) {
                snprintf(err, errlen, "%s: finite-difference run %s exited %d (its output: %s)", c->name, runs[k],
                         jobs[k].rc, jobs[k].log);
                s = LS_ERR_FORMAT;
                break;
            }
            s = ls_parity_log_loss(jobs[k].log, &loss[k], err, errlen);
            if (s == LS_OK && !o->keep_fd) {
                remove(jobs[k].log);
                remove(paths[k]);
                ls_parity_remove_tree(runs[k]);
            }
        }
        for (size_t ti = b0; ti < b1 && s == LS_OK; ti++) {
            const double *L = &loss[4 * (ti - b0)];
            double d1 = (L[0] - L[1]) / (2 * h), d2 = (L[2] - L[3]) / h;
            fd[ti] = (4 * d2 - d1) / 3;
            est[ti] = fabs(d2 - d1) / 3;
            /* the rounding floor of that combination: each loss carries a rounding error of
             * about FD_LOSS_ULPS units of its last place, d1 gets it / h, d2 twice that,
             * (4 d2 - d1) / 3 three times it */
            double lmax = 0;
            for (int k = 0; k < 4; k++)
                if (fabs(L[k]) > lmax) lmax = fabs(L[k]);
            floor_[ti] = 3.0 * FD_LOSS_ULPS * DBL_EPSILON * lmax / h;
        }
        for (size_t k = 0; k < nj; k++) ls_parity_job_free(&jobs[k]);
        if (s == LS_OK && !o->quiet)
            fprintf(stderr, "longstraw-parity: %s finite differences: %zu/%zu tensors, %.1f s\r", c->name, b1, nt,
                    ls_parity_now() - t0);
    }
    if (!o->quiet) fprintf(stderr, "\n");
    if (s != LS_OK) goto done;
    char part[128];
    snprintf(part, sizeof part, "%s finite differences", c->name);
    ls_parity_report_timing(rep, part, ls_parity_now() - t0, (int)(4 * nt));
    for (int which = 0; which < 2; which++) {
        cJSON *arr = cJSON_CreateArray();
        const double *a = which == 0 ? an : al;
        for (size_t ti = 0; ti < nt; ti++) {
            ls_parity_err e = {fabs(a[ti] - fd[ti]), 0};
            e.max_rel = fd[ti] != 0 ? e.max_abs / fabs(fd[ti]) : e.max_abs == 0 ? 0 : INFINITY;
            /* relative FD_TOL, or the error budget where the derivative is so small that FD_TOL of it
             * lies below what the differences of the losses can resolve */
            /* the finite difference's own error budget: its rounding floor plus its truncation estimate,
             * twice over (both are estimates: a longer loss computation, hybrid-small's, carries more
             * rounding than FD_LOSS_ULPS; measured 4.36e-12 against 3.33e-12 + 1.02e-12 on one tensor) */
            double budget = 2.0 * (floor_[ti] + est[ti]);
            double tol = FD_TOL;
            if (fd[ti] != 0 && budget / fabs(fd[ti]) > tol) tol = budget / fabs(fd[ti]);
            /* a derivative of exactly 0 (a tensor no token reached: the loss differences are all equal) is
             * judged against the same rounding floor as an absolute error: the relative error over the
             * floor's scale (floor / tolerance), so that "pass" still reads max_rel_err <= tolerance */
            if (fd[ti] == 0 && isfinite(e.max_abs))
                e.max_rel = e.max_abs == 0 ? 0 : budget > 0 ? e.max_abs / (budget / tol) : INFINITY;
            cJSON *en = ls_parity_entry(g_naive->name[pick[ti]], e, tol, -1);
            cJSON_AddNumberToObject(en, "fd_derivative", fd[ti]);
            cJSON_AddNumberToObject(en, "fd_error_estimate", est[ti]);
            cJSON_AddNumberToObject(en, "fd_rounding_floor", floor_[ti]);
            cJSON_AddItemToArray(arr, en);
        }
        if (nt < nall) { /* not every trainable tensor: the check cannot pass */
            char what[96];
            snprintf(what, sizeof what, "coverage: %zu of %zu trainable tensors (--fd-max)", nt, nall);
            cJSON_AddItemToArray(arr, ls_parity_entry(what, (ls_parity_err){1, 1}, FD_TOL, -1));
        }
        char name[256];
        snprintf(name, sizeof name, "fd_grad %s f64 cp1 %s", c->name, which == 0 ? "naive" : "full");
        ls_parity_report_add(rep, ls_parity_check_new("fd_grad", name, 0, 1, c->name, which == 0 ? NULL : "full",
                                                      "directional finite differences of the loss (Richardson)",
                                                      which == 0 ? "naive full sequence" : "longstraw cp1 full", arr,
                                                      "tensors"));
    }
done:
    free(moved);
    free(d);
    free(fd);
    free(est);
    free(floor_);
    free(an);
    free(al);
    free(jobs);
    free(pick);
    ls_parity_tensors_free(&w);
    return s;
}
