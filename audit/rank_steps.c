/* rank_steps.c - the per-rank checks that need a step's layer events and
 * collectives, made step by step while the trace streams, so that the
 * audit's memory does not grow with the trace.
 *
 * A rank holds at most two open steps (ls_audit_step_window): step s is
 * closed when an event of step s + 2 arrives, or when the trace ends.
 * Closing a step checks it and discards its keys, keeping only counts and
 * the first few failures with their evidence:
 *  - rank.layers: the layer_end events of the capture (and, in full mode,
 *    prompt_bwd) phase, and of every member below the step's own group
 *    (1 + its largest score/replay member, g_local) in score and replay;
 *    the members the run requires beyond g_local (the recorded group, or
 *    the largest any rank traced) are all missing there, which
 *    ls_audit_steps_layers_rule counts when the ranks are known;
 *  - collectives.composition / collectives.dkv (world > 1): for every
 *    response attention (and, in full mode, prompt backward) layer entry,
 *    the collectives of the same step, phase and layer.
 * An event of a step already closed (never in a trace the trainer writes)
 * is counted and fails rank.layers: its step was judged without it. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/audit.h"

#include <stdlib.h>
#include <string.h>

#include "receipts/json_util.h"
#include "receipts/trace_event.h"

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
    if (w == NULL) return LS_OK;
    if (w->lk_cap == 0 || (w->lk_used + 1) * 2 > w->lk_cap) {
        if (w->lk_used >= LS_AUDIT_MAX_LAYER_KEYS) {
            ls_audit_layer_key *k = (ls_audit_layer_key *)lk_find(w, phase, member, layer, dir);
            if (k != NULL) k->count++;
            else r->lk_overflow = true;
            return LS_OK;
        }
        ls_status st = lk_grow(w);
        if (st != LS_OK) return st;
    }
    size_t j = lk_hash(phase, member, layer, dir) & (w->lk_cap - 1);
    while (w->lk[j].used) {
        ls_audit_layer_key *k = &w->lk[j];
        if (k->phase == phase && k->member == member && k->layer == layer && k->dir == dir) {
            k->count++;
            return LS_OK;
        }
        j = (j + 1) & (w->lk_cap - 1);
    }
    ls_audit_layer_key *k = &w->lk[j];
    k->used = 1;
    k->phase = (uint8_t)phase;
    k->member = (int32_t)member;
    k->layer = (int32_t)layer;
    k->dir = (uint8_t)dir;
    k->kind = (uint8_t)kind;
    k->count = 1;
    k->first_seq = seq;
    w->lk_used++;
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

typedef struct {
    const ls_audit_step_window *w; /* NULL: every key missing */
    ls_audit_missing *out;
    size_t *n, cap;
    uint64_t left;                 /* missing keys not yet found */
} walk_ctx;

/* false: stop the walk */
static bool visit(walk_ctx *c, int64_t step, int phase, int64_t member, int64_t layer, int dir) {
    if (lk_find(c->w, phase, member, layer, dir) != NULL) return true;
    c->out[(*c->n)++] = (ls_audit_missing){.step = step, .member = member, .layer = layer, .phase = (uint8_t)phase,
                                           .dir = (uint8_t)dir};
    return *c->n < c->cap && --c->left > 0;
}

/* The prompt part a step has: its capture (not in a prefix_frozen step,
 * which reuses an earlier one) and, in full mode, its prompt backward (not
 * in the naive strategy, whose members each run the whole sequence). */
enum { PROMPT_CAPTURE = 1, PROMPT_BWD = 2 };
static unsigned prompt_part(const ls_audit_run *run, bool frozen) {
    if (frozen) return 0;
    return PROMPT_CAPTURE | (run->full_mode && !run->naive ? PROMPT_BWD : 0);
}

/* Walks the expected keys of step: the prompt part (the PROMPT_* bits of
 * prompt), then members m0 .. m1 - 1; records missing ones until c is full
 * or c->left are found. */
