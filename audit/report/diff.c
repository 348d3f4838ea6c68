/* diff.c - longstraw-audit diff: two runs compared, the first divergence named. */
#include "audit/report/diff.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/load/load.h" /* ls_audit_load: each run verified before it is compared */
#include "audit/model/audit.h"
#include "audit/model/run_files.h"
#include "audit/load/timeline.h" /* ls_audit_trace_rel */
#include "receipts/format/build_diff.h"
#include "receipts/format/digest.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "receipts/reading/trace_reader.h"

/* ---- one run: where its configuration, build and world come from ------- */

typedef struct {
    const char *dir;
    ls_manifest *man;
    ls_receipt *rec0;
    const cJSON *config, *build; /* borrowed from man or rec0; NULL unknown */
    const char *build_digest;
    int64_t world; /* -1 unknown */
    const char *source; /* "manifest.json", "rank-0000/receipt.json", "rank-0000 trace header" */
} run_info;

static void add_note(cJSON *notes, const char *fmt, const char *a, const char *b) {
    char line[1024];
    snprintf(line, sizeof line, fmt, a, b);
    cJSON_AddItemToArray(notes, cJSON_CreateString(line));
}

static ls_status read_receipt(const char *dir, uint32_t rank, ls_receipt **out, char *err, size_t err_len) {
    char rel[64];
    *out = NULL;
    if (ls_receipt_rank_dir(rank, rel, sizeof rel) != LS_OK) return LS_ERR_ARG;
    strcat(rel, "/receipt.json");
    char *bytes = NULL;
    size_t len = 0;
    ls_status st = ls_audit_read(dir, rel, LS_AUDIT_MAX_JSON_FILE, &bytes, &len, err, err_len);
    if (st == LS_OK) st = ls_receipt_parse(bytes, len, rel, out, err, err_len);
    free(bytes);
    return st;
}

/* World from rank 0's trace header (a run killed before its receipts). */
static int64_t header_world(const char *dir) {
    char rel[64], err[512];
    ls_audit_trace_rel(dir, 0, rel, sizeof rel);
    int fd = ls_audit_open(dir, rel, 0, NULL, NULL, err, sizeof err);
    if (fd < 0) return -1;
    ls_trace_reader *rd = NULL;
    if (ls_trace_reader_open_fd(&rd, fd, rel) != LS_OK) return -1;
    const ls_trace_event *ev = NULL;
    ls_trace_reader_next(rd, &ev);
    const ls_trace_report *rep = ls_trace_reader_report(rd);
    int64_t w = rep->header_ok ? rep->world : -1;
    ls_trace_reader_close(rd);
    return w;
}

static ls_status run_load(run_info *ri, const char *dir, const char *label, cJSON *notes, char *err,
                          size_t err_len) {
    memset(ri, 0, sizeof *ri);
    ri->dir = dir;
    ri->world = -1;
    struct stat st_dir;
    if (lstat(dir, &st_dir) != 0 || !S_ISDIR(st_dir.st_mode)) {
        snprintf(err, err_len, "%s %.200s: not a directory (%s)", label, dir,
                 access(dir, F_OK) != 0 ? "missing" : "a file or a symbolic link");
        return LS_ERR_IO;
    }
    char e[1024] = "";
    char *bytes = NULL;
    size_t len = 0;
    ls_status st = ls_audit_read(dir, LS_MANIFEST_FILE, LS_AUDIT_MAX_JSON_FILE, &bytes, &len, e, sizeof e);
    if (st == LS_OK) st = ls_manifest_parse(bytes, len, LS_MANIFEST_FILE, &ri->man, e, sizeof e);
    free(bytes);
    if (st == LS_OK) {
        ri->config = ri->man->config;
        ri->build = ri->man->build;
        ri->world = ri->man->world;
        ri->source = LS_MANIFEST_FILE;
    } else {
        add_note(notes, "%s: manifest not used: %.900s", label, e);
    }
    if (read_receipt(dir, 0, &ri->rec0, e, sizeof e) != LS_OK) {
        add_note(notes, "%s: rank 0 receipt not used: %.900s", label, e);
    } else if (!ri->man) {
        ri->config = ri->rec0->config;
        ri->build = ri->rec0->build;
        ri->world = ri->rec0->world;
        ri->source = "rank-0000/receipt.json";
    }
    if (ri->world < 0) {
        ri->world = header_world(dir);
        ri->source = "rank-0000 trace header";
    }
    if (ri->world < 1) {
        snprintf(err, err_len, "%s %.200s: no manifest.json, rank-0000/receipt.json or rank-0000 trace to compare",
                 label, dir);
        return LS_ERR_FORMAT;
    }
    if ((uint64_t)ri->world > LS_AUDIT_DIFF_MAX_WORLD) {
        snprintf(err, err_len, "%s %.200s: world %" PRId64 " above the cap of %u ranks (%s)", label, dir, ri->world,
                 LS_AUDIT_DIFF_MAX_WORLD, ri->source);
        return LS_ERR_FORMAT;
    }
    const cJSON *bd = ri->build ? cJSON_GetObjectItemCaseSensitive(ri->build, "build_digest") : NULL;
    ri->build_digest = cJSON_IsString(bd) ? bd->valuestring : NULL;
    return LS_OK;
}

static void run_free(run_info *ri) {
    ls_manifest_free(ri->man);
    ls_receipt_free(ri->rec0);
}

/* ---- JSON values: exact equality and the first differing key ---------- */

static int value_equal(const cJSON *a, const cJSON *b);

/* The first path (dotted, [i] for array items) where a and b differ, into
 * path; *va and *vb the values there (NULL: absent).  0 when equal. */
static int first_diff(const cJSON *a, const cJSON *b, char *path, size_t cap, const cJSON **va, const cJSON **vb) {
    size_t base = strlen(path);
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        for (const cJSON *x = a->child; x; x = x->next) {
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            snprintf(path + base, cap - base, "%s%s", base ? "." : "", x->string);
            if (!y) {
                *va = x, *vb = NULL;
                return 1;
            }
            if (first_diff(x, y, path, cap, va, vb)) return 1;
        }
        for (const cJSON *y = b->child; y; y = y->next)
            if (!cJSON_GetObjectItemCaseSensitive(a, y->string)) {
                snprintf(path + base, cap - base, "%s%s", base ? "." : "", y->string);
                *va = NULL, *vb = y;
                return 1;
            }
        path[base] = 0;
        return 0;
    }
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        const cJSON *x = a->child, *y = b->child;
        for (int i = 0; x || y; i++, x = x ? x->next : NULL, y = y ? y->next : NULL) {
            snprintf(path + base, cap - base, "[%d]", i);
            if (!x || !y) {
                *va = x, *vb = y;
                return 1;
            }
            if (first_diff(x, y, path, cap, va, vb)) return 1;
        }
        path[base] = 0;
        return 0;
    }
    if (value_equal(a, b)) return 0;
    *va = a, *vb = b;
    return 1;
}

