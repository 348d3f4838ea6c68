/* isa.h - which instruction set the CPU kernels' hand-written paths use.
 *
 * Some kernels have paths written for one vector ISA beside a portable C
 * path that computes the same function (the attention tiles: a fused AVX-512
 * forward, the softmax rows built for AVX2 with FMA).  They round
 * differently, so the choice is part of what ran: the trainer records it in
 * the build object of every receipt and manifest ("kernel_isa"), where it
 * enters the build digest, and a parity report made with another choice is
 * from another build.
 *
 * The choice is made once per process, the first time it is asked: the
 * best the CPU has, or what LS_KERNEL_ISA asks ("portable", "avx2",
 * "avx512", or "auto" for the best).  A request the CPU cannot run, or a
 * word outside those, is refused: ls_kernel_isa_init reports it and the
 * kernels use the portable path. */
#ifndef LS_KERNELS_ISA_H
#define LS_KERNELS_ISA_H

#include <stddef.h>

typedef enum {
    LS_ISA_PORTABLE = 0, /* plain C (the compiler's baseline vectors) */
    LS_ISA_AVX2 = 1,     /* AVX2 with FMA */
    LS_ISA_AVX512 = 2    /* AVX-512 F and DQ (and AVX2 with FMA) */
} ls_isa;

/* Makes the choice from LS_KERNEL_ISA (unset or empty: "auto") and the CPU.
 * 0 when it is made as asked; -1 with err naming the variable and the value
 * when the request is refused (the choice is then LS_ISA_PORTABLE).  Later
 * calls return the first call's answer and message. */
int ls_kernel_isa_init(char *err, size_t errlen);

/* The choice (made by ls_kernel_isa_init if it was not yet). */
ls_isa ls_kernel_isa(void);

/* "portable", "avx2", "avx512". */
const char *ls_kernel_isa_name(ls_isa isa);

/* The best ISA this CPU runs. */
ls_isa ls_kernel_isa_best(void);

/* For tests: makes isa the choice when the CPU runs it (0), else -1 and
 * nothing changes.  Not while kernels run. */
int ls_kernel_isa_force(ls_isa isa);

#endif
