/* fuzz_rollouts.c - libFuzzer target for the rollouts JSONL reader
 * (ls_batch_parse_rollouts, what ls_batch_read_rollouts runs on a file's
 * first line), vocab 256, a 3000-byte line limit so that the limit is
 * reached within -max_len.  An accepted batch must hold the documented
 * invariants (ids < vocab, lengths >= 1, finite numbers, log-probs <= 0,
 * zero advantages and reference log-probs, zero old log-probs unless
 * supplied) and must survive a batch dump: formatted with a fixed config and
 * parsed back by ls_batch_parse_dump it is equal field by field.  Traps
 * otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/json_util.h"
#include "tests/fuzz/fuzz_util.h"

#define VOCAB 256
#define MAX_LINE 3000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ls_model_config *tiny_config(void) {
    static ls_model_config c;
    static int done;
    static const char text[] =
        "{\"family\":\"hybrid\",\"vocab\":256,\"d_model\":64,\"n_layers\":8,\"ffn_dim\":128,"
        "\"rms_eps\":1e-6,\"rope_theta\":10000,\"gdn_hk\":2,\"gdn_hv\":4,\"gdn_dk\":16,\"gdn_dv\":16,"
        "\"conv_kernel\":4,\"attn_heads\":4,\"attn_kv_heads\":2,\"head_dim\":32,\"rope_dim\":8}";
    if (!done) {
        char err[512];
        cJSON *doc = NULL;
        CHECK(ls_json_parse(text, sizeof text - 1, "tiny", &doc, err, sizeof err) == LS_OK);
        CHECK(ls_config_from_json(&c, doc, "tiny", err, sizeof err) == LS_OK);
        cJSON_Delete(doc);
        done = 1;
    }
    return &c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const ls_model_config *cfg = tiny_config();
    char err[512];
    ls_batch *b = NULL, *b2 = NULL;
    err[0] = '\0';
    ls_status st = ls_batch_parse_rollouts(&b, (const char *)data, size, "fuzz", VOCAB, MAX_LINE, err, sizeof err);
    if (st != LS_OK) {
        CHECK(b == NULL);
        fuzz_check_refusal(st, err);
        return 0;
    }
    fuzz_check_batch(b, VOCAB);
    for (size_t i = 0; i < b->G; i++) {
        CHECK(b->adv[i] == 0);
        for (size_t t = 0; t < b->R[i]; t++) {
            CHECK(b->ref_lp[i][t] == 0);
            CHECK(b->old_supplied || b->old_lp[i][t] == 0);
        }
    }
    ls_objective obj, obj2;
    ls_model_config cfg2;
    ls_objective_defaults(&obj);
    char *text = NULL;
    size_t len = 0;
    CHECK(ls_batch_format_dump(b, cfg, &obj, &text, &len, err, sizeof err) == LS_OK);
    CHECK(ls_batch_parse_dump(&b2, &cfg2, &obj2, text, len, "dump", err, sizeof err) == LS_OK);
    CHECK(fuzz_batch_equal(b, b2) && fuzz_cfg_equal(cfg, &cfg2) && fuzz_obj_equal(&obj, &obj2));
    free(text);
    ls_batch_free(b2);
    ls_batch_free(b);
    return 0;
}
