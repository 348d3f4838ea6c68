/* test_audit_forensics.c - longstraw-audit's forensics against CP-2 runs the
 * trainer makes under mpirun: one rank SIGKILLed at several points
 * (--fault kill-rank=R@PHASE[:L]), the skip-dkv-reduce fault (replicated
 * digests apart), and a trace edited so that one collective's count differs.
 *
 * The independent reference is the traces themselves, read here with
 * `zstd -dc` and cJSON line by line (not with the audit's loader): every
 * rank's last event, last phase begun and last layer_end, its collectives
 * by (group, gseq), its "trainable" digest per step.  The audit's JSON
 * report (valid against its schema) must name exactly what they show, and
 * the killed rank must be where the fault put it. */
#define MPI_PREFIX                                                                                                    \
    "OMP_NUM_THREADS=1 timeout 120 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 " TRAIN " --config " CFG                \
    " --prompt-len 64 --quiet --steps 2 --grad-mode full"
#define MAX_COLL 8192

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("audit-forensics")

typedef struct {
    long long gseq, count;
    char group[16], purpose[48];
} coll;

/* What one rank's trace shows, read independently of the audit. */
typedef struct {
    long long last_seq;
    char last_ev[32], last_phase[32];
    long long l_step, l_member, l_layer; /* the last layer_end (-2 none) */
    char l_phase[32], l_dir[8];
    bool complete;
    coll *c;
    size_t n_c;
    char digest[8][65]; /* "trainable" per step */
} trace_facts;

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}
static long long num_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -999;
}

static void read_trace(const char *run, int rank, trace_facts *f) {
    memset(f, 0, sizeof *f);
    f->l_step = f->l_member = f->l_layer = -2;
    f->last_seq = -1;
    f->c = calloc(MAX_COLL, sizeof *f->c);
    cr_assert_not_null(f->c);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "zstd -dc '%s/rank-%04d/events.jsonl.zst' 2>/dev/null", run, rank);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    static char line[1 << 16];
    while (fgets(line, sizeof line, p)) {
        cJSON *e = cJSON_Parse(line);
        if (e == NULL) continue; /* a cut last line */
        const char *ev = str_of(e, "ev");
        if (ev[0]) { /* not the header */
            f->last_seq = num_of(e, "seq");
            snprintf(f->last_ev, sizeof f->last_ev, "%s", ev);
        }
        if (!strcmp(ev, "phase_begin")) snprintf(f->last_phase, sizeof f->last_phase, "%s", str_of(e, "phase"));
        if (!strcmp(ev, "rank_complete")) f->complete = true;
        if (!strcmp(ev, "layer_end")) {
            f->l_step = num_of(e, "step");
            f->l_member = num_of(e, "member");
            f->l_layer = num_of(e, "layer");
            snprintf(f->l_phase, sizeof f->l_phase, "%s", str_of(e, "phase"));
            snprintf(f->l_dir, sizeof f->l_dir, "%s", str_of(e, "dir"));
        }
        if (!strcmp(ev, "collective") && f->n_c < MAX_COLL) {
            coll *c = &f->c[f->n_c++];
            c->gseq = num_of(e, "gseq");
            c->count = num_of(e, "count");
            snprintf(c->group, sizeof c->group, "%s", str_of(e, "group"));
            snprintf(c->purpose, sizeof c->purpose, "%s", str_of(e, "purpose"));
        }
        if (!strcmp(ev, "param_digest") && !strcmp(str_of(e, "target"), "trainable")) {
            long long s = num_of(e, "step");
            if (s >= 0 && s < 8) snprintf(f->digest[s], sizeof f->digest[s], "%s", str_of(e, "sha256"));
        }
        cJSON_Delete(e);
    }
    pclose(p);
}

static const coll *find_coll(const trace_facts *f, const char *group, long long gseq) {
    for (size_t i = 0; i < f->n_c; i++)
        if (f->c[i].gseq == gseq && !strcmp(f->c[i].group, group)) return &f->c[i];
    return NULL;
}

/* The audit's JSON report of run (schema-checked); its exit status in *rc. */
static cJSON *audit_json(const char *run, int *rc, const char *name) {
    char json[600], cmd[1600];
    snprintf(json, sizeof json, "%s/%s.json", tmpdir, name);
    snprintf(cmd, sizeof cmd, AUDIT " '%s' --json '%s' >'%s/%s.txt' 2>&1", run, json, tmpdir, name);
    *rc = sh(cmd);
    return read_valid_json(json, "audit-report");
}

