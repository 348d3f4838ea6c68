/* describe.c - the canonical description of a run from every source apart,
 * and the fold that makes every fact agree across them (describe.h). */
/* A fact's path and a source's name are one bounded line each in the evidence: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/model/audit.h"
#include "receipts/format/json_util.h"

void ls_audit_desc_list_free(ls_audit_desc_list *l) {
    if (l == NULL) return;
    for (size_t i = 0; i < l->n; i++) cJSON_Delete(l->v[i].d);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* A new, empty description of source name (rank: -1 the run), NULL when
 * out of memory. */
static cJSON *desc_new(ls_audit_desc_list *l, const char *name, int64_t rank) {
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 16;
        ls_audit_desc *n = realloc(l->v, ncap * sizeof *n);
        if (n == NULL) return NULL;
        l->v = n;
        l->cap = ncap;
    }
    cJSON *d = cJSON_CreateObject();
    if (d == NULL) return NULL;
    ls_audit_desc *e = &l->v[l->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->rank = rank;
    e->d = d;
    return d;
}

/* The object at key of o, created when absent; NULL when out of memory or
 * the key holds something else. */
static cJSON *obj(cJSON *o, const char *key) {
    if (o == NULL) return NULL;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(o, key);
    if (c != NULL) return cJSON_IsObject(c) ? c : NULL;
    c = cJSON_CreateObject();
    if (c != NULL && !cJSON_AddItemToObject(o, key, c)) {
        cJSON_Delete(c);
        c = NULL;
    }
    return c;
}

/* ranks.R of d. */
static cJSON *rank_obj(cJSON *d, int64_t rank) {
    char k[24];
    snprintf(k, sizeof k, "%lld", (long long)rank);
    return obj(obj(d, "ranks"), k);
}

/* A copy of v (when present) at key of o; false when out of memory. */
static bool put(cJSON *o, const char *key, const cJSON *v) {
    if (v == NULL) return true;
    if (o == NULL) return false;
    cJSON *c = cJSON_Duplicate(v, true);
    if (c == NULL) return false;
    if (!cJSON_AddItemToObject(o, key, c)) {
        cJSON_Delete(c);
        return false;
    }
    return true;
}

static bool put_num(cJSON *o, const char *key, double v) {
    return o != NULL && cJSON_AddNumberToObject(o, key, v) != NULL;
}

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* An integer member (exact, >= 0), or false. */
static bool get_uint(const cJSON *o, const char *key, uint64_t *v) { return ls_json_get_u64(o, key, v) == 0; }

/* A table from array items: {item[kname]: item[vname]} of the items that
 * have both (a string key and a number), zero values dropped when
 * drop_zero; NULL when none (or out of memory: *nomem). */
static cJSON *table_of(const cJSON *arr, const char *kname, const char *vname, bool drop_zero, bool *nomem) {
    if (!cJSON_IsArray(arr)) return NULL;
    cJSON *t = cJSON_CreateObject();
    if (t == NULL) {
        *nomem = true;
        return NULL;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *k = get(it, kname), *v = get(it, vname);
        if (!ls_json_is_string(k) || !ls_json_is_number(v) || (drop_zero && v->valuedouble == 0)) continue;
        if (get(t, k->valuestring) != NULL) continue; /* a repeated name: the reader refuses the document */
        if (cJSON_AddNumberToObject(t, k->valuestring, v->valuedouble) == NULL) *nomem = true;
    }
    return t;
}

