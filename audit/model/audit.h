/* audit.h - longstraw-audit's model of a run and its verdicts (docs/design.md §1,
 * §5, §6).
 *
 * A run directory is untrusted input: every file is opened through
 * audit/model/run_files.h (no links, nothing outside the run, caps), every trace is
 * streamed once with receipts/reading/trace_reader.h into compact per-rank facts
 * (bounded memory: the tables below have fixed caps; what does not fit is
 * counted, and a rule whose facts overflowed fails rather than guesses).
 *
 * Use: ls_audit_load (audit/load/load.h: the model), ls_audit_evaluate
 * (audit/rules/rules.h: named rules, levels), then the reports
 * (audit/report/report.h); ls_audit_free.  The model owns everything it
 * points to; this header holds its types and vocabularies only.
 *
 * Rules (ls_audit_rule) have a stable id, the level they belong to, whether
 * they apply to this run's configuration, a verdict and evidence (rank, file,
 * event seq, one line of detail).  An applicable rule that matched zero
 * events fails: nothing passes vacuously.  A level holds when every
 * applicable rule of it passes and the level below holds. */
#ifndef LS_AUDIT_AUDIT_H
#define LS_AUDIT_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "common/status.h"
#include "receipts/signing/manifest.h"
#include "receipts/writing/receipt.h"
#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h"
#include "receipts/reading/trace_reader.h"

#include "audit/model/profile.h"   /* ls_audit_profile: what the run must show */
#include "audit/model/run_files.h" /* LS_AUDIT_MAX_WORLD: ranks the audit accepts */
#define LS_AUDIT_MAX_COLL ((size_t)1 << 22) /* collective records kept over all ranks, world > 1 (then fingerprints) */
#define LS_AUDIT_MAX_P2P ((size_t)1 << 20)  /* send/recv records kept over all ranks, world > 1 (then counted) */
#define LS_AUDIT_MAX_LAYER_KEYS ((size_t)1 << 20) /* distinct (phase,member,layer,dir) per rank in one step */
#define LS_AUDIT_MAX_MEMBER (1 << 20)     /* larger member indices (or config "group") are not audited */
#define LS_AUDIT_MAX_STEPS 65536          /* steps with per-step facts */
#define LS_AUDIT_MAX_NAMES 256            /* distinct groups / purposes / memory categories */
#define LS_AUDIT_MAX_DIR_ENTRIES 100000   /* entries of the run directory listed at most */
#define LS_AUDIT_MAX_EVIDENCE 16          /* evidence items kept per rule (the rest counted) */
#define LS_AUDIT_NPHASE 17                /* phase slots: 16 names (v1's 7 first, then a v2 run's own) + "other" */
#define LS_AUDIT_NKIND 32                 /* layer-kind slots: v1's 5 first, then a v2 run's own */
#define LS_AUDIT_VOCAB_NAME 32            /* a phase or layer-kind name: ^[a-z][a-z0-9_.-]{0,31}$ */
#define LS_AUDIT_MAX_FAULTS 16            /* distinct recorded faults named (more: every level capped) */
#define LS_AUDIT_MAX_FROZEN_LISTED 64     /* prefix-frozen steps listed (the rest counted) */

typedef struct {
    int64_t rank;      /* -1: not about one rank */
    char file[160];    /* relative to the run directory */
    int64_t seq;       /* event seq; -1 when not about one event */
    char detail[320];
} ls_audit_evidence;

typedef struct {
    const char *id;    /* static, e.g. "rank.layers" */
    int level;         /* 1..4 */
    const char *title; /* static, one line */
    bool applicable;
    bool pass;
    uint64_t matched;  /* events / items the rule examined */
    char message[320];
    ls_audit_evidence ev[LS_AUDIT_MAX_EVIDENCE];
    size_t n_ev;
    uint64_t n_ev_dropped;
} ls_audit_rule;

/* One collective as a rank recorded it (a group collective: send and recv
 * are ls_audit_p2p's). */
