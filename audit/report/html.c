/* html.c - one self-contained HTML page of a run (contract in html.h). */
#include "audit/report/html.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/report/basis.h"
#include "audit/model/run_files.h"
#include "audit/load/timeline.h"
#include "receipts/format/atomic_file.h"
#include "receipts/format/digest.h"
#include "receipts/writing/receipt.h"
#include "receipts/reading/trace_reader.h"

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
    /* the profile the verdict was judged by: its file and digest, and the revision the run names */
    const cJSON *pu = cJSON_GetObjectItemCaseSensitive(report, "profile_used");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(report, "profile");
    sb_raw(b, "</p>\n<p class=\"profile\">Profile: ");
    if (!cJSON_IsObject(pu)) {
        sb_raw(b, "not stated");
    } else {
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(pu, "sha256");
        sb_raw(b, "<strong>");
        sb_esc(b, jstr(pu, "name"));
        sb_raw(b, "</strong> (<code>");
        sb_esc(b, jstr(pu, "file"));
        sb_raw(b, "</code>, sha256 <code>");
        sb_esc(b, cJSON_IsString(sha) ? sha->valuestring : "none: not loaded");
        sb_raw(b, "</code>); ");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pu, "pinned"))) {
            sb_raw(b, "the run names this revision");
        } else if (cJSON_IsObject(pn)) {
            sb_raw(b, "the run names <code>");
            sb_esc(b, jstr(pn, "name"));
            sb_raw(b, "</code> sha256 <code>");
            sb_esc(b, jstr(pn, "sha256"));
            sb_raw(b, "</code> (profile.match)");
        } else {
            sb_raw(b, "the run names no profile: the revision it was written for is not pinned (profile.match)");
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
        sb_raw(b, "<table class=\"levels\"><tr><th>Level</th><th>Name</th><th>Holds</th><th>Rests on</th>"
                  "<th>Not bound</th></tr>\n");
        const cJSON *lv;
        cJSON_ArrayForEach(lv, levels) {
            int64_t n = -1;
            ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(lv, "level"), &n);
            bool holds = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(lv, "holds"));
            sb_fmt(b, "<tr class=\"%s\"><td>%lld</td><td>", holds ? "pass" : "fail", (long long)n);
            sb_esc(b, jstr(lv, "name"));
            sb_fmt(b, "</td><td>%s</td><td class=\"basis\">", holds ? "holds" : "does not hold");
            /* what the level rests on and does not bind (the report's basis, audit/report/basis.c) */
            const cJSON *bs = cJSON_GetObjectItemCaseSensitive(lv, "basis");
            if (cJSON_IsObject(bs)) {
                char rests[1600], nb[1600];
                ls_audit_basis_text(bs, rests, sizeof rests, nb, sizeof nb);
                sb_esc(b, rests);
                sb_raw(b, "</td><td class=\"basis\">");
                const cJSON *s, *list = cJSON_GetObjectItemCaseSensitive(bs, "not_bound");
                if (!cJSON_IsArray(list)) list = NULL;
                int k = 0;
                cJSON_ArrayForEach(s, list) {
                    if (!cJSON_IsString(s)) continue;
                    sb_raw(b, k++ ? "<br>" : "");
                    sb_esc(b, s->valuestring);
                }
                if (k == 0) sb_raw(b, "&mdash;");
            } else {
                sb_raw(b, "&mdash;</td><td class=\"basis\">&mdash;");
            }
            sb_raw(b, "</td></tr>\n");
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
    bool seen[MAX_SERIES];    /* the trace has a live figure of the series */
    int64_t smax[MAX_SERIES]; /* the largest live figure of each series (exact, not merged) */
    int64_t t[MAX_POINTS];
    int64_t v[MAX_POINTS][MAX_SERIES];
    int64_t pk[MAX_POINTS]; /* the events' total_peak: the tracked total's peak so far in the step */
    size_t n;
    /* the bucket being filled: `stride` events merged by their maxima */
    int64_t bt, bv[MAX_SERIES], bpk;
    size_t in_bucket, stride;
    int64_t pk_max; /* the largest total_peak of the trace; -1: none */
    uint64_t events, dropped_categories;
} mem_series;

