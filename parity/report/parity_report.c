/* parity_report.c - parity.json (schemas/parity.schema.json) and the table
 * on stdout (parity.h).
 *
 * A check's entries (tensors or members) each carry an error and their own
 * tolerance; the check passes when every entry does, and its max_rel_err
 * and tolerance are those of its worst entry (largest error / tolerance),
 * so that "pass" always reads as max_rel_err <= tolerance.  A control is a
 * fault run whose comparison must fail ("detected").  A level holds when
 * every kind of check it needs is present and passes, every control it
 * needs is present and detected, and the level below holds. */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parity/plan/parity.h"
#include "receipts/format/atomic_file.h"
#include "receipts/format/build_diff.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "receipts/schema/schema.h"

struct ls_parity_report {
    cJSON *doc, *checks, *controls, *configs, *timings, *notes;
    char build[65];
    char build_from[LS_PARITY_PATH];
    cJSON *build_obj; /* the first run's build object, as its manifest has it (the report's "build") */
    /* coverage (receipts/format/coverage.h): what the fault-free LongStraw runs recorded */
    cJSON *model;              /* the one model every run ran */
    bool model_v2;             /* its runs' configurations are v2 (docs/contract.md §2: config.model) */
    char model_from[LS_PARITY_PATH];
    cJSON *train_modes, *objectives, *grad_modes, *strategies, *dtypes, *worlds;
    cJSON *eps;   /* coverage.eps: the EP sizes (config ep_ranks, absent: 1) of the fault-free runs */
    cJSON *dps;   /* coverage.dps: the DP sizes (config dp_ranks, absent: 1) of the fault-free runs */
    bool dp_asked; /* the options asked a DP size > 1 (an adapter's --dp, or --like a DP run): dp_grad needed */
    cJSON *paths; /* coverage.paths: the union of the runs' recorded paths (ls_coverage_paths_add) */
    cJSON *like_paths;         /* the --like run's path (ls_parity_report_like_paths), NULL: none */
    bool like_paths_derived;
    /* controls a level needs beyond LongStraw's own (ls_parity_report_require_control) */
    char xctl[4][72];
    int xctl_level[4];
    size_t n_xctl;
    /* an adapter's report (ls_parity_report_adapter): its controls and the level of the check each breaks */
    bool adapter;
    char actl[LS_PARITY_ADAPTER_CONTROLS + 1][72];
    int actl_level[LS_PARITY_ADAPTER_CONTROLS + 1];
    bool actl_dp[LS_PARITY_ADAPTER_CONTROLS + 1]; /* breaks dp_grad: needed only when a DP size > 1 ran */
    size_t n_actl;
};

/* What each level needs (docs/design.md §5). */
static const struct {
    int level;
    const char *name;
    const char *kinds[3];
    const char *controls[2];
} LEVELS[] = {
    /* decisions: only a family whose forward decides (mla) has them, and then every level needs them,
     * through level 2: no comparison of compositions speaks across a near-tie */
    {2, "response-operator fidelity", {"decisions", "logprob", "ref_logprob"}, {"cp-local-attention", NULL}},
    /* dp_grad: only a report that ran a DP size > 1 (an adapter's) has them, and then level 3 needs them */
    {3, "distributed-update consistency", {"cp_grad", "cp_params", "dp_grad"}, {"skip-dkv-reduce", "skip-grad-finalize"}},
    {4, "full-gradient parity", {"grad", "fd_grad", "ref_loss"}, {"detached", NULL}},
};

/* The chain of proof: which links the checks establish. */
static const struct {
    const char *kind, *link;
} LINKS[] = {
    {"decisions", "decisions: every discrete decision of the fixtures (DSA top-k, MoE groups and experts) clears "
                  "the composition noise 64 times over, so no comparison spans a near-tie"},
    {"ref_logprob", "forward: the trainer's float64 log-probs equal the independent reference's "
                    "(tests/reference/, written from docs/model.md, no shared code)"},
    {"ref_loss", "loss: the trainer's float64 loss equals the independent reference's docs/model.md section 4 loss"},
    {"logprob", "forward: LongStraw CP-N response log-probs equal the naive full-sequence run's"},
    {"fd_grad", "gradient: the float64 gradient equals directional finite differences of the loss "
                "(Richardson-extrapolated central differences; depends on the forward only)"},
    {"grad", "gradient: the LongStraw full-mode CP-N gradient equals the naive full-sequence gradient"},
    {"cp_grad", "update: CP-N gradients equal CP-1 gradients"},
    {"cp_params", "update: CP-N parameters after the optimizer step equal CP-1 parameters"},
};

