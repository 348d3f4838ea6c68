/* profile.c - profiles (profile.h): read, checked, and read back.  Which
 * profile a run is audited against, and the rule profile.match, are
 * rules_profile.c's. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/profile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/model/run_files.h"
#include "receipts/format/coverage.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/format/registry_file.h"
#include "receipts/schema/schema.h"
#include "receipts/format/trace_event.h"

#ifndef LS_PROFILE_DIR
#define LS_PROFILE_DIR "profiles"
#endif

const char *ls_audit_profile_default_dir(void) { return LS_PROFILE_DIR; }

/* A profile of the default directory that profiles/ lacks: the registry's (receipts/format/registry_file.h) family whose
 * files.profile is NAME.json in a folder of the source tree (a family that keeps its profile in its own folder,
 * trainer/families/<f>/NAME.json), its folder relative to the tree into rel; 0 when none is. */
static int registered_profile_dir(const char *name, char *rel, size_t cap) {
    char want[64], path[1024];
    if (name == NULL || !ls_audit_profile_name_ok(name)) return 0;
    snprintf(want, sizeof want, "%s.json", name);
    snprintf(path, sizeof path, "%s/%s", LS_PROFILE_DIR, want);
    FILE *f = fopen(path, "rb");
    if (f != NULL) { /* profiles/ has it: the default directory's own */
        fclose(f);
        return 0;
    }
    const cJSON *reg = ls_registry_file_get(NULL), *fam;
    const cJSON *fams = reg ? cJSON_GetObjectItemCaseSensitive(reg, "families") : NULL;
    cJSON_ArrayForEach(fam, fams) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fam, "files"), "profile");
        if (!cJSON_IsString(p)) continue;
        const char *slash = strrchr(p->valuestring, '/');
        size_t n = slash ? (size_t)(slash - p->valuestring) : 0;
        /* a relative folder of the tree, no "..", its file NAME.json */
        if (!slash || n == 0 || n >= cap || p->valuestring[0] == '/' || strstr(p->valuestring, "..") ||
            strcmp(slash + 1, want) != 0)
            continue;
        memcpy(rel, p->valuestring, n);
        rel[n] = 0;
        return 1;
    }
    return 0;
}

/* The directory the default profile NAME is read from: profiles/, or its family's folder (above). */
static const char *default_dir_for(const char *name, char *buf, size_t cap) {
    char rel[512];
    if (!registered_profile_dir(name, rel, sizeof rel)) return LS_PROFILE_DIR;
    const char *top = strrchr(LS_PROFILE_DIR, '/'); /* LS_PROFILE_DIR is SOURCE/profiles */
    snprintf(buf, cap, "%.*s/%s", top ? (int)(top - LS_PROFILE_DIR) : 1, top ? LS_PROFILE_DIR : ".", rel);
    return buf;
}

void ls_audit_profile_file_label(const char *dir, const char *name, char *buf, size_t cap) {
    bool dflt = dir == NULL || strcmp(dir, LS_PROFILE_DIR) == 0;
    char rel[512];
    if (dflt && registered_profile_dir(name, rel, sizeof rel))
        snprintf(buf, cap, "%s/%s.json", rel, name);
    else
        snprintf(buf, cap, "%s/%s.json", dflt ? "profiles" : dir, name ? name : "?");
}

/* the group kinds are the receipts' registered ones (receipts/format/trace_event.h), in their order */
_Static_assert(LS_AUDIT_GROUP_KIND_COUNT == (int)LS_TRACE_GROUP_KIND_COUNT &&
                   LS_AUDIT_GROUP_WORLD == (int)LS_TRACE_GROUP_WORLD && LS_AUDIT_GROUP_DP == (int)LS_TRACE_GROUP_DP &&
                   LS_AUDIT_GROUP_CP == (int)LS_TRACE_GROUP_CP && LS_AUDIT_GROUP_TP == (int)LS_TRACE_GROUP_TP &&
                   LS_AUDIT_GROUP_PP == (int)LS_TRACE_GROUP_PP && LS_AUDIT_GROUP_EP == (int)LS_TRACE_GROUP_EP,
               "audit group kinds follow ls_trace_group_kind");

const char *ls_audit_group_kind_name(int kind) {
    return kind >= 0 && kind < LS_AUDIT_GROUP_KIND_COUNT ? ls_trace_group_kind_name((ls_trace_group_kind)kind) : "?";
}

int ls_audit_group_kind_from_name(const char *name) { return ls_trace_enum_from_name("group_kind", name); }

static const char *const RULES[LS_AUDIT_PROFILE_NRULES] = {"collectives.composition", "collectives.dkv",
                                                          "collectives.finalize"};

