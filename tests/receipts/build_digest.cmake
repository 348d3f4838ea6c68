# receipts/build_digest.cmake - the build digest identifies what ran: the executable
# and the project's shared libraries by content, the source state at build
# time (cmake/source_state.cmake), tampering detected (receipts/format/build_info.h).
add_library(ls_digest_probe SHARED ${CMAKE_CURRENT_SOURCE_DIR}/receipts/build_digest_probe.c)
ls_add_criterion_test(test_build_digest
  SOURCES receipts/test_build_digest.c ${CMAKE_CURRENT_SOURCE_DIR}/support/test_receipts_support.c
  LIBS ls_receipts ls_digest_probe
  DEFS LS_CMAKE_COMMAND="${CMAKE_COMMAND}"
  TIMEOUT 300)
# the test runs longstraw-train and copies of it
add_dependencies(test_build_digest longstraw-train)
