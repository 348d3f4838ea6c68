/* manifest.c - run manifest: listing and digesting the run directory,
 * writing, reading and verifying (contract in manifest.h). */
#include "receipts/signing/manifest.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "receipts/format/atomic_file.h"
#include "receipts/format/build_info.h"
#include "receipts/format/json_util.h"
#include "receipts/format/registry_file.h"
#include "receipts/writing/receipt.h"
#include "receipts/schema/schema.h"

#define PATH_CAP 4096

/* ---- listing the run directory ---------------------------------------- */

typedef struct {
    char *name;  /* relative path */
    int regular; /* 1: regular file; 0: anything else that is not a directory */
} entry;

typedef struct {
    entry *items;
    size_t count, cap;
} entry_list;

static void entries_free(entry_list *l) {
    for (size_t i = 0; i < l->count; i++) free(l->items[i].name);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static ls_status list_into(const char *root, const char *rel, entry_list *out, char *err,
                           size_t errlen) {
    char path[PATH_CAP];
    if (snprintf(path, sizeof path, "%s%s%s", root, rel[0] != '\0' ? "/" : "", rel) >=
        (int)sizeof path) {
        ls_json_errf(err, errlen, "%s/%s: path too long", root, rel);
        return LS_ERR_IO;
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        ls_json_errf(err, errlen, "%s: cannot list: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    ls_status st = LS_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
        if (rel[0] == '\0' && (strcmp(n, LS_MANIFEST_FILE) == 0 ||
                               strcmp(n, LS_MANIFEST_DSSE_FILE) == 0))
            continue;
        char child[PATH_CAP], full[PATH_CAP];
        if (snprintf(child, sizeof child, "%s%s%s", rel, rel[0] != '\0' ? "/" : "", n) >=
                (int)sizeof child ||
            snprintf(full, sizeof full, "%s/%s", root, child) >= (int)sizeof full) {
            ls_json_errf(err, errlen, "%s/%s: path too long", path, n);
            st = LS_ERR_IO;
            goto cleanup;
        }
        struct stat sb;
        if (lstat(full, &sb) != 0) {
            ls_json_errf(err, errlen, "%s: cannot stat: %s", full, strerror(errno));
            st = LS_ERR_IO;
            goto cleanup;
        }
        if (S_ISDIR(sb.st_mode)) {
            st = list_into(root, child, out, err, errlen);
            if (st != LS_OK) goto cleanup;
            continue;
        }
        if (out->count == out->cap) {
            size_t ncap = out->cap == 0 ? 32 : out->cap * 2;
            entry *ni = realloc(out->items, ncap * sizeof *ni);
            if (ni == NULL) {
                st = LS_ERR_NOMEM;
                goto cleanup;
            }
            out->items = ni;
            out->cap = ncap;
        }
        char *name = strdup(child);
        if (name == NULL) {
            st = LS_ERR_NOMEM;
            goto cleanup;
        }
        out->items[out->count].name = name;
        out->items[out->count].regular = S_ISREG(sb.st_mode);
        out->count++;
    }
cleanup:
    closedir(d);
    return st;
}

/* Every non-directory under run_dir except the manifest and its envelope,
 * sorted by relative path. */
static ls_status list_run_dir(const char *run_dir, entry_list *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ls_status st = list_into(run_dir, "", out, err, errlen);
    if (st != LS_OK) {
        entries_free(out);
        return st;
    }
    if (out->count > 0) qsort(out->items, out->count, sizeof *out->items, entry_cmp);
    return LS_OK;
}

static const ls_manifest_subject *find_subject(const ls_manifest *m, const char *name) {
    size_t lo = 0, hi = m->n_subjects;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->subjects[mid].name, name);
        if (c == 0) return &m->subjects[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ---- reading ------------------------------------------------------------ */

static const char *const RANK_STATUS[] = {"complete", "error", "missing"};

void ls_manifest_free(ls_manifest *m) {
    if (m == NULL) return;
    cJSON_Delete(m->priv_doc);
    free(m->priv_arrays);
    free(m);
}

static ls_status extract(ls_manifest *m, const char *what, char *err, size_t errlen) {
    const cJSON *doc = m->priv_doc;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
    const cJSON *subjects = cJSON_GetObjectItemCaseSensitive(doc, "subject");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(p, "ranks");
    uint64_t world = 0, files = 0;
    ls_json_get_u64(p, "world", &world);
    ls_json_get_u64(p, "files", &files);
    m->world = (uint32_t)world;
    m->run_id = cJSON_GetObjectItemCaseSensitive(p, "run_id")->valuestring;
    m->build = cJSON_GetObjectItemCaseSensitive(p, "build");
    m->config = cJSON_GetObjectItemCaseSensitive(p, "config");
    char why[400];
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(p, "profile");
    if (prof != NULL) { /* v2: required; v1: optional (an older run names none) */
        m->profile_name = cJSON_GetObjectItemCaseSensitive(prof, "name")->valuestring;
        m->profile_sha256 = cJSON_GetObjectItemCaseSensitive(prof, "sha256")->valuestring;
    }
    ls_status st = m->version == 2 ? ls_build_info_check_v2(m->build, why, sizeof why)
                                   : ls_build_info_check(m->build, why, sizeof why);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: /predicate/build: %s", what, why);
        return m->version == 2 && st != LS_ERR_NOMEM ? LS_ERR_CORRUPT : st;
    }
    size_t nr = (size_t)cJSON_GetArraySize(ranks), ns = (size_t)cJSON_GetArraySize(subjects);
    if (nr != world) {
        ls_json_errf(err, errlen, "%s: /predicate/ranks lists %zu ranks, world is %llu", what,
                     nr, (unsigned long long)world);
        return LS_ERR_FORMAT;
    }
    if (files != ns) {
        ls_json_errf(err, errlen, "%s: /predicate/files is %llu, but there are %zu subjects",
                     what, (unsigned long long)files, ns);
        return LS_ERR_FORMAT;
    }
    m->priv_arrays = calloc(nr * sizeof(ls_manifest_rank) + ns * sizeof(ls_manifest_subject) + 1, 1);
    if (m->priv_arrays == NULL) return LS_ERR_NOMEM;
    ls_manifest_subject *sub = m->priv_arrays;
    ls_manifest_rank *rk = (ls_manifest_rank *)(sub + ns);
    size_t i = 0;
    for (const cJSON *s = subjects->child; s != NULL; s = s->next, i++) {
        sub[i].name = cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring;
        const cJSON *dg = cJSON_GetObjectItemCaseSensitive(s, "digest");
        snprintf(sub[i].sha256, sizeof sub[i].sha256, "%s",
                 cJSON_GetObjectItemCaseSensitive(dg, "sha256")->valuestring);
        if (!ls_receipt_relpath_ok(sub[i].name)) {
            ls_json_errf(err, errlen, "%s: /subject/%zu/name \"%s\" is not a safe relative path",
                         what, i, sub[i].name);
            return LS_ERR_FORMAT;
        }
        if (i > 0 && strcmp(sub[i - 1].name, sub[i].name) >= 0) {
            ls_json_errf(err, errlen, "%s: /subject/%zu/name \"%s\" is out of order or repeated",
                         what, i, sub[i].name);
            return LS_ERR_FORMAT;
        }
    }
    m->subjects = sub;
    m->n_subjects = ns;
    i = 0;
    for (const cJSON *r = ranks->child; r != NULL; r = r->next, i++) {
        uint64_t rank = 0;
        ls_json_get_u64(r, "rank", &rank);
        if (rank != i) {
            ls_json_errf(err, errlen, "%s: /predicate/ranks/%zu has rank %llu, expected %zu",
                         what, i, (unsigned long long)rank, i);
            return LS_ERR_FORMAT;
        }
        rk[i].rank = (uint32_t)rank;
        const char *status = cJSON_GetObjectItemCaseSensitive(r, "status")->valuestring;
        for (int k = 0; k < 3; k++)
            if (strcmp(status, RANK_STATUS[k]) == 0) rk[i].status = (ls_manifest_rank_status)k;
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(r, "receipt");
        rk[i].receipt = cJSON_IsString(rec) ? rec->valuestring : NULL;
        if (rk[i].receipt != NULL && find_subject(m, rk[i].receipt) == NULL) {
            ls_json_errf(err, errlen, "%s: /predicate/ranks/%zu/receipt \"%s\" is not a subject",
                         what, i, rk[i].receipt);
            return LS_ERR_FORMAT;
        }
    }
    m->ranks = rk;
    m->n_ranks = nr;
    return LS_OK;
}

ls_status ls_manifest_parse(const char *bytes, size_t len, const char *what,
                            ls_manifest **out, char *err, size_t errlen) {
    *out = NULL;
    if (what == NULL) what = "manifest";
    cJSON *doc = NULL;
    ls_status st = ls_json_parse(bytes, len, what, &doc, err, errlen);
    if (st != LS_OK) return st;
    ls_manifest *m = NULL;
    const ls_schema *schema = NULL;
    ls_schema_errors errs = {0};
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(doc, "predicateType");
    int version = cJSON_IsString(pt) && strcmp(pt->valuestring, LS_MANIFEST_PREDICATE_TYPE_V2) == 0 ? 2 : 1;
    st = ls_schema_get(version == 2 ? "manifest-v2" : "manifest", &schema, err, errlen);
    if (st != LS_OK) goto cleanup;
    st = ls_schema_validate(schema, doc, &errs);
    if (st != LS_OK) {
        char first[600];
        ls_schema_errors_first(&errs, first, sizeof first);
        ls_json_errf(err, errlen, "%s: not a valid manifest: %s", what, first);
        goto cleanup;
    }
    /* v1: the family's keys by the registry (the schema names no family) */
    if (version == 1) {
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
        st = ls_registry_check_config(cJSON_GetObjectItemCaseSensitive(pred, "config"), what, err, errlen);
        if (st != LS_OK) goto cleanup;
    }
    m = calloc(1, sizeof *m);
    if (m == NULL) {
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    m->priv_doc = doc;
    doc = NULL;
    m->version = version;
    st = extract(m, what, err, errlen);
    if (st != LS_OK) goto cleanup;
    *out = m;
    m = NULL;
cleanup:
    ls_schema_errors_free(&errs);
    ls_manifest_free(m);
    cJSON_Delete(doc);
    return st;
}

ls_status ls_manifest_read(const char *path, ls_manifest **out, char *err, size_t errlen) {
    *out = NULL;
    char *raw = NULL;
    size_t len = 0;
    ls_status st = ls_json_read_bytes(path, &raw, &len, err, errlen);
    if (st == LS_OK) st = ls_manifest_parse(raw, len, path, out, err, errlen);
    free(raw);
    return st;
}

/* ---- writing ------------------------------------------------------------ */

/* Ranks from the receipts on disk; names[] holds the receipt paths. */
static ls_status scan_ranks(const char *run_dir, uint32_t world, ls_manifest_rank *ranks,
                            char (*names)[64], char *err, size_t errlen) {
    for (uint32_t r = 0; r < world; r++) {
        char path[PATH_CAP], dir[32];
        ls_receipt_rank_dir(r, dir, sizeof dir);
        snprintf(names[r], 64, "%s/receipt.json", dir);
        if (snprintf(path, sizeof path, "%s/%s", run_dir, names[r]) >= (int)sizeof path) {
            ls_json_errf(err, errlen, "%s: path too long", run_dir);
            return LS_ERR_ARG;
        }
        ranks[r].rank = r;
        struct stat sb;
        if (stat(path, &sb) != 0 && errno == ENOENT) {
            ranks[r].receipt = NULL;
            ranks[r].status = LS_MANIFEST_RANK_MISSING;
            continue;
        }
        ls_receipt *rec = NULL;
        ls_status st = ls_receipt_read(path, &rec, err, errlen);
        if (st != LS_OK) return st;
        ranks[r].receipt = names[r];
        ranks[r].status = rec->status == LS_RECEIPT_COMPLETE ? LS_MANIFEST_RANK_COMPLETE
                                                             : LS_MANIFEST_RANK_ERROR;
        ls_receipt_free(rec);
    }
    return LS_OK;
}

static ls_status build_doc(const ls_manifest *m, const entry_list *files, char (*hex)[65],
                           cJSON **out) {
    *out = NULL;
    cJSON *doc = cJSON_CreateObject();
    if (doc == NULL) return LS_ERR_NOMEM;
    cJSON_AddStringToObject(doc, "_type", LS_RECEIPT_STATEMENT_TYPE);
    cJSON *subjects = cJSON_AddArrayToObject(doc, "subject");
    for (size_t i = 0; i < files->count; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddItemToArray(subjects, s);
        cJSON_AddStringToObject(s, "name", files->items[i].name);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "digest"), "sha256", hex[i]);
    }
    cJSON_AddStringToObject(doc, "predicateType", LS_MANIFEST_PREDICATE_TYPE);
    cJSON *p = cJSON_AddObjectToObject(doc, "predicate");
    cJSON_AddStringToObject(p, "run_id", m->run_id);
    ls_json_add_u64(p, "world", m->world);
    cJSON_AddItemToObject(p, "build", cJSON_Duplicate(m->build, 1));
    cJSON_AddItemToObject(p, "config", cJSON_Duplicate(m->config, 1));
    if (m->profile_name != NULL) { /* the writer checked both are set */
        cJSON *prof = cJSON_AddObjectToObject(p, "profile");
        cJSON_AddStringToObject(prof, "name", m->profile_name);
        cJSON_AddStringToObject(prof, "sha256", m->profile_sha256);
    }
    cJSON *ranks = cJSON_AddArrayToObject(p, "ranks");
    for (size_t i = 0; i < m->n_ranks; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToArray(ranks, r);
        ls_json_add_u64(r, "rank", m->ranks[i].rank);
        if (m->ranks[i].receipt != NULL) cJSON_AddStringToObject(r, "receipt", m->ranks[i].receipt);
        else cJSON_AddNullToObject(r, "receipt");
        cJSON_AddStringToObject(r, "status", RANK_STATUS[m->ranks[i].status]);
    }
    ls_json_add_u64(p, "files", files->count);
    /* Add* failures leave members out; the schema check of the printed text
     * catches them, so only the containers are checked here. */
    if (subjects == NULL || p == NULL || ranks == NULL) {
        cJSON_Delete(doc);
        return LS_ERR_NOMEM;
    }
    *out = doc;
    return LS_OK;
}

ls_status ls_manifest_write(const char *run_dir, const ls_manifest *m, char *err,
                            size_t errlen) {
    if (run_dir == NULL || m == NULL) return LS_ERR_ARG;
    const char *missing = m->run_id == NULL  ? "run_id"
                          : m->build == NULL ? "build"
                          : m->config == NULL ? "config"
                          : m->world == 0    ? "world (0)"
                          : (m->profile_name == NULL) != (m->profile_sha256 == NULL)
                              ? "profile (its name and sha256 go together)"
                                             : NULL;
    for (size_t i = 0; missing == NULL && m->ranks != NULL && i < m->n_ranks; i++)
        if ((unsigned)m->ranks[i].status > LS_MANIFEST_RANK_MISSING) missing = "a valid rank status";
    if (missing != NULL) {
        ls_json_errf(err, errlen, "manifest: %s missing", missing);
        return LS_ERR_ARG;
    }
    char path[PATH_CAP];
    if (snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE) >= (int)sizeof path) {
        ls_json_errf(err, errlen, "%s: path too long", run_dir);
        return LS_ERR_ARG;
    }
    ls_status st = LS_OK;
    entry_list files = {0};
    char (*hex)[65] = NULL;
    ls_manifest_rank *scanned = NULL;
    char (*names)[64] = NULL;
    cJSON *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    ls_manifest *check = NULL;
    ls_manifest filled = *m;

    if (m->ranks == NULL) {
        scanned = calloc(m->world, sizeof *scanned);
        names = calloc(m->world, sizeof *names);
        if (scanned == NULL || names == NULL) {
            st = LS_ERR_NOMEM;
            goto cleanup;
        }
        st = scan_ranks(run_dir, m->world, scanned, names, err, errlen);
        if (st != LS_OK) goto cleanup;
        filled.ranks = scanned;
        filled.n_ranks = m->world;
    }
    st = list_run_dir(run_dir, &files, err, errlen);
    if (st != LS_OK) goto cleanup;
    hex = calloc(files.count + 1, sizeof *hex);
    if (hex == NULL) {
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    for (size_t i = 0; i < files.count; i++) {
        const char *name = files.items[i].name;
        if (!files.items[i].regular || !ls_receipt_relpath_ok(name)) {
            ls_json_errf(err, errlen, "%s/%s: %s; the manifest cannot list it", run_dir, name,
                         files.items[i].regular ? "name outside [A-Za-z0-9._+@=-]"
                                                : "not a regular file");
            st = LS_ERR_FORMAT;
            goto cleanup;
        }
        char full[PATH_CAP];
        snprintf(full, sizeof full, "%s/%s", run_dir, name);
        st = ls_digest_sha256_file_hex(full, hex[i], err, errlen);
        if (st != LS_OK) goto cleanup;
    }
    char inner[512];
    st = build_doc(&filled, &files, hex, &doc);
    if (st == LS_OK) st = ls_json_print(doc, &text, &len, inner, sizeof inner);
    /* the reader's own checks on the exact bytes about to be written */
    if (st == LS_OK) st = ls_manifest_parse(text, len, "manifest", &check, inner, sizeof inner);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: not written: %s", path,
                     st == LS_ERR_NOMEM ? "out of memory" : inner);
        goto cleanup;
    }
    st = ls_atomic_write(path, text, len, err, errlen);
