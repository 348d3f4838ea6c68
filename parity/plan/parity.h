/* parity.h - longstraw-parity (docs/design.md §5): reduced-size runs of
 * the trainer against references, and the parity report the audit consumes.
 *
 * The tool drives the trainer executable, never its library: every number
 * it compares comes from a longstraw-train run (through mpirun for CP > 1),
 * so the report's build digest is the digest those runs' receipts carry,
 * and a run of the same binary is "the same build" to the audit.
 *
 * Per model configuration of the matrix (parity_matrix.c) and dtype:
 *   score runs  old log-probs scored by the run itself (ratio 1): naive
 *               full sequence, LongStraw CP-N; the cp-local-attention
 *               control at every N > 1
 *   grad runs   old and reference log-probs supplied (ratios far from 1,
 *               so the clip engages): naive, LongStraw CP-N in full and
 *               detached mode; skip-dkv-reduce and skip-grad-finalize
 *               controls at every N > 1; gradients (--dump-grads) and the
 *               updated weights (--save)
 *   (f64)       the independent reference (tests/reference/, Python from
 *               docs/model.md) on the same weights and batches, and directional
 *               finite differences of the loss for every trainable tensor
 *               or every layer's group of them (parity_fd.c)
 * and the comparisons of parity_run.c turn them into checks, controls
 * and a verdict per level (parity_report.c). */
#ifndef LS_PARITY_PARITY_H
#define LS_PARITY_PARITY_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"

#define LS_PARITY_MAX_G 8
#define LS_PARITY_MAX_CP 8
#define LS_PARITY_PATH 1024
#define LS_PARITY_OUT_MAX 512

enum { LS_PARITY_F64 = 0, LS_PARITY_F32 = 1 };
/* What one finite-difference direction spans (--fd-groups): one trainable
 * tensor, or every trainable tensor of one layer (layers.N.*; the tensors
 * outside the layers one more group).  parity_fd.c says what grouping
 * does and does not detect. */
enum { LS_PARITY_FD_TENSOR = 0, LS_PARITY_FD_LAYER = 1 };

/* One model/batch configuration of the matrix. */
typedef struct {
    const char *name;
    const char *what;       /* one line for the report and --help */
    int prompt_len;         /* P: P-1 captured positions */
    int group;
    int response_lens[LS_PARITY_MAX_G];
    double rewards[LS_PARITY_MAX_G];
    const char *train_mode; /* "lora" | "full" */
    int page_size, capture_chunk;
    uint32_t token_seed;
} ls_parity_config;

/* The model config keys that hold a family's discrete decisions (parity_decisions.c): the sparse
 * attention's top-k, the routed experts, their groups, the groups a token keeps, the experts per token,
 * and the dense (expert-free) leading layers. */
typedef struct {
    const char *topk, *experts, *groups, *kept_groups, *per_token, *dense_layers;
} ls_parity_decision_keys;

/* What longstraw-parity needs to know of a family, read as data (parity_matrix.c): from the trainer's
 * registry (longstraw-train --families) its default model config and independent reference (paths under
 * the source tree), whether it has routed experts (--eps) and carries state between shards
 * (cp-stale-start among its CP faults: the path's stale run); from its parity facts
 * (trainer/families/<name>/parity.json) the fault that breaks the CP-N log-probs (the score control), the
 * faults that break the CP-N gradients, the config keys of its discrete decisions and its matrix.
 * Static storage for the life of the process. */
typedef struct {
    const char *name;
    const char *model_config, *reference; /* relative to LS_PARITY_SOURCE_DIR */
    const char *score_fault;
    const char *grad_faults[2];
    size_t n_grad_faults;
    const ls_parity_config *configs;
    size_t n_configs;
    bool routed_experts;
    bool carried_state;
    bool decisions; /* its forward makes discrete decisions (dkeys holds their keys) */
    ls_parity_decision_keys dkeys;
} ls_parity_family;

/* The registry is read from this trainer (--trainer; default the build's longstraw-train) on the first
 * look-up; set it before.  trainer is borrowed (it must outlive the process's look-ups). */
void ls_parity_families_trainer(const char *trainer);
/* The family named name (NULL: none, or the registry could not be read: ls_parity_families_error says
 * why), and every name ("hybrid, mla"). */
