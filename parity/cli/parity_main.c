/* parity_main.c - longstraw-parity: the reduced-size comparisons that levels
 * 2-4 of docs/design.md §5 need, written to DIR/parity.json (exit 0 when every
 * level holds and every control failed as it should, 1 when not, 2 for bad
 * usage or a matrix that could not run). */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli_opts.h"
#include "parity/plan/parity.h"
#include "parity/plan/parity_adapter.h"
#include "receipts/signing/dsse.h"
#include "receipts/format/json_util.h"

#ifndef LS_PARITY_TRAINER
#define LS_PARITY_TRAINER "longstraw-train"
#endif
#ifndef LS_PARITY_SOURCE_DIR
#define LS_PARITY_SOURCE_DIR "."
#endif

/* The command line (one table, OPTS: parsing and --help); the values
 * parse_cps & co. read are kept as given until the matrix is chosen. */
typedef struct {
    ls_parity_opts o;
    const char *cps, *eps, *dps, *dtypes, *configs, *key, *fd_groups, *adapter;
    int keep_fd, quiet, list, help, list_names, jobs, timeout_s;
    size_t fd_max;
    uint64_t seed;
    double fd_step;
} cli;

#define F(field) .off = offsetof(cli, field)
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_TEXT,
     .help =
         "usage: longstraw-parity --family F --out DIR [--cp 1,2,4] [--eps 1,2] [--dtype f64,f32]\n"
         "                        [--configs NAME,...] [--jobs N] [options]\n"
         "       longstraw-parity --adapter FILE --out DIR [--cp LIST] [--dp LIST] [--dtype LIST] [--jobs N] [options]\n"
         "       longstraw-parity --adapter FILE --like RUN --out DIR [--jobs N] [options]\n"
         "Runs the trainer at reduced sizes against references and writes DIR/parity.json\n"
         "(schemas/parity.schema.json), the evidence levels 2-4 of the audit need:\n"
         "  fidelity      LongStraw CP-N response log-probs = the naive full-sequence run's, and the\n"
         "                naive float64 log-probs and loss = the independent reference's\n"
         "                (tests/reference/, Python written from docs/model.md)\n"
         "  consistency   CP-N gradients and updated parameters = CP-1's (full and detached)\n"
         "  full gradient LongStraw full-mode CP-N gradient = the naive gradient, and the float64\n"
         "                gradient = directional finite differences of the loss, per tensor\n"
         "and the negative controls, each of which must fail its comparison: cp-local-attention\n"
         "(hybrid) or cp-local-dsa (mla: each rank's own DSA top-k) on the log-probs,\n"
         "skip-dkv-reduce and skip-grad-finalize (CP-N gradients), detached (the\n"
         "full-gradient comparison).  float64 is the proof (tolerance 1e-10 relative; finite\n"
         "differences 1e-7); float32 uses, per tensor, 10x its measured float32-vs-float64 noise\n"
         "floor (at least 4 float32 epsilons); updated parameters may differ by what AdamW's first\n"
         "step makes of each run's own gradient, plus a rounding.  mla: no verdict across a near-tie\n"
         "(every discrete decision's margin, measured by the reference, must clear the composition\n"
         "noise 64 times over; the fixture's weights are drawn again, up to 4 times, until it does).\n"
         "Runs go to DIR/runs/ (kept; the finite-difference runs are removed unless --keep-fd);\n"
         "parity.json is replaced only when complete; with --key it is signed into DIR/parity.dsse.json\n"
         "(for longstraw-audit --parity-key).\n"},
    {.kind = LS_CLI_STRING, .name = "--family", .arg = "F", F(o.family),
     .help = "a family of the trainer's registry (longstraw-train --families: hybrid, mla,\n"
             "dense): its tiny config, reference and parity facts follow"},
    {.kind = LS_CLI_STRING, .name = "--out", .arg = "DIR", F(o.out),
     .help = "output directory (created; an existing one is reused)"},
    {.kind = LS_CLI_STRING, .name = "--cp", .arg = "LIST", F(cps),
     .help = "context-parallel sizes, 1 included [1,2,4]; N > 1 runs under mpirun"},
    {.kind = LS_CLI_STRING, .name = "--eps", .arg = "LIST", F(eps),
     .help = "mla: expert-parallel sizes, 1 included [1]: each N > 1 also runs at every CP\n"
             "size c with c x N <= 8 ranks (--ep N; its log-probs and gradients against\n"
             "EP-1's and the references, ep-drop-dx its control); the report's coverage\n"
             "then states the EP sizes (eps), without which no EP-N run is covered"},
    {.kind = LS_CLI_STRING, .name = "--dp", .arg = "LIST", F(dps),
     .help = "--adapter: data-parallel sizes, 1 included, each in the adapter's 'dp' and\n"
             "dividing its batch's group [1]: each D > 1 also runs at every CP size c with\n"
             "c x D <= 8 processes ({dp} D: full mode, every dtype, the prompt-only path,\n"
             "the adapter's dp_grad controls), compared as CP runs and, as dp_grad, against\n"
             "DP-1 at the same CP size; the report's coverage then states the DP sizes\n"
             "(dps), without which no DP-D run is covered"},
    {.kind = LS_CLI_STRING, .name = "--dtype", .arg = "LIST", F(dtypes),
     .help = "f64 and optionally f32 [f64,f32] (f32's noise floor needs f64)"},
    {.kind = LS_CLI_STRING, .name = "--configs", .arg = "LIST", F(configs), .help = "matrix entries to run [all]; --list prints them"},
    {.kind = LS_CLI_INT, .name = "--jobs", .arg = "N", F(jobs), .min = 1, .max = 64,
     .help = "trainer runs at a time [online CPUs, at most 16]", .bad = "is not an integer in 1..64"},
    {.kind = LS_CLI_INT, .name = "--timeout", .arg = "S", F(timeout_s), .min = 1, .max = 86400,
     .help = "seconds per trainer run before it is killed [600]", .bad = "is not a number of seconds in 1..86400"},
    {.kind = LS_CLI_REAL, .name = "--fd-step", .arg = "H", F(fd_step), .lo = 1e-6, .hi = 1e-1,
     .help = "the larger finite-difference step (the other is H/2) [1e-4]", .bad = "is not in 1e-6..0.1"},
    {.kind = LS_CLI_SIZE, .name = "--fd-max", .arg = "N", F(fd_max), .min = 1, .max = 1 << 20,
     .help = "finite differences for only N evenly spaced directions (tensors or\n"
             "groups; a quick look: level 4 then does not hold) [all]",
     .bad = "is not a positive integer"},
    {.kind = LS_CLI_STRING, .name = "--fd-groups", .arg = "G", F(fd_groups),
     .help = "what one finite-difference direction spans: tensor (every trainable\n"
             "tensor its own: 4 runs each) or layer (one direction over each layer's\n"
             "trainable tensors, one more over those outside the layers: 4 runs per\n"
             "group; a wrong gradient in a tensor with a small share of its group's\n"
             "derivative must be wrong by more to be seen; docs/parity.md) [tensor; layer\n"
             "with --like]"},
    {.kind = LS_CLI_U64, .name = "--seed", .arg = "N", F(seed), .min = 0, .max = 1 << 30,
     .help = "weights, directions [1]", .bad = "is not an integer in 0..2^30"},
    {.kind = LS_CLI_STRING, .name = "--trainer", .arg = "PATH", F(o.trainer), .help = "longstraw-train [" LS_PARITY_TRAINER "]"},
    {.kind = LS_CLI_STRING, .name = "--mpirun", .arg = "PATH", F(o.mpirun), .help = "[mpirun]"},
    {.kind = LS_CLI_STRING, .name = "--python", .arg = "PATH", F(o.python), .help = "[python3]"},
    {.kind = LS_CLI_STRING, .name = "--reference", .arg = "PATH", F(o.reference),
     .help = "the independent reference [the registry's: " LS_PARITY_SOURCE_DIR "/<its reference>]"},
    {.kind = LS_CLI_STRING, .name = "--model-config", .arg = "F", F(o.model_config),
     .help = "[the registry's: " LS_PARITY_SOURCE_DIR "/<its tiny_config>]"},
    {.kind = LS_CLI_STRING, .name = "--adapter", .arg = "FILE", F(adapter),
     .help = "the matrix for the trainer the adapter FILE describes\n"
             "(schemas/parity-adapter.schema.json, docs/parity.md 'Adapters'): its\n"
             "modes init, run, reference and loss, its controls; --cp and --dtype\n"
             "default to the adapter's; the report's family is its profile; with\n"
             "--like RUN (a run of the adapter's trainer) the CP sizes, dtypes, the\n"
             "prompt's length and shard split and the run's path come from the run,\n"
             "and its DP size (config dp_ranks D: DP 1 and D at its CP size world / D)"},
    {.kind = LS_CLI_STRING, .name = "--like", .arg = "RUN", F(o.like),
     .help = "cover the run in RUN: its model (written to DIR/like-model.json), trainable\n"
             "set, objective, dtype (f32 adds f64) and CP sizes 1, 2, 4, .. up to its own\n"
             "(an expert-parallel run's: world / ep_ranks, and EP sizes 1 and its own),\n"
             "at parity's reduced lengths; the first matrix entry unless --configs; and\n"
             "path runs that launch the trainer the way the run did (its recorded paths:\n"
             "its own sampling and scoring, the keep-reference decision, prompts per\n"
             "step, shards, pages and chunks split as the run's).  The CI recipe: train,\n"
             "longstraw-parity --like RUN, longstraw-audit RUN --parity"},
    /* the private key every signing tool takes (longstraw-sign --key): DIR/parity.json signed into
       DIR/parity.dsse.json, for longstraw-audit --parity-key */
    {.like = "--sign-key", .name = "--key", F(key)},
    {.kind = LS_CLI_FLAG, .name = "--keep-fd", F(keep_fd), .help = "keep the finite-difference runs"},
    {.like = "--quiet", .name = "--quiet", F(quiet)},
    {.kind = LS_CLI_FLAG, .name = "--list", F(list), .help = "print the matrix and exit"},
    {.like = "--list-names", .name = "--list-names", F(list_names)},
    {.like = "--help", .name = "--help", F(help)},
    {.kind = LS_CLI_TEXT,
     .help = "Exit: 0 every level holds and every control was detected, 1 not (the report says why),\n"
             "2 bad usage or a run that failed (nothing written).\n"},
};
#undef F

