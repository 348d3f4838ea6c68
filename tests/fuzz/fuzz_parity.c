/* fuzz_parity.c - libFuzzer target for the parity report and coverage
 * readers the audit runs on an untrusted report (receipts/format/coverage.h): the
 * input, split at its first NUL byte (or whole), is a parity report and a
 * run configuration.  The report is parsed strictly and checked against
 * schemas/parity.schema.json; whatever it holds, its "coverage" is checked
 * against the configuration and against a fixed valid one (hybrid-tiny),
 * the configuration's model, trainable set and objectives are derived and
 * digested.  Traps when an invariant breaks:
 *  - a configuration always lies inside the coverage derived from itself
 *    (model, train mode, objectives, its strategy, dtype, grad mode, world,
 *    EP size, its path), but for the path decisions and values the audit does not
 *    know and the known decisions it does not record (deny by default);
 *  - every outside field the check reports is a non-empty name with a
 *    detail, and the count equals the callbacks. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

static size_t calls;

static void outside(void *user, const char *field, const char *detail) {
    (void)user;
    if (field == NULL || field[0] == 0 || detail == NULL || detail[0] == 0) __builtin_trap();
    calls++;
}

/* The self-coverage check: only an unknown or unrecorded path decision may lie outside. */
static void outside_self(void *user, const char *field, const char *detail) {
    outside(user, field, detail);
    if (strstr(detail, "the audit does not know") == NULL && strstr(detail, "does not record") == NULL) __builtin_trap();
}

static const char FIXED[] =
    "{\"family\":\"hybrid\",\"vocab\":256,\"d_model\":64,\"n_layers\":8,\"ffn_dim\":128,\"rms_eps\":1e-06,"
    "\"rope_theta\":10000,\"gdn_hk\":2,\"gdn_hv\":4,\"gdn_dk\":16,\"gdn_dv\":16,\"conv_kernel\":4,\"attn_heads\":4,"
    "\"attn_kv_heads\":2,\"head_dim\":32,\"rope_dim\":8,\"train_mode\":\"lora\",\"lora_r\":4,\"lora_alpha\":8,"
    "\"lora_experts\":false,\"grad_mode\":\"full\",\"epsilon\":0.2,\"beta\":0.04,\"temperature\":0.9,\"faults\":[],"
    "\"dtype\":\"f32\",\"strategy\":\"longstraw\",\"objective\":\"grpo\",\"sft_steps\":0,\"cp_ranks\":2,\"ep_ranks\":1,"
    "\"paths\":{\"chunks\":[\"cut\"],\"old_logprobs\":[\"computed\"],\"pages\":[\"cut\"],\"prefix\":[\"fresh\"],"
    "\"prompt_groups\":[\"one\"],\"reference\":[\"kept\"],\"responses\":[\"sampled\"],\"shards\":[\"uneven\"],"
    "\"start\":[\"fresh\"],\"task\":[\"retrieval\"],\"replay\":[\"taped\"],\"state_tier\":[\"device\"]}}";

/* The coverage longstraw-parity would state for runs like cfg (NULL when cfg does not state enough), and in
 * *world the ranks of such a run: its CP size (3) times its EP size (ep_ranks, stated in eps as parity states
 * the EP sizes its runs recorded; 3 alone where ep_ranks is no integer in 1..1024: the audit then divides
 * nothing). */
