/* config.c - model config loading/validation and serialisation (docs/model.md §6). */
#include "trainer/model/config.h"

#include "common/checked.h"
#include "receipts/digest.h"
#include "receipts/json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ls_family_name(ls_family f) {
    if (f == LS_FAMILY_DENSE) return "dense"; /* TEMP(dense) */
    return f == LS_FAMILY_MLA ? "mla" : "hybrid";
}


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
static const int_key HYBRID_INT[] = {
    IK(gdn_hk, 1, HEADS, "4096"), IK(gdn_hv, 1, HEADS, "4096"), IK(gdn_dk, 1, HEADDIM, "2^16"),
    IK(gdn_dv, 1, HEADDIM, "2^16"), IK(conv_kernel, 1, 256, "256"), IK(attn_heads, 1, HEADS, "4096"),
    IK(attn_kv_heads, 1, HEADS, "4096"), IK(head_dim, 2, HEADDIM, "2^16"), IK(rope_dim, 0, HEADDIM, "2^16") };
/* TEMP(dense): the dense family's keys, the hybrid attention layer's (trainer/families/dense/README.md) */
static const int_key DENSE_INT[] = {
    IK(attn_heads, 1, HEADS, "4096"), IK(attn_kv_heads, 1, HEADS, "4096"), IK(head_dim, 2, HEADDIM, "2^16"),
    IK(rope_dim, 0, HEADDIM, "2^16") };
static const int_key MLA_INT[] = {
    IK(first_dense, 0, HEADS, "4096"), IK(heads, 1, HEADS, "4096"), IK(q_rank, 1, DIM, "2^20"),
    IK(kv_rank, 1, DIM, "2^20"), IK(d_nope, 0, HEADDIM, "2^16"), IK(d_rope, 0, HEADDIM, "2^16"),
    IK(d_v, 1, HEADDIM, "2^16"), IK(index_heads, 1, HEADS, "4096"), IK(index_dim, 1, HEADDIM, "2^16"),
    IK(index_topk, 1, 1 << 30, "2^30"), IK(n_experts, 1, 1 << 16, "2^16"), IK(n_group, 1, 1 << 16, "2^16"),
    IK(topk_group, 1, 1 << 16, "2^16"), IK(experts_per_token, 1, 1 << 16, "2^16"),
    IK(expert_dim, 1, DIM, "2^20") };
#undef IK
#define N_OF(a) (sizeof(a) / sizeof *(a))

static const char *const COMMON_REAL[] = {"family", "rms_eps", "rope_theta"};
static const char *const MLA_REAL[] = {"routed_scale"};
static const char *const OBJECTIVE_KEYS[] = {"train_mode", "lora_r",   "lora_alpha", "lora_experts",
                                             "grad_mode",  "epsilon", "beta",       "temperature"};

int ls_config_layer_is_attn(const ls_model_config *c, int layer) {
    if (c->family == LS_FAMILY_DENSE) return 1; /* TEMP(dense) */
    return (layer + 1) % 4 == 0;
}

ls_layer_kind ls_config_layer_kind(const ls_model_config *c, int layer) {
    if (c->family == LS_FAMILY_MLA) return LS_LAYER_MLA;
    return ls_config_layer_is_attn(c, layer) ? LS_LAYER_ATTN : LS_LAYER_GDN;
}

/* ---- the parameter count in closed form ------------------------------------ */

/* Accumulates a count exactly (saturating at SIZE_MAX) and approximately
 * (double, for messages about configs whose counts do not fit), and
 * remembers its largest term for those messages. */
typedef struct {
    size_t n;
    double approx, big;
    const char *big_name;
} count;

static void term(count *c, size_t a, size_t b, size_t m, const char *name) {
    double x = (double)a * (double)b * (double)m;
    c->n = ls_sat_add(c->n, ls_sat_mul3(a, b, m));
    c->approx += x;
    if (x > c->big) c->big = x, c->big_name = name;
}

/* A linear [out, in] repeated m times, with its LoRA pair (A [r, in],
 * B [out, r]) when r > 0. */
