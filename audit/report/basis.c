/* basis.c - what each level of a verdict rests on (docs/evidence.md, "What a
 * verdict rests on"), read from the outcomes of the level's own rules:
 *
 *  - "parity": an applicable parity.* rule of the level passed: the level
 *    stands on longstraw-parity's runs (their configurations, at reduced
 *    size, and the paths they exercised);
 *  - "run": run.invariants or a run.probe rule of the level passed: the run's
 *    own figures were checked;
 *  - "both"; or "records" when neither (level 1: the run's manifest, receipts
 *    and traces agreeing with each other, nothing recomputed).
 *
 * and what the level does not bind: the run's lengths where parity ran
 * others, each run check of the level that did not apply (its reason), what
 * run.invariants left unchecked, and at levels 2-4 the run's own log-probs,
 * CP gradients and gradient where nothing in the run re-computed them.  Every
 * report (text, JSON, JUnit, the HTML page through the JSON) prints this one
 * object. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/report/basis.h"

#include <stdio.h>
#include <string.h>

#define MAX_CONFIGS 64 /* parity configurations listed */
#define MAX_VALUES 16  /* distinct lengths of one kind listed */

static bool is_parity(const char *id) { return strncmp(id, "parity.", 7) == 0; }
static bool is_probe(const char *id) { return strncmp(id, "run.probe", 9) == 0; }
static bool is_run(const char *id) { return strcmp(id, "run.invariants") == 0 || is_probe(id); }
static bool passed(const ls_audit_rule *r) { return r->applicable && r->pass; }

/* A small set of lengths, in the order first seen. */
typedef struct {
    int64_t v[MAX_VALUES];
    size_t n;
    bool more;
} lens;

static void lens_add(lens *l, int64_t x) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x) return;
    if (l->n < MAX_VALUES) l->v[l->n++] = x;
    else l->more = true;
}

static bool lens_has(const lens *l, int64_t x) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x) return true;
    return false;
}

static void lens_str(const lens *l, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < l->n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)l->v[i]);
    if (l->more && o < cap) snprintf(buf + o, cap - o, ",...");
}

static bool add_str(cJSON *arr, const char *s) {
    cJSON *it = cJSON_CreateString(s);
    if (it == NULL || !cJSON_AddItemToArray(arr, it)) {
        cJSON_Delete(it);
        return false;
    }
    return true;
}

/* The parity object: the report, its configurations (name and lengths), its coverage.paths. */
static cJSON *parity_json(const ls_audit_run *run, lens *P, lens *G, lens *R) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    bool ok = cJSON_AddStringToObject(o, "report", run->parity_file[0] ? run->parity_file : "parity.json") != NULL;
    cJSON *cf = cJSON_AddArrayToObject(o, "configurations");
    ok = ok && cf != NULL;
    const cJSON *c;
    size_t n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(run->parity, "configurations")) {
        const char *name = ls_audit_get_str(c, "name");
        int64_t p, g;
        const cJSON *rl = cJSON_GetObjectItemCaseSensitive(c, "response_lens"), *r;
        if (!ok || name == NULL || !ls_audit_get_int(c, "prompt_len", &p) || !ls_audit_get_int(c, "group", &g) ||
            !cJSON_IsArray(rl))
            continue;
        lens_add(P, p);
        lens_add(G, g);
        cJSON *x = NULL, *ra = NULL;
        if (n++ < MAX_CONFIGS) {
            x = cJSON_CreateObject();
            ok = x != NULL && cJSON_AddItemToArray(cf, x);
            if (!ok) cJSON_Delete(x);
            ok = ok && cJSON_AddStringToObject(x, "name", name) && cJSON_AddNumberToObject(x, "prompt_len", (double)p) &&
                 cJSON_AddNumberToObject(x, "group", (double)g) && (ra = cJSON_AddArrayToObject(x, "response_lens"));
        }
        cJSON_ArrayForEach(r, rl) {
            int64_t v;
            if (!ls_trace_json_int(r, &v)) continue;
            lens_add(R, v);
            if (ok && ra) {
                cJSON *num = cJSON_CreateNumber((double)v);
                ok = num != NULL && cJSON_AddItemToArray(ra, num);
                if (!ok) cJSON_Delete(num);
            }
        }
    }
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run->parity, "coverage"), "paths");
    cJSON *pd = cJSON_IsObject(paths) ? cJSON_Duplicate(paths, 1) : cJSON_CreateNull();
    ok = ok && pd != NULL && cJSON_AddItemToObject(o, "paths", pd);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* "shapes: ..." when the run's lengths are not among parity's ("" when they are). */
