# longstraw-train under mpirun (2 and 4 ranks): run directory, receipts,
# matched collectives, digests, faults, a killed rank.  Needs MPI.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  execute_process(COMMAND id -u OUTPUT_VARIABLE LS_TCP_UID OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(LS_TCP_FLAGS "--oversubscribe")
  if(LS_TCP_UID STREQUAL "0")
    set(LS_TCP_FLAGS "--oversubscribe --allow-run-as-root")
  endif()
  ls_add_criterion_test(test_train_cp SOURCES test_train_cp.c LIBS ls_receipts ls_trainer_base TIMEOUT 900)
  target_compile_definitions(test_train_cp PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}" LS_MPIRUN_FLAGS="${LS_TCP_FLAGS}")
  add_dependencies(test_train_cp longstraw-train)
endif()
