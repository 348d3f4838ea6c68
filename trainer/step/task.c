/* task.c - key/value retrieval prompts and their reward. */
#include "trainer/step/task.h"

#include <stdlib.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/base/rng.h"

/* Record bytes "#KEY=VALUE;", query bytes "?KEY=", and records per prompt
 * (about one eighth of the prompt is records). */
#define REC_LEN(vl) (1 + 4 + 1 + (vl) + 1)
#define QUERY_LEN (1 + 4 + 1)
static size_t task_pairs(size_t P, size_t value_len) { return (P - QUERY_LEN) / (REC_LEN(value_len) * 8) + 1; }

ls_status ls_task_make(ls_task *t, size_t P, size_t value_len, uint64_t seed) {
    memset(t, 0, sizeof *t);
    if (P < 64 || value_len < 1 || value_len > 16) return LS_ERR_ARG;
    ls_rng r;
    ls_rng_seed(&r, ls_rng_derive(seed, "task"));
    /* the prompt's tokens grow with P: tracked (scratch: the step copies them) */
    t->prompt = ls_mem_alloc(LS_MEM_SCRATCH, P * sizeof *t->prompt);
    t->answer = ls_mem_alloc(LS_MEM_SCRATCH, value_len * sizeof *t->answer);
    if (!t->prompt || !t->answer) {
        ls_task_free(t);
        return LS_ERR_NOMEM;
    }
    t->P = P;
    t->value_len = value_len;
    for (size_t i = 0; i < P; i++) t->prompt[i] = 'a' + (int32_t)ls_rng_below(&r, 26);
    size_t rec = REC_LEN(value_len), body = P - QUERY_LEN, n_pairs = task_pairs(P, value_len);
    size_t slot = body / n_pairs, chosen = (size_t)ls_rng_below(&r, n_pairs);
    t->rec_at = ls_mem_alloc(LS_MEM_SCRATCH, n_pairs * sizeof *t->rec_at);
    if (!t->rec_at) {
        ls_task_free(t);
        return LS_ERR_NOMEM;
    }
    t->chosen = chosen;
    int32_t key[4] = {'A', 'A', 'A', 'A'};
    for (size_t k = 0; k < n_pairs; k++) {
        if (slot < rec) break;
        size_t at = k * slot + (size_t)ls_rng_below(&r, slot - rec + 1);
        t->rec_at[t->n_pairs++] = at;
        int32_t *q = t->prompt + at;
        q[0] = '#';
        for (int j = 0; j < 4; j++) q[1 + j] = 'A' + (int32_t)ls_rng_below(&r, 26);
        q[5] = '=';
        for (size_t j = 0; j < value_len; j++) q[6 + j] = '0' + (int32_t)ls_rng_below(&r, 10);
        q[6 + value_len] = ';';
        if (k == chosen) {
            memcpy(key, q + 1, sizeof key);
            memcpy(t->answer, q + 6, value_len * sizeof *t->answer);
        }
    }
    int32_t *q = t->prompt + body;
    q[0] = '?';
    memcpy(q + 1, key, sizeof key);
    q[5] = '=';
    return LS_OK;
}

void ls_task_reward_parts(const ls_task *t, const int32_t *resp, size_t R, double *retrieval, double *format) {
    *retrieval = *format = 0;
    if (R == 0) return;
    size_t hit = 0, digits = 0;
    for (size_t i = 0; i < R; i++) {
        if (i < t->value_len && resp[i] == t->answer[i]) hit++;
        if (resp[i] >= '0' && resp[i] <= '9') digits++;
    }
    *retrieval = 0.8 * (double)hit / (double)t->value_len;
    *format = 0.2 * (double)digits / (double)R;
}

double ls_task_reward(const ls_task *t, const int32_t *resp, size_t R) {
    double a, b;
    ls_task_reward_parts(t, resp, R, &a, &b);
    return a + b;
}

static size_t gcd(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

size_t ls_task_sft_len(size_t P, size_t value_len) {
    return value_len + (task_pairs(P, value_len) - 1) * (7 + value_len);
}

ls_status ls_task_sft_target(const ls_task *t, uint64_t order_seed, int32_t **seq, double **weight, size_t *len) {
    size_t vl = t->value_len, n = vl + (t->n_pairs ? t->n_pairs - 1 : 0) * (7 + vl);
    *seq = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof **seq);
    *weight = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof **weight);
    if (!*seq || !*weight) {
        ls_mem_free(*seq);
        ls_mem_free(*weight);
        *seq = NULL;
        *weight = NULL;
        return LS_ERR_NOMEM;
    }
    size_t o = 0;
    for (size_t j = 0; j < vl; j++, o++) {
        (*seq)[o] = t->answer[j];
        (*weight)[o] = 1;
    }
    ls_rng r;
    ls_rng_seed(&r, ls_rng_derive(order_seed, "sft-order"));
    size_t pos = 0; /* a random cyclic start and stride over the records: a permutation when coprime */
    size_t np = t->n_pairs, step = 1;
    if (order_seed && np > 1) {
        pos = (size_t)ls_rng_below(&r, np);
        do step = 1 + (size_t)ls_rng_below(&r, np - 1);
        while (gcd(step, np) != 1);
    }
    for (size_t i = 0; i < np; i++, pos = (pos + step) % np) {
        size_t k = pos;
        if (k == t->chosen) continue;
        const int32_t *q = t->prompt + t->rec_at[k]; /* "#KEY=VALUE;" */
        (*seq)[o] = ';';
        (*seq)[o + 1] = '?';
        for (int j = 0; j < 4; j++) (*seq)[o + 2 + j] = q[1 + j];
        (*seq)[o + 6] = '=';
        for (size_t j = 0; j < 7; j++) (*weight)[o + j] = 0;
        o += 7;
        for (size_t j = 0; j < vl; j++, o++) {
            (*seq)[o] = q[6 + j];
            (*weight)[o] = 1;
        }
    }
    *len = o;
    return LS_OK;
}

void ls_task_free(ls_task *t) {
    ls_mem_free(t->rec_at);
    ls_mem_free(t->prompt);
    ls_mem_free(t->answer);
    memset(t, 0, sizeof *t);
}
