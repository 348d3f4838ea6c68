/* train_run.c - the longstraw-train job: plan memory, run the steps, write
 * the trace, the dumps, the receipt and the manifest. */
#include "trainer/train_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include <cblas.h>

#include "common/checked.h"
#include "receipts/build_info.h"
#include "receipts/digest.h"
#include "receipts/manifest.h"
#include "receipts/receipt.h"
#include "receipts/trace_writer.h"
#include "trainer/mem_tracker.h"
#include "trainer/params_io.h"
#include "trainer/step.h"

#define N_PHASES LS_PHASE_COUNT

typedef struct {
    ls_trace_writer *w;
    int64_t step;
    int quiet;
    int n_layers;
    const ls_params *p;
    uint64_t count[N_PHASES], ns[N_PHASES];
    int64_t layer_t0;
    ls_status emit_err;
} run_obs;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int phase_index(const char *ph) {
    for (int i = 0; i < N_PHASES; i++)
        if (!strcmp(ls_trace_phase_name((ls_trace_phase)i), ph)) return i;
    return -1;
}

static void note(run_obs *o, ls_status st) {
    if (st != LS_OK && o->emit_err == LS_OK) o->emit_err = st;
}

static void emit_memory(run_obs *o, const char *phase) {
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    ls_trace_mem_category cats[LS_MEM_COUNT];
    for (int c = 0; c < LS_MEM_COUNT; c++) {
        cats[c].name = ls_mem_cat_name((ls_mem_cat)c);
        cats[c].live = (int64_t)s.live_bytes[c];
        cats[c].peak = (int64_t)s.peak_bytes[c];
    }
    ls_trace_memory m = {.step = o->step, .phase = phase, .categories = cats, .n_categories = LS_MEM_COUNT,
                         .total_live = (int64_t)s.live_total, .total_peak = (int64_t)s.peak_total,
                         .rss_peak = (int64_t)ls_mem_peak_rss_bytes()};
    note(o, ls_trace_emit_memory(o->w, &m));
}

static void on_begin(void *u, const char *phase) {
    run_obs *o = u;
    note(o, ls_trace_emit_phase_begin(o->w, phase, o->step));
    o->layer_t0 = now_ns();
}

static void on_end(void *u, const char *phase, int64_t wall_ns, int ok) {
    run_obs *o = u;
    int i = phase_index(phase);
    if (i >= 0) {
        o->count[i]++;
        o->ns[i] += (uint64_t)wall_ns;
    }
    note(o, ls_trace_emit_phase_end(o->w, phase, o->step, wall_ns, ok != 0));
    emit_memory(o, phase);
    if (!o->quiet)
        fprintf(stderr, "[step %lld] %-10s %9.3f s%s\n", (long long)o->step + 1, phase, wall_ns * 1e-9,
                ok ? "" : "  FAILED");
}

static void on_layer(void *u, const char *phase, int member, int layer, int dir, size_t tokens,
                     int64_t wall_ns, double norm) {
    run_obs *o = u;
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    ls_trace_layer_kind kind = layer < 0                ? LS_TRACE_LAYER_EMBED
                               : layer >= o->n_layers   ? LS_TRACE_LAYER_HEAD
                               : o->p->layers[layer].is_attn ? LS_TRACE_LAYER_ATTN
                                                             : LS_TRACE_LAYER_GDN;
    ls_trace_layer_end e = {.phase = phase, .step = o->step, .member = member, .layer = layer, .kind = kind,
                            .dir = dir ? LS_TRACE_DIR_BWD : LS_TRACE_DIR_FWD, .tokens = (int64_t)tokens,
                            .live_bytes = (int64_t)s.live_total, .peak_bytes = (int64_t)s.peak_total,
                            .wall_ns = wall_ns, .out_norm = isfinite(norm) ? norm : 0};
    if (!isfinite(norm)) note(o, ls_trace_emit_error(o->w, LS_ERR_NONFINITE, "non-finite activation norm"));
    note(o, ls_trace_emit_layer_end(o->w, &e));
    /* progress for long layer-by-layer phases */
    if (!o->quiet && tokens >= 2048 && layer >= 0 && layer < o->n_layers && member < 0) {
        int done = dir ? o->n_layers - layer : layer + 1;
        double el = (now_ns() - o->layer_t0) * 1e-9;
        double rate = el > 0 ? (double)tokens * done / el : 0;
        fprintf(stderr, "  %s: layer %d/%d  %.0f tok/s  ETA %.1f s\n", phase, done, o->n_layers,
                rate, rate > 0 ? (double)tokens * (o->n_layers - done) / rate : 0.0);
    }
}

