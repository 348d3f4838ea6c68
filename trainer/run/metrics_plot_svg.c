/* metrics_plot_svg.c - longstraw-plot's chart: tables of metrics to SVG text
 * (the layout, colours, dashes, smoothing and axes are in metrics_plot.h). */
#include "trainer/run/metrics_plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "trainer/base/mem_tracker.h"

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

/* The tick step for [lo, hi]: 1, 2 or 5 x 10^k nearest (hi - lo) / 6, at
 * least 1 when integral; -1 when the span cannot be scaled. */
static int set_ticks(axis *ax, int integral) {
    double raw = ax->hi / 6 - ax->lo / 6;
    if (!isfinite(raw) || raw > 1e306 || raw <= 0 || !isfinite(ax->hi - ax->lo)) return -1;
    int e = (int)floor(log10(raw));
    double mag = pow(10, e), f = raw / mag, nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
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
    return 0;
}

/* An axis over [mn, mx], widened by 5% of the span at each end (margin), or
 * around a lone value by 10% of it (1 around 0; 1 when integral). */
static int fit_axis(axis *ax, double mn, double mx, int integral, int margin) {
    if (!(mx - mn > 1e-12 * fmax(fabs(mn), fabs(mx)))) {
        double d = mn != 0 ? fabs(mn) * 0.1 : 1;
        if (integral && d < 1) d = 1;
        mn -= d;
        mx += d;
    } else if (margin) {
        double pad = mx / 20 - mn / 20;
        mn -= pad;
        mx += pad;
    }
    ax->lo = mn;
    ax->hi = mx;
    return set_ticks(ax, integral);
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

/* ticks of an axis inside [lo, hi]: side 0 = x (bottom), 1 = left, 2 = right */
static void put_ticks(sbuf *b, const frame *f, const axis *a, int side) {
    if (fabs(a->lo / a->step) > 1e15 || fabs(a->hi / a->step) > 1e15) return; /* no room for integer ticks */
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

#define N_COLOURS 10
static const char *const palette[N_COLOURS] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
static const char *const dasharray[LS_PLOT_N_DASHES] = {"", "6,3", "2,3", "8,3,2,3", "14,4"};

/* How one (file, series) line is drawn and named. */
typedef struct {
    const ls_metrics_table *t;
    size_t j;                  /* the series */
    int right;                 /* on the right-hand axis */
    const char *colour, *dash; /* dash "": solid */
    char name[2 * LS_PLOT_MAX_NAME + 16];
} line_style;

/* The lines' styles by the rules of metrics_plot.h (s->n_files * s->n_series entries). */
static void style_lines(const ls_plot_spec *s, line_style *ls) {
    size_t gid[LS_PLOT_MAX_FILES], rank[LS_PLOT_MAX_FILES], keys = 0;
    size_t key_g[LS_PLOT_MAX_LINES], key_j[LS_PLOT_MAX_LINES];
    for (size_t i = 0; i < s->n_files; i++) {
        const ls_plot_file *f = &s->files[i];
        const char *key = f->group ? f->group : f->label;
        gid[i] = i;
        for (size_t p = 0; key && p < i; p++) {
            const char *pk = s->files[p].group ? s->files[p].group : s->files[p].label;
            if (pk && !strcmp(pk, key)) {
                gid[i] = gid[p];
                break;
            }
        }
        rank[i] = 0;
        for (size_t p = 0; p < i; p++) rank[i] += gid[p] == gid[i];
    }
    for (size_t i = 0; i < s->n_files; i++) {
        const ls_plot_file *f = &s->files[i];
        int dash = f->dash >= 0 && f->dash < LS_PLOT_N_DASHES ? f->dash : (int)(rank[i] % LS_PLOT_N_DASHES);
        for (size_t j = 0; j < s->n_series; j++) {
            line_style *l = &ls[i * s->n_series + j];
            size_t c = 0;
            while (c < keys && !(key_g[c] == gid[i] && key_j[c] == j)) c++;
            if (c == keys) {
                key_g[keys] = gid[i];
                key_j[keys++] = j;
            }
            l->t = f->table;
            l->j = j;
            l->right = s->right && s->right[j];
            l->colour = palette[c % N_COLOURS];
            l->dash = dasharray[(dash + (int)(c / N_COLOURS)) % LS_PLOT_N_DASHES];
            const char *rs = l->right ? " (right axis)" : "";
            if (!f->label) snprintf(l->name, sizeof l->name, "%s%s", s->names[j], rs);
            else if (s->n_series == 1) snprintf(l->name, sizeof l->name, "%s%s", f->label, rs);
            else snprintf(l->name, sizeof l->name, "%s: %s%s", f->label, s->names[j], rs);
        }
    }
}

static void put_dash(sbuf *b, const char *dash) {
    if (dash[0]) put(b, " stroke-dasharray=\"%s\"", dash);
}

/* The point drawn after k when every stride-th is drawn from the first, and the last; n at the end. */
static size_t next_drawn(size_t k, size_t stride, size_t n) {
    if (k + 1 >= n) return n;
    return k + stride < n ? k + stride : n - 1;
}

/* The raw points as faint dots: every stride-th from the first, and the last. */
static void put_dots(sbuf *b, const line_style *l, const frame *f, const axis *ax, const axis *ay) {
    const ls_metrics_table *t = l->t;
    const double *v = t->value + l->j * t->n_points;
    size_t stride = (t->n_points + LS_PLOT_MAX_DOTS - 1) / LS_PLOT_MAX_DOTS;
    put(b, "<path fill=\"none\" stroke=\"%s\" stroke-opacity=\"0.25\" stroke-width=\"3\" stroke-linecap=\"round\" d=\"",
        l->colour);
    for (size_t k = 0; k < t->n_points; k = next_drawn(k, stride, t->n_points)) {
        put(b, "M");
        put_xy(b, xpos(f, ax, t->step[k]), ypos(f, ay, v[k]));
        put(b, "h0");
    }
    put(b, "\"/>\n");
}

/* The line itself: its raw points (sm NULL), or their moving average sm at
 * most LS_PLOT_MAX_LINE_POINTS of them (every stride-th and the last: about
 * one a plot unit, so that the line reads as a line and its dashes show). */
static void put_line(sbuf *b, const line_style *l, const double *sm, const frame *f, const axis *ax, const axis *ay) {
    const ls_metrics_table *t = l->t;
    const double *v = sm ? sm : t->value + l->j * t->n_points;
    put(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"", l->colour, sm ? "2" : "1.5");
    put_dash(b, l->dash);
    put(b, " points=\"");
    size_t stride = sm ? (t->n_points + LS_PLOT_MAX_LINE_POINTS - 1) / LS_PLOT_MAX_LINE_POINTS : 1;
    for (size_t k = 0; k < t->n_points; k = next_drawn(k, stride, t->n_points)) {
        if (k) put(b, " ");
        put_xy(b, xpos(f, ax, t->step[k]), ypos(f, ay, v[k]));
    }
    put(b, "\"><title>");
    put_text(b, l->name);
    put(b, "%s</title></polyline>\n", sm ? " (moving average)" : "");
    if (t->n_points == 1) { /* a lone point draws no line */
        char x[48], y[48];
        fmt_num(x, sizeof x, xpos(f, ax, t->step[0]), 2);
        fmt_num(y, sizeof y, ypos(f, ay, v[0]), 2);
        put(b, "<circle cx=\"%s\" cy=\"%s\" r=\"3\" fill=\"%s\"/>\n", x, y, l->colour);
    }
}

/* Dashed grey lines across the plot (inside the clip); their labels come later. */
static void put_hlines(sbuf *b, const ls_plot_spec *s, const frame *f, const axis *ay, int labels) {
    char x0[48], x1[48], y[48];
    fmt_num(x0, sizeof x0, f->x0, 2);
    fmt_num(x1, sizeof x1, f->x1, 2);
    for (size_t h = 0; h < s->n_hlines; h++) {
        double yy = ypos(f, ay, s->hlines[h].value);
        if (!labels) {
            fmt_num(y, sizeof y, yy, 2);
            put(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#555555\" stroke-width=\"1.2\" "
                   "stroke-dasharray=\"5,4\"><title>",
                x0, y, x1, y);
            put_text(b, s->hlines[h].label);
            put(b, "</title></line>\n");
        } else if (s->hlines[h].label[0] && yy >= f->y0 && yy <= f->y1) {
            char xt[48]; /* above the line, or below it at the top of the plot */
            fmt_num(xt, sizeof xt, f->x1 - 4, 2);
            fmt_num(y, sizeof y, yy < f->y0 + 14 ? yy + 14 : yy - 4, 2);
            put(b, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\" fill=\"#555555\">", xt, y);
            put_text(b, s->hlines[h].label);
            put(b, "</text>\n");
        }
    }
}

/* Legend geometry: columns of equal width below the plot. */
typedef struct {
    size_t cols, rows;
    double colw;
} legend_box;

static legend_box legend_layout(const line_style *ls, size_t n) {
    size_t chars = 1; /* a rough width: 7 units a byte */
    for (size_t i = 0; i < n; i++)
        if (strlen(ls[i].name) > chars) chars = strlen(ls[i].name);
    legend_box g;
    g.colw = 44.0 + 7.0 * (double)chars;
    g.cols = (size_t)((LS_PLOT_WIDTH - 40) / g.colw);
    if (g.cols < 1) g.cols = 1;
    if (g.cols > n) g.cols = n;
    g.rows = (n + g.cols - 1) / g.cols;
    return g;
}

static void put_legend(sbuf *b, const line_style *ls, size_t n, const legend_box *g) {
    for (size_t i = 0; i < n; i++) {
        double x = 20 + g->colw * (double)(i % g->cols), y = LS_PLOT_HEIGHT + 12 + 18.0 * (double)(i / g->cols);
        char x0[48], x1[48], xt[48], yl[48], yt[48];
        fmt_num(x0, sizeof x0, x, 2);
        fmt_num(x1, sizeof x1, x + 28, 2);
        fmt_num(xt, sizeof xt, x + 34, 2);
        fmt_num(yl, sizeof yl, y, 2);
        fmt_num(yt, sizeof yt, y + 4, 2);
        put(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"2\"", x0, yl, x1, yl,
            ls[i].colour);
        put_dash(b, ls[i].dash);
        put(b, "/>\n<text x=\"%s\" y=\"%s\">", xt, yt);
        put_text(b, ls[i].name);
        put(b, "</text>\n");
    }
}

/* The value range of a side's series over all files (the left side: and the
 * reference lines); 0 when that side has nothing. */
static int side_range(const ls_plot_spec *s, int side, double *mn, double *mx) {
    int any = 0;
    *mn = INFINITY;
    *mx = -INFINITY;
    for (size_t i = 0; i < s->n_files; i++) {
        const ls_metrics_table *t = s->files[i].table;
        for (size_t j = 0; j < s->n_series; j++) {
            if ((s->right && s->right[j]) != side) continue;
            any = 1;
            for (size_t k = 0; k < t->n_points; k++) {
                *mn = fmin(*mn, t->value[j * t->n_points + k]);
                *mx = fmax(*mx, t->value[j * t->n_points + k]);
            }
        }
    }
    for (size_t h = 0; side == 0 && h < s->n_hlines; h++) {
        any = 1;
        *mn = fmin(*mn, s->hlines[h].value);
        *mx = fmax(*mx, s->hlines[h].value);
    }
    return any;
}

/* The axes and the frame; LS_ERR_ARG with err when they cannot be made. */
static ls_status make_axes(const ls_plot_spec *s, axis *ax, axis ay[2], int has[2], frame *f, char *err, size_t errlen) {
    double first = INFINITY, last = -INFINITY, mn, mx;
    for (size_t i = 0; i < s->n_files; i++) {
        const ls_metrics_table *t = s->files[i].table;
        if (!t || t->n_points == 0 || t->n_series != s->n_series) {
            ls_json_errf(err, errlen, "file %zu of the chart has no points or not %zu series", i + 1, s->n_series);
            return LS_ERR_ARG;
        }
        first = fmin(first, t->step[0]);
        last = fmax(last, t->step[t->n_points - 1]);
    }
    if (fit_axis(ax, first, last, 1, 0) != 0) {
        ls_json_errf(err, errlen, "the steps cannot be scaled");
        return LS_ERR_ARG;
    }
    for (int side = 0; side < 2; side++) {
        has[side] = side_range(s, side, &mn, &mx);
        if (has[side] && fit_axis(&ay[side], mn, mx, 0, 1) != 0) {
            ls_json_errf(err, errlen, "the %s axis's values span too wide a range to scale (%g .. %g)",
                         side ? "right" : "left", mn, mx);
            return LS_ERR_ARG;
        }
    }
    if (has[0] && (s->has_ymin || s->has_ymax)) {
        if (s->has_ymin) ay[0].lo = s->ymin;
        if (s->has_ymax) ay[0].hi = s->ymax;
        if (!(ay[0].lo < ay[0].hi) || set_ticks(&ay[0], 0) != 0) {
            ls_json_errf(err, errlen, "--ymin/--ymax: the left axis would span %g .. %g, an empty or unscalable range",
                         ay[0].lo, ay[0].hi);
            return LS_ERR_ARG;
        }
    }
    *f = (frame){LS_PLOT_LEFT, LS_PLOT_WIDTH - (has[1] ? LS_PLOT_RIGHT_AXIS : LS_PLOT_RIGHT), LS_PLOT_TOP,
                 LS_PLOT_HEIGHT - LS_PLOT_BOTTOM};
    return LS_OK;
}

ls_status ls_plot_svg(const ls_plot_spec *s, char **svg, size_t *len, char *err, size_t errlen) {
    *svg = NULL;
    *len = 0;
    size_t nl = s->n_files * s->n_series;
    if (s->n_files == 0 || s->n_series == 0 || s->n_files > LS_PLOT_MAX_FILES || s->n_series > LS_PLOT_MAX_SERIES ||
        nl > LS_PLOT_MAX_LINES || s->n_hlines > LS_PLOT_MAX_HLINES) {
        ls_json_errf(err, errlen, "%zu files x %zu series (%zu reference lines): nothing to draw or more than %d lines",
                     s->n_files, s->n_series, s->n_hlines, LS_PLOT_MAX_LINES);
        return LS_ERR_ARG;
    }
    axis ax, ay[2];
    int has[2];
    frame f;
    ls_status st = make_axes(s, &ax, ay, has, &f, err, errlen);
    if (st != LS_OK) return st;
    line_style ls[LS_PLOT_MAX_LINES];
    style_lines(s, ls);
    legend_box g = legend_layout(ls, nl);
    int height = LS_PLOT_HEIGHT + (int)g.rows * 18 + 8;
    size_t longest = 0;
    for (size_t i = 0; i < s->n_files; i++)
        if (s->files[i].table->n_points > longest) longest = s->files[i].table->n_points;
    double *sm = s->smooth ? ls_mem_alloc(LS_MEM_SCRATCH, longest * sizeof *sm) : NULL;
    sbuf b = {0};
    if (s->smooth && !sm) b.oom = 1;
    put(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
        LS_PLOT_WIDTH, height, LS_PLOT_WIDTH, height, LS_PLOT_WIDTH, height);
    if (s->title) {
        put(&b, "<text x=\"%d\" y=\"30\" text-anchor=\"middle\" font-size=\"16\">", LS_PLOT_WIDTH / 2);
        put_text(&b, s->title);
        put(&b, "</text>\n");
    }
    for (int side = 0; side < 2; side++)
        if (has[side]) put_ticks(&b, &f, &ay[side], side + 1);
    put_ticks(&b, &f, &ax, 0);
    char x0[48], y0[48];
    fmt_num(x0, sizeof x0, f.x0, 2);
    fmt_num(y0, sizeof y0, f.y0, 2);
    /* the clip's id names its geometry: charts inlined into one page then share an id only where they share
       the rectangle, so no chart is clipped to another's plot area */
    char clip[160];
    snprintf(clip, sizeof clip, "ls-plot-area-%s-%s-%d-%d", x0, y0, (int)(f.x1 - f.x0), (int)(f.y1 - f.y0));
    put(&b, "<defs><clipPath id=\"%s\"><rect x=\"%s\" y=\"%s\" width=\"%d\" height=\"%d\"/></clipPath></defs>\n",
        clip, x0, y0, (int)(f.x1 - f.x0), (int)(f.y1 - f.y0));
    put(&b, "<rect x=\"%s\" y=\"%s\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000000\"/>\n", x0, y0,
        (int)(f.x1 - f.x0), (int)(f.y1 - f.y0));
    put(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (int)((f.x0 + f.x1) / 2),
        LS_PLOT_HEIGHT - 16);
    put(&b, "<g clip-path=\"url(#%s)\">\n", clip);
    put_hlines(&b, s, &f, &ay[0], 0);
    if (s->smooth)
        for (size_t i = 0; i < nl; i++) put_dots(&b, &ls[i], &f, &ax, &ay[ls[i].right]);
    for (size_t i = 0; i < nl && !b.oom; i++) {
        if (sm) ls_plot_smooth(sm, ls[i].t->value + ls[i].j * ls[i].t->n_points, ls[i].t->n_points, s->smooth);
        put_line(&b, &ls[i], sm, &f, &ax, &ay[ls[i].right]);
    }
    put(&b, "</g>\n");
    put_hlines(&b, s, &f, &ay[0], 1);
    put_legend(&b, ls, nl, &g);
    put(&b, "</svg>\n");
    ls_mem_free(sm);
    if (b.oom) {
        ls_mem_free(b.s);
        ls_json_errf(err, errlen, "out of memory rendering the chart");
        return LS_ERR_NOMEM;
    }
    *svg = b.s;
    *len = b.len;
    return LS_OK;
}
