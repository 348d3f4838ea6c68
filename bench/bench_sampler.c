/* bench_sampler.c - nucleus sampling at real vocabulary sizes, float32.
 *
 * Table 1: tokens/s of the sampler alone, the old algorithm (insertion sort
 * of the whole vocabulary, O(V^2); copied here as it was in trainer/step/step.c)
 * against trainer/step/sampler.h, at V = 256, 32,000 and 151,936, on three row
 * shapes: "gauss" (logits ~ N(0,1): nearly flat, the nucleus at 0.95 holds
 * most of the vocabulary, the worst case; a random-init model's rows look
 * like this), "zipf" (p ~ 1/rank^1.1 over a shuffled vocabulary: a heavy
 * tail) and "peaked" (logits ~ N(0, 4^2): a few hundred tokens carry the
 * mass, as in a trained model's rows), top_p 0.95 and 1.
 * The old algorithm runs for at least one draw and at most --old-seconds.
 * Every timed draw of both is also compared (same rng seed): a mismatch is
 * reported and makes the exit status 1.
 *
 * Table 2: tokens/s of rollout decode, ls_rollout_member_f32 with
 * configs/hybrid-tiny.json (random init) and its vocab overridden to 256,
 * 32,000 and 151,936, from a captured prompt of --prompt tokens; and the same
 * decode loop with the old sampler (a few tokens), checked to produce the
 * same tokens.
 *
 *   bench_sampler [--config FILE] [--old-seconds S] [--prompt N] [--tokens N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/logprob.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/step/sampler.h"
#include "trainer/step/step.h"
#include "trainer/families/hybrid/hybrid_family.h"
#include "trainer/families/families.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The sampler of trainer/step/step.c before this module, unchanged. */
static int32_t old_sample_row(const float *logp, size_t V, double top_p, ls_rng *r, size_t *order) {
    for (size_t i = 0; i < V; i++) order[i] = i;
    for (size_t i = 1; i < V; i++) {
        size_t x = order[i], j = i;
        while (j > 0 && logp[order[j - 1]] < logp[x]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    double mass = 0;
    size_t n = 0;
    while (n < V && (n == 0 || mass < top_p)) mass += exp((double)logp[order[n++]]);
    double u = ls_rng_uniform(r) * mass, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += exp((double)logp[order[i]]);
        if (u < acc) return (int32_t)order[i];
    }
    return (int32_t)order[n - 1];
}

static const char *const shape_name[3] = {"gauss", "zipf", "peaked"};

static void make_row(float *lp, size_t V, int shape, uint64_t seed) {
    ls_rng g;
    ls_rng_seed(&g, seed);
    double *z = malloc(V * sizeof *z), m = -INFINITY, s = 0;
    if (!z) exit(1);
    for (size_t i = 0; i < V; i++)
        z[i] = shape == 1 ? -1.1 * log((double)(i + 1)) : (shape == 2 ? 4 : 1) * ls_rng_normal(&g);
    for (size_t i = V; shape == 1 && i > 1; i--) { /* shuffle the ranks over the ids */
        size_t j = (size_t)ls_rng_below(&g, i);
        double t = z[i - 1];
        z[i - 1] = z[j];
        z[j] = t;
    }
    for (size_t i = 0; i < V; i++) m = fmax(m, z[i]);
    for (size_t i = 0; i < V; i++) s += exp(z[i] - m);
    for (size_t i = 0; i < V; i++) lp[i] = (float)(z[i] - m - log(s));
    free(z);
}

static int mismatches;

/* tokens/s of the new sampler (>= min_s seconds) and of the old one (at
 * most old_s seconds, >= 1 draw), comparing tokens draw by draw */
static void bench_alone(size_t V, int shape, double top_p, double old_s, double *new_tps, double *old_tps,
                        size_t *old_draws) {
    float *lp = malloc(V * sizeof *lp);
    size_t *order = malloc(V * sizeof *order);
    int32_t *tok = malloc(4096 * sizeof *tok);
    ls_sampler_ws ws;
    if (!lp || !order || !tok || ls_sampler_ws_init_f32(&ws, V, LS_MEM_SCORE) != LS_OK) exit(1);
    make_row(lp, V, shape, 7 + V);
    ls_rng r;
    ls_rng_seed(&r, 11);
    size_t n = 0;
    double t0 = now(), dt;
    do {
        for (int k = 0; k < 16; k++, n++) {
            int32_t t = ls_sampler_top_p_f32(lp, V, top_p, &r, &ws);
            if (n < 4096) tok[n] = t;
        }
        dt = now() - t0;
    } while (dt < 0.3);
    *new_tps = (double)n / dt;
    ls_rng_seed(&r, 11);
    size_t m = 0;
    t0 = now();
    do {
        int32_t t = old_sample_row(lp, V, top_p, &r, order);
        if (m < 4096 && t != tok[m]) {
            if (mismatches++ == 0)
                fprintf(stderr, "MISMATCH V=%zu %s top_p=%g draw %zu: old %d, new %d\n", V, shape_name[shape],
                        top_p, m, (int)t, (int)tok[m]);
        }
        m++;
        dt = now() - t0;
    } while (dt < old_s && m < n);
    *old_tps = (double)m / dt;
    *old_draws = m;
    ls_sampler_ws_free_f32(&ws);
    free(lp);
    free(order);
    free(tok);
}

typedef struct {
    double tps, old_tps, sampler_frac;
    size_t old_tokens;
    int same, ok;
} rollout_cell;

/* ls_rollout_member_f32 tokens/s at vocab V; then the same loop with the old sampler, old_tokens tokens. */
static rollout_cell bench_rollout(const char *cfg_path, int V, size_t P, size_t R, size_t old_tokens) {
    rollout_cell out = {0};
    ls_model_config c;
    char err[512];
    if (ls_config_load(&c, cfg_path, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        return out;
    }
    c.vocab = V;
    ls_objective o;
    ls_objective_defaults(&o);
    ls_params *p = NULL;
    ls_task t;
    ls_batch *b = NULL;
    ls_state ps;
    if (ls_config_check(&c, err, sizeof err) != LS_OK || ls_params_init_f32(&p, &c, &o, 1, err, sizeof err) != LS_OK ||
        ls_task_make(&t, P, 8, 1) != LS_OK || ls_batch_alloc(&b, 1) != LS_OK ||
        ls_batch_set_prompt(b, t.prompt, P) != LS_OK ||
        ls_capture_f32(p, b, 64, 0, &ps, NULL, LS_MEM_PROMPT_STATE, NULL, NULL) != LS_OK) {
        fprintf(stderr, "rollout setup at V=%d failed: %s\n", V, err);
        return out;
    }
    int32_t *toks = malloc(R * sizeof *toks), first = b->prompt[P - 1];
    double t0 = now();
    ls_status st = ls_rollout_member_f32(p, &ps, first, R, o.temperature, 0.95, 5, toks, NULL);
    out.tps = (double)R / (now() - t0);
    /* the same decode loop as ls_rollout_member, with the old sampler */
    size_t d = (size_t)c.d_model;
    ls_state sm;
    float *h = malloc(d * sizeof *h), *row = malloc((size_t)V * sizeof *row);
    size_t *order = malloc((size_t)V * sizeof *order);
    if (st == LS_OK && h && row && order && ls_hybrid_state_fork_f32(&sm, &ps, LS_MEM_SCORE) == LS_OK) {
        ls_rng rng;
        ls_rng_seed(&rng, 5);
        int32_t tok = first;
        out.same = 1;
        double ts = 0;
        t0 = now();
        for (size_t i = 0; i < old_tokens && i < R && st == LS_OK; i++) {
            ls_seg_io io = {.tokens = &tok, .T = 1, .pos0 = sm.n_pos, .ctx = &sm, .state_out = &sm, .last_hidden = h};
            st = ls_segment_forward_f32(p, &io);
            ls_logprob_row_f32(row, h, p->lm_head->w, (float)o.temperature, d, (size_t)V);
            double s0 = now();
            tok = old_sample_row(row, (size_t)V, 0.95, &rng, order);
            ts += now() - s0;
            out.same &= tok == toks[i];
            out.old_tokens = i + 1;
        }
        double dt = now() - t0;
        out.old_tps = (double)out.old_tokens / dt;
        out.sampler_frac = ts / dt;
        ls_hybrid_state_free_f32(&sm);
        out.ok = st == LS_OK;
        if (!out.same && mismatches++ == 0) fprintf(stderr, "MISMATCH in rollout at V=%d\n", V);
    }
    free(h);
    free(row);
    free(order);
    free(toks);
    ls_hybrid_state_free_f32(&ps);
    ls_batch_free(b);
    ls_task_free(&t);
    ls_params_free_f32(p);
    return out;
}

int main(int argc, char **argv) {
    const char *cfg = "configs/hybrid-tiny.json";
    double old_s = 3.0;
    size_t P = 256, R = 64;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--config")) cfg = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--old-seconds")) old_s = strtod(argv[++i], NULL);
        else if (i + 1 < argc && !strcmp(argv[i], "--prompt")) P = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(argv[i], "--tokens")) R = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_sampler [--config FILE] [--old-seconds S] [--prompt N] [--tokens N]\n");
            return 2;
        }
    }
    if (P < 64 || R < 1) {
        fprintf(stderr, "bench_sampler: --prompt must be >= 64 and --tokens >= 1\n");
        return 2;
    }
    static const size_t Vs[] = {256, 32000, 151936};
    printf("# bench_sampler: the sampler alone, float32 rows (tokens/s; old: insertion sort, at most %.1f s)\n", old_s);
    printf("%8s %6s %6s %14s %14s %10s %9s\n", "V", "row", "top_p", "old tok/s", "new tok/s", "speedup", "old draws");
    for (size_t v = 0; v < 3; v++)
        for (int shape = 0; shape < 3; shape++)
            for (int q = 0; q < 2; q++) {
                double tp = q ? 1.0 : 0.95, nt, ot;
                size_t od;
                bench_alone(Vs[v], shape, tp, old_s, &nt, &ot, &od);
                printf("%8zu %6s %6.2f %14.1f %14.1f %9.1fx %9zu\n", Vs[v], shape_name[shape], tp, ot, nt,
                       nt / ot, od);
                fflush(stdout);
            }
    printf("\n# rollout decode: ls_rollout_member_f32, %s (random init), vocab overridden, P=%zu, %zu tokens,\n"
           "# top_p 0.95; old = the same loop with the insertion-sort sampler (tokens checked equal)\n",
           cfg, P, R);
    printf("%8s %14s %14s %10s %11s %14s\n", "V", "old tok/s", "new tok/s", "speedup", "old tokens",
           "old sampler %");
    for (size_t v = 0; v < 3; v++) {
        size_t old_tokens = Vs[v] > 100000 ? 2 : Vs[v] > 10000 ? 8 : R;
        rollout_cell c = bench_rollout(cfg, (int)Vs[v], P, R, old_tokens);
        if (!c.ok) {
            printf("%8zu failed\n", Vs[v]);
            mismatches++;
            continue;
        }
        printf("%8zu %14.1f %14.1f %9.1fx %11zu %13.1f%%%s\n", Vs[v], c.old_tps, c.tps, c.tps / c.old_tps,
               c.old_tokens, 100 * c.sampler_frac, c.same ? "" : "  TOKENS DIFFER");
        fflush(stdout);
    }
    return mismatches ? 1 : 0;
}
