/* task.h - the built-in synthetic long-context tasks.
 *
 * retrieval (LS_TASK_RETRIEVAL, the default): the prompt is P bytes of lowercase filler with n_pairs records
 * "#KEY=VALUE;" scattered through it (KEY 4 uppercase letters, VALUE
 * `value_len` digits), and ends with the query "?KEY=" for one of them.
 * The correct response is that key's VALUE.  The reward of a response is
 * 0.8 x (fraction of the value's bytes produced at their position) + 0.2 x
 * (fraction of response bytes that are digits): the first term is the task,
 * the second a format term that gives an untrained model's group some
 * reward variance, so advantages are not all zero.
 *
 * recall (LS_TASK_RECALL, multi-query associative recall): the prompt is P
 * bytes of lowercase filler with n_pairs two-token records "Kv" scattered
 * through it, K an uppercase letter (distinct within a prompt), v a digit
 * drawn uniformly; it ends with the query block "?" K_1 .. K_q "=" naming q
 * distinct record keys in a random order (q = value_len).  The correct
 * response is v_1 .. v_q.  The reward is the fraction of the q positions
 * answered correctly (partial credit, reported as the retrieval part; the
 * format part is 0).  Chance: the values are independent uniform digits, so
 * any response that does not depend on the prompt scores 1/10 in
 * expectation, and no such response scores more.
 * n_pairs = `records` when given (q <= records <= 26), else
 * min(26, max(q, (P - q - 2) / 8)).
 *
 * dtype-independent. */
#ifndef LS_TRAINER_TASK_H
#define LS_TRAINER_TASK_H
#include <stddef.h>
#include <stdint.h>
#include "common/status.h"

typedef enum { LS_TASK_RETRIEVAL = 0, LS_TASK_RECALL = 1 } ls_task_kind;
#define LS_TASK_RECALL_CHANCE 0.1 /* recall: a prompt-independent response's expected reward */
#define LS_TASK_RECALL_MAX_RECORDS 26 /* recall: one record per uppercase key */

typedef struct {
    ls_task_kind kind;
    int32_t *prompt;   /* [P] byte tokens */
    size_t P;
    int32_t *answer;   /* [value_len] */
    size_t value_len;  /* retrieval: the value's digits; recall: the queries q */
    size_t n_pairs;    /* records in the prompt */
    size_t *rec_at;    /* [n_pairs] offset of each record's '#' */
    size_t chosen;     /* retrieval: the queried record */
    size_t *queried;   /* recall: [value_len] the queried records, in the query block's order */
} ls_task;

/* Build a retrieval prompt of exactly P tokens (P >= 64).  Free with
 * ls_task_free. */
ls_status ls_task_make(ls_task *t, size_t P, size_t value_len, uint64_t seed);
/* The same for either task (recall: value_len = q in [1, 16]; records: the
 * records per prompt, 0 for the default; ignored by retrieval). */
ls_status ls_task_make_kind(ls_task *t, ls_task_kind kind, size_t P, size_t value_len, size_t records,
                            uint64_t seed);
/* "retrieval" / "recall"; ls_task_kind_parse returns -1 for another name. */
const char *ls_task_kind_name(ls_task_kind k);
int ls_task_kind_parse(const char *name);
double ls_task_reward(const ls_task *t, const int32_t *resp, size_t R);
/* The reward's two terms, each already weighted (reward = retrieval +
 * format).  recall: retrieval = the fraction of queries answered, format =
 * 0.  retrieval: retrieval = 0.8 x the fraction of the value's bytes produced at
 * their position, format = 0.2 x the fraction of response bytes that are
 * digits.  A random response of digits scores retrieval 0.08 on average. */
void ls_task_reward_parts(const ls_task *t, const int32_t *resp, size_t R, double *retrieval, double *format);
void ls_task_free(ls_task *t);

/* The supervised target of the sft objective.  recall: the q answers, then
 * every record as "K v" (weight 0 on K, 1 on v) in an order drawn from
 * `order_seed` (0: prompt order).  retrieval: the queried value, then every
 * other record queried and answered the way the prompt's own query is, in
 * an order drawn from `order_seed` (0: prompt order): VALUE (";?" KEY "=" VALUE)...  *seq [*len] and *weight [*len]
 * (1 on value bytes, the answers; 0 on the query bytes, which are not
 * predictable) are the caller's (ls_mem_free; scratch category).  Every
 * record of the prompt is one retrieval example, so one step teaches
 * n_pairs of them. */
ls_status ls_task_sft_target(const ls_task *t, uint64_t order_seed, int32_t **seq, double **weight, size_t *len);
/* The length of that target for a prompt of P tokens (for the memory plan). */
size_t ls_task_sft_len(ls_task_kind kind, size_t P, size_t value_len, size_t records);
#endif