/* The same links of an adapter's report (parity_adapter_run.c): its modes, not LongStraw's runs. */
static const struct {
    const char *kind, *link;
} ADAPTER_LINKS[] = {
    {"ref_logprob", "forward: the trainer's float64 log-probs equal the adapter's independent reference's"},
    {"ref_loss", "loss: the trainer's float64 loss equals the adapter's reference's"},
    {"logprob", "forward: the trainer's CP-N response log-probs equal the reference's"},
    {"fd_grad", "gradient: the trainer's (and the reference's) float64 gradient equals directional finite "
                "differences of the loss (mode loss, Richardson-extrapolated central differences)"},
    {"grad", "gradient: the trainer's full-mode CP-N gradient equals the reference's"},
    {"cp_grad", "update: CP-N gradients equal CP-1 gradients"},
    {"cp_params", "update: CP-N parameters after the optimizer step equal CP-1 parameters"},
    {"dp_grad", "update: DP-D gradients (the replicas' average) equal the DP-1 gradients of the same CP size"},
};

static const char *str(const cJSON *o, const char *k);

static double finite_or_max(double v) { return isfinite(v) ? v : DBL_MAX; }

static void add_num(cJSON *o, const char *k, double v) {
    cJSON *n = cJSON_CreateNumber(finite_or_max(v)); /* cJSON prints doubles round-trip exact */
    if (n) cJSON_AddItemToObject(o, k, n);
}

