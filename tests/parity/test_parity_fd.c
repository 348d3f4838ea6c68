/* test_parity_fd.c - longstraw-parity's finite differences (parity_fd.c),
 * per tensor and per layer group, on a loss whose gradient is known in
 * closed form.
 *
 * The "trainer" is tests/parity/parity_fd_fake_train.py: it prints
 *   L(w) = sum_T s_T sum_j (0.5 w_j^2 + 0.05 w_j^3 + 0.1 w_j)
 * at the weights it is given, so that the gradient s_T (w_j + 0.15 w_j^2 +
 * 0.1) is exact here, and a wrong gradient is one this test makes wrong.
 * The tensors: a layer with a member whose derivative is a small share of
 * its group's (layers.0.small, s = 1e-4: about 2e-4 of layers.0's
 * derivative along its direction), layers 1, 2 and 10 (the groups
 * in layer order, not name order), a layer whose loss does not depend on
 * its tensor (layers.2.zero, s = 0: an exact-zero derivative) and tensors
 * outside the layers (embed, final_norm), and one frozen tensor that is in
 * the weights but not trainable.
 *
 *  - correct gradients pass per tensor and per group; a group's finite
 *    difference equals its members' (sum over sqrt(members): the group's
 *    direction is theirs over sqrt(k)), an independent composition;
 *  - wrong gradients in one member of a group (the small one, by 1e-2 of
 *    itself), in the exact-zero group and outside the layers fail their
 *    group's entry, named, and only there; the unbroken LongStraw gradient
 *    passes;
 *  - what grouping does not see (parity_fd.c): the small member wrong by
 *    1e-5 of itself fails per tensor and passes in its group;
 *  - --fd-max counts groups and fails the coverage; a failed run stops the
 *    pool with its name; at most --jobs weight files exist at once, none
 *    after;
 *  - a moved run that decided differently from the unmoved one (its
 *    decisions line) fails its entry, fd_decided_alike false: a difference
 *    quotient across a flipped decision is no derivative. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/plan/parity.h"
#include "tests/support/test_tmpdir.h"
#include "trainer/base/safetensors.h"

#define FAKE LS_SOURCE_DIR "/tests/parity/parity_fd_fake_train.py"

static char tmpdir[256];
static void setup(void) { ls_test_tmpdir_make(tmpdir, "parity-fd"); }
static void teardown(void) { ls_test_tmpdir_remove(tmpdir); }

/* The tensors: name, elements, loss scale s_T, trainable. */
static const struct {
    const char *name;
    size_t n;
    double s;
    bool trainable;
} T[] = {
    {"embed", 24, 1.0, true},       {"final_norm", 6, 1.0, true},   {"frozen.w", 10, 1.0, false},
    {"layers.0.a", 64, 1.0, true},  {"layers.0.b", 48, 1.0, true},  {"layers.0.small", 4, 1e-4, true},
    {"layers.1.a", 32, 1.0, true},  {"layers.1.b", 16, 0.5, true},  {"layers.10.a", 8, 1.0, true},
    {"layers.2.zero", 8, 0.0, true},
};
#define NT (sizeof T / sizeof T[0])

static double w0[NT][64];

