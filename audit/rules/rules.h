/* rules.h - the audit's rules and levels over a loaded run (audit/model/audit.h):
 * ls_audit_evaluate runs them all; the per-step checks the loader feeds while a
 * trace streams (steps, steps.sequence, the probe's facts); the profile a run is
 * judged by; the rule registry (ids, levels: rule_ids.c) and the rule objects'
 * evidence; the vocabulary slots of phases and layer kinds. */
#ifndef LS_AUDIT_RULES_H
#define LS_AUDIT_RULES_H

#include "audit/model/audit.h"


const char *ls_audit_assurance_name(ls_audit_assurance a);
/* The run's assurance from its verified signatures. */
ls_audit_assurance ls_audit_assurance_of(const struct ls_audit_run *run);


/* Runs every rule and computes the level.  LS_OK, LS_ERR_NOMEM, or
 * LS_ERR_FORMAT when a v1 run's family has no usable profile in the
 * profile directory (run->profile_err says why; no rule is run). */
ls_status ls_audit_evaluate(ls_audit_run *run);

/* Per-step checks while a trace streams (rank_steps.c, called by load.c):
 * ls_audit_steps_advance on every event of step s (closes the steps before
 * s - 1), _layer and _coll for the step's keys, _finish when the trace
 * ends (closes the rest), _close_empty for the run's steps a rank never
 * reached (rules_rank.c), _free.  _advance and _finish resolve run's
 * profile first (ls_audit_profile_attach): a step is checked against it. */
ls_status ls_audit_steps_advance(ls_audit_run *run, ls_audit_rank *r, int64_t step);
ls_status ls_audit_steps_layer(ls_audit_rank *r, int64_t step, int phase, int64_t member, int64_t layer, int dir,
                               int kind, int64_t seq);
ls_status ls_audit_steps_coll(ls_audit_rank *r, int64_t step, int phase, int64_t layer, uint16_t purpose,
                              int64_t seq);
ls_status ls_audit_steps_finish(ls_audit_run *run, ls_audit_rank *r);
void ls_audit_steps_close_empty(const ls_audit_run *run, ls_audit_rank *r, int64_t until);
void ls_audit_steps_free(ls_audit_rank *r);
/* steps.sequence (rank_seq.c), fed while a trace streams (load_trace.c,
 * rank_steps.c): ls_audit_seq_phase on every phase_begin (begin) and
 * phase_end of phase slot p; ls_audit_seq_optimizer on an optimizer_step;
 * ls_audit_seq_layer on a layer_end, with its key in its step's window w
 * (NULL: not counted); ls_audit_seq_close when window w of step s closes
 * (judges its keys; frees its counts; _window_free frees them unjudged);
 * ls_audit_seq_finish when the trace ends (before its windows close).  ls_audit_steps_window: the open window
 * of step (claimed when free), NULL when the step is closed or none is.
 * ls_audit_rules_sequence: the rule. */
void ls_audit_seq_init(ls_audit_rank *r); /* before the trace streams */
void ls_audit_seq_phase(ls_audit_run *run, ls_audit_rank *r, int64_t step, int p, bool begin, int64_t seq);
void ls_audit_seq_optimizer(ls_audit_run *run, ls_audit_rank *r, int64_t step, int64_t seq);
void ls_audit_seq_layer(ls_audit_rank *r, ls_audit_step_window *w, ls_audit_layer_key *k, int64_t step, int phase,
                        int64_t member, int64_t layer, int dir, int64_t seq);
ls_status ls_audit_seq_close(const ls_audit_run *run, ls_audit_rank *r, int64_t s, ls_audit_step_window *w);
void ls_audit_seq_finish(ls_audit_run *run, ls_audit_rank *r);
void ls_audit_seq_window_free(ls_audit_step_window *w);
ls_audit_step_window *ls_audit_steps_window(ls_audit_rank *r, int64_t step);
ls_status ls_audit_rules_sequence(ls_audit_run *run);
/* True when the run's grammar (compiled: its mode and recorded paths) has
 * items of phase and every one of them never occurs: the plan's requirement
 * of that phase (rank.phases, rank.layers) then yields to the grammar, the
 * finer statement (a step whose old and reference log-probs are all given
 * scores nothing).  False when the grammar is not compiled or may require it. */
bool ls_audit_seq_rules_out(const ls_audit_run *run, const char *phase);
/* rank.layers for rank r over the run's S steps, G[s] members required in
 * step s: closes the steps r never reached, adds the first missing events
 * (in step, phase, member, layer order) as evidence and the keys examined
 * to rule->matched; returns the missing events in all. */
uint64_t ls_audit_steps_layers_rule(const ls_audit_run *run, ls_audit_rule *rule, ls_audit_rank *r, int64_t S,
                                    const int64_t *G);
/* The step facts of rank r (NULL: none). */
const ls_audit_step *ls_audit_step_of(const ls_audit_rank *r, int64_t step);
/* Whether a collective requirement's grid conditions (LS_AUDIT_WHEN_CP, _EP) hold for the run: cp, its
 * prompt split over more than one rank (config cp_ranks, absent: the world); ep, its routed experts split
 * over more than one rank (config ep_ranks > 1).  Other bits are ls_audit_profile_when's. */
bool ls_audit_grid_holds(const ls_audit_run *run, unsigned when);
/* Whether the configuration (n_layers) lets the layer rules run. */
bool ls_audit_have_layers(const ls_audit_run *run);


