/* trace_writer.c - one rank's trace writer: JSON Lines text built in a
 * buffer, written plain or as zstd frames that span flushes (trace_writer.h).
 *
 * Every event is built directly at the end of the text buffer between
 * begin_event() and end_event(); a refusal found while building rolls the
 * buffer back to where the event started, so a refused event leaves no
 * trace and consumes no seq.  The text itself (buffer, number and string
 * formatting, cJSON values) is built by trace_json.c. */
#include "receipts/writing/trace_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "receipts/writing/trace_json.h"

#define DEFAULT_FLUSH_BYTES ((size_t)1 << 20)
#define DEFAULT_FRAME_BYTES ((size_t)256 << 10)
/* Frames stay small enough (frame_bytes + flush_bytes + one line <= 3 MiB)
 * for the reader to hold a whole frame until its checksum verifies
 * (trace_reader.h). */
#define MAX_FLUSH_PLUS_FRAME ((size_t)2 << 20)
/* zstd history: 1 MiB is all a trace's repetition needs, and it bounds the
 * reader's zstd buffer */
#define WINDOW_LOG 20
#define DEFAULT_LEVEL 6

struct ls_trace_writer {
    pthread_mutex_t mu;
    int fd;
    char *path;
    bool compressed;
    ZSTD_CCtx *cctx;
    char *zbuf;              /* compressed output of one flush */
    size_t zcap;
    ls_trace_json_buf text;  /* pending text; the event being built starts at text.mark */
    size_t flush_bytes;
    size_t frame_bytes;      /* end the open zstd frame once it holds this much text */
    size_t frame_len;        /* text in the open zstd frame; 0: no frame open */
    int64_t rank;
    int64_t seq;             /* next seq */
    int64_t t0_ns;           /* CLOCK_MONOTONIC at open */
    int64_t last_ts;
    int64_t pending_ts;
    bool complete;           /* rank_complete written */
    bool prefix_frozen;      /* mark every event with a step as prefix_frozen */
    ls_status sticky;        /* first I/O or compression failure */
    char **groups;           /* header group names, for collective.group */
    size_t n_groups;
    char err[320];
};

/* ---- small helpers -------------------------------------------------------- */

static void seterr(ls_trace_writer *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void seterr(ls_trace_writer *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* ---- argument checks (set w->err naming the field) ---------------------- */

static ls_status chk_int(ls_trace_writer *w, const char *kind, const char *field, int64_t v,
                         int64_t min) {
    if (v >= min && v <= LS_TRACE_MAX_INT) return LS_OK;
    seterr(w, "%s.%s: %lld is outside [%lld, 2^53-1]", kind, field, (long long)v, (long long)min);
    return LS_ERR_ARG;
}

static ls_status chk_num(ls_trace_writer *w, const char *kind, const char *field, double v) {
    if (!isfinite(v)) {
        seterr(w, "%s.%s: non-finite value refused", kind, field);
        return LS_ERR_NONFINITE;
    }
    if (v < 0) {
        seterr(w, "%s.%s: %g is negative", kind, field, v);
        return LS_ERR_ARG;
    }
    return LS_OK;
}

static ls_status chk_ident(ls_trace_writer *w, const char *kind, const char *field, const char *s) {
    if (ls_trace_is_ident(s)) return LS_OK;
    seterr(w, "%s.%s: %s%s%s does not match ^[a-z][a-z0-9_]*$", kind, field, s ? "\"" : "",
           s ? s : "NULL", s ? "\"" : "");
    return LS_ERR_ARG;
}

static ls_status chk_token(ls_trace_writer *w, const char *kind, const char *field, const char *s) {
    if (ls_trace_is_token(s)) return LS_OK;
    seterr(w, "%s.%s: %s is not a non-empty printable ASCII string without spaces", kind, field,
           s ? "value" : "NULL");
    return LS_ERR_ARG;
}

static ls_status chk_enum(ls_trace_writer *w, const char *kind, const char *field, int v, int count) {
    if (v >= 0 && v < count) return LS_OK;
    seterr(w, "%s.%s: enum value %d out of range", kind, field, v);
    return LS_ERR_ARG;
}

/* ---- file output ---------------------------------------------------------- */

static ls_status write_all(ls_trace_writer *w, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            seterr(w, "%s: write failed: %s", w->path, strerror(errno));
            return LS_ERR_IO;
        }
        p += k;
        n -= (size_t)k;
    }
    return LS_OK;
}

/* How a flush leaves the zstd frame: open (more blocks follow) unless it
 * reached frame_bytes, or closed because the trace ends here. */
typedef enum { FLUSH_NONE = 0, FLUSH, FLUSH_END_FRAME } flush_kind;

/* Writes the pending text.  Compressed, it becomes complete zstd blocks of
 * the open frame (ZSTD_e_flush: everything up to here decodes, so a killed
 * process leaves a readable prefix), and the frame ends (ZSTD_e_end: its
 * checksum) when asked or once it holds frame_bytes of text: a few large
 * frames decode much faster, and compress better, than a frame per flush.
 * Caller holds the lock. */
