/* fuzz_metrics_plot.c - libFuzzer target for longstraw-plot's reader and
 * chart (trainer/run/metrics_plot.h).
 *
 * The input is a metrics JSONL text read for the series "a" and "b".  An
 * accepted table must hold the documented invariants (at least one point,
 * steps integral, non-negative and strictly increasing, values finite);
 * a refusal must name the input ("fuzz").  An accepted table is then drawn
 * twice as two files of one group, raw and smoothed (window from the input's
 * length), with a reference line: the chart must render or be refused as
 * unscalable, never hold "nan" or "inf", start with the XML declaration and
 * end with </svg>; the moving average must stay within the values' range.
 * Traps otherwise. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/run/metrics_plot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_svg(const ls_metrics_table *t, size_t smooth, const char *const *names) {
    ls_plot_file f[2] = {{.table = t, .label = "x", .dash = LS_PLOT_DASH_AUTO},
                         {.table = t, .label = "y", .group = "x", .dash = LS_PLOT_DASH_AUTO}};
    ls_plot_hline h = {.value = 0.5, .label = "h<"};
    const unsigned char right[2] = {0, 1};
    ls_plot_spec s = {.n_files = 2, .files = f, .n_series = 2, .names = names, .right = right, .smooth = smooth,
                      .n_hlines = 1, .hlines = &h};
    char *svg = NULL, err[256];
    size_t len = 0;
    ls_status st = ls_plot_svg(&s, &svg, &len, err, sizeof err);
    CHECK(st == LS_OK || st == LS_ERR_ARG || st == LS_ERR_NOMEM);
    if (st != LS_OK) {
        CHECK(svg == NULL);
        return;
    }
    CHECK(len == strlen(svg) && !strncmp(svg, "<?xml", 5) && len >= 7 && !strcmp(svg + len - 7, "</svg>\n"));
    CHECK(!strstr(svg, "nan") && !strstr(svg, "inf"));
    ls_mem_free(svg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *names[2] = {"a", "b"};
    ls_metrics_table t;
    char err[512];
    ls_status st = ls_metrics_parse(&t, (const char *)data, size, "fuzz", names, 2, err, sizeof err);
    if (st != LS_OK) {
        CHECK(st == LS_ERR_FORMAT || st == LS_ERR_NOMEM);
        CHECK(strstr(err, "fuzz") != NULL);
        CHECK(t.n_points == 0 && t.step == NULL && t.value == NULL);
        return 0;
    }
    CHECK(t.n_points >= 1 && t.n_points <= LS_PLOT_MAX_POINTS && t.n_series == 2);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t k = 0; k < t.n_points; k++) {
        CHECK(t.step[k] >= 0 && t.step[k] == floor(t.step[k]));
        CHECK(k == 0 || t.step[k] > t.step[k - 1]);
        for (size_t j = 0; j < 2; j++) CHECK(isfinite(t.value[j * t.n_points + k]));
        lo = fmin(lo, t.value[k]);
        hi = fmax(hi, t.value[k]);
    }
    size_t w = 1 + size % 7;
    double *m = ls_mem_alloc(LS_MEM_SCRATCH, t.n_points * sizeof *m);
    if (m) {
        ls_plot_smooth(m, t.value, t.n_points, w);
        double tol = 1e-12 * fmax(fabs(lo), fabs(hi));
        for (size_t k = 0; k < t.n_points; k++) CHECK(!(m[k] < lo - tol) && !(m[k] > hi + tol));
        ls_mem_free(m);
    }
    check_svg(&t, 0, names);
    check_svg(&t, w, names);
    ls_metrics_table_free(&t);
    return 0;
}
