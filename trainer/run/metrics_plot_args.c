/* metrics_plot_args.c - longstraw-plot's command line and the whole tool
 * (see metrics_plot.h): arguments parsed strictly, every file read, the
 * chart rendered and written atomically. */
#include "trainer/run/metrics_plot.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli_opts.h"
#include "receipts/format/atomic_file.h"
#include "receipts/format/json_util.h"
#include "trainer/base/mem_tracker.h"

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

static const char *const dash_names[LS_PLOT_N_DASHES] = {"solid", "dashed", "dotted", "dashdot", "long"};

/* A name or label for opt: non-empty, short, UTF-8 text; -1 with err. */
static int name_ok(const char *opt, const char *v, char *err, size_t errlen) {
    if (v[0] == '\0' || strlen(v) >= LS_PLOT_MAX_NAME || !text_ok(v)) {
        ls_json_errf(err, errlen, "%s: '%s' is not 1 to %d bytes of UTF-8 text without control characters", opt, v,
                     LS_PLOT_MAX_NAME - 1);
        return -1;
    }
    return 0;
}

/* text (n bytes) as one finite JSON number; -1 when it is not one. */
static int json_number(const char *text, size_t n, double *out) {
    cJSON *o = NULL;
    char e[256];
    if (n == 0 || ls_json_parse(text, n, "number", &o, e, sizeof e) != LS_OK) return -1;
    int ok = cJSON_IsNumber(o) && isfinite(o->valuedouble);
    if (ok) *out = o->valuedouble;
    cJSON_Delete(o);
    return ok ? 0 : -1;
}

/* the per-file options: --label, --group, --dash of the last --metrics */
static int parse_file_option(ls_plot_args *a, const char *o, const char *v, char *err, size_t errlen) {
    if (a->n_files == 0) {
        ls_json_errf(err, errlen, "%s: must follow the --metrics FILE it applies to", o);
        return -1;
    }
    ls_plot_file_arg *f = &a->files[a->n_files - 1];
    int twice = !strcmp(o, "--label") ? f->label != NULL : !strcmp(o, "--group") ? f->group != NULL
                                                                                  : f->dash != LS_PLOT_DASH_AUTO;
    if (twice) {
        ls_json_errf(err, errlen, "%s: given twice for --metrics %s", o, f->path);
        return -1;
    }
    if (!strcmp(o, "--dash")) {
        for (int k = 0; k < LS_PLOT_N_DASHES; k++)
            if (!strcmp(v, dash_names[k])) f->dash = k;
        if (f->dash == LS_PLOT_DASH_AUTO) {
            ls_json_errf(err, errlen, "--dash: '%s' is not solid, dashed, dotted, dashdot or long", v);
            return -1;
        }
        return 0;
    }
    if (name_ok(o, v, err, errlen) != 0) return -1;
    if (!strcmp(o, "--label")) f->label = v;
    else f->group = v;
    return 0;
}

static int parse_smooth(ls_plot_args *a, const char *v, char *err, size_t errlen) {
    if (!strcmp(v, "auto")) {
        a->smooth_auto = 1;
        return 0;
    }
    size_t w = 0, n = strlen(v);
    int ok = n > 0 && n <= 6;
    for (size_t i = 0; ok && i < n; i++) {
        ok = v[i] >= '0' && v[i] <= '9';
        w = w * 10 + (size_t)(v[i] - '0');
    }
    if (!ok || w < 1 || w > LS_PLOT_MAX_POINTS) {
        ls_json_errf(err, errlen, "--smooth: '%s' is not a whole number of points from 1 to %d, or auto", v,
                     LS_PLOT_MAX_POINTS);
        return -1;
    }
    a->smooth = w;
    a->smooth_auto = 0;
    return 0;
}

static int parse_hline(ls_plot_args *a, const char *v, char *err, size_t errlen) {
    if (a->n_hlines == LS_PLOT_MAX_HLINES) {
        ls_json_errf(err, errlen, "--hline: more than %d reference lines", LS_PLOT_MAX_HLINES);
        return -1;
    }
    ls_plot_hline *h = &a->hlines[a->n_hlines];
    const char *colon = strchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    if (json_number(v, n, &h->value) != 0) {
        ls_json_errf(err, errlen, "--hline: '%s' is not VALUE[:LABEL] with a finite number VALUE", v);
        return -1;
    }
    const char *label = colon ? colon + 1 : "";
    if (strlen(label) >= LS_PLOT_MAX_NAME || !text_ok(label)) {
        ls_json_errf(err, errlen, "--hline: the label of '%s' is not at most %d bytes of UTF-8 text", v,
                     LS_PLOT_MAX_NAME - 1);
        return -1;
    }
    memcpy(h->label, label, strlen(label) + 1);
    a->n_hlines++;
    return 0;
}

