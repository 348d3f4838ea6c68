/* test_audit_viz.c - the audit's two pictures of a run, on runs the trainer
 * makes (single rank, and 2 ranks under mpirun when MPI is there):
 *  - the timeline (audit/load/timeline.h) parses as JSON (cJSON), has one
 *    process per rank, as many phase / layer / collective slices and
 *    memory counter points per rank as the trace has phase_end /
 *    layer_end / collective events and memory figures, ranks aligned by
 *    their headers' start_unix_ns, and one flow per collective whose two
 *    ends lie on different ranks at slices naming the same (group, gseq);
 *    a truncated, corrupt, missing or linked trace still gives a timeline
 *    (or a clear refusal when no rank is left);
 *  - the HTML page (audit/report/html.h) has the verdict, the rule table, one
 *    <svg> per rank whose total-memory polyline matches the memory events,
 *    and every hostile string of the run and the report escaped: no
 *    "<script" anywhere.  It also leaves a page for scripts/check_html.sh
 *    (ctest audit_viz_chromium);
 *  - every figure the page draws or prints agrees with the receipt's
 *    byte-exact ones: the marked total peak and category peaks, the y axis
 *    reaching them, the peaks table; a receipt edited to a larger peak moves
 *    the mark; a missing or broken receipt is said so, with no mark.
 * The reference every count is compared with is the trace itself, read
 * independently of the audit: `zstd -dc` piped into cJSON line by line; the
 * receipts' figures are read with cJSON, not with receipts/writing/receipt.h. */
#define _GNU_SOURCE /* strcasestr */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "audit/report/html.h"
#include "audit/load/timeline.h"
#include "tests/support/test_tmpdir.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define CFG LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#define SAMPLE_HTML LS_BINARY_DIR "/tests/audit_viz_sample.html"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "auditviz"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "command failed (%d): %s", st, cmd);
}

/* A run of the trainer: one rank, or np ranks under mpirun. */
static void make_run(const char *name, int np) {
    if (np == 1) {
        sh("timeout 120 %s --config %s --prompt-len 64 --steps 2 --out %s/%s --quiet >%s/train.txt 2>&1", TRAIN,
           CFG, tmpdir, name, tmpdir);
        return;
    }
#ifdef LS_MPIEXEC
    sh("OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
       ":print_suppressions=0 timeout 180 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np %d %s --config %s --prompt-len 64 "
       "--steps 2 --grad-mode full --out %s/%s --quiet >%s/train.txt 2>&1",
       np, TRAIN, CFG, tmpdir, name, tmpdir);
#else
    cr_skip_test("no MPI in this build");
#endif
}

/* ---- the reference: a trace read with zstd and cJSON, not the audit ---- */

#define MAXCOLL 4096
typedef struct {
    int phase_end, layer_end, collective, memory, mem_points;
    double start_unix_ns;
    int64_t first_coll_ts;
    char coll[MAXCOLL][96]; /* "group gseq" */
    int ncoll;
    double totals[1024];     /* total_live of each memory event */
    double cat_max;          /* the largest live figure of any category or total */
    int n_categories;        /* in the first memory event */
    char cat_names[64][80];  /* every category name seen */
    int n_cat_names;
} facts;

static facts *facts_of(const char *trace) {
    facts *f = calloc(1, sizeof *f);
    cr_assert_not_null(f);
    f->first_coll_ts = -1;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "zstd -dcq '%s' 2>/dev/null || cat '%s'", trace, trace);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    int n = 0;
    while (fgets(line, (int)cap, p)) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        if (n++ == 0) {
            f->start_unix_ns = cJSON_GetObjectItem(j, "start_unix_ns")->valuedouble;
            cJSON_Delete(j);
            continue;
        }
        const char *ev = cJSON_GetObjectItem(j, "ev")->valuestring;
        if (!strcmp(ev, "phase_end")) f->phase_end++;
        else if (!strcmp(ev, "layer_end")) f->layer_end++;
        else if (!strcmp(ev, "collective")) {
            if (f->first_coll_ts < 0) f->first_coll_ts = (int64_t)cJSON_GetObjectItem(j, "ts_ns")->valuedouble;
            if (f->ncoll < MAXCOLL)
                snprintf(f->coll[f->ncoll++], sizeof f->coll[0], "%s %d",
                         cJSON_GetObjectItem(j, "group")->valuestring, cJSON_GetObjectItem(j, "gseq")->valueint);
            f->collective++;
        } else if (!strcmp(ev, "memory")) {
            double tot = cJSON_GetObjectItem(j, "total_live")->valuedouble;
            if (f->memory < 1024) f->totals[f->memory] = tot;
            if (tot > f->cat_max) f->cat_max = tot;
            const cJSON *c, *cats = cJSON_GetObjectItem(j, "categories");
            int k = 0;
            cJSON_ArrayForEach(c, cats) {
                double live = cJSON_GetObjectItem(c, "live")->valuedouble;
                if (live > f->cat_max) f->cat_max = live;
                k++;
                int seen = 0;
                for (int q = 0; q < f->n_cat_names; q++) seen |= !strcmp(f->cat_names[q], c->string);
                if (!seen && f->n_cat_names < 64) snprintf(f->cat_names[f->n_cat_names++], 80, "%s", c->string);
            }
            if (f->memory == 0) f->n_categories = k;
            f->mem_points += 1 + k;
            f->memory++;
        }
        cJSON_Delete(j);
    }
    free(line);
    pclose(p);
    return f;
}

