/* fuzz_build_diff.c - libFuzzer target for the differences of two build
 * objects (receipts/format/build_diff.c): the input is two JSON documents
 * separated by a NUL byte (without one, the document against an empty
 * object), each parsed strictly.  Whatever they hold: at most
 * LS_BUILD_DIFF_MAX_ITEMS differences kept and no more than counted, every
 * key, line and value NUL-terminated within its bound, printable (no byte
 * below 0x20, no DEL) and without a cut character; a document against
 * itself has no difference; the joined text fits its buffer.  Traps
 * otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/build_diff.h"
#include "receipts/format/json_util.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* bounded, printable, whole UTF-8 characters */
static void clean_text(const char *s, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strnlen(s, cap);
    CHECK(n < cap);
    for (size_t i = 0; i < n;) {
        CHECK(u[i] >= 0x20 && u[i] != 0x7F);
        size_t len = u[i] < 0x80 ? 1 : u[i] >= 0xF0 ? 4 : u[i] >= 0xE0 ? 3 : 2;
        CHECK(u[i] < 0x80 || (u[i] >= 0xC2 && u[i] <= 0xF4));
        for (size_t k = 1; k < len; k++) CHECK(i + k < n && (u[i + k] & 0xC0) == 0x80);
        i += len;
    }
}

static void check(const cJSON *a, const cJSON *b) {
    ls_build_diff d;
    size_t n = ls_build_diff_compare(a, b, "the report", "the run", &d);
    CHECK(n == d.total && d.n <= LS_BUILD_DIFF_MAX_ITEMS && d.n <= d.total);
    CHECK(d.total == 0 || d.n > 0);
    for (size_t i = 0; i < d.n; i++) {
        clean_text(d.item[i].key, sizeof d.item[i].key);
        clean_text(d.item[i].line, sizeof d.item[i].line);
        clean_text(d.item[i].a, sizeof d.item[i].a);
        clean_text(d.item[i].b, sizeof d.item[i].b);
    }
    char buf[300];
    size_t k = ls_build_diff_join(&d, 0, 4, true, buf, sizeof buf);
    CHECK(k <= 4 && k <= d.n);
    clean_text(buf, sizeof buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t na = nul ? (size_t)(nul - data) : size;
    char err[256];
    cJSON *a = NULL, *b = NULL;
    if (ls_json_parse((const char *)data, na, "a", &a, err, sizeof err) != LS_OK) return 0;
    if (nul != NULL) {
        if (ls_json_parse((const char *)nul + 1, size - na - 1, "b", &b, err, sizeof err) != LS_OK) b = NULL;
    } else {
        b = cJSON_CreateObject();
    }
    ls_build_diff d;
    CHECK(ls_build_diff_compare(a, a, NULL, NULL, &d) == 0 && d.n == 0 && !d.stopped);
    check(a, b);
    check(b, a);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return 0;
}
