/* test_audit_describe.c - the canonical description (audit/model/describe.h):
 * every field of every schema a source is written in is either a fact of
 * the description or says why it has no second source; the fold names a
 * disagreement with its path and both sources; the tables keyed by rank,
 * step and group are compared member by member, everything else whole,
 * and a trace's collectives against its receipt's as a subset. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "audit/model/describe.h"

/* ---- the schemas' fields against the table -------------------------------- */

typedef struct {
    char **v;
    size_t n, cap;
} strs;

static void add(strs *s, const char *p) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], p) == 0) return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = strdup(p);
}

static cJSON *load(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(b);
    free(b);
    cr_assert_not_null(j, "%s: not JSON", path);
    return j;
}

/* Every property path of schema node s under path (arrays' items as "*",
 * additionalProperties as "~"), through local $refs, at most depth 10. */
static void walk(const cJSON *s, const cJSON *defs, const char *path, strs *out, int depth) {
    if (!cJSON_IsObject(s) || depth > 10) return;
    const cJSON *ref = cJSON_GetObjectItem(s, "$ref");
    if (cJSON_IsString(ref)) {
        const char *name = strrchr(ref->valuestring, '/');
        if (name && strncmp(ref->valuestring, "#/", 2) == 0)
            walk(cJSON_GetObjectItem(defs, name + 1), defs, path, out, depth + 1);
        return;
    }
    static const char *const alt[] = {"allOf", "anyOf", "oneOf", "then", "else"};
    for (size_t k = 0; k < sizeof alt / sizeof alt[0]; k++) {
        const cJSON *a = cJSON_GetObjectItem(s, alt[k]), *x;
        if (cJSON_IsArray(a)) cJSON_ArrayForEach(x, a) walk(x, defs, path, out, depth + 1);
        else if (cJSON_IsObject(a)) walk(a, defs, path, out, depth + 1);
    }
    const cJSON *props = cJSON_GetObjectItem(s, "properties"), *p;
    cJSON_ArrayForEach(p, props) {
        char np[512];
        snprintf(np, sizeof np, "%s/%s", path, p->string);
        add(out, np);
        walk(p, defs, np, out, depth + 1);
    }
    const cJSON *items = cJSON_GetObjectItem(s, "items"), *ap = cJSON_GetObjectItem(s, "additionalProperties");
    char np[512];
    if (cJSON_IsObject(items)) {
        snprintf(np, sizeof np, "%s/*", path);
        walk(items, defs, np, out, depth + 1);
    }
    if (cJSON_IsObject(ap)) {
        snprintf(np, sizeof np, "%s/~", path);
        walk(ap, defs, np, out, depth + 1);
    }
}

/* The table entry of schema that covers field: its own, or an entry above it. */
static const ls_audit_desc_field *covering(const char *schema, const char *field) {
    const ls_audit_desc_field *best = NULL;
    for (size_t i = 0; i < ls_audit_desc_n_fields; i++) {
        const ls_audit_desc_field *e = &ls_audit_desc_fields[i];
        size_t n = strlen(e->field);
        if (strcmp(e->schema, schema) != 0 || strncmp(field, e->field, n) != 0) continue;
        if (field[n] != 0 && field[n] != '/') continue;
        if (best == NULL || n > strlen(best->field)) best = e;
    }
    return best;
}

Test(describe, every_schema_field_is_a_fact_or_says_why_not) {
    static const char *const schemas[] = {"receipt", "receipt-v2", "manifest", "manifest-v2", "event-header",
                                          "event-header-v2", "event-rank_complete"};
    size_t missing = 0, stale = 0;
    for (size_t k = 0; k < sizeof schemas / sizeof schemas[0]; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/schemas/%s.schema.json", LS_SOURCE_DIR, schemas[k]);
        cJSON *s = load(path);
        const cJSON *defs = cJSON_GetObjectItem(s, "$defs");
        strs f = {0};
        walk(s, defs ? defs : cJSON_GetObjectItem(s, "definitions"), "", &f, 0);
        cr_assert_gt(f.n, 5, "%s: no fields walked", schemas[k]);
        for (size_t i = 0; i < f.n; i++) {
            const ls_audit_desc_field *e = covering(schemas[k], f.v[i]);
            /* a container entry (SHAPE) covers itself only, never what it holds */
            bool shape = e && e->fact == NULL && strstr(e->why, "container") && strcmp(e->field, f.v[i]) != 0;
            if (e == NULL || shape) {
                cr_log_error("%s %s: neither a fact of the description nor a reason it has no second source",
                             schemas[k], f.v[i]);
                missing++;
            }
            free(f.v[i]);
        }
        /* every entry names a field the schema has */
        for (size_t i = 0; i < ls_audit_desc_n_fields; i++) {
            const ls_audit_desc_field *e = &ls_audit_desc_fields[i];
            if (strcmp(e->schema, schemas[k]) != 0) continue;
            cr_expect((e->fact != NULL) != (e->why != NULL), "%s %s: a fact or a reason, not both", e->schema,
                      e->field);
            bool found = false;
            strs g = {0};
            walk(s, defs ? defs : cJSON_GetObjectItem(s, "definitions"), "", &g, 0);
            for (size_t j = 0; j < g.n; j++) {
                found |= strcmp(g.v[j], e->field) == 0;
                free(g.v[j]);
            }
            free(g.v);
            if (!found) {
                cr_log_error("%s %s: the table names a field the schema does not have", e->schema, e->field);
                stale++;
            }
        }
        free(f.v);
        cJSON_Delete(s);
    }
    cr_expect_eq(missing, 0, "%zu schema field(s) the description does not account for", missing);
    cr_expect_eq(stale, 0, "%zu table entries name no field", stale);
}

