# trainer/plan.cmake - the step plan (trainer/plan/, longstraw-plan; docs/plan.md): FLOPs against hand counts
# and the parameter table, the Hugging Face mapping with its hostile inputs, and the original work's
# figures (Qwen KV per rank at 2,088,960 tokens over CP-8; GLM 5.8125 GiB per rank at 65,536 tokens)
# from the shipped configs and from the Hugging Face ones, through longstraw-plan and its schema.
ls_add_criterion_test(test_plan_flops SOURCES trainer/test_plan_flops.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
# The element sizes are inputs: the float64 library at 4 bytes plans what the float32 one does, and the mla
# MoE dispatch buffers follow --dtype (a hand count at 2, 4 and 8 bytes).
ls_add_criterion_test(test_plan_dtype SOURCES trainer/test_plan_dtype.c LIBS ls_trainer_f64 ls_trainer_f32 DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_plan_hf SOURCES trainer/test_plan_hf.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_plan_cli SOURCES trainer/test_plan_cli.c LIBS ls_trainer_f64 ls_receipts DEFS LS_REAL_F64
  "LS_PLAN_EXE=\"$<TARGET_FILE:longstraw-plan>\"" TIMEOUT 300)
add_dependencies(test_plan_cli longstraw-plan)
set_tests_properties(test_plan_flops test_plan_dtype test_plan_hf test_plan_cli PROPERTIES LABELS plan)

# docs/plan.md's example outputs are the binary's: every block starting with `$ longstraw-plan` is run from
# the source root and compared line by line (scripts/doc_examples.py; --update rewrites them); the script
# itself against a stub binary (tests/tools/doc_examples_check.py).
add_test(NAME docs_plan_examples
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/doc_examples.py --build ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR}/docs/plan.md)
add_test(NAME docs_examples_script COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/tools/doc_examples_check.py)
set_tests_properties(docs_plan_examples docs_examples_script PROPERTIES LABELS plan TIMEOUT 120)

# One plan, true: longstraw-train's plan (receipts' rank_state.memory_plan) against the memory tracker's
# per-step peak (memory.per_step.total_peak_bytes) within 10% on every rank, over a grid: both families,
# both gradient modes, CP 1/2/4 (mpirun), prompts 1K-4K, G 1-16 (bench/plan_sweep.py; --grid full is the
# bench's).  A plan formula that drifts from what the code allocates fails it.  Labelled slow: under the
# sanitizers it takes 6.5 minutes run alone, and the plan's arithmetic it checks does not change there.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_test(NAME plan_vs_measured
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/bench/plan_sweep.py --build ${CMAKE_BINARY_DIR} --grid small)
  set_tests_properties(plan_vs_measured PROPERTIES LABELS "plan;mpi;slow" TIMEOUT 900 RUN_SERIAL TRUE
                       ENVIRONMENT "${LS_MPI_TEST_ENV}")
endif()

# The original work's runs as they ran, from the shipped Hugging Face configs (tests/trainer/plan_original.py):
# Qwen's G = 8 x R = 8,192 step at CP-8 fits a 96 GB H20 (the replay checkpointed), G 2 -> 8 moves the
# peak by at most the original's 0.208 GB.
add_test(NAME plan_original COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/trainer/plan_original.py ${CMAKE_BINARY_DIR})
set_tests_properties(plan_original PROPERTIES LABELS plan TIMEOUT 120)

# common/cli_opts.h: the option tables every executable parses with (longstraw-plan's rows like
# longstraw-train's); the faults a table can hold are caught.
ls_add_criterion_test(test_cli_opts SOURCES trainer/test_cli_opts.c LIBS ls_trainer_f64 ls_common)
