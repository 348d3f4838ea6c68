/* trace_reader.c - streaming, reporting reader of one rank's trace (see
 * trace_reader.h).
 *
 * Three layers, each bounded in memory:
 *  source  - the file or memory, read into `in` (ZSTD_DStreamInSize bytes);
 *  decode  - plain bytes copied, or zstd frames decompressed, into the text
 *            window `win`; [0, ver) of the window is verified text (plain, or
 *            zstd whose frame checksum has passed), [ver, end) is not yet;
 *  lines   - complete lines are cut from the verified text, parsed strictly
 *            (the header by the lexer and cJSON, every other line by
 *            trace_lex.c's one-pass parser into pooled nodes) and checked;
 *            problems become diagnostics.
 * The window grows from 64 KiB to at most WIN_MAX; a frame whose content
 * cannot be held until its checksum is reached, or that the input ends
 * inside, is delivered unverified.
 * This file holds the lines and events layers and the API; the source and
 * decode layers are in trace_reader_decode.c (the state both use is in
 * trace_reader_internal.h), the strict lexer in trace_lex.c. */
#include "receipts/reading/trace_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/reading/trace_lex.h"
#include "receipts/reading/trace_reader_internal.h"

static const char *const DIAG_NAMES[LS_TRACE_DIAG_CODE_COUNT] = {
    "io",          "header",        "corrupt_frame", "truncated",      "incomplete",
    "overlong_line", "malformed_line", "envelope",   "key_order",      "rank_mismatch",
    "seq_gap",     "seq_duplicate", "seq_order",     "ts_backwards",   "field",
    "unknown_kind", "after_complete", "count_mismatch", "no_checksum", "unverified",
};

const char *ls_trace_diag_name(ls_trace_diag_code c) {
    return (int)c >= 0 && c < LS_TRACE_DIAG_CODE_COUNT ? DIAG_NAMES[c] : "unknown";
}

bool ls_trace_diag_is_error(ls_trace_diag_code c) {
    return !(c == LS_TRACE_DIAG_UNKNOWN_KIND || c == LS_TRACE_DIAG_NO_CHECKSUM ||
             c == LS_TRACE_DIAG_UNVERIFIED);
}

const char *ls_trace_end_name(ls_trace_end e) {
    static const char *const N[] = {"none", "clean", "incomplete", "truncated", "corrupt", "failed",
                                    "stopped"};
    return (int)e >= 0 && e <= LS_TRACE_END_STOPPED ? N[e] : "unknown";
}

void ls_trace_report_free(ls_trace_report *rep) {
    if (rep == NULL) return;
    free(rep->path);
    cJSON_Delete(rep->header);
    free(rep->diags);
    memset(rep, 0, sizeof *rep);
}

ls_status ls_trace_report_status(const ls_trace_report *rep) {
    if (rep == NULL) return LS_ERR_ARG;
    if (rep->end == LS_TRACE_END_FAILED || rep->counts[LS_TRACE_DIAG_IO]) return LS_ERR_IO;
    if (rep->end == LS_TRACE_END_CORRUPT) return LS_ERR_CORRUPT;
    if (rep->end == LS_TRACE_END_TRUNCATED || rep->end == LS_TRACE_END_INCOMPLETE ||
        rep->end == LS_TRACE_END_NONE)
        return LS_ERR_TRUNCATED;
    for (int c = 0; c < LS_TRACE_DIAG_CODE_COUNT; c++)
        if (rep->counts[c] && ls_trace_diag_is_error((ls_trace_diag_code)c)) return LS_ERR_FORMAT;
    return LS_OK;
}

/* ---- diagnostics ---------------------------------------------------------- */

void ls_trace_reader_vdiag(ls_trace_reader *r, ls_trace_diag_code code, const loc *at, int64_t seq,
                           int64_t expected, int64_t got, const char *fmt, va_list ap) {
    ls_trace_report *rep = &r->rep;
    rep->counts[code]++;
    if (rep->n_diags >= LS_TRACE_MAX_DIAGS) {
        rep->n_diags_dropped++;
        return;
    }
    if (rep->n_diags == r->diag_cap) {
        size_t ncap = r->diag_cap ? 2 * r->diag_cap : 8;
        if (ncap > LS_TRACE_MAX_DIAGS) ncap = LS_TRACE_MAX_DIAGS;
        ls_trace_diag *nd = realloc(rep->diags, ncap * sizeof *nd);
        if (nd == NULL) {
            rep->n_diags_dropped++;
            return;
        }
        rep->diags = nd;
        r->diag_cap = ncap;
    }
    ls_trace_diag *d = &rep->diags[rep->n_diags++];
    d->code = code;
    d->line = at ? at->line : -1;
    d->byte_offset = at ? at->byte_offset : rep->file_bytes;
    d->text_offset = at ? at->text_offset : rep->text_bytes;
    d->seq = seq;
    d->expected = expected;
    d->got = got;
    vsnprintf(d->message, sizeof d->message, fmt, ap);
}

/* ---- lines ---------------------------------------------------------------- */

static loc line_loc(const ls_trace_reader *r, size_t line_end) {
    loc at;
    at.line = r->line_no;
    at.text_offset = r->win_base + r->start;
    if (!r->rep.compressed) at.byte_offset = at.text_offset;
    else at.byte_offset = line_end >= r->ver ? r->frame_start : r->ver_frame_start;
    return at;
}

