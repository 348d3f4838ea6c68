/* config.c - model config loading/validation and serialisation (docs/model.md §6). */
#include "trainer/model/config.h"

#include "common/checked.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "trainer/model/hf_json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ls_objective_defaults(ls_objective *o) {
    memset(o, 0, sizeof *o);
    o->train_mode = LS_TRAIN_LORA;
    o->lora_r = 4;
    o->lora_alpha = 8.0;
    o->grad_mode = LS_GRAD_DETACHED;
    o->epsilon = 0.2;
    o->beta = 0.04;
    o->temperature = 1.0;
}

/* Integer keys with their sane ranges.  The upper bounds keep every
 * product the trainer forms from them inside size_t on their own; the
 * overflow check of the parameter count (ls_config_param_counts) and the
 * memory plan catch what their combinations imply. */
typedef struct {
    const char *key;
    size_t off;
    int lo, hi;
    const char *hi_name; /* the bound as a power of two, for messages */
} int_key;
#define DIM (1 << 20)
#define HEADDIM (1 << 16)
#define HEADS 4096
#define IK(f, lo, hi, hn) { #f, offsetof(ls_model_config, f), lo, hi, hn }
static const int_key COMMON_INT[] = {
    IK(vocab, 2, 1 << 24, "2^24"), IK(d_model, 1, DIM, "2^20"), IK(n_layers, 1, HEADS, "4096"),
    IK(ffn_dim, 1, DIM, "2^20") };
#undef IK
#define N_OF(a) (sizeof(a) / sizeof *(a))

static const char *const COMMON_REAL[] = {"family", "rms_eps", "rope_theta"};
static const char *const OBJECTIVE_KEYS[] = {"train_mode", "lora_r",   "lora_alpha", "lora_experts",
                                             "grad_mode",  "epsilon", "beta",       "temperature"};

const char *ls_config_layer_kind(const ls_model_config *c, int layer) { return c->family->layer_kind(c, layer); }

static const ls_family_key *family_key(const ls_family_desc *f, const char *key) {
    for (size_t i = 0; f && i < f->n_keys; i++)
        if (!strcmp(f->keys[i].key, key)) return &f->keys[i];
    return NULL;
}

ls_status ls_config_key_get(const ls_model_config *c, const char *key, double *out) {
    const ls_family_key *k = family_key(c->family, key);
    if (!k) return LS_ERR_ARG;
    const unsigned char *at = c->fam_keys.bytes + k->off;
    if (k->type == LS_FKEY_INT) {
        int v;
        memcpy(&v, at, sizeof v);
        *out = v;
    } else {
        memcpy(out, at, sizeof *out);
    }
    return LS_OK;
}

ls_status ls_config_key_set(ls_model_config *c, const char *key, double v) {
    const ls_family_key *k = family_key(c->family, key);
    if (!k) return LS_ERR_ARG;
    unsigned char *at = c->fam_keys.bytes + k->off;
    if (k->type == LS_FKEY_INT) {
        int iv = (int)v;
        memcpy(at, &iv, sizeof iv);
    } else {
        memcpy(at, &v, sizeof v);
    }
    return LS_OK;
}

void ls_config_init(ls_model_config *c, const ls_family_desc *f) {
    memset(c, 0, sizeof *c);
    c->family = f;
}

/* ---- the parameter count in closed form ------------------------------------ */

void ls_count_term(ls_count *c, size_t a, size_t b, size_t m, const char *name) {
    double x = (double)a * (double)b * (double)m;
    c->n = ls_sat_add(c->n, ls_sat_mul3(a, b, m));
    c->approx += x;
    if (x > c->big) c->big = x, c->big_name = name;
}

void ls_count_lin(ls_count *base, ls_count *adapt, size_t out, size_t in, size_t m, size_t r, const char *name) {
    ls_count_term(base, out, in, m, name);
    if (r) {
        ls_count_term(adapt, r, in, m, "'lora_r' x the adapted dims x 'n_layers'");
        ls_count_term(adapt, out, r, m, "'lora_r' x the adapted dims x 'n_layers'");
    }
}

/* Base and adapter scalars of the family's table; r = 0 when there are no
 * adapters. */
static void family_counts(const ls_model_config *c, size_t r, int lora_experts, ls_count *base, ls_count *adapt,
                          size_t *frozen) {
    memset(base, 0, sizeof *base);
    memset(adapt, 0, sizeof *adapt);
    *frozen = 0;
    c->family->counts(c, r, lora_experts, base, adapt, frozen);
}

