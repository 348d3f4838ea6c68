/* test_audit_diff.c - longstraw-audit diff on runs the trainer makes: the
 * same run twice is equivalent (exit 0), both runs verified; a copy whose
 * recorded values were edited is never equivalent: unverified (exit 3,
 * naming the run and the file) while its manifest's digests are stale,
 * different (exit 1, naming the value) once they are recomputed, and
 * unverified again with --key when its signature is then stale
 * (edited_copy_is_never_equivalent); another seed, another learning rate
 * and a CP fault are named at the first parameter digest that differs, which
 * the test finds on its own by reading both traces whole and comparing every
 * (step, target) pair; a trace cut at a line boundary and one cut inside a
 * zstd frame are named where they end (checked against `zstd -dc` of the
 * original); a 2-rank CP run against its rerun is equivalent, against a copy
 * without rank 1 names the missing rank; a symbolic link in place of a trace
 * is refused, never followed (each such copy also fails its manifest:
 * unverified); unusable input and bad usage exit 2; --json is written and
 * valid against schemas/audit-diff.schema.json. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit/report/diff.h"
#include "receipts/format/json_util.h"
#include "receipts/writing/receipt.h"
#include "receipts/schema/schema.h"
#include "receipts/reading/trace_reader.h"
#include "tests/support/test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define SIGN LS_BINARY_DIR "/receipts/longstraw-sign"
#define CFG LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#define EDIT "python3 " LS_SOURCE_DIR "/tests/audit/audit_invariants_edit.py"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "auditdiff"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

/* A shell command from a format whose every argument is tmpdir. */
static void sh(const char *fmt) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, tmpdir, tmpdir, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "failed: %s", cmd);
}

/* A single-rank run into tmpdir/name. */
static void train(const char *name, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 %s --config %s --prompt-len 64 --steps 2 --quiet %s --out %s/%s >%s/train.out 2>&1",
             TRAIN, CFG, extra, tmpdir, name, tmpdir);
    cr_assert_eq(system(cmd), 0, "trainer failed: %s", cmd);
}

static char *path_of(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* ls_audit_diff_main with stdout and stderr captured into out[]/err[]. */
static char out[1 << 18], errt[1 << 14];
static int diff_main(int argc, const char **argv) {
    char po[600], pe[600];
    snprintf(po, sizeof po, "%s/diff.out", tmpdir);
    snprintf(pe, sizeof pe, "%s/diff.err", tmpdir);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(so >= 0 && se >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = ls_audit_diff_main(argc, (char **)argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so), close(se), close(fo), close(fe);
    FILE *f = fopen(po, "rb");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    fclose(f);
    f = fopen(pe, "rb");
    n = fread(errt, 1, sizeof errt - 1, f);
    errt[n] = 0;
    fclose(f);
    return rc;
}

static int diff2(const char *a, const char *b) {
    const char *argv[] = {"diff", path_of(a), path_of(b)};
    return diff_main(3, argv);
}

/* The comparison's document (asserted usable), its verdict in *verdict (may be NULL); keys: NULL or a
 * NULL-terminated list of trusted public keys. */
static cJSON *diff_doc_opt(const char *a, const char *b, const char *const *keys, bool require_signed, int *verdict) {
    cJSON *doc = NULL;
    int v = -1;
    char err[2048];
    size_t nk = 0;
    while (keys && keys[nk]) nk++;
    ls_audit_diff_options opt = {.keys = keys, .n_keys = nk, .require_signed = require_signed};
    ls_status st = ls_audit_diff_runs(path_of(a), path_of(b), &opt, &doc, &v, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s vs %s: %s", a, b, err);
    cr_assert_eq(v == LS_AUDIT_DIFF_EQUIVALENT, cJSON_IsTrue(cJSON_GetObjectItem(doc, "equivalent")));
    const char *names[] = {"equivalent", "different", "", "unverified"};
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "verdict")->valuestring, names[v]);
    if (verdict) *verdict = v;
    return doc;
}
static cJSON *diff_doc(const char *a, const char *b) { return diff_doc_opt(a, b, NULL, false, NULL); }

static const cJSON *find_div(const cJSON *doc, const char *what, int rank) {
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(doc, "divergences")) {
        const cJSON *r = cJSON_GetObjectItem(d, "rank");
        if (!strcmp(cJSON_GetObjectItem(d, "what")->valuestring, what) && (rank < 0 || (r && r->valueint == rank)))
            return d;
    }
    return NULL;
}

static const char *sget(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}
static double nget(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return v->valuedouble;
}

/* ---- the independent reference: every param digest of a trace, whole -- */

