/* parity_adapter_run.c - the parity matrix of an adapter (parity_adapter.h).
 *
 * In OUT/runs/adapter/: the score batch (prompt, responses, rewards), the
 * init run (weights from --seed), the reference on the score batch (the
 * policy's log-probs), the grad batch (old and reference log-probs: the
 * policy's moved, so that ratios are far from 1 and the clip engages);
 * then in one pool the reference on the grad batch and, per dtype, mode run
 * at every CP size in full and detached mode and every control at its CP
 * sizes; then the finite differences (parity_adapter_fd.c); then the
 * checks, named as LongStraw's (parity_run.c) so that the audit reads the
 * report alike:
 *   logprob     every CP-N full run's log-probs vs the reference's       (2)
 *   ref_logprob float64 CP-N log-probs vs the reference's               (2)
 *   cp_grad     CP-N gradients vs CP-1's, full and detached              (3)
 *   cp_params   CP-N updated parameters vs CP-1's, full and detached     (3)
 *   grad        CP-N full gradients vs the reference's                   (4)
 *   fd_grad     float64 CP-1 and reference g . d vs finite differences   (4)
 *   ref_loss    float64 CP-N losses vs the reference's                   (4)
 * and the controls: each adapter control must fail the check it names,
 * and the detached runs at CP > 1 must fail grad ("detached").
 * Data parallelism (o->dps, the adapter's {dp}): every DP size D > 1 also
 * runs at each CP size c whose c x D processes fit (o->dp_cp: that one
 * only), full mode (and detached with o->dp_detached), in o->dp_dtype, with
 * the adapter's dp_grad controls; each such run is compared as a CP run
 * (logprob, ref_logprob, ref_loss, grad against the reference; cp_grad and
 * cp_params against CP-1 DP-1), tagged "dp" D with world c x D, and
 *   dp_grad     its gradient vs the DP-1 run of its CP size, dtype and
 *               mode, at cp_grad's tolerance                            (3)
 * which the dp_grad controls must fail.  Every run's manifest must record
 * the DP size it was launched at (dp_ranks, absent 1).  Every run
 * must exit 0 and write its files (else exit 2, the run and its log named);
 * a NaN or a tensor missing or of another size fails its check. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/format/atomic_file.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"

/* 1 + 2 dtypes x (8 CP sizes x 2 modes + 16 controls x 9) and the DP runs: 2 dtypes x (2 modes + 16
 * controls) x the (DP, CP) pairs that fit 8 processes (at most 4 + 2 + 2 + 1 + 1 + 1 + 1 = 12) */
#define MAX_RUNS (1 + 2 * (LS_PARITY_MAX_CP * 2 + LS_PARITY_ADAPTER_CONTROLS * (LS_PARITY_MAX_CP + 1)) + \
                  2 * (2 + LS_PARITY_ADAPTER_CONTROLS) * 12)

enum { DET = 0, FULL = 1 };
static const char *const GMODE[] = {"detached", "full"};

typedef struct {
    char label[96], out[LS_PARITY_PATH];
    bool ran, is_ref;
    ls_parity_logprobs lp;
    ls_parity_tensors g, p;
    double loss;
} run_out;

