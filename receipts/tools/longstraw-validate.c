/* longstraw-validate - check JSON documents against a LongStraw schema.
 *
 *   longstraw-validate [--jsonl] SCHEMA DOC [DOC...]
 *   longstraw-validate --v2 PATH [PATH...]
 *
 * SCHEMA is a schema file, or the name of one in the schemas directory
 * (receipt, manifest, dsse, ...).  With --jsonl every non-empty line of each
 * DOC is one document.  Uses the C validator of receipts/schema/schema.h (the
 * keyword subset documented there).  With the receipt or manifest schema (v1)
 * a document's predicate.config is then checked against the registry of
 * model families as the readers check it (ls_registry_check_config: the
 * schemas name no family).
 *
 * --v2 checks files of the v2 evidence contract (docs/contract.md §1-2) with
 * the C readers themselves, so any trainer's emitter can test its output:
 * a trace (its first line a trace header, plain or zstd) through the trace
 * reader, which must find a v2 header and no error diagnostic; a receipt or
 * manifest (by its predicateType) through ls_receipt_read /
 * ls_manifest_read (schema, build digest recomputed with JCS, structure),
 * which must be v2; a directory as a v2 run: its manifest read and verified
 * against the files (every subject, every receipt), and every rank's trace
 * named by its receipt read as above.
 *
 * Exit status: 0 every document valid, 1 some document invalid (each error
 * printed with its JSON pointer and keyword), 2 bad usage, an unusable
 * schema or an unreadable document. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "common/cli_opts.h"
#include "receipts/format/json_util.h"
#include "receipts/format/registry_file.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "receipts/schema/schema.h"
#include "receipts/reading/trace_reader.h"

static const char USAGE[] =
    "usage: longstraw-validate [--jsonl] SCHEMA DOC [DOC...]\n"
    "       longstraw-validate --v2 PATH [PATH...]\n"
    "\n"
    "SCHEMA  a schema file (*.json), or a schema name from the schemas directory\n"
    "        (e.g. receipt, manifest, dsse, parity, audit-report)\n";
static const char USAGE_EXIT[] = "\nexit status: 0 all valid, 1 some invalid, 2 bad usage or unreadable input\n";

/* Whether the documents' config is checked against the registry of model families after the schema:
 * the v1 receipt and manifest schemas name no family, their readers check a run's family keys
 * (ls_registry_check_config), and so does this tool when SCHEMA is one of them (by name or file). */
static bool g_config_check;

static bool is_v1_run_schema(const char *arg) {
    const char *base = strrchr(arg, '/');
    base = base ? base + 1 : arg;
    return strcmp(base, "receipt") == 0 || strcmp(base, "manifest") == 0 ||
           strcmp(base, "receipt.schema.json") == 0 || strcmp(base, "manifest.schema.json") == 0;
}

/* 1 valid, 0 invalid (errors printed). */
static int check_one(const ls_schema *schema, const char *bytes, size_t len, const char *what) {
    cJSON *doc = NULL;
    char err[1024];
    if (ls_json_parse(bytes, len, what, &doc, err, sizeof err) != LS_OK) {
        printf("%s: invalid\n  %s\n", what, err);
        return 0;
    }
    ls_schema_errors errs = {0};
    ls_status st = ls_schema_validate(schema, doc, &errs);
    if (st == LS_OK && g_config_check) {
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
        st = ls_registry_check_config(cJSON_GetObjectItemCaseSensitive(pred, "config"), what, err, sizeof err);
        cJSON_Delete(doc);
        if (st == LS_OK) {
            printf("%s: valid\n", what);
            return 1;
        }
        printf("%s: invalid\n  %s\n", what, err);
        return 0;
    }
    cJSON_Delete(doc);
    if (st == LS_OK) {
        printf("%s: valid\n", what);
        return 1;
    }
    printf("%s: invalid\n", what);
    for (size_t i = 0; i < errs.count; i++)
        printf("  %s: %s: %s\n", errs.items[i].pointer[0] != '\0' ? errs.items[i].pointer : "(root)",
               errs.items[i].keyword, errs.items[i].message);
    if (errs.dropped > 0) printf("  ... and %zu more\n", errs.dropped);
    if (st == LS_ERR_NOMEM) printf("  (out of memory while validating)\n");
    ls_schema_errors_free(&errs);
    return 0;
}

/* ---- --v2 ---------------------------------------------------------------- */

