# run.invariants (audit/rules/rules_invariants.c) and what a verdict rests on
# (audit/report/basis.c): fault-free runs of both families, one rank and CP-2 under
# mpirun when MPI is found, pass with the ratio exactly 1 on every on-policy
# step; each check refuses level 2 on a copy of a real run with one figure
# changed and every digest recomputed (tests/audit/audit_invariants_edit.py).
if(TARGET longstraw-audit)
  set(LS_AUDIT_INV_DEFS "")
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    set(LS_AUDIT_INV_DEFS LS_MPIEXEC="${MPIEXEC_EXECUTABLE}" LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}")
  endif()
  ls_add_criterion_test(test_audit_invariants SOURCES audit/test_audit_invariants.c LIBS ls_receipts
                        DEFS ${LS_AUDIT_INV_DEFS} TIMEOUT 900)
  add_dependencies(test_audit_invariants longstraw-audit longstraw-train)
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    set_tests_properties(test_audit_invariants PROPERTIES ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endif()
endif()