cleanup:
    ls_manifest_free(check);
    free(text);
    cJSON_Delete(doc);
    free(hex);
    entries_free(&files);
    free(names);
    free(scanned);
    return st;
}

/* ---- verification ------------------------------------------------------ */

const char *ls_verify_kind_name(ls_verify_kind kind) {
    switch (kind) {
    case LS_VERIFY_MISSING: return "missing";
    case LS_VERIFY_EXTRA: return "extra";
    case LS_VERIFY_MISMATCH: return "mismatch";
    case LS_VERIFY_RECEIPT: return "receipt";
    }
    return "unknown";
}

void ls_verify_report_free(ls_verify_report *report) {
    if (report == NULL) return;
    for (size_t i = 0; i < report->count; i++) {
        free(report->items[i].name);
        free(report->items[i].detail);
    }
    free(report->items);
    memset(report, 0, sizeof *report);
}

ls_status ls_verify_report_add(ls_verify_report *rep, ls_verify_kind kind, const char *name, const char *fmt, ...) {
    if (rep->count == rep->cap) {
        size_t ncap = rep->cap == 0 ? 8 : rep->cap * 2;
        ls_verify_problem *ni = realloc(rep->items, ncap * sizeof *ni);
        if (ni == NULL) return LS_ERR_NOMEM;
        rep->items = ni;
        rep->cap = ncap;
    }
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    ls_verify_problem *p = &rep->items[rep->count];
    p->kind = kind;
    p->name = strdup(name);
    p->detail = strdup(detail);
    if (p->name == NULL || p->detail == NULL) {
        free(p->name);
        free(p->detail);
        return LS_ERR_NOMEM;
    }
    rep->count++;
    return LS_OK;
}

