/* test_audit_support.h - the in-process audit tests' scratch directory and
 * runs audited (a v2 fixture written and audited, a run directory loaded and
 * evaluated), and their look-ups of one rule in an evaluated run: find it
 * (dumping every rule when it is missing), expect it to pass, expect it to
 * fail saying something. */
#ifndef LS_TEST_AUDIT_SUPPORT_H
#define LS_TEST_AUDIT_SUPPORT_H

#include <stdio.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "tests/support/test_receipts_support.h"
#include "tests/support/test_v2_fixture.h"

/* setup() and teardown() (Criterion .init/.fini): `tmp`, a fresh scratch
 * directory (ls_test_mkdtemp), with `run_dir` its run/; removed with
 * everything in it. */
#define LS_TEST_AUDIT_SCRATCH                                                                                       \
    static char *tmp;                                                                                               \
    static char run_dir[4096];                                                                                      \
    static void setup(void) {                                                                                       \
        tmp = ls_test_mkdtemp();                                                                                    \
        snprintf(run_dir, sizeof run_dir, "%s/run", tmp);                                                           \
    }                                                                                                               \
    static void teardown(void) { ls_test_scratch_free(&tmp); }

/* The run in run_dir loaded (the profiles of profiles_dir; NULL: the shipped
 * ones) and evaluated; asserts both.  Freed by the caller (ls_audit_free). */
ls_audit_run *ls_test_audit_load(const char *run_dir, const char *profiles_dir);

/* The v2 fixture o written into run_dir (whatever was there removed first)
 * and audited as ls_test_audit_load does. */
ls_audit_run *ls_test_audit_fixture(const char *run_dir, const ls_v2_fixture *o, const char *profiles_dir);

/* Every rule of run, one line each (a failing rule's evidence below it), on stderr (a failing test's context). */
void ls_test_audit_dump(const ls_audit_run *run);

/* The rule id of run; asserts it exists. */
const ls_audit_rule *ls_test_audit_rule(const ls_audit_run *run, const char *id);

/* Expects rule id applicable and passing. */
void ls_test_audit_expect_pass(const ls_audit_run *run, const char *id);

/* Expects rule id applicable and failing, its message or one evidence detail containing want. */
void ls_test_audit_expect_fail_saying(const ls_audit_run *run, const char *id, const char *want);

#endif
