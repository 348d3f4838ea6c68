/* test_kernels_attn_paged.c - attention over a list of key blocks in one pass
 * (ls_attn_paged_forward / ls_attn_paged_backward, kernels/attention.h)
 * against the composition it replaces: one ls_attn_block_forward per block
 * merged with ls_attn_merge_into, and one ls_attn_block_backward per block
 * given the global o and lse.  Compiled twice: against the float64 kernels
 * (bound 1e-12) and the float32 kernels (bound 1e-5), errors relative to the
 * tensor's largest element.
 *
 * Cases: several page counts, a ragged last page, pages not starting at 0,
 * the queries' own keys as the last block, causal on and off, GQA ratios 2
 * and 4, Tq not a multiple of the tile, blocks shorter than a tile, query
 * rows that see no key (lse = -inf, o = 0, dq untouched).  Also: the
 * gradients accumulate onto what the buffers hold; a block without gradient
 * buffers (NULL) and a NULL dq change no other output's bits; 1, 2 and 4
 * threads give the same bits (fused and two-pass backward); a rerun gives the
 * same bits.
 *
 * The ISA paths (kernels/isa.h: portable C, the AVX2 softmax rows, the fused
 * AVX-512 forward and backward in float32 where hd is a multiple of 16), each
 * as far as this CPU runs it, against the portable path: every output within
 * the bound, and the fused kernels' bits differ from the portable ones' (so
 * the path was taken: o, and dq given the same o and lse), at heads of 16, 32, 48 (three vectors), 256 (the wide
 * configs) and 40 (no fused path: the GEMM path's bits). */
#include <criterion/criterion.h>
#include <omp.h>

#include "kernels/attention.h"
#include "kernels/isa.h"
#include "tests/support/test_util.h"

#if LS_REAL_IS_F64
#define TOL 1e-12
#else
#define TOL 1e-5
#endif

#define MAXB 16 /* blocks per case (at most) */

typedef struct {
    const char *label;
    size_t Tq, H, Hkv, hd;
    size_t npages, page, last; /* pages of `page` keys, the last of `last` */
    int64_t p0;                /* the first page's position */
    int own;                   /* the queries' own keys (Tq of them) as the last block */
    int64_t q_pos0;
    int causal;
} pcase;

/* One case's inputs and outputs (ls_real, the build's type). */
typedef struct {
    size_t nb, nq, nl;
    ls_attn_kv_block kv[MAXB];
    size_t nk[MAXB]; /* elements of block b's k */
    ls_real *k[MAXB], *v[MAXB], *dk0[MAXB], *dv0[MAXB];
    ls_real *q, *dO, *dq0;
} pdata;

static ls_real *rnd(uint64_t *s, size_t n, double lo, double hi)
{
    ls_real *a = malloc((n ? n : 1) * sizeof *a);
    cr_assert(a != NULL);
    for (size_t i = 0; i < n; i++) {
        a[i] = (ls_real)tu_unif(s, lo, hi);
    }
    return a;
}

static ls_real *dup(const ls_real *x, size_t n)
{
    ls_real *a = malloc((n ? n : 1) * sizeof *a);
    cr_assert(a != NULL);
    memcpy(a, x, n * sizeof *a);
    return a;
}

static pdata make(const pcase *c, uint64_t seed)
{
    pdata d;
    memset(&d, 0, sizeof d);
    uint64_t s = seed;
    d.nq = c->Tq * c->H * c->hd;
    d.nl = c->Tq * c->H;
    d.nb = c->npages + (c->own ? 1 : 0);
    cr_assert(d.nb <= MAXB);
    for (size_t b = 0; b < d.nb; b++) {
        const int own = b == c->npages;
        const size_t n = own ? c->Tq : b + 1 == c->npages ? c->last : c->page;
        d.nk[b] = n * c->Hkv * c->hd;
        d.k[b] = rnd(&s, d.nk[b], -2, 2);
        d.v[b] = rnd(&s, d.nk[b], -1, 1);
        d.dk0[b] = rnd(&s, d.nk[b], -1, 1);
        d.dv0[b] = rnd(&s, d.nk[b], -1, 1);
        d.kv[b].k = d.k[b];
        d.kv[b].v = d.v[b];
        d.kv[b].n = n;
        d.kv[b].pos0 = own ? c->q_pos0 : c->p0 + (int64_t)(b * c->page);
    }
    d.q = rnd(&s, d.nq, -2, 2);
    d.dO = rnd(&s, d.nq, -1, 1);
    d.dq0 = rnd(&s, d.nq, -1, 1);
    return d;
}

