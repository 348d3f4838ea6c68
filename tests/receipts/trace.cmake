# Trace events: writer/reader round trips, the reader's reports on damaged
# input, killed writers, bounded memory, and agreement with the schemas.
foreach(t roundtrip reader kill bigread schema metrics parse)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/receipts/test_trace_${t}.c)
    ls_add_criterion_test(test_trace_${t}
      SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/receipts/test_trace_${t}.c
      LIBS ls_receipts Threads::Threads
      TIMEOUT 120)
  endif()
endforeach()
