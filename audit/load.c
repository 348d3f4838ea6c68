/* load.c - the audit's model of a run: manifest (and our own digest walk),
 * signature, receipts, parity report, and every rank's trace streamed once
 * into compact facts (audit.h).  Every file of the run is opened through
 * audit/run_files.h. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/audit.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "audit/run_files.h"
#include "receipts/digest.h"
#include "receipts/dsse.h"
#include "receipts/json_util.h"
#include "receipts/schema.h"
#include "receipts/trace_event.h"

#define WALK_MAX_DEPTH 8
#define WALK_MAX_ENTRIES 100000


static int intern_find(char **tab, size_t *n, bool *overflow, const char *name);

/* Index of name in a table (added when new); -1 when the table is full.
 * *hint: the index to try first (events repeat their names in the same
 * order: a hit nearly always), set to the result. */
static int intern(char **tab, size_t *n, bool *overflow, const char *name, int *hint) {
    if (*hint >= 0 && (size_t)*hint < *n && strcmp(tab[*hint], name) == 0) return *hint;
    int i = intern_find(tab, n, overflow, name);
    *hint = i;
    return i;
}

static int intern_find(char **tab, size_t *n, bool *overflow, const char *name) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp(tab[i], name) == 0) return (int)i;
    if (*n >= LS_AUDIT_MAX_NAMES - 1) {
        *overflow = true;
        return -1;
    }
    char *s = strdup(name);
    if (s == NULL) return -1;
    tab[*n] = s;
    return (int)(*n)++;
}

/* ---- the digest walk: every subject digested, every extra file named ---- */

