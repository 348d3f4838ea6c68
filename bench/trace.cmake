# bench_trace: trace writer/reader throughput, compressed and plain, and the compression ratio.
add_executable(bench_trace ${CMAKE_CURRENT_LIST_DIR}/bench_trace.c)
target_link_libraries(bench_trace PRIVATE ls_receipts)
