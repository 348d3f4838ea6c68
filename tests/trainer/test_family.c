/* test_family.c - the registry of model families (trainer/model/family_desc.h,
 * trainer/families/families.list): every registered family is complete and
 * consistent - its name found, its keys unique, disjoint from the shared keys
 * and inside its block, a key another family also declares the same entry
 * (one definition), its layer kinds trace layer
 * kinds, its data files present, its tiny config loaded as itself and
 * written back to the same config, its numeric table tied to it - and each
 * of these checks sees a descriptor broken on purpose.  The loader refuses
 * another family's key naming that family, and a family this build lacks
 * naming the families it has. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipts/format/coverage.h"
#include "receipts/format/json_util.h"
#include "receipts/format/trace_event.h"
#include "trainer/families/families.h"
#include "trainer/model/config.h"
#include "trainer/model/family_desc.h"

#define K(f) LS_K(f)

static const char *const SHARED[] = {"family", "vocab", "d_model", "n_layers", "ffn_dim", "rms_eps", "rope_theta"};

/* The first problem of descriptor f, or NULL. */
static const char *problem(const ls_family_desc *f, char *buf, size_t len) {
    if (!f->name || !*f->name) return "no name";
    if (!f->check || !f->counts || !f->layer_kind || !f->layer_kinds || !f->flop_terms)
        return snprintf(buf, len, "%s: a hook is missing", f->name), buf;
    if (f->keys_bytes > LS_FAMILY_KEYS_BYTES) return snprintf(buf, len, "%s: keys_bytes too big", f->name), buf;
    if ((f->routed_experts == NULL) != (f->ep_others == NULL))
        return snprintf(buf, len, "%s: routed_experts without ep_others", f->name), buf;
    for (size_t i = 0; i < f->n_keys; i++) {
        const ls_family_key *k = &f->keys[i];
        size_t sz = k->type == LS_FKEY_INT ? sizeof(int) : sizeof(double);
        if (k->off + sz > f->keys_bytes) return snprintf(buf, len, "%s: key '%s' outside the block", f->name, k->key), buf;
        if (k->off % sz) return snprintf(buf, len, "%s: key '%s' misaligned", f->name, k->key), buf;
        for (size_t s = 0; s < sizeof SHARED / sizeof *SHARED; s++)
            if (!strcmp(SHARED[s], k->key)) return snprintf(buf, len, "%s: key '%s' is a shared key", f->name, k->key), buf;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(f->keys[j].key, k->key)) return snprintf(buf, len, "%s: key '%s' twice", f->name, k->key), buf;
        /* a key two families declare is one definition (the same entry: dense's attention keys are the
           hybrid's), never two meanings of one name */
        for (size_t o = 0; o < ls_family_count(); o++) {
            const ls_family_desc *g = ls_family_at(o);
            if (!strcmp(g->name, f->name)) continue;
            for (size_t j = 0; j < g->n_keys; j++)
                if (!strcmp(g->keys[j].key, k->key) && &g->keys[j] != k)
                    return snprintf(buf, len, "%s: key '%s' is also %s's", f->name, k->key, g->name), buf;
        }
        if (!(k->lo <= k->hi)) return snprintf(buf, len, "%s: key '%s' has an empty range", f->name, k->key), buf;
    }
    for (const char *const *p = f->layer_kinds; *p; p++) {
        int found = 0;
        for (int t = 0; t < LS_TRACE_LAYER_KIND_COUNT; t++)
            found |= !strcmp(ls_trace_layer_kind_name((ls_trace_layer_kind)t), *p);
        if (!found) return snprintf(buf, len, "%s: layer kind '%s' is not a trace layer kind", f->name, *p), buf;
    }
    const char *files[] = {f->tiny_config, f->reference, f->profile, f->parity};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (!files[i]) continue;
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", LS_SOURCE_DIR, files[i]);
        if (stat(path, &st) != 0) return snprintf(buf, len, "%s: data file %s missing", f->name, files[i]), buf;
    }
    return NULL;
}

