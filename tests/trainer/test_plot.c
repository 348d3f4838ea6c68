/* test_plot.c - longstraw-plot (trainer/run/metrics_plot.h): a known three-point
 * file gives polylines at hand-computed coordinates (one axis, and with a
 * right-hand axis); several labelled files share one chart (legend entries,
 * colours per group, dashes, the step axis over all files); the moving
 * average against hand-computed and directly summed values, and in the chart
 * as a line over faint dots; a 12,300-step file's axis ends at 12,300 with the
 * dots subsampled; reference lines and --ymin/--ymax at hand-computed
 * coordinates; fields of any other type skipped; bad lines exit 2 naming the
 * line and field; bad arguments (old and new options) exit 2 naming the
 * argument; the bounds (points, file size) hold; the output is well-formed
 * XML (tags balanced, entities known) even with markup characters in the
 * title and names; a failed run leaves an existing chart as it was. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "trainer/run/metrics_plot.h"
#include "trainer/run/run_metrics.h"
#include "tests/support/test_tmpdir.h"

#define PLOT LS_BINARY_DIR "/trainer/longstraw-plot"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "plot"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static void write_file(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static char *slurp(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    size_t got = fread(s, 1, (size_t)n, f);
    fclose(f);
    s[got] = '\0';
    return s;
}

/* Runs longstraw-plot with args (%T replaced by tmpdir is done by the caller) */
static int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s >out.txt 2>err.txt", tmpdir, PLOT, args);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

/* The points of the i-th polyline: xy [2 * max], returns the count. */
static size_t polyline(const char *svg, int i, double *xy, size_t max) {
    const char *p = svg;
    for (int k = 0; k <= i; k++) {
        p = strstr(p, "<polyline");
        cr_assert_not_null(p, "no polyline %d", i);
        p++;
    }
    p = strstr(p, "points=\"");
    cr_assert_not_null(p);
    p += 8;
    size_t n = 0;
    while (*p != '"') {
        char *e;
        double x = strtod(p, &e);
        cr_assert(e != p && *e == ',', "bad point text near '%.20s'", p);
        double y = strtod(e + 1, &e);
        cr_assert(n < max);
        xy[2 * n] = x;
        xy[2 * n + 1] = y;
        n++;
        p = e;
        if (*p == ' ') p++;
    }
    return n;
}

/* Largest |got - want| over n points; fails above 0.006 (two decimals). */
static void expect_points(const char *svg, int i, const double *want, size_t n) {
    double xy[64];
    size_t got = polyline(svg, i, xy, 32);
    cr_assert_eq(got, n, "polyline %d has %zu points, want %zu", i, got, n);
    double worst = 0;
    for (size_t k = 0; k < 2 * n; k++) worst = fmax(worst, fabs(xy[k] - want[k]));
    cr_expect_lt(worst, 0.006, "polyline %d: largest coordinate error %g", i, worst);
}

/* Tags balanced (a stack of names), quotes closed, every & a known entity. */
static void expect_well_formed(const char *s) {
    char stack[64][32];
    int depth = 0, root_closed = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '&') {
            static const char *ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            int ok = 0;
            for (int k = 0; k < 5; k++) ok |= strncmp(p, ent[k], strlen(ent[k])) == 0;
            cr_assert(ok, "a bare '&' near '%.20s'", p);
        }
        if (*p == '>') cr_assert_fail("a bare '>' in text near '%.20s'", p > s + 10 ? p - 10 : s);
        if (*p != '<') continue;
        if (p[1] == '?') {
            p = strstr(p, "?>");
            cr_assert_not_null(p);
            p++;
            continue;
        }
        int closing = p[1] == '/';
        const char *n = p + 1 + closing;
        size_t len = strcspn(n, " \t\n/>");
        cr_assert(len > 0 && len < 32, "bad tag near '%.20s'", p);
        const char *q = n + len;
        char quote = 0;
        while (*q && (quote || *q != '>')) {
            if (quote) {
                cr_assert(*q != '<', "'<' inside an attribute value near '%.20s'", q);
                if (*q == quote) quote = 0;
            } else if (*q == '"' || *q == '\'') quote = *q;
            q++;
        }
        cr_assert(*q == '>', "unterminated tag near '%.20s'", p);
        int self = q[-1] == '/';
        if (closing) {
            cr_assert(depth > 0 && strlen(stack[depth - 1]) == len && !strncmp(stack[depth - 1], n, len),
                      "</%.*s> closes %s", (int)len, n, depth ? stack[depth - 1] : "nothing");
            depth--;
            if (depth == 0) root_closed = 1;
        } else if (!self) {
            cr_assert(!root_closed, "content after the root element");
            cr_assert(depth < 64);
            memcpy(stack[depth], n, len);
            stack[depth++][len] = '\0';
        }
        p = q;
    }
    cr_expect_eq(depth, 0, "%d elements left open (innermost %s)", depth, depth ? stack[depth - 1] : "");
    cr_expect(root_closed, "no root element");
}

