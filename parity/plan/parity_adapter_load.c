/* parity_adapter_load.c - the adapter file (parity_adapter.h): read with a
 * size cap, every template's placeholders checked by name, validated against
 * schemas/parity-adapter.schema.json, then what a schema cannot say (f64,
 * CP 1 and DP 1 present, {dp} used where a DP size > 1 is declared, control
 * names, a control's CP size supported, a dp_grad control only beside a DP
 * size > 1, one reward per response); and the argv of a run built from the
 * templates. */
#define _DEFAULT_SOURCE /* realpath */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

static const char *const PLACEHOLDERS[] = {"cp", "dtype", "grad_mode", "fault", "weights", "batch", "out",
                                           "mode", "dir", "seed", "dp", NULL};
enum { PH_DP = 10 }; /* PLACEHOLDERS' index of {dp} */

/* The placeholder at s ("{name}"): its index, its length in *len; -1 when none is known. */
static int placeholder_at(const char *s, size_t *len) {
    for (int i = 0; PLACEHOLDERS[i]; i++) {
        size_t n = strlen(PLACEHOLDERS[i]);
        if (strncmp(s + 1, PLACEHOLDERS[i], n) == 0 && s[n + 1] == '}') {
            *len = n + 2;
            return i;
        }
    }
    return -1;
}

ls_status ls_parity_adapter_template_check(const char *t, const char *field, char *err, size_t errlen) {
    for (const char *p = t; *p; p++) {
        size_t n = 0;
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            p++;
            continue;
        }
        if (*p == '{' && placeholder_at(p, &n) >= 0) {
            p += n - 1;
            continue;
        }
        if (*p == '{' || *p == '}') {
            const char *e = *p == '{' ? strchr(p, '}') : NULL;
            int shown = e && e - p < 40 ? (int)(e - p + 1) : 1;
            snprintf(err, errlen, "field '%s': unknown placeholder '%.*s' in \"%.80s\" (known: {cp} {dp} {dtype} "
                     "{grad_mode} {fault} {weights} {batch} {out} {mode} {dir} {seed}; {{ and }} are literal braces)",
                     field, shown, p, t);
            return LS_ERR_FORMAT;
        }
    }
    return LS_OK;
}

static ls_status templates_check(const cJSON *arr, const char *field, char *err, size_t errlen) {
    if (!cJSON_IsArray(arr)) return LS_OK; /* the schema names it */
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) {
        char f[64];
        snprintf(f, sizeof f, "%s[%d]", field, i++);
        if (cJSON_IsString(x)) {
            ls_status s = ls_parity_adapter_template_check(x->valuestring, f, err, errlen);
            if (s != LS_OK) return s;
        }
    }
    return LS_OK;
}

/* Whether some string of the template array arr holds the placeholder {dp} (not inside {{ }}). */
static bool uses_dp(const cJSON *arr) {
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) {
        if (!cJSON_IsString(x)) continue;
        for (const char *p = x->valuestring; *p; p++) {
            size_t n = 0;
            if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) p++;
            else if (*p == '{' && placeholder_at(p, &n) == PH_DP) return true;
        }
    }
    return false;
}

static bool ident(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max || s[0] < 'a' || s[0] > 'z') return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || strchr("_.-", s[i]))) return false;
    return true;
}

static double num(const cJSON *o, const char *k, bool *has) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (has) *has = cJSON_IsNumber(v);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

void ls_parity_adapter_free(ls_parity_adapter *a) {
    cJSON_Delete(a->doc);
    cJSON_Delete(a->like_notes);
    memset(a, 0, sizeof *a);
}

#define FAIL LS_PARITY_ADAPTER_FAIL

