# One vocabulary (tests/tools/check_vocab.py): the names and numbers the C code
# defines (longstraw-train, longstraw-audit and longstraw-parity --list-names)
# against every schema enum that spells them and the docs' tables (rule ids
# and levels, faults and levels, record sizes).  The self-test injects a
# difference into a copy of each source and sees it reported.
find_program(LS_PYTHON3_VOCAB NAMES python3 HINTS /usr/bin)
if(NOT LS_PYTHON3_VOCAB)
  set(LS_PYTHON3_VOCAB python3)
endif()
add_test(NAME check_vocab COMMAND ${LS_PYTHON3_VOCAB} ${CMAKE_SOURCE_DIR}/tests/tools/check_vocab.py ${CMAKE_SOURCE_DIR}
         $<TARGET_FILE:longstraw-train> $<TARGET_FILE:longstraw-audit> $<TARGET_FILE:longstraw-parity>)
add_test(NAME check_vocab_selftest COMMAND ${LS_PYTHON3_VOCAB} ${CMAKE_SOURCE_DIR}/tests/tools/check_vocab.py --selftest
         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:longstraw-train> $<TARGET_FILE:longstraw-audit>
         $<TARGET_FILE:longstraw-parity>)
set_tests_properties(check_vocab check_vocab_selftest PROPERTIES LABELS vocab)
