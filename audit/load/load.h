/* load.h - loading a run into the audit's model (audit/model/audit.h): the run
 * directory's files, each rank's trace streamed once (feeding the rules' per-step
 * checks, audit/rules/rules.h, as it goes), the manifest and its envelope, the
 * parity report.  Use: ls_audit_load, then ls_audit_evaluate (rules.h), the
 * reports (audit/report/report.h), ls_audit_free. */
#ifndef LS_AUDIT_LOAD_H
#define LS_AUDIT_LOAD_H

#include "audit/model/audit.h"

/* Loads the model of run_dir.  LS_OK with *out even when files are missing or
 * broken (their rules fail); LS_ERR_IO / LS_ERR_FORMAT when the input is
 * unusable (not a directory, nothing of a run in it: no manifest, no
 * receipt, no trace), err says why; LS_ERR_NOMEM.  *out is the caller's
 * (ls_audit_free), NULL on failure; opt's strings and key lists are
 * borrowed for the life of *out (run_dir is copied). */
ls_status ls_audit_load(const ls_audit_options *opt, ls_audit_run **out, char *err, size_t errlen);

/* Frees a run from ls_audit_load and everything it holds (receipts,
 * reports, manifest, parity document, rules); NULL is a no-op. */
void ls_audit_free(ls_audit_run *run);

/* The parts of ls_audit_load, each in its own file (called by load.c).
 * ls_audit_trace_fields_init: fills the table of the trace fields the scan
 * reads (the same every time; before the first ls_audit_load_trace).
 * ls_audit_load_trace: streams rank r's trace into its facts (load_trace.c);
 * LS_OK when the trace is absent or broken (the rules name it), LS_ERR_NOMEM.
 * ls_audit_verify_subjects: digests every subject of run->manifest (not
 * NULL) and names every file it does not list in run->verify
 * (load_manifest.c); LS_OK or LS_ERR_NOMEM.  ls_audit_check_dsse: verifies
 * the manifest's envelope with the trusted keys against the manifest's
 * bytes (manifest_bytes may be NULL), the outcome in run->dsse_*.
 * ls_audit_verify_envelope: verifies envelope bytes with each of the n_keys
 * key files in turn: LS_OK with the verifying key's id in keyid and the
 * payload in *payload (the caller's, free()), or the last key's error in
 * err.  ls_audit_load_parity: reads and verifies the parity report into
 * run->parity, the outcome in run->parity_* (load_parity.c). */
void ls_audit_trace_fields_init(void);
ls_status ls_audit_load_trace(ls_audit_run *run, ls_audit_rank *r);
ls_status ls_audit_verify_subjects(ls_audit_run *run);
void ls_audit_check_dsse(ls_audit_run *run, const char *manifest_bytes, size_t manifest_len);
ls_status ls_audit_verify_envelope(const char *const *keys, size_t n_keys, const char *env, size_t env_len,
                                   const char *type, char keyid[65], uint8_t **payload, size_t *payload_len,
                                   char *err, size_t errlen);
void ls_audit_load_parity(ls_audit_run *run);
#endif
