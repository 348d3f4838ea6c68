/* parity_path.c - longstraw-parity --like RUN: the run's own path (parity.h).
 *
 * The matrix's runs are given their responses and their old and reference
 * log-probs in a batch file, so what decides and computes those in a run
 * that samples (the rollout, the old policy's scoring, the reference
 * policy's prompt state kept beside the policy's or recaptured in its
 * place) never ran under it: a CP full-mode gradient that the reference's
 * capture corrupted (--keep-reference on) was certified.  The path runs
 * launch the trainer the way the run did, at reduced size: for each value
 * of the run's path (its configuration's "paths", docs/evidence.md) the
 * same source of responses (the built-in task, sampled by the trainer; or
 * a given batch), of old log-probs (computed, or given) and of the
 * reference (--keep-reference on for kept, off for recaptured; before and
 * given with a batch; none with beta 0), the same prompts per step (B, at
 * most 4: "one" or "several" is the path), the same task and gradient mode,
 * and lengths that split the captured positions over every CP size > 1 as
 * the run's did (uneven or even) and whose pages and capture chunks a
 * shard boundary cuts, or not, as the run's did; LoRA B random, so that
 * the policy differs from the reference.  Every path runs in float64 (the
 * proof's dtype; a path selects the same source in both dtypes, and a
 * float32 rollout at CP-N may draw another token than CP-1's where a
 * sampling boundary falls within rounding).
 *
 * Per path, at every CP size of the report (and, for an expert-parallel
 * run, at its EP size too: --ep N on cp x N ranks at every CP size whose
 * grid fits 8 ranks, with the control ep-drop-dx): the LongStraw run (its
 * --dump-batch: the sampled responses and the old and reference log-probs
 * it computed; --dump-grads; the weights after the step); for B = 1 the
 * naive full sequence on the CP-1 run's dumped batch (given its old and
 * reference log-probs), and in full mode the finite differences of that
 * batch's loss (parity_fd.c); the independent reference on that batch; for
 * the hybrid family, a kept reference and full mode, the cp-stale-start
 * control at every CP size > 1.  The draw of weights, prompt and rollout
 * (seed) is redrawn, at most PATH_DRAWS times, while the group's rewards
 * are all equal (no policy term in the gradient).  Checks (f64, 1e-10):
 *   logprob      CP-N's dumped batch against CP-1's: the same prompt and
 *                responses sampled, old and reference log-probs (level 2)
 *   ref_logprob  every CP size's old and reference log-probs (where the
 *                trainer computed them) against the independent reference
 *                on the dumped batch (level 2)
 *   decisions    (mla) the path batch's decisions against the noise
 *   cp_grad, cp_params  CP-N gradient and updated weights against CP-1's
 *                (level 3); cp-stale-start must fail cp_grad; an EP-N
 *                run's against the EP-1 run of its CP size (each check's
 *                "ep": N, world cp x N), ep-drop-dx must fail it; the EP
 *                runs' logprob, ref_logprob, grad and ref_loss as above
 *   grad         (full, B = 1) every CP size's gradient against the naive
 *                full-sequence gradient on the dumped batch (level 4)
 *   fd_grad      (full, B = 1) the naive and CP-1 gradients against finite
 *                differences of that batch's loss (level 4)
 *   ref_loss     (B = 1) every CP size's loss and the naive run's against
 *                the independent reference's (level 4)
 * so that "the path's gradient = the naive gradient = the finite
 * differences" holds on the run's own path. */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/plan/parity.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"

#define PATH_DRAWS 16 /* draws of seed while the group's rewards are all equal */
#define PATH_G 4      /* members per group (reducible; more members, more often a reward differs) */
#define PATH_R 8      /* response tokens per sampled member */
static const int GIVEN_LENS[] = {6, 4, 5, 3}; /* a given batch's members: unequal responses */
#define PATH_MAX_B 4  /* prompts per step: "several" is the path, not how many */
#define PATH_MAX 8    /* paths per report */
/* a chunked replay's chunk in the path runs: every response of the path (R >= 4) in two chunks or more, the
   last one shorter (the run's own chunk size is a shape, not a path: the chunk boundaries are the code) */
#define PATH_REPLAY_CHUNK_S "3"
#define F64_TOL LS_PARITY_F64_TOL
#define MAX_BATCH_BYTES (64u << 20)

static const char *opt_str(const cJSON *o, const char *k, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* ---- the plan: which paths, at which lengths ------------------------------------------------- */

typedef struct {
    const char *responses, *old, *reference, *task; /* the trainer's words; task NULL: given */
    const char *shards, *pages, *chunks;             /* wanted at every CP size > 1 */
    const char *replay;                              /* taped, layer or chunk (--replay-checkpoint none, layer, or
                                                        chunk in chunks of PATH_REPLAY_CHUNK tokens) */
    const char *tier;                                /* device or host (--state-tier) */
    int B, G, R, P, page, chunk;
    int lens[LS_PARITY_MAX_G]; /* the members' response lengths (sampled: R each) */
    char name[96], what[512];
} path_spec;

static bool run_took(const ls_parity_opts *o, const char *key, const char *value) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o->like_paths, key), *x;
    cJSON_ArrayForEach(x, a) if (cJSON_IsString(x) && strcmp(x->valuestring, value) == 0) return true;
    return false;
}

/* The values of key the run took among those of want (NULL-terminated), into out; dflt when none. */
static size_t took(const ls_parity_opts *o, const char *key, const char *const *want, const char *dflt,
                   const char **out) {
    size_t n = 0;
    for (size_t i = 0; want[i]; i++)
        if (run_took(o, key, want[i])) out[n++] = want[i];
    if (n == 0 && dflt) out[n++] = dflt;
    return n;
}

static bool lengths_fit(const ls_parity_opts *o, int64_t T, int page, int chunk, const path_spec *p) {
    for (size_t k = 0; k < o->n_cps; k++) {
        if (o->cps[k] < 2) continue;
        const char *sh, *pg, *ch;
        ls_coverage_shard_classes(T, o->cps[k], page, chunk, &sh, &pg, &ch);
        if (strcmp(sh, p->shards) || strcmp(pg, p->pages) || strcmp(ch, p->chunks)) return false;
    }
    return true;
}

/* The shortest prompt (at least Tmin captured positions) and a page and chunk size that split as p wants
 * at every CP size > 1; chunk 0 (all at once) where the run captured so and the chunks are aligned. */
static bool choose_lengths(const ls_parity_opts *o, int64_t Tmin, path_spec *p) {
    static const int PAGES[] = {8, 4, 16, 6, 5, 12, 32, 3, 2};
    static const int CHUNKS[] = {12, 5, 16, 10, 24, 8, 32, 64, 7, 4};
    bool whole = o->like_capture_chunk == 0 && strcmp(p->chunks, "aligned") == 0;
    for (int64_t T = Tmin; T < Tmin + 512; T++)
        for (size_t i = 0; i < sizeof PAGES / sizeof PAGES[0]; i++)
            for (size_t j = 0; j < (whole ? 1 : sizeof CHUNKS / sizeof CHUNKS[0]); j++) {
                int chunk = whole ? 0 : CHUNKS[j];
                if (!lengths_fit(o, T, PAGES[i], chunk, p)) continue;
                p->P = (int)T + 1, p->page = PAGES[i], p->chunk = chunk;
                return true;
            }
    return false;
}