typedef struct {
    const ls_parity_opts *o;
    const ls_parity_adapter *a;
    ls_parity_report *rep;
    char dir[LS_PARITY_PATH], weights[LS_PARITY_PATH], batch_score[LS_PARITY_PATH], batch_grad[LS_PARITY_PATH];
    char config[64];
    run_out mode_run[2][2][LS_PARITY_MAX_CP]; /* [dtype][DET/FULL][cps index] */
    run_out ctl[2][LS_PARITY_ADAPTER_CONTROLS][LS_PARITY_MAX_CP + 1]; /* [dtype][control][cps index, or MAX_CP: its own] */
    /* the DP runs: [dtype][DET/FULL][dps index e >= 1][cps index], where dp_fits; their dp_grad controls */
    run_out dp_run[2][2][LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    run_out dp_ctl[2][LS_PARITY_ADAPTER_CONTROLS][LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    run_out ref, ref_score, init;
    char *err;
    size_t errlen;
} arun;

/* One run to make. */
typedef struct {
    const char *mode, *grad_mode, *fault;
    int dt, cp, dp; /* dp 0: 1 */
    const char *batch;
    run_out *dst;
} spec;

static void out_free(run_out *r) {
    ls_parity_logprobs_free(&r->lp);
    ls_parity_tensors_free(&r->g);
    ls_parity_tensors_free(&r->p);
}

/* ---- the batch files ---------------------------------------------------------- */

/* prompt, responses, rewards; the grad batch's old and reference log-probs from pol (NULL: none). */
static ls_status write_batch(arun *r, const char *path, const ls_parity_logprobs *pol) {
    const ls_parity_adapter *a = r->a;
    cJSON *doc = ls_parity_batch_new(a->token_seed, a->vocab, a->prompt_len, a->group, a->response_lens, a->rewards);
    /* old = the policy moved by -0.6 .. +0.6 (ratios exp(-delta): the clip engages), reference = moved
       otherwise (the KL term sees a reference that differs from the policy) */
    static const double OLD[] = {-0.6, 0.6, 0.05, -0.4, 0.4, -0.1}, REF[] = {0.3, -0.2, 0.15, -0.35, 0.1, 0.25};
    if (pol != NULL) {
        ls_parity_batch_add_logprobs(doc, "old_logprobs", pol, OLD, true);
        ls_parity_batch_add_logprobs(doc, "ref_logprobs", pol, REF, true);
    }
    return ls_parity_batch_write(doc, path, r->err, r->errlen);
}

/* ---- runs ------------------------------------------------------------------------- */

static ls_status make_job(arun *r, const spec *sp, ls_parity_job *j) {
    run_out *d = sp->dst;
    snprintf(d->out, sizeof d->out, "%s/%s", r->dir, d->label);
    ls_status s = ls_parity_fresh_dir(d->out, r->err, r->errlen);
    if (s != LS_OK) return s;
    char log[LS_PARITY_PATH];
    snprintf(log, sizeof log, "%s.log", d->out);
    ls_parity_adapter_vars v = {.mode = sp->mode, .cp = sp->cp, .dp = sp->dp > 1 ? sp->dp : 1,
                                .dtype = ls_parity_dtype_name(sp->dt),
                                .grad_mode = sp->grad_mode ? sp->grad_mode : "full",
                                .fault = sp->fault ? sp->fault : r->a->fault_none, .weights = r->weights,
                                .batch = sp->batch, .out = d->out, .seed = r->o->seed};
    d->is_ref = strcmp(sp->mode, "reference") == 0;
    return ls_parity_adapter_job(r->a, &v, log, j, r->err, r->errlen);
}

ls_status ls_parity_adapter_read_loss(const char *path, double *loss, char *err, size_t errlen) {
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(path, 1u << 20, &doc, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(doc, "loss");
    if (!cJSON_IsNumber(l) || !isfinite(l->valuedouble)) {
        snprintf(err, errlen, "%s: field 'loss' is not a finite number", path);
        s = LS_ERR_FORMAT;
    } else {
        *loss = l->valuedouble;
    }
    cJSON_Delete(doc);
    return s;
}

/* logprobs.safetensors: member.0 .. member.G-1, each of its response's length, or one tensor "logprobs"
 * holding every response token's in member order (NaN allowed: it fails its check). */
ls_status ls_parity_adapter_read_logprobs(const char *path, int g, const int *lens, ls_parity_logprobs *out, char *err,
                                          size_t errlen) {
    ls_parity_tensors t;
    memset(out, 0, sizeof *out);
    ls_status s = ls_parity_tensors_read(path, &t, err, errlen);
    if (s != LS_OK) return s;
    size_t total = 0;
    for (int i = 0; i < g; i++) total += (size_t)lens[i];
    if (t.n == 1 && strcmp(t.name[0], "logprobs") == 0) {
        if (t.numel[0] != total) {
            snprintf(err, errlen, "%s: tensor logprobs of %zu values, expected %zu (every response token, in member "
                     "order)", path, t.numel[0], total);
            s = LS_ERR_FORMAT;
        }
        for (int i = 0, off = 0; s == LS_OK && i < g; off += lens[i], i++) {
            out->lp[i] = malloc((size_t)lens[i] * sizeof(double));
            if (out->lp[i] == NULL) {
                s = LS_ERR_NOMEM;
                break;
            }
            memcpy(out->lp[i], t.v[0] + off, (size_t)lens[i] * sizeof(double));
            out->len[i] = lens[i];
            out->g = i + 1;
        }
        ls_parity_tensors_free(&t);
        if (s != LS_OK) ls_parity_logprobs_free(out);
        return s;
    }
    if ((int)t.n != g) {
        snprintf(err, errlen, "%s: %zu tensors, expected member.0 .. member.%d (one per response)", path, t.n,
                 g - 1);
        s = LS_ERR_FORMAT;
    }
    for (int i = 0; s == LS_OK && i < g; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "member.%d", i);
        long k = ls_parity_tensors_find(&t, nm);
        if (k < 0 || t.numel[k] != (size_t)lens[i]) {
            snprintf(err, errlen, "%s: tensor %s %s (expected %d log-probs, one per response token)", path, nm,
                     k < 0 ? "missing" : "of another size", lens[i]);
            s = LS_ERR_FORMAT;
            break;
        }
        out->lp[i] = t.v[k];
        t.v[k] = NULL;
        out->len[i] = lens[i];
        out->g = i + 1;
    }
    ls_parity_tensors_free(&t);
    if (s != LS_OK) ls_parity_logprobs_free(out);
    return s;
}

static ls_status read_logprobs(const arun *r, const char *path, ls_parity_logprobs *out, char *err, size_t errlen) {
    return ls_parity_adapter_read_logprobs(path, r->a->group, r->a->response_lens, out, err, errlen);
}

/* What run d wrote (the files its mode promises). */
static ls_status read_out(arun *r, run_out *d, bool run_mode) {
    char p[LS_PARITY_PATH];
    ls_status s;
    snprintf(p, sizeof p, "%s/logprobs.safetensors", d->out);
    if ((s = read_logprobs(r, p, &d->lp, r->err, r->errlen)) != LS_OK) return s;
    snprintf(p, sizeof p, "%s/grads.safetensors", d->out);
    if ((s = ls_parity_tensors_read(p, &d->g, r->err, r->errlen)) != LS_OK) return s;
    if (d->g.n == 0) {
        snprintf(r->err, r->errlen, "%s: no tensor (every trainable tensor's gradient expected)", p);
        return LS_ERR_FORMAT;
    }
    snprintf(p, sizeof p, "%s/loss.json", d->out);
    if ((s = ls_parity_adapter_read_loss(p, &d->loss, r->err, r->errlen)) != LS_OK) return s;
    if (!run_mode) return LS_OK;
    snprintf(p, sizeof p, "%s/params.safetensors", d->out);
    return ls_parity_tensors_read(p, &d->p, r->err, r->errlen);
}

ls_status ls_parity_adapter_objective_pinned(const ls_parity_adapter *a, const char *run_dir, char *err, size_t errlen) {
    char path[LS_PARITY_PATH], why[256];
    snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE);
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(path, 1u << 24, &doc, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "predicate"), "config");
    cJSON *objs = ls_coverage_objectives(cfg, why, sizeof why);
    const cJSON *ob = cJSON_GetArraySize(objs) == 1 ? cJSON_GetArrayItem(objs, 0) : NULL;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(ob, "objective");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(ob, "epsilon"), *b = cJSON_GetObjectItemCaseSensitive(ob, "beta");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ob, "temperature");
    if (objs == NULL) {
        snprintf(err, errlen, "%s: %s", path, why);
        s = LS_ERR_FORMAT;
    } else if (!cJSON_IsString(n) || strcmp(n->valuestring, a->objective) != 0 || !cJSON_IsNumber(e) ||
               !cJSON_IsNumber(b) || !cJSON_IsNumber(t) || e->valuedouble != a->epsilon ||
               b->valuedouble != a->beta || t->valuedouble != a->temperature) {
        char *got = cJSON_PrintUnformatted(objs);
        snprintf(err, errlen, "%s: the run recorded the objective %.200s; the adapter %s pins %s epsilon %.17g beta "
                 "%.17g temperature %.17g (its args must set them)", path, got ? got : "?", a->path, a->objective,
                 a->epsilon, a->beta, a->temperature);
        free(got);
        s = LS_ERR_FORMAT;
    }
    cJSON_Delete(objs);
    cJSON_Delete(doc);
    return s;
}

