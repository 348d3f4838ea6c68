/* test_trace_schema.c - the trace schemas, the C field table and the
 * fixtures agree:
 *  - schemas/event-<kind>.schema.json requires exactly the envelope plus the
 *    table's required fields, lists exactly its fields, forbids others;
 *  - tests/fixtures/schema/event-<kind>/valid/ are the writer's own output
 *    (regenerated with LS_REGEN_FIXTURES=1; compared ignoring ts_ns);
 *  - the reader accepts every valid fixture and rejects every invalid one.
 * (The schema-agreement test of test_schema.c checks the same fixtures with
 * the C validator and python3-jsonschema.) */
#include <dirent.h>

#include "tests/receipts/test_trace_util.h"

#define FIX_DIR LS_SOURCE_DIR "/tests/fixtures/schema"

static const char *const ENVELOPE[] = {"v", "rank", "seq", "ts_ns", "ev"};

static cJSON *load_json(const char *path) {
    size_t n;
    char *t = (char *)tt_slurp(path, &n);
    cJSON *j = cJSON_Parse(t);
    free(t);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

static bool array_has(const cJSON *arr, const char *s) {
    for (const cJSON *c = arr ? arr->child : NULL; c; c = c->next)
        if (cJSON_IsString(c) && strcmp(c->valuestring, s) == 0) return true;
    return false;
}

Test(trace_schema, schemas_match_field_table) {
    for (int k = 0; k < LS_TRACE_KIND_COUNT; k++) {
        const char *kind = ls_trace_kind_name((ls_trace_kind)k);
        char path[512], id[128];
        snprintf(path, sizeof path, "%s/schemas/event-%s.schema.json", LS_SOURCE_DIR, kind);
        snprintf(id, sizeof id, "urn:longstraw:schema:event-%s:v1", kind);
        cJSON *s = load_json(path);
        cr_assert_str_eq(cJSON_GetObjectItem(s, "$id")->valuestring, id);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(s, "additionalProperties")), "%s", kind);
        const cJSON *req = cJSON_GetObjectItem(s, "required");
        const cJSON *props = cJSON_GetObjectItem(s, "properties");
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(props, "ev"), "const")->valuestring, kind);
        cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(props, "v"), "const")->valueint, 1);
        size_t nreq = 5, nprop = 5;
        for (size_t i = 0; i < 5; i++) {
            cr_assert(array_has(req, ENVELOPE[i]), "%s: envelope %s not required", kind, ENVELOPE[i]);
            cr_assert_not_null(cJSON_GetObjectItem(props, ENVELOPE[i]));
        }
        for (size_t i = 0; i < ls_trace_kind_field_count((ls_trace_kind)k); i++) {
            bool required;
            const char *f = ls_trace_kind_field((ls_trace_kind)k, i, &required);
            cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(props, f), "%s.%s not in schema", kind, f);
            cr_assert_eq(array_has(req, f), required, "%s.%s: required differs", kind, f);
            nprop++;
            nreq += required;
        }
        cr_assert_eq((size_t)cJSON_GetArraySize(req), nreq, "%s: schema requires extra fields", kind);
        cr_assert_eq((size_t)cJSON_GetArraySize(props), nprop, "%s: schema has extra properties", kind);
        cJSON_Delete(s);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/schemas/event-header.schema.json", LS_SOURCE_DIR);
    cJSON *s = load_json(path);
    cr_assert_str_eq(cJSON_GetObjectItem(s, "$id")->valuestring, LS_TRACE_HEADER_SCHEMA);
    const cJSON *props = cJSON_GetObjectItem(s, "properties");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(props, "kind"), "const")->valuestring,
                     LS_TRACE_HEADER_KIND);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(props, "schema"), "const")->valuestring,
                     LS_TRACE_HEADER_SCHEMA);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "required")), 11);
    cJSON_Delete(s);
}

/* ---- valid fixtures: the writer's output ---------------------------------------- */

typedef struct {
    const char *dir;  /* schema name */
    const char *name; /* file name */
} fixture;