const char *ls_audit_profile_rule_name(ls_audit_profile_rule_id id) {
    return id >= 0 && id < LS_AUDIT_PROFILE_NRULES ? RULES[id] : "?";
}

static const struct {
    const char *name;
    unsigned bit;
} WHEN[] = {{"full", LS_AUDIT_WHEN_FULL},         {"detached", LS_AUDIT_WHEN_DETACHED},
            {"longstraw", LS_AUDIT_WHEN_LONGSTRAW}, {"naive", LS_AUDIT_WHEN_NAIVE},
            {"sft", LS_AUDIT_WHEN_SFT},           {"not_sft", LS_AUDIT_WHEN_NOT_SFT},
            {"prefix_frozen", LS_AUDIT_WHEN_FROZEN}, {"not_prefix_frozen", LS_AUDIT_WHEN_NOT_FROZEN},
            {"ran", LS_AUDIT_WHEN_RAN},           {"probed", LS_AUDIT_WHEN_PROBED},
            {"cp", LS_AUDIT_WHEN_CP},             {"ep", LS_AUDIT_WHEN_EP},
            {"dp", LS_AUDIT_WHEN_DP}};

/* An identifier of length 1..max-1: a letter, then letters, digits, _ . - */
static bool ident_ok(const char *s, size_t cap) {
    if (s == NULL || !(s[0] >= 'a' && s[0] <= 'z')) return false;
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-')) return false;
    }
    return n < cap;
}

bool ls_audit_profile_name_ok(const char *name) { return ident_ok(name, LS_AUDIT_PROFILE_IDENT); }

/* ---- parsing -------------------------------------------------------------- */

typedef struct {
    const char *what;
    char *err;
    size_t errlen;
} pctx;

static ls_status bad(pctx *c, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ls_status bad(pctx *c, const char *ptr, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_json_errf(c->err, c->errlen, "%s: %s: %s", c->what, ptr, msg);
    return LS_ERR_FORMAT;
}

static const cJSON *member(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* Copies a string member (the schema made it one) that must fit cap bytes. */
static ls_status copy(pctx *c, const char *ptr, char *dst, size_t cap, const cJSON *v) {
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    if (strlen(s) >= cap) return bad(c, ptr, "%zu bytes, at most %zu", strlen(s), cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return LS_OK;
}

static bool declared(char (*tab)[LS_AUDIT_PROFILE_IDENT], size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i], name) == 0) return true;
    return false;
}

/* An array of identifiers (schema-checked) into tab, each one declared in
 * decl (NULL: any), what: "phase" / "layer kind" for the error. */
static ls_status idents(pctx *c, const char *ptr, const cJSON *arr, char (*tab)[LS_AUDIT_PROFILE_IDENT], size_t cap,
                        size_t *n, char (*decl)[LS_AUDIT_PROFILE_IDENT], size_t n_decl, const char *what,
                        const char *decl_field) {
    const cJSON *v;
    *n = 0;
    cJSON_ArrayForEach(v, arr) {
        char p[96];
        snprintf(p, sizeof p, "%s/%zu", ptr, *n);
        if (*n == cap) return bad(c, p, "more than %zu entries", cap);
        ls_status st = copy(c, p, tab[*n], LS_AUDIT_PROFILE_IDENT, v);
        if (st != LS_OK) return st;
        if (decl != NULL && !declared(decl, n_decl, tab[*n]))
            return bad(c, p, "%s \"%s\" is not declared in %s", what, tab[*n], decl_field);
        (*n)++;
    }
    return LS_OK;
}

static ls_status conditions(pctx *c, const char *ptr, const cJSON *arr, unsigned *out) {
    const cJSON *v;
    size_t i = 0;
    *out = 0;
    cJSON_ArrayForEach(v, arr) {
        bool found = false;
        for (size_t k = 0; k < sizeof WHEN / sizeof WHEN[0]; k++)
            if (cJSON_IsString(v) && strcmp(v->valuestring, WHEN[k].name) == 0) {
                *out |= WHEN[k].bit;
                found = true;
            }
        if (!found) {
            char p[96];
            snprintf(p, sizeof p, "%s/%zu", ptr, i);
            return bad(c, p, "not a condition");
        }
        i++;
    }
    return LS_OK;
}

static unsigned dirs_of(const cJSON *arr) {
    unsigned d = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) d |= cJSON_IsString(v) && strcmp(v->valuestring, "bwd") == 0 ? LS_AUDIT_DIRS_BWD
                                                                                            : LS_AUDIT_DIRS_FWD;
    return d;
}

