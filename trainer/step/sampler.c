/* sampler.c - nucleus sampling by a log-prob histogram, a partial gather
 * and a sort of the gathered tokens only (see sampler.h for the contract). */
#include "trainer/step/sampler.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define BUCKETS 256          /* histogram buckets below the maximum ... */
#define BUCKET_SCALE 4.0     /* ... of 1/4 nat each (a power of two: d * 4 is exact) */
#define SPAN (BUCKETS / BUCKET_SCALE) /* 64 nats */
#define OVER BUCKETS         /* the bucket of the finite log-probs further below */
#define NONE (BUCKETS + 1)   /* -inf and NaN: probability 0, never gathered */
#define NB (BUCKETS + 2)
#define RADIX_BITS 11
#define RADIX_SIZE (1u << RADIX_BITS)
#define INSERTION_MAX 48     /* buckets up to this size sort by insertion */

/* sort keys: the order-preserving bits of -logp in the real type's width */
#if LS_REAL_IS_F64
typedef uint64_t skey;
#else
typedef uint32_t skey;
#endif
#define KEY_BITS (8 * (int)sizeof(skey))
#define RADIX_PASSES ((KEY_BITS + RADIX_BITS - 1) / RADIX_BITS)
#define RADIX_LEN ((size_t)RADIX_PASSES * RADIX_SIZE)
#define COUNT_LEN (RADIX_LEN + 3 * (size_t)NB) /* radix digits; bucket counts, starts, fill positions */

typedef struct {
    skey key;
    int32_t id;
} rec;

size_t LS_K(ls_sampler_ws_bytes)(size_t V) {
    return 2 * V * sizeof(rec) + V * sizeof(double) + COUNT_LEN * sizeof(uint32_t);
}

ls_status LS_K(ls_sampler_ws_init)(ls_sampler_ws *ws, size_t V, ls_mem_cat cat) {
    memset(ws, 0, sizeof *ws);
    if (V == 0 || V > (size_t)INT32_MAX) return LS_ERR_ARG;
    ws->rec = ls_mem_alloc(cat, V * sizeof(rec));
    ws->tmp = ls_mem_alloc(cat, V * sizeof(rec));
    ws->p = ls_mem_alloc(cat, V * sizeof *ws->p);
    ws->count = ls_mem_alloc(cat, COUNT_LEN * sizeof *ws->count);
    if (!ws->rec || !ws->tmp || !ws->p || !ws->count) {
        LS_K(ls_sampler_ws_free)(ws);
        return LS_ERR_NOMEM;
    }
    ws->V = V;
    return LS_OK;
}

void LS_K(ls_sampler_ws_free)(ls_sampler_ws *ws) {
    if (!ws) return;
    ls_mem_free(ws->rec);
    ls_mem_free(ws->tmp);
    ls_mem_free(ws->p);
    ls_mem_free(ws->count);
    memset(ws, 0, sizeof *ws);
}

/* Bits of -x that sort ascending as x sorts descending (x not NaN; -0 = +0). */
static skey desc_key(ls_real x) {
    ls_real y = -(x + (ls_real)0);
    skey b;
    memcpy(&b, &y, sizeof b);
    return (b >> (KEY_BITS - 1)) ? (skey)~b : (skey)(b | ((skey)1 << (KEY_BITS - 1)));
}

/* The bucket of x below the maximum m (finite): monotone non-increasing in
 * x, so the buckets in order are consecutive runs of the token order. */
static size_t bucket_of(ls_real m, ls_real x) {
    double d = (double)m - (double)x;
    if (d < SPAN) return (size_t)(d * BUCKET_SCALE);
    return x > (ls_real)-INFINITY ? OVER : NONE;
}

/* Stable insertion sort by key ascending. */
static void insertion_sort(rec *a, size_t k) {
    for (size_t i = 1; i < k; i++) {
        rec x = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1].key > x.key) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Stable LSD radix sort of a [k] by key ascending into a itself, tmp [k]
 * scratch, count [RADIX_LEN].  A digit every key shares costs no pass. */
