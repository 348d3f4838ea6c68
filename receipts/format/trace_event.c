/* trace_event.c - names of trace kinds and enumerated values, and the field
 * table every event kind is checked against (see trace_event.h). */
#include "receipts/format/trace_event.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "receipts/format/json_util.h"

static const char *const KIND_NAMES[LS_TRACE_KIND_COUNT] = {
    "phase_begin", "phase_end", "layer_end", "collective", "optimizer_step",
    "param_digest", "memory", "error", "rank_complete", "step_metrics", "gradient_probe",
};
static const char *const PHASE_NAMES[] = {
    "capture", "rollout", "score", "replay", "prompt_bwd", "finalize", "optimizer", NULL,
};
static const char *const LAYER_KIND_NAMES[] = {"gdn", "attn", "mla", "embed", "head", NULL};
static const char *const DIR_NAMES[] = {"fwd", "bwd", NULL};
static const char *const OP_NAMES[] = {
    "allreduce", "broadcast", "allgather", "sendrecv", "reduce_scatter", "barrier",
    "all_to_all", /* v1 too since the EP grid (index LS_TRACE_OP_ALL_TO_ALL) */
    NULL,
};
static const char *const RED_NAMES[] = {"sum", "max", "none", NULL};
static const char *const DTYPE_NAMES[] = {"f32", "f64", "i64", "u8", NULL};
/* v2: the v1 lists, then the v2 names (docs/contract.md §1) */
static const char *const OP_NAMES_V2[] = {
    "allreduce", "broadcast", "allgather", "sendrecv", "reduce_scatter", "barrier",
    "all_to_all", "send", "recv", "reduce", NULL,
};
static const char *const RED_NAMES_V2[] = {"sum", "max", "none", "min", "prod", "avg", NULL};
static const char *const DTYPE_NAMES_V2[] = {"f32", "f64", "i64", "u8", "bf16", "f16", "i32", "i8", "bool", NULL};
_Static_assert(sizeof OP_NAMES_V2 / sizeof OP_NAMES_V2[0] == LS_TRACE_OP_COUNT_V2 + 1, "op names");
_Static_assert(sizeof RED_NAMES_V2 / sizeof RED_NAMES_V2[0] == LS_TRACE_RED_COUNT_V2 + 1, "red names");
_Static_assert(sizeof DTYPE_NAMES_V2 / sizeof DTYPE_NAMES_V2[0] == LS_TRACE_DTYPE_COUNT_V2 + 1, "dtype names");
static const char *const OBJECTIVE_NAMES[] = {"grpo", "sft", NULL};
static const char *const GROUP_KIND_NAMES[] = {"world", "dp", "cp", "tp", "pp", "ep", NULL};
_Static_assert(sizeof GROUP_KIND_NAMES / sizeof GROUP_KIND_NAMES[0] == LS_TRACE_GROUP_KIND_COUNT + 1, "group kinds");
/* gradient_probe: the gradient mode, the grouping of the directions, the verdicts */
static const char *const GRAD_MODE_NAMES[] = {"detached", "full", NULL};
static const char *const PROBE_GROUPING_NAMES[] = {"all", "layer", NULL};
static const char *const PROBE_VERDICT_NAMES[] = {"pass", "fail", "reported", "not_applicable", NULL};
static const char *const PROBE_GROUP_VERDICT_NAMES[] = {"pass", "fail", "reported", "not_applicable", NULL};

/* strcmp(a, b) == 0 for the short names of the tables, inline. */
static inline bool name_eq(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static const char *name_at(const char *const *table, size_t count, int v) {
    if (v < 0 || (size_t)v >= count) return "unknown";
    return table[v];
}

const char *ls_trace_kind_name(ls_trace_kind k) { return name_at(KIND_NAMES, LS_TRACE_KIND_COUNT, (int)k); }
const char *ls_trace_phase_name(ls_trace_phase p) { return name_at(PHASE_NAMES, LS_PHASE_COUNT, (int)p); }
const char *ls_trace_layer_kind_name(ls_trace_layer_kind k) {
    return name_at(LAYER_KIND_NAMES, LS_TRACE_LAYER_KIND_COUNT, (int)k);
}
const char *ls_trace_dir_name(ls_trace_dir d) { return name_at(DIR_NAMES, LS_TRACE_DIR_COUNT, (int)d); }
const char *ls_trace_op_name(ls_trace_op o) { return name_at(OP_NAMES_V2, LS_TRACE_OP_COUNT_V2, (int)o); }
const char *ls_trace_red_name(ls_trace_red r) { return name_at(RED_NAMES_V2, LS_TRACE_RED_COUNT_V2, (int)r); }
const char *ls_trace_dtype_name(ls_trace_dtype d) {
    return name_at(DTYPE_NAMES_V2, LS_TRACE_DTYPE_COUNT_V2, (int)d);
}
const char *ls_trace_objective_name(ls_trace_objective o) {
    return name_at(OBJECTIVE_NAMES, LS_TRACE_OBJECTIVE_COUNT, (int)o);
}

const char *ls_trace_group_kind_name(ls_trace_group_kind k) {
    return name_at(GROUP_KIND_NAMES, LS_TRACE_GROUP_KIND_COUNT, (int)k);
}

ls_trace_kind ls_trace_kind_from_name(const char *name) {
    if (name == NULL) return LS_TRACE_KIND_UNKNOWN;
    int k; /* the one candidate its first characters leave, then compared */
    switch (name[0]) {
    case 'p':
        if (name_eq(KIND_NAMES[LS_TRACE_PHASE_BEGIN], name)) return LS_TRACE_PHASE_BEGIN;
        if (name_eq(KIND_NAMES[LS_TRACE_PHASE_END], name)) return LS_TRACE_PHASE_END;
        k = LS_TRACE_PARAM_DIGEST;
        break;
    case 'l': k = LS_TRACE_LAYER_END; break;
    case 'c': k = LS_TRACE_COLLECTIVE; break;
    case 'o': k = LS_TRACE_OPTIMIZER_STEP; break;
    case 'm': k = LS_TRACE_MEMORY; break;
    case 'e': k = LS_TRACE_ERROR; break;
    case 'r': k = LS_TRACE_RANK_COMPLETE; break;
    case 's': k = LS_TRACE_STEP_METRICS; break;
    case 'g': k = LS_TRACE_GRADIENT_PROBE; break;
    default: return LS_TRACE_KIND_UNKNOWN;
    }
    return name_eq(KIND_NAMES[k], name) ? (ls_trace_kind)k : LS_TRACE_KIND_UNKNOWN;
}

static int index_in(const char *const *table, const char *name) {
    if (name == NULL) return -1;
    for (int i = 0; table[i] != NULL; i++)
        if (name_eq(table[i], name)) return i;
    return -1;
}

int ls_trace_enum_from_name(const char *table, const char *name) {
    if (table == NULL) return -1;
    const char *const *t = NULL; /* the table by its first characters (called per event: no strcmp chain) */
    switch (table[0]) {
    case 'l': t = name_eq(table, "layer_kind") ? LAYER_KIND_NAMES : NULL; break;
    case 'd': t = name_eq(table, "dir") ? DIR_NAMES : name_eq(table, "dtype") ? DTYPE_NAMES : NULL; break;
    case 'o': t = name_eq(table, "op") ? OP_NAMES : name_eq(table, "objective") ? OBJECTIVE_NAMES : NULL; break;
    case 'r': t = name_eq(table, "red") ? RED_NAMES : NULL; break;
    case 'p': t = name_eq(table, "phase") ? PHASE_NAMES : NULL; break;
    case 'g': t = name_eq(table, "group_kind") ? GROUP_KIND_NAMES : NULL; break;
    default: break;
    }
    return t ? index_in(t, name) : -1;
}

int ls_trace_enum_from_name_v2(const char *table, const char *name) {
    if (table == NULL) return -1;
    if (name_eq(table, "op")) return index_in(OP_NAMES_V2, name);
    if (name_eq(table, "red")) return index_in(RED_NAMES_V2, name);
    if (name_eq(table, "dtype")) return index_in(DTYPE_NAMES_V2, name);
    return ls_trace_enum_from_name(table, name);
}

bool ls_trace_is_vocab_name(const char *s) {
    if (s == NULL || !(s[0] >= 'a' && s[0] <= 'z')) return false;
    size_t n = 1;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-')) return false;
    }
    return n <= LS_TRACE_VOCAB_NAME_MAX;
}

