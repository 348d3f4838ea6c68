/* rollouts.c - the rollouts JSONL (batch.h): one line parsed into a batch,
 * the streaming reader over a path, standard input or a descriptor, and the
 * line count of a rollouts file. */
#include "trainer/io/batch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/io/batch_json.h"

static const char *const ROLLOUT_KEYS[] = {"prompt", "responses", "rewards", "old_logprobs", "ref_logprobs"};

static ls_status parse_rollout(ls_batch **out, const cJSON *doc, int vocab, const char *where, char *err,
                               size_t err_len) {
    ls_batch *b = NULL;
    if (!cJSON_IsObject(doc)) {
        FIELD_ERR("%.400s: not a JSON object", where);
        return LS_ERR_FORMAT;
    }
    ls_status st = ls_batch_json_only_keys(doc, ROLLOUT_KEYS, sizeof ROLLOUT_KEYS / sizeof *ROLLOUT_KEYS, where,
                                           "field", err, err_len);
    if (st == LS_OK) st = ls_batch_json_tokens(doc, vocab, where, &b, err, err_len);
    if (st != LS_OK) return st;
    st = ls_batch_json_reals(cJSON_GetObjectItemCaseSensitive(doc, "rewards"), b->G, 0, where, "rewards",
                             b->rewards, err, err_len);
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(doc, "old_logprobs");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(doc, "ref_logprobs");
    if (st == LS_OK && old) st = ls_batch_json_lp_rows(old, b, where, "old_logprobs", b->old_lp, err, err_len);
    if (st == LS_OK && ref) st = ls_batch_json_lp_rows(ref, b, where, "ref_logprobs", b->ref_lp, err, err_len);
    if (st != LS_OK) {
        ls_batch_free(b);
        return st;
    }
    b->old_supplied = old != NULL;
    b->ref_supplied = ref != NULL;
    *out = b;
    return LS_OK;
}

/* One line (no newline) of at most the limit; `at` is "WHERE: line N". */
static ls_status parse_line(ls_batch **out, const char *line, size_t len, const char *at, int vocab, char *err,
                            size_t err_len) {
    cJSON *doc = NULL;
    ls_status st = ls_json_parse(line, len, at, &doc, err, err_len);
    if (st != LS_OK) return st;
    st = parse_rollout(out, doc, vocab, at, err, err_len);
    cJSON_Delete(doc);
    return st;
}

ls_status ls_batch_parse_rollouts(ls_batch **out, const char *buf, size_t len, const char *where, int vocab,
                                  size_t max_line, char *err, size_t err_len) {
    char at[480];
    *out = NULL;
    if (!where) where = "rollouts";
    if (vocab < 1 || (!buf && len > 0)) {
        FIELD_ERR("%.400s: bad arguments (vocab %d)", where, vocab);
        return LS_ERR_ARG;
    }
    if (max_line == 0) max_line = LS_BATCH_MAX_LINE;
    snprintf(at, sizeof at, "%.400s: line 1", where);
    const char *nl = len ? memchr(buf, '\n', len) : NULL;
    size_t line = nl ? (size_t)(nl - buf) : len;
    if (line > max_line) {
        FIELD_ERR("%s: longer than %zu bytes (the rollouts line limit)", at, max_line);
        return LS_ERR_FORMAT;
    }
    if (line == 0) {
        FIELD_ERR("%s: empty (a rollouts file starts with one JSON object)", at);
        return LS_ERR_FORMAT;
    }
    return parse_line(out, buf, line, at, vocab, err, err_len);
}

/* ---- the streaming reader ------------------------------------------------
 * buf[start..end) holds what was read and not yet consumed: the current
 * line's bytes, then whatever the last read(2) brought after it.  Never more
 * than max_line + 1 bytes are held, so a refused line has had at most that
 * many of its bytes read.  buf[start..start+scanned) holds no newline. */
#define READ_PIECE ((size_t)64 << 10)

struct ls_rollouts_reader {
    int fd, own_fd;
    char name[408];
    int vocab;
    size_t max_line, read_size;
    char *buf;
    size_t cap, start, end, scanned;
    size_t line;
    uint64_t bytes;
    int eof;
    ls_status failed; /* sticky: the first error */
    ls_digest_stream *digest; /* of the lines handed out, newlines included */
    uint64_t consumed;        /* their bytes */
};

