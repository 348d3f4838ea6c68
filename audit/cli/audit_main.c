/* audit_main.c - longstraw-audit: scores a run directory against the
 * evidence levels of docs/design.md §5 (exit 0 when it proves --require-level N,
 * 1 when it does not, 2 for unusable input or bad usage). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "audit/cli/audit_names.h"
#include "common/cli_opts.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

#include "audit/report/diff.h"
#include "audit/report/html.h"
#include "audit/load/timeline.h"

/* The command line (one table, OPTS: parsing and --help). */
typedef struct {
    const char *json, *junit, *timeline, *html, *parity, *profiles, *metrics;
    int require, quiet, help, list_names, require_signed, require_probe;
    ls_audit_options opt; /* the keys */
} cli;

#define F(field) .off = offsetof(cli, field)
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_TEXT,
     .help = "usage: longstraw-audit RUN [--require-level N] [--json FILE] [--junit FILE] [--timeline FILE]\n"
             "                       [--html FILE] [--key PUB]... [--parity FILE] [--parity-key PUB]...\n"
             "                       [--require-signed] [--require-probe] [--profiles DIR] [--metrics FILE]\n"
             "                       [--quiet]\n"
             "       longstraw-audit diff RUN_A RUN_B [--json FILE] [--key PUB]... [--require-signed]\n"
             "Scores the run directory RUN against the evidence levels (docs/design.md section 5):\n"
             "  1 execution capacity, 2 response-operator fidelity, 3 distributed-update consistency,\n"
             "  4 full-gradient parity; a level holds only if the lower ones hold.  Levels 2-4 need a\n"
             "  parity report from the same build whose coverage holds the run (RUN/parity.json or\n"
             "  --parity FILE).  Every output states the assurance of the evidence too (docs/evidence.md):\n"
             "  unsigned, run-signed, or run-and-parity-signed.\n"},
    {.kind = LS_CLI_INT, .name = "--require-level", .arg = "N", F(require), .min = 0, .max = 4,
     .help = "exit 0 when the run proves level >= N (0..4; default 1), else 1", .bad = "is not a level 0..4"},
    {.like = "--json", .name = "--json", F(json)}, /* the audit report: schemas/audit-report.schema.json */
    {.kind = LS_CLI_STRING, .name = "--junit", .arg = "FILE", .help = "JUnit XML, one testcase per rule", F(junit)},
    {.kind = LS_CLI_STRING, .name = "--timeline", .arg = "FILE", .help = "Chrome trace-event JSON (Perfetto, chrome://tracing)",
     F(timeline)},
    {.kind = LS_CLI_STRING, .name = "--html", .arg = "FILE", .help = "one self-contained HTML report", F(html)},
    {.like = "--key", .name = "--key", F(opt.keys), .off2 = offsetof(cli, opt.n_keys), .max = LS_AUDIT_MAX_KEYS},
    {.kind = LS_CLI_STRING, .name = "--parity", .arg = "FILE", .help = "the parity report to use instead of RUN/parity.json",
     F(parity)},
    {.kind = LS_CLI_STRINGS, .name = "--parity-key", .arg = "PUB", F(opt.parity_keys),
     .off2 = offsetof(cli, opt.n_parity_keys), .max = LS_AUDIT_MAX_KEYS,
     .help = "a public key trusted to sign parity reports: the report's envelope\n"
             "(FILE.json -> FILE.dsse.json) must verify with one (repeatable)"},
    {.like = "--require-signed", .name = "--require-signed", F(require_signed)}, /* audit diff's: exit 1 here */
    {.kind = LS_CLI_FLAG, .name = "--require-probe", F(require_probe),
     .help = "a run that probed no step (longstraw-train --probe-every K) fails\nlevel 4 (run.probe)"},
    {.kind = LS_CLI_STRING, .name = "--profiles", .arg = "DIR", F(profiles),
     .help = "the profiles (what a run must show) to audit against [the source tree's\n"
             "profiles/]: a v1 run's is DIR/FAMILY.json, a v2 run's the one it names"},
    {.kind = LS_CLI_STRING, .name = "--metrics", .arg = "FILE", F(metrics),
     .help = "the trainer's metrics lines (longstraw-train --metrics): each step's\n"
             "objective and figures must be rank 0's trace's (sources.agree)"},
    {.like = "--quiet", .name = "--quiet", F(quiet)},
    {.like = "--list-names", .name = "--list-names", F(list_names)},
    {.like = "--help", .name = "--help", F(help)},
    {.kind = LS_CLI_TEXT,
     .help = "Exit: 0 the run proves the required level, 1 it does not, 2 unusable input or bad usage.\n"},
};
#undef F

static ls_cli_table table(void) { return (ls_cli_table){OPTS, sizeof OPTS / sizeof OPTS[0]}; }

static void usage(FILE *f) {
    const ls_cli_table diff = ls_audit_diff_cli_options();
    ls_cli_usage(f, table(), &diff, 1, 21);
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
    cli a = {.require = 1};
    const char *pos[1];
    size_t n_pos = 0;
    char perr[512];
    const ls_cli_table diff = ls_audit_diff_cli_options();
    const ls_cli_parser p = {.table = table(), .shared = &diff, .n_shared = 1, .pos = pos, .max_pos = 1,
                             .n_pos = &n_pos, .once = 1};
    if (ls_cli_parse(&p, &a, argc, argv, 1, perr, sizeof perr) != 0) return bad("%s", perr);
    if (a.help) {
        usage(stdout);
        return 0;
    }
    if (a.list_names) {
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
    }
    const char *run_dir = n_pos ? pos[0] : NULL, *json = a.json, *junit = a.junit, *timeline = a.timeline,
               *html = a.html, *parity = a.parity, *profiles = a.profiles, *metrics = a.metrics;
    int require = a.require, quiet = a.quiet;
    ls_audit_options opt = a.opt;
    opt.require_signed = a.require_signed;
    opt.require_probe = a.require_probe;
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
