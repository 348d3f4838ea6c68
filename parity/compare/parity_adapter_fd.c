/* parity_adapter_fd.c - finite differences of an adapter's loss mode
 * (parity_adapter.h), as parity_fd.c makes them for longstraw-train: one
 * random unit direction per trainable tensor (the reference's gradient
 * names them) or per layer group (--fd-groups layer: layers.N.*), the
 * float64 weights moved by +h d, -h d, +h/2 d, -h/2 d, the loss at each
 * from mode loss, and Richardson's (4 D(h/2) - D(h)) / 3 against g . d of
 * the trainer's float64 CP-1 full gradient and of the reference's.  The
 * tolerance is parity_fd.c's: 1e-7 relative, or the error budget (twice the
 * rounding floor plus the truncation estimate) where that is larger.  An
 * adapter states no discrete decisions, so no move is differenced again
 * (docs/parity.md, "Adapters").
 *
 * Mode loss takes many weights files per call (listed in {weights}, one
 * path per line): the runs go in calls of LOSS_BATCH files (four per
 * direction), --jobs at a time, each call's files written just before it
 * starts and removed when its losses are read (unless --keep-fd). */
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

#include "parity/plan/parity_adapter.h"
#include "receipts/format/atomic_file.h"
#include "receipts/format/json_util.h"
#include "trainer/base/safetensors.h"

#define FD_TOL 1e-7
#define UNITS_PER_CALL 4 /* 16 weights files per loss call */

static const double STEP[4] = {1.0, -1.0, 0.5, -0.5};

typedef struct {
    const ls_parity_opts *o;
    const ls_parity_adapter *a;
    const char *batch;
    char fdir[LS_PARITY_PATH];
    ls_parity_tensors w;
    const ls_parity_tensors *gref, *grun;
    const ls_parity_fd_unit *units;
    size_t nt;
    const size_t *idx;
    long *wi, *ri;      /* per member: its index in w, in grun (-1: missing) */
    ls_parity_job *jobs;
    size_t ncalls;
    double *loss;       /* [4 nt] */
    double *an, *ar;    /* [nt]: g . d, the run's and the reference's */
    double *d, *moved;  /* one unit's direction and moved values */
    size_t cap;
    const double **vals;
} fdx;

static ls_status unit_direction(fdx *x, size_t u) {
    const ls_parity_fd_unit *un = &x->units[u];
    size_t total = 0;
    for (size_t m = 0; m < un->n; m++) total += x->w.numel[x->wi[un->first + m]];
    if (total > x->cap) {
        free(x->d);
        free(x->moved);
        x->d = malloc((total ? total : 1) * sizeof *x->d);
        x->moved = malloc((total ? total : 1) * sizeof *x->moved);
        x->cap = x->d && x->moved ? total : 0;
        if (x->cap == 0) return LS_ERR_NOMEM;
    }
    double scale = 1.0 / sqrt((double)un->n), an = 0, ar = 0;
    size_t off = 0;
    for (size_t m = 0; m < un->n; m++) {
        size_t gi = x->idx[un->first + m], n = x->w.numel[x->wi[un->first + m]];
        double *d = x->d + off;
        ls_parity_fd_direction(x->o->seed * 1000003u + gi, n, d);
        if (un->n > 1)
            for (size_t i = 0; i < n; i++) d[i] *= scale;
        long ri = x->ri[un->first + m];
        for (size_t i = 0; i < n; i++) {
            ar += x->gref->v[gi][i] * d[i];
            an += ri >= 0 ? x->grun->v[ri][i] * d[i] : NAN;
        }
        off += n;
    }
    x->an[u] = an;
    x->ar[u] = ar;
    return LS_OK;
}

static void call_paths(const fdx *x, size_t i, char *list, char *out) {
    snprintf(list, LS_PARITY_PATH, "%s/call-%zu.txt", x->fdir, i);
    snprintf(out, LS_PARITY_PATH, "%s/call-%zu", x->fdir, i);
}

static size_t call_units(const fdx *x, size_t i, size_t *first) {
    *first = i * UNITS_PER_CALL;
    size_t end = *first + UNITS_PER_CALL < x->nt ? *first + UNITS_PER_CALL : x->nt;
    return end - *first;
}

