/* run_files.c - safe reads under an untrusted run directory. */
#include "audit/run_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipts/receipt.h"

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

ls_status ls_audit_read(const char *run_dir, const char *rel, uint64_t max_bytes, char **out, size_t *len,
                        char *err, size_t err_len) {
    *out = NULL;
    if (len) *len = 0;
    uint64_t size = 0;
    ls_status s = ls_audit_stat(run_dir, rel, max_bytes, &size, err, err_len);
    if (s != LS_OK) return s;
    char path[4096];
    ls_audit_path(run_dir, rel, path, sizeof path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_len, "%.200s: %s", rel, strerror(errno));
        return LS_ERR_IO;
    }
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
