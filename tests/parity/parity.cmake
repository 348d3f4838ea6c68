# longstraw-parity (issue 11): usage, the matrix on one configuration (CP 1
# and 2, float64 and float32) whose report is the fixture the table test
# audits runs with (hybrid: p30-g2-lora; mla: m30-g2-lora, about 30 s), a
# faulty trainer refused; then the original work's
# table and reports the audit must not accept.  Needs MPI and python3.
# Under the sanitizers every trainer run is several times slower (the
# matrix alone took 500 s): that build runs the usage test and the faulty
# trainer (the parity code's whole path: runs, reference, finite
# differences, checks, controls, report) and the update check, and leaves
# the matrix, the table and the near-tie redraw (340 s under ASan, 48 s in
# Release) to the Release suite.
# Finite differences per tensor and per layer group (parity_fd.c) on a loss known in closed form: the
# trainer is a stand-in (parity/parity_fd_fake_train.py, python3), no MPI; seconds, so every build runs it.
ls_add_criterion_test(test_parity_fd SOURCES parity/test_parity_fd.c LIBS ls_parity TIMEOUT 600)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  set(LS_PARITY_TESTS test_parity)
  if(LS_SANITIZE)
    add_executable(test_parity parity/test_parity.c)
    target_include_directories(test_parity PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(test_parity PRIVATE ls_receipts PkgConfig::CRITERION ${LIBM})
    target_compile_definitions(test_parity PRIVATE LS_SOURCE_DIR="${CMAKE_SOURCE_DIR}" LS_BINARY_DIR="${CMAKE_BINARY_DIR}")
    add_test(NAME test_parity_sanitized COMMAND test_parity --jobs 1 --filter "parity/[ua][sn_][!n]*")
    set_tests_properties(test_parity_sanitized PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=1")
  else()
    ls_add_criterion_test(test_parity SOURCES parity/test_parity.c LIBS ls_receipts TIMEOUT 1800)
    ls_add_criterion_test(test_parity_table SOURCES parity/test_parity_table.c LIBS ls_receipts TIMEOUT 1200)
    list(APPEND LS_PARITY_TESTS test_parity_table)
    # --like runs the run's own path (parity_path.c): a hybrid CP-2 keep-reference full LoRA-random run's
    # path runs sample and keep the reference and pass; with cp-stale-start put back into them
    # (LONGSTRAW_PARITY_TEST_PATH_FAULT) the report fails; mla alike.  About a minute on 2 cores.
    ls_add_criterion_test(test_parity_path SOURCES parity/test_parity_path.c LIBS ls_parity TIMEOUT 1800)
    list(APPEND LS_PARITY_TESTS test_parity_path)
    # Every registered family's default matrix (every entry, CP 1, 2 and 4; LS_FAMILIES, from
    # trainer/families/families.list) in float64 must pass: the verdicts must not depend on the machine
    # (comparisons well-posed where a reference is zero: abs_floor; single-threaded runs).  About 1-2
    # minutes each on 2 cores.
    foreach(fam ${LS_FAMILIES})
      add_test(NAME parity_matrix_${fam}
               COMMAND longstraw-parity --family ${fam} --dtype f64 --jobs 2 --quiet
                       --out ${CMAKE_CURRENT_BINARY_DIR}/parity-matrix-${fam})
      set_tests_properties(parity_matrix_${fam} PROPERTIES TIMEOUT 1800 LABELS parity
                           ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
    endforeach()
    set_tests_properties(test_parity PROPERTIES FIXTURES_SETUP parity_report)
    set_tests_properties(test_parity_table PROPERTIES FIXTURES_REQUIRED parity_report)
  endif()
  foreach(t ${LS_PARITY_TESTS})
    target_compile_definitions(${t} PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}"
      LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}" LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
    add_dependencies(${t} longstraw-train longstraw-parity longstraw-audit longstraw-sign)
    if(NOT LS_SANITIZE)
      set_tests_properties(${t} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")
    endif()
  endforeach()
endif()
