/* isa.c - the kernels' ISA choice (kernels/isa.h). */
#include "kernels/isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int chosen = -1;    /* ls_isa, or -1 before the choice */
static int init_rc;        /* ls_kernel_isa_init's answer */
static char init_err[160]; /* and its message */

ls_isa ls_kernel_isa_best(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) {
        return LS_ISA_AVX512;
    }
    return avx2 ? LS_ISA_AVX2 : LS_ISA_PORTABLE;
#else
    return LS_ISA_PORTABLE;
#endif
}

const char *ls_kernel_isa_name(ls_isa isa)
{
    switch (isa) {
    case LS_ISA_AVX2:
        return "avx2";
    case LS_ISA_AVX512:
        return "avx512";
    default:
        return "portable";
    }
}

int ls_kernel_isa_init(char *err, size_t errlen)
{
    if (chosen < 0) {
        const ls_isa best = ls_kernel_isa_best();
        const char *want = getenv("LS_KERNEL_ISA");
        chosen = LS_ISA_PORTABLE;
        init_rc = 0;
        if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
            chosen = (int)best;
        } else {
            int w = -1;
            for (int i = LS_ISA_PORTABLE; i <= LS_ISA_AVX512; i++) {
                if (strcmp(want, ls_kernel_isa_name((ls_isa)i)) == 0) {
                    w = i;
                }
            }
            if (w < 0) {
                init_rc = -1;
                snprintf(init_err, sizeof init_err,
                         "LS_KERNEL_ISA='%.40s': not one of auto, portable, avx2, avx512", want);
            } else if (w > (int)best) {
                init_rc = -1;
                snprintf(init_err, sizeof init_err,
                         "LS_KERNEL_ISA='%s': this CPU runs at most %s", want,
                         ls_kernel_isa_name(best));
            } else {
                chosen = w;
            }
        }
    }
    if (init_rc != 0 && err != NULL && errlen > 0) {
        snprintf(err, errlen, "%s", init_err);
    }
    return init_rc;
}

ls_isa ls_kernel_isa(void)
{
    if (chosen < 0) {
        (void)ls_kernel_isa_init(NULL, 0);
    }
    return (ls_isa)chosen;
}

int ls_kernel_isa_force(ls_isa isa)
{
    if (isa < LS_ISA_PORTABLE || isa > ls_kernel_isa_best()) {
        return -1;
    }
    chosen = (int)isa;
    return 0;
}
