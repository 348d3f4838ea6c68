/* test_trace_roundtrip.c - the writer's output read back by the reader:
 * every kind compressed and plain, field by field; refusals (non-finite,
 * bad arguments) leave no trace and no seq gap; numbers survive a foreign
 * locale; concurrent emitters keep seq contiguous. */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include <zstd.h>

#include "tests/receipts/test_trace_util.h"

typedef struct {
    cJSON *ev[64];
    size_t n;
} keep;

static int keep_cb(const ls_trace_event *ev, void *user) {
    keep *k = user;
    cr_assert_lt(k->n, 64u);
    unsigned want = strcmp(ev->ev, "custom_note") == 0 ? LS_TRACE_EVF_UNKNOWN_KIND : 0u;
    cr_assert_eq(ev->flags, want, "event %lld flagged %#x", (long long)ev->seq, ev->flags);
    k->ev[k->n++] = cJSON_Duplicate(ev->json, 1);
    return 0;
}

static int64_t geti(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(it), "field %s missing", k);
    return (int64_t)it->valuedouble;
}
static double getd(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(it), "field %s missing", k);
    return it->valuedouble;
}
static const char *gets_(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsString(it), "field %s missing", k);
    return it->valuestring;
}

static void expect_layer(const cJSON *ev, const ls_trace_layer_end *x) {
    ls_trace_layer_end got;
    cr_assert_eq(ls_trace_decode_layer_end(ev, &got), LS_OK);
    cr_assert_str_eq(got.phase, x->phase);
    cr_assert_eq(got.step, x->step);
    cr_assert_eq(got.member, x->member);
    cr_assert_eq(got.layer, x->layer);
    cr_assert_eq(got.kind, x->kind);
    cr_assert_eq(got.dir, x->dir);
    cr_assert_eq(got.tokens, x->tokens);
    cr_assert_eq(got.live_bytes, x->live_bytes);
    cr_assert_eq(got.peak_bytes, x->peak_bytes);
    cr_assert_eq(got.wall_ns, x->wall_ns);
    cr_assert(got.out_norm == x->out_norm, "out_norm %.17g != %.17g", got.out_norm, x->out_norm);
}

static void expect_coll(const cJSON *ev, const ls_trace_collective *x) {
    ls_trace_collective got;
    cr_assert_eq(ls_trace_decode_collective(ev, &got), LS_OK);
    cr_assert_str_eq(got.group, x->group);
    cr_assert_eq(got.gseq, x->gseq);
    cr_assert_eq(got.op, x->op);
    cr_assert_eq(got.red, x->red);
    cr_assert_eq(got.count, x->count);
    cr_assert_eq(got.dtype, x->dtype);
    cr_assert_eq(got.bytes, x->bytes);
    cr_assert_str_eq(got.purpose, x->purpose);
    cr_assert_eq(got.has_layer, x->has_layer);
    if (x->has_layer) cr_assert_eq(got.layer, x->layer);
}