ls_status ls_parity_report_new(const ls_parity_opts *o, ls_parity_report **out) {
    ls_parity_report *r = calloc(1, sizeof *r);
    if (r == NULL) return LS_ERR_NOMEM;
    r->doc = cJSON_CreateObject();
    if (r->doc == NULL) {
        free(r);
        return LS_ERR_NOMEM;
    }
    cJSON_AddStringToObject(r->doc, "schema", "urn:longstraw:schema:parity:v3");
    cJSON_AddStringToObject(r->doc, "family", o->family);
    cJSON *d = cJSON_AddArrayToObject(r->doc, "dtypes");
    for (int k = 0; k < 2; k++)
        if (o->dtype[k]) cJSON_AddItemToArray(d, cJSON_CreateString(ls_parity_dtype_name(k)));
    cJSON *w = cJSON_AddArrayToObject(r->doc, "worlds");
    for (size_t i = 0; i < o->n_cps; i++) cJSON_AddItemToArray(w, cJSON_CreateNumber(o->cps[i]));
    if (o->n_eps > 1) { /* the EP sizes asked for (--eps, or the --like run's) */
        cJSON *e = cJSON_AddArrayToObject(r->doc, "eps");
        for (size_t i = 0; i < o->n_eps; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber(o->eps[i]));
    }
    if (o->n_dps > 1) { /* the DP sizes asked for (an adapter's --dp, or the --like run's) */
        cJSON *e = cJSON_AddArrayToObject(r->doc, "dps");
        for (size_t i = 0; i < o->n_dps; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber(o->dps[i]));
        r->dp_asked = true;
    }
    cJSON_AddStringToObject(r->doc, "trainer", o->trainer);
    cJSON_AddStringToObject(r->doc, "model_config", o->model_config);
    cJSON_AddStringToObject(r->doc, "run_environment", LS_PARITY_RUN_ENV);
    if (o->like) {
        cJSON *l = cJSON_AddObjectToObject(r->doc, "like");
        cJSON_AddStringToObject(l, "run", o->like);
        cJSON_AddStringToObject(l, "run_id", o->like_run_id);
    }
    add_num(r->doc, "fd_step", o->fd_step);
    cJSON_AddStringToObject(r->doc, "fd_groups", ls_parity_fd_groups_name(o->fd_groups));
    r->configs = cJSON_AddArrayToObject(r->doc, "configurations");
    r->checks = cJSON_AddArrayToObject(r->doc, "checks");
    r->controls = cJSON_AddArrayToObject(r->doc, "controls");
    r->timings = cJSON_AddArrayToObject(r->doc, "timings");
    r->notes = cJSON_AddArrayToObject(r->doc, "notes");
    r->train_modes = cJSON_CreateArray();
    r->objectives = cJSON_CreateArray();
    r->grad_modes = cJSON_CreateArray();
    r->strategies = cJSON_CreateArray();
    r->dtypes = cJSON_CreateArray();
    r->worlds = cJSON_CreateArray();
    r->eps = cJSON_CreateArray();
    r->dps = cJSON_CreateArray();
    r->paths = cJSON_CreateObject();
    *out = r;
    if (!r->train_modes || !r->objectives || !r->grad_modes || !r->strategies || !r->dtypes || !r->worlds ||
        !r->eps || !r->dps || !r->paths) {
        ls_parity_report_free(r);
        *out = NULL;
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}

void ls_parity_report_free(ls_parity_report *r) {
    if (r == NULL) return;
    cJSON_Delete(r->model);
    cJSON_Delete(r->train_modes);
    cJSON_Delete(r->objectives);
    cJSON_Delete(r->grad_modes);
    cJSON_Delete(r->strategies);
    cJSON_Delete(r->dtypes);
    cJSON_Delete(r->worlds);
    cJSON_Delete(r->eps);
    cJSON_Delete(r->dps);
    cJSON_Delete(r->paths);
    cJSON_Delete(r->like_paths);
    cJSON_Delete(r->build_obj);
    cJSON_Delete(r->doc);
    free(r);
}

/* The coverage a run adds: a fault-free LongStraw run's model (one for the
 * whole report), trainable set, objectives, gradient mode, strategy, dtype,
 * CP size, EP size (ep_ranks; absent, as in a v2 run's: 1) and DP size
 * (dp_ranks, an adapter's trainer; absent: 1), as its manifest recorded them.  Control and reference
 * (naive) runs add nothing: the report proves nothing of their settings. */
static ls_status add_coverage(ls_parity_report *r, const char *run_dir, char *err, size_t errlen) {
    char path[LS_PARITY_PATH];
    snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE);
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(path, (size_t)1 << 24, &doc, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "predicate"), "config");
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(cfg, "faults");
    const char *strategy = str(cfg, "strategy");
    if (!cJSON_IsObject(cfg) || !cJSON_IsArray(faults)) {
        snprintf(err, errlen, "%s: no predicate.config with faults", path);
        cJSON_Delete(doc);
        return LS_ERR_FORMAT;
    }
    if (cJSON_GetArraySize(faults) > 0 || strcmp(strategy, "longstraw") != 0) {
        cJSON_Delete(doc);
        return LS_OK;
    }
    cJSON *model = ls_coverage_model(cfg);
    cJSON *tm = ls_coverage_train_mode(cfg, err, errlen);
    cJSON *objs = tm ? ls_coverage_objectives(cfg, err, errlen) : NULL;
    s = model && tm && objs ? LS_OK : LS_ERR_FORMAT;
    if (s == LS_OK && r->model == NULL) {
        r->model = model;
        r->model_v2 = ls_coverage_config_is_v2(cfg);
        model = NULL;
        snprintf(r->model_from, sizeof r->model_from, "%s", run_dir);
    } else if (s == LS_OK && !cJSON_Compare(r->model, model, true)) {
        snprintf(err, errlen, "%s ran another model than %s: one report covers one model", run_dir, r->model_from);
        s = LS_ERR_FORMAT;
    }
    const cJSON *o;
    if (s == LS_OK) s = ls_coverage_set_add(r->train_modes, tm);
    const cJSON *olist = s == LS_OK ? objs : NULL;
    cJSON_ArrayForEach(o, olist) {
        if (s == LS_OK) s = ls_coverage_set_add(r->objectives, o);
    }
    const char *keys[] = {"grad_mode", "strategy", "dtype", "cp_ranks"};
    cJSON *sets[] = {r->grad_modes, r->strategies, r->dtypes, r->worlds};
    for (size_t i = 0; s == LS_OK && i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[i]);
        if (v == NULL) {
            snprintf(err, errlen, "%s: predicate.config has no \"%s\"", path, keys[i]);
            s = LS_ERR_FORMAT;
        } else {
            s = ls_coverage_set_add(sets[i], v);
        }
    }
    const char *sizes[] = {"ep_ranks", "dp_ranks"};
    cJSON *size_sets[] = {r->eps, r->dps};
    for (size_t i = 0; s == LS_OK && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, sizes[i]);
        cJSON *one = v ? NULL : cJSON_CreateNumber(1);
        if (v != NULL && !(cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 &&
                           v->valuedouble == (double)(int)v->valuedouble)) {
            snprintf(err, errlen, "%s: predicate.config \"%s\" is not an integer >= 1", path, sizes[i]);
            s = LS_ERR_FORMAT;
        } else {
            s = ls_coverage_set_add(size_sets[i], v ? v : one);
        }
        cJSON_Delete(one);
    }
    if (s == LS_OK && ls_coverage_paths_add(r->paths, cfg, err, errlen) != LS_OK) s = LS_ERR_FORMAT;
    if (s == LS_ERR_FORMAT && err[0] && strncmp(err, path, strlen(path)) != 0 && strstr(err, run_dir) == NULL) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "%s: %s", path, why);
    }
    cJSON_Delete(model);
    cJSON_Delete(tm);
    cJSON_Delete(objs);
    cJSON_Delete(doc);
    return s;
}

ls_status ls_parity_report_build(ls_parity_report *r, const char *run_dir, char *err, size_t errlen) {
    char hex[65];
    cJSON *b = NULL;
    ls_status s = ls_parity_run_build(run_dir, hex, &b, err, errlen);
    if (s == LS_OK) s = add_coverage(r, run_dir, err, errlen);
    if (s != LS_OK) {
        cJSON_Delete(b);
        return s;
    }
    if (r->build[0] == 0) {
        memcpy(r->build, hex, sizeof hex);
        snprintf(r->build_from, sizeof r->build_from, "%s", run_dir);
        r->build_obj = b; /* the report records the build it ran, not only its digest */
        return LS_OK;
    }
    if (strcmp(r->build, hex) != 0) {
        /* what differs, in words (the two build objects as the manifests have them) */
        ls_build_diff d;
        char why[600] = "";
        if (ls_build_diff_compare(r->build_obj, b, "the first run", "this run", &d) > 0) {
            char lines[560];
            ls_build_diff_join(&d, 0, 3, true, lines, sizeof lines);
            snprintf(why, sizeof why, " (%s)", lines);
        }
        snprintf(err, errlen, "%s (this run) ran build %.64s, %s (the first run) ran build %.64s: one report is one "
                 "build%s", run_dir, hex, r->build_from, r->build, why);
        s = LS_ERR_FORMAT;
    }
    cJSON_Delete(b);
    return s;
}

