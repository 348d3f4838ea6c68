/* parity_run.c - the runs of one parity matrix and their comparisons
 * (parity.h).  For every configuration: an init run writes the weights
 * every later run loads (float32 runs round them); the score and grad runs
 * of each dtype; the independent reference on the float64 batches; the
 * finite differences; then the checks and controls. */
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
#include <unistd.h>

#include "parity/plan/parity.h"
#include "receipts/format/atomic_file.h"
#include "receipts/format/json_util.h"

#define F64_TOL 1e-10
/* units in the last place of a set's largest value that a composition may leave on an exact zero */
#define FLOOR_ULPS 64.0
#define F32_FACTOR 10.0
#define F32_MIN_TOL (4.0 * FLT_EPSILON)

enum { DETACHED = 0, FULL = 1 };
static const char *const MODE[] = {"detached", "full"};
/* the family's gradient faults: r->o->fam->grad_faults[0 .. NGF(r)) */
#define NGF(r) ((int)(r)->o->fam->n_grad_faults)
#define GFAULT(r, f) ((r)->o->fam->grad_faults[f])

typedef struct {
    ls_parity_logprobs naive, ls[LS_PARITY_MAX_CP], local[LS_PARITY_MAX_CP];
    ls_parity_tensors gnaive, gnaive_det, gls[2][LS_PARITY_MAX_CP], gfault[2][LS_PARITY_MAX_CP];
    ls_parity_tensors pls[2][LS_PARITY_MAX_CP];
    /* the expert-parallel runs (--eps): [e][k] at EP o->eps[e] (e >= 1) and CP o->cps[k] where the grid fits
     * (ep_fits); their gradients per mode, and ep-drop-dx's */
    ls_parity_logprobs ep_ls[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    ls_parity_tensors ep_gls[LS_PARITY_MAX_CP][2][LS_PARITY_MAX_CP], ep_pls[LS_PARITY_MAX_CP][2][LS_PARITY_MAX_CP];
    ls_parity_tensors ep_gdrop[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    double loss_naive;
    ls_parity_adamw adamw; /* the optimizer settings of the grad runs (their manifests) */
} dtype_out;

typedef struct {
    const ls_parity_opts *o;
    const ls_parity_config *c;
    ls_parity_report *rep;
    char dir[LS_PARITY_PATH], weights[LS_PARITY_PATH], roll_score[LS_PARITY_PATH], roll_grad[LS_PARITY_PATH];
    dtype_out d[2];
    ls_parity_logprobs ref_policy;
    double ref_loss;
    cJSON *decisions; /* the reference's margins of the fixture's discrete decisions (parity_decisions.c) */
    uint64_t seed;    /* the weights' draw: o->seed, then others while a decision is near a tie */
    bool expect[3];   /* the kinds of decision the model makes at these lengths (parity_decisions.c) */
    ls_parity_config own; /* the matrix entry as run (its prompt lengthened past the DSA top-k) */
    char own_what[320];
    int draw;         /* 1, 2, ... */
    int vocab; /* the model config's: token ids are drawn below it */
    char *err;
    size_t errlen;
} cfg_run;

int ls_parity_mkdirs(const char *path) {
    char p[LS_PARITY_PATH];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
            *s = '/';
        }
    return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

static void run_path(const cfg_run *r, int dt, const char *label, const char *file, char *out) {
    snprintf(out, LS_PARITY_PATH, "%s/%s/%s/%s", r->dir, ls_parity_dtype_name(dt), label, file);
}

/* The EP runs of the matrix: EP o->eps[e] (e >= 1) at CP o->cps[k] when their cps[k] x eps[e] ranks fit. */
static bool ep_fits(const ls_parity_opts *o, size_t e, size_t k) {
    return e >= 1 && e < o->n_eps && k < o->n_cps && o->cps[k] * o->eps[e] <= LS_PARITY_MAX_CP;
}

/* ---- trainer command lines ------------------------------------------------ */

typedef struct {
    int dt, world;
    int ep;                /* --ep N when > 1 (world = cp x N) */
    const char *label;
    const char *strategy;  /* "naive" or NULL */
    const char *grad_mode; /* NULL: detached */
    const char *fault;
    bool grad;             /* grad run: supplied log-probs, dumps gradients and weights */
} run_spec;

static ls_status job_for(const cfg_run *r, const run_spec *s, ls_parity_job *j) {
    char base[LS_PARITY_PATH], out[LS_PARITY_PATH], log[LS_PARITY_PATH], batch[LS_PARITY_PATH],
        grads[LS_PARITY_PATH], save[LS_PARITY_PATH];
    snprintf(base, sizeof base, "%s/%s/%s", r->dir, ls_parity_dtype_name(s->dt), s->label);
    if (ls_parity_mkdirs(base) != 0) {
        snprintf(r->err, r->errlen, "cannot create %s: %s", base, strerror(errno));
        return LS_ERR_IO;
    }
    snprintf(out, sizeof out, "%s/run", base);
    ls_parity_remove_tree(out);
    snprintf(log, sizeof log, "%s/log", base);
    snprintf(batch, sizeof batch, "%s/batch.json", base);
    snprintf(grads, sizeof grads, "%s/grads.safetensors", base);
    snprintf(save, sizeof save, "%s/final.safetensors", base);
    bool init = strcmp(s->label, "init") == 0;
    ls_parity_train t = {.dt = s->dt, .world = s->world, .ep = s->ep, .out = out, .log = log,
                         .rollouts = s->grad ? r->roll_grad : r->roll_score,
                         .load = init ? NULL : r->weights, .save_init = init ? r->weights : NULL,
                         .dump_batch = batch, .dump_grads = s->grad ? grads : NULL, .save = s->grad ? save : NULL,
                         .strategy = s->strategy, .grad_mode = s->grad_mode, .fault = s->fault, .seed = &r->seed};
    ls_parity_train_job(r->o, r->c, &t, j);
    return LS_OK;
}

/* Runs the specs; every run must succeed and name the same build. */
static ls_status run_specs(cfg_run *r, const run_spec *specs, size_t n, const char *part) {
    ls_parity_job *jobs = calloc(n, sizeof *jobs);
    if (jobs == NULL) return LS_ERR_NOMEM;
    ls_status s = LS_OK;
    double t0 = ls_parity_now();
    for (size_t i = 0; i < n && s == LS_OK; i++) s = job_for(r, &specs[i], &jobs[i]);
    if (s == LS_OK) s = ls_parity_jobs_run(jobs, n, r->o->jobs, r->o->timeout_s, r->err, r->errlen);
    for (size_t i = 0; i < n && s == LS_OK; i++) {
        if (jobs[i].rc != 0) {
            snprintf(r->err, r->errlen, "%s %s: the run %s/%s exited %d%s (its output: %s)", r->c->name, part, ls_parity_dtype_name(specs[i].dt),
                     specs[i].label, jobs[i].rc, jobs[i].rc == 137 ? " (killed: timeout?)" : "", jobs[i].log);
            s = LS_ERR_FORMAT;
            break;
        }
        char run[LS_PARITY_PATH];
        run_path(r, specs[i].dt, specs[i].label, "run", run);
        s = ls_parity_report_build(r->rep, run, r->err, r->errlen);
    }
    if (s == LS_OK && !r->o->quiet)
        fprintf(stderr, "longstraw-parity: %s %s: %zu runs, %.1f s\n", r->c->name, part, n, ls_parity_now() - t0);
    char name[128];
    snprintf(name, sizeof name, "%s %s", r->c->name, part);
    if (s == LS_OK) ls_parity_report_timing(r->rep, name, ls_parity_now() - t0, (int)n);
    for (size_t i = 0; i < n; i++) ls_parity_job_free(&jobs[i]);
    free(jobs);
    return s;
}

/* ---- rollouts files --------------------------------------------------------- */

static uint32_t lcg_next(uint32_t *st) {
    *st = (1103515245u * *st + 12345u) & 0x7FFFFFFFu;
    return *st >> 8;
}

cJSON *ls_parity_batch_new(uint32_t token_seed, int vocab, int prompt_len, int group, const int *response_lens,
                           const double *rewards) {
    cJSON *doc = cJSON_CreateObject(), *pr = cJSON_AddArrayToObject(doc, "prompt");
    cJSON *rs = cJSON_AddArrayToObject(doc, "responses"), *rw = cJSON_AddArrayToObject(doc, "rewards");
    uint32_t st = token_seed;
    for (int t = 0; t < prompt_len; t++)
        cJSON_AddItemToArray(pr, cJSON_CreateNumber((double)(lcg_next(&st) % (uint32_t)vocab)));
    for (int i = 0; i < group; i++) {
        cJSON *y = cJSON_CreateArray();
        uint32_t sy = token_seed * 131u + 100u + (uint32_t)i;
        for (int t = 0; t < response_lens[i]; t++)
            cJSON_AddItemToArray(y, cJSON_CreateNumber((double)(lcg_next(&sy) % (uint32_t)vocab)));
        cJSON_AddItemToArray(rs, y);
        cJSON_AddItemToArray(rw, ls_json_create_exact_number(rewards[i]));
    }
    return doc;
}

void ls_parity_batch_add_logprobs(cJSON *doc, const char *key, const ls_parity_logprobs *l, const double *deltas,
                                  bool clamp) {
    cJSON *a = cJSON_AddArrayToObject(doc, key);
    for (int i = 0; i < l->g; i++) {
        cJSON *m = cJSON_CreateArray();
        for (int t = 0; t < l->len[i]; t++) {
            double v = l->lp[i][t];
            if (deltas != NULL) {
                v += deltas[(t + 2 * i) % 6];
                if (clamp && !(v < 0)) v = -1e-3;
            }
            cJSON_AddItemToArray(m, ls_json_create_exact_number(v));
        }
        cJSON_AddItemToArray(a, m);
    }
}

ls_status ls_parity_batch_write(cJSON *doc, const char *path, char *err, size_t errlen) {
    char *txt = NULL;
    size_t len = 0;
    ls_status s = ls_json_print(doc, &txt, &len, err, errlen);
    cJSON_Delete(doc);
    if (s != LS_OK) return s;
    /* one line */
    for (size_t i = 0; i < len; i++)
        if (txt[i] == '\n') txt[i] = ' ';
    char *line = malloc(len + 2);
    if (line == NULL) {
        free(txt);
        return LS_ERR_NOMEM;
    }
    memcpy(line, txt, len);
    line[len] = '\n';
    s = ls_atomic_write(path, line, len + 1, err, errlen);
    free(line);
    free(txt);
    return s;
}

/* One line: prompt, responses, rewards; old and ref log-probs when given. */
static ls_status write_rollouts(cfg_run *r, const char *path, const ls_parity_logprobs *old,
                                const ls_parity_logprobs *ref) {
    const ls_parity_config *c = r->c;
    cJSON *doc = ls_parity_batch_new(c->token_seed, r->vocab, c->prompt_len, c->group, c->response_lens, c->rewards);
    /* old = policy moved: ratios exp(-delta) far from 1, the clip engages */
    static const double DELTAS[] = {-0.6, 0.6, 0.05, -0.4, 0.4, -0.1};
    if (old != NULL) ls_parity_batch_add_logprobs(doc, "old_logprobs", old, DELTAS, true);
    if (ref != NULL) ls_parity_batch_add_logprobs(doc, "ref_logprobs", ref, NULL, false);
    return ls_parity_batch_write(doc, path, r->err, r->errlen);
}

/* ---- the independent reference --------------------------------------------- */

/* The independent reference on batch, started in the background into *j
 * (reference_end waits for it). */
static ls_status reference_start(cfg_run *r, const char *batch, const char *tag, ls_parity_job *j) {
    char json[LS_PARITY_PATH];
    snprintf(json, sizeof json, "%s/reference-%s.json", r->dir, tag);
    memset(j, 0, sizeof *j);
    snprintf(j->log, sizeof j->log, "%s/reference-%s.log", r->dir, tag);
    ls_parity_job_arg(j, "%s", r->o->python);
    ls_parity_job_arg(j, "%s", r->o->reference);
    ls_parity_job_arg(j, "%s", r->weights);
    ls_parity_job_arg(j, "%s", batch);
    ls_parity_job_arg(j, "--json");
    ls_parity_job_arg(j, "%s", json);
    ls_status s = ls_parity_job_start(j, r->err, r->errlen);
    if (s != LS_OK) ls_parity_job_free(j);
    return s;
}

/* Its end (stop: killed, nothing read) and its JSON into *out; beside names
 * what ran meanwhile in its timing (NULL: nothing). */
static ls_status reference_end(cfg_run *r, const char *batch, const char *tag, ls_parity_job *j, bool stop,
                               const char *beside, cJSON **out) {
    char json[LS_PARITY_PATH];
    snprintf(json, sizeof json, "%s/reference-%s.json", r->dir, tag);
    ls_parity_job_wait(j, r->o->timeout_s, stop);
    ls_parity_job_free(j);
    if (stop) return LS_OK;
    ls_status s = LS_OK;
    if (j->rc != 0) {
        snprintf(r->err, r->errlen, "the independent reference %s exited %d on %s (its output: %s)", r->o->reference,
                 j->rc, batch, j->log);
        s = LS_ERR_FORMAT;
    }
    if (s == LS_OK) s = ls_json_read_file_capped(json, 64u << 20, out, r->err, r->errlen);
    char part[160];
    snprintf(part, sizeof part, "%s reference (%s)%s%s", r->c->name, tag, beside ? ", beside " : "", beside ? beside : "");
    if (s == LS_OK) ls_parity_report_timing(r->rep, part, j->secs, 1);
    return s;
}

static ls_status reference(cfg_run *r, const char *batch, const char *tag, cJSON **out) {
    ls_parity_job j;
    ls_status s = reference_start(r, batch, tag, &j);
    return s == LS_OK ? reference_end(r, batch, tag, &j, false, NULL, out) : s;
}

/* ---- comparisons ------------------------------------------------------------- */

cJSON *ls_parity_members_entries(const ls_parity_logprobs *a, const ls_parity_logprobs *b, double tol, double nf) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < a->g && i < b->g; i++) {
        char name[64];
        snprintf(name, sizeof name, "member %d (%d tokens)", i, a->len[i]);
        ls_parity_err e = a->len[i] == b->len[i] ? ls_parity_err_of(a->lp[i], b->lp[i], (size_t)a->len[i])
                                                 : (ls_parity_err){INFINITY, INFINITY};
        cJSON_AddItemToArray(arr, ls_parity_entry(name, e, tol, nf));
    }
    if (a->g != b->g) cJSON_AddItemToArray(arr, ls_parity_entry("member count", (ls_parity_err){INFINITY, INFINITY}, tol, -1));
    return arr;
}

