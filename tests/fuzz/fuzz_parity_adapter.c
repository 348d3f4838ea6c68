/* fuzz_parity_adapter.c - libFuzzer target for longstraw-parity's adapter
 * loader (parity/plan/parity_adapter.h): the input is an adapter file, written to
 * a scratch file and loaded (size cap, placeholders, schema, semantics);
 * when it loads, every template of both launches and the args is expanded
 * with hostile values and a job built for CP 1 and CP N.  Traps when an
 * invariant breaks:
 *  - a loaded adapter has f64, CP 1, DP 1 (1..8 DP sizes; one > 1 only
 *    with {dp} in its templates), 1..8 responses, at most 16 controls,
 *    each with a kind the levels know (dp_grad only beside a DP size > 1),
 *    a name and a profile;
 *  - an expansion either fits (NUL-terminated within the cap) or is refused
 *    with LS_ERR_ARG; a job (CP 1 and 2 x DP 1 and 2) has 1..95 arguments,
 *    the first non-empty;
 *  - a refused file leaves nothing allocated (LeakSanitizer) and an error
 *    message. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity/plan/parity_adapter.h"

static char path[256];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (path[0] == 0) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/ls-fuzz-adapter-%d.json", base, (int)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    ls_parity_adapter a;
    char err[1024] = "";
    if (ls_parity_adapter_load(path, &a, err, sizeof err) != LS_OK) {
        if (err[0] == 0) __builtin_trap();
        return 0;
    }
    if (!a.dtype[LS_PARITY_F64] || a.group < 1 || a.group > LS_PARITY_MAX_G ||
        a.n_controls > LS_PARITY_ADAPTER_CONTROLS || a.name[0] == 0 || a.profile[0] == 0)
        __builtin_trap();
    bool one = false;
    for (size_t i = 0; i < a.n_cps; i++) one = one || a.cps[i] == 1;
    if (!one) __builtin_trap();
    bool dp_one = false, dp_more = false;
    for (size_t i = 0; i < a.n_dps; i++) dp_one = dp_one || a.dps[i] == 1, dp_more = dp_more || a.dps[i] > 1;
    if (!dp_one || a.n_dps < 1 || a.n_dps > LS_PARITY_MAX_CP || (dp_more && !a.uses_dp)) __builtin_trap();
    for (size_t i = 0; i < a.n_controls; i++) {
        if (ls_parity_kind_level(a.controls[i].kind) == 0) __builtin_trap();
        if (strcmp(a.controls[i].kind, "dp_grad") == 0 && !dp_more) __builtin_trap();
    }
    static char big[2000];
    memset(big, 'z', sizeof big - 1);
    ls_parity_adapter_vars v = {.mode = "run", .cp = 8, .dp = 8, .dtype = "f32", .grad_mode = "detached", .fault = "{cp}",
                                .weights = big + 1000, .batch = "b", .out = "o", .seed = UINT64_MAX};
    const cJSON *parts[3] = {a.launch1, a.launchn, a.args}, *x;
    char out[LS_PARITY_ADAPTER_ARG_MAX + 1];
    for (int k = 0; k < 3; k++) {
        cJSON_ArrayForEach(x, parts[k]) {
            out[sizeof out - 1] = 'q';
            ls_status s = ls_parity_adapter_expand(&a, x->valuestring, &v, out, sizeof out);
            if (s != LS_OK && s != LS_ERR_ARG) __builtin_trap();
            if (s == LS_OK && memchr(out, 0, sizeof out) == NULL) __builtin_trap();
        }
    }
    for (int cp = 1; cp <= 4; cp++) {
        v.cp = 1 + (cp - 1) % 2;
        v.dp = 1 + (cp - 1) / 2;
        ls_parity_job j;
        if (ls_parity_adapter_job(&a, &v, "/dev/null", &j, err, sizeof err) == LS_OK) {
            if (j.argc < 1 || j.argc > 95 || j.argv[0][0] == 0 || j.argv[j.argc] != NULL) __builtin_trap();
            ls_parity_job_free(&j);
        }
    }
    ls_parity_adapter_free(&a);
    return 0;
}
