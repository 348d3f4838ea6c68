/* build_info.h - what binary produced a file, and its build digest.
 *
 * A build object records what ran: the executable and the project's shared
 * libraries it loaded (by content), the state of the sources it was built
 * from, and the compiler, flags and dependency versions:
 *   {"git_commit", "compiler", "flags",
 *    "dependencies": {"cjson", "zstd", "openssl", "openblas", "mpi"}
 *                    (registered names: ls_build_info_dependency_names),
 *    "dtype_builds": ["f32", "f64"],
 *    "kernel_isa": "portable" | "avx2" | "avx512"   (trainers: what ran),
 *    "executable": {"path", "sha256"},
 *    "libraries": [{"name", "path", "sha256"}...],
 *    "source": {"commit", "dirty", "changes_sha256"},
 *    "build_digest": hex}
 *
 * executable: /proc/self/exe, the file of the running process, and the
 *   SHA-256 of its bytes.
 * libraries: every object the dynamic loader has mapped (dl_iterate_phdr)
 *   whose file name starts with "libls_" or "liblongstraw" (the project's
 *   CMake targets are all ls_*, so a shared build gives libls_*.so), sorted by
 *   name; the SHA-256 of each file.  The rule is the file name, not "lies
 *   under the build tree": recognising the build tree would embed its path in
 *   the binary, and then the same sources built in two directories would never
 *   give the same executable.  Today the project's libraries are static and
 *   the list is empty.
 * source: taken at BUILD time by cmake/source_state.cmake (every build; the
 *   generated header changes only when the state does): HEAD's commit, dirty
 *   (the working tree, untracked non-ignored files included, differs from
 *   HEAD) and changes_sha256, the SHA-256 of the list of changed paths with
 *   their old and new blob ids (the empty list when clean).  Outside a git
 *   work tree: commit "unknown", dirty true, changes_sha256 null.
 *   git_commit repeats source.commit.
 *
 * build_digest is the SHA-256 of the canonical serialisation (json_util.h:
 * sorted keys, no whitespace) of the object without "build_digest" and
 * without the "path" members of "executable" and of each "libraries" entry.
 * The digest identifies WHAT ran, by content: a copy of the same binary run
 * from another directory has the same digest; a binary differing in one byte,
 * or built from different sources, has another.  The paths are recorded for
 * the reader only, and ls_build_info_check does not protect them.  Equal
 * digests are what "same build" means to the audit (docs/design.md section 5). */
#ifndef LS_RECEIPTS_BUILD_INFO_H
#define LS_RECEIPTS_BUILD_INFO_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/digest.h"

/* The build record's "dependencies" are registered names, one table here
 * (a name the table lacks is refused, as the schemas refuse it).  Each is
 * contributed by the code that links it: cjson, zstd and openssl by this
 * library (their versions read from the libraries: "own"), the others by
 * the caller: openblas (the trainer's kernels) and mpi (the communicator's
 * backend registry, trainer/dist/comm.h: ls_comm_build_dependencies, which
 * gives every registered backend's dependency, "none" when not built).  A
 * new dependency (nccl) is one entry in build_info.c's table and one
 * property in the manifest and receipt schemas. */
typedef struct {
    const char *name;    /* a registered dependency name */
    const char *version; /* NULL: recorded as "unknown" */
} ls_build_dep;

/* The registered dependency names in the record's order (static; *n their
 * number); own[i] (may be NULL) set to 1 for the names this library
 * contributes itself. */
const char *const *ls_build_info_dependency_names(size_t *n, const int **own);

/* Builds the object for this process, including build_digest, hashing the
 * executable and the project's loaded libraries.  deps: the caller's
 * dependencies, every registered name that is not this library's own (a
 * registered name the caller omits is recorded as "unknown").  LS_ERR_ARG
 * (err naming it) for a name that is not registered, is given twice or is
 * this library's own; LS_ERR_IO when a file cannot be read, LS_ERR_NOMEM.
 * *out is the caller's (cJSON_Delete); NULL on failure. */
ls_status ls_build_info_create_deps(const ls_build_dep *deps, size_t n_deps, cJSON **out, char *err,
                                    size_t errlen);
/* ls_build_info_create_deps with {openblas, mpi}. */
ls_status ls_build_info_create(const char *openblas, const char *mpi, cJSON **out);

/* Adds "kernel_isa" (the CPU kernels' ISA, kernels/isa.h: it changes the
 * rounding, so it is part of what ran) to a build object from
 * ls_build_info_create and recomputes its build_digest.  LS_ERR_ARG for a
 * name outside portable, avx2, avx512; LS_ERR_NOMEM. */
ls_status ls_build_info_add_kernel_isa(cJSON *build, const char *isa);

/* Digest of a build object, ignoring any "build_digest" member in it and the
 * "path" members named above. */
ls_status ls_build_info_digest(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err,
                               size_t errlen);

/* LS_OK when build is an object whose "build_digest" equals the digest of
 * the rest; LS_ERR_CORRUPT (message naming both digests) otherwise. */
ls_status ls_build_info_check(const cJSON *build, char *err, size_t errlen);

/* The v2 build identity (docs/contract.md §2), written by any trainer:
 * {"artifacts": [{role, name, ...}...], "build_digest": hex}, where
 * build_digest is the SHA-256 of the RFC 8785 serialisation (receipts/format/jcs.h)
 * of {"artifacts": artifacts}.  ls_build_info_digest_v2 computes it
 * (LS_ERR_FORMAT, naming the JSON pointer, when artifacts holds a value
 * outside the JCS subset or is not an array); ls_build_info_check_v2 is
 * LS_OK when build's build_digest equals it, LS_ERR_CORRUPT (both digests
 * named) when it differs or is absent. */
ls_status ls_build_info_digest_v2(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err,
                                  size_t errlen);
ls_status ls_build_info_check_v2(const cJSON *build, char *err, size_t errlen);

/* The digest a reader recomputes for a build object of either kind:
 * ls_build_info_digest_v2 when it has "artifacts" (the v2 identity), else
 * ls_build_info_digest (longstraw-train's).  LS_ERR_ARG when build is not an
 * object; otherwise their results (err names why). */
ls_status ls_build_info_digest_any(const cJSON *build, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen);

#endif