static ls_status counts_where(const ls_model_config *c, const ls_objective *obj, ls_param_counts *out,
                              const char *where, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    int lora = obj && obj->train_mode == LS_TRAIN_LORA;
    if (lora && obj->lora_r < 1) {
        snprintf(err, err_len, "lora_r: must be >= 1");
        return LS_ERR_ARG;
    }
    ls_count base, adapt;
    size_t frozen = 0;
    family_counts(c, lora ? (size_t)obj->lora_r : 0, obj && obj->lora_experts, &base, &adapt, &frozen);
    /* the byte count of every block must fit too: 8-byte reals, and the
     * weights block holds the reference copy as well in full mode */
    const ls_count *bad = base.n > SIZE_MAX / 16 ? &base : adapt.n > SIZE_MAX / 16 ? &adapt : NULL;
    if (bad) {
        snprintf(err, err_len,
                 "%s: %s implies %.3g parameters, %.3g bytes of float64 weights: more than size_t can count",
                 where, bad->big_name, bad->approx, 8 * bad->approx);
        return LS_ERR_FORMAT;
    }
    out->base = base.n;
    out->adapters = lora ? adapt.n : 0;
    out->trainable = lora ? adapt.n : base.n - (frozen < base.n ? frozen : base.n);
    out->reference = obj && obj->train_mode == LS_TRAIN_FULL ? base.n : 0;
    return LS_OK;
}

ls_status ls_config_param_counts(const ls_model_config *c, const ls_objective *obj, ls_param_counts *out,
                                 char *err, size_t err_len) {
    return counts_where(c, obj, out, "config", err, err_len);
}

ls_status ls_config_param_counts_ep(const ls_model_config *c, const ls_objective *obj, int ep,
                                    ls_param_counts *out, char *err, size_t err_len) {
    ls_status st = counts_where(c, obj, out, "config", err, err_len);
    if (st != LS_OK || ep <= 1) return st;
    int E = c->family->routed_experts ? c->family->routed_experts(c) : 0;
    if (E < 1 || E % ep != 0 || !c->family->ep_others) {
        memset(out, 0, sizeof *out);
        snprintf(err, err_len, "ep %d: does not divide the %d routed experts of the config", ep, E);
        return LS_ERR_ARG;
    }
    /* the routed experts another EP rank holds (E - E/ep of them in each MoE layer) */
    int lora = obj && obj->train_mode == LS_TRAIN_LORA;
    size_t base = 0, adapt = 0;
    c->family->ep_others(c, ep, lora ? (size_t)obj->lora_r : 0, lora && obj->lora_experts, &base, &adapt);
    out->base -= base;
    out->adapters -= adapt;
    out->trainable -= lora ? adapt : base;
    if (out->reference) out->reference -= base;
    return LS_OK;
}

static ls_status check_where(const ls_model_config *c, const char *where, char *err, size_t err_len);

/* ---- reading ------------------------------------------------------------------- */

static ls_status get_int(const cJSON *obj, const int_key *k, ls_model_config *c, const char *where,
                         char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, k->key);
    if (!it) {
        snprintf(err, err_len, "%s: key '%s': missing", where, k->key);
        return LS_ERR_FORMAT;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
        it->valuedouble > 2147483647.0) {
        snprintf(err, err_len, "%s: key '%s': must be an integer in [%d, %s]", where, k->key, k->lo, k->hi_name);
        return LS_ERR_FORMAT;
    }
    *(int *)((char *)c + k->off) = (int)it->valuedouble;
    return LS_OK;
}

static ls_status get_real(const cJSON *obj, const char *key, double hi, double *out, const char *where,
                          char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        snprintf(err, err_len, "%s: key '%s': missing", where, key);
        return LS_ERR_FORMAT;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble <= 0 || it->valuedouble > hi) {
        snprintf(err, err_len, "%s: key '%s': must be a number in (0, %g]", where, key, hi);
        return LS_ERR_FORMAT;
    }
    *out = it->valuedouble;
    return LS_OK;
}

static ls_status get_ints(const cJSON *obj, const int_key *keys, size_t n, ls_model_config *c,
                          const char *where, char *err, size_t err_len) {
    for (size_t i = 0; i < n; i++) {
        ls_status st = get_int(obj, &keys[i], c, where, err, err_len);
        if (st != LS_OK) return st;
    }
    return LS_OK;
}

/* The family's keys, in its table's order, into its block of c: an int as
 * get_int reads it (its range is checked by check_where), a real in
 * (lo, hi]; a missing key with a default takes it. */
