/* hf_json.c - a Hugging Face config.json's keys (hf_json.h). */
#include "trainer/model/hf_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define N_OF LS_HF_N_OF
#define FAIL LS_HF_FAIL

static int in_list(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (strcmp(key, list[i]) == 0) return 1;
    return 0;
}

/* Every key of obj known (mapped, required or ignored); the first that is not, by name. */
ls_status ls_hf_check_keys(const cJSON *obj, const char *const *known, size_t n_known, const char *const *ign,
                            size_t n_ign, const char *where, char *err, size_t err_len) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (!it->string) FAIL(LS_ERR_FORMAT, "an object member without a name");
        if (!in_list(it->string, known, n_known) && !in_list(it->string, ign, n_ign))
            FAIL(LS_ERR_FORMAT, "key '%s': unknown to the planner's mapping (docs/plan.md); refused so that "
                                "an architecture change is not silently ignored", it->string);
    }
    return LS_OK;
}

/* An integer key in [lo, hi]; absent: *out = dflt when dflt >= lo, else an error. */
ls_status ls_hf_get_int(const cJSON *obj, const char *key, long lo, long hi, long dflt, long *out,
                         const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) {
        if (dflt >= lo) {
            *out = dflt;
            return LS_OK;
        }
        FAIL(LS_ERR_FORMAT, "key '%s': missing", key);
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < (double)lo || it->valuedouble > (double)hi)
        FAIL(LS_ERR_FORMAT, "key '%s': must be an integer in [%ld, %ld]", key, lo, hi);
    *out = (long)it->valuedouble;
    return LS_OK;
}

/* A number key in (lo, hi]; absent: *out = dflt when dflt > lo, else an error. */
ls_status ls_hf_get_real(const cJSON *obj, const char *key, double lo, double hi, double dflt, double *out,
                          const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) {
        if (dflt > lo) {
            *out = dflt;
            return LS_OK;
        }
        FAIL(LS_ERR_FORMAT, "key '%s': missing", key);
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !(it->valuedouble > lo) || it->valuedouble > hi)
        FAIL(LS_ERR_FORMAT, "key '%s': must be a number in (%g, %g]", key, lo, hi);
    *out = it->valuedouble;
    return LS_OK;
}

/* A boolean key that must be absent or hold `want` (the family implements only that). */
ls_status ls_hf_want_bool(const cJSON *obj, const char *key, int want, const char *why, const char *where,
                           char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return LS_OK;
    if (!cJSON_IsBool(it)) FAIL(LS_ERR_FORMAT, "key '%s': must be true or false", key);
    if (cJSON_IsTrue(it) != want) FAIL(LS_ERR_UNSUPPORTED, "key '%s': must be %s (%s)", key, want ? "true" : "false", why);
    return LS_OK;
}

/* A string key that must be absent or equal `want`. */
ls_status ls_hf_want_str(const cJSON *obj, const char *key, const char *want, const char *why,
                          const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return LS_OK;
    if (!cJSON_IsString(it) || !it->valuestring) FAIL(LS_ERR_FORMAT, "key '%s': must be a string", key);
    if (strcmp(it->valuestring, want) != 0)
        FAIL(LS_ERR_UNSUPPORTED, "key '%s': \"%.40s\" is not supported (must be \"%s\": %s)", key, it->valuestring,
             want, why);
    return LS_OK;
}

ls_status ls_hf_get_rope(const cJSON *obj, const char *family, int plain_rope, double *theta, double *partial,
                         const char *where,
                          char *err, size_t err_len) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(obj, "rope_parameters");
    ls_status st;
    double t_top = 0, t_rp = 0, p_top = 0, p_rp = 0;
    if ((st = ls_hf_get_real(obj, "rope_theta", 0, 1e12, -1, &t_top, where, err, err_len)) != LS_OK &&
        cJSON_GetObjectItemCaseSensitive(obj, "rope_theta"))
        return st;
    if (partial && (st = ls_hf_get_real(obj, "partial_rotary_factor", 0, 1, -1, &p_top, where, err, err_len)) != LS_OK &&
        cJSON_GetObjectItemCaseSensitive(obj, "partial_rotary_factor"))
        return st;
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) FAIL(LS_ERR_FORMAT, "key 'rope_parameters': must be an object");
        static const char *const RP[] = {"rope_theta", "partial_rotary_factor", "rope_type", "mrope_interleaved",
                                         "mrope_section", "factor", "beta_fast", "beta_slow", "mscale",
                                         "mscale_all_dim", "original_max_position_embeddings"};
        char w2[256];
        snprintf(w2, sizeof w2, "%s: rope_parameters", where);
        if ((st = ls_hf_check_keys(rp, RP, N_OF(RP), NULL, 0, w2, err, err_len)) != LS_OK) return st;
        if (cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") &&
            (st = ls_hf_get_real(rp, "rope_theta", 0, 1e12, -1, &t_rp, w2, err, err_len)) != LS_OK)
            return st;
        if (partial && cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") &&
            (st = ls_hf_get_real(rp, "partial_rotary_factor", 0, 1, -1, &p_rp, w2, err, err_len)) != LS_OK)
            return st;
        char why_plain[96];
        snprintf(why_plain, sizeof why_plain, "the %s family's RoPE is plain", family);
        if (plain_rope && (st = ls_hf_want_str(rp, "rope_type", "default", why_plain, w2, err,
                                     err_len)) != LS_OK)
            return st;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(obj, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsObject(rs)) FAIL(LS_ERR_FORMAT, "key 'rope_scaling': must be an object or null");
        if (plain_rope) FAIL(LS_ERR_UNSUPPORTED, "key 'rope_scaling': the %s family's RoPE is unscaled", family);
    }
    if (t_top > 0 && t_rp > 0 && t_top != t_rp)
        FAIL(LS_ERR_FORMAT, "key 'rope_theta': %g disagrees with rope_parameters.rope_theta %g", t_top, t_rp);
    *theta = t_rp > 0 ? t_rp : t_top;
    if (!(*theta > 0)) FAIL(LS_ERR_FORMAT, "key 'rope_theta': missing (top level or in rope_parameters)");
    if (partial) {
        if (p_top > 0 && p_rp > 0 && p_top != p_rp)
            FAIL(LS_ERR_FORMAT, "key 'partial_rotary_factor': %g disagrees with rope_parameters' %g", p_top, p_rp);
        *partial = p_rp > 0 ? p_rp : (p_top > 0 ? p_top : 1.0);
    }
    return LS_OK;
}

