/* test_train_loop.c - longstraw-train as a trainer (issue 8): 2N steps equal
 * N steps, a checkpoint and N resumed steps, bit for bit (the checkpoint
 * files byte for byte and the trainable-parameter digests of the trace); a
 * checkpoint of another config is refused naming the key; rollouts one group
 * per line (the step count is the line count, a bad line stops the run before
 * its step and leaves the earlier steps' metrics and checkpoint valid, standard
 * input streams); per-step metrics agree with the trace; beta 0 skips the
 * reference; prefix-frozen steps are marked in every event and counted in
 * the receipt; the step guard stops a step whose figures overflow (rewards,
 * the KL to supplied reference log-probs) before its update and checkpoint;
 * an output that cannot be written whole (a file-size limit, a path that is
 * a directory) fails the run naming the file and leaves no partial line or
 * file. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>

#include "receipts/format/trace_step_metrics.h"
#include "trainer/run/run_metrics.h"

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("loop")

TestSuite(train_loop, .init = setup, .fini = teardown, .timeout = 300);

/* What a trace says per step. */
typedef struct {
    char digest[64][65];       /* "trainable" param_digest by step (< 64) */
    int optimizer, metrics, captures, frozen_events, exact_events_of_frozen_steps;
    int frozen_step[64];       /* 1: the step's step_metrics says prefix_frozen */
    int64_t last_step;
    int errors;                /* error events, the last one's message */
    char error[512];
} steps_seen;

static int on_event(const ls_trace_event *ev, void *user) {
    steps_seen *s = user;
    const cJSON *j = ev->json, *st = cJSON_GetObjectItem(j, "step");
    int64_t step = cJSON_IsNumber(st) ? (int64_t)st->valuedouble : -1;
    if (!strcmp(ev->ev, "param_digest") && !strcmp(cJSON_GetObjectItem(j, "target")->valuestring, "trainable") &&
        step >= 0 && step < 64)
        snprintf(s->digest[step], 65, "%s", cJSON_GetObjectItem(j, "sha256")->valuestring);
    if (!strcmp(ev->ev, "optimizer_step")) s->optimizer++;
    if (!strcmp(ev->ev, "phase_begin") && !strcmp(cJSON_GetObjectItem(j, "phase")->valuestring, "capture"))
        s->captures++;
    if (!strcmp(ev->ev, "step_metrics")) {
        s->metrics++;
        if (step >= 0 && step < 64) s->frozen_step[step] = ev->prefix_frozen;
    }
    if (!strcmp(ev->ev, "error") && ++s->errors)
        snprintf(s->error, sizeof s->error, "%s", cJSON_GetObjectItem(j, "message")->valuestring);
    if (ev->prefix_frozen) s->frozen_events++;
    if (step > s->last_step) s->last_step = step;
    return 0;
}

static void read_steps(const char *run_dir, steps_seen *s) {
    char p[512];
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", run_dir);
    memset(s, 0, sizeof *s);
    s->last_step = -1;
    ls_trace_report rep = {0};
    ls_status st = ls_trace_read_file(p, on_event, s, &rep);
    /* a run that stopped on a bad input ends without rank_complete: the reader says so */
    cr_assert(st == LS_OK || rep.end != LS_TRACE_END_CLEAN, "%s: %s", p, ls_status_str(st));
    cr_assert_eq(rep.n_diags, rep.saw_rank_complete ? 0 : 1, "%s: %zu diagnostics, first: %s", p, (size_t)rep.n_diags,
                 rep.n_diags ? rep.diags[0].message : "");
    ls_trace_report_free(&rep);
}

/* Every event of a frozen step carries the mark; no event of another step
 * does.  Checked in a second pass once the frozen steps are known. */
typedef struct {
    const int *frozen;
    int wrong;
    char first[160];
} mark_check;

static int on_mark(const ls_trace_event *ev, void *user) {
    mark_check *m = user;
    const cJSON *st = cJSON_GetObjectItem(ev->json, "step");
    if (!cJSON_IsNumber(st) || strcmp(ev->ev, "collective") == 0) return 0;
    int64_t step = (int64_t)st->valuedouble;
    if (step < 0 || step >= 64) return 0;
    if (ev->prefix_frozen != (m->frozen[step] != 0) && m->wrong++ == 0)
        snprintf(m->first, sizeof m->first, "%s of step %lld marked %d", ev->ev, (long long)step, ev->prefix_frozen);
    return 0;
}