static unsigned layers_of(const cJSON *arr) {
    unsigned l = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        const char *s = cJSON_IsString(v) ? v->valuestring : "";
        l |= strcmp(s, "embed") == 0 ? LS_AUDIT_LAYERS_EMBED : strcmp(s, "head") == 0 ? LS_AUDIT_LAYERS_HEAD
                                                                                       : LS_AUDIT_LAYERS_STACK;
    }
    return l;
}

static ls_audit_unit unit_of(const cJSON *v) {
    const char *s = cJSON_IsString(v) ? v->valuestring : "none";
    return strcmp(s, "prompt") == 0 ? LS_AUDIT_UNIT_PROMPT : strcmp(s, "member") == 0 ? LS_AUDIT_UNIT_MEMBER
                                                                                       : LS_AUDIT_UNIT_NONE;
}

static ls_status parse_steps(pctx *c, const cJSON *arr, ls_audit_profile *p) {
    const cJSON *s;
    cJSON_ArrayForEach(s, arr) {
        char ptr[64];
        size_t i = p->n_steps;
        snprintf(ptr, sizeof ptr, "/steps/%zu", i);
        if (i == LS_AUDIT_PROFILE_MAX_STEPS) return bad(c, ptr, "more than %d steps", LS_AUDIT_PROFILE_MAX_STEPS);
        ls_audit_profile_step *st = &p->steps[i];
        char f[96];
        snprintf(f, sizeof f, "%s/phase", ptr);
        ls_status r = copy(c, f, st->phase, sizeof st->phase, member(s, "phase"));
        if (r != LS_OK) return r;
        if (!declared(p->phases, p->n_phases, st->phase))
            return bad(c, f, "phase \"%s\" is not declared in /phases", st->phase);
        st->unit = unit_of(member(s, "unit"));
        const cJSON *d = member(s, "dirs"), *l = member(s, "layers");
        if (st->unit == LS_AUDIT_UNIT_NONE && (d != NULL || l != NULL))
            return bad(c, ptr, "unit none has no %s (no layer events)", d != NULL ? "dirs" : "layers");
        if (st->unit != LS_AUDIT_UNIT_NONE && (d == NULL || l == NULL))
            return bad(c, ptr, "unit %s needs %s", st->unit == LS_AUDIT_UNIT_PROMPT ? "prompt" : "member",
                       d == NULL ? "dirs" : "layers");
        st->dirs = dirs_of(d);
        st->layers = layers_of(l);
        snprintf(f, sizeof f, "%s/when", ptr);
        r = conditions(c, f, member(s, "when"), &st->when);
        if (r != LS_OK) return r;
        if ((st->when & LS_AUDIT_WHEN_RAN) && st->unit != LS_AUDIT_UNIT_NONE)
            return bad(c, f, "the condition ran needs unit none (whether a phase ran is known only once every "
                       "trace is read)");
        if (st->when & LS_AUDIT_WHEN_PROBED) return bad(c, f, "the condition probed is for /sequence only");
        if (st->when & LS_AUDIT_WHEN_GRID) return bad(c, f, "the conditions cp, ep and dp are for /collectives only");
        const cJSON *ps = member(s, "passes");
        const char *pv = cJSON_IsString(ps) ? ps->valuestring : "once";
        st->passes = strcmp(pv, "segments") == 0       ? LS_AUDIT_PASSES_SEGMENTS
                     : strcmp(pv, "sft_branches") == 0 ? LS_AUDIT_PASSES_SFT_BRANCHES
                                                       : LS_AUDIT_PASSES_ONCE;
        if (ps != NULL && st->unit == LS_AUDIT_UNIT_NONE) {
            snprintf(f, sizeof f, "%s/passes", ptr);
            return bad(c, f, "unit none has no layer events to pass over");
        }
        const cJSON *sp = member(s, "split");
        if (sp != NULL) {
            snprintf(f, sizeof f, "%s/split", ptr);
            if (!cJSON_IsString(sp) || strcmp(sp->valuestring, "dp") != 0)
                return bad(c, f, "split must be \"dp\" (members over the data-parallel replicas)");
            if (st->unit != LS_AUDIT_UNIT_MEMBER) return bad(c, f, "split needs unit member");
            st->split_dp = true;
        }
        st->phase_ix = -1;
        p->n_steps++;
    }
    return LS_OK;
}

/* A path condition "decision=value|value..." (the schema checked its
 * form) into *out: the decision and every value must be receipts/format/coverage.h's. */
