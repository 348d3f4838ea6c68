/* sampler.c - nucleus sampling by a log-prob histogram, a partial gather
 * and a sort of the gathered tokens only (see sampler.h for the contract). */
#include "trainer/sampler.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define BUCKETS 256          /* histogram buckets below the maximum ... */
#define BUCKET_SCALE 4.0     /* ... of 1/4 nat each (a power of two: d * 4 is exact) */
#define SPAN (BUCKETS / BUCKET_SCALE) /* 64 nats: what lies further is never gathered by threshold */
#define RADIX_BITS 11
#define RADIX_SIZE (1u << RADIX_BITS)
#define RADIX_PASSES 6       /* 6 x 11 bits cover the 64-bit keys */
#define INSERTION_MAX 32     /* gathered sets up to this size sort by insertion */
#define COUNT_LEN ((size_t)RADIX_PASSES * RADIX_SIZE)

size_t LS_K(ls_sampler_ws_bytes)(size_t V) {
    return 2 * V * sizeof(ls_sampler_rec) + COUNT_LEN * sizeof(uint32_t);
}

ls_status LS_K(ls_sampler_ws_init)(ls_sampler_ws *ws, size_t V, ls_mem_cat cat) {
    memset(ws, 0, sizeof *ws);
    if (V == 0 || V > (size_t)INT32_MAX) return LS_ERR_ARG;
    ws->rec = ls_mem_alloc(cat, V * sizeof *ws->rec);
    ws->tmp = ls_mem_alloc(cat, V * sizeof *ws->tmp);
    ws->count = ls_mem_alloc(cat, COUNT_LEN * sizeof *ws->count);
    if (!ws->rec || !ws->tmp || !ws->count) {
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
    ls_mem_free(ws->count);
    memset(ws, 0, sizeof *ws);
}

/* Bits of -x that sort ascending as x sorts descending (x not NaN; -0 = +0). */
static uint64_t desc_key(ls_real x) {
    double y = -((double)x + 0.0);
    uint64_t b;
    memcpy(&b, &y, sizeof b);
    return (b >> 63) ? ~b : b | (UINT64_C(1) << 63);
}

/* Stable insertion sort by key ascending. */
static void insertion_sort(ls_sampler_rec *a, size_t k) {
    for (size_t i = 1; i < k; i++) {
        ls_sampler_rec x = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1].u.key > x.u.key) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Stable LSD radix sort of a [k] by key ascending, tmp [k] scratch, count
 * [COUNT_LEN]; returns whichever of a and tmp holds the result.  A digit
 * that every key shares costs no pass. */
static ls_sampler_rec *radix_sort(ls_sampler_rec *a, ls_sampler_rec *tmp, size_t k, uint32_t *count) {
    memset(count, 0, COUNT_LEN * sizeof *count);
    for (size_t i = 0; i < k; i++) {
        uint64_t key = a[i].u.key;
        for (int d = 0; d < RADIX_PASSES; d++)
            count[(size_t)d * RADIX_SIZE + ((key >> (d * RADIX_BITS)) & (RADIX_SIZE - 1))]++;
    }
    for (int d = 0; d < RADIX_PASSES; d++) {
        uint32_t *c = count + (size_t)d * RADIX_SIZE;
        int shift = d * RADIX_BITS;
        if (c[(a[0].u.key >> shift) & (RADIX_SIZE - 1)] == k) continue;
        uint32_t sum = 0;
        for (size_t b = 0; b < RADIX_SIZE; b++) {
            uint32_t n = c[b];
            c[b] = sum;
            sum += n;
        }
        for (size_t i = 0; i < k; i++) tmp[c[(a[i].u.key >> shift) & (RADIX_SIZE - 1)]++] = a[i];
        ls_sampler_rec *t = a;
        a = tmp;
        tmp = t;
    }
    return a;
}

static ls_sampler_rec *sort_recs(ls_sampler_ws *ws, size_t k) {
    if (k <= INSERTION_MAX) {
        insertion_sort(ws->rec, k);
        return ws->rec;
    }
    return radix_sort(ws->rec, ws->tmp, k, ws->count);
}

/* The running sum over the sorted s [k] until it reaches top_p: the
 * prefix length in *n, the mass returned; each p kept in s[i].u.p. */
static double prefix_mass(const ls_real *logp, ls_sampler_rec *s, size_t k, double top_p, size_t *n) {
    double mass = 0;
    size_t i = 0;
    while (i < k && (i == 0 || mass < top_p)) {
        double p = exp((double)logp[s[i].id]);
        s[i].u.p = p;
        mass += p;
        i++;
    }
    *n = i;
    return mass;
}

int32_t LS_K(ls_sampler_top_p)(const ls_real *logp, size_t V, double top_p, ls_rng *r, ls_sampler_ws *ws) {
    assert(V >= 1 && V <= ws->V);
    double u01 = ls_rng_uniform(r); /* exactly one draw on every path */
    /* the first of the order (max, smallest id) and the last (min, largest id) */
    ls_real m = (ls_real)-INFINITY, mn = (ls_real)INFINITY;
    size_t first = 0, last = 0;
    for (size_t i = 0; i < V; i++) {
        ls_real x = isnan(logp[i]) ? (ls_real)-INFINITY : logp[i];
        if (x > m) m = x, first = i;
        if (x <= mn) mn = x, last = i;
    }
    double pm = exp((double)m);
    if (!(top_p > 0) || isinf(pm)) return (int32_t)first; /* the nucleus is the first token */
    if (pm == 0) return (int32_t)last; /* no mass: the nucleus is all V, the draw falls through */

    /* histogram of d = m - logp, and the bucket where a lower bound of the
     * mass above it reaches top_p; {d < lim} is a prefix of the order */
    uint32_t *hist = ws->count;
    memset(hist, 0, BUCKETS * sizeof *hist);
    for (size_t i = 0; i < V; i++) {
        double d = (double)m - (double)logp[i];
        if (d < SPAN) hist[(size_t)(d * BUCKET_SCALE)]++;
    }
    double lower = 0, lim = 0;
    for (size_t b = 0; b < BUCKETS; b++) {
        lower += (double)hist[b] * exp((double)m - (double)(b + 1) / BUCKET_SCALE);
        if (lower >= top_p) {
            lim = (double)(b + 1) / BUCKET_SCALE;
            break;
        }
    }
    for (int full = lim == 0; full <= 1; full++) {
        size_t k = 0;
        for (size_t i = 0; i < V; i++) {
            ls_real x = logp[i];
            int take = full ? x > (ls_real)-INFINITY : (double)m - (double)x < lim;
            if (take) {
                ws->rec[k].u.key = desc_key(x);
                ws->rec[k].id = (int32_t)i;
                k++;
            }
        }
        ls_sampler_rec *s = sort_recs(ws, k);
        size_t n;
        double mass = prefix_mass(logp, s, k, top_p, &n);
        int reached = !(mass < top_p);
        /* The bound leaves at least (1 - e^-1/4) of the top token's mass spare,
         * more than the rounding of any running sum over <= 2^24 terms, so
         * this fallback to the full order is defensive. */
        if (!reached && !full) continue;
        double u = u01 * mass, acc = 0;
        for (size_t i = 0; i < n; i++) {
            acc += s[i].u.p;
            if (u < acc) return s[i].id;
        }
        /* the nucleus is s[0..n) when reached, else all V (the rest have p = 0) */
        return reached ? s[n - 1].id : (int32_t)last;
    }
    return (int32_t)first; /* not reached: the full pass always returns */
}