static int model_int(const cJSON *mc, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(mc, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= (1 << 24) ? (int)v->valuedouble : 0;
}

static ls_status plan(const ls_parity_opts *o, const cJSON *mc, path_spec *ps, size_t *n, cJSON *notes,
                      char *err, size_t errlen) {
    /* what the run's responses, old log-probs, reference and task were */
    typedef struct {
        const char *responses, *old, *reference, *task;
    } src;
    src srcs[PATH_MAX];
    size_t ns = 0;
    const char *v[8], *w[8], *t[8];
    bool beta0 = !(o->beta > 0);
    if (run_took(o, "responses", "sampled")) {
        size_t nr = beta0 ? (v[0] = "none", 1) : took(o, "reference", (const char *[]){"kept", "recaptured", NULL}, "kept", v);
        size_t nt = took(o, "task", (const char *[]){"retrieval", "recall", NULL}, "retrieval", t);
        for (size_t i = 0; i < nr; i++)
            for (size_t j = 0; j < nt && ns < PATH_MAX; j++) srcs[ns++] = (src){"sampled", "computed", v[i], t[j]};
    }
    if (run_took(o, "responses", "given")) {
        size_t nold = took(o, "old_logprobs", (const char *[]){"computed", "given", NULL}, "given", w);
        size_t nr = beta0 ? (v[0] = "none", 1) : took(o, "reference", (const char *[]){"before", "given", NULL}, "given", v);
        for (size_t i = 0; i < nold; i++)
            for (size_t j = 0; j < nr && ns < PATH_MAX; j++) srcs[ns++] = (src){"given", w[i], v[j], NULL};
    }
    if (ns == 0) {
        snprintf(err, errlen, "--like: the run's path has no responses parity can run (sampled or given)");
        return LS_ERR_ARG;
    }
    /* the length classes: at every CP size > 1 as the run's (one rank's "one": uneven, cut) */
    typedef struct {
        const char *shards, *pages, *chunks;
    } cls;
    cls cl[8];
    size_t nc = 0;
    const char *sh[4], *pg[4], *ch[4];
    const char *rp[3];
    size_t nrp = took(o, "replay", (const char *[]){"taped", "layer", "chunk", NULL}, "taped", rp);
    const char *tr[2];
    size_t ntr = took(o, "state_tier", (const char *[]){"device", "host", NULL}, "device", tr);
    size_t nsh = took(o, "shards", (const char *[]){"uneven", "even", NULL}, "uneven", sh);
    size_t npg = took(o, "pages", (const char *[]){"cut", "aligned", NULL}, "cut", pg);
    size_t nch = took(o, "chunks", (const char *[]){"cut", "aligned", NULL}, "cut", ch);
    for (size_t i = 0; i < nsh; i++)
        for (size_t j = 0; j < npg; j++)
            for (size_t k = 0; k < nch && nc < 8; k++) cl[nc++] = (cls){sh[i], pg[j], ch[k]};
    /* each value once (coverage is the union per decision): path i takes source i and class i, cyclically */
    *n = ns > nc ? ns : nc;
    if (nrp > *n) *n = nrp;
    if (ntr > *n) *n = ntr;
    if (*n > PATH_MAX) *n = PATH_MAX;
    int B = o->like_prompts_per_step < 1 ? 1 : o->like_prompts_per_step > PATH_MAX_B ? PATH_MAX_B
                                                                                       : o->like_prompts_per_step;
    if (o->like_prompts_per_step > PATH_MAX_B) {
        char note[256];
        snprintf(note, sizeof note, "the run's %d prompts per step ran as %d in its path runs (the path is one or "
                 "several groups; how many is reducible)", o->like_prompts_per_step, B);
        cJSON_AddItemToArray(notes, cJSON_CreateString(note));
    }
    int G = PATH_G;
    /* a prompt of the built-in task has at least 64 tokens; a family with a sparse-attention top-k (its parity
     * facts' decisions.topk): every query beyond the top-k selects */
    int64_t Tmin = 63, topk = o->fam && o->fam->decisions ? model_int(mc, o->fam->dkeys.topk) : 0;
    if (topk + 9 > Tmin) Tmin = topk + 9;
    for (size_t i = 0; i < *n; i++) {
        path_spec *p = &ps[i];
        const src *s = &srcs[i % ns];
        const cls *c = &cl[i % nc];
        *p = (path_spec){.responses = s->responses, .old = s->old, .reference = s->reference, .task = s->task,
                         .shards = c->shards, .pages = c->pages, .chunks = c->chunks, .replay = rp[i % nrp], .tier = tr[i % ntr], .B = B,
                         .G = G, .R = PATH_R};
        if (!choose_lengths(o, Tmin, p)) {
            snprintf(err, errlen, "--like: no prompt of %lld..%lld positions splits %s with pages and chunks %s and %s "
                     "over CP sizes up to %d", (long long)Tmin, (long long)Tmin + 511, p->shards, p->pages, p->chunks,
                     o->cps[o->n_cps - 1]);
            return LS_ERR_ARG;
        }
        int len = snprintf(p->name, sizeof p->name, "path-%s-%s%s%s", p->responses, p->reference,
                           strcmp(p->old, "given") == 0 && strcmp(p->responses, "given") == 0 ? "-oldgiven" : "",
                           p->task && strcmp(p->task, "retrieval") != 0 ? "-recall" : "");
        if (B > 1) len += snprintf(p->name + len, sizeof p->name - (size_t)len, "-b%d", B);
        if (strcmp(p->replay, "layer") == 0) len += snprintf(p->name + len, sizeof p->name - (size_t)len, "-ckpt");
        if (strcmp(p->replay, "chunk") == 0) len += snprintf(p->name + len, sizeof p->name - (size_t)len, "-chunk");
        if (strcmp(p->tier, "host") == 0) len += snprintf(p->name + len, sizeof p->name - (size_t)len, "-host");
        if (nc > 1)
            snprintf(p->name + len, sizeof p->name - (size_t)len, "-%s-pages%s-chunks%s", p->shards, p->pages,
                     p->chunks);
        for (int m = 0; m < G; m++) p->lens[m] = p->task ? PATH_R : GIVEN_LENS[m % 4];
        char split[160] = "", chunks[48], rl[48];
        if (p->chunk) snprintf(chunks, sizeof chunks, "chunks of %d", p->chunk);
        else snprintf(chunks, sizeof chunks, "captured at once");
        size_t ro = 0;
        for (int m = 0; m < G; m++) ro += (size_t)snprintf(rl + ro, sizeof rl - ro, "%s%d", m ? "," : "", p->lens[m]);
        size_t off = 0;
        for (size_t k = 0; k < o->n_cps; k++) {
            int N = o->cps[k];
            if (N < 2) continue;
            off += (size_t)snprintf(split + off, sizeof split - off, "%s", off ? ", " : "");
            for (int r = 0; r < N && off < sizeof split; r++) {
                int64_t T = p->P - 1, a = (T / N) * r + ((T % N) * r) / N, b = (T / N) * (r + 1) + ((T % N) * (r + 1)) / N;
                off += (size_t)snprintf(split + off, sizeof split - off, "%s%lld", r ? "|" : "", (long long)(b - a));
            }
            off += (size_t)snprintf(split + off, sizeof split - off, " over %d", N);
        }
        const char *keep = strcmp(p->reference, "kept") == 0 ? " (--keep-reference on)"
                           : strcmp(p->reference, "recaptured") == 0 ? " (--keep-reference off)" : "";
        snprintf(p->what, sizeof p->what, "the run's path: responses %s%s%s%s, old log-probs %s, reference %s%s, %d "
                 "prompt%s per step; P-1=%d (%s: %s), pages of %d (%s), %s (%s), G=%d, R=%s, %s, replay %s%s, state "
                 "tier %s",
                 p->responses, p->task ? " by the " : "", p->task ? p->task : "", p->task ? " task" : "", p->old,
                 p->reference, keep, B, B > 1 ? "s" : "", p->P - 1, split[0] ? split : "one rank", p->shards, p->page,
                 p->pages, chunks, p->chunks, G, rl, o->like_grad_mode, p->replay,
                 strcmp(p->replay, "chunk") == 0 ? " (chunks of " PATH_REPLAY_CHUNK_S " tokens)" : "", p->tier);
        for (size_t e = 1; e < o->n_eps; e++) { /* the EP grid the path also runs at (ep_fits) */
            size_t wl = strlen(p->what);
            wl += (size_t)snprintf(p->what + wl, sizeof p->what - wl, "; EP-%d (--ep %d) at CP", o->eps[e], o->eps[e]);
            for (size_t k = 0; k < o->n_cps && wl < sizeof p->what; k++)
                if (o->cps[k] * o->eps[e] <= LS_PARITY_MAX_CP)
                    wl += (size_t)snprintf(p->what + wl, sizeof p->what - wl, " %d", o->cps[k]);
        }
    }
    return LS_OK;
}

/* ---- one path's runs ------------------------------------------------------------------------ */

typedef struct {
    const ls_parity_opts *o;
    ls_parity_report *rep;
    const path_spec *p;
    ls_parity_config c; /* name, what, lengths, pages, chunks: the job lines and the finite differences */
    char dir[LS_PARITY_PATH], weights[LS_PARITY_PATH], given[LS_PARITY_PATH], batch[LS_PARITY_PATH];
    uint64_t seed;
    int draw, vocab;
    bool stale, naive, full;
    const char *test_fault; /* LS_PARITY_TEST_PATH_FAULT_ENV: added to every fault-free run at CP > 1 (an ep-*
                               fault: at EP > 1) */
    cJSON *dump[LS_PARITY_MAX_CP];
    ls_parity_logprobs old[LS_PARITY_MAX_CP], ref[LS_PARITY_MAX_CP];
    ls_parity_tensors g[LS_PARITY_MAX_CP], prm[LS_PARITY_MAX_CP], gstale[LS_PARITY_MAX_CP], gnaive;
    double loss[LS_PARITY_MAX_CP], loss_naive;
    /* the expert-parallel runs: [e][k] at EP o->eps[e] (e >= 1) and CP o->cps[k], where cps[k] x eps[e]
     * ranks fit (ep_ran), with their ep-drop-dx control */
    bool ep_ran[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    cJSON *ep_dump[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    ls_parity_logprobs ep_old[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP], ep_ref[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    ls_parity_tensors ep_g[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP], ep_prm[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    ls_parity_tensors ep_gdrop[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    double ep_loss[LS_PARITY_MAX_CP][LS_PARITY_MAX_CP];
    ls_parity_adamw adamw;
    cJSON *refdoc; /* the independent reference on the CP-1 run's batch */
    char *err;
    size_t errlen;
} path_run;

static void label_path(const path_run *x, const char *label, const char *file, char *out) {
    snprintf(out, LS_PARITY_PATH, "%s/%s/%s", x->dir, label, file);
}

/* The job of one run: label "cpN", "cpN-FAULT", "cpN-epM", "cpN-epM-FAULT" or "naive"; world the ranks (CP x EP),
 * ep the EP size (1: none). */
static ls_status path_job(path_run *x, const char *label, int world, int ep, const char *fault, bool naive,
                          ls_parity_job *j) {
    const path_spec *p = x->p;
    char base[LS_PARITY_PATH], out[LS_PARITY_PATH], log[LS_PARITY_PATH], batch[LS_PARITY_PATH],
        grads[LS_PARITY_PATH], save[LS_PARITY_PATH];
    snprintf(base, sizeof base, "%s/%s", x->dir, label);
    if (ls_parity_mkdirs(base) != 0) {
        snprintf(x->err, x->errlen, "cannot create %s: %s", base, strerror(errno));
        return LS_ERR_IO;
    }
    label_path(x, label, "run", out);
    ls_parity_remove_tree(out);
    label_path(x, label, "log", log);
    label_path(x, label, "batch.json", batch);
    label_path(x, label, "grads.safetensors", grads);
    label_path(x, label, "final.safetensors", save);
    char nums[4][24];
    const char *extra[20];
    size_t ne = 0;
    if (!naive && strcmp(p->responses, "sampled") == 0) {
        snprintf(nums[0], sizeof nums[0], "%d", p->P);
        snprintf(nums[1], sizeof nums[1], "%d", p->R);
        snprintf(nums[2], sizeof nums[2], "%d", p->G);
        extra[ne++] = "--task", extra[ne++] = p->task;
        extra[ne++] = "--prompt-len", extra[ne++] = nums[0];
        extra[ne++] = "--response-len", extra[ne++] = nums[1];
        extra[ne++] = "--group", extra[ne++] = nums[2];
        if (strcmp(p->reference, "kept") == 0 || strcmp(p->reference, "recaptured") == 0)
            extra[ne++] = "--keep-reference", extra[ne++] = strcmp(p->reference, "kept") == 0 ? "on" : "off";
    }
    if (!naive) { /* the naive full sequence, the reference, keeps its tape */
        bool ck = strcmp(p->replay, "chunk") == 0;
        extra[ne++] = "--replay-checkpoint", extra[ne++] = ck ? "chunk" : strcmp(p->replay, "layer") == 0 ? "layer" : "none";
        if (ck) extra[ne++] = "--replay-chunk", extra[ne++] = PATH_REPLAY_CHUNK_S;
        extra[ne++] = "--state-tier", extra[ne++] = p->tier;
    }
    if (!naive && p->B > 1) {
        snprintf(nums[3], sizeof nums[3], "%d", p->B);
        extra[ne++] = "--prompts-per-step", extra[ne++] = nums[3];
    }
    /* the test-only fault: every fault-free LongStraw run at CP > 1 (an EP fault, ep-*: at EP > 1) */
    bool ep_fault = x->test_fault && strncmp(x->test_fault, "ep-", 3) == 0;
    if (fault == NULL && !naive && x->test_fault && (ep_fault ? ep > 1 : world / ep > 1)) fault = x->test_fault;
    extra[ne] = NULL;
    bool cp1 = !naive && world == 1 && fault == NULL;
    ls_parity_train t = {.dt = LS_PARITY_F64, .world = world, .ep = ep, .out = out, .log = log,
                         .rollouts = naive ? x->batch : strcmp(p->responses, "given") == 0 ? x->given : NULL,
                         .load = naive ? x->weights : NULL, .save_init = cp1 ? x->weights : NULL,
                         .dump_batch = naive ? NULL : batch, .dump_grads = grads, .save = naive ? NULL : save,
                         .seed = &x->seed, .strategy = naive ? "naive" : NULL, .grad_mode = x->o->like_grad_mode,
                         .fault = fault, .extra = extra};
    ls_parity_train_job(x->o, &x->c, &t, j);
    return LS_OK;
}

typedef struct {
    char label[64];
    int world, ep; /* ep 0 or 1: no EP */
    const char *fault;
    bool naive;
} path_spec_run;

/* Runs the jobs (and, when ref, the independent reference on the CP-1 batch beside them); every run must
 * succeed and name the report's build. */
static ls_status run_all(path_run *x, const path_spec_run *sp, size_t n, bool ref, const char *part) {
    ls_parity_job *jobs = calloc(n + 1, sizeof *jobs);
    if (jobs == NULL) return LS_ERR_NOMEM;
    ls_status s = LS_OK;
    double t0 = ls_parity_now();
    for (size_t i = 0; i < n && s == LS_OK; i++) s = path_job(x, sp[i].label, sp[i].world, sp[i].ep > 1 ? sp[i].ep : 1, sp[i].fault, sp[i].naive, &jobs[i]);
    char rjson[LS_PARITY_PATH], cp1batch[LS_PARITY_PATH];
    snprintf(rjson, sizeof rjson, "%s/reference.json", x->dir);
    label_path(x, "cp1", "batch.json", cp1batch);
    if (s == LS_OK && ref) {
        ls_parity_job *j = &jobs[n];
        snprintf(j->log, sizeof j->log, "%s/reference.log", x->dir);
        ls_parity_job_arg(j, "%s", x->o->python);
        ls_parity_job_arg(j, "%s", x->o->reference);
        ls_parity_job_arg(j, "%s", x->weights);
        ls_parity_job_arg(j, "%s", cp1batch);
        ls_parity_job_arg(j, "--json");
        ls_parity_job_arg(j, "%s", rjson);
    }
    size_t nj = n + (ref ? 1 : 0);
    if (s == LS_OK) s = ls_parity_jobs_run(jobs, nj, x->o->jobs, x->o->timeout_s, x->err, x->errlen);
    for (size_t i = 0; i < nj && s == LS_OK; i++) {
        if (jobs[i].rc != 0) {
            snprintf(x->err, x->errlen, "%s %s: the run %s exited %d%s (its output: %s)", x->p->name, part,
                     i < n ? sp[i].label : x->o->reference, jobs[i].rc, jobs[i].rc == 137 ? " (killed: timeout?)" : "",
                     jobs[i].log);
            s = LS_ERR_FORMAT;
            break;
        }
        if (i == n) continue;
        char run[LS_PARITY_PATH];
        label_path(x, sp[i].label, "run", run);
        s = ls_parity_report_build(x->rep, run, x->err, x->errlen);
    }
    if (s == LS_OK && ref) s = ls_json_read_file_capped(rjson, MAX_BATCH_BYTES, &x->refdoc, x->err, x->errlen);
    char name[160];
    snprintf(name, sizeof name, "%s %s", x->p->name, part);
    if (s == LS_OK) ls_parity_report_timing(x->rep, name, ls_parity_now() - t0, (int)nj);
    if (s == LS_OK && !x->o->quiet)
        fprintf(stderr, "longstraw-parity: %s: %zu runs, %.1f s\n", name, nj, ls_parity_now() - t0);
    for (size_t i = 0; i < nj; i++) ls_parity_job_free(&jobs[i]);
    free(jobs);
    return s;
}

/* The given batch (B lines): parity's tokens, and old and reference log-probs where the path gives them
 * (uniform log-probs moved by -0.6 ... +0.6: ratios far from 1, a reference that differs). */
static ls_status write_given(path_run *x) {
    const path_spec *p = x->p;
    static const double REWARDS[] = {1.0, 0.0, 0.25, 0.5};
    static const double OLD[] = {-0.6, 0.6, 0.05, -0.4, 0.4, -0.1}, REF[] = {0.3, -0.2, 0.1, -0.5, 0.2, 0.0};
    int lens[LS_PARITY_MAX_G];
    double rewards[LS_PARITY_MAX_G];
    for (int i = 0; i < p->G; i++) lens[i] = p->lens[i], rewards[i] = REWARDS[i % 4];
    ls_parity_logprobs u = {.g = p->G};
    for (int i = 0; i < p->G; i++) {
        u.len[i] = lens[i];
        u.lp[i] = malloc((size_t)lens[i] * sizeof(double));
        for (int k = 0; u.lp[i] && k < lens[i]; k++) u.lp[i][k] = -log((double)x->vocab);
    }
    ls_status s = LS_OK;
    FILE *f = fopen(x->given, "w");
    if (f == NULL) {
        snprintf(x->err, x->errlen, "cannot write %s: %s", x->given, strerror(errno));
        s = LS_ERR_IO;
    }
    for (int b = 0; b < p->B && s == LS_OK; b++) {
        cJSON *doc = ls_parity_batch_new(7u + 4u * (uint32_t)b, x->vocab, p->P, p->G, lens, rewards);
        if (strcmp(p->old, "given") == 0) ls_parity_batch_add_logprobs(doc, "old_logprobs", &u, OLD, true);
        if (strcmp(p->reference, "given") == 0) ls_parity_batch_add_logprobs(doc, "ref_logprobs", &u, REF, true);
        char *txt = cJSON_PrintUnformatted(doc);
        cJSON_Delete(doc);
        if (txt == NULL || fprintf(f, "%s\n", txt) < 0) s = LS_ERR_IO;
        free(txt);
    }
    if (f && fclose(f) != 0 && s == LS_OK) s = LS_ERR_IO;
    if (s == LS_ERR_IO && f) snprintf(x->err, x->errlen, "cannot write %s", x->given);
    ls_parity_logprobs_free(&u);
    return s;
}

/* The CP-1 run's dumped batch as a rollouts line for the naive run: its prompt, responses, rewards, and
 * the old and reference log-probs it computed (given to the naive run). */
static ls_status write_batch_line(path_run *x) {
    const cJSON *d = x->dump[0];
    cJSON *doc = cJSON_CreateObject();
    static const char *const K[] = {"prompt", "responses", "rewards"};
    for (size_t i = 0; i < 3; i++)
        cJSON_AddItemToObject(doc, K[i], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(d, K[i]), true));
    ls_parity_batch_add_logprobs(doc, "old_logprobs", &x->old[0], NULL, false);
    ls_parity_batch_add_logprobs(doc, "ref_logprobs", &x->ref[0], NULL, false);
    return ls_parity_batch_write(doc, x->batch, x->err, x->errlen);
}

/* The dump of the run label: the batch, its old and reference log-probs. */
static ls_status read_dump_to(path_run *x, const char *label, cJSON **dump, ls_parity_logprobs *old,
                              ls_parity_logprobs *ref) {
    char p[LS_PARITY_PATH];
    label_path(x, label, "batch.json", p);
    ls_status s = ls_json_read_file_capped(p, MAX_BATCH_BYTES, dump, x->err, x->errlen);
    if (s == LS_OK) s = ls_parity_json_logprobs(*dump, "old_logprobs", p, old, x->err, x->errlen);
    if (s == LS_OK) s = ls_parity_json_logprobs(*dump, "ref_logprobs", p, ref, x->err, x->errlen);
    return s;
}

/* The dump of world index k (label). */
static ls_status read_dump(path_run *x, size_t k, const char *label) {
    return read_dump_to(x, label, &x->dump[k], &x->old[k], &x->ref[k]);
}

/* The EP runs: EP o->eps[e] (e >= 1) at CP o->cps[k] when their cps[k] x eps[e] ranks fit. */
static bool ep_fits(const ls_parity_opts *o, size_t e, size_t k) {
    return e >= 1 && e < o->n_eps && k < o->n_cps && o->cps[k] * o->eps[e] <= LS_PARITY_MAX_CP;
}

static void ep_label(char *buf, size_t cap, const ls_parity_opts *o, size_t e, size_t k, const char *fault) {
    snprintf(buf, cap, "cp%d-ep%d%s%s", o->cps[k], o->eps[e], fault ? "-" : "", fault ? fault : "");
}

/* The run's initial weights (config.inputs.initial_weights): every run of a path starts from the same. */
static ls_status initial_weights(path_run *x, const char *label, char hex[65]) {
    char p[LS_PARITY_PATH];
    label_path(x, label, "run/manifest.json", p);
    cJSON *doc = NULL;
    ls_status s = ls_json_read_file_capped(p, MAX_BATCH_BYTES, &doc, x->err, x->errlen);
    if (s != LS_OK) return s;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "predicate"), "config");
    const char *h = opt_str(cJSON_GetObjectItemCaseSensitive(cfg, "inputs"), "initial_weights", NULL);
    if (h == NULL || strlen(h) != 64) {
        snprintf(x->err, x->errlen, "%s: no predicate.config.inputs.initial_weights", p);
        s = LS_ERR_FORMAT;
    } else {
        memcpy(hex, h, 65);
    }
    cJSON_Delete(doc);
    return s;
}

static bool rewards_differ(const cJSON *dump) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(dump, "rewards"), *x;
    double first = NAN;
    cJSON_ArrayForEach(x, r) {
        if (!cJSON_IsNumber(x)) continue;
        if (isnan(first)) first = x->valuedouble;
        else if (x->valuedouble != first) return true;
    }
    return false;
}

static ls_status read_outputs(path_run *x) {
    const ls_parity_opts *o = x->o;
    char p[LS_PARITY_PATH], label[64];
    ls_status s = LS_OK;
    for (size_t k = 0; k < o->n_cps && s == LS_OK; k++) {
        snprintf(label, sizeof label, "cp%d", o->cps[k]);
        if (k > 0) s = read_dump(x, k, label);
        label_path(x, label, "grads.safetensors", p);
        if (s == LS_OK) s = ls_parity_tensors_read(p, &x->g[k], x->err, x->errlen);
        label_path(x, label, "final.safetensors", p);
        if (s == LS_OK) s = ls_parity_tensors_read(p, &x->prm[k], x->err, x->errlen);
        label_path(x, label, "log", p);
        if (s == LS_OK) s = ls_parity_log_loss(p, &x->loss[k], x->err, x->errlen);
        if (s == LS_OK && x->stale && o->cps[k] > 1) {
            snprintf(label, sizeof label, "cp%d-cp-stale-start", o->cps[k]);
            label_path(x, label, "grads.safetensors", p);
            s = ls_parity_tensors_read(p, &x->gstale[k], x->err, x->errlen);
        }
    }
    if (s == LS_OK && x->naive) {
        label_path(x, "naive", "grads.safetensors", p);
        s = ls_parity_tensors_read(p, &x->gnaive, x->err, x->errlen);
        label_path(x, "naive", "log", p);
        if (s == LS_OK) s = ls_parity_log_loss(p, &x->loss_naive, x->err, x->errlen);
    }
    for (size_t e = 1; e < o->n_eps && s == LS_OK; e++)
        for (size_t k = 0; k < o->n_cps && s == LS_OK; k++) {
            if (!x->ep_ran[e][k]) continue;
            ep_label(label, sizeof label, o, e, k, NULL);
            s = read_dump_to(x, label, &x->ep_dump[e][k], &x->ep_old[e][k], &x->ep_ref[e][k]);
            label_path(x, label, "grads.safetensors", p);
            if (s == LS_OK) s = ls_parity_tensors_read(p, &x->ep_g[e][k], x->err, x->errlen);
            label_path(x, label, "final.safetensors", p);
            if (s == LS_OK) s = ls_parity_tensors_read(p, &x->ep_prm[e][k], x->err, x->errlen);
            label_path(x, label, "log", p);
            if (s == LS_OK) s = ls_parity_log_loss(p, &x->ep_loss[e][k], x->err, x->errlen);
            ep_label(label, sizeof label, o, e, k, LS_PARITY_EP_FAULT);
            label_path(x, label, "grads.safetensors", p);
            if (s == LS_OK) s = ls_parity_tensors_read(p, &x->ep_gdrop[e][k], x->err, x->errlen);
        }
    label_path(x, "cp1", "run", p);
    if (s == LS_OK) s = ls_parity_run_adamw(p, &x->adamw, x->err, x->errlen);
    /* one start for every run of the path: the same seed drew the same weights at every CP and EP size (an EP
       run's digest is of the owners' slices gathered: EP-1's bytes) */
    char h1[65], hk[65];
    if (s == LS_OK) s = initial_weights(x, "cp1", h1);
    for (size_t e = 0; e < o->n_eps && s == LS_OK; e++)
        for (size_t k = e == 0 ? 1 : 0; k < o->n_cps && s == LS_OK; k++) {
            if (e == 0) snprintf(label, sizeof label, "cp%d", o->cps[k]);
            else if (x->ep_ran[e][k]) ep_label(label, sizeof label, o, e, k, NULL);
            else continue;
            if ((s = initial_weights(x, label, hk)) == LS_OK && strcmp(h1, hk) != 0) {
                snprintf(x->err, x->errlen, "%s: the %s run started from other weights than the cp1 run (%.16s... vs "
                         "%.16s...)", x->p->name, label, hk, h1);
                s = LS_ERR_FORMAT;
            }
        }
    return s;
}

/* ---- the path's checks ---------------------------------------------------------------------- */

static bool computed_old(const path_spec *p) { return strcmp(p->old, "computed") == 0; }
static bool computed_ref(const path_spec *p) {
    return strcmp(p->reference, "kept") == 0 || strcmp(p->reference, "recaptured") == 0 ||
           strcmp(p->reference, "before") == 0;
}

static void check_name(char *buf, size_t cap, const char *kind, const path_run *x, int world, const char *extra) {
    snprintf(buf, cap, "%s %s f64 cp%d%s%s", kind, x->p->name, world, extra ? " " : "", extra ? extra : "");
}

/* The checks of the EP runs (EP o->eps[e] at CP o->cps[k], world cp x ep, each check's "ep" the EP size): its
 * dumped batch, gradient and updated weights against the EP-1 run of the same CP size (the trainer's EP is
 * bit for bit EP-1's: every expert row combined in EP-1's order, every sum EP-1's; held to the CP checks'
 * 1e-10), its log-probs and loss against the independent reference, its gradient against the naive one, and
 * ep-drop-dx's gradient, which must fail. */
static void path_ep_checks(path_run *x, const ls_parity_logprobs *rpol, const ls_parity_logprobs *rref, bool have_ref) {
    const ls_parity_opts *o = x->o;
    const path_spec *p = x->p;
    const char *gm = o->like_grad_mode;
    const ls_parity_tensors *want = &x->g[0];
    char name[256], cand[160], refn[160], tag[64];
    for (size_t e = 1; e < o->n_eps; e++)
        for (size_t k = 0; k < o->n_cps; k++) {
            if (!x->ep_ran[e][k]) continue;
            int c = o->cps[k], N = o->eps[e], w = c * N;
            snprintf(cand, sizeof cand, "longstraw cp%d ep%d on the run's path", c, N);
            snprintf(refn, sizeof refn, "longstraw cp%d (ep1) on the run's path", c);
            /* the same prompt and responses drawn, the same old and reference log-probs computed */
            cJSON *arr = cJSON_CreateArray();
            bool same = cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->ep_dump[e][k], "prompt"),
                                      cJSON_GetObjectItemCaseSensitive(x->dump[k], "prompt"), true) &&
                        cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->ep_dump[e][k], "responses"),
                                      cJSON_GetObjectItemCaseSensitive(x->dump[k], "responses"), true);
            cJSON_AddItemToArray(arr, ls_parity_entry(strcmp(p->responses, "sampled") == 0 ? "prompt and sampled responses"
                                                                                           : "prompt and responses",
                                                      same ? (ls_parity_err){0, 0} : (ls_parity_err){INFINITY, INFINITY},
                                                      F64_TOL, -1));
            ls_parity_member_entries(arr, "old_logprobs", &x->ep_old[e][k], &x->old[k]);
            if (computed_ref(p)) ls_parity_member_entries(arr, "ref_logprobs", &x->ep_ref[e][k], &x->ref[k]);
            snprintf(tag, sizeof tag, "ep%d", N);
            check_name(name, sizeof name, "logprob", x, c, tag);
            ls_parity_report_add(x->rep, ls_parity_check_ep(ls_parity_check_new("logprob", name, LS_PARITY_F64, w,
                                                                                 p->name, NULL, refn, cand, arr,
                                                                                 "members"), N));
            if (have_ref && (computed_old(p) || computed_ref(p))) {
                arr = cJSON_CreateArray();
                if (computed_old(p)) ls_parity_member_entries(arr, "old_logprobs", &x->ep_old[e][k], rpol);
                if (computed_ref(p)) ls_parity_member_entries(arr, "ref_logprobs", &x->ep_ref[e][k], rref);
                check_name(name, sizeof name, "ref_logprob", x, c, tag);
                ls_parity_report_add(x->rep, ls_parity_check_ep(ls_parity_check_new("ref_logprob", name, LS_PARITY_F64,
                                                                                     w, p->name, NULL, "independent "
                                                                                     "reference (Python, docs/model.md) "
                                                                                     "on the path's batch", cand, arr,
                                                                                     "members"), N));
            }
            snprintf(tag, sizeof tag, "ep%d %s", N, gm);
            check_name(name, sizeof name, "cp_grad", x, c, tag);
            snprintf(refn, sizeof refn, "longstraw cp%d (ep1) %s on the run's path", c, gm);
            ls_parity_report_add(x->rep, ls_parity_check_ep(ls_parity_check_new("cp_grad", name, LS_PARITY_F64, w, p->name,
                                                                                 gm, refn, cand,
                                                                                 ls_parity_tensor_entries(want, &x->ep_g[e][k], &x->g[k], NULL, NULL, NULL, NULL),
                                                                                 "tensors"), N));
            check_name(name, sizeof name, "cp_params", x, c, tag);
            ls_parity_report_add(x->rep, ls_parity_check_ep(ls_parity_check_new("cp_params", name, LS_PARITY_F64, w,
                                                                                 p->name, gm, refn, cand,
                                                                                 ls_parity_params_entries(want, &x->ep_prm[e][k], &x->prm[k], &x->ep_g[e][k], &x->g[k], &x->adamw, LS_PARITY_F64),
                                                                                 "tensors"), N));
            snprintf(tag, sizeof tag, "ep%d %s", N, LS_PARITY_EP_FAULT);
            check_name(name, sizeof name, "cp_grad", x, c, tag);
            char cdrop[160];
            snprintf(cdrop, sizeof cdrop, "longstraw cp%d ep%d %s --fault %s on the run's path", c, N, gm, LS_PARITY_EP_FAULT);
            ls_parity_report_control(x->rep, LS_PARITY_EP_FAULT,
                                     ls_parity_check_ep(ls_parity_check_new("cp_grad", name, LS_PARITY_F64, w, p->name, gm,
                                                                            refn, cdrop,
                                                                            ls_parity_tensor_entries(want, &x->ep_gdrop[e][k], &x->g[k], NULL, NULL, NULL, NULL),
                                                                            "tensors"), N));
            if (x->naive && x->full) {
                snprintf(tag, sizeof tag, "ep%d full", N);
                check_name(name, sizeof name, "grad", x, c, tag);
                ls_parity_report_add(x->rep, ls_parity_check_ep(ls_parity_check_new("grad", name, LS_PARITY_F64, w, p->name,
                                                                                     "full", "naive full sequence on the "
                                                                                     "path's batch", cand,
                                                                                     ls_parity_tensor_entries(want, &x->ep_g[e][k], &x->gnaive, NULL, NULL, NULL, NULL),
                                                                                     "tensors"), N));
            }
            const cJSON *l = cJSON_GetObjectItemCaseSensitive(x->refdoc, "loss");
            if (x->naive && cJSON_IsNumber(l)) {
                ls_parity_err er = {fabs(x->ep_loss[e][k] - l->valuedouble), 0};
                er.max_rel = l->valuedouble != 0 ? er.max_abs / fabs(l->valuedouble) : er.max_abs;
                arr = cJSON_CreateArray();
                cJSON_AddItemToArray(arr, ls_parity_entry("loss", er, F64_TOL, -1));
                snprintf(tag, sizeof tag, "ep%d", N);
                check_name(name, sizeof name, "ref_loss", x, c, tag);
                ls_parity_report_add(x->rep, ls_parity_check_ep(ls_parity_check_new("ref_loss", name, LS_PARITY_F64, w,
                                                                                     p->name, NULL, "independent reference "
                                                                                     "(Python, docs/model.md section 4) on "
                                                                                     "the path's batch", cand, arr,
                                                                                     "members"), N));
            }
        }
}

