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

#include "receipts/json_util.h"
#include "trainer/model/config.h"
#include "trainer/plan/plan.h"
#include "trainer/plan/plan_hf.h"

typedef struct {
    const char *config, *hf_config, *json_out;
    int moe_as_dense, json, max_prompt, help;
    long index_sets; /* -1: from the config */
    const char *dtype, *state_dtype;
    size_t budget;
    const char *budget_arg; /* --device-memory as given */
    int budget_unit;        /* its unit: an index of UNITS */
    size_t host_budget;     /* --host-memory (0: none) */
    const char *host_arg;   /* as given */
    int host_unit;
} cli;

static void usage(FILE *f) {
    fprintf(f,
            "usage: longstraw-plan (--config FILE | --hf-config FILE) --prompt-len P [options]\n"
            "The memory and compute plan of one GRPO step per rank (docs/plan.md).\n"
            "  --config FILE          a LongStraw model config (docs/model.md section 6)\n"
            "  --hf-config FILE       a Hugging Face config.json (Qwen3.5/Qwen3-Next, DeepSeek-V3.2/GLM-5)\n"
            "  --moe-as-dense         plan a hybrid MoE FFN as a dense FFN of the active width (marked)\n"
            "  --prompt-len P         prompt tokens (>= 2)\n"
            "  --response-len R       longest response in tokens (default 1)\n"
            "  --group G              responses per prompt (default 1)\n"
            "  --cp N                 context-parallel ranks (default 1)\n"
            "  --ep N                 mla: expert-parallel ranks (default 1): each holds 1/N of the\n"
            "                         routed experts (the plan is one rank's of the CP x EP grid)\n"
            "  --grad-mode M          detached (default) or full\n"
            "  --train-mode M         lora (default) or full\n"
            "  --lora-r N             adapter rank (default 4)\n"
            "  --beta X               KL weight (default 0.04; 0: no reference policy)\n"
            "  --rollout, --no-rollout  the step generates its responses (default) or they are supplied\n"
            "  --page-size N          KV page tokens (default: the trainer's)\n"
            "  --capture-chunk N      capture chunk tokens (default: the trainer's)\n"
            "  --moe-chunk N|none     mla: tokens per MoE dispatch chunk (default: the trainer's 256); none:\n"
            "                         a capture chunk's tokens dispatched at once (the original work's)\n"
            "  --replay-checkpoint M  the response replay: none (every layer's tape), layer (each layer's input,\n"
            "                         one layer's tape rebuilt at a time), chunk (the branch in chunks, only the\n"
            "                         carried state kept, each chunk taped again) or auto (default: the first of\n"
            "                         none, layer, chunk that fits --device-memory)\n"
            "  --replay-chunk N       response tokens per chunk of a chunked replay (default 256)\n"
            "  --state-tier T         where the prompt state lives: device (default) or host (the host tier\n"
            "                         holds it, the device two layers' staged shares; both tiers printed)\n"
            "  --host-memory B        host tier bytes per rank (units as --device-memory; with --state-tier host)\n"
            "  --dtype D              compute dtype f32 (default), f64, bf16 or f16\n"
            "  --state-dtype D        prompt-state dtype (default: --dtype)\n"
            "  --device-memory B      bytes per rank: 1073741824, 48GiB or 512MiB (binary: 2^30, 2^20),\n"
            "                         96GB or 500MB (decimal: 10^9, 10^6); the output says which\n"
            "  --index-sets N         mla: layers holding their own index keys (default: from the config)\n"
            "  --max-prompt           also the longest prompt that fits --device-memory\n"
            "  --json                 print the plan as JSON (schemas/plan.schema.json)\n"
            "  --json-out FILE        also write that JSON to FILE (atomically)\n"
            "A plan fits when its peak plus 10%% (the margin its tests hold it to) is within\n"
            "--device-memory.\n"
            "Exit status: 0 printed (and fits --device-memory when given); 1 does not fit\n"
            "--device-memory (the plan is printed with fits false); 2 bad argument or input.\n");
}

/* The units of --device-memory: bytes, binary (KiB = 2^10 ...) and decimal (KB = 10^3 ...); `other` is
 * the index of the same scale in the other system (GB and GiB), -1 for bytes. */
