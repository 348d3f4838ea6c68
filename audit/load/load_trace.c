/* load_trace.c - one rank's trace streamed once into the compact facts of
 * ls_audit_rank: steps, phases, layers, collectives, memory, digests
 * (audit.h); the per-step checks are rank_steps.c's. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/load/load.h"
#include "audit/rules/rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "audit/model/run_files.h"
#include "audit/load/timeline.h" /* ls_audit_trace_rel */
#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h"

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
    bool v2, v2_known;            /* the trace is v2 (its events' envelope says so), once known */
    int out_pos, recompute_pos;   /* v2 field positions of collective.out_sha256, layer_end.recompute */
    int out_digest_pos, in_pos, done_pos, peer_pos, tag_pos, declared_pos; /* collective's v2 p2p and digests */
} scan_ctx;


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
    if (!ls_audit_get_int(j, key, &v) || v < 0 || v > LS_TRACE_MAX_INT) {
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
    /* the device tier's categories add up to total_live/total_peak, the host tier's ("tier": "host") to
       host_live/host_peak */
    uint64_t sum_live = 0, sum_peak = 0, max_peak = 0, h_live = 0, h_peak = 0, h_max = 0;
    int n_host = 0;
    const cJSON *cat;
    int hint = 0; /* the categories come in the same order in every event */
    cJSON_ArrayForEach(cat, cats) {
        int64_t live = get_bytes(cat, "live", &bad), peak = get_bytes(cat, "peak", &bad);
        const cJSON *tier = cJSON_GetObjectItemCaseSensitive(cat, "tier");
        if (cJSON_IsString(tier) && tier->valuestring && strcmp(tier->valuestring, "host") == 0) {
            n_host++;
            h_live += (uint64_t)live;
            h_peak += (uint64_t)peak;
            if ((uint64_t)peak > h_max) h_max = (uint64_t)peak;
        } else {
            sum_live += (uint64_t)live;
            sum_peak += (uint64_t)peak;
            if ((uint64_t)peak > max_peak) max_peak = (uint64_t)peak;
        }
        int i = intern(c->run->mem_cats, &c->run->n_mem_cats, &c->run->names_overflow, cat->string, &hint);
        hint = i + 1;
        if (i >= 0 && (uint64_t)peak > r->mem_peak[i]) r->mem_peak[i] = (uint64_t)peak;
    }
    r->n_memory++;
    if ((uint64_t)tp > r->mem_total_peak) r->mem_total_peak = (uint64_t)tp;
    if ((uint64_t)rss > r->mem_rss_peak) r->mem_rss_peak = (uint64_t)rss;
    const char *why = NULL;
    int64_t hl = 0, hp = 0;
    if (n_host) {
        hl = get_bytes(ev->json, "host_live", &bad);
        hp = get_bytes(ev->json, "host_peak", &bad);
    }
    if (bad) why = "a byte count is missing, negative or above 2^53-1";
    else if (!n_host && (cJSON_GetObjectItemCaseSensitive(ev->json, "host_live") ||
                         cJSON_GetObjectItemCaseSensitive(ev->json, "host_peak")))
        why = "host tier totals without a host-tier category";
    else if (h_live != (uint64_t)hl) why = "host_live is not the sum of the host tier's live bytes";
    else if ((uint64_t)hp < h_max || (uint64_t)hp > h_peak || hp < hl)
        why = "host_peak is not within the host tier's category peaks";
    else if (sum_live != (uint64_t)tl) why = "total_live is not the sum of the device tier's live bytes";
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
    const cJSON *bytes;                                             /* collective (describe.c) */
} ev_fields;

#define EV_NFIELDS (sizeof(ev_fields) / sizeof(const cJSON *))
static const char *const EV_FIELD_NAMES[EV_NFIELDS] = {
    "step", "phase",  "member", "layer", "kind", "dir", "wall_ns", "ok",    "target",
    "sha256", "group", "gseq",  "op",    "red",  "count", "dtype", "purpose", "tokens", "bytes"};

/* EV_POS[kind][k]: the table position of EV_FIELD_NAMES[k] in kind, -1 none */
static signed char EV_POS[LS_TRACE_KIND_COUNT][EV_NFIELDS];

