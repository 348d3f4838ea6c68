/* test_receipts_steps.c - the receipt's split of the completed steps into
 * exact and prefix-frozen ones, the prefix-frozen step list and the
 * per-objective counts: a caller that sets nothing gets all steps exact;
 * what is set round-trips; every inconsistency (counts that do not add up,
 * a list of the wrong length or out of order, objective counts that miss
 * steps) is refused by the writer or the reader, naming the member. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "receipts/format/build_info.h"
#include "receipts/writing/receipt.h"
#include "tests/support/test_receipts_support.h"

static char *tmp;
static cJSON *build, *config;

static void setup(void) {
    tmp = ls_test_mkdtemp();
    char p[4096];
    snprintf(p, sizeof p, "%s/rank-0000", tmp);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", tmp);
    ls_test_write_file(p, "events\n", 7);
    cr_assert_eq(ls_build_info_create("0.3.21", "x", &build), LS_OK);
    config = ls_test_config();
}

static void teardown(void) {
    cJSON_Delete(build);
    cJSON_Delete(config);
    ls_test_scratch_free(&tmp);
}

/* Writes w and reads it back (the caller frees the result). */
static ls_receipt *write_read(const ls_receipt *w) {
    char err[1024], p[4096];
    cr_assert_eq(ls_receipt_write(tmp, w, err, sizeof err), LS_OK, "%s", err);
    ls_receipt_path(tmp, 0, p, sizeof p);
    ls_receipt *r = NULL;
    cr_assert_eq(ls_receipt_read(p, &r, err, sizeof err), LS_OK, "%s", err);
    return r;
}

/* A receipt of 5 steps (measured 5, the peak in step 0). */
static ls_receipt five_steps(void) {
    ls_receipt w = ls_test_receipt(0, 1, build, config);
    w.steps = 5;
    w.steps_measured = 5;
    return w;
}

Test(receipts_steps, defaults_are_all_exact, .init = setup, .fini = teardown) {
    ls_receipt w = five_steps();
    ls_receipt *r = write_read(&w);
    cr_assert_eq(r->steps, 5u);
    cr_assert_eq(r->steps_exact, 5u);
    cr_assert_eq(r->steps_prefix_frozen, 0u);
    cr_assert_null(r->prefix_frozen_steps);
    cr_assert_eq(r->n_objectives, 0u);
    cr_assert_null(r->objectives);
    ls_receipt_free(r);
    char p[4096];
    ls_receipt_path(tmp, 0, p, sizeof p);
    char *text = ls_test_read_file(p, NULL);
    cr_assert_not_null(strstr(text, "\"steps_exact\":\t5,"), "%s", text);
    cr_assert_not_null(strstr(text, "\"steps_prefix_frozen\":\t0,"), "%s", text);
    cr_assert_not_null(strstr(text, "\"prefix_frozen_steps\":\t[]"), "%s", text);
    cr_assert_null(strstr(text, "steps_by_objective"), "written without objectives");
    free(text);
}

Test(receipts_steps, prefix_frozen_and_objectives_round_trip, .init = setup, .fini = teardown) {
    ls_receipt w = five_steps();
    /* what --prefix-frozen 3 would do with a 1-step SFT warm start first:
     * step 0 sft, 1 exact grpo, 2-3 frozen, 4 exact (a fresh capture) */
    const uint64_t frozen[] = {2, 3};
    const ls_receipt_objective objs[] = {{"sft", 1}, {"grpo", 4}};
    w.steps_prefix_frozen = 2;
    w.prefix_frozen_steps = frozen;
    w.objectives = objs;
    w.n_objectives = 2;
    ls_receipt *r = write_read(&w);
    cr_assert_eq(r->steps_exact, 3u);
    cr_assert_eq(r->steps_prefix_frozen, 2u);
    cr_assert_not_null(r->prefix_frozen_steps);
    cr_assert_eq(r->prefix_frozen_steps[0], 2u);
    cr_assert_eq(r->prefix_frozen_steps[1], 3u);
    cr_assert_eq(r->n_objectives, 2u);
    cr_assert_str_eq(r->objectives[0].objective, "sft");
    cr_assert_eq(r->objectives[0].steps, 1u);
    cr_assert_str_eq(r->objectives[1].objective, "grpo");
    cr_assert_eq(r->objectives[1].steps, 4u);
    ls_receipt_free(r);
    /* indices are step numbers, not bounded by this run's count (a resumed
     * run continues its step counter) */
    const uint64_t later[] = {1000, 1001};
    w.prefix_frozen_steps = later;
    r = write_read(&w);
    cr_assert_eq(r->prefix_frozen_steps[1], 1001u);
    ls_receipt_free(r);
}