static int value_equal(const cJSON *a, const cJSON *b) {
    if (!a || !b) return a == b;
    if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
    if (cJSON_IsNumber(a)) return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a)) return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsObject(a) || cJSON_IsArray(a)) {
        char big[2048] = "";
        const cJSON *va, *vb;
        return !first_diff(a, b, big, sizeof big, &va, &vb);
    }
    return 1; /* true, false, null of the same type */
}

/* A value as short text ("(absent)" for NULL). */
static void value_text(const cJSON *v, char *buf, size_t cap) {
    if (!v) {
        snprintf(buf, cap, "(absent)");
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    int keep = cap > 4 ? (int)cap - 4 : 0;
    snprintf(buf, cap, "%.*s%s", keep, s ? s : "?", s && strlen(s) > (size_t)keep ? "..." : "");
    free(s);
}

/* ---- divergences ------------------------------------------------------- */

static cJSON *divergence(cJSON *list, const char *what, int64_t rank, const char *detail) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "what", what);
    if (rank >= 0) cJSON_AddNumberToObject(d, "rank", (double)rank);
    cJSON_AddStringToObject(d, "detail", detail);
    cJSON_AddItemToArray(list, d);
    return d;
}

static void diff_key(cJSON *divs, const char *what, const char *label, const cJSON *a, const cJSON *b,
                     const char *src_a, const char *src_b) {
    char path[2048] = "", ta[256], tb[256], line[3072];
    const cJSON *va = NULL, *vb = NULL;
    if (!first_diff(a, b, path, sizeof path, &va, &vb)) return;
    value_text(va, ta, sizeof ta);
    value_text(vb, tb, sizeof tb);
    snprintf(line, sizeof line, "%s key %s: A %s, B %s", label, path[0] ? path : "(root)", ta, tb);
    cJSON *d = divergence(divs, what, -1, line);
    cJSON_AddStringToObject(d, "key", path[0] ? path : "(root)");
    cJSON *sa = cJSON_AddObjectToObject(d, "a"), *sb = cJSON_AddObjectToObject(d, "b");
    cJSON_AddStringToObject(sa, "file", src_a);
    cJSON_AddStringToObject(sa, "value", ta);
    cJSON_AddStringToObject(sb, "file", src_b);
    cJSON_AddStringToObject(sb, "value", tb);
}

/* The builds' differences (receipts/format/build_diff.h: the artifact and field, or
 * the key path, of each), after both digests; the first one's key and
 * values as the divergence's key, a and b.  Both build objects were verified
 * against their digests by their readers. */
static void diff_build(cJSON *divs, const run_info *A, const run_info *B) {
    ls_build_diff d;
    char line[3072], what[2048] = "";
    if (ls_build_diff_compare(A->build, B->build, "A", "B", &d) > 0) ls_build_diff_join(&d, 0, 4, true, what, sizeof what);
    snprintf(line, sizeof line, "build digest: A %.64s, B %.64s%s%s", A->build_digest, B->build_digest,
             what[0] ? ": " : "", what);
    cJSON *x = divergence(divs, "build", -1, line);
    if (d.n == 0) return;
    cJSON_AddStringToObject(x, "key", d.item[0].key);
    cJSON *sa = cJSON_AddObjectToObject(x, "a"), *sb = cJSON_AddObjectToObject(x, "b");
    cJSON_AddStringToObject(sa, "file", A->source);
    cJSON_AddStringToObject(sa, "value", d.item[0].a);
    cJSON_AddStringToObject(sb, "file", B->source);
    cJSON_AddStringToObject(sb, "value", d.item[0].b);
}

/* The configurations' first difference, their "inputs" (the digests of
 * what the runs read) last: another seed also starts from other weights,
 * and the option is the cause to name. */