static ls_status add_problem(ls_verify_report *rep, ls_verify_kind kind, const char *name, const char *detail) {
    if (rep->count == rep->cap) {
        size_t ncap = rep->cap ? rep->cap * 2 : 8;
        ls_verify_problem *ni = realloc(rep->items, ncap * sizeof *ni);
        if (ni == NULL) return LS_ERR_NOMEM;
        rep->items = ni;
        rep->cap = ncap;
    }
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
        if (++*seen > WALK_MAX_ENTRIES) {
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

static ls_status verify_subjects(ls_audit_run *run) {
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
        if (ls_audit_digest(run->run_dir, s->name, hex, why, sizeof why) != LS_OK) {
            st = add_problem(&run->verify, LS_VERIFY_MISMATCH, s->name, why);
        } else if (strcmp(hex, s->sha256) != 0) {
            char d[200];
            snprintf(d, sizeof d, "sha256 is %.64s, the manifest says %.64s", hex, s->sha256);
            st = add_problem(&run->verify, LS_VERIFY_MISMATCH, s->name, d);
        }
    }
    if (st == LS_OK) {
        size_t seen = 0;
        st = walk_extras(run, "", 0, &seen);
    }
    run->verify_done = true;
    return st;
}

/* ---- the signature ------------------------------------------------------- */

/* Verifies envelope bytes with each trusted key in turn: LS_OK with the
 * verifying key's id in keyid and the payload (caller frees), or the last
 * key's error in err. */
static ls_status verify_any(const char *const *keys, size_t n_keys, const char *env, size_t env_len,
                            const char *type, char keyid[65], uint8_t **payload, size_t *payload_len, char *err,
                            size_t errlen) {
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

static void check_dsse(ls_audit_run *run, const char *manifest_bytes, size_t manifest_len) {
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
        st = verify_any(run->opt.keys, run->opt.n_keys, env, env_len, LS_DSSE_PAYLOAD_TYPE, run->dsse_keyid, &payload,
                        &payload_len, run->dsse_err, sizeof run->dsse_err);
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

/* ---- traces -------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct {
    ls_audit_run *run;
    ls_audit_rank *r;
    int cur_phase;
    int64_t cur_step;
    ls_status st;
    int group_hint, purpose_hint; /* intern's hints */
} scan_ctx;

static bool get_int(const cJSON *j, const char *key, int64_t *out) {
    return ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(j, key), out);
}

static const char *get_str(const cJSON *j, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    return ls_json_is_string(it) ? it->valuestring : NULL;
}

static double get_num(const cJSON *j, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    return ls_json_is_number(it) ? it->valuedouble : 0.0;
}

/* The facts of step s (grown on demand); NULL when s is out of range. */
static ls_audit_step *step_at(scan_ctx *c, int64_t s) {
    ls_audit_rank *r = c->r;
    if (s < 0 || s >= LS_AUDIT_MAX_STEPS) {
        r->steps_overflow = true;
        return NULL;
    }
    if ((size_t)s >= r->steps_cap) {
        size_t ncap = r->steps_cap ? r->steps_cap : 16;
        while (ncap <= (size_t)s) ncap *= 2;
        ls_audit_step *n = realloc(r->steps, ncap * sizeof *n);
        if (n == NULL) {
            c->st = LS_ERR_NOMEM;
            return NULL;
        }
        memset(n + r->steps_cap, 0, (ncap - r->steps_cap) * sizeof *n);
        r->steps = n;
        r->steps_cap = ncap;
    }
    if (s + 1 > r->n_steps_seen) r->n_steps_seen = s + 1;
    if (s - 1 > r->steps_closed) {
        ls_status st = ls_audit_steps_advance(c->run, r, s);
        if (st != LS_OK) {
            c->st = st;
            return NULL;
        }
    }
    return &r->steps[s];
}

/* A byte count of a memory event: 0 <= v <= LS_TRACE_MAX_INT, else 0 and
 * *bad set (a hostile trace's -1 or 2^63 must not become a huge figure). */
static int64_t get_bytes(const cJSON *j, const char *key, int *bad) {
    int64_t v = 0;
    if (!get_int(j, key, &v) || v < 0 || v > LS_TRACE_MAX_INT) {
        *bad = 1;
        return 0;
    }
    return v;
}

static void on_memory(scan_ctx *c, const ls_trace_event *ev) {
    ls_audit_rank *r = c->r;
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(ev->json, "categories");
    int bad = 0;
    int64_t tl = get_bytes(ev->json, "total_live", &bad), tp = get_bytes(ev->json, "total_peak", &bad);
    int64_t rss = get_bytes(ev->json, "rss_peak", &bad);
    uint64_t sum_live = 0, sum_peak = 0, max_peak = 0;
    const cJSON *cat;
    int hint = 0; /* the categories come in the same order in every event */
    cJSON_ArrayForEach(cat, cats) {
        int64_t live = get_bytes(cat, "live", &bad), peak = get_bytes(cat, "peak", &bad);
        sum_live += (uint64_t)live;
        sum_peak += (uint64_t)peak;
        if ((uint64_t)peak > max_peak) max_peak = (uint64_t)peak;
        int i = intern(c->run->mem_cats, &c->run->n_mem_cats, &c->run->names_overflow, cat->string, &hint);
        hint = i + 1;
        if (i >= 0 && (uint64_t)peak > r->mem_peak[i]) r->mem_peak[i] = (uint64_t)peak;
    }
    r->n_memory++;
    if ((uint64_t)tp > r->mem_total_peak) r->mem_total_peak = (uint64_t)tp;
    if ((uint64_t)rss > r->mem_rss_peak) r->mem_rss_peak = (uint64_t)rss;
    const char *why = NULL;
    if (bad) why = "a byte count is missing, negative or above 2^53-1";
    else if (sum_live != (uint64_t)tl) why = "total_live is not the sum of the categories' live bytes";
    else if ((uint64_t)tp < max_peak) why = "total_peak is below a category's peak";
    else if ((uint64_t)tp > sum_peak) why = "total_peak is above the sum of the categories' peaks";
    else if ((uint64_t)tp < (uint64_t)tl) why = "total_peak is below total_live";
    if (why != NULL) {
        if (r->mem_bad++ == 0) {
            r->mem_bad_seq = ev->seq;
            snprintf(r->mem_bad_detail, sizeof r->mem_bad_detail,
                     "%s (total_live %lld, sum %llu; total_peak %lld, largest category %llu, sum %llu)", why,
                     (long long)tl, (unsigned long long)sum_live, (long long)tp, (unsigned long long)max_peak,
                     (unsigned long long)sum_peak);
        }
    }
}

/* The members on_event reads, NULL when absent: taken from the reader's
 * ls_trace_event.field by each kind's table positions, looked up once. */
typedef struct {
    const cJSON *step, *phase, *member, *layer, *kind, *dir, *wall_ns, *ok, *target, *sha256;
    const cJSON *group, *gseq, *op, *red, *count, *dtype, *purpose; /* collective */
    const cJSON *tokens;                                            /* layer_end */
} ev_fields;

#define EV_NFIELDS (sizeof(ev_fields) / sizeof(const cJSON *))
static const char *const EV_FIELD_NAMES[EV_NFIELDS] = {
    "step", "phase",  "member", "layer", "kind", "dir", "wall_ns", "ok",    "target",
    "sha256", "group", "gseq",  "op",    "red",  "count", "dtype", "purpose", "tokens"};

/* EV_POS[kind][k]: the table position of EV_FIELD_NAMES[k] in kind, -1 none */
static signed char EV_POS[LS_TRACE_KIND_COUNT][EV_NFIELDS];

/* Fills EV_POS (the same every time: ls_audit_load calls it first). */
static void ev_pos_init(void) {
    for (int k = 0; k < LS_TRACE_KIND_COUNT; k++)
        for (size_t f = 0; f < EV_NFIELDS; f++)
            EV_POS[k][f] = (signed char)ls_trace_field_index((ls_trace_kind)k, EV_FIELD_NAMES[f]);
}

/* The event's kind is known and its fields passed the reader's check. */
static void scan_fields(const ls_trace_event *ev, ev_fields *f) {
    const cJSON **slot = (const cJSON **)f;
    const signed char *pos = EV_POS[ev->kind];
    for (size_t k = 0; k < EV_NFIELDS; k++) slot[k] = pos[k] >= 0 ? ev->field[pos[k]] : NULL;
}

static const char *str_of(const cJSON *it) { return ls_json_is_string(it) ? it->valuestring : NULL; }

/* Copies src into dst[cap] (cut to fit), as snprintf "%s" would. */
static void copy_name(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* 64 lowercase hex digits into 32 bytes (the reader checked the form). */
static bool hex32(const char *h, uint8_t out[32]) {
    for (int i = 0; i < 64; i++) {
        char ch = h[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0) return false;
        out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] | v) : v << 4);
    }
    return h[64] == 0;
}

