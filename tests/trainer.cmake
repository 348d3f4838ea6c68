# The trainer: hybrid family end to end on one rank (float64 reference).
ls_add_criterion_test(test_hybrid_step SOURCES test_hybrid_step.c LIBS ls_trainer_f64 DEFS LS_REAL_F64 TIMEOUT 600)