/* Reports the line at `start` as overlong (it is then skipped); line 1 is
 * the header, which is then missing. */
static void overlong(ls_trace_reader *r, size_t line_end) {
    loc at = line_loc(r, line_end);
    diag(r, LS_TRACE_DIAG_OVERLONG_LINE, &at, r->rep.last_seq, -1, -1,
         "line %lld is longer than %zu bytes: skipped", (long long)r->line_no, LS_TRACE_MAX_LINE);
    if (r->line_no == 1) {
        r->header_done = true;
        diag(r, LS_TRACE_DIAG_HEADER, &at, -1, -1, -1, "line 1 (the header) is overlong: header missing");
    }
}

/* Finds the next complete line [start, *nl); false when no more will come. */
static bool next_line(ls_trace_reader *r, size_t *nl) {
    for (;;) {
        size_t limit = r->unverified ? r->end : r->ver;
        if (limit < r->start) limit = r->start; /* delivered unverified past ver */
        if (r->scan < r->start) r->scan = r->start;
        const char *p = r->scan < limit ? memchr(r->win + r->scan, '\n', limit - r->scan) : NULL;
        if (p != NULL) {
            size_t pos = (size_t)(p - r->win);
            if (r->discarding || pos - r->start >= LS_TRACE_MAX_LINE) {
                if (!r->discarding) overlong(r, pos);
                r->discarding = false;
                r->rep.n_lines++;
                r->line_no++;
                r->start = r->scan = pos + 1;
                continue;
            }
            *nl = pos;
            return true;
        }
        r->scan = limit;
        if (!r->discarding && limit - r->start >= LS_TRACE_MAX_LINE) {
            overlong(r, limit);
            r->discarding = true;
        }
        if (r->discarding) r->start = r->scan; /* drop what was scanned */
        if (r->decode_done || r->stop) return false;
        ls_trace_reader_make_space(r);
        if (r->stop) return false;
        if (r->end == r->win_cap) continue; /* unverified mode: rescan the full window */
        ls_trace_reader_fill(r);
    }
}

/* Releases a parsed line: a pool tree (r->pool_tree) by resetting the
 * pool, a cJSON tree (line 1) by cJSON_Delete.  NULL is a no-op. */
static void drop_json(ls_trace_reader *r, cJSON *j) {
    if (j == NULL) return;
    if (j == r->pool_tree) {
        r->pool_tree = NULL;
        ls_trace_pool_reset(&r->pool);
    } else {
        cJSON_Delete(j);
    }
}

/* Parses one line strictly; NULL (after a diagnostic of `code`) if it is not
 * one JSON object.  Line 1 (the header, kept in the report) goes through
 * ls_trace_lex_json and cJSON; every other line through ls_trace_lex_parse
 * (the same strictness, nodes from the reader's pool). */
static cJSON *parse_line(ls_trace_reader *r, char *p, size_t n, const loc *at,
                         ls_trace_diag_code code, const char *what) {
    size_t col = 0;
    const char *why;
    cJSON *j = NULL;
    if (at->line != 1) {
        ls_trace_pool_reset(&r->pool);
        const char *dup = NULL;
        why = ls_trace_lex_parse(&r->pool, p, n, &col, &j, &dup);
        note_memory(r);
        if (why == NULL && !ls_json_is_object(j)) why = "not a JSON object";
        if (why == NULL) {
            r->pool_tree = j;
            return j;
        }
        if (dup != NULL) {
            diag(r, code, at, r->rep.last_seq, -1, -1, "line %lld: %skey \"%.60s\" repeats",
                 (long long)at->line, what, dup);
            return NULL;
        }
        j = NULL;
        goto bad_line;
    }
    why = ls_trace_lex_json((const unsigned char *)p, n, &col);
    if (why == NULL) {
        const char *endp = NULL;
        j = cJSON_ParseWithLengthOpts(p, n, &endp, 0);
        if (j == NULL) {
            why = "not valid JSON";
            col = endp && endp >= p && endp <= p + n ? (size_t)(endp - p) : 0;
        } else {
            while (endp < p + n && (*endp == ' ' || *endp == '\t' || *endp == '\r')) endp++;
            if (endp != p + n) {
                why = "text after the JSON value";
                col = (size_t)(endp - p);
            } else if (!ls_json_is_object(j)) {
                why = "not a JSON object";
            } else {
                const char *k = ls_trace_lex_repeated_key(j);
                if (k) {
                    diag(r, code, at, r->rep.last_seq, -1, -1, "line %lld: %skey \"%.60s\" repeats",
                         (long long)at->line, what, k);
                    cJSON_Delete(j);
                    return NULL;
                }
                return j;
            }
        }
    }
    cJSON_Delete(j);
bad_line:
    diag(r, code, at, r->rep.last_seq, -1, -1, "line %lld: %s%s at column %zu", (long long)at->line,
         what, why, col + 1);
    return NULL;
}

/* ---- header --------------------------------------------------------------- */

