/* receipt.c - building, writing, reading and checking per-rank receipts
 * (contract in receipt.h). */
#include "receipts/writing/receipt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "receipts/format/atomic_file.h"
#include "receipts/format/build_info.h"
#include "receipts/format/json_util.h"
#include "receipts/format/registry_file.h"
#include "receipts/schema/schema.h"
#include "receipts/format/trace_event.h"

ls_status ls_receipt_rank_dir(uint32_t rank, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "rank-%04u", (unsigned)rank);
    return n < 0 || (size_t)n >= cap ? LS_ERR_ARG : LS_OK;
}

ls_status ls_receipt_path(const char *run_dir, uint32_t rank, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s/rank-%04u/receipt.json", run_dir, (unsigned)rank);
    return n < 0 || (size_t)n >= cap ? LS_ERR_ARG : LS_OK;
}

int ls_receipt_relpath_ok(const char *rel) {
    static const char allowed[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+@=-";
    if (rel == NULL) return 0;
    size_t len = strlen(rel);
    if (len == 0 || len > 1024) return 0;
    const char *p = rel;
    for (;;) {
        size_t n = strspn(p, allowed);
        if (n == 0) return 0; /* empty component or a forbidden byte */
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        p += n;
        if (*p == '\0') return 1;
        if (*p != '/') return 0;
        p++;
    }
}

/* An array element written like ls_json_add_u64 writes a member. */
static int add_u64_item(cJSON *arr, uint64_t v) {
    cJSON *it;
    if (v < UINT64_C(1000000000000000)) {
        it = cJSON_CreateNumber((double)v);
    } else {
        char digits[24];
        snprintf(digits, sizeof digits, "%" PRIu64, v);
        it = cJSON_CreateRaw(digits);
    }
    return it != NULL && cJSON_AddItemToArray(arr, it) ? 0 : -1;
}

/* steps_exact, steps_prefix_frozen, prefix_frozen_steps and the optional
 * steps_by_objective into the predicate p; -1 on allocation failure. */
static int add_step_kinds(cJSON *p, const ls_receipt *r) {
    int bad = ls_json_add_u64(p, "steps_exact", r->steps - r->steps_prefix_frozen);
    bad |= ls_json_add_u64(p, "steps_prefix_frozen", r->steps_prefix_frozen);
    cJSON *list = cJSON_AddArrayToObject(p, "prefix_frozen_steps");
    if (list == NULL) return -1;
    for (uint64_t i = 0; i < r->steps_prefix_frozen; i++) bad |= add_u64_item(list, r->prefix_frozen_steps[i]);
    if (r->n_objectives > 0) {
        cJSON *obj = cJSON_AddObjectToObject(p, "steps_by_objective");
        if (obj == NULL) return -1;
        for (size_t i = 0; i < r->n_objectives; i++)
            bad |= ls_json_add_u64(obj, r->objectives[i].objective, r->objectives[i].steps);
    }
    return bad;
}

static const char *status_name(ls_receipt_status s) {
    return s == LS_RECEIPT_COMPLETE ? "complete" : "error";
}

ls_status ls_receipt_to_json(const ls_receipt *r, const char *events_sha256, cJSON **out,
                             char *err, size_t errlen) {
    *out = NULL;
    const char *missing = r->run_id == NULL        ? "run_id"
                          : r->host == NULL        ? "host"
                          : r->build == NULL       ? "build"
                          : r->config == NULL      ? "config"
                          : r->events_file == NULL ? "events_file"
                          : events_sha256 == NULL  ? "events digest"
                          : (r->phases == NULL && r->n_phases > 0) ? "phases"
                          : (r->memory == NULL && r->n_memory > 0) ? "memory"
                          : (r->prefix_frozen_steps == NULL && r->steps_prefix_frozen > 0)
                              ? "prefix_frozen_steps"
                          : (r->objectives == NULL && r->n_objectives > 0) ? "objectives"
                          : (r->profile_name == NULL) != (r->profile_sha256 == NULL)
                              ? "profile name or sha256 (they go together)"
                                                                           : NULL;
    for (size_t i = 0; missing == NULL && i < r->n_phases; i++)
        if (r->phases[i].phase == NULL) missing = "a phase name";
    for (size_t i = 0; missing == NULL && i < r->n_memory; i++)
        if (r->memory[i].name == NULL) missing = "a memory category name";
    for (size_t i = 0; missing == NULL && i < r->n_objectives; i++)
        if (r->objectives[i].objective == NULL) missing = "an objective name";
    if (missing != NULL) {
        ls_json_errf(err, errlen, "receipt: %s is NULL", missing);
        return LS_ERR_ARG;
    }
    if (r->steps_prefix_frozen > r->steps) {
        ls_json_errf(err, errlen, "receipt: steps_prefix_frozen %llu is above steps %llu",
                     (unsigned long long)r->steps_prefix_frozen, (unsigned long long)r->steps);
        return LS_ERR_ARG;
    }
    ls_status st = LS_ERR_NOMEM;
    cJSON *doc = cJSON_CreateObject();
    if (doc == NULL) goto cleanup;
    cJSON_AddStringToObject(doc, "_type", LS_RECEIPT_STATEMENT_TYPE);
    cJSON *subjects = cJSON_AddArrayToObject(doc, "subject");
    cJSON *subject = cJSON_CreateObject();
    cJSON_AddItemToArray(subjects, subject);
    cJSON_AddStringToObject(subject, "name", r->events_file);
    cJSON *digest = cJSON_AddObjectToObject(subject, "digest");
    cJSON_AddStringToObject(digest, "sha256", events_sha256);
    cJSON_AddStringToObject(doc, "predicateType", LS_RECEIPT_PREDICATE_TYPE);

    cJSON *p = cJSON_AddObjectToObject(doc, "predicate");
    cJSON_AddStringToObject(p, "run_id", r->run_id);
    ls_json_add_u64(p, "rank", r->rank);
    ls_json_add_u64(p, "world", r->world);
    cJSON_AddStringToObject(p, "host", r->host);
    cJSON_AddItemToObject(p, "build", cJSON_Duplicate(r->build, 1));
    cJSON_AddItemToObject(p, "config", cJSON_Duplicate(r->config, 1));
    if (r->profile_name != NULL) {
        cJSON *prof = cJSON_AddObjectToObject(p, "profile");
        cJSON_AddStringToObject(prof, "name", r->profile_name);
        cJSON_AddStringToObject(prof, "sha256", r->profile_sha256);
    }
    ls_json_add_u64(p, "steps", r->steps);
    if (add_step_kinds(p, r) != 0) goto cleanup;
    cJSON *phases = cJSON_AddArrayToObject(p, "phases");
    for (size_t i = 0; i < r->n_phases; i++) {
        cJSON *ph = cJSON_CreateObject();
        cJSON_AddItemToArray(phases, ph);
        cJSON_AddStringToObject(ph, "phase", r->phases[i].phase);
        ls_json_add_u64(ph, "count", r->phases[i].count);
        ls_json_add_u64(ph, "wall_ns_total", r->phases[i].wall_ns_total);
    }
    cJSON *mem = cJSON_AddObjectToObject(p, "memory");
    cJSON *run = cJSON_AddObjectToObject(mem, "run");
    cJSON *step = cJSON_AddObjectToObject(mem, "per_step");
    cJSON *run_cats = cJSON_AddObjectToObject(run, "categories");
    ls_json_add_u64(step, "steps", r->steps_measured);
    cJSON *step_cats = cJSON_AddObjectToObject(step, "categories");
    for (size_t i = 0; i < r->n_memory; i++) {
        cJSON *cat = cJSON_AddObjectToObject(run_cats, r->memory[i].name);
        ls_json_add_u64(cat, "peak_bytes", r->memory[i].run_peak_bytes);
        cat = cJSON_AddObjectToObject(step_cats, r->memory[i].name);
        ls_json_add_u64(cat, "peak_bytes", r->memory[i].step_peak_bytes);
    }
    ls_json_add_u64(run, "total_peak_bytes", r->run_total_peak_bytes);
    ls_json_add_u64(run, "rss_peak_bytes", r->rss_peak_bytes);
    ls_json_add_u64(step, "total_peak_bytes", r->step_total_peak_bytes);
    if (r->step_total_peak_at < 0) cJSON_AddNullToObject(step, "total_peak_step");
    else ls_json_add_u64(step, "total_peak_step", (uint64_t)r->step_total_peak_at);
    cJSON *ev = cJSON_AddObjectToObject(p, "events");
    cJSON_AddStringToObject(ev, "file", r->events_file);
    ls_json_add_u64(ev, "count", r->events_count);
    if (r->events_last_seq < 0) cJSON_AddNullToObject(ev, "last_seq");
    else ls_json_add_u64(ev, "last_seq", (uint64_t)r->events_last_seq);
    cJSON_AddStringToObject(p, "status", status_name(r->status));
    if (r->error_message != NULL) {
        cJSON *e = cJSON_AddObjectToObject(p, "error");
        cJSON_AddNumberToObject(e, "code", r->error_code);
        cJSON_AddStringToObject(e, "message", r->error_message);
    }
    if (r->rank_state) cJSON_AddItemToObject(p, "rank_state", cJSON_Duplicate(r->rank_state, 1));
    cJSON *t = cJSON_AddObjectToObject(p, "timing");
    ls_json_add_u64(t, "start_unix_ns", r->start_unix_ns);
    ls_json_add_u64(t, "end_unix_ns", r->end_unix_ns);
    /* cJSON's Add* functions return NULL on allocation failure and leave the
     * document short; the schema check of the printed text catches any
     * member that went missing, so only the containers are checked here. */
    if (subjects == NULL || subject == NULL || digest == NULL || p == NULL || phases == NULL ||
        mem == NULL || run == NULL || step == NULL || run_cats == NULL || step_cats == NULL ||
        ev == NULL || t == NULL)
        goto cleanup;
    *out = doc;
    doc = NULL;
    st = LS_OK;
cleanup:
    cJSON_Delete(doc);
    return st;
}

/* Memory-category names are object keys, which the schema subset cannot
 * constrain: the trace's identifier class, at most 64 bytes like the
 * schema's "ident". */
static int is_category_name(const char *s) {
    return ls_trace_is_ident(s) && strlen(s) <= 64;
}

/* The per-step scope of a schema-valid memory object into r (whose run
 * scope is already filled), with the checks the schema cannot express: the
 * same categories in both scopes, in the same order; no per-step peak above
 * its run peak; no category above its scope's total; the step count and the
 * step of the largest total consistent with the steps completed. */
static ls_status extract_step_memory(ls_receipt *r, const cJSON *step, const cJSON *step_cats,
                                     const char *what, char *err, size_t errlen) {
    ls_receipt_memory *mem = (ls_receipt_memory *)r->memory;
    size_t i = 0;
    for (const cJSON *e = step_cats->child; e != NULL; e = e->next, i++) {
        if (i >= r->n_memory || strcmp(e->string, mem[i].name) != 0) {
            ls_json_errf(err, errlen, "%s: /predicate/memory/per_step/categories: \"%s\" is not "
                         "category %zu of /predicate/memory/run/categories", what, e->string, i);
            return LS_ERR_FORMAT;
        }
        ls_json_get_u64(e, "peak_bytes", &mem[i].step_peak_bytes);
    }
    if (i != r->n_memory) {
        ls_json_errf(err, errlen, "%s: /predicate/memory/per_step/categories: %zu categories, "
                     "the run scope has %zu", what, i, r->n_memory);
        return LS_ERR_FORMAT;
    }
    ls_json_get_u64(step, "total_peak_bytes", &r->step_total_peak_bytes);
    ls_json_get_u64(step, "steps", &r->steps_measured);
    uint64_t at = 0;
    r->step_total_peak_at = ls_json_get_u64(step, "total_peak_step", &at) == 0 ? (int64_t)at : -1;
    for (i = 0; i < r->n_memory; i++) {
        const char *scope = mem[i].step_peak_bytes > mem[i].run_peak_bytes ? "run peak"
                            : mem[i].run_peak_bytes > r->run_total_peak_bytes ? "run total peak"
                            : mem[i].step_peak_bytes > r->step_total_peak_bytes ? "per-step total peak"
                                                                                 : NULL;
        if (scope != NULL) {
            ls_json_errf(err, errlen, "%s: /predicate/memory: category \"%s\" (run %llu, per "
                         "step %llu bytes) is above its %s", what, mem[i].name,
                         (unsigned long long)mem[i].run_peak_bytes,
                         (unsigned long long)mem[i].step_peak_bytes, scope);
            return LS_ERR_FORMAT;
        }
    }
    if (r->step_total_peak_bytes > r->run_total_peak_bytes) {
        ls_json_errf(err, errlen, "%s: /predicate/memory/per_step/total_peak_bytes %llu is above "
                     "the run's %llu", what, (unsigned long long)r->step_total_peak_bytes,
                     (unsigned long long)r->run_total_peak_bytes);
        return LS_ERR_FORMAT;
    }
    if (r->steps_measured < r->steps || r->steps_measured - r->steps > 1) {
        ls_json_errf(err, errlen, "%s: /predicate/memory/per_step/steps %llu: not /predicate/steps "
                     "(%llu) or one more", what, (unsigned long long)r->steps_measured,
                     (unsigned long long)r->steps);
        return LS_ERR_FORMAT;
    }
    if ((r->steps_measured == 0) != (r->step_total_peak_at < 0) ||
        (r->step_total_peak_at >= 0 && (uint64_t)r->step_total_peak_at >= r->steps_measured)) {
        ls_json_errf(err, errlen, "%s: /predicate/memory/per_step/total_peak_step: must name one "
                     "of the %llu steps measured (null when none)", what,
                     (unsigned long long)r->steps_measured);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

_Static_assert(sizeof(ls_receipt_phase) % 8 == 0 && sizeof(ls_receipt_memory) % 8 == 0 &&
                   sizeof(ls_receipt_objective) % 8 == 0,
               "extract() packs these arrays into one block");

/* The exact / prefix-frozen split and the objective counts of a
 * schema-valid predicate into r (steps already read), with the checks the
 * schema cannot express: the counts add up to steps, the index list is as
 * long as the prefix-frozen count and strictly increasing.  The arrays go
 * to pf and objs (sized from the document by the caller). */
static ls_status extract_step_kinds(ls_receipt *r, const cJSON *p, uint64_t *pf,
                                    ls_receipt_objective *objs, const char *what, char *err,
                                    size_t errlen) {
    ls_json_get_u64(p, "steps_exact", &r->steps_exact);
    ls_json_get_u64(p, "steps_prefix_frozen", &r->steps_prefix_frozen);
    if (r->steps_exact + r->steps_prefix_frozen != r->steps) {
        ls_json_errf(err, errlen, "%s: /predicate: steps_exact %llu + steps_prefix_frozen %llu is "
                     "not steps %llu", what, (unsigned long long)r->steps_exact,
                     (unsigned long long)r->steps_prefix_frozen, (unsigned long long)r->steps);
        return LS_ERR_FORMAT;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "prefix_frozen_steps");
    uint64_t n = 0;
    for (const cJSON *e = list->child; e != NULL; e = e->next, n++) {
        double d = e->valuedouble; /* schema: an integer in [0, 2^53-1] */
        pf[n] = (uint64_t)d;
        if (n > 0 && pf[n] <= pf[n - 1]) {
            ls_json_errf(err, errlen, "%s: /predicate/prefix_frozen_steps/%llu: step %llu is not "
                         "above the one before (%llu)", what, (unsigned long long)n,
                         (unsigned long long)pf[n], (unsigned long long)pf[n - 1]);
            return LS_ERR_FORMAT;
        }
    }
    if (n != r->steps_prefix_frozen) {
        ls_json_errf(err, errlen, "%s: /predicate/prefix_frozen_steps: %llu steps listed, "
                     "steps_prefix_frozen is %llu", what, (unsigned long long)n,
                     (unsigned long long)r->steps_prefix_frozen);
        return LS_ERR_FORMAT;
    }
    r->prefix_frozen_steps = n > 0 ? pf : NULL;
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(p, "steps_by_objective");
    if (by == NULL) return LS_OK;
    size_t k = 0;
    uint64_t sum = 0;
    for (const cJSON *e = by->child; e != NULL; e = e->next, k++) {
        objs[k].objective = e->string;
        ls_json_get_u64(by, e->string, &objs[k].steps);
        sum += objs[k].steps;
    }
    r->objectives = objs;
    r->n_objectives = k;
    if (sum != r->steps) {
        ls_json_errf(err, errlen, "%s: /predicate/steps_by_objective: the counts add up to %llu, "
                     "not steps %llu", what, (unsigned long long)sum, (unsigned long long)r->steps);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

/* The members v1 and v2 predicates share (schema-valid p): rank below
 * world, run id, host, and the build, config and rank_state objects
 * (rank_state NULL when absent), the profile (NULL when absent: v1 only). */
static ls_status extract_head(ls_receipt *r, const cJSON *p, const char *what, char *err, size_t errlen) {
    uint64_t rank = 0, world = 0;
    ls_json_get_u64(p, "rank", &rank);
    ls_json_get_u64(p, "world", &world);
    if (rank >= world) {
        ls_json_errf(err, errlen, "%s: /predicate/rank %llu is not below world %llu", what,
                     (unsigned long long)rank, (unsigned long long)world);
        return LS_ERR_FORMAT;
    }
    r->rank = (uint32_t)rank;
    r->world = (uint32_t)world;
    r->run_id = cJSON_GetObjectItemCaseSensitive(p, "run_id")->valuestring;
    r->host = cJSON_GetObjectItemCaseSensitive(p, "host")->valuestring;
    r->build = cJSON_GetObjectItemCaseSensitive(p, "build");
    r->config = cJSON_GetObjectItemCaseSensitive(p, "config");
    r->rank_state = cJSON_GetObjectItemCaseSensitive(p, "rank_state");
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(p, "profile"); /* v2: required; v1: optional */
    if (prof != NULL) {
        r->profile_name = cJSON_GetObjectItemCaseSensitive(prof, "name")->valuestring;
        r->profile_sha256 = cJSON_GetObjectItemCaseSensitive(prof, "sha256")->valuestring;
    }
    return LS_OK;
}

/* The fields v1 and v2 predicates share (schema-valid p): the events file,
 * count and last seq, the subject naming that file and its digest, the
 * status and error. */
static ls_status extract_events_status(ls_receipt *r, const cJSON *p, const cJSON *subject, const char *what,
                                       char *err, size_t errlen) {
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(p, "events");
    r->events_file = cJSON_GetObjectItemCaseSensitive(ev, "file")->valuestring;
    ls_json_get_u64(ev, "count", &r->events_count);
    uint64_t last = 0;
    r->events_last_seq = ls_json_get_u64(ev, "last_seq", &last) == 0 ? (int64_t)last : -1;
    const char *sname = cJSON_GetObjectItemCaseSensitive(subject, "name")->valuestring;
    if (strcmp(sname, r->events_file) != 0) {
        ls_json_errf(err, errlen, "%s: /subject/0/name \"%s\" is not the events file \"%s\"",
                     what, sname, r->events_file);
        return LS_ERR_FORMAT;
    }
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(subject, "digest");
    snprintf(r->events_sha256, sizeof r->events_sha256, "%s",
             cJSON_GetObjectItemCaseSensitive(dg, "sha256")->valuestring);
    r->status = strcmp(cJSON_GetObjectItemCaseSensitive(p, "status")->valuestring, "complete") == 0
                    ? LS_RECEIPT_COMPLETE
                    : LS_RECEIPT_ERROR;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(p, "error");
    if (e != NULL) {
        r->error_code = (int)cJSON_GetObjectItemCaseSensitive(e, "code")->valuedouble;
        r->error_message = cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring;
    }
    return LS_OK;
}

/* Fills r from a schema-valid document; structural checks the schema
 * cannot express. */
static ls_status extract(ls_receipt *r, const char *what, char *err, size_t errlen) {
    const cJSON *doc = r->priv_doc;
    const cJSON *subject = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "subject"), 0);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
    ls_status hs = extract_head(r, p, what, err, errlen);
    if (hs != LS_OK) return hs;
    char why[256];
    ls_status st = ls_build_info_check(r->build, why, sizeof why);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: /predicate/build: %s", what, why);
        return st;
    }
    ls_json_get_u64(p, "steps", &r->steps);

    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(p, "phases");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(p, "memory");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(m, "run");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(m, "per_step");
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(run, "categories");
    const cJSON *step_cats = cJSON_GetObjectItemCaseSensitive(step, "categories");
    size_t np = (size_t)cJSON_GetArraySize(phases), nm = (size_t)cJSON_GetArraySize(cats);
    size_t nf = (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "prefix_frozen_steps"));
    size_t no = (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "steps_by_objective"));
    /* every element size is a multiple of 8: one block keeps them aligned */
    r->priv_arrays = calloc(np * sizeof(ls_receipt_phase) + nm * sizeof(ls_receipt_memory) +
                                nf * sizeof(uint64_t) + no * sizeof(ls_receipt_objective) + 1,
                            1);
    if (r->priv_arrays == NULL) return LS_ERR_NOMEM;
    ls_receipt_phase *ph = r->priv_arrays;
    ls_receipt_memory *mem = (ls_receipt_memory *)(ph + np);
    uint64_t *pf = (uint64_t *)(mem + nm);
    ls_receipt_objective *objs = (ls_receipt_objective *)(pf + nf);
    st = extract_step_kinds(r, p, pf, objs, what, err, errlen);
    if (st != LS_OK) return st;
    size_t i = 0;
    for (const cJSON *e = phases->child; e != NULL; e = e->next, i++) {
        ph[i].phase = cJSON_GetObjectItemCaseSensitive(e, "phase")->valuestring;
        ls_json_get_u64(e, "count", &ph[i].count);
        ls_json_get_u64(e, "wall_ns_total", &ph[i].wall_ns_total);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(ph[j].phase, ph[i].phase) == 0) {
                ls_json_errf(err, errlen, "%s: /predicate/phases/%zu: phase \"%s\" listed twice",
                             what, i, ph[i].phase);
                return LS_ERR_FORMAT;
            }
        }
    }
    i = 0;
    for (const cJSON *e = cats->child; e != NULL; e = e->next, i++) {
        if (!is_category_name(e->string)) {
            ls_json_errf(err, errlen,
                         "%s: /predicate/memory/categories: name \"%s\" is not an identifier",
                         what, e->string);
            return LS_ERR_FORMAT;
        }
        mem[i].name = e->string;
        ls_json_get_u64(e, "peak_bytes", &mem[i].run_peak_bytes);
    }
    r->phases = ph;
    r->n_phases = np;
    r->memory = mem;
    r->n_memory = nm;
    ls_json_get_u64(run, "total_peak_bytes", &r->run_total_peak_bytes);
    ls_json_get_u64(run, "rss_peak_bytes", &r->rss_peak_bytes);
    st = extract_step_memory(r, step, step_cats, what, err, errlen);
    if (st != LS_OK) return st;

    st = extract_events_status(r, p, subject, what, err, errlen);
    if (st != LS_OK) return st;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "timing");
    ls_json_get_u64(t, "start_unix_ns", &r->start_unix_ns);
    ls_json_get_u64(t, "end_unix_ns", &r->end_unix_ns);
    if (r->end_unix_ns < r->start_unix_ns) {
        ls_json_errf(err, errlen, "%s: /predicate/timing: end_unix_ns is before start_unix_ns",
                     what);
        return LS_ERR_FORMAT;
    }
    return LS_OK;
}

