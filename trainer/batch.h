/* batch.h - one GRPO step's inputs (MODEL.md §4, §6): prompt, G responses of
 * possibly different lengths, rewards, advantages, old- and reference-policy
 * log-probs.  Numbers are doubles whatever the compute dtype.  Also the
 * batch dump (--dump-batch, JSON: writer and strict reader) and the
 * external rollouts file (--rollouts, JSONL: reader from a path or from
 * bytes, with a line limit) formats.  dtype-independent. */
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
    int ref_supplied; /* reference log-probs came from the rollouts file */
} ls_batch;

/* Allocate an empty batch for G members (prompt/responses set by the caller
 * with ls_batch_set_*).  Free with ls_batch_free (NULL ok). */
ls_status ls_batch_alloc(ls_batch **out, size_t G);
ls_status ls_batch_set_prompt(ls_batch *b, const int32_t *ids, size_t P);
ls_status ls_batch_set_response(ls_batch *b, size_t i, const int32_t *ids, size_t R);
void ls_batch_free(ls_batch *b);

/* Longest rollouts line read (bytes, without the newline): 256 MiB.  A
 * longer first line is refused naming the file and line, after reading at
 * most this many bytes plus one. */
#define LS_BATCH_MAX_LINE ((size_t)256 << 20)

/* Parse the first line (up to the first '\n' or the end) of the rollouts
 * JSONL bytes buf[0..len): {"prompt": [ids], "responses": [[ids]...],
 * "rewards": [...], "old_logprobs": [[...]...] (optional)}.  Strict JSON
 * (no duplicate keys, nothing after the object), no other keys, ids in
 * [0, vocab), prompt >= 2 tokens, responses >= 1 token each, equal counts,
 * finite numbers, log-probs <= 0.  A first line longer than max_line bytes
 * (0: LS_BATCH_MAX_LINE) is refused.  Errors name `where`, the line and the
 * field ("FILE: line 1: field 'responses[2][5]': ...").  *out is the
 * caller's (ls_batch_free); adv and ref_lp are zero, old_lp zero unless
 * supplied. */
ls_status ls_batch_parse_rollouts(ls_batch **out, const char *buf, size_t len, const char *where, int vocab,
                                  size_t max_line, char *err, size_t err_len);

/* Read and parse the first line of the rollouts file at path (the rest of
 * the file is not read); the _max form takes the line limit (0: default). */
ls_status ls_batch_read_rollouts(ls_batch **out, const char *path, int vocab, char *err, size_t err_len);
ls_status ls_batch_read_rollouts_max(ls_batch **out, const char *path, int vocab, size_t max_line, char *err,
                                     size_t err_len);

/* The MODEL.md §6 batch dump as one line of JSON text (*text is the
 * caller's, NUL-terminated, *len bytes): config (model and objective keys,
 * obj required), prompt, responses, rewards, advantages, old_logprobs,
 * ref_logprobs.  LS_ERR_NONFINITE when a number is not finite. */
ls_status ls_batch_format_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                               char **text, size_t *len, char *err, size_t err_len);

/* Write the batch dump atomically (ls_batch_format_dump + atomic write). */
ls_status ls_batch_write_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                              const char *path, char *err, size_t err_len);

/* Parse a batch dump from buf[0..len) (`where` names it in errors).  Strict:
 * exactly the seven top-level fields; the config holds exactly the model
 * keys of its family (checked by ls_config_from_json and ls_config_check)
 * plus the eight objective keys (train_mode "lora"/"full", lora_r integer in
 * [1, 1024], lora_alpha in [1e-6, 1e6], lora_experts bool, grad_mode
 * "detached"/"full", epsilon in [0, 1], beta in [0, 100], temperature in
 * [1e-3, 1e3]); ids in [0, vocab); prompt >= 2 tokens; G >= 1 responses of
 * >= 1 token; G rewards and advantages, finite; old/ref log-prob rows of the
 * response lengths, finite and <= 0.  Errors name the field, e.g.
 * "FILE: field 'old_logprobs[3][7]': not a finite log-prob <= 0".  On
 * success *out (old_supplied = 1), *cfg and *obj (lora_init_random = 0) are
 * set; on failure *out is NULL. */
ls_status ls_batch_parse_dump(ls_batch **out, ls_model_config *cfg, ls_objective *obj, const char *buf,
                              size_t len, const char *where, char *err, size_t err_len);
/* Read a whole dump file (size-capped by ls_json_read_bytes) and parse it. */
ls_status ls_batch_read_dump(ls_batch **out, ls_model_config *cfg, ls_objective *obj, const char *path,
                             char *err, size_t err_len);
#endif