ls_status ls_rollouts_open_fd(ls_rollouts_reader **out, int fd, const char *name, int vocab, size_t max_line,
                              char *err, size_t err_len) {
    *out = NULL;
    if (!name) name = "rollouts";
    if (fd < 0 || vocab < 1) {
        FIELD_ERR("%.400s: bad arguments (descriptor %d, vocab %d)", name, fd, vocab);
        return LS_ERR_ARG;
    }
    ls_rollouts_reader *r = ls_mem_alloc(LS_MEM_SCRATCH, sizeof *r);
    if (!r) return LS_ERR_NOMEM;
    memset(r, 0, sizeof *r);
    if (ls_digest_stream_open(&r->digest) != LS_OK) {
        FIELD_ERR("%.400s: cannot start the digest of its bytes", name);
        ls_mem_free(r);
        return LS_ERR_NOMEM;
    }
    r->fd = fd;
    snprintf(r->name, sizeof r->name, "%.400s", name);
    r->vocab = vocab;
    r->max_line = max_line == 0 || max_line > SIZE_MAX / 4 ? LS_BATCH_MAX_LINE : max_line;
    r->read_size = READ_PIECE;
    *out = r;
    return LS_OK;
}

ls_status ls_rollouts_open(ls_rollouts_reader **out, const char *path, int vocab, size_t max_line, char *err,
                           size_t err_len) {
    *out = NULL;
    if (!path) {
        FIELD_ERR("rollouts: no path");
        return LS_ERR_ARG;
    }
    if (strcmp(path, "-") == 0) return ls_rollouts_open_fd(out, STDIN_FILENO, "<stdin>", vocab, max_line, err, err_len);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        FIELD_ERR("%.400s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    ls_status st = ls_rollouts_open_fd(out, fd, path, vocab, max_line, err, err_len);
    if (st != LS_OK) close(fd);
    else (*out)->own_fd = 1;
    return st;
}

/* read(2), retried on EINTR and waited for when the descriptor is
 * non-blocking. */
static ssize_t read_some(int fd, char *dst, size_t n) {
    for (;;) {
        ssize_t got = read(fd, dst, n);
        if (got >= 0) return got;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, -1) >= 0 || errno == EINTR) continue;
        }
        return -1;
    }
}

/* One read(2) more into the buffer (held bytes < max_line + 1 on entry). */
static ls_status fill(ls_rollouts_reader *r, char *err, size_t err_len) {
    size_t held = r->end - r->start, limit = r->max_line + 1;
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, held);
        r->start = 0;
        r->end = held;
    }
    if (r->end == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : READ_PIECE;
        if (ncap > limit) ncap = limit;
        char *nb = ls_mem_realloc(LS_MEM_SCRATCH, r->buf, ncap);
        if (!nb) {
            FIELD_ERR("%s: line %zu: cannot hold %zu bytes of it", r->name, r->line + 1, ncap);
            return LS_ERR_NOMEM;
        }
        r->buf = nb;
        r->cap = ncap;
    }
    size_t want = r->cap - r->end;
    if (want > r->read_size) want = r->read_size;
    ssize_t got = read_some(r->fd, r->buf + r->end, want);
    if (got < 0) {
        FIELD_ERR("%s: line %zu: read error: %s", r->name, r->line + 1, strerror(errno));
        return LS_ERR_IO;
    }
    if (got == 0) r->eof = 1;
    r->end += (size_t)got;
    r->bytes += (uint64_t)got;
    return LS_OK;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* The next line into *line / *len (no newline); *len = SIZE_MAX at the end. */
static ls_status next_line(ls_rollouts_reader *r, const char **line, size_t *len, char *err, size_t err_len) {
    for (;;) {
        size_t held = r->end - r->start;
        const char *from = r->buf ? r->buf + r->start : NULL; /* NULL before the first read */
        const char *nl = held > r->scanned ? memchr(from + r->scanned, '\n', held - r->scanned) : NULL;
        if (nl || (r->eof && held <= r->max_line)) {
            size_t n = nl ? (size_t)(nl - from) : held;
            *line = from;
            if (!nl && n == 0) {
                *len = SIZE_MAX;
                return LS_OK;
            }
            *len = n;
            r->line++;
            size_t used = n + (nl != NULL); /* the line and its newline */
            if (ls_digest_stream_update(r->digest, from, used) != LS_OK) {
                FIELD_ERR("%s: line %zu: cannot digest its bytes", r->name, r->line);
                return LS_ERR_INTERNAL;
            }
            r->consumed += used;
            r->start += used;
            r->scanned = 0;
            return LS_OK;
        }
        r->scanned = held;
        if (held > r->max_line) {
            FIELD_ERR("%s: line %zu: longer than %zu bytes (the rollouts line limit)", r->name, r->line + 1,
                      r->max_line);
            r->line++;
            return LS_ERR_FORMAT;
        }
        ls_status st = fill(r, err, err_len);
        if (st != LS_OK) {
            r->line++; /* the line being read */
            return st;
        }
    }
}

