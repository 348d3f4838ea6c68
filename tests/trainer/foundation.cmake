# Foundation tests: memory tracker and safetensors (library ls_trainer_base).
ls_add_criterion_test(test_mem_tracker
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_mem_tracker.c
  LIBS ls_trainer_base Threads::Threads
  TIMEOUT 120)
# memory spaces (trainer/base/mem_space.h): the guarded device space, tracked blocks, arenas and tier copies in it
ls_add_criterion_test(test_mem_space
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_mem_space.c
  LIBS ls_trainer_core Threads::Threads
  TIMEOUT 120)
# the state tier through memory spaces: a host-tier state staged into (guarded) device memory
ls_add_criterion_test(test_stage_space
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_stage_space.c
  LIBS ls_trainer_f64 DEFS LS_REAL_F64
  TIMEOUT 120)
ls_add_criterion_test(test_safetensors
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_safetensors.c
  LIBS ls_trainer_base
  TIMEOUT 120)
ls_add_criterion_test(test_kernel_scratch
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_kernel_scratch.c
  LIBS ls_trainer_base ls_kernels_f64 DEFS LS_REAL_F64
  TIMEOUT 120)