/* layer_end's fields, from an event the reader found valid (its fields
 * passed ls_trace_event_check: not flagged LS_TRACE_EVF_FIELDS), so
 * without checking them again as ls_trace_decode_layer_end does. */
static bool decode_layer_end(const ev_fields *f, ls_trace_layer_end *le) {
    const char *ph = str_of(f->phase), *kind = str_of(f->kind), *dir = str_of(f->dir);
    if (ph == NULL || kind == NULL || dir == NULL || !ls_trace_json_int(f->step, &le->step) ||
        !ls_trace_json_int(f->member, &le->member) || !ls_trace_json_int(f->layer, &le->layer))
        return false;
    int k = ls_trace_enum_from_name("layer_kind", kind), d = ls_trace_enum_from_name("dir", dir);
    if (k < 0 || d < 0) return false;
    le->phase = ph;
    le->kind = (ls_trace_layer_kind)k;
    le->dir = (ls_trace_dir)d;
    return true;
}

/* collective's fields, as decode_layer_end (and ls_trace_decode_collective,
 * less its second check); bytes is not read by the audit. */
static bool decode_collective(const ev_fields *f, ls_trace_collective *tc) {
    const char *g = str_of(f->group), *op = str_of(f->op), *red = str_of(f->red), *dt = str_of(f->dtype);
    tc->purpose = str_of(f->purpose);
    if (g == NULL || op == NULL || red == NULL || dt == NULL || tc->purpose == NULL ||
        !ls_trace_json_int(f->gseq, &tc->gseq) || !ls_trace_json_int(f->count, &tc->count))
        return false;
    int o = ls_trace_enum_from_name("op", op), r = ls_trace_enum_from_name("red", red),
        d = ls_trace_enum_from_name("dtype", dt);
    if (o < 0 || r < 0 || d < 0) return false;
    tc->group = g;
    tc->op = (ls_trace_op)o;
    tc->red = (ls_trace_red)r;
    tc->dtype = (ls_trace_dtype)d;
    tc->bytes = 0;
    tc->has_layer = f->layer != NULL;
    tc->layer = 0;
    if (tc->has_layer && !ls_trace_json_int(f->layer, &tc->layer)) return false;
    return true;
}

