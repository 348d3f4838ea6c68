/* task.c - the built-in tasks' prompts, rewards and supervised targets:
 * key/value retrieval and multi-query associative recall. */
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

/* recall: records per prompt */
#define RECALL_KEYS LS_TASK_RECALL_MAX_RECORDS
static size_t recall_pairs(size_t P, size_t q, size_t records) {
    if (records) return records;
    size_t n = (P - q - 2) / 8;
    n = n < q ? q : n;
    return n > RECALL_KEYS ? RECALL_KEYS : n;
}

static ls_status make_recall(ls_task *t, size_t P, size_t q, size_t records, uint64_t seed);

const char *ls_task_kind_name(ls_task_kind k) { return k == LS_TASK_RECALL ? "recall" : "retrieval"; }

int ls_task_kind_parse(const char *name) {
    if (!strcmp(name, "retrieval")) return LS_TASK_RETRIEVAL;
    if (!strcmp(name, "recall")) return LS_TASK_RECALL;
    return -1;
}

ls_status ls_task_make_kind(ls_task *t, ls_task_kind kind, size_t P, size_t value_len, size_t records,
                            uint64_t seed) {
    if (kind == LS_TASK_RECALL) return make_recall(t, P, value_len, records, seed);
    return ls_task_make(t, P, value_len, seed);
}

/* The first k entries of a uniform random permutation of 0 .. n-1 into out[k]
 * (a partial Fisher-Yates shuffle over a scratch array of n <= 26). */
static void draw_distinct(ls_rng *r, size_t n, size_t k, size_t *out) {
    size_t idx[RECALL_KEYS];
    for (size_t i = 0; i < n; i++) idx[i] = i;
    for (size_t i = 0; i < k; i++) {
        size_t j = i + (size_t)ls_rng_below(r, n - i), tmp = idx[i];
        idx[i] = idx[j];
        idx[j] = tmp;
        out[i] = idx[i];
    }
}

static ls_status make_recall(ls_task *t, size_t P, size_t q, size_t records, uint64_t seed) {
    memset(t, 0, sizeof *t);
    if (P < 64 || q < 1 || q > 16 || records > LS_TASK_RECALL_MAX_RECORDS || (records && records < q))
        return LS_ERR_ARG;
    ls_rng r;
    ls_rng_seed(&r, ls_rng_derive(seed, "task-recall"));
    size_t n_pairs = recall_pairs(P, q, records), body = P - q - 2, slot = body / n_pairs;
    t->kind = LS_TASK_RECALL;
    t->prompt = ls_mem_alloc(LS_MEM_SCRATCH, P * sizeof *t->prompt);
    t->answer = ls_mem_alloc(LS_MEM_SCRATCH, q * sizeof *t->answer);
    t->rec_at = ls_mem_alloc(LS_MEM_SCRATCH, n_pairs * sizeof *t->rec_at);
    t->queried = ls_mem_alloc(LS_MEM_SCRATCH, q * sizeof *t->queried);
    if (!t->prompt || !t->answer || !t->rec_at || !t->queried) {
        ls_task_free(t);
        return LS_ERR_NOMEM;
    }
    t->P = P;
    t->value_len = q;
    t->n_pairs = n_pairs;
    for (size_t i = 0; i < P; i++) t->prompt[i] = 'a' + (int32_t)ls_rng_below(&r, 26);
    size_t keys[RECALL_KEYS];
    draw_distinct(&r, RECALL_KEYS, n_pairs, keys);
    for (size_t k = 0; k < n_pairs; k++) { /* one record in each slot of the body (slot >= 2) */
        size_t at = k * slot + (size_t)ls_rng_below(&r, slot - 1);
        t->rec_at[k] = at;
        t->prompt[at] = 'A' + (int32_t)keys[k];
        t->prompt[at + 1] = '0' + (int32_t)ls_rng_below(&r, 10);
    }
    draw_distinct(&r, n_pairs, q, t->queried);
    int32_t *qb = t->prompt + body;
    qb[0] = '?';
    for (size_t j = 0; j < q; j++) {
        qb[1 + j] = t->prompt[t->rec_at[t->queried[j]]];
        t->answer[j] = t->prompt[t->rec_at[t->queried[j]] + 1];
    }
    qb[1 + q] = '=';
    t->chosen = t->queried[0];
    return LS_OK;
}

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
    if (t->kind == LS_TASK_RECALL) {
        for (size_t i = 0; i < R && i < t->value_len; i++) hit += resp[i] == t->answer[i];
        *retrieval = (double)hit / (double)t->value_len;
        return;
    }
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

size_t ls_task_sft_len(ls_task_kind kind, size_t P, size_t value_len, size_t records) {
    if (kind == LS_TASK_RECALL) return value_len + 2 * recall_pairs(P, value_len, records);
    return value_len + (task_pairs(P, value_len) - 1) * (7 + value_len);
}

/* recall: the q answers, then every record "K v" in a permutation drawn
 * from order_seed (0: prompt order). */
static ls_status recall_sft_target(const ls_task *t, uint64_t order_seed, int32_t *seq, double *weight,
                                   size_t *len) {
    size_t q = t->value_len, np = t->n_pairs, o = 0, order[RECALL_KEYS];
    for (size_t j = 0; j < q; j++, o++) {
        seq[o] = t->answer[j];
        weight[o] = 1;
    }
    if (order_seed) {
        ls_rng r;
        ls_rng_seed(&r, ls_rng_derive(order_seed, "sft-order"));
        draw_distinct(&r, np, np, order);
    } else {
        for (size_t k = 0; k < np; k++) order[k] = k;
    }
    for (size_t k = 0; k < np; k++, o += 2) {
        const int32_t *rec = t->prompt + t->rec_at[order[k]];
        seq[o] = rec[0];
        weight[o] = 0;
        seq[o + 1] = rec[1];
        weight[o + 1] = 1;
    }
    *len = o;
    return LS_OK;
}

ls_status ls_task_sft_target(const ls_task *t, uint64_t order_seed, int32_t **seq, double **weight, size_t *len) {
    size_t vl = t->value_len, n = t->kind == LS_TASK_RECALL ? vl + 2 * t->n_pairs
                                                             : vl + (t->n_pairs ? t->n_pairs - 1 : 0) * (7 + vl);
    *seq = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof **seq);
    *weight = ls_mem_alloc(LS_MEM_SCRATCH, n * sizeof **weight);
    if (!*seq || !*weight) {
        ls_mem_free(*seq);
        ls_mem_free(*weight);
        *seq = NULL;
        *weight = NULL;
        return LS_ERR_NOMEM;
    }
    if (t->kind == LS_TASK_RECALL) return recall_sft_target(t, order_seed, *seq, *weight, len);
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
    ls_mem_free(t->queried);
    ls_mem_free(t->rec_at);
    ls_mem_free(t->prompt);
    ls_mem_free(t->answer);
    memset(t, 0, sizeof *t);
}
