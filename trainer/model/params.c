/* params.c - parameter table construction, deterministic initialisation and
 * the reference-policy view. */
#include "trainer/model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/rng.h"

enum { BLK_BASE = 0, BLK_ADAPT, BLK_GRAD, BLK_M, BLK_V, BLK_REF };

/* A tensor of the family's list: counted (b->t NULL) or entered into the
 * table; beyond the counted capacity an error, never a silent NULL. */
ls_tensor *LS_K(ls_params_add)(ls_param_builder *b, const char *name, size_t d0, size_t d1, ls_init_kind kind,
                               double std, int adapter) {
    if (b->st != LS_OK) return NULL;
    if (!b->t) { /* the counting pass */
        b->n++;
        return NULL;
    }
    if (b->n >= b->cap) {
        snprintf(b->err, sizeof b->err,
                 "internal: the parameter table holds %zu tensors (counted before allocation) but the %s "
                 "family adds another, '%.96s'",
                 b->cap, ls_family_name(b->cfg->family), name);
        b->st = LS_ERR_INTERNAL;
        return NULL;
    }
    ls_tensor *t = &b->t[b->n];
    b->kinds[b->n] = kind;
    b->stds[b->n] = std;
    b->n++;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    if (ls_mul_size(d0, d1 ? d1 : 1, &t->numel) != 0) b->overflow = 1;
    t->is_adapter = adapter;
    t->frozen = 0;
    return t;
}

ls_lin LS_K(ls_params_add_lin)(ls_param_builder *b, const char *prefix, size_t out, size_t in, double std,
                               int lora) {
    char nm[96];
    ls_lin l = {0};
    l.in = in;
    l.out = out;
    snprintf(nm, sizeof nm, "%s.weight", prefix);
    l.W = LS_K(ls_params_add)(b, nm, out, in, LS_INIT_NORMAL, std, 0);
    if (lora && b->obj->train_mode == LS_TRAIN_LORA) {
        size_t r = (size_t)b->obj->lora_r;
        snprintf(nm, sizeof nm, "%s.lora_A", prefix);
        l.A = LS_K(ls_params_add)(b, nm, r, in, LS_INIT_NORMAL, 1.0 / sqrt((double)in), 1);
        snprintf(nm, sizeof nm, "%s.lora_B", prefix);
        l.B = LS_K(ls_params_add)(b, nm, out, r, b->obj->lora_init_random ? LS_INIT_NORMAL : LS_INIT_ZERO,
                                  0.5 / sqrt((double)r), 1);
    }
    return l;
}

void LS_K(ls_params_tensor_count_of)(const ls_param_layout *layout, const ls_model_config *cfg,
                                     const ls_objective *obj, size_t *n) {
    ls_param_builder b = {.cfg = cfg, .obj = obj};
    layout->build(&b, NULL);
    *n = b.n;
}

static void init_tensor(ls_tensor *t, ls_init_kind kind, double std, uint64_t seed) {
    ls_rng r;
    ls_rng_seed(&r, ls_rng_derive(seed, t->name));
    for (size_t i = 0; i < t->numel; i++) {
        double x = 0;
        switch (kind) {
        case LS_INIT_NORMAL: x = std * ls_rng_normal(&r); break;
        case LS_INIT_ZERO: x = 0; break;
        case LS_INIT_ONE: x = 1; break;
        case LS_INIT_ALOG: x = log(1.0 + 15.0 * ls_rng_uniform(&r)); break; /* A in [1, 16] */
        case LS_INIT_DTBIAS: {
            double dt = exp(log(1e-3) + (log(0.1) - log(1e-3)) * ls_rng_uniform(&r));
            x = dt + log(-expm1(-dt)); /* inverse softplus */
            break;
        }
        }
        t->w[i] = (ls_real)x;
    }
}

static const ls_mem_cat BLK_CAT[6] = {LS_MEM_WEIGHTS, LS_MEM_ADAPTERS, LS_MEM_GRADS,
                                      LS_MEM_OPTIMIZER, LS_MEM_OPTIMIZER, LS_MEM_WEIGHTS};

/* Scalars of each block from the closed form. */
static void block_scalars(const ls_param_counts *pc, size_t nb[6]) {
    nb[BLK_BASE] = pc->base;
    nb[BLK_ADAPT] = pc->adapters;
    nb[BLK_GRAD] = nb[BLK_M] = nb[BLK_V] = pc->trainable;
    nb[BLK_REF] = pc->reference;
}

/* Bytes of the tables ls_params_init allocates under fixed_weights: the
 * header, the family's layer views and the counted tensor table. */
