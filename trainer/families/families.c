/* families.c - the families this trainer implements (families.h). */
#include "trainer/families/families.h"

#include <stdio.h>

/* Every registered family's table (ls_family_list.h, generated from
 * trainer/families/families.list: each family's folder defines
 * ls_family_<name> per real type). */
#define LS_FAMILY_ENTRY(n) extern const ls_family_ops LS_K(ls_family_##n);
#include "ls_family_list.h"
#undef LS_FAMILY_ENTRY

static const ls_family_ops *const TABLES[] = {
#define LS_FAMILY_ENTRY(n) &LS_K(ls_family_##n),
#include "ls_family_list.h"
#undef LS_FAMILY_ENTRY
};

const ls_family_ops *LS_K(ls_family_ops_of)(const ls_family_desc *f, char *err, size_t err_len) {
    for (size_t i = 0; f && i < sizeof TABLES / sizeof *TABLES; i++)
        if (TABLES[i]->desc == f) return TABLES[i];
    if (err && err_len)
        snprintf(err, err_len, "key 'family': '%s' is not implemented by this trainer",
                 ls_family_name(f));
    return NULL;
}

ls_status LS_K(ls_params_tensor_count)(const ls_model_config *cfg, const ls_objective *obj, size_t *n, char *err,
                                       size_t err_len) {
    *n = 0;
    const ls_family_ops *fam = LS_K(ls_family_ops_of)(cfg->family, err, err_len);
    if (!fam) return LS_ERR_UNSUPPORTED;
    LS_K(ls_params_tensor_count_of)(&fam->layout, cfg, obj, n);
    return LS_OK;
}

ls_status LS_K(ls_params_plan)(const ls_model_config *cfg, const ls_objective *obj,
                               size_t bytes[LS_MEM_COUNT], char *err, size_t err_len) {
    return LS_K(ls_params_plan_ep)(cfg, obj, 1, bytes, err, err_len);
}

ls_status LS_K(ls_params_plan_ep)(const ls_model_config *cfg, const ls_objective *obj, int ep,
                                  size_t bytes[LS_MEM_COUNT], char *err, size_t err_len) {
    const ls_family_ops *fam = LS_K(ls_family_ops_of)(cfg->family, err, err_len);
    if (!fam) {
        for (int c = 0; c < LS_MEM_COUNT; c++) bytes[c] = 0;
        return LS_ERR_UNSUPPORTED;
    }
    return LS_K(ls_params_plan_ep_of)(&fam->layout, cfg, obj, ep, bytes, err, err_len);
}

ls_status LS_K(ls_params_init)(ls_params **out, const ls_model_config *cfg,
                               const ls_objective *obj, uint64_t seed,
                               char *err, size_t err_len) {
    return LS_K(ls_params_init_ep)(out, cfg, obj, seed, 0, 1, err, err_len);
}

ls_status LS_K(ls_params_init_ep)(ls_params **out, const ls_model_config *cfg, const ls_objective *obj,
                                  uint64_t seed, int ep_rank, int ep_size, char *err, size_t err_len) {
    *out = NULL;
    const ls_family_ops *fam = LS_K(ls_family_ops_of)(cfg->family, err, err_len);
    if (!fam) return LS_ERR_UNSUPPORTED;
    ls_status st = LS_K(ls_params_init_ep_of)(&fam->layout, out, cfg, obj, seed, ep_rank, ep_size, err, err_len);
    if (st == LS_OK) (*out)->fam = fam;
    return st;
}