static ls_status path_cond(pctx *c, const char *ptr, const char *text, ls_audit_profile_path_cond *out) {
    const char *eq = strchr(text, '=');
    size_t dl = eq ? (size_t)(eq - text) : 0;
    const ls_coverage_path_decision *d = NULL;
    for (size_t i = 0; eq && LS_COVERAGE_PATHS[i].key != NULL; i++)
        if (strlen(LS_COVERAGE_PATHS[i].key) == dl && strncmp(LS_COVERAGE_PATHS[i].key, text, dl) == 0) {
            d = &LS_COVERAGE_PATHS[i];
            out->decision = (uint8_t)i;
        }
    if (d == NULL)
        return bad(c, ptr, "\"%.60s\": not a decision of the run's path (config paths) with its values", text);
    out->values = 0;
    for (const char *v = eq + 1; *v;) {
        size_t n = strcspn(v, "|");
        bool found = false;
        for (size_t k = 0; d->values[k] != NULL && k < 16; k++)
            if (strlen(d->values[k]) == n && strncmp(d->values[k], v, n) == 0) {
                out->values |= (uint16_t)(1u << k);
                found = true;
            }
        if (!found) return bad(c, ptr, "\"%.*s\" is not a value of the decision %s", (int)(n < 40 ? n : 40), v, d->key);
        v += n + (v[n] == '|');
    }
    return LS_OK;
}

/* The step grammar (sequence): its items in order, each phase declared, the
 * repeated items one contiguous block, every phase of the plan (steps) in it. */
static ls_status parse_sequence(pctx *c, const cJSON *arr, ls_audit_profile *p) {
    const cJSON *s;
    bool block_done = false;
    cJSON_ArrayForEach(s, arr) {
        char ptr[64], f[96];
        size_t i = p->n_seq;
        snprintf(ptr, sizeof ptr, "/sequence/%zu", i);
        if (i == LS_AUDIT_PROFILE_MAX_SEQ) return bad(c, ptr, "more than %d items", LS_AUDIT_PROFILE_MAX_SEQ);
        ls_audit_profile_seq_item *it = &p->seq[i];
        snprintf(f, sizeof f, "%s/phase", ptr);
        ls_status r = copy(c, f, it->phase, sizeof it->phase, member(s, "phase"));
        if (r != LS_OK) return r;
        if (!declared(p->phases, p->n_phases, it->phase))
            return bad(c, f, "phase \"%s\" is not declared in /phases", it->phase);
        snprintf(f, sizeof f, "%s/when", ptr);
        const cJSON *v;
        size_t k = 0;
        cJSON_ArrayForEach(v, member(s, "when")) {
            char q[112];
            snprintf(q, sizeof q, "%s/%zu", f, k++);
            const char *t = cJSON_IsString(v) ? v->valuestring : "";
            if (strchr(t, '=') != NULL) {
                if (it->n_paths == LS_AUDIT_PROFILE_MAX_SEQ_PATHS)
                    return bad(c, q, "more than %d path conditions", LS_AUDIT_PROFILE_MAX_SEQ_PATHS);
                r = path_cond(c, q, t, &it->paths[it->n_paths++]);
                if (r != LS_OK) return r;
                continue;
            }
            bool found = false;
            for (size_t w = 0; w < sizeof WHEN / sizeof WHEN[0]; w++)
                if (strcmp(t, WHEN[w].name) == 0) {
                    it->when |= WHEN[w].bit;
                    found = true;
                }
            if (!found) return bad(c, q, "not a condition");
            if (it->when & LS_AUDIT_WHEN_RAN)
                return bad(c, q, "the condition ran is for /steps only (a sequence item states when it occurs)");
            if (it->when & LS_AUDIT_WHEN_GRID) return bad(c, q, "the conditions cp, ep and dp are for /collectives only");
        }
        const cJSON *rp = member(s, "repeat");
        it->repeat = cJSON_IsString(rp) && strcmp(rp->valuestring, "prompt_groups") == 0;
        if (it->repeat && block_done) {
            snprintf(f, sizeof f, "%s/repeat", ptr);
            return bad(c, f, "the items repeated per prompt group must be one contiguous block");
        }
        if (it->repeat && (i == 0 || !p->seq[i - 1].repeat)) p->seq_block0 = i;
        if (it->repeat) p->seq_block1 = i + 1;
        if (!it->repeat && i > 0 && p->seq[i - 1].repeat) block_done = true;
        const cJSON *ev = member(s, "event");
        it->holds_optimizer_step = cJSON_IsString(ev) && strcmp(ev->valuestring, "optimizer_step") == 0;
        it->phase_ix = -1;
        p->n_seq++;
    }
    for (size_t i = 0; i < p->n_steps; i++) {
        bool in = false;
        for (size_t k = 0; k < p->n_seq; k++) in = in || strcmp(p->seq[k].phase, p->steps[i].phase) == 0;
        if (!in) {
            char ptr[64];
            snprintf(ptr, sizeof ptr, "/steps/%zu/phase", i);
            return bad(c, ptr, "phase \"%s\" never occurs in /sequence", p->steps[i].phase);
        }
    }
    return LS_OK;
}