static void path_checks(path_run *x) {
    const ls_parity_opts *o = x->o;
    const path_spec *p = x->p;
    const char *gm = o->like_grad_mode;
    char name[256], cand[160], refn[160];
    const ls_parity_tensors *want = &x->g[0];
    ls_parity_logprobs rpol = {0}, rref = {0};
    char why[256];
    bool have_ref = ls_parity_json_logprobs(x->refdoc, "policy", o->reference, &rpol, why, sizeof why) == LS_OK &&
                    ls_parity_json_logprobs(x->refdoc, "ref_policy", o->reference, &rref, why, sizeof why) == LS_OK;
    for (size_t k = 0; k < o->n_cps; k++) {
        int n = o->cps[k];
        snprintf(cand, sizeof cand, "longstraw cp%d on the run's path", n);
        if (n > 1) {
            /* the same prompt and responses drawn, the same old and reference log-probs computed */
            cJSON *arr = cJSON_CreateArray();
            bool same = cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->dump[k], "prompt"),
                                      cJSON_GetObjectItemCaseSensitive(x->dump[0], "prompt"), true) &&
                        cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->dump[k], "responses"),
                                      cJSON_GetObjectItemCaseSensitive(x->dump[0], "responses"), true);
            cJSON_AddItemToArray(arr, ls_parity_entry(strcmp(p->responses, "sampled") == 0 ? "prompt and sampled responses"
                                                                                           : "prompt and responses",
                                                      same ? (ls_parity_err){0, 0} : (ls_parity_err){INFINITY, INFINITY},
                                                      F64_TOL, -1));
            ls_parity_member_entries(arr, "old_logprobs", &x->old[k], &x->old[0]);
            if (computed_ref(p)) ls_parity_member_entries(arr, "ref_logprobs", &x->ref[k], &x->ref[0]);
            check_name(name, sizeof name, "logprob", x, n, NULL);
            ls_parity_report_add(x->rep, ls_parity_check_new("logprob", name, LS_PARITY_F64, n, p->name, NULL,
                                                             "longstraw cp1 on the run's path", cand, arr, "members"));
        }
        /* the trainer's own old and reference log-probs against the independent reference's */
        if (have_ref && (computed_old(p) || computed_ref(p))) {
            cJSON *arr = cJSON_CreateArray();
            if (computed_old(p)) ls_parity_member_entries(arr, "old_logprobs", &x->old[k], &rpol);
            if (computed_ref(p)) ls_parity_member_entries(arr, "ref_logprobs", &x->ref[k], &rref);
            check_name(name, sizeof name, "ref_logprob", x, n, NULL);
            ls_parity_report_add(x->rep, ls_parity_check_new("ref_logprob", name, LS_PARITY_F64, n, p->name, NULL,
                                                             "independent reference (Python, docs/model.md) on the "
                                                             "path's batch", cand, arr, "members"));
        }
        if (n > 1) {
            check_name(name, sizeof name, "cp_grad", x, n, gm);
            snprintf(refn, sizeof refn, "longstraw cp1 %s on the run's path", gm);
            ls_parity_report_add(x->rep, ls_parity_check_new("cp_grad", name, LS_PARITY_F64, n, p->name, gm, refn, cand,
                                                             ls_parity_tensor_entries(want, &x->g[k], &x->g[0], NULL,
                                                                                      NULL, NULL, NULL), "tensors"));
            check_name(name, sizeof name, "cp_params", x, n, gm);
            ls_parity_report_add(x->rep, ls_parity_check_new("cp_params", name, LS_PARITY_F64, n, p->name, gm, refn, cand,
                                                             ls_parity_params_entries(want, &x->prm[k], &x->prm[0],
                                                                                      &x->g[k], &x->g[0], &x->adamw,
                                                                                      LS_PARITY_F64), "tensors"));
            if (x->stale) {
                check_name(name, sizeof name, "cp_grad", x, n, "cp-stale-start");
                snprintf(cand, sizeof cand, "longstraw cp%d full --fault cp-stale-start on the run's path", n);
                ls_parity_report_control(x->rep, "cp-stale-start",
                                         ls_parity_check_new("cp_grad", name, LS_PARITY_F64, n, p->name, "full", refn,
                                                             cand, ls_parity_tensor_entries(want, &x->gstale[k], &x->g[0],
                                                                                            NULL, NULL, NULL, NULL),
                                                             "tensors"));
                snprintf(cand, sizeof cand, "longstraw cp%d on the run's path", n);
            }
        }
        if (x->naive && x->full) {
            check_name(name, sizeof name, "grad", x, n, "full");
            ls_parity_report_add(x->rep, ls_parity_check_new("grad", name, LS_PARITY_F64, n, p->name, "full",
                                                             "naive full sequence on the path's batch", cand,
                                                             ls_parity_tensor_entries(want, &x->g[k], &x->gnaive, NULL,
                                                                                      NULL, NULL, NULL), "tensors"));
        }
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(x->refdoc, "loss");
        if (x->naive && cJSON_IsNumber(l)) {
            for (int w = 0; w < (k == 0 ? 2 : 1); w++) { /* every CP size's loss, and (at k = 0) the naive run's */
                double v = w == 0 ? x->loss[k] : x->loss_naive;
                ls_parity_err e = {fabs(v - l->valuedouble), 0};
                e.max_rel = l->valuedouble != 0 ? e.max_abs / fabs(l->valuedouble) : e.max_abs;
                cJSON *arr = cJSON_CreateArray();
                cJSON_AddItemToArray(arr, ls_parity_entry("loss", e, F64_TOL, -1));
                check_name(name, sizeof name, "ref_loss", x, w == 0 ? n : 1, w == 0 ? NULL : "naive");
                ls_parity_report_add(x->rep, ls_parity_check_new("ref_loss", name, LS_PARITY_F64, w == 0 ? n : 1,
                                                                 p->name, NULL, "independent reference (Python, docs/model.md "
                                                                 "section 4) on the path's batch",
                                                                 w == 0 ? cand : "naive full sequence on the path's batch",
                                                                 arr, "members"));
            }
        }
    }
    path_ep_checks(x, &rpol, &rref, have_ref);
    /* mla: no comparison of the path's compositions across a near-tie */
    bool expect[3];
    cJSON *mc = NULL;
    if (ls_json_read_file_capped(o->model_config, 1u << 20, &mc, why, sizeof why) == LS_OK) {
        ls_parity_decisions_expect(mc, p->P - 1, expect);
        cJSON *dec = NULL;
        if ((expect[0] || expect[1] || expect[2]) &&
            ls_parity_decisions_read(x->refdoc, x->dir, &dec, why, sizeof why) == LS_OK) {
            double noise = ls_parity_decisions_unit(LS_PARITY_F64), m;
            for (size_t k = 0; k < o->n_cps && have_ref; k++) {
                if (computed_old(p) && (m = ls_parity_logprob_noise(&x->old[k], &rpol)) > noise) noise = m;
                if (computed_ref(p) && (m = ls_parity_logprob_noise(&x->ref[k], &rref)) > noise) noise = m;
                for (size_t e = 1; e < o->n_eps; e++) {
                    if (!x->ep_ran[e][k]) continue;
                    if (computed_old(p) && (m = ls_parity_logprob_noise(&x->ep_old[e][k], &rpol)) > noise) noise = m;
                    if (computed_ref(p) && (m = ls_parity_logprob_noise(&x->ep_ref[e][k], &rref)) > noise) noise = m;
                }
            }
            ls_parity_report_add(x->rep, ls_parity_decisions_check(dec, expect, p->name, LS_PARITY_F64, noise,
                                                                    x->seed, x->draw));
        }
        cJSON_Delete(dec);
    }
    cJSON_Delete(mc);
    ls_parity_logprobs_free(&rpol);
    ls_parity_logprobs_free(&rref);
}

