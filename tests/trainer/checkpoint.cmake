# Training checkpoints (trainer/io/checkpoint.h): round trip, resume equality and
# every refusal, once per dtype (each links the other dtype's trainer to write
# a real checkpoint of the other dtype).
ls_add_criterion_test(test_checkpoint_f64 SOURCES trainer/test_checkpoint.c LIBS ls_trainer_f64 ls_trainer_f32 DEFS LS_REAL_F64 TIMEOUT 300)
ls_add_criterion_test(test_checkpoint_f32 SOURCES trainer/test_checkpoint.c LIBS ls_trainer_f32 ls_trainer_f64 TIMEOUT 300)
