/* parity_like.c - longstraw-parity --like RUN (parity.h): a matrix whose
 * report covers the run (receipts/coverage.h).  From the run's manifest
 * (schema-checked, size-capped): its family and model (written as the
 * trainer's model config, OUT/like-model.json), its trainable set (LoRA
 * rank, alpha, experts), its objective's hyperparameters, its dtype
 * (float32 needs float64 beside it: its tolerance is measured against it)
 * and CP sizes 1, 2, 4, ... up to and including the run's (2 for a one-rank
 * run: the negative controls need two ranks).  The lengths
 * stay parity's own (the coverage's reducible dimensions); one matrix entry
 * runs unless --configs names others.  What parity cannot prove is refused
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

#include "parity/parity.h"
#include "receipts/coverage.h"
#include "receipts/json_util.h"
#include "receipts/manifest.h"

static ls_manifest *like_manifest; /* the one --like run's manifest, reachable until exit */

static bool num_of(const cJSON *cfg, const char *k, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, k);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return false;
    *out = v->valuedouble;
    return true;
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
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(cfg, "faults");
    if (cJSON_GetArraySize(faults) > 0)
        FAIL("--like %s: the run recorded faults; a report covers fault-free runs only", run_dir);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cfg, "strategy");
    if (cJSON_IsString(st) && strcmp(st->valuestring, "longstraw") != 0)
        FAIL("--like %s: strategy %s is the reference itself, not a run parity certifies", run_dir, st->valuestring);
    /* the family and the model */
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(cfg, "family");
    if (!cJSON_IsString(fam) || ls_parity_family_of(fam->valuestring) == NULL)
        FAIL("--like %s: config \"family\" is not one of %s", run_dir, ls_parity_family_names());
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
    /* 1 and the powers of two below the run's size, and the run's own; a one-rank run gets 2 too: the
       negative controls (a rank attending to its own keys only, a reduction dropped) need two ranks */
    o->n_cps = 0;
    for (uint32_t c = 1; c < w; c *= 2) o->cps[o->n_cps++] = (int)c;
    o->cps[o->n_cps++] = (int)w;
    if (w == 1) o->cps[o->n_cps++] = 2;
    snprintf(o->like_run_id, sizeof o->like_run_id, "%.120s", m->run_id);
    rc = 0;
done:
    cJSON_Delete(model);
    if (rc == 0) o->like_manifest = like_manifest = m; /* held for the process: o->family points into it */
    else ls_manifest_free(m);
    return rc;
}
