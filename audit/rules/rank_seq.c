/* rank_seq.c - rule steps.sequence: every step of every rank as a sequence,
 * against the grammar its profile states (profile.h, "sequence"), while the
 * trace streams.
 *
 * The grammar is the profile's items in order, each an occurrence of a
 * phase: one whose conditions hold must occur exactly once where it stands,
 * one whose condition fails never, one the run cannot decide (a path
 * decision the configuration records with values on both sides of the
 * condition, or not at all; probed without options.probe_every) at most
 * once; the items marked repeat form one block, run once per prompt group
 * (options.prompts_per_step B).  Whether a step is an SFT step (its
 * step_metrics, after its optimizer) or prefix-frozen (its events' mark) is
 * known only as or after it ends, so each step is matched under the four
 * hypotheses at once (a set of grammar states each: an NFA over at most 32
 * items, a few states), and judged when the next step's first phase begins
 * or the trace ends, under the hypothesis the step's own facts name.
 *
 * Besides the order: no phase begun inside another, every phase_end its
 * phase_begin's, every layer_end inside its own phase, the optimizer_step
 * inside the phase the profile names; each layer key (phase, member,
 * layer, direction) in as many occurrences of its phase as the step has
 * (a member's: as many as its prompt group has), in each exactly once (or
 * as the plan's passes say: a prompt in segments, an SFT member's answer
 * branches), and a member's events in one prompt group.  The key counts
 * ride on rank_steps.c's windows (ls_audit_seq_key) and are judged when the
 * window closes: nothing here grows with the trace (the per-rank state is
 * fixed; a window's per-group counts are freed with it).
 *
 * A fault is kept structured (ls_audit_seq_fault) and written into evidence
 * by the rule; one per step for the order (the earliest), one per window for
 * the layer keys (the earliest, all counted). */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/format/coverage.h"
#include "receipts/format/trace_event.h"

enum { NEVER = 0, MAY = 1, MUST = 2 };

/* Fault kinds (ls_audit_seq_fault.kind). */
enum {
    F_BEFORE = 1,    /* phase (seq) came before expect's (required ones skipped) */
    F_GROUPS_SHORT,  /* phase (seq) after a prompt groups of b */
    F_AGAIN,         /* phase begun a times in its prompt group (seq2, seq) */
    F_NOT_HERE,      /* phase (seq) where expect was due */
    F_INCOMPLETE,    /* the step ended without expect (its last phase phase, seq); phase2/seq2: what came next */
    F_NEST,          /* phase (seq) begun inside phase2 (seq2; a: its step) */
    F_END_UNOPENED,  /* phase_end phase (seq) without a phase open */
    F_END_OTHER,     /* phase_end phase (seq) while phase2 (seq2) is open */
    F_UNENDED,       /* phase (seq) never ended */
    F_LAYER_OUTSIDE, /* layer_end phase member layer dir (seq) outside its phase; phase2 (seq2) open or 255 */
    F_OPT_OUTSIDE,   /* optimizer_step (seq) outside expect's phase; phase2 open or 255 */
    F_STEP_BACK,     /* phase (seq) of step after step a began */
    F_UNEVEN,        /* phase (seq2) shows a events over b keys; member layer dir the most (seq) */
    F_DUP,           /* layer_end phase member layer dir a times in one occurrence (seq2, seq) */
    F_PASSES,        /* layer_end phase member layer dir a times in one occurrence, b expected (seq) */
    F_INSTANCES,     /* layer_end phase member layer dir in a of b occurrences (seq) */
    F_GROUPS         /* layer_end phase member layer dir (seq) in prompt group a, its member's in b (seq2) */
};

#define NONE_PHASE 255u
#define PASSES_UNCOUNTED 255u /* ls_audit_seq_plan.passes of a phase without layer requirements */

/* ---- the grammar sized by the run ------------------------------------------ */

/* The status of a path condition from the configuration's paths: must (every
 * recorded value satisfies it), never (none does), may (some do, or the
 * decision is not recorded, or a value this audit does not know). */
static int path_status(const cJSON *paths, const ls_audit_profile_path_cond *c) {
    const ls_coverage_path_decision *d = &LS_COVERAGE_PATHS[c->decision];
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(paths, d->key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0) return MAY;
    unsigned rec = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        int k = -1;
        for (int i = 0; cJSON_IsString(v) && d->values[i] != NULL && i < 16; i++)
            if (strcmp(d->values[i], v->valuestring) == 0) k = i;
        if (k < 0) return MAY;
        rec |= 1u << k;
    }
    if ((rec & c->values) == rec) return MUST;
    return (rec & c->values) == 0 ? NEVER : MAY;
}

static int lower(int a, int b) { return a < b ? a : b; }

/* The slot of phase name among those the run's traces and profile named so
 * far, -1 none yet: the grammar's items take no slot of their own (a v1
 * run's reports list the phases its traces show), they are resolved as the
 * names appear. */
static int phase_lookup(const ls_audit_run *run, const char *name) {
    for (int i = 0; i < run->n_phase_names; i++)
        if (strcmp(run->phase_names[i], name) == 0) return i;
    return -1;
}

/* Resolves the items not resolved yet; the phases holding the optimizer_step. */
static void resolve_items(ls_audit_run *run) {
    ls_audit_profile *p = &run->profile;
    for (size_t i = 0; i < p->n_seq; i++) {
        ls_audit_profile_seq_item *it = &p->seq[i];
        if (it->phase_ix >= 0) continue;
        it->phase_ix = phase_lookup(run, it->phase);
        if (it->holds_optimizer_step && it->phase_ix >= 0 && it->phase_ix < LS_AUDIT_NPHASE)
            run->seq_plan.opt_phases |= 1u << it->phase_ix;
    }
}

