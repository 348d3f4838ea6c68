/* rank_steps.c - the per-rank checks that need a step's layer events and
 * collectives, made step by step while the trace streams, so that the
 * audit's memory does not grow with the trace.
 *
 * A rank holds at most two open steps (ls_audit_step_window): step s is
 * closed when an event of step s + 2 arrives, or when the trace ends.
 * Closing a step checks it against the run's profile (audit/model/profile.h) and
 * discards its keys, keeping only counts and the first few failures with
 * their evidence:
 *  - rank.layers: the layer_end events of the plan's prompt steps (v1:
 *    capture, and prompt_bwd in full mode), and of every member below the
 *    step's own group (1 + its largest member in a member step's phase,
 *    g_local) in the plan's member steps (v1: score, replay); the members
 *    the run requires beyond g_local (the recorded group, or the largest
 *    any rank traced) are all missing there, which
 *    ls_audit_steps_layers_rule counts when the ranks are known;
 *  - collectives.* (world > 1): for every layer entry a requirement of the
 *    profile names (layer kind, phase, direction, unit), the collectives of
 *    its purposes in the same step, phase and layer;
 *  - the per-step requirements (collectives.finalize): which purposes the
 *    step showed without a layer in their phase (ls_audit_step.step_req).
 * An event of a step already closed (never in a trace the trainer writes)
 * is counted and fails rank.layers: its step was judged without it. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h"

_Static_assert(sizeof(ls_audit_step) <= 64, "the per-step facts stay 64 bytes a step");

bool ls_audit_have_layers(const ls_audit_run *run) {
    return run->config != NULL && run->n_layers > 0 && run->n_layers < 100000;
}

const ls_audit_step *ls_audit_step_of(const ls_audit_rank *r, int64_t step) {
    return step >= 0 && (size_t)step < r->steps_cap ? &r->steps[step] : NULL;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static size_t lk_hash(int phase, int64_t member, int64_t layer, int dir) {
    return (size_t)mix(mix(mix(mix(1469598103934665603ull, (uint64_t)phase), (uint64_t)member), (uint64_t)layer),
                       (uint64_t)dir);
}

static size_t cc_hash(int phase, int64_t layer, uint16_t purpose) {
    return (size_t)mix(mix(mix(1469598103934665603ull, (uint64_t)phase), (uint64_t)layer), purpose);
}

static const ls_audit_layer_key *lk_find(const ls_audit_step_window *w, int phase, int64_t member, int64_t layer,
                                         int dir) {
    if (w == NULL || w->lk_cap == 0) return NULL;
    size_t j = lk_hash(phase, member, layer, dir) & (w->lk_cap - 1);
    while (w->lk[j].used) {
        const ls_audit_layer_key *k = &w->lk[j];
        if (k->phase == phase && k->member == member && k->layer == layer && k->dir == dir) return k;
        j = (j + 1) & (w->lk_cap - 1);
    }
    return NULL;
}

static uint64_t cc_get(const ls_audit_step_window *w, int phase, int64_t layer, int purpose) {
    if (w->cc_cap == 0 || purpose < 0) return 0;
    size_t j = cc_hash(phase, layer, (uint16_t)purpose) & (w->cc_cap - 1);
    while (w->cc[j].used) {
        const ls_audit_coll_count *k = &w->cc[j];
        if (k->phase == phase && k->layer == layer && k->purpose == purpose) return k->count;
        j = (j + 1) & (w->cc_cap - 1);
    }
    return 0;
}

static ls_status lk_grow(ls_audit_step_window *w) {
    size_t ncap = w->lk_cap ? w->lk_cap * 2 : 256;
    ls_audit_layer_key *n = calloc(ncap, sizeof *n);
    if (n == NULL) return LS_ERR_NOMEM;
    for (size_t i = 0; i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (!k->used) continue;
        size_t j = lk_hash(k->phase, k->member, k->layer, k->dir) & (ncap - 1);
        while (n[j].used) j = (j + 1) & (ncap - 1);
        n[j] = *k;
    }
    free(w->lk);
    w->lk = n;
    w->lk_cap = ncap;
    return LS_OK;
}

static ls_status cc_grow(ls_audit_step_window *w) {
    size_t ncap = w->cc_cap ? w->cc_cap * 2 : 128;
    ls_audit_coll_count *n = calloc(ncap, sizeof *n);
    if (n == NULL) return LS_ERR_NOMEM;
    for (size_t i = 0; i < w->cc_cap; i++) {
        const ls_audit_coll_count *k = &w->cc[i];
        if (!k->used) continue;
        size_t j = cc_hash(k->phase, k->layer, k->purpose) & (ncap - 1);
        while (n[j].used) j = (j + 1) & (ncap - 1);
        n[j] = *k;
    }
    free(w->cc);
    w->cc = n;
    w->cc_cap = ncap;
    return LS_OK;
}

ls_audit_step_window *ls_audit_steps_window(ls_audit_rank *r, int64_t step) {
    if (step < r->steps_closed) return NULL;
    for (int i = 0; i < 2; i++)
        if (r->win[i].step == step) return &r->win[i];
    for (int i = 0; i < 2; i++)
        if (r->win[i].step < 0) {
            r->win[i].step = step;
            return &r->win[i];
        }
    return NULL;
}

/* The open window of step (claimed when new); NULL when the step is closed
 * (a late event: counted). */
