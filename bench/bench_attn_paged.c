/* bench_attn_paged.c - float32 attention of one hybrid-tiny attention layer
 * (H=4, Hkv=2, hd=32) for one capture chunk of T = 2048 queries (the
 * trainer's default --capture-chunk) against a prompt of P keys in 64-token
 * pages plus the chunk's own keys, the two ways the trainer can run it:
 *   per-page: one ls_attn_block_forward per page and per the own keys, each
 *             page's (o, lse) merged with ls_attn_merge_into; backward one
 *             ls_attn_block_backward per block (the path before the one-pass
 *             kernels);
 *   one-pass: ls_attn_paged_forward / ls_attn_paged_backward over the list.
 * Prints seconds (the fastest of a few calls, the two paths called in turn)
 * and GFLOP/s (forward 4 hd H per visible (query, key) pair,
 * backward 10 hd H), and the GFLOP/s of a 1024^3 cblas_sgemm on the same
 * threads as the ceiling.  Asserts nothing.
 *
 * Usage: bench_attn_paged [--wide] [--chunk T] [P ...]   (--wide: hybrid-wide's H=6, Hkv=1, hd=256;
 * LS_KERNEL_ISA picks the kernels' path, kernels/isa.h)   (defaults: T 2048; P 4096 16384 65536);
 * --chunk 32 is a response-scoring or replay segment's query count. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/isa.h"

static size_t H = 4, HKV = 2, HD = 32; /* hybrid-tiny's; --wide: hybrid-wide's 6, 1, 256 */
static size_t T = 2048; /* queries of the chunk (--chunk) */
#define PAGE 64
#define MIN_TIME_S 0.5 /* repeat a cell until this much time */
#define MIN_REPS 5     /* ... and at least this often; the fastest counts */

static float *rand_buf(size_t n, uint64_t *s, float lo, float hi)
{
    return bench_rand_buf("bench_attn_paged", n, s, lo, hi);
}

/* GFLOP/s of a 1024^3 sgemm (the ceiling). */
static double sgemm_gflops(void)
{
    const int n = 1024;
    uint64_t s = 3;
    float *a = rand_buf((size_t)n * n, &s, -1, 1), *b = rand_buf((size_t)n * n, &s, -1, 1);
    float *c = rand_buf((size_t)n * n, &s, 0, 0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    int reps = 0;
    double t0 = now_s(), t1;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        reps++;
        t1 = now_s();
    } while (t1 - t0 < MIN_TIME_S);
    free(a); free(b); free(c);
    return 2.0 * n * n * n * reps / (t1 - t0) * 1e-9;
}

typedef struct {
    size_t nb;
    ls_attn_kv_block *kv;
    ls_attn_kv_grad *g;
    float *q, *dO, *o, *lse, *ot, *lt, *dq;
    float *k, *v, *dk, *dv; /* all keys: pages then own, contiguous */
} problem;

static problem make(size_t P)
{
    problem p;
    uint64_t s = 1;
    const size_t nk = (P + T) * HKV * HD, nq = (size_t)T * H * HD;
    p.nb = (P + PAGE - 1) / PAGE + 1;
    p.kv = calloc(p.nb, sizeof *p.kv);
    p.g = calloc(p.nb, sizeof *p.g);
    p.k = rand_buf(nk, &s, -1.7f, 1.7f);
    p.v = rand_buf(nk, &s, -1, 1);
    p.dk = rand_buf(nk, &s, 0, 0);
    p.dv = rand_buf(nk, &s, 0, 0);
    p.q = rand_buf(nq, &s, -1.7f, 1.7f);
    p.dO = rand_buf(nq, &s, -1, 1);
    p.o = rand_buf(nq, &s, 0, 0);
    p.ot = rand_buf(nq, &s, 0, 0);
    p.dq = rand_buf(nq, &s, 0, 0);
    p.lse = rand_buf((size_t)T * H, &s, 0, 0);
    p.lt = rand_buf((size_t)T * H, &s, 0, 0);
    if (p.kv == NULL || p.g == NULL) {
        fprintf(stderr, "bench_attn_paged: out of memory\n");
        exit(1);
    }
    for (size_t b = 0; b < p.nb; b++) {
        const int own = b + 1 == p.nb;
        const size_t s0 = own ? P : b * PAGE, n = own ? T : P - s0 < PAGE ? P - s0 : PAGE;
        const size_t off = s0 * HKV * HD;
        p.kv[b] = (ls_attn_kv_block){p.k + off, p.v + off, n, (int64_t)s0};
        p.g[b] = (ls_attn_kv_grad){p.dk + off, p.dv + off};
    }
    return p;
}

static void release(problem *p)
{
    free(p->kv); free(p->g); free(p->k); free(p->v); free(p->dk); free(p->dv); free(p->q);
    free(p->dO); free(p->o); free(p->ot); free(p->dq); free(p->lse); free(p->lt);
}

#define TAU ((float)(1.0 / sqrt((double)HD))) /* 1 / sqrt(hd) */

