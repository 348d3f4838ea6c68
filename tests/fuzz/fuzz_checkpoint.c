/* fuzz_checkpoint.c - libFuzzer target for the checkpoint loader
 * (ls_checkpoint_load_bytes, float32) into the micro model of
 * checkpoint_micro.h, once in lora and once in full train mode.  A refusal
 * says why, under the source's name, with one of the documented statuses; an
 * accepted file holds a valid step and rng_scheme, its digests were checked
 * exactly when it is a v2 file, info.sha256 is the input's, and every
 * weight, moment and reference value loaded equals the bytes of the file's
 * tensor of that name (read through the plain safetensors reader).  Nothing leaks through
 * the memory tracker.  Traps otherwise.
 * Seeds: tests/fuzz/corpus/fuzz_checkpoint/seed-* (tests/trainer/test_checkpoint.c
 * writes them with LS_WRITE_CHECKPOINT_SEEDS=1). */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "receipts/format/digest.h"
#include "tests/fuzz/checkpoint_micro.h"
#include "trainer/io/checkpoint.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ls_params *models[2];
static size_t baseline_live;

/* Every buffer of p equals the file's tensor of its checkpoint name. */
static void check_loaded(ls_params *p, const uint8_t *data, size_t size, int digested) {
    ls_safetensors *sf = NULL;
    char err[256];
    CHECK(ls_safetensors_parse(&sf, data, size, err, sizeof err) == LS_OK);
    const char *fmt = ls_safetensors_metadata_get(sf, "format");
    CHECK(fmt && digested == (strcmp(fmt, LS_CHECKPOINT_FORMAT) == 0));
    ls_params *ref = NULL;
    CHECK(ls_params_ref_view_f32(&ref, p) == LS_OK);
    size_t expected = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        const float *buf[4] = {t->w, t->trainable ? t->m : NULL, t->trainable ? t->v : NULL,
                               ref->t[i].w != t->w ? ref->t[i].w : NULL};
        static const char *const pre[4] = {"", "optimizer.m.", "optimizer.v.", "reference."};
        for (int k = 0; k < 4; k++) {
            if (!buf[k]) continue;
            char name[160];
            snprintf(name, sizeof name, "%s%s", pre[k], t->name);
            const ls_safetensors_tensor *ft = ls_safetensors_find(sf, name);
            CHECK(ft && ft->dtype == LS_SAFETENSORS_F32 && ft->numel == t->numel);
            CHECK(memcmp(ft->data, buf[k], ft->nbytes) == 0); /* little-endian host */
            expected++;
        }
    }
    CHECK(ls_safetensors_count(sf) == expected);
    ls_params_free_f32(ref);
    ls_safetensors_free(sf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!models[0]) {
        CHECK(ls_micro_params(&models[0], LS_TRAIN_LORA, 5) == LS_OK);
        CHECK(ls_micro_params(&models[1], LS_TRAIN_FULL, 5) == LS_OK);
        ls_mem_stats s;
        ls_mem_snapshot(&s);
        baseline_live = s.live_total;
    }
    for (int m = 0; m < 2; m++) {
        ls_checkpoint_info info, sentinel;
        memset(&sentinel, 0x5A, sizeof sentinel);
        info = sentinel;
        char err[1024];
        err[0] = '\0';
        ls_status st = ls_checkpoint_load_bytes_f32(models[m], data, size, "fuzz", &info, err, sizeof err);
        if (st != LS_OK) {
            CHECK(st == LS_ERR_FORMAT || st == LS_ERR_TRUNCATED || st == LS_ERR_NONFINITE || st == LS_ERR_NOMEM ||
                  st == LS_ERR_CORRUPT);
            CHECK(memchr(err, '\0', sizeof err) && strncmp(err, "checkpoint fuzz: ", 17) == 0);
            CHECK(memcmp(&info, &sentinel, sizeof info) == 0);
        } else {
            CHECK(info.step >= 0);
            size_t n = strnlen(info.rng_scheme, sizeof info.rng_scheme);
            CHECK(n > 0 && n < sizeof info.rng_scheme);
            char hex[LS_DIGEST_HEX_SIZE];
            CHECK(ls_digest_sha256_hex(data, size, hex) == LS_OK && strcmp(hex, info.sha256) == 0);
            check_loaded(models[m], data, size, info.digested);
        }
    }
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    CHECK(s.live_total == baseline_live);
    return 0;
}
