/* embedding.h - token embedding lookup.  E [V, d], ids [T], h [T, d]. */
#ifndef LS_KERNELS_EMBEDDING_H
#define LS_KERNELS_EMBEDDING_H
#include "kernels/real.h"

/* h[t] = E[ids[t]].  ids must be < V (checked by the caller). */
void LS_K(ls_embedding_forward)(ls_real *h, const int32_t *ids, const ls_real *E,
                                size_t T, size_t d);
/* dE[ids[t]] += dh[t]. */
void LS_K(ls_embedding_backward)(ls_real *dE, const ls_real *dh, const int32_t *ids,
                                 size_t T, size_t d);
#endif