static void lin(count *base, count *adapt, size_t out, size_t in, size_t m, size_t r, const char *name) {
    term(base, out, in, m, name);
    if (r) {
        term(adapt, r, in, m, "'lora_r' x the adapted dims x 'n_layers'");
        term(adapt, out, r, m, "'lora_r' x the adapted dims x 'n_layers'");
    }
}

/* Base and adapter scalars of the hybrid table, in params.c's build order
 * (docs/model.md §5); r = 0 when there are no adapters.  Layer i is attention
 * iff (i+1) % 4 == 0 (ls_config_layer_is_attn), so L/4 of them are; every
 * layer of a dense model (TEMP(dense): its GDN keys are 0). */
static void hybrid_counts(const ls_model_config *c, size_t r, count *base, count *adapt) {
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, I = (size_t)c->ffn_dim, L = (size_t)c->n_layers;
    size_t n_attn = c->family == LS_FAMILY_DENSE ? L : L / 4, n_gdn = L - n_attn;
    size_t H = (size_t)c->attn_heads, Hkv = (size_t)c->attn_kv_heads, hd = (size_t)c->head_dim;
    size_t Hk = (size_t)c->gdn_hk, Hv = (size_t)c->gdn_hv, dk = (size_t)c->gdn_dk, dv = (size_t)c->gdn_dv;
    size_t K = (size_t)c->conv_kernel;
    size_t C = ls_sat_add(ls_sat_mul3(2, Hk, dk), ls_sat_mul(Hv, dv));
    memset(base, 0, sizeof *base);
    memset(adapt, 0, sizeof *adapt);
    term(base, V, d, 2, "'vocab' x 'd_model' (embed, lm_head)");
    term(base, d, 1, 1, "'d_model' (final norm)");
    term(base, d, 2, L, "'d_model' x 'n_layers' (norms)");
    lin(base, adapt, I, d, 2 * L, r, "'ffn_dim' x 'd_model' x 'n_layers' (MLP)"); /* gate, up */
    lin(base, adapt, d, I, L, r, "'ffn_dim' x 'd_model' x 'n_layers' (MLP)");     /* down */
    lin(base, adapt, ls_sat_mul3(2, H, hd), d, n_attn, r,
        "'attn_heads' x 'head_dim' x 'd_model' x 'n_layers' (attention q)");
    lin(base, adapt, ls_sat_mul(Hkv, hd), d, 2 * n_attn, r,
        "'attn_kv_heads' x 'head_dim' x 'd_model' x 'n_layers' (attention k, v)");
    lin(base, adapt, d, ls_sat_mul(H, hd), n_attn, r, "'attn_heads' x 'head_dim' x 'd_model' x 'n_layers' (attention o)");
    term(base, hd, 2, n_attn, "'head_dim' x 'n_layers' (q/k norms)");
    lin(base, adapt, C, d, n_gdn, r, "'gdn_hk'/'gdn_hv' x 'gdn_dk'/'gdn_dv' x 'd_model' x 'n_layers' (GDN in_qkv)");
    lin(base, adapt, ls_sat_mul(Hv, dv), d, n_gdn, r, "'gdn_hv' x 'gdn_dv' x 'd_model' x 'n_layers' (GDN in_z)");
    lin(base, adapt, Hv, d, 2 * n_gdn, 0, "'gdn_hv' x 'd_model' x 'n_layers' (GDN in_b, in_a)");
    term(base, C, K, n_gdn, "'conv_kernel' x the GDN channels x 'n_layers' (conv)");
    term(base, ls_sat_add(ls_sat_mul(2, Hv), dv), 1, n_gdn, "'gdn_hv' x 'n_layers' (A_log, dt_bias, norm)");
    lin(base, adapt, d, ls_sat_mul(Hv, dv), n_gdn, r, "'gdn_hv' x 'gdn_dv' x 'd_model' x 'n_layers' (GDN out)");
}

/* Base and adapter scalars of the mla table (mla_table.c's build order,
 * docs/model.md §3, §5); r = 0 when there are no adapters; the routed experts
 * are adapted only with lora_experts. */