int ls_parity_kind_level(const char *kind) {
    for (size_t li = 0; kind && li < sizeof LEVELS / sizeof LEVELS[0]; li++)
        for (int k = 0; k < 3 && LEVELS[li].kinds[k]; k++)
            if (strcmp(LEVELS[li].kinds[k], kind) == 0) return LEVELS[li].level;
    return 0;
}

void ls_parity_report_adapter(ls_parity_report *r, const char *file, const char *name, const char *sha256,
                              const char *const *faults, const char *const *kinds, size_t n) {
    r->adapter = true;
    cJSON *a = cJSON_AddObjectToObject(r->doc, "adapter");
    cJSON_AddStringToObject(a, "file", file);
    cJSON_AddStringToObject(a, "name", name);
    cJSON_AddStringToObject(a, "sha256", sha256);
    r->n_actl = 0;
    for (size_t i = 0; i < n && i < LS_PARITY_ADAPTER_CONTROLS; i++) {
        snprintf(r->actl[r->n_actl], sizeof r->actl[0], "%s", faults[i]);
        r->actl_dp[r->n_actl] = strcmp(kinds[i], "dp_grad") == 0;
        r->actl_level[r->n_actl++] = ls_parity_kind_level(kinds[i]);
    }
    snprintf(r->actl[r->n_actl], sizeof r->actl[0], "detached"); /* the detached-mode runs must fail grad */
    r->actl_dp[r->n_actl] = false;
    r->actl_level[r->n_actl++] = 4;
}

void ls_parity_report_batch(ls_parity_report *r, const char *name, const char *what, int prompt_len, int group,
                            const int *response_lens) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "what", what);
    cJSON_AddNumberToObject(o, "prompt_len", prompt_len);
    cJSON_AddNumberToObject(o, "group", group);
    cJSON *rl = cJSON_AddArrayToObject(o, "response_lens");
    for (int i = 0; i < group; i++) cJSON_AddItemToArray(rl, cJSON_CreateNumber(response_lens[i]));
    cJSON_AddItemToArray(r->configs, o);
}

static cJSON *config_entry(ls_parity_report *r, const ls_parity_config *c, const char *train_mode) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "what", c->what);
    cJSON_AddNumberToObject(o, "prompt_len", c->prompt_len);
    cJSON_AddNumberToObject(o, "group", c->group);
    cJSON *rl = cJSON_AddArrayToObject(o, "response_lens");
    for (int i = 0; i < c->group; i++) cJSON_AddItemToArray(rl, cJSON_CreateNumber(c->response_lens[i]));
    cJSON_AddStringToObject(o, "train_mode", train_mode ? train_mode : c->train_mode);
    cJSON_AddNumberToObject(o, "page_size", c->page_size);
    cJSON_AddNumberToObject(o, "capture_chunk", c->capture_chunk);
    cJSON_AddItemToArray(r->configs, o);
    return o;
}

void ls_parity_report_config(ls_parity_report *r, const ls_parity_config *c, const char *train_mode) {
    config_entry(r, c, train_mode);
}

void ls_parity_report_path_config(ls_parity_report *r, const ls_parity_config *c, const char *train_mode,
                                  int prompts_per_step, const cJSON *path) {
    cJSON *o = config_entry(r, c, train_mode);
    cJSON_AddNumberToObject(o, "prompts_per_step", prompts_per_step);
    cJSON_AddItemToObject(o, "path", cJSON_Duplicate(path, true));
}

void ls_parity_report_require_control(ls_parity_report *r, const char *fault, int level) {
    for (size_t i = 0; i < r->n_xctl; i++)
        if (strcmp(r->xctl[i], fault) == 0) return;
    if (r->n_xctl >= sizeof r->xctl / sizeof r->xctl[0]) return;
    snprintf(r->xctl[r->n_xctl], sizeof r->xctl[0], "%s", fault);
    r->xctl_level[r->n_xctl++] = level;
}

const cJSON *ls_parity_report_paths(const ls_parity_report *r) { return r->paths; }

void ls_parity_report_like_paths(ls_parity_report *r, const cJSON *run_paths, bool derived) {
    cJSON_Delete(r->like_paths);
    r->like_paths = cJSON_Duplicate(run_paths, true);
    r->like_paths_derived = derived;
}

