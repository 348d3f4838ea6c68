/* config.h - model configuration (MODEL.md §6 keys) and the run options of
 * one training job.  Loading validates every key and names the file and the
 * key in its error message.  dtype-independent. */
#ifndef LS_TRAINER_CONFIG_H
#define LS_TRAINER_CONFIG_H
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "common/status.h"

typedef enum { LS_FAMILY_HYBRID = 0, LS_FAMILY_MLA = 1 } ls_family;

typedef struct {
    ls_family family;
    int vocab, d_model, n_layers, ffn_dim;
    double rms_eps, rope_theta;
    /* hybrid */
    int gdn_hk, gdn_hv, gdn_dk, gdn_dv, conv_kernel;
    int attn_heads, attn_kv_heads, head_dim, rope_dim;
    /* mla */
    int first_dense, heads, q_rank, kv_rank, d_nope, d_rope, d_v;
    int index_heads, index_dim, index_topk;
    int n_experts, n_group, topk_group, experts_per_token, expert_dim;
    double routed_scale;
} ls_model_config;

typedef enum { LS_TRAIN_LORA = 0, LS_TRAIN_FULL = 1 } ls_train_mode;
typedef enum { LS_GRAD_DETACHED = 0, LS_GRAD_FULL = 1 } ls_grad_mode;
typedef enum { LS_STRATEGY_LONGSTRAW = 0, LS_STRATEGY_NAIVE = 1 } ls_strategy;

/* Objective and adapter settings (the rest of MODEL.md §6). */
typedef struct {
    ls_train_mode train_mode;
    int lora_r;
    double lora_alpha;
    int lora_experts;
    int lora_init_random; /* lora_B random instead of zero (parity checks) */
    ls_grad_mode grad_mode;
    double epsilon, beta, temperature;
} ls_objective;

/* Load a model config from a JSON file.  On error returns LS_ERR_IO /
 * LS_ERR_FORMAT and writes "FILE: key 'x': problem" into err. */
ls_status ls_config_load(ls_model_config *out, const char *path, char *err, size_t err_len);
/* Parse from a cJSON object (what batch dumps embed); `where` names the source. */
ls_status ls_config_from_json(ls_model_config *out, const cJSON *obj, const char *where,
                              char *err, size_t err_len);
/* Check dims for consistency (divisibility, rope_dim <= head_dim, ...). */
ls_status ls_config_check(const ls_model_config *c, char *err, size_t err_len);
/* New cJSON object with every MODEL.md §6 key of the family, plus the
 * objective keys when obj != NULL.  Caller owns it (cJSON_Delete). */
cJSON *ls_config_to_json(const ls_model_config *c, const ls_objective *obj);

void ls_objective_defaults(ls_objective *o);
const char *ls_family_name(ls_family f);
#endif
