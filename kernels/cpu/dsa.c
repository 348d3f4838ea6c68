/* dsa.c - the DSA lightning indexer's scores and deterministic top-k
 * selection (score descending, then position ascending; docs/model.md §0, §2.2),
 * per block and merged over blocks/ranks.  A bounded heap keeps the k best
 * candidates seen so far, so a row costs O(n log k).  See dsa.h. */
#include "kernels/dsa.h"

#include <assert.h>
#include <math.h>
#include <omp.h>

#include "kernels/scratch.h"

/* The tie rule: (sa, pa) ranks before (sb, pb). */
static int ranks_before(ls_real sa, int64_t pa, ls_real sb, int64_t pb)
{
    return sa > sb || (sa == sb && pa < pb);
}

/* A bounded selection over one output row: pos/score [cap] hold a heap of
 * n entries whose root (index 0) is the WORST kept entry. */
typedef struct {
    int64_t *pos;
    ls_real *score;
    size_t n, cap;
} topk_heap;

static void heap_swap(topk_heap *hp, size_t a, size_t b)
{
    int64_t p = hp->pos[a];
    ls_real s = hp->score[a];
    hp->pos[a] = hp->pos[b];
    hp->score[a] = hp->score[b];
    hp->pos[b] = p;
    hp->score[b] = s;
}

/* Entry a is worse than entry b. */
static int heap_worse(const topk_heap *hp, size_t a, size_t b)
{
    return ranks_before(hp->score[b], hp->pos[b], hp->score[a], hp->pos[a]);
}

static void sift_down(topk_heap *hp, size_t i, size_t n)
{
    for (;;) {
        size_t l = 2 * i + 1, w = i;
        if (l < n && heap_worse(hp, l, w)) w = l;
        if (l + 1 < n && heap_worse(hp, l + 1, w)) w = l + 1;
        if (w == i) return;
        heap_swap(hp, i, w);
        i = w;
    }
}

static void heap_offer(topk_heap *hp, ls_real score, int64_t pos)
{
    assert(!isnan(score));
    if (hp->cap == 0) return;
    if (hp->n < hp->cap) {
        size_t i = hp->n++;
        hp->pos[i] = pos;
        hp->score[i] = score;
        while (i > 0 && heap_worse(hp, i, (i - 1) / 2)) {
            heap_swap(hp, i, (i - 1) / 2);
            i = (i - 1) / 2;
        }
    } else if (ranks_before(score, pos, hp->score[0], hp->pos[0])) {
        hp->pos[0] = pos;
        hp->score[0] = score;
        sift_down(hp, 0, hp->n);
    }
}

/* Sort the kept entries best first (repeatedly move the worst to the end)
 * and pad the row with -1 / -INFINITY. */
static void heap_finish(topk_heap *hp)
{
    for (size_t n = hp->n; n > 1; n--) {
        heap_swap(hp, 0, n - 1);
        sift_down(hp, 0, n - 1);
    }
    for (size_t i = hp->n; i < hp->cap; i++) {
        hp->pos[i] = -1;
        hp->score[i] = -INFINITY;
    }
}

static topk_heap heap_row(int64_t *sel_pos, ls_real *sel_score, size_t t, size_t k_top)
{
    topk_heap hp = {sel_pos + t * k_top, sel_score + t * k_top, 0, k_top};
    return hp;
}

/* Visible keys [0, n) of the block for query position q_pos. */
static size_t n_visible(int64_t q_pos, int64_t k_pos0, size_t Tk)
{
    if (q_pos < k_pos0) return 0;
    uint64_t n = (uint64_t)(q_pos - k_pos0) + 1;
    return n < (uint64_t)Tk ? (size_t)n : Tk;
}

/* Scores of one query against keys [0, n). */
static void score_row(ls_real *I, const ls_real *q, const ls_real *w, const ls_real *k_I,
                      size_t n, size_t H_I, size_t d_I)
{
    for (size_t s = 0; s < n; s++) {
        const ls_real *ks = k_I + s * d_I;
        ls_real acc = 0;
        for (size_t h = 0; h < H_I; h++) {
            const ls_real *qh = q + h * d_I;
            ls_real qk = 0;
#pragma omp simd reduction(+ : qk)
            for (size_t i = 0; i < d_I; i++) qk += qh[i] * ks[i];
            if (qk > 0) acc += w[h] * qk;
        }
        I[s] = acc;
    }
}

