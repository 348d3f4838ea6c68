/* test_plan_cli.c - longstraw-plan end to end: the original work's figures
 * from the shipped configs and the Hugging Face ones through --json-out,
 * every document validated against schemas/plan.schema.json; a plan that does
 * not fit exits 1 with fits false; --max-prompt is the boundary (the answer
 * fits, one token more does not); bad arguments and inputs exit 2 naming them. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

#define SRC LS_SOURCE_DIR
#define OUT LS_BINARY_DIR "/plan_cli_out.json"
#define ERRF LS_BINARY_DIR "/plan_cli_err.txt"

static char last_err[4096];

/* Runs longstraw-plan ARGS (stdout discarded, stderr kept in last_err); its exit status. */
static int run(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", LS_PLAN_EXE, args, ERRF);
    int rc = system(cmd);
    last_err[0] = '\0';
    FILE *f = fopen(ERRF, "r");
    if (f) {
        size_t n = fread(last_err, 1, sizeof last_err - 1, f);
        last_err[n] = '\0';
        fclose(f);
    }
    cr_assert(WIFEXITED(rc), "%s did not exit", cmd);
    return WEXITSTATUS(rc);
}

/* Runs longstraw-plan ARGS with its stdout into out_text (4 KiB at most, NUL-terminated); its exit status. */
static int run_text(const char *args, char *out_text, size_t n) {
    char cmd[8192], path[512];
    snprintf(path, sizeof path, "%s/plan_cli_out.txt", LS_BINARY_DIR);
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", LS_PLAN_EXE, args, path, ERRF);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc), "%s did not exit", cmd);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    size_t got = fread(out_text, 1, n - 1, f);
    out_text[got] = '\0';
    fclose(f);
    remove(path);
    return WEXITSTATUS(rc);
}

/* The --json-out document of the last run, validated against the schema. */
static cJSON *plan_doc(void) {
    cJSON *d = NULL;
    char err[1024];
    cr_assert_eq(ls_json_read_file(OUT, &d, err, sizeof err), LS_OK, "%s", err);
    ls_schema *s = NULL;
    cr_assert_eq(ls_schema_load_file(SRC "/schemas/plan.schema.json", &s, err, sizeof err), LS_OK, "%s", err);
    ls_schema_errors errs = {0};
    ls_status st = ls_schema_validate(s, d, &errs);
    char first[1024];
    ls_schema_errors_first(&errs, first, sizeof first);
    cr_assert_eq(st, LS_OK, "the plan does not satisfy plan.schema.json: %s", first);
    ls_schema_errors_free(&errs);
    ls_schema_free(s);
    return d;
}

static uint64_t u64(const cJSON *o, const char *obj, const char *key) {
    const cJSON *x = obj ? cJSON_GetObjectItemCaseSensitive(o, obj) : o;
    uint64_t v = 0;
    cr_assert_eq(ls_json_get_u64(x, key, &v), 0, "no %s.%s", obj ? obj : "", key);
    return v;
}

static void qwen(const char *src) {
    char args[2048];
    snprintf(args, sizeof args, "%s --prompt-len 2088960 --cp 8 --page-size 64 --dtype bf16 --json-out '%s'", src, OUT);
    cr_assert_eq(run(args), 0, "%s", last_err);
    cJSON *d = plan_doc();
    cr_assert_eq(u64(d, "prompt_state", "pages_per_layer"), 4080);
    cr_assert_eq(u64(d, "prompt_state", "attn_layers"), 16);
    cr_assert_eq(u64(d, "prompt_state", "attn_kv"), 16ULL * 4080 * 2 * 64 * 4 * 256 * 2);
    cr_assert_eq(u64(d, "prompt_state", "attn_kv"), 17112760320ULL);
    cJSON_Delete(d);
}

static void glm(const char *src) {
    char args[2048];
    /* P - 1 = 65,536 x 32 prompt-state positions over CP-32 */
    snprintf(args, sizeof args, "%s --prompt-len 2097153 --cp 32 --dtype bf16 --json-out '%s'", src, OUT);
    cr_assert_eq(run(args), 0, "%s", last_err);
    cJSON *d = plan_doc();
    const uint64_t MiB = 1 << 20;
    cr_assert_eq(u64(d, "prompt_state", "shard_positions"), 65536);
    cr_assert_eq(u64(d, "prompt_state", "index_sets"), 21);
    cr_assert_eq(u64(d, "prompt_state", "latent"), 78 * 72 * MiB);
    cr_assert_eq(u64(d, "prompt_state", "index_keys"), 21 * 16 * MiB);
    cr_assert_eq(u64(d, "prompt_state", "total"), (uint64_t)(5.8125 * 1024) * MiB);
    cJSON_Delete(d);
}

