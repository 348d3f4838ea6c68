/* metrics_plot.c - metrics JSONL to an SVG line chart (see metrics_plot.h). */
#include "trainer/run/metrics_plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/atomic_file.h"
#include "receipts/json_util.h"
#include "trainer/base/mem_tracker.h"

/* ---- command line ---------------------------------------------------------- */

void ls_plot_usage(FILE *f) {
    fputs("usage: longstraw-plot --metrics FILE --out FILE.svg --series NAME[,NAME...] [options]\n"
          "\n"
          "Draws the named numeric fields of a metrics JSONL file (one JSON object per\n"
          "line with an integer \"step\", as longstraw-train --metrics writes) against the\n"
          "step, as a self-contained SVG line chart with axes, tick labels and a legend.\n"
          "\n"
          "  --metrics FILE       metrics JSONL (at most 64 MiB, 100000 lines)\n"
          "  --out FILE.svg       the chart (written atomically)\n"
          "  --series A,B,...     fields to draw, one line each (at most 16)\n"
          "  --right A,...        of those, the ones drawn against a right-hand axis\n"
          "  --title T            a title above the chart\n"
          "  --help               this text\n"
          "\n"
          "Exit status: 0 written; 2 bad arguments or a bad metrics file (the message\n"
          "names the line and field); 1 the chart could not be written.\n",
          f);
}

/* 1 when s is valid UTF-8 without control characters (C0, DEL). */
static int text_ok(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0 || (n == 0 && (c < 0x20 || c == 0x7F)) || (n == 1 && c < 0xC2) || (n == 3 && c > 0xF4)) return 0;
        uint32_t cp = n == 0 ? c : c & (0x3Fu >> n);
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        p += n + 1;
    }
    return 1;
}

/* Splits a comma list into a->series (from index a->n_series) or marks
 * a->right; -1 with err on a bad name. */
static int parse_list(ls_plot_args *a, const char *opt, const char *list, int right, char *err, size_t errlen) {
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char name[LS_PLOT_MAX_NAME];
        if (n == 0) {
            ls_json_errf(err, errlen, "%s: empty name in '%s'", opt, list);
            return -1;
        }
        if (n >= LS_PLOT_MAX_NAME) {
            ls_json_errf(err, errlen, "%s: a name is longer than %d bytes", opt, LS_PLOT_MAX_NAME - 1);
            return -1;
        }
        memcpy(name, s, n);
        name[n] = '\0';
        if (!text_ok(name)) {
            ls_json_errf(err, errlen, "%s: name '%s' is not UTF-8 text without control characters", opt, name);
            return -1;
        }
        size_t k = 0;
        while (k < a->n_series && strcmp(a->series[k], name) != 0) k++;
        if (right) {
            if (k == a->n_series) {
                ls_json_errf(err, errlen, "%s: '%s' is not one of --series", opt, name);
                return -1;
            }
            a->right[k] = 1;
        } else {
            if (k < a->n_series) {
                ls_json_errf(err, errlen, "%s: '%s' named twice", opt, name);
                return -1;
            }
            if (a->n_series == LS_PLOT_MAX_SERIES) {
                ls_json_errf(err, errlen, "%s: more than %d series", opt, LS_PLOT_MAX_SERIES);
                return -1;
            }
            memcpy(a->series[a->n_series++], name, n + 1);
        }
        if (!e) return 0;
        s = e + 1;
    }
}

int ls_plot_args_parse(ls_plot_args *a, int argc, char **argv, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    const char *right = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            a->help = 1;
            return 0;
        }
        int known = !strcmp(o, "--metrics") || !strcmp(o, "--out") || !strcmp(o, "--series") ||
                    !strcmp(o, "--right") || !strcmp(o, "--title");
        if (!known) {
            ls_json_errf(err, errlen, "unknown argument '%s'", o);
            return -1;
        }
        if (i + 1 >= argc) {
            ls_json_errf(err, errlen, "%s: missing value", o);
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(o, "--metrics")) a->metrics = v;
        else if (!strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--right")) right = v;
        else if (!strcmp(o, "--title")) {
            if (strlen(v) > LS_PLOT_MAX_TITLE || !text_ok(v)) {
                ls_json_errf(err, errlen, "--title: longer than %d bytes, or not UTF-8 text without control characters",
                             LS_PLOT_MAX_TITLE);
                return -1;
            }
            a->title = v;
        } else if (parse_list(a, "--series", v, 0, err, errlen) != 0) return -1;
    }
    const char *missing = !a->metrics ? "--metrics" : !a->out ? "--out" : !a->n_series ? "--series" : NULL;
    if (missing) {
        ls_json_errf(err, errlen, "%s is required", missing);
        return -1;
    }
    if (a->metrics[0] == '\0' || a->out[0] == '\0') {
        ls_json_errf(err, errlen, "%s: empty file name", a->metrics[0] ? "--out" : "--metrics");
        return -1;
    }
    return right ? parse_list(a, "--right", right, 1, err, errlen) : 0;
}