/* Before call i: its units' moved weights, their list, its command line. */
static ls_status fd_before(void *ctx, size_t i, char *err, size_t errlen) {
    fdx *x = ctx;
    size_t first, nu = call_units(x, i, &first);
    char list[LS_PARITY_PATH], out[LS_PARITY_PATH], log[LS_PARITY_PATH + 8];
    call_paths(x, i, list, out);
    size_t cap = nu * 4 * (LS_PARITY_PATH + 1) + 1, len = 0;
    char *txt = malloc(cap);
    if (txt == NULL) return LS_ERR_NOMEM;
    ls_status s = LS_OK;
    for (size_t u = first; s == LS_OK && u < first + nu; u++) {
        if ((s = unit_direction(x, u)) != LS_OK) {
            snprintf(err, errlen, "finite differences: no memory for the direction of %s", x->units[u].name);
            break;
        }
        const ls_parity_fd_unit *un = &x->units[u];
        for (int k = 0; s == LS_OK && k < 4; k++) {
            const double step = STEP[k] * x->o->fd_step;
            for (size_t t = 0; t < x->w.n; t++) x->vals[t] = x->w.v[t];
            size_t off = 0;
            for (size_t m = 0; m < un->n; m++) {
                long t = x->wi[un->first + m];
                for (size_t j = 0; j < x->w.numel[t]; j++) x->moved[off + j] = x->w.v[t][j] + step * x->d[off + j];
                x->vals[t] = x->moved + off;
                off += x->w.numel[t];
            }
            char path[LS_PARITY_PATH];
            snprintf(path, sizeof path, "%s/%zu-%d.safetensors", x->fdir, u, k);
            ls_safetensors_writer *wr = NULL;
            s = ls_safetensors_writer_init(&wr);
            for (size_t t = 0; s == LS_OK && t < x->w.n; t++)
                s = ls_safetensors_writer_add_f64(wr, x->w.name[t], LS_SAFETENSORS_F64, x->w.shape[t], x->w.ndim[t],
                                                  x->vals[t]);
            if (s == LS_OK) s = ls_safetensors_writer_write(wr, path, err, errlen);
            else snprintf(err, errlen, "%s: cannot build the moved weights: %s", path, ls_status_str(s));
            ls_safetensors_writer_free(wr);
            len += (size_t)snprintf(txt + len, cap - len, "%s\n", path);
        }
    }
    if (s == LS_OK) s = ls_atomic_write(list, txt, len, err, errlen);
    free(txt);
    if (s != LS_OK) return s;
    s = ls_parity_fresh_dir(out, err, errlen);
    if (s != LS_OK) return s;
    snprintf(log, sizeof log, "%s.log", out);
    ls_parity_adapter_vars v = {.mode = "loss", .cp = 1, .dtype = "f64", .grad_mode = "full",
                                .fault = x->a->fault_none, .weights = list, .batch = x->batch, .out = out,
                                .seed = x->o->seed};
    return ls_parity_adapter_job(x->a, &v, log, &x->jobs[i], err, errlen);
}

