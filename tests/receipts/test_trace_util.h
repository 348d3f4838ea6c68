/* test_trace_util.h - helpers shared by the trace tests: temporary
 * directories, whole-file I/O, a sample trace with every event kind, and a
 * reader run over a memory buffer that keeps what was delivered.
 * Header-only (static functions) so each test executable stays one file. */
#ifndef LS_TESTS_TEST_TRACE_UTIL_H
#define LS_TESTS_TEST_TRACE_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "receipts/reading/trace_reader.h"
#include "receipts/writing/trace_writer.h"

/* ---- files ---------------------------------------------------------------- */

static inline void tt_mkdtemp(char dir[64]) {
    snprintf(dir, 64, "/tmp/ls_trace_test_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp");
}

/* Removes the files directly inside dir, then dir. */
static inline void tt_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static inline unsigned char *tt_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static inline void tt_spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "create %s", path);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* ---- the sample trace ------------------------------------------------------ */

static const int32_t TT_WORLD_MEMBERS[] = {0, 1, 2, 3};
static const int32_t TT_PAIR_MEMBERS[] = {0, 1};
static const ls_trace_group TT_GROUPS[] = {{"world", TT_WORLD_MEMBERS, 4, NULL}, {"pair", TT_PAIR_MEMBERS, 2, NULL}};

/* rank 1 of 4; fixed host/pid/start so header text is reproducible. */
static inline ls_trace_header tt_header(void) {
    ls_trace_header h = {0};
    h.run_id = "run-test-0001";
    h.rank = 1;
    h.world = 4;
    h.host = "testhost";
    h.pid = 4242;
    h.start_unix_ns = INT64_C(1700000000123456789);
    h.groups = TT_GROUPS;
    h.n_groups = 2;
    h.tool = "longstraw-test 0.1";
    return h;
}

#define TT_SAMPLE_EVENTS 14

static const ls_trace_layer_end TT_L0 = {"capture", 0, -1, -1, LS_TRACE_LAYER_EMBED, LS_TRACE_DIR_FWD,
                                         1024, 100, 200, 5000, 1.5, false};
static const ls_trace_layer_end TT_L1 = {"capture", 0, -1, 0, LS_TRACE_LAYER_GDN, LS_TRACE_DIR_FWD,
                                         1024, 4096, 8192, 77, 0.1, false};
static const ls_trace_layer_end TT_L2 = {"replay", 3, 2, 3, LS_TRACE_LAYER_HEAD, LS_TRACE_DIR_BWD,
                                         17, INT64_C(9007199254740991), 0, 1, 1e-300, false};
static const ls_trace_collective TT_C0 = {"world", 0, LS_TRACE_OP_ALLREDUCE, LS_TRACE_RED_MAX, 64,
                                          LS_TRACE_DTYPE_F32, 256, "attn_merge_max", true, 1};
static const ls_trace_collective TT_C1 = {"pair", 0, LS_TRACE_OP_SENDRECV, LS_TRACE_RED_NONE, 10,
                                          LS_TRACE_DTYPE_U8, 10, "gdn_state_handoff", false, 0};
static const ls_trace_mem_category TT_CATS[] = {
    {"fixed_weights", 1000, 1000, false}, {"branch_graph", 0, 123456, false}, {"scoring", 7, 9, false}};
static const ls_trace_memory TT_MEM = {3, "replay", TT_CATS, 3, 1007, 124463, 99999999, 0, 0};
/* A step_metrics sample whose every field differs from its neighbours (so
 * a field written under another's name is caught); all five rates. */
static inline ls_trace_step_metrics tt_step_metrics(int64_t step, ls_trace_objective obj, bool parts) {
    ls_trace_step_metrics m = {0};
    m.step = step;
    m.objective = obj;
    m.reward_mean = 0.3125;
    m.reward_std = 0.21;
    m.reward_min = -0.25;
    m.reward_max = 1.0;
    m.has_reward_parts = parts;
    m.reward_retrieval = 0.1875;
    m.reward_format = 0.125;
    m.adv_mean = -1.5e-17;
    m.adv_std = 0.97;
    m.loss = 0.0123456789012345678;
    m.loss_policy = 0.0113;
    m.loss_kl = 1e-3;
    m.kl_mean = 0.025;
    m.clip_fraction = 0.0625;
    m.ratio_min = 0.81;
    m.ratio_mean = 1.0001;
    m.ratio_max = 1.27;
    m.response_len_mean = 17.75;
    m.tokens = 142;
    m.grad_norm = 3.5;
    m.lr = 3e-4;
    for (int p = 0; p <= LS_PHASE_PROMPT_BWD; p++) m.tokens_per_s[p] = 1000.5 * (p + 1);
    m.tokens_per_s_mask = LS_TRACE_RATE_PHASE_MASK;
    m.step_wall_s = 2.75;
    return m;
}

static const char TT_ERR_MSG[] = "collective \"x\" failed\n\ttab \xc3\xa9 \x01";

/* Writes the sample trace (TT_SAMPLE_EVENTS events, every kind, several
 * flushes) to path; opts may be NULL. */