static size_t table_bytes(const ls_param_layout *layout, const ls_model_config *cfg, size_t n_tensors) {
    return sizeof(ls_params) + (size_t)cfg->n_layers * layout->layer_view_size + n_tensors * sizeof(ls_tensor);
}

ls_status LS_K(ls_params_plan_of)(const ls_param_layout *layout, const ls_model_config *cfg,
                                  const ls_objective *obj, size_t bytes[LS_MEM_COUNT], char *err, size_t err_len) {
    return LS_K(ls_params_plan_ep_of)(layout, cfg, obj, 1, bytes, err, err_len);
}

ls_status LS_K(ls_params_plan_ep_of)(const ls_param_layout *layout, const ls_model_config *cfg,
                                     const ls_objective *obj, int ep, size_t bytes[LS_MEM_COUNT], char *err,
                                     size_t err_len) {
    memset(bytes, 0, LS_MEM_COUNT * sizeof *bytes);
    ls_param_counts pc;
    ls_status st = ls_config_param_counts_ep(cfg, obj, ep, &pc, err, err_len);
    if (st != LS_OK) return st;
    ls_param_builder cb = {.cfg = cfg, .obj = obj};
    layout->build(&cb, NULL);
    size_t nb[6];
    block_scalars(&pc, nb);
    for (int k = 0; k < 6; k++) {
        size_t b;
        /* cannot fail after ls_config_param_counts (counts < SIZE_MAX / 16), kept as a guard */
        if (ls_mul_size(nb[k], sizeof(ls_real), &b) != 0 || ls_add_size(bytes[BLK_CAT[k]], b, &bytes[BLK_CAT[k]]) != 0) {
            snprintf(err, err_len, "config: the %s block overflows size_t", ls_mem_cat_name(BLK_CAT[k]));
            return LS_ERR_FORMAT;
        }
    }
    bytes[LS_MEM_WEIGHTS] += table_bytes(layout, cfg, cb.n); /* n_layers <= 4096: cannot overflow */
    return LS_OK;
}

ls_status LS_K(ls_params_init_of)(const ls_param_layout *layout, ls_params **out, const ls_model_config *cfg,
                                  const ls_objective *obj, uint64_t seed, char *err, size_t err_len) {
    return LS_K(ls_params_init_ep_of)(layout, out, cfg, obj, seed, 0, 1, err, err_len);
}