static void shapes(const ls_audit_run *run, const lens *P, const lens *G, const lens *R, char *buf, size_t cap) {
    buf[0] = 0;
    const cJSON *opts = run->config ? cJSON_GetObjectItemCaseSensitive(run->config, "options") : NULL;
    int64_t p = -1, g = -1, r = -1;
    if (cJSON_IsObject(opts)) {
        ls_audit_get_int(opts, "prompt_len", &p);
        ls_audit_get_int(opts, "response_len", &r);
    }
    if (run->config) ls_audit_get_int(run->config, "group", &g);
    char ps[128], gs[128], rs[128];
    lens_str(P, ps, sizeof ps);
    lens_str(G, gs, sizeof gs);
    lens_str(R, rs, sizeof rs);
    if (p <= 0 || g <= 0 || r <= 0) { /* a rollouts run: each line sets its own */
        snprintf(buf, cap, "shapes: parity ran P %s, G %s, R %s; the run's lengths are its input's, not recorded as one",
                 ps, gs, rs);
        return;
    }
    if (lens_has(P, p) && lens_has(G, g) && lens_has(R, r)) return;
    snprintf(buf, cap, "shapes: parity at reduced size (P %s, G %s, R %s) against the run's P %lld, G %lld, R %lld", ps,
             gs, rs, (long long)p, (long long)g, (long long)r);
}

cJSON *ls_audit_basis_json(const ls_audit_run *run, int level) {
    if (level < 1 || level > 4 || !run->level_holds[level]) return NULL;
    bool parity = false, own = false, probed = false;
    for (size_t i = 0; i < run->n_rules; i++) {
        const ls_audit_rule *r = &run->rules[i];
        if (is_probe(r->id) && passed(r)) probed = true;
        if (r->level != level || !passed(r)) continue;
        parity |= is_parity(r->id);
        own |= is_run(r->id);
    }
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON *ro = cJSON_AddArrayToObject(o, "rests_on");
    bool ok = ro != NULL && (!parity || add_str(ro, "parity")) && (!own || add_str(ro, "run"));
    ok = ok && cJSON_AddStringToObject(o, "summary", parity && own ? "both" : parity ? "parity" : own ? "run" : "records");
    cJSON *rules = cJSON_AddArrayToObject(o, "rules");
    ok = ok && rules != NULL;
    for (size_t i = 0; ok && i < run->n_rules; i++) {
        const ls_audit_rule *r = &run->rules[i];
        if (r->level == level && passed(r) && (is_parity(r->id) || is_run(r->id))) ok = add_str(rules, r->id);
    }
    lens P = {0}, G = {0}, R = {0};
    if (ok && parity && run->parity != NULL) {
        cJSON *pj = parity_json(run, &P, &G, &R);
        ok = pj != NULL && cJSON_AddItemToObject(o, "parity", pj);
        if (!ok) cJSON_Delete(pj);
    }
    cJSON *nb = cJSON_AddArrayToObject(o, "not_bound");
    ok = ok && nb != NULL;
    char line[480];
    if (ok && parity && run->parity != NULL) {
        shapes(run, &P, &G, &R, line, sizeof line);
        if (line[0]) ok = add_str(nb, line);
    }
    for (size_t i = 0; ok && i < run->n_rules; i++) {
        const ls_audit_rule *r = &run->rules[i];
        if (r->level != level || !is_run(r->id)) continue;
        const char *msg = r->message, *pre = "not applicable: ";
        if (!r->applicable) {
            if (strncmp(msg, pre, strlen(pre)) == 0) msg += strlen(pre);
            snprintf(line, sizeof line, "%s: not applicable: %s", r->id, msg);
            ok = add_str(nb, line);
        } else if (passed(r) && strstr(msg, "not checked") != NULL) {
            const char *part = strstr(msg, "ratio 1 not checked");
            snprintf(line, sizeof line, "%s: %s", r->id, part ? part : msg);
            ok = add_str(nb, line);
        }
    }
    if (ok && level == 2)
        ok = add_str(nb, "the run's own log-probs against a reference: not re-computed in the run (parity's logprob "
                         "and ref_logprob checks)");
    if (ok && level == 3 && !probed) {
        if (run->world > 1)
            snprintf(line, sizeof line, "the run's own CP-%u gradients against one rank: not re-computed in the run "
                     "(parity's cp_grad and cp_params checks; the run's replicated digests agree)", (unsigned)run->world);
        else
            snprintf(line, sizeof line, "CP: the run ran on one rank; level 3 is parity's CP-N against CP-1");
        ok = add_str(nb, line);
    }
    if (ok && level == 4 && !probed)
        ok = add_str(nb, "the run's own gradient: not probed (no run.probe passed: level 4 rests on parity's grad, "
                         "fd_grad and ref_loss checks)");
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* "P 30 G 2 R 3,5" of one configuration object of the basis. */
static void config_str(const cJSON *c, char *buf, size_t cap) {
    int64_t p = 0, g = 0;
    ls_audit_get_int(c, "prompt_len", &p);
    ls_audit_get_int(c, "group", &g);
    size_t o = (size_t)snprintf(buf, cap, "%s P %lld G %lld R ", ls_audit_get_str(c, "name") ? ls_audit_get_str(c, "name") : "?",
                                (long long)p, (long long)g);
    const cJSON *r;
    int k = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(c, "response_lens")) {
        if (o >= cap) break;
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", k++ ? "," : "", (long long)r->valuedouble);
    }
}

