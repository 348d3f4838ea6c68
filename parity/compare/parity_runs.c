/* parity_runs.c - reading what a trainer run wrote (parity.h): gradients and
 * weights (safetensors), log-probs (--dump-batch), the exact loss (its
 * summary line) and the build digest (its manifest).  Every file is the
 * trainer's output, read with the same limits as any input. */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/plan/parity.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "trainer/base/safetensors.h"

#define MAX_BATCH_BYTES (64u << 20)
#define MAX_LOG_BYTES (16u << 20)

void ls_parity_tensors_free(ls_parity_tensors *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->name[i]);
        free(t->v[i]);
    }
    free(t->name);
    free(t->v);
    free(t->numel);
    free(t->shape);
    free(t->ndim);
    memset(t, 0, sizeof *t);
}

ls_status ls_parity_tensors_read(const char *path, ls_parity_tensors *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ls_safetensors *st = NULL;
    ls_status s = ls_safetensors_open(&st, path, err, errlen);
    if (s != LS_OK) return s;
    size_t n = ls_safetensors_count(st);
    out->name = calloc(n ? n : 1, sizeof *out->name);
    out->v = calloc(n ? n : 1, sizeof *out->v);
    out->numel = calloc(n ? n : 1, sizeof *out->numel);
    out->shape = calloc(n ? n : 1, sizeof *out->shape);
    out->ndim = calloc(n ? n : 1, sizeof *out->ndim);
    if (!out->name || !out->v || !out->numel || !out->shape || !out->ndim) {
        s = LS_ERR_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const ls_safetensors_tensor *t = ls_safetensors_at(st, i);
        if (t->ndim > 4) {
            snprintf(err, errlen, "%s: tensor %s has %zu dimensions (at most 4 expected)", path, t->name, t->ndim);
            s = LS_ERR_FORMAT;
            goto done;
        }
        out->name[i] = strdup(t->name);
        out->v[i] = malloc((t->numel ? t->numel : 1) * sizeof(double));
        out->n = i + 1;
        if (!out->name[i] || !out->v[i]) {
            s = LS_ERR_NOMEM;
            goto done;
        }
        if ((s = ls_safetensors_read_f64(t, out->v[i], t->numel)) != LS_OK) {
            snprintf(err, errlen, "%s: tensor %s: %s", path, t->name, ls_status_str(s));
            goto done;
        }
        out->numel[i] = t->numel;
        out->ndim[i] = t->ndim;
        for (size_t d = 0; d < t->ndim; d++) out->shape[i][d] = t->shape[d];
    }
done:
    ls_safetensors_free(st);
    if (s != LS_OK) ls_parity_tensors_free(out);
    return s;
}

long ls_parity_tensors_find(const ls_parity_tensors *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->name[i], name) == 0) return (long)i;
    return -1;
}

void ls_parity_logprobs_free(ls_parity_logprobs *l) {
    for (int i = 0; i < l->g; i++) free(l->lp[i]);
    memset(l, 0, sizeof *l);
}

ls_status ls_parity_json_logprobs(const cJSON *doc, const char *key, const char *where, ls_parity_logprobs *out,
                                  char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ls_status s = LS_OK;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, key);
    int g = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || g < 1 || g > LS_PARITY_MAX_G) {
        snprintf(err, errlen, "%s: field '%s': expected 1..%d members", where, key, LS_PARITY_MAX_G);
        return LS_ERR_FORMAT;
    }
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, a) {
        int len = cJSON_GetArraySize(m);
        if (!cJSON_IsArray(m) || len < 1 || len > 1 << 20) {
            snprintf(err, errlen, "%s: field '%s' member %d: not a non-empty array", where, key, i);
            s = LS_ERR_FORMAT;
            goto done;
        }
        out->lp[i] = malloc((size_t)len * sizeof(double));
        out->g = i + 1;
        if (out->lp[i] == NULL) {
            s = LS_ERR_NOMEM;
            goto done;
        }
        out->len[i] = len;
        int t = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, m) {
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
                snprintf(err, errlen, "%s: field '%s' member %d token %d: not a finite number", where, key, i, t);
                s = LS_ERR_FORMAT;
                goto done;
            }
            out->lp[i][t++] = x->valuedouble;
        }
        i++;
    }
