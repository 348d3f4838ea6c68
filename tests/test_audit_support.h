/* test_audit_support.h - the audit tests' look-ups of one rule in an
 * evaluated run: find it (dumping every rule when it is missing), expect it
 * to pass, expect it to fail saying something. */
#ifndef LS_TEST_AUDIT_SUPPORT_H
#define LS_TEST_AUDIT_SUPPORT_H

#include "audit/audit.h"

/* Every rule of run, one line each (a failing rule's evidence below it), on stderr (a failing test's context). */
void ls_test_audit_dump(const ls_audit_run *run);

/* The rule id of run; asserts it exists. */
const ls_audit_rule *ls_test_audit_rule(const ls_audit_run *run, const char *id);

/* Expects rule id applicable and passing. */
void ls_test_audit_expect_pass(const ls_audit_run *run, const char *id);

/* Expects rule id applicable and failing, its message or one evidence detail containing want. */
void ls_test_audit_expect_fail_saying(const ls_audit_run *run, const char *id, const char *want);

#endif