static inline void tt_write_sample(const char *path, const ls_trace_writer_opts *opts) {
    ls_trace_header h = tt_header();
    ls_trace_writer *w = NULL;
    cr_assert_eq(ls_trace_writer_open_opts(&w, path, &h, opts), LS_OK, "open %s", path);
    uint8_t sha[32];
    for (int i = 0; i < 32; i++) sha[i] = (uint8_t)(i * 8 + 1);
    cr_assert_eq(ls_trace_emit_phase_begin(w, "capture", 0), LS_OK);              /* 0 */
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L0), LS_OK);                       /* 1 */
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L1), LS_OK);                       /* 2 */
    cr_assert_eq(ls_trace_emit_collective(w, &TT_C0), LS_OK);                      /* 3 */
    cr_assert_eq(ls_trace_emit_collective(w, &TT_C1), LS_OK);                      /* 4 */
    cr_assert_eq(ls_trace_emit_phase_end(w, "capture", 0, 12345, true), LS_OK);    /* 5 */
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L2), LS_OK);                       /* 6 */
    cr_assert_eq(ls_trace_emit_memory(w, &TT_MEM), LS_OK);                         /* 7 */
    cr_assert_eq(ls_trace_emit_optimizer_step(w, 3, 123456789, 1e-4, 0.75), LS_OK); /* 8 */
    cr_assert_eq(ls_trace_emit_param_digest(w, 3, "model.layers.0.attn.wq", sha), LS_OK); /* 9 */
    cr_assert_eq(ls_trace_emit_error(w, LS_ERR_MPI, TT_ERR_MSG), LS_OK);          /* 10 */
    cJSON *f = cJSON_Parse("{\"a\":1,\"b\":[1.5,\"x\",null,true],\"c\":{\"d\":-2}}");
    cr_assert_not_null(f);
    cr_assert_eq(ls_trace_emit_json(w, "custom_note", f), LS_OK);                  /* 11 */
    cJSON_Delete(f);
    cr_assert_eq(ls_trace_emit_phase_end(w, "optimizer", 3, 999, false), LS_OK);   /* 12 */
    cr_assert_eq(ls_trace_emit_rank_complete(w, 1), LS_OK);                        /* 13 */
    cr_assert_eq(ls_trace_writer_seq(w), TT_SAMPLE_EVENTS);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
}

/* ---- reading ---------------------------------------------------------------- */

/* What a reader run delivered: each event printed unformatted, plus seqs. */
typedef struct {
    char **text;
    int64_t *seq;
    unsigned *flags;
    size_t n, cap;
    ls_trace_report rep;
} tt_run;

static inline void tt_run_add(tt_run *run, const ls_trace_event *ev) {
    if (run->n == run->cap) {
        run->cap = run->cap ? 2 * run->cap : 64;
        run->text = realloc(run->text, run->cap * sizeof *run->text);
        run->seq = realloc(run->seq, run->cap * sizeof *run->seq);
        run->flags = realloc(run->flags, run->cap * sizeof *run->flags);
        cr_assert(run->text && run->seq && run->flags);
    }
    run->text[run->n] = cJSON_PrintUnformatted(ev->json);
    run->seq[run->n] = ev->seq;
    run->flags[run->n] = ev->flags;
    run->n++;
}

/* Reads data[0..len) with the reader, keeping every delivered event and a
 * copy of the final report. */
static inline void tt_read_mem(const void *data, size_t len, tt_run *run) {
    memset(run, 0, sizeof *run);
    ls_trace_reader *r = NULL;
    cr_assert_eq(ls_trace_reader_open_mem(&r, data, len, "mem"), LS_OK);
    const ls_trace_event *ev;
    for (;;) {
        cr_assert_eq(ls_trace_reader_next(r, &ev), LS_OK);
        if (ev == NULL) break;
        tt_run_add(run, ev);
    }
    const ls_trace_report *rep = ls_trace_reader_report(r);
    run->rep = *rep;
    run->rep.path = NULL;
    run->rep.header = NULL;
    run->rep.diags = NULL;
    if (rep->n_diags) {
        run->rep.diags = malloc(rep->n_diags * sizeof *rep->diags);
        memcpy(run->rep.diags, rep->diags, rep->n_diags * sizeof *rep->diags);
    }
    ls_trace_reader_close(r);
}

static inline void tt_run_free(tt_run *run) {
    for (size_t i = 0; i < run->n; i++) free(run->text[i]);
    free(run->text);
    free(run->seq);
    free(run->flags);
    ls_trace_report_free(&run->rep);
}

/* Number of error diagnostics (warnings excluded). */
static inline uint64_t tt_errors(const ls_trace_report *rep) {
    uint64_t n = 0;
    for (int c = 0; c < LS_TRACE_DIAG_CODE_COUNT; c++)
        if (ls_trace_diag_is_error((ls_trace_diag_code)c)) n += rep->counts[c];
    return n;
}

/* First stored diagnostic with this code, or NULL. */
static inline const ls_trace_diag *tt_find(const ls_trace_report *rep, ls_trace_diag_code code) {
    for (size_t i = 0; i < rep->n_diags; i++)
        if (rep->diags[i].code == code) return &rep->diags[i];
    return NULL;
}

/* Prints the report's diagnostics (for failing assertions). */
static inline void tt_dump(const ls_trace_report *rep) {
    fprintf(stderr, "end=%s events=%lld last_seq=%lld diags=%zu\n", ls_trace_end_name(rep->end),
            (long long)rep->n_events, (long long)rep->last_seq, rep->n_diags);
    for (size_t i = 0; i < rep->n_diags && i < 20; i++)
        fprintf(stderr, "  [%s] line %lld off %llu: %s\n", ls_trace_diag_name(rep->diags[i].code),
                (long long)rep->diags[i].line, (unsigned long long)rep->diags[i].byte_offset,
                rep->diags[i].message);
}

#endif
