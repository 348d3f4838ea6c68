/* test_kernels_attn_perf.c - the fast attention paths (kernels/cpu/attention.c:
 * query rows of a kv head stacked into tiles, scores and products by GEMM,
 * online softmax between them) against a plain per-row reference written
 * here from docs/model.md §0, at shapes that cross the tile edges: Tq and Tk not
 * multiples of the tiles, q_pos0 != k_pos0, causal tiles fully and partly
 * masked, GQA ratios 2 and 4, rows that see no key, keys no query sees.
 * Also: the backward accumulates (+=) and leaves unseen keys untouched; any
 * subset of dq/dk/dv gives the same bits as all three; 1..4 threads give the
 * same bits (fused and two-pass backward); one query per call (decode) and
 * blocks of 5 keys (the scalar path), merged, agree with one tiled call;
 * float32 against float64.
 * float64 errors are relative to the tensor's largest element. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <omp.h>

#include "kernels/attention.h"
#include "tests/kernels/kernels_seq_f32_wrap.h"
#include "tests/support/test_util.h"

#define REF_TOL 1e-13 /* float64 kernel vs the reference */
#define F32_FWD_TOL 5e-6
#define F32_BWD_TOL 2e-5

typedef struct {
    size_t Tq, Tk, H, Hkv, hd;
    int64_t qp, kp; /* q_pos0, k_pos0 */
    int causal;
    double tau;
    double qk_range; /* q, k uniform in [-qk_range, qk_range] */
} shape;

static void check(const char *label, const char *what, double err, double tol)
{
    char name[128];
    snprintf(name, sizeof name, "%s: %s", label, what);
    tu_report(name, err, tol);
    cr_expect(err <= tol, "%s: error %.3e > %.1e", name, err, tol);
}

static int vis(const shape *d, size_t t, size_t s)
{
    return !d->causal || d->kp + (int64_t)s <= d->qp + (int64_t)t;
}

/* Reference forward and backward, row by row: o, lse and dq, dk, dv added
 * onto the given arrays. */
static void reference(double *o, double *lse, double *dq, double *dk, double *dv,
                      const double *dO, const double *q, const double *k, const double *v,
                      const shape *d)
{
    const size_t H = d->H, Hkv = d->Hkv, hd = d->hd, grp = H / Hkv;
    double *z = tu_alloc(d->Tk), *P = tu_alloc(d->Tk);
    for (size_t t = 0; t < d->Tq; t++) {
        for (size_t h = 0; h < H; h++) {
            const size_t kh = h / grp, row = (t * H + h) * hd;
            double m = -INFINITY;
            for (size_t s = 0; s < d->Tk; s++) {
                if (vis(d, t, s)) {
                    z[s] = d->tau * tu_dot(q + row, k + (s * Hkv + kh) * hd, hd);
                    m = z[s] > m ? z[s] : m;
                }
            }
            memset(o + row, 0, hd * sizeof *o);
            if (m == -INFINITY) {
                lse[t * H + h] = -INFINITY;
                continue;
            }
            double sum = 0;
            for (size_t s = 0; s < d->Tk; s++) {
                P[s] = vis(d, t, s) ? exp(z[s] - m) : 0;
                sum += P[s];
            }
            lse[t * H + h] = m + log(sum);
            for (size_t s = 0; s < d->Tk; s++) {
                P[s] /= sum;
                for (size_t e = 0; e < hd; e++) {
                    o[row + e] += P[s] * v[(s * Hkv + kh) * hd + e];
                }
            }
            double D = tu_dot(dO + row, o + row, hd);
            for (size_t s = 0; s < d->Tk; s++) {
                if (P[s] == 0) {
                    continue;
                }
                const size_t kr = (s * Hkv + kh) * hd;
                const double dz = P[s] * (tu_dot(dO + row, v + kr, hd) - D);
                for (size_t e = 0; e < hd; e++) {
                    dq[row + e] += d->tau * dz * k[kr + e];
                    dk[kr + e] += d->tau * dz * q[row + e];
                    dv[kr + e] += P[s] * dO[row + e];
                }
            }
        }
    }
    free(z);
    free(P);
}

typedef struct {
    double *q, *k, *v, *dO;        /* inputs */
    double *dq0, *dk0, *dv0;       /* what the accumulators hold before */
    size_t nq, nk, nl;             /* element counts: q-like, k-like, lse */
} inputs;