static void bucket_flush(mem_series *m) {
    if (!m->in_bucket) return;
    if (m->n == MAX_POINTS) { /* halve: neighbours merged, twice the stride from now on */
        for (size_t i = 0; i < MAX_POINTS / 2; i++) {
            m->t[i] = m->t[2 * i];
            for (size_t s = 0; s < MAX_SERIES; s++)
                m->v[i][s] = m->v[2 * i][s] > m->v[2 * i + 1][s] ? m->v[2 * i][s] : m->v[2 * i + 1][s];
            m->pk[i] = m->pk[2 * i] > m->pk[2 * i + 1] ? m->pk[2 * i] : m->pk[2 * i + 1];
        }
        m->n = MAX_POINTS / 2;
        m->stride *= 2;
    }
    m->t[m->n] = m->bt;
    memcpy(m->v[m->n], m->bv, sizeof m->bv);
    m->pk[m->n] = m->bpk;
    m->n++;
    m->in_bucket = 0;
    memset(m->bv, 0, sizeof m->bv);
    m->bpk = 0;
}

/* The series of category `name` (series 0, the total, is never a
 * category's); MAX_SERIES when it has none and none is left. */
static size_t series_index(mem_series *m, const char *name) {
    if (strlen(name) >= SERIES_NAME) return MAX_SERIES;
    for (size_t i = 1; i < m->n_series; i++)
        if (!strcmp(m->names[i], name)) return i;
    if (m->n_series == MAX_SERIES) return MAX_SERIES;
    snprintf(m->names[m->n_series], SERIES_NAME, "%s", name);
    return m->n_series++;
}

static void add_value(mem_series *m, size_t s, int64_t v) {
    if (s >= MAX_SERIES) return;
    if (v > m->bv[s]) m->bv[s] = v;
    if (!m->seen[s] || v > m->smax[s]) m->smax[s] = v;
    m->seen[s] = true;
}

static int on_memory(const ls_trace_event *ev, void *user) {
    mem_series *m = user;
    if (ev->kind != LS_TRACE_MEMORY) return 0;
    if (m->in_bucket == 0) m->bt = ev->ts_ns;
    int64_t v;
    if (ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev->json, "total_live"), &v) && v >= 0)
        add_value(m, 0, v);
    if (ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev->json, "total_peak"), &v) && v >= 0) {
        if (v > m->bpk) m->bpk = v;
        if (v > m->pk_max) m->pk_max = v;
    }
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

/* ---- the receipt's byte-exact figures of one rank ---- */

typedef struct {
    ls_receipt *r;  /* checked by ls_receipt_parse; NULL: none usable, `why` says why */
    char rel[64];   /* rank-NNNN/receipt.json */
    char why[700];
} rank_receipt;

/* Reads rank's receipt with the audit's safe reader and checks it (schema
 * and structure, ls_receipt_parse); a receipt of another rank is refused. */
/* What the page reads again must be the bytes the verdict judged (run_files.h, "one read"). */
typedef struct {
    const ls_audit_reads *reads; /* NULL: not checked */
    bool changed;
    char why[400];
} reread;

static void reread_bytes(reread *rd, const char *rel, const char *bytes, size_t len) {
    uint8_t sha[32];
    if (rd->reads == NULL || rd->changed) return;
    if (ls_digest_sha256(bytes, len, sha) != LS_OK ||
        ls_audit_reads_same(rd->reads, rel, sha, rd->why, sizeof rd->why) != LS_OK)
        rd->changed = true;
}

static void receipt_load(rank_receipt *rr, reread *rd, const char *run_dir, int64_t rank) {
    char err[600] = "";
    char *bytes = NULL;
    size_t len = 0;
    rr->r = NULL;
    rr->why[0] = 0;
    snprintf(rr->rel, sizeof rr->rel, "rank-%04lld/receipt.json", (long long)rank);
    ls_status st = ls_audit_read(run_dir, rr->rel, LS_AUDIT_MAX_JSON_FILE, &bytes, &len, err, sizeof err);
    if (st == LS_OK) reread_bytes(rd, rr->rel, bytes, len);
    if (st != LS_OK) {
        snprintf(rr->why, sizeof rr->why, "no receipt (%s)", err);
    } else if (ls_receipt_parse(bytes, len, rr->rel, &rr->r, err, sizeof err) != LS_OK) {
        rr->r = NULL;
        snprintf(rr->why, sizeof rr->why, "the receipt is unreadable (%s)", err);
    } else if ((int64_t)rr->r->rank != rank) {
        snprintf(rr->why, sizeof rr->why, "the receipt %s names rank %u: not this rank's", rr->rel,
                 (unsigned)rr->r->rank);
        ls_receipt_free(rr->r);
        rr->r = NULL;
    }
    free(bytes);
}

