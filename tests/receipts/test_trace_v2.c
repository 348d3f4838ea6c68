/* test_trace_v2.c - the reader on v2 traces (docs/contract.md §1): a correct
 * CP-2 trace reads clean with its vocabularies, indices and group kinds;
 * hostile headers (too many names, bad identifiers, repeats, a group
 * without kind), a phase or layer kind outside the vocabulary, v1 and v2
 * mixed in one file, v2 values in a v1 trace, unbounded free members. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "receipts/reading/trace_reader.h"
#include "tests/support/test_v2_fixture.h"

typedef struct {
    int n, phase[32], layer_kind[32];
    char ev[32][32];
} seen;

static int collect(const ls_trace_event *e, void *user) {
    seen *s = user;
    if (s->n < 32) {
        s->phase[s->n] = e->phase;
        s->layer_kind[s->n] = e->layer_kind;
        snprintf(s->ev[s->n], sizeof s->ev[0], "%s", e->ev);
        s->n++;
    }
    return 0;
}

/* Reads text; fills *rep (the caller frees) and returns the status. */
static ls_status read_text(const char *t, ls_trace_report *rep, seen *s) {
    ls_trace_reader *r = NULL;
    cr_assert_eq(ls_trace_reader_open_mem(&r, t, strlen(t), "v2"), LS_OK);
    const ls_trace_event *e;
    while (ls_trace_reader_next(r, &e) == LS_OK && e != NULL)
        if (s) collect(e, s);
    *rep = *ls_trace_reader_report(r);
    /* move the owned parts out before close */
    ls_trace_report *own = (ls_trace_report *)ls_trace_reader_report(r);
    own->path = NULL;
    own->header = NULL;
    own->diags = NULL;
    ls_trace_reader_close(r);
    return ls_trace_report_status(rep);
}

/* The first diagnostic of `code` whose message holds `needle`. */
static const ls_trace_diag *find_diag(const ls_trace_report *rep, ls_trace_diag_code code, const char *needle) {
    for (size_t i = 0; i < rep->n_diags; i++)
        if (rep->diags[i].code == code && strstr(rep->diags[i].message, needle) != NULL) return &rep->diags[i];
    return NULL;
}

static void dump(const ls_trace_report *rep) {
    for (size_t i = 0; i < rep->n_diags; i++)
        fprintf(stderr, "  [%s] %s\n", ls_trace_diag_name(rep->diags[i].code), rep->diags[i].message);
}

Test(trace_v2, correct_cp2_trace_reads_clean_with_vocabulary) {
    ls_v2_fixture o = {0};
    for (int rank = 0; rank < 2; rank++) {
        char *t = ls_v2_fixture_trace(rank, &o);
        ls_trace_report rep;
        seen s = {0};
        ls_status st = read_text(t, &rep, &s);
        if (st != LS_OK) dump(&rep);
        cr_assert_eq(st, LS_OK, "rank %d: %s", rank, ls_status_str(st));
        cr_assert(rep.header_ok);
        cr_assert_eq(rep.version, 2);
        cr_assert_eq(rep.n_phases, 7);
        cr_assert_str_eq(rep.phases[3], "replay");
        cr_assert_eq(rep.n_layer_kinds, 4);
        cr_assert_str_eq(rep.layer_kinds[2], "attn");
        cr_assert_str_eq(ls_trace_report_group_kind(&rep, "cp"), "cp");
        cr_assert_str_eq(ls_trace_report_group_kind(&rep, "world"), "world");
        cr_assert_null(ls_trace_report_group_kind(&rep, "tp"));
        cr_assert_eq(ls_trace_report_phase_index(&rep, "optimizer"), 6);
        cr_assert_eq(ls_trace_report_layer_kind_index(&rep, "mla"), -1);
        cr_assert_eq(rep.n_events, 12);
        cr_assert_str_eq(s.ev[1], "layer_end");
        cr_assert_eq(s.phase[1], 3);      /* replay, the header's 4th phase */
        cr_assert_eq(s.layer_kind[1], 2); /* attn, the header's 3rd kind (v1's enum would say 1) */
        cr_assert_eq(s.phase[0], 3);
        cr_assert_eq(s.phase[2], -1); /* a collective has no phase */
        ls_trace_report_free(&rep);
        free(t);
    }
}