static void usage(FILE *f) { ls_cli_usage(f, (ls_cli_table){OPTS, sizeof OPTS / sizeof OPTS[0]}, NULL, 0, 20); }

static int bad(const char *fmt, const char *arg) {
    fprintf(stderr, "longstraw-parity: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (--help for usage)\n");
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* --cp, --eps: distinct sizes in 1..8, 1 included, ascending into sizes[*n] */
static int parse_sizes(const char *s, int *sizes, size_t *n) {
    bool seen[LS_PARITY_MAX_CP + 1] = {false};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (parse_long(t, 1, LS_PARITY_MAX_CP, &v) != 0 || seen[v]) return -1;
        seen[v] = true;
    }
    *n = 0;
    for (int v = 1; v <= LS_PARITY_MAX_CP; v++)
        if (seen[v]) sizes[(*n)++] = v;
    return *n > 0 && sizes[0] == 1 ? 0 : -1;
}
static int parse_cps(const char *s, ls_parity_opts *o) { return parse_sizes(s, o->cps, &o->n_cps); }
static int parse_eps(const char *s, ls_parity_opts *o) { return parse_sizes(s, o->eps, &o->n_eps); }
static int parse_dps(const char *s, ls_parity_opts *o) { return parse_sizes(s, o->dps, &o->n_dps); }

