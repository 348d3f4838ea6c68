/* parity_decisions.c - no verdict across a near-tie (parity.h).
 *
 * A forward of the mla family makes discrete decisions: each DSA query's
 * top-k of its visible keys, each MoE token's kept groups and its experts
 * among them.  Two compositions of one forward (the naive full sequence,
 * LongStraw at CP-N, float32 beside float64) compute the values those
 * decisions compare with different rounding; where a decision's margin lies
 * within that rounding, the compositions may decide differently and a
 * comparison between them proves nothing about the code (a token routed to
 * an expert in one and not the other).  So before its checks speak, parity
 * measures every decision its fixture makes, in the independent reference
 * (tests/reference/mla_ref.py, float64, its class Margins: the gap between
 * the last value chosen and the best left out, relative to the largest
 * candidate), and holds the smallest against the composition noise of each
 * dtype with room to spare:
 *
 *   noise  = the largest relative disagreement of a log-prob between the
 *            dtype's runs and the float64 reference (float32: the float64
 *            naive run), at least one unit of roundoff of the dtype: the
 *            rounding a value of the forward carries after the whole depth
 *            of the model (an upper estimate for the values decided on,
 *            which lie before the head);
 *   pass   = noise / smallest relative margin <= 1 / LS_PARITY_DECISION_ROOM.
 *
 * The check reads as every other: max_rel_err (noise over margin) against
 * its tolerance (1 / room).  A fixture that fails is redrawn (parity_run.c:
 * other weights, up to LS_PARITY_DECISION_DRAWS draws); the last draw's
 * check stands in the report, failing levels 2-4 when no draw cleared.
 * The reference's output is read as untrusted: every field is checked. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "parity/plan/parity.h"

static const char *const KINDS[] = {"dsa_topk", "moe_group", "moe_expert"};
#define N_KINDS (sizeof KINDS / sizeof KINDS[0])

static bool finite_num(const cJSON *o, const char *k, double lo, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo) return false;
    *out = v->valuedouble;
    return true;
}

ls_status ls_parity_decisions_read(const cJSON *ref_doc, const char *what, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(ref_doc, "decisions");
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(d, "kinds");
    double count = 0;
    if (!cJSON_IsObject(d) || !cJSON_IsObject(kinds) || !finite_num(d, "count", 0, &count)) {
        snprintf(err, errlen, "%s: field 'decisions' is not {\"count\": N, \"kinds\": {...}}", what);
        return LS_ERR_FORMAT;
    }
    double sum = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, kinds) {
        bool known = false;
        for (size_t i = 0; i < N_KINDS; i++) known = known || strcmp(k->string, KINDS[i]) == 0;
        const cJSON *sm = cJSON_GetObjectItemCaseSensitive(k, "smallest");
        double n, rel, margin, scale, layer, pos;
        if (!known || !finite_num(k, "count", 1, &n) || !cJSON_IsObject(sm) || !finite_num(sm, "relative", 0, &rel) ||
            !finite_num(sm, "margin", 0, &margin) || !finite_num(sm, "scale", 0, &scale) ||
            !finite_num(sm, "layer", 0, &layer) || !finite_num(sm, "position", 0, &pos)) {
            snprintf(err, errlen, "%s: field 'decisions.kinds.%.40s' is not a known kind with a count >= 1 and a "
                     "smallest {relative, margin, scale, layer, position} (finite, >= 0)", what, k->string);
            return LS_ERR_FORMAT;
        }
        sum += n;
    }
    if (sum != count) {
        snprintf(err, errlen, "%s: field 'decisions.count' %.0f is not the sum of its kinds' counts (%.0f)", what, count,
                 sum);
        return LS_ERR_FORMAT;
    }
    *out = cJSON_Duplicate(d, 1);
    return *out ? LS_OK : LS_ERR_NOMEM;
}

int ls_parity_decisions_count(const cJSON *decisions) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(decisions, "count");
    return cJSON_IsNumber(c) && c->valuedouble < 1e9 ? (int)c->valuedouble : 0;
}

double ls_parity_decisions_unit(int dt) { return dt == LS_PARITY_F32 ? (double)FLT_EPSILON : DBL_EPSILON; }

cJSON *ls_parity_decisions_check(const cJSON *decisions, const bool expect[3], const char *config, int dt,
                                 double noise, uint64_t seed, int draw) {
    cJSON *arr = cJSON_CreateArray();
    const double tol = 1.0 / LS_PARITY_DECISION_ROOM;
    for (size_t i = 0; arr && i < N_KINDS; i++) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(decisions, "kinds"), KINDS[i]);
        if (k == NULL) { /* this fixture made no decision of that kind */
            if (expect[i]) {
                char name[96];
                snprintf(name, sizeof name, "%s: none made, though the model makes them", KINDS[i]);
                cJSON_AddItemToArray(arr, ls_parity_entry(name, (ls_parity_err){INFINITY, INFINITY},
                                                          1.0 / LS_PARITY_DECISION_ROOM, -1));
            }
            continue;
        }
        const cJSON *sm = cJSON_GetObjectItemCaseSensitive(k, "smallest");
        double rel = cJSON_GetObjectItemCaseSensitive(sm, "relative")->valuedouble;
        ls_parity_err e = {noise, rel > 0 ? noise / rel : INFINITY};
        char name[64];
        snprintf(name, sizeof name, "%s", KINDS[i]);
        cJSON *en = ls_parity_entry(name, e, tol, -1);
        if (en == NULL) continue;
        cJSON_AddNumberToObject(en, "decisions", cJSON_GetObjectItemCaseSensitive(k, "count")->valuedouble);
        cJSON_AddNumberToObject(en, "relative_margin", rel);
        static const char *const F[] = {"margin", "scale", "layer", "position"};
        for (size_t f = 0; f < sizeof F / sizeof F[0]; f++)
            cJSON_AddNumberToObject(en, F[f], cJSON_GetObjectItemCaseSensitive(sm, F[f])->valuedouble);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(sm, "member");
        if (cJSON_IsNumber(m) && m->valuedouble >= 0 && m->valuedouble < 1e6)
            cJSON_AddNumberToObject(en, "member", m->valuedouble);
        cJSON_AddItemToArray(arr, en);
    }
    char name[256], cand[160];
    snprintf(name, sizeof name, "decisions %s %s", config, ls_parity_dtype_name(dt));
    snprintf(cand, sizeof cand, "%s composition noise (seed %llu, draw %d)", ls_parity_dtype_name(dt),
             (unsigned long long)seed, draw);
    return ls_parity_check_new("decisions", name, dt, 1, config, NULL,
                               "every discrete decision's margin (independent reference, float64)", cand, arr,
                               "decisions");
}

static int model_int(const cJSON *mc, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(mc, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= (1 << 24) ? (int)v->valuedouble : 0;
}

void ls_parity_decisions_expect(const cJSON *mc, int T, bool expect[3]) {
    expect[0] = expect[1] = expect[2] = false;
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(mc, "family");
    const ls_parity_family *f = cJSON_IsString(fam) ? ls_parity_family_of(fam->valuestring) : NULL;
    if (!f || !f->decisions) return; /* its forward makes no discrete decision (its parity facts) */
    const ls_parity_decision_keys *d = &f->dkeys;
    int topk = model_int(mc, d->topk), E = model_int(mc, d->experts), ng = model_int(mc, d->groups);
    int kg = model_int(mc, d->kept_groups), k = model_int(mc, d->per_token);
    bool moe = model_int(mc, "n_layers") > model_int(mc, d->dense_layers);
    expect[0] = topk > 0 && T > topk;
    expect[1] = moe && kg < ng;
    expect[2] = moe && ng > 0 && E % ng == 0 && k < kg * (E / ng);
}
