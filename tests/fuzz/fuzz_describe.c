/* fuzz_describe.c - libFuzzer target for the canonical description's
 * builders and fold (audit/model/describe.h): arbitrary bytes, parsed as strict
 * JSON, described as a manifest, a receipt (of rank size % 5), a trace
 * header and a configuration, then folded twice over: every source's
 * description followed by the same descriptions again.  Traps when the fold
 * fails for another reason than memory, when a description folded with
 * itself disagrees anywhere (sources that agree among themselves disagree
 * with copies of themselves: the comparison is not a relation of equality),
 * or when a fact of the canonical description has no source. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit/model/describe.h"
#include "receipts/format/json_util.h"

static void on_dis(void *user, const char *path, const char *first, const cJSON *va, const char *other,
                   const cJSON *vb) {
    (void)path;
    (void)first;
    (void)va;
    (void)other;
    (void)vb;
    ++*(size_t *)user;
}

/* Every leaf of canon has a source name at the same place in where. */
static void check_where(const cJSON *canon, const cJSON *where) {
    const cJSON *x;
    cJSON_ArrayForEach(x, canon) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(where, x->string);
        if (w == NULL) __builtin_trap();
        if (cJSON_IsObject(w)) check_where(x, w);
        else if (!cJSON_IsString(w)) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char err[256];
    cJSON *doc = NULL;
    if (ls_json_parse((const char *)data, size, "fuzz", &doc, err, sizeof err) != LS_OK) return 0;
    ls_audit_desc_list l = {0};
    ls_status st = ls_audit_describe_manifest(&l, doc, "manifest.json");
    if (st == LS_OK) st = ls_audit_describe_receipt(&l, doc, "rank-0000/receipt.json", (int64_t)(size % 5));
    if (st == LS_OK) st = ls_audit_describe_header(&l, doc, "rank-0000/events.jsonl.zst (header)", 0);
    if (st == LS_OK) st = ls_audit_describe_config(&l, doc, "configuration", (int64_t)(size % 97));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
    if (st == LS_OK && p) st = ls_audit_describe_config(&l, cJSON_GetObjectItemCaseSensitive(p, "config"), "config",
                                                      (int64_t)(size % 97));
    if (st != LS_OK && st != LS_ERR_NOMEM) __builtin_trap();
    /* the same descriptions a second time: a fact stated twice alike never disagrees */
    size_t n = l.n;
    for (size_t i = 0; st == LS_OK && i < n; i++) {
        if (l.n == l.cap) {
            size_t nc = l.cap ? 2 * l.cap : 8;
            ls_audit_desc *nv = realloc(l.v, nc * sizeof *nv);
            if (nv == NULL) break;
            l.v = nv;
            l.cap = nc;
        }
        ls_audit_desc *e = &l.v[l.n];
        *e = l.v[i];
        e->d = cJSON_Duplicate(l.v[i].d, 1);
        if (e->d == NULL) break;
        l.n++;
    }
    size_t dis = 0;
    cJSON *canon = NULL, *where = NULL;
    uint64_t compared = 0;
    ls_audit_desc_list first = l;
    first.n = n;
    if (ls_audit_desc_merge(&first, &canon, &where, on_dis, &dis, NULL) == LS_OK) {
        size_t base = dis; /* disagreements among the sources themselves (a document is several sources) */
        cJSON_Delete(canon);
        cJSON_Delete(where);
        dis = 0;
        if (ls_audit_desc_merge(&l, &canon, &where, on_dis, &dis, &compared) == LS_OK) {
            /* sources that agree still agree with copies of themselves; sources that disagree disagree again */
            if ((base == 0) != (dis == 0)) __builtin_trap();
            check_where(canon, where);
            cJSON_Delete(canon);
            cJSON_Delete(where);
        }
    }
    ls_audit_desc_list_free(&l);
    cJSON_Delete(doc);
    return 0;
}
