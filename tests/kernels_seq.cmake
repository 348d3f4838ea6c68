# Sequence kernels (causal conv1d, Gated DeltaNet, attention block + merge).
# The tests run against the float64 build; kernels_seq_f32_wrap is compiled
# without LS_REAL_F64 and exposes double-in/double-out wrappers of the
# float32 kernels for the float32-vs-float64 test.
set(LS_KSEQ_DIR ${CMAKE_CURRENT_LIST_DIR})
ls_add_criterion_test(kernels_seq_fd
  SOURCES ${LS_KSEQ_DIR}/test_kernels_seq_fd.c
  LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