/* In emission order: line i+1 of the generated trace is FIXTURES[i]. */
static const fixture FIXTURES[] = {
    {"event-phase_begin", "capture.json"},    {"event-layer_end", "embed-fwd.json"},
    {"event-layer_end", "gdn-fwd.json"},      {"event-collective", "with-layer.json"},
    {"event-collective", "without-layer.json"}, {"event-phase_end", "ok.json"},
    {"event-phase_begin", "custom-phase.json"}, {"event-layer_end", "head-bwd-edge-values.json"},
    {"event-memory", "categories.json"},      {"event-memory", "no-categories.json"},
    {"event-optimizer_step", "step.json"},    {"event-param_digest", "digest.json"},
    {"event-error", "escapes.json"},          {"event-phase_end", "failed.json"},
    /* a prefix-frozen step: every event with a step is marked */
    {"event-phase_begin", "prefix-frozen.json"}, {"event-layer_end", "prefix-frozen.json"},
    {"event-memory", "prefix-frozen.json"},    {"event-step_metrics", "sft-prefix-frozen-no-parts.json"},
    {"event-optimizer_step", "prefix-frozen.json"}, {"event-param_digest", "prefix-frozen.json"},
    {"event-phase_end", "prefix-frozen.json"},
    /* mode off again: an exact step */
    {"event-step_metrics", "grpo-exact.json"},
    {"event-gradient_probe", "pass-layer-groups.json"},
    /* prefix-frozen again: a probe that does not apply */
    {"event-gradient_probe", "not-applicable-prefix-frozen.json"},
    {"event-rank_complete", "complete.json"},
};
#define N_FIXTURES (sizeof FIXTURES / sizeof FIXTURES[0])

/* A gradient_probe event through the generic emitter: ran (a pass over two
 * layer groups) or not (not_applicable: a prefix-frozen step). */
static void emit_probe(ls_trace_writer *w, int64_t step, bool ran) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "step", (double)step);
    cJSON_AddStringToObject(e, "objective", ran ? "grpo" : "sft");
    cJSON_AddStringToObject(e, "grad_mode", ran ? "full" : "detached");
    cJSON_AddStringToObject(e, "grouping", ran ? "layer" : "all");
    cJSON_AddNumberToObject(e, "h", ran ? 1e-4 : 0);
    cJSON_AddNumberToObject(e, "seed", 4503599627370497.0);
    cJSON_AddNumberToObject(e, "evaluations", ran ? 8 : 0);
    cJSON_AddNumberToObject(e, "seconds", ran ? 0.125 : 0);
    cJSON_AddNumberToObject(e, "tol", 1e-6);
    cJSON_AddStringToObject(e, "verdict", ran ? "pass" : "not_applicable");
    if (!ran) cJSON_AddStringToObject(e, "reason", "a prefix-frozen step: its gradient is of a stale prompt state");
    cJSON_AddBoolToObject(e, "ranks_agree", true);
    cJSON *g = cJSON_AddArrayToObject(e, "groups");
    for (int k = 0; ran && k < 2; k++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", k ? "other" : "layers.0");
        cJSON_AddNumberToObject(o, "tensors", k ? 1 : 12);
        cJSON_AddNumberToObject(o, "derivative", k ? -0.0031250000000001 : 0.5);
        cJSON_AddNumberToObject(o, "applied", k ? -0.0031250000000002 : 0.5);
        cJSON_AddNumberToObject(o, "error_estimate", 2.5e-12);
        cJSON_AddNumberToObject(o, "rounding_floor", 1.0e-11);
        cJSON_AddNumberToObject(o, "rel_error", k ? 3.2e-14 : 0);
        cJSON_AddNumberToObject(o, "tolerance", k ? 7.2e-9 : 1e-6);
        cJSON_AddNumberToObject(o, "h", 1e-4);
        cJSON_AddBoolToObject(o, "decided_alike", true);
        cJSON_AddStringToObject(o, "verdict", "pass");
        cJSON_AddItemToArray(g, o);
    }
    cr_assert_eq(ls_trace_emit_json(w, "gradient_probe", e), LS_OK, "%s", ls_trace_writer_last_error(w));
    cJSON_Delete(e);
}