typedef struct {
    int64_t seq, gseq, count, layer, step;
    uint16_t group, purpose; /* indices into the run's name tables */
    uint8_t op, red, dtype, phase; /* phase: LS_PHASE_* or 7 (none/other) */
    /* v2: the output digest (out_sha256, or out_digest of either algorithm)
     * as ls_audit_digest8 packs it; 0 when the event has none */
    uint64_t out8;
} ls_audit_coll;
_Static_assert(sizeof(ls_audit_coll) == 56, "the flight recorder's record is 56 bytes (docs/audit.md)");

/* An output digest in the 64 bits of ls_audit_coll.out8: the algorithm
 * (ls_trace_digest_alg: 0 sha256, 1 xxh3_128) in the top bit, the first 63
 * bits of the digest's bytes (big-endian) below it; a packed value of 0 is
 * kept as 1, so 0 means no digest.  Two records' digests agree when their
 * packed values are equal and their algorithms are the same. */
#define LS_AUDIT_DIGEST8_ALG_BIT (UINT64_C(1) << 63)
static inline uint64_t ls_audit_digest8(ls_trace_digest_alg alg, const uint8_t *bytes) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | bytes[i];
    v = (v >> 1) | (alg == LS_TRACE_DIGEST_XXH3_128 ? LS_AUDIT_DIGEST8_ALG_BIT : 0);
    return v ? v : 1;
}
/* The algorithm of a packed digest (not 0). */
static inline ls_trace_digest_alg ls_audit_digest8_alg(uint64_t v) {
    return (v & LS_AUDIT_DIGEST8_ALG_BIT) ? LS_TRACE_DIGEST_XXH3_128 : LS_TRACE_DIGEST_SHA256;
}
/* The first 15 hex digits of the digest it packs (exact: 60 of its 63 bits). */
static inline uint64_t ls_audit_digest8_hex15(uint64_t v) { return (v & ~LS_AUDIT_DIGEST8_ALG_BIT) >> 3; }

/* One point-to-point message as a rank recorded it (v2: a collective event
 * of op send or recv, docs/contract.md §1).  Its gseq counts the messages of
 * its channel (group, sender, receiver, tag) from 0. */
typedef struct {
    int64_t seq, gseq, count;
    int64_t layer;           /* the event's layer (flag LS_AUDIT_P2P_LAYER) */
    int64_t step;            /* the event's step, else its phase's; -1 neither */
    int64_t peer;            /* the global rank on the other side, -1 when the event names none */
    int64_t tag;             /* 0 when absent */
    uint64_t in8, out8;      /* the first 8 bytes (big-endian) of in_digest / out_digest (or out_sha256) */
    uint16_t group, purpose; /* indices into the run's name tables */
    uint8_t op;              /* LS_TRACE_OP_SEND or LS_TRACE_OP_RECV */
    uint8_t dtype, phase;    /* phase: as ls_audit_coll's */
    uint8_t flags;           /* ls_audit_p2p_flag bits */
} ls_audit_p2p;

typedef enum {
    LS_AUDIT_P2P_IN = 1,        /* in8 holds in_digest */
    LS_AUDIT_P2P_OUT = 2,       /* out8 holds out_digest or out_sha256 */
    LS_AUDIT_P2P_CHANGED = 4,   /* in_digest_done present: the send buffer changed before the send completed */
    LS_AUDIT_P2P_DECLARED = 8,  /* "declared": true (the trainer's word, note()) */
    LS_AUDIT_P2P_IN_XXH3 = 16,  /* in_digest is xxh3_128 (else sha256) */
    LS_AUDIT_P2P_OUT_XXH3 = 32, /* the output digest is xxh3_128 (else sha256) */
    LS_AUDIT_P2P_LAYER = 64,    /* the event records a layer */
    LS_AUDIT_P2P_STEP = 128     /* step was recorded (the event's, or its phase's) */
} ls_audit_p2p_flag;

/* ---- steps.sequence (audit/rules/rank_seq.c): every step's phases against the
 * profile's grammar (sequence), and each layer key's occurrences.  One block
 * for the facts it keeps (per layer key, per open step, per rank, per run);
 * the structs above and below carry one member of these each. ---- */
#define LS_AUDIT_SEQ_STATES 64   /* grammar states held per hypothesis of a step */
#define LS_AUDIT_SEQ_FIRST 3     /* faults kept per rank with their evidence (the rest counted) */