/* The v1 tables still index v1 traces (the enum values of trace_event.h). */
Test(trace_v2, v1_trace_indices_are_the_enums) {
    const char *t =
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"run_id\":\"r\",\"rank\":0,\"world\":1,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,"
        "\"groups\":[{\"name\":\"world\",\"members\":[0]}],\"tool\":\"t\"}\n"
        "{\"v\":1,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"layer_end\",\"phase\":\"replay\",\"step\":0,\"member\":0,"
        "\"layer\":0,\"kind\":\"attn\",\"dir\":\"fwd\",\"tokens\":1,\"live_bytes\":0,\"peak_bytes\":0,\"wall_ns\":0,"
        "\"out_norm\":0}\n"
        "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":\"phase_begin\",\"phase\":\"warmup\",\"step\":0}\n"
        "{\"v\":1,\"rank\":0,\"seq\":2,\"ts_ns\":3,\"ev\":\"rank_complete\",\"steps\":1,\"events\":2}\n";
    ls_trace_report rep;
    seen s = {0};
    cr_assert_eq(read_text(t, &rep, &s), LS_OK);
    cr_assert_eq(rep.version, 1);
    cr_assert_eq(rep.n_phases, LS_PHASE_COUNT);
    cr_assert_str_eq(rep.layer_kinds[LS_TRACE_LAYER_MLA], "mla");
    cr_assert_eq(s.phase[0], LS_PHASE_REPLAY);
    cr_assert_eq(s.layer_kind[0], LS_TRACE_LAYER_ATTN);
    cr_assert_eq(s.phase[1], -1); /* v1 allows other identifiers: no index */
    ls_trace_report_free(&rep);
}

Test(trace_v2, phase_outside_the_vocabulary_fails_naming_it) {
    ls_v2_fixture o = {.bad_phase = "warmup"};
    char *t = ls_v2_fixture_trace(0, &o);
    ls_trace_report rep;
    cr_assert_eq(read_text(t, &rep, NULL), LS_ERR_FORMAT);
    const ls_trace_diag *d = find_diag(&rep, LS_TRACE_DIAG_FIELD, "\"warmup\" is not one of the header's phases");
    if (d == NULL) dump(&rep);
    cr_assert_not_null(d);
    ls_trace_report_free(&rep);
    free(t);
}

/* Replaces the first occurrence of `from` in t by `to` (a new string). */
static char *replace(const char *t, const char *from, const char *to) {
    const char *at = strstr(t, from);
    cr_assert_not_null(at, "fixture lacks %s", from);
    size_t n = strlen(t) - strlen(from) + strlen(to) + 1;
    char *o = malloc(n);
    snprintf(o, n, "%.*s%s%s", (int)(at - t), t, to, at + strlen(from));
    return o;
}

static void expect(const char *t, ls_trace_diag_code code, const char *needle) {
    ls_trace_report rep;
    ls_status st = read_text(t, &rep, NULL);
    cr_assert_neq(st, LS_OK, "accepted: %s", needle);
    const ls_trace_diag *d = find_diag(&rep, code, needle);
    if (d == NULL) dump(&rep);
    cr_assert_not_null(d, "no %s diagnostic with \"%s\"", ls_trace_diag_name(code), needle);
    ls_trace_report_free(&rep);
}

Test(trace_v2, layer_kind_outside_the_vocabulary_fails) {
    ls_v2_fixture o = {0};
    char *t = ls_v2_fixture_trace(0, &o);
    char *u = replace(t, "\"kind\":\"attn\"", "\"kind\":\"mla\"");
    expect(u, LS_TRACE_DIAG_FIELD, "\"mla\" is not one of the header's layer_kinds");
    free(u);
    free(t);
}

