/* plan_main.c - longstraw-plan: the memory and compute plan of one GRPO step
 * per rank (trainer/plan/plan.h) for a LongStraw config or a Hugging Face
 * config.json, any dtype and device budget (docs/plan.md).
 *
 * Exit status: 0 the plan was printed (and fits --device-memory when one is
 * given), 1 it does not fit --device-memory (the plan is still printed, with
 * fits false), 2 a bad argument or input file (the message names it).
 * Built with the float64 names; nothing here depends on the build's real type. */
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli_opts.h"
#include "receipts/format/json_util.h"
#include "trainer/model/config.h"
#include "trainer/plan/plan.h"
#include "trainer/plan/plan_hf.h"
#include "trainer/run/train_args.h"

/* The command line: the plan's own options, and in ls_plan_in (pin) those
 * it shares with longstraw-train. */
typedef struct {
    const char *config, *hf_config, *json_out;
    int moe_as_dense, json, max_prompt, help;
    size_t index_sets; /* 0: from the config */
    int dtype, state_dtype; /* indices of DTYPES; state_dtype -1: --dtype's */
    size_t budget;
    const char *budget_arg; /* --device-memory as given */
    int budget_unit;        /* its unit (ls_cli_unit) */
    size_t host_budget;     /* --host-memory (0: none) */
    int replay_checkpoint;  /* the trainer's choice index: 0 auto, 1 none, 2 layer, 3 chunk */
    int replay_chunk;       /* 0: the trainer's */
    ls_plan_in in;          /* the options shared with the trainer, in the plan's input */
} cli;

/* The dtypes a plan may assume (the trainer computes in f32 or f64; a plan
 * is also made for bf16 and f16) and their bytes. */
#define DTYPES "f32|f64|bf16|f16"
static const int DTYPE_BYTES[] = {4, 8, 2, 2};
static const char *const DTYPE_NAMES[] = {"f32", "f64", "bf16", "f16"};

/* --moe-chunk N|none */
static int parse_moe_chunk(void *base, const ls_cli_opt *o, const char *v, char *err, size_t err_len) {
    (void)o;
    ls_plan_in *in = &((cli *)base)->in;
    if (strcmp(v, "none") == 0) in->moe_chunk = SIZE_MAX;
    else if (ls_cli_parse_size(v, 1, (size_t)1 << 32, &in->moe_chunk) != 0) {
        snprintf(err, err_len, "--moe-chunk: '%s' is neither a token count in [1, 2^32] nor none", v);
        return 2;
    }
    return 0;
}

/* --device-memory B: the bytes, and the value as given with its unit (the output repeats them) */
static int parse_device_memory(void *base, const ls_cli_opt *o, const char *v, char *err, size_t err_len) {
    (void)o;
    cli *a = base;
    if (ls_cli_parse_bytes(v, 1, SIZE_MAX, &a->budget, &a->budget_unit) != 0) {
        snprintf(err, err_len, "--device-memory: '%s' is not a byte count (e.g. 96GB, 48GiB, 1073741824)", v);
        return 2;
    }
    a->budget_arg = v;
    return 0;
}

