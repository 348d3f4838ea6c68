/* build_diff.h - which artifact or key two build objects differ in, in words.
 *
 * "Same build" is equality of build digests (build_info.h); when two digests
 * differ, they say nothing of why.  This module compares the build objects
 * themselves and writes the first differences as one bounded line each, for
 * the audit's parity.build and longstraw-audit diff:
 *  - a v2 build identity ({"artifacts": [...]}, docs/contract.md §2):
 *    artifacts are matched by (role, name), the k-th of a pair with the
 *    k-th; one on one side only is named as such ("artifact package torch:
 *    only in the run"), a matched one by the field that differs ("artifact
 *    package torch: version 1.13.0 vs 2.0.1"); its "files" object (path ->
 *    SHA-256 of the file, the emitter's source trees) by the files that
 *    differ or exist on one side only ("artifact source longstraw_emit: file
 *    run.py differs (ab12cd34ef56.. vs 0123456789ab..)", "...: file x.py only
 *    in the run (..)"), before the artifact's other fields; the same
 *    artifacts in another order are a difference too (the digest covers the
 *    order);
 *  - any other build object (longstraw-train's, build_info.h): key by key,
 *    the dotted key path whose value differs ("kernel_isa: avx512 vs
 *    portable", "executable.sha256: .. vs .."); the members that digest
 *    leaves out ("path" of "executable" and of each "libraries" item) are
 *    not compared;
 *  - generic over JSON: objects key by key (order does not matter), arrays
 *    whose items are all objects with a string "name" by (role, name), other
 *    arrays by index, scalars by value; the top-level "build_digest" is not
 *    compared (the caller names the digests).
 * Values are shown short: a digest (32 or more hex digits) as its first 12
 * digits and "..", other text cut at LS_BUILD_DIFF_SHOWN bytes, containers as
 * "an object of N keys" / "an array of N items", a missing one as "absent".
 *
 * Both inputs are untrusted files: nesting deeper than
 * LS_BUILD_DIFF_MAX_DEPTH is not compared (a line says where), the work is
 * capped at LS_BUILD_DIFF_MAX_STEPS steps (then `stopped`; `total` is a
 * lower bound), at most LS_BUILD_DIFF_MAX_ITEMS differences are kept (all
 * found are counted), every name and value is cut to a bounded length with
 * control characters and invalid UTF-8 replaced by '?', and every line fits
 * LS_BUILD_DIFF_LINE bytes (NUL included) without cutting a character.
 *
 * Ownership: results are written into the caller's ls_build_diff (nothing to
 * free); inputs are borrowed; the only heap memory is transient (matching
 * arrays), freed before the call returns.  Thread-safe. */
#ifndef LS_RECEIPTS_BUILD_DIFF_H
#define LS_RECEIPTS_BUILD_DIFF_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#define LS_BUILD_DIFF_MAX_DEPTH 16        /* nesting compared (the root is 0) */
#define LS_BUILD_DIFF_MAX_STEPS (1u << 22) /* values visited plus members scanned, at most */
#define LS_BUILD_DIFF_MAX_ITEMS 8         /* differences kept */
#define LS_BUILD_DIFF_LINE 256            /* bytes of a line, NUL included */
#define LS_BUILD_DIFF_KEY 200             /* bytes of a key path, NUL included */
#define LS_BUILD_DIFF_VALUE 64            /* bytes of a shown value, NUL included */
#define LS_BUILD_DIFF_SHOWN 48            /* bytes of a name or value shown before it is cut ("...") */

typedef struct {
    /* where, as a path: "kernel_isa", "dependencies.openblas", "dtype_builds[1]",
     * "artifacts[source longstraw_emit].files[run.py]" */
    char key[LS_BUILD_DIFF_KEY];
    /* in words: "artifact source longstraw_emit: file run.py differs (ab12cd34ef56.. vs 0123456789ab..)" */
    char line[LS_BUILD_DIFF_LINE];
    char a[LS_BUILD_DIFF_VALUE], b[LS_BUILD_DIFF_VALUE]; /* the two values shown ("absent": none) */
} ls_build_diff_item;

typedef struct {
    ls_build_diff_item item[LS_BUILD_DIFF_MAX_ITEMS];
    size_t n;     /* items kept: the first differences, in the order above */
    size_t total; /* differences found (n and those not kept) */
    bool stopped; /* the step cap ended the comparison: more may differ */
} ls_build_diff;

/* Compares build objects a and b into *d (emptied first).  la and lb name
 * the sides in "only in" lines ("the report", "the run"; NULL: "A", "B");
 * a line with two values shows a's first ("X vs Y").  a or b NULL is a
 * missing build object: one difference when the other is not NULL.  Never
 * fails: out of memory, keyed arrays are compared by index.  Returns
 * d->total (0: no difference found). */
size_t ls_build_diff_compare(const cJSON *a, const cJSON *b, const char *la, const char *lb, ls_build_diff *d);

/* Lines first .. first+max-1 of d joined with "; " into buf (cap bytes,
 * NUL-terminated, cut at a character boundary); with rest, followed by
 * "; and N more" when d found more than were joined and "; the comparison
 * stopped at its step cap" when d->stopped.  buf may not be NULL; cap 0
 * writes nothing.  Returns the number of lines joined. */
size_t ls_build_diff_join(const ls_build_diff *d, size_t first, size_t max, bool rest, char *buf, size_t cap);

#endif
