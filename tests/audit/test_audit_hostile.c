/* test_audit_hostile.c - a run directory is hostile input (ISSUE 10): every
 * case is derived from a real single-rank trainer run, audited in-process
 * (ls_audit_load / ls_audit_evaluate / ls_audit_report_json, in a forked child
 * so that a crash, a hang or a large allocation is seen: the child must exit
 * normally within its alarm and its VmHWM stay below HWM_CAP_KB) and through
 * the CLI (exit status, --timeline, --html, diff).  Each case asserts the
 * rule that must fail and the file its evidence names.
 *
 * "Never read outside the run" is checked independently of the audit: the
 * links point at a FIFO outside the run (opening it would block: the alarm /
 * timeout catches that) or at a file holding MARKER, which must appear in no
 * output. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <zstd.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"

#define MARKER "OUTSIDE-THE-RUN-7f3a9c"
#define HWM_CAP_KB (256L * 1024)
#define TRACE "rank-0000/events.jsonl.zst"
#define RECEIPT "rank-0000/receipt.json"

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("audit-hostile")

TestSuite(audit_hostile, .init = setup, .fini = teardown, .timeout = 120);
LS_TEST_FIXTURE_ROOT("/tmp/ls-audit-hostile-fix-%d")

/* The clean run (made once per runner), copied to tmpdir/run; its path. */
static void fresh_run(char *out, size_t cap) {
    char fix[256], cmd[2048];
    int lfd = fixture_claim("single", fix, sizeof fix);
    if (lfd >= 0) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf '%s.tmp' && " TRAIN " --config " CFG " --prompt-len 64 --steps 1 --group 2 --response-len 3"
                 " --quiet --out '%s.tmp' >'%s.log' 2>&1 && mv '%s.tmp' '%s'",
                 fix, fix, fix, fix, fix);
        cr_assert_eq(sh(cmd), 0, "%s", cmd);
        close(lfd);
    }
    snprintf(out, cap, "%s/run", tmpdir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", out, fix, out);
    cr_assert_eq(sh(cmd), 0);
}

static void path_in(char *buf, size_t cap, const char *run, const char *rel) { snprintf(buf, cap, "%s/%s", run, rel); }

static void write_bytes(const char *path, const void *p, size_t n) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A file outside the run holding MARKER (what a followed link would read). */
static void outside_file(char *out, size_t cap) {
    snprintf(out, cap, "%s/outside.txt", tmpdir);
    const char *t = "{\"marker\":\"" MARKER "\"}\n";
    write_bytes(out, t, strlen(t));
}

/* A FIFO outside the run: opening it for reading blocks (no writer). */
static void outside_fifo(char *out, size_t cap) {
    snprintf(out, cap, "%s/outside.fifo", tmpdir);
    unlink(out);
    cr_assert_eq(mkfifo(out, 0600), 0, "mkfifo %s", out);
}

static void replace_with_link(const char *run, const char *rel, const char *target) {
    char p[600];
    path_in(p, sizeof p, run, rel);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    sh(cmd);
    cr_assert_eq(symlink(target, p), 0, "symlink %s -> %s", p, target);
}

/* Edits a JSON file of the run: fn changes the document. */
static void edit_json(const char *run, const char *rel, void (*fn)(cJSON *doc, const void *arg), const void *arg) {
    char p[600], err[512];
    path_in(p, sizeof p, run, rel);
    cJSON *doc = NULL;
    cr_assert_eq(ls_json_read_file(p, &doc, err, sizeof err), LS_OK, "%s", err);
    fn(doc, arg);
    char *s = cJSON_Print(doc);
    cr_assert(s != NULL);
    write_bytes(p, s, strlen(s));
    free(s);
    cJSON_Delete(doc);
}

/* ---- the in-process audit, in a child ----------------------------------- */

typedef struct {
    int load_status;    /* ls_status of ls_audit_load */
    char load_err[512];
    cJSON *report;      /* the JSON report (NULL when load failed) */
    long hwm_kb;        /* the child's VmHWM at the end */
    long rss0_kb;       /* its VmRSS before the audit */
    double seconds;
} child_result;

static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0) v = strtol(line + k, NULL, 10);
    fclose(f);
    return v;
}