static void weights(const char *path, const char *loss_json) {
    uint32_t st = 12345;
    ls_safetensors_writer *wr = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&wr), LS_OK);
    FILE *f = fopen(loss_json, "w");
    cr_assert_not_null(f);
    fprintf(f, "{");
    for (size_t t = 0; t < NT; t++) {
        for (size_t j = 0; j < T[t].n; j++) {
            st = 1103515245u * st + 12345u;
            w0[t][j] = 0.2 * ((double)(st >> 8) / 16777216.0) - 0.1; /* [-0.1, 0.1) */
        }
        uint64_t shape[1] = {T[t].n};
        cr_assert_eq(ls_safetensors_writer_add_f64(wr, T[t].name, LS_SAFETENSORS_F64, shape, 1, w0[t]), LS_OK);
        fprintf(f, "%s\"%s\": %.17g", t ? ", " : "", T[t].name, T[t].s);
    }
    fprintf(f, "}\n");
    fclose(f);
    char err[512];
    cr_assert_eq(ls_safetensors_writer_write(wr, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(wr);
}

/* The exact gradient of the trainable tensors (name order, as the trainer dumps them). */
static void gradient(ls_parity_tensors *g) {
    memset(g, 0, sizeof *g);
    size_t n = 0;
    for (size_t t = 0; t < NT; t++) n += T[t].trainable;
    g->name = calloc(n, sizeof *g->name);
    g->v = calloc(n, sizeof *g->v);
    g->numel = calloc(n, sizeof *g->numel);
    g->shape = calloc(n, sizeof *g->shape);
    g->ndim = calloc(n, sizeof *g->ndim);
    cr_assert(g->name && g->v && g->numel && g->shape && g->ndim);
    for (size_t t = 0; t < NT; t++) {
        if (!T[t].trainable) continue;
        size_t k = g->n++;
        g->name[k] = strdup(T[t].name);
        g->v[k] = calloc(T[t].n, sizeof(double));
        g->numel[k] = T[t].n;
        g->shape[k][0] = T[t].n;
        g->ndim[k] = 1;
        for (size_t j = 0; j < T[t].n; j++) {
            double x = w0[t][j];
            g->v[k][j] = T[t].s * (x + 0.15 * x * x + 0.1);
        }
    }
}

static double *grad_of(ls_parity_tensors *g, const char *name) {
    long k = ls_parity_tensors_find(g, name);
    cr_assert_geq(k, 0, "no gradient %s", name);
    return g->v[k];
}

typedef struct {
    char dir[300], weights[400], loss[400], trainer[400];
    ls_parity_opts o;
    ls_parity_config c;
    ls_parity_tensors gn, gl;
    cJSON *checks[2];
    int runs;
} fixture;

static void fixture_init(fixture *x, int fd_groups) {
    memset(x, 0, sizeof *x);
    snprintf(x->dir, sizeof x->dir, "%s/run", tmpdir);
    cr_assert_eq(ls_parity_mkdirs(x->dir), 0);
    snprintf(x->weights, sizeof x->weights, "%s/weights.safetensors", tmpdir);
    snprintf(x->loss, sizeof x->loss, "%s/loss.json", tmpdir);
    snprintf(x->trainer, sizeof x->trainer, "%s/train.sh", tmpdir);
    weights(x->weights, x->loss);
    FILE *f = fopen(x->trainer, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\nexec python3 %s \"$@\"\n", FAKE);
    fclose(f);
    cr_assert_eq(chmod(x->trainer, 0755), 0);
    setenv("LS_FAKE_LOSS", x->loss, 1);
    setenv("LS_FAKE_MAX_FILES", "2", 1);
    unsetenv("LS_FAKE_FAIL");
    x->o = (ls_parity_opts){.trainer = x->trainer, .model_config = "unused.json", .jobs = 2, .timeout_s = 120,
                            .fd_step = 1e-3, .seed = 1, .quiet = true, .temperature = 0.9, .epsilon = 0.2,
                            .beta = 0.04, .fd_groups = fd_groups};
    x->c = (ls_parity_config){.name = "unit", .what = "closed-form loss", .prompt_len = 2, .group = 1,
                              .train_mode = "full", .page_size = 4, .capture_chunk = 4};
    gradient(&x->gn);
    gradient(&x->gl);
}

static ls_status fixture_run(fixture *x, char *err, size_t errlen) {
    double secs = 0;
    return ls_parity_fd_checks(&x->o, &x->c, x->dir, x->weights, "unused.jsonl", &x->gn, &x->gl, x->checks, &secs,
                               &x->runs, err, errlen);
}

static void fixture_free(fixture *x) {
    cJSON_Delete(x->checks[0]);
    cJSON_Delete(x->checks[1]);
    ls_parity_tensors_free(&x->gn);
    ls_parity_tensors_free(&x->gl);
}

static void run_ok(fixture *x) {
    char err[2048] = "";
    ls_status s = fixture_run(x, err, sizeof err);
    cr_assert_eq(s, LS_OK, "finite differences: %s: %s", ls_status_str(s), err);
    cr_assert(x->checks[0] && x->checks[1]);
}

static bool pass_of(const cJSON *o) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "pass")); }
static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}
static double num_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const cJSON *entry(const cJSON *check, const char *key, const char *name) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(check, key))
        if (!strcmp(str_of(e, "name"), name)) return e;
    cr_assert_fail("%s: no entry %s in %s", str_of(check, "name"), name, key);
    return NULL;
}