/* Writes the sample to dir/name and checks every field of every event. */
static void roundtrip(const char *name, bool want_compressed) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tt_write_sample(path, NULL);
    keep k = {0};
    ls_trace_report rep;
    ls_status st = ls_trace_read_file(path, keep_cb, &k, &rep);
    if (st != LS_OK) tt_dump(&rep);
    cr_assert_eq(st, LS_OK);
    cr_assert_eq(rep.end, LS_TRACE_END_CLEAN);
    cr_assert_eq(rep.n_diags, 1u, "only the unknown-kind warning for custom_note");
    cr_assert_eq(rep.diags[0].code, LS_TRACE_DIAG_UNKNOWN_KIND);
    cr_assert_eq(rep.diags[0].line, 13);
    cr_assert_eq(rep.diags[0].seq, 11);
    cr_assert_eq(rep.compressed, want_compressed);
    cr_assert(rep.header_ok);
    cr_assert_eq(rep.rank, 1);
    cr_assert_eq(rep.world, 4);
    cr_assert_str_eq(gets_(rep.header, "run_id"), "run-test-0001");
    cr_assert_str_eq(gets_(rep.header, "host"), "testhost");
    cr_assert_str_eq(gets_(rep.header, "tool"), "longstraw-test 0.1");
    cr_assert_str_eq(gets_(rep.header, "schema"), LS_TRACE_HEADER_SCHEMA);
    cr_assert_eq(geti(rep.header, "pid"), 4242);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(rep.header, "groups")), 2);
    cr_assert_eq(k.n, (size_t)TT_SAMPLE_EVENTS);
    cr_assert_eq(rep.n_events, TT_SAMPLE_EVENTS);
    cr_assert_eq(rep.last_seq, TT_SAMPLE_EVENTS - 1);
    if (want_compressed) cr_assert_eq(rep.frames, 2u, "frames end at the error and rank_complete");

    static const char *const KINDS[TT_SAMPLE_EVENTS] = {
        "phase_begin", "layer_end",    "layer_end",   "collective", "collective",
        "phase_end",   "layer_end",    "memory",      "optimizer_step", "param_digest",
        "error",       "custom_note",  "phase_end",   "rank_complete"};
    int64_t prev_ts = 0;
    for (size_t i = 0; i < k.n; i++) {
        const cJSON *e = k.ev[i];
        cr_assert_eq(geti(e, "v"), 1);
        cr_assert_eq(geti(e, "rank"), 1);
        cr_assert_eq(geti(e, "seq"), (int64_t)i);
        cr_assert_geq(geti(e, "ts_ns"), prev_ts);
        prev_ts = geti(e, "ts_ns");
        cr_assert_str_eq(gets_(e, "ev"), KINDS[i]);
    }
    cr_assert_str_eq(gets_(k.ev[0], "phase"), "capture");
    cr_assert_eq(geti(k.ev[0], "step"), 0);
    expect_layer(k.ev[1], &TT_L0);
    expect_layer(k.ev[2], &TT_L1);
    expect_coll(k.ev[3], &TT_C0);
    expect_coll(k.ev[4], &TT_C1);
    cr_assert_null(cJSON_GetObjectItem(k.ev[4], "layer"));
    cr_assert_eq(geti(k.ev[5], "wall_ns"), 12345);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(k.ev[5], "ok")));
    expect_layer(k.ev[6], &TT_L2);
    const cJSON *cats = cJSON_GetObjectItem(k.ev[7], "categories");
    cr_assert_eq(cJSON_GetArraySize(cats), 3);
    for (int c = 0; c < 3; c++) {
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(cats, TT_CATS[c].name);
        cr_assert_not_null(cat, "category %s", TT_CATS[c].name);
        cr_assert_eq(geti(cat, "live"), TT_CATS[c].live);
        cr_assert_eq(geti(cat, "peak"), TT_CATS[c].peak);
    }
    cr_assert_eq(geti(k.ev[7], "total_live"), 1007);
    cr_assert_eq(geti(k.ev[7], "total_peak"), 124463);
    cr_assert_eq(geti(k.ev[7], "rss_peak"), 99999999);
    cr_assert_eq(geti(k.ev[8], "n_params"), 123456789);
    cr_assert(getd(k.ev[8], "lr") == 1e-4);
    cr_assert(getd(k.ev[8], "grad_norm") == 0.75);
    cr_assert_str_eq(gets_(k.ev[9], "target"), "model.layers.0.attn.wq");
    cr_assert_str_eq(gets_(k.ev[9], "sha256"),
                     "0109111921293139414951596169717981899199a1a9b1b9c1c9d1d9e1e9f1f9");
    cr_assert_eq(geti(k.ev[10], "code"), LS_ERR_MPI);
    cr_assert_str_eq(gets_(k.ev[10], "status"), ls_status_str(LS_ERR_MPI));
    cr_assert_str_eq(gets_(k.ev[10], "message"), TT_ERR_MSG);
    char *custom = cJSON_PrintUnformatted(k.ev[11]);
    cr_assert_not_null(strstr(custom, "\"a\":1,\"b\":[1.5,\"x\",null,true],\"c\":{\"d\":-2}"), "%s", custom);
    free(custom);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(k.ev[12], "ok")));
    cr_assert_eq(geti(k.ev[13], "steps"), 1);
    cr_assert_eq(geti(k.ev[13], "events"), 13);
    for (size_t i = 0; i < k.n; i++) cJSON_Delete(k.ev[i]);
    ls_trace_report_free(&rep);
    tt_rmdir(dir);
}

Test(trace_roundtrip, plain_every_kind) { roundtrip("events.jsonl", false); }
Test(trace_roundtrip, zstd_every_kind) { roundtrip("events.jsonl.zst", true); }

