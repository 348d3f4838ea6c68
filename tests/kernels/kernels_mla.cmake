# MLA-family kernels (mla.h, dsa.h, moe.h): float64 checks against finite
# differences and independent compositions, and float32 against float64.
set(LS_KMLA_DIR ${CMAKE_CURRENT_SOURCE_DIR})
foreach(area attn dsa moe)
  ls_add_criterion_test(kernels_mla_${area}
    SOURCES ${LS_KMLA_DIR}/kernels/test_kernels_mla_${area}.c ${LS_KMLA_DIR}/kernels/test_kernels_mla_common.c
    LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
endforeach()
# the wrapper TU has no LS_REAL_F64 of its own: set it per source file
ls_add_criterion_test(kernels_mla_f32
  SOURCES ${LS_KMLA_DIR}/kernels/test_kernels_mla_f32.c ${LS_KMLA_DIR}/kernels/kernels_mla_f32_wrap.c
          ${LS_KMLA_DIR}/kernels/test_kernels_mla_common.c
  LIBS ls_kernels_f32 ls_kernels_f64 TIMEOUT 60)
set_source_files_properties(${LS_KMLA_DIR}/kernels/test_kernels_mla_f32.c
  PROPERTIES COMPILE_DEFINITIONS LS_REAL_F64)