static int files_equal(const char *a, const char *b) {
    char *x = NULL, *y = NULL, err[256];
    size_t nx = 0, ny = 0;
    cr_assert_eq(ls_json_read_bytes_capped(a, 64 << 20, &x, &nx, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_json_read_bytes_capped(b, 64 << 20, &y, &ny, err, sizeof err), LS_OK, "%s", err);
    int eq = nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return eq;
}

#define COMMON "--config " CFG " --prompt-len 96 --response-len 5 --group 3 --train-mode full --lr 0.01 --quiet"

Test(train_loop, resume_continues_bit_for_bit) {
    char a[2048], ra[300], rb[300], rc_[300], ca[300], cb[300], cc[300], cd[300], rd[300];
    snprintf(ra, sizeof ra, "%s/a", tmpdir);
    snprintf(rb, sizeof rb, "%s/b", tmpdir);
    snprintf(rc_, sizeof rc_, "%s/c", tmpdir);
    snprintf(rd, sizeof rd, "%s/d", tmpdir);
    snprintf(ca, sizeof ca, "%s/a.safetensors", tmpdir);
    snprintf(cb, sizeof cb, "%s/b.safetensors", tmpdir);
    snprintf(cc, sizeof cc, "%s/c.safetensors", tmpdir);
    snprintf(cd, sizeof cd, "%s/d.safetensors", tmpdir);
    /* A: 4 steps.  B: 2 steps, saved.  C: B resumed for 2 more.  D: 4 steps saving every 2 */
    snprintf(a, sizeof a, COMMON " --steps 4 --out %s --save %s", ra, ca);
    cr_assert_eq(run(a), 0, "A: %s", slurp("err.txt"));
    snprintf(a, sizeof a, COMMON " --steps 2 --out %s --save %s", rb, cb);
    cr_assert_eq(run(a), 0, "B: %s", slurp("err.txt"));
    snprintf(a, sizeof a, COMMON " --steps 2 --out %s --resume %s --save %s", rc_, cb, cc);
    cr_assert_eq(run(a), 0, "C: %s", slurp("err.txt"));
    cr_expect(files_equal(ca, cc), "4 steps and 2 + 2 resumed steps give different checkpoints");
    steps_seen A, C;
    read_steps(ra, &A);
    read_steps(rc_, &C);
    cr_expect_eq(C.optimizer, 2);
    cr_expect_eq(C.last_step, 3, "the resumed run numbers its steps on from the checkpoint's");
    for (int s = 2; s < 4; s++)
        cr_expect_str_eq(A.digest[s], C.digest[s], "step %d: trainable digest %s vs resumed %s", s, A.digest[s],
                         C.digest[s]);
    cr_expect_str_neq(A.digest[1], A.digest[3], "the parameters moved");
    /* --save-every 2 rewrites the checkpoint after steps 2 and 4: it ends equal to A's */
    snprintf(a, sizeof a, COMMON " --steps 4 --out %s --save %s --save-every 2", rd, cd);
    cr_assert_eq(run(a), 0, "D: %s", slurp("err.txt"));
    cr_expect(files_equal(ca, cd));
    ls_receipt *r = read_receipt(rc_);
    cr_expect_eq(r->steps, 2);
    ls_receipt_free(r);
    /* a checkpoint of another config or objective is refused, naming the first mismatch */
    char cfg2[300];
    snprintf(cfg2, sizeof cfg2, "%s/wide.json", tmpdir);
    FILE *f = fopen(cfg2, "w");
    fputs("{\"family\":\"hybrid\",\"vocab\":256,\"d_model\":96,\"n_layers\":8,\"ffn_dim\":128,\"rms_eps\":1e-6,"
          "\"rope_theta\":10000,\"gdn_hk\":2,\"gdn_hv\":4,\"gdn_dk\":16,\"gdn_dv\":16,\"conv_kernel\":4,"
          "\"attn_heads\":4,\"attn_kv_heads\":2,\"head_dim\":32,\"rope_dim\":8}",
          f);
    fclose(f);
    snprintf(a, sizeof a, "--config %s --prompt-len 96 --train-mode full --out %s/e --resume %s --quiet", cfg2, tmpdir,
             cb);
    expect_usage_error(a, "d_model");
    snprintf(a, sizeof a, "--config %s --prompt-len 96 --train-mode lora --out %s/e2 --resume %s --quiet", CFG, tmpdir,
             cb);
    expect_usage_error(a, "train_mode");
    /* the weights-only --save-init file is for --load, not --resume */
    char init[300];
    snprintf(init, sizeof init, "%s/init.safetensors", tmpdir);
    snprintf(a, sizeof a, COMMON " --out %s/e3 --save-init %s", tmpdir, init);
    cr_assert_eq(run(a), 0);
    snprintf(a, sizeof a, COMMON " --out %s/e4 --resume %s", tmpdir, init);
    expect_usage_error(a, "--load");
    snprintf(a, sizeof a, COMMON " --out %s/e5 --resume %s --load %s", tmpdir, cb, init);
    expect_usage_error(a, "--load");
    /* --load takes a checkpoint's weights (a new run: fresh moments, the weights as reference) */
    snprintf(a, sizeof a, COMMON " --out %s/e7 --load %s --save-init %s/e7.safetensors", tmpdir, cb, tmpdir);
    cr_expect_eq(run(a), 0, "--load of a checkpoint: %s", slurp("err.txt"));
    snprintf(a, sizeof a, COMMON " --out %s/e6 --save-every 2", tmpdir);
    expect_usage_error(a, "--save-every");
    /* hostile --load files: a device, a sparse file far larger than any checkpoint of the model */
    snprintf(a, sizeof a, COMMON " --out %s/e9 --load /dev/zero", tmpdir);
    expect_usage_error(a, "/dev/zero");
    char big[300];
    snprintf(big, sizeof big, "%s/big.safetensors", tmpdir);
    FILE *bf = fopen(big, "w");
    cr_assert(bf && fseek(bf, 200L << 20, SEEK_SET) == 0 && fputc(0, bf) != EOF);
    fclose(bf);
    snprintf(a, sizeof a, COMMON " --out %s/e10 --load %s", tmpdir, big);
    expect_usage_error(a, "more than any checkpoint");
    /* a checkpoint that could not be written is refused before the steps, not after them */
    snprintf(a, sizeof a, COMMON " --out %s/e8 --save %s/no/such/dir/c.safetensors", tmpdir, tmpdir);
    expect_usage_error(a, "--save");
}

/* Three groups, each its own prompt and lengths; the second supplies
 * off-policy old log-probs (ratio != 1), the third reference log-probs. */
static const char *LINES[3] = {
    "{\"prompt\":[10,20,30,40,50,60,70,80],\"responses\":[[1,2,3],[4,5],[6,7,8,9]],\"rewards\":[1,0,0.5]}\n",
    "{\"prompt\":[11,21,31,41,51,61],\"responses\":[[9,9],[8,8]],\"rewards\":[0,1],"
    "\"old_logprobs\":[[-4,-4],[-7,-7]]}\n",
    "{\"prompt\":[5,6,7,8,9,10,11,12,13,14],\"responses\":[[3,3,3,3,3]],\"rewards\":[0.25],"
    "\"ref_logprobs\":[[-1,-1,-1,-1,-1]]}\n"};

static void write_lines(const char *path, int n, const char *bad) {
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) fputs(LINES[i], f);
    if (bad) fputs(bad, f);
    fclose(f);
}

