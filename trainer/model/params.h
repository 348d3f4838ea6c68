/* params.h - the parameter table of a model: every tensor with its docs/model.md §5
 * name, shape, weights, gradient and AdamW moments, plus the structured views
 * the family's layers use.  Numeric (compiled per real type, LS_K names).
 *
 * Storage: one block per memory category — base weights (fixed_weights, or
 * counted as trainable in full mode), adapters, gradients, optimizer state,
 * and, in full mode, the frozen reference copy.  A tensor owns nothing; the
 * ls_params owns the blocks.  Reference view: a second ls_params sharing the
 * tables' names but pointing at reference weights with adapters off. */
#ifndef LS_TRAINER_PARAMS_H
#define LS_TRAINER_PARAMS_H
#include <stdint.h>
#include <stdio.h>
#include "common/status.h"
#include "kernels/real.h"
#include "trainer/model/config.h"
#include "trainer/base/mem_tracker.h"

typedef struct {
    char name[96];
    int ndim;           /* 1 or 2 */
    size_t shape[2];
    size_t numel;
    ls_real *w;         /* values */
    ls_real *g;         /* gradient (NULL when frozen) */
    ls_real *m, *v;     /* AdamW moments (NULL when frozen) */
    int trainable;
    int is_adapter;
    int frozen;         /* never trained, in either mode (mla: the indexer, router_bias); set by the family */
    int ep_remote;      /* a routed expert another EP rank owns (trainer/dist/ep.h): this rank holds none of
                           it (w, g, m, v NULL; its scalars in no block); 0 without expert parallelism */
} ls_tensor;

/* The routed expert of a tensor named "layers.L.moe.experts.E.*" (its
 * weights and adapters), *layer L; -1 for any other tensor. */
static inline int ls_param_expert_of(const char *name, int *layer) {
    int l = -1, e = -1, n = 0;
    if (sscanf(name, "layers.%d.moe.experts.%d.%n", &l, &e, &n) != 2 || n == 0) return -1;
    if (layer) *layer = l;
    return e;
}

/* The storage slots of a tensor, as the writers name them (ls_params_slot). */
typedef enum { LS_SLOT_W = 0, LS_SLOT_G, LS_SLOT_M, LS_SLOT_V, LS_SLOT_REF, LS_SLOT_COUNT } ls_param_slot;

/* A linear layer with optional LoRA (A [r,in], B [out,r]; NULL when off). */
typedef struct {
    ls_tensor *W, *A, *B;
    size_t in, out;
} ls_lin;


struct ls_family_ops;
typedef struct ls_params {
    const struct ls_family_ops *fam; /* the config's family (family.h): set by trainer/families/families.c,
                                        NULL from ls_params_init_of.  Its table begins with its
                                        ls_param_layout (below; family.h asserts it), which
                                        ls_params_ref_view reads */
    ls_model_config cfg;
    ls_objective obj;
    ls_real lora_scale;       /* alpha / r */
    ls_tensor *t;
    size_t n;
    ls_tensor *embed, *norm, *lm_head;
    void *layers;             /* [n_layers] the family's structured layer views (hybrid: ls_hybrid_layer) */
    ls_real *blocks[6];       /* owned storage (see params.c) */
    size_t n_trainable;       /* trainable scalars of the whole table (every EP rank's) */
    size_t n_held;            /* trainable scalars this rank holds (the gradient block; n_trainable without EP) */
    int ep_rank, ep_size;     /* expert parallelism (ls_params_init_ep_of): this rank's place, the EP size (1: none) */
    ls_real **ep_view;        /* [n * LS_SLOT_COUNT] while assembled (trainer/dist/ep.h ls_ep_assemble): the slots
                                 of the tensors other EP ranks hold, for the writers; NULL otherwise */
    int is_view;              /* reference view: owns only its tables */
} ls_params;

/* ---- the parameter builder: a family's tensor list (family.h) -------------
 * The family's build function adds its tensors in table order.  The table
 * is counted before it is allocated: a first pass with t == NULL only
 * counts (add returns NULL), the table is then allocated for exactly that
 * many and the second pass fills it.  Adding beyond cap fails loudly: st
 * becomes LS_ERR_INTERNAL with err naming the tensor, add returns NULL,
 * and every later add is refused too. */
typedef enum { LS_INIT_NORMAL, LS_INIT_ZERO, LS_INIT_ONE, LS_INIT_ALOG, LS_INIT_DTBIAS } ls_init_kind;

typedef struct {
    const ls_model_config *cfg;
    const ls_objective *obj;
    ls_tensor *t;          /* [cap] (NULL: count only) */
    ls_init_kind *kinds;   /* [cap] */
    double *stds;          /* [cap] */
    size_t cap, n;
    int overflow;          /* a shape's element count overflowed size_t */
    ls_status st;
    char err[320];
} ls_param_builder;

/* The tensor added: an entry of the table the builder fills (b->t, owned by
 * the ls_params being built); NULL when counting or refused. */
ls_tensor *LS_K(ls_params_add)(ls_param_builder *b, const char *name, size_t d0, size_t d1, ls_init_kind kind,
                               double std, int adapter);
/* A linear [out, in] named prefix.weight, with its LoRA pair (prefix.lora_A
 * [r, in], prefix.lora_B [out, r]) when lora (a LoRA target) and the train
 * mode is lora; its tensors are entries of the builder's table. */
ls_lin LS_K(ls_params_add_lin)(ls_param_builder *b, const char *prefix, size_t out, size_t in, double std,
                               int lora);