static ls_status do_flush(ls_trace_writer *w, flush_kind how) {
    if (w->sticky != LS_OK) return w->sticky;
    if (w->text.len == 0 && (how != FLUSH_END_FRAME || w->frame_len == 0)) return LS_OK;
    ls_status st = LS_OK;
    if (!w->compressed) {
        st = write_all(w, w->text.buf, w->text.len);
    } else {
        bool end = how == FLUSH_END_FRAME || w->frame_len + w->text.len >= w->frame_bytes;
        ZSTD_inBuffer in = {w->text.buf, w->text.len, 0};
        while (st == LS_OK) {
            ZSTD_outBuffer out = {w->zbuf, w->zcap, 0};
            size_t r = ZSTD_compressStream2(w->cctx, &out, &in, end ? ZSTD_e_end : ZSTD_e_flush);
            if (ZSTD_isError(r)) {
                seterr(w, "%s: zstd: %s", w->path, ZSTD_getErrorName(r));
                st = LS_ERR_INTERNAL;
                break;
            }
            st = write_all(w, w->zbuf, out.pos);
            if (r == 0) break;
        }
        w->frame_len = end ? 0 : w->frame_len + w->text.len;
    }
    w->text.len = 0;
    if (st != LS_OK) w->sticky = st;
    return st;
}

/* ---- event framing -------------------------------------------------------- */

/* State checks every emit makes first (lock held). */
static ls_status precheck(ls_trace_writer *w, const char *kind) {
    w->err[0] = '\0';
    if (w->sticky != LS_OK) {
        seterr(w, "%s: writer failed earlier (%s)", w->path, ls_status_str(w->sticky));
        return w->sticky;
    }
    if (w->complete) {
        seterr(w, "%s: %s after rank_complete refused", w->path, kind);
        return LS_ERR_ARG;
    }
    return LS_OK;
}

static void begin_event(ls_trace_writer *w, const char *kind) {
    w->text.mark = w->text.len;
    w->text.overflow = w->text.nomem = false;
    int64_t ts = mono_ns() - w->t0_ns;
    if (ts < w->last_ts) ts = w->last_ts;
    w->pending_ts = ts;
    ls_trace_json_put_lit(&w->text, "{\"v\":1,\"rank\":");
    ls_trace_json_put_i64(&w->text, w->rank);
    ls_trace_json_put_lit(&w->text, ",\"seq\":");
    ls_trace_json_put_i64(&w->text, w->seq);
    ls_trace_json_put_lit(&w->text, ",\"ts_ns\":");
    ls_trace_json_put_i64(&w->text, ts);
    ls_trace_json_put_lit(&w->text, ",\"ev\":");
    ls_trace_json_put_str(&w->text, kind);
}

/* Closes the event: commits it (seq, ts) or rolls it back when it did not
 * fit; flushes when asked or when the buffer passed the threshold. */
static ls_status end_event(ls_trace_writer *w, flush_kind flush) {
    ls_trace_json_put_raw(&w->text, "}\n", 2);
    if (w->text.overflow || w->text.nomem) {
        w->text.len = w->text.mark;
        bool over = w->text.overflow;
        w->text.overflow = w->text.nomem = false;
        if (over) {
            seterr(w, "%s: event %lld longer than %zu bytes refused", w->path, (long long)w->seq,
                   LS_TRACE_MAX_LINE);
            return LS_ERR_ARG;
        }
        seterr(w, "%s: out of memory building event %lld", w->path, (long long)w->seq);
        return LS_ERR_NOMEM;
    }
    w->seq++;
    w->last_ts = w->pending_ts;
    if (flush != FLUSH_NONE || w->text.len >= w->flush_bytes)
        return do_flush(w, flush == FLUSH_END_FRAME ? FLUSH_END_FRAME : FLUSH);
    return LS_OK;
}

/* The prefix_frozen mark of an event with a step: written when the writer
 * is in prefix-frozen mode or the event says so itself. */
static void mark_prefix_frozen(ls_trace_writer *w, bool event_says) {
    if (w->prefix_frozen || event_says) ls_trace_json_put_key_bool(&w->text, "prefix_frozen", true);
}

/* ---- open / close --------------------------------------------------------- */