/* {k: v} of an object's numeric members, zero values dropped. */
static cJSON *counts_of(const cJSON *o, bool *nomem) {
    if (!cJSON_IsObject(o)) return NULL;
    cJSON *t = cJSON_CreateObject();
    if (t == NULL) {
        *nomem = true;
        return NULL;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
        if (it->string != NULL && ls_json_is_number(it) && it->valuedouble != 0 &&
            cJSON_AddNumberToObject(t, it->string, it->valuedouble) == NULL)
            *nomem = true;
    return t;
}

/* Adds t (owned) at key of o, or frees it. */
static bool adopt(cJSON *o, const char *key, cJSON *t) {
    if (t == NULL) return true;
    if (o == NULL || !cJSON_AddItemToObject(o, key, t)) {
        cJSON_Delete(t);
        return false;
    }
    return true;
}

/* The subjects of an in-toto statement as digests.NAME = sha256. */
static bool put_subjects(cJSON *d, const cJSON *doc) {
    const cJSON *s;
    cJSON *dg = NULL;
    cJSON_ArrayForEach(s, get(doc, "subject")) {
        const cJSON *n = get(s, "name"), *h = get(get(s, "digest"), "sha256");
        if (!ls_json_is_string(n) || !ls_json_is_string(h)) continue;
        if (dg == NULL && (dg = obj(d, "digests")) == NULL) return false;
        if (get(dg, n->valuestring) == NULL && !put(dg, n->valuestring, h)) return false;
    }
    return true;
}

/* ---- the builders ------------------------------------------------------------ */

ls_status ls_audit_describe_manifest(ls_audit_desc_list *l, const cJSON *doc, const char *name) {
    const cJSON *p = get(doc, "predicate");
    if (!cJSON_IsObject(p)) return LS_OK;
    cJSON *d = desc_new(l, name, -1);
    bool ok = d != NULL && put(d, "run_id", get(p, "run_id")) && put(d, "world", get(p, "world")) &&
              put(d, "config", get(p, "config")) && put(d, "build", get(p, "build")) &&
              put(d, "files", get(p, "files")) && put_subjects(d, doc);
    const cJSON *prof = get(p, "profile");
    if (ok && cJSON_IsObject(prof)) {
        cJSON *po = obj(d, "profile");
        ok = po != NULL && put(po, "name", get(prof, "name")) && put(po, "sha256", get(prof, "sha256"));
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, get(p, "ranks")) {
        uint64_t rk = 0;
        if (!ok || !get_uint(e, "rank", &rk) || rk >= LS_AUDIT_MAX_WORLD) continue;
        cJSON *ro = rank_obj(d, (int64_t)rk);
        ok = ro != NULL && put_num(ro, "rank", (double)rk) && put(ro, "status", get(e, "status")) &&
             put(ro, "receipt", get(e, "receipt"));
    }
    /* the subject list is a second statement of how many files the run has */
    const cJSON *subj = get(doc, "subject");
    if (ok && cJSON_IsArray(subj)) {
        char n2[96];
        snprintf(n2, sizeof n2, "%.70s (subject)", name);
        cJSON *d2 = desc_new(l, n2, -1);
        ok = d2 != NULL && put_num(d2, "files", (double)cJSON_GetArraySize(subj));
    }
    return ok ? LS_OK : LS_ERR_NOMEM;
}

ls_status ls_audit_describe_receipt(ls_audit_desc_list *l, const cJSON *doc, const char *name, int64_t rank) {
    const cJSON *p = get(doc, "predicate");
    if (!cJSON_IsObject(p)) return LS_OK;
    cJSON *d = desc_new(l, name, rank);
    bool nomem = false;
    bool ok = d != NULL && put(d, "run_id", get(p, "run_id")) && put(d, "world", get(p, "world")) &&
              put(d, "config", get(p, "config")) && put(d, "build", get(p, "build")) && put_subjects(d, doc);
    const cJSON *prof = get(p, "profile");
    if (ok && cJSON_IsObject(prof)) {
        cJSON *po = obj(d, "profile");
        ok = po != NULL && put(po, "name", get(prof, "name")) && put(po, "sha256", get(prof, "sha256"));
    }
    cJSON *ro = ok ? rank_obj(d, rank) : NULL;
    ok = ok && ro != NULL && put(ro, "rank", get(p, "rank")) && put(ro, "host", get(p, "host")) &&
         put(ro, "status", get(p, "status")) && put(ro, "steps", get(p, "steps")) &&
         put(ro, "steps_exact", get(p, "steps_exact")) && put(ro, "steps_prefix_frozen", get(p, "steps_prefix_frozen")) &&
         put(ro, "prefix_frozen_steps", get(p, "prefix_frozen_steps"));
    const cJSON *ev = get(p, "events");
    if (ok && cJSON_IsObject(ev))
        ok = put(ro, "events", get(ev, "count")) && put(ro, "last_seq", get(ev, "last_seq")) &&
             put(ro, "events_file", get(ev, "file"));
    if (ok) ok = adopt(ro, "steps_by_objective", counts_of(get(p, "steps_by_objective"), &nomem));
    if (ok) ok = adopt(ro, "phases", table_of(get(p, "phases"), "phase", "count", true, &nomem));
    if (ok) ok = adopt(ro, "phase_wall_ns", table_of(get(p, "phases"), "phase", "wall_ns_total", true, &nomem));
    /* rank_state: the rank's own account of the world, its shard and its traffic */
    const cJSON *rs = get(p, "rank_state");
    if (ok && cJSON_IsObject(rs)) {
        char n2[96];
        snprintf(n2, sizeof n2, "%.70s (rank_state)", name);
        cJSON *d2 = desc_new(l, n2, rank);
        ok = d2 != NULL && put(d2, "world", get(rs, "world"));
        char k[24];
        snprintf(k, sizeof k, "%lld", (long long)rank);
        if (ok && get(rs, "prompt_positions") != NULL) ok = put(obj(d2, "shards"), k, get(rs, "prompt_positions"));
        const cJSON *cm = get(rs, "communication");
        if (ok && cJSON_IsObject(cm)) {
            cJSON *r2 = rank_obj(d2, rank);
            const cJSON *by = get(cm, "by_purpose");
            ok = r2 != NULL && adopt(r2, "calls", table_of(by, "purpose", "calls", true, &nomem)) &&
                 adopt(r2, "bytes_sent", table_of(by, "purpose", "bytes_sent", true, &nomem)) &&
                 put(r2, "calls_total", get(cm, "calls")) && put(r2, "bytes_total", get(cm, "bytes_sent"));
            /* the totals are stated twice: as totals and as the sum of by_purpose */
            if (ok && cJSON_IsArray(by)) {
                double calls = 0, bytes = 0;
                const cJSON *it;
                cJSON_ArrayForEach(it, by) {
                    const cJSON *c = get(it, "calls"), *b = get(it, "bytes_sent");
                    calls += ls_json_is_number(c) ? c->valuedouble : 0;
                    bytes += ls_json_is_number(b) ? b->valuedouble : 0;
                }
                char n3[96];
                snprintf(n3, sizeof n3, "%.60s (by_purpose, summed)", name);
                cJSON *r3 = rank_obj(desc_new(l, n3, rank), rank);
                ok = r3 != NULL && put_num(r3, "calls_total", calls) && put_num(r3, "bytes_total", bytes);
            }
        }
    }
    return ok && !nomem ? LS_OK : LS_ERR_NOMEM;
}

ls_status ls_audit_describe_header(ls_audit_desc_list *l, const cJSON *h, const char *name, int64_t rank) {
    if (!cJSON_IsObject(h)) return LS_OK;
    cJSON *d = desc_new(l, name, rank);
    bool ok = d != NULL && put(d, "run_id", get(h, "run_id")) && put(d, "world", get(h, "world"));
    cJSON *ro = ok ? rank_obj(d, rank) : NULL;
    ok = ok && ro != NULL && put(ro, "rank", get(h, "rank")) && put(ro, "host", get(h, "host"));
    const cJSON *pr = get(h, "profile");
    if (ok && ls_json_is_string(pr)) ok = put(obj(d, "profile"), "name", pr);
    const cJSON *g;
    cJSON_ArrayForEach(g, get(h, "groups")) {
        const cJSON *n = get(g, "name");
        if (!ok || !ls_json_is_string(n)) continue;
        cJSON *go = obj(obj(d, "groups"), n->valuestring);
        ok = go != NULL && put(go, "members", get(g, "members")) && put(go, "kind", get(g, "kind"));
    }
    return ok ? LS_OK : LS_ERR_NOMEM;
}

/* 0..n-1 as an array (NULL: out of memory). */
static cJSON *iota(int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; a != NULL && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)i))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

