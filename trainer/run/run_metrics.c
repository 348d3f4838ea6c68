/* run_metrics.c - step_metrics event, --metrics JSONL and the step line. */
#include "trainer/run/run_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/format/atomic_file.h"
#include "receipts/format/json_util.h"
#include "receipts/writing/trace_writer.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/run/metrics_plot.h"

ls_status ls_run_metrics_open(ls_run_metrics_sink *m, const char *path, char *err, size_t err_len) {
    *m = (ls_run_metrics_sink){.path = path, .fd = -1};
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, err_len, "%s: %s%s", path, strerror(errno),
                 errno == EEXIST ? " (metrics files are never overwritten)" : "");
        return LS_ERR_IO;
    }
    m->fd = fd;
    m->open = 1;
    return LS_OK;
}

ls_status ls_run_metrics_close(ls_run_metrics_sink *m, char *err, size_t err_len) {
    if (!m->open) return LS_OK;
    m->open = 0;
    if (close(m->fd) == 0) return LS_OK;
    if (err && err_len) snprintf(err, err_len, "%s: closing the metrics file failed: %s", m->path, strerror(errno));
    return LS_ERR_IO;
}

ls_status ls_run_metrics_append(ls_run_metrics_sink *m, const char *text, size_t len, char *err, size_t err_len) {
    if (!m->open) return LS_OK;
    char *line = ls_mem_alloc(LS_MEM_SCRATCH, len + 1);
    if (!line) {
        snprintf(err, err_len, "%s: out of memory for a line of %zu bytes", m->path, len + 1);
        return LS_ERR_NOMEM;
    }
    memcpy(line, text, len);
    line[len] = '\n';
    size_t done = 0;
    int why = 0;
    while (done <= len) {
        ssize_t k = write(m->fd, line + done, len + 1 - done);
        if (k > 0) done += (size_t)k;
        else if (k < 0 && errno == EINTR) continue;
        else {
            why = k < 0 ? errno : EIO; /* a write of nothing: no progress is possible */
            break;
        }
    }
    ls_mem_free(line);
    if (done == len + 1) {
        m->end += (int64_t)done;
        return LS_OK;
    }
    /* no partial line stays behind: back to the end of the last whole line */
    char undo[160] = "";
    if (done > 0 && ftruncate(m->fd, (off_t)m->end) != 0)
        snprintf(undo, sizeof undo, "; truncating it back to %lld bytes failed too (%s): its last line is partial",
                 (long long)m->end, strerror(errno));
    snprintf(err, err_len, "%s: writing a line failed after %zu of its %zu bytes: %s%s", m->path, done, len + 1,
             strerror(why), undo);
    close(m->fd);
    m->open = 0;
    return LS_ERR_IO;
}

static void fill(ls_trace_step_metrics *t, const ls_train_args *a, int64_t s, ls_objective_kind objective,
                 const ls_step_result *r, int64_t wall_ns) {
    *t = (ls_trace_step_metrics){
        .step = s, .prefix_frozen = r->prefix_frozen != 0,
        .objective = objective == LS_OBJECTIVE_SFT ? LS_TRACE_OBJECTIVE_SFT : LS_TRACE_OBJECTIVE_GRPO,
        .reward_mean = r->reward_mean, .reward_std = r->reward_std, .reward_min = r->reward_min,
        .reward_max = r->reward_max, .has_reward_parts = r->has_reward_parts != 0,
        .reward_retrieval = r->reward_retrieval, .reward_format = r->reward_format, .adv_mean = r->adv_mean,
        .adv_std = r->adv_std, .loss = r->loss + 0.0, .loss_policy = r->loss_policy + 0.0,
        .loss_kl = r->loss_kl + 0.0, .kl_mean = r->kl_mean, .clip_fraction = r->clip_fraction,
        .ratio_min = r->ratio_min, .ratio_mean = r->ratio_mean, .ratio_max = r->ratio_max,
        .response_len_mean = r->response_len_mean, .tokens = r->tokens, .grad_norm = r->grad_norm,
        .lr = a->step.lr, .step_wall_s = (double)wall_ns * 1e-9, .has_grad_compare = r->has_grad_compare != 0,
        .has_grad_cosine = r->has_grad_cosine != 0, .grad_cosine = r->grad_cosine,
        .grad_norm_detached = r->grad_norm_detached, .grad_norm_full = r->grad_norm_full};
    for (int ph = LS_PHASE_CAPTURE; ph <= LS_PHASE_PROMPT_BWD; ph++)
        if (r->phase_ns[ph] > 0 && r->phase_tokens[ph] > 0) {
            t->tokens_per_s[ph] = (double)r->phase_tokens[ph] / ((double)r->phase_ns[ph] * 1e-9);
            t->tokens_per_s_mask |= 1u << ph;
        }
}

