# longstraw-parity (issue 11): usage, the matrix on one configuration (CP 1
# and 2, float64 and float32) whose report is the fixture the table test
# audits runs with, a faulty trainer refused; then the original work's
# table and reports the audit must not accept.  Needs MPI and python3.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  ls_add_criterion_test(test_parity SOURCES test_parity.c LIBS ls_receipts TIMEOUT 1800)
  ls_add_criterion_test(test_parity_table SOURCES test_parity_table.c LIBS ls_receipts TIMEOUT 1200)
  foreach(t test_parity test_parity_table)
    target_compile_definitions(${t} PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
      LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/comm_lsan.supp")
    add_dependencies(${t} longstraw-train longstraw-parity longstraw-audit)
    set_tests_properties(${t} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")
  endforeach()
  set_tests_properties(test_parity PROPERTIES FIXTURES_SETUP parity_report)
  set_tests_properties(test_parity_table PROPERTIES FIXTURES_REQUIRED parity_report)
endif()
