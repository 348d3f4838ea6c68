/* profile.h - what a run must show, as data: a profile (profiles/NAME.json,
 * schemas/profile.schema.json, docs/contract.md §3).
 *
 * A profile is untrusted input like everything the audit reads: the file is
 * opened without following links, refused above LS_AUDIT_PROFILE_MAX_BYTES,
 * parsed strictly (no repeated key), validated against the profile schema
 * with receipts/schema/schema.h, then checked for what the schema cannot say (every
 * phase and layer kind it names declared, the name the file's, the caps
 * below, the step grammar's path conditions decisions and values of
 * receipts/format/coverage.h, its repeated items one block, every phase of the
 * plan in it); every error names the file and the field.  Its digest is the
 * SHA-256 of the file's bytes (the bytes parsed).
 *
 * The loaded profile is a fixed-size value (no allocation, nothing to
 * free): the audit's run model holds one (audit.h, "profile").  The rules
 * read it through the accessors below; names resolve to the trace's
 * indices through ls_audit_vocab_index (audit.h). */
#ifndef LS_AUDIT_PROFILE_H
#define LS_AUDIT_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define LS_AUDIT_PROFILE_SCHEMA "urn:longstraw:schema:profile:v1"
#define LS_AUDIT_PROFILE_MAX_BYTES ((size_t)64 << 10) /* a larger file is refused unread */
#define LS_AUDIT_PROFILE_IDENT 33      /* an identifier and its NUL: ^[a-z][a-z0-9_.-]{0,31}$ */
#define LS_AUDIT_PROFILE_FAULT_NAME 49 /* a fault or control name and its NUL: ^[a-z][a-z0-9_.-]{0,47}$ */
#define LS_AUDIT_PROFILE_MAX_NAMES 32  /* phases, layer kinds */
#define LS_AUDIT_PROFILE_MAX_STEPS 32  /* steps of the plan */
#define LS_AUDIT_PROFILE_MAX_LIST 8    /* layer kinds, phases, purposes of one requirement */
#define LS_AUDIT_PROFILE_MAX_LAYER_REQ 16 /* layer requirements of one rule */
#define LS_AUDIT_PROFILE_MAX_STEP_REQ 8   /* per-step requirements of one rule */
#define LS_AUDIT_PROFILE_MAX_STEP_PURPOSES 8 /* purposes over every per-step requirement */
#define LS_AUDIT_PROFILE_MAX_FAULTS 32
#define LS_AUDIT_PROFILE_MAX_CONTROLS 16
#define LS_AUDIT_PROFILE_MAX_SEQ 32       /* items of the step grammar (sequence) */
#define LS_AUDIT_PROFILE_MAX_SEQ_PATHS 4  /* path conditions of one sequence item */

/* What a profile says every run of its trainer records ("records", bits):
 * a rule whose data a run lacks fails, unless the run's profile leaves the
 * kind out (the trainer does not record it: the rule reads not_applicable). */
enum {
    LS_AUDIT_RECORDS_MEMORY = 1,      /* memory events (memory.accounting) */
    LS_AUDIT_RECORDS_OUT_SHA256 = 2,  /* out_sha256 of every allreduce, broadcast, allgather (collectives.performed) */
    LS_AUDIT_RECORDS_GRAD_DIGESTS = 4 /* rank_state.grad_digest_disagreements in every receipt (digests.receipts) */
};

/* A step's (or requirement's) unit: which layer events it speaks of. */
typedef enum {
    LS_AUDIT_UNIT_NONE = 0,  /* no layer events (steps) / members and prompt alike (requirements) */
    LS_AUDIT_UNIT_PROMPT,    /* member -1, once a step */
    LS_AUDIT_UNIT_MEMBER     /* each member 0..G-1 */
} ls_audit_unit;

