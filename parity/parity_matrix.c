/* parity_matrix.c - the reduced-size configurations longstraw-parity runs
 * (parity.h).  Together they cover: captured lengths that split unevenly
 * over 2 and 4 ranks and evenly over 2, shards shorter than a page and
 * spanning several pages and capture chunks (chunks that cut pages), group
 * sizes 2 and 3 with unequal responses, and both trainable sets.  The model
 * is the --model-config file (hybrid: configs/hybrid-tiny.json, 8 layers,
 * every other one attention; mla: below). */
#include <string.h>

#include "parity/parity.h"

static const ls_parity_config HYBRID[] = {
    {.name = "p30-g2-lora",
     .what = "P-1=29 (14|15 over 2, 7|7|7|8 over 4), pages of 8, chunks of 12, G=2, R=3,5, lora",
     .prompt_len = 30,
     .group = 2,
     .response_lens = {3, 5},
     .rewards = {1.0, 0.0},
     .train_mode = "lora",
     .page_size = 8,
     .capture_chunk = 12,
     .token_seed = 7},
    {.name = "p23-g3-full",
     .what = "P-1=22 (11|11 over 2, 5|6|5|6 over 4), pages of 4, chunks of 5, G=3, R=4,2,6, full",
     .prompt_len = 23,
     .group = 3,
     .response_lens = {4, 2, 6},
     .rewards = {1.0, 0.0, 0.25},
     .train_mode = "full",
     .page_size = 4,
     .capture_chunk = 5,
     .token_seed = 11},
};

/* The mla family (configs/mla-tiny.json: 4 layers, the first dense, MoE
 * after; index_topk 8): the same shapes, so that every captured length
 * exceeds the top-k and a query's candidates come from several shards. */
static const ls_parity_config MLA[] = {
    {.name = "m30-g2-lora",
     .what = "P-1=29 (top-k 8 of up to 33 keys; 14|15 over 2, 7|7|7|8 over 4), pages of 8, chunks of 12, G=2, "
             "R=3,5, lora",
     .prompt_len = 30,
     .group = 2,
     .response_lens = {3, 5},
     .rewards = {1.0, 0.0},
     .train_mode = "lora",
     .page_size = 8,
     .capture_chunk = 12,
     .token_seed = 7},
    {.name = "m23-g3-full",
     .what = "P-1=22 (top-k 8 of up to 28 keys; 11|11 over 2, 5|6|5|6 over 4), pages of 4, chunks of 5, G=3, "
             "R=4,2,6, full",
     .prompt_len = 23,
     .group = 3,
     .response_lens = {4, 2, 6},
     .rewards = {1.0, 0.0, 0.25},
     .train_mode = "full",
     .page_size = 4,
     .capture_chunk = 5,
     .token_seed = 11},
};

/* TEMP(dense): the dense family's matrix (trainer/families/dense/dense-tiny.json: 4 attention layers), the
 * hybrid matrix's two configurations, as in trainer/families/dense/parity.json: this entry goes when parity
 * reads the families' parity facts from the registry. */
static const ls_parity_config DENSE[] = {
    {.name = "d30-g2-lora",
     .what = "P-1=29 (14|15 over 2, 7|7|7|8 over 4), pages of 8, chunks of 12, G=2, R=3,5, lora",
     .prompt_len = 30,
     .group = 2,
     .response_lens = {3, 5},
     .rewards = {1.0, 0.0},
     .train_mode = "lora",
     .page_size = 8,
     .capture_chunk = 12,
     .token_seed = 7},
    {.name = "d23-g3-full",
     .what = "P-1=22 (11|11 over 2, 5|6|5|6 over 4), pages of 4, chunks of 5, G=3, R=4,2,6, full",
     .prompt_len = 23,
     .group = 3,
     .response_lens = {4, 2, 6},
     .rewards = {1.0, 0.0, 0.25},
     .train_mode = "full",
     .page_size = 4,
     .capture_chunk = 5,
     .token_seed = 11},
};

static const ls_parity_family FAMILIES[] = {
    {.name = "hybrid",
     .model_config = "configs/hybrid-tiny.json",
     .reference = "tests/reference/hybrid_ref.py",
     .score_fault = "cp-local-attention",
     .grad_faults = {"skip-dkv-reduce", "skip-grad-finalize"},
     .n_grad_faults = 2,
     .configs = HYBRID,
     .n_configs = sizeof HYBRID / sizeof HYBRID[0]},
    {.name = "mla",
     .model_config = "configs/mla-tiny.json",
     .reference = "tests/reference/mla_ref.py",
     .score_fault = "cp-local-dsa", /* each rank's own top-k: the original work's level-2 gap */
     .grad_faults = {"skip-dkv-reduce", "skip-grad-finalize"},
     .n_grad_faults = 2,
     .configs = MLA,
     .n_configs = sizeof MLA / sizeof MLA[0]},
    {.name = "dense", /* TEMP(dense) */
     .model_config = "trainer/families/dense/dense-tiny.json",
     .reference = "trainer/families/dense/dense_ref.py",
     .score_fault = "cp-local-attention",
     .grad_faults = {"skip-dkv-reduce", "skip-grad-finalize"},
     .n_grad_faults = 2,
     .configs = DENSE,
     .n_configs = sizeof DENSE / sizeof DENSE[0]},
};

const ls_parity_family *ls_parity_family_of(const char *name) {
    for (size_t i = 0; name != NULL && i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (strcmp(FAMILIES[i].name, name) == 0) return &FAMILIES[i];
    return NULL;
}

const char *ls_parity_family_names(void) { return "hybrid, mla, dense"; /* TEMP(dense) */ }