static const struct {
    const char *suf;
    double mul;
    int other;
} UNITS[] = {{"", 1, -1},          {"B", 1, -1},          {"KiB", 1024.0, 6},         {"MiB", 1048576.0, 7},
             {"GiB", 1073741824.0, 8}, {"TiB", 1099511627776.0, 9}, {"KB", 1e3, 2}, {"MB", 1e6, 3},
             {"GB", 1e9, 4},       {"TB", 1e12, 5}};
#define UNIT_DECIMAL(i) ((i) >= 6)

/* "123", "48GiB", "96GB", "512MiB", "2TiB", "1.5GiB"; *unit: the index of its unit in UNITS. */
static int parse_bytes(const char *s, size_t *out, int *unit) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v <= 0) return -1;
    for (size_t i = 0; i < sizeof UNITS / sizeof *UNITS; ++i)
        if (strcmp(end, UNITS[i].suf) == 0) {
            double b = v * UNITS[i].mul;
            if (b != floor(b) || b >= 18446744073709551615.0) return -1;
            *out = (size_t)b;
            *unit = (int)i;
            return 0;
        }
    return -1;
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

static int parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
    char *end = NULL;
    errno = 0;
    if (!s || *s == '-' || *s == '\0') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (size_t)v;
    return 0;
}

static int dtype_bytes(const char *s) {
    if (strcmp(s, "f32") == 0) return 4;
    if (strcmp(s, "f64") == 0) return 8;
    if (strcmp(s, "bf16") == 0 || strcmp(s, "f16") == 0) return 2;
    return 0;
}

#define BAD(...)                                            \
    do {                                                    \
        fprintf(stderr, "longstraw-plan: " __VA_ARGS__);    \
        fputc('\n', stderr);                                \
        return 2;                                           \
    } while (0)

/* Parses argv into *a and the plan input *in (whose cfg the caller sets
 * later); 0 or 2 (message printed). */