#define C(field) .off = offsetof(cli, field)
#define IN(field) .off = offsetof(cli, in) + offsetof(ls_plan_in, field)
/* Rows .like a longstraw-train option take its range, value name and help
 * (trainer/run/train_args.c); their defaults are the plan's. */
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_TEXT,
     .help = "usage: longstraw-plan (--config FILE | --hf-config FILE) --prompt-len P [options]\n"
             "The memory and compute plan of one GRPO step per rank (docs/plan.md).\n"},
    {.like = "--config", .name = "--config", C(config)},
    {.kind = LS_CLI_STRING, .name = "--hf-config", .arg = "FILE",
     .help = "a Hugging Face config.json (Qwen3.5/Qwen3-Next, DeepSeek-V3.2/GLM-5)", C(hf_config)},
    {.kind = LS_CLI_FLAG, .name = "--moe-as-dense",
     .help = "plan a hybrid MoE FFN as a dense FFN of the active width (marked)", C(moe_as_dense)},
    {.like = "--prompt-len", .name = "--prompt-len", .dflt = "required", IN(P)},
    {.like = "--response-len", .name = "--response-len", .dflt = "1", IN(R)},
    {.like = "--group", .name = "--group", .dflt = "1", IN(G)},
    {.kind = LS_CLI_INT, .name = "--cp", .arg = "N", .help = "context-parallel ranks", .dflt = "1", IN(world),
     .min = 1, .max = 1 << 20, .bad = "is not an integer in [1, 2^20]"},
    {.like = "--ep", .name = "--ep", IN(ep)},
    {.like = "--grad-mode", .name = "--grad-mode", IN(obj.grad_mode)},
    {.like = "--train-mode", .name = "--train-mode", IN(obj.train_mode)},
    {.like = "--lora-r", .name = "--lora-r", IN(obj.lora_r)},
    {.like = "--lora-alpha", .name = "--lora-alpha", IN(obj.lora_alpha)},
    {.like = "--epsilon", .name = "--epsilon", IN(obj.epsilon)},
    {.like = "--beta", .name = "--beta", IN(obj.beta)},
    {.kind = LS_CLI_FLAG, .name = "--rollout", .help = "the step generates its responses (default) or they are supplied",
     IN(rollout)},
    {.kind = LS_CLI_UNFLAG, .name = "--no-rollout", IN(rollout)},
    {.like = "--page-size", .name = "--page-size", .dflt = "the trainer's", IN(page_size)},
    {.like = "--capture-chunk", .name = "--capture-chunk", .dflt = "the trainer's", IN(capture_chunk)},
    {.kind = LS_CLI_CUSTOM, .name = "--moe-chunk", .arg = "N|none", .parse = parse_moe_chunk,
     .help = "mla: tokens per MoE dispatch chunk (default: the trainer's 256); none:\n"
             "a capture chunk's tokens dispatched at once (the original work's)"},
    {.like = "--replay-checkpoint", .name = "--replay-checkpoint", C(replay_checkpoint)},
    {.like = "--replay-chunk", .name = "--replay-chunk", C(replay_chunk)},
    {.like = "--state-tier", .name = "--state-tier", IN(state_tier)},
    {.like = "--host-memory", .name = "--host-memory", C(host_budget)},
    {.kind = LS_CLI_CHOICE, .name = "--dtype", .arg = DTYPES,
     .help = "the compute dtype the plan assumes (longstraw-train computes in f32 or f64)", .dflt = "f32", C(dtype)},
    {.kind = LS_CLI_CHOICE, .name = "--state-dtype", .arg = DTYPES, .help = "prompt-state dtype", .dflt = "--dtype",
     C(state_dtype)},
    {.kind = LS_CLI_CUSTOM, .name = "--device-memory", .arg = "B", .parse = parse_device_memory,
     .help = "bytes per rank: 1073741824, 48GiB or 512MiB (binary: 2^30, 2^20),\n"
             "96GB or 500MB (decimal: 10^9, 10^6); the output says which"},
    {.kind = LS_CLI_SIZE, .name = "--index-sets", .arg = "N", C(index_sets), .min = 1, .max = 1 << 20,
     .help = "mla: layers holding their own index keys", .dflt = "from the config",
     .bad = "is not an integer in [1, 2^20]"},
    {.kind = LS_CLI_FLAG, .name = "--max-prompt", .help = "also the longest prompt that fits --device-memory",
     C(max_prompt)},
    {.kind = LS_CLI_FLAG, .name = "--json", .help = "print the plan as JSON (schemas/plan.schema.json)", C(json)},
    {.kind = LS_CLI_STRING, .name = "--json-out", .arg = "FILE", .help = "also write that JSON to FILE (atomically)",
     C(json_out)},
    {.like = "--help", .name = "--help", C(help)},
    {.kind = LS_CLI_TEXT,
     .help = "A plan fits when its peak plus 10% (the margin its tests hold it to) is within\n"
             "--device-memory.\n"
             "Exit status: 0 printed (and fits --device-memory when given); 1 does not fit\n"
             "--device-memory (the plan is printed with fits false); 2 bad argument or input.\n"},
};
#undef C
#undef IN
#define N_OPTS (sizeof OPTS / sizeof OPTS[0])

static ls_cli_table table(void) { return (ls_cli_table){OPTS, N_OPTS}; }

static void usage(FILE *f) {
    const ls_cli_table shared = ls_train_options();
    ls_cli_usage(f, table(), &shared, 1, 24);
}

