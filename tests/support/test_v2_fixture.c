/* test_v2_fixture.c - the hand-written v2 run of test_v2_fixture.h. */
#include "tests/support/test_v2_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "tests/support/test_text.h"

#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HASH_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define PROFILE_SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* An event trace's text and the seq of its next event. */
typedef struct {
    ls_test_text t;
    long seq;
} text;

/* One event line: the v2 envelope, then the fields (a JSON fragment). */
static void ev(text *b, int rank, int v, const char *kind, const char *fields) {
    ls_test_text_add(&b->t, "{\"v\":%d,\"rank\":%d,\"seq\":%ld,\"ts_ns\":%ld,\"ev\":\"%s\"%s%s}\n", v, rank, b->seq,
                     1000 * b->seq, kind, fields[0] ? "," : "", fields);
    b->seq++;
}

char *ls_v2_fixture_trace(int rank, const ls_v2_fixture *o) {
    text b = {0};
    ls_test_text_add(&b.t,
        "{\"v\":2,\"kind\":\"longstraw.trace.header\",\"schema\":\"urn:longstraw:schema:event-header:v2\","
        "\"run_id\":\"run-v2\",\"rank\":%d,\"world\":2,\"host\":\"h\",\"pid\":7,\"start_unix_ns\":1796309229355295996,"
        "\"groups\":[{\"name\":\"world\",\"kind\":\"world\",\"members\":[0,1]},"
        "{\"name\":\"cp\",\"kind\":\"cp\",\"members\":[0,1]}%s%s],"
        "\"tool\":\"fixture\",\"profile\":\"torch-cp\","
        "\"phases\":[\"capture\",\"rollout\",\"score\",\"replay\",\"prompt_bwd\",\"finalize\",\"optimizer\"],"
        "\"layer_kinds\":[\"embed\",\"gdn\",\"attn\",\"head\"]}\n",
        rank, o->extra_group ? "," : "", o->extra_group ? o->extra_group : "");
    char f[600];
    const char *out0 = o->no_digests ? "" : ",\"out_sha256\":\"" HASH_A "\"";
    const char *out1 = o->no_digests ? "" : (o->differ_out && rank == 1) ? ",\"out_sha256\":\"" HASH_B "\""
                                                                          : ",\"out_sha256\":\"" HASH_A "\"";
    const char *outb = o->no_digests ? "" : ",\"out_sha256\":\"" HASH_C "\"";
    ev(&b, rank, 2, "phase_begin", "\"phase\":\"replay\",\"step\":0");
    ev(&b, rank, 2, "layer_end",
       "\"phase\":\"replay\",\"step\":0,\"member\":0,\"layer\":0,\"kind\":\"attn\",\"dir\":\"fwd\",\"tokens\":8,"
       "\"live_bytes\":64,\"peak_bytes\":128,\"wall_ns\":10,\"out_norm\":1.5");
    snprintf(f, sizeof f,
             "\"group\":\"cp\",\"gseq\":0,\"op\":\"allreduce\",\"red\":\"sum\",\"count\":4,\"dtype\":\"bf16\","
             "\"bytes\":8,\"purpose\":\"out_sum\",\"layer\":0,\"step\":0%s",
             rank == 0 ? out0 : out1);
    ev(&b, rank, 2, "collective", f);
    if (!o->allreduce_only) {
        snprintf(f, sizeof f,
                 "\"group\":\"cp\",\"gseq\":1,\"op\":\"broadcast\",\"red\":\"none\",\"count\":2,\"dtype\":\"f64\","
                 "\"bytes\":16,\"purpose\":\"seed\",\"step\":0%s",
                 outb);
        ev(&b, rank, 2, "collective", f);
        ev(&b, rank, 2, "collective",
           "\"group\":\"cp\",\"gseq\":2,\"op\":\"all_to_all\",\"red\":\"none\",\"count\":2,\"dtype\":\"i32\","
           "\"bytes\":8,\"purpose\":\"kv_ring\",\"step\":0");
    }
    for (size_t i = 0; o->extra[rank] != NULL && o->extra[rank][i] != NULL; i++)
        ev(&b, rank, 2, "collective", o->extra[rank][i]);
    ev(&b, rank, 2, "layer_end",
       "\"phase\":\"replay\",\"step\":0,\"member\":0,\"layer\":0,\"kind\":\"attn\",\"dir\":\"fwd\",\"tokens\":8,"
       "\"live_bytes\":64,\"peak_bytes\":128,\"wall_ns\":10,\"out_norm\":1.5,\"recompute\":true");
    ev(&b, rank, 2, "phase_end", "\"phase\":\"replay\",\"step\":0,\"wall_ns\":100,\"ok\":true");
    if (o->bad_phase && rank == 0) {
        snprintf(f, sizeof f, "\"phase\":\"%s\",\"step\":0", o->bad_phase);
        ev(&b, rank, 2, "phase_begin", f);
    }
    if (!o->no_memory)
        ev(&b, rank, (o->v1_event && rank == 0) ? 1 : 2, "memory",
           o->bad_memory && rank == 1
               ? "\"step\":0,\"phase\":\"replay\",\"categories\":{\"torch.allocated\":{\"live\":10,\"peak\":20},"
                 "\"Activations\":{\"live\":5,\"peak\":5}},\"total_live\":99,\"total_peak\":20,\"rss_peak\":100"
               : "\"step\":0,\"phase\":\"replay\",\"categories\":{\"torch.allocated\":{\"live\":10,\"peak\":20},"
                 "\"Activations\":{\"live\":5,\"peak\":5}},\"total_live\":15,\"total_peak\":20,\"rss_peak\":100");
    ev(&b, rank, 2, "optimizer_step", "\"step\":0,\"n_params\":3,\"lr\":0.01,\"grad_norm\":0.5");
    ev(&b, rank, 2, "param_digest", "\"step\":0,\"target\":\"trainable\",\"sha256\":\"" HASH_C "\"");
    ev(&b, rank, 2, "step_metrics", "\"step\":0,\"objective\":\"grpo\",\"loss\":0.25,\"ppl\":null,\"reward.mean\":1");
    snprintf(f, sizeof f, "\"steps\":1,\"events\":%ld", b.seq);
    ev(&b, rank, 2, "rank_complete", f);
    return b.t.p;
}

