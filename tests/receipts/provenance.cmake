# Provenance: the inputs' digests in the receipts and the manifest, and
# checkpoints that carry digests (a corrupt one refused naming the tensor),
# from the command line; under mpirun -np 2 when MPI is found.
ls_add_criterion_test(test_provenance SOURCES receipts/test_provenance.c LIBS ls_receipts ls_trainer_base TIMEOUT 600)
add_dependencies(test_provenance longstraw-train)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(test_provenance PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
endif()
