/* atomic_file.c - temp file + fsync + rename + directory fsync
 * (contract in atomic_file.h). */
#include "receipts/format/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One line into err (when err != NULL and errlen > 0), as ls_json_errf
 * does: this file stays below json_util, whose ls_json_write_file uses it. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* fsync of the directory holding path, so the rename itself is durable.
 * Filesystems that cannot fsync a directory (EINVAL) are accepted. */
static int fsync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = NULL;
    if (slash == NULL) dir = strdup(".");
    else if (slash == path) dir = strdup("/");
    else dir = strndup(path, (size_t)(slash - path));
    if (dir == NULL) return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    free(dir);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    if (rc != 0 && errno == EINVAL) rc = 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

ls_status ls_atomic_write_mode(const char *path, const void *bytes, size_t len,
                               mode_t mode, char *err, size_t errlen) {
    if (path == NULL || (bytes == NULL && len > 0)) {
        errf(err, errlen, "atomic write: NULL %s", path == NULL ? "path" : "bytes");
        return LS_ERR_ARG;
    }
    size_t tmplen = strlen(path) + 32;
    char *tmp = malloc(tmplen);
    if (tmp == NULL) return LS_ERR_NOMEM;
    snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());

    ls_status st = LS_ERR_IO;
    int renamed = 0;
    FILE *f = NULL;
    const char *step = "create";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) goto cleanup;
    f = fdopen(fd, "wb");
    if (f == NULL) {
        close(fd);
        goto cleanup;
    }
    step = "write";
    if (len > 0 && fwrite(bytes, 1, len, f) != len) goto cleanup;
    step = "flush";
    if (fflush(f) != 0) goto cleanup;
    step = "fsync";
    if (fsync(fileno(f)) != 0) goto cleanup;
    step = "close";
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) goto cleanup;
    step = "rename";
    if (rename(tmp, path) != 0) goto cleanup;
    renamed = 1;
    st = LS_OK;
    if (fsync_parent_dir(path) != 0) {
        /* the new file is in place; only the durability of the rename is in doubt */
        errf(err, errlen, "%s: written, but fsync of its directory failed: %s", path,
             strerror(errno));
        st = LS_ERR_IO;
    }
cleanup:
    if (!renamed) {
        int saved = errno;
        if (f != NULL) fclose(f);
        unlink(tmp);
        errf(err, errlen, "%s: %s of temporary file %s failed: %s", path, step, tmp,
             strerror(saved));
    }
    free(tmp);
    return st;
}

ls_status ls_atomic_write(const char *path, const void *bytes, size_t len, char *err,
                          size_t errlen) {
    return ls_atomic_write_mode(path, bytes, len, 0666, err, errlen);
}
