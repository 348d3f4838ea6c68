/* run_files.c - safe reads under an untrusted run directory. */
#include "audit/model/run_files.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "receipts/format/digest.h"
#include "receipts/writing/receipt.h"

int ls_audit_rel_ok(const char *rel) { return ls_receipt_relpath_ok(rel); }

ls_status ls_audit_path(const char *run_dir, const char *rel, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s/%s", run_dir, rel);
    return n < 0 || (size_t)n >= cap ? LS_ERR_ARG : LS_OK;
}

ls_status ls_audit_stat(const char *run_dir, const char *rel, uint64_t max_bytes, uint64_t *size, char *err,
                        size_t err_len) {
    if (!ls_audit_rel_ok(rel)) {
        snprintf(err, err_len, "%.200s: not a safe path inside the run directory", rel ? rel : "(null)");
        return LS_ERR_FORMAT;
    }
    char path[4096];
    if (ls_audit_path(run_dir, rel, path, sizeof path) != LS_OK) {
        snprintf(err, err_len, "%.200s: path too long", rel);
        return LS_ERR_FORMAT;
    }
    struct stat st;
    if (lstat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "%.200s: the run directory is not a directory", run_dir);
        return LS_ERR_IO;
    }
    size_t base = strlen(run_dir) + 1;
    for (char *p = path + base;; p++) { /* every component, without following links */
        char c = *p;
        if (c != '/' && c != 0) continue;
        *p = 0;
        int r = lstat(path, &st);
        *p = c;
        if (r != 0) {
            snprintf(err, err_len, "%.200s: %s", rel, strerror(errno));
            return LS_ERR_IO;
        }
        if (S_ISLNK(st.st_mode)) {
            snprintf(err, err_len, "%.200s: a symbolic link (never followed)", rel);
            return LS_ERR_FORMAT;
        }
        if (c == '/' && !S_ISDIR(st.st_mode)) {
            snprintf(err, err_len, "%.200s: a component is not a directory", rel);
            return LS_ERR_FORMAT;
        }
        if (c == 0) break;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, err_len, "%.200s: not a regular file", rel);
        return LS_ERR_FORMAT;
    }
    if (max_bytes && (uint64_t)st.st_size > max_bytes) {
        snprintf(err, err_len, "%.200s: %llu bytes, above the cap of %llu", rel, (unsigned long long)st.st_size,
                 (unsigned long long)max_bytes);
        return LS_ERR_FORMAT;
    }
    if (size) *size = (uint64_t)st.st_size;
    return LS_OK;
}

int ls_audit_dir_ok(const char *run_dir) {
    struct stat st;
    return run_dir != NULL && lstat(run_dir, &st) == 0 && S_ISDIR(st.st_mode);
}

int ls_audit_open(const char *run_dir, const char *rel, uint64_t max_bytes, uint64_t *size, ls_status *status,
                  char *err, size_t err_len) {
    ls_status dummy;
    if (status == NULL) status = &dummy;
    *status = LS_ERR_FORMAT;
    if (!ls_audit_rel_ok(rel)) {
        snprintf(err, err_len, "%.200s: not a safe path inside the run directory", rel ? rel : "(null)");
        return -1;
    }
    char comp[4096];
    if (strlen(rel) >= sizeof comp) {
        snprintf(err, err_len, "%.200s: path too long", rel);
        return -1;
    }
    int dfd = open(run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(err, err_len, "%.200s: the run directory is not a directory (%s)", run_dir, strerror(errno));
        *status = LS_ERR_IO;
        return -1;
    }
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        memcpy(comp, p, n);
        comp[n] = 0;
        int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (slash ? O_DIRECTORY : O_NONBLOCK | O_NOCTTY);
        int fd = openat(dfd, comp, flags);
        int e = errno;
        close(dfd);
        if (fd < 0) {
            if (e == ELOOP) snprintf(err, err_len, "%.200s: a symbolic link (never followed)", rel);
            else if (e == ENOTDIR) snprintf(err, err_len, "%.200s: a component is not a directory", rel);
            else snprintf(err, err_len, "%.200s: %s", rel, strerror(e));
            *status = e == ENOENT || e == EACCES ? LS_ERR_IO : LS_ERR_FORMAT;
            return -1;
        }
        if (slash == NULL) {
            dfd = fd;
            break;
        }
        dfd = fd;
        p = slash + 1;
    }
    struct stat st;
    if (fstat(dfd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, err_len, "%.200s: not a regular file", rel);
        close(dfd);
        return -1;
    }
    if (max_bytes && (uint64_t)st.st_size > max_bytes) {
        snprintf(err, err_len, "%.200s: %llu bytes, above the cap of %llu", rel, (unsigned long long)st.st_size,
                 (unsigned long long)max_bytes);
        close(dfd);
        return -1;
    }
    int fl = fcntl(dfd, F_GETFL);
    if (fl >= 0) fcntl(dfd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = (uint64_t)st.st_size;
    *status = LS_OK;
    return dfd;
}