/* Bytes of an identifier after its first: a-z, 0-9, '_'. */
static const unsigned char IDENT_REST[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['_'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,
    ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1,
    ['z'] = 1,
};

bool ls_trace_is_ident(const char *s) {
    if (s == NULL || !(s[0] >= 'a' && s[0] <= 'z')) return false;
    const unsigned char *p = (const unsigned char *)s + 1;
    while (IDENT_REST[*p]) p++;
    return *p == '\0';
}

bool ls_trace_is_token(const char *s) {
    if (s == NULL || s[0] == '\0') return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < '!' || *p > '~') return false;
    return true;
}

/* 1 + the value of a lowercase hex digit, 0 for any other byte. */
static const unsigned char LOWER_HEX[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

/* Exactly `digits` lowercase hex digits, then the NUL. */
static bool is_hex_n(const char *s, size_t digits) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    while (n < digits && LOWER_HEX[u[n]]) n++; /* stops at the NUL at the latest */
    return n == digits && u[digits] == 0;
}

static bool is_hex64(const char *s) { return is_hex_n(s, 64); }

static const char *const DIGEST_ALG_NAMES[] = {"sha256", "xxh3_128", NULL};
static const size_t DIGEST_ALG_BYTES[] = {32, 16};
_Static_assert(sizeof DIGEST_ALG_NAMES / sizeof DIGEST_ALG_NAMES[0] == LS_TRACE_DIGEST_COUNT + 1, "digest names");

const char *ls_trace_digest_alg_name(ls_trace_digest_alg a) {
    return name_at(DIGEST_ALG_NAMES, LS_TRACE_DIGEST_COUNT, (int)a);
}

bool ls_trace_digest_parse(const char *s, ls_trace_digest_alg *alg, uint8_t *out, size_t *n) {
    if (s == NULL) return false;
    for (int a = 0; a < LS_TRACE_DIGEST_COUNT; a++) {
        size_t len = strlen(DIGEST_ALG_NAMES[a]);
        if (strncmp(s, DIGEST_ALG_NAMES[a], len) != 0 || s[len] != ':') continue;
        const char *hex = s + len + 1;
        size_t bytes = DIGEST_ALG_BYTES[a];
        if (!is_hex_n(hex, 2 * bytes)) return false;
        for (size_t i = 0; out != NULL && i < bytes; i++)
            out[i] = (uint8_t)((LOWER_HEX[(unsigned char)hex[2 * i]] - 1) << 4 | (LOWER_HEX[(unsigned char)hex[2 * i + 1]] - 1));
        if (alg) *alg = (ls_trace_digest_alg)a;
        if (n) *n = bytes;
        return true;
    }
    return false;
}

size_t ls_trace_utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return len;
}

bool ls_trace_json_int(const cJSON *item, int64_t *out) {
    if (!ls_json_is_number(item)) return false;
    double v = item->valuedouble;
    /* in range (NaN is not), then integral: exact through int64_t there */
    if (!(v >= -(double)LS_TRACE_MAX_INT && v <= (double)LS_TRACE_MAX_INT)) return false;
    int64_t i = (int64_t)v;
    if ((double)i != v) return false;
    if (out) *out = i;
    return true;
}

/* ---- the field table ---------------------------------------------------- */

