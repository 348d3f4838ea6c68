/* metrics_plot.h - longstraw-plot: metrics JSONL files (one JSON object per
 * optimizer step, as `longstraw-train --metrics FILE` writes) to one
 * self-contained SVG line chart of named numeric fields against "step".
 * dtype-independent.  Three files: metrics_plot.c (reading, smoothing),
 * metrics_plot_svg.c (the chart), metrics_plot_args.c (the command line and
 * the whole tool).
 *
 * Reading is strict and bounded: a file is read whole up to
 * LS_PLOT_MAX_FILE_BYTES; every line must be one JSON object (duplicate keys
 * refused) with an integral, non-negative, strictly increasing "step" and a
 * finite number under every series name; other fields, of any JSON type
 * (a nested "groups" array of objects, strings, null), are skipped; at most
 * LS_PLOT_MAX_POINTS lines.  Errors name the file, the 1-based line and the
 * field.
 *
 * The chart: up to LS_PLOT_MAX_FILES files, each drawing the same series.
 * A "line" is one (file, series) pair, drawn in the order files x series.
 *   Colour: lines with the same colour key (the file's group, which is its
 *     --group or else its label, and the series) share a colour; distinct
 *     keys take the palette's 10 colours in order of first appearance
 *     (cycling after 10).  So one file draws its series in palette order,
 *     and three seeds given one --group share a colour per series.
 *   Dash: the file's --dash, or else its rank among the files of its group
 *     (0 solid, 1 dashed, 2 dotted, 3 dash-dot, 4 long dashes, cycling).
 *   Smoothing (smooth = W >= 1): each line's raw points are drawn as faint
 *     dots (opacity 0.25; at most LS_PLOT_MAX_DOTS per line: every
 *     ceil(n / LS_PLOT_MAX_DOTS)-th point from the first, and the last) under
 *     the trailing moving average over W points, which uses every point:
 *       m_k = (v_{k-c+1} + ... + v_k) / c,   c = min(W, k + 1)
 *     (points counted in file order, k from 0), drawn through m_k at every
 *     ceil(n / LS_PLOT_MAX_LINE_POINTS)-th k from 0, and the last (about one
 *     vertex a plot unit: a line of 12,000 vertices draws as a fuzzy band
 *     whose dashes do not show).  smooth = 0: one polyline of
 *     the raw points per line, nothing else (the tool's behaviour before).
 *   Reference lines: dashed grey horizontal lines at given values of the
 *     left axis, labelled at their right end, inside the left axis's range.
 * Axes: the step axis spans exactly [the smallest first step, the largest
 * last step] of the files; each y axis (left; right for series marked
 * `right`) spans its data (the left one the reference lines too) widened by
 * 5% of the span at each end, or given bounds (ymin/ymax, left axis).  A
 * zero span is widened to +-10% of the value (+-1 around 0; +-1 step).
 * Ticks sit inside the span at multiples of a nice step (1, 2 or 5 x 10^k,
 * about span / 6; the step axis's at least 1).  The drawing is clipped to
 * the plot area.  The plot area is x in [LS_PLOT_LEFT, LS_PLOT_WIDTH - right
 * margin] (right margin LS_PLOT_RIGHT_AXIS with a right axis, LS_PLOT_RIGHT
 * otherwise) and y in [LS_PLOT_TOP, LS_PLOT_HEIGHT - LS_PLOT_BOTTOM]; a
 * point (s, v) lies at
 *   x = left + (s - xlo) / (xhi - xlo) * width,  y = bottom - (v - ylo) / (yhi - ylo) * height.
 * The legend (one entry per line: "label: series", "label" with one series,
 * or just "series" for one unlabelled file; " (right axis)" appended) sits
 * in columns below the plot; the SVG's height grows by its rows.
 * Every number is written with integer arithmetic only (coordinates with two
 * decimals), so the output does not depend on the locale.  Text is XML
 * escaped; names, labels and the title must be UTF-8 without control
 * characters. */
#ifndef LS_TRAINER_METRICS_PLOT_H
#define LS_TRAINER_METRICS_PLOT_H
#include <stddef.h>
#include <stdio.h>

#include "common/status.h"

#define LS_PLOT_MAX_FILE_BYTES ((size_t)64 << 20)
#define LS_PLOT_MAX_POINTS 100000
#define LS_PLOT_MAX_SERIES 16
#define LS_PLOT_MAX_FILES 16
#define LS_PLOT_MAX_LINES 64  /* files x series */
#define LS_PLOT_MAX_HLINES 8
#define LS_PLOT_MAX_DOTS 2000        /* raw dots drawn per line when smoothing */
#define LS_PLOT_MAX_LINE_POINTS 1000 /* vertices of a moving-average line */
#define LS_PLOT_MAX_NAME 64   /* bytes of a series name or label, NUL included */
#define LS_PLOT_MAX_TITLE 200 /* bytes of the title */

#define LS_PLOT_WIDTH 800
#define LS_PLOT_HEIGHT 480 /* without the legend's rows */
#define LS_PLOT_LEFT 80
#define LS_PLOT_RIGHT 30
#define LS_PLOT_RIGHT_AXIS 80
#define LS_PLOT_TOP 50
#define LS_PLOT_BOTTOM 60

#define LS_PLOT_DASH_AUTO (-1)
#define LS_PLOT_N_DASHES 5 /* solid, dashed, dotted, dashdot, long */

