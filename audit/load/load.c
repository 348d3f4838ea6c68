/* load.c - the audit's model of a run (audit.h): the run directory, the
 * world (manifest, rank directories, receipts), every rank's receipt and the
 * configuration; then, each in its own file, every rank's trace
 * (load_trace.c), the manifest's subjects and signature (load_manifest.c)
 * and the parity report (load_parity.c).  Every file of the run is opened
 * through audit/model/run_files.h. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "audit/model/run_files.h"
#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h"


/* ---- receipts, world ----------------------------------------------------- */

static void load_receipt(ls_audit_run *run, ls_audit_rank *r) {
    char rel[64], dir[32];
    ls_receipt_rank_dir(r->rank, dir, sizeof dir);
    snprintf(rel, sizeof rel, "%s/receipt.json", dir);
    struct stat sb;
    char path[4096];
    ls_audit_path(run->run_dir, dir, path, sizeof path);
    r->dir_present = lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char *bytes = NULL;
    size_t len = 0;
    ls_status st = ls_audit_read_noted(&run->reads, run->run_dir, rel, LS_AUDIT_MAX_JSON_FILE, &bytes, &len,
                                       r->receipt_err, sizeof r->receipt_err);
    if (st == LS_ERR_IO) {
        uint64_t s = 0;
        char why[64];
        r->receipt_present = ls_audit_stat(run->run_dir, rel, 0, &s, why, sizeof why) != LS_ERR_IO;
        return;
    }
    r->receipt_present = true;
    if (st != LS_OK) return;
    st = ls_receipt_parse(bytes, len, rel, &r->receipt, r->receipt_err, sizeof r->receipt_err);
    free(bytes);
    if (st != LS_OK) r->receipt = NULL;
}

/* Largest N+1 of rank-NNNN directories in the run directory (0: none). */
static uint32_t scan_rank_dirs(const char *run_dir) {
    DIR *d = opendir(run_dir);
    if (d == NULL) return 0;
    uint32_t w = 0;
    struct dirent *de;
    size_t n = 0;
    while ((de = readdir(d)) != NULL && n++ < LS_AUDIT_MAX_DIR_ENTRIES) {
        const char *s = de->d_name;
        if (strncmp(s, "rank-", 5) != 0 || strlen(s) < 9 || strlen(s) > 12) continue;
        char *end = NULL;
        unsigned long v = strtoul(s + 5, &end, 10);
        if (*end != 0 || s[5] < '0' || s[5] > '9') continue;
        if (v < LS_AUDIT_MAX_WORLD && v + 1 > w) w = (uint32_t)v + 1;
    }
    closedir(d);
    return w;
}

/* The v2 block of audit.h: the evidence version and the profile named. */
static void derive_v2(ls_audit_run *run) {
    run->evidence_version = 1;
    const ls_receipt *first = NULL;
    for (uint32_t i = 0; i < run->world && first == NULL; i++) first = run->ranks[i].receipt;
    if (run->manifest != NULL) {
        run->evidence_version = run->manifest->version == 2 ? 2 : 1;
        run->profile_name = run->manifest->profile_name;
        run->profile_sha256 = run->manifest->profile_sha256;
    } else if (first != NULL) {
        run->evidence_version = first->version == 2 ? 2 : 1;
    }
    for (uint32_t i = 0; i < run->world && run->profile_name == NULL; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        if (rc != NULL && rc->version == 2) {
            run->profile_name = rc->profile_name;
            run->profile_sha256 = rc->profile_sha256;
        }
    }
}

