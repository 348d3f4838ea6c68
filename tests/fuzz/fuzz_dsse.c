/* fuzz_dsse.c - libFuzzer target for DSSE envelope verification: arbitrary
 * bytes verified as an envelope against a fixed Ed25519 key (RFC 8032 test
 * key 1), with and without a required payloadType; and, for inputs starting
 * with 0x01, the rest signed as a payload, which must verify and decode
 * back to the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "receipts/signing/dsse.h"

static EVP_PKEY *fixed_key(void) {
    static EVP_PKEY *key;
    static const uint8_t seed[32] = {
        0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a,
        0xf4, 0x92, 0xec, 0x2c, 0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32,
        0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60};
    if (key == NULL) key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
    if (key == NULL) __builtin_trap();
    return key;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    EVP_PKEY *key = fixed_key();
    char err[512];
    uint8_t *payload = NULL;
    size_t plen = 0;
    ls_dsse_verify((const char *)data, size, NULL, key, &payload, &plen, err, sizeof err);
    free(payload);
    payload = NULL;
    ls_dsse_verify((const char *)data, size, LS_DSSE_PAYLOAD_TYPE, key, NULL, NULL, err,
                   sizeof err);

    if (size > 0 && data[0] == 0x01) {
        char *env = NULL;
        size_t env_len = 0;
        if (ls_dsse_sign(data + 1, size - 1, LS_DSSE_PAYLOAD_TYPE, key, &env, &env_len, err,
                         sizeof err) != LS_OK)
            __builtin_trap();
        if (ls_dsse_verify(env, env_len, LS_DSSE_PAYLOAD_TYPE, key, &payload, &plen, err,
                           sizeof err) != LS_OK)
            __builtin_trap();
        if (plen != size - 1 || (plen > 0 && memcmp(payload, data + 1, plen) != 0))
            __builtin_trap();
        free(payload);
        free(env);
    }
    return 0;
}
