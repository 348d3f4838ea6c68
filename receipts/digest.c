/* digest.c - SHA-256 via EVP (contract in digest.h). */
#include "receipts/digest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "receipts/json_util.h"

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
