/* fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * Parses the input as a whole file from memory, walks every tensor and
 * metadata entry, converts every convertible tensor, looks each name up and
 * frees; checks the invariants the reader promises (data inside the input,
 * byte counts consistent, name order) and that nothing leaks through the
 * memory tracker.  Run: fuzz_safetensors -max_total_time=60 [corpus_dir]
 * (tests/fixtures/safetensors/ makes a good seed corpus). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors.h"

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond))                                                                           \
            abort();                                                                           \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ls_safetensors *st = NULL;
    char err[256];
    ls_status rc = ls_safetensors_parse(&st, data, size, err, sizeof err);
    if (rc != LS_OK) {
        CHECK(st == NULL);
        CHECK(rc == LS_ERR_FORMAT || rc == LS_ERR_TRUNCATED || rc == LS_ERR_NOMEM);
        CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
    } else {
        size_t n = ls_safetensors_count(st);
        const char *prev = NULL;
        for (size_t i = 0; i < n; i++) {
            const ls_safetensors_tensor *t = ls_safetensors_at(st, i);
            CHECK(t != NULL && t->name != NULL);
            CHECK(prev == NULL || strcmp(prev, t->name) < 0);
            prev = t->name;
            CHECK(ls_safetensors_find(st, t->name) == t);
            CHECK(t->nbytes == t->numel * ls_safetensors_dtype_size(t->dtype));
            CHECK(t->data >= data && t->nbytes <= size && t->data + t->nbytes <= data + size);
            /* cap the conversion so huge (valid) inputs stay fast */
            if (t->numel > 0 && t->numel <= (1u << 16)) {
                double *d = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)t->numel * sizeof *d);
                float *f = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)t->numel * sizeof *f);
                if (d != NULL && f != NULL) {
                    ls_status r1 = ls_safetensors_read_f64(t, d, (size_t)t->numel);
                    ls_status r2 = ls_safetensors_read_f32(t, f, (size_t)t->numel);
                    CHECK(r1 == r2 && (r1 == LS_OK || r1 == LS_ERR_UNSUPPORTED));
                }
                ls_mem_free(d);
                ls_mem_free(f);
            }
        }
        CHECK(ls_safetensors_at(st, n) == NULL);
        for (size_t i = 0; i < ls_safetensors_metadata_count(st); i++) {
            const char *k = NULL, *v = NULL;
            CHECK(ls_safetensors_metadata_at(st, i, &k, &v) == LS_OK);
            CHECK(ls_safetensors_metadata_get(st, k) == v);
        }
    }
    ls_safetensors_free(st);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    CHECK(s.live_total == 0);
    return 0;
}
