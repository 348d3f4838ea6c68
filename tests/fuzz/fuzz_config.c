/* fuzz_config.c - libFuzzer target for the model config parser
 * (ls_config_from_json on ls_json_parse output, as ls_config_load runs it).
 * An accepted config must pass ls_config_check, and ls_config_to_json of
 * it must (as a tree and through its canonical text) parse back to an equal
 * config, field by field.  A refusal must name a key and leave no state.
 * Traps otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    cJSON *doc = NULL;
    if (ls_json_parse((const char *)data, size, "fuzz", &doc, err, sizeof err) != LS_OK) return 0;
    ls_model_config c, c2, c3;
    err[0] = '\0';
    ls_status st = ls_config_from_json(&c, doc, "fuzz", err, sizeof err);
    cJSON_Delete(doc);
    if (st != LS_OK) {
        fuzz_check_refusal(st, err);
        return 0;
    }
    CHECK(ls_config_check(&c, err, sizeof err) == LS_OK);
    CHECK(c.vocab >= 2 && c.d_model >= 1 && c.n_layers >= 1 && c.ffn_dim >= 1);
    CHECK(c.rms_eps > 0 && c.rope_theta > 0);

    cJSON *j = ls_config_to_json(&c, NULL);
    CHECK(j != NULL);
    CHECK(ls_config_from_json(&c2, j, "to_json", err, sizeof err) == LS_OK);
    CHECK(fuzz_cfg_equal(&c, &c2));
    char *text = NULL;
    size_t len = 0;
    CHECK(ls_json_print_canonical(j, &text, &len, err, sizeof err) == LS_OK);
    cJSON *back = NULL;
    CHECK(ls_json_parse(text, len, "canonical", &back, err, sizeof err) == LS_OK);
    CHECK(ls_config_from_json(&c3, back, "canonical", err, sizeof err) == LS_OK);
    CHECK(fuzz_cfg_equal(&c, &c3));
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(j);
    return 0;
}
