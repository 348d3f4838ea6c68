# steps.sequence (audit/rules/rank_seq.c; tests/audit/audit_sequence.sh): real runs of every kind of step
# (GRPO with rollout, the reference kept or recaptured, beta 0, naive, given rollouts, SFT and SFT
# warm-up steps, prefix-frozen, two prompt groups a step, probed, the capture in segments, resumed, mla,
# CP-2 when mpirun is found; examples/torch_cp's v2 runs when LS_TORCH_PYTHON has torch) pass it at
# the level the other rules give; a copy of one with the optimizer moved before the
# backward, a replay or a layer_end duplicated, a phase dropped, two phases swapped, an event out of
# its phase (every digest recomputed) is refused by it, naming rank, file and seq.
if(TARGET longstraw-audit)
  add_test(NAME audit_sequence
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/audit/audit_sequence.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(audit_sequence PROPERTIES TIMEOUT 600
    ENVIRONMENT "OMP_NUM_THREADS=1;LS_TORCH_PYTHON=${LS_TORCH_PYTHON};${LS_MPI_TEST_ENV}")
endif()
