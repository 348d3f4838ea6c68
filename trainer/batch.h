/* batch.h - one GRPO step's inputs (MODEL.md §4, §6): prompt, G responses of
 * possibly different lengths, rewards, advantages, old- and reference-policy
 * log-probs.  Numbers are doubles whatever the compute dtype.  Also the
 * batch dump (--dump-batch, JSON) and the external rollouts file
 * (--rollouts, JSONL) formats.  dtype-independent. */
#ifndef LS_TRAINER_BATCH_H
#define LS_TRAINER_BATCH_H
#include <stddef.h>
#include <stdint.h>
#include "common/status.h"
#include "trainer/config.h"

typedef struct {
    int32_t *prompt;
    size_t P;
    size_t G;
    int32_t **resp;   /* [G][R[i]] */
    size_t *R;        /* [G] */
    double *rewards;  /* [G] */
    double *adv;      /* [G] */
    double **old_lp;  /* [G][R[i]], NULL rows until scored or supplied */
    double **ref_lp;  /* [G][R[i]] */
    int old_supplied; /* old log-probs came from the rollouts file */
} ls_batch;

/* Allocate an empty batch for G members (prompt/responses set by the caller
 * with ls_batch_set_*).  Free with ls_batch_free (NULL ok). */
ls_status ls_batch_alloc(ls_batch **out, size_t G);
ls_status ls_batch_set_prompt(ls_batch *b, const int32_t *ids, size_t P);
ls_status ls_batch_set_response(ls_batch *b, size_t i, const int32_t *ids, size_t R);
void ls_batch_free(ls_batch *b);

/* Read the first line of a rollouts JSONL file: {"prompt": [ids],
 * "responses": [[ids]...], "rewards": [...], "old_logprobs": [[...]...]
 * (optional)}.  Checks ids < vocab, equal counts, lengths >= 1, finite
 * numbers; errors name the file, line and field. */
ls_status ls_batch_read_rollouts(ls_batch **out, const char *path, int vocab, char *err, size_t err_len);

/* Write the MODEL.md §6 batch dump atomically; config embeds the model and
 * objective keys. */
ls_status ls_batch_write_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                              const char *path, char *err, size_t err_len);
#endif