static void audit_child(const char *run, child_result *res) {
    memset(res, 0, sizeof *res);
    char out[300];
    snprintf(out, sizeof out, "%s/child.json", tmpdir);
    unlink(out);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        alarm(60); /* a hang (a followed link to a FIFO) kills the child */
        long rss0 = status_kb("VmRSS:");
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ls_audit_options opt = {.run_dir = run};
        ls_audit_run *ar = NULL;
        char err[512] = "";
        ls_status st = ls_audit_load(&opt, &ar, err, sizeof err);
        cJSON *rep = NULL;
        if (st == LS_OK) {
            if (ls_audit_evaluate(ar) != LS_OK) _exit(3);
            if (ls_audit_report_json(ar, &rep) != LS_OK) _exit(4);
            FILE *dn = fopen("/dev/null", "w");
            ls_audit_report_text(ar, dn);
            fclose(dn);
        }
        ls_audit_free(ar);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "status", st);
        cJSON_AddStringToObject(o, "err", err);
        cJSON_AddNumberToObject(o, "hwm_kb", (double)status_kb("VmHWM:"));
        cJSON_AddNumberToObject(o, "rss0_kb", (double)rss0);
        cJSON_AddNumberToObject(o, "seconds",
                                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        if (rep) cJSON_AddItemToObject(o, "report", rep);
        char *s = cJSON_PrintUnformatted(o);
        FILE *f = fopen(out, "w");
        if (!f || !s || fputs(s, f) < 0 || fclose(f) != 0) _exit(5);
        _exit(0);
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws), "%s: the in-process audit died by signal %d (crash or hang)", run,
              WIFSIGNALED(ws) ? WTERMSIG(ws) : -1);
    cr_assert_eq(WEXITSTATUS(ws), 0, "%s: the in-process audit child exited %d", run, WEXITSTATUS(ws));
    cJSON *o = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file_capped(out, (size_t)256 << 20, &o, err, sizeof err), LS_OK, "%s", err);
    res->load_status = (int)cJSON_GetObjectItem(o, "status")->valuedouble;
    snprintf(res->load_err, sizeof res->load_err, "%s", cJSON_GetObjectItem(o, "err")->valuestring);
    res->hwm_kb = (long)cJSON_GetObjectItem(o, "hwm_kb")->valuedouble;
    res->rss0_kb = (long)cJSON_GetObjectItem(o, "rss0_kb")->valuedouble;
    res->seconds = cJSON_GetObjectItem(o, "seconds")->valuedouble;
    res->report = cJSON_DetachItemFromObject(o, "report");
    cJSON_Delete(o);
    cr_log_info("%s: load %d, VmHWM %ld KiB (RSS before %ld KiB, delta %ld KiB), %.3f s", run, res->load_status,
                res->hwm_kb, res->rss0_kb, res->hwm_kb - res->rss0_kb, res->seconds);
    cr_assert_lt(res->hwm_kb, HWM_CAP_KB, "%s: the audit's VmHWM %ld KiB is above the cap of %ld KiB", run,
                 res->hwm_kb, HWM_CAP_KB);
    if (res->report) {
        char *s = cJSON_PrintUnformatted(res->report);
        cr_assert(strstr(s, MARKER) == NULL, "%s: the report holds bytes from outside the run", run);
        free(s);
    }
}

/* The rule id failed, with an evidence item whose file is `file` and whose
 * detail contains `detail` (NULL: any). */
static void expect_fail(const child_result *res, const char *id, const char *file, const char *detail) {
    cr_assert(res->report != NULL, "no report (load: %s)", res->load_err);
    const cJSON *r = report_find_rule(res->report, id);
    cr_assert(r != NULL, "rule %s absent", id);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "pass")), "rule %s passed, expected a failure", id);
    const cJSON *e;
    char seen[2048] = "";
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "evidence")) {
        const cJSON *f = cJSON_GetObjectItem(e, "file"), *d = cJSON_GetObjectItem(e, "detail");
        const char *fs = cJSON_IsString(f) ? f->valuestring : "", *ds = cJSON_IsString(d) ? d->valuestring : "";
        if (strcmp(fs, file) == 0 && (detail == NULL || strstr(ds, detail) != NULL)) {
            cr_log_info("%s: %s: %s", id, fs, ds);
            return;
        }
        size_t n = strlen(seen);
        snprintf(seen + n, sizeof seen - n, " [%s: %.200s]", fs, ds);
    }
    cr_assert_fail("rule %s: no evidence naming %s%s%s; evidence:%s", id, file, detail ? " with " : "",
                   detail ? detail : "", seen);
}

