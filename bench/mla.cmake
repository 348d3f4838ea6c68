# bench_mla: the mla family on one rank: carried state per token, LongStraw vs naive peak memory by
# category and time per phase, the moe_dispatch peak against the MoE chunk.
add_executable(bench_mla ${CMAKE_CURRENT_SOURCE_DIR}/bench_mla.c)
target_link_libraries(bench_mla PRIVATE ls_trainer_f32)