typedef enum {
    FT_UINT,    /* integer >= 0 */
    FT_INT_M1,  /* integer >= -1 */
    FT_NUM0,    /* finite number >= 0 */
    FT_NUM,     /* finite number */
    FT_POS,     /* finite number > 0 */
    FT_UNIT,    /* finite number in [0, 1] */
    FT_COS,     /* finite number in [-1, 1] (a cosine) */
    FT_TRUE,    /* the literal true (prefix_frozen) */
    FT_RATES,   /* {phase: finite >= 0} for phases capture..prompt_bwd (tokens_per_s) */
    FT_BOOL,
    FT_IDENT,   /* ls_trace_is_ident */
    FT_TOKEN,   /* ls_trace_is_token */
    FT_TEXT,    /* any string */
    FT_ENUM,    /* one of `values` */
    FT_HEX64,   /* 64 lowercase hex digits */
    FT_DIGEST,  /* v2: "sha256:" + 64 or "xxh3_128:" + 32 lowercase hex digits (ls_trace_digest_parse) */
    FT_MEMCATS, /* {ident: {"live": uint, "peak": uint}} */
    FT_VNAME,   /* v2: ls_trace_is_vocab_name */
    FT_MEMCATS2, /* v2: {free name: {"live": uint, "peak": uint}}, bounded */
    FT_PROBE_GROUPS /* gradient_probe "groups": an array of group objects (check_probe_groups) */
} field_type;

typedef struct {
    const char *name;
    field_type type;
    const char *const *values; /* FT_ENUM only */
    bool optional;
} field_spec;

#define F(n, t) {n, t, NULL, false}
#define FO(n, t) {n, t, NULL, true}
#define FE(n, v) {n, FT_ENUM, v, false}
#define PF FO("prefix_frozen", FT_TRUE)

static const field_spec PHASE_BEGIN_F[] = {F("phase", FT_IDENT), F("step", FT_UINT), PF};
static const field_spec PHASE_END_F[] = {F("phase", FT_IDENT), F("step", FT_UINT),
                                         F("wall_ns", FT_UINT), F("ok", FT_BOOL), PF};
static const field_spec LAYER_END_F[] = {
    F("phase", FT_IDENT),        F("step", FT_UINT),       F("member", FT_INT_M1),
    F("layer", FT_INT_M1),       FE("kind", LAYER_KIND_NAMES), FE("dir", DIR_NAMES),
    F("tokens", FT_UINT),        F("live_bytes", FT_UINT), F("peak_bytes", FT_UINT),
    F("wall_ns", FT_UINT),       F("out_norm", FT_NUM0),   PF,
};
static const field_spec COLLECTIVE_F[] = {
    F("group", FT_TOKEN), F("gseq", FT_UINT),  FE("op", OP_NAMES),       FE("red", RED_NAMES),
    F("count", FT_UINT),  FE("dtype", DTYPE_NAMES), F("bytes", FT_UINT), F("purpose", FT_IDENT),
    {"layer", FT_INT_M1, NULL, true},
};
static const field_spec OPTIMIZER_STEP_F[] = {F("step", FT_UINT), F("n_params", FT_UINT),
                                              F("lr", FT_NUM0), F("grad_norm", FT_NUM0), PF};
static const field_spec PARAM_DIGEST_F[] = {F("step", FT_UINT), F("target", FT_TOKEN),
                                            F("sha256", FT_HEX64), PF};
static const field_spec MEMORY_F[] = {F("step", FT_UINT),       F("phase", FT_IDENT),
                                      F("categories", FT_MEMCATS), F("total_live", FT_UINT),
                                      F("total_peak", FT_UINT), F("rss_peak", FT_UINT),
                                      FO("host_live", FT_UINT), FO("host_peak", FT_UINT), PF};
static const field_spec ERROR_F[] = {F("code", FT_UINT), F("status", FT_TEXT), F("message", FT_TEXT)};
static const field_spec RANK_COMPLETE_F[] = {F("steps", FT_UINT), F("events", FT_UINT)};
/* In the order trace_step_metrics.c writes them. */
static const field_spec STEP_METRICS_F[] = {
    F("step", FT_UINT),
    PF,
    FE("objective", OBJECTIVE_NAMES),
    F("reward_mean", FT_NUM),
    F("reward_std", FT_NUM0),
    F("reward_min", FT_NUM),
    F("reward_max", FT_NUM),
    FO("reward_retrieval", FT_NUM), /* both or neither (checked below) */
    FO("reward_format", FT_NUM),
    F("adv_mean", FT_NUM),
    F("adv_std", FT_NUM0),
    F("loss", FT_NUM),
    F("loss_policy", FT_NUM),
    F("loss_kl", FT_NUM),
    F("kl_mean", FT_NUM),
    F("clip_fraction", FT_UNIT),
    F("ratio_min", FT_POS),
    F("ratio_mean", FT_POS),
    F("ratio_max", FT_POS),
    F("response_len_mean", FT_NUM0),
    F("tokens", FT_UINT),
    F("grad_norm", FT_NUM0),
    FO("grad_cosine", FT_COS), /* --grad-cosine-every steps only; with both norms (checked below) */
    FO("grad_norm_detached", FT_NUM0),
    FO("grad_norm_full", FT_NUM0),
    F("lr", FT_NUM0),
    F("tokens_per_s", FT_RATES),
    F("step_wall_s", FT_NUM0),
};

/* In the order the trainer writes them (trainer/run/run_probe.c). */
static const field_spec GRADIENT_PROBE_F[] = {
    F("step", FT_UINT),
    PF,
    FE("objective", OBJECTIVE_NAMES),
    FE("grad_mode", GRAD_MODE_NAMES),
    FE("grouping", PROBE_GROUPING_NAMES),
    F("h", FT_NUM0),
    F("seed", FT_UINT),
    F("evaluations", FT_UINT),
    F("seconds", FT_NUM0),
    F("tol", FT_NUM0),
    FE("verdict", PROBE_VERDICT_NAMES),
    FO("reason", FT_TEXT),
    F("ranks_agree", FT_BOOL),
    F("groups", FT_PROBE_GROUPS),
};

#undef F
#undef FO
#undef FE
#undef PF
_Static_assert(sizeof STEP_METRICS_F / sizeof STEP_METRICS_F[0] <= 32,
               "ls_trace_event_check keeps a 32-bit mask of the fields seen (LS_TRACE_MAX_FIELDS)");

