/* train_run.c - the longstraw-train job: open the run (plan, parameters,
 * checkpoint, run directory, trace, metrics file), run its steps (inputs,
 * step, dumps, optimizer, metrics, checkpoints), close it (trace, receipt,
 * manifest, summary).  Each concern's code lives in its own module:
 * run_plan (memory plan), run_obs (events and progress), run_input (the
 * step's batch), run_metrics (step_metrics), run_report (receipt, summary),
 * checkpoint (save and resume). */
#include "trainer/run/train_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "receipts/format/json_util.h"
#include "receipts/writing/trace_writer.h"
#include "trainer/io/checkpoint.h"
#include "trainer/dist/comm.h"
#include "trainer/dist/ep.h"
#include "trainer/model/stage.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/io/params_io.h"
#include "trainer/run/run_digests.h"
#include "trainer/run/run_dir.h"
#include "trainer/run/run_input.h"
#include "trainer/run/run_metrics.h"
#include "trainer/run/run_obs.h"
#include "trainer/run/run_plan.h"
#include "trainer/run/run_probe.h"
#include "trainer/run/run_report.h"
#include "trainer/step/probe.h"
#include "trainer/step/step.h"
#include "trainer/families/families.h"

typedef struct {
    const ls_train_args *a;
    ls_params *p;
    ls_run_input in;
    ls_run_obs ob;
    ls_run_peaks sp;
    ls_step_prefix pf;
    ls_plan plan;           /* the current step shape's plan (run_plan.h): its budget check and reference decision */
    ls_step_result res;
    ls_step_result *group_res; /* [B] the step's groups' own figures (the metrics' "groups") */
    ls_run_metrics_sink ms;
    int64_t step0;          /* the first step's global index (a resumed run's checkpoint step) */
    uint64_t seed;          /* --seed, or the resumed checkpoint's */
    uint64_t steps_done, steps_begun, frozen_steps, sft_steps;
    uint64_t *frozen_idx;   /* the prefix-frozen steps' indices (tracked) */
    size_t frozen_cap;
    ls_status fail_st;
    ls_comm *comm;          /* a->comm (single-rank when main gave none) */
    int rank, world;
    int cp_world;           /* the CP group's size (world / ep) */
    ls_ep ep;               /* --ep N > 1: the EP group and this rank's place (ep.g NULL: none) */
    int in_step_failure;    /* a step failed inside its collectives: the job must be aborted */
    int trace_reported;     /* the trace's failure is already on stderr and in err */
    uint64_t grad_disagreements; /* steps whose finalize digest check found ranks apart */
    ls_run_probe_tally probes; /* --probe-every: what the gradient probes found (run_probe.h) */
    ls_run_inputs inputs;   /* the digests of what the run read (the config's "inputs") */
    char err[2048], run_id[64], trace_path[4096], events_rel[64];
} run;

static int fail(run *r, int rc, ls_status st, const char *fmt, const char *what) {
    if (r->world > 1) fprintf(stderr, "longstraw-train: rank %d: %s%s\n", r->rank, fmt, what);
    else fprintf(stderr, "longstraw-train: %s%s\n", fmt, what);
    r->fail_st = st;
    return rc;
}

/* Every rank's rc agreed (the largest wins): for failures outside a step's
 * collectives, so that every rank stops at the same point. */
static int agree_rc(run *r, int rc, const char *purpose) {
    if (r->world < 2) return rc;
    int64_t v = rc;
    if (ls_group_allreduce_max(ls_comm_all(r->comm), &v, 1, LS_TRACE_DTYPE_I64, purpose, -1) != LS_OK) {
        fprintf(stderr, "longstraw-train: rank %d: %s\n", r->rank, ls_comm_last_error(r->comm));
        r->in_step_failure = 1;
        return rc ? rc : 1;
    }
    if (v != 0 && rc == 0) {
        snprintf(r->err, sizeof r->err, "another rank failed (exit status %lld)", (long long)v);
        r->fail_st = LS_ERR_ARG;
    }
    return (int)v;
}

/* A failure once the trace is open: r->err (prefixed with `what`) as an
 * error event, on stderr and as the receipt's error.  Returns rc. */
static int fail_event(run *r, int rc, ls_status st, const char *what) {
    if (what[0]) {
        char msg[sizeof r->err];
        snprintf(msg, sizeof msg, "%s%.1900s", what, r->err);
        memcpy(r->err, msg, sizeof msg);
    }
    ls_run_obs_note(&r->ob, ls_trace_emit_error(r->ob.w, st, r->err));
    return fail(r, rc, st, "", r->err);
}

/* The trace could not be written (the first failure, named by the
 * writer): the run stops, with rc.  The writer refuses every event after
 * its first failure, so none records this. */
static int fail_trace(run *r, int rc) {
    snprintf(r->err, sizeof r->err, "trace: %s", r->ob.emit_msg[0] ? r->ob.emit_msg : ls_status_str(r->ob.emit_err));
    r->trace_reported = 1;
    return fail(r, rc, r->ob.emit_err, "", r->err);
}

