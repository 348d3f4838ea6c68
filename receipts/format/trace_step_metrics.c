/* trace_step_metrics.c - checking, building and decoding the step_metrics
 * object (see trace_step_metrics.h).  One table of the double fields, in
 * the order they are written, drives all three. */
#include "receipts/format/trace_step_metrics.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef enum { R_ANY, R_NONNEG, R_POS, R_UNIT, R_COS } range;

typedef struct {
    const char *name;
    size_t off;  /* offset of the double in ls_trace_step_metrics */
    range r;
    int part;    /* 1 a reward part: written only with has_reward_parts; 2 only with has_grad_compare; 3 only
                    with has_grad_cosine */
} num_field;

#define N(f, r) {#f, offsetof(ls_trace_step_metrics, f), r, 0}
#define P(f) {#f, offsetof(ls_trace_step_metrics, f), R_ANY, 1}
#define G(f, r, k) {#f, offsetof(ls_trace_step_metrics, f), r, k}
/* The doubles between "objective" and "tokens", in writing order. */
static const num_field NUMS_A[] = {
    N(reward_mean, R_ANY),   N(reward_std, R_NONNEG), N(reward_min, R_ANY),
    N(reward_max, R_ANY),    P(reward_retrieval),     P(reward_format),
    N(adv_mean, R_ANY),      N(adv_std, R_NONNEG),    N(loss, R_ANY),
    N(loss_policy, R_ANY),   N(loss_kl, R_ANY),       N(kl_mean, R_ANY),
    N(clip_fraction, R_UNIT), N(ratio_min, R_POS),    N(ratio_mean, R_POS),
    N(ratio_max, R_POS),     N(response_len_mean, R_NONNEG),
};
/* Between "tokens" and "tokens_per_s". */
static const num_field NUMS_B[] = {N(grad_norm, R_NONNEG), G(grad_cosine, R_COS, 3),
                                   G(grad_norm_detached, R_NONNEG, 2), G(grad_norm_full, R_NONNEG, 2),
                                   N(lr, R_NONNEG)};
/* After "tokens_per_s". */
static const num_field NUMS_C[] = {N(step_wall_s, R_NONNEG)};
#undef N
#undef P
#undef G
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
    const num_field *f;
    size_t n;
} GROUPS[] = {{NUMS_A, COUNT(NUMS_A)}, {NUMS_B, COUNT(NUMS_B)}, {NUMS_C, COUNT(NUMS_C)}};

static double get(const ls_trace_step_metrics *m, const num_field *f) {
    double v;
    memcpy(&v, (const char *)m + f->off, sizeof v);
    return v;
}

static void set(ls_trace_step_metrics *m, const num_field *f, double v) {
    memcpy((char *)m + f->off, &v, sizeof v);
}

static bool written(const ls_trace_step_metrics *m, const num_field *f) {
    switch (f->part) {
    case 1: return m->has_reward_parts;
    case 2: return m->has_grad_compare;
    case 3: return m->has_grad_cosine;
    default: return true;
    }
}

static const char *range_error(range r, double v) {
    switch (r) {
    case R_ANY: return NULL;
    case R_NONNEG: return v >= 0 ? NULL : "is negative";
    case R_POS: return v > 0 ? NULL : "must be > 0";
    case R_UNIT: return v >= 0 && v <= 1 ? NULL : "is outside [0, 1]";
    case R_COS: return v >= -1 && v <= 1 ? NULL : "is outside [-1, 1]";
    }
    return "has an unknown range";
}

static ls_status refuse(char *why, size_t why_len, ls_status st, const char *field,
                        const char *what) {
    if (why && why_len) snprintf(why, why_len, "step_metrics.%s: %s", field, what);
    return st;
}

ls_status ls_trace_step_metrics_check(const ls_trace_step_metrics *m, char *why, size_t why_len) {
    char what[160], name[64];
    if (why && why_len) why[0] = '\0';
    if (m == NULL) return refuse(why, why_len, LS_ERR_ARG, "(metrics)", "NULL");
    /* every non-finite value before any range, so NaN is never reported as
     * "out of range" */
    for (size_t g = 0; g < COUNT(GROUPS); g++)
        for (size_t i = 0; i < GROUPS[g].n; i++) {
            const num_field *f = &GROUPS[g].f[i];
            if (written(m, f) && !isfinite(get(m, f))) {
                snprintf(what, sizeof what, "non-finite value (%g) refused", get(m, f));
                return refuse(why, why_len, LS_ERR_NONFINITE, f->name, what);
            }
        }
    for (int p = 0; p < LS_PHASE_COUNT; p++)
        if ((m->tokens_per_s_mask & (1u << p)) && !isfinite(m->tokens_per_s[p])) {
            snprintf(name, sizeof name, "tokens_per_s.%s", ls_trace_phase_name((ls_trace_phase)p));
            snprintf(what, sizeof what, "non-finite value (%g) refused", m->tokens_per_s[p]);
            return refuse(why, why_len, LS_ERR_NONFINITE, name, what);
        }
    const struct {
        const char *name;
        int64_t v;
    } ints[] = {{"step", m->step}, {"tokens", m->tokens}};
    for (size_t i = 0; i < COUNT(ints); i++)
        if (ints[i].v < 0 || ints[i].v > LS_TRACE_MAX_INT) {
            snprintf(what, sizeof what, "%lld is outside [0, 2^53-1]", (long long)ints[i].v);
            return refuse(why, why_len, LS_ERR_ARG, ints[i].name, what);
        }
    if ((int)m->objective < 0 || m->objective >= LS_TRACE_OBJECTIVE_COUNT) {
        snprintf(what, sizeof what, "enum value %d out of range", (int)m->objective);
        return refuse(why, why_len, LS_ERR_ARG, "objective", what);
    }
    for (size_t g = 0; g < COUNT(GROUPS); g++)
        for (size_t i = 0; i < GROUPS[g].n; i++) {
            const num_field *f = &GROUPS[g].f[i];
            const char *bad = written(m, f) ? range_error(f->r, get(m, f)) : NULL;
            if (bad) {
                snprintf(what, sizeof what, "%.17g %s", get(m, f), bad);
                return refuse(why, why_len, LS_ERR_ARG, f->name, what);
            }
        }
    if (m->tokens_per_s_mask & ~LS_TRACE_RATE_PHASE_MASK) {
        snprintf(what, sizeof what,
                 "mask 0x%x names a phase other than capture, rollout, score, replay, prompt_bwd",
                 m->tokens_per_s_mask);
        return refuse(why, why_len, LS_ERR_ARG, "tokens_per_s", what);
    }
    for (int p = 0; p < LS_PHASE_COUNT; p++)
        if ((m->tokens_per_s_mask & (1u << p)) && m->tokens_per_s[p] < 0) {
            snprintf(name, sizeof name, "tokens_per_s.%s", ls_trace_phase_name((ls_trace_phase)p));
            snprintf(what, sizeof what, "%.17g is negative", m->tokens_per_s[p]);
            return refuse(why, why_len, LS_ERR_ARG, name, what);
        }
    return LS_OK;
}

