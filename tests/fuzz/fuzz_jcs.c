/* fuzz_jcs.c - libFuzzer target for RFC 8785 canonical JSON
 * (receipts/format/jcs.c): arbitrary bytes through ls_jcs_canonical_text (the
 * build identity's subset).  Accepted text must parse strictly, be its own
 * canonical form (a fixed point) and digest the same through ls_jcs_sha256;
 * a refusal is LS_ERR_FORMAT (or NOMEM) with a message.  Any document the
 * strict JSON reader accepts also goes through ls_jcs_serialize_numbers
 * (full JCS numbers): its output must parse back to the same document, every
 * number bit-exact.  Traps otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "receipts/format/jcs.h"
#include "receipts/format/json_util.h"
#include "tests/fuzz/fuzz_same_numbers.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "", *out = NULL, *out2 = NULL;
    size_t n = 0, n2 = 0;
    ls_status st = ls_jcs_canonical_text((const char *)data, size, &out, &n, err, sizeof err);
    if (st != LS_OK) {
        CHECK(out == NULL);
        CHECK(st == LS_ERR_FORMAT || st == LS_ERR_NOMEM);
        CHECK(st == LS_ERR_NOMEM || (err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL));
    } else {
        CHECK(n == strlen(out));
        CHECK(ls_jcs_canonical_text(out, n, &out2, &n2, err, sizeof err) == LS_OK);
        CHECK(n2 == n && memcmp(out, out2, n) == 0);
        cJSON *doc = NULL;
        CHECK(ls_json_parse(out, n, "jcs", &doc, err, sizeof err) == LS_OK);
        char h1[LS_DIGEST_HEX_SIZE], h2[LS_DIGEST_HEX_SIZE];
        CHECK(ls_jcs_sha256(doc, h1, err, sizeof err) == LS_OK);
        CHECK(ls_digest_sha256_hex(out, n, h2) == LS_OK && strcmp(h1, h2) == 0);
        cJSON_Delete(doc);
        free(out2);
        free(out);
    }
    cJSON *doc = NULL;
    if (ls_json_parse((const char *)data, size, "fuzz", &doc, err, sizeof err) != LS_OK) return 0;
    st = ls_jcs_serialize_numbers(doc, &out, &n, err, sizeof err);
    if (st == LS_OK) {
        cJSON *back = NULL;
        CHECK(ls_json_parse(out, n, "jcs numbers", &back, err, sizeof err) == LS_OK);
        CHECK(fuzz_same_numbers(doc, back, 1)); /* JCS writes -0 as 0 */
        cJSON_Delete(back);
        free(out);
    } else {
        CHECK(st == LS_ERR_FORMAT || st == LS_ERR_NOMEM);
    }
    cJSON_Delete(doc);
    return 0;
}