/* Parameters: checked against the plan, initialised, then --load or --resume. */
static int open_params(run *r) {
    const ls_train_args *a = r->a;
    ls_run_shape sh = {.P = r->in.P, .Rmax = r->in.Rmax, .G = r->in.G, .where = r->in.where};
    size_t budget = LS_K(ls_run_budget)(a);
    ls_status st = LS_K(ls_run_plan_check)(a, &sh, budget, &r->plan);
    if (st != LS_OK) return 2;
    ls_mem_set_budget(budget);
    ls_mem_set_host_budget(a->host_memory); /* the host tier's (--state-tier host) */
    /* under EP this rank holds its own routed experts only (trainer/dist/ep.h) */
    st = LS_K(ls_params_init_ep)(&r->p, &a->cfg, &a->obj, a->step.seed, r->ep.g ? r->ep.rank : 0,
                                 r->ep.g ? r->ep.size : 1, r->err, sizeof r->err);
    if (st != LS_OK) return fail(r, st == LS_ERR_NOMEM || st == LS_ERR_INTERNAL ? 1 : 2, st, "", r->err);
    if (a->load) {
        ls_params_source src;
        if ((st = LS_K(ls_params_load_source)(r->p, a->load, &src, r->err, sizeof r->err)) != LS_OK)
            return fail(r, 2, st, "--load: ", r->err);
        snprintf(r->inputs.load, sizeof r->inputs.load, "%s", src.sha256);
        if (!src.digested && r->rank == 0)
            fprintf(stderr, "longstraw-train: warning: --load %s carries no digests (written before they were, or by "
                            "another program): its tensors are not verified; the receipts record its sha256\n", a->load);
    }
    if (a->resume) {
        ls_checkpoint_info info;
        st = LS_K(ls_checkpoint_load)(r->p, a->resume, &info, r->err, sizeof r->err);
        if (st != LS_OK) return fail(r, 2, st, "--resume: ", r->err);
        snprintf(r->inputs.resume, sizeof r->inputs.resume, "%s", info.sha256);
        if (!info.digested && r->rank == 0)
            fprintf(stderr, "longstraw-train: warning: --resume %s is a %s checkpoint, written before checkpoints "
                            "carried digests: its tensors are not verified; the receipts record its sha256\n",
                    a->resume, LS_CHECKPOINT_FORMAT_V1);
        if (strcmp(info.rng_scheme, LS_CHECKPOINT_RNG_SCHEME) != 0) {
            snprintf(r->err, sizeof r->err, "%s: rng_scheme '%s' is not this trainer's '%s'", a->resume,
                     info.rng_scheme, LS_CHECKPOINT_RNG_SCHEME);
            return fail(r, 2, LS_ERR_FORMAT, "--resume: ", r->err);
        }
        if (a->have_seed && info.seed != a->step.seed) {
            snprintf(r->err, sizeof r->err, "%s holds seed %llu; --seed %llu differs (omit --seed to resume)",
                     a->resume, (unsigned long long)info.seed, (unsigned long long)a->step.seed);
            return fail(r, 2, LS_ERR_ARG, "--resume: ", r->err);
        }
        r->step0 = info.step;
        r->seed = info.seed; /* the run continues the checkpoint's draws */
    }
    return 0;
}

/* The digests of the inputs read so far (the config, --load, --resume: the
 * rollouts' is taken at the end) and of the initial weights; under mpirun
 * every rank compares its own with rank 0's, so that a rank that read other
 * bytes (another file at the same path on another node) stops the run. */
static int note_inputs(run *r) {
    const ls_train_args *a = r->a;
    snprintf(r->inputs.config, sizeof r->inputs.config, "%s", a->config_sha256);
    /* EP: the other ranks' experts assembled, so that the digest is the whole table's (an EP-1 run's) */
    ls_status st = LS_K(ls_ep_assemble)(r->ep.g ? &r->ep : NULL, r->p, LS_EP_SLOT(LS_SLOT_W));
    if (st != LS_OK) {
        r->in_step_failure = r->ep.g != NULL;
        return fail(r, 1, st, "expert parallelism: assembling the initial weights: ", ls_comm_last_error(r->comm));
    }
    st = LS_K(ls_params_sha256)(r->p, LS_PARAMS_WEIGHTS, r->inputs.initial_weights, r->err, sizeof r->err);
    LS_K(ls_ep_release)(r->p);
    if (st != LS_OK) return fail(r, 1, st, "the initial weights' digest: ", r->err);
    if (r->world < 2) return 0;
    static const char *const what[4] = {"--config", "--load", "--resume", "initial weights"};
    char *mine[4] = {r->inputs.config, r->inputs.load, r->inputs.resume, r->inputs.initial_weights};
    char root[4][65];
    for (int i = 0; i < 4; i++) memcpy(root[i], mine[i], sizeof root[i]);
    if (ls_group_broadcast(ls_comm_all(r->comm), root, sizeof root, LS_TRACE_DTYPE_U8, 0, "inputs", -1) != LS_OK)
        return fail(r, 1, LS_ERR_MPI, "", ls_comm_last_error(r->comm));
    for (int i = 0; i < 4; i++)
        if (memcmp(root[i], mine[i], sizeof root[i]) != 0) {
            snprintf(r->err, sizeof r->err, "%s: this rank read other bytes than rank 0 (sha256 %.16s..., rank 0's "
                     "%.16s...): every rank must see the same files", what[i], mine[i][0] ? mine[i] : "(none)",
                     root[i][0] ? root[i] : "(none)");
            return fail(r, 2, LS_ERR_ARG, "", r->err);
        }
    return 0;
}

/* 0 when the directory that will hold path is writable (checked before the
 * steps, so that a long run does not fail at its end). */
static int dir_writable(const char *opt, const char *path, const char *out, char *err, size_t err_len) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') n--;
    if (strlen(dir) == n && !strncmp(dir, out, n)) return 0; /* inside the run directory, made next */
    if (access(dir, W_OK | X_OK) == 0) return 0;
    snprintf(err, err_len, "%s %.900s: cannot write into '%.900s': %s", opt, path, dir, strerror(errno));
    return -1;
}

