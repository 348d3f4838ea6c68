/* digest.c - SHA-256 via EVP (contract in digest.h). */
#include "receipts/format/digest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "receipts/format/json_util.h"

void ls_digest_hex(const uint8_t *bytes, size_t len, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 0x0f];
    }
    out[2 * len] = '\0';
}

ls_status ls_digest_sha256(const void *bytes, size_t len, uint8_t out[LS_DIGEST_SIZE]) {
    static const uint8_t empty = 0;
    unsigned int n = 0;
    if (!EVP_Digest(bytes != NULL ? bytes : &empty, len, out, &n, EVP_sha256(), NULL) ||
        n != LS_DIGEST_SIZE)
        return LS_ERR_INTERNAL;
    return LS_OK;
}

ls_status ls_digest_sha256_hex(const void *bytes, size_t len, char out[LS_DIGEST_HEX_SIZE]) {
    uint8_t md[LS_DIGEST_SIZE];
    ls_status st = ls_digest_sha256(bytes, len, md);
    if (st == LS_OK) ls_digest_hex(md, sizeof md, out);
    return st;
}

ls_status ls_digest_sha256_file_hex(const char *path, char out[LS_DIGEST_HEX_SIZE], char *err,
                                    size_t errlen) {
    ls_status st = LS_OK;
    uint8_t *buf = NULL;
    EVP_MD_CTX *ctx = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        ls_json_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    enum { CHUNK = 64 * 1024 };
    buf = malloc(CHUNK);
    ctx = EVP_MD_CTX_new();
    if (buf == NULL || ctx == NULL) {
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        st = LS_ERR_INTERNAL;
        goto cleanup;
    }
    size_t got;
    while ((got = fread(buf, 1, CHUNK, f)) > 0) {
        if (!EVP_DigestUpdate(ctx, buf, got)) {
            st = LS_ERR_INTERNAL;
            goto cleanup;
        }
    }
    if (ferror(f)) {
        ls_json_errf(err, errlen, "%s: read error", path);
        st = LS_ERR_IO;
        goto cleanup;
    }
    uint8_t md[LS_DIGEST_SIZE];
    unsigned int n = 0;
    if (!EVP_DigestFinal_ex(ctx, md, &n) || n != LS_DIGEST_SIZE) {
        st = LS_ERR_INTERNAL;
        goto cleanup;
    }
    ls_digest_hex(md, sizeof md, out);
cleanup:
    EVP_MD_CTX_free(ctx);
    free(buf);
    fclose(f);
    return st;
}

/* The stream is libcrypto's context itself (the struct is never defined). */
ls_status ls_digest_stream_open(ls_digest_stream **out) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    *out = NULL;
    if (ctx == NULL) return LS_ERR_NOMEM;
    if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(ctx);
        return LS_ERR_INTERNAL;
    }
    *out = (ls_digest_stream *)ctx;
    return LS_OK;
}

ls_status ls_digest_stream_update(ls_digest_stream *s, const void *bytes, size_t len) {
    if (s == NULL) return LS_ERR_INTERNAL;
    if (len == 0) return LS_OK;
    return EVP_DigestUpdate((EVP_MD_CTX *)s, bytes, len) ? LS_OK : LS_ERR_INTERNAL;
}

ls_status ls_digest_stream_final(const ls_digest_stream *s, uint8_t out[LS_DIGEST_SIZE]) {
    if (s == NULL) return LS_ERR_INTERNAL;
    EVP_MD_CTX *copy = EVP_MD_CTX_new(); /* finalise a copy: the stream goes on */
    unsigned int n = 0;
    ls_status st = LS_ERR_INTERNAL;
    if (copy != NULL && EVP_MD_CTX_copy_ex(copy, (const EVP_MD_CTX *)s) && EVP_DigestFinal_ex(copy, out, &n) &&
        n == LS_DIGEST_SIZE)
        st = LS_OK;
    EVP_MD_CTX_free(copy);
    return st;
}

ls_status ls_digest_stream_final_hex(const ls_digest_stream *s, char out[LS_DIGEST_HEX_SIZE]) {
    uint8_t md[LS_DIGEST_SIZE];
    ls_status st = ls_digest_stream_final(s, md);
    if (st == LS_OK) ls_digest_hex(md, sizeof md, out);
    return st;
}

void ls_digest_stream_free(ls_digest_stream *s) { EVP_MD_CTX_free((EVP_MD_CTX *)s); }
