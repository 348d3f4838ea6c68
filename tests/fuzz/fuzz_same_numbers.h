/* fuzz_same_numbers.h - the check shared by the JSON fuzz targets (json,
 * jcs): a document read back holds every number of the original as the same
 * double, bit for bit.  Header-only so that each target stays one source
 * file. */
#ifndef LS_TESTS_FUZZ_SAME_NUMBERS_H
#define LS_TESTS_FUZZ_SAME_NUMBERS_H
#include <string.h>

#include <cjson/cJSON.h>

/* Every number of a is the number at the same place of b, bit for bit
 * (objects matched by key: a canonical print sorts them, and the keys are
 * unique here; arrays by position, of the same length); with
 * zero_sign_free, -0 and 0 count as the same (JCS writes -0 as 0).  b may
 * be NULL (nothing matches). */
static inline int fuzz_same_numbers(const cJSON *a, const cJSON *b, int zero_sign_free) {
    if (cJSON_IsNumber(a) || cJSON_IsNumber(b)) {
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b)) return 0;
        double x = a->valuedouble, y = b->valuedouble;
        if (zero_sign_free && x == 0 && y == 0) return 1;
        return memcmp(&x, &y, sizeof x) == 0;
    }
    if (cJSON_IsObject(a)) {
        for (const cJSON *x = a->child; x != NULL; x = x->next)
            if (!fuzz_same_numbers(x, cJSON_GetObjectItemCaseSensitive(b, x->string), zero_sign_free)) return 0;
        return 1;
    }
    const cJSON *x = a->child, *y = b ? b->child : NULL;
    for (; x != NULL && y != NULL; x = x->next, y = y->next)
        if (!fuzz_same_numbers(x, y, zero_sign_free)) return 0;
    return x == NULL && y == NULL;
}
#endif
