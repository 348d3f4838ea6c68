/* hybrid_cp.h - the hybrid family's part of context parallelism (cp.h
 * describes the protocol; family.h's cp_* entries).  Numeric. */
#ifndef LS_TRAINER_HYBRID_CP_H
#define LS_TRAINER_HYBRID_CP_H
#include "trainer/dist/cp.h"
#include "trainer/families/hybrid/hybrid_family.h"

ls_status LS_K(ls_hybrid_cp_init)(ls_cp *c, const ls_params *p);
void LS_K(ls_hybrid_cp_free)(ls_cp *c);
ls_status LS_K(ls_hybrid_cp_capture)(ls_cp *c, const ls_params *q, const int32_t *prompt, size_t page_size,
                                     size_t chunk, ls_state *ps, ls_real **checkpoints, ls_mem_cat cat,
                                     ls_layer_hook hook, void *hook_user);
ls_status LS_K(ls_hybrid_cp_prompt_backward)(ls_cp *c, const ls_params *p, const int32_t *prompt, size_t chunk,
                                             ls_real *const *checkpoints, const ls_state *ps, ls_state *dps,
                                             ls_layer_hook hook, void *hook_user);
#endif
