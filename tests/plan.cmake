# plan.cmake - the step plan (trainer/plan/, longstraw-plan; docs/plan.md): FLOPs against hand counts
# and the parameter table, the Hugging Face mapping with its hostile inputs, and the original work's
# figures (Qwen KV per rank at 2,088,960 tokens over CP-8; GLM 5.8125 GiB per rank at 65,536 tokens)
# from the shipped configs and from the Hugging Face ones, through longstraw-plan and its schema.
ls_add_criterion_test(test_plan_flops SOURCES test_plan_flops.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_plan_hf SOURCES test_plan_hf.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_plan_cli SOURCES test_plan_cli.c LIBS ls_trainer_f64 ls_receipts DEFS LS_REAL_F64
  "LS_PLAN_EXE=\"$<TARGET_FILE:longstraw-plan>\"" TIMEOUT 300)
add_dependencies(test_plan_cli longstraw-plan)
set_tests_properties(test_plan_flops test_plan_hf test_plan_cli PROPERTIES LABELS plan)
