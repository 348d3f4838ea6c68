/* diff_cli.c - longstraw-audit diff: the human summary and the subcommand
 * (the comparison itself is diff.c's). */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/report/diff.h"
#include "common/cli_opts.h"
#include "receipts/format/atomic_file.h"

/* ---- the human summary ------------------------------------------------- */

static double num(const cJSON *o, const char *k, int *have) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    *have = cJSON_IsNumber(v);
    return *have ? v->valuedouble : 0;
}

static void cell(char *buf, size_t cap, const cJSON *o, const char *k, double scale, const char *fmt) {
    int h;
    double v = num(o, k, &h);
    if (h) snprintf(buf, cap, fmt, v * scale);
    else snprintf(buf, cap, "-");
}

static const char *str_or(const cJSON *o, const char *k, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

void ls_audit_diff_print(FILE *out, const cJSON *doc) {
    const cJSON *runs = cJSON_GetObjectItem(doc, "runs");
    fprintf(out, "longstraw-audit diff\n  A %s\n  B %s\n", str_or(doc, "run_a", "?"), str_or(doc, "run_b", "?"));
    for (int k = 0; k < 2; k++) {
        const cJSON *r = cJSON_GetObjectItem(runs, k ? "b" : "a");
        int h;
        fprintf(out, "  %s: world %.0f, build %.16s, from %s\n", k ? "B" : "A", num(r, "world", &h),
                str_or(r, "build_digest", "(unknown)"), str_or(r, "source", "?"));
        /* what binds the files compared: the manifest's digests, the signature */
        const cJSON *v = cJSON_GetObjectItem(r, "verification");
        const char *sig = str_or(v, "signature", "?");
        if (cJSON_IsTrue(cJSON_GetObjectItem(v, "verified"))) {
            bool signed_ = !strcmp(sig, "verified");
            fprintf(out, "     verified: manifest valid, %.0f subject(s) digested, nothing unlisted; signature %s%.16s%s\n",
                    num(v, "subjects_checked", &h),
                    signed_ ? "verified by key " : "not checked (no --key: internal consistency only)",
                    signed_ ? str_or(v, "keyid", "?") : "", signed_ ? "..." : "");
        } else {
            fprintf(out, "     NOT VERIFIED (manifest %s, signature %s):\n", str_or(v, "manifest", "?"), sig);
            const cJSON *p;
            cJSON_ArrayForEach(p, cJSON_GetObjectItem(v, "problems"))
                fprintf(out, "       %s: %s\n", str_or(p, "file", "?"), str_or(p, "problem", "?"));
            double om = num(v, "problems_omitted", &h);
            if (om > 0) fprintf(out, "       (%.0f more)\n", om);
        }
    }
    const cJSON *rk;
    cJSON_ArrayForEach(rk, cJSON_GetObjectItem(doc, "ranks")) {
        int h;
        fprintf(out, "\nrank %.0f: phase wall time (receipts)\n", num(rk, "rank", &h));
        for (int k = 0; k < 2; k++) {
            const char *p = str_or(rk, k ? "receipt_b" : "receipt_a", NULL);
            if (p) fprintf(out, "  (no receipt in %s: %s)\n", k ? "B" : "A", p);
        }
        fprintf(out, "  %-16s %7s %7s %12s %12s %12s %8s\n", "phase", "n A", "n B", "A ms", "B ms", "B-A ms", "B/A");
        const cJSON *row;
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(rk, "phases")) {
            char c[6][32];
            cell(c[0], 32, row, "count_a", 1, "%.0f");
            cell(c[1], 32, row, "count_b", 1, "%.0f");
            cell(c[2], 32, row, "wall_ns_a", 1e-6, "%.3f");
            cell(c[3], 32, row, "wall_ns_b", 1e-6, "%.3f");
            cell(c[4], 32, row, "delta_ns", 1e-6, "%+.3f");
            cell(c[5], 32, row, "ratio", 1, "%.3f");
            fprintf(out, "  %-16.64s %7s %7s %12s %12s %12s %8s\n", str_or(row, "phase", "?"), c[0], c[1], c[2], c[3],
                    c[4], c[5]);
        }
        fprintf(out, "rank %.0f: per-step memory peak (bytes)\n", num(rk, "rank", &h));
        fprintf(out, "  %-24s %14s %14s %14s\n", "category", "A", "B", "B-A");
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(rk, "memory")) {
            char c[3][32];
            cell(c[0], 32, row, "step_peak_a", 1, "%.0f");
            cell(c[1], 32, row, "step_peak_b", 1, "%.0f");
            cell(c[2], 32, row, "delta", 1, "%+.0f");
            fprintf(out, "  %-24.64s %14s %14s %14s\n", str_or(row, "category", "?"), c[0], c[1], c[2]);
        }
    }
    const cJSON *steps = cJSON_GetObjectItem(doc, "steps");
    if (cJSON_GetArraySize(steps) > 0) {
        int h;
        fprintf(out, "\nper-step metrics (rank %.0f's step_metrics)\n", num(doc, "metrics_rank", &h));
        fprintf(out, "  %5s %-22s %16s %16s %13s\n", "step", "metric", "A", "B", "B-A");
        const cJSON *st;
        cJSON_ArrayForEach(st, steps) {
            const cJSON *m;
            cJSON_ArrayForEach(m, cJSON_GetObjectItem(st, "metrics")) {
                char c[3][32];
                cell(c[0], 32, m, "a", 1, "%.9g");
                cell(c[1], 32, m, "b", 1, "%.9g");
                cell(c[2], 32, m, "delta", 1, "%+.3e");
                fprintf(out, "  %5.0f %-22s %16s %16s %13s\n", num(st, "step", &h), str_or(m, "name", "?"), c[0], c[1],
                        c[2]);
            }
        }
        double om = num(doc, "steps_omitted", &h);
        if (om > 0) fprintf(out, "  (%.0f more steps not listed; the largest |B-A| covers them)\n", om);
        fprintf(out, "  largest |B-A| over all steps:");
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(doc, "metric_max_abs_delta"))
            if (strcmp(m->string, "step_wall_s") && strncmp(m->string, "tokens_per_s.", 13))
                fprintf(out, " %s %.3g", m->string, m->valuedouble);
        fprintf(out, "\n");
    }
    const cJSON *n;
    cJSON_ArrayForEach(n, cJSON_GetObjectItem(doc, "notes")) fprintf(out, "note: %s\n", n->valuestring);
    const cJSON *divs = cJSON_GetObjectItem(doc, "divergences");
    const char *verdict = str_or(doc, "verdict", "unverified");
    int nd = cJSON_GetArraySize(divs);
    fprintf(out, "\n");
    if (nd > 0) {
        const cJSON *first = cJSON_GetObjectItem(doc, "first_divergence");
        fprintf(out, "FIRST DIVERGENCE (%s): %s\n", str_or(first, "what", "?"), str_or(first, "detail", "?"));
        if (nd > 1) {
            fprintf(out, "all divergences:\n");
            const cJSON *x;
            cJSON_ArrayForEach(x, divs) fprintf(out, "  %s: %s\n", str_or(x, "what", "?"), str_or(x, "detail", "?"));
        }
    }
    if (!strcmp(verdict, "equivalent"))
        fprintf(out, "verdict: EQUIVALENT (both runs verified; same configuration, build, world, parameter digests, "
                     "event sequence, recorded values and receipt counts)\n");
    else if (!strcmp(verdict, "different"))
        fprintf(out, "verdict: DIFFERENT (%d divergence%s)\n", nd, nd == 1 ? "" : "s");
    else
        fprintf(out, "verdict: UNVERIFIED: %s; no equivalence is claimed (%d divergence%s found besides)\n",
                str_or(doc, "unverified", "a run does not verify"), nd, nd == 1 ? "" : "s");
}