static ls_audit_step_window *window_of(ls_audit_rank *r, int64_t step, int64_t seq) {
    if (step < r->steps_closed) {
        if (r->n_late++ == 0) {
            r->late_seq = seq;
            r->late_step = step;
        }
        return NULL;
    }
    for (int i = 0; i < 2; i++)
        if (r->win[i].step == step) return &r->win[i];
    for (int i = 0; i < 2; i++)
        if (r->win[i].step < 0) {
            r->win[i].step = step;
            return &r->win[i];
        }
    return NULL; /* unreachable: advance keeps at most two steps open */
}

ls_status ls_audit_steps_layer(ls_audit_rank *r, int64_t step, int phase, int64_t member, int64_t layer, int dir,
                               int kind, int64_t seq) {
    if (member < -1 || member >= LS_AUDIT_MAX_MEMBER || layer < INT32_MIN || layer > INT32_MAX) {
        r->lk_overflow = true;
        return LS_OK;
    }
    ls_audit_step_window *w = window_of(r, step, seq);
    ls_audit_layer_key *k = NULL;
    if (w == NULL) goto seq; /* a step already closed: counted; steps.sequence still places it */
    if (w->lk_cap == 0 || (w->lk_used + 1) * 2 > w->lk_cap) {
        if (w->lk_used >= LS_AUDIT_MAX_LAYER_KEYS) {
            k = (ls_audit_layer_key *)lk_find(w, phase, member, layer, dir);
            if (k != NULL) k->count++;
            else r->lk_overflow = true;
            goto seq;
        }
        ls_status st = lk_grow(w);
        if (st != LS_OK) return st;
    }
    size_t j = lk_hash(phase, member, layer, dir) & (w->lk_cap - 1);
    while (w->lk[j].used) {
        k = &w->lk[j];
        if (k->phase == phase && k->member == member && k->layer == layer && k->dir == dir) {
            k->count++;
            goto seq;
        }
        j = (j + 1) & (w->lk_cap - 1);
    }
    k = &w->lk[j];
    k->used = 1;
    k->phase = (uint8_t)phase;
    k->member = (int32_t)member;
    k->layer = (int32_t)layer;
    k->dir = (uint8_t)dir;
    k->kind = (uint8_t)kind;
    k->count = 1;
    k->first_seq = seq;
    w->lk_used++;
seq:
    ls_audit_seq_layer(r, w, k, step, phase, member, layer, dir, seq);
    return LS_OK;
}

