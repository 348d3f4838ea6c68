/* build_info.h - what binary produced a file, and its build digest.
 *
 * A build object records the git commit, compiler and flags this library
 * was compiled with, the versions of its dependencies and the dtypes built:
 *   {"git_commit", "compiler", "flags",
 *    "dependencies": {"cjson", "zstd", "openssl", "openblas", "mpi"},
 *    "dtype_builds": ["f32", "f64"], "build_digest": hex}
 * build_digest is the SHA-256 of the canonical serialisation (json_util.h:
 * sorted keys, no whitespace) of the object without "build_digest".  Equal
 * digests are what "same build" means to the audit (DESIGN.md section 5). */
#ifndef LS_RECEIPTS_BUILD_INFO_H
#define LS_RECEIPTS_BUILD_INFO_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/digest.h"

/* Builds the object for this build, including build_digest.  openblas and
 * mpi are version strings the caller knows (the receipts library links
 * neither); NULL is recorded as "unknown".  *out is the caller's
 * (cJSON_Delete). */
ls_status ls_build_info_create(const char *openblas, const char *mpi, cJSON **out);

/* Digest of a build object, ignoring any "build_digest" member in it. */
ls_status ls_build_info_digest(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err,
                               size_t errlen);

/* LS_OK when build is an object whose "build_digest" equals the digest of
 * the rest; LS_ERR_CORRUPT (message naming both digests) otherwise. */
ls_status ls_build_info_check(const cJSON *build, char *err, size_t errlen);

#endif
