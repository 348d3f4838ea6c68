/* seg_frame.h - what the two families' segments share around their layer
 * stacks (hybrid_segment.c, mla_segment.c): the frame of a segment's tape (tokens,
 * position, context, the cut, and the scored rows' final norm and log-prob
 * head), the checks of a segment's arguments, the embedding and the head,
 * and the segment's forward and backward around a family's layers, given
 * as functions.  Internal to the trainer; numeric (LS_K names). */
#ifndef LS_TRAINER_SEG_FRAME_H
#define LS_TRAINER_SEG_FRAME_H
#include "kernels/decisions.h"
#include "trainer/base/arena.h"
#include "trainer/base/coll_memo.h"
#include "trainer/model/family.h"

/* One layer l of a family over h [T, d] (in and out), with io's context
 * (io->ctx) and state out (io->state_out, may be NULL), taped into ly (the
 * family's layer tape of l, its buffers from the arena ta) when ly is not
 * NULL.  The embedding, the head, checkpoints and hooks are the frame's. */
typedef ls_status (*ls_seg_layer_fwd_fn)(const ls_params *p, const ls_seg_io *io, int l, ls_real *h, void *ly,
                                         ls_arena *ta);

typedef struct {
    ls_arena arena; /* holds the tape itself and everything it points to */
    size_t T, score_from, n_sc, grad_cut;
    int64_t pos0;
    const ls_state *ctx;
    int32_t *tokens, *targets;
    void *ly;       /* the family's n_layers layer tapes */
    ls_real *xf, *rstd_f, *xn_f, *lse; /* final norm input and outputs over the scored rows */
    /* checkpointed (io->checkpointed): ly holds no layer's tape after the forward; the backward rebuilds
       layer l's from its input ckpt[l] (its collectives' results from memo[l], its decisions checked
       against dec[l]) and releases it after l's backward */
    int checkpointed;
    size_t ly_size;
    ls_seg_layer_fwd_fn fwd;    /* the family's layer forward */
    ls_real **ckpt;             /* [n_layers] each layer's input [T, d] */
    uint64_t *ckpt_digest;      /* [n_layers] of each input as stored: a rebuild from changed rows fails */
    ls_decisions *dec;          /* [n_layers] */
    ls_coll_memo *memo;         /* [n_layers] */
    size_t recompute_peak;      /* the largest rebuilt layer tape with its backward (bytes) */
} ls_seg_frame;

/* Both families' tape (family.h's opaque ls_seg_tape). */
struct ls_seg_tape {
    ls_seg_frame fr;
};

/* One layer's taped backward: dh [T, d] in and out; dctx (may be NULL)
 * receives the gradient of fr's context; dout (may be NULL) holds the
 * gradient arriving for what the segment handed on (family.h's
 * segment_backward). */
typedef ls_status (*ls_seg_layer_bwd_fn)(const ls_params *p, int l, ls_seg_frame *fr, ls_real *dh,
                                         ls_state *dctx, const ls_state *dout, ls_arena *scr);

/* A whole segment (what a family's segment_forward does once it checked
 * its own arguments): ls_seg_check_io, the embedding, the family's layers,
 * state_out's n_pos, the head (zero_centred as ls_rmsnorm_forward), and the
 * tape (layer tapes of ly_size bytes) into *io->tape when asked: the
 * caller's, released with ls_seg_tape_free. */
ls_status LS_K(ls_seg_forward)(const ls_params *p, ls_seg_io *io, size_t ly_size, int zero_centred,
                               ls_seg_layer_fwd_fn layer);
/* Its backward: the head, the family's layers from the last, the
 * embedding.  LS_ERR_ARG for a context gradient under a cut. */
ls_status LS_K(ls_seg_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp, ls_state *dctx,
                                const ls_state *dout, int zero_centred, ls_seg_layer_bwd_fn layer, ls_layer_hook hook,
                                void *hook_user);

/* The rows of dout's layer ly (ls_seg_backward's dout) for the segment's positions [pos0, pos0 + T) as one
 * contiguous [T, row] buffer of field k (want_v 0) or v, from scr; NULL when the layer has no pages there (no
 * gradient arrives: another rank owns the keys) or on failure (*st LS_ERR_NOMEM, or LS_ERR_INTERNAL when the
 * pages do not cover the segment exactly). */
ls_real *LS_K(ls_seg_dout_rows)(const ls_layer_state *ly, int64_t pos0, size_t T, size_t row, int want_v,
                                ls_arena *scr, ls_status *st);

/* The bytes a checkpointed tape of T tokens holds beside its frame and head (ckpt_new in seg_frame.c: each
 * layer's input at esz bytes an element, its decisions, memo and input digest), for the memory plan;
 * saturating.  The collectives a memo records are the family's (ls_coll_memo_plan_bytes). */
size_t LS_K(ls_seg_ckpt_plan_bytes)(int n_layers, size_t T, size_t d, size_t esz);

/* LS_ERR_ARG when io asks for nothing valid: T 0, scoring from T or later,
 * a cut without a tape or at T or later, a token or target outside the
 * vocabulary. */
ls_status LS_K(ls_seg_check_io)(const ls_params *p, const ls_seg_io *io);


/* h [T, d] = the embedding of io->tokens, reported to io->hook as layer -1. */
void LS_K(ls_seg_embed_forward)(const ls_params *p, const ls_seg_io *io, ls_real *h);

/* The head over the scored rows of h (io->score_from on; the last row when
 * only io->last_hidden is asked): the final norm (zero_centred as
 * ls_rmsnorm_forward), the log-probs of io->targets into io->logp, the last
 * normed row into io->last_hidden; kept in fr when taping (NULL: the rows
 * live in work), reported to io->hook as layer n_layers.  Nothing when io
 * asks for neither. */
ls_status LS_K(ls_seg_head_forward)(const ls_params *p, const ls_seg_io *io, const ls_real *h, int zero_centred,
                                    ls_seg_frame *fr, ls_arena *work);

/* The head's backward from dlogp into the scored rows of dh [T, d], the
 * lm_head and final norm gradients accumulated; scratch from work; nothing
 * when dlogp is NULL or no row was scored. */
ls_status LS_K(ls_seg_head_backward)(const ls_params *p, const ls_seg_frame *fr, const ls_real *dlogp,
                                     int zero_centred, ls_real *dh, ls_arena *work, ls_layer_hook hook,
                                     void *hook_user);

/* The embedding's backward from dh [T, d] (when the embedding is trained),
 * reported to hook as layer -1. */
void LS_K(ls_seg_embed_backward)(const ls_params *p, const ls_seg_frame *fr, const ls_real *dh, ls_layer_hook hook,
                                 void *hook_user);
#endif
