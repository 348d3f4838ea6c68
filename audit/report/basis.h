/* basis.h - what each level of a verdict rests on (docs/evidence.md, "What
 * a verdict rests on"), read from the outcomes of the level's own rules:
 * "parity" (a parity.* rule passed: longstraw-parity's runs, their
 * configurations and paths), "run" (run.invariants or a run.probe rule
 * passed: the run's own figures checked), "both", or "records" (neither: the
 * run's files agreeing with each other); and what the level does not bind.
 * The JSON report carries it (levels[].basis); the text, JUnit and HTML
 * reports print the same object. */
#ifndef LS_AUDIT_BASIS_H
#define LS_AUDIT_BASIS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "audit/model/audit.h"

/* The object levels[].basis of schemas/audit-report.schema.json for level
 * (1..4) of an evaluated run: rests_on, summary, the passing rules it rests
 * on, the parity report's configurations and coverage.paths (when it rests
 * on parity), not_bound.  The caller's (cJSON_Delete); NULL for a level that
 * does not hold, or out of memory. */
cJSON *ls_audit_basis_json(const ls_audit_run *run, int level);

/* A basis object (trusted or not: a report read back; NULL accepted) as
 * one line of what it rests on into rests[rcap] and one of what it does
 * not bind into not_bound[ncap] ("" each for NULL), truncated to fit. */
void ls_audit_basis_text(const cJSON *basis, char *rests, size_t rcap, char *not_bound, size_t ncap);

#endif