static ls_status get_family_keys(const cJSON *obj, ls_model_config *c, const char *where, char *err,
                                 size_t err_len) {
    const ls_family_desc *f = c->family;
    for (size_t i = 0; i < f->n_keys; i++) {
        const ls_family_key *k = &f->keys[i];
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, k->key);
        double v;
        if (!it && k->has_default) {
            v = k->dflt;
        } else if (!it) {
            snprintf(err, err_len, "%s: key '%s': missing", where, k->key);
            return LS_ERR_FORMAT;
        } else if (k->type == LS_FKEY_INT) {
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
                it->valuedouble > 2147483647.0) {
                snprintf(err, err_len, "%s: key '%s': must be an integer in [%d, %s]", where, k->key, (int)k->lo,
                         k->hi_name);
                return LS_ERR_FORMAT;
            }
            v = it->valuedouble;
        } else {
            if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !(it->valuedouble > k->lo) ||
                it->valuedouble > k->hi) {
                snprintf(err, err_len, "%s: key '%s': must be a number in (%g, %g]", where, k->key, k->lo, k->hi);
                return LS_ERR_FORMAT;
            }
            v = it->valuedouble;
        }
        ls_config_key_set(c, k->key, v);
    }
    return LS_OK;
}

static int in_ints(const int_key *keys, size_t n, const char *k) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(keys[i].key, k)) return 1;
    return 0;
}

static int in_names(const char *const *names, size_t n, const char *k) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], k)) return 1;
    return 0;
}

/* Edit distance of two short keys, capped at 3 (enough to spot a typo). */
static int distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return 3;
    int row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb] < 3 ? row[nb] : 3;
}

/* The closest key of the family (and the objective keys when allowed)
 * within edit distance 2, or NULL. */
static const char *closest(const ls_family_desc *f, int objective, const char *k) {
    const char *best = NULL;
    int bd = 3;
#define TRY(name)                              \
    do {                                       \
        int d_ = distance(k, (name));          \
        if (d_ < bd) bd = d_, best = (name);   \
    } while (0)
    for (size_t i = 0; i < N_OF(COMMON_INT); i++) TRY(COMMON_INT[i].key);
    for (size_t i = 0; i < N_OF(COMMON_REAL); i++) TRY(COMMON_REAL[i]);
    for (size_t i = 0; i < f->n_keys; i++) TRY(f->keys[i].key);
    if (objective)
        for (size_t i = 0; i < N_OF(OBJECTIVE_KEYS); i++) TRY(OBJECTIVE_KEYS[i]);
#undef TRY
    return best;
}

/* Every key of obj must be one of the family's (docs/model.md §6). */
static ls_status check_keys(const cJSON *obj, const ls_family_desc *f, int objective, const char *where, char *err,
                            size_t err_len) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        int mine = in_ints(COMMON_INT, N_OF(COMMON_INT), k) || in_names(COMMON_REAL, N_OF(COMMON_REAL), k) ||
                   family_key(f, k) != NULL; /* its own (a key two families share is each one's) */
        int objk = in_names(OBJECTIVE_KEYS, N_OF(OBJECTIVE_KEYS), k);
        const ls_family_desc *other = mine ? NULL : ls_family_owning_key(k, f);
        if (mine || (objective && objk)) continue;
        if (other) {
            snprintf(err, err_len, "%s: key '%.64s': belongs to the %s family, not to this %s config", where, k,
                     other->name, f->name);
        } else if (objk) {
            snprintf(err, err_len,
                     "%s: key '%.64s': an objective setting, not a model config key (give it on the command line)",
                     where, k);
        } else {
            const char *near = closest(f, objective, k);
            if (near)
                snprintf(err, err_len, "%s: key '%.64s': unknown (did you mean '%s'?)", where, k, near);
            else
                snprintf(err, err_len, "%s: key '%.64s': unknown; a %s config has only the keys of docs/model.md section 6",
                         where, k, f->name);
        }
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

static ls_status parse_model(ls_model_config *c, const cJSON *obj, int objective, const char *where, char *err,
                             size_t err_len) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(obj)) {
        snprintf(err, err_len, "%s: not a JSON object", where);
        return LS_ERR_FORMAT;
    }
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(obj, "family");
    if (!cJSON_IsString(fam)) {
        snprintf(err, err_len, "%s: key 'family': missing or not a string", where);
        return LS_ERR_FORMAT;
    }
    c->family = ls_family_find(fam->valuestring);
    if (!c->family) {
        char names[256];
        ls_family_list_names(names, sizeof names);
        snprintf(err, err_len, "%s: key 'family': '%.64s' is not one of this build's families (%s)", where,
                 fam->valuestring, names);
        return LS_ERR_FORMAT;
    }
    ls_status st = check_keys(obj, c->family, objective, where, err, err_len);
    if (st == LS_OK) st = get_ints(obj, COMMON_INT, N_OF(COMMON_INT), c, where, err, err_len);
    if (st == LS_OK) st = get_real(obj, "rms_eps", 1.0, &c->rms_eps, where, err, err_len);
    if (st == LS_OK) st = get_real(obj, "rope_theta", 1e12, &c->rope_theta, where, err, err_len);
    if (st != LS_OK) return st;
    if ((st = get_family_keys(obj, c, where, err, err_len)) != LS_OK) return st;
    return check_where(c, where, err, err_len);
}