/* v with a comma every three digits ("96,000,000,000") into buf; returns buf. */
static const char *commas(size_t v, char *buf, size_t n) {
    char d[32];
    int len = snprintf(d, sizeof d, "%zu", v), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < n; ++i) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = d[i];
    }
    buf[o] = '\0';
    return buf;
}

#define BAD(...)                                            \
    do {                                                    \
        fprintf(stderr, "longstraw-plan: " __VA_ARGS__);    \
        fputc('\n', stderr);                                \
        return 2;                                           \
    } while (0)

/* The index of option name in OPTS. */
static size_t opt_index(const char *name) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (OPTS[i].name && !strcmp(OPTS[i].name, name)) return i;
    return N_OPTS;
}

/* Parses argv into *a; its in holds the command line's part of the plan's
 * input (the config's defaults come later).  given: which rows were given.
 * 0 or 2 (message printed). */
static int parse(int argc, char **argv, cli *a, unsigned char *given) {
    char err[512];
    const ls_cli_table shared = ls_train_options();
    const ls_cli_parser p = {.table = table(), .shared = &shared, .n_shared = 1, .given = given, .once = 1};
    if (ls_cli_parse(&p, a, argc, argv, 1, err, sizeof err) != 0) BAD("%s", err);
    if (a->help) return 0;
    ls_plan_in *in = &a->in;
    if (!!a->config == !!a->hf_config) BAD("give exactly one of --config FILE and --hf-config FILE");
    if (!given[opt_index("--prompt-len")]) BAD("--prompt-len: missing");
    if (a->moe_as_dense && !a->hf_config) BAD("--moe-as-dense: only with --hf-config");
    if (a->max_prompt && !a->budget) BAD("--max-prompt: needs --device-memory");
    if (a->host_budget && !in->state_tier) BAD("--host-memory: only with --state-tier host");
    in->host_budget = a->host_budget;
    if (a->state_dtype < 0) a->state_dtype = a->dtype;
    in->compute_bytes = (size_t)DTYPE_BYTES[a->dtype];
    in->state_bytes = (size_t)DTYPE_BYTES[a->state_dtype];
    in->budget = a->budget;
    in->replay_checkpoint = a->replay_checkpoint - 1; /* the trainer's auto|none|layer|chunk: -1 auto, 0, 1, 2 */
    in->replay_chunk = (size_t)a->replay_chunk;
    return 0;
}

static double gib(size_t b) { return b == SIZE_MAX ? INFINITY : (double)b / 1073741824.0; }
static double gb(size_t b) { return b == SIZE_MAX ? INFINITY : (double)b / 1e9; }

/* "96 GB (decimal: 96,000,000,000 bytes = 89.41 GiB)", "48 GiB (binary: 51,539,607,552 bytes = 51.54 GB)",
 * "1,073,741,824 bytes (= 1.07 GB = 1.00 GiB)": the budget as given, its unit and both forms. */
static void print_budget(const cli *a) {
    char b[40];
    commas(a->budget, b, sizeof b);
    double mul = 1, omul = 1;
    int o = -1, decimal = 0;
    const char *suf = ls_cli_unit(a->budget_unit, &mul, &o, &decimal);
    if (o < 0) {
        printf("%s bytes (= %.2f GB = %.2f GiB)", b, gb(a->budget), gib(a->budget));
        return;
    }
    const char *osuf = ls_cli_unit(o, &omul, NULL, NULL);
    int num = (int)(strlen(a->budget_arg) - strlen(suf));
    printf("%.*s %s (%s: %s bytes = %.2f %s)", num, a->budget_arg, suf, decimal ? "decimal" : "binary", b,
           (double)a->budget / omul, osuf);
}