/* ---- the subcommand ---------------------------------------------------- */

#define DIFF_MAX_KEYS 16

typedef struct {
    const char *json;
    const char *keys[DIFF_MAX_KEYS];
    size_t n_keys;
    int require_signed, help;
} diff_cli;

#define F(field) .off = offsetof(diff_cli, field)
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_TEXT,
     .help = "usage: longstraw-audit diff RUN_A RUN_B [--json FILE] [--key PUB]... [--require-signed]\n"
             "  each run is verified first (its manifest's digests; with --key, its signature)\n"},
    {.like = "--json", .name = "--json", F(json)}, /* the comparison: schemas/audit-diff.schema.json */
    {.like = "--key", .name = "--key", F(keys), .off2 = offsetof(diff_cli, n_keys), .max = DIFF_MAX_KEYS},
    {.kind = LS_CLI_FLAG, .name = "--require-signed", F(require_signed),
     .help = "an unsigned or unverified run (or parity report) proves nothing"},
    {.like = "--help", .name = "--help", F(help)},
    {.kind = LS_CLI_TEXT,
     .help = "  exit 0: equivalent (both verified; configuration, build, world, parameter digests, event\n"
             "          sequence, recorded values, receipt counts)\n"
             "  exit 1: the runs differ (the first divergence is named)\n"
             "  exit 2: bad usage or an unusable run directory\n"
             "  exit 3: a run does not verify (the run and the file named): no equivalence is claimed\n"},
};
#undef F

