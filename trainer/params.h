/* params.h - the parameter table of a model: every tensor with its MODEL.md §5
 * name, shape, weights, gradient and AdamW moments, plus the structured views
 * the hybrid layers use.  Numeric (compiled per real type, LS_K names).
 *
 * Storage: one block per memory category — base weights (fixed_weights, or
 * counted as trainable in full mode), adapters, gradients, optimizer state,
 * and, in full mode, the frozen reference copy.  A tensor owns nothing; the
 * ls_params owns the blocks.  Reference view: a second ls_params sharing the
 * tables' names but pointing at reference weights with adapters off. */
#ifndef LS_TRAINER_PARAMS_H
#define LS_TRAINER_PARAMS_H
#include <stdint.h>
#include "common/status.h"
#include "kernels/real.h"
#include "trainer/config.h"
#include "trainer/mem_tracker.h"

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
} ls_tensor;

/* A linear layer with optional LoRA (A [r,in], B [out,r]; NULL when off). */
typedef struct {
    ls_tensor *W, *A, *B;
    size_t in, out;
} ls_lin;

typedef struct {
    int is_attn;
    ls_tensor *norm1, *norm2;
    /* GDN */
    ls_lin in_qkv, in_z, in_b, in_a, out;
    ls_tensor *conv, *A_log, *dt_bias, *gnorm;
    /* attention */
    ls_lin q, k, v, o;
    ls_tensor *q_norm, *k_norm;
    /* MLP */
    ls_lin gate, up, down;
} ls_hybrid_layer;

typedef struct ls_params {
    ls_model_config cfg;
    ls_objective obj;
    ls_real lora_scale;       /* alpha / r */
    ls_tensor *t;
    size_t n;
    ls_tensor *embed, *norm, *lm_head;
    ls_hybrid_layer *layers;  /* [n_layers] */
    ls_real *blocks[6];       /* owned storage (see params.c) */
    size_t n_trainable;       /* trainable scalars */
    int is_view;              /* reference view: owns only its tables */
} ls_params;

/* The bytes ls_params_init will allocate, per memory category
 * (fixed_weights: base weights + the full-mode reference copy; adapters;
 * gradients; optimizer_state: both AdamW moments), from the closed form of
 * ls_config_param_counts, overflow-checked; every other category 0.  What
 * ls_params_init then allocates equals this exactly (it checks).  Errors as
 * ls_config_param_counts, naming the key or product. */
ls_status LS_K(ls_params_plan)(const ls_model_config *cfg, const ls_objective *obj,
                               size_t bytes[LS_MEM_COUNT], char *err, size_t err_len);

/* Build the table for cfg/obj, allocate through the memory tracker and
 * initialise deterministically from seed.  *out owned by the caller.
 * Every failure writes err: LS_ERR_NOMEM names what could not be
 * allocated; LS_ERR_INTERNAL when the table disagrees with the plan. */
ls_status LS_K(ls_params_init)(ls_params **out, const ls_model_config *cfg,
                               const ls_objective *obj, uint64_t seed,
                               char *err, size_t err_len);
void LS_K(ls_params_free)(ls_params *p);
/* Reference policy view (MODEL.md §3): adapters off (lora mode) or the frozen
 * step-0 copy (full mode).  Free with ls_params_free. */
ls_status LS_K(ls_params_ref_view)(ls_params **out, const ls_params *p);
/* Snapshot the current weights as the reference (full mode; no-op in lora). */
void LS_K(ls_params_snapshot_ref)(ls_params *p);
ls_tensor *LS_K(ls_params_find)(const ls_params *p, const char *name);
void LS_K(ls_params_zero_grads)(ls_params *p);
/* Sum of squares of all trainable gradients (double accumulation). */
double LS_K(ls_params_grad_sumsq)(const ls_params *p);
/* 1 when every trainable gradient is finite. */
int LS_K(ls_params_grads_finite)(const ls_params *p);
#endif