static bool text_has(const char *name, const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.txt", tmpdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static bool list_has(const cJSON *a, int r) {
    const cJSON *x;
    cJSON_ArrayForEach(x, a) if (cJSON_IsNumber(x) && x->valueint == r) return true;
    return false;
}

/* The audit's position of rank r equals the trace's. */
static void expect_position(const cJSON *doc, int r, const trace_facts *t, const char *spec) {
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "forensics"), "positions"), r);
    cr_assert_not_null(p, "%s: no forensics position of rank %d", spec, r);
    cr_expect_eq(num_of(p, "seq"), t->last_seq, "%s rank %d: last seq %lld, the trace's %lld", spec, r,
                 num_of(p, "seq"), t->last_seq);
    cr_expect_str_eq(str_of(p, "event"), t->last_ev, "%s rank %d: last event", spec, r);
    cr_expect_str_eq(str_of(p, "phase"), t->last_phase, "%s rank %d: last phase", spec, r);
    cr_expect_eq(num_of(p, "step"), t->l_step, "%s rank %d: step", spec, r);
    cr_expect_eq(num_of(p, "member"), t->l_member, "%s rank %d: member", spec, r);
    cr_expect_eq(num_of(p, "layer"), t->l_layer, "%s rank %d: layer %lld, the trace's %lld", spec, r,
                 num_of(p, "layer"), t->l_layer);
    cr_expect_str_eq(str_of(p, "layer_phase"), t->l_phase, "%s rank %d: layer phase", spec, r);
    cr_expect_str_eq(str_of(p, "layer_dir"), t->l_dir, "%s rank %d: layer dir", spec, r);
    cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(p, "complete")), t->complete, "%s rank %d: complete", spec, r);
}

typedef struct {
    int rank;
    const char *phase;
    int layer; /* -100: as the phase begins */
} kill_point;