static void radix_sort(rec *a, rec *tmp, size_t k, uint32_t *count) {
    memset(count, 0, RADIX_LEN * sizeof *count);
    for (size_t i = 0; i < k; i++)
        for (int d = 0; d < RADIX_PASSES; d++)
            count[(size_t)d * RADIX_SIZE + ((a[i].key >> (d * RADIX_BITS)) & (RADIX_SIZE - 1))]++;
    rec *src = a, *dst = tmp;
    for (int d = 0; d < RADIX_PASSES; d++) {
        uint32_t *c = count + (size_t)d * RADIX_SIZE;
        int shift = d * RADIX_BITS;
        if (c[(src[0].key >> shift) & (RADIX_SIZE - 1)] == k) continue;
        uint32_t sum = 0;
        for (size_t b = 0; b < RADIX_SIZE; b++) {
            uint32_t n = c[b];
            c[b] = sum;
            sum += n;
        }
        for (size_t i = 0; i < k; i++) dst[c[(src[i].key >> shift) & (RADIX_SIZE - 1)]++] = src[i];
        rec *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, k * sizeof *a);
}

/* The last bucket that the nucleus can need: the first where a lower bound
 * of the mass of the buckets so far (each token of bucket b has p above
 * e^(m - (b+1)/4)) reaches top_p; OVER when none does. */
static size_t last_bucket(const uint32_t *hist, ls_real m, double top_p) {
    double lower = 0;
    for (size_t b = 0; b < BUCKETS; b++) {
        lower += (double)hist[b] * exp((double)m - (double)(b + 1) / BUCKET_SCALE);
        if (lower >= top_p) return b;
    }
    return OVER;
}

/* The last of the order: the minimum (NaN as -inf), its largest id. */
static int32_t last_in_order(const ls_real *logp, size_t V) {
    ls_real mn = (ls_real)INFINITY;
    size_t last = 0;
    for (size_t i = 0; i < V; i++) {
        ls_real x = isnan(logp[i]) ? (ls_real)-INFINITY : logp[i];
        if (x <= mn) {
            mn = x;
            last = i;
        }
    }
    return (int32_t)last;
}

int32_t LS_K(ls_sampler_top_p)(const ls_real *logp, size_t V, double top_p, ls_rng *r, ls_sampler_ws *ws) {
    assert(V >= 1 && V <= ws->V);
    double u01 = ls_rng_uniform(r); /* exactly one draw on every path */
    /* the first of the order: the maximum, its smallest id (NaN never compares greater) */
    ls_real m = (ls_real)-INFINITY;
    size_t first = 0;
    for (size_t i = 0; i < V; i++)
        if (logp[i] > m) {
            m = logp[i];
            first = i;
        }
    double pm = exp((double)m);
    if (!(top_p > 0) || isinf(pm)) return (int32_t)first; /* the nucleus is the first token */
    if (pm == 0) return last_in_order(logp, V); /* no mass: the nucleus is all V, the draw falls through */

    rec *a = ws->rec, *tmp = ws->tmp;
    double *p = ws->p;
    uint32_t *hist = ws->count + RADIX_LEN, *start = hist + NB, *fill = start + NB;
    memset(hist, 0, NB * sizeof *hist);
    for (size_t i = 0; i < V; i++) hist[bucket_of(m, logp[i])]++;
    size_t lastb = last_bucket(hist, m, top_p);
    for (;;) {
        /* scatter the tokens of buckets 0..lastb, by bucket, in id order */
        start[0] = 0;
        for (size_t b = 0; b <= lastb; b++) start[b + 1] = start[b] + hist[b];
        memcpy(fill, start, (lastb + 1) * sizeof *fill);
        for (size_t i = 0; i < V; i++) {
            size_t b = bucket_of(m, logp[i]);
            if (b <= lastb) a[fill[b]++] = (rec){desc_key(logp[i]), (int32_t)i};
        }
        /* sort bucket after bucket while the running sum goes on */
        double mass = 0;
        size_t n = 0;
        int reached = 0;
        for (size_t b = 0; b <= lastb && !reached; b++) {
            size_t lo = start[b], hi = start[b + 1];
            if (hi - lo <= INSERTION_MAX) insertion_sort(a + lo, hi - lo);
            else radix_sort(a + lo, tmp + lo, hi - lo, ws->count);
            while (n < hi && (n == 0 || mass < top_p)) {
                p[n] = exp((double)logp[a[n].id]);
                mass += p[n++];
            }
            reached = n > 0 && !(mass < top_p);
        }
        /* The bound leaves at least (1 - e^-1/4) of the top token's mass
         * spare, more than the rounding of any running sum over <= 2^24
         * terms, so this fallback to every bucket is defensive. */
        if (!reached && lastb != OVER) {
            lastb = OVER;
            continue;
        }
        double u = u01 * mass, acc = 0;
        for (size_t i = 0; i < n; i++) {
            acc += p[i];
            if (u < acc) return a[i].id;
        }
        /* the nucleus is a[0..n) when reached, else all V (the rest have p = 0) */
        return reached ? a[n - 1].id : last_in_order(logp, V);
    }
}
