/* load_manifest.c - the run's manifest checked against the directory (every
 * subject digested, every file it does not list named) and its DSSE
 * signature verified with the trusted keys (audit.h). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/load/load.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audit/model/run_files.h"
#include "receipts/format/digest.h"
#include "receipts/signing/dsse.h"

#define WALK_MAX_DEPTH 8

/* ---- the digest walk: every subject digested, every extra file named ---- */

static ls_status add_problem(ls_verify_report *rep, ls_verify_kind kind, const char *name, const char *detail) {
    return ls_verify_report_add(rep, kind, name, "%s", detail);
}

static bool is_subject(const ls_manifest *m, const char *rel) {
    size_t lo = 0, hi = m->n_subjects;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(m->subjects[mid].name, rel);
        if (c == 0) return true;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

/* Files under run_dir/rel not listed in the manifest (links and other
 * non-regular files included; never followed). */
static ls_status walk_extras(ls_audit_run *run, const char *rel, int depth, size_t *seen) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s%s%s", run->run_dir, rel[0] ? "/" : "", rel) >= (int)sizeof path)
        return add_problem(&run->verify, LS_VERIFY_EXTRA, rel, "path too long");
    DIR *d = opendir(path);
    if (d == NULL) return add_problem(&run->verify, LS_VERIFY_EXTRA, rel[0] ? rel : ".", "cannot list the directory");
    ls_status st = LS_OK;
    struct dirent *de;
    while (st == LS_OK && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
        if (rel[0] == 0 && (strcmp(n, LS_MANIFEST_FILE) == 0 || strcmp(n, LS_MANIFEST_DSSE_FILE) == 0 ||
                            strcmp(n, "parity.json") == 0 || strcmp(n, "parity.dsse.json") == 0))
            continue;
        if (++*seen > LS_AUDIT_MAX_DIR_ENTRIES) {
            st = add_problem(&run->verify, LS_VERIFY_EXTRA, rel[0] ? rel : ".",
                             "more than 100000 entries in the run directory (not listed further)");
            break;
        }
        char child[1100], full[4096];
        if (snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", n) >= (int)sizeof child ||
            snprintf(full, sizeof full, "%s/%s", run->run_dir, child) >= (int)sizeof full) {
            st = add_problem(&run->verify, LS_VERIFY_EXTRA, rel[0] ? rel : ".", "a name too long");
            continue;
        }
        struct stat sb;
        if (lstat(full, &sb) != 0) {
            st = add_problem(&run->verify, LS_VERIFY_EXTRA, child, "cannot stat");
        } else if (S_ISDIR(sb.st_mode)) {
            if (depth >= WALK_MAX_DEPTH)
                st = add_problem(&run->verify, LS_VERIFY_EXTRA, child, "directories nested too deep");
            else
                st = walk_extras(run, child, depth + 1, seen);
        } else if (!S_ISREG(sb.st_mode)) {
            st = add_problem(&run->verify, LS_VERIFY_EXTRA, child,
                             S_ISLNK(sb.st_mode) ? "a symbolic link (never followed)" : "not a regular file");
        } else if (run->manifest == NULL || !is_subject(run->manifest, child)) {
            st = add_problem(&run->verify, LS_VERIFY_EXTRA, child, "not listed in the manifest");
        }
    }
    closedir(d);
    return st;
}

