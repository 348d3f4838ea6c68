/* fuzz_plan_hf.c - libFuzzer target for the Hugging Face config.json mapping
 * (ls_plan_hf_from_json on ls_json_parse output, as ls_plan_hf_load runs it;
 * trainer/plan/plan_hf.c).  An accepted file must map to a config that
 * passes ls_config_check, with index_sets in [1, n_layers] for mla and 0 for
 * hybrid; a refusal must be FORMAT or UNSUPPORTED with a message naming a
 * key or the object.  Traps otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "tests/fuzz/fuzz_util.h"
#include "trainer/families/mla/mla_config.h"
#include "trainer/plan/plan_hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    cJSON *doc = NULL;
    if (ls_json_parse((const char *)data, size, "fuzz", &doc, err, sizeof err) != LS_OK) return 0;
    for (int dense = 0; dense <= 1; ++dense) {
        ls_hf_model m;
        err[0] = '\0';
        ls_status st = ls_plan_hf_from_json(&m, doc, "fuzz", dense, err, sizeof err);
        if (st != LS_OK) {
            CHECK(st == LS_ERR_FORMAT || st == LS_ERR_UNSUPPORTED);
            CHECK(memchr(err, '\0', sizeof err) != NULL && strncmp(err, "fuzz: ", 6) == 0);
            CHECK(strstr(err, "key '") != NULL || strstr(err, "object") != NULL);
            continue;
        }
        CHECK(ls_config_check(&m.cfg, err, sizeof err) == LS_OK);
        if (m.cfg.family == &ls_family_desc_mla) CHECK(m.index_sets >= 1 && m.index_sets <= (size_t)m.cfg.n_layers);
        else CHECK(m.index_sets == 0);
        CHECK(!m.moe_as_dense || dense);
    }
    cJSON_Delete(doc);
    return 0;
}
