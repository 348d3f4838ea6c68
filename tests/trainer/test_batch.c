/* test_batch.c - the batch dump reader and the rollouts reader (batch.h).
 *
 * Round trip: a batch of seeded random numbers (every magnitude from 1e-300
 * to 1e3, 17 significant digits) written with ls_batch_write_dump and read
 * back with ls_batch_read_dump is bit-identical to what was written, field
 * by field, for both families and non-default objective settings; a dump
 * written by longstraw-train itself (f32 and f64) is accepted and its
 * config equals the --config file.  Corruption: each targeted change of a
 * valid dump is refused naming the field; every truncation is refused;
 * every single-byte change is refused or yields a dump that round-trips.
 * Rollouts, one group per line (the streaming reader): the lines of a
 * fixture file come back as their own groups, compared with numbers
 * written by hand in the test; a bad second line of each kind is refused
 * naming line 2 and the field after line 1 came back intact, whatever the
 * read(2) size; an over-long line (also one that never ends, from a pipe
 * and from /dev/zero) is refused after at most limit + 1 of its bytes were
 * read (the reader's byte count); a writer that sends each line in pieces
 * and waits for the group before sending the next one is served line by
 * line (a reader that read ahead would deadlock and time out), through a
 * descriptor and through standard input; CRLF, blank lines, a last line
 * without a newline and an empty file; the line count for --steps; every
 * schema fixture of rollouts-line is read (valid) or refused (invalid) by
 * the reader as the schema says. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainer/io/batch.h"
#include "trainer/model/config.h"
#include "tests/support/test_util.h"
#include "tests/support/test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define CFG_DIR LS_SOURCE_DIR "/configs/"

static char tmpdir[256];

static void setup(void) { ls_test_tmpdir_make(tmpdir, "batch"); }

static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

TestSuite(batch, .init = setup, .fini = teardown);

static void load_cfg(const char *name, ls_model_config *c) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s%s", CFG_DIR, name);
    cr_assert_eq(ls_config_load(c, path, err, sizeof err), LS_OK, "%s", err);
}

/* A batch with G members of unequal lengths and numbers of every magnitude. */
static ls_batch *random_batch(uint64_t seed, int vocab, size_t P, size_t G) {
    ls_batch *b = NULL;
    cr_assert_eq(ls_batch_alloc(&b, G), LS_OK);
    int32_t ids[512];
    for (size_t t = 0; t < P; t++) ids[t] = (int32_t)(tu_next(&seed) % (uint64_t)vocab);
    cr_assert_eq(ls_batch_set_prompt(b, ids, P), LS_OK);
    for (size_t i = 0; i < G; i++) {
        size_t R = 1 + (size_t)(tu_next(&seed) % 9);
        for (size_t t = 0; t < R; t++) ids[t] = (int32_t)(tu_next(&seed) % (uint64_t)vocab);
        cr_assert_eq(ls_batch_set_response(b, i, ids, R), LS_OK);
        for (size_t t = 0; t < R; t++) {
            b->old_lp[i][t] = -pow(10.0, tu_unif(&seed, -300, 3));
            b->ref_lp[i][t] = t == 0 ? 0.0 : -tu_unif(&seed, 0, 30);
        }
        b->rewards[i] = tu_unif(&seed, -1, 1) * pow(10.0, tu_unif(&seed, -20, 20));
        b->adv[i] = tu_unif(&seed, -3, 3);
    }
    b->old_supplied = 1;
    b->ref_supplied = 1;
    return b;
}

/* Bitwise equality of every field, the largest difference reported. */
static void expect_same_batch(const ls_batch *a, const ls_batch *b) {
    cr_assert_eq(a->P, b->P);
    cr_assert_eq(a->G, b->G);
    cr_expect_eq(memcmp(a->prompt, b->prompt, a->P * sizeof *a->prompt), 0, "prompt ids differ");
    cr_expect_eq(memcmp(a->rewards, b->rewards, a->G * sizeof(double)), 0, "rewards differ");
    cr_expect_eq(memcmp(a->adv, b->adv, a->G * sizeof(double)), 0, "advantages differ");
    cr_expect_eq(a->old_supplied, b->old_supplied);
    cr_expect_eq(a->ref_supplied, b->ref_supplied);
    double worst = 0;
    for (size_t i = 0; i < a->G; i++) {
        cr_assert_eq(a->R[i], b->R[i], "member %zu length", i);
        cr_expect_eq(memcmp(a->resp[i], b->resp[i], a->R[i] * sizeof(int32_t)), 0, "responses[%zu]", i);
        for (size_t t = 0; t < a->R[i]; t++) {
            worst = fmax(worst, fabs(a->old_lp[i][t] - b->old_lp[i][t]));
            worst = fmax(worst, fabs(a->ref_lp[i][t] - b->ref_lp[i][t]));
        }
        cr_expect_eq(memcmp(a->old_lp[i], b->old_lp[i], a->R[i] * sizeof(double)), 0, "old_logprobs[%zu]", i);
        cr_expect_eq(memcmp(a->ref_lp[i], b->ref_lp[i], a->R[i] * sizeof(double)), 0, "ref_logprobs[%zu]", i);
    }
    cr_expect_eq(worst, 0.0, "largest log-prob difference %g", worst);
}

