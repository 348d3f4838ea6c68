/* parity_adapter_like.c - longstraw-parity --adapter FILE --like RUN
 * (parity_adapter.h): the adapter's matrix shaped by a run of its trainer,
 * so that the report exercises what the run did.
 *
 * From the run's manifest: the profile (the adapter's), the objective (the
 * adapter's pinned one: the report could not cover another), no faults,
 * the longstraw strategy, the DP size D (config dp_ranks, absent 1: it must
 * divide the world and be one of the adapter's; D > 1 runs DP sizes 1 and
 * D, the DP runs at the run's CP size only, in the run's dtype and gradient
 * mode), the CP size w = world / D (the matrix at 1, 2, 4, ... below w and
 * w; 1 and 2 for a one-rank run) and the dtype (f64, f32 beside it),
 * and the run's recorded path (configuration "paths"), which the report
 * states (like.paths) with each value no run of it took (like.uncovered).
 * From the run's traces: the prompt.  Each rank's first prompt forward (a
 * layer_end of member -1, layer -1, direction fwd, not a recompute) counts
 * the positions its shard captured (under DP, the ranks of the first
 * replica, 0 .. w-1: global rank d w + c; every replica must capture the
 * same shards, else a note says so); their sum T is the prompt's captured
 * positions and P = T + 1 its length (docs/model.md section 4: the last
 * prompt token starts every response).  The adapter's batch then takes a
 * prompt of P tokens where 17 <= P <= 64; otherwise the shortest of at
 * least 33 whose T leaves the run's remainder at every CP size of the
 * matrix (T mod lcm(cps)).  Where the run's path records shards uneven and
 * that T splits evenly over w ranks (or the reverse), T moves to the next
 * length that splits as the path says, and a disagreement of the traces'
 * shard sizes with the recorded path is a note of the report. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/signing/manifest.h"
#include "receipts/reading/trace_reader.h"

#define LIKE_P_MIN 17 /* a prompt longer than 16 tokens */
#define LIKE_P_MAX 64 /* the longest prompt taken as the run's */
#define LIKE_T_BASE 32

static void note(ls_parity_adapter *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(ls_parity_adapter *a, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (a->like_notes == NULL) a->like_notes = cJSON_CreateArray();
    cJSON_AddItemToArray(a->like_notes, cJSON_CreateString(buf));
}

typedef struct {
    bool found;
    int64_t step, tokens;
} first_fwd;

/* The first prompt forward of the trace: member -1, layer -1 (the embedding), fwd, not a recompute. */
static int on_event(const ls_trace_event *ev, void *user) {
    first_fwd *f = user;
    if (ev->kind != LS_TRACE_LAYER_END || ev->json == NULL) return 0;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(ev->json, "member");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(ev->json, "layer");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(ev->json, "dir");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev->json, "tokens");
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(ev->json, "recompute");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(ev->json, "step");
    if (!cJSON_IsNumber(m) || m->valuedouble != -1 || !cJSON_IsNumber(l) || l->valuedouble != -1 ||
        !cJSON_IsString(d) || strcmp(d->valuestring, "fwd") != 0 || cJSON_IsTrue(rc) || !cJSON_IsNumber(t) ||
        t->valuedouble < 1)
        return 0;
    f->found = true;
    f->tokens = (int64_t)t->valuedouble;
    f->step = cJSON_IsNumber(st) ? (int64_t)st->valuedouble : 0;
    return 1; /* stop: the first one */
}

static int64_t gcd64(int64_t x, int64_t y) {
    while (y) {
        int64_t t = x % y;
        x = y, y = t;
    }
    return x;
}

static bool has_value(const cJSON *paths, const char *key, const char *value) {
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(paths, key))
        if (cJSON_IsString(x) && strcmp(x->valuestring, value) == 0) return true;
    return false;
}

static void shards_text(int64_t T, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int r = 0; r < n && len + 24 < cap; r++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", r ? "|" : "",
                                (long long)((r + 1) * T / n - r * T / n));
}

#define FAIL LS_PARITY_ADAPTER_FAIL