typedef struct {
    int64_t step, seq;
    char target[128], sha[65];
} dg;
typedef struct {
    dg d[4096];
    size_t n;
} dgs;

static int on_digest(const ls_trace_event *ev, void *user) {
    dgs *g = user;
    if (strcmp(ev->ev, "param_digest") || g->n == 4096) return 0;
    dg *x = &g->d[g->n++];
    x->step = (int64_t)cJSON_GetObjectItem(ev->json, "step")->valuedouble;
    x->seq = ev->seq;
    snprintf(x->target, sizeof x->target, "%s", cJSON_GetObjectItem(ev->json, "target")->valuestring);
    snprintf(x->sha, sizeof x->sha, "%s", cJSON_GetObjectItem(ev->json, "sha256")->valuestring);
    return 0;
}

static dgs *read_digests(const char *run, int rank) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/rank-%04d/events.jsonl.zst", tmpdir, run, rank);
    dgs *g = calloc(1, sizeof *g);
    ls_trace_report rep;
    ls_trace_read_file(p, on_digest, g, &rep);
    ls_trace_report_free(&rep);
    return g;
}

/* The first digest of A (lowest step, then A's order) whose (step, target)
 * has another sha256 in B; NULL when every common pair agrees.  *common
 * counts the pairs compared. */
static const dg *first_digest_diff(const dgs *a, const dgs *b, const dg **in_b, size_t *common) {
    const dg *best = NULL;
    *common = 0;
    for (size_t i = 0; i < a->n; i++)
        for (size_t j = 0; j < b->n; j++)
            if (a->d[i].step == b->d[j].step && !strcmp(a->d[i].target, b->d[j].target)) {
                (*common)++;
                if (strcmp(a->d[i].sha, b->d[j].sha) && (!best || a->d[i].step < best->step)) best = &a->d[i], *in_b = &b->d[j];
                break;
            }
    return best;
}

/* The diff names exactly the reference's first differing digest of rank. */
static void expect_digest_div(const cJSON *doc, const char *a, const char *b, int rank) {
    dgs *ga = read_digests(a, rank), *gb = read_digests(b, rank);
    const dg *in_b = NULL;
    size_t common = 0;
    const dg *ref = first_digest_diff(ga, gb, &in_b, &common);
    cr_assert_gt(common, 10, "%s vs %s: only %zu digests in common", a, b, common);
    cr_assert_not_null(ref, "%s vs %s: the reference finds every digest equal", a, b);
    const cJSON *d = find_div(doc, "param_digest", -1);
    cr_assert_not_null(d, "%s vs %s: no param_digest divergence:\n%s", a, b, out);
    cr_expect_eq((int)nget(d, "rank"), rank);
    cr_expect_eq((int64_t)nget(d, "step"), ref->step, "step %g, reference %lld", nget(d, "step"), (long long)ref->step);
    cr_expect_str_eq(sget(d, "target"), ref->target);
    const cJSON *sa = cJSON_GetObjectItem(d, "a"), *sb = cJSON_GetObjectItem(d, "b");
    cr_expect_eq((int64_t)nget(sa, "seq"), ref->seq);
    cr_expect_eq((int64_t)nget(sb, "seq"), in_b->seq);
    cr_expect_str_eq(sget(sa, "sha256"), ref->sha);
    cr_expect_str_eq(sget(sb, "sha256"), in_b->sha);
    free(ga);
    free(gb);
}

/* 1 when the two runs' rank 0 receipts hold the same config object. */
static int same_config_of(const char *a, const char *b) {
    char e[512], pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s/rank-0000/receipt.json", tmpdir, a);
    snprintf(pb, sizeof pb, "%s/%s/rank-0000/receipt.json", tmpdir, b);
    ls_receipt *ra = NULL, *rb = NULL;
    cr_assert_eq(ls_receipt_read(pa, &ra, e, sizeof e), LS_OK, "%s", e);
    cr_assert_eq(ls_receipt_read(pb, &rb, e, sizeof e), LS_OK, "%s", e);
    int same = cJSON_Compare(ra->config, rb->config, 1);
    ls_receipt_free(ra);
    ls_receipt_free(rb);
    return same;
}

static const char *first_what(const cJSON *doc) { return sget(cJSON_GetObjectItem(doc, "first_divergence"), "what"); }

/* The audit-diff schema (the caller frees it); expects j, a --json
 * document, valid against it. */
static ls_schema *expect_diff_schema_valid(const cJSON *j) {
    char e[512], why[512];
    ls_schema *s = NULL;
    cr_assert_eq(ls_schema_load_file(LS_SOURCE_DIR "/schemas/audit-diff.schema.json", &s, e, sizeof e), LS_OK, "%s", e);
    ls_schema_errors se = {0};
    ls_status vs = ls_schema_validate(s, j, &se);
    ls_schema_errors_first(&se, why, sizeof why);
    ls_schema_errors_free(&se);
    cr_expect_eq(vs, LS_OK, "--json fails its schema: %s", why);
    return s;
}