static void release(pdata *d)
{
    for (size_t b = 0; b < d->nb; b++) {
        free(d->k[b]); free(d->v[b]); free(d->dk0[b]); free(d->dv0[b]);
    }
    free(d->q); free(d->dO); free(d->dq0);
}

/* Outputs of one run: o, lse, dq, and each block's dk, dv. */
typedef struct {
    ls_real *o, *lse, *dq, *dk[MAXB], *dv[MAXB];
} pout;

static pout out_new(const pdata *d)
{
    pout r;
    memset(&r, 0, sizeof r);
    r.o = dup(d->q, d->nq); /* garbage the kernel overwrites */
    r.lse = rnd(&(uint64_t){7}, d->nl, -1, 1);
    r.dq = dup(d->dq0, d->nq);
    for (size_t b = 0; b < d->nb; b++) {
        r.dk[b] = dup(d->dk0[b], d->nk[b]);
        r.dv[b] = dup(d->dv0[b], d->nk[b]);
    }
    return r;
}

static void out_free(pout *r, size_t nb)
{
    free(r->o); free(r->lse); free(r->dq);
    for (size_t b = 0; b < nb; b++) {
        free(r->dk[b]); free(r->dv[b]);
    }
}

static ls_real tau_of(const pcase *c) { return (ls_real)(1.0 / sqrt((double)c->hd)); }

/* The one-pass kernels; the backward given this run's own o and lse. */
static void run_paged(pout *r, const pdata *d, const pcase *c, int threads, int want_dq)
{
    omp_set_num_threads(threads);
    LS_K(ls_attn_paged_forward)(r->o, r->lse, d->q, d->kv, d->nb, c->Tq, c->H, c->Hkv, c->hd,
                                c->q_pos0, c->causal, tau_of(c));
    ls_attn_kv_grad g[MAXB];
    for (size_t b = 0; b < d->nb; b++) {
        g[b].dk = r->dk[b];
        g[b].dv = r->dv[b];
    }
    LS_K(ls_attn_paged_backward)(want_dq ? r->dq : NULL, g, d->dO, d->q, d->kv, d->nb, r->o,
                                 r->lse, c->Tq, c->H, c->Hkv, c->hd, c->q_pos0, c->causal,
                                 tau_of(c));
    omp_set_num_threads(1);
}

/* The old composition: per-block forward merged; per-block backward given
 * the global (o, lse) `glob` (the one-pass run's, so that the backward
 * comparison sees the same inputs). */
static void run_composed(pout *r, const pdata *d, const pcase *c, const pout *glob)
{
    const ls_real tau = tau_of(c);
    ls_real *ot = dup(d->q, d->nq), *lt = dup(d->q, d->nl);
    memset(r->o, 0, d->nq * sizeof *r->o);
    for (size_t i = 0; i < d->nl; i++) {
        r->lse[i] = -INFINITY;
    }
    for (size_t b = 0; b < d->nb; b++) {
        LS_K(ls_attn_block_forward)(ot, lt, d->q, d->k[b], d->v[b], c->Tq, d->kv[b].n, c->H,
                                    c->Hkv, c->hd, c->q_pos0, d->kv[b].pos0, c->causal, tau);
        LS_K(ls_attn_merge_into)(r->o, r->lse, ot, lt, d->nl, c->hd);
    }
    for (size_t b = 0; b < d->nb; b++) {
        LS_K(ls_attn_block_backward)(r->dq, r->dk[b], r->dv[b], d->dO, d->q, d->k[b], d->v[b],
                                     glob->o, glob->lse, c->Tq, d->kv[b].n, c->H, c->Hkv, c->hd,
                                     c->q_pos0, d->kv[b].pos0, c->causal, tau);
    }
    free(ot);
    free(lt);
}