static cJSON *self_coverage(const cJSON *cfg, unsigned *world) {
    char err[256], hex[LS_DIGEST_HEX_SIZE];
    cJSON *model = ls_coverage_model(cfg), *tm = ls_coverage_train_mode(cfg, err, sizeof err);
    cJSON *objs = ls_coverage_objectives(cfg, err, sizeof err), *cov = cJSON_CreateObject();
    const char *keys[] = {"grad_mode", "strategy", "dtype"}, *sets[] = {"grad_modes", "strategies", "dtypes"};
    bool ok = model && tm && objs && cov && ls_coverage_model_sha256(model, hex, err, sizeof err) == LS_OK;
    if (ok) {
        cJSON_AddItemToObject(cov, "model", model);
        model = NULL;
        cJSON_AddStringToObject(cov, "model_sha256", hex);
        cJSON *a = cJSON_AddArrayToObject(cov, "train_modes");
        ok = a && ls_coverage_set_add(a, tm) == LS_OK;
        cJSON_AddItemToObject(cov, "objectives", objs);
        objs = NULL;
        for (int i = 0; ok && i < 3; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[i]);
            cJSON *s = cJSON_AddArrayToObject(cov, sets[i]);
            ok = v != NULL && s != NULL && ls_coverage_set_add(s, v) == LS_OK;
        }
        cJSON *w = cJSON_AddArrayToObject(cov, "worlds");
        ok = ok && w && cJSON_AddItemToArray(w, cJSON_CreateNumber(3));
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(cfg, "ep_ranks");
        *world = 3;
        if (cJSON_IsNumber(ep)) {
            cJSON *e = cJSON_AddArrayToObject(cov, "eps");
            ok = ok && e && ls_coverage_set_add(e, ep) == LS_OK;
            if (ep->valuedouble >= 1 && ep->valuedouble <= 1024 && ep->valuedouble == (double)(unsigned)ep->valuedouble)
                *world = 3 * (unsigned)ep->valuedouble;
        }
        cJSON *p = cJSON_AddObjectToObject(cov, "paths"); /* a malformed path: no self-coverage */
        ok = ok && p && ls_coverage_paths_add(p, cfg, err, sizeof err) == LS_OK;
    }
    cJSON_Delete(model);
    cJSON_Delete(tm);
    cJSON_Delete(objs);
    if (!ok) {
        cJSON_Delete(cov);
        return NULL;
    }
    return cov;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t rlen = nul ? (size_t)(nul - data) : size;
    char err[512];
    static cJSON *fixed;
    cJSON *report = NULL, *cfg = NULL;
    if (fixed == NULL) { /* once: the fixed configuration lies inside the coverage derived from it */
        fixed = cJSON_Parse(FIXED);
        unsigned w = 0;
        cJSON *self = fixed ? self_coverage(fixed, &w) : NULL;
        if (self == NULL || ls_coverage_check(self, fixed, w, NULL, NULL) != 0) __builtin_trap();
        cJSON_Delete(self);
    }
    if (ls_json_parse((const char *)data, rlen, "report", &report, err, sizeof err) == LS_OK) {
        const ls_schema *sc = NULL;
        ls_schema_errors errs = {0};
        if (ls_schema_get("parity", &sc, err, sizeof err) != LS_OK) __builtin_trap();
        ls_schema_validate(sc, report, &errs);
        ls_schema_errors_free(&errs);
        const cJSON *cov = cJSON_GetObjectItemCaseSensitive(report, "coverage");
        calls = 0;
        size_t n = ls_coverage_check(cov, fixed, 2, outside, NULL);
        if (n != calls) __builtin_trap();
        calls = 0;
        n = ls_coverage_check(report, report, 1, outside, NULL); /* any object as either side */
        if (n != calls) __builtin_trap();
    }
    if (nul && ls_json_parse((const char *)nul + 1, size - rlen - 1, "config", &cfg, err, sizeof err) == LS_OK) {
        calls = 0;
        size_t n = ls_coverage_check(report ? cJSON_GetObjectItemCaseSensitive(report, "coverage") : NULL, cfg, 4,
                                     outside, NULL);
        if (n != calls) __builtin_trap();
        unsigned w = 0;
        cJSON *self = self_coverage(cfg, &w);
        if (self != NULL) {
            calls = 0;
            if (ls_coverage_check(self, cfg, w, outside_self, NULL) != calls) __builtin_trap(); /* inside its own */
            cJSON_Delete(self);
        }
    }
    cJSON_Delete(report);
    cJSON_Delete(cfg);
    return 0;
}