/* Compiles run's grammar once its profile is known.  A v1 run without a
 * family waits for the profile its traces' layer kinds choose (at the first
 * step a trace closes): its steps before are not matched. */
static void plan_compile(ls_audit_run *run) {
    ls_audit_seq_plan *pl = &run->seq_plan;
    if (pl->state != 0) return;
    if (run->profile_state == 0) {
        bool named = run->evidence_version == 2 || (run->config && ls_audit_get_str(run->config, "family") != NULL);
        if (!named) return;
        (void)ls_audit_profile_attach(run);
    }
    const ls_audit_profile *p = ls_audit_profile_of(run);
    if (p == NULL || p->n_seq == 0) {
        pl->state = run->profile_state == 0 ? 0 : -1;
        return;
    }
    const cJSON *paths = run->config ? cJSON_GetObjectItemCaseSensitive(run->config, "paths") : NULL;
    for (size_t i = 0; i < p->n_seq; i++) {
        const ls_audit_profile_seq_item *it = &p->seq[i];
        int s = ls_audit_profile_when(it->when & (LS_AUDIT_WHEN_FULL | LS_AUDIT_WHEN_DETACHED |
                                                  LS_AUDIT_WHEN_LONGSTRAW | LS_AUDIT_WHEN_NAIVE),
                                      run->full_mode, run->naive, false, false, false)
                    ? MUST
                    : NEVER;
        for (size_t k = 0; k < it->n_paths; k++) s = lower(s, path_status(paths, &it->paths[k]));
        pl->base[i] = (uint8_t)s;
    }
    const cJSON *opts = run->config ? cJSON_GetObjectItemCaseSensitive(run->config, "options") : NULL;
    int64_t v = 0;
    pl->b_min = pl->b_max = 1; /* not recorded: one prompt group a step (every run before the option) */
    if (cJSON_GetObjectItemCaseSensitive(opts, "prompts_per_step") != NULL) {
        if (ls_audit_get_int(opts, "prompts_per_step", &v) && v >= 1 && v <= 0xfffe) pl->b_min = pl->b_max = v;
        else pl->b_max = 0; /* unusable: any number (rank.layers names it) */
    }
    pl->probe_every = -1;
    if (ls_audit_get_int(opts, "probe_every", &v) && v >= 0 && v <= 1000000) pl->probe_every = v;
    pl->group = -1;
    if (run->config && ls_audit_get_int(run->config, "group", &v) && v >= 1 && v <= 0xffff) pl->group = v;
    /* a phase the plan requires no layer events of (unit none, or no plan entry) has its layer events
       uncounted: a rollout's decode may show one per token */
    for (int ph = 0; ph < LS_AUDIT_NPHASE; ph++) pl->passes[ph] = PASSES_UNCOUNTED;
    for (size_t i = p->n_steps; i-- > 0;) /* the first entry of a phase decides */
        if (p->steps[i].phase_ix >= 0 && p->steps[i].phase_ix < LS_AUDIT_NPHASE)
            pl->passes[p->steps[i].phase_ix] =
                p->steps[i].unit == LS_AUDIT_UNIT_NONE ? PASSES_UNCOUNTED : (uint8_t)p->steps[i].passes;
    pl->opt_phases = 0;
    for (size_t i = 0; i < run->profile.n_seq; i++) run->profile.seq[i].phase_ix = -1;
    resolve_items(run);
    pl->state = 1;
}

bool ls_audit_seq_rules_out(const ls_audit_run *run, const char *phase) {
    const ls_audit_seq_plan *pl = &run->seq_plan;
    const ls_audit_profile *p = &run->profile;
    if (pl->state != 1 || phase == NULL) return false;
    bool any = false;
    for (size_t i = 0; i < p->n_seq; i++) {
        if (strcmp(p->seq[i].phase, phase) != 0) continue;
        if (pl->base[i] != NEVER) return false;
        any = true;
    }
    return any;
}

/* ---- the automaton -------------------------------------------------------- */

/* Positions 0..n-1 are items, n the end of the step, n+1 the end of the
 * block after group g (then: another group, or on past the block). */
typedef struct {
    const ls_audit_profile *p;
    const uint8_t *stat;
    size_t n, b0, b1;
    int64_t bmin, bmax;
    bool relaxed, early, loops; /* skip required items; leave the block before B groups; loop to another group */
} gram;

#define CLOSURE_CAP 192

static gram gram_of(const ls_audit_run *run, const uint8_t *stat, bool relaxed, bool early, bool loops) {
    const ls_audit_profile *p = &run->profile;
    return (gram){.p = p, .stat = stat, .n = p->n_seq, .b0 = p->seq_block0, .b1 = p->seq_block1,
                  .bmin = run->seq_plan.b_min, .bmax = run->seq_plan.b_max, .relaxed = relaxed, .early = early,
                  .loops = loops};
}

static bool in_block(const gram *c, size_t pos) { return pos >= c->b0 && pos < c->b1; }

/* The state after item pos (consumed or passed over). */
static ls_audit_seq_state after(const gram *c, ls_audit_seq_state s, bool consumed) {
    size_t pos = s.pos;
    ls_audit_seq_state t = s;
    t.pos = (uint8_t)(c->b0 < c->b1 && pos + 1 == c->b1 ? c->n + 1 : pos + 1);
    if (pos + 1 == c->b0) t.fed = 0;     /* entering the block: group 0, nothing consumed yet */
    if (consumed && in_block(c, pos)) t.fed = 1;
    return t;
}