ls_status ls_audit_describe_rundir(ls_audit_desc_list *l, uint32_t world, const char *world_source,
                                   bool receipts_listed) {
    for (uint32_t i = 0; i < world; i++) {
        char name[96], dir[32], rf[64];
        snprintf(name, sizeof name, "the run directory (%u, world from the %s)", (unsigned)i, world_source);
        if (ls_receipt_rank_dir(i, dir, sizeof dir) != LS_OK) return LS_ERR_ARG;
        snprintf(rf, sizeof rf, "%s/receipt.json", dir);
        cJSON *d = desc_new(l, name, i), *ro = rank_obj(d, i);
        if (ro == NULL || !put_num(ro, "rank", i) || (receipts_listed && cJSON_AddStringToObject(ro, "receipt", rf) == NULL) ||
            (i == 0 && !put_num(d, "world", world)))
            return LS_ERR_NOMEM;
    }
    return LS_OK;
}

/* d's groups.name: members first + k * stride (k < n), kind; false when out of memory. */
static bool grid_group(cJSON *d, const char *name, const char *kind, uint64_t first, uint64_t stride, uint64_t n) {
    cJSON *go = obj(obj(d, "groups"), name), *m = go != NULL ? cJSON_CreateArray() : NULL;
    if (m == NULL) return false;
    for (uint64_t k = 0; k < n; k++)
        if (!cJSON_AddItemToArray(m, cJSON_CreateNumber((double)(first + k * stride)))) {
            cJSON_Delete(m);
            return false;
        }
    return adopt(go, "members", m) && cJSON_AddStringToObject(go, "kind", kind) != NULL;
}