/* strcmp(a, b) == 0 for short keys, inline. */
static inline bool key_eq(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static void header_bad(ls_trace_reader *r, const loc *at, const char *field, const char *why) {
    diag(r, LS_TRACE_DIAG_HEADER, at, -1, -1, -1, "header (line 1).%s: %s", field, why);
}

static bool check_members(const cJSON *members, int64_t world) {
    if (!ls_json_is_array(members) || members->child == NULL) return false;
    for (const cJSON *m = members->child; m; m = m->next) {
        int64_t v;
        if (!ls_trace_json_int(m, &v) || v < 0 || (world > 0 && v >= world)) return false;
        for (const cJSON *o = members->child; o != m; o = o->next)
            if (o->valuedouble == m->valuedouble) return false;
    }
    return true;
}

/* v1's vocabularies: the fixed tables (indices = the enums). */
static void fixed_vocab(ls_trace_report *rep) {
    rep->n_phases = 0;
    for (int p = 0; p < LS_PHASE_COUNT; p++)
        snprintf(rep->phases[rep->n_phases++], sizeof rep->phases[0], "%s", ls_trace_phase_name((ls_trace_phase)p));
    rep->n_layer_kinds = 0;
    for (int k = 0; k < LS_TRACE_LAYER_KIND_COUNT; k++)
        snprintf(rep->layer_kinds[rep->n_layer_kinds++], sizeof rep->layer_kinds[0], "%s",
                 ls_trace_layer_kind_name((ls_trace_layer_kind)k));
}

/* A v2 vocabulary (header "phases" or "layer_kinds"): 1..LS_TRACE_MAX_VOCAB
 * distinct names; the valid ones go to names[]. */
static void take_vocab(ls_trace_reader *r, const cJSON *h, const loc *at, const char *key,
                       char (*names)[LS_TRACE_VOCAB_NAME_MAX + 1], size_t *n) {
    *n = 0;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(h, key);
    if (!ls_json_is_array(it) || it->child == NULL) {
        header_bad(r, at, key, "missing or not a non-empty array of names");
        return;
    }
    int i = 0;
    for (const cJSON *e = it->child; e; e = e->next, i++) {
        char field[48];
        snprintf(field, sizeof field, "%s[%d]", key, i);
        if (i >= LS_TRACE_MAX_VOCAB) {
            header_bad(r, at, key, "more than 32 names");
            return;
        }
        if (!ls_json_is_string(e) || !ls_trace_is_vocab_name(e->valuestring)) {
            header_bad(r, at, field, "not a name matching ^[a-z][a-z0-9_.-]{0,31}$");
            continue;
        }
        bool dup = false;
        for (size_t k = 0; k < *n; k++) dup |= strcmp(names[k], e->valuestring) == 0;
        if (dup) {
            header_bad(r, at, field, "repeats an earlier name");
            continue;
        }
        snprintf(names[(*n)++], LS_TRACE_VOCAB_NAME_MAX + 1, "%s", e->valuestring);
    }
}

static bool is_group_kind(const char *s) { return ls_trace_enum_from_name("group_kind", s) >= 0; }

/* Checks the header object; keeps it in the report. */
static void take_header(ls_trace_reader *r, cJSON *h, const loc *at) {
    static const char *const KEYS[] = {"v",   "kind", "schema",        "run_id", "rank", "world",
                                       "host", "pid", "start_unix_ns", "groups", "tool", NULL};
    static const char *const KEYS_V2[] = {"v",      "kind",   "schema", "run_id",      "rank",
                                          "world",  "host",   "pid",    "start_unix_ns", "groups",
                                          "tool",   "profile", "phases", "layer_kinds", NULL};
    ls_trace_report *rep = &r->rep;
    uint64_t before = rep->counts[LS_TRACE_DIAG_HEADER];
    rep->header = h;
    int64_t v, rank = -1, world = -1;
    const cJSON *it;
    bool v_ok = ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(h, "v"), &v);
    bool v2 = v_ok && v == LS_TRACE_VERSION_V2;
    r->version = rep->version = v2 ? LS_TRACE_VERSION_V2 : LS_TRACE_VERSION;
    if (!v_ok || (v != LS_TRACE_VERSION && !v2)) header_bad(r, at, "v", "must be 1");
    it = cJSON_GetObjectItemCaseSensitive(h, "schema");
    if (!v2 && (!ls_json_is_string(it) || strcmp(it->valuestring, LS_TRACE_HEADER_SCHEMA) != 0))
        header_bad(r, at, "schema", "must be \"" LS_TRACE_HEADER_SCHEMA "\"");
    if (v2 && (!ls_json_is_string(it) || strcmp(it->valuestring, LS_TRACE_HEADER_SCHEMA_V2) != 0))
        header_bad(r, at, "schema", "must be \"" LS_TRACE_HEADER_SCHEMA_V2 "\" (v 2)");
    it = cJSON_GetObjectItemCaseSensitive(h, "run_id");
    if (!ls_json_is_string(it) || !ls_trace_is_token(it->valuestring))
        header_bad(r, at, "run_id", "missing or not a printable ASCII token");
    it = cJSON_GetObjectItemCaseSensitive(h, "host");
    if (!ls_json_is_string(it) || !ls_trace_is_token(it->valuestring))
        header_bad(r, at, "host", "missing or not a printable ASCII token");
    if (!ls_json_is_string(cJSON_GetObjectItemCaseSensitive(h, "tool")))
        header_bad(r, at, "tool", "missing or not a string");
    if (!ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(h, "world"), &world) || world < 1) {
        header_bad(r, at, "world", "missing or not an integer >= 1");
        world = -1;
    }
    if (!ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(h, "rank"), &rank) || rank < 0 ||
        (world > 0 && rank >= world)) {
        header_bad(r, at, "rank", "missing or not an integer in [0, world)");
        rank = -1;
    }
    if (!ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(h, "pid"), &v) || v < 0)
        header_bad(r, at, "pid", "missing or not an integer >= 0");
    it = cJSON_GetObjectItemCaseSensitive(h, "start_unix_ns");
    if (!ls_json_is_number(it) || !(it->valuedouble >= 0) || it->valuedouble > 9.3e18 ||
        it->valuedouble != (double)(int64_t)it->valuedouble)
        header_bad(r, at, "start_unix_ns", "missing or not an integer >= 0");
    it = cJSON_GetObjectItemCaseSensitive(h, "groups");
    if (!ls_json_is_array(it)) {
        header_bad(r, at, "groups", "missing or not an array");
    } else {
        int gi = 0;
        for (const cJSON *g = it->child; g; g = g->next, gi++) {
            char field[48];
            snprintf(field, sizeof field, "groups[%d]", gi);
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "name");
            /* v1: the kind is optional (longstraw-train names it for its CP x EP grid's groups) */
            const cJSON *gk = ls_json_is_object(g) ? cJSON_GetObjectItemCaseSensitive(g, "kind") : NULL;
            int want_kind = v2 || gk != NULL;
            if (!ls_json_is_object(g) || cJSON_GetArraySize(g) != (want_kind ? 3 : 2) || !ls_json_is_string(name) ||
                !ls_trace_is_token(name->valuestring) ||
                !check_members(cJSON_GetObjectItemCaseSensitive(g, "members"), world) ||
                (want_kind && !is_group_kind(ls_json_is_string(gk) ? gk->valuestring : NULL))) {
                header_bad(r, at, field,
                           v2 ? "must be {name: token, kind: world|dp|cp|tp|pp|ep, members: [distinct ranks of "
                                "world], non-empty}"
                              : "must be {name: token, optional kind: world|dp|cp|tp|pp|ep, members: [distinct "
                                "ranks of world], non-empty}");
                continue;
            }
            for (const cJSON *o = it->child; o != g; o = o->next) {
                const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "name");
                if (ls_json_is_string(on) && strcmp(on->valuestring, name->valuestring) == 0)
                    header_bad(r, at, field, "repeats an earlier group name");
            }
        }
        r->groups = it;
    }
    if (v2) {
        it = cJSON_GetObjectItemCaseSensitive(h, "profile");
        if (!ls_json_is_string(it) || !ls_trace_is_vocab_name(it->valuestring))
            header_bad(r, at, "profile", "missing or not a name matching ^[a-z][a-z0-9_.-]{0,31}$");
        take_vocab(r, h, at, "phases", rep->phases, &rep->n_phases);
        take_vocab(r, h, at, "layer_kinds", rep->layer_kinds, &rep->n_layer_kinds);
    } else {
        fixed_vocab(rep);
    }
    const char *const *keys = v2 ? KEYS_V2 : KEYS;
    for (const cJSON *c = h->child; c; c = c->next) {
        size_t k = 0;
        while (keys[k] && strcmp(keys[k], c->string) != 0) k++;
        if (keys[k] == NULL) header_bad(r, at, c->string, "not a header field");
    }
    rep->rank = rank;
    rep->world = world;
    rep->header_ok = rep->counts[LS_TRACE_DIAG_HEADER] == before;
}