static void add(ls_audit_seq_state *set, size_t *n, size_t cap, ls_audit_seq_state s) {
    for (size_t i = 0; i < *n; i++)
        if (set[i].pos == s.pos && set[i].fed == s.fed && set[i].g == s.g) return;
    if (*n < cap) set[(*n)++] = s;
}

/* Every state reachable from in[0..n_in) without consuming a phase. */
static size_t closure(const gram *c, const ls_audit_seq_state *in, size_t n_in, ls_audit_seq_state *out) {
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++) add(out, &n, CLOSURE_CAP, in[i]);
    for (size_t i = 0; i < n; i++) {
        ls_audit_seq_state s = out[i];
        if (s.pos == c->n + 1) { /* the end of group s.g */
            if (c->loops && s.fed && (c->bmax == 0 || s.g + 1 < c->bmax) && s.g < 0xfffe)
                add(out, &n, CLOSURE_CAP,
                    (ls_audit_seq_state){.pos = (uint8_t)c->b0, .fed = 0, .g = (uint16_t)(s.g + 1)});
            if (c->early || s.g + 1 >= c->bmin)
                add(out, &n, CLOSURE_CAP, (ls_audit_seq_state){.pos = (uint8_t)c->b1, .fed = 0, .g = s.g});
        } else if (s.pos < c->n && (c->stat[s.pos] != MUST || c->relaxed)) {
            add(out, &n, CLOSURE_CAP, after(c, s, false));
        }
    }
    return n;
}

static bool takes(const gram *c, ls_audit_seq_state s, int p) {
    return s.pos < c->n && c->stat[s.pos] != NEVER && c->p->seq[s.pos].phase_ix == p;
}

/* Whether phase p can come next from the states of cl[0..n) (a closure). */
static bool can_take(const gram *c, const ls_audit_seq_state *cl, size_t n, int p) {
    for (size_t i = 0; i < n; i++)
        if (takes(c, cl[i], p)) return true;
    return false;
}

/* The phases that can come next (bits), and those that must (*must). */
static uint32_t expected(const gram *c, const ls_audit_seq_state *cl, size_t n, uint32_t *must) {
    uint32_t e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pos = cl[i].pos;
        if (pos >= c->n || c->stat[pos] == NEVER) continue;
        int ph = c->p->seq[pos].phase_ix;
        if (ph < 0 || ph >= LS_AUDIT_NPHASE) continue;
        e |= 1u << ph;
        if (c->stat[pos] == MUST) m |= 1u << ph;
    }
    if (must) *must = m;
    return e;
}

static bool accepts(const gram *c, const ls_audit_seq_state *cl, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (cl[i].pos == c->n) return true;
    return false;
}

/* ---- per step --------------------------------------------------------------- */

static int when_status(unsigned when, bool sft, bool frozen, int probed) {
    int s = MUST;
    if ((when & LS_AUDIT_WHEN_SFT) && !sft) s = NEVER;
    if ((when & LS_AUDIT_WHEN_NOT_SFT) && sft) s = NEVER;
    if ((when & LS_AUDIT_WHEN_FROZEN) && !frozen) s = NEVER;
    if ((when & LS_AUDIT_WHEN_NOT_FROZEN) && frozen) s = NEVER;
    if (when & LS_AUDIT_WHEN_PROBED) s = lower(s, probed);
    return s;
}

static void begin_step(const ls_audit_run *run, ls_audit_seq *q, int64_t step) {
    const ls_audit_seq_plan *pl = &run->seq_plan;
    const ls_audit_profile *p = &run->profile;
    int64_t i = step - run->first_step, K = pl->probe_every;
    int probed = K < 0 ? MAY : K > 0 && i >= 0 && i % K == 0 ? MUST : NEVER;
    for (int h = 0; h < 4; h++) {
        for (size_t k = 0; k < p->n_seq; k++)
            q->stat[h][k] = (uint8_t)lower(pl->base[k], when_status(p->seq[k].when, h & 1, h & 2, probed));
        q->st[h][0] = (ls_audit_seq_state){.pos = 0, .fed = 0, .g = 0};
        q->n_st[h] = 1;
        q->dead[h] = false;
        memset(&q->rej[h], 0, sizeof q->rej[h]);
    }
    q->step = step;
    q->ind_bad = false;
    memset(q->begun, 0, sizeof q->begun);
    q->grp = 0;
    q->last_phase = -1;
    q->last_seq = -1;
}

static void push(ls_audit_seq *q, const ls_audit_seq_fault *f) {
    q->n_bad++;
    if (q->n_first < LS_AUDIT_SEQ_FIRST) q->first[q->n_first++] = *f;
}

/* A fault whatever the step's kind: the step's first is kept until the step
 * is judged; one of another step is kept at once. */
static void fault_any(ls_audit_seq *q, const ls_audit_seq_fault *f) {
    if (f->step != q->step) push(q, f);
    else if (!q->ind_bad) {
        q->ind = *f;
        q->ind_bad = true;
    }
}

static ls_audit_step_window *window_find(ls_audit_rank *r, int64_t step) {
    for (int i = 0; i < 2; i++)
        if (r->win[i].step == step) return &r->win[i];
    return NULL;
}

