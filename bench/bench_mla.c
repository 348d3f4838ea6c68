/* bench_mla.c - the mla family on one rank (docs/benchmarks.md), float32:
 *  1. carried-state bytes per token and layer, measured from the captured
 *     state, against the analytical (kv_rank + d_rope + index_dim) reals;
 *  2. LongStraw (detached, full) against the naive strategy at growing
 *     prompt lengths: peak memory by category and wall time per phase of
 *     one step's gradients;
 *  3. the moe_dispatch peak against the MoE chunk size (LongStraw full),
 *     with the one-chunk figure the memory plan uses (ls_mla_dispatch_bytes).
 * Each cell runs in a fresh child process (its own peaks and RSS).
 *
 *   bench_mla [--config FILE] [--prompts "256 1024 4096"] [--naive-max N]
 *             [--chunk-prompt P] [--group G] [--response-len R]
 * Prints tables; asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainer/base/mem_tracker.h"
#include "trainer/families/mla/mla_layer.h"
#include "trainer/step/step.h"
#include "trainer/families/families.h"

enum { NPH = 5 }; /* capture rollout score replay prompt_bwd */

typedef struct {
    int ok;
    double seconds, phase_s[NPH];
    size_t peak[LS_MEM_COUNT], peak_total, rss, state_bytes, state_analytical, plan_dispatch;
    int n_layers;
} cell;