Test(trace_v2, v1_event_in_a_v2_trace_and_v2_event_in_a_v1_trace) {
    ls_v2_fixture o = {.v1_event = true};
    char *t = ls_v2_fixture_trace(0, &o);
    expect(t, LS_TRACE_DIAG_ENVELOPE, "v is not 2");
    free(t);
    const char *v1 =
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"run_id\":\"r\",\"rank\":0,\"world\":1,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,"
        "\"groups\":[{\"name\":\"world\",\"members\":[0]}],\"tool\":\"t\"}\n"
        "{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}\n"
        "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":\"collective\",\"group\":\"world\",\"gseq\":0,\"op\":\"send\","
        "\"red\":\"none\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\"}\n"
        "{\"v\":1,\"rank\":0,\"seq\":2,\"ts_ns\":3,\"ev\":\"rank_complete\",\"steps\":1,\"events\":2}\n";
    expect(v1, LS_TRACE_DIAG_ENVELOPE, "v is not 1");
    /* a v2 op, a v2 field in a v1 trace */
    expect(v1, LS_TRACE_DIAG_FIELD, "collective.op");
}

Test(trace_v2, hostile_vocabularies_in_the_header) {
    ls_v2_fixture o = {0};
    char *t = ls_v2_fixture_trace(0, &o);
    /* 33 phases */
    char many[2048] = "\"phases\":[";
    for (int i = 0; i < 33; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"p%d\"", i ? "," : "", i);
    strcat(many, ",\"replay\"],\"x_end\":[");
    char *u = replace(t, "\"phases\":[", many);
    char *w = replace(u, ",\"x_end\":[", ",\"phases_unused\":[");
    free(u);
    /* the extra key is itself refused; the count is what we look for */
    expect(w, LS_TRACE_DIAG_HEADER, "phases: more than 32 names");
    free(w);
    u = replace(t, "\"layer_kinds\":[\"embed\"", "\"layer_kinds\":[\"Embed\"");
    expect(u, LS_TRACE_DIAG_HEADER, "layer_kinds[0]: not a name");
    free(u);
    u = replace(t, "\"layer_kinds\":[\"embed\"", "\"layer_kinds\":[\"attn\"");
    expect(u, LS_TRACE_DIAG_HEADER, "layer_kinds[2]: repeats an earlier name");
    free(u);
    u = replace(t, "\"phases\":[\"capture\",", "\"phases\":[\"a23456789012345678901234567890123\",");
    expect(u, LS_TRACE_DIAG_HEADER, "phases[0]: not a name");
    free(u);
    u = replace(t, "\"phases\":[\"capture\",\"rollout\",\"score\",\"replay\",\"prompt_bwd\",\"finalize\",\"optimizer\"]",
                "\"phases\":[]");
    expect(u, LS_TRACE_DIAG_HEADER, "phases: missing or not a non-empty array");
    free(u);
    u = replace(t, "{\"name\":\"cp\",\"kind\":\"cp\",", "{\"name\":\"cp\",");
    expect(u, LS_TRACE_DIAG_HEADER, "groups[1]: must be {name: token, kind:");
    free(u);
    u = replace(t, "\"kind\":\"cp\"", "\"kind\":\"zz\"");
    expect(u, LS_TRACE_DIAG_HEADER, "groups[1]");
    free(u);
    u = replace(t, "event-header:v2", "event-header:v1");
    expect(u, LS_TRACE_DIAG_HEADER, "schema: must be \"urn:longstraw:schema:event-header:v2\"");
    free(u);
    u = replace(t, ",\"profile\":\"torch-cp\"", "");
    expect(u, LS_TRACE_DIAG_HEADER, "profile: missing");
    free(u);
    /* a v1 header may not carry the v2 keys */
    u = replace(t, "\"v\":2,\"kind\"", "\"v\":1,\"kind\"");
    expect(u, LS_TRACE_DIAG_HEADER, "phases: not a header field");
    free(u);
    free(t);
}