ls_status ls_audit_describe_config(ls_audit_desc_list *l, const cJSON *c, const char *name, int64_t until) {
    if (!cJSON_IsObject(c)) return LS_OK;
    cJSON *d = desc_new(l, name, -1);
    if (d == NULL) return LS_ERR_NOMEM;
    uint64_t cp = 0, ep = 1, first = 0, sft = 0, steps = 0;
    /* longstraw-train's ranks: a CP x EP grid (docs/design.md §4a), world = cp_ranks x ep_ranks (ep_ranks
     * absent: 1), rank = cp_idx * ep + ep_idx.  EP 1: one cp group over every rank ("cp"); EP N > 1: the cp
     * group of each ep_idx (cp-eE, kind cp) and the ep group of each cp_idx (ep-cC, kind ep). */
    if (get(c, "ep_ranks") != NULL && !(get_uint(c, "ep_ranks", &ep) && ep >= 1 && ep <= LS_AUDIT_MAX_WORLD)) ep = 0;
    /* an adapter trainer's data parallelism (docs/contract.md §2, dp_ranks): D replicas of one CP group each,
     * world = cp_ranks x dp_ranks, rank = replica * cp + CP index; groups cp-dD (kind cp) and dp-cC (kind dp) */
    uint64_t dp = 1;
    if (get(c, "dp_ranks") != NULL && !(get_uint(c, "dp_ranks", &dp) && dp >= 1 && dp <= LS_AUDIT_MAX_WORLD)) ep = 0;
    if (dp > 1 && ep == 1 && get_uint(c, "cp_ranks", &cp) && cp >= 1 && cp <= LS_AUDIT_MAX_WORLD &&
        cp * dp <= LS_AUDIT_MAX_WORLD) {
        if (!put_num(d, "world", (double)(cp * dp))) return LS_ERR_NOMEM;
        char n[32];
        for (uint64_t k = 0; k < dp; k++) { /* cp-dD: {D * cp + c : c < cp} */
            snprintf(n, sizeof n, "cp-d%llu", (unsigned long long)k);
            if (!grid_group(d, n, "cp", k * cp, 1, cp)) return LS_ERR_NOMEM;
        }
        for (uint64_t k = 0; k < cp; k++) { /* dp-cC: {d * cp + C : d < dp} */
            snprintf(n, sizeof n, "dp-c%llu", (unsigned long long)k);
            if (!grid_group(d, n, "dp", k, cp, dp)) return LS_ERR_NOMEM;
        }
        ep = 0; /* described: not the CP x EP grid below */
    } else if (dp > 1) {
        ep = 0; /* DP beside EP: no layout to describe */
    }
    if (ep >= 1 && get_uint(c, "cp_ranks", &cp) && cp >= 1 && cp <= LS_AUDIT_MAX_WORLD && cp * ep <= LS_AUDIT_MAX_WORLD) {
        if (!put_num(d, "world", (double)(cp * ep))) return LS_ERR_NOMEM;
        if (ep == 1 && cp > 1) {
            cJSON *go = obj(obj(d, "groups"), "cp");
            if (go == NULL || !adopt(go, "members", iota((int64_t)cp))) return LS_ERR_NOMEM;
        }
        char n[32];
        for (uint64_t e = 0; ep > 1 && e < ep; e++) { /* cp-eE: {c * ep + e : c < cp} */
            snprintf(n, sizeof n, "cp-e%llu", (unsigned long long)e);
            if (!grid_group(d, n, "cp", e, ep, cp)) return LS_ERR_NOMEM;
        }
        for (uint64_t k = 0; ep > 1 && k < cp; k++) { /* ep-cC: {C * ep + e : e < ep} */
            snprintf(n, sizeof n, "ep-c%llu", (unsigned long long)k);
            if (!grid_group(d, n, "ep", k * ep, 1, ep)) return LS_ERR_NOMEM;
        }
    }
    /* each requested step's objective: the first sft_steps of the run sft, the rest the objective's */
    const cJSON *o = get(c, "objective");
    if (ls_json_is_string(o) && get_uint(c, "steps_requested", &steps) && steps <= LS_AUDIT_MAX_STEPS) {
        if (!get_uint(c, "first_step", &first)) first = 0;
        if (!get_uint(c, "sft_steps", &sft)) sft = 0;
        if (first < LS_AUDIT_MAX_STEPS) {
            cJSON *so = obj(d, "steps");
            for (uint64_t i = 0; i < steps && first + i < LS_AUDIT_MAX_STEPS && (int64_t)(first + i) < until; i++) {
                char k[24];
                snprintf(k, sizeof k, "%llu", (unsigned long long)(first + i));
                cJSON *s = so ? cJSON_AddObjectToObject(so, k) : NULL; /* each step once, in order: no lookup */
                if (s == NULL || cJSON_AddStringToObject(s, "objective", i < sft ? "sft" : o->valuestring) == NULL)
                    return LS_ERR_NOMEM;
            }
        }
    }
    return LS_OK;
}