/* A layer key's occurrences (phase instances) in its open step. */
typedef struct {
    uint32_t inst;             /* the rank's instance number of its latest occurrence (0: none) */
    uint16_t hits;             /* its events in that occurrence */
    uint16_t min_hits, max_hits; /* over its earlier occurrences (min 0xffff: none) */
    uint16_t n_inst, grp;      /* occurrences; the prompt group of the first */
    int64_t inst_seq;          /* seq of its first event in the latest occurrence */
    int64_t rep_a, rep_b;      /* the first repeat inside one occurrence: both seqs (-1: none) */
} ls_audit_seq_key;

/* What one fault was, kept until the rule is written (kind: rank_seq.c's). */
typedef struct {
    int64_t step, seq, seq2;   /* the event, and the earlier one it stands against (-1: none) */
    int64_t member, layer;
    uint32_t a, b, expect;     /* counts, and phase slots (bits) by kind */
    uint8_t kind, phase, phase2, dir;
} ls_audit_seq_fault;

/* A step's phase counts (per open step window). */
typedef struct {
    uint32_t occ[LS_AUDIT_NPHASE]; /* occurrences of each phase in the step */
    uint16_t *occ_grp;         /* [n_grp][LS_AUDIT_NPHASE]: per prompt group (rank_seq.c frees it) */
    size_t n_grp;
    bool bad;                  /* the step's sequence failed: its layer counts are not judged again */
    bool grp_bad;              /* a member's events in two prompt groups: grp_fault */
    ls_audit_seq_fault grp_fault;
} ls_audit_seq_window;

/* One grammar state: the next item (or the block's end), whether the
 * current prompt group consumed a phase yet, which group. */
typedef struct {
    uint8_t pos, fed;
    uint16_t g;
} ls_audit_seq_state;

/* A rank's grammar matcher: the step being matched under four hypotheses
 * (bit 0 an SFT step, bit 1 prefix-frozen: known only as or after the step
 * ends), the open phase, and the faults found. */
typedef struct {
    int64_t step;              /* the step matched (-1: none yet) */
    int64_t from_step;         /* the first step matched (earlier ones: before the profile was known) */
    uint8_t stat[4][LS_AUDIT_PROFILE_MAX_SEQ]; /* per hypothesis and item: 0 never, 1 may, 2 must */
    ls_audit_seq_state st[4][LS_AUDIT_SEQ_STATES];
    uint8_t n_st[4];
    bool dead[4];
    ls_audit_seq_fault rej[4]; /* each hypothesis's first rejection */
    bool ind_bad;              /* a fault of the step whatever its kind (nesting, an event outside its phase) */
    ls_audit_seq_fault ind;
    int open_phase;            /* -1: none open */
    int64_t open_step, open_seq;
    uint32_t inst;             /* instance number of the open (or last) phase */
    uint16_t grp;              /* its prompt group */
    uint8_t passes;            /* its ls_audit_passes */
    uint32_t inst_events, inst_keys, inst_max; /* its layer events, distinct keys, most events of one key */
    ls_audit_seq_fault inst_top; /* the key with inst_max */
    uint16_t begun[LS_AUDIT_NPHASE]; /* begins of each phase in the step's current prompt group */
    int64_t begun_seq[LS_AUDIT_NPHASE];
    bool ready;                /* the rank's steps are matched from here (the profile known) */
    int64_t skip_step;         /* the last step seen before it was: not matched (-1 none) */
    int last_phase;
    int64_t last_seq;
    uint64_t matched, n_bad;
    ls_audit_seq_fault first[LS_AUDIT_SEQ_FIRST];
    size_t n_first;
} ls_audit_seq;

/* The grammar as this run sizes it (compiled once, ls_audit_seq_phase). */
typedef struct {
    int state;                 /* 0 not compiled, 1 ready, -1 no profile */
    uint8_t base[LS_AUDIT_PROFILE_MAX_SEQ]; /* each item by the configuration: 0 never, 1 may, 2 must */
    int64_t b_min, b_max;      /* prompt groups per step (b_max 0: any) */
    int64_t probe_every;       /* options.probe_every, -1 unknown */
    int64_t group;             /* config group (an SFT member's answer branches), -1 unknown */
    uint8_t passes[LS_AUDIT_NPHASE]; /* per phase slot: ls_audit_passes of its plan step (255: none, uncounted) */
    uint32_t opt_phases;       /* phase slots holding the optimizer_step event */
    int64_t steps_checked;
} ls_audit_seq_plan;