static int level_of(const child_result *res) {
    const cJSON *l = cJSON_GetObjectItem(res->report, "level");
    return cJSON_IsNumber(l) ? (int)l->valuedouble : -1;
}

/* The CLI with every output: its exit status (never a signal, never the
 * timeout's 124); no output holds MARKER. */
static int cli(const char *run, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && rm -f out.json tl.json page.html && timeout 60 " AUDIT " '%s' --require-level 1 --json out.json"
             " --timeline tl.json --html page.html %s >cli.out 2>cli.err",
             tmpdir, run, extra ? extra : "");
    int rc = sh(cmd);
    cr_assert(rc != 124 && rc < 128, "%s: exit %d (hang or signal)", cmd, rc);
    snprintf(cmd, sizeof cmd, "cd '%s' && ! grep -qs '" MARKER "' cli.out cli.err out.json tl.json page.html", tmpdir);
    cr_assert_eq(sh(cmd), 0, "%s: an output holds bytes from outside the run", run);
    return rc;
}

static int cli_diff(const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 60 " AUDIT " diff '%s' '%s' >diff.out 2>diff.err", tmpdir, a, b);
    int rc = sh(cmd);
    cr_assert(rc != 124 && rc < 128, "%s: exit %d (hang or signal)", cmd, rc);
    snprintf(cmd, sizeof cmd, "cd '%s' && ! grep -qs '" MARKER "' diff.out diff.err", tmpdir);
    cr_assert_eq(sh(cmd), 0, "diff: an output holds bytes from outside the run");
    return rc;
}

static bool file_has(const char *name, const char *needle) {
    char p[400], err[256];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    char *b = NULL;
    size_t n = 0;
    if (ls_json_read_bytes_capped(p, (size_t)64 << 20, &b, &n, err, sizeof err) != LS_OK) return false;
    bool r = strstr(b, needle) != NULL;
    free(b);
    return r;
}

/* ---- the clean run: the reference every case departs from ---------------- */

Test(audit_hostile, clean_run_proves_level_1) {
    char run[300];
    fresh_run(run, sizeof run);
    child_result res;
    audit_child(run, &res);
    cr_assert_eq(res.load_status, LS_OK, "%s", res.load_err);
    cr_assert_eq(level_of(&res), 1);
    cr_assert_eq(cli(run, NULL), 0);
    cJSON_Delete(res.report);
}

/* ---- (1) manifest subject names ------------------------------------------ */

static void set_subject0(cJSON *doc, const void *arg) {
    cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "subject"), 0);
    cJSON_ReplaceItemInObject(s0, "name", cJSON_CreateString((const char *)arg));
}

static void subject_case(const char *name) {
    char run[300];
    fresh_run(run, sizeof run);
    edit_json(run, "manifest.json", set_subject0, name);
    child_result res;
    audit_child(run, &res);
    cr_assert_eq(res.load_status, LS_OK, "%s", res.load_err);
    expect_fail(&res, "manifest.valid", "manifest.json", NULL);
    cr_assert_eq(level_of(&res), 0);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, subject_dotdot) { subject_case("../../etc/passwd"); }
Test(audit_hostile, subject_absolute) { subject_case("/etc/passwd"); }
Test(audit_hostile, subject_double_slash) { subject_case("rank-0000//events.jsonl.zst"); }
Test(audit_hostile, subject_control_char) { subject_case("rank-0000/events\001.jsonl.zst"); }
Test(audit_hostile, subject_nul) {
    /* a JSON \u0000 inside the name: cJSON stops the string there */
    char run[300], p[600], err[512];
    fresh_run(run, sizeof run);
    path_in(p, sizeof p, run, "manifest.json");
    char *b = NULL;
    size_t n = 0;
    cr_assert_eq(ls_json_read_bytes_capped(p, 1 << 20, &b, &n, err, sizeof err), LS_OK);
    char *at = strstr(b, "\"rank-0000/events.jsonl.zst\"");
    cr_assert(at != NULL);
    size_t off = (size_t)(at - b) + 1 + strlen("rank-0000/events");
    char *nb = malloc(n + 8);
    memcpy(nb, b, off);
    memcpy(nb + off, "\\u0000", 6);
    memcpy(nb + off + 6, b + off, n - off);
    write_bytes(p, nb, n + 6);
    free(nb);
    free(b);
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "manifest.valid", "manifest.json", NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

/* ---- (2) a receipt's events file ----------------------------------------- */

static void set_events_file(cJSON *doc, const void *arg) {
    cJSON *ev = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "predicate"), "events");
    cJSON_ReplaceItemInObject(ev, "file", cJSON_CreateString((const char *)arg));
}