/* Phase p (seq) against hypothesis h: its states advanced, or its rejection. */
static void advance(const ls_audit_run *run, ls_audit_seq *q, int h, int p, int64_t seq) {
    if (q->dead[h]) return;
    gram c = gram_of(run, q->stat[h], false, false, true);
    ls_audit_seq_state cl[CLOSURE_CAP], nx[LS_AUDIT_SEQ_STATES];
    size_t n = closure(&c, q->st[h], q->n_st[h], cl), m = 0;
    for (size_t i = 0; i < n; i++)
        if (takes(&c, cl[i], p)) add(nx, &m, LS_AUDIT_SEQ_STATES, after(&c, cl[i], true));
    if (m > 0) {
        memcpy(q->st[h], nx, m * sizeof *nx);
        q->n_st[h] = (uint8_t)m;
        return;
    }
    /* rejected: say how */
    ls_audit_seq_fault *f = &q->rej[h];
    memset(f, 0, sizeof *f);
    f->step = q->step;
    f->seq = seq;
    f->seq2 = -1;
    f->phase = (uint8_t)p;
    f->member = f->layer = -1;
    uint32_t must = 0;
    uint32_t exp = expected(&c, cl, n, &must);
    /* reachable by passing over required items (before them), then also by leaving the block before the
       step's B groups (too few groups), then by beginning another group (before its phases) */
    gram r1 = gram_of(run, q->stat[h], true, false, false), r1e = gram_of(run, q->stat[h], true, true, false),
         r2 = gram_of(run, q->stat[h], true, true, true);
    ls_audit_seq_state rl[CLOSURE_CAP];
    size_t nr = closure(&r1, q->st[h], q->n_st[h], rl);
    if (can_take(&r1, rl, nr, p)) {
        f->kind = F_BEFORE;
        f->expect = must ? must : exp;
    } else if ((nr = closure(&r1e, q->st[h], q->n_st[h], rl)) > 0 && can_take(&r1e, rl, nr, p)) {
        f->kind = F_GROUPS_SHORT;
        f->expect = must;
        f->a = (uint32_t)q->grp + 1;
        f->b = (uint32_t)run->seq_plan.b_min;
    } else if (p < LS_AUDIT_NPHASE && q->begun[p] > 0) {
        f->kind = F_AGAIN;
        f->a = q->begun[p] + 1u;
        f->seq2 = q->begun_seq[p];
        f->b = run->seq_plan.b_max != 1 ? (uint32_t)q->grp + 1 : 0; /* the prompt group, 1-based (0: one a step) */
    } else if ((nr = closure(&r2, q->st[h], q->n_st[h], rl)) > 0 && can_take(&r2, rl, nr, p)) {
        f->kind = F_BEFORE;
        f->expect = must ? must : exp;
    } else {
        f->kind = F_NOT_HERE;
        f->expect = exp;
        f->a = accepts(&c, cl, n);
    }
    q->dead[h] = true;
}

/* The prompt group of the phase just consumed, as the likeliest hypothesis
 * alive sees it (the step's prefix_frozen mark is known from its first
 * event; an SFT step only at its end: not SFT first). */
static uint16_t group_now(const ls_audit_run *run, const ls_audit_seq *q, const ls_audit_step *sf) {
    int pref = sf && sf->prefix_frozen ? 2 : 0;
    const int order[4] = {pref, pref | 1, pref ^ 2, (pref ^ 2) | 1};
    const ls_audit_profile *p = &run->profile;
    for (int k = 0; k < 4; k++) {
        int h = order[k];
        if (q->dead[h]) continue;
        uint16_t g = 0xffff;
        for (size_t i = 0; i < q->n_st[h]; i++) { /* the state after the item consumed */
            ls_audit_seq_state s = q->st[h][i];
            bool blk = p->seq_block0 < p->seq_block1 &&
                       ((s.pos > p->seq_block0 && s.pos <= p->seq_block1 - 1) || s.pos == p->n_seq + 1);
            if (blk && s.g < g) g = s.g;
        }
        return g == 0xffff ? 0 : g;
    }
    return q->grp;
}

/* Judges step q->step: the order under the hypothesis its facts name, and
 * (complete: a later step began, or the trace ended cleanly) that it ended
 * where the grammar may end; nxt / nxt_seq: the phase that came next (-1). */
static void judge_step(ls_audit_run *run, ls_audit_rank *r, bool complete, int nxt, int64_t nxt_seq) {
    ls_audit_seq *q = &r->seq;
    const ls_audit_step *sf = ls_audit_step_of(r, q->step);
    int h = (sf && sf->sft ? 1 : 0) | (sf && sf->prefix_frozen ? 2 : 0);
    ls_audit_seq_fault f = {0};
    bool have = false;
    if (q->dead[h]) {
        f = q->rej[h];
        have = true;
    } else if (complete) {
        gram c = gram_of(run, q->stat[h], false, false, true);
        ls_audit_seq_state cl[CLOSURE_CAP];
        size_t n = closure(&c, q->st[h], q->n_st[h], cl);
        if (!accepts(&c, cl, n)) {
            uint32_t must = 0, exp = expected(&c, cl, n, &must);
            memset(&f, 0, sizeof f);
            f.kind = F_INCOMPLETE;
            f.step = q->step;
            f.seq = q->last_seq;
            f.phase = q->last_phase >= 0 ? (uint8_t)q->last_phase : NONE_PHASE;
            f.expect = must ? must : exp;
            f.phase2 = nxt >= 0 ? (uint8_t)nxt : NONE_PHASE;
            f.seq2 = nxt_seq;
            f.member = f.layer = -1;
            uint32_t g = 0xffff; /* the prompt group the first missing phase belongs to */
            for (size_t i = 0; i < n; i++)
                if (cl[i].pos < c.n && c.stat[cl[i].pos] == MUST && in_block(&c, cl[i].pos) && cl[i].g < g) g = cl[i].g;
            f.a = (g == 0xffff ? (uint32_t)q->grp : g) + 1;
            f.b = (uint32_t)run->seq_plan.b_min;
            have = true;
        }
    }
    if (q->ind_bad && (!have || q->ind.seq < f.seq)) {
        f = q->ind;
        have = true;
    }
    run->seq_plan.steps_checked++;
    if (!have) return;
    push(q, &f);
    ls_audit_step_window *w = window_find(r, q->step);
    if (w != NULL) w->sq.bad = true;
}