Test(audit_diff, single_rank_seed_lr_and_identical, .init = setup, .fini = teardown, .timeout = 300) {
    train("a", "--seed 1");
    train("a2", "--seed 1");
    train("s2", "--seed 2");
    train("lr", "--seed 1 --lr 2e-3");

    /* the same run twice: equivalent, and really bit-identical digests */
    cr_expect_eq(diff2("a", "a2"), 0, "%s%s", out, errt);
    cr_expect(strstr(out, "verdict: EQUIVALENT") != NULL, "%s", out);
    cr_expect(strstr(out, "verified: manifest valid") != NULL, "%s", out);
    cr_expect(strstr(out, "capture") && strstr(out, "per-step metrics") && strstr(out, "fixed_weights"), "%s", out);
    cJSON *doc = diff_doc("a", "a2");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(doc, "first_divergence")));
    for (int k = 0; k < 2; k++) { /* both runs verified: the manifest's every subject digested */
        const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "runs"), k ? "b" : "a"),
                                             "verification");
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(v, "verified")));
        cr_expect_gt(nget(v, "subjects_checked"), 1);
        cr_expect_str_eq(sget(v, "signature"), "not_checked");
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(v, "problems")), 0);
    }
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "steps")), 2, "two steps of metrics compared");
    cr_expect_eq(nget(cJSON_GetObjectItem(doc, "metric_max_abs_delta"), "loss"), 0.0);
    {
        dgs *ga = read_digests("a", 0), *gb = read_digests("a2", 0);
        const dg *in_b;
        size_t common;
        cr_expect_null(first_digest_diff(ga, gb, &in_b, &common), "the reference sees the reruns differ");
        cr_expect_eq(common, ga->n);
        free(ga);
        free(gb);
    }
    cJSON_Delete(doc);

    /* another seed: the receipts record every option, so the input
     * difference comes first (the configuration's options.seed), then the
     * parameter digests of step 0 */
    cr_expect_eq(same_config_of("a", "s2"), 0, "the seed is in the recorded configuration");
    cr_expect_eq(diff2("a", "s2"), 1, "%s%s", out, errt);
    cr_expect(strstr(out, "FIRST DIVERGENCE (config): configuration key options") != NULL &&
                  strstr(out, "seed") != NULL, "%s", out);
    cr_expect(strstr(out, "param_digest: rank 0 step 0") != NULL, "%s", out);
    doc = diff_doc("a", "s2");
    cr_expect_str_eq(first_what(doc), "config");
    cr_expect_null(find_div(doc, "event_sequence", -1), "the seed changes values, not the event sequence");
    expect_digest_div(doc, "a", "s2", 0);
    cJSON_Delete(doc);

    /* another learning rate: the configuration's options.lr first; the
     * first digest apart is the reference's (a lora_B: lora_A's gradient is
     * zero at step 0, so lora_A agrees after it) */
    cr_expect_eq(diff2("a", "lr"), 1, "%s%s", out, errt);
    doc = diff_doc("a", "lr");
    cr_expect_str_eq(first_what(doc), "config");
    expect_digest_div(doc, "a", "lr", 0);
    /* the metrics show the change: lr differs by exactly 1e-3 */
    const cJSON *st0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "steps"), 0), *m;
    int seen_lr = 0;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(st0, "metrics")) if (!strcmp(sget(m, "name"), "lr")) {
        seen_lr = 1;
        cr_expect_float_eq(nget(m, "delta"), 1e-3, 1e-12, "lr delta %g", nget(m, "delta"));
    }
    cr_expect(seen_lr);
    cJSON_Delete(doc);

    /* --json: written atomically, valid against its schema, the same verdict */
    const char *argv[] = {"diff", path_of("a"), path_of("lr"), "--json", path_of("d.json")};
    cr_expect_eq(diff_main(5, argv), 1);
    char *text = NULL;
    FILE *f = fopen(path_of("d.json"), "rb");
    cr_assert_not_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    (void)text;
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "--json is not JSON");
    ls_schema *s = expect_diff_schema_valid(j);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(j, "equivalent")));
    /* and a mutated copy fails it (the check can fail) */
    cJSON_ReplaceItemInObject(j, "equivalent", cJSON_CreateString("no"));
    cr_expect_eq(ls_schema_validate(s, j, NULL), LS_ERR_SCHEMA);
    ls_schema_free(s);
    cJSON_Delete(j);
}