/* ---- a family's parameter layout -------------------------------------------
 * What the table needs of a family (its ls_family_ops embeds one, family.h):
 * build lists the tensors through the builder in table order (p NULL: count
 * only; else p's views are set: embed, norm, lm_head and p->layers, n_layers
 * views of layer_view_size bytes); ref_view remaps the reference view v's
 * layer views (v->layers allocated, v->t the view's table at the same
 * indices as p->t) from p's. */
typedef struct ls_param_layout {
    size_t layer_view_size;
    void (*build)(ls_param_builder *b, ls_params *p);
    void (*ref_view)(ls_params *v, const ls_params *p);
} ls_param_layout;

/* The three below take the family's layout (layout->build lists the tensors);
 * trainer/families/families.h gives the same three chosen by cfg->family. */
/* The number of tensors cfg/obj's table has (the family's list, counted). */
void LS_K(ls_params_tensor_count_of)(const ls_param_layout *layout, const ls_model_config *cfg,
                                     const ls_objective *obj, size_t *n);

/* The bytes ls_params_init will allocate, per memory category
 * (fixed_weights: base weights + the full-mode reference copy; adapters;
 * gradients; optimizer_state: both AdamW moments), from the closed form of
 * ls_config_param_counts, overflow-checked; every other category 0.  What
 * ls_params_init then allocates equals this exactly (it checks).  Errors as
 * ls_config_param_counts, naming the key or product. */
ls_status LS_K(ls_params_plan_of)(const ls_param_layout *layout, const ls_model_config *cfg,
                                  const ls_objective *obj, size_t bytes[LS_MEM_COUNT], char *err, size_t err_len);

/* ls_params_plan_of for one rank of expert parallelism over ep ranks: the
 * other EP ranks' routed experts left out (ls_config_param_counts_ep). */
ls_status LS_K(ls_params_plan_ep_of)(const ls_param_layout *layout, const ls_model_config *cfg,
                                     const ls_objective *obj, int ep, size_t bytes[LS_MEM_COUNT], char *err,
                                     size_t err_len);

/* Build the table for cfg/obj, allocate through the memory tracker and
 * initialise deterministically from seed.  *out is the caller's, released
 * with ls_params_free (its fam NULL: trainer/families/families.h's
 * ls_params_init sets it; NULL *out on failure).  Every failure writes
 * err: LS_ERR_NOMEM names what could not be allocated; LS_ERR_INTERNAL
 * when the table disagrees with the plan. */
ls_status LS_K(ls_params_init_of)(const ls_param_layout *layout, ls_params **out, const ls_model_config *cfg,
                                  const ls_objective *obj, uint64_t seed, char *err, size_t err_len);
/* The same for EP rank ep_rank of ep_size (mla, --ep; ep_size 1: the
 * above): the table lists every tensor, but the routed experts another EP
 * rank owns (expert e's owner is e / (E / ep_size)) are ep_remote and hold
 * no storage; every held tensor is initialised as the whole table's is
 * (seeded by its name).  LS_ERR_ARG naming ep when it does not divide the
 * routed experts. */
ls_status LS_K(ls_params_init_ep_of)(const ls_param_layout *layout, ls_params **out, const ls_model_config *cfg,
                                     const ls_objective *obj, uint64_t seed, int ep_rank, int ep_size, char *err,
                                     size_t err_len);
/* Slot k of tensor i: its weights, gradient or moments (NULL where it has
 * none: frozen), or its reference-policy copy (full mode, base tensors;
 * else NULL); a remote tensor's from p->ep_view while assembled, else NULL. */
ls_real *LS_K(ls_params_slot)(const ls_params *p, size_t i, ls_param_slot k);
/* Releases p (a table, or a reference view: its own tables only); NULL: nothing. */
void LS_K(ls_params_free)(ls_params *p);
/* Reference policy view (docs/model.md §3): adapters off (lora mode) or the frozen
 * step-0 copy (full mode), through p's family (p->fam set).  *out is the
 * caller's, released with ls_params_free; it reads p's weight blocks, so p
 * must outlive it. */
ls_status LS_K(ls_params_ref_view)(ls_params **out, const ls_params *p);
/* For a family's ref_view: the tensor of dst at t's index in src (NULL for
 * NULL), an entry of dst's table; a linear's weight remapped, its adapters
 * off (NULL). */
ls_tensor *LS_K(ls_params_remap)(const ls_params *src, ls_params *dst, const ls_tensor *t);
ls_lin LS_K(ls_params_remap_lin)(const ls_params *src, ls_params *dst, ls_lin l);
/* Snapshot the current weights as the reference (full mode; no-op in lora). */
void LS_K(ls_params_snapshot_ref)(ls_params *p);
/* The tensor named name: a pointer into p's table, owned by p (NULL: none). */
ls_tensor *LS_K(ls_params_find)(const ls_params *p, const char *name);
void LS_K(ls_params_zero_grads)(ls_params *p);
/* Sum of squares of all trainable gradients: each held tensor's sum in
 * double, the tensors' sums added in table order (under EP the remote
 * tensors' sums come from their owners: trainer/dist/ep.h ls_ep_grad_sumsq,
 * the same sum). */
double LS_K(ls_params_grad_sumsq)(const ls_params *p);
/* Each tensor's sum of squares of its gradient (parts [p->n]: 0 for a
 * frozen or remote tensor). */
void LS_K(ls_params_grad_sumsq_parts)(const ls_params *p, double *parts);
/* 1 when every trainable gradient is finite. */
int LS_K(ls_params_grads_finite)(const ls_params *p);
#endif
