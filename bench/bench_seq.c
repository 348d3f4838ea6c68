/* bench_seq.c - throughput of the CPU sequence kernels (float32): causal
 * prompt-style attention (Tq = Tk, one block) and the GDN recurrence, forward
 * and backward, at 1K/4K/16K tokens for the hybrid-tiny and hybrid-small
 * dims (docs/model.md §1.4); then attention blocks as the trainer calls them (a
 * 2048-token capture chunk against one earlier 64-key KV page, and one
 * decode query against a page).  Prints tables; asserts nothing.  Cells
 * predicted to take longer than the per-cell budget (from the cell one size
 * down), or that would push the run past the total budget, are skipped with
 * the reason printed.  Short cells are repeated and averaged. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/gdn.h"

#define CELL_BUDGET_S 15.0 /* skip a cell predicted to take longer */
#define TOTAL_BUDGET_S 50.0 /* ... or to end the run after this */
#define MIN_TIME_S 0.2     /* repeat a short cell until this much time */
#define MAX_REPS 50

static float *rand_buf(size_t n, uint64_t *s, float lo, float hi)
{
    return bench_rand_buf("bench_seq", n, s, lo, hi);
}

typedef struct {
    const char *name;
    size_t H, Hkv, hd;     /* attention */
    size_t Hk, Hv, dk, dv; /* GDN */
} dims;

/* Seconds of one causal attention forward and one backward over a block of
 * Tq queries at positions q_pos0.. and Tk keys at 0.., repeated up to reps
 * times.  The backward runs only when its predicted time pb fits the cell
 * budget and ends before deadline; otherwise *tb = -1. */
static void bench_attn_block(const dims *d, size_t Tq, size_t Tk, int64_t q_pos0, int reps,
                             double pb, double deadline, double *tf, double *tb)
{
    uint64_t s = 1;
    const size_t nq = Tq * d->H * d->hd, nk = Tk * d->Hkv * d->hd;
    float *q = rand_buf(nq, &s, -1.7f, 1.7f), *k = rand_buf(nk, &s, -1.7f, 1.7f);
    float *v = rand_buf(nk, &s, -1, 1), *dO = rand_buf(nq, &s, -1, 1);
    float *o = rand_buf(nq, &s, 0, 0), *lse = rand_buf(Tq * d->H, &s, 0, 0);
    float *dq = rand_buf(nq, &s, 0, 0), *dk = rand_buf(nk, &s, 0, 0), *dv = rand_buf(nk, &s, 0, 0);
    const float tau = 1.0f / sqrtf((float)d->hd);
    int n = 0;
    double t0 = now_s(), t1;
    do {
        ls_attn_block_forward_f32(o, lse, q, k, v, Tq, Tk, d->H, d->Hkv, d->hd, q_pos0, 0, 1,
                                  tau);
        n++;
        t1 = now_s();
    } while (t1 - t0 < MIN_TIME_S && n < reps);
    *tf = (t1 - t0) / n;
    *tb = -1;
    if (pb <= CELL_BUDGET_S && t1 + pb <= deadline) {
        n = 0;
        double t2;
        do {
            ls_attn_block_backward_f32(dq, dk, dv, dO, q, k, v, o, lse, Tq, Tk, d->H, d->Hkv,
                                       d->hd, q_pos0, 0, 1, tau);
            n++;
            t2 = now_s();
        } while (t2 - t1 < MIN_TIME_S && n < reps);
        *tb = (t2 - t1) / n;
    }
    free(q); free(k); free(v); free(dO); free(o); free(lse); free(dq); free(dk); free(dv);
}

/* Prompt style: Tq = Tk = T at the same positions. */
static void bench_attn(const dims *d, size_t T, double pb, double deadline, double *tf,
                       double *tb)
{
    bench_attn_block(d, T, T, 0, MAX_REPS, pb, deadline, tf, tb);
}

