/* jcs.h - RFC 8785 (JCS) canonical JSON for the v2 build identity.
 *
 * The v2 evidence contract (docs/contract.md §2) digests a trainer's build
 * identity as the SHA-256 of the JCS serialisation of {"artifacts": [...]}.
 * Any language must give the same bytes, so the identity holds only the
 * subset where JCS is exact everywhere: strings, true/false/null, integers
 * of magnitude below 2^53, arrays and objects.  This module serialises that
 * subset and refuses everything else with a message naming the JSON pointer:
 *  - keys sorted by their UTF-16 code units (RFC 8785 §3.2.3), no whitespace;
 *  - strings: '"' and '\' escaped, \b \t \n \f \r, other controls below
 *    U+0020 as \u00xx (lowercase hex), every other character as its UTF-8;
 *  - integers as decimal digits (-0 as 0).
 * Refused (LS_ERR_FORMAT): a number that is fractional, non-finite or of
 * magnitude >= 2^53; a string or key that is not valid UTF-8; a repeated
 * key; nesting deeper than LS_JCS_MAX_DEPTH.  A parsed cJSON number no
 * longer shows how it was written, so ls_jcs_canonical_text also refuses a
 * number token written with a fraction or an exponent ("1.0", "1e3"), as
 * python/longstraw_emit/jcs.py does (its json module reads them as floats).
 *
 * Ownership: *out buffers are the caller's (free()); inputs are borrowed.
 * Pure functions, thread-safe. */
#ifndef LS_RECEIPTS_JCS_H
#define LS_RECEIPTS_JCS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/format/digest.h"

/* Deepest nesting of arrays/objects serialised (deeper: LS_ERR_FORMAT). */
#define LS_JCS_MAX_DEPTH 64

/* JCS text of v (not NUL-counted in *out_len; *out is NUL-terminated, the
 * caller's: free(); NULL on failure).  LS_ERR_FORMAT for a value outside
 * the subset (err names the JSON pointer and why), LS_ERR_ARG for NULL
 * arguments, LS_ERR_NOMEM. */
ls_status ls_jcs_serialize(const cJSON *v, char **out, size_t *out_len, char *err, size_t errlen);

/* JCS of a JSON text bytes[0..len): refuses a number token written with a
 * fraction or exponent, then parses strictly (json_util.h) and serialises.
 * Results and errors as ls_jcs_serialize (LS_ERR_FORMAT also for a syntax
 * error). */
ls_status ls_jcs_canonical_text(const char *bytes, size_t len, char **out, size_t *out_len,
                                char *err, size_t errlen);

/* Full RFC 8785 numbers, for documents outside the build identity (a v2
 * config's free "model", whose digest only C computes): like
 * ls_jcs_serialize, but any finite number is written as ECMAScript's
 * Number.prototype.toString writes it (the shortest digits that read back
 * as the same double; plain notation for exponents -7 < e < 21, else d.ddde+N).
 * Non-finite numbers are still refused. */
ls_status ls_jcs_serialize_numbers(const cJSON *v, char **out, size_t *out_len, char *err, size_t errlen);

/* SHA-256 (lowercase hex) of ls_jcs_serialize_numbers(v). */
ls_status ls_jcs_sha256_numbers(const cJSON *v, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen);

/* SHA-256 (lowercase hex) of ls_jcs_serialize(v).  Errors as it. */
ls_status ls_jcs_sha256(const cJSON *v, char hex[LS_DIGEST_HEX_SIZE], char *err, size_t errlen);

#endif