/* Adds the written members of one group; false on allocation failure. */
static bool add_group(cJSON *o, const ls_trace_step_metrics *m, const num_field *f, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (written(m, &f[i]) && cJSON_AddNumberToObject(o, f[i].name, get(m, &f[i])) == NULL)
            return false;
    return true;
}

ls_status ls_trace_step_metrics_to_json(const ls_trace_step_metrics *m, cJSON **out) {
    if (out == NULL) return LS_ERR_ARG;
    *out = NULL;
    ls_status st = ls_trace_step_metrics_check(m, NULL, 0);
    if (st != LS_OK) return st;
    st = LS_ERR_NOMEM;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) goto cleanup;
    if (cJSON_AddNumberToObject(o, "step", (double)m->step) == NULL) goto cleanup;
    if (m->prefix_frozen && cJSON_AddTrueToObject(o, "prefix_frozen") == NULL) goto cleanup;
    if (cJSON_AddStringToObject(o, "objective", ls_trace_objective_name(m->objective)) == NULL)
        goto cleanup;
    if (!add_group(o, m, NUMS_A, COUNT(NUMS_A))) goto cleanup;
    if (cJSON_AddNumberToObject(o, "tokens", (double)m->tokens) == NULL) goto cleanup;
    if (!add_group(o, m, NUMS_B, COUNT(NUMS_B))) goto cleanup;
    cJSON *rates = cJSON_AddObjectToObject(o, "tokens_per_s");
    if (rates == NULL) goto cleanup;
    for (int p = 0; p < LS_PHASE_COUNT; p++)
        if ((m->tokens_per_s_mask & (1u << p)) &&
            cJSON_AddNumberToObject(rates, ls_trace_phase_name((ls_trace_phase)p), m->tokens_per_s[p]) ==
                NULL)
            goto cleanup;
    if (!add_group(o, m, NUMS_C, COUNT(NUMS_C))) goto cleanup;
    *out = o;
    o = NULL;
    st = LS_OK;
cleanup:
    cJSON_Delete(o);
    return st;
}

ls_status ls_trace_decode_step_metrics(const cJSON *ev, ls_trace_step_metrics *out) {
    if (ev == NULL || out == NULL) return LS_ERR_ARG;
    if (ls_trace_event_check(LS_TRACE_STEP_METRICS, ev, NULL, 0) != LS_OK) return LS_ERR_SCHEMA;
    memset(out, 0, sizeof *out);
    ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev, "step"), &out->step);
    ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev, "tokens"), &out->tokens);
    out->prefix_frozen = ls_trace_event_prefix_frozen(ev);
    out->objective = (ls_trace_objective)ls_trace_enum_from_name(
        "objective", cJSON_GetObjectItemCaseSensitive(ev, "objective")->valuestring);
    out->has_reward_parts = cJSON_GetObjectItemCaseSensitive(ev, "reward_retrieval") != NULL;
    out->has_grad_compare = cJSON_GetObjectItemCaseSensitive(ev, "grad_norm_full") != NULL;
    out->has_grad_cosine = cJSON_GetObjectItemCaseSensitive(ev, "grad_cosine") != NULL;
    for (size_t g = 0; g < COUNT(GROUPS); g++)
        for (size_t i = 0; i < GROUPS[g].n; i++) {
            const cJSON *it = cJSON_GetObjectItemCaseSensitive(ev, GROUPS[g].f[i].name);
            if (it) set(out, &GROUPS[g].f[i], it->valuedouble);
        }
    const cJSON *rates = cJSON_GetObjectItemCaseSensitive(ev, "tokens_per_s");
    for (const cJSON *c = rates->child; c; c = c->next) {
        int p = ls_trace_enum_from_name("phase", c->string);
        out->tokens_per_s[p] = c->valuedouble;
        out->tokens_per_s_mask |= 1u << p;
    }
    return LS_OK;
}