static void fwd_per_page(problem *p, int64_t P)
{
    /* the own keys first, then one call and one merge per page */
    const ls_attn_kv_block *own = &p->kv[p->nb - 1];
    ls_attn_block_forward_f32(p->o, p->lse, p->q, own->k, own->v, T, T, H, HKV, HD, P, P, 1, TAU);
    for (size_t b = 0; b + 1 < p->nb; b++) {
        ls_attn_block_forward_f32(p->ot, p->lt, p->q, p->kv[b].k, p->kv[b].v, T, p->kv[b].n, H,
                                  HKV, HD, P, p->kv[b].pos0, 1, TAU);
        ls_attn_merge_into_f32(p->o, p->lse, p->ot, p->lt, (size_t)T * H, HD);
    }
}

static void bwd_per_page(problem *p, int64_t P)
{
    for (size_t b = p->nb; b-- > 0;) {
        ls_attn_block_backward_f32(p->dq, p->g[b].dk, p->g[b].dv, p->dO, p->q, p->kv[b].k,
                                   p->kv[b].v, p->o, p->lse, T, p->kv[b].n, H, HKV, HD, P,
                                   p->kv[b].pos0, 1, TAU);
    }
}

static void fwd_one_pass(problem *p, int64_t P)
{
    ls_attn_paged_forward_f32(p->o, p->lse, p->q, p->kv, p->nb, T, H, HKV, HD, P, 1, TAU);
}

static void bwd_one_pass(problem *p, int64_t P)
{
    ls_attn_paged_backward_f32(p->dq, p->g, p->dO, p->q, p->kv, p->nb, p->o, p->lse, T, H, HKV,
                               HD, P, 1, TAU);
}

/* Seconds of the fastest call of fa and of fb, called in turn (so that both
 * see the same load on the machine) at least MIN_REPS times each and until
 * MIN_TIME_S: the least disturbed by other load. */
static void timed_pair(void (*fa)(problem *, int64_t), void (*fb)(problem *, int64_t),
                       problem *p, int64_t P, double *ta, double *tb)
{
    int n = 0;
    const double start = now_s();
    *ta = *tb = INFINITY;
    do {
        double t0 = now_s();
        fa(p, P);
        double t1 = now_s();
        fb(p, P);
        double t2 = now_s();
        *ta = t1 - t0 < *ta ? t1 - t0 : *ta;
        *tb = t2 - t1 < *tb ? t2 - t1 : *tb;
        n++;
    } while (n < MIN_REPS || now_s() - start < MIN_TIME_S);
}

int main(int argc, char **argv)
{
    size_t lens[16] = {4096, 16384, 65536};
    int nl = 3;
    int first = 1;
    if (argc > first && strcmp(argv[first], "--wide") == 0) {
        H = 6, HKV = 1, HD = 256;
        first++;
    }
    if (argc > first + 1 && strcmp(argv[first], "--chunk") == 0) {
        char *end;
        unsigned long long x = strtoull(argv[first + 1], &end, 10);
        if (*end != '\0' || x == 0 || x > 1000000) {
            fprintf(stderr, "bench_attn_paged: --chunk '%s': want a query count in [1, 1e6]\n",
                    argv[first + 1]);
            return 2;
        }
        T = (size_t)x;
        first += 2;
    }
    if (argc > first) {
        nl = 0;
        for (int i = first; i < argc && nl < 16; i++) {
            char *end;
            unsigned long long x = strtoull(argv[i], &end, 10);
            if (*end != '\0' || x == 0) {
                fprintf(stderr, "bench_attn_paged: argument %d '%s': want a prompt length > 0\n",
                        i, argv[i]);
                return 2;
            }
            lens[nl++] = (size_t)x;
        }
    }
    printf("bench_attn_paged: float32, %d OpenMP threads, kernels %s; %s attention H=%zu Hkv=%zu "
           "hd=%zu, chunk T=%zu against P prompt keys in %d-token pages + its own keys\n",
           omp_get_max_threads(), ls_kernel_isa_name(ls_kernel_isa()),
           HD == 256 ? "hybrid-wide" : "hybrid-tiny", H, HKV, HD, T, PAGE);
    bench_print_loadavg();
    printf("sgemm 1024^3 ceiling: %.1f GFLOP/s\n\n", sgemm_gflops());
    printf("%7s %6s %-9s %9s %9s %9s %9s\n", "P", "pages", "path", "fwd s", "fwd GF/s",
           "bwd s", "bwd GF/s");
    for (int l = 0; l < nl; l++) {
        const size_t P = lens[l];
        problem p = make(P);
        const double pairs = (double)T * P + (double)T * (T + 1) / 2;
        const double ff = 4.0 * HD * H * pairs, fb = 10.0 * HD * H * pairs;
        double f_old, f_new, b_old, b_new;
        timed_pair(fwd_per_page, fwd_one_pass, &p, (int64_t)P, &f_old, &f_new);
        timed_pair(bwd_per_page, bwd_one_pass, &p, (int64_t)P, &b_old, &b_new);
        printf("%7zu %6zu %-9s %9.3f %9.1f %9.3f %9.1f\n", P, p.nb - 1, "per-page", f_old,
               ff / f_old * 1e-9, b_old, fb / b_old * 1e-9);
        printf("%7zu %6zu %-9s %9.3f %9.1f %9.3f %9.1f\n", P, p.nb - 1, "one-pass", f_new,
               ff / f_new * 1e-9, b_new, fb / b_new * 1e-9);
        fflush(stdout);
        release(&p);
    }
    return 0;
}
