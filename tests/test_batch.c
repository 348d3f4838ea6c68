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
 * Rollouts: the line limit refuses a long first line (and /dev/zero) after
 * reading at most limit + 1 bytes, naming the file and line; a misspelt key
 * is refused; the path reader equals the bytes parser. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainer/batch.h"
#include "trainer/config.h"
#include "test_util.h"
#include "test_tmpdir.h"

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
    cr_expect_eq(a->routed_scale, b->routed_scale);
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
    cr_expect_eq(ls_batch_parse_rollouts(&b, "\n{}", 3, "e.jsonl", 256, 0, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "e.jsonl: line 1: empty") != NULL, "%s", err);
    free(text);
}
