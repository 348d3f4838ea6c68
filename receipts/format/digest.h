/* digest.h - SHA-256 of memory and of files, and lowercase hex encoding.
 *
 * The one hash of the receipts layer (subjects, build digests, key ids),
 * computed with OpenSSL's EVP interface.  Hex strings are 64 lowercase
 * characters plus a NUL: pass a buffer of LS_DIGEST_HEX_SIZE bytes. */
#ifndef LS_RECEIPTS_DIGEST_H
#define LS_RECEIPTS_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define LS_DIGEST_SIZE 32
#define LS_DIGEST_HEX_SIZE 65

/* Lowercase hex of bytes[0..len) into out (2*len + 1 bytes, NUL-terminated). */
void ls_digest_hex(const uint8_t *bytes, size_t len, char *out);

/* SHA-256 of bytes[0..len) (bytes may be NULL when len is 0).
 * LS_ERR_INTERNAL only if libcrypto fails. */
ls_status ls_digest_sha256(const void *bytes, size_t len, uint8_t out[LS_DIGEST_SIZE]);
ls_status ls_digest_sha256_hex(const void *bytes, size_t len, char out[LS_DIGEST_HEX_SIZE]);

/* SHA-256 of a whole file, read in 64 KiB pieces.  LS_ERR_IO (naming the
 * file in err) when it cannot be opened or read. */
ls_status ls_digest_sha256_file_hex(const char *path, char out[LS_DIGEST_HEX_SIZE], char *err,
                                    size_t errlen);

/* SHA-256 of bytes that arrive in pieces (a stream read as it comes, a
 * file written chunk by chunk).  ls_digest_stream_open gives a fresh
 * stream (*out NULL on failure: LS_ERR_NOMEM); update adds bytes (bytes
 * may be NULL when len is 0); final writes the digest of everything added
 * so far and leaves the stream usable (more bytes may follow, digested on
 * top of those); free releases it (NULL ok).  The context is libcrypto's
 * (outside the memory tracker, like cJSON's trees).  LS_ERR_INTERNAL only
 * if libcrypto fails, or on a NULL stream. */
typedef struct ls_digest_stream ls_digest_stream;
ls_status ls_digest_stream_open(ls_digest_stream **out);
ls_status ls_digest_stream_update(ls_digest_stream *s, const void *bytes, size_t len);
ls_status ls_digest_stream_final(const ls_digest_stream *s, uint8_t out[LS_DIGEST_SIZE]);
ls_status ls_digest_stream_final_hex(const ls_digest_stream *s, char out[LS_DIGEST_HEX_SIZE]);
void ls_digest_stream_free(ls_digest_stream *s);

#endif
