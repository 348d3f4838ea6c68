/* run_report.c - peaks, receipt, manifest and summary of a run. */
#include "trainer/run/run_report.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "kernels/decisions.h"
#include "kernels/isa.h"
#include "receipts/format/build_info.h"
#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "trainer/base/tier.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "trainer/dist/comm.h"

#include "ls_profile_pins.h" /* generated at build time by cmake/profile_pins.cmake */

void ls_run_peaks_fold(ls_run_peaks *sp, int64_t step) {
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    for (int k = 0; k < LS_MEM_COUNT; k++)
        if (s.peak_bytes[k] > sp->cat[k]) sp->cat[k] = s.peak_bytes[k];
    if (sp->steps == 0 || s.peak_total > sp->total) {
        sp->total = s.peak_total;
        sp->total_at = step;
    }
    sp->steps++;
}

/* Every other option the run used (provenance: none of them changes what
 * the audit requires, each one changes what ran). */
static cJSON *options_json(const ls_train_args *a) {
    const ls_step_options *o = &a->step;
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    ls_json_add_u64(j, "seed", o->seed);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "beta1", o->beta1);
    cJSON_AddNumberToObject(j, "beta2", o->beta2);
    cJSON_AddNumberToObject(j, "adam_eps", o->adam_eps);
    cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    ls_json_add_u64(j, "prompt_len", a->rollouts ? 0 : (uint64_t)a->P); /* 0: each rollouts line sets it */
    ls_json_add_u64(j, "response_len", a->rollouts ? 0 : (uint64_t)o->R);
    cJSON_AddNumberToObject(j, "top_p", o->top_p);
    cJSON_AddStringToObject(j, "lora_init", a->obj.lora_init_random ? "random" : "zero");
    cJSON_AddStringToObject(j, "keep_reference", a->keep_reference == 1 ? "on" : a->keep_reference == 2 ? "off" : "auto");
    cJSON_AddStringToObject(j, "replay_checkpoint",
                            a->replay_checkpoint == 1   ? "none"
                            : a->replay_checkpoint == 2 ? "layer"
                            : a->replay_checkpoint == 3 ? "chunk"
                                                        : "auto");
    ls_json_add_u64(j, "replay_chunk", (uint64_t)o->replay_chunk); /* tokens per chunk where the replay is chunked */
    ls_json_add_u64(j, "page_size", o->page_size);
    ls_json_add_u64(j, "capture_chunk", o->capture_chunk);
    ls_json_add_u64(j, "prompts_per_step", a->prompts_per_step ? a->prompts_per_step : 1);
    ls_json_add_u64(j, "save_every", (uint64_t)a->save_every);
    ls_json_add_u64(j, "probe_every", (uint64_t)a->probe_every); /* the audit's run.probe: which steps were probed */
    ls_json_add_u64(j, "grad_cosine_every", (uint64_t)a->grad_cosine_every); /* measured steps (step_metrics) */
    ls_json_add_u64(j, "memory_budget", a->memory_budget);
    cJSON_AddStringToObject(j, "state_tier", o->state_tier ? "host" : "device");
    ls_json_add_u64(j, "host_memory", a->host_memory);
    cJSON_AddStringToObject(j, "input", a->rollouts ? "rollouts" : "task");
    cJSON_AddStringToObject(j, "task", a->rollouts ? "none" : ls_task_kind_name((ls_task_kind)a->task));
    ls_json_add_u64(j, "recall_records", a->recall_records); /* 0: the task's default */
    cJSON_AddBoolToObject(j, "resumed", a->resume != NULL);
    cJSON_AddBoolToObject(j, "loaded", a->load != NULL);
    return j;
}

unsigned ls_run_path_shards(int64_t T, int world, size_t page_size, size_t chunk) {
    const char *sh, *pg, *ch;
    ls_coverage_shard_classes(T, world, (int64_t)page_size, (int64_t)chunk, &sh, &pg, &ch);
    return (!strcmp(sh, "one") ? LS_RUN_PATH_SHARDS_ONE : !strcmp(sh, "even") ? LS_RUN_PATH_SHARDS_EVEN
                                                                               : LS_RUN_PATH_SHARDS_UNEVEN) |
           (!strcmp(pg, "cut") ? LS_RUN_PATH_PAGES_CUT : LS_RUN_PATH_PAGES_ALIGNED) |
           (!strcmp(ch, "cut") ? LS_RUN_PATH_CHUNKS_CUT : LS_RUN_PATH_CHUNKS_ALIGNED);
}

