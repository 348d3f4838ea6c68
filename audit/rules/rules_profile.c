/* rules_profile.c - the run's profile (audit.h, "profile"): which profile a
 * run is audited against (v1: its family's; v2: the one its receipts name),
 * its names resolved to the trace's indices (ls_audit_vocab_index), the kinds
 * of the run's groups, the levels of its faults, and the rule profile.match
 * (every run: the profile it names, at the revision the audit reads). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdio.h>
#include <string.h>

#include "audit/model/profile.h"
#include "receipts/format/registry_file.h"
#include "receipts/format/trace_event.h"

static const cJSON *member(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* ---- the run's profile ------------------------------------------------------ */

int ls_audit_vocab_index(ls_audit_run *run, ls_audit_vocab v, const char *name) {
    if (name == NULL) return -1;
    if (v == LS_AUDIT_VOCAB_LAYER_KIND) return ls_audit_kind_index(run, name);
    int p = ls_audit_phase_index(run, name);
    return p < LS_AUDIT_NPHASE - 1 ? p : -1;
}

int ls_audit_group_kind_of(const ls_audit_run *run, uint16_t g) {
    if (g >= run->n_groups) return -1;
    const char *name = run->groups[g];
    for (uint32_t i = 0; i < run->world; i++) {
        const cJSON *gr;
        cJSON_ArrayForEach(gr, member(run->ranks[i].report.header, "groups")) {
            const cJSON *n = member(gr, "name"), *k = member(gr, "kind");
            if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0 && cJSON_IsString(k))
                return ls_audit_group_kind_from_name(k->valuestring);
        }
    }
    /* a v1 header names its groups without a kind: world and cp */
    if (strcmp(name, "cp") == 0) return LS_AUDIT_GROUP_CP;
    if (strcmp(name, "world") == 0) return LS_AUDIT_GROUP_WORLD;
    return -1;
}

const ls_audit_profile *ls_audit_profile_of(const ls_audit_run *run) {
    return run->profile_state == 1 ? &run->profile : NULL;
}

int ls_audit_fault_level_of(const ls_audit_run *run, const char *name, const char **what) {
    int l = run->profile_state == 1 ? ls_audit_profile_fault_level(&run->profile, name, what) : 0;
    if (l > 0) return l;
    if (what) *what = "not a fault this audit knows: it may touch anything";
    return 1;
}

static void bind(ls_audit_run *run, ls_audit_profile *p) {
    for (size_t i = 0; i < p->n_steps; i++)
        p->steps[i].phase_ix = ls_audit_vocab_index(run, LS_AUDIT_VOCAB_PHASE, p->steps[i].phase);
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) {
        ls_audit_profile_rule *rl = &p->rules[id];
        for (size_t k = 0; k < rl->n_layers; k++) {
            ls_audit_profile_layer_req *q = &rl->layers[k];
            for (size_t j = 0; j < q->n_kinds; j++)
                q->kind_ix[j] = ls_audit_vocab_index(run, LS_AUDIT_VOCAB_LAYER_KIND, q->kinds[j]);
            for (size_t j = 0; j < q->n_phases; j++)
                q->phase_ix[j] = ls_audit_vocab_index(run, LS_AUDIT_VOCAB_PHASE, q->phases[j]);
            /* layers_from: the configuration's field; absent or not a layer number: every layer (deny by default) */
            int64_t v = 0;
            q->from_layer = q->layers_from[0] && run->config != NULL && ls_audit_get_int(run->config, q->layers_from, &v) &&
                                    v >= 0 && v < 1000000
                                ? v
                                : 0;
        }
        for (size_t k = 0; k < rl->n_steps; k++)
            rl->steps[k].phase_ix = ls_audit_vocab_index(run, LS_AUDIT_VOCAB_PHASE, rl->steps[k].phase);
    }
}

