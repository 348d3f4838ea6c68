/* trace_event.h - the vocabulary of LongStraw trace events (docs/design.md §6).
 *
 * A per-rank trace is JSON Lines: a header object on line 1, then one event
 * per line with the fixed envelope "v", "rank", "seq", "ts_ns", "ev" (in that
 * order) followed by the fields of the event's kind.  This module names the
 * kinds and the enumerated values the writer (trace_writer.h) produces and the
 * reader (trace_reader.h) accepts, and holds the one table of every kind's
 * fields: the writer validates its generic events against it, the reader
 * checks every event it delivers against it, and a test checks that
 * schemas/event-<kind>.schema.json says the same.
 *
 * Everything here is static data or pure functions: thread-safe, no
 * allocation.  Name functions return static strings and never NULL. */
#ifndef LS_RECEIPTS_TRACE_EVENT_H
#define LS_RECEIPTS_TRACE_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"

/* Format version written as "v" in the header and in every event. */
#define LS_TRACE_VERSION 1
/* Header "kind" and "schema" values. */
#define LS_TRACE_HEADER_KIND "longstraw.trace.header"
#define LS_TRACE_HEADER_SCHEMA "urn:longstraw:schema:event-header:v1"
/* v2 (docs/contract.md §1): written by any trainer, read by the reader.  The
 * header names its vocabularies: "phases" and "layer_kinds", 1..
 * LS_TRACE_MAX_VOCAB distinct names matching ^[a-z][a-z0-9_.-]{0,31}$ (every
 * phase and layer kind of the trace is one of them), "groups"[].kind a
 * registered group kind (ls_trace_group_kind), and "profile".  Events carry "v":2.  The
 * enumerations below grow by the v2 values after their v1 _COUNT (v1 traces
 * still accept only the v1 names; the indices of v1 names are unchanged). */
#define LS_TRACE_VERSION_V2 2
#define LS_TRACE_HEADER_SCHEMA_V2 "urn:longstraw:schema:event-header:v2"
#define LS_TRACE_MAX_VOCAB 32          /* names in a v2 vocabulary */
#define LS_TRACE_VOCAB_NAME_MAX 32     /* bytes of one vocabulary name */
#define LS_TRACE_MAX_MEM_CATEGORIES 64 /* categories of one v2 memory event */
#define LS_TRACE_MAX_METRICS 64        /* members of one v2 step_metrics event */
/* Longest line (JSON text plus its '\n') the writer writes and the reader
 * accepts. */
#define LS_TRACE_MAX_LINE ((size_t)1 << 20)
/* Largest integer magnitude an event field may carry: every JSON reader that
 * stores numbers as doubles holds it exactly.  (The header's start_unix_ns
 * is the one exception: wall-clock nanoseconds exceed it, and a double
 * reader sees them to ~0.25 µs.) */
#define LS_TRACE_MAX_INT INT64_C(9007199254740991)

/* Event kinds.  The numbering is internal (files carry the names); only
 * tables in trace_event.c are indexed by it. */
typedef enum {
    LS_TRACE_PHASE_BEGIN = 0,
    LS_TRACE_PHASE_END,
    LS_TRACE_LAYER_END,
    LS_TRACE_COLLECTIVE,
    LS_TRACE_OPTIMIZER_STEP,
    LS_TRACE_PARAM_DIGEST,
    LS_TRACE_MEMORY,
    LS_TRACE_ERROR,
    LS_TRACE_RANK_COMPLETE,
    LS_TRACE_STEP_METRICS, /* receipts/format/trace_step_metrics.h */
    LS_TRACE_GRADIENT_PROBE, /* a step's in-run gradient probe (docs/train.md, --probe-every) */
    LS_TRACE_KIND_COUNT,
    LS_TRACE_KIND_UNKNOWN = LS_TRACE_KIND_COUNT /* a kind outside this list */
} ls_trace_kind;

/* The phases of one training step (docs/design.md §3).  Events carry phases as
 * strings; other identifiers ([a-z][a-z0-9_]*) are allowed too. */
