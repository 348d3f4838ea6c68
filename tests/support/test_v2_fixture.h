/* test_v2_fixture.h - a hand-written v2 run directory (docs/contract.md
 * §1-2) for the reader, receipt and audit tests: world 2, one CP group of
 * both ranks, one step, plain events.jsonl traces, v2 receipts and manifest.
 * The build identity is the "build identity" vector of
 * tests/data/jcs_vectors.json with its published digest, so the fixture
 * does not depend on the code under test to be right.  Options inject the
 * faults the v2 readers claim to catch. */
#ifndef LS_TEST_V2_FIXTURE_H
#define LS_TEST_V2_FIXTURE_H

#include <stdbool.h>

typedef struct {
    bool differ_out;        /* rank 1's first allreduce out_sha256 differs from rank 0's */
    bool no_digests;        /* no collective carries out_sha256 */
    bool tamper_build;      /* every build_digest has one hex digit changed */
    const char *bad_phase;  /* rank 0 begins and ends this phase (not in the vocabulary) */
    bool v1_event;          /* rank 0 has one event with "v":1 */
    bool no_memory;         /* no memory event */
    bool bad_memory;        /* rank 1's memory event says total_live 99, its categories 15 */
    bool allreduce_only;    /* the fixture's group collectives are its allreduce only (no broadcast, all_to_all) */
    const char *const *extra[2]; /* per rank: NULL-terminated fields (JSON after "ev") of more collective
                                    events, in the replay phase after the fixture's own (NULL: none) */
    const char *extra_group; /* one more group object of every header (JSON), NULL none */
} ls_v2_fixture;

/* The digest of the fixture's artifacts (the shared JCS vector's). */
#define LS_V2_FIXTURE_BUILD_DIGEST "2c38599566107f8f036dd45d96882a3fa4dda748b6036ce99a994d509216b43c"

/* Writes the run under dir (created; must not exist).  Asserts on failure. */
void ls_v2_fixture_write(const char *dir, const ls_v2_fixture *opt);

/* The trace text of rank `rank` (malloc'd, the caller frees). */
char *ls_v2_fixture_trace(int rank, const ls_v2_fixture *opt);

#endif
