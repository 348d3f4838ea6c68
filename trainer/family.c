/* family.c - the families this trainer implements (family.h). */
#include "trainer/family.h"
#include "trainer/mla.h"

#include <stdio.h>

const ls_family_ops *LS_K(ls_family_ops_of)(ls_family f, char *err, size_t err_len) {
    if (f == LS_FAMILY_HYBRID) return &LS_K(ls_family_hybrid); /* and ls_family_has_trainer (config.c) */
    if (f == LS_FAMILY_MLA) return &LS_K(ls_family_mla); /* tensor list and forward; no transaction yet */
    if (err && err_len)
        snprintf(err, err_len, "key 'family': '%s' is not implemented by this trainer",
                 ls_family_name(f));
    return NULL;
}
