# The communicator (trainer/dist/comm.h): a plain-main test program (Criterion
# forks, which does not mix with MPI), run alone (single backend) and, when
# the build has MPI, under mpirun with 1, 2 and 4 ranks.
add_executable(test_comm ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_comm.c)
target_include_directories(test_comm PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(test_comm PRIVATE ls_trainer_core ls_receipts ${LIBM})
add_test(NAME test_comm_single COMMAND test_comm single 1)
set_tests_properties(test_comm_single PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")
if(NOT MPI_C_FOUND)
  # no MPI backend: a process that looks started by mpirun is refused
  add_test(NAME test_comm_nompi_refused COMMAND test_comm refused 1)
  set_tests_properties(test_comm_nompi_refused PROPERTIES TIMEOUT 120
    ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_COMM_WORLD_SIZE=2")
elseif(MPIEXEC_EXECUTABLE)
  # LS_MPIRUN_FLAGS and LS_MPI_TEST_ENV: tests/CMakeLists.txt
  foreach(np 1 2 4)
    add_test(NAME test_comm_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${np}
                     $<TARGET_FILE:test_comm> mpi ${np})
    set_tests_properties(test_comm_np${np} PROPERTIES TIMEOUT 120
      ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endforeach()
  # the CP x EP grid (ls_comm_grid): 2 x 2, 1 x 2, 1 x 4, and ep 3 refused on 4 ranks
  foreach(g "4;2" "2;2" "4;4" "4;3" "2;1")
    list(GET g 0 np)
    list(GET g 1 ep)
    add_test(NAME test_comm_grid_np${np}_ep${ep}
             COMMAND ${MPIEXEC_EXECUTABLE} ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${np}
                     $<TARGET_FILE:test_comm> grid${ep} ${np})
    set_tests_properties(test_comm_grid_np${np}_ep${ep} PROPERTIES TIMEOUT 120 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endforeach()
  # ls_comm_abort(c, 3) on one rank ends every rank, mpirun exits 3, no hang
  add_test(NAME test_comm_abort_np3
           COMMAND sh -c "\"$0\" \"$@\" 2>/dev/null; test $? -eq 3" ${MPIEXEC_EXECUTABLE} ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} 3
                   $<TARGET_FILE:test_comm> abort 3)
  set_tests_properties(test_comm_abort_np3 PROPERTIES TIMEOUT 60
    ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
endif()
# the communicator's registered names (backends, dependencies, group kinds) and its memory spaces: device
# buffers (the guarded device space) through a run-time loopback backend and the single backend
ls_add_criterion_test(test_comm_registry SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_comm_registry.c
  LIBS ls_trainer_core ls_receipts TIMEOUT 120)
