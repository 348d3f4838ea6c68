# bench_sampler: nucleus sampling, old insertion sort vs trainer/step/sampler.h, alone and in rollout decode at V up to 151,936.
add_executable(bench_sampler ${CMAKE_CURRENT_LIST_DIR}/bench_sampler.c)
target_link_libraries(bench_sampler PRIVATE ls_trainer_f32)
