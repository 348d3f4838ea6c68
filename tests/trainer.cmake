# The trainer: hybrid family end to end on one rank (float64 reference).
ls_add_criterion_test(test_hybrid_step SOURCES test_hybrid_step.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 600)
ls_add_criterion_test(test_train_cli SOURCES test_train_cli.c LIBS ls_receipts ls_trainer_base TIMEOUT 600)
add_dependencies(test_train_cli longstraw-train)
# hostile configs, files and arguments; the parameter plan equals the allocation (float64 tables)
ls_add_criterion_test(test_config SOURCES test_config.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 120)
ls_add_criterion_test(test_hybrid_fd SOURCES test_hybrid_fd.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 600)
ls_add_criterion_test(test_batch SOURCES test_batch.c LIBS ls_trainer_core TIMEOUT 300)
add_dependencies(test_batch longstraw-train)
