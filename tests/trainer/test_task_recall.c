/* test_task_recall.c - the recall task (trainer/step/task.h): every prompt
 * is laid out as documented (P tokens, records "Kv" with distinct keys and
 * digit values among lowercase filler, the query block "?K1..Kq=" last,
 * the answer each queried key's value read back from the prompt by this
 * test's own scan); the reward gives partial credit; responses that ignore
 * the prompt score chance (0.1) over many prompts; the sft target holds the
 * answers then every record; bad sizes are refused; retrieval is unchanged
 * by the new entry point. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/step/task.h"

static int is_key(int32_t c) { return c >= 'A' && c <= 'Z'; }
static int is_digit(int32_t c) { return c >= '0' && c <= '9'; }

Test(task_recall, layout_and_answer_match_an_independent_scan) {
    const size_t Ps[] = {64, 100, 1024, 4096};
    for (size_t pi = 0; pi < 4; pi++)
        for (size_t q = 1; q <= 8; q++)
            for (uint64_t seed = 1; seed <= 5; seed++) {
                size_t P = Ps[pi], records = q < 2 ? 2 : q;
                ls_task t;
                cr_assert_eq(ls_task_make_kind(&t, LS_TASK_RECALL, P, q, seed % 2 ? records : 0, seed), LS_OK);
                cr_assert_eq(t.P, P);
                cr_assert_eq(t.value_len, q);
                size_t body = P - q - 2;
                cr_assert_eq(t.prompt[body], '?');
                cr_assert_eq(t.prompt[P - 1], '=');
                /* the body: filler, keys each followed by a digit, every key once */
                int seen[26] = {0}, val[26];
                size_t n_keys = 0;
                for (size_t i = 0; i < body; i++) {
                    int32_t c = t.prompt[i];
                    if (is_key(c)) {
                        cr_assert(i + 1 < body && is_digit(t.prompt[i + 1]), "P=%zu: key at %zu without a value", P, i);
                        cr_assert_eq(seen[c - 'A'], 0, "key %c twice", (char)c);
                        seen[c - 'A'] = 1;
                        val[c - 'A'] = t.prompt[i + 1];
                        n_keys++;
                        i++;
                    } else {
                        cr_assert(c >= 'a' && c <= 'z', "P=%zu: byte %d at %zu is neither filler nor a record", P, c, i);
                    }
                }
                cr_assert_eq(n_keys, t.n_pairs);
                if (seed % 2) cr_assert_eq(n_keys, records);
                /* the queries: distinct keys of the prompt; the answer their values */
                int asked[26] = {0};
                for (size_t j = 0; j < q; j++) {
                    int32_t k = t.prompt[body + 1 + j];
                    cr_assert(is_key(k) && seen[k - 'A'], "query %zu is not a record's key", j);
                    cr_assert_eq(asked[k - 'A'], 0, "key queried twice");
                    asked[k - 'A'] = 1;
                    cr_assert_eq(t.answer[j], val[k - 'A']);
                }
                ls_task_free(&t);
            }
}

Test(task_recall, reward_gives_partial_credit) {
    ls_task t;
    cr_assert_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 256, 4, 0, 9), LS_OK);
    int32_t r[6];
    memcpy(r, t.answer, 4 * sizeof *r);
    r[4] = r[5] = 'x';
    double rr, rf;
    ls_task_reward_parts(&t, r, 4, &rr, &rf);
    cr_expect_float_eq(rr, 1.0, 1e-15);
    cr_expect_float_eq(rf, 0.0, 1e-15);
    cr_expect_float_eq(ls_task_reward(&t, r, 6), 1.0, 1e-15, "trailing tokens beyond q neither add nor cost");
    r[1] = r[1] == '0' ? '1' : '0';
    cr_expect_float_eq(ls_task_reward(&t, r, 4), 0.75, 1e-15);
    r[3] = r[3] == '0' ? '1' : '0';
    cr_expect_float_eq(ls_task_reward(&t, r, 4), 0.5, 1e-15);
    cr_expect_float_eq(ls_task_reward(&t, r, 1), 0.25, 1e-15, "a short response: the missing answers score 0");
    ls_task_free(&t);
}

/* Three responses that cannot see the prompt (a constant, a fixed mixed
 * string, a seed-driven pseudo-random one) average chance over 4000 prompts:
 * within 4 standard errors of 0.1 (q = 2: a per-prompt sd <= 0.5). */