/* Largest |a - b| over the largest |b| (finite elements; -inf == -inf). */
static double rel(const ls_real *a, const ls_real *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(b[i]) && a[i] == b[i]) {
            continue;
        }
        const double diff = fabs((double)a[i] - (double)b[i]);
        e = diff > e || isnan(diff) ? diff : e;
        m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
    }
    return m > 0 ? e / m : e;
}

/* Bitwise difference count (NaN-safe through memcmp). */
static double ndiff(const ls_real *a, const ls_real *b, size_t n)
{
    double k = 0;
    for (size_t i = 0; i < n; i++) {
        k += memcmp(a + i, b + i, sizeof *a) != 0;
    }
    return k;
}

static void check(const pcase *c, const char *what, double err, double tol)
{
    char name[160];
    snprintf(name, sizeof name, "%s %s: %s", LS_REAL_NAME, c->label, what);
    tu_report(name, err, tol);
    cr_expect(err <= tol, "%s: %.3e > %.1e", name, err, tol);
}

/* Worst relative error of every output of a against b. */
static double worst(const pout *a, const pout *b, const pdata *d, int fwd)
{
    double e = 0, x;
    if (fwd) {
        x = rel(a->o, b->o, d->nq); e = x > e ? x : e;
        x = rel(a->lse, b->lse, d->nl); e = x > e ? x : e;
        return e;
    }
    x = rel(a->dq, b->dq, d->nq); e = x > e ? x : e;
    for (size_t b_ = 0; b_ < d->nb; b_++) {
        x = rel(a->dk[b_], b->dk[b_], d->nk[b_]); e = x > e ? x : e;
        x = rel(a->dv[b_], b->dv[b_], d->nk[b_]); e = x > e ? x : e;
    }
    return e;
}

static double bits(const pout *a, const pout *b, const pdata *d)
{
    double k = ndiff(a->o, b->o, d->nq) + ndiff(a->lse, b->lse, d->nl) + ndiff(a->dq, b->dq, d->nq);
    for (size_t i = 0; i < d->nb; i++) {
        k += ndiff(a->dk[i], b->dk[i], d->nk[i]) + ndiff(a->dv[i], b->dv[i], d->nk[i]);
    }
    return k;
}

static void run_case(const pcase *c, uint64_t seed)
{
    pdata d = make(c, seed);
    pout one = out_new(&d), comp = out_new(&d);
    run_paged(&one, &d, c, 1, 1);
    run_composed(&comp, &d, c, &one);
    check(c, "one pass vs per-block + merge: o, lse", worst(&one, &comp, &d, 1), TOL);
    check(c, "one pass vs per-block backward: dq, dk, dv", worst(&one, &comp, &d, 0), TOL);

    /* rows that see no key: lse -inf, o exactly 0, dq untouched */
    size_t empty = 0;
    double bad = 0;
    for (size_t i = 0; i < d.nl; i++) {
        if (comp.lse[i] != -INFINITY) {
            continue;
        }
        empty++;
        bad += one.lse[i] != -INFINITY;
        for (size_t e = 0; e < c->hd; e++) {
            bad += one.o[i * c->hd + e] != 0;
            bad += one.dq[i * c->hd + e] != d.dq0[i * c->hd + e];
        }
    }
    check(c, "rows with no key: lse -inf, o 0, dq untouched", bad, 0);
    cr_log_info("%s: %zu rows see no key", c->label, empty);

    /* thread counts and a rerun: the same bits */
    const int th[3] = {2, 4, 1};
    for (int i = 0; i < 3; i++) {
        pout r = out_new(&d);
        run_paged(&r, &d, c, th[i], 1);
        char what[64];
        snprintf(what, sizeof what, "%d thread(s) vs 1%s, differing bits", th[i],
                 th[i] == 1 ? " (rerun)" : "");
        check(c, what, bits(&r, &one, &d), 0);
        out_free(&r, d.nb);
    }

    /* no dq, and every other block without gradient buffers: the rest the
     * same bits (1 and 2 threads) */
    for (int t = 1; t <= 2; t++) {
        pout r = out_new(&d);
        omp_set_num_threads(t);
        ls_attn_kv_grad g[MAXB];
        for (size_t b = 0; b < d.nb; b++) {
            g[b].dk = b % 2 ? NULL : r.dk[b];
            g[b].dv = b % 2 ? NULL : r.dv[b];
        }
        LS_K(ls_attn_paged_backward)(NULL, g, d.dO, d.q, d.kv, d.nb, one.o, one.lse, c->Tq, c->H,
                                     c->Hkv, c->hd, c->q_pos0, c->causal, tau_of(c));
        omp_set_num_threads(1);
        double k = ndiff(r.dq, d.dq0, d.nq);
        for (size_t b = 0; b < d.nb; b++) {
            const ls_real *wk = b % 2 ? d.dk0[b] : one.dk[b], *wv = b % 2 ? d.dv0[b] : one.dv[b];
            k += ndiff(r.dk[b], wk, d.nk[b]) + ndiff(r.dv[b], wv, d.nk[b]);
        }
        char what[80];
        snprintf(what, sizeof what, "NULL dq and odd blocks' grads, %d thread(s), differing bits",
                 t);
        check(c, what, k, 0);
        out_free(&r, d.nb);
    }
    out_free(&one, d.nb);
    out_free(&comp, d.nb);
    release(&d);
}

