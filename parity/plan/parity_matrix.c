/* parity_matrix.c - the families longstraw-parity knows and the reduced-size
 * configurations it runs for each (parity.h).  Nothing here names a family:
 * the trainer's registry (`longstraw-train --families`, trainer/model/
 * family_desc.h) lists the families with each one's tiny config, reference
 * script, routed experts, CP faults and the path of its parity facts
 * (trainer/families/<name>/parity.json: the score and gradient controls, the
 * discrete decisions' config keys and the matrix).  Parity links no trainer
 * code, so it reads both as data.  A family's matrix covers captured lengths
 * that split unevenly over 2 and 4 ranks and evenly over 2, shards shorter
 * than a page and spanning several pages and capture chunks (chunks that cut
 * pages), group sizes 2 and 3 with unequal responses, and both trainable
 * sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/plan/parity.h"
#include "receipts/format/json_util.h"

#ifndef LS_PARITY_SOURCE_DIR
#define LS_PARITY_SOURCE_DIR "."
#endif
#ifndef LS_PARITY_TRAINER
#define LS_PARITY_TRAINER "longstraw-train"
#endif

#define MAX_FAMILIES 16
#define MAX_CONFIGS 16

typedef struct {
    ls_parity_family f;
    ls_parity_config configs[MAX_CONFIGS];
} family_slot;

static struct {
    int tried;            /* a load was attempted (its verdict stays) */
    const char *trainer;  /* the trainer whose registry is read (NULL: LS_PARITY_TRAINER) */
    family_slot fam[MAX_FAMILIES];
    size_t n;
    cJSON *keep[2 * MAX_FAMILIES + 1]; /* the documents the strings point into */
    size_t n_keep;
    char names[512];
    char err[2 * LS_PARITY_PATH + 512];
} g;

void ls_parity_families_trainer(const char *trainer) {
    if (!g.tried) g.trainer = trainer;
}

const char *ls_parity_families_error(void) { return g.err; }

#define FAIL(...)                                      \
    do {                                               \
        snprintf(g.err, sizeof g.err, __VA_ARGS__);    \
        return LS_ERR_FORMAT;                          \
    } while (0)

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int int_of(const cJSON *o, const char *k, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi || v->valuedouble != (int)v->valuedouble)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

/* One entry of a family's "configs". */
static ls_status parse_config(const cJSON *e, ls_parity_config *c, const char *path, size_t i) {
    int G = 0, v = 0;
    c->name = str_of(e, "name");
    c->what = str_of(e, "what");
    c->train_mode = str_of(e, "train_mode");
    if (!c->name || !c->what || !c->train_mode || (strcmp(c->train_mode, "lora") && strcmp(c->train_mode, "full")))
        FAIL("%s: configs[%zu]: 'name', 'what' and 'train_mode' (lora or full) are required strings", path, i);
    if (int_of(e, "prompt_len", 3, 1 << 20, &c->prompt_len) || int_of(e, "group", 2, LS_PARITY_MAX_G, &G) ||
        int_of(e, "page_size", 1, 1 << 20, &c->page_size) || int_of(e, "capture_chunk", 1, 1 << 20, &c->capture_chunk) ||
        int_of(e, "token_seed", 0, 1 << 30, &v))
        FAIL("%s: configs[%zu] '%s': prompt_len, group (2..%d), page_size, capture_chunk and token_seed must be "
             "integers in range", path, i, c->name, LS_PARITY_MAX_G);
    c->group = G;
    c->token_seed = (uint32_t)v;
    const cJSON *lens = cJSON_GetObjectItemCaseSensitive(e, "response_lens");
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(e, "rewards");
    if (cJSON_GetArraySize(lens) != G || cJSON_GetArraySize(rw) != G)
        FAIL("%s: configs[%zu] '%s': response_lens and rewards must have 'group' (%d) entries", path, i, c->name, G);
    for (int m = 0; m < G; m++) {
        const cJSON *l = cJSON_GetArrayItem(lens, m), *r = cJSON_GetArrayItem(rw, m);
        if (!cJSON_IsNumber(l) || l->valuedouble < 1 || l->valuedouble > 4096 || !cJSON_IsNumber(r))
            FAIL("%s: configs[%zu] '%s': response_lens[%d] / rewards[%d] is not a length in 1..4096 / a number", path,
                 i, c->name, m, m);
        c->response_lens[m] = (int)l->valuedouble;
        c->rewards[m] = r->valuedouble;
    }
    return LS_OK;
}

