/* test_receipts_support.h - helpers shared by the receipts and schema tests:
 * temporary run directories, file I/O with assertions, a sample config and
 * receipt, and the bridge to Debian's python3-jsonschema (the independent
 * validator the C one is compared with). */
#ifndef LS_TESTS_RECEIPTS_SUPPORT_H
#define LS_TESTS_RECEIPTS_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "receipts/writing/receipt.h"

/* The interpreter that has jsonschema (Debian's python3-jsonschema). */
#define LS_TEST_PYTHON "/usr/bin/python3"

/* Fresh directory under /tmp (caller frees the string; remove with rmtree). */
char *ls_test_mkdtemp(void);
void ls_test_rmtree(const char *dir);

/* Removes *dir (from ls_test_mkdtemp) with everything in it and frees the
 * string; *dir becomes NULL (NULL: nothing to do). */
void ls_test_scratch_free(char **dir);

/* setup() and teardown() (Criterion .init/.fini): `tmp`, a fresh scratch
 * directory per test, removed with everything in it. */
#define LS_TEST_SCRATCH                                                                                             \
    static char *tmp;                                                                                               \
    static void setup(void) { tmp = ls_test_mkdtemp(); }                                                            \
    static void teardown(void) { ls_test_scratch_free(&tmp); }

/* Whole-file helpers that assert on failure; read returns a NUL-terminated
 * heap buffer. */
void ls_test_write_file(const char *path, const void *bytes, size_t len);
char *ls_test_read_file(const char *path, size_t *len);
int ls_test_exists(const char *path);

/* A hybrid-tiny config (docs/model.md sections 1.4 and 6); caller deletes. */
cJSON *ls_test_config(void);

/* A complete receipt for `rank` of `world`, events file
 * rank-NNNN/events.jsonl.zst (the caller creates it).  Borrowed pointers
 * refer to static data and to build/config, which stay the caller's. */
ls_receipt ls_test_receipt(uint32_t rank, uint32_t world, const cJSON *build,
                           const cJSON *config);

/* A run directory with `world` ranks: an events file and a receipt per
 * rank, a parity.json, and manifest.json (ranks scanned from disk).
 * Asserts every step. */
void ls_test_make_run(const char *dir, uint32_t world);

/* Validates each file in paths[0..n) against schema_path with
 * python3-jsonschema (Draft 2020-12; strict JSON parsing like the C side:
 * no NaN/Infinity, no duplicate keys).  A path ending in .jsonl yields one
 * verdict per non-empty line.  Verdicts (1 valid, 0 invalid) go to
 * verdicts[] in document order; returns their number, or -1 with a
 * message in why when python or jsonschema is unavailable or fails. */
int ls_test_python_validate(const char *schema_path, const char *const *paths, size_t n,
                            int *verdicts, size_t cap, char *why, size_t whylen);

/* The C side of the same: one verdict per document, same order; when
 * file_of != NULL, file_of[k] is the index in paths of document k. */
int ls_test_c_validate(const char *schema_path, const char *const *paths, size_t n,
                       int *verdicts, size_t *file_of, size_t cap, char *why, size_t whylen);

#endif
