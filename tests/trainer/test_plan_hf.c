/* test_plan_hf.c - the Hugging Face config.json mapping (trainer/plan/plan_hf.c):
 * the four real configs of tests/data/hf/ map to the expected LongStraw keys
 * (and Qwen3.5-27B / GLM-5.2 to the shipped configs/original/ files, key by
 * key); hostile files (truncated, not JSON, too big, endless, wrong types,
 * huge numbers, missing and unknown keys, architectures the families cannot
 * express) are refused naming the file and the key; and the original work's
 * prompt-state figures come out of ls_plan_compute from both sources. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/format/json_util.h"
#include "trainer/families/mla/mla_config.h"
#include "trainer/families/hybrid/hybrid_config.h"
#include "trainer/model/config.h"
#include "trainer/plan/plan.h"
#include "trainer/plan/plan_hf.h"

#define HF(name) LS_SOURCE_DIR "/tests/data/hf/" name
#define ORIG(name) LS_SOURCE_DIR "/configs/original/" name

static cJSON *load_doc(const char *path) {
    cJSON *d = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(path, &d, err, sizeof err), LS_OK, "%s", err);
    return d;
}

/* Maps doc and expects status want with every needle in the message. */
static void expect_refused(const cJSON *doc, int moe_dense, ls_status want, const char *needle1, const char *needle2) {
    ls_hf_model m;
    char err[1024] = "";
    ls_status st = ls_plan_hf_from_json(&m, doc, "cfg.json", moe_dense, err, sizeof err);
    cr_log_info("refused: %s", err);
    cr_assert_eq(st, want, "status %d (want %d): %s", st, want, err);
    cr_assert(strstr(err, "cfg.json") != NULL, "the message names the file: %s", err);
    if (needle1) cr_assert(strstr(err, needle1) != NULL, "want '%s' in: %s", needle1, err);
    if (needle2) cr_assert(strstr(err, needle2) != NULL, "want '%s' in: %s", needle2, err);
}