/* The v2 predicate (schema-valid) into r: build identity recomputed, phases
 * unique, steps_exact <= steps, the subject is the events file. */
static ls_status extract_v2(ls_receipt *r, const char *what, char *err, size_t errlen) {
    const cJSON *doc = r->priv_doc;
    const cJSON *subject = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "subject"), 0);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
    ls_status hs = extract_head(r, p, what, err, errlen);
    if (hs != LS_OK) return hs;
    r->version = 2;
    char why[400];
    ls_status st = ls_build_info_check_v2(r->build, why, sizeof why);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: /predicate/build: %s", what, why);
        return st == LS_ERR_NOMEM ? st : LS_ERR_CORRUPT;
    }
    ls_json_get_u64(p, "steps", &r->steps);
    ls_json_get_u64(p, "steps_exact", &r->steps_exact);
    if (r->steps_exact > r->steps) {
        ls_json_errf(err, errlen, "%s: /predicate/steps_exact %llu is above steps %llu", what,
                     (unsigned long long)r->steps_exact, (unsigned long long)r->steps);
        return LS_ERR_FORMAT;
    }
    r->steps_prefix_frozen = r->steps - r->steps_exact;
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(p, "phases");
    size_t np = (size_t)cJSON_GetArraySize(phases);
    r->priv_arrays = calloc(np * sizeof(ls_receipt_phase) + 1, 1);
    if (r->priv_arrays == NULL) return LS_ERR_NOMEM;
    ls_receipt_phase *ph = r->priv_arrays;
    size_t i = 0;
    for (const cJSON *e = phases->child; e != NULL; e = e->next, i++) {
        ph[i].phase = cJSON_GetObjectItemCaseSensitive(e, "phase")->valuestring;
        ls_json_get_u64(e, "count", &ph[i].count);
        ls_json_get_u64(e, "wall_ns_total", &ph[i].wall_ns_total);
        for (size_t j = 0; j < i; j++)
            if (strcmp(ph[j].phase, ph[i].phase) == 0) {
                ls_json_errf(err, errlen, "%s: /predicate/phases/%zu: phase \"%s\" listed twice",
                             what, i, ph[i].phase);
                return LS_ERR_FORMAT;
            }
    }
    r->phases = ph;
    r->n_phases = np;
    st = extract_events_status(r, p, subject, what, err, errlen);
    if (st != LS_OK) return st;
    return LS_OK;
}