/* Every key of the family, compared through their JSON texts. */
static void expect_same_config(const ls_model_config *a, const ls_model_config *b) {
    cJSON *ja = ls_config_to_json(a, NULL), *jb = ls_config_to_json(b, NULL);
    char *ta = cJSON_PrintUnformatted(ja), *tb = cJSON_PrintUnformatted(jb);
    cr_expect_str_eq(ta, tb);
    cr_expect_eq(a->rms_eps, b->rms_eps);
    cr_expect_eq(a->family, b->family);
    for (size_t k = 0; a->family && k < a->family->n_keys; k++) { /* the reals bit for bit, not as printed */
        double x = -1, y = -2;
        ls_config_key_get(a, a->family->keys[k].key, &x);
        ls_config_key_get(b, a->family->keys[k].key, &y);
        cr_expect_eq(x, y, "%s", a->family->keys[k].key);
    }
    free(ta);
    free(tb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

static void expect_same_objective(const ls_objective *a, const ls_objective *b) {
    cr_expect_eq(a->train_mode, b->train_mode);
    cr_expect_eq(a->lora_r, b->lora_r);
    cr_expect_eq(a->lora_alpha, b->lora_alpha);
    cr_expect_eq(a->lora_experts, b->lora_experts);
    cr_expect_eq(a->grad_mode, b->grad_mode);
    cr_expect_eq(a->epsilon, b->epsilon);
    cr_expect_eq(a->beta, b->beta);
    cr_expect_eq(a->temperature, b->temperature);
}

static void round_trip(const char *cfg_name, const ls_objective *o, uint64_t seed) {
    ls_model_config c, c2;
    ls_objective o2;
    load_cfg(cfg_name, &c);
    ls_batch *b = random_batch(seed, c.vocab, 40, 5), *b2 = NULL;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/dump.json", tmpdir);
    cr_assert_eq(ls_batch_write_dump(b, &c, o, path, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_batch_read_dump(&b2, &c2, &o2, path, err, sizeof err), LS_OK, "%s", err);
    expect_same_batch(b, b2);
    expect_same_config(&c, &c2);
    expect_same_objective(o, &o2);
    ls_batch_free(b);
    ls_batch_free(b2);
}

Test(batch, dump_round_trip_is_bit_exact) {
    ls_objective o;
    ls_objective_defaults(&o);
    round_trip("hybrid-tiny.json", &o, 1);
    o.train_mode = LS_TRAIN_FULL;
    o.grad_mode = LS_GRAD_FULL;
    o.lora_r = 1024;
    o.lora_alpha = 0.123456789012345678;
    o.lora_experts = 1;
    o.epsilon = 1;
    o.beta = 0;
    o.temperature = 0.7;
    round_trip("mla-tiny.json", &o, 2);
    round_trip("hybrid-small.json", &o, 3);
}

/* A valid dump's text, to corrupt. */
static char *valid_dump_text(size_t *len) {
    ls_model_config c;
    ls_objective o;
    ls_objective_defaults(&o);
    load_cfg("hybrid-tiny.json", &c);
    ls_batch *b = random_batch(7, c.vocab, 12, 3);
    char *text = NULL, err[512];
    cr_assert_eq(ls_batch_format_dump(b, &c, &o, &text, len, err, sizeof err), LS_OK, "%s", err);
    ls_batch_free(b);
    return text;
}

/* Replace the first occurrence of `from` in text with `to`. */
static char *replaced(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    cr_assert_not_null(at, "'%s' not in the dump", from);
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    size_t pre = (size_t)(at - text);
    memcpy(out, text, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    return out;
}

static void expect_refused(const char *text, const char *field) {
    ls_batch *b = (ls_batch *)1;
    ls_model_config c;
    ls_objective o;
    char err[512] = "";
    ls_status st = ls_batch_parse_dump(&b, &c, &o, text, strlen(text), "d.json", err, sizeof err);
    cr_expect_neq(st, LS_OK, "accepted a dump with a bad %s", field);
    cr_expect_null(b);
    cr_expect(strstr(err, field) != NULL && strstr(err, "d.json") != NULL, "error '%s' does not name %s", err,
              field);
}

Test(batch, corrupt_dump_fields_are_refused_by_name) {
    size_t len;
    char *t = valid_dump_text(&len);
    static const struct { const char *from, *to, *field; } cases[] = {
        {"\"responses\":[[", "\"responses\":[[256,", "'responses[0][0]'"},
        {"\"responses\":[[", "\"responses\":[[1.5,", "'responses[0][0]'"},
        {"\"responses\":[[", "\"responses\":[[-1,", "'responses[0][0]'"},
        {"\"responses\":[[", "\"responses\":[[],[", "'responses[0]'"},
        {"\"prompt\":[", "\"prompt\":[\"7\",", "'prompt[0]'"},
        {"\"old_logprobs\":[[", "\"old_logprobs\":[[0.5,", "'old_logprobs[0]'"},
        {"\"ref_logprobs\":[[0", "\"ref_logprobs\":[[1e-300", "'ref_logprobs[0][0]'"},
        {"\"ref_logprobs\":[[", "\"ref_logprobs\":[[-1,", "'ref_logprobs[0]'"},
        {"\"rewards\":[", "\"rewards\":[1,", "'rewards'"},
        {"\"rewards\":[", "\"rewards\":[true,", "'rewards'"},
        {"\"advantages\":[", "\"advantages\":[null,", "'advantages'"},
        {"\"advantages\":", "\"extra\":1,\"advantages\":", "'extra'"},
        {"\"config\":{", "\"config\":{\"lora_rr\":4,", "key 'lora_rr'"},
        {"\"config\":{", "\"config\":{\"heads\":4,", "key 'heads'"},
        {"\"lora_r\":4", "\"lora_r\":4.5", "key 'lora_r'"},
        {"\"lora_r\":4", "\"lora_r\":0", "key 'lora_r'"},
        {"\"train_mode\":\"lora\"", "\"train_mode\":\"LoRA\"", "key 'train_mode'"},
        {"\"grad_mode\":\"detached\",", "", "key 'grad_mode'"},
        {"\"lora_experts\":false", "\"lora_experts\":0", "key 'lora_experts'"},
        {"\"epsilon\":0.2", "\"epsilon\":2", "key 'epsilon'"},
        {"\"temperature\":1", "\"temperature\":0", "key 'temperature'"},
        {"\"vocab\":256", "\"vocab\":1", "key 'vocab'"},
        {"\"rope_dim\":8", "\"rope_dim\":7", "key 'rope_dim'"},
        {"\"d_model\":64,", "", "key 'd_model'"},
        {"\"family\":\"hybrid\"", "\"family\":\"mla\"", "belongs to the hybrid family"},
        {"\"prompt\":[", "\"prompt\":[1],\"x\":[", "'x'"},
        {"\"ref_logprobs\":", "\"ref_logprobs\":[],\"y\":", "'y'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *bad = replaced(t, cases[i].from, cases[i].to);
        expect_refused(bad, cases[i].field);
        free(bad);
    }
    char *dup = replaced(t, "\"config\":", "\"prompt\":[1,2],\"config\":");
    expect_refused(dup, "duplicate object key \"prompt\"");
    free(dup);
    free(t);
}

Test(batch, every_truncation_is_refused_and_byte_flips_never_crash) {
    size_t len;
    char *t = valid_dump_text(&len);
    char err[512];
    for (size_t n = 0; n < len; n++) {
        ls_batch *b = NULL;
        ls_model_config c;
        ls_objective o;
        cr_assert_neq(ls_batch_parse_dump(&b, &c, &o, t, n, "cut", err, sizeof err), LS_OK,
                      "a dump cut to %zu of %zu bytes was accepted", n, len);
        cr_assert_null(b);
    }
    size_t accepted = 0;
    char *m = malloc(len);
    for (size_t p = 0; p < len; p++) {
        static const char subst[] = {'0', '9', '-', '"', ']', '}', ',', 'e'};
        memcpy(m, t, len);
        m[p] = subst[p % sizeof subst];
        ls_batch *b = NULL, *b2 = NULL;
        ls_model_config c, c2;
        ls_objective o, o2;
        if (ls_batch_parse_dump(&b, &c, &o, m, len, "flip", err, sizeof err) != LS_OK) {
            cr_assert_null(b);
            continue;
        }
        accepted++;
        char *again = NULL;
        size_t n2;
        cr_assert_eq(ls_batch_format_dump(b, &c, &o, &again, &n2, err, sizeof err), LS_OK);
        cr_assert_eq(ls_batch_parse_dump(&b2, &c2, &o2, again, n2, "again", err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(b->G, b2->G);
        free(again);
        ls_batch_free(b);
        ls_batch_free(b2);
    }
    cr_log_info("%zu of %zu single-byte changes still parse (and round-trip)", accepted, len);
    cr_expect_lt(accepted, len);
    free(m);
    free(t);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(batch, dump_written_by_the_trainer_is_read_back) {
    ls_model_config want;
    load_cfg("hybrid-tiny.json", &want);
    for (int f64 = 0; f64 <= 1; f64++) {
        char cmd[2048], path[512], err[512];
        snprintf(path, sizeof path, "%s/dump%d.json", tmpdir, f64);
        snprintf(cmd, sizeof cmd,
                 "%s --config %stiny.json --prompt-len 64 --response-len 4 --group 3 --steps 1 --seed 5 "
                 "--dtype %s --grad-mode full --train-mode full --beta 0.5 --epsilon 0.3 --out %s/run%d "
                 "--dump-batch %s --quiet >%s/out.txt 2>&1",
                 TRAIN, CFG_DIR "hybrid-", f64 ? "f64" : "f32", tmpdir, f64, path, tmpdir);
        int st = system(cmd);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed", cmd);
        ls_batch *b = NULL;
        ls_model_config c;
        ls_objective o;
        cr_assert_eq(ls_batch_read_dump(&b, &c, &o, path, err, sizeof err), LS_OK, "%s", err);
        expect_same_config(&want, &c);
        cr_expect_eq(o.train_mode, LS_TRAIN_FULL);
        cr_expect_eq(o.grad_mode, LS_GRAD_FULL);
        cr_expect_eq(o.beta, 0.5);
        cr_expect_eq(o.epsilon, 0.3);
        cr_expect_eq(b->P, 64u);
        cr_expect_eq(b->G, 3u);
        double asum = 0;
        for (size_t i = 0; i < b->G; i++) asum += b->adv[i];
        cr_expect_lt(fabs(asum), 1e-9, "advantages not centred: sum %g", asum);
        ls_batch_free(b);
    }
}

Test(batch, rollouts_line_limit_and_strict_keys) {
    char path[512], err[512];
    ls_batch *b = NULL, *b2 = NULL;
    const char *good = "{\"prompt\":[10,20,30],\"responses\":[[1,2],[3]],\"rewards\":[1,0],"
                       "\"old_logprobs\":[[-1,-2],[-0.5]]}";
    size_t glen = strlen(good);
    snprintf(path, sizeof path, "%s/r.jsonl", tmpdir);
    char *text = malloc(glen + 64);
    snprintf(text, glen + 64, "%s\nnot json at all", good);
    write_file(path, text);
    /* the limit is the first line's length: at the limit accepted, below refused */
    cr_assert_eq(ls_batch_read_rollouts_max(&b, path, 256, glen, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(b->G, 2u);
    cr_expect_eq(b->old_lp[1][0], -0.5);
    cr_expect(b->old_supplied);
    cr_assert_eq(ls_batch_parse_rollouts(&b2, text, strlen(text), path, 256, 0, err, sizeof err), LS_OK, "%s",
                 err);
    expect_same_batch(b, b2);
    ls_batch_free(b);
    ls_batch_free(b2);
    cr_expect_eq(ls_batch_read_rollouts_max(&b, path, 256, glen - 1, err, sizeof err), LS_ERR_FORMAT);
    cr_expect_null(b);
    cr_expect(strstr(err, path) && strstr(err, "line 1") && strstr(err, "longer than"), "%s", err);
    /* a file without newlines is read only up to the limit */
    cr_expect_eq(ls_batch_read_rollouts_max(&b, "/dev/zero", 256, (size_t)1 << 20, err, sizeof err),
                 LS_ERR_FORMAT);
    cr_expect(strstr(err, "/dev/zero: line 1: longer than 1048576 bytes") != NULL, "%s", err);
    /* a misspelt key is refused by name; ids are checked against vocab */
    char *typo = replaced(good, "old_logprobs", "old_logprob");
    cr_expect_eq(ls_batch_parse_rollouts(&b, typo, strlen(typo), "t.jsonl", 256, 0, err, sizeof err),
                 LS_ERR_FORMAT);
    cr_expect(strstr(err, "t.jsonl: line 1: field 'old_logprob'") != NULL, "%s", err);
    free(typo);
    cr_expect_eq(ls_batch_parse_rollouts(&b, good, glen, "v.jsonl", 20, 0, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "field 'prompt[1]'") != NULL, "%s", err);
    /* ref_logprobs: supplied like old_logprobs, rows of the response lengths */
    char *with_ref = replaced(good, "}", ",\"ref_logprobs\":[[-0.25,0],[-3]]}");
    cr_assert_eq(ls_batch_parse_rollouts(&b, with_ref, strlen(with_ref), "w.jsonl", 256, 0, err, sizeof err), LS_OK,
                 "%s", err);
    cr_expect(b->ref_supplied && b->old_supplied);
    cr_expect(b->ref_lp[0][0] == -0.25 && b->ref_lp[0][1] == 0 && b->ref_lp[1][0] == -3);
    ls_batch_free(b);
    free(with_ref);
    cr_assert_eq(ls_batch_parse_rollouts(&b, good, glen, "w.jsonl", 256, 0, err, sizeof err), LS_OK, "%s", err);
    cr_expect(!b->ref_supplied && b->ref_lp[1][0] == 0);
    ls_batch_free(b);
    cr_expect_eq(ls_batch_parse_rollouts(&b, "\n{}", 3, "e.jsonl", 256, 0, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "e.jsonl: line 1: empty") != NULL, "%s", err);
    free(text);
}

/* ---- the streaming rollouts reader ------------------------------------- */

#define FIXTURES LS_SOURCE_DIR "/tests/fixtures/schema/rollouts-line/"

/* One expected group, written by hand from the fixture's text. */
typedef struct {
    size_t line, P, G, R[3];
    int32_t prompt0, last_resp_tok;
    double reward0;
    int old, ref;
    double old_last, ref_first; /* old_lp[G-1][R-1], ref_lp[0][0] */
} want_group;

static void expect_group(const ls_batch *b, const want_group *w, const ls_rollouts_reader *r) {
    cr_assert_not_null(b, "line %zu: no group", w->line);
    if (r) cr_expect_eq(ls_rollouts_line(r), w->line);
    cr_assert_eq(b->P, w->P, "line %zu: P %zu", w->line, b->P);
    cr_assert_eq(b->G, w->G, "line %zu: G %zu", w->line, b->G);
    for (size_t i = 0; i < w->G; i++) cr_assert_eq(b->R[i], w->R[i], "line %zu: R[%zu] %zu", w->line, i, b->R[i]);
    cr_expect_eq(b->prompt[0], w->prompt0, "line %zu: prompt[0] %d", w->line, b->prompt[0]);
    cr_expect_eq(b->resp[w->G - 1][w->R[w->G - 1] - 1], w->last_resp_tok, "line %zu", w->line);
    cr_expect_eq(b->rewards[0], w->reward0, "line %zu: rewards[0] %g", w->line, b->rewards[0]);
    cr_expect_eq(b->old_supplied, w->old, "line %zu: old_supplied", w->line);
    cr_expect_eq(b->ref_supplied, w->ref, "line %zu: ref_supplied", w->line);
    cr_expect_eq(b->old_lp[w->G - 1][w->R[w->G - 1] - 1], w->old_last, "line %zu: last old log-prob", w->line);
    cr_expect_eq(b->ref_lp[0][0], w->ref_first, "line %zu: first ref log-prob", w->line);
}

/* Reads n groups from r, each against want[k]; with ack >= 0, in lockstep
 * with a writer (one byte written to ack after each). */
static void read_groups(ls_rollouts_reader *r, int ack, const want_group *want, size_t n) {
    char err[512];
    for (size_t k = 0; k < n; k++) {
        ls_batch *b = NULL;
        cr_assert_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_OK, "group %zu: %s", k, err);
        expect_group(b, &want[k], r);
        ls_batch_free(b);
        if (ack >= 0) cr_assert_eq(write(ack, "k", 1), 1);
    }
}

/* Every group of the reader against want[0..n), then the end (twice). */
static void expect_groups(ls_rollouts_reader *r, const want_group *want, size_t n) {
    char err[512];
    read_groups(r, -1, want, n);
    for (int again = 0; again < 2; again++) {
        ls_batch *b = (ls_batch *)1;
        cr_assert_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_OK, "%s", err);
        cr_assert_null(b, "a group after the last line");
    }
}

static const want_group THREE[] = {
    {1, 4, 2, {3, 2}, 10, 5, 1.0, 0, 0, 0.0, 0.0},
    {2, 2, 3, {1, 2, 3}, 7, 14, 0.5, 1, 0, 0.0, 0.0},
    {3, 6, 1, {4}, 200, 2, -1.0, 1, 1, -4.0, -0.5},
};

Test(batch, rollouts_lines_are_their_own_groups) {
    char err[512];
    static const size_t sizes[] = {0, 1, 5, 64};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        ls_rollouts_reader *r = NULL;
        cr_assert_eq(ls_rollouts_open(&r, FIXTURES "valid/three-groups.jsonl", 256, 0, err, sizeof err), LS_OK,
                     "%s", err);
        if (sizes[k]) ls_rollouts_set_read_size(r, sizes[k]);
        expect_groups(r, THREE, 3);
        ls_rollouts_close(r);
    }
    /* CRLF, a blank and a whitespace line skipped (still counted), no final newline */
    static const want_group CRLF[] = {
        {1, 2, 1, {1}, 1, 3, 0.0, 0, 1, 0.0, -0.75},
        {4, 3, 1, {2}, 3, 7, 2.0, 0, 0, 0.0, 0.0},
    };
    ls_rollouts_reader *r = NULL;
    cr_assert_eq(ls_rollouts_open(&r, FIXTURES "valid/crlf-blank-no-final-newline.jsonl", 256, 0, err,
                                  sizeof err), LS_OK, "%s", err);
    expect_groups(r, CRLF, 2);
    ls_rollouts_close(r);
    size_t n = 99;
    int known = 0;
    cr_assert_eq(ls_rollouts_count_lines(FIXTURES "valid/three-groups.jsonl", &n, &known, err, sizeof err), LS_OK);
    cr_expect(known && n == 3, "known %d, %zu lines", known, n);
    cr_assert_eq(ls_rollouts_count_lines(FIXTURES "valid/crlf-blank-no-final-newline.jsonl", &n, &known, err,
                                         sizeof err), LS_OK);
    cr_expect(known && n == 2, "known %d, %zu lines", known, n);
    /* the first-group reader is the stream's first group */
    ls_batch *b = NULL;
    cr_assert_eq(ls_batch_read_rollouts(&b, FIXTURES "valid/three-groups.jsonl", 256, err, sizeof err), LS_OK);
    expect_group(b, &THREE[0], NULL);
    ls_batch_free(b);
}

static const char LINE1[] = "{\"prompt\":[10,20,30,40],\"responses\":[[1,2,3],[4,5]],\"rewards\":[1,0]}";

/* Line 1 comes back intact, line 2 is refused naming `what`, and the
 * reader stays stopped (line 3, valid, never comes back). */
static void expect_line2_refused(ls_rollouts_reader *r, const char *what, ls_status want) {
    char err[512] = "";
    ls_batch *b = NULL;
    cr_assert_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_OK, "line 1: %s", err);
    expect_group(b, &THREE[0], r);
    ls_batch_free(b);
    b = (ls_batch *)1;
    ls_status st = ls_rollouts_next(r, &b, err, sizeof err);
    cr_expect_eq(st, want, "line 2 (%s): %s, %s", what, ls_status_str(st), err);
    cr_expect_null(b);
    cr_expect(strstr(err, what) != NULL, "error '%s' does not say '%s'", err, what);
    cr_expect_eq(ls_rollouts_line(r), 2u);
    b = (ls_batch *)1;
    cr_expect_eq(ls_rollouts_next(r, &b, err, sizeof err), want, "the reader went on after a bad line");
    cr_expect_null(b);
    cr_expect(strstr(err, "line 2") != NULL, "%s", err);
}

Test(batch, rollouts_bad_second_line_is_named_after_the_first) {
    static const struct { const char *line2, *what; ls_status st; } cases[] = {
        {"{\"prompt\":[1,2],\"responses\":[[3]],", "r.jsonl: line 2: invalid JSON", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3],[4,999]],\"rewards\":[0,1]}",
         "r.jsonl: line 2: field 'responses[1][1]': not a token id in [0, 256)", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3]]}", "r.jsonl: line 2: field 'rewards'", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3],[4]],\"rewards\":[0]}", "r.jsonl: line 2: field 'rewards'",
         LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3],[4,5]],\"rewards\":[0,1],\"ref_logprobs\":[[-1],[-1]]}",
         "r.jsonl: line 2: field 'ref_logprobs[1]': must be an array of 2 numbers", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0],\"ref_logprobs\":[[-1],[-1]]}",
         "r.jsonl: line 2: field 'ref_logprobs': must be an array of 1 arrays", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3,4]],\"rewards\":[0],\"old_logprobs\":[[-1,0.25]]}",
         "r.jsonl: line 2: field 'old_logprobs[0][1]': not a finite log-prob <= 0", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0],\"ref_logprob\":[[-1]]}",
         "r.jsonl: line 2: field 'ref_logprob': unknown", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[1e999]}", "r.jsonl: line 2: number out of range",
         LS_ERR_NONFINITE},
        {"{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0]} x", "r.jsonl: line 2: trailing data",
         LS_ERR_FORMAT},
        {"[1,2]", "r.jsonl: line 2: not a JSON object", LS_ERR_FORMAT},
        {"{\"prompt\":[1,2],\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0]}",
         "r.jsonl: line 2: duplicate object key \"prompt\"", LS_ERR_FORMAT},
    };
    const char *line3 = "{\"prompt\":[5,6],\"responses\":[[7]],\"rewards\":[1]}";
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/r.jsonl", tmpdir);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char text[1024];
        snprintf(text, sizeof text, "%s\n%s\n%s\n", LINE1, cases[c].line2, line3);
        write_file(path, text);
        static const size_t sizes[] = {0, 1, 3, 100};
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            ls_rollouts_reader *r = NULL;
            cr_assert_eq(ls_rollouts_open(&r, path, 256, 0, err, sizeof err), LS_OK, "%s", err);
            if (sizes[k]) ls_rollouts_set_read_size(r, sizes[k]);
            expect_line2_refused(r, cases[c].what, cases[c].st);
            ls_rollouts_close(r);
        }
    }
}

