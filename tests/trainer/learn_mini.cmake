# The learning experiment in miniature (tests/trainer/learn_mini.sh, docs/learning.md, "GRPO as the learner"):
# hybrid-recall from random weights, fixed seed, a short sft warm start at 64 tokens that does not solve the
# task at 1,024, then GRPO with the full gradient at 1,024 must raise the reward there by 0.15.  About a minute
# and a half on one core in Release; labelled slow: the sanitizer build (Debug, ASan+UBSan) would take half an
# hour for the same steps and learn nothing new about memory.
add_test(NAME learn_mini
         COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/learn_mini.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/configs/hybrid-recall.json)
set_tests_properties(learn_mini PROPERTIES TIMEOUT 600 LABELS "slow;learn")
# The faults: the same run with the warm start's learning rate 0 must fail, saying that it did not learn;
# with GRPO's learning rate 0, saying that GRPO did not raise the reward.
add_test(NAME learn_mini_detects_no_learning
         COMMAND bash -c "LS_LEARN_MINI_LR=0 \"$0\" \"$1\" \"$2\" 2>&1 | grep -q 'FAIL: the sft run did not learn'"
                 ${CMAKE_SOURCE_DIR}/tests/trainer/learn_mini.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/configs/hybrid-recall.json)
set_tests_properties(learn_mini_detects_no_learning PROPERTIES TIMEOUT 600 LABELS "slow;learn")
add_test(NAME learn_mini_detects_no_rl_learning
         COMMAND bash -c "LS_LEARN_MINI_RL_LR=0 \"$0\" \"$1\" \"$2\" 2>&1 | grep -q 'FAIL: GRPO did not raise the reward'"
                 ${CMAKE_SOURCE_DIR}/tests/trainer/learn_mini.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/configs/hybrid-recall.json)
set_tests_properties(learn_mini_detects_no_rl_learning PROPERTIES TIMEOUT 600 LABELS "slow;learn")