/* The receipt's run peak of series s (0: the tracked total, else the
 * category of that name); false when the receipt has none. */
static bool receipt_peak(const ls_receipt *r, const mem_series *m, size_t s, uint64_t *out) {
    if (!r) return false;
    if (s == 0) {
        *out = r->run_total_peak_bytes;
        return true;
    }
    for (size_t i = 0; i < r->n_memory; i++)
        if (!strcmp(r->memory[i].name, m->names[s])) {
            *out = r->memory[i].run_peak_bytes;
            return true;
        }
    return false;
}

static const char *UNITS[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};

/* A byte figure as the page prints it: two decimals in the largest binary
 * unit it reaches ("69.25 MiB"), whole bytes below 1 KiB ("512 B"). */
static void fmt_bytes(char *out, size_t cap, uint64_t bytes) {
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    if (i == 0) snprintf(out, cap, "%llu B", (unsigned long long)bytes);
    else snprintf(out, cap, "%.2f %s", v, UNITS[i]);
}

/* "69.25 MiB (72618992 bytes)"; "512 bytes" below 1 KiB */
static void put_figure(sbuf *b, uint64_t bytes) {
    char h[48];
    if (bytes < 1024) {
        sb_fmt(b, "%llu bytes", (unsigned long long)bytes);
        return;
    }
    fmt_bytes(h, sizeof h, bytes);
    sb_fmt(b, "%s (%llu bytes)", h, (unsigned long long)bytes);
}

/* The y axis's top: the smallest 4 x {1, 2, 2.5, 5} x 10^k of a binary
 * unit at or above v (so that its five ticks are short, exact labels);
 * *unit the unit's index. */
static double axis_top(double v, int *unit) {
    static const double STEPS[] = {1, 2, 2.5, 5, 10};
    double u = 1, top = v;
    int i = 0;
    if (v < 1) v = 1;
    while (v / u >= 1024 && i < 5) {
        u *= 1024;
        i++;
    }
    for (;;) {
        double x = v / u / 4, p = pow(10, floor(log10(x))), step = 10 * p;
        for (size_t k = 0; k < sizeof STEPS / sizeof STEPS[0]; k++)
            if (STEPS[k] * p >= x) {
                step = STEPS[k] * p;
                break;
            }
        if (i == 0) step = ceil(step); /* whole bytes */
        if (i > 0 && step < 0.25) step = 0.25; /* a whole number of bytes per tick */
        top = 4 * step * u;
        if (4 * step < 1024 || i == 5) break;
        u *= 1024; /* "1024 KiB" is 1 MiB */
        i++;
    }
    *unit = i;
    return top >= v ? top : v; /* never below v, whatever the rounding */
}

/* A tick's figure in its unit: up to two decimals, trailing zeros dropped. */
static void fmt_tick(char *out, size_t cap, double bytes, int unit) {
    char num[40];
    snprintf(num, sizeof num, "%.2f", bytes / pow(1024, unit));
    size_t n = strlen(num);
    while (n > 1 && num[n - 1] == '0') num[--n] = 0;
    if (n > 1 && num[n - 1] == '.') num[--n] = 0;
    snprintf(out, cap, "%s %s", num, UNITS[unit]);
}

static const char *COLORS[] = {"#111111", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};
#define NCOLORS (sizeof COLORS / sizeof COLORS[0])

/* The colour of series s: the total black, categories cycling through the
 * others (never the total's). */
static const char *series_color(size_t s) { return s == 0 ? COLORS[0] : COLORS[1 + (s - 1) % (NCOLORS - 1)]; }
#define PEAK_COLOR "#b00020" /* the receipt's total peak */
#define LABEL_GAP 13         /* px between two labels of the key */

/* One entry of the key right of the plot: placed at its series' marker
 * (the receipt's peak, else the samples' maximum), moved apart from the
 * others by at least LABEL_GAP. */
typedef struct {
    size_t s;  /* series; MAX_SERIES: the trace's step-peak line */
    double want, y;
} key_entry;