/* ---- reading ------------------------------------------------------------- */

void ls_metrics_table_free(ls_metrics_table *t) {
    if (!t) return;
    ls_mem_free(t->step);
    ls_mem_free(t->value);
    memset(t, 0, sizeof *t);
}

/* One line into point k; LS_ERR_FORMAT naming line and field. */
static ls_status parse_line(ls_metrics_table *t, size_t k, const char *s, size_t n, const char *what, size_t line,
                            const char *const *names, char *err, size_t errlen) {
    char where[512], perr[512];
    snprintf(where, sizeof where, "%s:%zu", what, line);
    cJSON *o = NULL;
    ls_status st = ls_json_parse(s, n, where, &o, perr, sizeof perr);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s", perr);
        return st == LS_ERR_NOMEM ? st : LS_ERR_FORMAT;
    }
    st = LS_ERR_FORMAT;
    if (!cJSON_IsObject(o)) {
        ls_json_errf(err, errlen, "%s: not a JSON object", where);
        goto cleanup;
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    if (!step) {
        ls_json_errf(err, errlen, "%s: field 'step': missing", where);
        goto cleanup;
    }
    double sv = cJSON_IsNumber(step) ? step->valuedouble : -1;
    if (!(sv >= 0 && sv <= LS_JSON_MAX_EXACT_INT && sv == floor(sv))) {
        ls_json_errf(err, errlen, "%s: field 'step': not a non-negative integer", where);
        goto cleanup;
    }
    if (k > 0 && !(sv > t->step[k - 1])) {
        ls_json_errf(err, errlen, "%s: field 'step': %.0f does not follow %.0f (steps must increase)", where, sv,
                     t->step[k - 1]);
        goto cleanup;
    }
    t->step[k] = sv;
    for (size_t j = 0; j < t->n_series; j++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, names[j]);
        if (!v || !cJSON_IsNumber(v)) {
            ls_json_errf(err, errlen, "%s: field '%s': %s", where, names[j], v ? "not a number" : "missing");
            goto cleanup;
        }
        t->value[j * t->n_points + k] = v->valuedouble;
    }
    st = LS_OK;
cleanup:
    cJSON_Delete(o);
    return st;
}

ls_status ls_metrics_parse(ls_metrics_table *t, const char *bytes, size_t len, const char *what,
                           const char *const *names, size_t n, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    if (!what) what = "input";
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        if (bytes[i] == '\n' || i + 1 == len) lines++;
    if (lines == 0) {
        ls_json_errf(err, errlen, "%s: no lines", what);
        return LS_ERR_FORMAT;
    }
    if (lines > LS_PLOT_MAX_POINTS) {
        ls_json_errf(err, errlen, "%s: more than %d lines", what, LS_PLOT_MAX_POINTS);
        return LS_ERR_FORMAT;
    }
    t->n_points = lines;
    t->n_series = n;
    t->step = ls_mem_alloc(LS_MEM_SCRATCH, lines * sizeof *t->step);
    t->value = ls_mem_alloc(LS_MEM_SCRATCH, (n ? n : 1) * lines * sizeof *t->value);
    ls_status st = t->step && t->value ? LS_OK : LS_ERR_NOMEM;
    if (st != LS_OK) ls_json_errf(err, errlen, "%s: out of memory for %zu points", what, lines);
    size_t pos = 0;
    for (size_t k = 0; st == LS_OK && k < lines; k++) {
        const char *nl = memchr(bytes + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - bytes) : len;
        st = parse_line(t, k, bytes + pos, end - pos, what, k + 1, names, err, errlen);
        pos = end + 1;
    }
    if (st != LS_OK) ls_metrics_table_free(t);
    return st;
}

ls_status ls_metrics_read(ls_metrics_table *t, const char *path, size_t max_bytes, const char *const *names,
                          size_t n, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    char *bytes = NULL;
    size_t len = 0;
    ls_status st = ls_json_read_bytes_capped(path, max_bytes ? max_bytes : LS_PLOT_MAX_FILE_BYTES, &bytes, &len,
                                             err, errlen);
    if (st == LS_OK) st = ls_metrics_parse(t, bytes, len, path, names, n, err, errlen);
    free(bytes);
    return st;
}