ls_status ls_parity_adapter_dp_pinned(const char *run_dir, int dp, char *err, size_t errlen) {
    char path[LS_PARITY_PATH];
    snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE);
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(path, 1u << 24, &doc, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "predicate"), "config");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "dp_ranks");
    if (v != NULL && !(cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 &&
                       v->valuedouble == (double)(int)v->valuedouble)) {
        snprintf(err, errlen, "%s: field 'predicate.config.dp_ranks' is not an integer >= 1", path);
        s = LS_ERR_FORMAT;
    } else if ((v ? (int)v->valuedouble : 1) != (dp > 1 ? dp : 1)) {
        snprintf(err, errlen, "%s: the run was launched at DP %d ({dp}) and its configuration records dp_ranks %s%d: "
                 "the trainer did not run the DP size asked", path, dp > 1 ? dp : 1, v ? "" : "(absent) ",
                 v ? (int)v->valuedouble : 1);
        s = LS_ERR_FORMAT;
    }
    cJSON_Delete(doc);
    return s;
}

/* Runs the specs in one pool; each must exit 0; its files are read. */
static ls_status run_specs(arun *r, spec *sp, size_t n, const char *part) {
    ls_parity_job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (jobs == NULL) return LS_ERR_NOMEM;
    ls_status s = LS_OK;
    double t0 = ls_parity_now();
    size_t made = 0;
    for (; made < n && s == LS_OK; made++) s = make_job(r, &sp[made], &jobs[made]);
    if (s == LS_OK) s = ls_parity_jobs_run(jobs, n, r->o->jobs, r->o->timeout_s, r->err, r->errlen);
    for (size_t i = 0; i < n && s == LS_OK; i++) {
        run_out *d = sp[i].dst;
        if (jobs[i].rc != 0) {
            snprintf(r->err, r->errlen, "%s: mode %s run %s exited %d%s (its output: %s)", r->a->name, sp[i].mode,
                     d->label, jobs[i].rc, jobs[i].rc == 137 ? " (killed: --timeout?)" : "", jobs[i].log);
            s = LS_ERR_FORMAT;
            break;
        }
        d->ran = true;
        if (strcmp(sp[i].mode, "init") == 0) {
            ls_parity_tensors w;
            if ((s = ls_parity_tensors_read(r->weights, &w, r->err, r->errlen)) == LS_OK && w.n == 0) {
                snprintf(r->err, r->errlen, "%s: the init run wrote no tensor", r->weights);
                s = LS_ERR_FORMAT;
            }
            ls_parity_tensors_free(&w);
            continue;
        }
        if (sp[i].batch == r->batch_score) { /* the reference's scoring: log-probs only */
            char p[LS_PARITY_PATH];
            snprintf(p, sizeof p, "%s/logprobs.safetensors", d->out);
            s = read_logprobs(r, p, &d->lp, r->err, r->errlen);
            continue;
        }
        if ((s = read_out(r, d, !d->is_ref)) != LS_OK) break;
        if (d->is_ref) continue;
        char run[LS_PARITY_PATH];
        snprintf(run, sizeof run, "%s/run", d->out);
        if ((s = ls_parity_report_build(r->rep, run, r->err, r->errlen)) != LS_OK) break;
        if ((s = ls_parity_adapter_dp_pinned(run, sp[i].dp, r->err, r->errlen)) != LS_OK) break;
        if (sp[i].fault == NULL) s = ls_parity_adapter_objective_pinned(r->a, run, r->err, r->errlen);
    }
    if (s == LS_OK) {
        ls_parity_report_timing(r->rep, part, ls_parity_now() - t0, (int)n);
        if (!r->o->quiet) fprintf(stderr, "longstraw-parity: %s %s: %zu runs, %.1f s\n", r->a->name, part, n, ls_parity_now() - t0);
    }
    for (size_t i = 0; i < made; i++) ls_parity_job_free(&jobs[i]);
    free(jobs);
    return s;
}

