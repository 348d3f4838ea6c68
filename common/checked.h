/* checked.h - size arithmetic that cannot wrap.
 *
 * Every product or sum of user-controlled values (config dims, prompt and
 * response lengths, group sizes) that sizes an allocation goes through these
 * helpers, so a hostile config yields a clear refusal instead of a wrapped,
 * too-small buffer.  Two flavours:
 *  - checked: ls_mul_size / ls_add_size return 0 and store the result, or
 *    return -1 on overflow and leave *out untouched;
 *  - saturating: ls_sat_mul / ls_sat_add return SIZE_MAX on overflow (and
 *    SIZE_MAX is sticky: any operation with a SIZE_MAX operand other than
 *    multiplication by 0 stays SIZE_MAX), for plans compared against a budget,
 *    where "more than SIZE_MAX" and "too large" mean the same thing.
 * Header-only, dtype-independent, no allocation. */
#ifndef LS_COMMON_CHECKED_H
#define LS_COMMON_CHECKED_H

#include <stddef.h>
#include <stdint.h>

static inline int ls_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

static inline int ls_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}

static inline size_t ls_sat_mul(size_t a, size_t b) {
    size_t r;
    return ls_mul_size(a, b, &r) == 0 ? r : SIZE_MAX;
}

static inline size_t ls_sat_add(size_t a, size_t b) {
    size_t r;
    return ls_add_size(a, b, &r) == 0 ? r : SIZE_MAX;
}

/* a * b * c, saturating. */
static inline size_t ls_sat_mul3(size_t a, size_t b, size_t c) {
    return ls_sat_mul(ls_sat_mul(a, b), c);
}

#endif