const char *ls_trace_report_group_kind(const ls_trace_report *rep, const char *name) {
    if (rep == NULL || name == NULL) return NULL;
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(rep->header, "groups");
    if (!ls_json_is_array(gs)) return NULL;
    for (const cJSON *g = gs->child; g; g = g->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(g, "name");
        if (ls_json_is_string(n) && strcmp(n->valuestring, name) == 0) {
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(g, "kind");
            return ls_json_is_string(k) ? k->valuestring : NULL;
        }
    }
    return NULL;
}

static int vocab_index(char (*names)[LS_TRACE_VOCAB_NAME_MAX + 1], size_t n, const char *name) {
    if (name == NULL) return -1;
    for (size_t i = 0; i < n; i++)
        if (key_eq(names[i], name)) return (int)i;
    return -1;
}

int ls_trace_report_phase_index(const ls_trace_report *rep, const char *name) {
    return rep ? vocab_index((char (*)[LS_TRACE_VOCAB_NAME_MAX + 1])rep->phases, rep->n_phases, name) : -1;
}

int ls_trace_report_layer_kind_index(const ls_trace_report *rep, const char *name) {
    return rep ? vocab_index((char (*)[LS_TRACE_VOCAB_NAME_MAX + 1])rep->layer_kinds, rep->n_layer_kinds, name)
               : -1;
}

/* ---- events --------------------------------------------------------------- */

static bool group_declared(const ls_trace_reader *r, const char *name) {
    if (r->groups == NULL) return false;
    for (const cJSON *g = r->groups->child; g; g = g->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(g, "name");
        if (ls_json_is_string(n) && strcmp(n->valuestring, name) == 0) return true;
    }
    return false;
}


/* The event's phase and layer kind as vocabulary indices (fields checked).
 * v2 with a valid header: a name outside the header's vocabulary fails
 * (false, why filled); v1: names outside the fixed tables give -1 (the v1
 * format allows any identifier as a phase). */