static void emit_fixtures(ls_trace_writer *w) {
    uint8_t sha[32];
    for (int i = 0; i < 32; i++) sha[i] = (uint8_t)(255 - i * 7);
    ls_trace_memory none = {1, "score", NULL, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(ls_trace_emit_phase_begin(w, "capture", 0), LS_OK);
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L0), LS_OK);
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L1), LS_OK);
    cr_assert_eq(ls_trace_emit_collective(w, &TT_C0), LS_OK);
    cr_assert_eq(ls_trace_emit_collective(w, &TT_C1), LS_OK);
    cr_assert_eq(ls_trace_emit_phase_end(w, "capture", 0, 12345, true), LS_OK);
    cr_assert_eq(ls_trace_emit_phase_begin(w, "warmup_2", 1), LS_OK);
    cr_assert_eq(ls_trace_emit_layer_end(w, &TT_L2), LS_OK);
    cr_assert_eq(ls_trace_emit_memory(w, &TT_MEM), LS_OK);
    cr_assert_eq(ls_trace_emit_memory(w, &none), LS_OK);
    cr_assert_eq(ls_trace_emit_optimizer_step(w, 3, 123456789, 3e-4, 1.25), LS_OK);
    cr_assert_eq(ls_trace_emit_param_digest(w, 3, "model.layers.0.attn.wq", sha), LS_OK);
    cr_assert_eq(ls_trace_emit_error(w, LS_ERR_NONFINITE, TT_ERR_MSG), LS_OK);
    cr_assert_eq(ls_trace_emit_phase_end(w, "optimizer", 3, 999, false), LS_OK);
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(w, true), LS_OK);
    ls_trace_layer_end l = TT_L1;
    l.phase = "rollout";
    l.step = 4;
    ls_trace_memory mem = TT_MEM;
    mem.step = 4;
    ls_trace_step_metrics sft = tt_step_metrics(4, LS_TRACE_OBJECTIVE_SFT, false);
    sft.clip_fraction = 1;
    sft.reward_mean = sft.reward_min = sft.reward_max = -0.5;
    sft.reward_std = sft.adv_mean = sft.adv_std = 0;
    sft.tokens_per_s_mask = 1u << LS_PHASE_CAPTURE | 1u << LS_PHASE_REPLAY;
    cr_assert_eq(ls_trace_emit_phase_begin(w, "rollout", 4), LS_OK);
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_OK);
    cr_assert_eq(ls_trace_emit_memory(w, &mem), LS_OK);
    cr_assert_eq(ls_trace_emit_step_metrics(w, &sft), LS_OK);
    cr_assert_eq(ls_trace_emit_optimizer_step(w, 4, 123456789, 3e-4, 0.5), LS_OK);
    cr_assert_eq(ls_trace_emit_param_digest(w, 4, "trainable", sha), LS_OK);
    cr_assert_eq(ls_trace_emit_phase_end(w, "optimizer", 4, 1000, true), LS_OK);
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(w, false), LS_OK);
    ls_trace_step_metrics grpo = tt_step_metrics(5, LS_TRACE_OBJECTIVE_GRPO, true);
    cr_assert_eq(ls_trace_emit_step_metrics(w, &grpo), LS_OK);
    emit_probe(w, 5, true);
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(w, true), LS_OK);
    emit_probe(w, 6, false);
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(w, false), LS_OK);
    cr_assert_eq(ls_trace_emit_rank_complete(w, 6), LS_OK);
}

/* Writes a trace; returns its lines (header first) as NUL-terminated
 * strings in one buffer, *n lines. */
static char **generate(const ls_trace_header *h, bool events, size_t *n, char **blob) {
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    ls_trace_writer *w;
    cr_assert_eq(ls_trace_writer_open(&w, path, h), LS_OK);
    if (events) emit_fixtures(w);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    size_t len;
    *blob = (char *)tt_slurp(path, &len);
    tt_rmdir(dir);
    char **lines = calloc(64, sizeof *lines);
    *n = 0;
    for (char *p = *blob, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        *nl = '\0';
        lines[(*n)++] = p;
    }
    return lines;
}

/* Compares (or, with LS_REGEN_FIXTURES set, writes) one valid fixture. */
static void check_or_write(const char *dir, const char *name, const char *line, bool ignore_ts) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/valid/%s", FIX_DIR, dir, name);
    if (getenv("LS_REGEN_FIXTURES")) {
        char d[512];
        snprintf(d, sizeof d, "%s/%s", FIX_DIR, dir);
        mkdir(d, 0755);
        snprintf(d, sizeof d, "%s/%s/valid", FIX_DIR, dir);
        mkdir(d, 0755);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f, "%s", path);
        fprintf(f, "%s\n", line);
        fclose(f);
        return;
    }
    cJSON *want = load_json(path);
    cJSON *got = cJSON_Parse(line);
    cr_assert_not_null(got);
    if (ignore_ts) {
        cJSON_DeleteItemFromObjectCaseSensitive(want, "ts_ns");
        cJSON_DeleteItemFromObjectCaseSensitive(got, "ts_ns");
    }
    cr_assert(cJSON_Compare(want, got, 1), "%s differs from the writer's output:\n%s", path, line);
    cJSON_Delete(want);
    cJSON_Delete(got);
}