static const char ARTIFACTS[] =
    "[{\"role\": \"interpreter\", \"name\": \"python3\", \"version\": \"3.11.2\", \"sha256\": \"ab\"}, "
    "{\"role\": \"environment\", \"name\": \"OMP_NUM_THREADS\", \"value\": \"1\"}, "
    "{\"role\": \"source\", \"name\": \"examples/torch_cp\", \"dirty\": false, \"commit\": \"unknown\"}]";

static const char CONFIG[] =
    "{\"objective\":\"grpo\",\"grad_mode\":\"full\",\"dtype\":\"f64\",\"cp_ranks\":2,\"group\":2,"
    "\"steps_requested\":1,\"strategy\":\"longstraw\",\"faults\":[],\"n_layers\":1,"
    "\"model\":{\"family\":\"torch-cp\",\"d_model\":8,\"rms_eps\":1e-6,\"layers\":[\"attn\"]},"
    "\"train_mode\":\"full\",\"epsilon\":0.2,\"beta\":0.0,\"temperature\":1.0,\"options\":{\"seed\":1}}";

static cJSON *build_obj(const ls_v2_fixture *o) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddItemToObject(b, "artifacts", cJSON_Parse(ARTIFACTS));
    char d[] = LS_V2_FIXTURE_BUILD_DIGEST;
    if (o->tamper_build) d[10] = d[10] == '0' ? '1' : '0';
    cJSON_AddStringToObject(b, "build_digest", d);
    return b;
}

static cJSON *profile_obj(void) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "torch-cp");
    cJSON_AddStringToObject(p, "sha256", PROFILE_SHA);
    return p;
}

static cJSON *subject(const char *name, const char *sha) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", name);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "digest"), "sha256", sha);
    return s;
}

static void write_json(const char *path, const cJSON *doc) {
    char err[256];
    cr_assert_eq(ls_json_write_file(path, doc, err, sizeof err), LS_OK, "%s", err);
}