static void mla_counts(const ls_model_config *c, size_t r, int lora_experts, count *base, count *adapt,
                       size_t *frozen) {
    size_t d = (size_t)c->d_model, V = (size_t)c->vocab, I = (size_t)c->ffn_dim, L = (size_t)c->n_layers;
    size_t nd = (size_t)c->first_dense <= L ? (size_t)c->first_dense : L, nm = L - nd;
    size_t H = (size_t)c->heads, rq = (size_t)c->q_rank, rkv = (size_t)c->kv_rank, dn = (size_t)c->d_nope;
    size_t dr = (size_t)c->d_rope, dv = (size_t)c->d_v, HI = (size_t)c->index_heads, dI = (size_t)c->index_dim;
    size_t E = (size_t)c->n_experts, Ie = (size_t)c->expert_dim;
    memset(base, 0, sizeof *base);
    memset(adapt, 0, sizeof *adapt);
    term(base, V, d, 2, "'vocab' x 'd_model' (embed, lm_head)");
    term(base, d, 1, 1, "'d_model' (final norm)");
    term(base, d, 2, L, "'d_model' x 'n_layers' (norms)");
    lin(base, adapt, rq, d, L, r, "'q_rank' x 'd_model' x 'n_layers' (attention q_a)");
    term(base, ls_sat_add(rq, rkv), 1, L, "'q_rank' + 'kv_rank' x 'n_layers' (q_a_norm, kv_a_norm)");
    lin(base, adapt, ls_sat_mul(H, ls_sat_add(dn, dr)), rq, L, r,
        "'heads' x ('d_nope' + 'd_rope') x 'q_rank' x 'n_layers' (attention q_b)");
    lin(base, adapt, ls_sat_add(rkv, dr), d, L, r, "('kv_rank' + 'd_rope') x 'd_model' x 'n_layers' (attention kv_a)");
    lin(base, adapt, ls_sat_mul(H, ls_sat_add(dn, dv)), rkv, L, r,
        "'heads' x ('d_nope' + 'd_v') x 'kv_rank' x 'n_layers' (attention kv_b)");
    lin(base, adapt, d, ls_sat_mul(H, dv), L, r, "'heads' x 'd_v' x 'd_model' x 'n_layers' (attention o)");
    term(base, ls_sat_mul(HI, dI), rq, L, "'index_heads' x 'index_dim' x 'q_rank' x 'n_layers' (indexer q)");
    term(base, ls_sat_add(ls_sat_mul(dI, d), ls_sat_mul(HI, d)), 1, L,
         "'index_dim' + 'index_heads' x 'd_model' x 'n_layers' (indexer k, w)");
    term(base, dI, 2, L, "'index_dim' x 'n_layers' (indexer k_norm)");
    lin(base, adapt, I, d, 2 * nd, r, "'ffn_dim' x 'd_model' x 'first_dense' (dense MLP)"); /* gate, up */
    lin(base, adapt, d, I, nd, r, "'ffn_dim' x 'd_model' x 'first_dense' (dense MLP)");     /* down */
    term(base, ls_sat_add(ls_sat_mul(E, d), E), 1, nm, "'n_experts' x 'd_model' x 'n_layers' (router)");
    lin(base, adapt, Ie, d, 2 * nm, r, "'expert_dim' x 'd_model' x 'n_layers' (shared expert)");
    lin(base, adapt, d, Ie, nm, r, "'expert_dim' x 'd_model' x 'n_layers' (shared expert)");
    size_t re = lora_experts ? r : 0, mE = ls_sat_mul(E, nm);
    lin(base, adapt, Ie, d, ls_sat_mul(2, mE), re, "'n_experts' x 'expert_dim' x 'd_model' x 'n_layers' (experts)");
    lin(base, adapt, d, Ie, mE, re, "'n_experts' x 'expert_dim' x 'd_model' x 'n_layers' (experts)");
    /* never trained (docs/model.md §3): the indexer and router_bias */
    size_t idx = ls_sat_add(ls_sat_add(ls_sat_mul3(HI, dI, rq), ls_sat_mul(dI, d)),
                            ls_sat_add(ls_sat_mul(HI, d), ls_sat_mul(2, dI)));
    *frozen = ls_sat_add(ls_sat_mul(idx, L), ls_sat_mul(E, nm));
}