cJSON *ls_parity_entry(const char *name, ls_parity_err e, double tol, double noise_floor) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON_AddStringToObject(o, "name", name);
    add_num(o, "max_abs_err", e.max_abs);
    add_num(o, "max_rel_err", e.max_rel);
    add_num(o, "tolerance", tol);
    if (noise_floor >= 0) add_num(o, "noise_floor", noise_floor);
    cJSON_AddBoolToObject(o, "pass", e.max_rel <= tol);
    return o;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

cJSON *ls_parity_check_new(const char *kind, const char *name, int dtype, int world, const char *config,
                           const char *grad_mode, const char *reference, const char *candidate, cJSON *entries,
                           const char *entries_key) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "kind", kind);
    cJSON_AddStringToObject(c, "dtype", ls_parity_dtype_name(dtype));
    cJSON_AddNumberToObject(c, "world", world);
    cJSON_AddStringToObject(c, "configuration", config);
    if (grad_mode) cJSON_AddStringToObject(c, "grad_mode", grad_mode);
    cJSON_AddStringToObject(c, "reference", reference);
    cJSON_AddStringToObject(c, "candidate", candidate);
    double max_abs = 0, worst_ratio = -1, worst_rel = 0, worst_tol = 1;
    const char *worst = "";
    bool pass = entries != NULL && cJSON_GetArraySize(entries) > 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        double a = num(e, "max_abs_err"), rel = num(e, "max_rel_err"), tol = num(e, "tolerance");
        if (a > max_abs) max_abs = a;
        double ratio = rel / tol;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst_rel = rel;
            worst_tol = tol;
            worst = str(e, "name");
        }
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "pass"))) pass = false;
    }
    add_num(c, "max_abs_err", max_abs);
    add_num(c, "max_rel_err", worst_rel);
    add_num(c, "tolerance", worst_tol);
    cJSON_AddStringToObject(c, "worst", worst);
    cJSON_AddBoolToObject(c, "pass", pass);
    if (entries) cJSON_AddItemToObject(c, entries_key, entries);
    return c;
}

cJSON *ls_parity_check_ep(cJSON *check, int ep) {
    if (check != NULL && ep > 1) cJSON_AddNumberToObject(check, "ep", ep);
    return check;
}

cJSON *ls_parity_check_dp(cJSON *check, int dp) {
    if (check != NULL && dp > 1) cJSON_AddNumberToObject(check, "dp", dp);
    return check;
}

void ls_parity_report_add(ls_parity_report *r, cJSON *check) { cJSON_AddItemToArray(r->checks, check); }

void ls_parity_report_control(ls_parity_report *r, const char *fault, cJSON *check) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "fault", fault);
    cJSON_AddStringToObject(o, "breaks", str(check, "kind"));
    cJSON_AddStringToObject(o, "dtype", str(check, "dtype"));
    cJSON_AddNumberToObject(o, "world", num(check, "world"));
    if (num(check, "ep") > 1) cJSON_AddNumberToObject(o, "ep", num(check, "ep"));
    if (num(check, "dp") > 1) cJSON_AddNumberToObject(o, "dp", num(check, "dp"));
    cJSON_AddStringToObject(o, "configuration", str(check, "configuration"));
    cJSON_AddStringToObject(o, "check", str(check, "name"));
    add_num(o, "max_rel_err", num(check, "max_rel_err"));
    add_num(o, "tolerance", num(check, "tolerance"));
    cJSON_AddBoolToObject(o, "detected", !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(check, "pass")));
    cJSON_AddItemToObject(o, "comparison", check);
    cJSON_AddItemToArray(r->controls, o);
}

void ls_parity_report_timing(ls_parity_report *r, const char *part, double secs, int runs) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "part", part);
    add_num(o, "seconds", secs);
    cJSON_AddNumberToObject(o, "runs", runs);
    cJSON_AddItemToArray(r->timings, o);
}

void ls_parity_report_total(ls_parity_report *r, double secs) {
    double runs = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, r->timings) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "runs");
        if (cJSON_IsNumber(n)) runs += n->valuedouble;
    }
    ls_parity_report_timing(r, "total", secs, (int)runs);
}

void ls_parity_report_note(ls_parity_report *r, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cJSON_AddItemToArray(r->notes, cJSON_CreateString(buf));
}

/* Whether checks of kind must exist for the report's family: "decisions"
 * only where the forward makes discrete decisions (mla); "dp_grad" only
 * where the report ran a DP size > 1 (an adapter's). */
static bool kind_applies(const ls_parity_report *r, const char *kind) {
    if (strcmp(kind, "dp_grad") == 0) return r->dp_asked;
    if (r->adapter) return strcmp(kind, "decisions") != 0; /* an adapter states no decision margins */
    if (strcmp(kind, "decisions") != 0) return true;
    const ls_parity_family *f = ls_parity_family_of(str(r->doc, "family"));
    return f && f->decisions;
}