static inputs make_inputs(const shape *d, uint64_t seed)
{
    inputs in;
    uint64_t s = seed;
    in.nq = d->Tq * d->H * d->hd;
    in.nk = d->Tk * d->Hkv * d->hd;
    in.nl = d->Tq * d->H;
    /* float-representable, so that the float32 kernels see the same inputs */
    in.q = tu_rand_f32(&s, in.nq, -d->qk_range, d->qk_range);
    in.k = tu_rand_f32(&s, in.nk, -d->qk_range, d->qk_range);
    in.v = tu_rand_f32(&s, in.nk, -1, 1);
    in.dO = tu_rand_f32(&s, in.nq, -1, 1);
    in.dq0 = tu_rand_f32(&s, in.nq, -1, 1);
    in.dk0 = tu_rand_f32(&s, in.nk, -1, 1);
    in.dv0 = tu_rand_f32(&s, in.nk, -1, 1);
    return in;
}

static void free_inputs(inputs *in)
{
    free(in->q); free(in->k); free(in->v); free(in->dO);
    free(in->dq0); free(in->dk0); free(in->dv0);
}

/* The float64 kernels' o, lse, dq, dk, dv (the gradients added onto the
 * dq0/dk0/dv0 of in; NULL outputs skipped) with the given thread count. */
static void run_f64(double *out[5], const inputs *in, const shape *d, int threads)
{
    omp_set_num_threads(threads);
    ls_attn_block_forward_f64(out[0], out[1], in->q, in->k, in->v, d->Tq, d->Tk, d->H, d->Hkv,
                              d->hd, d->qp, d->kp, d->causal, d->tau);
    if (out[2] != NULL) {
        memcpy(out[2], in->dq0, in->nq * sizeof(double));
    }
    if (out[3] != NULL) {
        memcpy(out[3], in->dk0, in->nk * sizeof(double));
    }
    if (out[4] != NULL) {
        memcpy(out[4], in->dv0, in->nk * sizeof(double));
    }
    ls_attn_block_backward_f64(out[2], out[3], out[4], in->dO, in->q, in->k, in->v, out[0],
                               out[1], d->Tq, d->Tk, d->H, d->Hkv, d->hd, d->qp, d->kp, d->causal,
                               d->tau);
    omp_set_num_threads(1);
}

static void alloc_outputs(double *out[5], const inputs *in)
{
    const size_t sz[5] = {in->nq, in->nl, in->nq, in->nk, in->nk};
    for (int i = 0; i < 5; i++) {
        out[i] = tu_alloc(sz[i]);
    }
}

static void free_outputs(double *out[5])
{
    for (int i = 0; i < 5; i++) {
        free(out[i]);
    }
}

static const char *const NAMES[5] = {"o", "lse", "dq", "dk", "dv"};