static void on_progress(void *u, const char *phase, size_t done, size_t total) {
    run_obs *o = u;
    if (o->quiet) return;
    double el = (now_ns() - o->layer_t0) * 1e-9;
    fprintf(stderr, "  %s: member %zu/%zu  ETA %.1f s\n", phase, done, total,
            done ? el / (double)done * (double)(total - done) : 0.0);
}

/* ---- memory plan ---------------------------------------------------------- */

/* Reals one layer saves per token (the larger of the two mixers), an
 * over-estimate of the tape plus its backward transients.  Saturating. */
static size_t layer_reals_per_token(const ls_model_config *c, int r) {
    size_t d = (size_t)c->d_model, ffn = (size_t)c->ffn_dim, H = (size_t)c->attn_heads;
    size_t Hkv = (size_t)c->attn_kv_heads, hd = (size_t)c->head_dim;
    size_t Hk = (size_t)c->gdn_hk, dk = (size_t)c->gdn_dk, Hv = (size_t)c->gdn_hv, dv = (size_t)c->gdn_dv;
    size_t C = ls_sat_add(ls_sat_mul3(2, Hk, dk), ls_sat_mul(Hv, dv));
    size_t attn = ls_sat_add(ls_sat_add(ls_sat_mul3(12, H, hd), ls_sat_mul3(8, Hkv, hd)), ls_sat_mul(2, H));
    size_t gdn = ls_sat_add(ls_sat_add(ls_sat_mul(4, C), ls_sat_mul3(6, Hv, dv)),
                            ls_sat_add(ls_sat_mul3(6, Hk, dk), ls_sat_mul(8, Hv)));
    size_t n = ls_sat_add(ls_sat_mul(6, d), ls_sat_mul(6, ffn));
    n = ls_sat_add(n, attn > gdn ? attn : gdn);
    return ls_sat_add(n, ls_sat_add(ls_sat_mul(16, (size_t)r), 8));
}

static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return ls_sat_mul(kb, 1024);
}

/* The whole job's memory per category, from the config and the run's
 * sizes alone, before anything model- or prompt-sized is allocated: the
 * parameter blocks exactly as ls_params_init allocates them (weights, the
 * full-mode reference copy, adapters, gradients, both AdamW moments), what
 * is live already (the rollouts batch), and the step's prompt state, branch
 * tapes, checkpoints and scratch.  Every product saturates at SIZE_MAX, so a
 * plan that does not fit size_t exceeds any budget. */
static ls_status plan(const ls_train_args *a, size_t P, size_t Rmax, size_t plan_b[LS_MEM_COUNT], char *err,
                      size_t err_len) {
    const ls_model_config *c = &a->cfg;
    ls_status st = LS_K(ls_params_plan)(c, &a->obj, plan_b, err, err_len);
    if (st != LS_OK) return st;
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    for (int k = 0; k < LS_MEM_COUNT; k++) plan_b[k] = ls_sat_add(plan_b[k], s.live_bytes[k]);
    size_t L = (size_t)c->n_layers, d = (size_t)c->d_model, sz = sizeof(ls_real);
    size_t lpt = ls_sat_mul(layer_reals_per_token(c, a->obj.lora_r), sz);
    size_t state = LS_K(ls_hstate_plan_bytes)(c, (int64_t)P - 1);
    size_t dsz = ls_sat_mul(d, sz);
    int full = a->obj.grad_mode == LS_GRAD_FULL;
#define ADD(cat, x) (plan_b[cat] = ls_sat_add(plan_b[cat], (x)))
    if (a->step.strategy == LS_STRATEGY_LONGSTRAW) {
        ADD(LS_MEM_PROMPT_STATE, state);
        ADD(LS_MEM_SCORE, state); /* the reference policy's capture */
        ADD(LS_MEM_BRANCH, ls_sat_mul3(L, Rmax, lpt));
        size_t cc = a->step.capture_chunk && a->step.capture_chunk < P ? a->step.capture_chunk : P;
        ADD(LS_MEM_SCRATCH, ls_sat_add(ls_sat_mul3(2, cc, dsz), ls_sat_mul(cc, lpt))); /* one layer of one segment */
        if (full) {
            ADD(LS_MEM_PROMPT_GRAD, state);
            ADD(LS_MEM_CHECKPOINT, ls_sat_mul3(L, P - 1, dsz));
            ADD(LS_MEM_SCRATCH, ls_sat_add(ls_sat_mul3(2, cc, lpt), ls_sat_mul(P, dsz))); /* recompute window, dh */
        }
    } else {
        size_t T = ls_sat_add(P, Rmax);
        ADD(LS_MEM_SCORE, state);
        ADD(LS_MEM_BRANCH, ls_sat_mul3(L, T, lpt));
        ADD(LS_MEM_SCRATCH, ls_sat_mul(T, lpt));
    }
#undef ADD
    return LS_OK;
}

