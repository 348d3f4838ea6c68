/* atomic_file.h - write a file so that it appears complete or not at all.
 *
 * The bytes go to PATH.tmp.<pid> in the same directory, are flushed and
 * fsync'ed, then renamed over PATH and the directory is fsync'ed.  A crash
 * or error at any point leaves either the old file or the new one, never a
 * mix; on failure the temporary file is removed.  Receipts, manifests,
 * envelopes and keys are all written this way. */
#ifndef LS_RECEIPTS_ATOMIC_FILE_H
#define LS_RECEIPTS_ATOMIC_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "common/status.h"

/* Writes bytes[0..len) to path (created 0666 & ~umask).  bytes may be NULL
 * when len is 0.  LS_ERR_IO on any failure, with a message naming the file
 * and the failing step in err[errlen] (err may be NULL); the previous
 * content of path, if any, is intact. */
ls_status ls_atomic_write(const char *path, const void *bytes, size_t len, char *err,
                          size_t errlen);

/* Same with an explicit creation mode (0600 for private keys). */
ls_status ls_atomic_write_mode(const char *path, const void *bytes, size_t len,
                               mode_t mode, char *err, size_t errlen);

#endif