/* label, Tq, H, Hkv, hd, npages, page, last, p0, own, q_pos0, causal */
Test(attn_paged, pages_and_own_keys_causal)
{
    /* a prompt of 4 pages (ragged last) and the chunk's own keys after it */
    const pcase c = {"4 pages + own, GQA 2", 70, 4, 2, 32, 4, 64, 37, 0, 1, 229, 1};
    run_case(&c, 1);
}

Test(attn_paged, many_small_pages_gqa4)
{
    /* pages shorter than a key tile, not starting at 0, GQA 4 */
    const pcase c = {"9 pages of 16 from 300 + own, GQA 4", 45, 4, 1, 16, 9, 16, 5, 300, 1, 437, 1};
    run_case(&c, 2);
}

Test(attn_paged, one_page)
{
    const pcase c = {"1 page + own", 33, 4, 2, 16, 1, 64, 64, 10, 1, 74, 1};
    run_case(&c, 3);
}

Test(attn_paged, not_causal)
{
    const pcase c = {"3 pages + own, not causal", 50, 4, 2, 16, 3, 64, 20, 0, 1, 148, 0};
    run_case(&c, 4);
}

Test(attn_paged, rows_that_see_no_key)
{
    /* queries from 90, pages from 100: the first 10 queries see nothing */
    const pcase c = {"pages after some queries", 75, 4, 2, 16, 3, 32, 11, 100, 0, 90, 1};
    run_case(&c, 5);
}

Test(attn_paged, tiny_lists)
{
    /* fewer keys than the GEMM path takes (the scalar path), and no block */
    const pcase c = {"2 pages of 3 keys", 20, 4, 2, 16, 2, 3, 2, 0, 0, 5, 1};
    run_case(&c, 6);
    const pcase e = {"no blocks", 9, 4, 2, 16, 0, 0, 0, 0, 0, 0, 1};
    run_case(&e, 7);
}

Test(attn_paged, long_prompt)
{
    /* enough pages that the key tiles of the two-pass backward span many
     * blocks; Tq over two query tiles */
    const pcase c = {"14 pages + own", 150, 4, 2, 32, 14, 64, 50, 64, 1, 946, 1};
    run_case(&c, 8);
}