static void walk(const ls_audit_run *run, walk_ctx *c, int64_t step, bool sft, unsigned prompt, int64_t m0,
                 int64_t m1) {
    int64_t L = run->n_layers;
    if (*c->n >= c->cap || c->left == 0) return;
    if (prompt & PROMPT_CAPTURE)
        for (int64_t l = -1; l < L; l++)
            if (!visit(c, step, LS_PHASE_CAPTURE, -1, l, LS_TRACE_DIR_FWD)) return;
    if (prompt & PROMPT_BWD)
        for (int64_t l = -1; l < L; l++)
            if (!visit(c, step, LS_PHASE_PROMPT_BWD, -1, l, LS_TRACE_DIR_BWD)) return;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t l = -1; l <= L; l++) {
            if (!sft && !visit(c, step, LS_PHASE_SCORE, m, l, LS_TRACE_DIR_FWD)) return;
            if (!visit(c, step, LS_PHASE_REPLAY, m, l, LS_TRACE_DIR_FWD)) return;
            if (!visit(c, step, LS_PHASE_REPLAY, m, l, LS_TRACE_DIR_BWD)) return;
        }
}

static uint64_t per_member(const ls_audit_run *run, bool sft) { return (uint64_t)(run->n_layers + 2) * (sft ? 2u : 3u); }

static uint64_t prompt_keys(const ls_audit_run *run, unsigned prompt) {
    return (uint64_t)(run->n_layers + 1) * ((prompt & PROMPT_CAPTURE ? 1u : 0u) + (prompt & PROMPT_BWD ? 1u : 0u));
}

static void check_layers(const ls_audit_run *run, ls_audit_rank *r, int64_t s, const ls_audit_step_window *w,
                         int64_t gl, bool sft, bool frozen) {
    int64_t L = run->n_layers;
    unsigned pp = prompt_part(run, frozen);
    uint64_t expected = prompt_keys(run, pp) + (uint64_t)gl * per_member(run, sft), present = 0;
    for (size_t i = 0; w != NULL && i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (!k->used) continue;
        bool prompt = k->member == -1 && k->layer >= -1 && k->layer < L &&
                      (((pp & PROMPT_CAPTURE) && k->phase == LS_PHASE_CAPTURE && k->dir == LS_TRACE_DIR_FWD) ||
                       ((pp & PROMPT_BWD) && k->phase == LS_PHASE_PROMPT_BWD && k->dir == LS_TRACE_DIR_BWD));
        bool member = k->member >= 0 && k->member < gl && k->layer >= -1 && k->layer <= L &&
                      ((!sft && k->phase == LS_PHASE_SCORE && k->dir == LS_TRACE_DIR_FWD) ||
                       k->phase == LS_PHASE_REPLAY);
        present += prompt || member;
    }
    uint64_t missing = expected - present;
    r->ly_missing += missing;
    if (missing == 0 || r->n_ly_first >= 3) return;
    walk_ctx c = {.w = w, .out = r->ly_first, .n = &r->n_ly_first, .cap = 3, .left = missing};
    walk(run, &c, s, sft, pp, 0, gl);
}

/* ---- collectives.composition / .dkv: a step's response layer entries ----- */

typedef struct {
    int64_t layer, first_seq;
    uint64_t count;
    uint8_t phase, dir, attn, mla; /* attn: attention of either family; mla: an mla layer */
} layer_entry;

static int entry_cmp(const void *a, const void *b) {
    const layer_entry *x = a, *y = b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    if (x->dir != y->dir) return x->dir < y->dir ? -1 : 1;
    return (x->attn > y->attn) - (x->attn < y->attn);
}

static int purpose_index(const ls_audit_run *run, const char *name) {
    for (size_t i = 0; i < run->n_purposes; i++)
        if (strcmp(run->purposes[i], name) == 0) return (int)i;
    return -1;
}