/* The metrics file's lines, decoded (asserts each is a valid step_metrics object). */
static int read_metrics(const char *path, ls_trace_step_metrics *out, int cap) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s missing", path);
    char line[8192], err[512];
    ls_schema *sch = NULL;
    cr_assert_eq(ls_schema_load_file(LS_SOURCE_DIR "/schemas/metrics-line.schema.json", &sch, err, sizeof err), LS_OK,
                 "%s", err);
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        cJSON *j = cJSON_Parse(line);
        cr_assert(j, "metrics line %d is not JSON: %s", n + 1, line);
        ls_schema_errors es = {0};
        cr_expect_eq(ls_schema_validate(sch, j, &es), LS_OK, "metrics line %d against its schema (%zu errors): %s",
                     n + 1, es.count, line);
        ls_schema_errors_free(&es);
        cr_assert_eq(ls_trace_decode_step_metrics(j, &out[n]), LS_OK, "metrics line %d: %s", n + 1, line);
        cJSON_Delete(j);
        n++;
    }
    fclose(f);
    ls_schema_free(sch);
    return n;
}

Test(train_loop, rollouts_one_group_per_line) {
    char a[2048], path[300], rd[300], mp[300];
    snprintf(path, sizeof path, "%s/r.jsonl", tmpdir);
    snprintf(rd, sizeof rd, "%s/run", tmpdir);
    snprintf(mp, sizeof mp, "%s/m.jsonl", tmpdir);
    write_lines(path, 3, NULL);
    /* no --steps: one step per line */
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --metrics %s --quiet", CFG, path, rd, mp);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    ls_receipt *r = read_receipt(rd);
    cr_expect_eq(r->steps, 3);
    ls_receipt_free(r);
    ls_trace_step_metrics m[8];
    cr_assert_eq(read_metrics(mp, m, 8), 3);
    cr_expect(fabs(m[0].response_len_mean - 3) < 1e-12 && fabs(m[1].response_len_mean - 2) < 1e-12 &&
                  fabs(m[2].response_len_mean - 5) < 1e-12,
              "each step trains its own line: lengths %g %g %g", m[0].response_len_mean, m[1].response_len_mean,
              m[2].response_len_mean);
    cr_expect(m[0].ratio_min == 1 && m[0].ratio_max == 1, "line 1 is on-policy");
    cr_expect(m[1].ratio_max > 1.01 || m[1].ratio_min < 0.99, "line 2's old log-probs are used: ratio %g..%g",
              m[1].ratio_min, m[1].ratio_max);
    cr_expect_gt(m[2].kl_mean, 0, "line 3's reference log-probs are used");
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(m[i].step, i);
        cr_expect(fabs(m[i].loss - (m[i].loss_policy + m[i].loss_kl)) < 1e-6 * (1 + fabs(m[i].loss)));
        cr_expect(!m[i].has_reward_parts, "external rewards have no task parts");
    }
    steps_seen S;
    read_steps(rd, &S);
    cr_expect_eq(S.metrics, 3);
    /* a metrics file that exists is never overwritten */
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s/run1 --metrics %s --quiet", CFG, path, tmpdir, mp);
    expect_usage_error(a, "--metrics");
    /* standard input streams the same groups */
    snprintf(a, sizeof a, "--config %s --rollouts - --out %s/run2 --quiet < %s", CFG, tmpdir, path);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    snprintf(rd, sizeof rd, "%s/run2", tmpdir);
    r = read_receipt(rd);
    cr_expect_eq(r->steps, 3);
    ls_receipt_free(r);
    /* --steps asks for more lines than there are: the run says so */
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s/run3 --steps 5 --quiet", CFG, path, tmpdir);
    expect_usage_error(a, "ended after");
}