/* o's "group_kind" (a registered group kind: ls_trace_group_kind) into *out; an error naming ptr/group_kind. */
static ls_status group_kind(pctx *c, const char *ptr, const cJSON *o, ls_audit_group_kind *out) {
    const cJSON *g = member(o, "group_kind");
    int gk = ls_audit_group_kind_from_name(cJSON_IsString(g) ? g->valuestring : NULL);
    if (gk < 0) {
        char f[128];
        snprintf(f, sizeof f, "%s/group_kind", ptr);
        return bad(c, f, "not a group kind");
    }
    *out = (ls_audit_group_kind)gk;
    return LS_OK;
}

static ls_status parse_layer_req(pctx *c, const char *ptr, const cJSON *o, ls_audit_profile *p,
                                 ls_audit_profile_layer_req *q) {
    char f[128];
    ls_status g = group_kind(c, ptr, o, &q->group_kind);
    if (g != LS_OK) return g;
    snprintf(f, sizeof f, "%s/layer_kinds", ptr);
    ls_status r = idents(c, f, member(o, "layer_kinds"), q->kinds, LS_AUDIT_PROFILE_MAX_LIST, &q->n_kinds,
                         p->layer_kinds, p->n_layer_kinds, "layer kind", "/layer_kinds");
    snprintf(f, sizeof f, "%s/phases", ptr);
    if (r == LS_OK)
        r = idents(c, f, member(o, "phases"), q->phases, LS_AUDIT_PROFILE_MAX_LIST, &q->n_phases, p->phases,
                   p->n_phases, "phase", "/phases");
    snprintf(f, sizeof f, "%s/purposes", ptr);
    if (r == LS_OK)
        r = idents(c, f, member(o, "purposes"), q->purposes, LS_AUDIT_PROFILE_MAX_LIST, &q->n_purposes, NULL, 0,
                   NULL, NULL);
    snprintf(f, sizeof f, "%s/label", ptr);
    if (r == LS_OK) r = copy(c, f, q->label, sizeof q->label, member(o, "label"));
    snprintf(f, sizeof f, "%s/when", ptr);
    if (r == LS_OK) r = conditions(c, f, member(o, "when"), &q->when);
    if (r != LS_OK) return r;
    if (q->when & LS_AUDIT_WHEN_RAN) return bad(c, f, "the condition ran is for steps of unit none only");
    snprintf(f, sizeof f, "%s/layers_from", ptr);
    const cJSON *lf = member(o, "layers_from");
    if (lf != NULL && (r = copy(c, f, q->layers_from, sizeof q->layers_from, lf)) != LS_OK) return r;
    q->from_layer = 0;
    const cJSON *d = member(o, "dir");
    q->dir = cJSON_IsString(d) && strcmp(d->valuestring, "bwd") == 0 ? LS_AUDIT_DIRS_BWD : LS_AUDIT_DIRS_FWD;
    q->unit = unit_of(member(o, "unit"));
    const cJSON *n = member(o, "count");
    q->per_event = cJSON_IsString(n) && strcmp(n->valuestring, "per_event") == 0;
    q->must_appear = cJSON_IsTrue(member(o, "must_appear"));
    for (size_t k = 0; k < LS_AUDIT_PROFILE_MAX_LIST; k++) q->kind_ix[k] = q->phase_ix[k] = -1;
    return LS_OK;
}

static ls_status parse_step_req(pctx *c, const char *ptr, const cJSON *o, ls_audit_profile *p,
                                ls_audit_profile_step_req *q) {
    char f[128];
    ls_status g = group_kind(c, ptr, o, &q->group_kind);
    if (g != LS_OK) return g;
    snprintf(f, sizeof f, "%s/phase", ptr);
    ls_status r = copy(c, f, q->phase, sizeof q->phase, member(o, "phase"));
    if (r != LS_OK) return r;
    if (!declared(p->phases, p->n_phases, q->phase)) return bad(c, f, "phase \"%s\" is not declared in /phases", q->phase);
    snprintf(f, sizeof f, "%s/purposes", ptr);
    r = idents(c, f, member(o, "purposes"), q->purposes, LS_AUDIT_PROFILE_MAX_LIST, &q->n_purposes, NULL, 0, NULL,
               NULL);
    if (r != LS_OK) return r;
    if (p->n_step_purposes + q->n_purposes > LS_AUDIT_PROFILE_MAX_STEP_PURPOSES)
        return bad(c, f, "more than %d purposes over every per-step requirement", LS_AUDIT_PROFILE_MAX_STEP_PURPOSES);
    q->bit0 = p->n_step_purposes;
    p->n_step_purposes += (unsigned)q->n_purposes;
    snprintf(f, sizeof f, "%s/when", ptr);
    r = conditions(c, f, member(o, "when"), &q->when);
    if (r != LS_OK) return r;
    if (q->when & LS_AUDIT_WHEN_RAN) return bad(c, f, "the condition ran is for steps of unit none only");
    q->phase_ix = -1;
    return LS_OK;
}

