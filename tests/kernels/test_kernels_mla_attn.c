/* test_kernels_mla_attn.c - MLA attention kernels in float64 (mla.h):
 * forward against a plain softmax written here, every backward against
 * central finite differences, the absorbed form against the naive one, and
 * two key blocks merged with the log-sum-exp rule against one block; each
 * with and without a DSA candidate list. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dsa.h"
#include "kernels/mla.h"
#include "tests/kernels/test_kernels_mla.h"

enum { TQ = 5, TK = 7, KSEL = 4, NPICK = 3 };

/* One attention problem: inputs, an optional candidate list, the weights G
 * of the test loss L = sum G * o, and the outputs. */
typedef struct {
    ls_mla_dims d;
    size_t Tq, Tk, k_sel;
    int64_t q_pos0, k_pos0;
    double tau;
    ls_mla_form form;
    double *q_nope, *q_pe, *c_kv, *k_pe, *kv_b, *G;
    int64_t *sel; /* NULL: causal over all keys */
    double *o, *lse;
} prob;

/* Gradients, in the order of prob's inputs. */
typedef struct {
    double *t[5];
} grads;

static size_t n_of(const prob *p, int i)
{
    const ls_mla_dims *d = &p->d;
    switch (i) {
    case 0: return p->Tq * d->H * d->d_n;
    case 1: return p->Tq * d->H * d->d_r;
    case 2: return p->Tk * d->r_kv;
    case 3: return p->Tk * d->d_r;
    default: return d->H * (d->d_n + d->d_v) * d->r_kv;
    }
}

static double *input(prob *p, int i)
{
    double *in[5] = {p->q_nope, p->q_pe, p->c_kv, p->k_pe, p->kv_b};
    return in[i];
}

static const char *input_name[5] = {"q_nope", "q_pe", "c_kv", "k_pe", "kv_b"};

static size_t n_visible(const prob *p, size_t t)
{
    int64_t n = p->q_pos0 + (int64_t)t - p->k_pos0 + 1;
    if (n < 0) n = 0;
    return (size_t)n < p->Tk ? (size_t)n : p->Tk;
}

/* Random candidates: NPICK distinct visible keys (fewer if fewer are
 * visible) in random slots of a KSEL row, -1 elsewhere. */
static void random_sel(prob *p)
{
    p->k_sel = KSEL;
    p->sel = malloc(p->Tq * KSEL * sizeof *p->sel);
    for (size_t t = 0; t < p->Tq; t++) {
        size_t nv = n_visible(p, t), keys[TK], m = nv < NPICK ? nv : NPICK;
        for (size_t s = 0; s < nv; s++) keys[s] = s;
        for (size_t i = 0; i < m; i++) { /* partial Fisher-Yates */
            size_t j = i + (size_t)((mla_test_uniform() + 1) / 2 * (double)(nv - i));
            if (j >= nv) j = nv - 1;
            size_t tmp = keys[i];
            keys[i] = keys[j];
            keys[j] = tmp;
        }
        int64_t *row = p->sel + t * KSEL;
        for (size_t j = 0; j < KSEL; j++) row[j] = -1;
        size_t placed = 0;
        while (placed < m) {
            size_t slot = (size_t)((mla_test_uniform() + 1) / 2 * KSEL) % KSEL;
            if (row[slot] < 0) row[slot] = (int64_t)keys[placed++];
        }
    }
}

static prob prob_make(uint64_t seed, int with_sel, int64_t q_pos0, int64_t k_pos0,
                      ls_mla_form form)
{
    prob p;
    memset(&p, 0, sizeof p);
    p.d = (ls_mla_dims){.H = 2, .d_n = 4, .d_r = 4, .d_v = 3, .r_kv = 5};
    p.Tq = TQ;
    p.Tk = TK;
    p.q_pos0 = q_pos0;
    p.k_pos0 = k_pos0;
    p.tau = 1.0 / sqrt((double)(p.d.d_n + p.d.d_r));
    p.form = form;
    mla_test_seed(seed);
    double **in[5] = {&p.q_nope, &p.q_pe, &p.c_kv, &p.k_pe, &p.kv_b};
    for (int i = 0; i < 5; i++) {
        *in[i] = malloc(n_of(&p, i) * sizeof(double));
        mla_test_fill(*in[i], n_of(&p, i), i == 4 ? 0.8 : 1.2);
    }
    size_t no = p.Tq * p.d.H * p.d.d_v;
    p.G = malloc(no * sizeof *p.G);
    mla_test_fill(p.G, no, 1.0);
    p.o = malloc(no * sizeof *p.o);
    p.lse = malloc(p.Tq * p.d.H * sizeof *p.lse);
    if (with_sel) random_sel(&p);
    return p;
}

