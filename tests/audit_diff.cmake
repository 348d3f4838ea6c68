# longstraw-audit diff (audit/diff.c): runs made by the trainer compared,
# single-rank (seeds, learning rates, truncated and refused traces, unusable
# input) and, with MPI, 2-rank CP runs (a rerun, a fault, a deleted rank).
ls_add_criterion_test(test_audit_diff SOURCES test_audit_diff.c LIBS ls_audit TIMEOUT 900)
add_dependencies(test_audit_diff longstraw-train)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(test_audit_diff PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/comm_lsan.supp")
endif()
