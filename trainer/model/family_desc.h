/* family_desc.h - what a model family is, independent of the real type: its
 * descriptor (name; config keys with type, range, default and the Hugging
 * Face key they map from; the validation of their consistency; parameter
 * counts, EP included; layer kinds; FLOP terms of the plan; the Hugging Face
 * mapping; where its data files are) and the registry of every family this
 * build has.  The numeric side of a family (tensors, state, segments, CP,
 * memory-plan terms) is its per-real-type ls_family_ops (family.h).
 *
 * A family lives in its own folder, trainer/families/<name>/, and is
 * registered by one line of trainer/families/families.list: CMake adds the
 * folder's sources (its family.cmake) and generates the registry table
 * (family_registry.c reads the generated list).  Shared code reaches a
 * family's config keys only through its descriptor (ls_config_key_*), and
 * never names a family.  dtype-independent. */
#ifndef LS_TRAINER_FAMILY_DESC_H
#define LS_TRAINER_FAMILY_DESC_H
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "common/status.h"

typedef struct ls_family_desc ls_family_desc;
typedef struct ls_model_config_s ls_model_config; /* config.h */
typedef struct ls_objective_s ls_objective;       /* config.h */

/* ---- config keys ------------------------------------------------------------ */
typedef enum { LS_FKEY_INT = 0, LS_FKEY_REAL } ls_fkey_type;

/* One key of a family's config (docs/model.md §6), stored in the family's
 * block of ls_model_config (at offset `off`: an int for LS_FKEY_INT, a
 * double for LS_FKEY_REAL).  An int lies in [lo, hi], a real in (lo, hi]. */
typedef struct {
    const char *key;
    ls_fkey_type type;
    size_t off;
    double lo, hi;
    const char *hi_name; /* the bound as written in messages ("2^20") */
    int has_default;     /* 0: required */
    double dflt;
    const char *hf;      /* the Hugging Face config.json key it maps from (NULL: none) */
    const char *doc;     /* one line: what it is */
} ls_family_key;

/* ---- parameter counts --------------------------------------------------------- */
/* A count accumulated exactly (saturating at SIZE_MAX) and approximately
 * (double, for messages about configs whose counts do not fit), with its
 * largest term for those messages. */
typedef struct {
    size_t n;
    double approx, big;
    const char *big_name;
} ls_count;
/* c += a * b * m (named for messages). */
void ls_count_term(ls_count *c, size_t a, size_t b, size_t m, const char *name);
/* A linear [out, in] repeated m times into base, with its LoRA pair
 * (A [r, in], B [out, r]) into adapt when r > 0. */
void ls_count_lin(ls_count *base, ls_count *adapt, size_t out, size_t in, size_t m, size_t r, const char *name);

/* ---- FLOPs of the plan (trainer/plan/plan_flops.c's rules, docs/plan.md) ------- */
/* What one model's layers cost per token, split by kind of work; the plan
 * adds the LM head and applies the per-kind factors. */
typedef struct {
    double base;        /* 2·out·in of every linear (forward) */
    double base_tr;     /* of those, the trained ones (full mode's weight gradients) */
    double lora;        /* 2·r·(in + out) of the adapters */
    double conv;        /* depthwise conv, forward (its weight gradient costs as much again) */
    double rec;         /* linear-recurrence dk·dv per value head, summed over layers (x7 fwd, x15 bwd) */
    double attn_hd;     /* sum over dense attention layers of H·hd (x4 fwd, x8 bwd per visible key) */
    double sparse_hd;   /* sum over top-k attention layers of H·(d_qk + d_v) (x2 fwd, x4 bwd per attended key) */
    size_t key_cap;     /* keys a top-k attention query attends (0: none) */
    double fwd_per_key; /* forward-only work per visible key (a frozen scorer: the DSA indexer) */
    double no_grad_lin; /* of base, the linears no gradient reaches (left out of the backward) */
} ls_flop_terms;
/* A linear [out, in] into t: 2·out·in, trained or not, and its adapter when a LoRA target and r > 0. */
static inline void ls_flop_lin(ls_flop_terms *t, double out, double in, int lora_target, int trained, int r) {
    t->base += 2.0 * out * in;
    if (trained) t->base_tr += 2.0 * out * in;
    if (lora_target && r > 0) t->lora += 2.0 * (double)r * (in + out);
}

/* ---- the Hugging Face mapping (trainer/plan/plan_hf.h) -------------------------- */
/* Facts of a config.json only the plan needs. */
typedef struct {
    size_t index_sets; /* layers holding their own sparse-attention index keys (0: every layer / none) */
    int moe_as_dense;  /* a routed FFN was planned as a dense FFN of the active width */
    int mtp_layers;    /* multi-token-prediction layers the file declares: not planned */
} ls_family_hf_facts;