ls_status ls_rollouts_next(ls_rollouts_reader *r, ls_batch **out, char *err, size_t err_len) {
    char at[480];
    *out = NULL;
    if (!r) {
        FIELD_ERR("rollouts: no reader");
        return LS_ERR_ARG;
    }
    if (r->failed != LS_OK) {
        FIELD_ERR("%s: line %zu: the reader stopped at this line's error", r->name, r->line);
        return r->failed;
    }
    for (;;) {
        const char *line = NULL;
        size_t len = 0;
        ls_status st = next_line(r, &line, &len, err, err_len);
        if (st == LS_OK && len == SIZE_MAX) return LS_OK; /* the end */
        if (st == LS_OK && blank(line, len)) continue;
        if (st == LS_OK) {
            snprintf(at, sizeof at, "%s: line %zu", r->name, r->line);
            st = parse_line(out, line, len, at, r->vocab, err, err_len);
        }
        if (st != LS_OK) r->failed = st;
        return st;
    }
}

size_t ls_rollouts_line(const ls_rollouts_reader *r) { return r ? r->line : 0; }

uint64_t ls_rollouts_bytes_read(const ls_rollouts_reader *r) { return r ? r->bytes : 0; }

ls_status ls_rollouts_digest(const ls_rollouts_reader *r, char hex[65], uint64_t *bytes) {
    if (!r || !hex || !bytes) return LS_ERR_ARG;
    *bytes = r->consumed;
    return ls_digest_stream_final_hex(r->digest, hex);
}

void ls_rollouts_set_read_size(ls_rollouts_reader *r, size_t n) {
    if (r) r->read_size = n ? n : 1;
}

void ls_rollouts_close(ls_rollouts_reader *r) {
    if (!r) return;
    if (r->own_fd) close(r->fd);
    ls_digest_stream_free(r->digest);
    ls_mem_free(r->buf);
    ls_mem_free(r);
}

ls_status ls_rollouts_count_lines(const char *path, size_t *lines, int *known, char *err, size_t err_len) {
    struct stat sb;
    char piece[4096];
    ls_status st = LS_OK;
    *lines = 0;
    *known = 0;
    if (!path) {
        FIELD_ERR("rollouts: no path");
        return LS_ERR_ARG;
    }
    if (strcmp(path, "-") == 0) return LS_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0) {
        FIELD_ERR("%.400s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    if (fstat(fd, &sb) != 0) {
        FIELD_ERR("%.400s: cannot stat: %s", path, strerror(errno));
        st = LS_ERR_IO;
        goto cleanup;
    }
    if (!S_ISREG(sb.st_mode)) goto cleanup;
    uint64_t left = (uint64_t)sb.st_size;
    size_t n = 0;
    int nonblank = 0;
    while (left > 0) {
        ssize_t got = read_some(fd, piece, left < sizeof piece ? (size_t)left : sizeof piece);
        if (got < 0) {
            FIELD_ERR("%.400s: read error: %s", path, strerror(errno));
            st = LS_ERR_IO;
            goto cleanup;
        }
        if (got == 0) break; /* shrank while read */
        for (ssize_t i = 0; i < got; i++) {
            char c = piece[i];
            if (c == '\n') {
                n += (size_t)nonblank;
                nonblank = 0;
            } else if (c != ' ' && c != '\t' && c != '\r') {
                nonblank = 1;
            }
        }
        left -= (uint64_t)got;
    }
    *lines = n + (size_t)nonblank;
    *known = 1;
cleanup:
    close(fd);
    return st;
}

ls_status ls_batch_read_rollouts_max(ls_batch **out, const char *path, int vocab, size_t max_line, char *err,
                                     size_t err_len) {
    ls_rollouts_reader *r = NULL;
    *out = NULL;
    ls_status st = ls_rollouts_open(&r, path, vocab, max_line, err, err_len);
    if (st == LS_OK) st = ls_rollouts_next(r, out, err, err_len);
    if (st == LS_OK && !*out) {
        FIELD_ERR("%.400s: no group (the file is empty or holds only blank lines)", path);
        st = LS_ERR_FORMAT;
    }
    ls_rollouts_close(r);
    return st;
}

ls_status ls_batch_read_rollouts(ls_batch **out, const char *path, int vocab, char *err, size_t err_len) {
    return ls_batch_read_rollouts_max(out, path, vocab, LS_BATCH_MAX_LINE, err, err_len);
}