static facts *facts_rank(const char *run, int r) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/rank-%04d/events.jsonl.zst", tmpdir, run, r);
    return facts_of(path);
}

static char *slurp_path(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}

static cJSON *load_json(const char *path) {
    char *text = slurp_path(path, NULL);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s does not parse as JSON (near %.80s)", path, cJSON_GetErrorPtr());
    free(text);
    return j;
}

/* ---- the timeline's facts ---- */

typedef struct {
    char ph[4];
    int pid;
    double ts;
    const char *cat, *name;
    const cJSON *args;
    double id;
} tev;

typedef struct {
    cJSON *root;
    tev *e;
    int n;
    const char *notes;
} timeline;

static timeline read_timeline(const char *path) {
    timeline t = {0};
    t.root = load_json(path);
    const cJSON *arr = cJSON_GetObjectItem(t.root, "traceEvents");
    cr_assert(cJSON_IsArray(arr), "%s: no traceEvents array", path);
    t.e = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *t.e);
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) {
        tev *v = &t.e[t.n++];
        const cJSON *ph = cJSON_GetObjectItem(x, "ph"), *pid = cJSON_GetObjectItem(x, "pid");
        cr_assert(cJSON_IsString(ph) && cJSON_IsNumber(pid), "event %d lacks ph or pid", t.n);
        snprintf(v->ph, sizeof v->ph, "%s", ph->valuestring);
        v->pid = pid->valueint;
        const cJSON *ts = cJSON_GetObjectItem(x, "ts");
        v->ts = cJSON_IsNumber(ts) ? ts->valuedouble : -1;
        if (strcmp(v->ph, "M") != 0) cr_assert(cJSON_IsNumber(ts), "event %d (%s) has no ts", t.n, v->ph);
        const cJSON *cat = cJSON_GetObjectItem(x, "cat"), *name = cJSON_GetObjectItem(x, "name");
        v->cat = cJSON_IsString(cat) ? cat->valuestring : "";
        v->name = cJSON_IsString(name) ? name->valuestring : "";
        v->args = cJSON_GetObjectItem(x, "args");
        const cJSON *id = cJSON_GetObjectItem(x, "id");
        v->id = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!strcmp(v->ph, "X")) cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(x, "dur")), "X without dur");
    }
    const cJSON *od = cJSON_GetObjectItem(t.root, "otherData");
    cr_assert(cJSON_IsObject(od), "%s: no otherData", path);
    t.notes = cJSON_GetObjectItem(od, "notes")->valuestring;
    return t;
}

static void free_timeline(timeline *t) {
    free(t->e);
    cJSON_Delete(t->root);
}

static int count(const timeline *t, const char *ph, int pid, const char *cat) {
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].ph, ph) && t->e[i].pid == pid && (!cat || !strcmp(t->e[i].cat, cat)) &&
            !cJSON_IsTrue(cJSON_GetObjectItem(t->e[i].args, "unfinished")))
            n++;
    return n;
}

static bool has_process(const timeline *t, int pid) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].ph, "M") && t->e[i].pid == pid && !strcmp(t->e[i].name, "process_name")) return true;
    return false;
}

static int count_processes(const timeline *t) {
    int n = 0;
    for (int i = 0; i < t->n; i++) n += !strcmp(t->e[i].ph, "M") && !strcmp(t->e[i].name, "process_name");
    return n;
}

/* The collective slice a flow event binds to: same pid, same ts. */
static const tev *slice_at(const timeline *t, int pid, double ts) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].ph, "X") && !strcmp(t->e[i].cat, "collective") && t->e[i].pid == pid && t->e[i].ts == ts)
            return &t->e[i];
    return NULL;
}