static bool take_vocab_fields(ls_trace_reader *r, ls_trace_kind kind, const cJSON *j, ls_trace_event *e, char *why,
                              size_t why_len) {
    if (kind != LS_TRACE_PHASE_BEGIN && kind != LS_TRACE_PHASE_END && kind != LS_TRACE_LAYER_END &&
        kind != LS_TRACE_MEMORY)
        return true;
    const ls_trace_report *rep = &r->rep;
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(j, "phase");
    const char *phase = ls_json_is_string(ph) ? ph->valuestring : NULL;
    e->phase = r->version == LS_TRACE_VERSION ? ls_trace_enum_from_name("phase", phase)
                                              : ls_trace_report_phase_index(rep, phase);
    const char *lk = NULL;
    if (kind == LS_TRACE_LAYER_END) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
        lk = ls_json_is_string(k) ? k->valuestring : NULL;
        e->layer_kind = r->version == LS_TRACE_VERSION ? ls_trace_enum_from_name("layer_kind", lk)
                                                       : ls_trace_report_layer_kind_index(rep, lk);
    }
    if (r->version == LS_TRACE_VERSION || !rep->header_ok) return true;
    if (e->phase < 0) {
        snprintf(why, why_len, "%s.phase: \"%.40s\" is not one of the header's phases", ls_trace_kind_name(kind),
                 phase ? phase : "");
        return false;
    }
    if (kind == LS_TRACE_LAYER_END && e->layer_kind < 0) {
        snprintf(why, why_len, "layer_end.kind: \"%.40s\" is not one of the header's layer_kinds", lk ? lk : "");
        return false;
    }
    return true;
}

/* Checks the envelope and sequence of one parsed event; true when it is
 * delivered (r->evt filled, r->cur owns j), false when dropped. */
