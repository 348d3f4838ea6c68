/* test_config.c - hostile model configs, files and arguments are refused
 * naming the key, file or argument (issue 7), and the memory plan of the
 * parameters equals what ls_params_init allocates, byte for byte.
 *
 * Independent references: the per-key limits and the hybrid-tiny parameter
 * counts below are written out by hand (not taken from config.c); the
 * allocated bytes are read from the memory tracker, not from the plan. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "receipts/format/json_util.h"
#include "trainer/families/mla/mla_config.h"
#include "trainer/families/hybrid/hybrid_config.h"
#include "trainer/model/config.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/model/params.h"
#include "trainer/run/train_args.h"
#include "trainer/families/families.h"

#define K(f) LS_K(f)
#define TINY LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#define SMALL LS_SOURCE_DIR "/configs/hybrid-small.json"
#define MLA LS_SOURCE_DIR "/configs/mla-tiny.json"

static cJSON *load_json(const char *path) {
    cJSON *j = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(path, &j, err, sizeof err), LS_OK, "%s", err);
    return j;
}

static void set_num(cJSON *j, const char *key, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    cJSON_AddNumberToObject(j, key, v);
}

/* Parse j; expect refusal whose message contains every string of `names`
 * (NULL-terminated). */
static void expect_refused(const cJSON *j, const char *what, const char *const *names) {
    ls_model_config c;
    char err[1024] = "";
    ls_status st = ls_config_from_json(&c, j, "cfg.json", err, sizeof err);
    cr_expect_neq(st, LS_OK, "%s: accepted", what);
    cr_expect(strncmp(err, "cfg.json: ", 10) == 0, "%s: message does not name the file: %s", what, err);
    for (int i = 0; names[i]; i++)
        cr_expect(strstr(err, names[i]) != NULL, "%s: message lacks '%s': %s", what, names[i], err);
}

TestSuite(config, .timeout = 120);

