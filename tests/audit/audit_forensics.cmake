# longstraw-audit forensics against CP-2 runs under mpirun: a rank SIGKILLed
# at five points (--fault kill-rank=R@PHASE[:L]), skip-dkv-reduce (digests
# apart), an edited collective count (mismatched sizes); the traces, read
# independently with zstd -dc, are the reference.  Needs MPI.
if(TARGET longstraw-audit AND MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  ls_add_criterion_test(test_audit_forensics SOURCES audit/test_audit_forensics.c LIBS ls_receipts
    DEFS LS_MPIEXEC="${MPIEXEC_EXECUTABLE}" LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" TIMEOUT 900)
  add_dependencies(test_audit_forensics longstraw-audit longstraw-train)
  set_tests_properties(test_audit_forensics PROPERTIES ENVIRONMENT "${LS_MPI_TEST_ENV}")
endif()