static bool take_event(ls_trace_reader *r, cJSON *j, const loc *at, bool unverified) {
    static const char *const ENV[] = {"v", "rank", "seq", "ts_ns", "ev"};
    ls_trace_report *rep = &r->rep;
    int64_t v, rank, seq, ts;
    /* the envelope: the first five members when in order (the writer's
     * layout), else looked up by name (and flagged below) */
    const cJSON *envj[5];
    bool in_order = true;
    const cJSON *c = j->child;
    for (size_t i = 0; i < 5; i++, c = c ? c->next : NULL) {
        if (c == NULL || !key_eq(c->string, ENV[i])) {
            in_order = false;
            break;
        }
        envj[i] = c;
    }
    if (!in_order)
        for (size_t i = 0; i < 5; i++) envj[i] = cJSON_GetObjectItemCaseSensitive(j, ENV[i]);
    const cJSON *evj = envj[4];
    const char *bad = NULL;
    if (!ls_trace_json_int(envj[0], &v)) bad = "v missing or not an integer";
    else if (v != r->version)
        bad = r->version == LS_TRACE_VERSION ? "v is not 1 (unsupported version)"
                                             : "v is not 2 (the header's version)";
    else if (!ls_trace_json_int(envj[1], &rank) || rank < 0)
        bad = "rank missing or not an integer >= 0";
    else if (!ls_trace_json_int(envj[2], &seq) || seq < 0)
        bad = "seq missing or not an integer >= 0";
    else if (!ls_trace_json_int(envj[3], &ts) || ts < 0)
        bad = "ts_ns missing or not an integer >= 0";
    else if (!ls_json_is_string(evj) || !ls_trace_is_ident(evj->valuestring))
        bad = "ev missing or not an identifier";
    if (bad) {
        diag(r, LS_TRACE_DIAG_ENVELOPE, at, rep->last_seq, -1, -1, "line %lld: %s; event skipped",
             (long long)at->line, bad);
        drop_json(r, j);
        return false;
    }
    ls_trace_event *e = &r->evt;
    memset(e, 0, sizeof *e);
    e->phase = e->layer_kind = -1;
    e->flags = unverified ? LS_TRACE_EVF_UNVERIFIED : 0;
    if (!in_order) {
        diag(r, LS_TRACE_DIAG_KEY_ORDER, at, seq, -1, -1,
             "line %lld (seq %lld): envelope keys are not first in the order v,rank,seq,ts_ns,ev",
             (long long)at->line, (long long)seq);
        e->flags |= LS_TRACE_EVF_KEY_ORDER;
    }
    if (rep->rank >= 0 && rank != rep->rank) {
        diag(r, LS_TRACE_DIAG_RANK_MISMATCH, at, seq, rep->rank, rank,
             "line %lld (seq %lld): rank %lld but the header says %lld", (long long)at->line,
             (long long)seq, (long long)rank, (long long)rep->rank);
        e->flags |= LS_TRACE_EVF_RANK;
    }
    if (seq != r->expect_seq) {
        ls_trace_diag_code code = seq > r->expect_seq ? LS_TRACE_DIAG_SEQ_GAP
                                  : (r->have_prev && seq == r->prev_seq) ? LS_TRACE_DIAG_SEQ_DUPLICATE
                                                                         : LS_TRACE_DIAG_SEQ_ORDER;
        diag(r, code, at, seq, r->expect_seq, seq, "line %lld: seq %lld where %lld was expected (%s)",
             (long long)at->line, (long long)seq, (long long)r->expect_seq,
             code == LS_TRACE_DIAG_SEQ_GAP ? "events missing"
             : code == LS_TRACE_DIAG_SEQ_DUPLICATE ? "repeats the previous event"
                                                   : "out of order");
        e->flags |= LS_TRACE_EVF_SEQ;
    }
    if (seq + 1 > r->expect_seq) r->expect_seq = seq + 1;
    if (r->have_prev && ts < r->prev_ts) {
        diag(r, LS_TRACE_DIAG_TS_BACKWARDS, at, seq, r->prev_ts, ts,
             "line %lld (seq %lld): ts_ns %lld is before the previous event's %lld",
             (long long)at->line, (long long)seq, (long long)ts, (long long)r->prev_ts);
        e->flags |= LS_TRACE_EVF_TS;
    }
    r->have_prev = true;
    r->prev_seq = seq;
    r->prev_ts = ts;
    if (rep->saw_rank_complete) {
        diag(r, LS_TRACE_DIAG_AFTER_COMPLETE, at, seq, -1, -1,
             "line %lld (seq %lld): event after rank_complete", (long long)at->line, (long long)seq);
        e->flags |= LS_TRACE_EVF_AFTER_COMPLETE;
    }
    ls_trace_kind kind = ls_trace_kind_from_name(evj->valuestring);
    bool frozen = false, frozen_known = false; /* prefix_frozen, when the field check found it */
    if (kind == LS_TRACE_KIND_UNKNOWN) {
        diag(r, LS_TRACE_DIAG_UNKNOWN_KIND, at, seq, -1, -1,
             "line %lld (seq %lld): unknown event kind \"%.40s\"", (long long)at->line, (long long)seq,
             evj->valuestring);
        e->flags |= LS_TRACE_EVF_UNKNOWN_KIND;
    } else {
        char why[160];
        frozen_known = ls_trace_event_check_v(r->version, kind, j, in_order ? 5 : 0, why, sizeof why, &frozen,
                                              e->field) == LS_OK;
        if (frozen_known) frozen_known = take_vocab_fields(r, kind, j, e, why, sizeof why);
        if (!frozen_known) {
            memset(e->field, 0, sizeof e->field);
            diag(r, LS_TRACE_DIAG_FIELD, at, seq, -1, -1, "line %lld (seq %lld): %s",
                 (long long)at->line, (long long)seq, why);
            e->flags |= LS_TRACE_EVF_FIELDS;
        } else if (kind == LS_TRACE_COLLECTIVE && rep->header_ok) {
            const char *g = cJSON_GetObjectItemCaseSensitive(j, "group")->valuestring;
            if (!group_declared(r, g)) {
                diag(r, LS_TRACE_DIAG_FIELD, at, seq, -1, -1,
                     "line %lld (seq %lld): collective.group \"%.60s\" is not a group of the header",
                     (long long)at->line, (long long)seq, g);
                e->flags |= LS_TRACE_EVF_FIELDS;
                memset(e->field, 0, sizeof e->field);
            }
        } else if (kind == LS_TRACE_RANK_COMPLETE) {
            int64_t n = 0;
            ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(j, "events"), &n);
            if (n != rep->n_events)
                diag(r, LS_TRACE_DIAG_COUNT_MISMATCH, at, seq, rep->n_events, n,
                     "line %lld (seq %lld): rank_complete says %lld events, %lld were read",
                     (long long)at->line, (long long)seq, (long long)n, (long long)rep->n_events);
        }
        if (kind == LS_TRACE_RANK_COMPLETE) rep->saw_rank_complete = true;
    }
    r->cur = j;
    e->json = j;
    e->ev = evj->valuestring;
    e->kind = kind;
    e->rank = rank;
    e->seq = seq;
    e->ts_ns = ts;
    e->line = at->line;
    e->byte_offset = at->byte_offset;
    e->text_offset = at->text_offset;
    e->prefix_frozen = frozen_known ? frozen : ls_trace_event_prefix_frozen(j);
    rep->n_events++;
    rep->last_seq = seq;
    return true;
}

/* Handles the complete line [start, nl); true when it produced an event. */
static bool process_line(ls_trace_reader *r, size_t nl) {
    loc at = line_loc(r, nl);
    bool unverified = nl >= r->ver;
    char *p = r->win + r->start;
    size_t n = nl - r->start;
    p[n] = '\0';
    r->start = r->scan = nl + 1;
    r->line_no++;
    r->rep.n_lines++;
    bool first = at.line == 1;
    r->header_done = true;
    cJSON *j = parse_line(r, p, n, &at, first ? LS_TRACE_DIAG_HEADER : LS_TRACE_DIAG_MALFORMED_LINE,
                          first ? "header: " : "");
    if (j == NULL) return false;
    if (first) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
        if (ls_json_is_string(kind) && strcmp(kind->valuestring, LS_TRACE_HEADER_KIND) == 0) {
            take_header(r, j, &at);
            return false;
        }
        diag(r, LS_TRACE_DIAG_HEADER, &at, -1, -1, -1,
             "line 1 is not a header (no \"kind\":\"" LS_TRACE_HEADER_KIND "\"): header missing%s",
             cJSON_GetObjectItemCaseSensitive(j, "ev") ? "; read as an event" : "");
        if (cJSON_GetObjectItemCaseSensitive(j, "ev") == NULL) {
            drop_json(r, j);
            return false;
        }
    }
    if (!take_event(r, j, &at, unverified)) return false;
    r->rep.good_text_offset = at.text_offset + n + 1;
    return true;
}

