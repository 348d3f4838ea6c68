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