/* Layer parts (bits): -1, 0..n_layers-1, n_layers. */
enum { LS_AUDIT_LAYERS_EMBED = 1, LS_AUDIT_LAYERS_STACK = 2, LS_AUDIT_LAYERS_HEAD = 4 };
/* Directions (bits). */
enum { LS_AUDIT_DIRS_FWD = 1, LS_AUDIT_DIRS_BWD = 2 };
/* Conditions (bits of "when"; all must hold). */
enum {
    LS_AUDIT_WHEN_FULL = 1 << 0,
    LS_AUDIT_WHEN_DETACHED = 1 << 1,
    LS_AUDIT_WHEN_LONGSTRAW = 1 << 2,
    LS_AUDIT_WHEN_NAIVE = 1 << 3,
    LS_AUDIT_WHEN_SFT = 1 << 4,
    LS_AUDIT_WHEN_NOT_SFT = 1 << 5,
    LS_AUDIT_WHEN_FROZEN = 1 << 6,
    LS_AUDIT_WHEN_NOT_FROZEN = 1 << 7,
    LS_AUDIT_WHEN_RAN = 1 << 8,
    LS_AUDIT_WHEN_PROBED = 1 << 9, /* sequence only: the configuration probes the step (options.probe_every) */
    /* collective requirements only: the run's grid (the audit's ls_audit_grid_holds, not ls_audit_profile_when) */
    LS_AUDIT_WHEN_CP = 1 << 10, /* the prompt split over more than one rank (config cp_ranks, else the world) */
    LS_AUDIT_WHEN_EP = 1 << 11, /* the routed experts split over more than one rank (config ep_ranks > 1) */
    LS_AUDIT_WHEN_DP = 1 << 12  /* data-parallel replicas (config dp_ranks > 1) */
};
#define LS_AUDIT_WHEN_GRID (LS_AUDIT_WHEN_CP | LS_AUDIT_WHEN_EP | LS_AUDIT_WHEN_DP)

/* How often each (member, layer, direction) shows a layer_end in one
 * occurrence of a phase (steps[].passes; rule steps.sequence). */
typedef enum {
    LS_AUDIT_PASSES_ONCE = 0,    /* exactly once */
    LS_AUDIT_PASSES_SEGMENTS,    /* k >= 1 times, the same k for every key of the occurrence (a prompt in chunks) */
    LS_AUDIT_PASSES_SFT_BRANCHES /* once; in an SFT step the configuration's group times (its answer branches) */
} ls_audit_passes;

/* Group kinds of a collective requirement: the registered group kinds of
 * receipts/format/trace_event.h (ls_trace_group_kind), in its order (a static
 * assertion in profile.c holds them equal). */
typedef enum {
    LS_AUDIT_GROUP_WORLD = 0,
    LS_AUDIT_GROUP_DP,
    LS_AUDIT_GROUP_CP,
    LS_AUDIT_GROUP_TP,
    LS_AUDIT_GROUP_PP,
    LS_AUDIT_GROUP_EP,
    LS_AUDIT_GROUP_KIND_COUNT
} ls_audit_group_kind;
/* "world", "dp", ...; "?" out of range. */
const char *ls_audit_group_kind_name(int kind);
/* The kind named name, -1 none. */
int ls_audit_group_kind_from_name(const char *name);

/* The rules whose requirements a profile gives. */
typedef enum {
    LS_AUDIT_PROFILE_COMPOSITION = 0, /* collectives.composition */
    LS_AUDIT_PROFILE_DKV,             /* collectives.dkv */
    LS_AUDIT_PROFILE_FINALIZE,        /* collectives.finalize */
    LS_AUDIT_PROFILE_NRULES
} ls_audit_profile_rule_id;
/* "collectives.composition", ...: static. */
const char *ls_audit_profile_rule_name(ls_audit_profile_rule_id id);

/* A phase of the step plan.  phase_ix: the trace's index of phase (set when
 * the profile is bound to a run: ls_audit_vocab_index; -1 unresolved). */
typedef struct {
    char phase[LS_AUDIT_PROFILE_IDENT];
    ls_audit_unit unit;
    unsigned dirs, layers, when;
    ls_audit_passes passes;
    /* split_dp ("split": "dp"): a member step whose members are split over the data-parallel replicas
     * (config dp_ranks D > 1): member m is the step's on the ranks of replica m % D only */
    bool split_dp;
    int phase_ix;
} ls_audit_profile_step;

/* A path condition of a sequence item ("reference=kept|recaptured"): the
 * configuration's paths[decision] holds only values of the mask.  decision:
 * an index into receipts/format/coverage.h's LS_COVERAGE_PATHS; bit k of values:
 * that decision's k-th value. */
typedef struct {
    uint8_t decision;
    uint16_t values;
} ls_audit_profile_path_cond;

/* One occurrence of a phase in the step grammar (sequence), in order: the
 * phase begins and ends once here when every condition holds, never when one
 * fails, and may or may not when the run cannot tell (a path decision whose
 * recorded values lie on both sides).  repeat: the item is one of the block
 * run once per prompt group (options.prompts_per_step); holds_optimizer_step:
 * the step's optimizer_step event lies inside this phase.  phase_ix: the
 * trace's slot of phase, resolved by audit/rules/rank_seq.c as the name appears
 * (-1 until then: an item takes no slot of its own). */