ls_status ls_audit_describe_trace(ls_audit_desc_list *l, const ls_audit_run *run, const ls_audit_rank *r) {
    if (!r->trace_present) return LS_OK;
    char name[96];
    snprintf(name, sizeof name, "%s (events)", r->trace_file);
    cJSON *d = desc_new(l, name, r->rank);
    cJSON *ro = rank_obj(d, r->rank);
    bool ok = ro != NULL && put_num(ro, "events", (double)r->n_events) && put_num(ro, "last_seq", (double)r->last_seq);
    ok = ok && adopt(ro, "events_file", cJSON_CreateString(r->trace_file));
    /* the status the events show: an error event, else a rank_complete, else nothing said */
    if (ok && (r->n_errors > 0 || r->rank_complete))
        ok = cJSON_AddStringToObject(ro, "status", r->n_errors > 0 ? "error" : "complete") != NULL;
    /* steps: optimizer_step events; objectives: each step's first step_metrics; prefix-frozen steps; and
     * rank 0's figures of each step (its first step_metrics), when a metrics file (--metrics) states them too.
     * Every step key is added once, in order: no lookup (a run of 65,536 steps stays linear). */
    uint64_t opt = 0, grpo = 0, sftn = 0, frozen = 0;
    cJSON *fz = cJSON_CreateArray(), *so = NULL;
    ok = ok && fz != NULL;
    int32_t *first = NULL; /* first[s]: the index in r->metrics of step s's first step_metrics, -1 none */
    bool figures = ok && r->rank == 0 && run->metrics_lines != NULL && r->n_steps_seen > 0 && r->n_metrics > 0;
    if (figures) {
        first = malloc((size_t)r->n_steps_seen * sizeof *first);
        ok = first != NULL;
        for (int64_t s = 0; ok && s < r->n_steps_seen; s++) first[s] = -1;
        for (size_t i = 0; ok && i < r->n_metrics; i++) {
            int64_t st = r->metrics[i].step;
            if (st >= 0 && st < r->n_steps_seen && first[st] < 0) first[st] = (int32_t)i;
        }
    }
    for (int64_t s = 0; ok && r->steps != NULL && s < r->n_steps_seen && (size_t)s < r->steps_cap; s++) {
        const ls_audit_step *sf = &r->steps[s];
        opt += sf->opt_count;
        if (sf->prefix_frozen) {
            frozen++;
            ok = cJSON_AddItemToArray(fz, cJSON_CreateNumber((double)s));
        }
        bool fig = first != NULL && first[s] >= 0;
        if (!sf->metrics_seen && !fig) continue;
        char k[24];
        snprintf(k, sizeof k, "%lld", (long long)s);
        if (so == NULL) so = obj(d, "steps");
        cJSON *st = so ? cJSON_AddObjectToObject(so, k) : NULL;
        ok = ok && st != NULL;
        if (ok && sf->metrics_seen) {
            if (sf->sft) sftn++;
            else grpo++;
            ok = cJSON_AddStringToObject(st, "objective", sf->sft ? "sft" : "grpo") != NULL;
        }
        if (ok && fig) {
            const ls_audit_step_metric *m = &r->metrics[first[s]];
            cJSON *f = cJSON_CreateObject();
            for (int q = 0; f != NULL && q < LS_AUDIT_SM_COUNT; q++)
                if (m->have & (1u << q)) cJSON_AddNumberToObject(f, ls_audit_sm_name((ls_audit_sm_field)q), m->v[q]);
            ok = adopt(st, "figures", f);
        }
    }
    free(first);
    if (ok && r->rank_complete) { /* a rank that ended says how many steps and what it exactly did */
        ok = put_num(ro, "steps", (double)opt) && put_num(ro, "steps_prefix_frozen", (double)frozen) &&
             put_num(ro, "steps_exact", (double)(opt >= frozen ? opt - frozen : 0));
        cJSON *ob = grpo + sftn ? cJSON_CreateObject() : NULL; /* no step_metrics: the trace says nothing of it */
        if (ob != NULL && grpo) cJSON_AddNumberToObject(ob, "grpo", (double)grpo);
        if (ob != NULL && sftn) cJSON_AddNumberToObject(ob, "sft", (double)sftn);
        ok = ok && adopt(ro, "steps_by_objective", ob);
        ok = ok && cJSON_AddItemToObject(ro, "prefix_frozen_steps", fz);
        fz = NULL;
    }
    cJSON_Delete(fz);
    /* phases and their wall time: every phase_end */
    cJSON *ph = ok ? cJSON_CreateObject() : NULL, *pw = ok ? cJSON_CreateObject() : NULL;
    for (int p = 0; ph != NULL && pw != NULL && p < LS_AUDIT_NPHASE; p++) {
        if (r->phase_end[p] == 0) continue;
        const char *pn = ls_audit_phase_name(run, p);
        cJSON_AddNumberToObject(ph, pn, (double)r->phase_end[p]);
        if (r->phase_wall_ns[p]) cJSON_AddNumberToObject(pw, pn, (double)r->phase_wall_ns[p]);
    }
    ok = ok && adopt(ro, "phases", ph) && adopt(ro, "phase_wall_ns", pw);
    /* collectives per purpose (v1 traces carry bytes; a v2 trace's by_purpose is not in its receipt) */
    if (ok && r->n_coll_total > 0) {
        cJSON *ca = cJSON_CreateObject(), *by = cJSON_CreateObject();
        for (size_t p = 0; ca != NULL && by != NULL && p < run->n_purposes; p++) {
            if (r->purpose_calls[p]) cJSON_AddNumberToObject(ca, run->purposes[p], (double)r->purpose_calls[p]);
            if (r->purpose_bytes[p]) cJSON_AddNumberToObject(by, run->purposes[p], (double)r->purpose_bytes[p]);
        }
        ok = adopt(ro, "calls", ca) && adopt(ro, "bytes_sent", by);
    }
    /* the end of the trace: rank_complete's own count of the steps and of the events before it */
    if (ok && r->rank_complete && (r->complete_steps >= 0 || r->complete_events >= 0)) {
        char n2[96];
        snprintf(n2, sizeof n2, "%s (rank_complete)", r->trace_file);
        cJSON *r2 = rank_obj(desc_new(l, n2, r->rank), r->rank);
        ok = r2 != NULL && (r->complete_steps < 0 || put_num(r2, "steps", (double)r->complete_steps)) &&
             (r->complete_events < 0 || put_num(r2, "events", (double)r->complete_events + 1));
    }
    return ok ? LS_OK : LS_ERR_NOMEM;
}