void ls_audit_basis_text(const cJSON *basis, char *rests, size_t rcap, char *not_bound, size_t ncap) {
    if (rcap) rests[0] = 0;
    if (ncap) not_bound[0] = 0;
    if (basis == NULL) return;
    const char *summary = ls_audit_get_str(basis, "summary");
    size_t o = 0;
#define PUT(...) (o < rcap ? (o += (size_t)snprintf(rests + o, rcap - o, __VA_ARGS__)) : 0)
    if (summary && strcmp(summary, "records") == 0) {
        PUT("the run's records (manifest, receipts, traces agreeing; nothing re-computed)");
    } else {
        if (summary && strcmp(summary, "both") == 0) PUT("both: ");
        const cJSON *pj = cJSON_GetObjectItemCaseSensitive(basis, "parity"), *c;
        if (cJSON_IsObject(pj)) {
            const cJSON *cf = cJSON_GetObjectItemCaseSensitive(pj, "configurations");
            PUT("parity (%s: %d configuration(s):", ls_audit_get_str(pj, "report") ? ls_audit_get_str(pj, "report") : "?",
                cJSON_GetArraySize(cf));
            int k = 0;
            cJSON_ArrayForEach(c, cf) {
                char s[200];
                config_str(c, s, sizeof s);
                PUT("%s%s", k++ ? "; " : " ", s);
            }
            const cJSON *paths = cJSON_GetObjectItemCaseSensitive(pj, "paths"), *d, *v;
            if (!cJSON_IsObject(paths)) {
                PUT("; paths: none stated)");
            } else {
                PUT("; paths:");
                cJSON_ArrayForEach(d, paths) {
                    PUT(" %s=", d->string);
                    int j = 0;
                    cJSON_ArrayForEach(v, d) PUT("%s%s", j++ ? "," : "", cJSON_IsString(v) ? v->valuestring : "?");
                }
                PUT(")");
            }
        }
        const cJSON *rules = cJSON_GetObjectItemCaseSensitive(basis, "rules"), *r;
        int k = 0;
        cJSON_ArrayForEach(r, rules) {
            if (!cJSON_IsString(r) || strncmp(r->valuestring, "run.", 4) != 0) continue;
            PUT("%s%s", k++ ? ", " : (cJSON_IsObject(pj) ? " and the run (" : "the run ("), r->valuestring);
        }
        if (k) PUT(")");
    }
#undef PUT
    o = 0;
    const cJSON *nb = cJSON_GetObjectItemCaseSensitive(basis, "not_bound"), *s;
    int k = 0;
    cJSON_ArrayForEach(s, nb) {
        if (o >= ncap || !cJSON_IsString(s)) break;
        o += (size_t)snprintf(not_bound + o, ncap - o, "%s%s", k++ ? "; " : "", s->valuestring);
    }
}