/* Every check of a complete run's timeline against the traces. */
static void check_timeline(const char *run, int world) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.timeline.json", tmpdir, run);
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    cr_assert_eq(ls_audit_timeline_write(dir, path, err, sizeof err), 0, "%s", err);
    timeline t = read_timeline(path);
    cr_expect_eq(count_processes(&t), world, "%d processes, want %d", count_processes(&t), world);
    facts *f[2] = {NULL, NULL};
    double base = INFINITY;
    for (int r = 0; r < world; r++) {
        f[r] = facts_rank(run, r);
        if (f[r]->start_unix_ns < base) base = f[r]->start_unix_ns;
    }
    double max_align_err = 0;
    for (int r = 0; r < world; r++) {
        cr_expect(has_process(&t, r), "no process for rank %d", r);
        cr_expect(f[r]->phase_end > 0 && f[r]->collective + f[r]->layer_end > 0, "rank %d: empty fixture", r);
        cr_expect_eq(count(&t, "X", r, "phase"), f[r]->phase_end, "rank %d: %d phase slices, %d phase_end events", r,
                     count(&t, "X", r, "phase"), f[r]->phase_end);
        cr_expect_eq(count(&t, "X", r, "layer"), f[r]->layer_end, "rank %d: %d layer slices, %d layer_end", r,
                     count(&t, "X", r, "layer"), f[r]->layer_end);
        cr_expect_eq(count(&t, "X", r, "collective"), f[r]->collective, "rank %d: collective slices", r);
        cr_expect_eq(count(&t, "C", r, "memory"), f[r]->mem_points, "rank %d: %d counter points, %d figures", r,
                     count(&t, "C", r, "memory"), f[r]->mem_points);
        if (f[r]->first_coll_ts >= 0) { /* alignment: the first collective at (start - base + ts_ns) / 1000 */
            int64_t off = (int64_t)f[r]->start_unix_ns - (int64_t)base;
            double want = (double)(off + f[r]->first_coll_ts) / 1000.0;
            double got = -1;
            for (int i = 0; i < t.n && got < 0; i++)
                if (!strcmp(t.e[i].ph, "X") && t.e[i].pid == r && !strcmp(t.e[i].cat, "collective")) got = t.e[i].ts;
            if (fabs(got - want) > max_align_err) max_align_err = fabs(got - want);
        }
    }
    cr_expect(max_align_err < 0.002, "ranks not aligned by start_unix_ns: largest error %.6f us", max_align_err);
    if (world == 2) {
        /* the fixture itself: both ranks saw the same collectives */
        cr_assert_eq(f[0]->ncoll, f[1]->ncoll);
        for (int i = 0; i < f[0]->ncoll; i++) cr_assert_str_eq(f[0]->coll[i], f[1]->coll[i]);
        int flows = 0, bad = 0, s_seen = 0, f_seen = 0;
        for (int i = 0; i < t.n; i++) {
            if (strcmp(t.e[i].ph, "s") != 0) continue;
            s_seen++;
            const tev *a = &t.e[i], *b = NULL;
            int ends = 0;
            for (int k = 0; k < t.n; k++)
                if (!strcmp(t.e[k].ph, "f") && t.e[k].id == a->id) {
                    b = &t.e[k];
                    ends++;
                }
            for (int k = 0; k < t.n; k++)
                if (k != i && !strcmp(t.e[k].ph, "s") && t.e[k].id == a->id) ends += 100; /* an id used twice */
            const tev *sa = slice_at(&t, a->pid, a->ts), *sb = b ? slice_at(&t, b->pid, b->ts) : NULL;
            bool ok = ends == 1 && a->pid == 0 && b->pid == 1 && sa && sb &&
                      !strcmp(cJSON_GetObjectItem(sa->args, "group")->valuestring,
                              cJSON_GetObjectItem(sb->args, "group")->valuestring) &&
                      cJSON_GetObjectItem(sa->args, "gseq")->valueint == cJSON_GetObjectItem(sb->args, "gseq")->valueint;
            if (!ok && bad++ < 3) cr_log_error("flow id %.0f at %.3f us: not one s on rank 0 and one f on rank 1 at the "
                                               "same (group, gseq)", a->id, a->ts);
            flows += ok;
        }
        for (int i = 0; i < t.n; i++) f_seen += !strcmp(t.e[i].ph, "f");
        cr_expect_eq(bad, 0, "%d flows unmatched", bad);
        cr_expect_eq(flows, f[0]->collective, "%d matched flows for %d collectives", flows, f[0]->collective);
        cr_expect_eq(f_seen, s_seen, "%d flow ends, %d flow starts", f_seen, s_seen);
    }
    cr_expect_str_eq(t.notes, "", "notes on a clean run: %s", t.notes);
    for (int r = 0; r < world; r++) free(f[r]);
    free_timeline(&t);
}

Test(audit_viz, timeline_single_rank, .init = setup, .fini = teardown, .timeout = 240) {
    make_run("r1", 1);
    check_timeline("r1", 1);
}

Test(audit_viz, timeline_two_ranks_flows, .init = setup, .fini = teardown, .timeout = 300) {
    make_run("r2", 2);
    check_timeline("r2", 2);
    /* a missing rank: skipped with a note; the other rank's flows start but never end */
    char dir[512], out[512], err[512];
    snprintf(dir, sizeof dir, "%s/r2", tmpdir);
    snprintf(out, sizeof out, "%s/missing.json", tmpdir);
    sh("rm -rf %s/rank-0001", dir);
    cr_assert_eq(ls_audit_timeline_write(dir, out, err, sizeof err), 0, "%s", err);
    timeline t = read_timeline(out);
    cr_expect_eq(count_processes(&t), 1);
    cr_expect(has_process(&t, 0));
    cr_expect(strstr(t.notes, "rank 1 skipped") != NULL, "notes: %s", t.notes);
    cr_expect_eq(count(&t, "f", 1, NULL), 0);
    cr_expect_gt(count(&t, "s", 0, NULL), 0);
    free_timeline(&t);
}