/* ---- number text (integer arithmetic only: no locale) --------------------- */

/* v with `dec` decimals (0..9), or in scientific form when too large. */
static void fmt_num(char *buf, size_t cap, double v, int dec) {
    static const double p10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    if (dec < 0) dec = 0;
    if (dec > 9) dec = 9;
    double sc = v * p10[dec];
    if (fabs(sc) < 9e15) {
        long long q = llround(sc);
        unsigned long long a = q < 0 ? 0ull - (unsigned long long)q : (unsigned long long)q;
        unsigned long long ip = a / (unsigned long long)p10[dec], fp = a % (unsigned long long)p10[dec];
        if (dec) snprintf(buf, cap, "%s%llu.%0*llu", q < 0 ? "-" : "", ip, dec, fp);
        else snprintf(buf, cap, "%s%llu", q < 0 ? "-" : "", ip);
        return;
    }
    int e = (int)floor(log10(fabs(v)));
    double m = v / pow(10, e);
    if (fabs(m) >= 9.995) { /* rounding would print 10.00 */
        m /= 10;
        e++;
    }
    char mb[32];
    fmt_num(mb, sizeof mb, m, 2);
    snprintf(buf, cap, "%se%d", mb, e);
}

/* ---- the SVG ------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *s = ls_mem_realloc(LS_MEM_SCRATCH, b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* text with & < > " ' escaped (already checked to be UTF-8 without controls) */
static void put_text(sbuf *b, const char *t) {
    for (; *t; t++) {
        switch (*t) {
        case '&': put(b, "&amp;"); break;
        case '<': put(b, "&lt;"); break;
        case '>': put(b, "&gt;"); break;
        case '"': put(b, "&quot;"); break;
        case '\'': put(b, "&apos;"); break;
        default: put(b, "%c", *t);
        }
    }
}

typedef struct {
    double lo, hi, step;
    int dec; /* decimals of the tick labels */
} axis;

/* An axis over [mn, mx] rounded out to multiples of a nice step (1, 2, 5 x
 * 10^k, at least 1 when integral); -1 when the span cannot be scaled. */
static int make_axis(axis *ax, double mn, double mx, int integral) {
    if (!(mx - mn > 1e-12 * fmax(fabs(mn), fabs(mx)))) { /* one value: widen */
        double d = mn != 0 ? fabs(mn) * 0.1 : 1;
        if (integral && d < 1) d = 1;
        mn -= d;
        mx += d;
    }
    double raw = mx / 5 - mn / 5;
    if (!isfinite(raw) || raw > 1e306 || raw <= 0) return -1;
    int e = (int)floor(log10(raw));
    double mag = pow(10, e), f = raw / mag, nf = f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10;
    if (nf == 10) {
        nf = 1;
        e++;
        mag *= 10;
    }
    ax->step = nf * mag;
    ax->dec = e < 0 ? -e : 0;
    if (integral && ax->step < 1) {
        ax->step = 1;
        ax->dec = 0;
    }
    ax->lo = floor(mn / ax->step + 1e-9) * ax->step;
    ax->hi = ceil(mx / ax->step - 1e-9) * ax->step;
    if (!(ax->hi > ax->lo) || !isfinite(ax->hi - ax->lo)) return -1;
    return 0;
}

typedef struct {
    double x0, x1, y0, y1; /* plot area: left, right, top, bottom */
} frame;

static double xpos(const frame *f, const axis *a, double v) { return f->x0 + (v - a->lo) / (a->hi - a->lo) * (f->x1 - f->x0); }
static double ypos(const frame *f, const axis *a, double v) { return f->y1 - (v - a->lo) / (a->hi - a->lo) * (f->y1 - f->y0); }

static void put_xy(sbuf *b, double x, double y) {
    char xs[48], ys[48];
    fmt_num(xs, sizeof xs, x, 2);
    fmt_num(ys, sizeof ys, y, 2);
    put(b, "%s,%s", xs, ys);
}