static void path_free(path_run *x) {
    for (int k = 0; k < LS_PARITY_MAX_CP; k++) {
        cJSON_Delete(x->dump[k]);
        x->dump[k] = NULL;
        ls_parity_logprobs_free(&x->old[k]);
        ls_parity_logprobs_free(&x->ref[k]);
        ls_parity_tensors_free(&x->g[k]);
        ls_parity_tensors_free(&x->prm[k]);
        ls_parity_tensors_free(&x->gstale[k]);
        for (int e = 0; e < LS_PARITY_MAX_CP; e++) {
            cJSON_Delete(x->ep_dump[e][k]);
            x->ep_dump[e][k] = NULL;
            ls_parity_logprobs_free(&x->ep_old[e][k]);
            ls_parity_logprobs_free(&x->ep_ref[e][k]);
            ls_parity_tensors_free(&x->ep_g[e][k]);
            ls_parity_tensors_free(&x->ep_prm[e][k]);
            ls_parity_tensors_free(&x->ep_gdrop[e][k]);
        }
    }
    ls_parity_tensors_free(&x->gnaive);
    cJSON_Delete(x->refdoc);
    x->refdoc = NULL;
}

static ls_status path_one(path_run *x) {
    const ls_parity_opts *o = x->o;
    const path_spec *p = x->p;
    ls_status s;
    snprintf(x->dir, sizeof x->dir, "%s/runs/%s", o->out, p->name);
    snprintf(x->weights, sizeof x->weights, "%s/weights.safetensors", x->dir);
    snprintf(x->given, sizeof x->given, "%s/given.jsonl", x->dir);
    snprintf(x->batch, sizeof x->batch, "%s/batch.jsonl", x->dir);
    if (ls_parity_mkdirs(x->dir) != 0) {
        snprintf(x->err, x->errlen, "cannot create %s: %s", x->dir, strerror(errno));
        return LS_ERR_IO;
    }
    x->c = (ls_parity_config){.name = p->name, .what = p->what, .prompt_len = p->P, .group = p->G,
                              .train_mode = o->train_mode ? o->train_mode : "lora", .page_size = p->page,
                              .capture_chunk = p->chunk, .token_seed = 7};
    for (int i = 0; i < p->G && i < LS_PARITY_MAX_G; i++) x->c.response_lens[i] = p->lens[i];
    x->full = strcmp(o->like_grad_mode, "full") == 0;
    x->naive = p->B == 1;
    x->stale = x->full && o->fam->carried_state && strcmp(p->reference, "kept") == 0;
    if (strcmp(p->responses, "given") == 0 && (s = write_given(x)) != LS_OK) return s;
    /* the CP-1 run first: its draw (weights, prompt, rollout) must give the group differing rewards */
    path_spec_run one = {.label = "cp1", .world = 1};
    for (x->draw = 1;; x->draw++) {
        x->seed = o->seed + (uint64_t)(x->draw - 1) * 7919u;
        char part[48];
        snprintf(part, sizeof part, "cp1 (draw %d, seed %llu)", x->draw, (unsigned long long)x->seed);
        if ((s = run_all(x, &one, 1, false, part)) != LS_OK) return s;
        if ((s = read_dump(x, 0, "cp1")) != LS_OK) return s;
        if (rewards_differ(x->dump[0]) || strcmp(p->responses, "sampled") != 0 || x->draw >= PATH_DRAWS) break;
        path_free(x);
    }
    if (!rewards_differ(x->dump[0]))
        ls_parity_report_note(x->rep, "%s: the group's rewards were equal on every one of %d draws: its gradient "
                              "holds no policy term (the KL term only%s)", p->name, x->draw,
                              o->beta > 0 ? "" : ", and beta is 0: the comparisons are of zeros");
    else if (x->draw > 1)
        ls_parity_report_note(x->rep, "%s: seed %llu (draw %d): the earlier draws sampled responses of equal "
                              "rewards (no policy term)", p->name, (unsigned long long)x->seed, x->draw);
    if (x->naive && (s = write_batch_line(x)) != LS_OK) return s;
    /* every other run beside the independent reference on the CP-1 batch */
    path_spec_run sp[2 * LS_PARITY_MAX_CP + 1 + 2 * LS_PARITY_MAX_CP * LS_PARITY_MAX_CP];
    size_t n = 0;
    for (size_t k = 1; k < o->n_cps; k++) {
        sp[n] = (path_spec_run){.world = o->cps[k]};
        snprintf(sp[n++].label, sizeof sp[0].label, "cp%d", o->cps[k]);
        if (x->stale && o->cps[k] > 1) {
            sp[n] = (path_spec_run){.world = o->cps[k], .fault = "cp-stale-start"};
            snprintf(sp[n++].label, sizeof sp[0].label, "cp%d-cp-stale-start", o->cps[k]);
        }
    }
    /* the path at every EP size > 1 and CP size whose grid fits: the same launch with --ep N on cp x N ranks,
       and its control ep-drop-dx (the last EP rank's experts return no input gradient) */
    bool any_ep = false;
    for (size_t e = 1; e < o->n_eps; e++)
        for (size_t k = 0; k < o->n_cps; k++) {
            if (!(x->ep_ran[e][k] = ep_fits(o, e, k))) continue;
            any_ep = true;
            sp[n] = (path_spec_run){.world = o->cps[k] * o->eps[e], .ep = o->eps[e]};
            ep_label(sp[n].label, sizeof sp[0].label, o, e, k, NULL);
            n++;
            sp[n] = (path_spec_run){.world = o->cps[k] * o->eps[e], .ep = o->eps[e], .fault = LS_PARITY_EP_FAULT};
            ep_label(sp[n].label, sizeof sp[0].label, o, e, k, LS_PARITY_EP_FAULT);
            n++;
        }
    if (x->naive) {
        sp[n] = (path_spec_run){.world = 1, .naive = true};
        snprintf(sp[n++].label, sizeof sp[0].label, "naive");
    }
    if ((s = run_all(x, sp, n, true, "runs")) != LS_OK) return s;
    if ((s = read_outputs(x)) != LS_OK) return s;
    if (x->naive && x->full &&
        (s = ls_parity_fd(o, &x->c, x->rep, x->dir, x->weights, x->batch, &x->gnaive, &x->g[0], x->err, x->errlen)) !=
            LS_OK)
        return s;
    if (x->stale) ls_parity_report_require_control(x->rep, "cp-stale-start", 3);
    if (any_ep) ls_parity_report_require_control(x->rep, LS_PARITY_EP_FAULT, 3);
    if (!x->naive)
        ls_parity_report_note(x->rep, "%s: %d prompts per step: --dump-batch holds the first group only, so the "
                              "path has no naive, finite-difference or loss comparison (levels 2 and 3 only; the first "
                              "group's log-probs against the reference)", p->name, p->B);
    cJSON *forced = cJSON_CreateObject();
    cJSON_AddStringToObject(forced, "responses", p->responses);
    cJSON_AddStringToObject(forced, "old_logprobs", p->old);
    cJSON_AddStringToObject(forced, "reference", p->reference);
    cJSON_AddStringToObject(forced, "prompt_groups", p->B > 1 ? "several" : "one");
    cJSON_AddStringToObject(forced, "shards", p->shards);
    cJSON_AddStringToObject(forced, "pages", p->pages);
    cJSON_AddStringToObject(forced, "chunks", p->chunks);
    cJSON_AddStringToObject(forced, "task", p->task ? p->task : "none");
    ls_parity_report_path_config(x->rep, &x->c, o->train_mode, p->B, forced);
    cJSON_Delete(forced);
    path_checks(x);
    return LS_OK;
}