/* Run directory, trace and metrics file; --save-init. */
static int open_outputs(run *r) {
    const ls_train_args *a = r->a;
    if ((a->save && dir_writable("--save", a->save, a->out, r->err, sizeof r->err) != 0) ||
        (a->plot && dir_writable("--plot", a->plot, a->out, r->err, sizeof r->err) != 0))
        return fail(r, 2, LS_ERR_IO, "", r->err);
    /* rank 0 makes the run directory; every rank learns its verdict, then makes its own rank-NNNN */
    int made = r->rank == 0 ? ls_run_dir_prepare(a->out, r->err, sizeof r->err) : 0;
    if (r->world > 1) {
        int64_t v = made;
        if (ls_group_broadcast(ls_comm_all(r->comm), &v, 1, LS_TRACE_DTYPE_I64, 0, "run_dir", -1) != LS_OK) v = -1;
        if (v != 0 && r->rank != 0)
            snprintf(r->err, sizeof r->err, "--out %.1000s: rank 0 could not prepare the run directory", a->out);
        made = (int)v;
    }
    if (made != 0 || ls_run_dir_make_rank(a->out, (unsigned)r->rank, r->err, sizeof r->err) != 0)
        return fail(r, 2, LS_ERR_IO, "", r->err);
    snprintf(r->events_rel, sizeof r->events_rel, "rank-%04d/events.jsonl.zst", r->rank);
    snprintf(r->trace_path, sizeof r->trace_path, "%s/%s", a->out, r->events_rel);
    int32_t members[4096];
    if (r->world > 4096) return fail(r, 2, LS_ERR_ARG, "", "more than 4096 ranks");
    for (int i = 0; i < r->world; i++) members[i] = i;
    ls_trace_group grp[3] = {{.name = "world", .members = members, .n_members = (size_t)r->world},
                             {.name = ls_group_name(ls_comm_cp(r->comm)), .members = members,
                              .n_members = (size_t)r->world}};
    size_t n_groups = r->world > 1 ? 2 : 1;
    int32_t cp_members[4096], ep_members[4096];
    if (r->ep.g) { /* the CP x EP grid: the world, this rank's CP group and its EP group, each with its kind */
        ls_comm_group *cpg = ls_comm_cp(r->comm);
        grp[0].kind = ls_group_kind(ls_comm_all(r->comm)); /* the registered kinds the groups carry */
        grp[1] = (ls_trace_group){.name = ls_group_name(cpg), .kind = ls_group_kind(cpg), .members = cp_members,
                                  .n_members = ls_group_members(cpg, cp_members, 4096)};
        grp[2] = (ls_trace_group){.name = ls_group_name(r->ep.g), .kind = ls_group_kind(r->ep.g),
                                  .members = ep_members, .n_members = ls_group_members(r->ep.g, ep_members, 4096)};
        n_groups = 3;
    }
    ls_trace_header hdr = {.run_id = r->run_id, .rank = r->rank, .world = r->world, .groups = grp,
                           .n_groups = n_groups, .tool = "longstraw-train"};
    ls_trace_writer *w = NULL;
    ls_status st = ls_trace_writer_open(&w, r->trace_path, &hdr);
    if (st != LS_OK) {
        snprintf(r->err, sizeof r->err, "%.1500s: cannot open the trace: %s", r->trace_path, ls_status_str(st));
        return fail(r, 2, st, "", r->err);
    }
    ls_run_obs_init(&r->ob, w, &a->cfg, a->quiet || r->rank > 0); /* progress from rank 0 */
    if (a->fault_kill_rank && a->fault_kill_rank - 1 == r->rank)
        ls_run_obs_arm_kill(&r->ob, a->fault_kill_phase, a->fault_kill_at_layer, a->fault_kill_layer);
    if (r->world > 1) ls_comm_set_trace(r->comm, w);
    int bad = a->metrics && r->rank == 0 && ls_run_metrics_open(&r->ms, a->metrics, r->err, sizeof r->err) != LS_OK;
    if (agree_rc(r, bad ? 2 : 0, "open_outputs") != 0) return fail(r, 2, LS_ERR_IO, bad ? "--metrics: " : "", r->err);
    if (a->save_init && (st = LS_K(ls_ep_assemble)(r->ep.g ? &r->ep : NULL, r->p, LS_EP_SLOT(LS_SLOT_W))) != LS_OK) {
        r->in_step_failure = 1;
        snprintf(r->err, sizeof r->err, "expert parallelism: %s", ls_comm_last_error(r->comm));
        return fail_event(r, 1, st, "--save-init: ");
    }
    if (r->rank == 0 && a->save_init &&
        (st = LS_K(ls_params_save)(r->p, LS_PARAMS_WEIGHTS, a->save_init, r->err, sizeof r->err)) != LS_OK) {
        LS_K(ls_ep_release)(r->p);
        return fail_event(r, 1, st, "--save-init: ");
    }
    LS_K(ls_ep_release)(r->p);
    return 0;
}

/* --save's checkpoint after steps_total steps (rank 0; written whole or
 * not at all); a failure is an error event and on stderr. */
static ls_status save_checkpoint(run *r, int64_t steps_total) {
    /* EP: the other ranks' experts (weights, moments, reference copy) from their owners, every EP group alike */
    unsigned slots = LS_EP_SLOT(LS_SLOT_W) | LS_EP_SLOT(LS_SLOT_M) | LS_EP_SLOT(LS_SLOT_V) | LS_EP_SLOT(LS_SLOT_REF);
    ls_status ast = LS_K(ls_ep_assemble)(r->ep.g ? &r->ep : NULL, r->p, slots);
    if (ast != LS_OK) {
        snprintf(r->err, sizeof r->err, "expert parallelism: %s", ls_comm_last_error(r->comm));
        r->in_step_failure = 1;
        fail_event(r, 1, ast, "--save: ");
        return ast;
    }
    if (r->rank != 0) { /* every rank holds the same parameters (the digests say so) */
        LS_K(ls_ep_release)(r->p);
        return LS_OK;
    }
    ls_checkpoint_info info = {.step = steps_total, .seed = r->seed, .lr = r->a->step.lr,
                               .beta1 = r->a->step.beta1, .beta2 = r->a->step.beta2, .eps = r->a->step.adam_eps,
                               .weight_decay = r->a->step.weight_decay};
    snprintf(info.rng_scheme, sizeof info.rng_scheme, "%s", LS_CHECKPOINT_RNG_SCHEME);
    ls_status st = LS_K(ls_checkpoint_save)(r->p, &info, r->a->save, r->err, sizeof r->err);
    LS_K(ls_ep_release)(r->p);
    if (st != LS_OK) fail_event(r, 1, st, "--save: ");
    return st;
}

