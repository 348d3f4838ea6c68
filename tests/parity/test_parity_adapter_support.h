/* test_parity_adapter_support.h - adapter files written for a test and their
 * loading refused, longstraw-parity --adapter run from a test and its outputs
 * read back (test_parity_adapter.c, test_parity_adapter_dp.c). */
#ifndef LS_TEST_PARITY_ADAPTER_SUPPORT_H
#define LS_TEST_PARITY_ADAPTER_SUPPORT_H

#include <stdbool.h>

#include <cjson/cJSON.h>

/* The adapter file at path (tests/data/parity_adapter_fake*.json), its
 * launch's script made tests/parity/parity_adapter_fake_train.py by absolute path
 * (so that a variant written in another directory, where {dir} is that
 * directory, still finds it); the caller deletes it. */
cJSON *ls_pa_fixture(const char *path);

/* doc written to dir/name (doc deleted); its path into path. */
void ls_pa_write_adapter(const char *dir, cJSON *doc, const char *name, char path[512]);

/* doc written to dir/bad.json (doc deleted): expects loading it to fail with an error containing want. */
void ls_pa_refused(const char *dir, cJSON *doc, const char *want);

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