static const char *three =
    "{\"step\":1,\"a\":0,\"b\":0.2,\"kl\":0.001}\n"
    "{\"step\":2,\"a\":0.5,\"b\":0.4,\"kl\":0.003}\n"
    "{\"step\":3,\"a\":1,\"b\":0.3,\"kl\":0.002}\n";

/* Hand computation, one axis: plot area x 80..770 (800 - 30), y 50..420.
 * x: steps 1..3, exactly: x = 80 + (s - 1) / 2 * 690.
 * y: a and b span 0..1, 5% margin: [-0.05, 1.05] -> y = 420 - (v + 0.05) / 1.1 * 370;
 * tick step: 1.1 / 6 = 0.18 -> 0.2. */
#define Y1(v) (420 - ((v) + 0.05) / 1.1 * 370)
Test(plot, three_points_one_axis, .init = setup, .fini = teardown) {
    write_file("m.jsonl", three);
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a,b --title 'three points'"), 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    const double a[] = {80, Y1(0), 425, Y1(0.5), 770, Y1(1)};
    const double b[] = {80, Y1(0.2), 425, Y1(0.4), 770, Y1(0.3)};
    expect_points(svg, 0, a, 3);
    expect_points(svg, 1, b, 3);
    size_t lines = 0;
    for (const char *q = svg; (q = strstr(q, "<polyline")) != NULL; q++) lines++;
    cr_expect_eq(lines, 2, "%zu polylines, want one per series", lines);
    cr_expect_null(strstr(svg, "<path"), "no dots without --smooth");
    cr_expect_not_null(strstr(svg, ">three points</text>"), "the title");
    cr_expect_not_null(strstr(svg, ">0.2</text>"), "the tick label 0.2");
    cr_expect_not_null(strstr(svg, ">3</text>"), "the step tick 3");
    cr_expect_not_null(strstr(svg, "<title>a</title>"), "the series name");
    cr_expect_not_null(strstr(svg, ">a</text>"), "the legend names the series alone (one file, no label)");
    expect_well_formed(svg);
    free(svg);
}

/* With --right kl: plot area x 80..720 (800 - 80).  kl spans 0.001..0.003,
 * 5% margin: [0.0009, 0.0031] -> y = 420 - (v - 0.0009) / 0.0022 * 370; tick
 * step 0.0022 / 6 = 0.00037 -> 0.0005. */
#define YR(v) (420 - ((v) - 0.0009) / 0.0022 * 370)
Test(plot, three_points_right_axis, .init = setup, .fini = teardown) {
    write_file("m.jsonl", three);
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a,kl --right kl"), 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    const double a[] = {80, Y1(0), 400, Y1(0.5), 720, Y1(1)};
    const double kl[] = {80, YR(0.001), 400, YR(0.003), 720, YR(0.002)};
    expect_points(svg, 0, a, 3);
    expect_points(svg, 1, kl, 3);
    cr_expect_not_null(strstr(svg, ">0.0025</text>"), "a right-axis tick label");
    cr_expect_not_null(strstr(svg, "kl (right axis)"), "the legend marks the right axis");
    expect_well_formed(svg);
    free(svg);
}

/* Markup characters in the title and in a field name stay text. */
Test(plot, markup_is_escaped, .init = setup, .fini = teardown) {
    write_file("m.jsonl", "{\"step\":0,\"a<b&c\":1}\n{\"step\":5,\"a<b&c\":-2.5}\n");
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series 'a<b&c' --title '<x> & \"y\" '\\''z'\\'''"), 0, "%s",
                 slurp("err.txt"));
    char *svg = slurp("c.svg");
    expect_well_formed(svg);
    cr_expect_not_null(strstr(svg, "a&lt;b&amp;c"));
    cr_expect_not_null(strstr(svg, "&lt;x&gt; &amp; &quot;y&quot; &apos;z&apos;"));
    free(svg);
}