Test(family, every_registered_family_is_complete) {
    cr_assert_geq(ls_family_count(), 2);
    char buf[512];
    for (size_t i = 0; i < ls_family_count(); i++) {
        const ls_family_desc *f = ls_family_at(i);
        cr_expect_eq(ls_family_find(f->name), f, "%s found by name", f->name);
        const char *p = problem(f, buf, sizeof buf);
        cr_expect_null(p, "%s", p ? p : "");
        char err[512] = "";
        cr_expect_eq(K(ls_family_ops_of)(f, err, sizeof err)->desc, f, "%s: its numeric table", f->name);
    }
    cr_expect_null(ls_family_at(ls_family_count()));
    cr_expect_null(ls_family_find("no-such-family"));
}

Test(family, each_check_sees_a_broken_descriptor) {
    const ls_family_desc *h = ls_family_find("hybrid");
    cr_assert_not_null(h);
    char buf[512];
    ls_family_key keys[2];
    ls_family_desc d = *h;
    d.name = "";
    cr_expect_not_null(problem(&d, buf, sizeof buf), "no name");
    d = *h;
    d.flop_terms = NULL;
    cr_expect_not_null(problem(&d, buf, sizeof buf), "a missing hook");
    d = *h;
    keys[0] = h->keys[0];
    keys[1] = h->keys[0];
    d.keys = keys;
    d.n_keys = 2;
    cr_expect(problem(&d, buf, sizeof buf) && strstr(buf, "twice"), "a key twice: %s", buf);
    keys[1].key = "vocab";
    cr_expect(problem(&d, buf, sizeof buf) && strstr(buf, "shared"), "a shared key: %s", buf);
    keys[1] = h->keys[0];
    keys[1].key = "heads"; /* mla's */
    cr_expect(problem(&d, buf, sizeof buf) && strstr(buf, "also"), "another family's key: %s", buf);
    keys[1].key = "extra";
    keys[1].off = d.keys_bytes;
    cr_expect(problem(&d, buf, sizeof buf) && strstr(buf, "outside"), "a key outside the block: %s", buf);
    d = *h;
    static const char *const bad_kinds[] = {"gdn", "conv", NULL};
    d.layer_kinds = bad_kinds;
    cr_expect(problem(&d, buf, sizeof buf) && strstr(buf, "'conv'"), "an unknown layer kind: %s", buf);
    d = *h;
    d.profile = "profiles/no-such-profile.json";
    cr_expect(problem(&d, buf, sizeof buf) && strstr(buf, "missing"), "a missing data file: %s", buf);
}

Test(family, tiny_configs_load_as_their_family_and_round_trip) {
    for (size_t i = 0; i < ls_family_count(); i++) {
        const ls_family_desc *f = ls_family_at(i);
        if (!f->tiny_config) continue;
        char path[1024], err[512] = "";
        snprintf(path, sizeof path, "%s/%s", LS_SOURCE_DIR, f->tiny_config);
        ls_model_config c, back;
        cr_assert_eq(ls_config_load(&c, path, err, sizeof err), LS_OK, "%s", err);
        cr_expect_eq(c.family, f, "%s loads as %s", f->tiny_config, f->name);
        for (int l = 0; l < c.n_layers; l++) {
            const char *k = ls_config_layer_kind(&c, l);
            int listed = 0;
            for (const char *const *p = f->layer_kinds; *p; p++) listed |= !strcmp(*p, k);
            cr_expect(listed, "%s: layer %d kind '%s' is among its layer_kinds", f->name, l, k);
        }
        cJSON *j = ls_config_to_json(&c, NULL);
        cr_assert_eq(ls_config_from_json(&back, j, "round trip", err, sizeof err), LS_OK, "%s", err);
        cr_expect_eq(memcmp(&c, &back, sizeof c), 0, "%s: the config written and read back is the same", f->name);
        for (size_t k = 0; k < f->n_keys; k++) {
            double v = -1;
            cr_expect_eq(ls_config_key_get(&c, f->keys[k].key, &v), LS_OK);
            cr_expect_eq(v, cJSON_GetObjectItemCaseSensitive(j, f->keys[k].key)->valuedouble, "%s", f->keys[k].key);
        }
        cJSON_Delete(j);
    }
}

