/* timeline.c - a run as Chrome trace-event JSON (contract in timeline.h). */
#include "audit/load/timeline.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "audit/model/run_files.h"
#include "receipts/format/digest.h"
#include "receipts/reading/trace_reader.h"

#define MAX_GROUPS 64     /* header groups kept per rank (flows of others are not drawn) */
#define MAX_OPEN 16       /* phase_begin events awaiting their phase_end */
#define MAX_NOTES 64      /* notes kept for otherData (all are instant events) */
#define NAME_MAX_LEN 128  /* longest phase / group name kept */
#define ARGS_DEPTH 6      /* nesting of an event's fields copied into args */

/* ---- the output stream: OUT.tmp.<pid>, renamed over OUT at the end ---- */

typedef struct {
    FILE *f;
    char tmp[4200];
    bool failed;
    bool first; /* no event written yet */
} out_stream;

static void out_raw(out_stream *o, const char *s) {
    if (!o->failed && fputs(s, o->f) == EOF) o->failed = true;
}

static void out_fmt(out_stream *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_fmt(out_stream *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!o->failed && vfprintf(o->f, fmt, ap) < 0) o->failed = true;
    va_end(ap);
}

/* A JSON string: quotes, backslash and control characters escaped; a byte
 * that does not start valid UTF-8 becomes U+FFFD. */
static void out_jstr(out_stream *o, const char *s) {
    if (o->failed) return;
    FILE *f = o->f;
    putc('"', f);
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            putc('\\', f);
            putc(c, f);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            putc(c, f);
            i++;
        } else {
            size_t k = ls_trace_utf8_len(p + i, n - i);
            if (k == 0) {
                fputs("\\ufffd", f);
                i++;
            } else {
                fwrite(p + i, 1, k, f);
                i += k;
            }
        }
    }
    if (putc('"', f) == EOF) o->failed = true;
}

/* ns as microseconds with three decimals (exact, no floating point). */
static void out_us(out_stream *o, int64_t ns) {
    const char *sign = ns < 0 ? "-" : "";
    uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    out_fmt(o, "%s%llu.%03llu", sign, (unsigned long long)(a / 1000), (unsigned long long)(a % 1000));
}

/* A JSON value copied from an event (strings re-escaped, numbers as
 * integers when integral, depth capped). */
static void out_json(out_stream *o, const cJSON *v, int depth) {
    if (cJSON_IsString(v)) {
        out_jstr(o, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        int64_t i;
        if (ls_trace_json_int(v, &i)) out_fmt(o, "%lld", (long long)i);
        else if (isfinite(v->valuedouble)) out_fmt(o, "%.17g", v->valuedouble);
        else out_raw(o, "null");
    } else if (cJSON_IsBool(v)) {
        out_raw(o, cJSON_IsTrue(v) ? "true" : "false");
    } else if ((cJSON_IsObject(v) || cJSON_IsArray(v)) && depth < ARGS_DEPTH) {
        bool obj = cJSON_IsObject(v);
        out_raw(o, obj ? "{" : "[");
        int k = 0;
        for (const cJSON *c = v->child; c; c = c->next, k++) {
            if (k) out_raw(o, ",");
            if (obj) {
                out_jstr(o, c->string);
                out_raw(o, ":");
            }
            out_json(o, c, depth + 1);
        }
        out_raw(o, obj ? "}" : "]");
    } else {
        out_raw(o, "null");
    }
}

/* "args":{"seq":N, ...the event's fields but the envelope} */
static void out_args(out_stream *o, const ls_trace_event *ev, const char *extra) {
    out_fmt(o, ",\"args\":{\"seq\":%lld", (long long)ev->seq);
    for (const cJSON *c = ev->json ? ev->json->child : NULL; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        if (!strcmp(k, "v") || !strcmp(k, "rank") || !strcmp(k, "seq") || !strcmp(k, "ts_ns") ||
            !strcmp(k, "ev"))
            continue;
        out_raw(o, ",");
        out_jstr(o, k);
        out_raw(o, ":");
        out_json(o, c, 1);
    }
    if (extra) out_raw(o, extra);
    out_raw(o, "}");
}

/* Starts one element of traceEvents: {"ph":PH,"pid":P,"tid":T */
static void out_begin(out_stream *o, const char *ph, int64_t pid, int tid) {
    out_raw(o, o->first ? "\n" : ",\n");
    o->first = false;
    out_fmt(o, "{\"ph\":\"%s\",\"pid\":%lld,\"tid\":%d", ph, (long long)pid, tid);
}

static int fsync_dir_of(const char *path) {
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    if (r != 0 && (errno == EINVAL || errno == EROFS)) r = 0;
    close(fd);
    return r;
}

static int out_open(out_stream *o, const char *path, char *err, size_t err_len) {
    memset(o, 0, sizeof *o);
    o->first = true;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof o->tmp) {
        snprintf(err, err_len, "%.200s: output path too long", path);
        return -1;
    }
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
        snprintf(err, err_len, "%.200s: cannot create %.200s: %s", path, o->tmp, strerror(errno));
        if (fd >= 0) close(fd);
        unlink(o->tmp);
        return -1;
    }
    return 0;
}