/* runs.X.verification of a diff document (X "a" or "b"). */
static const cJSON *verification(const cJSON *doc, const char *x) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "runs"), x), "verification");
}

/* The first problem of run x's verification names file (and, when given, text). */
static void expect_problem(const cJSON *doc, const char *x, const char *file, const char *text) {
    const cJSON *v = verification(doc, x);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(v, "verified")), "run %s verified", x);
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "problems"), 0);
    cr_expect_str_eq(sget(p, "file"), file);
    if (text) cr_expect(strstr(sget(p, "problem"), text) != NULL, "run %s: %s", x, sget(p, "problem"));
}

/* A copy of a real run with its recorded values edited (tests/audit/audit_invariants_edit.py): never equivalent.
 * Its digests left stale, it does not verify (exit 3: the run and the file named); recomputed (an unsigned
 * run: anyone who can write it can), it verifies and the diff names the value (exit 1); with --key, its
 * signature is then stale (exit 3, manifest.dsse.json).  The honest rerun is equivalent, signed or not. */
Test(audit_diff, edited_copy_is_never_equivalent, .init = setup, .fini = teardown, .timeout = 300) {
    train("a", "--seed 1");
    train("a2", "--seed 1");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, SIGN " keygen --private %s/k.pem --public %s/k.pub >/dev/null && " SIGN
             " sign %s/a --key %s/k.pem >/dev/null && " SIGN " sign %s/a2 --key %s/k.pem >/dev/null",
             tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    static char kpub[600]; /* path_of's buffers are reused */
    snprintf(kpub, sizeof kpub, "%s/k.pub", tmpdir);
    const char *keys[] = {kpub, NULL};
    int v = -1;

    /* the honest pair: equivalent, and with the key both signatures verified */
    cr_expect_eq(diff2("a", "a2"), 0, "%s%s", out, errt);
    cJSON *doc = diff_doc_opt("a", "a2", keys, true, &v);
    cr_expect_eq(v, LS_AUDIT_DIFF_EQUIVALENT, "%s", cJSON_PrintUnformatted(doc));
    cr_expect_str_eq(sget(verification(doc, "b"), "signature"), "verified");
    cr_expect_eq(strlen(sget(verification(doc, "b"), "keyid")), 64);
    cJSON_Delete(doc);

    /* another loss and reward at step 1, the digests left as they were: B does not verify */
    sh("cp -r %s/a %s/e1");
    snprintf(cmd, sizeof cmd, EDIT " %s/e1 metrics 0 1 loss=*1.5 reward_mean=+0.25 keep-digests >/dev/null", tmpdir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_expect_eq(diff2("a", "e1"), 3, "%s%s", out, errt);
    cr_expect(strstr(out, "verdict: UNVERIFIED: run B (") != NULL && strstr(out, "e1) does not verify") != NULL,
              "%s", out);
    cr_expect(strstr(errt, "rank-0000/events.jsonl.zst") != NULL, "stderr names the file: %s", errt);
    doc = diff_doc("a", "e1");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(verification(doc, "a"), "verified")));
    expect_problem(doc, "b", "rank-0000/events.jsonl.zst", "the manifest says");
    cr_expect(strstr(sget(doc, "unverified"), "run B (") != NULL, "%s", sget(doc, "unverified"));
    cr_expect_not_null(find_div(doc, "event_values", 0), "the edited values are still named");
    cJSON_Delete(doc);
    /* in either order: A named */
    cr_expect_eq(diff2("e1", "a"), 3, "%s%s", out, errt);
    cr_expect(strstr(out, "verdict: UNVERIFIED: run A (") != NULL, "%s", out);

    /* the same edit, every digest recomputed: it verifies (unsigned), and the values differ */
    sh("cp -r %s/a %s/e2");
    snprintf(cmd, sizeof cmd, EDIT " %s/e2 metrics 0 1 loss=*1.5 reward_mean=+0.25 > %s/seq.txt", tmpdir, tmpdir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    FILE *f = fopen(path_of("seq.txt"), "r");
    long seq = -1;
    cr_assert_eq(fscanf(f, "%ld", &seq), 1);
    fclose(f);
    cr_expect_eq(diff2("a", "e2"), 1, "%s%s", out, errt);
    cr_expect(strstr(out, "verdict: DIFFERENT") != NULL, "%s", out);
    doc = diff_doc("a", "e2");
    const cJSON *d = find_div(doc, "event_values", 0);
    cr_assert_not_null(d, "%s", out);
    cr_expect_eq((long)nget(cJSON_GetObjectItem(d, "a"), "seq"), seq);
    cr_expect_eq((long)nget(cJSON_GetObjectItem(d, "b"), "seq"), seq);
    cr_expect(!strcmp(sget(d, "key"), "loss") || !strcmp(sget(d, "key"), "reward_mean"), "key %s", sget(d, "key"));
    cr_expect_null(find_div(doc, "event_sequence", -1), "the structure is the same");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(verification(doc, "b"), "verified")));
    cJSON_Delete(doc);
    /* with the trusted key its envelope no longer signs its manifest: unverified, the envelope named */
    doc = diff_doc_opt("a", "e2", keys, false, &v);
    cr_expect_eq(v, LS_AUDIT_DIFF_UNVERIFIED);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(verification(doc, "a"), "verified")));
    expect_problem(doc, "b", "manifest.dsse.json", "not the bytes of manifest.json");
    cr_expect_str_eq(sget(verification(doc, "b"), "signature"), "unverified");
    cJSON_Delete(doc);
    {
        const char *argv[] = {"diff", path_of("a"), path_of("e2"), "--key", kpub};
        cr_expect_eq(diff_main(5, argv), 3, "%s%s", out, errt);
        cr_expect(strstr(out, "manifest.dsse.json") != NULL, "%s", out);
    }