static void on_collective(scan_ctx *c, const ls_trace_event *ev, const ev_fields *f) {
    ls_audit_rank *r = c->r;
    ls_trace_collective tc;
    if (!decode_collective(f, &tc)) return;
    int g = intern(c->run->groups, &c->run->n_groups, &c->run->names_overflow, tc.group, &c->group_hint);
    int p = intern(c->run->purposes, &c->run->n_purposes, &c->run->names_overflow, tc.purpose,
                   &c->purpose_hint);
    if (g < 0 || p < 0) return;
    r->n_coll_total++;
    int64_t key[6] = {tc.gseq, tc.op, tc.red, tc.count, tc.dtype, p};
    r->group_hash[g] = fnv(r->group_hash[g] ? r->group_hash[g] : 1469598103934665603ull, key, sizeof key);
    r->group_count[g]++;
    bool in_step = c->cur_phase >= 0 && c->cur_step >= 0 && c->cur_step < LS_AUDIT_MAX_STEPS;
    if (in_step) {
        ls_status st = ls_audit_steps_coll(r, c->cur_step, c->cur_phase, tc.has_layer ? tc.layer : -2, (uint16_t)p,
                                           ev->seq);
        if (st != LS_OK) {
            c->st = st;
            return;
        }
        if (c->cur_phase == LS_PHASE_FINALIZE && !tc.has_layer && (size_t)c->cur_step < r->steps_cap) {
            if (strcmp(tc.purpose, "grad_finalize") == 0) r->steps[c->cur_step].fin_mask |= 1;
            if (strcmp(tc.purpose, "digest_check") == 0) r->steps[c->cur_step].fin_mask |= 2;
        }
    }
    if (c->run->world <= 1) return; /* no flight recorder for one rank */
    size_t cap = LS_AUDIT_MAX_COLL / c->run->world;
    if (cap < 4096) cap = 4096;
    if (r->n_coll >= cap) return; /* beyond: the per-group fingerprints above */
    if (r->n_coll == r->coll_cap) {
        size_t ncap = r->coll_cap ? r->coll_cap * 2 : 256;
        ls_audit_coll *n = realloc(r->coll, ncap * sizeof *n);
        if (n == NULL) {
            c->st = LS_ERR_NOMEM;
            return;
        }
        r->coll = n;
        r->coll_cap = ncap;
    }
    ls_audit_coll *k = &r->coll[r->n_coll++];
    k->seq = ev->seq;
    k->gseq = tc.gseq;
    k->count = tc.count;
    k->layer = tc.has_layer ? tc.layer : -2;
    k->step = c->cur_phase >= 0 ? c->cur_step : -1;
    k->group = (uint16_t)g;
    k->purpose = (uint16_t)p;
    k->op = (uint8_t)tc.op;
    k->red = (uint8_t)tc.red;
    k->dtype = (uint8_t)tc.dtype;
    k->phase = (uint8_t)(c->cur_phase >= 0 ? c->cur_phase : LS_AUDIT_NPHASE - 1);
}