/* Flushes, syncs and renames; on any failure removes the temporary file. */
static int out_close(out_stream *o, const char *path, bool keep, char *err, size_t err_len) {
    if (!o->f) return -1;
    int ok = keep && !o->failed && fflush(o->f) == 0 && fsync(fileno(o->f)) == 0;
    int e = errno;
    if (fclose(o->f) != 0) ok = 0;
    o->f = NULL;
    if (ok && rename(o->tmp, path) != 0) {
        e = errno;
        ok = 0;
    }
    if (!ok) {
        unlink(o->tmp);
        if (keep) snprintf(err, err_len, "%.200s: write failed: %s", path, strerror(e));
        return -1;
    }
    if (fsync_dir_of(path) != 0) {
        snprintf(err, err_len, "%.200s: fsync of its directory failed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the run's ranks ---- */

/* The manifest's world; 0 when it has none.  With reads, bytes other than
 * those the audit judged set *changed (and why). */
static int64_t manifest_world(const char *run_dir, const ls_audit_reads *reads, bool *changed, char *why,
                              size_t why_len) {
    char *text = NULL;
    size_t len = 0;
    int64_t w = 0;
    if (ls_audit_read(run_dir, "manifest.json", LS_AUDIT_MAX_JSON_FILE, &text, &len, why, why_len) != LS_OK)
        return 0;
    uint8_t sha[32];
    if (reads != NULL && (ls_digest_sha256(text, len, sha) != LS_OK ||
                          ls_audit_reads_same(reads, "manifest.json", sha, why, why_len) != LS_OK)) {
        *changed = true;
        free(text);
        return 0;
    }
    cJSON *m = cJSON_ParseWithLength(text, len);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "predicate");
    if (!ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(p, "world"), &w) || w < 1 || w > LS_AUDIT_MAX_WORLD) {
        snprintf(why, why_len, "manifest.json: no usable predicate.world");
        w = 0;
    }
    cJSON_Delete(m);
    free(text);
    return w;
}

ls_status ls_audit_timeline_world(const char *run_dir, int64_t *world, char *note, size_t note_len, char *err,
                                  size_t err_len) {
    return ls_audit_timeline_world_read(run_dir, NULL, world, note, note_len, err, err_len);
}

ls_status ls_audit_timeline_world_read(const char *run_dir, const ls_audit_reads *reads, int64_t *world, char *note,
                                       size_t note_len, char *err, size_t err_len) {
    if (note && note_len) note[0] = 0;
    *world = 0;
    struct stat st;
    if (!run_dir || lstat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "%.200s: the run directory is not a directory", run_dir ? run_dir : "(null)");
        return LS_ERR_IO;
    }
    char why[512] = "";
    bool changed = false;
    int64_t mw = manifest_world(run_dir, reads, &changed, why, sizeof why);
    if (changed) {
        snprintf(err, err_len, "%s", why);
        return LS_ERR_FORMAT;
    }
    int64_t dw = 0;
    DIR *d = opendir(run_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            const char *n = e->d_name;
            if (strncmp(n, "rank-", 5) != 0) continue;
            size_t k = strlen(n + 5);
            if (k < 4 || k > 5 || strspn(n + 5, "0123456789") != k) continue;
            long r = strtol(n + 5, NULL, 10);
            if (r < LS_AUDIT_MAX_WORLD && r + 1 > dw) dw = r + 1;
        }
        closedir(d);
    }
    *world = mw > dw ? mw : dw;
    if (*world == 0) {
        snprintf(err, err_len, "%.200s: no rank: %s and no rank-NNNN directory", run_dir,
                 why[0] ? why : "no manifest world");
        return LS_ERR_FORMAT;
    }
    if (note && mw == 0) snprintf(note, note_len, "%s; ranks taken from the rank-NNNN directories", why);
    else if (note && dw > mw)
        snprintf(note, note_len, "rank-%04lld exists beyond the manifest's world of %lld", (long long)(dw - 1),
                 (long long)mw);
    return LS_OK;
}