static void writer_free(ls_trace_writer *w) {
    if (w == NULL) return;
    if (w->fd >= 0) close(w->fd);
    ZSTD_freeCCtx(w->cctx);
    for (size_t i = 0; i < w->n_groups; i++) free(w->groups[i]);
    free(w->groups);
    free(w->zbuf);
    ls_trace_json_buf_free(&w->text);
    free(w->path);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* The header line (line 1).  header_check checks h with host standing for
 * h->host (the caller's default applied): run_id and host tokens,
 * 0 <= rank < world, pid and start_unix_ns in range, groups named by distinct
 * tokens with members distinct ranks of world; LS_OK, or LS_ERR_ARG after
 * printing the first problem to stderr, prefixed with path.  header_put
 * appends the line, newline included, as a new line of b (sets b->mark);
 * host, pid and start_ns stand in for the header's own fields.  The reader's check of a header it reads is in trace_reader.c. */
static ls_status header_check(const char *path, const ls_trace_header *h, const char *host) {
    const char *bad = NULL;
    char tmp[160];
    if (!ls_trace_is_token(h->run_id)) bad = "run_id must be a non-empty printable ASCII token";
    else if (h->world < 1) bad = "world must be >= 1";
    else if (h->rank < 0 || h->rank >= h->world) bad = "rank must be in [0, world)";
    else if (!ls_trace_is_token(host)) bad = "host must be a non-empty printable ASCII token";
    else if (h->pid < 0 || h->pid > LS_TRACE_MAX_INT) bad = "pid out of range";
    else if (h->start_unix_ns < 0) bad = "start_unix_ns must be >= 0";
    else if (h->n_groups > 0 && h->groups == NULL) bad = "groups is NULL but n_groups > 0";
    for (size_t g = 0; bad == NULL && g < h->n_groups; g++) {
        const ls_trace_group *gr = &h->groups[g];
        if (!ls_trace_is_token(gr->name)) {
            snprintf(tmp, sizeof tmp, "groups[%zu].name must be a printable ASCII token", g);
            bad = tmp;
            break;
        }
        if (gr->kind && ls_trace_enum_from_name("group_kind", gr->kind) < 0) {
            snprintf(tmp, sizeof tmp, "groups[%zu].kind \"%.32s\" is not a registered group kind (ls_trace_group_kind)", g,
                     gr->kind);
            bad = tmp;
            break;
        }
        for (size_t j = 0; j < g; j++)
            if (strcmp(h->groups[j].name, gr->name) == 0) {
                snprintf(tmp, sizeof tmp, "groups[%zu].name \"%s\" repeats groups[%zu]", g, gr->name, j);
                bad = tmp;
            }
        if (bad == NULL && (gr->n_members == 0 || gr->members == NULL)) {
            snprintf(tmp, sizeof tmp, "groups[%zu] (\"%s\") has no members", g, gr->name);
            bad = tmp;
        }
        for (size_t m = 0; bad == NULL && m < gr->n_members; m++) {
            if (gr->members[m] < 0 || gr->members[m] >= h->world) {
                snprintf(tmp, sizeof tmp, "groups[%zu].members[%zu] = %d is not a rank of world %d", g,
                         m, (int)gr->members[m], (int)h->world);
                bad = tmp;
            }
            for (size_t j = 0; bad == NULL && j < m; j++)
                if (gr->members[j] == gr->members[m]) {
                    snprintf(tmp, sizeof tmp, "groups[%zu].members[%zu] repeats rank %d", g, m,
                             (int)gr->members[m]);
                    bad = tmp;
                }
        }
    }
    if (bad) {
        fprintf(stderr, "%s: trace header: %s\n", path, bad);
        return LS_ERR_ARG;
    }
    return LS_OK;
}

static void header_put(ls_trace_json_buf *b, const ls_trace_header *h, const char *host,
                       int64_t pid, int64_t start_ns) {
    b->mark = b->len;
    ls_trace_json_put_lit(b, "{\"v\":1,\"kind\":\"" LS_TRACE_HEADER_KIND
                             "\",\"schema\":\"" LS_TRACE_HEADER_SCHEMA "\"");
    ls_trace_json_put_key_str(b, "run_id", h->run_id);
    ls_trace_json_put_key_i64(b, "rank", h->rank);
    ls_trace_json_put_key_i64(b, "world", h->world);
    ls_trace_json_put_key_str(b, "host", host);
    ls_trace_json_put_key_i64(b, "pid", pid);
    ls_trace_json_put_key_i64(b, "start_unix_ns", start_ns);
    ls_trace_json_put_key(b, "groups");
    ls_trace_json_put_raw(b, "[", 1);
    for (size_t g = 0; g < h->n_groups; g++) {
        ls_trace_json_put_lit(b, g ? ",{\"name\":" : "{\"name\":");
        ls_trace_json_put_str(b, h->groups[g].name);
        if (h->groups[g].kind) {
            ls_trace_json_put_lit(b, ",\"kind\":");
            ls_trace_json_put_str(b, h->groups[g].kind);
        }
        ls_trace_json_put_lit(b, ",\"members\":[");
        for (size_t m = 0; m < h->groups[g].n_members; m++) {
            if (m) ls_trace_json_put_raw(b, ",", 1);
            ls_trace_json_put_i64(b, h->groups[g].members[m]);
        }
        ls_trace_json_put_lit(b, "]}");
    }
    ls_trace_json_put_raw(b, "]", 1);
    ls_trace_json_put_key_str(b, "tool", h->tool ? h->tool : "longstraw");
    ls_trace_json_put_raw(b, "}\n", 2);
}

ls_status ls_trace_writer_open(ls_trace_writer **out, const char *path, const ls_trace_header *header) {
    return ls_trace_writer_open_opts(out, path, header, NULL);
}

ls_status ls_trace_writer_open_opts(ls_trace_writer **out, const char *path,
                                    const ls_trace_header *h, const ls_trace_writer_opts *opts) {
    if (out) *out = NULL;
    if (out == NULL || path == NULL || h == NULL) {
        fprintf(stderr, "trace writer: NULL %s\n", out == NULL ? "out" : path == NULL ? "path" : "header");
        return LS_ERR_ARG;
    }
    int level = opts && opts->zstd_level ? opts->zstd_level : DEFAULT_LEVEL;
    size_t flush_bytes = opts && opts->flush_bytes ? opts->flush_bytes : DEFAULT_FLUSH_BYTES;
    size_t frame_bytes = opts && opts->frame_bytes ? opts->frame_bytes : DEFAULT_FRAME_BYTES;
    if (level < 1 || level > 19 || flush_bytes > MAX_FLUSH_PLUS_FRAME ||
        frame_bytes > MAX_FLUSH_PLUS_FRAME - flush_bytes) {
        fprintf(stderr,
                "%s: trace writer: zstd_level must be 1..19 and flush_bytes + frame_bytes <= 2 MiB\n",
                path);
        return LS_ERR_ARG;
    }
    char hostbuf[256];
    const char *host = h->host;
    if (host == NULL) {
        if (gethostname(hostbuf, sizeof hostbuf) != 0) snprintf(hostbuf, sizeof hostbuf, "unknown");
        hostbuf[sizeof hostbuf - 1] = '\0';
        host = hostbuf;
    }
    ls_status st = header_check(path, h, host);
    if (st != LS_OK) return st;
    int64_t pid = h->pid ? h->pid : (int64_t)getpid();
    int64_t start_ns = h->start_unix_ns;
    if (start_ns == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        start_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    }

    ls_trace_writer *w = calloc(1, sizeof *w);
    if (w == NULL) return LS_ERR_NOMEM;
    w->fd = -1;
    pthread_mutex_init(&w->mu, NULL);
    w->rank = h->rank;
    w->flush_bytes = flush_bytes;
    w->frame_bytes = frame_bytes;
    w->compressed = ends_with(path, ".zst");
    w->path = strdup(path);
    bool text_ok = ls_trace_json_buf_init(&w->text);
    w->groups = h->n_groups ? calloc(h->n_groups, sizeof *w->groups) : NULL;
    st = LS_ERR_NOMEM;
    if (w->path == NULL || !text_ok || (h->n_groups && w->groups == NULL)) goto cleanup;
    for (; w->n_groups < h->n_groups; w->n_groups++)
        if ((w->groups[w->n_groups] = strdup(h->groups[w->n_groups].name)) == NULL) goto cleanup;
    if (w->compressed) {
        w->cctx = ZSTD_createCCtx();
        w->zcap = ZSTD_compressBound(flush_bytes + LS_TRACE_MAX_LINE);
        w->zbuf = malloc(w->zcap);
        if (w->cctx == NULL || w->zbuf == NULL) goto cleanup;
        st = LS_ERR_INTERNAL;
        if (ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_windowLog, WINDOW_LOG))) {
            fprintf(stderr, "%s: trace writer: zstd parameters refused\n", path);
            goto cleanup;
        }
    }
    w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        fprintf(stderr, "%s: cannot create trace: %s\n", path, strerror(errno));
        st = LS_ERR_IO;
        goto cleanup;
    }
    w->t0_ns = mono_ns();
    header_put(&w->text, h, host, pid, start_ns);
    if (w->text.overflow || w->text.nomem) {
        fprintf(stderr, "%s: trace header %s\n", path,
                w->text.overflow ? "longer than 1 MiB" : "out of memory");
        st = w->text.overflow ? LS_ERR_ARG : LS_ERR_NOMEM;
        goto cleanup;
    }
    st = do_flush(w, FLUSH);
    if (st != LS_OK) {
        fprintf(stderr, "%s\n", w->err);
        goto cleanup;
    }
    *out = w;
    return LS_OK;
