/* train_names.c - the trainer's vocabulary as JSON (train_names.h).  Each
 * list is read from where the trainer defines it, in one place below: the
 * families and layer kinds from the family registry (family_desc.h), the
 * backends from the communicator's registry (comm.h), the group kinds from
 * the trace's table (receipts/format/trace_event.h), the faults and option values
 * from the option table (train_args.c). */
#include "trainer/run/train_names.h"

#include <stdio.h>
#include <string.h>

#include "receipts/format/trace_event.h"
#include "trainer/dist/comm.h"
#include "trainer/model/family_desc.h"
#include "trainer/run/train_args.h"

static int add_str(cJSON *a, const char *s) { return a && cJSON_AddItemToArray(a, cJSON_CreateString(s)); }

/* The families: the registry (trainer/model/family_desc.h), in the order
 * of trainer/families/families.list. */
static cJSON *families(void) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < ls_family_count(); i++)
        if (!add_str(a, ls_family_at(i)->name)) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* The mixer layer kinds every registered family uses (its descriptor's
 * layer_kinds, the names its layer_end events carry), each once, in the
 * trace's order (receipts/format/trace_event.h); a family's kind the trace does not
 * know is listed after them, for tests/tools/check_vocab.py to name. */
static int has_kind(const char *k) {
    for (size_t i = 0; i < ls_family_count(); i++)
        for (const char *const *p = ls_family_at(i)->layer_kinds; p && *p; p++)
            if (strcmp(*p, k) == 0) return 1;
    return 0;
}
static cJSON *layer_kinds(void) {
    cJSON *a = cJSON_CreateArray();
    int ok = a != NULL;
    for (int k = 0; ok && k < LS_TRACE_LAYER_KIND_COUNT; k++) {
        const char *n = ls_trace_layer_kind_name((ls_trace_layer_kind)k);
        if (n && has_kind(n)) ok = add_str(a, n);
    }
    for (size_t i = 0; ok && i < ls_family_count(); i++)
        for (const char *const *p = ls_family_at(i)->layer_kinds; ok && p && *p; p++) {
            int known = 0;
            for (int k = 0; k < LS_TRACE_LAYER_KIND_COUNT; k++) {
                const char *n = ls_trace_layer_kind_name((ls_trace_layer_kind)k);
                if (n && strcmp(n, *p) == 0) known = 1;
            }
            if (!known) ok = add_str(a, *p);
        }
    if (!ok) {
        cJSON_Delete(a);
        return NULL;
    }
    return a;
}

/* The communicator's registered backends (ls_comm_backend_info_at) and the
 * registered group kinds (receipts/format/trace_event.h's table). */
static cJSON *comm_names(int groups) {
    cJSON *a = cJSON_CreateArray();
    size_t n = groups ? (size_t)LS_TRACE_GROUP_KIND_COUNT : ls_comm_backend_count();
    for (size_t i = 0; a && i < n; i++) {
        ls_comm_backend_info b;
        const char *name = groups ? ls_trace_group_kind_name((ls_trace_group_kind)i)
                                  : (ls_comm_backend_info_at(i, &b) ? b.name : NULL);
        if (!name || !add_str(a, name)) {
            cJSON_Delete(a);
            return NULL;
        }
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