Test(plan_cli, paper_figures, .timeout = 120) {
    qwen("--hf-config " SRC "/tests/data/hf/qwen3.5-27b.json");
    qwen("--config " SRC "/configs/original/qwen3.6-27b.json");
    glm("--hf-config " SRC "/tests/data/hf/glm-5.2.json");
    glm("--config " SRC "/configs/original/glm-5.2.json --index-sets 21");
}

Test(plan_cli, fits_and_max_prompt, .timeout = 120) {
    const char *q = "--config " SRC "/configs/original/qwen3.6-27b.json --cp 8 --dtype bf16";
    char args[2048];
    /* 1 GiB cannot hold 27B bf16 weights: exit 1, fits false, the plan still written */
    snprintf(args, sizeof args, "%s --prompt-len 4096 --device-memory 1GiB --json-out '%s'", q, OUT);
    cr_assert_eq(run(args), 1, "%s", last_err);
    cJSON *d = plan_doc();
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(d, "fits")));
    cJSON_Delete(d);
    /* --max-prompt under 96 GB: the answer fits, one more token does not */
    snprintf(args, sizeof args, "%s --prompt-len 4096 --device-memory 96GB --max-prompt --json-out '%s'", q, OUT);
    cr_assert_eq(run(args), 0, "%s", last_err);
    d = plan_doc();
    uint64_t mp = u64(d, NULL, "max_prompt");
    cJSON_Delete(d);
    cr_log_info("Qwen, CP-8, bf16, 96 GB per rank: longest prompt %" PRIu64, mp);
    cr_assert_gt(mp, 4096);
    snprintf(args, sizeof args, "%s --prompt-len %" PRIu64 " --device-memory 96GB", q, mp);
    cr_assert_eq(run(args), 0, "the longest prompt %" PRIu64 " does not fit: %s", mp, last_err);
    snprintf(args, sizeof args, "%s --prompt-len %" PRIu64 " --device-memory 96GB", q, mp + 1);
    cr_assert_eq(run(args), 1, "one token past the longest prompt fits");
}

/* --device-memory says its unit and both forms (96GB is decimal, 48GiB binary), and the peak is printed in
 * GiB and GB with its exact bytes, checked against the JSON of the same plan. */
Test(plan_cli, device_memory_units, .timeout = 120) {
    const char *q = "--config " SRC "/configs/original/qwen3.6-27b.json --cp 8 --dtype bf16 --prompt-len 4096";
    static const struct { const char *arg, *want; int rc; } M[] = {
        {"96GB", "device memory: 96 GB (decimal: 96,000,000,000 bytes = 89.41 GiB) per rank: fits\n", 0},
        {"48GiB", "device memory: 48 GiB (binary: 51,539,607,552 bytes = 51.54 GB) per rank: DOES NOT FIT\n", 1},
        {"1.5GiB", "device memory: 1.5 GiB (binary: 1,610,612,736 bytes = 1.61 GB) per rank: DOES NOT FIT\n", 1},
        {"512MB", "device memory: 512 MB (decimal: 512,000,000 bytes = 488.28 MiB) per rank: DOES NOT FIT\n", 1},
        {"1073741824", "device memory: 1,073,741,824 bytes (= 1.07 GB = 1.00 GiB) per rank: DOES NOT FIT\n", 1}};
    char args[2048], text[1 << 14];
    for (size_t i = 0; i < sizeof M / sizeof *M; ++i) {
        snprintf(args, sizeof args, "%s --device-memory %s --json-out '%s'", q, M[i].arg, OUT);
        cr_assert_eq(run_text(args, text, sizeof text), M[i].rc, "--device-memory %s: %s", M[i].arg, last_err);
        cr_assert(strstr(text, M[i].want) != NULL, "--device-memory %s: want '%s' in:\n%s", M[i].arg, M[i].want, text);
        /* the peak line: GiB, GB and the exact bytes of the JSON's peak.total, with thousands separators */
        cJSON *d = plan_doc();
        uint64_t peak = u64(d, "peak", "total"), dev = u64(d, NULL, "device_memory");
        cJSON_Delete(d);
        char digits[32], sep[48], want[160];
        int len = snprintf(digits, sizeof digits, "%" PRIu64, peak), o = 0;
        for (int k = 0; k < len; ++k) {
            if (k && (len - k) % 3 == 0) sep[o++] = ',';
            sep[o++] = digits[k];
        }
        sep[o] = '\0';
        snprintf(want, sizeof want, "\npeak: %.4f GiB = %.2f GB (%s bytes) in phase ", (double)peak / 1073741824.0,
                 (double)peak / 1e9, sep);
        cr_assert(strstr(text, want) != NULL, "want '%s' in:\n%s", want, text);
        cr_log_info("%s: %" PRIu64 " bytes; peak %s", M[i].arg, dev, sep);
    }
}