static void same_config(const ls_model_config *a, const char *shipped) {
    ls_model_config b;
    char err[512];
    cr_assert_eq(ls_config_load(&b, shipped, err, sizeof err), LS_OK, "%s", err);
    cJSON *ja = ls_config_to_json(a, NULL), *jb = ls_config_to_json(&b, NULL);
    char *sa = cJSON_PrintUnformatted(ja), *sb = cJSON_PrintUnformatted(jb);
    cr_assert_str_eq(sa, sb, "the mapping differs from %s", shipped);
    free(sa);
    free(sb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

Test(plan_hf, qwen35_27b) {
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_load(&m, HF("qwen3.5-27b.json"), 0, err, sizeof err), LS_OK, "%s", err);
    const ls_model_config *c = &m.cfg;
    cr_assert_eq(c->family, &ls_family_desc_hybrid);
    cr_assert_str_eq(m.model_type, "qwen3_5_text");
    cr_assert_eq(c->n_layers, 64);
    int attn = 0;
    for (int l = 0; l < c->n_layers; ++l) attn += ls_hybrid_layer_is_attn(l);
    cr_assert_eq(attn, 16, "16 attention + 48 GDN layers");
    cr_assert_eq(ls_hybrid_keys_of(c)->attn_kv_heads, 4);
    cr_assert_eq(ls_hybrid_keys_of(c)->head_dim, 256);
    cr_assert_eq(ls_hybrid_keys_of(c)->rope_dim, 64, "partial_rotary_factor 0.25 x 256");
    cr_assert_eq(ls_hybrid_keys_of(c)->gdn_hk, 16);
    cr_assert_eq(ls_hybrid_keys_of(c)->gdn_hv, 48);
    cr_assert_eq(c->ffn_dim, 17408);
    cr_assert_eq(m.mtp_layers, 1);
    cr_assert_eq(m.index_sets, 0);
    same_config(c, ORIG("qwen3.6-27b.json"));
}

/* the outer model_type of a multimodal file names its text model's: the published pairs are accepted,
 * and so is a file without one */
Test(plan_hf, outer_model_type_pairs) {
    cJSON *d = load_doc(HF("qwen3.5-27b.json"));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(d, "model_type")->valuestring, "qwen3_5");
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_from_json(&m, d, "cfg.json", 0, err, sizeof err), LS_OK, "%s", err);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "model_type", cJSON_CreateString("qwen3_5_moe"));
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "text_config"), "model_type",
                                           cJSON_CreateString("qwen3_5_moe_text"));
    cr_assert_eq(ls_plan_hf_from_json(&m, d, "cfg.json", 0, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(m.model_type, "qwen3_5_moe_text");
    cJSON_DeleteItemFromObjectCaseSensitive(d, "model_type");
    cr_assert_eq(ls_plan_hf_from_json(&m, d, "cfg.json", 0, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(d);
}

Test(plan_hf, glm52_index_sets) {
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_load(&m, HF("glm-5.2.json"), 0, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(m.cfg.family, &ls_family_desc_mla);
    cr_assert_eq(m.index_sets, 21, "indexer_types holds 21 \"full\" layers, got %zu", m.index_sets);
    cr_assert_eq(ls_mla_keys_of(&m.cfg)->first_dense, 3);
    cr_assert_eq(ls_mla_keys_of(&m.cfg)->kv_rank + ls_mla_keys_of(&m.cfg)->d_rope, 576);
    cr_assert_eq(m.mtp_layers, 1);
    same_config(&m.cfg, ORIG("glm-5.2.json"));
    /* the same 21 from index_topk_freq 4 / index_skip_topk_offset 3 alone */
    cJSON *d = load_doc(HF("glm-5.2.json"));
    cJSON_DeleteItemFromObjectCaseSensitive(d, "indexer_types");
    cr_assert_eq(ls_plan_hf_from_json(&m, d, "cfg.json", 0, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(m.index_sets, 21);
    /* and a schedule that disagrees with them is refused */
    cJSON_Delete(d);
    d = load_doc(HF("glm-5.2.json"));
    cJSON *it = cJSON_GetObjectItemCaseSensitive(d, "indexer_types");
    cJSON_ReplaceItemInArray(it, 5, cJSON_CreateString("full"));
    expect_refused(d, 0, LS_ERR_FORMAT, "'indexer_types'", "22");
    cJSON_Delete(d);
}

Test(plan_hf, deepseek_v32_every_layer_indexed) {
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_load(&m, HF("deepseek-v3.2.json"), 0, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(m.index_sets, 61);
    cr_assert_eq(ls_mla_keys_of(&m.cfg)->n_group, 8);
    cr_assert_eq(ls_mla_keys_of(&m.cfg)->topk_group, 4);
    cr_assert_eq(ls_mla_keys_of(&m.cfg)->heads, 128);
    cr_assert_eq(ls_mla_keys_of(&m.cfg)->q_rank, 1536);
}

Test(plan_hf, qwen3_next_moe_refused_or_dense) {
    cJSON *d = load_doc(HF("qwen3-next-80b-a3b.json"));
    expect_refused(d, 0, LS_ERR_UNSUPPORTED, "'num_experts'", "--moe-as-dense");
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_from_json(&m, d, "cfg.json", 1, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(m.moe_as_dense, 1);
    cr_assert_eq(m.cfg.ffn_dim, 10 * 512 + 512, "active width");
    cr_assert_eq(ls_hybrid_keys_of(&m.cfg)->gdn_hv, 32);
    cJSON_Delete(d);
}

/* Replace key k of the (text) object with v and expect a refusal naming k. */
static void mutate(const char *file, int text, const char *k, cJSON *v, ls_status want, const char *needle2) {
    cJSON *d = load_doc(file);
    cJSON *o = text ? cJSON_GetObjectItemCaseSensitive(d, "text_config") : d;
    if (v) {
        if (cJSON_GetObjectItemCaseSensitive(o, k)) cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
        else cJSON_AddItemToObject(o, k, v);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    }
    char needle[128];
    snprintf(needle, sizeof needle, "'%s'", k);
    expect_refused(d, 0, want, needle, needle2);
    cJSON_Delete(d);
}

Test(plan_hf, hostile_keys) {
    const char *q = HF("qwen3.5-27b.json"), *g = HF("glm-5.2.json");
    /* wrong types */
    mutate(q, 1, "hidden_size", cJSON_CreateString("5120"), LS_ERR_FORMAT, "integer");
    mutate(q, 1, "num_hidden_layers", cJSON_CreateNumber(64.5), LS_ERR_FORMAT, "integer");
    mutate(g, 0, "kv_lora_rank", cJSON_CreateTrue(), LS_ERR_FORMAT, "integer");
    mutate(g, 0, "indexer_types", cJSON_CreateString("full"), LS_ERR_FORMAT, "array");
    mutate(q, 1, "layer_types", cJSON_CreateNumber(4), LS_ERR_FORMAT, "array");
    mutate(q, 1, "rms_norm_eps", cJSON_CreateString("1e-6"), LS_ERR_FORMAT, "number");
    /* huge and negative numbers */
    mutate(q, 1, "vocab_size", cJSON_CreateNumber(1e300), LS_ERR_FORMAT, "integer");
    mutate(g, 0, "hidden_size", cJSON_CreateNumber(-6144), LS_ERR_FORMAT, "integer");
    mutate(g, 0, "rms_norm_eps", cJSON_CreateNumber(1e300), LS_ERR_FORMAT, "number");
    /* in range for the file but beyond the trainer's limits: ls_config_check names its key */
    mutate(q, 1, "vocab_size", cJSON_CreateNumber(1 << 25), LS_ERR_FORMAT, "'vocab'");
    /* missing keys */
    mutate(q, 1, "head_dim", NULL, LS_ERR_FORMAT, "missing");
    mutate(g, 0, "q_lora_rank", NULL, LS_ERR_FORMAT, "missing");
    mutate(g, 0, "n_shared_experts", NULL, LS_ERR_FORMAT, "missing");
    mutate(q, 1, "model_type", NULL, LS_ERR_FORMAT, "missing");
    /* unknown keys: refused by name */
    mutate(q, 1, "linear_num_value_head", cJSON_CreateNumber(48), LS_ERR_FORMAT, "unknown");
    mutate(g, 0, "sliding_window_pattern", cJSON_CreateNumber(4), LS_ERR_FORMAT, "unknown");
    mutate(q, 0, "audio_config", cJSON_CreateObject(), LS_ERR_FORMAT, "unknown");
    /* architectures the families cannot express */
    mutate(q, 1, "full_attention_interval", cJSON_CreateNumber(3), LS_ERR_UNSUPPORTED, "every 4th");
    mutate(q, 1, "num_experts", cJSON_CreateNumber(256), LS_ERR_UNSUPPORTED, "dense");
    mutate(q, 1, "attn_output_gate", cJSON_CreateFalse(), LS_ERR_UNSUPPORTED, "gated");
    mutate(q, 0, "tie_word_embeddings", cJSON_CreateTrue(), LS_ERR_UNSUPPORTED, "untied");
    mutate(g, 0, "n_shared_experts", cJSON_CreateNumber(2), LS_ERR_UNSUPPORTED, "one shared expert");
    mutate(g, 0, "scoring_func", cJSON_CreateString("softmax"), LS_ERR_UNSUPPORTED, "sigmoid");
    mutate(g, 0, "model_type", cJSON_CreateString("llama"), LS_ERR_UNSUPPORTED, "neither");
    mutate(g, 0, "qk_head_dim", cJSON_CreateNumber(200), LS_ERR_FORMAT, "qk_nope_head_dim");
    /* a layer pattern that is not every 4th layer, named with its entry */
    cJSON *d = load_doc(q);
    cJSON *lt = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "text_config"), "layer_types");
    cJSON_ReplaceItemInArray(lt, 2, cJSON_CreateString("full_attention"));
    expect_refused(d, 0, LS_ERR_UNSUPPORTED, "'layer_types'", "entry 2");
    cJSON_Delete(d);
    /* an outer model_type that contradicts text_config's: both keys and values named */
    d = load_doc(q);
    cJSON_ReplaceItemInObjectCaseSensitive(d, "model_type", cJSON_CreateString("glm_moe_dsa"));
    expect_refused(d, 0, LS_ERR_FORMAT, "'model_type': \"glm_moe_dsa\"", "'text_config.model_type': \"qwen3_5_text\"");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "model_type", cJSON_CreateString("qwen3_5_moe"));
    expect_refused(d, 0, LS_ERR_FORMAT, "\"qwen3_5_moe\"", "\"qwen3_5_text\"");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "model_type", cJSON_CreateString("qwen3_5"));
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(d, "text_config");
    cJSON_ReplaceItemInObjectCaseSensitive(tc, "model_type", cJSON_CreateString("deepseek_v32"));
    expect_refused(d, 0, LS_ERR_FORMAT, "'model_type': \"qwen3_5\"", "'text_config.model_type': \"deepseek_v32\"");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "model_type", cJSON_CreateNumber(3));
    expect_refused(d, 0, LS_ERR_FORMAT, "'model_type'", "string");
    cJSON_Delete(d);
    /* not an object */
    cJSON *arr = cJSON_CreateArray();
    expect_refused(arr, 0, LS_ERR_FORMAT, "object", NULL);
    cJSON_Delete(arr);
}

/* GLM-5.2's published file has "index_topk_pattern": null (the per-layer schedule is in indexer_types);
 * a pattern is mapped as transformers' GlmMoeDsaConfig reads it (one "F" full / "S" shared per layer, or a
 * list like indexer_types), and must agree with the other schedules given beside it. */
static void with_pattern(cJSON *d, cJSON *pattern) {
    if (cJSON_GetObjectItemCaseSensitive(d, "index_topk_pattern"))
        cJSON_ReplaceItemInObjectCaseSensitive(d, "index_topk_pattern", pattern);
    else cJSON_AddItemToObject(d, "index_topk_pattern", pattern);
}

static size_t sets_of(const cJSON *d) {
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_from_json(&m, d, "cfg.json", 0, err, sizeof err), LS_OK, "%s", err);
    return m.index_sets;
}

Test(plan_hf, glm52_index_topk_pattern) {
    cJSON *d = load_doc(HF("glm-5.2.json"));
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(d, "index_topk_pattern");
    cr_assert(pat && cJSON_IsNull(pat), "tests/data/hf/glm-5.2.json carries the published \"index_topk_pattern\": null");
    cr_assert_eq(sets_of(d), 21);
    /* GLM-5.2's schedule as a pattern string: full on 0-2 and every 4th layer from 6 */
    char glm[79], all_f[79];
    for (int i = 0; i < 78; ++i) {
        glm[i] = i < 3 || (i + 1 - 3) % 4 == 0 ? 'F' : 'S';
        all_f[i] = 'F';
    }
    glm[78] = all_f[78] = '\0';
    with_pattern(d, cJSON_CreateString(glm));
    cr_assert_eq(sets_of(d), 21, "the pattern agreeing with indexer_types and index_topk_freq");
    /* the pattern alone (no indexer_types, no freq/offset) is the schedule */
    cJSON_DeleteItemFromObjectCaseSensitive(d, "indexer_types");
    cJSON_DeleteItemFromObjectCaseSensitive(d, "index_topk_freq");
    cJSON_DeleteItemFromObjectCaseSensitive(d, "index_skip_topk_offset");
    cr_assert_eq(sets_of(d), 21, "the pattern string alone");
    glm[77] = 'F';
    with_pattern(d, cJSON_CreateString(glm));
    cr_assert_eq(sets_of(d), 22, "one more F, one more index-key set");
    with_pattern(d, cJSON_CreateString(all_f));
    cr_assert_eq(sets_of(d), 78);
    /* a list like indexer_types */
    cJSON *lst = cJSON_CreateArray();
    for (int i = 0; i < 78; ++i) cJSON_AddItemToArray(lst, cJSON_CreateString(i % 2 ? "shared" : "full"));
    with_pattern(d, lst);
    cr_assert_eq(sets_of(d), 39, "a list pattern");
    cJSON_Delete(d);
}

Test(plan_hf, glm52_index_topk_pattern_refused) {
    char glm[79];
    for (int i = 0; i < 78; ++i) glm[i] = i < 3 || (i + 1 - 3) % 4 == 0 ? 'F' : 'S';
    glm[78] = '\0';
    const char *g = HF("glm-5.2.json");
    /* wrong types, lengths and letters */
    mutate(g, 0, "index_topk_pattern", cJSON_CreateNumber(4), LS_ERR_FORMAT, "num_hidden_layers (78)");
    mutate(g, 0, "index_topk_pattern", cJSON_CreateTrue(), LS_ERR_FORMAT, "string");
    mutate(g, 0, "index_topk_pattern", cJSON_CreateString("FFFS"), LS_ERR_FORMAT, "num_hidden_layers (78)");
    glm[10] = 'x';
    mutate(g, 0, "index_topk_pattern", cJSON_CreateString(glm), LS_ERR_FORMAT, "entry 10");
    glm[10] = 'F';
    /* a first layer that shares with nothing */
    glm[0] = 'S';
    mutate(g, 0, "index_topk_pattern", cJSON_CreateString(glm), LS_ERR_FORMAT, "entry 0");
    glm[0] = 'F';
    /* a pattern that disagrees with indexer_types, named with the entry */
    glm[5] = 'F';
    mutate(g, 0, "index_topk_pattern", cJSON_CreateString(glm), LS_ERR_FORMAT, "entry 5");
    /* without indexer_types, a pattern that disagrees with index_topk_freq / index_skip_topk_offset */
    cJSON *d = load_doc(g);
    cJSON_DeleteItemFromObjectCaseSensitive(d, "indexer_types");
    with_pattern(d, cJSON_CreateString(glm));
    expect_refused(d, 0, LS_ERR_FORMAT, "'index_topk_pattern'", "22");
    cJSON_Delete(d);
    /* a list entry that is neither full nor shared */
    cJSON *lst = cJSON_CreateArray();
    glm[5] = 'S';
    for (int i = 0; i < 78; ++i)
        cJSON_AddItemToArray(lst, cJSON_CreateString(i == 7 ? "F" : glm[i] == 'F' ? "full" : "shared"));
    mutate(g, 0, "index_topk_pattern", lst, LS_ERR_FORMAT, "entry 7");
}

static void write_file(const char *path, const char *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

Test(plan_hf, hostile_files) {
    ls_hf_model m;
    char err[1024], path[256];
    /* truncated at every 97th byte of a real file: never accepted */
    char *buf = NULL;
    size_t len = 0;
    cr_assert_eq(ls_json_read_bytes(HF("glm-5.2.json"), &buf, &len, err, sizeof err), LS_OK, "%s", err);
    snprintf(path, sizeof path, "%s/plan_hf_trunc.json", LS_BINARY_DIR);
    for (size_t cut = 0; cut < len - 2; cut += 97) {
        write_file(path, buf, cut);
        ls_status st = ls_plan_hf_load(&m, path, 0, err, sizeof err);
        cr_assert_neq(st, LS_OK, "truncated at %zu accepted", cut);
        cr_assert(strstr(err, path) != NULL, "names the file: %s", err);
    }
    free(buf);
    /* not JSON */
    write_file(path, "{\"model_type\": glm}", 19);
    cr_assert_eq(ls_plan_hf_load(&m, path, 0, err, sizeof err), LS_ERR_FORMAT, "%s", err);
    /* over the size cap */
    size_t big = LS_HF_CONFIG_MAX_BYTES + 10;
    char *pad = malloc(big);
    cr_assert(pad);
    memset(pad, ' ', big);
    pad[0] = '{';
    pad[big - 1] = '}';
    write_file(path, pad, big);
    free(pad);
    cr_assert_neq(ls_plan_hf_load(&m, path, 0, err, sizeof err), LS_OK);
    cr_log_info("big: %s", err);
    /* an endless stream and a missing file */
    cr_assert_neq(ls_plan_hf_load(&m, "/dev/zero", 0, err, sizeof err), LS_OK);
    cr_assert_eq(ls_plan_hf_load(&m, "/nonexistent/config.json", 0, err, sizeof err), LS_ERR_IO, "%s", err);
    remove(path);
}

/* ---- the original work's figures through ls_plan_compute ------------------------------ */

static void plan_of(const ls_model_config *c, size_t P, int world, size_t index_sets, ls_plan *p) {
    ls_plan_in in;
    LS_K(ls_plan_in_defaults)(&in, c);
    in.P = P;
    in.world = world;
    in.page_size = 64;
    in.compute_bytes = 2;
    in.state_bytes = 2;
    in.index_sets = index_sets;
    char err[512];
    cr_assert_eq(LS_K(ls_plan_compute)(&in, p, err, sizeof err), LS_OK, "%s", err);
}

static void qwen_figures(const ls_model_config *c) {
    ls_plan p;
    plan_of(c, 2088960, 8, 0, &p);
    cr_log_info("qwen: pages %zu, attn_kv %zu bytes", p.state.pages, p.state.attn_kv);
    cr_assert_eq(p.state.pages, 4080, "pages per rank %zu", p.state.pages);
    cr_assert_eq(p.state.attn_layers, 16);
    cr_assert_eq(p.state.attn_kv, (size_t)16 * 4080 * 2 * 64 * 4 * 256 * 2, "KV %zu", p.state.attn_kv);
    cr_assert_eq(p.state.attn_kv, (size_t)17112760320ULL);
}

static void glm_figures(const ls_model_config *c, size_t index_sets) {
    ls_plan p;
    /* P - 1 = 65,536 x 32 prompt-state positions over CP-32: 65,536 per rank */
    plan_of(c, (size_t)65536 * 32 + 1, 32, index_sets, &p);
    const size_t MiB = 1 << 20;
    cr_log_info("glm: shard %zu, latent %zu, index %zu, total %zu", p.shard, p.state.latent, p.state.index_keys,
                p.state.total);
    cr_assert_eq(p.shard, 65536);
    cr_assert_eq(p.state.latent_layers, 78);
    cr_assert_eq(p.state.index_sets, 21);
    cr_assert_eq(p.state.latent, 78 * 72 * MiB, "72 MiB per MLA layer");
    cr_assert_eq(p.state.index_keys, 21 * 16 * MiB, "16 MiB per index-key set");
    cr_assert_eq(p.state.total, (size_t)(5.8125 * 1024) * MiB, "5.8125 GiB per rank: %zu", p.state.total);
}

Test(plan_hf, paper_figures_from_hf) {
    ls_hf_model m;
    char err[1024];
    cr_assert_eq(ls_plan_hf_load(&m, HF("qwen3.5-27b.json"), 0, err, sizeof err), LS_OK, "%s", err);
    qwen_figures(&m.cfg);
    cr_assert_eq(ls_plan_hf_load(&m, HF("glm-5.2.json"), 0, err, sizeof err), LS_OK, "%s", err);
    glm_figures(&m.cfg, m.index_sets);
}

Test(plan_hf, paper_figures_from_shipped) {
    ls_model_config c;
    char err[1024];
    cr_assert_eq(ls_config_load(&c, ORIG("qwen3.6-27b.json"), err, sizeof err), LS_OK, "%s", err);
    qwen_figures(&c);
    cr_assert_eq(ls_config_load(&c, ORIG("glm-5.2.json"), err, sizeof err), LS_OK, "%s", err);
    glm_figures(&c, 21); /* index_sets is a plan fact, not a model key: configs/original/README.md */
}
