/* hybrid_layer.h - one hybrid block (RMSNorm, GDN or gated attention, RMSNorm,
 * SwiGLU MLP; docs/model.md §1) forward and backward with an explicit tape.
 * Internal to the trainer: segments (hybrid_segment.c) drive it.  Numeric. */
#ifndef LS_TRAINER_HYBRID_LAYER_H
#define LS_TRAINER_HYBRID_LAYER_H
#include "trainer/families/hybrid/hybrid_family.h"

/* Saved values of one layer's forward (all in the tape's arena). */
typedef struct {
    int is_attn;
    size_t T;
    int64_t pos0;
    size_t cut;                                              /* gradient cut (0: none), ls_seg_io.grad_cut */
    ls_real *x, *rstd1, *xn1;                                /* block input, norm1 */
    ls_real *xa_q, *xa_k, *xa_v, *xa_o;                      /* attention LoRA saves */
    ls_real *q_pre, *rstd_q, *q_r, *gate, *k_pre, *rstd_k, *k_r, *v, *o, *lse, *y;
    ls_real *xa_qkv, *xa_z, *xa_out;                         /* GDN LoRA saves */
    ls_real *pre, *a, *b, *z, *qraw, *kraw, *qn, *kn, *rq, *rk, *vv, *g, *beta, *go, *rstd_g, *ygn;
    ls_real *m, *tail_in, *S_in;
    ls_real *h_mid, *rstd2, *xn2, *xa_gate, *xa_up, *xa_down, *mg, *mu, *act; /* MLP */
} ls_layer_tape;

/* Forward of layer l over h [T, d] in place.  ctx: the layer's context state
 * (pages for attention, tail/S for GDN; NULL = sequence start).  Outputs
 * (each NULL = not wanted): own_k/own_v [T, Hkv, hd] the layer's keys and
 * values; tail_out [K-1, C] and S_out [Hv, dk, dv] the GDN state after the
 * segment.  tape != NULL: saves into tape_arena; scratch holds transients. */
ls_status LS_K(ls_layer_forward)(const ls_params *p, int l, ls_real *h, size_t T, int64_t pos0,
                                 const ls_layer_state *ctx, ls_real *own_k, ls_real *own_v,
                                 ls_real *tail_out, ls_real *S_out, ls_layer_tape *tape,
                                 ls_arena *tape_arena, ls_arena *scratch);

/* Backward of layer l.  dh [T, d]: in, gradient of the layer output; out,
 * gradient of the layer input.  ctx as in the forward.  dctx (NULL =
 * detached): += gradient of the context (page dK/dV; tail; S).  d_own_k/v,
 * dtail_out, dS_out: gradient arriving for what the layer handed on (NULL =
 * zero).  tp->cut = c > 0: the mixer hands no gradient from tokens [c, T)
 * to tokens [0, c) (attention: their keys' dK/dV rows; GDN: the state
 * gradient at the cut and the conv's gradient into their inputs); weight
 * gradients at [c, T) are kept.  dctx must then be NULL. */
ls_status LS_K(ls_layer_backward)(const ls_params *p, int l, const ls_layer_tape *tp, ls_real *dh,
                                  const ls_layer_state *ctx, ls_layer_state *dctx,
                                  const ls_real *d_own_k, const ls_real *d_own_v,
                                  const ls_real *dtail_out, const ls_real *dS_out,
                                  ls_arena *scratch);

/* An attention layer's backward in two parts (ls_layer_backward is out
 * then in), so that a context-parallel prompt backward can gather every
 * chunk's dout before the softmax backward needs the other ranks' keys:
 * out: the MLP (dh becomes the gradient at the mixer's output) and the
 * output projection and gate -> dout, dgate [T,H,hd]; in: the rest, from
 * dout and dgate, extra_dq [T,H,hd] (NULL: none) added to dq before RoPE's
 * backward (the part of dq from keys elsewhere); dh becomes the input's
 * gradient.  LS_ERR_ARG for a GDN layer. */
ls_status LS_K(ls_layer_backward_out)(const ls_params *p, int l, const ls_layer_tape *tp, ls_real *dh,
                                      ls_real *dout, ls_real *dgate, ls_arena *scratch);
ls_status LS_K(ls_layer_backward_in)(const ls_params *p, int l, const ls_layer_tape *tp, ls_real *dh,
                                     const ls_real *dout, const ls_real *dgate, const ls_real *extra_dq,
                                     const ls_layer_state *ctx, ls_layer_state *dctx, const ls_real *d_own_k,
                                     const ls_real *d_own_v, ls_arena *scratch);

/* Attention layer l's rotated queries q [T,H,hd], keys k and values v
 * [T,Hkv,hd] (each NULL: not wanted) of its input h [T,d] at positions
 * pos0.. (norm1, projections with adapters, q/k norms, RoPE), as its
 * forward computes them. */
ls_status LS_K(ls_layer_attn_qkv)(const ls_params *p, int l, const ls_real *h, size_t T, int64_t pos0, ls_real *q,
                                  ls_real *k, ls_real *v, ls_arena *scratch);
#endif
