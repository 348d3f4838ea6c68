/* real_bytes.h - R(n): the bytes of n reals (ls_real, compiled per real
 * type), the one spelling of the many buffer sizes of the numeric .c files
 * of trainer/.  Include it from .c files only, after their other headers:
 * the macro's name is one letter. */
#ifndef LS_TRAINER_REAL_BYTES_H
#define LS_TRAINER_REAL_BYTES_H
#include "kernels/real.h"

#define R(n) ((n) * sizeof(ls_real))
#endif