ls_status ls_audit_steps_coll(ls_audit_rank *r, int64_t step, int phase, int64_t layer, uint16_t purpose,
                              int64_t seq) {
    ls_audit_step_window *w = window_of(r, step, seq);
    if (w == NULL) return LS_OK;
    if (w->cc_cap == 0 || (w->cc_used + 1) * 2 > w->cc_cap) {
        if (w->cc_used >= LS_AUDIT_MAX_LAYER_KEYS) { /* as many as layer keys, at most */
            r->lk_overflow = true;
            return LS_OK;
        }
        ls_status st = cc_grow(w);
        if (st != LS_OK) return st;
    }
    size_t j = cc_hash(phase, layer, purpose) & (w->cc_cap - 1);
    while (w->cc[j].used) {
        ls_audit_coll_count *k = &w->cc[j];
        if (k->phase == phase && k->layer == layer && k->purpose == purpose) {
            if (k->count < UINT32_MAX) k->count++;
            return LS_OK;
        }
        j = (j + 1) & (w->cc_cap - 1);
    }
    ls_audit_coll_count *k = &w->cc[j];
    k->used = 1;
    k->phase = (uint8_t)phase;
    k->layer = layer;
    k->purpose = purpose;
    k->count = 1;
    w->cc_used++;
    return LS_OK;
}

/* ---- rank.layers: the expected keys of a step, in the rule's order ------- */

/* The step plan is the profile's (audit/model/profile.h): a step of unit prompt
 * shows its layers once (member -1), a step of unit member once per member,
 * each where its conditions hold for the step (the run's grad_mode and
 * strategy, the step's objective and prompt state). */
bool ls_audit_grid_holds(const ls_audit_run *run, unsigned when) {
    uint32_t cp = run->cp_size ? run->cp_size : run->world;
    if ((when & LS_AUDIT_WHEN_CP) && cp <= 1) return false;
    if ((when & LS_AUDIT_WHEN_EP) && run->ep_size <= 1) return false;
    if ((when & LS_AUDIT_WHEN_DP) && run->dp_size <= 1) return false;
    return true;
}

static bool holds(const ls_audit_run *run, unsigned when, bool sft, bool frozen) {
    return ls_audit_grid_holds(run, when) &&
           ls_audit_profile_when(when & ~(unsigned)LS_AUDIT_WHEN_GRID, run->full_mode, run->naive, sft, frozen, false);
}

typedef struct {
    const ls_audit_step_window *w; /* NULL: every key missing */
    ls_audit_missing *out;
    size_t *n, cap;
    uint64_t left;                 /* missing keys not yet found */
} walk_ctx;

/* false: stop the walk */
static bool visit(walk_ctx *c, int64_t step, const ls_audit_profile_step *st, int64_t member, int64_t layer,
                  int dir) {
    if (lk_find(c->w, st->phase_ix, member, layer, dir) != NULL) return true;
    c->out[(*c->n)++] = (ls_audit_missing){.step = step, .member = member, .layer = layer, .phase = st->phase,
                                           .dir = (uint8_t)dir};
    return *c->n < c->cap && --c->left > 0;
}

/* Whether plan step st is of unit u and required in a step (sft, frozen). */
static bool step_required(const ls_audit_run *run, const ls_audit_profile_step *st, ls_audit_unit u, bool sft,
                          bool frozen) {
    return st->unit == u && holds(run, st->when, sft, frozen) && !ls_audit_seq_rules_out(run, st->phase);
}

/* false: stop the walk */
static bool visit_dirs(walk_ctx *c, int64_t step, const ls_audit_profile_step *st, int64_t member, int64_t l) {
    if ((st->dirs & LS_AUDIT_DIRS_FWD) && !visit(c, step, st, member, l, LS_TRACE_DIR_FWD)) return false;
    if ((st->dirs & LS_AUDIT_DIRS_BWD) && !visit(c, step, st, member, l, LS_TRACE_DIR_BWD)) return false;
    return true;
}

/* Walks the expected keys of step: the prompt steps (when prompt), each
 * over its layers, then members m0 .. m1 - 1, each layer, the member steps;
 * records missing ones until c is full or c->left are found. */
/* Whether member m's layer events of step st are required on rank: everywhere, but for a "split": "dp" step
 * of a data-parallel run only on the ranks of m's replica (m % dp; rank r's replica r / cp). */