ls_status ls_receipt_parse(const char *bytes, size_t len, const char *what, ls_receipt **out,
                           char *err, size_t errlen) {
    *out = NULL;
    if (what == NULL) what = "receipt";
    cJSON *doc = NULL;
    ls_status st = ls_json_parse(bytes, len, what, &doc, err, errlen);
    if (st != LS_OK) return st;
    ls_receipt *r = NULL;
    const ls_schema *schema = NULL;
    ls_schema_errors errs = {0};
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(doc, "predicateType");
    int version = cJSON_IsString(pt) && strcmp(pt->valuestring, LS_RECEIPT_PREDICATE_TYPE_V2) == 0 ? 2 : 1;
    st = ls_schema_get(version == 2 ? "receipt-v2" : "receipt", &schema, err, errlen);
    if (st != LS_OK) goto cleanup;
    st = ls_schema_validate(schema, doc, &errs);
    if (st != LS_OK) {
        char first[600];
        ls_schema_errors_first(&errs, first, sizeof first);
        ls_json_errf(err, errlen, "%s: not a valid receipt: %s", what, first);
        goto cleanup;
    }
    /* v1: the family's keys by the registry (the schema names no family) */
    if (version == 1) {
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
        st = ls_registry_check_config(cJSON_GetObjectItemCaseSensitive(pred, "config"), what, err, errlen);
        if (st != LS_OK) goto cleanup;
    }
    r = calloc(1, sizeof *r);
    if (r == NULL) {
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    r->priv_doc = doc;
    doc = NULL;
    r->version = 1;
    st = version == 2 ? extract_v2(r, what, err, errlen) : extract(r, what, err, errlen);
    if (st != LS_OK) goto cleanup;
    *out = r;
    r = NULL;
cleanup:
    ls_schema_errors_free(&errs);
    ls_receipt_free(r);
    cJSON_Delete(doc);
    return st;
}

ls_status ls_receipt_read(const char *path, ls_receipt **out, char *err, size_t errlen) {
    *out = NULL;
    char *raw = NULL;
    size_t len = 0;
    ls_status st = ls_json_read_bytes(path, &raw, &len, err, errlen);
    if (st == LS_OK) st = ls_receipt_parse(raw, len, path, out, err, errlen);
    free(raw);
    return st;
}

void ls_receipt_free(ls_receipt *r) {
    if (r == NULL) return;
    cJSON_Delete(r->priv_doc);
    free(r->priv_arrays);
    free(r);
}

ls_status ls_receipt_write(const char *run_dir, const ls_receipt *r, char *err, size_t errlen) {
    if (run_dir == NULL || r == NULL) return LS_ERR_ARG;
    if (!ls_receipt_relpath_ok(r->events_file)) {
        ls_json_errf(err, errlen, "receipt: events_file \"%s\" is not a path inside the run "
                     "directory", r->events_file != NULL ? r->events_file : "(null)");
        return LS_ERR_ARG;
    }
    char events[4096], dir[4096], path[4096], rankdir[32];
    if (snprintf(events, sizeof events, "%s/%s", run_dir, r->events_file) >= (int)sizeof events ||
        ls_receipt_rank_dir(r->rank, rankdir, sizeof rankdir) != LS_OK ||
        snprintf(dir, sizeof dir, "%s/%s", run_dir, rankdir) >= (int)sizeof dir ||
        ls_receipt_path(run_dir, r->rank, path, sizeof path) != LS_OK) {
        ls_json_errf(err, errlen, "receipt: path under %s too long", run_dir);
        return LS_ERR_ARG;
    }
    char hex[LS_DIGEST_HEX_SIZE];
    ls_status st = ls_digest_sha256_file_hex(events, hex, err, errlen);
    if (st != LS_OK) return st;

    cJSON *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    ls_receipt *check = NULL;
    char inner[512];
    st = ls_receipt_to_json(r, hex, &doc, inner, sizeof inner);
    if (st == LS_OK) st = ls_json_print(doc, &text, &len, inner, sizeof inner);
    /* the reader's own checks on the exact bytes about to be written */
    if (st == LS_OK) st = ls_receipt_parse(text, len, "receipt", &check, inner, sizeof inner);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: not written: %s", path,
                     st == LS_ERR_NOMEM ? "out of memory" : inner);
        goto cleanup;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        ls_json_errf(err, errlen, "%s: cannot create directory: %s", dir, strerror(errno));
        st = LS_ERR_IO;
        goto cleanup;
    }
    st = ls_atomic_write(path, text, len, err, errlen);
cleanup:
    ls_receipt_free(check);
    free(text);
    cJSON_Delete(doc);
    return st;
}
