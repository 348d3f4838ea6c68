/* test_audit_profile.c - the audit's profiles (audit/model/profile.h, profiles/):
 * the loader refuses what is not a profile (missing, not JSON, not
 * schema-valid, a phase it does not declare, too large, another name, a
 * link) naming the file and the field; the shipped profiles load, their
 * digest is the file's; the rules read them: a copy of hybrid.json with one
 * more required purpose, phase, direction, group kind, control or another
 * fault level changes what a correct run of tests/data/profile_golden/ must
 * show (and, the run pinning the shipped revision, fails profile.match); a
 * v1 run whose family has no profile cannot be scored (exit 2); and
 * profile.match names the profile and both digests when a run was written
 * for another revision of it: a v2 run (its sources edited in the loaded
 * model: v2 receipts are parsed elsewhere) and a v1 run, which pins its
 * family's profile (a weakened hybrid.json in --profiles DIR is refused, an
 * older run that pins none fails as not pinned); every report (text, JSON,
 * JUnit, HTML) names the profile used, its file and its digest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "audit/model/profile.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "tests/support/test_tmpdir.h"

#define PROFILES LS_SOURCE_DIR "/profiles"
#define GOLDEN LS_SOURCE_DIR "/tests/data/profile_golden"
#define AUDIT LS_BINARY_DIR "/audit/longstraw-audit"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "audit-profile"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static cJSON *read_json(const char *path) {
    cJSON *d = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(path, &d, err, sizeof err), LS_OK, "%s", err);
    return d;
}

static void write_json(const char *path, const cJSON *d) {
    char err[512];
    cr_assert_eq(ls_json_write_file(path, d, err, sizeof err), LS_OK, "%s", err);
}

/* tmpdir/NAME/ holding copies of the shipped profiles; returns its path. */
static const char *profile_copy(const char *name, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", tmpdir, name);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp " PROFILES "/*.json '%s'/", dir, dir);
    cr_assert_eq(system(cmd), 0);
    return dir;
}

/* Loads and evaluates a golden run against the profiles in dir (NULL: the
 * shipped ones), the parity report parity (NULL: none). */
static ls_audit_run *audit_golden(const char *run, const char *dir, const char *parity) {
    static char path[512];
    snprintf(path, sizeof path, GOLDEN "/runs/%s", run);
    ls_audit_options opt = {.run_dir = path, .profiles_dir = dir, .parity_path = parity};
    ls_audit_run *r = NULL;
    char err[512];
    cr_assert_eq(ls_audit_load(&opt, &r, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_audit_evaluate(r), LS_OK, "%s", r->profile_err);
    return r;
}

static const ls_audit_rule *rule(const ls_audit_run *run, const char *id) {
    const ls_audit_rule *r = ls_audit_find_rule(run, id);
    cr_assert_not_null(r, "no rule %s", id);
    return r;
}

/* The rule fails with an evidence line containing text. */
static void expect_fail(const ls_audit_run *run, const char *id, const char *text) {
    const ls_audit_rule *r = rule(run, id);
    cr_expect(r->applicable && !r->pass, "rule %s passes (%s); expected it to fail", id, r->message);
    for (size_t i = 0; i < r->n_ev; i++)
        if (strstr(r->ev[i].detail, text)) return;
    cr_expect_fail("rule %s: no evidence containing '%s'; first: %s", id, text, r->n_ev ? r->ev[0].detail : "(none)");
}

static void expect_pass(const ls_audit_run *run, const char *id) {
    const ls_audit_rule *r = rule(run, id);
    cr_expect(r->applicable && r->pass, "rule %s: %s", id, r->message);
}

/* ---- the loader ------------------------------------------------------------ */

Test(profile, shipped_profiles_load_and_their_digest_is_the_files) {
    static ls_audit_profile p;
    char err[512], hex[65];
    const char *names[] = {"hybrid", "mla"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ls_audit_profile_load(PROFILES, names[i], &p, err, sizeof err), LS_OK, "%s", err);
        char path[512];
        snprintf(path, sizeof path, PROFILES "/%s.json", names[i]);
        cr_assert_eq(ls_digest_sha256_file_hex(path, hex, err, sizeof err), LS_OK, "%s", err);
        cr_expect_str_eq(ls_audit_profile_sha256(&p), hex);
        cr_expect_str_eq(p.name, names[i]);
        cr_expect_eq(ls_audit_profile_n_steps(&p), 7);
        cr_expect_str_eq(ls_audit_profile_step_at(&p, 4)->phase, "prompt_bwd");
        cr_expect_eq(ls_audit_profile_decisions(&p), i == 1, "only the mla forward decides");
        cr_expect(!p.probe_required, "longstraw-train's probe is asked for by the CI gate (--require-probe)");
        const ls_audit_profile_rule *fin = ls_audit_profile_rule_of(&p, LS_AUDIT_PROFILE_FINALIZE);
        cr_assert_not_null(fin);
        cr_expect_eq(fin->n_steps, i == 1 ? 4 : 2, "mla: under EP also ep_grad_gather, ep_param_gather");
        if (i == 1) { /* under EP every MoE layer backward's moe_dx over the ep group (collectives.dkv) */
            const ls_audit_profile_rule *dkv = ls_audit_profile_rule_of(&p, LS_AUDIT_PROFILE_DKV);
            cr_assert_not_null(dkv);
            const ls_audit_profile_layer_req *q = &dkv->layers[dkv->n_layers - 1];
            cr_expect_str_eq(q->purposes[0], "moe_dx");
            cr_expect_eq(q->group_kind, LS_AUDIT_GROUP_EP);
            cr_expect_eq(q->when, (unsigned)LS_AUDIT_WHEN_EP);
            cr_expect_str_eq(q->layers_from, "first_dense");
            cr_expect(dkv->layers[0].when & LS_AUDIT_WHEN_CP, "the cp requirements hold only under CP");
        }
        cr_expect_str_eq(ls_audit_profile_control_at(&p, ls_audit_profile_n_controls(&p) - 1)->name, "detached");
    }
    /* the default directory is the source tree's */
    cr_expect_eq(ls_audit_profile_load(NULL, "hybrid", &p, err, sizeof err), LS_OK, "%s", err);
    /* torch-cp's profile requires the probe of every full-mode run (le.gradient_probe) */
    cr_assert_eq(ls_audit_profile_load(PROFILES, "torch-cp", &p, err, sizeof err), LS_OK, "%s", err);
    cr_expect(p.probe_required);
}