/* A lone point, and a constant series, still scale. */
Test(plot, one_point_and_constant, .init = setup, .fini = teardown) {
    write_file("m.jsonl", "{\"step\":7,\"a\":0.25}\n");
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a"), 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    cr_expect_not_null(strstr(svg, "<circle"), "a lone point is marked");
    expect_well_formed(svg);
    free(svg);
    write_file("m.jsonl", "{\"step\":1,\"a\":0}\n{\"step\":2,\"a\":0}\n");
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a"), 0, "%s", slurp("err.txt"));
    svg = slurp("c.svg");
    const double a[] = {80, 235, 770, 235}; /* 0 widened to [-1, 1]: the middle */
    expect_points(svg, 0, a, 2);
    free(svg);
}

typedef struct {
    const char *text, *want;
} bad_case;

Test(plot, bad_lines_exit_2_naming_line_and_field, .init = setup, .fini = teardown) {
    static const bad_case cases[] = {
        {"{\"step\":1,\"a\":1}\n[1,2]\n", "m.jsonl:2: not a JSON object"},
        {"{\"step\":1,\"a\":1}\n{\"step\":2,\"a\":1}\n{\"step\":3}\n", "m.jsonl:3: field 'a': missing"},
        {"{\"step\":1,\"a\":\"0.5\"}\n", "m.jsonl:1: field 'a': not a number"},
        {"{\"step\":1,\"a\":null}\n", "m.jsonl:1: field 'a': not a number"},
        {"{\"a\":1}\n", "m.jsonl:1: field 'step': missing"},
        {"{\"step\":1.5,\"a\":1}\n", "m.jsonl:1: field 'step': not a non-negative integer"},
        {"{\"step\":-1,\"a\":1}\n", "m.jsonl:1: field 'step': not a non-negative integer"},
        {"{\"step\":2,\"a\":1}\n{\"step\":2,\"a\":1}\n", "m.jsonl:2: field 'step': 2 does not follow 2"},
        {"{\"step\":1,\"a\":1}\n{\"step\":2,\"a\":1\n", "m.jsonl:2"},
        {"{\"step\":1,\"a\":1}\n\n{\"step\":2,\"a\":1}\n", "m.jsonl:2"},
        {"{\"step\":1,\"a\":1,\"a\":2}\n", "m.jsonl:1"},
        {"{\"step\":1,\"a\":1e999}\n", "m.jsonl:1"},
        {"", "m.jsonl: no lines"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file("m.jsonl", cases[i].text);
        write_file("c.svg", "old chart");
        int rc = run("--metrics m.jsonl --out c.svg --series a");
        char *err = slurp("err.txt"), *svg = slurp("c.svg");
        cr_expect_eq(rc, 2, "case %zu: exit %d (want 2); stderr: %s", i, rc, err);
        cr_expect_not_null(strstr(err, cases[i].want), "case %zu: stderr '%s' does not name '%s'", i, err,
                           cases[i].want);
        cr_expect_str_eq(svg, "old chart", "case %zu: the existing chart was touched", i);
        free(err);
        free(svg);
    }
}

Test(plot, bad_arguments_exit_2, .init = setup, .fini = teardown) {
    write_file("m.jsonl", three);
    static const bad_case cases[] = {
        {"--out c.svg --series a", "--metrics is required"},
        {"--metrics m.jsonl --series a", "--out is required"},
        {"--metrics m.jsonl --out c.svg", "--series is required"},
        {"--metrics m.jsonl --out c.svg --series a,,b", "--series: empty name"},
        {"--metrics m.jsonl --out c.svg --series a,a", "--series: 'a' named twice"},
        {"--metrics m.jsonl --out c.svg --series a --right b", "--right: 'b' is not one of --series"},
        {"--metrics m.jsonl --out c.svg --series a --bogus 1", "unknown option '--bogus'"},
        {"--metrics m.jsonl --out c.svg --series", "--series: needs a value"},
        {"--metrics m.jsonl --out c.svg --series a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "more than 16 series"},
        {"--metrics m.jsonl --out c.svg --series a --title \"$(printf 'x\\001')\"", "--title"},
        {"--metrics nosuch.jsonl --out c.svg --series a", "nosuch.jsonl"},
        {"--metrics /dev/zero --out c.svg --series a", "/dev/zero"},
        {"--metrics m.jsonl --out c.svg --series nosuch", "m.jsonl:1: field 'nosuch': missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].text);
        char *err = slurp("err.txt");
        cr_expect_eq(rc, 2, "case %zu (%s): exit %d (want 2); stderr: %s", i, cases[i].text, rc, err);
        cr_expect_not_null(strstr(err, cases[i].want), "case %zu: stderr '%s' does not name '%s'", i, err,
                           cases[i].want);
        free(err);
    }
    cr_expect_eq(run("--help"), 0);
    char *out = slurp("out.txt");
    cr_expect_not_null(strstr(out, "--series"), "--help prints the usage");
    free(out);
    cr_expect_eq(run("--metrics m.jsonl --out nodir/c.svg --series a"), 1, "an unwritable chart exits 1");
}

/* At most LS_PLOT_MAX_POINTS lines; the file cap of the reader holds. */
Test(plot, bounds, .init = setup, .fini = teardown) {
    char path[512];
    snprintf(path, sizeof path, "%s/big.jsonl", tmpdir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < LS_PLOT_MAX_POINTS; i++) fprintf(f, "{\"step\":%d,\"a\":%d}\n", i, i % 7);
    fclose(f);
    cr_expect_eq(run("--metrics big.jsonl --out c.svg --series a"), 0, "%s", slurp("err.txt"));
    f = fopen(path, "ab");
    fprintf(f, "{\"step\":%d,\"a\":0}\n", LS_PLOT_MAX_POINTS);
    fclose(f);
    cr_expect_eq(run("--metrics big.jsonl --out c.svg --series a"), 2);
    char *err = slurp("err.txt");
    cr_expect_not_null(strstr(err, "more than 100000 lines"), "%s", err);
    free(err);
    ls_metrics_table t;
    const char *names[] = {"a"};
    char e[512];
    cr_expect_eq(ls_metrics_read(&t, path, 1000, names, 1, e, sizeof e), LS_ERR_FORMAT);
    cr_expect_not_null(strstr(e, "big.jsonl"), "%s", e);
    cr_expect_eq(t.n_points, 0);
}

/* In process: the table holds what the lines said. */
Test(plot, parse_table) {
    const char *names[] = {"b", "a"};
    ls_metrics_table t;
    char err[256];
    cr_assert_eq(ls_metrics_parse(&t, three, strlen(three), "x", names, 2, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(t.n_points, 3);
    const double step[] = {1, 2, 3}, b[] = {0.2, 0.4, 0.3}, a[] = {0, 0.5, 1};
    for (int k = 0; k < 3; k++) {
        cr_expect_eq(t.step[k], step[k]);
        cr_expect_eq(t.value[k], b[k]);
        cr_expect_eq(t.value[3 + k], a[k]);
    }
    ls_metrics_table_free(&t);
    ls_metrics_table_free(&t);
    const char *no_nl = "{\"step\":1,\"b\":1,\"a\":2}";
    cr_assert_eq(ls_metrics_parse(&t, no_nl, strlen(no_nl), "x", names, 2, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(t.n_points, 1, "a last line without a newline counts");
    ls_metrics_table_free(&t);
}

/* ---- several files, smoothing, reference lines, fitted axes ---------------- */

/* The attribute `attr` ("stroke=\"") of the i-th element starting with tag; "" when absent. */
static void attr_of(const char *svg, const char *tag, int i, const char *attr, char *out, size_t cap) {
    const char *p = svg;
    for (int k = 0; k <= i; k++) {
        p = strstr(p, tag);
        cr_assert_not_null(p, "no %s number %d", tag, i);
        p++;
    }
    const char *end = strchr(p, '>');
    const char *a = strstr(p, attr);
    out[0] = '\0';
    if (!a || a > end) return;
    a += strlen(attr);
    size_t n = strcspn(a, "\"");
    cr_assert(n < cap);
    memcpy(out, a, n);
    out[n] = '\0';
}

/* Two labelled files of different lengths plus an unlabelled one: the legend
 * names "label: series"; the step axis spans all three (1..5); files of one
 * --group share a colour per series and take dashes in turn. */
Test(plot, several_files_labels_groups, .init = setup, .fini = teardown) {
    write_file("f1.jsonl", three);                                               /* steps 1..3 */
    write_file("f2.jsonl", "{\"step\":2,\"a\":0,\"b\":0}\n{\"step\":5,\"a\":1,\"b\":1}\n"); /* steps 2..5 */
    write_file("d.jsonl", "{\"step\":1,\"a\":0.5,\"b\":0.5}\n{\"step\":4,\"a\":0.5,\"b\":0.5}\n");
    cr_assert_eq(run("--metrics f1.jsonl --label 'full s1' --group full --metrics f2.jsonl --label 'full s2' "
                     "--group full --metrics ./d.jsonl --out c.svg --series a,b"),
                 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    expect_well_formed(svg);
    const char *legend[] = {">full s1: a</text>", ">full s1: b</text>", ">full s2: a</text>",
                            ">full s2: b</text>", ">d.jsonl: a</text>", ">d.jsonl: b</text>"};
    for (int i = 0; i < 6; i++) cr_expect_not_null(strstr(svg, legend[i]), "the legend lacks %s", legend[i]);
    /* x: steps 1..5 -> x = 80 + (s - 1) / 4 * 690; y as in three_points_one_axis (0..1) */
    const double f2a[] = {80 + 690.0 / 4, Y1(0), 770, Y1(1)};
    expect_points(svg, 2, f2a, 2); /* lines in file-major order: f1 a, f1 b, f2 a, ... */
    const double f1a[] = {80, Y1(0), 80 + 690.0 / 4, Y1(0.5), 80 + 690.0 / 2, Y1(1)};
    expect_points(svg, 0, f1a, 3);
    char c[6][32], d[6][32];
    for (int i = 0; i < 6; i++) {
        attr_of(svg, "<polyline", i, "stroke=\"", c[i], sizeof c[i]);
        attr_of(svg, "<polyline", i, "stroke-dasharray=\"", d[i], sizeof d[i]);
    }
    cr_expect_str_eq(c[0], c[2], "one group, one series: one colour");
    cr_expect_str_eq(c[1], c[3]);
    cr_expect_str_neq(c[0], c[1], "two series of a group: two colours");
    cr_expect_str_neq(c[4], c[0], "another group: other colours");
    cr_expect_str_neq(c[4], c[1]);
    cr_expect_str_neq(c[5], c[4]);
    cr_expect_str_eq(d[0], "", "the first of a group is solid");
    cr_expect_str_neq(d[2], "", "the second of a group is dashed");
    cr_expect_str_eq(d[4], "", "the first of its own group is solid");
    free(svg);
    /* one series: the legend is the label alone; --dash sets the pattern */
    cr_assert_eq(run("--metrics f1.jsonl --label full --dash dotted --metrics f2.jsonl --out c.svg --series a"), 0,
                 "%s", slurp("err.txt"));
    svg = slurp("c.svg");
    cr_expect_not_null(strstr(svg, ">full</text>"), "the label alone with one series");
    cr_expect_not_null(strstr(svg, ">f2.jsonl</text>"), "the default label is the file's base name");
    attr_of(svg, "<polyline", 0, "stroke-dasharray=\"", d[0], sizeof d[0]);
    cr_expect_str_eq(d[0], "2,3", "--dash dotted");
    free(svg);
}

/* The moving average by hand: v = 1, 2, 3, 4, 10, W = 3. */
Test(plot, smooth_function) {
    const double v[] = {1, 2, 3, 4, 10}, want[] = {1, 1.5, 2, 3, 17.0 / 3};
    double out[5], worst = 0;
    ls_plot_smooth(out, v, 5, 3);
    for (int k = 0; k < 5; k++) worst = fmax(worst, fabs(out[k] - want[k]));
    cr_expect_lt(worst, 1e-15, "largest error %g", worst);
    ls_plot_smooth(out, v, 5, 1);
    for (int k = 0; k < 5; k++) cr_expect_eq(out[k], v[k], "W = 1 is the raw series");
    ls_plot_smooth(out, v, 5, 100);
    cr_expect_lt(fabs(out[4] - 4), 1e-15, "a window longer than the file: the running mean");
    /* a long series against the direct sum, with a large value that must leave the window */
    enum { N = 5000, W = 37 };
    static double x[N], m[N];
    for (int k = 0; k < N; k++) x[k] = (k == 100 ? 1e12 : 0) + sin(0.1 * k);
    ls_plot_smooth(m, x, N, W);
    worst = 0;
    for (int k = 0; k < N; k++) {
        double s = 0;
        int lo = k - W + 1 < 0 ? 0 : k - W + 1;
        for (int i = lo; i <= k; i++) s += x[i];
        worst = fmax(worst, fabs(m[k] - s / (k - lo + 1)) / (k >= 100 && k < 100 + W ? 1e12 : 1));
    }
    cr_expect_lt(worst, 1e-14, "largest error against the direct sums %g", worst);
    cr_expect_eq(ls_plot_auto_smooth(499), 0);
    cr_expect_eq(ls_plot_auto_smooth(12300), 123);
}

/* --smooth 2 on five points: faint dots at the raw points, the line at the
 * trailing means (by hand), the axis from the raw points. */
Test(plot, smooth_chart, .init = setup, .fini = teardown) {
    write_file("m.jsonl", "{\"step\":0,\"a\":0}\n{\"step\":1,\"a\":1}\n{\"step\":2,\"a\":0}\n{\"step\":3,\"a\":1}\n"
                          "{\"step\":4,\"a\":0.5}\n");
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a --smooth 2"), 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    expect_well_formed(svg);
    /* x = 80 + s / 4 * 690; y: raw 0..1 -> Y1; means 0, 0.5, 0.5, 0.5, 0.75 */
    const double want[] = {80, Y1(0), 252.5, Y1(0.5), 425, Y1(0.5), 597.5, Y1(0.5), 770, Y1(0.75)};
    expect_points(svg, 0, want, 5);
    const char *dots = strstr(svg, "<path");
    cr_assert_not_null(dots, "the raw points are drawn");
    cr_expect(dots < strstr(svg, "<polyline"), "dots under the line");
    char op[16];
    attr_of(svg, "<path", 0, "stroke-opacity=\"", op, sizeof op);
    cr_expect_str_eq(op, "0.25", "the dots are faint");
    char d0[64];
    snprintf(d0, sizeof d0, "M80.00,%.2fh0M252.50,%.2fh0", Y1(0), Y1(1));
    cr_expect_not_null(strstr(dots, d0), "the first dots at the raw points (%s)", d0);
    free(svg);
}

/* 12,300 steps: the step axis ends at 12,300 (not rounded out to 15,000);
 * the dots are subsampled to at most 2,000 (and the last), the line keeps every point. */
Test(plot, long_run_fitted_axis_and_dots, .init = setup, .fini = teardown) {
    char path[512];
    snprintf(path, sizeof path, "%s/long.jsonl", tmpdir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    for (int i = 1; i <= 12300; i++) fprintf(f, "{\"step\":%d,\"a\":%d,\"groups\":[{\"n\":1}]}\n", i, i % 10);
    fclose(f);
    cr_assert_eq(run("--metrics long.jsonl --out c.svg --series a --smooth auto"), 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    double *xy = malloc(2 * 12300 * sizeof *xy);
    cr_assert_not_null(xy);
    size_t n = polyline(svg, 0, xy, 12300);
    /* the line through the moving average (W = 123, auto) at every 13th point (ceil(12300 / 1000))
     * from the first, and the last: 0, 13, ..., 12298, 12299 (948 vertices), each against the
     * direct mean of v = i % 10 over steps k-122..k; y axis [0, 9] with 5% margin: [-0.45, 9.45] */
    cr_expect_eq(n, 948, "%zu vertices (want 948)", n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = i + 1 < n ? 13 * i : 12299, lo = k >= 122 ? k - 122 : 0;
        double sum = 0;
        for (size_t q = lo; q <= k; q++) sum += (double)((q + 1) % 10);
        double want_x = 80 + (double)k / 12299 * 690, want_y = 420 - (sum / (double)(k - lo + 1) + 0.45) / 9.9 * 370;
        worst = fmax(worst, fmax(fabs(xy[2 * i] - want_x), fabs(xy[2 * i + 1] - want_y)));
    }
    cr_expect_lt(worst, 0.006, "the moving average's vertices: largest coordinate error %g", worst);
    cr_expect_lt(fabs(xy[0] - 80), 0.006, "step 1 at the left edge: %g", xy[0]);
    cr_expect_lt(fabs(xy[2 * (n - 1)] - 770), 0.006, "step 12300 at the right edge: %g", xy[2 * (n - 1)]);
    cr_expect_not_null(strstr(svg, ">12000</text>"), "a tick at 12000 (step 2000)");
    cr_expect_null(strstr(svg, ">15000</text>"), "no tick beyond the data");
    cr_expect_null(strstr(svg, ">14000</text>"), "no tick beyond the data");
    const char *d = strstr(svg, "<path");
    cr_assert_not_null(d);
    size_t dots = 0;
    const char *end = strstr(d, "/>");
    for (const char *q = d; (q = strstr(q, "h0")) != NULL && q < end; q++) dots++;
    /* every 7th point (ceil(12300 / 2000)) from the first: 0, 7, ..., 12299, the last among them */
    cr_expect_eq(dots, 1758, "%zu dots (want 1758 <= %d)", dots, LS_PLOT_MAX_DOTS);
    cr_expect_not_null(strstr(d, "M770.00,"), "the last point has a dot");
    cr_expect(strstr(d, "M770.00,") < end);
    free(xy);
    free(svg);
    /* auto below 500 points: raw lines, no dots */
    write_file("short.jsonl", three);
    cr_assert_eq(run("--metrics short.jsonl --out c.svg --series a --smooth auto"), 0, "%s", slurp("err.txt"));
    svg = slurp("c.svg");
    cr_expect_null(strstr(svg, "<path"), "--smooth auto on 3 points draws raw lines");
    free(svg);
}

/* --hline: a dashed line with its label, the axis stretched to hold it;
 * --ymin/--ymax set the left axis exactly. */
Test(plot, hline_and_bounds, .init = setup, .fini = teardown) {
    write_file("m.jsonl", three);
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a --hline -1:chance --hline '0.5:a<b'"),
                 0, "%s", slurp("err.txt"));
    char *svg = slurp("c.svg");
    expect_well_formed(svg);
    /* a spans 0..1, the lines -1 and 0.5: [-1, 1] with 5% margin -> [-1.1, 1.1] */
#define YH(v) (420 - ((v) + 1.1) / 2.2 * 370)
    const double a[] = {80, YH(0), 425, YH(0.5), 770, YH(1)};
    expect_points(svg, 0, a, 3);
    const char *l = strstr(svg, "stroke-dasharray=\"5,4\"><title>chance</title>");
    cr_assert_not_null(l, "the reference line 'chance'");
    while (l > svg && strncmp(l, "<line", 5) != 0) l--;
    double y1 = 0, y2 = 0;
    cr_assert(sscanf(strstr(l, "y1=\"") + 4, "%lf", &y1) == 1 && sscanf(strstr(l, "y2=\"") + 4, "%lf", &y2) == 1);
    cr_expect_lt(fabs(y1 - YH(-1)), 0.006, "the line at -1: y %g, want %g", y1, YH(-1));
    cr_expect(y1 == y2 && y1 >= 50 && y1 <= 420, "horizontal and inside the plot: %g %g", y1, y2);
    cr_expect_not_null(strstr(svg, ">chance</text>"), "the label is drawn");
    cr_expect_not_null(strstr(svg, ">a&lt;b</text>"), "a label is escaped");
    free(svg);
    cr_assert_eq(run("--metrics m.jsonl --out c.svg --series a --ymin 0 --ymax 2"), 0, "%s", slurp("err.txt"));
    svg = slurp("c.svg");
    const double b[] = {80, 420, 425, 420 - 0.25 * 370, 770, 420 - 0.5 * 370};
    expect_points(svg, 0, b, 3);
    /* clipped to the plot area, under an id naming that rectangle (x 80..770, y 50..420): charts inlined
       into one page share an id only where they share the rectangle */
    cr_expect_not_null(strstr(svg, "<clipPath id=\"ls-plot-area-80.00-50.00-690-370\"><rect x=\"80.00\" y=\"50.00\" "
                                   "width=\"690\" height=\"370\"/>"),
                       "the clip rectangle and its id");
    cr_expect_not_null(strstr(svg, "clip-path=\"url(#ls-plot-area-80.00-50.00-690-370)\""), "the lines are clipped to it");
    free(svg);
}

/* Fields of any JSON type other than the series are skipped (a nested "groups" array). */
Test(plot, other_fields_skipped) {
    const char *text = "{\"step\":1,\"a\":2,\"groups\":[{\"id\":0,\"r\":[1,2],\"x\":null},{\"id\":1}],"
                       "\"note\":\"x\",\"ok\":true,\"none\":null,\"o\":{\"p\":{\"q\":[]}}}\n"
                       "{\"groups\":[],\"step\":3,\"a\":4}\n";
    const char *names[] = {"a"};
    ls_metrics_table t;
    char err[256];
    cr_assert_eq(ls_metrics_parse(&t, text, strlen(text), "x", names, 1, err, sizeof err), LS_OK, "%s", err);
    cr_expect(t.n_points == 2 && t.step[1] == 3 && t.value[0] == 2 && t.value[1] == 4);
    ls_metrics_table_free(&t);
    const char *g[] = {"groups"};
    cr_expect_eq(ls_metrics_parse(&t, text, strlen(text), "x", g, 1, err, sizeof err), LS_ERR_FORMAT);
    cr_expect_not_null(strstr(err, "x:1: field 'groups': not a number"), "%s", err);
}

Test(plot, bad_new_arguments_exit_2, .init = setup, .fini = teardown) {
    write_file("m.jsonl", three);
    static const bad_case cases[] = {
        {"--metrics m.jsonl --out c.svg --series a --smooth 0", "--smooth: '0'"},
        {"--metrics m.jsonl --out c.svg --series a --smooth -3", "--smooth: '-3'"},
        {"--metrics m.jsonl --out c.svg --series a --smooth 2x", "--smooth: '2x'"},
        {"--metrics m.jsonl --out c.svg --series a --smooth 100001", "--smooth: '100001'"},
        {"--metrics m.jsonl --out c.svg --series a --hline x", "--hline: 'x'"},
        {"--metrics m.jsonl --out c.svg --series a --hline :chance", "--hline: ':chance'"},
        {"--metrics m.jsonl --out c.svg --series a --hline 1e999:big", "--hline: '1e999:big'"},
        {"--label x --metrics m.jsonl --out c.svg --series a", "--label: must follow the --metrics"},
        {"--group x --metrics m.jsonl --out c.svg --series a", "--group: must follow the --metrics"},
        {"--dash solid --metrics m.jsonl --out c.svg --series a", "--dash: must follow the --metrics"},
        {"--metrics m.jsonl --label x --label y --out c.svg --series a", "--label: given twice for --metrics m.jsonl"},
        {"--metrics m.jsonl --label '' --out c.svg --series a", "--label: ''"},
        {"--metrics m.jsonl --dash wavy --out c.svg --series a", "--dash: 'wavy'"},
        {"--metrics m.jsonl --out c.svg --series a --ymin 2 --ymax 1", "--ymin 2 is not below --ymax 1"},
        {"--metrics m.jsonl --out c.svg --series a --ymin abc", "--ymin: 'abc'"},
        {"--metrics m.jsonl --out c.svg --series a --ymin 5", "--ymin/--ymax"},
        {"--metrics m.jsonl --metrics m.jsonl --metrics m.jsonl --metrics m.jsonl --metrics m.jsonl --out c.svg "
         "--series a,b,c,d,e,f,g,h,i,j,k,l,m", "5 files x 13 series is more than 64 lines"},
        {"--metrics m.jsonl --metrics '' --out c.svg --series a", "--metrics: empty file name"},
        {"--metrics m.jsonl --metrics nosuch.jsonl --out c.svg --series a", "nosuch.jsonl"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file("c.svg", "old chart");
        int rc = run(cases[i].text);
        char *err = slurp("err.txt"), *svg = slurp("c.svg");
        cr_expect_eq(rc, 2, "case %zu (%s): exit %d (want 2); stderr: %s", i, cases[i].text, rc, err);
        cr_expect_not_null(strstr(err, cases[i].want), "case %zu: stderr '%s' does not name '%s'", i, err,
                           cases[i].want);
        cr_expect_str_eq(svg, "old chart", "case %zu: the existing chart was touched", i);
        free(err);
        free(svg);
    }
    char many[4096] = "--out c.svg --series a";
    for (int i = 0; i < 17; i++) strcat(many, " --metrics m.jsonl");
    cr_expect_eq(run(many), 2);
    char *err = slurp("err.txt");
    cr_expect_not_null(strstr(err, "--metrics: more than 16 files"), "%s", err);
    free(err);
}

/* longstraw-train --plot: raw lines for a short run, smoothed from 500 steps on. */
Test(plot, train_plot_smooths_long_runs, .init = setup, .fini = teardown) {
    char m[512], svg_path[512], err[512];
    snprintf(m, sizeof m, "%s/m.jsonl", tmpdir);
    snprintf(svg_path, sizeof svg_path, "%s/learning.svg", tmpdir);
    for (int steps = 499; steps <= 500; steps++) {
        FILE *f = fopen(m, "wb");
        cr_assert_not_null(f);
        for (int i = 1; i <= steps; i++) fprintf(f, "{\"kl_mean\":0.001,\"reward_mean\":%d,\"step\":%d}\n", i % 3, i);
        fclose(f);
        cr_assert_eq(ls_run_metrics_plot(m, svg_path, 0, "t", err, sizeof err), LS_OK, "%s", err);
        char *svg = slurp("learning.svg");
        int dots = strstr(svg, "<path") != NULL;
        cr_expect_eq(dots, steps >= 500, "%d steps: %s", steps, dots ? "smoothed" : "raw");
        expect_well_formed(svg);
        free(svg);
    }
}
