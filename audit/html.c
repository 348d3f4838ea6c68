/* html.c - one self-contained HTML page of a run (contract in html.h). */
#include "audit/html.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/timeline.h"
#include "receipts/atomic_file.h"
#include "receipts/trace_reader.h"

#define MAX_SERIES 24   /* the total and up to 23 categories */
#define MAX_POINTS 1024 /* points kept per series */
#define MAX_EVIDENCE 50 /* evidence items shown per check */
#define SERIES_NAME 64

/* ---- a growing text buffer ---- */

typedef struct {
    char *p;
    size_t len, cap;
    bool nomem;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->nomem) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->nomem = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_raw(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Text of untrusted origin: & < > " ' as entities, control characters
 * (but tab and newline) and bytes not starting valid UTF-8 as U+FFFD. */
static void sb_esc(sbuf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        const char *ent = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;"
                        : c == '\'' ? "&#39;" : NULL;
        if (ent) {
            sb_raw(b, ent);
            i++;
        } else if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
            sb_raw(b, "\xEF\xBF\xBD");
            i++;
        } else if (c < 0x80) {
            sb_put(b, (const char *)p + i, 1);
            i++;
        } else {
            size_t k = ls_trace_utf8_len(p + i, n - i);
            if (k == 0) {
                sb_raw(b, "\xEF\xBF\xBD");
                i++;
            } else {
                sb_put(b, (const char *)p + i, k);
                i += k;
            }
        }
    }
}

static const char *jstr(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- the verdict and the rule table ---- */

static void put_verdict(sbuf *b, const cJSON *report) {
    int64_t level = -1;
    const cJSON *levels = cJSON_IsObject(report) ? cJSON_GetObjectItemCaseSensitive(report, "levels") : NULL;
    if (cJSON_IsObject(report) && !ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(report, "level"), &level))
        level = -1;
    if (level < 0) {
        sb_raw(b, "<section id=\"verdict\" class=\"verdict none\"><h2>Verdict</h2>"
                  "<p class=\"level\">no verdict</p><p>No audit report was given");
        sb_raw(b, report ? " or it has no usable level" : "");
        sb_raw(b, ": the plots below are the run's own figures, unjudged.</p></section>\n");
        return;
    }
    sb_fmt(b, "<section id=\"verdict\" class=\"verdict %s\"><h2>Verdict</h2>", level > 0 ? "pass" : "fail");
    sb_fmt(b, "<p class=\"level\">Level %lld of 4 proven</p>\n", (long long)level);
    /* the second axis and what the level speaks of */
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(report, "assurance");
    sb_raw(b, "<p class=\"assurance\">Assurance: <strong>");
    sb_esc(b, cJSON_IsObject(as) ? jstr(as, "level") : "not stated");
    sb_raw(b, "</strong>");
    const char *parts[2][2] = {{"run", "run manifest"}, {"parity", "parity report"}};
    for (int k = 0; k < 2 && cJSON_IsObject(as); k++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(as, parts[k][0]);
        sb_raw(b, k ? "; " : ": ");
        sb_esc(b, parts[k][1]);
        sb_raw(b, " ");
        sb_esc(b, jstr(s, "status"));
        const cJSON *kid = cJSON_GetObjectItemCaseSensitive(s, "keyid");
        if (cJSON_IsString(kid)) {
            sb_raw(b, " (key <code>");
            sb_esc(b, kid->valuestring);
            sb_raw(b, "</code>)");
        }
    }
    sb_raw(b, "</p>\n<p class=\"scope\">");
    int64_t steps = 0, exact = 0;
    ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(report, "steps"), &steps);
    if (ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(report, "steps_exact"), &exact))
        sb_fmt(b, "%lld of %lld steps exact (levels 2-4 speak of exact steps only). ", (long long)exact,
               (long long)steps);
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(report, "faults"), *fl;
    const cJSON *flist = cJSON_IsArray(faults) ? faults : NULL;
    int nf = 0;
    cJSON_ArrayForEach(fl, flist) {
        int64_t fl_level = 0;
        ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(fl, "level"), &fl_level);
        sb_raw(b, nf++ ? ", " : "Faults recorded: ");
        sb_esc(b, jstr(fl, "name"));
        sb_fmt(b, " (no level &ge; %lld certified)", (long long)fl_level);
    }
    sb_raw(b, nf ? ".</p>\n" : "Faults recorded: none.</p>\n");
    if (cJSON_IsArray(levels) && cJSON_GetArraySize(levels) > 0) {
        sb_raw(b, "<table class=\"levels\"><tr><th>Level</th><th>Name</th><th>Holds</th></tr>\n");
        const cJSON *lv;
        cJSON_ArrayForEach(lv, levels) {
            int64_t n = -1;
            ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(lv, "level"), &n);
            bool holds = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(lv, "holds"));
            sb_fmt(b, "<tr class=\"%s\"><td>%lld</td><td>", holds ? "pass" : "fail", (long long)n);
            sb_esc(b, jstr(lv, "name"));
            sb_fmt(b, "</td><td>%s</td></tr>\n", holds ? "holds" : "does not hold");
        }
        sb_raw(b, "</table>\n");
    }
    sb_raw(b, "</section>\n");
}