void ls_audit_trace_rel(const char *run_dir, int64_t rank, char *rel, size_t cap) {
    char why[64];
    snprintf(rel, cap, "rank-%04lld/events.jsonl", (long long)rank);
    bool plain_only = ls_audit_stat(run_dir, rel, 0, NULL, why, sizeof why) == LS_OK;
    snprintf(rel, cap, "rank-%04lld/events.jsonl.zst", (long long)rank);
    if (plain_only && ls_audit_stat(run_dir, rel, 0, NULL, why, sizeof why) != LS_OK)
        snprintf(rel, cap, "rank-%04lld/events.jsonl", (long long)rank);
}

ls_status ls_audit_timeline_trace_path(const char *run_dir, int64_t rank, char *path, size_t cap, char *err,
                                       size_t err_len) {
    char rel[64];
    ls_audit_trace_rel(run_dir, rank, rel, sizeof rel);
    ls_status s = ls_audit_stat(run_dir, rel, 0, NULL, err, err_len);
    if (s != LS_OK) return s;
    if (ls_audit_path(run_dir, rel, path, cap) != LS_OK) {
        snprintf(err, err_len, "%s: path too long", rel);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

ls_status ls_audit_trace_same(const ls_audit_reads *reads, ls_trace_reader *r, char *err, size_t err_len) {
    if (reads == NULL) return LS_OK;
    uint8_t sha[32];
    const char *rel = ls_trace_reader_report(r)->path;
    if (ls_trace_reader_sha256(r, sha, NULL) != LS_OK) {
        snprintf(err, err_len, "%.200s: its bytes could not be read again to the end: refused", rel);
        return LS_ERR_FORMAT;
    }
    return ls_audit_reads_same(reads, rel, sha, err, err_len);
}

ls_status ls_audit_timeline_trace_open(const char *run_dir, int64_t rank, ls_trace_reader **out, char *err,
                                       size_t err_len) {
    char rel[64];
    *out = NULL;
    ls_audit_trace_rel(run_dir, rank, rel, sizeof rel);
    ls_status s = LS_OK;
    int fd = ls_audit_open(run_dir, rel, 0, NULL, &s, err, err_len);
    if (fd < 0) return s;
    s = ls_trace_reader_open_fd(out, fd, rel);
    if (s != LS_OK) snprintf(err, err_len, "%s: out of memory", rel);
    return s;
}

/* ---- per rank ---- */

typedef struct {
    char name[NAME_MAX_LEN];
    int64_t lo, hi; /* lowest and highest member */
    bool member;    /* this rank is one */
} group_info;

typedef struct {
    char phase[NAME_MAX_LEN];
    int64_t step, ts;
} open_phase;

typedef struct {
    out_stream *o;
    int64_t rank, offset; /* offset: this rank's start minus the run's base, ns */
    int64_t last_ts;      /* aligned time of the last event */
    group_info groups[MAX_GROUPS];
    size_t n_groups;
    bool groups_read;
    open_phase open[MAX_OPEN];
    size_t n_open;
    int64_t events;
} rank_state;

typedef struct {
    char text[MAX_NOTES][256];
    size_t n;
    uint64_t total;
} note_list;

static void note(out_stream *o, note_list *nl, int64_t pid, int64_t ts, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void note(out_stream *o, note_list *nl, int64_t pid, int64_t ts, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (nl->n < MAX_NOTES) snprintf(nl->text[nl->n++], sizeof nl->text[0], "%s", buf);
    nl->total++;
    char name[300];
    snprintf(name, sizeof name, "note: %s", buf);
    out_begin(o, "i", pid, 0);
    out_raw(o, ",\"s\":\"g\",\"cat\":\"note\",\"name\":");
    out_jstr(o, name);
    out_raw(o, ",\"ts\":");
    out_us(o, ts);
    out_raw(o, "}");
}

static const char *jstr(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jint(const cJSON *obj, const char *key, int64_t dflt) {
    int64_t v;
    return ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(obj, key), &v) ? v : dflt;
}

/* Groups of the header: name, lowest and highest member, whether this rank
 * is one. */
static void read_groups(rank_state *s, const cJSON *header) {
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(header, "groups");
    const cJSON *g;
    cJSON_ArrayForEach(g, gs) {
        const char *name = jstr(g, "name");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(g, "members");
        if (!name || strlen(name) >= NAME_MAX_LEN || !cJSON_IsArray(ms) || s->n_groups >= MAX_GROUPS) continue;
        group_info *gi = &s->groups[s->n_groups];
        gi->lo = INT64_MAX;
        gi->hi = -1;
        gi->member = false;
        const cJSON *m;
        cJSON_ArrayForEach(m, ms) {
            int64_t r;
            if (!ls_trace_json_int(m, &r) || r < 0) continue;
            if (r < gi->lo) gi->lo = r;
            if (r > gi->hi) gi->hi = r;
            if (r == s->rank) gi->member = true;
        }
        if (gi->hi < 0) continue;
        snprintf(gi->name, sizeof gi->name, "%s", name);
        s->n_groups++;
    }
}

/* A flow id from (group, gseq): 20 bits of the name's FNV-1a hash above
 * 33 bits of gseq, so it stays an exact JSON integer. */
static uint64_t flow_id(const char *group, int64_t gseq) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)group; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return ((h ^ (h >> 32)) & 0xFFFFFull) << 33 | ((uint64_t)gseq & ((1ull << 33) - 1));
}

static void emit_slice(rank_state *s, const ls_trace_event *ev, int tid, const char *cat, const char *name,
                       int64_t ts, int64_t dur, const char *extra) {
    out_stream *o = s->o;
    out_begin(o, "X", s->rank, tid);
    out_fmt(o, ",\"cat\":\"%s\",\"name\":", cat);
    out_jstr(o, name);
    out_raw(o, ",\"ts\":");
    out_us(o, ts);
    out_raw(o, ",\"dur\":");
    out_us(o, dur < 0 ? 0 : dur);
    if (ev) out_args(o, ev, extra);
    else if (extra) out_fmt(o, ",\"args\":{%s}", extra + 1); /* extra starts with ',' */
    out_raw(o, "}");
}

static void on_phase_end(rank_state *s, const ls_trace_event *ev, int64_t ts) {
    const char *phase = jstr(ev->json, "phase");
    int64_t step = jint(ev->json, "step", -1);
    int64_t start = ts - jint(ev->json, "wall_ns", 0);
    for (size_t i = s->n_open; i-- > 0;) {
        if (phase && s->open[i].step == step && !strcmp(s->open[i].phase, phase)) {
            start = s->open[i].ts;
            memmove(&s->open[i], &s->open[i + 1], (s->n_open - i - 1) * sizeof s->open[0]);
            s->n_open--;
            break;
        }
    }
    emit_slice(s, ev, 0, "phase", phase ? phase : "phase", start, ts - start, NULL);
}

static void on_collective(rank_state *s, const ls_trace_event *ev, int64_t ts) {
    const cJSON *j = ev->json;
    const char *purpose = jstr(j, "purpose"), *group = jstr(j, "group");
    emit_slice(s, ev, 3, "collective", purpose ? purpose : (jstr(j, "op") ? jstr(j, "op") : "collective"), ts, 1,
               NULL);
    int64_t gseq = jint(j, "gseq", -1);
    if (!group || gseq < 0) return;
    const char *op = jstr(j, "op");
    if (op && (!strcmp(op, "send") || !strcmp(op, "recv"))) { /* v2: the gseq of its channel, a flow send -> recv */
        bool send = !strcmp(op, "send");
        int64_t peer = jint(j, "peer", -1), tag = jint(j, "tag", 0);
        if (peer < 0 || peer == s->rank || tag < 0) return;
        char chan[160];
        snprintf(chan, sizeof chan, "%s/%lld>%lld/%lld", group, (long long)(send ? s->rank : peer),
                 (long long)(send ? peer : s->rank), (long long)tag);
        out_begin(s->o, send ? "s" : "f", s->rank, 3);
        out_fmt(s->o, ",\"cat\":\"p2p\",\"name\":\"p2p\",\"id\":%llu,\"bp\":\"e\",\"ts\":",
                (unsigned long long)flow_id(chan, gseq));
        out_us(s->o, ts);
        out_raw(s->o, "}");
        return;
    }
    for (size_t i = 0; i < s->n_groups; i++) {
        const group_info *g = &s->groups[i];
        if (strcmp(g->name, group) != 0) continue;
        if (!g->member || g->lo == g->hi) return;
        const char *ph = s->rank == g->lo ? "s" : s->rank == g->hi ? "f" : "t";
        out_begin(s->o, ph, s->rank, 3);
        out_fmt(s->o, ",\"cat\":\"collective\",\"name\":\"collective\",\"id\":%llu,\"bp\":\"e\",\"ts\":",
                (unsigned long long)flow_id(group, gseq));
        out_us(s->o, ts);
        out_raw(s->o, "}");
        return;
    }
}

static void counter(rank_state *s, const char *name, int64_t ts, int64_t live) {
    out_begin(s->o, "C", s->rank, 0);
    out_raw(s->o, ",\"cat\":\"memory\",\"name\":");
    out_jstr(s->o, name);
    out_raw(s->o, ",\"ts\":");
    out_us(s->o, ts);
    out_fmt(s->o, ",\"args\":{\"live\":%lld}}", (long long)live);
}

static void on_memory(rank_state *s, const ls_trace_event *ev, int64_t ts) {
    counter(s, "memory total", ts, jint(ev->json, "total_live", 0));
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(ev->json, "categories");
    const cJSON *c;
    cJSON_ArrayForEach(c, cats) { /* {name: {live, peak}} as written; [{name, live, peak}] accepted too */
        const char *name = cJSON_IsArray(cats) ? jstr(c, "name") : c->string;
        if (!name) continue;
        char label[NAME_MAX_LEN + 16];
        snprintf(label, sizeof label, "memory %.*s", NAME_MAX_LEN - 1, name);
        counter(s, label, ts, jint(c, "live", 0));
    }
}

static int on_event(const ls_trace_event *ev, void *user) {
    rank_state *s = user;
    int64_t ts = s->offset + ev->ts_ns;
    s->last_ts = ts;
    s->events++;
    const char *ev_name = ev->ev ? ev->ev : "event";
    switch (ev->kind) {
    case LS_TRACE_PHASE_BEGIN: {
        const char *phase = jstr(ev->json, "phase");
        if (s->n_open < MAX_OPEN && phase && strlen(phase) < NAME_MAX_LEN) {
            open_phase *p = &s->open[s->n_open++];
            snprintf(p->phase, sizeof p->phase, "%s", phase);
            p->step = jint(ev->json, "step", -1);
            p->ts = ts;
        }
        break;
    }
    case LS_TRACE_PHASE_END: on_phase_end(s, ev, ts); break;
    case LS_TRACE_LAYER_END: {
        const char *kind = jstr(ev->json, "kind"), *dir = jstr(ev->json, "dir");
        char name[96];
        snprintf(name, sizeof name, "layer %lld %.32s", (long long)jint(ev->json, "layer", -1),
                 kind ? kind : "?");
        int64_t wall = jint(ev->json, "wall_ns", 0);
        emit_slice(s, ev, dir && !strcmp(dir, "bwd") ? 2 : 1, "layer", name, ts - wall, wall, NULL);
        break;
    }
    case LS_TRACE_COLLECTIVE: on_collective(s, ev, ts); break;
    case LS_TRACE_MEMORY: on_memory(s, ev, ts); break;
    default:
        out_begin(s->o, "i", s->rank, 0);
        out_fmt(s->o, ",\"s\":\"%s\",\"cat\":\"event\",\"name\":", ev->kind == LS_TRACE_ERROR ? "p" : "t");
        out_jstr(s->o, ev_name);
        out_raw(s->o, ",\"ts\":");
        out_us(s->o, ts);
        out_args(s->o, ev, NULL);
        out_raw(s->o, "}");
        break;
    }
    return s->o->failed; /* stop reading when the output failed */
}

static void out_meta(out_stream *o, int64_t pid, int tid, const char *what, const char *name) {
    out_begin(o, "M", pid, tid);
    out_fmt(o, ",\"name\":\"%s\",\"args\":{\"name\":", what);
    out_jstr(o, name);
    out_raw(o, "}}");
}

/* Header start_unix_ns of rank's trace (first line only); false when it
 * has none. */
static bool rank_start(const char *run_dir, const ls_audit_reads *reads, int64_t rank, int64_t *start,
                       int64_t *world_hdr, bool *changed, char *why, size_t why_len) {
    ls_trace_reader *r = NULL;
    if (ls_audit_timeline_trace_open(run_dir, rank, &r, why, why_len) != LS_OK) return false;
    const ls_trace_event *ev = NULL;
    ls_trace_reader_next(r, &ev);
    const ls_trace_report *rep = ls_trace_reader_report(r);
    bool ok = false;
    const cJSON *v = rep->header_ok ? cJSON_GetObjectItemCaseSensitive(rep->header, "start_unix_ns") : NULL;
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 && v->valuedouble < 9.0e18) {
        *start = (int64_t)v->valuedouble;
        ok = true;
    }
    *world_hdr = rep->header_ok ? rep->world : -1;
    if (ls_audit_trace_same(reads, r, why, why_len) != LS_OK) *changed = true;
    ls_trace_reader_close(r);
    return ok;
}

