/* test_train_cp.c - longstraw-train under `mpirun -np N` as a user runs it:
 * the run directory (one rank-NNNN per rank, rank 0's manifest over every
 * rank's files, verified), per-rank receipts with the shard's prompt-state
 * bytes equal to the analytical figure, the collectives of every rank
 * matched one to one (group, gseq, op, reduction, count, dtype, purpose),
 * parameter digests identical across ranks after every step, N = 1 under
 * mpirun identical to the single-rank backend, the fault flags recorded and
 * detected (digests apart), usage refused on every rank, and a rank killed
 * mid-replay ending the job in bounded time with every rank's trace
 * readable, and the step guard's verdict taken by every rank alike.  The
 * numerical CP checks are test_cp.c's. */
#include <time.h>

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("traincp")

/* longstraw-train under mpirun -np np; returns the exit status. */
static int run_np(int np, const char *args) { return run_np_to(np, "out.txt", "err.txt", 120, args); }

#define MAXC 4096
typedef struct {
    char key[160]; /* group gseq op red count dtype purpose */
} coll;
typedef struct {
    coll c[MAXC];
    size_t nc;
    char digest[64][80]; /* "step target hex" of the "trainable" digests */
    size_t nd;
    int errors, complete;
    int64_t last_replay_begin;
} trace_facts;

static int on_event(const ls_trace_event *ev, void *user) {
    trace_facts *f = user;
    const cJSON *j = ev->json;
    if (!strcmp(ev->ev, "collective") && f->nc < MAXC) {
        snprintf(f->c[f->nc++].key, sizeof f->c[0].key, "%s %d %s %s %d %s %s",
                 cJSON_GetObjectItem(j, "group")->valuestring, cJSON_GetObjectItem(j, "gseq")->valueint,
                 cJSON_GetObjectItem(j, "op")->valuestring, cJSON_GetObjectItem(j, "red")->valuestring,
                 cJSON_GetObjectItem(j, "count")->valueint, cJSON_GetObjectItem(j, "dtype")->valuestring,
                 cJSON_GetObjectItem(j, "purpose")->valuestring);
    } else if (!strcmp(ev->ev, "param_digest") && f->nd < 64 &&
               !strcmp(cJSON_GetObjectItem(j, "target")->valuestring, "trainable")) {
        snprintf(f->digest[f->nd++], sizeof f->digest[0], "%d %s", cJSON_GetObjectItem(j, "step")->valueint,
                 cJSON_GetObjectItem(j, "sha256")->valuestring);
    } else if (!strcmp(ev->ev, "error")) {
        f->errors++;
    } else if (!strcmp(ev->ev, "rank_complete")) {
        f->complete = 1;
    } else if (!strcmp(ev->ev, "phase_begin") && !strcmp(cJSON_GetObjectItem(j, "phase")->valuestring, "replay")) {
        f->last_replay_begin = ev->seq;
    }
    return 0;
}

static trace_facts *read_rank(const char *run, int r, ls_trace_end *end) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/rank-%04d/events.jsonl.zst", tmpdir, run, r);
    trace_facts *f = calloc(1, sizeof *f);
    f->last_replay_begin = -1;
    ls_trace_report rep;
    ls_trace_read_file(path, on_event, f, &rep);
    if (end) *end = rep.end;
    ls_trace_report_free(&rep);
    return f;
}

static void expect_manifest_ok(const char *run) {
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    ls_verify_report vr = {0};
    ls_status st = ls_manifest_verify(dir, &vr, err, sizeof err);
    cr_expect_eq(st, LS_OK, "%s: manifest verify: %s (%zu problem(s)%s%s)", run, err, vr.count,
                 vr.count ? ": " : "", vr.count ? vr.items[0].detail : "");
    ls_verify_report_free(&vr);
}

static ls_receipt *receipt_of(const char *run, int r) {
    char p[512], err[512];
    snprintf(p, sizeof p, "%s/%s/rank-%04d/receipt.json", tmpdir, run, r);
    ls_receipt *rc = NULL;
    cr_assert_eq(ls_receipt_read(p, &rc, err, sizeof err), LS_OK, "%s", err);
    return rc;
}

static const char *BASE = "--config " CFG " --prompt-len 67 --response-len 5 --group 2 --steps 2 --page-size 8 "
                          "--beta 0.04 --lora-init random --quiet";