cleanup:
    if (w->fd >= 0) unlink(path);
    writer_free(w);
    return st;
}

ls_status ls_trace_writer_close(ls_trace_writer *w) {
    if (w == NULL) return LS_OK;
    pthread_mutex_lock(&w->mu);
    ls_status st = do_flush(w, FLUSH_END_FRAME);
    if (st == LS_OK && fsync(w->fd) != 0) {
        fprintf(stderr, "%s: fsync failed: %s\n", w->path, strerror(errno));
        st = LS_ERR_IO;
    }
    if (close(w->fd) != 0 && st == LS_OK) {
        fprintf(stderr, "%s: close failed: %s\n", w->path, strerror(errno));
        st = LS_ERR_IO;
    }
    w->fd = -1;
    if (st != LS_OK && w->err[0]) fprintf(stderr, "%s\n", w->err);
    pthread_mutex_unlock(&w->mu);
    writer_free(w);
    return st;
}

ls_status ls_trace_writer_flush(ls_trace_writer *w) {
    if (w == NULL) return LS_ERR_ARG;
    pthread_mutex_lock(&w->mu);
    ls_status st = do_flush(w, FLUSH);
    pthread_mutex_unlock(&w->mu);
    return st;
}

int64_t ls_trace_writer_seq(ls_trace_writer *w) {
    if (w == NULL) return -1;
    pthread_mutex_lock(&w->mu);
    int64_t s = w->seq;
    pthread_mutex_unlock(&w->mu);
    return s;
}