/* The dumps of the run's first step (after its gradients, before its update). */
static ls_status first_step_dumps(run *r) {
    const ls_train_args *a = r->a;
    ls_status st = LS_OK;
    /* EP: the other ranks' experts' gradients from their owners */
    if (a->dump_grads && (st = LS_K(ls_ep_assemble)(r->ep.g ? &r->ep : NULL, r->p, LS_EP_SLOT(LS_SLOT_G))) != LS_OK) {
        snprintf(r->err, sizeof r->err, "expert parallelism: %s", ls_comm_last_error(r->comm));
        r->in_step_failure = 1;
        fail_event(r, 1, st, "--dump-grads: ");
        return st;
    }
    if (r->rank != 0) { /* rank 0's dumps: finalize leaves every rank the same gradients */
        LS_K(ls_ep_release)(r->p);
        return LS_OK;
    }
    if (a->dump_batch && (st = ls_batch_write_dump(r->in.b, &a->cfg, &a->obj, a->dump_batch, r->err, sizeof r->err)) != LS_OK)
        fail_event(r, 1, st, "--dump-batch: ");
    else if (a->dump_grads &&
             (st = LS_K(ls_params_save)(r->p, LS_PARAMS_TRAINABLE_GRADS, a->dump_grads, r->err, sizeof r->err)) != LS_OK)
        fail_event(r, 1, st, "--dump-grads: ");
    LS_K(ls_ep_release)(r->p);
    return st;
}

/* The batch of step s (a prefix-frozen block of K steps shares its first
 * step's prompt: the capture is reused).  0 with *end set when a rollouts
 * stream ended; 2 for a bad line (nothing of the step begun). */
static int next_input(run *r, int64_t s, int64_t asked, int *end) {
    int K = r->a->prefix_frozen > 1 ? r->a->prefix_frozen : 1;
    ls_status st = ls_run_input_next(&r->in, r->a, r->seed, s - (s - r->step0) % K, end, r->err, sizeof r->err);
    if (st == LS_OK && *end && asked >= 0) {
        snprintf(r->err, sizeof r->err, "%s ended after %zu line(s); --steps asked for %lld step(s)", r->in.where,
                 r->in.line, (long long)asked);
        st = LS_ERR_TRUNCATED;
    }
    if (st == LS_OK) return 0;
    ls_trace_emit_error(r->ob.w, st, r->err);
    return fail(r, 2, st, "", r->err);
}

static ls_status note_frozen(run *r, int64_t s) {
    if (r->frozen_steps == r->frozen_cap) {
        size_t cap = r->frozen_cap ? 2 * r->frozen_cap : 64;
        uint64_t *n = ls_mem_alloc(LS_MEM_SCRATCH, cap * sizeof *n);
        if (!n) return LS_ERR_NOMEM;
        if (r->frozen_idx) memcpy(n, r->frozen_idx, r->frozen_steps * sizeof *n);
        ls_mem_free(r->frozen_idx);
        r->frozen_idx = n;
        r->frozen_cap = cap;
    }
    r->frozen_idx[r->frozen_steps++] = (uint64_t)s;
    return LS_OK;
}

/* The step guard, after the step's gradients and before anything is
 * written or updated: every figure of the step's record (the loss, its
 * parts and every step_metrics figure the step computed) finite, and the
 * step's events written, on every rank; otherwise the step stops: an error
 * event naming the figure (the trace's own failure on stderr), no optimizer
 * step, no checkpoint.  The verdict is agreed, so that no rank updates its
 * parameters while another refuses (and none waits in a collective).  0 or
 * 1. */
static int step_guard(run *r, int64_t s) {
    double v = 0;
    const char *bad = ls_step_result_nonfinite(&r->res, &v);
    int trace_bad = r->ob.emit_err != LS_OK;
    if (bad) snprintf(r->err, sizeof r->err, "step %lld: %s is %g: no optimizer step", (long long)s + 1, bad, v);
    if (agree_rc(r, bad || trace_bad, "step_guard") == 0) return 0;
    if (r->in_step_failure)
        snprintf(r->err, sizeof r->err, "step %lld: the ranks could not agree on the step guard: %s", (long long)s + 1,
                 ls_comm_last_error(r->comm));
    else if (!bad && trace_bad)
        return fail_trace(r, 1);
    else if (!bad) /* as agree_rc says it: the cause is in that rank's trace and receipt */
        snprintf(r->err, sizeof r->err, "step %lld: another rank stopped the step: no optimizer step", (long long)s + 1);
    return fail_event(r, 1, bad ? LS_ERR_NONFINITE : r->in_step_failure ? LS_ERR_MPI : LS_ERR_ARG, "");
}

/* --probe-every: the gradient probe of step s (trainer/step/probe.h), after
 * its gradients and before its update, in a phase of its own ("probe": its
 * captures and scoring write no layer_end; under CP its collectives fall
 * in that phase); its gradient_probe event.  A failing probe is evidence,
 * not a guard: the run goes on (stderr and the summary say so).  0, or 1
 * when the probe could not run (an error event; under CP the job ends). */