Test(trace_v2, free_members_are_bounded) {
    ls_v2_fixture o = {0};
    char *t = ls_v2_fixture_trace(0, &o);
    char big[4096] = "\"loss\":0.25";
    for (int i = 0; i < 64; i++) snprintf(big + strlen(big), sizeof big - strlen(big), ",\"m%d\":1", i);
    char *u = replace(t, "\"loss\":0.25", big);
    expect(u, LS_TRACE_DIAG_FIELD, "step_metrics.(event): more than 64 members");
    free(u);
    u = replace(t, "\"ppl\":null", "\"ppl\":\"high\"");
    expect(u, LS_TRACE_DIAG_FIELD, "step_metrics.ppl: must be a finite number or null");
    free(u);
    u = replace(t, "\"ppl\":null", "\"Bad Key\":1");
    expect(u, LS_TRACE_DIAG_FIELD, "metric names");
    free(u);
    u = replace(t, ",\"objective\":\"grpo\"", "");
    expect(u, LS_TRACE_DIAG_FIELD, "step_metrics.objective: missing");
    free(u);
    char cats[8192] = "\"categories\":{";
    for (int i = 0; i < 65; i++)
        snprintf(cats + strlen(cats), sizeof cats - strlen(cats), "%s\"c%d\":{\"live\":0,\"peak\":0}", i ? "," : "", i);
    strcat(cats, ",\"torch.allocated\":");
    u = replace(t, "\"categories\":{\"torch.allocated\":", cats);
    expect(u, LS_TRACE_DIAG_FIELD, "memory.categories: more than 64 categories");
    free(u);
    u = replace(t, "\"out_sha256\":\"aaaa", "\"out_sha256\":\"AAAA");
    expect(u, LS_TRACE_DIAG_FIELD, "collective.out_sha256: must be 64 lowercase hex digits");
    free(u);
    u = replace(t, "\"op\":\"allreduce\"", "\"op\":\"allreduce_v3\"");
    expect(u, LS_TRACE_DIAG_FIELD, "collective.op");
    free(u);
    u = replace(t, ",\"recompute\":true", ",\"recompute\":false");
    expect(u, LS_TRACE_DIAG_FIELD, "layer_end.recompute: must be true");
    free(u);
    free(t);
}

/* The schemas say what the reader accepts: every line of the fixture's
 * traces validates against event-header-v2 / event-v2, and a v1 event or a
 * v2 value the reader refuses is refused by the schema too. */
