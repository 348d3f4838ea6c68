# Sequence kernels (causal conv1d, Gated DeltaNet, attention block + merge).
# The tests run against the float64 build; kernels_seq_f32_wrap is compiled
# without LS_REAL_F64 and exposes double-in/double-out wrappers of the
# float32 kernels for the float32-vs-float64 test.
set(LS_KSEQ_DIR ${CMAKE_CURRENT_SOURCE_DIR})
# (300 s: the chunked form's finite differences take about a minute under ASan+UBSan on 2 cores)
ls_add_criterion_test(kernels_seq_fd
  SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_seq_fd.c
  LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 300)
ls_add_criterion_test(kernels_seq_pieces
  SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_seq_pieces.c
  LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
add_library(kernels_seq_f32_wrap STATIC ${LS_KSEQ_DIR}/kernels/kernels_seq_f32_wrap.c)
target_include_directories(kernels_seq_f32_wrap PRIVATE ${CMAKE_SOURCE_DIR} ${LS_KSEQ_DIR})
target_link_libraries(kernels_seq_f32_wrap PUBLIC ls_kernels_f32)
ls_add_criterion_test(kernels_seq_f32
  SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_seq_f32.c
  LIBS kernels_seq_f32_wrap ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
ls_add_criterion_test(kernels_seq_attn_perf SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_attn_perf.c LIBS kernels_seq_f32_wrap ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
# Attention over a list of key blocks in one pass against the per-block
# composition, compiled against each real type.
ls_add_criterion_test(kernels_seq_attn_paged_f64 SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_attn_paged.c LIBS ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 60)
ls_add_criterion_test(kernels_seq_attn_paged_f32 SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_attn_paged.c LIBS ls_kernels_f32 TIMEOUT 60)
ls_add_criterion_test(kernels_seq_chunk
  SOURCES ${LS_KSEQ_DIR}/kernels/test_kernels_seq_chunk.c
  LIBS kernels_seq_f32_wrap ls_kernels_f64 DEFS LS_REAL_F64 TIMEOUT 120)
