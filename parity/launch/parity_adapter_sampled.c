/* parity_adapter_sampled.c - an adapter's prompt-only path (parity_adapter.h,
 * docs/parity.md "Adapters"): the trainer given a batch of a prompt alone
 * samples its responses, rewards them and scores its own old log-probs,
 * the path a real run takes and the adapter's batch (responses and old
 * log-probs supplied) never does.
 *
 * In DIR/runs/adapter/: batch-prompt.json (the adapter's prompt, nothing
 * else); mode run at every CP size (float64, full, no fault), each writing
 * the batch it ran to {out}/batch.json (prompt, responses, rewards,
 * old_logprobs); batch-sampled-ref.json (CP-1's prompt, responses and
 * rewards: no old log-probs, so the reference scores its own, ratio 1);
 * the reference on it.  Checks, configuration pP-gG-sampled:
 *   logprob     CP-N's dumped prompt and responses equal CP-1's, its policy
 *               and old log-probs CP-1's                               (2)
 *   ref_logprob the policy's and the trainer's own old log-probs against
 *               the reference's on the batch it ran                    (2)
 *   cp_grad, cp_params  CP-N against CP-1                              (3)
 *   grad        the gradient against the reference's on-policy one     (4)
 *   ref_loss    the loss against the reference's: the on-policy GRPO loss
 *               is 0 in exact arithmetic, so the error is taken relative
 *               to max(|reference|, 1)                                  (4)
 * With DP sizes (o->dps), each DP size D > 1 also runs at the CP sizes the
 * matrix's DP runs take (ls_parity_adapter_dp_fits): its checks are those
 * of a CP run (logprob, cp_grad, cp_params against CP-1 DP-1; ref_logprob,
 * grad, ref_loss against the reference), tagged "dp" D with world cp x D,
 * and dp_grad (its gradient against the DP-1 run of its CP size, level 3).
 * Every run's manifest adds its coverage (its path: responses sampled, old
 * log-probs computed, its shards; its DP size, which must be the one it was
 * launched at) through ls_parity_report_build. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/plan/parity_adapter.h"
#include "receipts/format/json_util.h"

#define SAMPLE_DRAWS 8 /* draws of the sampler's seed until CP-1's rewards differ */
/* the runs of one draw: every CP size at DP 1, and the (DP, CP) pairs that fit 8 processes (at most 12) */
#define MAX_SRUNS (LS_PARITY_MAX_CP + 12)

typedef struct {
    char label[96], out[LS_PARITY_PATH];
    int cp, dp; /* dp 1: no DP */
    size_t same_cp; /* a DP run's: the index of the DP-1 run of its CP size */
    bool ran;
    cJSON *dump; /* {out}/batch.json */
    int g, lens[LS_PARITY_MAX_G];
    ls_parity_logprobs pol, old;
    ls_parity_tensors grad, params;
    double loss;
} srun;

static void srun_free(srun *x) {
    cJSON_Delete(x->dump);
    ls_parity_logprobs_free(&x->pol);
    ls_parity_logprobs_free(&x->old);
    ls_parity_tensors_free(&x->grad);
    ls_parity_tensors_free(&x->params);
}

static bool token_ids(const cJSON *a, int vocab, int max) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1 || cJSON_GetArraySize(a) > max) return false;
    const cJSON *t;
    cJSON_ArrayForEach(t, a) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= vocab)
            return false;
    }
    return true;
}

/* The batch a run wrote: the prompt it was given, G <= LS_PARITY_MAX_G responses of token ids below the
 * vocabulary, a finite reward and one old log-prob per token each. */