/* A child that writes `head` to fd, then `fill` bytes forever (or until
 * the reader closes the pipe: SIGPIPE ends it); it closes `other`, the
 * read end. */
static pid_t endless_writer(int fd, int other, const char *head, char fill) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(other);
        signal(SIGPIPE, SIG_DFL);
        char chunk[4096];
        memset(chunk, fill, sizeof chunk);
        if (write(fd, head, strlen(head)) < 0) _exit(1);
        for (;;)
            if (write(fd, chunk, sizeof chunk) < 0) _exit(0);
    }
    return pid;
}

Test(batch, rollouts_long_line_refused_after_a_bounded_read, .timeout = 60) {
    char err[512], path[512];
    /* from a pipe whose second line never ends */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    char head[256];
    snprintf(head, sizeof head, "%s\n", LINE1);
    pid_t pid = endless_writer(fds[1], fds[0], head, 'x');
    close(fds[1]);
    const size_t cap = 1000;
    ls_rollouts_reader *r = NULL;
    cr_assert_eq(ls_rollouts_open_fd(&r, fds[0], "pipe", 256, cap, err, sizeof err), LS_OK, "%s", err);
    expect_line2_refused(r, "pipe: line 2: longer than 1000 bytes", LS_ERR_FORMAT);
    uint64_t of_line2 = ls_rollouts_bytes_read(r) - strlen(head);
    cr_log_info("line 2: %llu bytes read (limit %zu)", (unsigned long long)of_line2, cap);
    cr_expect_leq(of_line2, cap + 1, "%llu bytes of the long line read", (unsigned long long)of_line2);
    cr_expect_geq(of_line2, cap + 1);
    ls_rollouts_close(r);
    close(fds[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    /* /dev/zero has no newline at all */
    cr_assert_eq(ls_rollouts_open(&r, "/dev/zero", 256, (size_t)1 << 20, err, sizeof err), LS_OK, "%s", err);
    ls_batch *b = (ls_batch *)1;
    cr_expect_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/dev/zero: line 1: longer than 1048576 bytes") != NULL, "%s", err);
    cr_expect_eq(ls_rollouts_bytes_read(r), ((uint64_t)1 << 20) + 1);
    ls_rollouts_close(r);
    /* at the limit accepted, one byte more refused: with a newline and without (the last line) */
    size_t n1 = strlen(LINE1);
    snprintf(path, sizeof path, "%s/long.jsonl", tmpdir);
    want_group twice[2] = {THREE[0], THREE[0]};
    twice[1].line = 2;
    for (int final_nl = 0; final_nl <= 1; final_nl++) {
        char text[512];
        snprintf(text, sizeof text, "%s\n%s  %s", LINE1, LINE1, final_nl ? "\n" : "");
        write_file(path, text);
        cr_assert_eq(ls_rollouts_open(&r, path, 256, n1 + 2, err, sizeof err), LS_OK);
        expect_groups(r, twice, 2);
        ls_rollouts_close(r);
        cr_assert_eq(ls_rollouts_open(&r, path, 256, n1 + 1, err, sizeof err), LS_OK);
        ls_rollouts_set_read_size(r, 7);
        expect_line2_refused(r, "long.jsonl: line 2: longer than", LS_ERR_FORMAT);
        cr_expect_leq(ls_rollouts_bytes_read(r), (n1 + 1) + (n1 + 2));
        ls_rollouts_close(r);
    }
}

/* A child that writes the lines of `lines` to out, each in two pieces 20 ms
 * apart, and before each next line waits for one byte on ack: the parent's
 * sign that it has the group (and one more after the last line).  A reader that waited for more than the line
 * would never send it, and the test would time out.  The child closes the
 * ends it does not use (in, ack_out). */
static pid_t lockstep_writer(int out, int ack, int in, int ack_out, const char *const *lines, size_t n) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(in);
        close(ack_out);
        for (size_t k = 0; k < n; k++) {
            size_t len = strlen(lines[k]), half = len / 2;
            if (k > 0) {
                char c;
                if (read(ack, &c, 1) != 1) _exit(1);
            }
            if (write(out, lines[k], half) != (ssize_t)half) _exit(1);
            nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 20000000}, NULL);
            if (write(out, lines[k] + half, len - half) != (ssize_t)(len - half)) _exit(1);
        }
        char c;
        if (read(ack, &c, 1) < 0) _exit(1); /* the last ack, or the parent's close */
        _exit(0);
    }
    return pid;
}

