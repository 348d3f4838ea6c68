/* test_parity_adapter_support.h - longstraw-parity --adapter run from a test
 * and its outputs read back (test_parity_adapter.c, test_parity_adapter_dp.c). */
#ifndef LS_TEST_PARITY_ADAPTER_SUPPORT_H
#define LS_TEST_PARITY_ADAPTER_SUPPORT_H

#include <stdbool.h>

#include <cjson/cJSON.h>

/* Runs, in dir, `ENV longstraw-parity --adapter ADAPTER --out dir/OUT --jobs 2 EXTRA`, its output in
 * dir/OUT.txt; returns its exit status (asserts it exited). */
int ls_pa_parity(const char *dir, const char *adapter, const char *env, const char *extra, const char *out);

/* dir/OUT.txt (malloc'd). */
char *ls_pa_text(const char *dir, const char *out);

/* dir/OUT/parity.json, expected valid against the parity schema (the caller deletes it). */
cJSON *ls_pa_report(const char *dir, const char *out);

/* Whether the report's level `level` holds. */
bool ls_pa_level_holds(const cJSON *rep, int level);

#endif