static void finish(ls_trace_reader *r) {
    ls_trace_report *rep = &r->rep;
    if (rep->end != LS_TRACE_END_NONE) return;
    loc at = {-1, rep->file_bytes, r->win_base + r->start};
    if (!r->header_done && r->stop == LS_TRACE_END_NONE)
        diag(r, LS_TRACE_DIAG_HEADER, &at, -1, -1, -1, "%s: no complete header line",
             rep->compressed ? "decoded stream" : "file");
    if (r->stop != LS_TRACE_END_NONE) {
        rep->end = r->stop;
    } else if (rep->truncated_in_frame) {
        at.byte_offset = r->frame_start;
        uint64_t unver = rep->good_text_offset > r->trunc_text ? rep->good_text_offset - r->trunc_text : 0;
        diag(r, LS_TRACE_DIAG_TRUNCATED, &at, rep->last_seq, -1, -1,
             "input ends inside the zstd frame starting at byte %llu (file has %llu bytes), "
             "before its checksum: %llu decoded bytes of it delivered unverified (events "
             "flagged), %zu bytes of an incomplete line dropped; last delivered seq %lld",
             (unsigned long long)r->frame_start, (unsigned long long)rep->file_bytes,
             (unsigned long long)unver, r->end - r->start, (long long)rep->last_seq);
        rep->end = LS_TRACE_END_TRUNCATED;
    } else if (r->end > r->start || r->discarding) {
        at.line = r->line_no;
        rep->n_lines++;
        diag(r, LS_TRACE_DIAG_TRUNCATED, &at, rep->last_seq, -1, -1,
             "input ends inside line %lld (%zu bytes from text offset %llu, no newline); last "
             "delivered seq %lld",
             (long long)r->line_no, r->end - r->start, (unsigned long long)at.text_offset,
             (long long)rep->last_seq);
        rep->end = LS_TRACE_END_TRUNCATED;
    } else if (!rep->saw_rank_complete) {
        diag(r, LS_TRACE_DIAG_INCOMPLETE, &at, rep->last_seq, -1, -1,
             "input ends after line %lld without a rank_complete event (run incomplete or file "
             "cut at a line boundary); last delivered seq %lld",
             (long long)(r->line_no - 1), (long long)rep->last_seq);
        rep->end = LS_TRACE_END_INCOMPLETE;
    } else {
        rep->end = LS_TRACE_END_CLEAN;
    }
}

/* ---- public API ----------------------------------------------------------- */

static ls_status reader_new(ls_trace_reader **out, const char *name) {
    ls_trace_reader *r = calloc(1, sizeof *r);
    if (r == NULL) return LS_ERR_NOMEM;
    r->fd = -1;
    r->rep.path = strdup(name);
    r->rep.rank = r->rep.world = -1;
    r->rep.last_seq = -1;
    r->version = r->rep.version = LS_TRACE_VERSION; /* until a v2 header says otherwise */
    fixed_vocab(&r->rep);
    r->line_no = 1;
    r->in_cap = ZSTD_DStreamInSize();
    r->in = malloc(r->in_cap);
    r->win_cap = WIN_INIT;
    r->win = malloc(r->win_cap);
    if (r->rep.path == NULL || r->in == NULL || r->win == NULL || ls_digest_stream_open(&r->sha) != LS_OK) {
        ls_trace_reader_close(r);
        return LS_ERR_NOMEM;
    }
    note_memory(r);
    *out = r;
    return LS_OK;
}

ls_status ls_trace_reader_open(ls_trace_reader **out, const char *path) {
    if (out) *out = NULL;
    if (out == NULL || path == NULL) return LS_ERR_ARG;
    ls_status st = reader_new(out, path);
    if (st != LS_OK) return st;
    ls_trace_reader *r = *out;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        diag(r, LS_TRACE_DIAG_IO, NULL, -1, -1, -1, "%s: cannot open: %s", path, strerror(errno));
        fatal(r, LS_TRACE_END_FAILED);
        r->decode_done = true;
    }
    return LS_OK;
}

ls_status ls_trace_reader_open_fd(ls_trace_reader **out, int fd, const char *name) {
    if (out) *out = NULL;
    if (out == NULL || name == NULL) {
        if (fd >= 0) close(fd);
        return LS_ERR_ARG;
    }
    ls_status st = reader_new(out, name);
    if (st != LS_OK) {
        if (fd >= 0) close(fd);
        return st;
    }
    ls_trace_reader *r = *out;
    r->fd = fd;
    if (fd < 0) {
        diag(r, LS_TRACE_DIAG_IO, NULL, -1, -1, -1, "%s: cannot open", name);
        fatal(r, LS_TRACE_END_FAILED);
        r->decode_done = true;
    }
    return LS_OK;
}

ls_status ls_trace_reader_open_mem(ls_trace_reader **out, const void *data, size_t len,
                                   const char *name) {
    if (out) *out = NULL;
    if (out == NULL || (data == NULL && len > 0)) return LS_ERR_ARG;
    ls_status st = reader_new(out, name ? name : "<memory>");
    if (st != LS_OK) return st;
    (*out)->mem = data;
    (*out)->mem_len = len;
    return LS_OK;
}