/* longstraw-train's faults and the levels they touch: the profiles hold
 * them (the reports and run.faults read the run's profile, no C table). */
Test(profile, the_profiles_hold_longstraw_trains_faults) {
    static ls_audit_profile p;
    char err[512];
    static const struct { const char *name; int level; } known[] = {
        {"untracked-alloc", 1}, {"kill-rank", 1}, {"cp-local-attention", 2}, {"cp-local-dsa", 2},
        {"skip-dkv-reduce", 3}, {"skip-grad-finalize", 3}, {"nan-grad", 3}, {"cp-stale-start", 3}};
    const char *names[] = {"hybrid", "mla"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ls_audit_profile_load(PROFILES, names[i], &p, err, sizeof err), LS_OK, "%s", err);
        cr_expect_eq(p.n_faults, sizeof known / sizeof known[0]);
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
            const char *w = NULL;
            cr_expect_eq(ls_audit_profile_fault_level(&p, known[k].name, &w), known[k].level, "%s: %s",
                         names[i], known[k].name);
            cr_expect(w != NULL && w[0] != 0, "%s: %s says nothing of what it touches", names[i], known[k].name);
        }
    }
}

/* A profile file in tmpdir/bad/NAME.json with text; loaded, its status. */
static ls_status load_text(const char *name, const char *text, char *err, size_t errlen) {
    static ls_audit_profile p;
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    write_file(path, text);
    return ls_audit_profile_load(dir, name, &p, err, errlen);
}

/* hybrid.json edited by fn, as text. */
static char *hybrid_edited(void (*fn)(cJSON *)) {
    cJSON *d = read_json(PROFILES "/hybrid.json");
    fn(d);
    char *t = cJSON_Print(d);
    cJSON_Delete(d);
    return t;
}

static void undeclared_phase(cJSON *d) {
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "steps"), 3), "phase",
                              cJSON_CreateString("warmup"));
}
static void no_decisions(cJSON *d) { cJSON_DeleteItemFromObject(d, "decisions"); }
static void undeclared_kind(cJSON *d) {
    cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "collectives"), "collectives.composition");
    cJSON *k = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 0), "layer_kinds");
    cJSON_AddItemToArray(k, cJSON_CreateString("mla"));
}
static void ran_on_member(cJSON *d) {
    cJSON_AddItemToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "steps"), 3), "when",
                          cJSON_CreateStringArray((const char *[]){"ran"}, 1));
}
static void none_without_layers(cJSON *d) {
    cJSON_AddItemToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "steps"), 5), "dirs",
                          cJSON_CreateStringArray((const char *[]){"fwd"}, 1));
}
/* The step grammar (sequence): item k of hybrid.json's. */
static cJSON *seq_item(cJSON *d, int k) { return cJSON_GetArrayItem(cJSON_GetObjectItem(d, "sequence"), k); }
static int seq_index(cJSON *d, const char *phase) { /* the first item of phase */
    int k = 0;
    for (cJSON *it = cJSON_GetObjectItem(d, "sequence")->child; it; it = it->next, k++)
        if (strcmp(cJSON_GetObjectItem(it, "phase")->valuestring, phase) == 0) return k;
    return -1;
}
static void seq_without_finalize(cJSON *d) {
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(d, "sequence"), seq_index(d, "finalize"));
}
static void seq_undeclared(cJSON *d) {
    cJSON_ReplaceItemInObject(seq_item(d, seq_index(d, "finalize")), "phase", cJSON_CreateString("warmup"));
}
static void seq_two_blocks(cJSON *d) { /* finalize outside the block, the probe in it again */
    cJSON_AddStringToObject(seq_item(d, seq_index(d, "probe")), "repeat", "prompt_groups");
}
static void seq_unknown_decision(cJSON *d) {
    cJSON_ReplaceItemInObject(seq_item(d, 0), "when",
                              cJSON_CreateStringArray((const char *[]){"longstraw", "colour=red"}, 2));
}
static void seq_unknown_value(cJSON *d) {
    cJSON_ReplaceItemInObject(seq_item(d, 0), "when",
                              cJSON_CreateStringArray((const char *[]){"reference=before|red"}, 1));
}
static void passes_on_none(cJSON *d) {
    cJSON_AddStringToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "steps"), 5), "passes", "segments");
}
static void bad_fault_name(cJSON *d) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "level", 2);
    cJSON_AddStringToObject(f, "what", "x");
    cJSON_AddItemToObject(cJSON_GetObjectItem(d, "faults"), "Bad Fault", f);
}

