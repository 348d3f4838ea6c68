/* test_audit_support.c - the runs audited and the rule look-ups of
 * test_audit_support.h. */
#include "tests/audit/test_audit_support.h"

#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

ls_audit_run *ls_test_audit_load(const char *run_dir, const char *profiles_dir) {
    ls_audit_options opt = {.run_dir = run_dir, .profiles_dir = profiles_dir};
    ls_audit_run *run = NULL;
    char err[400] = "";
    cr_assert_eq(ls_audit_load(&opt, &run, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_audit_evaluate(run), LS_OK);
    return run;
}

ls_audit_run *ls_test_audit_fixture(const char *run_dir, const ls_v2_fixture *o, const char *profiles_dir) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir); /* a fresh run: the fixture writes a new directory */
    cr_assert_eq(system(cmd), 0);
    ls_v2_fixture_write(run_dir, o);
    return ls_test_audit_load(run_dir, profiles_dir);
}

void ls_test_audit_dump(const ls_audit_run *run) {
    for (size_t i = 0; i < run->n_rules; i++) {
        const ls_audit_rule *r = &run->rules[i];
        fprintf(stderr, "  L%d %-28s %s %s | %s\n", r->level, r->id, r->applicable ? "" : "n/a",
                r->pass ? "pass" : "FAIL", r->message);
        for (size_t k = 0; !r->pass && k < r->n_ev; k++)
            fprintf(stderr, "      rank %lld %s seq %lld: %s\n", (long long)r->ev[k].rank, r->ev[k].file,
                    (long long)r->ev[k].seq, r->ev[k].detail);
    }
}

const ls_audit_rule *ls_test_audit_rule(const ls_audit_run *run, const char *id) {
    const ls_audit_rule *r = ls_audit_find_rule(run, id);
    if (r == NULL) ls_test_audit_dump(run);
    cr_assert_not_null(r, "rule %s missing", id);
    return r;
}

void ls_test_audit_expect_pass(const ls_audit_run *run, const char *id) {
    const ls_audit_rule *r = ls_test_audit_rule(run, id);
    if (!r->pass || !r->applicable) ls_test_audit_dump(run);
    cr_expect(r->applicable && r->pass, "%s: %s", id, r->message);
}

void ls_test_audit_expect_fail_saying(const ls_audit_run *run, const char *id, const char *want) {
    const ls_audit_rule *r = ls_test_audit_rule(run, id);
    bool named = strstr(r->message, want) != NULL;
    for (size_t i = 0; i < r->n_ev && !named; i++) named = strstr(r->ev[i].detail, want) != NULL;
    if (r->pass || !named) ls_test_audit_dump(run);
    cr_expect(r->applicable && !r->pass, "%s passes: %s", id, r->message);
    cr_expect(named, "%s does not say \"%s\": %s", id, want, r->message);
}
