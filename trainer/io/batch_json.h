/* batch_json.h - internal to trainer/io: the JSON fields of a batch that
 * the rollouts lines (rollouts.c) and the batch dump (batch_dump.c) share,
 * read strictly.  Every reader takes `where` (the input's name) and writes
 * one error line to err[err_len] naming the field. */
#ifndef LS_TRAINER_BATCH_JSON_H
#define LS_TRAINER_BATCH_JSON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "trainer/io/batch.h"

/* Errors are "WHERE: field 'NAME[i]': problem"; WHERE is cut to 400 bytes.
 * Used where `err` and `err_len` are in scope. */
#define FIELD_ERR(...) snprintf(err, err_len, __VA_ARGS__)

/* A non-empty array of token ids in [0, vocab), at least min_len long.
 * *out (n ids) is the caller's (free()), untouched on failure. */
ls_status ls_batch_json_ids(const cJSON *arr, int vocab, size_t min_len, const char *where, const char *field,
                            int32_t **out, size_t *n, char *err, size_t err_len);

/* An array of exactly n finite numbers (and <= 0 when logprob) into dst. */
ls_status ls_batch_json_reals(const cJSON *arr, size_t n, int logprob, const char *where, const char *field,
                              double *dst, char *err, size_t err_len);

/* Refuses any member of obj not named in keys[0..n). */
ls_status ls_batch_json_only_keys(const cJSON *obj, const char *const *keys, size_t n, const char *where,
                                  const char *what, char *err, size_t err_len);

/* prompt and responses (ids), shared by rollouts and dumps: *out is a new
 * batch of one member per response, the caller's (ls_batch_free), untouched
 * on failure. */
ls_status ls_batch_json_tokens(const cJSON *doc, int vocab, const char *where, ls_batch **out, char *err,
                               size_t err_len);

/* G rows of log-probs of the response lengths into rows[i]. */
ls_status ls_batch_json_lp_rows(const cJSON *arr, const ls_batch *b, const char *where, const char *name,
                                double **rows, char *err, size_t err_len);
#endif