/* Fills EV_POS (the same every time: ls_audit_load calls it first). */
void ls_audit_trace_fields_init(void) {
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
static bool decode_layer_end(ls_audit_run *run, const ev_fields *f, ls_trace_layer_end *le) {
    const char *ph = str_of(f->phase), *kind = str_of(f->kind), *dir = str_of(f->dir);
    if (ph == NULL || kind == NULL || dir == NULL || !ls_trace_json_int(f->step, &le->step) ||
        !ls_trace_json_int(f->member, &le->member) || !ls_trace_json_int(f->layer, &le->layer))
        return false;
    int k = ls_trace_enum_from_name("layer_kind", kind), d = ls_trace_enum_from_name("dir", dir);
    /* the reader checked the name: v1's enum, or a v2 header's vocabulary */
    if (k < 0) k = ls_audit_kind_index(run, kind); /* v1's names keep their enum slots; a v2 run's own follow */
    if (k < 0) k = LS_AUDIT_NKIND;                 /* past the slots: a kind no profile requirement names */
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
    /* the v2 lists hold v1's names at their v1 indices (the reader refused v2 names in v1 traces) */
    int o = ls_trace_enum_from_name_v2("op", op), r = ls_trace_enum_from_name_v2("red", red),
        d = ls_trace_enum_from_name_v2("dtype", dt);
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

/* The event's member at v2 field position pos, NULL when absent (or pos < 0). */
static const cJSON *field_at(const ls_trace_event *ev, int pos) { return pos >= 0 ? ev->field[pos] : NULL; }

/* A collective's output digest: out_digest, else out_sha256 (an event with
 * both states one fact: the reader refused it otherwise).  d has 32 bytes. */
static bool out_digest_of(const scan_ctx *c, const ls_trace_event *ev, ls_trace_digest_alg *alg, uint8_t d[32]) {
    if (ls_trace_digest_parse(str_of(field_at(ev, c->out_digest_pos)), alg, d, NULL)) return true;
    const char *out = str_of(field_at(ev, c->out_pos));
    if (out == NULL || !hex32(out, d)) return false;
    *alg = LS_TRACE_DIGEST_SHA256;
    return true;
}

static uint64_t first8(const uint8_t *d) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | d[i];
    return v;
}

/* A send or recv (v2): kept in the rank's point-to-point list (world > 1),
 * not in the flight recorder: its gseq counts its channel's messages, not
 * its group's (collectives.p2p pairs them, rules_p2p.c). */
static void on_p2p(scan_ctx *c, const ls_trace_event *ev, const ev_fields *f, const ls_trace_collective *tc, int g,
                   int p) {
    ls_audit_rank *r = c->r;
    r->n_p2p_total++;
    if (c->run->world <= 1) return; /* one rank: no one to talk to (sources.agree names its collectives) */
    size_t cap = LS_AUDIT_MAX_P2P / c->run->world;
    if (cap < 4096) cap = 4096;
    if (r->n_p2p >= cap) return; /* beyond: counted (n_p2p_total), and collectives.p2p fails */
    if (r->n_p2p == r->p2p_cap) {
        size_t ncap = r->p2p_cap ? r->p2p_cap * 2 : 64;
        ls_audit_p2p *n = realloc(r->p2p, ncap * sizeof *n);
        if (n == NULL) {
            c->st = LS_ERR_NOMEM;
            return;
        }
        r->p2p = n;
        r->p2p_cap = ncap;
    }
    ls_audit_p2p *k = &r->p2p[r->n_p2p++];
    memset(k, 0, sizeof *k);
    k->seq = ev->seq;
    k->gseq = tc->gseq;
    k->count = tc->count;
    k->layer = tc->has_layer ? tc->layer : -2;
    if (tc->has_layer) k->flags |= LS_AUDIT_P2P_LAYER;
    /* the step: the event's own, else the open phase's */
    if (!ls_trace_json_int(f->step, &k->step)) k->step = c->cur_phase >= 0 && c->cur_step >= 0 ? c->cur_step : -1;
    if (k->step >= 0) k->flags |= LS_AUDIT_P2P_STEP;
    if (!ls_trace_json_int(field_at(ev, c->peer_pos), &k->peer)) k->peer = -1;
    if (!ls_trace_json_int(field_at(ev, c->tag_pos), &k->tag)) k->tag = 0;
    uint8_t d[32];
    ls_trace_digest_alg alg = LS_TRACE_DIGEST_SHA256;
    if (ls_trace_digest_parse(str_of(field_at(ev, c->in_pos)), &alg, d, NULL)) {
        k->in8 = first8(d);
        k->flags |= LS_AUDIT_P2P_IN | (alg == LS_TRACE_DIGEST_XXH3_128 ? LS_AUDIT_P2P_IN_XXH3 : 0);
    }
    if (out_digest_of(c, ev, &alg, d)) {
        k->out8 = first8(d);
        k->flags |= LS_AUDIT_P2P_OUT | (alg == LS_TRACE_DIGEST_XXH3_128 ? LS_AUDIT_P2P_OUT_XXH3 : 0);
    }
    if (field_at(ev, c->done_pos) != NULL) k->flags |= LS_AUDIT_P2P_CHANGED;
    if (field_at(ev, c->declared_pos) != NULL) k->flags |= LS_AUDIT_P2P_DECLARED;
    k->group = (uint16_t)g;
    k->purpose = (uint16_t)p;
    k->op = (uint8_t)tc->op;
    k->dtype = (uint8_t)tc->dtype;
    k->phase = (uint8_t)(c->cur_phase >= 0 ? c->cur_phase : LS_AUDIT_NPHASE - 1);
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
    r->purpose_calls[p]++;
    int64_t nb = 0;
    if (ls_trace_json_int(f->bytes, &nb) && nb > 0) r->purpose_bytes[p] += (uint64_t)nb;
    /* v2: a send or recv is a message of its channel, not a collective of its group: neither in the
       group's fingerprint nor in the flight recorder (a v1 trace has neither op) */
    bool p2p = tc.op == LS_TRACE_OP_SEND || tc.op == LS_TRACE_OP_RECV;
    if (!p2p) {
        int64_t key[6] = {tc.gseq, tc.op, tc.red, tc.count, tc.dtype, p};
        r->group_hash[g] = fnv(r->group_hash[g] ? r->group_hash[g] : 1469598103934665603ull, key, sizeof key);
        r->group_count[g]++;
        r->n_coll_group++;
    }
    bool in_step = c->cur_phase >= 0 && c->cur_step >= 0 && c->cur_step < LS_AUDIT_MAX_STEPS;
    if (in_step) {
        ls_status st = ls_audit_steps_coll(r, c->cur_step, c->cur_phase, tc.has_layer ? tc.layer : -2, (uint16_t)p,
                                           ev->seq);
        if (st != LS_OK) {
            c->st = st;
            return;
        }
    }
    if (p2p) {
        on_p2p(c, ev, f, &tc, g, p);
        return;
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
    k->out8 = 0;
    uint8_t d[32];
    ls_trace_digest_alg alg = LS_TRACE_DIGEST_SHA256;
    if (out_digest_of(c, ev, &alg, d)) k->out8 = ls_audit_digest8(alg, d);
    if (k->out8 != 0 && field_at(ev, c->declared_pos) != NULL &&
        (tc.op == LS_TRACE_OP_ALLREDUCE || tc.op == LS_TRACE_OP_BROADCAST || tc.op == LS_TRACE_OP_ALLGATHER))
        r->n_coll_declared++;
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
        int p = ls_audit_phase_index(c->run, ph);
        r->phase_begin[p]++;
        c->cur_phase = p;
        c->cur_step = step;
        snprintf(r->last_phase, sizeof r->last_phase, "%s", ph ? ph : "?");
        r->in_phase = true;
        if (has_step) ls_audit_seq_phase(c->run, r, step, p, true, ev->seq); /* steps.sequence */
        break;
    }
    case LS_TRACE_PHASE_END: {
        int p = ls_audit_phase_index(c->run, str_of(f.phase));
        r->phase_end[p]++;
        int64_t w = 0;
        if (ls_trace_json_int(f.wall_ns, &w)) r->phase_wall_ns[p] += (uint64_t)w;
        if (ls_json_is_true(f.ok) && sf != NULL && p < 16) sf->phase_mask |= (uint16_t)(1u << p);
        c->cur_phase = -1;
        r->in_phase = false;
        if (has_step) ls_audit_seq_phase(c->run, r, step, p, false, ev->seq); /* steps.sequence */
        break;
    }
    case LS_TRACE_LAYER_END: {
        ls_trace_layer_end le;
        if (!c->v2_known) { /* the envelope's "v" (its first member): the report is filled only at the end */
            const cJSON *v = j != NULL ? j->child : NULL;
            c->v2 = v != NULL && v->string != NULL && strcmp(v->string, "v") == 0 && cJSON_IsNumber(v) &&
                    v->valuedouble == LS_TRACE_VERSION_V2;
            c->v2_known = true;
        }
        if (!decode_layer_end(c->run, &f, &le)) break;
        if (c->v2 && c->recompute_pos >= 0 && ev->field[c->recompute_pos] != NULL)
            break; /* a forward re-run under activation checkpointing: never the phase's forward */
        int p = ls_audit_phase_index(c->run, le.phase);
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
        if (has_step) ls_audit_seq_optimizer(c->run, r, step, ev->seq); /* steps.sequence */
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
            const char *m = ls_audit_get_str(j, "message");
            snprintf(r->first_error, sizeof r->first_error, "%.250s", m ? m : "(no message)");
        }
        break;
    case LS_TRACE_RANK_COMPLETE:
        r->rank_complete = true;
        r->rank_complete_seq = ev->seq;
        if (!ls_audit_get_int(j, "steps", &r->complete_steps)) r->complete_steps = -1;
        if (!ls_audit_get_int(j, "events", &r->complete_events)) r->complete_events = -1;
        break;
    case LS_TRACE_GRADIENT_PROBE:
        c->st = ls_audit_probe_note(r, ev); /* run.probe's facts (rules_probe.c) */
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
            const char *o = ls_audit_get_str(j, "objective");
            m->sft = o != NULL && strcmp(o, "sft") == 0;
            m->have = 0; /* run.invariants' figures: each as recorded, when it is a finite number */
            for (int k = 0; k < LS_AUDIT_SM_COUNT; k++) {
                const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, ls_audit_sm_name((ls_audit_sm_field)k));
                m->v[k] = ls_json_is_number(it) && isfinite(it->valuedouble) ? it->valuedouble : 0.0;
                if (ls_json_is_number(it) && isfinite(it->valuedouble)) m->have |= 1u << k;
            }
        }
        if (sf != NULL && !sf->metrics_seen) { /* the step's first step_metrics decides */
            const char *o = ls_audit_get_str(j, "objective");
            sf->metrics_seen = 1;
            sf->sft = o != NULL && strcmp(o, "sft") == 0;
        }
        break;
    default:
        break;
    }
    return c->st != LS_OK;
}