/* The .zst file decodes with zstd's one-shot API to exactly the text the
 * plain writer would produce (ts_ns aside); every frame is complete and
 * checksummed.  Frames span flushes: the sample's six flushes (header,
 * phase_begin, phase_end, error, phase_end, rank_complete) make two frames,
 * ended by the error and by rank_complete; frame_bytes 1 ends one at every
 * flush (what earlier writers did), and the text is the same. */
static void zstd_frames(size_t frame_bytes, size_t want_frames) {
    char dir[64], pz[128];
    tt_mkdtemp(dir);
    snprintf(pz, sizeof pz, "%s/e.jsonl.zst", dir);
    ls_trace_writer_opts o = {0, 0, frame_bytes};
    tt_write_sample(pz, &o);
    size_t zn;
    unsigned char *z = tt_slurp(pz, &zn);
    size_t off = 0, frames = 0;
    while (off < zn) {
        size_t fs = ZSTD_findFrameCompressedSize(z + off, zn - off);
        cr_assert(!ZSTD_isError(fs), "frame %zu: %s", frames, ZSTD_getErrorName(fs));
        cr_assert(z[off + 4] & 0x04, "frame %zu has no checksum flag", frames);
        cr_assert_neq(ZSTD_getFrameContentSize(z + off, fs), ZSTD_CONTENTSIZE_ERROR);
        off += fs;
        frames++;
    }
    cr_assert_eq(frames, want_frames, "frames %zu", frames);
    size_t total = 1 << 20;
    char *text = malloc(total + 1);
    size_t tn = ZSTD_decompress(text, total, z, zn);
    cr_assert(!ZSTD_isError(tn));
    text[tn] = 0;
    size_t lines = 0;
    for (size_t i = 0; i < tn; i++) lines += text[i] == '\n';
    cr_assert_eq(lines, 1u + TT_SAMPLE_EVENTS);
    cr_assert_eq(text[tn - 1], '\n');
    /* the decoded text read as plain gives the same events */
    tt_run plain, comp;
    tt_read_mem(text, tn, &plain);
    tt_read_mem(z, zn, &comp);
    cr_assert_eq(plain.n, comp.n);
    for (size_t i = 0; i < plain.n; i++) {
        cr_assert_str_eq(plain.text[i], comp.text[i]);
        cr_assert_eq(comp.flags[i] & LS_TRACE_EVF_UNVERIFIED, 0u, "event %zu verified", i);
    }
    cr_assert_eq(plain.rep.end, LS_TRACE_END_CLEAN);
    cr_assert_eq(comp.rep.end, LS_TRACE_END_CLEAN);
    cr_assert_eq(comp.rep.frames, (uint64_t)want_frames);
    tt_run_free(&plain);
    tt_run_free(&comp);
    free(text);
    free(z);
    tt_rmdir(dir);
}

Test(trace_roundtrip, zstd_frames_span_flushes) { zstd_frames(0, 2); }
Test(trace_roundtrip, zstd_frame_per_flush_as_before) { zstd_frames(1, 6); }

/* Frames end at the first flush past frame_bytes: a long trace of many
 * flushes makes about text / frame_bytes frames, not one per flush. */
Test(trace_roundtrip, zstd_frames_end_at_frame_bytes) {
    char dir[64], pz[128];
    tt_mkdtemp(dir);
    snprintf(pz, sizeof pz, "%s/e.jsonl.zst", dir);
    ls_trace_header h = tt_header();
    ls_trace_writer_opts o = {0, 0, 64 << 10};
    ls_trace_writer *w;
    cr_assert_eq(ls_trace_writer_open_opts(&w, pz, &h, &o), LS_OK);
    int64_t flushes = 0;
    for (int s = 0; s < 400; s++) {
        cr_assert_eq(ls_trace_emit_phase_begin(w, "replay", s), LS_OK);
        for (int l = 0; l < 8; l++) {
            ls_trace_layer_end e = TT_L1;
            e.step = s;
            e.layer = l;
            cr_assert_eq(ls_trace_emit_layer_end(w, &e), LS_OK);
        }
        cr_assert_eq(ls_trace_emit_phase_end(w, "replay", s, 1000, true), LS_OK);
        flushes += 2;
    }
    cr_assert_eq(ls_trace_emit_rank_complete(w, 400), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    ls_trace_report rep;
    cr_assert_eq(ls_trace_read_file(pz, NULL, NULL, &rep), LS_OK);
    uint64_t want = rep.text_bytes / (64 << 10);
    cr_assert(rep.frames >= want && rep.frames <= want + 2, "%llu frames for %llu bytes of text",
              (unsigned long long)rep.frames, (unsigned long long)rep.text_bytes);
    cr_assert_lt((int64_t)rep.frames * 20, flushes, "far fewer frames than flushes");
    cr_assert_eq(rep.n_diags, 0u);
    ls_trace_report_free(&rep);
    tt_rmdir(dir);
}

static ls_trace_writer *open_tmp(char dir[64], char path[128], const char *name) {
    tt_mkdtemp(dir);
    snprintf(path, 128, "%s/%s", dir, name);
    ls_trace_header h = tt_header();
    ls_trace_writer *w = NULL;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_OK);
    return w;
}