const ls_parity_family *ls_parity_family_of(const char *name);
const char *ls_parity_family_names(void);
/* The trainer's fault the EP control injects (longstraw-train --fault). */
#define LS_PARITY_EP_FAULT "ep-drop-dx"
/* The families (i < their number: the name; NULL past the end) and the
 * trainer faults the matrices inject as controls (the families' score and
 * gradient faults and LS_PARITY_EP_FAULT, each once; NULL past the end):
 * longstraw-parity --list-names prints them, and tests/tools/check_vocab.py holds
 * them to longstraw-train's.  Static strings. */
const char *ls_parity_family_at(size_t i);
const char *ls_parity_fault_at(size_t i);
/* Why the registry or a family's parity facts could not be read ("" when they were). */
const char *ls_parity_families_error(void);

typedef struct {
    const char *family;
    const ls_parity_family *fam; /* the family's descriptor */
    int cps[LS_PARITY_MAX_CP];
    size_t n_cps;
    /* expert-parallel sizes (mla, --eps, or --like an EP run), 1 first: every EP size N > 1 runs at every CP
     * size c of cps with c x N <= LS_PARITY_MAX_CP ranks (world c x N, --ep N); {1}: no EP runs */
    int eps[LS_PARITY_MAX_CP];
    size_t n_eps;
    /* data-parallel sizes (an adapter's trainer only: --dp, or --adapter --like a DP run), 1 first: every DP
     * size D > 1 runs at the CP sizes c of cps with c x D <= LS_PARITY_MAX_CP processes (dp_cp > 0: at that
     * CP size only, the --like run's), {dp} D, in the dtypes dp_dtype and full mode (dp_detached: detached
     * too); {1} (or n_dps 0): no DP runs */
    int dps[LS_PARITY_MAX_CP];
    size_t n_dps;
    int dp_cp;
    bool dp_dtype[2];
    bool dp_detached;
    bool dtype[2];            /* [LS_PARITY_F64], [LS_PARITY_F32] */
    bool config_on[16];       /* which matrix entries run */
    const char *out;          /* the output directory */
    const char *trainer, *mpirun, *python, *reference, *model_config;
    int jobs;                 /* concurrent trainer runs */
    int timeout_s;            /* per trainer run */
    double fd_step;           /* the larger finite-difference step */
    size_t fd_max;            /* at most this many directions (tensors or groups) get finite differences (0: all) */
    int fd_groups;            /* LS_PARITY_FD_TENSOR or LS_PARITY_FD_LAYER (parity_fd.c) */
    uint64_t seed;
    bool keep_fd, quiet;
    /* the trainer's objective and trainable set (--like sets them from a run) */
    double temperature, epsilon, beta;
    const char *train_mode;   /* NULL: each matrix entry's own */
    int lora_r;               /* 0: the trainer's default */
    double lora_alpha;        /* 0: the trainer's default */
    bool lora_experts;
    /* --like RUN: the run whose coverage the matrix is derived from */
    const char *like;
    char like_run_id[128];
    void *like_manifest;      /* the run's parsed manifest (ls_manifest): held for the process, never
                                 freed (o->family points into it) */
    /* --like RUN: the run's path (parity_path.c), the decisions that selected its code: for each key of
     * the trainer's configuration "paths" (responses, old_logprobs, reference, prompt_groups, prefix,
     * start, shards, pages, chunks, task) the sorted values the run took, as it recorded them or, for a
     * run that recorded none, as its options and receipts say (like_paths_derived); NULL: no path runs.
     * Held for the process, never freed, as like_manifest. */
    cJSON *like_paths;
    bool like_paths_derived;
    char like_grad_mode[16];  /* the run's gradient mode */
    int like_prompts_per_step;/* the run's B */
    int like_capture_chunk;   /* the run's capture chunk (0: all at once) */
} ls_parity_opts;

/* --like RUN: sets o (family, model config written to OUT/like-model.json
 * into model_path, trainable set, objective, dtypes, CP sizes) so that the
 * report covers the run; 0, or 2 with err naming what cannot be covered. */
int ls_parity_like(const char *run_dir, ls_parity_opts *o, char *model_path, size_t cap, char *err, size_t errlen);

/* ---- processes (parity_proc.c) -------------------------------------------- */

typedef struct {
    char *argv[96];
    int argc;
    char log[LS_PARITY_PATH]; /* stdout and stderr */
    int rc;                   /* exit status; 128 + signal; -1 not run / timed out */
    double secs;
    int pid;
    double t0;
    char tmp[96];             /* the job's own Open MPI session directory (removed when it ends; "" none) */
} ls_parity_job;