typedef enum {
    LS_PHASE_CAPTURE = 0,
    LS_PHASE_ROLLOUT,
    LS_PHASE_SCORE,
    LS_PHASE_REPLAY,
    LS_PHASE_PROMPT_BWD,
    LS_PHASE_FINALIZE,
    LS_PHASE_OPTIMIZER,
    LS_PHASE_COUNT
} ls_trace_phase;

/* step_metrics "objective". */
typedef enum { LS_TRACE_OBJECTIVE_GRPO = 0, LS_TRACE_OBJECTIVE_SFT, LS_TRACE_OBJECTIVE_COUNT } ls_trace_objective;

/* layer_end "kind". */
typedef enum {
    LS_TRACE_LAYER_GDN = 0,
    LS_TRACE_LAYER_ATTN,
    LS_TRACE_LAYER_MLA,
    LS_TRACE_LAYER_EMBED,
    LS_TRACE_LAYER_HEAD,
    LS_TRACE_LAYER_KIND_COUNT
} ls_trace_layer_kind;

/* layer_end "dir". */
typedef enum { LS_TRACE_DIR_FWD = 0, LS_TRACE_DIR_BWD, LS_TRACE_DIR_COUNT } ls_trace_dir;

/* collective "op". */
typedef enum {
    LS_TRACE_OP_ALLREDUCE = 0,
    LS_TRACE_OP_BROADCAST,
    LS_TRACE_OP_ALLGATHER,
    LS_TRACE_OP_SENDRECV,
    LS_TRACE_OP_REDUCE_SCATTER,
    LS_TRACE_OP_BARRIER,
    LS_TRACE_OP_COUNT, /* v1's */
    LS_TRACE_OP_ALL_TO_ALL = LS_TRACE_OP_COUNT, /* v2 only from here */
    LS_TRACE_OP_SEND,
    LS_TRACE_OP_RECV,
    LS_TRACE_OP_REDUCE,
    LS_TRACE_OP_COUNT_V2
} ls_trace_op;

/* collective "red". */
typedef enum {
    LS_TRACE_RED_SUM = 0,
    LS_TRACE_RED_MAX,
    LS_TRACE_RED_NONE,
    LS_TRACE_RED_COUNT, /* v1's */
    LS_TRACE_RED_MIN = LS_TRACE_RED_COUNT, /* v2 only from here */
    LS_TRACE_RED_PROD,
    LS_TRACE_RED_AVG,
    LS_TRACE_RED_COUNT_V2
} ls_trace_red;

/* collective "dtype". */
typedef enum {
    LS_TRACE_DTYPE_F32 = 0,
    LS_TRACE_DTYPE_F64,
    LS_TRACE_DTYPE_I64,
    LS_TRACE_DTYPE_U8,
    LS_TRACE_DTYPE_COUNT, /* v1's */
    LS_TRACE_DTYPE_BF16 = LS_TRACE_DTYPE_COUNT, /* v2 only from here */
    LS_TRACE_DTYPE_F16,
    LS_TRACE_DTYPE_I32,
    LS_TRACE_DTYPE_I8,
    LS_TRACE_DTYPE_BOOL,
    LS_TRACE_DTYPE_COUNT_V2
} ls_trace_dtype;

/* v2 digest algorithms of a collective's "out_digest", "in_digest" and
 * "in_digest_done" (docs/contract.md §1): "ALG:HEX", sha256 with 64 and
 * xxh3_128 (XXH3-128, its canonical big-endian hex) with 32 lowercase hex
 * digits. */
typedef enum {
    LS_TRACE_DIGEST_SHA256 = 0,
    LS_TRACE_DIGEST_XXH3_128,
    LS_TRACE_DIGEST_COUNT
} ls_trace_digest_alg;

/* Typed forms of the kinds with many fields, used by the writer's emitters
 * (strings borrowed during the call) and filled by the decoders below
 * (strings pointing into the decoded cJSON object). */

