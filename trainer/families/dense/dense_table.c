/* dense_table.c - the dense family's table of the trainer's family interface
 * (family.h).  Every layer is the hybrid family's gated attention block: the
 * hybrid code decides a layer's kind by the config's descriptor (layer_kind:
 * "attn" for every layer of a dense config: dense_desc.c), so its tensor list (docs/model.md §5: the
 * attention and MLP tensors of each layer, no gdn.*), layer views, segments and
 * their backward, full-mode prompt backward, context parallelism (the KV ring
 * of the capture and the prompt backward, the global composition of the
 * responses; no state hand-off: there is no recurrent layer) and memory-plan
 * terms (no recurrent state) are the hybrid family's, reused, not copied.
 * What is the dense family's own: its id and name, and the label of the states
 * it makes (s->fam), so that a dense state is released and counted through
 * this table. */
#include "trainer/families/dense/dense_family.h"

#include "trainer/families/dense/dense_config.h"
#include "trainer/families/hybrid/hybrid_cp.h"
#include "trainer/families/hybrid/hybrid_family.h"

static ls_status dense_state_init(ls_state *s, const ls_params *p, size_t page_size, ls_mem_cat cat) {
    ls_status st = LS_K(ls_hybrid_state_init)(s, p, page_size, cat);
    if (st == LS_OK) s->fam = &LS_K(ls_family_dense);
    return st;
}

static ls_status dense_cp_capture(ls_cp *c, const ls_params *q, const int32_t *prompt, size_t page_size,
                                  size_t chunk, ls_state *ps, ls_real **checkpoints, ls_mem_cat cat,
                                  ls_layer_hook hook, void *hook_user) {
    ls_status st = LS_K(ls_hybrid_cp_capture)(c, q, prompt, page_size, chunk, ps, checkpoints, cat, hook, hook_user);
    if (st == LS_OK) ps->fam = &LS_K(ls_family_dense);
    return st;
}

const ls_family_ops LS_K(ls_family_dense) = {
    .layout = {.layer_view_size = sizeof(ls_hybrid_layer), .build = LS_K(ls_hybrid_build),
               .ref_view = LS_K(ls_hybrid_ref_view)},
    .desc = &ls_family_desc_dense,
    .state_init = dense_state_init,
    .state_fork = LS_K(ls_hybrid_state_fork), /* a fork and a gradient keep their source's label */
    .state_grad_like = LS_K(ls_hybrid_state_grad_like),
    .state_free = LS_K(ls_hybrid_state_free),
    .state_bytes = LS_K(ls_hybrid_state_bytes),
    .state_plan_bytes = LS_K(ls_hybrid_state_plan_bytes),
    .segment_forward = LS_K(ls_segment_forward),
    .segment_backward = LS_K(ls_segment_backward),
    .tape_free = LS_K(ls_seg_tape_free),
    .tape_bytes = LS_K(ls_seg_tape_bytes),
    .prompt_backward = LS_K(ls_hybrid_prompt_backward),
    .cp_init = LS_K(ls_hybrid_cp_init),
    .cp_free = LS_K(ls_hybrid_cp_free),
    .cp_capture = dense_cp_capture,
    .cp_prompt_backward = LS_K(ls_hybrid_cp_prompt_backward),
    .plan = LS_K(ls_hybrid_plan),
};
