/* bench_schema.c - JSON Schema validation throughput (receipts/schema/schema.h).
 *
 *   bench_schema SCHEMA DOC [N]
 *     SCHEMA a name in schemas/ ("receipt") or a path; DOC a JSON file (a
 *     receipt the trainer wrote, say).  Validates DOC N times (default
 *     20000) with ls_schema_validate, then with the reference validator the
 *     compiled one replaced (tests/receipts/schema_ref.c: every keyword looked up on
 *     every node), and prints per validation: microseconds of each, the
 *     ratio, and the verdicts (they must agree).  CPU time (clock()), the
 *     median of 5 rounds.
 *
 * Exit 0 when both verdicts agree, 1 otherwise or on a read error, 2 for
 * usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "tests/receipts/schema_ref.h"

#define ROUNDS 5

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median CPU microseconds per validation; *verdict the last status. */
static double time_us(const ls_schema *s, const cJSON *sdoc, const cJSON *doc, long n,
                      ls_status *verdict) {
    double t[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        clock_t t0 = clock();
        for (long i = 0; i < n; i++)
            *verdict = s ? ls_schema_validate(s, doc, NULL) : ls_schema_ref_validate(sdoc, doc, NULL);
        t[r] = 1e6 * (double)(clock() - t0) / CLOCKS_PER_SEC / (double)n;
    }
    qsort(t, ROUNDS, sizeof *t, cmp_double);
    return t[ROUNDS / 2];
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: bench_schema SCHEMA DOC [N]\n");
        return 2;
    }
    long n = argc == 4 ? strtol(argv[3], NULL, 10) : 20000;
    if (n < 1) {
        fprintf(stderr, "bench_schema: N: expected an integer >= 1, got \"%s\"\n", argv[3]);
        return 2;
    }
    char err[1024], path[4096];
    if (strchr(argv[1], '/') || strstr(argv[1], ".json")) snprintf(path, sizeof path, "%s", argv[1]);
    else snprintf(path, sizeof path, "%s/%s.schema.json", ls_schema_dir(), argv[1]);
    ls_schema *s = NULL;
    cJSON *sdoc = NULL, *doc = NULL;
    int rc = 1;
    if (ls_schema_load_file(path, &s, err, sizeof err) != LS_OK ||
        ls_json_read_file(path, &sdoc, err, sizeof err) != LS_OK ||
        ls_json_read_file(argv[2], &doc, err, sizeof err) != LS_OK) {
        fprintf(stderr, "bench_schema: %s\n", err);
        goto cleanup;
    }
    ls_status vc = LS_OK, vr = LS_OK;
    double us_c = time_us(s, NULL, doc, n, &vc);
    double us_r = time_us(NULL, sdoc, doc, n, &vr);
    printf("schema %s doc %s n %ld compiled_us %.3f reference_us %.3f speedup %.2f verdict %s %s\n",
           argv[1], argv[2], n, us_c, us_r, us_c > 0 ? us_r / us_c : 0.0, ls_status_str(vc),
           ls_status_str(vr));
    rc = vc == vr ? 0 : 1;
cleanup:
    ls_schema_ref_forget();
    cJSON_Delete(doc);
    cJSON_Delete(sdoc);
    ls_schema_free(s);
    return rc;
}
