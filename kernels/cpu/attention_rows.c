/* attention_rows.c - the elementwise softmax rows of the GEMM path of
 * attention.c: between the GEMMs of one (query tile, key tile) pair, the
 * online-softmax step of the forward and the gradient step of the backward
 * (attention_internal.h), with their row-max and exp helpers.  Kept in one
 * file so the helpers inline into the row loops of both builds. */
#include <string.h>

#include "kernels/cpu/attention_internal.h"
#include "kernels/isa.h"

/* The elementwise loops of the GEMM path (softmax and its gradient between
 * the GEMMs) are written once as always-inline bodies and compiled twice on
 * x86-64: for the baseline ISA and for AVX2 with FMA, picked at run time
 * (the plan's ISA, kernels/isa.h: AVX2 or AVX-512 take the AVX2 build).
 * The bodies take fma as a constant: 1 only in the AVX2 clone. */
#if defined(__x86_64__) && defined(__GNUC__)
#define AVX2_CLONES 1
#define INLINE_BODY static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define INLINE_BODY static inline
#endif

#if LS_REAL_IS_F64
typedef int64_t real_bits;
typedef uint64_t real_ubits;
#else
typedef int32_t real_bits;
typedef uint32_t real_ubits;
#endif

/* A real's bits as a signed integer with the same order (negative values
 * have their magnitude bits flipped); its own inverse.  Integer selects
 * vectorise where GCC keeps float ones as branches (-ftrapping-math). */
INLINE_BODY real_bits order_key(real_bits b)
{
    return b ^ (real_bits)((real_ubits) - (real_ubits)(b < 0) >> 1);
}

#define LANES 8 /* independent accumulators of the row reductions (as written below) */

/* max(m, p[0..n)).  NaNs order beyond the infinities by their sign bit, so
 * the result may be a NaN or ignore one; exp_shift passes NaN on either way. */
INLINE_BODY ls_real row_max(const ls_real *p, size_t n, ls_real m)
{
    real_bits km, acc[LANES];
    memcpy(&km, &m, sizeof km);
    km = order_key(km);
    for (size_t i = 0; i < LANES; i++) {
        acc[i] = km;
    }
    size_t j = 0;
    for (; j + LANES <= n; j += LANES) {
#pragma omp simd
        for (size_t i = 0; i < LANES; i++) {
            real_bits b;
            memcpy(&b, p + j + i, sizeof b);
            b = order_key(b);
            acc[i] = b > acc[i] ? b : acc[i];
        }
    }
    for (; j < n; j++) {
        real_bits b;
        memcpy(&b, p + j, sizeof b);
        b = order_key(b);
        acc[0] = b > acc[0] ? b : acc[0];
    }
#define MAX2(a, b) ((b) > (a) ? (b) : (a))
    km = MAX2(MAX2(MAX2(acc[0], acc[4]), MAX2(acc[2], acc[6])),
              MAX2(MAX2(acc[1], acc[5]), MAX2(acc[3], acc[7])));
#undef MAX2
    km = order_key(km);
    memcpy(&m, &km, sizeof m);
    return m;
}

#if LS_REAL_IS_F64
/* p[j] = exp(p[j] - m) for j < n; returns their sum. */
INLINE_BODY ls_real exp_shift(ls_real *p, size_t n, ls_real m, int fma)
{
    (void)fma;
    ls_real sum = 0;
    for (size_t j = 0; j < n; j++) {
        p[j] = R_EXP(p[j] - m);
        sum += p[j];
    }
    return sum;
}
#else
/* exp(x) within 1e-7 relative for x in [-87, 88] (clamped outside; NaN and
 * +-inf give NaN).  Range reduction x = n ln2 + r, |r| <= ln2/2, a degree-7
 * Taylor polynomial, 2^n built in the exponent bits.  libm's expf does not
 * vectorise; this does (integer selects, as in order_key). */
INLINE_BODY float exp_approx(float x, int fma)
{
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    int32_t sx = (int32_t)ux; /* positive floats: the bits grow with the value */
    sx = sx < 0x42B00000 ? sx : 0x42B00000; /* x <= 88 */
    uint32_t uc = (uint32_t)sx; /* negative floats: the bits grow with |x| */
    uc = uc < 0xC2AE0000u ? uc : 0xC2AE0000u; /* x >= -87 */
    float xc;
    memcpy(&xc, &uc, sizeof xc);
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float n = xc * 1.44269504f + shift;
    const float nn = n - shift;
    const float r = (xc - nn * 0.693145751953125f) - nn * 1.428606765330187e-06f;
#define MADD(a, b, c) (fma ? fmaf(a, b, c) : (a) * (b) + (c))
    float p = 1.0f / 5040;
    p = MADD(p, r, 1.0f / 720);
    p = MADD(p, r, 1.0f / 120);
    p = MADD(p, r, 1.0f / 24);
    p = MADD(p, r, 1.0f / 6);
    p = MADD(p, r, 0.5f);
    p = MADD(p, r, 1.0f);
    p = MADD(p, r, 1.0f);
#undef MADD
    int32_t e;
    memcpy(&e, &n, sizeof e); /* low bits: n + 2^22 */
    e = (e - 0x4B400000 + 127) * (1 << 23);
    float s;
    memcpy(&s, &e, sizeof s);
    return p * s + (x - x); /* x - x: 0, or NaN for NaN and inf */
}