/* One rank's events; the number delivered, or -1 when the rank was
 * skipped (missing or refused). */
static int64_t write_rank(out_stream *o, note_list *nl, const char *run_dir, const ls_audit_reads *reads,
                          bool *changed, char *changed_why, size_t changed_len, int64_t rank, int64_t offset,
                          const char **run_id_out, char *run_id, size_t run_id_cap) {
    char path[4200], why[512];
    if (ls_audit_timeline_trace_path(run_dir, rank, path, sizeof path, why, sizeof why) != LS_OK) {
        note(o, nl, rank, 0, "rank %lld skipped: %s", (long long)rank, why);
        return -1;
    }
    rank_state *s = calloc(1, sizeof *s);
    if (!s) {
        note(o, nl, rank, 0, "rank %lld skipped: out of memory", (long long)rank);
        return -1;
    }
    s->o = o;
    s->rank = rank;
    s->offset = offset;
    s->last_ts = offset;
    char label[64];
    snprintf(label, sizeof label, "rank %lld", (long long)rank);
    out_meta(o, rank, 0, "process_name", label);
    out_begin(o, "M", rank, 0);
    out_fmt(o, ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%lld}}", (long long)rank);
    static const char *threads[4] = {"phases", "layers fwd", "layers bwd", "collectives"};
    for (int t = 0; t < 4; t++) out_meta(o, rank, t, "thread_name", threads[t]);

    ls_trace_reader *r = NULL;
    int64_t n = -1;
    if (ls_audit_timeline_trace_open(run_dir, rank, &r, why, sizeof why) != LS_OK) {
        note(o, nl, rank, offset, "rank %lld skipped: %s", (long long)rank, why);
        goto cleanup;
    }
    for (;;) {
        const ls_trace_event *ev = NULL;
        ls_status st = ls_trace_reader_next(r, &ev);
        if (!s->groups_read) {
            const ls_trace_report *rep = ls_trace_reader_report(r);
            if (rep->header) {
                read_groups(s, rep->header);
                const char *id = jstr(rep->header, "run_id");
                if (id && !*run_id_out) {
                    snprintf(run_id, run_id_cap, "%s", id);
                    *run_id_out = run_id;
                }
            }
            s->groups_read = true;
        }
        if (st != LS_OK || !ev) break;
        if (on_event(ev, s)) {
            ls_trace_reader_stop(r);
            break;
        }
    }
    for (size_t i = 0; i < s->n_open; i++) { /* phases never closed: crashed or truncated there */
        char name[NAME_MAX_LEN + 16];
        snprintf(name, sizeof name, "%s (unfinished)", s->open[i].phase);
        char extra[64];
        snprintf(extra, sizeof extra, ",\"unfinished\":true,\"step\":%lld", (long long)s->open[i].step);
        emit_slice(s, NULL, 0, "phase", name, s->open[i].ts, s->last_ts - s->open[i].ts, extra);
    }
    const ls_trace_report *rep = ls_trace_reader_report(r);
    if (rep->end != LS_TRACE_END_CLEAN && rep->end != LS_TRACE_END_STOPPED) {
        const char *first = rep->n_diags ? rep->diags[0].message : "";
        note(o, nl, rank, s->last_ts, "rank %lld: trace %s after %lld event(s); the timeline shows the readable "
             "prefix%s%.120s", (long long)rank, ls_trace_end_name(rep->end), (long long)rep->n_events,
             first[0] ? ": " : "", first);
    } else if (ls_trace_report_status(rep) != LS_OK) {
        note(o, nl, rank, s->last_ts, "rank %lld: %llu problem(s) in its trace: %.150s", (long long)rank,
             (unsigned long long)(rep->n_diags + rep->n_diags_dropped), rep->n_diags ? rep->diags[0].message : "");
    }
    if (!rep->header_ok) note(o, nl, rank, s->last_ts, "rank %lld: no valid header line; its times are not aligned",
                              (long long)rank);
    n = s->events;
    if (ls_audit_trace_same(reads, r, changed_why, changed_len) != LS_OK) *changed = true;
