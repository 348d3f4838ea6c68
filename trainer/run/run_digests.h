/* run_digests.h - parameter digests after an update, as param_digest trace
 * events: one per trainable tensor and one "trainable" group digest (sha256
 * over "name hex\n" lines in table order).  Numeric (LS_K names). */
#ifndef LS_TRAINER_RUN_DIGESTS_H
#define LS_TRAINER_RUN_DIGESTS_H
#include "trainer/dist/ep.h"
#include "trainer/model/params.h"
#include "trainer/run/run_obs.h"

/* Under expert parallelism (ep not NULL) a collective of the EP group: the
 * other ranks' experts' digests come from their owners (ep.h
 * ls_ep_param_digests), so that every rank emits an EP-1 run's digests.
 * LS_ERR_NOMEM, or the collective's failure. */
ls_status LS_K(ls_run_emit_digests)(ls_run_obs *o, const ls_params *p, const ls_ep *ep);
#endif
