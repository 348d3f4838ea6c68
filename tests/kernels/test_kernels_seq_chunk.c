/* test_kernels_seq_chunk.c - the chunked (WY / UT) Gated DeltaNet
 * (ls_gdn_forward_chunked, ls_gdn_backward_chunked) against the token
 * recurrence it evaluates in another order: float64 to ~1e-12,
 * float32 against the float64 recurrence to ~1e-5, for realistic gates
 * (g in [-5, 0]) and strongly decaying ones (g = -20 at some tokens), T
 * below, at and off multiples of the chunk, S_in NULL or not, S_out NULL or
 * not or in place, and the same bits for any number of threads. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/gdn.h"
#include "tests/kernels/kernels_seq_f32_wrap.h"
#include "tests/support/test_util.h"

#define TOL64 1e-12
#define TOL32 1e-5

typedef struct {
    size_t T, Hk, Hv, dk, dv;
    double *q, *k, *v, *g, *beta, *S0;
} gdn_in;

/* Normalised q (scaled by dk^-1/2) and k as the layer gives them; gates per
 * `decay`: 0 realistic, 1 with g = -20 at every fifth token, beta in (0, 1). */
static gdn_in make_in(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, int decay,
                      int f32, uint64_t seed)
{
    uint64_t s = seed;
    gdn_in x = {.T = T, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv};
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    x.q = tu_rand(&s, nq, -1, 1);
    x.k = tu_rand(&s, nq, -1, 1);
    for (size_t r = 0; r < T * Hk; r++) {
        double a = 0, b = 0;
        for (size_t i = 0; i < dk; i++) {
            a += x.q[r * dk + i] * x.q[r * dk + i];
            b += x.k[r * dk + i] * x.k[r * dk + i];
        }
        for (size_t i = 0; i < dk; i++) {
            x.q[r * dk + i] /= sqrt(a * (double)dk);
            x.k[r * dk + i] /= sqrt(b);
        }
    }
    x.v = tu_rand(&s, nv, -1, 1);
    x.g = tu_rand(&s, ng, -5, 0);
    x.beta = tu_rand(&s, ng, 0.01, 0.99);
    x.S0 = tu_rand(&s, nS, -1, 1);
    if (decay) {
        for (size_t i = 0; i < ng; i += 5) {
            x.g[i] = -20;
        }
    } else {
        /* mostly slow gates, as trained models have them */
        for (size_t i = 0; i < ng; i++) {
            if (i % 7 != 0) {
                x.g[i] *= 0.02;
            }
        }
    }
    if (f32) {
        tu_round_f32(x.q, nq);
        tu_round_f32(x.k, nq);
        tu_round_f32(x.v, nv);
        tu_round_f32(x.g, ng);
        tu_round_f32(x.beta, ng);
        tu_round_f32(x.S0, nS);
    }
    return x;
}

/* Workspace for both the recurrent and the chunked backward. */
static size_t ws_both(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv)
{
    const size_t a = ls_gdn_backward_recurrent_workspace_f64(T, Hk, Hv, dk, dv);
    const size_t b = ls_gdn_backward_chunked_workspace_f64(T, Hk, Hv, dk, dv);
    return a > b ? a : b;
}

static void free_in(gdn_in *x)
{
    free(x->q); free(x->k); free(x->v); free(x->g); free(x->beta); free(x->S0);
}

static void check(const char *what, const double *got, const double *want, size_t n, double tol)
{
    double e = tu_rel_err(got, want, n);
    tu_report(what, e, tol);
    cr_expect(e <= tol, "%s: relative error %.3e > %.1e", what, e, tol);
}