static void events_file_case(const char *name) {
    char run[300];
    fresh_run(run, sizeof run);
    edit_json(run, RECEIPT, set_events_file, name);
    child_result res;
    audit_child(run, &res);
    cr_assert_eq(res.load_status, LS_OK, "%s", res.load_err);
    expect_fail(&res, "receipts.valid", RECEIPT, NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, receipt_events_file_dotdot) { events_file_case("../../etc/passwd"); }
Test(audit_hostile, receipt_events_file_absolute) { events_file_case("/etc/passwd"); }

/* ---- (3) links that leave the run: refused, never followed ---------------- */

Test(audit_hostile, trace_link_outside) {
    char run[300], fifo[300], clean[300];
    fresh_run(run, sizeof run);
    snprintf(clean, sizeof clean, "%s/clean", tmpdir);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", run, clean);
    sh(cmd);
    outside_fifo(fifo, sizeof fifo);
    replace_with_link(run, TRACE, fifo); /* following it would block forever */
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "trace.valid", TRACE, "symbolic link");
    expect_fail(&res, "manifest.digests", TRACE, "symbolic link");
    cr_assert_eq(cli(run, NULL), 2); /* --timeline: no rank trace readable */
    cr_assert(file_has("cli.err", "symbolic link"), "the CLI does not say why");
    cr_assert_eq(cli(run, "--quiet --require-level 0"), 2);
    /* --html alone still writes, with the trace refused */
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 60 " AUDIT " '%s' --html page.html --quiet --require-level 0", tmpdir, run);
    cr_assert_eq(sh(cmd), 0);
    cr_assert(file_has("page.html", "symbolic link"), "the HTML page does not name the refused link");
    cr_assert_neq(cli_diff(run, clean), 124);
    cr_assert(file_has("diff.out", "symbolic link") || file_has("diff.err", "symbolic link"),
              "diff does not name the refused link");
    cJSON_Delete(res.report);
}

Test(audit_hostile, trace_link_etc_passwd) {
    char run[300];
    fresh_run(run, sizeof run);
    replace_with_link(run, TRACE, "/etc/passwd");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "trace.valid", TRACE, "symbolic link");
    cr_assert_eq(cli(run, "--require-level 0"), 2);
    cr_assert(!file_has("tl.json", "root:"), "the timeline read /etc/passwd");
    cJSON_Delete(res.report);
}

Test(audit_hostile, receipt_link_outside) {
    char run[300], out[300];
    fresh_run(run, sizeof run);
    outside_file(out, sizeof out);
    replace_with_link(run, RECEIPT, out);
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "receipts.valid", RECEIPT, "symbolic link");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, rank_dir_link_to_root) {
    char run[300];
    fresh_run(run, sizeof run);
    replace_with_link(run, "rank-0001", "/");
    child_result res;
    audit_child(run, &res);
    cr_assert_eq(res.load_status, LS_OK, "%s", res.load_err);
    expect_fail(&res, "manifest.digests", "rank-0001", "symbolic link");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, manifest_link_dev_zero) {
    char run[300];
    fresh_run(run, sizeof run);
    replace_with_link(run, "manifest.json", "/dev/zero");
    child_result res;
    audit_child(run, &res);
    cr_assert_eq(res.load_status, LS_OK, "%s", res.load_err);
    expect_fail(&res, "manifest.valid", "manifest.json", "symbolic link");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, link_loop) {
    char run[300];
    fresh_run(run, sizeof run);
    replace_with_link(run, RECEIPT, "receipt2.json");
    replace_with_link(run, "rank-0000/receipt2.json", "receipt.json");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "receipts.valid", RECEIPT, "symbolic link");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

