/* audit_main.c - longstraw-audit: scores a run directory against the
 * evidence levels of docs/design.md §5 (exit 0 when it proves --require-level N,
 * 1 when it does not, 2 for unusable input or bad usage). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "audit/audit_names.h"
#include "receipts/json_util.h"
#include "receipts/schema.h"

#include "audit/diff.h"
#include "audit/html.h"
#include "audit/timeline.h"

static void usage(FILE *f) {
    fputs("usage: longstraw-audit RUN [--require-level N] [--json FILE] [--junit FILE] [--timeline FILE]\n"
          "                       [--html FILE] [--key PUB]... [--parity FILE] [--parity-key PUB]...\n"
          "                       [--require-signed] [--require-probe] [--profiles DIR] [--metrics FILE]\n"
          "                       [--quiet]\n"
          "       longstraw-audit diff RUN_A RUN_B [--json FILE] [--key PUB]... [--require-signed]\n"
          "Scores the run directory RUN against the evidence levels (docs/design.md section 5):\n"
          "  1 execution capacity, 2 response-operator fidelity, 3 distributed-update consistency,\n"
          "  4 full-gradient parity; a level holds only if the lower ones hold.  Levels 2-4 need a\n"
          "  parity report from the same build whose coverage holds the run (RUN/parity.json or\n"
          "  --parity FILE).  Every output states the assurance of the evidence too (docs/evidence.md):\n"
          "  unsigned, run-signed, or run-and-parity-signed.\n"
          "  --require-level N  exit 0 when the run proves level >= N (0..4; default 1), else 1\n"
          "  --json FILE        the audit report (schemas/audit-report.schema.json)\n"
          "  --junit FILE       JUnit XML, one testcase per rule\n"
          "  --timeline FILE    Chrome trace-event JSON (Perfetto, chrome://tracing)\n"
          "  --html FILE        one self-contained HTML report\n"
          "  --key PUB          a public key (Ed25519 PEM) trusted to sign runs: RUN/manifest.dsse.json\n"
          "                     must verify with one of them (repeatable)\n"
          "  --parity FILE      the parity report to use instead of RUN/parity.json\n"
          "  --parity-key PUB   a public key trusted to sign parity reports: the report's envelope\n"
          "                     (FILE.json -> FILE.dsse.json) must verify with one (repeatable)\n"
          "  --require-signed   an unsigned or unverified run or parity report proves nothing: exit 1\n"
          "  --require-probe    a run that probed no step (longstraw-train --probe-every K) fails\n"
          "                     level 4 (run.probe)\n"
          "  --profiles DIR     the profiles (what a run must show) to audit against [the source tree's\n"
          "                     profiles/]: a v1 run's is DIR/FAMILY.json, a v2 run's the one it names\n"
          "  --metrics FILE     the trainer's metrics lines (longstraw-train --metrics): each step's\n"
          "                     objective and figures must be rank 0's trace's (sources.agree)\n"
          "  --quiet            no summary on stdout\n"
          "  --list-names       print the audit's vocabulary as JSON (rule ids and levels, the trace's\n"
          "                     names, record sizes; tests/check_vocab.py) and exit\n"
          "  --help             this text\n"
          "Exit: 0 the run proves the required level, 1 it does not, 2 unusable input or bad usage.\n",
          f);
}

static int bad(const char *fmt, const char *arg) {
    fprintf(stderr, "longstraw-audit: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (--help for usage)\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "diff") == 0) {
        return ls_audit_diff_main(argc - 1, argv + 1);
    }
    const char *run_dir = NULL, *json = NULL, *junit = NULL, *timeline = NULL, *html = NULL, *parity = NULL;
    const char *profiles = NULL, *metrics = NULL;
    int require = 1, quiet = 0;
    ls_audit_options opt = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--list-names") == 0) {
            cJSON *names = ls_audit_names_json();
            char *txt = names ? cJSON_Print(names) : NULL;
            cJSON_Delete(names);
            if (!txt) {
                fprintf(stderr, "longstraw-audit: --list-names: out of memory\n");
                return 2;
            }
            printf("%s\n", txt);
            free(txt);
            return 0;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
            continue;
        } else if (strcmp(a, "--require-signed") == 0) {
            opt.require_signed = true;
            continue;
        } else if (strcmp(a, "--require-probe") == 0) {
            opt.require_probe = true;
            continue;
        } else if (strcmp(a, "--key") == 0 || strcmp(a, "--parity-key") == 0) {
            bool pk = a[2] == 'p';
            size_t *n = pk ? &opt.n_parity_keys : &opt.n_keys;
            if (i + 1 >= argc || argv[i + 1][0] == 0) return bad("%s needs a public key file", a);
            if (*n == LS_AUDIT_MAX_KEYS) return bad("%s: at most 16 keys", a);
            (pk ? opt.parity_keys : opt.keys)[(*n)++] = argv[++i];
            continue;
        } else if (strcmp(a, "--require-level") == 0) {
            if (i + 1 >= argc) return bad("%s needs a level 0..4", a);
            const char *v = argv[++i];
            if (strlen(v) != 1 || v[0] < '0' || v[0] > '4') return bad("--require-level: '%s' is not a level 0..4", v);
            require = v[0] - '0';
            continue;
        } else if (strcmp(a, "--json") == 0) slot = &json;
        else if (strcmp(a, "--junit") == 0) slot = &junit;
        else if (strcmp(a, "--timeline") == 0) slot = &timeline;
        else if (strcmp(a, "--html") == 0) slot = &html;
        else if (strcmp(a, "--parity") == 0) slot = &parity;
        else if (strcmp(a, "--profiles") == 0) slot = &profiles;
        else if (strcmp(a, "--metrics") == 0) slot = &metrics;
        else if (a[0] == '-' && a[1] != 0) return bad("unknown option '%s'", a);
        else if (run_dir == NULL) {
            run_dir = a;
            continue;
        } else return bad("one run directory only; extra argument '%s'", a);
        if (i + 1 >= argc || argv[i + 1][0] == 0) return bad(slot == &profiles ? "%s needs a directory" : "%s needs a file", a);
        if (*slot != NULL) return bad("%s given twice", a);
        *slot = argv[++i];
    }
    if (run_dir == NULL) return bad("%s", "no run directory given");
    char err[512] = "";
    opt.run_dir = run_dir;
    opt.parity_path = parity;
    opt.profiles_dir = profiles;
    opt.metrics_path = metrics;
    ls_audit_run *run = NULL;
    ls_status st = ls_audit_load(&opt, &run, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-audit: unusable input: %s\n", err);
        return 2;
    }
    int rc = 2;
    cJSON *doc = NULL;
    st = ls_audit_evaluate(run);
    if (st == LS_ERR_NOMEM) {
        fprintf(stderr, "longstraw-audit: %s: out of memory while evaluating\n", run_dir);
        goto cleanup;
    } else if (st != LS_OK) {
        fprintf(stderr, "longstraw-audit: unusable input: %s: no profile to audit it against: %s\n", run_dir,
                run->profile_err);
        goto cleanup;
    }
    if (!quiet) ls_audit_report_text(run, stdout);
    if (json || html) {
        if (ls_audit_report_json(run, &doc) != LS_OK) {
            fprintf(stderr, "longstraw-audit: out of memory building the report\n");
            goto cleanup;
        }
    }
    if (json && ls_json_write_file(json, doc, err, sizeof err) != LS_OK) {
        fprintf(stderr, "longstraw-audit: --json %s: %s\n", json, err);
        goto cleanup;
    }
    if (junit && ls_audit_report_junit(run, junit, err, sizeof err) != LS_OK) {
        fprintf(stderr, "longstraw-audit: --junit %s: %s\n", junit, err);
        goto cleanup;
    }
    if (timeline) {
        /* the verdict travels with the timeline: level, assurance, key ids, faults, exact steps */
        cJSON *v = cJSON_CreateObject();
        char *vt = NULL;
        if (v) {
            cJSON_AddNumberToObject(v, "level", run->level);
            cJSON_AddItemToObject(v, "assurance", ls_audit_assurance_json(run));
            cJSON_AddNumberToObject(v, "steps", (double)(run->n_run_steps - run->first_step));
            cJSON_AddNumberToObject(v, "steps_exact", (double)(run->n_run_steps - run->first_step - run->steps_frozen));
            cJSON *fa = cJSON_AddArrayToObject(v, "faults");
            for (size_t i = 0; fa && i < run->n_faults; i++) cJSON_AddItemToArray(fa, cJSON_CreateString(run->faults[i]));
            vt = cJSON_PrintUnformatted(v);
        }
        cJSON_Delete(v);
        int trc = vt ? ls_audit_timeline_write_verdict(run_dir, timeline, vt, &run->reads, err, sizeof err) : 2;
        if (vt == NULL) snprintf(err, sizeof err, "out of memory");
        free(vt);
        if (trc != 0) {
            fprintf(stderr, "longstraw-audit: --timeline %s: %s\n", timeline, err);
            goto cleanup;
        }
    }
    if (html && ls_audit_html_write_read(run_dir, doc, &run->reads, html, err, sizeof err) != 0) {
        fprintf(stderr, "longstraw-audit: --html %s: %s\n", html, err);
        goto cleanup;
    }
    rc = run->level >= require ? 0 : 1;
    /* --require-signed: a run, or a parity report beside it, that no trusted key verified proves nothing */
    const char *unsigned_what = NULL;
    if (opt.require_signed && run->dsse_status != LS_OK) unsigned_what = "the run is not signed by a trusted --key";
    else if (opt.require_signed && run->parity_present && run->parity_dsse_status != LS_OK)
        unsigned_what = "the parity report is not signed by a trusted --parity-key";
    if (unsigned_what) rc = 1;
    if (!quiet) {
        printf("\nrequired level %d: %s (level %d proven; assurance %s)\n", require, rc == 0 ? "met" : "NOT met",
               run->level, ls_audit_assurance_name(ls_audit_assurance_of(run)));
        if (unsigned_what) printf("--require-signed: %s\n", unsigned_what);
    }
cleanup:
    cJSON_Delete(doc);
    ls_audit_free(run);
    return rc;
}
