/*
 * test_rng.h — the kernel tests' deterministic random numbers (xorshift64, Marsaglia 2003) and a
 * little-endian f16 store. Header-only, every function static. Each test file defines
 * TEST_RNG_SEED before including it: its random data, and so the margins its tolerances were set
 * on, stay its own.
 */
#ifndef ATTND_TEST_RNG_H
#define ATTND_TEST_RNG_H

#include <stdint.h>
#include <string.h>

#ifndef TEST_RNG_SEED
#error "define TEST_RNG_SEED before including test_rng.h"
#endif

static uint64_t rng_state = TEST_RNG_SEED;

static inline uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static inline float rndf(void) { return (float)((double)(rnd() & 0xFFFFFF) / 8388608.0 - 1.0); }

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

#endif