double ls_parity_logprob_noise(const ls_parity_logprobs *a, const ls_parity_logprobs *b) {
    double m = 0;
    for (int i = 0; i < a->g && i < b->g; i++) {
        if (a->len[i] != b->len[i]) continue;
        ls_parity_err e = ls_parity_err_of(a->lp[i], b->lp[i], (size_t)a->len[i]);
        if (e.max_rel > m || isnan(e.max_rel)) m = e.max_rel; /* NaN: no tolerance can be derived */
    }
    return m;
}

/* The composition noise of dtype dt for parity_decisions.c: the largest
 * relative disagreement of a fault-free score run's log-probs (naive, each
 * CP size) with the float64 independent reference, at least a unit of
 * roundoff. */
static double decision_noise(const cfg_run *r, int dt) {
    const dtype_out *d = &r->d[dt];
    double n = ls_parity_decisions_unit(dt), m = ls_parity_logprob_noise(&d->naive, &r->ref_policy);
    if (m > n) n = m;
    for (size_t k = 0; k < r->o->n_cps; k++) {
        if ((m = ls_parity_logprob_noise(&d->ls[k], &r->ref_policy)) > n) n = m;
        for (size_t e = 1; e < r->o->n_eps; e++)
            if (ep_fits(r->o, e, k) && (m = ls_parity_logprob_noise(&d->ep_ls[e][k], &r->ref_policy)) > n) n = m;
    }
    return n;
}

