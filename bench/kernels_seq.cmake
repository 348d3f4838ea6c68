# bench_seq: float32 throughput of attention and GDN (prints a table).
add_executable(bench_seq ${CMAKE_CURRENT_LIST_DIR}/bench_seq.c)
target_link_libraries(bench_seq PRIVATE ls_kernels_f32 OpenMP::OpenMP_C ${LIBM})
# bench_attn_paged: a capture chunk's attention over paged KV, per-page calls
# and merges vs the one-pass kernels, with the sgemm ceiling (prints a table).
add_executable(bench_attn_paged ${CMAKE_CURRENT_LIST_DIR}/bench_attn_paged.c)
target_link_libraries(bench_attn_paged PRIVATE ls_kernels_f32 PkgConfig::OPENBLAS OpenMP::OpenMP_C ${LIBM})