static int on_event(const ls_trace_event *ev, void *user) {
    scan_ctx *c = user;
    ls_audit_rank *r = c->r;
    r->n_events++;
    r->last_seq = ev->seq;
    copy_name(r->last_ev, sizeof r->last_ev, ev->ev);
    if (r->n_events == 1) r->first_ts = ev->ts_ns;
    r->last_ts = ev->ts_ns;
    if (ev->flags & (LS_TRACE_EVF_FIELDS | LS_TRACE_EVF_UNKNOWN_KIND)) return 0; /* reported by the reader */
    const cJSON *j = ev->json;
    ev_fields f;
    scan_fields(ev, &f);
    int64_t step = -1;
    bool has_step = ls_trace_json_int(f.step, &step);
    ls_audit_step *sf = has_step ? step_at(c, step) : NULL;
    if (sf != NULL && ev->prefix_frozen) sf->prefix_frozen = 1;
    switch (ev->kind) {
    case LS_TRACE_PHASE_BEGIN: {
        const char *ph = str_of(f.phase);
        int p = ls_audit_phase_index(ph);
        r->phase_begin[p]++;
        c->cur_phase = p;
        c->cur_step = step;
        snprintf(r->last_phase, sizeof r->last_phase, "%s", ph ? ph : "?");
        r->in_phase = true;
        break;
    }
    case LS_TRACE_PHASE_END: {
        int p = ls_audit_phase_index(str_of(f.phase));
        r->phase_end[p]++;
        int64_t w = 0;
        if (ls_trace_json_int(f.wall_ns, &w)) r->phase_wall_ns[p] += (uint64_t)w;
        if (ls_json_is_true(f.ok) && sf != NULL) sf->phase_mask |= (uint8_t)(1u << p);
        c->cur_phase = -1;
        r->in_phase = false;
        break;
    }
    case LS_TRACE_LAYER_END: {
        ls_trace_layer_end le;
        if (!decode_layer_end(&f, &le)) break;
        int p = ls_audit_phase_index(le.phase);
        if (le.dir == LS_TRACE_DIR_FWD) r->layer_fwd++;
        else r->layer_bwd++;
        int64_t tok = 0; /* the segment's length: the shape of the strategy (sources.agree) */
        if ((le.kind == LS_TRACE_LAYER_GDN || le.kind == LS_TRACE_LAYER_ATTN || le.kind == LS_TRACE_LAYER_MLA) &&
            ls_trace_json_int(f.tokens, &tok)) {
            if (p == LS_PHASE_REPLAY && tok > r->replay_tokens_max) r->replay_tokens_max = tok;
            if (p == LS_PHASE_CAPTURE && tok > r->capture_tokens_max) r->capture_tokens_max = tok;
        }
        r->last_step = le.step;
        r->last_member = le.member;
        r->last_layer = le.layer;
        copy_name(r->last_layer_phase, sizeof r->last_layer_phase, le.phase);
        copy_name(r->last_layer_dir, sizeof r->last_layer_dir, ls_trace_dir_name(le.dir));
        if (sf != NULL) /* else the step index is out of range: rank.phases names it */
            c->st = ls_audit_steps_layer(r, le.step, p, le.member, le.layer, (int)le.dir, (int)le.kind, ev->seq);
        break;
    }
    case LS_TRACE_COLLECTIVE:
        on_collective(c, ev, &f);
        break;
    case LS_TRACE_OPTIMIZER_STEP:
        if (sf != NULL && sf->opt_count++ == 0) sf->opt_seq = ev->seq;
        break;
    case LS_TRACE_PARAM_DIGEST: {
        r->n_param_digests++;
        const char *t = str_of(f.target), *h = str_of(f.sha256);
        if (t && h && strcmp(t, "trainable") == 0 && sf != NULL && !sf->has_digest && hex32(h, sf->digest)) {
            sf->has_digest = 1;
            sf->digest_seq = ev->seq;
        }
        break;
    }
    case LS_TRACE_MEMORY:
        on_memory(c, ev);
        break;
    case LS_TRACE_ERROR:
        if (r->n_errors++ == 0) {
            r->first_error_seq = ev->seq;
            const char *m = get_str(j, "message");
            snprintf(r->first_error, sizeof r->first_error, "%.250s", m ? m : "(no message)");
        }
        break;
    case LS_TRACE_RANK_COMPLETE:
        r->rank_complete = true;
        r->rank_complete_seq = ev->seq;
        break;
    case LS_TRACE_STEP_METRICS:
        if (r->n_metrics < LS_AUDIT_MAX_STEPS) {
            if (r->n_metrics == r->metrics_cap) {
                size_t ncap = r->metrics_cap ? r->metrics_cap * 2 : 16;
                ls_audit_step_metric *n = realloc(r->metrics, ncap * sizeof *n);
                if (n == NULL) {
                    c->st = LS_ERR_NOMEM;
                    break;
                }
                r->metrics = n;
                r->metrics_cap = ncap;
            }
            ls_audit_step_metric *m = &r->metrics[r->n_metrics++];
            m->step = step;
            m->seq = ev->seq;
            m->loss = get_num(j, "loss");
            m->reward_mean = get_num(j, "reward_mean");
            m->kl_mean = get_num(j, "kl_mean");
            m->grad_norm = get_num(j, "grad_norm");
            m->step_wall_s = get_num(j, "step_wall_s");
            m->prefix_frozen = ev->prefix_frozen;
            const char *o = get_str(j, "objective");
            m->sft = o != NULL && strcmp(o, "sft") == 0;
        }
        if (sf != NULL && !sf->metrics_seen) { /* the step's first step_metrics decides */
            const char *o = get_str(j, "objective");
            sf->metrics_seen = 1;
            sf->sft = o != NULL && strcmp(o, "sft") == 0;
        }
        break;
    default:
        break;
    }
    return c->st != LS_OK;
}

