/* train_names.c - the trainer's vocabulary as JSON (train_names.h).  Each
 * list is read from where the trainer defines it, in one place below: the
 * families and layer kinds through trainer/model/config.h, the backends and
 * group kinds through trainer/dist/comm.h, the faults and option values
 * from the option table (train_args.c). */
#include "trainer/run/train_names.h"

#include <stdio.h>
#include <string.h>

#include "receipts/trace_event.h"
#include "trainer/dist/comm.h"
#include "trainer/model/config.h"
#include "trainer/run/train_args.h"

static int add_str(cJSON *a, const char *s) { return a && cJSON_AddItemToArray(a, cJSON_CreateString(s)); }

/* The families (config.h: ls_family, ls_family_name).  When the families
 * become a registry, this is the one place that reads it. */
static cJSON *families(void) {
    static const ls_family ALL[] = {LS_FAMILY_HYBRID, LS_FAMILY_MLA};
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < sizeof ALL / sizeof ALL[0]; i++)
        if (!add_str(a, ls_family_name(ALL[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* The mixer layer kinds (config.h: ls_layer_kind), by the name their
 * layer_end events carry: ls_layer_kind's values are the trace's. */
_Static_assert((int)LS_LAYER_GDN == (int)LS_TRACE_LAYER_GDN && (int)LS_LAYER_ATTN == (int)LS_TRACE_LAYER_ATTN &&
                   (int)LS_LAYER_MLA == (int)LS_TRACE_LAYER_MLA,
               "a layer kind is its trace layer_end kind");
static cJSON *layer_kinds(void) {
    static const ls_layer_kind ALL[] = {LS_LAYER_GDN, LS_LAYER_ATTN, LS_LAYER_MLA};
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < sizeof ALL / sizeof ALL[0]; i++)
        if (!add_str(a, ls_trace_layer_kind_name((ls_trace_layer_kind)ALL[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* The communicator's backends and group kinds, as trainer/dist/comm.h
 * names them (ls_comm_backend: "single" or "mpi"; ls_group_kind: "cp",
 * "ep" or "world").  comm.h has no list of them yet: when the backends and
 * group kinds become registered names, this is the one place that reads
 * the registry instead. */
static cJSON *comm_names(int groups) {
    const char *const backends[] = {ls_comm_backend(NULL) /* one process's: "single" */, "mpi"};
    static const char *const GROUP_KINDS[] = {"cp", "ep", "world"};
    const char *const *t = groups ? GROUP_KINDS : backends;
    size_t n = groups ? sizeof GROUP_KINDS / sizeof *GROUP_KINDS : sizeof backends / sizeof *backends;
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++)
        if (!add_str(a, t[i])) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

static cJSON *faults(void) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < ls_train_fault_count(); i++)
        if (!add_str(a, ls_train_fault_at(i, NULL, NULL))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* {"--grad-mode": ["detached", "full"], ...}: every fixed-choice option. */
static cJSON *choices(void) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < ls_train_option_count(); i++) {
        const char *c = ls_train_option_choices(i);
        if (!c) continue;
        cJSON *a = cJSON_AddArrayToObject(o, ls_train_option_at(i, NULL, NULL, NULL));
        for (const char *s = c; a;) {
            size_t n = strcspn(s, "|");
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)n, s);
            if (!add_str(a, buf)) a = NULL;
            if (!s[n]) break;
            s += n + 1;
        }
        if (!a) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

static int add(cJSON *o, const char *k, cJSON *v) {
    if (v && cJSON_AddItemToObject(o, k, v)) return 1;
    cJSON_Delete(v);
    return 0;
}

cJSON *ls_train_names_json(void) {
    cJSON *d = cJSON_CreateObject();
    int ok = d && cJSON_AddStringToObject(d, "tool", "longstraw-train");
    ok = add(d, "families", families()) && ok;
    ok = add(d, "layer_kinds", layer_kinds()) && ok;
    ok = add(d, "backends", comm_names(0)) && ok;
    ok = add(d, "group_kinds", comm_names(1)) && ok;
    ok = add(d, "faults", faults()) && ok;
    ok = add(d, "option_values", choices()) && ok;
    if (!ok) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}