/* layer_end: one layer finished its forward or backward pass. */
typedef struct {
    const char *phase;        /* ident, e.g. ls_trace_phase_name(LS_PHASE_REPLAY) */
    int64_t step;             /* >= 0 */
    int64_t member;           /* group member, -1 when the phase has none */
    int64_t layer;            /* -1 embedding, 0..n_layers-1, n_layers = head */
    ls_trace_layer_kind kind;
    ls_trace_dir dir;
    int64_t tokens;           /* >= 0 */
    int64_t live_bytes;       /* >= 0 */
    int64_t peak_bytes;       /* >= 0 */
    int64_t wall_ns;          /* >= 0 */
    double out_norm;          /* finite, >= 0 */
    bool prefix_frozen;       /* the step reused a stale prompt state (see
                                 ls_trace_writer_set_prefix_frozen); written
                                 as "prefix_frozen":true only when true */
} ls_trace_layer_end;

/* collective: one communication call. */
typedef struct {
    const char *group;        /* token, a group of the header */
    int64_t gseq;             /* per-group sequence number from 0 */
    ls_trace_op op;
    ls_trace_red red;
    int64_t count;            /* elements, >= 0 */
    ls_trace_dtype dtype;
    int64_t bytes;            /* >= 0 */
    const char *purpose;      /* ident: "attn_merge_max", "dkv_reduce", ... */
    bool has_layer;           /* write "layer" only when true */
    int64_t layer;            /* >= -1 */
} ls_trace_collective;

/* One memory category's figures. */
typedef struct {
    const char *name;         /* ident, distinct within the event */
    int64_t live;             /* >= 0 */
    int64_t peak;             /* >= 0 */
    bool host;                /* a host-tier category ("tier": "host"): not in total_live/total_peak but in
                                 the event's host_live/host_peak (docs/trace.md, memory) */
} ls_trace_mem_category;

/* memory: per-category and total figures at the end of a phase. */
typedef struct {
    int64_t step;
    const char *phase;
    const ls_trace_mem_category *categories; /* may be NULL when n_categories is 0 */
    size_t n_categories;
    int64_t total_live, total_peak, rss_peak; /* >= 0: the device tier's totals (every category not host) */
    int64_t host_live, host_peak;             /* >= 0: the host tier's totals, written when a category is host */
} ls_trace_memory;

/* Group kinds: the registered names of a communicator group's role, the
 * one table of them (trace headers' "groups"[].kind, v1 and v2; the
 * communicator's groups, trainer/dist/comm.h; the audit profiles'
 * "group_kind").  A new kind is one entry here, appended (the numbering
 * is internal: files carry the names). */
typedef enum {
    LS_TRACE_GROUP_WORLD = 0, /* "world": every rank of the run */
    LS_TRACE_GROUP_DP,        /* "dp": data-parallel replicas */
    LS_TRACE_GROUP_CP,        /* "cp": context parallelism (one prompt's shards) */
    LS_TRACE_GROUP_TP,        /* "tp": tensor parallelism */
    LS_TRACE_GROUP_PP,        /* "pp": pipeline parallelism */
    LS_TRACE_GROUP_EP,        /* "ep": expert parallelism */
    LS_TRACE_GROUP_KIND_COUNT
} ls_trace_group_kind;

/* Names as written in files ("phase_begin", "replay", "gdn", "fwd",
 * "allreduce", "sum", "f32"); "unknown" for a value out of range. */
const char *ls_trace_kind_name(ls_trace_kind kind);
const char *ls_trace_phase_name(ls_trace_phase phase);
const char *ls_trace_layer_kind_name(ls_trace_layer_kind kind);
const char *ls_trace_dir_name(ls_trace_dir dir);
const char *ls_trace_op_name(ls_trace_op op);
const char *ls_trace_red_name(ls_trace_red red);
const char *ls_trace_dtype_name(ls_trace_dtype dtype);
const char *ls_trace_objective_name(ls_trace_objective objective);
/* "world", "dp", "cp", "tp", "pp", "ep" (enumerate with k < LS_TRACE_GROUP_KIND_COUNT). */
const char *ls_trace_group_kind_name(ls_trace_group_kind kind);