static ls_status load_trace(ls_audit_run *run, ls_audit_rank *r) {
    char dir[32];
    ls_receipt_rank_dir(r->rank, dir, sizeof dir);
    snprintf(r->trace_file, sizeof r->trace_file, "%s/events.jsonl.zst", dir);
    r->last_step = r->last_member = r->last_layer = -2;
    r->last_seq = r->first_error_seq = r->rank_complete_seq = r->mem_bad_seq = r->late_seq = -1;
    r->win[0].step = r->win[1].step = -1;
    uint64_t sz = 0;
    ls_status st = LS_OK;
    int fd = ls_audit_open(run->run_dir, r->trace_file, 0, &sz, &st, r->trace_err, sizeof r->trace_err);
    if (fd < 0) return LS_OK; /* the rules name it */
    r->trace_present = true;
    scan_ctx c = {.run = run, .r = r, .cur_phase = -1, .cur_step = -1, .st = LS_OK};
    st = ls_trace_read_fd(fd, r->trace_file, on_event, &c, &r->report);
    if (st == LS_ERR_NOMEM || st == LS_ERR_ARG || c.st == LS_ERR_NOMEM) return LS_ERR_NOMEM;
    return ls_audit_steps_finish(run, r);
}

/* ---- receipts, world ----------------------------------------------------- */

static void load_receipt(ls_audit_run *run, ls_audit_rank *r) {
    char rel[64], dir[32];
    ls_receipt_rank_dir(r->rank, dir, sizeof dir);
    snprintf(rel, sizeof rel, "%s/receipt.json", dir);
    struct stat sb;
    char path[4096];
    ls_audit_path(run->run_dir, dir, path, sizeof path);
    r->dir_present = lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char *bytes = NULL;
    size_t len = 0;
    ls_status st = ls_audit_read(run->run_dir, rel, LS_AUDIT_MAX_JSON_FILE, &bytes, &len, r->receipt_err,
                                 sizeof r->receipt_err);
    if (st == LS_ERR_IO) {
        uint64_t s = 0;
        char why[64];
        r->receipt_present = ls_audit_stat(run->run_dir, rel, 0, &s, why, sizeof why) != LS_ERR_IO;
        return;
    }
    r->receipt_present = true;
    if (st != LS_OK) return;
    st = ls_receipt_parse(bytes, len, rel, &r->receipt, r->receipt_err, sizeof r->receipt_err);
    free(bytes);
    if (st != LS_OK) r->receipt = NULL;
}

/* Largest N+1 of rank-NNNN directories in the run directory (0: none). */
static uint32_t scan_rank_dirs(const char *run_dir) {
    DIR *d = opendir(run_dir);
    if (d == NULL) return 0;
    uint32_t w = 0;
    struct dirent *de;
    size_t n = 0;
    while ((de = readdir(d)) != NULL && n++ < WALK_MAX_ENTRIES) {
        const char *s = de->d_name;
        if (strncmp(s, "rank-", 5) != 0 || strlen(s) < 9 || strlen(s) > 12) continue;
        char *end = NULL;
        unsigned long v = strtoul(s + 5, &end, 10);
        if (*end != 0 || s[5] < '0' || s[5] > '9') continue;
        if (v < LS_AUDIT_MAX_WORLD && v + 1 > w) w = (uint32_t)v + 1;
    }
    closedir(d);
    return w;
}