static int probe_step(run *r, int64_t s, const ls_step_options *so) {
    int frozen = r->res.prefix_frozen; /* nothing to judge: not_applicable, nothing evaluated */
    ls_probe_options po = {.grouping = (ls_probe_grouping)r->a->probe_groups, .prefix_frozen = frozen};
    ls_probe_result pr;
    int64_t t0 = ls_run_now_ns();
    if (!frozen) ls_run_obs_begin(&r->ob, "probe");
    ls_status st = LS_K(ls_probe_step)(r->p, r->in.bs, r->in.have_task ? r->in.task_ptrs : NULL, r->in.B, so, &po,
                                       &pr, r->err, sizeof r->err);
    if (!frozen) ls_run_obs_end(&r->ob, "probe", ls_run_now_ns() - t0, st == LS_OK);
    if (st != LS_OK) {
        ls_probe_result_free(&pr);
        ls_trace_emit_error(r->ob.w, st, r->err);
        r->in_step_failure = r->world > 1; /* the other ranks may wait in a collective */
        return fail(r, 1, st, "", r->err);
    }
    ls_run_obs_note(&r->ob, ls_run_probe_emit(r->ob.w, s, &pr));
    ls_run_probe_note(&r->probes, s, &pr);
    if (pr.verdict == LS_PROBE_FAIL && r->rank == 0) {
        char line[700], what[600];
        ls_run_probe_describe(&pr, s, what, sizeof what);
        snprintf(line, sizeof line, "longstraw-train: GRADIENT PROBE FAILED: %s", what);
        ls_run_obs_print(&r->ob, line);
    }
    ls_probe_result_free(&pr);
    return 0;
}

/* One step, global index s: its gradients, the guard, dumps, update,
 * metrics and checkpoint.  0, 1 (the step failed, or an output of it could
 * not be written whole) or 2 (its memory plan is above the budget). */
static int one_step(run *r, int64_t s, int first) {
    const ls_train_args *a = r->a;
    ls_trace_writer *w = r->ob.w;
    int64_t t_step = ls_run_now_ns();
    r->ob.step = s;
    int K = a->prefix_frozen > 1 ? a->prefix_frozen : 1;
    int block_start = K == 1 || (s - r->step0) % K == 0;
    if (block_start) LS_K(ls_step_prefix_free)(&r->pf);
    ls_status st;
    if (r->in.shape_changed) { /* a rollouts line of another size: its plan before its step */
        ls_run_shape sh = {.P = r->in.P, .Rmax = r->in.Rmax, .G = r->in.G, .where = r->in.where};
        if ((st = LS_K(ls_run_plan_check)(a, &sh, LS_K(ls_run_budget)(a), &r->plan)) != LS_OK) {
            snprintf(r->err, sizeof r->err, "%s: the step's memory plan is above the budget", r->in.where);
            ls_trace_emit_error(w, st, r->err);
            return fail(r, 2, st, "", r->err);
        }
    }
    ls_step_options so = a->step;
    so.seed = r->seed + 1000003ull * (uint64_t)s;
    so.cp_group = r->cp_world > 1 ? ls_comm_cp(r->comm) : NULL;
    so.keep_reference = r->plan.keep_reference; /* the plan's decision (or the option it was given) */
    so.replay_checkpoint = r->plan.replay_checkpoint;
    so.grad_cosine = ls_run_grad_cosine_due(a->grad_cosine_every, s - r->step0);
    if (s - r->step0 < a->sft_steps) so.objective = LS_OBJECTIVE_SFT;
    if (r->steps_begun > 0) ls_run_peaks_fold(&r->sp, s - 1 - r->step0); /* run-local: the receipt's index */
    ls_mem_reset_peaks(); /* the window peaks are this step's from here */
    r->steps_begun++;
    int frozen = K > 1 && !block_start;
    ls_trace_writer_set_prefix_frozen(w, frozen);
    ls_step_observer obs = ls_run_obs_observer(&r->ob);
    st = LS_K(ls_step_grads_groups)(r->p, r->in.bs, r->in.have_task ? r->in.task_ptrs : NULL, r->in.B, &so, &obs,
                                    K > 1 ? &r->pf : NULL, &r->res, r->group_res, r->err, sizeof r->err);
    if (st != LS_OK) {
        ls_trace_emit_error(w, st, r->err);
        r->in_step_failure = r->world > 1; /* the other ranks may wait in a collective */
        return fail(r, 1, st, "step: ", r->err);
    }
    /* EP: the gradient norm's experts' parts came from their owners in finalize (step_txn.c, ep_grad_gather) */
    int rc = step_guard(r, s);
    if (rc != 0) return rc;
    /* the code this step took (the config's "paths") */
    r->inputs.step_paths |= r->res.paths;
    r->inputs.run_paths |= (r->in.B > 1 ? LS_RUN_PATH_GROUPS_SEVERAL : LS_RUN_PATH_GROUPS_ONE) |
                           (r->res.prefix_frozen ? LS_RUN_PATH_PREFIX_FROZEN : LS_RUN_PATH_PREFIX_FRESH) |
                           (a->resume ? LS_RUN_PATH_START_RESUMED : LS_RUN_PATH_START_FRESH) |
                           ls_run_path_shards((int64_t)r->in.P - 1, r->cp_world, a->step.page_size, a->step.capture_chunk);
    if (r->res.cp_world > 1 && !r->res.grads_agree) {
        r->grad_disagreements++;
        if (r->rank == 0)
            fprintf(stderr, "longstraw-train: step %lld: the ranks' finalized gradients differ (digest check)\n",
                    (long long)s + 1);
    }
    if (first && first_step_dumps(r) != LS_OK) return 1;
    if (ls_run_probe_due(a->probe_every, s - r->step0) && (rc = probe_step(r, s, &so)) != 0) return rc;
    int64_t t0 = ls_run_now_ns();
    ls_run_obs_begin(&r->ob, "optimizer");
    LS_K(ls_step_optimizer)(r->p, &a->step, s + 1); /* EP: the tensors this rank holds */
    ls_run_obs_note(&r->ob, ls_trace_emit_optimizer_step(w, s, (int64_t)r->p->n_trainable, a->step.lr, r->res.grad_norm));
    /* EP: the other ranks' experts' digests from their owners ("ep_param_gather") */
    if ((st = LS_K(ls_run_emit_digests)(&r->ob, r->p, r->ep.g ? &r->ep : NULL)) != LS_OK) {
        snprintf(r->err, sizeof r->err, "expert parallelism: the parameter digests: %s",
                 r->ep.g ? ls_comm_last_error(r->comm) : ls_status_str(st));
        ls_trace_emit_error(w, st, r->err);
        r->in_step_failure = r->ep.g != NULL;
        return fail(r, 1, st, "optimizer: ", r->err);
    }
    ls_run_obs_end(&r->ob, "optimizer", ls_run_now_ns() - t0, 1);
    r->res.phase_ns[LS_PHASE_OPTIMIZER] = ls_run_now_ns() - t0;
    r->steps_done++;
    r->sft_steps += so.objective == LS_OBJECTIVE_SFT;
    if (r->res.prefix_frozen && note_frozen(r, s) != LS_OK) {
        snprintf(r->err, sizeof r->err, "cannot record the prefix-frozen steps: %s", ls_status_str(LS_ERR_NOMEM));
        return fail(r, 1, LS_ERR_NOMEM, "", r->err);
    }
    st = ls_run_metrics_emit(&r->ms, &r->ob, a, s, so.objective, &r->res, r->group_res, r->in.B,
                             ls_run_now_ns() - t_step, r->err, sizeof r->err);
    ls_trace_writer_set_prefix_frozen(w, 0);
    /* a step whose record could not be written whole is not checkpointed: the run stops */
    if (st != LS_OK) return fail_event(r, 1, st, "");
    if (r->ob.emit_err != LS_OK) return fail_trace(r, 1);
    if (a->save_every && (s + 1 - r->step0) % a->save_every == 0 && save_checkpoint(r, s + 1) != LS_OK) return 1;
    return 0;
}