typedef struct {
    const field_spec *fields;
    size_t n;
} kind_spec;

#define KS(a) {a, sizeof(a) / sizeof(a[0])}
static const kind_spec KINDS[LS_TRACE_KIND_COUNT] = {
    KS(PHASE_BEGIN_F),    KS(PHASE_END_F),    KS(LAYER_END_F),
    KS(COLLECTIVE_F),     KS(OPTIMIZER_STEP_F), KS(PARAM_DIGEST_F),
    KS(MEMORY_F),         KS(ERROR_F),        KS(RANK_COMPLETE_F),
    KS(STEP_METRICS_F),   KS(GRADIENT_PROBE_F),
};

/* v2 (docs/contract.md §1): the v1 fields at their v1 positions, v2-only
 * optional fields after them.  step_metrics is checked by check_metrics_v2. */
#define F(n, t) {n, t, NULL, false}
#define FO(n, t) {n, t, NULL, true}
#define FE(n, v) {n, FT_ENUM, v, false}
#define PF FO("prefix_frozen", FT_TRUE)
static const field_spec PHASE_BEGIN_F2[] = {F("phase", FT_VNAME), F("step", FT_UINT), PF};
static const field_spec PHASE_END_F2[] = {F("phase", FT_VNAME), F("step", FT_UINT),
                                          F("wall_ns", FT_UINT), F("ok", FT_BOOL), PF};
static const field_spec LAYER_END_F2[] = {
    F("phase", FT_VNAME),        F("step", FT_UINT),       F("member", FT_INT_M1),
    F("layer", FT_INT_M1),       F("kind", FT_VNAME),      FE("dir", DIR_NAMES),
    F("tokens", FT_UINT),        F("live_bytes", FT_UINT), F("peak_bytes", FT_UINT),
    F("wall_ns", FT_UINT),       F("out_norm", FT_NUM0),   PF,
    FO("recompute", FT_TRUE),
};
static const field_spec COLLECTIVE_F2[] = {
    F("group", FT_TOKEN), F("gseq", FT_UINT),  FE("op", OP_NAMES_V2),       FE("red", RED_NAMES_V2),
    F("count", FT_UINT),  FE("dtype", DTYPE_NAMES_V2), F("bytes", FT_UINT), F("purpose", FT_IDENT),
    FO("layer", FT_INT_M1), FO("step", FT_UINT), FO("out_sha256", FT_HEX64),
    /* point-to-point and digests (docs/contract.md §1; check_collective_v2 relates them) */
    FO("out_digest", FT_DIGEST), FO("in_digest", FT_DIGEST), FO("in_digest_done", FT_DIGEST),
    FO("peer", FT_UINT), FO("tag", FT_UINT), FO("declared", FT_TRUE),
};
static const field_spec MEMORY_F2[] = {F("step", FT_UINT),        F("phase", FT_VNAME),
                                       F("categories", FT_MEMCATS2), F("total_live", FT_UINT),
                                       F("total_peak", FT_UINT),  F("rss_peak", FT_UINT), PF};
#undef F
#undef FO
#undef FE
#undef PF
static const kind_spec KINDS_V2[LS_TRACE_KIND_COUNT] = {
    KS(PHASE_BEGIN_F2),   KS(PHASE_END_F2),   KS(LAYER_END_F2),
    KS(COLLECTIVE_F2),    KS(OPTIMIZER_STEP_F), KS(PARAM_DIGEST_F),
    KS(MEMORY_F2),        KS(ERROR_F),        KS(RANK_COMPLETE_F),
    KS(STEP_METRICS_F), /* not used: check_metrics_v2 */
    KS(GRADIENT_PROBE_F), /* not used: check_probe_v2 */
};
#undef KS

/* One of the five envelope keys ("v", "rank", "seq", "ts_ns", "ev"): one
 * comparison, chosen by the first character. */
static bool is_envelope_key(const char *key) {
    switch (key[0]) {
    case 'v': return key[1] == '\0';
    case 'r': return name_eq(key, "rank");
    case 's': return name_eq(key, "seq");
    case 't': return name_eq(key, "ts_ns");
    case 'e': return name_eq(key, "ev");
    default: return false;
    }
}

size_t ls_trace_kind_field_count(ls_trace_kind kind) {
    if ((int)kind < 0 || kind >= LS_TRACE_KIND_COUNT) return 0;
    return KINDS[kind].n;
}

const char *ls_trace_kind_field(ls_trace_kind kind, size_t i, bool *required) {
    if (i >= ls_trace_kind_field_count(kind)) return NULL;
    if (required) *required = !KINDS[kind].fields[i].optional;
    return KINDS[kind].fields[i].name;
}

bool ls_trace_kind_has_step(ls_trace_kind kind) {
    switch (kind) {
    case LS_TRACE_PHASE_BEGIN:
    case LS_TRACE_PHASE_END:
    case LS_TRACE_LAYER_END:
    case LS_TRACE_OPTIMIZER_STEP:
    case LS_TRACE_PARAM_DIGEST:
    case LS_TRACE_MEMORY:
    case LS_TRACE_STEP_METRICS:
    case LS_TRACE_GRADIENT_PROBE:
        return true;
    default:
        return false;
    }
}

bool ls_trace_event_prefix_frozen(const cJSON *event) {
    if (!ls_json_is_object(event)) return false;
    for (const cJSON *c = event->child; c; c = c->next) /* first character first: the hot path */
        if (c->string && c->string[0] == 'p' && strcmp(c->string, "prefix_frozen") == 0) return ls_json_is_true(c);
    return false;
}

static ls_status fail(char *why, size_t why_len, const char *kind, const char *field,
                      const char *what) {
    if (why && why_len) snprintf(why, why_len, "%s.%s: %s", kind, field, what);
    return LS_ERR_SCHEMA;
}

static bool check_uint(const cJSON *it) {
    int64_t v;
    return ls_trace_json_int(it, &v) && v >= 0;
}