static bool member_here(const ls_audit_run *run, const ls_audit_profile_step *st, uint32_t rank, int64_t m) {
    if (!st->split_dp || run->dp_size <= 1 || run->cp_size == 0) return true;
    return (uint64_t)m % run->dp_size == rank / run->cp_size;
}

static void walk(const ls_audit_run *run, walk_ctx *c, uint32_t rank, int64_t step, bool sft, bool frozen, bool prompt,
                 int64_t m0, int64_t m1) {
    const ls_audit_profile *p = ls_audit_profile_of(run);
    int64_t L = run->n_layers;
    if (p == NULL || *c->n >= c->cap || c->left == 0) return;
    for (size_t i = 0; prompt && i < p->n_steps; i++) {
        const ls_audit_profile_step *st = &p->steps[i];
        if (!step_required(run, st, LS_AUDIT_UNIT_PROMPT, sft, frozen)) continue;
        for (int64_t l = -1; l <= L; l++)
            if (ls_audit_profile_layer_in(st->layers, l, L) && !visit_dirs(c, step, st, -1, l)) return;
    }
    for (int64_t m = m0; m < m1; m++)
        for (int64_t l = -1; l <= L; l++)
            for (size_t i = 0; i < p->n_steps; i++) {
                const ls_audit_profile_step *st = &p->steps[i];
                if (step_required(run, st, LS_AUDIT_UNIT_MEMBER, sft, frozen) && member_here(run, st, rank, m) &&
                    ls_audit_profile_layer_in(st->layers, l, L) && !visit_dirs(c, step, st, m, l))
                    return;
            }
}

/* The layer keys of the steps of unit u a step requires. */
static uint64_t unit_keys(const ls_audit_run *run, ls_audit_unit u, bool sft, bool frozen) {
    const ls_audit_profile *p = ls_audit_profile_of(run);
    uint64_t n = 0;
    if (p == NULL) return 0;
    for (size_t i = 0; i < p->n_steps; i++)
        if (step_required(run, &p->steps[i], u, sft, frozen))
            n += ls_audit_profile_layer_keys(p->steps[i].layers, p->steps[i].dirs, run->n_layers);
    return n;
}

/* The layer keys the member steps require of member m on rank (unit_keys of unit member, less the
 * split steps of another replica's member). */
static uint64_t member_keys(const ls_audit_run *run, uint32_t rank, int64_t m, bool sft, bool frozen) {
    const ls_audit_profile *p = ls_audit_profile_of(run);
    uint64_t n = 0;
    if (p == NULL) return 0;
    for (size_t i = 0; i < p->n_steps; i++)
        if (step_required(run, &p->steps[i], LS_AUDIT_UNIT_MEMBER, sft, frozen) && member_here(run, &p->steps[i], rank, m))
            n += ls_audit_profile_layer_keys(p->steps[i].layers, p->steps[i].dirs, run->n_layers);
    return n;
}

/* Whether key k is one a step of unit u requires on rank. */
static bool required_key(const ls_audit_run *run, const ls_audit_layer_key *k, ls_audit_unit u, uint32_t rank, bool sft,
                         bool frozen) {
    const ls_audit_profile *p = ls_audit_profile_of(run);
    unsigned dbit = k->dir == LS_TRACE_DIR_FWD ? LS_AUDIT_DIRS_FWD : LS_AUDIT_DIRS_BWD;
    for (size_t i = 0; i < p->n_steps; i++) {
        const ls_audit_profile_step *st = &p->steps[i];
        if (step_required(run, st, u, sft, frozen) && st->phase_ix == k->phase && (st->dirs & dbit) &&
            ls_audit_profile_layer_in(st->layers, k->layer, run->n_layers) &&
            (u != LS_AUDIT_UNIT_MEMBER || member_here(run, st, rank, k->member)))
            return true;
    }
    return false;
}