/* The config's "paths": each decision and the sorted values the run's steps took (none before a step). */
static cJSON *paths_json(const ls_train_args *a, const ls_run_inputs *in) {
    static const struct { const char *key, *value; unsigned bit; int run; } T[] = {
        {"chunks", "aligned", LS_RUN_PATH_CHUNKS_ALIGNED, 1}, {"chunks", "cut", LS_RUN_PATH_CHUNKS_CUT, 1},
        {"old_logprobs", "computed", LS_STEP_PATH_OLD_COMPUTED, 0}, {"old_logprobs", "given", LS_STEP_PATH_OLD_GIVEN, 0},
        {"old_logprobs", "none", LS_STEP_PATH_OLD_NONE, 0},
        {"pages", "aligned", LS_RUN_PATH_PAGES_ALIGNED, 1}, {"pages", "cut", LS_RUN_PATH_PAGES_CUT, 1},
        {"prefix", "fresh", LS_RUN_PATH_PREFIX_FRESH, 1}, {"prefix", "frozen", LS_RUN_PATH_PREFIX_FROZEN, 1},
        {"prompt_groups", "one", LS_RUN_PATH_GROUPS_ONE, 1}, {"prompt_groups", "several", LS_RUN_PATH_GROUPS_SEVERAL, 1},
        {"reference", "before", LS_STEP_PATH_REF_BEFORE, 0}, {"reference", "given", LS_STEP_PATH_REF_GIVEN, 0},
        {"reference", "kept", LS_STEP_PATH_REF_KEPT, 0}, {"reference", "naive", LS_STEP_PATH_REF_NAIVE, 0},
        {"reference", "none", LS_STEP_PATH_REF_NONE, 0}, {"reference", "prefix", LS_STEP_PATH_REF_PREFIX, 0},
        {"reference", "recaptured", LS_STEP_PATH_REF_RECAPTURED, 0},
        {"replay", "chunk", LS_STEP_PATH_REPLAY_CHUNK, 0}, {"replay", "layer", LS_STEP_PATH_REPLAY_LAYER, 0},
        {"replay", "taped", LS_STEP_PATH_REPLAY_TAPED, 0},
        {"responses", "given", LS_STEP_PATH_RESP_GIVEN, 0}, {"responses", "sampled", LS_STEP_PATH_RESP_SAMPLED, 0},
        {"responses", "target", LS_STEP_PATH_RESP_TARGET, 0},
        {"shards", "even", LS_RUN_PATH_SHARDS_EVEN, 1}, {"shards", "one", LS_RUN_PATH_SHARDS_ONE, 1},
        {"shards", "uneven", LS_RUN_PATH_SHARDS_UNEVEN, 1},
        {"start", "fresh", LS_RUN_PATH_START_FRESH, 1}, {"start", "resumed", LS_RUN_PATH_START_RESUMED, 1}};
    cJSON *j = cJSON_CreateObject(), *arr = NULL;
    const char *cur = "";
    int ok = j != NULL;
    for (size_t i = 0; ok && i < sizeof T / sizeof T[0]; i++) {
        if (!((T[i].run ? in->run_paths : in->step_paths) & T[i].bit)) continue;
        if (strcmp(cur, T[i].key) != 0) {
            ok = (arr = cJSON_AddArrayToObject(j, T[i].key)) != NULL;
            cur = T[i].key;
        }
        ok = ok && cJSON_AddItemToArray(arr, cJSON_CreateString(T[i].value));
    }
    /* decisions one option makes for the whole run, recorded once a step ran: where the prompt state lived
       (--state-tier), the task that sampled and rewarded the responses (none: a rollouts input) */
    const char *run_wide[2][2] = {{"state_tier", a->step.state_tier ? "host" : "device"},
                                  {"task", a->rollouts ? "none" : ls_task_kind_name((ls_task_kind)a->task)}};
    for (size_t i = 0; ok && in->step_paths && i < 2; i++) {
        cJSON *v = cJSON_AddArrayToObject(j, run_wide[i][0]);
        ok = v && cJSON_AddItemToArray(v, cJSON_CreateString(run_wide[i][1]));
    }
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* The config's "inputs": the digest of each input the run used. */
static cJSON *inputs_json(const ls_run_inputs *in) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    const char *keys[] = {"config", "load", "resume"}, *vals[] = {in->config, in->load, in->resume};
    int ok = 1;
    for (size_t i = 0; i < 3; i++)
        if (vals[i][0]) ok = ok && cJSON_AddStringToObject(j, keys[i], vals[i]);
    if (in->rollouts) {
        cJSON *r = cJSON_AddObjectToObject(j, "rollouts");
        ok = ok && r && cJSON_AddStringToObject(r, "sha256", in->rollouts_sha256) &&
             ls_json_add_u64(r, "bytes", in->rollouts_bytes) == 0;
    }
    if (in->initial_weights[0]) ok = ok && cJSON_AddStringToObject(j, "initial_weights", in->initial_weights);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *ls_run_config_json(const ls_train_args *a, uint32_t world, int64_t first_step, const ls_run_inputs *in) {
    cJSON *c = ls_config_to_json(&a->cfg, &a->obj);
    if (!c) return NULL;
    cJSON *f = cJSON_AddArrayToObject(c, "faults");
    /* the faults asked for, by the option table's names (train_args.c: the one list) */
    for (size_t i = 0; f && i < ls_train_fault_count(); i++) {
        int on = 0;
        const char *name = ls_train_fault_at(i, a, &on);
        if (on) cJSON_AddItemToArray(f, cJSON_CreateString(name));
    }
    /* what the audit needs to know was asked for: the dtype, the group size (of the built-in
       task; -1: a rollouts file's lines set their own), the steps asked (-1: until the input ends) */
    cJSON_AddStringToObject(c, "dtype", a->f64 ? "f64" : "f32");
    cJSON_AddNumberToObject(c, "group", a->rollouts ? -1.0 : (double)a->step.G);
    cJSON_AddNumberToObject(c, "steps_requested", a->have_steps ? (double)a->steps : (a->rollouts ? -1.0 : 1.0));
    /* the strategy decides which phases a step has (naive: no prompt backward) */
    cJSON_AddStringToObject(c, "strategy", a->step.strategy == LS_STRATEGY_NAIVE ? "naive" : "longstraw");
    /* the loss (every step's, but the first sft_steps that use sft), the steps that reuse a stale prompt
       state, and the global index of the first step (a resumed run's checkpoint step) */
    cJSON_AddStringToObject(c, "objective", a->step.objective == LS_OBJECTIVE_SFT ? "sft" : "grpo");
    cJSON_AddNumberToObject(c, "sft_steps", a->sft_steps);
    cJSON_AddNumberToObject(c, "prefix_frozen", a->prefix_frozen > 1 ? a->prefix_frozen : 1);
    cJSON_AddNumberToObject(c, "first_step", (double)first_step);
    cJSON *opts = options_json(a);
    if (!opts || !cJSON_AddItemToObject(c, "options", opts)) {
        cJSON_Delete(opts);
        cJSON_Delete(c);
        return NULL;
    }
    cJSON *ins = in ? inputs_json(in) : NULL;
    if (in && (!ins || !cJSON_AddItemToObject(c, "inputs", ins))) {
        cJSON_Delete(ins);
        cJSON_Delete(c);
        return NULL;
    }
    cJSON *paths = in ? paths_json(a, in) : NULL;
    if (in && (!paths || !cJSON_AddItemToObject(c, "paths", paths))) {
        cJSON_Delete(paths);
        cJSON_Delete(c);
        return NULL;
    }
    /* the CP x EP grid: world = cp_ranks x ep_ranks (ep_ranks 1 without --ep) */
    uint32_t ep = a->ep > 1 && world % (uint32_t)a->ep == 0 ? (uint32_t)a->ep : 1;
    if (!f || !cJSON_AddNumberToObject(c, "cp_ranks", world / ep) || !cJSON_AddNumberToObject(c, "ep_ranks", ep)) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

static cJSON *build_json(void) {
    char blas[128];
    snprintf(blas, sizeof blas, "%s", openblas_get_config());
    cJSON *build = NULL;
    /* the dependencies: the kernels' openblas, then every registered comm backend's (mpi: "none" unbuilt) */
    ls_build_dep deps[8] = {{"openblas", blas}};
    size_t nd = 1 + ls_comm_build_dependencies(deps + 1, sizeof deps / sizeof deps[0] - 1);
    char why[256] = "";
    ls_status bst = nd <= sizeof deps / sizeof deps[0] ? ls_build_info_create_deps(deps, nd, &build, why, sizeof why)
                                                       : LS_ERR_INTERNAL;
    if (bst != LS_OK) /* the receipt writer then refuses the NULL build object */
        fprintf(stderr, "longstraw-train: build info: cannot describe this build: %s%s%s\n", ls_status_str(bst),
                why[0] ? ": " : " (reading /proc/self/exe)", why);
    else if ((bst = ls_build_info_add_kernel_isa(build, ls_kernel_isa_name(ls_kernel_isa()))) != LS_OK) {
        fprintf(stderr, "longstraw-train: build info: cannot record the kernels' ISA: %s\n", ls_status_str(bst));
        cJSON_Delete(build);
        build = NULL;
    }
    return build;
}

/* The profile the run is written for: its family's (profiles/FAMILY.json), pinned with the SHA-256 of
 * that file when this build was made (predicate.profile of the manifest and every receipt; the audit's
 * profile.match holds the run to it).  *name and *sha stay NULL for a family without a profile. */
static void profile_pin(const cJSON *config, const char **name, const char **sha) {
    static const struct { const char *name, *sha256; } PINS[] = LS_PROFILE_PINS;
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(config, "family");
    *name = *sha = NULL;
    for (size_t i = 0; cJSON_IsString(fam) && i < sizeof PINS / sizeof PINS[0]; i++)
        if (strcmp(PINS[i].name, fam->valuestring) == 0) {
            *name = PINS[i].name;
            *sha = PINS[i].sha256;
        }
}

int ls_run_write_manifest(const ls_train_args *a, const char *run_id, uint32_t world, int64_t first_step,
                          const ls_run_inputs *in) {
    cJSON *build = build_json(), *config = ls_run_config_json(a, world, first_step, in);
    char rerr[1024];
    int rc = 0;
    ls_manifest m = {.run_id = run_id, .world = world, .build = build, .config = config};
    profile_pin(config, &m.profile_name, &m.profile_sha256);
    if (ls_manifest_write(a->out, &m, rerr, sizeof rerr) != LS_OK) {
        fprintf(stderr, "longstraw-train: manifest: %s\n", rerr);
        rc = 1;
    }
    cJSON_Delete(build);
    cJSON_Delete(config);
    return rc;
}

int ls_run_write_receipt(const ls_train_args *a, const ls_run_outcome *oc) {
    int rc = 0;
    cJSON *build = NULL, *config = NULL;
    const ls_run_peaks *sp = oc->sp;
    ls_mem_stats ms;
    ls_mem_snapshot(&ms);
    ls_receipt_phase ph[LS_PHASE_COUNT + 1]; /* every phase the trace shows, the probe's too */
    size_t nph = 0;
    for (int i = 0; i <= LS_PHASE_COUNT; i++)
        if (oc->ob->count[i])
            ph[nph++] = (ls_receipt_phase){i == LS_RUN_OBS_PROBE ? "probe" : ls_trace_phase_name((ls_trace_phase)i),
                                           oc->ob->count[i], oc->ob->ns[i]};
    ls_receipt_memory mem[LS_MEM_COUNT];
    for (int k = 0; k < LS_MEM_COUNT; k++)
        mem[k] = (ls_receipt_memory){ls_mem_cat_name((ls_mem_cat)k), ms.run_peak_bytes[k], sp->cat[k]};
    build = build_json();
    config = ls_run_config_json(a, oc->world, oc->first_step, oc->inputs);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == ' ') *c = '-';
    ls_receipt r = {.run_id = oc->run_id, .rank = oc->rank, .world = oc->world, .host = host,
                    .rank_state = oc->rank_state, .build = build, .config = config,
                    .steps = oc->steps_done, .phases = ph, .n_phases = nph, .memory = mem,
                    .n_memory = LS_MEM_COUNT, .run_total_peak_bytes = ms.run_peak_total,
                    .rss_peak_bytes = ls_mem_peak_rss_bytes(), .step_total_peak_bytes = sp->total,
                    .steps_measured = sp->steps, .step_total_peak_at = sp->total_at, .events_file = oc->events_rel,
                    .events_count = (uint64_t)oc->n_events, .events_last_seq = oc->n_events - 1,
                    .status = oc->ok ? LS_RECEIPT_COMPLETE : LS_RECEIPT_ERROR,
                    .error_code = oc->ok ? 0 : (int)oc->fail_st,
                    .error_message = oc->ok ? NULL : (oc->error_message && oc->error_message[0] ? oc->error_message
                                                                                               : "the step failed"),
                    .start_unix_ns = oc->start_unix_ns, .end_unix_ns = (uint64_t)time(NULL) * 1000000000ull,
                    .steps_prefix_frozen = oc->prefix_frozen_steps, .prefix_frozen_steps = oc->frozen_idx};
    profile_pin(config, &r.profile_name, &r.profile_sha256);
    ls_receipt_objective objs[2] = {{"grpo", oc->steps_done - oc->sft_steps}, {"sft", oc->sft_steps}};
    r.objectives = objs;
    r.n_objectives = oc->sft_steps ? 2 : 1;
    char rerr[1024];
    if (ls_receipt_write(a->out, &r, rerr, sizeof rerr) != LS_OK) {
        fprintf(stderr, "longstraw-train: receipt: %s\n", rerr);
        rc = 1;
    }
    cJSON_Delete(build);
    cJSON_Delete(config);
    return rc;
}

/* "title: name 1.23 MiB, ..., total X" of the nonzero categories. */
static void print_peaks(const char *title, const size_t cat[LS_MEM_COUNT], size_t total, const char *tail) {
    char h[32];
    printf("  %s:", title);
    for (int k = 0; k < LS_MEM_COUNT; k++)
        if (cat[k]) printf(" %s %s,", ls_mem_cat_name((ls_mem_cat)k), ls_run_human_bytes(h, sizeof h, (double)cat[k]));
    printf(" total %s%s\n", ls_run_human_bytes(h, sizeof h, (double)total), tail);
}

void ls_run_print_summary(const ls_train_args *a, const ls_run_outcome *oc, const ls_step_result *res,
                          const char *dtype, size_t P, size_t G) {
    ls_mem_stats ms;
    ls_mem_snapshot(&ms);
    char h1[32], h2[32], h3[32], tail[96];
    printf("longstraw-train: %llu step(s) of %s (%s, %s, %s) P=%zu G=%zu: loss %.6f, grad-norm %.4e, "
           "mean reward %.4f\n",
           (unsigned long long)oc->steps_done, a->config_path, dtype,
           a->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached",
           a->step.strategy == LS_STRATEGY_NAIVE ? "naive" : "longstraw", P, G, res->loss + 0.0 /* no "-0" */,
           res->grad_norm, res->mean_reward);
    if (oc->prefix_frozen_steps)
        printf("  %llu of them prefix-frozen (a stale prompt state; never exact)\n",
               (unsigned long long)oc->prefix_frozen_steps);
    printf("  exact loss %.17g (last step)\n", res->loss + 0.0); /* read by tests/reference/ */
    const ls_decisions *dec = ls_decisions_current();
    if (dec) /* read by longstraw-parity: its finite differences must decide as the unmoved run */
        printf("  decisions %llu digest %016llx (the run's, in order)\n", (unsigned long long)dec->count,
               (unsigned long long)dec->digest);
    if (oc->world > 1)
        printf("  context parallel over %u ranks: rank %u holds positions [%lld, %lld) of the prompt's %zu\n",
               oc->world, oc->rank, (long long)res->shard_begin, (long long)res->shard_end, P ? P - 1 : 0);
    printf("  prompt state %s (analytical %s), largest branch tape %s\n",
           ls_run_human_bytes(h1, sizeof h1, (double)res->prompt_state_bytes),
           ls_run_human_bytes(h2, sizeof h2, (double)res->prompt_state_analytical),
           ls_run_human_bytes(h3, sizeof h3, (double)res->max_branch_bytes));
    snprintf(tail, sizeof tail, ", rss %s", ls_run_human_bytes(h1, sizeof h1, (double)ls_mem_peak_rss_bytes()));
    print_peaks("memory peaks, run", ms.run_peak_bytes, ms.run_peak_total, tail);
    snprintf(tail, sizeof tail, " (step %lld, largest of %llu)", (long long)oc->sp->total_at + 1,
             (unsigned long long)oc->sp->steps);
    print_peaks("memory peaks, per step", oc->sp->cat, oc->sp->total, tail);
    printf("  phases:");
    const char *sep = " ";
    for (int i = 0; i < LS_PHASE_COUNT; i++)
        if (oc->ob->count[i]) {
            printf("%s%s %.3f s", sep, ls_trace_phase_name((ls_trace_phase)i), oc->ob->ns[i] * 1e-9);
            sep = ", ";
        }
    if (a->step.state_tier) { /* the host tier's staging (trainer/base/tier.h): what the compute did not hide */
        ls_tier_stats ts;
        ls_tier_stats_get(&ts);
        char hb[32];
        printf("\n  staging (--state-tier host): %llu copies, %s, copying %.3f s, waited %.3f s",
               (unsigned long long)ts.copies, ls_run_human_bytes(hb, sizeof hb, (double)ts.bytes), ts.copy_ns * 1e-9,
               ts.wait_ns * 1e-9);
    }
    printf("\n  run: %s (trace, receipt, manifest; byte-exact figures in the receipt)\n", a->out);
}