typedef struct {
    const char *cfg;
    size_t P, G, R, chunk;
    ls_strategy s;
    ls_grad_mode gm;
} cell_in;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_cell(const cell_in *in, cell *out) {
    memset(out, 0, sizeof *out);
    ls_model_config c;
    char err[512];
    if (ls_config_load(&c, in->cfg, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    if (c.family != &ls_family_desc_mla) {
        fprintf(stderr, "%s: family '%s', not mla\n", in->cfg, ls_family_name(c.family));
        return;
    }
    ls_mla_seg_opts so_mla = ls_mla_get_seg_opts_f32();
    so_mla.moe_chunk = in->chunk;
    ls_mla_set_seg_opts_f32(&so_mla);
    ls_objective o;
    ls_objective_defaults(&o);
    o.grad_mode = in->gm;
    ls_params *p = NULL;
    if (ls_params_init_f32(&p, &c, &o, 1, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    ls_task t;
    ls_batch *b = NULL;
    if (ls_task_make(&t, in->P, 8, 1) != LS_OK || ls_batch_alloc(&b, in->G) != LS_OK ||
        ls_batch_set_prompt(b, t.prompt, in->P) != LS_OK)
        return;
    ls_step_options so;
    ls_step_options_defaults(&so);
    so.strategy = in->s;
    so.G = in->G;
    so.R = in->R;
    ls_step_result res;
    ls_mem_reset_peaks();
    double t0 = now();
    ls_status st = ls_step_grads_f32(p, b, &t, &so, NULL, &res, err, sizeof err);
    out->seconds = now() - t0;
    if (st != LS_OK) {
        fprintf(stderr, "P=%zu: %s\n", in->P, err);
        return;
    }
    ls_mem_stats ms;
    ls_mem_snapshot(&ms);
    out->ok = 1;
    for (int i = 0; i < NPH; i++) out->phase_s[i] = (double)res.phase_ns[i] * 1e-9;
    for (int i = 0; i < LS_MEM_COUNT; i++) out->peak[i] = ms.peak_bytes[i];
    out->peak_total = ms.peak_total;
    out->rss = ls_mem_peak_rss_bytes();
    out->state_bytes = res.prompt_state_bytes;
    out->state_analytical = res.prompt_state_analytical;
    out->n_layers = c.n_layers;
    out->plan_dispatch = ls_mla_dispatch_bytes_f32(&c, in->chunk ? in->chunk : 256, 0, 1);
}

static cell fork_cell(const cell_in *in) {
    int fd[2];
    cell c = {0};
    if (pipe(fd) != 0) return c;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        run_cell(in, &c);
        ssize_t w = write(fd[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fd[1]);
    ssize_t r = read(fd[0], &c, sizeof c);
    close(fd[0]);
    waitpid(pid, NULL, 0);
    if (r != (ssize_t)sizeof c) c.ok = 0;
    return c;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

static int parse_size(const char *s, size_t lo, size_t *out) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || v < lo || v > (1ull << 24)) return -1;
    *out = (size_t)v;
    return 0;
}

int main(int argc, char **argv) {
    const char *cfg = "configs/mla-tiny.json", *prompts = "256 1024 4096";
    size_t naive_max = 4096, chunk_prompt = 1024, G = 2, R = 8;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = v == NULL;
        if (!bad && !strcmp(a, "--config")) cfg = v;
        else if (!bad && !strcmp(a, "--prompts")) prompts = v;
        else if (!bad && !strcmp(a, "--naive-max")) bad = parse_size(v, 2, &naive_max);
        else if (!bad && !strcmp(a, "--chunk-prompt")) bad = parse_size(v, 2, &chunk_prompt);
        else if (!bad && !strcmp(a, "--group")) bad = parse_size(v, 1, &G);
        else if (!bad && !strcmp(a, "--response-len")) bad = parse_size(v, 1, &R);
        else bad = 1;
        if (bad) {
            fprintf(stderr, "usage: bench_mla [--config FILE] [--prompts \"256 1024 4096\"] [--naive-max N] "
                            "[--chunk-prompt P] [--group G] [--response-len R] (bad or unknown '%s')\n", a);
            return 2;
        }
    }
    size_t Ps[16], nP = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", prompts);
    for (char *save = NULL, *tk = strtok_r(buf, " ,", &save); tk && nP < 16; tk = strtok_r(NULL, " ,", &save))
        if (parse_size(tk, 64, &Ps[nP++]) != 0) {
            fprintf(stderr, "bench_mla: --prompts: '%s' is not an integer >= 64\n", tk);
            return 2;
        }
    printf("# bench_mla: %s, float32, G=%zu, R=%zu, one step's gradients (capture..finalize), MoE chunk 256\n", cfg,
           G, R);
    const struct {
        ls_strategy s;
        ls_grad_mode g;
        const char *name;
    } modes[] = {{LS_STRATEGY_LONGSTRAW, LS_GRAD_DETACHED, "longstraw detached"},
                 {LS_STRATEGY_LONGSTRAW, LS_GRAD_FULL, "longstraw full"},
                 {LS_STRATEGY_NAIVE, LS_GRAD_FULL, "naive"}};
    static const ls_mem_cat cats[] = {LS_MEM_PROMPT_STATE, LS_MEM_PROMPT_GRAD, LS_MEM_BRANCH, LS_MEM_CHECKPOINT,
                                      LS_MEM_DISPATCH, LS_MEM_SCRATCH};
    cell first = {0};
    printf("\n## peak memory by category (MiB) and time per phase (s)\n\n");
    printf("| strategy | P | prompt_state | prompt_state_grad | branch_graph | checkpoints | moe_dispatch | scratch "
           "| total | RSS | capture | rollout | score | replay | prompt_bwd | step |\n");
    printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (size_t i = 0; i < nP; i++)
        for (size_t m = 0; m < 3; m++) {
            if (modes[m].s == LS_STRATEGY_NAIVE && Ps[i] > naive_max) {
                printf("| %s | %zu | (skipped: --naive-max %zu) |\n", modes[m].name, Ps[i], naive_max);
                continue;
            }
            cell_in in = {cfg, Ps[i], G, R, 0, modes[m].s, modes[m].g};
            cell c = fork_cell(&in);
            if (!c.ok) {
                printf("| %s | %zu | failed (see stderr) |\n", modes[m].name, Ps[i]);
                continue;
            }
            if (m == 0 && !first.ok) first = c;
            printf("| %s | %zu |", modes[m].name, Ps[i]);
            for (size_t k = 0; k < sizeof cats / sizeof cats[0]; k++) printf(" %.2f |", mib(c.peak[cats[k]]));
            printf(" %.2f | %.1f |", mib(c.peak_total), mib(c.rss));
            for (int k = 0; k < NPH; k++) printf(" %.3f |", c.phase_s[k]);
            printf(" %.2f |\n", c.seconds);
        }
    if (first.ok && first.n_layers > 0) {
        size_t P0 = Ps[0] - 1; /* captured positions */
        double per = (double)first.state_bytes / (double)P0 / first.n_layers;
        double ana = (double)first.state_analytical / (double)P0 / first.n_layers;
        printf("\n## carried state per token and layer (P=%zu, %d layers)\n\n", Ps[0], first.n_layers);
        printf("| measured B | analytical B ((kv_rank + d_rope + index_dim) x 4) | ratio |\n|--:|--:|--:|\n");
        printf("| %.1f | %.1f | %.4f |\n", per, ana, ana > 0 ? per / ana : 0.0);
    }
    printf("\n## moe_dispatch peak against the MoE chunk (longstraw full, P=%zu)\n\n", chunk_prompt);
    printf("| chunk tokens | moe_dispatch peak MiB | plan (one chunk, with backward) MiB | step s |\n|--:|--:|--:|--:|\n");
    static const size_t chunks[] = {16, 64, 256, 1024};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        cell_in in = {cfg, chunk_prompt, G, R, chunks[k], LS_STRATEGY_LONGSTRAW, LS_GRAD_FULL};
        cell c = fork_cell(&in);
        if (!c.ok) {
            printf("| %zu | failed (see stderr) |\n", chunks[k]);
            continue;
        }
        printf("| %zu | %.3f | %.3f | %.2f |\n", chunks[k], mib(c.peak[LS_MEM_DISPATCH]), mib(c.plan_dispatch),
               c.seconds);
    }
    return 0;
}
