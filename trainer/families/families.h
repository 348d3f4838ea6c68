/* families.h - the numeric side of the registry of families: a family's
 * table chosen by the config's family (the registry table is generated from
 * trainer/families/families.list; family_desc.h is its dtype-independent
 * side), and the parameter table of a config (params.h's *_of functions with
 * the family chosen here).  Names no family; the shared trainer below it
 * reaches a model through p->fam (family.h).  Numeric (LS_K names). */
#ifndef LS_TRAINER_FAMILIES_H
#define LS_TRAINER_FAMILIES_H
#include "trainer/model/family.h"

/* The table of family f (static storage, never freed); NULL when this
 * trainer does not implement it (err: names the config key 'family'). */
const ls_family_ops *LS_K(ls_family_ops_of)(const ls_family_desc *f, char *err, size_t err_len);

/* The number of tensors cfg/obj's table has.  LS_ERR_UNSUPPORTED naming the
 * key 'family' for a family without a table. */
ls_status LS_K(ls_params_tensor_count)(const ls_model_config *cfg, const ls_objective *obj, size_t *n, char *err,
                                       size_t err_len);
/* ls_params_plan_of (params.h) for cfg's family. */
ls_status LS_K(ls_params_plan)(const ls_model_config *cfg, const ls_objective *obj,
                               size_t bytes[LS_MEM_COUNT], char *err, size_t err_len);
/* ls_params_plan_ep_of (params.h): one rank of expert parallelism over ep. */
ls_status LS_K(ls_params_plan_ep)(const ls_model_config *cfg, const ls_objective *obj, int ep,
                                  size_t bytes[LS_MEM_COUNT], char *err, size_t err_len);
/* ls_params_init_ep_of (params.h): EP rank ep_rank of ep_size. */
ls_status LS_K(ls_params_init_ep)(ls_params **out, const ls_model_config *cfg, const ls_objective *obj,
                                  uint64_t seed, int ep_rank, int ep_size, char *err, size_t err_len);
/* ls_params_init_of (params.h) for cfg's family: *out owned by the caller,
 * released with ls_params_free. */
ls_status LS_K(ls_params_init)(ls_params **out, const ls_model_config *cfg,
                               const ls_objective *obj, uint64_t seed,
                               char *err, size_t err_len);
#endif
