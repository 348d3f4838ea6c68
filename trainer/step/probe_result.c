/* probe_result.c - the gradient probe's names, defaults and result
 * (probe.h), dtype-independent. */
#include "trainer/step/probe.h"

#include <stdlib.h>
#include <string.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/base/rng.h"

const char *ls_probe_verdict_name(ls_probe_verdict v) {
    static const char *const N[] = {"pass", "fail", "reported", "not_applicable"};
    return (int)v >= 0 && (size_t)v < sizeof N / sizeof N[0] ? N[v] : "unknown";
}

const char *ls_probe_grouping_name(ls_probe_grouping g) {
    return g == LS_PROBE_GROUPS_ALL ? "all" : g == LS_PROBE_GROUPS_LAYER ? "layer" : "unknown";
}

/* float64: parity's step (docs/parity.md); float32: the step whose error was
 * smallest on hybrid-tiny (P = 68 and 1024; docs/train.md "The gradient
 * probe"): below it the loss's rounding grows as 1/h, above it Richardson's
 * truncation error.  The tolerances sit 1000x (float64) and 10x (float32)
 * above the largest fault-free error measured. */
double ls_probe_default_h(int f64) { return f64 ? 1e-4 : 3e-2; }

double ls_probe_default_tol(int f64) { return f64 ? 1e-6 : 1e-2; }

uint64_t ls_probe_seed(uint64_t step_seed) {
    return ls_rng_derive(step_seed, "probe") & ((UINT64_C(1) << 53) - 1);
}

void ls_probe_result_free(ls_probe_result *r) {
    if (!r) return;
    ls_mem_free(r->groups);
    memset(r, 0, sizeof *r);
}