/* Append one argument (printf-formatted, copied: the job's, freed by
 * ls_parity_job_free). */
void ls_parity_job_arg(ls_parity_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees the job's arguments (the struct itself is the caller's). */
void ls_parity_job_free(ls_parity_job *j);
/* The environment every trainer run gets (reproducible sums: one thread). */
#define LS_PARITY_RUN_ENV "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_DYNAMIC=false"

/* Runs jobs[0..n) with at most `parallel` at a time (each in its own process
 * group, stdout and stderr to its log, the environment LS_PARITY_RUN_ENV),
 * killing any that runs past timeout_s.  LS_ERR_IO when one cannot start. */
ls_status ls_parity_jobs_run(ls_parity_job *jobs, size_t n, int parallel, int timeout_s, char *err,
                             size_t errlen);
/* Job j started alone, in the background (as a pool starts its jobs; the
 * pools wait for their own jobs only): LS_ERR_IO with err set when it
 * cannot.  ls_parity_job_wait waits for it to end (stop: kills it first;
 * killed once timeout_s after its start), setting j->rc and j->secs (the
 * seconds until it was waited for). */
ls_status ls_parity_job_start(ls_parity_job *j, char *err, size_t errlen);
void ls_parity_job_wait(ls_parity_job *j, int timeout_s, bool stop);
/* A hook on job i of a pool (ctx the caller's): LS_OK, or a status with err
 * set, which stops the pool starting jobs. */
typedef ls_status (*ls_parity_job_hook)(void *ctx, size_t i, char *err, size_t errlen);
/* ls_parity_jobs_run, with before(ctx, i) called just before job i starts
 * (it may fill jobs[i] and write its inputs: they exist only while the pool
 * needs them, and are written while the other jobs run) and after(ctx, i)
 * as soon as job i has ended (jobs[i].rc set).  Either hook NULL: none.  A
 * hook's failure stops the starts; the jobs already running are waited for
 * (their after hooks are not called) and its status is returned.  The jobs
 * never started keep rc -1. */
ls_status ls_parity_jobs_run_hooked(ls_parity_job *jobs, size_t n, int parallel, int timeout_s,
                                    ls_parity_job_hook before, ls_parity_job_hook after, void *ctx, char *err,
                                    size_t errlen);

/* ---- one configuration's runs and their outputs (parity_runs.c) ------------ */

/* A tensor set read from a safetensors file, every value as a double, in
 * the file's (name) order. */
typedef struct {
    size_t n;
    char **name;
    double **v;
    size_t *numel;
    uint64_t (*shape)[4];
    size_t *ndim;
} ls_parity_tensors;

/* Fills *out (its arrays the caller's: ls_parity_tensors_free); on failure
 * it holds nothing. */
ls_status ls_parity_tensors_read(const char *path, ls_parity_tensors *out, char *err, size_t errlen);
/* Frees what t holds (the struct itself is the caller's). */
void ls_parity_tensors_free(ls_parity_tensors *t);
/* index of name in t, or -1 */
long ls_parity_tensors_find(const ls_parity_tensors *t, const char *name);

/* Per-member token log-probs. */
typedef struct {
    int g;
    int len[LS_PARITY_MAX_G];
    double *lp[LS_PARITY_MAX_G];
} ls_parity_logprobs;

/* Frees the rows l holds (the struct itself is the caller's). */
void ls_parity_logprobs_free(ls_parity_logprobs *l);
/* doc[key]: per-member arrays of finite numbers (where names the source in
 * errors).  The rows of *out are the caller's (ls_parity_logprobs_free); on
 * failure it holds nothing.  The same for ls_parity_batch_logprobs. */
ls_status ls_parity_json_logprobs(const cJSON *doc, const char *key, const char *where, ls_parity_logprobs *out,
                                  char *err, size_t errlen);
/* old_logprobs (or ref_logprobs when ref) of a --dump-batch file. */
ls_status ls_parity_batch_logprobs(const char *path, bool ref, ls_parity_logprobs *out, char *err, size_t errlen);
/* Batch files (one JSON line, a longstraw-train rollouts line): the prompt
 * and responses drawn from token_seed below vocab, and the rewards
 * (ls_parity_batch_new); log-probs l under key, each moved by
 * deltas[(t + 2 i) % 6] when deltas (clamp: kept below 0)
 * (ls_parity_batch_add_logprobs); doc written atomically to path and freed
 * (ls_parity_batch_write). */
