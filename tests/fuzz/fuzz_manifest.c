/* fuzz_manifest.c - libFuzzer target for the receipts readers: arbitrary
 * bytes, by the input's size modulo 3 (so that one execution does one
 * reader's work; mutations change sizes, so every input meets each),
 * parsed as a run manifest, or as a per-rank receipt (strict JSON, schema,
 * structural checks), or validated against one receipts schema (chosen by
 * the size too) with error collection and pushed through the canonical
 * printer, whose output must parse back to the same document.  Traps when a
 * reader accepts something that breaks its own documented invariants. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "receipts/schema/schema.h"

static void check_manifest(const ls_manifest *m) {
    if (m->n_ranks != m->world) __builtin_trap();
    for (size_t i = 0; i < m->n_ranks; i++)
        if (m->ranks[i].rank != i) __builtin_trap();
    for (size_t i = 0; i < m->n_subjects; i++) {
        if (!ls_receipt_relpath_ok(m->subjects[i].name)) __builtin_trap();
        if (i > 0 && strcmp(m->subjects[i - 1].name, m->subjects[i].name) >= 0) __builtin_trap();
    }
}

static void check_receipt(const ls_receipt *r) {
    if (r->rank >= r->world || r->end_unix_ns < r->start_unix_ns) __builtin_trap();
    if (strcmp(r->events_file, "") == 0 || strlen(r->events_sha256) != 64) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *bytes = (const char *)data;
    char err[512];
    if (size % 3 == 0) {
        ls_manifest *m = NULL;
        if (ls_manifest_parse(bytes, size, "fuzz", &m, err, sizeof err) == LS_OK) check_manifest(m);
        ls_manifest_free(m);
        return 0;
    }
    if (size % 3 == 1) {
        ls_receipt *r = NULL;
        if (ls_receipt_parse(bytes, size, "fuzz", &r, err, sizeof err) == LS_OK) check_receipt(r);
        ls_receipt_free(r);
        return 0;
    }

    cJSON *doc = NULL;
    if (ls_json_parse(bytes, size, "fuzz", &doc, err, sizeof err) != LS_OK) return 0;
    static const char *const names[] = {"manifest", "receipt", "dsse", "parity", "audit-report"};
    {
        size_t i = (size / 3) % (sizeof names / sizeof *names);
        const ls_schema *s = NULL;
        if (ls_schema_get(names[i], &s, err, sizeof err) != LS_OK) __builtin_trap();
        ls_schema_errors errs = {0};
        ls_status st = ls_schema_validate(s, doc, &errs);
        if ((st == LS_OK) != (errs.count == 0 && errs.dropped == 0)) __builtin_trap();
        ls_schema_errors_free(&errs);
    }
    char *canon = NULL;
    size_t len = 0;
    if (ls_json_print_canonical(doc, &canon, &len, err, sizeof err) == LS_OK) {
        cJSON *back = NULL;
        if (ls_json_parse(canon, len, "canonical", &back, err, sizeof err) != LS_OK) __builtin_trap();
        if (!cJSON_Compare(doc, back, 1)) __builtin_trap();
        cJSON_Delete(back);
        free(canon);
    }
    cJSON_Delete(doc);
    return 0;
}
