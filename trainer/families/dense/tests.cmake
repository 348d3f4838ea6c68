# The dense family end to end (trainer/families/dense/dense_train.sh, issue 41): config refusals; one step on one
# rank and under CP-2 in both train and gradient modes, each audited against the family's pinned profile;
# longstraw-parity --family dense (its two configurations, CP 1 and 2, both dtypes, finite differences, the
# controls) passes; a CP-2 full-mode run certified at level 4 with a report --like it; the faults seen (skip-dkv-
# reduce, an edited profile, a reference without RoPE, a hybrid batch, a missing tensor).  About 90 s on 2 cores.
# Included by tests/CMakeLists.txt (a registered family's tests.cmake), in its scope.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_test(NAME dense_family COMMAND bash ${CMAKE_SOURCE_DIR}/trainer/families/dense/dense_train.sh ${CMAKE_BINARY_DIR}
                                     ${CMAKE_CURRENT_BINARY_DIR}/dense_family)
  set_tests_properties(dense_family PROPERTIES TIMEOUT 600 LABELS "parity;slow"
                       ENVIRONMENT "OMP_NUM_THREADS=1;${LS_MPI_TEST_ENV};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
# The dense family's table, state and config keys against counts written out from docs/model.md (both real types).
ls_add_criterion_test(test_dense_family SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dense_family.c LIBS ls_trainer_f64
                      DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_dense_family_f32 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dense_family.c LIBS ls_trainer_f32
                      TIMEOUT 120)