static void prob_free(prob *p)
{
    double *bufs[] = {p->q_nope, p->q_pe, p->c_kv, p->k_pe, p->kv_b, p->G, p->o, p->lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(p->sel);
}

static grads grads_make(const prob *p)
{
    grads g;
    for (int i = 0; i < 5; i++) g.t[i] = calloc(n_of(p, i), sizeof(double));
    return g;
}

static void grads_free(grads *g)
{
    for (int i = 0; i < 5; i++) free(g->t[i]);
}

static void forward(prob *p)
{
    double *ws = malloc(ls_mla_forward_workspace_f64(p->form, p->Tk, p->k_sel, &p->d) *
                        sizeof *ws);
    ls_mla_forward_f64(p->o, p->lse, p->q_nope, p->q_pe, p->c_kv, p->k_pe, p->kv_b, p->sel,
                       p->k_sel, p->Tq, p->Tk, &p->d, p->q_pos0, p->k_pos0, p->tau, p->form, ws);
    free(ws);
}

/* Gradients of L = sum G * o, with o and lse from a fresh forward. */
static void backward(prob *p, grads *g)
{
    forward(p);
    double *ws = malloc(ls_mla_backward_workspace_f64(p->form, p->Tk, p->k_sel, &p->d) *
                        sizeof *ws);
    ls_mla_backward_f64(g->t[0], g->t[1], g->t[2], g->t[3], g->t[4], p->o, p->lse, p->G,
                        p->q_nope, p->q_pe, p->c_kv, p->k_pe, p->kv_b, p->sel, p->k_sel, p->Tq,
                        p->Tk, &p->d, p->q_pos0, p->k_pos0, p->tau, p->form, ws);
    free(ws);
}

static double loss(void *ctx)
{
    prob *p = ctx;
    forward(p);
    double l = 0;
    for (size_t i = 0; i < p->Tq * p->d.H * p->d.d_v; i++) l += p->G[i] * p->o[i];
    return l;
}

/* Plain reference: materialise k and v, exponentiate the scores without a
 * shift, scan the keys in index order. */
static void reference_forward(double *o, double *lse, const prob *p)
{
    const ls_mla_dims *d = &p->d;
    const size_t W = d->d_n + d->d_v;
    for (size_t t = 0; t < p->Tq; t++)
        for (size_t h = 0; h < d->H; h++) {
            double sum = 0, acc[16] = {0};
            for (size_t s = 0; s < p->Tk; s++) {
                int allowed = 0;
                if (p->sel) {
                    for (size_t j = 0; j < p->k_sel; j++)
                        if (p->sel[t * p->k_sel + j] == (int64_t)s) allowed = 1;
                } else {
                    allowed = p->k_pos0 + (int64_t)s <= p->q_pos0 + (int64_t)t;
                }
                if (!allowed) continue;
                double kv[16], z = 0;
                for (size_t i = 0; i < W; i++) {
                    kv[i] = 0;
                    for (size_t r = 0; r < d->r_kv; r++)
                        kv[i] += p->kv_b[(h * W + i) * d->r_kv + r] * p->c_kv[s * d->r_kv + r];
                }
                for (size_t i = 0; i < d->d_n; i++)
                    z += p->q_nope[(t * d->H + h) * d->d_n + i] * kv[i];
                for (size_t i = 0; i < d->d_r; i++)
                    z += p->q_pe[(t * d->H + h) * d->d_r + i] * p->k_pe[s * d->d_r + i];
                double e = exp(p->tau * z);
                sum += e;
                for (size_t i = 0; i < d->d_v; i++) acc[i] += e * kv[d->d_n + i];
            }
            for (size_t i = 0; i < d->d_v; i++)
                o[(t * d->H + h) * d->d_v + i] = sum > 0 ? acc[i] / sum : 0;
            lse[t * d->H + h] = sum > 0 ? log(sum) : -INFINITY;
        }
}

/* Worst error of lse against a reference; -INF must match exactly. */
static double lse_err(const double *a, const double *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(b[i]) || isinf(a[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        double d = fabs(a[i] - b[i]) / (1 + fabs(b[i]));
        if (d > e || isnan(d)) e = isnan(d) ? INFINITY : d;
    }
    return e;
}

static const char *form_name(ls_mla_form f) { return f == LS_MLA_NAIVE ? "naive" : "absorbed"; }

Test(kernels_mla_attn, forward_matches_plain_softmax)
{
    /* k_pos0 > q_pos0 for the second layout: query 0 sees no key at all */
    const int64_t layouts[2][2] = {{4, 2}, {1, 2}};
    double worst = 0;
    for (int lay = 0; lay < 2; lay++)
        for (int with_sel = 0; with_sel < 2; with_sel++)
            for (int f = 0; f < 2; f++) {
                prob p = prob_make(11 + (uint64_t)lay, with_sel, layouts[lay][0],
                                   layouts[lay][1], (ls_mla_form)f);
                size_t no = p.Tq * p.d.H * p.d.d_v, nl = p.Tq * p.d.H;
                double *o = malloc(no * sizeof *o), *lse = malloc(nl * sizeof *lse);
                reference_forward(o, lse, &p);
                forward(&p);
                double eo = tu_rel_err(p.o, o, no), el = lse_err(p.lse, lse, nl);
                cr_expect(eo < 1e-13 && el < 1e-13, "%s sel=%d layout %d: o %.3e lse %.3e",
                          form_name(p.form), with_sel, lay, eo, el);
                if (lay == 1)
                    for (size_t h = 0; h < p.d.H; h++)
                        cr_expect(p.lse[h] == -INFINITY && p.o[h * p.d.d_v] == 0,
                                  "query without keys: lse -inf, o 0");
                worst = fmax(worst, fmax(eo, el));
                free(o);
                free(lse);
                prob_free(&p);
            }
    mla_test_report("forward vs plain softmax (o, lse)", worst);
}

Test(kernels_mla_attn, backward_matches_finite_differences)
{
    double worst = 0;
    for (int with_sel = 0; with_sel < 2; with_sel++)
        for (int f = 0; f < 2; f++) {
            prob p = prob_make(23, with_sel, 4, 2, (ls_mla_form)f);
            grads g = grads_make(&p);
            backward(&p, &g);
            for (int i = 0; i < 5; i++) {
                double scale = 0;
                double e = mla_test_fd(loss, &p, input(&p, i), g.t[i], n_of(&p, i), 1e-5,
                                       &scale);
                cr_expect(e < 1e-6, "%s sel=%d d%s: worst rel err %.3e", form_name(p.form),
                          with_sel, input_name[i], e);
                cr_expect(scale > 1e-3, "%s sel=%d d%s is trivially small (%.3e)",
                          form_name(p.form), with_sel, input_name[i], scale);
                worst = fmax(worst, e);
            }
            grads_free(&g);
            prob_free(&p);
        }
    mla_test_report("backward vs central differences (all inputs)", worst);
}

Test(kernels_mla_attn, absorbed_equals_naive)
{
    double worst = 0;
    for (int with_sel = 0; with_sel < 2; with_sel++) {
        prob pn = prob_make(37, with_sel, 4, 2, LS_MLA_NAIVE);
        prob pa = prob_make(37, with_sel, 4, 2, LS_MLA_ABSORBED);
        grads gn = grads_make(&pn), ga = grads_make(&pa);
        backward(&pn, &gn);
        backward(&pa, &ga);
        size_t no = pn.Tq * pn.d.H * pn.d.d_v, nl = pn.Tq * pn.d.H;
        double e = fmax(tu_rel_err(pa.o, pn.o, no), lse_err(pa.lse, pn.lse, nl));
        cr_expect(e < 1e-12, "sel=%d forward: %.3e", with_sel, e);
        worst = fmax(worst, e);
        for (int i = 0; i < 5; i++) {
            e = tu_rel_err(ga.t[i], gn.t[i], n_of(&pn, i));
            cr_expect(e < 1e-12, "sel=%d d%s: %.3e", with_sel, input_name[i], e);
            worst = fmax(worst, e);
        }
        grads_free(&gn);
        grads_free(&ga);
        prob_free(&pn);
        prob_free(&pa);
    }
    mla_test_report("absorbed vs naive (o, lse, all grads)", worst);
}

/* A view of keys [s0, s0+n) of p as its own block. */
static prob key_block(const prob *p, size_t s0, size_t n, int64_t *sel_local)
{
    prob b = *p;
    b.Tk = n;
    b.k_pos0 = p->k_pos0 + (int64_t)s0;
    b.c_kv = p->c_kv + s0 * p->d.r_kv;
    b.k_pe = p->k_pe + s0 * p->d.d_r;
    b.sel = NULL;
    if (p->sel) {
        /* the global positions of p's candidates, localised to this block */
        int64_t *glob = malloc(p->Tq * p->k_sel * sizeof *glob);
        for (size_t i = 0; i < p->Tq * p->k_sel; i++)
            glob[i] = p->sel[i] < 0 ? -1 : p->sel[i] + p->k_pos0;
        ls_dsa_localize_f64(sel_local, glob, p->Tq, p->k_sel, b.k_pos0, n);
        free(glob);
        b.sel = sel_local;
    }
    return b;
}

Test(kernels_mla_attn, two_blocks_merged_equal_one)
{
    const size_t split = 3;
    double worst_f = 0, worst_b = 0;
    for (int with_sel = 0; with_sel < 2; with_sel++)
        for (int f = 0; f < 2; f++) {
            prob p = prob_make(41, with_sel, 4, 2, (ls_mla_form)f);
            const size_t H = p.d.H, dv = p.d.d_v, nl = p.Tq * H, no = nl * dv;
            int64_t *sa = malloc(p.Tq * KSEL * sizeof *sa), *sb = malloc(p.Tq * KSEL * sizeof *sb);
            prob A = key_block(&p, 0, split, sa), B = key_block(&p, split, p.Tk - split, sb);
            A.o = malloc(no * sizeof(double));
            A.lse = malloc(nl * sizeof(double));
            B.o = malloc(no * sizeof(double));
            B.lse = malloc(nl * sizeof(double));
            forward(&A);
            forward(&B);
            forward(&p);
            /* the merge rule of docs/model.md §0, written out */
            double *o = malloc(no * sizeof *o), *lse = malloc(nl * sizeof *lse);
            for (size_t i = 0; i < nl; i++) {
                double m = fmax(A.lse[i], B.lse[i]);
                if (m == -INFINITY) {
                    lse[i] = -INFINITY;
                    for (size_t j = 0; j < dv; j++) o[i * dv + j] = 0;
                    continue;
                }
                double ea = exp(A.lse[i] - m), eb = exp(B.lse[i] - m), a = ea + eb;
                for (size_t j = 0; j < dv; j++)
                    o[i * dv + j] = (ea * A.o[i * dv + j] + eb * B.o[i * dv + j]) / a;
                lse[i] = m + log(a);
            }
            double e = fmax(tu_rel_err(o, p.o, no), lse_err(lse, p.lse, nl));
            cr_expect(e < 1e-13, "%s sel=%d merged forward: %.3e", form_name(p.form), with_sel, e);
            worst_f = fmax(worst_f, e);

            /* backward per block with the global (o, lse): dq and dkv_b sum
             * over blocks, dc_kv and dk_pe land in each block's rows */
            grads g1 = grads_make(&p), g2 = grads_make(&p);
            backward(&p, &g1);
            prob *blocks[2] = {&A, &B};
            for (int bi = 0; bi < 2; bi++) {
                prob *b = blocks[bi];
                size_t s0 = bi == 0 ? 0 : split;
                double *ws = malloc(ls_mla_backward_workspace_f64(b->form, b->Tk, b->k_sel, &b->d) *
                                    sizeof *ws);
                ls_mla_backward_f64(g2.t[0], g2.t[1], g2.t[2] + s0 * p.d.r_kv,
                                    g2.t[3] + s0 * p.d.d_r, g2.t[4], p.o, p.lse, p.G, b->q_nope,
                                    b->q_pe, b->c_kv, b->k_pe, b->kv_b, b->sel, b->k_sel, b->Tq,
                                    b->Tk, &b->d, b->q_pos0, b->k_pos0, b->tau, b->form, ws);
                free(ws);
            }
            for (int i = 0; i < 5; i++) {
                e = tu_rel_err(g2.t[i], g1.t[i], n_of(&p, i));
                cr_expect(e < 1e-13, "%s sel=%d blockwise d%s: %.3e", form_name(p.form),
                          with_sel, input_name[i], e);
                worst_b = fmax(worst_b, e);
            }
            grads_free(&g1);
            grads_free(&g2);
            free(o);
            free(lse);
            free(A.o);
            free(A.lse);
            free(B.o);
            free(B.lse);
            free(sa);
            free(sb);
            prob_free(&p);
        }
    mla_test_report("two blocks + merge vs one block (forward)", worst_f);
    mla_test_report("two blocks, global o/lse vs one block (grads)", worst_b);
}

Test(kernels_mla_attn, backward_accumulates_and_accepts_null)
{
    for (int f = 0; f < 2; f++) {
        prob p = prob_make(53, 1, 4, 2, (ls_mla_form)f);
        grads g = grads_make(&p);
        backward(&p, &g);
        /* only dkv_b and dk_pe wanted, both pre-filled with 1 */
        size_t n4 = n_of(&p, 4), n3 = n_of(&p, 3);
        double *dkvb = malloc(n4 * sizeof *dkvb), *dkpe = malloc(n3 * sizeof *dkpe);
        for (size_t i = 0; i < n4; i++) dkvb[i] = 1;
        for (size_t i = 0; i < n3; i++) dkpe[i] = 1;
        double *ws = malloc(ls_mla_backward_workspace_f64(p.form, p.Tk, p.k_sel, &p.d) *
                            sizeof *ws);
        ls_mla_backward_f64(NULL, NULL, NULL, dkpe, dkvb, p.o, p.lse, p.G, p.q_nope, p.q_pe,
                            p.c_kv, p.k_pe, p.kv_b, p.sel, p.k_sel, p.Tq, p.Tk, &p.d, p.q_pos0,
                            p.k_pos0, p.tau, p.form, ws);
        for (size_t i = 0; i < n4; i++) dkvb[i] -= 1;
        for (size_t i = 0; i < n3; i++) dkpe[i] -= 1;
        double e = fmax(tu_rel_err(dkvb, g.t[4], n4), tu_rel_err(dkpe, g.t[3], n3));
        cr_expect(e < 1e-14, "%s: += with NULL siblings differs by %.3e", form_name(p.form), e);
        free(ws);
        free(dkvb);
        free(dkpe);
        grads_free(&g);
        prob_free(&p);
    }
}

Test(kernels_mla_attn, full_topk_selection_equals_causal)
{
    /* indexer top-k with k_top >= every query's visible count selects every
     * visible key, so the sparse attention must equal the causal one */
    enum { HI = 2, DI = 3 };
    for (int f = 0; f < 2; f++) {
        prob p = prob_make(61, 0, 4, 2, (ls_mla_form)f);
        const size_t no = p.Tq * p.d.H * p.d.d_v, nl = p.Tq * p.d.H;
        double qI[TQ * HI * DI], wI[TQ * HI], kI[TK * DI], sc[TQ * TK], ws[TK];
        int64_t glob[TQ * TK], loc[TQ * TK];
        mla_test_fill(qI, TQ * HI * DI, 1);
        mla_test_fill(wI, TQ * HI, 1);
        mla_test_fill(kI, TK * DI, 1);
        ls_dsa_topk_f64(glob, sc, qI, wI, kI, TQ, TK, HI, DI, p.q_pos0, p.k_pos0, TK, ws);
        ls_dsa_localize_f64(loc, glob, TQ, TK, p.k_pos0, TK);
        forward(&p);
        double *o = malloc(no * sizeof *o), *lse = malloc(nl * sizeof *lse);
        memcpy(o, p.o, no * sizeof *o);
        memcpy(lse, p.lse, nl * sizeof *lse);
        p.sel = loc;
        p.k_sel = TK;
        forward(&p);
        double e = fmax(tu_rel_err(p.o, o, no), lse_err(p.lse, lse, nl));
        cr_expect(e < 1e-13, "%s: dense top-k vs causal %.3e", form_name(p.form), e);
        p.sel = NULL;
        free(o);
        free(lse);
        prob_free(&p);
    }
}

/* The forward's queries run on OpenMP threads (mla.c), each query one thread's whole computation: the
 * same bits at 1, 2 and 3 threads, both forms, with and without a candidate list. */
Test(kernels_mla_attn, forward_bits_do_not_depend_on_the_thread_count)
{
    int saved = omp_get_max_threads();
    for (int with_sel = 0; with_sel < 2; with_sel++)
        for (int f = 0; f < 2; f++) {
            prob p = prob_make(23, with_sel, 4, 2, (ls_mla_form)f);
            size_t no = p.Tq * p.d.H * p.d.d_v, nl = p.Tq * p.d.H;
            double *o1 = malloc(no * sizeof *o1), *l1 = malloc(nl * sizeof *l1);
            omp_set_num_threads(1);
            forward(&p);
            memcpy(o1, p.o, no * sizeof *o1);
            memcpy(l1, p.lse, nl * sizeof *l1);
            for (int nt = 2; nt <= 3; nt++) {
                omp_set_num_threads(nt);
                forward(&p);
                cr_expect(memcmp(o1, p.o, no * sizeof *o1) == 0 && memcmp(l1, p.lse, nl * sizeof *l1) == 0,
                          "%s sel=%d: other bits at %d threads", form_name(p.form), with_sel, nt);
            }
            free(o1);
            free(l1);
            prob_free(&p);
        }
    omp_set_num_threads(saved);
}
