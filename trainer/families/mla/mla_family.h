/* mla_family.h - the mla family (MLA + DeepSeek sparse attention + MoE, docs/model.md
 * §2) in the trainer: its structured layer views over the parameter table
 * (mla_table.c builds them) and the single-rank forward that scores a
 * batch's responses (mla_forward.c); the training transaction's parts on
 * one rank (mla_segment.c, mla_layer.c): the carried state in ls_state,
 * segments with a tape and their backward, the `full`-mode prompt
 * backward; its context parallelism (mla_cp.c).  Numeric (LS_K names). */
#ifndef LS_TRAINER_MLA_H
#define LS_TRAINER_MLA_H
#include "kernels/mla.h"
#include "trainer/families/mla/mla_config.h"
#include "trainer/model/family.h"

/* A SwiGLU MLP (dense FFN, a routed expert or the shared expert). */
typedef struct {
    ls_lin gate, up, down;
} ls_mla_mlp;

/* One layer's views (docs/model.md §5 names).  Dense layers (i < first_dense)
 * have mlp; MoE layers router, router_bias (a buffer, never trained),
 * experts [n_experts] and shared.  The indexer is frozen. */
typedef struct {
    int is_moe;
    ls_tensor *norm1, *norm2;
    ls_lin q_a, q_b, kv_a, kv_b, o;
    ls_tensor *q_a_norm, *kv_a_norm;
    ls_lin iq, ik, iw;                   /* indexer.q, indexer.k, indexer.w */
    ls_tensor *ik_norm_w, *ik_norm_b;    /* indexer.k_norm weight and bias */
    ls_mla_mlp mlp;                      /* dense layers */
    ls_lin router;
    ls_tensor *router_bias;
    ls_tensor *experts_t;                /* the routed experts' tensors, consecutive in the table:
                                            expert e's gate, up, down weights (each followed by its
                                            lora_A, lora_B when experts_tpl is 3) */
    int experts_tpl;                     /* tensors per expert linear in the table (3 with adapters, 1) */
    int experts_lora;                    /* the experts' adapters are applied (0 in a reference view) */
    ls_mla_mlp shared;
} ls_mla_layer;

extern const ls_family_ops LS_K(ls_family_mla);

static inline ls_mla_layer *LS_K(ls_mla_layers)(const ls_params *p) { return (ls_mla_layer *)p->layers; }
/* Routed expert e of layer ly (an MoE layer) as three linears. */
ls_mla_mlp LS_K(ls_mla_expert)(const ls_params *p, const ls_mla_layer *ly, size_t e);

/* The family's carried state (state.h's ls_state): per layer, pages of
 * per-position rows, k = c_kv after its RMSNorm [n, kv_rank], v = k_pe
 * after RoPE [n, d_rope], x = the indexer key [n, index_dim]; nothing per
 * head, no fixed buffers.  A gradient (grad_like) holds k and v rows only
 * (no gradient flows into the frozen indexer).  plan_bytes: (kv_rank +
 * d_rope + index_dim) reals per position and layer.  init, fork and
 * grad_like fill a state the caller owns, released with ls_mla_state_free
 * (ls_state_free); on failure they free what they made.  A fork borrows
 * src's pages: src must outlive it. */
ls_status LS_K(ls_mla_state_init)(ls_state *s, const ls_params *p, size_t page_size, ls_mem_cat cat);
ls_status LS_K(ls_mla_state_fork)(ls_state *dst, const ls_state *src, ls_mem_cat cat);
ls_status LS_K(ls_mla_state_grad_like)(ls_state *dst, const ls_state *src, ls_mem_cat cat);
void LS_K(ls_mla_state_free)(ls_state *s);
size_t LS_K(ls_mla_state_bytes)(const ls_state *s);
size_t LS_K(ls_mla_state_plan_bytes)(const ls_model_config *c, int64_t n_pos);
/* Layer l's rows of T positions from pos0 (c_kv, k_pe, k_I) appended to s as pages of s->page_size. */
ls_status LS_K(ls_mla_state_append)(ls_state *s, int l, const ls_real *ckv, const ls_real *kpe, const ls_real *kI,
                                    size_t T, int64_t pos0, const ls_model_config *c);