#ifdef LS_SWAP_PRELOAD
    /* one read: e2's trace answered with A's bytes when the comparison opens it (its 2nd open; the 1st is
       its verification, which digests the bytes it parses): the comparison would see A's very events, and
       the bytes it read are not the ones the manifest digests: unverified, never equivalent */
    snprintf(cmd, sizeof cmd,
             "LD_PRELOAD=" LS_SWAP_PRELOAD " LS_SWAP_PATH=%s/e2/rank-0000/events.jsonl.zst "
             "LS_SWAP_WITH=%s/a/rank-0000/events.jsonl.zst LS_SWAP_OPENS=2 LS_SWAP_LOG=%s/swap.log "
             LS_AUDIT_EXE " diff %s/a %s/e2 >%s/swap.out 2>&1", tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir);
    int rc = system(cmd);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 3, "exit %d: %s", rc, cmd);
    snprintf(cmd, sizeof cmd, "grep -q '^open 2 swapped' %s/swap.log && grep -q 'the bytes the comparison read have "
             "sha256' %s/swap.out && grep -q 'verdict: UNVERIFIED: run B' %s/swap.out", tmpdir, tmpdir, tmpdir);
    cr_expect_eq(system(cmd), 0, "the comparison's read was swapped and named (%s/swap.out)", tmpdir);
    snprintf(cmd, sizeof cmd, "grep -q '(0 divergences found besides)' %s/swap.out", tmpdir);
    cr_expect_eq(system(cmd), 0, "the swapped bytes are A's: the comparison alone would have called them equivalent");
#endif

    /* another value of the trace (a layer's output norm), re-digested: named by its key */
    sh("cp -r %s/a %s/e3");
    snprintf(cmd, sizeof cmd, EDIT " %s/e3 event 0 layer_end 5 out_norm=*1.001 >/dev/null", tmpdir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    doc = diff_doc_opt("a", "e3", NULL, false, &v);
    cr_expect_eq(v, LS_AUDIT_DIFF_DIFFERENT);
    d = find_div(doc, "event_values", 0);
    cr_assert_not_null(d);
    cr_expect_str_eq(sget(d, "key"), "out_norm");
    cJSON_Delete(doc);

    /* --require-signed without a key: no run can verify; an unsigned run with a key: its envelope is missing */
    doc = diff_doc_opt("a", "a2", NULL, true, &v);
    cr_expect_eq(v, LS_AUDIT_DIFF_UNVERIFIED);
    expect_problem(doc, "a", "manifest.dsse.json", "--require-signed");
    cJSON_Delete(doc);
    train("u", "--seed 1");
    doc = diff_doc_opt("a", "u", keys, false, &v);
    cr_expect_eq(v, LS_AUDIT_DIFF_UNVERIFIED);
    expect_problem(doc, "b", "manifest.dsse.json", "not signed");
    cJSON_Delete(doc);
    cr_expect_eq(diff2("a", "u"), 0, "%s%s", out, errt); /* without a key the unsigned rerun is equivalent */

    /* --json of an unverified comparison: valid against its schema */
    const char *argv[] = {"diff", path_of("a"), path_of("e1"), "--json", path_of("u.json")};
    cr_expect_eq(diff_main(5, argv), 3);
    cJSON *j = NULL;
    char e[512];
    cr_assert_eq(ls_json_read_file(path_of("u.json"), &j, e, sizeof e), LS_OK, "%s", e);
    ls_schema_free(expect_diff_schema_valid(j));
    cr_expect_str_eq(sget(j, "verdict"), "unverified");
    cJSON_Delete(j);
}

