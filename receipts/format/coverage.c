/* coverage.c - a parity report's coverage and a run inside it (coverage.h). */
/* Details are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "receipts/format/coverage.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/jcs.h"
#include "receipts/format/json_util.h"
#include "receipts/format/registry_file.h"

/* The model keys, from the registry of model families (registry_file.h): its shared keys, then every
 * family's keys, each once. */
#define MAX_MODEL_KEYS 256
static struct {
    pthread_once_t once;
    const char *keys[MAX_MODEL_KEYS + 1];
    char err[600];
} g_keys = {.once = PTHREAD_ONCE_INIT};

static void add_keys(const cJSON *arr, size_t *n) {
    const cJSON *k;
    cJSON_ArrayForEach(k, arr) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(k, "key");
        const char *name = cJSON_IsString(nm) ? nm->valuestring : NULL;
        bool dup = false;
        for (size_t i = 0; name && i < *n; i++) dup |= strcmp(g_keys.keys[i], name) == 0;
        if (name && !dup && *n < MAX_MODEL_KEYS) g_keys.keys[(*n)++] = name;
    }
}

static void load_keys(void) {
    const char *why = NULL;
    const cJSON *doc = ls_registry_file_get(&why);
    if (!doc) {
        snprintf(g_keys.err, sizeof g_keys.err, "%s", why ? why : "no registry of model families");
        return;
    }
    size_t n = 0;
    add_keys(cJSON_GetObjectItemCaseSensitive(doc, "shared_keys"), &n);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(doc, "families"))
        add_keys(cJSON_GetObjectItemCaseSensitive(f, "keys"), &n);
    if (n == 0) snprintf(g_keys.err, sizeof g_keys.err, "the registry of model families holds no model keys");
    g_keys.keys[n] = NULL;
}

const char *const *ls_coverage_model_keys(const char **err) {
    pthread_once(&g_keys.once, load_keys);
    if (err) *err = g_keys.err;
    return g_keys.keys[0] ? g_keys.keys : NULL;
}

#define V(...) (const char *const[]){__VA_ARGS__, NULL}
const ls_coverage_path_decision LS_COVERAGE_PATHS[] = {
    {"responses", V("sampled", "given", "target"), "sampled by the trainer's rollout, given by the input, or SFT targets"},
    {"old_logprobs", V("computed", "given", "none"), "the old policy's log-probs scored by the trainer or given"},
    {"reference", V("none", "before", "kept", "recaptured", "prefix", "naive", "given"),
     "the reference policy's prompt state: captured before the policy's, kept beside it, recaptured after it was freed, "
     "a frozen prefix's, the naive full sequence, or log-probs given"},
    {"prompt_groups", V("one", "several"), "one prompt group a step, or several accumulated into one update"},
    {"prefix", V("fresh", "frozen"), "a prompt state captured this step, or a frozen prefix's"},
    {"start", V("fresh", "resumed"), "a fresh start, or resumed from a checkpoint"},
    {"shards", V("one", "even", "uneven"), "the CP shards of the captured positions"},
    {"pages", V("aligned", "cut"), "whether a shard boundary cuts the KV page grid"},
    {"chunks", V("aligned", "cut"), "whether a shard boundary cuts the capture-chunk grid"},
    {"task", V("retrieval", "recall", "none"), "the built-in task that sampled and rewarded the responses (none: an input)"},
    {"state_tier", V("device", "host"),
     "where the captured prompt state lived: the device tier, or the host tier with each layer's share staged into "
     "the device tier before use (--state-tier)"},
    {"replay", V("taped", "layer", "chunk"),
     "the response replay: every layer's tape kept through the backward, each layer's input kept and its tape "
     "rebuilt in the backward, or the branch in chunks from the carried state, each taped again in the backward "
     "(--replay-checkpoint)"},
    {NULL, NULL, NULL}};
#undef V

static const ls_coverage_path_decision *path_decision(const char *key) {
    for (size_t i = 0; LS_COVERAGE_PATHS[i].key != NULL; i++)
        if (strcmp(LS_COVERAGE_PATHS[i].key, key) == 0) return &LS_COVERAGE_PATHS[i];
    return NULL;
}

static bool path_value_known(const ls_coverage_path_decision *d, const char *v) {
    for (size_t i = 0; d->values[i] != NULL; i++)
        if (strcmp(d->values[i], v) == 0) return true;
    return false;
}

