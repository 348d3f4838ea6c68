/* coverage.h - what a parity report proves, and whether a run lies inside
 * it (docs/evidence.md, "Coverage").
 *
 * longstraw-parity writes the "coverage" object of parity.json from the
 * configurations its own fault-free LongStraw runs recorded (their
 * manifests); longstraw-audit checks a run's recorded configuration against
 * it and names every field outside.  The dimensions:
 *  - must match the report exactly: the family; the model (every model key
 *    of docs/model.md section 6: widths, heads, layers, conv kernel, MoE shape,
 *    dense-first layers, norms, rope; digested as model_sha256); the
 *    trainable set (train_mode, and lora_r, lora_alpha, lora_experts in
 *    lora mode); the objective with its hyperparameters (grpo: epsilon,
 *    beta, temperature; sft: temperature; the KL estimator is docs/model.md's);
 *    the gradient mode; the strategy; the dtype; the EP size (the run's
 *    config "ep_ranks", absent 1, must be one of the report's "eps"; a
 *    report without "eps" ran EP 1 only); the DP size (config "dp_ranks",
 *    an adapter's trainer's data-parallel replicas, absent 1, must be one
 *    of the report's "dps"; a report without "dps" ran DP 1 only); the CP
 *    size (world / (ep x dp): a CP size the report ran; an ep_ranks or
 *    dp_ranks that is not an integer dividing the world is outside);
 *    the run's path (config "paths": LS_COVERAGE_PATHS below; every value
 *    the run took must be one the report's runs took);
 *  - may be reduced by parity: prompt, group and response lengths, page
 *    and capture-chunk sizes, steps, seed, learning rate and the other
 *    optimizer settings, LoRA initialisation, sampling (top_p): parity
 *    keeps the code path of each (the path's shard, page and chunk classes
 *    are bound above; lengths select no code beyond them).
 * v2 configurations (docs/contract.md §2: written by any trainer, the
 * model a free object under "model") are read the same way, except the
 * model: it is the config's "model" object (any keys), compared key by key
 * (the union of both models' keys), digested as the SHA-256 of its RFC 8785
 * serialisation (ls_coverage_model_sha256_v2).  A parity report over v2
 * runs states that digest as model_sha256; ls_coverage_check picks the
 * digest by the run's configuration (ls_coverage_config_is_v2).
 * Every function here reads untrusted documents: absent or ill-typed fields
 * are reported, never trusted.  Objects returned are the caller's
 * (cJSON_Delete). */
#ifndef LS_RECEIPTS_COVERAGE_H
#define LS_RECEIPTS_COVERAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/digest.h"

/* The model keys of docs/model.md section 6, every family's (NULL-terminated, static storage): not a
 * list in this library, but read once from the registry of model families the build's trainer prints
 * (longstraw-train --families, written at build time to the file the environment variable
 * LS_FAMILIES_JSON names, else the build's generated/families.json): its shared keys, then each family's
 * keys.  NULL when the registry cannot be read (*err, when err is not NULL, says why). */
const char *const *ls_coverage_model_keys(const char **err);

/* true when config is a v2 configuration: it holds a "model" object. */
bool ls_coverage_config_is_v2(const cJSON *config);

/* The model part of a recorded configuration: the model keys config has,
 * in ls_coverage_model_keys order (v2: a copy of its "model" object), as a
 * new object (the caller's, cJSON_Delete).  NULL when config is not an
 * object, the model keys are unknown, or out of memory. */
cJSON *ls_coverage_model(const cJSON *config);

/* SHA-256 (hex) of the canonical JSON of a model object (v1). */
ls_status ls_coverage_model_sha256(const cJSON *model, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen);

/* v2: SHA-256 (hex) of the RFC 8785 serialisation of a model object
 * (receipts/format/jcs.h, ls_jcs_sha256_numbers: any finite number). */
ls_status ls_coverage_model_sha256_v2(const cJSON *model, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen);

/* The trainable set of a configuration: {"train_mode": "lora", "lora_r",
 * "lora_alpha", "lora_experts"} or {"train_mode": "full"}, a new object
 * (the caller's, cJSON_Delete).  NULL when the configuration does not state
 * it (err says which field). */
cJSON *ls_coverage_train_mode(const cJSON *config, char *err, size_t errlen);

/* The objectives a configuration's steps used, a new array (the caller's,
 * cJSON_Delete): {"objective": "grpo", "epsilon", "beta", "temperature"}
 * and/or {"objective": "sft", "temperature"} (sft for its first sft_steps
 * steps, or every step with objective sft).  NULL when the configuration
 * does not state them. */
cJSON *ls_coverage_objectives(const cJSON *config, char *err, size_t errlen);

/* Adds a copy of item (borrowed) to the array set unless an equal item is
 * in it.  LS_OK or LS_ERR_NOMEM. */
ls_status ls_coverage_set_add(cJSON *set, const cJSON *item);

/* The run's path (docs/evidence.md, "The run's path"): every decision a
 * trainer records in its configuration's "paths" object ({decision: [the
 * values its steps took]}) that selects code, with every value the audit
 * knows.  None of them is reducible: a level binds a run only where each of
 * its values lies in the report's coverage.paths, and a decision or value
 * not in this table is outside every coverage (deny by default: an option
 * added later, without parity exercising it, cannot be certified).
 * NULL-terminated; each entry's values NULL-terminated. */
typedef struct {
    const char *key;
    const char *const *values;
    const char *what; /* one line: the code the decision selects */
} ls_coverage_path_decision;
extern const ls_coverage_path_decision LS_COVERAGE_PATHS[];

/* Adds value to the array paths[key] (created when absent), which stays
 * sorted and holds each value once.  LS_ERR_ARG when paths[key] is not an
 * array of strings; LS_ERR_NOMEM. */
ls_status ls_coverage_paths_put(cJSON *paths, const char *key, const char *value);

/* The shard classes of T captured prompt positions split over N ranks by
 * trainer/dist/cp.h's rule (rank r from floor(r T / N)), with KV pages of
 * page positions and capture chunks of chunk (0: none): *shards "one"
 * (N < 2), "even" or "uneven"; *pages and *chunks "cut" when a shard
 * boundary is not a multiple of that size, else "aligned".  Static strings.
 * The trainer records them (config "paths"); parity chooses its path runs'
 * lengths by them. */
void ls_coverage_shard_classes(int64_t T, int N, int64_t page, int64_t chunk, const char **shards,
                               const char **pages, const char **chunks);

/* Adds the values of config's "paths" (a run's recorded path) to the
 * object cov_paths (coverage.paths: {decision: [values]}, sorted, each
 * value once).  LS_ERR_ARG (err says what) when config has no "paths"
 * object or one of another shape; LS_ERR_NOMEM. */
ls_status ls_coverage_paths_add(cJSON *cov_paths, const cJSON *config, char *err, size_t errlen);

/* Checks a run's configuration (and its world) against a report's
 * coverage object; calls outside(user, field, detail) for every dimension
 * the run lies outside of (field: the configuration key, e.g. "d_model",
 * "train_mode", "objective", "ep", "dp", "world"), and returns how many.  A coverage
 * object without a field the check needs counts as outside too. */
size_t ls_coverage_check(const cJSON *coverage, const cJSON *config, unsigned world,
                         void (*outside)(void *user, const char *field, const char *detail), void *user);

#endif