/* ---- the option table ------------------------------------------------------ */

/* Each option's value applied in command-line order (the per-file options
 * apply to the --metrics before them): 0, or 2 with err naming it. */
static int opt_metrics(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    (void)o;
    ls_plot_args *a = base;
    if (v[0] == '\0') {
        ls_json_errf(err, errlen, "--metrics: empty file name");
        return 2;
    }
    if (a->n_files == LS_PLOT_MAX_FILES) {
        ls_json_errf(err, errlen, "--metrics: more than %d files", LS_PLOT_MAX_FILES);
        return 2;
    }
    a->files[a->n_files++] = (ls_plot_file_arg){.path = v, .dash = LS_PLOT_DASH_AUTO};
    return 0;
}
static int opt_file(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    return parse_file_option(base, o->name, v, err, errlen) ? 2 : 0;
}
static int opt_series(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    (void)o;
    return parse_list(base, "--series", v, 0, err, errlen) ? 2 : 0;
}
static int opt_smooth(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    (void)o;
    return parse_smooth(base, v, err, errlen) ? 2 : 0;
}
static int opt_hline(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    (void)o;
    return parse_hline(base, v, err, errlen) ? 2 : 0;
}
static int opt_ybound(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    ls_plot_args *a = base;
    int lo = !strcmp(o->name, "--ymin");
    if (json_number(v, strlen(v), lo ? &a->ymin : &a->ymax) != 0) {
        ls_json_errf(err, errlen, "%s: '%s' is not a finite number", o->name, v);
        return 2;
    }
    *(lo ? &a->has_ymin : &a->has_ymax) = 1;
    return 0;
}
static int opt_title(void *base, const ls_cli_opt *o, const char *v, char *err, size_t errlen) {
    (void)o;
    if (strlen(v) > LS_PLOT_MAX_TITLE || !text_ok(v)) {
        ls_json_errf(err, errlen, "--title: longer than %d bytes, or not UTF-8 text without control characters",
                     LS_PLOT_MAX_TITLE);
        return 2;
    }
    ((ls_plot_args *)base)->title = v;
    return 0;
}

#define F(field) .off = offsetof(ls_plot_args, field)
#define FN(fn) .kind = LS_CLI_CUSTOM, .parse = (fn)
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_TEXT,
     .help = "usage: longstraw-plot --metrics FILE [--label L] [--group G] [--dash D] [--metrics FILE ...]\n"
             "                      --out FILE.svg --series NAME[,NAME...] [options]\n"
             "\n"
             "Draws the named numeric fields of metrics JSONL files (one JSON object per line\n"
             "with an integer \"step\", as longstraw-train --metrics writes) against the step, as\n"
             "one self-contained SVG line chart with axes, tick labels and a legend.\n"
             "\n"},
    {FN(opt_metrics), .name = "--metrics", .arg = "FILE",
     .help = "a metrics JSONL file (at most 64 MiB, 100000 lines); up to 16\n"
             "files, each drawing every series; --label, --group and --dash\n"
             "apply to the --metrics before them:"},
    {FN(opt_file), .name = "--label", .arg = "L",
     .help = "its name in the legend (\"L: series\", or \"L\" with one\n"
             "series); default: the file's base name (none with one file)"},
    {FN(opt_file), .name = "--group", .arg = "G",
     .help = "files of one group share a colour per series and take\n"
             "dashes in turn (e.g. three seeds of one mode); default: the label"},
    {FN(opt_file), .name = "--dash", .arg = "D",
     .help = "solid, dashed, dotted, dashdot or long; default: the file's\n"
             "rank in its group (solid, dashed, dotted, dashdot, long, ...)"},
    {.kind = LS_CLI_STRING, .name = "--out", .arg = "FILE.svg", .help = "the chart (written atomically)", F(out)},
    {FN(opt_series), .name = "--series", .arg = "A,B,...", .help = "fields to draw (at most 16; files x series at most 64)"},
    {.kind = LS_CLI_STRING, .name = "--right", .arg = "A,...", .help = "of those, the ones drawn against a right-hand axis",
     F(right_list)},
    {FN(opt_smooth), .name = "--smooth", .arg = "W|auto",
     .help = "raw points as faint dots (at most 2000 a line) under their\n"
             "trailing moving average over W points (mean of the point and\n"
             "the W-1 before it; fewer at the start); auto: W = points/100\n"
             "of the longest file, none below 500 points; default: raw lines"},
    {FN(opt_hline), .name = "--hline", .arg = "V[:LABEL]",
     .help = "a dashed reference line at V on the left axis (at most 8),\n"
             "e.g. --hline 0.1:chance"},
    {FN(opt_ybound), .name = "--ymin", .arg = "V",
     .help = "bounds of the left axis (default: the data and reference\n"
             "lines, 5% margin)"},
    {FN(opt_ybound), .name = "--ymax", .arg = "V"},
    {FN(opt_title), .name = "--title", .arg = "T", .help = "a title above the chart"},
    {.like = "--help", .name = "--help", F(help)},
    {.kind = LS_CLI_TEXT,
     .help = "\n"
             "The step axis spans exactly the first to the last step of the files.  Numbers\n"
             "are JSON numbers.\n"
             "\n"
             "Exit status: 0 written; 2 bad arguments or a bad metrics file (the message\n"
             "names the file, line and field); 1 the chart could not be written.\n"},
};
#undef F
#undef FN

