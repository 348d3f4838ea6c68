/* bench_sgemm.c - the machine's sgemm rate, the ceiling the speed tables
 * quote their FLOP rates against: C = A B of N x N float32 matrices
 * (OpenBLAS, its own threads), repeated for about SECONDS, best rate.
 *
 *   bench_sgemm [N] [SECONDS]      (defaults 1024, 2)
 * Prints "sgemm N=... GFLOP/s X" and nothing else; asserts nothing.
 *
 *   bench_sgemm copy [MIB] [SECONDS]   (defaults 256, 1)
 * The memory rate the roofline's bytes are quoted against: memcpy of MIB
 * MiB, best rate counting the bytes read and written; prints
 * "copy MiB=... GB/s X".  One thread (memcpy). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int copy_rate(int argc, char **argv) {
    long mib = argc > 2 ? atol(argv[2]) : 256;
    double secs = argc > 3 ? atof(argv[3]) : 1.0;
    if (mib < 1 || mib > 4096 || !(secs > 0 && secs < 600)) {
        fprintf(stderr, "usage: bench_sgemm copy [MIB in 1..4096] [SECONDS in (0, 600)]\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        free(a);
        free(b);
        return 1;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 0, t_end = now() + secs;
    do {
        double t0 = now();
        memcpy(b, a, bytes);
        double r = 2.0 * (double)bytes / (now() - t0) * 1e-9;
        if (r > best) best = r;
    } while (now() < t_end);
    volatile char sink = b[bytes / 2]; /* the copies are used */
    (void)sink;
    printf("copy MiB=%ld GB/s %.1f\n", mib, best);
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "copy") == 0) return copy_rate(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 1024;
    double secs = argc > 2 ? atof(argv[2]) : 2.0;
    if (n < 16 || n > 8192 || !(secs > 0 && secs < 600)) {
        fprintf(stderr, "usage: bench_sgemm [N in 16..8192] [SECONDS in (0, 600)]\n");
        return 2;
    }
    size_t nn = (size_t)n * (size_t)n;
    float *A = malloc(nn * sizeof *A), *B = malloc(nn * sizeof *B), *C = malloc(nn * sizeof *C);
    if (!A || !B || !C) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nn; i++) {
        A[i] = (float)(i % 7) * 0.1f;
        B[i] = (float)(i % 5) * 0.1f;
    }
    double best = 0, t_end = now() + secs;
    do {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.f, A, (int)n, B, (int)n, 0.f,
                    C, (int)n);
        double r = 2.0 * (double)n * (double)n * (double)n / (now() - t0) * 1e-9;
        if (r > best) best = r;
    } while (now() < t_end);
    printf("sgemm N=%ld GFLOP/s %.1f\n", n, best);
    free(A);
    free(B);
    free(C);
    return 0;
}
