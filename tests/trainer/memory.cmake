# trainer/memory.cmake - the memory figures against the process RSS (slow: minutes,
# and RSS is meaningless under the sanitizers, whose run skips label "slow").
ls_add_criterion_test(test_memory_rss SOURCES trainer/test_memory_rss.c LIBS ls_receipts TIMEOUT 1800)
add_dependencies(test_memory_rss longstraw-train)
set_tests_properties(test_memory_rss PROPERTIES LABELS slow)
