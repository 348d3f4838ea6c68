/* fuzz_audit.c - libFuzzer target for longstraw-audit's whole input path: a
 * run directory packed as one input (fuzz_run_pack.h: files, directories and
 * symbolic links with hostile names, sizes and targets) is unpacked into a
 * scratch directory, loaded (manifest, signature-free, receipts, traces,
 * parity), every rule and level evaluated, and the text and JSON reports
 * produced (the JUnit writer's own test is test_audit's; its atomic write
 * would make every execution an fsync).  Traps when the audit returns a level outside 0..4 or a
 * JSON report that fails its own schema; any crash, leak, hang or unbounded
 * allocation is the sanitizer's and libFuzzer's to report.  The seeds are
 * real trainer runs (one rank and two) packed by make_seeds.py. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"
#include "audit/report/report.h"
#include "receipts/schema/schema.h"
#include "fuzz_run_pack.h"

static char scratch[256];

static void make_scratch(void) {
    if (scratch[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/ls-fuzz-audit-%d", base, (int)getpid());
    mkdir(scratch, 0777);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    make_scratch();
    run_pack_unpack(scratch, data, size);
    ls_audit_options opt = {.run_dir = scratch};
    ls_audit_run *run = NULL;
    char err[512];
    if (ls_audit_load(&opt, &run, err, sizeof err) == LS_OK && ls_audit_evaluate(run) == LS_OK) {
        if (run->level < 0 || run->level > 4) __builtin_trap();
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            ls_audit_report_text(run, null);
            fclose(null);
        }
        cJSON *doc = NULL;
        if (ls_audit_report_json(run, &doc) == LS_OK) {
            /* as a reader of --json sees it: printed and parsed back (large integers are raw text) */
            char *txt = cJSON_PrintUnformatted(doc);
            cJSON *back = txt ? cJSON_Parse(txt) : NULL;
            const ls_schema *sch = NULL;
            if (txt && !back) __builtin_trap(); /* the report must be JSON */
            if (back && ls_schema_get("audit-report", &sch, err, sizeof err) == LS_OK &&
                ls_schema_validate(sch, back, NULL) == LS_ERR_SCHEMA)
                __builtin_trap(); /* the audit's own report must pass its schema */
            cJSON_Delete(back);
            free(txt);
            cJSON_Delete(doc);
        }
    }
    ls_audit_free(run);
    return 0;
}