static void derive_config(ls_audit_run *run) {
    for (uint32_t i = 0; i < run->world && run->config == NULL; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        if (rc == NULL) continue;
        run->config = rc->config;
        run->build = rc->build;
        run->build_digest = ls_audit_get_str(rc->build, "build_digest");
    }
    if (run->config == NULL && run->manifest != NULL) {
        run->config = run->manifest->config;
        run->build = run->manifest->build;
        run->build_digest = ls_audit_get_str(run->manifest->build, "build_digest");
    }
    run->n_layers = -1;
    run->cfg_group = run->cfg_steps = -1;
    run->first_step = 0;
    if (run->config == NULL) return;
    ls_audit_get_int(run->config, "n_layers", &run->n_layers);
    /* what the trainer records it was asked for (absent: inferred from the traces) */
    int64_t v = 0;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(run->config, "group");
    if (ls_audit_get_int(run->config, "group", &v) && v >= 1 && v <= LS_AUDIT_MAX_MEMBER) run->cfg_group = v;
    else if (g != NULL && !(ls_audit_get_int(run->config, "group", &v) && v == -1)) /* -1: set by each rollouts line */
        snprintf(run->group_note, sizeof run->group_note, "config \"group\" is not an integer 1..%d or -1: not used",
                 LS_AUDIT_MAX_MEMBER);
    /* --prompts-per-step B: a step's members are its B groups' (numbered through the step, b G + i) */
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(run->config, "options");
    int64_t B = 1;
    if (cJSON_IsObject(opts) && cJSON_GetObjectItemCaseSensitive(opts, "prompts_per_step") != NULL &&
        !(ls_audit_get_int(opts, "prompts_per_step", &B) && B >= 1 && B <= LS_AUDIT_MAX_MEMBER)) {
        snprintf(run->group_note, sizeof run->group_note, "config \"options.prompts_per_step\" is not an integer 1..%d: "
                 "not used", LS_AUDIT_MAX_MEMBER);
        B = 1;
        run->cfg_group = -1; /* the members per step are then the traces', and rank.layers says so */
    }
    if (run->cfg_group > 0 && B > 1) {
        if (run->cfg_group * B <= LS_AUDIT_MAX_MEMBER) {
            run->cfg_group *= B;
        } else {
            snprintf(run->group_note, sizeof run->group_note,
                     "config \"group\" %lld times \"options.prompts_per_step\" %lld exceeds %d members: not used",
                     (long long)run->cfg_group, (long long)B, LS_AUDIT_MAX_MEMBER);
            run->cfg_group = -1;
        }
    }
    const cJSON *sr = cJSON_GetObjectItemCaseSensitive(run->config, "steps_requested");
    if (ls_audit_get_int(run->config, "steps_requested", &v) && v >= 1 && v <= LS_AUDIT_MAX_STEPS) run->cfg_steps = v;
    else if (sr != NULL && !(ls_audit_get_int(run->config, "steps_requested", &v) && v == -1))
        snprintf(run->steps_note, sizeof run->steps_note,
                 "config \"steps_requested\" is not an integer 1..%d or -1: not used", LS_AUDIT_MAX_STEPS);
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(run->config, "first_step");
    if (ls_audit_get_int(run->config, "first_step", &v) && v >= 0 && v < LS_AUDIT_MAX_STEPS) run->first_step = v;
    else if (fs != NULL)
        snprintf(run->steps_note, sizeof run->steps_note, "config \"first_step\" is not an integer 0..%d: not used",
                 LS_AUDIT_MAX_STEPS - 1);
    const char *gm = ls_audit_get_str(run->config, "grad_mode");
    run->full_mode = gm != NULL && strcmp(gm, "full") == 0;
    const char *sg = ls_audit_get_str(run->config, "strategy");
    run->naive = sg != NULL && strcmp(sg, "naive") == 0;
    run->ep_size = ls_audit_get_int(run->config, "ep_ranks", &v) && v >= 1 && v <= LS_AUDIT_MAX_WORLD ? (uint32_t)v : 1;
    run->cp_size = ls_audit_get_int(run->config, "cp_ranks", &v) && v >= 1 && v <= LS_AUDIT_MAX_WORLD ? (uint32_t)v : 0;
    run->dp_size = ls_audit_get_int(run->config, "dp_ranks", &v) && v >= 1 && v <= LS_AUDIT_MAX_WORLD ? (uint32_t)v : 1;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(run->config, "faults")) {
        if (!ls_json_is_string(f)) continue;
        run->any_fault = true;
        if (strcmp(f->valuestring, LS_AUDIT_FAULT_LOCAL_ATTENTION) == 0) run->fault_local_attention = true;
        if (strcmp(f->valuestring, LS_AUDIT_FAULT_SKIP_DKV) == 0) run->fault_skip_dkv = true;
        if (strcmp(f->valuestring, LS_AUDIT_FAULT_SKIP_FINALIZE) == 0) run->fault_skip_finalize = true;
    }
}

