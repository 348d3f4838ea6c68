/* linear.c - dense linear layers and LoRA adapters on the CPU, through CBLAS
 * (row-major GEMMs; sgemm or dgemm chosen by the real type).  See linear.h. */
#include "kernels/linear.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#if LS_REAL_IS_F64
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

/* One thread pool: OpenBLAS runs on the calling thread (its own pthreads
 * would fight OpenMP's for the cores, and its threaded paths give other
 * bits than its single-threaded ones: docs/benchmarks.md), and gemm()
 * below splits a GEMM into row blocks that OpenMP threads share.  The
 * blocks depend on the shape alone, never on the thread count, and every
 * element of C is one thread's whole dot product over K: the same bits for
 * any number of threads. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_one_thread(void) { openblas_set_num_threads(1); }

/* Rows of C per block: about 2^18 multiply-adds, at least 16 rows, at most
 * 64 blocks. */
static size_t block_rows(size_t M, size_t N, size_t K)
{
    size_t nk = N * K, rows = nk ? ((size_t)1 << 18) / nk : M;
    if (rows < 16) rows = 16;
    if (rows < (M + 63) / 64) rows = (M + 63) / 64;
    return rows;
}

/* C[M,N] = alpha op(A) op(B) + beta C, all row-major and densely packed. */
static void gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, ls_real alpha,
                 const ls_real *A, const ls_real *B, ls_real beta, ls_real *C)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0) {
        /* op(A) op(B) is the zero matrix: C = beta C (BLAS leaves this to us). */
        size_t n = M * N;
        if (beta == (ls_real)0)
            memset(C, 0, n * sizeof *C);
        else
            for (size_t i = 0; i < n; i++)
                C[i] *= beta;
        return;
    }
    assert(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX); /* CBLAS takes int dimensions */
    pthread_once(&blas_once, blas_one_thread);
    size_t lda = trans_a ? M : K;
    size_t ldb = trans_b ? K : N;
    size_t rows = block_rows(M, N, K), nb = (M + rows - 1) / rows;
#pragma omp parallel for schedule(static) if (nb > 1 && !omp_in_parallel())
    for (size_t b = 0; b < nb; b++) {
        size_t i = b * rows, m = M - i < rows ? M - i : rows;
        const ls_real *Ai = trans_a ? A + i : A + i * lda;
        GEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
             (int)m, (int)N, (int)K, alpha, Ai, (int)lda, B, (int)ldb, beta, C + i * N, (int)N);
    }
}

void LS_K(ls_linear_forward)(ls_real *y /* [T,out] */, const ls_real *x /* [T,in] */,
                             const ls_real *W /* [out,in] */, size_t T, size_t in, size_t out,
                             int accumulate)
{
    gemm(0, 1, T, out, in, 1, x, W, accumulate ? 1 : 0, y);
}

void LS_K(ls_linear_backward)(ls_real *dx /* [T,in] or NULL */, ls_real *dW /* [out,in] or NULL */,
                              const ls_real *dy /* [T,out] */, const ls_real *x /* [T,in] */,
                              const ls_real *W /* [out,in] */, size_t T, size_t in, size_t out,
                              int accumulate_dx)
{
    if (dx)
        gemm(0, 0, T, in, out, 1, dy, W, accumulate_dx ? 1 : 0, dx);
    if (dW)
        gemm(1, 0, out, in, T, 1, dy, x, 1, dW);
}

void LS_K(ls_lora_forward)(ls_real *y /* [T,out] */, ls_real *xa /* [T,r] */,
                           const ls_real *x /* [T,in] */, const ls_real *W /* [out,in] */,
                           const ls_real *A /* [r,in] */, const ls_real *B /* [out,r] */,
                           ls_real s, size_t T, size_t in, size_t out, size_t r)
{
    gemm(0, 1, T, out, in, 1, x, W, 0, y);
    gemm(0, 1, T, r, in, 1, x, A, 0, xa);
    gemm(0, 1, T, out, r, s, xa, B, 1, y);
}

void LS_K(ls_lora_backward)(ls_real *dx /* [T,in] or NULL */, ls_real *dW /* [out,in] or NULL */,
                            ls_real *dA /* [r,in] or NULL */, ls_real *dB /* [out,r] or NULL */,
                            const ls_real *dy /* [T,out] */, const ls_real *x /* [T,in] */,
                            const ls_real *xa /* [T,r] */, const ls_real *W /* [out,in] */,
                            const ls_real *A /* [r,in] */, const ls_real *B /* [out,r] */,
                            ls_real s, size_t T, size_t in, size_t out, size_t r,
                            ls_real *scratch /* [T,r] */, int accumulate_dx)
{
    if (dx || dA)
        gemm(0, 0, T, r, out, 1, dy, B, 0, scratch); /* dy B */
    if (dx) {
        gemm(0, 0, T, in, out, 1, dy, W, accumulate_dx ? 1 : 0, dx);
        gemm(0, 0, T, in, r, s, scratch, A, 1, dx);
    }
    if (dW)
        gemm(1, 0, out, in, T, 1, dy, x, 1, dW);
    if (dA)
        gemm(1, 0, r, in, T, s, scratch, x, 1, dA);
    if (dB)
        gemm(1, 0, out, r, T, s, dy, xa, 1, dB);
}