static void require(const ls_audit_run *run, ls_audit_req *q, const ls_audit_step_window *w, int64_t s,
                    const layer_entry *e, const char *const *purposes, size_t np, bool per_event) {
    for (size_t p = 0; p < np; p++) {
        q->matched++;
        uint64_t want = per_event ? e->count : 1;
        uint64_t got = cc_get(w, e->phase, e->layer, purpose_index(run, purposes[p]));
        if (got >= want) continue;
        if (q->failed++ < 4)
            q->first[q->n_first++] = (ls_audit_req_fail){.step = s, .layer = e->layer, .first_seq = e->first_seq,
                                                         .got = got, .want = want, .purpose = purposes[p],
                                                         .phase = e->phase, .dir = e->dir, .attn = e->attn};
    }
}

static ls_status check_collectives(const ls_audit_run *run, ls_audit_rank *r, int64_t s,
                                   const ls_audit_step_window *w) {
    static const char *const merge[] = {"lse_max", "lse_sum", "out_sum"};
    /* an mla layer first selects its DSA candidates globally: the ranks' local top-k gathered */
    static const char *const merge_mla[] = {"dsa_topk_gather", "lse_max", "lse_sum", "out_sum"};
    static const char *const back[] = {"dq_sum", "dkv_sum"};
    static const char *const ring[] = {"dkv_ring"};
    static const char *const chain[] = {"state_grad_handoff"};
    if (w->lk_used == 0) return LS_OK;
    layer_entry *e = malloc(w->lk_used * sizeof *e);
    if (e == NULL) return LS_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (!k->used) continue;
        bool attn = k->kind == LS_TRACE_LAYER_ATTN || k->kind == LS_TRACE_LAYER_MLA;
        if (!attn && k->kind != LS_TRACE_LAYER_GDN) continue;
        e[n++] = (layer_entry){.layer = k->layer, .first_seq = k->first_seq, .count = k->count, .phase = k->phase,
                               .dir = k->dir, .attn = attn, .mla = k->kind == LS_TRACE_LAYER_MLA};
    }
    qsort(e, n, sizeof *e, entry_cmp);
    size_t m = 0; /* merge the members of one (phase, layer, dir, attn) */
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && entry_cmp(&e[m - 1], &e[i]) == 0) {
            e[m - 1].count += e[i].count;
            if (e[i].first_seq < e[m - 1].first_seq) e[m - 1].first_seq = e[i].first_seq;
        } else {
            e[m++] = e[i];
        }
    }
    for (size_t i = 0; i < m; i++) {
        const layer_entry *x = &e[i];
        if (x->attn && x->dir == LS_TRACE_DIR_FWD && (x->phase == LS_PHASE_SCORE || x->phase == LS_PHASE_REPLAY)) {
            r->req_cmp.entries++;
            if (x->mla) require(run, &r->req_cmp, w, s, x, merge_mla, 4, true);
            else require(run, &r->req_cmp, w, s, x, merge, 3, true);
        }
        if (x->attn && x->dir == LS_TRACE_DIR_BWD && x->phase == LS_PHASE_REPLAY) {
            r->req_dkv.entries++;
            require(run, &r->req_dkv, w, s, x, back, 2, true);
        }
        if (run->full_mode && x->phase == LS_PHASE_PROMPT_BWD && x->dir == LS_TRACE_DIR_BWD)
            require(run, &r->req_dkv, w, s, x, x->attn ? ring : chain, 1, false);
    }
    free(e);
    return LS_OK;
}

/* ---- closing ------------------------------------------------------------- */

static void window_clear(ls_audit_step_window *w) {
    if (w->lk_used) memset(w->lk, 0, w->lk_cap * sizeof *w->lk);
    if (w->cc_used) memset(w->cc, 0, w->cc_cap * sizeof *w->cc);
    w->lk_used = w->cc_used = 0;
    w->step = -1;
}