/* Line k (1-based) of the decompressed trace, its "ev" into ev. */
static void plain_ev(const char *run, int line, char *ev, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "zstd -dc %s/%s/rank-0000/events.jsonl.zst | sed -n '%dp' > %s/line.txt", tmpdir, run,
             line, tmpdir);
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(path_of("line.txt"), "rb");
    static char b[1 << 16];
    size_t n = fread(b, 1, sizeof b - 1, f);
    b[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(b);
    cr_assert_not_null(j, "line %d of %s", line, run);
    snprintf(ev, cap, "%s", cJSON_GetObjectItem(j, "ev")->valuestring);
    cJSON_Delete(j);
}

/* The same model from another config file (one byte more) and the same
 * seed: the recorded inputs are the only configuration difference, named
 * once the options agree (inputs come last: another seed also starts from
 * other weights, and the seed is the cause). */
Test(audit_diff, another_config_file_is_an_input_difference, .init = setup, .fini = teardown, .timeout = 300) {
    train("a", "--seed 1");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cp %s %s/c.json && printf '\\n' >> %s/c.json && OMP_NUM_THREADS=1 %s --config %s/c.json --prompt-len 64 "
             "--steps 2 --quiet --seed 1 --out %s/c >%s/train.out 2>&1",
             CFG, tmpdir, tmpdir, TRAIN, tmpdir, tmpdir, tmpdir);
    cr_assert_eq(system(cmd), 0, "trainer failed: %s", cmd);
    cr_expect_eq(diff2("a", "c"), 1, "%s%s", out, errt);
    cr_expect(strstr(out, "FIRST DIVERGENCE (config): configuration key inputs.config") != NULL, "%s", out);
    cr_expect(strstr(out, "param_digest") == NULL, "the same model and seed compute the same: %s", out);
}

