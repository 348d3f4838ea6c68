# Context parallelism of the hybrid family (trainer/cp.h), float64: a
# plain-main program like test_comm, run alone (single backend: the CP-1
# path) and under mpirun with 1, 2 and 4 ranks.
add_executable(test_cp ${CMAKE_CURRENT_SOURCE_DIR}/test_cp.c)
target_include_directories(test_cp PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(test_cp PRIVATE LS_REAL_F64 LS_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_link_libraries(test_cp PRIVATE ls_trainer_f64 ls_receipts ${LIBM})
add_test(NAME test_cp_single COMMAND test_cp)
set_tests_properties(test_cp_single PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  foreach(np 1 2 4)
    add_test(NAME test_cp_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:test_cp>)
    set_tests_properties(test_cp_np${np} PROPERTIES TIMEOUT 600 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endforeach()
endif()

# The mla family's cross-rank attention (trainer/mla_cp.h), float64: the
# global DSA selection and the MAX/SUM composition against one process over
# all rows; alone (CP-1) and under mpirun with 2, 3 and 4 ranks.
add_executable(test_mla_cp ${CMAKE_CURRENT_SOURCE_DIR}/test_mla_cp.c)
target_include_directories(test_mla_cp PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(test_mla_cp PRIVATE LS_REAL_F64)
target_link_libraries(test_mla_cp PRIVATE ls_trainer_f64 ls_receipts ${LIBM})
add_test(NAME test_mla_cp_single COMMAND test_mla_cp)
set_tests_properties(test_mla_cp_single PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  foreach(np 2 3 4)
    add_test(NAME test_mla_cp_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:test_mla_cp>)
    set_tests_properties(test_mla_cp_np${np} PROPERTIES TIMEOUT 300 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endforeach()
endif()

# The mla family's training step under context parallelism (trainer/mla_cpfam.c),
# float64: CP-N = CP-1 and = the naive gradient, the faults detected; alone and
# under mpirun with 1, 2 and 4 ranks.
add_executable(test_mla_cp_train ${CMAKE_CURRENT_SOURCE_DIR}/test_mla_cp_train.c)
target_include_directories(test_mla_cp_train PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(test_mla_cp_train PRIVATE LS_REAL_F64 LS_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_link_libraries(test_mla_cp_train PRIVATE ls_trainer_f64 ls_receipts ${LIBM})
add_test(NAME test_mla_cp_train_single COMMAND test_mla_cp_train)
set_tests_properties(test_mla_cp_train_single PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  foreach(np 1 2 4)
    add_test(NAME test_mla_cp_train_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:test_mla_cp_train>)
    set_tests_properties(test_mla_cp_train_np${np} PROPERTIES TIMEOUT 600 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endforeach()
endif()