static void print_text(const cli *a, const ls_plan_in *in, const ls_plan *p, const ls_hf_model *hf, int fits,
                       size_t maxp) {
    const ls_model_config *c = in->cfg;
    printf("longstraw-plan: %s model (%s%s%s), %d layers\n", ls_family_name(c->family),
           a->config ? a->config : a->hf_config, hf ? ", " : "", hf ? hf->model_type : "", c->n_layers);
    printf("step: P %zu, R %zu, G %zu, CP %d, %s/%s, lora_r %d, beta %g, %s, dtype %s, state %s\n", in->P, in->R,
           in->G, in->world, in->obj.train_mode == LS_TRAIN_FULL ? "full" : "lora",
           in->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached", in->obj.lora_r, in->obj.beta,
           in->rollout ? "rollout" : "no rollout", DTYPE_NAMES[a->dtype], DTYPE_NAMES[a->state_dtype]);
    if (in->ep > 1) {
        int E = c->family->routed_experts ? c->family->routed_experts(c) : 0;
        printf("EP %d: each rank holds %d of the %d routed experts (weights, adapters, gradients, moments)\n", in->ep,
               E / in->ep, E);
    }
    if (hf && hf->moe_as_dense) printf("NOTE: the MoE FFN is planned as a dense FFN of width %d (--moe-as-dense)\n", c->ffn_dim);
    if (hf && hf->mtp_layers) printf("NOTE: %d multi-token-prediction layer(s) in the file are not planned\n", hf->mtp_layers);
    const ls_plan_state *s = &p->state;
    printf("\nprompt state per rank (%zu positions, %zu pages per layer):\n", p->shard, s->pages);
    /* the parts the family's state has (its plan's layer counts) */
    if (s->attn_layers > 0)
        printf("  attention KV      %2d layers  %20zu bytes  %10.4f GiB\n", s->attn_layers, s->attn_kv, gib(s->attn_kv));
    if (s->recurrent_layers > 0)
        printf("  GDN recurrent     %2d layers  %20zu bytes  %10.4f GiB\n", s->recurrent_layers, s->recurrent, gib(s->recurrent));
    if (s->latent_layers > 0) {
        printf("  MLA latents       %2d layers  %20zu bytes  %10.4f GiB\n", s->latent_layers, s->latent, gib(s->latent));
        printf("  index keys        %2d sets    %20zu bytes  %10.4f GiB\n", s->index_sets, s->index_keys, gib(s->index_keys));
    }
    printf("  total                         %20zu bytes  %10.4f GiB\n", s->total, gib(s->total));
    printf("\nmemory per rank (GiB)  %-10s", "fixed");
    for (int ph = 0; ph < LS_PLAN_PHASES; ++ph)
        printf(" %10.10s", ls_plan_phase_name((ls_plan_phase)ph));
    printf("\n");
    for (int k = 0; k < LS_MEM_COUNT; ++k) {
        if (!in->state_tier && (k == LS_MEM_PROMPT_STATE_HOST || k == LS_MEM_STAGING)) continue; /* device tier */
        printf("  %-21s %10.4f", ls_mem_cat_name((ls_mem_cat)k), gib(p->fixed[k]));
        for (int ph = 0; ph < LS_PLAN_PHASES; ++ph)
            if (p->phase_runs[ph]) printf(" %10.4f", gib(p->phase[ph][k]));
            else printf(" %10s", "-");
        printf("\n");
    }
    printf("  %-21s %10s", in->state_tier ? "device total" : "total (with fixed)", "");
    for (int ph = 0; ph < LS_PLAN_PHASES; ++ph)
        if (p->phase_runs[ph]) printf(" %10.4f", gib(p->phase_total[ph]));
        else printf(" %10s", "-");
    char pb[40];
    printf("\n\npeak: %.4f GiB = %.2f GB (%s bytes) in phase %s; reference state %s; %d capture(s); replay %s\n",
           gib(p->peak_total), gb(p->peak_total), commas(p->peak_total, pb, sizeof pb),
           ls_plan_phase_name(p->peak_phase), p->keep_reference ? "kept" : "recaptured", p->captures,
           p->replay_checkpoint == 2 ? "in chunks" : p->replay_checkpoint ? "checkpointed per layer" : "taped");
    if (p->replay_checkpoint == 2) printf("replay in chunks of %zu tokens\n", in->replay_chunk ? in->replay_chunk : 256);
    if (in->state_tier)
        printf("state tier host: the device tier peaks at the line above (two layers' staged shares, %.4f GiB, in place "
               "of the prompt state); the host tier holds %.4f GiB = %.2f GB (%s bytes)\n",
               gib(p->peak[LS_MEM_STAGING]), gib(p->host_peak), gb(p->host_peak), commas(p->host_peak, pb, sizeof pb));
    if (p->moe_routed_buffer)
        printf("MoE dispatch: one routed hidden buffer (%s tokens x experts_per_token x d_model) %.4f GiB = %.2f GB "
               "(%s bytes)\n", in->moe_chunk == SIZE_MAX ? "a capture chunk's" : "a dispatch chunk's",
               gib(p->moe_routed_buffer), gb(p->moe_routed_buffer), commas(p->moe_routed_buffer, pb, sizeof pb));
    if (a->budget) {
        printf("device memory: ");
        print_budget(a);
        printf(" per rank: %s\n", fits ? "fits" : "DOES NOT FIT");
    }
    if (a->host_budget) {
        char hb[40];
        printf("host memory: %s bytes (%.2f GiB) per rank: %s\n", commas(a->host_budget, hb, sizeof hb),
               gib(a->host_budget), ls_plan_fits(p->host_peak, a->host_budget) ? "fits" : "DOES NOT FIT");
    }
    if (a->max_prompt) printf("longest prompt that fits: %zu tokens\n", maxp);
    printf("FLOPs per rank:");
    for (int ph = 0; ph < LS_PLAN_PHASES; ++ph)
        if (p->phase_runs[ph]) printf(" %s %.4g", ls_plan_phase_name((ls_plan_phase)ph), p->flops[ph]);
    printf("\n");
}

