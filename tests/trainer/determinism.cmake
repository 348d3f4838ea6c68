# Determinism of a whole run (tests/trainer/determinism.sh): reruns and thread counts give byte-identical
# checkpoints, every registered family (LS_FAMILIES; its tiny config from the registry), full gradient mode, a
# chunked capture.
foreach(fam ${LS_FAMILIES})
  add_test(NAME determinism_${fam}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/determinism.sh ${CMAKE_BINARY_DIR} ${fam})
  set_tests_properties(determinism_${fam} PROPERTIES LABELS determinism TIMEOUT 300)
endforeach()