static void diff_config(cJSON *divs, const run_info *A, const run_info *B) {
    cJSON *a = cJSON_Duplicate(A->config, 1), *b = cJSON_Duplicate(B->config, 1);
    cJSON *wa = cJSON_CreateObject(), *wb = cJSON_CreateObject();
    if (a && b && wa && wb) {
        cJSON *ia = cJSON_DetachItemFromObjectCaseSensitive(a, "inputs");
        cJSON *ib = cJSON_DetachItemFromObjectCaseSensitive(b, "inputs");
        if (ia) cJSON_AddItemToObject(wa, "inputs", ia);
        if (ib) cJSON_AddItemToObject(wb, "inputs", ib);
        int before = cJSON_GetArraySize(divs);
        diff_key(divs, "config", "configuration", a, b, A->source, B->source);
        if (cJSON_GetArraySize(divs) == before) diff_key(divs, "config", "configuration", wa, wb, A->source, B->source);
    } else { /* out of memory: in document order */
        diff_key(divs, "config", "configuration", A->config, B->config, A->source, B->source);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(wa);
    cJSON_Delete(wb);
}

/* ---- receipts: phase times and memory per rank ------------------------ */

static void add_num_or_null(cJSON *o, const char *k, int have, double v) {
    if (have && isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

/* What two receipts of equivalent runs record alike (counts, not measurements): the first difference
 * appended to rdivs as a "receipt" divergence. */
static void receipt_counts(cJSON *rdivs, const ls_receipt *ra, const ls_receipt *rb, uint32_t r) {
    char key[96] = "";
    double a = 0, b = 0;
#define CMP(name, fa, fb)                                          \
    if (!key[0] && (double)(fa) != (double)(fb))                   \
        snprintf(key, sizeof key, "%s", name), a = (double)(fa), b = (double)(fb)
    CMP("status", ra->status, rb->status);
    CMP("error.code", ra->error_message ? ra->error_code : 0, rb->error_message ? rb->error_code : 0);
    CMP("steps", ra->steps, rb->steps);
    CMP("steps_exact", ra->steps_exact, rb->steps_exact);
    CMP("steps_prefix_frozen", ra->steps_prefix_frozen, rb->steps_prefix_frozen);
    CMP("events.count", ra->events_count, rb->events_count);
    CMP("events.last_seq", ra->events_last_seq, rb->events_last_seq);
    CMP("phases (number of)", ra->n_phases, rb->n_phases);
    for (size_t i = 0; !key[0] && i < ra->n_phases && i < rb->n_phases; i++) {
        if (strcmp(ra->phases[i].phase, rb->phases[i].phase)) {
            snprintf(key, sizeof key, "phases[%zu].phase", i);
            a = (double)i, b = (double)i;
        }
        char nm[96];
        snprintf(nm, sizeof nm, "phases[%zu].count (%.40s)", i, ra->phases[i].phase);
        CMP(nm, ra->phases[i].count, rb->phases[i].count);
    }
#undef CMP
    if (!key[0]) return;
    char rel[64], line[512];
    ls_receipt_rank_dir(r, rel, sizeof rel);
    strcat(rel, "/receipt.json");
    snprintf(line, sizeof line, "rank %u: the receipts differ at %s: A %s %.17g, B %s %.17g", r, key, rel, a, rel, b);
    cJSON *d = divergence(rdivs, "receipt", r, line);
    cJSON_AddStringToObject(d, "key", key);
    cJSON *x = cJSON_AddObjectToObject(d, "a"), *y = cJSON_AddObjectToObject(d, "b");
    cJSON_AddStringToObject(x, "file", rel), cJSON_AddNumberToObject(x, "value", a);
    cJSON_AddStringToObject(y, "file", rel), cJSON_AddNumberToObject(y, "value", b);
}

static void rank_receipts(cJSON *ranks, cJSON *rdivs, const run_info *A, const run_info *B, uint32_t r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(ranks, o);
    cJSON_AddNumberToObject(o, "rank", r);
    ls_receipt *ra = NULL, *rb = NULL;
    char ea[512] = "", eb[512] = "";
    if ((int64_t)r >= A->world) snprintf(ea, sizeof ea, "rank %u beyond the world of %" PRId64, r, A->world);
    else read_receipt(A->dir, r, &ra, ea, sizeof ea);
    if ((int64_t)r >= B->world) snprintf(eb, sizeof eb, "rank %u beyond the world of %" PRId64, r, B->world);
    else read_receipt(B->dir, r, &rb, eb, sizeof eb);
    if (ra) cJSON_AddNullToObject(o, "receipt_a"); else cJSON_AddStringToObject(o, "receipt_a", ea);
    if (rb) cJSON_AddNullToObject(o, "receipt_b"); else cJSON_AddStringToObject(o, "receipt_b", eb);
    if (ra && rb) receipt_counts(rdivs, ra, rb, r);
    else if (ra || rb) { /* a receipt in one run only: its absence is no agreement */
        char line[1200];
        snprintf(line, sizeof line, "rank %u: a receipt in %s only (%s: %.500s)", r, ra ? "A" : "B", ra ? "B" : "A",
                 ra ? eb : ea);
        cJSON *d = divergence(rdivs, "receipt", r, line);
        cJSON *x = cJSON_AddObjectToObject(d, ra ? "b" : "a");
        char rel[64];
        ls_receipt_rank_dir(r, rel, sizeof rel);
        strcat(rel, "/receipt.json");
        cJSON_AddStringToObject(x, "file", rel);
        cJSON_AddStringToObject(x, "problem", ra ? eb : ea);
    }
    cJSON *ph = cJSON_AddArrayToObject(o, "phases");
    size_t na = ra ? ra->n_phases : 0, nb = rb ? rb->n_phases : 0;
    for (size_t i = 0; i < na + nb; i++) {
        const ls_receipt_phase *p = i < na ? &ra->phases[i] : &rb->phases[i - na];
        const ls_receipt_phase *pa = NULL, *pb = NULL;
        for (size_t k = 0; k < na; k++)
            if (!strcmp(ra->phases[k].phase, p->phase)) pa = &ra->phases[k];
        for (size_t k = 0; k < nb; k++)
            if (!strcmp(rb->phases[k].phase, p->phase)) pb = &rb->phases[k];
        if (i >= na && pa) continue; /* listed with A's */
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "phase", p->phase);
        add_num_or_null(row, "count_a", pa != NULL, pa ? (double)pa->count : 0);
        add_num_or_null(row, "count_b", pb != NULL, pb ? (double)pb->count : 0);
        add_num_or_null(row, "wall_ns_a", pa != NULL, pa ? (double)pa->wall_ns_total : 0);
        add_num_or_null(row, "wall_ns_b", pb != NULL, pb ? (double)pb->wall_ns_total : 0);
        add_num_or_null(row, "delta_ns", pa && pb, pa && pb ? (double)pb->wall_ns_total - (double)pa->wall_ns_total : 0);
        add_num_or_null(row, "ratio", pa && pb && pa->wall_ns_total > 0,
                        pa && pb && pa->wall_ns_total ? (double)pb->wall_ns_total / (double)pa->wall_ns_total : 0);
        cJSON_AddItemToArray(ph, row);
    }
    cJSON *mem = cJSON_AddArrayToObject(o, "memory");
    na = ra ? ra->n_memory : 0, nb = rb ? rb->n_memory : 0;
    for (size_t i = 0; i <= na + nb; i++) {
        const char *name = i < na ? ra->memory[i].name : i < na + nb ? rb->memory[i - na].name : "total";
        int ha = 0, hb = 0;
        double a = 0, b = 0;
        if (i == na + nb) { /* the tracked total's per-step peak */
            if (!ra && !rb) break;
            ha = ra != NULL, hb = rb != NULL;
            a = ra ? (double)ra->step_total_peak_bytes : 0;
            b = rb ? (double)rb->step_total_peak_bytes : 0;
        } else {
            for (size_t k = 0; k < na; k++)
                if (!strcmp(ra->memory[k].name, name)) ha = 1, a = (double)ra->memory[k].step_peak_bytes;
            for (size_t k = 0; k < nb; k++)
                if (!strcmp(rb->memory[k].name, name)) hb = 1, b = (double)rb->memory[k].step_peak_bytes;
            if (i >= na && ha) continue;
        }
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "category", name);
        add_num_or_null(row, "step_peak_a", ha, a);
        add_num_or_null(row, "step_peak_b", hb, b);
        add_num_or_null(row, "delta", ha && hb, b - a);
        cJSON_AddItemToArray(mem, row);
    }
    ls_receipt_free(ra);
    ls_receipt_free(rb);
}

/* ---- traces side by side ---------------------------------------------- */

typedef struct {
    uint8_t key[LS_DIGEST_SIZE]; /* sha256 of the target name (names may be long) */
    int64_t step, seq, line;
    char target[128];            /* for display */
    char sha[LS_DIGEST_HEX_SIZE];
} pend_digest;

typedef struct {
    ls_trace_step_metrics m;
    int64_t seq;
} pend_metrics;

typedef struct {
    const char *label; /* "A" or "B" */
    const char *dir;
    char rel[64], path[4096];
    ls_trace_reader *rd;
    const ls_trace_event *ev;
    int ended;
    pend_digest *pd;
    size_t npd;
    pend_metrics *pm;
    size_t npm;
    uint64_t dropped, unmatched_digests;
} side;

/* Structural fields of an event: what must agree between equivalent runs. */
static const char *const STRUCT_FIELDS[] = {"phase", "step",  "member", "layer",   "kind",   "dir",
                                            "ok",    "group", "gseq",   "op",      "red",    "count",
                                            "dtype", "purpose", "target", "n_params", "code", "steps",
                                            "events", "objective", "prefix_frozen", NULL};

static void describe_event(const ls_trace_event *ev, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%.64s", ev->ev);
    for (size_t i = 0; STRUCT_FIELDS[i] && n < cap; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(ev->json, STRUCT_FIELDS[i]);
        if (!v) continue;
        char t[96];
        if (cJSON_IsString(v)) snprintf(t, sizeof t, "%.64s", v->valuestring);
        else value_text(v, t, sizeof t);
        n += (size_t)snprintf(buf + n, cap - n, " %s=%s", STRUCT_FIELDS[i], t);
    }
}

static int events_equal(const ls_trace_event *a, const ls_trace_event *b) {
    if (a->seq != b->seq || strcmp(a->ev, b->ev) != 0) return 0;
    for (size_t i = 0; STRUCT_FIELDS[i]; i++)
        if (!value_equal(cJSON_GetObjectItemCaseSensitive(a->json, STRUCT_FIELDS[i]),
                         cJSON_GetObjectItemCaseSensitive(b->json, STRUCT_FIELDS[i])))
            return 0;
    return 1;
}

/* Fields that measure rather than record what ran: times, the resident set,
 * throughput.  They differ between two honest reruns; every other field of
 * an event is a value equivalent runs share (deny by default). */
static const char *const MEASURED[] = {"ts_ns", "wall_ns", "seconds", "rss_peak", "step_wall_s", "tokens_per_s",
                                       NULL};

static int measured(const char *k) {
    for (size_t i = 0; k && MEASURED[i]; i++)
        if (!strcmp(k, MEASURED[i])) return 1;
    return 0;
}

/* The first recorded value (dotted path into path) where two events of the
 * same structure differ, measurements left out; 0 when none does. */
static int values_diff(const ls_trace_event *a, const ls_trace_event *b, char *path, size_t cap, const cJSON **va,
                       const cJSON **vb) {
    for (const cJSON *x = a->json ? a->json->child : NULL; x; x = x->next) {
        if (measured(x->string)) continue;
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b->json, x->string);
        snprintf(path, cap, "%s", x->string);
        if (!y) {
            *va = x, *vb = NULL;
            return 1;
        }
        if (first_diff(x, y, path, cap, va, vb)) return 1;
    }
    for (const cJSON *y = b->json ? b->json->child : NULL; y; y = y->next)
        if (!measured(y->string) && !cJSON_GetObjectItemCaseSensitive(a->json, y->string)) {
            snprintf(path, cap, "%s", y->string);
            *va = NULL, *vb = y;
            return 1;
        }
    path[0] = 0;
    return 0;
}