static ls_status close_step(const ls_audit_run *run, ls_audit_rank *r, int64_t s) {
    ls_audit_step_window *w = NULL;
    for (int i = 0; i < 2; i++)
        if (r->win[i].step == s) w = &r->win[i];
    ls_audit_step *sf = s >= 0 && (size_t)s < r->steps_cap ? &r->steps[s] : NULL;
    int64_t gl = 0;
    for (size_t i = 0; w != NULL && i < w->lk_cap; i++) {
        const ls_audit_layer_key *k = &w->lk[i];
        if (k->used && (k->phase == LS_PHASE_SCORE || k->phase == LS_PHASE_REPLAY) && k->member + 1 > gl)
            gl = k->member + 1;
    }
    if (sf != NULL) sf->g_local = (int32_t)gl;
    ls_status st = LS_OK;
    if (ls_audit_have_layers(run)) check_layers(run, r, s, w, gl, sf != NULL && sf->sft, sf != NULL && sf->prefix_frozen);
    if (w != NULL && run->world > 1) st = check_collectives(run, r, s, w);
    if (w != NULL) window_clear(w);
    r->steps_closed = s + 1;
    return st;
}

ls_status ls_audit_steps_advance(const ls_audit_run *run, ls_audit_rank *r, int64_t step) {
    ls_status st = LS_OK;
    while (st == LS_OK && r->steps_closed < step - 1) st = close_step(run, r, r->steps_closed);
    return st;
}

ls_status ls_audit_steps_finish(const ls_audit_run *run, ls_audit_rank *r) {
    ls_status st = LS_OK;
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
        memset(&r->win[i], 0, sizeof r->win[i]);
        r->win[i].step = -1;
    }
}

/* ---- rank.layers at rule time -------------------------------------------- */

static void emit_missing(ls_audit_rule *rule, const ls_audit_rank *r, const ls_audit_missing *m) {
    ls_audit_rule_fail(rule, r->rank, r->trace_file, -1,
                       "step %lld %s: no %s layer_end for member %lld, layer %lld (last event seq %lld: %s)",
                       (long long)m->step, ls_audit_phase_name(m->phase), m->dir == LS_TRACE_DIR_FWD ? "fwd" : "bwd",
                       (long long)m->member, (long long)m->layer, (long long)r->last_seq, r->last_ev);
}

uint64_t ls_audit_steps_layers_rule(const ls_audit_run *run, ls_audit_rule *rule, ls_audit_rank *r, int64_t S,
                                    const int64_t *G) {
    ls_audit_steps_close_empty(run, r, S); /* steps the rank never reached: all missing */
    uint64_t missing = r->ly_missing, shown = 0;
    size_t k = 0;
    for (int64_t s = run->first_step; s < S; s++) {
        const ls_audit_step *sf = ls_audit_step_of(r, s);
        bool sft = sf != NULL && sf->sft;
        int64_t gl = sf != NULL ? sf->g_local : 0;
        rule->matched += prompt_keys(run, prompt_part(run, sf != NULL && sf->prefix_frozen)) +
                         (uint64_t)G[s] * per_member(run, sft);
        for (; k < r->n_ly_first && r->ly_first[k].step == s; k++)
            if (shown++ < 3) emit_missing(rule, r, &r->ly_first[k]);
        if (G[s] == 0 && !sft) {
            if (missing++, shown++ < 3)
                ls_audit_rule_fail(rule, r->rank, r->trace_file, -1, "step %lld: no rank traced any response member",
                                   (long long)s);
            continue;
        }
        if (G[s] <= gl) continue;
        uint64_t extra = (uint64_t)(G[s] - gl) * per_member(run, sft);
        missing += extra;
        if (shown >= 3) continue;
        ls_audit_missing tmp[3];
        size_t n = 0;
        walk_ctx c = {.w = NULL, .out = tmp, .n = &n, .cap = (size_t)(3 - shown), .left = extra};
        walk(run, &c, s, sft, 0, gl, G[s]);
        for (size_t i = 0; i < n; i++) emit_missing(rule, r, &tmp[i]);
        shown += n;
    }
    return missing;
}