static void bad(const char *args, const char *needle) {
    int rc = run(args);
    cr_log_info("%s -> %d: %s", args, rc, last_err);
    cr_assert_eq(rc, 2, "%s: exit %d (want 2): %s", args, rc, last_err);
    cr_assert(strstr(last_err, needle) != NULL, "%s: want '%s' in: %s", args, needle, last_err);
}

Test(plan_cli, bad_arguments, .timeout = 120) {
    const char *c = "--config " SRC "/configs/hybrid-tiny.json";
    char a[2048];
#define B(extra, needle) do { snprintf(a, sizeof a, "%s %s", c, extra); bad(a, needle); } while (0)
    B("--prompt-len 1", "--prompt-len");
    B("--prompt-len 12x", "--prompt-len");
    B("--prompt-len -5", "--prompt-len");
    B("--prompt-len 100 --cp 0", "--cp");
    B("--prompt-len 100 --group 0", "--group");
    B("--prompt-len 100 --dtype fp8", "--dtype");
    B("--prompt-len 100 --state-dtype int8", "--state-dtype");
    B("--prompt-len 100 --device-memory 12XB", "--device-memory");
    B("--prompt-len 100 --device-memory -1GiB", "--device-memory");
    B("--prompt-len 100 --grad-mode half", "--grad-mode");
    B("--prompt-len 100 --train-mode qlora", "--train-mode");
    B("--prompt-len 100 --lora-r 0", "--lora-r");
    B("--prompt-len 100 --beta nan", "--beta");
    B("--prompt-len 100 --page-size 0", "--page-size");
    B("--prompt-len 100 --frobnicate", "--frobnicate");
    B("--prompt-len 100 --index-sets 3", "--index-sets");
    B("--prompt-len 100 --max-prompt", "--max-prompt");
    B("--prompt-len 100 --moe-as-dense", "--moe-as-dense");
    B("--prompt-len 100 --hf-config x.json", "exactly one");
    B("--prompt-len", "needs a value");
    B("", "--prompt-len");
    B("--prompt-len 100 --json-out /nonexistent-dir/plan.json", "--json-out");
#undef B
    bad("--config /nonexistent/config.json --prompt-len 100", "/nonexistent/config.json");
    bad("--hf-config " SRC "/tests/data/hf/qwen3-next-80b-a3b.json --prompt-len 100", "'num_experts'");
    bad("--hf-config " SRC "/configs/hybrid-tiny.json --prompt-len 100", "model_type");
    bad("--config " SRC "/configs/mla-tiny.json --prompt-len 100 --index-sets 5", "--index-sets");
    /* an outer model_type that contradicts text_config's: exit 2 naming the file, both keys and values */
    {
        char *txt = NULL, path[512], args[1024];
        size_t len = 0;
        char e[512];
        cr_assert_eq(ls_json_read_bytes(SRC "/tests/data/hf/qwen3.5-27b.json", &txt, &len, e, sizeof e), LS_OK, "%s", e);
        char *at = strstr(txt, "\"qwen3_5\"");
        cr_assert(at, "the outer model_type of qwen3.5-27b.json");
        snprintf(path, sizeof path, "%s/plan_cli_mixed.json", LS_BINARY_DIR);
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        fprintf(f, "%.*s\"glm_moe_dsa\"%s", (int)(at - txt), txt, at + strlen("\"qwen3_5\""));
        fclose(f);
        free(txt);
        snprintf(args, sizeof args, "--hf-config %s --prompt-len 100", path);
        bad(args, path);
        bad(args, "'model_type': \"glm_moe_dsa\"");
        bad(args, "'text_config.model_type': \"qwen3_5_text\"");
        remove(path);
    }
    /* --moe-as-dense plans it and says so */
    cr_assert_eq(run("--hf-config " SRC "/tests/data/hf/qwen3-next-80b-a3b.json --prompt-len 100 --moe-as-dense "
                     "--json-out " OUT), 0, "%s", last_err);
    cJSON *d = plan_doc();
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "moe_as_dense")));
    cJSON_Delete(d);
    cr_assert_eq(run("--help"), 0);
}
