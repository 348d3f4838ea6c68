/* rng.c - xoshiro256** seeded through splitmix64; Box-Muller normals. */
#include "trainer/base/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ls_rng_seed(ls_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ls_rng_next(ls_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double ls_rng_uniform(ls_rng *r) { return (double)(ls_rng_next(r) >> 11) * 0x1.0p-53; }

double ls_rng_normal(ls_rng *r) {
    double u1 = ls_rng_uniform(r), u2 = ls_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t ls_rng_below(ls_rng *r, uint64_t n) {
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = ls_rng_next(r); while (x >= lim);
    return x % n;
}

uint64_t ls_rng_derive(uint64_t seed, const char *label) {
    uint64_t h = 1469598103934665603ull ^ seed; /* FNV-1a over the label, mixed with the seed */
    for (const unsigned char *p = (const unsigned char *)label; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return splitmix64(&h);
}