static const char *const SLOW_LINES[] = {
    "{\"prompt\":[10,20,30,40],\"responses\":[[1,2,3],[4,5]],\"rewards\":[1,0]}\n",
    "\r\n",
    "{\"prompt\":[7,8],\"responses\":[[9],[10,11],[12,13,14]],\"rewards\":[0.5,-0.25,1e-3],"
    "\"old_logprobs\":[[-1.5],[-0.5,-2],[-3,-0.125,0]]}\r\n",
    "{\"prompt\":[200,201,202,203,204,205],\"responses\":[[255,0,1,2]],\"rewards\":[-1],"
    "\"old_logprobs\":[[-1,-2,-3,-4]],\"ref_logprobs\":[[-0.5,-1.5,-2.5,-3.5]]}\n",
}; /* the last line ends with a newline too: without one it ends only at the writer's exit */

Test(batch, rollouts_stream_line_by_line_from_a_slow_pipe, .timeout = 30) {
    int data[2], ack[2];
    char err[512];
    cr_assert_eq(pipe(data), 0);
    cr_assert_eq(pipe(ack), 0);
    want_group want[3] = {THREE[0], THREE[1], THREE[2]};
    want[1].line = 3; /* the blank CRLF line 2 is skipped */
    want[2].line = 4;
    /* the blank line is written with line 3: acks are per group */
    const char *lines[3] = {SLOW_LINES[0], NULL, SLOW_LINES[3]};
    char joined[512];
    snprintf(joined, sizeof joined, "%s%s", SLOW_LINES[1], SLOW_LINES[2]);
    lines[1] = joined;
    pid_t pid = lockstep_writer(data[1], ack[0], data[0], ack[1], lines, 3);
    close(data[1]);
    close(ack[0]);
    ls_rollouts_reader *r = NULL;
    cr_assert_eq(ls_rollouts_open_fd(&r, data[0], "engine", 256, 0, err, sizeof err), LS_OK, "%s", err);
    read_groups(r, ack[1], want, 3);
    ls_batch *b = (ls_batch *)1;
    cr_assert_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_OK, "%s", err);
    cr_expect_null(b);
    ls_rollouts_close(r);
    close(data[0]);
    close(ack[1]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the writer failed");
}