static void put_evidence(sbuf *b, const cJSON *evidence) {
    int shown = 0, total = cJSON_IsArray(evidence) ? cJSON_GetArraySize(evidence) : 0;
    const cJSON *e, *list = cJSON_IsArray(evidence) ? evidence : NULL;
    cJSON_ArrayForEach(e, list) {
        if (shown == MAX_EVIDENCE) break;
        if (!cJSON_IsObject(e)) continue;
        int64_t rank, seq;
        sb_raw(b, shown++ ? "<br>" : "");
        if (ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(e, "rank"), &rank))
            sb_fmt(b, "rank %lld, ", (long long)rank);
        sb_raw(b, "<code>");
        sb_esc(b, jstr(e, "file"));
        sb_raw(b, "</code>");
        if (ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(e, "seq"), &seq)) sb_fmt(b, ", seq %lld", (long long)seq);
    }
    if (total > shown) sb_fmt(b, "<br>and %d more", total - shown);
}

static void put_rules(sbuf *b, const cJSON *report) {
    sb_raw(b, "<section id=\"rules\"><h2>Rules</h2>\n");
    const cJSON *levels = cJSON_IsObject(report) ? cJSON_GetObjectItemCaseSensitive(report, "levels") : NULL;
    if (!cJSON_IsArray(levels) || cJSON_GetArraySize(levels) == 0) {
        sb_raw(b, "<p>No rule was judged (no audit report).</p></section>\n");
        return;
    }
    sb_raw(b, "<table class=\"rules\"><tr><th>Level</th><th>Rule</th><th>Verdict</th><th>Message</th>"
              "<th>Evidence</th></tr>\n");
    int failed = 0, total = 0;
    const cJSON *lv;
    cJSON_ArrayForEach(lv, levels) {
        int64_t n = -1;
        ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(lv, "level"), &n);
        const cJSON *checks = cJSON_GetObjectItemCaseSensitive(lv, "checks");
        const cJSON *c, *list = cJSON_IsArray(checks) ? checks : NULL;
        cJSON_ArrayForEach(c, list) {
            if (!cJSON_IsObject(c)) continue;
            bool pass = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "pass"));
            /* a rule that does not apply proved nothing: never shown as a pass */
            bool na = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "applicable"));
            failed += !pass && !na;
            total++;
            sb_fmt(b, "<tr class=\"%s\"><td>%lld</td><td><code>", na ? "na" : pass ? "pass" : "fail", (long long)n);
            sb_esc(b, jstr(c, "id"));
            sb_fmt(b, "</code></td><td>%s</td><td>", na ? "N/A" : pass ? "PASS" : "FAIL");
            sb_esc(b, jstr(c, "message"));
            sb_raw(b, "</td><td>");
            put_evidence(b, cJSON_GetObjectItemCaseSensitive(c, "evidence"));
            sb_raw(b, "</td></tr>\n");
        }
    }
    sb_fmt(b, "</table>\n<p>%d rule(s), %d failed.</p></section>\n", total, failed);
}