static const char *predicate_type(const cJSON *doc) {
    const cJSON *t = member(doc, "predicateType");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static const cJSON *predicate_profile(const cJSON *doc) {
    return member(member(doc, "predicate"), "profile");
}

/* The profile a source names: predicate.profile.name, NULL none. */
static const char *named_profile(const cJSON *doc) {
    const cJSON *n = member(predicate_profile(doc), "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

/* The layer kinds (bits of their indices) of the steps the ranks hold open:
 * at the first step closed, every layer event of that step so far. */
static unsigned kinds_open(const ls_audit_run *run) {
    unsigned kinds = 0;
    for (uint32_t i = 0; i < run->world; i++)
        for (int w = 0; w < 2; w++) {
            const ls_audit_step_window *win = &run->ranks[i].win[w];
            for (size_t k = 0; k < win->lk_cap; k++)
                if (win->lk[k].used && win->lk[k].kind < 32) kinds |= 1u << win->lk[k].kind;
        }
    return kinds;
}

/* A v1 run whose configuration names no family (no readable receipt or
 * manifest: a crashed run): the first of longstraw-train's profiles (one per
 * family of the registry, receipts/format/registry_file.h, in its order) whose
 * layer kinds hold every kind its traces show so far (at the first step a
 * trace closes), the first family's when none does.  Its decisions are not
 * taken from the profile (profile_inferred: parity.decisions applies). */
static ls_status attach_inferred(ls_audit_run *run, const char *dir) {
    const char *V1[32];
    size_t n_v1 = 0;
    while (n_v1 < sizeof V1 / sizeof V1[0] && (V1[n_v1] = ls_registry_file_family(n_v1)) != NULL) n_v1++;
    unsigned kinds = kinds_open(run);
    char err[400];
    run->profile_inferred = true;
    if (n_v1 == 0) {
        const char *why = NULL;
        ls_registry_file_get(&why);
        snprintf(run->profile_err, sizeof run->profile_err, "no family's profile to infer: %s", why ? why : "");
        return LS_ERR_FORMAT;
    }
    for (size_t c = 0; c < n_v1; c++) {
        if (ls_audit_profile_load(dir, V1[c], &run->profile, err, sizeof err) != LS_OK) {
            snprintf(run->profile_err, sizeof run->profile_err, "%s", err);
            return LS_ERR_FORMAT;
        }
        unsigned covered = 0;
        for (size_t k = 0; k < run->profile.n_layer_kinds; k++) {
            int ix = ls_audit_vocab_index(run, LS_AUDIT_VOCAB_LAYER_KIND, run->profile.layer_kinds[k]);
            if (ix >= 0 && ix < 32) covered |= 1u << ix;
        }
        if ((kinds & ~covered) == 0) break;
        if (c + 1 == n_v1 && ls_audit_profile_load(dir, V1[0], &run->profile, err, sizeof err) != LS_OK) {
            snprintf(run->profile_err, sizeof run->profile_err, "%s", err);
            return LS_ERR_FORMAT;
        }
    }
    snprintf(run->profile_used, sizeof run->profile_used, "%s", run->profile.name);
    bind(run, &run->profile);
    run->profile_state = 1;
    return LS_OK;
}

ls_status ls_audit_profile_attach(ls_audit_run *run) {
    if (run->profile_state != 0) return run->profile_state == 1 || run->profile_v2 ? LS_OK : LS_ERR_FORMAT;
    const cJSON *mdoc = run->manifest ? run->manifest->priv_doc : NULL;
    run->profile_v2 = strcmp(predicate_type(mdoc), "urn:longstraw:predicate:run-manifest:v2") == 0;
    const char *name = NULL;
    for (uint32_t i = 0; i < run->world; i++) {
        const cJSON *doc = run->ranks[i].receipt ? run->ranks[i].receipt->priv_doc : NULL;
        if (strcmp(predicate_type(doc), "urn:longstraw:predicate:rank-receipt:v2") != 0) continue;
        run->profile_v2 = true;
        if (name == NULL) name = named_profile(doc);
    }
    if (run->profile_v2 && name == NULL) name = named_profile(mdoc);
    const char *dir = run->opt.profiles_dir ? run->opt.profiles_dir : ls_audit_profile_default_dir();
    /* the profile the run names (load.c takes the manifest's, else a v2 receipt's): a v1 run pins it in
       its receipts too */
    for (uint32_t i = 0; i < run->world && run->profile_name == NULL; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        if (rc != NULL && rc->profile_name != NULL) {
            run->profile_name = rc->profile_name;
            run->profile_sha256 = rc->profile_sha256;
        }
    }
    run->profile_state = -1;
    if (run->profile_v2 && name == NULL) {
        snprintf(run->profile_err, sizeof run->profile_err,
                 "the run names no profile (predicate.profile of its receipts and manifest)");
        return LS_OK;
    }
    if (!run->profile_v2) { /* v1: the family's */
        const char *fam = run->config ? ls_audit_get_str(run->config, "family") : NULL;
        if (fam == NULL) return attach_inferred(run, dir);
        name = fam;
        if (!ls_audit_profile_name_ok(name)) {
            snprintf(run->profile_err, sizeof run->profile_err,
                     "config \"family\" \"%.60s\" names no profile (not a profile name)", name);
            return LS_ERR_FORMAT;
        }
    }
    snprintf(run->profile_used, sizeof run->profile_used, "%s", name);
    if (!ls_audit_profile_name_ok(name)) {
        snprintf(run->profile_err, sizeof run->profile_err, "profile \"%.60s\": not a profile name", name);
        return LS_OK; /* v2 */
    }
    char err[400];
    if (ls_audit_profile_load(dir, name, &run->profile, err, sizeof err) != LS_OK) {
        snprintf(run->profile_err, sizeof run->profile_err, "%s", err);
        return run->profile_v2 ? LS_OK : LS_ERR_FORMAT;
    }
    bind(run, &run->profile);
    run->profile_state = 1;
    return LS_OK;
}

/* ---- profile.match --------------------------------------------------------- */

/* Every run names the profile it was written for (predicate.profile of its
 * manifest and receipts: a v2 run by the contract, a v1 run of
 * longstraw-train since runs pinned their family's profile at build time),
 * and must be audited against that revision: the audit's file's SHA-256 is
 * the one the run names.  A source that names none leaves the profile
 * unpinned, and the rule fails: the run may have been written for a profile
 * that asked more of it (deny by default). */
ls_status ls_audit_rules_profile(ls_audit_run *run) {
    ls_audit_rule *m = ls_audit_rule_add(run, "profile.match", 1,
                                         "the run names one profile, shipped with the audit, at the revision it was "
                                         "written for (sha256 of the profile file)", true);
    if (m == NULL) return LS_ERR_NOMEM;
    const char *want = run->profile_used[0] ? run->profile_used : NULL;
    const char *have = run->profile_state == 1 ? run->profile.sha256 : NULL;
    char pf[300];
    ls_audit_profile_file_label(run->opt.profiles_dir, want ? want : "?", pf, sizeof pf);
    const char *older = run->profile_v2 ? "" : " (a v1 run written before runs pinned their profile)";
    uint64_t named = 0;
    /* every source: the manifest, each receipt, each trace header */
    for (int64_t i = -1; i < (int64_t)run->world; i++) {
        const cJSON *doc = NULL, *hdr = NULL;
        char file[64];
        if (i < 0) {
            doc = run->manifest ? run->manifest->priv_doc : NULL;
            snprintf(file, sizeof file, "%s", LS_MANIFEST_FILE);
        } else {
            const ls_audit_rank *r = &run->ranks[i];
            doc = r->receipt ? r->receipt->priv_doc : NULL;
            hdr = r->trace_present ? r->report.header : NULL;
            char d[32];
            ls_receipt_rank_dir((uint32_t)i, d, sizeof d);
            snprintf(file, sizeof file, "%s/receipt.json", d);
        }
        if (doc != NULL) {
            m->matched++;
            const char *n = named_profile(doc);
            const cJSON *sha = member(predicate_profile(doc), "sha256");
            if (n != NULL) named++;
            if (n == NULL)
                ls_audit_rule_fail(m, i, file, -1, "names no profile (predicate.profile): the profile it was written "
                                   "for is not pinned%s", older);
            else if (want && strcmp(n, want) != 0)
                ls_audit_rule_fail(m, i, file, -1, "names profile %.40s, the run's is %.40s%s", n, want,
                                   run->profile_v2 ? "" : " (its configuration's family)");
            else if (have && (!cJSON_IsString(sha) || strcmp(sha->valuestring, have) != 0))
                ls_audit_rule_fail(m, i, file, -1,
                                   "profile %.40s: written for sha256 %.64s, the audit's %s is %.64s (another "
                                   "revision of the profile)",
                                   n, cJSON_IsString(sha) ? sha->valuestring : "(none)", pf, have);
        }
        const cJSON *hp = member(hdr, "profile");
        if (cJSON_IsString(hp)) {
            m->matched++;
            if (want && strcmp(hp->valuestring, want) != 0)
                ls_audit_rule_fail(m, i, run->ranks[i].trace_file, 0, "the trace header names profile %.40s, the "
                                   "run's is %.40s", hp->valuestring, want);
        }
    }
    if (named == 0 && m->n_ev == 0) { /* no manifest, no receipt: nothing pins the profile */
        m->matched = m->matched ? m->matched : 1;
        char why[120] = "";
        if (run->profile_inferred)
            snprintf(why, sizeof why, " (profile %s inferred from the traces' layer kinds)", run->profile.name);
        ls_audit_rule_fail(m, -1, LS_MANIFEST_FILE, -1, "no manifest or receipt names the profile the run was written "
                           "for: not pinned%s", why);
    }
    if (run->profile_state != 1) ls_audit_rule_fail(m, -1, pf, -1, "%s", run->profile_err);
    ls_audit_rule_close(m);
    if (m->pass)
        snprintf(m->message, sizeof m->message, "profile %s, %s, sha256 %.64s: the revision the run names",
                 run->profile.name, pf, run->profile.sha256);
    else if (named == 0 && run->profile_state == 1)
        snprintf(m->message, sizeof m->message, "the run does not pin its profile: audited against %s, sha256 %.64s, "
                 "which it may not have been written for", pf, run->profile.sha256);
    return LS_OK;
}
