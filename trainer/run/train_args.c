/* train_args.c - the longstraw-train command line: one table of options
 * (OPTS below) drives the parsing and the --help text. */
#include "trainer/run/train_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "common/cli_opts.h"
#include "receipts/format/trace_event.h"
#include "trainer/step/probe.h"

/* A row of OPTS: common/cli_opts.h's ls_cli_opt (kind, name, value, help,
 * default, the field at off in ls_train_args, range, error); .rec says where
 * every rank's receipt records the value: a path under the predicate
 * ("config.options.seed"), or '-' and why it is not recorded (an output, the
 * run directory).  ls_train_option_at hands it out and the tests hold every
 * path against a receipt.  The --fault rows are LS_CLI_PICK rows (the value
 * picks the row), kill-rank=... one with its own parse (parse_kill). */
typedef ls_cli_opt opt;

/* A row's common part: kind, name, arg, help, dflt, gap and the field. */
#define ROW(k, n, a, h, d, g, field) \
    .kind = (k), .name = (n), .arg = (a), .help = (h), .dflt = (d), .gap = (g), .off = offsetof(ls_train_args, field)

/* An LS_CLI_CHOICE field takes the value's index in arg: arg lists the enum's
 * values in order. */
_Static_assert(sizeof(ls_grad_mode) == sizeof(int) && LS_GRAD_DETACHED == 0 && LS_GRAD_FULL == 1, "grad-mode");
_Static_assert(sizeof(ls_strategy) == sizeof(int) && LS_STRATEGY_LONGSTRAW == 0 && LS_STRATEGY_NAIVE == 1,
               "strategy");
_Static_assert(sizeof(ls_train_mode) == sizeof(int) && LS_TRAIN_LORA == 0 && LS_TRAIN_FULL == 1, "train-mode");
_Static_assert(sizeof(ls_task_kind) == sizeof(int) && LS_TASK_RETRIEVAL == 0 && LS_TASK_RECALL == 1, "task");
_Static_assert(sizeof(ls_objective_kind) == sizeof(int) && LS_OBJECTIVE_GRPO == 0 && LS_OBJECTIVE_SFT == 1,
               "objective");
_Static_assert(sizeof(ls_probe_grouping) == sizeof(int) && LS_PROBE_GROUPS_ALL == 0 && LS_PROBE_GROUPS_LAYER == 1,
               "probe-groups");

/* --fault kill-rank=SPEC (parsing, below). */
static int parse_kill_row(void *base, const ls_cli_opt *o, const char *spec, char *err, size_t err_len);

