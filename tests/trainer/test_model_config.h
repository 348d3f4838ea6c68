/* test_model_config.h - a model config of configs/ loaded for a test.
 * Header-only (static inline). */
#ifndef LS_TEST_MODEL_CONFIG_H
#define LS_TEST_MODEL_CONFIG_H
#include <stdio.h>

#include <criterion/criterion.h>

#include "trainer/model/config.h"

/* LS_SOURCE_DIR/configs/name (e.g. "mla-tiny.json"), loaded; asserts it loads. */
static inline ls_model_config ls_test_model_config(const char *name) {
    ls_model_config c;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/configs/%s", LS_SOURCE_DIR, name);
    cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
    return c;
}
#endif
