/* test_parity_report.h - pieces of the parity reports the audit tests write
 * by hand (schemas/parity.schema.json): a control entry.  Header-only
 * (static inline). */
#ifndef LS_TEST_PARITY_REPORT_H
#define LS_TEST_PARITY_REPORT_H

#include <cjson/cJSON.h>

/* A detected control of the report's configuration "fixture": the fault,
 * the check kind it breaks, its dtype, world and (dp > 0) DP size, its
 * max_rel_err at tolerance 1e-10, and the comparison that saw it (taken
 * over).  The caller adds it to the report's "controls". */
static inline cJSON *ls_test_parity_control(const char *fault, const char *breaks, const char *dtype, int world,
                                            int dp, double max_rel_err, cJSON *comparison) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "fault", fault);
    cJSON_AddStringToObject(c, "breaks", breaks);
    cJSON_AddStringToObject(c, "dtype", dtype);
    cJSON_AddNumberToObject(c, "world", world);
    if (dp > 0) cJSON_AddNumberToObject(c, "dp", dp);
    cJSON_AddStringToObject(c, "configuration", "fixture");
    cJSON_AddStringToObject(c, "check", "fixture");
    cJSON_AddNumberToObject(c, "max_rel_err", max_rel_err);
    cJSON_AddNumberToObject(c, "tolerance", 1e-10);
    cJSON_AddBoolToObject(c, "detected", 1);
    cJSON_AddItemToObject(c, "comparison", comparison);
    return c;
}
#endif
