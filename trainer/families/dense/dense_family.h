/* dense_family.h - the dense family: a decoder whose every layer is the hybrid
 * family's gated full-attention block (docs/model.md §1.2: RMSNorm, gated
 * attention with q/k norms, partial RoPE and GQA, RMSNorm, SwiGLU MLP) and no
 * Gated DeltaNet layer.  A test family and a baseline: it shows that a family
 * plugs into the shared trainer through its table alone (family.h), reusing
 * the hybrid family's attention layer, segments, carried state (KV pages in
 * state.h's attention slots) and context parallelism.  Numeric (compiled per
 * real type). */
#ifndef LS_TRAINER_DENSE_FAMILY_H
#define LS_TRAINER_DENSE_FAMILY_H
#include "trainer/model/family.h"

/* The dense family's table (dense_table.c; static storage, never freed).
 * Its states (state_init, cp_capture) are labelled with it (s->fam) and
 * released through it, with the hybrid family's state code. */
extern const ls_family_ops LS_K(ls_family_dense);
#endif