static const opt OPTS[] = {
    {.kind = LS_CLI_TEXT,
     .help = "usage: longstraw-train --config FILE --out RUN [options]\n"
             "\n"
             "One or more GRPO steps of either family (hybrid or mla), on one rank or\n"
             "context-parallel under mpirun: capture the prompt state without autograd,\n"
             "roll out G responses, score them, replay each member under autograd,\n"
             "(full mode) back-propagate through the prompt, finalize, AdamW.  Writes\n"
             "RUN/rank-NNNN/events.jsonl.zst and RUN/rank-NNNN/receipt.json per rank,\n"
             "RUN/manifest.json.\n"
             "\n"},
    {.rec = "config.inputs.config", ROW(LS_CLI_STRING, "--config", "FILE", "model config (configs/hybrid-tiny.json, ...)", NULL, 0, config_path)},
    {.rec = "-the run directory itself", ROW(LS_CLI_STRING, "--out", "RUN", "run directory (must not exist or be empty)", NULL, 0, out)},
    {.rec = "config.options.task", ROW(LS_CLI_CHOICE, "--task", "retrieval|recall",
     "the built-in task: key/value retrieval, or multi-query\n"
     "associative recall (reward: fraction of queries answered; chance 0.1)", "retrieval", 0, task)},
    {.rec = "config.options.recall_records", ROW(LS_CLI_SIZE, "--recall-records", "N",
     "recall: records per prompt (>= the queries q = min(R, 8));\n"
     "0: the task's own, min(26, max(q, (P - q - 2) / 8))", "0", 0, recall_records),
     .min = 0, .max = LS_TASK_RECALL_MAX_RECORDS, .bad = "is not an integer in [0, 26]"},
    {.rec = "config.options.prompt_len", ROW(LS_CLI_SIZE, "--prompt-len", "P", "prompt tokens (the built-in task needs >= 64)", "4096", 0, P),
     .min = 2, .max = (size_t)1 << 31, .bad = "is not an integer in [2, 2^31]"},
    {.rec = "config.options.response_len", ROW(LS_CLI_SIZE, "--response-len", "R", "response tokens per member", "8", 0, step.R), .min = 1,
     .max = 1 << 16, .bad = "is not an integer in [1, 65536]"},
    {.rec = "config.group", ROW(LS_CLI_SIZE, "--group", "G", "group size", "4", 0, step.G), .min = 1, .max = 4096,
     .bad = "is not an integer in [1, 4096]"},
    {.rec = "config.options.prompts_per_step", ROW(LS_CLI_SIZE, "--prompts-per-step", "B",
     "groups per optimizer step, each its own prompt: the loss is\n"
     "their mean, one prompt state live at a time (with --rollouts\n"
     "a step reads B lines)", "1", 0, prompts_per_step), .min = 1, .max = 4096,
     .bad = "is not an integer in [1, 4096]"},
    {.rec = "config.steps_requested", ROW(LS_CLI_INT, "--steps", "S", "optimizer steps", "1; with --rollouts FILE the number of its lines", 0,
     steps), .min = 1, .max = 1000000, .bad = "is not an integer in [1, 1000000]"},
    {.rec = "config.options.seed", ROW(LS_CLI_U64, "--seed", "N", "seed of weights, task and sampling", "1", 0, step.seed), .min = 0,
     .max = SIZE_MAX, .bad = "is not a decimal integer in [0, 2^64)"},
    {.rec = "config.dtype", ROW(LS_CLI_CHOICE, "--dtype", "f32|f64", "compute dtype", "f32", 0, f64)},
    {.rec = "config.grad_mode", ROW(LS_CLI_CHOICE, "--grad-mode", "detached|full", "detached prompt state, or the full gradient", "detached", 3,
     obj.grad_mode)},
    {.rec = "config.strategy", ROW(LS_CLI_CHOICE, "--strategy", "longstraw|naive", "LongStraw transaction, or one full sequence per member",
     "longstraw", 2, step.strategy)},
    {.rec = "config.train_mode", ROW(LS_CLI_CHOICE, "--train-mode", "lora|full", "trainable set (docs/model.md §3)", "lora", 0,
     obj.train_mode)},
    {.rec = "config.options.lora_init", ROW(LS_CLI_CHOICE, "--lora-init", "zero|random", "lora_B initialisation", "zero", 0, obj.lora_init_random)},
    {.rec = "config.lora_r", ROW(LS_CLI_INT, "--lora-r", "R", "adapter rank and alpha", "4, 8", 3, obj.lora_r), .min = 1, .max = 1024,
     .bad = "is not an integer in [1, 1024]"},
    {.rec = "config.lora_alpha", ROW(LS_CLI_REAL, "--lora-alpha", "A", NULL, NULL, 0, obj.lora_alpha), .lo = 1e-6, .hi = 1e6,
     .bad = "is not a positive number"},
    {.rec = "config.lora_experts", ROW(LS_CLI_FLAG, "--lora-experts", NULL, "mla: adapters on the routed experts too (docs/model.md §3)", "off", 0,
     obj.lora_experts)},
    {.rec = "config.options.lr", ROW(LS_CLI_REAL, "--lr", "X", "AdamW learning rate", "1e-3", 0, step.lr), .lo = 0, .hi = 10,
     .bad = "is not a number in [0, 10]"},
    {.rec = "config.temperature", ROW(LS_CLI_REAL, "--temperature", "X", "sampling (temperature also scales scored logits)", "1, 0.95", 3,
     obj.temperature), .lo = 1e-3, .hi = 1e3, .bad = "is not in [1e-3, 1e3]"},
    {.rec = "config.options.top_p", ROW(LS_CLI_REAL, "--top-p", "X", NULL, NULL, 0, step.top_p), .lo = 1e-6, .hi = 1, .bad = "is not in (0, 1]"},
    {.rec = "config.epsilon", ROW(LS_CLI_REAL, "--epsilon", "X",
     "clip range and KL weight []; beta 0 skips the\n"
     "reference policy (no reference capture, no KL)",
     "0.2, 0.04", 0, obj.epsilon), .lo = 0, .hi = 1, .bad = "is not in [0, 1]"},
    {.rec = "config.beta", ROW(LS_CLI_REAL, "--beta", "X", NULL, NULL, 0, obj.beta), .lo = 0, .hi = 100, .bad = "is not in [0, 100]"},
    {.rec = "config.options.keep_reference", ROW(LS_CLI_CHOICE, "--keep-reference", "auto|on|off",
     "beta > 0 with a rollout: the reference's prompt state beside\n"
     "the policy's (on: two captures), or one state at a time (off: three\n"
     "captures); auto: on when the plan of two fits the budget", "auto", 0, keep_reference)},
    {.rec = "config.options.replay_checkpoint", ROW(LS_CLI_CHOICE, "--replay-checkpoint", "auto|none|layer|chunk",
     "the response replay: none keeps every layer's tape through the\n"
     "backward; layer keeps each layer's input and rebuilds its tape during\n"
     "the backward (the same gradients bit for bit, about L x R x d values\n"
     "plus one layer's tape); chunk runs the branch in chunks of\n"
     "--replay-chunk tokens, keeps only the carried state (the response's\n"
     "own K/V or latents, the GDN state at each chunk start) and tapes each\n"
     "chunk again during the backward (the same gradients to rounding;\n"
     "--strategy longstraw); auto: the first of none, layer, chunk whose\n"
     "plan fits the budget", "auto", 0, replay_checkpoint)},
    {.rec = "config.options.replay_chunk", ROW(LS_CLI_INT, "--replay-chunk", "N",
     "--replay-checkpoint chunk (or auto choosing it): response tokens per chunk", "256", 0, step.replay_chunk),
     .min = 1, .max = 1 << 24, .bad = "is not an integer in [1, 16777216]"},
    {.rec = "config.options.state_tier", ROW(LS_CLI_CHOICE, "--state-tier", "device|host",
     "where the captured prompt state lives: device, or\n"
     "host (its rows in the host tier, each layer's share staged into the\n"
     "device tier before the layer reads it, the next layer's copied\n"
     "meanwhile: the device holds two layers' shares, not the state; the\n"
     "same results bit for bit)", "device", 0, step.state_tier)},
    {.rec = "config.ep_ranks", ROW(LS_CLI_INT, "--ep", "N",
     "mla: expert parallelism over N ranks: under mpirun -np W the ranks\n"
     "form a CP x EP grid (W = cp x N, rank = cp_idx x N + ep_idx); each EP\n"
     "rank computes and updates E/N of the routed experts (docs/design.md §4a)",
     "1", 0, ep), .min = 1, .max = 4096, .bad = "is not an integer in [1, 4096]"},
    {.rec = "config.options.page_size", ROW(LS_CLI_SIZE, "--page-size", "N", "KV page length in tokens", "64", 0, step.page_size), .min = 1,
     .max = 1 << 20, .bad = "is not an integer in [1, 2^20]"},
    {.rec = "config.options.capture_chunk", ROW(LS_CLI_SIZE, "--capture-chunk", "N", "prompt tokens per capture segment; 0 = all at once", "2048", 0,
     step.capture_chunk), .min = 0, .max = (size_t)1 << 31,
     .bad = "is not a token count (0: the whole prompt at once)"},
    {.rec = "config.options.input", ROW(LS_CLI_STRING, "--rollouts", "FILE|-",
     "JSONL, one step's group per line: prompt, responses, rewards,\n"
     "optional old_logprobs and ref_logprobs; - reads standard input",
     NULL, 0, rollouts)},
    {.rec = "config.objective", ROW(LS_CLI_CHOICE, "--objective", "grpo|sft", "GRPO, or supervised cross-entropy on the task's answers", "grpo",
     0, step.objective)},
    {.rec = "config.sft_steps", ROW(LS_CLI_INT, "--sft-steps", "N", "the first N steps use the sft objective (warm start)", "0", 0, sft_steps),
     .min = 0, .max = 1000000, .bad = "is not an integer in [0, 1000000]"},
    {.rec = "config.prefix_frozen", ROW(LS_CLI_INT, "--prefix-frozen", "K",
     "capture once per K steps and reuse the stale state (marked\n"
     "prefix_frozen everywhere; never an exact step)",
     "off", 0, prefix_frozen), .min = 1, .max = 1000000, .bad = "is not an integer in [1, 1000000]"},
    {.rec = "config.options.probe_every", ROW(LS_CLI_INT, "--probe-every", "K",
     "the gradient probe every K-th step (the first included;\n"
     "0: off): finite differences of the step's loss, its batch\n"
     "fixed, against the applied gradient (gradient_probe events)",
     "0", 0, probe_every), .min = 0, .max = 1000000, .bad = "is not an integer in [0, 1000000]"},
    {.rec = "-recorded in every gradient_probe event (its grouping), the only thing it changes",
     ROW(LS_CLI_CHOICE, "--probe-groups", "all|layer",
     "the probe's directions: one over every trainable tensor, or\n"
     "one per layer (and one for the tensors outside the layers)", "all", 0, probe_groups)},
    {.rec = "config.options.grad_cosine_every", ROW(LS_CLI_INT, "--grad-cosine-every", "N",
     "every N-th step (the first included; 0: off) the detached and\n"
     "the full gradient of the step's batch side by side: their cosine\n"
     "and norms in step_metrics (the update is the run's own mode's,\n"
     "unchanged; one rank, --strategy longstraw)",
     "0", 0, grad_cosine_every), .min = 0, .max = 1000000, .bad = "is not an integer in [0, 1000000]"},
    {.rec = "-an output (the checkpoint the run writes)", ROW(LS_CLI_STRING, "--save", "FILE", "checkpoint at the end (weights, AdamW moments, step, RNG)", NULL, 0,
     save)},
    {.rec = "config.options.save_every", ROW(LS_CLI_INT, "--save-every", "N", "also checkpoint every N steps to --save's file (atomic)", NULL, 0,
     save_every), .min = 1, .max = 1000000, .bad = "is not an integer in [1, 1000000]"},
    {.rec = "config.options.resumed", ROW(LS_CLI_STRING, "--resume", "FILE", "continue from a checkpoint (same config; --steps more steps)", NULL, 0,
     resume)},
    {.rec = "-an output (the metrics the trace's step_metrics events also hold)", ROW(LS_CLI_STRING, "--metrics", "FILE", "per-step metrics, JSONL (the step_metrics event's fields)", NULL, 0,
     metrics)},
    {.rec = "-an output (drawn from --metrics)", ROW(LS_CLI_STRING, "--plot", "FILE.svg",
     "at the end, the metrics drawn: reward (and its retrieval and\n"
     "format parts) and KL per step (needs --metrics)",
     NULL, 0, plot)},
    {.rec = "config.options.loaded", ROW(LS_CLI_STRING, "--load", "FILE",
     "initial weights (docs/model.md §5 names; of a --save checkpoint its\n"
     "weights only: a new run, those weights its reference policy)",
     NULL, 0, load)},
    {.rec = "-an output (the initial weights, whose digest is config.inputs.initial_weights)", ROW(LS_CLI_STRING, "--save-init", "FILE", "all weights at the start of step 1 (safetensors)", NULL, 0,
     save_init)},
    {.rec = "-an output (the step-1 inputs)", ROW(LS_CLI_STRING, "--dump-batch", "FILE", "step 1 inputs (docs/model.md §6 JSON)", NULL, 0, dump_batch)},
    {.rec = "-an output (the step-1 gradients)", ROW(LS_CLI_STRING, "--dump-grads", "FILE", "finalised step-1 gradients of the trainable tensors (safetensors)",
     NULL, 0, dump_grads)},
    {.rec = "config.options.memory_budget", ROW(LS_CLI_BYTES, "--memory-budget", "BYTES", "refuse plans above this (default 90% of MemAvailable)", NULL, 0,
     memory_budget), .min = 1 << 20, .max = SIZE_MAX, .bad = "is not a byte count >= 1 MiB (1073741824, 48GiB, 96GB)"},
    {.rec = "config.options.host_memory", ROW(LS_CLI_BYTES, "--host-memory", "BYTES",
     "--state-tier host: refuse plans whose host tier is above this\n"
     "(default: no limit); 1073741824, 48GiB (2^30), 96GB (10^9)", NULL, 0, host_memory),
     .min = 1 << 20, .max = SIZE_MAX, .bad = "is not a byte count >= 1 MiB (1073741824, 48GiB, 96GB)"},
    {.rec = "config.faults", .bad = "is not a fault this trainer injects", ROW(LS_CLI_PICK, "--fault", "nan-grad", "fault injection: poison a gradient (the step must refuse)", NULL, 0,
     step.fault_nan_grad)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "untracked-alloc",
     "fault injection: hold (P-1) x d_model x n_layers reals outside\n"
     "the memory tracker during the step (the RSS check must see it)",
     NULL, 0, step.fault_untracked_alloc)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "skip-dkv-reduce", "CP: drop the response dK/dV reduction (the original work's bug)",
     NULL, 3, step.cp_faults.skip_dkv_reduce)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "skip-grad-finalize", "CP: skip the sum of the shard-local gradients", NULL, 0,
     step.cp_faults.skip_grad_finalize)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "cp-local-attention", "CP (hybrid): each rank attends only to its own keys", NULL,
     0, step.cp_faults.local_attention)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "cp-local-dsa", "CP (mla): each rank selects its DSA top-k from its own keys only",
     NULL, 0, step.cp_faults.local_dsa)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "cp-stale-start",
     "CP (hybrid, test only): the prompt backward starts its shard from\n"
     "the last capture's received GDN states (a bug this trainer had:\n"
     "with the reference kept, the reference's), not its own state's",
     NULL, 0, step.cp_faults.stale_start)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "ep-drop-dx",
     "EP (mla, test only): the last EP rank returns zero input\n"
     "gradients for its experts' rows (the dumps must differ)",
     NULL, 0, step.cp_faults.ep_drop_dx)},
    {.rec = "config.faults", ROW(LS_CLI_PICK, "--fault", "stage-skip-page",
     "--state-tier host (test only): the staging leaves each layer's\n"
     "last page unstaged (zeros in the device tier's view)",
     NULL, 0, step.fault_stage_skip_page)},
    {.rec = "config.faults", .parse = parse_kill_row, ROW(LS_CLI_PICK, "--fault", "kill-rank=R[@PHASE[:L]]",
     "rank R kills itself (SIGKILL) as PHASE begins (default\n"
     "replay; capture, rollout, score, replay, prompt_bwd, finalize,\n"
     "optimizer), or with :L right after its first layer L layer_end\n"
     "in that phase (the trace is flushed first): every\n"
     "other rank must end, not hang",
     NULL, 2, fault_kill_rank)},
    {.kind = LS_CLI_TEXT,
     .help = "                          (--fault may repeat; faults are recorded in the receipts' config)\n"
             "Context parallelism: mpirun -np N longstraw-train ... shards the prompt over N ranks\n"
             "(docs/design.md §4); each rank writes RUN/rank-NNNN/, rank 0 the manifest and the outputs.\n"},
    {.rec = "-progress on stderr only", .like = "--quiet", .name = "--quiet", .off = offsetof(ls_train_args, quiet)},
    {.rec = "-prints the trainer's vocabulary (families, layer kinds, backends, group kinds, faults, option values); "
            "no run",
     .like = "--list-names", .name = "--list-names", .off = offsetof(ls_train_args, list_names)},
    {.rec = "-prints this text; no run", .like = "--help", .name = "--help", .alias = "-h",
     .off = offsetof(ls_train_args, help)},
    {.rec = "-prints the registry; no run", ROW(LS_CLI_HELP, "--families", NULL,
     "print the registry of model families as JSON (their keys,\n"
     "layer kinds, CP faults and data files); no run", NULL, 0, families)},
    {.kind = LS_CLI_TEXT, .help = "Exit: 0 success, 1 the step failed (error event written), 2 bad usage or input.\n"},
};
#define N_OPTS (sizeof OPTS / sizeof OPTS[0])
#undef ROW

