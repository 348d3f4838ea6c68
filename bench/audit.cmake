# bench_audit_reader: synthetic long traces (gen) and the bare reader's throughput (read),
# for bench/bench_audit.sh.
add_executable(bench_audit_reader ${CMAKE_CURRENT_LIST_DIR}/bench_audit_reader.c)
target_link_libraries(bench_audit_reader PRIVATE ls_receipts)