static ls_status check_files(const char *run_dir, const ls_manifest *m, const entry_list *files,
                             ls_verify_report *rep) {
    ls_status st = LS_OK;
    size_t i = 0, j = 0;
    while (st == LS_OK && (i < m->n_subjects || j < files->count)) {
        int c = i == m->n_subjects  ? 1
                : j == files->count ? -1
                                    : strcmp(m->subjects[i].name, files->items[j].name);
        if (c < 0) {
            st = ls_verify_report_add(rep, LS_VERIFY_MISSING, m->subjects[i].name,
                                      "listed in the manifest, absent from the run directory");
            i++;
        } else if (c > 0) {
            st = ls_verify_report_add(rep, LS_VERIFY_EXTRA, files->items[j].name, "%s",
                                      files->items[j].regular ? "not listed in the manifest"
                                                              : "not a regular file, not listed");
            j++;
        } else {
            const ls_manifest_subject *s = &m->subjects[i];
            char full[PATH_CAP], hex[LS_DIGEST_HEX_SIZE], why[512];
            snprintf(full, sizeof full, "%s/%s", run_dir, s->name);
            if (!files->items[j].regular) {
                st = ls_verify_report_add(rep, LS_VERIFY_MISMATCH, s->name, "not a regular file");
            } else if (ls_digest_sha256_file_hex(full, hex, why, sizeof why) != LS_OK) {
                st = ls_verify_report_add(rep, LS_VERIFY_MISMATCH, s->name, "%s", why);
            } else if (strcmp(hex, s->sha256) != 0) {
                st = ls_verify_report_add(rep, LS_VERIFY_MISMATCH, s->name,
                                          "sha256 is %s, the manifest says %s", hex, s->sha256);
            }
            i++;
            j++;
        }
    }
    return st;
}