/* p[j] = exp(p[j] - m) for j < n; returns their sum. */
INLINE_BODY ls_real exp_shift(ls_real *p, size_t n, ls_real m, int fma)
{
    ls_real acc[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES) {
#pragma omp simd
        for (size_t i = 0; i < LANES; i++) {
            p[j + i] = exp_approx(p[j + i] - m, fma);
            acc[i] += p[j + i];
        }
    }
    for (; j < n; j++) {
        p[j] = exp_approx(p[j] - m, fma);
        acc[0] += p[j];
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
#endif

/* The body of ls_attn_rows_forward (attention_internal.h). */
INLINE_BODY void fwd_rows_body(const plan *pl, const pair_span *g, ls_real *S, ls_real *O,
                               ls_real *mx, ls_real *l, int fma)
{
    const size_t nc = g->nc, hd = pl->hd;
    for (size_t r = g->r0; r < g->R; r++) {
        ls_real *z = S + (r - g->r0) * nc, *orow = O + r * hd;
        const size_t nv =
            visible(g->t0 + r / pl->grp, g->s0, g->nkt, pl->q_pos0, pl->k_pos0, pl->causal);
        const ls_real m = row_max(z, nv, mx[r]);
        const ls_real sum = exp_shift(z, nv, m, fma);
        for (size_t j = nv; j < nc; j++) {
            z[j] = 0;
        }
        /* m is finite here (finite inputs): the row sees a key of the tile.
         * Rescale by exp(mx - m), unless that is 1 (no new max) or the row
         * has nothing yet (mx = -inf: l and the output row are 0). */
        if (m == mx[r] || mx[r] == -INFINITY) {
            l[r] += sum;
        } else {
            const ls_real scale = R_EXP(mx[r] - m);
#pragma omp simd
            for (size_t e = 0; e < hd; e++) {
                orow[e] *= scale;
            }
            l[r] = l[r] * scale + sum;
        }
        mx[r] = m;
    }
}

/* The body of ls_attn_rows_backward (attention_internal.h). */
INLINE_BODY void bwd_rows_body(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                               const ls_real *L, const ls_real *D, int fma)
{
    const size_t nc = g->nc;
    for (size_t r = g->r0; r < g->R; r++) {
        ls_real *p = P + (r - g->r0) * nc;
        const size_t nv =
            L[r] == -INFINITY
                ? 0
                : visible(g->t0 + r / pl->grp, g->s0, g->nkt, pl->q_pos0, pl->k_pos0, pl->causal);
        exp_shift(p, nv, L[r], fma);
        for (size_t j = nv; j < nc; j++) {
            p[j] = 0;
        }
        if (dS != NULL) {
            ls_real *ds = dS + (r - g->r0) * nc;
            const ls_real Dr = D[r];
#pragma omp simd
            for (size_t j = 0; j < nc; j++) {
                ds[j] = p[j] * (ds[j] - Dr);
            }
        }
    }
}

static void fwd_rows_base(const plan *pl, const pair_span *g, ls_real *S, ls_real *O,
                          ls_real *mx, ls_real *l)
{
    fwd_rows_body(pl, g, S, O, mx, l, 0);
}

static void bwd_rows_base(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                          const ls_real *L, const ls_real *D)
{
    bwd_rows_body(pl, g, P, dS, L, D, 0);
}

#ifdef AVX2_CLONES
TARGET_AVX2 static void fwd_rows_avx2(const plan *pl, const pair_span *g, ls_real *S,
                                      ls_real *O, ls_real *mx, ls_real *l)
{
    fwd_rows_body(pl, g, S, O, mx, l, 1);
}

TARGET_AVX2 static void bwd_rows_avx2(const plan *pl, const pair_span *g, ls_real *P,
                                      ls_real *dS, const ls_real *L, const ls_real *D)
{
    bwd_rows_body(pl, g, P, dS, L, D, 1);
}
#endif

void LS_K(ls_attn_rows_forward)(const plan *pl, const pair_span *g, ls_real *S, ls_real *O,
                                ls_real *mx, ls_real *l)
{
#ifdef AVX2_CLONES
    if (pl->isa >= LS_ISA_AVX2) {
        fwd_rows_avx2(pl, g, S, O, mx, l);
        return;
    }
#endif
    fwd_rows_base(pl, g, S, O, mx, l);
}

void LS_K(ls_attn_rows_backward)(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                                 const ls_real *L, const ls_real *D)
{
#ifdef AVX2_CLONES
    if (pl->isa >= LS_ISA_AVX2) {
        bwd_rows_avx2(pl, g, P, dS, L, D);
        return;
    }
#endif
    bwd_rows_base(pl, g, P, dS, L, D);
}