static int parse_dtypes(const char *s, ls_parity_opts *o) {
    o->dtype[0] = o->dtype[1] = false;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "f64") == 0) o->dtype[LS_PARITY_F64] = true;
        else if (strcmp(t, "f32") == 0) o->dtype[LS_PARITY_F32] = true;
        else return -1;
    }
    return o->dtype[LS_PARITY_F64] ? 0 : -1;
}

static int parse_configs(const char *s, ls_parity_opts *o, const ls_parity_config *cs, size_t n) {
    for (size_t i = 0; i < n; i++) o->config_on[i] = false;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < n && strcmp(cs[i].name, t) != 0) i++;
        if (i == n) return bad("--configs: no matrix entry '%s' (--list names them)", t);
        o->config_on[i] = true;
    }
    return 0;
}

/* A matrix (the families' or an adapter's, ctx its own): LS_OK with *pass set, or an error in err. */
typedef ls_status (*matrix_fn)(const ls_parity_opts *o, void *ctx, bool *pass, char *err, size_t errlen);

static ls_status family_matrix(const ls_parity_opts *o, void *ctx, bool *pass, char *err, size_t errlen) {
    (void)ctx;
    return ls_parity_run(o, pass, err, errlen);
}

static ls_status adapter_matrix(const ls_parity_opts *o, void *ctx, bool *pass, char *err, size_t errlen) {
    return ls_parity_adapter_run(o, ctx, pass, err, errlen);
}