Test(profile, the_loader_refuses_what_is_not_a_profile_naming_file_and_field, .init = setup, .fini = teardown) {
    static ls_audit_profile p;
    char err[512];
    /* missing */
    cr_expect_eq(ls_audit_profile_load(PROFILES, "nope", &p, err, sizeof err), LS_ERR_IO);
    cr_expect(strstr(err, "nope.json") != NULL, "%s", err);
    /* not a profile name: nothing outside the directory is opened */
    cr_expect_eq(ls_audit_profile_load(PROFILES, "../profiles/hybrid", &p, err, sizeof err), LS_ERR_ARG);
    cr_expect_eq(ls_audit_profile_load(PROFILES, "Hybrid", &p, err, sizeof err), LS_ERR_ARG);
    /* bad JSON, a repeated key */
    cr_expect_eq(load_text("broken", "{\"schema\": ", err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "broken.json") != NULL, "%s", err);
    cr_expect_eq(load_text("twice", "{\"name\":\"twice\",\"name\":\"twice\"}", err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "twice.json") != NULL, "%s", err);
    /* schema violation */
    char *t = hybrid_edited(no_decisions);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_SCHEMA);
    cr_expect(strstr(err, "hybrid.json") && strstr(err, "decisions"), "%s", err);
    free(t);
    /* a step's phase the profile does not declare */
    t = hybrid_edited(undeclared_phase);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "hybrid.json") && strstr(err, "/steps/3/phase") && strstr(err, "warmup"), "%s", err);
    free(t);
    /* a requirement's layer kind it does not declare */
    t = hybrid_edited(undeclared_kind);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/collectives/collectives.composition/layers/0/layer_kinds/1") && strstr(err, "mla"), "%s",
              err);
    free(t);
    /* ran only on a step without layer events; unit none has no dirs */
    t = hybrid_edited(ran_on_member);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/steps/3/when") != NULL, "%s", err);
    free(t);
    t = hybrid_edited(none_without_layers);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/steps/5") && strstr(err, "dirs"), "%s", err);
    free(t);
    t = hybrid_edited(bad_fault_name);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/faults/Bad Fault") != NULL, "%s", err);
    free(t);
    /* the step grammar: every plan phase in it, its phases declared, one repeated block, the run's path's
       decisions and values (receipts/format/coverage.h), passes only where a phase has layer events */
    static const struct {
        void (*fn)(cJSON *);
        const char *field, *what;
    } seqs[] = {{seq_without_finalize, "/steps/5/phase", "finalize\" never occurs in /sequence"},
                {seq_undeclared, "/sequence/13/phase", "warmup"},
                {seq_two_blocks, "/sequence/14/repeat", "one contiguous block"},
                {seq_unknown_decision, "/sequence/0/when/1", "colour=red"},
                {seq_unknown_value, "/sequence/0/when/0", "\"red\" is not a value of the decision reference"},
                {passes_on_none, "/steps/5/passes", "unit none"}};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        t = hybrid_edited(seqs[i].fn);
        cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT, "%s", seqs[i].field);
        cr_expect(strstr(err, "hybrid.json") && strstr(err, seqs[i].field) && strstr(err, seqs[i].what), "%s: %s",
                  seqs[i].field, err);
        free(t);
    }
    /* the file says another name */
    cJSON *d = read_json(PROFILES "/mla.json");
    t = cJSON_Print(d);
    cJSON_Delete(d);
    cr_expect_eq(load_text("hybrid", t, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "/name") && strstr(err, "mla"), "%s", err);
    free(t);
    /* oversize: refused from its size */
    size_t big = LS_AUDIT_PROFILE_MAX_BYTES + 1;
    char *huge = malloc(big + 1);
    cr_assert_not_null(huge);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    huge[big] = 0;
    cr_expect_eq(load_text("huge", huge, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "huge.json") != NULL, "%s", err);
    free(huge);
    /* a link is never followed */
    char link[400];
    snprintf(link, sizeof link, "%s/bad/linked.json", tmpdir);
    cr_assert_eq(symlink(PROFILES "/hybrid.json", link), 0);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad", tmpdir);
    cr_expect_eq(ls_audit_profile_load(bad, "linked", &p, err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "linked.json") != NULL, "%s", err);
}

