# bench_memory: LongStraw (detached/full) vs naive peak memory and time, capture rate.
add_executable(bench_memory ${CMAKE_CURRENT_SOURCE_DIR}/bench_memory.c)
target_link_libraries(bench_memory PRIVATE ls_trainer_f32)
