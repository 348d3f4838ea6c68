/* run_metrics.c - step_metrics event, --metrics JSONL and the step line. */
#include "trainer/run_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/atomic_file.h"
#include "receipts/json_util.h"
#include "receipts/trace_writer.h"
#include "trainer/mem_tracker.h"
#include "trainer/metrics_plot.h"

ls_status ls_run_metrics_open(ls_run_metrics_sink *m, const char *path, char *err, size_t err_len) {
    m->path = path;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0 || !(m->f = fdopen(fd, "w"))) {
        snprintf(err, err_len, "%s: %s%s", path, strerror(errno),
                 errno == EEXIST ? " (metrics files are never overwritten)" : "");
        if (fd >= 0) close(fd);
        return LS_ERR_IO;
    }
    return LS_OK;
}

void ls_run_metrics_close(ls_run_metrics_sink *m) {
    if (m->f && fclose(m->f) != 0) fprintf(stderr, "longstraw-train: --metrics: %s: %s\n", m->path, strerror(errno));
    m->f = NULL;
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
        .lr = a->step.lr, .step_wall_s = (double)wall_ns * 1e-9};
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
    ls_run_obs_print(ob, line);
}

void ls_run_metrics_emit(ls_run_metrics_sink *m, ls_run_obs *ob, const ls_train_args *a, int64_t s,
                         ls_objective_kind objective, const ls_step_result *res, int64_t step_wall_ns) {
    ls_trace_step_metrics t;
    fill(&t, a, s, objective, res, step_wall_ns);
    ls_run_obs_note(ob, ls_trace_emit_step_metrics(ob->w, &t));
    if (!ob->quiet) stderr_line(ob, &t, ob->steps_total); /* quiet: --quiet, or a rank other than 0 */
    if (!m->f) return;
    cJSON *o = NULL;
    char *text = NULL, why[128];
    size_t len = 0;
    ls_status st = ls_trace_step_metrics_to_json(&t, &o);
    /* one line, keys sorted, every number exact */
    if (st == LS_OK) st = ls_json_print_canonical(o, &text, &len, why, sizeof why);
    /* one write per line: a killed run leaves whole lines */
    if (st == LS_OK && (fprintf(m->f, "%s\n", text) < 0 || fflush(m->f) != 0)) st = LS_ERR_IO;
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-train: --metrics: %s: step %lld not written (%s); the file stops here\n", m->path,
                (long long)s + 1, ls_status_str(st));
        fclose(m->f);
        m->f = NULL;
    }
    free(text);
    cJSON_Delete(o);
}

int ls_run_metrics_plot(const char *metrics_path, const char *svg_path, int has_parts, const char *title) {
    const char *all[4] = {"reward_mean", "reward_retrieval", "reward_format", "kl_mean"};
    const char *few[2] = {"reward_mean", "kl_mean"};
    const char *const *names = has_parts ? all : few;
    size_t n = has_parts ? 4 : 2;
    unsigned char right[4] = {0, 0, 0, 0};
    right[n - 1] = 1;
    ls_metrics_table t = {0};
    char err[1024], *svg = NULL;
    size_t len = 0;
    ls_status st = ls_metrics_read(&t, metrics_path, 0, names, n, err, sizeof err);
    if (st == LS_OK) st = ls_plot_svg(&t, names, right, title, &svg, &len, err, sizeof err);
    if (st == LS_OK) st = ls_atomic_write(svg_path, svg, len, err, sizeof err);
    if (st != LS_OK) fprintf(stderr, "longstraw-train: --plot: %s\n", err);
    ls_mem_free(svg);
    ls_metrics_table_free(&t);
    return st == LS_OK ? 0 : 1;
}