static void check_layers(const ls_audit_run *run, ls_audit_rank *r, int64_t s, const ls_audit_step_window *w,
                         int64_t gl, bool sft, bool frozen) {
    if (ls_audit_profile_of(run) == NULL) return; /* rank.layers names the missing profile */
    uint64_t expected = unit_keys(run, LS_AUDIT_UNIT_PROMPT, sft, frozen), present = 0;
    for (int64_t m = 0; m < gl; m++) expected += member_keys(run, r->rank, m, sft, frozen);
    for (size_t i = 0; w != NULL && i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (!k->used) continue;
        bool prompt = k->member == -1 && required_key(run, k, LS_AUDIT_UNIT_PROMPT, r->rank, sft, frozen);
        bool member =
            k->member >= 0 && k->member < gl && required_key(run, k, LS_AUDIT_UNIT_MEMBER, r->rank, sft, frozen);
        present += prompt || member;
    }
    uint64_t missing = expected - present;
    r->ly_missing += missing;
    if (missing == 0 || r->n_ly_first >= 3) return;
    walk_ctx c = {.w = w, .out = r->ly_first, .n = &r->n_ly_first, .cap = 3, .left = missing};
    walk(run, &c, r->rank, s, sft, frozen, true, 0, gl);
}

/* ---- collectives.*: a step's layer entries and per-step collectives ------ */

typedef struct {
    int64_t layer, first_seq;
    uint64_t count;
    uint8_t phase, dir, kind, prompt; /* prompt: member -1 */
} layer_entry;

static int entry_cmp(const void *a, const void *b) {
    const layer_entry *x = a, *y = b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    if (x->dir != y->dir) return x->dir < y->dir ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    return (x->prompt > y->prompt) - (x->prompt < y->prompt);
}

static int purpose_index(const ls_audit_run *run, const char *name) {
    for (size_t i = 0; i < run->n_purposes; i++)
        if (strcmp(run->purposes[i], name) == 0) return (int)i;
    return -1;
}

static bool in_ix(const int *ix, size_t n, int v) {
    for (size_t i = 0; i < n; i++)
        if (ix[i] >= 0 && ix[i] == v) return true;
    return false;
}

/* Whether layer entry e is one requirement q speaks of. */
static bool entry_matches(const ls_audit_profile_layer_req *q, const layer_entry *e) {
    unsigned dbit = e->dir == LS_TRACE_DIR_FWD ? LS_AUDIT_DIRS_FWD : LS_AUDIT_DIRS_BWD;
    if (q->dir != dbit || !in_ix(q->kind_ix, q->n_kinds, e->kind) || !in_ix(q->phase_ix, q->n_phases, e->phase) ||
        e->layer < q->from_layer)
        return false;
    return q->unit == LS_AUDIT_UNIT_NONE || (q->unit == LS_AUDIT_UNIT_PROMPT) == (e->prompt != 0);
}

static void require(const ls_audit_run *run, ls_audit_req *q, const ls_audit_step_window *w, int64_t s,
                    const layer_entry *e, const ls_audit_profile_layer_req *rq) {
    for (size_t p = 0; p < rq->n_purposes; p++) {
        q->matched++;
        uint64_t want = rq->per_event ? e->count : 1;
        uint64_t got = cc_get(w, e->phase, e->layer, purpose_index(run, rq->purposes[p]));
        if (got >= want) continue;
        if (q->failed++ < 4)
            q->first[q->n_first++] = (ls_audit_req_fail){.step = s, .layer = e->layer, .first_seq = e->first_seq,
                                                         .got = got, .want = want, .purpose = rq->purposes[p],
                                                         .label = rq->label, .phase = e->phase, .dir = e->dir};
    }
}

/* Whether a layer of kind is one some layer requirement names. */
static bool kind_required(const ls_audit_profile *p, int kind) {
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++)
        for (size_t k = 0; k < p->rules[id].n_layers; k++)
            if (in_ix(p->rules[id].layers[k].kind_ix, p->rules[id].layers[k].n_kinds, kind)) return true;
    return false;
}