static ls_status parse_rules(pctx *c, const cJSON *coll, ls_audit_profile *p) {
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) {
        const cJSON *o = member(coll, RULES[id]);
        if (o == NULL) continue;
        ls_audit_profile_rule *rl = &p->rules[id];
        char ptr[96], f[128];
        snprintf(ptr, sizeof ptr, "/collectives/%s", RULES[id]);
        rl->present = true;
        rl->level = (int)member(o, "level")->valuedouble; /* schema: an integer 1..4 */
        snprintf(f, sizeof f, "%s/title", ptr);
        ls_status r = copy(c, f, rl->title, sizeof rl->title, member(o, "title"));
        snprintf(f, sizeof f, "%s/none", ptr);
        if (r == LS_OK) r = copy(c, f, rl->none, sizeof rl->none, member(o, "none"));
        if (r != LS_OK) return r;
        const cJSON *q;
        cJSON_ArrayForEach(q, member(o, "layers")) {
            snprintf(f, sizeof f, "%s/layers/%zu", ptr, rl->n_layers);
            if (rl->n_layers == LS_AUDIT_PROFILE_MAX_LAYER_REQ)
                return bad(c, f, "more than %d layer requirements", LS_AUDIT_PROFILE_MAX_LAYER_REQ);
            r = parse_layer_req(c, f, q, p, &rl->layers[rl->n_layers++]);
            if (r != LS_OK) return r;
        }
        cJSON_ArrayForEach(q, member(o, "steps")) {
            snprintf(f, sizeof f, "%s/steps/%zu", ptr, rl->n_steps);
            if (rl->n_steps == LS_AUDIT_PROFILE_MAX_STEP_REQ)
                return bad(c, f, "more than %d per-step requirements", LS_AUDIT_PROFILE_MAX_STEP_REQ);
            r = parse_step_req(c, f, q, p, &rl->steps[rl->n_steps++]);
            if (r != LS_OK) return r;
        }
        bool must = false;
        for (size_t k = 0; k < rl->n_layers; k++) must = must || rl->layers[k].must_appear;
        if (must && !rl->none[0]) return bad(c, ptr, "a must_appear requirement needs the rule's none");
    }
    return LS_OK;
}

static ls_status parse_faults(pctx *c, const cJSON *o, ls_audit_profile *p) {
    const cJSON *f;
    cJSON_ArrayForEach(f, o) {
        char ptr[96];
        snprintf(ptr, sizeof ptr, "/faults/%.60s", f->string);
        if (!ident_ok(f->string, LS_AUDIT_PROFILE_FAULT_NAME))
            return bad(c, ptr, "not a fault name (^[a-z][a-z0-9_.-]{0,47}$)");
        if (p->n_faults == LS_AUDIT_PROFILE_MAX_FAULTS) return bad(c, ptr, "more than %d faults", LS_AUDIT_PROFILE_MAX_FAULTS);
        ls_audit_profile_fault *x = &p->faults[p->n_faults++];
        snprintf(x->name, sizeof x->name, "%s", f->string);
        if (cJSON_IsNumber(f)) { /* its level alone (schema: an integer 1..4) */
            x->level = (int)f->valuedouble;
            char what[sizeof x->what];
            snprintf(what, sizeof what, "a fault of profile %s, at level %d", p->name, x->level);
            memcpy(x->what, what, sizeof what);
            continue;
        }
        x->level = (int)member(f, "level")->valuedouble; /* schema: an integer 1..4 */
        char w[128];
        snprintf(w, sizeof w, "%s/what", ptr);
        ls_status r = copy(c, w, x->what, sizeof x->what, member(f, "what"));
        if (r != LS_OK) return r;
    }
    return LS_OK;
}

static ls_status parse_controls(pctx *c, const cJSON *o, ls_audit_profile *p) {
    const cJSON *f;
    cJSON_ArrayForEach(f, o) {
        char ptr[96];
        snprintf(ptr, sizeof ptr, "/controls/%.60s", f->string);
        if (!ident_ok(f->string, LS_AUDIT_PROFILE_FAULT_NAME))
            return bad(c, ptr, "not a control name (^[a-z][a-z0-9_.-]{0,47}$)");
        if (p->n_controls == LS_AUDIT_PROFILE_MAX_CONTROLS)
            return bad(c, ptr, "more than %d controls", LS_AUDIT_PROFILE_MAX_CONTROLS);
        ls_audit_profile_control *x = &p->controls[p->n_controls++];
        snprintf(x->name, sizeof x->name, "%s", f->string);
        ls_status r = copy(c, ptr, x->breaks, sizeof x->breaks, f);
        if (r != LS_OK) return r;
    }
    return LS_OK;
}