static bool finite_num(const cJSON *it) { return ls_json_is_number(it) && isfinite(it->valuedouble); }

/* tokens_per_s: members named after the phases that process tokens. */
static const char *check_rates(const cJSON *it) {
    if (!ls_json_is_object(it)) return "must be an object";
    unsigned seen = 0;
    for (const cJSON *c = it->child; c; c = c->next) {
        int p = index_in(PHASE_NAMES, c->string);
        if (p < 0 || p > LS_PHASE_PROMPT_BWD)
            return "members must be capture, rollout, score, replay or prompt_bwd";
        if (seen & (1u << p)) return "a phase appears twice";
        seen |= 1u << p;
        if (!finite_num(c) || c->valuedouble < 0) return "rates must be finite numbers >= 0";
    }
    return NULL;
}

static const char *check_value(const field_spec *spec, const cJSON *it);

/* gradient_probe "groups": at most LS_TRACE_MAX_PROBE_GROUPS objects, each
 * exactly these members (any order), numbers finite. */
static const char *check_probe_groups(const cJSON *it) {
    static const struct {
        const char *name;
        field_type type;
        const char *const *values;
    } G[] = {
        {"name", FT_TOKEN, NULL},       {"tensors", FT_UINT, NULL},        {"derivative", FT_NUM, NULL},
        {"applied", FT_NUM, NULL},      {"error_estimate", FT_NUM0, NULL}, {"rounding_floor", FT_NUM0, NULL},
        {"rel_error", FT_NUM0, NULL},   {"tolerance", FT_NUM0, NULL},      {"h", FT_POS, NULL},
        {"decided_alike", FT_BOOL, NULL}, {"verdict", FT_ENUM, PROBE_GROUP_VERDICT_NAMES},
    };
    enum { NG = sizeof G / sizeof G[0] };
    if (!cJSON_IsArray(it)) return "must be an array";
    if (cJSON_GetArraySize(it) > LS_TRACE_MAX_PROBE_GROUPS) return "more than 4096 groups";
    for (const cJSON *g = it->child; g; g = g->next) {
        if (!ls_json_is_object(g)) return "each group must be an object";
        unsigned seen = 0;
        for (const cJSON *m = g->child; m; m = m->next) {
            size_t i = 0;
            while (i < NG && !(m->string && name_eq(G[i].name, m->string))) i++;
            if (i == NG) return "a group has a member other than name, tensors, derivative, applied, error_estimate, "
                                "rounding_floor, rel_error, tolerance, h, decided_alike, verdict";
            if (seen & (1u << i)) return "a group repeats a member";
            seen |= 1u << i;
            field_spec fs = {G[i].name, G[i].type, G[i].values, false};
            if (check_value(&fs, m) != NULL) return "a group member has the wrong type or range";
        }
        if (seen != (1u << NG) - 1) return "a group lacks a member";
    }
    return NULL;
}

/* NULL when item satisfies spec, else a short reason. */
static const char *check_value(const field_spec *spec, const cJSON *it) {
    int64_t iv;
    switch (spec->type) {
    case FT_NUM:
        return finite_num(it) ? NULL : "must be a finite number";
    case FT_POS:
        return finite_num(it) && it->valuedouble > 0 ? NULL : "must be a finite number > 0";
    case FT_UNIT:
        return finite_num(it) && it->valuedouble >= 0 && it->valuedouble <= 1
                   ? NULL
                   : "must be a finite number in [0, 1]";
    case FT_COS:
        return finite_num(it) && it->valuedouble >= -1 && it->valuedouble <= 1
                   ? NULL
                   : "must be a finite number in [-1, 1]";
    case FT_TRUE:
        return ls_json_is_true(it) ? NULL : "must be true (absent when false)";
    case FT_RATES:
        return check_rates(it);
    case FT_UINT:
        return check_uint(it) ? NULL : "must be an integer >= 0 (at most 2^53-1)";
    case FT_INT_M1:
        return ls_trace_json_int(it, &iv) && iv >= -1 ? NULL
                                                     : "must be an integer >= -1 (at most 2^53-1)";
    case FT_NUM0:
        return ls_json_is_number(it) && isfinite(it->valuedouble) && it->valuedouble >= 0
                   ? NULL
                   : "must be a finite number >= 0";
    case FT_BOOL:
        return cJSON_IsBool(it) ? NULL : "must be true or false";
    case FT_IDENT:
        return ls_json_is_string(it) && ls_trace_is_ident(it->valuestring)
                   ? NULL
                   : "must be a string matching ^[a-z][a-z0-9_]*$";
    case FT_TOKEN:
        return ls_json_is_string(it) && ls_trace_is_token(it->valuestring)
                   ? NULL
                   : "must be a non-empty printable ASCII string without spaces";
    case FT_TEXT:
        return ls_json_is_string(it) ? NULL : "must be a string";
    case FT_ENUM:
        return ls_json_is_string(it) && index_in(spec->values, it->valuestring) >= 0
                   ? NULL
                   : "must be one of the enumerated names";
    case FT_HEX64:
        return ls_json_is_string(it) && is_hex64(it->valuestring)
                   ? NULL
                   : "must be 64 lowercase hex digits";
    case FT_DIGEST:
        return ls_json_is_string(it) && ls_trace_digest_parse(it->valuestring, NULL, NULL, NULL)
                   ? NULL
                   : "must be \"sha256:\" and 64 or \"xxh3_128:\" and 32 lowercase hex digits";
    case FT_VNAME:
        return ls_json_is_string(it) && ls_trace_is_vocab_name(it->valuestring)
                   ? NULL
                   : "must be a string matching ^[a-z][a-z0-9_.-]{0,31}$";
    case FT_MEMCATS:
    case FT_MEMCATS2:
        if (!ls_json_is_object(it)) return "must be an object";
        if (spec->type == FT_MEMCATS2 && cJSON_GetArraySize(it) > LS_TRACE_MAX_MEM_CATEGORIES)
            return "more than 64 categories";
        for (const cJSON *c = it->child; c; c = c->next) {
            if (spec->type == FT_MEMCATS2) {
                if (!ls_trace_is_token(c->string) || strlen(c->string) > 64)
                    return "category names must be printable ASCII without spaces, at most 64 bytes";
            } else if (!ls_trace_is_ident(c->string)) {
                return "category names must match ^[a-z][a-z0-9_]*$";
            }
            if (!ls_json_is_object(c)) return "each category must be an object {live, peak}";
            int n = 0, tier = 0;
            for (const cJSON *m = c->child; m; m = m->next) {
                if (m->string != NULL && spec->type == FT_MEMCATS && name_eq(m->string, "tier") && !tier) {
                    if (!cJSON_IsString(m) || !m->valuestring || strcmp(m->valuestring, "host") != 0)
                        return "a category's tier must be \"host\" (absent: the device tier)";
                    tier = 1;
                    continue;
                }
                if (m->string == NULL ||
                    (!name_eq(m->string, "live") && !name_eq(m->string, "peak")))
                    return "a category has a property other than live, peak and tier";
                if (!check_uint(m)) return "category live/peak must be integers >= 0";
                n++;
            }
            if (n != 2) return "each category needs exactly live and peak";
        }
        return NULL;
    case FT_PROBE_GROUPS:
        return check_probe_groups(it);
    }
    return "unknown field type";
}