static ls_status check_collectives(const ls_audit_run *run, ls_audit_rank *r, int64_t s,
                                   const ls_audit_step_window *w, bool sft, bool frozen) {
    const ls_audit_profile *p = ls_audit_profile_of(run);
    if (w->lk_used == 0 || p == NULL) return LS_OK;
    layer_entry *e = malloc(w->lk_used * sizeof *e);
    if (e == NULL) return LS_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (!k->used || !kind_required(p, k->kind)) continue;
        e[n++] = (layer_entry){.layer = k->layer, .first_seq = k->first_seq, .count = k->count, .phase = k->phase,
                               .dir = k->dir, .kind = k->kind, .prompt = k->member < 0};
    }
    qsort(e, n, sizeof *e, entry_cmp);
    size_t m = 0; /* merge the members of one (phase, layer, dir, kind, unit) */
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && entry_cmp(&e[m - 1], &e[i]) == 0) {
            e[m - 1].count += e[i].count;
            if (e[i].first_seq < e[m - 1].first_seq) e[m - 1].first_seq = e[i].first_seq;
        } else {
            e[m++] = e[i];
        }
    }
    for (size_t i = 0; i < m; i++)
        for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) {
            const ls_audit_profile_rule *rl = &p->rules[id];
            bool counted = false;
            for (size_t k = 0; k < rl->n_layers; k++) {
                const ls_audit_profile_layer_req *q = &rl->layers[k];
                if (!entry_matches(q, &e[i]) || !holds(run, q->when, sft, frozen)) continue;
                if (q->must_appear && !counted) r->req[id].entries++;
                counted = counted || q->must_appear;
                require(run, &r->req[id], w, s, &e[i], q);
            }
        }
    free(e);
    return LS_OK;
}

/* The per-step purposes the step showed: bit k of sf->step_req, the
 * profile's k-th (a collective without a layer in the requirement's phase). */
static void check_step_collectives(const ls_audit_run *run, const ls_audit_step_window *w, ls_audit_step *sf) {
    const ls_audit_profile *p = ls_audit_profile_of(run);
    if (p == NULL || w == NULL || sf == NULL) return;
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++)
        for (size_t k = 0; k < p->rules[id].n_steps; k++) {
            const ls_audit_profile_step_req *q = &p->rules[id].steps[k];
            for (size_t j = 0; j < q->n_purposes; j++)
                if (q->phase_ix >= 0 && cc_get(w, q->phase_ix, -2, purpose_index(run, q->purposes[j])) > 0)
                    sf->step_req |= (uint8_t)(1u << (q->bit0 + j));
        }
}

/* ---- closing ------------------------------------------------------------- */

static void window_clear(ls_audit_step_window *w) {
    if (w->lk_used) memset(w->lk, 0, w->lk_cap * sizeof *w->lk);
    if (w->cc_used) memset(w->cc, 0, w->cc_cap * sizeof *w->cc);
    w->lk_used = w->cc_used = 0;
    ls_audit_seq_window_free(w);
    w->step = -1;
}

static ls_status close_step(const ls_audit_run *run, ls_audit_rank *r, int64_t s) {
    ls_audit_step_window *w = NULL;
    for (int i = 0; i < 2; i++)
        if (r->win[i].step == s) w = &r->win[i];
    ls_audit_step *sf = s >= 0 && (size_t)s < r->steps_cap ? &r->steps[s] : NULL;
    int64_t gl = 0; /* 1 + the largest member of a member step's phase (any of the plan's, held or not) */
    const ls_audit_profile *p = ls_audit_profile_of(run);
    for (size_t i = 0; w != NULL && p != NULL && i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (!k->used || k->member + 1 <= gl) continue;
        for (size_t j = 0; j < p->n_steps; j++)
            if (p->steps[j].unit == LS_AUDIT_UNIT_MEMBER && p->steps[j].phase_ix == k->phase) gl = k->member + 1;
    }
    if (sf != NULL) sf->g_local = (int32_t)gl;
    bool sft = sf != NULL && sf->sft, frozen = sf != NULL && sf->prefix_frozen;
    ls_status st = LS_OK;
    if (ls_audit_have_layers(run)) check_layers(run, r, s, w, gl, sft, frozen);
    check_step_collectives(run, w, sf);
    if (w != NULL && run->world > 1) st = check_collectives(run, r, s, w, sft, frozen);
    if (w != NULL && st == LS_OK) st = ls_audit_seq_close(run, r, s, w); /* steps.sequence: its layer keys */
    if (w != NULL) window_clear(w);
    r->steps_closed = s + 1;
    return st;
}

