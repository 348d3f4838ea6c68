# The PyTorch peer of bench/bench_peer.sh (bench/peer/hybrid_torch.py) is the trainer's model and
# GRPO step: at P = 64 and 150 (f64, random LoRA-B, --grad-mode full, supplied old log-probs that
# engage the clip) its log-probs, reference log-probs, advantages, loss and every LoRA gradient, in
# --mode eager and ckpt, equal longstraw-train's --dump-batch / --dump-grads / loss line to 1e-9, and
# its chunked GDN equals the token recurrence (bench/peer/check_peer.py); hybrid-tiny and hybrid-wide. Needs a Python with torch;
# this file is picked up by the tests/*/*.cmake glob, so it probes for one itself.
if(DEFINED LS_TORCH_PYTHON)
  set(ls_peer_python ${LS_TORCH_PYTHON})
else()
  set(ls_peer_python /usr/bin/python3)
endif()
execute_process(COMMAND ${ls_peer_python} -c "import torch"
                RESULT_VARIABLE ls_peer_torch_rc OUTPUT_QUIET ERROR_QUIET)
if(ls_peer_torch_rc EQUAL 0)
  add_test(NAME peer_matches_trainer
           COMMAND ${ls_peer_python} ${CMAKE_SOURCE_DIR}/bench/peer/check_peer.py
                   $<TARGET_FILE:longstraw-train> ${CMAKE_SOURCE_DIR})
  set_tests_properties(peer_matches_trainer PROPERTIES TIMEOUT 120 LABELS "bench;python"
    ENVIRONMENT "OMP_NUM_THREADS=1")
  # the same on hybrid-wide (heads of 256, GQA 6, GDN heads of 128), whose rows bench_peer.sh reports too
  add_test(NAME peer_matches_trainer_wide
           COMMAND ${ls_peer_python} ${CMAKE_SOURCE_DIR}/bench/peer/check_peer.py
                   $<TARGET_FILE:longstraw-train> ${CMAKE_SOURCE_DIR} --config hybrid-wide)
  set_tests_properties(peer_matches_trainer_wide PROPERTIES TIMEOUT 300 LABELS "bench;python"
    ENVIRONMENT "OMP_NUM_THREADS=1")
else()
  message(STATUS "bench/peer: ${ls_peer_python} lacks torch; peer_matches_trainer not registered")
endif()
