# Core CPU kernels (linear/LoRA, embedding, norms, RoPE, activations, logprob, GRPO, AdamW).
# The tests run against the float64 build; kernels_core_f32_wrap is compiled without
# LS_REAL_F64 and exposes double-in/double-out wrappers of the float32 kernels.
add_library(kernels_core_f32_wrap STATIC ${CMAKE_CURRENT_SOURCE_DIR}/kernels/kernels_core_f32_wrap.c)
target_include_directories(kernels_core_f32_wrap PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(kernels_core_f32_wrap PUBLIC ls_kernels_f32)

ls_add_criterion_test(kernels_core_fd
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_kernels_core_fd.c
  LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
ls_add_criterion_test(kernels_core_ref
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_kernels_core_ref.c
  LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
ls_add_criterion_test(kernels_core_f32
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_kernels_core_f32.c
  LIBS kernels_core_f32_wrap ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