/* Everything past the schema: the fields' values into a. */
static ls_status semantics(ls_parity_adapter *a, const char *path, char *err, size_t errlen) {
    ls_status s = LS_OK;
    const cJSON *d = a->doc, *x;
    snprintf(a->name, sizeof a->name, "%s", cJSON_GetObjectItemCaseSensitive(d, "name")->valuestring);
    snprintf(a->profile, sizeof a->profile, "%s", cJSON_GetObjectItemCaseSensitive(d, "profile")->valuestring);
    const cJSON *launch = cJSON_GetObjectItemCaseSensitive(d, "launch");
    a->launch1 = cJSON_GetObjectItemCaseSensitive(launch, "1");
    a->launchn = cJSON_GetObjectItemCaseSensitive(launch, "n");
    a->args = cJSON_GetObjectItemCaseSensitive(d, "args");
    if (cJSON_GetArraySize(a->launch1) + cJSON_GetArraySize(a->args) > 95 ||
        cJSON_GetArraySize(a->launchn) + cJSON_GetArraySize(a->args) > 95)
        FAIL(LS_ERR_FORMAT, "%s: fields 'launch' and 'args': more than 95 arguments together", path);
    const cJSON *ob = cJSON_GetObjectItemCaseSensitive(d, "objective");
    snprintf(a->objective, sizeof a->objective, "%s", cJSON_GetObjectItemCaseSensitive(ob, "name")->valuestring);
    a->temperature = num(ob, "temperature", NULL);
    a->epsilon = num(ob, "epsilon", &a->has_epsilon);
    a->beta = num(ob, "beta", &a->has_beta);
    if (strcmp(a->objective, "grpo") == 0 && (!a->has_epsilon || !a->has_beta))
        FAIL(LS_ERR_FORMAT, "%s: field 'objective': grpo pins epsilon and beta too", path);
    if (strcmp(a->objective, "grpo") != 0)
        FAIL(LS_ERR_FORMAT, "%s: field 'objective.name': %s: parity's checks are of the GRPO loss (log-probs against "
             "old and reference log-probs); no matrix proves another objective", path, a->objective);
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "dtypes")) a->dtype[strcmp(x->valuestring, "f32") == 0] = true;
    if (!a->dtype[LS_PARITY_F64])
        FAIL(LS_ERR_FORMAT, "%s: field 'dtypes': f64 must be one (the reference, the finite differences and "
             "float32's noise floor are float64)", path);
    bool one = false;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "cp")) {
        a->cps[a->n_cps++] = (int)x->valuedouble;
        one = one || x->valuedouble == 1;
    }
    if (!one) FAIL(LS_ERR_FORMAT, "%s: field 'cp': 1 must be one (CP-N is compared with CP-1)", path);
    /* the DP sizes (absent: 1 only); a size > 1 must reach the trainer through {dp} */
    const cJSON *dpl = cJSON_GetObjectItemCaseSensitive(d, "dp");
    bool dp_one = dpl == NULL, dp_more = false;
    if (dpl == NULL) a->dps[a->n_dps++] = 1;
    cJSON_ArrayForEach(x, dpl) {
        a->dps[a->n_dps++] = (int)x->valuedouble;
        dp_one = dp_one || x->valuedouble == 1;
        dp_more = dp_more || x->valuedouble > 1;
    }
    if (!dp_one) FAIL(LS_ERR_FORMAT, "%s: field 'dp': 1 must be one (DP-D is compared with DP-1)", path);
    a->uses_dp = uses_dp(a->args) || uses_dp(a->launchn);
    if (dp_more && !a->uses_dp)
        FAIL(LS_ERR_FORMAT, "%s: field 'dp': a DP size > 1 needs the placeholder {dp} in 'args' or 'launch.n' (the "
             "trainer is told its DP size by it)", path);
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(d, "faults");
    snprintf(a->fault_none, sizeof a->fault_none, "%s", cJSON_GetObjectItemCaseSensitive(faults, "none")->valuestring);
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(faults, "controls")) {
        if (a->n_controls == LS_PARITY_ADAPTER_CONTROLS)
            FAIL(LS_ERR_FORMAT, "%s: field 'faults.controls': more than %d controls", path, LS_PARITY_ADAPTER_CONTROLS);
        const char *f = x->string;
        if (!ident(f, 64) || !strcmp(f, "none") || !strcmp(f, "detached") || !strcmp(f, a->fault_none))
            FAIL(LS_ERR_FORMAT, "%s: field 'faults.controls': control '%.64s' is not an identifier "
                 "([a-z][a-z0-9_.-]*, at most 64) other than none, detached and faults.none", path, f);
        ls_parity_adapter_control *c = &a->controls[a->n_controls++];
        snprintf(c->fault, sizeof c->fault, "%s", f);
        const cJSON *k = cJSON_IsString(x) ? x : cJSON_GetObjectItemCaseSensitive(x, "breaks");
        snprintf(c->kind, sizeof c->kind, "%s", k->valuestring);
        c->cp = (int)num(x, "cp", NULL);
        bool ok = c->cp == 0;
        for (size_t i = 0; i < a->n_cps; i++) ok = ok || a->cps[i] == c->cp;
        if (!ok) FAIL(LS_ERR_FORMAT, "%s: field 'faults.controls.%s.cp': %d is not one of the adapter's cp", path, f, c->cp);
        if (strcmp(c->kind, "dp_grad") == 0 && !dp_more)
            FAIL(LS_ERR_FORMAT, "%s: field 'faults.controls.%s': it breaks dp_grad, but field 'dp' lists no DP size > 1 "
                 "to run it at", path, f);
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(d, "batch");
    a->vocab = (int)num(b, "vocab", NULL);
    bool has;
    a->prompt_len = (int)num(b, "prompt_len", &has);
    if (!has) a->prompt_len = 30;
    a->token_seed = (uint32_t)num(b, "token_seed", &has);
    if (!has) a->token_seed = 7;
    a->prompt_only = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "prompt_only"));
    const cJSON *rl = cJSON_GetObjectItemCaseSensitive(b, "response_lens"), *rw = cJSON_GetObjectItemCaseSensitive(b, "rewards");
    static const double DEF_REWARDS[LS_PARITY_MAX_G] = {1.0, 0.0, 0.25, 0.5, 0.75, 0.1, 0.9, 0.3};
    if (rl) {
        cJSON_ArrayForEach(x, rl) a->response_lens[a->group++] = (int)x->valuedouble;
    } else {
        a->group = 2, a->response_lens[0] = 3, a->response_lens[1] = 5;
    }
    if (rw && cJSON_GetArraySize(rw) != a->group)
        FAIL(LS_ERR_FORMAT, "%s: field 'batch.rewards': %d rewards for %d responses", path, cJSON_GetArraySize(rw), a->group);
    for (int i = 0; i < a->group; i++) a->rewards[i] = rw ? cJSON_GetArrayItem(rw, i)->valuedouble : DEF_REWARDS[i];
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(d, "optimizer");
    if (opt && strcmp(cJSON_GetObjectItemCaseSensitive(opt, "name")->valuestring, "adamw") == 0) {
        a->adamw = true;
        a->opt = (ls_parity_adamw){.lr = num(opt, "lr", NULL), .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .step = 1};
        if (cJSON_GetObjectItemCaseSensitive(opt, "beta1")) a->opt.beta1 = num(opt, "beta1", NULL);
        if (cJSON_GetObjectItemCaseSensitive(opt, "beta2")) a->opt.beta2 = num(opt, "beta2", NULL);
        if (cJSON_GetObjectItemCaseSensitive(opt, "eps")) a->opt.eps = num(opt, "eps", NULL);
    }