Test(config, unknown_misspelt_and_other_family_keys_are_refused_by_name) {
    cJSON *j = load_json(TINY);
    ls_model_config c;
    char err[1024];
    cr_assert_eq(ls_config_from_json(&c, j, "cfg.json", err, sizeof err), LS_OK, "%s", err);
    struct {
        const char *key, *want;
    } cases[] = {
        {"extra_key", "unknown"},          /* the row */
        {"d_modle", "did you mean 'd_model'"}, /* a typo of a model key */
        {"heads", "mla family"},           /* an mla key in a hybrid config */
        {"routed_scale", "mla family"},
        {"lora_r", "objective"},           /* objective keys are not model keys */
        {"", "unknown"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *k = cJSON_Duplicate(j, 1);
        cJSON_AddNumberToObject(k, cases[i].key, 1);
        char q[80];
        snprintf(q, sizeof q, "key '%s'", cases[i].key);
        const char *names[] = {q, cases[i].want, NULL};
        expect_refused(k, cases[i].key, names);
        cJSON_Delete(k);
    }
    cJSON_Delete(j);
    /* and a hybrid key in an mla config */
    j = load_json(MLA);
    cr_assert_eq(ls_config_from_json(&c, j, "cfg.json", err, sizeof err), LS_OK, "%s", err);
    cJSON_AddNumberToObject(j, "gdn_hk", 2);
    const char *names[] = {"key 'gdn_hk'", "hybrid family", NULL};
    expect_refused(j, "gdn_hk in mla", names);
    cJSON_Delete(j);
}

Test(config, embedded_config_reads_the_objective_and_refuses_strangers) {
    ls_model_config c;
    ls_objective o, want;
    ls_objective_defaults(&want);
    want.train_mode = LS_TRAIN_FULL;
    want.grad_mode = LS_GRAD_FULL;
    want.lora_r = 7;
    want.lora_alpha = 3.5;
    want.epsilon = 0.3;
    want.beta = 0.01;
    want.temperature = 0.7;
    char err[1024];
    cr_assert_eq(ls_config_load(&c, TINY, err, sizeof err), LS_OK, "%s", err);
    cJSON *j = ls_config_to_json(&c, &want); /* what a batch dump embeds */
    ls_model_config c2;
    cr_assert_eq(ls_config_from_json_with_objective(&c2, &o, j, "dump.json", err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(memcmp(&c, &c2, sizeof c), 0);
    cr_expect(o.train_mode == want.train_mode && o.grad_mode == want.grad_mode && o.lora_r == 7 &&
              o.lora_alpha == 3.5 && o.epsilon == 0.3 && o.beta == 0.01 && o.temperature == 0.7 && !o.lora_experts);
    /* the plain reader refuses the objective keys */
    cr_expect_neq(ls_config_from_json(&c2, j, "dump.json", err, sizeof err), LS_OK);
    cr_expect(strstr(err, "objective") != NULL, "%s", err);
    /* a stranger, an out-of-range and a missing objective key */
    cJSON *k = cJSON_Duplicate(j, 1);
    cJSON_AddNumberToObject(k, "lora_alfa", 4);
    cr_expect_neq(ls_config_from_json_with_objective(&c2, &o, k, "dump.json", err, sizeof err), LS_OK);
    cr_expect(strstr(err, "'lora_alfa'") && strstr(err, "did you mean 'lora_alpha'"), "%s", err);
    cJSON_Delete(k);
    k = cJSON_Duplicate(j, 1);
    set_num(k, "lora_r", 5000);
    cr_expect_neq(ls_config_from_json_with_objective(&c2, &o, k, "dump.json", err, sizeof err), LS_OK);
    cr_expect(strstr(err, "'lora_r'") != NULL, "%s", err);
    cJSON_DeleteItemFromObjectCaseSensitive(k, "lora_r");
    cr_expect_neq(ls_config_from_json_with_objective(&c2, &o, k, "dump.json", err, sizeof err), LS_OK);
    cr_expect(strstr(err, "'lora_r'") != NULL, "%s", err);
    cJSON_Delete(k);
    cJSON_Delete(j);
}

/* The documented limits, written out independently of config.c. */
static const struct {
    const char *key;
    double lo, hi;
} LIMITS[] = {
    {"vocab", 2, 1 << 24},     {"d_model", 1, 1 << 20},    {"n_layers", 1, 4096},   {"ffn_dim", 1, 1 << 20},
    {"gdn_hk", 1, 4096},       {"gdn_hv", 1, 4096},        {"gdn_dk", 1, 1 << 16},  {"gdn_dv", 1, 1 << 16},
    {"conv_kernel", 1, 256},   {"attn_heads", 1, 4096},    {"attn_kv_heads", 1, 4096},
    {"head_dim", 2, 1 << 16},  {"rope_dim", 0, 1 << 16},
};

Test(config, every_integer_key_is_bounded_and_named) {
    cJSON *j = load_json(TINY);
    for (size_t i = 0; i < sizeof LIMITS / sizeof *LIMITS; i++) {
        const char *key = LIMITS[i].key;
        char q[80];
        snprintf(q, sizeof q, "key '%s'", key);
        double bad[] = {LIMITS[i].hi + 1, LIMITS[i].lo - 1, 2147483648.0, 1e300, 1.5, -3};
        for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
            cJSON *k = cJSON_Duplicate(j, 1);
            set_num(k, key, bad[b]);
            char what[128];
            snprintf(what, sizeof what, "%s = %g", key, bad[b]);
            const char *names[] = {q, NULL};
            expect_refused(k, what, names);
            cJSON_Delete(k);
        }
        /* the bound itself passes the range check (it may fail a consistency rule) */
        cJSON *k = cJSON_Duplicate(j, 1);
        set_num(k, key, LIMITS[i].hi);
        ls_model_config c;
        char err[1024] = "";
        ls_status st = ls_config_from_json(&c, k, "cfg.json", err, sizeof err);
        cr_expect(st == LS_OK || strstr(err, "limit") == NULL, "%s = %g: refused by range: %s", key,
                  LIMITS[i].hi, err);
        cJSON_Delete(k);
        /* wrong types */
        k = cJSON_Duplicate(j, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(k, key);
        cJSON_AddStringToObject(k, key, "64");
        const char *names[] = {q, NULL};
        expect_refused(k, "string value", names);
        cJSON_Delete(k);
    }
    /* real keys */
    const char *reals[] = {"rms_eps", "rope_theta"};
    double rbad[] = {0, -1, 1e300};
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 3; b++) {
            cJSON *k = cJSON_Duplicate(j, 1);
            set_num(k, reals[r], rbad[b]);
            char q[80];
            snprintf(q, sizeof q, "key '%s'", reals[r]);
            const char *names[] = {q, NULL};
            expect_refused(k, reals[r], names);
            cJSON_Delete(k);
        }
    cJSON_Delete(j);
}

/* The mla keys: an indexer needs heads, dims and a top-k of at least one
 * (refused by name at load, not after training); d_nope and d_rope may be
 * 0 (the receipt and manifest schemas accept what the loader accepts). */
Test(config, mla_indexer_keys_are_at_least_one_and_rope_may_be_zero) {
    cJSON *j = load_json(LS_SOURCE_DIR "/configs/mla-tiny.json");
    static const char *const need_one[] = {"index_topk", "index_heads", "index_dim", "topk_group"};
    for (size_t i = 0; i < sizeof need_one / sizeof *need_one; i++) {
        cJSON *k = cJSON_Duplicate(j, 1);
        set_num(k, need_one[i], 0);
        char q[80];
        snprintf(q, sizeof q, "key '%s'", need_one[i]);
        const char *names[] = {q, NULL};
        expect_refused(k, need_one[i], names);
        cJSON_Delete(k);
    }
    static const char *const may_be_zero[] = {"d_nope", "d_rope"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *k = cJSON_Duplicate(j, 1);
        set_num(k, may_be_zero[i], 0);
        ls_model_config c;
        char err[512] = "";
        cr_expect_eq(ls_config_from_json(&c, k, "cfg.json", err, sizeof err), LS_OK, "%s = 0: %s", may_be_zero[i], err);
        cJSON_Delete(k);
    }
    cJSON_Delete(j);
}

Test(config, absurd_dims_name_the_key_and_the_size_they_imply) {
    /* the row: d_model = n_layers = 1e9 */
    cJSON *j = load_json(TINY);
    set_num(j, "d_model", 1e9);
    set_num(j, "n_layers", 1e9);
    ls_model_config c;
    char err[1024] = "";
    cr_assert_neq(ls_config_from_json(&c, j, "cfg.json", err, sizeof err), LS_OK);
    cr_expect(strstr(err, "key 'd_model'") && strstr(err, "bytes of weights"), "%s", err);
    /* the implied size: at least the MLP's 3 x ffn x d x L parameters, 4 bytes each */
    const char *p = strstr(err, "parameters, ");
    cr_assert_not_null(p, "%s", err);
    double bytes = strtod(p + strlen("parameters, "), NULL);
    cr_expect_geq(bytes, 4.0 * 3 * 128 * 1e9 * 1e9, "implied bytes %g too small: %s", bytes, err);
    cr_expect_lt(bytes, 4.0 * 1e21, "implied bytes %g too large: %s", bytes, err);
    cJSON_Delete(j);
}

/* The parameters an over-limit n_layers implies, read off its refusal. */
static double implied_params(const char *cfg_path, double n_layers) {
    cJSON *j = load_json(cfg_path);
    set_num(j, "n_layers", n_layers);
    ls_model_config c;
    char err[1024] = "";
    cr_assert_neq(ls_config_from_json(&c, j, "cfg.json", err, sizeof err), LS_OK);
    cJSON_Delete(j);
    cr_assert(strstr(err, "key 'n_layers'"), "%s", err);
    const char *p = strstr(err, "this config implies ");
    cr_assert_not_null(p, "%s", err);
    return strtod(p + strlen("this config implies "), NULL);
}

Test(config, an_over_limit_layer_count_is_described_without_walking_its_layers, .timeout = 30) {
    /* the hybrid's attention layers are counted from the first 4096 layers' kinds and extrapolated: n_layers
     * 2^31 - 1 is refused as fast as 4097 (it walked every layer, seconds per config: the fuzz corpus) and
     * implies the parameters in proportion (per-layer terms dominate the tiny config's) */
    double p8k = implied_params(TINY, 8192), big = implied_params(TINY, 2147483647.0);
    cr_assert_gt(p8k, 0);
    double want = p8k * (2147483647.0 / 8192.0);
    cr_expect(big > 0.9 * want && big < 1.1 * want, "n_layers 2^31-1 implies %g, 8192 implies %g", big, p8k);
}

Test(config, products_that_overflow_are_refused_naming_them) {
    /* every key within its bound, the product not: q = 2 H hd x d per
     * attention layer = 2^1+12+16+20 x 1024 layers = 2^59 parameters,
     * 2^62 bytes as float64: beyond size_t once the reference copy and the
     * moments are counted (the check wants 16 bytes per parameter) */
    cJSON *j = load_json(TINY);
    set_num(j, "attn_heads", 4096);
    set_num(j, "attn_kv_heads", 4096);
    set_num(j, "head_dim", 65536);
    set_num(j, "d_model", 1 << 20);
    set_num(j, "n_layers", 4096);
    const char *names[] = {"'attn_heads' x 'head_dim'", "size_t", NULL};
    expect_refused(j, "2^59 attention parameters", names);
    /* one step smaller in each of two dims fits the counters: accepted by the
     * config (the memory plan then refuses it against any budget) */
    set_num(j, "n_layers", 64);
    ls_model_config c;
    char err[1024] = "";
    cr_expect_eq(ls_config_from_json(&c, j, "cfg.json", err, sizeof err), LS_OK, "%s", err);
    size_t bytes[LS_MEM_COUNT];
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = LS_TRAIN_FULL;
    cr_expect_eq(K(ls_params_plan)(&c, &o, bytes, err, sizeof err), LS_OK, "%s", err);
    /* 16 attention layers x 2 x 4096 x 65536 x 2^20 q parameters alone, twice (reference copy) */
    double q = 16.0 * 2 * 4096 * 65536 * 1048576.0 * sizeof(ls_real) * 2;
    cr_expect_geq((double)bytes[LS_MEM_WEIGHTS], q, "planned weights %zu < the q projections' %g",
                  bytes[LS_MEM_WEIGHTS], q);
    cJSON_Delete(j);
}

/* Hand-computed parameter counts of hybrid-tiny (docs/model.md §1.4, §3, §5):
 * V 256, d 64, 8 layers (2 attention, 6 GDN), I 128, GDN 2,4,16,16 K 4,
 * attention 4,2,32.
 *  base: embed + lm_head 32768, final norm 64, norms 1024, MLP 196608,
 *        attention 2 x (16384 + 4096 + 4096 + 8192 + 64) = 65664,
 *        GDN 6 x (8192 + 4096 + 256 + 256 + 512 + 24 + 4096) = 104592
 *        -> 400720
 *  adapters (r = 4): MLP 8 x 3 x 768 = 18432, attention 2 x 3072 = 6144,
 *        GDN 6 x (768 + 512 + 512) = 10752 -> 35328 */
#define TINY_BASE 400720u
#define TINY_ADAPT_R4 35328u

static void plan_equals_allocation(const char *path, ls_train_mode mode, int lora_r, const size_t *want_scalars) {
    ls_model_config c;
    char err[1024] = "";
    cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_r = lora_r;
    size_t plan[LS_MEM_COUNT];
    cr_assert_eq(K(ls_params_plan)(&c, &o, plan, err, sizeof err), LS_OK, "%s", err);
    ls_mem_stats before, after;
    ls_mem_snapshot(&before);
    ls_params *p = NULL;
    cr_assert_eq(K(ls_params_init)(&p, &c, &o, 1, err, sizeof err), LS_OK, "%s", err);
    ls_mem_snapshot(&after);
    const char *m = mode == LS_TRAIN_FULL ? "full" : "lora";
    size_t worst = 0;
    for (int k = 0; k < LS_MEM_COUNT; k++) {
        size_t got = after.live_bytes[k] - before.live_bytes[k];
        size_t diff = got > plan[k] ? got - plan[k] : plan[k] - got;
        worst = diff > worst ? diff : worst;
        cr_expect_eq(got, plan[k], "%s %s: %s allocated %zu, planned %zu", path, m, ls_mem_cat_name((ls_mem_cat)k),
                     got, plan[k]);
    }
    cr_log_info("%s %s: largest |allocated - planned| = %zu bytes\n", path, m, worst);
    /* the table itself, summed here */
    size_t base = 0, adapt = 0;
    for (size_t i = 0; i < p->n; i++) *(p->t[i].is_adapter ? &adapt : &base) += p->t[i].numel;
    size_t sz = sizeof(ls_real), tr = mode == LS_TRAIN_FULL ? base : adapt;
    /* the tensor and layer tables live under fixed_weights too: their block sizes, read back */
    size_t tables = ls_mem_size(p) + ls_mem_size(p->layers) + ls_mem_size(p->t);
    cr_expect_eq(plan[LS_MEM_WEIGHTS], (base + (mode == LS_TRAIN_FULL ? base : 0)) * sz + tables);
    cr_expect_eq(plan[LS_MEM_ADAPTERS], adapt * sz);
    cr_expect_eq(plan[LS_MEM_GRADS], tr * sz);
    cr_expect_eq(plan[LS_MEM_OPTIMIZER], 2 * tr * sz);
    if (want_scalars) {
        cr_expect_eq(base, want_scalars[0], "%s: %zu base scalars, hand count %zu", path, base, want_scalars[0]);
        cr_expect_eq(adapt, mode == LS_TRAIN_LORA ? want_scalars[1] : 0, "%s: %zu adapter scalars", path, adapt);
    }
    K(ls_params_free)(p);
}

Test(config, planned_parameter_bytes_equal_what_params_init_allocates) {
    const size_t tiny[2] = {TINY_BASE, TINY_ADAPT_R4};
    plan_equals_allocation(TINY, LS_TRAIN_LORA, 4, tiny);
    plan_equals_allocation(TINY, LS_TRAIN_FULL, 4, tiny);
    plan_equals_allocation(SMALL, LS_TRAIN_LORA, 8, NULL);
    plan_equals_allocation(SMALL, LS_TRAIN_FULL, 8, NULL);
    /* layer counts that are not multiples of 4 (attention every fourth layer) */
    char path[512];
    snprintf(path, sizeof path, "/tmp/ls-config-%d.json", (int)getpid());
    for (int L = 1; L <= 7; L += 3) {
        cJSON *j = load_json(TINY);
        set_num(j, "n_layers", L);
        char err[512];
        cr_assert_eq(ls_json_write_file(path, j, err, sizeof err), LS_OK, "%s", err);
        cJSON_Delete(j);
        plan_equals_allocation(path, LS_TRAIN_LORA, 3, NULL);
        plan_equals_allocation(path, LS_TRAIN_FULL, 3, NULL);
    }
    unlink(path);
}

/* ---- files read whole ------------------------------------------------------ */

Test(config, whole_file_reads_are_capped_and_name_the_file) {
    char path[256], err[512];
    snprintf(path, sizeof path, "/tmp/ls-cap-%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs("[1", f);
    for (int i = 0; i < 97; i++) fputc(' ', f);
    fputs("]", f); /* exactly 100 bytes */
    fclose(f);
    char *buf = NULL;
    size_t n = 0;
    cr_expect_eq(ls_json_read_bytes_capped(path, 100, &buf, &n, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(n, 100);
    free(buf);
    cr_expect_eq(ls_json_read_bytes_capped(path, 99, &buf, &n, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, path) && strstr(err, "99-byte limit"), "%s", err);
    cr_expect_null(buf);
    cJSON *j = NULL;
    cr_expect_eq(ls_json_read_file_capped(path, 99, &j, err, sizeof err), LS_ERR_FORMAT);
    cr_expect_eq(ls_json_read_file_capped(path, 100, &j, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(j);
    unlink(path);
    /* an endless stream: refused after the cap, quickly */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_expect_eq(ls_json_read_bytes("/dev/zero", &buf, &n, err, sizeof err), LS_ERR_FORMAT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_expect(strstr(err, "/dev/zero") && strstr(err, "limit"), "%s", err);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect_lt(s, 10.0, "/dev/zero took %.1f s", s);
    /* a directory */
    cr_expect_eq(ls_json_read_bytes("/tmp", &buf, &n, err, sizeof err), LS_ERR_IO);
    cr_expect(strstr(err, "/tmp") && strstr(err, "directory"), "%s", err);
    /* the config loader's own cap: a 2 MiB file of valid JSON is refused unread */
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < (2 << 20); i++) fputc(' ', f);
    fputs("{}", f);
    fclose(f);
    ls_model_config c;
    cr_expect_eq(ls_config_load(&c, path, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, path) && strstr(err, "1048576-byte limit"), "%s", err);
    cr_expect_eq(ls_config_load(&c, "/dev/zero", err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/dev/zero") != NULL, "%s", err);
    unlink(path);
}

/* ---- numeric arguments -------------------------------------------------------- */

static int parse(const char *opt, const char *val, char *err, size_t err_len, ls_train_args *a) {
    char *argv[] = {"longstraw-train", "--config", TINY, "--out", "/tmp/ls-never-created", (char *)opt,
                    (char *)val, NULL};
    return ls_train_args_parse(a, 7, argv, err, err_len);
}

Test(config, numeric_arguments_are_plain_decimal) {
    const char *counts[] = {"--prompt-len", "--response-len", "--group", "--steps", "--seed", "--lora-r",
                            "--page-size", "--capture-chunk", "--memory-budget"};
    const char *bad_counts[] = {" -1", "-1", "+5", " 5", "5 ", "", "0x10", "1e3", "18446744073709551616",
                                "99999999999999999999999", "5x", "\t5", "٥"};
    const char *reals[] = {"--lora-alpha", "--lr", "--temperature", "--top-p", "--epsilon", "--beta"};
    const char *bad_reals[] = {" 0.5", "+0.5", "-0.5", "0x1p-3", "", "0.5 ", "inf", "nan", "1e999", ".", "0.5x",
                               "1,5"};
    ls_train_args a;
    char err[1024];
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        for (size_t b = 0; b < sizeof bad_counts / sizeof *bad_counts; b++) {
            err[0] = 0;
            int rc = parse(counts[i], bad_counts[b], err, sizeof err, &a);
            cr_expect_eq(rc, 2, "%s '%s' accepted", counts[i], bad_counts[b]);
            cr_expect(strstr(err, counts[i]) != NULL, "%s '%s': message does not name it: %s", counts[i],
                      bad_counts[b], err);
        }
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        for (size_t b = 0; b < sizeof bad_reals / sizeof *bad_reals; b++) {
            err[0] = 0;
            int rc = parse(reals[i], bad_reals[b], err, sizeof err, &a);
            cr_expect_eq(rc, 2, "%s '%s' accepted", reals[i], bad_reals[b]);
            cr_expect(strstr(err, reals[i]) != NULL, "%s: %s", reals[i], err);
        }
    /* good values still parse, to their decimal value */
    cr_expect_eq(parse("--seed", "18446744073709551615", err, sizeof err, &a), 0, "%s", err);
    cr_expect_eq(a.step.seed, UINT64_MAX);
    cr_expect_eq(parse("--seed", "007", err, sizeof err, &a), 0, "%s", err);
    cr_expect_eq(a.step.seed, 7);
    cr_expect_eq(parse("--memory-budget", "1048576", err, sizeof err, &a), 0, "%s", err);
    cr_expect_eq(a.memory_budget, 1048576);
    cr_expect_eq(parse("--lr", ".5", err, sizeof err, &a), 0, "%s", err);
    cr_expect_eq(a.step.lr, 0.5);
    cr_expect_eq(parse("--lr", "1e-3", err, sizeof err, &a), 0, "%s", err);
    cr_expect_eq(a.step.lr, 1e-3);
    struct stat sb;
    cr_expect_neq(stat("/tmp/ls-never-created", &sb), 0);
}

/* configs/hybrid-wide.json and mla-wide.json (issue 39's benchmark configs) carry the original work's
 * per-head shapes: checked against configs/original/, which the Hugging Face mapping made from the
 * published files (configs/original/README.md), so that a wide config cannot drift from the models it
 * stands for: the head dimensions equal, the head ratios equal, the layer pattern the family's. */
Test(config, the_wide_configs_have_the_original_models_head_shapes) {
    ls_model_config w, o;
    char err[1024] = "";
    cr_assert_eq(ls_config_load(&w, LS_SOURCE_DIR "/configs/hybrid-wide.json", err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_config_load(&o, LS_SOURCE_DIR "/configs/original/qwen3.6-27b.json", err, sizeof err), LS_OK, "%s",
                 err);
    const ls_hybrid_keys *hw = ls_hybrid_keys_of(&w), *ho = ls_hybrid_keys_of(&o);
    cr_expect_eq(hw->head_dim, ho->head_dim);
    cr_expect_eq(hw->rope_dim, ho->rope_dim);
    cr_expect_eq(hw->gdn_dk, ho->gdn_dk);
    cr_expect_eq(hw->gdn_dv, ho->gdn_dv);
    cr_expect_eq(hw->conv_kernel, ho->conv_kernel);
    cr_expect_eq(hw->attn_heads * ho->attn_kv_heads, ho->attn_heads * hw->attn_kv_heads, "query heads per KV head");
    cr_expect_eq(hw->gdn_hv * ho->gdn_hk, ho->gdn_hv * hw->gdn_hk, "GDN value heads per key head");
    cr_expect(w.n_layers >= 4 && ls_hybrid_layer_is_attn(3) && !ls_hybrid_layer_is_attn(0));
    cr_assert_eq(ls_config_load(&w, LS_SOURCE_DIR "/configs/mla-wide.json", err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_config_load(&o, LS_SOURCE_DIR "/configs/original/glm-5.2.json", err, sizeof err), LS_OK, "%s", err);
    const ls_mla_keys *mw = ls_mla_keys_of(&w), *mo = ls_mla_keys_of(&o);
    cr_expect_eq(mw->kv_rank, mo->kv_rank);
    cr_expect_eq(mw->d_nope, mo->d_nope);
    cr_expect_eq(mw->d_rope, mo->d_rope);
    cr_expect_eq(mw->d_v, mo->d_v);
    cr_expect_eq(mw->index_dim, mo->index_dim);
    cr_expect_eq(mw->index_topk, mo->index_topk);
}