static int key_cmp(const void *a, const void *b) {
    const key_entry *x = a, *y = b;
    return x->want < y->want ? -1 : x->want > y->want ? 1 : (x->s > y->s) - (x->s < y->s);
}

/* The caption over one rank's plot: how its samples compare with the
 * receipt's total peak. */
static void put_caption(sbuf *b, int x, int y, const mem_series *m, const rank_receipt *rr) {
    sb_fmt(b, "<text class=\"caption\" x=\"%d\" y=\"%d\" font-size=\"12\">", x, y);
    if (!rr->r) {
        sb_raw(b, "No receipt figures (see below): the samples, taken at phase boundaries, may miss the peaks");
        if (m->seen[0]) {
            sb_raw(b, "; they reach ");
            put_figure(b, (uint64_t)m->smax[0]);
        }
        sb_raw(b, ".</text>\n");
        return;
    }
    uint64_t peak = rr->r->run_total_peak_bytes;
    if (!m->seen[0]) {
        sb_raw(b, "The trace has no memory samples; the receipt's total peak is ");
        put_figure(b, peak);
    } else if ((uint64_t)m->smax[0] < peak) {
        sb_raw(b, "Sampled at phase boundaries; the receipt's peak is ");
        put_figure(b, peak);
        sb_raw(b, ", the samples reach ");
        put_figure(b, (uint64_t)m->smax[0]);
    } else if ((uint64_t)m->smax[0] == peak) {
        sb_raw(b, "The samples reach the receipt's total peak, ");
        put_figure(b, peak);
    } else {
        sb_raw(b, "The samples reach ");
        put_figure(b, (uint64_t)m->smax[0]);
        sb_raw(b, ", above the receipt's total peak of ");
        put_figure(b, peak);
        sb_raw(b, ": the two disagree");
    }
    sb_raw(b, ".</text>\n");
}

/* The <svg> of one rank: the trace's samples (live bytes at each memory
 * event) and the receipt's run peaks as labelled lines; the y axis reaches
 * the largest of them all. */
