/* hf_json.h - reading a Hugging Face config.json's keys, for the families'
 * mappings (ls_family_desc.hf_map) and trainer/plan/plan_hf.c: every
 * reader checks type and range and names the key; errors read
 * "WHERE: key 'x': problem".  dtype-independent. */
#ifndef LS_TRAINER_HF_JSON_H
#define LS_TRAINER_HF_JSON_H
#include <stddef.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "common/status.h"

/* The entries of array a. */
#define LS_HF_N_OF(a) (sizeof(a) / sizeof *(a))
/* Returns code with "WHERE: " and the message in err: the readers' error form, for a function whose
 * parameters are named where, err and err_len (the mappings, the descriptors' checks, plan_hf.c). */
#define LS_HF_FAIL(code, ...)                                                                      \
    do {                                                                                           \
        int n_ = snprintf(err, err_len, "%s: ", where);                                           \
        if (n_ >= 0 && (size_t)n_ < err_len) snprintf(err + n_, err_len - (size_t)n_, __VA_ARGS__); \
        return code;                                                                               \
    } while (0)
/* LS_HF_FAIL(LS_ERR_FORMAT, ...) unless cond: the descriptors' consistency checks and the config loader. */
#define LS_HF_REQUIRE(cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond)) LS_HF_FAIL(LS_ERR_FORMAT, __VA_ARGS__);                                       \
    } while (0)

/* Every key of obj on `known` or `ign` (lists of n_known / n_ign names); the first that is not, by name
 * (LS_ERR_FORMAT). */
ls_status ls_hf_check_keys(const cJSON *obj, const char *const *known, size_t n_known, const char *const *ign,
                           size_t n_ign, const char *where, char *err, size_t err_len);
/* An integer key in [lo, hi]; absent or null: *out = dflt when dflt >= lo, else an error. */
ls_status ls_hf_get_int(const cJSON *obj, const char *key, long lo, long hi, long dflt, long *out,
                        const char *where, char *err, size_t err_len);
/* A number key in (lo, hi]; absent or null: *out = dflt when dflt > lo, else an error. */
ls_status ls_hf_get_real(const cJSON *obj, const char *key, double lo, double hi, double dflt, double *out,
                         const char *where, char *err, size_t err_len);
/* A boolean key that must be absent or hold `want` (LS_ERR_UNSUPPORTED naming `why` otherwise). */
ls_status ls_hf_want_bool(const cJSON *obj, const char *key, int want, const char *why, const char *where,
                          char *err, size_t err_len);
/* A string key that must be absent or equal `want`. */
ls_status ls_hf_want_str(const cJSON *obj, const char *key, const char *want, const char *why, const char *where,
                         char *err, size_t err_len);
/* rope_theta and partial_rotary_factor (partial NULL: not read): at the top level, in rope_parameters
 * (newer files) or both (then they must agree).  plain_rope: a rope_type other than default and any
 * rope_scaling are refused (LS_ERR_UNSUPPORTED, "the <family> family's RoPE is plain/unscaled"), else
 * rope_scaling is ignored (it does not change the planned shapes). */
ls_status ls_hf_get_rope(const cJSON *obj, const char *family, int plain_rope, double *theta, double *partial,
                         const char *where, char *err, size_t err_len);
#endif