/* The receipt's rank_state: the shard, its prompt-state bytes, the traffic. */
static cJSON *rank_state_json(const run *r) {
    const ls_step_result *res = &r->res;
    int cp = res->cp_world > 1;
    int64_t b = cp ? res->shard_begin : 0, e = cp ? res->shard_end : (r->in.P > 0 ? (int64_t)r->in.P - 1 : 0);
    cJSON *o = cJSON_CreateObject(), *pos = cJSON_AddArrayToObject(o, "prompt_positions");
    cJSON *c = cJSON_CreateObject(), *by = cJSON_AddArrayToObject(c, "by_purpose");
    if (!o || !pos || !c || !by) {
        cJSON_Delete(o);
        cJSON_Delete(c);
        return NULL;
    }
    ls_json_add_u64(o, "world", (uint64_t)r->world);
    cJSON_AddItemToArray(pos, cJSON_CreateNumber((double)b));
    cJSON_AddItemToArray(pos, cJSON_CreateNumber((double)e));
    ls_json_add_u64(o, "prompt_state_bytes", res->prompt_state_bytes);
    ls_json_add_u64(o, "prompt_state_analytical_bytes", res->prompt_state_analytical);
    ls_json_add_u64(o, "grad_digest_disagreements", r->grad_disagreements);
    ls_comm_stat st[64];
    size_t n = ls_comm_stats(r->comm, st, 64), calls = 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        cJSON *e1 = cJSON_CreateObject();
        cJSON_AddStringToObject(e1, "purpose", st[i].purpose);
        ls_json_add_u64(e1, "calls", st[i].calls);
        ls_json_add_u64(e1, "bytes_sent", st[i].bytes);
        cJSON_AddItemToArray(by, e1);
        calls += st[i].calls;
    }
    cJSON_AddStringToObject(c, "backend", ls_comm_backend(r->comm));
    ls_json_add_u64(c, "calls", calls);
    ls_json_add_u64(c, "bytes_sent", ls_comm_bytes_sent(r->comm));
    cJSON_AddItemToObject(o, "communication", c);
    /* the plan of the last step's shape (run_plan.h) beside what the tracker measured (memory.per_step) */
    cJSON *pl = cJSON_AddObjectToObject(o, "memory_plan");
    if (pl) {
        ls_json_add_u64(pl, "peak_bytes", r->plan.peak_total);
        cJSON_AddStringToObject(pl, "peak_phase", ls_plan_phase_name(r->plan.peak_phase));
        ls_json_add_u64(pl, "budget_bytes", LS_K(ls_run_budget)(r->a));
        cJSON_AddStringToObject(pl, "reference", !res->used_reference ? "none"
                                                 : res->reference_kept ? "kept" : "recaptured");
        ls_json_add_u64(pl, "captures", (uint64_t)res->captures);
    }
    return o;
}

/* Trace end, this rank's receipt, then (every rank done) rank 0's manifest;
 * the summary when everything worked.  After a failure inside a step's
 * collectives only the receipt: the caller aborts the job. */