static size_t error_diags(const ls_trace_report *rep) {
    size_t n = 0;
    for (int c = 0; c < LS_TRACE_DIAG_CODE_COUNT; c++)
        if (ls_trace_diag_is_error((ls_trace_diag_code)c)) n += (size_t)rep->counts[c];
    return n;
}

static const ls_trace_diag *first_error(const ls_trace_report *rep) {
    for (size_t i = 0; i < rep->n_diags; i++)
        if (ls_trace_diag_is_error(rep->diags[i].code)) return &rep->diags[i];
    return NULL;
}

/* One side of a trace divergence: the event there, or where the trace ends. */
static cJSON *side_json(const side *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", s->rel);
    if (s->ev) {
        char d[1024];
        describe_event(s->ev, d, sizeof d);
        cJSON_AddNumberToObject(o, "seq", (double)s->ev->seq);
        cJSON_AddNumberToObject(o, "line", (double)s->ev->line);
        cJSON_AddStringToObject(o, "event", d);
    } else {
        const ls_trace_report *rep = ls_trace_reader_report(s->rd);
        cJSON_AddStringToObject(o, "end", ls_trace_end_name(rep->end));
        cJSON_AddNumberToObject(o, "last_seq", (double)rep->last_seq);
        cJSON_AddNumberToObject(o, "line", (double)rep->n_lines);
        cJSON_AddNumberToObject(o, "byte_offset", (double)rep->file_bytes);
        cJSON_AddNumberToObject(o, "errors", (double)error_diags(rep));
        const ls_trace_diag *fe = first_error(rep);
        if (fe) cJSON_AddStringToObject(o, "problem", fe->message);
    }
    return o;
}

static void side_text(const side *s, char *buf, size_t cap) {
    if (s->ev) {
        char d[512];
        describe_event(s->ev, d, sizeof d);
        snprintf(buf, cap, "%s %s seq %" PRId64 " (line %" PRId64 "): %s", s->label, s->rel, s->ev->seq, s->ev->line,
                 d);
    } else {
        const ls_trace_report *rep = ls_trace_reader_report(s->rd);
        const ls_trace_diag *fe = first_error(rep);
        snprintf(buf, cap, "%s %s ends %s after seq %" PRId64 " (line %" PRId64 ", byte %" PRIu64 ")%s%.200s", s->label,
                 s->rel, ls_trace_end_name(rep->end), rep->last_seq, rep->n_lines, rep->file_bytes,
                 fe ? ": " : "", fe ? fe->message : "");
    }
}

typedef struct {
    cJSON *divs;
    cJSON *steps;             /* metric deltas per step */
    cJSON *maxabs;            /* name -> largest |B - A| */
    uint64_t steps_omitted;
    int metrics_rank;         /* -1: not chosen yet */
    cJSON *digest_div;        /* the lowest-step param digest divergence so far (owned) */
    cJSON *notes;
    int64_t digest_div_step;
    /* one read: per run (0 A, 1 B), the first trace whose bytes, as the comparison read them, are not the
       bytes its manifest digests ("" none): that run does not verify (the verification read them before) */
    char reread[2][700];
} walk_state;

static void metric(cJSON *list, cJSON *maxabs, const char *name, double a, double b) {
    double d = b - a;
    if (list) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", name);
        cJSON_AddNumberToObject(m, "a", a);
        cJSON_AddNumberToObject(m, "b", b);
        add_num_or_null(m, "delta", 1, d);
        cJSON_AddItemToArray(list, m);
    }
    if (!isfinite(d)) return;
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(maxabs, name);
    if (!cur) cJSON_AddNumberToObject(maxabs, name, fabs(d));
    else if (fabs(d) > cur->valuedouble) cJSON_SetNumberValue(cur, fabs(d));
}

static void metrics_pair(walk_state *w, const ls_trace_step_metrics *a, const ls_trace_step_metrics *b) {
    cJSON *list = NULL;
    if (cJSON_GetArraySize(w->steps) < (int)LS_AUDIT_DIFF_MAX_STEPS) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddNumberToObject(st, "step", (double)a->step);
        list = cJSON_AddArrayToObject(st, "metrics");
        cJSON_AddItemToArray(w->steps, st);
    } else {
        w->steps_omitted++;
    }
#define M(f) metric(list, w->maxabs, #f, a->f, b->f)
    M(reward_mean), M(reward_std), M(reward_min), M(reward_max);
    if (a->has_reward_parts && b->has_reward_parts) M(reward_retrieval), M(reward_format);
    M(adv_mean), M(adv_std), M(loss), M(loss_policy), M(loss_kl), M(kl_mean), M(clip_fraction);
    M(ratio_min), M(ratio_mean), M(ratio_max), M(response_len_mean);
    metric(list, w->maxabs, "tokens", (double)a->tokens, (double)b->tokens);
    M(grad_norm), M(lr);