/* The parity facts at path (relative to the source tree) into s, for the registry entry reg. */
static ls_status load_facts(family_slot *s, const cJSON *reg, const char *rel) {
    char path[LS_PARITY_PATH];
    snprintf(path, sizeof path, "%s/%s", LS_PARITY_SOURCE_DIR, rel);
    cJSON *doc = NULL;
    char why[512];
    if (ls_json_read_file_capped(path, 1u << 20, &doc, why, sizeof why) != LS_OK) FAIL("%s", why);
    g.keep[g.n_keep++] = doc;
    ls_parity_family *f = &s->f;
    const char *name = str_of(reg, "name");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(reg, "files");
    if (!name || !str_of(doc, "family") || strcmp(name, str_of(doc, "family")) != 0)
        FAIL("%s: key 'family': not the registry's family '%s'", path, name ? name : "?");
    f->name = name;
    f->model_config = str_of(files, "tiny_config");
    f->reference = str_of(files, "reference");
    if (!f->model_config || !f->reference)
        FAIL("the registry's family '%s' names no tiny_config or reference file (parity needs both)", name);
    f->routed_experts = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reg, "routed_experts"));
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(reg, "cp_faults");
    for (const cJSON *x = faults ? faults->child : NULL; x; x = x->next)
        if (cJSON_IsString(x) && strcmp(x->valuestring, "cp-stale-start") == 0) f->carried_state = true;
    f->score_fault = str_of(doc, "score_fault");
    if (!f->score_fault) FAIL("%s: key 'score_fault': missing or not a string", path);
    const cJSON *gf = cJSON_GetObjectItemCaseSensitive(doc, "grad_faults");
    int ngf = cJSON_GetArraySize(gf);
    if (!cJSON_IsArray(gf) || ngf < 1 || ngf > 2) FAIL("%s: key 'grad_faults': an array of 1 or 2 fault names", path);
    for (int i = 0; i < ngf; i++) {
        f->grad_faults[i] = cJSON_IsString(cJSON_GetArrayItem(gf, i)) ? cJSON_GetArrayItem(gf, i)->valuestring : NULL;
        if (!f->grad_faults[i]) FAIL("%s: key 'grad_faults': entry %d is not a string", path, i);
    }
    f->n_grad_faults = (size_t)ngf;
    const cJSON *dk = cJSON_GetObjectItemCaseSensitive(doc, "decisions");
    if (dk && !cJSON_IsNull(dk)) {
        const char **slot[] = {&f->dkeys.topk, &f->dkeys.experts, &f->dkeys.groups, &f->dkeys.kept_groups,
                               &f->dkeys.per_token, &f->dkeys.dense_layers};
        const char *names[] = {"topk", "experts", "groups", "kept_groups", "per_token", "dense_layers"};
        for (size_t i = 0; i < sizeof slot / sizeof *slot; i++)
            if (!(*slot[i] = str_of(dk, names[i])))
                FAIL("%s: key 'decisions.%s': the model config key holding it (a string)", path, names[i]);
        f->decisions = true;
    }
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(doc, "configs");
    int n = cJSON_GetArraySize(cs);
    if (!cJSON_IsArray(cs) || n < 1 || n > MAX_CONFIGS) FAIL("%s: key 'configs': an array of 1..%d entries", path, MAX_CONFIGS);
    for (int i = 0; i < n; i++) {
        ls_status st = parse_config(cJSON_GetArrayItem(cs, i), &s->configs[i], path, (size_t)i);
        if (st != LS_OK) return st;
    }
    f->configs = s->configs;
    f->n_configs = (size_t)n;
    return LS_OK;
}