/* ---- memory series of one rank ---- */

typedef struct {
    char names[MAX_SERIES][SERIES_NAME];
    size_t n_series;
    int64_t t[MAX_POINTS];
    int64_t v[MAX_POINTS][MAX_SERIES];
    size_t n;
    /* the bucket being filled: `stride` events merged by their maxima */
    int64_t bt, bv[MAX_SERIES];
    size_t in_bucket, stride;
    uint64_t events, dropped_categories;
} mem_series;

static void bucket_flush(mem_series *m) {
    if (!m->in_bucket) return;
    if (m->n == MAX_POINTS) { /* halve: neighbours merged, twice the stride from now on */
        for (size_t i = 0; i < MAX_POINTS / 2; i++) {
            m->t[i] = m->t[2 * i];
            for (size_t s = 0; s < MAX_SERIES; s++)
                m->v[i][s] = m->v[2 * i][s] > m->v[2 * i + 1][s] ? m->v[2 * i][s] : m->v[2 * i + 1][s];
        }
        m->n = MAX_POINTS / 2;
        m->stride *= 2;
    }
    m->t[m->n] = m->bt;
    memcpy(m->v[m->n], m->bv, sizeof m->bv);
    m->n++;
    m->in_bucket = 0;
    memset(m->bv, 0, sizeof m->bv);
}

static size_t series_index(mem_series *m, const char *name) {
    for (size_t i = 0; i < m->n_series; i++)
        if (!strncmp(m->names[i], name, SERIES_NAME - 1) && strlen(name) < SERIES_NAME) return i;
    if (m->n_series == MAX_SERIES || strlen(name) >= SERIES_NAME) return MAX_SERIES;
    snprintf(m->names[m->n_series], SERIES_NAME, "%s", name);
    return m->n_series++;
}

static void add_value(mem_series *m, size_t s, int64_t v) {
    if (s < MAX_SERIES && v > m->bv[s]) m->bv[s] = v;
}

static int on_memory(const ls_trace_event *ev, void *user) {
    mem_series *m = user;
    if (ev->kind != LS_TRACE_MEMORY) return 0;
    if (m->in_bucket == 0) m->bt = ev->ts_ns;
    int64_t v;
    if (ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev->json, "total_live"), &v) && v >= 0)
        add_value(m, 0, v);
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(ev->json, "categories"), *c;
    const cJSON *list = cJSON_IsObject(cats) || cJSON_IsArray(cats) ? cats : NULL;
    cJSON_ArrayForEach(c, list) {
        const char *name = cJSON_IsArray(cats) ? jstr(c, "name") : c->string;
        if (!name || !ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(c, "live"), &v) || v < 0) continue;
        size_t s = series_index(m, name);
        if (s == MAX_SERIES) m->dropped_categories++;
        add_value(m, s, v);
    }
    m->events++;
    if (++m->in_bucket >= m->stride) bucket_flush(m);
    return 0;
}

static const char *COLORS[] = {"#111111", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};

static void human_bytes(char *out, size_t cap, double v) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int i = 0;
    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* The <svg> of one rank's series. */
