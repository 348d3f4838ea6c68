/* task.h - the built-in synthetic long-context task: key/value retrieval.
 *
 * The prompt is P bytes of lowercase filler with n_pairs records
 * "#KEY=VALUE;" scattered through it (KEY 4 uppercase letters, VALUE
 * `value_len` digits), and ends with the query "?KEY=" for one of them.
 * The correct response is that key's VALUE.  The reward of a response is
 * 0.8 x (fraction of the value's bytes produced at their position) + 0.2 x
 * (fraction of response bytes that are digits): the first term is the task,
 * the second a format term that gives an untrained model's group some
 * reward variance, so advantages are not all zero.  dtype-independent. */
#ifndef LS_TRAINER_TASK_H
#define LS_TRAINER_TASK_H
#include <stddef.h>
#include <stdint.h>
#include "common/status.h"

typedef struct {
    int32_t *prompt;   /* [P] byte tokens */
    size_t P;
    int32_t *answer;   /* [value_len] */
    size_t value_len;
    size_t n_pairs;    /* records in the prompt */
    size_t *rec_at;    /* [n_pairs] offset of each record's '#' */
    size_t chosen;     /* the queried record */
} ls_task;

/* Build a prompt of exactly P tokens (P >= 64).  Free with ls_task_free. */
ls_status ls_task_make(ls_task *t, size_t P, size_t value_len, uint64_t seed);
double ls_task_reward(const ls_task *t, const int32_t *resp, size_t R);
/* The reward's two terms, each already weighted (reward = retrieval +
 * format): retrieval = 0.8 x the fraction of the value's bytes produced at
 * their position, format = 0.2 x the fraction of response bytes that are
 * digits.  A random response of digits scores retrieval 0.08 on average. */
void ls_task_reward_parts(const ls_task *t, const int32_t *resp, size_t R, double *retrieval, double *format);
void ls_task_free(ls_task *t);

/* The supervised target of the sft objective: the queried value, then every
 * other record queried and answered the way the prompt's own query is, in
 * an order drawn from `order_seed` (0: prompt order): VALUE (";?" KEY "=" VALUE)...  *seq [*len] and *weight [*len]
 * (1 on value bytes, the answers; 0 on the query bytes, which are not
 * predictable) are the caller's (ls_mem_free; scratch category).  Every
 * record of the prompt is one retrieval example, so one step teaches
 * n_pairs of them. */
ls_status ls_task_sft_target(const ls_task *t, uint64_t order_seed, int32_t **seq, double **weight, size_t *len);
/* The length of that target for a prompt of P tokens (for the memory plan). */
size_t ls_task_sft_len(size_t P, size_t value_len);
#endif