void ls_plot_usage(FILE *f) { ls_cli_usage(f, (ls_cli_table){OPTS, sizeof OPTS / sizeof OPTS[0]}, NULL, 0, 23); }

int ls_plot_args_parse(ls_plot_args *a, int argc, char **argv, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    const ls_cli_parser p = {.table = {OPTS, sizeof OPTS / sizeof OPTS[0]}};
    if (ls_cli_parse(&p, a, argc, argv, 1, err, errlen) != 0) return -1;
    if (a->help) return 0;
    const char *right = a->right_list;
    const char *missing = !a->n_files ? "--metrics" : !a->out ? "--out" : !a->n_series ? "--series" : NULL;
    if (missing) {
        ls_json_errf(err, errlen, "%s is required", missing);
        return -1;
    }
    if (a->out[0] == '\0') {
        ls_json_errf(err, errlen, "--out: empty file name");
        return -1;
    }
    if (a->n_files * a->n_series > LS_PLOT_MAX_LINES) {
        ls_json_errf(err, errlen, "--metrics x --series: %zu files x %zu series is more than %d lines", a->n_files,
                     a->n_series, LS_PLOT_MAX_LINES);
        return -1;
    }
    if (a->has_ymin && a->has_ymax && !(a->ymin < a->ymax)) {
        ls_json_errf(err, errlen, "--ymin %g is not below --ymax %g", a->ymin, a->ymax);
        return -1;
    }
    return right ? parse_list(a, "--right", right, 1, err, errlen) : 0;
}

/* ---- the whole tool ---------------------------------------------------------- */

int ls_plot_run(const ls_plot_args *a, char *err, size_t errlen) {
    const char *names[LS_PLOT_MAX_SERIES];
    for (size_t j = 0; j < a->n_series; j++) names[j] = a->series[j];
    ls_metrics_table t[LS_PLOT_MAX_FILES];
    ls_plot_file pf[LS_PLOT_MAX_FILES];
    memset(t, 0, sizeof t);
    char *svg = NULL;
    size_t len = 0, longest = 0;
    int rc = 0;
    for (size_t i = 0; i < a->n_files && rc == 0; i++) {
        const ls_plot_file_arg *f = &a->files[i];
        ls_status st = ls_metrics_read(&t[i], f->path, 0, names, a->n_series, err, errlen);
        if (st != LS_OK) rc = st == LS_ERR_NOMEM ? 1 : 2;
        if (t[i].n_points > longest) longest = t[i].n_points;
        const char *base = strrchr(f->path, '/');
        base = base && base[1] ? base + 1 : f->path;
        pf[i] = (ls_plot_file){.table = &t[i],
                               .label = f->label ? f->label : a->n_files > 1 ? base : NULL,
                               .group = f->group,
                               .dash = f->dash};
    }
    if (rc == 0) {
        ls_plot_spec s = {.n_files = a->n_files,
                          .files = pf,
                          .n_series = a->n_series,
                          .names = names,
                          .right = a->right,
                          .title = a->title,
                          .smooth = a->smooth_auto ? ls_plot_auto_smooth(longest) : a->smooth,
                          .n_hlines = a->n_hlines,
                          .hlines = a->hlines,
                          .has_ymin = a->has_ymin,
                          .has_ymax = a->has_ymax,
                          .ymin = a->ymin,
                          .ymax = a->ymax};
        ls_status st = ls_plot_svg(&s, &svg, &len, err, errlen);
        rc = st == LS_OK ? 0 : st == LS_ERR_NOMEM ? 1 : 2;
    }
    if (rc == 0 && ls_atomic_write(a->out, svg, len, err, errlen) != LS_OK) rc = 1;
    ls_mem_free(svg);
    for (size_t i = 0; i < a->n_files; i++) ls_metrics_table_free(&t[i]);
    return rc;
}