static void put_plot(sbuf *b, int64_t rank, const mem_series *m) {
    const int W = 960, H = 340, L = 90, R = 200, T = 20, B = 46;
    const int pw = W - L - R, ph = H - T - B;
    sb_fmt(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"mem\" width=\"%d\" height=\"%d\" "
              "viewBox=\"0 0 %d %d\" role=\"img\"><title>rank %lld: live bytes over time</title>\n",
           W, H, W, H, (long long)rank);
    if (m->n == 0) {
        sb_fmt(b, "<text x=\"%d\" y=\"%d\">rank %lld: no memory events in its trace</text></svg>\n", L, H / 2,
               (long long)rank);
        return;
    }
    int64_t t0 = m->t[0], t1 = m->t[m->n - 1], vmax = 1;
    for (size_t i = 0; i < m->n; i++)
        for (size_t s = 0; s < m->n_series; s++)
            if (m->v[i][s] > vmax) vmax = m->v[i][s];
    double span = t1 > t0 ? (double)(t1 - t0) : 1.0;
    sb_fmt(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#999\"/>\n", L, T, pw,
           ph);
    for (int k = 0; k <= 4; k++) { /* axes: 5 ticks each */
        double y = T + ph - ph * k / 4.0, x = L + pw * k / 4.0;
        char lab[32];
        human_bytes(lab, sizeof lab, (double)vmax * k / 4.0);
        sb_fmt(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n",
               L, y, L + pw, y, L - 6, y + 4, lab);
        sb_fmt(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%.3f s</text>\n", x,
               T + ph + 16, (t0 + span * k / 4.0) / 1e9);
    }
    sb_fmt(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">seconds since rank %lld's trace "
              "opened (%llu memory events)</text>\n",
           L + pw / 2, H - 6, (long long)rank, (unsigned long long)m->events);
    for (size_t s = 0; s < m->n_series; s++) {
        sb_fmt(b, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"",
               COLORS[s % (sizeof COLORS / sizeof COLORS[0])], s == 0 ? "2.5" : "1.3");
        for (size_t i = 0; i < m->n; i++)
            sb_fmt(b, "%s%.1f,%.1f", i ? " " : "", L + pw * ((double)(m->t[i] - t0) / span),
                   T + ph - ph * ((double)m->v[i][s] / (double)vmax));
        sb_raw(b, "\"/>\n");
        int ly = T + 10 + (int)s * 13;
        sb_fmt(b, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"3\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                  "font-size=\"11\">",
               L + pw + 10, ly - 4, COLORS[s % (sizeof COLORS / sizeof COLORS[0])], L + pw + 24, ly);
        sb_esc(b, m->names[s]);
        sb_raw(b, "</text>\n");
    }
    sb_raw(b, "</svg>\n");
}

/* One rank's section: plot or note; header run_id / host kept for the
 * page's title line. */
static void put_rank(sbuf *b, const char *run_dir, int64_t rank, mem_series *m, char *run_id, size_t id_cap) {
    char path[4200], why[512];
    sb_fmt(b, "<div class=\"rank\"><h3>rank %lld</h3>\n", (long long)rank);
    if (ls_audit_timeline_trace_path(run_dir, rank, path, sizeof path, why, sizeof why) != LS_OK) {
        sb_raw(b, "<p class=\"note\">trace skipped: ");
        sb_esc(b, why);
        sb_raw(b, "</p></div>\n");
        return;
    }
    memset(m, 0, sizeof *m);
    m->stride = 1;
    snprintf(m->names[0], SERIES_NAME, "total");
    m->n_series = 1;
    ls_trace_report rep = {0};
    char rel[64];
    snprintf(rel, sizeof rel, "rank-%04lld/events.jsonl.zst", (long long)rank);
    ls_status st = LS_OK;
    int fd = ls_audit_open(run_dir, rel, 0, NULL, &st, why, sizeof why);
    if (fd < 0) {
        sb_raw(b, "<p class=\"note\">trace skipped: ");
        sb_esc(b, why);
        sb_raw(b, "</p></div>\n");
        return;
    }
    st = ls_trace_read_fd(fd, rel, on_memory, m, &rep);
    bucket_flush(m);
    if (st == LS_ERR_NOMEM || st == LS_ERR_ARG) {
        sb_raw(b, "<p class=\"note\">trace skipped: out of memory</p></div>\n");
        ls_trace_report_free(&rep);
        return;
    }
    if (rep.header && !run_id[0] && jstr(rep.header, "run_id")) snprintf(run_id, id_cap, "%s", jstr(rep.header, "run_id"));
    put_plot(b, rank, m);
    if (rep.end != LS_TRACE_END_CLEAN || st != LS_OK) {
        sb_fmt(b, "<p class=\"note\">trace %s after %lld event(s)", ls_trace_end_name(rep.end),
               (long long)rep.n_events);
        if (rep.n_diags) {
            sb_raw(b, ": ");
            sb_esc(b, rep.diags[0].message);
        }
        sb_raw(b, "; the plot shows the readable prefix.</p>\n");
    }
    if (m->dropped_categories)
        sb_fmt(b, "<p class=\"note\">categories beyond the first %d not plotted (%llu value(s)).</p>\n",
               MAX_SERIES - 1, (unsigned long long)m->dropped_categories);
    sb_raw(b, "</div>\n");
    ls_trace_report_free(&rep);
}