/* Control k of level li for the report's family: level 2's operator control (LEVELS names
 * cp-local-attention) is the family's score fault (its parity facts: cp-local-dsa, each rank's own DSA
 * top-k, for a sparse-attention family). */
static const char *level_control(const ls_parity_report *r, size_t li, int k) {
    const char *c = LEVELS[li].controls[k];
    const ls_parity_family *f = ls_parity_family_of(str(r->doc, "family"));
    if (c && strcmp(c, "cp-local-attention") == 0 && f) return f->score_fault;
    return c;
}

/* The verdict of one level (below: the level under it holds). */
static cJSON *level_verdict(ls_parity_report *r, size_t li, bool below, bool *holds) {
    cJSON *o = cJSON_CreateObject(), *failed = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "level", LEVELS[li].level);
    cJSON_AddStringToObject(o, "name", LEVELS[li].name);
    bool ok = below;
    int n_checks = 0, n_controls = 0;
    char why[512];
    for (int k = 0; k < 3 && LEVELS[li].kinds[k]; k++) {
        if (!kind_applies(r, LEVELS[li].kinds[k])) continue;
        int seen = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, r->checks) {
            if (strcmp(str(c, "kind"), LEVELS[li].kinds[k]) != 0) continue;
            seen++;
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"))) {
                ok = false;
                cJSON_AddItemToArray(failed, cJSON_CreateString(str(c, "name")));
            }
        }
        n_checks += seen;
        if (seen == 0) {
            ok = false;
            snprintf(why, sizeof why, "no %s check ran", LEVELS[li].kinds[k]);
            cJSON_AddItemToArray(failed, cJSON_CreateString(why));
        }
    }
    const char *ctls[LS_PARITY_ADAPTER_CONTROLS + 2 + 4];
    int nctl = 0;
    for (int k = 0; k < 2 && !r->adapter && LEVELS[li].controls[k]; k++) ctls[nctl++] = level_control(r, li, k);
    for (size_t k = 0; r->adapter && k < r->n_actl; k++) /* a DP control: only once a DP size > 1 ran */
        if (r->actl_level[k] == LEVELS[li].level && (!r->actl_dp[k] || r->dp_asked)) ctls[nctl++] = r->actl[k];
    for (size_t k = 0; !r->adapter && k < r->n_xctl; k++)
        if (r->xctl_level[k] == LEVELS[li].level) ctls[nctl++] = r->xctl[k];
    for (int k = 0; k < nctl; k++) {
        const char *ctl = ctls[k];
        int seen = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, r->controls) {
            if (strcmp(str(c, "fault"), ctl) != 0) continue;
            seen++;
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected"))) {
                ok = false;
                snprintf(why, sizeof why, "control %s (%s, world %.0f, %s) was not detected by %s",
                         ctl, str(c, "dtype"), num(c, "world"), str(c, "configuration"),
                         str(c, "check"));
                cJSON_AddItemToArray(failed, cJSON_CreateString(why));
            }
        }
        n_controls += seen;
        if (seen == 0) {
            ok = false;
            bool dp_ctl = false;
            for (size_t a = 0; r->adapter && a < r->n_actl; a++)
                dp_ctl = dp_ctl || (r->actl_dp[a] && !strcmp(r->actl[a], ctl));
            snprintf(why, sizeof why, "control %s did not run%s", ctl,
                     dp_ctl ? " (it needs a DP size > 1)" : strcmp(ctl, "detached") ? " (it needs a world > 1)" : "");
            cJSON_AddItemToArray(failed, cJSON_CreateString(why));
        }
    }
    if (!below) cJSON_AddItemToArray(failed, cJSON_CreateString("the level below does not hold"));
    cJSON_AddNumberToObject(o, "checks", n_checks);
    cJSON_AddNumberToObject(o, "controls", n_controls);
    cJSON_AddBoolToObject(o, "holds", ok);
    cJSON_AddItemToObject(o, "failed", failed);
    *holds = ok;
    return o;
}