/* Per-step memory peaks: each figure's largest per-step peak so far.  A
 * step's window runs from the peak reset before its capture to the reset
 * before the next step (optimizer, digests and dumps included). */
typedef struct {
    size_t cat[LS_MEM_COUNT], total;
    int64_t total_at; /* step with the largest total; -1 before any */
    uint64_t steps;   /* windows folded in */
} step_peaks;

/* Fold the tracker's window peaks (those of step `step`) into *sp. */
static void fold_step_peaks(step_peaks *sp, int64_t step) {
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

/* ---- files ------------------------------------------------------------------ */

static int prepare_run_dir(const char *out, char *err, size_t err_len) {
    if (mkdir(out, 0777) != 0) {
        if (errno != EEXIST) {
            snprintf(err, err_len, "--out: cannot create '%s': %s", out, strerror(errno));
            return -1;
        }
        DIR *d = opendir(out);
        if (!d) {
            snprintf(err, err_len, "--out: '%s' exists and is not a readable directory", out);
            return -1;
        }
        struct dirent *e;
        int empty = 1;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
        closedir(d);
        if (!empty) {
            snprintf(err, err_len, "--out: '%s' is not empty (a run directory is never overwritten)", out);
            return -1;
        }
    }
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/rank-0000", out);
    if (mkdir(sub, 0777) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "--out: cannot create '%.1000s': %s", sub, strerror(errno));
        return -1;
    }
    return 0;
}

static void emit_digests(run_obs *o, const ls_params *p) {
    size_t cap = 0, n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].trainable) cap += LS_DIGEST_HEX_SIZE + sizeof p->t[i].name;
    char *cat = ls_mem_alloc(LS_MEM_SCRATCH, cap + 1); /* model-sized */
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (!t->trainable) continue;
        uint8_t dg[LS_DIGEST_SIZE];
        ls_digest_sha256(t->w, t->numel * sizeof(ls_real), dg);
        note(o, ls_trace_emit_param_digest(o->w, o->step, t->name, dg));
        if (cat) {
            char hex[LS_DIGEST_HEX_SIZE];
            ls_digest_hex(dg, LS_DIGEST_SIZE, hex);
            n += (size_t)sprintf(cat + n, "%s %s\n", t->name, hex);
        }
    }
    if (cat) { /* group digest: sha256 over "name hex\n" lines in table order */
        uint8_t dg[LS_DIGEST_SIZE];
        ls_digest_sha256(cat, n, dg);
        note(o, ls_trace_emit_param_digest(o->w, o->step, "trainable", dg));
    }
    ls_mem_free(cat);
}