/* The weight files left in DIR/fd. */
static int files_left(const fixture *x) {
    char p[400];
    snprintf(p, sizeof p, "%s/fd", x->dir);
    DIR *d = opendir(p);
    cr_assert_not_null(d, "%s", p);
    int n = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static const char *const GROUPS[] = {"layers.0 (3 tensors)", "layers.1 (2 tensors)", "layers.2 (1 tensor)",
                                     "layers.10 (1 tensor)", "outside the layers (2 tensors)"};
static const size_t GROUP_SIZE[] = {3, 2, 1, 1, 2};

Test(parity_fd, correct_gradients_pass_per_tensor_and_per_group, .init = setup, .fini = teardown, .timeout = 300) {
    fixture t, g;
    fixture_init(&t, LS_PARITY_FD_TENSOR);
    run_ok(&t);
    cr_expect_eq(t.runs, 4 * 9 + 1, "per tensor: 4 runs for each of 9 trainable tensors and the unmoved one, got %d", t.runs);
    cr_expect_eq(files_left(&t), 0, "finite-difference files left behind");
    fixture_init(&g, LS_PARITY_FD_LAYER);
    run_ok(&g);
    cr_expect_eq(g.runs, 4 * 5 + 1, "per layer: 4 runs for each of 5 groups and the unmoved one, got %d", g.runs);
    for (int which = 0; which < 2; which++) {
        const cJSON *ct = t.checks[which], *cg = g.checks[which];
        cr_expect(pass_of(ct), "per tensor: %s fails: %g > %g (%s)", str_of(ct, "name"), num_of(ct, "max_rel_err"),
                  num_of(ct, "tolerance"), str_of(ct, "worst"));
        cr_expect(pass_of(cg), "per layer: %s fails: %g > %g (%s)", str_of(cg, "name"), num_of(cg, "max_rel_err"),
                  num_of(cg, "tolerance"), str_of(cg, "worst"));
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ct, "tensors")), 9);
        cr_expect_null(cJSON_GetObjectItemCaseSensitive(ct, "groups"));
        cr_expect_null(cJSON_GetObjectItemCaseSensitive(cg, "tensors"));
        /* the groups in layer order, each naming its members; its finite difference is its members' */
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cg, "groups");
        cr_assert_eq(cJSON_GetArraySize(arr), 5);
        for (int k = 0; k < 5; k++) {
            const cJSON *e = cJSON_GetArrayItem(arr, k);
            cr_expect_str_eq(str_of(e, "name"), GROUPS[k]);
            const cJSON *members = cJSON_GetObjectItemCaseSensitive(e, "tensors"), *m;
            cr_expect_eq((size_t)cJSON_GetArraySize(members), GROUP_SIZE[k], "%s", GROUPS[k]);
            double sum = 0;
            cJSON_ArrayForEach(m, members) sum += num_of(entry(ct, "tensors", m->valuestring), "fd_derivative");
            sum /= sqrt((double)GROUP_SIZE[k]);
            double fdg = num_of(e, "fd_derivative");
            double slack = 1e-7 * fabs(fdg) + 2 * (num_of(e, "fd_rounding_floor") + num_of(e, "fd_error_estimate"));
            cr_expect_leq(fabs(fdg - sum), slack, "%s: the group's derivative %.17g, its members' %.17g", GROUPS[k],
                          fdg, sum);
        }
    }
    /* the exact-zero group: every loss equal, judged absolutely, and passing with a zero gradient */
    cr_expect_eq(num_of(entry(g.checks[0], "groups", "layers.2 (1 tensor)"), "fd_derivative"), 0.0);
    fixture_free(&t);
    fixture_free(&g);
}

Test(parity_fd, a_wrong_tensor_fails_its_group, .init = setup, .fini = teardown, .timeout = 300) {
    fixture g;
    fixture_init(&g, LS_PARITY_FD_LAYER);
    /* the naive gradient wrong in three groups: its smallest member by 1e-2 of itself, a gradient where the
     * loss has none, one element outside the layers; the LongStraw gradient right */
    double *small = grad_of(&g.gn, "layers.0.small");
    for (int j = 0; j < 4; j++) small[j] *= 1 + 1e-2;
    grad_of(&g.gn, "layers.2.zero")[3] = 1e-6;
    grad_of(&g.gn, "final_norm")[0] *= -1;
    run_ok(&g);
    const cJSON *naive = g.checks[0], *full = g.checks[1];
    cr_expect(!pass_of(naive), "the wrong naive gradient passes");
    cr_expect(pass_of(full), "the right LongStraw gradient fails: %s", str_of(full, "worst"));
    static const bool WRONG[] = {true, false, true, false, true};
    for (int k = 0; k < 5; k++) {
        const cJSON *e = entry(naive, "groups", GROUPS[k]);
        cr_expect_eq(pass_of(e), !WRONG[k], "%s: pass %d, want %d (error %g, tolerance %g)", GROUPS[k], pass_of(e),
                     !WRONG[k], num_of(e, "max_rel_err"), num_of(e, "tolerance"));
        /* a fault is far above the tolerance, not at its edge */
        if (WRONG[k])
            cr_expect_gt(num_of(e, "max_rel_err"), 10 * num_of(e, "tolerance"), "%s: %g vs tolerance %g", GROUPS[k],
                         num_of(e, "max_rel_err"), num_of(e, "tolerance"));
    }
    fixture_free(&g);
}