/* A damaged trace: the readable prefix, with a note naming the damage. */
static void damaged(const char *how, const char *note_word) {
    make_run("r1", 1);
    char dir[512], trace[600], out[600], err[512];
    snprintf(dir, sizeof dir, "%s/r1", tmpdir);
    snprintf(trace, sizeof trace, "%s/rank-0000/events.jsonl.zst", dir);
    snprintf(out, sizeof out, "%s/damaged.json", tmpdir);
    facts *full = facts_of(trace);
    struct stat st;
    cr_assert_eq(stat(trace, &st), 0);
    if (!strcmp(how, "truncate")) {
        cr_assert_eq(truncate(trace, st.st_size / 2), 0);
    } else { /* flip one byte in the middle */
        FILE *fp = fopen(trace, "r+b");
        fseek(fp, st.st_size / 2, SEEK_SET);
        int c = fgetc(fp);
        fseek(fp, st.st_size / 2, SEEK_SET);
        fputc(c ^ 0x5a, fp);
        fclose(fp);
    }
    cr_assert_eq(ls_audit_timeline_write(dir, out, err, sizeof err), 0, "%s", err);
    timeline t = read_timeline(out);
    int phases = count(&t, "X", 0, "phase");
    /* truncated: the flushed phases of the open zstd frame are delivered;
     * flipped: a one-step run's trace is one frame, none of it delivered */
    int least = !strcmp(how, "truncate") ? 1 : 0;
    cr_expect(phases >= least && phases < full->phase_end, "%s: %d phase slices of %d", how, phases,
              full->phase_end);
    cr_expect(strstr(t.notes, note_word) != NULL, "%s: notes do not say %s: %s", how, note_word, t.notes);
    cr_expect(has_process(&t, 0));
    free_timeline(&t);
    /* the page of the same run: its plot, and the same note */
    snprintf(out, sizeof out, "%s/damaged.html", tmpdir);
    cr_assert_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 0, "%s", err);
    char *html = slurp_path(out, NULL);
    cr_expect(strstr(html, "<svg") != NULL && strstr(html, note_word) != NULL, "%s: page lacks plot or note", how);
    free(html);
    free(full);
}

Test(audit_viz, timeline_truncated_trace, .init = setup, .fini = teardown, .timeout = 240) {
    damaged("truncate", "truncated");
}

Test(audit_viz, timeline_corrupt_trace, .init = setup, .fini = teardown, .timeout = 240) {
    damaged("flip", "corrupt");
}

Test(audit_viz, unusable_input_refused, .init = setup, .fini = teardown, .timeout = 240) {
    char dir[512], out[600], err[512];
    snprintf(dir, sizeof dir, "%s/none", tmpdir);
    snprintf(out, sizeof out, "%s/t.json", tmpdir);
    cr_expect_eq(ls_audit_timeline_write(dir, out, err, sizeof err), 2);
    cr_expect(strstr(err, dir) != NULL, "err does not name the directory: %s", err);
    cr_expect_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 2);
    cr_expect_eq(access(out, F_OK), -1, "an output was written for unusable input");
    make_run("r1", 1);
    snprintf(dir, sizeof dir, "%s/r1", tmpdir);
    /* an output that cannot be written: 2, the path named, no temporary left */
    snprintf(out, sizeof out, "%s/no/such/dir/t.json", tmpdir);
    cr_expect_eq(ls_audit_timeline_write(dir, out, err, sizeof err), 2);
    cr_expect(strstr(err, "no/such/dir") != NULL, "%s", err);
    cr_expect_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 2);
    /* a trace that is a symbolic link out of the run: never followed */
    sh("mv %s/rank-0000/events.jsonl.zst %s/elsewhere.zst && ln -s %s/elsewhere.zst %s/rank-0000/events.jsonl.zst",
       dir, tmpdir, tmpdir, dir);
    snprintf(out, sizeof out, "%s/t.json", tmpdir);
    cr_expect_eq(ls_audit_timeline_write(dir, out, err, sizeof err), 2, "a linked trace was read");
    cr_expect(strstr(err, "symbolic link") != NULL, "%s", err);
    cr_expect_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 0, "%s", err);
    char *html = slurp_path(out, NULL);
    cr_expect(strstr(html, "<svg") == NULL && strstr(html, "symbolic link") != NULL, "linked rank plotted");
    free(html);
    sh("ls %s | grep -c tmp >/dev/null && exit 1 || exit 0", tmpdir); /* no OUT.tmp.<pid> left */
}

/* ---- the HTML page ---- */

static size_t occurrences(const char *s, const char *what) {
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p++) n++;
    return n;
}

/* The y of every point of the first (total) polyline of the page's plot
 * number `which`. */
static int total_points(const char *html, int which, double *y, int cap) {
    const char *p = html;
    for (int k = 0; k <= which; k++) {
        p = strstr(p, "<svg");
        cr_assert_not_null(p);
        p++;
    }
    p = strstr(p, "points=\"");
    cr_assert_not_null(p);
    p += 8;
    int n = 0;
    while (*p && *p != '"' && n < cap) {
        double x, v;
        int used = 0;
        if (sscanf(p, "%lf,%lf%n", &x, &v, &used) != 2) break;
        y[n++] = v;
        p += used;
        while (*p == ' ') p++;
    }
    return n;
}

/* The plot geometry an <svg> states: y = top + h - h * bytes / ymax. */
typedef struct {
    double ymax, top, h;
} plot_geom;

/* The numeric value of attribute `name` in the tag starting at tag (up to
 * its '>'); NAN when absent. */
static double attr_num(const char *tag, const char *name) {
    const char *end = strchr(tag, '>');
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *a = strstr(tag, key);
    if (!a || (end && a > end)) return NAN;
    return strtod(a + strlen(key), NULL);
}

static const char *svg_at(const char *html, int which) {
    const char *p = html;
    for (int k = 0; k <= which; k++) {
        p = strstr(k ? p + 1 : p, "<svg");
        cr_assert_not_null(p, "no <svg> number %d", which);
    }
    return p;
}