static int close_run(run *r, int rc, uint64_t start_unix) {
    if (r->ob.emit_err != LS_OK && !r->trace_reported) { /* the receipt keeps an earlier failure's message */
        if (rc == 0) rc = fail_trace(r, 1);
        else fprintf(stderr, "longstraw-train: trace: %s\n", r->ob.emit_msg);
    }
    int64_t n_events = ls_trace_writer_seq(r->ob.w);
    if (rc == 0) ls_run_obs_note(&r->ob, ls_trace_emit_rank_complete(r->ob.w, (int64_t)r->steps_done)), n_events++;
    ls_comm_set_trace(r->comm, NULL);
    ls_status st = ls_trace_writer_close(r->ob.w);
    r->ob.w = NULL;
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: %s: closing the trace failed: %s\n", r->trace_path, ls_status_str(st));
        rc = rc ? rc : 1;
    }
    if (r->steps_begun > r->sp.steps) ls_run_peaks_fold(&r->sp, (int64_t)r->steps_begun - 1);
    if ((st = ls_run_input_digest(&r->in, &r->inputs.rollouts, r->inputs.rollouts_sha256, &r->inputs.rollouts_bytes)) !=
        LS_OK) { /* what the run consumed: complete now */
        fprintf(stderr, "longstraw-train: --rollouts: cannot digest the bytes read: %s\n", ls_status_str(st));
        rc = rc ? rc : 1;
    }
    cJSON *rs = rank_state_json(r);
    ls_run_outcome oc = {.run_id = r->run_id, .events_rel = r->events_rel, .ok = rc == 0,
                         .rank = (uint32_t)r->rank, .world = (uint32_t)r->world, .rank_state = rs,
                         .fail_st = r->fail_st ? r->fail_st : LS_ERR_INTERNAL, .error_message = r->err,
                         .steps_done = r->steps_done, .prefix_frozen_steps = r->frozen_steps,
                         .sft_steps = r->sft_steps, .frozen_idx = r->frozen_idx,
                         .n_events = n_events, .start_unix_ns = start_unix, .sp = &r->sp, .ob = &r->ob,
                         .first_step = r->step0, .inputs = &r->inputs};
    if (ls_run_write_receipt(r->a, &oc) != 0) rc = rc ? rc : 1;
    cJSON_Delete(rs);
    if (r->in_step_failure) return rc;
    if (r->world > 1 && ls_group_barrier(ls_comm_all(r->comm), "run_end") != LS_OK) {
        fprintf(stderr, "longstraw-train: rank %d: %s\n", r->rank, ls_comm_last_error(r->comm));
        return rc ? rc : 1;
    }
    if (r->rank == 0 && ls_run_write_manifest(r->a, r->run_id, (uint32_t)r->world, r->step0, &r->inputs) != 0)
        rc = rc ? rc : 1;
    if (rc == 0 && r->rank == 0)
        ls_run_print_summary(r->a, &oc, &r->res, LS_REAL_NAME, r->in.P, r->in.b ? r->in.b->G : r->a->step.G);
    if (rc == 0 && r->rank == 0) ls_run_probe_print(&r->probes, stdout);
    return rc;
}

/* A CP fault given that the config's family does not list among its cp_faults (family_desc.h), in buf;
 * NULL when none. */
static const char *cp_fault_family(const ls_train_args *a, char *buf, size_t len) {
    const struct {
        int on;
        const char *name;
    } given[] = {{a->step.cp_faults.local_attention, "cp-local-attention"},
                 {a->step.cp_faults.local_dsa, "cp-local-dsa"},
                 {a->step.cp_faults.stale_start, "cp-stale-start"}};
    const ls_family_desc *f = a->cfg.family;
    for (size_t i = 0; i < sizeof given / sizeof *given; i++) {
        if (!given[i].on || ls_family_has_cp_fault(f, given[i].name)) continue;
        size_t at = (size_t)snprintf(buf, len, "--fault %s: does not apply to family '%s' (its CP faults:", given[i].name,
                                     f->name);
        for (const char *const *p = f->cp_faults; p && *p && at < len; p++)
            at += (size_t)snprintf(buf + at, len - at, " %s", *p);
        if (at < len) at += (size_t)snprintf(buf + at, len - at, "%s", f->cp_faults && *f->cp_faults ? "" : " none");
        for (size_t k = 0; k < ls_family_count() && at < len; k++)
            if (ls_family_has_cp_fault(ls_family_at(k), given[i].name))
                at += (size_t)snprintf(buf + at, len - at, "; family '%s' has it", ls_family_at(k)->name);
        if (at < len) snprintf(buf + at, len - at, ")");
        return buf;
    }
    return NULL;
}

/* What a multi-rank run cannot do (the same verdict on every rank). */
static int cp_usage(run *r) {
    const ls_train_args *a = r->a;
    const char *why = NULL;
    char why_buf[256];
    if (r->world < 2) return 0;
    if (a->step.strategy == LS_STRATEGY_NAIVE) why = "--strategy naive is the single-rank reference: run it without mpirun";
    else if (a->prefix_frozen > 1) why = "--prefix-frozen runs on one rank: run it without mpirun";
    else if (a->grad_cosine_every > 0)
        why = "--grad-cosine-every runs on one rank (the measurement does not reduce its second gradient across "
              "ranks): run it without mpirun";
    else if ((why = cp_fault_family(a, why_buf, sizeof why_buf)) != NULL) {
    }
    else if (a->rollouts && !strcmp(a->rollouts, "-")) why = "--rollouts -: under mpirun only rank 0 has standard input; give a file";
    if (!why) return 0;
    return r->rank == 0 ? fail(r, 2, LS_ERR_ARG, "", why) : 2;
}