ls_status ls_coverage_paths_put(cJSON *paths, const char *key, const char *value) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(paths, key);
    if (a == NULL && (a = cJSON_AddArrayToObject(paths, key)) == NULL) return LS_ERR_NOMEM;
    if (!cJSON_IsArray(a)) return LS_ERR_ARG;
    int i = 0;
    cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsString(x)) return LS_ERR_ARG;
        int c = strcmp(x->valuestring, value);
        if (c == 0) return LS_OK;
        if (c > 0) break;
        i++;
    }
    cJSON *n = cJSON_CreateString(value);
    if (n == NULL || !cJSON_InsertItemInArray(a, i, n)) {
        cJSON_Delete(n);
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}

ls_status ls_coverage_paths_add(cJSON *cov_paths, const cJSON *config, char *err, size_t errlen) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(config, "paths"), *k, *v;
    if (!cJSON_IsObject(cov_paths) || !cJSON_IsObject(p)) {
        snprintf(err, errlen, "the configuration records no \"paths\" object (the run's path)");
        return LS_ERR_ARG;
    }
    cJSON_ArrayForEach(k, p) {
        if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0) {
            snprintf(err, errlen, "the configuration's paths.%.60s is not a non-empty array", k->string);
            return LS_ERR_ARG;
        }
        cJSON_ArrayForEach(v, k) {
            if (!cJSON_IsString(v)) {
                snprintf(err, errlen, "the configuration's paths.%.60s holds a value that is not a string", k->string);
                return LS_ERR_ARG;
            }
            ls_status st = ls_coverage_paths_put(cov_paths, k->string, v->valuestring);
            if (st != LS_OK) {
                snprintf(err, errlen, "paths.%.60s: %s", k->string, st == LS_ERR_NOMEM ? "out of memory" : "not an array");
                return st;
            }
        }
    }
    return LS_OK;
}

void ls_coverage_shard_classes(int64_t T, int N, int64_t page, int64_t chunk, const char **shards,
                               const char **pages, const char **chunks) {
    bool page_cut = false, chunk_cut = false;
    for (int r = 1; r < N; r++) { /* rank r's first position */
        int64_t s0 = (T / N) * r + ((T % N) * r) / N;
        page_cut = page_cut || (page > 0 && s0 % page != 0);
        chunk_cut = chunk_cut || (chunk > 0 && s0 % chunk != 0);
    }
    *shards = N < 2 ? "one" : T % N ? "uneven" : "even";
    *pages = page_cut ? "cut" : "aligned";
    *chunks = chunk_cut ? "cut" : "aligned";
}

bool ls_coverage_config_is_v2(const cJSON *config) {
    return cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(config, "model"));
}

ls_status ls_coverage_model_sha256_v2(const cJSON *model, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen) {
    return ls_jcs_sha256_numbers(model, hex, err, errlen);
}

cJSON *ls_coverage_model(const cJSON *config) {
    if (!cJSON_IsObject(config)) return NULL;
    if (ls_coverage_config_is_v2(config))
        return cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(config, "model"), true);
    const char *const *keys = ls_coverage_model_keys(NULL);
    if (keys == NULL) return NULL;
    cJSON *m = cJSON_CreateObject();
    for (size_t i = 0; m != NULL && keys[i] != NULL; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, keys[i]);
        if (v == NULL) continue;
        cJSON *c = cJSON_Duplicate(v, true);
        if (c == NULL || !cJSON_AddItemToObject(m, keys[i], c)) {
            cJSON_Delete(c);
            cJSON_Delete(m);
            return NULL;
        }
    }
    return m;
}

ls_status ls_coverage_model_sha256(const cJSON *model, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    ls_status st = ls_json_print_canonical(model, &text, &len, err, errlen);
    if (st == LS_OK) st = ls_digest_sha256_hex(text, len, hex);
    free(text);
    return st;
}

static bool copy_field(cJSON *dst, const cJSON *src, const char *key, int want_type, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, key);
    if (v == NULL || (v->type & 0xFF & want_type) == 0 || (cJSON_IsNumber(v) && !isfinite(v->valuedouble))) {
        snprintf(err, errlen, "the configuration has no %s \"%s\"",
                 want_type == cJSON_Number ? "number" : want_type == cJSON_String ? "string" : "boolean", key);
        return false;
    }
    cJSON *c = cJSON_Duplicate(v, true);
    if (c == NULL || !cJSON_AddItemToObject(dst, key, c)) {
        cJSON_Delete(c);
        snprintf(err, errlen, "out of memory");
        return false;
    }
    return true;
}