ls_status LS_K(ls_params_init_ep_of)(const ls_param_layout *layout, ls_params **out, const ls_model_config *cfg,
                                     const ls_objective *obj, uint64_t seed, int ep_rank, int ep_size, char *err,
                                     size_t err_len) {
    *out = NULL;
    if (obj->lora_r < 1) {
        snprintf(err, err_len, "lora_r: must be >= 1");
        return LS_ERR_ARG;
    }
    if (ep_size < 1 || ep_rank < 0 || ep_rank >= ep_size) {
        snprintf(err, err_len, "ep: rank %d of %d is not a place in the EP group", ep_rank, ep_size);
        return LS_ERR_ARG;
    }
    ls_param_counts pc;
    ls_status st = ls_config_param_counts_ep(cfg, obj, ep_size, &pc, err, err_len);
    if (st != LS_OK) return st;
    size_t plan_nb[6];
    block_scalars(&pc, plan_nb);
    /* the tables are model-sized (the counted tensors): fixed_weights, planned by ls_params_plan */
    ls_params *p = ls_mem_alloc(LS_MEM_WEIGHTS, sizeof *p);
    ls_param_builder b = {.cfg = cfg, .obj = obj};
    layout->build(&b, NULL); /* the count */
    b.cap = b.n;
    b.n = 0;
    st = LS_ERR_NOMEM;
    if (!p) {
        snprintf(err, err_len, "cannot allocate the parameter table header (%zu bytes)", sizeof *p);
        return LS_ERR_NOMEM;
    }
    p->cfg = *cfg;
    p->obj = *obj;
    p->ep_rank = ep_rank;
    p->ep_size = ep_size;
    p->lora_scale = (ls_real)(obj->lora_alpha / obj->lora_r);
    /* n_layers <= 4096 (ls_config_check): the tables are small */
    p->layers = ls_mem_alloc(LS_MEM_WEIGHTS, (size_t)cfg->n_layers * layout->layer_view_size);
    p->t = ls_mem_alloc(LS_MEM_WEIGHTS, b.cap * sizeof *p->t);
    b.kinds = ls_mem_alloc(LS_MEM_SCRATCH, b.cap * sizeof *b.kinds);
    b.stds = ls_mem_alloc(LS_MEM_SCRATCH, b.cap * sizeof *b.stds);
    if (!p->layers || !p->t || !b.kinds || !b.stds) {
        snprintf(err, err_len, "cannot allocate the parameter table (%zu tensors, %d layers)", b.cap,
                 cfg->n_layers);
        goto cleanup;
    }
    b.t = p->t;
    layout->build(&b, p);
    p->n = b.n;
    if (b.st != LS_OK) {
        snprintf(err, err_len, "%s", b.err);
        st = b.st;
        goto cleanup;
    }

    size_t nb[6] = {0};
    int E = cfg->family->routed_experts ? cfg->family->routed_experts(cfg) : 0;
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        t->trainable = obj->train_mode == LS_TRAIN_LORA ? t->is_adapter : !t->frozen;
        int e = ep_size > 1 ? ls_param_expert_of(t->name, NULL) : -1;
        t->ep_remote = e >= 0 && e / (E / ep_size) != ep_rank; /* E % ep_size == 0: the counts checked it */
        if (t->trainable && ls_add_size(p->n_trainable, t->numel, &p->n_trainable)) b.overflow = 1;
        if (t->ep_remote) continue; /* another EP rank's: no storage here */
        if (ls_add_size(nb[t->is_adapter ? BLK_ADAPT : BLK_BASE], t->numel, &nb[t->is_adapter ? BLK_ADAPT : BLK_BASE]))
            b.overflow = 1;
        if (t->trainable && ls_add_size(p->n_held, t->numel, &p->n_held)) b.overflow = 1;
    }
    nb[BLK_GRAD] = nb[BLK_M] = nb[BLK_V] = p->n_held;
    nb[BLK_REF] = obj->train_mode == LS_TRAIN_FULL ? nb[BLK_BASE] : 0;
    /* the table and the closed form of the plan must agree: the plan
     * checked against the budget is what gets allocated */
    if (b.overflow || p->n != b.cap || memcmp(nb, plan_nb, sizeof nb) != 0) {
        snprintf(err, err_len,
                 "internal: the parameter table (%zu tensors; base %zu, adapters %zu, trainable %zu scalars%s) "
                 "differs from the planned counts (base %zu, adapters %zu, trainable %zu)",
                 p->n, nb[BLK_BASE], nb[BLK_ADAPT], p->n_trainable, b.overflow ? ", overflow" : "", pc.base,
                 pc.adapters, pc.trainable);
        st = LS_ERR_INTERNAL;
        goto cleanup;
    }
    for (int k = 0; k < 6; k++) {
        if (!nb[k]) continue;
        p->blocks[k] = ls_mem_alloc(BLK_CAT[k], nb[k] * sizeof(ls_real)); /* < SIZE_MAX / 2: counts checked */
        if (!p->blocks[k]) {
            snprintf(err, err_len, "cannot allocate %zu bytes of %s", nb[k] * sizeof(ls_real),
                     ls_mem_cat_name(BLK_CAT[k]));
            goto cleanup;
        }
    }
    size_t off[6] = {0};
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        if (t->ep_remote) {
            t->w = t->g = t->m = t->v = NULL;
            continue;
        }
        int k = t->is_adapter ? BLK_ADAPT : BLK_BASE;
        t->w = p->blocks[k] + off[k];
        off[k] += t->numel;
        if (t->trainable) {
            t->g = p->blocks[BLK_GRAD] + off[BLK_GRAD];
            t->m = p->blocks[BLK_M] + off[BLK_GRAD];
            t->v = p->blocks[BLK_V] + off[BLK_GRAD];
            off[BLK_GRAD] += t->numel;
        }
        init_tensor(t, b.kinds[i], b.stds[i], seed);
    }
    LS_K(ls_params_snapshot_ref)(p);
    *out = p;
    p = NULL;
    st = LS_OK;
cleanup:
    ls_mem_free(b.kinds);
    ls_mem_free(b.stds);
    if (p) LS_K(ls_params_free)(p);
    return st;
}

void LS_K(ls_params_free)(ls_params *p) {
    if (!p) return;
    if (!p->is_view)
        for (int k = 0; k < 6; k++) ls_mem_free(p->blocks[k]);
    ls_mem_free(p->t);
    ls_mem_free(p->layers);
    ls_mem_free(p);
}

void LS_K(ls_params_snapshot_ref)(ls_params *p) {
    if (!p->blocks[BLK_REF]) return;
    size_t nbase = 0;
    for (size_t i = 0; i < p->n; i++)
        if (!p->t[i].is_adapter && !p->t[i].ep_remote) nbase += p->t[i].numel;
    memcpy(p->blocks[BLK_REF], p->blocks[BLK_BASE], nbase * sizeof(ls_real));
}