double ls_parity_f32_tol(double nf) {
    double t = F32_FACTOR * nf;
    return t > F32_MIN_TOL ? t : F32_MIN_TOL;
}

/* Per tensor of `want` (every name in it; params: the trainable ones, as
 * named by `want`): a's values against b's. */
static double tensor_err(const ls_parity_tensors *a, const ls_parity_tensors *b, const char *name) {
    long x = ls_parity_tensors_find(a, name), y = ls_parity_tensors_find(b, name);
    return x >= 0 && y >= 0 && a->numel[x] == b->numel[y] ? ls_parity_err_of(a->v[x], b->v[y], a->numel[x]).max_rel
                                                           : INFINITY;
}

/* The largest |value| over every tensor of t named by want: the scale of a
 * whole gradient (or parameter set), against which rounding is measured. */
static double set_scale(const ls_parity_tensors *want, const ls_parity_tensors *t) {
    double g = 0;
    for (size_t i = 0; i < want->n; i++) {
        long k = ls_parity_tensors_find(t, want->name[i]);
        for (size_t j = 0; k >= 0 && j < t->numel[k]; j++)
            if (fabs(t->v[k][j]) > g) g = fabs(t->v[k][j]);
    }
    return g;
}

cJSON *ls_parity_tensor_entries(const ls_parity_tensors *want, const ls_parity_tensors *a, const ls_parity_tensors *b,
                              const ls_parity_tensors *nf_a, const ls_parity_tensors *nf_b,
                              const ls_parity_tensors *nf_c, const ls_parity_tensors *nf_d) {
    cJSON *arr = cJSON_CreateArray();
    /* A tensor whose reference is zero or tiny (an MoE expert no token reached, or reached only through
     * rounding crumbs of a composition: measured 1.7e-20 against an exact 0) makes the relative error
     * ill-posed.  Each entry is therefore also judged against an absolute floor: FLOOR_ULPS units in the
     * last place of the largest value of the whole set (the reference's), the rounding any composition
     * of these sums may leave on a value that is zero exactly; a tensor's relative error is taken over
     * max(its own scale, floor / tolerance), so that "pass" still reads max_rel_err <= tolerance. */
    const double eps = nf_a != NULL ? (double)FLT_EPSILON : DBL_EPSILON;
    const double floor_abs = FLOOR_ULPS * eps * set_scale(want, b);
    for (size_t i = 0; i < want->n; i++) {
        long ia = ls_parity_tensors_find(a, want->name[i]), ib = ls_parity_tensors_find(b, want->name[i]);
        ls_parity_err e = {INFINITY, INFINITY};
        double scale = 0;
        if (ia >= 0 && ib >= 0 && a->numel[ia] == b->numel[ib]) {
            e = ls_parity_err_of(a->v[ia], b->v[ib], a->numel[ia]);
            for (size_t j = 0; j < b->numel[ib]; j++)
                if (fabs(b->v[ib][j]) > scale) scale = fabs(b->v[ib][j]);
        }
        double tol = F64_TOL, nf = -1;
        if (nf_a != NULL) {
            nf = tensor_err(nf_a, nf_b, want->name[i]);
            if (nf_c != NULL) {
                double nf2 = tensor_err(nf_c, nf_d, want->name[i]);
                if (!(nf2 <= nf)) nf = nf2;
            }
            tol = ls_parity_f32_tol(nf);
        }
        if (isfinite(e.max_abs) && floor_abs > 0 && floor_abs / tol > scale)
            e.max_rel = e.max_abs == 0 ? 0 : e.max_abs / (floor_abs / tol);
        cJSON *en = ls_parity_entry(want->name[i], e, tol, nf);
        if (en) cJSON_AddNumberToObject(en, "abs_floor", floor_abs);
        cJSON_AddItemToArray(arr, en);
    }
    return arr;
}

/* AdamW's first update of a gradient element g (m = v = 0; as kernels/cpu/grpo.c, weight decay apart:
 * both compositions decay the same initial weights alike). */
static double adamw_first(const ls_parity_adamw *o, double g) {
    double c1 = 1.0 - pow(o->beta1, (double)o->step), c2 = 1.0 - pow(o->beta2, (double)o->step);
    double mi = (1.0 - o->beta1) * g, vi = (1.0 - o->beta2) * g * g;
    return (mi / c1) / (sqrt(vi / c2) + o->eps);
}

/* Updated parameters a (CP-N) against b (CP-1), per tensor of want: each element may differ by what the
 * optimizer makes of the two runs' own gradients (ga, gb: lr |u(ga) - u(gb)|, AdamW's first step
 * u(g) = g / (|g| + eps), which turns a rounding-sized difference of a gradient element near eps into a
 * large one) plus one rounding of each updated value to the dtype; what is left over is the error,
 * against the dtype's floor.  That the gradients themselves agree is cp_grad's check. */
