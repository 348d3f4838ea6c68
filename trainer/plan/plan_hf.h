/* plan_hf.h - a Hugging Face `config.json` of the two real architectures the
 * families follow, mapped to a model config plus the facts only the plan
 * needs (docs/plan.md, "The Hugging Face mapping").
 *
 *  - hybrid: Qwen3.5 (`qwen3_5`, its `text_config` `qwen3_5_text`; an outer
 *    model_type that does not hold its text_config's is refused) and
 *    Qwen3-Next (`qwen3_next`); a mixture-of-experts FFN (`num_experts` > 0)
 *    is refused unless the caller asks to plan it as a dense FFN of the
 *    active width (the result then says so);
 *  - mla: DeepSeek-V3.2 (`deepseek_v32`) and GLM-5 (`glm_moe_dsa`), with the
 *    number of layers that hold their own DSA index keys (GLM's
 *    `indexer_types`, else `index_topk_pattern`, else `index_topk_freq` /
 *    `index_skip_topk_offset`; those given together must agree).
 *
 * The file is hostile input: read under a size cap, every key of the object
 * is either mapped (type and range checked), required to hold the one value
 * the family implements, or on a list of keys that do not change the math
 * (token ids, dtypes, serving hints); any other key is refused by name.
 * Errors read "FILE: key 'x': problem".  dtype-independent. */
#ifndef LS_TRAINER_PLAN_HF_H
#define LS_TRAINER_PLAN_HF_H
#include <stddef.h>
#include <cjson/cJSON.h>
#include "common/status.h"
#include "trainer/model/config.h"

/* Largest config.json read (real ones are a few KiB, Qwen3.5's with its
 * vision tower about 3 KiB). */
#define LS_HF_CONFIG_MAX_BYTES ((size_t)1 << 20)

typedef struct {
    ls_model_config cfg;   /* checked by ls_config_check */
    char model_type[32];   /* the (text) model_type the file declares */
    size_t index_sets;     /* mla: layers holding their own index keys; hybrid 0 */
    int moe_as_dense;      /* hybrid: the MoE FFN planned as dense (ffn_dim = active width) */
    int mtp_layers;        /* multi-token-prediction layers the file declares: not planned */
} ls_hf_model;

/* Read and map PATH.  moe_as_dense: plan a hybrid MoE FFN as a dense FFN of
 * width experts_per_token x moe_intermediate_size + shared_expert_intermediate_size
 * instead of refusing it.  LS_ERR_IO (cannot read, too big), LS_ERR_FORMAT
 * (not JSON, wrong type, out of range, unknown key), LS_ERR_UNSUPPORTED (a
 * valid architecture the families cannot express), each naming the file and
 * key in err. */
ls_status ls_plan_hf_load(ls_hf_model *out, const char *path, int moe_as_dense, char *err, size_t err_len);
/* The same on a parsed document; `where` names its source.  root is borrowed. */
ls_status ls_plan_hf_from_json(ls_hf_model *out, const cJSON *root, const char *where, int moe_as_dense,
                               char *err, size_t err_len);
#endif
