# Independent reference checks: pure-Python re-implementations written from
# docs/model.md alone (tests/reference/), run against the trainer's
# --save-init weights and --dump-batch inputs.
add_test(NAME hybrid_reference
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/reference/run_hybrid_ref.sh
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} $<TARGET_FILE:longstraw-train>)
set_tests_properties(hybrid_reference PROPERTIES TIMEOUT 200)
# The mla family's reference proves its own properties (absorbed = naive MLA, DSA top-k and
# its tie rule, group-limited MoE routing, the file modes) on random mla-tiny weights; the
# trainer comparison comes with the mla trainer (longstraw-parity --family mla).
find_program(LS_PYTHON3 NAMES python3 HINTS /usr/bin)
if(NOT LS_PYTHON3)
  set(LS_PYTHON3 python3)
endif()
add_test(NAME mla_reference_selftest
         COMMAND ${LS_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/reference/mla_ref.py --self-test)
set_tests_properties(mla_reference_selftest PROPERTIES TIMEOUT 200)