#define FIELD_ENVELOPE (-2)

/* Index of key in the kind's table, trying `hint` first (events list their
 * fields in table order, so the hint nearly always hits); FIELD_ENVELOPE for
 * an envelope key that is no field of the kind, -1 for any other key. */
static int field_index(const kind_spec *ks, const char *key, size_t hint) {
    if (hint < ks->n && name_eq(ks->fields[hint].name, key)) return (int)hint;
    if (hint == 0 && is_envelope_key(key)) return FIELD_ENVELOPE; /* the envelope comes first */
    for (size_t i = 0; i < ks->n; i++)
        if (name_eq(ks->fields[i].name, key)) return (int)i;
    return is_envelope_key(key) ? FIELD_ENVELOPE : -1;
}

ls_status ls_trace_event_check(ls_trace_kind kind, const cJSON *event, char *why, size_t why_len) {
    return ls_trace_event_check_ex(kind, event, 0, why, why_len, NULL, NULL);
}

static ls_status check_table(const kind_spec *ks, const char *kname, const cJSON *event, size_t skip, char *why,
                             size_t why_len, bool *prefix_frozen, const cJSON **fields);

int ls_trace_field_index(ls_trace_kind kind, const char *name) {
    if ((int)kind < 0 || kind >= LS_TRACE_KIND_COUNT || name == NULL) return -1;
    const kind_spec *ks = &KINDS[kind];
    for (size_t i = 0; i < ks->n; i++)
        if (name_eq(ks->fields[i].name, name)) return (int)i;
    ks = &KINDS_V2[kind]; /* the v2-only fields, after the v1 ones */
    for (size_t i = 0; i < ks->n; i++)
        if (name_eq(ks->fields[i].name, name)) return (int)i;
    return -1;
}

/* v2 step_metrics: step, objective, optional prefix_frozen, free members
 * (finite numbers or null), at most LS_TRACE_MAX_METRICS in all. */
static ls_status check_metrics_v2(const cJSON *event, size_t skip, char *why, size_t why_len,
                                  bool *prefix_frozen, const cJSON **fields) {
    const char *kname = KIND_NAMES[LS_TRACE_STEP_METRICS];
    const kind_spec *ks = &KINDS[LS_TRACE_STEP_METRICS];
    const cJSON *first = event->child;
    for (size_t k = 0; k < skip && first; k++) first = first->next;
    bool step = false, objective = false, frozen = false;
    size_t n = 0;
    for (const cJSON *c = first; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        if (is_envelope_key(key)) continue;
        if (++n > LS_TRACE_MAX_METRICS) return fail(why, why_len, kname, "(event)", "more than 64 members");
        int i = field_index(ks, key, 0);
        if (name_eq(key, "step") || name_eq(key, "objective") || name_eq(key, "prefix_frozen")) {
            const char *bad = check_value(&ks->fields[i], c);
            if (bad) return fail(why, why_len, kname, key, bad);
            step |= name_eq(key, "step");
            objective |= name_eq(key, "objective");
            frozen |= name_eq(key, "prefix_frozen");
            if (fields) fields[i] = c;
            continue;
        }
        if (!ls_trace_is_vocab_name(key) && !(ls_trace_is_ident(key) && strlen(key) <= 64))
            return fail(why, why_len, kname, key, "metric names must match ^[a-z][a-z0-9_.-]*$ (at most 64 bytes)");
        if (!cJSON_IsNull(c) && !finite_num(c))
            return fail(why, why_len, kname, key, "must be a finite number or null");
        if (fields && i >= 0 && check_value(&ks->fields[i], c) == NULL) fields[i] = c;
    }
    if (!step) return fail(why, why_len, kname, "step", "missing");
    if (!objective) return fail(why, why_len, kname, "objective", "missing");
    if (prefix_frozen) *prefix_frozen = frozen;
    return LS_OK;
}

/* v2 gradient_probe (another trainer's, schemas/event-v2.schema.json): "step"
 * and "verdict" as v1 has them, optional prefix_frozen; the other members
 * are the v2 schema's to check (this table does not bind their form). */