int LS_K(ls_train_run)(const ls_train_args *a) {
    run r = {.a = a, .sp = {.total_at = -1}, .seed = a->step.seed, .comm = a->comm, .probes = {.first_fail_step = -1}};
    ls_comm *own_comm = NULL;
    if (!r.comm) { /* a caller without main's communicator: one rank */
        char cerr[256];
        if (ls_comm_open(&own_comm, NULL, NULL, cerr, sizeof cerr) != LS_OK) return fail(&r, 2, LS_ERR_ARG, "", cerr);
        r.comm = own_comm;
    }
    LS_K(ls_stage_set_fault_skip_page)(a->step.fault_stage_skip_page); /* recorded in config.faults */
    r.rank = ls_comm_rank(r.comm);
    r.world = ls_comm_world(r.comm);
    r.cp_world = r.world;
    if (a->ep > 1) { /* the CP x EP grid (comm.h), before any collective */
        char gerr[256];
        if (ls_comm_grid(r.comm, a->ep, gerr, sizeof gerr) != LS_OK) {
            int grc = r.rank == 0 ? fail(&r, 2, LS_ERR_ARG, "", gerr) : 2;
            if (own_comm) ls_comm_close(own_comm);
            return grc;
        }
        r.cp_world = ls_group_size(ls_comm_cp(r.comm));
        r.ep = (ls_ep){.g = ls_comm_ep(r.comm), .rank = ls_group_rank(ls_comm_ep(r.comm)),
                       .size = ls_group_size(ls_comm_ep(r.comm)), .drop_dx = a->step.cp_faults.ep_drop_dx};
    }
    uint64_t start_unix = (uint64_t)time(NULL) * 1000000000ull;
    snprintf(r.run_id, sizeof r.run_id, "run-%llx-%x-%llu", (unsigned long long)time(NULL), (unsigned)getpid(),
             (unsigned long long)a->step.seed);
    int rc = 0;
    if (r.world > 1 && ls_group_broadcast(ls_comm_all(r.comm), r.run_id, sizeof r.run_id, LS_TRACE_DTYPE_U8, 0,
                                          "run_id", -1) != LS_OK) /* one run id for every rank */
        rc = fail(&r, 1, LS_ERR_IO, "", ls_comm_last_error(r.comm));
    if (rc == 0) rc = cp_usage(&r);
    if (rc != 0) goto done;
    /* the inputs first: an external rollouts file sets P and R */
    rc = ls_run_input_open(&r.in, a, r.err, sizeof r.err) == LS_OK ? 0 : fail(&r, 2, LS_ERR_FORMAT, "--rollouts: ", r.err);
    rc = agree_rc(&r, rc, "open_input");
    if (rc == 0) rc = agree_rc(&r, open_params(&r), "open_params");
    if (rc == 0 && r.ep.g) LS_K(ls_ep_set)(&r.ep); /* EP: the MoE runs the experts this rank holds */
    if (rc == 0) rc = agree_rc(&r, note_inputs(&r), "note_inputs");
    if (rc == 0) rc = open_outputs(&r);
    if (rc != 0) {
        if (r.ob.w) rc = close_run(&r, rc, start_unix);
        goto done;
    }
    if (r.in.B > 1 && !(r.group_res = ls_mem_alloc(LS_MEM_SCRATCH, r.in.B * sizeof *r.group_res))) {
        rc = fail(&r, 1, LS_ERR_NOMEM, "", "no memory for the step's group results");
        rc = close_run(&r, rc, start_unix);
        goto done;
    }
    int64_t n = ls_run_input_steps(&r.in, a); /* -1: until the rollouts stream ends */
    r.ob.steps_total = n < 0 ? -1 : r.step0 + n;
    for (int64_t i = 0; rc == 0 && (n < 0 || i < n); i++) {
        int end = 0;
        rc = next_input(&r, r.step0 + i, a->have_steps ? n : -1, &end);
        if (rc == 0 && !end) rc = one_step(&r, r.step0 + i, i == 0);
        if (r.in_step_failure) break;
        rc = agree_rc(&r, rc, "step_status"); /* every rank stops at the same step */
        if (rc != 0 || end) break;
    }
    if (!r.in_step_failure) {
        if (rc == 0 && a->save && save_checkpoint(&r, r.step0 + (int64_t)r.steps_done) != LS_OK) rc = 1;
        char cerr[1200]; /* the metrics file complete before it is drawn and digested */
        if (ls_run_metrics_close(&r.ms, cerr, sizeof cerr) != LS_OK) {
            if (rc == 0) {
                snprintf(r.err, sizeof r.err, "--metrics: %s", cerr);
                rc = fail_event(&r, 1, LS_ERR_IO, "");
            } else {
                fprintf(stderr, "longstraw-train: --metrics: %s\n", cerr);
            }
        }
        rc = agree_rc(&r, rc, "save_status");
    }
    if (rc == 0 && a->plot && r.rank == 0) {
        char title[256];
        snprintf(title, sizeof title, "%.100s, P=%zu, G=%zu: reward and KL per step", a->config_path, r.in.P, r.in.G);
        ls_status st = ls_run_metrics_plot(a->metrics, a->plot, !a->rollouts, title, r.err, sizeof r.err);
        if (st != LS_OK) rc = fail_event(&r, 1, st, "--plot: ");
    }
    rc = close_run(&r, rc, start_unix);
    if (r.in_step_failure) /* a rank failed inside a step: end every rank of the job, never a hang */
        ls_comm_abort(r.comm, rc ? rc : 1);
done:
    LS_K(ls_ep_set)(NULL);
    ls_run_metrics_close(&r.ms, NULL, 0); /* after a failure: its own failure is moot */
    ls_mem_free(r.frozen_idx);
    ls_mem_free(r.group_res);
    LS_K(ls_step_prefix_free)(&r.pf);
    ls_run_input_close(&r.in);
    LS_K(ls_params_free)(r.p);
    if (own_comm) ls_comm_close(own_comm);
    return rc;
}