static ls_status read_dump(const ls_parity_adapter *a, srun *x, const cJSON *prompt, char *err, size_t errlen) {
    char p[LS_PARITY_PATH];
    snprintf(p, sizeof p, "%s/batch.json", x->out);
    ls_status s = ls_json_read_file_capped(p, 16u << 20, &x->dump, err, errlen);
    if (s != LS_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "%s (on a prompt-only batch, mode run writes the batch it ran: batch.prompt_only)", why);
        return s;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(x->dump, "responses");
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(x->dump, "rewards"), *y;
    if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->dump, "prompt"), prompt, true)) {
        snprintf(err, errlen, "%s: field 'prompt' is not the prompt the run was given", p);
        return LS_ERR_FORMAT;
    }
    x->g = cJSON_GetArraySize(rs);
    if (!cJSON_IsArray(rs) || x->g < 1 || x->g > LS_PARITY_MAX_G) {
        snprintf(err, errlen, "%s: field 'responses': 1 to %d responses expected (the trainer's sampled group)", p,
                 LS_PARITY_MAX_G);
        return LS_ERR_FORMAT;
    }
    int i = 0;
    cJSON_ArrayForEach(y, rs) {
        if (!token_ids(y, a->vocab, 1024)) {
            snprintf(err, errlen, "%s: field 'responses[%d]': not 1 to 1024 token ids below %d", p, i, a->vocab);
            return LS_ERR_FORMAT;
        }
        x->lens[i++] = cJSON_GetArraySize(y);
    }
    if (!cJSON_IsArray(rw) || cJSON_GetArraySize(rw) != x->g) {
        snprintf(err, errlen, "%s: field 'rewards': one per response expected", p);
        return LS_ERR_FORMAT;
    }
    cJSON_ArrayForEach(y, rw) {
        if (!cJSON_IsNumber(y) || !isfinite(y->valuedouble)) {
            snprintf(err, errlen, "%s: field 'rewards': not finite numbers", p);
            return LS_ERR_FORMAT;
        }
    }
    if ((s = ls_parity_json_logprobs(x->dump, "old_logprobs", p, &x->old, err, errlen)) != LS_OK) return s;
    for (i = 0; i < x->g; i++)
        if (i >= x->old.g || x->old.len[i] != x->lens[i]) {
            snprintf(err, errlen, "%s: field 'old_logprobs': one list per response, one log-prob per token expected", p);
            return LS_ERR_FORMAT;
        }
    return LS_OK;
}

static ls_status job_of(const ls_parity_opts *o, const ls_parity_adapter *a, const char *mode, int cp, int dp,
                        uint64_t seed, const char *weights, const char *batch, const char *out, ls_parity_job *j, char *err,
                        size_t errlen) {
    ls_status s = ls_parity_fresh_dir(out, err, errlen);
    if (s != LS_OK) return s;
    char log[LS_PARITY_PATH];
    snprintf(log, sizeof log, "%s.log", out);
    ls_parity_adapter_vars v = {.mode = mode, .cp = cp, .dp = dp, .dtype = "f64", .grad_mode = "full",
                                .fault = a->fault_none,
                                .weights = weights, .batch = batch, .out = out, .seed = seed};
    (void)o;
    return ls_parity_adapter_job(a, &v, log, j, err, errlen);
}

static ls_status run_jobs(const ls_parity_opts *o, const ls_parity_adapter *a, ls_parity_job *jobs, size_t n,
                          const char *const *labels, char *err, size_t errlen) {
    ls_status s = ls_parity_jobs_run(jobs, n, o->jobs, o->timeout_s, err, errlen);
    for (size_t i = 0; s == LS_OK && i < n; i++)
        if (jobs[i].rc != 0) {
            snprintf(err, errlen, "%s: the prompt-only path's run %s exited %d%s (its output: %s)", a->name, labels[i],
                     jobs[i].rc, jobs[i].rc == 137 ? " (killed: --timeout?)" : "", jobs[i].log);
            s = LS_ERR_FORMAT;
        }
    return s;
}

static cJSON *tensors_vs(const ls_parity_tensors *want, const ls_parity_tensors *x, const ls_parity_tensors *ref) {
    cJSON *arr = ls_parity_tensor_entries(want, x, ref, NULL, NULL, NULL, NULL);
    if (x->n != want->n) {
        char what[96];
        snprintf(what, sizeof what, "tensor count (%zu, the reference's %zu)", x->n, want->n);
        cJSON_AddItemToArray(arr, ls_parity_entry(what, (ls_parity_err){INFINITY, INFINITY}, LS_PARITY_F64_TOL, -1));
    }
    return arr;
}

static bool rewards_differ(const cJSON *dump) {
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(dump, "rewards"), *x;
    double first = NAN;
    cJSON_ArrayForEach(x, rw) {
        if (isnan(first)) first = x->valuedouble;
        else if (x->valuedouble != first) return true;
    }
    return false;
}