/* ---- the rules read the profile -------------------------------------------- */

/* A copy of the shipped profiles with hybrid.json edited by fn; its dir. */
static const char *edited_profiles(const char *tag, void (*fn)(cJSON *), char *dir, size_t cap) {
    profile_copy(tag, dir, cap);
    char path[600];
    snprintf(path, sizeof path, "%s/hybrid.json", dir);
    cJSON *d = read_json(path);
    fn(d);
    write_json(path, d);
    cJSON_Delete(d);
    return dir;
}

static cJSON *composition_req(cJSON *d) {
    cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "collectives"), "collectives.composition");
    return cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 0);
}
static void extra_purpose(cJSON *d) {
    cJSON_AddItemToArray(cJSON_GetObjectItem(composition_req(d), "purposes"), cJSON_CreateString("lse_extra"));
}
static void tp_group(cJSON *d) {
    cJSON_ReplaceItemInObject(composition_req(d), "group_kind", cJSON_CreateString("tp"));
}
static void extra_phase(cJSON *d) {
    cJSON_AddItemToArray(cJSON_GetObjectItem(d, "phases"), cJSON_CreateString("warmup"));
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "phase", "warmup");
    cJSON_AddStringToObject(s, "unit", "none");
    cJSON_AddItemToArray(cJSON_GetObjectItem(d, "steps"), s); /* (Debian's cJSON 1.7.15 inserts nothing) */
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "phase", "warmup");
    cJSON_AddItemToArray(cJSON_GetObjectItem(d, "sequence"), q);
}
static void rollout_first(cJSON *d) { /* the grammar's rollout moved before the policy's capture (item 2) */
    cJSON *seq = cJSON_GetObjectItem(d, "sequence"), *all = cJSON_CreateArray();
    cJSON *ro = cJSON_DetachItemFromArray(seq, seq_index(d, "rollout"));
    while (cJSON_GetArraySize(seq) > 0) cJSON_AddItemToArray(all, cJSON_DetachItemFromArray(seq, 0));
    for (int k = 0; cJSON_GetArraySize(all) > 0; k++) { /* (Debian's cJSON 1.7.15 inserts nothing: re-added in order) */
        if (k == 2) cJSON_AddItemToArray(seq, ro);
        cJSON_AddItemToArray(seq, cJSON_DetachItemFromArray(all, 0));
    }
    cJSON_Delete(all);
}
static void score_backward(cJSON *d) {
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "steps"), 2), "dirs",
                              cJSON_CreateStringArray((const char *[]){"fwd", "bwd"}, 2));
}
static void nan_level_2(cJSON *d) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "faults"), "nan-grad"), "level",
                              cJSON_CreateNumber(2));
}
static void nan_int(cJSON *d) { /* a fault given by its level alone */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(d, "faults"), "nan-grad", cJSON_CreateNumber(2));
}
static void controls_changed(cJSON *d) {
    cJSON *c = cJSON_GetObjectItem(d, "controls");
    cJSON_ReplaceItemInObject(c, "skip-dkv-reduce", cJSON_CreateString("grad"));
    cJSON_AddStringToObject(c, "zero-state", "logprob");
}
static void decides(cJSON *d) { cJSON_ReplaceItemInObject(d, "decisions", cJSON_CreateTrue()); }
static void probe_required(cJSON *d) { cJSON_AddStringToObject(d, "probe", "required"); }
static void no_finalize(cJSON *d) {
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(d, "collectives"), "collectives.finalize");
}

Test(profile, a_correct_run_holds_under_the_shipped_profile) {
    ls_audit_run *r = audit_golden("h2-full", NULL, NULL);
    expect_pass(r, "collectives.composition");
    expect_pass(r, "collectives.dkv");
    expect_pass(r, "collectives.finalize");
    expect_pass(r, "rank.phases");
    expect_pass(r, "rank.layers");
    cr_expect_eq(r->level, 1);
    expect_pass(r, "profile.match"); /* the run pins the shipped revision of its family's profile */
    cr_expect_str_eq(r->profile_used, "hybrid");
    ls_audit_free(r);
}

Test(profile, one_more_required_purpose_fails_composition_naming_it, .init = setup, .fini = teardown) {
    char dir[300];
    ls_audit_run *r = audit_golden("h2-full", edited_profiles("purpose", extra_purpose, dir, sizeof dir), NULL);
    expect_fail(r, "collectives.composition", "0 lse_extra collective(s)");
    expect_pass(r, "collectives.dkv");
    /* and the run was not written for that revision: profile.match (level 1) says so */
    expect_fail(r, "profile.match", "another revision of the profile");
    cr_expect_eq(r->level, 0);
    ls_audit_free(r);
}