Test(train_loop, bad_rollouts_line_stops_before_its_step) {
    char a[2048], path[300], rd[300], mp[300], ck[300];
    snprintf(path, sizeof path, "%s/r.jsonl", tmpdir);
    snprintf(rd, sizeof rd, "%s/run", tmpdir);
    snprintf(mp, sizeof mp, "%s/m.jsonl", tmpdir);
    snprintf(ck, sizeof ck, "%s/c.safetensors", tmpdir);
    write_lines(path, 2, "{\"prompt\":[1,2,3],\"responses\":[[4,5]],\"rewards\":[0],\"old_logprobs\":[[-1]]}\n");
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --metrics %s --save %s --save-every 1 --quiet", CFG,
             path, rd, mp, ck);
    int rc = run(a);
    char *e = slurp("err.txt");
    cr_expect_eq(rc, 2, "exit %d: %s", rc, e);
    cr_expect(strstr(e, "line 3") && strstr(e, "old_logprobs[0]"), "stderr names the line and field: %s", e);
    free(e);
    ls_receipt *r = read_receipt(rd);
    cr_expect_eq(r->status, LS_RECEIPT_ERROR);
    cr_expect_eq(r->steps, 2, "the two good steps completed");
    ls_receipt_free(r);
    ls_trace_step_metrics m[8];
    cr_expect_eq(read_metrics(mp, m, 8), 2);
    steps_seen S;
    read_steps(rd, &S);
    cr_expect_eq(S.optimizer, 2, "no step began for line 3");
    /* the checkpoint of step 2 is whole: a run resumes from it */
    snprintf(a, sizeof a, "--config %s --rollouts %s --steps 1 --out %s/run2 --resume %s --quiet", CFG, path, tmpdir,
             ck);
    cr_expect_eq(run(a), 0, "%s", slurp("err.txt"));
}

/* The step guard.  A first group that trains, then one whose figures
 * overflow although every number on the line is finite: rewards whose spread
 * overflows (reward_std), or reference log-probs so far below the policy's
 * that the summed KL overflows (loss_kl). */
#define GUARD_PROMPT "\"prompt\":[10,20,30,40,50,60,70,80,90,100,110,120]"
static const char *BAD_REWARDS = "{" GUARD_PROMPT ",\"responses\":[[1,2],[3,4],[5,6],[7,8]],"
                                 "\"rewards\":[1e308,-1e308,1e308,-1e308]}\n";
static const char *BAD_KL = "{" GUARD_PROMPT ",\"responses\":[[1,2,3],[4,5]],\"rewards\":[1,0],"
                            "\"ref_logprobs\":[[-1.7e308,-1.7e308,-1],[-1,-1]]}\n";

/* The bad group as step 2 of a run that checkpoints every step: exit 1
 * naming the step and (want_field, unless NULL) the figure, the same in the
 * trace's error event and the receipt (status error); step 1's optimizer
 * step, metrics line and checkpoint only, that checkpoint byte for byte the
 * one of a run of step 1 alone (the failed step changed no parameter). */