static void stderr_line(ls_run_obs *ob, const ls_trace_step_metrics *t, int64_t steps_total) {
    char line[512];
    char of[32] = "";
    if (steps_total > 0) snprintf(of, sizeof of, "/%lld", (long long)steps_total);
    int n = snprintf(line, sizeof line, "[step %lld%s] %s%s reward %.4f", (long long)t->step + 1, of,
                     t->objective == LS_TRACE_OBJECTIVE_SFT ? "sft" : "grpo",
                     t->prefix_frozen ? " (prefix-frozen)" : "", t->reward_mean);
    if (t->has_reward_parts && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, " (retrieval %.4f, format %.4f)", t->reward_retrieval,
                      t->reward_format);
    if (n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n,
                 "  loss %.5f  kl %.3g  clip %.3f  ratio %.3f..%.3f  grad-norm %.3e  lr %.3g  %.2f s", t->loss,
                 t->kl_mean, t->clip_fraction, t->ratio_min, t->ratio_max, t->grad_norm, t->lr, t->step_wall_s);
    n = (int)strlen(line);
    if (t->has_grad_compare && (size_t)n < sizeof line) { /* --grad-cosine-every */
        if (t->has_grad_cosine)
            snprintf(line + n, sizeof line - (size_t)n, "  cos(detached, full) %.6f (norms %.3e, %.3e)",
                     t->grad_cosine, t->grad_norm_detached, t->grad_norm_full);
        else
            snprintf(line + n, sizeof line - (size_t)n, "  cos(detached, full) undefined (norms %.3e, %.3e)",
                     t->grad_norm_detached, t->grad_norm_full);
    }
    ls_run_obs_print(ob, line);
}

/* The line's "groups": each group's own figures (B > 1).  LS_OK or LS_ERR_NOMEM. */
static ls_status add_groups(cJSON *o, const ls_step_result *gr, size_t B) {
    if (!cJSON_AddNumberToObject(o, "prompts_per_step", (double)B)) return LS_ERR_NOMEM;
    cJSON *arr = cJSON_AddArrayToObject(o, "groups");
    if (!arr) return LS_ERR_NOMEM;
    for (size_t b = 0; b < B; b++) {
        const ls_step_result *g = &gr[b];
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return LS_ERR_NOMEM;
        }
        const char *k[] = {"reward_mean", "reward_std", "reward_min", "reward_max", "adv_std", "loss",
                           "loss_policy", "loss_kl", "kl_mean", "clip_fraction", "ratio_mean"};
        double v[] = {g->reward_mean, g->reward_std, g->reward_min, g->reward_max, g->adv_std, g->loss + 0.0,
                      g->loss_policy + 0.0, g->loss_kl + 0.0, g->kl_mean, g->clip_fraction, g->ratio_mean};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            if (!cJSON_AddNumberToObject(e, k[i], v[i])) return LS_ERR_NOMEM;
        if (g->has_reward_parts && (!cJSON_AddNumberToObject(e, "reward_retrieval", g->reward_retrieval) ||
                                    !cJSON_AddNumberToObject(e, "reward_format", g->reward_format)))
            return LS_ERR_NOMEM;
        if (!cJSON_AddNumberToObject(e, "tokens", (double)g->tokens)) return LS_ERR_NOMEM;
    }
    return LS_OK;
}

ls_status ls_run_metrics_emit(ls_run_metrics_sink *m, ls_run_obs *ob, const ls_train_args *a, int64_t s,
                              ls_objective_kind objective, const ls_step_result *res, const ls_step_result *group_res,
                              size_t B, int64_t step_wall_ns, char *err, size_t err_len) {
    ls_trace_step_metrics t;
    fill(&t, a, s, objective, res, step_wall_ns);
    ls_run_obs_note(ob, ls_trace_emit_step_metrics(ob->w, &t));
    if (!ob->quiet) stderr_line(ob, &t, ob->steps_total); /* quiet: --quiet, or a rank other than 0 */
    if (!m->open) return LS_OK;
    cJSON *o = NULL;
    char *text = NULL, why[1024] = "";
    size_t len = 0;
    ls_status st = ls_trace_step_metrics_to_json(&t, &o);
    if (st != LS_OK) ls_trace_step_metrics_check(&t, why, sizeof why); /* names the field */
    else if (B > 1 && group_res && (st = add_groups(o, group_res, B)) != LS_OK)
        snprintf(why, sizeof why, "the groups' figures: %s", ls_status_str(st));
    else if ((st = ls_json_print_canonical(o, &text, &len, why, sizeof why)) == LS_OK) /* keys sorted, numbers exact */
        st = ls_run_metrics_append(m, text, len, why, sizeof why);
    if (st != LS_OK) {
        if (!why[0]) snprintf(why, sizeof why, "%s", ls_status_str(st));
        snprintf(err, err_len, "--metrics: step %lld not written: %s; the file ends at the step before", (long long)s + 1,
                 why);
        if (m->open) { /* the line was never begun: the file is whole, but it stops here */
            close(m->fd);
            m->open = 0;
        }
    }
    free(text);
    cJSON_Delete(o);
    return st;
}

ls_status ls_run_metrics_plot(const char *metrics_path, const char *svg_path, int has_parts, const char *title,
                              char *err, size_t err_len) {
    const char *all[4] = {"reward_mean", "reward_retrieval", "reward_format", "kl_mean"};
    const char *few[2] = {"reward_mean", "kl_mean"};
    const char *const *names = has_parts ? all : few;
    size_t n = has_parts ? 4 : 2;
    unsigned char right[4] = {0, 0, 0, 0};
    right[n - 1] = 1;
    ls_metrics_table t = {0};
    char *svg = NULL;
    size_t len = 0;
    ls_status st = ls_metrics_read(&t, metrics_path, 0, names, n, err, err_len);
    if (st == LS_OK) {
        ls_plot_file f = {.table = &t, .dash = LS_PLOT_DASH_AUTO};
        ls_plot_spec s = {.n_files = 1, .files = &f, .n_series = n, .names = names, .right = right, .title = title,
                          .smooth = ls_plot_auto_smooth(t.n_points)}; /* a long run: its trend over faint points */
        st = ls_plot_svg(&s, &svg, &len, err, err_len);
    }
    if (st == LS_OK) st = ls_atomic_write(svg_path, svg, len, err, err_len);
    ls_mem_free(svg);
    ls_metrics_table_free(&t);
    return st;
}
