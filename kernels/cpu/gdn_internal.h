/* gdn_internal.h - what gdn.c (the token recurrence) and gdn_chunk.c (the
 * chunked WY / UT form) share; internal to kernels/cpu.
 *
 * A gdn_chunk_view is a view of one value head's chunk scratch (sized by
 * gdn_chunk_head_ws, owned by the caller); its fields are valid after the
 * calls named on them, for the chunk of n <= GDN_C tokens last passed. */
#ifndef LS_KERNELS_CPU_GDN_INTERNAL_H
#define LS_KERNELS_CPU_GDN_INTERNAL_H
#include <cblas.h>

#include "kernels/real.h"

#define GDN_C 64            /* tokens per chunk of the chunked form */
#define GDN_PAR_MIN 65536   /* state-element updates (T Hv dk dv) worth a thread team */
#define GEMM_MNK 262144     /* largest M N K OpenBLAS keeps on the calling thread */
/* Least dk dv for which the entry points take the chunked form: below it
 * the chunk's C x C products cost more than the rank-1 updates they replace
 * (crossovers measured on 2 cores, float32: forward about dk = dv = 80,
 * backward about 48; docs/benchmarks.md). */
#define GDN_CHUNK_MIN_DKDV_FWD 6144
#define GDN_CHUNK_MIN_DKDV_BWD 2304

/* Whether ls_gdn_forward (backward = 0) / ls_gdn_backward take the chunked form. */
int LS_K(gdn_use_chunked)(size_t T, size_t dk, size_t dv, int backward);

/* C = alpha op(A) op(B) + beta C, row-major, in row blocks small enough for
 * OpenBLAS's single-threaded path (the same bits for any thread count).
 * M, N, K > 0. */
void LS_K(gdn_gemm)(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, size_t M, size_t N, size_t K,
                    ls_real alpha, const ls_real *A, size_t lda, const ls_real *B, size_t ldb,
                    ls_real beta, ls_real *C, size_t ldc);

/* The backward's workspace, value head after value head (hw reals each):
 * checkpoints [nc, dk, dv], nmid state blocks [dk, dv] (the recurrence: the
 * states of one chunk's tokens; the chunked form: the chunk starts of one
 * segment), G [dk, dv], two dq and two dk chunk buffers [ch, dk], then the
 * form's own scratch (gdn_ws_tail). */
typedef struct {
    ls_real *base;
    size_t hw, dkdv, ch, nc, nmid, dk;
} gdn_bwd_ws;
static inline ls_real *gdn_ws_ckpt(const gdn_bwd_ws *w, size_t j) { return w->base + j * w->hw; }
static inline ls_real *gdn_ws_mid(const gdn_bwd_ws *w, size_t j) { return gdn_ws_ckpt(w, j) + w->nc * w->dkdv; }
static inline ls_real *gdn_ws_G(const gdn_bwd_ws *w, size_t j) { return gdn_ws_mid(w, j) + w->nmid * w->dkdv; }
/* buffer b (= chunk index & 1) of the dq / dk contributions */
static inline ls_real *gdn_ws_dq(const gdn_bwd_ws *w, size_t j, size_t b) {
    return gdn_ws_G(w, j) + w->dkdv + b * w->ch * w->dk;
}
static inline ls_real *gdn_ws_dk(const gdn_bwd_ws *w, size_t j, size_t b) {
    return gdn_ws_G(w, j) + w->dkdv + (2 + b) * w->ch * w->dk;
}
static inline ls_real *gdn_ws_tail(const gdn_bwd_ws *w, size_t j) {
    return gdn_ws_G(w, j) + w->dkdv + 4 * w->ch * w->dk;
}
/* Reals of one head's part before its tail. */
static inline size_t gdn_ws_head(size_t nc, size_t nmid, size_t ch, size_t dk, size_t dv) {
    return (nc + nmid + 1) * dk * dv + 4 * ch * dk;
}
/* Tokens between checkpoints for T tokens: c0 doubled until its square
 * reaches T (about sqrt(T): memory O(sqrt(T)) states). */
static inline size_t gdn_ws_segment(size_t T, size_t c0) {
    size_t ch = c0;
    while (ch * ch < T) ch *= 2;
    return ch;
}
/* dq, dk rows of chunk c = the sum of its value heads' chunk buffers, in
 * head order (the same bits for any thread count).  A worksharing loop
 * without a barrier: every thread of the team calls it. */
void LS_K(gdn_ws_reduce)(ls_real *dq, ls_real *dk, const gdn_bwd_ws *w, size_t c, size_t T, size_t Hk, size_t grp);

typedef struct {
    ls_real *Gam; /* [C,C] Gam[t][s] = e^{g_{s+1}+...+g_t}, s <= t (gdn_chunk_decays) */
    ls_real *A;   /* [C,C] strictly lower beta_t Gam[t][s] k_t.k_s (gdn_chunk_wy) */
    ls_real *Ti;  /* [C,C] (I+A)^{-1}, zero above the diagonal (gdn_chunk_wy) */
    ls_real *Tb;  /* [C,C] (I+A)^{-1} diag(beta), zero above the diagonal (gdn_chunk_wy) */
    ls_real *ea;  /* [C] e^{g_0+...+g_t} (gdn_chunk_decays) */
    ls_real *U;   /* [C,dv] (I+A)^{-1} diag(beta) V (gdn_chunk_wy); Delta after forward */
    ls_real *W;   /* [C,dk] (I+A)^{-1} diag(beta ea) K (gdn_chunk_wy) */
    ls_real *X;   /* [C,dk] scratch (diag(ea) K after gdn_chunk_wy) */
} gdn_chunk_view;

/* Reals of one head's chunk scratch. */
size_t LS_K(gdn_chunk_head_ws)(size_t dk, size_t dv);
/* Points c's fields into ws (gdn_chunk_head_ws reals). */
void LS_K(gdn_chunk_bind)(gdn_chunk_view *c, ls_real *ws, size_t dk, size_t dv);
/* Gam [C,C] (s <= t) and ea [n] from g (stride Hv). */
void LS_K(gdn_chunk_decays)(ls_real *Gam, ls_real *ea, const ls_real *g, size_t Hv, size_t n);
/* c->A, c->Ti, c->Tb, c->U, c->W, c->X from c->Gam, c->ea; k rows stride ldk, v rows ldv, beta
 * stride Hv.  KK [C,C] receives K K^T (NULL: not kept). */
void LS_K(gdn_chunk_wy)(gdn_chunk_view *c, ls_real *KK, const ls_real *k, size_t ldk,
                        const ls_real *v, size_t ldv, const ls_real *beta, size_t Hv, size_t n,
                        size_t dk, size_t dv);
/* One chunk: S [dk,dv] (state before) becomes the state after; o rows
 * (stride ldo) assigned unless o is NULL; q, k rows stride ldk. */
void LS_K(gdn_chunk_forward)(gdn_chunk_view *c, ls_real *S, ls_real *o, size_t ldo,
                             const ls_real *q, const ls_real *k, size_t ldk, const ls_real *v,
                             size_t ldv, const ls_real *g, const ls_real *beta, size_t Hv,
                             size_t n, size_t dk, size_t dv);
#endif