static void release(void) {
    for (size_t i = 0; i < g.n_keep; i++) cJSON_Delete(g.keep[i]);
    g.n_keep = 0;
}

/* The registry of the trainer (its --families) and each family's parity facts. */
static ls_status load(void) {
    g.tried = 1;
    const char *trainer = g.trainer ? g.trainer : LS_PARITY_TRAINER;
    char cmd[LS_PARITY_PATH + 64];
    snprintf(cmd, sizeof cmd, "'%s' --families 2>/dev/null", trainer);
    FILE *p = strchr(trainer, '\'') ? NULL : popen(cmd, "r");
    if (!p) FAIL("cannot run %s --families (the registry of model families)", trainer);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - 1 - len, p)) > 0;) {
        len += got;
        if (len + 1 == cap) {
            char *nb = cap < (1u << 24) ? realloc(buf, cap * 2) : NULL;
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
    }
    int rc = pclose(p);
    if (!buf) FAIL("%s --families: out of memory", trainer);
    buf[len] = '\0';
    cJSON *reg = rc == 0 ? cJSON_Parse(buf) : NULL;
    free(buf);
    if (!reg) FAIL("%s --families: no registry of model families (exit %d, or not JSON)", trainer, rc);
    g.keep[g.n_keep++] = reg;
    const cJSON *fams = cJSON_GetObjectItemCaseSensitive(reg, "families");
    size_t at = 0;
    for (const cJSON *f = fams ? fams->child : NULL; f; f = f->next) {
        const char *rel = str_of(cJSON_GetObjectItemCaseSensitive(f, "files"), "parity");
        if (!rel) continue; /* a family without parity facts: not longstraw-parity's */
        if (g.n == MAX_FAMILIES) FAIL("%s --families: more than %d families", trainer, MAX_FAMILIES);
        ls_status st = load_facts(&g.fam[g.n], f, rel);
        if (st != LS_OK) return st;
        int w = snprintf(g.names + at, sizeof g.names - at, "%s%s", g.n ? ", " : "", g.fam[g.n].f.name);
        if (w > 0 && (size_t)w < sizeof g.names - at) at += (size_t)w;
        g.n++;
    }
    if (g.n == 0) FAIL("%s --families: no family has parity facts", trainer);
    atexit(release);
    return LS_OK;
}

const ls_parity_family *ls_parity_family_of(const char *name) {
    if (!g.tried && load() != LS_OK) g.n = 0;
    for (size_t i = 0; name != NULL && i < g.n; i++)
        if (strcmp(g.fam[i].f.name, name) == 0) return &g.fam[i].f;
    return NULL;
}

const char *ls_parity_family_names(void) {
    if (!g.tried && load() != LS_OK) g.n = 0;
    return g.n ? g.names : "none: see the error above";
}

const char *ls_parity_family_at(size_t i) {
    if (!g.tried && load() != LS_OK) g.n = 0;
    return i < g.n ? g.fam[i].f.name : NULL;
}

const char *ls_parity_fault_at(size_t i) {
    /* every family's score fault and gradient faults, then the EP control's, a name seen before skipped */
    if (!g.tried && load() != LS_OK) g.n = 0;
    const char *all[MAX_FAMILIES * 3 + 1];
    size_t n = 0;
    for (size_t f = 0; f < g.n; f++) {
        all[n++] = g.fam[f].f.score_fault;
        for (size_t k = 0; k < g.fam[f].f.n_grad_faults; k++) all[n++] = g.fam[f].f.grad_faults[k];
    }
    all[n++] = LS_PARITY_EP_FAULT;
    for (size_t k = 0; k < n; k++) {
        int seen = 0;
        for (size_t j = 0; j < k && !seen; j++) seen = strcmp(all[j], all[k]) == 0;
        if (!seen && i-- == 0) return all[k];
    }
    return NULL;
}