cJSON *ls_parity_batch_new(uint32_t token_seed, int vocab, int prompt_len, int group, const int *response_lens,
                           const double *rewards);
void ls_parity_batch_add_logprobs(cJSON *doc, const char *key, const ls_parity_logprobs *l, const double *deltas,
                                  bool clamp);
ls_status ls_parity_batch_write(cJSON *doc, const char *path, char *err, size_t errlen);
/* The "  exact loss X (last step)" line of a trainer log. */
ls_status ls_parity_log_loss(const char *log, double *loss, char *err, size_t errlen);
/* The "  decisions N digest HEX" line of a trainer log: the run's discrete
 * decisions in order (kernels/decisions.h). */
ls_status ls_parity_log_decisions(const char *log, uint64_t *count, uint64_t *digest, char *err, size_t errlen);
/* The optimizer settings a run's manifest records (its config's options)
 * and the step its first update was (first_step + 1, AdamW's bias correction). */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
} ls_parity_adamw;
ls_status ls_parity_run_adamw(const char *run_dir, ls_parity_adamw *o, char *err, size_t errlen);
/* The build digest of a run directory's manifest (predicate.build.build_digest)
 * and, when build is not NULL, a copy of its build object as the manifest has
 * it (*build the caller's: cJSON_Delete; NULL on failure). */
ls_status ls_parity_run_build(const char *run_dir, char hex[65], cJSON **build, char *err, size_t errlen);

/* ---- the comparisons (parity_runs.c) ---------------------------------------- */

/* "f64" / "f32" */
const char *ls_parity_dtype_name(int dtype);

typedef struct {
    double max_abs, max_rel;
} ls_parity_err;

/* max |a - b| and max |a - b| / max |b| over n values (0 when both are 0;
 * over max |a| when b is all zero: a tensor no token reached in the
 * reference, e.g. an MoE expert, that one did reach in a; then 1). */
ls_parity_err ls_parity_err_of(const double *a, const double *b, size_t n);

/* ---- the report (parity_report.c) ------------------------------------------ */

typedef struct ls_parity_report ls_parity_report;

/* A new report for the options o (read during the call); *out is the
 * caller's (ls_parity_report_free). */
ls_status ls_parity_report_new(const ls_parity_opts *o, ls_parity_report **out);
/* Frees the report and every check added to it; NULL is a no-op. */
void ls_parity_report_free(ls_parity_report *r);
/* A run's report begun: the directory o->out made (LS_ERR_IO naming it
 * when it cannot be) and a new report for o in *out (the caller's, handed
 * to ls_parity_report_end). */
ls_status ls_parity_report_begin(const ls_parity_opts *o, ls_parity_report **out, char *err, size_t errlen);
/* A run's report ended: when s (the run's status) is LS_OK, the total time
 * since t0 (ls_parity_now) added and the report finished into
 * o->out/parity.json (ls_parity_report_finish; said on stdout unless
 * o->quiet); the report freed either way.  Returns s, or finish's status. */
ls_status ls_parity_report_end(ls_parity_report *r, const ls_parity_opts *o, ls_status s, double t0, bool *all_pass,
                               char *err, size_t errlen);
/* The trainer build every run must share: the first call sets it (the
 * report's build_digest, and its "build": the run's build object, copied), a
 * later different one is an error naming both runs and what differs
 * (receipts/format/build_diff.h). */
ls_status ls_parity_report_build(ls_parity_report *r, const char *run_dir, char *err, size_t errlen);
/* train_mode: the mode the runs used (NULL: the entry's own) */
void ls_parity_report_config(ls_parity_report *r, const ls_parity_config *c, const char *train_mode);
/* A check of the given kind over entries (a "tensors" or "members" array,
 * owned by the check afterwards); pass when it has entries and every one
 * passes.  The check is the caller's (cJSON_Delete) until handed to
 * ls_parity_report_add or ls_parity_report_control. */
cJSON *ls_parity_check_new(const char *kind, const char *name, int dtype, int world, const char *config,
                           const char *grad_mode, const char *reference, const char *candidate, cJSON *entries,
                           const char *entries_key);