ls_status ls_audit_profile_parse(const char *bytes, size_t len, const char *what, const char *name,
                                 ls_audit_profile *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    pctx c = {.what = what ? what : "profile", .err = err, .errlen = errlen};
    if (len > LS_AUDIT_PROFILE_MAX_BYTES) {
        ls_json_errf(err, errlen, "%s: %zu bytes, a profile is at most %zu", c.what, len, LS_AUDIT_PROFILE_MAX_BYTES);
        return LS_ERR_FORMAT;
    }
    if (ls_digest_sha256_hex(bytes, len, out->sha256) != LS_OK) {
        ls_json_errf(err, errlen, "%s: SHA-256 failed", c.what);
        return LS_ERR_INTERNAL;
    }
    cJSON *doc = NULL;
    ls_status st = ls_json_parse(bytes, len, c.what, &doc, err, errlen);
    if (st != LS_OK) return st;
    const ls_schema *schema = NULL;
    char serr[300];
    st = ls_schema_get("profile", &schema, serr, sizeof serr);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: the profile schema: %s", c.what, serr);
        goto done;
    }
    ls_schema_errors errs = {0};
    st = ls_schema_validate(schema, doc, &errs);
    if (st != LS_OK) {
        char first[300];
        ls_schema_errors_first(&errs, first, sizeof first);
        ls_json_errf(err, errlen, "%s: not a profile (%s): %s", c.what, LS_AUDIT_PROFILE_SCHEMA, first);
        ls_schema_errors_free(&errs);
        goto done;
    }
    ls_schema_errors_free(&errs);
    st = copy(&c, "/name", out->name, sizeof out->name, member(doc, "name"));
    if (st == LS_OK && name != NULL && strcmp(out->name, name) != 0)
        st = bad(&c, "/name", "\"%s\", but the file is the profile %s", out->name, name);
    if (st == LS_OK) st = copy(&c, "/trainer", out->trainer, sizeof out->trainer, member(doc, "trainer"));
    if (st == LS_OK)
        st = idents(&c, "/phases", member(doc, "phases"), out->phases, LS_AUDIT_PROFILE_MAX_NAMES, &out->n_phases, NULL,
                    0, NULL, NULL);
    if (st == LS_OK)
        st = idents(&c, "/layer_kinds", member(doc, "layer_kinds"), out->layer_kinds, LS_AUDIT_PROFILE_MAX_NAMES,
                    &out->n_layer_kinds, NULL, 0, NULL, NULL);
    if (st == LS_OK) st = parse_steps(&c, member(doc, "steps"), out);
    if (st == LS_OK) st = parse_sequence(&c, member(doc, "sequence"), out);
    if (st == LS_OK) st = parse_rules(&c, member(doc, "collectives"), out);
    if (st == LS_OK) st = parse_faults(&c, member(doc, "faults"), out);
    if (st == LS_OK) st = parse_controls(&c, member(doc, "controls"), out);
    out->decisions = cJSON_IsTrue(member(doc, "decisions"));
    const cJSON *pr = member(doc, "probe"); /* the schema allows required | optional; absent: optional */
    out->probe_required = cJSON_IsString(pr) && strcmp(pr->valuestring, "required") == 0;
    const cJSON *rec; /* the schema allows the three kinds, each once */
    cJSON_ArrayForEach(rec, member(doc, "records")) {
        const char *k = cJSON_IsString(rec) ? rec->valuestring : "";
        out->records |= strcmp(k, "memory") == 0       ? LS_AUDIT_RECORDS_MEMORY
                        : strcmp(k, "out_sha256") == 0 ? LS_AUDIT_RECORDS_OUT_SHA256
                        : strcmp(k, "grad_digest_disagreements") == 0 ? LS_AUDIT_RECORDS_GRAD_DIGESTS
                                                                        : 0u;
    }
done:
    cJSON_Delete(doc);
    return st;
}