static int parse(int argc, char **argv, cli *a, ls_plan_in *in) {
    memset(a, 0, sizeof *a);
    a->index_sets = -1;
    a->dtype = "f32";
    int have_p = 0;
    for (int i = 1; i < argc; ++i) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) BAD("%s: needs a value", o); ++i; } while (0)
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) a->help = 1;
        else if (strcmp(o, "--config") == 0) { NEED(); a->config = v; }
        else if (strcmp(o, "--hf-config") == 0) { NEED(); a->hf_config = v; }
        else if (strcmp(o, "--json-out") == 0) { NEED(); a->json_out = v; }
        else if (strcmp(o, "--moe-as-dense") == 0) a->moe_as_dense = 1;
        else if (strcmp(o, "--json") == 0) a->json = 1;
        else if (strcmp(o, "--max-prompt") == 0) a->max_prompt = 1;
        else if (strcmp(o, "--rollout") == 0) in->rollout = 1;
        else if (strcmp(o, "--no-rollout") == 0) in->rollout = 0;
        else if (strcmp(o, "--moe-chunk") == 0) {
            NEED();
            if (strcmp(v, "none") == 0) in->moe_chunk = SIZE_MAX;
            else if (parse_size(v, 1, (size_t)1 << 32, &in->moe_chunk))
                BAD("--moe-chunk: '%s' is neither a token count in [1, 2^32] nor none", v);
        } else if (strcmp(o, "--replay-checkpoint") == 0) {
            NEED();
            if (strcmp(v, "auto") == 0) in->replay_checkpoint = -1;
            else if (strcmp(v, "none") == 0) in->replay_checkpoint = 0;
            else if (strcmp(v, "layer") == 0) in->replay_checkpoint = 1;
            else if (strcmp(v, "chunk") == 0) in->replay_checkpoint = 2;
            else BAD("--replay-checkpoint: '%s' is not auto, none, layer or chunk", v);
        } else if (strcmp(o, "--replay-chunk") == 0) {
            NEED();
            if (parse_size(v, 1, (size_t)1 << 24, &in->replay_chunk))
                BAD("--replay-chunk: '%s' is not a token count in [1, 2^24]", v);
        }
        else if (strcmp(o, "--state-tier") == 0) {
            NEED();
            if (strcmp(v, "device") == 0) in->state_tier = 0;
            else if (strcmp(v, "host") == 0) in->state_tier = 1;
            else BAD("--state-tier: '%s' is not device or host", v);
        }
        else if (strcmp(o, "--host-memory") == 0) {
            NEED();
            if (parse_bytes(v, &a->host_budget, &a->host_unit))
                BAD("--host-memory: '%s' is not a byte count (e.g. 512GB, 256GiB, 1073741824)", v);
            a->host_arg = v;
        }
        else if (strcmp(o, "--prompt-len") == 0) {
            NEED();
            if (parse_size(v, 2, (size_t)1 << 40, &in->P)) BAD("--prompt-len: '%s' is not an integer in [2, 2^40]", v);
            have_p = 1;
        } else if (strcmp(o, "--response-len") == 0) {
            NEED();
            if (parse_size(v, 1, (size_t)1 << 32, &in->R)) BAD("--response-len: '%s' is not an integer in [1, 2^32]", v);
        } else if (strcmp(o, "--group") == 0) {
            NEED();
            if (parse_size(v, 1, 1 << 20, &in->G)) BAD("--group: '%s' is not an integer in [1, 2^20]", v);
        } else if (strcmp(o, "--cp") == 0) {
            NEED();
            size_t w;
            if (parse_size(v, 1, 1 << 20, &w)) BAD("--cp: '%s' is not an integer in [1, 2^20]", v);
            in->world = (int)w;
        } else if (strcmp(o, "--ep") == 0) {
            NEED();
            size_t e;
            if (parse_size(v, 1, 4096, &e)) BAD("--ep: '%s' is not an integer in [1, 4096]", v);
            in->ep = (int)e;
        } else if (strcmp(o, "--grad-mode") == 0) {
            NEED();
            if (strcmp(v, "full") == 0) in->obj.grad_mode = LS_GRAD_FULL;
            else if (strcmp(v, "detached") == 0) in->obj.grad_mode = LS_GRAD_DETACHED;
            else BAD("--grad-mode: '%s' is neither full nor detached", v);
        } else if (strcmp(o, "--train-mode") == 0) {
            NEED();
            if (strcmp(v, "lora") == 0) in->obj.train_mode = LS_TRAIN_LORA;
            else if (strcmp(v, "full") == 0) in->obj.train_mode = LS_TRAIN_FULL;
            else BAD("--train-mode: '%s' is neither lora nor full", v);
        } else if (strcmp(o, "--lora-r") == 0) {
            NEED();
            size_t r;
            if (parse_size(v, 1, 1024, &r)) BAD("--lora-r: '%s' is not an integer in [1, 1024]", v);
            in->obj.lora_r = (int)r;
        } else if (strcmp(o, "--beta") == 0) {
            NEED();
            char *end = NULL;
            double b = strtod(v, &end);
            if (end == v || *end || !isfinite(b) || b < 0 || b > 1e6) BAD("--beta: '%s' is not a number in [0, 1e6]", v);
            in->obj.beta = b;
        } else if (strcmp(o, "--page-size") == 0) {
            NEED();
            if (parse_size(v, 1, 1 << 24, &in->page_size)) BAD("--page-size: '%s' is not an integer in [1, 2^24]", v);
        } else if (strcmp(o, "--capture-chunk") == 0) {
            NEED();
            if (parse_size(v, 1, (size_t)1 << 32, &in->capture_chunk))
                BAD("--capture-chunk: '%s' is not an integer in [1, 2^32]", v);
        } else if (strcmp(o, "--dtype") == 0) {
            NEED();
            if (!dtype_bytes(v)) BAD("--dtype: '%s' is not f32, f64, bf16 or f16", v);
            a->dtype = v;
        } else if (strcmp(o, "--state-dtype") == 0) {
            NEED();
            if (!dtype_bytes(v)) BAD("--state-dtype: '%s' is not f32, f64, bf16 or f16", v);
            a->state_dtype = v;
        } else if (strcmp(o, "--device-memory") == 0) {
            NEED();
            if (parse_bytes(v, &a->budget, &a->budget_unit))
                BAD("--device-memory: '%s' is not a byte count (e.g. 96GB, 48GiB, 1073741824)", v);
            a->budget_arg = v;
        } else if (strcmp(o, "--index-sets") == 0) {
            NEED();
            size_t n;
            if (parse_size(v, 1, 1 << 20, &n)) BAD("--index-sets: '%s' is not an integer in [1, 2^20]", v);
            a->index_sets = (long)n;
        } else BAD("%s: unknown argument (see --help)", o);