/* Adds a size_t as an exact JSON integer (a raw digit string past 2^53). */
static int add_size(cJSON *o, const char *k, size_t v) { return ls_json_add_u64(o, k, (uint64_t)v) != 0; }

static cJSON *to_json(const cli *a, const ls_plan_in *in, const ls_plan *p, const ls_hf_model *hf, int fits,
                      size_t maxp) {
    cJSON *d = cJSON_CreateObject(), *x;
    int bad = !d;
    bad |= !cJSON_AddStringToObject(d, "schema", "urn:longstraw:schema:plan:v1");
    bad |= !cJSON_AddStringToObject(d, "source", a->config ? a->config : a->hf_config);
    bad |= !cJSON_AddStringToObject(d, "source_kind", a->config ? "longstraw" : "huggingface");
    if (hf) {
        bad |= !cJSON_AddStringToObject(d, "hf_model_type", hf->model_type);
        bad |= !cJSON_AddBoolToObject(d, "moe_as_dense", hf->moe_as_dense);
        bad |= !cJSON_AddNumberToObject(d, "mtp_layers_not_planned", hf->mtp_layers);
    }
    x = ls_config_to_json(in->cfg, NULL);
    bad |= !x || !cJSON_AddItemToObject(d, "model", x);
    cJSON *s = cJSON_AddObjectToObject(d, "step");
    bad |= !s;
    if (s) {
        bad |= add_size(s, "prompt_len", in->P) | add_size(s, "response_len", in->R) | add_size(s, "group", in->G);
        if (in->ep > 1) bad |= add_size(s, "ep", (size_t)in->ep);
        bad |= add_size(s, "cp", (size_t)in->world) | add_size(s, "page_size", in->page_size) |
               add_size(s, "capture_chunk", in->capture_chunk) | add_size(s, "lora_r", (size_t)in->obj.lora_r);
        bad |= !cJSON_AddStringToObject(s, "train_mode", in->obj.train_mode == LS_TRAIN_FULL ? "full" : "lora");
        bad |= !cJSON_AddStringToObject(s, "grad_mode", in->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached");
        bad |= !cJSON_AddNumberToObject(s, "beta", in->obj.beta);
        bad |= !cJSON_AddBoolToObject(s, "rollout", in->rollout);
        bad |= !cJSON_AddStringToObject(s, "dtype", DTYPE_NAMES[a->dtype]);
        bad |= !cJSON_AddStringToObject(s, "state_dtype", DTYPE_NAMES[a->state_dtype]);
    }
    cJSON *st = cJSON_AddObjectToObject(d, "prompt_state");
    bad |= !st;
    if (st) {
        const ls_plan_state *q = &p->state;
        bad |= add_size(st, "shard_positions", p->shard) | add_size(st, "pages_per_layer", q->pages);
        bad |= add_size(st, "attn_kv", q->attn_kv) | add_size(st, "recurrent", q->recurrent) |
               add_size(st, "latent", q->latent) | add_size(st, "index_keys", q->index_keys) |
               add_size(st, "total", q->total);
        bad |= add_size(st, "attn_layers", (size_t)q->attn_layers) |
               add_size(st, "recurrent_layers", (size_t)q->recurrent_layers) |
               add_size(st, "latent_layers", (size_t)q->latent_layers) | add_size(st, "index_sets", (size_t)q->index_sets);
    }
    cJSON *fx = cJSON_AddObjectToObject(d, "fixed");
    bad |= !fx;
#define TIER_CAT(k) (in->state_tier || ((k) != LS_MEM_PROMPT_STATE_HOST && (k) != LS_MEM_STAGING))
    for (int k = 0; fx && k < LS_MEM_COUNT; ++k)
        if (TIER_CAT(k)) bad |= add_size(fx, ls_mem_cat_name((ls_mem_cat)k), p->fixed[k]);
    cJSON *phs = cJSON_AddArrayToObject(d, "phases");
    bad |= !phs;
    for (int ph = 0; phs && ph < LS_PLAN_PHASES; ++ph) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(phs, e)) { bad = 1; cJSON_Delete(e); break; }
        bad |= !cJSON_AddStringToObject(e, "phase", ls_plan_phase_name((ls_plan_phase)ph));
        bad |= !cJSON_AddBoolToObject(e, "runs", p->phase_runs[ph]);
        cJSON *m = cJSON_AddObjectToObject(e, "memory");
        bad |= !m;
        for (int k = 0; m && k < LS_MEM_COUNT; ++k)
            if (TIER_CAT(k)) bad |= add_size(m, ls_mem_cat_name((ls_mem_cat)k), p->phase[ph][k]);
        bad |= add_size(e, "total", p->phase_total[ph]);
        bad |= !isfinite(p->flops[ph]) || !cJSON_AddNumberToObject(e, "flops", p->flops[ph]);
    }
    cJSON *pk = cJSON_AddObjectToObject(d, "peak");
    bad |= !pk;
    if (pk) {
        bad |= !cJSON_AddStringToObject(pk, "phase", ls_plan_phase_name(p->peak_phase));
        bad |= add_size(pk, "total", p->peak_total);
        cJSON *m = cJSON_AddObjectToObject(pk, "memory");
        bad |= !m;
        for (int k = 0; m && k < LS_MEM_COUNT; ++k)
            if (TIER_CAT(k)) bad |= add_size(m, ls_mem_cat_name((ls_mem_cat)k), p->peak[k]);
    }