static void print_table(const ls_parity_report *r) {
    printf("\nlongstraw-parity: build %.16s..., family %s\n", r->build, str(r->doc, "family"));
    printf("\n| check | kind | dtype | world | max rel err | tolerance | worst | verdict |\n");
    printf("|---|---|---|---:|---:|---:|---|---|\n");
    const cJSON *c;
    cJSON_ArrayForEach(c, r->checks)
        printf("| %s | %s | %s | %.0f | %.3g | %.3g | %s | %s |\n", str(c, "name"), str(c, "kind"), str(c, "dtype"),
               num(c, "world"), num(c, "max_rel_err"), num(c, "tolerance"), str(c, "worst"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass")) ? "pass" : "FAIL");
    printf("\n| control | breaks | dtype | world | configuration | max rel err | tolerance | detected |\n");
    printf("|---|---|---|---:|---|---:|---:|---|\n");
    cJSON_ArrayForEach(c, r->controls)
        printf("| %s | %s | %s | %.0f | %s | %.3g | %.3g | %s |\n", str(c, "fault"), str(c, "breaks"),
               str(c, "dtype"), num(c, "world"), str(c, "configuration"), num(c, "max_rel_err"),
               num(c, "tolerance"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected")) ? "yes" : "NO");
    printf("\n| link of the proof | checks | verdict |\n|---|---:|---|\n");
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r->doc, "links"))
        printf("| %s | %.0f | %s |\n", str(c, "link"), num(c, "checks"),
               num(c, "checks") == 0 ? "not checked" : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass")) ? "pass" : "FAIL");
    printf("\n| level | name | verdict |\n|---:|---|---|\n");
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r->doc, "levels")) {
        printf("| %.0f | %s | %s", num(c, "level"), str(c, "name"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "holds")) ? "holds" : "does NOT hold");
        const cJSON *f;
        int k = 0;
        cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(c, "failed")) {
            if (k++ < 3) printf("%s%s", k == 1 ? ": " : "; ", f->valuestring);
        }
        if (k > 3) printf("; and %d more", k - 3);
        printf(" |\n");
    }
    printf("\n| part | runs | seconds |\n|---|---:|---:|\n");
    cJSON_ArrayForEach(c, r->timings) printf("| %s | %.0f | %.1f |\n", str(c, "part"), num(c, "runs"), num(c, "seconds"));
}