const char *ls_trace_writer_last_error(ls_trace_writer *w) { return w ? w->err : ""; }

/* ---- typed emitters ------------------------------------------------------- */

#define LOCKED_EMIT(w, kind, body)                       \
    do {                                                 \
        if ((w) == NULL) return LS_ERR_ARG;              \
        pthread_mutex_lock(&(w)->mu);                    \
        ls_status st_ = precheck((w), (kind));           \
        if (st_ == LS_OK) st_ = (body);                  \
        pthread_mutex_unlock(&(w)->mu);                  \
        return st_;                                      \
    } while (0)

static ls_status phase_begin_locked(ls_trace_writer *w, const char *phase, int64_t step) {
    ls_status st = chk_ident(w, "phase_begin", "phase", phase);
    if (st == LS_OK) st = chk_int(w, "phase_begin", "step", step, 0);
    if (st != LS_OK) return st;
    begin_event(w, "phase_begin");
    ls_trace_json_put_key_str(&w->text, "phase", phase);
    ls_trace_json_put_key_i64(&w->text, "step", step);
    mark_prefix_frozen(w, false);
    return end_event(w, FLUSH);
}

ls_status ls_trace_emit_phase_begin(ls_trace_writer *w, const char *phase, int64_t step) {
    LOCKED_EMIT(w, "phase_begin", phase_begin_locked(w, phase, step));
}

static ls_status phase_end_locked(ls_trace_writer *w, const char *phase, int64_t step,
                                  int64_t wall_ns, bool ok) {
    ls_status st = chk_ident(w, "phase_end", "phase", phase);
    if (st == LS_OK) st = chk_int(w, "phase_end", "step", step, 0);
    if (st == LS_OK) st = chk_int(w, "phase_end", "wall_ns", wall_ns, 0);
    if (st != LS_OK) return st;
    begin_event(w, "phase_end");
    ls_trace_json_put_key_str(&w->text, "phase", phase);
    ls_trace_json_put_key_i64(&w->text, "step", step);
    ls_trace_json_put_key_i64(&w->text, "wall_ns", wall_ns);
    ls_trace_json_put_key_bool(&w->text, "ok", ok);
    mark_prefix_frozen(w, false);
    return end_event(w, FLUSH);
}

ls_status ls_trace_emit_phase_end(ls_trace_writer *w, const char *phase, int64_t step,
                                  int64_t wall_ns, bool ok) {
    LOCKED_EMIT(w, "phase_end", phase_end_locked(w, phase, step, wall_ns, ok));
}

static ls_status layer_end_locked(ls_trace_writer *w, const ls_trace_layer_end *e) {
    static const char K[] = "layer_end";
    if (e == NULL) {
        seterr(w, "layer_end: NULL event");
        return LS_ERR_ARG;
    }
    ls_status st = chk_num(w, K, "out_norm", e->out_norm);
    if (st == LS_OK) st = chk_ident(w, K, "phase", e->phase);
    if (st == LS_OK) st = chk_int(w, K, "step", e->step, 0);
    if (st == LS_OK) st = chk_int(w, K, "member", e->member, -1);
    if (st == LS_OK) st = chk_int(w, K, "layer", e->layer, -1);
    if (st == LS_OK) st = chk_enum(w, K, "kind", (int)e->kind, LS_TRACE_LAYER_KIND_COUNT);
    if (st == LS_OK) st = chk_enum(w, K, "dir", (int)e->dir, LS_TRACE_DIR_COUNT);
    if (st == LS_OK) st = chk_int(w, K, "tokens", e->tokens, 0);
    if (st == LS_OK) st = chk_int(w, K, "live_bytes", e->live_bytes, 0);
    if (st == LS_OK) st = chk_int(w, K, "peak_bytes", e->peak_bytes, 0);
    if (st == LS_OK) st = chk_int(w, K, "wall_ns", e->wall_ns, 0);
    if (st != LS_OK) return st;
    begin_event(w, K);
    ls_trace_json_put_key_str(&w->text, "phase", e->phase);
    ls_trace_json_put_key_i64(&w->text, "step", e->step);
    ls_trace_json_put_key_i64(&w->text, "member", e->member);
    ls_trace_json_put_key_i64(&w->text, "layer", e->layer);
    ls_trace_json_put_key_str(&w->text, "kind", ls_trace_layer_kind_name(e->kind));
    ls_trace_json_put_key_str(&w->text, "dir", ls_trace_dir_name(e->dir));
    ls_trace_json_put_key_i64(&w->text, "tokens", e->tokens);
    ls_trace_json_put_key_i64(&w->text, "live_bytes", e->live_bytes);
    ls_trace_json_put_key_i64(&w->text, "peak_bytes", e->peak_bytes);
    ls_trace_json_put_key_i64(&w->text, "wall_ns", e->wall_ns);
    ls_trace_json_put_key_f64(&w->text, "out_norm", e->out_norm);
    mark_prefix_frozen(w, e->prefix_frozen);
    return end_event(w, FLUSH_NONE);
}

ls_status ls_trace_emit_layer_end(ls_trace_writer *w, const ls_trace_layer_end *e) {
    LOCKED_EMIT(w, "layer_end", layer_end_locked(w, e));
}

