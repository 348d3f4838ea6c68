# bench_seq: float32 throughput of attention and GDN (prints a table).
add_executable(bench_seq ${CMAKE_CURRENT_LIST_DIR}/bench_seq.c)
target_link_libraries(bench_seq PRIVATE ls_kernels_f32 OpenMP::OpenMP_C ${LIBM})
