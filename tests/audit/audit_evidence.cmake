# The audit's adversarial suite (docs/evidence.md; tests/evidence/adversarial.sh):
# real runs of longstraw-train, then for each class (one source of a fact
# edited with the digests recomputed, reports of another model, trainable set,
# objective, dtype, CP size or build, a report written by hand, one signed by
# another key or edited after signing, an older report, faults, stale steps)
# the rule that must refuse it; and the honest cases certified (a resumed run
# at level 1, a covered run at level 4, signed runs and reports).
if(TARGET longstraw-audit)
  add_test(NAME audit_adversarial
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/evidence/adversarial.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(audit_adversarial PROPERTIES TIMEOUT 900
    ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=fast_unwind_on_malloc=0")
endif()

# longstraw-train's declared faults against the evidence that refuses each (tests/evidence/fault_evidence.py):
# a fault-free CP-2 run on the trainer's own path with the probe certified level 4 by --like parity under
# --require-probe; every fault refused level 4, the gradient faults by the probe.  Both families, ~75 s.
if(MPIEXEC_EXECUTABLE)
  add_test(NAME fault_evidence
           COMMAND ${CMAKE_COMMAND} -E env "MPIEXEC=${MPIEXEC_EXECUTABLE}" "MPIRUN_FLAGS=${LS_MPIRUN_FLAGS_STR}"
                   /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/evidence/fault_evidence.py ${CMAKE_BINARY_DIR}
                   ${CMAKE_BINARY_DIR}/tests/fault-evidence)
  set_tests_properties(fault_evidence PROPERTIES TIMEOUT 900 LABELS "parity;slow" ENVIRONMENT "${LS_MPI_TEST_ENV}")
endif()

# The adversarial generators (tests/evidence/generate.py, docs/evidence.md): per class of attack many variants of a
# real signed CP-2 run, each refused by its class's rule.  The "swap" class changes a file while the audit runs
# through an LD_PRELOAD shim (tests/evidence/swap_preload.c), which cannot be preloaded under ASan.
if(TARGET longstraw-audit AND TARGET longstraw-train AND MPIEXEC_EXECUTABLE AND NOT LS_SANITIZE)
  add_library(ls_swap_preload MODULE ${CMAKE_CURRENT_SOURCE_DIR}/evidence/swap_preload.c)
  set_target_properties(ls_swap_preload PROPERTIES PREFIX "lib" OUTPUT_NAME "ls_swap_preload"
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  target_link_libraries(ls_swap_preload PRIVATE ${CMAKE_DL_LIBS})
  add_test(NAME audit_generators
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/evidence/generate.py ${CMAKE_BINARY_DIR})
  set_tests_properties(audit_generators PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=1"
    LABELS "audit;mpi")
endif()