ls_cli_table ls_audit_diff_cli_options(void) { return (ls_cli_table){OPTS, sizeof OPTS / sizeof OPTS[0]}; }

static void usage(FILE *f) { ls_cli_usage(f, ls_audit_diff_cli_options(), NULL, 0, 21); }

int ls_audit_diff_main(int argc, char **argv) {
    diff_cli a;
    memset(&a, 0, sizeof a);
    const char *pos[2] = {NULL, NULL};
    size_t npos = 0;
    if (argc < 1 || !argv[0] || strcmp(argv[0], "diff")) {
        fprintf(stderr, "longstraw-audit: the diff subcommand expects argv[0] \"diff\"\n");
        return 2;
    }
    char perr[512];
    const ls_cli_parser p = {.table = ls_audit_diff_cli_options(), .pos = pos, .max_pos = 2, .n_pos = &npos, .once = 1};
    if (ls_cli_parse(&p, &a, argc, argv, 1, perr, sizeof perr) != 0) {
        fprintf(stderr, "longstraw-audit diff: %s%s\n", perr,
                strncmp(perr, "unexpected", 10) ? "" : " (two run directories expected)");
        usage(stderr);
        return 2;
    }
    if (a.help) {
        usage(stdout);
        return 0;
    }
    if (npos != 2) {
        fprintf(stderr, "longstraw-audit diff: %s missing\n", npos == 0 ? "RUN_A and RUN_B" : "RUN_B");
        usage(stderr);
        return 2;
    }
    const char *json_path = a.json;
    ls_audit_diff_options opt = {.keys = a.keys, .n_keys = a.n_keys, .require_signed = a.require_signed};
    char err[2048];
    cJSON *doc = NULL;
    int verdict = LS_AUDIT_DIFF_UNVERIFIED;
    ls_status st = ls_audit_diff_runs(pos[0], pos[1], &opt, &doc, &verdict, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-audit diff: unusable input: %s\n", err);
        return 2;
    }
    ls_audit_diff_print(stdout, doc);
    fflush(stdout);
    if (verdict == LS_AUDIT_DIFF_UNVERIFIED)
        fprintf(stderr, "longstraw-audit diff: %s\n", cJSON_GetObjectItem(doc, "unverified")->valuestring);
    int rc = verdict;
    if (json_path) {
        char *text = cJSON_Print(doc);
        if (!text) {
            fprintf(stderr, "longstraw-audit diff: --json %.200s: out of memory\n", json_path);
            rc = 2;
        } else {
            size_t len = strlen(text);
            char *nl = realloc(text, len + 2);
            if (nl) text = nl, text[len++] = '\n', text[len] = 0;
            if (ls_atomic_write(json_path, text, len, err, sizeof err) != LS_OK) {
                fprintf(stderr, "longstraw-audit diff: --json %.200s: %s\n", json_path, err);
                rc = 2;
            }
            free(text);
        }
    }
    cJSON_Delete(doc);
    return rc;
}
