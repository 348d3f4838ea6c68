/* parity_adapter.h - longstraw-parity --adapter FILE (docs/contract.md §4,
 * docs/parity.md "Adapters"): the parity matrix for any trainer an adapter
 * file describes.
 *
 * parity_adapter_load.c reads the adapter (size-capped, its templates'
 * placeholders checked by name, schema-checked against
 * schemas/parity-adapter.schema.json, then what a schema cannot say);
 * ls_parity_adapter_job builds a run's argv from the templates (no shell:
 * one template string is one argument); parity_adapter_run.c runs the
 * matrix and parity_adapter_fd.c the finite differences of the loss mode;
 * the checks and the report are parity_report.c's, named as LongStraw's so
 * that the audit's levels read an adapter's report as they read its own. */
#ifndef LS_PARITY_PARITY_ADAPTER_H
#define LS_PARITY_PARITY_ADAPTER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "parity/plan/parity.h"

#define LS_PARITY_ADAPTER_MAX_BYTES (64u << 10)

/* The refusal of the adapter files' readers (parity_adapter_load.c,
 * parity_adapter_like.c): in a function with `ls_status s`, `char *err`,
 * `size_t errlen` and a `done:` label, the message into err, s = st, and
 * out through done. */
#define LS_PARITY_ADAPTER_FAIL(st, ...)      \
    do {                                     \
        snprintf(err, errlen, __VA_ARGS__);  \
        s = (st);                            \
        goto done;                           \
    } while (0)
/* the longest argument a template expands to */
#define LS_PARITY_ADAPTER_ARG_MAX (LS_PARITY_PATH + 63)

/* One negative control: the fault flag, the check kind it must fail, and
 * the CP size it runs at (0: every requested CP size > 1; a dp_grad
 * control: every CP size the DP runs take).  A dp_grad control runs at
 * every DP size > 1 of the report only. */
typedef struct {
    char fault[65];
    char kind[16];
    int cp;
} ls_parity_adapter_control;

typedef struct {
    char path[LS_PARITY_PATH]; /* as given */
    char dir[LS_PARITY_PATH];  /* its directory, absolute: {dir} */
    char sha256[65];           /* of its bytes */
    char name[40], profile[40];
    cJSON *doc;                /* the parsed file (owned); launch and args point into it */
    const cJSON *launch1, *launchn, *args;
    char objective[8];
    double epsilon, beta, temperature;
    bool has_epsilon, has_beta;
    bool dtype[2]; /* [LS_PARITY_F64], [LS_PARITY_F32] */
    int cps[LS_PARITY_MAX_CP];
    size_t n_cps;
    /* field "dp" (absent: [1]): the data-parallel sizes the trainer supports, {dp} replicas of a CP group
     * (world cp x dp); uses_dp: some template of args or launch.n holds {dp} (required for a size > 1) */
    int dps[LS_PARITY_MAX_CP];
    size_t n_dps;
    bool uses_dp;
    char fault_none[65];
    ls_parity_adapter_control controls[LS_PARITY_ADAPTER_CONTROLS];
    size_t n_controls;
    /* the batch */
    int vocab, prompt_len, group, response_lens[LS_PARITY_MAX_G];
    double rewards[LS_PARITY_MAX_G];
    uint32_t token_seed;
    /* the optimizer (cp_params): adamw true when its first step explains parameter differences */
    bool adamw;
    ls_parity_adamw opt;
    /* batch.prompt_only: the trainer takes a batch of a prompt alone (it samples its responses, rewards
     * them and computes its old log-probs itself, and writes the batch it ran to {out}/batch.json): the
     * matrix runs that path too (parity_adapter_sampled.c) */
    bool prompt_only;
    /* --like RUN (parity_adapter_like.c): what was taken from the run, in words (the report's notes);
     * owned (ls_parity_adapter_free) */
    cJSON *like_notes;
} ls_parity_adapter;

/* Reads and checks the adapter file path into *a (its doc the caller's:
 * ls_parity_adapter_free).  LS_ERR_ARG/LS_ERR_FORMAT/LS_ERR_IO with err
 * naming the file and the field; *a then holds nothing. */
ls_status ls_parity_adapter_load(const char *path, ls_parity_adapter *a, char *err, size_t errlen);
void ls_parity_adapter_free(ls_parity_adapter *a);

/* Checks one template string: only the known placeholders (or {{ }}); err
 * names field (e.g. "args[3]") and the unknown placeholder. */
ls_status ls_parity_adapter_template_check(const char *tmpl, const char *field, char *err, size_t errlen);

/* The placeholders' values of one run. */
typedef struct {
    const char *mode; /* init | run | reference | loss */
    int cp;
    int dp; /* {dp}: the data-parallel size (0 reads as 1) */
    const char *dtype, *grad_mode, *fault, *weights, *batch, *out;
    uint64_t seed;
} ls_parity_adapter_vars;

/* template expanded with v into out (cap bytes); LS_ERR_ARG when it does not fit. */
ls_status ls_parity_adapter_expand(const ls_parity_adapter *a, const char *tmpl, const ls_parity_adapter_vars *v,
                                   char *out, size_t cap);
/* *j (zeroed first; its log set to log) made the run v: launch "1" for
 * one process (cp x dp = 1), "n" otherwise, then the args, every string
 * expanded.  The job's
 * arguments are the caller's (ls_parity_job_free). */