#undef NEED
    }
    if (a->help) return 0;
    if (!!a->config == !!a->hf_config) BAD("give exactly one of --config FILE and --hf-config FILE");
    if (!have_p) BAD("--prompt-len: missing");
    if (a->moe_as_dense && !a->hf_config) BAD("--moe-as-dense: only with --hf-config");
    if (a->max_prompt && !a->budget) BAD("--max-prompt: needs --device-memory");
    if (a->host_budget && !in->state_tier) BAD("--host-memory: only with --state-tier host");
    in->host_budget = a->host_budget;
    if (!a->state_dtype) a->state_dtype = a->dtype;
    in->compute_bytes = (size_t)dtype_bytes(a->dtype);
    in->state_bytes = (size_t)dtype_bytes(a->state_dtype);
    in->budget = a->budget;
    return 0;
}

static double gib(size_t b) { return b == SIZE_MAX ? INFINITY : (double)b / 1073741824.0; }
static double gb(size_t b) { return b == SIZE_MAX ? INFINITY : (double)b / 1e9; }

/* "96 GB (decimal: 96,000,000,000 bytes = 89.41 GiB)", "48 GiB (binary: 51,539,607,552 bytes = 51.54 GB)",
 * "1,073,741,824 bytes (= 1.07 GB = 1.00 GiB)": the budget as given, its unit and both forms. */
static void print_budget(const cli *a) {
    char b[40];
    commas(a->budget, b, sizeof b);
    int u = a->budget_unit, o = UNITS[u].other;
    if (o < 0) {
        printf("%s bytes (= %.2f GB = %.2f GiB)", b, gb(a->budget), gib(a->budget));
        return;
    }
    int num = (int)(strlen(a->budget_arg) - strlen(UNITS[u].suf));
    printf("%.*s %s (%s: %s bytes = %.2f %s)", num, a->budget_arg, UNITS[u].suf, UNIT_DECIMAL(u) ? "decimal" : "binary",
           b, (double)a->budget / UNITS[o].mul, UNITS[o].suf);
}

static void print_text(const cli *a, const ls_plan_in *in, const ls_plan *p, const ls_hf_model *hf, int fits,
                       size_t maxp) {
    const ls_model_config *c = in->cfg;
    printf("longstraw-plan: %s model (%s%s%s), %d layers\n", ls_family_name(c->family),
           a->config ? a->config : a->hf_config, hf ? ", " : "", hf ? hf->model_type : "", c->n_layers);
    printf("step: P %zu, R %zu, G %zu, CP %d, %s/%s, lora_r %d, beta %g, %s, dtype %s, state %s\n", in->P, in->R,
           in->G, in->world, in->obj.train_mode == LS_TRAIN_FULL ? "full" : "lora",
           in->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached", in->obj.lora_r, in->obj.beta,
           in->rollout ? "rollout" : "no rollout", a->dtype, a->state_dtype);
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
        bad |= !cJSON_AddStringToObject(s, "dtype", a->dtype);
        bad |= !cJSON_AddStringToObject(s, "state_dtype", a->state_dtype);
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
    ls_plan_in in;
    char err[1024] = "";
    memset(&cfg, 0, sizeof cfg);
    memset(&in, 0, sizeof in); /* the command line's values; the config's defaults come after loading it */
    ls_objective_defaults(&in.obj);
    in.R = in.G = 1;
    in.world = 1;
    in.ep = 1;
    in.rollout = 1;
    in.replay_checkpoint = -1;
    if (parse(argc, argv, &a, &in) != 0) return 2;
    if (a.help) {
        usage(stdout);
        return 0;
    }
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
    if (cl.page_size) in.page_size = cl.page_size;
    if (cl.capture_chunk) in.capture_chunk = cl.capture_chunk;
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
        if (a.index_sets > cfg.n_layers) BAD("--index-sets: %ld exceeds the model's %d layers", a.index_sets, cfg.n_layers);
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