/* Reads path, requiring a clean trace of exactly n events. */
static void expect_clean(const char *path, int64_t n) {
    ls_trace_report rep;
    ls_status st = ls_trace_read_file(path, NULL, NULL, &rep);
    if (st != LS_OK) tt_dump(&rep);
    cr_assert_eq(st, LS_OK);
    cr_assert_eq(rep.n_events, n);
    cr_assert_eq(rep.n_diags, 0u);
    ls_trace_report_free(&rep);
}

Test(trace_roundtrip, nonfinite_refused_without_trace) {
    char dir[64], path[128];
    ls_trace_writer *w = open_tmp(dir, path, "events.jsonl");
    ls_trace_layer_end l = TT_L0;
    l.out_norm = NAN;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_ERR_NONFINITE);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "out_norm"));
    l.out_norm = INFINITY;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_ERR_NONFINITE);
    l.out_norm = -INFINITY;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_ERR_NONFINITE);
    cr_assert_eq(ls_trace_emit_optimizer_step(w, 0, 1, NAN, 1.0), LS_ERR_NONFINITE);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "lr"));
    cr_assert_eq(ls_trace_emit_optimizer_step(w, 0, 1, 1.0, INFINITY), LS_ERR_NONFINITE);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "grad_norm"));
    cJSON *f = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(f, "vals");
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(1.0));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(NAN));
    cr_assert_eq(ls_trace_emit_json(w, "custom", f), LS_ERR_NONFINITE);
    cJSON_Delete(f);
    cr_assert_eq(ls_trace_writer_seq(w), 0, "a refusal consumes no seq");
    cr_assert_eq(ls_trace_emit_error(w, LS_ERR_NONFINITE, "layer_end.out_norm was NaN"), LS_OK);
    cr_assert_eq(ls_trace_emit_rank_complete(w, 0), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    size_t n;
    char *text = (char *)tt_slurp(path, &n);
    cr_assert_null(strstr(text, "nan"));
    cr_assert_null(strstr(text, "inf"));
    cr_assert_null(strstr(text, "null"));
    free(text);
    expect_clean(path, 2);
    tt_rmdir(dir);
}