/* Whether a receipt and the manifest name the same profile (or neither names one). */
static int same_profile(const char *rn, const char *rs, const char *mn, const char *ms) {
    if (rn == NULL || mn == NULL) return rn == mn;
    return strcmp(rn, mn) == 0 && rs != NULL && ms != NULL && strcmp(rs, ms) == 0;
}

static ls_status check_receipt(const char *run_dir, const ls_manifest *m,
                               const ls_manifest_rank *mr, ls_verify_report *rep) {
    char path[PATH_CAP], why[600];
    snprintf(path, sizeof path, "%s/%s", run_dir, mr->receipt);
    ls_receipt *r = NULL;
    if (ls_receipt_read(path, &r, why, sizeof why) != LS_OK)
        return ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt, "%s", why);
    ls_status st = LS_OK;
    const char *bd_m = cJSON_GetObjectItemCaseSensitive(m->build, "build_digest")->valuestring;
    const char *bd_r = cJSON_GetObjectItemCaseSensitive(r->build, "build_digest")->valuestring;
    ls_manifest_rank_status rs = r->status == LS_RECEIPT_COMPLETE ? LS_MANIFEST_RANK_COMPLETE
                                                                  : LS_MANIFEST_RANK_ERROR;
    const ls_manifest_subject *ev = find_subject(m, r->events_file);
    int mv = m->version == 2 ? 2 : 1; /* a caller-filled manifest (0) is v1 */
    if (r->version != mv)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt, "a v%d receipt, the manifest is v%d",
                                  r->version, mv);
    else if (!same_profile(r->profile_name, r->profile_sha256, m->profile_name, m->profile_sha256))
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt,
                                  "profile %s (%.12s...), the manifest says %s (%.12s...)",
                                  r->profile_name ? r->profile_name : "(none)",
                                  r->profile_sha256 ? r->profile_sha256 : "",
                                  m->profile_name ? m->profile_name : "(none)",
                                  m->profile_sha256 ? m->profile_sha256 : "");
    else if (r->rank != mr->rank)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt, "rank %u, the manifest says %u",
                                  (unsigned)r->rank, (unsigned)mr->rank);
    else if (r->world != m->world)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt, "world %u, the manifest says %u",
                                  (unsigned)r->world, (unsigned)m->world);
    else if (strcmp(r->run_id, m->run_id) != 0)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt,
                                  "run_id \"%s\", the manifest says \"%s\"", r->run_id, m->run_id);
    else if (strcmp(bd_r, bd_m) != 0)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt,
                                  "build_digest %s, the manifest says %s", bd_r, bd_m);
    else if (rs != mr->status)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt,
                                  "status \"%s\", the manifest says \"%s\"", RANK_STATUS[rs],
                                  RANK_STATUS[mr->status]);
    else if (ev == NULL)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt,
                                  "its events file %s is not a subject of the manifest", r->events_file);
    else if (strcmp(ev->sha256, r->events_sha256) != 0)
        st = ls_verify_report_add(rep, LS_VERIFY_RECEIPT, mr->receipt,
                                  "digest of %s is %s, the manifest says %s", r->events_file,
                                  r->events_sha256, ev->sha256);
    ls_receipt_free(r);
    return st;
}