/* ticks of an axis: side 0 = x (bottom), 1 = left, 2 = right */
static void put_ticks(sbuf *b, const frame *f, const axis *a, int side) {
    long long k0 = (long long)ceil(a->lo / a->step - 1e-9), k1 = (long long)floor(a->hi / a->step + 1e-9);
    for (long long k = k0; k <= k1 && k - k0 <= 20; k++) {
        double v = (double)k * a->step;
        char lab[48], p[48], q[48];
        fmt_num(lab, sizeof lab, v, a->dec);
        if (side == 0) {
            double x = xpos(f, a, v);
            fmt_num(p, sizeof p, x, 2);
            fmt_num(q, sizeof q, f->y1, 2);
            put(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"", p, q, p);
            fmt_num(q, sizeof q, f->y1 + 5, 2);
            put(b, "%s\" stroke=\"#000000\"/>\n<text x=\"%s\" y=\"", q, p);
            fmt_num(q, sizeof q, f->y1 + 20, 2);
            put(b, "%s\" text-anchor=\"middle\">%s</text>\n", q, lab);
        } else {
            double y = ypos(f, a, v), xe = side == 1 ? f->x0 : f->x1, dx = side == 1 ? -5 : 5;
            char ye[48], gx0[48], gx1[48];
            fmt_num(ye, sizeof ye, y, 2);
            fmt_num(gx0, sizeof gx0, xe, 2);
            fmt_num(gx1, sizeof gx1, xe + dx, 2);
            if (side == 1) {
                char xr[48];
                fmt_num(xr, sizeof xr, f->x1, 2);
                put(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#e0e0e0\"/>\n", gx0, ye, xr, ye);
            }
            put(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#000000\"/>\n", gx0, ye, gx1, ye);
            fmt_num(gx1, sizeof gx1, xe + 2 * dx, 2);
            fmt_num(ye, sizeof ye, y + 4, 2);
            put(b, "<text x=\"%s\" y=\"%s\" text-anchor=\"%s\">%s</text>\n", gx1, ye, side == 1 ? "end" : "start", lab);
        }
    }
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                      "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static void put_series(sbuf *b, const ls_metrics_table *t, size_t j, const frame *f, const axis *ax,
                       const axis *ay, const char *name, int right) {
    const char *col = palette[j % (sizeof palette / sizeof palette[0])];
    put(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", col,
        j >= 10 ? " stroke-dasharray=\"6,3\"" : "");
    for (size_t k = 0; k < t->n_points; k++) {
        if (k) put(b, " ");
        put_xy(b, xpos(f, ax, t->step[k]), ypos(f, ay, t->value[j * t->n_points + k]));
    }
    put(b, "\"><title>");
    put_text(b, name);
    put(b, "%s</title></polyline>\n", right ? " (right axis)" : "");
    if (t->n_points == 1) { /* a lone point draws no line */
        char x[48], y[48];
        fmt_num(x, sizeof x, xpos(f, ax, t->step[0]), 2);
        fmt_num(y, sizeof y, ypos(f, ay, t->value[j]), 2);
        put(b, "<circle cx=\"%s\" cy=\"%s\" r=\"3\" fill=\"%s\"/>\n", x, y, col);
    }
}

static void put_legend(sbuf *b, const frame *f, const char *const *names, const unsigned char *right, size_t n) {
    char x0[48], x1[48], xt[48], y[48], yt[48], h[48];
    size_t chars = 0; /* a rough width: 7 units a byte */
    for (size_t j = 0; j < n; j++) {
        size_t c = strlen(names[j]) + (right && right[j] ? 13 : 0);
        if (c > chars) chars = c;
    }
    fmt_num(x0, sizeof x0, f->x0 + 8, 2);
    fmt_num(h, sizeof h, 16.0 * (double)n + 8, 2);
    fmt_num(y, sizeof y, f->y0 + 8, 2);
    put(b, "<rect x=\"%s\" y=\"%s\" width=\"%zu\" height=\"%s\" fill=\"#ffffff\" fill-opacity=\"0.8\" "
           "stroke=\"#cccccc\"/>\n",
        x0, y, 48 + 7 * chars, h);
    for (size_t j = 0; j < n; j++) {
        double yy = f->y0 + 8 + 16 + 16.0 * (double)j - 4;
        fmt_num(x0, sizeof x0, f->x0 + 16, 2);
        fmt_num(x1, sizeof x1, f->x0 + 40, 2);
        fmt_num(xt, sizeof xt, f->x0 + 46, 2);
        fmt_num(y, sizeof y, yy - 4, 2);
        fmt_num(yt, sizeof yt, yy, 2);
        put(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", x0, y, x1, y,
            palette[j % (sizeof palette / sizeof palette[0])], j >= 10 ? " stroke-dasharray=\"6,3\"" : "");
        put(b, "<text x=\"%s\" y=\"%s\">", xt, yt);
        put_text(b, names[j]);
        put(b, "%s</text>\n", right && right[j] ? " (right axis)" : "");
    }
}

/* the value range of the series on one side; 0 when there are none */
static int series_range(const ls_metrics_table *t, const unsigned char *right, int side, double *mn, double *mx) {
    int any = 0;
    *mn = INFINITY;
    *mx = -INFINITY;
    for (size_t j = 0; j < t->n_series; j++) {
        if ((right && right[j]) != side) continue;
        any = 1;
        for (size_t k = 0; k < t->n_points; k++) {
            *mn = fmin(*mn, t->value[j * t->n_points + k]);
            *mx = fmax(*mx, t->value[j * t->n_points + k]);
        }
    }
    return any;
}

ls_status ls_plot_svg(const ls_metrics_table *t, const char *const *names, const unsigned char *right,
                      const char *title, char **svg, size_t *len, char *err, size_t errlen) {
    *svg = NULL;
    *len = 0;
    double mn, mx;
    axis ax, ay[2];
    int has[2];
    if (t->n_points == 0 || make_axis(&ax, t->step[0], t->step[t->n_points - 1], 1) != 0) {
        ls_json_errf(err, errlen, "the steps cannot be scaled");
        return LS_ERR_ARG;
    }
    for (int side = 0; side < 2; side++) {
        has[side] = series_range(t, right, side, &mn, &mx);
        if (has[side] && make_axis(&ay[side], mn, mx, 0) != 0) {
            ls_json_errf(err, errlen, "the %s axis's values span too wide a range to scale (%g .. %g)",
                         side ? "right" : "left", mn, mx);
            return LS_ERR_ARG;
        }
    }
    frame f = {LS_PLOT_LEFT, LS_PLOT_WIDTH - (has[1] ? LS_PLOT_RIGHT_AXIS : LS_PLOT_RIGHT), LS_PLOT_TOP,
               LS_PLOT_HEIGHT - LS_PLOT_BOTTOM};
    sbuf b = {0};
    put(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
        LS_PLOT_WIDTH, LS_PLOT_HEIGHT, LS_PLOT_WIDTH, LS_PLOT_HEIGHT, LS_PLOT_WIDTH, LS_PLOT_HEIGHT);
    if (title) {
        put(&b, "<text x=\"%d\" y=\"30\" text-anchor=\"middle\" font-size=\"16\">", LS_PLOT_WIDTH / 2);
        put_text(&b, title);
        put(&b, "</text>\n");
    }
    for (int side = 0; side < 2; side++)
        if (has[side]) put_ticks(&b, &f, &ay[side], side + 1);
    put_ticks(&b, &f, &ax, 0);
    char x0[48], x1[48], y0[48], y1[48];
    fmt_num(x0, sizeof x0, f.x0, 2);
    fmt_num(x1, sizeof x1, f.x1, 2);
    fmt_num(y0, sizeof y0, f.y0, 2);
    fmt_num(y1, sizeof y1, f.y1, 2);
    put(&b, "<rect x=\"%s\" y=\"%s\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000000\"/>\n", x0, y0,
        (int)(f.x1 - f.x0), (int)(f.y1 - f.y0));
    put(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (int)((f.x0 + f.x1) / 2),
        LS_PLOT_HEIGHT - 16);
    for (size_t j = 0; j < t->n_series; j++)
        put_series(&b, t, j, &f, &ax, &ay[right && right[j]], names[j], right && right[j]);
    put_legend(&b, &f, names, right, t->n_series);
    put(&b, "</svg>\n");
    if (b.oom) {
        ls_mem_free(b.s);
        ls_json_errf(err, errlen, "out of memory rendering the chart");
        return LS_ERR_NOMEM;
    }
    *svg = b.s;
    *len = b.len;
    return LS_OK;
}

int ls_plot_run(const ls_plot_args *a, char *err, size_t errlen) {
    const char *names[LS_PLOT_MAX_SERIES];
    for (size_t j = 0; j < a->n_series; j++) names[j] = a->series[j];
    ls_metrics_table t;
    ls_status st = ls_metrics_read(&t, a->metrics, 0, names, a->n_series, err, errlen);
    if (st != LS_OK) return st == LS_ERR_NOMEM ? 1 : 2;
    char *svg = NULL;
    size_t len = 0;
    st = ls_plot_svg(&t, names, a->right, a->title, &svg, &len, err, errlen);
    int rc = st == LS_OK ? 0 : st == LS_ERR_NOMEM ? 1 : 2;
    if (st == LS_OK && ls_atomic_write(a->out, svg, len, err, errlen) != LS_OK) rc = 1;
    ls_mem_free(svg);
    ls_metrics_table_free(&t);
    return rc;
}