Test(batch, rollouts_from_standard_input, .timeout = 30) {
    int data[2], ack[2];
    char err[512];
    cr_assert_eq(pipe(data), 0);
    cr_assert_eq(pipe(ack), 0);
    const char *lines[2] = {SLOW_LINES[0], "{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0],"
                                           "\"ref_logprobs\":[[-1,-2]]}\n"};
    pid_t pid = lockstep_writer(data[1], ack[0], data[0], ack[1], lines, 2);
    close(data[1]);
    close(ack[0]);
    cr_assert_eq(dup2(data[0], STDIN_FILENO), STDIN_FILENO); /* this test's own process */
    close(data[0]);
    size_t n = 7;
    int known = 1;
    cr_assert_eq(ls_rollouts_count_lines("-", &n, &known, err, sizeof err), LS_OK);
    cr_expect(!known && n == 0, "a count for standard input");
    ls_rollouts_reader *r = NULL;
    cr_assert_eq(ls_rollouts_open(&r, "-", 256, 0, err, sizeof err), LS_OK, "%s", err);
    read_groups(r, ack[1], THREE, 1);
    ls_batch *b = (ls_batch *)1;
    cr_expect_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_ERR_FORMAT);
    cr_expect_null(b);
    cr_expect(strstr(err, "<stdin>: line 2: field 'ref_logprobs[0]'") != NULL, "%s", err);
    ls_rollouts_close(r);
    cr_expect_neq(fcntl(STDIN_FILENO, F_GETFD), -1, "standard input was closed");
    close(ack[1]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
}