ls_status ls_manifest_verify_parsed(const char *run_dir, const ls_manifest *m,
                                    ls_verify_report *report, char *err, size_t errlen) {
    entry_list files;
    ls_status st = list_run_dir(run_dir, &files, err, errlen);
    if (st != LS_OK) return st;
    size_t before = report->count;
    st = check_files(run_dir, m, &files, report);
    for (size_t i = 0; st == LS_OK && i < m->n_ranks; i++)
        if (m->ranks[i].receipt != NULL) st = check_receipt(run_dir, m, &m->ranks[i], report);
    entries_free(&files);
    if (st != LS_OK) return st;
    if (report->count > before) {
        ls_json_errf(err, errlen, "%s: %zu problem(s), first: %s %s", run_dir,
                     report->count - before, ls_verify_kind_name(report->items[before].kind),
                     report->items[before].name);
        return LS_ERR_CORRUPT;
    }
    return LS_OK;
}

ls_status ls_manifest_verify(const char *run_dir, ls_verify_report *report, char *err,
                             size_t errlen) {
    char path[PATH_CAP];
    if (snprintf(path, sizeof path, "%s/%s", run_dir, LS_MANIFEST_FILE) >= (int)sizeof path) {
        ls_json_errf(err, errlen, "%s: path too long", run_dir);
        return LS_ERR_ARG;
    }
    ls_manifest *m = NULL;
    ls_status st = ls_manifest_read(path, &m, err, errlen);
    if (st != LS_OK) return st;
    st = ls_manifest_verify_parsed(run_dir, m, report, err, errlen);
    ls_manifest_free(m);
    return st;
}