typedef void (*gdn_fwd_fn)(float *, float *, const float *, const float *, const float *,
                           const float *, const float *, const float *, size_t, size_t, size_t,
                           size_t, size_t);
typedef void (*gdn_bwd_fn)(float *, float *, float *, float *, float *, float *, const float *,
                           const float *, const float *, const float *, const float *,
                           const float *, const float *, const float *, size_t, size_t, size_t,
                           size_t, size_t, float *);

/* Seconds of one GDN forward (fwd) and one backward (bwd) at T tokens;
 * the backward is skipped (*tb = -1) when skip_bwd. */
static void bench_gdn_with(const dims *d, size_t T, gdn_fwd_fn fwd, gdn_bwd_fn bwd,
                           int skip_bwd, double *tf, double *tb)
{
    uint64_t s = 2;
    const size_t nq = T * d->Hk * d->dk, nv = T * d->Hv * d->dv, ng = T * d->Hv;
    const size_t nS = d->Hv * d->dk * d->dv;
    const float sc = 1.0f / sqrtf((float)d->dk);
    float *q = rand_buf(nq, &s, -sc, sc), *k = rand_buf(nq, &s, -sc, sc);
    float *v = rand_buf(nv, &s, -1, 1), *g = rand_buf(ng, &s, -0.3f, 0);
    float *beta = rand_buf(ng, &s, 0, 1), *dO = rand_buf(nv, &s, -1, 1);
    float *o = rand_buf(nv, &s, 0, 0), *S = rand_buf(nS, &s, 0, 0);
    float *dq = rand_buf(nq, &s, 0, 0), *dk = rand_buf(nq, &s, 0, 0), *dv = rand_buf(nv, &s, 0, 0);
    float *dg = rand_buf(ng, &s, 0, 0), *db = rand_buf(ng, &s, 0, 0);
    const size_t nr = ls_gdn_backward_recurrent_workspace_f32(T, d->Hk, d->Hv, d->dk, d->dv);
    const size_t nc = ls_gdn_backward_chunked_workspace_f32(T, d->Hk, d->Hv, d->dk, d->dv);
    float *ws = rand_buf(nr > nc ? nr : nc, &s, 0, 0);
    int n = 0;
    double t0 = now_s(), t1, t2;
    do {
        fwd(o, S, q, k, v, g, beta, NULL, T, d->Hk, d->Hv, d->dk, d->dv);
        n++;
        t1 = now_s();
    } while (t1 - t0 < MIN_TIME_S && n < MAX_REPS);
    *tf = (t1 - t0) / n;
    *tb = -1;
    if (!skip_bwd) {
        n = 0;
        do {
            bwd(dq, dk, dv, dg, db, NULL, dO, NULL, q, k, v, g, beta, NULL, T, d->Hk, d->Hv,
                d->dk, d->dv, ws);
            n++;
            t2 = now_s();
        } while (t2 - t1 < MIN_TIME_S && n < MAX_REPS);
        *tb = (t2 - t1) / n;
    }
    free(q); free(k); free(v); free(g); free(beta); free(dO); free(o); free(S); free(dq);
    free(dk); free(dv); free(dg); free(db); free(ws);
}

/* Seconds of one GDN forward and one backward at T tokens (the kernels'
 * entry points: chunked from 64 tokens on). */
static void bench_gdn(const dims *d, size_t T, double *tf, double *tb)
{
    bench_gdn_with(d, T, ls_gdn_forward_f32, ls_gdn_backward_f32, 0, tf, tb);
}

#define GDN_BUDGET_S 150.0 /* the recurrent-vs-chunked table's own run budget */

/* GDN token recurrence vs chunked (WY / UT) form, per shape and length.  A
 * cell predicted (linear in T from the one before) past the cell budget or
 * the table's budget is skipped with the reason. */