static void put_plot(sbuf *b, int64_t rank, const mem_series *m, const rank_receipt *rr) {
    const int W = 1040, L = 90, R = 320, T = 36, B = 46, pw = W - L - R;
    if (m->n == 0 && !rr->r) {
        sb_fmt(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"mem\" width=\"%d\" height=\"60\" "
                  "viewBox=\"0 0 %d 60\" role=\"img\"><title>rank %lld: live bytes over time</title>\n"
                  "<text x=\"%d\" y=\"30\">rank %lld: no memory events in its trace</text></svg>\n",
               W, W, (long long)rank, L, (long long)rank);
        return;
    }
    uint64_t peak[MAX_SERIES] = {0}, top_v = 1;
    bool has_peak[MAX_SERIES] = {false};
    key_entry key[MAX_SERIES + 1];
    size_t nkey = 0;
    for (size_t s = 0; s < m->n_series; s++) {
        has_peak[s] = receipt_peak(rr->r, m, s, &peak[s]);
        if (has_peak[s] && peak[s] > top_v) top_v = peak[s];
        if (m->seen[s] && (uint64_t)m->smax[s] > top_v) top_v = (uint64_t)m->smax[s];
    }
    bool trace_peak = m->pk_max >= 0 && m->n > 0;
    if (trace_peak && (uint64_t)m->pk_max > top_v) top_v = (uint64_t)m->pk_max;
    int unit = 0;
    double ymax = axis_top((double)top_v, &unit);
    size_t nlabels = m->n_series + trace_peak;
    int ph = 274 > LABEL_GAP * (int)nlabels + 8 ? 274 : LABEL_GAP * (int)nlabels + 8, H = T + ph + B;
#define YOF(bytes) (T + ph - ph * ((double)(bytes) / ymax))
    sb_fmt(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"mem\" width=\"%d\" height=\"%d\" "
              "viewBox=\"0 0 %d %d\" role=\"img\" data-y-max-bytes=\"%.0f\" data-plot-top=\"%d\" "
              "data-plot-height=\"%d\"><title>rank %lld: live bytes over time and the receipt's peaks</title>\n",
           W, H, W, H, ymax, T, ph, (long long)rank);
    put_caption(b, 8, 16, m, rr);
    sb_fmt(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#999\"/>\n", L, T, pw,
           ph);
    int64_t t0 = m->n ? m->t[0] : 0, t1 = m->n ? m->t[m->n - 1] : 0;
    double span = t1 > t0 ? (double)(t1 - t0) : 1.0;
    for (int k = 0; k <= 4; k++) { /* axes: 5 ticks each */
        double y = T + ph - ph * k / 4.0, x = L + pw * k / 4.0, v = ymax * k / 4.0;
        char lab[48];
        fmt_tick(lab, sizeof lab, v, unit);
        sb_fmt(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text class=\"ytick\" data-bytes=\"%.0f\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
                  "font-size=\"11\">%s</text>\n",
               L, y, L + pw, y, v, L - 6, y + 4, lab);
        if (m->n)
            sb_fmt(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%.3f s</text>\n", x,
                   T + ph + 16, (t0 + span * k / 4.0) / 1e9);
    }
    if (m->n)
        sb_fmt(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">seconds since rank %lld's trace "
                  "opened (%llu memory events, sampled at phase boundaries)</text>\n",
               L + pw / 2, H - 6, (long long)rank, (unsigned long long)m->events);
    else
        sb_fmt(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">no memory events in rank %lld's "
                  "trace</text>\n", L + pw / 2, T + ph / 2, (long long)rank);
    for (size_t s = 0; s < m->n_series && m->n; s++) { /* the samples */
        if (!m->seen[s]) continue;
        sb_fmt(b, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"",
               series_color(s), s == 0 ? "2.5" : "1.3");
        for (size_t i = 0; i < m->n; i++)
            sb_fmt(b, "%s%.1f,%.1f", i ? " " : "", L + pw * ((double)(m->t[i] - t0) / span), YOF(m->v[i][s]));
        sb_raw(b, "\"/>\n");
    }
    if (trace_peak) { /* the events' own peak figures, the step's peak so far: reached at some time
                         * before each event, so drawn as steps rising at the events */
        sb_raw(b, "<polyline class=\"trace-peak\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.2\" "
                  "stroke-dasharray=\"1 3\" points=\"");
        for (size_t i = 0; i < m->n; i++) {
            double x = L + pw * ((double)(m->t[i] - t0) / span);
            if (i) sb_fmt(b, " %.1f,%.1f", x, YOF(m->pk[i - 1]));
            sb_fmt(b, "%s%.1f,%.1f", i ? " " : "", x, YOF(m->pk[i]));
        }
        sb_raw(b, "\"/>\n");
    }
    for (size_t s = 0; s < m->n_series; s++) { /* the receipt's peaks */
        if (!has_peak[s]) continue;
        double y = YOF(peak[s]);
        sb_fmt(b, "<g class=\"peak%s\" data-series=\"", s ? "" : " total");
        sb_esc(b, m->names[s]);
        sb_fmt(b, "\" data-bytes=\"%llu\"><title>", (unsigned long long)peak[s]);
        sb_esc(b, m->names[s]);
        sb_fmt(b, " %s %llu bytes (receipt ", s ? "run peak" : "peak, the run's tracked total:",
               (unsigned long long)peak[s]);
        sb_esc(b, rr->rel);
        sb_fmt(b, ")</title><line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%s\" "
                  "stroke-dasharray=\"%s\"/>",
               L, y, L + pw, y, s ? series_color(s) : PEAK_COLOR, s ? "1" : "1.5", s ? "4 3" : "8 3");
        if (s == 0) {
            char h[48];
            fmt_bytes(h, sizeof h, peak[0]);
            sb_fmt(b, "<text class=\"peak-label\" x=\"%d\" y=\"%.1f\" fill=\"%s\" font-size=\"11\">total peak %s "
                      "(receipt)</text>",
                   L + 6, y - 4, PEAK_COLOR, h);
        }
        sb_raw(b, "</g>\n");
    }
    /* the key: one entry per series at its marker, moved apart */
    for (size_t s = 0; s < m->n_series; s++)
        if (has_peak[s] || m->seen[s])
            key[nkey++] = (key_entry){s, has_peak[s] ? YOF(peak[s]) : YOF(m->smax[s]), 0};
    if (trace_peak) key[nkey++] = (key_entry){MAX_SERIES, YOF(m->pk_max), 0};
    qsort(key, nkey, sizeof key[0], key_cmp);
    sb_fmt(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" font-weight=\"bold\">%s</text>\n", L + pw + 12, T - 8,
           rr->r ? "run peaks from the receipt" : "no receipt: the samples' maxima");
    for (size_t i = 0; i < nkey; i++) {
        double lo = i ? key[i - 1].y + LABEL_GAP : T + 4;
        key[i].y = key[i].want > lo ? key[i].want : lo;
    }
    for (size_t i = nkey; i-- > 0;) {
        double hi = i + 1 < nkey ? key[i + 1].y - LABEL_GAP : T + ph + 4;
        if (key[i].y > hi) key[i].y = hi;
    }
    for (size_t i = 0; i < nkey; i++) {
        size_t s = key[i].s;
        const char *color = s == MAX_SERIES ? "#555" : series_color(s);
        sb_fmt(b, "<g class=\"key\"><line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#bbb\"/>"
                  "<rect x=\"%d\" y=\"%.1f\" width=\"10\" height=\"3\" fill=\"%s\"/><text x=\"%d\" y=\"%.1f\" "
                  "font-size=\"11\">",
               L + pw, key[i].want, L + pw + 10, key[i].y - 4, L + pw + 12, key[i].y - 5, color, L + pw + 26,
               key[i].y);
        char h[48];
        if (s == MAX_SERIES) {
            fmt_bytes(h, sizeof h, (uint64_t)m->pk_max);
            sb_fmt(b, "step's peak so far (trace): %s", h);
        } else {
            sb_esc(b, m->names[s]);
            fmt_bytes(h, sizeof h, has_peak[s] ? peak[s] : (uint64_t)m->smax[s]);
            sb_fmt(b, has_peak[s] ? ": peak %s" : ": sampled %s", h);
        }
        sb_raw(b, "</text></g>\n");
    }
#undef YOF
    sb_raw(b, "</svg>\n");
}

