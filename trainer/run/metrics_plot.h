/* metrics_plot.h - longstraw-plot: a metrics JSONL file (one JSON object per
 * optimizer step, as `longstraw-train --metrics FILE` writes) to a
 * self-contained SVG line chart of named numeric fields against "step".
 * dtype-independent.
 *
 * Reading is strict and bounded: the file is read whole up to
 * LS_PLOT_MAX_FILE_BYTES; every line must be one JSON object (duplicate keys
 * refused) with an integral, non-negative, strictly increasing "step" and a
 * finite number under every series name; at most LS_PLOT_MAX_POINTS lines.
 * Errors name the file, the 1-based line and the field.
 *
 * The chart (LS_PLOT_WIDTH x LS_PLOT_HEIGHT user units) has one polyline per
 * series, in the order given, against a shared left y axis, or, for series
 * marked `right`, a right-hand y axis of their own.  Each axis spans its
 * data rounded out to "nice" tick multiples (1, 2 or 5 x 10^k; the step
 * axis's ticks are integers), with tick labels, grid lines and a legend.
 * The plot area is x in [LS_PLOT_LEFT, LS_PLOT_WIDTH - right margin] (right
 * margin LS_PLOT_RIGHT_AXIS with a right axis, LS_PLOT_RIGHT otherwise) and
 * y in [LS_PLOT_TOP, LS_PLOT_HEIGHT - LS_PLOT_BOTTOM]; a point (s, v) lies at
 *   x = left + (s - xlo) / (xhi - xlo) * width,  y = bottom - (v - ylo) / (yhi - ylo) * height.
 * Every number is written with integer arithmetic only (coordinates with two
 * decimals), so the output does not depend on the locale.  Text is XML
 * escaped; names and the title must be UTF-8 without control characters. */
#ifndef LS_TRAINER_METRICS_PLOT_H
#define LS_TRAINER_METRICS_PLOT_H
#include <stddef.h>
#include <stdio.h>

#include "common/status.h"

#define LS_PLOT_MAX_FILE_BYTES ((size_t)64 << 20)
#define LS_PLOT_MAX_POINTS 100000
#define LS_PLOT_MAX_SERIES 16
#define LS_PLOT_MAX_NAME 64   /* bytes of a series name, NUL included */
#define LS_PLOT_MAX_TITLE 200 /* bytes of the title */

#define LS_PLOT_WIDTH 800
#define LS_PLOT_HEIGHT 480
#define LS_PLOT_LEFT 80
#define LS_PLOT_RIGHT 30
#define LS_PLOT_RIGHT_AXIS 80
#define LS_PLOT_TOP 50
#define LS_PLOT_BOTTOM 60

/* The parsed command line; strings point into argv. */
typedef struct {
    const char *metrics, *out, *title; /* title NULL: none */
    size_t n_series;
    char series[LS_PLOT_MAX_SERIES][LS_PLOT_MAX_NAME];
    unsigned char right[LS_PLOT_MAX_SERIES]; /* 1: on the right-hand axis */
    int help;
} ls_plot_args;

/* Parses `--metrics FILE --out FILE.svg --series a,b,c [--right b]
 * [--title T] [--help]`.  Returns 0, or -1 with one line in err naming the
 * argument (unknown option, missing value, empty, duplicate or too long
 * name, too many series, a --right name not in --series, a bad title). */
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

/* Renders t as SVG text: *svg (NUL-terminated, *len bytes) is the caller's,
 * freed with ls_mem_free.  names [t->n_series] label the legend; right
 * [t->n_series] (NULL: none) marks right-axis series; title may be NULL.
 * LS_ERR_ARG when a value range is too wide to scale (beyond 1e307);
 * LS_ERR_NOMEM. */
ls_status ls_plot_svg(const ls_metrics_table *t, const char *const *names, const unsigned char *right,
                      const char *title, char **svg, size_t *len, char *err, size_t errlen);

/* The whole tool: read, render, write atomically.  Returns the exit
 * status: 0, 2 (the metrics file or a range: err names it), 1 (writing
 * failed or out of memory). */
int ls_plot_run(const ls_plot_args *a, char *err, size_t errlen);
#endif