/* Everything this file checks, for one shape. */
static void attn_case(const shape *d, uint64_t seed, const char *label)
{
    inputs in = make_inputs(d, seed);
    const size_t sz[5] = {in.nq, in.nl, in.nq, in.nk, in.nk};
    char what[96];

    /* the reference; its gradients start from the same accumulators */
    double *ref[5];
    alloc_outputs(ref, &in);
    memcpy(ref[2], in.dq0, in.nq * sizeof(double));
    memcpy(ref[3], in.dk0, in.nk * sizeof(double));
    memcpy(ref[4], in.dv0, in.nk * sizeof(double));
    reference(ref[0], ref[1], ref[2], ref[3], ref[4], in.dO, in.q, in.k, in.v, d);
    size_t empty = 0;
    for (size_t i = 0; i < in.nl; i++) {
        empty += ref[1][i] == -INFINITY;
    }

    /* float64, 1 thread (fused backward), against the reference */
    double *one[5];
    alloc_outputs(one, &in);
    run_f64(one, &in, d, 1);
    for (int i = 0; i < 5; i++) {
        snprintf(what, sizeof what, "f64 vs reference: %s", NAMES[i]);
        check(label, what, tu_rel_err(one[i], ref[i], sz[i]), REF_TOL);
    }
    /* rows that see no key: o = 0 exactly, lse = -inf, dq untouched */
    double bad = 0;
    for (size_t i = 0; i < in.nl; i++) {
        if (ref[1][i] == -INFINITY) {
            bad += one[1][i] != -INFINITY || tu_max_abs(one[0] + i * d->hd, d->hd) != 0 ||
                   tu_max_diff(one[2] + i * d->hd, in.dq0 + i * d->hd, d->hd) != 0;
        }
    }
    check(label, "rows with no key: lse -inf, o 0, dq untouched", bad, 0);
    /* keys no query sees: dk, dv untouched */
    double unseen = 0;
    bad = 0;
    for (size_t s = 0; s < d->Tk; s++) {
        if (d->Tq == 0 || vis(d, d->Tq - 1, s)) {
            continue;
        }
        unseen++;
        const size_t r = s * d->Hkv * d->hd, n = d->Hkv * d->hd;
        bad += tu_max_diff(one[3] + r, in.dk0 + r, n) + tu_max_diff(one[4] + r, in.dv0 + r, n);
    }
    check(label, "keys no query sees: dk, dv untouched", bad, 0);
    cr_log_info("%s: %zu empty rows, %.0f unseen keys", label, empty, unseen);

    /* 2, 3, 4 threads (fused or two-pass backward): the same bits */
    for (int th = 2; th <= 4; th++) {
        double *par[5];
        alloc_outputs(par, &in);
        run_f64(par, &in, d, th);
        for (int i = 0; i < 5; i++) {
            snprintf(what, sizeof what, "%d threads vs 1, bitwise: %s", th, NAMES[i]);
            check(label, what, tu_max_diff(par[i], one[i], sz[i]), 0);
        }
        free_outputs(par);
    }

    /* subsets of the gradients: the same bits as all three */
    const int subsets[4][3] = {{1, 0, 0}, {0, 1, 1}, {0, 1, 0}, {0, 0, 1}};
    for (int c = 0; c < 4; c++) {
        for (int th = 1; th <= 2; th++) {
            double *sub[5];
            alloc_outputs(sub, &in);
            for (int g = 0; g < 3; g++) {
                if (!subsets[c][g]) {
                    free(sub[2 + g]);
                    sub[2 + g] = NULL;
                }
            }
            run_f64(sub, &in, d, th);
            for (int g = 0; g < 3; g++) {
                if (sub[2 + g] != NULL) {
                    snprintf(what, sizeof what, "subset %d%d%d, %d thread(s), bitwise: %s",
                             subsets[c][0], subsets[c][1], subsets[c][2], th, NAMES[2 + g]);
                    check(label, what, tu_max_diff(sub[2 + g], one[2 + g], sz[2 + g]), 0);
                }
            }
            free_outputs(sub);
        }
    }

    /* one query per call (decode style: tiles of grp rows) against the
     * tiled call: forward rows, dq rows, and dk, dv summed over the calls */
    double *dec_o = tu_alloc(in.nq), *dec_l = tu_alloc(in.nl), *dec_dq = tu_copy(in.dq0, in.nq);
    double *dec_dk = tu_copy(in.dk0, in.nk), *dec_dv = tu_copy(in.dv0, in.nk);
    const size_t w = d->H * d->hd;
    for (size_t t = 0; t < d->Tq; t++) {
        ls_attn_block_forward_f64(dec_o + t * w, dec_l + t * d->H, in.q + t * w, in.k, in.v, 1,
                                  d->Tk, d->H, d->Hkv, d->hd, d->qp + (int64_t)t, d->kp,
                                  d->causal, d->tau);
    }
    for (size_t t = 0; t < d->Tq; t++) {
        ls_attn_block_backward_f64(dec_dq + t * w, dec_dk, dec_dv, in.dO + t * w, in.q + t * w,
                                   in.k, in.v, one[0] + t * w, one[1] + t * d->H, 1, d->Tk, d->H,
                                   d->Hkv, d->hd, d->qp + (int64_t)t, d->kp, d->causal, d->tau);
    }
    double *dec[5] = {dec_o, dec_l, dec_dq, dec_dk, dec_dv};
    for (int i = 0; i < 5; i++) {
        snprintf(what, sizeof what, "one query per call vs tiled: %s", NAMES[i]);
        check(label, what, tu_rel_err(dec[i], one[i], sz[i]), REF_TOL);
    }
    free_outputs(dec);

    /* keys in blocks of 5 (too few for tiles: the scalar path), forward
     * merged by log-sum-exp and backward summed, against the tiled call */
    double *blk[5], *bo = tu_alloc(in.nq), *bl = tu_alloc(in.nl);
    alloc_outputs(blk, &in);
    memcpy(blk[2], in.dq0, in.nq * sizeof(double));
    memcpy(blk[3], in.dk0, in.nk * sizeof(double));
    memcpy(blk[4], in.dv0, in.nk * sizeof(double));
    for (size_t i = 0; i < in.nl; i++) {
        blk[1][i] = -INFINITY;
    }
    const size_t kw = d->Hkv * d->hd;
    for (size_t s0 = 0; s0 < d->Tk; s0 += 5) {
        const size_t n = d->Tk - s0 < 5 ? d->Tk - s0 : 5;
        ls_attn_block_forward_f64(bo, bl, in.q, in.k + s0 * kw, in.v + s0 * kw, d->Tq, n, d->H,
                                  d->Hkv, d->hd, d->qp, d->kp + (int64_t)s0, d->causal, d->tau);
        ls_attn_merge_into_f64(blk[0], blk[1], bo, bl, in.nl, d->hd);
        ls_attn_block_backward_f64(blk[2], blk[3] + s0 * kw, blk[4] + s0 * kw, in.dO, in.q,
                                   in.k + s0 * kw, in.v + s0 * kw, one[0], one[1], d->Tq, n, d->H,
                                   d->Hkv, d->hd, d->qp, d->kp + (int64_t)s0, d->causal, d->tau);
    }
    for (int i = 0; i < 5; i++) {
        snprintf(what, sizeof what, "5-key blocks (scalar) vs tiled: %s", NAMES[i]);
        check(label, what, tu_rel_err(blk[i], one[i], sz[i]), REF_TOL);
    }
    free_outputs(blk);
    free(bo);
    free(bl);

    /* float32 against float64 */
    double *o32 = tu_alloc(in.nq), *l32 = tu_alloc(in.nl), *dq32 = tu_alloc(in.nq);
    double *dk32 = tu_alloc(in.nk), *dv32 = tu_alloc(in.nk);
    omp_set_num_threads(2);
    ks32_attn_block_forward(o32, l32, in.q, in.k, in.v, d->Tq, d->Tk, d->H, d->Hkv, d->hd, d->qp,
                            d->kp, d->causal, d->tau);
    ks32_attn_block_backward(dq32, dk32, dv32, in.dO, in.q, in.k, in.v, o32, l32, d->Tq, d->Tk,
                             d->H, d->Hkv, d->hd, d->qp, d->kp, d->causal, d->tau);
    omp_set_num_threads(1);
    double *f32[5] = {o32, l32, dq32, dk32, dv32};
    /* (the float32 gradients start from zero) */
    for (size_t i = 0; i < in.nq; i++) {
        one[2][i] -= in.dq0[i];
    }
    for (size_t i = 0; i < in.nk; i++) {
        one[3][i] -= in.dk0[i];
        one[4][i] -= in.dv0[i];
    }
    for (int i = 0; i < 5; i++) {
        snprintf(what, sizeof what, "f32 vs f64: %s", NAMES[i]);
        check(label, what, tu_rel_err(f32[i], one[i], sz[i]), i < 2 ? F32_FWD_TOL : F32_BWD_TOL);
    }
    free_outputs(f32);
    free_outputs(one);
    free_outputs(ref);
    free_inputs(&in);
}

