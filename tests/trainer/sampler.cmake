# The nucleus sampler against the simple full-sort algorithm, in both real types.
ls_add_criterion_test(test_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_sampler.c LIBS ls_trainer_f32 TIMEOUT 300)
ls_add_criterion_test(test_sampler_f64 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_sampler.c LIBS ls_trainer_f64
  DEFS LS_REAL_F64 TIMEOUT 300)