/* ---- checks --------------------------------------------------------------------- */

/* a's tensors against b's over want's names, and a's tensor set equal to want's in size */
static cJSON *tensors(const ls_parity_tensors *want, const ls_parity_tensors *a, const ls_parity_tensors *b,
                      const ls_parity_tensors *nfa, const ls_parity_tensors *nfb) {
    cJSON *arr = ls_parity_tensor_entries(want, a, b, nfa, nfb, NULL, NULL);
    if (a->n != want->n) {
        char what[96];
        snprintf(what, sizeof what, "tensor count (%zu, the reference's %zu)", a->n, want->n);
        cJSON_AddItemToArray(arr, ls_parity_entry(what, (ls_parity_err){INFINITY, INFINITY}, LS_PARITY_F64_TOL, -1));
    }
    return arr;
}

/* One check of the run at CP size cp and DP size dp (1: none), world cp x dp: "KIND CONFIG DTYPE cpN[ dpD][ EXTRA]". */
static void add(arun *r, const char *kind, int dt, int cp, int dp, const char *gm, const char *refn, const char *cand,
                const char *extra, cJSON *entries, const char *key, const char *control) {
    char name[256], at[32];
    if (dp > 1) snprintf(at, sizeof at, "cp%d dp%d", cp, dp);
    else snprintf(at, sizeof at, "cp%d", cp);
    snprintf(name, sizeof name, "%s %s %s %s%s%s", kind, r->config, ls_parity_dtype_name(dt), at, extra ? " " : "",
             extra ? extra : "");
    cJSON *c = ls_parity_check_dp(ls_parity_check_new(kind, name, dt, cp * dp, r->config, gm, refn, cand, entries, key),
                                  dp);
    if (control) ls_parity_report_control(r->rep, control, c);
    else ls_parity_report_add(r->rep, c);
}

static int k1_of(const arun *r) {
    for (size_t k = 0; k < r->o->n_cps; k++)
        if (r->o->cps[k] == 1) return (int)k;
    return 0;
}

bool ls_parity_adapter_dp_fits(const ls_parity_opts *o, size_t e, size_t k) {
    return e >= 1 && e < o->n_dps && k < o->n_cps && o->cps[k] * o->dps[e] <= LS_PARITY_MAX_CP &&
           (o->dp_cp == 0 || o->cps[k] == o->dp_cp);
}

/* One comparison of run x of kind `kind` (at CP size cp, DP size dp, grad mode m, dtype dt), as a check or a
 * control; same_cp: the DP-1 run of x's CP size, dtype and mode (dp_grad's reference). */