static ls_status collective_locked(ls_trace_writer *w, const ls_trace_collective *c) {
    static const char K[] = "collective";
    if (c == NULL) {
        seterr(w, "collective: NULL event");
        return LS_ERR_ARG;
    }
    ls_status st = chk_token(w, K, "group", c->group);
    if (st == LS_OK) {
        size_t g = 0;
        while (g < w->n_groups && strcmp(w->groups[g], c->group) != 0) g++;
        if (g == w->n_groups) {
            seterr(w, "collective.group: \"%s\" is not a group of the header", c->group);
            st = LS_ERR_ARG;
        }
    }
    if (st == LS_OK) st = chk_int(w, K, "gseq", c->gseq, 0);
    if (st == LS_OK) st = chk_enum(w, K, "op", (int)c->op, LS_TRACE_OP_ALL_TO_ALL + 1); /* v1: all_to_all for EP */
    if (st == LS_OK) st = chk_enum(w, K, "red", (int)c->red, LS_TRACE_RED_COUNT);
    if (st == LS_OK) st = chk_int(w, K, "count", c->count, 0);
    if (st == LS_OK) st = chk_enum(w, K, "dtype", (int)c->dtype, LS_TRACE_DTYPE_COUNT);
    if (st == LS_OK) st = chk_int(w, K, "bytes", c->bytes, 0);
    if (st == LS_OK) st = chk_ident(w, K, "purpose", c->purpose);
    if (st == LS_OK && c->has_layer) st = chk_int(w, K, "layer", c->layer, -1);
    if (st != LS_OK) return st;
    begin_event(w, K);
    ls_trace_json_put_key_str(&w->text, "group", c->group);
    ls_trace_json_put_key_i64(&w->text, "gseq", c->gseq);
    ls_trace_json_put_key_str(&w->text, "op", ls_trace_op_name(c->op));
    ls_trace_json_put_key_str(&w->text, "red", ls_trace_red_name(c->red));
    ls_trace_json_put_key_i64(&w->text, "count", c->count);
    ls_trace_json_put_key_str(&w->text, "dtype", ls_trace_dtype_name(c->dtype));
    ls_trace_json_put_key_i64(&w->text, "bytes", c->bytes);
    ls_trace_json_put_key_str(&w->text, "purpose", c->purpose);
    if (c->has_layer) ls_trace_json_put_key_i64(&w->text, "layer", c->layer);
    return end_event(w, FLUSH_NONE);
}

ls_status ls_trace_emit_collective(ls_trace_writer *w, const ls_trace_collective *c) {
    LOCKED_EMIT(w, "collective", collective_locked(w, c));
}

static ls_status optimizer_locked(ls_trace_writer *w, int64_t step, int64_t n_params, double lr,
                                  double grad_norm) {
    static const char K[] = "optimizer_step";
    ls_status st = chk_num(w, K, "lr", lr);
    if (st == LS_OK) st = chk_num(w, K, "grad_norm", grad_norm);
    if (st == LS_OK) st = chk_int(w, K, "step", step, 0);
    if (st == LS_OK) st = chk_int(w, K, "n_params", n_params, 0);
    if (st != LS_OK) return st;
    begin_event(w, K);
    ls_trace_json_put_key_i64(&w->text, "step", step);
    ls_trace_json_put_key_i64(&w->text, "n_params", n_params);
    ls_trace_json_put_key_f64(&w->text, "lr", lr);
    ls_trace_json_put_key_f64(&w->text, "grad_norm", grad_norm);
    mark_prefix_frozen(w, false);
    return end_event(w, FLUSH_NONE);
}

ls_status ls_trace_emit_optimizer_step(ls_trace_writer *w, int64_t step, int64_t n_params,
                                       double lr, double grad_norm) {
    LOCKED_EMIT(w, "optimizer_step", optimizer_locked(w, step, n_params, lr, grad_norm));
}

static ls_status digest_locked(ls_trace_writer *w, int64_t step, const char *target,
                               const uint8_t sha256[32]) {
    static const char K[] = "param_digest";
    static const char HEX[] = "0123456789abcdef";
    ls_status st = chk_int(w, K, "step", step, 0);
    if (st == LS_OK) st = chk_token(w, K, "target", target);
    if (st == LS_OK && sha256 == NULL) {
        seterr(w, "param_digest.sha256: NULL");
        st = LS_ERR_ARG;
    }
    if (st != LS_OK) return st;
    char hex[65];
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = HEX[sha256[i] >> 4];
        hex[2 * i + 1] = HEX[sha256[i] & 15];
    }
    hex[64] = '\0';
    begin_event(w, K);
    ls_trace_json_put_key_i64(&w->text, "step", step);
    ls_trace_json_put_key_str(&w->text, "target", target);
    ls_trace_json_put_key_str(&w->text, "sha256", hex);
    mark_prefix_frozen(w, false);
    return end_event(w, FLUSH_NONE);
}

ls_status ls_trace_emit_param_digest(ls_trace_writer *w, int64_t step, const char *target,
                                     const uint8_t sha256[32]) {
    LOCKED_EMIT(w, "param_digest", digest_locked(w, step, target, sha256));
}