static void check_kill(const kill_point *k) {
    char spec[64], run[512], cmd[2048];
    if (k->layer == -100) snprintf(spec, sizeof spec, "kill-rank=%d@%s", k->rank, k->phase);
    else snprintf(spec, sizeof spec, "kill-rank=%d@%s:%d", k->rank, k->phase, k->layer);
    snprintf(run, sizeof run, "%s/run-%s-%d", tmpdir, k->phase, k->rank);
    snprintf(cmd, sizeof cmd, MPI_PREFIX " --fault %s --out '%s' >'%s.log' 2>&1", spec, run, run);
    int trc = sh(cmd);
    cr_assert(trc != 0 && trc != 124, "%s: the trainer exited %d (expected a failure, not a hang)", spec, trc);
    trace_facts t[2];
    read_trace(run, 0, &t[0]);
    read_trace(run, 1, &t[1]);
    const trace_facts *kt = &t[k->rank];
    if (kt->last_phase[0] == '\0') { /* the rank left no phase: say what the trainer said (its log), not just that */
        char logp[600];
        snprintf(logp, sizeof logp, "%s.log", run);
        char *log = slurp_path(logp);
        size_t n = log ? strlen(log) : 0;
        cr_log_error("%s: the killed rank's trace has no phase; the trainer's log (exit %d), its last 2000 bytes:\n%s",
                     spec, trc, log ? log + (n > 2000 ? n - 2000 : 0) : "(none)");
        free(log);
    }
    /* the fault put the rank where it asked (the trace shows it) */
    cr_expect(!kt->complete, "%s: the killed rank completed", spec);
    cr_expect_str_eq(kt->last_phase, k->phase, "%s: the trace's last phase", spec);
    if (k->layer == -100) {
        cr_expect_str_eq(kt->last_ev, "phase_begin", "%s: the killed rank's last event", spec);
    } else {
        cr_expect_str_eq(kt->last_ev, "layer_end", "%s: the killed rank's last event", spec);
        cr_expect_eq(kt->l_layer, k->layer, "%s: the trace's last layer %lld", spec, kt->l_layer);
        cr_expect_str_eq(kt->l_phase, k->phase, "%s: the trace's last layer phase", spec);
    }
    int rc = 0;
    cJSON *doc = audit_json(run, &rc, spec);
    cr_expect_eq(rc, 1, "%s: audit exit %d (a killed run proves no level: 1)", spec, rc);
    const cJSON *fo = cJSON_GetObjectItem(doc, "forensics");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(fo, "crashed")), "%s: not marked crashed", spec);
    for (int r = 0; r < 2; r++) expect_position(doc, r, &t[r], spec);
    /* the text report names the killed rank, its phase and layer */
    char needle[200];
    if (k->layer == -100)
        snprintf(needle, sizeof needle, "rank %d stopped: last phase %s (begun, not ended)", k->rank, k->phase);
    else
        snprintf(needle, sizeof needle, "layer %d (%s ", k->layer, k->phase);
    cr_expect(text_has(spec, needle), "%s: the text report lacks '%s'", spec, needle);
    /* the first collective one rank entered and the other did not: the
     * smallest cp gseq in exactly one trace */
    long long first = -1;
    int in = -1;
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < t[r].n_c; i++) {
            if (strcmp(t[r].c[i].group, "cp") != 0 || find_coll(&t[1 - r], "cp", t[r].c[i].gseq)) continue;
            if (first < 0 || t[r].c[i].gseq < first) {
                first = t[r].c[i].gseq;
                in = r;
            }
        }
    const cJSON *dc = cJSON_GetObjectItem(fo, "divergent_collective");
    if (first < 0) {
        cr_expect(cJSON_IsNull(dc), "%s: the traces show no split collective, the audit names one", spec);
    } else {
        cr_assert(cJSON_IsObject(dc), "%s: the traces split at cp gseq %lld, the audit names none", spec, first);
        cr_expect_str_eq(str_of(dc, "group"), "cp", "%s", spec);
        cr_expect_eq(num_of(dc, "gseq"), first, "%s: split gseq %lld, the traces' %lld", spec, num_of(dc, "gseq"),
                     first);
        cr_expect_str_eq(str_of(dc, "purpose"), find_coll(&t[in], "cp", first)->purpose, "%s: purpose", spec);
        cr_expect(list_has(cJSON_GetObjectItem(dc, "ranks_entered"), in), "%s: rank %d entered", spec, in);
        cr_expect(list_has(cJSON_GetObjectItem(dc, "ranks_missing"), 1 - in), "%s: rank %d missing", spec, 1 - in);
        cr_expect_eq(in, 1 - k->rank, "%s: the survivor (rank %d) entered it, not the killed rank", spec, 1 - k->rank);
        snprintf(needle, sizeof needle, "gseq %lld purpose %s", first, find_coll(&t[in], "cp", first)->purpose);
        cr_expect(text_has(spec, needle), "%s: the text report lacks '%s'", spec, needle);
    }
    fprintf(stderr, "%s: killed rank at %s (%s seq %lld, layer %lld); other rank at %s (%s seq %lld); split cp gseq "
                    "%lld\n",
            spec, kt->last_phase, kt->last_ev, kt->last_seq, kt->l_layer, t[1 - k->rank].last_phase,
            t[1 - k->rank].last_ev, t[1 - k->rank].last_seq, first);
    cJSON_Delete(doc);
    free(t[0].c);
    free(t[1].c);
}

Test(audit_forensics, killed_rank_at_five_points, .init = setup, .fini = teardown, .timeout = 600) {
    const kill_point pts[] = {
        {1, "capture", 2}, {0, "score", -100}, {1, "prompt_bwd", 5}, {0, "optimizer", -100}, {1, "replay", -100},
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) check_kill(&pts[i]);
}

Test(audit_forensics, bad_kill_point_is_usage, .init = setup, .fini = teardown) {
    const char *bad[] = {"kill-rank=1@bogus", "kill-rank=1@capture:99", "kill-rank=1@capture:x", "kill-rank=@replay",
                         "kill-rank=1@"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], log[600];
        snprintf(log, sizeof log, "%s/bad%zu.log", tmpdir, i);
        snprintf(cmd, sizeof cmd, TRAIN " --config " CFG " --out '%s/bad' --fault '%s' >'%s' 2>&1", tmpdir, bad[i],
                 log);
        cr_expect_eq(sh(cmd), 2, "%s: not a usage error", bad[i]);
        FILE *f = fopen(log, "rb");
        char buf[4096] = "";
        if (f) {
            buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
            fclose(f);
        }
        cr_expect(strstr(buf, "kill-rank") != NULL, "%s: the message does not name the argument: %s", bad[i], buf);
    }
}