static plot_geom geom_of(const char *html, int which) {
    const char *svg = svg_at(html, which);
    plot_geom g = {attr_num(svg, "data-y-max-bytes"), attr_num(svg, "data-plot-top"),
                   attr_num(svg, "data-plot-height")};
    cr_assert(g.ymax > 0 && g.top >= 0 && g.h > 0, "svg %d states no geometry", which);
    return g;
}

/* ---- the page's figures against the receipt's ---- */

#define MAXCAT 32
typedef struct {
    double total, step_total, rss; /* run_total_peak_bytes, per-step total, rss_peak_bytes */
    int n;
    char names[MAXCAT][80];
    double run[MAXCAT], step[MAXCAT];
} receipt_figs;

/* The receipt's byte-exact figures, read with cJSON (not receipts/writing/receipt.h). */
static receipt_figs receipt_of(const char *dir, int rank) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%04d/receipt.json", dir, rank);
    cJSON *j = load_json(path);
    const cJSON *mem = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "predicate"), "memory");
    const cJSON *run = cJSON_GetObjectItem(mem, "run"), *step = cJSON_GetObjectItem(mem, "per_step");
    cr_assert(cJSON_IsObject(run) && cJSON_IsObject(step), "%s: no memory scopes", path);
    receipt_figs r = {0};
    r.total = cJSON_GetObjectItem(run, "total_peak_bytes")->valuedouble;
    r.rss = cJSON_GetObjectItem(run, "rss_peak_bytes")->valuedouble;
    r.step_total = cJSON_GetObjectItem(step, "total_peak_bytes")->valuedouble;
    const cJSON *c, *step_cats = cJSON_GetObjectItem(step, "categories");
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(run, "categories")) {
        cr_assert_lt(r.n, MAXCAT);
        snprintf(r.names[r.n], sizeof r.names[0], "%s", c->string);
        r.run[r.n] = cJSON_GetObjectItem(c, "peak_bytes")->valuedouble;
        r.step[r.n] = cJSON_GetObjectItem(cJSON_GetObjectItem(step_cats, c->string), "peak_bytes")->valuedouble;
        r.n++;
    }
    cJSON_Delete(j);
    return r;
}

/* A receipt's figure rewritten: predicate.memory.SCOPE's total_peak_bytes
 * (category NULL) or that category's peak; scope "run" or "per_step". */
static void edit_receipt(const char *dir, int rank, const char *scope, const char *category, double bytes) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%04d/receipt.json", dir, rank);
    cJSON *j = load_json(path);
    cJSON *sc = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "predicate"), "memory"), scope);
    cJSON *item = category ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(sc, "categories"), category),
                                                 "peak_bytes")
                           : cJSON_GetObjectItem(sc, "total_peak_bytes");
    cr_assert_not_null(item, "%s: no figure to edit", path);
    cJSON_SetNumberValue(item, bytes);
    char *text = cJSON_PrintUnformatted(j);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(j);
}

/* What the page prints for a byte figure: two decimals in the largest
 * binary unit it reaches, whole bytes below 1 KiB (html.h). */
static void label_of(char *out, size_t cap, double bytes) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = bytes;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0) snprintf(out, cap, "%.0f B", bytes);
    else snprintf(out, cap, "%.2f %s", v, u[i]);
}

/* "69.25 MiB (72618992 bytes)", as the caption and the table print it */
static void figure_of(char *out, size_t cap, double bytes) {
    char l[48];
    label_of(l, sizeof l, bytes);
    if (bytes < 1024) snprintf(out, cap, "%.0f bytes", bytes);
    else snprintf(out, cap, "%s (%.0f bytes)", l, bytes);
}

/* The first occurrence of `what` in [from, to), or NULL. */
static const char *find_in(const char *from, const char *to, const char *what) {
    const char *p = strstr(from, what);
    return p && p < to ? p : NULL;
}

typedef struct {
    const char *row;
    double run, step;
} table_row;

/* Every figure of rank's plot and peaks table against the receipt `r` and
 * the trace's samples (`f`). */