static void bench_gdn_forms(void)
{
    const struct {
        dims d;
        size_t lens[3];
    } sh[2] = {
        {{"hybrid-tiny", 0, 0, 0, 2, 4, 16, 16}, {4096, 16384, 65536}},
        {{"realistic", 0, 0, 0, 16, 32, 128, 128}, {1024, 4096, 16384}},
    };
    const struct {
        const char *name;
        gdn_fwd_fn f;
        gdn_bwd_fn b;
    } form[2] = {{"recurrent", ls_gdn_forward_recurrent_f32, ls_gdn_backward_recurrent_f32},
                 {"chunked", ls_gdn_forward_chunked_f32, ls_gdn_backward_chunked_f32}};
    const double start = now_s();
    printf("\nGDN: token recurrence vs chunked (WY / UT, chunk 64), float32:\n");
    printf("%-13s %-22s %-10s %7s %12s %12s %9s %9s\n", "config", "dims", "form", "T",
           "fwd tok/s", "bwd tok/s", "fwd s", "bwd s");
    for (int c = 0; c < 2; c++) {
        const dims *d = &sh[c].d;
        char dd[64];
        snprintf(dd, sizeof dd, "Hk=%zu Hv=%zu dk=dv=%zu", d->Hk, d->Hv, d->dk);
        for (int f = 0; f < 2; f++) {
            double prev_f = 0, prev_b = 0;
            size_t prev_T = 0;
            for (int l = 0; l < 3; l++) {
                const size_t T = sh[c].lens[l];
                const double r = prev_T ? (double)T / (double)prev_T : 0;
                const double pf = prev_f * r, pb = prev_b * r;
                const double left = GDN_BUDGET_S - (now_s() - start);
                if (pf > CELL_BUDGET_S || pf > left) {
                    printf("%-13s %-22s %-10s %7zu   skipped: forward predicted %.0f s (cell "
                           "budget %.0f s, %.0f s left)\n",
                           d->name, dd, form[f].name, T, pf, CELL_BUDGET_S, left);
                    continue;
                }
                const int skip_b = pb > CELL_BUDGET_S || pf + pb > left;
                double tf, tb;
                bench_gdn_with(d, T, form[f].f, form[f].b, skip_b, &tf, &tb);
                if (tb >= 0) {
                    printf("%-13s %-22s %-10s %7zu %12.0f %12.0f %9.3f %9.3f\n", d->name, dd,
                           form[f].name, T, T / tf, T / tb, tf, tb);
                } else {
                    printf("%-13s %-22s %-10s %7zu %12.0f %12s %9.3f   backward skipped: "
                           "predicted %.0f s\n",
                           d->name, dd, form[f].name, T, T / tf, "-", tf, pb);
                }
                prev_f = tf;
                prev_b = tb >= 0 ? tb : pb;
                prev_T = T;
                fflush(stdout);
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "gdn") != 0)) {
        fprintf(stderr, "usage: bench_seq [gdn]   (gdn: only the GDN recurrent-vs-chunked "
                        "table)\n");
        return 2;
    }
    if (argc == 2) {
        printf("bench_seq gdn: float32 CPU kernels, %d OpenMP threads\n", omp_get_max_threads());
        bench_gdn_forms();
        return 0;
    }
    const dims cfg[2] = {
        {"hybrid-tiny", 4, 2, 32, 2, 4, 16, 16},
        {"hybrid-small", 8, 2, 64, 4, 8, 32, 32},
    };
    const size_t lens[3] = {1024, 4096, 16384};
    const double start = now_s();
    printf("bench_seq: float32 CPU kernels, %d OpenMP threads\n", omp_get_max_threads());
    printf("attention: causal, Tq = Tk = T, one block; GDN: ls_gdn_forward/backward (the "
           "form they choose; recurrent vs chunked in the GDN table)\n");
    bench_print_loadavg();
    printf("\n");
    printf("%-10s %-13s %-22s %7s %12s %12s %9s %9s\n", "op", "config", "dims", "T",
           "fwd tok/s", "bwd tok/s", "fwd s", "bwd s");
    for (int c = 0; c < 2; c++) {
        const dims *d = &cfg[c];
        char dd[64];
        double prev_f = 0, prev_b = 0; /* seconds of the previous length */
        snprintf(dd, sizeof dd, "H=%zu Hkv=%zu hd=%zu", d->H, d->Hkv, d->hd);
        for (int l = 0; l < 3; l++) {
            size_t T = lens[l];
            double pf = prev_f * 16, pb = prev_b * 16; /* quadratic in T */
            double left = TOTAL_BUDGET_S - (now_s() - start);
            if (l > 0 && (pf > CELL_BUDGET_S || pf > left)) {
                printf("%-10s %-13s %-22s %7zu   skipped: forward predicted %.0f s (cell budget "
                       "%.0f s, %.0f s left)\n",
                       "attention", d->name, dd, T, pf, CELL_BUDGET_S, left);
                continue;
            }
            double tf, tb;
            bench_attn(d, T, l > 0 ? pb : 0, start + TOTAL_BUDGET_S, &tf, &tb);
            if (tb >= 0) {
                printf("%-10s %-13s %-22s %7zu %12.0f %12.0f %9.3f %9.3f\n", "attention",
                       d->name, dd, T, T / tf, T / tb, tf, tb);
            } else {
                printf("%-10s %-13s %-22s %7zu %12.0f %12s %9.3f   backward skipped: predicted "
                       "%.0f s (cell budget %.0f s, run budget %.0f s)\n",
                       "attention", d->name, dd, T, T / tf, "-", tf, pb, CELL_BUDGET_S,
                       TOTAL_BUDGET_S);
            }
            prev_f = tf;
            prev_b = tb >= 0 ? tb : pb;
            fflush(stdout);
        }
        snprintf(dd, sizeof dd, "Hk=%zu Hv=%zu dk=dv=%zu", d->Hk, d->Hv, d->dk);
        for (int l = 0; l < 3; l++) {
            size_t T = lens[l];
            double tf, tb;
            bench_gdn(d, T, &tf, &tb);
            printf("%-10s %-13s %-22s %7zu %12.0f %12.0f %9.3f %9.3f\n", "gdn", d->name, dd, T,
                   T / tf, T / tb, tf, tb);
            fflush(stdout);
        }
    }
    /* the blocks the trainer's paged attention calls most */
    printf("\nattention blocks as the trainer calls them (causal, all keys visible):\n");
    printf("%-13s %-22s %-30s %12s %12s %9s\n", "config", "dims", "block", "fwd us",
           "bwd us", "GF/s f/b");
    for (int c = 0; c < 2; c++) {
        const dims *d = &cfg[c];
        const struct {
            const char *name;
            size_t Tq, Tk;
        } blk[2] = {{"chunk 2048 x page 64", 2048, 64}, {"decode 1 x page 64", 1, 64}};
        char dd[64];
        snprintf(dd, sizeof dd, "H=%zu Hkv=%zu hd=%zu", d->H, d->Hkv, d->hd);
        for (int b = 0; b < 2; b++) {
            double tf, tb;
            /* queries after every key; thousands of reps for the small calls */
            bench_attn_block(d, blk[b].Tq, blk[b].Tk, (int64_t)blk[b].Tk, 100000, 0,
                             now_s() + CELL_BUDGET_S, &tf, &tb);
            /* multiply-adds: q.k and p.v forward; q.k, do.v, ds k, ds q, p do backward */
            const double mac = (double)blk[b].Tq * blk[b].Tk * d->H * d->hd;
            printf("%-13s %-22s %-30s %12.1f %12.1f %4.0f/%-4.0f\n", d->name, dd, blk[b].name,
                   tf * 1e6, tb * 1e6, 4 * mac / tf * 1e-9, 10 * mac / tb * 1e-9);
            fflush(stdout);
        }
    }
    bench_gdn_forms();
    printf("\ntotal %.1f s\n", now_s() - start);
    return 0;
}