/* The matrix run, its report signed with --key: exit 0 every level holds and every control was detected,
 * 1 not, 2 usage or a run that failed. */
static int run_and_sign(const ls_parity_opts *o, const char *key, matrix_fn run, void *ctx) {
    bool pass = false;
    char err[2048] = "", report[LS_PARITY_PATH], envelope[LS_PARITY_PATH];
    EVP_PKEY *priv = NULL;
    snprintf(report, sizeof report, "%s/parity.json", o->out);
    if (ls_dsse_parity_envelope_path(report, envelope, sizeof envelope, err, sizeof err) != LS_OK)
        return bad("--out: %s", err);
    if (key && ls_dsse_load_private(key, &priv, err, sizeof err) != LS_OK) return bad("--key: %s", err);
    /* an envelope of an earlier report must not stand beside a new one */
    if (unlink(envelope) != 0 && errno != ENOENT) {
        fprintf(stderr, "longstraw-parity: cannot remove the earlier envelope %s: %s\n", envelope, strerror(errno));
        EVP_PKEY_free(priv);
        return 2;
    }
    ls_status s = run(o, ctx, &pass, err, sizeof err);
    if (s != LS_OK) {
        if (err[0]) fprintf(stderr, "longstraw-parity: %s; no report written\n", err);
        else fprintf(stderr, "longstraw-parity: %s; no report written\n", ls_status_str(s));
        EVP_PKEY_free(priv);
        return 2;
    }
    if (priv && (s = ls_dsse_sign_parity(report, priv, err, sizeof err)) != LS_OK) {
        fprintf(stderr, "longstraw-parity: --key: %s; %s is written but not signed\n", err, report);
        EVP_PKEY_free(priv);
        return 2;
    }
    if (priv && !o->quiet) fprintf(stderr, "longstraw-parity: signed %s into %s\n", report, envelope);
    EVP_PKEY_free(priv);
    return pass ? 0 : 1;
}