cleanup:
    ls_trace_reader_close(r);
    free(s);
    return n;
}

int ls_audit_timeline_write(const char *run_dir, const char *out_path, char *err, size_t err_len) {
    return ls_audit_timeline_write_verdict(run_dir, out_path, NULL, NULL, err, err_len);
}

int ls_audit_drawing_args(const char *what, const char *run_dir, const char *out_path, char **err, size_t *err_len,
                          char *scratch, size_t scratch_len) {
    if (!*err || !*err_len) {
        *err = scratch;
        *err_len = scratch_len;
    }
    (*err)[0] = 0;
    if (!run_dir || !out_path) {
        snprintf(*err, *err_len, "%s: run directory and output path are required", what);
        return 2;
    }
    return 0;
}

int ls_audit_timeline_write_verdict(const char *run_dir, const char *out_path, const char *verdict_json,
                                    const ls_audit_reads *reads, char *err, size_t err_len) {
    char dummy[8];
    if (ls_audit_drawing_args("timeline", run_dir, out_path, &err, &err_len, dummy, sizeof dummy) != 0) return 2;
    int rc = 2;
    int64_t world = 0;
    int64_t *starts = NULL;
    note_list *nl = NULL;
    out_stream o = {0};
    bool opened = false;
    char wnote[600], run_id[NAME_MAX_LEN] = "";
    const char *run_id_p = NULL;
    locale_t c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0), old_loc = (locale_t)0;
    if (c_loc) old_loc = uselocale(c_loc);
    bool changed = false;
    char changed_why[400] = "";
    if (ls_audit_timeline_world_read(run_dir, reads, &world, wnote, sizeof wnote, err, err_len) != LS_OK)
        goto cleanup;
    starts = malloc((size_t)world * sizeof *starts);
    nl = calloc(1, sizeof *nl);
    if (!starts || !nl) {
        snprintf(err, err_len, "timeline: out of memory for %lld ranks", (long long)world);
        goto cleanup;
    }
    /* pass 1: every rank's header start, for the base of the time axis */
    int64_t base = INT64_MAX;
    for (int64_t r = 0; r < world; r++) {
        int64_t hw;
        starts[r] = -1;
        char why[400];
        if (rank_start(run_dir, reads, r, &starts[r], &hw, &changed, why, sizeof why) && starts[r] < base)
            base = starts[r];
        if (changed) {
            snprintf(err, err_len, "%s", why);
            goto cleanup;
        }
    }
    if (out_open(&o, out_path, err, err_len) != 0) goto cleanup;
    opened = true;
    out_raw(&o, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    if (wnote[0]) note(&o, nl, 0, 0, "%s", wnote);
    int64_t ranks_read = 0;
    for (int64_t r = 0; r < world && !o.failed; r++) {
        int64_t off = starts[r] >= 0 && base != INT64_MAX ? starts[r] - base : 0;
        if (write_rank(&o, nl, run_dir, reads, &changed, changed_why, sizeof changed_why, r, off, &run_id_p, run_id,
                       sizeof run_id) >= 0)
            ranks_read++;
        if (changed) { /* the timeline shows only the bytes the verdict judged */
            snprintf(err, err_len, "%s", changed_why);
            out_close(&o, out_path, false, err, err_len);
            opened = false;
            goto cleanup;
        }
    }
    if (ranks_read == 0 && !o.failed) {
        snprintf(err, err_len, "%.200s: none of its %lld rank trace(s) could be read%s%.200s", run_dir,
                 (long long)world, nl->n ? ": " : "", nl->n ? nl->text[nl->n - 1] : "");
        out_close(&o, out_path, false, err, err_len);
        opened = false;
        goto cleanup;
    }
    out_raw(&o, "\n],\"otherData\":{\"tool\":\"longstraw-audit\",\"run_id\":");
    out_jstr(&o, run_id_p ? run_id_p : "");
    out_fmt(&o, ",\"world\":\"%lld\",\"ranks_read\":\"%lld\",\"base_unix_ns\":\"%lld\",\"notes\":", (long long)world,
            (long long)ranks_read, (long long)(base == INT64_MAX ? 0 : base));
    {
        char all[MAX_NOTES * 258 + 64];
        size_t at = 0;
        all[0] = 0;
        for (size_t i = 0; i < nl->n; i++)
            at += (size_t)snprintf(all + at, sizeof all - at, "%s%s", i ? "; " : "", nl->text[i]);
        if (nl->total > nl->n)
            snprintf(all + at, sizeof all - at, "; and %llu more", (unsigned long long)(nl->total - nl->n));
        out_jstr(&o, all);
    }
    if (verdict_json != NULL) {
        out_raw(&o, ",\"verdict\":");
        out_raw(&o, verdict_json);
    }
    out_raw(&o, "}}\n");
    opened = false;
    if (out_close(&o, out_path, true, err, err_len) != 0) goto cleanup;
    rc = 0;
cleanup:
    if (opened) out_close(&o, out_path, false, err, err_len);
    if (rc != 0 && !err[0]) snprintf(err, err_len, "%.200s: cannot be written", out_path);
    free(starts);
    free(nl);
    if (c_loc) {
        uselocale(old_loc);
        freelocale(c_loc);
    }
    return rc;
}