cJSON *ls_coverage_train_mode(const cJSON *config, char *err, size_t errlen) {
    cJSON *t = cJSON_CreateObject();
    if (t == NULL) return NULL;
    bool ok = copy_field(t, config, "train_mode", cJSON_String, err, errlen);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "train_mode");
    if (ok && strcmp(m->valuestring, "full") != 0)
        ok = copy_field(t, config, "lora_r", cJSON_Number, err, errlen) &&
             copy_field(t, config, "lora_alpha", cJSON_Number, err, errlen) &&
             copy_field(t, config, "lora_experts", cJSON_True | cJSON_False, err, errlen);
    if (!ok) {
        cJSON_Delete(t);
        return NULL;
    }
    return t;
}

cJSON *ls_coverage_objectives(const cJSON *config, char *err, size_t errlen) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(config, "objective");
    const cJSON *sft = cJSON_GetObjectItemCaseSensitive(config, "sft_steps");
    if (!cJSON_IsString(o) || (strcmp(o->valuestring, "grpo") != 0 && strcmp(o->valuestring, "sft") != 0)) {
        snprintf(err, errlen, "the configuration does not state its objective (\"objective\": grpo or sft)");
        return NULL;
    }
    if (sft != NULL && (!cJSON_IsNumber(sft) || !(sft->valuedouble >= 0))) {
        snprintf(err, errlen, "the configuration's \"sft_steps\" is not a count");
        return NULL;
    }
    bool grpo = strcmp(o->valuestring, "grpo") == 0;
    bool any_sft = !grpo || (sft != NULL && sft->valuedouble > 0);
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; a != NULL && k < 2; k++) {
        if ((k == 0 && !grpo) || (k == 1 && !any_sft)) continue;
        cJSON *e = cJSON_CreateObject();
        bool ok = e != NULL && cJSON_AddStringToObject(e, "objective", k == 0 ? "grpo" : "sft") != NULL;
        if (ok && k == 0)
            ok = copy_field(e, config, "epsilon", cJSON_Number, err, errlen) &&
                 copy_field(e, config, "beta", cJSON_Number, err, errlen);
        if (ok) ok = copy_field(e, config, "temperature", cJSON_Number, err, errlen);
        if (!ok || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

ls_status ls_coverage_set_add(cJSON *set, const cJSON *item) {
    const cJSON *x;
    cJSON_ArrayForEach(x, set) {
        if (cJSON_Compare(x, item, true)) return LS_OK;
    }
    cJSON *c = cJSON_Duplicate(item, true);
    if (c == NULL || !cJSON_AddItemToArray(set, c)) {
        cJSON_Delete(c);
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}

static bool in_set(const cJSON *set, const cJSON *item) {
    const cJSON *x;
    cJSON_ArrayForEach(x, set) {
        if (cJSON_Compare(x, item, true)) return true;
    }
    return false;
}

typedef struct {
    void (*outside)(void *, const char *, const char *);
    void *user;
    size_t n;
} sink;

static void out(sink *s, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void out(sink *s, const char *field, const char *fmt, ...) {
    char d[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    s->n++;
    if (s->outside) s->outside(s->user, field, d);
}

/* config[key] (a string) must be one of coverage[set_key] (strings). */
static void check_member(sink *s, const cJSON *coverage, const char *set_key, const cJSON *config, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, key);
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(coverage, set_key);
    char a[160], b[160];
    ls_json_brief(v, 120, a, sizeof a);
    ls_json_brief(set, 120, b, sizeof b);
    if (!cJSON_IsArray(set)) out(s, key, "the report's coverage states no \"%s\"", set_key);
    else if (v == NULL) out(s, key, "the run does not state its \"%s\"; the report covers %s", key, b);
    else if (!in_set(set, v)) out(s, key, "the run's %s %s is outside the report's coverage (%s %s)", key, a, set_key, b);
}

/* v2: the run's model against the report's, key by key over both. */
static void check_model_v2(sink *s, const cJSON *run_model, const cJSON *model, const char *msha) {
    char a[160], b[160];
    const cJSON *k;
    cJSON_ArrayForEach(k, run_model) {
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(model, k->string);
        if (pv != NULL && cJSON_Compare(k, pv, true)) continue;
        ls_json_brief(k, 120, a, sizeof a);
        ls_json_brief(pv, 120, b, sizeof b);
        out(s, k->string, "the run's model has %s %s, the report proved %s %s (model_sha256 %.16s...)", k->string, a,
            k->string, b, msha);
    }
    cJSON_ArrayForEach(k, model) {
        if (cJSON_GetObjectItemCaseSensitive(run_model, k->string) != NULL) continue;
        ls_json_brief(k, 120, b, sizeof b);
        out(s, k->string, "the run's model has no %s, the report proved %s %s (model_sha256 %.16s...)", k->string,
            k->string, b, msha);
    }
}

/* The run's path: every decision known, recorded, and each value among the report's. */
static void check_paths(sink *s, const cJSON *coverage, const cJSON *config) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(config, "paths");
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(coverage, "paths"), *k, *v;
    char b[160];
    if (!cJSON_IsObject(rp)) {
        out(s, "paths", "the run does not record its path (\"paths\": which code its steps took), so no report covers it");
        return;
    }
    if (!cJSON_IsObject(cp)) {
        out(s, "paths", "the report's coverage states no \"paths\" (made before paths were recorded): it covers no path");
        return;
    }
    for (size_t i = 0; LS_COVERAGE_PATHS[i].key != NULL; i++)
        if (cJSON_GetObjectItemCaseSensitive(rp, LS_COVERAGE_PATHS[i].key) == NULL)
            out(s, LS_COVERAGE_PATHS[i].key, "the run does not record its \"%s\" (%s)", LS_COVERAGE_PATHS[i].key,
                LS_COVERAGE_PATHS[i].what);
    cJSON_ArrayForEach(k, rp) {
        const ls_coverage_path_decision *d = path_decision(k->string);
        if (d == NULL) {
            out(s, k->string, "the run records a decision \"%.60s\" the audit does not know: outside every coverage",
                k->string);
            continue;
        }
        const cJSON *have = cJSON_GetObjectItemCaseSensitive(cp, k->string);
        ls_json_brief(have, 120, b, sizeof b);
        if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0) {
            out(s, k->string, "the run's paths.%s is not a non-empty array", k->string);
            continue;
        }
        cJSON_ArrayForEach(v, k) {
            if (!cJSON_IsString(v)) out(s, k->string, "the run's paths.%s holds a value that is not a string", k->string);
            else if (!path_value_known(d, v->valuestring))
                out(s, k->string, "the run's %s \"%.60s\" is a value the audit does not know: outside every coverage",
                    k->string, v->valuestring);
            else if (!cJSON_IsArray(have) || !in_set(have, v))
                out(s, k->string, "the run's %s \"%s\" (%s) was never exercised by the report's runs (%s %s)", k->string,
                    v->valuestring, d->what, k->string, have ? b : "none");
        }
    }
}

size_t ls_coverage_check(const cJSON *coverage, const cJSON *config, unsigned world,
                         void (*outside)(void *user, const char *field, const char *detail), void *user) {
    sink s = {.outside = outside, .user = user};
    char a[160], b[160], err[200];
    const char *kerr = NULL;
    if (!cJSON_IsObject(coverage)) {
        out(&s, "coverage", "the parity report states no coverage (a report made before coverage was recorded)");
        return s.n;
    }
    if (!cJSON_IsObject(config)) {
        out(&s, "config", "the run has no configuration to check");
        return s.n;
    }
    /* the model, key by key, both ways */
    bool v2 = ls_coverage_config_is_v2(config);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(coverage, "model");
    const cJSON *msha = cJSON_GetObjectItemCaseSensitive(coverage, "model_sha256");
    char hex[LS_DIGEST_HEX_SIZE];
    if (!cJSON_IsObject(model)) {
        out(&s, "model", "the report's coverage states no model");
    } else if (!cJSON_IsString(msha) ||
               (v2 ? ls_coverage_model_sha256_v2(model, hex, err, sizeof err)
                   : ls_coverage_model_sha256(model, hex, err, sizeof err)) != LS_OK ||
               strcmp(hex, msha->valuestring) != 0) {
        out(&s, "model_sha256", "the report's model_sha256 is not the digest of its model");
    } else if (v2) {
        check_model_v2(&s, cJSON_GetObjectItemCaseSensitive(config, "model"), model, msha->valuestring);
    } else if (ls_coverage_model_keys(&kerr) == NULL) {
        out(&s, "model", "the model keys are unknown: %s", kerr);
    } else {
        const char *const *keys = ls_coverage_model_keys(NULL);
        for (size_t i = 0; keys[i] != NULL; i++) {
            const char *k = keys[i];
            const cJSON *rv = cJSON_GetObjectItemCaseSensitive(config, k), *pv = cJSON_GetObjectItemCaseSensitive(model, k);
            if (rv == NULL && pv == NULL) continue;
            if (rv != NULL && pv != NULL && cJSON_Compare(rv, pv, true)) continue;
            ls_json_brief(rv, 120, a, sizeof a);
            ls_json_brief(pv, 120, b, sizeof b);
            out(&s, k, "the run's model has %s %s, the report proved %s %s (model_sha256 %.16s...)", k, a, k, b,
                msha->valuestring);
        }
    }
    /* the trainable set and the objectives */
    cJSON *tm = ls_coverage_train_mode(config, err, sizeof err);
    const cJSON *tms = cJSON_GetObjectItemCaseSensitive(coverage, "train_modes");
    if (tm == NULL) out(&s, "train_mode", "%s", err);
    else if (!cJSON_IsArray(tms)) out(&s, "train_mode", "the report's coverage states no \"train_modes\"");
    else if (!in_set(tms, tm)) {
        ls_json_brief(tm, 120, a, sizeof a);
        ls_json_brief(tms, 120, b, sizeof b);
        out(&s, "train_mode", "the run's trainable set %s is outside the report's coverage (train_modes %s)", a, b);
    }
    cJSON_Delete(tm);
    cJSON *objs = ls_coverage_objectives(config, err, sizeof err);
    const cJSON *cov_objs = cJSON_GetObjectItemCaseSensitive(coverage, "objectives"), *o;
    if (objs == NULL) out(&s, "objective", "%s", err);
    else if (!cJSON_IsArray(cov_objs)) out(&s, "objective", "the report's coverage states no \"objectives\"");
    else
        cJSON_ArrayForEach(o, objs) {
            if (in_set(cov_objs, o)) continue;
            ls_json_brief(o, 120, a, sizeof a);
            ls_json_brief(cov_objs, 120, b, sizeof b);
            out(&s, "objective", "the run's objective %s is outside the report's coverage (objectives %s)", a, b);
        }
    cJSON_Delete(objs);
    check_member(&s, coverage, "grad_modes", config, "grad_mode");
    check_member(&s, coverage, "strategies", config, "strategy");
    check_member(&s, coverage, "dtypes", config, "dtype");
    check_paths(&s, coverage, config);
    /* the EP size (config "ep_ranks", absent: 1) against the report's "eps" (absent: only EP 1 was run: a
       report covers an EP-N run only if it ran EP-N), the DP size (config "dp_ranks", an adapter's trainer's
       replicas, absent: 1) against its "dps" alike, then the CP size, world / (ep x dp) */
    const char *const size_key[2] = {"ep_ranks", "dp_ranks"}, *const set_key[2] = {"eps", "dps"};
    const char *const field[2] = {"ep", "dp"}, *const what[2] = {"expert parallelism EP", "data parallelism DP"};
    const char *const none[2] = {"none: EP 1 only", "none: DP 1 only"};
    for (int i = 0; i < 2; i++) {
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(config, size_key[i]);
        const cJSON *set = cJSON_GetObjectItemCaseSensitive(coverage, set_key[i]), *e;
        double run_n = cJSON_IsNumber(rv) ? rv->valuedouble : 1.0;
        if (rv != NULL && !(cJSON_IsNumber(rv) && rv->valuedouble >= 1 && rv->valuedouble <= (double)world &&
                            rv->valuedouble == (double)(unsigned)rv->valuedouble &&
                            world % (unsigned)rv->valuedouble == 0)) {
            ls_json_brief(rv, 120, a, sizeof a);
            out(&s, field[i], "the run's %s %s is not an integer >= 1 that divides its %u rank(s): outside every "
                "coverage", size_key[i], a, world);
            continue;
        }
        bool have = false;
        if (cJSON_IsArray(set)) {
            cJSON_ArrayForEach(e, set) {
                if (cJSON_IsNumber(e) && e->valuedouble == run_n) have = true;
            }
        } else {
            have = run_n == 1.0;
        }
        if (!have) {
            ls_json_brief(set, 120, b, sizeof b);
            out(&s, field[i], "the run's %s-%g is outside the report's coverage (%s %s)", what[i], run_n, set_key[i],
                set ? b : none[i]);
        }
        world /= (unsigned)run_n; /* an integer dividing the world (above) */
    }
    /* the CP size */
    const cJSON *worlds = cJSON_GetObjectItemCaseSensitive(coverage, "worlds"), *w;
    const cJSON *wlist = cJSON_IsArray(worlds) ? worlds : NULL;
    bool have = false;
    cJSON_ArrayForEach(w, wlist) {
        if (cJSON_IsNumber(w) && w->valuedouble == (double)world) have = true;
    }
    if (!have) {
        ls_json_brief(worlds, 120, b, sizeof b);
        out(&s, "world", "the run's %u rank(s) are outside the report's coverage (worlds %s)", world, b);
    }
    return s.n;
}