static void derive_config(ls_audit_run *run) {
    for (uint32_t i = 0; i < run->world && run->config == NULL; i++) {
        const ls_receipt *rc = run->ranks[i].receipt;
        if (rc == NULL) continue;
        run->config = rc->config;
        run->build_digest = get_str(rc->build, "build_digest");
    }
    if (run->config == NULL && run->manifest != NULL) {
        run->config = run->manifest->config;
        run->build_digest = get_str(run->manifest->build, "build_digest");
    }
    run->n_layers = -1;
    run->cfg_group = run->cfg_steps = -1;
    run->first_step = 0;
    if (run->config == NULL) return;
    get_int(run->config, "n_layers", &run->n_layers);
    /* what the trainer records it was asked for (older runs: absent, inferred from the traces) */
    int64_t v = 0;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(run->config, "group");
    if (get_int(run->config, "group", &v) && v >= 1 && v <= LS_AUDIT_MAX_MEMBER) run->cfg_group = v;
    else if (g != NULL && !(get_int(run->config, "group", &v) && v == -1)) /* -1: set by each rollouts line */
        snprintf(run->cfg_note, sizeof run->cfg_note, "config \"group\" is not an integer 1..%d or -1: not used",
                 LS_AUDIT_MAX_MEMBER);
    const cJSON *sr = cJSON_GetObjectItemCaseSensitive(run->config, "steps_requested");
    if (get_int(run->config, "steps_requested", &v) && v >= 1 && v <= LS_AUDIT_MAX_STEPS) run->cfg_steps = v;
    else if (sr != NULL && !(get_int(run->config, "steps_requested", &v) && v == -1))
        snprintf(run->cfg_note, sizeof run->cfg_note,
                 "config \"steps_requested\" is not an integer 1..%d or -1: not used", LS_AUDIT_MAX_STEPS);
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(run->config, "first_step");
    if (get_int(run->config, "first_step", &v) && v >= 0 && v < LS_AUDIT_MAX_STEPS) run->first_step = v;
    else if (fs != NULL)
        snprintf(run->cfg_note, sizeof run->cfg_note, "config \"first_step\" is not an integer 0..%d: not used",
                 LS_AUDIT_MAX_STEPS - 1);
    const char *gm = get_str(run->config, "grad_mode");
    run->full_mode = gm != NULL && strcmp(gm, "full") == 0;
    const char *sg = get_str(run->config, "strategy");
    run->naive = sg != NULL && strcmp(sg, "naive") == 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(run->config, "faults")) {
        if (!ls_json_is_string(f)) continue;
        run->any_fault = true;
        if (strcmp(f->valuestring, "cp-local-attention") == 0) run->fault_local_attention = true;
        if (strcmp(f->valuestring, "skip-dkv-reduce") == 0) run->fault_skip_dkv = true;
        if (strcmp(f->valuestring, "skip-grad-finalize") == 0) run->fault_skip_finalize = true;
    }
}

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
        st = verify_any(run->opt.parity_keys, run->opt.n_parity_keys, env, env_len, LS_DSSE_PARITY_PAYLOAD_TYPE,
                        run->parity_keyid, &payload, &payload_len, run->parity_dsse_err, sizeof run->parity_dsse_err);
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