/* The limit parity_fd.c states: a member's error is judged against its group's derivative, so a member with a
 * small share (layers.0.small: about 2e-4 of layers.0's, seen from 5e-4 of itself) wrong by 1e-5 of itself
 * passes in its group, which per-tensor differences see.  Should grouping get stronger, this test says so; weaker, the one above fails. */
Test(parity_fd, what_grouping_does_not_see, .init = setup, .fini = teardown, .timeout = 300) {
    for (int mode = 0; mode < 2; mode++) {
        fixture x;
        fixture_init(&x, mode == 0 ? LS_PARITY_FD_TENSOR : LS_PARITY_FD_LAYER);
        double *small = grad_of(&x.gn, "layers.0.small");
        for (int j = 0; j < 4; j++) small[j] *= 1 + 1e-5;
        run_ok(&x);
        const cJSON *e = mode == 0 ? entry(x.checks[0], "tensors", "layers.0.small")
                                   : entry(x.checks[0], "groups", "layers.0 (3 tensors)");
        double ratio = num_of(e, "max_rel_err") / num_of(e, "tolerance");
        if (mode == 0) cr_expect_gt(ratio, 10, "per tensor: layers.0.small wrong by 1e-5 seen only at %g x tolerance", ratio);
        else cr_expect_lt(ratio, 0.1, "per layer: layers.0.small wrong by 1e-5 at %g x tolerance (the documented limit moved?)", ratio);
        fixture_free(&x);
    }
}

Test(parity_fd, fd_max_counts_groups_and_fails_coverage, .init = setup, .fini = teardown, .timeout = 300) {
    fixture g;
    fixture_init(&g, LS_PARITY_FD_LAYER);
    g.o.fd_max = 2;
    run_ok(&g);
    cr_expect_eq(g.runs, 9);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(g.checks[0], "groups");
    cr_expect_eq(cJSON_GetArraySize(arr), 3, "2 groups and the coverage entry");
    const cJSON *cov = entry(g.checks[0], "groups", "coverage: 2 of 5 groups of trainable tensors (--fd-max)");
    cr_expect(!pass_of(cov));
    cr_expect(!pass_of(g.checks[0]) && !pass_of(g.checks[1]), "--fd-max: an fd_grad check passes");
    fixture_free(&g);
}

Test(parity_fd, a_failed_run_stops_with_its_name, .init = setup, .fini = teardown, .timeout = 300) {
    fixture g;
    fixture_init(&g, LS_PARITY_FD_LAYER);
    setenv("LS_FAKE_FAIL", "1-2", 1);
    char err[2048] = "";
    ls_status s = fixture_run(&g, err, sizeof err);
    unsetenv("LS_FAKE_FAIL");
    cr_expect_neq(s, LS_OK);
    cr_expect(strstr(err, "/fd/1-2 exited 3") != NULL, "the error does not name run 1-2 and its exit: %s", err);
    cr_expect_null(g.checks[0]);
    fixture_free(&g);
}

/* A move that flips a decision is differenced again at a step FD_SHRINK (8) times smaller: group 1 flips at
 * -h/2 in the first pass only and is judged at h/8 (its fd_step); flipping in every pass it fails,
 * fd_decided_alike false, after four retries (h/4096). */
Test(parity_fd, a_decision_flipped_by_the_step_is_no_derivative, .init = setup, .fini = teardown, .timeout = 300) {
    for (int always = 0; always < 2; always++) {
        fixture g;
        fixture_init(&g, LS_PARITY_FD_LAYER);
        setenv("LS_FAKE_FLIP", always ? "fd/1-3,fd-retry*/0-3" : "fd/1-3", 1);
        run_ok(&g);
        unsetenv("LS_FAKE_FLIP");
        cr_expect_eq(g.runs, 4 * 5 + 1 + 4 * (always ? 4 : 1), "runs %d", g.runs);
        for (int which = 0; which < 2; which++) {
            for (int k = 0; k < 5; k++) {
                const cJSON *e = entry(g.checks[which], "groups", GROUPS[k]);
                bool alike = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "fd_decided_alike"));
                cr_expect_eq(alike, k != 1 || !always, "%s: fd_decided_alike %d", GROUPS[k], alike);
                cr_expect_eq(pass_of(e), k != 1 || !always, "%s: pass %d", GROUPS[k], pass_of(e));
                double step = num_of(e, "fd_step");
                if (k == 1) cr_expect_eq(step, g.o.fd_step / (always ? 4096 : 8), "%s: fd_step %g", GROUPS[k], step);
                else cr_expect(isnan(step), "%s: fd_step %g, none expected", GROUPS[k], step);
            }
            cr_expect_eq(pass_of(g.checks[which]), !always, "%s", str_of(g.checks[which], "name"));
        }
        cr_expect_eq(files_left(&g), 0, "finite-difference files left behind");
        fixture_free(&g);
    }
}