/* GQA 2, hd 32 (hybrid-tiny): query tiles of 64 tokens, key tiles of 64.
 * Queries at 70..219 against keys 0..199: the first query tile sees key
 * tiles 0 and 1, part of 2 and nothing of 3; the last tile is partial. */
Test(kernels_seq_attn_perf, gqa2_causal_offset)
{
    shape d = {.Tq = 150, .Tk = 200, .H = 4, .Hkv = 2, .hd = 32, .qp = 70, .kp = 0,
               .causal = 1, .tau = 1 / sqrt(32.0), .qk_range = 1.7};
    attn_case(&d, 301, "GQA 2 causal, queries at 70");
}

/* GQA 4, hd 16: 256-row query tiles.  Queries at -5..124 against keys
 * 0..169: five rows see no key, keys 125..169 are seen by no query. */
Test(kernels_seq_attn_perf, gqa4_empty_rows_unseen_keys)
{
    shape d = {.Tq = 130, .Tk = 170, .H = 8, .Hkv = 2, .hd = 16, .qp = -5, .kp = 0,
               .causal = 1, .tau = 1 / sqrt(16.0), .qk_range = 1.7};
    attn_case(&d, 302, "GQA 4 causal, empty rows, unseen keys");
}

/* One kv head (a two-pass backward with more than one thread), GQA 4,
 * hd 24 (42-token query tiles), no mask. */
Test(kernels_seq_attn_perf, one_kv_head_full)
{
    shape d = {.Tq = 100, .Tk = 150, .H = 4, .Hkv = 1, .hd = 24, .qp = 0, .kp = 0,
               .causal = 0, .tau = 1 / sqrt(24.0), .qk_range = 1.7};
    attn_case(&d, 303, "one kv head, non-causal");
}

/* hybrid-small dims (GQA 4, hd 64: 16-token query tiles), prompt style at
 * an offset: Tq = Tk, the same positions. */
Test(kernels_seq_attn_perf, small_dims_prompt)
{
    shape d = {.Tq = 100, .Tk = 100, .H = 8, .Hkv = 2, .hd = 64, .qp = 1000, .kp = 1000,
               .causal = 1, .tau = 1 / sqrt(64.0), .qk_range = 1.7};
    attn_case(&d, 304, "hybrid-small dims, prompt");
}

/* Large scores (|z| up to 64): probabilities down to exp(-128), below
 * float32's range, and running maxima that jump between key tiles. */
Test(kernels_seq_attn_perf, large_scores)
{
    shape d = {.Tq = 80, .Tk = 90, .H = 4, .Hkv = 2, .hd = 16, .qp = 10, .kp = 0,
               .causal = 1, .tau = 0.25, .qk_range = 4};
    attn_case(&d, 305, "large scores");
}
