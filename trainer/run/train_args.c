/* train_args.c - longstraw-train argument parsing and usage text. */
#include "trainer/run/train_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "receipts/trace_event.h"

void ls_train_usage(FILE *f) {
    fputs(
        "usage: longstraw-train --config FILE --out RUN [options]\n"
        "\n"
        "One or more GRPO steps of the hybrid family (on one rank or context-parallel\n"
        "under mpirun) or the mla family (one rank): capture the prompt state without\n"
        "autograd, roll out G responses, score them, replay each member under autograd,\n"
        "(full mode) back-propagate through the prompt, finalize, AdamW.  Writes\n"
        "RUN/rank-NNNN/events.jsonl.zst and RUN/rank-NNNN/receipt.json per rank,\n"
        "RUN/manifest.json.\n"
        "\n"
        "  --config FILE           model config (configs/hybrid-tiny.json, ...)\n"
        "  --out RUN               run directory (must not exist or be empty)\n"
        "  --prompt-len P          prompt tokens of the synthetic key/value task (>= 64) [4096]\n"
        "  --response-len R        response tokens per member [8]\n"
        "  --group G               group size [4]\n"
        "  --steps S               optimizer steps [1; with --rollouts FILE the number of its lines]\n"
        "  --seed N                seed of weights, task and sampling [1]\n"
        "  --dtype f32|f64         compute dtype [f32]\n"
        "  --grad-mode detached|full   detached prompt state, or the full gradient [detached]\n"
        "  --strategy longstraw|naive  LongStraw transaction, or one full sequence per member [longstraw]\n"
        "  --train-mode lora|full  trainable set (docs/model.md §3) [lora]\n"
        "  --lora-init zero|random lora_B initialisation [zero]\n"
        "  --lora-r R --lora-alpha A   adapter rank and alpha [4, 8]\n"
        "  --lora-experts          mla: adapters on the routed experts too (docs/model.md §3) [off]\n"
        "  --lr X                  AdamW learning rate [1e-3]\n"
        "  --temperature X --top-p X   sampling (temperature also scales scored logits) [1, 0.95]\n"
        "  --epsilon X --beta X    clip range and KL weight [0.2, 0.04]; beta 0 skips the\n"
        "                          reference policy (no reference capture, no KL)\n"
        "  --page-size N           KV page length in tokens [64]\n"
        "  --capture-chunk N       prompt tokens per capture segment; 0 = all at once [2048]\n"
        "  --rollouts FILE|-       JSONL, one step's group per line: prompt, responses, rewards,\n"
        "                          optional old_logprobs and ref_logprobs; - reads standard input\n"
        "  --objective grpo|sft    GRPO, or supervised cross-entropy on the task's answers [grpo]\n"
        "  --sft-steps N           the first N steps use the sft objective (warm start) [0]\n"
        "  --prefix-frozen K       capture once per K steps and reuse the stale state (marked\n"
        "                          prefix_frozen everywhere; never an exact step) [off]\n"
        "  --save FILE             checkpoint at the end (weights, AdamW moments, step, RNG)\n"
        "  --save-every N          also checkpoint every N steps to --save's file (atomic)\n"
        "  --resume FILE           continue from a checkpoint (same config; --steps more steps)\n"
        "  --metrics FILE          per-step metrics, JSONL (the step_metrics event's fields)\n"
        "  --plot FILE.svg         at the end, the metrics drawn: reward (and its retrieval and\n"
        "                          format parts) and KL per step (needs --metrics)\n"
        "  --load FILE             initial weights (docs/model.md §5 names; of a --save checkpoint its\n"
        "                          weights only: a new run, those weights its reference policy)\n"
        "  --save-init FILE        all weights at the start of step 1 (safetensors)\n"
        "  --dump-batch FILE       step 1 inputs (docs/model.md §6 JSON)\n"
        "  --dump-grads FILE       finalised step-1 gradients of the trainable tensors (safetensors)\n"
        "  --memory-budget BYTES   refuse plans above this (default 90% of MemAvailable)\n"
        "  --fault nan-grad        fault injection: poison a gradient (the step must refuse)\n"
        "  --fault untracked-alloc fault injection: hold (P-1) x d_model x n_layers reals outside\n"
        "                          the memory tracker during the step (the RSS check must see it)\n"
        "  --fault skip-dkv-reduce   CP: drop the response dK/dV reduction (the original work's bug)\n"
        "  --fault skip-grad-finalize CP: skip the sum of the shard-local gradients\n"
        "  --fault cp-local-attention CP (hybrid): each rank attends only to its own keys\n"
        "  --fault cp-local-dsa    CP (mla): each rank selects its DSA top-k from its own keys only\n"
        "  --fault kill-rank=R[@PHASE[:L]]  rank R kills itself (SIGKILL) as PHASE begins (default\n"
        "                          replay; capture, rollout, score, replay, prompt_bwd, finalize,\n"
        "                          optimizer), or with :L right after its first layer L layer_end\n"
        "                          in that phase (the trace is flushed first): every\n"
        "                          other rank must end, not hang\n"
        "                          (--fault may repeat; faults are recorded in the receipts' config)\n"
        "Context parallelism: mpirun -np N longstraw-train ... shards the prompt over N ranks\n"
        "(docs/design.md §4); each rank writes RUN/rank-NNNN/, rank 0 the manifest and the outputs.\n"
        "  --quiet                 no progress on stderr\n"
        "  --help                  this text\n"
        "Exit: 0 success, 1 the step failed (error event written), 2 bad usage or input.\n",
        f);
}