/* A row of the peaks table: a figure per column, or a word when none. */
static void put_cell(sbuf *b, bool has, uint64_t bytes, const char *none) {
    if (!has) {
        sb_fmt(b, "<td class=\"none\">%s</td>", none);
        return;
    }
    sb_fmt(b, "<td data-bytes=\"%llu\">", (unsigned long long)bytes);
    put_figure(b, bytes);
    sb_raw(b, "</td>");
}

/* The rank's peaks: the receipt's byte-exact figures beside what the
 * trace's samples reach; or why there are no receipt figures. */
static void put_peaks(sbuf *b, int64_t rank, const mem_series *m, bool sampled, const rank_receipt *rr) {
    const ls_receipt *r = rr->r;
    if (!r) {
        sb_raw(b, "<p class=\"note receipt\">No byte-exact peaks for this rank: ");
        sb_esc(b, rr->why);
        sb_raw(b, ". The plot shows the trace's samples only.</p>\n");
        return;
    }
    sb_fmt(b, "<table class=\"peaks\"><caption>Memory peaks of rank %lld: the receipt <code>", (long long)rank);
    sb_esc(b, rr->rel);
    sb_fmt(b, "</code> (byte-exact; the run scope is the process lifetime, the per-step scope the largest of %llu "
              "measured step(s)", (unsigned long long)r->steps_measured);
    if (r->step_total_peak_at >= 0) sb_fmt(b, ", the total's at step %lld", (long long)r->step_total_peak_at);
    sb_fmt(b, "; %llu step(s) completed, %llu exact, status %s) and the trace's samples</caption>\n"
              "<tr><th>Series</th><th>Run peak (receipt)</th><th>Largest per-step peak (receipt)</th>"
              "<th>Samples reach (trace)</th></tr>\n",
           (unsigned long long)r->steps, (unsigned long long)r->steps_exact,
           r->status == LS_RECEIPT_COMPLETE ? "complete" : "error");
    const char *nos = sampled ? "no sample" : "no trace read";
    sb_raw(b, "<tr data-series=\"total\"><td>total (tracked)</td>");
    put_cell(b, true, r->run_total_peak_bytes, "");
    put_cell(b, true, r->step_total_peak_bytes, "");
    put_cell(b, sampled && m->seen[0], (uint64_t)m->smax[0], nos);
    sb_raw(b, "</tr>\n");
    for (size_t i = 0; i < r->n_memory; i++) {
        size_t s = 1;
        while (s < m->n_series && strcmp(m->names[s], r->memory[i].name) != 0) s++;
        bool seen = sampled && s < m->n_series && m->seen[s];
        sb_raw(b, "<tr data-series=\"");
        sb_esc(b, r->memory[i].name);
        sb_raw(b, "\"><td>");
        sb_esc(b, r->memory[i].name);
        sb_raw(b, "</td>");
        put_cell(b, true, r->memory[i].run_peak_bytes, "");
        put_cell(b, true, r->memory[i].step_peak_bytes, "");
        put_cell(b, seen, seen ? (uint64_t)m->smax[s] : 0, nos);
        sb_raw(b, "</tr>\n");
    }
    for (size_t s = 1; sampled && s < m->n_series; s++) { /* in the trace, not in the receipt */
        uint64_t dummy;
        if (!m->seen[s] || receipt_peak(r, m, s, &dummy)) continue;
        sb_raw(b, "<tr><td>");
        sb_esc(b, m->names[s]);
        sb_raw(b, "</td>");
        put_cell(b, false, 0, "not in the receipt");
        put_cell(b, false, 0, "not in the receipt");
        put_cell(b, true, (uint64_t)m->smax[s], "");
        sb_raw(b, "</tr>\n");
    }
    sb_raw(b, "<tr data-series=\"rss\"><td>resident set (RSS)</td>");
    put_cell(b, true, r->rss_peak_bytes, "");
    put_cell(b, false, 0, "not measured per step");
    put_cell(b, false, 0, "not sampled");
    sb_raw(b, "</tr>\n</table>\n");
}