/* The check of an expert-parallel run (ep > 1): its "ep" (absent: EP 1), world being cp x ep ranks; the
 * audit holds an EP-N run to the checks of its EP size.  Returns check. */
cJSON *ls_parity_check_ep(cJSON *check, int ep);
/* The check of a data-parallel run (an adapter's, dp > 1): its "dp" (absent: DP 1), world being cp x dp
 * processes; the audit holds a DP-D run to the checks of its DP size.  Returns check. */
cJSON *ls_parity_check_dp(cJSON *check, int dp);
/* The report takes the check (owns it from here) as evidence for its level. */
void ls_parity_report_add(ls_parity_report *r, cJSON *check);
/* Or as a negative control (owning it too): a fault run whose comparison
 * must fail. */
void ls_parity_report_control(ls_parity_report *r, const char *fault, cJSON *check);
void ls_parity_report_timing(ls_parity_report *r, const char *part, double secs, int runs);
/* The timings' "total" row: secs, and as its runs the sum of the rows before
 * it (every process the report launched: trainer runs, reference runs,
 * finite-difference loss runs). */
void ls_parity_report_total(ls_parity_report *r, double secs);
/* The level (2-4) a check kind is evidence for; 0: none. */
int ls_parity_kind_level(const char *kind);
#define LS_PARITY_ADAPTER_CONTROLS 16
/* An adapter's report (parity_adapter_run.c): the "adapter" object (file, name, sha256 of its bytes), and
 * the controls each level needs: faults[i] must fail a check of kinds[i] (its level's), and "detached"
 * level 4's, in place of LongStraw's; no level needs "decisions" checks.  A control of kind dp_grad, and
 * dp_grad checks (level 3), are needed only when the report's options asked a DP size > 1 (o->dps). */
void ls_parity_report_adapter(ls_parity_report *r, const char *file, const char *name, const char *sha256,
                              const char *const *faults, const char *const *kinds, size_t n);
/* The adapter's batch as the report's configuration (no LongStraw page or chunk sizes). */
void ls_parity_report_batch(ls_parity_report *r, const char *name, const char *what, int prompt_len, int group,
                            const int *response_lens);