Test(batch, rollouts_empty_blank_and_line_counts, .timeout = 30) {
    char path[512], err[512];
    static const struct { const char *text; size_t groups; } files[] = {
        {"", 0},
        {"\n\n \t\r\n\r\n", 0},
        {"   ", 0},
        {"{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0]}", 1},
        {"\n{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0]}\r\n\n", 1},
        {"{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0]}\n{\"prompt\":[1,2],\"responses\":[[3]],"
         "\"rewards\":[0]}\n \n{\"prompt\":[1,2],\"responses\":[[3]],\"rewards\":[0]}",
         3},
    };
    snprintf(path, sizeof path, "%s/c.jsonl", tmpdir);
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        write_file(path, files[f].text);
        size_t n = 99, got = 0;
        int known = 0;
        cr_assert_eq(ls_rollouts_count_lines(path, &n, &known, err, sizeof err), LS_OK, "%s", err);
        cr_expect(known && n == files[f].groups, "file %zu: known %d, %zu groups counted", f, known, n);
        ls_rollouts_reader *r = NULL;
        cr_assert_eq(ls_rollouts_open(&r, path, 256, 0, err, sizeof err), LS_OK, "%s", err);
        ls_batch *b = NULL;
        while (ls_rollouts_next(r, &b, err, sizeof err) == LS_OK && b) {
            got++;
            ls_batch_free(b);
        }
        cr_expect_eq(got, files[f].groups, "file %zu: %zu groups read (%s)", f, got, err);
        ls_rollouts_close(r);
        ls_batch *first = NULL;
        ls_status st = ls_batch_read_rollouts(&first, path, 256, err, sizeof err);
        cr_expect_eq(st, files[f].groups ? LS_OK : LS_ERR_FORMAT, "file %zu", f);
        if (!files[f].groups) cr_expect(strstr(err, "c.jsonl: no group") != NULL, "%s", err);
        ls_batch_free(first);
    }
    /* not a regular file: no count, and nothing waits on a FIFO without a writer */
    size_t n = 9;
    int known = 1;
    snprintf(path, sizeof path, "%s/fifo", tmpdir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    cr_assert_eq(ls_rollouts_count_lines(path, &n, &known, err, sizeof err), LS_OK, "%s", err);
    cr_expect(!known && n == 0);
    known = 1;
    cr_assert_eq(ls_rollouts_count_lines("/dev/zero", &n, &known, err, sizeof err), LS_OK, "%s", err);
    cr_expect(!known);
    snprintf(path, sizeof path, "%s/absent.jsonl", tmpdir);
    cr_expect_eq(ls_rollouts_count_lines(path, &n, &known, err, sizeof err), LS_ERR_IO);
    cr_expect(strstr(err, "absent.jsonl: cannot open") != NULL, "%s", err);
    ls_rollouts_reader *r = NULL;
    cr_expect_eq(ls_rollouts_open(&r, path, 256, 0, err, sizeof err), LS_ERR_IO);
    cr_expect_null(r);
    cr_expect(strstr(err, "absent.jsonl: cannot open") != NULL, "%s", err);
    /* a directory opens but cannot be read: an I/O error naming it */
    cr_assert_eq(ls_rollouts_open(&r, tmpdir, 256, 0, err, sizeof err), LS_OK, "%s", err);
    ls_batch *b = (ls_batch *)1;
    cr_expect_eq(ls_rollouts_next(r, &b, err, sizeof err), LS_ERR_IO);
    cr_expect(strstr(err, tmpdir) && strstr(err, "line 1: read error"), "%s", err);
    cr_expect_null(b);
    ls_rollouts_close(r);
    cr_expect_eq(ls_rollouts_open(&r, FIXTURES "valid/three-groups.jsonl", 0, 0, err, sizeof err), LS_ERR_ARG);
    cr_expect(strstr(err, "vocab 0") != NULL, "%s", err);
    cr_expect_eq(ls_rollouts_open_fd(&r, -1, "x", 256, 0, err, sizeof err), LS_ERR_ARG);
    cr_expect_null(r);
}