/* A step's GRPO figures ({name: value} of the step_metrics fields run.invariants reads), from a JSON
 * object holding them. */
static cJSON *figures_of(const cJSON *o) {
    cJSON *f = cJSON_CreateObject();
    for (int k = 0; f != NULL && k < LS_AUDIT_SM_COUNT; k++) {
        const char *n = ls_audit_sm_name((ls_audit_sm_field)k);
        const cJSON *v = get(o, n);
        if (n != NULL && ls_json_is_number(v) && cJSON_AddNumberToObject(f, n, v->valuedouble) == NULL) {
            cJSON_Delete(f);
            return NULL;
        }
    }
    return f;
}

ls_status ls_audit_describe_metrics(ls_audit_desc_list *l, const cJSON *lines, const char *name) {
    if (!cJSON_IsArray(lines)) return LS_OK;
    cJSON *d = desc_new(l, name, 0);
    cJSON *so = obj(d, "steps");
    uint8_t *seen = calloc(LS_AUDIT_MAX_STEPS / 8, 1); /* a step's first line only, as a trace's first step_metrics */
    if (so == NULL || seen == NULL) {
        free(seen);
        return LS_ERR_NOMEM;
    }
    ls_status st = LS_OK;
    const cJSON *ln;
    cJSON_ArrayForEach(ln, lines) {
        uint64_t step = 0;
        if (!get_uint(ln, "step", &step) || step >= LS_AUDIT_MAX_STEPS || (seen[step / 8] >> (step % 8)) & 1) continue;
        seen[step / 8] |= (uint8_t)(1u << (step % 8));
        char k[24];
        snprintf(k, sizeof k, "%llu", (unsigned long long)step);
        cJSON *so_step = cJSON_AddObjectToObject(so, k);
        if (so_step == NULL || !put(so_step, "objective", get(ln, "objective")) ||
            !adopt(so_step, "figures", figures_of(ln))) {
            st = LS_ERR_NOMEM;
            break;
        }
    }
    free(seen);
    return st;
}