static void compare(arun *r, const char *kind, int dt, int cp, int dp, int m, run_out *x, const run_out *same_cp,
                    const char *extra, const char *control) {
    const bool f32 = dt == LS_PARITY_F32;
    run_out *c1 = &r->mode_run[dt][m][k1_of(r)], *c1_64 = &r->mode_run[LS_PARITY_F64][m][k1_of(r)];
    run_out *f1 = &r->mode_run[dt][FULL][k1_of(r)], *f1_64 = &r->mode_run[LS_PARITY_F64][FULL][k1_of(r)];
    const ls_parity_tensors *want = &r->ref.g;
    char cand[160], refn[160], at[32];
    if (dp > 1) snprintf(at, sizeof at, "cp%d dp%d", cp, dp);
    else snprintf(at, sizeof at, "cp%d", cp);
    snprintf(cand, sizeof cand, "%s %s %s%s%s", r->a->name, at, GMODE[m], control ? " --fault " : "",
             control && strcmp(control, "detached") ? control : "");
    if (!strcmp(kind, "logprob") || !strcmp(kind, "ref_logprob")) {
        double nf = f32 ? ls_parity_logprob_noise(&f1->lp, &f1_64->lp) : -1, tol = f32 ? ls_parity_f32_tol(nf) : LS_PARITY_F64_TOL;
        add(r, kind, dt, cp, dp, NULL, "the adapter's reference (float64)", cand, extra,
            ls_parity_members_entries(&x->lp, &r->ref.lp, tol, nf), "members", control);
    } else if (!strcmp(kind, "cp_grad")) {
        snprintf(refn, sizeof refn, "%s cp1 %s", r->a->name, GMODE[m]);
        add(r, kind, dt, cp, dp, GMODE[m], refn, cand, extra,
            tensors(want, &x->g, &c1->g, f32 ? &c1->g : NULL, f32 ? &c1_64->g : NULL), "tensors", control);
    } else if (!strcmp(kind, "dp_grad")) {
        /* the replicas' averaged gradient against the one process group's at the same CP size, at cp_grad's
           tolerance (float32: CP-1's float32-vs-float64 noise floor) */
        if (same_cp == NULL) return;
        snprintf(refn, sizeof refn, "%s cp%d %s (DP 1)", r->a->name, cp, GMODE[m]);
        add(r, kind, dt, cp, dp, GMODE[m], refn, cand, extra,
            tensors(want, &x->g, &same_cp->g, f32 ? &c1->g : NULL, f32 ? &c1_64->g : NULL), "tensors", control);
    } else if (!strcmp(kind, "cp_params")) {
        snprintf(refn, sizeof refn, "%s cp1 %s", r->a->name, GMODE[m]);
        add(r, kind, dt, cp, dp, GMODE[m], refn, cand, extra,
            ls_parity_params_entries(want, &x->p, &c1->p, &x->g, &c1->g, r->a->adamw ? &r->a->opt : NULL, dt),
            "tensors", control);
    } else if (!strcmp(kind, "grad")) {
        add(r, kind, dt, cp, dp, GMODE[m], "the adapter's reference (float64)", cand, extra,
            tensors(want, &x->g, &r->ref.g, f32 ? &f1->g : NULL, f32 ? &f1_64->g : NULL), "tensors", control);
    } else { /* ref_loss */
        ls_parity_err e = {fabs(x->loss - r->ref.loss), 0};
        e.max_rel = r->ref.loss != 0 ? e.max_abs / fabs(r->ref.loss) : e.max_abs;
        double tol = LS_PARITY_F64_TOL;
        if (f32) { /* float32's floor: its CP-1 loss against float64's */
            double nf = fabs(f1->loss - f1_64->loss) / (f1_64->loss != 0 ? fabs(f1_64->loss) : 1);
            tol = ls_parity_f32_tol(nf);
        }
        cJSON *arr = cJSON_CreateArray();
        cJSON_AddItemToArray(arr, ls_parity_entry("loss", e, tol, -1));
        add(r, kind, dt, cp, dp, NULL, "the adapter's reference (float64)", cand, extra, arr, "members", control);
    }
}

/* The DP runs' checks (dtype dt): each compared as a CP run, tagged with its DP size, and its gradient against
 * the DP-1 run of its CP size (dp_grad), which the dp_grad controls must fail. */
static void dp_checks(arun *r, int dt) {
    const ls_parity_opts *o = r->o;
    if (!o->dp_dtype[dt] || !o->dtype[dt]) return;
    for (size_t e = 1; e < o->n_dps; e++)
        for (size_t k = 0; k < o->n_cps; k++) {
            if (!ls_parity_adapter_dp_fits(o, e, k)) continue;
            int c = o->cps[k], D = o->dps[e];
            run_out *full = &r->dp_run[dt][FULL][e][k];
            compare(r, "logprob", dt, c, D, FULL, full, NULL, NULL, NULL);
            if (dt == LS_PARITY_F64) {
                compare(r, "ref_logprob", dt, c, D, FULL, full, NULL, NULL, NULL);
                compare(r, "ref_loss", dt, c, D, FULL, full, NULL, NULL, NULL);
            }
            compare(r, "grad", dt, c, D, FULL, full, NULL, "full", NULL);
            for (int m = o->dp_detached ? DET : FULL; m <= FULL; m++) {
                run_out *x = &r->dp_run[dt][m][e][k];
                compare(r, "cp_grad", dt, c, D, m, x, NULL, GMODE[m], NULL);
                compare(r, "cp_params", dt, c, D, m, x, NULL, GMODE[m], NULL);
                compare(r, "dp_grad", dt, c, D, m, x, &r->mode_run[dt][m][k], GMODE[m], NULL);
            }
            for (size_t ci = 0; ci < r->a->n_controls; ci++) {
                const ls_parity_adapter_control *ct = &r->a->controls[ci];
                run_out *x = &r->dp_ctl[dt][ci][e][k];
                if (strcmp(ct->kind, "dp_grad") != 0 || !x->ran) continue;
                compare(r, "dp_grad", dt, c, D, FULL, x, &r->mode_run[dt][FULL][k], ct->fault, ct->fault);
            }
        }
}

