/* run_report.h - what a longstraw-train run leaves when it ends: the
 * per-step memory peaks folded over its steps, the rank receipt and the
 * manifest (byte-exact figures), and the human summary on stdout (MiB, s).
 * dtype-independent. */
#ifndef LS_TRAINER_RUN_REPORT_H
#define LS_TRAINER_RUN_REPORT_H
#include <stdint.h>
#include "trainer/mem_tracker.h"
#include "trainer/run_obs.h"
#include "trainer/train_args.h"

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
} ls_run_outcome;

/* The config object of the receipts and the manifest: MODEL.md §6 keys plus
 * the run settings "faults" (the fault flags, in a fixed order), "dtype",
 * "group" (G of the built-in task), "steps_requested" (-1: until the
 * rollouts input ends), "strategy", "objective", "sft_steps",
 * "prefix_frozen" (K; 1: every step exact), "first_step" (the global index
 * of the run's first step: a resumed run's checkpoint step), "cp_ranks" and
 * "options" (every other option: seed, optimizer, lengths, sampling, pages
 * and chunks, LoRA init, ...).  The caller owns the result (cJSON_Delete);
 * NULL on allocation failure. */
cJSON *ls_run_config_json(const ls_train_args *a, uint32_t world, int64_t first_step);

/* Write RUN/rank-NNNN/receipt.json for oc->rank.  0, or 1 with the failure
 * on stderr. */
int ls_run_write_receipt(const ls_train_args *a, const ls_run_outcome *oc);
/* Write RUN/manifest.json over every rank's files (rank 0, after every rank
 * wrote its receipt).  0, or 1 with the failure on stderr. */
int ls_run_write_manifest(const ls_train_args *a, const char *run_id, uint32_t world, int64_t first_step);

/* The summary of a completed run on stdout (human units; exact bytes are
 * in the receipt).  dtype: "f32"/"f64"; P and G of the last step. */
void ls_run_print_summary(const ls_train_args *a, const ls_run_outcome *oc, const ls_step_result *last,
                          const char *dtype, size_t P, size_t G);
#endif