int LS_K(ls_train_run)(const ls_train_args *a) {
    char err[2048] = "";
    int rc = 1;
    ls_params *p = NULL;
    ls_batch *b = NULL;
    ls_task task = {0};
    cJSON *build = NULL, *config = NULL;
    run_obs ob = {0};
    ls_step_result res = {0};
    ls_status st, fail_st = LS_ERR_INTERNAL;
    int steps_done = 0, steps_begun = 0;
    step_peaks sp = {.total_at = -1};
    uint64_t start_unix = (uint64_t)time(NULL) * 1000000000ull;
    char run_id[64], events_rel[64] = "rank-0000/events.jsonl.zst", path[4096];
    snprintf(run_id, sizeof run_id, "run-%llx-%x-%llu", (unsigned long long)time(NULL), (unsigned)getpid(),
             (unsigned long long)a->step.seed);

    /* the batch: an external rollouts file (read first: it sets P and R) or the synthetic task */
    if (a->rollouts) {
        st = ls_batch_read_rollouts(&b, a->rollouts, a->cfg.vocab, err, sizeof err);
        if (st != LS_OK) {
            fprintf(stderr, "longstraw-train: --rollouts: %s\n", err);
            rc = 2;
            goto done;
        }
    }
    size_t P = b ? b->P : a->P, Rmax = a->step.R;
    for (size_t i = 0; b && i < b->G; i++) Rmax = b->R[i] > Rmax ? b->R[i] : Rmax;
    /* the whole plan, parameters included, is checked before they are allocated */
    size_t pl[LS_MEM_COUNT], total = 0;
    if ((st = plan(a, P, Rmax, pl, err, sizeof err)) != LS_OK) {
        fprintf(stderr, "longstraw-train: --config %s: %s\n", a->config_path, err);
        rc = 2;
        goto done;
    }
    for (int k = 0; k < LS_MEM_COUNT; k++) total = ls_sat_add(total, pl[k]);
    size_t budget = a->memory_budget ? a->memory_budget : mem_available() / 10 * 9;
    if (budget && total > budget) {
        char need[64];
        if (total == SIZE_MAX) snprintf(need, sizeof need, "more than 2^64 bytes");
        else snprintf(need, sizeof need, "%.3f GiB", total / 1073741824.0);
        fprintf(stderr,
                "longstraw-train: the memory plan needs %s, above the budget %.3f GiB (%s); nothing was allocated.\n"
                "  --config %s, %s %zu, --response-len %zu, --group %zu, --grad-mode %s, --train-mode %s.\n"
                "  Planned bytes per category (weights, adapters, gradients and optimizer state included):\n",
                need, budget / 1073741824.0, a->memory_budget ? "--memory-budget" : "90% of MemAvailable",
                a->config_path, a->rollouts ? "prompt tokens of --rollouts" : "--prompt-len", P, Rmax,
                b ? b->G : a->step.G, a->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached",
                a->obj.train_mode == LS_TRAIN_FULL ? "full" : "lora");
        for (int k = 0; k < LS_MEM_COUNT; k++) {
            if (pl[k] == SIZE_MAX) fprintf(stderr, "  %-22s  more than 2^64\n", ls_mem_cat_name((ls_mem_cat)k));
            else if (pl[k]) fprintf(stderr, "  %-22s %15zu\n", ls_mem_cat_name((ls_mem_cat)k), pl[k]);
        }
        rc = 2;
        goto done;
    }
    ls_mem_set_budget(budget);
    st = LS_K(ls_params_init)(&p, &a->cfg, &a->obj, a->step.seed, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: %s\n", err);
        rc = st == LS_ERR_NOMEM || st == LS_ERR_INTERNAL ? 1 : 2;
        goto done;
    }
    if (a->load && (st = LS_K(ls_params_load)(p, a->load, err, sizeof err)) != LS_OK) {
        fprintf(stderr, "longstraw-train: --load: %s\n", err);
        rc = 2;
        goto done;
    }
    if (prepare_run_dir(a->out, err, sizeof err) != 0) {
        fprintf(stderr, "longstraw-train: %s\n", err);
        rc = 2;
        goto done;
    }
    snprintf(path, sizeof path, "%s/%s", a->out, events_rel);
    int32_t members[1] = {0};
    ls_trace_group grp = {.name = "world", .members = members, .n_members = 1};
    ls_trace_header hdr = {.run_id = run_id, .rank = 0, .world = 1, .groups = &grp, .n_groups = 1,
                           .tool = "longstraw-train"};
    st = ls_trace_writer_open(&ob.w, path, &hdr);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: %s: cannot open the trace: %s\n", path, ls_status_str(st));
        rc = 2;
        goto done;
    }
    ob.quiet = a->quiet;
    ob.n_layers = a->cfg.n_layers;
    ob.p = p;
    ls_step_observer obs = {.user = &ob, .phase_begin = on_begin, .phase_end = on_end, .layer_end = on_layer,
                            .progress = on_progress};
    if (a->save_init) {
        st = LS_K(ls_params_save)(p, LS_PARAMS_WEIGHTS, a->save_init, err, sizeof err);
        if (st != LS_OK) {
            fprintf(stderr, "longstraw-train: --save-init: %s\n", err);
            ls_trace_emit_error(ob.w, st, err);
            goto finish;
        }
    }
    for (int s = 0; s < a->steps; s++) {
        ob.step = s;
        if (!a->rollouts) {
            ls_task_free(&task);
            ls_batch_free(b);
            b = NULL;
            size_t vl = a->step.R < 8 ? a->step.R : 8;
            if ((st = ls_task_make(&task, a->P, vl, a->step.seed + (uint64_t)s)) != LS_OK ||
                (st = ls_batch_alloc(&b, a->step.G)) != LS_OK ||
                (st = ls_batch_set_prompt(b, task.prompt, task.P)) != LS_OK) {
                snprintf(err, sizeof err, "cannot build the task batch: %s", ls_status_str(st));
                ls_trace_emit_error(ob.w, st, err);
                fprintf(stderr, "longstraw-train: %s\n", err);
                goto finish;
            }
        } else if (s > 0) {
            b->old_supplied = 0; /* later steps score their own old policy */
        }
        ls_step_options so = a->step;
        so.seed = a->step.seed + 1000003ull * (uint64_t)s;
        if (steps_begun > 0) fold_step_peaks(&sp, steps_begun - 1);
        ls_mem_reset_peaks(); /* the window peaks are this step's from here */
        steps_begun++;
        st = LS_K(ls_step_grads)(p, b, a->rollouts ? NULL : &task, &so, &obs, &res, err, sizeof err);
        if (st != LS_OK) {
            fprintf(stderr, "longstraw-train: step %d: %s\n", s + 1, err);
            ls_trace_emit_error(ob.w, st, err);
            goto finish;
        }
        if (s == 0 && a->dump_batch &&
            (st = ls_batch_write_dump(b, &a->cfg, &a->obj, a->dump_batch, err, sizeof err)) != LS_OK) {
            fprintf(stderr, "longstraw-train: --dump-batch: %s\n", err);
            ls_trace_emit_error(ob.w, st, err);
            goto finish;
        }
        if (s == 0 && a->dump_grads && (st = LS_K(ls_params_save)(p, LS_PARAMS_TRAINABLE_GRADS, a->dump_grads, err, sizeof err)) != LS_OK) {
            fprintf(stderr, "longstraw-train: --dump-grads: %s\n", err);
            ls_trace_emit_error(ob.w, st, err);
            goto finish;
        }
        int64_t t0 = now_ns();
        on_begin(&ob, "optimizer");
        LS_K(ls_step_optimizer)(p, &a->step, s + 1);
        note(&ob, ls_trace_emit_optimizer_step(ob.w, s, (int64_t)p->n_trainable, a->step.lr, res.grad_norm));
        emit_digests(&ob, p);
        on_end(&ob, "optimizer", now_ns() - t0, 1);
        steps_done++;
        if (!a->quiet)
            fprintf(stderr, "[step %d] loss %.6f  grad-norm %.4e  mean reward %.4f  prompt state %zu B (analytical %zu B)\n",
                    s + 1, res.loss + 0.0, res.grad_norm, res.mean_reward, res.prompt_state_bytes, res.prompt_state_analytical);
    }
    rc = 0;