static ls_status check_probe_v2(const cJSON *event, size_t skip, char *why, size_t why_len, bool *prefix_frozen,
                                const cJSON **fields) {
    const char *kname = KIND_NAMES[LS_TRACE_GRADIENT_PROBE];
    const kind_spec *ks = &KINDS[LS_TRACE_GRADIENT_PROBE];
    const cJSON *first = event->child;
    for (size_t k = 0; k < skip && first; k++) first = first->next;
    bool step = false, verdict = false, frozen = false;
    for (const cJSON *c = first; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        if (is_envelope_key(key)) continue;
        if (!name_eq(key, "step") && !name_eq(key, "verdict") && !name_eq(key, "prefix_frozen")) continue;
        int i = field_index(ks, key, 0);
        const char *bad = check_value(&ks->fields[i], c);
        if (bad) return fail(why, why_len, kname, key, bad);
        step |= name_eq(key, "step");
        verdict |= name_eq(key, "verdict");
        frozen |= name_eq(key, "prefix_frozen");
        if (fields) fields[i] = c;
    }
    if (!step) return fail(why, why_len, kname, "step", "missing");
    if (!verdict) return fail(why, why_len, kname, "verdict", "missing");
    if (prefix_frozen) *prefix_frozen = frozen;
    return LS_OK;
}

/* A v2 collective's fields that speak of each other (docs/contract.md §1),
 * after check_table found each of the right form: out_sha256 H and
 * out_digest "sha256:H" are one fact; peer and tag belong to a send or
 * recv, in_digest to a send; in_digest_done is written only beside an
 * in_digest of its algorithm, when it differs from it. */
static ls_status check_collective_v2(const cJSON *event, size_t skip, char *why, size_t why_len) {
    const char *kname = KIND_NAMES[LS_TRACE_COLLECTIVE];
    const cJSON *op = NULL, *sha = NULL, *out = NULL, *in = NULL, *done = NULL, *peer = NULL, *tag = NULL;
    const cJSON *first = event->child;
    for (size_t k = 0; k < skip && first; k++) first = first->next;
    for (const cJSON *c = first; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        switch (key[0]) { /* first character first: called for every collective */
        case 'o':
            if (name_eq(key, "op")) op = c;
            else if (name_eq(key, "out_sha256")) sha = c;
            else if (name_eq(key, "out_digest")) out = c;
            break;
        case 'i':
            if (name_eq(key, "in_digest")) in = c;
            else if (name_eq(key, "in_digest_done")) done = c;
            break;
        case 'p':
            if (name_eq(key, "peer")) peer = c;
            break;
        case 't':
            if (name_eq(key, "tag")) tag = c;
            break;
        default:
            break;
        }
    }
    if (out == NULL && in == NULL && done == NULL && peer == NULL && tag == NULL) return LS_OK; /* the common case */
    if (sha != NULL && out != NULL &&
        (strncmp(out->valuestring, "sha256:", 7) != 0 || strcmp(out->valuestring + 7, sha->valuestring) != 0))
        return fail(why, why_len, kname, "out_digest",
                    "differs from out_sha256 (both state the output's digest: out_digest must be \"sha256:\" + "
                    "out_sha256)");
    bool send = op != NULL && name_eq(op->valuestring, "send"), recv = op != NULL && name_eq(op->valuestring, "recv");
    if (peer != NULL && !send && !recv) return fail(why, why_len, kname, "peer", "only a send or recv has a peer");
    if (tag != NULL && !send && !recv) return fail(why, why_len, kname, "tag", "only a send or recv has a tag");
    if (in != NULL && !send) return fail(why, why_len, kname, "in_digest", "only a send has an input digest");
    if (done != NULL) {
        if (in == NULL)
            return fail(why, why_len, kname, "in_digest_done", "written only beside in_digest (the digest at issue)");
        ls_trace_digest_alg a = LS_TRACE_DIGEST_COUNT, b = LS_TRACE_DIGEST_COUNT;
        ls_trace_digest_parse(in->valuestring, &a, NULL, NULL);
        ls_trace_digest_parse(done->valuestring, &b, NULL, NULL);
        if (a != b) return fail(why, why_len, kname, "in_digest_done", "must use in_digest's algorithm");
        if (strcmp(in->valuestring, done->valuestring) == 0)
            return fail(why, why_len, kname, "in_digest_done",
                        "equals in_digest (written only when the buffer changed before the send completed)");
    }
    return LS_OK;
}

ls_status ls_trace_event_check_v(int version, ls_trace_kind kind, const cJSON *event, size_t skip, char *why,
                                 size_t why_len, bool *prefix_frozen, const cJSON **fields) {
    if (version == LS_TRACE_VERSION)
        return ls_trace_event_check_ex(kind, event, skip, why, why_len, prefix_frozen, fields);
    if (why && why_len) why[0] = '\0';
    if (version != LS_TRACE_VERSION_V2 || event == NULL || (int)kind < 0 || kind >= LS_TRACE_KIND_COUNT) {
        if (why && why_len) snprintf(why, why_len, "no event, unknown kind or unknown version");
        return LS_ERR_ARG;
    }
    const char *kname = KIND_NAMES[kind];
    if (!ls_json_is_object(event)) return fail(why, why_len, kname, "(event)", "must be an object");
    if (fields) memset(fields, 0, LS_TRACE_MAX_FIELDS * sizeof *fields);
    if (kind == LS_TRACE_STEP_METRICS) return check_metrics_v2(event, skip, why, why_len, prefix_frozen, fields);
    if (kind == LS_TRACE_GRADIENT_PROBE) return check_probe_v2(event, skip, why, why_len, prefix_frozen, fields);
    ls_status st = check_table(&KINDS_V2[kind], kname, event, skip, why, why_len, prefix_frozen, fields);
    if (st == LS_OK && kind == LS_TRACE_COLLECTIVE) st = check_collective_v2(event, skip, why, why_len);
    return st;
}