/* A trace through the reader: 1 when it is a clean v2 trace. */
static int v2_trace(const char *path) {
    ls_trace_report rep;
    ls_status st = ls_trace_read_file(path, NULL, NULL, &rep);
    if (st == LS_ERR_NOMEM || st == LS_ERR_ARG) {
        printf("%s: invalid\n  %s\n", path, ls_status_str(st));
        return 0;
    }
    int ok = st == LS_OK && rep.header_ok && rep.version == 2;
    printf("%s: %s (trace v%d, %lld events, end %s)\n", path, ok ? "valid" : "invalid", rep.version,
           (long long)rep.n_events, ls_trace_end_name(rep.end));
    if (rep.header_ok && rep.version != 2) printf("  header: a v1 trace, not v2\n");
    for (size_t i = 0; i < rep.n_diags; i++)
        printf("  %s: %s\n", ls_trace_diag_name(rep.diags[i].code), rep.diags[i].message);
    if (rep.n_diags_dropped > 0) printf("  ... and %llu more\n", (unsigned long long)rep.n_diags_dropped);
    ls_trace_report_free(&rep);
    return ok;
}

/* A receipt or manifest by its predicateType: 1 when a valid v2 one. */
static int v2_statement(const char *path, const char *bytes, size_t len) {
    char err[1024] = "";
    const char *kind = strstr(bytes, "run-manifest:") ? "manifest" : "receipt";
    int version = 0;
    ls_status st;
    if (kind[0] == 'm') {
        ls_manifest *m = NULL;
        st = ls_manifest_parse(bytes, len, path, &m, err, sizeof err);
        if (m) version = m->version;
        ls_manifest_free(m);
    } else {
        ls_receipt *r = NULL;
        st = ls_receipt_parse(bytes, len, path, &r, err, sizeof err);
        if (r) version = r->version;
        ls_receipt_free(r);
    }
    int ok = st == LS_OK && version == 2;
    printf("%s: %s (%s)\n", path, ok ? "valid" : "invalid", kind);
    if (st != LS_OK) printf("  %s\n", err);
    else if (version != 2) printf("  a v%d %s, not v2\n", version, kind);
    return ok;
}

/* A run directory: the manifest verified against the files, every trace
 * its receipts name read.  1 when all hold. */
static int v2_run(const char *dir) {
    char path[4200], err[1024] = "";
    snprintf(path, sizeof path, "%s/" LS_MANIFEST_FILE, dir);
    ls_manifest *m = NULL;
    if (ls_manifest_read(path, &m, err, sizeof err) != LS_OK) {
        printf("%s: invalid\n  %s\n", dir, err);
        return 0;
    }
    int ok = m->version == 2;
    if (!ok) printf("%s: invalid\n  %s is a v%d manifest, not v2\n", dir, path, m->version);
    ls_verify_report rep = {0};
    ls_status st = ls_manifest_verify_parsed(dir, m, &rep, err, sizeof err);
    if (st != LS_OK) {
        ok = 0;
        printf("%s: invalid (manifest verification)\n", dir);
        if (rep.count == 0) printf("  %s\n", err);
        for (size_t i = 0; i < rep.count; i++)
            printf("  %s %s: %s\n", ls_verify_kind_name(rep.items[i].kind), rep.items[i].name, rep.items[i].detail);
    }
    ls_verify_report_free(&rep);
    for (size_t i = 0; i < m->n_ranks; i++) {
        if (m->ranks[i].receipt == NULL) {
            printf("%s: rank %zu has no receipt (missing)\n", dir, i);
            ok = 0;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, m->ranks[i].receipt);
        ls_receipt *r = NULL;
        if (ls_receipt_read(path, &r, err, sizeof err) != LS_OK) {
            printf("%s: invalid\n  %s\n", path, err);
            ok = 0;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, r->events_file);
        ok &= v2_trace(path);
        ls_receipt_free(r);
    }
    ls_manifest_free(m);
    if (ok) printf("%s: valid (v2 run)\n", dir);
    return ok;
}

/* One --v2 PATH: 1 valid, 0 invalid, -1 unreadable. */
static int v2_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "longstraw-validate: %s: cannot stat\n", path);
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) return v2_run(path);
    /* a trace: zstd magic, or a first line holding the trace header's kind
     * (looked at in the first 64 KiB: traces are streamed, never slurped) */
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "longstraw-validate: %s: cannot open\n", path);
        return -1;
    }
    static char head[65537];
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = '\0';
    char *nl = memchr(head, '\n', n);
    if (nl != NULL) *nl = '\0';
    bool is_trace = (n >= 4 && (unsigned char)head[0] == 0x28 && (unsigned char)head[1] == 0xB5 &&
                     (unsigned char)head[2] == 0x2F && (unsigned char)head[3] == 0xFD) ||
                    (nl != NULL && strstr(head, "\"longstraw.trace.header\"") != NULL);
    if (is_trace) return v2_trace(path);
    char *bytes = NULL, err[1024];
    size_t len = 0;
    if (ls_json_read_bytes(path, &bytes, &len, err, sizeof err) != LS_OK) {
        fprintf(stderr, "longstraw-validate: %s\n", err);
        return -1;
    }
    int ok = v2_statement(path, bytes, len);
    free(bytes);
    return ok;
}