typedef struct {
    char phase[LS_AUDIT_PROFILE_IDENT];
    unsigned when;             /* LS_AUDIT_WHEN_* but ran */
    ls_audit_profile_path_cond paths[LS_AUDIT_PROFILE_MAX_SEQ_PATHS];
    size_t n_paths;
    bool repeat;
    bool holds_optimizer_step;
    int phase_ix;
} ls_audit_profile_seq_item;

/* A layer requirement: the layer entries of a kind in a phase and direction
 * need each purpose's collectives in a group of group_kind. */
typedef struct {
    ls_audit_group_kind group_kind;
    char kinds[LS_AUDIT_PROFILE_MAX_LIST][LS_AUDIT_PROFILE_IDENT];
    size_t n_kinds;
    char phases[LS_AUDIT_PROFILE_MAX_LIST][LS_AUDIT_PROFILE_IDENT];
    size_t n_phases;
    unsigned dir;              /* LS_AUDIT_DIRS_FWD or _BWD */
    ls_audit_unit unit;        /* NONE: any member */
    char purposes[LS_AUDIT_PROFILE_MAX_LIST][LS_AUDIT_PROFILE_IDENT];
    size_t n_purposes;
    bool per_event;            /* count per_event (else once) */
    unsigned when;
    char label[LS_AUDIT_PROFILE_IDENT];
    bool must_appear;
    /* layers_from: only layers l >= the configuration's integer field of this name ("" every layer);
     * from_layer: its value, bound to a run (0: the field absent or not an integer >= 0) */
    char layers_from[LS_AUDIT_PROFILE_IDENT];
    int64_t from_layer;
    int kind_ix[LS_AUDIT_PROFILE_MAX_LIST], phase_ix[LS_AUDIT_PROFILE_MAX_LIST]; /* bound; -1 unresolved */
} ls_audit_profile_layer_req;

/* A per-step requirement: each purpose's collective without a layer in the
 * phase, every step.  bit0: the first of this requirement's purposes in
 * the run's per-step mask (ls_audit_step.step_req). */
typedef struct {
    ls_audit_group_kind group_kind;
    char phase[LS_AUDIT_PROFILE_IDENT];
    char purposes[LS_AUDIT_PROFILE_MAX_LIST][LS_AUDIT_PROFILE_IDENT];
    size_t n_purposes;
    unsigned when;
    unsigned bit0;
    int phase_ix;              /* bound; -1 unresolved */
} ls_audit_profile_step_req;

/* One rule's requirements (present: the profile lists the rule). */
typedef struct {
    bool present;
    int level;
    char title[201];
    char none[121];            /* "" none */
    ls_audit_profile_layer_req layers[LS_AUDIT_PROFILE_MAX_LAYER_REQ];
    size_t n_layers;
    ls_audit_profile_step_req steps[LS_AUDIT_PROFILE_MAX_STEP_REQ];
    size_t n_steps;
} ls_audit_profile_rule;

typedef struct {
    char name[LS_AUDIT_PROFILE_FAULT_NAME];
    int level;
    char what[161];
} ls_audit_profile_fault;

typedef struct {
    char name[LS_AUDIT_PROFILE_FAULT_NAME];
    char breaks[LS_AUDIT_PROFILE_IDENT];
} ls_audit_profile_control;

typedef struct {
    char name[LS_AUDIT_PROFILE_IDENT];
    char trainer[65];
    char file[300];            /* the path it was read from */
    char sha256[65];           /* of the file's bytes, lowercase hex */
    char phases[LS_AUDIT_PROFILE_MAX_NAMES][LS_AUDIT_PROFILE_IDENT];
    size_t n_phases;
    char layer_kinds[LS_AUDIT_PROFILE_MAX_NAMES][LS_AUDIT_PROFILE_IDENT];
    size_t n_layer_kinds;
    ls_audit_profile_step steps[LS_AUDIT_PROFILE_MAX_STEPS];
    size_t n_steps;
    ls_audit_profile_seq_item seq[LS_AUDIT_PROFILE_MAX_SEQ]; /* the step grammar (rule steps.sequence) */
    size_t n_seq;
    size_t seq_block0, seq_block1; /* the items [block0, block1) repeat once per prompt group (equal: none) */
    ls_audit_profile_rule rules[LS_AUDIT_PROFILE_NRULES];
    unsigned n_step_purposes;  /* bits used of the per-step mask */
    ls_audit_profile_fault faults[LS_AUDIT_PROFILE_MAX_FAULTS];
    size_t n_faults;
    ls_audit_profile_control controls[LS_AUDIT_PROFILE_MAX_CONTROLS];
    size_t n_controls;
    bool decisions;
    bool probe_required;       /* "probe": "required": a full-mode run must probe (run.probe as --require-probe) */
    unsigned records;          /* "records": what every run of the trainer records (LS_AUDIT_RECORDS_*) */
} ls_audit_profile;