Test(trace_roundtrip, bad_arguments_refused_writer_stays_usable) {
    char dir[64], path[128];
    ls_trace_writer *w = open_tmp(dir, path, "events.jsonl.zst");
    ls_trace_layer_end l = TT_L0;
    cr_assert_eq(ls_trace_emit_phase_begin(w, NULL, 0), LS_ERR_ARG);
    cr_assert_eq(ls_trace_emit_phase_begin(w, "Bad Phase", 0), LS_ERR_ARG);
    cr_assert_eq(ls_trace_emit_phase_begin(w, "capture", -1), LS_ERR_ARG);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "step"));
    cr_assert_eq(ls_trace_emit_phase_begin(w, "capture", INT64_C(9007199254740992)), LS_ERR_ARG);
    l.member = -2;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_ERR_ARG);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "member"));
    l = TT_L0;
    l.kind = (ls_trace_layer_kind)99;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_ERR_ARG);
    l = TT_L0;
    l.out_norm = -1.0;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_ERR_ARG);
    cr_assert_eq(ls_trace_emit_layer_end(w, NULL), LS_ERR_ARG);
    ls_trace_collective c = TT_C0;
    c.group = "nosuchgroup";
    cr_assert_eq(ls_trace_emit_collective(w, &c), LS_ERR_ARG);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "nosuchgroup"));
    c = TT_C0;
    c.purpose = "has space";
    cr_assert_eq(ls_trace_emit_collective(w, &c), LS_ERR_ARG);
    cr_assert_eq(ls_trace_emit_param_digest(w, 0, "t", NULL), LS_ERR_ARG);
    cr_assert_eq(ls_trace_emit_param_digest(w, 0, "has space", (const uint8_t *)"0123456789abcdef0123456789abcdef"),
                 LS_ERR_ARG);
    ls_trace_mem_category dup[2] = {{"a", 1, 1, false}, {"a", 2, 2, false}};
    ls_trace_memory m = {0, "replay", dup, 2, 0, 0, 0, 0, 0};
    cr_assert_eq(ls_trace_emit_memory(w, &m), LS_ERR_ARG);
    /* generic: envelope key, repeated key, unknown kind name, known kind with bad fields */
    cJSON *f = cJSON_Parse("{\"seq\":5}");
    cr_assert_eq(ls_trace_emit_json(w, "custom", f), LS_ERR_ARG);
    cJSON_Delete(f);
    f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "x", 1);
    cJSON_AddNumberToObject(f, "x", 2);
    cr_assert_eq(ls_trace_emit_json(w, "custom", f), LS_ERR_ARG);
    cJSON_Delete(f);
    cr_assert_eq(ls_trace_emit_json(w, "Not-Ident", NULL), LS_ERR_ARG);
    f = cJSON_Parse("{\"phase\":\"replay\"}");
    cr_assert_eq(ls_trace_emit_json(w, "phase_begin", f), LS_ERR_ARG, "step missing");
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "step"));
    cJSON_Delete(f);
    f = cJSON_Parse("{\"phase\":\"replay\",\"step\":1,\"extra\":true}");
    cr_assert_eq(ls_trace_emit_json(w, "phase_begin", f), LS_ERR_ARG, "extra field");
    cJSON_Delete(f);
    /* a line over LS_TRACE_MAX_LINE is refused, not truncated */
    char *big = malloc(LS_TRACE_MAX_LINE + 10);
    memset(big, 'x', LS_TRACE_MAX_LINE + 9);
    big[LS_TRACE_MAX_LINE + 9] = 0;
    f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "blob", big);
    cr_assert_eq(ls_trace_emit_json(w, "custom", f), LS_ERR_ARG);
    cr_assert_not_null(strstr(ls_trace_writer_last_error(w), "longer"));
    cJSON_Delete(f);
    free(big);
    cr_assert_eq(ls_trace_writer_seq(w), 0);
    /* still usable; a generic known kind is accepted */
    f = cJSON_Parse("{\"phase\":\"replay\",\"step\":1}");
    cr_assert_eq(ls_trace_emit_json(w, "phase_begin", f), LS_OK);
    cJSON_Delete(f);
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L1), LS_OK);
    f = cJSON_Parse("{\"steps\":1,\"events\":3}");
    cr_assert_eq(ls_trace_emit_json(w, "rank_complete", f), LS_ERR_ARG, "events must equal seq");
    cJSON_Delete(f);
    cr_assert_eq(ls_trace_emit_rank_complete(w, 1), LS_OK);
    cr_assert_eq(ls_trace_emit_phase_begin(w, "capture", 1), LS_ERR_ARG, "after rank_complete");
    cr_assert_eq(ls_trace_emit_error(w, LS_ERR_IO, "x"), LS_ERR_ARG);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    expect_clean(path, 3);
    cr_assert_eq(ls_trace_emit_phase_begin(NULL, "capture", 0), LS_ERR_ARG);
    cr_assert_eq(ls_trace_writer_close(NULL), LS_OK);
    cr_assert_eq(ls_trace_writer_seq(NULL), -1);
    tt_rmdir(dir);
}