Test(profile, the_group_kind_is_the_profiles, .init = setup, .fini = teardown) {
    char dir[300];
    ls_audit_run *r = audit_golden("h2-full", edited_profiles("tp", tp_group, dir, sizeof dir), NULL);
    expect_fail(r, "collectives.composition", "lse_max collective in group cp (kind cp), the profile requires a tp group");
    ls_audit_free(r);
}

Test(profile, the_step_plan_is_the_profiles, .init = setup, .fini = teardown) {
    char dir[300];
    ls_audit_run *r = audit_golden("h1-full", edited_profiles("phase", extra_phase, dir, sizeof dir), NULL);
    expect_fail(r, "rank.phases", "step 0: phase warmup never ended ok");
    cr_expect_eq(r->level, 0);
    ls_audit_free(r);
    r = audit_golden("h1-full", edited_profiles("dirs", score_backward, dir, sizeof dir), NULL);
    expect_fail(r, "rank.layers", "step 0 score: no bwd layer_end for member 0, layer -1");
    ls_audit_free(r);
}

Test(profile, the_step_grammar_is_the_profiles, .init = setup, .fini = teardown) {
    static const char *const golden[] = {"h1-full", "h1-det-sft", "h1-naive", "h1-frozen", "h1-nan", "h1-rollouts",
                                         "h2-full", "h2-kill", "h2-probed", "m1-full", "m2-full", "m2-det-sft"};
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) { /* every kind of step holds under the shipped one */
        ls_audit_run *r = audit_golden(golden[i], NULL, NULL);
        expect_pass(r, "steps.sequence");
        ls_audit_free(r);
    }
    char dir[300];
    ls_audit_run *r = audit_golden("h1-full", edited_profiles("order", rollout_first, dir, sizeof dir), NULL);
    expect_fail(r, "steps.sequence", "step 0: phase capture (seq 0) before rollout");
    cr_expect_eq(r->level, 0);
    ls_audit_free(r);
    r = audit_golden("h1-full", edited_profiles("warmup", extra_phase, dir, sizeof dir), NULL);
    expect_fail(r, "steps.sequence", "step 0: ended without warmup after optimizer");
    ls_audit_free(r);
}

Test(profile, fault_levels_controls_decisions_are_the_profiles, .init = setup, .fini = teardown) {
    char dir[300];
    ls_audit_run *r = audit_golden("h1-nan", edited_profiles("fault", nan_level_2, dir, sizeof dir), NULL);
    const ls_audit_rule *f = rule(r, "run.faults");
    cr_expect_eq(f->level, 2, "the profile puts nan-grad at level 2");
    expect_fail(r, "run.faults", "not certified at level 2 or above");
    ls_audit_free(r);
    r = audit_golden("h1-nan", edited_profiles("fault-int", nan_int, dir, sizeof dir), NULL);
    cr_expect_eq(rule(r, "run.faults")->level, 2);
    expect_fail(r, "run.faults", "fault nan-grad recorded (config \"faults\"): a fault of profile hybrid, at level 2");
    ls_audit_free(r);
    /* the covered run proves level 4 with the shipped profile, not with changed controls */
    r = audit_golden("h2-f64-covered", NULL, GOLDEN "/parity/hybrid.json");
    cr_expect_eq(r->level, 4);
    ls_audit_free(r);
    r = audit_golden("h2-f64-covered", edited_profiles("controls", controls_changed, dir, sizeof dir),
                     GOLDEN "/parity/hybrid.json");
    expect_fail(r, "parity.controls", "control skip-dkv-reduce breaks cp_grad, profile hybrid says it must fail grad");
    expect_fail(r, "parity.controls", "the parity report has no zero-state control");
    cr_expect_eq(r->level, 0, "another revision of the profile than the run's: profile.match");
    ls_audit_free(r);
    r = audit_golden("h2-f64-covered", edited_profiles("decides", decides, dir, sizeof dir),
                     GOLDEN "/parity/hybrid.json");
    expect_fail(r, "parity.decisions", "no passing decisions check");
    ls_audit_free(r);
    /* a profile that requires the probe: a full-mode run that probed no step fails run.probe */
    r = audit_golden("h2-full", edited_profiles("probe", probe_required, dir, sizeof dir), NULL);
    expect_fail(r, "run.probe", "its profile requires the probe: the run probed no step");
    ls_audit_free(r);
    r = audit_golden("h2-full", NULL, NULL);
    const ls_audit_rule *pr = ls_audit_find_rule(r, "run.probe");
    cr_expect(pr == NULL || !pr->applicable, "the shipped hybrid profile leaves the probe optional");
    ls_audit_free(r);
    r = audit_golden("h2-full", edited_profiles("nofin", no_finalize, dir, sizeof dir), NULL);
    const ls_audit_rule *fin = rule(r, "collectives.finalize");
    cr_expect(!fin->applicable, "a rule the profile leaves out does not apply");
    cr_expect(strstr(fin->message, "profile hybrid requires none") != NULL, "%s", fin->message);
    ls_audit_free(r);
}