/* ---- (4) declared sizes beyond the file ----------------------------------- */

static void set_count(cJSON *doc, const void *arg) { /* raw: cJSON_Print would round 2^53 */
    cJSON *ev = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "predicate"), "events");
    cJSON_ReplaceItemInObject(ev, "count", cJSON_CreateRaw((const char *)arg));
}
static void set_world(cJSON *doc, const void *arg) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "predicate"), "world", cJSON_CreateNumber(*(const double *)arg));
}

Test(audit_hostile, receipt_events_count_2_53) {
    char run[300];
    fresh_run(run, sizeof run);
    edit_json(run, RECEIPT, set_count, "9007199254740992");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "receipts.valid", RECEIPT, "maximum");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, receipt_events_count_2_53_minus_1) {
    /* schema-valid, far beyond the file: the trace rule compares it */
    char run[300];
    fresh_run(run, sizeof run);
    edit_json(run, RECEIPT, set_count, "9007199254740991");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "trace.valid", TRACE, "the receipt says 9007199254740991");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

static void world_case(double w) {
    char run[300];
    fresh_run(run, sizeof run);
    edit_json(run, "manifest.json", set_world, &w);
    child_result res;
    audit_child(run, &res);
    cr_assert_eq(res.load_status, LS_OK, "%s", res.load_err);
    expect_fail(&res, "manifest.valid", "manifest.json", NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}
Test(audit_hostile, manifest_world_1e9) { world_case(1e9); }
Test(audit_hostile, manifest_world_4097) { world_case(4097); }

/* The trace rewritten through the zstd CLI with sed's expression applied. */
static void rewrite_trace(const char *run, const char *sed_expr) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cd '%s' && zstd -qdc " TRACE " | sed '%s' | zstd -q -c > t.new && mv t.new " TRACE, run,
             sed_expr);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
}

Test(audit_hostile, trace_huge_seq) {
    char run[300];
    fresh_run(run, sizeof run);
    rewrite_trace(run, "5s/\"seq\":3,/\"seq\":9007199254740991,/");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "trace.valid", TRACE, "seq");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

/* ---- (5) a decompression bomb --------------------------------------------- */

Test(audit_hostile, zstd_bomb) {
    char run[300], p[600];
    fresh_run(run, sizeof run);
    path_in(p, sizeof p, run, TRACE);
    static char hdr[1 << 20];
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "zstd -qdc '%s' | head -1", p); /* the run's own header line */
    FILE *hp = popen(cmd, "r");
    cr_assert(hp && fgets(hdr, sizeof hdr, hp) && strchr(hdr, '\n'));
    pclose(hp);
    /* a header line, then 4 GiB of zeros with no newline, in one frame */
    const size_t chunk = (size_t)1 << 20, total = (size_t)4 << 30;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    char *zero = calloc(1, chunk);
    size_t ocap = ZSTD_CStreamOutSize();
    char *obuf = malloc(ocap);
    FILE *f = fopen(p, "wb");
    cr_assert(zero && obuf && f);
    size_t fed = 0, written = 0;
    for (int phase = 0; phase < 2; phase++) {
        ZSTD_inBuffer in = {phase == 0 ? (const void *)hdr : zero, phase == 0 ? strlen(hdr) : 0, 0};
        for (;;) {
            if (phase == 1 && in.pos == in.size) {
                if (fed == total) break;
                in.src = zero, in.size = chunk, in.pos = 0;
                fed += chunk;
            }
            ZSTD_outBuffer out = {obuf, ocap, 0};
            ZSTD_EndDirective mode = phase == 1 && fed == total && in.pos == in.size ? ZSTD_e_end : ZSTD_e_continue;
            size_t r = ZSTD_compressStream2(cc, &out, &in, mode);
            cr_assert(!ZSTD_isError(r));
            fwrite(obuf, 1, out.pos, f);
            written += out.pos;
            if (phase == 0 && in.pos == in.size) break;
            if (mode == ZSTD_e_end && r == 0) break;
        }
    }
    fclose(f);
    free(obuf);
    free(zero);
    ZSTD_freeCCtx(cc);
    cr_log_info("bomb: %zu bytes expanding to %zu", written, total + strlen(hdr));
    cr_assert_lt(written, (size_t)1 << 20);
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "trace.valid", TRACE, "overlong_line at line 2");
    cr_assert_eq(cli(run, "--require-level 0"), 0);
    cJSON_Delete(res.report);
}