Test(task_recall, responses_that_ignore_the_prompt_score_chance) {
    const size_t n = 4000, q = 2;
    double sum[3] = {0}, worst = 0;
    uint64_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        ls_task t;
        cr_assert_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 128, q, 2, 1000 + i), LS_OK);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int32_t r0[2] = {'7', '7'}, r1[2] = {'3', '8'}, r2[2] = {'0' + (int32_t)((x >> 33) % 10), '0' + (int32_t)((x >> 40) % 10)};
        sum[0] += ls_task_reward(&t, r0, q);
        sum[1] += ls_task_reward(&t, r1, q);
        sum[2] += ls_task_reward(&t, r2, q);
        ls_task_free(&t);
    }
    for (int k = 0; k < 3; k++) {
        double m = sum[k] / (double)n, d = fabs(m - LS_TASK_RECALL_CHANCE);
        worst = d > worst ? d : worst;
        cr_expect_lt(d, 4 * 0.5 / sqrt((double)n), "prompt-blind response %d scores %.4f, not chance 0.1", k, m);
    }
    cr_log_info("prompt-blind responses: largest distance from chance %.4f over %zu prompts", worst, n);
}

Test(task_recall, sft_target_holds_the_answers_then_every_record) {
    for (uint64_t order = 0; order < 3; order++) {
        ls_task t;
        cr_assert_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 512, 3, 0, 21), LS_OK);
        int32_t *seq = NULL;
        double *w = NULL;
        size_t n = 0;
        cr_assert_eq(ls_task_sft_target(&t, order, &seq, &w, &n), LS_OK);
        cr_assert_eq(n, ls_task_sft_len(LS_TASK_RECALL, 512, 3, 0));
        cr_assert_eq(n, 3 + 2 * t.n_pairs);
        for (size_t j = 0; j < 3; j++) {
            cr_expect_eq(seq[j], t.answer[j]);
            cr_expect_float_eq(w[j], 1.0, 0);
        }
        int seen[26] = {0};
        for (size_t o = 3; o < n; o += 2) {
            cr_assert(is_key(seq[o]) && !seen[seq[o] - 'A']);
            seen[seq[o] - 'A'] = 1;
            cr_expect_float_eq(w[o], 0.0, 0);
            cr_expect_float_eq(w[o + 1], 1.0, 0);
            int found = 0; /* the pair is a record of the prompt */
            for (size_t i = 0; i + 1 < t.P; i++) found |= t.prompt[i] == seq[o] && t.prompt[i + 1] == seq[o + 1];
            cr_expect(found, "sft pair %c%c is not in the prompt", (char)seq[o], (char)seq[o + 1]);
        }
        ls_mem_free(seq);
        ls_mem_free(w);
        ls_task_free(&t);
    }
}

Test(task_recall, bad_sizes_are_refused_and_names_parse) {
    ls_task t;
    cr_expect_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 63, 2, 0, 1), LS_ERR_ARG);
    cr_expect_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 64, 0, 0, 1), LS_ERR_ARG);
    cr_expect_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 64, 17, 0, 1), LS_ERR_ARG);
    cr_expect_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 64, 4, 3, 1), LS_ERR_ARG, "fewer records than queries");
    cr_expect_eq(ls_task_make_kind(&t, LS_TASK_RECALL, 64, 4, 27, 1), LS_ERR_ARG, "more records than keys");
    cr_expect_eq(ls_task_kind_parse("recall"), LS_TASK_RECALL);
    cr_expect_eq(ls_task_kind_parse("retrieval"), LS_TASK_RETRIEVAL);
    cr_expect_eq(ls_task_kind_parse("Recall"), -1);
    cr_expect_str_eq(ls_task_kind_name(LS_TASK_RECALL), "recall");
}

Test(task_recall, retrieval_through_the_new_entry_point_is_unchanged) {
    ls_task a, b;
    cr_assert_eq(ls_task_make(&a, 300, 6, 5), LS_OK);
    cr_assert_eq(ls_task_make_kind(&b, LS_TASK_RETRIEVAL, 300, 6, 0, 5), LS_OK);
    cr_expect_eq(memcmp(a.prompt, b.prompt, 300 * sizeof *a.prompt), 0);
    cr_expect_eq(memcmp(a.answer, b.answer, 6 * sizeof *a.answer), 0);
    ls_task_free(&a);
    ls_task_free(&b);
}