#undef TIER_CAT
    if (in->state_tier) { /* the host tier (the device tier is peak above) */
        bad |= !cJSON_AddStringToObject(d, "state_tier", "host");
        cJSON *h = cJSON_AddObjectToObject(d, "host_tier");
        bad |= !h;
        if (h) {
            bad |= add_size(h, "peak", p->host_peak);
            if (a->host_budget) {
                bad |= add_size(h, "host_memory", a->host_budget);
                bad |= !cJSON_AddBoolToObject(h, "fits", ls_plan_fits(p->host_peak, a->host_budget));
            }
        }
    }
    bad |= !cJSON_AddBoolToObject(d, "keep_reference", p->keep_reference);
    bad |= !cJSON_AddStringToObject(d, "replay_checkpoint",
                                    p->replay_checkpoint == 2 ? "chunk" : p->replay_checkpoint ? "layer" : "none");
    if (p->replay_checkpoint == 2) bad |= add_size(d, "replay_chunk", in->replay_chunk ? in->replay_chunk : 256);
    if (p->moe_routed_buffer) bad |= add_size(d, "moe_routed_buffer", p->moe_routed_buffer);
    bad |= add_size(d, "captures", (size_t)p->captures);
    if (a->budget) {
        bad |= add_size(d, "device_memory", a->budget);
        bad |= !cJSON_AddBoolToObject(d, "fits", fits);
    }
    if (a->max_prompt) bad |= add_size(d, "max_prompt", maxp);
    if (bad) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

/* The longest prompt that fits in->budget (plan.h, up to 2^40 tokens). */
static size_t max_prompt(const ls_plan_in *in) { return LS_K(ls_plan_max_prompt)(in, (size_t)1 << 40); }