typedef struct {
    int jsonl, v2, help;
} args;

#define F(field) .off = offsetof(args, field)
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_FLAG, .name = "--jsonl", .help = "each non-empty line of a DOC is one document", F(jsonl)},
    {.kind = LS_CLI_FLAG, .name = "--v2", F(v2),
     .help = "check v2 contract files with the C readers (docs/contract.md): a trace\n"
             "(events.jsonl[.zst]), a receipt, a manifest, or a run directory\n"
             "(manifest verified, every receipt and trace read)"},
    {.like = "--help", .name = "--help", F(help)},
};
#undef F

static int validate(const args *a, int n_pos, const char **pos);

int main(int argc, char **argv) {
    args a = {0};
    char perr[256];
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    size_t n_pos = 0;
    if (!pos) {
        fprintf(stderr, "longstraw-validate: out of memory\n");
        return 2;
    }
    const ls_cli_table t = {OPTS, sizeof OPTS / sizeof OPTS[0]};
    const ls_cli_parser p = {.table = t, .pos = pos, .max_pos = (size_t)argc, .n_pos = &n_pos};
    if (ls_cli_parse(&p, &a, argc, argv, 1, perr, sizeof perr) != 0) {
        fprintf(stderr, "longstraw-validate: %s\n(try --help)\n", perr);
        free(pos);
        return 2;
    }
    if (a.help) {
        fputs(USAGE, stdout);
        ls_cli_usage(stdout, t, NULL, 0, 10);
        fputs(USAGE_EXIT, stdout);
        free(pos);
        return 0;
    }
    int rc = validate(&a, (int)n_pos, pos);
    free(pos);
    return rc;
}

/* SCHEMA DOC... (or --v2 PATH...) of the command line, pos[0..n). */
static int validate(const args *a, int n_pos, const char **pos) {
    if (a->v2 && a->jsonl) {
        fprintf(stderr, "longstraw-validate: --v2 and --jsonl: one or the other\n(try --help)\n");
        return 2;
    }
    if (a->v2) {
        if (n_pos < 1) {
            fprintf(stderr, "longstraw-validate: --v2 needs at least one PATH\n(try --help)\n");
            return 2;
        }
        int invalid = 0, unreadable = 0;
        for (int i = 0; i < n_pos; i++) {
            int r = v2_path(pos[i]);
            invalid |= r == 0;
            unreadable |= r < 0;
        }
        return unreadable ? 2 : invalid ? 1 : 0;
    }
    int jsonl = a->jsonl, first = 0, argc = n_pos;
    const char **argv = pos;
    if (argc - first < 2) {
        fprintf(stderr, "longstraw-validate: need a SCHEMA and at least one DOC\n(try --help)\n");
        return 2;
    }
    const char *schema_arg = argv[first];
    ls_schema *schema = NULL;
    char err[1024];
    size_t n = strlen(schema_arg);
    ls_status st = strchr(schema_arg, '/') != NULL || (n > 5 && strcmp(schema_arg + n - 5, ".json") == 0)
                       ? ls_schema_load_file(schema_arg, &schema, err, sizeof err)
                       : ls_schema_load(schema_arg, &schema, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-validate: SCHEMA %s\n", err);
        return 2;
    }
    g_config_check = is_v1_run_schema(schema_arg);
    int invalid = 0, unreadable = 0;
    for (int i = first + 1; i < argc; i++) {
        char *bytes = NULL;
        size_t len = 0;
        if (ls_json_read_bytes(argv[i], &bytes, &len, err, sizeof err) != LS_OK) {
            fprintf(stderr, "longstraw-validate: %s\n", err);
            unreadable = 1;
            continue;
        }
        if (!jsonl) {
            invalid |= !check_one(schema, bytes, len, argv[i]);
        } else {
            size_t line = 0;
            for (char *p = bytes; p < bytes + len; line++) {
                char *nl = memchr(p, '\n', (size_t)(bytes + len - p));
                size_t l = nl != NULL ? (size_t)(nl - p) : (size_t)(bytes + len - p);
                if (strspn(p, " \t\r") < l) {
                    char what[4200];
                    snprintf(what, sizeof what, "%s:%zu", argv[i], line + 1);
                    invalid |= !check_one(schema, p, l, what);
                }
                p += l + 1;
            }
        }
        free(bytes);
    }
    ls_schema_free(schema);
    return unreadable ? 2 : invalid ? 1 : 0;
}