/* Layer events of one (phase, member, layer, dir) of an open step. */
typedef struct {
    int32_t member, layer;
    uint8_t phase, dir, kind, used; /* kind: ls_trace_layer_kind */
    uint32_t count;
    int64_t first_seq;
    ls_audit_seq_key sq;       /* steps.sequence */
} ls_audit_layer_key;

/* Collectives of one (phase, layer, purpose) of an open step. */
typedef struct {
    int64_t layer;             /* -2: none */
    uint32_t count;
    uint16_t purpose;
    uint8_t phase, used;
} ls_audit_coll_count;

/* One open step of a rank: its layer keys and collective counts, checked
 * and discarded when the step closes (load.c closes step s when an event of
 * step s + 2 arrives, or the trace ends). */
typedef struct {
    int64_t step;              /* -1: free */
    ls_audit_layer_key *lk;    /* open-addressing table */
    size_t lk_cap, lk_used;
    ls_audit_coll_count *cc;   /* idem */
    size_t cc_cap, cc_used;
    ls_audit_seq_window sq;    /* steps.sequence */
} ls_audit_step_window;

/* A layer_end a closed step lacked (rank.layers evidence). */
typedef struct {
    int64_t step, member, layer;
    const char *phase;         /* the run's profile's name of it */
    uint8_t dir;
} ls_audit_missing;

/* A layer entry whose required collectives fell short (collectives.*). */
typedef struct {
    int64_t step, layer, first_seq;
    uint64_t got, want;
    const char *purpose;       /* the run's profile's (run->profile) */
    const char *label;         /* idem: what the layer is called ("attention") */
    uint8_t phase, dir;
} ls_audit_req_fail;

/* What a closed step's required collectives showed, per rule. */
typedef struct {
    uint64_t entries;          /* layer entries of the rule's must_appear requirements (the profile's) */
    uint64_t matched, failed;
    ls_audit_req_fail first[4];
    size_t n_first;
} ls_audit_req;

/* Per-step facts of a rank (O(steps): 64 bytes a step). */
typedef struct {
    uint32_t opt_count;        /* optimizer_step events */
    int32_t g_local;           /* 1 + the largest member in the step's score/replay layer_end events */
    int64_t opt_seq;           /* the first one's seq */
    int64_t digest_seq;
    uint8_t digest[32];        /* the "trainable" param_digest (has_digest) */
    uint8_t has_digest;
    uint16_t phase_mask;       /* bit p: phase p ended ok in the step (p < 16) */
    uint8_t prefix_frozen;     /* 1: some event of the step was prefix_frozen */
    uint8_t sft;               /* its (first) step_metrics said objective sft */
    uint8_t metrics_seen;
    uint8_t step_req;          /* profile: bit k, the profile's k-th per-step purpose was seen (rank_steps.c) */
} ls_audit_step;

/* The step_metrics figures rule run.invariants reads (rules_invariants.c),
 * by index into ls_audit_step_metric.v; ls_audit_sm_name gives each its
 * field name in the event (receipts/format/trace_step_metrics.h). */
typedef enum {
    LS_AUDIT_SM_REWARD_MEAN, LS_AUDIT_SM_REWARD_STD, LS_AUDIT_SM_REWARD_MIN, LS_AUDIT_SM_REWARD_MAX,
    LS_AUDIT_SM_ADV_MEAN, LS_AUDIT_SM_ADV_STD, LS_AUDIT_SM_LOSS, LS_AUDIT_SM_LOSS_POLICY, LS_AUDIT_SM_LOSS_KL,
    LS_AUDIT_SM_KL_MEAN, LS_AUDIT_SM_CLIP_FRACTION, LS_AUDIT_SM_RATIO_MIN, LS_AUDIT_SM_RATIO_MEAN,
    LS_AUDIT_SM_RATIO_MAX, LS_AUDIT_SM_RESPONSE_LEN_MEAN, LS_AUDIT_SM_TOKENS, LS_AUDIT_SM_COUNT
} ls_audit_sm_field;
const char *ls_audit_sm_name(ls_audit_sm_field f); /* static; NULL out of range */