/* mla's own requirement: the global DSA top-k before the composition (the
 * cp-local-dsa run gathers none: only that is missing). */
Test(profile, an_mla_layer_needs_the_global_dsa_selection) {
    ls_audit_run *r = audit_golden("m2-local-dsa", NULL, NULL);
    cr_expect_str_eq(r->profile_used, "mla");
    expect_fail(r, "collectives.composition", "dsa_topk_gather collective(s)");
    const ls_audit_rule *c = rule(r, "collectives.composition");
    for (size_t i = 0; i < c->n_ev; i++)
        cr_expect(strstr(c->ev[i].detail, "lse_max") == NULL, "only the DSA gather is missing: %s", c->ev[i].detail);
    ls_audit_free(r);
    r = audit_golden("m2-full", NULL, NULL);
    expect_pass(r, "collectives.composition");
    ls_audit_free(r);
}

Test(profile, a_v1_run_whose_family_has_no_profile_cannot_be_scored, .init = setup, .fini = teardown) {
    char dir[300], cmd[1200];
    profile_copy("nomla", dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "rm '%s/mla.json'", dir);
    cr_assert_eq(system(cmd), 0);
    ls_audit_options opt = {.run_dir = GOLDEN "/runs/m1-full", .profiles_dir = dir};
    ls_audit_run *r = NULL;
    char err[512];
    cr_assert_eq(ls_audit_load(&opt, &r, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(ls_audit_evaluate(r), LS_ERR_FORMAT);
    cr_expect(strstr(r->profile_err, "mla.json") != NULL, "%s", r->profile_err);
    ls_audit_free(r);
    snprintf(cmd, sizeof cmd, "%s %s/runs/m1-full --profiles '%s' >'%s/out' 2>'%s/err'", AUDIT, GOLDEN, dir, tmpdir,
             tmpdir);
    int rc = system(cmd);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "exit %d", rc);
    char path[400], line[600] = "";
    snprintf(path, sizeof path, "%s/err", tmpdir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_expect_not_null(fgets(line, sizeof line, f));
    fclose(f);
    cr_expect(strstr(line, "unusable input") && strstr(line, "no profile") && strstr(line, "mla.json"), "%s", line);
    /* the hybrid run audits with that directory */
    snprintf(cmd, sizeof cmd, "%s %s/runs/h1-full --profiles '%s' --quiet", AUDIT, GOLDEN, dir);
    cr_expect_eq(system(cmd), 0);
}

/* ---- profile.match ---------------------------------------------------------- */

/* The golden run's manifest and receipts made v2 sources naming profile
 * name at digest sha (rank 1's: name1), in the loaded model, which is then
 * scored again. */
static ls_audit_run *as_v2(const char *dir, const char *name, const char *sha, const char *name1) {
    ls_audit_options opt = {.run_dir = GOLDEN "/runs/h2-full", .profiles_dir = dir};
    ls_audit_run *r = NULL;
    char err[512];
    cr_assert_eq(ls_audit_load(&opt, &r, err, sizeof err), LS_OK, "%s", err);
    cJSON *docs[3] = {r->manifest->priv_doc, r->ranks[0].receipt->priv_doc, r->ranks[1].receipt->priv_doc};
    for (int i = 0; i < 3; i++) {
        cJSON_ReplaceItemInObject(docs[i], "predicateType",
                                  cJSON_CreateString(i == 0 ? "urn:longstraw:predicate:run-manifest:v2"
                                                            : "urn:longstraw:predicate:rank-receipt:v2"));
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", i == 2 ? name1 : name);
        cJSON_AddStringToObject(p, "sha256", sha);
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(docs[i], "predicate"), "profile"); /* v1's pin */
        cJSON_AddItemToObject(cJSON_GetObjectItem(docs[i], "predicate"), "profile", p);
    }
    /* the parsed v1 pin pointed into the items replaced: forget it (the rules read the documents) */
    r->profile_name = r->profile_sha256 = NULL;
    r->manifest->profile_name = r->manifest->profile_sha256 = NULL;
    for (int i = 0; i < 2; i++) r->ranks[i].receipt->profile_name = r->ranks[i].receipt->profile_sha256 = NULL;
    r->profile_state = 0; /* resolved again: now a v2 run */
    r->n_rules = 0;
    cr_assert_eq(ls_audit_evaluate(r), LS_OK, "%s", r->profile_err);
    return r;
}

Test(profile, profile_match_names_the_profile_and_both_digests, .init = setup, .fini = teardown) {
    static ls_audit_profile p;
    char err[512];
    cr_assert_eq(ls_audit_profile_load(PROFILES, "hybrid", &p, err, sizeof err), LS_OK, "%s", err);
    const char *sha = ls_audit_profile_sha256(&p);
    ls_audit_run *r = as_v2(NULL, "hybrid", sha, "hybrid");
    expect_pass(r, "profile.match");
    cr_expect(strstr(rule(r, "profile.match")->message, "profile hybrid") != NULL, "%s", rule(r, "profile.match")->message);
    cr_expect_eq(r->level, 1);
    ls_audit_free(r);
    /* another revision of the profile: both digests named */
    char dir[300];
    edited_profiles("rev", extra_purpose, dir, sizeof dir);
    r = as_v2(dir, "hybrid", sha, "hybrid");
    char path[400], now[65];
    snprintf(path, sizeof path, "%s/hybrid.json", dir);
    cr_assert_eq(ls_digest_sha256_file_hex(path, now, err, sizeof err), LS_OK);
    char want[300];
    snprintf(want, sizeof want, "written for sha256 %s", sha);
    expect_fail(r, "profile.match", want);
    expect_fail(r, "profile.match", now);
    cr_expect_eq(rule(r, "profile.match")->level, 1);
    cr_expect_eq(r->level, 0);
    ls_audit_free(r);
    /* the ranks name different profiles */
    r = as_v2(NULL, "hybrid", sha, "mla");
    expect_fail(r, "profile.match", "names profile mla, the run's is hybrid");
    ls_audit_free(r);
    /* a profile the audit does not ship */
    r = as_v2(NULL, "torch-none", sha, "torch-none");
    expect_fail(r, "profile.match", "torch-none.json");
    expect_fail(r, "rank.phases", "no profile");
    ls_audit_free(r);
}

/* ---- a v1 run pins its profile ----------------------------------------------- */

/* A copy of golden run src with edits (tests/audit/audit_invariants_edit.py; every digest recomputed) in
 * tmpdir/name; its path. */
static const char *golden_copy(const char *src, const char *name, const char *edits) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a " GOLDEN "/runs/%s '%s' && python3 " LS_SOURCE_DIR
             "/tests/audit/audit_invariants_edit.py '%s' %s >/dev/null", path, src, path, path, edits);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    return path;
}

