# longstraw-audit diff (audit/report/diff.c): runs made by the trainer compared,
# single-rank (seeds, learning rates, truncated and refused traces, unusable
# input) and, with MPI, 2-rank CP runs (a rerun, a fault, a deleted rank).
ls_add_criterion_test(test_audit_diff SOURCES audit/test_audit_diff.c LIBS ls_audit TIMEOUT 900)
add_dependencies(test_audit_diff longstraw-train)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(test_audit_diff PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
endif()
# a trace swapped between its verification and the comparison (the adversarial suite's LD_PRELOAD shim,
# tests/audit/audit_evidence.cmake, which defines it under the same condition: not under ASan)
if(TARGET longstraw-audit AND TARGET longstraw-train AND MPIEXEC_EXECUTABLE AND NOT LS_SANITIZE)
  target_compile_definitions(test_audit_diff PRIVATE LS_SWAP_PRELOAD="${CMAKE_BINARY_DIR}/tests/libls_swap_preload.so"
    LS_AUDIT_EXE="${CMAKE_BINARY_DIR}/audit/longstraw-audit")
  add_dependencies(test_audit_diff ls_swap_preload longstraw-audit)
endif()