Test(receipts_steps, writer_refuses_inconsistent_counts, .init = setup, .fini = teardown) {
    char err[1024], p[4096];
    ls_receipt_path(tmp, 0, p, sizeof p);
    const uint64_t frozen[] = {1, 2, 3, 4, 5, 6};
    const uint64_t backwards[] = {3, 2};
    const ls_receipt_objective short_objs[] = {{"grpo", 4}};
    const ls_receipt_objective twice[] = {{"grpo", 2}, {"grpo", 3}};
    const ls_receipt_objective other[] = {{"ppo", 5}};
    const ls_receipt_objective unnamed[] = {{NULL, 5}};
    struct {
        ls_status want;
        const char *says;
    } expect[] = {
        {LS_ERR_ARG, "steps_prefix_frozen 6 is above steps 5"},
        {LS_ERR_ARG, "prefix_frozen_steps is NULL"},
        {LS_ERR_FORMAT, "prefix_frozen_steps/1: step 2 is not above the one before (3)"},
        {LS_ERR_FORMAT, "the counts add up to 4, not steps 5"},
        {LS_ERR_FORMAT, "grpo"},               /* a key twice: the strict parser refuses */
        {LS_ERR_SCHEMA, "steps_by_objective"}, /* not an objective of the schema */
        {LS_ERR_ARG, "an objective name is NULL"},
        {LS_ERR_ARG, "objectives is NULL"},
    };
    for (int k = 0; k < (int)(sizeof expect / sizeof expect[0]); k++) {
        ls_receipt w = five_steps();
        switch (k) {
        case 0: w.steps_prefix_frozen = 6; w.prefix_frozen_steps = frozen; break;
        case 1: w.steps_prefix_frozen = 2; break;
        case 2: w.steps_prefix_frozen = 2; w.prefix_frozen_steps = backwards; break;
        case 3: w.objectives = short_objs; w.n_objectives = 1; break;
        case 4: w.objectives = twice; w.n_objectives = 2; break;
        case 5: w.objectives = other; w.n_objectives = 1; break;
        case 6: w.objectives = unnamed; w.n_objectives = 1; break;
        default: w.n_objectives = 1; break;
        }
        err[0] = '\0';
        cr_expect_eq(ls_receipt_write(tmp, &w, err, sizeof err), expect[k].want, "case %d: %s", k, err);
        cr_expect_not_null(strstr(err, expect[k].says), "case %d: %s", k, err);
        cr_expect(!ls_test_exists(p), "case %d: a refused receipt was written", k);
    }
}

/* Documents only a hand can make: the reader's own checks. */
Test(receipts_steps, reader_refuses_counts_that_do_not_add_up, .init = setup, .fini = teardown) {
    ls_receipt w = five_steps();
    const uint64_t frozen[] = {1, 3};
    const ls_receipt_objective objs[] = {{"grpo", 5}};
    w.steps_prefix_frozen = 2;
    w.prefix_frozen_steps = frozen;
    w.objectives = objs;
    w.n_objectives = 1;
    static const char ZERO[] = "0000000000000000000000000000000000000000000000000000000000000000";
    char err[1024];
    for (int k = 0; k < 6; k++) {
        cJSON *doc = NULL;
        cr_assert_eq(ls_receipt_to_json(&w, ZERO, &doc, err, sizeof err), LS_OK, "%s", err);
        cJSON *p = cJSON_GetObjectItem(doc, "predicate");
        cJSON *list = cJSON_GetObjectItem(p, "prefix_frozen_steps");
        const char *says;
        switch (k) {
        case 0: /* one step counted twice */
            cJSON_ReplaceItemInObject(p, "steps_exact", cJSON_CreateNumber(4));
            says = "steps_exact 4 + steps_prefix_frozen 2 is not steps 5";
            break;
        case 1: /* one step not counted */
            cJSON_ReplaceItemInObject(p, "steps_prefix_frozen", cJSON_CreateNumber(1));
            says = "steps_exact 3 + steps_prefix_frozen 1 is not steps 5";
            break;
        case 2: /* the list shorter than the count */
            cJSON_DeleteItemFromArray(list, 1);
            says = "1 steps listed, steps_prefix_frozen is 2";
            break;
        case 3: /* out of order */
            cJSON_ReplaceItemInArray(list, 0, cJSON_CreateNumber(4));
            says = "prefix_frozen_steps/1: step 3 is not above the one before (4)";
            break;
        case 4: /* objectives missing a step */
            cJSON_ReplaceItemInObject(cJSON_GetObjectItem(p, "steps_by_objective"), "grpo",
                                      cJSON_CreateNumber(4));
            says = "add up to 4, not steps 5";
            break;
        default: /* the steps grow but the split does not */
            cJSON_ReplaceItemInObject(p, "steps", cJSON_CreateNumber(6));
            cJSON_ReplaceItemInObject(cJSON_GetObjectItem(p, "steps_by_objective"), "grpo",
                                      cJSON_CreateNumber(6));
            says = "is not steps 6";
            break;
        }
        char *text = cJSON_PrintUnformatted(doc);
        ls_receipt *r = NULL;
        err[0] = '\0';
        cr_expect_eq(ls_receipt_parse(text, strlen(text), "hand.json", &r, err, sizeof err),
                     LS_ERR_FORMAT, "case %d", k);
        cr_expect_not_null(strstr(err, says), "case %d: %s", k, err);
        cr_expect_not_null(strstr(err, "hand.json"), "case %d: the file is not named: %s", k, err);
        cr_expect_null(r);
        ls_receipt_free(r);
        free(text);
        cJSON_Delete(doc);
    }
}