void LS_K(ls_dsa_scores)(ls_real *I, const ls_real *q_I, const ls_real *w,
                         const ls_real *k_I, size_t Tq, size_t Tk, size_t H_I,
                         size_t d_I, int64_t q_pos0, int64_t k_pos0)
{
    /* rows are independent, each one thread's (the same bits for any thread count) */
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < Tq; t++) {
        size_t n = n_visible(q_pos0 + (int64_t)t, k_pos0, Tk);
        ls_real *row = I + t * Tk;
        score_row(row, q_I + t * H_I * d_I, w + t * H_I, k_I, n, H_I, d_I);
        for (size_t s = n; s < Tk; s++) row[s] = -INFINITY;
    }
}

void LS_K(ls_dsa_select)(int64_t *sel_pos, ls_real *sel_score, const ls_real *I,
                         size_t Tq, size_t Tk, size_t k_top, int64_t k_pos0)
{
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < Tq; t++) {
        topk_heap hp = heap_row(sel_pos, sel_score, t, k_top);
        const ls_real *row = I + t * Tk;
        for (size_t s = 0; s < Tk; s++)
            if (row[s] != -INFINITY) heap_offer(&hp, row[s], k_pos0 + (int64_t)s);
        heap_finish(&hp);
    }
}

size_t LS_K(ls_dsa_topk_workspace)(size_t Tk) { return Tk; }

void LS_K(ls_dsa_topk)(int64_t *sel_pos, ls_real *sel_score, const ls_real *q_I,
                       const ls_real *w, const ls_real *k_I, size_t Tq, size_t Tk,
                       size_t H_I, size_t d_I, int64_t q_pos0, int64_t k_pos0,
                       size_t k_top, ls_real *workspace)
{
    /* queries on OpenMP threads, each with its own score row from the kernel scratch (without it: one
       thread, the caller's workspace); every query one thread's whole selection */
    size_t nt = (size_t)omp_get_max_threads();
    if (Tq < 2 || nt < 2 || omp_in_parallel()) nt = 1;
    const ls_kernel_allocator *al = ls_kernel_scratch_get();
    ls_real *own = nt > 1 ? al->alloc(nt * (Tk ? Tk : 1) * sizeof *own) : NULL;
    if (!own) nt = 1;
#pragma omp parallel num_threads((int)nt)
    {
        ls_real *row = own ? own + (size_t)omp_get_thread_num() * (Tk ? Tk : 1) : workspace;
#pragma omp for schedule(static)
        for (size_t t = 0; t < Tq; t++) {
            size_t n = n_visible(q_pos0 + (int64_t)t, k_pos0, Tk);
            score_row(row, q_I + t * H_I * d_I, w + t * H_I, k_I, n, H_I, d_I);
            topk_heap hp = heap_row(sel_pos, sel_score, t, k_top);
            for (size_t s = 0; s < n; s++) heap_offer(&hp, row[s], k_pos0 + (int64_t)s);
            heap_finish(&hp);
        }
    }
    if (own) al->release(own);
}

void LS_K(ls_dsa_merge)(int64_t *sel_pos, ls_real *sel_score,
                        const int64_t *const *cand_pos,
                        const ls_real *const *cand_score, size_t n_lists,
                        size_t Tq, size_t k_in, size_t k_top)
{
    for (size_t t = 0; t < Tq; t++) {
        topk_heap hp = heap_row(sel_pos, sel_score, t, k_top);
        for (size_t r = 0; r < n_lists; r++) {
            const int64_t *p = cand_pos[r] + t * k_in;
            const ls_real *s = cand_score[r] + t * k_in;
            for (size_t j = 0; j < k_in; j++)
                if (p[j] >= 0) heap_offer(&hp, s[j], p[j]);
        }
        heap_finish(&hp);
    }
}

void LS_K(ls_dsa_localize)(int64_t *sel_local, const int64_t *sel_pos, size_t Tq,
                           size_t k, int64_t k_pos0, size_t Tk)
{
    for (size_t i = 0; i < Tq * k; i++) {
        int64_t p = sel_pos[i];
        sel_local[i] = (p >= 0 && p >= k_pos0 && p - k_pos0 < (int64_t)Tk) ? p - k_pos0 : -1;
    }
}