static ls_audit_run *audit_dir(const char *path, const char *profiles) {
    ls_audit_options opt = {.run_dir = path, .profiles_dir = profiles};
    ls_audit_run *r = NULL;
    char err[512];
    cr_assert_eq(ls_audit_load(&opt, &r, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_audit_evaluate(r), LS_OK, "%s", r->profile_err);
    return r;
}

/* longstraw-train writes predicate.profile (its family's, the SHA-256 of the file its build read) into the
 * manifest and every receipt; the audit holds the run to it. */
Test(profile, a_v1_run_names_the_revision_it_was_written_for, .init = setup, .fini = teardown) {
    static ls_audit_profile p;
    char err[512];
    cr_assert_eq(ls_audit_profile_load(PROFILES, "hybrid", &p, err, sizeof err), LS_OK, "%s", err);
    ls_audit_run *r = audit_golden("h2-full", NULL, NULL);
    cr_assert_not_null(r->manifest->profile_name, "the golden run pins no profile: tests/data/profile_golden/"
                       "make_runs.sh makes runs that do");
    cr_expect_str_eq(r->manifest->profile_name, "hybrid");
    cr_expect_str_eq(r->manifest->profile_sha256, p.sha256);
    for (int i = 0; i < 2; i++) cr_expect_str_eq(r->ranks[i].receipt->profile_sha256, p.sha256);
    expect_pass(r, "profile.match");
    cr_expect(strstr(rule(r, "profile.match")->message, "profiles/hybrid.json") != NULL, "%s",
              rule(r, "profile.match")->message);
    ls_audit_free(r);
    /* an older run that pins none: profile.match fails at level 1, the report says it is not pinned */
    r = audit_dir(golden_copy("h2-full", "unpinned", "unpin"), NULL);
    expect_fail(r, "profile.match", "names no profile (predicate.profile): the profile it was written for is not "
                "pinned (a v1 run written before runs pinned their profile)");
    expect_pass(r, "manifest.digests");
    cr_expect_eq(r->level, 0);
    cJSON *doc = NULL;
    cr_assert_eq(ls_audit_report_json(r, &doc), LS_OK);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(doc, "profile")));
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "profile_used"), "pinned")));
    cJSON_Delete(doc);
    ls_audit_free(r);
}

/* A weakened profile (collectives.finalize left out: the finalize reductions no longer required) in
 * --profiles DIR: without the pin the run would hold level 1 under it; profile.match fails, naming the
 * revision the run was written for and the one read. */
