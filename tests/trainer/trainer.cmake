# The trainer: hybrid family end to end on one rank (float64 reference).
ls_add_criterion_test(test_hybrid_step SOURCES trainer/test_hybrid_step.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 600)
ls_add_criterion_test(test_train_cli SOURCES trainer/test_train_cli.c LIBS ls_receipts ls_trainer_core TIMEOUT 600)
add_dependencies(test_train_cli longstraw-train)
# hostile configs, files and arguments; the parameter plan equals the allocation (float64 tables)
ls_add_criterion_test(test_config SOURCES trainer/test_config.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
# the registry of model families: every family complete, each check injected (trainer/families/README.md)
ls_add_criterion_test(test_family SOURCES trainer/test_family.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 60)
ls_add_criterion_test(test_hybrid_fd SOURCES trainer/test_hybrid_fd.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 600)
ls_add_criterion_test(test_batch SOURCES trainer/test_batch.c LIBS ls_trainer_core TIMEOUT 300)
add_dependencies(test_batch longstraw-train)
# the step: reference-policy order, beta 0, supplied ref, sft, prefix-frozen, metrics (float64)
ls_add_criterion_test(test_step_features SOURCES trainer/test_step_features.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 300)
ls_add_criterion_test(test_task_recall SOURCES trainer/test_task_recall.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_train_loop SOURCES trainer/test_train_loop.c LIBS ls_receipts ls_trainer_core TIMEOUT 600)
add_dependencies(test_train_loop longstraw-train)
# the parameter table counted before allocation, per real type (issue 12)
ls_add_criterion_test(test_params SOURCES trainer/test_params.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 300)
ls_add_criterion_test(test_params_f32 SOURCES trainer/test_params.c LIBS ls_trainer_f32 TIMEOUT 300)
# the mla family: its table by hand and by the reference's names, its forward vs mla_ref.py (float64)
ls_add_criterion_test(test_mla SOURCES trainer/test_mla.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 300)
ls_add_criterion_test(test_mla_f32 SOURCES trainer/test_mla.c LIBS ls_trainer_f32 TIMEOUT 300)
# the mla family's transaction on one rank: full = naive, detached = the cut, finite differences, forms, state
# bytes, the moe_dispatch peak (float64; float32 with looser bars and no finite differences)
ls_add_criterion_test(test_mla_train SOURCES trainer/test_mla_train.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 600)
ls_add_criterion_test(test_mla_train_f32 SOURCES trainer/test_mla_train.c LIBS ls_trainer_f32 TIMEOUT 600)
add_dependencies(test_mla_train longstraw-train longstraw-audit)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(test_mla_train PRIVATE LS_MPIEXEC="${MPIEXEC_EXECUTABLE}" LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}"
    LS_LSAN_SUPP="${CMAKE_CURRENT_SOURCE_DIR}/support/comm_lsan.supp")
endif()

# --replay-checkpoint layer against the taped replay (tests/trainer/replay_checkpoint.sh): the gradients bit for
# bit, both families and gradient modes, one rank and CP-2; a smaller branch graph; the same trace; the
# decision recorded; auto under a budget; level 4 only with a parity report whose runs took the run's replay
# and state tier.  About 60 s.
if(TARGET longstraw-train)
  add_test(NAME replay_checkpoint COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trainer/replay_checkpoint.sh ${CMAKE_BINARY_DIR})
  # labelled slow: its two parity --like runs take 160 s under the sanitizers (test_coll_memo runs the
  # checkpointed segment and the memo there)
  set_tests_properties(replay_checkpoint PROPERTIES TIMEOUT 600 LABELS "parity;slow"
                       ENVIRONMENT "OMP_NUM_THREADS=1;${LS_MPI_TEST_ENV}")
endif()

# --state-tier host against device (tests/trainer/state_tier.sh): gradients and log-probs bit for bit, both families
# and gradient modes, one rank and CP-2; the device tier holds two layers' staged shares, the host tier the
# state; the plan of each tier within 10%; a staging that skips a page is caught.  About 15 s.
if(TARGET longstraw-train)
  add_test(NAME state_tier COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trainer/state_tier.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(state_tier PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1;${LS_MPI_TEST_ENV}")
endif()

# The checkpointed replay's guards (trainer/base/coll_memo.h, seg_frame.c): the memo's keys, a replayed
# collective sends nothing, a checkpointed segment equals the taped one bit for bit, a changed layer input
# fails the backward.
ls_add_criterion_test(test_coll_memo SOURCES trainer/test_coll_memo.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)

# The chunked replay (trainer/step/replay_chunk.h): one chunk is the taped replay bit for bit, chunks of 5 of
# 12 tokens equal it to rounding in both gradient modes and families, a weight changed between the forward
# and the backward fails the backward.
ls_add_criterion_test(test_replay_chunk SOURCES trainer/test_replay_chunk.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)

# The CPU kernels' ISA (tests/kernels/kernel_isa.sh): LS_KERNEL_ISA refused outside its words and above the CPU; a run
# records the ISA in its build object (so in its build digest); a parity report --like a portable run certifies
# it and not the same run with the CPU's best ISA.  About 15 s.
if(TARGET longstraw-train)
  add_test(NAME kernel_isa COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/kernels/kernel_isa.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(kernel_isa PROPERTIES TIMEOUT 600 LABELS "parity"
                       ENVIRONMENT "${LS_MPI_TEST_ENV}")
endif()
