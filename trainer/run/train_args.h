/* train_args.h - the longstraw-train command line (docs/design.md §7).  Parsing
 * validates every argument and names the bad one; it never exits.
 * dtype-independent. */
#ifndef LS_TRAINER_TRAIN_ARGS_H
#define LS_TRAINER_TRAIN_ARGS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "common/cli_opts.h"
#include "trainer/model/config.h"
#include "trainer/step/step.h"

typedef struct {
    const char *config_path;
    char config_sha256[65]; /* of the --config bytes parsed (the receipts' inputs.config) */
    ls_model_config cfg;
    ls_objective obj;
    ls_step_options step;
    size_t P;               /* prompt length of the synthetic task (unused with --rollouts) */
    int steps;
    int f64;
    const char *out;
    const char *save_init, *dump_batch, *dump_grads, *rollouts, *load;
    const char *save, *resume, *metrics, *plot;
    int save_every;         /* checkpoint every N steps (0: never) */
    size_t prompts_per_step; /* B: groups (prompts) per optimizer step (>= 1) */
    int prefix_frozen;      /* K: capture once per K steps (0 or 1: every step exact) */
    int sft_steps;          /* the first N steps use the sft objective (a warm start) */
    int probe_every;        /* K: the gradient probe on run-local steps i with i % K == 0 (0: off; trainer/step/probe.h) */
    int probe_groups;       /* --probe-groups: ls_probe_grouping (all, layer) */
    int grad_cosine_every;  /* N: the detached and full gradients compared on run-local steps i with i % N == 0
                               (0: off; trainer/step/grad_cosine.h, ls_run_grad_cosine_due) */
    int have_steps, have_seed;
    size_t memory_budget;   /* bytes; 0 = 90% of MemAvailable */
    size_t host_memory;     /* --host-memory: the host tier's budget in bytes (--state-tier host); 0 = none */
    int keep_reference;     /* --keep-reference: 0 auto (the plan decides), 1 on, 2 off */
    int ep;                 /* --ep N: expert parallelism, world = cp x ep (mla; 0 or 1: none) */
    int replay_checkpoint;  /* --replay-checkpoint: 0 auto (the plan decides), 1 none (taped), 2 layer, 3 chunk */
    int task;               /* --task: the built-in task (ls_task_kind) */
    size_t recall_records;  /* --recall-records: records per recall prompt (0: the task's default) */
    int quiet;
    int help;
    int list_names;         /* --list-names: print the trainer's vocabulary (train_names.h) and stop */
    int families;           /* --families: print the registry of model families (JSON) and exit */
    /* --fault kill-rank=R@POINT: fault_kill_rank = R + 1 (0: none), the phase
     * (LS_PHASE_*) and, when kill_at_layer, the layer whose first layer_end in
     * that phase is the last thing the rank writes; otherwise it dies as the
     * phase begins.  Plain kill-rank=R is @replay. */
    int fault_kill_rank, fault_kill_phase, fault_kill_layer, fault_kill_at_layer;
    struct ls_comm *comm;   /* the run's communicator (set by main, not parsed; NULL: one rank) */
} ls_train_args;

/* 0 on success (a->help: --help was given, nothing after it read); 2 with a
 * message naming the argument in err.  One table of options (train_args.c)
 * drives this and ls_train_usage. */
int ls_train_args_parse(ls_train_args *a, int argc, char **argv, char *err, size_t err_len);
/* The option table (common/cli_opts.h; static): longstraw-plan's rows for
 * the options it shares with the trainer are .like these, one definition
 * with one range and one help text. */
ls_cli_table ls_train_options(void);
/* --grad-cosine-every N: whether run-local step i (0-based: the first step
 * is i = 0, always measured) compares its gradients: N >= 1 and i % N == 0. */
static inline int ls_run_grad_cosine_due(int N, int64_t i) { return N > 0 && i >= 0 && i % N == 0; }
/* The --help text. */
void ls_train_usage(FILE *f);
/* The options of the table that drives parsing and --help, in --help order:
 * i < ls_train_option_count().  Returns the name ("--seed"; NULL past the
 * end); *arg the --fault value of a fault row (else NULL); *receipt where
 * every rank's receipt records the value, as a path under its predicate
 * ("config.options.seed"), or NULL with *why saying why it is not recorded
 * (an output of the run).  Static strings; any out-pointer may be NULL. */
size_t ls_train_option_count(void);
const char *ls_train_option_at(size_t i, const char **arg, const char **receipt, const char **why);
/* The values option i takes when it takes one of a fixed list
 * ("detached|full"), else NULL (static). */
const char *ls_train_option_choices(size_t i);
/* The faults the trainer injects (the table's --fault rows, in --help
 * order): i < ls_train_fault_count().  Returns the fault's name
 * ("kill-rank" without its "=R..."; static, NULL past the end) and, when a
 * and on are not NULL, whether a asks for it.  The receipts' config.faults
 * and longstraw-train --list-names read them here. */
size_t ls_train_fault_count(void);
const char *ls_train_fault_at(size_t i, const ls_train_args *a, int *on);
/* 1 when option i of a holds the default --help shows for it (or --help
 * shows none); else 0 with why naming the option, the shown and the held
 * value.  a: the arguments as parsed without that option. */
int ls_train_option_default_holds(const ls_train_args *a, size_t i, char *why, size_t why_len);
#endif