done:
    if (s != LS_OK) ls_parity_logprobs_free(out);
    return s;
}

ls_status ls_parity_batch_logprobs(const char *path, bool ref, ls_parity_logprobs *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(path, MAX_BATCH_BYTES, &doc, err, errlen);
    if (s != LS_OK) return s;
    s = ls_parity_json_logprobs(doc, ref ? "ref_logprobs" : "old_logprobs", path, out, err, errlen);
    cJSON_Delete(doc);
    return s;
}

/* The one line of a trainer log that starts with key ("\n  ...") and that parse accepts (it reads the
 * rest of the line into out); form names the line in errors. */
static ls_status log_line(const char *log, const char *key, bool (*parse)(const char *rest, void *out), void *out,
                          const char *form, char *err, size_t errlen) {
    char *bytes = NULL;
    size_t len = 0;
    ls_status s = ls_json_read_bytes_capped(log, MAX_LOG_BYTES, &bytes, &len, err, errlen);
    if (s != LS_OK) return s;
    int found = 0;
    for (char *p = strstr(bytes, key); p != NULL; p = strstr(p + 1, key)) found += parse(p + strlen(key), out);
    free(bytes);
    if (found != 1) {
        snprintf(err, errlen, "%s: %d lines \"%s\", expected 1 (did the run fail?)", log, found, form);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

static bool parse_loss(const char *rest, void *out) {
    char *end = NULL;
    double v = strtod(rest, &end);
    if (end == rest || strncmp(end, " (last step)", 12) != 0 || !isfinite(v)) return false;
    *(double *)out = v;
    return true;
}

ls_status ls_parity_log_loss(const char *log, double *loss, char *err, size_t errlen) {
    return log_line(log, "\n  exact loss ", parse_loss, loss, "  exact loss X (last step)", err, errlen);
}

static bool parse_decisions(const char *rest, void *out) {
    unsigned long long c = 0, d = 0;
    int used = 0;
    if (sscanf(rest, "%llu digest %16llx (the run's, in order)%n", &c, &d, &used) != 2 || used == 0) return false;
    ((uint64_t *)out)[0] = c;
    ((uint64_t *)out)[1] = d;
    return true;
}

ls_status ls_parity_log_decisions(const char *log, uint64_t *count, uint64_t *digest, char *err, size_t errlen) {
    uint64_t v[2];
    ls_status s = log_line(log, "\n  decisions ", parse_decisions, v, "  decisions N digest HEX (the run's, in order)",
                           err, errlen);
    if (s == LS_OK) *count = v[0], *digest = v[1];
    return s;
}

/* A run directory's manifest (size-capped) into *doc, its path into path, its predicate returned. */
static const cJSON *run_predicate(const char *run_dir, char path[LS_PARITY_PATH], cJSON **doc, ls_status *s,
                                  char *err, size_t errlen) {
    snprintf(path, LS_PARITY_PATH, "%s/%s", run_dir, LS_MANIFEST_FILE);
    *doc = NULL;
    *s = ls_json_read_file_capped(path, MAX_BATCH_BYTES, doc, err, errlen);
    return *s == LS_OK ? cJSON_GetObjectItemCaseSensitive(*doc, "predicate") : NULL;
}

ls_status ls_parity_run_adamw(const char *run_dir, ls_parity_adamw *o, char *err, size_t errlen) {
    char path[LS_PARITY_PATH];
    cJSON *doc;
    ls_status s;
    const cJSON *pred = run_predicate(run_dir, path, &doc, &s, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(pred, "config");
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(cfg, "options");
    static const char *const K[] = {"lr", "beta1", "beta2", "adam_eps", "weight_decay"};
    double v[5];
    for (int i = 0; i < 5 && s == LS_OK; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(opt, K[i]);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < 0 ||
            (i >= 1 && i <= 2 && x->valuedouble >= 1)) {
            snprintf(err, errlen, "%s: field 'predicate.config.options.%s' is not a finite number in range", path,
                     K[i]);
            s = LS_ERR_FORMAT;
        } else {
            v[i] = x->valuedouble;
        }
    }
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(cfg, "first_step");
    if (s == LS_OK && (!cJSON_IsNumber(fs) || fs->valuedouble < 0 || fs->valuedouble > 1e15)) {
        snprintf(err, errlen, "%s: field 'predicate.config.first_step' is not a step number", path);
        s = LS_ERR_FORMAT;
    }
    if (s == LS_OK)
        *o = (ls_parity_adamw){.lr = v[0], .beta1 = v[1], .beta2 = v[2], .eps = v[3], .weight_decay = v[4],
                               .step = (int64_t)fs->valuedouble + 1};
    cJSON_Delete(doc);
    return s;
}

/* A v2 build identity's artifacts (when the object has them): an array of at most 4096 objects, each with a
 * string role and a non-empty string name (docs/contract.md §2); false with err naming the field. */
static bool artifacts_named(const cJSON *b, const char *path, char *err, size_t errlen) {
    const cJSON *arts = cJSON_GetObjectItemCaseSensitive(b, "artifacts");
    if (arts == NULL) return true;
    if (!cJSON_IsArray(arts) || cJSON_GetArraySize(arts) > 4096) {
        snprintf(err, errlen, "%s: field 'predicate.build.artifacts' is not an array of at most 4096 artifacts", path);
        return false;
    }
    int i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, arts) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(a, "role"), *name = cJSON_GetObjectItemCaseSensitive(a, "name");
        if (!cJSON_IsObject(a) || !cJSON_IsString(role) || !cJSON_IsString(name) || name->valuestring[0] == 0) {
            snprintf(err, errlen, "%s: field 'predicate.build.artifacts[%d]' is not an object with a string role and "
                     "a non-empty string name", path, i);
            return false;
        }
        i++;
    }
    return true;
}