ls_status ls_config_from_json(ls_model_config *c, const cJSON *obj, const char *where,
                              char *err, size_t err_len) {
    return parse_model(c, obj, 0, where, err, err_len);
}

static ls_status get_choice(const cJSON *obj, const char *key, const char *a, const char *b, int *out,
                            const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(it) || (strcmp(it->valuestring, a) && strcmp(it->valuestring, b))) {
        snprintf(err, err_len, "%s: key '%s': missing or not \"%s\" or \"%s\"", where, key, a, b);
        return LS_ERR_FORMAT;
    }
    *out = strcmp(it->valuestring, a) != 0;
    return LS_OK;
}

static ls_status get_range(const cJSON *obj, const char *key, double lo, double hi, int integer, double *out,
                           const char *where, char *err, size_t err_len) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < lo || it->valuedouble > hi ||
        (integer && it->valuedouble != floor(it->valuedouble))) {
        snprintf(err, err_len, "%s: key '%s': missing or not %s in [%g, %g]", where, key,
                 integer ? "an integer" : "a number", lo, hi);
        return LS_ERR_FORMAT;
    }
    *out = it->valuedouble;
    return LS_OK;
}

ls_status ls_config_from_json_with_objective(ls_model_config *c, ls_objective *o, const cJSON *obj,
                                             const char *where, char *err, size_t err_len) {
    ls_objective_defaults(o);
    ls_status st = parse_model(c, obj, 1, where, err, err_len);
    if (st != LS_OK) return st;
    int tm = 0, gm = 0;
    double r = 0;
    const cJSON *le = cJSON_GetObjectItemCaseSensitive(obj, "lora_experts");
    if ((st = get_choice(obj, "train_mode", "lora", "full", &tm, where, err, err_len)) != LS_OK ||
        (st = get_choice(obj, "grad_mode", "detached", "full", &gm, where, err, err_len)) != LS_OK ||
        (st = get_range(obj, "lora_r", 1, 1024, 1, &r, where, err, err_len)) != LS_OK ||
        (st = get_range(obj, "lora_alpha", 1e-6, 1e6, 0, &o->lora_alpha, where, err, err_len)) != LS_OK ||
        (st = get_range(obj, "epsilon", 0, 1, 0, &o->epsilon, where, err, err_len)) != LS_OK ||
        (st = get_range(obj, "beta", 0, 100, 0, &o->beta, where, err, err_len)) != LS_OK ||
        (st = get_range(obj, "temperature", 1e-3, 1e3, 0, &o->temperature, where, err, err_len)) != LS_OK)
        return st;
    if (!cJSON_IsBool(le)) {
        snprintf(err, err_len, "%s: key 'lora_experts': missing or not a boolean", where);
        return LS_ERR_FORMAT;
    }
    o->train_mode = tm ? LS_TRAIN_FULL : LS_TRAIN_LORA;
    o->grad_mode = gm ? LS_GRAD_FULL : LS_GRAD_DETACHED;
    o->lora_r = (int)r;
    o->lora_experts = cJSON_IsTrue(le);
    return LS_OK;
}

#define REQUIRE LS_HF_REQUIRE

/* A key above its bound, named with the size the config implies (so
 * "d_model 1e9" reads as the absurd model it is). */
static ls_status above(const ls_model_config *c, const char *key, double v, double hi, const char *hi_name,
                       const char *where, char *err, size_t err_len) {
    ls_count b, a;
    size_t frozen;
    family_counts(c, 0, 0, &b, &a, &frozen);
    REQUIRE(0, "key '%s': %.17g is above the limit %.17g (%s); this config implies %.3g parameters, "
               "%.3g bytes of weights as float32 (largest term %s: %.3g)",
            key, v, hi, hi_name, b.approx, 4 * b.approx, b.big_name ? b.big_name : "-", b.big);
    return LS_ERR_FORMAT; /* REQUIRE(0) returned; -O0 (the sanitizer build) does not see it */
}