/* Context parallelism (family.h cp_*, cp.h; mla_cp.c over mla_cp_attn.c).
 * The capture and the prompt backward run this rank's whole shard as one
 * chunk per layer (the rings work on the shard's queries at once).  init
 * makes the family's part of c (owned by c), free releases it. */
ls_status LS_K(ls_mla_cp_init)(struct ls_cp_s *c, const ls_params *p);
void LS_K(ls_mla_cp_free)(struct ls_cp_s *c);
ls_status LS_K(ls_mla_cp_capture)(struct ls_cp_s *c, const ls_params *q, const int32_t *prompt, size_t page_size,
                                  size_t chunk, ls_state *ps, ls_real **checkpoints, ls_mem_cat cat,
                                  ls_layer_hook hook, void *hook_user);
ls_status LS_K(ls_mla_cp_prompt_bwd)(struct ls_cp_s *c, const ls_params *p, const int32_t *prompt, size_t chunk,
                                     ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                     ls_layer_hook hook, void *hook_user);
ls_status LS_K(ls_mla_cp_shard_grads)(struct ls_cp_s *c, ls_params *p);

/* Segments (family.h: ls_seg_io).  The forward reads io->ctx's pages (the
 * context must end at io->pos0), appends the segment's rows to
 * io->state_out; the backward's dctx (NULL: detached) receives += the
 * gradient of the context rows; a grad_cut stops the gradient into the
 * segment's own rows before the cut (then dctx must be NULL).  A tape made
 * into *io->tape is the caller's, released with ls_seg_tape_free. */
ls_status LS_K(ls_mla_segment_forward)(const ls_params *p, ls_seg_io *io);
ls_status LS_K(ls_mla_segment_backward)(const ls_params *p, ls_seg_tape *tape, const ls_real *dlogp, ls_state *dctx,
                                        const ls_state *dout, ls_layer_hook hook, void *hook_user);
/* `full` mode: the prompt backward (family.h), layer by layer from the top,
 * chunk by chunk from the last, each chunk recomputed from checkpoints. */
ls_status LS_K(ls_mla_prompt_backward)(const ls_params *p, const int32_t *tokens, size_t T, size_t chunk,
                                       ls_real *const *checkpoints, const ls_state *ps, ls_state *dstate,
                                       ls_mem_cat win_cat, ls_layer_hook hook, void *hook_user);

/* Options of the forward (zero-initialised: the model as specified). */
typedef struct {
    ls_mla_form form;      /* attention: LS_MLA_NAIVE or LS_MLA_ABSORBED (the same function) */
    size_t moe_chunk;      /* tokens per MoE dispatch chunk (0: 256) */
} ls_mla_fwd_opts;

/* Per-member response log-probs of one GRPO group on one rank (docs/model.md §4
 * branch split): the prompt x_0..x_{P-2} runs once and leaves each layer's
 * carried state (c_kv after its norm, k_pe after RoPE, the indexer key);
 * member i then runs [x_{P-1}, y_{i,0}, ..., y_{i,R_i-2}] at positions
 * P-1 ... from that state and scores y_{i,0..R_i-1}.  Attention of every
 * query uses exactly its DSA top-k positions (§2.2), the FFN of layers
 * >= first_dense is the routed MoE (§2.3).  LoRA adapters present in p are
 * applied (W + (alpha/r) B A); a reference view (adapters NULL) scores the
 * reference policy.
 * prompt [P] (P >= 1), responses[i] [lens[i]] (lens[i] >= 1), every id <
 * vocab; out[i] [lens[i]] assigned.  Errors name the argument (LS_ERR_ARG)
 * or what could not be allocated (LS_ERR_NOMEM). */
ls_status LS_K(ls_mla_logprobs)(const ls_params *p, const int32_t *prompt, size_t P,
                                const int32_t *const *responses, const size_t *lens, size_t G,
                                double temperature, const ls_mla_fwd_opts *opts, ls_real *const *out,
                                char *err, size_t err_len);
#endif