Test(trace_schema, valid_fixtures_are_writer_output) {
    ls_trace_header h = tt_header();
    size_t n;
    char *blob;
    char **lines = generate(&h, true, &n, &blob);
    cr_assert_eq(n, 1 + N_FIXTURES);
    check_or_write("event-header", "rank1-of-4.json", lines[0], false);
    for (size_t i = 0; i < N_FIXTURES; i++) check_or_write(FIXTURES[i].dir, FIXTURES[i].name, lines[i + 1], true);
    free(lines);
    free(blob);
    ls_trace_header h1 = {0};
    h1.run_id = "20250101T000000Z-single";
    h1.rank = 0;
    h1.world = 1;
    h1.host = "node-01.cluster";
    h1.pid = 1;
    h1.start_unix_ns = INT64_C(1735689600000000000);
    h1.tool = "longstraw-train";
    lines = generate(&h1, false, &n, &blob);
    cr_assert_eq(n, 1u);
    check_or_write("event-header", "single-rank-no-groups.json", lines[0], false);
    free(lines);
    free(blob);
}

/* ---- the reader's verdict on every fixture ----------------------------------- */

/* The file's JSON on one line (JSON strings hold no raw newlines). */
static char *one_line(const char *path) {
    size_t n;
    char *t = (char *)tt_slurp(path, &n);
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ')) t[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (t[i] == '\n' || t[i] == '\r') t[i] = ' ';
    return t;
}

/* Valid per the reader: as line 1, a valid header; as an event after the
 * rank-1 header, delivered as `kind` with no field/kind problems (seq, ts,
 * rank and key-order findings are not schema matters). */
static bool reader_accepts(const char *schema, const char *doc) {
    static const char HEADER_FIXTURE[] = FIX_DIR "/event-header/valid/rank1-of-4.json";
    char *text;
    size_t len;
    bool ok;
    tt_run run;
    if (strcmp(schema, "event-header") == 0) {
        len = strlen(doc) + 1;
        text = malloc(len + 1);
        snprintf(text, len + 1, "%s\n", doc);
        tt_read_mem(text, len, &run);
        ok = run.rep.header_ok;
    } else {
        char *hdr = one_line(HEADER_FIXTURE);
        len = strlen(hdr) + strlen(doc) + 2;
        text = malloc(len + 1);
        snprintf(text, len + 1, "%s\n%s\n", hdr, doc);
        free(hdr);
        tt_read_mem(text, len, &run);
        cr_assert(run.rep.header_ok);
        const unsigned bad = LS_TRACE_EVF_FIELDS | LS_TRACE_EVF_UNKNOWN_KIND;
        ok = run.n == 1 && (run.flags[0] & bad) == 0;
        if (ok) {
            cJSON *e = cJSON_Parse(run.text[0]);
            ok = strcmp(cJSON_GetObjectItem(e, "ev")->valuestring, schema + strlen("event-")) == 0;
            cJSON_Delete(e);
        }
    }
    tt_run_free(&run);
    free(text);
    return ok;
}

Test(trace_schema, reader_agrees_with_fixtures) {
    static const char *const SCHEMAS[] = {
        "event-header",    "event-phase_begin",    "event-phase_end",    "event-layer_end",
        "event-collective", "event-optimizer_step", "event-param_digest", "event-memory",
        "event-error",     "event-rank_complete",  "event-step_metrics", "event-gradient_probe",
    };
    size_t checked = 0;
    for (size_t s = 0; s < sizeof SCHEMAS / sizeof SCHEMAS[0]; s++)
        for (int valid = 1; valid >= 0; valid--) {
            char dir[512];
            snprintf(dir, sizeof dir, "%s/%s/%s", FIX_DIR, SCHEMAS[s], valid ? "valid" : "invalid");
            DIR *d = opendir(dir);
            cr_assert_not_null(d, "missing %s", dir);
            size_t n = 0;
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                size_t l = strlen(de->d_name);
                if (l < 6 || strcmp(de->d_name + l - 5, ".json") != 0) continue;
                char path[1024];
                snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
                char *doc = one_line(path);
                cr_expect_eq(reader_accepts(SCHEMAS[s], doc), valid, "%s: the reader says %s", path,
                             valid ? "invalid" : "valid");
                free(doc);
                n++;
            }
            closedir(d);
            cr_assert_geq(n, valid ? 1u : 5u, "%s: too few fixtures", dir);
            checked += n;
        }
    cr_log_info("trace fixtures checked: %zu", checked);
}
