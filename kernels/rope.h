/* rope.h - rotary position embedding on the first d_r dims of each head.
 * docs/model.md §0: angle phi_{p,i} = p * theta^(-2i/d_r), i in [0, d_r/2).
 *
 * x [T, H, hd] (head stride hd, token stride H*hd), in place.  Token t has
 * absolute position pos0 + t.  Dims d_r..hd-1 pass through.
 * Backward: call with inverse != 0 (rotation by -phi), in place on the gradient. */
#ifndef LS_KERNELS_ROPE_H
#define LS_KERNELS_ROPE_H
#include "kernels/real.h"

typedef enum { LS_ROPE_NEOX = 0, LS_ROPE_INTERLEAVED = 1 } ls_rope_kind;

void LS_K(ls_rope_apply)(ls_real *x, ls_rope_kind kind, size_t T, size_t H, size_t hd,
                         size_t d_r, int64_t pos0, double theta, int inverse);
#endif