void ls_v2_fixture_write(const char *dir, const ls_v2_fixture *o) {
    cr_assert_eq(mkdir(dir, 0777), 0, "mkdir %s", dir);
    char path[4096], rel[64], hex[2][2][LS_DIGEST_HEX_SIZE];
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/rank-%04d", dir, r);
        cr_assert_eq(mkdir(path, 0777), 0);
        char *t = ls_v2_fixture_trace(r, o);
        long events = 0;
        for (const char *p = t; *p; p++) events += *p == '\n';
        events -= 1; /* the header */
        snprintf(path, sizeof path, "%s/rank-%04d/events.jsonl", dir, r);
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        fputs(t, f);
        fclose(f);
        free(t);
        char err[256];
        cr_assert_eq(ls_digest_sha256_file_hex(path, hex[r][0], err, sizeof err), LS_OK);
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "_type", "https://in-toto.io/Statement/v1");
        snprintf(rel, sizeof rel, "rank-%04d/events.jsonl", r);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(doc, "subject"), subject(rel, hex[r][0]));
        cJSON_AddStringToObject(doc, "predicateType", "urn:longstraw:predicate:rank-receipt:v2");
        cJSON *p = cJSON_AddObjectToObject(doc, "predicate");
        cJSON_AddStringToObject(p, "run_id", "run-v2");
        cJSON_AddNumberToObject(p, "rank", r);
        cJSON_AddNumberToObject(p, "world", 2);
        cJSON_AddStringToObject(p, "host", "h");
        cJSON_AddItemToObject(p, "profile", profile_obj());
        cJSON_AddItemToObject(p, "build", build_obj(o));
        cJSON_AddItemToObject(p, "config", cJSON_Parse(CONFIG));
        cJSON_AddNumberToObject(p, "steps", 1);
        cJSON_AddNumberToObject(p, "steps_exact", 1);
        cJSON *e = cJSON_AddObjectToObject(p, "events");
        cJSON_AddStringToObject(e, "file", rel);
        cJSON_AddNumberToObject(e, "count", (double)events);
        cJSON_AddNumberToObject(e, "last_seq", (double)(events - 1));
        cJSON_AddStringToObject(p, "status", "complete");
        cJSON *ph = cJSON_CreateObject();
        cJSON_AddStringToObject(ph, "phase", "replay");
        cJSON_AddNumberToObject(ph, "count", 1);
        cJSON_AddNumberToObject(ph, "wall_ns_total", 100);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(p, "phases"), ph);
        snprintf(path, sizeof path, "%s/rank-%04d/receipt.json", dir, r);
        write_json(path, doc);
        cJSON_Delete(doc);
        cr_assert_eq(ls_digest_sha256_file_hex(path, hex[r][1], err, sizeof err), LS_OK);
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "_type", "https://in-toto.io/Statement/v1");
    cJSON *subs = cJSON_AddArrayToObject(doc, "subject");
    for (int r = 0; r < 2; r++) {
        snprintf(rel, sizeof rel, "rank-%04d/events.jsonl", r);
        cJSON_AddItemToArray(subs, subject(rel, hex[r][0]));
        snprintf(rel, sizeof rel, "rank-%04d/receipt.json", r);
        cJSON_AddItemToArray(subs, subject(rel, hex[r][1]));
    }
    cJSON_AddStringToObject(doc, "predicateType", "urn:longstraw:predicate:run-manifest:v2");
    cJSON *p = cJSON_AddObjectToObject(doc, "predicate");
    cJSON_AddStringToObject(p, "run_id", "run-v2");
    cJSON_AddNumberToObject(p, "world", 2);
    cJSON_AddItemToObject(p, "profile", profile_obj());
    cJSON_AddItemToObject(p, "build", build_obj(o));
    cJSON_AddItemToObject(p, "config", cJSON_Parse(CONFIG));
    cJSON *ranks = cJSON_AddArrayToObject(p, "ranks");
    for (int r = 0; r < 2; r++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "rank", r);
        snprintf(rel, sizeof rel, "rank-%04d/receipt.json", r);
        cJSON_AddStringToObject(x, "receipt", rel);
        cJSON_AddStringToObject(x, "status", "complete");
        cJSON_AddItemToArray(ranks, x);
    }
    cJSON_AddNumberToObject(p, "files", 4);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    write_json(path, doc);
    cJSON_Delete(doc);
}
