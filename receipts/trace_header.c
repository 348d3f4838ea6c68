/* trace_header.c - the header line (line 1) of a trace as the writer
 * writes it (trace_header.h): the check of the caller's ls_trace_header and
 * its JSON text.  The reader's check of a header it reads is in
 * trace_reader.c. */
#include "receipts/trace_header.h"

#include <stdio.h>
#include <string.h>

ls_status ls_trace_header_check(const char *path, const ls_trace_header *h, const char *host) {
    const char *bad = NULL;
    char tmp[160];
    if (!ls_trace_is_token(h->run_id)) bad = "run_id must be a non-empty printable ASCII token";
    else if (h->world < 1) bad = "world must be >= 1";
    else if (h->rank < 0 || h->rank >= h->world) bad = "rank must be in [0, world)";
    else if (!ls_trace_is_token(host)) bad = "host must be a non-empty printable ASCII token";
    else if (h->pid < 0 || h->pid > LS_TRACE_MAX_INT) bad = "pid out of range";
    else if (h->start_unix_ns < 0) bad = "start_unix_ns must be >= 0";
    else if (h->n_groups > 0 && h->groups == NULL) bad = "groups is NULL but n_groups > 0";
    for (size_t g = 0; bad == NULL && g < h->n_groups; g++) {
        const ls_trace_group *gr = &h->groups[g];
        if (!ls_trace_is_token(gr->name)) {
            snprintf(tmp, sizeof tmp, "groups[%zu].name must be a printable ASCII token", g);
            bad = tmp;
            break;
        }
        for (size_t j = 0; j < g; j++)
            if (strcmp(h->groups[j].name, gr->name) == 0) {
                snprintf(tmp, sizeof tmp, "groups[%zu].name \"%s\" repeats groups[%zu]", g, gr->name, j);
                bad = tmp;
            }
        if (bad == NULL && (gr->n_members == 0 || gr->members == NULL)) {
            snprintf(tmp, sizeof tmp, "groups[%zu] (\"%s\") has no members", g, gr->name);
            bad = tmp;
        }
        for (size_t m = 0; bad == NULL && m < gr->n_members; m++) {
            if (gr->members[m] < 0 || gr->members[m] >= h->world) {
                snprintf(tmp, sizeof tmp, "groups[%zu].members[%zu] = %d is not a rank of world %d", g,
                         m, (int)gr->members[m], (int)h->world);
                bad = tmp;
            }
            for (size_t j = 0; bad == NULL && j < m; j++)
                if (gr->members[j] == gr->members[m]) {
                    snprintf(tmp, sizeof tmp, "groups[%zu].members[%zu] repeats rank %d", g, m,
                             (int)gr->members[m]);
                    bad = tmp;
                }
        }
    }
    if (bad) {
        fprintf(stderr, "%s: trace header: %s\n", path, bad);
        return LS_ERR_ARG;
    }
    return LS_OK;
}

void ls_trace_header_put(ls_trace_json_buf *b, const ls_trace_header *h, const char *host,
                         int64_t pid, int64_t start_ns) {
    b->mark = b->len;
    ls_trace_json_put_lit(b, "{\"v\":1,\"kind\":\"" LS_TRACE_HEADER_KIND
                             "\",\"schema\":\"" LS_TRACE_HEADER_SCHEMA "\"");
    ls_trace_json_put_key_str(b, "run_id", h->run_id);
    ls_trace_json_put_key_i64(b, "rank", h->rank);
    ls_trace_json_put_key_i64(b, "world", h->world);
    ls_trace_json_put_key_str(b, "host", host);
    ls_trace_json_put_key_i64(b, "pid", pid);
    ls_trace_json_put_key_i64(b, "start_unix_ns", start_ns);
    ls_trace_json_put_key(b, "groups");
    ls_trace_json_put_raw(b, "[", 1);
    for (size_t g = 0; g < h->n_groups; g++) {
        ls_trace_json_put_lit(b, g ? ",{\"name\":" : "{\"name\":");
        ls_trace_json_put_str(b, h->groups[g].name);
        ls_trace_json_put_lit(b, ",\"members\":[");
        for (size_t m = 0; m < h->groups[g].n_members; m++) {
            if (m) ls_trace_json_put_raw(b, ",", 1);
            ls_trace_json_put_i64(b, h->groups[g].members[m]);
        }
        ls_trace_json_put_lit(b, "]}");
    }
    ls_trace_json_put_raw(b, "]", 1);
    ls_trace_json_put_key_str(b, "tool", h->tool ? h->tool : "longstraw");
    ls_trace_json_put_raw(b, "}\n", 2);
}