static void load_parity(ls_audit_run *run) {
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

ls_status ls_audit_load(const ls_audit_options *opt, ls_audit_run **out, char *err, size_t errlen) {
    ev_pos_init();
    *out = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct stat sb;
    if (opt == NULL || opt->run_dir == NULL) {
        ls_json_errf(err, errlen, "no run directory given");
        return LS_ERR_ARG;
    }
    errno = 0;
    if (lstat(opt->run_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        ls_json_errf(err, errlen, "%s: not a run directory (%s)", opt->run_dir,
                     errno               ? strerror(errno)
                     : S_ISLNK(sb.st_mode) ? "a symbolic link: links are never followed; give the real directory"
                                         : "not a directory");
        return S_ISLNK(sb.st_mode) ? LS_ERR_FORMAT : LS_ERR_IO;
    }
    ls_audit_run *run = calloc(1, sizeof *run);
    char *mbytes = NULL;
    size_t mlen = 0;
    ls_status st = LS_ERR_NOMEM;
    if (run == NULL) goto cleanup;
    run->digest_first_step = -1;
    run->run_dir = strdup(opt->run_dir);
    if (run->run_dir == NULL) goto cleanup;
    run->opt = *opt;
    run->opt.run_dir = NULL; /* run->run_dir is the model's own copy */
    /* the manifest */
    st = ls_audit_read(run->run_dir, LS_MANIFEST_FILE, LS_AUDIT_MAX_JSON_FILE, &mbytes, &mlen, run->manifest_err,
                       sizeof run->manifest_err);
    run->manifest_present = st != LS_ERR_IO;
    if (st == LS_OK) {
        st = ls_manifest_parse(mbytes, mlen, LS_MANIFEST_FILE, &run->manifest, run->manifest_err,
                               sizeof run->manifest_err);
        if (st != LS_OK) run->manifest = NULL;
    }
    if (st == LS_ERR_NOMEM) goto cleanup;
    /* the world */
    uint32_t dirs = scan_rank_dirs(run->run_dir);
    if (run->manifest != NULL && run->manifest->world <= LS_AUDIT_MAX_WORLD) {
        run->world = run->manifest->world;
        snprintf(run->world_source, sizeof run->world_source, "manifest");
    } else {
        run->world = dirs;
        snprintf(run->world_source, sizeof run->world_source, "rank directories");
    }
    if (run->world == 0 && !run->manifest_present) {
        ls_json_errf(err, errlen, "%s: not a run directory (no %s, no rank-NNNN directory)", opt->run_dir,
                     LS_MANIFEST_FILE);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    if (run->world < dirs) run->world = dirs; /* more rank dirs than the manifest says: audited too */
    st = LS_ERR_NOMEM;
    run->ranks = calloc(run->world ? run->world : 1, sizeof *run->ranks);
    if (run->ranks == NULL) goto cleanup;
    for (uint32_t i = 0; i < run->world; i++) {
        run->ranks[i].rank = i;
        load_receipt(run, &run->ranks[i]);
    }
    /* without a manifest the receipts or the trace headers may know a larger world */
    if (run->manifest == NULL) {
        uint32_t w = run->world;
        for (uint32_t i = 0; i < run->world; i++)
            if (run->ranks[i].receipt && run->ranks[i].receipt->world > w &&
                run->ranks[i].receipt->world <= LS_AUDIT_MAX_WORLD)
                w = run->ranks[i].receipt->world;
        if (w > run->world) {
            ls_audit_rank *n = realloc(run->ranks, w * sizeof *n);
            if (n == NULL) goto cleanup;
            memset(n + run->world, 0, (w - run->world) * sizeof *n);
            run->ranks = n;
            for (uint32_t i = run->world; i < w; i++) {
                run->ranks[i].rank = i;
                load_receipt(run, &run->ranks[i]);
            }
            run->world = w;
            snprintf(run->world_source, sizeof run->world_source, "receipts");
        }
    }
    derive_config(run); /* the layer checks run while the traces stream */
    for (uint32_t i = 0; i < run->world; i++) {
        run->ranks[i].steps_closed = run->first_step; /* earlier steps are not this run's: an event of one is late */
        st = load_trace(run, &run->ranks[i]);
        if (st != LS_OK) goto cleanup;
    }
    if (run->manifest != NULL) {
        st = verify_subjects(run);
        if (st != LS_OK) goto cleanup;
    }
    check_dsse(run, mbytes, mlen);
    load_parity(run);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    run->load_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    st = LS_OK;
    *out = run;
    run = NULL;
cleanup:
    if (st == LS_ERR_NOMEM) ls_json_errf(err, errlen, "%s: out of memory", opt->run_dir);
    free(mbytes);
    ls_audit_free(run);
    return st;
}

void ls_audit_free(ls_audit_run *run) {
    if (run == NULL) return;
    for (uint32_t i = 0; run->ranks && i < run->world; i++) {
        ls_audit_rank *r = &run->ranks[i];
        ls_receipt_free(r->receipt);
        ls_trace_report_free(&r->report);
        ls_audit_steps_free(r);
        free(r->coll);
        free(r->steps);
        free(r->metrics);
    }
    free(run->ranks);
    for (size_t i = 0; i < run->n_groups; i++) free(run->groups[i]);
    for (size_t i = 0; i < run->n_purposes; i++) free(run->purposes[i]);
    for (size_t i = 0; i < run->n_mem_cats; i++) free(run->mem_cats[i]);
    ls_manifest_free(run->manifest);
    ls_verify_report_free(&run->verify);
    cJSON_Delete(run->parity);
    free(run->rules);
    free(run->digest_splits);
    free(run->run_dir);
    free(run);
}
