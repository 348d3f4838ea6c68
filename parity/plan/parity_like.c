/* parity_like.c - longstraw-parity --like RUN (parity.h): a matrix whose
 * report covers the run (receipts/format/coverage.h).  From the run's manifest
 * (schema-checked, size-capped): its family and model (written as the
 * trainer's model config, OUT/like-model.json), its trainable set (LoRA
 * rank, alpha, experts), its objective's hyperparameters, its dtype
 * (float32 needs float64 beside it: its tolerance is measured against it)
 * and CP sizes 1, 2, 4, ... up to and including the run's (2 for a one-rank
 * run: the negative controls need two ranks), and for an expert-parallel
 * run (ep_ranks N > 1: its CP size is world / N) the EP sizes 1 and N.  The lengths
 * stay parity's own (the coverage's reducible dimensions); one matrix entry
 * runs unless --configs names others.  And the run's path (its configuration's
 * "paths", or derived from its options): the path runs of parity_path.c
 * launch the trainer the way the run did.  What parity cannot prove is refused
 * by name: the sft objective (parity's checks are of the GRPO loss), a run
 * wider than LS_PARITY_MAX_CP ranks, faults, the naive strategy. */
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
#include "receipts/signing/manifest.h"

#define MAX_RECEIPT_BYTES (64u << 20)

static ls_manifest *like_manifest; /* the one --like run's manifest, reachable until exit */

static bool num_of(const cJSON *cfg, const char *k, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, k);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return false;
    *out = v->valuedouble;
    return true;
}

/* ---- the run's path, derived from its options (a run that recorded none; parity.h) ----------- */

static const char *opt_str(const cJSON *o, const char *k, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static double opt_num(const cJSON *o, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : dflt;
}

cJSON *ls_parity_path_derive(const char *run_dir, const cJSON *config, unsigned world, char *err, size_t errlen) {
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(config, "options");
    if (!cJSON_IsObject(opt)) {
        snprintf(err, errlen, "the configuration has no \"options\" to derive the run's path from");
        return NULL;
    }
    cJSON *p = cJSON_CreateObject();
    bool given = strcmp(opt_str(opt, "input", "task"), "rollouts") == 0;
    bool sft = strcmp(opt_str(config, "objective", "grpo"), "sft") == 0;
    double beta = opt_num(config, "beta", 0.04);
    ls_coverage_paths_put(p, "responses", sft ? "target" : given ? "given" : "sampled");
    ls_coverage_paths_put(p, "old_logprobs", sft ? "none" : given ? "given" : "computed");
    const char *ref = "none";
    if (!sft && beta > 0 && given) ref = "given";
    else if (!sft && beta > 0) {
        /* what the last step did (the receipt's memory plan), else what --keep-reference asked for */
        char path[LS_PARITY_PATH], why[256];
        snprintf(path, sizeof path, "%s/rank-0000/receipt.json", run_dir);
        cJSON *rc = NULL;
        const char *kept = NULL;
        if (ls_json_read_file_capped(path, MAX_RECEIPT_BYTES, &rc, why, sizeof why) == LS_OK) {
            const cJSON *mp = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rc, "predicate"), "rank_state"),
                "memory_plan");
            const char *v = opt_str(mp, "reference", NULL);
            if (v && (strcmp(v, "kept") == 0 || strcmp(v, "recaptured") == 0)) kept = v;
        }
        const char *kr = opt_str(opt, "keep_reference", "auto");
        if (kept) ls_coverage_paths_put(p, "reference", strcmp(kept, "kept") == 0 ? "kept" : "recaptured");
        else if (strcmp(kr, "on") == 0) ls_coverage_paths_put(p, "reference", "kept");
        else if (strcmp(kr, "off") == 0) ls_coverage_paths_put(p, "reference", "recaptured");
        else {
            ls_coverage_paths_put(p, "reference", "kept");
            ls_coverage_paths_put(p, "reference", "recaptured");
        }
        cJSON_Delete(rc);
        ref = NULL;
    }
    if (ref) ls_coverage_paths_put(p, "reference", ref);
    ls_coverage_paths_put(p, "prompt_groups", opt_num(opt, "prompts_per_step", 1) > 1 ? "several" : "one");
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(config, "prefix_frozen");
    ls_coverage_paths_put(p, "prefix", "fresh");
    if (cJSON_IsNumber(pf) && pf->valuedouble > 1) ls_coverage_paths_put(p, "prefix", "frozen");
    ls_coverage_paths_put(p, "start", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(opt, "resumed")) ? "resumed" : "fresh");
    if (given) { /* the lines' lengths are not recorded: the harder classes */
        ls_coverage_paths_put(p, "shards", world > 1 ? "uneven" : "one");
        ls_coverage_paths_put(p, "pages", world > 1 ? "cut" : "aligned");
        ls_coverage_paths_put(p, "chunks", world > 1 ? "cut" : "aligned");
    } else {
        const char *sh, *pg, *ch;
        ls_coverage_shard_classes((int64_t)opt_num(opt, "prompt_len", 4096) - 1, (int)world,
                                  (int64_t)opt_num(opt, "page_size", 64), (int64_t)opt_num(opt, "capture_chunk", 2048),
                                  &sh, &pg, &ch);
        ls_coverage_paths_put(p, "shards", sh);
        ls_coverage_paths_put(p, "pages", pg);
        ls_coverage_paths_put(p, "chunks", ch);
    }
    ls_coverage_paths_put(p, "task", given ? "none" : opt_str(opt, "task", "retrieval"));
    return p;
}

