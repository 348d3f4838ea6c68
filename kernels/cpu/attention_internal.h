/* attention_internal.h - internal to kernels/cpu/attention.c,
 * attention_rows.c, attention_avx512.c and attention_merge.c: the few
 * definitions they share.
 * Not part of the contract (that is kernels/attention.h); include it from
 * those three files only.
 *
 * Like them it is compiled once per real type, so the one function shared
 * across files (the softmax rows, attention_rows.c) has LS_K names and the
 * f32 and f64 builds link into one binary; the rest is macros, types and a
 * static inline helper. */
#ifndef LS_KERNELS_CPU_ATTENTION_INTERNAL_H
#define LS_KERNELS_CPU_ATTENTION_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/real.h"

#if LS_REAL_IS_F64
#define R_EXP exp
#define R_LOG log
#else
#define R_EXP expf
#define R_LOG logf
#endif

#define PAR_MIN 131072 /* Tq Tk H hd below which one thread does the work */

/* Number of keys among [s0, s0 + nk) visible to query t (a prefix). */
static inline size_t visible(size_t t, size_t s0, size_t nk, int64_t q_pos0,
                             int64_t k_pos0, int causal)
{
    if (!causal) {
        return nk;
    }
    /* key s visible iff s <= q_pos0 + t - k_pos0 */
    int64_t last = q_pos0 + (int64_t)t - k_pos0 - (int64_t)s0;
    if (last < 0) {
        return 0;
    }
    return (uint64_t)last + 1 < nk ? (size_t)last + 1 : nk;
}

/* One call's shapes and its tiling (GEMM path).  The call attends to the
 * blocks kv[0, nb); k, v, Tk and k_pos0 describe the block at hand (where a
 * plan is made: Tk counts the keys of all blocks). */
typedef struct {
    const ls_attn_kv_block *kv;
    size_t nb;
    const ls_real *k, *v;
    size_t Tq, Tk, H, Hkv, hd, grp;
    int64_t q_pos0, k_pos0;
    int causal;
    ls_real tau;
    size_t nq; /* query tokens per tile: R = nq grp rows */
    size_t nk; /* keys per tile */
    size_t nqt, nkt; /* tile counts (key tiles: of all blocks, block by block) */
    int isa; /* ls_isa (kernels/isa.h): the hand-written paths this call may take */
} plan;

/* A (query tile, key tile) pair: queries from t0, keys [s0, s0 + nkt); rows
 * [r0, R) of the query tile see some of the keys, all within the first nc. */
typedef struct {
    size_t t0, s0, nkt, r0, R, nc;
} pair_span;

/* The softmax between the GEMMs of one tile pair (attention_rows.c); each
 * runs the AVX2-with-FMA build where the CPU has it.
 *
 * Online-softmax step of a forward pair: S (row r at (r - r0) nc) holds
 * tau q.k; becomes P = exp(S - m) with the masked keys 0, where the running
 * max mx[r] becomes m; the running sum l[r] and the output accumulator O
 * (row r at r hd) are rescaled to m and l takes the new terms. */
void LS_K(ls_attn_rows_forward)(const plan *pl, const pair_span *g, ls_real *S, ls_real *O,
                                ls_real *mx, ls_real *l);

/* Gradient step of a backward pair: P (rows as in the forward) holds tau q.k
 * and becomes P = exp(P - L) with the masked keys 0 (all of a row with
 * L = -inf: it sees no key, and contributes nothing); dS (NULL: skip) holds
 * dO.v and becomes P (dS - D). */
void LS_K(ls_attn_rows_backward)(const plan *pl, const pair_span *g, ls_real *P, ls_real *dS,
                                 const ls_real *L, const ls_real *D);

#define LS_ATTN_AVX512_MAX_HD 512 /* the fused AVX-512 forward's largest head */

/* The fused AVX-512 forward of one pair (attention_avx512.c): what the GEMMs
 * and ls_attn_rows_forward do to O, mx and l, with the scores in registers.
 * Q is the tile's R rows (row r at r hd), Kt and Vt the key tile's first key
 * (rows ldk = Hkv hd apart); scratch holds ls_attn_avx512_scratch(pb)
 * elements.  Only where ls_attn_avx512_fits(pl): the plan's ISA is AVX-512,
 * the build is f32 on x86-64, hd is a multiple of 16 (at most
 * LS_ATTN_AVX512_MAX_HD) and key tiles hold at most 64 keys. */
int LS_K(ls_attn_avx512_fits)(const plan *pl);
size_t LS_K(ls_attn_avx512_scratch)(const plan *pl);
void LS_K(ls_attn_avx512_forward_pair)(const plan *pb, const pair_span *g, const ls_real *Q,
                                       const ls_real *Kt, const ls_real *Vt, ls_real *O,
                                       ls_real *mx, ls_real *l, ls_real *scratch);

/* The fused AVX-512 backward of one pair: what bwd_pair's GEMMs and
 * ls_attn_rows_backward add to dQ (the tile's rows, NULL: skip), dk and dv
 * (the key tile's first row, rows ldk apart; NULL: skip), given the tile's Q
 * and dO rows, the global lse L and D = rowsum(dO o) per row.  scratch holds
 * ls_attn_avx512_bwd_scratch(pb) elements (pb's nq grp rows).  The scores
 * and dO V^T in registers, P and dS kept per row for dK += tau dS^T Q and
 * dV += P^T dO, four keys at a time over the tile's rows in order. */
size_t LS_K(ls_attn_avx512_bwd_scratch)(const plan *pl);
void LS_K(ls_attn_avx512_backward_pair)(const plan *pb, const pair_span *g, const ls_real *Q,
                                        const ls_real *dO, const ls_real *Kt, const ls_real *Vt,
                                        const ls_real *L, const ls_real *D, ls_real *dQ,
                                        ls_real *dk, ls_real *dv, ls_real *scratch);

#endif