static void expect_guarded(const char *tag, const char *bad, const char *dtype, const char *want_field) {
    char a[2048], path[300], rd[300], mp[300], ck[300], ref[300], refp[300];
    snprintf(path, sizeof path, "%s/g-%s-%s.jsonl", tmpdir, tag, dtype);
    snprintf(refp, sizeof refp, "%s/g1-%s-%s.jsonl", tmpdir, tag, dtype);
    snprintf(rd, sizeof rd, "%s/g-%s-%s", tmpdir, tag, dtype);
    snprintf(mp, sizeof mp, "%s/g-%s-%s.metrics.jsonl", tmpdir, tag, dtype);
    snprintf(ck, sizeof ck, "%s/g-%s-%s.safetensors", tmpdir, tag, dtype);
    snprintf(ref, sizeof ref, "%s/g1-%s-%s.safetensors", tmpdir, tag, dtype);
    write_lines(path, 1, bad);
    write_lines(refp, 1, NULL);
    snprintf(a, sizeof a, "--config %s --dtype %s --rollouts %s --out %s --metrics %s --save %s --save-every 1 --quiet",
             CFG, dtype, path, rd, mp, ck);
    int rc = run(a);
    char *e = slurp("err.txt");
    cr_expect_eq(rc, 1, "%s: exit %d: %s", dtype, rc, e);
    if (want_field) {
        char want[96];
        snprintf(want, sizeof want, "step 2: %s is ", want_field);
        cr_expect(strstr(e, want) && strstr(e, "no optimizer step"), "%s: stderr does not say '%s': %s", dtype, want, e);
    }
    free(e);
    steps_seen S;
    read_steps(rd, &S);
    cr_expect_eq(S.optimizer, 1, "%s: the bad step took an optimizer step", dtype);
    cr_expect_eq(S.metrics, 1);
    cr_expect_eq(S.digest[1][0], 0, "%s: parameter digests after the bad step", dtype);
    /* float32 also reports each non-finite activation norm of the bad step on its way */
    cr_expect(want_field ? S.errors == 1 : S.errors >= 1, "%s: %d error events", dtype, S.errors);
    cr_expect(strstr(S.error, "no optimizer step"), "%s: the last error event: %s", dtype, S.error);
    if (want_field)
        cr_expect(strstr(S.error, want_field) && strstr(S.error, "step 2"), "%s: the error event: %s", dtype, S.error);
    ls_receipt *r = read_receipt(rd);
    cr_expect_eq(r->status, LS_RECEIPT_ERROR);
    cr_expect_eq(r->steps, 1);
    ls_receipt_free(r);
    ls_trace_step_metrics m[4];
    cr_expect_eq(read_metrics(mp, m, 4), 1, "%s: metrics lines", dtype);
    /* the checkpoint is step 1's: equal to a run of step 1 alone */
    char rd1[310];
    snprintf(rd1, sizeof rd1, "%s-step1", rd);
    snprintf(a, sizeof a, "--config %s --dtype %s --rollouts %s --out %s --save %s --quiet", CFG, dtype, refp, rd1, ref);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    cr_expect(files_equal(ck, ref), "%s: the checkpoint is not step 1's", dtype);
    steps_seen S1;
    read_steps(rd1, &S1);
    cr_expect_str_eq(S.digest[0], S1.digest[0], "%s: step 1's parameters differ from a run of step 1 alone", dtype);
}

Test(train_loop, step_guard_stops_overflowing_figures_before_the_update) {
    expect_guarded("rewards", BAD_REWARDS, "f64", "reward_std");
    expect_guarded("kl", BAD_KL, "f64", "loss_kl");
    /* float32 rounds these to inf before the loss: finalize's check stops the step the same way */
    expect_guarded("rewards", BAD_REWARDS, "f32", NULL);
    /* a run of the bad group alone leaves no checkpoint at all */
    char a[2048], path[300], ck[300];
    snprintf(path, sizeof path, "%s/only-bad.jsonl", tmpdir);
    snprintf(ck, sizeof ck, "%s/only-bad.safetensors", tmpdir);
    FILE *f = fopen(path, "w");
    fputs(BAD_KL, f);
    fclose(f);
    snprintf(a, sizeof a, "--config %s --dtype f64 --rollouts %s --out %s/only-bad --save %s --save-every 1 --quiet",
             CFG, path, tmpdir, ck);
    cr_expect_eq(run(a), 1, "%s", slurp("err.txt"));
    FILE *c = fopen(ck, "rb");
    cr_expect_null(c, "a checkpoint of the bad step exists");
    if (c) fclose(c);
}