/* What the schema accepts the reader reads, what it refuses the reader
 * refuses (the reader is stricter: vocab and lengths). */
Test(batch, rollouts_schema_fixtures_agree_with_the_reader) {
    for (int valid = 1; valid >= 0; valid--) {
        char dir[512];
        snprintf(dir, sizeof dir, FIXTURES "%s", valid ? "valid" : "invalid");
        DIR *d = opendir(dir);
        cr_assert_not_null(d, "%s", dir);
        struct dirent *de;
        size_t files = 0;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.') continue;
            char path[1024], err[512] = "";
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            ls_rollouts_reader *r = NULL;
            cr_assert_eq(ls_rollouts_open(&r, path, 256, 0, err, sizeof err), LS_OK, "%s", err);
            ls_batch *b = NULL;
            ls_status st;
            size_t groups = 0;
            while ((st = ls_rollouts_next(r, &b, err, sizeof err)) == LS_OK && b) {
                groups++;
                ls_batch_free(b);
            }
            size_t lines = 0;
            int known = 0;
            char cerr[512];
            cr_assert_eq(ls_rollouts_count_lines(path, &lines, &known, cerr, sizeof cerr), LS_OK);
            if (valid) {
                cr_expect_eq(st, LS_OK, "%s: %s", path, err);
                cr_expect(groups > 0 && groups == lines, "%s: %zu groups, %zu lines", path, groups, lines);
            } else {
                cr_expect_neq(st, LS_OK, "%s was accepted", path);
                cr_expect(strstr(err, "line 1") != NULL, "%s: %s", path, err);
            }
            ls_rollouts_close(r);
            files++;
        }
        closedir(d);
        cr_expect_geq(files, valid ? 2u : 8u);
    }
}