Test(train_cp, ranks_match_and_digests_agree, .init = setup, .fini = teardown, .timeout = 300) {
    char args[2048];
    for (int np = 2; np <= 4; np += 2) {
        char run[32];
        snprintf(run, sizeof run, "full%d", np);
        snprintf(args, sizeof args, "%s --grad-mode full --dtype f64 --out %s/%s", BASE, tmpdir, run);
        int rc = run_np(np, args);
        char *e = slurp("err.txt");
        cr_assert_eq(rc, 0, "np %d: exit %d: %s", np, rc, e);
        free(e);
        expect_manifest_ok(run);
        trace_facts *f0 = read_rank(run, 0, NULL);
        cr_expect(f0->nc > 100, "np %d: only %zu collectives on rank 0", np, f0->nc);
        cr_expect_eq(f0->nd, 2, "np %d: %zu trainable digests on rank 0 (one per step)", np, f0->nd);
        for (int r = 1; r < np; r++) {
            trace_facts *f = read_rank(run, r, NULL);
            cr_expect(f->complete && !f->errors, "np %d rank %d: complete %d errors %d", np, r, f->complete, f->errors);
            cr_expect_eq(f->nc, f0->nc, "np %d rank %d: %zu collectives, rank 0 %zu", np, r, f->nc, f0->nc);
            for (size_t i = 0; i < f->nc && i < f0->nc; i++)
                if (strcmp(f->c[i].key, f0->c[i].key)) {
                    cr_expect(0, "np %d: collective %zu: rank %d '%s', rank 0 '%s'", np, i, r, f->c[i].key,
                              f0->c[i].key);
                    break;
                }
            cr_expect_eq(f->nd, f0->nd);
            for (size_t i = 0; i < f->nd && i < f0->nd; i++)
                cr_expect_str_eq(f->digest[i], f0->digest[i], "np %d: step digest %zu differs on rank %d", np, i, r);
            free(f);
        }
        /* each rank's shard and its prompt state, exactly the analytical figure */
        int64_t covered = 0;
        for (int r = 0; r < np; r++) {
            ls_receipt *rec = receipt_of(run, r);
            cr_expect_eq(rec->world, (uint32_t)np);
            const cJSON *rs = cJSON_GetObjectItem(cJSON_GetObjectItem(rec->priv_doc, "predicate"), "rank_state");
            cr_assert_not_null(rs, "rank %d: no rank_state", r);
            const cJSON *pos = cJSON_GetObjectItem(rs, "prompt_positions");
            int64_t b = (int64_t)cJSON_GetArrayItem(pos, 0)->valuedouble, en = (int64_t)cJSON_GetArrayItem(pos, 1)->valuedouble;
            cr_expect_eq(b, covered, "rank %d shard begins at %lld, want %lld", r, (long long)b, (long long)covered);
            covered = en;
            cr_expect_eq(cJSON_GetObjectItem(rs, "prompt_state_bytes")->valuedouble,
                         cJSON_GetObjectItem(rs, "prompt_state_analytical_bytes")->valuedouble, "rank %d", r);
            cr_expect_eq(cJSON_GetObjectItem(rs, "grad_digest_disagreements")->valueint, 0, "rank %d", r);
            ls_receipt_free(rec);
        }
        cr_expect_eq(covered, 66, "the shards cover %lld of the 66 captured positions", (long long)covered);
        if (np == 2) { /* a rerun is bitwise the same run: fixed-order sums, no race */
            snprintf(args, sizeof args, "%s --grad-mode full --dtype f64 --out %s/rerun", BASE, tmpdir);
            cr_assert_eq(run_np(np, args), 0);
            for (int r = 0; r < np; r++) {
                trace_facts *a = read_rank(run, r, NULL), *b = read_rank("rerun", r, NULL);
                cr_expect(a->nd == 2 && b->nd == 2 && !strcmp(a->digest[0], b->digest[0]) &&
                              !strcmp(a->digest[1], b->digest[1]),
                          "rank %d: the rerun's parameter digests differ", r);
                free(a);
                free(b);
            }
        }
        free(f0);
    }
}

Test(train_cp, one_rank_under_mpirun_is_the_single_rank_run, .init = setup, .fini = teardown, .timeout = 300) {
    char args[2048];
    snprintf(args, sizeof args, "%s --grad-mode full --out %s/mpi1", BASE, tmpdir);
    cr_assert_eq(run_np(1, args), 0);
    char cmd[4096]; /* the same thread count as under mpirun: BLAS sums depend on it */
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s %s --grad-mode full --out %s/single >%s/out.txt 2>%s/err.txt", TRAIN,
             BASE, tmpdir, tmpdir, tmpdir);
    cr_assert_eq(system(cmd), 0);
    trace_facts *a = read_rank("mpi1", 0, NULL), *b = read_rank("single", 0, NULL);
    cr_assert_eq(a->nd, 2);
    cr_assert_eq(b->nd, 2);
    for (size_t i = 0; i < 2; i++) cr_expect_str_eq(a->digest[i], b->digest[i], "step %zu digest", i);
    cr_expect_eq(a->nc, 0, "one rank under mpirun has no cross-rank collectives (%zu)", a->nc);
    free(a);
    free(b);
}

