/* config.h - model configuration (docs/model.md §6 keys) and the run options of
 * one training job.  Loading validates every key and names the file and the
 * key in its error message.  dtype-independent. */
#ifndef LS_TRAINER_CONFIG_H
#define LS_TRAINER_CONFIG_H
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "common/status.h"
#include "trainer/model/family_desc.h"

/* Bytes of a family's own keys in a config (its key struct must fit: 26
 * int keys; a family's header asserts it).  This size keeps ls_model_config
 * (and ls_params, whose bytes the memory plan counts) the size it had. */
#define LS_FAMILY_KEYS_BYTES 104

/* A model config: the keys every family shares, the family (its descriptor,
 * family_desc.h) and the family's own keys in a block the family owns: its
 * key table's offsets index it, and its folder's accessor casts it to its
 * key struct (ls_hybrid_keys_of, ...).  Shared code reaches them only
 * through the descriptor.  Plain data: copy by assignment. */
struct ls_model_config_s {
    const ls_family_desc *family;
    int vocab, d_model, n_layers, ffn_dim;
    double rms_eps, rope_theta;
    union {
        unsigned char bytes[LS_FAMILY_KEYS_BYTES];
        double align_d;
        int64_t align_i;
    } fam_keys;
};

typedef enum { LS_TRAIN_LORA = 0, LS_TRAIN_FULL = 1 } ls_train_mode;
typedef enum { LS_GRAD_DETACHED = 0, LS_GRAD_FULL = 1 } ls_grad_mode;
typedef enum { LS_STRATEGY_LONGSTRAW = 0, LS_STRATEGY_NAIVE = 1 } ls_strategy;

/* Objective and adapter settings (the rest of docs/model.md §6). */
struct ls_objective_s {
    ls_train_mode train_mode;
    int lora_r;
    double lora_alpha;
    int lora_experts;
    int lora_init_random; /* lora_B random instead of zero (parity checks) */
    ls_grad_mode grad_mode;
    double epsilon, beta, temperature;
};

/* Largest model config file ls_config_load reads (a config is < 1 KiB);
 * a larger file, or a stream that does not end (/dev/zero), is refused. */
#define LS_CONFIG_MAX_FILE_BYTES ((size_t)1 << 20)

/* Load a model config from a JSON file.  On error returns LS_ERR_IO /
 * LS_ERR_FORMAT and writes "FILE: key 'x': problem" into err.  The file
 * holds exactly the keys of its family (docs/model.md §6): a key that is
 * unknown, misspelt, of the other family or an objective setting is
 * refused by name (a typo must not silently change a model). */
ls_status ls_config_load(ls_model_config *out, const char *path, char *err, size_t err_len);
/* ls_config_load that also writes the lowercase hex SHA-256 of the bytes it
 * read and parsed into sha256 (65 bytes; NULL: not wanted), on success only. */
ls_status ls_config_load_digest(ls_model_config *out, const char *path, char sha256[65], char *err, size_t err_len);
/* Parse from a cJSON object; `where` names the source.  Same strictness
 * as ls_config_load (model keys only). */
ls_status ls_config_from_json(ls_model_config *out, const cJSON *obj, const char *where,
                              char *err, size_t err_len);
/* An embedded config (batch dumps, receipts: docs/model.md §6): the model keys
 * plus every objective key (train_mode, lora_r, lora_alpha, lora_experts,
 * grad_mode, epsilon, beta, temperature), each required and range-checked
 * like the command line; parsed into *obj_out (lora_init_random, which is
 * not a config key, is 0).  Any other key is refused by name. */
ls_status ls_config_from_json_with_objective(ls_model_config *out, ls_objective *obj_out,
                                             const cJSON *obj, const char *where,
                                             char *err, size_t err_len);
/* Check every key's range (dims <= 2^20, heads <= 4096, n_layers <= 4096,
 * vocab <= 2^24; see config.c), the dims' consistency (divisibility,
 * rope_dim <= head_dim, ...) and that the parameter count and its bytes
 * cannot overflow.  A key out of range is named with the size the config
 * implies ("... implies 3.8e+21 parameters, 1.5e+22 bytes as float32"). */
ls_status ls_config_check(const ls_model_config *c, char *err, size_t err_len);
/* New cJSON object with every docs/model.md §6 key of the family, plus the
 * objective keys when obj != NULL.  Caller owns it (cJSON_Delete). */
cJSON *ls_config_to_json(const ls_model_config *c, const ls_objective *obj);

/* Scalars of each storage block of the family's parameter table
 * (docs/model.md §3, §5), in closed form from the config: base weights,
 * adapters (lora mode), trainable scalars (adapters in lora mode, the base
 * weights less the frozen ones in full mode (the family's counts hook
 * names them); each has a gradient and two AdamW moments) and the
 * frozen reference copy (full mode: = base, else 0). */
typedef struct {
    size_t base, adapters, trainable, reference;
} ls_param_counts;

/* The closed form above, overflow-checked.  LS_ERR_FORMAT naming the
 * product when a count overflows size_t, LS_ERR_ARG when obj->lora_r < 1 in
 * lora mode.  obj NULL: base weights only (adapters 0, trainable = base).
 * Routed experts' adapters only with obj->lora_experts. */
ls_status ls_config_param_counts(const ls_model_config *c, const ls_objective *obj,
                                 ls_param_counts *out, char *err, size_t err_len);
/* The same for one rank of expert parallelism over ep ranks (--ep):
 * the routed experts of the other EP ranks (E - E/ep in each MoE layer:
 * their weights, expert adapters, gradients, moments and reference copy)
 * left out, as ls_params_init_ep allocates.  ep <= 1: ls_config_param_counts.
 * LS_ERR_ARG naming ep when it does not divide the routed experts (or the
 * family has none). */
ls_status ls_config_param_counts_ep(const ls_model_config *c, const ls_objective *obj, int ep,
                                    ls_param_counts *out, char *err, size_t err_len);
/* The kind of mixer layer `layer` has (the trace's layer_end kind): a name
 * the family registers (its descriptor's layer_kinds), static storage. */
const char *ls_config_layer_kind(const ls_model_config *c, int layer);

/* The value of the family key `key` of c as a double (an int key converted),
 * through c's descriptor; LS_ERR_ARG when c's family has no such key. */
ls_status ls_config_key_get(const ls_model_config *c, const char *key, double *out);
/* Set it (an int key takes (int)v): for tools and tests that build a config
 * by hand; LS_ERR_ARG when c's family has no such key.  No range check
 * (ls_config_check does it). */
ls_status ls_config_key_set(ls_model_config *c, const char *key, double v);
/* A config of family f with every key zero (ls_config_check refuses it until set). */
void ls_config_init(ls_model_config *c, const ls_family_desc *f);

void ls_objective_defaults(ls_objective *o);
#endif
