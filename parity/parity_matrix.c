/* parity_matrix.c - the reduced-size configurations longstraw-parity runs
 * (parity.h).  Together they cover: captured lengths that split unevenly
 * over 2 and 4 ranks and evenly over 2, shards shorter than a page and
 * spanning several pages and capture chunks (chunks that cut pages), group
 * sizes 2 and 3 with unequal responses, and both trainable sets.  The model
 * is the --model-config file (configs/hybrid-tiny.json: 8 layers, every
 * other one attention). */
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

const ls_parity_config *ls_parity_matrix(const char *family, size_t *n) {
    if (family != NULL && strcmp(family, "hybrid") == 0) {
        *n = sizeof HYBRID / sizeof HYBRID[0];
        return HYBRID;
    }
    *n = 0;
    return NULL;
}