ls_status ls_parity_report_finish(ls_parity_report *r, const char *path, bool print, bool *all_pass, char *err,
                                  size_t errlen) {
    if (r->build[0] == 0) {
        snprintf(err, errlen, "no trainer run completed: no build digest to name");
        return LS_ERR_FORMAT;
    }
    cJSON_AddStringToObject(r->doc, "build_digest", r->build);
    if (r->build_obj != NULL) { /* the first run's build object (schemas/parity.schema.json "build") */
        cJSON_AddItemToObject(r->doc, "build", r->build_obj);
        r->build_obj = NULL;
    }
    if (r->model == NULL) {
        snprintf(err, errlen, "no fault-free LongStraw run completed: the report would cover nothing");
        return LS_ERR_FORMAT;
    }
    /* what the report proves (receipts/format/coverage.h): the runs' own recorded settings */
    cJSON *cov = cJSON_AddObjectToObject(r->doc, "coverage");
    char msha[LS_DIGEST_HEX_SIZE];
    /* the digest the audit recomputes for runs like these (receipts/format/coverage.h: v2 models by RFC 8785) */
    ls_status ms = r->model_v2 ? ls_coverage_model_sha256_v2(r->model, msha, err, errlen)
                               : ls_coverage_model_sha256(r->model, msha, err, errlen);
    if (cov == NULL || ms != LS_OK) return cov == NULL ? LS_ERR_NOMEM : ms;
    cJSON_AddStringToObject(cov, "family", str(r->model, "family"));
    cJSON_AddItemToObject(cov, "model", r->model);
    cJSON_AddStringToObject(cov, "model_sha256", msha);
    cJSON_AddItemToObject(cov, "train_modes", r->train_modes);
    cJSON_AddItemToObject(cov, "objectives", r->objectives);
    cJSON_AddItemToObject(cov, "grad_modes", r->grad_modes);
    cJSON_AddItemToObject(cov, "strategies", r->strategies);
    cJSON_AddItemToObject(cov, "dtypes", r->dtypes);
    cJSON_AddItemToObject(cov, "worlds", r->worlds);
    /* the EP sizes, stated once a fault-free run of the report ran one > 1 (absent: EP 1 only, as the
     * reports before EP; the audit covers an EP-N run only with N here, receipts/format/coverage.c) */
    bool ep_any = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, r->eps) ep_any = ep_any || (cJSON_IsNumber(e) && e->valuedouble != 1);
    if (ep_any) {
        cJSON_AddItemToObject(cov, "eps", r->eps);
        r->eps = NULL;
    }
    /* the DP sizes alike (an adapter's trainer: config dp_ranks; absent: DP 1 only) */
    bool dp_any = false;
    cJSON_ArrayForEach(e, r->dps) dp_any = dp_any || (cJSON_IsNumber(e) && e->valuedouble != 1);
    if (dp_any) {
        cJSON_AddItemToObject(cov, "dps", r->dps);
        r->dps = NULL;
    }
    /* the --like run's path: the values of it no run of the report took (the audit refuses the run then) */
    cJSON *like = cJSON_GetObjectItemCaseSensitive(r->doc, "like");
    if (like != NULL && r->like_paths != NULL) {
        cJSON *un = cJSON_CreateArray();
        const cJSON *k, *v;
        cJSON_ArrayForEach(k, r->like_paths) {
            const cJSON *have = cJSON_GetObjectItemCaseSensitive(r->paths, k->string);
            cJSON_ArrayForEach(v, k) {
                bool in = false;
                const cJSON *x;
                cJSON_ArrayForEach(x, have) in = in || (cJSON_IsString(x) && cJSON_IsString(v) &&
                                                        strcmp(x->valuestring, v->valuestring) == 0);
                char kv[160];
                snprintf(kv, sizeof kv, "%s=%s", k->string, cJSON_IsString(v) ? v->valuestring : "?");
                if (!in) cJSON_AddItemToArray(un, cJSON_CreateString(kv));
            }
        }
        cJSON_AddItemToObject(like, "paths", r->like_paths);
        cJSON_AddStringToObject(like, "paths_source", r->like_paths_derived ? "derived" : "recorded");
        cJSON_AddItemToObject(like, "uncovered", un);
        r->like_paths = NULL;
    }
    cJSON_AddItemToObject(cov, "paths", r->paths);
    cJSON_AddStringToObject(cov, "build_digest", r->build);
    cJSON_AddStringToObject(cov, "reducible", "prompt, group and response lengths, page and capture-chunk sizes, "
                                              "steps, seed, optimizer settings, LoRA initialisation, sampling");
    r->model = r->train_modes = r->objectives = r->grad_modes = r->strategies = r->dtypes = r->worlds = r->paths = NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ls_json_add_u64(r->doc, "created_unix_ns", (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    cJSON *links = cJSON_AddArrayToObject(r->doc, "links");
    size_t n_links = r->adapter ? sizeof ADAPTER_LINKS / sizeof ADAPTER_LINKS[0] : sizeof LINKS / sizeof LINKS[0];
    for (size_t i = 0; i < n_links; i++) {
        const char *kind = r->adapter ? ADAPTER_LINKS[i].kind : LINKS[i].kind;
        const char *link = r->adapter ? ADAPTER_LINKS[i].link : LINKS[i].link;
        if (!kind_applies(r, kind)) continue; /* hybrid: no discrete decision to clear */
        int n = 0;
        bool pass = true;
        const cJSON *c;
        cJSON_ArrayForEach(c, r->checks) {
            if (strcmp(str(c, "kind"), kind) != 0) continue;
            n++;
            pass = pass && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"));
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", kind);
        cJSON_AddStringToObject(o, "link", link);
        cJSON_AddNumberToObject(o, "checks", n);
        cJSON_AddBoolToObject(o, "pass", n > 0 && pass);
        cJSON_AddItemToArray(links, o);
    }
    cJSON *levels = cJSON_AddArrayToObject(r->doc, "levels");
    bool below = true;
    for (size_t li = 0; li < sizeof LEVELS / sizeof LEVELS[0]; li++) {
        bool holds = false;
        cJSON_AddItemToArray(levels, level_verdict(r, li, below, &holds));
        below = holds;
    }
    bool controls_ok = cJSON_GetArraySize(r->controls) > 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, r->controls) controls_ok = controls_ok && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "detected"));
    *all_pass = below && controls_ok;
    cJSON_AddBoolToObject(r->doc, "pass", *all_pass);

    /* validated as a reader sees it: printed and parsed back (exact integers are raw text) */
    const ls_schema *sch = NULL;
    ls_schema_errors errs = {0};
    char *txt = cJSON_PrintUnformatted(r->doc);
    cJSON *back = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (back == NULL) return LS_ERR_NOMEM;
    ls_status s = ls_schema_get("parity", &sch, err, errlen);
    if (s == LS_OK && (s = ls_schema_validate(sch, back, &errs)) != LS_OK) {
        char first[512];
        ls_schema_errors_first(&errs, first, sizeof first);
        snprintf(err, errlen, "the report fails its own schema (a bug): %s", first);
    }
    ls_schema_errors_free(&errs);
    cJSON_Delete(back);
    if (s != LS_OK) return s;
    if (print) print_table(r);
    return ls_json_write_file(path, r->doc, err, errlen);
}

ls_status ls_parity_report_begin(const ls_parity_opts *o, ls_parity_report **out, char *err, size_t errlen) {
    *out = NULL;
    if (ls_parity_mkdirs(o->out) != 0) {
        snprintf(err, errlen, "--out %s: cannot create: %s", o->out, strerror(errno));
        return LS_ERR_IO;
    }
    return ls_parity_report_new(o, out);
}

ls_status ls_parity_report_end(ls_parity_report *r, const ls_parity_opts *o, ls_status s, double t0, bool *all_pass,
                               char *err, size_t errlen) {
    if (s == LS_OK) {
        ls_parity_report_total(r, ls_parity_now() - t0);
        char path[LS_PARITY_PATH];
        snprintf(path, sizeof path, "%s/parity.json", o->out);
        s = ls_parity_report_finish(r, path, !o->quiet, all_pass, err, errlen);
        if (s == LS_OK && !o->quiet) printf("\nlongstraw-parity: wrote %s: %s\n", path, *all_pass ? "PASS" : "FAIL");
    }
    ls_parity_report_free(r);
    return s;
}
