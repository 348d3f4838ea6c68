# Independent reference checks: pure-Python re-implementations written from
# /work/shared/MODEL.md alone (tests/reference/), run against the trainer's
# --save-init weights and --dump-batch inputs.
add_test(NAME hybrid_reference
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/reference/run_hybrid_ref.sh
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} $<TARGET_FILE:longstraw-train>)
set_tests_properties(hybrid_reference PROPERTIES TIMEOUT 200)
