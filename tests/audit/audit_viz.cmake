# The audit's pictures of a run (audit/load/timeline.h, audit/report/html.h) on runs the
# trainer makes: single rank, and 2 ranks under mpirun when MPI is there.
# test_audit_viz also leaves a page that audit_viz_chromium renders in a
# headless chromium (scripts/check_html.sh; skipped, exit 77, without one).
ls_add_criterion_test(test_audit_viz SOURCES audit/test_audit_viz.c LIBS ls_audit TIMEOUT 600)
add_dependencies(test_audit_viz longstraw-train)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(test_audit_viz PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
endif()
set_tests_properties(test_audit_viz PROPERTIES FIXTURES_SETUP audit_viz_page)
add_test(NAME audit_viz_chromium
         COMMAND ${CMAKE_SOURCE_DIR}/scripts/check_html.sh ${CMAKE_BINARY_DIR}/tests/audit_viz_sample.html
                 "Level 1 of 4 proven")
set_tests_properties(audit_viz_chromium PROPERTIES SKIP_RETURN_CODE 77 FIXTURES_REQUIRED audit_viz_page TIMEOUT 120)