/* --adapter FILE: the options it excludes, the adapter loaded, its matrix. */
static int adapter_main(ls_parity_opts *o, const char *file, const char *cps, const char *dtypes, const char *dps,
                        const char *key, const char *configs) {
    if (o->family || o->model_config || o->reference || configs || strcmp(o->trainer, LS_PARITY_TRAINER) != 0)
        return bad("%s", "--adapter FILE describes the trainer: drop --family, --trainer, --reference, "
                         "--model-config, --configs");
    if (o->like && (cps || dtypes || dps))
        return bad("%s", "--like sets the CP sizes, DP sizes and dtypes from the run: drop --cp, --dp, --dtype");
    if (o->out == NULL) return bad("%s", "--out DIR is required");
    if (strlen(o->out) > LS_PARITY_OUT_MAX) return bad("--out: '%.40s...' is longer than 512 characters", o->out);
    static ls_parity_adapter a;
    char err[2048] = "";
    if (ls_parity_adapter_load(file, &a, err, sizeof err) != LS_OK) {
        fprintf(stderr, "longstraw-parity: %s\n", err);
        return 2;
    }
    o->family = a.profile;
    o->trainer = a.path;
    o->model_config = a.path;
    o->n_cps = 0;
    for (size_t i = 0; i < a.n_cps; i++) o->cps[o->n_cps++] = a.cps[i];
    for (size_t i = 1; i < o->n_cps; i++) /* ascending, as parse_cps leaves them */
        for (size_t k = i; k > 0 && o->cps[k - 1] > o->cps[k]; k--) {
            int t = o->cps[k];
            o->cps[k] = o->cps[k - 1], o->cps[k - 1] = t;
        }
    o->dtype[LS_PARITY_F64] = a.dtype[LS_PARITY_F64];
    o->dtype[LS_PARITY_F32] = a.dtype[LS_PARITY_F32];
    if (cps && parse_cps(cps, o) != 0) {
        ls_parity_adapter_free(&a);
        return bad("--cp: '%s' is not a list of distinct sizes in 1..8 that includes 1", cps);
    }
    if (dtypes && parse_dtypes(dtypes, o) != 0) {
        ls_parity_adapter_free(&a);
        return bad("--dtype: '%s' is not f64 or f64,f32 (float32's tolerance is measured against float64)", dtypes);
    }
    /* --dp (default 1 only): each size the adapter's (field 'dp') and a divisor of its group, checked with the
       matrix (ls_parity_adapter_run); the DP runs take every dtype of the report, full mode */
    if (dps && parse_dps(dps, o) != 0) {
        ls_parity_adapter_free(&a);
        return bad("--dp: '%s' is not a list of distinct sizes in 1..8 that includes 1", dps);
    }
    o->dp_dtype[LS_PARITY_F64] = o->dtype[LS_PARITY_F64];
    o->dp_dtype[LS_PARITY_F32] = o->dtype[LS_PARITY_F32];
    /* --like RUN: the CP sizes, dtypes, prompt and path from a run of the adapter's trainer */
    if (o->like && ls_parity_adapter_like(o->like, o, &a, err, sizeof err) != LS_OK) {
        fprintf(stderr, "longstraw-parity: %s\n", err);
        ls_parity_adapter_free(&a);
        return 2;
    }
    int rc = run_and_sign(o, key, adapter_matrix, &a);
    ls_parity_adapter_free(&a);
    return rc;
}

/* --list-names: the families and the trainer faults the matrices inject, as JSON on stdout. */
static int list_names(void) {
    cJSON *d = cJSON_CreateObject(), *fam = cJSON_AddArrayToObject(d, "families"),
          *faults = cJSON_AddArrayToObject(d, "faults");
    bool ok = d && fam && faults && cJSON_AddStringToObject(d, "tool", "longstraw-parity");
    for (size_t i = 0; ok && ls_parity_family_at(i); i++)
        ok = cJSON_AddItemToArray(fam, cJSON_CreateString(ls_parity_family_at(i)));
    for (size_t i = 0; ok && ls_parity_fault_at(i); i++)
        ok = cJSON_AddItemToArray(faults, cJSON_CreateString(ls_parity_fault_at(i)));
    char *txt = ok ? cJSON_Print(d) : NULL;
    cJSON_Delete(d);
    if (!txt) {
        fprintf(stderr, "longstraw-parity: --list-names: out of memory\n");
        return 2;
    }
    printf("%s\n", txt);
    free(txt);
    return 0;
}