/* A horizontal reference line of the left axis. */
typedef struct {
    double value;
    char label[LS_PLOT_MAX_NAME]; /* may be empty */
} ls_plot_hline;

/* One --metrics file of the command line; strings point into argv. */
typedef struct {
    const char *path;
    const char *label; /* NULL: the file's base name (or none with one file) */
    const char *group; /* NULL: the label */
    int dash;          /* 0..LS_PLOT_N_DASHES-1, or LS_PLOT_DASH_AUTO */
} ls_plot_file_arg;

/* The parsed command line; strings point into argv. */
typedef struct {
    size_t n_files;
    ls_plot_file_arg files[LS_PLOT_MAX_FILES];
    const char *out, *title; /* title NULL: none */
    size_t n_series;
    char series[LS_PLOT_MAX_SERIES][LS_PLOT_MAX_NAME];
    unsigned char right[LS_PLOT_MAX_SERIES]; /* 1: on the right-hand axis */
    size_t smooth;                           /* 0: off */
    int smooth_auto;                         /* --smooth auto: ls_plot_auto_smooth of the longest file */
    size_t n_hlines;
    ls_plot_hline hlines[LS_PLOT_MAX_HLINES];
    int has_ymin, has_ymax;
    double ymin, ymax;
    const char *right_list; /* --right as given (read once --series is known) */
    int help;
} ls_plot_args;

/* Parses `--metrics FILE [--label L] [--group G] [--dash D] ... --out
 * FILE.svg --series a,b,c [--right b] [--smooth W|auto] [--hline V:LABEL]...
 * [--ymin V] [--ymax V] [--title T] [--help]`.  Returns 0, or -1 with one
 * line in err naming the argument (unknown option, missing value, a per-file
 * option before any --metrics or given twice for one file, empty, duplicate
 * or too long name, too many series/files/lines, a --right name not in
 * --series, a bad number, smoothing window, dash, reference line or title).
 * Numbers are JSON numbers (read without the locale). */
int ls_plot_args_parse(ls_plot_args *a, int argc, char **argv, char *err, size_t errlen);
void ls_plot_usage(FILE *f);

/* Points of the series named in a metrics file: step [n_points] and
 * value [n_series * n_points] (series-major), tracked under scratch. */
typedef struct {
    size_t n_points, n_series;
    double *step, *value;
} ls_metrics_table;

/* Parses bytes[0..len) (JSONL; `what` names it in errors) for the n names.
 * LS_ERR_FORMAT ("WHAT:LINE: field 'x': ...") on any bad line, no line, or
 * more than LS_PLOT_MAX_POINTS lines; LS_ERR_NOMEM.  *t is the caller's
 * (ls_metrics_table_free), empty on failure. */
ls_status ls_metrics_parse(ls_metrics_table *t, const char *bytes, size_t len, const char *what,
                           const char *const *names, size_t n, char *err, size_t errlen);
/* Reads path (at most max_bytes; 0: LS_PLOT_MAX_FILE_BYTES), then parses. */
ls_status ls_metrics_read(ls_metrics_table *t, const char *path, size_t max_bytes, const char *const *names,
                          size_t n, char *err, size_t errlen);
void ls_metrics_table_free(ls_metrics_table *t);

/* The trailing moving average above: out[k] = mean of v[max(0, k-w+1) .. k]
 * for k < n (w >= 1; out may not alias v). */
void ls_plot_smooth(double *out, const double *v, size_t n, size_t w);
/* The window longstraw-train --plot and `--smooth auto` use for a file of
 * n points: 0 (raw lines) below 500 points, else n / 100. */
size_t ls_plot_auto_smooth(size_t n);

/* One file of a chart: its table and how it is labelled and drawn. */
typedef struct {
    const ls_metrics_table *table;
    const char *label; /* NULL: legend entries name the series only */
    const char *group; /* NULL: the label (NULL too: a group of its own) */
    int dash;          /* 0..LS_PLOT_N_DASHES-1, or LS_PLOT_DASH_AUTO */
} ls_plot_file;

/* What ls_plot_svg draws; every pointer is the caller's. */
typedef struct {
    size_t n_files;
    const ls_plot_file *files;
    size_t n_series;                /* each table's n_series */
    const char *const *names;       /* [n_series] */
    const unsigned char *right;     /* [n_series], NULL: none on the right */
    const char *title;              /* NULL: none */
    size_t smooth;                  /* 0: raw lines */
    size_t n_hlines;
    const ls_plot_hline *hlines;
    int has_ymin, has_ymax;         /* left-axis bounds given */
    double ymin, ymax;
} ls_plot_spec;

/* Renders the chart as SVG text: *svg (NUL-terminated, *len bytes) is the
 * caller's, freed with ls_mem_free.  LS_ERR_ARG when there is nothing to
 * draw, the files and series exceed the limits above, a range is too wide
 * to scale (beyond 1e306) or the given bounds leave an empty range;
 * LS_ERR_NOMEM. */
ls_status ls_plot_svg(const ls_plot_spec *s, char **svg, size_t *len, char *err, size_t errlen);

/* The whole tool: read every file, render, write atomically.  Returns the
 * exit status: 0, 2 (a metrics file or a range: err names it), 1 (writing
 * failed or out of memory). */
int ls_plot_run(const ls_plot_args *a, char *err, size_t errlen);
#endif