ls_status ls_parity_run_build(const char *run_dir, char hex[65], cJSON **build, char *err, size_t errlen) {
    char path[LS_PARITY_PATH];
    cJSON *doc;
    ls_status s;
    if (build != NULL) *build = NULL;
    const cJSON *pred = run_predicate(run_dir, path, &doc, &s, err, errlen);
    if (s != LS_OK) return s;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(pred, "build");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(b, "build_digest");
    if (!cJSON_IsObject(b)) {
        snprintf(err, errlen, "%s: field 'predicate.build' missing or not an object", path);
        s = LS_ERR_FORMAT;
    } else if (!cJSON_IsString(d) || strlen(d->valuestring) != 64) {
        snprintf(err, errlen, "%s: field 'predicate.build.build_digest' missing or not a sha256", path);
        s = LS_ERR_FORMAT;
    } else if (build != NULL && !artifacts_named(b, path, err, errlen)) {
        s = LS_ERR_FORMAT; /* the report records the object: it must be one the audit can read (parity.schema.json) */
    } else {
        memcpy(hex, d->valuestring, 65);
        if (build != NULL && (*build = cJSON_Duplicate(b, 1)) == NULL) s = LS_ERR_NOMEM;
    }
    cJSON_Delete(doc);
    return s;
}

const char *ls_parity_dtype_name(int dtype) { return dtype == LS_PARITY_F32 ? "f32" : "f64"; }

ls_parity_err ls_parity_err_of(const double *a, const double *b, size_t n) {
    ls_parity_err e = {0, 0};
    double scale = 0, scale_a = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= e.max_abs)) e.max_abs = d; /* NaN wins */
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
        if (fabs(a[i]) > scale_a) scale_a = fabs(a[i]);
    }
    if (scale == 0) scale = scale_a; /* b all zero */
    e.max_rel = e.max_abs == 0 ? 0 : scale > 0 ? e.max_abs / scale : INFINITY;
    return e;
}

void ls_parity_member_entries(cJSON *arr, const char *what, const ls_parity_logprobs *a, const ls_parity_logprobs *b) {
    for (int i = 0; i < a->g || i < b->g; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s member %d (%d tokens)", what, i, i < a->g ? a->len[i] : 0);
        ls_parity_err e = i < a->g && i < b->g && a->len[i] == b->len[i]
                              ? ls_parity_err_of(a->lp[i], b->lp[i], (size_t)a->len[i])
                              : (ls_parity_err){INFINITY, INFINITY};
        cJSON_AddItemToArray(arr, ls_parity_entry(name, e, LS_PARITY_F64_TOL, -1));
    }
}
