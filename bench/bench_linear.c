/* bench_linear.c - throughput of ls_linear_forward and ls_lora_forward against a
 * plain CBLAS GEMM of the same shape, in GFLOP/s, for float32 and float64.
 *
 * This file is compiled twice, like the kernels: once with LS_REAL_F64 (an
 * object holding bench_linear_run_f64) and once as float32 with LS_BENCH_MAIN
 * (bench_linear_run_f32 and main).  Prints a table; asserts nothing.
 * Usage: bench_linear [min_seconds_per_cell]  (default 0.2) */
#include "kernels/linear.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if LS_REAL_IS_F64
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

void LS_K(bench_linear_run)(double min_s);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    ls_real *x, *W, *A, *B, *y, *xa;
    size_t T, in, out, r;
} shape;

enum { K_LINEAR, K_CBLAS, K_LORA };

static void call(int kind, shape *s)
{
    switch (kind) {
    case K_LINEAR:
        LS_K(ls_linear_forward)(s->y, s->x, s->W, s->T, s->in, s->out, 0);
        break;
    case K_CBLAS:
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->T, (int)s->out, (int)s->in, 1, s->x,
             (int)s->in, s->W, (int)s->in, 0, s->y, (int)s->out);
        break;
    default:
        LS_K(ls_lora_forward)(s->y, s->xa, s->x, s->W, s->A, s->B, 2, s->T, s->in, s->out, s->r);
        break;
    }
}

/* Seconds per call, from a run of at least min_s after one warm-up call. */
static double seconds_per_call(int kind, shape *s, double min_s)
{
    double t0 = now_s();
    call(kind, s);
    double one = now_s() - t0;
    long reps = (long)(min_s / (one > 1e-7 ? one : 1e-7)) + 1;
    for (;;) {
        t0 = now_s();
        for (long i = 0; i < reps; i++)
            call(kind, s);
        double dt = now_s() - t0;
        if (dt >= min_s)
            return dt / (double)reps;
        reps = (long)((double)reps * 1.5 * min_s / (dt > 1e-7 ? dt : 1e-7)) + 1;
    }
}

static ls_real *rand_array(size_t n, unsigned *seed)
{
    ls_real *a = malloc(n * sizeof *a);
    if (!a) {
        fprintf(stderr, "bench_linear: out of memory (%zu reals)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        a[i] = (ls_real)((double)(*seed >> 8) / (double)(1u << 24) - 0.5);
    }
    return a;
}

void LS_K(bench_linear_run)(double min_s)
{
    static const size_t Ts[] = {256, 2048}, ds[] = {64, 256, 1024};
    const size_t r = 4;
    unsigned seed = 12345u;
    for (size_t a = 0; a < sizeof Ts / sizeof Ts[0]; a++)
        for (size_t b = 0; b < sizeof ds / sizeof ds[0]; b++) {
            shape s = {.T = Ts[a], .in = ds[b], .out = ds[b], .r = r};
            s.x = rand_array(s.T * s.in, &seed);
            s.W = rand_array(s.out * s.in, &seed);
            s.A = rand_array(r * s.in, &seed);
            s.B = rand_array(s.out * r, &seed);
            s.y = rand_array(s.T * s.out, &seed);
            s.xa = rand_array(s.T * r, &seed);
            double fl = 2.0 * (double)s.T * (double)s.in * (double)s.out;
            double fl_lora = fl + 2.0 * (double)s.T * (double)r * (double)(s.in + s.out);
            double tl = seconds_per_call(K_LINEAR, &s, min_s);
            double tc = seconds_per_call(K_CBLAS, &s, min_s);
            double tr = seconds_per_call(K_LORA, &s, min_s);
            printf("%-5s %6zu %6zu %12.2f %12.2f %7.3f %14.2f %10.3f\n", LS_REAL_NAME, s.T, s.in,
                   fl / tl * 1e-9, fl / tc * 1e-9, tc / tl, fl_lora / tr * 1e-9, tr / tl);
            fflush(stdout);
            free(s.x);
            free(s.W);
            free(s.A);
            free(s.B);
            free(s.y);
            free(s.xa);
        }
}

#ifdef LS_BENCH_MAIN
void bench_linear_run_f64(double min_s);

int main(int argc, char **argv)
{
    double min_s = argc > 1 ? atof(argv[1]) : 0.2;
    if (!(min_s > 0)) {
        fprintf(stderr, "bench_linear: min_seconds_per_cell must be > 0, got '%s'\n", argv[1]);
        return 2;
    }
    printf("ls_linear_forward / ls_lora_forward (r = 4) vs plain cblas_?gemm, in = out = d, "
           "OpenBLAS threads %d, >= %.2f s per cell\n",
           openblas_get_num_threads(), min_s);
    printf("%-5s %6s %6s %12s %12s %7s %14s %10s\n", "dtype", "T", "d", "linear GF/s",
           "cblas GF/s", "lin/cbl", "lora GF/s", "t_lora/t_lin");
    bench_linear_run_f32(min_s);
    bench_linear_run_f64(min_s);
    return 0;
}
#endif