static void count_occurrence(ls_audit_rank *r, int64_t step, int p, uint16_t g) {
    ls_audit_step_window *w = ls_audit_steps_window(r, step);
    if (w == NULL || p < 0 || p >= LS_AUDIT_NPHASE) return;
    w->sq.occ[p]++;
    if (g >= w->sq.n_grp) {
        size_t n = (size_t)g + 1;
        uint16_t *o = realloc(w->sq.occ_grp, n * LS_AUDIT_NPHASE * sizeof *o);
        if (o == NULL) return; /* uncounted: the group's keys read as in no occurrence */
        memset(o + w->sq.n_grp * LS_AUDIT_NPHASE, 0, (n - w->sq.n_grp) * LS_AUDIT_NPHASE * sizeof *o);
        w->sq.occ_grp = o;
        w->sq.n_grp = n;
    }
    uint16_t *c = &w->sq.occ_grp[(size_t)g * LS_AUDIT_NPHASE + (size_t)p];
    if (*c < 0xffff) (*c)++;
}

void ls_audit_seq_phase(ls_audit_run *run, ls_audit_rank *r, int64_t step, int p, bool begin, int64_t seq) {
    ls_audit_seq *q = &r->seq;
    if (!q->ready) {
        plan_compile(run);
        if (run->seq_plan.state != 1) {
            q->skip_step = step;
            return;
        }
        if (step <= q->skip_step) return; /* a step begun before its profile was known */
        q->ready = true;
        q->from_step = step;
    }
    if (step <= q->skip_step) return;
    if (begin) resolve_items(run); /* a name seen first now (a v1 run's probe) */
    ls_audit_seq_fault f = {.step = step, .seq = seq, .seq2 = -1, .member = -1, .layer = -1, .phase = (uint8_t)p};
    if (!begin) {
        if (q->open_phase < 0) {
            f.kind = F_END_UNOPENED;
            fault_any(q, &f);
        } else if (q->open_phase != p || q->open_step != step) {
            f.kind = F_END_OTHER;
            f.phase2 = (uint8_t)q->open_phase;
            f.seq2 = q->open_seq;
            fault_any(q, &f);
        } else if (q->passes == LS_AUDIT_PASSES_SEGMENTS &&
                   (uint64_t)q->inst_events != (uint64_t)q->inst_keys * q->inst_max) {
            f = q->inst_top;
            f.kind = F_UNEVEN;
            f.seq2 = q->open_seq;
            f.a = q->inst_events;
            f.b = q->inst_keys;
            fault_any(q, &f);
        }
        q->open_phase = -1;
        return;
    }
    q->matched++;
    if (q->open_phase >= 0) {
        f.kind = F_NEST;
        f.phase2 = (uint8_t)q->open_phase;
        f.seq2 = q->open_seq;
        f.a = (uint32_t)(q->open_step >= 0 && q->open_step < UINT32_MAX ? q->open_step : 0);
        fault_any(q, &f);
        q->open_phase = -1;
    }
    if (q->step >= 0 && step < q->step) { /* an earlier step's phase after a later one began */
        f.kind = F_STEP_BACK;
        f.a = (uint32_t)(q->step < UINT32_MAX ? q->step : UINT32_MAX);
        push(q, &f);
        q->open_phase = p; /* open (its end and layer events match it), outside the grammar */
        q->open_step = step;
        q->open_seq = seq;
        if (++q->inst == 0) q->inst = 1;
        q->passes = PASSES_UNCOUNTED;
        q->inst_events = q->inst_keys = q->inst_max = 0;
        return;
    }
    if (step != q->step) {
        if (q->step >= 0) judge_step(run, r, true, p, seq);
        begin_step(run, q, step);
    }
    for (int h = 0; h < 4; h++) advance(run, q, h, p, seq);
    uint16_t g = group_now(run, q, ls_audit_step_of(r, step));
    if (g != q->grp) memset(q->begun, 0, sizeof q->begun); /* counted per prompt group */
    q->grp = g;
    if (p >= 0 && p < LS_AUDIT_NPHASE) {
        if (q->begun[p] < 0xffff) q->begun[p]++;
        q->begun_seq[p] = seq;
    }
    q->last_phase = p;
    q->last_seq = seq;
    q->open_phase = p;
    q->open_step = step;
    q->open_seq = seq;
    if (++q->inst == 0) q->inst = 1; /* 0 means none */
    q->passes = p >= 0 && p < LS_AUDIT_NPHASE ? run->seq_plan.passes[p] : PASSES_UNCOUNTED;
    q->inst_events = q->inst_keys = q->inst_max = 0;
    count_occurrence(r, step, p, g);
}

