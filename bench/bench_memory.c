/* bench_memory.c - LongStraw (detached, full) against the naive strategy on
 * hybrid-tiny, float32: peak memory (tracker total, prompt state, branch graph,
 * and process peak RSS) and wall time of one step's gradients, at growing
 * prompt lengths with G = 2 and G = 8; the capture rate in tokens/s and as a
 * fraction of a plain sgemm's rate (the linear-layer roofline of this
 * machine); measured carried-state bytes per token against the analytical
 * figure.  Each cell runs in a fresh child process so peak RSS is its own.
 *
 *   bench_memory [--config FILE] [--max-prompt N] [--naive-max N]
 * Prints tables; asserts nothing. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_step.h"
#include "bench/bench_util.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/step/step.h"
#include "trainer/families/families.h"

typedef struct {
    double seconds, capture_s;
    size_t peak_total, peak_state, peak_branch, peak_ckpt, rss, state_bytes, state_analytical;
    double linear_flops_per_token;
    int ok;
} cell;

static double linear_flops_per_token(const ls_params *p);

static void run_cell(const char *cfg_path, size_t P, size_t G, ls_strategy s, ls_grad_mode gm, cell *out) {
    memset(out, 0, sizeof *out);
    ls_model_config c;
    char err[512];
    if (ls_config_load(&c, cfg_path, err, sizeof err) != LS_OK) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    ls_step_result res;
    ls_params *p = NULL;
    if (bench_step(&c, gm, s, P, G, 8, &res, &out->seconds, &p) != 0) return;
    ls_mem_stats ms;
    ls_mem_snapshot(&ms);
    out->ok = 1;
    out->capture_s = res.phase_ns[0] * 1e-9;
    out->peak_total = ms.peak_total;
    out->peak_state = ms.peak_bytes[LS_MEM_PROMPT_STATE];
    out->peak_branch = ms.peak_bytes[LS_MEM_BRANCH];
    out->peak_ckpt = ms.peak_bytes[LS_MEM_CHECKPOINT] + ms.peak_bytes[LS_MEM_PROMPT_GRAD];
    out->rss = ls_mem_peak_rss_bytes();
    out->state_bytes = res.prompt_state_bytes;
    out->state_analytical = res.prompt_state_analytical;
    out->linear_flops_per_token = linear_flops_per_token(p);
}

/* 2 x (every linear weight a prompt token multiplies, adapters included). */
static double linear_flops_per_token(const ls_params *p) {
    double f = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (t->ndim != 2 || t == p->embed || t == p->lm_head || strstr(t->name, "conv")) continue;
        f += 2.0 * (double)t->numel;
    }
    return f;
}

/* Run a cell in a child so its peak RSS is its own. */
typedef struct {
    const char *cfg;
    size_t P, G;
    ls_strategy s;
    ls_grad_mode gm;
} cell_in;

static void run_cell_of(const void *arg, void *out) {
    const cell_in *in = arg;
    run_cell(in->cfg, in->P, in->G, in->s, in->gm, out);
}

static cell fork_cell(const char *cfg, size_t P, size_t G, ls_strategy s, ls_grad_mode gm) {
    cell_in in = {cfg, P, G, s, gm};
    cell c = {0};
    if (bench_in_child(run_cell_of, &in, &c, sizeof c) != 0) c.ok = 0;
    return c;
}

static double sgemm_gflops(size_t T, size_t d) {
    size_t n = 4 * d;
    float *A = calloc(T * d, sizeof *A), *B = calloc(n * d, sizeof *B), *C = calloc(T * n, sizeof *C);
    for (size_t i = 0; i < T * d; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < n * d; i++) B[i] = (float)(i % 5) * 0.1f;
    int reps = 0;
    double t0 = now_s(), dt;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)n, (int)d, 1.f, A, (int)d, B, (int)d,
                    0.f, C, (int)n);
        reps++;
        dt = now_s() - t0;
    } while (dt < 0.3);
    free(A);
    free(B);
    free(C);
    return 2.0 * (double)T * (double)n * (double)d * reps / dt * 1e-9;
}

static double mib(size_t b) { return b / 1048576.0; }

int main(int argc, char **argv) {
    const char *cfg = "configs/hybrid-tiny.json";
    size_t max_prompt = 8192, naive_max = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) cfg = argv[i + 1];
        else if (!strcmp(argv[i], "--max-prompt")) max_prompt = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--naive-max")) naive_max = strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_memory [--config FILE] [--max-prompt N] [--naive-max N]\n");
            return 2;
        }
    }
    printf("# bench_memory: %s, float32, R=8, one step's gradients (capture..finalize)\n", cfg);
    printf("%-9s %-8s %3s %8s %10s %10s %10s %10s %10s %9s\n", "strategy", "grad", "G", "P", "peak MiB",
           "state MiB", "branch MiB", "ckpt+grad", "RSS MiB", "time s");
    const struct { ls_strategy s; ls_grad_mode g; const char *sn, *gn; } modes[] = {
        {LS_STRATEGY_LONGSTRAW, LS_GRAD_DETACHED, "longstraw", "detached"},
        {LS_STRATEGY_LONGSTRAW, LS_GRAD_FULL, "longstraw", "full"},
        {LS_STRATEGY_NAIVE, LS_GRAD_FULL, "naive", "full"},
    };
    cell cap[32];
    size_t caps_P[32], ncap = 0;
    for (size_t P = 4096; P <= max_prompt; P *= 2) {
        for (size_t G = 2; G <= 8; G += 6) {
            for (size_t m = 0; m < 3; m++) {
                if (modes[m].s == LS_STRATEGY_NAIVE && P > naive_max) {
                    printf("%-9s %-8s %3zu %8zu %10s   (skipped: --naive-max %zu)\n", modes[m].sn, modes[m].gn, G, P,
                           "-", naive_max);
                    continue;
                }
                cell c = fork_cell(cfg, P, G, modes[m].s, modes[m].g);
                if (!c.ok) {
                    printf("%-9s %-8s %3zu %8zu   failed (see stderr)\n", modes[m].sn, modes[m].gn, G, P);
                    continue;
                }
                printf("%-9s %-8s %3zu %8zu %10.1f %10.2f %10.2f %10.2f %10.1f %9.2f\n", modes[m].sn, modes[m].gn,
                       G, P, mib(c.peak_total), mib(c.peak_state), mib(c.peak_branch), mib(c.peak_ckpt), mib(c.rss),
                       c.seconds);
                fflush(stdout);
                if (m == 0 && G == 2 && ncap < 32) {
                    cap[ncap] = c;
                    caps_P[ncap++] = P;
                }
            }
        }
    }
    double roof = sgemm_gflops(4096, 64);
    printf("\n# capture rate (LongStraw detached, G=2); roofline = plain sgemm [4096x64]x[64x256]: %.1f GFLOP/s\n", roof);
    printf("%8s %12s %14s %12s %16s %16s\n", "P", "capture s", "tokens/s", "% roofline", "state B/token",
           "analytical B/tok");
    for (size_t i = 0; i < ncap; i++) {
        cell *c = &cap[i];
        double tps = (double)(caps_P[i] - 1) / c->capture_s;
        double frac = tps * c->linear_flops_per_token * 1e-9 / roof;
        printf("%8zu %12.3f %14.0f %11.1f%% %16.1f %16.1f\n", caps_P[i], c->capture_s, tps, 100 * frac,
               (double)c->state_bytes / (double)(caps_P[i] - 1),
               (double)c->state_analytical / (double)(caps_P[i] - 1));
    }
    return 0;
}