/* Rank 0's receipt names how the last step treated the reference and its captures (rank_state.memory_plan). */
static void expect_reference(const char *rd, const char *how, int captures) {
    char path[400];
    snprintf(path, sizeof path, "%s/rank-0000/receipt.json", rd);
    FILE *f = fopen(path, "rb");
    static char txt[1 << 20];
    size_t n = f ? fread(txt, 1, sizeof txt - 1, f) : 0;
    if (f) fclose(f);
    txt[n] = 0;
    cJSON *j = cJSON_Parse(txt);
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "predicate"), "rank_state"), "memory_plan");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(mp, "reference");
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(mp, "captures");
    cr_expect(cJSON_IsString(ref) && strcmp(ref->valuestring, how) == 0, "%s: memory_plan.reference is %s, not %s", path,
              cJSON_IsString(ref) ? ref->valuestring : "absent", how);
    cr_expect(cJSON_IsNumber(cap) && cap->valuedouble == captures, "%s: memory_plan.captures not %d", path, captures);
    cJSON_Delete(j);
}

Test(train_loop, beta_zero_skips_the_reference_and_metrics_match) {
    char a[2048], rd[300], mp[300];
    /* metrics and plot inside the run directory: written before the manifest, digested by it */
    snprintf(rd, sizeof rd, "%s/b0", tmpdir);
    snprintf(mp, sizeof mp, "%s/b0/metrics.jsonl", tmpdir);
    snprintf(a, sizeof a, COMMON " --steps 2 --beta 0 --out %s --metrics %s --plot %s/learning.svg", rd, mp, rd);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    char err[512], svg[320];
    ls_verify_report vr = {0};
    cr_expect_eq(ls_manifest_verify(rd, &vr, err, sizeof err), LS_OK, "%s: %zu problems, first %s", err, vr.count,
                 vr.count ? vr.items[0].name : "");
    ls_verify_report_free(&vr);
    snprintf(svg, sizeof svg, "%s/learning.svg", rd);
    FILE *sf = fopen(svg, "r");
    cr_assert(sf, "no plot at %s", svg);
    char head[64] = "";
    cr_expect(fgets(head, sizeof head, sf) && strstr(head, "<?xml"), "the plot is SVG: %s", head);
    fclose(sf);
    snprintf(a, sizeof a, COMMON " --out %s/x --plot %s/x.svg", tmpdir, tmpdir);
    expect_usage_error(a, "--plot");
    steps_seen S;
    read_steps(rd, &S);
    cr_expect_eq(S.captures, 2, "beta 0: one capture a step, no reference");
    ls_trace_step_metrics m[4];
    cr_assert_eq(read_metrics(mp, m, 4), 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(m[i].kl_mean, 0);
        cr_expect_eq(m[i].loss_kl, 0);
        cr_expect(m[i].has_reward_parts);
        cr_expect(fabs(m[i].reward_retrieval + m[i].reward_format - m[i].reward_mean) < 1e-12);
        cr_expect(m[i].tokens_per_s_mask & (1u << LS_PHASE_CAPTURE));
    }
    snprintf(rd, sizeof rd, "%s/b1", tmpdir);
    snprintf(a, sizeof a, COMMON " --steps 2 --out %s", rd);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    read_steps(rd, &S);
    cr_expect_eq(S.captures, 4, "beta > 0 with a rollout, two states fit: policy, reference beside it");
    expect_reference(rd, "kept", 2);
    snprintf(rd, sizeof rd, "%s/b2", tmpdir);
    snprintf(a, sizeof a, COMMON " --steps 2 --keep-reference off --out %s", rd);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    read_steps(rd, &S);
    cr_expect_eq(S.captures, 6, "--keep-reference off: policy, reference, policy again");
    expect_reference(rd, "recaptured", 3);
    snprintf(a, sizeof a, COMMON " --steps 1 --keep-reference sometimes --out %s/b3", tmpdir);
    expect_usage_error(a, "--keep-reference");
}

Test(train_loop, prefix_frozen_steps_are_marked_everywhere) {
    char a[2048], rd[300];
    snprintf(rd, sizeof rd, "%s/pf", tmpdir);
    snprintf(a, sizeof a, COMMON " --steps 8 --prefix-frozen 4 --beta 0 --out %s", rd);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    steps_seen S;
    read_steps(rd, &S);
    cr_expect_eq(S.captures, 2, "one capture per block of 4");
    int want[8] = {0, 1, 1, 1, 0, 1, 1, 1};
    for (int s = 0; s < 8; s++) cr_expect_eq(S.frozen_step[s], want[s], "step %d", s);
    mark_check mc = {.frozen = S.frozen_step};
    char p[512];
    snprintf(p, sizeof p, "%s/rank-0000/events.jsonl.zst", rd);
    ls_trace_report rep = {0};
    cr_assert_eq(ls_trace_read_file(p, on_mark, &mc, &rep), LS_OK);
    ls_trace_report_free(&rep);
    cr_expect_eq(mc.wrong, 0, "%d events with the wrong mark, first: %s", mc.wrong, mc.first);
    cr_expect_gt(S.frozen_events, 6 * 5, "every event of the frozen steps is marked");
    ls_receipt *r = read_receipt(rd);
    cr_expect_eq(r->steps, 8);
    cr_expect_eq(r->steps_exact, 2);
    cr_expect_eq(r->steps_prefix_frozen, 6);
    ls_receipt_free(r);
    /* refused where a stale state has no meaning */
    snprintf(a, sizeof a, COMMON " --prefix-frozen 2 --grad-mode full --out %s/x", tmpdir);
    expect_usage_error(a, "--prefix-frozen");
}