/* --metrics FILE: the trainer's metrics lines (outside the run: no digest
 * binds them; a source that can only disagree).  Each line one JSON object
 * with an integer "step"; anything else is unusable input naming the line. */
#define METRICS_MAX_BYTES ((size_t)64 << 20)
static ls_status load_metrics(ls_audit_run *run, const char *path, char *err, size_t errlen) {
    char *bytes = NULL;
    size_t len = 0;
    char why[300];
    ls_status st = ls_json_read_bytes_capped(path, METRICS_MAX_BYTES, &bytes, &len, why, sizeof why);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "--metrics %s: %s", path, why);
        return st == LS_ERR_NOMEM ? st : LS_ERR_ARG;
    }
    run->metrics_lines = cJSON_CreateArray();
    st = run->metrics_lines ? LS_OK : LS_ERR_NOMEM;
    size_t line = 0;
    for (size_t at = 0; st == LS_OK && at < len; line++) {
        const char *nl = memchr(bytes + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (bytes + at)) : len - at;
        cJSON *j = NULL;
        int64_t step = -1;
        if (n > 0 && ls_json_parse(bytes + at, n, path, &j, why, sizeof why) != LS_OK) {
            ls_json_errf(err, errlen, "--metrics %s: line %zu: %s", path, line + 1, why);
            st = LS_ERR_ARG;
        } else if (n > 0 && (!cJSON_IsObject(j) || !ls_audit_get_int(j, "step", &step) || step < 0 ||
                             step >= LS_AUDIT_MAX_STEPS)) {
            ls_json_errf(err, errlen, "--metrics %s: line %zu: not a metrics line (an object with an integer "
                         "\"step\" 0..%d)", path, line + 1, LS_AUDIT_MAX_STEPS - 1);
            st = LS_ERR_ARG;
        } else if (n > 0 && !cJSON_AddItemToArray(run->metrics_lines, j)) {
            st = LS_ERR_NOMEM;
        } else {
            j = NULL;
        }
        cJSON_Delete(j);
        at += n + 1;
    }
    free(bytes);
    return st;
}