ls_status ls_audit_profile_load(const char *dir, const char *name, ls_audit_profile *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char fam_dir[1024];
    if (dir == NULL || strcmp(dir, LS_PROFILE_DIR) == 0) dir = default_dir_for(name, fam_dir, sizeof fam_dir);
    if (!ls_audit_profile_name_ok(name)) {
        ls_json_errf(err, errlen, "\"%.60s\" is not a profile name (^[a-z][a-z0-9_.-]{0,31}$)", name ? name : "");
        return LS_ERR_ARG;
    }
    char rel[64], what[300], rerr[300];
    snprintf(rel, sizeof rel, "%s.json", name);
    snprintf(what, sizeof what, "%s/%s", dir, rel);
    char *bytes = NULL;
    size_t len = 0;
    ls_status st = ls_audit_read(dir, rel, LS_AUDIT_PROFILE_MAX_BYTES, &bytes, &len, rerr, sizeof rerr);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "profile %s: %s: %s", name, dir, rerr);
        return st;
    }
    st = ls_audit_profile_parse(bytes, len, what, name, out, err, errlen);
    char sha[65];
    memcpy(sha, out->sha256, sizeof sha);
    free(bytes);
    if (st != LS_OK) {
        memset(out, 0, sizeof *out);
        memcpy(out->sha256, sha, sizeof sha); /* the digest of what was read, for the error's reader */
        return st;
    }
    snprintf(out->file, sizeof out->file, "%s", what);
    return LS_OK;
}

/* ---- accessors ------------------------------------------------------------ */

const char *ls_audit_profile_sha256(const ls_audit_profile *p) { return p->sha256; }
size_t ls_audit_profile_n_steps(const ls_audit_profile *p) { return p->n_steps; }
const ls_audit_profile_step *ls_audit_profile_step_at(const ls_audit_profile *p, size_t i) {
    return i < p->n_steps ? &p->steps[i] : NULL;
}
size_t ls_audit_profile_n_seq(const ls_audit_profile *p) { return p->n_seq; }
const ls_audit_profile_seq_item *ls_audit_profile_seq_at(const ls_audit_profile *p, size_t i) {
    return i < p->n_seq ? &p->seq[i] : NULL;
}
const ls_audit_profile_rule *ls_audit_profile_rule_of(const ls_audit_profile *p, ls_audit_profile_rule_id id) {
    return id >= 0 && id < LS_AUDIT_PROFILE_NRULES && p->rules[id].present ? &p->rules[id] : NULL;
}
int ls_audit_profile_fault_level(const ls_audit_profile *p, const char *name, const char **what) {
    for (size_t i = 0; i < p->n_faults; i++)
        if (strcmp(p->faults[i].name, name) == 0) {
            if (what) *what = p->faults[i].what;
            return p->faults[i].level;
        }
    return 0;
}
size_t ls_audit_profile_n_controls(const ls_audit_profile *p) { return p->n_controls; }
const ls_audit_profile_control *ls_audit_profile_control_at(const ls_audit_profile *p, size_t i) {
    return i < p->n_controls ? &p->controls[i] : NULL;
}
bool ls_audit_profile_decisions(const ls_audit_profile *p) { return p->decisions; }

bool ls_audit_profile_when(unsigned when, bool full, bool naive, bool sft, bool frozen, bool ran) {
    if ((when & LS_AUDIT_WHEN_FULL) && !full) return false;
    if ((when & LS_AUDIT_WHEN_DETACHED) && full) return false;
    if ((when & LS_AUDIT_WHEN_LONGSTRAW) && naive) return false;
    if ((when & LS_AUDIT_WHEN_NAIVE) && !naive) return false;
    if ((when & LS_AUDIT_WHEN_SFT) && !sft) return false;
    if ((when & LS_AUDIT_WHEN_NOT_SFT) && sft) return false;
    if ((when & LS_AUDIT_WHEN_FROZEN) && !frozen) return false;
    if ((when & LS_AUDIT_WHEN_NOT_FROZEN) && frozen) return false;
    if ((when & LS_AUDIT_WHEN_RAN) && !ran) return false;
    return true;
}

bool ls_audit_profile_layer_in(unsigned parts, int64_t l, int64_t n_layers) {
    if (l == -1) return parts & LS_AUDIT_LAYERS_EMBED;
    if (l == n_layers) return parts & LS_AUDIT_LAYERS_HEAD;
    return l >= 0 && l < n_layers && (parts & LS_AUDIT_LAYERS_STACK);
}

uint64_t ls_audit_profile_layer_keys(unsigned parts, unsigned dirs, int64_t n_layers) {
    uint64_t layers = (parts & LS_AUDIT_LAYERS_EMBED ? 1u : 0u) + (parts & LS_AUDIT_LAYERS_HEAD ? 1u : 0u) +
                      (parts & LS_AUDIT_LAYERS_STACK ? (uint64_t)(n_layers > 0 ? n_layers : 0) : 0u);
    return layers * ((dirs & LS_AUDIT_DIRS_FWD ? 1u : 0u) + (dirs & LS_AUDIT_DIRS_BWD ? 1u : 0u));
}