cJSON *ls_parity_params_entries(const ls_parity_tensors *want, const ls_parity_tensors *a, const ls_parity_tensors *b,
                             const ls_parity_tensors *ga, const ls_parity_tensors *gb, const ls_parity_adamw *o,
                             int dt) {
    cJSON *arr = cJSON_CreateArray();
    const bool f32 = dt == LS_PARITY_F32;
    const double eps = f32 ? (double)FLT_EPSILON : DBL_EPSILON, tol = f32 ? F32_MIN_TOL : F64_TOL;
    for (size_t i = 0; i < want->n; i++) {
        const char *nm = want->name[i];
        long ia = ls_parity_tensors_find(a, nm), ib = ls_parity_tensors_find(b, nm);
        long ja = ls_parity_tensors_find(ga, nm), jb = ls_parity_tensors_find(gb, nm);
        ls_parity_err e = {INFINITY, INFINITY};
        double scale = 0, explained = 0;
        size_t n = ia >= 0 ? a->numel[ia] : 0;
        if (ia >= 0 && ib >= 0 && ja >= 0 && jb >= 0 && b->numel[ib] == n && ga->numel[ja] == n && gb->numel[jb] == n) {
            double excess = 0;
            for (size_t j = 0; j < n; j++) {
                double pa = a->v[ia][j], pb = b->v[ib][j];
                double du = o == NULL ? 0 : o->lr * fabs(adamw_first(o, ga->v[ja][j]) - adamw_first(o, gb->v[jb][j]));
                double bound = du + eps * fmax(fabs(pa), fabs(pb));
                if (fabs(pb) > scale) scale = fabs(pb);
                if (du > explained) explained = du;
                if (fabs(pa - pb) - bound > excess) excess = fabs(pa - pb) - bound;
            }
            e.max_abs = excess;
            e.max_rel = scale > 0 ? excess / scale : excess;
        }
        cJSON *en = ls_parity_entry(nm, e, tol, -1);
        if (en) cJSON_AddNumberToObject(en, "explained_by_gradients", scale > 0 ? explained / scale : explained);
        cJSON_AddItemToArray(arr, en);
    }
    return arr;
}

static cJSON *tensor_entries(const ls_parity_tensors *want, const ls_parity_tensors *a, const ls_parity_tensors *b,
                             const ls_parity_tensors *nf_a, const ls_parity_tensors *nf_b) {
    return ls_parity_tensor_entries(want, a, b, nf_a, nf_b, NULL, NULL);
}

static void add(cfg_run *r, cJSON *check, const char *control) {
    if (control) ls_parity_report_control(r->rep, control, check);
    else ls_parity_report_add(r->rep, check);
}

static void check_name(char *buf, size_t cap, const char *kind, const cfg_run *r, int dt, int world, const char *extra) {
    snprintf(buf, cap, "%s %s %s cp%d%s%s", kind, r->c->name, ls_parity_dtype_name(dt), world, extra ? " " : "", extra ? extra : "");
}

/* The EP runs' log-probs (--eps): EP o->eps[e] at CP o->cps[k] (world cp x N, the check's "ep" N) against the
 * naive run as CP-N's are (and, float64, against the independent reference). */
static void ep_logprob_checks(cfg_run *r, int dt, double tol, double nf) {
    dtype_out *d = &r->d[dt];
    char name[256], cand[128], tag[32];
    for (size_t e = 1; e < r->o->n_eps; e++)
        for (size_t k = 0; k < r->o->n_cps; k++) {
            if (!ep_fits(r->o, e, k)) continue;
            int c = r->o->cps[k], N = r->o->eps[e];
            snprintf(tag, sizeof tag, "ep%d", N);
            snprintf(cand, sizeof cand, "longstraw cp%d ep%d", c, N);
            check_name(name, sizeof name, "logprob", r, dt, c, tag);
            ls_parity_report_add(r->rep, ls_parity_check_ep(ls_parity_check_new("logprob", name, dt, c * N, r->c->name,
                                                                                NULL, "naive full sequence", cand,
                                                                                ls_parity_members_entries(&d->ep_ls[e][k], &d->naive, tol, nf),
                                                                                "members"), N));
            if (dt != LS_PARITY_F64) continue;
            check_name(name, sizeof name, "ref_logprob", r, dt, c, tag);
            ls_parity_report_add(r->rep, ls_parity_check_ep(ls_parity_check_new("ref_logprob", name, dt, c * N, r->c->name,
                                                                                NULL, "independent reference (Python, "
                                                                                "docs/model.md)", cand,
                                                                                ls_parity_members_entries(&d->ep_ls[e][k], &r->ref_policy, F64_TOL, -1),
                                                                                "members"), N));
        }
}

static void logprob_checks(cfg_run *r, int dt) {
    dtype_out *d = &r->d[dt];
    double nf = -1, tol = F64_TOL;
    if (dt == LS_PARITY_F32) {
        nf = ls_parity_logprob_noise(&d->naive, &r->d[LS_PARITY_F64].naive);
        tol = ls_parity_f32_tol(nf);
    }
    char name[256], cand[128];
    for (size_t k = 0; k < r->o->n_cps; k++) {
        int n = r->o->cps[k];
        check_name(name, sizeof name, "logprob", r, dt, n, NULL);
        snprintf(cand, sizeof cand, "longstraw cp%d", n);
        add(r, ls_parity_check_new("logprob", name, dt, n, r->c->name, NULL, "naive full sequence", cand,
                                   ls_parity_members_entries(&d->ls[k], &d->naive, tol, nf), "members"), NULL);
        if (n > 1) {
            const char *sf = r->o->fam->score_fault;
            check_name(name, sizeof name, "logprob", r, dt, n, sf);
            snprintf(cand, sizeof cand, "longstraw cp%d --fault %s", n, sf);
            add(r, ls_parity_check_new("logprob", name, dt, n, r->c->name, NULL, "naive full sequence", cand,
                                       ls_parity_members_entries(&d->local[k], &d->naive, tol, nf), "members"),
                sf);
        }
        if (dt == LS_PARITY_F64) {
            check_name(name, sizeof name, "ref_logprob", r, dt, n, NULL);
            add(r, ls_parity_check_new("ref_logprob", name, dt, n, r->c->name, NULL, "independent reference (Python, docs/model.md)",
                                       cand, ls_parity_members_entries(&d->ls[k], &r->ref_policy, F64_TOL, -1), "members"), NULL);
        }
    }
    ep_logprob_checks(r, dt, tol, nf);
    if (dt == LS_PARITY_F64) {
        check_name(name, sizeof name, "ref_logprob", r, dt, 1, "naive");
        add(r, ls_parity_check_new("ref_logprob", name, dt, 1, r->c->name, NULL, "independent reference (Python, docs/model.md)",
                                   "naive full sequence", ls_parity_members_entries(&d->naive, &r->ref_policy, F64_TOL, -1), "members"),
            NULL);
    }
}