/* Chunked vs recurrent forward, float64 and float32, with and without S_in. */
static void fwd_case(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, int decay,
                     uint64_t seed)
{
    const size_t nv = T * Hv * dv, nS = Hv * dk * dv;
    char name[128];
    for (int with_s = 0; with_s < 2; with_s++) {
        gdn_in x = make_in(T, Hk, Hv, dk, dv, decay, 0, seed);
        const double *Si = with_s ? x.S0 : NULL;
        double *o_r = tu_alloc(nv), *S_r = tu_alloc(nS), *o_c = tu_alloc(nv), *S_c = tu_alloc(nS);
        ls_gdn_forward_recurrent_f64(o_r, S_r, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        ls_gdn_forward_chunked_f64(o_c, S_c, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        snprintf(name, sizeof name, "f64 T=%zu H=%zu/%zu d=%zu/%zu%s%s o", T, Hk, Hv, dk, dv,
                 decay ? " decay" : "", with_s ? " S_in" : "");
        check(name, o_c, o_r, nv, TOL64);
        name[strlen(name) - 1] = 'S';
        check(name, S_c, S_r, nS, TOL64);
        /* S_out NULL gives the same o; S_out == S_in updates in place */
        double *o_n = tu_alloc(nv), *S_ip = tu_copy(x.S0, nS);
        ls_gdn_forward_chunked_f64(o_n, NULL, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        cr_expect(tu_max_diff(o_n, o_c, nv) == 0, "%s: S_out NULL changes o", name);
        if (with_s) {
            ls_gdn_forward_chunked_f64(o_n, S_ip, x.q, x.k, x.v, x.g, x.beta, S_ip, T, Hk, Hv, dk,
                                       dv);
            cr_expect(tu_max_diff(S_ip, S_c, nS) == 0 && tu_max_diff(o_n, o_c, nv) == 0,
                      "%s: in-place state differs", name);
        }
        free_in(&x);
        free(o_n); free(S_ip);

        /* float32 chunked and float32 recurrence, both against float64 */
        x = make_in(T, Hk, Hv, dk, dv, decay, 1, seed);
        Si = with_s ? x.S0 : NULL;
        ls_gdn_forward_recurrent_f64(o_r, S_r, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        ks32_gdn_use(2);
        ks32_gdn_forward(o_c, S_c, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        snprintf(name, sizeof name, "f32 T=%zu H=%zu/%zu d=%zu/%zu%s%s o", T, Hk, Hv, dk, dv,
                 decay ? " decay" : "", with_s ? " S_in" : "");
        check(name, o_c, o_r, nv, TOL32);
        name[strlen(name) - 1] = 'S';
        check(name, S_c, S_r, nS, TOL32);
        ks32_gdn_use(1);
        ks32_gdn_forward(o_c, S_c, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        ks32_gdn_use(0);
        cr_log_info("  (f32 recurrence itself: o %.3e, S %.3e)", tu_rel_err(o_c, o_r, nv),
                    tu_rel_err(S_c, S_r, nS));
        free_in(&x);
        free(o_r); free(S_r); free(o_c); free(S_c);
    }
}

Test(kernels_seq_chunk, forward_short)
{
    fwd_case(1, 1, 1, 4, 3, 0, 1);
    fwd_case(63, 2, 4, 16, 16, 0, 2);
}

Test(kernels_seq_chunk, forward_multiple)
{
    fwd_case(64, 2, 4, 16, 16, 0, 3);
    fwd_case(256, 2, 4, 16, 16, 0, 4);
    fwd_case(256, 2, 4, 16, 16, 1, 5);
}

Test(kernels_seq_chunk, forward_ragged)
{
    fwd_case(65, 1, 2, 5, 70, 0, 6);
    fwd_case(300, 2, 4, 16, 16, 1, 7);
    fwd_case(201, 1, 1, 128, 64, 0, 8);
    fwd_case(130, 2, 2, 64, 128, 1, 9);
}

/* The same bits for 1 and several threads. */
Test(kernels_seq_chunk, forward_threads)
{
#ifdef _OPENMP
    const size_t T = 700, Hk = 2, Hv = 4, dk = 16, dv = 16, nv = T * Hv * dv, nS = Hv * dk * dv;
    gdn_in x = make_in(T, Hk, Hv, dk, dv, 0, 0, 11);
    double *o1 = tu_alloc(nv), *S1 = tu_alloc(nS), *o2 = tu_alloc(nv), *S2 = tu_alloc(nS);
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    ls_gdn_forward_chunked_f64(o1, S1, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
    omp_set_num_threads(nt > 1 ? nt : 3);
    ls_gdn_forward_chunked_f64(o2, S2, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
    omp_set_num_threads(nt);
    cr_expect(memcmp(o1, o2, nv * sizeof *o1) == 0 && memcmp(S1, S2, nS * sizeof *S1) == 0,
              "chunked forward depends on the thread count");
    free_in(&x);
    free(o1); free(S1); free(o2); free(S2);
#endif
}

/* Chunked vs recurrent backward (dS_out and S_in present or not), float64,
 * and the float32 chunked backward against the float64 recurrence. */
static void bwd_case(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, int decay,
                     uint64_t seed)
{
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    const size_t sz[6] = {nq, nq, nv, ng, ng, nS};
    const char *names[6] = {"dq", "dk", "dv", "dg", "dbeta", "dS_in"};
    char name[128];
    for (int with_s = 0; with_s < 2; with_s++) {
        for (int f32 = 0; f32 < 2; f32++) {
            gdn_in x = make_in(T, Hk, Hv, dk, dv, decay, f32, seed);
            uint64_t s = seed + 99;
            double *dO = tu_rand(&s, nv, -1, 1), *dSo = tu_rand(&s, nS, -1, 1);
            if (f32) {
                tu_round_f32(dO, nv);
                tu_round_f32(dSo, nS);
            }
            const double *Si = with_s ? x.S0 : NULL, *dSi = with_s ? dSo : NULL;
            double *r[6], *c[6];
            for (int i = 0; i < 6; i++) {
                r[i] = tu_alloc(sz[i]);
                c[i] = tu_alloc(sz[i]);
            }
            double *ws = tu_alloc(ws_both(T, Hk, Hv, dk, dv));
            ls_gdn_backward_recurrent_f64(r[0], r[1], r[2], r[3], r[4], r[5], dO, dSi, x.q, x.k,
                                          x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv, ws);
            if (f32) {
                ks32_gdn_use(2);
                ks32_gdn_backward(c[0], c[1], c[2], c[3], c[4], c[5], dO, dSi, x.q, x.k, x.v,
                                  x.g, x.beta, Si, T, Hk, Hv, dk, dv);
                ks32_gdn_use(0);
            } else {
                ls_gdn_backward_chunked_f64(c[0], c[1], c[2], c[3], c[4], c[5], dO, dSi, x.q, x.k,
                                            x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv, ws);
            }
            for (int i = 0; i < 6; i++) {
                snprintf(name, sizeof name, "%s bwd T=%zu H=%zu/%zu d=%zu/%zu%s%s %s",
                         f32 ? "f32" : "f64", T, Hk, Hv, dk, dv, decay ? " decay" : "",
                         with_s ? " S_in,dS_out" : "", names[i]);
                check(name, c[i], r[i], sz[i], f32 ? TOL32 : TOL64);
                free(r[i]);
                free(c[i]);
            }
            free_in(&x);
            free(dO); free(dSo); free(ws);
        }
    }
}

Test(kernels_seq_chunk, backward_short)
{
    bwd_case(1, 1, 1, 4, 3, 0, 21);
    bwd_case(63, 2, 4, 16, 16, 1, 22);
}

Test(kernels_seq_chunk, backward_multiple)
{
    bwd_case(64, 2, 4, 16, 16, 0, 23);
    bwd_case(256, 2, 4, 16, 16, 0, 24);
    bwd_case(256, 2, 4, 16, 16, 1, 25);
}

Test(kernels_seq_chunk, backward_ragged)
{
    bwd_case(65, 1, 2, 5, 70, 0, 26);
    bwd_case(300, 2, 4, 16, 16, 1, 27);
    bwd_case(201, 1, 1, 128, 64, 0, 28);
    bwd_case(130, 2, 2, 64, 128, 1, 29);
    bwd_case(5000, 2, 4, 16, 16, 0, 30); /* several checkpoint segments (ch = 128) */
}

/* The same bits for 1 and several threads. */
Test(kernels_seq_chunk, backward_threads)
{
#ifdef _OPENMP
    const size_t T = 700, Hk = 2, Hv = 4, dk = 16, dv = 16;
    const size_t sz[6] = {T * Hk * dk, T * Hk * dk, T * Hv * dv, T * Hv, T * Hv, Hv * dk * dv};
    gdn_in x = make_in(T, Hk, Hv, dk, dv, 0, 0, 31);
    uint64_t s = 32;
    double *dO = tu_rand(&s, sz[2], -1, 1), *dSo = tu_rand(&s, sz[5], -1, 1);
    double *ws = tu_alloc(ws_both(T, Hk, Hv, dk, dv));
    double *a[6], *b[6];
    for (int i = 0; i < 6; i++) {
        a[i] = tu_alloc(sz[i]);
        b[i] = tu_alloc(sz[i]);
    }
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    ls_gdn_backward_chunked_f64(a[0], a[1], a[2], a[3], a[4], a[5], dO, dSo, x.q, x.k, x.v, x.g,
                                x.beta, x.S0, T, Hk, Hv, dk, dv, ws);
    omp_set_num_threads(nt > 1 ? nt : 3);
    ls_gdn_backward_chunked_f64(b[0], b[1], b[2], b[3], b[4], b[5], dO, dSo, x.q, x.k, x.v, x.g,
                                x.beta, x.S0, T, Hk, Hv, dk, dv, ws);
    omp_set_num_threads(nt);
    for (int i = 0; i < 6; i++) {
        cr_expect(memcmp(a[i], b[i], sz[i] * sizeof *a[i]) == 0,
                  "chunked backward output %d depends on the thread count", i);
        free(a[i]);
        free(b[i]);
    }
    free_in(&x);
    free(dO); free(dSo); free(ws);
#endif
}

/* The entry points take the chunked form exactly where they say they do
 * (T >= 64 and dk dv >= 6144 forward, 2304 backward), the token recurrence
 * elsewhere: same bits. */
Test(kernels_seq_chunk, entry_points)
{
    const struct {
        size_t T, dk, dv;
        int chunked, chunked_bwd;
    } c[5] = {{64, 96, 64, 1, 1}, {63, 96, 96, 0, 0}, {200, 16, 16, 0, 0},
              {100, 64, 36, 0, 1}, {100, 61, 100, 0, 1}};
    for (int i = 0; i < 5; i++) {
        const size_t T = c[i].T, Hk = 1, Hv = 2, dk = c[i].dk, dv = c[i].dv;
        const size_t nv = T * Hv * dv, nS = Hv * dk * dv, ng = T * Hv;
        gdn_in x = make_in(T, Hk, Hv, dk, dv, 0, 0, 40 + (uint64_t)i);
        double *o1 = tu_alloc(nv), *o2 = tu_alloc(nv), *S1 = tu_alloc(nS), *S2 = tu_alloc(nS);
        ls_gdn_forward_f64(o1, S1, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
        (c[i].chunked ? ls_gdn_forward_chunked_f64 : ls_gdn_forward_recurrent_f64)(
            o2, S2, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
        cr_expect(memcmp(o1, o2, nv * sizeof *o1) == 0 && memcmp(S1, S2, nS * sizeof *S1) == 0,
                  "T=%zu dk=%zu dv=%zu: ls_gdn_forward is not the %s form", T, dk, dv,
                  c[i].chunked ? "chunked" : "recurrent");
        const size_t nws = ls_gdn_backward_workspace_f64(T, Hk, Hv, dk, dv);
        cr_expect(nws == (c[i].chunked_bwd ? ls_gdn_backward_chunked_workspace_f64
                                           : ls_gdn_backward_recurrent_workspace_f64)(
                             T, Hk, Hv, dk, dv),
                  "T=%zu dk=%zu dv=%zu: workspace is not the chosen form's", T, dk, dv);
        double *ws = tu_alloc(ws_both(T, Hk, Hv, dk, dv));
        double *dg1 = tu_alloc(ng), *dg2 = tu_alloc(ng), *dq = tu_alloc(T * dk);
        double *dk_ = tu_alloc(T * dk), *dv_ = tu_alloc(nv), *db = tu_alloc(ng);
        ls_gdn_backward_f64(dq, dk_, dv_, dg1, db, NULL, o1, NULL, x.q, x.k, x.v, x.g, x.beta,
                            x.S0, T, Hk, Hv, dk, dv, ws);
        (c[i].chunked_bwd ? ls_gdn_backward_chunked_f64 : ls_gdn_backward_recurrent_f64)(
            dq, dk_, dv_, dg2, db, NULL, o1, NULL, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv,
            dk, dv, ws);
        cr_expect(memcmp(dg1, dg2, ng * sizeof *dg1) == 0,
                  "T=%zu dk=%zu dv=%zu: ls_gdn_backward is not the %s form", T, dk, dv,
                  c[i].chunked_bwd ? "chunked" : "recurrent");
        free_in(&x);
        free(o1); free(o2); free(S1); free(S2); free(ws); free(dg1); free(dg2); free(dq);
        free(dk_); free(dv_); free(db);
    }
}

/* A prompt in pieces (chunk boundaries at other places) with the carried
 * state handed on gives the one-pass result to rounding, forward and
 * backward (the state gradient chained back), in the chunked form. */
Test(kernels_seq_chunk, pieces)
{
    const size_t T = 300, Hk = 1, Hv = 2, dk = 32, dv = 24, pieces[3] = {100, 37, 163};
    const size_t nq = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv, nS = Hv * dk * dv;
    const size_t sz[6] = {nq, nq, nv, ng, ng, nS};
    const char *names[6] = {"dq", "dk", "dv", "dg", "dbeta", "dS_in"};
    gdn_in x = make_in(T, Hk, Hv, dk, dv, 0, 0, 51);
    for (size_t i = 0; i < ng; i++) {
        x.g[i] *= 0.05; /* slow gates: what a piece hands on matters to the next */
    }
    uint64_t s = 52;
    double *dO = tu_rand(&s, nv, -1, 1), *dSf = tu_rand(&s, nS, -1, 1);
    double *o1 = tu_alloc(nv), *S1 = tu_alloc(nS), *o3 = tu_alloc(nv), *Sp[4], *a[6], *b[6];
    for (int i = 0; i < 6; i++) {
        a[i] = tu_alloc(sz[i]);
        b[i] = tu_alloc(sz[i]);
    }
    double *ws = tu_alloc(ls_gdn_backward_chunked_workspace_f64(T, Hk, Hv, dk, dv));
    ls_gdn_forward_chunked_f64(o1, S1, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
    ls_gdn_backward_chunked_f64(a[0], a[1], a[2], a[3], a[4], a[5], dO, dSf, x.q, x.k, x.v, x.g,
                                x.beta, x.S0, T, Hk, Hv, dk, dv, ws);
    size_t off[4] = {0};
    Sp[0] = tu_copy(x.S0, nS);
    for (int p = 0; p < 3; p++) {
        const size_t t0 = off[p], n = pieces[p];
        off[p + 1] = t0 + n;
        Sp[p + 1] = tu_alloc(nS);
        ls_gdn_forward_chunked_f64(o3 + t0 * Hv * dv, Sp[p + 1], x.q + t0 * Hk * dk,
                                   x.k + t0 * Hk * dk, x.v + t0 * Hv * dv, x.g + t0 * Hv,
                                   x.beta + t0 * Hv, Sp[p], n, Hk, Hv, dk, dv);
    }
    check("pieces forward o", o3, o1, nv, TOL64);
    check("pieces forward S_out", Sp[3], S1, nS, TOL64);
    double *dSc = tu_copy(dSf, nS);
    for (int p = 2; p >= 0; p--) {
        const size_t t0 = off[p], n = pieces[p];
        ls_gdn_backward_chunked_f64(b[0] + t0 * Hk * dk, b[1] + t0 * Hk * dk, b[2] + t0 * Hv * dv,
                                    b[3] + t0 * Hv, b[4] + t0 * Hv, b[5], dO + t0 * Hv * dv, dSc,
                                    x.q + t0 * Hk * dk, x.k + t0 * Hk * dk, x.v + t0 * Hv * dv,
                                    x.g + t0 * Hv, x.beta + t0 * Hv, Sp[p], n, Hk, Hv, dk, dv,
                                    ws);
        memcpy(dSc, b[5], nS * sizeof *dSc);
    }
    char name[64];
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "pieces backward %s", names[i]);
        check(name, b[i], a[i], sz[i], TOL64);
        free(a[i]);
        free(b[i]);
    }
    for (int p = 0; p < 4; p++) {
        free(Sp[p]);
    }
    free_in(&x);
    free(dO); free(dSf); free(o1); free(S1); free(o3); free(ws); free(dSc);
}