/* ---- outputs written whole or not at all ------------------------------ */

/* longstraw-train from a shell with a file-size limit of `bytes` (POSIX
 * ulimit -f counts 512-byte blocks) that ignores SIGXFSZ: a write past the
 * limit is cut short at it, the next one fails with EFBIG. */
static int run_limited(long bytes, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ulimit -f %ld && trap '' XFSZ && exec %s %s >%s/out.txt 2>%s/err.txt", bytes / 512,
             TRAIN, args, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The lines of a JSONL file, each asserted whole: newline-terminated and
 * parsing as JSON.  -1 when the file is missing. */
static int whole_json_lines(const char *path) {
    char *text = NULL, err[256];
    size_t n = 0;
    if (file_size(path) < 0) return -1;
    cr_assert_eq(ls_json_read_bytes_capped(path, 1 << 20, &text, &n, err, sizeof err), LS_OK, "%s", err);
    int lines = 0;
    for (size_t b = 0; b < n; lines++) {
        char *nl = memchr(text + b, '\n', n - b);
        cr_assert(nl, "%s: line %d has no newline (a partial line): %.*s", path, lines + 1, (int)(n - b), text + b);
        *nl = 0;
        cJSON *j = cJSON_Parse(text + b);
        cr_expect(j, "%s: line %d is not JSON: %s", path, lines + 1, text + b);
        cJSON_Delete(j);
        b = (size_t)(nl - text) + 1;
    }
    free(text);
    return lines;
}

/* A temporary file of an atomic write of base left in its directory. */
static int temp_left(const char *base) {
    char dir[300], prefix[300];
    snprintf(dir, sizeof dir, "%s", base);
    char *slash = strrchr(dir, '/');
    cr_assert(slash);
    snprintf(prefix, sizeof prefix, "%s.tmp.", slash + 1);
    *slash = 0;
    DIR *d = opendir(dir);
    cr_assert(d, "%s", dir);
    int found = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) found |= !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return found;
}

/* The metrics writer under a real file-size limit: whole lines go in; the
 * line that crosses the limit is cut short by the kernel, then refused
 * (EFBIG), and the file is truncated back to the lines before it and
 * closed; a line refused at its first byte leaves the file as it was. */
Test(train_loop, metrics_lines_are_whole_or_absent) {
    char path[300], err[1024];
    const char *line = "{\"step\":1234567890123}"; /* 22 bytes, 23 with its newline */
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    for (int k = 0; k < 2; k++) {
        /* the limit 10 bytes into the third line, or exactly at its start */
        rlim_t limit = k == 0 ? 2 * 23 + 10 : 2 * 23;
        snprintf(path, sizeof path, "%s/whole%d.jsonl", tmpdir, k);
        ls_run_metrics_sink m = {0};
        cr_assert_eq(ls_run_metrics_open(&m, path, err, sizeof err), LS_OK, "%s", err);
        lim = old;
        lim.rlim_cur = limit;
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
        ls_status st[3];
        for (int i = 0; i < 3; i++) st[i] = ls_run_metrics_append(&m, line, strlen(line), err, sizeof err);
        ls_status after = ls_run_metrics_append(&m, line, strlen(line), err + 512, sizeof err - 512);
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
        cr_expect(st[0] == LS_OK && st[1] == LS_OK, "limit %d: the first two lines: %s", (int)limit, err);
        cr_expect_eq(st[2], LS_ERR_IO, "limit %d: the line past the limit was accepted", (int)limit);
        cr_expect(strstr(err, path) && strstr(err, strerror(EFBIG)), "limit %d: the message: %s", (int)limit, err);
        cr_expect(strstr(err, k == 0 ? "after 10 of its 23 bytes" : "after 0 of its 23 bytes"),
                  "limit %d: the message: %s", (int)limit, err);
        cr_expect(!m.open, "the file is closed after a failed line");
        cr_expect_eq(after, LS_OK, "a closed sink writes nothing");
        cr_expect_eq(file_size(path), 2 * 23, "limit %d: %ld bytes: a partial line stayed", (int)limit,
                     file_size(path));
        cr_expect_eq(whole_json_lines(path), 2);
        cr_expect_eq(ls_run_metrics_close(&m, err, sizeof err), LS_OK);
    }
    signal(SIGXFSZ, SIG_DFL);
}

