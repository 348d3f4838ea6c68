/* run_digests.h - parameter digests after an update, as param_digest trace
 * events: one per trainable tensor and one "trainable" group digest (sha256
 * over "name hex\n" lines in table order).  Numeric (LS_K names). */
#ifndef LS_TRAINER_RUN_DIGESTS_H
#define LS_TRAINER_RUN_DIGESTS_H
#include "trainer/model/params.h"
#include "trainer/run/run_obs.h"

void LS_K(ls_run_emit_digests)(ls_run_obs *o, const ls_params *p);
#endif