/* ---- --help ------------------------------------------------------------------ */

#define HELP_COL 26 /* where the help text starts, after "  NAME ARG" and at least one space */

ls_cli_table ls_train_options(void) { return (ls_cli_table){OPTS, N_OPTS}; }

size_t ls_train_option_count(void) {
    size_t n = 0;
    for (const opt *o = OPTS; o < OPTS + N_OPTS; o++) n += o->kind != LS_CLI_TEXT;
    return n;
}

const char *ls_train_option_at(size_t i, const char **arg, const char **receipt, const char **why) {
    for (const opt *o = OPTS; o < OPTS + N_OPTS; o++) {
        if (o->kind == LS_CLI_TEXT || i-- > 0) continue;
        if (arg) *arg = o->kind == LS_CLI_PICK ? o->arg : NULL;
        if (receipt) *receipt = o->rec[0] == '-' ? NULL : o->rec;
        if (why) *why = o->rec[0] == '-' ? o->rec + 1 : NULL;
        return o->name;
    }
    return NULL;
}

const char *ls_train_option_choices(size_t i) {
    for (const opt *o = OPTS; o < OPTS + N_OPTS; o++) {
        if (o->kind == LS_CLI_TEXT || i-- > 0) continue;
        return o->kind == LS_CLI_CHOICE ? o->arg : NULL;
    }
    return NULL;
}

