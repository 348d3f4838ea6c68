/* fuzz_json.c - libFuzzer target for the shared JSON reader
 * (receipts/format/json_util.c): arbitrary bytes through ls_json_parse.  An
 * accepted document must be finite, print canonically (keys sorted, no
 * duplicates to refuse) and formatted, and both texts must parse back to an
 * equal document; the canonical print of the re-parsed document is
 * byte-identical (canonical form is a fixed point).  Integer members read
 * by ls_json_get_u64 survive ls_json_add_u64; every number prints back
 * bit-exact (ls_json_format_number); JSON pointers built from the
 * keys stay NUL-terminated inside their buffer.  Traps otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "tests/fuzz/fuzz_same_numbers.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cJSON *reparse(const char *text, size_t len, const cJSON *want) {
    char err[512];
    cJSON *back = NULL;
    CHECK(ls_json_parse(text, len, "reprint", &back, err, sizeof err) == LS_OK);
    CHECK(cJSON_Compare(want, back, 1));
    CHECK(fuzz_same_numbers(want, back, 0)); /* cJSON_Compare tolerates an ulp */
    return back;
}

static void check_members(const cJSON *doc) {
    const cJSON *it;
    char ptr[24];
    cJSON_ArrayForEach(it, doc) {
        if (it->string != NULL) {
            memset(ptr, 'x', sizeof ptr);
            ptr[0] = '\0';
            ls_json_pointer_push_key(ptr, sizeof ptr, it->string);
            CHECK(memchr(ptr, '\0', sizeof ptr) != NULL);
            uint64_t v = 0, w = 0;
            if (ls_json_get_u64(doc, it->string, &v) == 0) {
                cJSON *o = cJSON_CreateObject();
                CHECK(o != NULL && ls_json_add_u64(o, "k", v) == 0);
                char *txt = cJSON_PrintUnformatted(o);
                cJSON *p = NULL;
                char err[256];
                CHECK(txt != NULL && ls_json_parse(txt, strlen(txt), "u64", &p, err, sizeof err) == LS_OK);
                CHECK(ls_json_get_u64(p, "k", &w) == 0 && w == v);
                cJSON_Delete(p);
                free(txt);
                cJSON_Delete(o);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    cJSON *doc = NULL;
    err[0] = '\0';
    ls_status st = ls_json_parse((const char *)data, size, "fuzz", &doc, err, sizeof err);
    if (st != LS_OK) {
        CHECK(doc == NULL);
        CHECK(st == LS_ERR_FORMAT || st == LS_ERR_NONFINITE || st == LS_ERR_NOMEM);
        CHECK(st == LS_ERR_NOMEM || (err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL));
        return 0;
    }
    CHECK(ls_json_check_finite(doc, NULL, 0) == LS_OK);

    char *canon = NULL, *canon2 = NULL, *pretty = NULL;
    size_t clen = 0, clen2 = 0, plen = 0;
    CHECK(ls_json_print_canonical(doc, &canon, &clen, err, sizeof err) == LS_OK);
    CHECK(clen == strlen(canon));
    cJSON *back = reparse(canon, clen, doc);
    CHECK(ls_json_print_canonical(back, &canon2, &clen2, err, sizeof err) == LS_OK);
    CHECK(clen2 == clen && memcmp(canon, canon2, clen) == 0);
    cJSON_Delete(back);

    CHECK(ls_json_print(doc, &pretty, &plen, err, sizeof err) == LS_OK);
    CHECK(plen == strlen(pretty));
    cJSON_Delete(reparse(pretty, plen, doc));

    if (cJSON_IsObject(doc)) check_members(doc);
    free(canon);
    free(canon2);
    free(pretty);
    cJSON_Delete(doc);
    return 0;
}
