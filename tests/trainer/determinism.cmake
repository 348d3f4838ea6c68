# Determinism of a whole run (tests/trainer/determinism.sh): reruns and thread counts give byte-identical
# checkpoints, both families, full gradient mode, a chunked capture.
foreach(fam hybrid mla)
  add_test(NAME determinism_${fam}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/determinism.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/configs/${fam}-tiny.json)
  set_tests_properties(determinism_${fam} PROPERTIES LABELS determinism TIMEOUT 300)
endforeach()