/* The fault names, each at most this long ("kill-rank" of "kill-rank=R..."). */
#define FAULT_NAME_MAX 32
static char FAULT_NAMES[N_OPTS][FAULT_NAME_MAX];

size_t ls_train_fault_count(void) {
    size_t n = 0;
    for (const opt *o = OPTS; o < OPTS + N_OPTS; o++) n += o->kind == LS_CLI_PICK;
    return n;
}

const char *ls_train_fault_at(size_t i, const ls_train_args *a, int *on) {
    for (const opt *o = OPTS; o < OPTS + N_OPTS; o++) {
        if (o->kind != LS_CLI_PICK || i-- > 0) continue;
        /* the kill-rank row's value is NAME=...: the name is what precedes the '=' (its int field
           holds R + 1, 0 when not asked); the names are written once, the same every time */
        char *name = FAULT_NAMES[o - OPTS];
        size_t n = strcspn(o->arg, "=");
        if (!name[0]) snprintf(name, FAULT_NAME_MAX, "%.*s", (int)n, o->arg);
        if (a && on) *on = *(const int *)(const void *)((const char *)a + o->off) != 0;
        return name;
    }
    return NULL;
}

void ls_train_usage(FILE *f) { ls_cli_usage(f, ls_train_options(), NULL, 0, HELP_COL); }