/* After call i: exactly its files' losses, finite, in order. */
static ls_status fd_after(void *ctx, size_t i, char *err, size_t errlen) {
    fdx *x = ctx;
    size_t first, nu = call_units(x, i, &first);
    char list[LS_PARITY_PATH], out[LS_PARITY_PATH], path[LS_PARITY_PATH + 16];
    call_paths(x, i, list, out);
    ls_parity_job *j = &x->jobs[i];
    if (j->rc != 0) {
        snprintf(err, errlen, "%s: mode loss call %s exited %d%s (its output: %s)", x->a->name, out, j->rc,
                 j->rc == 137 ? " (killed: --timeout?)" : "", j->log);
        return LS_ERR_FORMAT;
    }
    snprintf(path, sizeof path, "%s/losses.json", out);
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(path, 1u << 20, &doc, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(doc, "losses");
    if (!cJSON_IsArray(l) || cJSON_GetArraySize(l) != (int)(4 * nu)) {
        snprintf(err, errlen, "%s: field 'losses' is not an array of %zu numbers (one per weights file listed in %s)",
                 path, 4 * nu, list);
        s = LS_ERR_FORMAT;
    }
    size_t k = 0;
    const cJSON *v;
    const cJSON *src = s == LS_OK ? l : NULL;
    cJSON_ArrayForEach(v, src) {
        /* a number, or {"weights": PATH, "loss": X} naming the listed file it is of */
        const cJSON *num = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "loss") : v;
        const cJSON *wp = cJSON_GetObjectItemCaseSensitive(v, "weights");
        char want[LS_PARITY_PATH];
        snprintf(want, sizeof want, "%s/%zu-%zu.safetensors", x->fdir, first + k / 4, k % 4);
        if (!cJSON_IsNumber(num) || !isfinite(num->valuedouble)) {
            snprintf(err, errlen, "%s: field 'losses[%zu]' is not a finite number (or {\"weights\", \"loss\"})", path, k);
            s = LS_ERR_FORMAT;
            break;
        }
        if (cJSON_IsObject(v) && (!cJSON_IsString(wp) || strcmp(wp->valuestring, want) != 0)) {
            snprintf(err, errlen, "%s: field 'losses[%zu].weights' is not %s, the file listed %zu-th", path, k, want, k + 1);
            s = LS_ERR_FORMAT;
            break;
        }
        x->loss[4 * first + k++] = num->valuedouble;
    }
    cJSON_Delete(doc);
    if (s == LS_OK && !x->o->keep_fd) {
        for (size_t u = first; u < first + nu; u++)
            for (int q = 0; q < 4; q++) {
                snprintf(path, sizeof path, "%s/%zu-%d.safetensors", x->fdir, u, q);
                remove(path);
            }
        remove(list);
    }
    return s;
}