Test(audit_diff, truncated_traces_named_where_they_end, .init = setup, .fini = teardown, .timeout = 300) {
    train("a", "--seed 1");
    /* cut at a line boundary: the header and events 0..99, recompressed */
    sh("cp -r %s/a %s/cut");
    sh("zstd -dc %s/a/rank-0000/events.jsonl.zst | head -101 | zstd -q -c > %s/cut/rank-0000/events.jsonl.zst");
    /* the copy no longer matches its manifest: unverified (exit 3), and still compared */
    cr_expect_eq(diff2("a", "cut"), 3, "%s%s", out, errt);
    cr_expect(strstr(out, "ends incomplete after seq 99") != NULL, "%s", out);
    cr_expect(strstr(out, "verdict: UNVERIFIED: run B (") && strstr(out, "rank-0000/events.jsonl.zst"), "%s", out);
    cJSON *doc = diff_doc("a", "cut");
    cr_expect_str_eq(first_what(doc), "event_sequence");
    const cJSON *d = cJSON_GetObjectItem(doc, "first_divergence");
    const cJSON *sa = cJSON_GetObjectItem(d, "a"), *sb = cJSON_GetObjectItem(d, "b");
    cr_expect_eq(nget(d, "rank"), 0);
    cr_expect_eq(nget(sa, "seq"), 100);
    cr_expect_eq(nget(sa, "line"), 102);
    char ev[64];
    plain_ev("a", 102, ev, sizeof ev);
    cr_expect(!strncmp(sget(sa, "event"), ev, strlen(ev)), "A's event '%s', line 102 is %s", sget(sa, "event"), ev);
    cr_expect_str_eq(sget(sb, "end"), "incomplete");
    cr_expect_eq(nget(sb, "last_seq"), 99);
    cr_expect_str_eq(sget(sb, "file"), "rank-0000/events.jsonl.zst");
    cJSON_Delete(doc);

    /* cut inside a zstd frame: half the file */
    sh("cp -r %s/a %s/half");
    struct stat stt;
    cr_assert_eq(stat(path_of("half/rank-0000/events.jsonl.zst"), &stt), 0);
    cr_assert_eq(truncate(path_of("half/rank-0000/events.jsonl.zst"), stt.st_size / 2), 0);
    cr_expect_eq(diff2("a", "half"), 3, "%s%s", out, errt);
    doc = diff_doc("a", "half");
    d = cJSON_GetObjectItem(doc, "first_divergence");
    cr_expect_str_eq(first_what(doc), "event_sequence");
    sa = cJSON_GetObjectItem(d, "a"), sb = cJSON_GetObjectItem(d, "b");
    cr_expect_str_eq(sget(sb, "end"), "truncated");
    int64_t last = (int64_t)nget(sb, "last_seq");
    cr_expect_eq((int64_t)nget(sa, "seq"), last + 1, "A goes on right after B's last event");
    cr_expect_eq(nget(sb, "byte_offset"), (double)(stt.st_size / 2), "where the file ends");
    cr_expect(strstr(sget(sb, "problem"), "zstd frame") != NULL, "%s", sget(sb, "problem"));
    /* never more than the bytes hold: zstd -dc of the cut file has at least
     * the header and the events up to last_seq as complete lines */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "zstd -dc %s/half/rank-0000/events.jsonl.zst 2>/dev/null | wc -l > %s/n.txt", tmpdir,
             tmpdir);
    system(cmd);
    FILE *f = fopen(path_of("n.txt"), "r");
    long lines = -1;
    cr_assert_eq(fscanf(f, "%ld", &lines), 1);
    fclose(f);
    cr_expect_geq(lines, last + 2, "zstd -dc decodes %ld lines, the diff claims seq %lld", lines, (long long)last);
    cr_expect_gt(last, 10, "half the file holds more than 10 events");
    plain_ev("a", (int)last + 3, ev, sizeof ev);
    cr_expect(!strncmp(sget(sa, "event"), ev, strlen(ev)), "A's event '%s', line %lld is %s", sget(sa, "event"),
              (long long)last + 3, ev);
    cJSON_Delete(doc);

    /* a symbolic link in place of the trace is refused, never followed
     * (it points at A's very trace: followed, the runs would agree) */
    sh("cp -r %s/a %s/link");
    sh("cd %s/link/rank-0000 && rm events.jsonl.zst && ln -s %s/a/rank-0000/events.jsonl.zst events.jsonl.zst");
    cr_expect_eq(diff2("a", "link"), 3, "%s%s", out, errt);
    doc = diff_doc("a", "link");
    d = find_div(doc, "rank_missing", 0);
    cr_expect_not_null(d, "%s", out);
    cr_expect(strstr(sget(cJSON_GetObjectItem(d, "b"), "problem"), "symbolic link") != NULL, "%s", out);
    cJSON_Delete(doc);

    /* garbage in place of the trace: named, no crash */
    sh("cp -r %s/a %s/junk");
    sh("head -c 5000 /dev/urandom > %s/junk/rank-0000/events.jsonl.zst");
    cr_expect_eq(diff2("a", "junk"), 3, "%s%s", out, errt);
    doc = diff_doc("a", "junk");
    d = cJSON_GetObjectItem(doc, "first_divergence");
    cr_expect_str_eq(first_what(doc), "event_sequence");
    cr_expect_eq(nget(cJSON_GetObjectItem(d, "a"), "seq"), 0);
    cr_expect_eq(nget(cJSON_GetObjectItem(d, "b"), "last_seq"), -1);
    cJSON_Delete(doc);
}

Test(audit_diff, unusable_input_and_usage, .init = setup, .fini = teardown, .timeout = 120) {
    train("a", "--seed 1");
    sh("mkdir %s/empty && echo hi > %s/file");
    cr_expect_eq(diff2("a", "nowhere"), 2);
    cr_expect(strstr(errt, "nowhere") != NULL, "%s", errt);
    cr_expect_eq(diff2("a", "file"), 2);
    cr_expect(strstr(errt, "not a directory") != NULL, "%s", errt);
    cr_expect_eq(diff2("empty", "a"), 2);
    cr_expect(strstr(errt, "A ") != NULL && strstr(errt, "empty") != NULL, "%s", errt);
    /* a run whose every rank lost its trace, both sides: nothing to compare */
    sh("cp -r %s/a %s/nt && rm %s/nt/rank-0000/events.jsonl.zst");
    sh("cp -r %s/nt %s/nt2");
    cr_expect_eq(diff2("nt", "nt2"), 2, "%s", out);
    cr_expect(strstr(errt, "rank 0") != NULL, "%s", errt);
    /* a tampered manifest: noted, the receipts used for the comparison; nothing binds B's files: unverified */
    sh("cp -r %s/a %s/tm && echo '{' > %s/tm/manifest.json");
    cr_expect_eq(diff2("a", "tm"), 3, "%s%s", out, errt);
    cr_expect(strstr(out, "note: B: manifest not used") != NULL, "%s", out);
    cr_expect(strstr(out, "NOT VERIFIED (manifest invalid") != NULL && strstr(out, "verdict: UNVERIFIED") != NULL, "%s",
              out);
    cr_expect(strstr(errt, "run B (") != NULL && strstr(errt, "manifest.json") != NULL, "%s", errt);

    const char *u1[] = {"diff"};
    cr_expect_eq(diff_main(1, u1), 2);
    cr_expect(strstr(errt, "RUN_A") != NULL, "%s", errt);
    const char *u2[] = {"diff", path_of("a")};
    cr_expect_eq(diff_main(2, u2), 2);
    cr_expect(strstr(errt, "RUN_B") != NULL, "%s", errt);
    const char *u3[] = {"diff", path_of("a"), path_of("a"), "--frobnicate"};
    cr_expect_eq(diff_main(4, u3), 2);
    cr_expect(strstr(errt, "--frobnicate") != NULL, "%s", errt);
    const char *u4[] = {"diff", path_of("a"), path_of("a"), "--json"};
    cr_expect_eq(diff_main(4, u4), 2);
    cr_expect(strstr(errt, "--json") != NULL, "%s", errt);
    const char *u5[] = {"diff", path_of("a"), path_of("a"), path_of("a")};
    cr_expect_eq(diff_main(4, u5), 2);
    const char *u6[] = {"audit", path_of("a"), path_of("a")};
    cr_expect_eq(diff_main(3, u6), 2);
    const char *u9[] = {"diff", path_of("a"), path_of("a"), "--key"};
    cr_expect_eq(diff_main(4, u9), 2);
    cr_expect(strstr(errt, "--key") != NULL, "%s", errt);
    const char *u7[] = {"diff", path_of("a"), path_of("a"), "--json", path_of("nodir/x.json")};
    cr_expect_eq(diff_main(5, u7), 2, "an unwritable --json file");
    cr_expect(strstr(errt, "nodir/x.json") != NULL, "%s", errt);
    const char *u8[] = {"diff", path_of("a"), path_of("a")};
    cr_expect_eq(diff_main(3, u8), 0, "%s", errt);
}

