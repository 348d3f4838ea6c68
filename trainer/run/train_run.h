/* train_run.h - one longstraw-train job (numeric: per real type): memory
 * plan, steps, trace events, dumps, receipts and manifest.  Returns the
 * process exit status (0 ok, 1 step failed, 2 bad input). */
#ifndef LS_TRAINER_TRAIN_RUN_H
#define LS_TRAINER_TRAIN_RUN_H
#include "kernels/real.h"
#include "trainer/run/train_args.h"

int LS_K(ls_train_run)(const ls_train_args *a);
int ls_train_run_f32(const ls_train_args *a);
int ls_train_run_f64(const ls_train_args *a);
#endif