ls_status ls_parity_adapter_fd(const ls_parity_opts *o, const ls_parity_adapter *a, const char *dir,
                               const char *weights, const char *batch, const ls_parity_tensors *g_run,
                               const ls_parity_tensors *g_ref, const char *config, cJSON *checks[2], int *runs,
                               char *err, size_t errlen) {
    checks[0] = checks[1] = NULL;
    *runs = 0;
    fdx x = {.o = o, .a = a, .batch = batch, .gref = g_ref, .grun = g_run};
    ls_parity_fd_unit *all = NULL, *units = NULL;
    size_t *idx = NULL, nall = 0;
    double *fd = NULL, *est = NULL, *floor_ = NULL;
    const bool grouped = o->fd_groups != LS_PARITY_FD_TENSOR;
    ls_status s = ls_parity_tensors_read(weights, &x.w, err, errlen);
    if (s != LS_OK) return s;
    if ((s = ls_parity_fd_units(o->fd_groups, g_ref, &all, &nall, &idx)) != LS_OK) goto done;
    size_t nt = o->fd_max && o->fd_max < nall ? o->fd_max : nall, n = g_ref->n ? g_ref->n : 1;
    units = calloc(nt ? nt : 1, sizeof *units);
    x.wi = calloc(n, sizeof *x.wi);
    x.ri = calloc(n, sizeof *x.ri);
    x.vals = calloc(x.w.n ? x.w.n : 1, sizeof *x.vals);
    x.loss = calloc(4 * nt + 1, sizeof *x.loss);
    x.an = calloc(nt + 1, sizeof *x.an);
    x.ar = calloc(nt + 1, sizeof *x.ar);
    fd = calloc(nt + 1, sizeof *fd);
    est = calloc(nt + 1, sizeof *est);
    floor_ = calloc(nt + 1, sizeof *floor_);
    x.ncalls = (nt + UNITS_PER_CALL - 1) / UNITS_PER_CALL;
    x.jobs = calloc(x.ncalls + 1, sizeof *x.jobs);
    if (!units || !x.wi || !x.ri || !x.vals || !x.loss || !x.an || !x.ar || !fd || !est || !floor_ || !x.jobs) {
        s = LS_ERR_NOMEM;
        goto done;
    }
    for (size_t k = 0; k < nt; k++) units[k] = all[k * nall / nt];
    for (size_t m = 0; m < g_ref->n; m++) {
        size_t gi = idx[m];
        x.wi[m] = ls_parity_tensors_find(&x.w, g_ref->name[gi]);
        x.ri[m] = ls_parity_tensors_find(g_run, g_ref->name[gi]);
        if (x.ri[m] >= 0 && g_run->numel[x.ri[m]] != g_ref->numel[gi]) x.ri[m] = -1;
        if (x.wi[m] < 0 || x.w.numel[x.wi[m]] != g_ref->numel[gi]) {
            snprintf(err, errlen, "%s: the reference's gradient tensor %s has no weights of its size", weights,
                     g_ref->name[gi]);
            s = LS_ERR_FORMAT;
            goto done;
        }
    }
    x.units = units;
    x.nt = nt;
    x.idx = idx;
    snprintf(x.fdir, sizeof x.fdir, "%s/fd", dir);
    s = ls_parity_fresh_dir(x.fdir, err, errlen);
    if (s != LS_OK) goto done;
    s = ls_parity_jobs_run_hooked(x.jobs, x.ncalls, o->jobs, o->timeout_s, fd_before, fd_after, &x, err, errlen);
    if (s != LS_OK) goto done;
    *runs = (int)x.ncalls;
    const double h = o->fd_step;
    for (size_t u = 0; u < nt; u++) {
        ls_parity_fd_richardson(&x.loss[4 * u], h, &fd[u], &est[u], &floor_[u]);
    }
    for (int which = 0; which < 2; which++) {
        cJSON *arr = cJSON_CreateArray();
        const double *g = which == 0 ? x.an : x.ar;
        for (size_t u = 0; u < nt; u++) {
            ls_parity_err e = {fabs(g[u] - fd[u]), 0};
            e.max_rel = fd[u] != 0 ? e.max_abs / fabs(fd[u]) : e.max_abs == 0 ? 0 : INFINITY;
            if (!isfinite(g[u])) e.max_abs = e.max_rel = INFINITY; /* a tensor missing from the run's gradient */
            double budget = 2.0 * (floor_[u] + est[u]), tol = FD_TOL;
            if (fd[u] != 0 && budget / fabs(fd[u]) > tol) tol = budget / fabs(fd[u]);
            if (fd[u] == 0 && isfinite(e.max_abs))
                e.max_rel = e.max_abs == 0 ? 0 : budget > 0 ? e.max_abs / (budget / tol) : INFINITY;
            cJSON *en = ls_parity_entry(units[u].name, e, tol, -1);
            cJSON_AddNumberToObject(en, "fd_derivative", fd[u]);
            cJSON_AddNumberToObject(en, "fd_error_estimate", est[u]);
            cJSON_AddNumberToObject(en, "fd_rounding_floor", floor_[u]);
            if (grouped) {
                cJSON *names = cJSON_AddArrayToObject(en, "tensors");
                for (size_t m = 0; names && m < units[u].n; m++)
                    cJSON_AddItemToArray(names, cJSON_CreateString(g_ref->name[idx[units[u].first + m]]));
            }
            cJSON_AddItemToArray(arr, en);
        }
        if (nt < nall) {
            char what[96];
            snprintf(what, sizeof what, "coverage: %zu of %zu %s (--fd-max)", nt, nall,
                     grouped ? "groups of trainable tensors" : "trainable tensors");
            cJSON_AddItemToArray(arr, ls_parity_entry(what, (ls_parity_err){1, 1}, FD_TOL, -1));
        }
        char name[256], cand[96];
        snprintf(name, sizeof name, "fd_grad %s f64 cp1 %s", config, which == 0 ? "full" : "reference");
        snprintf(cand, sizeof cand, "%s %s", a->name, which == 0 ? "cp1 full" : "reference");
        checks[which] = ls_parity_check_new("fd_grad", name, LS_PARITY_F64, 1, config, which == 0 ? "full" : NULL,
                                            grouped ? "directional finite differences of the loss (mode loss, "
                                                      "Richardson), one direction per layer's trainable tensors"
                                                    : "directional finite differences of the loss (mode loss, "
                                                      "Richardson)",
                                            cand, arr, grouped ? "groups" : "tensors");
    }
    if (!o->keep_fd) ls_parity_remove_tree(x.fdir);
done:
    for (size_t i = 0; x.jobs && i < x.ncalls; i++) ls_parity_job_free(&x.jobs[i]);
    free(x.jobs), free(x.wi), free(x.ri), free(x.vals), free(x.loss), free(x.an), free(x.ar), free(x.d), free(x.moved);
    free(fd), free(est), free(floor_), free(units), free(all), free(idx);
    ls_parity_tensors_free(&x.w);
    return s;
}