static void checks(const ls_parity_adapter *a, ls_parity_report *rep, srun *runs, size_t nr, size_t k1,
                   const srun *ref, const char *cfg) {
    const srun *c1 = &runs[k1];
    const ls_parity_tensors *want = &ref->grad;
    char name[256], cand[160], refn[160], at[32];
    snprintf(refn, sizeof refn, "%s cp1 full on its own sampled batch", a->name);
    for (size_t k = 0; k < nr; k++) {
        srun *x = &runs[k];
        int n = x->cp * x->dp, D = x->dp; /* n: the world, cp x dp processes */
        if (D > 1) snprintf(at, sizeof at, "cp%d dp%d", x->cp, D);
        else snprintf(at, sizeof at, "cp%d", x->cp);
        snprintf(cand, sizeof cand, "%s %s full on its own sampled batch", a->name, at);
        if (n > 1) { /* the same responses drawn, the same log-probs scored, as CP-1 */
            cJSON *arr = cJSON_CreateArray();
            bool same = cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->dump, "responses"),
                                      cJSON_GetObjectItemCaseSensitive(c1->dump, "responses"), true) &&
                        cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x->dump, "rewards"),
                                      cJSON_GetObjectItemCaseSensitive(c1->dump, "rewards"), true);
            cJSON_AddItemToArray(arr, ls_parity_entry("sampled responses and rewards",
                                                      same ? (ls_parity_err){0, 0} : (ls_parity_err){INFINITY, INFINITY},
                                                      LS_PARITY_F64_TOL, -1));
            ls_parity_member_entries(arr, "policy", &x->pol, &c1->pol);
            ls_parity_member_entries(arr, "old_logprobs", &x->old, &c1->old);
            snprintf(name, sizeof name, "logprob %s f64 %s", cfg, at);
            ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("logprob", name, LS_PARITY_F64, n, cfg, NULL,
                                                                              refn, cand, arr, "members"), D));
        }
        /* the policy's and the trainer's own old log-probs against the independent reference's */
        cJSON *arr = cJSON_CreateArray();
        ls_parity_member_entries(arr, "policy", &x->pol, &ref->pol);
        ls_parity_member_entries(arr, "old_logprobs", &x->old, &ref->pol);
        snprintf(name, sizeof name, "ref_logprob %s f64 %s", cfg, at);
        ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("ref_logprob", name, LS_PARITY_F64, n, cfg, NULL,
                                                                          "the adapter's reference (float64) on CP-1's "
                                                                          "sampled batch, its own log-probs as the old "
                                                                          "ones", cand, arr, "members"), D));
        if (n > 1) {
            snprintf(name, sizeof name, "cp_grad %s f64 %s full", cfg, at);
            ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("cp_grad", name, LS_PARITY_F64, n, cfg,
                                                                              "full", refn, cand,
                                                                              tensors_vs(want, &x->grad, &c1->grad),
                                                                              "tensors"), D));
            snprintf(name, sizeof name, "cp_params %s f64 %s full", cfg, at);
            ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("cp_params", name, LS_PARITY_F64, n, cfg,
                                                                              "full", refn, cand,
                                                                              ls_parity_params_entries(
                                                                                  want, &x->params, &c1->params,
                                                                                  &x->grad, &c1->grad,
                                                                                  a->adamw ? &a->opt : NULL,
                                                                                  LS_PARITY_F64),
                                                                              "tensors"), D));
        }
        if (D > 1) { /* the replicas' averaged gradient against the one process group's of its CP size */
            const srun *same = &runs[x->same_cp];
            char sref[160];
            snprintf(sref, sizeof sref, "%s cp%d full on its own sampled batch (DP 1)", a->name, x->cp);
            snprintf(name, sizeof name, "dp_grad %s f64 %s full", cfg, at);
            ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("dp_grad", name, LS_PARITY_F64, n, cfg,
                                                                              "full", sref, cand,
                                                                              tensors_vs(want, &x->grad, &same->grad),
                                                                              "tensors"), D));
        }
        snprintf(name, sizeof name, "grad %s f64 %s full", cfg, at);
        ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("grad", name, LS_PARITY_F64, n, cfg, "full",
                                                                          "the adapter's reference (float64) on-policy "
                                                                          "gradient", cand,
                                                                          tensors_vs(want, &x->grad, &ref->grad),
                                                                          "tensors"), D));
        /* the on-policy GRPO loss is 0 (its advantages sum to 0, its ratios are 1): relative to 1 below it */
        ls_parity_err e = {fabs(x->loss - ref->loss), 0};
        e.max_rel = e.max_abs / fmax(fabs(ref->loss), 1.0);
        if (!isfinite(x->loss)) e.max_abs = e.max_rel = INFINITY;
        cJSON *la = cJSON_CreateArray();
        cJSON_AddItemToArray(la, ls_parity_entry("loss (on-policy: relative to max(|reference|, 1))", e,
                                                 LS_PARITY_F64_TOL, -1));
        snprintf(name, sizeof name, "ref_loss %s f64 %s", cfg, at);
        ls_parity_report_add(rep, ls_parity_check_dp(ls_parity_check_new("ref_loss", name, LS_PARITY_F64, n, cfg, NULL,
                                                                          "the adapter's reference (float64) on CP-1's "
                                                                          "sampled batch", cand, la, "members"), D));
    }
}

