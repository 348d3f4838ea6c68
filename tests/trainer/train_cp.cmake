# longstraw-train under mpirun (2 and 4 ranks): run directory, receipts,
# matched collectives, digests, faults, a killed rank.  Needs MPI.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  ls_add_criterion_test(test_train_cp SOURCES trainer/test_train_cp.c LIBS ls_receipts ls_trainer_base TIMEOUT 900)
  target_compile_definitions(test_train_cp PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
  add_dependencies(test_train_cp longstraw-train)
endif()

# the mla family under mpirun: CP-2/CP-4 runs audited at level 1, cp-local-dsa seen, cp-local-attention refused
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  ls_add_criterion_test(test_mla_cp_cli SOURCES trainer/test_mla_cp_cli.c LIBS ls_receipts ls_trainer_base TIMEOUT 600)
  target_compile_definitions(test_mla_cp_cli PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
  add_dependencies(test_mla_cp_cli longstraw-train longstraw-audit)
endif()

# CP-2 against one rank on the trainer's own paths (tests/trainer/cp_paths.sh): sampled responses, the reference kept
# or recaptured, two prompt groups a step, detached; uneven shards cutting pages and chunks; 4 steps' checkpoints;
# each CP fault the family declares must be seen.  Every registered family (LS_FAMILIES).
if(MPIEXEC_EXECUTABLE)
  foreach(fam ${LS_FAMILIES})
    add_test(NAME cp_paths_${fam}
             COMMAND ${CMAKE_COMMAND} -E env "MPIEXEC=${MPIEXEC_EXECUTABLE}" "MPIRUN_FLAGS=${LS_MPIRUN_FLAGS_STR}"
                     ${CMAKE_SOURCE_DIR}/tests/trainer/cp_paths.sh ${CMAKE_BINARY_DIR} ${fam})
    set_tests_properties(cp_paths_${fam} PROPERTIES TIMEOUT 300 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endforeach()
endif()
