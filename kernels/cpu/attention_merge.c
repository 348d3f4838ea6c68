/* attention_merge.c - the partial-attention merge of kernels/attention.h:
 * folding one part's (o, lse) into an accumulator, and its backward. */
#include "kernels/attention.h"

#include "kernels/cpu/attention_internal.h"

void LS_K(ls_attn_merge_into)(ls_real *o, ls_real *lse, const ls_real *o_p,
                              const ls_real *lse_p, size_t n, size_t hd)
{
#pragma omp parallel for schedule(static) if (n * hd >= PAR_MIN)
    for (size_t r = 0; r < n; r++) {
        const ls_real lp = lse_p[r], la = lse[r];
        ls_real *orow = o + r * hd;
        const ls_real *prow = o_p + r * hd;
        if (lp == -INFINITY) {
            continue; /* an empty part contributes nothing */
        }
        if (la == -INFINITY) {
            for (size_t e = 0; e < hd; e++) {
                orow[e] = prow[e];
            }
            lse[r] = lp;
            continue;
        }
        const ls_real m = la > lp ? la : lp;
        const ls_real wa = R_EXP(la - m), wp = R_EXP(lp - m);
        const ls_real a = wa + wp;
#pragma omp simd
        for (size_t e = 0; e < hd; e++) {
            orow[e] = (wa * orow[e] + wp * prow[e]) / a;
        }
        lse[r] = m + R_LOG(a);
    }
}

void LS_K(ls_attn_merge_backward)(ls_real *do_p, ls_real *dlse_p, const ls_real *do_,
                                  const ls_real *dlse, const ls_real *o_p,
                                  const ls_real *lse_p, const ls_real *o,
                                  const ls_real *lse, size_t n, size_t hd)
{
    for (size_t r = 0; r < n; r++) {
        /* a part with no keys (or a merged row with none) has weight 0 */
        const ls_real w = lse_p[r] == -INFINITY ? 0 : R_EXP(lse_p[r] - lse[r]);
        const ls_real *dor = do_ + r * hd, *opr = o_p + r * hd, *orow = o + r * hd;
        ls_real acc = 0;
        for (size_t e = 0; e < hd; e++) {
            do_p[r * hd + e] = w * dor[e];
            acc += dor[e] * (opr[e] - orow[e]);
        }
        if (dlse_p != NULL) {
            dlse_p[r] = w == 0 ? 0 : w * (acc + (dlse != NULL ? dlse[r] : 0));
        }
    }
}