int main(int argc, char **argv) {
    setlocale(LC_ALL, "C");
    cli a;
    ls_model_config cfg;
    ls_hf_model hf;
    char err[1024] = "";
    memset(&cfg, 0, sizeof cfg);
    memset(&a, 0, sizeof a); /* the command line's values; the config's defaults come after loading it */
    a.state_dtype = -1;
    ls_objective_defaults(&a.in.obj);
    a.in.R = a.in.G = 1;
    a.in.world = 1;
    a.in.ep = 1;
    a.in.rollout = 1;
    unsigned char given[N_OPTS] = {0};
    if (parse(argc, argv, &a, given) != 0) return 2;
    if (a.help) {
        usage(stdout);
        return 0;
    }
    ls_plan_in in = a.in;
    /* the defaults the trainer's build would pick, then the command line's */
    ls_plan_in cl = in;
    if (a.config) {
        if (ls_config_load(&cfg, a.config, err, sizeof err) != LS_OK) BAD("--config: %s", err);
    } else {
        if (ls_plan_hf_load(&hf, a.hf_config, a.moe_as_dense, err, sizeof err) != LS_OK) BAD("--hf-config: %s", err);
        cfg = hf.cfg;
        in.index_sets = hf.index_sets;
    }
    LS_K(ls_plan_in_defaults)(&in, &cfg);
    in.obj = cl.obj;
    in.P = cl.P;
    in.R = cl.R;
    in.G = cl.G;
    in.world = cl.world;
    in.ep = cl.ep > 1 ? cl.ep : 1;
    int routed = cfg.family->routed_experts ? cfg.family->routed_experts(&cfg) : 0;
    if (in.ep > 1 && routed < 1)
        BAD("--ep %d: family '%s' has no routed experts (expert parallelism needs them)", in.ep,
            ls_family_name(cfg.family));
    if (in.ep > 1 && routed % in.ep != 0) BAD("--ep %d: does not divide the model's %d routed experts", in.ep, routed);
    if (given[opt_index("--page-size")]) in.page_size = cl.page_size;
    if (given[opt_index("--capture-chunk")]) in.capture_chunk = cl.capture_chunk; /* 0: the whole prompt at once */
    in.compute_bytes = cl.compute_bytes;
    in.state_bytes = cl.state_bytes;
    in.rollout = cl.rollout;
    in.replay_checkpoint = cl.replay_checkpoint;
    in.replay_chunk = cl.replay_chunk;
    in.moe_chunk = cl.moe_chunk;
    in.budget = cl.budget;
    in.state_tier = cl.state_tier;
    in.host_budget = cl.host_budget;
    in.index_sets = a.hf_config ? hf.index_sets : 0;
    if (a.index_sets > 0) {
        if (!cfg.family->index_sets)
            BAD("--index-sets: family '%s' holds no sparse-attention index keys", ls_family_name(cfg.family));
        if (a.index_sets > (size_t)cfg.n_layers) BAD("--index-sets: %zu exceeds the model's %d layers", a.index_sets, cfg.n_layers);
        in.index_sets = (size_t)a.index_sets;
    }
    ls_plan p;
    ls_status st = LS_K(ls_plan_compute)(&in, &p, err, sizeof err);
    if (st != LS_OK) BAD("%s", err);
    int fits = (a.budget ? ls_plan_fits(p.peak_total, a.budget) : 1) &&
               (a.host_budget ? ls_plan_fits(p.host_peak, a.host_budget) : 1);
    size_t maxp = a.max_prompt ? max_prompt(&in) : 0;
    cJSON *doc = NULL;
    if (a.json || a.json_out) {
        doc = to_json(&a, &in, &p, a.hf_config ? &hf : NULL, fits, maxp);
        if (!doc) BAD("cannot build the JSON plan (out of memory or a non-finite FLOP count)");
    }
    if (a.json) {
        char *txt = NULL;
        size_t len = 0;
        if (ls_json_print(doc, &txt, &len, err, sizeof err) != LS_OK) {
            cJSON_Delete(doc);
            BAD("%s", err);
        }
        fwrite(txt, 1, len, stdout);
        free(txt);
    } else {
        print_text(&a, &in, &p, a.hf_config ? &hf : NULL, fits, maxp);
    }
    if (a.json_out && ls_json_write_file(a.json_out, doc, err, sizeof err) != LS_OK) {
        cJSON_Delete(doc);
        BAD("--json-out: %s", err);
    }
    cJSON_Delete(doc);
    return fits ? 0 : 1;
}