/* Every output of the paths this CPU runs against the portable path. */
static void isa_case(const pcase *c, uint64_t seed)
{
    const ls_isa keep = ls_kernel_isa();
    pdata d = make(c, seed);
    pout base = out_new(&d);
    cr_assert_eq(ls_kernel_isa_force(LS_ISA_PORTABLE), 0);
    run_paged(&base, &d, c, 2, 1);
    for (int i = LS_ISA_AVX2; i <= LS_ISA_AVX512; i++) {
        if (ls_kernel_isa_force((ls_isa)i) != 0) {
            cr_log_info("%s: this CPU does not run %s", c->label, ls_kernel_isa_name((ls_isa)i));
            continue;
        }
        pout r = out_new(&d);
        run_paged(&r, &d, c, 2, 1);
        char what[96];
        snprintf(what, sizeof what, "%s vs portable: o, lse", ls_kernel_isa_name((ls_isa)i));
        check(c, what, worst(&r, &base, &d, 1), TOL);
        snprintf(what, sizeof what, "%s vs portable: dq, dk, dv", ls_kernel_isa_name((ls_isa)i));
        check(c, what, worst(&r, &base, &d, 0), TOL);
        const double k = ndiff(r.o, base.o, d.nq);
        cr_log_info("%s: %s, %.0f of %zu output elements differ in bits from portable", c->label,
                    ls_kernel_isa_name((ls_isa)i), k, d.nq);
        if (i == LS_ISA_AVX512 && !LS_REAL_IS_F64 && c->hd % 16 == 0) {
            cr_expect(k > 0, "%s: the fused AVX-512 forward gave the portable bits (not taken?)",
                      c->label);
            /* the backward given the same o and lse: the fused backward's dq bits differ too */
            pout b = out_new(&d), f = out_new(&d);
            ls_attn_kv_grad gb[MAXB], gf[MAXB];
            for (size_t j = 0; j < d.nb; j++) {
                gb[j] = (ls_attn_kv_grad){b.dk[j], b.dv[j]};
                gf[j] = (ls_attn_kv_grad){f.dk[j], f.dv[j]};
            }
            LS_K(ls_attn_paged_backward)(f.dq, gf, d.dO, d.q, d.kv, d.nb, base.o, base.lse, c->Tq,
                                         c->H, c->Hkv, c->hd, c->q_pos0, c->causal, tau_of(c));
            cr_assert_eq(ls_kernel_isa_force(LS_ISA_PORTABLE), 0);
            LS_K(ls_attn_paged_backward)(b.dq, gb, d.dO, d.q, d.kv, d.nb, base.o, base.lse, c->Tq,
                                         c->H, c->Hkv, c->hd, c->q_pos0, c->causal, tau_of(c));
            cr_assert_eq(ls_kernel_isa_force((ls_isa)i), 0);
            snprintf(what, sizeof what, "avx512 vs portable backward, same o and lse");
            check(c, what, worst(&f, &b, &d, 0), TOL);
            const double kb = ndiff(f.dq, b.dq, d.nq);
            cr_expect(kb > 0, "%s: the fused AVX-512 backward gave the portable dq bits (not taken?)",
                      c->label);
            out_free(&b, d.nb);
            out_free(&f, d.nb);
        }
        /* the same bits at another thread count */
        pout r1 = out_new(&d);
        run_paged(&r1, &d, c, 1, 1);
        snprintf(what, sizeof what, "%s: 1 vs 2 threads, differing bits",
                 ls_kernel_isa_name((ls_isa)i));
        check(c, what, bits(&r1, &r, &d), 0);
        out_free(&r1, d.nb);
        out_free(&r, d.nb);
    }
    cr_assert_eq(ls_kernel_isa_force(keep), 0);
    out_free(&base, d.nb);
    release(&d);
}

Test(attn_paged, isa_paths_agree)
{
    /* label, Tq, H, Hkv, hd, npages, page, last, p0, own, q_pos0, causal */
    const pcase cs[] = {
        {"isa: hd 32, GQA 2, 5 pages + own", 150, 4, 2, 32, 5, 64, 50, 0, 1, 306, 1},
        {"isa: hd 16, GQA 4, pages of 16", 45, 4, 1, 16, 9, 16, 5, 300, 1, 437, 1},
        {"isa: hd 48, not causal", 40, 2, 1, 48, 2, 64, 30, 0, 1, 94, 0},
        {"isa: hd 256, GQA 6 (the wide configs)", 70, 6, 1, 256, 3, 64, 40, 0, 1, 168, 1},
        {"isa: hd 40 (no fused path)", 60, 4, 2, 40, 2, 64, 64, 0, 1, 128, 1},
        {"isa: queries before the pages", 75, 4, 2, 16, 3, 32, 11, 100, 0, 90, 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        isa_case(&cs[i], 100 + i);
    }
}