/* ---- the fold ------------------------------------------------------------------ */

/* Objects descended into (their members compared one by one): the run, the
 * tables keyed by rank, step, group and file, a rank's, a step's and a
 * group's facts, the profile. */
static bool descend(const char *parent, const char *key, int depth) {
    if (depth == 0)
        return strcmp(key, "ranks") == 0 || strcmp(key, "steps") == 0 || strcmp(key, "groups") == 0 ||
               strcmp(key, "shards") == 0 || strcmp(key, "profile") == 0 || strcmp(key, "digests") == 0;
    if (depth == 1) return strcmp(parent, "ranks") == 0 || strcmp(parent, "steps") == 0 || strcmp(parent, "groups") == 0;
    return false;
}

/* ranks.R.calls and .bytes_sent: the later source's (a trace's) purposes
 * are the earlier's (its receipt's, stated first) with the same figures;
 * the receipt counts setup collectives issued before the trace opened. */
static bool subset_equal(const cJSON *earlier, const cJSON *later) {
    if (!cJSON_IsObject(earlier) || !cJSON_IsObject(later)) return cJSON_Compare(earlier, later, true);
    const cJSON *x;
    cJSON_ArrayForEach(x, later) {
        const cJSON *y = x->string ? get(earlier, x->string) : NULL;
        if (y == NULL || !cJSON_Compare(x, y, true)) return false;
    }
    return true;
}

/* The first member of two objects that differs ("" when neither is an
 * object or none does), for a message that names the key. */
static const char *first_key(const cJSON *a, const cJSON *b) {
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return "";
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        const cJSON *y = x->string ? get(b, x->string) : NULL;
        if (y == NULL || !cJSON_Compare(x, y, true)) return x->string ? x->string : "";
    }
    cJSON_ArrayForEach(x, b)
        if (x->string && get(a, x->string) == NULL) return x->string;
    return "";
}

typedef struct {
    const char *src;
    ls_audit_desc_fn fn;
    void *user;
    uint64_t compared;
    bool nomem;
} fold_ctx;

/* An index of an object's members by key, and of the members of its twin
 * in `where` (added in the same order), for the tables a run can make
 * large (steps: up to 65,536): open addressing, built when the members
 * folded in are many, so that a fold stays linear. */
typedef struct {
    const char *key;
    cJSON *c, *w;
} slot;

typedef struct {
    slot *s;
    size_t cap; /* a power of two; 0: no index (small objects are scanned) */
} index_t;