ls_status ls_audit_steps_advance(ls_audit_run *run, ls_audit_rank *r, int64_t step) {
    ls_status st = LS_OK;
    if (r->steps_closed < step - 1) (void)ls_audit_profile_attach(run); /* a v1 run without one: evaluate says so */
    while (st == LS_OK && r->steps_closed < step - 1) st = close_step(run, r, r->steps_closed);
    return st;
}

ls_status ls_audit_steps_finish(ls_audit_run *run, ls_audit_rank *r) {
    ls_status st = LS_OK;
    (void)ls_audit_profile_attach(run);
    ls_audit_seq_finish(run, r); /* steps.sequence: the last step's end, before its window closes */
    while (st == LS_OK && r->steps_closed < r->n_steps_seen) st = close_step(run, r, r->steps_closed);
    return st;
}

void ls_audit_steps_close_empty(const ls_audit_run *run, ls_audit_rank *r, int64_t until) {
    while (r->steps_closed < until) (void)close_step(run, r, r->steps_closed); /* no window: no allocation */
}

void ls_audit_steps_free(ls_audit_rank *r) {
    for (int i = 0; i < 2; i++) {
        free(r->win[i].lk);
        free(r->win[i].cc);
        ls_audit_seq_window_free(&r->win[i]);
        memset(&r->win[i], 0, sizeof r->win[i]);
        r->win[i].step = -1;
    }
}

/* ---- rank.layers at rule time -------------------------------------------- */

static void emit_missing(ls_audit_rule *rule, const ls_audit_rank *r, const ls_audit_missing *m) {
    ls_audit_rule_fail(rule, r->rank, r->trace_file, -1,
                       "step %lld %s: no %s layer_end for member %lld, layer %lld (last event seq %lld: %s)",
                       (long long)m->step, m->phase, m->dir == LS_TRACE_DIR_FWD ? "fwd" : "bwd",
                       (long long)m->member, (long long)m->layer, (long long)r->last_seq, r->last_ev);
}

uint64_t ls_audit_steps_layers_rule(const ls_audit_run *run, ls_audit_rule *rule, ls_audit_rank *r, int64_t S,
                                    const int64_t *G) {
    ls_audit_steps_close_empty(run, r, S); /* steps the rank never reached: all missing */
    uint64_t missing = r->ly_missing, shown = 0;
    size_t k = 0;
    for (int64_t s = run->first_step; s < S; s++) {
        const ls_audit_step *sf = ls_audit_step_of(r, s);
        bool sft = sf != NULL && sf->sft, frozen = sf != NULL && sf->prefix_frozen;
        int64_t gl = sf != NULL ? sf->g_local : 0;
        uint64_t per_member = unit_keys(run, LS_AUDIT_UNIT_MEMBER, sft, frozen);
        rule->matched += unit_keys(run, LS_AUDIT_UNIT_PROMPT, sft, frozen) + (uint64_t)G[s] * per_member;
        for (; k < r->n_ly_first && r->ly_first[k].step == s; k++)
            if (shown++ < 3) emit_missing(rule, r, &r->ly_first[k]);
        if (G[s] == 0 && !sft) {
            if (missing++, shown++ < 3)
                ls_audit_rule_fail(rule, r->rank, r->trace_file, -1, "step %lld: no rank traced any response member",
                                   (long long)s);
            continue;
        }
        if (G[s] <= gl) continue;
        uint64_t extra = 0;
        for (int64_t m = gl; m < G[s]; m++) extra += member_keys(run, r->rank, m, sft, frozen);
        missing += extra;
        if (shown >= 3 || extra == 0) continue;
        ls_audit_missing tmp[3];
        size_t n = 0;
        walk_ctx c = {.w = NULL, .out = tmp, .n = &n, .cap = (size_t)(3 - shown), .left = extra};
        walk(run, &c, r->rank, s, sft, frozen, false, gl, G[s]);
        for (size_t i = 0; i < n; i++) emit_missing(rule, r, &tmp[i]);
        shown += n;
    }
    return missing;
}
