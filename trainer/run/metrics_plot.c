/* metrics_plot.c - longstraw-plot's reading and smoothing (see
 * metrics_plot.h): metrics JSONL lines into a table of named series. */
#include "trainer/run/metrics_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "trainer/base/mem_tracker.h"

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

/* ---- smoothing ----------------------------------------------------------- */

/* sum + comp += x, compensated (Neumaier): the rounding of each addition kept in comp */
static void add_comp(double *sum, double *comp, double x) {
    double t = *sum + x;
    *comp += fabs(*sum) >= fabs(x) ? (*sum - t) + x : (x - t) + *sum;
    *sum = t;
}

void ls_plot_smooth(double *out, const double *v, size_t n, size_t w) {
    if (w == 0) w = 1;
    /* v[k-c+1] + ... + v[k] kept by adding the new point and dropping the oldest, in
     * compensated sums so that a large value leaving the window leaves no rounding behind */
    double big = 0, scale = 1; /* values near the double range summed scaled by 2^-64 (exact) */
    for (size_t k = 0; k < n; k++) big = fmax(big, fabs(v[k]));
    if (big > 1e290) scale = 0x1p-64;
    double sum = 0, comp = 0;
    for (size_t k = 0; k < n; k++) {
        add_comp(&sum, &comp, v[k] * scale);
        if (k >= w) add_comp(&sum, &comp, -v[k - w] * scale);
        size_t c = k + 1 < w ? k + 1 : w;
        out[k] = (sum + comp) / (double)c / scale;
    }
}

size_t ls_plot_auto_smooth(size_t n) { return n < 500 ? 0 : n / 100; }