/* ---- parsing ----------------------------------------------------------------- */

#define BAD(...)                                  \
    do {                                          \
        snprintf(err, err_len, __VA_ARGS__);      \
        return 2;                                 \
    } while (0)

/* R[@PHASE[:L]] of --fault kill-rank= into a. */
static int parse_kill(ls_train_args *a, const char *spec, char *err, size_t err_len) {
    char rank[32], point[64] = "replay", layer[32] = "";
    const char *at = strchr(spec, '@');
    size_t rl = at ? (size_t)(at - spec) : strlen(spec);
    if (rl == 0 || rl >= sizeof rank) BAD("--fault kill-rank=R: '%s' is not a rank", spec);
    memcpy(rank, spec, rl);
    rank[rl] = 0;
    size_t r;
    if (ls_cli_parse_size(rank, 0, 1 << 20, &r) != 0) BAD("--fault kill-rank=R: '%s' is not a rank", rank);
    if (at) {
        const char *colon = strchr(at + 1, ':');
        size_t pl = colon ? (size_t)(colon - at - 1) : strlen(at + 1);
        if (pl == 0 || pl >= sizeof point) BAD("--fault kill-rank=R@POINT: '%s' is not a point", at + 1);
        memcpy(point, at + 1, pl);
        point[pl] = 0;
        if (colon) {
            if (strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof layer)
                BAD("--fault kill-rank=R@PHASE:L: '%s' is not a layer", colon + 1);
            snprintf(layer, sizeof layer, "%s", colon + 1);
        }
    }
    int ph = -1;
    for (int i = 0; i < LS_PHASE_COUNT; i++)
        if (!strcmp(point, ls_trace_phase_name((ls_trace_phase)i))) ph = i;
    if (ph < 0)
        BAD("--fault kill-rank=R@POINT: '%s' is not a phase (capture, rollout, score, replay, prompt_bwd, finalize, "
            "optimizer)", point);
    a->fault_kill_at_layer = layer[0] != 0;
    a->fault_kill_layer = 0;
    if (layer[0]) {
        char *end = NULL;
        long L = strtol(layer, &end, 10);
        if (end == layer || *end || L < -1 || L > 1 << 20)
            BAD("--fault kill-rank=R@PHASE:L: '%s' is not a layer (-1 the embedding .. n_layers the head)", layer);
        a->fault_kill_layer = (int)L;
    }
    a->fault_kill_phase = ph;
    a->fault_kill_rank = (int)r + 1;
    return 0;
}

