/* trace_writer.c - one rank's trace writer: JSON Lines text built in a
 * buffer, written plain or as one zstd frame per flush (see trace_writer.h).
 *
 * Every event is built directly at the end of the text buffer between
 * begin_event() and end_event(); a refusal found while building rolls the
 * buffer back to where the event started, so a refused event leaves no
 * trace and consumes no seq. */
#include "receipts/trace_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#define DEFAULT_FLUSH_BYTES ((size_t)1 << 20)
/* Frames stay small enough (flush_bytes + one line <= 3 MiB) for the reader
 * to hold a whole frame until its checksum verifies (trace_reader.h). */
#define MAX_FLUSH_BYTES ((size_t)2 << 20)
#define DEFAULT_LEVEL 3
#define MAX_JSON_DEPTH 512

struct ls_trace_writer {
    pthread_mutex_t mu;
    int fd;
    char *path;
    bool compressed;
    ZSTD_CCtx *cctx;
    char *zbuf;              /* compressed output of one flush */
    size_t zcap;
    char *buf;               /* pending text */
    size_t len, cap;
    size_t flush_bytes;
    size_t mark;             /* where the event being built starts */
    bool overflow;           /* the event being built passed LS_TRACE_MAX_LINE */
    bool nomem;              /* growing the buffer failed while building */
    int64_t rank;
    int64_t seq;             /* next seq */
    int64_t t0_ns;           /* CLOCK_MONOTONIC at open */
    int64_t last_ts;
    int64_t pending_ts;
    bool complete;           /* rank_complete written */
    ls_status sticky;        /* first I/O or compression failure */
    locale_t c_locale;
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

/* Grows buf so that `extra` more bytes fit; false (and w->nomem or
 * w->overflow set) when the event would pass the line cap or memory ran out. */
static bool reserve(ls_trace_writer *w, size_t extra) {
    if (w->overflow || w->nomem) return false;
    if (w->len - w->mark + extra > LS_TRACE_MAX_LINE) {
        w->overflow = true;
        return false;
    }
    if (w->len + extra <= w->cap) return true;
    size_t ncap = w->cap ? w->cap : 4096;
    while (ncap < w->len + extra) ncap *= 2;
    char *nb = realloc(w->buf, ncap);
    if (nb == NULL) {
        w->nomem = true;
        return false;
    }
    w->buf = nb;
    w->cap = ncap;
    return true;
}

static void put_raw(ls_trace_writer *w, const char *s, size_t n) {
    if (!reserve(w, n)) return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void put_lit(ls_trace_writer *w, const char *s) { put_raw(w, s, strlen(s)); }

static void put_i64(ls_trace_writer *w, int64_t v) {
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[sizeof tmp - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[sizeof tmp - 1 - n++] = '-';
    put_raw(w, tmp + sizeof tmp - n, n);
}

/* Finite doubles only (callers check): %.15g when strtod reads that back
 * exactly (short text for "round" values such as 0.1 or 3e-4), else %.17g
 * (always exact); formatted and parsed in the "C" locale. */
static void put_f64(ls_trace_writer *w, double v) {
    char tmp[40];
    locale_t old = uselocale(w->c_locale);
    snprintf(tmp, sizeof tmp, "%.15g", v);
    if (strtod(tmp, NULL) != v) snprintf(tmp, sizeof tmp, "%.17g", v);
    uselocale(old);
    put_lit(w, tmp);
}

/* A JSON string: escapes quotes, backslashes and control characters;
 * invalid UTF-8 bytes become U+FFFD. */
static void put_str(ls_trace_writer *w, const char *s) {
    static const char HEX[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    put_raw(w, "\"", 1);
    size_t run = 0; /* bytes copied verbatim since the last escape */
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            run++;
            i++;
            continue;
        }
        size_t ul = c >= 0x80 ? ls_trace_utf8_len(p + i, n - i) : 0;
        if (ul > 0) {
            run += ul;
            i += ul;
            continue;
        }
        put_raw(w, (const char *)p + i - run, run);
        run = 0;
        char esc[7];
        switch (c) {
        case '"': put_raw(w, "\\\"", 2); break;
        case '\\': put_raw(w, "\\\\", 2); break;
        case '\n': put_raw(w, "\\n", 2); break;
        case '\t': put_raw(w, "\\t", 2); break;
        case '\r': put_raw(w, "\\r", 2); break;
        default:
            if (c >= 0x80) {
                put_raw(w, "\\ufffd", 6);
            } else {
                memcpy(esc, "\\u00", 4);
                esc[4] = HEX[c >> 4];
                esc[5] = HEX[c & 15];
                put_raw(w, esc, 6);
            }
        }
        i++;
    }
    put_raw(w, (const char *)p + n - run, run);
    put_raw(w, "\"", 1);
}

static void key(ls_trace_writer *w, const char *k) {
    put_raw(w, ",\"", 2);
    put_lit(w, k);
    put_raw(w, "\":", 2);
}
static void key_i64(ls_trace_writer *w, const char *k, int64_t v) { key(w, k); put_i64(w, v); }
static void key_f64(ls_trace_writer *w, const char *k, double v) { key(w, k); put_f64(w, v); }
static void key_str(ls_trace_writer *w, const char *k, const char *v) { key(w, k); put_str(w, v); }
static void key_bool(ls_trace_writer *w, const char *k, bool v) { key(w, k); put_lit(w, v ? "true" : "false"); }

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

/* Writes the pending text (one complete zstd frame when compressed).
 * Caller holds the lock. */
static ls_status do_flush(ls_trace_writer *w) {
    if (w->sticky != LS_OK) return w->sticky;
    if (w->len == 0) return LS_OK;
    ls_status st = LS_OK;
    if (!w->compressed) {
        st = write_all(w, w->buf, w->len);
    } else {
        size_t r = ZSTD_CCtx_setPledgedSrcSize(w->cctx, w->len);
        if (ZSTD_isError(r)) {
            seterr(w, "%s: zstd: %s", w->path, ZSTD_getErrorName(r));
            st = LS_ERR_INTERNAL;
        }
        ZSTD_inBuffer in = {w->buf, w->len, 0};
        while (st == LS_OK) {
            ZSTD_outBuffer out = {w->zbuf, w->zcap, 0};
            r = ZSTD_compressStream2(w->cctx, &out, &in, ZSTD_e_end);
            if (ZSTD_isError(r)) {
                seterr(w, "%s: zstd: %s", w->path, ZSTD_getErrorName(r));
                st = LS_ERR_INTERNAL;
                break;
            }
            st = write_all(w, w->zbuf, out.pos);
            if (r == 0) break;
        }
    }
    w->len = 0;
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
    w->mark = w->len;
    w->overflow = w->nomem = false;
    int64_t ts = mono_ns() - w->t0_ns;
    if (ts < w->last_ts) ts = w->last_ts;
    w->pending_ts = ts;
    put_lit(w, "{\"v\":1,\"rank\":");
    put_i64(w, w->rank);
    put_lit(w, ",\"seq\":");
    put_i64(w, w->seq);
    put_lit(w, ",\"ts_ns\":");
    put_i64(w, ts);
    put_lit(w, ",\"ev\":");
    put_str(w, kind);
}

/* Closes the event: commits it (seq, ts) or rolls it back when it did not
 * fit; flushes when asked or when the buffer passed the threshold. */
static ls_status end_event(ls_trace_writer *w, bool flush) {
    put_raw(w, "}\n", 2);
    if (w->overflow || w->nomem) {
        w->len = w->mark;
        bool over = w->overflow;
        w->overflow = w->nomem = false;
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
    if (flush || w->len >= w->flush_bytes) return do_flush(w);
    return LS_OK;
}

/* ---- open / close --------------------------------------------------------- */

static void writer_free(ls_trace_writer *w) {
    if (w == NULL) return;
    if (w->fd >= 0) close(w->fd);
    ZSTD_freeCCtx(w->cctx);
    if (w->c_locale != (locale_t)0) freelocale(w->c_locale);
    for (size_t i = 0; i < w->n_groups; i++) free(w->groups[i]);
    free(w->groups);
    free(w->zbuf);
    free(w->buf);
    free(w->path);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* Header checks; prints the first problem to stderr. */
static ls_status check_header(const char *path, const ls_trace_header *h, const char *host) {
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

static void put_header(ls_trace_writer *w, const ls_trace_header *h, const char *host, int64_t pid,
                       int64_t start_ns) {
    w->mark = w->len;
    put_lit(w, "{\"v\":1,\"kind\":\"" LS_TRACE_HEADER_KIND "\",\"schema\":\"" LS_TRACE_HEADER_SCHEMA "\"");
    key_str(w, "run_id", h->run_id);
    key_i64(w, "rank", h->rank);
    key_i64(w, "world", h->world);
    key_str(w, "host", host);
    key_i64(w, "pid", pid);
    key_i64(w, "start_unix_ns", start_ns);
    key(w, "groups");
    put_raw(w, "[", 1);
    for (size_t g = 0; g < h->n_groups; g++) {
        put_lit(w, g ? ",{\"name\":" : "{\"name\":");
        put_str(w, h->groups[g].name);
        put_lit(w, ",\"members\":[");
        for (size_t m = 0; m < h->groups[g].n_members; m++) {
            if (m) put_raw(w, ",", 1);
            put_i64(w, h->groups[g].members[m]);
        }
        put_lit(w, "]}");
    }
    put_raw(w, "]", 1);
    key_str(w, "tool", h->tool ? h->tool : "longstraw");
    put_raw(w, "}\n", 2);
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
    if (level < 1 || level > 19 || flush_bytes > MAX_FLUSH_BYTES) {
        fprintf(stderr, "%s: trace writer: zstd_level must be 1..19 and flush_bytes <= 2 MiB\n", path);
        return LS_ERR_ARG;
    }
    char hostbuf[256];
    const char *host = h->host;
    if (host == NULL) {
        if (gethostname(hostbuf, sizeof hostbuf) != 0) snprintf(hostbuf, sizeof hostbuf, "unknown");
        hostbuf[sizeof hostbuf - 1] = '\0';
        host = hostbuf;
    }
    ls_status st = check_header(path, h, host);
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
    w->compressed = ends_with(path, ".zst");
    w->path = strdup(path);
    w->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    w->groups = h->n_groups ? calloc(h->n_groups, sizeof *w->groups) : NULL;
    st = LS_ERR_NOMEM;
    if (w->path == NULL || w->c_locale == (locale_t)0 || (h->n_groups && w->groups == NULL)) goto cleanup;
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
            ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1))) {
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
    put_header(w, h, host, pid, start_ns);
    if (w->overflow || w->nomem) {
        fprintf(stderr, "%s: trace header %s\n", path, w->overflow ? "longer than 1 MiB" : "out of memory");
        st = w->overflow ? LS_ERR_ARG : LS_ERR_NOMEM;
        goto cleanup;
    }
    st = do_flush(w);
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
    ls_status st = do_flush(w);
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
    ls_status st = do_flush(w);
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
    key_str(w, "phase", phase);
    key_i64(w, "step", step);
    return end_event(w, true);
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
    key_str(w, "phase", phase);
    key_i64(w, "step", step);
    key_i64(w, "wall_ns", wall_ns);
    key_bool(w, "ok", ok);
    return end_event(w, true);
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
    key_str(w, "phase", e->phase);
    key_i64(w, "step", e->step);
    key_i64(w, "member", e->member);
    key_i64(w, "layer", e->layer);
    key_str(w, "kind", ls_trace_layer_kind_name(e->kind));
    key_str(w, "dir", ls_trace_dir_name(e->dir));
    key_i64(w, "tokens", e->tokens);
    key_i64(w, "live_bytes", e->live_bytes);
    key_i64(w, "peak_bytes", e->peak_bytes);
    key_i64(w, "wall_ns", e->wall_ns);
    key_f64(w, "out_norm", e->out_norm);
    return end_event(w, false);
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
    if (st == LS_OK) st = chk_enum(w, K, "op", (int)c->op, LS_TRACE_OP_COUNT);
    if (st == LS_OK) st = chk_enum(w, K, "red", (int)c->red, LS_TRACE_RED_COUNT);
    if (st == LS_OK) st = chk_int(w, K, "count", c->count, 0);
    if (st == LS_OK) st = chk_enum(w, K, "dtype", (int)c->dtype, LS_TRACE_DTYPE_COUNT);
    if (st == LS_OK) st = chk_int(w, K, "bytes", c->bytes, 0);
    if (st == LS_OK) st = chk_ident(w, K, "purpose", c->purpose);
    if (st == LS_OK && c->has_layer) st = chk_int(w, K, "layer", c->layer, -1);
    if (st != LS_OK) return st;
    begin_event(w, K);
    key_str(w, "group", c->group);
    key_i64(w, "gseq", c->gseq);
    key_str(w, "op", ls_trace_op_name(c->op));
    key_str(w, "red", ls_trace_red_name(c->red));
    key_i64(w, "count", c->count);
    key_str(w, "dtype", ls_trace_dtype_name(c->dtype));
    key_i64(w, "bytes", c->bytes);
    key_str(w, "purpose", c->purpose);
    if (c->has_layer) key_i64(w, "layer", c->layer);
    return end_event(w, false);
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
    key_i64(w, "step", step);
    key_i64(w, "n_params", n_params);
    key_f64(w, "lr", lr);
    key_f64(w, "grad_norm", grad_norm);
    return end_event(w, false);
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
    key_i64(w, "step", step);
    key_str(w, "target", target);
    key_str(w, "sha256", hex);
    return end_event(w, false);
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
    key_i64(w, "step", m->step);
    key_str(w, "phase", m->phase);
    key(w, "categories");
    put_raw(w, "{", 1);
    for (size_t i = 0; i < m->n_categories; i++) {
        if (i) put_raw(w, ",", 1);
        put_str(w, m->categories[i].name);
        put_lit(w, ":{\"live\":");
        put_i64(w, m->categories[i].live);
        put_lit(w, ",\"peak\":");
        put_i64(w, m->categories[i].peak);
        put_raw(w, "}", 1);
    }
    put_raw(w, "}", 1);
    key_i64(w, "total_live", m->total_live);
    key_i64(w, "total_peak", m->total_peak);
    key_i64(w, "rss_peak", m->rss_peak);
    return end_event(w, false);
}

ls_status ls_trace_emit_memory(ls_trace_writer *w, const ls_trace_memory *m) {
    LOCKED_EMIT(w, "memory", memory_locked(w, m));
}

static ls_status error_locked(ls_trace_writer *w, ls_status code, const char *message) {
    ls_status st = chk_int(w, "error", "code", (int64_t)code, 0);
    if (st != LS_OK) return st;
    begin_event(w, "error");
    key_i64(w, "code", (int64_t)code);
    key_str(w, "status", ls_status_str(code));
    key_str(w, "message", message ? message : "");
    return end_event(w, true);
}

ls_status ls_trace_emit_error(ls_trace_writer *w, ls_status code, const char *message) {
    LOCKED_EMIT(w, "error", error_locked(w, code, message));
}

static ls_status complete_locked(ls_trace_writer *w, int64_t steps) {
    ls_status st = chk_int(w, "rank_complete", "steps", steps, 0);
    if (st != LS_OK) return st;
    begin_event(w, "rank_complete");
    key_i64(w, "steps", steps);
    key_i64(w, "events", w->seq);
    st = end_event(w, true);
    if (st == LS_OK) w->complete = true;
    return st;
}

ls_status ls_trace_emit_rank_complete(ls_trace_writer *w, int64_t steps) {
    LOCKED_EMIT(w, "rank_complete", complete_locked(w, steps));
}

/* ---- generic emitter ------------------------------------------------------ */

/* Checks a borrowed cJSON value before writing: finite numbers, no raw
 * items, no repeated keys, bounded depth.  `where` names the field. */
static ls_status chk_json(ls_trace_writer *w, const char *kind, const char *where, const cJSON *v,
                          int depth) {
    if (depth > MAX_JSON_DEPTH) {
        seterr(w, "%s.%s: nested deeper than %d", kind, where, MAX_JSON_DEPTH);
        return LS_ERR_ARG;
    }
    if (cJSON_IsNumber(v)) {
        if (isfinite(v->valuedouble)) return LS_OK;
        seterr(w, "%s.%s: non-finite value refused", kind, where);
        return LS_ERR_NONFINITE;
    }
    if (cJSON_IsRaw(v) || cJSON_IsInvalid(v)) {
        seterr(w, "%s.%s: raw or invalid cJSON item refused", kind, where);
        return LS_ERR_ARG;
    }
    if (cJSON_IsString(v) && v->valuestring == NULL) {
        seterr(w, "%s.%s: string without value", kind, where);
        return LS_ERR_ARG;
    }
    bool obj = cJSON_IsObject(v);
    for (const cJSON *c = (obj || cJSON_IsArray(v)) ? v->child : NULL; c; c = c->next) {
        if (obj) {
            if (c->string == NULL) {
                seterr(w, "%s.%s: object member without a key", kind, where);
                return LS_ERR_ARG;
            }
            for (const cJSON *d = v->child; d != c; d = d->next)
                if (strcmp(d->string, c->string) == 0) {
                    seterr(w, "%s.%s: key \"%s\" repeats", kind, where, c->string);
                    return LS_ERR_ARG;
                }
        }
        ls_status st = chk_json(w, kind, obj ? c->string : where, c, depth + 1);
        if (st != LS_OK) return st;
    }
    return LS_OK;
}

static void put_json(ls_trace_writer *w, const cJSON *v) {
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) <= (double)LS_TRACE_MAX_INT) put_i64(w, (int64_t)d);
        else put_f64(w, d);
    } else if (cJSON_IsString(v)) {
        put_str(w, v->valuestring);
    } else if (cJSON_IsTrue(v)) {
        put_lit(w, "true");
    } else if (cJSON_IsFalse(v)) {
        put_lit(w, "false");
    } else if (cJSON_IsNull(v)) {
        put_lit(w, "null");
    } else {
        bool obj = cJSON_IsObject(v);
        put_raw(w, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) put_raw(w, ",", 1);
            if (obj) {
                put_str(w, c->string);
                put_raw(w, ":", 1);
            }
            put_json(w, c);
        }
        put_raw(w, obj ? "}" : "]", 1);
    }
}

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
    ls_status st = fields ? chk_json(w, kind, "(fields)", fields, 1) : LS_OK;
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
        put_raw(w, ",", 1);
        put_str(w, c->string);
        put_raw(w, ":", 1);
        put_json(w, c);
    }
    bool flush = k == LS_TRACE_PHASE_BEGIN || k == LS_TRACE_PHASE_END || k == LS_TRACE_ERROR ||
                 k == LS_TRACE_RANK_COMPLETE;
    st = end_event(w, flush);
    if (st == LS_OK && k == LS_TRACE_RANK_COMPLETE) w->complete = true;
    return st;
}

ls_status ls_trace_emit_json(ls_trace_writer *w, const char *kind, const cJSON *fields) {
    LOCKED_EMIT(w, "event", json_locked(w, kind, fields));
}