static void check_figures(const char *html, int rank, const receipt_figs *r, const facts *f) {
    const char *svg = svg_at(html, rank), *end = strstr(svg, "</svg>");
    cr_assert_not_null(end);
    plot_geom g = geom_of(html, rank);
    char want[256], label[48];
    /* the marked total peak: its exact bytes, its printed figure, its level */
    const char *mark = find_in(svg, end, "<g class=\"peak total\"");
    cr_assert_not_null(mark, "rank %d: no marked total peak", rank);
    cr_expect_eq(attr_num(mark, "data-bytes"), r->total, "rank %d: marked %.0f bytes, the receipt %.0f", rank,
                 attr_num(mark, "data-bytes"), r->total);
    snprintf(want, sizeof want, "%.0f bytes", r->total);
    const char *mark_end = find_in(mark, end, "</g>");
    cr_assert_not_null(mark_end);
    cr_expect_not_null(find_in(mark, mark_end, want), "rank %d: the mark's title lacks %s", rank, want);
    const char *lab = find_in(mark, mark_end, ">total peak ");
    cr_assert_not_null(lab, "rank %d: the total peak is not labelled", rank);
    double printed = 0;
    char unit[16] = "";
    cr_assert_eq(sscanf(lab + 12, "%lf %15[A-Za-z] (receipt)", &printed, unit), 2, "label: %.60s", lab);
    double scale = !strcmp(unit, "KiB") ? 1024.0 : !strcmp(unit, "MiB") ? 1048576.0 : !strcmp(unit, "GiB") ? 1073741824.0 : 1;
    cr_expect(fabs(printed * scale - r->total) <= 0.005 * scale + 0.5, "rank %d: label %.2f %s, the receipt %.0f bytes",
              rank, printed, unit, r->total);
    label_of(label, sizeof label, r->total);
    snprintf(want, sizeof want, ">total peak %s (receipt)<", label);
    cr_expect_not_null(find_in(mark, mark_end, want), "rank %d: the label is not %s", rank, want);
    double y1 = attr_num(find_in(mark, mark_end, "<line"), "y1");
    cr_expect(fabs(y1 - (g.top + g.h - g.h * r->total / g.ymax)) <= 0.051, "rank %d: the peak line at y %.1f", rank, y1);
    /* the y axis reaches every figure; its top tick says so */
    cr_expect_geq(g.ymax, r->total, "rank %d: y axis to %.0f, below the receipt's peak %.0f", rank, g.ymax, r->total);
    cr_expect_geq(g.ymax, f->cat_max, "rank %d: y axis below the samples", rank);
    const char *tick = NULL;
    for (const char *p = svg; (p = find_in(p + 1, end, "class=\"ytick\"")) != NULL;) tick = p;
    cr_assert_not_null(tick);
    cr_expect_eq(attr_num(tick - 1, "data-bytes"), g.ymax, "rank %d: the top tick is not the axis's top", rank);
    /* each category's run peak marked with its bytes */
    for (int i = 0; i < r->n; i++) {
        snprintf(want, sizeof want, "<g class=\"peak\" data-series=\"%s\" data-bytes=\"%.0f\">", r->names[i], r->run[i]);
        cr_expect_not_null(find_in(svg, end, want), "rank %d: no mark %s", rank, want);
        cr_expect_geq(g.ymax, r->run[i]);
    }
    /* the caption: the samples against the receipt's peak, in words */
    double sampled = 0;
    for (int i = 0; i < f->memory && i < 1024; i++)
        if (f->totals[i] > sampled) sampled = f->totals[i];
    char a[96], b[96];
    figure_of(a, sizeof a, r->total);
    figure_of(b, sizeof b, sampled);
    if (sampled < r->total)
        snprintf(want, sizeof want, "Sampled at phase boundaries; the receipt's peak is %s, the samples reach %s.", a, b);
    else if (sampled == r->total)
        snprintf(want, sizeof want, "The samples reach the receipt's total peak, %s.", a);
    else
        snprintf(want, sizeof want, "The samples reach %s, above the receipt's total peak of %s", b, a);
    cr_expect_not_null(find_in(svg, end, want), "rank %d: the caption does not say: %s", rank, want);
    /* the peaks table: every cell the receipt's figure */
    const char *tab = strstr(end, "<table class=\"peaks\""), *tab_end = tab ? strstr(tab, "</table>") : NULL;
    cr_assert(tab && tab_end, "rank %d: no peaks table", rank);
    table_row rows[MAXCAT + 1];
    int nrows = 0;
    rows[nrows++] = (table_row){"total", r->total, r->step_total};
    for (int i = 0; i < r->n; i++) rows[nrows++] = (table_row){r->names[i], r->run[i], r->step[i]};
    for (int i = 0; i < nrows; i++) {
        snprintf(want, sizeof want, "<tr data-series=\"%s\">", rows[i].row);
        const char *tr = find_in(tab, tab_end, want);
        cr_assert_not_null(tr, "rank %d: no row %s", rank, rows[i].row);
        const char *c1 = strstr(tr, "<td data-bytes="), *c2 = c1 ? strstr(c1 + 1, "<td data-bytes=") : NULL;
        cr_assert(c1 && c2, "rank %d: row %s lacks figures", rank, rows[i].row);
        cr_expect_eq(attr_num(c1, "data-bytes"), rows[i].run, "rank %d: %s run peak", rank, rows[i].row);
        cr_expect_eq(attr_num(c2, "data-bytes"), rows[i].step, "rank %d: %s per-step peak", rank, rows[i].row);
        figure_of(a, sizeof a, rows[i].run);
        cr_expect(strncmp(strchr(c1, '>') + 1, a, strlen(a)) == 0, "rank %d: %s printed as %.40s, not %s", rank,
                  rows[i].row, strchr(c1, '>') + 1, a);
    }
    const char *rss = find_in(tab, tab_end, "<tr data-series=\"rss\">");
    cr_assert_not_null(rss);
    cr_expect_eq(attr_num(strstr(rss, "<td data-bytes="), "data-bytes"), r->rss, "rank %d: RSS peak", rank);
}

