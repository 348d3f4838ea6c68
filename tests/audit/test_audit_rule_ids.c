/* test_audit_rule_ids.c - the audit's one list of rule ids (audit/rules/rule_ids.c):
 * ids unique, levels 1..4, and a rule added under an id the list lacks
 * fails, naming the id (the injected fault), where a listed one passes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "audit/model/audit.h"
#include "audit/rules/rules.h"

Test(rule_ids, unique_with_levels_1_to_4) {
    size_t n = ls_audit_rule_id_count();
    cr_assert_gt(n, 30);
    for (size_t i = 0; i < n; i++) {
        int level = 0;
        const char *id = ls_audit_rule_id_at(i, &level);
        cr_assert(id != NULL);
        cr_assert(level >= 1 && level <= 4, "%s: level %d", id, level);
        cr_assert_eq(ls_audit_rule_id_level(id), level, "%s", id);
        for (size_t j = 0; j < i; j++) cr_assert_str_neq(ls_audit_rule_id_at(j, NULL), id, "%s listed twice", id);
    }
    cr_assert_null(ls_audit_rule_id_at(n, NULL));
    cr_assert_eq(ls_audit_rule_id_level("no.such_rule"), 0);
    cr_assert_eq(ls_audit_rule_id_level(NULL), 0);
}

Test(rule_ids, an_unlisted_id_fails_its_rule) {
    ls_audit_run run;
    memset(&run, 0, sizeof run);
    ls_audit_rule *ok = ls_audit_rule_add(&run, "trace.valid", 1, "listed", true);
    cr_assert_not_null(ok);
    ok->matched = 1;
    ls_audit_rule_close(ok);
    cr_assert(ok->pass, "a listed id passes: %s", ok->message);
    ls_audit_rule *bad = ls_audit_rule_add(&run, "trace.vaild", 1, "a misspelt id", true);
    cr_assert_not_null(bad);
    bad->matched = 1;
    ls_audit_rule_close(bad);
    cr_assert_not(bad->pass);
    cr_assert_eq(bad->n_ev, 1);
    cr_assert(strstr(bad->ev[0].detail, "'trace.vaild' is not in the audit's rule list") != NULL, "%s",
              bad->ev[0].detail);
    free(run.rules);
}
