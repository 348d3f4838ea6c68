/* report_junit.c - JUnit XML for CI systems: one testsuite per level, one
 * testcase per rule; a failed rule is a <failure> holding its evidence, a
 * rule that does not apply is <skipped>. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "audit/report/basis.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/atomic_file.h"

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > ncap) ncap *= 2;
        char *nb = realloc(b->buf, ncap);
        if (nb == NULL) {
            b->oom = true;
            return;
        }
        b->buf = nb;
        b->cap = ncap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* XML text/attribute escaping; control characters become spaces. */
static void esc(sbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') puts_(b, "&amp;");
        else if (c == '<') puts_(b, "&lt;");
        else if (c == '>') puts_(b, "&gt;");
        else if (c == '"') puts_(b, "&quot;");
        else if (c < 0x20 && c != '\n' && c != '\t') puts_(b, " ");
        else put(b, (const char *)&c, 1);
    }
}

static void prop(sbuf *b, const char *name, const char *value) {
    puts_(b, "      <property name=\"");
    esc(b, name);
    puts_(b, "\" value=\"");
    esc(b, value);
    puts_(b, "\"/>\n");
}

ls_status ls_audit_report_junit(const ls_audit_run *run, const char *path, char *err, size_t errlen) {
    sbuf b = {0};
    char line[1024];
    size_t failures = 0, skipped = 0;
    for (size_t i = 0; i < run->n_rules; i++) {
        if (!run->rules[i].applicable) skipped++;
        else if (!run->rules[i].pass) failures++;
    }
    puts_(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    snprintf(line, sizeof line, "<testsuites name=\"longstraw-audit\" tests=\"%zu\" failures=\"%zu\" skipped=\"%zu\">\n",
             run->n_rules, failures, skipped);
    puts_(&b, line);
    for (int l = 1; l <= 4; l++) {
        size_t n = 0, nf = 0, ns = 0;
        for (size_t i = 0; i < run->n_rules; i++) {
            if (run->rules[i].level != l) continue;
            n++;
            if (!run->rules[i].applicable) ns++;
            else if (!run->rules[i].pass) nf++;
        }
        snprintf(line, sizeof line,
                 "  <testsuite name=\"level-%d\" tests=\"%zu\" failures=\"%zu\" skipped=\"%zu\" errors=\"0\">\n", l, n,
                 nf, ns);
        puts_(&b, line);
        /* what the verdict stands on: the assurance with its key ids, the exact steps, the faults */
        puts_(&b, "    <properties>\n");
        prop(&b, "assurance", ls_audit_assurance_name(ls_audit_assurance_of(run)));
        prop(&b, "run_keyid", run->dsse_status == LS_OK ? run->dsse_keyid : "");
        prop(&b, "parity_keyid", run->parity != NULL && run->parity_dsse_status == LS_OK ? run->parity_keyid : "");
        snprintf(line, sizeof line, "%lld of %lld", (long long)(run->n_run_steps - run->first_step - run->steps_frozen),
                 (long long)(run->n_run_steps - run->first_step));
        prop(&b, "steps_exact", line);
        line[0] = 0;
        for (size_t i = 0; i < run->n_faults; i++)
            snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i ? "," : "", run->faults[i]);
        prop(&b, "faults", line);
        /* the profile the verdict was judged by (every run) */
        cJSON *pu = ls_audit_profile_used_json(run);
        const char *pn = pu ? ls_audit_get_str(pu, "name") : NULL, *pfile = pu ? ls_audit_get_str(pu, "file") : NULL;
        const char *psha = pu ? ls_audit_get_str(pu, "sha256") : NULL;
        prop(&b, "profile", pn ? pn : "");
        prop(&b, "profile_file", pfile ? pfile : "");
        prop(&b, "profile_sha256", psha ? psha : "");
        if (pu != NULL && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pu, "pinned")))
            snprintf(line, sizeof line, "yes");
        else if (run->profile_name != NULL)
            snprintf(line, sizeof line, "no: the run names %s sha256 %.64s", run->profile_name,
                     run->profile_sha256 ? run->profile_sha256 : "");
        else
            snprintf(line, sizeof line, "no: the run names no profile");
        prop(&b, "profile_pinned", line);
        cJSON_Delete(pu);
        /* what this level rests on and does not bind, when it holds (basis.c) */
        cJSON *bs = ls_audit_basis_json(run, l);
        char rests[1600], nb[1600];
        ls_audit_basis_text(bs, rests, sizeof rests, nb, sizeof nb);
        const char *sum = bs ? ls_audit_get_str(bs, "summary") : NULL;
        prop(&b, "rests_on", sum ? sum : "");
        prop(&b, "basis", rests);
        prop(&b, "not_bound", nb);
        cJSON_Delete(bs);
        puts_(&b, "    </properties>\n");
        for (size_t i = 0; i < run->n_rules; i++) {
            const ls_audit_rule *r = &run->rules[i];
            if (r->level != l) continue;
            puts_(&b, "    <testcase classname=\"longstraw-audit.level");
            snprintf(line, sizeof line, "%d\" name=\"", l);
            puts_(&b, line);
            esc(&b, r->id);
            puts_(&b, "\">");
            if (!r->applicable) {
                puts_(&b, "<skipped message=\"");
                esc(&b, r->message);
                puts_(&b, "\"/>");
            } else if (!r->pass) {
                puts_(&b, "<failure message=\"");
                esc(&b, r->message);
                puts_(&b, "\" type=\"rule\">");
                for (size_t k = 0; k < r->n_ev; k++) {
                    const ls_audit_evidence *e = &r->ev[k];
                    if (e->rank >= 0) {
                        snprintf(line, sizeof line, "rank %lld ", (long long)e->rank);
                        puts_(&b, line);
                    }
                    esc(&b, e->file);
                    if (e->seq >= 0) {
                        snprintf(line, sizeof line, " seq %lld", (long long)e->seq);
                        puts_(&b, line);
                    }
                    puts_(&b, ": ");
                    esc(&b, e->detail);
                    puts_(&b, "\n");
                }
                puts_(&b, "</failure>");
            }
            puts_(&b, "</testcase>\n");
        }
        puts_(&b, "  </testsuite>\n");
    }
    puts_(&b, "</testsuites>\n");
    ls_status st = LS_ERR_NOMEM;
    if (!b.oom) st = ls_atomic_write(path, b.buf, b.len, err, errlen);
    else snprintf(err, errlen, "%s: out of memory", path);
    free(b.buf);
    return st;
}