ls_status ls_audit_load_trace(ls_audit_run *run, ls_audit_rank *r) {
    char dir[32];
    ls_receipt_rank_dir(r->rank, dir, sizeof dir);
    ls_audit_trace_rel(run->run_dir, r->rank, r->trace_file, sizeof r->trace_file); /* .zst, else a plain one */
    /* v2: the trace the receipt names (events.jsonl or events.jsonl.zst), when it is in the rank's directory */
    if (r->receipt != NULL && r->receipt->version == 2 && strncmp(r->receipt->events_file, dir, strlen(dir)) == 0 &&
        r->receipt->events_file[strlen(dir)] == '/' && strlen(r->receipt->events_file) < sizeof r->trace_file)
        snprintf(r->trace_file, sizeof r->trace_file, "%s", r->receipt->events_file);
    r->last_step = r->last_member = r->last_layer = -2;
    r->last_seq = r->first_error_seq = r->rank_complete_seq = r->mem_bad_seq = r->late_seq = -1;
    r->complete_steps = r->complete_events = -1;
    r->win[0].step = r->win[1].step = -1;
    ls_audit_seq_init(r);
    uint64_t sz = 0;
    ls_status st = LS_OK;
    int fd = ls_audit_open(run->run_dir, r->trace_file, 0, &sz, &st, r->trace_err, sizeof r->trace_err);
    if (fd < 0) return LS_OK; /* the rules name it */
    r->trace_present = true;
    scan_ctx c = {.run = run,
                  .r = r,
                  .cur_phase = -1,
                  .cur_step = -1,
                  .st = LS_OK,
                  .out_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "out_sha256"),
                  .out_digest_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "out_digest"),
                  .in_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "in_digest"),
                  .done_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "in_digest_done"),
                  .peer_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "peer"),
                  .tag_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "tag"),
                  .declared_pos = ls_trace_field_index(LS_TRACE_COLLECTIVE, "declared"),
                  .recompute_pos = ls_trace_field_index(LS_TRACE_LAYER_END, "recompute")};
    /* one read: the digest is taken from the bytes the reader decoded (then the rest of the file) */
    uint8_t sha[32];
    uint64_t bytes = 0;
    ls_status sha_st = LS_ERR_IO;
    st = ls_trace_read_fd_sha256(fd, r->trace_file, on_event, &c, &r->report, sha, &bytes, &sha_st);
    if (st == LS_ERR_NOMEM || st == LS_ERR_ARG || c.st == LS_ERR_NOMEM) return LS_ERR_NOMEM;
    if (sha_st == LS_OK) {
        if (ls_audit_reads_note(&run->reads, r->trace_file, sha, bytes) != LS_OK) return LS_ERR_NOMEM;
    } else {
        run->reads.failed = true; /* a digest that could not be taken verifies nothing */
    }
    return ls_audit_steps_finish(run, r);
}
