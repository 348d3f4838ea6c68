/* fuzz_batch_dump.c - libFuzzer target for the batch dump reader
 * (ls_batch_parse_dump, docs/model.md §6).  An accepted dump must hold the
 * documented invariants (config passes ls_config_check, ids < vocab, finite
 * numbers, log-probs <= 0); re-written with ls_batch_format_dump and read
 * again it is equal field by field (batch, config, objective), and writing
 * that copy gives the same bytes (the dump text is a fixed point).  A
 * refusal leaves nothing and says why.  Traps otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ls_batch *b = NULL, *b2 = NULL;
    ls_model_config c, c2;
    ls_objective o, o2;
    err[0] = '\0';
    ls_status st = ls_batch_parse_dump(&b, &c, &o, (const char *)data, size, "fuzz", err, sizeof err);
    if (st != LS_OK) {
        CHECK(b == NULL);
        fuzz_check_refusal(st, err);
        return 0;
    }
    CHECK(ls_config_check(&c, err, sizeof err) == LS_OK);
    fuzz_check_batch(b, c.vocab);
    CHECK(b->old_supplied == 1);
    char *t1 = NULL, *t2 = NULL;
    size_t n1 = 0, n2 = 0;
    CHECK(ls_batch_format_dump(b, &c, &o, &t1, &n1, err, sizeof err) == LS_OK);
    CHECK(ls_batch_parse_dump(&b2, &c2, &o2, t1, n1, "rewritten", err, sizeof err) == LS_OK);
    CHECK(fuzz_batch_equal(b, b2) && fuzz_cfg_equal(&c, &c2) && fuzz_obj_equal(&o, &o2));
    CHECK(ls_batch_format_dump(b2, &c2, &o2, &t2, &n2, err, sizeof err) == LS_OK);
    CHECK(n1 == n2 && memcmp(t1, t2, n1) == 0);
    free(t1);
    free(t2);
    ls_batch_free(b2);
    ls_batch_free(b);
    return 0;
}