static void checks(arun *r, int dt) {
    const ls_parity_opts *o = r->o;
    for (size_t k = 0; k < o->n_cps; k++) {
        int w = o->cps[k];
        run_out *full = &r->mode_run[dt][FULL][k], *det = &r->mode_run[dt][DET][k];
        compare(r, "logprob", dt, w, 1, FULL, full, NULL, NULL, NULL);
        if (dt == LS_PARITY_F64) {
            compare(r, "ref_logprob", dt, w, 1, FULL, full, NULL, NULL, NULL);
            compare(r, "ref_loss", dt, w, 1, FULL, full, NULL, NULL, NULL);
        }
        compare(r, "grad", dt, w, 1, FULL, full, NULL, "full", NULL);
        if (w > 1) {
            for (int m = 0; m < 2; m++) {
                run_out *x = m == FULL ? full : det;
                compare(r, "cp_grad", dt, w, 1, m, x, NULL, GMODE[m], NULL);
                compare(r, "cp_params", dt, w, 1, m, x, NULL, GMODE[m], NULL);
            }
            compare(r, "grad", dt, w, 1, DET, det, NULL, "detached", "detached");
        }
    }
    for (size_t c = 0; c < r->a->n_controls; c++) {
        const ls_parity_adapter_control *ct = &r->a->controls[c];
        if (!strcmp(ct->kind, "ref_loss") && dt != LS_PARITY_F64) continue;
        if (!strcmp(ct->kind, "dp_grad")) continue; /* at the DP sizes > 1 only (dp_checks) */
        for (size_t k = 0; k <= LS_PARITY_MAX_CP; k++) {
            run_out *x = &r->ctl[dt][c][k];
            if (!x->ran) continue;
            int w = k == LS_PARITY_MAX_CP ? ct->cp : o->cps[k < LS_PARITY_MAX_CP ? k : 0];
            compare(r, ct->kind, dt, w, 1, FULL, x, NULL, ct->fault, ct->fault);
        }
    }
    dp_checks(r, dt);
}

/* ---- the driver ------------------------------------------------------------------- */

static size_t matrix_specs(arun *r, spec *sp) {
    const ls_parity_opts *o = r->o;
    size_t n = 0;
    sp[n++] = (spec){.mode = "reference", .dt = LS_PARITY_F64, .cp = 1, .batch = r->batch_grad, .dst = &r->ref};
    snprintf(r->ref.label, sizeof r->ref.label, "reference");
    for (int dt = 0; dt < 2; dt++) {
        if (!o->dtype[dt]) continue;
        for (size_t k = 0; k < o->n_cps; k++)
            for (int m = 0; m < 2; m++) {
                run_out *d = &r->mode_run[dt][m][k];
                snprintf(d->label, sizeof d->label, "%s/cp%d-%s", ls_parity_dtype_name(dt), o->cps[k], GMODE[m]);
                sp[n++] = (spec){.mode = "run", .grad_mode = GMODE[m], .dt = dt, .cp = o->cps[k], .batch = r->batch_grad, .dst = d};
            }
        for (size_t c = 0; c < r->a->n_controls; c++) {
            const ls_parity_adapter_control *ct = &r->a->controls[c];
            if (!strcmp(ct->kind, "ref_loss") && dt != LS_PARITY_F64) continue;
            if (!strcmp(ct->kind, "dp_grad")) continue; /* below, at the DP sizes > 1 */
            for (size_t k = 0; k <= LS_PARITY_MAX_CP; k++) {
                int w = k == LS_PARITY_MAX_CP ? ct->cp : k < o->n_cps ? o->cps[k] : 0;
                if (ct->cp ? k != LS_PARITY_MAX_CP : (w <= 1 || k == LS_PARITY_MAX_CP)) continue;
                run_out *d = &r->ctl[dt][c][k];
                snprintf(d->label, sizeof d->label, "%s/cp%d-%s", ls_parity_dtype_name(dt), w, ct->fault);
                sp[n++] = (spec){.mode = "run", .grad_mode = "full", .fault = ct->fault, .dt = dt, .cp = w,
                                 .batch = r->batch_grad, .dst = d};
            }
        }
        /* the DP runs: full (and detached) at every (DP, CP) that fits, and the dp_grad controls there */
        if (!o->dp_dtype[dt]) continue;
        for (size_t e = 1; e < o->n_dps; e++)
            for (size_t k = 0; k < o->n_cps; k++) {
                if (!ls_parity_adapter_dp_fits(o, e, k)) continue;
                int c = o->cps[k], D = o->dps[e];
                for (int m = o->dp_detached ? DET : FULL; m <= FULL; m++) {
                    run_out *d = &r->dp_run[dt][m][e][k];
                    snprintf(d->label, sizeof d->label, "%s/cp%d-dp%d-%s", ls_parity_dtype_name(dt), c, D, GMODE[m]);
                    sp[n++] = (spec){.mode = "run", .grad_mode = GMODE[m], .dt = dt, .cp = c, .dp = D,
                                     .batch = r->batch_grad, .dst = d};
                }
                for (size_t ci = 0; ci < r->a->n_controls; ci++) {
                    const ls_parity_adapter_control *ct = &r->a->controls[ci];
                    if (strcmp(ct->kind, "dp_grad") != 0 || (ct->cp != 0 && ct->cp != c)) continue;
                    run_out *d = &r->dp_ctl[dt][ci][e][k];
                    snprintf(d->label, sizeof d->label, "%s/cp%d-dp%d-%s", ls_parity_dtype_name(dt), c, D, ct->fault);
                    sp[n++] = (spec){.mode = "run", .grad_mode = "full", .fault = ct->fault, .dt = dt, .cp = c,
                                     .dp = D, .batch = r->batch_grad, .dst = d};
                }
            }
    }
    return n;
}