/* Reads rank's memory events into m (reset first) and the trace's report
 * into rep (the caller frees it), *st the reader's status; false with why
 * when the trace was skipped (missing, refused, out of memory). */
static bool read_samples(reread *rd, const char *run_dir, int64_t rank, mem_series *m, ls_trace_report *rep,
                         ls_status *st, char *why, size_t why_len) {
    char path[4200], rel[64];
    memset(m, 0, sizeof *m);
    m->stride = 1;
    m->pk_max = -1;
    snprintf(m->names[0], SERIES_NAME, "total");
    m->n_series = 1;
    *st = LS_OK;
    if (ls_audit_timeline_trace_path(run_dir, rank, path, sizeof path, why, why_len) != LS_OK) return false;
    ls_audit_trace_rel(run_dir, rank, rel, sizeof rel);
    int fd = ls_audit_open(run_dir, rel, 0, NULL, st, why, why_len);
    if (fd < 0) return false;
    uint8_t sha[32];
    ls_status sha_st = LS_ERR_IO;
    *st = ls_trace_read_fd_sha256(fd, rel, on_memory, m, rep, sha, NULL, &sha_st);
    if (rd->reads != NULL && !rd->changed &&
        (sha_st != LS_OK || ls_audit_reads_same(rd->reads, rel, sha, rd->why, sizeof rd->why) != LS_OK)) {
        if (sha_st != LS_OK) snprintf(rd->why, sizeof rd->why, "%s: could not be read again to the end: refused", rel);
        rd->changed = true;
    }
    bucket_flush(m);
    if (*st == LS_ERR_NOMEM || *st == LS_ERR_ARG) {
        snprintf(why, why_len, "out of memory");
        return false;
    }
    return true;
}

/* One rank's section: plot (or note) and peaks table; the trace header's
 * run_id kept for the page's title line. */