static int parse_kill_row(void *base, const ls_cli_opt *o, const char *spec, char *err, size_t err_len) {
    (void)o;
    return parse_kill((ls_train_args *)base, spec, err, err_len);
}

/* The k-th default of a --help default list ("4, 8"; "1; with --rollouts
 * ..." ends at the ';') into buf, or 0 when the list has no k-th. */
static int default_token(const char *dflt, size_t k, char *buf, size_t cap) {
    const char *s = dflt;
    for (; k > 0; k--) {
        s = strchr(s, ',');
        if (!s) return 0;
        s += strspn(s + 1, " ") + 1;
    }
    size_t n = strcspn(s, ",;");
    if (n == 0 || n >= cap) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    return 1;
}

int ls_train_option_default_holds(const ls_train_args *a, size_t i, char *why, size_t why_len) {
    const size_t asked = i;
    const opt *row = NULL, *shown = NULL;
    size_t k = 0; /* this option's place in the shown row's default list */
    for (const opt *o = OPTS; o < OPTS + N_OPTS; o++) {
        if (o->kind == LS_CLI_TEXT) continue;
        if (o->help) {
            shown = o;
            k = 0;
        } else {
            k++;
        }
        if (i-- == 0) {
            row = o;
            break;
        }
    }
    if (!row) {
        snprintf(why, why_len, "no option %zu", asked);
        return 0;
    }
    char tok[64];
    if (!shown->dflt || !default_token(shown->dflt, k, tok, sizeof tok)) return 1; /* none shown */
    const void *p = (const char *)a + row->off;
    double v = 0;
    switch (row->kind) {
    case LS_CLI_CHOICE: {
        int idx;
        memcpy(&idx, p, sizeof idx);
        if (ls_cli_choice_index(row->arg, tok) == idx) return 1;
        snprintf(why, why_len, "%s: --help shows [%s], the parsed default is choice %d of %s", row->name, tok, idx,
                 row->arg);
        return 0;
    }
    case LS_CLI_FLAG:
    case LS_CLI_INT:
    case LS_CLI_SIZE:
    case LS_CLI_U64:
    case LS_CLI_REAL:
        v = row->kind == LS_CLI_FLAG || row->kind == LS_CLI_INT ? (double)*(const int *)p
            : row->kind == LS_CLI_SIZE                       ? (double)*(const size_t *)p
            : row->kind == LS_CLI_U64                        ? (double)*(const uint64_t *)p
                                                          : *(const double *)p;
        break;
    default: return 1; /* strings, faults, help: no default value */
    }
    if (!strcmp(tok, "off")) { /* off: a flag not set, a count below the range the option takes */
        if (row->kind == LS_CLI_FLAG ? v == 0 : v < (double)row->min) return 1;
    } else {
        char *end = NULL;
        double d = strtod(tok, &end);
        if (end != tok && *end == 0 && d == v) return 1;
    }
    snprintf(why, why_len, "%s: --help shows [%s], the parsed default is %.17g", row->name, tok, v);
    return 0;
}