ls_status ls_parity_paths_run(const ls_parity_opts *o, ls_parity_report *rep, char *err, size_t errlen) {
    if (o->like_paths == NULL) return LS_OK;
    cJSON *mc = NULL;
    ls_status s = ls_json_read_file_capped(o->model_config, 1u << 20, &mc, err, errlen);
    if (s != LS_OK) return s;
    int vocab = model_int(mc, "vocab");
    path_spec ps[PATH_MAX];
    size_t n = 0;
    cJSON *notes = cJSON_CreateArray();
    s = vocab >= 2 ? plan(o, mc, ps, &n, notes, err, errlen) : LS_ERR_FORMAT;
    if (vocab < 2) snprintf(err, errlen, "%s: field 'vocab' is not an integer in 2..2^24", o->model_config);
    cJSON_Delete(mc);
    const cJSON *nt;
    cJSON_ArrayForEach(nt, notes) ls_parity_report_note(rep, "%s", nt->valuestring);
    cJSON_Delete(notes);
    if (s != LS_OK) return s;
    const char *tf = getenv(LS_PARITY_TEST_PATH_FAULT_ENV);
    if (tf != NULL && tf[0] != 0) {
        for (const char *c = tf; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-') || c - tf > 63) {
                snprintf(err, errlen, "%s: '%.64s' is not a fault name", LS_PARITY_TEST_PATH_FAULT_ENV, tf);
                return LS_ERR_ARG;
            }
        ls_parity_report_note(rep, "TEST ONLY (%s): every fault-free path run at %s > 1 also ran with --fault %s; "
                              "this report proves nothing", LS_PARITY_TEST_PATH_FAULT_ENV,
                              strncmp(tf, "ep-", 3) == 0 ? "EP" : "CP", tf);
    } else {
        tf = NULL;
    }
    ls_parity_report_like_paths(rep, o->like_paths, o->like_paths_derived);
    if (o->like_paths_derived)
        ls_parity_report_note(rep, "the run recorded no path (configuration \"paths\"): its path was derived from its "
                              "options and receipts");
    for (size_t i = 0; i < n && s == LS_OK; i++) {
        path_run x = {.o = o, .rep = rep, .p = &ps[i], .vocab = vocab, .test_fault = tf, .err = err, .errlen = errlen};
        s = path_one(&x);
        path_free(&x);
    }
    /* what of the run's path no path run took: prefix frozen, a resumed start, ... (the audit refuses it) */
    const cJSON *have = ls_parity_report_paths(rep), *k, *v, *run = s == LS_OK ? o->like_paths : NULL;
    cJSON_ArrayForEach(k, run) {
        cJSON_ArrayForEach(v, k) {
            bool in = false;
            const cJSON *y;
            cJSON_ArrayForEach(y, cJSON_GetObjectItemCaseSensitive(have, k->string))
                in = in || (cJSON_IsString(v) && strcmp(y->valuestring, v->valuestring) == 0);
            if (!in)
                ls_parity_report_note(rep, "the run's path %s=%s: no run of this report took it, so the report does "
                                      "not cover the run (like.uncovered)", k->string,
                                      cJSON_IsString(v) ? v->valuestring : "?");
        }
    }
    return s;
}