typedef struct {
    int64_t step, seq;
    double loss, reward_mean, kl_mean, grad_norm, step_wall_s;
    bool prefix_frozen, sft;
    double v[LS_AUDIT_SM_COUNT]; /* the figures as recorded (tokens too: an integer <= 2^53) */
    uint32_t have;               /* bit f: v[f] was recorded (a finite number) */
} ls_audit_step_metric;

typedef struct {
    uint32_t rank;
    bool dir_present;
    /* receipt */
    ls_receipt *receipt;       /* NULL when absent or invalid */
    bool receipt_present;      /* the file exists */
    char receipt_err[320];
    /* trace */
    bool trace_present;
    char trace_file[64];       /* "rank-NNNN/events.jsonl.zst" */
    char trace_err[320];       /* why it could not be opened */
    ls_trace_report report;    /* the reader's report (zeroed when not read) */
    uint64_t n_events;
    uint64_t phase_begin[LS_AUDIT_NPHASE], phase_end[LS_AUDIT_NPHASE];
    uint64_t phase_wall_ns[LS_AUDIT_NPHASE];
    uint64_t layer_fwd, layer_bwd;
    int64_t replay_tokens_max, capture_tokens_max; /* the longest layer segment of each phase */
    /* per-step checks, step by step (rank_steps.c): two open steps at most */
    ls_audit_step_window win[2];
    int64_t steps_closed;      /* steps 0 .. steps_closed - 1 are checked and discarded */
    bool lk_overflow;
    uint64_t n_late;           /* layer_end / collective events of a step already closed */
    int64_t late_seq, late_step;
    uint64_t ly_missing;       /* layer_end events missing in closed steps (members < g_local) */
    ls_audit_missing ly_first[3];
    size_t n_ly_first;
    ls_audit_req req[LS_AUDIT_PROFILE_NRULES]; /* per rule of the profile (composition, dkv; finalize unused) */
    ls_audit_coll *coll;       /* world > 1 only: the flight recorder's records (group collectives) */
    size_t n_coll, coll_cap;
    uint64_t n_coll_total;     /* every collective event, send and recv included, kept or not */
    uint64_t n_coll_group;     /* the group collectives among them (the recorder's overflow: > n_coll) */
    uint64_t n_coll_declared;  /* kept allreduce/broadcast/allgather records with a digest marked declared */
    ls_audit_p2p *p2p;         /* world > 1 only: the send/recv records, in file order */
    size_t n_p2p, p2p_cap;
    uint64_t n_p2p_total;      /* send/recv events, kept or not (LS_AUDIT_MAX_P2P over all ranks) */
    uint64_t group_hash[LS_AUDIT_MAX_NAMES], group_count[LS_AUDIT_MAX_NAMES];
    /* per step (index = step, < LS_AUDIT_MAX_STEPS; grown on demand) */
    int64_t n_steps_seen;      /* 1 + the largest step of any event */
    ls_audit_step *steps;
    size_t steps_cap;
    bool steps_overflow;
    uint64_t n_param_digests;
    ls_audit_step_metric *metrics;
    struct ls_audit_probes *probes; /* gradient_probe events (rules_probe.c; NULL: none) */
    size_t n_metrics, metrics_cap;
    /* errors, completion */
    uint64_t n_errors;
    int64_t first_error_seq;
    char first_error[256];
    bool rank_complete;
    int64_t rank_complete_seq;
    /* memory: max per category over the memory events */
    uint64_t mem_peak[LS_AUDIT_MAX_NAMES];
    uint64_t mem_total_peak, mem_rss_peak, n_memory;
    uint64_t mem_bad;          /* memory events whose totals disagree with their categories */
    int64_t mem_bad_seq;
    char mem_bad_detail[200];
    /* forensics */
    int64_t last_seq;
    char last_ev[32];
    char last_phase[32];       /* the last phase begun ("" none) */
    bool in_phase;             /* begun and not ended */
    int64_t last_step, last_member, last_layer; /* of the last layer_end (-2 none) */
    char last_layer_phase[32], last_layer_dir[8];
    int64_t first_ts, last_ts;
    ls_audit_seq seq;          /* steps.sequence (rank_seq.c) */
    /* the canonical description's trace facts (describe.c) */
    uint64_t purpose_calls[LS_AUDIT_MAX_NAMES]; /* collectives per purpose (index into run->purposes) */
    uint64_t purpose_bytes[LS_AUDIT_MAX_NAMES]; /* their bytes */
    int64_t complete_steps, complete_events;    /* rank_complete's steps and events (-1: none) */
} ls_audit_rank;

