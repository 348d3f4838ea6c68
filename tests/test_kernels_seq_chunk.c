/* test_kernels_seq_chunk.c - the chunked (WY / UT) Gated DeltaNet against
 * the token recurrence it evaluates in another order: float64 to ~1e-12,
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
#include "kernels_seq_f32_wrap.h"
#include "test_util.h"

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
        ls_gdn_forward_f64(o_c, S_c, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        snprintf(name, sizeof name, "f64 T=%zu H=%zu/%zu d=%zu/%zu%s%s o", T, Hk, Hv, dk, dv,
                 decay ? " decay" : "", with_s ? " S_in" : "");
        check(name, o_c, o_r, nv, TOL64);
        name[strlen(name) - 1] = 'S';
        check(name, S_c, S_r, nS, TOL64);
        /* S_out NULL gives the same o; S_out == S_in updates in place */
        double *o_n = tu_alloc(nv), *S_ip = tu_copy(x.S0, nS);
        ls_gdn_forward_f64(o_n, NULL, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        cr_expect(tu_max_diff(o_n, o_c, nv) == 0, "%s: S_out NULL changes o", name);
        if (with_s) {
            ls_gdn_forward_f64(o_n, S_ip, x.q, x.k, x.v, x.g, x.beta, S_ip, T, Hk, Hv, dk, dv);
            cr_expect(tu_max_diff(S_ip, S_c, nS) == 0 && tu_max_diff(o_n, o_c, nv) == 0,
                      "%s: in-place state differs", name);
        }
        free_in(&x);
        free(o_n); free(S_ip);

        /* float32 chunked and float32 recurrence, both against float64 */
        x = make_in(T, Hk, Hv, dk, dv, decay, 1, seed);
        Si = with_s ? x.S0 : NULL;
        ls_gdn_forward_recurrent_f64(o_r, S_r, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        ks32_gdn_forward(o_c, S_c, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
        snprintf(name, sizeof name, "f32 T=%zu H=%zu/%zu d=%zu/%zu%s%s o", T, Hk, Hv, dk, dv,
                 decay ? " decay" : "", with_s ? " S_in" : "");
        check(name, o_c, o_r, nv, TOL32);
        name[strlen(name) - 1] = 'S';
        check(name, S_c, S_r, nS, TOL32);
        ks32_gdn_forward_recurrent(o_c, S_c, x.q, x.k, x.v, x.g, x.beta, Si, T, Hk, Hv, dk, dv);
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
    ls_gdn_forward_f64(o1, S1, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
    omp_set_num_threads(nt > 1 ? nt : 3);
    ls_gdn_forward_f64(o2, S2, x.q, x.k, x.v, x.g, x.beta, x.S0, T, Hk, Hv, dk, dv);
    omp_set_num_threads(nt);
    cr_expect(memcmp(o1, o2, nv * sizeof *o1) == 0 && memcmp(S1, S2, nS * sizeof *S1) == 0,
              "chunked forward depends on the thread count");
    free_in(&x);
    free(o1); free(S1); free(o2); free(S2);
#endif
}