#define FAIL(...)                                  \
    do {                                           \
        snprintf(err, errlen, __VA_ARGS__);        \
        goto done;                                 \
    } while (0)

int ls_parity_like(const char *run_dir, ls_parity_opts *o, char *model_path, size_t cap, char *err, size_t errlen) {
    char path[LS_PARITY_PATH];
    int rc = 2;
    ls_manifest *m = NULL;
    cJSON *model = NULL;
    snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE);
    char why[512];
    if (ls_manifest_read(path, &m, why, sizeof why) != LS_OK) {
        m = NULL;
        FAIL("--like %s: %s", run_dir, why);
    }
    const cJSON *cfg = m->config;
    /* the kernels' ISA (kernels/isa.h, the build object's kernel_isa): the report's trainer runs use the run's,
       through LS_KERNEL_ISA, so that their build digest is the run's (a trainer on a CPU without it refuses) */
    const cJSON *isa = m->build != NULL ? cJSON_GetObjectItemCaseSensitive(m->build, "kernel_isa") : NULL;
    if (isa != NULL) {
        if (!cJSON_IsString(isa) || (strcmp(isa->valuestring, "portable") != 0 &&
                                     strcmp(isa->valuestring, "avx2") != 0 && strcmp(isa->valuestring, "avx512") != 0))
            FAIL("--like %s: build \"kernel_isa\" is not one of portable, avx2, avx512", run_dir);
        const char *env = getenv("LS_KERNEL_ISA");
        if (env != NULL && env[0] != '\0' && strcmp(env, isa->valuestring) != 0)
            FAIL("--like %s: the run used the %s kernels and LS_KERNEL_ISA says %.40s: unset it (--like takes the "
                 "run's)", run_dir, isa->valuestring, env);
        if (setenv("LS_KERNEL_ISA", isa->valuestring, 1) != 0) FAIL("--like %s: setenv: %s", run_dir, strerror(errno));
    }
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(cfg, "faults");
    if (cJSON_GetArraySize(faults) > 0)
        FAIL("--like %s: the run recorded faults; a report covers fault-free runs only", run_dir);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cfg, "strategy");
    if (cJSON_IsString(st) && strcmp(st->valuestring, "longstraw") != 0)
        FAIL("--like %s: strategy %s is the reference itself, not a run parity certifies", run_dir, st->valuestring);
    /* the family and the model */
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(cfg, "family");
    if (!cJSON_IsString(fam) || ls_parity_family_of(fam->valuestring) == NULL)
        FAIL("--like %s: config \"family\" is not one of %s%s%s", run_dir, ls_parity_family_names(),
             *ls_parity_families_error() ? ": " : "", ls_parity_families_error());
    if (o->family != NULL && strcmp(o->family, fam->valuestring) != 0)
        FAIL("--like %s: the run's family is %s, --family says %s", run_dir, fam->valuestring, o->family);
    o->family = fam->valuestring; /* kept: m lives until main returns (o->like_manifest) */
    o->fam = ls_parity_family_of(o->family);
    model = ls_coverage_model(cfg);
    if (model == NULL) FAIL("--like %s: no model in the configuration", run_dir);
    if (ls_parity_mkdirs(o->out) != 0) FAIL("--out %s: cannot create it: %s", o->out, strerror(errno));
    snprintf(model_path, cap, "%s/like-model.json", o->out);
    if (ls_json_write_file(model_path, model, why, sizeof why) != LS_OK) FAIL("%s", why);
    o->model_config = model_path;
    /* the trainable set */
    cJSON *tm = ls_coverage_train_mode(cfg, why, sizeof why);
    if (tm == NULL) FAIL("--like %s: %s", run_dir, why);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(tm, "train_mode");
    o->train_mode = strcmp(mode->valuestring, "full") == 0 ? "full" : "lora";
    double x;
    if (num_of(tm, "lora_r", &x)) o->lora_r = (int)x;
    if (num_of(tm, "lora_alpha", &x)) o->lora_alpha = x;
    o->lora_experts = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tm, "lora_experts"));
    cJSON_Delete(tm);
    /* the objective */
    cJSON *objs = ls_coverage_objectives(cfg, why, sizeof why);
    if (objs == NULL) FAIL("--like %s: %s", run_dir, why);
    const cJSON *ob;
    bool grpo = false, sft = false;
    cJSON_ArrayForEach(ob, objs) {
        const char *k = cJSON_GetObjectItemCaseSensitive(ob, "objective")->valuestring;
        if (strcmp(k, "sft") == 0) sft = true;
        if (strcmp(k, "grpo") == 0) {
            grpo = true;
            num_of(ob, "epsilon", &o->epsilon);
            num_of(ob, "beta", &o->beta);
            num_of(ob, "temperature", &o->temperature);
        }
    }
    cJSON_Delete(objs);
    if (sft)
        FAIL("--like %s: the run used the sft objective%s; parity proves the GRPO loss only, so no report can cover "
             "it", run_dir, grpo ? " for its first steps (--sft-steps)" : "");
    /* the dtype and the CP sizes */
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(cfg, "dtype");
    o->dtype[LS_PARITY_F64] = true;
    o->dtype[LS_PARITY_F32] = !cJSON_IsString(dt) || strcmp(dt->valuestring, "f64") != 0;
    uint32_t w = m->world;
    if (w < 1 || w > LS_PARITY_MAX_CP)
        FAIL("--like %s: the run has %u ranks; parity runs at most %d", run_dir, (unsigned)w, LS_PARITY_MAX_CP);
    /* the CP x EP grid (config ep_ranks, absent: 1): the CP sizes below are the run's CP size's, world / ep;
       EP 1 and the run's EP size (every path run then also at EP-N, parity_path.c) */
    const cJSON *epr = cJSON_GetObjectItemCaseSensitive(cfg, "ep_ranks");
    uint32_t ep = 1;
    if (epr != NULL) {
        if (!cJSON_IsNumber(epr) || epr->valuedouble < 1 || epr->valuedouble > (double)w ||
            epr->valuedouble != (double)(uint32_t)epr->valuedouble || w % (uint32_t)epr->valuedouble != 0)
            FAIL("--like %s: config \"ep_ranks\" is not an integer >= 1 that divides the run's %u ranks", run_dir,
                 (unsigned)w);
        ep = (uint32_t)epr->valuedouble;
    }
    if (ep > 1 && !o->fam->routed_experts)
        FAIL("--like %s: the run's ep_ranks %u: family %s has no routed experts (expert parallelism needs them)",
             run_dir, (unsigned)ep, o->family);
    o->n_eps = 0;
    o->eps[o->n_eps++] = 1;
    if (ep > 1) o->eps[o->n_eps++] = (int)ep;
    w /= ep; /* the run's CP size */
    /* 1 and the powers of two below the run's size, and the run's own; a one-rank run gets 2 too: the
       negative controls (a rank attending to its own keys only, a reduction dropped) need two ranks */
    o->n_cps = 0;
    for (uint32_t c = 1; c < w; c *= 2) o->cps[o->n_cps++] = (int)c;
    o->cps[o->n_cps++] = (int)w;
    if (w == 1) o->cps[o->n_cps++] = 2;
    snprintf(o->like_run_id, sizeof o->like_run_id, "%.120s", m->run_id);
    /* the run's path (parity_path.c): recorded, or derived from its options for a run that recorded none */
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(cfg, "options");
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(cfg, "paths");
    if (paths != NULL && !cJSON_IsObject(paths)) FAIL("--like %s: config \"paths\" is not an object", run_dir);
    o->like_paths_derived = paths == NULL;
    o->like_paths = paths ? cJSON_Duplicate(paths, true) : ls_parity_path_derive(run_dir, cfg, w, why, sizeof why);
    if (o->like_paths == NULL) FAIL("--like %s: the run's path: %s", run_dir, why);
    const cJSON *gm = cJSON_GetObjectItemCaseSensitive(cfg, "grad_mode");
    snprintf(o->like_grad_mode, sizeof o->like_grad_mode, "%s",
             cJSON_IsString(gm) && strcmp(gm->valuestring, "full") == 0 ? "full" : "detached");
    o->like_prompts_per_step = num_of(opt, "prompts_per_step", &x) && x >= 1 && x <= 4096 ? (int)x : 1;
    o->like_capture_chunk = num_of(opt, "capture_chunk", &x) && x >= 0 && x <= 1 << 30 ? (int)x : 2048;
    rc = 0;
done:
    cJSON_Delete(model);
    if (rc == 0) o->like_manifest = like_manifest = m; /* held for the process: o->family points into it */
    else ls_manifest_free(m);
    return rc;
}
