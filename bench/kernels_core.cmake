# bench_linear: ls_linear_forward / ls_lora_forward vs plain CBLAS, float32 and float64.
# bench_linear.c is compiled twice (as the kernels are): the float64 half as an object
# library, the float32 half with main.
add_library(bench_linear_f64 OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/bench_linear.c)
target_compile_definitions(bench_linear_f64 PRIVATE LS_REAL_F64)
target_link_libraries(bench_linear_f64 PRIVATE ls_kernels_f64)
add_executable(bench_linear ${CMAKE_CURRENT_SOURCE_DIR}/bench_linear.c $<TARGET_OBJECTS:bench_linear_f64>)
target_compile_definitions(bench_linear PRIVATE LS_BENCH_MAIN)
target_link_libraries(bench_linear PRIVATE ls_kernels_f32 ls_kernels_f64)
