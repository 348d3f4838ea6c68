/* dsse.h - DSSE envelopes signed with Ed25519: RUN/manifest.dsse.json.
 *
 * An envelope (schemas/dsse.schema.json) is
 *   {"payload": base64(payload bytes),
 *    "payloadType": "application/vnd.in-toto+json",
 *    "signatures": [{"keyid": hex SHA-256 of the raw 32-byte public key,
 *                    "sig": base64(Ed25519 signature over PAE)}]}
 * with PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP body,
 * lengths in ASCII decimal (https://github.com/secure-systems-lab/dsse).
 * Base64 is the standard padded alphabet, decoded strictly (canonical
 * encodings only).  For a run, the payload is the exact bytes of
 * RUN/manifest.json.
 *
 * Keys are PEM files: PKCS#8 private keys, SubjectPublicKeyInfo public keys,
 * handled by OpenSSL; keys are EVP_PKEY objects the caller frees with
 * EVP_PKEY_free.
 *
 * Verification rejects a malformed envelope (LS_ERR_FORMAT / LS_ERR_SCHEMA:
 * not JSON, bad base64, missing signatures), an unexpected payloadType
 * (LS_ERR_UNSUPPORTED), and a missing or wrong signature (LS_ERR_SIGNATURE:
 * no signature by this key, changed payload or payloadType). */
#ifndef LS_RECEIPTS_DSSE_H
#define LS_RECEIPTS_DSSE_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "common/status.h"
#include "receipts/format/digest.h"
#include "receipts/signing/manifest.h"

#define LS_DSSE_PAYLOAD_TYPE "application/vnd.in-toto+json"
/* A parity report's envelope: its own type, so that an envelope of a
 * manifest never verifies as one of a report (PAE binds the type). */
#define LS_DSSE_PARITY_PAYLOAD_TYPE "application/vnd.longstraw.parity+json"

/* Creates a fresh Ed25519 key pair and writes the private key (mode 0600)
 * and the public key.  Refuses (LS_ERR_ARG) to overwrite an existing file;
 * LS_ERR_IO when a file cannot be written.  Errors name the file. */
ls_status ls_dsse_keygen(const char *private_path, const char *public_path, char *err,
                         size_t errlen);

/* Loads a PEM key file; LS_ERR_IO unreadable, LS_ERR_FORMAT not a PEM key
 * of the right kind or not Ed25519.  Encrypted private keys are refused
 * (no passphrase prompt).  *out is the caller's (EVP_PKEY_free), NULL on
 * failure. */
ls_status ls_dsse_load_private(const char *path, EVP_PKEY **out, char *err, size_t errlen);
ls_status ls_dsse_load_public(const char *path, EVP_PKEY **out, char *err, size_t errlen);

/* Key id of a key (private or public): hex SHA-256 of its raw public key. */
ls_status ls_dsse_keyid(const EVP_PKEY *key, char hex[LS_DIGEST_HEX_SIZE]);

/* PAE(type, body) into a fresh buffer *out (the caller's, free()), its
 * length in *out_len; *out NULL on failure. */
ls_status ls_dsse_pae(const char *type, const void *body, size_t len, uint8_t **out,
                      size_t *out_len);

/* Signs payload as payload_type with an Ed25519 private key (borrowed);
 * *envelope is the envelope's JSON text (the caller's, free()),
 * *envelope_len its length; *envelope NULL on failure. */
ls_status ls_dsse_sign(const void *payload, size_t len, const char *payload_type,
                       EVP_PKEY *key, char **envelope, size_t *envelope_len, char *err,
                       size_t errlen);

/* Verifies envelope bytes with a public key (borrowed).  expected_type: the
 * only payloadType accepted (NULL accepts any, for tests of the PAE
 * binding).  On LS_OK, when payload != NULL, *payload and *payload_len
 * receive the decoded payload (the caller's, free()); *payload is NULL on
 * failure. */
ls_status ls_dsse_verify(const char *envelope, size_t len, const char *expected_type,
                         EVP_PKEY *pub, uint8_t **payload, size_t *payload_len, char *err,
                         size_t errlen);

/* Signs run_dir/manifest.json into run_dir/manifest.dsse.json (atomic).
 * Refuses a manifest that is invalid (its parse error) or that the run
 * directory does not match (LS_ERR_CORRUPT, first problem named). */
ls_status ls_dsse_sign_run(const char *run_dir, EVP_PKEY *key, char *err, size_t errlen);

/* Verifies run_dir/manifest.dsse.json with pub, checks that its payload is
 * byte for byte run_dir/manifest.json, then verifies the run directory
 * against that manifest (problems appended to *report, which may be NULL).
 * LS_ERR_IO: envelope or manifest unreadable; LS_ERR_CORRUPT: files differ
 * from the manifest; other codes as ls_dsse_verify. */
ls_status ls_dsse_verify_run(const char *run_dir, EVP_PKEY *pub, ls_verify_report *report,
                             char *err, size_t errlen);

/* The envelope path of the parity report at report_path: a final ".json"
 * replaced by ".dsse.json" (DIR/parity.json -> DIR/parity.dsse.json), else
 * ".dsse.json" appended.  LS_ERR_ARG when it does not fit cap. */
ls_status ls_dsse_parity_envelope_path(const char *report_path, char *out, size_t cap, char *err, size_t errlen);

/* Signs the exact bytes of the parity report at report_path (payload type
 * LS_DSSE_PARITY_PAYLOAD_TYPE) into its envelope (atomic).  The report is
 * not parsed: the reader verifies and parses what was signed. */
ls_status ls_dsse_sign_parity(const char *report_path, EVP_PKEY *key, char *err, size_t errlen);

#endif