/* The EP runs' gradients (--eps): EP o->eps[e] at CP o->cps[k] (world cp x N, the check's "ep" N), per mode,
 * against the EP-1 run of the same CP size (cp_grad, cp_params: the trainer's EP is EP-1's bit for bit; held
 * to the tolerance of the CP checks, float32 with their noise floors) and against the naive run (grad; the
 * detached runs' is the control "detached"); ep-drop-dx's full gradient must fail cp_grad. */
static void ep_grad_checks(cfg_run *r, int dt) {
    dtype_out *d = &r->d[dt], *d64 = &r->d[LS_PARITY_F64];
    bool f32 = dt == LS_PARITY_F32;
    const ls_parity_tensors *want = &d->gnaive;
    char name[256], cand[160], refn[160], tag[64];
    size_t k1 = 0;
    for (size_t e = 1; e < r->o->n_eps; e++)
        for (size_t k = 0; k < r->o->n_cps; k++) {
            if (!ep_fits(r->o, e, k)) continue;
            int c = r->o->cps[k], N = r->o->eps[e], w = c * N;
            for (int m = 0; m < 2; m++) {
                snprintf(tag, sizeof tag, "ep%d %s", N, MODE[m]);
                snprintf(cand, sizeof cand, "longstraw cp%d ep%d %s", c, N, MODE[m]);
                snprintf(refn, sizeof refn, "longstraw cp%d (ep1) %s", c, MODE[m]);
                check_name(name, sizeof name, "cp_grad", r, dt, c, tag);
                add(r, ls_parity_check_ep(ls_parity_check_new("cp_grad", name, dt, w, r->c->name, MODE[m], refn, cand,
                                                              ls_parity_tensor_entries(want, &d->ep_gls[e][m][k], &d->gls[m][k],
                                                                  f32 ? &d->gls[m][k1] : NULL, f32 ? &d64->gls[m][k1] : NULL,
                                                                  f32 ? &d->gls[m][k1] : NULL,
                                                                  f32 ? (m == FULL ? &d->gnaive : &d->gnaive_det) : NULL),
                                                              "tensors"), N), NULL);
                check_name(name, sizeof name, "cp_params", r, dt, c, tag);
                add(r, ls_parity_check_ep(ls_parity_check_new("cp_params", name, dt, w, r->c->name, MODE[m], refn, cand,
                                                              ls_parity_params_entries(want, &d->ep_pls[e][m][k], &d->pls[m][k],
                                                                                       &d->ep_gls[e][m][k], &d->gls[m][k],
                                                                                       &d->adamw, dt),
                                                              "tensors"), N), NULL);
                check_name(name, sizeof name, "grad", r, dt, c, tag);
                add(r, ls_parity_check_ep(ls_parity_check_new("grad", name, dt, w, r->c->name, MODE[m], "naive full sequence",
                                                              cand, tensor_entries(want, &d->ep_gls[e][m][k], &d->gnaive,
                                                                                   f32 ? &d->gnaive : NULL,
                                                                                   f32 ? &d64->gnaive : NULL),
                                                              "tensors"), N),
                    m == DETACHED ? "detached" : NULL);
            }
            snprintf(tag, sizeof tag, "ep%d %s", N, LS_PARITY_EP_FAULT);
            snprintf(cand, sizeof cand, "longstraw cp%d ep%d full --fault %s", c, N, LS_PARITY_EP_FAULT);
            snprintf(refn, sizeof refn, "longstraw cp%d (ep1) full", c);
            check_name(name, sizeof name, "cp_grad", r, dt, c, tag);
            add(r, ls_parity_check_ep(ls_parity_check_new("cp_grad", name, dt, w, r->c->name, "full", refn, cand,
                                                          tensor_entries(want, &d->ep_gdrop[e][k], &d->gls[FULL][k],
                                                                         f32 ? &d->gls[FULL][k1] : NULL,
                                                                         f32 ? &d64->gls[FULL][k1] : NULL),
                                                          "tensors"), N),
                LS_PARITY_EP_FAULT);
            ls_parity_report_require_control(r->rep, LS_PARITY_EP_FAULT, 3);
        }
}

static void grad_checks(cfg_run *r, int dt) {
    dtype_out *d = &r->d[dt], *d64 = &r->d[LS_PARITY_F64];
    bool f32 = dt == LS_PARITY_F32;
    const ls_parity_tensors *want = &d->gnaive;
    char name[256], cand[160], refn[160];
    size_t k1 = 0; /* cps[0] == 1: checked by the option parser */
    for (size_t k = 0; k < r->o->n_cps; k++) {
        int n = r->o->cps[k];
        for (int m = 0; m < 2; m++) {
            if (n > 1) {
                check_name(name, sizeof name, "cp_grad", r, dt, n, MODE[m]);
                snprintf(cand, sizeof cand, "longstraw cp%d %s", n, MODE[m]);
                snprintf(refn, sizeof refn, "longstraw cp1 %s", MODE[m]);
                /* float32: the noise of the reference (CP-1 float32 against float64), or the spread of
                 * two float32 compositions proven equal in float64 (CP-1 against the naive run),
                 * whichever is larger: a routing decision near a tie (an MoE expert's top-k, a DSA
                 * candidate) can flip with the order of a float32 sum, so that a tensor exactly zero
                 * in one composition is not in another */
                add(r, ls_parity_check_new("cp_grad", name, dt, n, r->c->name, MODE[m], refn, cand,
                                           ls_parity_tensor_entries(want, &d->gls[m][k], &d->gls[m][k1],
                                                           f32 ? &d->gls[m][k1] : NULL, f32 ? &d64->gls[m][k1] : NULL,
                                                           f32 ? &d->gls[m][k1] : NULL,
                                                           f32 ? (m == FULL ? &d->gnaive : &d->gnaive_det) : NULL),
                                           "tensors"), NULL);
                check_name(name, sizeof name, "cp_params", r, dt, n, MODE[m]);
                /* each element within what AdamW's first step makes of the two runs' own gradients, plus
                 * one rounding each: that step, g / (|g| + eps), makes the updated parameters far more
                 * sensitive to rounding than the gradients are (measured: a gradient element of -5.1e-9
                 * at CP-1 and -4.3e-9 at CP-2, float32, moved its parameter by 3.8e-5 more, 2.3e-4 of the
                 * tensor's scale; a tolerance taken from other compositions' spread held or not by chance) */
                add(r, ls_parity_check_new("cp_params", name, dt, n, r->c->name, MODE[m], refn, cand,
                                           ls_parity_params_entries(want, &d->pls[m][k], &d->pls[m][k1], &d->gls[m][k],
                                                          &d->gls[m][k1], &d->adamw, dt),
                                           "tensors"), NULL);
            }
            if (m == FULL && n > 1) {
                for (int f = 0; f < NGF(r); f++) {
                    check_name(name, sizeof name, "cp_grad", r, dt, n, GFAULT(r, f));
                    snprintf(cand, sizeof cand, "longstraw cp%d full --fault %s", n, GFAULT(r, f));
                    add(r, ls_parity_check_new("cp_grad", name, dt, n, r->c->name, "full", "longstraw cp1 full", cand,
                                               tensor_entries(want, &d->gfault[f][k], &d->gls[FULL][k1],
                                                              f32 ? &d->gls[FULL][k1] : NULL,
                                                              f32 ? &d64->gls[FULL][k1] : NULL),
                                               "tensors"), GFAULT(r, f));
                }
            }
            check_name(name, sizeof name, "grad", r, dt, n, MODE[m]);
            snprintf(cand, sizeof cand, "longstraw cp%d %s", n, MODE[m]);
            add(r, ls_parity_check_new("grad", name, dt, n, r->c->name, MODE[m], "naive full sequence", cand,
                                       tensor_entries(want, &d->gls[m][k], &d->gnaive, f32 ? &d->gnaive : NULL,
                                                      f32 ? &d64->gnaive : NULL), "tensors"),
                m == DETACHED ? "detached" : NULL);
        }
    }
    ep_grad_checks(r, dt);
    if (dt == LS_PARITY_F64) {
        cJSON *arr = cJSON_CreateArray();
        ls_parity_err e = {fabs(d->loss_naive - r->ref_loss), 0};
        e.max_rel = r->ref_loss != 0 ? e.max_abs / fabs(r->ref_loss) : e.max_abs;
        cJSON_AddItemToArray(arr, ls_parity_entry("loss", e, F64_TOL, -1));
        check_name(name, sizeof name, "ref_loss", r, dt, 1, "naive");
        add(r, ls_parity_check_new("ref_loss", name, dt, 1, r->c->name, NULL, "independent reference (Python, docs/model.md section 4)",
                                   "naive full sequence", arr, "members"), NULL);
    }
}

