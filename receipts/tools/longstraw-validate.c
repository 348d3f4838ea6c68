/* longstraw-validate - check JSON documents against a LongStraw schema.
 *
 *   longstraw-validate [--jsonl] SCHEMA DOC [DOC...]
 *
 * SCHEMA is a schema file, or the name of one in the schemas directory
 * (receipt, manifest, dsse, ...).  With --jsonl every non-empty line of each
 * DOC is one document.  Uses the C validator of receipts/schema.h (the
 * keyword subset documented there).
 *
 * Exit status: 0 every document valid, 1 some document invalid (each error
 * printed with its JSON pointer and keyword), 2 bad usage, an unusable
 * schema or an unreadable document. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/json_util.h"
#include "receipts/schema.h"

static const char USAGE[] =
    "usage: longstraw-validate [--jsonl] SCHEMA DOC [DOC...]\n"
    "\n"
    "SCHEMA  a schema file (*.json), or a schema name from the schemas directory\n"
    "        (e.g. receipt, manifest, dsse, parity, audit-report)\n"
    "--jsonl each non-empty line of a DOC is one document\n"
    "\n"
    "exit status: 0 all valid, 1 some invalid, 2 bad usage or unreadable input\n";

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

int main(int argc, char **argv) {
    int jsonl = 0, first = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        }
    }
    if (first < argc && strcmp(argv[first], "--jsonl") == 0) {
        jsonl = 1;
        first++;
    }
    for (int i = first; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "longstraw-validate: unknown option %s\n(try --help)\n", argv[i]);
            return 2;
        }
    }
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