Test(profile, a_weakened_profile_fails_profile_match, .init = setup, .fini = teardown) {
    static ls_audit_profile p;
    char err[512], dir[300], path[400], now[65];
    cr_assert_eq(ls_audit_profile_load(PROFILES, "hybrid", &p, err, sizeof err), LS_OK, "%s", err);
    edited_profiles("weak", no_finalize, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/hybrid.json", dir);
    cr_assert_eq(ls_digest_sha256_file_hex(path, now, err, sizeof err), LS_OK);
    /* the skipped finalize passes every finalize rule under the weakened profile (it requires none) */
    ls_audit_run *r = audit_golden("h2-skip-fin", dir, NULL);
    cr_expect(!rule(r, "collectives.finalize")->applicable, "the weakened profile requires no finalize");
    char want[700];
    snprintf(want, sizeof want, "written for sha256 %s, the audit's %s is %s", p.sha256, path, now);
    expect_fail(r, "profile.match", want);
    cr_expect_eq(rule(r, "profile.match")->level, 1);
    cr_expect_eq(r->level, 0);
    ls_audit_free(r);
    /* the CLI: exit 1 under --require-level 1, the report names both digests */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s %s/runs/h2-full --profiles '%s' --require-level 1 >'%s/out'", AUDIT, GOLDEN, dir,
             tmpdir);
    int rc = system(cmd);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "exit %d", rc);
    snprintf(cmd, sizeof cmd, "grep -q 'FAIL L1 profile.match' '%s/out' && grep -q '%s' '%s/out' && grep -q '%s' '%s/out'",
             tmpdir, p.sha256, tmpdir, now, tmpdir);
    cr_expect_eq(system(cmd), 0, "the text report names profile.match and both digests");
}

/* (every report) the profile the verdict was judged by: name, file, sha256, and whether the run pins it. */
Test(profile, every_report_names_the_profile_file_and_digest, .init = setup, .fini = teardown) {
    static ls_audit_profile p;
    char err[512];
    cr_assert_eq(ls_audit_profile_load(PROFILES, "hybrid", &p, err, sizeof err), LS_OK, "%s", err);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "%s %s/runs/h1-full --json '%s/r.json' --junit '%s/r.xml' --html '%s/r.html' "
             ">'%s/r.txt'", AUDIT, GOLDEN, tmpdir, tmpdir, tmpdir, tmpdir);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: %d", cmd, rc);
    char want[300];
    snprintf(want, sizeof want, "  profile hybrid (profiles/hybrid.json, sha256 %s): the run names this revision", p.sha256);
    snprintf(cmd, sizeof cmd, "grep -qF '%s' '%s/r.txt'", want, tmpdir);
    cr_expect_eq(system(cmd), 0, "text: %s", want);
    char path[400];
    snprintf(path, sizeof path, "%s/r.json", tmpdir);
    cJSON *doc = read_json(path);
    const cJSON *pu = cJSON_GetObjectItem(doc, "profile_used"), *pn = cJSON_GetObjectItem(doc, "profile");
    cr_expect_str_eq(cJSON_GetObjectItem(pu, "name")->valuestring, "hybrid");
    cr_expect_str_eq(cJSON_GetObjectItem(pu, "file")->valuestring, "profiles/hybrid.json");
    cr_expect_str_eq(cJSON_GetObjectItem(pu, "sha256")->valuestring, p.sha256);
    cr_expect_str_eq(cJSON_GetObjectItem(pu, "chosen_by")->valuestring, "family");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(pu, "pinned")));
    cr_expect_str_eq(cJSON_GetObjectItem(pn, "sha256")->valuestring, p.sha256);
    cJSON_Delete(doc);
    snprintf(cmd, sizeof cmd, "grep -qF '<property name=\"profile_file\" value=\"profiles/hybrid.json\"/>' '%s/r.xml' && "
             "grep -qF '<property name=\"profile_sha256\" value=\"%s\"/>' '%s/r.xml' && "
             "grep -qF '<property name=\"profile_pinned\" value=\"yes\"/>' '%s/r.xml'", tmpdir, p.sha256, tmpdir, tmpdir);
    cr_expect_eq(system(cmd), 0, "JUnit: the profile's file, digest and pin");
    snprintf(cmd, sizeof cmd, "grep -qF '<p class=\"profile\">Profile: <strong>hybrid</strong> (<code>profiles/hybrid.json"
             "</code>, sha256 <code>%s</code>); the run names this revision' '%s/r.html'", p.sha256, tmpdir);
    cr_expect_eq(system(cmd), 0, "HTML: the profile's file and digest");
    /* another directory: the file as given */
    char dir[300];
    profile_copy("other", dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s %s/runs/h1-full --profiles '%s' >'%s/o.txt'", AUDIT, GOLDEN, dir, tmpdir);
    rc = system(cmd);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "an unchanged copy of the profiles: the run's revision");
    snprintf(cmd, sizeof cmd, "grep -qF '  profile hybrid (%s/hybrid.json, sha256 %s)' '%s/o.txt'", dir, p.sha256, tmpdir);
    cr_expect_eq(system(cmd), 0, "text: the file as --profiles gave it");
}