static int main_body(int argc, char **argv, ls_parity_opts *o) {
    static char reference[LS_PARITY_PATH], model[LS_PARITY_PATH];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (ls_parity_opts){.trainer = LS_PARITY_TRAINER, .mpirun = "mpirun", .python = "python3",
                        .jobs = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu,
                        .timeout_s = 600, .fd_step = 1e-4, .seed = 1,
                        /* temperature 0.9: the scaling of the logits exercised; epsilon and beta the trainer's */
                        .temperature = 0.9, .epsilon = 0.2, .beta = 0.04};
    static char like_model[LS_PARITY_PATH];
    parse_cps("1,2,4", o);
    parse_eps("1", o);
    parse_dps("1", o);
    parse_dtypes("f64,f32", o);
    cli c = {.o = *o, .jobs = o->jobs, .timeout_s = o->timeout_s, .seed = o->seed, .fd_step = o->fd_step};
    char perr[512];
    const ls_cli_parser p = {.table = {OPTS, sizeof OPTS / sizeof OPTS[0]}, .once = 1};
    if (ls_cli_parse(&p, &c, argc, argv, 1, perr, sizeof perr) != 0) return bad("%s", perr);
    if (c.help) {
        usage(stdout);
        return 0;
    }
    if (c.list_names) return list_names();
    *o = c.o;
    o->keep_fd = c.keep_fd;
    o->quiet = c.quiet;
    o->jobs = c.jobs;
    o->timeout_s = c.timeout_s;
    o->fd_max = c.fd_max;
    o->seed = c.seed;
    o->fd_step = c.fd_step;
    const char *eps = c.eps, *dps = c.dps, *cps = c.cps, *dtypes = c.dtypes, *configs = c.configs, *key = c.key,
               *fd_groups = c.fd_groups, *adapter = c.adapter;
    bool list = c.list;
    /* --like: a run's whole model (hundreds of trainable tensors) in minutes; the matrices: per tensor */
    o->fd_groups = o->like ? LS_PARITY_FD_LAYER : LS_PARITY_FD_TENSOR;
    if (fd_groups) {
        if (!strcmp(fd_groups, "tensor")) o->fd_groups = LS_PARITY_FD_TENSOR;
        else if (!strcmp(fd_groups, "layer")) o->fd_groups = LS_PARITY_FD_LAYER;
        else return bad("--fd-groups: '%s' is not tensor or layer", fd_groups);
    }
    if (adapter && eps)
        return bad("%s", "--eps: an adapter's trainer is launched by its adapter file, which states no expert "
                         "parallelism: drop --eps");
    if (adapter) return adapter_main(o, adapter, cps, dtypes, dps, key, configs);
    if (dps)
        return bad("%s", "--dp: data parallelism is an adapter's trainer's ({dp} replicas of a CP group; "
                         "longstraw-train has none): use it with --adapter");
    /* the families and their parity facts: the registry of the trainer parity drives (--families) */
    ls_parity_families_trainer(o->trainer);
    if (access(o->trainer, X_OK) != 0) return bad("--trainer: %s is not an executable (build longstraw-train)", o->trainer);
    if (o->like) {
        if (o->out == NULL) return bad("%s", "--out DIR is required");
        if (strlen(o->out) > LS_PARITY_OUT_MAX) return bad("--out: '%.40s...' is longer than 512 characters", o->out);
        if (cps || eps || dtypes || o->model_config)
            return bad("%s", "--like sets the model config, CP and EP sizes and dtypes from the run: drop --cp, "
                             "--eps, --dtype, --model-config");
        char lerr[1024];
        if (ls_parity_like(o->like, o, like_model, sizeof like_model, lerr, sizeof lerr) != 0) {
            fprintf(stderr, "longstraw-parity: %s\n", lerr);
            return 2;
        }
    }
    if (o->family == NULL) return bad("--family is required (%s)", ls_parity_family_names());
    o->fam = ls_parity_family_of(o->family);
    if (o->fam == NULL && *ls_parity_families_error()) return bad("--trainer: %s", ls_parity_families_error());
    if (o->fam == NULL) {
        char what[160];
        snprintf(what, sizeof what, "'%.40s' is not a family (%s)", o->family, ls_parity_family_names());
        return bad("--family: %s", what);
    }
    size_t n = o->fam->n_configs;
    const ls_parity_config *cs = o->fam->configs;
    if (o->reference == NULL) {
        snprintf(reference, sizeof reference, "%s/%s", LS_PARITY_SOURCE_DIR, o->fam->reference);
        o->reference = reference;
    }
    if (o->model_config == NULL) {
        snprintf(model, sizeof model, "%s/%s", LS_PARITY_SOURCE_DIR, o->fam->model_config);
        o->model_config = model;
    }
    if (list) {
        for (size_t i = 0; i < n; i++) printf("%-14s %s\n", cs[i].name, cs[i].what);
        return 0;
    }
    for (size_t i = 0; i < n; i++) o->config_on[i] = !o->like || i == 0; /* --like: one entry unless --configs */
    if (configs && parse_configs(configs, o, cs, n) != 0) return 2;
    if (!o->like && cps && parse_cps(cps, o) != 0)
        return bad("--cp: '%s' is not a list of distinct sizes in 1..8 that includes 1", cps);
    if (!o->like && eps && parse_eps(eps, o) != 0)
        return bad("--eps: '%s' is not a list of distinct sizes in 1..8 that includes 1", eps);
    if (o->n_eps > 1 && !o->fam->routed_experts)
        return bad("--eps: family %s has no routed experts (expert parallelism needs them)", o->family);
    if (!o->like && dtypes && parse_dtypes(dtypes, o) != 0)
        return bad("--dtype: '%s' is not f64 or f64,f32 (float32's tolerance is measured against float64)", dtypes);
    if (o->out == NULL) return bad("%s", "--out DIR is required");
    if (strlen(o->out) > LS_PARITY_OUT_MAX) return bad("--out: '%.40s...' is longer than 512 characters", o->out);
    for (const char **p = (const char *[]){o->trainer, o->mpirun, o->python, o->reference, o->model_config, NULL}; *p; p++)
        if (strlen(*p) > LS_PARITY_OUT_MAX) return bad("a path is longer than 512 characters: '%.40s...'", *p);
    if (access(o->reference, R_OK) != 0) return bad("--reference: cannot read %s", o->reference);
    if (access(o->model_config, R_OK) != 0) return bad("--model-config: cannot read %s", o->model_config);
    if (o->n_eps > 1) { /* every EP size must divide the model's routed experts (the trainer's --ep refuses it) */
        cJSON *mc = NULL;
        char why[512];
        if (ls_json_read_file_capped(o->model_config, 1u << 20, &mc, why, sizeof why) != LS_OK)
            return bad("--model-config: %s", why);
        /* the key holding them: the family's parity facts (decisions.experts) */
        const cJSON *ne = o->fam->decisions ? cJSON_GetObjectItemCaseSensitive(mc, o->fam->dkeys.experts) : NULL;
        int n_experts = cJSON_IsNumber(ne) && ne->valuedouble >= 1 && ne->valuedouble <= (1 << 20) ? (int)ne->valuedouble : 0;
        cJSON_Delete(mc);
        for (size_t i = 1; i < o->n_eps; i++)
            if (n_experts == 0 || n_experts % o->eps[i] != 0) {
                char what[192];
                snprintf(what, sizeof what, "%d does not divide the %d routed experts of %.100s", o->eps[i], n_experts,
                         o->model_config);
                return bad("--eps: %s", what);
            }
    }
    return run_and_sign(o, key, family_matrix, NULL);
}

/* --like's copy of the run's path (ls_parity_opts.like_paths) is released however the body returns */
int main(int argc, char **argv) {
    ls_parity_opts o;
    memset(&o, 0, sizeof o);
    int rc = main_body(argc, argv, &o);
    cJSON_Delete(o.like_paths);
    return rc;
}