Test(train_cp, faults_recorded_and_detected, .init = setup, .fini = teardown, .timeout = 300) {
    const char *faults[] = {"skip-dkv-reduce", "skip-grad-finalize", "cp-local-attention"};
    char args[2048];
    for (int k = 0; k < 3; k++) {
        char run[32];
        snprintf(run, sizeof run, "fault%d", k);
        snprintf(args, sizeof args, "%s --grad-mode full --dtype f64 --fault %s --out %s/%s", BASE, faults[k], tmpdir,
                 run);
        cr_assert_eq(run_np(2, args), 0, "%s: the run completes (the fault is silent to the trainer)", faults[k]);
        expect_manifest_ok(run);
        ls_receipt *rec = receipt_of(run, 1);
        const cJSON *fl = cJSON_GetObjectItem(rec->config, "faults");
        cr_expect(fl && cJSON_GetArraySize(fl) == 1 && !strcmp(cJSON_GetArrayItem(fl, 0)->valuestring, faults[k]),
                  "%s: the receipt's config names the fault", faults[k]);
        const cJSON *rs = cJSON_GetObjectItem(cJSON_GetObjectItem(rec->priv_doc, "predicate"), "rank_state");
        cr_expect_gt(cJSON_GetObjectItem(rs, "grad_digest_disagreements")->valueint, 0,
                     "%s: the finalize digest check sees the ranks apart", faults[k]);
        ls_receipt_free(rec);
        trace_facts *f0 = read_rank(run, 0, NULL), *f1 = read_rank(run, 1, NULL);
        cr_expect(f0->nd == 2 && f1->nd == 2 && strcmp(f0->digest[1], f1->digest[1]),
                  "%s: the parameter digests differ across ranks", faults[k]);
        free(f0);
        free(f1);
    }
}

Test(train_cp, usage_refused_on_every_rank, .init = setup, .fini = teardown, .timeout = 120) {
    char args[2048];
    snprintf(args, sizeof args, "%s --strategy naive --out %s/naive", BASE, tmpdir);
    cr_expect_eq(run_np(2, args), 2);
    char *e = slurp("err.txt");
    cr_expect(strstr(e, "--strategy naive") != NULL, "%s", e);
    free(e);
    snprintf(args, sizeof args, "%s --prompt-len 64 --response-len 5 --out %s/x --bogus", BASE, tmpdir);
    cr_expect_eq(run_np(2, args), 2);
}

Test(train_cp, killed_rank_ends_the_job, .init = setup, .fini = teardown, .timeout = 300) {
    char args[2048];
    snprintf(args, sizeof args, "%s --fault kill-rank=1 --out %s/kill", BASE, tmpdir);
    time_t t0 = time(NULL);
    int rc = run_np(2, args);
    time_t dt = time(NULL) - t0;
    cr_expect_neq(rc, 0, "the job must fail");
    cr_expect_neq(rc, 124, "the job hung until timeout killed it");
    cr_expect_lt(dt, 60, "the job took %lld s to end", (long long)dt);
    for (int r = 0; r < 2; r++) {
        ls_trace_end end;
        trace_facts *f = read_rank("kill", r, &end);
        cr_expect(end == LS_TRACE_END_INCOMPLETE || end == LS_TRACE_END_TRUNCATED,
                  "rank %d: trace end %s (a readable prefix without rank_complete)", r, ls_trace_end_name(end));
        cr_expect(!f->complete, "rank %d completed?", r);
        if (r == 1) cr_expect_geq(f->last_replay_begin, 0, "rank 1's trace shows the replay it died in");
        free(f);
    }
}

/* The step guard under CP: step 2's rewards overflow their spread; every
 * rank refuses the step (none updates, none waits in a collective), every
 * rank's trace has the error event and one step's digests, every receipt
 * says error, and the job ends cleanly with its manifest. */
Test(train_cp, step_guard_agreed_on_every_rank, .init = setup, .fini = teardown, .timeout = 300) {
    char path[300], args[2048];
    snprintf(path, sizeof path, "%s/guard.jsonl", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("{\"prompt\":[10,20,30,40,50,60,70,80,90,100,110,120],\"responses\":[[1,2],[3,4,5]],"
          "\"rewards\":[1,0]}\n"
          "{\"prompt\":[10,20,30,40,50,60,70,80,90,100,110,120],\"responses\":[[1,2],[3,4],[5,6],[7,8]],"
          "\"rewards\":[1e308,-1e308,1e308,-1e308]}\n",
          f);
    fclose(f);
    snprintf(args, sizeof args, "--config %s --dtype f64 --rollouts %s --page-size 8 --quiet --out %s/guard", CFG,
             path, tmpdir);
    time_t t0 = time(NULL);
    int rc = run_np(2, args);
    cr_expect_neq(rc, 0, "the job must fail");
    cr_expect_neq(rc, 124, "the job hung until timeout killed it");
    cr_expect_lt(time(NULL) - t0, 60);
    char *e = slurp("err.txt");
    cr_expect(strstr(e, "step 2: reward_std is inf") != NULL, "%s", e);
    free(e);
    expect_manifest_ok("guard");
    for (int r = 0; r < 2; r++) {
        trace_facts *t = read_rank("guard", r, NULL);
        cr_expect_eq(t->errors, 1, "rank %d: %d error events", r, t->errors);
        cr_expect_eq(t->nd, 1, "rank %d: %zu trainable digests (only step 1 updates)", r, t->nd);
        free(t);
        ls_receipt *rec = receipt_of("guard", r);
        cr_expect_eq(rec->status, LS_RECEIPT_ERROR, "rank %d", r);
        cr_expect_eq(rec->steps, 1, "rank %d", r);
        ls_receipt_free(rec);
    }
}
