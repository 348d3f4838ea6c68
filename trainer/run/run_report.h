/* run_report.h - what a longstraw-train run leaves when it ends: the
 * per-step memory peaks folded over its steps, the rank receipt and the
 * manifest (byte-exact figures), and the human summary on stdout (MiB, s).
 * dtype-independent. */
#ifndef LS_TRAINER_RUN_REPORT_H
#define LS_TRAINER_RUN_REPORT_H
#include <stdint.h>
#include "trainer/base/mem_tracker.h"
#include "trainer/run/run_obs.h"
#include "trainer/run/train_args.h"

/* Per-step memory peaks: each figure's largest per-step peak so far.  A
 * step's window runs from the peak reset before its capture to the reset
 * before the next step (optimizer, digests and dumps included). */
typedef struct {
    size_t cat[LS_MEM_COUNT], total;
    int64_t total_at; /* step with the largest total; -1 before any */
    uint64_t steps;   /* windows folded in */
} ls_run_peaks;

/* Fold the tracker's window peaks (those of step `step`) into *sp. */
void ls_run_peaks_fold(ls_run_peaks *sp, int64_t step);

/* The inputs a run used, by digest: the config's "inputs" (provenance).
 * Digests are lowercase hex SHA-256; an empty string is an input the run
 * did not use.  Every rank records its own, and they agree: each rank reads
 * every input itself (train_run compares the open-time ones across ranks). */
typedef struct {
    char config[65];          /* --config: the bytes parsed */
    char load[65];            /* --load: the file's bytes */
    char resume[65];          /* --resume: the checkpoint file's bytes */
    char initial_weights[65]; /* the weights at the start of the first step: the sha256 of the file
                                 --save-init writes (ls_params_sha256, LS_PARAMS_WEIGHTS) */
    int rollouts;             /* the run read --rollouts */
    char rollouts_sha256[65]; /* of the bytes it consumed, as it read them (ls_rollouts_digest) */
    uint64_t rollouts_bytes;
    /* the run's path (the config's "paths", docs/evidence.md "The run's path"): the decisions its steps
       took, or-ed over the steps: LS_STEP_PATH_* of each step's result, and the run's own LS_RUN_PATH_* */
    unsigned step_paths, run_paths;
} ls_run_inputs;

/* The run-level decisions that select code: prompt groups a step (one, several), the prompt state (fresh, or
 * a frozen prefix's), the start (fresh, or resumed from a checkpoint), the CP shards of the captured positions
 * (one rank, even, uneven) and whether a shard boundary cuts the page or capture-chunk grid (at one rank
 * neither is cut).  ls_run_path_shards adds the shard bits of one step's prompt. */
enum {
    LS_RUN_PATH_GROUPS_ONE = 1u << 0, LS_RUN_PATH_GROUPS_SEVERAL = 1u << 1, LS_RUN_PATH_PREFIX_FRESH = 1u << 2,
    LS_RUN_PATH_PREFIX_FROZEN = 1u << 3, LS_RUN_PATH_START_FRESH = 1u << 4, LS_RUN_PATH_START_RESUMED = 1u << 5,
    LS_RUN_PATH_SHARDS_ONE = 1u << 6, LS_RUN_PATH_SHARDS_EVEN = 1u << 7, LS_RUN_PATH_SHARDS_UNEVEN = 1u << 8,
    LS_RUN_PATH_PAGES_ALIGNED = 1u << 9, LS_RUN_PATH_PAGES_CUT = 1u << 10, LS_RUN_PATH_CHUNKS_ALIGNED = 1u << 11,
    LS_RUN_PATH_CHUNKS_CUT = 1u << 12
};
unsigned ls_run_path_shards(int64_t T, int world, size_t page_size, size_t chunk);

/* How the run went, for the receipt and the summary. */
typedef struct {
    const char *run_id, *events_rel;
    int ok;                   /* every asked step completed */
    ls_status fail_st;
    const char *error_message;
    uint64_t steps_done, prefix_frozen_steps, sft_steps;
    const uint64_t *frozen_idx; /* [prefix_frozen_steps] their global step indices */
    int64_t n_events;
    uint64_t start_unix_ns;
    const ls_run_peaks *sp;
    const ls_run_obs *ob;
    uint32_t rank, world;
    const cJSON *rank_state; /* the receipt's rank_state (NULL: none) */
    int64_t first_step;      /* the global index of the run's first step */
    const ls_run_inputs *inputs; /* NULL: none recorded */
} ls_run_outcome;

/* The config object of the receipts and the manifest: docs/model.md §6 keys plus
 * the run settings "faults" (the fault flags, in a fixed order), "dtype",
 * "group" (G of the built-in task), "steps_requested" (-1: until the
 * rollouts input ends), "strategy", "objective", "sft_steps",
 * "prefix_frozen" (K; 1: every step exact), "first_step" (the global index
 * of the run's first step: a resumed run's checkpoint step), "cp_ranks",
 * "options" (every other option: seed, optimizer, lengths, sampling, pages
 * and chunks, LoRA init, ...) and, when in != NULL, "inputs" (digests and
 * byte counts only, never paths, so that two runs of the same inputs
 * compare equal wherever their files lie): {"config": hex, "load": hex,
 * "resume": hex, "rollouts": {"sha256": hex, "bytes": N},
 * "initial_weights": hex}, each input the run used.  The caller owns the
 * result (cJSON_Delete); NULL on allocation failure. */
cJSON *ls_run_config_json(const ls_train_args *a, uint32_t world, int64_t first_step, const ls_run_inputs *in);

/* Write RUN/rank-NNNN/receipt.json for oc->rank.  0, or 1 with the failure
 * on stderr. */
int ls_run_write_receipt(const ls_train_args *a, const ls_run_outcome *oc);
/* Write RUN/manifest.json over every rank's files (rank 0, after every rank
 * wrote its receipt).  0, or 1 with the failure on stderr. */
int ls_run_write_manifest(const ls_train_args *a, const char *run_id, uint32_t world, int64_t first_step,
                          const ls_run_inputs *in);

/* The summary of a completed run on stdout (human units; exact bytes are
 * in the receipt).  dtype: "f32"/"f64"; P and G of the last step. */
void ls_run_print_summary(const ls_train_args *a, const ls_run_outcome *oc, const ls_step_result *last,
                          const char *dtype, size_t P, size_t G);
#endif