/* The directory profiles are read from when none is given: the source
 * tree's profiles/ (compiled in).  Static string. */
const char *ls_audit_profile_default_dir(void);

/* The file profile NAME is read from in dir (NULL: the default), as the
 * reports name it, into buf: "profiles/NAME.json" for the default directory
 * (the source tree's, compiled in: so that a report does not depend on where
 * the tree lies), or, for a profile profiles/ lacks, the folder the family
 * registry names for it (a family keeping its profile in its own folder:
 * "trainer/families/dense/dense.json"), else DIR/NAME.json. */
void ls_audit_profile_file_label(const char *dir, const char *name, char *buf, size_t cap);

/* Whether name is a profile name (^[a-z][a-z0-9_.-]{0,31}$, not "." or ".."
 * leading: it starts with a letter), so that DIR/NAME.json is a file of DIR. */
bool ls_audit_profile_name_ok(const char *name);

/* Loads dir/NAME.json (dir NULL or the default: profiles/NAME.json, or the
 * registered family's folder when profiles/ lacks it) into *out
 * (the caller's storage; zeroed first, indices unbound: -1).  LS_OK;
 * LS_ERR_ARG (a name that is no profile name); LS_ERR_IO (missing or
 * unreadable); LS_ERR_FORMAT (a link or not a regular file, above the cap,
 * not strict JSON, inconsistent); LS_ERR_SCHEMA (not schema-valid); err
 * names the file and the field. */
ls_status ls_audit_profile_load(const char *dir, const char *name, ls_audit_profile *out, char *err,
                                size_t errlen);
/* Same from bytes (what names them in errors; the digest is of bytes). */
ls_status ls_audit_profile_parse(const char *bytes, size_t len, const char *what, const char *name,
                                 ls_audit_profile *out, char *err, size_t errlen);

/* Accessors. */
const char *ls_audit_profile_sha256(const ls_audit_profile *p);      /* 64 hex digits */
size_t ls_audit_profile_n_steps(const ls_audit_profile *p);
const ls_audit_profile_step *ls_audit_profile_step_at(const ls_audit_profile *p, size_t i);
/* The step grammar's items (sequence), in order; NULL past the end. */
size_t ls_audit_profile_n_seq(const ls_audit_profile *p);
const ls_audit_profile_seq_item *ls_audit_profile_seq_at(const ls_audit_profile *p, size_t i);
/* The rule's requirements (collectives per layer kind, phase, direction,
 * unit and group kind; finalize-like per-step requirements); NULL when the
 * profile leaves the rule out. */
const ls_audit_profile_rule *ls_audit_profile_rule_of(const ls_audit_profile *p, ls_audit_profile_rule_id id);
/* The level the profile gives fault name (1..4) and what it touches in
 * *what (may be NULL); 0 when the profile does not list it. */
int ls_audit_profile_fault_level(const ls_audit_profile *p, const char *name, const char **what);
size_t ls_audit_profile_n_controls(const ls_audit_profile *p);
const ls_audit_profile_control *ls_audit_profile_control_at(const ls_audit_profile *p, size_t i);
bool ls_audit_profile_decisions(const ls_audit_profile *p);
/* Whether conditions `when` hold for a step: the run's mode and strategy,
 * the step's objective and prompt state, whether its phase ran. */
bool ls_audit_profile_when(unsigned when, bool full, bool naive, bool sft, bool frozen, bool ran);
/* Layer l of a run of n_layers layers is in parts (LS_AUDIT_LAYERS_*). */
bool ls_audit_profile_layer_in(unsigned parts, int64_t l, int64_t n_layers);
/* The layer_end events a layer entry of parts and dirs counts: layers x directions. */
uint64_t ls_audit_profile_layer_keys(unsigned parts, unsigned dirs, int64_t n_layers);

#endif
