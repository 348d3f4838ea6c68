/* load_parity.c - the parity report (parity.json in the run, or --parity
 * PATH), its envelope verified with the trusted parity keys, and the report
 * checked against schemas/parity.schema.json (audit.h). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/load/load.h"

#include <stdlib.h>
#include <string.h>

#include "audit/model/run_files.h"
#include "receipts/signing/dsse.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

/* The parity report's envelope, verified with the trusted parity keys: on
 * success the signed payload replaces *bytes (what was signed is what is
 * used), and a report file whose bytes differ from it is refused. */
static void check_parity_dsse(ls_audit_run *run, char **bytes, size_t *len, bool file_read) {
    run->parity_dsse_status = -1;
    char why[320];
    bool in_run = run->opt.parity_path == NULL;
    if (ls_dsse_parity_envelope_path(in_run ? "parity.json" : run->opt.parity_path, run->parity_envelope,
                                     sizeof run->parity_envelope, why, sizeof why) != LS_OK) {
        run->parity_envelope[0] = 0;
        if (run->opt.n_parity_keys) {
            run->parity_dsse_status = LS_ERR_ARG;
            snprintf(run->parity_dsse_err, sizeof run->parity_dsse_err, "%s", why);
        }
        return;
    }
    char *env = NULL;
    size_t env_len = 0;
    ls_status st = in_run ? ls_audit_read(run->run_dir, run->parity_envelope, LS_AUDIT_MAX_JSON_FILE, &env, &env_len,
                                          run->parity_dsse_err, sizeof run->parity_dsse_err)
                          : ls_json_read_bytes_capped(run->parity_envelope, LS_AUDIT_MAX_JSON_FILE, &env, &env_len,
                                                      run->parity_dsse_err, sizeof run->parity_dsse_err);
    run->parity_dsse_present = st != LS_ERR_IO;
    if (run->opt.n_parity_keys == 0) {
        free(env);
        return;
    }
    uint8_t *payload = NULL;
    size_t payload_len = 0;
    if (st == LS_OK)
        st = ls_audit_verify_envelope(run->opt.parity_keys, run->opt.n_parity_keys, env, env_len,
                                      LS_DSSE_PARITY_PAYLOAD_TYPE, run->parity_keyid, &payload, &payload_len,
                                      run->parity_dsse_err, sizeof run->parity_dsse_err);
    if (st == LS_OK && file_read && (payload_len != *len || memcmp(payload, *bytes, *len) != 0)) {
        snprintf(run->parity_dsse_err, sizeof run->parity_dsse_err,
                 "%.120s: the report's bytes are not the payload %.120s signed", run->parity_file, run->parity_envelope);
        run->parity_keyid[0] = 0;
        st = LS_ERR_SIGNATURE;
    }
    if (st == LS_OK) {
        free(*bytes);
        *bytes = (char *)payload;
        *len = payload_len;
        payload = NULL;
    }
    run->parity_dsse_status = (int)st;
    free(payload);
    free(env);
}

void ls_audit_load_parity(ls_audit_run *run) {
    char *bytes = NULL;
    size_t len = 0;
    ls_status st;
    if (run->opt.parity_path != NULL) {
        snprintf(run->parity_file, sizeof run->parity_file, "%.250s", run->opt.parity_path);
        st = ls_json_read_bytes_capped(run->opt.parity_path, LS_AUDIT_MAX_JSON_FILE, &bytes, &len, run->parity_err,
                                       sizeof run->parity_err);
        run->parity_present = st != LS_ERR_IO;
    } else {
        snprintf(run->parity_file, sizeof run->parity_file, "parity.json");
        st = ls_audit_read(run->run_dir, "parity.json", LS_AUDIT_MAX_JSON_FILE, &bytes, &len, run->parity_err,
                           sizeof run->parity_err);
        run->parity_present = st != LS_ERR_IO;
    }
    check_parity_dsse(run, &bytes, &len, st == LS_OK);
    if (st != LS_OK && run->parity_dsse_status == LS_OK) st = LS_OK; /* the signed payload stands for a lost file */
    if (st != LS_OK) goto cleanup;
    run->parity_present = true;
    cJSON *doc = NULL;
    st = ls_json_parse(bytes, len, run->parity_file, &doc, run->parity_err, sizeof run->parity_err);
    if (st != LS_OK) goto cleanup;
    const ls_schema *sc = NULL;
    st = ls_schema_get("parity", &sc, run->parity_err, sizeof run->parity_err);
    ls_schema_errors errs = {0};
    if (st == LS_OK) st = ls_schema_validate(sc, doc, &errs);
    if (st != LS_OK) {
        char first[256];
        ls_schema_errors_first(&errs, first, sizeof first);
        snprintf(run->parity_err, sizeof run->parity_err, "%.100s: not a parity report: %.200s", run->parity_file, first);
        cJSON_Delete(doc);
    } else {
        run->parity = doc;
    }
    ls_schema_errors_free(&errs);
cleanup:
    free(bytes);
}
