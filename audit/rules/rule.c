/* rule.c - a rule's machinery (audit.h): added, failed with evidence
 * (bounded: the first LS_AUDIT_MAX_EVIDENCE items, the rest counted),
 * closed (an applicable rule that matched nothing fails), found by id; and
 * the phase names every rule module uses. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/trace_event.h"

ls_audit_rule *ls_audit_rule_add(ls_audit_run *run, const char *id, int level, const char *title,
                                 bool applicable) {
    if (run->n_rules == run->rules_cap) {
        size_t ncap = run->rules_cap ? run->rules_cap * 2 : 32;
        ls_audit_rule *n = realloc(run->rules, ncap * sizeof *n);
        if (n == NULL) return NULL;
        run->rules = n;
        run->rules_cap = ncap;
    }
    ls_audit_rule *r = &run->rules[run->n_rules++];
    memset(r, 0, sizeof *r);
    r->id = id;
    r->level = level;
    r->title = title;
    r->applicable = applicable;
    r->pass = true;
    if (ls_audit_rule_id_level(id) == 0)
        ls_audit_rule_fail(r, -1, ".", -1, "rule id '%s' is not in the audit's rule list (audit/rules/rule_ids.c)",
                           id ? id : "(null)");
    return r;
}

void ls_audit_rule_fail(ls_audit_rule *r, int64_t rank, const char *file, int64_t seq, const char *fmt, ...) {
    r->pass = false;
    if (r->n_ev >= LS_AUDIT_MAX_EVIDENCE) {
        r->n_ev_dropped++;
        return;
    }
    ls_audit_evidence *e = &r->ev[r->n_ev++];
    e->rank = rank;
    e->seq = seq;
    snprintf(e->file, sizeof e->file, "%s", file ? file : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
}

void ls_audit_rule_close(ls_audit_rule *r) {
    if (!r->applicable) {
        r->pass = true;
        if (!r->message[0]) snprintf(r->message, sizeof r->message, "not applicable to this run");
        return;
    }
    if (r->n_ev > 0) r->pass = false;
    if (r->pass && r->matched == 0) {
        r->pass = false;
        if (!r->message[0]) snprintf(r->message, sizeof r->message, "matched zero events (nothing passes vacuously)");
        if (r->n_ev == 0) {
            ls_audit_evidence *e = &r->ev[r->n_ev++];
            memset(e, 0, sizeof *e);
            e->rank = -1;
            e->seq = -1;
            snprintf(e->file, sizeof e->file, ".");
            snprintf(e->detail, sizeof e->detail, "no event or file this rule examines was found");
        }
        return;
    }
    if (!r->message[0]) {
        if (r->pass)
            snprintf(r->message, sizeof r->message, "%llu checked", (unsigned long long)r->matched);
        else
            snprintf(r->message, sizeof r->message, "%llu failure(s) of %llu checked: %s",
                     (unsigned long long)(r->n_ev + r->n_ev_dropped), (unsigned long long)r->matched,
                     r->ev[0].detail);
    }
}

const ls_audit_rule *ls_audit_find_rule(const ls_audit_run *run, const char *id) {
    for (size_t i = 0; i < run->n_rules; i++)
        if (strcmp(run->rules[i].id, id) == 0) return &run->rules[i];
    return NULL;
}