ls_status ls_parity_adapter_like(const char *run_dir, ls_parity_opts *o, ls_parity_adapter *a, char *err,
                                 size_t errlen) {
    char path[LS_PARITY_PATH], why[512];
    ls_manifest *m = NULL;
    ls_status s = LS_OK;
    snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE);
    if (ls_manifest_read(path, &m, why, sizeof why) != LS_OK) {
        m = NULL;
        FAIL(LS_ERR_FORMAT, "--like %s: %s", run_dir, why);
    }
    if (m->version != 2 || m->profile_name == NULL || strcmp(m->profile_name, a->profile) != 0)
        FAIL(LS_ERR_ARG, "--like %s: the run names the profile %s; the adapter %s is for %s", run_dir,
             m->profile_name ? m->profile_name : "(none: a v1 run; use --like without --adapter)", a->path, a->profile);
    const cJSON *cfg = m->config;
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cfg, "faults")) > 0)
        FAIL(LS_ERR_ARG, "--like %s: the run recorded faults; a report covers fault-free runs only", run_dir);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cfg, "strategy");
    if (!cJSON_IsString(st) || strcmp(st->valuestring, "longstraw") != 0)
        FAIL(LS_ERR_ARG, "--like %s: strategy %s: a report covers runs of the longstraw strategy", run_dir,
             cJSON_IsString(st) ? st->valuestring : "(none)");
    if ((s = ls_parity_adapter_objective_pinned(a, run_dir, why, sizeof why)) != LS_OK)
        FAIL(LS_ERR_ARG, "--like: %s", why);
    /* DP and CP sizes and dtypes */
    uint32_t w = m->world;
    if (w < 1 || w > LS_PARITY_MAX_CP)
        FAIL(LS_ERR_ARG, "--like %s: the run has %u ranks; parity runs at most %d", run_dir, (unsigned)w,
             LS_PARITY_MAX_CP);
    /* the data-parallel replicas (config dp_ranks, absent: 1): world = dp x cp, global rank d x cp + c */
    const cJSON *dpr = cJSON_GetObjectItemCaseSensitive(cfg, "dp_ranks");
    uint32_t dp = 1;
    if (dpr != NULL) {
        if (!cJSON_IsNumber(dpr) || dpr->valuedouble < 1 || dpr->valuedouble > (double)w ||
            dpr->valuedouble != (double)(uint32_t)dpr->valuedouble || w % (uint32_t)dpr->valuedouble != 0)
            FAIL(LS_ERR_ARG, "--like %s: config \"dp_ranks\" is not an integer >= 1 that divides the run's %u ranks",
                 run_dir, (unsigned)w);
        dp = (uint32_t)dpr->valuedouble;
    }
    bool dp_ok = false;
    for (size_t i = 0; i < a->n_dps; i++) dp_ok = dp_ok || a->dps[i] == (int)dp;
    if (!dp_ok)
        FAIL(LS_ERR_ARG, "--like %s: config \"dp_ranks\" %u is not one of the DP sizes the adapter %s supports (field "
             "'dp'%s)", run_dir, (unsigned)dp, a->path,
             cJSON_GetObjectItemCaseSensitive(a->doc, "dp") ? "" : " absent: DP 1 only");
    const uint32_t world = w;
    w /= dp; /* the run's CP size */
    o->n_dps = 0;
    o->dps[o->n_dps++] = 1;
    if (dp > 1) o->dps[o->n_dps++] = (int)dp;
    o->dp_cp = (int)w;
    o->n_cps = 0;
    for (uint32_t c = 1; c < w; c *= 2) o->cps[o->n_cps++] = (int)c;
    o->cps[o->n_cps++] = (int)w;
    if (w == 1) o->cps[o->n_cps++] = 2; /* the controls need two ranks */
    for (size_t k = 0; k < o->n_cps; k++) {
        bool ok = false;
        for (size_t i = 0; i < a->n_cps; i++) ok = ok || a->cps[i] == o->cps[k];
        if (!ok)
            FAIL(LS_ERR_ARG, "--like %s: the matrix needs CP %d, which the adapter %s does not support (field 'cp')",
                 run_dir, o->cps[k], a->path);
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(cfg, "dtype");
    o->dtype[LS_PARITY_F64] = true;
    o->dtype[LS_PARITY_F32] = !cJSON_IsString(dt) || strcmp(dt->valuestring, "f64") != 0;
    /* the DP runs: the run's dtype and gradient mode (full always: level 4's grad needs it) */
    o->dp_dtype[LS_PARITY_F64] = !o->dtype[LS_PARITY_F32];
    o->dp_dtype[LS_PARITY_F32] = o->dtype[LS_PARITY_F32];
    const cJSON *gm = cJSON_GetObjectItemCaseSensitive(cfg, "grad_mode");
    snprintf(o->like_grad_mode, sizeof o->like_grad_mode, "%s",
             cJSON_IsString(gm) && strcmp(gm->valuestring, "full") == 0 ? "full" : "detached");
    o->dp_detached = strcmp(o->like_grad_mode, "detached") == 0;
    if (o->dtype[LS_PARITY_F32] && !a->dtype[LS_PARITY_F32])
        FAIL(LS_ERR_ARG, "--like %s: the run's dtype %s needs f32 runs, which the adapter %s does not support", run_dir,
             cJSON_IsString(dt) ? dt->valuestring : "?", a->path);
    /* the run's path */
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(cfg, "paths");
    o->like_paths = cJSON_IsObject(paths) ? cJSON_Duplicate(paths, true) : NULL;
    o->like_paths_derived = false;
    if (o->like_paths == NULL)
        note(a, "--like: the run records no path (configuration \"paths\"): no report covers it (the audit refuses "
                "a run without its path)");
    /* the prompt, from the traces */
    int64_t sizes[LS_PARITY_MAX_CP], T = 0;
    for (uint32_t r = 0; r < world; r++) { /* every rank's; the first replica's (0 .. w-1) count */
        char tp[LS_PARITY_PATH];
        snprintf(tp, sizeof tp, "%s/rank-%04u/events.jsonl.zst", run_dir, (unsigned)r);
        if (access(tp, R_OK) != 0) snprintf(tp, sizeof tp, "%s/rank-%04u/events.jsonl", run_dir, (unsigned)r);
        first_fwd f = {0};
        ls_trace_report rep;
        memset(&rep, 0, sizeof rep);
        ls_trace_read_file(tp, on_event, &f, &rep);
        ls_trace_report_free(&rep);
        if (!f.found)
            FAIL(LS_ERR_FORMAT, "--like %s: %s shows no prompt forward (a layer_end of member -1, layer -1, fwd): the "
                 "run's prompt length is unknown", run_dir, tp);
        sizes[r] = f.tokens;
        if (r < w) T += f.tokens;
    }
    for (uint32_t r = w; r < world; r++)
        if (sizes[r] != sizes[r % w]) {
            note(a, "--like: rank %u (replica %u, CP rank %u) captured %lld prompt positions where rank %u of the first "
                    "replica captured %lld: the replicas' shards disagree", (unsigned)r, (unsigned)(r / w),
                 (unsigned)(r % w), (long long)sizes[r], (unsigned)(r % w), (long long)sizes[r % w]);
            break;
        }
    bool trace_even = true;
    for (uint32_t r = 1; r < w; r++) trace_even = trace_even && sizes[r] == sizes[0];
    int64_t L = 1;
    for (size_t k = 0; k < o->n_cps; k++) L = L / gcd64(L, o->cps[k]) * o->cps[k];
    int64_t Tn = T + 1 >= LIKE_P_MIN && T + 1 <= LIKE_P_MAX ? T : LIKE_T_BASE + (T % L + L - LIKE_T_BASE % L) % L;
    bool rec_uneven = has_value(o->like_paths, "shards", "uneven"), rec_even = has_value(o->like_paths, "shards", "even");
    bool want_uneven = rec_uneven || (!rec_even && !trace_even);
    if (w > 1 && want_uneven && Tn % w == 0) Tn += 1;
    if (w > 1 && !want_uneven && Tn % w != 0) Tn += w - Tn % w;
    a->prompt_len = (int)Tn + 1;
    char sz[160], szn[160];
    size_t len = 0;
    sz[0] = 0;
    for (uint32_t r = 0; r < w && len + 24 < sizeof sz; r++)
        len += (size_t)snprintf(sz + len, sizeof sz - len, "%s%lld", r ? "|" : "", (long long)sizes[r]);
    shards_text(Tn, (int)w, szn, sizeof szn);
    note(a, "--like: the run's prompt: %lld captured positions by its traces (shards %s over %u ranks), a prompt of "
            "%lld tokens; the matrix's batches take a prompt of %d tokens (shards %s at CP %u)",
         (long long)T, sz, (unsigned)w, (long long)T + 1, a->prompt_len, szn, (unsigned)w);
    if (dp > 1)
        note(a, "--like: the run's %u ranks are %u data-parallel replicas of CP %u (config dp_ranks): DP sizes 1 and %u "
                "at CP %u, in the run's dtype (%s) and gradient mode (full%s)", (unsigned)world, (unsigned)dp,
             (unsigned)w, (unsigned)dp, (unsigned)w, o->dtype[LS_PARITY_F32] ? "f32" : "f64",
             o->dp_detached ? " and detached" : "");
    if (w > 1 && (rec_uneven || rec_even) && (trace_even ? !rec_even : !rec_uneven))
        note(a, "--like: the run's traces show shards %s (%s) where its path records shards %s: the traces and the "
                "configuration disagree", sz, trace_even ? "even" : "uneven", rec_uneven ? "uneven" : "even");
    if (rec_uneven && rec_even)
        note(a, "--like: the run's path records shards even and uneven; the matrix splits its prompt unevenly at CP %u",
             (unsigned)w);
    snprintf(o->like_run_id, sizeof o->like_run_id, "%.120s", m->run_id);
done:
    /* nothing taken from the run points into its manifest (o->like_run_id, o->like_paths and the notes are
       copies): it is released here, whatever the outcome */
    ls_manifest_free(m);
    return s;
}