ls_status ls_audit_digest(const char *run_dir, const char *rel, char hex[65], char *err, size_t err_len) {
    ls_status st = LS_OK;
    int fd = ls_audit_open(run_dir, rel, 0, NULL, &st, err, err_len);
    if (fd < 0) return st;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc((size_t)64 << 10);
    st = LS_ERR_NOMEM;
    if (ctx == NULL || buf == NULL) goto cleanup;
    st = LS_ERR_INTERNAL;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) goto cleanup;
    for (;;) {
        ssize_t n = read(fd, buf, (size_t)64 << 10);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(err, err_len, "%.200s: %s", rel, strerror(errno));
            st = LS_ERR_IO;
            goto cleanup;
        }
        if (n == 0) break;
        if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) goto cleanup;
    }
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32) goto cleanup;
    ls_digest_hex(md, 32, hex);
    st = LS_OK;
cleanup:
    if (st == LS_ERR_INTERNAL) snprintf(err, err_len, "%.200s: sha256 failed", rel);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    return st;
}

ls_status ls_audit_read(const char *run_dir, const char *rel, uint64_t max_bytes, char **out, size_t *len,
                        char *err, size_t err_len) {
    *out = NULL;
    if (len) *len = 0;
    uint64_t size = 0;
    ls_status s = LS_OK;
    int fd = ls_audit_open(run_dir, rel, max_bytes, &size, &s, err, err_len);
    if (fd < 0) return s;
    char *buf = malloc((size_t)size + 2);
    if (!buf) {
        close(fd);
        snprintf(err, err_len, "%.200s: out of memory for %llu bytes", rel, (unsigned long long)size);
        return LS_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < (size_t)size + 1) { /* one byte more than stat said: a file that grew is refused */
        ssize_t n = read(fd, buf + got, (size_t)size + 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(err, err_len, "%.200s: %s", rel, strerror(errno));
            free(buf);
            close(fd);
            return LS_ERR_IO;
        }
        if (n == 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (got != (size_t)size) {
        snprintf(err, err_len, "%.200s: changed while read (%zu bytes, %llu expected)", rel, got,
                 (unsigned long long)size);
        free(buf);
        return LS_ERR_IO;
    }
    buf[got] = 0;
    *out = buf;
    if (len) *len = got;
    return LS_OK;
}

/* ---- one read -------------------------------------------------------------- */

ls_status ls_audit_reads_note(ls_audit_reads *t, const char *rel, const uint8_t sha[32], uint64_t bytes) {
    if (t == NULL) return LS_OK;
    char hex[LS_DIGEST_HEX_SIZE];
    ls_digest_hex(sha, 32, hex);
    const ls_audit_read_record *old = ls_audit_reads_find(t, rel);
    if (old != NULL) {
        if (strcmp(old->sha256, hex) != 0) t->failed = true; /* read twice, other bytes: nothing verifies */
        return LS_OK;
    }
    if (strlen(rel) >= sizeof t->v[0].rel) {
        t->failed = true;
        return LS_OK;
    }
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        ls_audit_read_record *n = realloc(t->v, ncap * sizeof *n);
        if (n == NULL) {
            t->failed = true;
            return LS_ERR_NOMEM;
        }
        t->v = n;
        t->cap = ncap;
    }
    ls_audit_read_record *r = &t->v[t->n++];
    snprintf(r->rel, sizeof r->rel, "%s", rel);
    memcpy(r->sha256, hex, sizeof r->sha256);
    r->bytes = bytes;
    return LS_OK;
}

const ls_audit_read_record *ls_audit_reads_find(const ls_audit_reads *t, const char *rel) {
    for (size_t i = 0; t != NULL && i < t->n; i++) /* a run holds a few files a rank: a scan is enough */
        if (strcmp(t->v[i].rel, rel) == 0) return &t->v[i];
    return NULL;
}

ls_status ls_audit_reads_same(const ls_audit_reads *t, const char *rel, const uint8_t sha[32], char *err,
                              size_t err_len) {
    char hex[LS_DIGEST_HEX_SIZE];
    ls_digest_hex(sha, 32, hex);
    const ls_audit_read_record *r = ls_audit_reads_find(t, rel);
    if (r == NULL) {
        snprintf(err, err_len, "%.200s: the audit did not read it: nothing it shows is part of the verdict", rel);
        return LS_ERR_FORMAT;
    }
    if (strcmp(r->sha256, hex) != 0) {
        snprintf(err, err_len, "%.200s: changed while the audit ran (sha256 %.16s... when judged, %.16s... now): "
                 "refused", rel, r->sha256, hex);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

void ls_audit_reads_free(ls_audit_reads *t) {
    if (t == NULL) return;
    free(t->v);
    memset(t, 0, sizeof *t);
}

ls_status ls_audit_read_noted(ls_audit_reads *t, const char *run_dir, const char *rel, uint64_t max_bytes,
                              char **out, size_t *len, char *err, size_t err_len) {
    size_t n = 0;
    ls_status st = ls_audit_read(run_dir, rel, max_bytes, out, &n, err, err_len);
    if (len) *len = n;
    if (st != LS_OK || t == NULL) return st;
    uint8_t sha[32];
    if (ls_digest_sha256(*out, n, sha) != LS_OK) {
        t->failed = true;
        return LS_OK;
    }
    return ls_audit_reads_note(t, rel, sha, n);
}
