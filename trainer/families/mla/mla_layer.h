/* mla_layer.h - one mla block (docs/model.md §2: RMSNorm, MLA over the DSA
 * top-k, RMSNorm, dense SwiGLU or the routed MoE) forward and backward with
 * an explicit tape.  Internal to the trainer: the segments (mla_segment.c)
 * drive it.  Numeric (LS_K names).
 *
 * The attention of one layer is one function over a LIST OF KEY BLOCKS
 * (ls_mla_kblock: the context pages and the segment's own rows):
 *   forward  (ls_mla_attn_forward): the DSA selection (per block top-k,
 *            merged into the global top-k by the tie rule of docs/model.md §0),
 *            then per block ls_mla_forward over the localised selection and
 *            the MAX/SUM merge of the partials -> sel, o, lse;
 *   backward (ls_mla_attn_backward): per block ls_mla_backward with the
 *            GLOBAL o/lse -> dq_nope, dq_pe, dkv_b and each block's
 *            dc_kv/dk_pe.
 * Context parallelism plugs in at the layer: a context whose layer state
 * carries an ls_mla_cp_layer (below) replaces these two calls by mla_cp_attn.h's
 * (the gathered global selection and the MAX/SUM composition for
 * responses, the rings for the prompt shard). */
#ifndef LS_TRAINER_MLA_LAYER_H
#define LS_TRAINER_MLA_LAYER_H
#include "trainer/families/mla/mla_family.h"
#include "trainer/families/mla/mla_cp_attn.h"

/* The CP context of one layer's attention (ls_layer_state.cp of an mla
 * state under context parallelism; mla_cp.c owns it).  prompt 1: the
 * capture (and its recompute in the prompt backward) of this rank's whole
 * shard: the layer's own rows are the shard's, the context has no pages,
 * the selection is the rings' global top-k (mla_cp_attn.h prompt functions),
 * the backward the reverse ring.  prompt 0: a response segment: the
 * context's pages before cp->T are this rank's shard rows, later pages and
 * the segment's own rows are the replicated response rows (the owner, the
 * last rank, attends to them); the selection is the gathered global top-k,
 * the output the MAX/SUM composition; the backward sums dq and the response
 * rows' gradient.  acc (response backward; NULL: into kv_b's .g): the
 * accumulator of the layer's shard-local gradient of the effective kv_b,
 * made on the replay's first use (mla_cp.c: ls_mla_cp_acc) and released once
 * the step took it (cp_shard_grads): it lives through the replay only. */
typedef struct {
    const ls_mla_cp *cp; /* group, dims, T, faults (form and k_top are set per call) */
    int prompt;
    int layer;
    void *acc;           /* mla_cp.c's context (NULL: none) */
} ls_mla_cp_layer;

/* Layer l's accumulator [H (d_n + d_v), r_kv] of l->acc, made (zeroed, every layer's, LS_MEM_GRADS) on
 * first use; NULL when l has none or it cannot be made (*st LS_ERR_NOMEM). */
ls_real *LS_K(ls_mla_cp_acc)(const ls_mla_cp_layer *l, ls_status *st);

/* d(effective kv_b) [H (d_n + d_v), r_kv] into kv_b's trainable gradients
 * (+=: W, or the adapter's A and B). */
void LS_K(ls_mla_kv_b_grad)(const ls_params *p, const ls_lin *l, const ls_real *dwe);

/* One block of keys: n consecutive positions from pos0.  Backward:
 * dckv/dkpe (NULL: no key gradient wanted) receive += the gradient of its
 * c_kv / k_pe rows from queries [0, kgrad_q_end) only (a gradient cut). */
typedef struct {
    const ls_real *ckv, *kpe, *kI; /* [n, r_kv], [n, d_r], [n, d_I] */
    size_t n;
    int64_t pos0;
    ls_real *dckv, *dkpe;
    size_t kgrad_q_end;
} ls_mla_kblock;

/* The queries of one layer's attention over T positions from pos0. */
typedef struct {
    const ls_real *qn, *qpe;  /* [T,H,d_n], [T,H,d_r] (rotated) */
    const ls_real *qI, *wI;   /* indexer queries [T,H_I,d_I] (rotated), weights [T,H_I] (scaled) */
    const ls_real *kvb;       /* effective kv_b [H (d_n + d_v), r_kv] */
    size_t T, k_sel;
    int64_t pos0;
} ls_mla_attn_q;

/* sel [T, k_sel] (global positions, -1 empty), o [T,H,d_v], lse [T,H] assigned. */
ls_status LS_K(ls_mla_attn_forward)(const ls_params *p, const ls_mla_attn_q *q, const ls_mla_kblock *blk, size_t nb,
                                    int64_t *sel, ls_real *o, ls_real *lse);