/* The fields of event (after its first `skip` members) against a table. */
static ls_status check_table(const kind_spec *ks, const char *kname, const cJSON *event, size_t skip, char *why,
                             size_t why_len, bool *prefix_frozen, const cJSON **fields) {
    uint32_t seen = 0; /* tables have at most 32 fields */
    size_t hint = 0;
    const cJSON *first = event->child;
    for (size_t k = 0; k < skip && first; k++) first = first->next;
    for (const cJSON *c = first; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        int i = field_index(ks, key, hint);
        if (i == FIELD_ENVELOPE) continue;
        if (i < 0) return fail(why, why_len, kname, key, "not a field of this kind");
        if (seen & (UINT32_C(1) << i)) return fail(why, why_len, kname, key, "repeated");
        seen |= UINT32_C(1) << i;
        hint = (size_t)i + 1;
        if (fields) fields[i] = c;
        const char *bad = check_value(&ks->fields[i], c);
        if (bad) return fail(why, why_len, kname, key, bad);
    }
    for (size_t i = 0; i < ks->n; i++)
        if (!(seen & (UINT32_C(1) << i)) && !ks->fields[i].optional)
            return fail(why, why_len, kname, ks->fields[i].name, "missing");
    if (prefix_frozen) { /* the kinds with "step" have it optional, as true only */
        *prefix_frozen = false;
        for (size_t i = 0; i < ks->n; i++)
            if (ks->fields[i].type == FT_TRUE && name_eq(ks->fields[i].name, "prefix_frozen") &&
                (seen & (UINT32_C(1) << i)))
                *prefix_frozen = true;
    }
    return LS_OK;
}

ls_status ls_trace_event_check_ex(ls_trace_kind kind, const cJSON *event, size_t skip, char *why,
                                  size_t why_len, bool *prefix_frozen, const cJSON **fields) {
    if (why && why_len) why[0] = '\0';
    if (event == NULL || (int)kind < 0 || kind >= LS_TRACE_KIND_COUNT) {
        if (why && why_len) snprintf(why, why_len, "no event or unknown kind");
        return LS_ERR_ARG;
    }
    const char *kname = KIND_NAMES[kind];
    if (!ls_json_is_object(event)) return fail(why, why_len, kname, "(event)", "must be an object");
    if (fields) memset(fields, 0, LS_TRACE_MAX_FIELDS * sizeof *fields);
    ls_status st = check_table(&KINDS[kind], kname, event, skip, why, why_len, prefix_frozen, fields);
    if (st != LS_OK) return st;
    if (kind == LS_TRACE_STEP_METRICS) {
        bool r = cJSON_GetObjectItemCaseSensitive(event, "reward_retrieval") != NULL;
        bool f = cJSON_GetObjectItemCaseSensitive(event, "reward_format") != NULL;
        if (r != f)
            return fail(why, why_len, kname, r ? "reward_format" : "reward_retrieval",
                        "missing (the reward parts come together)");
        bool nd = cJSON_GetObjectItemCaseSensitive(event, "grad_norm_detached") != NULL;
        bool nf = cJSON_GetObjectItemCaseSensitive(event, "grad_norm_full") != NULL;
        bool c = cJSON_GetObjectItemCaseSensitive(event, "grad_cosine") != NULL;
        if (nd != nf || (c && !nd))
            return fail(why, why_len, kname, nd ? "grad_norm_full" : "grad_norm_detached",
                        "missing (the gradient comparison's norms come together, and with grad_cosine)");
    }
    return LS_OK;
}

/* ---- typed views ---------------------------------------------------------- */

static int64_t get_int(const cJSON *ev, const char *k) {
    int64_t v = 0;
    ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev, k), &v);
    return v;
}

static const char *get_str(const cJSON *ev, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(ev, k)->valuestring;
}

/* The format version an event object carries ("v": 2, else 1). */
static int event_version(const cJSON *ev) {
    int64_t v = 0;
    return ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(ev, "v"), &v) && v == LS_TRACE_VERSION_V2
               ? LS_TRACE_VERSION_V2
               : LS_TRACE_VERSION;
}

ls_status ls_trace_decode_layer_end(const cJSON *ev, ls_trace_layer_end *out) {
    if (ev == NULL || out == NULL) return LS_ERR_ARG;
    int version = event_version(ev);
    if (ls_trace_event_check_v(version, LS_TRACE_LAYER_END, ev, 0, NULL, 0, NULL, NULL) != LS_OK) return LS_ERR_SCHEMA;
    out->phase = get_str(ev, "phase");
    out->step = get_int(ev, "step");
    out->member = get_int(ev, "member");
    out->layer = get_int(ev, "layer");
    int kind = index_in(LAYER_KIND_NAMES, get_str(ev, "kind"));
    out->kind = (ls_trace_layer_kind)(kind >= 0 ? kind : LS_TRACE_LAYER_KIND_COUNT); /* v2: a name v1 lacks */
    out->dir = (ls_trace_dir)index_in(DIR_NAMES, get_str(ev, "dir"));
    out->tokens = get_int(ev, "tokens");
    out->live_bytes = get_int(ev, "live_bytes");
    out->peak_bytes = get_int(ev, "peak_bytes");
    out->wall_ns = get_int(ev, "wall_ns");
    out->out_norm = cJSON_GetObjectItemCaseSensitive(ev, "out_norm")->valuedouble;
    out->prefix_frozen = ls_trace_event_prefix_frozen(ev);
    return LS_OK;
}

ls_status ls_trace_decode_collective(const cJSON *ev, ls_trace_collective *out) {
    if (ev == NULL || out == NULL) return LS_ERR_ARG;
    if (ls_trace_event_check_v(event_version(ev), LS_TRACE_COLLECTIVE, ev, 0, NULL, 0, NULL, NULL) != LS_OK)
        return LS_ERR_SCHEMA;
    out->group = get_str(ev, "group");
    out->gseq = get_int(ev, "gseq");
    out->op = (ls_trace_op)index_in(OP_NAMES_V2, get_str(ev, "op")); /* v1's names at their v1 indices */
    out->red = (ls_trace_red)index_in(RED_NAMES_V2, get_str(ev, "red"));
    out->count = get_int(ev, "count");
    out->dtype = (ls_trace_dtype)index_in(DTYPE_NAMES_V2, get_str(ev, "dtype"));
    out->bytes = get_int(ev, "bytes");
    out->purpose = get_str(ev, "purpose");
    const cJSON *layer = cJSON_GetObjectItemCaseSensitive(ev, "layer");
    out->has_layer = layer != NULL;
    out->layer = layer ? get_int(ev, "layer") : 0;
    return LS_OK;
}