void ls_audit_seq_optimizer(ls_audit_run *run, ls_audit_rank *r, int64_t step, int64_t seq) {
    ls_audit_seq *q = &r->seq;
    uint32_t want = run->seq_plan.opt_phases;
    if (!q->ready || step <= q->skip_step || want == 0) return;
    if (q->open_phase >= 0 && q->open_phase < LS_AUDIT_NPHASE && (want & (1u << q->open_phase)) &&
        q->open_step == step)
        return;
    ls_audit_seq_fault f = {.kind = F_OPT_OUTSIDE, .step = step, .seq = seq,
                            .seq2 = q->open_phase >= 0 ? q->open_seq : -1, .member = -1, .layer = -1, .expect = want,
                            .phase2 = q->open_phase >= 0 ? (uint8_t)q->open_phase : NONE_PHASE};
    fault_any(q, &f);
}

void ls_audit_seq_layer(ls_audit_rank *r, ls_audit_step_window *w, ls_audit_layer_key *k, int64_t step, int phase,
                        int64_t member, int64_t layer, int dir, int64_t seq) {
    ls_audit_seq *q = &r->seq;
    if (!q->ready || step <= q->skip_step) return;
    if (q->open_phase != phase || q->open_step != step) {
        ls_audit_seq_fault f = {.kind = F_LAYER_OUTSIDE, .step = step, .seq = seq, .member = member, .layer = layer,
                                .dir = (uint8_t)dir, .phase = (uint8_t)phase,
                                .phase2 = q->open_phase >= 0 ? (uint8_t)q->open_phase : NONE_PHASE,
                                .seq2 = q->open_phase >= 0 ? q->open_seq : -1};
        fault_any(q, &f);
        return; /* in no occurrence: not counted */
    }
    if (k == NULL) return;
    ls_audit_seq_key *x = &k->sq;
    q->inst_events++;
    if (x->inst != q->inst) {
        if (x->inst == 0) { /* a new key */
            x->min_hits = 0xffff;
            x->max_hits = 0;
            x->n_inst = 0;
            x->rep_a = x->rep_b = -1;
            x->grp = q->grp;
        } else {
            if (x->hits < x->min_hits) x->min_hits = x->hits;
            if (x->hits > x->max_hits) x->max_hits = x->hits;
            if (member >= 0 && x->grp != q->grp && w != NULL && !w->sq.grp_bad) {
                w->sq.grp_bad = true;
                w->sq.grp_fault = (ls_audit_seq_fault){.kind = F_GROUPS, .step = step, .seq = seq,
                                                       .seq2 = x->inst_seq, .member = member, .layer = layer,
                                                       .dir = (uint8_t)dir, .phase = (uint8_t)phase,
                                                       .a = q->grp, .b = x->grp};
            }
        }
        x->inst = q->inst;
        x->hits = 1;
        x->inst_seq = seq;
        if (x->n_inst < 0xffff) x->n_inst++;
        q->inst_keys++;
    } else {
        if (x->hits < 0xffff) x->hits++;
        if (x->rep_a < 0) {
            x->rep_a = x->inst_seq;
            x->rep_b = seq;
        }
    }
    if (x->hits > q->inst_max) {
        q->inst_max = x->hits;
        q->inst_top = (ls_audit_seq_fault){.step = step, .seq = seq, .member = member, .layer = layer,
                                           .dir = (uint8_t)dir, .phase = (uint8_t)phase};
    }
}

/* ---- a step's layer keys, when its window closes --------------------------- */

void ls_audit_seq_init(ls_audit_rank *r) {
    memset(&r->seq, 0, sizeof r->seq);
    r->seq.step = r->seq.skip_step = r->seq.from_step = -1;
    r->seq.open_phase = r->seq.last_phase = -1;
    r->seq.open_step = r->seq.open_seq = r->seq.last_seq = -1;
}

void ls_audit_seq_window_free(ls_audit_step_window *w) {
    free(w->sq.occ_grp);
    memset(&w->sq, 0, sizeof w->sq);
}

ls_status ls_audit_seq_close(const ls_audit_run *run, ls_audit_rank *r, int64_t s, ls_audit_step_window *w) {
    ls_audit_seq *q = &r->seq;
    if (w == NULL) return LS_OK;
    if (!q->ready || s <= q->skip_step || w->sq.bad || run->seq_plan.state != 1) {
        ls_audit_seq_window_free(w);
        return LS_OK;
    }
    const ls_audit_seq_plan *pl = &run->seq_plan;
    const ls_audit_step *sf = ls_audit_step_of(r, s);
    bool sft = sf != NULL && sf->sft;
    ls_audit_seq_fault first = {0};
    uint64_t bad = 0;
    if (w->sq.grp_bad) {
        first = w->sq.grp_fault;
        bad++;
    }
    for (size_t i = 0; i < w->lk_cap; i++) {
        ls_audit_layer_key *k = &w->lk[i];
        ls_audit_seq_key *x = &k->sq;
        if (!k->used || x->inst == 0) continue; /* a key counted only outside its phase */
        int pass = k->phase < LS_AUDIT_NPHASE ? pl->passes[k->phase] : (int)PASSES_UNCOUNTED;
        if (pass == (int)PASSES_UNCOUNTED) continue;
        q->matched++;
        uint16_t lo = x->hits < x->min_hits ? x->hits : x->min_hits, hi = x->hits > x->max_hits ? x->hits : x->max_hits;
        uint32_t exp = 0;
        if (k->phase < LS_AUDIT_NPHASE)
            exp = k->member < 0 ? w->sq.occ[k->phase]
                  : x->grp < w->sq.n_grp ? w->sq.occ_grp[(size_t)x->grp * LS_AUDIT_NPHASE + k->phase] : 0;
        ls_audit_seq_fault f = {.step = s, .member = k->member, .layer = k->layer, .dir = k->dir,
                                .phase = k->phase, .seq2 = -1};
        uint32_t want = pass == LS_AUDIT_PASSES_SFT_BRANCHES && sft ? (pl->group > 0 ? (uint32_t)pl->group : 0) : 1;
        if (pass == LS_AUDIT_PASSES_SEGMENTS) {
            f.kind = 0; /* judged per occurrence, at its phase_end */
        } else if (want > 0 && hi > want) {
            f.kind = want == 1 ? F_DUP : F_PASSES;
            f.a = hi;
            f.b = want;
            f.seq = x->rep_b;
            f.seq2 = x->rep_a;
        } else if (want > 0 ? lo < want : lo != hi) {
            f.kind = F_PASSES;
            f.a = want > 0 ? lo : hi;
            f.b = want;
            f.seq = k->first_seq;
        }
        if (f.kind == 0 && x->n_inst != exp) {
            f.kind = F_INSTANCES;
            f.a = x->n_inst;
            f.b = exp;
            f.seq = k->first_seq;
            f.seq2 = k->member < 0 ? 0 : 1; /* 1: the member's prompt group */
        }
        if (f.kind == 0) continue;
        if (bad++ == 0 || f.seq < first.seq) first = f;
    }
    if (bad > 0) {
        push(q, &first);
        q->n_bad += bad - 1;
    }
    ls_audit_seq_window_free(w);
    return LS_OK;
}

