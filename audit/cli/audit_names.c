/* audit_names.c - the audit's vocabulary as JSON (audit_names.h). */
#include "audit/cli/audit_names.h"

#include "audit/model/audit.h"
#include "audit/rules/rules.h"
#include "receipts/format/trace_event.h"

/* The names a reader accepts: name_of(i) for i = 0, 1, ... while
 * from_name gives i back (the v1 lists end where the v2 names begin). */
static cJSON *names(const char *table, int v2, int count, const char *(*name_of)(int)) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < count; i++) {
        const char *n = name_of(i);
        int back = v2 ? ls_trace_enum_from_name_v2(table, n) : ls_trace_enum_from_name(table, n);
        if (back != i) break;
        if (!cJSON_AddItemToArray(a, cJSON_CreateString(n))) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static const char *kind_at(int i) { return ls_trace_kind_name((ls_trace_kind)i); }
static const char *phase_at(int i) { return ls_trace_phase_name((ls_trace_phase)i); }
static const char *layer_at(int i) { return ls_trace_layer_kind_name((ls_trace_layer_kind)i); }
static const char *dir_at(int i) { return ls_trace_dir_name((ls_trace_dir)i); }
static const char *op_at(int i) { return ls_trace_op_name((ls_trace_op)i); }
static const char *red_at(int i) { return ls_trace_red_name((ls_trace_red)i); }
static const char *dtype_at(int i) { return ls_trace_dtype_name((ls_trace_dtype)i); }
static const char *objective_at(int i) { return ls_trace_objective_name((ls_trace_objective)i); }

static int add(cJSON *o, const char *k, cJSON *v) {
    if (v && cJSON_AddItemToObject(o, k, v)) return 1;
    cJSON_Delete(v);
    return 0;
}

cJSON *ls_audit_names_json(void) {
    cJSON *d = cJSON_CreateObject(), *rules = cJSON_CreateArray(), *tr = cJSON_CreateObject(),
          *sz = cJSON_CreateObject();
    int ok = d && cJSON_AddStringToObject(d, "tool", "longstraw-audit");
    ok = add(d, "rule_ids", rules) && ok;
    for (size_t i = 0; ok && i < ls_audit_rule_id_count(); i++) {
        int level = 0;
        const char *id = ls_audit_rule_id_at(i, &level);
        cJSON *r = cJSON_CreateObject();
        ok = r && cJSON_AddItemToArray(rules, r) && cJSON_AddStringToObject(r, "id", id) &&
             cJSON_AddNumberToObject(r, "level", level);
    }
    static const char *const FAULTS_READ[] = {LS_AUDIT_FAULT_LOCAL_ATTENTION, LS_AUDIT_FAULT_SKIP_DKV,
                                               LS_AUDIT_FAULT_SKIP_FINALIZE};
    cJSON *fr = cJSON_CreateArray();
    ok = add(d, "faults_read", fr) && ok;
    for (size_t i = 0; ok && i < sizeof FAULTS_READ / sizeof FAULTS_READ[0]; i++)
        ok = cJSON_AddItemToArray(fr, cJSON_CreateString(FAULTS_READ[i]));
    ok = add(d, "trace", tr) && ok;
    if (ok) {
        /* event kinds are not an enumerated table of the reader's: every name up to the count */
        cJSON *k = cJSON_CreateArray();
        ok = add(tr, "event_kinds", k);
        for (int i = 0; ok && i < LS_TRACE_KIND_COUNT; i++)
            ok = cJSON_AddItemToArray(k, cJSON_CreateString(kind_at(i)));
        ok = ok && add(tr, "phases", names("phase", 0, LS_PHASE_COUNT, phase_at)) &&
             add(tr, "layer_kinds", names("layer_kind", 0, LS_TRACE_LAYER_KIND_COUNT, layer_at)) &&
             add(tr, "dirs", names("dir", 0, LS_TRACE_DIR_COUNT, dir_at)) &&
             add(tr, "ops", names("op", 0, LS_TRACE_OP_COUNT_V2, op_at)) &&
             add(tr, "ops_v2", names("op", 1, LS_TRACE_OP_COUNT_V2, op_at)) &&
             add(tr, "reds", names("red", 0, LS_TRACE_RED_COUNT_V2, red_at)) &&
             add(tr, "reds_v2", names("red", 1, LS_TRACE_RED_COUNT_V2, red_at)) &&
             add(tr, "dtypes", names("dtype", 0, LS_TRACE_DTYPE_COUNT_V2, dtype_at)) &&
             add(tr, "dtypes_v2", names("dtype", 1, LS_TRACE_DTYPE_COUNT_V2, dtype_at)) &&
             add(tr, "objectives", names("objective", 0, LS_TRACE_OBJECTIVE_COUNT, objective_at));
    }
    /* the records docs/audit.md sizes ("Memory"): a group collective's in the flight recorder, a
       point-to-point message's, an open step's layer key, and what stays per step and rank */
    ok = add(d, "record_sizes", sz) && ok;
    ok = ok && cJSON_AddNumberToObject(sz, "flight_recorder", (double)sizeof(ls_audit_coll)) &&
         cJSON_AddNumberToObject(sz, "p2p", (double)sizeof(ls_audit_p2p)) &&
         cJSON_AddNumberToObject(sz, "layer_key", (double)sizeof(ls_audit_layer_key)) &&
         cJSON_AddNumberToObject(sz, "step", (double)(sizeof(ls_audit_step) + sizeof(ls_audit_step_metric)));
    if (!ok) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}