done:
    return s;
}

ls_status ls_parity_adapter_load(const char *path, ls_parity_adapter *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    char *bytes = NULL, why[512];
    size_t len = 0;
    ls_status s;
    if (strlen(path) > LS_PARITY_OUT_MAX) {
        snprintf(err, errlen, "--adapter: the path is longer than %d characters", LS_PARITY_OUT_MAX);
        return LS_ERR_ARG;
    }
    snprintf(a->path, sizeof a->path, "%s", path);
    if ((s = ls_json_read_bytes_capped(path, LS_PARITY_ADAPTER_MAX_BYTES, &bytes, &len, why, sizeof why)) != LS_OK) {
        snprintf(err, errlen, "--adapter: %s (an adapter is at most %u bytes)", why, LS_PARITY_ADAPTER_MAX_BYTES);
        return s;
    }
    ls_digest_sha256_hex(bytes, len, a->sha256);
    s = ls_json_parse(bytes, len, path, &a->doc, why, sizeof why);
    free(bytes);
    if (s != LS_OK) {
        snprintf(err, errlen, "--adapter: %s", why);
        return s;
    }
    if (!cJSON_IsObject(a->doc)) {
        snprintf(err, errlen, "--adapter %s: not a JSON object", path);
        s = LS_ERR_FORMAT;
        goto done;
    }
    /* placeholders first: the clearest error for a template the schema's types accept */
    const cJSON *launch = cJSON_GetObjectItemCaseSensitive(a->doc, "launch");
    if ((s = templates_check(cJSON_GetObjectItemCaseSensitive(launch, "1"), "launch.1", why, sizeof why)) != LS_OK ||
        (s = templates_check(cJSON_GetObjectItemCaseSensitive(launch, "n"), "launch.n", why, sizeof why)) != LS_OK ||
        (s = templates_check(cJSON_GetObjectItemCaseSensitive(a->doc, "args"), "args", why, sizeof why)) != LS_OK) {
        snprintf(err, errlen, "--adapter %s: %s", path, why);
        goto done;
    }
    const ls_schema *sch = NULL;
    ls_schema_errors errs = {0};
    if ((s = ls_schema_get("parity-adapter", &sch, why, sizeof why)) != LS_OK) {
        snprintf(err, errlen, "--adapter %s: %s", path, why);
        goto done;
    }
    if ((s = ls_schema_validate(sch, a->doc, &errs)) != LS_OK) {
        ls_schema_errors_first(&errs, why, sizeof why);
        snprintf(err, errlen, "--adapter %s: not a parity adapter (schemas/parity-adapter.schema.json): %s", path, why);
        ls_schema_errors_free(&errs);
        s = LS_ERR_FORMAT;
        goto done;
    }
    ls_schema_errors_free(&errs);
    if ((s = semantics(a, path, err, errlen)) != LS_OK) goto done;
    char real[PATH_MAX];
    if (realpath(path, real) == NULL) {
        snprintf(err, errlen, "--adapter %s: %s", path, strerror(errno));
        s = LS_ERR_IO;
        goto done;
    }
    char *slash = strrchr(real, '/');
    if (slash == real) slash[1] = 0;
    else if (slash) *slash = 0;
    if (strlen(real) > LS_PARITY_OUT_MAX) {
        snprintf(err, errlen, "--adapter %s: its directory is longer than %d characters", path, LS_PARITY_OUT_MAX);
        s = LS_ERR_ARG;
        goto done;
    }
    snprintf(a->dir, sizeof a->dir, "%s", real);
done:
    if (s != LS_OK) ls_parity_adapter_free(a);
    return s;
}