Test(audit_forensics, skip_dkv_reduce_digests_apart_from_the_first_step, .init = setup, .fini = teardown,
     .timeout = 300) {
    char run[512], cmd[2048];
    snprintf(run, sizeof run, "%s/dkv", tmpdir);
    snprintf(cmd, sizeof cmd, MPI_PREFIX " --fault skip-dkv-reduce --out '%s' >'%s.log' 2>&1", run, run);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    trace_facts t[2];
    read_trace(run, 0, &t[0]);
    read_trace(run, 1, &t[1]);
    long long first = -1;
    for (int s = 0; s < 2 && first < 0; s++) {
        cr_assert(t[0].digest[s][0] && t[1].digest[s][0], "step %d: a rank has no trainable digest", s);
        if (strcmp(t[0].digest[s], t[1].digest[s]) != 0) first = s;
    }
    cr_assert_geq(first, 0, "the fault left the digests equal (the traces show no disagreement)");
    int rc = 0;
    cJSON *doc = audit_json(run, &rc, "dkv");
    const cJSON *dd = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "forensics"), "digest_disagreement");
    cr_assert(cJSON_IsObject(dd), "no digest disagreement named");
    cr_expect_eq(num_of(dd, "first_step"), first, "first step %lld, the traces' %lld", num_of(dd, "first_step"), first);
    cr_expect_eq(num_of(dd, "reference_rank"), 0);
    const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(dd, "ranks"), 0);
    cr_expect_eq(num_of(r0, "rank"), 1);
    cr_expect_eq(num_of(r0, "first_step"), first);
    char needle[120];
    snprintf(needle, sizeof needle, "replicated digests disagree first at step %lld", first);
    cr_expect(text_has("dkv", needle), "the text report lacks '%s'", needle);
    cJSON_Delete(doc);
    free(t[0].c);
    free(t[1].c);
}

Test(audit_forensics, edited_count_is_a_size_mismatch, .init = setup, .fini = teardown, .timeout = 300) {
    char run[512], cmd[3000];
    snprintf(run, sizeof run, "%s/ok", tmpdir);
    snprintf(cmd, sizeof cmd, MPI_PREFIX " --out '%s' >'%s.log' 2>&1", run, run);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    trace_facts t[2];
    read_trace(run, 0, &t[0]);
    int rc = 0;
    cJSON *doc = audit_json(run, &rc, "ok");
    const cJSON *fo = cJSON_GetObjectItem(doc, "forensics");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(fo, "mismatched_sizes")), 0, "a clean run has mismatches");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(fo, "divergent_collective")));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(fo, "digest_disagreement")));
    cJSON_Delete(doc);
    /* the 40th collective of rank 1 gets count + 1 */
    cr_assert_gt(t[0].n_c, 40);
    const coll *c = &t[0].c[40];
    const char *tr = "rank-0001/events.jsonl.zst";
    snprintf(cmd, sizeof cmd,
             "cd '%s' && zstd -dc %s > e.jsonl && awk 'BEGIN{n=0} /\"ev\":\"collective\"/ && /\"gseq\":%lld,/ "
             "&& /\"group\":\"cp\"/ {sub(/\"count\":%lld,/, \"\\\"count\\\":%lld,\"); n++} {print} END{if(n!=1) exit 1}' "
             "e.jsonl > f.jsonl && zstd -q -f --check f.jsonl -o %s && rm e.jsonl f.jsonl",
             run, tr, c->gseq, c->count, c->count + 1, tr);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    doc = audit_json(run, &rc, "edited");
    fo = cJSON_GetObjectItem(doc, "forensics");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(fo, "mismatched_sizes"), 0);
    cr_assert_not_null(m, "no mismatched size named");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(fo, "mismatched_sizes")), 1);
    cr_expect_str_eq(str_of(m, "group"), "cp");
    cr_expect_eq(num_of(m, "gseq"), c->gseq, "gseq %lld, edited %lld", num_of(m, "gseq"), c->gseq);
    cr_expect_str_eq(str_of(m, "purpose"), c->purpose);
    cr_expect_eq(num_of(m, "rank"), 1);
    cr_expect_eq(num_of(m, "count"), c->count + 1);
    cr_expect_eq(num_of(m, "reference_rank"), 0);
    cr_expect_eq(num_of(m, "reference_count"), c->count);
    char needle[200];
    snprintf(needle, sizeof needle, "mismatched sizes: group cp gseq %lld purpose %s", c->gseq, c->purpose);
    cr_expect(text_has("edited", needle), "the text report lacks '%s'", needle);
    cJSON_Delete(doc);
    free(t[0].c);
}
