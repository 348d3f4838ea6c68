# bench_sgemm: the machine's sgemm rate, the ceiling bench_speed.sh quotes FLOP rates against.
add_executable(bench_sgemm ${CMAKE_CURRENT_LIST_DIR}/bench_sgemm.c)
target_link_libraries(bench_sgemm PRIVATE PkgConfig::OPENBLAS)