static void free_all(arun *r) {
    for (int dt = 0; dt < 2; dt++) {
        for (int m = 0; m < 2; m++)
            for (int k = 0; k < LS_PARITY_MAX_CP; k++) {
                out_free(&r->mode_run[dt][m][k]);
                for (int e = 0; e < LS_PARITY_MAX_CP; e++) out_free(&r->dp_run[dt][m][e][k]);
            }
        for (int c = 0; c < LS_PARITY_ADAPTER_CONTROLS; c++) {
            for (int k = 0; k <= LS_PARITY_MAX_CP; k++) out_free(&r->ctl[dt][c][k]);
            for (int e = 0; e < LS_PARITY_MAX_CP; e++)
                for (int k = 0; k < LS_PARITY_MAX_CP; k++) out_free(&r->dp_ctl[dt][c][e][k]);
        }
    }
    out_free(&r->ref);
    out_free(&r->ref_score);
    out_free(&r->init);
}

/* --like: what was taken from the run, its path, and each value of it no run of the report took (the
 * audit refuses the run then: like.uncovered) */
static void like_paths(arun *r) {
    const cJSON *x;
    cJSON_ArrayForEach(x, r->a->like_notes) ls_parity_report_note(r->rep, "%s", x->valuestring);
    if (r->o->like == NULL || r->o->like_paths == NULL) return;
    ls_parity_report_like_paths(r->rep, r->o->like_paths, false);
    const cJSON *have = ls_parity_report_paths(r->rep), *k, *v;
    cJSON_ArrayForEach(k, r->o->like_paths) {
        cJSON_ArrayForEach(v, k) {
            bool in = false;
            cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(have, k->string))
                in = in || (cJSON_IsString(x) && cJSON_IsString(v) && strcmp(x->valuestring, v->valuestring) == 0);
            if (!in)
                ls_parity_report_note(r->rep, "the run's path %s=%s: no run of this report took it, so the report does "
                                      "not cover the run (like.uncovered)", k->string,
                                      cJSON_IsString(v) ? v->valuestring : "?");
        }
    }
}

