/* real.h - the compute type of the kernels (and of every numeric module).
 *
 * Every numeric source file is compiled twice: once as float32 and once with
 * -DLS_REAL_F64 as float64 (docs/style.md rule 13).  LS_K(name) appends the type
 * suffix (_f32 / _f64) so both builds link into one binary and the trainer
 * can pick the dtype at run time.  The float64 build is the reference. */
#ifndef LS_KERNELS_REAL_H
#define LS_KERNELS_REAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef LS_REAL_F64
typedef double ls_real;
#define LS_REAL_SUFFIX f64
#define LS_REAL_NAME "f64"
#define LS_REAL_IS_F64 1
#else
typedef float ls_real;
#define LS_REAL_SUFFIX f32
#define LS_REAL_NAME "f32"
#define LS_REAL_IS_F64 0
#endif

#define LS_CAT2_(a, b) a##_##b
#define LS_CAT2(a, b) LS_CAT2_(a, b)
/* LS_K(ls_gdn_forward) -> ls_gdn_forward_f32 or ls_gdn_forward_f64 */
#define LS_K(name) LS_CAT2(name, LS_REAL_SUFFIX)

#endif