static size_t key_hash(const char *k) {
    size_t h = 1469598103934665603ull;
    for (; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ull;
    return h;
}

static slot *index_find(index_t *ix, const char *key) {
    for (size_t i = key_hash(key) & (ix->cap - 1);; i = (i + 1) & (ix->cap - 1))
        if (ix->s[i].key == NULL || strcmp(ix->s[i].key, key) == 0) return &ix->s[i];
}

/* canon's member key and its twin in where (NULL, NULL when absent). */
static cJSON *member_of(index_t *ix, cJSON *canon, cJSON *where, const char *key, cJSON **w) {
    if (ix->cap) {
        slot *sl = index_find(ix, key);
        *w = sl->w;
        return sl->c;
    }
    *w = cJSON_GetObjectItemCaseSensitive(where, key);
    return cJSON_GetObjectItemCaseSensitive(canon, key);
}

static void member_added(index_t *ix, cJSON *c, cJSON *w) {
    if (ix->cap == 0 || c == NULL) return;
    slot *sl = index_find(ix, c->string);
    sl->key = c->string;
    sl->c = c;
    sl->w = w;
}

static void fold(fold_ctx *c, const cJSON *from, cJSON *canon, cJSON *where, const char *path, const char *parent,
                 int depth) {
    index_t ix = {0};
    size_t n_from = (size_t)cJSON_GetArraySize(from);
    if (n_from > 16) { /* cJSON finds a member by a scan: index canon's, with where's twins in lockstep */
        size_t need = 2 * ((size_t)cJSON_GetArraySize(canon) + n_from) + 1, cap = 64;
        while (cap < need) cap *= 2;
        ix.s = calloc(cap, sizeof *ix.s);
        if (ix.s == NULL) {
            c->nomem = true;
            return;
        }
        ix.cap = cap;
        cJSON *cm = canon->child, *wm = where->child;
        for (; cm != NULL; cm = cm->next, wm = wm ? wm->next : NULL)
            member_added(&ix, cm, wm && wm->string && strcmp(wm->string, cm->string) == 0
                                      ? wm : cJSON_GetObjectItemCaseSensitive(where, cm->string));
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, from) {
        if (x->string == NULL || c->nomem) continue;
        char p[320];
        snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", x->string);
        cJSON *hw = NULL, *have = member_of(&ix, canon, where, x->string, &hw);
        if (cJSON_IsObject(x) && descend(parent, x->string, depth)) {
            if (have == NULL) {
                have = cJSON_AddObjectToObject(canon, x->string);
                hw = have ? cJSON_AddObjectToObject(where, x->string) : NULL;
                if (hw == NULL) {
                    c->nomem = true;
                    break;
                }
                member_added(&ix, have, hw);
            } else if (!cJSON_IsObject(have)) {
                c->compared++;
                c->fn(c->user, p, cJSON_GetStringValue(hw), have, c->src, x);
                continue;
            }
            fold(c, x, have, hw, p, x->string, depth + 1);
            continue;
        }
        if (have == NULL) {
            cJSON *dup = cJSON_Duplicate(x, true);
            if (dup == NULL || !cJSON_AddItemToObject(canon, x->string, dup)) {
                cJSON_Delete(dup);
                c->nomem = true;
                break;
            }
            /* the source's name, by reference: the list outlives where (describe.h) */
            cJSON *ws = cJSON_CreateStringReference(c->src);
            if (ws == NULL || !cJSON_AddItemToObject(where, x->string, ws)) {
                cJSON_Delete(ws);
                c->nomem = true;
                break;
            }
            member_added(&ix, dup, ws);
            continue;
        }
        c->compared++;
        bool sub = depth == 2 && (strcmp(x->string, "calls") == 0 || strcmp(x->string, "bytes_sent") == 0);
        if (sub ? subset_equal(have, x) : cJSON_Compare(have, x, true)) continue;
        const char *k = first_key(have, x);
        if (k[0]) {
            char p2[400];
            snprintf(p2, sizeof p2, "%s.%s", p, k);
            c->fn(c->user, p2, cJSON_GetStringValue(hw), get(have, k), c->src, get(x, k));
        } else {
            c->fn(c->user, p, cJSON_GetStringValue(hw), have, c->src, x);
        }
    }
    free(ix.s);
}

ls_status ls_audit_desc_merge(const ls_audit_desc_list *l, cJSON **canon, cJSON **where, ls_audit_desc_fn fn,
                              void *user, uint64_t *compared) {
    *canon = cJSON_CreateObject();
    *where = cJSON_CreateObject();
    fold_ctx c = {.fn = fn, .user = user};
    for (size_t i = 0; *canon != NULL && *where != NULL && i < l->n && !c.nomem; i++) {
        c.src = l->v[i].name;
        fold(&c, l->v[i].d, *canon, *where, "", "", 0);
    }
    if (compared) *compared = c.compared;
    if (*canon == NULL || *where == NULL || c.nomem) {
        cJSON_Delete(*canon);
        cJSON_Delete(*where);
        *canon = *where = NULL;
        return LS_ERR_NOMEM;
    }
    return LS_OK;
}