/* ---- (6) deeply nested and enormous JSON ---------------------------------- */

static void big_file(const char *run, const char *rel, const char *pre, char fill, size_t n, const char *post) {
    char p[600];
    path_in(p, sizeof p, run, rel);
    size_t a = strlen(pre), c = strlen(post);
    char *b = malloc(a + n + c);
    memcpy(b, pre, a);
    memset(b + a, fill, n);
    memcpy(b + a + n, post, c);
    write_bytes(p, b, a + n + c);
    free(b);
}

Test(audit_hostile, receipt_nested_1e6) {
    char run[300];
    fresh_run(run, sizeof run);
    big_file(run, RECEIPT, "", '[', 1000000, "");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "receipts.valid", RECEIPT, NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, manifest_nested_1e6) {
    char run[300];
    fresh_run(run, sizeof run);
    big_file(run, "manifest.json", "", '[', 1000000, "");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "manifest.valid", "manifest.json", NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, receipt_string_50mb) {
    char run[300];
    fresh_run(run, sizeof run);
    big_file(run, RECEIPT, "{\"_type\":\"", 'x', (size_t)50 << 20, "\"}");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "receipts.valid", RECEIPT, NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, manifest_number_1e6_digits) {
    char run[300];
    fresh_run(run, sizeof run);
    big_file(run, "manifest.json", "{\"predicate\":{\"world\":", '9', 1000000, "}}");
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "manifest.valid", "manifest.json", NULL);
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

Test(audit_hostile, trace_line_nested) {
    char run[300];
    fresh_run(run, sizeof run);
    /* line 3 replaced by 500000 '[' (below the 1 MiB line cap) */
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && head -c 500000 /dev/zero | tr '\\0' '[' > nest.txt && echo >> nest.txt && zstd -qdc " TRACE
             " | awk 'NR==3 { while ((getline l < \"nest.txt\") > 0) print l; next } 1' | zstd -q -c > t.new && mv t.new " TRACE
             " && rm nest.txt",
             run);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, "trace.valid", TRACE, "malformed_line at line 3");
    cr_assert_eq(cli(run, NULL), 1);
    cJSON_Delete(res.report);
}

/* ---- (7) FIFOs in place of files ----------------------------------------- */

static void fifo_case(const char *rel, const char *rule) {
    char run[300], p[600];
    fresh_run(run, sizeof run);
    path_in(p, sizeof p, run, rel);
    unlink(p);
    cr_assert_eq(mkfifo(p, 0600), 0);
    child_result res;
    audit_child(run, &res);
    expect_fail(&res, rule, rel, "not a regular file");
    int rc = cli(run, NULL);
    cr_assert(rc == 1 || rc == 2, "exit %d", rc);
    cJSON_Delete(res.report);
}
Test(audit_hostile, fifo_trace) { fifo_case(TRACE, "trace.valid"); }
Test(audit_hostile, fifo_receipt) { fifo_case(RECEIPT, "receipts.valid"); }
Test(audit_hostile, fifo_manifest) { fifo_case("manifest.json", "manifest.valid"); }

/* ---- (8) the run directory itself a link ---------------------------------- */

Test(audit_hostile, run_dir_is_link) {
    char run[300], link[300];
    fresh_run(run, sizeof run);
    snprintf(link, sizeof link, "%s/run-link", tmpdir);
    cr_assert_eq(symlink(run, link), 0);
    child_result res;
    audit_child(link, &res);
    cr_assert_eq(res.load_status, LS_ERR_FORMAT, "load %d: %s", res.load_status, res.load_err);
    cr_assert(strstr(res.load_err, "symbolic link") != NULL, "%s", res.load_err);
    cr_assert_eq(cli(link, NULL), 2);
    cr_assert(file_has("cli.err", "symbolic link"), "the CLI does not say why");
    cr_assert_eq(cli_diff(link, run), 2);
    cr_assert(file_has("diff.err", "symbolic link"), "diff does not say why");
}
