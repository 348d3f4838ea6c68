# The learning experiment in miniature (tests/learn_mini.sh, docs/learning.md): hybrid-recall from random
# weights, fixed seed, learns recall above chance with a margin in the sft warm start and keeps it under
# GRPO at a longer prompt.  About a minute on one core.
add_test(NAME learn_mini
         COMMAND ${CMAKE_SOURCE_DIR}/tests/learn_mini.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/configs/hybrid-recall.json)
set_tests_properties(learn_mini PROPERTIES TIMEOUT 600)