/* ---- the driver ---------------------------------------------------------------- */

static int model_int(const cJSON *mc, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(mc, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= (1 << 24) ? (int)v->valuedouble : 0;
}

/* The decisions the model config mc makes (mla): a query that sees more keys than index_topk selects, an
 * MoE layer keeps topk_group of n_group groups and experts_per_token of their experts.  Parity's lengths
 * are reducible, but not below what keeps a decision in play: where the entry's prompt would not exceed
 * the top-k (a --like model with a wider index_topk than parity's fixtures), it is lengthened by a
 * multiple of 8 positions (its splits over 2, 4 and 8 ranks and its page and chunk cuts stay alike) until
 * every prompt query beyond index_topk selects.  r->c becomes that entry. */
static void fixture_decisions(cfg_run *r, const cJSON *mc) {
    r->own = *r->c;
    r->c = &r->own;
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(mc, "family");
    const ls_parity_family *f = cJSON_IsString(fam) ? ls_parity_family_of(fam->valuestring) : NULL;
    if (!f || !f->decisions) return;
    int topk = model_int(mc, f->dkeys.topk);
    if (r->own.prompt_len - 1 <= topk) {
        int add = 8 * ((topk + 1 - (r->own.prompt_len - 1)) / 8 + 1);
        snprintf(r->own_what, sizeof r->own_what, "%s; the prompt lengthened by %d to %d positions, past index_topk %d",
                 r->c->what, add, r->own.prompt_len + add, topk);
        r->own.prompt_len += add;
        r->own.what = r->own_what;
    }
    ls_parity_decisions_expect(mc, r->own.prompt_len - 1, r->expect); /* every query beyond the top-k selects */
}

static ls_status read_outputs(cfg_run *r, int dt) {
    dtype_out *d = &r->d[dt];
    const ls_parity_opts *o = r->o;
    char p[LS_PARITY_PATH], label[64];
    ls_status s;
    run_path(r, dt, "score-naive", "batch.json", p);
    if ((s = ls_parity_batch_logprobs(p, false, &d->naive, r->err, r->errlen)) != LS_OK) return s;
    for (size_t k = 0; k < o->n_cps; k++) {
        snprintf(label, sizeof label, "score-cp%d", o->cps[k]);
        run_path(r, dt, label, "batch.json", p);
        if ((s = ls_parity_batch_logprobs(p, false, &d->ls[k], r->err, r->errlen)) != LS_OK) return s;
        if (o->cps[k] > 1) {
            snprintf(label, sizeof label, "score-cp%d-local", o->cps[k]);
            run_path(r, dt, label, "batch.json", p);
            if ((s = ls_parity_batch_logprobs(p, false, &d->local[k], r->err, r->errlen)) != LS_OK) return s;
        }
        for (size_t e = 1; e < o->n_eps; e++) {
            if (!ep_fits(o, e, k)) continue;
            snprintf(label, sizeof label, "score-cp%d-ep%d", o->cps[k], o->eps[e]);
            run_path(r, dt, label, "batch.json", p);
            if ((s = ls_parity_batch_logprobs(p, false, &d->ep_ls[e][k], r->err, r->errlen)) != LS_OK) return s;
        }
    }
    return LS_OK;
}

static ls_status read_grads(cfg_run *r, int dt) {
    dtype_out *d = &r->d[dt];
    const ls_parity_opts *o = r->o;
    char p[LS_PARITY_PATH], label[64];
    ls_status s;
    run_path(r, dt, "grad-naive", "grads.safetensors", p);
    if ((s = ls_parity_tensors_read(p, &d->gnaive, r->err, r->errlen)) != LS_OK) return s;
    run_path(r, dt, "grad-naive-detached", "grads.safetensors", p);
    if ((s = ls_parity_tensors_read(p, &d->gnaive_det, r->err, r->errlen)) != LS_OK) return s;
    run_path(r, dt, "grad-naive", "log", p);
    if ((s = ls_parity_log_loss(p, &d->loss_naive, r->err, r->errlen)) != LS_OK) return s;
    run_path(r, dt, "grad-cp1-full", "run", p);
    if ((s = ls_parity_run_adamw(p, &d->adamw, r->err, r->errlen)) != LS_OK) return s;
    if (d->adamw.step != 1) {
        snprintf(r->err, r->errlen, "%s: the grad run's update was step %lld, not a first step (m = v = 0)", p,
                 (long long)d->adamw.step);
        return LS_ERR_FORMAT;
    }
    for (size_t k = 0; k < o->n_cps; k++) {
        for (int m = 0; m < 2; m++) {
            snprintf(label, sizeof label, "grad-cp%d-%s", o->cps[k], MODE[m]);
            run_path(r, dt, label, "grads.safetensors", p);
            if ((s = ls_parity_tensors_read(p, &d->gls[m][k], r->err, r->errlen)) != LS_OK) return s;
            run_path(r, dt, label, "final.safetensors", p);
            if ((s = ls_parity_tensors_read(p, &d->pls[m][k], r->err, r->errlen)) != LS_OK) return s;
        }
        for (int f = 0; f < NGF(r) && o->cps[k] > 1; f++) {
            snprintf(label, sizeof label, "grad-cp%d-%s", o->cps[k], GFAULT(r, f));
            run_path(r, dt, label, "grads.safetensors", p);
            if ((s = ls_parity_tensors_read(p, &d->gfault[f][k], r->err, r->errlen)) != LS_OK) return s;
        }
        for (size_t e = 1; e < o->n_eps; e++) {
            if (!ep_fits(o, e, k)) continue;
            for (int m = 0; m < 2; m++) {
                snprintf(label, sizeof label, "grad-cp%d-ep%d-%s", o->cps[k], o->eps[e], MODE[m]);
                run_path(r, dt, label, "grads.safetensors", p);
                if ((s = ls_parity_tensors_read(p, &d->ep_gls[e][m][k], r->err, r->errlen)) != LS_OK) return s;
                run_path(r, dt, label, "final.safetensors", p);
                if ((s = ls_parity_tensors_read(p, &d->ep_pls[e][m][k], r->err, r->errlen)) != LS_OK) return s;
            }
            snprintf(label, sizeof label, "grad-cp%d-ep%d-%s", o->cps[k], o->eps[e], LS_PARITY_EP_FAULT);
            run_path(r, dt, label, "grads.safetensors", p);
            if ((s = ls_parity_tensors_read(p, &d->ep_gdrop[e][k], r->err, r->errlen)) != LS_OK) return s;
        }
    }
    return LS_OK;
}

static size_t score_specs(cfg_run *r, run_spec *sp, char labels[][64]) {
    size_t n = 0;
    for (int dt = 0; dt < 2; dt++) {
        if (!r->o->dtype[dt]) continue;
        sp[n++] = (run_spec){.dt = dt, .world = 1, .label = "score-naive", .strategy = "naive"};
        for (size_t k = 0; k < r->o->n_cps; k++) {
            int w = r->o->cps[k];
            snprintf(labels[n], 64, "score-cp%d", w);
            sp[n] = (run_spec){.dt = dt, .world = w, .label = labels[n]};
            n++;
            if (w > 1) {
                snprintf(labels[n], 64, "score-cp%d-local", w);
                sp[n] = (run_spec){.dt = dt, .world = w, .label = labels[n], .fault = r->o->fam->score_fault};
                n++;
            }
            for (size_t e = 1; e < r->o->n_eps; e++) {
                if (!ep_fits(r->o, e, k)) continue;
                int N = r->o->eps[e];
                snprintf(labels[n], 64, "score-cp%d-ep%d", w, N);
                sp[n] = (run_spec){.dt = dt, .world = w * N, .ep = N, .label = labels[n]};
                n++;
            }
        }
    }
    return n;
}

static size_t grad_specs(cfg_run *r, run_spec *sp, char labels[][64]) {
    size_t n = 0;
    for (int dt = 0; dt < 2; dt++) {
        if (!r->o->dtype[dt]) continue;
        sp[n++] = (run_spec){.dt = dt, .world = 1, .label = "grad-naive", .strategy = "naive", .grad_mode = "full",
                             .grad = true}; /* the full-sequence gradient */
        /* the stop-gradient composition: a second float32 composition of the detached update */
        sp[n++] = (run_spec){.dt = dt, .world = 1, .label = "grad-naive-detached", .strategy = "naive",
                             .grad_mode = "detached", .grad = true};
        for (size_t k = 0; k < r->o->n_cps; k++) {
            int w = r->o->cps[k];
            for (int m = 0; m < 2; m++) {
                snprintf(labels[n], 64, "grad-cp%d-%s", w, MODE[m]);
                sp[n] = (run_spec){.dt = dt, .world = w, .label = labels[n], .grad_mode = MODE[m], .grad = true};
                n++;
            }
            for (int f = 0; f < NGF(r) && w > 1; f++) {
                snprintf(labels[n], 64, "grad-cp%d-%s", w, GFAULT(r, f));
                sp[n] = (run_spec){.dt = dt, .world = w, .label = labels[n], .grad_mode = "full",
                                   .fault = GFAULT(r, f), .grad = true};
                n++;
            }
            for (size_t e = 1; e < r->o->n_eps; e++) {
                if (!ep_fits(r->o, e, k)) continue;
                int N = r->o->eps[e];
                for (int m = 0; m < 2; m++) {
                    snprintf(labels[n], 64, "grad-cp%d-ep%d-%s", w, N, MODE[m]);
                    sp[n] = (run_spec){.dt = dt, .world = w * N, .ep = N, .label = labels[n], .grad_mode = MODE[m],
                                       .grad = true};
                    n++;
                }
                snprintf(labels[n], 64, "grad-cp%d-ep%d-%s", w, N, LS_PARITY_EP_FAULT);
                sp[n] = (run_spec){.dt = dt, .world = w * N, .ep = N, .label = labels[n], .grad_mode = "full",
                                   .fault = LS_PARITY_EP_FAULT, .grad = true};
                n++;
            }
        }
    }
    return n;
}

static void free_outputs(cfg_run *r) {
    for (int dt = 0; dt < 2; dt++) {
        dtype_out *d = &r->d[dt];
        ls_parity_logprobs_free(&d->naive);
        ls_parity_tensors_free(&d->gnaive);
        ls_parity_tensors_free(&d->gnaive_det);
        for (int k = 0; k < LS_PARITY_MAX_CP; k++) {
            ls_parity_logprobs_free(&d->ls[k]);
            ls_parity_logprobs_free(&d->local[k]);
            for (int m = 0; m < 2; m++) {
                ls_parity_tensors_free(&d->gls[m][k]);
                ls_parity_tensors_free(&d->gfault[m][k]);
                ls_parity_tensors_free(&d->pls[m][k]);
            }
            for (int e = 0; e < LS_PARITY_MAX_CP; e++) {
                ls_parity_logprobs_free(&d->ep_ls[e][k]);
                ls_parity_tensors_free(&d->ep_gdrop[e][k]);
                for (int m = 0; m < 2; m++) {
                    ls_parity_tensors_free(&d->ep_gls[e][m][k]);
                    ls_parity_tensors_free(&d->ep_pls[e][m][k]);
                }
            }
        }
    }
    ls_parity_logprobs_free(&r->ref_policy);
    cJSON_Delete(r->decisions);
    r->decisions = NULL;
}

static ls_status run_config(cfg_run *r) {
    const ls_parity_opts *o = r->o;
    ls_status s;
    run_spec sp[256]; /* a dtype's grad runs: 2 + per CP size 4 + 3 per EP grid point: at most 8 x 4 + 12 x 3 + 2 */
    char labels[256][64];
    snprintf(r->dir, sizeof r->dir, "%s/runs/%s", o->out, r->c->name);
    snprintf(r->weights, sizeof r->weights, "%s/weights.safetensors", r->dir);
    snprintf(r->roll_score, sizeof r->roll_score, "%s/rollouts-score.jsonl", r->dir);
    snprintf(r->roll_grad, sizeof r->roll_grad, "%s/rollouts-grad.jsonl", r->dir);
    if (ls_parity_mkdirs(r->dir) != 0) {
        snprintf(r->err, r->errlen, "cannot create %s: %s", r->dir, strerror(errno));
        return LS_ERR_IO;
    }
    cJSON *mc = NULL;
    if ((s = ls_json_read_file_capped(o->model_config, 1u << 20, &mc, r->err, r->errlen)) != LS_OK) return s;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(mc, "vocab");
    r->vocab = cJSON_IsNumber(v) && v->valuedouble >= 2 && v->valuedouble <= (1 << 24) ? (int)v->valuedouble : 0;
    if (r->vocab != 0) fixture_decisions(r, mc);
    cJSON_Delete(mc);
    if (r->vocab == 0) {
        snprintf(r->err, r->errlen, "%s: field 'vocab' is not an integer in 2..2^24", o->model_config);
        return LS_ERR_FORMAT;
    }
    ls_parity_report_config(r->rep, r->c, r->o->train_mode);
    if ((s = write_rollouts(r, r->roll_score, NULL, NULL)) != LS_OK) return s;
    char p[LS_PARITY_PATH];
    cJSON *ref = NULL;
    /* the fixture's weights, its score runs and the independent forward; drawn again while one of its
     * discrete decisions lies too near a tie for the compositions to be compared (parity_decisions.c) */
    for (r->draw = 1;; r->draw++) {
        r->seed = o->seed + (uint64_t)(r->draw - 1) * 7919u;
        sp[0] = (run_spec){.dt = LS_PARITY_F64, .world = 1, .label = "init", .strategy = "naive"};
        if ((s = run_specs(r, sp, 1, "init (weights)")) != LS_OK) return s;
        if ((s = run_specs(r, sp, score_specs(r, sp, labels), "score runs")) != LS_OK) return s;
        for (int dt = 0; dt < 2; dt++)
            if (o->dtype[dt] && (s = read_outputs(r, dt)) != LS_OK) return s;
        run_path(r, LS_PARITY_F64, "score-naive", "batch.json", p);
        if ((s = reference(r, p, "score", &ref)) != LS_OK) return s;
        s = ls_parity_json_logprobs(ref, "policy", r->o->reference, &r->ref_policy, r->err, r->errlen);
        if (s == LS_OK && r->ref_policy.g != r->c->group) {
            snprintf(r->err, r->errlen, "the independent reference's 'policy' has %d members, expected %d",
                     r->ref_policy.g, r->c->group);
            s = LS_ERR_FORMAT;
        }
        char what[LS_PARITY_PATH + 32];
        snprintf(what, sizeof what, "%s/reference-score.json", r->dir);
        if (s == LS_OK) s = ls_parity_decisions_read(ref, what, &r->decisions, r->err, r->errlen);
        cJSON_Delete(ref);
        ref = NULL;
        if (s != LS_OK) return s;
        bool clear = true, last = r->draw >= LS_PARITY_DECISION_DRAWS;
        cJSON *checks[2] = {NULL, NULL};
        bool decides = ls_parity_decisions_count(r->decisions) > 0 || r->expect[0] || r->expect[1] || r->expect[2];
        for (int dt = 0; dt < 2 && decides; dt++) {
            if (!o->dtype[dt]) continue;
            checks[dt] = ls_parity_decisions_check(r->decisions, r->expect, r->c->name, dt, decision_noise(r, dt),
                                                   r->seed, r->draw);
            clear = clear && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(checks[dt], "pass"));
        }
        if (clear || last) {
            for (int dt = 0; dt < 2; dt++)
                if (checks[dt]) add(r, checks[dt], NULL);
            if (r->draw > 1)
                ls_parity_report_note(r->rep, "%s: weights of draw %d (seed %llu): the earlier draws made a decision "
                                      "too near a tie to compare compositions", r->c->name, r->draw,
                                      (unsigned long long)r->seed);
            break;
        }
        for (int dt = 0; dt < 2; dt++) {
            if (checks[dt] && !o->quiet)
                fprintf(stderr, "longstraw-parity: %s draw %d (seed %llu): %s fails (worst %s, noise/margin %.3g > "
                        "1/%.0f): drawing other weights\n", r->c->name, r->draw, (unsigned long long)r->seed,
                        cJSON_GetObjectItemCaseSensitive(checks[dt], "name")->valuestring,
                        cJSON_GetObjectItemCaseSensitive(checks[dt], "worst")->valuestring,
                        cJSON_GetObjectItemCaseSensitive(checks[dt], "max_rel_err")->valuedouble,
                        LS_PARITY_DECISION_ROOM);
            cJSON_Delete(checks[dt]);
        }
        free_outputs(r);
    }
    /* the grad runs' supplied log-probs */
    ls_parity_logprobs refp;
    if ((s = ls_parity_batch_logprobs(p, true, &refp, r->err, r->errlen)) != LS_OK) return s;
    s = write_rollouts(r, r->roll_grad, &r->d[LS_PARITY_F64].naive, &refp);
    ls_parity_logprobs_free(&refp);
    if (s != LS_OK) return s;

    if ((s = run_specs(r, sp, grad_specs(r, sp, labels), "grad runs")) != LS_OK) return s;
    for (int dt = 0; dt < 2; dt++)
        if (o->dtype[dt] && (s = read_grads(r, dt)) != LS_OK) return s;
    run_path(r, LS_PARITY_F64, "grad-naive", "batch.json", p);
    /* the reference on the grad batch (one process) runs beside the finite differences (--jobs runs) */
    ls_parity_job refj;
    if ((s = reference_start(r, p, "grad", &refj)) != LS_OK) return s;
    s = ls_parity_fd(o, r->c, r->rep, r->dir, r->weights, r->roll_grad, &r->d[LS_PARITY_F64].gnaive,
                     &r->d[LS_PARITY_F64].gls[FULL][0], r->err, r->errlen);
    ls_status rs = reference_end(r, p, "grad", &refj, s != LS_OK, "the finite differences", &ref);
    if (s != LS_OK) return s;
    if (rs != LS_OK) return rs;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(ref, "loss");
    r->ref_loss = cJSON_IsNumber(l) ? l->valuedouble : NAN;
    cJSON_Delete(ref);
    for (int dt = 0; dt < 2; dt++) {
        if (!o->dtype[dt]) continue;
        logprob_checks(r, dt);
        grad_checks(r, dt);
    }
    return LS_OK;
}

ls_status ls_parity_run(const ls_parity_opts *o, bool *all_pass, char *err, size_t errlen) {
    *all_pass = false;
    ls_parity_report *rep = NULL;
    ls_status s = ls_parity_report_begin(o, &rep, err, errlen);
    if (s != LS_OK) return s;
    size_t n = o->fam->n_configs;
    const ls_parity_config *cs = o->fam->configs;
    double t0 = ls_parity_now();
    for (size_t i = 0; i < n && s == LS_OK; i++) {
        if (!o->config_on[i]) continue;
        cfg_run r = {.o = o, .c = &cs[i], .rep = rep, .err = err, .errlen = errlen};
        s = run_config(&r);
        free_outputs(&r);
    }
    /* --like: the trainer launched the way the run was (parity_path.c) */
    if (s == LS_OK && o->like_paths != NULL) s = ls_parity_paths_run(o, rep, err, errlen);
    return ls_parity_report_end(rep, o, s, t0, all_pass, err, errlen);
}