Test(trace_v2, schemas_accept_the_fixture_lines) {
    const ls_schema *hs = NULL, *es = NULL;
    char err[300];
    cr_assert_eq(ls_schema_get("event-header-v2", &hs, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_schema_get("event-v2", &es, err, sizeof err), LS_OK, "%s", err);
    ls_v2_fixture o = {0};
    for (int rank = 0; rank < 2; rank++) {
        char *t = ls_v2_fixture_trace(rank, &o);
        int line = 0;
        for (char *p = t; *p; line++) {
            char *nl = strchr(p, '\n');
            cJSON *doc = NULL;
            cr_assert_eq(ls_json_parse(p, (size_t)(nl - p), "line", &doc, err, sizeof err), LS_OK);
            ls_schema_errors errs = {0};
            ls_status st = ls_schema_validate(line == 0 ? hs : es, doc, &errs);
            char first[600] = "";
            if (st != LS_OK) ls_schema_errors_first(&errs, first, sizeof first);
            cr_assert_eq(st, LS_OK, "rank %d line %d: %s", rank, line + 1, first);
            ls_schema_errors_free(&errs);
            cJSON_Delete(doc);
            p = nl + 1;
        }
        free(t);
    }
    static const char *const BAD[] = {
        "{\"v\":1,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"phase_begin\",\"phase\":\"replay\",\"step\":0}",
        "{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"phase_begin\",\"phase\":\"Replay\",\"step\":0}",
        "{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"step_metrics\",\"step\":0,\"objective\":\"grpo\",\"x\":\"s\"}",
        ("{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"collective\",\"group\":\"cp\",\"gseq\":0,\"op\":\"gather\","
         "\"red\":\"none\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\"}"),
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        cJSON *doc = cJSON_Parse(BAD[i]);
        ls_schema_errors errs = {0};
        cr_assert_neq(ls_schema_validate(es, doc, &errs), LS_OK, "accepted: %s", BAD[i]);
        ls_schema_errors_free(&errs);
        cJSON_Delete(doc);
    }
}

/* The typed decoders read v2 events by their "v". */
Test(trace_v2, typed_decoders_read_v2_events) {
    cJSON *c = cJSON_Parse("{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"collective\",\"group\":\"cp\",\"gseq\":3,"
                           "\"op\":\"all_to_all\",\"red\":\"avg\",\"count\":2,\"dtype\":\"bf16\",\"bytes\":4,"
                           "\"purpose\":\"p\",\"step\":1,\"out_sha256\":\"" "0123456789abcdef0123456789abcdef"
                           "0123456789abcdef0123456789abcdef\"}");
    ls_trace_collective tc;
    cr_assert_eq(ls_trace_decode_collective(c, &tc), LS_OK);
    cr_assert_eq(tc.op, LS_TRACE_OP_ALL_TO_ALL);
    cr_assert_eq(tc.red, LS_TRACE_RED_AVG);
    cr_assert_eq(tc.dtype, LS_TRACE_DTYPE_BF16);
    cr_assert_str_eq(ls_trace_op_name(tc.op), "all_to_all");
    cJSON_ReplaceItemInObjectCaseSensitive(c, "v", cJSON_CreateNumber(1)); /* the same event as v1: refused */
    cr_assert_eq(ls_trace_decode_collective(c, &tc), LS_ERR_SCHEMA);
    cJSON_Delete(c);
    cJSON *l = cJSON_Parse("{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"layer_end\",\"phase\":\"fwd.pass\",\"step\":0,"
                           "\"member\":-1,\"layer\":2,\"kind\":\"mlp\",\"dir\":\"bwd\",\"tokens\":1,\"live_bytes\":0,"
                           "\"peak_bytes\":0,\"wall_ns\":0,\"out_norm\":0,\"recompute\":true}");
    ls_trace_layer_end le;
    cr_assert_eq(ls_trace_decode_layer_end(l, &le), LS_OK);
    cr_assert_eq(le.kind, LS_TRACE_LAYER_KIND_COUNT);
    cr_assert_str_eq(le.phase, "fwd.pass");
    cr_assert_eq(le.dir, LS_TRACE_DIR_BWD);
    cJSON_Delete(l);
}

/* ---- point-to-point and digest fields (docs/contract.md §1) -------------- */

#define XA "xxh3_128:0123456789abcdef0123456789abcdef"
#define XB "xxh3_128:ffeeddccbbaa99887766554433221100"
#define HA "abababababababababababababababababababababababababababababababab"

static const char *const P2P_EXTRA[] = {
    "\"group\":\"cp\",\"gseq\":0,\"op\":\"send\",\"red\":\"none\",\"count\":4,\"dtype\":\"f32\",\"bytes\":16,"
    "\"purpose\":\"kv_ring\",\"layer\":0,\"step\":0,\"in_digest\":\"" XA "\",\"in_digest_done\":\"" XB "\","
    "\"peer\":1,\"tag\":3,\"declared\":true",
    "\"group\":\"cp\",\"gseq\":0,\"op\":\"recv\",\"red\":\"none\",\"count\":4,\"dtype\":\"f32\",\"bytes\":0,"
    "\"purpose\":\"kv_back\",\"out_digest\":\"" XA "\",\"peer\":1",
    "\"group\":\"world\",\"gseq\":0,\"op\":\"allreduce\",\"red\":\"sum\",\"count\":4,\"dtype\":\"f32\",\"bytes\":16,"
    "\"purpose\":\"grad_sum\",\"out_sha256\":\"" HA "\",\"out_digest\":\"sha256:" HA "\"",
    NULL,
};

/* The new fields read clean; each misuse is a field diagnostic naming the field. */
Test(trace_v2, p2p_and_digest_fields_read_and_are_checked) {
    ls_v2_fixture o = {.extra = {P2P_EXTRA, NULL}};
    char *t = ls_v2_fixture_trace(0, &o);
    ls_trace_report rep;
    ls_status st = read_text(t, &rep, NULL);
    if (st != LS_OK) dump(&rep);
    cr_assert_eq(st, LS_OK);
    ls_trace_report_free(&rep);
    static const struct {
        const char *from, *to, *needle;
    } BAD[] = {
        {"\"out_digest\":\"sha256:abab", "\"out_digest\":\"sha256:cdab",
         "collective.out_digest: differs from out_sha256"},
        {"\"out_digest\":\"" XA "\"", "\"out_digest\":\"xxh3_128:0123456789abcdef0123456789abcde\"",
         "collective.out_digest: must be \"sha256:\" and 64 or \"xxh3_128:\" and 32 lowercase hex digits"},
        {"\"out_digest\":\"" XA "\"", "\"out_digest\":\"md5:0123456789abcdef0123456789abcdef\"",
         "collective.out_digest: must be"},
        {"\"out_digest\":\"" XA "\"", "\"out_digest\":\"XXH3_128:0123456789abcdef0123456789abcdef\"",
         "collective.out_digest: must be"},
        {"\"in_digest\":\"" XA "\"", "\"in_digest\":\"xxh3_128:0123456789ABCDEF0123456789abcdef\"",
         "collective.in_digest: must be"},
        {"\"declared\":true", "\"declared\":false", "collective.declared: must be true"},
        {"\"tag\":3", "\"tag\":-3", "collective.tag: must be an integer >= 0"},
        {"\"peer\":1,\"tag\":3", "\"peer\":-1,\"tag\":3", "collective.peer: must be an integer >= 0"},
        {"\"out_digest\":\"sha256:" HA "\"", "\"out_digest\":\"sha256:" HA "\",\"peer\":1",
         "collective.peer: only a send or recv has a peer"},
        {"\"out_digest\":\"sha256:" HA "\"", "\"out_digest\":\"sha256:" HA "\",\"tag\":0",
         "collective.tag: only a send or recv has a tag"},
        {"\"out_digest\":\"" XA "\",\"peer\":1", "\"out_digest\":\"" XA "\",\"in_digest\":\"" XA "\",\"peer\":1",
         "collective.in_digest: only a send has an input digest"},
        {"\"in_digest\":\"" XA "\",", "", "collective.in_digest_done: written only beside in_digest"},
        {"\"in_digest_done\":\"" XB "\"", "\"in_digest_done\":\"" XA "\"", "collective.in_digest_done: equals in_digest"},
        {"\"in_digest_done\":\"" XB "\"", "\"in_digest_done\":\"sha256:" HA "\"",
         "collective.in_digest_done: must use in_digest's algorithm"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char *u = replace(t, BAD[i].from, BAD[i].to);
        expect(u, LS_TRACE_DIAG_FIELD, BAD[i].needle);
        free(u);
    }
    /* the new fields stay v2's: a v1 trace refuses them */
    const char *v1 =
        "{\"v\":1,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v1\","
        "\"run_id\":\"r\",\"rank\":0,\"world\":2,\"host\":\"h\",\"pid\":1,\"start_unix_ns\":5,"
        "\"groups\":[{\"name\":\"world\",\"members\":[0,1]}],\"tool\":\"t\"}\n"
        "{\"v\":1,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"collective\",\"group\":\"world\",\"gseq\":0,\"op\":\"allreduce\","
        "\"red\":\"sum\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\",\"out_digest\":\"" XA "\"}\n"
        "{\"v\":1,\"rank\":0,\"seq\":1,\"ts_ns\":2,\"ev\":\"rank_complete\",\"steps\":0,\"events\":1}\n";
    expect(v1, LS_TRACE_DIAG_FIELD, "collective.out_digest: not a field of this kind");
    free(t);
}

/* The schema says what the reader says of the new fields' forms and of the
 * ops they belong to. */
Test(trace_v2, schema_knows_the_p2p_and_digest_fields) {
    const ls_schema *es = NULL;
    char err[300];
    cr_assert_eq(ls_schema_get("event-v2", &es, err, sizeof err), LS_OK, "%s", err);
    ls_v2_fixture o = {.extra = {P2P_EXTRA, NULL}};
    char *t = ls_v2_fixture_trace(0, &o);
    for (char *p = strchr(t, '\n') + 1; *p;) { /* every event line */
        char *nl = strchr(p, '\n');
        cJSON *doc = NULL;
        cr_assert_eq(ls_json_parse(p, (size_t)(nl - p), "line", &doc, err, sizeof err), LS_OK);
        ls_schema_errors errs = {0};
        ls_status st = ls_schema_validate(es, doc, &errs);
        char first[600] = "";
        if (st != LS_OK) ls_schema_errors_first(&errs, first, sizeof first);
        cr_assert_eq(st, LS_OK, "%.*s: %s", (int)(nl - p), p, first);
        ls_schema_errors_free(&errs);
        cJSON_Delete(doc);
        p = nl + 1;
    }
    free(t);
#define C2(f) "{\"v\":2,\"rank\":0,\"seq\":0,\"ts_ns\":1,\"ev\":\"collective\",\"group\":\"cp\",\"gseq\":0," f "}"
    static const char *const BAD[] = {
        C2("\"op\":\"allreduce\",\"red\":\"sum\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\","
           "\"out_digest\":\"xxh3_128:0123456789abcdef0123456789abcde\""),
        C2("\"op\":\"allreduce\",\"red\":\"sum\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\","
           "\"out_digest\":\"md5:0123456789abcdef0123456789abcdef\""),
        C2("\"op\":\"allreduce\",\"red\":\"sum\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\","
           "\"declared\":false"),
        C2("\"op\":\"allreduce\",\"red\":\"sum\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\",\"peer\":1"),
        C2("\"op\":\"recv\",\"red\":\"none\",\"count\":1,\"dtype\":\"f64\",\"bytes\":0,\"purpose\":\"p\",\"peer\":1,"
           "\"in_digest\":\"" XA "\""),
        C2("\"op\":\"send\",\"red\":\"none\",\"count\":1,\"dtype\":\"f64\",\"bytes\":8,\"purpose\":\"p\",\"peer\":1,"
           "\"in_digest_done\":\"" XA "\""),
    };
#undef C2
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        cJSON *doc = cJSON_Parse(BAD[i]);
        cr_assert_not_null(doc, "%s", BAD[i]);
        ls_schema_errors errs = {0};
        cr_assert_neq(ls_schema_validate(es, doc, &errs), LS_OK, "accepted: %s", BAD[i]);
        ls_schema_errors_free(&errs);
        cJSON_Delete(doc);
    }
}

/* ls_trace_digest_parse: the bytes of each algorithm's hex, anything else refused. */
Test(trace_v2, digest_strings_parse) {
    uint8_t d[32];
    size_t n = 0;
    ls_trace_digest_alg a = LS_TRACE_DIGEST_COUNT;
    cr_assert(ls_trace_digest_parse(XB, &a, d, &n));
    cr_assert_eq(a, LS_TRACE_DIGEST_XXH3_128);
    cr_assert_eq(n, 16);
    cr_assert_eq(d[0], 0xff);
    cr_assert_eq(d[1], 0xee);
    cr_assert_eq(d[15], 0x00);
    cr_assert(ls_trace_digest_parse("sha256:" HA, &a, d, &n));
    cr_assert_eq(a, LS_TRACE_DIGEST_SHA256);
    cr_assert_eq(n, 32);
    cr_assert_eq(d[0], 0xab);
    cr_assert_eq(d[31], 0xab);
    cr_assert_str_eq(ls_trace_digest_alg_name(LS_TRACE_DIGEST_XXH3_128), "xxh3_128");
    static const char *const NO[] = {
        "", "sha256:", "xxh3_128:", HA, "sha256:" HA "0", "sha256:" HA " ", "xxh3_128:0123456789abcdef0123456789abcdeg",
        "xxh3_128:" HA, "sha256:0123456789abcdef0123456789abcdef", "xxh3_64:0123456789abcdef", "Sha256:" HA,
        "sha256 :" HA,
    };
    for (size_t i = 0; i < sizeof NO / sizeof NO[0]; i++)
        cr_assert(!ls_trace_digest_parse(NO[i], NULL, NULL, NULL), "accepted \"%s\"", NO[i]);
    cr_assert(!ls_trace_digest_parse(NULL, NULL, NULL, NULL));
}