finish:
    if (rc != 0 && st != LS_OK) fail_st = st;
    if (ob.emit_err != LS_OK) {
        fprintf(stderr, "longstraw-train: trace: %s\n", ls_trace_writer_last_error(ob.w));
        rc = 1;
    }
    int64_t n_events = ls_trace_writer_seq(ob.w);
    if (rc == 0) note(&ob, ls_trace_emit_rank_complete(ob.w, steps_done)), n_events++;
    st = ls_trace_writer_close(ob.w);
    ob.w = NULL;
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: %s: closing the trace failed: %s\n", path, ls_status_str(st));
        rc = 1;
    }
    if ((uint64_t)steps_begun > sp.steps) fold_step_peaks(&sp, steps_begun - 1); /* the last step */
    {
        ls_mem_stats ms;
        ls_mem_snapshot(&ms);
        ls_receipt_phase ph[N_PHASES];
        size_t nph = 0;
        for (int i = 0; i < N_PHASES; i++)
            if (ob.count[i]) ph[nph++] = (ls_receipt_phase){ls_trace_phase_name((ls_trace_phase)i), ob.count[i], ob.ns[i]};
        ls_receipt_memory mem[LS_MEM_COUNT];
        for (int k = 0; k < LS_MEM_COUNT; k++)
            mem[k] = (ls_receipt_memory){ls_mem_cat_name((ls_mem_cat)k), ms.run_peak_bytes[k], sp.cat[k]};
        char blas[128];
        snprintf(blas, sizeof blas, "%s", openblas_get_config());
        ls_status bst = ls_build_info_create(blas, "none", &build);
        if (bst != LS_OK) /* the receipt writer then refuses the NULL build object */
            fprintf(stderr, "longstraw-train: build info: cannot describe this build (reading /proc/self/exe): %s\n",
                    ls_status_str(bst));
        config = ls_config_to_json(&a->cfg, &a->obj);
        ls_receipt r = {.run_id = run_id, .rank = 0, .world = 1, .host = NULL, .build = build, .config = config,
                        .steps = (uint64_t)steps_done, .phases = ph, .n_phases = nph, .memory = mem,
                        .n_memory = LS_MEM_COUNT, .run_total_peak_bytes = ms.run_peak_total,
                        .rss_peak_bytes = ls_mem_peak_rss_bytes(), .step_total_peak_bytes = sp.total,
                        .steps_measured = sp.steps, .step_total_peak_at = sp.total_at, .events_file = events_rel,
                        .events_count = (uint64_t)n_events, .events_last_seq = n_events - 1,
                        .status = rc == 0 ? LS_RECEIPT_COMPLETE : LS_RECEIPT_ERROR,
                        .error_code = rc == 0 ? 0 : (int)fail_st,
                        .error_message = rc == 0 ? NULL : (err[0] ? err : "the step failed"),
                        .start_unix_ns = start_unix, .end_unix_ns = (uint64_t)time(NULL) * 1000000000ull};
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        for (char *c = host; *c; c++)
            if (*c == ' ') *c = '-';
        r.host = host;
        char rerr[1024];
        if ((st = ls_receipt_write(a->out, &r, rerr, sizeof rerr)) != LS_OK) {
            fprintf(stderr, "longstraw-train: receipt: %s\n", rerr);
            rc = 1;
        } else {
            ls_manifest m = {.run_id = run_id, .world = 1, .build = build, .config = config};
            if ((st = ls_manifest_write(a->out, &m, rerr, sizeof rerr)) != LS_OK) {
                fprintf(stderr, "longstraw-train: manifest: %s\n", rerr);
                rc = 1;
            }
        }
    }
    if (rc == 0) {
        ls_mem_stats ms;
        ls_mem_snapshot(&ms);
        printf("longstraw-train: %d step(s) of %s (%s, %s, %s) P=%zu G=%zu: loss %.6f, grad-norm %.4e, "
               "mean reward %.4f\n",
               steps_done, a->config_path, LS_REAL_NAME, a->obj.grad_mode == LS_GRAD_FULL ? "full" : "detached",
               a->step.strategy == LS_STRATEGY_NAIVE ? "naive" : "longstraw", P, b ? b->G : a->step.G, res.loss + 0.0 /* no "-0" */,
               res.grad_norm, res.mean_reward);
        printf("  exact loss %.17g (last step)\n", res.loss + 0.0); /* read by tests/reference/ */
        printf("  prompt state %zu B (analytical %zu B), largest branch tape %zu B\n", res.prompt_state_bytes,
               res.prompt_state_analytical, res.max_branch_bytes);
        printf("  memory peaks, run:");
        for (int k = 0; k < LS_MEM_COUNT; k++)
            if (ms.run_peak_bytes[k]) printf(" %s=%zu", ls_mem_cat_name((ls_mem_cat)k), ms.run_peak_bytes[k]);
        printf(" total=%zu rss=%zu\n", ms.run_peak_total, ls_mem_peak_rss_bytes());
        printf("  memory peaks, per step (largest of %llu):", (unsigned long long)sp.steps);
        for (int k = 0; k < LS_MEM_COUNT; k++)
            if (sp.cat[k]) printf(" %s=%zu", ls_mem_cat_name((ls_mem_cat)k), sp.cat[k]);
        printf(" total=%zu (step %lld)\n", sp.total, (long long)sp.total_at + 1);
        printf("  phases:");
        for (int i = 0; i < N_PHASES; i++)
            if (ob.count[i]) printf(" %s=%.3fs", ls_trace_phase_name((ls_trace_phase)i), ob.ns[i] * 1e-9);
        printf("\n  run: %s (trace, receipt, manifest)\n", a->out);
    }
done:
    if (ob.w) ls_trace_writer_close(ob.w);
    cJSON_Delete(build);
    cJSON_Delete(config);
    ls_task_free(&task);
    ls_batch_free(b);
    LS_K(ls_params_free)(p);
    return rc;
}