static ls_status matrix(arun *r) {
    const ls_parity_opts *o = r->o;
    const ls_parity_adapter *a = r->a;
    ls_status s;
    snprintf(r->dir, sizeof r->dir, "%s/runs/adapter", o->out);
    snprintf(r->weights, sizeof r->weights, "%s/init/weights.safetensors", r->dir);
    snprintf(r->batch_score, sizeof r->batch_score, "%s/batch-score.json", r->dir);
    snprintf(r->batch_grad, sizeof r->batch_grad, "%s/batch-grad.json", r->dir);
    snprintf(r->config, sizeof r->config, "p%d-g%d", a->prompt_len, a->group);
    if (ls_parity_mkdirs(r->dir) != 0) {
        snprintf(r->err, r->errlen, "cannot create %s: %s", r->dir, strerror(errno));
        return LS_ERR_IO;
    }
    char what[160];
    snprintf(what, sizeof what, "the adapter's batch: P=%d, G=%d, vocab %d, token seed %u", a->prompt_len, a->group,
             a->vocab, (unsigned)a->token_seed);
    ls_parity_report_batch(r->rep, r->config, what, a->prompt_len, a->group, a->response_lens);
    if ((s = write_batch(r, r->batch_score, NULL)) != LS_OK) return s;
    spec sp[MAX_RUNS];
    snprintf(r->init.label, sizeof r->init.label, "init");
    sp[0] = (spec){.mode = "init", .dt = LS_PARITY_F64, .cp = 1, .batch = r->batch_score, .dst = &r->init};
    if ((s = run_specs(r, sp, 1, "init (weights)")) != LS_OK) return s;
    snprintf(r->ref_score.label, sizeof r->ref_score.label, "reference-score");
    sp[0] = (spec){.mode = "reference", .dt = LS_PARITY_F64, .cp = 1, .batch = r->batch_score, .dst = &r->ref_score};
    if ((s = run_specs(r, sp, 1, "reference (the policy's log-probs)")) != LS_OK) return s;
    if ((s = write_batch(r, r->batch_grad, &r->ref_score.lp)) != LS_OK) return s;
    if ((s = run_specs(r, sp, matrix_specs(r, sp), "runs")) != LS_OK) return s;
    /* the finite differences of the loss: the trainer's float64 CP-1 full gradient and the reference's */
    cJSON *fd[2] = {NULL, NULL};
    int runs = 0;
    double t0 = ls_parity_now();
    s = ls_parity_adapter_fd(o, a, r->dir, r->weights, r->batch_grad, &r->mode_run[LS_PARITY_F64][FULL][k1_of(r)].g,
                             &r->ref.g, r->config, fd, &runs, r->err, r->errlen);
    if (s != LS_OK) return s;
    ls_parity_report_timing(r->rep, "finite differences (mode loss)", ls_parity_now() - t0, runs);
    ls_parity_report_add(r->rep, fd[0]);
    ls_parity_report_add(r->rep, fd[1]);
    for (int dt = 0; dt < 2; dt++)
        if (o->dtype[dt]) checks(r, dt);
    /* the trainer's own path: it samples, rewards and scores itself (batch.prompt_only) */
    if (a->prompt_only && (s = ls_parity_adapter_sampled(o, a, r->rep, r->dir, r->weights, r->err, r->errlen)) != LS_OK)
        return s;
    like_paths(r);
    return LS_OK;
}

ls_status ls_parity_adapter_run(const ls_parity_opts *o, const ls_parity_adapter *a, bool *all_pass, char *err,
                                size_t errlen) {
    *all_pass = false;
    for (size_t k = 0; k < o->n_cps; k++) {
        bool ok = false;
        for (size_t i = 0; i < a->n_cps; i++) ok = ok || a->cps[i] == o->cps[k];
        if (!ok) {
            snprintf(err, errlen, "--cp: %d is not one of the CP sizes the adapter %s supports (field 'cp')",
                     o->cps[k], a->path);
            return LS_ERR_ARG;
        }
    }
    if (o->dtype[LS_PARITY_F32] && !a->dtype[LS_PARITY_F32]) {
        snprintf(err, errlen, "--dtype: f32 is not one of the dtypes the adapter %s supports (field 'dtypes')", a->path);
        return LS_ERR_ARG;
    }
    /* the DP sizes: the adapter's, and each a divisor of the batch's group (a replica takes G / D members) */
    const char *dp_src = o->like ? "the --like run's dp_ranks" : "--dp";
    for (size_t e = 0; e < o->n_dps; e++) {
        bool ok = false;
        for (size_t i = 0; i < a->n_dps; i++) ok = ok || a->dps[i] == o->dps[e];
        if (!ok) {
            snprintf(err, errlen, "%s: %d is not one of the DP sizes the adapter %s supports (field 'dp'%s)", dp_src,
                     o->dps[e], a->path, cJSON_GetObjectItemCaseSensitive(a->doc, "dp") ? "" : " absent: DP 1 only");
            return LS_ERR_ARG;
        }
        if (o->dps[e] > 1 && a->group % o->dps[e] != 0) {
            snprintf(err, errlen, "%s: %d does not divide the %d responses of the adapter %s's batch (field "
                     "'batch.response_lens'): each of the DP %d replicas takes G / %d members", dp_src, o->dps[e],
                     a->group, a->path, o->dps[e], o->dps[e]);
            return LS_ERR_ARG;
        }
    }
    ls_parity_report *rep = NULL;
    ls_status s = ls_parity_report_begin(o, &rep, err, errlen);
    if (s != LS_OK) return s;
    const char *faults[LS_PARITY_ADAPTER_CONTROLS], *kinds[LS_PARITY_ADAPTER_CONTROLS];
    for (size_t i = 0; i < a->n_controls; i++) faults[i] = a->controls[i].fault, kinds[i] = a->controls[i].kind;
    ls_parity_report_adapter(rep, a->path, a->name, a->sha256, faults, kinds, a->n_controls);
    arun *r = calloc(1, sizeof *r);
    if (r == NULL) {
        ls_parity_report_free(rep);
        return LS_ERR_NOMEM;
    }
    *r = (arun){.o = o, .a = a, .rep = rep, .err = err, .errlen = errlen};
    double t0 = ls_parity_now();
    s = matrix(r);
    free_all(r);
    free(r);
    return ls_parity_report_end(rep, o, s, t0, all_pass, err, errlen);
}