void ls_audit_seq_finish(ls_audit_run *run, ls_audit_rank *r) {
    ls_audit_seq *q = &r->seq;
    if (!q->ready || q->step < 0) return;
    /* a trace cut short or stopped by an error: its last step's end is rank.complete's and rank.no_error's */
    bool clean = r->rank_complete && r->n_errors == 0 && r->report.end == LS_TRACE_END_CLEAN;
    if (clean && q->open_phase >= 0) {
        ls_audit_seq_fault f = {.kind = F_UNENDED, .step = q->open_step, .seq = q->open_seq, .seq2 = -1,
                                .member = -1, .layer = -1, .phase = (uint8_t)q->open_phase};
        fault_any(q, &f);
    }
    judge_step(run, r, clean, -1, -1);
    q->step = -1;
}

/* ---- the rule ------------------------------------------------------------------- */

static const char *phase_of(const ls_audit_run *run, unsigned ph) {
    return ph == NONE_PHASE ? "none" : ls_audit_phase_name(run, (int)ph);
}

/* The phases of mask, "a", "a or b", "a, b or c". */
static void phases_text(const ls_audit_run *run, uint32_t mask, char *buf, size_t cap) {
    size_t n = 0, total = 0;
    for (int p = 0; p < LS_AUDIT_NPHASE; p++) total += (mask >> p) & 1u;
    buf[0] = 0;
    for (int p = 0; p < LS_AUDIT_NPHASE; p++) {
        if (!((mask >> p) & 1u)) continue;
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", n == 0 ? "" : n + 1 == total ? " or " : ", ", phase_of(run, (unsigned)p));
        n++;
    }
    if (n == 0) snprintf(buf, cap, "nothing");
}

static const char *times(uint32_t a, char *buf, size_t cap) {
    if (a == 2) return "twice";
    snprintf(buf, cap, "%u times", (unsigned)a);
    return buf;
}