ls_status ls_trace_reader_next(ls_trace_reader *r, const ls_trace_event **ev) {
    if (ev) *ev = NULL;
    if (r == NULL || ev == NULL) return LS_ERR_ARG;
    drop_json(r, r->cur);
    r->cur = NULL;
    if (r->rep.end != LS_TRACE_END_NONE) return LS_OK;
    if (!r->detected && !r->stop) ls_trace_reader_detect(r);
    size_t nl;
    while (next_line(r, &nl))
        if (process_line(r, nl)) {
            *ev = &r->evt;
            return LS_OK;
        }
    finish(r);
    return LS_OK;
}

void ls_trace_reader_stop(ls_trace_reader *r) {
    if (r == NULL) return;
    drop_json(r, r->cur);
    r->cur = NULL;
    if (r->rep.end == LS_TRACE_END_NONE) r->rep.end = LS_TRACE_END_STOPPED;
}

const ls_trace_report *ls_trace_reader_report(const ls_trace_reader *r) { return r ? &r->rep : NULL; }

ls_status ls_trace_reader_sha256(ls_trace_reader *r, uint8_t out[32], uint64_t *bytes) {
    if (r == NULL || out == NULL) return LS_ERR_ARG;
    if (r->sha == NULL || r->sha_failed) return LS_ERR_NOMEM;
    uint64_t total = r->rep.file_bytes; /* bytes the source gave so far */
    if (r->fd >= 0) { /* the rest of the file, past where decoding stopped */
        unsigned char buf[16384];
        for (;;) {
            ssize_t k = read(r->fd, buf, sizeof buf);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) return LS_ERR_IO;
            if (k == 0) break;
            if (ls_digest_stream_update(r->sha, buf, (size_t)k) != LS_OK) return LS_ERR_NOMEM;
            total += (uint64_t)k;
        }
    } else if (r->mem_pos < r->mem_len) {
        if (ls_digest_stream_update(r->sha, r->mem + r->mem_pos, r->mem_len - r->mem_pos) != LS_OK)
            return LS_ERR_NOMEM;
        total += r->mem_len - r->mem_pos;
        r->mem_pos = r->mem_len;
    }
    r->src_eof = true;
    if (r->rep.end == LS_TRACE_END_NONE) r->rep.end = LS_TRACE_END_STOPPED;
    if (bytes) *bytes = total;
    return ls_digest_stream_final(r->sha, out);
}

void ls_trace_reader_close(ls_trace_reader *r) {
    if (r == NULL) return;
    if (r->fd >= 0) close(r->fd);
    drop_json(r, r->cur);
    ls_trace_pool_free(&r->pool);
    ZSTD_freeDCtx(r->dctx);
    ls_digest_stream_free(r->sha);
    free(r->in);
    free(r->win);
    ls_trace_report_free(&r->rep);
    free(r);
}

/* Every event to fn, then (sha != NULL) the digest of the whole source into
 * sha with its status in *sha_st; the report moved into *report. */
static ls_status read_all(ls_trace_reader *r, ls_trace_event_fn fn, void *user, ls_trace_report *report,
                          uint8_t *sha, uint64_t *bytes, ls_status *sha_st) {
    const ls_trace_event *ev;
    while (ls_trace_reader_next(r, &ev) == LS_OK && ev != NULL)
        if (fn && fn(ev, user) != 0) {
            ls_trace_reader_stop(r);
            break;
        }
    if (sha != NULL) *sha_st = ls_trace_reader_sha256(r, sha, bytes);
    *report = r->rep;
    memset(&r->rep, 0, sizeof r->rep);
    ls_trace_reader_close(r);
    return ls_trace_report_status(report);
}

ls_status ls_trace_read_file(const char *path, ls_trace_event_fn fn, void *user,
                             ls_trace_report *report) {
    if (path == NULL || report == NULL) return LS_ERR_ARG;
    ls_trace_reader *r = NULL;
    ls_status st = ls_trace_reader_open(&r, path);
    if (st != LS_OK) return st;
    return read_all(r, fn, user, report, NULL, NULL, NULL);
}

ls_status ls_trace_read_fd(int fd, const char *name, ls_trace_event_fn fn, void *user,
                           ls_trace_report *report) {
    if (report == NULL) {
        if (fd >= 0) close(fd);
        return LS_ERR_ARG;
    }
    ls_trace_reader *r = NULL;
    ls_status st = ls_trace_reader_open_fd(&r, fd, name);
    if (st != LS_OK) return st;
    return read_all(r, fn, user, report, NULL, NULL, NULL);
}

ls_status ls_trace_read_fd_sha256(int fd, const char *name, ls_trace_event_fn fn, void *user,
                                  ls_trace_report *report, uint8_t sha[32], uint64_t *bytes, ls_status *sha_st) {
    if (report == NULL || sha == NULL || sha_st == NULL) {
        if (fd >= 0) close(fd);
        return LS_ERR_ARG;
    }
    *sha_st = LS_ERR_IO;
    ls_trace_reader *r = NULL;
    ls_status st = ls_trace_reader_open_fd(&r, fd, name);
    if (st != LS_OK) return st;
    return read_all(r, fn, user, report, sha, bytes, sha_st);
}