Test(family, another_familys_key_and_an_unknown_family_are_refused_by_name) {
    char err[512] = "";
    ls_model_config c;
    cJSON *j = cJSON_Parse("{\"family\":\"hybrid\",\"vocab\":8,\"d_model\":8,\"n_layers\":1,\"ffn_dim\":8,"
                           "\"rms_eps\":1e-6,\"rope_theta\":10000,\"heads\":2}");
    cr_assert_eq(ls_config_from_json(&c, j, "x.json", err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "x.json: key 'heads': belongs to the mla family"), "%s", err);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"family\":\"rwkv\"}");
    cr_assert_eq(ls_config_from_json(&c, j, "y.json", err, sizeof err), LS_ERR_FORMAT);
    cr_expect(strstr(err, "y.json: key 'family': 'rwkv'") && strstr(err, "'hybrid'") && strstr(err, "'mla'"), "%s",
              err);
    cJSON_Delete(j);
}

Test(family, the_registry_json_lists_every_family) {
    cJSON *r = ls_family_registry_json();
    cr_assert_not_null(r);
    const cJSON *fams = cJSON_GetObjectItemCaseSensitive(r, "families");
    cr_assert_eq((size_t)cJSON_GetArraySize(fams), ls_family_count());
    size_t i = 0;
    for (const cJSON *f = fams->child; f; f = f->next, i++) {
        const ls_family_desc *d = ls_family_at(i);
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, d->name);
        cr_expect_eq((size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(f, "keys")), d->n_keys);
    }
    cJSON_Delete(r);
}

/* receipts' coverage lists no family's keys: it reads the model keys from the registry file the build's
 * trainer wrote (LS_FAMILIES_JSON).  A family's key there is a model key; a key no family declares is not;
 * and without a readable registry there is no model and the audit says why. */
static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(family, coverage_takes_its_model_keys_from_the_registry) {
    char path[] = "/tmp/ls-family-reg-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    write_file(path, "{\"shared_keys\": [{\"key\": \"family\"}, {\"key\": \"vocab\"}],"
                     " \"families\": [{\"name\": \"third\", \"keys\": [{\"key\": \"zz_width\"}]}]}");
    setenv("LS_FAMILIES_JSON", path, 1);
    cJSON *cfg = cJSON_Parse("{\"family\": \"third\", \"vocab\": 8, \"zz_width\": 3, \"epsilon\": 0.2, \"gdn_hk\": 2}");
    cJSON *m = ls_coverage_model(cfg);
    cr_assert_not_null(m);
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(m, "zz_width"), "the third family's key is a model key");
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(m, "epsilon"), "an objective key is not");
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(m, "gdn_hk"), "nor a key this registry's families lack");
    cr_expect_eq(cJSON_GetArraySize(m), 3);
    cJSON_Delete(m);
    cJSON_Delete(cfg);
    unlink(path);
}

Test(family, coverage_without_a_registry_has_no_model) {
    setenv("LS_FAMILIES_JSON", "/nonexistent/families.json", 1);
    cJSON *cfg = cJSON_Parse("{\"family\": \"hybrid\", \"vocab\": 8}");
    cr_expect_null(ls_coverage_model(cfg));
    const char *why = NULL;
    cr_expect_null(ls_coverage_model_keys(&why));
    cr_expect(why && strstr(why, "/nonexistent/families.json"), "%s", why ? why : "(null)");
    cJSON_Delete(cfg);
}

Test(family, the_build_registry_file_is_the_trainers) {
    /* the file receipts read is what the registry says now (regenerated with longstraw-train) */
    cJSON *r = ls_family_registry_json(), *f = NULL;
    char err[512];
    cr_assert_eq(ls_json_read_file(LS_BINARY_DIR "/generated/families.json", &f, err, sizeof err), LS_OK, "%s", err);
    cr_expect(cJSON_Compare(r, f, true), "generated/families.json differs from the registry");
    const char *const *keys = ls_coverage_model_keys(NULL);
    cr_assert_not_null(keys);
    size_t n = 0;
    while (keys[n]) n++;
    size_t want = 7; /* the shared keys, then each family key name once (dense's are the hybrid's entries) */
    for (size_t i = 0; i < ls_family_count(); i++)
        for (size_t k = 0; k < ls_family_at(i)->n_keys; k++) {
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++)
                for (size_t m = 0; m < ls_family_at(j)->n_keys; m++)
                    seen |= !strcmp(ls_family_at(j)->keys[m].key, ls_family_at(i)->keys[k].key);
            want += !seen;
        }
    cr_expect_eq(n, want, "every shared and family key once");
    cJSON_Delete(r);
    cJSON_Delete(f);
}