/* Forensics (rules_cross.c fills them; the reports print them). */
#define LS_AUDIT_FORENSIC_RANKS 64        /* ranks listed per forensic item (the rest counted) */
#define LS_AUDIT_MAX_MISMATCH 16          /* size mismatches kept (the rest counted) */

/* A list of ranks, the first LS_AUDIT_FORENSIC_RANKS kept. */
typedef struct {
    uint32_t r[LS_AUDIT_FORENSIC_RANKS];
    uint32_t n;                /* listed */
    uint32_t total;            /* in all */
} ls_audit_rank_list;

/* The first collective some ranks of its group entered and others did not. */
typedef struct {
    bool found;
    uint16_t group, purpose;
    int64_t gseq, step, layer, count;
    uint8_t op, phase;
    uint32_t ref_rank;         /* the entering rank whose record is shown */
    int64_t ref_seq;
    ls_audit_rank_list entered, missing;
} ls_audit_coll_split;

/* One collective (same group and gseq) whose count differs between ranks. */
typedef struct {
    uint16_t group, purpose;
    int64_t gseq, step;
    uint32_t rank, ref_rank;
    int64_t count, ref_count, seq, ref_seq;
} ls_audit_size_mismatch;

/* A rank whose replicated "trainable" digest differs from the reference
 * rank's (the lowest rank with a digest that step). */
typedef struct {
    uint32_t rank;
    int64_t first_step;        /* the first step it differs */
} ls_audit_digest_split;

#define LS_AUDIT_MAX_KEYS 16             /* --key / --parity-key files */

/* What the caller trusts (docs/evidence.md).  Every string is borrowed for
 * the life of the run model. */
typedef struct {
    const char *run_dir;
    const char *keys[LS_AUDIT_MAX_KEYS];        /* --key PUB: keys trusted to sign runs (manifest.dsse.json) */
    size_t n_keys;
    const char *parity_keys[LS_AUDIT_MAX_KEYS]; /* --parity-key PUB: keys trusted to sign parity reports */
    size_t n_parity_keys;
    const char *parity_path;   /* --parity FILE (NULL: RUN/parity.json when present) */
    bool require_signed;       /* --require-signed: an unsigned or unverified run or report proves nothing */
    bool require_probe;        /* --require-probe: a run that probed no step fails run.probe (level 4) */
    const char *profiles_dir;  /* profile: --profiles DIR (NULL: ls_audit_profile_default_dir()) */
    const char *metrics_path;  /* --metrics FILE: the trainer's metrics lines, one more source of each step's facts */
} ls_audit_options;

struct ls_audit_run;