/* "sha256", "xxh3_128"; "unknown" for a value out of range. */
const char *ls_trace_digest_alg_name(ls_trace_digest_alg alg);

/* Parses a v2 digest string "ALG:HEX" (ls_trace_digest_alg): true with the
 * algorithm in *alg and the digest's bytes in out[0..*n) (32 for sha256, 16
 * for xxh3_128; out has room for 32) when s has exactly that form (lowercase
 * hex, nothing after it); false for NULL or anything else (*alg, out, *n
 * untouched).  alg, out and n may each be NULL. */
bool ls_trace_digest_parse(const char *s, ls_trace_digest_alg *alg, uint8_t *out, size_t *n);

/* Kind from its name; LS_TRACE_KIND_UNKNOWN for NULL or any other string. */
ls_trace_kind ls_trace_kind_from_name(const char *name);

/* Enumerated value from its name: the value's index, or -1 when name is NULL
 * or not one of the names.  `table` is one of "layer_kind", "dir", "op",
 * "red", "dtype", "phase", "objective", "group_kind" (-1 for any other
 * table). */
int ls_trace_enum_from_name(const char *table, const char *name);

/* ls_trace_enum_from_name over the v2 lists ("op", "red", "dtype" grown by
 * the v2 names; the other tables as there): a v1 name has its v1 index. */
int ls_trace_enum_from_name_v2(const char *table, const char *name);

/* A v2 vocabulary name: ^[a-z][a-z0-9_.-]{0,31}$ (phases, layer kinds). */
bool ls_trace_is_vocab_name(const char *s);

/* String classes the format uses (each also a "pattern" in the schemas).
 * ident: ^[a-z][a-z0-9_]*$ (phases, purposes, memory categories, kinds);
 * token: ^[!-~]+$ (printable ASCII, no space: groups, tensor names, run ids,
 * hosts).  NULL is neither. */
bool ls_trace_is_ident(const char *s);
bool ls_trace_is_token(const char *s);

/* Field table: the number of fields kind has (envelope excluded; 0 for
 * LS_TRACE_KIND_UNKNOWN), and field i's name (NULL when i is out of range)
 * and whether it is required. */
size_t ls_trace_kind_field_count(ls_trace_kind kind);
const char *ls_trace_kind_field(ls_trace_kind kind, size_t i, bool *required);

/* Prefix-frozen marking.  Every kind with a "step" field (phase_begin,
 * phase_end, layer_end, optimizer_step, param_digest, memory, step_metrics,
 * gradient_probe)
 * has the optional field "prefix_frozen", which is either absent (the step
 * is exact) or the literal true (the step ran against a prompt state
 * captured before an earlier update: stale).  true for those kinds. */
bool ls_trace_kind_has_step(ls_trace_kind kind);

/* true when event (an object, may be NULL) has "prefix_frozen": true. */
bool ls_trace_event_prefix_frozen(const cJSON *event);

/* Checks the kind-specific fields of an event object against the table:
 * every required field present with the right JSON type, integers integral
 * and within [min, LS_TRACE_MAX_INT], numbers finite and >= their minimum,
 * strings of their class, enum values from their list, no field twice, and
 * no property other than the kind's fields and the five envelope keys
 * (whose values are not checked here); "prefix_frozen" only as true, and
 * step_metrics' reward_retrieval and reward_format both or neither.  LS_OK, or LS_ERR_SCHEMA with one line naming the field
 * in why[why_len] (why may be NULL).  LS_ERR_ARG for a NULL event or an
 * unknown kind. */
ls_status ls_trace_event_check(ls_trace_kind kind, const cJSON *event, char *why, size_t why_len);

/* gradient_probe "groups": entries at most. */
#define LS_TRACE_MAX_PROBE_GROUPS 4096

/* Fields a kind's table holds at most (ls_trace_event.field). */
#define LS_TRACE_MAX_FIELDS 32