ls_status ls_parity_adapter_job(const ls_parity_adapter *a, const ls_parity_adapter_vars *v, const char *log,
                                ls_parity_job *j, char *err, size_t errlen);

/* The matrix (parity_adapter_run.c): o->out, cps, dtypes, dps (with
 * dp_cp, dp_dtype, dp_detached), jobs, timeout, fd_*, seed, quiet from the
 * options; o->family is the adapter's profile.  Every DP size D > 1 of
 * o->dps also runs at each CP size c with c x D <= LS_PARITY_MAX_CP (only
 * o->dp_cp when set), full mode (and detached with dp_detached), in the
 * dtypes dp_dtype, with the adapter's dp_grad controls; each D must be the
 * adapter's and divide its batch's group (LS_ERR_ARG naming --dp).
 * Writes OUT/parity.json as ls_parity_run does. */
ls_status ls_parity_adapter_run(const ls_parity_opts *o, const ls_parity_adapter *a, bool *all_pass, char *err,
                                size_t errlen);

/* Whether the DP size o->dps[e] (e >= 1) runs at the CP size o->cps[k]: its cps[k] x dps[e] processes fit
 * LS_PARITY_MAX_CP and, with o->dp_cp, cps[k] is that CP size. */
bool ls_parity_adapter_dp_fits(const ls_parity_opts *o, size_t e, size_t k);

/* --like RUN with an adapter (parity_adapter_like.c): from the run's manifest (schema-checked) its
 * profile (the adapter's), objective (the adapter's), faults (none), DP size (config dp_ranks, absent 1:
 * o->dps 1 and it, at the run's CP size only, o->dp_cp; it must divide the world and be the adapter's),
 * CP size (world / dp; o->cps: 1, 2, 4, ... and the run's, each one the adapter supports), dtype (f64,
 * and f32 when the run's; the DP runs the run's only), gradient mode (the DP runs' too), its recorded path
 * (o->like_paths) and, from its traces, its prompt: the captured positions T each rank's first
 * prompt forward (a layer_end of member -1, layer -1, fwd, not a recompute) counted, the prompt P =
 * T + 1 (docs/model.md section 4).  The batch's prompt (a->prompt_len) is then the run's when
 * 17 <= P <= 64, else the shortest of at least 33 tokens whose captured positions leave the run's
 * remainder at every CP size; shards uneven at the run's CP size when its path recorded uneven
 * (even when even).  Usage or run errors: LS_ERR_ARG / LS_ERR_FORMAT / LS_ERR_IO, err naming them. */
ls_status ls_parity_adapter_like(const char *run_dir, ls_parity_opts *o, ls_parity_adapter *a, char *err,
                                 size_t errlen);

/* The prompt-only path (parity_adapter_sampled.c): with a->prompt_only, mode run on a batch of the
 * prompt alone at every CP size (float64, full), the reference on the batch CP-1 wrote (its responses
 * and rewards; no old log-probs: on-policy), and the checks: CP-N's dumped batch and log-probs against
 * CP-1's (logprob), the trainer's policy and old log-probs against the reference's (ref_logprob),
 * cp_grad and cp_params, the gradient against the reference's on-policy gradient (grad), the loss
 * against the reference's (ref_loss: the on-policy GRPO loss is 0, judged against 1 where the
 * reference's is smaller).  dir: the matrix's run directory; weights: the init weights. */
ls_status ls_parity_adapter_sampled(const ls_parity_opts *o, const ls_parity_adapter *a, ls_parity_report *rep,
                                    const char *dir, const char *weights, char *err, size_t errlen);

/* Reads logprobs.safetensors of a run whose group and response lengths are g and lens (member.0 ..
 * member.G-1, or one tensor "logprobs" of every response token in member order). */
ls_status ls_parity_adapter_read_logprobs(const char *path, int g, const int *lens, ls_parity_logprobs *out, char *err,
                                          size_t errlen);
/* mode run's loss.json: {"loss": X}, X finite. */
ls_status ls_parity_adapter_read_loss(const char *path, double *loss, char *err, size_t errlen);
/* The objective a fault-free run recorded (run_dir's manifest) must be the adapter's (err names both). */
ls_status ls_parity_adapter_objective_pinned(const ls_parity_adapter *a, const char *run_dir, char *err, size_t errlen);
/* The DP size a run recorded (run_dir's manifest: config dp_ranks, absent 1) must be the one it was launched
 * at ({dp}): LS_ERR_FORMAT naming the run and both sizes (a trainer that ignored {dp} proves no DP). */
ls_status ls_parity_adapter_dp_pinned(const char *run_dir, int dp, char *err, size_t errlen);

/* The finite differences of the loss mode (parity_adapter_fd.c): along a
 * random unit direction per trainable tensor (or layer group: o->fd_groups)
 * of the float64 weights, against g_run's and g_ref's directional
 * derivatives; two fd_grad checks (run, reference) into checks (the
 * caller's). */
ls_status ls_parity_adapter_fd(const ls_parity_opts *o, const ls_parity_adapter *a, const char *dir,
                               const char *weights, const char *batch, const ls_parity_tensors *g_run,
                               const ls_parity_tensors *g_ref, const char *config, cJSON *checks[2], int *runs,
                               char *err, size_t errlen);

#endif