/* dq_nope, dq_pe, dkv_b += (dkv_b may be NULL); blocks' dckv/dkpe +=. */
ls_status LS_K(ls_mla_attn_backward)(const ls_params *p, const ls_mla_attn_q *q, const ls_mla_kblock *blk,
                                     size_t nb, const int64_t *sel, const ls_real *o, const ls_real *lse,
                                     const ls_real *dout, ls_real *dq_nope, ls_real *dq_pe, ls_real *dkv_b);

/* Saved values of one layer's forward (in the tape's arena). */
typedef struct {
    size_t T, k_sel, cut;
    int64_t pos0;
    ls_real *x, *rstd1, *xn1;                        /* block input, norm1 */
    ls_real *xa_qa, *cq, *rstd_q, *cqn, *xa_qb;      /* q path */
    ls_real *qn, *qpe;                               /* rotated queries */
    ls_real *xa_kva, *ctil, *rstd_kv, *ckv, *kpe;    /* own latent rows (normed / rotated) */
    int64_t *sel;
    ls_real *o, *lse, *xa_o;
    ls_real *h_mid, *rstd2, *xn2;                    /* FFN input (the MoE recomputes from xn2) */
    ls_real *xa_g, *xa_u, *xa_d, *mg, *mu, *act;     /* dense SwiGLU */
    ls_decisions moe_dec; /* the MoE's routing (kernels/decisions.h): the backward's recompute must equal it */
} ls_mla_layer_tape;

/* Forward of layer l over h [T,d] in place at positions pos0..: ctx pages
 * (NULL or n_ctx 0: sequence start) are the earlier positions' rows.
 * own_ckv [T,r_kv], own_kpe [T,d_r], own_kI [T,d_I] (each NULL: not wanted)
 * receive the segment's carried rows.  tape != NULL: saves into
 * tape_arena; transients in scratch; MoE routed buffers per chunk of
 * moe_chunk tokens under LS_MEM_DISPATCH. */
ls_status LS_K(ls_mla_layer_forward)(const ls_params *p, int l, ls_real *h, size_t T, int64_t pos0,
                                     const ls_layer_state *ctx, ls_real *own_ckv, ls_real *own_kpe,
                                     ls_real *own_kI, ls_mla_layer_tape *tape, ls_arena *tape_arena,
                                     ls_arena *scratch);

/* Backward of layer l.  dh [T,d]: in, gradient of the layer output; out,
 * of its input.  dctx (NULL: detached) += the context pages' gradients (k:
 * dc_kv, v: dk_pe; pages mirror ctx's).  d_own_ckv/d_own_kpe [T, ..] (NULL:
 * zero): the gradient arriving for the rows the layer handed on.  tp->cut c
 * > 0: queries [c, T) give no key gradient to the own rows [0, c). */
ls_status LS_K(ls_mla_layer_backward)(const ls_params *p, int l, const ls_mla_layer_tape *tp, ls_real *dh,
                                      const ls_layer_state *ctx, ls_layer_state *dctx, const ls_real *d_own_ckv,
                                      const ls_real *d_own_kpe, ls_arena *scratch);

/* Options of the mla segments (process-wide; tests and benchmarks set them;
 * zero-initialised: the defaults).  The MLA form: fixed_form 0 chooses per
 * attention call by shape, absorbed when the queries are fewer than a
 * quarter of the visible keys (responses, decode: no per-key expansion of
 * the context), naive otherwise (prompt chunks); fixed_form 1 uses form
 * (naive: the reference; absorbed: the same function).  moe_chunk: tokens
 * per MoE dispatch chunk (0: 256). */
typedef struct {
    int fixed_form;
    ls_mla_form form;
    size_t moe_chunk;
} ls_mla_seg_opts;
/* Bytes of the routed-token buffers one MoE chunk of C tokens allocates
 * under LS_MEM_DISPATCH (bwd: the backward's, which hold the forward's
 * too); lora_r: the experts' adapter rank (0: none). */
size_t LS_K(ls_mla_dispatch_bytes)(const ls_model_config *c, size_t C, int lora_r, int bwd);
/* The memory plan's per-phase transients of the family (family.h ls_family_plan.phase), from the
 * allocation sites of this file and mla_segment.c; mla_table.c fills the state by part. */
void LS_K(ls_mla_plan_transients)(const ls_model_config *c, const ls_family_plan_in *in, ls_family_plan *out);
void LS_K(ls_mla_set_seg_opts)(const ls_mla_seg_opts *o);
ls_mla_seg_opts LS_K(ls_mla_get_seg_opts)(void);
#endif
