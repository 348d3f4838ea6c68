/* report.h - the audit's reports of an evaluated run (audit/model/audit.h,
 * audit/rules/rules.h): text, JSON (schemas/audit-report.schema.json), JUnit. */
#ifndef LS_AUDIT_REPORT_H
#define LS_AUDIT_REPORT_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "audit/model/audit.h"

/* Reports.  text: the human summary (stdout in the CLI).  json: a document
 * of schemas/audit-report.schema.json (*out is the caller's, cJSON_Delete;
 * NULL on failure).  junit: one testcase per rule, written atomically to
 * path. */
void ls_audit_report_text(const ls_audit_run *run, FILE *f);
/* The assurance object of the JSON report (the caller's, cJSON_Delete; NULL
 * out of memory). */
cJSON *ls_audit_assurance_json(const ls_audit_run *run);
/* The profile the verdict was judged by, as every report states it (the
 * JSON report's profile_used; the text, JUnit and HTML reports read the same
 * facts): name, file as ls_audit_profile_file_label names it, sha256, how it
 * was chosen, whether the run pins it (the caller's, cJSON_Delete; NULL out
 * of memory). */
cJSON *ls_audit_profile_used_json(const ls_audit_run *run);
ls_status ls_audit_report_json(const ls_audit_run *run, cJSON **out);
ls_status ls_audit_report_junit(const ls_audit_run *run, const char *path, char *err, size_t errlen);
#endif