ls_tensor *LS_K(ls_params_remap)(const ls_params *src, ls_params *dst, const ls_tensor *t) {
    return t ? dst->t + (t - src->t) : NULL;
}

ls_lin LS_K(ls_params_remap_lin)(const ls_params *src, ls_params *dst, ls_lin l) {
    ls_lin r = l;
    r.W = LS_K(ls_params_remap)(src, dst, l.W);
    r.A = r.B = NULL; /* the reference policy never uses adapters */
    return r;
}

/* p's layout: its family's table begins with it (family.h asserts so). */
static const ls_param_layout *layout_of(const ls_params *p) {
    return (const ls_param_layout *)(const void *)p->fam;
}

ls_status LS_K(ls_params_ref_view)(ls_params **out, const ls_params *p) {
    const ls_param_layout *layout = layout_of(p);
    /* live while the reference policy scores: scoring */
    ls_params *v = ls_mem_alloc(LS_MEM_SCORE, sizeof *v);
    if (!v) return LS_ERR_NOMEM;
    *v = *p;
    v->is_view = 1;
    v->ep_view = NULL;
    v->t = ls_mem_alloc(LS_MEM_SCORE, p->n * sizeof *v->t);
    v->layers = ls_mem_alloc(LS_MEM_SCORE, (size_t)p->cfg.n_layers * layout->layer_view_size);
    if (!v->t || !v->layers) {
        ls_mem_free(v->t);
        ls_mem_free(v->layers);
        ls_mem_free(v);
        return LS_ERR_NOMEM;
    }
    memcpy(v->t, p->t, p->n * sizeof *v->t);
    size_t off = 0;
    for (size_t i = 0; i < p->n; i++) {
        ls_tensor *t = &v->t[i];
        t->g = t->m = t->v = NULL;
        t->trainable = 0;
        if (!t->is_adapter && !t->ep_remote && p->blocks[BLK_REF]) {
            t->w = p->blocks[BLK_REF] + off;
            off += t->numel;
        }
    }
    v->embed = LS_K(ls_params_remap)(p, v, p->embed);
    v->norm = LS_K(ls_params_remap)(p, v, p->norm);
    v->lm_head = LS_K(ls_params_remap)(p, v, p->lm_head);
    layout->ref_view(v, p);
    *out = v;
    return LS_OK;
}

ls_tensor *LS_K(ls_params_find)(const ls_params *p, const char *name) {
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->t[i].name, name) == 0) return &p->t[i];
    return NULL;
}

void LS_K(ls_params_zero_grads)(ls_params *p) {
    if (p->blocks[BLK_GRAD]) memset(p->blocks[BLK_GRAD], 0, p->n_held * sizeof(ls_real));
}

static double tensor_sumsq(const ls_tensor *t) {
    double s = 0;
    if (!t->trainable || t->ep_remote || !t->g) return 0;
    for (size_t j = 0; j < t->numel; j++) s += (double)t->g[j] * t->g[j];
    return s;
}

void LS_K(ls_params_grad_sumsq_parts)(const ls_params *p, double *parts) {
    for (size_t i = 0; i < p->n; i++) parts[i] = tensor_sumsq(&p->t[i]);
}

double LS_K(ls_params_grad_sumsq)(const ls_params *p) {
    double s = 0;
    for (size_t i = 0; i < p->n; i++) s += tensor_sumsq(&p->t[i]);
    return s;
}

ls_real *LS_K(ls_params_slot)(const ls_params *p, size_t i, ls_param_slot k) {
    if (i >= p->n || k >= LS_SLOT_COUNT) return NULL;
    const ls_tensor *t = &p->t[i];
    if (t->ep_remote) return p->ep_view ? p->ep_view[i * LS_SLOT_COUNT + k] : NULL;
    switch (k) {
    case LS_SLOT_W: return t->w;
    case LS_SLOT_G: return t->trainable ? t->g : NULL;
    case LS_SLOT_M: return t->trainable ? t->m : NULL;
    case LS_SLOT_V: return t->trainable ? t->v : NULL;
    default: break;
    }
    if (t->is_adapter || !p->blocks[BLK_REF]) return NULL;
    size_t off = 0; /* the reference block: the held base tensors in table order */
    for (size_t j = 0; j < i; j++)
        if (!p->t[j].is_adapter && !p->t[j].ep_remote) off += p->t[j].numel;
    return p->blocks[BLK_REF] + off;
}

int LS_K(ls_params_grads_finite)(const ls_params *p) {
    for (size_t i = 0; i < p->n_held; i++)
        if (!isfinite(p->blocks[BLK_GRAD][i])) return 0;
    return 1;
}