#ifdef LS_MPIEXEC
/* longstraw-train under mpirun -np 2 into tmpdir/name. */
static void train_cp(const char *name, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
             ":print_suppressions=0 timeout 120 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 %s --config %s --prompt-len 67 "
             "--response-len 5 --group 2 --steps 2 --page-size 8 --beta 0.04 --lora-init random --grad-mode full "
             "--dtype f64 --quiet %s --out %s/%s >%s/train.out 2>&1",
             TRAIN, CFG, extra, tmpdir, name, tmpdir);
    cr_assert_eq(system(cmd), 0, "trainer failed: %s", cmd);
}

Test(audit_diff, cp_runs, .init = setup, .fini = teardown, .timeout = 600) {
    train_cp("c", "");
    train_cp("c2", "");
    train_cp("f", "--fault skip-dkv-reduce");
    cr_expect_eq(diff2("c", "c2"), 0, "%s%s", out, errt);
    cJSON *doc = diff_doc("c", "c2");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "ranks")), 2);
    cr_expect_eq(nget(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "runs"), "a"), "world"), 2);
    cJSON_Delete(doc);

    /* the fault: in the configuration (faults), and at the first digest */
    cr_expect_eq(diff2("c", "f"), 1, "%s%s", out, errt);
    doc = diff_doc("c", "f");
    const cJSON *d = cJSON_GetObjectItem(doc, "first_divergence");
    cr_expect_str_eq(sget(d, "what"), "config");
    cr_expect_str_eq(sget(d, "key"), "faults[0]");
    expect_digest_div(doc, "c", "f", 0);
    cr_expect_eq(nget(find_div(doc, "param_digest", -1), "step"), 0);
    /* and the skipped reduction is where the event sequences part */
    for (int r = 0; r < 2; r++) {
        const cJSON *e = find_div(doc, "event_sequence", r);
        cr_assert_not_null(e, "rank %d: no event sequence divergence:\n%s", r, out);
        cr_expect(strstr(sget(cJSON_GetObjectItem(e, "a"), "event"), "purpose=dkv") != NULL, "rank %d: %s", r,
                  sget(e, "detail"));
    }
    cJSON_Delete(doc);

    /* a deleted rank directory: named, the other rank still compared */
    sh("cp -r %s/c %s/c1 && rm -r %s/c1/rank-0001");
    cr_expect_eq(diff2("c", "c1"), 3, "%s%s", out, errt); /* its manifest lists rank 1's files: unverified */
    doc = diff_doc("c", "c1");
    d = find_div(doc, "rank_missing", 1);
    cr_expect_not_null(d, "%s", out);
    cr_expect_null(find_div(doc, "event_sequence", 0), "rank 0 agrees");
    cr_expect_str_eq(first_what(doc), "rank_missing");
    cr_expect(strstr(out, "no receipt in B") != NULL, "%s", out);
    cJSON_Delete(doc);
}
#endif