ls_status ls_audit_verify_subjects(ls_audit_run *run) {
    const ls_manifest *m = run->manifest;
    ls_status st = LS_OK;
    for (size_t i = 0; st == LS_OK && i < m->n_subjects; i++) {
        const ls_manifest_subject *s = &m->subjects[i];
        char why[320], hex[LS_DIGEST_HEX_SIZE];
        ls_status fs = ls_audit_stat(run->run_dir, s->name, 0, NULL, why, sizeof why);
        run->verify_checked++;
        if (fs == LS_ERR_IO) {
            st = add_problem(&run->verify, LS_VERIFY_MISSING, s->name, "listed in the manifest, absent");
            continue;
        }
        if (fs != LS_OK) {
            st = add_problem(&run->verify, LS_VERIFY_MISMATCH, s->name, why);
            continue;
        }
        /* one read: a file the audit parsed is judged by the digest of the bytes parsed, never read again */
        const ls_audit_read_record *rd = ls_audit_reads_find(&run->reads, s->name);
        if (rd != NULL) {
            snprintf(hex, sizeof hex, "%s", rd->sha256);
        } else if (ls_audit_digest(run->run_dir, s->name, hex, why, sizeof why) != LS_OK) {
            st = add_problem(&run->verify, LS_VERIFY_MISMATCH, s->name, why);
            continue;
        }
        if (strcmp(hex, s->sha256) != 0) {
            char d[200];
            snprintf(d, sizeof d, "sha256 %s %.64s, the manifest says %.64s",
                     rd != NULL ? "of the bytes the audit parsed is" : "is", hex, s->sha256);
            st = add_problem(&run->verify, LS_VERIFY_MISMATCH, s->name, d);
        }
    }
    if (st == LS_OK) {
        size_t seen = 0;
        st = walk_extras(run, "", 0, &seen);
    }
    if (st == LS_OK && run->reads.failed)
        st = add_problem(&run->verify, LS_VERIFY_MISMATCH, ".",
                         "a file's digest could not be taken from the bytes the audit parsed (a read error, or a file "
                         "read twice with other bytes): nothing verifies");
    /* a parsed file the manifest does not list is named by the walk; one it lists that was parsed from other
     * bytes is a mismatch above */
    run->verify_done = true;
    return st;
}

/* ---- the signature ------------------------------------------------------- */

ls_status ls_audit_verify_envelope(const char *const *keys, size_t n_keys, const char *env, size_t env_len,
                                   const char *type, char keyid[65], uint8_t **payload, size_t *payload_len,
                                   char *err, size_t errlen) {
    ls_status st = LS_ERR_SIGNATURE;
    keyid[0] = 0;
    for (size_t k = 0; k < n_keys; k++) {
        EVP_PKEY *pub = NULL;
        char why[320];
        st = ls_dsse_load_public(keys[k], &pub, why, sizeof why);
        if (st == LS_OK) st = ls_dsse_verify(env, env_len, type, pub, payload, payload_len, why, sizeof why);
        if (st == LS_OK) {
            char hex[LS_DIGEST_HEX_SIZE];
            if (ls_dsse_keyid(pub, hex) == LS_OK) snprintf(keyid, 65, "%s", hex);
            EVP_PKEY_free(pub);
            return LS_OK;
        }
        EVP_PKEY_free(pub);
        snprintf(err, errlen, "%s%s%.280s", n_keys > 1 ? keys[k] : "", n_keys > 1 ? ": " : "", why);
    }
    return st;
}

void ls_audit_check_dsse(ls_audit_run *run, const char *manifest_bytes, size_t manifest_len) {
    run->dsse_status = -1;
    uint64_t sz = 0;
    char why[320];
    run->dsse_present = ls_audit_stat(run->run_dir, LS_MANIFEST_DSSE_FILE, 0, &sz, why, sizeof why) == LS_OK;
    if (run->opt.n_keys == 0) return;
    char *env = NULL;
    uint8_t *payload = NULL;
    size_t env_len = 0, payload_len = 0;
    ls_status st = ls_audit_read(run->run_dir, LS_MANIFEST_DSSE_FILE, LS_AUDIT_MAX_JSON_FILE, &env, &env_len,
                                 run->dsse_err, sizeof run->dsse_err);
    if (st == LS_OK)
        st = ls_audit_verify_envelope(run->opt.keys, run->opt.n_keys, env, env_len, LS_DSSE_PAYLOAD_TYPE,
                                      run->dsse_keyid, &payload, &payload_len, run->dsse_err,
                                      sizeof run->dsse_err);
    if (st == LS_OK &&
        (manifest_bytes == NULL || payload_len != manifest_len || memcmp(payload, manifest_bytes, manifest_len) != 0)) {
        snprintf(run->dsse_err, sizeof run->dsse_err,
                 "%s: the signed payload is not the bytes of %s", LS_MANIFEST_DSSE_FILE, LS_MANIFEST_FILE);
        run->dsse_keyid[0] = 0;
        st = LS_ERR_SIGNATURE;
    }
    run->dsse_status = (int)st;
    free(env);
    free(payload);
}