void ls_parity_report_note(ls_parity_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A configuration of the report with the path its runs were forced to take (path: borrowed, copied). */
void ls_parity_report_path_config(ls_parity_report *r, const ls_parity_config *c, const char *train_mode,
                                  int prompts_per_step, const cJSON *path);
/* A control the level must have seen detected (beyond LongStraw's own: the path's cp-stale-start). */
void ls_parity_report_require_control(ls_parity_report *r, const char *fault, int level);
/* The union of the "paths" every fault-free LongStraw run of the report recorded so far (key -> sorted
 * array of values), or NULL when none did; owned by the report. */
const cJSON *ls_parity_report_paths(const ls_parity_report *r);
/* The --like run's path and the values of it the report's runs did not take (the audit will refuse the
 * run: docs/evidence.md); run_paths borrowed, copied. */
void ls_parity_report_like_paths(ls_parity_report *r, const cJSON *run_paths, bool derived);
/* Verdicts, the table on stdout, parity.json (schema-checked, atomic).
 * *all_pass: every level holds and every control failed as it should. */
ls_status ls_parity_report_finish(ls_parity_report *r, const char *path, bool print, bool *all_pass, char *err,
                                  size_t errlen);

/* One entry of a "tensors" / "members" array: its error against a
 * tolerance.  The caller's (cJSON_Delete), usually added to the array an
 * ls_parity_check_new takes. */
cJSON *ls_parity_entry(const char *name, ls_parity_err e, double tol, double noise_floor);
/* One entry per member, "WHAT member i (n tokens)", into arr: a's log-probs against b's at the float64
 * tolerance (a member whose length differs, or that one side lacks, is an infinite error). */
void ls_parity_member_entries(cJSON *arr, const char *what, const ls_parity_logprobs *a, const ls_parity_logprobs *b);

/* ---- discrete decisions (parity_decisions.c) --------------------------------- */

/* The smallest relative margin of a decision must exceed the composition
 * noise this many times over; a fixture that does not is drawn again with
 * other weights, at most LS_PARITY_DECISION_DRAWS times. */
#define LS_PARITY_DECISION_ROOM 64.0
#define LS_PARITY_DECISION_DRAWS 4

/* The reference's "decisions" object (tests/reference/mla_ref.py's Margins),
 * every field checked (what names the file in errors); *out a copy, the
 * caller's (cJSON_Delete), NULL on failure. */
ls_status ls_parity_decisions_read(const cJSON *ref_doc, const char *what, cJSON **out, char *err, size_t errlen);
/* Its total count of decisions (0: the fixture decided nothing). */
int ls_parity_decisions_count(const cJSON *decisions);
/* One unit of roundoff of the dtype: the least noise a composition has. */
double ls_parity_decisions_unit(int dt);
/* The "decisions" check of a configuration and dtype: per kind the smallest
 * margin against noise (pass: noise / relative margin <= 1 / room). */
/* expect: whether the model makes decisions of each kind at the fixture's
 * lengths (dsa_topk, moe_group, moe_expert): a kind expected and not made
 * is a failing entry (that decision went unexercised).  The check is the
 * caller's, as ls_parity_check_new's. */
cJSON *ls_parity_decisions_check(const cJSON *decisions, const bool expect[3], const char *config, int dt,
                                 double noise, uint64_t seed, int draw);

/* ---- trainer runs (parity_run.c) and finite differences (parity_fd.c) ------ */

/* One longstraw-train run of a configuration (NULL members: not passed).  Without rollouts the run
 * draws its own prompts from the built-in task and samples its responses (the path runs: extra names
 * the task, the lengths and what else the run's path forces). */
typedef struct {
    int dt, world;
    int ep; /* --ep N when > 1 (world is then cp x N ranks) */
    const char *out, *log, *rollouts, *load, *save_init, *dump_batch, *dump_grads, *save;
    const uint64_t *seed; /* NULL: o->seed (the matrix entry's draw of weights, parity_decisions.c) */
    const char *strategy, *grad_mode, *fault;
    const char *const *extra; /* further arguments, NULL-terminated (NULL: none) */
} ls_parity_train;

void ls_parity_train_job(const ls_parity_opts *o, const ls_parity_config *c, const ls_parity_train *t,
                         ls_parity_job *j);
void ls_parity_remove_tree(const char *path);
/* path made afresh: whatever was there removed (ls_parity_remove_tree), then
 * the directory and its parents made; LS_ERR_IO naming path when it cannot be. */
ls_status ls_parity_fresh_dir(const char *path, char *err, size_t errlen);

/* "tensor" / "layer" (NULL: not an LS_PARITY_FD_* value) */
const char *ls_parity_fd_groups_name(int fd_groups);

/* Directional finite differences of the float64 loss (naive runs at the
 * weights moved along a random unit direction per trainable tensor, or per
 * group of them: o->fd_groups) against g_naive's and g_ls's directional
 * derivatives: two fd_grad checks, one entry per direction. */
ls_status ls_parity_fd(const ls_parity_opts *o, const ls_parity_config *c, ls_parity_report *rep, const char *dir,
                       const char *weights, const char *rollouts, const ls_parity_tensors *g_naive,
                       const ls_parity_tensors *g_ls, char *err, size_t errlen);
/* ls_parity_fd's runs and comparisons without a report: the two fd_grad
 * checks (naive, LongStraw) into checks[0] and checks[1] (the caller's,
 * cJSON_Delete; NULL unless LS_OK), the seconds the runs took and their
 * count.  The trainer o->trainer is run with the weights at
 * DIR/fd/U-K.safetensors and must print the loss as longstraw-train does
 * ("  exact loss X (last step)"). */
ls_status ls_parity_fd_checks(const ls_parity_opts *o, const ls_parity_config *c, const char *dir,
                              const char *weights, const char *rollouts, const ls_parity_tensors *g_naive,
                              const ls_parity_tensors *g_ls, cJSON *checks[2], double *secs, int *runs,
                              char *err, size_t errlen);

/* A unit direction of n elements, Gaussian drawn from seed (every tensor's
 * own: seed o->seed * 1000003 + its index among the trainable tensors). */
void ls_parity_fd_direction(uint64_t seed, size_t n, double *d);
/* From the losses at +h, -h, +h/2, -h/2 along a direction (L[0..3]): the
 * Richardson-extrapolated derivative (O(h^4)) *fd, its truncation estimate
 * *est and the rounding floor of the combination *floor_. */
void ls_parity_fd_richardson(const double L[4], double h, double *fd, double *est, double *floor_);
/* One finite-difference direction: its members are idx[first .. first + n). */
typedef struct {
    char name[96];
    size_t first, n;
} ls_parity_fd_unit;
/* The directions (fd_groups: LS_PARITY_FD_TENSOR or _LAYER) over the
 * tensors of g: *units (*nu of them) and *idx (the members, unit by unit,
 * indices into g), both the caller's (free). */
ls_status ls_parity_fd_units(int fd_groups, const ls_parity_tensors *g, ls_parity_fd_unit **units, size_t *nu,
                             size_t **idx);

/* ---- comparisons shared by the matrices (parity_run.c) ---------------------- */

#define LS_PARITY_F64_TOL 1e-10
/* float32's tolerance from its measured noise floor nf: 10 nf, at least 4 float32 epsilons. */
/* The largest relative disagreement of two runs' log-probs, member by
 * member (members of different lengths skipped; NaN when one is NaN): the
 * composition noise a float32 tolerance is derived from. */
double ls_parity_logprob_noise(const ls_parity_logprobs *a, const ls_parity_logprobs *b);
double ls_parity_f32_tol(double nf);
/* Per member: a's log-probs against b's (tol each; nf the noise floor, -1 none); a "members" array. */
cJSON *ls_parity_members_entries(const ls_parity_logprobs *a, const ls_parity_logprobs *b, double tol, double nf);
/* Per tensor named in want: a against b, float64 (nf_a NULL) or float32 with the noise floor of nf_a
 * against nf_b (and of nf_c against nf_d when larger), each entry also held to an absolute floor; a
 * "tensors" array (the caller's). */
cJSON *ls_parity_tensor_entries(const ls_parity_tensors *want, const ls_parity_tensors *a, const ls_parity_tensors *b,
                                const ls_parity_tensors *nf_a, const ls_parity_tensors *nf_b,
                                const ls_parity_tensors *nf_c, const ls_parity_tensors *nf_d);
/* Per tensor named in want: updated parameters a against b, each element allowed what AdamW's first step
 * (o; NULL: none, a plain comparison) makes of the runs' own gradients ga, gb, plus one rounding. */
cJSON *ls_parity_params_entries(const ls_parity_tensors *want, const ls_parity_tensors *a, const ls_parity_tensors *b,
                                const ls_parity_tensors *ga, const ls_parity_tensors *gb, const ls_parity_adamw *o,
                                int dt);

/* ---- the run's own path (--like; parity_path.c) ------------------------------ */

/* The path a run took, for a run whose configuration recorded none: from its options (input, task,
 * prompts per step, prefix, resume, lengths, pages, chunks), its world and its receipt's
 * rank_state.memory_plan.reference (run_dir/rank-0000/receipt.json; else --keep-reference), a new
 * object (the caller's, cJSON_Delete), NULL with err set when the configuration does not say. */
cJSON *ls_parity_path_derive(const char *run_dir, const cJSON *config, unsigned world, char *err, size_t errlen);
/* The path runs of o->like_paths (parity_path.c, docs/parity.md "The run's path"): the trainer launched
 * the way the run was, at reduced size, at every CP size of o, and their checks and controls into rep. */
ls_status ls_parity_paths_run(const ls_parity_opts *o, ls_parity_report *rep, char *err, size_t errlen);
/* The environment variable that makes every fault-free path run at CP > 1 (an EP fault, ep-*: at EP > 1) run
 * with --fault VALUE as well (test only: "a --like parity that would have failed before the fix"); the report
 * says so in a note. */
#define LS_PARITY_TEST_PATH_FAULT_ENV "LONGSTRAW_PARITY_TEST_PATH_FAULT"

/* The kinds of discrete decision (dsa_topk, moe_group, moe_expert) the model config mc makes when T
 * captured positions are scored (parity_decisions.c): a query sees more than index_topk keys, an MoE
 * layer keeps topk_group of n_group groups, experts_per_token of their experts. */
void ls_parity_decisions_expect(const cJSON *mc, int T, bool expect[3]);

/* ---- the driver (parity_run.c) --------------------------------------------- */

ls_status ls_parity_run(const ls_parity_opts *o, bool *all_pass, char *err, size_t errlen);

double ls_parity_now(void);
/* mkdir -p path (LS_PARITY_PATH at most): 0, or -1 with errno. */
int ls_parity_mkdirs(const char *path);

#endif