static ls_status memory_locked(ls_trace_writer *w, const ls_trace_memory *m) {
    static const char K[] = "memory";
    if (m == NULL || (m->n_categories > 0 && m->categories == NULL)) {
        seterr(w, "memory: NULL event or categories");
        return LS_ERR_ARG;
    }
    ls_status st = chk_int(w, K, "step", m->step, 0);
    if (st == LS_OK) st = chk_ident(w, K, "phase", m->phase);
    if (st == LS_OK) st = chk_int(w, K, "total_live", m->total_live, 0);
    if (st == LS_OK) st = chk_int(w, K, "total_peak", m->total_peak, 0);
    if (st == LS_OK) st = chk_int(w, K, "rss_peak", m->rss_peak, 0);
    bool any_host = false;
    for (size_t i = 0; i < m->n_categories && m->categories; i++) any_host |= m->categories[i].host;
    if (st == LS_OK && any_host) st = chk_int(w, K, "host_live", m->host_live, 0);
    if (st == LS_OK && any_host) st = chk_int(w, K, "host_peak", m->host_peak, 0);
    for (size_t i = 0; st == LS_OK && i < m->n_categories; i++) {
        const ls_trace_mem_category *c = &m->categories[i];
        st = chk_ident(w, K, "categories.name", c->name);
        if (st == LS_OK) st = chk_int(w, K, "categories.live", c->live, 0);
        if (st == LS_OK) st = chk_int(w, K, "categories.peak", c->peak, 0);
        for (size_t j = 0; st == LS_OK && j < i; j++)
            if (strcmp(m->categories[j].name, c->name) == 0) {
                seterr(w, "memory.categories: \"%s\" appears twice", c->name);
                st = LS_ERR_ARG;
            }
    }
    if (st != LS_OK) return st;
    begin_event(w, K);
    ls_trace_json_put_key_i64(&w->text, "step", m->step);
    ls_trace_json_put_key_str(&w->text, "phase", m->phase);
    ls_trace_json_put_key(&w->text, "categories");
    ls_trace_json_put_raw(&w->text, "{", 1);
    for (size_t i = 0; i < m->n_categories; i++) {
        if (i) ls_trace_json_put_raw(&w->text, ",", 1);
        ls_trace_json_put_str(&w->text, m->categories[i].name);
        ls_trace_json_put_lit(&w->text, ":{\"live\":");
        ls_trace_json_put_i64(&w->text, m->categories[i].live);
        ls_trace_json_put_lit(&w->text, ",\"peak\":");
        ls_trace_json_put_i64(&w->text, m->categories[i].peak);
        if (m->categories[i].host) ls_trace_json_put_lit(&w->text, ",\"tier\":\"host\"");
        ls_trace_json_put_raw(&w->text, "}", 1);
    }
    ls_trace_json_put_raw(&w->text, "}", 1);
    ls_trace_json_put_key_i64(&w->text, "total_live", m->total_live);
    ls_trace_json_put_key_i64(&w->text, "total_peak", m->total_peak);
    ls_trace_json_put_key_i64(&w->text, "rss_peak", m->rss_peak);
    if (any_host) {
        ls_trace_json_put_key_i64(&w->text, "host_live", m->host_live);
        ls_trace_json_put_key_i64(&w->text, "host_peak", m->host_peak);
    }
    mark_prefix_frozen(w, false);
    return end_event(w, FLUSH_NONE);
}

ls_status ls_trace_emit_memory(ls_trace_writer *w, const ls_trace_memory *m) {
    LOCKED_EMIT(w, "memory", memory_locked(w, m));
}

static ls_status error_locked(ls_trace_writer *w, ls_status code, const char *message) {
    ls_status st = chk_int(w, "error", "code", (int64_t)code, 0);
    if (st != LS_OK) return st;
    begin_event(w, "error");
    ls_trace_json_put_key_i64(&w->text, "code", (int64_t)code);
    ls_trace_json_put_key_str(&w->text, "status", ls_status_str(code));
    ls_trace_json_put_key_str(&w->text, "message", message ? message : "");
    return end_event(w, FLUSH_END_FRAME);
}

ls_status ls_trace_emit_error(ls_trace_writer *w, ls_status code, const char *message) {
    LOCKED_EMIT(w, "error", error_locked(w, code, message));
}

static ls_status complete_locked(ls_trace_writer *w, int64_t steps) {
    ls_status st = chk_int(w, "rank_complete", "steps", steps, 0);
    if (st != LS_OK) return st;
    begin_event(w, "rank_complete");
    ls_trace_json_put_key_i64(&w->text, "steps", steps);
    ls_trace_json_put_key_i64(&w->text, "events", w->seq);
    st = end_event(w, FLUSH_END_FRAME);
    if (st == LS_OK) w->complete = true;
    return st;
}

ls_status ls_trace_emit_rank_complete(ls_trace_writer *w, int64_t steps) {
    LOCKED_EMIT(w, "rank_complete", complete_locked(w, steps));
}

/* ---- generic emitter ------------------------------------------------------ */