static const char *STYLE =
    "body{font-family:sans-serif;margin:2em;color:#111}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top;font-size:14px}"
    "tr.pass td:nth-child(3){color:#176b1c}tr.fail td:nth-child(3){color:#b00020;font-weight:bold}"
    ".verdict .level{font-size:1.6em;font-weight:bold}.verdict.pass .level{color:#176b1c}"
    ".verdict.fail .level{color:#b00020}.verdict.none .level{color:#666}.note{color:#8a5a00}"
    "code{font-size:13px}svg.mem{display:block;margin:.5em 0}";

int ls_audit_html_write(const char *run_dir, const cJSON *report, const char *out_path, char *err,
                        size_t err_len) {
    char dummy[8];
    if (!err || !err_len) {
        err = dummy;
        err_len = sizeof dummy;
    }
    err[0] = 0;
    if (!run_dir || !out_path) {
        snprintf(err, err_len, "html: run directory and output path are required");
        return 2;
    }
    int rc = 2;
    sbuf page = {0}, body = {0};
    mem_series *m = NULL;
    int64_t world = 0;
    char wnote[600], run_id[256] = "";
    locale_t c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0), old_loc = (locale_t)0;
    if (c_loc) old_loc = uselocale(c_loc);
    if (ls_audit_timeline_world(run_dir, &world, wnote, sizeof wnote, err, err_len) != LS_OK) goto cleanup;
    m = malloc(sizeof *m);
    if (!m) {
        snprintf(err, err_len, "html: out of memory");
        goto cleanup;
    }
    sb_raw(&body, "<section id=\"memory\"><h2>Memory over time</h2>\n");
    if (wnote[0]) {
        sb_raw(&body, "<p class=\"note\">");
        sb_esc(&body, wnote);
        sb_raw(&body, "</p>\n");
    }
    for (int64_t r = 0; r < world && !body.nomem; r++) put_rank(&body, run_dir, r, m, run_id, sizeof run_id);
    sb_raw(&body, "</section>\n");

    const char *run = cJSON_IsObject(report) ? jstr(report, "run") : NULL;
    sb_raw(&page, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                  "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                  "style-src 'unsafe-inline'\">\n<title>LongStraw audit: ");
    sb_esc(&page, run ? run : run_dir);
    sb_raw(&page, "</title>\n<style>");
    sb_raw(&page, STYLE);
    sb_raw(&page, "</style></head><body>\n<h1>LongStraw audit</h1>\n<p class=\"run\">run <code>");
    sb_esc(&page, run ? run : run_dir);
    sb_raw(&page, "</code>");
    if (run_id[0]) {
        sb_raw(&page, ", run id <code>");
        sb_esc(&page, run_id);
        sb_raw(&page, "</code>");
    }
    const char *digest = cJSON_IsObject(report) ? jstr(report, "build_digest") : NULL;
    if (digest) {
        sb_raw(&page, ", build <code>");
        sb_esc(&page, digest);
        sb_raw(&page, "</code>");
    }
    sb_fmt(&page, ", %lld rank(s)</p>\n", (long long)world);
    put_verdict(&page, report);
    put_rules(&page, report);
    if (body.p) sb_put(&page, body.p, body.len);
    sb_raw(&page, "</body></html>\n");
    if (page.nomem || body.nomem) {
        snprintf(err, err_len, "%.200s: out of memory building the page", out_path);
        goto cleanup;
    }
    if (ls_atomic_write(out_path, page.p, page.len, err, err_len) != LS_OK) goto cleanup;
    rc = 0;
cleanup:
    free(page.p);
    free(body.p);
    free(m);
    if (c_loc) {
        uselocale(old_loc);
        freelocale(c_loc);
    }
    return rc;
}
