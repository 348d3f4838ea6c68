# longstraw-train under mpirun (2 and 4 ranks): run directory, receipts,
# matched collectives, digests, faults, a killed rank.  Needs MPI.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  ls_add_criterion_test(test_train_cp SOURCES test_train_cp.c LIBS ls_receipts ls_trainer_base TIMEOUT 900)
  target_compile_definitions(test_train_cp PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/comm_lsan.supp")
  add_dependencies(test_train_cp longstraw-train)
endif()