/* ---- the descriptor -------------------------------------------------------------- */
struct ls_family_desc {
    const char *name;    /* the config's "family" value */
    const char *summary; /* one line */
    const ls_family_key *keys;
    size_t n_keys;
    size_t keys_bytes; /* the size of the family's key struct (<= LS_FAMILY_KEYS_BYTES) */
    /* The keys' consistency beyond their ranges (divisibility, ...): LS_ERR_FORMAT with
     * "WHERE: key 'x': problem" in err.  Ranges are checked before. */
    ls_status (*check)(const ls_model_config *c, const char *where, char *err, size_t err_len);
    /* Base and adapter scalars of the family's tensor list (params.h's build order, docs/model.md §5), r the
     * adapter rank (0: no adapters), lora_experts the option of adapting routed experts; *frozen the
     * base scalars never trained (full mode). */
    void (*counts)(const ls_model_config *c, size_t r, int lora_experts, ls_count *base, ls_count *adapt,
                   size_t *frozen);
    /* Routed experts per MoE layer (0: the family has none: --ep and --lora-experts are refused). */
    int (*routed_experts)(const ls_model_config *c);
    /* With routed experts: the scalars one EP rank of ep does not hold (the other ranks' experts): their
     * base weights and, with r > 0 and lora_experts, adapters.  ep divides routed_experts. */
    void (*ep_others)(const ls_model_config *c, int ep, size_t r, int lora_experts, size_t *base, size_t *adapt);
    /* 1: its layers hold sparse-attention index keys, some layers possibly sharing another's
     * (ls_plan_in.index_sets, longstraw-plan --index-sets). */
    int index_sets;
    /* Layer kinds: every name it uses (NULL-terminated, trace layer_end kinds) and the kind of layer l. */
    const char *const *layer_kinds;
    const char *(*layer_kind)(const ls_model_config *c, int layer);
    /* The plan's FLOP terms of every layer (not the LM head), adapter rank lora_r (0: none). */
    void (*flop_terms)(const ls_model_config *c, int lora_r, ls_flop_terms *t);
    /* Hugging Face: the (text) model_type values it maps (NULL-terminated), the outer model_type a
     * multimodal file may wrap each in ({outer, inner} pairs, ending {NULL, NULL}; NULL: none), and the mapping
     * of the object o (the text model) into c (family and shared keys set; ls_config_check follows) and
     * facts.  Errors "WHERE: key 'x': problem"; LS_ERR_UNSUPPORTED for what the family cannot express. */
    const char *const *hf_model_types;
    const char *const *hf_keys; /* every key of the text model it reads or checks (NULL-terminated); the rest of
                                   the file must be on the planner's list of keys that do not change the math */
    const char *const (*hf_outer)[2];
    ls_status (*hf_map)(ls_model_config *c, ls_family_hf_facts *facts, const cJSON *o, int moe_as_dense,
                        const char *where, char *err, size_t err_len);
    /* The --fault names of the CP faults (step.h's ls_cp_faults) that apply to it (NULL-terminated). */
    const char *const *cp_faults;
    /* Data files, relative to the source tree: a tiny config, the reference script, the audit profile,
     * the parity facts (docs/parity.md, "A family's parity facts"). */
    const char *tiny_config, *reference, *profile, *parity;
};

/* ---- the registry ----------------------------------------------------------------- */
/* The number of families this build has, and family i (0 <= i < count), in the order of
 * trainer/families/families.list.  Static storage. */
size_t ls_family_count(void);
const ls_family_desc *ls_family_at(size_t i);
/* The family named name, or NULL. */
const ls_family_desc *ls_family_find(const char *name);
/* The family that declares key among its config keys, other than `not` (NULL: any), or NULL. */
const ls_family_desc *ls_family_owning_key(const char *key, const ls_family_desc *not);
/* Its name ("?" for NULL). */
const char *ls_family_name(const ls_family_desc *f);
/* The names of every family, "'a', 'b'" into buf (for messages). */
void ls_family_list_names(char *buf, size_t len);
/* 1 when f names fault (a --fault name) among its cp_faults. */
int ls_family_has_cp_fault(const ls_family_desc *f, const char *fault);
/* The registry as JSON (longstraw-train --families; docs/design.md §2): every family's name, summary,
 * keys (type, range, default, Hugging Face key), layer kinds, whether it has routed experts, CP faults and
 * data files, plus the shared keys.  Caller owns it (cJSON_Delete); NULL on allocation failure. */
cJSON *ls_family_registry_json(void);
#endif
