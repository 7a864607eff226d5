/*
 * quant_scalar.c — the formats' scalars: half and bfloat conversions, and the value tables of the
 * 4-bit codebooks (IQ4_NL, and E2M1 of MXFP4 / NVFP4). A leaf: every format file (quant_format.c,
 * quant_iq.c) and kernel reads it, and it calls nothing of theirs.
 */
#include <string.h>

#include "quant.h"
#include "quant_impl.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float quant_f16_to_f32(uint16_t h) {
    /* Branch-free: with the half's exponent and mantissa shifted into place, adding 224 to the
     * exponent and scaling by 2^-112 rebiases normals, and keeps inf/nan at exponent 255; a
     * subnormal's value mant * 2^-24 is taken from the float 2^-1 * (1 + mant * 2^-23) - 0.5. */
    uint32_t w = (uint32_t)h << 16;
    uint32_t sign = w & 0x80000000u, two_w = w + w; /* exponent and mantissa, sign shifted out */
    float normal = bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1p-112f;
    float subnormal = bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = two_w < (1u << 27) ? f32_bits(subnormal) : f32_bits(normal);
    return bits_f32(sign | r);
}

uint16_t quant_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFF;
    if (ax > 0x7F800000) return sign | 0x7E00 | (uint16_t)((ax >> 13) & 0x3FF); /* nan stays (quiet) nan */
    if (ax >= 0x477FF000) return sign | 0x7C00; /* >= 65520 rounds to inf; inf stays inf */
    if (ax >= 0x38800000) {                    /* normal half: rebias exponent, round the 13 dropped bits */
        uint32_t r = (ax - 0x38000000) >> 13;
        uint32_t rem = ax & 0x1FFF;
        if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    if (ax < 0x33000000) return sign; /* below 2^-25: rounds to zero */
    /* subnormal half: value / 2^-24, rounded to nearest even (may round up to the smallest normal) */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return sign | (uint16_t)r;
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