#undef M
    for (int p = 0; p < LS_PHASE_COUNT; p++)
        if ((a->tokens_per_s_mask & b->tokens_per_s_mask) & (1u << p)) {
            char name[64];
            snprintf(name, sizeof name, "tokens_per_s.%s", ls_trace_phase_name((ls_trace_phase)p));
            metric(list, w->maxabs, name, a->tokens_per_s[p], b->tokens_per_s[p]);
        }
    metric(list, w->maxabs, "step_wall_s", a->step_wall_s, b->step_wall_s);
}

/* Matches s's current event (a param_digest or step_metrics) with o's
 * pending ones, or holds it. */
static ls_status keyed(walk_state *w, int rank, side *s, side *o, side *sa) {
    const ls_trace_event *ev = s->ev;
    if (ev->flags & LS_TRACE_EVF_FIELDS) return LS_OK;
    if (ev->kind == LS_TRACE_PARAM_DIGEST) {
        pend_digest p;
        memset(&p, 0, sizeof p);
        const char *target = cJSON_GetObjectItemCaseSensitive(ev->json, "target")->valuestring;
        ls_digest_sha256(target, strlen(target), p.key);
        ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev->json, "step"), &p.step);
        p.seq = ev->seq;
        p.line = ev->line;
        snprintf(p.target, sizeof p.target, "%s", target);
        snprintf(p.sha, sizeof p.sha, "%s", cJSON_GetObjectItemCaseSensitive(ev->json, "sha256")->valuestring);
        for (size_t i = 0; i < o->npd; i++) {
            pend_digest *q = &o->pd[i];
            if (q->step != p.step || memcmp(q->key, p.key, sizeof p.key)) continue;
            if (strcmp(q->sha, p.sha) && (!w->digest_div || p.step < w->digest_div_step)) {
                const pend_digest *pa = s == sa ? &p : q, *pb = s == sa ? q : &p;
                const side *A = s == sa ? s : o, *B = s == sa ? o : s;
                char line[1024];
                snprintf(line, sizeof line,
                         "rank %d step %" PRId64 " target %s: A %s seq %" PRId64 " sha256 %.12s..., B %s seq %" PRId64
                         " sha256 %.12s...",
                         rank, p.step, p.target, A->rel, pa->seq, pa->sha, B->rel, pb->seq, pb->sha);
                cJSON_Delete(w->digest_div); /* the earlier step wins; one kept */
                cJSON *d = cJSON_CreateObject();
                cJSON_AddStringToObject(d, "what", "param_digest");
                cJSON_AddNumberToObject(d, "rank", rank);
                cJSON_AddStringToObject(d, "detail", line);
                cJSON_AddNumberToObject(d, "step", (double)p.step);
                cJSON_AddStringToObject(d, "target", p.target);
                const pend_digest *pp[2] = {pa, pb};
                const side *ss[2] = {A, B};
                for (int k = 0; k < 2; k++) {
                    cJSON *x = cJSON_AddObjectToObject(d, k ? "b" : "a");
                    cJSON_AddStringToObject(x, "file", ss[k]->rel);
                    cJSON_AddNumberToObject(x, "seq", (double)pp[k]->seq);
                    cJSON_AddNumberToObject(x, "line", (double)pp[k]->line);
                    cJSON_AddStringToObject(x, "sha256", pp[k]->sha);
                }
                w->digest_div = d;
                w->digest_div_step = p.step;
            }
            memmove(q, q + 1, (o->npd - i - 1) * sizeof *q);
            o->npd--;
            return LS_OK;
        }
        if (s->npd == LS_AUDIT_DIFF_MAX_PENDING) { /* drop the oldest */
            memmove(s->pd, s->pd + 1, (s->npd - 1) * sizeof *s->pd);
            s->npd--;
            s->dropped++;
        }
        s->pd[s->npd++] = p;
        return LS_OK;
    }
    if (ev->kind == LS_TRACE_STEP_METRICS && (w->metrics_rank < 0 || w->metrics_rank == rank)) {
        w->metrics_rank = rank;
        pend_metrics p;
        if (ls_trace_decode_step_metrics(ev->json, &p.m) != LS_OK) return LS_OK;
        p.seq = ev->seq;
        for (size_t i = 0; i < o->npm; i++) {
            pend_metrics *q = &o->pm[i];
            if (q->m.step != p.m.step) continue;
            metrics_pair(w, s == sa ? &p.m : &q->m, s == sa ? &q->m : &p.m);
            memmove(q, q + 1, (o->npm - i - 1) * sizeof *q);
            o->npm--;
            return LS_OK;
        }
        if (s->npm == LS_AUDIT_DIFF_MAX_PENDING) {
            memmove(s->pm, s->pm + 1, (s->npm - 1) * sizeof *s->pm);
            s->npm--;
            s->dropped++;
        }
        s->pm[s->npm++] = p;
    }
    return LS_OK;
}

static ls_status side_open(side *s, const char *label, const run_info *ri, uint32_t rank, char *why, size_t why_len) {
    memset(s, 0, sizeof *s);
    s->label = label;
    s->dir = ri->dir;
    s->ended = 1;
    if (ls_receipt_rank_dir(rank, s->rel, sizeof s->rel) != LS_OK) return LS_ERR_ARG;
    ls_audit_trace_rel(ri->dir, rank, s->rel, sizeof s->rel);
    if ((int64_t)rank >= ri->world) {
        snprintf(why, why_len, "rank %u is beyond the world of %" PRId64, rank, ri->world);
        return LS_ERR_IO;
    }
    ls_status st = ls_audit_stat(ri->dir, s->rel, 0, NULL, why, why_len);
    if (st != LS_OK) return st;
    if (ls_audit_path(ri->dir, s->rel, s->path, sizeof s->path) != LS_OK) return LS_ERR_ARG;
    s->pd = malloc(LS_AUDIT_DIFF_MAX_PENDING * sizeof *s->pd);
    s->pm = malloc(LS_AUDIT_DIFF_MAX_PENDING * sizeof *s->pm);
    if (!s->pd || !s->pm) return LS_ERR_NOMEM;
    int fd = ls_audit_open(ri->dir, s->rel, 0, NULL, &st, why, why_len);
    if (fd < 0) return st;
    st = ls_trace_reader_open_fd(&s->rd, fd, s->path);
    if (st != LS_OK) return st;
    s->ended = 0;
    return LS_OK;
}

static void side_close(side *s) {
    ls_trace_reader_close(s->rd);
    free(s->pd);
    free(s->pm);
    s->rd = NULL, s->pd = NULL, s->pm = NULL;
}

static void trace_div(walk_state *w, const char *what, int rank, const side *a, const side *b, const char *lead) {
    char ta[1024], tb[1024], line[2304];
    side_text(a, ta, sizeof ta);
    side_text(b, tb, sizeof tb);
    snprintf(line, sizeof line, "rank %d: %s: %s; %s", rank, lead, ta, tb);
    cJSON *d = divergence(w->divs, what, rank, line);
    cJSON_AddItemToObject(d, "a", side_json(a));
    cJSON_AddItemToObject(d, "b", side_json(b));
}