/* ls_trace_event_check for the reader: the first `skip` members of event
 * are not looked at (the reader passes 5 when they are the envelope keys in
 * order, which it has checked), and on LS_OK *prefix_frozen (when not NULL)
 * is ls_trace_event_prefix_frozen(event), found in the same pass, and
 * fields[i] (fields, when not NULL, has LS_TRACE_MAX_FIELDS entries) the
 * member holding the kind's i-th field (ls_trace_field_index), NULL when
 * the event lacks it; entries from the kind's field count on are NULL. */
ls_status ls_trace_event_check_ex(ls_trace_kind kind, const cJSON *event, size_t skip, char *why,
                                  size_t why_len, bool *prefix_frozen, const cJSON **fields);

/* ls_trace_event_check_ex for a trace of format `version` (1 or 2; any
 * other: LS_ERR_ARG).  v2 tables (docs/contract.md §1): phase and layer
 * kind are vocabulary names (ls_trace_is_vocab_name; the reader checks them
 * against the header), ops/reductions/dtypes from the v2 lists, layer_end
 * may carry "recompute": true, collective "step" and "out_sha256" (64 hex),
 * then "out_digest", "in_digest", "in_digest_done" (ls_trace_digest_parse's
 * form), "peer", "tag" (integers >= 0) and "declared" (true only): an event
 * with both out_sha256 and out_digest must state one fact ("sha256:" +
 * out_sha256, else LS_ERR_SCHEMA naming out_digest); peer and tag only on a
 * send or recv, in_digest only on a send, in_digest_done only beside an
 * in_digest of its algorithm that it differs from,
 * memory categories have free names (printable ASCII, at most 64 bytes, at
 * most LS_TRACE_MAX_MEM_CATEGORIES of them), step_metrics holds step,
 * objective, optional prefix_frozen and any other member (at most
 * LS_TRACE_MAX_METRICS in all) a finite number or null, gradient_probe
 * holds step and verdict as v1 has them (its other members are the v2
 * schema's to check: another trainer's emitter writes them).  Every field keeps
 * its v1 position (ls_trace_field_index), the v2-only ones come after; in
 * step_metrics a free member named like a v1 field fills that field's slot
 * when it is a valid v1 value. */
ls_status ls_trace_event_check_v(int version, ls_trace_kind kind, const cJSON *event, size_t skip, char *why,
                                 size_t why_len, bool *prefix_frozen, const cJSON **fields);

/* Position of field `name` in kind's table (the index into
 * ls_trace_event.field and the fields of ls_trace_event_check_ex), -1 when
 * the kind has no such field (the envelope keys are no field).  The v2-only
 * fields (recompute; collective step, out_sha256, out_digest, in_digest,
 * in_digest_done, peer, tag, declared) have their v2 positions, after the
 * v1 ones. */
int ls_trace_field_index(ls_trace_kind kind, const char *name);

/* Length (1..4) of the valid UTF-8 sequence starting at p[0] (n bytes
 * available, n >= 1), or 0 when it is not valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
size_t ls_trace_utf8_len(const unsigned char *p, size_t n);

/* Integer value of a JSON number that is integral and within
 * [-LS_TRACE_MAX_INT, LS_TRACE_MAX_INT]; false for anything else
 * (NULL, non-number, fractional, non-finite, out of range). */
bool ls_trace_json_int(const cJSON *item, int64_t *out);

/* Typed views of a layer_end / collective event object (as delivered by the
 * reader).  The event must pass ls_trace_event_check_v for its kind and the
 * version its "v" says (checked again here); LS_ERR_SCHEMA otherwise,
 * LS_ERR_ARG for NULL.  A v2 layer kind v1 lacks decodes as
 * LS_TRACE_LAYER_KIND_COUNT (its index in the trace's vocabulary is
 * ls_trace_event.layer_kind); v2 ops/reductions/dtypes as their v2 values.  String
 * members of *out point into `event` and live as long as it does. */
ls_status ls_trace_decode_layer_end(const cJSON *event, ls_trace_layer_end *out);
ls_status ls_trace_decode_collective(const cJSON *event, ls_trace_collective *out);

#endif