Test(trace_roundtrip, invalid_header_or_existing_file_refused) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    ls_trace_writer *w = (ls_trace_writer *)1;
    ls_trace_header h = tt_header();
    h.rank = 4;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_ERR_ARG);
    cr_assert_null(w);
    cr_assert_neq(access(path, F_OK), 0, "no file left behind");
    h = tt_header();
    h.run_id = "has space";
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_ERR_ARG);
    static const int32_t bad_members[] = {0, 7};
    ls_trace_group g = {"bad", bad_members, 2, NULL};
    h = tt_header();
    h.groups = &g;
    h.n_groups = 1;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_ERR_ARG);
    ls_trace_group twice[2] = {TT_GROUPS[0], TT_GROUPS[0]};
    h.groups = twice;
    h.n_groups = 2;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_ERR_ARG);
    cr_assert_eq(ls_trace_writer_open(&w, path, NULL), LS_ERR_ARG);
    ls_trace_writer_opts o = {25, 0, 0};
    h = tt_header();
    cr_assert_eq(ls_trace_writer_open_opts(&w, path, &h, &o), LS_ERR_ARG);
    o = (ls_trace_writer_opts){3, ((size_t)2 << 20) + 1, 0};
    cr_assert_eq(ls_trace_writer_open_opts(&w, path, &h, &o), LS_ERR_ARG, "frames would outgrow the reader");
    o = (ls_trace_writer_opts){3, (size_t)1 << 20, ((size_t)1 << 20) + 1};
    cr_assert_eq(ls_trace_writer_open_opts(&w, path, &h, &o), LS_ERR_ARG, "flush + frame bytes over 2 MiB");
    o = (ls_trace_writer_opts){3, (size_t)2 << 20, 0};
    cr_assert_eq(ls_trace_writer_open_opts(&w, path, &h, &o), LS_ERR_ARG, "with the default frame_bytes");
    /* defaults: host/pid/start/tool filled in */
    h.host = NULL;
    h.pid = 0;
    h.start_unix_ns = 0;
    h.tool = NULL;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    ls_trace_report rep;
    ls_trace_read_file(path, NULL, NULL, &rep);
    cr_assert(rep.header_ok);
    cr_assert_eq((int64_t)cJSON_GetObjectItem(rep.header, "pid")->valuedouble, (int64_t)getpid());
    cr_assert_gt(cJSON_GetObjectItem(rep.header, "start_unix_ns")->valuedouble, 1.6e18);
    cr_assert_str_eq(cJSON_GetObjectItem(rep.header, "tool")->valuestring, "longstraw");
    cr_assert_eq(rep.end, LS_TRACE_END_INCOMPLETE, "no rank_complete");
    ls_trace_report_free(&rep);
    /* O_EXCL: an existing trace is never overwritten */
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_ERR_IO);
    cr_assert_null(w);
    tt_rmdir(dir);
}

/* Doubles: the shortest exact text, read back bit for bit; integers at the
 * 2^53-1 edge exact. */
Test(trace_roundtrip, numbers_exact) {
    static const double VALS[] = {0.0, 0.1, 1.0 / 3.0, 2.0 / 3.0, 1e-310, 4.9406564584124654e-324,
                                  1.7976931348623157e308, 123456789.125, 1e21, 1e22, 0.3};
    const size_t nv = sizeof VALS / sizeof VALS[0];
    char dir[64], path[128];
    ls_trace_writer *w = open_tmp(dir, path, "events.jsonl");
    for (size_t i = 0; i < nv; i++) {
        ls_trace_layer_end l = TT_L0;
        l.out_norm = VALS[i];
        l.tokens = (int64_t)i;
        l.live_bytes = LS_TRACE_MAX_INT - (int64_t)i;
        cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_OK);
    }
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    size_t n;
    char *text = (char *)tt_slurp(path, &n);
    cr_assert_not_null(strstr(text, "\"out_norm\":0.1}"), "0.1 printed shortest");
    cr_assert_not_null(strstr(text, "\"out_norm\":0.3}"));
    free(text);
    tt_run run;
    text = (char *)tt_slurp(path, &n);
    tt_read_mem(text, n, &run);
    cr_assert_eq(run.n, nv);
    ls_trace_reader *r;
    cr_assert_eq(ls_trace_reader_open(&r, path), LS_OK);
    const ls_trace_event *ev;
    size_t i = 0;
    while (ls_trace_reader_next(r, &ev) == LS_OK && ev) {
        ls_trace_layer_end got;
        cr_assert_eq(ls_trace_decode_layer_end(ev->json, &got), LS_OK);
        cr_assert(memcmp(&got.out_norm, &VALS[i], sizeof(double)) == 0, "value %zu: %.17g != %.17g", i,
                  got.out_norm, VALS[i]);
        cr_assert_eq(got.live_bytes, LS_TRACE_MAX_INT - (int64_t)i);
        i++;
    }
    cr_assert_eq(i, nv);
    ls_trace_reader_close(r);
    tt_run_free(&run);
    free(text);
    tt_rmdir(dir);
}

/* Under a locale whose decimal separator is ',' the writer still writes
 * '.', and the reader still reads it.  The locale is compiled on the fly
 * with localedef; without it the test is skipped (it cannot fail then). */