/* The assurance of the evidence (docs/evidence.md), apart from its level. */
typedef enum {
    LS_AUDIT_UNSIGNED = 0,        /* no verified signature: internal consistency only */
    LS_AUDIT_RUN_SIGNED = 1,      /* the manifest (so every file it digests) verified by a trusted key */
    LS_AUDIT_RUN_PARITY_SIGNED = 2 /* and the parity report verified by a trusted parity key */
} ls_audit_assurance;
/* "unsigned", "run-signed", "run-and-parity-signed" */
typedef struct ls_audit_run {
    char *run_dir;
    ls_audit_options opt;      /* the caller's options (strings borrowed; opt.parity_path: --parity) */
    uint32_t world;            /* from the manifest, else receipts, else trace headers */
    char world_source[32];
    /* manifest */
    ls_manifest *manifest;     /* NULL when absent or invalid */
    bool manifest_present;
    char manifest_err[320];
    ls_verify_report verify;   /* digest problems (our own walk, see load.c) */
    uint64_t verify_checked;   /* subjects digested */
    ls_audit_reads reads;      /* one read: the digest of the bytes of every file parsed (run_files.h) */
    cJSON *metrics_lines;      /* --metrics: its lines, an array of objects (NULL: not given) */
    bool verify_done;
    /* signature */
    bool dsse_present;
    int dsse_status;           /* -1 not checked (no --key), else ls_status */
    char dsse_err[320];
    char dsse_keyid[65];       /* the trusted key that verified it ("" none) */
    /* the parity report's signature (its envelope beside it: ls_dsse_parity_envelope_path) */
    char parity_envelope[300];
    bool parity_dsse_present;
    int parity_dsse_status;    /* -1 not checked (no --parity-key), else ls_status */
    char parity_dsse_err[320];
    char parity_keyid[65];
    /* parity */
    cJSON *parity;             /* NULL when absent or invalid */
    char parity_file[256];
    bool parity_present;
    char parity_err[320];
    /* configuration (from the first readable receipt, else the manifest) */
    const cJSON *config;       /* borrowed from a receipt or the manifest */
    const char *build_digest;  /* idem; NULL when none */
    const cJSON *build;        /* the build object build_digest is read from (borrowed, verified by its reader); NULL when none */
    int64_t n_layers;
    int64_t cfg_group;         /* members per step: config "group" times options.prompts_per_step (1..LS_AUDIT_MAX_MEMBER),
                                  -1: not recorded (inferred) */
    int64_t cfg_steps;         /* config "steps_requested" (1..LS_AUDIT_MAX_STEPS), -1: not recorded */
    int64_t first_step;        /* config "first_step": the run's first global step (a resumed run's
                                  checkpoint step; 0 when not recorded); steps before it are not the run's */
    char group_note[160];      /* why a recorded "group" / "options.prompts_per_step" was not used ("" none) */
    char steps_note[160];      /* why a recorded "steps_requested" / "first_step" was not used ("" none) */
    bool full_mode;
    bool naive;                /* config "strategy" "naive": no prompt backward (absent: longstraw) */
    /* the run's CP x EP grid (docs/design.md §4a): ep_size config ep_ranks (absent: 1), cp_size config
     * cp_ranks (absent: 0, the world's); read by ls_audit_grid_holds */
    uint32_t ep_size, cp_size;
    /* an adapter trainer's data parallelism (config dp_ranks, absent: 1): world = cp x dp, rank r in replica
     * r / cp_size (the profile's "split": "dp" member steps hold member m on replica m % dp_size only) */
    uint32_t dp_size;
    bool fault_local_attention, fault_skip_dkv, fault_skip_finalize, any_fault;
    /* what the evidence speaks for (rules_scope.c): the faults of every configuration (manifest and
       receipts), the highest level they leave (4: none), the prefix-frozen steps */
    char faults[LS_AUDIT_MAX_FAULTS][48];
    size_t n_faults;
    bool faults_overflow;
    int fault_cap;
    int64_t steps_frozen;
    int64_t frozen_listed[LS_AUDIT_MAX_FROZEN_LISTED];
    size_t n_frozen_listed;
    /* names */
    char *groups[LS_AUDIT_MAX_NAMES];
    size_t n_groups;
    char *purposes[LS_AUDIT_MAX_NAMES];
    size_t n_purposes;
    char *mem_cats[LS_AUDIT_MAX_NAMES];
    size_t n_mem_cats;
    bool names_overflow;
    /* the phase and layer-kind vocabularies the per-rank facts index
     * (ls_audit_phase_index, ls_audit_kind_index): v1's names first, in
     * receipts/format/trace_event.h's order (so a v1 run's indices are its enums),
     * then each other name of a v2 trace or the profile as first seen */
    char phase_names[LS_AUDIT_NPHASE - 1][LS_AUDIT_VOCAB_NAME + 1];
    int n_phase_names;
    char kind_names[LS_AUDIT_NKIND][LS_AUDIT_VOCAB_NAME + 1];
    int n_kind_names;
    bool vocab_overflow;       /* a name past the slots: filed as "other" / not a layer kind the profile names */
    ls_audit_rank *ranks;      /* world entries */
    /* forensics filled by the rules */
    char coll_divergence[480];  /* the first collective some ranks entered and others did not, or "" */
    char digest_divergence[320];/* the first step whose replicated digests disagree, or "" */
    ls_audit_coll_split split;  /* structured coll_divergence */
    ls_audit_size_mismatch mism[LS_AUDIT_MAX_MISMATCH];
    size_t n_mism;
    uint64_t n_mism_total;
    int64_t digest_first_step;  /* -1: the replicated digests agree */
    uint32_t digest_ref_rank;
    ls_audit_digest_split *digest_splits; /* world entries at most */
    size_t n_digest_splits;
    int64_t n_run_steps;        /* one past the last step the rules require (receipts and traces): the run's
                                  steps are first_step .. n_run_steps - 1 */
    /* ---- v2 (docs/contract.md §1-2; load.c fills it) ----
     * evidence_version: 2 when the manifest (else the first readable
     * receipt, else rank 0's trace header) is v2, else 1.  profile_name /
     * profile_sha256: the profile the run names: the manifest's (else the
     * first receipt's that names one: a v1 run pins its family's profile,
     * rules_profile.c), NULL when none does; borrowed from the manifest or
     * receipt.
     * A rank's trace vocabularies (phases and layer kinds by index) and its
     * groups' kinds are in ranks[r].report (trace_reader.h:
     * ls_trace_report_phase_index, ls_trace_report_group_kind).  In v2 runs
     * load_trace.c files phases and layer kinds by NAME into the fixed slots
     * of trace_event.h (other names: LS_AUDIT_NPHASE - 1 / LS_TRACE_LAYER_KIND_COUNT),
     * and leaves out layer_end events marked recompute. */
    int evidence_version;
    const char *profile_name;
    const char *profile_sha256;
    /* ---- profile (audit/rules/rules_profile.c, profile.h): what the run must show -
     * Resolved once (ls_audit_profile_attach: on the first step a trace
     * closes, else at ls_audit_evaluate).  A v1 run is audited against the
     * profile its configuration's "family" names (when no readable
     * configuration names one, the first of hybrid, mla whose layer kinds
     * hold its traces'); a v2 run (a v2 manifest or receipt) against
     * the one its receipts name (predicate.profile), which rule profile.match
     * checks. */
    int profile_state;         /* 0 not resolved yet, 1 profile loaded and bound, -1 none (profile_err) */
    bool profile_v2;           /* the manifest or a receipt is a v2 predicate */
    bool profile_inferred;     /* v1 without a recorded family: the profile chosen by the traces' layer kinds */
    char profile_used[LS_AUDIT_PROFILE_IDENT]; /* the profile's name ("" none) */
    char profile_err[480];
    ls_audit_profile profile;  /* names bound to the trace's indices (ls_audit_vocab_index) */
    ls_audit_seq_plan seq_plan; /* steps.sequence: the profile's grammar sized by the configuration */
    /* verdicts */
    ls_audit_rule *rules;
    size_t n_rules, rules_cap;
    int level;                 /* 0..4 */
    bool level_holds[5];       /* [1..4] */
    double load_seconds;
} ls_audit_run;

/* Vocabularies (vocab.c). */
/* The slot of a phase name in run's vocabulary (v1's LS_PHASE_* first; a
 * new name takes the next slot), LS_AUDIT_NPHASE - 1 ("other") for NULL or
 * past the slots.  ls_audit_phase_count: the named slots (7 for a v1 run).
 * ls_audit_kind_index: the same for layer kinds (ls_trace_layer_kind first),
 * -1 for NULL or past the slots. */
int ls_audit_phase_index(ls_audit_run *run, const char *phase);
int ls_audit_phase_count(const ls_audit_run *run);
const char *ls_audit_phase_name(const ls_audit_run *run, int index); /* "other" for the last */
int ls_audit_kind_index(ls_audit_run *run, const char *kind);

/* The loaders' reads of one member of a JSON object: an exact integer
 * (ls_trace_json_int), or a string (NULL when absent or not a string). */
static inline bool ls_audit_get_int(const cJSON *j, const char *key, int64_t *out) {
    return ls_trace_json_int(cJSON_GetObjectItemCaseSensitive(j, key), out);
}
static inline const char *ls_audit_get_str(const cJSON *j, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    return ls_json_is_string(it) ? it->valuestring : NULL;
}
#endif