static ls_status counts_where(const ls_model_config *c, const ls_objective *obj, ls_param_counts *out,
                              const char *where, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    int lora = obj && obj->train_mode == LS_TRAIN_LORA;
    if (lora && obj->lora_r < 1) {
        snprintf(err, err_len, "lora_r: must be >= 1");
        return LS_ERR_ARG;
    }
    count base, adapt;
    size_t frozen = 0;
    if (c->family == LS_FAMILY_MLA)
        mla_counts(c, lora ? (size_t)obj->lora_r : 0, obj && obj->lora_experts, &base, &adapt, &frozen);
    else
        hybrid_counts(c, lora ? (size_t)obj->lora_r : 0, &base, &adapt);
    /* the byte count of every block must fit too: 8-byte reals, and the
     * weights block holds the reference copy as well in full mode */
    const count *bad = base.n > SIZE_MAX / 16 ? &base : adapt.n > SIZE_MAX / 16 ? &adapt : NULL;
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
    if (c->family != LS_FAMILY_MLA || c->n_experts < 1 || c->n_experts % ep != 0) {
        memset(out, 0, sizeof *out);
        snprintf(err, err_len, "ep %d: does not divide the %d routed experts of the config", ep,
                 c->family == LS_FAMILY_MLA ? c->n_experts : 0);
        return LS_ERR_ARG;
    }
    /* the routed experts another EP rank holds: E - E/ep of them in each MoE layer */
    size_t L = (size_t)c->n_layers, nd = (size_t)c->first_dense <= L ? (size_t)c->first_dense : L;
    size_t d = (size_t)c->d_model, Ie = (size_t)c->expert_dim, E = (size_t)c->n_experts;
    size_t others = ls_sat_mul(E - E / (size_t)ep, L - nd);
    int lora = obj && obj->train_mode == LS_TRAIN_LORA;
    size_t base = ls_sat_mul3(others, 3, ls_sat_mul(Ie, d));
    size_t adapt = lora && obj->lora_experts ? ls_sat_mul3(others, 3, ls_sat_mul((size_t)obj->lora_r, d + Ie)) : 0;
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
static const char *closest(ls_family f, int objective, const char *k) {
    const char *best = NULL;
    int bd = 3;
#define TRY(name)                              \
    do {                                       \
        int d_ = distance(k, (name));          \
        if (d_ < bd) bd = d_, best = (name);   \
    } while (0)
    for (size_t i = 0; i < N_OF(COMMON_INT); i++) TRY(COMMON_INT[i].key);
    for (size_t i = 0; i < N_OF(COMMON_REAL); i++) TRY(COMMON_REAL[i]);
    if (f == LS_FAMILY_HYBRID)
        for (size_t i = 0; i < N_OF(HYBRID_INT); i++) TRY(HYBRID_INT[i].key);
    else if (f == LS_FAMILY_DENSE) /* TEMP(dense) */
        for (size_t i = 0; i < N_OF(DENSE_INT); i++) TRY(DENSE_INT[i].key);
    else {
        for (size_t i = 0; i < N_OF(MLA_INT); i++) TRY(MLA_INT[i].key);
        TRY(MLA_REAL[0]);
    }
    if (objective)
        for (size_t i = 0; i < N_OF(OBJECTIVE_KEYS); i++) TRY(OBJECTIVE_KEYS[i]);
#undef TRY
    return best;
}

/* Every key of obj must be one of the family's (docs/model.md §6). */
static ls_status check_keys(const cJSON *obj, ls_family f, int objective, const char *where, char *err,
                            size_t err_len) {
    const char *fam = ls_family_name(f), *other = ls_family_name(f == LS_FAMILY_HYBRID ? LS_FAMILY_MLA
                                                                                         : LS_FAMILY_HYBRID);
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        int mine = in_ints(COMMON_INT, N_OF(COMMON_INT), k) || in_names(COMMON_REAL, N_OF(COMMON_REAL), k);
        int hyb = in_ints(HYBRID_INT, N_OF(HYBRID_INT), k);
        int mla = in_ints(MLA_INT, N_OF(MLA_INT), k) || in_names(MLA_REAL, N_OF(MLA_REAL), k);
        int objk = in_names(OBJECTIVE_KEYS, N_OF(OBJECTIVE_KEYS), k);
        if (f == LS_FAMILY_DENSE) { /* TEMP(dense): a hybrid key that is not an attention key is the hybrid's */
            mine = mine || in_ints(DENSE_INT, N_OF(DENSE_INT), k);
            if (hyb && !mine) other = ls_family_name(LS_FAMILY_HYBRID);
            else if (mla) other = ls_family_name(LS_FAMILY_MLA);
        }
        if (mine || (f == LS_FAMILY_HYBRID ? hyb : f == LS_FAMILY_MLA ? mla : 0) || (objective && objk)) continue;
        if (hyb || mla) {
            snprintf(err, err_len, "%s: key '%.64s': belongs to the %s family, not to this %s config", where, k,
                     other, fam);
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
                         where, k, fam);
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
    if (strcmp(fam->valuestring, "hybrid") == 0) c->family = LS_FAMILY_HYBRID;
    else if (strcmp(fam->valuestring, "mla") == 0) c->family = LS_FAMILY_MLA;
    else if (strcmp(fam->valuestring, "dense") == 0) c->family = LS_FAMILY_DENSE; /* TEMP(dense) */
    else {
        snprintf(err, err_len, "%s: key 'family': '%.64s' is not \"hybrid\", \"mla\" or \"dense\"", where,
                 fam->valuestring);
        return LS_ERR_FORMAT;
    }
    ls_status st = check_keys(obj, c->family, objective, where, err, err_len);
    if (st == LS_OK) st = get_ints(obj, COMMON_INT, N_OF(COMMON_INT), c, where, err, err_len);
    if (st == LS_OK) st = get_real(obj, "rms_eps", 1.0, &c->rms_eps, where, err, err_len);
    if (st == LS_OK) st = get_real(obj, "rope_theta", 1e12, &c->rope_theta, where, err, err_len);
    if (st != LS_OK) return st;
    if (c->family == LS_FAMILY_HYBRID)
        st = get_ints(obj, HYBRID_INT, N_OF(HYBRID_INT), c, where, err, err_len);
    else if (c->family == LS_FAMILY_DENSE) /* TEMP(dense) */
        st = get_ints(obj, DENSE_INT, N_OF(DENSE_INT), c, where, err, err_len);
    else {
        st = get_ints(obj, MLA_INT, N_OF(MLA_INT), c, where, err, err_len);
        if (st == LS_OK) st = get_real(obj, "routed_scale", 1e6, &c->routed_scale, where, err, err_len);
    }
    if (st != LS_OK) return st;
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

#define REQUIRE(cond, ...)                                     \
    do {                                                       \
        if (!(cond)) {                                         \
            int n_ = snprintf(err, err_len, "%s: ", where);    \
            if (n_ >= 0 && (size_t)n_ < err_len)               \
                snprintf(err + n_, err_len - (size_t)n_, __VA_ARGS__); \
            return LS_ERR_FORMAT;                              \
        }                                                      \
    } while (0)

/* Each key within its range; for a value above its bound, the size the
 * config implies (so "d_model 1e9" reads as the absurd model it is). */
static ls_status check_ranges(const ls_model_config *c, const int_key *keys, size_t n, const char *where,
                              char *err, size_t err_len) {
    for (size_t i = 0; i < n; i++) {
        int v = *(const int *)((const char *)c + keys[i].off);
        REQUIRE(v >= keys[i].lo, "key '%s': %d is below the minimum %d", keys[i].key, v, keys[i].lo);
        if (v > keys[i].hi) {
            if (c->family == LS_FAMILY_HYBRID || c->family == LS_FAMILY_DENSE) { /* TEMP(dense) */
                count b, a;
                hybrid_counts(c, 0, &b, &a);
                REQUIRE(0, "key '%s': %d is above the limit %d (%s); this config implies %.3g parameters, "
                           "%.3g bytes of weights as float32 (largest term %s: %.3g)",
                        keys[i].key, v, keys[i].hi, keys[i].hi_name, b.approx, 4 * b.approx, b.big_name, b.big);
            }
            REQUIRE(0, "key '%s': %d is above the limit %d (%s)", keys[i].key, v, keys[i].hi, keys[i].hi_name);
        }
    }
    return LS_OK;
}

static ls_status check_where(const ls_model_config *c, const char *where, char *err, size_t err_len) {
    ls_status st = check_ranges(c, COMMON_INT, N_OF(COMMON_INT), where, err, err_len);
    if (st != LS_OK) return st;
    if (c->family == LS_FAMILY_DENSE) { /* TEMP(dense): the hybrid attention keys' checks */
        if ((st = check_ranges(c, DENSE_INT, N_OF(DENSE_INT), where, err, err_len)) != LS_OK) return st;
        REQUIRE(c->attn_heads % c->attn_kv_heads == 0,
                "key 'attn_heads': must be a positive multiple of 'attn_kv_heads'");
        REQUIRE(c->rope_dim % 2 == 0 && c->rope_dim <= c->head_dim, "key 'rope_dim': must be even and <= 'head_dim'");
        ls_param_counts pc;
        if ((st = counts_where(c, NULL, &pc, where, err, err_len)) != LS_OK) return st;
    } else if (c->family == LS_FAMILY_HYBRID) {
        if ((st = check_ranges(c, HYBRID_INT, N_OF(HYBRID_INT), where, err, err_len)) != LS_OK) return st;
        REQUIRE(c->gdn_hv % c->gdn_hk == 0, "key 'gdn_hv': must be a positive multiple of 'gdn_hk'");
        REQUIRE(c->attn_heads % c->attn_kv_heads == 0,
                "key 'attn_heads': must be a positive multiple of 'attn_kv_heads'");
        REQUIRE(c->rope_dim % 2 == 0 && c->rope_dim <= c->head_dim, "key 'rope_dim': must be even and <= 'head_dim'");
        ls_param_counts pc;
        if ((st = counts_where(c, NULL, &pc, where, err, err_len)) != LS_OK) return st;
    } else {
        if ((st = check_ranges(c, MLA_INT, N_OF(MLA_INT), where, err, err_len)) != LS_OK) return st;
        REQUIRE(c->first_dense <= c->n_layers, "key 'first_dense': exceeds 'n_layers'");
        REQUIRE(c->d_rope % 2 == 0 && c->d_rope <= c->index_dim, "key 'd_rope': must be even and <= 'index_dim'");
        REQUIRE(c->n_experts % c->n_group == 0 && c->topk_group <= c->n_group,
                "keys 'n_experts', 'n_group', 'topk_group' inconsistent");
        REQUIRE(c->experts_per_token <= c->n_experts, "key 'experts_per_token': must be in [1, n_experts]");
        REQUIRE(c->experts_per_token <= c->topk_group * (c->n_experts / c->n_group),
                "key 'experts_per_token': must be <= 'topk_group' x 'n_experts' / 'n_group' (the kept groups' experts)");
        ls_param_counts pc;
        if ((st = counts_where(c, NULL, &pc, where, err, err_len)) != LS_OK) return st;
    }
    return LS_OK;
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
    if (c->family == LS_FAMILY_HYBRID) {
        add_ints(o, c, HYBRID_INT, N_OF(HYBRID_INT));
    } else if (c->family == LS_FAMILY_DENSE) { /* TEMP(dense) */
        add_ints(o, c, DENSE_INT, N_OF(DENSE_INT));
    } else {
        add_ints(o, c, MLA_INT, N_OF(MLA_INT));
        cJSON_AddNumberToObject(o, "routed_scale", c->routed_scale);
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