Test(trace_roundtrip, c_locale_pinned) {
    char dir[64], cmd[256];
    tt_mkdtemp(dir);
    snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
    if (system(cmd) != 0) {
        tt_rmdir(dir);
        cr_skip_test("localedef cannot build de_DE.UTF-8 here");
    }
    setenv("LOCPATH", dir, 1);
    if (setlocale(LC_ALL, "de_DE.UTF-8") == NULL) cr_skip_test("de_DE.UTF-8 not loadable");
    char probe[32];
    snprintf(probe, sizeof probe, "%.1f", 1.5);
    cr_assert_str_eq(probe, "1,5", "the locale really uses a decimal comma");
    char sub[96], path[160];
    snprintf(sub, sizeof sub, "%s/t", dir);
    mkdir(sub, 0700);
    snprintf(path, sizeof path, "%s/events.jsonl", sub);
    ls_trace_header h = tt_header();
    ls_trace_writer *w;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_OK);
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L0), LS_OK);
    cr_assert_eq(ls_trace_emit_optimizer_step(w, 1, 2, 2.5e-5, 0.125), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    size_t n;
    char *text = (char *)tt_slurp(path, &n);
    cr_assert_not_null(strstr(text, "\"out_norm\":1.5}"), "%s", text);
    cr_assert_not_null(strstr(text, "\"lr\":2.5e-05,\"grad_norm\":0.125}"), "%s", text);
    tt_run run;
    tt_read_mem(text, n, &run);
    cr_assert_eq(run.n, 2u);
    cr_assert_eq(tt_errors(&run.rep), 1u, "only INCOMPLETE");
    tt_run_free(&run);
    free(text);
    setlocale(LC_ALL, "C");
    unlink(path);
    rmdir(sub);
    char loc[128];
    snprintf(loc, sizeof loc, "rm -rf %s/de_DE.UTF-8", dir);
    cr_assert_eq(system(loc), 0);
    tt_rmdir(dir);
}

typedef struct {
    ls_trace_writer *w;
    int id;
} thr_arg;

static void *emitter(void *p) {
    thr_arg *a = p;
    for (int i = 0; i < 2000; i++) {
        ls_trace_layer_end l = TT_L1;
        l.member = a->id;
        l.layer = i;
        if (ls_trace_emit_layer_end(a->w, &l) != LS_OK) return (void *)1;
        if (i % 500 == 0 && ls_trace_emit_phase_begin(a->w, "replay", i) != LS_OK) return (void *)1;
    }
    return NULL;
}

/* Four threads share one writer: every event lands whole, seq contiguous. */
Test(trace_roundtrip, concurrent_emitters_keep_seq_contiguous) {
    char dir[64], path[128];
    ls_trace_writer *w = open_tmp(dir, path, "events.jsonl.zst");
    pthread_t t[4];
    thr_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thr_arg){w, i};
        cr_assert_eq(pthread_create(&t[i], NULL, emitter, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        cr_assert_null(rv);
    }
    cr_assert_eq(ls_trace_emit_rank_complete(w, 0), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    expect_clean(path, 4 * 2004 + 1);
    tt_rmdir(dir);
}

/* Strings: quotes, backslashes, control characters escaped; invalid UTF-8
 * replaced by U+FFFD, valid multi-byte kept. */
Test(trace_roundtrip, strings_escaped) {
    char dir[64], path[128];
    ls_trace_writer *w = open_tmp(dir, path, "events.jsonl");
    const char *msg = "q\"b\\s/\x1f\x7f \xe2\x82\xac bad:\xff\xc3(\xed\xa0\x80)";
    cr_assert_eq(ls_trace_emit_error(w, LS_ERR_IO, msg), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    ls_trace_reader *r;
    cr_assert_eq(ls_trace_reader_open(&r, path), LS_OK);
    const ls_trace_event *ev;
    cr_assert_eq(ls_trace_reader_next(r, &ev), LS_OK);
    cr_assert_not_null(ev);
    const char *got = cJSON_GetObjectItem(ev->json, "message")->valuestring;
    cr_assert_str_eq(got, "q\"b\\s/\x1f\x7f \xe2\x82\xac bad:\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd)");
    cr_assert_eq(ev->flags, 0u);
    ls_trace_reader_close(r);
    tt_rmdir(dir);
}
