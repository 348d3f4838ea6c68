/* rng.h - the deterministic random numbers of the trainer (initialisation,
 * sampling, the synthetic task): splitmix64-seeded xoshiro256**, plus
 * uniform and normal draws.  Same seed, same numbers, on every machine. */
#ifndef LS_TRAINER_RNG_H
#define LS_TRAINER_RNG_H
#include <stdint.h>

typedef struct { uint64_t s[4]; } ls_rng;

void ls_rng_seed(ls_rng *r, uint64_t seed);
uint64_t ls_rng_next(ls_rng *r);
double ls_rng_uniform(ls_rng *r);           /* [0, 1) with 53 random bits */
double ls_rng_normal(ls_rng *r);            /* standard normal (Box-Muller) */
uint64_t ls_rng_below(ls_rng *r, uint64_t n); /* uniform in [0, n), n > 0 */
/* A seed derived from a base seed and a label (e.g. a tensor name). */
uint64_t ls_rng_derive(uint64_t seed, const char *label);
#endif