/* Each shared int key within its range. */
static ls_status check_ranges(const ls_model_config *c, const int_key *keys, size_t n, const char *where,
                              char *err, size_t err_len) {
    for (size_t i = 0; i < n; i++) {
        int v = *(const int *)((const char *)c + keys[i].off);
        REQUIRE(v >= keys[i].lo, "key '%s': %d is below the minimum %d", keys[i].key, v, keys[i].lo);
        if (v > keys[i].hi) return above(c, keys[i].key, v, keys[i].hi, keys[i].hi_name, where, err, err_len);
    }
    return LS_OK;
}

/* Each of the family's keys within its range (an int in [lo, hi], a real in (lo, hi]). */
static ls_status check_family_ranges(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    const ls_family_desc *f = c->family;
    for (size_t i = 0; i < f->n_keys; i++) {
        const ls_family_key *k = &f->keys[i];
        double v = 0;
        ls_config_key_get(c, k->key, &v);
        if (k->type == LS_FKEY_INT) {
            REQUIRE(v >= k->lo, "key '%s': %d is below the minimum %d", k->key, (int)v, (int)k->lo);
        } else {
            REQUIRE(isfinite(v) && v > k->lo, "key '%s': %g must be above %g", k->key, v, k->lo);
        }
        if (v > k->hi) return above(c, k->key, v, k->hi, k->hi_name, where, err, err_len);
    }
    return LS_OK;
}

static ls_status check_where(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    REQUIRE(c->family, "key 'family': not set");
    ls_status st = check_ranges(c, COMMON_INT, N_OF(COMMON_INT), where, err, err_len);
    if (st != LS_OK) return st;
    if ((st = check_family_ranges(c, where, err, err_len)) != LS_OK) return st;
    if ((st = c->family->check(c, where, err, err_len)) != LS_OK) return st;
    ls_param_counts pc;
    return counts_where(c, NULL, &pc, where, err, err_len);
}
#undef REQUIRE

ls_status ls_config_check(const ls_model_config *c, char *err, size_t err_len) {
    return check_where(c, "config", err, err_len);
}

ls_status ls_config_load_digest(ls_model_config *out, const char *path, char sha256[LS_DIGEST_HEX_SIZE], char *err,
                                size_t err_len) {
    cJSON *obj = NULL;
    char *buf = NULL;
    size_t len = 0;
    /* errors name the file; the cap refuses huge files and endless streams */
    ls_status st = ls_json_read_bytes_capped(path, LS_CONFIG_MAX_FILE_BYTES, &buf, &len, err, err_len);
    if (st == LS_OK) st = ls_json_parse(buf, len, path, &obj, err, err_len);
    if (st == LS_OK) st = ls_config_from_json(out, obj, path, err, err_len);
    if (st == LS_OK && sha256 && (st = ls_digest_sha256_hex(buf, len, sha256)) != LS_OK)
        snprintf(err, err_len, "%s: cannot digest the file: %s", path, ls_status_str(st));
    cJSON_Delete(obj);
    free(buf);
    return st;
}

ls_status ls_config_load(ls_model_config *out, const char *path, char *err, size_t err_len) {
    return ls_config_load_digest(out, path, NULL, err, err_len);
}

static void add_ints(cJSON *o, const ls_model_config *c, const int_key *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, keys[i].key, *(const int *)((const char *)c + keys[i].off));
}

cJSON *ls_config_to_json(const ls_model_config *c, const ls_objective *ob) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "family", ls_family_name(c->family));
    add_ints(o, c, COMMON_INT, N_OF(COMMON_INT));
    cJSON_AddNumberToObject(o, "rms_eps", c->rms_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    for (size_t i = 0; c->family && i < c->family->n_keys; i++) {
        double v = 0;
        ls_config_key_get(c, c->family->keys[i].key, &v);
        cJSON_AddNumberToObject(o, c->family->keys[i].key, v);
    }
    if (ob) {
        cJSON_AddStringToObject(o, "train_mode", ob->train_mode == LS_TRAIN_FULL ? "full" : "lora");
        cJSON_AddNumberToObject(o, "lora_r", ob->lora_r);
        cJSON_AddNumberToObject(o, "lora_alpha", ob->lora_alpha);
        cJSON_AddBoolToObject(o, "lora_experts", ob->lora_experts);
        cJSON_AddStringToObject(o, "grad_mode", ob->grad_mode == LS_GRAD_FULL ? "full" : "detached");
        cJSON_AddNumberToObject(o, "epsilon", ob->epsilon);
        cJSON_AddNumberToObject(o, "beta", ob->beta);
        cJSON_AddNumberToObject(o, "temperature", ob->temperature);
    }
    return o;
}