static void put_rank(sbuf *b, reread *rd, const char *run_dir, int64_t rank, mem_series *m, char *run_id,
                     size_t id_cap) {
    char why[512];
    rank_receipt rr;
    ls_trace_report rep = {0};
    ls_status st;
    const char *hid = NULL;
    receipt_load(&rr, rd, run_dir, rank);
    sb_fmt(b, "<div class=\"rank\"><h3>rank %lld</h3>\n", (long long)rank);
    bool sampled = read_samples(rd, run_dir, rank, m, &rep, &st, why, sizeof why);
    if (!sampled) {
        sb_raw(b, "<p class=\"note\">trace skipped: ");
        sb_esc(b, why);
        sb_raw(b, "</p>\n");
        put_peaks(b, rank, m, false, &rr);
        goto cleanup;
    }
    hid = rep.header ? jstr(rep.header, "run_id") : NULL;
    if (hid && !run_id[0]) snprintf(run_id, id_cap, "%s", hid);
    /* receipt categories the trace never named still get their peak line */
    for (size_t i = 0; rr.r && i < rr.r->n_memory; i++)
        if (series_index(m, rr.r->memory[i].name) == MAX_SERIES) m->dropped_categories++;
    put_plot(b, rank, m, &rr);
    if (rep.end != LS_TRACE_END_CLEAN || st != LS_OK) {
        sb_fmt(b, "<p class=\"note\">trace %s after %lld event(s)", ls_trace_end_name(rep.end),
               (long long)rep.n_events);
        if (rep.n_diags) {
            sb_raw(b, ": ");
            sb_esc(b, rep.diags[0].message);
        }
        sb_raw(b, "; the plot shows the readable prefix.</p>\n");
    }
    if (rr.r && m->pk_max >= 0 && (uint64_t)m->pk_max != rr.r->step_total_peak_bytes) {
        sb_raw(b, "<p class=\"note\">the trace's memory events reach a per-step total peak of ");
        put_figure(b, (uint64_t)m->pk_max);
        sb_raw(b, "; the receipt states ");
        put_figure(b, rr.r->step_total_peak_bytes);
        sb_raw(b, ": the two disagree.</p>\n");
    }
    if (m->dropped_categories)
        sb_fmt(b, "<p class=\"note\">categories beyond the first %d not plotted (%llu value(s)); the table lists "
                  "every category of the receipt.</p>\n",
               MAX_SERIES - 1, (unsigned long long)m->dropped_categories);
    if (rr.r && hid && strcmp(hid, rr.r->run_id) != 0) {
        sb_raw(b, "<p class=\"note\">the receipt names run id <code>");
        sb_esc(b, rr.r->run_id);
        sb_raw(b, "</code>, the trace <code>");
        sb_esc(b, hid);
        sb_raw(b, "</code>: its peaks may not be this trace's.</p>\n");
    }
    put_peaks(b, rank, m, true, &rr);
cleanup:
    sb_raw(b, "</div>\n");
    ls_trace_report_free(&rep);
    ls_receipt_free(rr.r);
}

static const char *STYLE =
    "body{font-family:sans-serif;margin:2em;color:#111}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top;font-size:14px}"
    "tr.pass td:nth-child(3){color:#176b1c}tr.fail td:nth-child(3){color:#b00020;font-weight:bold}"
    ".verdict .level{font-size:1.6em;font-weight:bold}.verdict.pass .level{color:#176b1c}"
    ".verdict.fail .level{color:#b00020}.verdict.none .level{color:#666}.note{color:#8a5a00}"
    "code{font-size:13px}svg.mem{display:block;margin:.5em 0}table.peaks caption{text-align:left;font-size:13px}"
    "table.peaks td.none{color:#666}";

int ls_audit_html_write(const char *run_dir, const cJSON *report, const char *out_path, char *err,
                        size_t err_len) {
    return ls_audit_html_write_read(run_dir, report, NULL, out_path, err, err_len);
}

int ls_audit_html_write_read(const char *run_dir, const cJSON *report, const ls_audit_reads *reads,
                             const char *out_path, char *err, size_t err_len) {
    char dummy[8];
    if (ls_audit_drawing_args("html", run_dir, out_path, &err, &err_len, dummy, sizeof dummy) != 0) return 2;
    int rc = 2;
    sbuf page = {0}, body = {0};
    mem_series *m = NULL;
    int64_t world = 0;
    char wnote[600], run_id[256] = "";
    locale_t c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0), old_loc = (locale_t)0;
    if (c_loc) old_loc = uselocale(c_loc);
    reread rd = {.reads = reads};
    if (ls_audit_timeline_world_read(run_dir, reads, &world, wnote, sizeof wnote, err, err_len) != LS_OK)
        goto cleanup;
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
    for (int64_t r = 0; r < world && !body.nomem && !rd.changed; r++)
        put_rank(&body, &rd, run_dir, r, m, run_id, sizeof run_id);
    if (rd.changed) { /* the page shows only the bytes the verdict judged */
        snprintf(err, err_len, "%s", rd.why);
        goto cleanup;
    }
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