/* ---- the fold ----------------------------------------------------------------- */

typedef struct {
    char paths[16][256];
    char firsts[16][96], others[16][96];
    size_t n;
} seen;

static void on_dis(void *user, const char *path, const char *first, const cJSON *va, const char *other,
                   const cJSON *vb) {
    (void)va;
    (void)vb;
    seen *s = user;
    if (s->n < 16) {
        snprintf(s->paths[s->n], 256, "%s", path);
        snprintf(s->firsts[s->n], 96, "%s", first ? first : "");
        snprintf(s->others[s->n], 96, "%s", other);
    }
    s->n++;
}

static void add_src(ls_audit_desc_list *l, const char *name, const char *json) {
    l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
    ls_audit_desc *e = &l->v[l->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->rank = -1;
    e->d = cJSON_Parse(json);
    cr_assert_not_null(e->d, "%s", json);
}

static seen fold(ls_audit_desc_list *l, uint64_t *compared) {
    seen s = {0};
    cJSON *canon = NULL, *where = NULL;
    cr_assert_eq(ls_audit_desc_merge(l, &canon, &where, on_dis, &s, compared), LS_OK);
    cJSON_Delete(canon);
    cJSON_Delete(where);
    ls_audit_desc_list_free(l);
    return s;
}

Test(describe, a_disagreement_names_the_fact_and_both_sources) {
    ls_audit_desc_list l = {0};
    add_src(&l, "A", "{\"world\":2,\"ranks\":{\"1\":{\"phases\":{\"capture\":2,\"replay\":2}}},\"config\":{\"x\":1}}");
    add_src(&l, "B", "{\"world\":2,\"ranks\":{\"1\":{\"phases\":{\"capture\":2,\"replay\":3}}}}");
    add_src(&l, "C", "{\"config\":{\"x\":1,\"y\":2},\"ranks\":{\"0\":{\"host\":\"h\"}}}");
    uint64_t n = 0;
    seen s = fold(&l, &n);
    cr_assert_eq(s.n, 2, "%zu disagreements", s.n);
    cr_expect_str_eq(s.paths[0], "ranks.1.phases.replay"); /* a phase table is compared whole, named by key */
    cr_expect_str_eq(s.firsts[0], "A");
    cr_expect_str_eq(s.others[0], "B");
    cr_expect_str_eq(s.paths[1], "config.y"); /* a key one configuration lacks is a disagreement */
    cr_expect_eq(n, 3, "facts stated twice: world, ranks.1.phases, config (%llu)", (unsigned long long)n);
}

Test(describe, facts_stated_once_are_not_compared_and_tables_are_keyed) {
    ls_audit_desc_list l = {0};
    add_src(&l, "A", "{\"ranks\":{\"0\":{\"host\":\"a\"}},\"steps\":{\"3\":{\"objective\":\"grpo\"}}}");
    add_src(&l, "B", "{\"ranks\":{\"1\":{\"host\":\"b\"}},\"steps\":{\"4\":{\"objective\":\"sft\"}}}");
    uint64_t n = 0;
    seen s = fold(&l, &n);
    cr_expect_eq(s.n, 0);
    cr_expect_eq(n, 0);
    add_src(&l, "A", "{\"steps\":{\"3\":{\"objective\":\"grpo\"}}}");
    add_src(&l, "B", "{\"steps\":{\"3\":{\"objective\":\"sft\"}}}");
    s = fold(&l, &n);
    cr_assert_eq(s.n, 1);
    cr_expect_str_eq(s.paths[0], "steps.3.objective");
}

Test(describe, a_traces_collectives_are_a_subset_of_its_receipts) {
    ls_audit_desc_list l = {0};
    add_src(&l, "receipt", "{\"ranks\":{\"0\":{\"calls\":{\"run_id\":1,\"lse_max\":4}}}}");
    add_src(&l, "trace", "{\"ranks\":{\"0\":{\"calls\":{\"lse_max\":4}}}}");
    seen s = fold(&l, NULL);
    cr_expect_eq(s.n, 0, "a setup purpose the trace never saw is the receipt's alone");
    add_src(&l, "receipt", "{\"ranks\":{\"0\":{\"calls\":{\"run_id\":1,\"lse_max\":4}}}}");
    add_src(&l, "trace", "{\"ranks\":{\"0\":{\"calls\":{\"lse_max\":5}}}}");
    s = fold(&l, NULL);
    cr_expect_eq(s.n, 1, "a traced purpose counted otherwise");
    add_src(&l, "receipt", "{\"ranks\":{\"0\":{\"calls\":{\"lse_max\":4}}}}");
    add_src(&l, "trace", "{\"ranks\":{\"0\":{\"calls\":{\"lse_max\":4,\"dq_sum\":1}}}}");
    s = fold(&l, NULL);
    cr_expect_eq(s.n, 1, "a traced purpose the receipt lacks");
}

/* The builders on real documents: a receipt's two statements of its totals,
 * a header's groups, a configuration's steps. */
Test(describe, builders_state_what_each_source_says) {
    ls_audit_desc_list l = {0};
    cJSON *rc = cJSON_Parse(
        "{\"subject\":[{\"name\":\"rank-0000/events.jsonl.zst\",\"digest\":{\"sha256\":\"ab\"}}],"
        "\"predicate\":{\"run_id\":\"r\",\"rank\":0,\"world\":2,\"host\":\"h\",\"steps\":2,"
        "\"steps_by_objective\":{\"grpo\":2,\"sft\":0},\"phases\":[{\"phase\":\"capture\",\"count\":2,"
        "\"wall_ns_total\":5}],\"events\":{\"file\":\"rank-0000/events.jsonl.zst\",\"count\":9,\"last_seq\":8},"
        "\"rank_state\":{\"world\":2,\"prompt_positions\":[0,31],\"communication\":{\"calls\":3,\"bytes_sent\":8,"
        "\"by_purpose\":[{\"purpose\":\"a\",\"calls\":1,\"bytes_sent\":8},{\"purpose\":\"b\",\"calls\":1,"
        "\"bytes_sent\":0}]}}}}");
    cr_assert_eq(ls_audit_describe_receipt(&l, rc, "rank-0000/receipt.json", 0), LS_OK);
    cr_assert_eq(l.n, 3, "the receipt, its rank_state, its summed by_purpose");
    char *t = cJSON_PrintUnformatted(l.v[0].d);
    cr_expect(strstr(t, "\"steps_by_objective\":{\"grpo\":2}") != NULL, "zero counts dropped: %s", t);
    cr_expect(strstr(t, "\"digests\":{\"rank-0000/events.jsonl.zst\":\"ab\"}") != NULL, "%s", t);
    free(t);
    t = cJSON_PrintUnformatted(l.v[2].d);
    cr_expect(strstr(t, "\"calls_total\":2") != NULL, "the by_purpose sum (2), not the stated total (3): %s", t);
    free(t);
    seen s = fold(&l, NULL);
    cr_expect_eq(s.n, 1, "calls_total: 3 stated, 2 summed");
    cJSON_Delete(rc);
    cJSON *cfg = cJSON_Parse("{\"cp_ranks\":2,\"objective\":\"grpo\",\"sft_steps\":1,\"first_step\":4,"
                             "\"steps_requested\":2}");
    cr_assert_eq(ls_audit_describe_config(&l, cfg, "config", 1000), LS_OK);
    t = cJSON_PrintUnformatted(l.v[0].d);
    cr_expect_str_eq(t, "{\"world\":2,\"groups\":{\"cp\":{\"members\":[0,1]}},\"steps\":{\"4\":{\"objective\":\"sft\"},"
                        "\"5\":{\"objective\":\"grpo\"}}}");
    free(t);
    ls_audit_desc_list_free(&l);
    cJSON_Delete(cfg);
}