static ls_status json_locked(ls_trace_writer *w, const char *kind, const cJSON *fields) {
    static const char *const ENVELOPE[] = {"v", "rank", "seq", "ts_ns", "ev"};
    if (!ls_trace_is_ident(kind)) {
        seterr(w, "event kind %s does not match ^[a-z][a-z0-9_]*$", kind ? "name" : "NULL");
        return LS_ERR_ARG;
    }
    if (fields != NULL && !cJSON_IsObject(fields)) {
        seterr(w, "%s: fields must be a JSON object", kind);
        return LS_ERR_ARG;
    }
    ls_status st =
        fields ? ls_trace_json_check_value(fields, kind, "(fields)", w->err, sizeof w->err) : LS_OK;
    if (st != LS_OK) return st;
    for (const cJSON *c = fields ? fields->child : NULL; c; c = c->next)
        for (size_t i = 0; i < sizeof ENVELOPE / sizeof ENVELOPE[0]; i++)
            if (strcmp(c->string, ENVELOPE[i]) == 0) {
                seterr(w, "%s.%s: envelope keys are written by the writer", kind, c->string);
                return LS_ERR_ARG;
            }
    ls_trace_kind k = ls_trace_kind_from_name(kind);
    if (k != LS_TRACE_KIND_UNKNOWN) {
        cJSON empty = {0};
        empty.type = cJSON_Object;
        char why[200];
        if (ls_trace_event_check(k, fields ? fields : &empty, why, sizeof why) != LS_OK) {
            seterr(w, "%s", why);
            return LS_ERR_ARG;
        }
        if (k == LS_TRACE_COLLECTIVE) {
            const char *g = cJSON_GetObjectItemCaseSensitive(fields, "group")->valuestring;
            size_t i = 0;
            while (i < w->n_groups && strcmp(w->groups[i], g) != 0) i++;
            if (i == w->n_groups) {
                seterr(w, "collective.group: \"%s\" is not a group of the header", g);
                return LS_ERR_ARG;
            }
        }
        if (k == LS_TRACE_RANK_COMPLETE) {
            int64_t ev = 0;
            ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(fields, "events"), &ev);
            if (ev != w->seq) {
                seterr(w, "rank_complete.events: %lld but %lld events were written", (long long)ev,
                       (long long)w->seq);
                return LS_ERR_ARG;
            }
        }
    }
    begin_event(w, kind);
    for (const cJSON *c = fields ? fields->child : NULL; c; c = c->next) {
        ls_trace_json_put_raw(&w->text, ",", 1);
        ls_trace_json_put_str(&w->text, c->string);
        ls_trace_json_put_raw(&w->text, ":", 1);
        ls_trace_json_put_value(&w->text, c);
    }
    /* any event carrying a step, of a known kind or not */
    if (w->prefix_frozen && cJSON_GetObjectItemCaseSensitive(fields, "step") != NULL &&
        cJSON_GetObjectItemCaseSensitive(fields, "prefix_frozen") == NULL)
        mark_prefix_frozen(w, false);
    flush_kind flush = k == LS_TRACE_ERROR || k == LS_TRACE_RANK_COMPLETE ? FLUSH_END_FRAME
                       : k == LS_TRACE_PHASE_BEGIN || k == LS_TRACE_PHASE_END ? FLUSH
                                                                               : FLUSH_NONE;
    st = end_event(w, flush);
    if (st == LS_OK && k == LS_TRACE_RANK_COMPLETE) w->complete = true;
    return st;
}

ls_status ls_trace_emit_json(ls_trace_writer *w, const char *kind, const cJSON *fields) {
    LOCKED_EMIT(w, "event", json_locked(w, kind, fields));
}

/* ---- step metrics and prefix-frozen mode ----------------------------------- */

static ls_status step_metrics_locked(ls_trace_writer *w, const ls_trace_step_metrics *m) {
    ls_status st = ls_trace_step_metrics_check(m, w->err, sizeof w->err);
    if (st != LS_OK) return st;
    ls_trace_step_metrics marked = *m;
    marked.prefix_frozen = m->prefix_frozen || w->prefix_frozen; /* in its place, after step */
    cJSON *fields = NULL;
    st = ls_trace_step_metrics_to_json(&marked, &fields);
    if (st == LS_OK) st = json_locked(w, "step_metrics", fields);
    else seterr(w, "step_metrics: out of memory building the event");
    cJSON_Delete(fields);
    return st;
}

ls_status ls_trace_emit_step_metrics(ls_trace_writer *w, const ls_trace_step_metrics *m) {
    LOCKED_EMIT(w, "step_metrics", step_metrics_locked(w, m));
}

ls_status ls_trace_writer_set_prefix_frozen(ls_trace_writer *w, bool on) {
    if (w == NULL) return LS_ERR_ARG;
    pthread_mutex_lock(&w->mu);
    w->prefix_frozen = on;
    pthread_mutex_unlock(&w->mu);
    return LS_OK;
}

bool ls_trace_writer_prefix_frozen(ls_trace_writer *w) {
    if (w == NULL) return false;
    pthread_mutex_lock(&w->mu);
    bool on = w->prefix_frozen;
    pthread_mutex_unlock(&w->mu);
    return on;
}