static void fault_text(const ls_audit_run *run, const ls_audit_seq_fault *f, char *out, size_t cap) {
    char ex[160], key[160], t[32], grp[64] = "";
    phases_text(run, f->expect, ex, sizeof ex);
    const char *ph = phase_of(run, f->phase), *ph2 = phase_of(run, f->phase2);
    snprintf(key, sizeof key, "layer_end %s member %lld layer %lld %s", ph, (long long)f->member, (long long)f->layer,
             f->dir == LS_TRACE_DIR_FWD ? "fwd" : "bwd");
    long long s = (long long)f->step, seq = (long long)f->seq, seq2 = (long long)f->seq2;
    switch (f->kind) {
    case F_BEFORE:
        snprintf(out, cap, "step %lld: phase %s (seq %lld) before %s", s, ph, seq, ex);
        break;
    case F_GROUPS_SHORT:
        snprintf(out, cap, "step %lld: phase %s (seq %lld) before %s: after %u of the step's %u prompt groups", s, ph,
                 seq, ex, (unsigned)f->a, (unsigned)f->b);
        break;
    case F_AGAIN:
        if (f->b > 0) snprintf(grp, sizeof grp, " in prompt group %u", (unsigned)f->b - 1);
        snprintf(out, cap, "step %lld: %s begun %s%s (seq %lld, seq %lld)", s, ph, times(f->a, t, sizeof t), grp, seq2,
                 seq);
        break;
    case F_NOT_HERE:
        snprintf(out, cap, "step %lld: phase %s (seq %lld) where %s%s was due", s, ph, seq, ex,
                 f->a ? " or the step's end" : "");
        break;
    case F_INCOMPLETE:
        if (f->b > 1) snprintf(grp, sizeof grp, " (in prompt group %u of the step's %u)", (unsigned)f->a - 1,
                               (unsigned)f->b);
        if (f->seq2 >= 0)
            snprintf(out, cap, "step %lld: ended without %s%s after %s (seq %lld); next: phase %s (seq %lld)", s, ex,
                     grp, ph, seq, ph2, seq2);
        else
            snprintf(out, cap, "step %lld: ended without %s%s after %s (seq %lld), at the end of the trace", s, ex, grp,
                     ph, seq);
        break;
    case F_NEST:
        snprintf(out, cap, "step %lld: phase %s (seq %lld) begun inside phase %s of step %u (seq %lld)", s, ph, seq,
                 ph2, (unsigned)f->a, seq2);
        break;
    case F_END_UNOPENED:
        snprintf(out, cap, "step %lld: phase_end %s (seq %lld) without its phase_begin", s, ph, seq);
        break;
    case F_END_OTHER:
        snprintf(out, cap, "step %lld: phase_end %s (seq %lld) while phase %s (seq %lld) is open", s, ph, seq, ph2,
                 seq2);
        break;
    case F_UNENDED:
        snprintf(out, cap, "step %lld: phase %s (seq %lld) never ended", s, ph, seq);
        break;
    case F_LAYER_OUTSIDE:
        if (f->phase2 == NONE_PHASE)
            snprintf(out, cap, "step %lld: %s (seq %lld) outside its phase (no phase open)", s, key, seq);
        else
            snprintf(out, cap, "step %lld: %s (seq %lld) outside its phase (open: %s, seq %lld)", s, key, seq, ph2,
                     seq2);
        break;
    case F_OPT_OUTSIDE:
        snprintf(out, cap, "step %lld: optimizer_step (seq %lld) outside phase %s (open: %s)", s, seq, ex, ph2);
        break;
    case F_STEP_BACK:
        snprintf(out, cap, "step %lld: phase %s (seq %lld) after step %u began", s, ph, seq, (unsigned)f->a);
        break;
    case F_UNEVEN:
        snprintf(out, cap, "step %lld: %s (seq %lld) shows its layer events unevenly: %u over %u layer keys (member "
                 "%lld layer %lld %s most often, up to seq %lld)", s, ph, seq2, (unsigned)f->a, (unsigned)f->b,
                 (long long)f->member, (long long)f->layer, f->dir == LS_TRACE_DIR_FWD ? "fwd" : "bwd", seq);
        break;
    case F_DUP:
        snprintf(out, cap, "step %lld: %s %s in one %s (seq %lld, seq %lld)", s, key, times(f->a, t, sizeof t), ph,
                 seq2, seq);
        break;
    case F_PASSES:
        if (f->b > 0)
            snprintf(out, cap, "step %lld: %s %u times in one %s, %u expected (an SFT step: one per answer branch) "
                     "(seq %lld)", s, key, (unsigned)f->a, ph, (unsigned)f->b, seq);
        else
            snprintf(out, cap, "step %lld: %s %u times in one %s, other times in another (seq %lld)", s, key,
                     (unsigned)f->a, ph, seq);
        break;
    case F_INSTANCES:
        snprintf(out, cap, "step %lld: %s in %u of %s %u %s phase(s) (first seq %lld)", s, key, (unsigned)f->a,
                 f->seq2 ? "its prompt group's" : "the step's", (unsigned)f->b, ph, seq);
        break;
    case F_GROUPS:
        snprintf(out, cap, "step %lld: %s (seq %lld) in prompt group %u, the member's events in group %u (seq %lld)",
                 s, key, seq, (unsigned)f->a, (unsigned)f->b, seq2);
        break;
    default:
        snprintf(out, cap, "step %lld: seq %lld out of place", s, seq);
        break;
    }
}

ls_status ls_audit_rules_sequence(ls_audit_run *run) {
    ls_audit_rule *rl = ls_audit_rule_add(run, "steps.sequence", 1,
                                          "every step's phases in its profile's order (sequence), none inside another, "
                                          "each occurrence and layer event as often as the grammar says",
                                          true);
    if (rl == NULL) return LS_ERR_NOMEM;
    const ls_audit_profile *p = ls_audit_profile_of(run);
    if (p == NULL) {
        ls_audit_rule_fail(rl, -1, ".", -1, "no profile: %s", run->profile_err);
        ls_audit_rule_close(rl);
        return LS_OK;
    }
    int64_t from = -1;
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        const ls_audit_seq *q = &r->seq;
        if (!r->trace_present) {
            ls_audit_rule_fail(rl, i, r->trace_file, -1, "rank %u: no trace, no step's sequence proven", (unsigned)i);
            continue;
        }
        rl->matched += q->matched;
        if (q->ready && q->from_step > run->first_step && (from < 0 || q->from_step > from)) from = q->from_step;
        for (size_t k = 0; k < q->n_first; k++) {
            char text[320];
            fault_text(run, &q->first[k], text, sizeof text);
            ls_audit_rule_fail(rl, i, r->trace_file, q->first[k].seq, "%s", text);
        }
        if (q->n_bad > q->n_first)
            ls_audit_rule_fail(rl, i, r->trace_file, -1, "%llu faults of sequence in all on rank %u",
                               (unsigned long long)q->n_bad, (unsigned)i);
    }
    ls_audit_rule_close(rl);
    if (rl->pass) {
        char b[64] = "";
        if (run->seq_plan.b_max != 1)
            snprintf(b, sizeof b, ", %lld prompt groups a step", (long long)run->seq_plan.b_min);
        snprintf(rl->message, sizeof rl->message,
                 "%lld rank-step(s) over %u rank(s) in the order of profile %s's sequence%s; %llu phases and layer "
                 "keys checked",
                 (long long)run->seq_plan.steps_checked, (unsigned)run->world, p->name, b,
                 (unsigned long long)rl->matched);
    }
    if (from >= 0) {
        size_t l = strlen(rl->message);
        snprintf(rl->message + l, sizeof rl->message - l,
                 "; steps before %lld not matched (the run names no family: its profile was chosen by its traces' "
                 "layer kinds)",
                 (long long)from);
    }
    return LS_OK;
}