ls_status ls_audit_load(const ls_audit_options *opt, ls_audit_run **out, char *err, size_t errlen) {
    ls_audit_trace_fields_init();
    *out = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct stat sb;
    if (opt == NULL || opt->run_dir == NULL) {
        ls_json_errf(err, errlen, "no run directory given");
        return LS_ERR_ARG;
    }
    errno = 0;
    if (lstat(opt->run_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        ls_json_errf(err, errlen, "%s: not a run directory (%s)", opt->run_dir,
                     errno               ? strerror(errno)
                     : S_ISLNK(sb.st_mode) ? "a symbolic link: links are never followed; give the real directory"
                                         : "not a directory");
        return S_ISLNK(sb.st_mode) ? LS_ERR_FORMAT : LS_ERR_IO;
    }
    ls_audit_run *run = calloc(1, sizeof *run);
    char *mbytes = NULL;
    size_t mlen = 0;
    ls_status st = LS_ERR_NOMEM;
    if (run == NULL) goto cleanup;
    run->digest_first_step = -1;
    run->run_dir = strdup(opt->run_dir);
    if (run->run_dir == NULL) goto cleanup;
    run->opt = *opt;
    run->opt.run_dir = NULL; /* run->run_dir is the model's own copy */
    /* the manifest */
    st = ls_audit_read_noted(&run->reads, run->run_dir, LS_MANIFEST_FILE, LS_AUDIT_MAX_JSON_FILE, &mbytes, &mlen,
                             run->manifest_err, sizeof run->manifest_err);
    run->manifest_present = st != LS_ERR_IO;
    if (st == LS_OK) {
        st = ls_manifest_parse(mbytes, mlen, LS_MANIFEST_FILE, &run->manifest, run->manifest_err,
                               sizeof run->manifest_err);
        if (st != LS_OK) run->manifest = NULL;
    }
    if (st == LS_ERR_NOMEM) goto cleanup;
    /* the world */
    uint32_t dirs = scan_rank_dirs(run->run_dir);
    if (run->manifest != NULL && run->manifest->world <= LS_AUDIT_MAX_WORLD) {
        run->world = run->manifest->world;
        snprintf(run->world_source, sizeof run->world_source, "manifest");
    } else {
        run->world = dirs;
        snprintf(run->world_source, sizeof run->world_source, "rank directories");
    }
    if (run->world == 0 && !run->manifest_present) {
        ls_json_errf(err, errlen, "%s: not a run directory (no %s, no rank-NNNN directory)", opt->run_dir,
                     LS_MANIFEST_FILE);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    if (run->world < dirs) run->world = dirs; /* more rank dirs than the manifest says: audited too */
    st = LS_ERR_NOMEM;
    run->ranks = calloc(run->world ? run->world : 1, sizeof *run->ranks);
    if (run->ranks == NULL) goto cleanup;
    for (uint32_t i = 0; i < run->world; i++) {
        run->ranks[i].rank = i;
        load_receipt(run, &run->ranks[i]);
    }
    /* without a manifest the receipts or the trace headers may know a larger world */
    if (run->manifest == NULL) {
        uint32_t w = run->world;
        for (uint32_t i = 0; i < run->world; i++)
            if (run->ranks[i].receipt && run->ranks[i].receipt->world > w &&
                run->ranks[i].receipt->world <= LS_AUDIT_MAX_WORLD)
                w = run->ranks[i].receipt->world;
        if (w > run->world) {
            ls_audit_rank *n = realloc(run->ranks, w * sizeof *n);
            if (n == NULL) goto cleanup;
            memset(n + run->world, 0, (w - run->world) * sizeof *n);
            run->ranks = n;
            for (uint32_t i = run->world; i < w; i++) {
                run->ranks[i].rank = i;
                load_receipt(run, &run->ranks[i]);
            }
            run->world = w;
            snprintf(run->world_source, sizeof run->world_source, "receipts");
        }
    }
    derive_config(run); /* the layer checks run while the traces stream */
    derive_v2(run);
    for (uint32_t i = 0; i < run->world; i++) {
        run->ranks[i].steps_closed = run->first_step; /* earlier steps are not this run's: an event of one is late */
        st = ls_audit_load_trace(run, &run->ranks[i]);
        if (st != LS_OK) goto cleanup;
    }
    if (run->manifest == NULL && run->evidence_version == 1 && run->world > 0 && run->ranks[0].report.version == 2)
        run->evidence_version = 2; /* no manifest, no receipt: the trace header says */
    if (run->manifest != NULL) {
        st = ls_audit_verify_subjects(run);
        if (st != LS_OK) goto cleanup;
    }
    ls_audit_check_dsse(run, mbytes, mlen);
    ls_audit_load_parity(run);
    if (opt->metrics_path != NULL && (st = load_metrics(run, opt->metrics_path, err, errlen)) != LS_OK)
        goto cleanup; /* its message is load_metrics' */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    run->load_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    st = LS_OK;
    *out = run;
    run = NULL;
cleanup:
    if (st == LS_ERR_NOMEM) ls_json_errf(err, errlen, "%s: out of memory", opt->run_dir);
    free(mbytes);
    ls_audit_free(run);
    return st;
}

void ls_audit_free(ls_audit_run *run) {
    if (run == NULL) return;
    for (uint32_t i = 0; run->ranks && i < run->world; i++) {
        ls_audit_rank *r = &run->ranks[i];
        ls_receipt_free(r->receipt);
        ls_trace_report_free(&r->report);
        ls_audit_steps_free(r);
        free(r->coll);
        free(r->p2p);
        free(r->steps);
        free(r->metrics);
        ls_audit_probes_free(r);
    }
    free(run->ranks);
    for (size_t i = 0; i < run->n_groups; i++) free(run->groups[i]);
    for (size_t i = 0; i < run->n_purposes; i++) free(run->purposes[i]);
    for (size_t i = 0; i < run->n_mem_cats; i++) free(run->mem_cats[i]);
    ls_manifest_free(run->manifest);
    ls_verify_report_free(&run->verify);
    ls_audit_reads_free(&run->reads);
    cJSON_Delete(run->metrics_lines);
    cJSON_Delete(run->parity);
    free(run->rules);
    free(run->digest_splits);
    free(run->run_dir);
    free(run);
}