/* Numbers on the command line are plain decimal: digits only for counts
 * (no sign, no spaces, no hex, no exponent), and for reals a digit or a
 * '.' and a digit first, no hex, no inf/nan, nothing after the number.
 * strtoull/strtod alone would skip leading spaces and read " -1" as 2^64-1,
 * "+5" as 5 and "0x1p3" as 8. */
static int parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
    if (!isdigit((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi || v > SIZE_MAX) return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_real(const char *s, double lo, double hi, double *out) {
    int lead = isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]));
    if (!lead || strpbrk(s, "xXpP") != NULL) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

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
    if (parse_size(rank, 0, 1 << 20, &r) != 0) BAD("--fault kill-rank=R: '%s' is not a rank", rank);
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

int ls_train_args_parse(ls_train_args *a, int argc, char **argv, char *err, size_t err_len) {
    memset(a, 0, sizeof *a);
    ls_objective_defaults(&a->obj);
    ls_step_options_defaults(&a->step);
    a->P = 4096;
    a->steps = 1;
    size_t v;
    int have_P = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            a->help = 1;
            return 0;
        }
        if (!strcmp(k, "--quiet")) {
            a->quiet = 1;
            continue;
        }
        if (!strcmp(k, "--lora-experts")) {
            a->obj.lora_experts = 1;
            continue;
        }
        if (strncmp(k, "--", 2) != 0) BAD("unexpected argument '%s' (options start with --)", k);
        if (i + 1 >= argc) BAD("%s: missing value", k);
        const char *val = argv[++i];
        if (!strcmp(k, "--config")) a->config_path = val;
        else if (!strcmp(k, "--out")) a->out = val;
        else if (!strcmp(k, "--prompt-len")) {
            if (parse_size(val, 2, (size_t)1 << 31, &a->P)) BAD("--prompt-len: '%s' is not an integer in [2, 2^31]", val);
            have_P = 1;
        } else if (!strcmp(k, "--response-len")) {
            if (parse_size(val, 1, 1 << 16, &a->step.R)) BAD("--response-len: '%s' is not an integer in [1, 65536]", val);
        } else if (!strcmp(k, "--group")) {
            if (parse_size(val, 1, 4096, &a->step.G)) BAD("--group: '%s' is not an integer in [1, 4096]", val);
        } else if (!strcmp(k, "--steps")) {
            if (parse_size(val, 1, 1000000, &v)) BAD("--steps: '%s' is not an integer in [1, 1000000]", val);
            a->steps = (int)v;
            a->have_steps = 1;
        } else if (!strcmp(k, "--seed")) {
            if (parse_size(val, 0, SIZE_MAX, &v)) BAD("--seed: '%s' is not a decimal integer in [0, 2^64)", val);
            a->step.seed = v;
            a->have_seed = 1;
        } else if (!strcmp(k, "--save-every")) {
            if (parse_size(val, 1, 1000000, &v)) BAD("--save-every: '%s' is not an integer in [1, 1000000]", val);
            a->save_every = (int)v;
        } else if (!strcmp(k, "--prefix-frozen")) {
            if (parse_size(val, 1, 1000000, &v)) BAD("--prefix-frozen: '%s' is not an integer in [1, 1000000]", val);
            a->prefix_frozen = (int)v;
        } else if (!strcmp(k, "--sft-steps")) {
            if (parse_size(val, 0, 1000000, &v)) BAD("--sft-steps: '%s' is not an integer in [0, 1000000]", val);
            a->sft_steps = (int)v;
        } else if (!strcmp(k, "--dtype")) {
            if (!strcmp(val, "f32")) a->f64 = 0;
            else if (!strcmp(val, "f64")) a->f64 = 1;
            else BAD("--dtype: '%s' is not f32 or f64", val);
        } else if (!strcmp(k, "--grad-mode")) {
            if (!strcmp(val, "detached")) a->obj.grad_mode = LS_GRAD_DETACHED;
            else if (!strcmp(val, "full")) a->obj.grad_mode = LS_GRAD_FULL;
            else BAD("--grad-mode: '%s' is not detached or full", val);
        } else if (!strcmp(k, "--strategy")) {
            if (!strcmp(val, "longstraw")) a->step.strategy = LS_STRATEGY_LONGSTRAW;
            else if (!strcmp(val, "naive")) a->step.strategy = LS_STRATEGY_NAIVE;
            else BAD("--strategy: '%s' is not longstraw or naive", val);
        } else if (!strcmp(k, "--objective")) {
            if (!strcmp(val, "grpo")) a->step.objective = LS_OBJECTIVE_GRPO;
            else if (!strcmp(val, "sft")) a->step.objective = LS_OBJECTIVE_SFT;
            else BAD("--objective: '%s' is not grpo or sft", val);
        } else if (!strcmp(k, "--train-mode")) {
            if (!strcmp(val, "lora")) a->obj.train_mode = LS_TRAIN_LORA;
            else if (!strcmp(val, "full")) a->obj.train_mode = LS_TRAIN_FULL;
            else BAD("--train-mode: '%s' is not lora or full", val);
        } else if (!strcmp(k, "--lora-init")) {
            if (!strcmp(val, "zero")) a->obj.lora_init_random = 0;
            else if (!strcmp(val, "random")) a->obj.lora_init_random = 1;
            else BAD("--lora-init: '%s' is not zero or random", val);
        } else if (!strcmp(k, "--lora-r")) {
            if (parse_size(val, 1, 1024, &v)) BAD("--lora-r: '%s' is not an integer in [1, 1024]", val);
            a->obj.lora_r = (int)v;
        } else if (!strcmp(k, "--lora-alpha")) {
            if (parse_real(val, 1e-6, 1e6, &a->obj.lora_alpha)) BAD("--lora-alpha: '%s' is not a positive number", val);
        } else if (!strcmp(k, "--lr")) {
            if (parse_real(val, 0, 10, &a->step.lr)) BAD("--lr: '%s' is not a number in [0, 10]", val);
        } else if (!strcmp(k, "--temperature")) {
            if (parse_real(val, 1e-3, 1e3, &a->obj.temperature)) BAD("--temperature: '%s' is not in [1e-3, 1e3]", val);
        } else if (!strcmp(k, "--top-p")) {
            if (parse_real(val, 1e-6, 1, &a->step.top_p)) BAD("--top-p: '%s' is not in (0, 1]", val);
        } else if (!strcmp(k, "--epsilon")) {
            if (parse_real(val, 0, 1, &a->obj.epsilon)) BAD("--epsilon: '%s' is not in [0, 1]", val);
        } else if (!strcmp(k, "--beta")) {
            if (parse_real(val, 0, 100, &a->obj.beta)) BAD("--beta: '%s' is not in [0, 100]", val);
        } else if (!strcmp(k, "--page-size")) {
            if (parse_size(val, 1, 1 << 20, &a->step.page_size)) BAD("--page-size: '%s' is not an integer in [1, 2^20]", val);
        } else if (!strcmp(k, "--capture-chunk")) {
            if (parse_size(val, 0, (size_t)1 << 31, &a->step.capture_chunk))
                BAD("--capture-chunk: '%s' is not a token count (0: the whole prompt at once)", val);
        } else if (!strcmp(k, "--memory-budget")) {
            if (parse_size(val, 1 << 20, SIZE_MAX, &a->memory_budget)) BAD("--memory-budget: '%s' is not a decimal byte count >= 1 MiB", val);
        } else if (!strcmp(k, "--rollouts")) a->rollouts = val;
        else if (!strcmp(k, "--save-init")) a->save_init = val;
        else if (!strcmp(k, "--load")) a->load = val;
        else if (!strcmp(k, "--save")) a->save = val;
        else if (!strcmp(k, "--resume")) a->resume = val;
        else if (!strcmp(k, "--metrics")) a->metrics = val;
        else if (!strcmp(k, "--plot")) a->plot = val;
        else if (!strcmp(k, "--dump-batch")) a->dump_batch = val;
        else if (!strcmp(k, "--dump-grads")) a->dump_grads = val;
        else if (!strcmp(k, "--fault")) {
            if (!strcmp(val, "nan-grad")) a->step.fault_nan_grad = 1;
            else if (!strcmp(val, "untracked-alloc")) a->step.fault_untracked_alloc = 1;
            else if (!strcmp(val, "skip-dkv-reduce")) a->step.cp_faults.skip_dkv_reduce = 1;
            else if (!strcmp(val, "skip-grad-finalize")) a->step.cp_faults.skip_grad_finalize = 1;
            else if (!strcmp(val, "cp-local-attention")) a->step.cp_faults.local_attention = 1;
            else if (!strcmp(val, "cp-local-dsa")) a->step.cp_faults.local_dsa = 1;
            else if (!strncmp(val, "kill-rank=", 10)) {
                if (parse_kill(a, val + 10, err, err_len) != 0) return 2;
            }
            else BAD("--fault: '%s' is not a fault this trainer injects (nan-grad, untracked-alloc, skip-dkv-reduce, "
                     "skip-grad-finalize, cp-local-attention, cp-local-dsa, kill-rank=R[@PHASE[:L]])", val);
        } else BAD("unknown option '%s' (see --help)", k);
    }
    if (!a->config_path) BAD("--config: required");
    if (!a->out) BAD("--out: required");
    if (a->rollouts && have_P) BAD("--prompt-len: not allowed with --rollouts (the file holds the prompt)");
    if (!a->rollouts && a->P < 64) BAD("--prompt-len: the synthetic task needs at least 64 tokens");
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
    char cerr[512];
    ls_status st = ls_config_load_digest(&a->cfg, a->config_path, a->config_sha256, cerr, sizeof cerr);
    if (st != LS_OK) BAD("--config: %s", cerr);
    if (a->obj.lora_experts && a->cfg.family != LS_FAMILY_MLA)
        BAD("--lora-experts: --config %s: family '%s' has no routed experts", a->config_path,
            ls_family_name(a->cfg.family));
    if (a->obj.lora_experts && a->obj.train_mode != LS_TRAIN_LORA)
        BAD("--lora-experts: needs --train-mode lora (full training trains the experts' weights)");
    if (a->fault_kill_rank && a->fault_kill_at_layer && a->fault_kill_layer > (int)a->cfg.n_layers)
        BAD("--fault kill-rank=R@PHASE:L: layer %d is beyond the model's %d layers (-1 the embedding .. %d the head)",
            a->fault_kill_layer, (int)a->cfg.n_layers, (int)a->cfg.n_layers);
    return 0;
}