static cJSON *hostile_report(void) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "schema", "urn:longstraw:schema:audit-report:v1");
    cJSON_AddStringToObject(r, "run", "<script>run()</script>");
    cJSON_AddNumberToObject(r, "level", 1);
    cJSON *levels = cJSON_AddArrayToObject(r, "levels");
    for (int l = 1; l <= 2; l++) {
        cJSON *lv = cJSON_CreateObject();
        cJSON_AddNumberToObject(lv, "level", l);
        cJSON_AddStringToObject(lv, "name", l == 1 ? "Structural <b>bold</b>" : "Numerical");
        cJSON_AddBoolToObject(lv, "holds", l == 1);
        cJSON *checks = cJSON_AddArrayToObject(lv, "checks");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", l == 1 ? "schema.valid" : "parity.present");
        cJSON_AddBoolToObject(c, "pass", l == 1);
        cJSON *ev = cJSON_AddArrayToObject(c, "evidence");
        if (l == 2) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "rank", 0);
            cJSON_AddStringToObject(e, "file", "rank-0000/<img src=x onerror=alert(2)>");
            cJSON_AddNumberToObject(e, "seq", 5);
            cJSON_AddItemToArray(ev, e);
        }
        cJSON_AddStringToObject(c, "message", l == 1 ? "ok \x01\xff" : "<script>alert('m')</script> & \"q\"");
        cJSON_AddItemToArray(checks, c);
        cJSON_AddItemToArray(levels, lv);
    }
    cJSON_AddNullToObject(r, "build_digest");
    cJSON_AddStringToObject(r, "added_by_core", "<script>ignored</script>"); /* unknown: ignored */
    return r;
}

Test(audit_viz, html_escapes_hostile_run, .init = setup, .fini = teardown, .timeout = 240) {
    make_run("r1", 1);
    char dir[512], out[600], err[512];
    snprintf(dir, sizeof dir, "%s/r1", tmpdir);
    /* the trace rewritten as plain JSON Lines (the reader goes by magic
     * bytes): a hostile run id in the header, a hostile category name */
    sh("cd %s/rank-0000 && zstd -dcq events.jsonl.zst | sed -e '1s/\"run_id\":\"[^\"]*\"/\"run_id\":\"<script>alert(1)<\\/script>\"/' "
       "-e '0,/\"scratch\":/s/\"scratch\":/\"<script>cat<\\/script>\":/' > plain && mv plain events.jsonl.zst", dir);
    facts *f = facts_rank("r1", 0);
    cr_assert_gt(f->memory, 0);
    cJSON *rep = hostile_report();
    snprintf(out, sizeof out, "%s/page.html", tmpdir);
    cr_assert_eq(ls_audit_html_write(dir, rep, out, err, sizeof err), 0, "%s", err);
    size_t len;
    char *html = slurp_path(out, &len);
    cr_expect(strcasestr(html, "<script") == NULL, "an unescaped <script in the page");
    cr_expect(strcasestr(html, "<img") == NULL, "an unescaped <img in the page");
    cr_expect(strcasestr(html, "<b>") == NULL, "an unescaped <b> in the page");
    const char *want[] = {"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;script&gt;run()&lt;/script&gt;",
                          "&lt;script&gt;alert(&#39;m&#39;)&lt;/script&gt; &amp; &quot;q&quot;",
                          "&lt;script&gt;cat&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;",
                          "Structural &lt;b&gt;bold&lt;/b&gt;", "Level 1 of 4 proven", "id=\"verdict\"",
                          "id=\"rules\"", "PASS", "FAIL", ", seq 5", "ok \xEF\xBF\xBD\xEF\xBF\xBD"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(html, want[i]) != NULL, "the page lacks %s", want[i]);
    cr_expect(strstr(html, "ignored") == NULL, "an unknown report member was rendered");
    cr_expect(memchr(html, '\x01', len) == NULL && strstr(html, "\xff") == NULL, "raw control/invalid bytes");
    cr_expect(strstr(html, "http://") == NULL || occurrences(html, "http://") == occurrences(html, "xmlns="),
              "an external reference besides the SVG namespace");
    cr_expect_eq(occurrences(html, "<svg"), 1, "%zu <svg> for 1 rank", occurrences(html, "<svg"));
    /* one polyline per series (total + categories), the total's points at
     * the memory events' figures (independent: the trace through zstd) */
    cr_expect_eq(occurrences(html, "<polyline class=\"series\""), (size_t)(1 + f->n_cat_names),
                 "%zu sample polylines for %d categories", occurrences(html, "<polyline class=\"series\""),
                 f->n_cat_names);
    cr_expect_gt(f->n_cat_names, f->n_categories, "the hostile category is not in the trace");
    double y[1100];
    int n = total_points(html, 0, y, 1100);
    cr_expect_eq(n, f->memory, "%d points for %d memory events", n, f->memory);
    plot_geom g = geom_of(html, 0);
    cr_expect_geq(g.ymax, f->cat_max, "y axis to %.0f, below the samples' %.0f", g.ymax, f->cat_max);
    double worst = 0;
    for (int i = 0; i < n && i < 1024; i++) { /* plot: y = top + h - h * v / ymax */
        double want_y = g.top + g.h - g.h * f->totals[i] / g.ymax;
        if (fabs(y[i] - want_y) > worst) worst = fabs(y[i] - want_y);
    }
    cr_expect(worst <= 0.051, "total polyline off by %.3f px at worst", worst);
    FILE *s = fopen(SAMPLE_HTML, "wb"); /* for scripts/check_html.sh (ctest audit_viz_chromium) */
    if (s) {
        fwrite(html, 1, len, s);
        fclose(s);
    }
    free(html);
    cJSON_Delete(rep);
    free(f);
}

