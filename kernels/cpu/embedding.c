/* embedding.c - token embedding lookup and its scatter-add backward (CPU). */
#include "kernels/embedding.h"

#include <string.h>

void LS_K(ls_embedding_forward)(ls_real *h /* [T,d] */, const int32_t *ids /* [T] */,
                                const ls_real *E /* [V,d] */, size_t T, size_t d)
{
    for (size_t t = 0; t < T; t++)
        memcpy(h + t * d, E + (size_t)ids[t] * d, d * sizeof *h);
}

/* Serial over tokens: repeated ids add into the same row, in token order, so the
 * result does not depend on the thread count. */
void LS_K(ls_embedding_backward)(ls_real *dE /* [V,d] */, const ls_real *dh /* [T,d] */,
                                 const int32_t *ids /* [T] */, size_t T, size_t d)
{
    for (size_t t = 0; t < T; t++) {
        ls_real *row = dE + (size_t)ids[t] * d;
        const ls_real *g = dh + t * d;
        for (size_t j = 0; j < d; j++)
            row[j] += g[j];
    }
}