/* The option was on the command line. */
static int given_opt(const unsigned char *given, const char *name) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (OPTS[i].name && !strcmp(OPTS[i].name, name)) return given[i];
    return 0;
}

int ls_train_args_parse(ls_train_args *a, int argc, char **argv, char *err, size_t err_len) {
    memset(a, 0, sizeof *a);
    ls_objective_defaults(&a->obj);
    ls_step_options_defaults(&a->step);
    a->P = 4096;
    a->steps = 1;
    a->ep = 1;
    a->prompts_per_step = 1;
    unsigned char given[N_OPTS] = {0};
    const ls_cli_parser p = {.table = ls_train_options(), .given = given};
    if (ls_cli_parse(&p, a, argc, argv, 1, err, err_len) != 0) return 2;
    if (a->help || a->list_names || a->families) return 0;
    a->have_steps = given_opt(given, "--steps");
    a->have_seed = given_opt(given, "--seed");
    int have_P = given_opt(given, "--prompt-len");
    if (!a->config_path) BAD("--config: required");
    if (!a->out) BAD("--out: required");
    if (a->rollouts && have_P) BAD("--prompt-len: not allowed with --rollouts (the file holds the prompt)");
    if (!a->rollouts && a->P < 64) BAD("--prompt-len: the synthetic task needs at least 64 tokens");
    if (a->recall_records && a->task != LS_TASK_RECALL) BAD("--recall-records: only with --task recall");
    if (a->recall_records && a->recall_records < (a->step.R < 8 ? a->step.R : 8))
        BAD("--recall-records: %zu is fewer than the queries (min(--response-len, 8) = %zu)", a->recall_records,
            a->step.R < 8 ? a->step.R : 8);
    if (a->task == LS_TASK_RECALL && a->rollouts) BAD("--task: not with --rollouts (the file holds the groups)");
    if (a->save_every && !a->save) BAD("--save-every: needs --save FILE (the checkpoint it rewrites)");
    if (a->plot && !a->metrics) BAD("--plot: needs --metrics FILE (the figures it draws)");
    if (a->load && a->resume) BAD("--load: not with --resume (the checkpoint holds the weights)");
    int sft = a->step.objective == LS_OBJECTIVE_SFT || a->sft_steps > 0;
    if (sft && a->rollouts) BAD("--objective sft / --sft-steps: need the built-in task's answers, not --rollouts");
    if (a->sft_steps && a->step.objective == LS_OBJECTIVE_SFT)
        BAD("--sft-steps: only with --objective grpo (the steps after the warm start)");
    if (a->prefix_frozen > 1) {
        if (a->rollouts) BAD("--prefix-frozen: rolls out from the built-in task's prompt; not with --rollouts");
        if (a->step.strategy != LS_STRATEGY_LONGSTRAW) BAD("--prefix-frozen: needs --strategy longstraw");
        if (a->obj.grad_mode == LS_GRAD_FULL)
            BAD("--prefix-frozen: needs --grad-mode detached (a stale state has no exact prompt gradient)");
    }
    if (a->grad_cosine_every > 0 && a->step.strategy != LS_STRATEGY_LONGSTRAW)
        BAD("--grad-cosine-every: needs --strategy longstraw (the naive strategy has no prompt backward to set "
            "apart)");
    if (a->grad_cosine_every > 0 && a->prefix_frozen > 1)
        BAD("--grad-cosine-every: not with --prefix-frozen (a stale prompt state has no full gradient)");
    if (a->prompts_per_step > 1 && a->prefix_frozen > 1)
        BAD("--prompts-per-step: not with --prefix-frozen (a frozen prefix is one prompt reused across steps)");
    char cerr[512];
    ls_status st = ls_config_load_digest(&a->cfg, a->config_path, a->config_sha256, cerr, sizeof cerr);
    if (st != LS_OK) BAD("--config: %s", cerr);
    int routed = a->cfg.family->routed_experts ? a->cfg.family->routed_experts(&a->cfg) : 0;
    if (a->obj.lora_experts && routed < 1)
        BAD("--lora-experts: --config %s: family '%s' has no routed experts", a->config_path,
            ls_family_name(a->cfg.family));
    if (a->ep > 1 && routed < 1)
        BAD("--ep: --config %s: family '%s' has no routed experts (expert parallelism needs them)", a->config_path,
            ls_family_name(a->cfg.family));
    if (a->ep > 1 && routed % a->ep != 0)
        BAD("--ep %d: does not divide the %d routed experts of --config %s", a->ep, routed, a->config_path);
    if (a->step.cp_faults.ep_drop_dx && a->ep < 2) BAD("--fault ep-drop-dx: needs --ep N with N >= 2");
    if (a->step.fault_stage_skip_page && !a->step.state_tier) BAD("--fault stage-skip-page: needs --state-tier host");
    if (a->replay_checkpoint == 3 && a->step.strategy == LS_STRATEGY_NAIVE)
        BAD("--replay-checkpoint chunk: needs --strategy longstraw (the naive strategy replays each member's whole "
            "sequence, the reference the chunks are held to)");
    if (a->obj.lora_experts && a->obj.train_mode != LS_TRAIN_LORA)
        BAD("--lora-experts: needs --train-mode lora (full training trains the experts' weights)");
    if (a->fault_kill_rank && a->fault_kill_at_layer && a->fault_kill_layer > (int)a->cfg.n_layers)
        BAD("--fault kill-rank=R@PHASE:L: layer %d is beyond the model's %d layers (-1 the embedding .. %d the head)",
            a->fault_kill_layer, (int)a->cfg.n_layers, (int)a->cfg.n_layers);
    return 0;
}