Test(audit_viz, html_two_ranks_no_report, .init = setup, .fini = teardown, .timeout = 300) {
    make_run("r2", 2);
    char dir[512], out[600], err[512];
    snprintf(dir, sizeof dir, "%s/r2", tmpdir);
    snprintf(out, sizeof out, "%s/page.html", tmpdir);
    cr_assert_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 0, "%s", err);
    char *html = slurp_path(out, NULL);
    cr_expect(strstr(html, "no verdict") != NULL);
    cr_expect_eq(occurrences(html, "<svg"), 2, "%zu <svg> for 2 ranks", occurrences(html, "<svg"));
    for (int r = 0; r < 2; r++) {
        facts *f = facts_rank("r2", r);
        double y[1100];
        cr_expect_eq(total_points(html, r, y, 1100), f->memory, "rank %d: points vs memory events", r);
        receipt_figs rf = receipt_of(dir, r);
        check_figures(html, r, &rf, f);
        free(f);
    }
    free(html);
    /* a report that is not an object: no verdict, still the plots */
    cJSON *bad = cJSON_CreateArray();
    cr_assert_eq(ls_audit_html_write(dir, bad, out, err, sizeof err), 0, "%s", err);
    html = slurp_path(out, NULL);
    cr_expect(strstr(html, "no verdict") != NULL && occurrences(html, "<svg") == 2);
    free(html);
    cJSON_Delete(bad);
}

Test(audit_viz, html_figures_are_the_receipts, .init = setup, .fini = teardown, .timeout = 240) {
    make_run("r1", 1);
    char dir[512], out[600], err[512];
    snprintf(dir, sizeof dir, "%s/r1", tmpdir);
    snprintf(out, sizeof out, "%s/page.html", tmpdir);
    facts *f = facts_rank("r1", 0);
    receipt_figs r = receipt_of(dir, 0);
    cr_assert_gt(r.total, 0);
    cr_assert_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 0, "%s", err);
    char *html = slurp_path(out, NULL);
    check_figures(html, 0, &r, f);
    cr_expect(strstr(html, "disagree") == NULL, "a disagreement on a run as the trainer wrote it");
    free(html);

    /* the figure comes from the receipt: a larger total peak (and scratch
     * peak) written into it moves the marks, the axis and the table */
    double old_total = r.total, old_step_total = r.step_total, bigger = 2 * r.total + 12345;
    edit_receipt(dir, 0, "run", NULL, bigger);
    edit_receipt(dir, 0, "run", "scratch", bigger - 1);
    edit_receipt(dir, 0, "per_step", NULL, bigger - 2);
    receipt_figs r2 = receipt_of(dir, 0);
    cr_assert_eq(r2.total, bigger);
    cr_assert_eq(r2.step_total, bigger - 2);
    cr_assert_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 0, "%s", err);
    html = slurp_path(out, NULL);
    check_figures(html, 0, &r2, f);
    char old_mark[96];
    snprintf(old_mark, sizeof old_mark, "class=\"peak total\" data-series=\"total\" data-bytes=\"%.0f\"", old_total);
    cr_expect(strstr(html, old_mark) == NULL, "the old peak is still marked");
    cr_expect(strstr(html, "Sampled at phase boundaries; the receipt's peak is ") != NULL);
    /* the trace's own per-step peak no longer the receipt's: said so, with both */
    char fig_trace[96], fig_receipt[96], says[300];
    figure_of(fig_trace, sizeof fig_trace, old_step_total);
    figure_of(fig_receipt, sizeof fig_receipt, bigger - 2);
    snprintf(says, sizeof says, "per-step total peak of %s; the receipt states %s: the two disagree", fig_trace,
             fig_receipt);
    cr_expect(strstr(html, says) != NULL, "the page does not say: %s", says);
    free(html);

    /* no receipt, a broken one, a linked one: said so, nothing marked */
    struct {
        const char *how, *says;
    } cases[] = {{"mv %s/rank-0000/receipt.json %s/receipt.json.away", "no receipt (rank-0000/receipt.json: "},
                 {"mv %s/receipt.json.away %s/rank-0000/receipt.json && truncate -s 100 %s/rank-0000/receipt.json",
                  "the receipt is unreadable (rank-0000/receipt.json"},
                 {"rm %s/rank-0000/receipt.json && ln -s %s/receipt.json.away %s/rank-0000/receipt.json",
                  "symbolic link"}};
    sh("cp %s/rank-0000/receipt.json %s/receipt.json.keep", dir, tmpdir);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (k == 0) sh(cases[k].how, dir, tmpdir);
        else if (k == 1) sh(cases[k].how, tmpdir, dir, dir);
        else {
            sh("cp %s/receipt.json.keep %s/receipt.json.away", tmpdir, tmpdir);
            sh(cases[k].how, dir, tmpdir, dir);
        }
        cr_assert_eq(ls_audit_html_write(dir, NULL, out, err, sizeof err), 0, "%s", err);
        html = slurp_path(out, NULL);
        cr_expect(strstr(html, cases[k].says) != NULL, "case %zu: the page does not say %s", k, cases[k].says);
        cr_expect(strstr(html, "No byte-exact peaks for this rank: ") != NULL, "case %zu", k);
        cr_expect(strstr(html, "No receipt figures") != NULL, "case %zu: the plot does not say so", k);
        cr_expect(strstr(html, "class=\"peak") == NULL, "case %zu: a peak marked without a receipt", k);
        cr_expect(strstr(html, "<table class=\"peaks\"") == NULL, "case %zu: a peaks table without a receipt", k);
        plot_geom g = geom_of(html, 0);
        cr_expect_geq(g.ymax, f->cat_max);
        free(html);
    }
    free(f);
}