/* Walks rank r's two traces in step.  LS_ERR_FORMAT (err set) when the rank
 * has a trace in neither run. */
static ls_status walk_rank(walk_state *w, const run_info *A, const run_info *B, uint32_t r, char *err,
                           size_t err_len) {
    side sa, sb;
    char wa[512] = "", wb[512] = "";
    ls_status oa = side_open(&sa, "A", A, r, wa, sizeof wa);
    ls_status ob = side_open(&sb, "B", B, r, wb, sizeof wb);
    ls_status st = LS_OK;
    if (oa == LS_ERR_NOMEM || ob == LS_ERR_NOMEM) {
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    if (oa != LS_OK && ob != LS_OK) {
        snprintf(err, err_len, "rank %u is traced in neither run: A %.200s: %.200s; B %.200s: %.200s", r, A->dir, wa,
                 B->dir, wb);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    if (oa != LS_OK || ob != LS_OK) {
        char line[1400];
        snprintf(line, sizeof line, "rank %u: only in %s: %s %s: %s", r, oa != LS_OK ? "B" : "A",
                 oa != LS_OK ? "A" : "B", oa != LS_OK ? sa.rel : sb.rel, oa != LS_OK ? wa : wb);
        cJSON *d = divergence(w->divs, "rank_missing", r, line);
        cJSON *x = cJSON_AddObjectToObject(d, oa != LS_OK ? "a" : "b");
        cJSON_AddStringToObject(x, "file", oa != LS_OK ? sa.rel : sb.rel);
        cJSON_AddStringToObject(x, "problem", oa != LS_OK ? wa : wb);
        goto cleanup;
    }
    int seq_div = 0, val_div = 0, first = 1;
    for (;;) {
        sa.ev = sb.ev = NULL;
        if (!sa.ended && (ls_trace_reader_next(sa.rd, &sa.ev) != LS_OK || !sa.ev)) sa.ended = 1, sa.ev = NULL;
        if (!sb.ended && (ls_trace_reader_next(sb.rd, &sb.ev) != LS_OK || !sb.ev)) sb.ended = 1, sb.ev = NULL;
        if (first) { /* the headers' groups: the communication structure */
            first = 0;
            const ls_trace_report *ra = ls_trace_reader_report(sa.rd), *rb = ls_trace_reader_report(sb.rd);
            if (ra->header_ok && rb->header_ok &&
                !value_equal(cJSON_GetObjectItemCaseSensitive(ra->header, "groups"),
                             cJSON_GetObjectItemCaseSensitive(rb->header, "groups"))) {
                char line[2400];
                snprintf(line, sizeof line, "rank %u: the trace headers' groups differ: A %s, B %s", r, sa.rel, sb.rel);
                cJSON *d = divergence(w->divs, "event_sequence", r, line);
                cJSON *x = cJSON_AddObjectToObject(d, "a"), *y = cJSON_AddObjectToObject(d, "b");
                cJSON_AddStringToObject(x, "file", sa.rel), cJSON_AddNumberToObject(x, "line", 1);
                cJSON_AddStringToObject(y, "file", sb.rel), cJSON_AddNumberToObject(y, "line", 1);
                seq_div = 1;
            }
        }
        if (!sa.ev && !sb.ev) break;
        if (!seq_div && (!sa.ev || !sb.ev || !events_equal(sa.ev, sb.ev))) {
            seq_div = 1;
            trace_div(w, "event_sequence", (int)r, &sa, &sb, "the event sequences diverge");
        } else if (!seq_div && !val_div) { /* the same event: the values it records (losses, rewards, norms) */
            char key[512];
            const cJSON *va = NULL, *vb = NULL;
            if (values_diff(sa.ev, sb.ev, key, sizeof key, &va, &vb)) {
                char ta[160], tb[160], lead[1024];
                value_text(va, ta, sizeof ta);
                value_text(vb, tb, sizeof tb);
                snprintf(lead, sizeof lead, "the recorded values differ at %s: A %s, B %s", key, ta, tb);
                trace_div(w, "event_values", (int)r, &sa, &sb, lead);
                cJSON *d = cJSON_GetArrayItem(w->divs, cJSON_GetArraySize(w->divs) - 1);
                cJSON_AddStringToObject(d, "key", key);
                cJSON_AddStringToObject(cJSON_GetObjectItem(d, "a"), "value", ta);
                cJSON_AddStringToObject(cJSON_GetObjectItem(d, "b"), "value", tb);
                val_div = 1;
            }
        }
        if (sa.ev && (st = keyed(w, (int)r, &sa, &sb, &sa)) != LS_OK) goto cleanup;
        if (sb.ev && (st = keyed(w, (int)r, &sb, &sa, &sa)) != LS_OK) goto cleanup;
    }
    /* the bytes compared are the bytes verified: each trace's digest as this walk read it (the rest read to
       the end) against its manifest's subject */
    const side *sides[2] = {&sa, &sb};
    const run_info *ris[2] = {A, B};
    for (int k = 0; k < 2; k++) {
        uint8_t d[32];
        const ls_manifest_subject *sub = NULL;
        for (size_t i = 0; ris[k]->man && i < ris[k]->man->n_subjects; i++)
            if (!strcmp(ris[k]->man->subjects[i].name, sides[k]->rel)) sub = &ris[k]->man->subjects[i];
        if (sub == NULL || w->reread[k][0]) continue; /* not digested: the verification names it */
        ls_status ds = ls_trace_reader_sha256(sides[k]->rd, d, NULL);
        if (ds == LS_ERR_NOMEM) {
            st = ds;
            goto cleanup;
        }
        char hex[LS_DIGEST_HEX_SIZE];
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
        if (ds != LS_OK)
            snprintf(w->reread[k], sizeof w->reread[k], "%s: the comparison could not read it to its end (%s)",
                     sides[k]->rel, ls_status_str(ds));
        else if (strcmp(hex, sub->sha256))
            snprintf(w->reread[k], sizeof w->reread[k], "%s: the bytes the comparison read have sha256 %s, the "
                     "manifest says %s (the file changed after its verification)", sides[k]->rel, hex, sub->sha256);
    }
    const ls_trace_report *ra = ls_trace_reader_report(sa.rd), *rb = ls_trace_reader_report(sb.rd);
    if (!seq_div && (ra->end != rb->end || error_diags(ra) != error_diags(rb)))
        trace_div(w, "trace_end", (int)r, &sa, &sb, "the same events, but the traces end differently");
    if (sa.npd || sb.npd || sa.dropped || sb.dropped) {
        char line[512];
        snprintf(line, sizeof line,
                 "rank %u: param digests without a counterpart: %zu only in A, %zu only in B; %" PRIu64
                 " unmatched records dropped (more than %u pending)",
                 r, sa.npd, sb.npd, sa.dropped + sb.dropped, LS_AUDIT_DIFF_MAX_PENDING);
        cJSON_AddItemToArray(w->notes, cJSON_CreateString(line));
    }
cleanup:
    side_close(&sa);
    side_close(&sb);
    return st;
}

/* ---- each run verified, as the audit verifies it ------------------------ */

/* Loads run dir with the audit's loader (audit/load/load.c: the manifest parsed,
 * every subject re-digested, every unlisted file named, the envelope
 * verified with the trusted keys) and states what it found in *out
 * (runs.X.verification of the document).  *verified: the manifest is
 * present and valid, every subject's digest matches with no file missing or
 * unlisted, and, when keys are given (or --require-signed), its envelope
 * verifies with one of them.  *why: the first problem, naming the file.
 * LS_OK or LS_ERR_NOMEM (an unusable run is reported unverified). */
static ls_status verify_run(const char *dir, const ls_audit_diff_options *opt, cJSON **out, int *verified, char *why,
                            size_t why_len) {
    *out = NULL;
    *verified = 0;
    why[0] = 0;
    ls_audit_options o;
    memset(&o, 0, sizeof o);
    o.run_dir = dir;
    size_t nk = opt && opt->keys ? opt->n_keys : 0;
    for (size_t k = 0; k < nk && k < LS_AUDIT_MAX_KEYS; k++) o.keys[o.n_keys++] = opt->keys[k];
    o.require_signed = opt && opt->require_signed;
    ls_audit_run *run = NULL;
    char e[1024] = "";
    ls_status st = ls_audit_load(&o, &run, e, sizeof e);
    if (st == LS_ERR_NOMEM) return st;
    cJSON *v = cJSON_CreateObject(), *problems = cJSON_CreateArray();
    if (!v || !problems) {
        cJSON_Delete(v);
        cJSON_Delete(problems);
        ls_audit_free(run);
        return LS_ERR_NOMEM;
    }
    size_t n = 0, omitted = 0;
#define PROBLEM(file_, fmt_, ...)                                                                  \
    do {                                                                                          \
        char p_[1200];                                                                            \
        snprintf(p_, sizeof p_, fmt_, __VA_ARGS__);                                               \
        if (!why[0]) snprintf(why, why_len, "%s: %s", file_, p_);                                 \
        if (n++ < 16) {                                                                           \
            cJSON *x_ = cJSON_CreateObject();                                                     \
            cJSON_AddStringToObject(x_, "file", file_);                                           \
            cJSON_AddStringToObject(x_, "problem", p_);                                           \
            cJSON_AddItemToArray(problems, x_);                                                   \
        } else {                                                                                  \
            omitted++;                                                                            \
        }                                                                                         \
    } while (0)
    const char *manifest = "missing", *signature = "not_checked";
    if (st != LS_OK) {
        manifest = "unusable";
        PROBLEM(".", "the run directory cannot be loaded: %.900s", e);
    } else {
        if (run->manifest != NULL) manifest = "valid";
        else if (run->manifest_present) manifest = "invalid";
        if (run->manifest == NULL)
            PROBLEM(LS_MANIFEST_FILE, "%.900s", run->manifest_present ? run->manifest_err : "missing: nothing "
                    "binds the run's files");
        for (size_t i = 0; i < run->verify.count; i++)
            PROBLEM(run->verify.items[i].name, "%s: %.900s", ls_verify_kind_name(run->verify.items[i].kind),
                    run->verify.items[i].detail);
        if (o.n_keys > 0) {
            signature = run->dsse_status == LS_OK ? "verified" : "unverified";
            if (run->dsse_status != LS_OK)
                PROBLEM(LS_MANIFEST_DSSE_FILE, "%.900s", run->dsse_present ? run->dsse_err
                        : "missing: the run is not signed, and --key asks for a signed run");
        } else if (o.require_signed) {
            signature = "no_key";
            PROBLEM(LS_MANIFEST_DSSE_FILE, "%s", "--require-signed: no --key given, so no signature of the run can "
                    "be trusted");
        }
    }
#undef PROBLEM
    *verified = n == 0 && st == LS_OK && run->manifest != NULL && run->verify_done;
    cJSON_AddBoolToObject(v, "verified", *verified);
    cJSON_AddStringToObject(v, "manifest", manifest);
    cJSON_AddNumberToObject(v, "subjects_checked", st == LS_OK ? (double)run->verify_checked : 0);
    cJSON_AddStringToObject(v, "signature", signature);
    if (st == LS_OK && run->dsse_status == LS_OK && run->dsse_keyid[0]) cJSON_AddStringToObject(v, "keyid", run->dsse_keyid);
    else cJSON_AddNullToObject(v, "keyid");
    cJSON_AddItemToObject(v, "problems", problems);
    cJSON_AddNumberToObject(v, "problems_omitted", (double)omitted);
    ls_audit_free(run);
    *out = v;
    return LS_OK;
}

/* ---- the comparison ---------------------------------------------------- */

static void run_json(cJSON *runs, const char *k, const run_info *ri, cJSON *verification) {
    cJSON *o = cJSON_AddObjectToObject(runs, k);
    cJSON_AddNumberToObject(o, "world", (double)ri->world);
    if (ri->build_digest) cJSON_AddStringToObject(o, "build_digest", ri->build_digest);
    else cJSON_AddNullToObject(o, "build_digest");
    cJSON_AddStringToObject(o, "source", ri->source);
    cJSON_AddItemToObject(o, "verification", verification);
}

ls_status ls_audit_diff_runs(const char *run_a, const char *run_b, const ls_audit_diff_options *opt, cJSON **doc,
                             int *verdict, char *err, size_t err_len) {
    if (!run_a || !run_b || !doc || !verdict || !err) return LS_ERR_ARG;
    *doc = NULL;
    *verdict = LS_AUDIT_DIFF_DIFFERENT;
    err[0] = 0;
    cJSON *ver[2] = {NULL, NULL};
    int verified[2] = {0, 0};
    char why[2][1400];
    run_info A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    walk_state w;
    memset(&w, 0, sizeof w);
    w.metrics_rank = -1;
    cJSON *d = cJSON_CreateObject(), *notes = cJSON_CreateArray(), *divs = cJSON_CreateArray();
    w.notes = notes;
    w.divs = cJSON_CreateArray();
    w.steps = cJSON_CreateArray();
    w.maxabs = cJSON_CreateObject();
    ls_status st = LS_ERR_NOMEM;
    if (!d || !notes || !divs || !w.divs || !w.steps || !w.maxabs) goto cleanup;
    if ((st = run_load(&A, run_a, "A", notes, err, err_len)) != LS_OK) goto cleanup;
    if ((st = run_load(&B, run_b, "B", notes, err, err_len)) != LS_OK) goto cleanup;
    /* both runs verified before anything is compared: two runs are equivalent only when both are bound by
       their manifests (and signatures, with keys) to the bytes compared */
    if ((st = verify_run(run_a, opt, &ver[0], &verified[0], why[0], sizeof why[0])) != LS_OK) goto cleanup;
    if ((st = verify_run(run_b, opt, &ver[1], &verified[1], why[1], sizeof why[1])) != LS_OK) goto cleanup;

    /* 1-3: configuration, build, world */
    if (A.config && B.config) diff_config(divs, &A, &B);
    else if (A.config || B.config) {
        char line[256];
        snprintf(line, sizeof line, "configuration known in %s only (no manifest or receipt in the other)",
                 A.config ? "A" : "B");
        divergence(divs, "config", -1, line);
    }
    if (A.build_digest && B.build_digest && strcmp(A.build_digest, B.build_digest)) {
        diff_build(divs, &A, &B);
    } else if (!A.build_digest != !B.build_digest) {
        divergence(divs, "build", -1, A.build_digest ? "build digest known in A only" : "build digest known in B only");
    }
    if (A.world != B.world) {
        char line[256];
        snprintf(line, sizeof line, "world size: A %" PRId64 " ranks (%s), B %" PRId64 " ranks (%s)", A.world, A.source,
                 B.world, B.source);
        cJSON *x = divergence(divs, "world", -1, line);
        cJSON_AddItemToObject(cJSON_AddObjectToObject(x, "a"), "value", cJSON_CreateNumber((double)A.world));
        cJSON_AddItemToObject(cJSON_AddObjectToObject(x, "b"), "value", cJSON_CreateNumber((double)B.world));
    }

    /* per rank: receipts, then the traces in step */
    int64_t nr = A.world < B.world ? A.world : B.world, nmax = A.world > B.world ? A.world : B.world;
    cJSON *ranks = cJSON_CreateArray(), *rdivs = cJSON_CreateArray();
    cJSON_AddItemToObject(d, "ranks", ranks); /* placed in order below */
    cJSON_AddItemToObject(d, "receipt_divergences", rdivs); /* idem: appended after the traces' */
    for (int64_t r = 0; r < nmax; r++) rank_receipts(ranks, rdivs, &A, &B, (uint32_t)r);
    for (int64_t r = 0; r < nr; r++)
        if ((st = walk_rank(&w, &A, &B, (uint32_t)r, err, err_len)) != LS_OK) goto cleanup;
    if (w.digest_div) cJSON_AddItemToArray(divs, w.digest_div), w.digest_div = NULL;
    while (cJSON_GetArraySize(w.divs) > 0) cJSON_AddItemToArray(divs, cJSON_DetachItemFromArray(w.divs, 0));
    while (cJSON_GetArraySize(rdivs) > 0) cJSON_AddItemToArray(divs, cJSON_DetachItemFromArray(rdivs, 0));
    cJSON_DeleteItemFromObject(d, "receipt_divergences");
    for (int k = 0; k < 2; k++) /* a trace that changed between its verification and the comparison */
        if (w.reread[k][0] && ver[k] != NULL) {
            cJSON_ReplaceItemInObject(ver[k], "verified", cJSON_CreateFalse());
            cJSON *pr = cJSON_GetObjectItem(ver[k], "problems"), *x = cJSON_CreateObject();
            char *colon = strstr(w.reread[k], ": ");
            if (colon) *colon = 0;
            cJSON_AddStringToObject(x, "file", w.reread[k]);
            cJSON_AddStringToObject(x, "problem", colon ? colon + 2 : "changed after its verification");
            if (cJSON_GetArraySize(pr) < 16) cJSON_AddItemToArray(pr, x);
            else cJSON_Delete(x);
            if (colon) *colon = ':';
            if (verified[k]) snprintf(why[k], sizeof why[k], "%s", w.reread[k]);
            verified[k] = 0;
        }

    /* the document, in a fixed key order */
    cJSON_DetachItemFromObject(d, "ranks");
    cJSON_AddStringToObject(d, "schema", LS_AUDIT_DIFF_SCHEMA);
    cJSON_AddStringToObject(d, "run_a", run_a);
    cJSON_AddStringToObject(d, "run_b", run_b);
    /* a run that does not verify: no verdict about equivalence (its files may be anyone's) */
    *verdict = !verified[0] || !verified[1]    ? LS_AUDIT_DIFF_UNVERIFIED
               : cJSON_GetArraySize(divs) == 0 ? LS_AUDIT_DIFF_EQUIVALENT
                                               : LS_AUDIT_DIFF_DIFFERENT;
    cJSON_AddStringToObject(d, "verdict", *verdict == LS_AUDIT_DIFF_EQUIVALENT   ? "equivalent"
                                          : *verdict == LS_AUDIT_DIFF_DIFFERENT ? "different"
                                                                                : "unverified");
    cJSON_AddBoolToObject(d, "equivalent", *verdict == LS_AUDIT_DIFF_EQUIVALENT);
    if (*verdict == LS_AUDIT_DIFF_UNVERIFIED) {
        char line[3000];
        snprintf(line, sizeof line, "%s%s%s%s%s%s%s%s", !verified[0] ? "run A (" : "", !verified[0] ? run_a : "",
                 !verified[0] ? ") does not verify: " : "", !verified[0] ? why[0] : "",
                 !verified[0] && !verified[1] ? "; " : "", !verified[1] ? "run B (" : "", !verified[1] ? run_b : "",
                 !verified[1] ? ") does not verify: " : "");
        size_t l = strlen(line);
        if (!verified[1]) snprintf(line + l, sizeof line - l, "%s", why[1]);
        cJSON_AddStringToObject(d, "unverified", line);
    } else {
        cJSON_AddNullToObject(d, "unverified");
    }
    cJSON *runs = cJSON_AddObjectToObject(d, "runs");
    run_json(runs, "a", &A, ver[0]), ver[0] = NULL;
    run_json(runs, "b", &B, ver[1]), ver[1] = NULL;
    cJSON *first = cJSON_GetArrayItem(divs, 0);
    cJSON_AddItemToObject(d, "first_divergence", first ? cJSON_Duplicate(first, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(d, "divergences", divs), divs = NULL;
    cJSON_AddItemToObject(d, "ranks", ranks);
    if (w.metrics_rank >= 0) cJSON_AddNumberToObject(d, "metrics_rank", w.metrics_rank);
    else cJSON_AddNullToObject(d, "metrics_rank");
    cJSON_AddItemToObject(d, "steps", w.steps), w.steps = NULL;
    cJSON_AddNumberToObject(d, "steps_omitted", (double)w.steps_omitted);
    cJSON_AddItemToObject(d, "metric_max_abs_delta", w.maxabs), w.maxabs = NULL;
    cJSON_AddItemToObject(d, "notes", notes), notes = NULL;
    *doc = d, d = NULL;
    st = LS_OK;
cleanup:
    if (st == LS_ERR_NOMEM && !err[0]) snprintf(err, err_len, "out of memory");
    cJSON_Delete(d);
    cJSON_Delete(notes);
    cJSON_Delete(divs);
    cJSON_Delete(w.divs);
    cJSON_Delete(w.steps);
    cJSON_Delete(w.maxabs);
    cJSON_Delete(w.digest_div);
    cJSON_Delete(ver[0]);
    cJSON_Delete(ver[1]);
    run_free(&A);
    run_free(&B);
    return st;
}