ls_status ls_parity_adapter_expand(const ls_parity_adapter *a, const char *t, const ls_parity_adapter_vars *v,
                                   char *out, size_t cap) {
    size_t n = 0;
    char num[32];
    for (const char *p = t; *p; p++) {
        const char *val = NULL;
        char one[2] = {*p, 0};
        size_t len = 0;
        int k = *p == '{' && p[1] != '{' ? placeholder_at(p, &len) : -1;
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            p++;
            val = one;
        } else if (k >= 0) {
            p += len - 1;
            switch (k) {
            case 0: snprintf(num, sizeof num, "%d", v->cp), val = num; break;
            case 1: val = v->dtype; break;
            case 2: val = v->grad_mode; break;
            case 3: val = v->fault; break;
            case 4: val = v->weights; break;
            case 5: val = v->batch; break;
            case 6: val = v->out; break;
            case 7: val = v->mode; break;
            case 8: val = a->dir; break;
            case PH_DP: snprintf(num, sizeof num, "%d", v->dp > 1 ? v->dp : 1), val = num; break;
            default: snprintf(num, sizeof num, "%llu", (unsigned long long)v->seed), val = num; break;
            }
        } else {
            val = one;
        }
        size_t l = strlen(val ? val : "");
        if (n + l + 1 > cap) return LS_ERR_ARG;
        memcpy(out + n, val ? val : "", l);
        n += l;
    }
    out[n] = 0;
    return LS_OK;
}

ls_status ls_parity_adapter_job(const ls_parity_adapter *a, const ls_parity_adapter_vars *v, const char *log,
                                ls_parity_job *j, char *err, size_t errlen) {
    memset(j, 0, sizeof *j);
    snprintf(j->log, sizeof j->log, "%s", log);
    const cJSON *parts[2] = {v->cp * (v->dp > 1 ? v->dp : 1) > 1 ? a->launchn : a->launch1, a->args};
    char buf[LS_PARITY_ADAPTER_ARG_MAX + 1];
    for (int k = 0; k < 2; k++) {
        const cJSON *x;
        cJSON_ArrayForEach(x, parts[k]) {
            if (ls_parity_adapter_expand(a, x->valuestring, v, buf, sizeof buf) != LS_OK) {
                snprintf(err, errlen, "%s: an argument of mode %s expands past %d characters: \"%.60s...\"", a->path,
                         v->mode, LS_PARITY_ADAPTER_ARG_MAX, x->valuestring);
                ls_parity_job_free(j);
                return LS_ERR_ARG;
            }
            ls_parity_job_arg(j, "%s", buf);
        }
    }
    if (j->argc == 0 || j->argv[0][0] == 0) {
        snprintf(err, errlen, "%s: field 'launch': the program of mode %s expands to nothing", a->path, v->mode);
        ls_parity_job_free(j);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}