/* A run stops, naming the file, when one of its outputs cannot be written
 * whole; no partial output stays behind. */
Test(train_loop, outputs_that_cannot_be_written_whole_fail_the_run) {
    char a[2048], path[300], rd[300], mp[300], out[300];
    snprintf(path, sizeof path, "%s/r.jsonl", tmpdir);
    write_lines(path, 2, NULL);
    /* the trace outgrows 8 KiB first (the metrics file is a few hundred bytes a step): the run stops naming it */
    snprintf(rd, sizeof rd, "%s/trace", tmpdir);
    snprintf(mp, sizeof mp, "%s/trace.metrics.jsonl", tmpdir);
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --metrics %s --quiet", CFG, path, rd, mp);
    int rc = run_limited(8192, a);
    char *e = slurp("err.txt");
    cr_expect_eq(rc, 1, "trace: exit %d: %s", rc, e);
    cr_expect(strstr(e, "trace: ") && strstr(e, "events.jsonl.zst") && strstr(e, strerror(EFBIG)),
              "trace: stderr does not name the file and the cause: %s", e);
    free(e);
    cr_expect_geq(whole_json_lines(mp), 0);
    ls_receipt *r = read_receipt(rd);
    cr_expect_eq(r->status, LS_RECEIPT_ERROR);
    cr_expect(r->error_message && strstr(r->error_message, "events.jsonl.zst"), "the receipt's error: %s",
              r->error_message ? r->error_message : "(none)");
    ls_receipt_free(r);
    /* checkpoints (2 MB) past 64 KiB: --save-every's at step 1, --save's at the end, --save-init's before the
       steps, the gradient dump's after step 1's gradients */
    static const struct {
        const char *name, *opts;
        int metrics_lines; /* whole lines before the run stopped */
    } cases[] = {
        {"every", "--save-every 1 --save", 1},
        {"end", "--save", 2},
        {"init", "--save-init", 0},
        {"grads", "--dump-grads", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(rd, sizeof rd, "%s/%s", tmpdir, cases[k].name);
        snprintf(mp, sizeof mp, "%s/%s.metrics.jsonl", tmpdir, cases[k].name);
        snprintf(out, sizeof out, "%s/%s.safetensors", tmpdir, cases[k].name);
        snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --metrics %s %s %s --quiet", CFG, path, rd, mp,
                 cases[k].opts, out);
        rc = run_limited(64 << 10, a);
        e = slurp("err.txt");
        cr_expect_eq(rc, 1, "%s: exit %d: %s", cases[k].name, rc, e);
        cr_expect(strstr(e, out) && strstr(e, strerror(EFBIG)), "%s: stderr does not name %s: %s", cases[k].name,
                  out, e);
        free(e);
        cr_expect_eq(file_size(out), -1, "%s: %s exists", cases[k].name, out);
        cr_expect(!temp_left(out), "%s: a temporary file of %s is left", cases[k].name, out);
        cr_expect_eq(whole_json_lines(mp), cases[k].metrics_lines, "%s: metrics lines", cases[k].name);
        steps_seen S;
        read_steps(rd, &S);
        cr_expect(S.errors == 1 && strstr(S.error, out), "%s: %d error events, the last: %s", cases[k].name,
                  S.errors, S.error);
        cr_expect_eq(S.metrics, cases[k].metrics_lines, "%s", cases[k].name);
        r = read_receipt(rd);
        cr_expect_eq(r->status, LS_RECEIPT_ERROR, "%s", cases[k].name);
        ls_receipt_free(r);
    }
    /* a path that is a directory: the plot's rename fails after the steps; nothing is left in its place */
    char dir[300];
    snprintf(dir, sizeof dir, "%s/plot.svg", tmpdir);
    cr_assert_eq(mkdir(dir, 0777), 0);
    snprintf(rd, sizeof rd, "%s/plot", tmpdir);
    snprintf(mp, sizeof mp, "%s/plot.metrics.jsonl", tmpdir);
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --metrics %s --plot %s --quiet", CFG, path, rd, mp, dir);
    rc = run(a);
    e = slurp("err.txt");
    cr_expect_eq(rc, 1, "plot: exit %d: %s", rc, e);
    cr_expect(strstr(e, "--plot") && strstr(e, dir), "plot: stderr does not name %s: %s", dir, e);
    free(e);
    cr_expect(!temp_left(dir), "plot: a temporary file is left");
    steps_seen S;
    read_steps(rd, &S);
    cr_expect(S.errors == 1 && strstr(S.error, "--plot"), "plot: %d error events, the last: %s", S.errors, S.error);
    cr_expect_eq(whole_json_lines(mp), 2);
}
