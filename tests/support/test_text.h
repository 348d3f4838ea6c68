/* test_text.h - a growable text buffer that tests write traces and files
 * into, printf-style.  Header-only (static inline).
 *
 * The buffer starts zeroed (ls_test_text b = {0}); b.p is malloc'd (NULL
 * until the first append), NUL-terminated after each append, and freed by
 * the caller with free(b.p). */
#ifndef LS_TEST_TEXT_H
#define LS_TEST_TEXT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

typedef struct {
    char *p;        /* the text */
    size_t n, cap;  /* its length, the allocation */
} ls_test_text;

/* Appends fmt's output to b (asserts the allocation). */
static inline void ls_test_text_add(ls_test_text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void ls_test_text_add(ls_test_text *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)k + 1 > b->cap) {
        b->cap = (b->n + (size_t)k + 1) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}
#endif