/* Whether rank r is a member of group name: the first trace header (by
 * rank) that lists the group says; every rank when no header lists it
 * (rules_cross.c). */
bool ls_audit_group_member(const ls_audit_run *run, const char *name, uint32_t r);

/* The rule with this id, NULL when absent. */
const ls_audit_rule *ls_audit_find_rule(const ls_audit_run *run, const char *id);

/* ---- profile (audit/rules/rules_profile.c) ---------------------------------------
 * ls_audit_profile_attach: decides v1/v2, names, loads and binds run's
 * profile (once; later calls return the first outcome): LS_OK; for a v1 run
 * LS_ERR_FORMAT when the audit has no usable profile of its family
 * (profile_err says why: the run cannot be scored);
 * a v2 run's unusable profile is LS_OK with profile_state -1 (profile.match
 * fails, naming it).  ls_audit_profile_of: the bound profile, NULL when none.
 * ls_audit_vocab_index: the index the per-rank facts use for the phase
 * (LS_AUDIT_VOCAB_PHASE: LS_PHASE_*) or layer kind (LS_AUDIT_VOCAB_LAYER_KIND:
 * ls_trace_layer_kind) named name in run's traces, -1 when they have no such
 * name (v1: receipts/format/trace_event.h's enums).  ls_audit_group_kind_of: the
 * kind (ls_audit_group_kind) of group run->groups[g]: a trace header's
 * groups[].kind, else for a v1 trace "cp" cp and "world" world; -1 unknown.
 * ls_audit_fault_level_of: the level run's profile gives a recorded fault and
 * what it touches (1..4; a name the profile lacks: 1, it may touch anything).
 * ls_audit_rules_profile: rule profile.match (every run: the profile it
 * names, at the revision the audit reads; a run that names none fails). */
typedef enum { LS_AUDIT_VOCAB_PHASE = 0, LS_AUDIT_VOCAB_LAYER_KIND } ls_audit_vocab;
ls_status ls_audit_profile_attach(ls_audit_run *run);
const ls_audit_profile *ls_audit_profile_of(const ls_audit_run *run);
int ls_audit_vocab_index(ls_audit_run *run, ls_audit_vocab v, const char *name);
int ls_audit_group_kind_of(const ls_audit_run *run, uint16_t g);
int ls_audit_fault_level_of(const ls_audit_run *run, const char *name, const char **what);
ls_status ls_audit_rules_profile(ls_audit_run *run);

/* Rules (rules.c) and levels (levels.c); called by ls_audit_evaluate. */
ls_status ls_audit_rules_run(ls_audit_run *run);
ls_status ls_audit_levels_run(ls_audit_run *run);
/* v2: collectives.performed (rules_performed.c) and collectives.p2p
 * (rules_p2p.c): added to run->rules only for v2 runs (a v1 run's rule list
 * is unchanged).  LS_OK or LS_ERR_NOMEM. */
ls_status ls_audit_rules_performed(ls_audit_run *run);
ls_status ls_audit_rules_p2p(ls_audit_run *run);
/* run.probe (rules_probe.c, level 4; called by levels.c): its facts are
 * noted per rank as the trace streams (ls_audit_probe_note, load_trace.c:
 * LS_OK or LS_ERR_NOMEM) and freed with ls_audit_probes_free (load.c). */
ls_status ls_audit_probe_note(ls_audit_rank *r, const ls_trace_event *ev);
void ls_audit_probes_free(ls_audit_rank *r);
ls_status ls_audit_rules_probe(ls_audit_run *run);
/* A new rule appended to run->rules (NULL: out of memory).  The rule is
 * the run's (freed by ls_audit_free); the pointer is valid until the next
 * ls_audit_rule_add on run.  id and title are borrowed: they must outlive
 * the run (the rules pass string literals). */
ls_audit_rule *ls_audit_rule_add(ls_audit_run *run, const char *id, int level, const char *title,
                                 bool applicable);
/* The rule ids (rule_ids.c): the one list every added rule is named from,
 * each with the level of the docs/audit.md table.  _count: their number;
 * _at: the i-th (static; NULL past the end), its level into *level (NULL
 * accepted); _level: the level of id, 0 when id is not in the list.
 * ls_audit_rule_add fails a rule whose id is not listed (a programmer's
 * error made visible in every report). */
size_t ls_audit_rule_id_count(void);
/* The trainer's fault names the audit reads a run's config for (load.c:
 * each sets its flag of ls_audit_run); tests/tools/check_vocab.py holds them to
 * longstraw-train's (--list-names). */
#define LS_AUDIT_FAULT_LOCAL_ATTENTION "cp-local-attention"
#define LS_AUDIT_FAULT_SKIP_DKV "skip-dkv-reduce"
#define LS_AUDIT_FAULT_SKIP_FINALIZE "skip-grad-finalize"
const char *ls_audit_rule_id_at(size_t i, int *level);
int ls_audit_rule_id_level(const char *id);
/* Appends evidence and marks the rule failed; file may be NULL (""). */
void ls_audit_rule_fail(ls_audit_rule *r, int64_t rank, const char *file, int64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Sets pass from the evidence and matched (a rule with no evidence passes
 * only when it matched something); fills a default message. */
void ls_audit_rule_close(ls_audit_rule *r);
#endif