ls_status ls_parity_adapter_sampled(const ls_parity_opts *o, const ls_parity_adapter *a, ls_parity_report *rep,
                                    const char *dir, const char *weights, char *err, size_t errlen) {
    double t0 = ls_parity_now();
    srun runs[MAX_SRUNS], ref;
    memset(runs, 0, sizeof runs);
    memset(&ref, 0, sizeof ref);
    ls_parity_job jobs[MAX_SRUNS];
    memset(jobs, 0, sizeof jobs);
    const char *labels[MAX_SRUNS];
    size_t made = 0, k1 = 0;
    char batch[LS_PARITY_PATH], refbatch[LS_PARITY_PATH];
    /* the adapter's prompt alone */
    cJSON *doc = ls_parity_batch_new(a->token_seed, a->vocab, a->prompt_len, a->group, a->response_lens, a->rewards);
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "responses");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "rewards");
    cJSON *prompt = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(doc, "prompt"), true);
    snprintf(batch, sizeof batch, "%s/batch-prompt.json", dir);
    snprintf(refbatch, sizeof refbatch, "%s/batch-sampled-ref.json", dir);
    ls_status s = LS_ERR_NOMEM;
    if (prompt) s = ls_parity_batch_write(doc, batch, err, errlen);
    else cJSON_Delete(doc);
    /* the runs at every CP size; drawn again (the sampler's {seed} moved by 7919) while CP-1's responses
     * have equal rewards: advantages of 0 make every gradient 0, which proves nothing */
    uint64_t seed = o->seed;
    for (int draw = 0; s == LS_OK && draw < SAMPLE_DRAWS; draw++, seed += 7919) {
        for (size_t k = 0; k < made; k++) ls_parity_job_free(&jobs[k]);
        for (size_t k = 0; k < MAX_SRUNS; k++) srun_free(&runs[k]);
        memset(runs, 0, sizeof runs);
        memset(jobs, 0, sizeof jobs);
        made = 0;
        /* every CP size at DP 1 (runs[k] the cps[k]'s), then every DP size > 1 at the CP sizes it fits */
        for (size_t e = 0; s == LS_OK && e < (o->n_dps ? o->n_dps : 1); e++)
            for (size_t k = 0; s == LS_OK && k < o->n_cps; k++) {
                if (e > 0 && !ls_parity_adapter_dp_fits(o, e, k)) continue;
                srun *x = &runs[made];
                x->cp = o->cps[k];
                x->dp = e > 0 ? o->dps[e] : 1;
                x->same_cp = k;
                if (x->cp == 1 && x->dp == 1) k1 = made;
                char label[sizeof x->label]; /* composed apart: gcc -O3 reads x->label and x->out as overlapping */
                if (x->dp > 1) snprintf(label, sizeof label, "f64/cp%d-dp%d-sampled", x->cp, x->dp);
                else snprintf(label, sizeof label, "f64/cp%d-sampled", x->cp);
                memcpy(x->label, label, sizeof label);
                snprintf(x->out, sizeof x->out, "%s/%s", dir, label);
                labels[made] = x->label;
                s = job_of(o, a, "run", x->cp, x->dp, seed, weights, batch, x->out, &jobs[made], err, errlen);
                made++;
            }
        if (s == LS_OK) s = run_jobs(o, a, jobs, made, labels, err, errlen);
        for (size_t k = 0; s == LS_OK && k < made; k++) {
            srun *x = &runs[k];
            char p[LS_PARITY_PATH];
            if ((s = read_dump(a, x, prompt, err, errlen)) != LS_OK) break;
            snprintf(p, sizeof p, "%s/logprobs.safetensors", x->out);
            if ((s = ls_parity_adapter_read_logprobs(p, x->g, x->lens, &x->pol, err, errlen)) != LS_OK) break;
            snprintf(p, sizeof p, "%s/grads.safetensors", x->out);
            if ((s = ls_parity_tensors_read(p, &x->grad, err, errlen)) != LS_OK) break;
            snprintf(p, sizeof p, "%s/params.safetensors", x->out);
            if ((s = ls_parity_tensors_read(p, &x->params, err, errlen)) != LS_OK) break;
            snprintf(p, sizeof p, "%s/loss.json", x->out);
            if ((s = ls_parity_adapter_read_loss(p, &x->loss, err, errlen)) != LS_OK) break;
            x->ran = true;
        }
        if (s == LS_OK && rewards_differ(runs[k1].dump)) break;
        if (s == LS_OK && draw + 1 == SAMPLE_DRAWS) {
            snprintf(err, errlen, "%s: in %d draws (--seed %llu + 7919 k) the responses the trainer sampled at CP 1 "
                     "had equal rewards: their advantages are 0 and so is every gradient, which proves nothing; "
                     "another --seed, or a batch whose prompt the trainer's rewards separate", a->name, SAMPLE_DRAWS,
                     (unsigned long long)o->seed);
            s = LS_ERR_FORMAT;
        }
    }
    /* the kept draw's runs: their coverage (the path they took) and the adapter's objective */
    for (size_t k = 0; s == LS_OK && k < made; k++) {
        char run[LS_PARITY_PATH];
        snprintf(run, sizeof run, "%s/run", runs[k].out);
        if ((s = ls_parity_report_build(rep, run, err, errlen)) == LS_OK &&
            (s = ls_parity_adapter_dp_pinned(run, runs[k].dp, err, errlen)) == LS_OK)
            s = ls_parity_adapter_objective_pinned(a, run, err, errlen);
    }
    /* the reference on CP-1's batch without its old log-probs: on-policy, its own log-probs the old ones */
    if (s == LS_OK) {
        cJSON *rb = cJSON_CreateObject();
        const char *keys[] = {"prompt", "responses", "rewards"};
        for (int i = 0; i < 3; i++)
            cJSON_AddItemToObject(rb, keys[i], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(runs[k1].dump, keys[i]),
                                                               true));
        s = ls_parity_batch_write(rb, refbatch, err, errlen);
    }
    ls_parity_job rj;
    memset(&rj, 0, sizeof rj);
    snprintf(ref.label, sizeof ref.label, "reference-sampled");
    snprintf(ref.out, sizeof ref.out, "%s/%s", dir, ref.label);
    if (s == LS_OK &&
        (s = job_of(o, a, "reference", 1, 1, o->seed, weights, refbatch, ref.out, &rj, err, errlen)) == LS_OK) {
        const char *l[1] = {ref.label};
        s = run_jobs(o, a, &rj, 1, l, err, errlen);
    }
    ls_parity_job_free(&rj);
    if (s == LS_OK) {
        char p[LS_PARITY_PATH];
        snprintf(p, sizeof p, "%s/logprobs.safetensors", ref.out);
        s = ls_parity_adapter_read_logprobs(p, runs[k1].g, runs[k1].lens, &ref.pol, err, errlen);
        snprintf(p, sizeof p, "%s/grads.safetensors", ref.out);
        if (s == LS_OK) s = ls_parity_tensors_read(p, &ref.grad, err, errlen);
        if (s == LS_OK && ref.grad.n == 0) {
            snprintf(err, errlen, "%s: no tensor (every trainable tensor's gradient expected)", p);
            s = LS_ERR_FORMAT;
        }
        snprintf(p, sizeof p, "%s/loss.json", ref.out);
        if (s == LS_OK) s = ls_parity_adapter_read_loss(p, &ref.loss, err, errlen);
    }
    if (s == LS_OK) {
        char cfg[64], what[256];
        snprintf(cfg, sizeof cfg, "p%d-g%d-sampled", a->prompt_len, runs[k1].g);
        snprintf(what, sizeof what, "the adapter's prompt alone (P=%d, token seed %u): the trainer sampled %d responses "
                 "from seed %llu, rewarded them and scored its own old log-probs", a->prompt_len,
                 (unsigned)a->token_seed, runs[k1].g, (unsigned long long)seed);
        ls_parity_report_batch(rep, cfg, what, a->prompt_len, runs[k1].g, runs[k1].lens);
        checks(a, rep, runs, made, k1, &ref, cfg);
        ls_parity_report_timing(rep, "the prompt-only path (the trainer samples)", ls_parity_now() - t0, (int)made + 1);
        if (!o->quiet)
            fprintf(stderr, "longstraw-parity: %s the prompt-only path: %zu runs, %.1f s\n", a->name, made + 1,
                    ls_parity_now() - t0);
    }
    for (size_t k = 0; k < made; k++) ls_parity_job_free(&jobs[k]);
    for (size_t k = 0; k < MAX_SRUNS; k++) srun_free(&runs[k]);
    srun_free(&ref);
    cJSON_Delete(prompt);
    return s;
}
