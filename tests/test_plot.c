/* test_plot.c - longstraw-plot (trainer/run/metrics_plot.h): a known three-point
 * file gives polylines at hand-computed coordinates (one axis, and with a
 * right-hand axis); bad lines exit 2 naming the line and field; bad
 * arguments exit 2 naming the argument; the bounds (points, file size)
 * hold; the output is well-formed XML (tags balanced, entities known) even
 * with markup characters in the title and names; a failed run leaves an
 * existing chart as it was. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "trainer/run/metrics_plot.h"
#include "test_tmpdir.h"

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
        {"--metrics m.jsonl --out c.svg --series a --bogus 1", "unknown argument '--bogus'"},
        {"--metrics m.jsonl --out c.svg --series", "--series: missing value"},
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
